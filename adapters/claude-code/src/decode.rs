//! Hook payloads to signals: the pure part (no I/O).

use patchbay_hooks::payload::{self, Agents, Hook};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::well_known::{
    AgentState, AgentStateChange, ErrorPayload, Payload, Severity, TaskDispatch, TextDelta,
    ToolCall, ToolResult,
};
use patchbay_signal::{Object, Signal, SmallString, now_ms, truncate, well_known};
use serde_json::Value;

/// How much of a prompt goes into `task_dispatch.description`, and of a tool's text
/// output into `tool_result.output`.
const TEXT_KEEP: usize = 4096;

/// How many agents' last states are remembered (sessions and subagents); the oldest are
/// forgotten first, so that a daemon running for months does not grow.
const AGENTS_KEPT: usize = 1024;

/// The fields every hook payload shares; they go to `metadata` (or the envelope), not
/// into `claude_code.<event>` payloads.
const COMMON: [&str; 7] = [
    "session_id",
    "transcript_path",
    "cwd",
    "hook_event_name",
    "permission_mode",
    "prompt_id",
    "effort",
];

/// Decodes Claude Code hook payloads (the JSON a hook receives) into signals, remembering
/// each agent's last state so that `agent_state_change.from` is right.
#[derive(Debug, Clone)]
pub struct HookDecoder {
    source: SmallString,
    agents: Agents<()>,
}

impl HookDecoder {
    /// A decoder whose signals have `source` (`claude_code:NAME`).
    pub fn new(source: impl Into<SmallString>) -> Self {
        HookDecoder {
            source: source.into(),
            agents: Agents::new(AGENTS_KEPT),
        }
    }

    /// The signals' source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Decodes one hook body (bytes as received); a body that is not a JSON object with a
    /// `hook_event_name` gives one bad-input `error` signal.
    pub fn decode_bytes(&mut self, body: &[u8], out: &mut Vec<Decoded>) {
        if let Some(value) = payload::read_body(body, "claude_code", &self.source, out) {
            self.decode(&value, out);
        }
    }

    /// Decodes one hook payload.
    pub fn decode(&mut self, hook: &Value, out: &mut Vec<Decoded>) {
        let Some(event) = hook.get("hook_event_name").and_then(Value::as_str) else {
            out.push(Decoded::BadInput(bad_input_signal(
                &self.source,
                now_ms(),
                &hook.to_string(),
                "claude_code: a hook payload without `hook_event_name`",
            )));
            return;
        };
        let h = Hook::new(hook, event);
        let mut signals = Vec::new();
        match event {
            "PreToolUse" => {
                signals.push(self.tool_call(&h));
                let reason = format!("running {}", h.tool());
                signals.push(self.change(&h, AgentState::Acting, reason));
            }
            "PostToolUse" | "PostToolUseFailure" => {
                signals.push(self.tool_result(&h, event == "PostToolUse"));
                let reason = format!("{} returned", h.tool());
                signals.push(self.change(&h, AgentState::Thinking, reason));
            }
            "PostToolBatch" => signals.push(self.details(&h, "claude_code.tool_batch")),
            "UserPromptSubmit" => {
                signals.push(self.dispatch(&h));
                let reason = "prompt submitted".into();
                signals.push(self.change(&h, AgentState::Thinking, reason));
            }
            "UserPromptExpansion" => {
                signals.push(self.details(&h, "claude_code.user_prompt_expansion"));
            }
            "MessageDisplay" => signals.push(self.text(&h)),
            _ => {
                let lifecycle = lifecycle(&h);
                signals.push(self.details(&h, &event_type(event)));
                if let Some((state, reason)) = lifecycle {
                    signals.push(self.change(&h, state, reason));
                }
                if event == "StopFailure" {
                    signals.push(self.error(&h));
                }
            }
        }
        for mut signal in signals {
            // The typed payloads above are valid by construction; this only guards a field
            // Claude Code might one day send with another shape.
            well_known::repair(&mut signal);
            out.push(Decoded::Signal(signal));
        }
    }

    /// The state `agent` was last seen in (`idle` if never).
    pub fn state_of(&self, agent: &str) -> AgentState {
        self.agents.state_of(agent)
    }

