//! Palyra console run stream lines and realtime frames → signals.
//!
//! Each line (or WebSocket text frame) is classified on its own:
//!
//! | input | signals |
//! |---|---|
//! | `{"type":"meta",run_id,session_id}` | `palyra.meta` (the line as payload) |
//! | `{"type":"event","event":{…}}` | the run stream event, mapped below |
//! | `{"type":"error",run_id,error}` | `error {code:"run_stream_error", severity:"error"}` |
//! | `{"type":"complete",run_id,status}` | `completion {success: status is done}`, or `palyra.complete` when the run's completion was already emitted |
//! | `{"type":"event","payload":{sequence,…,payload}}` | the run stream event in `payload` (duplicates dropped, see [`RealtimeResume`]) |
//! | `{"type":"handshake.accepted"\|"subscribed"\|"pong",payload}` | `palyra.<type>` with `metadata.internal = true` |
//! | `{"type":"snapshot.required",payload}` | `palyra.snapshot.required` |
//! | `{"type":"command.result",payload}`, a bare `{request_id,command,ok,…}` | see [`decode_command_result`](crate::decode_command_result) |
//! | `{"type":"error","payload":{"error":{code,message,recovery_hint}}}` | `error` |
//!
//! A line is a realtime frame when it has a `payload` and no `event` field; anything else
//! with a `type` is a console line. Recorded lines (`{"t","dir":"in","frame"}`) are
//! unwrapped first.
//!
//! Run stream events (`{run_id, event_type, <event_type>: {…}}`, as the console writes
//! Palyra's `RunStreamEvent` protobuf):
//!
//! | `event_type` | signals |
//! |---|---|
//! | `model_token {token, is_final}` | `text_delta {content: token, index}` (`is_final` in metadata) |
//! | `status accepted` | `agent_state_change <current>→thinking` (the run starts at `idle`) |
//! | `status in_progress` | `agent_state_change <current>→acting` |
//! | `status done` | `completion {taskId: run_id, success: true, result: "done"}` |
//! | `status failed` | `error {code: "run_failed"}` then `completion {success: false, result: "failed"}` |
//! | `tool_proposal` | `tool_call {toolName, callId: proposal_id, input}` |
//! | `tool_result` | `tool_result {toolName (from the proposal), callId, success, output}` |
//! | `tool_approval_request` | `agent_state_change <current>→waiting` + `palyra.approval_request` (payload plus `promptId` = `approval_id`, what `control.answer` names) + `approval.requested {promptId, agentId, toolName, input: input_json, choices: the prompt's option ids}` |
//! | `tool_approval_response` | `palyra.tool_approval_response` + `approval.decided {promptId, value: allow \| deny, by: "palyra"}`, then `waiting→acting` if the run was waiting |
//! | `a2ui_update {surface, patch_json}` | `a2ui.update` with the patch as payload (`surface` in metadata; an array patch is `{ops: […]}`) |
//! | `provider_turn_output` | `palyra.provider_turn_output`, plus `token_usage` when its usage has integer counts |
//! | `journal_event`, anything else | `palyra.<event_type>` with its data as payload |
//!
//! `run_id` is the `correlationId` (a console event without one takes the stream's `meta`
//! run); `agentId` is the decoder's source (Palyra's stream does not name an agent). The
//! timestamp is the realtime `occurred_at_unix_ms` (a journal event's own
//! `timestamp_unix_ms`), else the recorded `t`, else the current time. Fields a payload
//! schema does not allow go to `metadata` under their Palyra names.
//!
//! One completion per run: `status done`/`failed` emits it, and the console's closing
//! `complete` line (which repeats the last status) then becomes `palyra.complete`; a
//! `complete` without an earlier terminal status emits the completion itself (success only
//! for `done`).

use std::collections::{HashMap, VecDeque};

use patchbay_graph::approvals::{self, Verdict};
use patchbay_signal::decode::{
    JsonTexts, RecordedLine, StreamDecoder, line_too_long, recorded_line,
};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::well_known::{self, AgentState};
use patchbay_signal::{Object, Signal, SmallString, now_ms, take_str};
use serde_json::Value;

use crate::envelope::{command_result_signal, error_of, str_field};
use crate::realtime::RealtimeResume;

