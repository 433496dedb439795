//! Hook payloads to signals: the pure part (no I/O).

use patchbay_hooks::HookEvents;
use patchbay_hooks::payload::{self, Hook};
use patchbay_signal::well_known::{
    AgentState, ErrorPayload, Payload, Severity, TaskDispatch, TextDelta, ToolCall, ToolResult,
};
use patchbay_signal::{Object, Signal, truncate};
use serde_json::Value;

/// How much of a prompt goes into `task_dispatch.description`, and of a tool's text
/// output into `tool_result.output`.
const TEXT_KEEP: usize = 4096;

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

/// Claude Code's hook payloads: what its [`HookDecoder`] makes of them (see the crate
/// docs for the mapping).
#[derive(Debug, Clone)]
pub struct ClaudeHooks;

/// Decodes Claude Code hook payloads (the JSON a hook receives) into signals, remembering
/// each agent's last state so that `agent_state_change.from` is right.
pub type HookDecoder = patchbay_hooks::HookDecoder<ClaudeHooks>;

impl HookEvents for ClaudeHooks {
    const NAME: &'static str = "claude_code";
    type Kept = ();

    fn agent_id(hook: &Hook<'_>) -> String {
        hook.agent_id()
    }

    fn signals(d: &mut HookDecoder, h: &Hook<'_>, signals: &mut Vec<Signal>) {
        let event = h.event;
        match event {
            "PreToolUse" => {
                signals.push(tool_call(d, h));
                let reason = format!("running {}", h.tool());
                signals.push(d.change(h, AgentState::Acting, reason));
            }
            "PostToolUse" | "PostToolUseFailure" => {
                signals.push(tool_result(d, h, event == "PostToolUse"));
                let reason = format!("{} returned", h.tool());
                signals.push(d.change(h, AgentState::Thinking, reason));
            }
            "PostToolBatch" => signals.push(details(d, h, "claude_code.tool_batch")),
            "UserPromptSubmit" => {
                signals.push(dispatch(d, h));
                let reason = "prompt submitted".into();
                signals.push(d.change(h, AgentState::Thinking, reason));
            }
            "UserPromptExpansion" => {
                signals.push(details(d, h, "claude_code.user_prompt_expansion"));
            }
            "MessageDisplay" => signals.push(text(d, h)),
            _ => {
                let lifecycle = lifecycle(h);
                signals.push(details(d, h, &event_type(event)));
                if let Some((state, reason)) = lifecycle {
                    signals.push(d.change(h, state, reason));
                }
                if event == "StopFailure" {
                    signals.push(error(d, h));
                }
            }
        }
    }

    /// The envelope: correlation id (the tool call for tool events, else the turn, else
    /// the session) and metadata (`sessionId`, `cwd`, `transcriptPath`, `permissionMode`,
    /// `promptId`, `hookEvent`, and for subagents `parentAgentId`, `agentType`).
    fn envelope(d: &HookDecoder, h: &Hook<'_>, kind: &str, payload: Object) -> Signal {
        let mut signal = d.signal(kind, payload);
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

fn tool_call(d: &HookDecoder, h: &Hook<'_>) -> Signal {
    let payload = ToolCall {
        tool_name: h.tool().to_owned(),
        agent_id: h.agent_id(),
        call_id: h.str("tool_use_id").map(str::to_owned),
        input: h.object("tool_input"),
    }
    .into_object();
    d.envelope(h, ToolCall::KIND, payload)
}

fn tool_result(d: &HookDecoder, h: &Hook<'_>, success: bool) -> Signal {
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
    let mut signal = d.envelope(h, ToolResult::KIND, payload);
    if let Some(ms) = h.value.get("duration_ms") {
        signal
            .metadata_mut()
            .insert("durationMs".into(), ms.clone());
    }
    signal
}

fn dispatch(d: &HookDecoder, h: &Hook<'_>) -> Signal {
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
    d.envelope(h, TaskDispatch::KIND, payload)
}

fn text(d: &HookDecoder, h: &Hook<'_>) -> Signal {
    let payload = TextDelta {
        agent_id: h.agent_id(),
        content: h.str("delta").unwrap_or_default().to_owned(),
        content_type: Some("markdown".into()),
        index: h.value.get("index").and_then(Value::as_u64),
    }
    .into_object();
    let mut signal = d.envelope(h, TextDelta::KIND, payload);
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

fn error(d: &HookDecoder, h: &Hook<'_>) -> Signal {
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
    d.envelope(h, ErrorPayload::KIND, payload)
}

/// `claude_code.<event>` with the hook's own fields (the shared ones in metadata).
fn details(d: &HookDecoder, h: &Hook<'_>, kind: &str) -> Signal {
    d.envelope(h, kind, h.fields_except(&COMMON))
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