    /// An `agent_state_change` of the hook's agent to `to`, for the gate (`waiting` while
    /// a call is held, and back).
    pub fn state_change(&mut self, hook: &Value, to: AgentState, reason: String) -> Signal {
        self.change(&Hook::of(hook), to, reason)
    }

    /// A signal from this decoder's source with the hook's envelope (correlation id and
    /// metadata): what the gate's own signals use.
    pub fn signal_for(&self, hook: &Value, kind: &str, payload: Object) -> Signal {
        self.envelope(&Hook::of(hook), kind, payload)
    }

    /// The `agent_state_change` of the hook's agent to `to`, from its last state.
    fn change(&mut self, h: &Hook<'_>, to: AgentState, reason: String) -> Signal {
        let payload = self.agents.change(h.agent_id(), to, reason);
        self.envelope(h, AgentStateChange::KIND, payload)
    }

    fn tool_call(&self, h: &Hook<'_>) -> Signal {
        let payload = ToolCall {
            tool_name: h.tool().to_owned(),
            agent_id: h.agent_id(),
            call_id: h.str("tool_use_id").map(str::to_owned),
            input: h.object("tool_input"),
        }
        .into_object();
        self.envelope(h, ToolCall::KIND, payload)
    }

    fn tool_result(&self, h: &Hook<'_>, success: bool) -> Signal {
        let mut output = Object::new();
        if success {
            match h.value.get("tool_response") {
                Some(Value::Object(o)) => output = truncate_strings(o),
                Some(Value::String(s)) => {
                    output.insert("content".into(), truncate(s, TEXT_KEEP).into());
                }
                Some(Value::Null) | None => {}
                Some(other) => {
                    output.insert("content".into(), other.clone());
                }
            }
        } else {
            if let Some(error) = h.str("error") {
                output.insert("error".into(), truncate(error, TEXT_KEEP).into());
            }
            if let Some(interrupt) = h.value.get("is_interrupt") {
                output.insert("isInterrupt".into(), interrupt.clone());
            }
        }
        let payload = ToolResult {
            tool_name: h.tool().to_owned(),
            agent_id: h.agent_id(),
            call_id: h.str("tool_use_id").map(str::to_owned),
            success,
            output: Some(output),
        }
        .into_object();
        let mut signal = self.envelope(h, ToolResult::KIND, payload);
        if let Some(ms) = h.value.get("duration_ms") {
            signal
                .metadata_mut()
                .insert("durationMs".into(), ms.clone());
        }
        signal
    }

    fn dispatch(&self, h: &Hook<'_>) -> Signal {
        let payload = TaskDispatch {
            task_id: h
                .str("prompt_id")
                .unwrap_or_else(|| h.str("session_id").unwrap_or("prompt"))
                .to_owned(),
            from: "user".into(),
            to: h.agent_id(),
            description: h.str("prompt").map(|p| truncate(p, TEXT_KEEP)),
        }
        .into_object();
        self.envelope(h, TaskDispatch::KIND, payload)
    }

    fn text(&self, h: &Hook<'_>) -> Signal {
        let payload = TextDelta {
            agent_id: h.agent_id(),
            content: h.str("delta").unwrap_or_default().to_owned(),
            content_type: Some("markdown".into()),
            index: h.value.get("index").and_then(Value::as_u64),
        }
        .into_object();
        let mut signal = self.envelope(h, TextDelta::KIND, payload);
        for (key, meta) in [
            ("message_id", "messageId"),
            ("turn_id", "turnId"),
            ("final", "final"),
        ] {
            if let Some(v) = h.value.get(key) {
                signal.metadata_mut().insert(meta.into(), v.clone());
            }
        }
        signal
    }

    fn error(&self, h: &Hook<'_>) -> Signal {
        let message = [
            "error",
            "error_message",
            "message",
            "last_assistant_message",
        ]
        .iter()
        .find_map(|k| h.str(k))
        .unwrap_or("the turn failed")
        .to_owned();
        let payload = ErrorPayload {
            agent_id: Some(h.agent_id()),
            code: h
                .str("error_type")
                .or_else(|| h.str("error_code"))
                .map(str::to_owned)
                .or_else(|| Some("claude_code.stop_failure".into())),
            message: truncate(&message, TEXT_KEEP),
            severity: Severity::Error,
        }
        .into_object();
        self.envelope(h, ErrorPayload::KIND, payload)
    }