/// Longest line (or frame) accepted, in bytes; longer lines are reported as bad input.
pub const MAX_LINE: usize = 8 * 1024 * 1024;
/// Runs whose state is remembered; the oldest is forgotten beyond this.
const MAX_RUNS: usize = 256;
/// Tool proposals remembered per run (to name the tool of a `tool_result`).
const MAX_TOOLS_PER_RUN: usize = 4096;

/// What the decoder remembers about one run.
#[derive(Debug)]
struct RunState {
    /// The last agent state emitted for the run.
    state: AgentState,
    /// A `completion` was emitted: a later `complete` line must not emit another.
    completed: bool,
    /// Index of the next `text_delta`.
    next_index: u64,
    /// `proposal_id` → tool name, from `tool_proposal`.
    tools: HashMap<String, String>,
}

impl Default for RunState {
    fn default() -> Self {
        // A run starts idle.
        RunState {
            state: AgentState::Idle,
            completed: false,
            next_index: 0,
            tools: HashMap::new(),
        }
    }
}

/// Run states, bounded: the oldest run is forgotten when too many are open.
#[derive(Debug, Default)]
struct Runs {
    map: HashMap<String, RunState>,
    order: VecDeque<String>,
}

impl Runs {
    fn get(&mut self, run: &str) -> &mut RunState {
        if !self.map.contains_key(run) {
            if self.order.len() >= MAX_RUNS
                && let Some(oldest) = self.order.pop_front()
            {
                self.map.remove(&oldest);
            }
            self.order.push_back(run.to_owned());
        }
        self.map.entry(run.to_owned()).or_default()
    }
}

/// What every signal decoded from one line shares: its time and frame-level metadata.
#[derive(Debug, Clone)]
struct Frame {
    ts: i64,
    meta: Object,
}

/// What the signals of one run stream event share: the run (`None`: the console's run,
/// kept under the empty key) and the frame.
#[derive(Debug, Clone)]
struct RunEvent {
    run: Option<String>,
    frame: Frame,
}

impl RunEvent {
    /// The run's key in [`Runs`].
    fn key(&self) -> &str {
        self.run.as_deref().unwrap_or_default()
    }
}

/// Decoder for Palyra's console run stream and realtime frames (see the module docs).
#[derive(Debug)]
pub struct PalyraDecoder {
    source: SmallString,
    texts: JsonTexts,
    runs: Runs,
    resume: RealtimeResume,
    /// The run named by the console stream's `meta` line.
    meta_run: Option<String>,
    /// The run of the most recent event, for control outputs that need "the current run".
    last_run: Option<String>,
    /// Timestamp of the last good signal, given to bad-input reports.
    last_timestamp: i64,
}

impl PalyraDecoder {
    /// A decoder whose signals have `source` as their source (and `agentId`).
    pub fn new(source: impl Into<SmallString>) -> Self {
        PalyraDecoder {
            source: source.into(),
            texts: JsonTexts::new(MAX_LINE),
            runs: Runs::default(),
            resume: RealtimeResume::new(),
            meta_run: None,
            last_run: None,
            last_timestamp: 0,
        }
    }

    /// The realtime resume point: the transport builds its reconnect handshake from it.
    pub fn resume(&self) -> &RealtimeResume {
        &self.resume
    }

    /// The realtime resume point, mutable (e.g. to [`RealtimeResume::reset`] it).
    pub fn resume_mut(&mut self) -> &mut RealtimeResume {
        &mut self.resume
    }

    /// The run of the most recent run event or `meta` line, if any.
    pub fn last_run_id(&self) -> Option<&str> {
        self.last_run.as_deref()
    }

