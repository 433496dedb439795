//! The `chat.completion.chunk` state machine: chunks (and whole `chat.completion`
//! responses) in, signals out.

use patchbay_signal::normalize::{Decoded, bad_input_signal, json_or_report, object_or_report};
use patchbay_signal::well_known::{ErrorPayload, Payload, Severity, as_count, tool_call_arguments};
use patchbay_signal::{Object, Signal, SmallString, is_informative, take_str};
use patchbay_sse::{DONE, data_payload};
use serde_json::Value;

/// Top-level chunk fields that are the same for the whole stream: kept once (last seen)
/// and written to the metadata of the summary signals (`completion`, `token_usage`)
/// rather than repeated on every `text_delta`.
const STREAM_INFO: [&str; 3] = ["created", "system_fingerprint", "service_tier"];

/// Finish reasons that mean the answer is not a success.
fn finish_succeeded(reason: &str) -> bool {
    !matches!(reason, "length" | "content_filter" | "error")
}

/// Decodes one OpenAI-compatible chat completion stream (OpenAI, Ollama, LM Studio, vLLM)
/// into signals. One decoder per stream (or per response body); after `[DONE]` or
/// [`ChatDecoder::end_stream_at`] it starts afresh, so a capture holding several streams back
/// to back decodes too.
///
/// - `delta.content` → `text_delta {agentId: model, content, index}` (`index` counts the
///   choice's `text_delta`s from 0); `delta.reasoning_content` / `delta.reasoning` →
///   `thinking`; `delta.refusal` → `text_delta` with `metadata.refusal = true`.
/// - `delta.tool_calls` fragments are assembled per (choice, tool index), several in
///   parallel, and emitted as one `tool_call {toolName, agentId, callId, input}` at the
///   choice's `finish_reason` (or at the end of the stream, then with
///   `metadata.unfinished = true`). `input` is the parsed arguments object, `{}` when
///   empty, `{"_raw": "…"}` when they are not a JSON object.
/// - the `usage` object → `token_usage` (other usage fields in metadata).
/// - each choice's first `finish_reason` → one `completion {taskId: chunk id, agentId,
///   success, result: finish_reason}` (success is false for `length`, `content_filter`
///   and `error`).
/// - an `error` chunk → `error {message, severity: "error", code}`.
/// - `correlationId` is the chunk `id`. Once the stream is known to have several choices
///   (a choice index above 0, or a chunk with several choices), every choice-scoped
///   signal carries `metadata.choice`.
/// - what has no place in a payload goes to metadata: per-choice fields such as
///   `logprobs` and unknown `delta` fields on that choice's signals, unknown chunk fields
///   on the chunk's signals, `created`/`system_fingerprint`/`service_tier` on
///   `completion` and `token_usage`. A chunk that yields no signal but carries such
///   fields becomes an `openai.chunk` signal (an informative choice alone, `openai.choice`),
///   so nothing is lost. OpenAI's `obfuscation` padding is dropped.
#[derive(Debug, Clone)]
pub struct ChatDecoder {
    source: SmallString,
    stream: StreamState,
    last_ts: i64,
    done: bool,
}

#[derive(Debug, Clone, Default)]
struct StreamState {
    id: Option<String>,
    model: Option<String>,
    /// The last values of the [`STREAM_INFO`] fields.
    info: [Option<Value>; STREAM_INFO.len()],
    multi_choice: bool,
    choices: Vec<ChoiceState>,
}

#[derive(Debug, Clone)]
struct ChoiceState {
    index: u64,
    next_text: u64,
    finished: bool,
    tools: Vec<ToolState>,
}

/// Tool call fragments assembled so far.
#[derive(Debug, Clone, Default)]
struct ToolState {
    index: u64,
    id: Option<String>,
    name: String,
    arguments: String,
    /// Arguments some servers send as an object rather than a string.
    object: Option<Object>,
    kind: Option<String>,
    /// A legacy `function_call` delta rather than `tool_calls`.
    legacy: bool,
}

/// The slot of the legacy `function_call` delta among a choice's tools.
const LEGACY_SLOT: u64 = u64::MAX;

impl ChatDecoder {
    /// A decoder whose signals have source `source` (e.g. `openai:ollama`).
    pub fn new(source: impl Into<SmallString>) -> Self {
        ChatDecoder {
            source: source.into(),
            stream: StreamState::default(),
            last_ts: 0,
            done: false,
        }
    }

