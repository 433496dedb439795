//! The Messages streaming state machine: events (and whole `message` responses) in,
//! signals out.

use std::borrow::Cow;

use patchbay_signal::normalize::{Decoded, bad_input_signal, json_or_report, object_or_report};
use patchbay_signal::well_known::{ErrorPayload, Payload, Severity, as_count, tool_call_arguments};
use patchbay_signal::{Object, Signal, SmallString, is_informative, take_str};
use patchbay_sse::data_payload;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

/// A text or thinking signal; the first of its content block (`first`) carries the
/// block's index in `metadata.block`, marking where the block starts.
fn mark_block_start(signal: Signal, block: u64, first: bool) -> Signal {
    if first {
        signal.with_meta("block", block)
    } else {
        signal
    }
}

/// Stop reasons that mean the answer is not a success.
fn stop_succeeded(reason: &str) -> bool {
    !matches!(
        reason,
        "max_tokens" | "refusal" | "model_context_window_exceeded"
    )
}

/// Decodes one Anthropic Messages stream into signals. The event type is the JSON `type`
/// field (an SSE `event:` line is not needed).
///
/// - `message_start` → `agent_state_change {agentId: model, from: idle, to: thinking}`;
///   remembers the model, the message id (the `correlationId` of everything after) and the
///   input tokens. A `message_start` while a message is in progress (a duplicated or
///   spliced start) abandons that message: its open blocks are dropped without a
///   `tool_call`, all index-keyed state is cleared, and the new `agent_state_change`
///   carries `metadata.restarted = true` (and `abandonedMessageId`).
/// - `text_delta` → `text_delta {agentId, content, index}` (`index` counts the message's
///   text deltas from 0; the first text or thinking signal of each content block carries
///   the block's index in `metadata.block`, marking where a block starts); `thinking_delta` →
///   `thinking`; `signature_delta` and `ping` → nothing; `citations_delta` →
///   `anthropic.citation {agentId, block, citation}`.
/// - `tool_use`, `server_tool_use` and `mcp_tool_use` blocks → one `tool_call {toolName,
///   agentId, callId: block id, input}` at `content_block_stop`, the input assembled from
///   `input_json_delta` (`{}` when empty, `{"_raw": "…"}` when cut off mid-JSON or not an
///   object; the start block's own `input` when no delta came). Server-side calls have
///   `metadata.serverTool = true`. A tool block still open at `message_stop` (or at the end
///   of the stream) is emitted then, with `metadata.incomplete = true`.
/// - `*_tool_result` blocks (`web_search_tool_result`, …) → `tool_result {toolName,
///   agentId, callId: tool_use_id, success, output: {content}}` at their stop; any other
///   block type (`redacted_thinking`, …) → `anthropic.<block type>` with the block as
///   payload; any other delta type → `anthropic.<delta type>`.
/// - `message_delta` → `token_usage` (prompt tokens from `message_start` when the delta
///   lacks them; cache token fields and the like in metadata); `message_stop` →
///   `completion {taskId: message id, agentId, success, result: stop_reason}` (success is
///   false for `max_tokens`, `refusal` and `model_context_window_exceeded`).
/// - `error` → `error {code: error.type, message, severity: "error"}`; an unknown event
///   type → `anthropic.<type>` with the event as payload.
#[derive(Debug, Clone)]
pub struct MessagesDecoder {
    source: SmallString,
    message: Option<Message>,
    /// The id of the last message that stopped (a repeated `message_stop` is ignored).
    last_stopped: Option<Option<String>>,
    /// The model of the last message, for signals that come between messages.
    last_model: Option<String>,
    last_ts: i64,
}

