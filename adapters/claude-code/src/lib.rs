//! The Claude Code adapter: every hook event as signals, and a tool-call gate.
//!
//! Claude Code runs hooks for its events: a command (the event's JSON on stdin) or, with
//! `"type": "http"`, a POST of the same JSON; it obeys the decision in the answer. The
//! recorded payloads and what Claude Code 2.1.328 was seen to do are in
//! `tests/fixtures/README.md`.
//!
//! - [`HookDecoder`] turns hook payloads into signals (pure, no I/O);
//!   [`transcript`] turns the session transcript's assistant messages into `token_usage`.
//! - [`gate`]: which calls are held and the answers Claude Code honours.
//! - [`settings`]: patchbay's hooks in Claude Code's settings files (`patchbay hooks`).
//! - The transport, `type = "claude_code"` ([`ClaudeCodeConfig`]): the endpoint the
//!   hooks post to, `http://LISTEN/hook` (the endpoint itself is every hook agent's,
//!   `patchbay_hooks`; this crate gives it Claude Code's decoder and answers). Under `[sources.NAME]` it only listens; under
//!   `[outputs.NAME]` its `inputs` bring `control.answer` signals for the gate (other
//!   signals are let through unused) and its signals come out of `NAME.inbound`.
//! - [`probe`]: `local:claude-code` for `patchbay discover`.
//!
//! # Signals
//!
//! `agentId` is the session (`session_id`), or for a subagent's events its `agent_id`
//! (then `metadata.parentAgentId` is the session, so that a UI can nest it).
//! `correlationId` is the tool call (`tool_use_id`) for `tool_call`/`tool_result`, else
//! the turn (`prompt_id`), else the session. Metadata: `hookEvent`, `sessionId`,
//! `promptId`, `cwd`, `transcriptPath`, `permissionMode` (and `subagentId`, `agentType`).
//!
//! | event | signals |
//! |---|---|
//! | `PreToolUse` | `tool_call {toolName, input, callId}`, `agent_state_change → acting` |
//! | `PostToolUse` | `tool_result {success: true, output: tool_response}`, `→ thinking` |
//! | `PostToolUseFailure` | `tool_result {success: false, output: {error, isInterrupt}}`, `→ thinking` |
//! | `PostToolBatch` | `claude_code.tool_batch` |
//! | `UserPromptSubmit` | `task_dispatch {taskId: prompt_id, from: "user", to, description: prompt}`, `→ thinking` |
//! | `UserPromptExpansion` | `claude_code.user_prompt_expansion` |
//! | `MessageDisplay` | `text_delta {content: delta, index}` |
//! | `SessionStart` | `claude_code.session_start`, `→ idle` |
//! | `Stop` / `SubagentStop` | `claude_code.stop` / `.subagent_stop`, `→ idle` / `→ done`, then `token_usage` per new assistant message of the transcript |
//! | `StopFailure` | `claude_code.stop_failure`, `→ error`, `error` |
//! | `SessionEnd` | `claude_code.session_end`, `→ done` |
//! | `SubagentStart` | `claude_code.subagent_start`, `→ thinking` |
//! | `PreCompact` / `PostCompact` | `claude_code.pre_compact` / `.post_compact`, `→ thinking` |
//! | `PermissionRequest` / `Notification` | `claude_code.permission_request` / `.notification`, `→ waiting` |
//! | any other event | `claude_code.<event in snake case>` with its fields |
//!
//! A `claude_code.<event>` payload is the hook's JSON without the shared fields (which
//! are in metadata).
//!
//! # The gate
//!
//! With `gate = { tools = ["Bash"], timeout_ms = 30000, default = "ask" }` a
//! `PreToolUse` (or `PermissionRequest`) of a held tool waits: `agent_state_change →
//! waiting` and `approval.requested {promptId, agentId, toolName, input, choices}` go out
//! (`hookEvent`, `timeoutMs`, `default` in metadata), and the approval is on the graph's
//! board (`patchbay_graph::approvals`); a `control.answer {promptId, value}` at the
//! component's inputs (`allow`, `deny`, `ask`; `cancel` is a deny here; without
//! `promptId`: the oldest approval any agent of the graph waits on, when it is this
//! component's) decides it, else the `default` after `timeout_ms`. Then `approval.decided
//! {promptId, value, by}` (`toolName`, `reason` in metadata) and the state change, and
//! Claude Code gets the decision with a reason naming who decided. A `PermissionRequest`
//! for a call already decided at its `PreToolUse` gets the same decision without asking
//! again.

#![warn(missing_docs)]

mod decode;
pub mod gate;
pub mod probe;
pub mod settings;
pub mod transcript;
mod transport;

pub use decode::{ClaudeHooks, HookDecoder, agent_of, event_type};
pub use patchbay_hooks::Settings;
/// The client side of the hook endpoint (shared by every agent's hooks).
pub use patchbay_hooks::client;
pub use transport::{ClaudeCodeConfig, DEFAULT_LISTEN};

use patchbay_graph::{Adapter, ComponentType, options_of};
use patchbay_signal::decode::{DEFAULT_MAX_LINE, LineSplitter, StreamDecoder, line_too_long};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::now_ms;

/// `type = "claude_code"`: the hook endpoint (a source that listens, or an output that
/// also takes `control.answer` for the gate), the decoder of `patchbay parse --protocol
/// claude_code` (hook payloads, one JSON object a line), and the `claude-code` probe.
pub const ADAPTER: Adapter = Adapter::new(
    "claude_code",
    "Claude Code through its hooks, with a tool-call gate",
    &[ComponentType::link(
        "claude_code",
        "Claude Code's hook endpoint: every hook event in, control.answer for the gate",
        patchbay_hooks::build_source::<transport::Claude>,
        patchbay_hooks::build_output::<transport::Claude>,
        options_of::<ClaudeCodeConfig>,
    )],
)
.parse(parse_decoder)
.probes(&[probe::PROBE]);

/// The decoder of `patchbay parse --protocol claude_code`: hook payloads, one JSON object
/// a line (as a command hook would log them).
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(HookLines {
        lines: LineSplitter::new(DEFAULT_MAX_LINE),
        decoder: HookDecoder::new(source),
    })
}

struct HookLines {
    lines: LineSplitter,
    decoder: HookDecoder,
}

impl HookLines {
    fn line(decoder: &mut HookDecoder, line: Result<&str, &str>, out: &mut Vec<Decoded>) {
        let text = match line {
            Ok(text) => text,
            Err(head) => {
                let message = line_too_long(DEFAULT_MAX_LINE);
                let bad = bad_input_signal(decoder.source(), now_ms(), head, &message);
                return out.push(Decoded::BadInput(bad));
            }
        };
        if !text.trim().is_empty() {
            decoder.decode_bytes(text.as_bytes(), out);
        }
    }
}

impl StreamDecoder for HookLines {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let decoder = &mut self.decoder;
        self.lines
            .feed(bytes, |line| Self::line(decoder, line, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let decoder = &mut self.decoder;
        self.lines.finish(|line| Self::line(decoder, line, out));
    }
}
