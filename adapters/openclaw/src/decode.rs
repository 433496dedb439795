//! Gateway frames to signals.

use std::collections::HashMap;

use patchbay_graph::approvals::{self, Verdict};
use patchbay_signal::decode::{FrameDecoder, FrameLines};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::partial_usage::PartialUsage;
use patchbay_signal::well_known::{
    AgentState, AgentStateChange, Completion, ErrorPayload, Payload, Severity, TextDelta, Thinking,
    ToolCall, ToolResult, as_count,
};
use patchbay_signal::{Object, Signal, millis_of, now_ms, object, take_str};
use serde_json::Value;

/// Events the gateway sends for its own upkeep: UIs hide them by default.
const INTERNAL_EVENTS: [&str; 5] = ["heartbeat", "cron", "tick", "presence", "health"];

/// Payload keys copied to `metadata` (where a run was addressed from).
const CHANNEL_KEYS: [&str; 6] = [
    "channel",
    "channelLabel",
    "label",
    "sessionKey",
    "sessionId",
    "lane",
];

/// Bound on the streamed texts remembered to compute deltas from cumulative `text`.
const MAX_TEXT_BUFFERS: usize = 256;

/// Bound on the run → session map.
const MAX_TRACKED_RUNS: usize = 256;

/// `taskId` of a run end without a `runId`.
const UNKNOWN_RUN: &str = "unknown-run";

/// A run seen on the gateway, as an abort needs to address it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRef {
    /// `runId`.
    pub run_id: String,
    /// `sessionKey` (`chat.abort` needs it), when known.
    pub session_key: Option<String>,
}

/// The runs the decoder has seen: the last one, and the session of each (bounded).
#[derive(Debug, Clone, Default)]
pub struct RunTracker {
    last: Option<RunRef>,
    sessions: HashMap<String, String>,
}

impl RunTracker {
    /// Nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last run seen.
    pub fn last(&self) -> Option<&RunRef> {
        self.last.as_ref()
    }

    /// The session of a run, when seen.
    pub fn session_of(&self, run_id: &str) -> Option<&str> {
        self.sessions.get(run_id).map(String::as_str)
    }

    /// Records a run (from an event, or a `chat.send` answer the transport got).
    pub fn note(&mut self, run_id: &str, session_key: Option<&str>) {
        if let Some(session) = session_key {
            if self.sessions.len() >= MAX_TRACKED_RUNS && !self.sessions.contains_key(run_id) {
                self.sessions.clear();
            }
            self.sessions.insert(run_id.to_owned(), session.to_owned());
        }
        let session_key = session_key
            .map(str::to_owned)
            .or_else(|| self.sessions.get(run_id).cloned());
        self.last = Some(RunRef {
            run_id: run_id.to_owned(),
            session_key,
        });
    }
}

/// Decodes OpenClaw gateway frames (`req`/`res`/`event`) into signals; see the crate
/// docs for the mapping. Keeps the runs seen (for aborts) and the streamed texts (to
/// turn a cumulative `text` without `delta` into a delta).
#[derive(Debug, Clone)]
pub struct OpenClawDecoder {
    source: String,
    runs: RunTracker,
    texts: HashMap<(String, String, String), String>,
    last_timestamp: i64,
}

/// What every signal of one event frame carries.
struct Envelope {
    timestamp: i64,
    correlation: Option<String>,
    metadata: Object,
}

impl Envelope {
    fn apply(&self, mut signal: Signal) -> Signal {
        signal.timestamp = self.timestamp;
        if let Some(c) = &self.correlation {
            signal.correlation_id = Some(c.into());
        }
        for (k, v) in &self.metadata {
            signal
                .metadata_mut()
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
        signal
    }
}

impl OpenClawDecoder {
    /// A decoder whose signals come from `source` (e.g. `openclaw:gateway`).
    pub fn new(source: impl Into<String>) -> Self {
        OpenClawDecoder {
            source: source.into(),
            runs: RunTracker::new(),
            texts: HashMap::new(),
            last_timestamp: 0,
        }
    }

    /// The source name of the signals.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The runs seen so far (what [`encode_control`](crate::encode_control) aborts).
    pub fn runs(&self) -> &RunTracker {
        &self.runs
    }

    /// The runs seen so far, for a transport that learned of a run another way.
    pub fn runs_mut(&mut self) -> &mut RunTracker {
        &mut self.runs
    }