#[derive(Debug, Clone, Default)]
struct Message {
    id: Option<String>,
    model: Option<String>,
    input_tokens: Option<u64>,
    /// `message_start` usage fields other than the counts (cache tokens, service tier).
    start_usage: Object,
    stop_reason: Option<String>,
    /// `message_delta.delta` fields other than the stop reason.
    stop_meta: Object,
    next_text: u64,
    blocks: Vec<Block>,
    /// Tool names by call id, for the `tool_result` blocks that answer them.
    tool_names: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
struct Block {
    index: u64,
    kind: BlockKind,
    /// Whether a text or thinking signal of this block was emitted (the first one
    /// carries `metadata.block`).
    announced: bool,
}

#[derive(Debug, Clone)]
enum BlockKind {
    Text,
    Thinking,
    Tool {
        id: Option<String>,
        name: String,
        server: bool,
        json: String,
        start_input: Option<Object>,
        /// Other fields of the start block (`caller`, `server_name`, the block type).
        meta: Object,
    },
    /// A `*_tool_result` block, or any other block type: emitted whole at its stop.
    Whole {
        block_type: String,
        block: Object,
        json: String,
    },
}

impl MessagesDecoder {
    /// A decoder whose signals have source `source` (e.g. `anthropic:api`).
    pub fn new(source: impl Into<SmallString>) -> Self {
        MessagesDecoder {
            source: source.into(),
            message: None,
            last_stopped: None,
            last_model: None,
            last_ts: 0,
        }
    }

    /// The source name of the signals.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The id of the message in progress, if any.
    pub fn message_id(&self) -> Option<&str> {
        self.message.as_ref().and_then(|m| m.id.as_deref())
    }

    /// Decodes one SSE `data` payload (a JSON event), stamping its signals with
    /// `timestamp` (ms); a blank payload yields nothing. Text that is not a JSON object is
    /// reported as bad input. ([`patchbay_sse::DataDecoder::decode_data`] stamps it now.)
    pub fn decode_data_at(&mut self, data: &str, timestamp: i64, out: &mut Vec<Decoded>) {
        let Some(data) = data_payload(data) else {
            return;
        };
        if self.fast_path(data, timestamp, out) {
            return;
        }
        if let Some(value) = json_or_report(data, &self.source, self.last_ts, out) {
            self.decode_value(value, timestamp, out);
        }
    }

    /// Decodes the frequent small events as the API writes them without building a JSON
    /// map: content block deltas and stops (parsed into borrowed fields), `message_stop`
    /// and `ping`. Tried only on what starts like one, since a failed attempt costs an
    /// error message; false when the general path must decode the event.
    fn fast_path(&mut self, data: &str, ts: i64, out: &mut Vec<Decoded>) -> bool {
        let before = out.len();
        if data.starts_with(FAST_DELTA_PREFIX) {
            match serde_json::from_str::<FastDelta<'_>>(data) {
                Ok(fast) => {
                    if !self.on_fast_delta(fast, ts, out) {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        } else if data.starts_with(FAST_STOP_PREFIX) {
            match serde_json::from_str::<FastStop<'_>>(data) {
                Ok(stop) if stop.kind == "content_block_stop" => {
                    self.on_block_stop(stop.index, ts, out)
                }
                _ => return false,
            }
        } else if data == r#"{"type":"message_stop"}"# {
            self.on_message_stop(ts, out);
        } else if !matches!(data, r#"{"type":"ping"}"# | r#"{"type": "ping"}"#) {
            return false;
        }
        if out.len() > before {
            self.last_ts = ts;
        }
        true
    }

    /// Decodes a content block delta parsed by the fast path; false when it is not one
    /// the fast path knows (then the general path decodes it).
    fn on_fast_delta(&mut self, fast: FastDelta<'_>, ts: i64, out: &mut Vec<Decoded>) -> bool {
        if fast.kind != "content_block_delta" {
            return false;
        }
        let FastInner {
            kind,
            text,
            thinking,
            partial_json,
            signature,
        } = fast.delta;
        let index = fast.index;
        match (&*kind, text, thinking, partial_json, signature) {
            ("text_delta", Some(text), None, None, None) => {
                self.on_text(index, text.into_owned(), ts, out)
            }
            ("thinking_delta", None, Some(thinking), None, None) => {
                self.on_thinking(index, thinking.into_owned(), ts, out)
            }
            ("signature_delta", None, None, None, Some(_)) => {}
            ("input_json_delta", None, None, Some(part), None) => {
                if !self.append_json(index, &part) {
                    return false; // the general path reports it as an orphan
                }
            }
            _ => return false,
        }
        true
    }

