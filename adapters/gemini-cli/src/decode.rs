//! Hook payloads (the JSON a Gemini CLI command hook reads on stdin) to signals: the pure
//! part (no I/O). See the crate docs for the mapping.

use patchbay_hooks::HookEvents;
use patchbay_hooks::payload::{Hook, snake_case};
use patchbay_signal::well_known::{
    AgentState, Completion, Payload, TaskDispatch, TextDelta, TokenUsage, ToolCall, ToolResult,
    as_count,
};
use patchbay_signal::{Object, Signal, is_informative, now_ms, truncate};
use serde_json::Value;

use crate::fields::{TEXT_KEEP, canonical, fnv1a, timestamp_of, truncate_object, truncate_strings};

/// The prefix of the signal types of Gemini CLI's own events (`gemini_cli.session_start`).
pub const TYPE_PREFIX: &str = "gemini_cli.";

/// The fields every hook payload shares; they go to `metadata` (or the envelope), not
/// into `gemini_cli.<event>` payloads.
const COMMON: [&str; 5] = [
    "session_id",
    "transcript_path",
    "cwd",
    "hook_event_name",
    "timestamp",
];

/// Gemini CLI's hook payloads: what its [`HookDecoder`] makes of them (see the crate docs
/// for the mapping). It keeps, for each session, the task of its prompt in progress (set
/// by `BeforeAgent`, closed by `AfterAgent`).
#[derive(Debug, Clone)]
pub struct GeminiHooks;

/// Decodes Gemini CLI hook payloads into signals, remembering each session's last state
/// (so that `agent_state_change.from` is right) and the task of its prompt in progress.
pub type HookDecoder = patchbay_hooks::HookDecoder<GeminiHooks>;

impl HookEvents for GeminiHooks {
    const NAME: &'static str = "gemini_cli";
    type Kept = Option<String>;

    fn agent_id(hook: &Hook<'_>) -> String {
        hook.agent_id()
    }

    fn signals(d: &mut HookDecoder, h: &Hook<'_>, signals: &mut Vec<Signal>) {
        match h.event {
            "SessionStart" => {
                signals.push(details(d, h, h.rest()));
                let reason = h.reason("session started", "source");
                signals.push(d.change(h, AgentState::Idle, reason));
            }
            "BeforeAgent" => {
                signals.push(dispatch(d, h));
                signals.push(d.change(h, AgentState::Thinking, "prompt submitted".into()));
            }
            "BeforeModel" | "BeforeToolSelection" => {
                signals.push(details(d, h, model_request(h)));
                // Back to thinking after a call that never returned (blocked by a hook)
                // or a notification: the agent is calling the model.
                if !matches!(d.state_of(&h.agent_id()), AgentState::Thinking) {
                    signals.push(d.change(h, AgentState::Thinking, "calling the model".into()));
                }
            }
            "AfterModel" => after_model(d, h, signals),
            "BeforeTool" => {
                signals.push(tool_call(d, h));
                let reason = format!("running {}", h.tool());
                signals.push(d.change(h, AgentState::Acting, reason));
            }
            "AfterTool" => {
                signals.push(tool_result(d, h));
                let reason = format!("{} returned", h.tool());
                signals.push(d.change(h, AgentState::Thinking, reason));
            }
            "AfterAgent" => {
                signals.push(completion(d, h));
                signals.push(d.change(h, AgentState::Idle, "turn finished".into()));
                *d.agents_mut().get_mut(&h.agent_id()) = None;
            }
            "Notification" => {
                signals.push(details(d, h, h.rest()));
                let reason = h.reason("notification", "message");
                signals.push(d.change(h, AgentState::Waiting, reason));
            }
            "SessionEnd" => {
                signals.push(details(d, h, h.rest()));
                let reason = h.reason("session ended", "reason");
                signals.push(d.change(h, AgentState::Done, reason));
            }
            // PreCompress and any event this version does not know: its own fields.
            _ => signals.push(details(d, h, h.rest())),
        }
    }

    /// The envelope: the hook's `timestamp` (else now), the correlation id (the call for
    /// tool events, else the prompt's task, else the session), and metadata (`hookEvent`,
    /// `sessionId`, `cwd`, `transcriptPath`).
    fn envelope(d: &HookDecoder, h: &Hook<'_>, kind: &str, payload: Object) -> Signal {
        let mut signal = d
            .signal(kind, payload)
            .at(timestamp_of(h.value).unwrap_or_else(now_ms));
        let correlation = if kind == ToolCall::KIND || kind == ToolResult::KIND {
            Some(call_id(h.value))
        } else {
            h.str("session_id").and_then(|s| {
                d.agents()
                    .get(s)
                    .and_then(Option::clone)
                    .or_else(|| Some(s.to_owned()))
            })
        };
        signal.correlation_id = correlation.map(Into::into);
        let meta = signal.metadata_mut();
        meta.insert("hookEvent".into(), h.event.into());
        for (key, name) in [
            ("session_id", "sessionId"),
            ("cwd", "cwd"),
            ("transcript_path", "transcriptPath"),
        ] {
            if let Some(v) = h.value.get(key).filter(|v| !v.is_null()) {
                meta.insert(name.into(), v.clone());
            }
        }
        if timestamp_of(h.value).is_none()
            && let Some(t) = h.value.get("timestamp").filter(|v| !v.is_null())
        {
            // Kept as sent when it could not be read as a time.
            meta.insert("hookTimestamp".into(), t.clone());
        }
        signal
    }
}

