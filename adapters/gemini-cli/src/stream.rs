//! `gemini --output-format stream-json` (NDJSON on stdout) to signals, and the byte-stream
//! decoder of `patchbay parse --protocol gemini` that reads it and hook payloads alike.
//! See the crate docs for the mapping.

use std::collections::VecDeque;

use patchbay_hooks::payload::snake_case;
use patchbay_signal::decode::{DEFAULT_MAX_LINE, LineSplitter, StreamDecoder, line_too_long};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::well_known::{
    AgentState, AgentStateChange, Completion, ErrorPayload, Payload, Severity, TaskDispatch,
    TextDelta, TokenUsage, ToolCall, ToolResult, as_count,
};
use patchbay_signal::{Object, Signal, is_informative, now_ms, truncate, well_known};
use serde_json::Value;

use crate::decode::{HookDecoder, TYPE_PREFIX};
use patchbay_signal::decode::camel_case;

use crate::fields::{TEXT_KEEP, timestamp_of, truncate_strings};

/// How many tool calls (used, no result yet) are remembered, to name the tool of a
/// `tool_result` (which carries only the `tool_id`).
const CALLS_KEPT: usize = 256;

/// Decodes the events of `gemini --output-format stream-json` (one JSON object per line:
/// `init`, `message`, `tool_use`, `tool_result`, `error`, `result`) into signals. One run
/// is one session: its `session_id` (from `init`) is the `agentId` and the `taskId`.
#[derive(Debug, Clone)]
pub struct StreamJsonDecoder {
    source: String,
    session: Option<String>,
    model: Option<String>,
    state: AgentState,
    /// Tool calls without their result yet: `(tool_id, tool_name)`.
    calls: VecDeque<(String, String)>,
    /// The assistant's text since the last tool call (the answer `completion` reports),
    /// up to [`TEXT_KEEP`] bytes.
    answer: String,
    last_timestamp: Option<i64>,
}

impl StreamJsonDecoder {
    /// A decoder whose signals come from `source`.
    pub fn new(source: impl Into<String>) -> Self {
        StreamJsonDecoder {
            source: source.into(),
            session: None,
            model: None,
            state: AgentState::Idle,
            calls: VecDeque::new(),
            answer: String::new(),
            last_timestamp: None,
        }
    }

    /// The source name of the signals.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The session of the run (`init`'s `session_id`), once seen.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// The agent's state as the events so far left it.
    pub fn state(&self) -> AgentState {
        self.state
    }

    /// Decodes one event; a value that is not an object with a string `type` is a counted
    /// bad input.
    pub fn decode_value(&mut self, value: &Value, out: &mut Vec<Decoded>) {
        let Some(obj) = value.as_object() else {
            out.push(self.bad(
                &value.to_string(),
                "a stream-json event must be a JSON object",
            ));
            return;
        };
        let Some(kind) = obj.get("type").and_then(Value::as_str) else {
            out.push(self.bad(
                &value.to_string(),
                "a stream-json event must have a string `type`",
            ));
            return;
        };
        let ts = timestamp_of(value)
            .or(self.last_timestamp)
            .unwrap_or_else(now_ms);
        self.last_timestamp = Some(ts);
        if kind == "init"
            && let Some(session) = obj.get("session_id").and_then(Value::as_str)
        {
            self.session = Some(session.to_owned());
            self.state = AgentState::Idle;
            self.answer.clear();
            self.calls.clear();
        }
        if kind == "init"
            && let Some(model) = obj.get("model").and_then(Value::as_str)
        {
            self.model = Some(model.to_owned());
        }
        let mut signals = Vec::new();
        let handled = match kind {
            "init" => {
                signals.push(self.details(kind, obj));
                self.transition(AgentState::Thinking, "session started", &mut signals);
                true
            }
            "message" => self.message(obj, &mut signals),
            "tool_use" => self.tool_use(obj, &mut signals),
            "tool_result" => self.tool_result(obj, &mut signals),
            "error" => self.error(obj, &mut signals),
            "result" => {
                self.result(obj, &mut signals);
                true
            }
            _ => false,
        };
        if !handled {
            signals.push(self.details(kind, obj));
        }
        let correlation = self.session.clone();
        for mut signal in signals {
            well_known::repair(&mut signal);
            signal.timestamp = ts;
            if signal.correlation_id.is_none()
                && let Some(c) = &correlation
            {
                signal.correlation_id = Some(c.as_str().into());
            }
            out.push(Decoded::Signal(signal));
        }
    }