    /// `claude_code.<event>` with the hook's own fields (the shared ones in metadata).
    fn details(&self, h: &Hook<'_>, kind: &str) -> Signal {
        self.envelope(h, kind, h.fields_except(&COMMON))
    }

    /// The envelope: correlation id (the tool call for tool events, else the turn, else
    /// the session) and metadata (`sessionId`, `cwd`, `transcriptPath`, `permissionMode`,
    /// `promptId`, `hookEvent`, and for subagents `parentAgentId`, `agentType`).
    fn envelope(&self, h: &Hook<'_>, kind: &str, payload: Object) -> Signal {
        let mut signal = Signal::new(kind, self.source.clone(), payload);
        let correlation = if kind == ToolCall::KIND || kind == ToolResult::KIND {
            h.str("tool_use_id").or_else(|| h.str("prompt_id"))
        } else {
            h.str("prompt_id")
        }
        .or_else(|| h.str("session_id"));
        signal.correlation_id = correlation.map(Into::into);
        let meta = signal.metadata_mut();
        meta.insert("hookEvent".into(), h.event.into());
        for (key, name) in [
            ("session_id", "sessionId"),
            ("prompt_id", "promptId"),
            ("cwd", "cwd"),
            ("transcript_path", "transcriptPath"),
            ("permission_mode", "permissionMode"),
        ] {
            if let Some(v) = h.value.get(key).filter(|v| !v.is_null()) {
                meta.insert(name.into(), v.clone());
            }
        }
        if let Some(agent) = h.str("agent_id") {
            meta.insert("subagentId".into(), agent.into());
            if let Some(session) = h.str("session_id") {
                meta.insert("parentAgentId".into(), session.into());
            }
            if let Some(t) = h.str("agent_type") {
                meta.insert("agentType".into(), t.into());
            }
        }
        signal
    }
}

/// The state a lifecycle event moves its agent to, and why.
fn lifecycle(h: &Hook<'_>) -> Option<(AgentState, String)> {
    let reason = |default: &str, key: &str| match h.str(key) {
        Some(detail) if !detail.is_empty() => format!("{default} ({detail})"),
        _ => default.to_owned(),
    };
    Some(match h.event {
        "SessionStart" => (AgentState::Idle, reason("session started", "source")),
        "Stop" => (AgentState::Idle, "turn finished".into()),
        "StopFailure" => (AgentState::Error, reason("turn failed", "error_type")),
        "SessionEnd" => (AgentState::Done, reason("session ended", "reason")),
        "SubagentStart" => (
            AgentState::Thinking,
            reason("subagent started", "agent_type"),
        ),
        "SubagentStop" => (AgentState::Done, reason("subagent finished", "agent_type")),
        "PreCompact" => (AgentState::Thinking, reason("compacting", "trigger")),
        "PostCompact" => (AgentState::Thinking, reason("compacted", "trigger")),
        "PermissionRequest" => (
            AgentState::Waiting,
            format!("asking permission for {}", h.tool()),
        ),
        "Notification" => (AgentState::Waiting, reason("notification", "message")),
        _ => return None,
    })
}

/// `claude_code.<event>` with the event name in snake case (`InstructionsLoaded` →
/// `claude_code.instructions_loaded`).
pub fn event_type(event: &str) -> String {
    format!("claude_code.{}", payload::snake_case(event))
}

/// Long strings of a tool's output object cut to [`TEXT_KEEP`].
fn truncate_strings(o: &Object) -> Object {
    o.iter()
        .map(|(k, v)| match v {
            Value::String(s) => (k.clone(), Value::String(truncate(s, TEXT_KEEP))),
            other => (k.clone(), other.clone()),
        })
        .collect()
}

/// Claude Code's reading of a hook payload.
trait ClaudeHook {
    /// The agent: a subagent's `agent_id` (events of a subagent carry it), else the session.
    fn agent_id(&self) -> String;
}

impl ClaudeHook for Hook<'_> {
    fn agent_id(&self) -> String {
        self.str("agent_id")
            .or_else(|| self.str("session_id"))
            .unwrap_or("claude-code")
            .to_owned()
    }
}

/// The agent a hook payload is about (a subagent's `agent_id`, else the session).
pub fn agent_of(hook: &Value) -> String {
    Hook::new(hook, "").agent_id()
}