fn dispatch(d: &mut HookDecoder, h: &Hook<'_>) -> Signal {
    let task = task_id(h.value);
    let agent = h.agent_id();
    *d.agents_mut().get_mut(&agent) = Some(task.clone());
    let payload = TaskDispatch {
        task_id: task,
        from: "user".into(),
        to: agent,
        description: h.str("prompt").map(|p| truncate(p, TEXT_KEEP)),
    }
    .into_object();
    d.envelope(h, TaskDispatch::KIND, payload)
}

fn completion(d: &mut HookDecoder, h: &Hook<'_>) -> Signal {
    let agent = h.agent_id();
    let task = d
        .agents_mut()
        .get_mut(&agent)
        .clone()
        .unwrap_or_else(|| agent.clone());
    let payload = Completion {
        task_id: task,
        agent_id: Some(agent),
        success: true,
        result: h.str("prompt_response").map(|r| truncate(r, TEXT_KEEP)),
    }
    .into_object();
    let mut signal = d.envelope(h, Completion::KIND, payload);
    if let Some(active) = h.value.get("stop_hook_active") {
        signal
            .metadata_mut()
            .insert("stopHookActive".into(), active.clone());
    }
    signal
}

/// `gemini_cli.after_model` for every chunk; a `text_delta` for a chunk with text; a
/// `token_usage` for the chunk that ends a response (the one with a `finishReason`:
/// every chunk repeats the response's running `usageMetadata`, so only the last one
/// is counted).
fn after_model(d: &mut HookDecoder, h: &Hook<'_>, out: &mut Vec<Signal>) {
    out.push(details(d, h, model_request(h)));
    let response = h.value.get("llm_response");
    let text = response
        .and_then(|r| r.get("text"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    if let Some(text) = text {
        let payload = TextDelta {
            agent_id: h.agent_id(),
            content: text.to_owned(),
            content_type: None,
            index: None,
        }
        .into_object();
        out.push(d.envelope(h, TextDelta::KIND, payload));
    }
    let finished = response
        .and_then(|r| r.get("candidates"))
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.get("finishReason").is_some_and(is_informative))
        });
    let usage = response
        .and_then(|r| r.get("usageMetadata"))
        .and_then(Value::as_object);
    if finished && let Some(usage) = usage {
        let n = |k: &str| usage.get(k).and_then(as_count);
        let prompt = n("promptTokenCount").unwrap_or(0);
        let completion = n("candidatesTokenCount").unwrap_or_else(|| {
            n("totalTokenCount")
                .unwrap_or(0)
                .saturating_sub(prompt + n("thoughtsTokenCount").unwrap_or(0))
        });
        let payload = TokenUsage {
            agent_id: h.agent_id(),
            prompt_tokens: prompt,
            completion_tokens: completion,
            model: h.model().map(str::to_owned),
            cost: None,
        }
        .into_object();
        let mut signal = d.envelope(h, TokenUsage::KIND, payload);
        let meta = signal.metadata_mut();
        for (k, v) in usage {
            if k != "promptTokenCount" && k != "candidatesTokenCount" {
                meta.insert(k.clone(), v.clone());
            }
        }
        out.push(signal);
    }
}

fn tool_call(d: &HookDecoder, h: &Hook<'_>) -> Signal {
    let payload = ToolCall {
        tool_name: h.tool().to_owned(),
        agent_id: h.agent_id(),
        call_id: Some(call_id(h.value)),
        input: h.object("tool_input"),
    }
    .into_object();
    let mut signal = d.envelope(h, ToolCall::KIND, payload);
    if let Some(mcp) = h.value.get("mcp_context").filter(|v| is_informative(v)) {
        signal
            .metadata_mut()
            .insert("mcpContext".into(), mcp.clone());
    }
    signal
}

fn tool_result(d: &HookDecoder, h: &Hook<'_>) -> Signal {
    let response = h.value.get("tool_response");
    let success = !response
        .and_then(|r| r.get("error"))
        .is_some_and(|e| !e.is_null() && e != &Value::Bool(false));
    let output = match response {
        Some(Value::Object(o)) => Some(truncate_object(o)),
        Some(Value::Null) | None => None,
        Some(other) => Some(patchbay_signal::object! {"content" => truncate_strings(other)}),
    };
    let payload = ToolResult {
        tool_name: h.tool().to_owned(),
        agent_id: h.agent_id(),
        call_id: Some(call_id(h.value)),
        success,
        output,
    }
    .into_object();
    let mut signal = d.envelope(h, ToolResult::KIND, payload);
    if let Some(mcp) = h.value.get("mcp_context").filter(|v| is_informative(v)) {
        signal
            .metadata_mut()
            .insert("mcpContext".into(), mcp.clone());
    }
    signal
}