    /// Decodes one line of text: blank is skipped, text that is not JSON is a counted bad
    /// input.
    pub fn decode_text(&mut self, text: &str, out: &mut Vec<Decoded>) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        match serde_json::from_str::<Value>(text) {
            Ok(value) => self.decode_value(&value, out),
            Err(e) => out.push(self.bad(text, &format!("not JSON: {e}"))),
        }
    }

    fn agent(&self) -> String {
        self.session.clone().unwrap_or_else(|| self.source.clone())
    }

    fn message(&mut self, obj: &Object, out: &mut Vec<Signal>) -> bool {
        let Some(content) = obj.get("content").and_then(Value::as_str) else {
            return false;
        };
        match obj.get("role").and_then(Value::as_str) {
            Some("user") => {
                self.answer.clear();
                let payload = TaskDispatch {
                    task_id: self.agent(),
                    from: "user".into(),
                    to: self.agent(),
                    description: Some(truncate(content, TEXT_KEEP)),
                }
                .into_object();
                out.push(Signal::new(TaskDispatch::KIND, &self.source, payload));
                self.transition(AgentState::Thinking, "prompt submitted", out);
                true
            }
            Some("assistant") => {
                if self.answer.len() < TEXT_KEEP {
                    self.answer.push_str(content);
                }
                let payload = TextDelta {
                    agent_id: self.agent(),
                    content: content.to_owned(),
                    content_type: None,
                    index: None,
                }
                .into_object();
                let mut signal = Signal::new(TextDelta::KIND, &self.source, payload);
                if let Some(delta) = obj.get("delta") {
                    signal.metadata_mut().insert("delta".into(), delta.clone());
                }
                out.push(signal);
                self.transition(AgentState::Thinking, "answering", out);
                true
            }
            _ => false,
        }
    }

    fn tool_use(&mut self, obj: &Object, out: &mut Vec<Signal>) -> bool {
        let Some(tool) = obj.get("tool_name").and_then(Value::as_str) else {
            return false;
        };
        let id = obj.get("tool_id").and_then(Value::as_str);
        if let Some(id) = id {
            if self.calls.len() >= CALLS_KEPT {
                self.calls.pop_front();
            }
            self.calls.push_back((id.to_owned(), tool.to_owned()));
        }
        self.answer.clear();
        let input = match obj.get("parameters") {
            Some(Value::Object(p)) => Some(p.clone()),
            None | Some(Value::Null) => None,
            Some(other) => Some(patchbay_signal::object! {"value" => other.clone()}),
        };
        let payload = ToolCall {
            tool_name: tool.to_owned(),
            agent_id: self.agent(),
            call_id: id.map(str::to_owned),
            input,
        }
        .into_object();
        let mut signal = Signal::new(ToolCall::KIND, &self.source, payload);
        if let Some(id) = id {
            signal.correlation_id = Some(id.into());
        }
        out.push(signal);
        self.transition(AgentState::Acting, &format!("running {tool}"), out);
        true
    }

    fn tool_result(&mut self, obj: &Object, out: &mut Vec<Signal>) -> bool {
        let id = obj.get("tool_id").and_then(Value::as_str);
        let tool = id
            .and_then(|id| {
                let i = self.calls.iter().position(|(c, _)| c == id)?;
                self.calls.remove(i).map(|(_, t)| t)
            })
            .unwrap_or_else(|| "tool".to_owned());
        let status = obj.get("status").and_then(Value::as_str);
        let success = status == Some("success") && !obj.get("error").is_some_and(is_informative);
        let mut output = Object::new();
        for key in ["status", "output", "error"] {
            if let Some(v) = obj.get(key).filter(|v| !v.is_null()) {
                output.insert(key.into(), truncate_strings(v));
            }
        }
        let payload = ToolResult {
            tool_name: tool.clone(),
            agent_id: self.agent(),
            call_id: id.map(str::to_owned),
            success,
            output: Some(output),
        }
        .into_object();
        let mut signal = Signal::new(ToolResult::KIND, &self.source, payload);
        if let Some(id) = id {
            signal.correlation_id = Some(id.into());
        }
        out.push(signal);
        self.transition(AgentState::Thinking, &format!("{tool} returned"), out);
        true
    }

    fn error(&mut self, obj: &Object, out: &mut Vec<Signal>) -> bool {
        let Some(message) = obj.get("message").and_then(Value::as_str) else {
            return false;
        };
        let severity = match obj.get("severity").and_then(Value::as_str) {
            Some("warning") => Severity::Warning,
            _ => Severity::Error,
        };
        let payload = ErrorPayload {
            agent_id: Some(self.agent()),
            code: obj
                .get("code")
                .and_then(|c| match c {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                })
                .or_else(|| Some("gemini_cli.error".into())),
            message: truncate(message, TEXT_KEEP),
            severity,
        }
        .into_object();
        out.push(Signal::new(ErrorPayload::KIND, &self.source, payload));
        true
    }

    /// `result`: (`error` if it failed), `token_usage` from `stats`, `completion`, and the
    /// agent back to idle (to error if it failed).
    fn result(&mut self, obj: &Object, out: &mut Vec<Signal>) {
        let success = obj.get("status").and_then(Value::as_str) == Some("success");
        if !success {
            let error = obj.get("error");
            let message = error
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("the run failed");
            let payload = ErrorPayload {
                agent_id: Some(self.agent()),
                code: error
                    .and_then(|e| e.get("type"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| Some("gemini_cli.result".into())),
                message: truncate(message, TEXT_KEEP),
                severity: Severity::Error,
            }
            .into_object();
            out.push(Signal::new(ErrorPayload::KIND, &self.source, payload));
        }
        if let Some(Value::Object(stats)) = obj.get("stats") {
            out.push(self.usage(stats));
        }
        let answer = std::mem::take(&mut self.answer);
        let payload = Completion {
            task_id: self.agent(),
            agent_id: Some(self.agent()),
            success,
            result: (!answer.is_empty()).then(|| truncate(&answer, TEXT_KEEP)),
        }
        .into_object();
        let mut completion = Signal::new(Completion::KIND, &self.source, payload);
        if let Some(status) = obj.get("status") {
            completion
                .metadata_mut()
                .insert("status".into(), status.clone());
        }
        out.push(completion);
        let (to, reason) = if success {
            (AgentState::Idle, "completed")
        } else {
            (AgentState::Error, "failed")
        };
        self.transition(to, reason, out);
    }

    /// `token_usage` from a `result`'s `stats`: `input_tokens` and `output_tokens` of the
    /// whole run (every model: Gemini CLI's router counts too); the model when only one
    /// was used; the other fields (`total_tokens`, `cached`, `input`, `duration_ms`,
    /// `tool_calls`, the per-model breakdown `models`) in metadata, camelCased.
    fn usage(&self, stats: &Object) -> Signal {
        let n = |k: &str| stats.get(k).and_then(as_count).unwrap_or(0);
        let models = stats.get("models").and_then(Value::as_object);
        let model = match models {
            Some(m) if m.len() == 1 => m.keys().next().cloned(),
            Some(m) if !m.is_empty() => None,
            _ => self.model.clone().filter(|m| m != "auto"),
        };
        let payload = TokenUsage {
            agent_id: self.agent(),
            prompt_tokens: n("input_tokens"),
            completion_tokens: n("output_tokens"),
            model,
            cost: None,
        }
        .into_object();
        let mut signal = Signal::new(TokenUsage::KIND, &self.source, payload);
        let mut meta = Object::new();
        for (k, v) in stats {
            if k != "input_tokens" && k != "output_tokens" {
                meta.insert(camel_case(k), v.clone());
            }
        }
        signal.set_metadata(meta);
        signal
    }

    /// `gemini_cli.<type>` with the event's fields but `type` and `timestamp`.
    fn details(&self, kind: &str, obj: &Object) -> Signal {
        let payload: Object = obj
            .iter()
            .filter(|(k, _)| *k != "type" && *k != "timestamp")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Signal::new(
            format!("{TYPE_PREFIX}{}", snake_case(kind)),
            &self.source,
            payload,
        )
    }

    /// An `agent_state_change` to `to`, unless the agent is there already.
    fn transition(&mut self, to: AgentState, reason: &str, out: &mut Vec<Signal>) {
        if self.state == to {
            return;
        }
        let from = std::mem::replace(&mut self.state, to);
        let payload = AgentStateChange {
            agent_id: self.agent(),
            from,
            to,
            reason: Some(reason.to_owned()),
        }
        .into_object();
        out.push(Signal::new(AgentStateChange::KIND, &self.source, payload));
    }

    /// The counted bad-input `error` signal for `raw`.
    fn bad(&self, raw: &str, message: &str) -> Decoded {
        Decoded::BadInput(bad_input_signal(
            &self.source,
            self.last_timestamp.unwrap_or_else(now_ms),
            raw,
            &format!("gemini_cli: {message}"),
        ))
    }
}