    /// The source name of the signals.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the last payload was `[DONE]` (the transport may close the stream).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The model of the stream in progress, once a chunk named it.
    pub fn model(&self) -> Option<&str> {
        self.stream.model.as_deref()
    }

    /// Decodes one SSE `data` payload (a JSON chunk, or `[DONE]`), stamping its signals
    /// with `timestamp` (ms); a blank payload yields nothing. `[DONE]` ends the stream
    /// ([`ChatDecoder::end_stream_at`]); text that is not JSON is reported as bad input.
    /// ([`patchbay_sse::DataDecoder::decode_data`] stamps it now.)
    pub fn decode_data_at(&mut self, data: &str, timestamp: i64, out: &mut Vec<Decoded>) {
        let Some(data) = data_payload(data) else {
            return;
        };
        if data == DONE {
            self.end_stream_at(timestamp, out);
            self.done = true;
            return;
        }
        if let Some(value) = json_or_report(data, &self.source, self.last_ts, out) {
            self.decode_value(value, timestamp, out);
        }
    }

    /// Decodes one parsed chunk (or a whole non-streaming response), stamping its signals
    /// with `timestamp` (ms).
    pub fn decode_value(&mut self, value: Value, timestamp: i64, out: &mut Vec<Decoded>) {
        let Some(chunk) = object_or_report(value, &self.source, self.last_ts, out) else {
            return;
        };
        self.done = false;
        let before = out.len();
        // One pass over the fields, by name: cheaper than a hashed removal per field.
        let mut error = None;
        let mut choices = Vec::new();
        let mut usage = None;
        let mut extra = Object::new();
        for (key, value) in chunk {
            match (key.as_str(), value) {
                ("id", Value::String(id)) => {
                    if !id.is_empty() {
                        self.stream.id = Some(id);
                    }
                }
                ("model", Value::String(model)) => {
                    if !model.is_empty() {
                        self.stream.model = Some(model);
                    }
                }
                ("object", Value::String(o))
                    if matches!(
                        o.as_str(),
                        "chat.completion.chunk" | "chat.completion" | "text_completion"
                    ) => {}
                // Padding OpenAI adds against side channels: carries nothing.
                ("obfuscation", _) => {}
                ("error", value) => error = Some(value),
                ("choices", Value::Array(array)) => choices = array,
                ("usage", Value::Object(u)) => usage = Some(u),
                (name, value) => {
                    if let Some(slot) = STREAM_INFO.iter().position(|k| *k == name) {
                        if is_informative(&value)
                            && let Some(info) = self.stream.info.get_mut(slot)
                        {
                            *info = Some(value);
                        }
                    } else if is_informative(&value) {
                        extra.insert(key, value);
                    }
                }
            }
        }
        let ctx = Ctx {
            ts: timestamp,
            extra,
        };
        if let Some(error) = error.filter(is_informative) {
            self.emit_error(error, &ctx, out);
        }
        if choices.len() > 1 {
            self.stream.multi_choice = true;
        }
        for choice in choices {
            self.decode_choice(choice, &ctx, out);
        }
        if let Some(usage) = usage {
            self.emit_usage(usage, &ctx, out);
        }
        if out.len() == before && !ctx.extra.is_empty() {
            let signal = self.signal("openai.chunk", ctx.extra, timestamp);
            out.push(Decoded::Signal(signal));
        }
        if out.len() > before {
            self.last_ts = timestamp;
        }
    }

    /// Decodes a whole non-streaming `chat.completion` body (or an error body) into the
    /// signals its streaming form would give: per choice its reasoning as one `thinking`,
    /// its text as one `text_delta`, its tool calls, its `completion`; then the
    /// `token_usage`.
    pub fn decode_response_at(&mut self, body: &str, timestamp: i64, out: &mut Vec<Decoded>) {
        self.stream = StreamState::default();
        match serde_json::from_str::<Value>(body.trim()) {
            Ok(value) => {
                if value
                    .get("choices")
                    .and_then(Value::as_array)
                    .is_some_and(|c| c.len() > 1)
                {
                    self.stream.multi_choice = true;
                }
                self.decode_value(value, timestamp, out);
            }
            Err(err) => out.push(Decoded::BadInput(bad_input_signal(
                &self.source,
                self.last_ts,
                body,
                &format!("not JSON: {err}"),
            ))),
        }
        self.end_stream_at(timestamp, out);
    }