/// `gemini_cli.<event>` with `payload`.
fn details(d: &HookDecoder, h: &Hook<'_>, payload: Object) -> Signal {
    d.envelope(h, &event_type(h.event), payload)
}

/// A model event's payload: the request's `model`, `config`, `toolConfig` and the number
/// of its messages (not the messages: the whole conversation, repeated by every event),
/// and for `AfterModel` the chunk: `text`, `finishReason`, `usageMetadata`.
fn model_request(h: &Hook<'_>) -> Object {
    let mut payload = Object::new();
    if let Some(Value::Object(request)) = h.value.get("llm_request") {
        for key in ["model", "config", "toolConfig"] {
            if let Some(v) = request.get(key).filter(|v| is_informative(v)) {
                payload.insert(key.into(), v.clone());
            }
        }
        if let Some(messages) = request.get("messages").and_then(Value::as_array) {
            payload.insert("messageCount".into(), messages.len().into());
        }
    }
    if let Some(Value::Object(response)) = h.value.get("llm_response") {
        if let Some(text) = response.get("text") {
            payload.insert("text".into(), truncate_strings(text));
        }
        let reasons: Vec<Value> = response
            .get("candidates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("finishReason").filter(|r| is_informative(r)).cloned())
            .collect();
        if let Some(reason) = reasons.first() {
            payload.insert("finishReason".into(), reason.clone());
        }
        if let Some(usage) = response.get("usageMetadata").filter(|u| is_informative(u)) {
            payload.insert("usageMetadata".into(), usage.clone());
        }
    }
    // Any other field a later version adds.
    for (k, v) in h.rest() {
        if k != "llm_request" && k != "llm_response" {
            payload.insert(k, v);
        }
    }
    payload
}

/// `gemini_cli.<event>` with the event name in snake case (`BeforeToolSelection` →
/// `gemini_cli.before_tool_selection`).
pub fn event_type(event: &str) -> String {
    format!("{TYPE_PREFIX}{}", snake_case(event))
}

/// The `callId` of a `BeforeTool` or `AfterTool` payload. Gemini CLI's hooks carry no id
/// for a call (the `tool_id` of `--output-format stream-json` is not in them), so it is
/// derived from what both hooks of one call share: `gemini-` and 16 hex digits of the
/// 64-bit FNV-1a hash of the session id, the tool name and the input (its JSON with keys
/// sorted), each followed by a NUL byte. The same for both hooks of a call, and stable
/// across runs and restarts; two identical calls in one session get the same id (one
/// after the other, so they still pair in order).
pub fn call_id(hook: &Value) -> String {
    let field = |k: &str| hook.get(k).and_then(Value::as_str).unwrap_or_default();
    let mut text = String::new();
    text.push_str(field("session_id"));
    text.push('\0');
    text.push_str(field("tool_name"));
    text.push('\0');
    canonical(hook.get("tool_input").unwrap_or(&Value::Null), &mut text);
    text.push('\0');
    format!("gemini-{:016x}", fnv1a(text.as_bytes()))
}

/// The `taskId` of a prompt (`BeforeAgent`): the session id and the prompt's timestamp
/// (`SESSION@2026-11-28T06:34:13.323Z`), unique for each prompt of a session whatever the
/// decoder saw before; the session id alone when the payload has no timestamp.
pub fn task_id(hook: &Value) -> String {
    let session = hook
        .get("session_id")
        .and_then(Value::as_str)
        .unwrap_or("gemini-cli");
    match hook.get("timestamp").and_then(Value::as_str) {
        Some(t) if !t.is_empty() => format!("{session}@{t}"),
        _ => session.to_owned(),
    }
}

/// The agent a hook payload is about: its session.
pub fn agent_of(hook: &Value) -> String {
    Hook::new(hook, "").agent_id()
}

/// Gemini CLI's reading of a hook payload.
trait GeminiHook {
    /// The model of the request (`llm_request.model`).
    fn model(&self) -> Option<&str>;
    /// The agent: the session.
    fn agent_id(&self) -> String;
    /// The payload's own fields (the shared ones go to metadata).
    fn rest(&self) -> Object;
    /// `default (detail)` with the payload's `key` when it has one.
    fn reason(&self, default: &str, key: &str) -> String;
}

impl GeminiHook for Hook<'_> {
    fn model(&self) -> Option<&str> {
        self.value.get("llm_request")?.get("model")?.as_str()
    }

    fn agent_id(&self) -> String {
        self.str("session_id").unwrap_or("gemini-cli").to_owned()
    }

    fn rest(&self) -> Object {
        self.fields_except(&COMMON)
    }

    fn reason(&self, default: &str, key: &str) -> String {
        match self.str(key) {
            Some(detail) if !detail.is_empty() => {
                format!("{default} ({})", truncate(detail, 200))
            }
            _ => default.to_owned(),
        }
    }
}