    /// Decodes one parsed event, stamping its signals with `timestamp` (ms).
    pub fn decode_value(&mut self, value: Value, timestamp: i64, out: &mut Vec<Decoded>) {
        let Some(mut event) = object_or_report(value, &self.source, self.last_ts, out) else {
            return;
        };
        let before = out.len();
        let kind = match event.remove("type") {
            Some(Value::String(kind)) => kind,
            Some(other) => {
                event.insert("type".into(), other);
                String::new()
            }
            None => String::new(),
        };
        match kind.as_str() {
            "message_start" => {
                let message = match event.remove("message") {
                    Some(Value::Object(m)) => m,
                    _ => Object::new(),
                };
                self.on_message_start(message, event, timestamp, out);
            }
            "content_block_start" => {
                let index = index_of(&event);
                let block = match event.remove("content_block") {
                    Some(Value::Object(b)) => b,
                    _ => Object::new(),
                };
                self.on_block_start(index, block, timestamp, out);
            }
            "content_block_delta" => {
                let index = index_of(&event);
                let delta = match event.remove("delta") {
                    Some(Value::Object(d)) => d,
                    _ => Object::new(),
                };
                self.on_block_delta(index, delta, timestamp, out);
            }
            "content_block_stop" => {
                let index = index_of(&event);
                self.on_block_stop(index, timestamp, out);
            }
            "message_delta" => {
                let delta = match event.remove("delta") {
                    Some(Value::Object(d)) => d,
                    _ => Object::new(),
                };
                let usage = match event.remove("usage") {
                    Some(Value::Object(u)) => Some(u),
                    _ => None,
                };
                self.on_message_delta(delta, usage, timestamp, out);
            }
            "message_stop" => self.on_message_stop(timestamp, out),
            "ping" => {}
            "error" => self.on_error(event, timestamp, out),
            "" => {
                let signal = self.signal("anthropic.event", event, timestamp);
                out.push(Decoded::Signal(signal));
            }
            other => {
                let signal = self.signal(&format!("anthropic.{other}"), event, timestamp);
                out.push(Decoded::Signal(signal));
            }
        }
        if out.len() > before {
            self.last_ts = timestamp;
        }
    }

    /// Decodes a whole non-streaming Messages response body (`{"type": "message", …}`, or
    /// an error body) into the signals its streaming form would give: the state change,
    /// each block (its text as one `text_delta`, its thinking as one `thinking`, its tool
    /// calls and results), the `token_usage` and the `completion`.
    pub fn decode_response_at(&mut self, body: &str, timestamp: i64, out: &mut Vec<Decoded>) {
        self.message = None;
        let mut response = match serde_json::from_str::<Value>(body.trim()) {
            Ok(Value::Object(obj))
                if obj.get("type").and_then(Value::as_str) == Some("message") =>
            {
                obj
            }
            Ok(other) => return self.decode_value(other, timestamp, out),
            Err(err) => {
                out.push(Decoded::BadInput(bad_input_signal(
                    &self.source,
                    self.last_ts,
                    body,
                    &format!("not JSON: {err}"),
                )));
                return;
            }
        };
        response.remove("type");
        let content = match response.remove("content") {
            Some(Value::Array(blocks)) => blocks,
            _ => Vec::new(),
        };
        let mut delta = Object::new();
        for key in ["stop_reason", "stop_sequence"] {
            if let Some(v) = response.remove(key) {
                delta.insert(key.into(), v);
            }
        }
        // The streaming form reports the input tokens in `message_start` and the final
        // counts in `message_delta`.
        let usage = match response.remove("usage") {
            Some(Value::Object(u)) => Some(u),
            _ => None,
        };
        let mut start_usage = Object::new();
        if let Some(n) = usage.as_ref().and_then(|u| u.get("input_tokens")) {
            start_usage.insert("input_tokens".into(), n.clone());
        }
        response.insert("usage".into(), Value::Object(start_usage));
        self.on_message_start(response, Object::new(), timestamp, out);
        for (index, block) in content.into_iter().enumerate() {
            if let Value::Object(block) = block {
                self.on_block_start(index as u64, block, timestamp, out);
                self.on_block_stop(index as u64, timestamp, out);
            }
        }
        self.on_message_delta(delta, usage, timestamp, out);
        self.on_message_stop(timestamp, out);
        self.last_ts = timestamp;
    }

