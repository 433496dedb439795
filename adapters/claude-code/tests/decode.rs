//! The decoder on every hook payload recorded from the real Claude Code CLI
//! (`tests/fixtures/`, see its README): each scenario's events in arrival order.

use std::collections::HashSet;
use std::path::PathBuf;

use patchbay_claude_code::HookDecoder;
use patchbay_claude_code::transcript::usage_signals;
use patchbay_signal::Signal;
use patchbay_signal::normalize::Decoded;
use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A scenario's hook payloads in arrival order (from its `events.json`).
fn scenario(name: &str) -> Vec<Value> {
    let dir = fixtures().join(name);
    let events: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("events.json")).unwrap()).unwrap();
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let file = e["file"].as_str().unwrap();
            serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap()
        })
        .collect()
}

fn decode_all(hooks: &[Value]) -> Vec<Signal> {
    let mut decoder = HookDecoder::new("claude_code:test");
    let mut out = Vec::new();
    for hook in hooks {
        decoder.decode(hook, &mut out);
    }
    out.into_iter()
        .map(|d| match d {
            Decoded::Signal(s) => s,
            Decoded::BadInput(s) => panic!("bad input: {s:?}"),
        })
        .collect()
}

fn summary(signals: &[Signal]) -> Vec<String> {
    signals
        .iter()
        .map(|s| match s.kind.as_str() {
            "agent_state_change" => format!(
                "state {}->{}",
                s.payload["from"].as_str().unwrap(),
                s.payload["to"].as_str().unwrap()
            ),
            "tool_call" | "tool_result" => {
                format!("{} {}", s.kind, s.payload["toolName"].as_str().unwrap())
            }
            other => other.to_owned(),
        })
        .collect()
}

const SCENARIOS: [&str; 11] = [
    "bash-allow",
    "write-read",
    "tool-failure",
    "deny-http",
    "deny-command-exit2",
    "permission-default",
    "permission-allow-http",
    "subagent",
    "slash-command",
    "http-down",
    "http-slow-timeout",
];

#[test]
fn every_recorded_payload_decodes_to_schema_valid_signals() {
    let mut files = 0;
    for name in SCENARIOS {
        let hooks = scenario(name);
        files += hooks.len();
        for signal in decode_all(&hooks) {
            patchbay_testkit::assert_schema_valid(&signal.to_value());
            assert!(
                patchbay_signal::well_known::check_signal(&signal).is_ok(),
                "{signal:?}"
            );
            assert_eq!(signal.source, "claude_code:test");
            assert!(signal.correlation_id.is_some(), "{signal:?}");
            let meta = signal.metadata.as_ref().unwrap();
            assert!(
                meta.contains_key("sessionId") && meta.contains_key("hookEvent"),
                "{signal:?}"
            );
        }
    }
    // Every payload file of every scenario is listed in its events.json.
    let on_disk = SCENARIOS
        .iter()
        .flat_map(|s| std::fs::read_dir(fixtures().join(s)).unwrap())
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name().into_string().unwrap();
            name.chars().next().unwrap().is_ascii_uppercase() && name.ends_with(".json")
        })
        .count();
    assert_eq!(files, on_disk);
}

#[test]
fn a_tool_call_round() {
    let signals = decode_all(&scenario("bash-allow"));
    assert_eq!(
        summary(&signals),
        [
            "claude_code.instructions_loaded",
            "claude_code.session_start",
            "state idle->idle",
            "task_dispatch",
            "state idle->thinking",
            "text_delta",
            "tool_call Bash",
            "state thinking->acting",
            "tool_result Bash",
            "state acting->thinking",
            "claude_code.tool_batch",
            "text_delta",
            "claude_code.stop",
            "state thinking->idle",
            "claude_code.session_end",
            "state idle->done",
        ]
    );
    let session = "2c7f28ac-d9d8-4b5c-a852-42e0704bcfbb";
    let call = &signals[6];
    assert_eq!(call.payload["agentId"], session);
    assert_eq!(call.payload["callId"], "toolu_68b35c89f1264be38ea54a9c");
    assert_eq!(call.payload["input"]["command"], "echo hello-from-tool");
    assert_eq!(
        call.correlation_id.as_deref(),
        Some("toolu_68b35c89f1264be38ea54a9c")
    );
    assert_eq!(call.meta("cwd").unwrap(), "<PROJECT>");
    assert_eq!(call.meta("permissionMode").unwrap(), "default");
    let result = &signals[8];
    assert_eq!(result.payload["success"], true);
    assert_eq!(result.payload["output"]["stdout"], "hello-from-tool");
    assert_eq!(result.meta("durationMs").unwrap(), 25);
    let dispatch = &signals[3];
    assert_eq!(
        dispatch.payload["taskId"],
        "eee6e49e-d243-48b1-9a8d-b6c02d56e437"
    );
    assert_eq!(
        dispatch.payload["description"],
        "SCENARIO:bash please run the command"
    );
    assert_eq!(
        dispatch.correlation_id.as_deref(),
        Some("eee6e49e-d243-48b1-9a8d-b6c02d56e437")
    );
    let batch = &signals[10];
    assert_eq!(
        batch.payload["tool_calls"][0]["tool_response"],
        "hello-from-tool"
    );
    assert!(batch.payload.get("session_id").is_none());
}

