//! What Codex sends (`codex app-server` JSON-RPC, `codex exec --json` events) to signals.

use std::collections::{BTreeMap, VecDeque};

use patchbay_graph::approvals::{self, Pending, Verdict};
use patchbay_signal::agent_table::AgentTable;
use patchbay_signal::decode::{DEFAULT_MAX_LINE, FrameDecoder, LineSplitter, StreamDecoder};
use patchbay_signal::decode::{camel_case, line_too_long};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::well_known::{
    AgentState, Completion, ErrorPayload, Payload, Severity, TaskDispatch, TextDelta, Thinking,
    TokenUsage, ToolCall, ToolResult, as_count,
};
use patchbay_signal::{Object, Signal, is_informative, millis_of, now_ms, object};
use serde_json::Value;

/// Which program asks, on the approvals board.
pub const PROGRAM: &str = "codex";

/// `approval.decided`'s `by` when the decision is the client's answer.
const CLIENT: &str = "client";

/// How many threads' states are remembered (an app-server has a few live at a time; the
/// bound only guards against a server that never ends its threads).
const MAX_TRACKED_THREADS: usize = 64;

/// How many tool items (started, not yet completed) are remembered.
const MAX_TRACKED_CALLS: usize = 256;

/// How many unanswered server requests are remembered.
const MAX_PENDING: usize = 256;

/// The decisions of an approval request that names none (`availableDecisions` absent).
const DEFAULT_CHOICES: [&str; 4] = ["accept", "acceptForSession", "decline", "cancel"];

/// A server → client request still waiting for the client's answer: an approval
/// (`item/commandExecution/requestApproval`, `item/fileChange/requestApproval`) or any
/// other request Codex blocks on until it is answered.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingApproval {
    /// The JSON-RPC id exactly as Codex sent it (a number, usually): the answer must
    /// carry the same.
    pub id: Value,
    /// The id as a string: the signals' `promptId`.
    pub prompt_id: String,
    /// The request's method.
    pub method: String,
    /// The thread it belongs to (`params.threadId`).
    pub thread_id: Option<String>,
    /// The turn it belongs to (`params.turnId`).
    pub turn_id: Option<String>,
    /// The item it is about (`params.itemId`: the command or file change waiting).
    pub item_id: Option<String>,
    /// The words the request accepts as `decision` (empty for a request that is not an
    /// approval).
    pub choices: Vec<String>,
    /// The decision the client answered, once [`CodexDecoder::client_message`] or
    /// [`CodexDecoder::answered`] saw it.
    pub decision: Option<String>,
    /// Who answered (a signal's source, `timeout`, `gate`), when the transport says so
    /// ([`CodexDecoder::answered`]); else `client`.
    pub by: Option<String>,
    /// For an approval, its entry for the graph's approvals board (what
    /// `approval.requested` says; `component` is the decoder's source).
    pub approval: Option<Pending>,
}

/// What the decoder keeps of one thread besides its state.
#[derive(Debug, Clone, Default)]
struct ThreadState {
    turn: Option<String>,
    model: Option<String>,
    /// The thread's running token totals (input, output), to derive an increment when an
    /// update carries no `last`.
    total: Option<(u64, u64)>,
    /// The last whole agent message of the current turn (exec's completion result).
    last_message: Option<String>,
}

/// A tool item started and not yet completed.
#[derive(Debug, Clone)]
struct Call {
    thread: String,
    item: String,
    input: Object,
}

/// What one message is about: its agent (thread), turn and time.
#[derive(Debug, Clone)]
struct Ctx {
    thread: String,
    agent: String,
    turn: Option<String>,
    ts: i64,
}

/// Decodes what Codex sends into signals (see the crate docs): `codex app-server`
/// JSON-RPC messages ([`message`](Self::message)) and `codex exec --json` events
/// ([`exec_event`](Self::exec_event)). It tracks each thread's state and turn, the tool
/// items in flight and the server's requests still unanswered.
#[derive(Debug, Clone)]
pub struct CodexDecoder {
    source: String,
    /// Each thread's state; the current one is the last thread seen, the agent of a
    /// message that names none.
    threads: AgentTable<ThreadState>,
    calls: VecDeque<Call>,
    pending: BTreeMap<String, PendingApproval>,
    last_timestamp: i64,
    /// A transcript's clock: `emittedAtMs` minus the recorded `t` (in ms) of the last line
    /// that had both, to time the lines without `emittedAtMs` (responses, requests).
    clock_offset: Option<i64>,
}

impl CodexDecoder {
    /// A decoder whose signals come from `source`.
    pub fn new(source: impl Into<String>) -> Self {
        CodexDecoder {
            source: source.into(),
            threads: AgentTable::new(MAX_TRACKED_THREADS),
            calls: VecDeque::new(),
            pending: BTreeMap::new(),
            last_timestamp: 0,
            clock_offset: None,
        }
    }

    /// The source name of the signals.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The last thread seen (the `agentId` of a message that names none).
    pub fn current_thread(&self) -> Option<&str> {
        self.threads.current()
    }

    /// The turn in progress on `thread`, if one is.
    pub fn current_turn(&self, thread: &str) -> Option<&str> {
        self.threads.get(thread).and_then(|t| t.turn.as_deref())
    }

    /// The server's requests not yet answered (approvals mostly), by id.
    pub fn pending(&self) -> impl Iterator<Item = &PendingApproval> {
        self.pending.values()
    }

    /// Removes the pending request with this `promptId` (`THREAD:ID`, or the JSON-RPC id
    /// alone for a request naming no thread), to answer it.
    pub fn take_pending(&mut self, id: &str) -> Option<PendingApproval> {
        self.pending.remove(id)
    }