    /// The stream ended (or was cut) without `message_stop`, at `timestamp` (ms): emits the
    /// tool calls and result blocks still open (with `metadata.incomplete = true`), then
    /// forgets the message. No `completion`: the message did not stop.
    /// ([`patchbay_sse::DataDecoder::end_stream`] stamps them now.)
    pub fn end_stream_at(&mut self, timestamp: i64, out: &mut Vec<Decoded>) {
        if self.message.is_some() {
            self.flush_blocks(timestamp, out);
            self.message = None;
        }
    }

    fn model(&self) -> Option<&String> {
        self.message
            .as_ref()
            .and_then(|m| m.model.as_ref())
            .or(self.last_model.as_ref())
    }

    fn agent_id(&self) -> String {
        self.model()
            .cloned()
            .unwrap_or_else(|| self.source.to_string())
    }

    fn correlation(&self) -> Option<SmallString> {
        match &self.message {
            Some(m) => m.id.as_deref().map(SmallString::from),
            None => self
                .last_stopped
                .as_ref()?
                .as_deref()
                .map(SmallString::from),
        }
    }

    fn signal(&self, kind: &str, payload: Object, ts: i64) -> Signal {
        let mut signal = Signal::stamped(kind, self.source.clone(), payload, ts);
        signal.correlation_id = self.correlation();
        signal
    }

    /// The message in progress; events that come without a `message_start` get one
    /// without id or model, so that they are still decoded.
    fn message_mut(&mut self) -> &mut Message {
        self.message.get_or_insert_with(Message::default)
    }

    fn on_message_start(
        &mut self,
        message: Object,
        event_extra: Object,
        ts: i64,
        out: &mut Vec<Decoded>,
    ) {
        let abandoned = self.message.take();
        // One pass over the fields, by name: cheaper than a hashed removal per field.
        let mut id = None;
        let mut model = None;
        let mut start_usage = Object::new();
        let mut input_tokens = None;
        let mut meta = Object::new();
        for (key, value) in message.into_iter().chain(event_extra) {
            match (key.as_str(), value) {
                ("id", Value::String(s)) => id = Some(s),
                ("model", Value::String(s)) => model = Some(s),
                ("type" | "role", Value::String(_)) => {}
                ("usage", Value::Object(usage)) => {
                    for (k, v) in usage {
                        match k.as_str() {
                            "input_tokens" if as_count(&v).is_some() => input_tokens = as_count(&v),
                            // A placeholder at the start: message_delta has the real count.
                            "output_tokens" => {}
                            _ if is_informative(&v) => {
                                start_usage.insert(k, v);
                            }
                            _ => {}
                        }
                    }
                }
                (_, value) => {
                    if is_informative(&value) {
                        meta.insert(key, value);
                    }
                }
            }
        }
        if model.is_some() {
            self.last_model.clone_from(&model);
        }
        self.message = Some(Message {
            id,
            model,
            input_tokens,
            start_usage,
            ..Message::default()
        });
        if let Some(old) = abandoned {
            meta.insert("restarted".into(), Value::Bool(true));
            if let Some(old_id) = old.id {
                meta.insert("abandonedMessageId".into(), Value::String(old_id));
            }
        }
        let mut payload = Object::with_capacity(3);
        payload.insert("agentId".into(), Value::String(self.agent_id()));
        payload.insert("from".into(), Value::from("idle"));
        payload.insert("to".into(), Value::from("thinking"));
        let mut signal = self.signal("agent_state_change", payload, ts);
        signal.set_metadata(meta);
        out.push(Decoded::Signal(signal));
    }