#[test]
fn a_failed_tool_is_an_unsuccessful_result_with_its_error() {
    let signals = decode_all(&scenario("tool-failure"));
    let result = signals.iter().find(|s| s.kind == "tool_result").unwrap();
    assert_eq!(result.payload["success"], false);
    assert_eq!(
        result.payload["output"]["error"],
        "Exit code 3\nfailing-on-purpose"
    );
    assert_eq!(result.payload["output"]["isInterrupt"], false);
}

#[test]
fn a_permission_request_waits() {
    let signals = decode_all(&scenario("permission-default"));
    let i = signals
        .iter()
        .position(|s| s.kind == "claude_code.permission_request")
        .unwrap();
    assert_eq!(signals[i].payload["tool_name"], "Bash");
    assert_eq!(signals[i + 1].payload["to"], "waiting");
    assert_eq!(signals[i + 1].payload["from"], "acting");
}

#[test]
fn subagents_are_agents_of_their_own_nested_in_the_session() {
    let signals = decode_all(&scenario("subagent"));
    let session = "b1ea85d9-df87-4b34-bb49-134d3e5b21c7";
    let sub = "a53b897710a095d7e";
    let start = signals
        .iter()
        .position(|s| s.kind == "claude_code.subagent_start")
        .unwrap();
    assert_eq!(signals[start + 1].payload["agentId"], sub);
    assert_eq!(signals[start + 1].payload["to"], "thinking");
    assert_eq!(signals[start + 1].meta("parentAgentId").unwrap(), session);
    let calls: Vec<_> = signals.iter().filter(|s| s.kind == "tool_call").collect();
    assert_eq!(calls[0].payload["agentId"], session);
    assert_eq!(calls[0].payload["toolName"], "Agent");
    assert_eq!(calls[1].payload["agentId"], sub);
    assert_eq!(calls[1].meta("agentType").unwrap(), "general-purpose");
    let stop = signals
        .iter()
        .position(|s| s.kind == "claude_code.subagent_stop")
        .unwrap();
    assert_eq!(signals[stop + 1].payload["agentId"], sub);
    assert_eq!(signals[stop + 1].payload["to"], "done");
}

#[test]
fn a_slash_command_is_a_dispatch_then_its_expansion() {
    let kinds: Vec<String> = decode_all(&scenario("slash-command"))
        .iter()
        .map(|s| s.kind.to_string())
        .collect();
    let i = kinds.iter().position(|k| k == "task_dispatch").unwrap();
    assert_eq!(kinds[i + 2], "claude_code.user_prompt_expansion");
}

#[test]
fn unknown_events_and_failures() {
    let hook = serde_json::json!({
        "session_id": "s", "hook_event_name": "WorktreeCreate", "name": "w"
    });
    let signals = decode_all(&[hook]);
    assert_eq!(signals[0].kind, "claude_code.worktree_create");
    assert_eq!(signals[0].payload["name"], "w");
    assert_eq!(signals[0].correlation_id.as_deref(), Some("s"));

    let failure = serde_json::json!({
        "session_id": "s", "prompt_id": "p", "hook_event_name": "StopFailure",
        "error_type": "rate_limit", "error": "429 Too Many Requests"
    });
    let signals = decode_all(&[failure]);
    assert_eq!(
        summary(&signals),
        ["claude_code.stop_failure", "state idle->error", "error"]
    );
    assert_eq!(signals[2].payload["code"], "rate_limit");
    assert_eq!(signals[2].payload["message"], "429 Too Many Requests");

    let mut decoder = HookDecoder::new("claude_code:test");
    let mut out = Vec::new();
    decoder.decode_bytes(b"{not json", &mut out);
    decoder.decode(&serde_json::json!({"session_id": "s"}), &mut out);
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(Decoded::is_bad));
    for d in out {
        patchbay_testkit::assert_schema_valid(&d.into_signal().to_value());
    }
}

#[test]
fn token_usage_counts_each_assistant_message_once() {
    // The assistant lines of the recorded stream have the transcript's shape: a message
    // streamed as two blocks is two lines with one id.
    let text = std::fs::read_to_string(fixtures().join("bash-allow/stream.jsonl")).unwrap();
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut seen = HashSet::new();
    let usage = usage_signals(&lines, "claude_code:test", "agent", &mut seen);
    assert_eq!(usage.len(), 2, "two API calls, three assistant lines");
    for s in &usage {
        patchbay_testkit::assert_schema_valid(&s.to_value());
        assert_eq!(s.payload["model"], "claude-opus-5-5");
    }
    assert_eq!(usage[0].payload["promptTokens"], 100);
    assert!(usage_signals(&lines, "claude_code:test", "agent", &mut seen).is_empty());
}