    /// Decodes one line of a capture or a stream, whatever its form: a recorded transcript
    /// line `{"dir", "t", "msg"}` (`server->client` or `in` through [`message`](Self::message),
    /// `client->server` or `out` through [`client_message`](Self::client_message), other
    /// directions skipped), a `codex exec --json` event (an object with a string `type`
    /// and neither `method` nor `id`), or a bare JSON-RPC message.
    pub fn decode_value(&mut self, value: &Value, out: &mut Vec<Decoded>) {
        let Value::Object(obj) = value else {
            out.push(self.bad(&value.to_string(), "a Codex message must be a JSON object"));
            return;
        };
        if let (Some(Value::String(dir)), Some(msg)) = (obj.get("dir"), obj.get("msg")) {
            match dir.as_str() {
                "server->client" | "in" => {
                    let t = obj
                        .get("t")
                        .and_then(Value::as_f64)
                        .filter(|t| t.is_finite());
                    self.message_at(msg, t.map(|t| (t * 1000.0).round() as i64), out)
                }
                "client->server" | "out" => self.client_message(msg, out),
                _ => {}
            }
            return;
        }
        // A JSON-RPC message has a `method` or an `id` (`null` in an error about a message
        // that had none); an exec event has neither (its `error` field is no response).
        let rpc = obj.contains_key("method") || obj.contains_key("id");
        if !rpc && obj.get("type").is_some_and(Value::is_string) {
            self.exec_event(value, out);
        } else {
            self.message(value, out);
        }
    }

    /// Decodes one JSON-RPC message from `codex app-server`: a notification (`method`,
    /// `params`), a server → client request (`id`, `method`, `params`) or a response
    /// (`id`, `result` | `error`). Anything else is reported as bad input.
    ///
    /// The signals' time is the message's `emittedAtMs` (notifications have it), else now.
    pub fn message(&mut self, msg: &Value, out: &mut Vec<Decoded>) {
        self.message_at(msg, None, out);
    }

    /// [`message`](Self::message) for a transcript line recorded at `recorded_ms` (its
    /// `t`, relative): a message without `emittedAtMs` is timed by the transcript's clock
    /// (set by the last line that had both) when known, else now.
    fn message_at(&mut self, msg: &Value, recorded_ms: Option<i64>, out: &mut Vec<Decoded>) {
        let Value::Object(obj) = msg else {
            out.push(self.bad(&msg.to_string(), "a JSON-RPC message must be a JSON object"));
            return;
        };
        let start = out.len();
        let emitted = obj.get("emittedAtMs").and_then(millis_of);
        let ts = match (emitted, recorded_ms) {
            (Some(emitted), Some(t)) => {
                self.clock_offset = Some(emitted.saturating_sub(t));
                emitted
            }
            (Some(emitted), None) => emitted,
            (None, Some(t)) => match self.clock_offset {
                Some(offset) => t.saturating_add(offset),
                None => now_ms(),
            },
            (None, None) => now_ms(),
        };
        let id = obj.get("id").filter(|id| !id.is_null());
        let params = match obj.get("params") {
            Some(Value::Object(p)) => p.clone(),
            None | Some(Value::Null) => Object::new(),
            Some(other) => object! { "value" => other.clone() },
        };
        match (obj.get("method"), id) {
            (Some(Value::String(method)), Some(id)) => self.request(method, id, params, ts, out),
            (Some(Value::String(method)), None) => self.notification(method, params, ts, out),
            (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
                self.response(id, obj, ts, out)
            }
            _ => out.push(self.bad(
                &msg.to_string(),
                "not a JSON-RPC request, response or notification",
            )),
        }
        self.note_time(&out[start..]);
    }

    /// Observes one message the client sent to `codex app-server` (a transcript's
    /// `client->server` line, or a transport's own answer). It emits nothing: an answer to
    /// a pending approval records its `decision`, which the server's
    /// `serverRequest/resolved` then reports as `approval.decided`.
    pub fn client_message(&mut self, msg: &Value, _out: &mut Vec<Decoded>) {
        let Value::Object(obj) = msg else { return };
        if obj.contains_key("method") {
            return;
        }
        let (Some(id), Some(result)) = (obj.get("id"), obj.get("result")) else {
            return;
        };
        if let Some(pending) = self.pending.values_mut().find(|p| p.id == *id)
            && let Some(decision) = result.get("decision").and_then(decision_word)
        {
            pending.decision = Some(decision);
        }
    }

    /// Notes that the transport answered the request `prompt_id` with `decision` on the
    /// word of `by`: `serverRequest/resolved` then reports it as `approval.decided` by
    /// `by`.
    pub fn answered(&mut self, prompt_id: &str, decision: &str, by: &str) {
        if let Some(pending) = self.pending.get_mut(prompt_id) {
            pending.decision = Some(decision.to_owned());
            pending.by = Some(by.to_owned());
        }
    }