    /// Decodes one complete line or WebSocket text frame.
    pub fn decode_frame(&mut self, text: &str, out: &mut Vec<Decoded>) {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return;
        }
        match serde_json::from_str::<Value>(trimmed) {
            Ok(value) => match recorded_line(value) {
                RecordedLine::Bare(frame) => self.decode_value(frame, None, out),
                RecordedLine::Incoming { t, frame } => {
                    // A recorder may keep a text frame as the string it was.
                    let frame = match frame {
                        Value::String(text) => match serde_json::from_str(&text) {
                            Ok(v) => v,
                            Err(err) => return self.bad(out, &text, &format!("not JSON: {err}")),
                        },
                        other => other,
                    };
                    self.decode_value(frame, t, out)
                }
                RecordedLine::Other => {}
            },
            Err(err) => self.bad(out, trimmed, &format!("not JSON: {err}")),
        }
    }

    /// Decodes one parsed line or frame; `recorded_t` is the recording's time, used when
    /// the frame carries none.
    pub fn decode_value(&mut self, value: Value, recorded_t: Option<i64>, out: &mut Vec<Decoded>) {
        let Value::Object(mut obj) = value else {
            return self.bad(out, &value.to_string(), "not a JSON object");
        };
        let fallback_ts = recorded_t.unwrap_or_else(now_ms);
        let kind = obj.get("type").and_then(Value::as_str).map(str::to_owned);
        let is_realtime = obj.contains_key("payload") && !obj.contains_key("event");
        match kind.as_deref() {
            Some(kind) if is_realtime => self.realtime_frame(kind, obj, fallback_ts, out),
            Some("meta") => self.meta_line(obj, fallback_ts, out),
            Some("event") => match obj.remove("event") {
                Some(Value::Object(event)) => {
                    obj.remove("type");
                    let frame = Frame {
                        ts: fallback_ts,
                        meta: obj,
                    };
                    let fallback_run = self.meta_run.clone();
                    self.run_event(event, frame, fallback_run, out);
                }
                other => {
                    if let Some(event) = other {
                        obj.insert("event".into(), event);
                    }
                    let raw = Value::Object(obj).to_string();
                    self.bad(out, &raw, "event line without an event object")
                }
            },
            Some("error") => self.error_line(obj, fallback_ts, out),
            Some("complete") => self.complete_line(obj, fallback_ts, out),
            Some(other) => {
                let kind = format!("palyra.{other}");
                obj.remove("type");
                let run = str_field(&obj, "run_id");
                let frame = Frame {
                    ts: fallback_ts,
                    meta: Object::new(),
                };
                self.emit(out, &kind, obj, run.as_deref(), &frame, Object::new());
            }
            None if obj.get("ok").is_some_and(Value::is_boolean)
                && obj.contains_key("request_id") =>
            {
                let signal = command_result_signal(&self.source, &obj, fallback_ts, None);
                self.push(out, signal);
            }
            None if obj.get("event_type").is_some_and(Value::is_string) => {
                let frame = Frame {
                    ts: fallback_ts,
                    meta: Object::new(),
                };
                let fallback_run = self.meta_run.clone();
                self.run_event(obj, frame, fallback_run, out);
            }
            None => {
                let run = str_field(&obj, "run_id");
                let frame = Frame {
                    ts: fallback_ts,
                    meta: Object::new(),
                };
                self.emit(
                    out,
                    "palyra.frame",
                    obj,
                    run.as_deref(),
                    &frame,
                    Object::new(),
                );
            }
        }
    }

    fn meta_line(&mut self, mut obj: Object, ts: i64, out: &mut Vec<Decoded>) {
        obj.remove("type");
        let run = str_field(&obj, "run_id");
        if let Some(run) = &run {
            self.meta_run = Some(run.clone());
            self.last_run = Some(run.clone());
        }
        let frame = Frame {
            ts,
            meta: Object::new(),
        };
        self.emit(
            out,
            "palyra.meta",
            obj,
            run.as_deref(),
            &frame,
            Object::new(),
        );
    }

    fn error_line(&mut self, mut obj: Object, ts: i64, out: &mut Vec<Decoded>) {
        obj.remove("type");
        let run = str_field(&obj, "run_id").or_else(|| self.meta_run.clone());
        obj.remove("run_id");
        let mut meta = Object::new();
        let (message, code) = match obj.remove("error") {
            Some(Value::String(text)) => (text, None),
            Some(Value::Object(err)) => {
                let message = str_field(&err, "message")
                    .unwrap_or_else(|| Value::Object(err.clone()).to_string());
                let code = str_field(&err, "code");
                meta.insert("error".into(), Value::Object(err));
                (message, code)
            }
            Some(other) => (other.to_string(), None),
            None => ("run stream error".to_owned(), None),
        };
        meta.extend(obj);
        let payload = error_payload(
            &self.source,
            &message,
            code.as_deref().unwrap_or("run_stream_error"),
        );
        let frame = Frame {
            ts,
            meta: Object::new(),
        };
        self.emit(out, "error", payload, run.as_deref(), &frame, meta);
    }

    fn complete_line(&mut self, mut obj: Object, ts: i64, out: &mut Vec<Decoded>) {
        obj.remove("type");
        let run = str_field(&obj, "run_id").or_else(|| self.meta_run.clone());
        let key = run.clone().unwrap_or_default();
        let frame = Frame {
            ts,
            meta: Object::new(),
        };
        if self.runs.get(&key).completed {
            return self.emit(
                out,
                "palyra.complete",
                obj,
                run.as_deref(),
                &frame,
                Object::new(),
            );
        }
        let status = str_field(&obj, "status").unwrap_or_else(|| "unknown".to_owned());
        let success = matches!(status.as_str(), "done" | "completed" | "succeeded");
        let state = self.runs.get(&key);
        state.completed = true;
        state.state = if success {
            AgentState::Done
        } else {
            AgentState::Error
        };
        let payload = completion_payload(&key, &self.source, success, &status);
        let mut meta = obj;
        meta.remove("run_id");
        meta.remove("status");
        self.emit(out, "completion", payload, run.as_deref(), &frame, meta);
    }

    fn realtime_frame(&mut self, kind: &str, mut obj: Object, ts: i64, out: &mut Vec<Decoded>) {
        obj.remove("type");
        let payload = obj.remove("payload").unwrap_or(Value::Null);
        // Top-level fields besides type and payload are unexpected: keep them.
        let extra = obj;
        match kind {
            "event" => self.realtime_event(payload, extra, ts, out),
            "snapshot.required" => {
                let Value::Object(mut env) = payload else {
                    let frame = Frame { ts, meta: extra };
                    return self.emit(
                        out,
                        "palyra.snapshot.required",
                        wrap_value(payload),
                        None,
                        &frame,
                        Object::new(),
                    );
                };
                let ts = env
                    .get("occurred_at_unix_ms")
                    .and_then(Value::as_i64)
                    .unwrap_or(ts);
                env.remove("occurred_at_unix_ms");
                let inner = env.remove("payload").unwrap_or(Value::Null);
                let mut meta = extra;
                meta.extend(env);
                let frame = Frame { ts, meta };
                self.emit(
                    out,
                    "palyra.snapshot.required",
                    wrap_value(inner),
                    None,
                    &frame,
                    Object::new(),
                );
            }
            "handshake.accepted" | "subscribed" | "pong" => {
                let ts = payload
                    .get("server_time_unix_ms")
                    .and_then(Value::as_i64)
                    .unwrap_or(ts);
                let mut meta = extra;
                meta.insert("internal".into(), Value::Bool(true));
                let frame = Frame { ts, meta };
                let kind = format!("palyra.{kind}");
                self.emit(out, &kind, wrap_value(payload), None, &frame, Object::new());
            }
            "command.result" => match payload {
                Value::Object(env) => {
                    let mut signal = command_result_signal(&self.source, &env, ts, None);
                    if !extra.is_empty() {
                        signal.metadata_mut().extend(extra);
                    }
                    self.push(out, signal);
                }
                other => self.bad(
                    out,
                    &other.to_string(),
                    "command.result without an envelope",
                ),
            },
            "error" => {
                let mut meta = extra;
                let (message, code) = match payload {
                    Value::Object(mut body) => {
                        let error = body.remove("error");
                        let (message, code) = error_of(error, "realtime error", &mut meta)
                            .unwrap_or_else(|| (Value::Object(body.clone()).to_string(), None));
                        meta.extend(body);
                        (message, code)
                    }
                    other => (other.to_string(), None),
                };
                let payload = error_payload(
                    &self.source,
                    &message,
                    code.as_deref().unwrap_or("realtime_error"),
                );
                let frame = Frame { ts, meta };
                self.emit(out, "error", payload, None, &frame, Object::new());
            }
            other => {
                let kind = format!("palyra.{other}");
                let run = payload
                    .get("run_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let frame = Frame { ts, meta: extra };
                self.emit(
                    out,
                    &kind,
                    wrap_value(payload),
                    run.as_deref(),
                    &frame,
                    Object::new(),
                );
            }
        }
    }

    fn realtime_event(&mut self, payload: Value, extra: Object, ts: i64, out: &mut Vec<Decoded>) {
        let Value::Object(mut env) = payload else {
            return self.bad(
                out,
                &payload.to_string(),
                "event frame without an envelope object",
            );
        };
        let occurred = env.get("occurred_at_unix_ms").and_then(Value::as_i64);
        if let Some(sequence) = env.get("sequence").and_then(Value::as_u64)
            && !self.resume.accept(sequence, occurred)
        {
            return;
        }
        env.remove("occurred_at_unix_ms");
        let inner = env.remove("payload").unwrap_or(Value::Null);
        let topic = str_field(&env, "topic");
        let mut meta = extra;
        meta.extend(env);
        let frame = Frame {
            ts: occurred.unwrap_or(ts),
            meta,
        };
        match inner {
            Value::Object(event) if event.get("event_type").is_some_and(Value::is_string) => {
                self.run_event(event, frame, None, out)
            }
            Value::Object(mut wrapper)
                if wrapper
                    .get("event")
                    .and_then(|e| e.get("event_type"))
                    .is_some_and(Value::is_string) =>
            {
                let Some(Value::Object(event)) = wrapper.remove("event") else {
                    return;
                };
                let mut frame = frame;
                frame.meta.extend(wrapper);
                self.run_event(event, frame, None, out)
            }
            other => {
                let kind = format!("palyra.realtime.{}", topic.as_deref().unwrap_or("event"));
                let run = other
                    .get("run_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                self.emit(
                    out,
                    &kind,
                    wrap_value(other),
                    run.as_deref(),
                    &frame,
                    Object::new(),
                );
            }
        }
    }

    /// Maps one run stream event `{run_id, event_type, <event_type>: {…}}`.
    fn run_event(
        &mut self,
        mut event: Object,
        mut frame: Frame,
        fallback_run: Option<String>,
        out: &mut Vec<Decoded>,
    ) {
        let run = event
            .remove("run_id")
            .and_then(|v| match v {
                Value::String(s) if !s.is_empty() => Some(s),
                _ => None,
            })
            .or(fallback_run);
        let event_type = match event.remove("event_type") {
            Some(Value::String(s)) => s,
            _ => "unspecified".to_owned(),
        };
        let body = event.remove(&event_type);
        // Anything else at the event level (e.g. `v`) is kept.
        frame.meta.extend(event);
        if let Some(run) = &run {
            self.last_run = Some(run.clone());
        }
        let at = RunEvent { run, frame };
        let (key, run, frame) = (at.key(), at.run.as_deref(), &at.frame);
        let body = match body {
            Some(Value::Object(body)) => body,
            other => {
                let kind = format!("palyra.{event_type}");
                let payload = other.map(wrap_value).unwrap_or_default();
                return self.emit(out, &kind, payload, run, frame, Object::new());
            }
        };
        match event_type.as_str() {
            "model_token" if body.get("token").is_some_and(Value::is_string) => {
                self.model_token(body, &at, out)
            }
            "status" => self.status(body, &at, out),
            "tool_proposal" => self.tool_proposal(body, &at, out),
            "tool_result" => self.tool_result(body, &at, out),
            "tool_approval_request" => {
                let reason = str_field(&body, "request_summary")
                    .filter(|s| !s.is_empty())
                    .or_else(|| {
                        body.get("prompt")
                            .and_then(|p| p.get("title"))
                            .and_then(Value::as_str)
                            .filter(|s| !s.is_empty())
                            .map(str::to_owned)
                    })
                    .unwrap_or_else(|| "approval requested".to_owned());
                self.transition(&at, AgentState::Waiting, Some(reason), out);
                let mut payload = body;
                let approval_id = str_field(&payload, "approval_id");
                if let Some(id) = &approval_id {
                    payload.insert("promptId".into(), Value::String(id.clone()));
                }
                let common = approval_id.map(|id| {
                    let choices: Vec<String> = payload
                        .get("prompt")
                        .and_then(|p| p.get("options"))
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|o| o.get("option_id").and_then(Value::as_str))
                        .map(str::to_owned)
                        .collect();
                    let input = match payload.get("input_json") {
                        Some(input @ Value::Object(_)) => input.clone(),
                        _ => Value::Object(Object::new()),
                    };
                    let tool = str_field(&payload, "tool_name").unwrap_or_default();
                    approvals::request_payload(&id, &self.source, &tool, input, &choices)
                });
                self.emit(
                    out,
                    "palyra.approval_request",
                    payload,
                    run,
                    frame,
                    Object::new(),
                );
                if let Some(common) = common {
                    self.emit(out, approvals::REQUESTED, common, run, frame, Object::new());
                }
            }
            "tool_approval_response" => {
                let approved = body.get("approved").and_then(Value::as_bool);
                let decided = str_field(&body, "approval_id").map(|id| {
                    let value = if approved == Some(true) {
                        Verdict::Allow
                    } else {
                        Verdict::Deny
                    };
                    approvals::decided_payload(&id, value, "palyra")
                });
                self.emit(
                    out,
                    "palyra.tool_approval_response",
                    body,
                    run,
                    frame,
                    Object::new(),
                );
                if let Some(decided) = decided {
                    self.emit(out, approvals::DECIDED, decided, run, frame, Object::new());
                }
                if self.runs.get(key).state == AgentState::Waiting {
                    let reason = if approved == Some(true) {
                        "approved"
                    } else {
                        "denied"
                    };
                    self.transition(&at, AgentState::Acting, Some(reason.into()), out);
                }
            }
            "a2ui_update" => {
                let mut meta = body;
                let patch = meta
                    .remove("patch_json")
                    .or_else(|| meta.remove("patch"))
                    .unwrap_or(Value::Null);
                let payload = a2ui_patch(patch);
                self.emit(out, "a2ui.update", payload, run, frame, meta);
            }
            "journal_event" => {
                let mut frame = frame.clone();
                if let Some(ts) = body
                    .get("timestamp_unix_ms")
                    .and_then(Value::as_i64)
                    .filter(|ts| *ts > 0)
                {
                    frame.ts = ts;
                }
                self.emit(
                    out,
                    "palyra.journal_event",
                    body,
                    run,
                    &frame,
                    Object::new(),
                );
            }
            "provider_turn_output" => {
                let usage = token_usage_payload(&self.source, &body);
                self.emit(
                    out,
                    "palyra.provider_turn_output",
                    body,
                    run,
                    frame,
                    Object::new(),
                );
                if let Some((payload, meta)) = usage {
                    self.emit(out, "token_usage", payload, run, frame, meta);
                }
            }
            other => {
                let kind = format!("palyra.{other}");
                self.emit(out, &kind, body, run, frame, Object::new());
            }
        }
    }

    fn model_token(&mut self, mut body: Object, at: &RunEvent, out: &mut Vec<Decoded>) {
        let (key, run, frame) = (at.key(), at.run.as_deref(), &at.frame);
        let content = match body.remove("token") {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        let state = self.runs.get(key);
        let index = state.next_index;
        state.next_index += 1;
        let mut payload = Object::new();
        payload.insert("agentId".into(), Value::from(&self.source));
        payload.insert("content".into(), Value::String(content));
        payload.insert("index".into(), Value::from(index));
        self.emit(out, "text_delta", payload, run, frame, body);
    }

    fn status(&mut self, body: Object, at: &RunEvent, out: &mut Vec<Decoded>) {
        let (key, run, frame) = (at.key(), at.run.as_deref(), &at.frame);
        let kind = str_field(&body, "kind").unwrap_or_default();
        let message = str_field(&body, "message").filter(|m| !m.is_empty());
        let already_completed = self.runs.get(key).completed;
        match kind.as_str() {
            "accepted" => self.transition(at, AgentState::Thinking, message, out),
            "in_progress" => self.transition(at, AgentState::Acting, message, out),
            "done" | "failed" if !already_completed => {
                let success = kind == "done";
                let mut meta = body;
                meta.remove("kind");
                if success {
                    // The message ("completed") is in metadata; result is the status kind.
                } else {
                    let text = message.clone().unwrap_or_else(|| "run failed".to_owned());
                    let payload = error_payload(&self.source, &text, "run_failed");
                    self.emit(out, "error", payload, run, frame, Object::new());
                }
                let state = self.runs.get(key);
                state.completed = true;
                state.state = if success {
                    AgentState::Done
                } else {
                    AgentState::Error
                };
                let payload = completion_payload(key, &self.source, success, &kind);
                self.emit(out, "completion", payload, run, frame, meta);
            }
            _ => self.emit(out, "palyra.status", body, run, frame, Object::new()),
        }
    }

    fn tool_proposal(&mut self, mut body: Object, at: &RunEvent, out: &mut Vec<Decoded>) {
        let (key, run, frame) = (at.key(), at.run.as_deref(), &at.frame);
        let tool_name = match body.remove("tool_name") {
            Some(Value::String(s)) => s,
            Some(other) => {
                body.insert("tool_name".into(), other);
                "unknown".to_owned()
            }
            None => "unknown".to_owned(),
        };
        let call_id = take_str(&mut body, "proposal_id").filter(|id| !id.is_empty());
        let input = wrap_json(body.remove("input_json")).unwrap_or_default();
        if let Some(call_id) = &call_id {
            let tools = &mut self.runs.get(key).tools;
            if tools.len() >= MAX_TOOLS_PER_RUN {
                tools.clear();
            }
            tools.insert(call_id.clone(), tool_name.clone());
        }
        let mut payload = Object::new();
        payload.insert("toolName".into(), Value::String(tool_name));
        payload.insert("agentId".into(), Value::from(&self.source));
        if let Some(call_id) = call_id {
            payload.insert("callId".into(), Value::String(call_id));
        }
        payload.insert("input".into(), Value::Object(input));
        self.emit(out, "tool_call", payload, run, frame, body);
    }

    fn tool_result(&mut self, mut body: Object, at: &RunEvent, out: &mut Vec<Decoded>) {
        let (key, run, frame) = (at.key(), at.run.as_deref(), &at.frame);
        let call_id = take_str(&mut body, "proposal_id").filter(|id| !id.is_empty());
        let tool_name = call_id
            .as_ref()
            .and_then(|id| self.runs.get(key).tools.get(id).cloned())
            .unwrap_or_else(|| "unknown".to_owned());
        let error = match body.remove("error") {
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::Null) | None => None,
            Some(other) => Some(other),
        };
        let success = match body.remove("success") {
            Some(Value::Bool(b)) => b,
            Some(other) => {
                body.insert("success".into(), other);
                error.is_none()
            }
            None => error.is_none(),
        };
        if let Some(error) = error {
            body.insert("error".into(), error);
        }
        let output = wrap_json(body.remove("output_json"));
        let mut payload = Object::new();
        payload.insert("toolName".into(), Value::String(tool_name));
        payload.insert("agentId".into(), Value::from(&self.source));
        if let Some(call_id) = call_id {
            payload.insert("callId".into(), Value::String(call_id));
        }
        payload.insert("success".into(), Value::Bool(success));
        if let Some(output) = output {
            payload.insert("output".into(), Value::Object(output));
        }
        self.emit(out, "tool_result", payload, run, frame, body);
    }

    fn transition(
        &mut self,
        at: &RunEvent,
        to: AgentState,
        reason: Option<String>,
        out: &mut Vec<Decoded>,
    ) {
        let state = self.runs.get(at.key());
        let from = state.state;
        state.state = to;
        let mut payload = Object::new();
        payload.insert("agentId".into(), Value::from(&self.source));
        payload.insert("from".into(), Value::String(state_name(from).into()));
        payload.insert("to".into(), Value::String(state_name(to).into()));
        if let Some(reason) = reason {
            payload.insert("reason".into(), Value::String(reason));
        }
        self.emit(
            out,
            "agent_state_change",
            payload,
            at.run.as_deref(),
            &at.frame,
            Object::new(),
        );
    }

    /// Emits one signal: frame metadata plus `meta`, repaired if it is well-known.
    fn emit(
        &mut self,
        out: &mut Vec<Decoded>,
        kind: &str,
        payload: Object,
        run: Option<&str>,
        frame: &Frame,
        meta: Object,
    ) {
        let mut signal = Signal::new(kind, self.source.clone(), payload).at(frame.ts);
        if let Some(run) = run {
            signal = signal.correlated(run);
        }
        if !frame.meta.is_empty() || !meta.is_empty() {
            let m = signal.metadata_mut();
            m.extend(frame.meta.clone());
            m.extend(meta);
        }
        self.push(out, signal);
    }

    fn push(&mut self, out: &mut Vec<Decoded>, mut signal: Signal) {
        well_known::repair(&mut signal);
        self.last_timestamp = signal.timestamp;
        out.push(Decoded::Signal(signal));
    }

    fn bad(&mut self, out: &mut Vec<Decoded>, raw: &str, message: &str) {
        out.push(Decoded::BadInput(bad_input_signal(
            &self.source,
            self.last_timestamp,
            raw,
            message,
        )));
    }

    fn on_text(&mut self, text: Result<&str, &str>, out: &mut Vec<Decoded>) {
        match text {
            Ok(text) => self.decode_frame(text, out),
            Err(cut) => self.bad(out, cut, &line_too_long(MAX_LINE)),
        }
    }
}