    fn on_block_start(&mut self, index: u64, mut block: Object, ts: i64, out: &mut Vec<Decoded>) {
        let block_type = take_str(&mut block, "type").unwrap_or_default();
        let mut announced = false;
        let kind = match block_type.as_str() {
            "text" => {
                if let Some(text) = take_str(&mut block, "text").filter(|t| !t.is_empty()) {
                    self.emit_text(index, text, true, ts, out);
                    announced = true;
                }
                if let Some(Value::Array(citations)) = block.remove("citations") {
                    for citation in citations {
                        self.emit_citation(index, citation, ts, out);
                    }
                }
                BlockKind::Text
            }
            "thinking" => {
                if let Some(thinking) = take_str(&mut block, "thinking").filter(|t| !t.is_empty()) {
                    self.emit_thinking(index, thinking, true, ts, out);
                    announced = true;
                }
                BlockKind::Thinking
            }
            t if t.ends_with("tool_use") => {
                let id = take_str(&mut block, "id");
                let name = take_str(&mut block, "name").unwrap_or_default();
                let start_input = match block.remove("input") {
                    Some(Value::Object(input)) if !input.is_empty() => Some(input),
                    Some(other) if is_informative(&other) => {
                        block.insert("input".into(), other);
                        None
                    }
                    _ => None,
                };
                let server = t != "tool_use";
                let mut meta = Object::new();
                if server {
                    meta.insert("blockType".into(), Value::String(block_type.clone()));
                }
                for (k, v) in block {
                    if is_informative(&v) {
                        meta.insert(k, v);
                    }
                }
                if let Some(id) = &id {
                    self.message_mut()
                        .tool_names
                        .push((id.clone(), name.clone()));
                }
                BlockKind::Tool {
                    id,
                    name,
                    server,
                    json: String::new(),
                    start_input,
                    meta,
                }
            }
            _ => BlockKind::Whole {
                block_type,
                block,
                json: String::new(),
            },
        };
        let message = self.message_mut();
        // A second start at the same index replaces the first (it is abandoned).
        message.blocks.retain(|b| b.index != index);
        message.blocks.push(Block {
            index,
            kind,
            announced,
        });
    }

    fn on_block_delta(&mut self, index: u64, mut delta: Object, ts: i64, out: &mut Vec<Decoded>) {
        let delta_type = take_str(&mut delta, "type").unwrap_or_default();
        match delta_type.as_str() {
            "text_delta" => {
                if let Some(text) = take_str(&mut delta, "text") {
                    self.on_text(index, text, ts, out);
                }
            }
            "thinking_delta" => {
                if let Some(thinking) = take_str(&mut delta, "thinking") {
                    self.on_thinking(index, thinking, ts, out);
                }
            }
            "signature_delta" => {}
            "input_json_delta" => {
                let part = take_str(&mut delta, "partial_json").unwrap_or_default();
                if !self.append_json(index, &part) {
                    // No tool block to add it to (its start was lost, or abandoned by a
                    // restart): kept as it came, never mixed into another call.
                    delta.insert("type".into(), Value::String(delta_type));
                    delta.insert("partial_json".into(), Value::String(part));
                    self.emit_orphan(index, delta, ts, out);
                }
            }
            "citations_delta" => {
                let citation = delta.remove("citation").unwrap_or(Value::Object(delta));
                self.emit_citation(index, citation, ts, out);
            }
            _ => {
                let mut payload = Object::new();
                payload.insert("index".into(), Value::from(index));
                payload.extend(delta);
                let kind = if delta_type.is_empty() {
                    "anthropic.delta".to_owned()
                } else {
                    format!("anthropic.{delta_type}")
                };
                let signal = self.signal(&kind, payload, ts);
                out.push(Decoded::Signal(signal));
            }
        }
    }

    fn on_block_stop(&mut self, index: u64, ts: i64, out: &mut Vec<Decoded>) {
        let Some(message) = self.message.as_mut() else {
            return;
        };
        let Some(pos) = message.blocks.iter().position(|b| b.index == index) else {
            return;
        };
        let block = message.blocks.remove(pos);
        self.emit_block(block, false, ts, out);
    }