    /// Decodes one `codex exec --json` event (`thread.started`, `turn.started`,
    /// `item.started` / `item.updated` / `item.completed`, `turn.completed`,
    /// `turn.failed`, `error`).
    pub fn exec_event(&mut self, event: &Value, out: &mut Vec<Decoded>) {
        let Some(obj) = event.as_object() else {
            out.push(self.bad(&event.to_string(), "an exec event must be a JSON object"));
            return;
        };
        let Some(kind) = obj.get("type").and_then(Value::as_str) else {
            out.push(self.bad(&event.to_string(), "an exec event needs a string `type`"));
            return;
        };
        let start = out.len();
        let mut rest = obj.clone();
        rest.shift_remove("type");
        if kind == "thread.started"
            && let Some(thread) = obj.get("thread_id").and_then(Value::as_str)
        {
            self.threads.set_current(thread);
        }
        let thread = self.threads.current().unwrap_or_default().to_owned();
        let ctx = Ctx {
            agent: self.agent_of(&thread),
            thread,
            turn: None,
            ts: now_ms(),
        };
        match kind {
            "turn.started" => {
                self.threads.get_mut(&ctx.thread).last_message = None;
                out.extend(self.transition(&ctx, AgentState::Thinking, None));
            }
            "turn.completed" => {
                if let Some(Value::Object(usage)) = obj.get("usage") {
                    let signal = self.exec_usage(&ctx, usage);
                    out.push(self.finish(&ctx, signal));
                }
                self.end_exec_turn(&ctx, true, out);
            }
            "turn.failed" => {
                let message = error_message(obj.get("error")).unwrap_or("the turn failed");
                let error = ErrorPayload {
                    agent_id: Some(ctx.agent.clone()),
                    code: Some("turn_failed".into()),
                    message: message.to_owned(),
                    severity: Severity::Error,
                }
                .into_signal(&self.source);
                out.push(self.finish(&ctx, error));
                self.end_exec_turn(&ctx, false, out);
            }
            "error" => {
                let message = obj
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("error");
                let error = ErrorPayload {
                    agent_id: Some(ctx.agent.clone()),
                    code: None,
                    message: message.to_owned(),
                    severity: Severity::Error,
                }
                .into_signal(&self.source);
                out.push(self.finish(&ctx, error));
            }
            "item.started" | "item.updated" | "item.completed" => {
                if !self.exec_item(&ctx, kind, obj.get("item"), out) {
                    let signal = Signal::new(format!("codex.{kind}"), &self.source, rest);
                    out.push(self.finish(&ctx, signal));
                }
            }
            _ => {
                let signal = Signal::new(format!("codex.{kind}"), &self.source, rest);
                out.push(self.finish(&ctx, signal));
            }
        }
        self.note_time(&out[start..]);
    }

    // ---- app-server ------------------------------------------------------------------

    fn notification(&mut self, method: &str, params: Object, ts: i64, out: &mut Vec<Decoded>) {
        if method == "thread/started"
            && let Some(Value::Object(thread)) = params.get("thread")
            && let Some(id) = thread.get("id").and_then(Value::as_str)
        {
            self.threads.set_current(id);
            if let Some(model) = thread.get("model").and_then(Value::as_str) {
                self.threads.get_mut(id).model = Some(model.to_owned());
            }
        }
        if method == "turn/started"
            && let Some(turn) = params
                .get("turn")
                .and_then(|t| t.get("id"))
                .and_then(Value::as_str)
        {
            let thread = self.thread_of(&params);
            self.threads.get_mut(&thread).turn = Some(turn.to_owned());
        }
        let ctx = self.ctx(&params, ts);
        let handled = match method {
            "item/agentMessage/delta" => self.delta(&ctx, &params, false, out),
            "item/reasoning/textDelta" | "item/reasoning/summaryTextDelta" => {
                self.delta(&ctx, &params, true, out)
            }
            "item/started" => self.item_started(&ctx, &params, out),
            "item/completed" => self.item_completed(&ctx, &params, out),
            "thread/tokenUsage/updated" => self.token_usage(&ctx, &params, out),
            "turn/started" => {
                self.threads.get_mut(&ctx.thread).last_message = None;
                out.extend(self.transition(&ctx, AgentState::Thinking, None));
                true
            }
            "turn/completed" => self.turn_completed(&ctx, &params, out),
            "thread/status/changed" => self.status_changed(&ctx, &params, out),
            "error" => self.error_notification(&ctx, &params, out),
            "warning" => {
                let message = params.get("message").and_then(Value::as_str);
                match message {
                    Some(message) => {
                        let mut error = ErrorPayload {
                            agent_id: Some(ctx.agent.clone()),
                            code: Some("warning".into()),
                            message: message.to_owned(),
                            severity: Severity::Warning,
                        }
                        .into_signal(&self.source);
                        let extra = rest_of(&params, &["message", "threadId", "turnId"]);
                        if !extra.is_empty() {
                            error = error.with_meta("codex", Value::Object(extra));
                        }
                        out.push(self.finish(&ctx, error));
                        true
                    }
                    None => false,
                }
            }
            "serverRequest/resolved" => self.resolved(&ctx, &params, out),
            _ => false,
        };
        if !handled {
            let signal = Signal::new(format!("codex.{method}"), &self.source, params);
            out.push(self.finish(&ctx, signal));
        }
    }