    /// Decodes one frame. `recorded_t` is the time a capture recorded it at, used when
    /// the frame has no time of its own.
    pub fn decode_frame(&mut self, frame: Value, recorded_t: Option<i64>, out: &mut Vec<Decoded>) {
        let Value::Object(mut frame) = frame else {
            let raw = frame.to_string();
            out.push(self.bad(&raw, "an OpenClaw frame must be a JSON object"));
            return;
        };
        let start = out.len();
        let fallback_time = recorded_t.unwrap_or_else(now_ms);
        match frame.get("type").and_then(Value::as_str) {
            Some("event") => self.event(frame, fallback_time, out),
            // The handshake's business, not a signal.
            Some("connect.challenge") => {}
            Some("res") => self.response(frame, fallback_time, out),
            Some("req") => self.request(frame, fallback_time, out),
            Some(other) => {
                let kind = format!("openclaw.{other}");
                frame.shift_remove("type");
                let signal = Signal::new(kind, &self.source, frame).at(fallback_time);
                out.push(Decoded::Signal(signal));
            }
            None => {
                let raw = Value::Object(frame).to_string();
                out.push(self.bad(&raw, "frame without a string `type`"));
            }
        }
        if let Some(Decoded::Signal(last)) = out[start..].iter().rev().find(|d| !d.is_bad()) {
            self.last_timestamp = last.timestamp;
        }
    }

    fn request(&mut self, mut frame: Object, ts: i64, out: &mut Vec<Decoded>) {
        // A request in a capture (the other side's, or a bare copy of ours): kept, with
        // its credentials blanked, since signals end up in logs and UIs.
        frame.shift_remove("type");
        if let Some(Value::Object(auth)) = frame.get_mut("params").and_then(|p| p.get_mut("auth")) {
            for value in auth.values_mut() {
                *value = Value::String("[redacted]".into());
            }
        }
        let signal = Signal::new("openclaw.request", &self.source, frame).at(ts);
        out.push(Decoded::Signal(signal));
    }