    fn on_message_delta(
        &mut self,
        mut delta: Object,
        usage: Option<Object>,
        ts: i64,
        out: &mut Vec<Decoded>,
    ) {
        let stop_reason = take_str(&mut delta, "stop_reason");
        let message = self.message_mut();
        if stop_reason.is_some() {
            message.stop_reason = stop_reason;
        }
        for (k, v) in delta {
            if is_informative(&v) {
                message.stop_meta.insert(k, v);
            }
        }
        let Some(usage) = usage else {
            return;
        };
        let mut prompt = None;
        let mut completion = None;
        let mut meta = Object::new();
        for (k, v) in usage {
            match k.as_str() {
                "input_tokens" if as_count(&v).is_some() => prompt = as_count(&v),
                "output_tokens" if as_count(&v).is_some() => completion = as_count(&v),
                _ if is_informative(&v) => {
                    meta.insert(k, v);
                }
                _ => {}
            }
        }
        let start_prompt = self.message.as_ref().and_then(|m| m.input_tokens);
        if let Some(message) = &self.message {
            for (k, v) in &message.start_usage {
                if !meta.contains_key(k) {
                    meta.insert(k.clone(), v.clone());
                }
            }
        }
        let mut payload = Object::with_capacity(4);
        payload.insert("agentId".into(), Value::String(self.agent_id()));
        payload.insert(
            "promptTokens".into(),
            Value::from(prompt.or(start_prompt).unwrap_or(0)),
        );
        payload.insert(
            "completionTokens".into(),
            Value::from(completion.unwrap_or(0)),
        );
        if let Some(model) = self.model() {
            payload.insert("model".into(), Value::String(model.clone()));
        }
        let mut signal = self.signal("token_usage", payload, ts);
        signal.set_metadata(meta);
        out.push(Decoded::Signal(signal));
    }

    fn on_message_stop(&mut self, ts: i64, out: &mut Vec<Decoded>) {
        if self.message.is_none() {
            // A repeated stop, or a stop with nothing before it: nothing to complete.
            return;
        }
        self.flush_blocks(ts, out);
        let Some(message) = self.message.take() else {
            return;
        };
        let task_id = message
            .id
            .clone()
            .unwrap_or_else(|| self.source.to_string());
        let mut payload = Object::with_capacity(4);
        payload.insert("taskId".into(), Value::String(task_id));
        payload.insert(
            "agentId".into(),
            Value::String(message.model.clone().unwrap_or_else(|| self.agent_id())),
        );
        let success = message.stop_reason.as_deref().is_none_or(stop_succeeded);
        payload.insert("success".into(), Value::Bool(success));
        if let Some(reason) = message.stop_reason {
            payload.insert("result".into(), Value::String(reason));
        }
        let mut signal = self.signal("completion", payload, ts);
        signal.correlation_id = message.id.as_deref().map(SmallString::from);
        signal.set_metadata(message.stop_meta);
        self.last_stopped = Some(message.id);
        out.push(Decoded::Signal(signal));
    }

    fn on_error(&mut self, mut event: Object, ts: i64, out: &mut Vec<Decoded>) {
        let mut meta = Object::new();
        let (code, message) = match event.remove("error") {
            Some(Value::Object(mut e)) => {
                let code = take_str(&mut e, "type");
                let message = match take_str(&mut e, "message") {
                    Some(m) => m,
                    None => Value::Object(e.clone()).to_string(),
                };
                for (k, v) in e {
                    if is_informative(&v) {
                        meta.insert(k, v);
                    }
                }
                (code, message)
            }
            Some(Value::String(m)) => (None, m),
            Some(other) => (None, other.to_string()),
            None => (None, "error".to_owned()),
        };
        for (k, v) in event {
            if is_informative(&v) {
                meta.insert(k, v);
            }
        }
        let payload = ErrorPayload {
            agent_id: self.model().cloned(),
            code,
            message,
            severity: Severity::Error,
        }
        .into_object();
        let mut signal = self.signal("error", payload, ts);
        signal.set_metadata(meta);
        out.push(Decoded::Signal(signal));
    }

    fn on_text(&mut self, index: u64, text: String, ts: i64, out: &mut Vec<Decoded>) {
        if !text.is_empty() {
            let first = self.announce_block(index, BlockKind::Text);
            self.emit_text(index, text, first, ts, out);
        }
    }

    fn on_thinking(&mut self, index: u64, thinking: String, ts: i64, out: &mut Vec<Decoded>) {
        if !thinking.is_empty() {
            let first = self.announce_block(index, BlockKind::Thinking);
            self.emit_thinking(index, thinking, first, ts, out);
        }
    }