    fn request(
        &mut self,
        method: &str,
        id: &Value,
        params: Object,
        ts: i64,
        out: &mut Vec<Decoded>,
    ) {
        let ctx = self.ctx(&params, ts);
        let prompt_id = prompt_of(&ctx.thread, id);
        let tool_name = match method {
            "item/commandExecution/requestApproval" => Some("commandExecution"),
            "item/fileChange/requestApproval" => Some("fileChange"),
            _ => None,
        };
        let item_id = params
            .get("itemId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let choices = match tool_name {
            Some(_) => choices_of(params.get("availableDecisions")),
            None => Vec::new(),
        };
        if self.pending.len() >= MAX_PENDING
            && let Some(oldest) = self.pending.keys().next().cloned()
        {
            self.pending.remove(&oldest);
        }
        let mut pending = PendingApproval {
            id: id.clone(),
            prompt_id: prompt_id.clone(),
            method: method.to_owned(),
            thread_id: str_of(&params, "threadId"),
            turn_id: str_of(&params, "turnId"),
            item_id: item_id.clone(),
            choices: choices.clone(),
            decision: None,
            by: None,
            approval: None,
        };
        let Some(tool_name) = tool_name else {
            // A request that is not an approval: passed on, to be answered by its promptId.
            self.pending.insert(prompt_id.clone(), pending);
            let mut signal = Signal::new(format!("codex.{method}"), &self.source, params)
                .with_meta("promptId", prompt_id);
            if !id.is_string() {
                signal = signal.with_meta("rpcId", id.clone());
            }
            out.push(self.finish(&ctx, signal));
            return;
        };
        let remembered = item_id
            .as_deref()
            .and_then(|item| self.call(&ctx.thread, item))
            .map(|c| c.input.clone());
        let input = if tool_name == "commandExecution" {
            let input = pick(&params, &["command", "cwd"]);
            match remembered {
                Some(r) if input.is_empty() => r,
                _ => input,
            }
        } else {
            match remembered {
                Some(r) => r,
                None => pick(&params, &["itemId", "reason", "grantRoot"]),
            }
        };
        out.extend(self.transition(&ctx, AgentState::Waiting, Some("approval requested")));
        let approval = Pending {
            prompt_id: prompt_id.clone(),
            component: self.source.clone(),
            agent_id: ctx.agent.clone(),
            program: PROGRAM.to_owned(),
            tool_name: tool_name.to_owned(),
            input: Value::Object(input),
            choices,
            requested_at_ms: ts,
        };
        let mut details = object! { "codex" => Value::Object(params) };
        if !id.is_string() {
            details.insert("rpcId".into(), id.clone());
        }
        let signal = approvals::requested(&self.source, &approval, details);
        pending.approval = Some(approval);
        self.pending.insert(prompt_id, pending);
        out.push(self.finish(&ctx, signal));
    }