impl StreamDecoder for PalyraDecoder {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let mut texts = std::mem::replace(&mut self.texts, JsonTexts::new(MAX_LINE));
        texts.feed(bytes, |text| self.on_text(text, out));
        self.texts = texts;
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let mut texts = std::mem::replace(&mut self.texts, JsonTexts::new(MAX_LINE));
        texts.finish(|text| self.on_text(text, out));
        self.texts = texts;
    }
}

/// The schema name of an agent state.
pub(crate) fn state_name(state: AgentState) -> &'static str {
    match state {
        AgentState::Idle => "idle",
        AgentState::Thinking => "thinking",
        AgentState::Acting => "acting",
        AgentState::Waiting => "waiting",
        AgentState::Done => "done",
        AgentState::Error => "error",
    }
}

/// A JSON value as a payload object: objects as they are, anything else as `{value}`.
fn wrap_value(value: Value) -> Object {
    match value {
        Value::Object(obj) => obj,
        Value::Null => Object::new(),
        other => {
            let mut obj = Object::new();
            obj.insert("value".into(), other);
            obj
        }
    }
}

/// A decoded JSON-bytes field (`input_json`, `output_json`) as an object: absent or null
/// is `None`, text that was not JSON is `{"_raw": text}`, other JSON values `{"value": v}`.
fn wrap_json(value: Option<Value>) -> Option<Object> {
    match value? {
        Value::Null => None,
        Value::Object(obj) => Some(obj),
        Value::String(text) => {
            let mut obj = Object::new();
            obj.insert("_raw".into(), Value::String(text));
            Some(obj)
        }
        other => {
            let mut obj = Object::new();
            obj.insert("value".into(), other);
            Some(obj)
        }
    }
}

