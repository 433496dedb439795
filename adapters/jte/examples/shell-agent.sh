#!/bin/sh
# A command-line "agent" that reports what it does to patchbay with JSON terminal escapes
# (OSC 23198) and obeys the control commands patchbay writes back on its input (OSC 23199):
# control:pause, control:continue, control:quit.
#
#   patchbay wrap --protocol jte -- sh adapters/jte/examples/shell-agent.sh
#
# With no patchbay running it still works: the escapes are removed from the output and
# nothing else happens. SHELL_AGENT_STEPS sets how many steps it takes (default 5).

steps=${SHELL_AGENT_STEPS:-5}

# One signal: ESC ] 23198 ; 0 ; <json> BEL (num-bytes 0: read to the terminator).
emit() { printf '\033]23198;0;%s\007' "$1"; }
say() { printf '%s\r\n' "$1"; }

# Controls arrive as escapes on stdin: read it in raw mode, without echo, and without
# waiting more than 0.1 s for input (min 0 time 1).
interactive=false
if [ -t 0 ]; then
    interactive=true
    saved=$(stty -g)
    trap 'stty "$saved"' EXIT
    stty raw -echo min 0 time 1
fi

state=idle
set_state() {
    emit "{\"command\":\"agent_state_change\",\"data\":{\"agentId\":\"shell-agent\",\"from\":\"$state\",\"to\":\"$1\"}}"
    state=$1
}

# Reads what is pending and acts on the control commands in it.
controls() {
    $interactive || return 0
    input=$(dd bs=4096 count=1 2>/dev/null | tr -d '\000')
    case $input in *'"control:quit"'*)
        say "quit requested"
        emit '{"command":"completion","data":{"taskId":"shell-run","success":false,"result":"quit"}}'
        exit 0 ;;
    esac
    case $input in *'"control:pause"'*) say "paused"; set_state waiting ;; esac
    case $input in *'"control:continue"'*) say "continuing"; set_state acting ;; esac
}

set_state acting
i=1
while [ "$i" -le "$steps" ]; do
    controls
    if [ "$state" = waiting ]; then
        continue
    fi
    say "step $i"
    $interactive || sleep 0.1
    emit "{\"command\":\"tool_call\",\"rpcid\":\"call-$i\",\"data\":{\"agentId\":\"shell-agent\",\"toolName\":\"step\",\"callId\":\"call-$i\",\"input\":{\"n\":$i}}}"
    emit "{\"command\":\"text_delta\",\"data\":{\"agentId\":\"shell-agent\",\"content\":\"did step $i\"}}"
    i=$((i + 1))
done
set_state idle
emit '{"command":"completion","data":{"taskId":"shell-run","success":true,"result":"done"}}'
say "done"