    /// Appends an `input_json_delta` to the tool (or other) block at `index`; false when
    /// there is no such block.
    fn append_json(&mut self, index: u64, part: &str) -> bool {
        let block = self
            .message
            .as_mut()
            .and_then(|m| m.blocks.iter_mut().find(|b| b.index == index));
        match block.map(|b| &mut b.kind) {
            Some(BlockKind::Tool { json, .. } | BlockKind::Whole { json, .. }) => {
                json.push_str(part);
                true
            }
            _ => false,
        }
    }

    /// Notes that a text or thinking signal of the block at `index` is emitted (opening
    /// the block if its start was not seen); true for the block's first one.
    fn announce_block(&mut self, index: u64, kind: BlockKind) -> bool {
        let message = self.message_mut();
        match message.blocks.iter_mut().find(|b| b.index == index) {
            Some(block) => !std::mem::replace(&mut block.announced, true),
            None => {
                message.blocks.push(Block {
                    index,
                    kind,
                    announced: true,
                });
                true
            }
        }
    }

    /// Emits the blocks still open (tool calls and whole blocks) as incomplete.
    fn flush_blocks(&mut self, ts: i64, out: &mut Vec<Decoded>) {
        let mut blocks = match self.message.as_mut() {
            Some(m) => std::mem::take(&mut m.blocks),
            None => return,
        };
        blocks.sort_by_key(|b| b.index);
        for block in blocks {
            self.emit_block(block, true, ts, out);
        }
    }

    fn emit_block(&mut self, block: Block, incomplete: bool, ts: i64, out: &mut Vec<Decoded>) {
        let index = block.index;
        match block.kind {
            BlockKind::Text | BlockKind::Thinking => {}
            BlockKind::Tool {
                id,
                name,
                server,
                json,
                start_input,
                meta,
            } => {
                let input = match start_input {
                    Some(input) if json.trim().is_empty() => input,
                    _ => tool_call_arguments(json),
                };
                let mut payload = Object::with_capacity(4);
                payload.insert("toolName".into(), Value::String(name));
                payload.insert("agentId".into(), Value::String(self.agent_id()));
                if let Some(id) = id {
                    payload.insert("callId".into(), Value::String(id));
                }
                payload.insert("input".into(), Value::Object(input));
                let mut signal = self.signal("tool_call", payload, ts);
                let metadata = signal.metadata_mut();
                metadata.insert("block".into(), Value::from(index));
                if server {
                    metadata.insert("serverTool".into(), Value::Bool(true));
                }
                if incomplete {
                    metadata.insert("incomplete".into(), Value::Bool(true));
                }
                metadata.extend(meta);
                out.push(Decoded::Signal(signal));
            }
            BlockKind::Whole {
                block_type,
                block: mut fields,
                json,
            } => {
                let mut signal = match block_type.strip_suffix("_tool_result") {
                    Some(tool) => self.tool_result(tool, &mut fields, ts),
                    None => {
                        let kind = if block_type.is_empty() {
                            "anthropic.block".to_owned()
                        } else {
                            format!("anthropic.{block_type}")
                        };
                        self.signal(&kind, std::mem::take(&mut fields), ts)
                    }
                };
                let metadata = signal.metadata_mut();
                metadata.insert("block".into(), Value::from(index));
                if signal_is_result(&block_type) {
                    metadata.insert("blockType".into(), Value::String(block_type));
                }
                for (k, v) in fields {
                    if is_informative(&v) {
                        metadata.insert(k, v);
                    }
                }
                if !json.is_empty() {
                    metadata.insert("partialJson".into(), Value::String(json));
                }
                if incomplete {
                    metadata.insert("incomplete".into(), Value::Bool(true));
                }
                out.push(Decoded::Signal(signal));
            }
        }
    }