    fn response(&mut self, id: &Value, msg: &Object, ts: i64, out: &mut Vec<Decoded>) {
        let result = msg.get("result");
        // `thread/start`, `thread/resume`, `thread/fork`: the thread, and its model.
        if let Some(Value::Object(thread)) = result.and_then(|r| r.get("thread"))
            && let Some(thread_id) = thread.get("id").and_then(Value::as_str)
        {
            self.threads.set_current(thread_id);
            let model = result
                .and_then(|r| r.get("model"))
                .or_else(|| thread.get("model"))
                .and_then(Value::as_str);
            if let Some(model) = model {
                self.threads.get_mut(thread_id).model = Some(model.to_owned());
            }
        }
        let thread = self.threads.current().unwrap_or_default().to_owned();
        let ctx = Ctx {
            agent: self.agent_of(&thread),
            turn: None,
            thread,
            ts,
        };
        if let Some(error) = msg.get("error").filter(|e| !e.is_null()) {
            let code = match error.get("code") {
                Some(Value::String(c)) => Some(c.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            };
            let message = error_message(Some(error)).unwrap_or("error response");
            let mut signal = ErrorPayload {
                agent_id: None,
                code,
                message: message.to_owned(),
                severity: Severity::Error,
            }
            .into_signal(&self.source)
            .with_meta("id", id.clone());
            if let Some(data) = error.get("data").filter(|d| is_informative(d)) {
                signal = signal.with_meta("data", data.clone());
            }
            out.push(self.finish(&ctx, signal));
            return;
        }
        let mut payload = object! { "id" => id.clone() };
        for (k, v) in msg {
            if k != "id" && k != "jsonrpc" {
                payload.insert(k.clone(), v.clone());
            }
        }
        let signal = Signal::new("codex.response", &self.source, payload);
        out.push(self.finish(&ctx, signal));
    }

    fn delta(
        &mut self,
        ctx: &Ctx,
        params: &Object,
        thinking: bool,
        out: &mut Vec<Decoded>,
    ) -> bool {
        let Some(delta) = params.get("delta").and_then(Value::as_str) else {
            return false;
        };
        let mut signal = if thinking {
            Thinking {
                agent_id: ctx.agent.clone(),
                content: delta.to_owned(),
            }
            .into_signal(&self.source)
        } else {
            TextDelta {
                agent_id: ctx.agent.clone(),
                content: delta.to_owned(),
                content_type: None,
                index: None,
            }
            .into_signal(&self.source)
        };
        let meta = rest_of(params, &["threadId", "turnId", "delta"]);
        if !meta.is_empty() {
            signal.set_metadata(meta);
        }
        out.push(self.finish(ctx, signal));
        true
    }

    fn item_started(&mut self, ctx: &Ctx, params: &Object, out: &mut Vec<Decoded>) -> bool {
        let Some(Value::Object(item)) = params.get("item") else {
            return false;
        };
        match item.get("type").and_then(Value::as_str) {
            Some("commandExecution" | "fileChange" | "mcpToolCall") => {
                self.tool_call(ctx, item, out)
            }
            Some("userMessage") => {
                let text = user_text(item.get("content"));
                let task_id = ctx
                    .turn
                    .clone()
                    .or_else(|| str_of(item, "id"))
                    .unwrap_or_default();
                let mut signal = TaskDispatch {
                    task_id,
                    from: "user".into(),
                    to: ctx.agent.clone(),
                    description: (!text.is_empty()).then_some(text),
                }
                .into_signal(&self.source);
                if let Some(id) = item.get("id") {
                    signal = signal.with_meta("itemId", id.clone());
                }
                out.push(self.finish(ctx, signal));
                true
            }
            _ => false,
        }
    }

    fn item_completed(&mut self, ctx: &Ctx, params: &Object, out: &mut Vec<Decoded>) -> bool {
        let Some(Value::Object(item)) = params.get("item") else {
            return false;
        };
        match item.get("type").and_then(Value::as_str) {
            Some("commandExecution" | "fileChange" | "mcpToolCall") => {
                self.tool_result(ctx, item, false, out)
            }
            Some("agentMessage") => {
                // The text went out as deltas: the final item passes as `codex.item/completed`.
                if let Some(text) = item.get("text").and_then(Value::as_str) {
                    self.threads.get_mut(&ctx.thread).last_message = Some(text.to_owned());
                }
                false
            }
            _ => false,
        }
    }

    /// `tool_call` for a tool item (app-server's camelCase or exec's snake_case fields).
    fn tool_call(&mut self, ctx: &Ctx, item: &Object, out: &mut Vec<Decoded>) -> bool {
        let Some(call_id) = str_of(item, "id") else {
            return false;
        };
        let (tool_name, input, used) = tool_input(item);
        self.remember_call(&ctx.thread, &call_id, input.clone());
        let signal = ToolCall {
            tool_name,
            agent_id: ctx.agent.clone(),
            call_id: Some(call_id),
            input: Some(input),
        }
        .into_signal(&self.source);
        out.push(self.finish(ctx, with_rest(signal, item, &used)));
        true
    }

    /// `tool_result` for a completed tool item (and its `tool_call` first when its start
    /// was not seen).
    fn tool_result(
        &mut self,
        ctx: &Ctx,
        item: &Object,
        exec: bool,
        out: &mut Vec<Decoded>,
    ) -> bool {
        let Some(call_id) = str_of(item, "id") else {
            return false;
        };
        if !self.forget_call(&ctx.thread, &call_id) {
            self.tool_call(ctx, item, out);
            self.forget_call(&ctx.thread, &call_id);
        }
        let (tool_name, _, _) = tool_input(item);
        let key = |camel: &'static str, snake: &'static str| if exec { snake } else { camel };
        let status = item.get("status").and_then(Value::as_str).unwrap_or("");
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        let mut output = Object::new();
        let mut used: Vec<&str> = vec!["id", "type", "status"];
        if !status.is_empty() {
            output.insert("status".into(), Value::from(status));
        }
        let success = match kind {
            "commandExecution" | "command_execution" => {
                let exit = item
                    .get(key("exitCode", "exit_code"))
                    .filter(|v| !v.is_null());
                let aggregated = item
                    .get(key("aggregatedOutput", "aggregated_output"))
                    .filter(|v| !v.is_null());
                used.extend([
                    key("exitCode", "exit_code"),
                    key("aggregatedOutput", "aggregated_output"),
                ]);
                used.extend(["command", "cwd"]);
                if let Some(exit) = exit {
                    output.insert("exitCode".into(), exit.clone());
                }
                if let Some(aggregated) = aggregated {
                    output.insert("output".into(), aggregated.clone());
                }
                status == "completed" && exit.is_none_or(|e| e.as_i64() == Some(0))
            }
            "mcpToolCall" | "mcp_tool_call" => {
                used.extend(["server", "tool", "arguments", "result", "error"]);
                for k in ["result", "error"] {
                    if let Some(v) = item.get(k).filter(|v| !v.is_null()) {
                        output.insert(k.into(), v.clone());
                    }
                }
                status == "completed" && item.get("error").is_none_or(Value::is_null)
            }
            _ => {
                used.push("changes");
                if let Some(changes) = item.get("changes").filter(|v| !v.is_null()) {
                    output.insert("changes".into(), changes.clone());
                }
                status == "completed"
            }
        };
        if status == "declined" {
            output.insert("declined".into(), Value::Bool(true));
        }
        let signal = ToolResult {
            tool_name,
            agent_id: ctx.agent.clone(),
            call_id: Some(call_id),
            success,
            output: Some(output),
        }
        .into_signal(&self.source);
        out.push(self.finish(ctx, with_rest(signal, item, &used)));
        true
    }

    fn token_usage(&mut self, ctx: &Ctx, params: &Object, out: &mut Vec<Decoded>) -> bool {
        let Some(Value::Object(usage)) = params.get("tokenUsage") else {
            return false;
        };
        let counts = |o: &Object| {
            let n = |k: &str| o.get(k).and_then(as_count);
            n("inputTokens").zip(n("outputTokens"))
        };
        let total = usage
            .get("total")
            .and_then(Value::as_object)
            .and_then(counts);
        let last = usage.get("last").and_then(Value::as_object);
        let state = self.threads.get_mut(&ctx.thread);
        let previous = state.total;
        if total.is_some() {
            state.total = total;
        }
        let model = state.model.clone();
        // `last` is the increment (one model request); without it, the difference of the
        // running totals, so that nothing is counted twice.
        let (prompt, completion) = match (last.and_then(counts), total, previous) {
            (Some(last), _, _) => last,
            (None, Some((i, o)), Some((pi, po))) => (i.saturating_sub(pi), o.saturating_sub(po)),
            (None, Some(t), None) => t,
            (None, None, _) => return false,
        };
        let mut signal = TokenUsage {
            agent_id: ctx.agent.clone(),
            prompt_tokens: prompt,
            completion_tokens: completion,
            model,
            cost: None,
        }
        .into_signal(&self.source);
        let mut meta = last
            .map(|l| rest_of(l, &["inputTokens", "outputTokens"]))
            .unwrap_or_default();
        for k in ["total", "modelContextWindow"] {
            if let Some(v) = usage.get(k).filter(|v| !v.is_null()) {
                meta.insert(k.into(), v.clone());
            }
        }
        signal.set_metadata(meta);
        out.push(self.finish(ctx, signal));
        true
    }

    fn turn_completed(&mut self, ctx: &Ctx, params: &Object, out: &mut Vec<Decoded>) -> bool {
        let Some(Value::Object(turn)) = params.get("turn") else {
            return false;
        };
        let status = turn
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("completed");
        let task_id = ctx
            .turn
            .clone()
            .or_else(|| str_of(turn, "id"))
            .unwrap_or_else(|| "unknown-turn".to_owned());
        if status == "failed" {
            let error = turn.get("error").filter(|e| !e.is_null());
            let mut signal = ErrorPayload {
                agent_id: Some(ctx.agent.clone()),
                code: error
                    .and_then(|e| error_code(e.get("codexErrorInfo")))
                    .or(Some("turn_failed".into())),
                message: error_message(error).unwrap_or("the turn failed").to_owned(),
                severity: Severity::Error,
            }
            .into_signal(&self.source);
            if let Some(error) = error {
                signal = signal.with_meta("codex", error.clone());
            }
            out.push(self.finish(ctx, signal));
        }
        // The turn's final answer: its last agent message.
        let result = turn
            .get("items")
            .and_then(Value::as_array)
            .and_then(|items| {
                items.iter().rev().find_map(|i| {
                    (i.get("type").and_then(Value::as_str) == Some("agentMessage"))
                        .then(|| i.get("text").and_then(Value::as_str))
                        .flatten()
                })
            })
            .map(str::to_owned)
            .or_else(|| self.threads.get_mut(&ctx.thread).last_message.take());
        let mut completion = Completion {
            task_id,
            agent_id: Some(ctx.agent.clone()),
            success: status == "completed",
            result,
        }
        .into_signal(&self.source)
        .with_meta("status", status);
        if let Some(ms) = turn.get("durationMs").filter(|v| !v.is_null()) {
            completion = completion.with_meta("durationMs", ms.clone());
        }
        out.push(self.finish(ctx, completion));
        let (to, reason) = match status {
            "failed" => (AgentState::Error, "failed"),
            "interrupted" => (AgentState::Idle, "interrupted"),
            _ => (AgentState::Idle, "completed"),
        };
        out.extend(self.transition(ctx, to, Some(reason)));
        let state = self.threads.get_mut(&ctx.thread);
        state.turn = None;
        state.last_message = None;
        true
    }

    fn status_changed(&mut self, ctx: &Ctx, params: &Object, out: &mut Vec<Decoded>) -> bool {
        let Some(Value::Object(status)) = params.get("status") else {
            return false;
        };
        let kind = status.get("type").and_then(Value::as_str).unwrap_or("");
        let waiting = status
            .get("activeFlags")
            .and_then(Value::as_array)
            .is_some_and(|flags| flags.iter().any(|f| f == "waitingOnApproval"));
        let current = self.threads.state_of(&ctx.thread);
        let (to, reason) = match kind {
            "active" if waiting => (AgentState::Waiting, "waitingOnApproval"),
            "active" if current == AgentState::Waiting => (AgentState::Thinking, "active"),
            "systemError" => (AgentState::Error, "systemError"),
            // `idle` comes just before `turn/completed`, which says how the turn ended.
            _ => return false,
        };
        self.transition(ctx, to, Some(reason))
            .map(|change| out.push(change))
            .is_some()
    }

    fn error_notification(&mut self, ctx: &Ctx, params: &Object, out: &mut Vec<Decoded>) -> bool {
        let error = params.get("error").filter(|e| e.is_object());
        let Some(message) = error_message(error) else {
            return false;
        };
        let will_retry = params.get("willRetry").and_then(Value::as_bool) == Some(true);
        let mut signal = ErrorPayload {
            agent_id: Some(ctx.agent.clone()),
            code: error.and_then(|e| error_code(e.get("codexErrorInfo"))),
            message: message.to_owned(),
            severity: if will_retry {
                Severity::Warning
            } else {
                Severity::Error
            },
        }
        .into_signal(&self.source);
        let rest = rest_of(params, &["threadId", "turnId"]);
        if !rest.is_empty() {
            signal = signal.with_meta("codex", Value::Object(rest));
        }
        out.push(self.finish(ctx, signal));
        true
    }

    fn resolved(&mut self, ctx: &Ctx, params: &Object, out: &mut Vec<Decoded>) -> bool {
        let Some(id) = params.get("requestId") else {
            return false;
        };
        let thread = params
            .get("threadId")
            .and_then(Value::as_str)
            .unwrap_or(&ctx.thread);
        let prompt_id = prompt_of(thread, id);
        let pending = self.pending.remove(&prompt_id);
        let decision = pending.as_ref().and_then(|p| p.decision.clone());
        let by = pending
            .as_ref()
            .and_then(|p| p.by.clone())
            .unwrap_or_else(|| CLIENT.to_owned());
        let Some(decision) = decision else {
            let signal = Signal::new("codex.serverRequest/resolved", &self.source, params.clone())
                .with_meta("promptId", prompt_id);
            out.push(self.finish(ctx, signal));
            return true;
        };
        let payload = match verdict_of(&decision) {
            Some(verdict) => approvals::decided_payload(&prompt_id, verdict, &by),
            None => {
                object! { "promptId" => prompt_id, "value" => decision.clone(), "by" => by }
            }
        };
        let signal = Signal::new(approvals::DECIDED, &self.source, payload)
            .with_meta("decision", decision)
            .with_meta("codex", Value::Object(params.clone()));
        out.push(self.finish(ctx, signal));
        true
    }

    // ---- exec ------------------------------------------------------------------------

    fn exec_item(
        &mut self,
        ctx: &Ctx,
        kind: &str,
        item: Option<&Value>,
        out: &mut Vec<Decoded>,
    ) -> bool {
        let Some(Value::Object(item)) = item else {
            return false;
        };
        let completed = kind == "item.completed";
        let signal = match item.get("type").and_then(Value::as_str) {
            Some("command_execution" | "file_change" | "mcp_tool_call") => {
                return if completed {
                    self.tool_result(ctx, item, true, out)
                } else if kind == "item.started" {
                    self.tool_call(ctx, item, out)
                } else {
                    false
                };
            }
            Some("agent_message") if completed => {
                let Some(text) = item.get("text").and_then(Value::as_str) else {
                    return false;
                };
                self.threads.get_mut(&ctx.thread).last_message = Some(text.to_owned());
                TextDelta {
                    agent_id: ctx.agent.clone(),
                    content: text.to_owned(),
                    content_type: None,
                    index: None,
                }
                .into_signal(&self.source)
            }
            Some("reasoning") if completed => {
                let Some(text) = item.get("text").and_then(Value::as_str) else {
                    return false;
                };
                Thinking {
                    agent_id: ctx.agent.clone(),
                    content: text.to_owned(),
                }
                .into_signal(&self.source)
            }
            Some("error") if completed => {
                let Some(message) = item.get("message").and_then(Value::as_str) else {
                    return false;
                };
                ErrorPayload {
                    agent_id: Some(ctx.agent.clone()),
                    code: Some("warning".into()),
                    message: message.to_owned(),
                    severity: Severity::Warning,
                }
                .into_signal(&self.source)
            }
            _ => return false,
        };
        out.push(self.finish(ctx, with_item_id(signal, item)));
        true
    }

    fn exec_usage(&mut self, ctx: &Ctx, usage: &Object) -> Signal {
        let n = |k: &str| usage.get(k).and_then(as_count).unwrap_or(0);
        let model = self.threads.get_mut(&ctx.thread).model.clone();
        let mut signal = TokenUsage {
            agent_id: ctx.agent.clone(),
            prompt_tokens: n("input_tokens"),
            completion_tokens: n("output_tokens"),
            model,
            cost: None,
        }
        .into_signal(&self.source);
        let mut meta = Object::new();
        for (k, v) in usage {
            if k == "input_tokens" || k == "output_tokens" {
                continue;
            }
            meta.insert(camel_case(k), v.clone());
        }
        signal.set_metadata(meta);
        signal
    }

    fn end_exec_turn(&mut self, ctx: &Ctx, success: bool, out: &mut Vec<Decoded>) {
        let result = self.threads.get_mut(&ctx.thread).last_message.take();
        // An exec run is one task: its thread.
        let completion = Completion {
            task_id: if ctx.thread.is_empty() {
                "unknown-thread".to_owned()
            } else {
                ctx.thread.clone()
            },
            agent_id: Some(ctx.agent.clone()),
            success,
            result,
        }
        .into_signal(&self.source);
        out.push(self.finish(ctx, completion));
        let (to, reason) = if success {
            (AgentState::Idle, "completed")
        } else {
            (AgentState::Error, "failed")
        };
        out.extend(self.transition(ctx, to, Some(reason)));
    }

    // ---- state -----------------------------------------------------------------------

    fn ctx(&self, params: &Object, ts: i64) -> Ctx {
        let thread = self.thread_of(params);
        let turn = str_of(params, "turnId")
            .or_else(|| {
                params
                    .get("turn")
                    .and_then(|t| t.get("id"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .or_else(|| self.threads.get(&thread).and_then(|t| t.turn.clone()));
        Ctx {
            agent: self.agent_of(&thread),
            thread,
            turn,
            ts,
        }
    }

    /// The thread a message is about: its `threadId`, else the last thread seen.
    fn thread_of(&self, params: &Object) -> String {
        str_of(params, "threadId")
            .or_else(|| self.threads.current().map(str::to_owned))
            .unwrap_or_default()
    }

    fn agent_of(&self, thread: &str) -> String {
        if thread.is_empty() {
            self.source.clone()
        } else {
            thread.to_owned()
        }
    }

    /// The `agent_state_change` to `to` from the thread's last state; `None` if it is
    /// there already.
    fn transition(&mut self, ctx: &Ctx, to: AgentState, reason: Option<&str>) -> Option<Decoded> {
        let change = self
            .threads
            .transition(&ctx.thread, &ctx.agent, to, reason)?;
        Some(self.finish(ctx, change.into_signal(&self.source)))
    }

    fn remember_call(&mut self, thread: &str, item: &str, input: Object) {
        self.forget_call(thread, item);
        if self.calls.len() >= MAX_TRACKED_CALLS {
            self.calls.pop_front();
        }
        self.calls.push_back(Call {
            thread: thread.to_owned(),
            item: item.to_owned(),
            input,
        });
    }

    fn call(&self, thread: &str, item: &str) -> Option<&Call> {
        self.calls
            .iter()
            .find(|c| c.thread == thread && c.item == item)
    }

    /// Forgets a tool item; whether it was known.
    fn forget_call(&mut self, thread: &str, item: &str) -> bool {
        match self
            .calls
            .iter()
            .position(|c| c.thread == thread && c.item == item)
        {
            Some(i) => {
                self.calls.remove(i);
                true
            }
            None => false,
        }
    }

    fn finish(&self, ctx: &Ctx, signal: Signal) -> Decoded {
        let signal = signal.at(ctx.ts);
        Decoded::Signal(match &ctx.turn {
            Some(turn) => signal.correlated(turn.as_str()),
            None => signal,
        })
    }

    fn note_time(&mut self, decoded: &[Decoded]) {
        if let Some(Decoded::Signal(last)) = decoded.iter().rev().find(|d| !d.is_bad()) {
            self.last_timestamp = last.timestamp;
        }
    }

    /// The counted bad-input `error` signal for `raw`.
    pub(crate) fn bad(&self, raw: &str, message: &str) -> Decoded {
        let signal = bad_input_signal(&self.source, self.last_timestamp, raw, message);
        Decoded::BadInput(signal)
    }
}

impl FrameDecoder for CodexDecoder {
    fn decode_frame(&mut self, frame: Value, _recorded_t: Option<i64>, out: &mut Vec<Decoded>) {
        self.decode_value(&frame, out);
    }

    fn bad_line(&self, raw: &str, message: &str) -> Decoded {
        self.bad(raw, message)
    }
}

/// The byte-stream form of [`CodexDecoder`]: NDJSON lines (up to [`DEFAULT_MAX_LINE`]
/// bytes), each read by [`CodexDecoder::decode_value`]; a line that is not JSON is a
/// counted bad input.
#[derive(Debug, Clone)]
pub struct CodexStream {
    lines: LineSplitter,
    decoder: CodexDecoder,
}

impl CodexStream {
    /// Drives `decoder` over NDJSON.
    pub fn new(decoder: CodexDecoder) -> Self {
        CodexStream {
            lines: LineSplitter::new(DEFAULT_MAX_LINE),
            decoder,
        }
    }

    /// The decoder inside.
    pub fn decoder(&self) -> &CodexDecoder {
        &self.decoder
    }

    /// The decoder inside, mutably (to take a pending request and answer it).
    pub fn decoder_mut(&mut self) -> &mut CodexDecoder {
        &mut self.decoder
    }
}

fn decode_line(decoder: &mut CodexDecoder, line: Result<&str, &str>, out: &mut Vec<Decoded>) {
    match line {
        Ok(text) => decoder.decode_text(text, out),
        Err(head) => out.push(decoder.bad(head, &line_too_long(DEFAULT_MAX_LINE))),
    }
}

impl StreamDecoder for CodexStream {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let decoder = &mut self.decoder;
        self.lines
            .feed(bytes, |line| decode_line(decoder, line, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let decoder = &mut self.decoder;
        self.lines.finish(|line| decode_line(decoder, line, out));
    }
}

// ---- helpers -----------------------------------------------------------------------

/// The `promptId` of the request `id` of `thread`: the thread and the JSON-RPC id
/// (`THREAD:ID`), unique across every Codex a graph runs (each numbers its requests from
/// 0); the id alone when no thread is known.
fn prompt_of(thread: &str, id: &Value) -> String {
    let id = match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if thread.is_empty() {
        id
    } else {
        format!("{thread}:{id}")
    }
}

fn str_of(obj: &Object, key: &str) -> Option<String> {
    obj.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The fields of `obj` named in `keys` that carry something.
fn pick(obj: &Object, keys: &[&str]) -> Object {
    keys.iter()
        .filter_map(|k| {
            obj.get(*k)
                .filter(|v| is_informative(v))
                .map(|v| ((*k).to_owned(), v.clone()))
        })
        .collect()
}

/// The fields of `obj` not named in `used` that carry something.
fn rest_of(obj: &Object, used: &[&str]) -> Object {
    obj.iter()
        .filter(|(k, v)| !used.contains(&k.as_str()) && is_informative(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A tool item's `toolName`, `input`, and the item fields they used.
fn tool_input(item: &Object) -> (String, Object, Vec<&'static str>) {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "commandExecution" | "command_execution" => (
            "commandExecution".to_owned(),
            pick(item, &["command", "cwd"]),
            vec!["id", "type", "command", "cwd", "status"],
        ),
        "mcpToolCall" | "mcp_tool_call" => {
            let name = str_of(item, "tool").unwrap_or_else(|| "mcpToolCall".to_owned());
            let input = match item.get("arguments") {
                Some(Value::Object(args)) => args.clone(),
                None | Some(Value::Null) => Object::new(),
                Some(other) => object! { "arguments" => other.clone() },
            };
            (
                name,
                input,
                vec!["id", "type", "tool", "arguments", "status"],
            )
        }
        _ => (
            "fileChange".to_owned(),
            pick(item, &["changes"]),
            vec!["id", "type", "changes", "status"],
        ),
    }
}

/// A decision word: a string as it is, an object by its single key.
fn decision_word(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) if o.len() == 1 => o.keys().next().cloned(),
        _ => None,
    }
}

fn choices_of(decisions: Option<&Value>) -> Vec<String> {
    match decisions.and_then(Value::as_array) {
        Some(list) => list.iter().filter_map(decision_word).collect(),
        None => DEFAULT_CHOICES.iter().map(|s| (*s).to_owned()).collect(),
    }
}

/// Codex's decision as the common verdict of `approval.decided`: `accept` → allow,
/// `acceptForSession` and the amendments (a rule for calls like it from now on) → always,
/// `decline` → deny, `cancel` → cancel; `None` for a word it does not know.
fn verdict_of(decision: &str) -> Option<Verdict> {
    match decision {
        "acceptWithExecpolicyAmendment" | "applyNetworkPolicyAmendment" => Some(Verdict::Always),
        other => Verdict::parse(&Value::from(other)),
    }
}

/// An error object's `message`.
fn error_message(error: Option<&Value>) -> Option<&str> {
    error?.get("message")?.as_str()
}

/// `codexErrorInfo` as a code: a string as it is, an object by its single key.
fn error_code(info: Option<&Value>) -> Option<String> {
    info.and_then(decision_word)
}

/// The text of a user message's `content` (its `text` parts, joined by newlines).
fn user_text(content: Option<&Value>) -> String {
    let Some(parts) = content.and_then(Value::as_array) else {
        return String::new();
    };
    parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `signal` with the fields of a tool `item` its payload did not take (`used`) under
/// `metadata.codex`, when there are any.
fn with_rest(signal: Signal, item: &Object, used: &[&str]) -> Signal {
    let rest = rest_of(item, used);
    if rest.is_empty() {
        signal
    } else {
        signal.with_meta("codex", Value::Object(rest))
    }
}

fn with_item_id(signal: Signal, item: &Object) -> Signal {
    match item.get("id") {
        Some(id) => signal.with_meta("itemId", id.clone()),
        None => signal,
    }
}