    /// The stream ended (or was cut) at `timestamp` (ms): emits the tool calls still being
    /// assembled for choices that never finished (with `metadata.unfinished = true`), then
    /// forgets the stream. Emits no `completion` for them: no finish reason arrived.
    /// ([`patchbay_sse::DataDecoder::end_stream`] stamps them now.)
    pub fn end_stream_at(&mut self, timestamp: i64, out: &mut Vec<Decoded>) {
        let ctx = Ctx {
            ts: timestamp,
            extra: Object::new(),
        };
        let mut choices = std::mem::take(&mut self.stream.choices);
        choices.sort_by_key(|c| c.index);
        for choice in choices {
            if !choice.tools.is_empty() {
                let unfinished = !choice.finished;
                self.emit_tools(
                    choice.index,
                    choice.tools,
                    unfinished,
                    &Object::new(),
                    &ctx,
                    out,
                );
            }
        }
        self.stream = StreamState::default();
    }

    /// Writes the stream-constant fields to a summary signal's metadata.
    fn add_stream_info(&self, signal: &mut Signal) {
        for (key, value) in STREAM_INFO.iter().zip(&self.stream.info) {
            if let Some(value) = value {
                signal
                    .metadata_mut()
                    .insert((*key).to_owned(), value.clone());
            }
        }
    }

    fn agent_id(&self) -> String {
        self.stream
            .model
            .clone()
            .unwrap_or_else(|| self.source.to_string())
    }

    fn signal(&self, kind: &str, payload: Object, ts: i64) -> Signal {
        let mut signal = Signal::stamped(kind, self.source.clone(), payload, ts);
        signal.correlation_id = self.stream.id.as_deref().map(SmallString::from);
        signal
    }

    /// Metadata for a signal of choice `index`: `choice` when there are several,
    /// then the choice's and the chunk's extra fields.
    fn choice_meta(&self, index: u64, choice_extra: &Object, ctx: &Ctx) -> Option<Object> {
        if !self.stream.multi_choice && choice_extra.is_empty() && ctx.extra.is_empty() {
            return None;
        }
        let mut meta = Object::new();
        if self.stream.multi_choice {
            meta.insert("choice".into(), Value::from(index));
        }
        extend(&mut meta, choice_extra);
        extend(&mut meta, &ctx.extra);
        (!meta.is_empty()).then_some(meta)
    }

    fn choice_pos(&mut self, index: u64) -> usize {
        match self.stream.choices.iter().position(|c| c.index == index) {
            Some(pos) => pos,
            None => {
                self.stream.choices.push(ChoiceState {
                    index,
                    next_text: 0,
                    finished: false,
                    tools: Vec::new(),
                });
                self.stream.choices.len() - 1
            }
        }
    }

