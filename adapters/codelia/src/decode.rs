//! Runtime → UI messages to signals.

use std::collections::{BTreeMap, HashMap, VecDeque};

use patchbay_signal::decode::{DEFAULT_MAX_LINE, FrameDecoder, FrameLines, line_too_long};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::well_known::{
    AgentState, AgentStateChange, Completion, ErrorPayload, Payload, Severity, TextDelta, Thinking,
    ToolCall, ToolResult,
};
use patchbay_signal::{Object, Signal, millis_of, now_ms, object, take_str};
use serde_json::Value;

/// How many runs' states are remembered (a runtime has one or two live at a time; the
/// bound only guards against a runtime that never ends its runs).
const MAX_TRACKED_RUNS: usize = 64;

/// How many ended runs are remembered, so that a late event of an ended run does not make
/// it current again.
const MAX_ENDED_RUNS: usize = 16;

/// `taskId` of a `final` when no run id is known at all.
const UNKNOWN_RUN: &str = "unknown-run";

/// A runtime → UI request still waiting for the UI's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingRequest {
    /// The JSON-RPC id exactly as the runtime sent it (string or number): the answer
    /// must carry the same.
    pub id: Value,
    /// The method (`ui.confirm.request`, `ui.prompt.request`, `ui.pick.request`, …).
    pub method: String,
    /// The request's params.
    pub params: Value,
}

/// Decodes Codelia runtime → UI messages into signals (see the crate docs), tracking the
/// current run, each run's last agent state and the unanswered runtime requests.
#[derive(Debug, Clone)]
pub struct CodeliaDecoder {
    source: String,
    agent_id: String,
    current_run: Option<String>,
    run_states: HashMap<String, AgentState>,
    ended_runs: VecDeque<String>,
    pending: BTreeMap<String, PendingRequest>,
    last_timestamp: i64,
}

impl CodeliaDecoder {
    /// A decoder whose signals come from `source`, which is also the agent id.
    pub fn new(source: impl Into<String>) -> Self {
        let source = source.into();
        CodeliaDecoder {
            agent_id: source.clone(),
            source,
            current_run: None,
            run_states: HashMap::new(),
            ended_runs: VecDeque::new(),
            pending: BTreeMap::new(),
            last_timestamp: 0,
        }
    }

    /// Sets the `agentId` of the signals (builder style).
    pub fn with_agent_id(mut self, agent_id: impl Into<String>) -> Self {
        self.agent_id = agent_id.into();
        self
    }

    /// The source name of the signals.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The run in progress: the last `run_id` started (a `run.start` result) or seen in a
    /// non-terminal `run.status` or `agent.event`; cleared when that run ends.
    pub fn current_run(&self) -> Option<&str> {
        self.current_run.as_deref()
    }

    /// Sets the current run (a transport that learned it another way).
    pub fn set_current_run(&mut self, run_id: Option<String>) {
        self.current_run = run_id;
    }

    /// The runtime's requests not yet answered, by id (as a string).
    pub fn pending_requests(&self) -> impl Iterator<Item = &PendingRequest> {
        self.pending.values()
    }

    /// The pending request with this id (a number id matches its decimal string).
    pub fn pending_request(&self, id: &str) -> Option<&PendingRequest> {
        self.pending.get(id)
    }

    /// Removes a pending request once answered.
    pub fn take_pending(&mut self, id: &str) -> Option<PendingRequest> {
        self.pending.remove(id)
    }

    /// Decodes one JSON-RPC message. `recorded_t` is the time a capture recorded it at,
    /// the timestamp when the message has none.
    pub fn decode_message(&mut self, msg: Value, recorded_t: Option<i64>, out: &mut Vec<Decoded>) {
        let Value::Object(mut msg) = msg else {
            let raw = msg.to_string();
            out.push(self.bad(&raw, "a JSON-RPC message must be a JSON object"));
            return;
        };
        let start = out.len();
        let fallback_time = recorded_t.unwrap_or_else(now_ms);
        let id = msg.get("id").filter(|id| !id.is_null()).cloned();
        match (msg.shift_remove("method"), id) {
            (Some(Value::String(method)), Some(id)) => {
                self.request(method, id, msg, fallback_time, out)
            }
            (Some(Value::String(method)), None) => {
                let params = msg.shift_remove("params").unwrap_or(Value::Null);
                self.notification(&method, params, fallback_time, out)
            }
            (None, Some(id)) if msg.contains_key("result") || msg.contains_key("error") => {
                self.response(id, msg, fallback_time, out)
            }
            (method, _) => {
                if let Some(m) = method {
                    msg.insert("method".into(), m);
                }
                let raw = Value::Object(msg).to_string();
                out.push(self.bad(&raw, "not a JSON-RPC request, response or notification"));
            }
        }
        if let Some(Decoded::Signal(last)) = out[start..].iter().rev().find(|d| !d.is_bad()) {
            self.last_timestamp = last.timestamp;
        }
    }

