//! Agent → UI frames to signals.

use patchbay_signal::decode::{FrameDecoder, FrameLines};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::partial_usage::PartialUsage;
use patchbay_signal::well_known::{
    AgentState, AgentStateChange, Completion, ErrorPayload, Payload, Severity, TextDelta, Thinking,
    ToolResult, as_count,
};
use patchbay_signal::{Object, Signal, SmallString, millis_of, now_ms, object};
use serde_json::Value;

/// Drops frames replayed after a reconnect: a frame whose `seq` is at or below the
/// highest `seq` seen is a duplicate. Frames without a `seq` always pass.
///
/// The transport keeps one across reconnections to the same agent (and asks for "events
/// since [`SeqDedupe::highest`]"), and calls [`SeqDedupe::reset`] when it talks to a new
/// agent session, whose `seq` starts again at 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqDedupe {
    highest: Option<u64>,
    dropped: u64,
}

impl SeqDedupe {
    /// An empty deduper: every frame passes until one with a `seq` is admitted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a frame with this `seq` is new; remembers it when it is.
    pub fn admit(&mut self, seq: Option<u64>) -> bool {
        let Some(seq) = seq else {
            return true;
        };
        match self.highest {
            Some(highest) if seq <= highest => {
                self.dropped += 1;
                false
            }
            _ => {
                self.highest = Some(seq);
                true
            }
        }
    }

    /// The highest `seq` admitted, the resume point after a reconnect.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }

    /// How many frames were dropped as duplicates.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Forgets the seen `seq`s (a new agent session starts again at 0).
    pub fn reset(&mut self) {
        self.highest = None;
    }
}

/// Decodes Escapement frames (agent → UI) into signals. See the crate docs for the
/// mapping. Holds the [`SeqDedupe`] and the timestamp of the last good signal (for the
/// bad-input reports), nothing else: every frame is decoded on its own.
#[derive(Debug, Clone)]
pub struct EscapementDecoder {
    source: SmallString,
    dedupe: SeqDedupe,
    last_timestamp: i64,
}

impl EscapementDecoder {
    /// A decoder whose signals come from `source` (e.g. `escapement:agent`).
    pub fn new(source: impl Into<SmallString>) -> Self {
        EscapementDecoder {
            source: source.into(),
            dedupe: SeqDedupe::new(),
            last_timestamp: 0,
        }
    }

    /// The source name of the signals.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The duplicate filter (read).
    pub fn dedupe(&self) -> &SeqDedupe {
        &self.dedupe
    }

    /// The duplicate filter, for the transport to reset or carry across connections.
    pub fn dedupe_mut(&mut self) -> &mut SeqDedupe {
        &mut self.dedupe
    }

    /// Decodes one frame. `recorded_t` is the time a capture recorded it at, used when the
    /// frame has no `ts`.
    pub fn decode_frame(&mut self, frame: Value, recorded_t: Option<i64>, out: &mut Vec<Decoded>) {
        let Value::Object(mut frame) = frame else {
            let raw = frame.to_string();
            out.push(self.bad(&raw, "an Escapement frame must be a JSON object"));
            return;
        };
        let kind = match frame.shift_remove("kind") {
            Some(Value::String(kind)) => kind,
            None if frame.get("event").is_some_and(Value::is_string) => "event".to_owned(),
            other => {
                if let Some(v) = other {
                    frame.insert("kind".into(), v);
                }
                let raw = Value::Object(frame).to_string();
                out.push(self.bad(&raw, "frame without a string `kind`"));
                return;
            }
        };
        let seq_value = frame.shift_remove("seq");
        let seq = seq_value.as_ref().and_then(Value::as_u64);
        if !self.dedupe.admit(seq) {
            return;
        }
        let mut stray = Object::new();
        let timestamp = match frame.shift_remove("ts") {
            Some(ts) => match millis_of(&ts) {
                Some(ms) => ms,
                None => {
                    stray.insert("ts".into(), ts);
                    recorded_t.unwrap_or_else(now_ms)
                }
            },
            None => recorded_t.unwrap_or_else(now_ms),
        };
        let frame_meta = FrameMeta {
            timestamp,
            seq: seq_value,
            stray,
        };
        let start = out.len();
        match kind.as_str() {
            "event" => self.decode_event(frame, frame_meta, out),
            "phase" | "prompt" | "debug" | "answer" => {
                let signal = Signal::new(format!("escapement.{kind}"), &self.source, frame);
                out.push(Decoded::Signal(frame_meta.apply(signal)));
            }
            "control" => {
                let kind = match frame.get("op").and_then(Value::as_str) {
                    Some(op) if !op.is_empty() => format!("escapement.{}", op.replace('-', "_")),
                    _ => "escapement.control".to_owned(),
                };
                let signal = Signal::new(kind, &self.source, frame);
                out.push(Decoded::Signal(frame_meta.apply(signal)));
            }
            other => {
                let signal = Signal::new(format!("escapement.{other}"), &self.source, frame);
                out.push(Decoded::Signal(frame_meta.apply(signal)));
            }
        }
        if out.len() > start {
            self.last_timestamp = timestamp;
        }
    }