    fn response(&mut self, frame: Object, ts: i64, out: &mut Vec<Decoded>) {
        let id = frame.get("id").cloned().unwrap_or(Value::Null);
        let ok = frame.get("ok").and_then(Value::as_bool) == Some(true);
        let payload = frame.get("payload").cloned().unwrap_or(Value::Null);
        if ok {
            if payload.get("type").and_then(Value::as_str) == Some("hello-ok") {
                // `auth` may hold a device token: not copied. Features and snapshot are
                // connection data, not events.
                let mut connected = Object::new();
                for key in ["protocol", "server", "policy"] {
                    if let Some(v) = payload.get(key) {
                        connected.insert(key.into(), v.clone());
                    }
                }
                let signal = Signal::new("openclaw.connected", &self.source, connected)
                    .at(ts)
                    .with_meta("id", id);
                out.push(Decoded::Signal(signal));
            } else if let Some(run) = payload.get("runId").and_then(Value::as_str) {
                // `chat.send`/`agent` answers name the run they started.
                self.runs.note(run, None);
            }
            return;
        }
        let error = frame.get("error").cloned().unwrap_or(Value::Null);
        let code = error
            .pointer("/details/code")
            .or_else(|| error.get("code"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let message = match error.get("message") {
            Some(Value::String(m)) => m.clone(),
            _ => "request failed".to_owned(),
        };
        let signal = ErrorPayload {
            agent_id: None,
            code,
            message,
            severity: Severity::Error,
        }
        .into_signal(&self.source)
        .at(ts)
        .with_meta("id", id)
        .with_meta("error", error);
        out.push(Decoded::Signal(signal));
    }

    fn event(&mut self, mut frame: Object, fallback_time: i64, out: &mut Vec<Decoded>) {
        frame.shift_remove("type");
        let name = match frame.shift_remove("event") {
            Some(Value::String(name)) => name,
            other => {
                if let Some(v) = other {
                    frame.insert("event".into(), v);
                }
                let raw = Value::Object(frame).to_string();
                out.push(self.bad(&raw, "event frame without a string `event`"));
                return;
            }
        };
        if name == "connect.challenge" {
            return;
        }
        let payload = match frame.shift_remove("payload") {
            Some(Value::Object(p)) => p,
            None | Some(Value::Null) => Object::new(),
            Some(other) => object! { "value" => other },
        };
        let mut metadata = Object::new();
        if let Some(seq) = frame.shift_remove("seq") {
            metadata.insert("upstreamSeq".into(), seq);
        }
        if let Some(seq) = payload.get("seq") {
            metadata.insert("runSeq".into(), seq.clone());
        }
        for key in CHANNEL_KEYS {
            if let Some(v) = payload.get(key).filter(|v| !v.is_null()) {
                metadata.insert(key.into(), v.clone());
            }
        }
        // Other frame keys (`stateVersion`, …).
        metadata.extend(frame);
        if INTERNAL_EVENTS.contains(&name.as_str()) {
            metadata.insert("internal".into(), Value::Bool(true));
        }
        if payload.get("isHeartbeat") == Some(&Value::Bool(true)) {
            metadata.insert("heartbeat".into(), Value::Bool(true));
            metadata.insert("internal".into(), Value::Bool(true));
        }
        let envelope = Envelope {
            timestamp: payload
                .get("ts")
                .and_then(millis_of)
                .unwrap_or(fallback_time),
            correlation: payload
                .get("runId")
                .and_then(Value::as_str)
                .map(str::to_owned),
            metadata,
        };
        let mut envelope = envelope;
        if name == "session.tool" {
            envelope
                .metadata
                .insert("event".into(), Value::String(name.clone()));
        }
        let signals = match name.as_str() {
            // `session.tool`: the tool stream of runs another client started, as the
            // gateway sends it to session subscribers (`sessions.subscribe`).
            "agent" | "session.tool" => self.agent(payload),
            "exec.approval.requested" | "exec.approval.resolved" => {
                let (from, to) = if name == "exec.approval.requested" {
                    (AgentState::Acting, AgentState::Waiting)
                } else {
                    (AgentState::Waiting, AgentState::Acting)
                };
                let request = payload.get("request").and_then(Value::as_object);
                let lookup = |key: &str| {
                    payload
                        .get(key)
                        .or_else(|| request.and_then(|r| r.get(key)))
                        .and_then(Value::as_str)
                };
                let agent_id = self.agent_id(lookup("agentId"), lookup("sessionKey"));
                let change = AgentStateChange {
                    agent_id,
                    from,
                    to,
                    reason: Some(name.clone()),
                }
                .into_signal(&self.source);
                let id = payload.get("id").and_then(Value::as_str).map(str::to_owned);
                // The common approval signal every UI reads, besides OpenClaw's own.
                let common = id.as_ref().map(|id| {
                    if name == "exec.approval.requested" {
                        let input = request.cloned().map_or(Value::Null, Value::Object);
                        let choices = ["allow-once", "allow-always", "deny"].map(String::from);
                        let agent = change.payload.get("agentId").and_then(Value::as_str);
                        Signal::new(
                            approvals::REQUESTED,
                            &self.source,
                            approvals::request_payload(
                                id,
                                agent.unwrap_or_default(),
                                "exec",
                                input,
                                &choices,
                            ),
                        )
                    } else {
                        let value = match payload.get("decision").and_then(Value::as_str) {
                            Some("allow-once") => Verdict::Allow,
                            Some("allow-always") => Verdict::Always,
                            _ => Verdict::Deny,
                        };
                        approvals::decided(&self.source, id, value, "openclaw")
                    }
                });
                let mut approval =
                    Signal::new(format!("openclaw.{name}"), &self.source, payload.clone());
                if let Some(id) = &id {
                    approval = approval.with_meta("promptId", id.clone());
                }
                let run = lookup("runId").map(str::to_owned);
                [Some(change), Some(approval), common]
                    .into_iter()
                    .flatten()
                    .map(|s| match &run {
                        Some(r) if envelope.correlation.is_none() => s.correlated(r.clone()),
                        _ => s,
                    })
                    .collect()
            }
            // `chat` repeats what the `agent` streams carry: passed through, not decoded,
            // or every token would arrive twice.
            _ => vec![Signal::new(
                format!("openclaw.{name}"),
                &self.source,
                payload,
            )],
        };
        for signal in signals {
            out.push(Decoded::Signal(envelope.apply(signal)));
        }
    }

    /// The agent of an event: its `agentId`, else the agent named in its session key
    /// (`agent:<id>:<session>`), else the whole session key, else the source.
    fn agent_id(&self, agent: Option<&str>, session_key: Option<&str>) -> String {
        if let Some(agent) = agent.filter(|a| !a.is_empty()) {
            return agent.to_owned();
        }
        if let Some(key) = session_key.filter(|k| !k.is_empty()) {
            let mut parts = key.split(':');
            return match (parts.next(), parts.next()) {
                (Some("agent"), Some(id)) if !id.is_empty() => id.to_owned(),
                _ => key.to_owned(),
            };
        }
        self.source.clone()
    }

    fn agent(&mut self, mut payload: Object) -> Vec<Signal> {
        let run = payload
            .get("runId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let session_key = payload
            .get("sessionKey")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(run) = &run {
            self.runs.note(run, session_key.as_deref());
        }
        let agent_id = self.agent_id(
            payload.get("agentId").and_then(Value::as_str),
            session_key.as_deref(),
        );
        let Some(Value::String(stream)) = payload.get("stream").cloned() else {
            return vec![Signal::new("openclaw.agent", &self.source, payload)];
        };
        let mut data = match payload.shift_remove("data") {
            Some(Value::Object(d)) => d,
            None | Some(Value::Null) => Object::new(),
            Some(other) => object! { "value" => other },
        };
        // The rest of the event payload (session snapshots, …) goes to `metadata.frame`;
        // what the envelope already carries is not repeated.
        let mut rest = payload;
        for key in ["runId", "stream", "agentId", "seq", "ts", "isHeartbeat"]
            .into_iter()
            .chain(CHANNEL_KEYS)
        {
            rest.shift_remove(key);
        }
        let run_key = run.clone().unwrap_or_default();
        let phase = data.get("phase").and_then(Value::as_str).map(str::to_owned);
        let source = self.source.clone();
        let mapped: Option<Signal> = match (stream.as_str(), phase.as_deref()) {
            ("lifecycle", Some("start")) => {
                data.shift_remove("phase");
                Some(
                    AgentStateChange {
                        agent_id,
                        from: AgentState::Idle,
                        to: AgentState::Acting,
                        reason: None,
                    }
                    .into_signal(&source),
                )
            }
            ("lifecycle", Some("end")) => {
                data.shift_remove("phase");
                self.forget_texts(&run_key);
                let aborted = match data.get("aborted") {
                    Some(Value::Bool(b)) => {
                        let b = *b;
                        data.shift_remove("aborted");
                        b
                    }
                    _ => false,
                };
                let result = take_str(&mut data, "stopReason");
                Some(
                    Completion {
                        task_id: run.clone().unwrap_or_else(|| UNKNOWN_RUN.to_owned()),
                        agent_id: Some(agent_id),
                        success: !aborted,
                        result,
                    }
                    .into_signal(&source),
                )
            }
            ("lifecycle", Some("error")) => {
                data.shift_remove("phase");
                self.forget_texts(&run_key);
                let message = take_str(&mut data, "error")
                    .or_else(|| take_str(&mut data, "message"))
                    .unwrap_or_else(|| "run failed".to_owned());
                Some(
                    ErrorPayload {
                        agent_id: Some(agent_id),
                        code: Some("lifecycle_error".into()),
                        message,
                        severity: Severity::Error,
                    }
                    .into_signal(&source),
                )
            }
            ("assistant" | "thinking", _) => {
                self.streamed_text(&run_key, &stream, &mut data)
                    .map(|content| {
                        if stream == "assistant" {
                            TextDelta {
                                agent_id,
                                content,
                                content_type: None,
                                index: None,
                            }
                            .into_signal(&source)
                        } else {
                            Thinking { agent_id, content }.into_signal(&source)
                        }
                    })
            }
            ("tool", Some("start")) => take_str(&mut data, "name").map(|name| {
                data.shift_remove("phase");
                let call_id = take_str(&mut data, "toolCallId");
                let input = match data.shift_remove("args") {
                    Some(Value::Object(args)) => Some(args),
                    None | Some(Value::Null) => None,
                    Some(other) => Some(object! { "_raw" => other }),
                };
                ToolCall {
                    tool_name: name,
                    agent_id,
                    call_id,
                    input,
                }
                .into_signal(&source)
            }),
            ("tool", Some("result")) => match (data.get("name"), data.get("isError")) {
                (Some(Value::String(_)), None | Some(Value::Null) | Some(Value::Bool(_))) => {
                    data.shift_remove("phase");
                    let name = take_str(&mut data, "name").unwrap_or_default();
                    let is_error = data.shift_remove("isError").and_then(|v| v.as_bool());
                    let call_id = take_str(&mut data, "toolCallId");
                    let output = match data.shift_remove("result") {
                        Some(Value::Object(result)) => Some(result),
                        None => None,
                        Some(other) => Some(object! { "result" => other }),
                    };
                    Some(
                        ToolResult {
                            tool_name: name,
                            agent_id,
                            call_id,
                            success: !is_error.unwrap_or(false),
                            output,
                        }
                        .into_signal(&source),
                    )
                }
                _ => None,
            },
            ("usage", _) => usage(&mut data, agent_id, &source),
            _ => None,
        };
        let mut signal = match mapped {
            Some(signal) if data.is_empty() => signal,
            Some(signal) => signal.with_meta("extra", Value::Object(data)),
            None => {
                let kind = match (stream.as_str(), phase.as_deref()) {
                    ("tool", Some("update")) => "openclaw.tool_update".to_owned(),
                    _ => format!("openclaw.{stream}"),
                };
                Signal::new(kind, &source, data)
            }
        };
        signal = signal.with_meta("stream", stream);
        if !rest.is_empty() {
            signal = signal.with_meta("frame", Value::Object(rest));
        }
        vec![signal]
    }

    /// The new text of an assistant/thinking frame: its `delta`, or, when the delta is
    /// empty or absent, what its cumulative `text` adds to the text seen so far (all of
    /// it, marked `metadata.snapshot`, when it does not extend it). `None` when nothing
    /// new arrived (the frame then passes through under its stream's name).
    fn streamed_text(&mut self, run: &str, stream: &str, data: &mut Object) -> Option<String> {
        let item = data
            .get("itemId")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let key = (run.to_owned(), stream.to_owned(), item.to_owned());
        let delta = match data.get("delta") {
            Some(Value::String(d)) => Some(d.clone()),
            None | Some(Value::Null) => None,
            Some(_) => return None,
        };
        let text = match data.get("text") {
            Some(Value::String(t)) => Some(t.clone()),
            _ => None,
        };
        if self.texts.len() >= MAX_TEXT_BUFFERS && !self.texts.contains_key(&key) {
            self.texts.clear();
        }
        let content = match (delta, text) {
            (Some(delta), text) if !delta.is_empty() => {
                let seen = self.texts.entry(key).or_default();
                match text {
                    Some(text) => *seen = text,
                    None => seen.push_str(&delta),
                }
                delta
            }
            (_, Some(text)) => {
                let seen = self.texts.entry(key).or_default();
                let new = match text.strip_prefix(seen.as_str()) {
                    Some(rest) => rest.to_owned(),
                    None => {
                        data.insert("snapshot".into(), Value::Bool(true));
                        text.clone()
                    }
                };
                *seen = text;
                if new.is_empty() {
                    data.shift_remove("snapshot");
                    return None;
                }
                new
            }
            _ => return None,
        };
        // The cumulative text is the sum of the deltas: not repeated in every signal.
        data.shift_remove("delta");
        data.shift_remove("text");
        Some(content)
    }

    fn forget_texts(&mut self, run: &str) {
        self.texts.retain(|(r, _, _), _| r != run);
    }

    pub(crate) fn bad(&self, raw: &str, message: &str) -> Decoded {
        let signal = bad_input_signal(&self.source, self.last_timestamp, raw, message);
        Decoded::BadInput(signal)
    }
}

/// `token_usage` from a usage stream frame, when it has a token count (never a 0/0 from a
/// frame without counts); the count it lacks is 0 and named in `metadata.missing`.
fn usage(data: &mut Object, agent_id: String, source: &str) -> Option<Signal> {
    let mut take_count = |names: &[&str]| {
        for name in names {
            if let Some(n) = data.get(*name).and_then(as_count) {
                data.shift_remove(*name);
                return Some(n);
            }
        }
        None
    };
    let input = take_count(&["inputTokens", "promptTokens", "input", "input_tokens"]);
    let output = take_count(&[
        "outputTokens",
        "completionTokens",
        "output",
        "output_tokens",
    ]);
    if input.is_none() && output.is_none() {
        return None;
    }
    let model = take_str(data, "model");
    let cost = data
        .get("cost")
        .and_then(Value::as_f64)
        .filter(|c| *c >= 0.0);
    if cost.is_some() {
        data.shift_remove("cost");
    }
    let usage = PartialUsage {
        agent_id,
        input,
        output,
        model,
        cost,
    };
    Some(usage.into_signal(source))
}

/// The byte-stream form of [`OpenClawDecoder`]: NDJSON lines, each a bare frame or a
/// recorded line `{"t","dir","frame"}` (only `dir: "in"` is decoded, with `t` as the
/// fallback timestamp).
pub type OpenClawStream = FrameLines<OpenClawDecoder>;

impl FrameDecoder for OpenClawDecoder {
    fn decode_frame(&mut self, frame: Value, recorded_t: Option<i64>, out: &mut Vec<Decoded>) {
        OpenClawDecoder::decode_frame(self, frame, recorded_t, out);
    }

    fn bad_line(&self, raw: &str, message: &str) -> Decoded {
        self.bad(raw, message)
    }
}