    fn request(
        &mut self,
        method: String,
        id: Value,
        mut msg: Object,
        ts: i64,
        out: &mut Vec<Decoded>,
    ) {
        let params = msg.shift_remove("params").unwrap_or(Value::Null);
        let key = id_key(&id);
        let run = params
            .get("run_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| self.current_run.clone());
        self.pending.insert(
            key.clone(),
            PendingRequest {
                id: id.clone(),
                method: method.clone(),
                params: params.clone(),
            },
        );
        let mut payload = Object::new();
        payload.insert("method".into(), Value::String(method));
        payload.insert("params".into(), params);
        payload.insert("promptId".into(), Value::String(key));
        let mut signal = Signal::new("codelia.request", &self.source, payload).at(ts);
        if !id.is_string() {
            // The id was a number: keep its JSON form for whoever answers.
            signal = signal.with_meta("rpcId", id);
        }
        out.push(Decoded::Signal(correlate(signal, run)));
    }

    fn response(&mut self, id: Value, mut msg: Object, ts: i64, out: &mut Vec<Decoded>) {
        msg.shift_remove("jsonrpc");
        let run = msg
            .get("result")
            .and_then(|r| r.get("run_id"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(run) = &run {
            // The answer to `run.start`: this is the run to cancel from now on.
            self.current_run = Some(run.clone());
        }
        let mut payload = Object::new();
        payload.insert("id".into(), id);
        payload.extend(msg);
        let signal = Signal::new("codelia.response", &self.source, payload).at(ts);
        out.push(Decoded::Signal(correlate(signal, run)));
    }

    fn notification(&mut self, method: &str, params: Value, ts: i64, out: &mut Vec<Decoded>) {
        let params = match params {
            Value::Object(p) => p,
            Value::Null => Object::new(),
            other => object! { "value" => other },
        };
        match method {
            "agent.event" => self.agent_event(params, ts, out),
            "run.status" => self.run_status(params, ts, out),
            _ => {
                if method == "client.tool.cancel" {
                    // The runtime gave up on its request: nothing to answer any more.
                    if let Some(id) = params.get("request_id") {
                        self.pending.remove(&id_key(id));
                    }
                }
                let run = self.run_of(&params);
                let signal = Signal::new(format!("codelia.{method}"), &self.source, params).at(ts);
                out.push(Decoded::Signal(correlate(signal, run)));
            }
        }
    }

    fn run_of(&self, params: &Object) -> Option<String> {
        params
            .get("run_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| self.current_run.clone())
    }

    fn agent_event(&mut self, mut params: Object, fallback_time: i64, out: &mut Vec<Decoded>) {
        let run = self.run_of(&params);
        match params.get("run_id") {
            Some(Value::String(r)) if !self.is_ended(r) => self.current_run = Some(r.clone()),
            _ => {}
        }
        let mut event = match params.get("event") {
            Some(Value::Object(e)) if e.get("type").is_some_and(Value::is_string) => e.clone(),
            _ => {
                // Not an event we can read: kept whole.
                let signal =
                    Signal::new("codelia.agent.event", &self.source, params).at(fallback_time);
                out.push(Decoded::Signal(correlate(signal, run)));
                return;
            }
        };
        params.shift_remove("event");
        params.shift_remove("run_id");
        let kind = match event.shift_remove("type") {
            Some(Value::String(kind)) => kind,
            _ => String::new(),
        };
        let timestamp = match event.get("timestamp").and_then(millis_of) {
            Some(ts) => {
                event.shift_remove("timestamp");
                ts
            }
            None => fallback_time,
        };
        let agent_id = self.agent_id.clone();
        let source = self.source.clone();
        let source = source.as_str();
        let str_field =
            |event: &Object, k: &str| event.get(k).and_then(Value::as_str).map(str::to_owned);
        let mapped: Option<Signal> = match kind.as_str() {
            "text" => str_field(&event, "content").map(|content| {
                event.shift_remove("content");
                TextDelta {
                    agent_id,
                    content,
                    content_type: None,
                    index: None,
                }
                .into_signal(source)
            }),
            "reasoning" => str_field(&event, "content").map(|content| {
                event.shift_remove("content");
                Thinking { agent_id, content }.into_signal(source)
            }),
            "tool_call" => str_field(&event, "tool").map(|tool| {
                event.shift_remove("tool");
                let call_id = take_str(&mut event, "tool_call_id");
                let input = match event.shift_remove("args") {
                    Some(Value::Object(args)) => Some(args),
                    None | Some(Value::Null) => None,
                    Some(other) => {
                        event.insert("args".into(), other);
                        None
                    }
                };
                ToolCall {
                    tool_name: tool,
                    agent_id,
                    call_id,
                    input,
                }
                .into_signal(source)
            }),
            "tool_result" => match (str_field(&event, "tool"), event.get("is_error")) {
                (Some(tool), None | Some(Value::Null) | Some(Value::Bool(_))) => {
                    event.shift_remove("tool");
                    let is_error = event.shift_remove("is_error").and_then(|v| v.as_bool());
                    let call_id = take_str(&mut event, "tool_call_id");
                    let output = match event.shift_remove("result") {
                        Some(Value::Object(result)) => Some(result),
                        None => None,
                        Some(other) => Some(object! { "result" => other }),
                    };
                    Some(
                        ToolResult {
                            tool_name: tool,
                            agent_id,
                            call_id,
                            success: !is_error.unwrap_or(false),
                            output,
                        }
                        .into_signal(source),
                    )
                }
                _ => None,
            },
            "final" => {
                let result = match event.shift_remove("content") {
                    Some(Value::String(c)) => Some(c),
                    None | Some(Value::Null) => None,
                    Some(other) => {
                        event.insert("content".into(), other);
                        None
                    }
                };
                Some(
                    Completion {
                        task_id: run.clone().unwrap_or_else(|| UNKNOWN_RUN.to_owned()),
                        agent_id: Some(agent_id),
                        success: true,
                        result,
                    }
                    .into_signal(source),
                )
            }
            "step_start" | "step_complete" => {
                let (from, to, reason) = if kind == "step_start" {
                    (
                        AgentState::Thinking,
                        AgentState::Acting,
                        take_str(&mut event, "title"),
                    )
                } else {
                    (
                        AgentState::Acting,
                        AgentState::Thinking,
                        take_str(&mut event, "status"),
                    )
                };
                self.remember_state(run.as_deref(), to);
                Some(
                    AgentStateChange {
                        agent_id,
                        from,
                        to,
                        reason,
                    }
                    .into_signal(source),
                )
            }
            "llm.retry" => Some(
                ErrorPayload {
                    agent_id: Some(agent_id),
                    code: Some("llm.retry".into()),
                    message: retry_message(&event),
                    severity: Severity::Warning,
                }
                .into_signal(source),
            ),
            _ => None,
        };
        let mut signal = match mapped {
            Some(mut signal) => {
                if !event.is_empty() {
                    signal = signal.with_meta("extra", Value::Object(event));
                }
                signal
            }
            None => Signal::new(format!("codelia.{kind}"), source, event),
        };
        signal.timestamp = timestamp;
        // The envelope's own fields (`seq`, `meta`, anything added later).
        for (k, v) in params {
            signal.metadata_mut().insert(k, v);
        }
        out.push(Decoded::Signal(correlate(signal, run)));
    }

    fn run_status(&mut self, mut params: Object, ts: i64, out: &mut Vec<Decoded>) {
        let run = self.run_of(&params);
        let status = params
            .get("status")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let to = match status.as_deref() {
            Some("running") => AgentState::Acting,
            Some("awaiting_ui") => AgentState::Waiting,
            Some("completed") => AgentState::Done,
            Some("error") => AgentState::Error,
            Some("cancelled") => AgentState::Idle,
            _ => {
                let signal = Signal::new("codelia.run.status", &self.source, params).at(ts);
                out.push(Decoded::Signal(correlate(signal, run)));
                return;
            }
        };
        params.shift_remove("status");
        params.shift_remove("run_id");
        let message = take_str(&mut params, "message");
        let key = run.clone().unwrap_or_default();
        let from = self
            .run_states
            .get(&key)
            .copied()
            .unwrap_or(AgentState::Idle);
        if to == AgentState::Error {
            let mut error = ErrorPayload {
                agent_id: Some(self.agent_id.clone()),
                code: Some("run_error".into()),
                message: message.clone().unwrap_or_else(|| "run failed".into()),
                severity: Severity::Error,
            }
            .into_signal(&self.source)
            .at(ts);
            if !params.is_empty() {
                error = error.with_meta("extra", Value::Object(params.clone()));
            }
            out.push(Decoded::Signal(correlate(error, run.clone())));
        }
        let (reason, meta_message) = if to == AgentState::Idle {
            (Some("cancelled".to_owned()), message)
        } else {
            (message, None)
        };
        let mut change = AgentStateChange {
            agent_id: self.agent_id.clone(),
            from,
            to,
            reason,
        }
        .into_signal(&self.source)
        .at(ts);
        if let Some(m) = meta_message {
            change = change.with_meta("message", m);
        }
        if !params.is_empty() {
            change = change.with_meta("extra", Value::Object(params));
        }
        out.push(Decoded::Signal(correlate(change, run.clone())));
        if matches!(to, AgentState::Done | AgentState::Error | AgentState::Idle) {
            // A terminal status: the run is over, nothing left to cancel.
            self.run_states.remove(&key);
            if !self.is_ended(&key) {
                if self.ended_runs.len() == MAX_ENDED_RUNS {
                    self.ended_runs.pop_front();
                }
                self.ended_runs.push_back(key);
            }
            if self.current_run.as_deref() == run.as_deref() {
                self.current_run = None;
            }
        } else {
            self.remember_state(run.as_deref(), to);
            if run.is_some() {
                self.current_run = run;
            }
        }
        self.bound_states();
    }

    fn is_ended(&self, run: &str) -> bool {
        self.ended_runs.iter().any(|r| r == run)
    }

    fn remember_state(&mut self, run: Option<&str>, state: AgentState) {
        self.run_states
            .insert(run.unwrap_or_default().to_owned(), state);
        self.bound_states();
    }

    fn bound_states(&mut self) {
        if self.run_states.len() > MAX_TRACKED_RUNS {
            // Keep the current run's state; forget the rest (they start again from idle).
            let keep = self.current_run.clone().unwrap_or_default();
            self.run_states.retain(|k, _| *k == keep);
        }
    }

    pub(crate) fn bad(&self, raw: &str, message: &str) -> Decoded {
        let signal = bad_input_signal(&self.source, self.last_timestamp, raw, message);
        Decoded::BadInput(signal)
    }
}

/// The text of one line from the runtime (`Err`: a line cut at the limit), trimmed;
/// `None` for a blank line, and for a cut one, whose bad-input `error` signal from
/// `source` goes to `out`.
pub(crate) fn line_text<'a>(
    line: Result<&'a str, &'a str>,
    source: &str,
    out: &mut Vec<Decoded>,
) -> Option<&'a str> {
    match line {
        Ok(text) => Some(text.trim()).filter(|text| !text.is_empty()),
        Err(cut) => {
            out.push(Decoded::BadInput(bad_input_signal(
                source,
                now_ms(),
                cut,
                &line_too_long(DEFAULT_MAX_LINE),
            )));
            None
        }
    }
}

/// The string form of a JSON-RPC id, as `promptId`s carry it.
pub(crate) fn id_key(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn correlate(signal: Signal, run: Option<String>) -> Signal {
    match run {
        Some(run) => signal.correlated(run),
        None => signal,
    }
}

/// A readable message for an `llm.retry` event (its fields stay in `metadata.extra`).
fn retry_message(event: &Object) -> String {
    let text = |k: &str| match event.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "?".to_owned(),
        Some(other) => other.to_string(),
    };
    format!(
        "{} {}: retry {}/{} in {} ms",
        text("provider"),
        text("failure_kind"),
        text("next_attempt"),
        text("max_attempts"),
        text("delay_ms"),
    )
}

/// The byte-stream form of [`CodeliaDecoder`]: NDJSON lines, bare or recorded
/// `{"t","dir","msg"}` (only `dir: "in"` is decoded, with `t` as the fallback timestamp).
pub type CodeliaStream = FrameLines<CodeliaDecoder>;

impl FrameDecoder for CodeliaDecoder {
    fn decode_frame(&mut self, frame: Value, recorded_t: Option<i64>, out: &mut Vec<Decoded>) {
        CodeliaDecoder::decode_message(self, frame, recorded_t, out);
    }

    fn bad_line(&self, raw: &str, message: &str) -> Decoded {
        self.bad(raw, message)
    }
}