    fn decode_choice(&mut self, choice: Value, ctx: &Ctx, out: &mut Vec<Decoded>) {
        let Value::Object(choice) = choice else {
            if is_informative(&choice) {
                let mut payload = Object::new();
                payload.insert("value".into(), choice);
                out.push(Decoded::Signal(self.signal(
                    "openai.choice",
                    payload,
                    ctx.ts,
                )));
            }
            return;
        };
        // One pass over the fields, by name: cheaper than a hashed removal per field.
        let mut index = 0;
        let mut delta = None;
        let mut finish_reason = None;
        let mut legacy_text = None;
        let mut choice_extra = Object::new();
        for (key, value) in choice {
            match (key.as_str(), value) {
                ("index", value) if as_count(&value).is_some() => {
                    index = as_count(&value).unwrap_or(0)
                }
                ("delta" | "message", Value::Object(d)) if delta.is_none() => delta = Some(d),
                ("finish_reason", Value::String(reason)) => finish_reason = Some(reason),
                // Legacy completions (`text_completion`) carry the text on the choice.
                ("text", Value::String(text)) => legacy_text = Some(text),
                (_, value) => {
                    if is_informative(&value) {
                        choice_extra.insert(key, value);
                    }
                }
            }
        }
        if index > 0 {
            self.stream.multi_choice = true;
        }
        let mut content = None;
        let mut reasoning_content = None;
        let mut reasoning = None;
        let mut refusal = None;
        let mut tool_calls = None;
        let mut function_call = None;
        for (key, value) in delta.unwrap_or_default() {
            match (key.as_str(), value) {
                ("role", Value::String(_)) => {}
                ("content", Value::String(t)) => content = Some(t),
                ("reasoning_content", Value::String(t)) => reasoning_content = Some(t),
                ("reasoning", Value::String(t)) => reasoning = Some(t),
                ("refusal", Value::String(t)) => refusal = Some(t),
                ("tool_calls", Value::Array(calls)) => tool_calls = Some(calls),
                ("function_call", Value::Object(call)) => function_call = Some(call),
                (_, value) => {
                    if is_informative(&value) {
                        choice_extra.insert(key, value);
                    }
                }
            }
        }
        let before = out.len();
        let pos = self.choice_pos(index);

        // Reasoning first: it precedes the answer. Both fields given (some servers send
        // the same text twice): one signal, the other text kept in metadata if it differs.
        let (thought, other_thought) = match (reasoning_content, reasoning) {
            (Some(a), Some(b)) if a.is_empty() => (Some(b), None),
            (Some(a), Some(b)) if a == b || b.is_empty() => (Some(a), None),
            (Some(a), other) => (Some(a), other),
            (None, b) => (b, None),
        };
        if let Some(thought) = thought.filter(|t| !t.is_empty()) {
            let mut payload = Object::with_capacity(2);
            payload.insert("agentId".into(), Value::String(self.agent_id()));
            payload.insert("content".into(), Value::String(thought));
            let mut signal = self.signal("thinking", payload, ctx.ts);
            signal.metadata = self.choice_meta(index, &choice_extra, ctx).map(Into::into);
            if let Some(other) = other_thought {
                signal
                    .metadata_mut()
                    .insert("reasoning".into(), Value::String(other));
            }
            out.push(Decoded::Signal(signal));
        }
        for (text, is_refusal) in [(content, false), (legacy_text, false), (refusal, true)] {
            let Some(text) = text.filter(|t| !t.is_empty()) else {
                continue;
            };
            let text_index = match self.stream.choices.get_mut(pos) {
                Some(state) => {
                    state.next_text += 1;
                    state.next_text - 1
                }
                None => 0,
            };
            let mut payload = Object::with_capacity(3);
            payload.insert("agentId".into(), Value::String(self.agent_id()));
            payload.insert("content".into(), Value::String(text));
            payload.insert("index".into(), Value::from(text_index));
            let mut signal = self.signal("text_delta", payload, ctx.ts);
            signal.metadata = self.choice_meta(index, &choice_extra, ctx).map(Into::into);
            if is_refusal {
                signal
                    .metadata_mut()
                    .insert("refusal".into(), Value::Bool(true));
            }
            out.push(Decoded::Signal(signal));
        }
        if let Some(fragments) = tool_calls {
            for (position, fragment) in fragments.into_iter().enumerate() {
                self.add_tool_fragment(pos, position, fragment, false, &choice_extra, ctx, out);
            }
        }
        if let Some(fragment) = function_call.filter(|f| !f.is_empty()) {
            let fragment = Value::Object(fragment);
            self.add_tool_fragment(pos, 0, fragment, true, &choice_extra, ctx, out);
        }
        if let Some(reason) = finish_reason {
            let (tools, already_finished) = match self.stream.choices.get_mut(pos) {
                Some(state) => {
                    let was = state.finished;
                    state.finished = true;
                    (std::mem::take(&mut state.tools), was)
                }
                None => (Vec::new(), true),
            };
            self.emit_tools(index, tools, false, &choice_extra, ctx, out);
            if !already_finished {
                self.emit_completion(index, reason, &choice_extra, ctx, out);
            }
        }
        if out.len() == before && !choice_extra.is_empty() {
            let mut payload = Object::new();
            payload.insert("index".into(), Value::from(index));
            payload.extend(choice_extra);
            let mut signal = self.signal("openai.choice", payload, ctx.ts);
            signal.metadata = self.choice_meta(index, &Object::new(), ctx).map(Into::into);
            out.push(Decoded::Signal(signal));
        }
    }