    fn decode_event(&self, mut frame: Object, meta: FrameMeta, out: &mut Vec<Decoded>) {
        let Some(Value::String(event)) = frame.shift_remove("event") else {
            // An event frame without a name: kept whole rather than guessed at.
            let signal = Signal::new("escapement.event", &self.source, frame);
            out.push(Decoded::Signal(meta.apply(signal)));
            return;
        };
        let mut data = match frame.shift_remove("data") {
            Some(Value::Object(data)) => data,
            None | Some(Value::Null) => Object::new(),
            Some(other) => object! { "value" => other },
        };
        // Top-level bookkeeping keys (`transcript/node-id`, …) travel as metadata.
        let mut meta = meta;
        meta.stray.extend(frame);
        let correlation = data
            .get("session-id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let agent_id = data
            .get("invokeid")
            .and_then(Value::as_str)
            .unwrap_or(&self.source)
            .to_owned();
        let mut signals = match event.as_str() {
            "llm/delta" => delta(&mut data, &agent_id, &self.source),
            "llm/start" => vec![
                AgentStateChange {
                    agent_id: agent_id.clone(),
                    from: AgentState::Idle,
                    to: AgentState::Thinking,
                    reason: None,
                }
                .into_signal(&self.source),
            ],
            "llm/response" => response(&mut data, &agent_id, correlation.as_deref(), &self.source),
            "llm/tool-result" => tool_result(&mut data, &agent_id, &self.source),
            "llm/error" | "llm/model-down" => {
                vec![llm_error(&event, &mut data, &agent_id, &self.source)]
            }
            _ => Vec::new(),
        };
        if signals.is_empty() {
            // Not mapped (or not mappable): the event keeps its name and its data. A name
            // that is a well-known type must have its payload (or becomes `invalid.<name>`).
            let signal = Signal::new(event, &self.source, data);
            let mut signal = with_correlation(meta.apply(signal), &correlation);
            patchbay_signal::well_known::repair(&mut signal);
            out.push(Decoded::Signal(signal));
            return;
        }
        // What the well-known payloads had no room for goes to `metadata.extra` of the
        // last signal (the completion for `llm/response`), so nothing is dropped.
        data.shift_remove("invokeid");
        data.shift_remove("session-id");
        if let Some(last) = signals.last_mut().filter(|_| !data.is_empty()) {
            last.metadata_mut()
                .insert("extra".into(), Value::Object(data));
        }
        for signal in signals {
            let signal = with_correlation(meta.apply(signal), &correlation);
            out.push(Decoded::Signal(signal));
        }
    }

    fn bad(&self, raw: &str, message: &str) -> Decoded {
        let signal = bad_input_signal(&self.source, self.last_timestamp, raw, message);
        Decoded::BadInput(signal)
    }
}

/// What every signal of one frame shares: its time, its `seq` and stray top-level keys.
struct FrameMeta {
    timestamp: i64,
    seq: Option<Value>,
    stray: Object,
}

impl FrameMeta {
    fn apply(&self, mut signal: Signal) -> Signal {
        signal.timestamp = self.timestamp;
        if let Some(seq) = &self.seq {
            signal
                .metadata_mut()
                .insert("upstreamSeq".into(), seq.clone());
        }
        for (k, v) in &self.stray {
            signal
                .metadata_mut()
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
        signal
    }
}

fn with_correlation(signal: Signal, correlation: &Option<String>) -> Signal {
    match correlation {
        Some(c) => signal.correlated(c.clone()),
        None => signal,
    }
}

fn delta(data: &mut Object, agent_id: &str, source: &str) -> Vec<Signal> {
    let delta_type = match data.get("type") {
        None | Some(Value::Null) => "text-delta",
        Some(Value::String(t)) => t.as_str(),
        Some(_) => return Vec::new(),
    };
    let Some(Value::String(text)) = data.get("text") else {
        return Vec::new();
    };
    let signal = match delta_type {
        "text-delta" => TextDelta {
            agent_id: agent_id.to_owned(),
            content: text.clone(),
            content_type: None,
            index: None,
        }
        .into_signal(source),
        "thinking-delta" => Thinking {
            agent_id: agent_id.to_owned(),
            content: text.clone(),
        }
        .into_signal(source),
        _ => return Vec::new(),
    };
    data.shift_remove("type");
    data.shift_remove("text");
    vec![signal]
}

fn response(data: &mut Object, agent_id: &str, session: Option<&str>, source: &str) -> Vec<Signal> {
    let mut signals = Vec::new();
    let model = data.get("model").and_then(Value::as_str).map(str::to_owned);
    if let Some(Value::Object(usage)) = data.get("usage") {
        let input = usage.get("input-tokens").and_then(as_count);
        let output = usage.get("output-tokens").and_then(as_count);
        if input.is_some() || output.is_some() {
            let mut usage = usage.clone();
            usage.shift_remove("input-tokens");
            usage.shift_remove("output-tokens");
            let mut signal = PartialUsage {
                agent_id: agent_id.to_owned(),
                input,
                output,
                model: model.clone(),
                cost: None,
            }
            .into_signal(source);
            if !usage.is_empty() {
                signal = signal.with_meta("usage", Value::Object(usage));
            }
            signals.push(signal);
            data.shift_remove("usage");
        }
    }
    let stop_reason = match data.shift_remove("stop-reason") {
        Some(Value::String(s)) => Some(s),
        Some(Value::Null) | None => None,
        Some(other) => {
            data.insert("stop-reason".into(), other);
            None
        }
    };
    let success = !matches!(stop_reason.as_deref(), Some("max_tokens" | "refusal"));
    signals.push(
        Completion {
            task_id: session.unwrap_or(agent_id).to_owned(),
            agent_id: Some(agent_id.to_owned()),
            success,
            result: stop_reason,
        }
        .into_signal(source),
    );
    signals
}

fn tool_result(data: &mut Object, agent_id: &str, source: &str) -> Vec<Signal> {
    let Some(Value::String(tool)) = data.get("tool") else {
        return Vec::new();
    };
    let tool = tool.clone();
    let is_error = match data.get("is-error") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Vec::new(),
    };
    data.shift_remove("tool");
    data.shift_remove("is-error");
    let output = data
        .shift_remove("content-preview")
        .map(|preview| object! { "content-preview" => preview });
    vec![
        ToolResult {
            tool_name: tool,
            agent_id: agent_id.to_owned(),
            call_id: None,
            success: !is_error,
            output,
        }
        .into_signal(source),
    ]
}

fn llm_error(event: &str, data: &mut Object, agent_id: &str, source: &str) -> Signal {
    let message = match data.shift_remove("message") {
        Some(Value::String(m)) => m,
        Some(Value::Null) | None => format!("{event} without a message"),
        Some(other) => other.to_string(),
    };
    // A model that went down while others remain is a failover, not yet a failure.
    let severity = match (event, data.get("remaining").and_then(as_count)) {
        ("llm/model-down", Some(remaining)) if remaining > 0 => Severity::Warning,
        _ => Severity::Error,
    };
    ErrorPayload {
        agent_id: Some(agent_id.to_owned()),
        code: Some(event.to_owned()),
        message,
        severity,
    }
    .into_signal(source)
}

/// The byte-stream form of [`EscapementDecoder`]: NDJSON lines, each a bare frame or a
/// recorded line `{"t","dir","frame"}` (only `dir: "in"` is decoded, with `t` as the
/// fallback timestamp).
pub type EscapementStream = FrameLines<EscapementDecoder>;

impl FrameDecoder for EscapementDecoder {
    fn decode_frame(&mut self, frame: Value, recorded_t: Option<i64>, out: &mut Vec<Decoded>) {
        EscapementDecoder::decode_frame(self, frame, recorded_t, out);
    }

    fn bad_line(&self, raw: &str, message: &str) -> Decoded {
        self.bad(raw, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedupe_drops_seen_seqs_and_passes_unnumbered_frames() {
        let mut d = SeqDedupe::new();
        assert!(d.admit(Some(3)));
        assert!(!d.admit(Some(3)));
        assert!(!d.admit(Some(1)));
        assert!(d.admit(None));
        assert!(d.admit(Some(4)));
        assert_eq!(d.highest(), Some(4));
        assert_eq!(d.dropped(), 2);
        d.reset();
        assert!(d.admit(Some(0)));
    }
}