/// The byte-stream decoder of `patchbay parse --protocol gemini`: NDJSON lines (up to
/// [`DEFAULT_MAX_LINE`] bytes), each a `stream-json` event (an object with a string
/// `type`, read by [`StreamJsonDecoder`]) or a hook payload (an object with a
/// `hook_event_name`, read by [`HookDecoder`]). A line that is neither, or not JSON, is a
/// counted bad input.
#[derive(Debug, Clone)]
pub struct GeminiStream {
    lines: LineSplitter,
    stream: StreamJsonDecoder,
    hooks: HookDecoder,
}

impl GeminiStream {
    /// A decoder whose signals come from `source`.
    pub fn new(source: &str) -> Self {
        GeminiStream {
            lines: LineSplitter::new(DEFAULT_MAX_LINE),
            stream: StreamJsonDecoder::new(source),
            hooks: HookDecoder::new(source),
        }
    }

    /// The stream-json decoder inside.
    pub fn stream(&self) -> &StreamJsonDecoder {
        &self.stream
    }

    /// The hook decoder inside.
    pub fn hooks(&self) -> &HookDecoder {
        &self.hooks
    }
}

fn decode_line(
    stream: &mut StreamJsonDecoder,
    hooks: &mut HookDecoder,
    line: Result<&str, &str>,
    out: &mut Vec<Decoded>,
) {
    let text = match line {
        Ok(text) => text.trim(),
        Err(head) => {
            out.push(stream.bad(head, &line_too_long(DEFAULT_MAX_LINE)));
            return;
        }
    };
    if text.is_empty() {
        return;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(value) if value.get("hook_event_name").is_some() => hooks.decode(&value, out),
        Ok(value) => stream.decode_value(&value, out),
        Err(e) => out.push(stream.bad(text, &format!("not JSON: {e}"))),
    }
}

impl StreamDecoder for GeminiStream {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let (stream, hooks) = (&mut self.stream, &mut self.hooks);
        self.lines
            .feed(bytes, |line| decode_line(stream, hooks, line, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let (stream, hooks) = (&mut self.stream, &mut self.hooks);
        self.lines
            .finish(|line| decode_line(stream, hooks, line, out));
    }
}