    /// Adds one `tool_calls[]` fragment (or a legacy `function_call` delta) to choice
    /// `pos`. A fragment with a new `id` at an index whose call already has another id
    /// starts a new call: the previous one is complete and emitted now (some servers
    /// reuse index 0 for every call).
    #[allow(clippy::too_many_arguments)]
    fn add_tool_fragment(
        &mut self,
        pos: usize,
        position: usize,
        fragment: Value,
        legacy: bool,
        choice_extra: &Object,
        ctx: &Ctx,
        out: &mut Vec<Decoded>,
    ) {
        let Value::Object(mut fragment) = fragment else {
            return;
        };
        let explicit_index = fragment.remove("index").as_ref().and_then(as_count);
        let id = take_str(&mut fragment, "id").filter(|s| !s.is_empty());
        let kind = take_str(&mut fragment, "type");
        let (name, arguments) = if legacy {
            (
                take_str(&mut fragment, "name"),
                fragment.remove("arguments"),
            )
        } else {
            match fragment.remove("function") {
                Some(Value::Object(mut f)) => (take_str(&mut f, "name"), f.remove("arguments")),
                _ => (None, None),
            }
        };
        let Some(choice) = self.stream.choices.get_mut(pos) else {
            return;
        };
        let choice_index = choice.index;
        let slot = if legacy {
            Some(LEGACY_SLOT)
        } else {
            explicit_index
        };
        let existing = match (slot, &id) {
            (Some(i), _) => choice.tools.iter().position(|t| t.index == i),
            (None, Some(id)) => choice.tools.iter().position(|t| t.id.as_ref() == Some(id)),
            // No index, no id: the continuation of the latest call.
            (None, None) => choice.tools.len().checked_sub(1),
        };
        let mut replaced = None;
        let tool = match existing {
            Some(at) => {
                let same_call = match (&choice.tools.get(at).and_then(|t| t.id.clone()), &id) {
                    (Some(old), Some(new)) => old == new,
                    _ => true,
                };
                if !same_call {
                    let index = choice.tools.get(at).map(|t| t.index).unwrap_or(0);
                    let fresh = ToolState {
                        index,
                        legacy,
                        ..ToolState::default()
                    };
                    replaced = choice
                        .tools
                        .get_mut(at)
                        .map(|t| std::mem::replace(t, fresh));
                }
                choice.tools.get_mut(at)
            }
            None => {
                let next_free = choice
                    .tools
                    .iter()
                    .filter(|t| !t.legacy)
                    .map(|t| t.index + 1)
                    .max()
                    .unwrap_or(0);
                let index = slot.unwrap_or(next_free.max(position as u64));
                choice.tools.push(ToolState {
                    index,
                    legacy,
                    ..ToolState::default()
                });
                choice.tools.last_mut()
            }
        };
        if let Some(tool) = tool {
            if id.is_some() {
                tool.id = id;
            }
            if kind.is_some() {
                tool.kind = kind;
            }
            if let Some(name) = name.filter(|n| !n.is_empty() && *n != tool.name) {
                // Names arrive whole in the first fragment; a server that repeats the
                // name is not concatenated, one that streams it is.
                tool.name.push_str(&name);
            }
            match arguments {
                Some(Value::String(part)) => tool.arguments.push_str(&part),
                Some(Value::Object(obj)) => tool.object = Some(obj),
                _ => {}
            }
        }
        if let Some(previous) = replaced {
            self.emit_tools(choice_index, vec![previous], false, choice_extra, ctx, out);
        }
    }

    fn emit_tools(
        &self,
        choice: u64,
        mut tools: Vec<ToolState>,
        unfinished: bool,
        choice_extra: &Object,
        ctx: &Ctx,
        out: &mut Vec<Decoded>,
    ) {
        tools.sort_by_key(|t| t.index);
        for tool in tools {
            let input = match tool.object {
                Some(obj) if tool.arguments.trim().is_empty() => obj,
                _ => tool_call_arguments(tool.arguments),
            };
            let mut payload = Object::with_capacity(4);
            payload.insert("toolName".into(), Value::String(tool.name));
            payload.insert("agentId".into(), Value::String(self.agent_id()));
            if let Some(id) = tool.id {
                payload.insert("callId".into(), Value::String(id));
            }
            payload.insert("input".into(), Value::Object(input));
            let mut signal = self.signal("tool_call", payload, ctx.ts);
            signal.metadata = self.choice_meta(choice, choice_extra, ctx).map(Into::into);
            if tool.legacy {
                signal
                    .metadata_mut()
                    .insert("functionCall".into(), Value::Bool(true));
            } else {
                signal
                    .metadata_mut()
                    .insert("toolIndex".into(), Value::from(tool.index));
            }
            if let Some(kind) = tool.kind.filter(|k| k != "function") {
                signal
                    .metadata_mut()
                    .insert("toolType".into(), Value::String(kind));
            }
            if unfinished {
                signal = signal.with_meta("unfinished", true);
            }
            out.push(Decoded::Signal(signal));
        }
    }