/// An A2UI patch as a payload: an object as it is (the patch `{v, ops}` or one op), a
/// list of ops as `{ops: […]}`, a JSON string decoded first, other text as `{_raw}`.
fn a2ui_patch(patch: Value) -> Object {
    match patch {
        Value::Object(obj) => obj,
        Value::Array(ops) => {
            let mut obj = Object::new();
            obj.insert("ops".into(), Value::Array(ops));
            obj
        }
        Value::String(text) => match serde_json::from_str::<Value>(&text) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) => a2ui_patch(v),
            _ => {
                let mut obj = Object::new();
                obj.insert("_raw".into(), Value::String(text));
                obj
            }
        },
        other => wrap_value(other),
    }
}

fn error_payload(agent: &str, message: &str, code: &str) -> Object {
    let mut payload = Object::new();
    payload.insert("agentId".into(), Value::String(agent.to_owned()));
    payload.insert("code".into(), Value::String(code.to_owned()));
    payload.insert("message".into(), Value::String(message.to_owned()));
    payload.insert("severity".into(), Value::String("error".into()));
    payload
}

fn completion_payload(task: &str, agent: &str, success: bool, result: &str) -> Object {
    let mut payload = Object::new();
    payload.insert("taskId".into(), Value::String(task.to_owned()));
    payload.insert("agentId".into(), Value::String(agent.to_owned()));
    payload.insert("success".into(), Value::Bool(success));
    payload.insert("result".into(), Value::String(result.to_owned()));
    payload
}

/// A `token_usage` payload (and its metadata) from a `provider_turn_output`, when its
/// usage has integer prompt and completion counts (redacted or estimated-away counts give
/// none: a usage of 0/0 would be a lie).
fn token_usage_payload(agent: &str, body: &Object) -> Option<(Object, Object)> {
    let usage = body.get("usage")?.as_object()?;
    let prompt = usage.get("prompt_tokens")?.as_u64()?;
    let completion = usage.get("completion_tokens")?.as_u64()?;
    let mut payload = Object::new();
    payload.insert("agentId".into(), Value::String(agent.to_owned()));
    payload.insert("promptTokens".into(), Value::from(prompt));
    payload.insert("completionTokens".into(), Value::from(completion));
    if let Some(model) = body
        .get("raw_provider_refs")
        .and_then(|r| r.get("provider_model_id"))
        .and_then(Value::as_str)
    {
        payload.insert("model".into(), Value::String(model.to_owned()));
    }
    let mut meta = Object::new();
    for (k, v) in usage {
        if k != "prompt_tokens" && k != "completion_tokens" {
            meta.insert(k.clone(), v.clone());
        }
    }
    Some((payload, meta))
}