    /// A `tool_result` for a server-side result block (`web_search_tool_result`, …): the
    /// tool name is that of the call it answers, else the block type's prefix.
    fn tool_result(&self, tool: &str, fields: &mut Object, ts: i64) -> Signal {
        let call_id = take_str(fields, "tool_use_id");
        let name = call_id
            .as_ref()
            .and_then(|id| {
                self.message
                    .as_ref()
                    .and_then(|m| m.tool_names.iter().find(|(known, _)| known == id))
                    .map(|(_, name)| name.clone())
            })
            .unwrap_or_else(|| tool.to_owned());
        let content = fields.remove("content").unwrap_or(Value::Null);
        // Failures come as an error object (`{"type": "web_search_tool_result_error", …}`)
        // or, for MCP results, with `is_error`.
        let is_error = matches!(fields.remove("is_error"), Some(Value::Bool(true)))
            || content
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("_error"));
        let mut output = Object::new();
        output.insert("content".into(), content);
        let mut payload = Object::with_capacity(5);
        payload.insert("toolName".into(), Value::String(name));
        payload.insert("agentId".into(), Value::String(self.agent_id()));
        if let Some(id) = call_id {
            payload.insert("callId".into(), Value::String(id));
        }
        payload.insert("success".into(), Value::Bool(!is_error));
        payload.insert("output".into(), Value::Object(output));
        self.signal("tool_result", payload, ts)
    }

    /// A `text_delta`; the first of its block (`first`) carries `metadata.block`.
    fn emit_text(
        &mut self,
        block: u64,
        text: String,
        first: bool,
        ts: i64,
        out: &mut Vec<Decoded>,
    ) {
        let message = self.message_mut();
        let index = message.next_text;
        message.next_text += 1;
        let mut payload = Object::with_capacity(3);
        payload.insert("agentId".into(), Value::String(self.agent_id()));
        payload.insert("content".into(), Value::String(text));
        payload.insert("index".into(), Value::from(index));
        let signal = self.signal("text_delta", payload, ts);
        out.push(Decoded::Signal(mark_block_start(signal, block, first)));
    }

    /// A `thinking`; the first of its block (`first`) carries `metadata.block`.
    fn emit_thinking(
        &mut self,
        block: u64,
        thinking: String,
        first: bool,
        ts: i64,
        out: &mut Vec<Decoded>,
    ) {
        let mut payload = Object::with_capacity(3);
        payload.insert("agentId".into(), Value::String(self.agent_id()));
        payload.insert("content".into(), Value::String(thinking));
        let signal = self.signal("thinking", payload, ts);
        out.push(Decoded::Signal(mark_block_start(signal, block, first)));
    }

    fn emit_citation(&mut self, block: u64, citation: Value, ts: i64, out: &mut Vec<Decoded>) {
        let mut payload = Object::with_capacity(3);
        payload.insert("agentId".into(), Value::String(self.agent_id()));
        payload.insert("block".into(), Value::from(block));
        payload.insert("citation".into(), citation);
        let signal = self.signal("anthropic.citation", payload, ts);
        out.push(Decoded::Signal(signal));
    }

    fn emit_orphan(&mut self, block: u64, delta: Object, ts: i64, out: &mut Vec<Decoded>) {
        let mut payload = Object::new();
        payload.insert("index".into(), Value::from(block));
        payload.insert("delta".into(), Value::Object(delta));
        let signal = self
            .signal("anthropic.content_block_delta", payload, ts)
            .with_meta("orphan", true);
        out.push(Decoded::Signal(signal));
    }
}

/// How the API starts a `content_block_delta` event.
const FAST_DELTA_PREFIX: &str = "{\"type\":\"content_block_delta\"";

/// How the API starts a `content_block_stop` event.
const FAST_STOP_PREFIX: &str = "{\"type\":\"content_block_stop\"";

/// A `content_block_stop` event, parsed without building a JSON map.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FastStop<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    index: u64,
}

/// A `content_block_delta` event, parsed without building a JSON map. Unknown fields make
/// the parse fail, so that the general path keeps them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FastDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    index: u64,
    #[serde(borrow)]
    delta: FastInner<'a>,
}

/// The `delta` of a [`FastDelta`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FastInner<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default)]
    signature: Option<IgnoredAny>,
}

/// Whether a block type becomes a `tool_result` (whose payload has no room for the type).
fn signal_is_result(block_type: &str) -> bool {
    block_type.ends_with("_tool_result")
}

/// The `index` of a content block event (0 when missing).
fn index_of(event: &Object) -> u64 {
    event.get("index").and_then(as_count).unwrap_or(0)
}