    fn emit_completion(
        &self,
        choice: u64,
        reason: String,
        choice_extra: &Object,
        ctx: &Ctx,
        out: &mut Vec<Decoded>,
    ) {
        let task_id = self
            .stream
            .id
            .clone()
            .unwrap_or_else(|| self.source.to_string());
        let mut payload = Object::with_capacity(4);
        payload.insert("taskId".into(), Value::String(task_id));
        payload.insert("agentId".into(), Value::String(self.agent_id()));
        payload.insert("success".into(), Value::Bool(finish_succeeded(&reason)));
        payload.insert("result".into(), Value::String(reason));
        let mut signal = self.signal("completion", payload, ctx.ts);
        signal.metadata = self.choice_meta(choice, choice_extra, ctx).map(Into::into);
        self.add_stream_info(&mut signal);
        out.push(Decoded::Signal(signal));
    }

    fn emit_usage(&self, mut usage: Object, ctx: &Ctx, out: &mut Vec<Decoded>) {
        let prompt = usage.remove("prompt_tokens");
        let completion = usage.remove("completion_tokens");
        let (prompt_n, completion_n) = (
            prompt.as_ref().and_then(as_count),
            completion.as_ref().and_then(as_count),
        );
        if prompt_n.is_none() && completion_n.is_none() {
            // No counts: not a `token_usage` of 0/0, but kept as it came.
            for (key, value) in [("prompt_tokens", prompt), ("completion_tokens", completion)] {
                if let Some(value) = value {
                    usage.insert(key.into(), value);
                }
            }
            usage.retain(|_, v| is_informative(v));
            if !usage.is_empty() {
                let mut signal = self.signal("openai.usage", usage, ctx.ts);
                signal.metadata = (!ctx.extra.is_empty()).then(|| ctx.extra.clone().into());
                out.push(Decoded::Signal(signal));
            }
            return;
        }
        let mut payload = Object::with_capacity(4);
        payload.insert("agentId".into(), Value::String(self.agent_id()));
        payload.insert("promptTokens".into(), Value::from(prompt_n.unwrap_or(0)));
        payload.insert(
            "completionTokens".into(),
            Value::from(completion_n.unwrap_or(0)),
        );
        if let Some(model) = &self.stream.model {
            payload.insert("model".into(), Value::String(model.clone()));
        }
        let mut meta = Object::new();
        for (key, value) in [("prompt_tokens", prompt), ("completion_tokens", completion)] {
            // A count of the wrong shape (a string, a negative number) is kept as sent.
            if let Some(value) = value.filter(|v| as_count(v).is_none() && is_informative(v)) {
                meta.insert(key.into(), value);
            }
        }
        for (key, value) in usage {
            if is_informative(&value) {
                meta.insert(key, value);
            }
        }
        extend(&mut meta, &ctx.extra);
        let mut signal = self.signal("token_usage", payload, ctx.ts);
        signal.set_metadata(meta);
        self.add_stream_info(&mut signal);
        out.push(Decoded::Signal(signal));
    }

    fn emit_error(&self, error: Value, ctx: &Ctx, out: &mut Vec<Decoded>) {
        let mut meta = ctx.extra.clone();
        let (message, code) = match error {
            Value::Object(mut e) => {
                let code = match e.remove("code") {
                    Some(Value::String(s)) if !s.is_empty() => Some(s),
                    Some(Value::Number(n)) => Some(n.to_string()),
                    Some(other) if is_informative(&other) => {
                        meta.insert("code".into(), other);
                        None
                    }
                    _ => None,
                };
                let kind = take_str(&mut e, "type");
                let message = match take_str(&mut e, "message") {
                    Some(m) => m,
                    None => Value::Object(e.clone()).to_string(),
                };
                let code = code.or_else(|| kind.clone());
                if let Some(kind) = kind {
                    meta.insert("errorType".into(), Value::String(kind));
                }
                for (k, v) in e {
                    if is_informative(&v) {
                        meta.insert(k, v);
                    }
                }
                (message, code)
            }
            Value::String(s) => (s, None),
            other => (other.to_string(), None),
        };
        let payload = ErrorPayload {
            agent_id: self.stream.model.clone(),
            code,
            message,
            severity: Severity::Error,
        }
        .into_object();
        let mut signal = self.signal("error", payload, ctx.ts);
        signal.set_metadata(meta);
        out.push(Decoded::Signal(signal));
    }
}

/// What the signals of one chunk share.
struct Ctx {
    ts: i64,
    /// The chunk's fields that have no place in a payload.
    extra: Object,
}

fn extend(meta: &mut Object, from: &Object) {
    for (k, v) in from {
        meta.insert(k.clone(), v.clone());
    }
}
