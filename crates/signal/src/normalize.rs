//! The generic JSON decoder ("sajou / generic JSON"): WebSocket frames, SSE `data:` lines,
//! NDJSON lines and HTTP bodies become valid signals.
//!
//! - A JSON object with a string `type` is an envelope: missing `id`, `timestamp` and
//!   `source` are filled (a `timestamp` of 0 is kept: absent is not falsy).
//! - Any other JSON object becomes `type: "event"` with the object as payload; any other
//!   JSON value becomes `type: "event"` with payload `{"value": …}`.
//! - Envelope fields the schema does not know, or of the wrong type, are kept under
//!   `metadata.unknown`; payloads of well-known types are repaired by
//!   [`well_known::repair`].
//! - Text that is not JSON becomes one `error` signal `{message, severity: "warning",
//!   code: "bad_frame"}` with the raw text (truncated) in `metadata.raw`, stamped with the
//!   timestamp of the last good signal from the same decoder (0 if none), so it never moves
//!   an event clock.

use serde_json::Value;

use crate::well_known::{self, ErrorPayload, Payload, Severity};
use crate::{Object, Signal, next_id, now_ms, truncate};

/// How much of a bad frame is kept in `metadata.raw`.
pub const RAW_KEEP: usize = 512;

/// The outcome of decoding one frame or line.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A signal (possibly repaired to be valid).
    Signal(Signal),
    /// The input was unusable: this is the `error` signal reporting it. Callers count it as
    /// bad input.
    BadInput(Signal),
}

impl Decoded {
    /// The signal, whether decoded or reporting bad input.
    pub fn into_signal(self) -> Signal {
        match self {
            Decoded::Signal(s) | Decoded::BadInput(s) => s,
        }
    }

    /// Whether this reports bad input.
    pub fn is_bad(&self) -> bool {
        matches!(self, Decoded::BadInput(_))
    }
}

/// A generic JSON decoder for one source.
#[derive(Debug, Clone)]
pub struct Normalizer {
    source: String,
    last_timestamp: i64,
}

impl Normalizer {
    /// A decoder whose signals, when they name no `source`, get `source`.
    pub fn new(source: impl Into<String>) -> Self {
        Normalizer {
            source: source.into(),
            last_timestamp: 0,
        }
    }

    /// The source name given to signals that have none.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Decodes one line or frame of text. Blank text gives `None`.
    pub fn decode_text(&mut self, text: &str) -> Option<Decoded> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return None;
        }
        Some(match serde_json::from_str::<Value>(trimmed) {
            Ok(value) => self.from_value(value),
            Err(err) => Decoded::BadInput(self.bad_input(trimmed, &format!("not JSON: {err}"))),
        })
    }

    /// Normalizes one JSON value to a valid signal: an envelope, an event, or bad input
    /// (an object whose `type` is not a string: see [`type_error`]).
    pub fn from_value(&mut self, value: Value) -> Decoded {
        let signal = match value {
            Value::Object(obj) if obj.get("type").is_some_and(Value::is_string) => {
                self.envelope(obj)
            }
            Value::Object(obj) => {
                if let Some(why) = type_error(&obj) {
                    let raw = Value::Object(obj).to_string();
                    return Decoded::BadInput(self.bad_input(&raw, &why));
                }
                self.event(obj)
            }
            other => {
                let mut payload = Object::new();
                payload.insert("value".into(), other);
                self.event(payload)
            }
        };
        self.last_timestamp = signal.timestamp;
        Decoded::Signal(signal)
    }

    /// The `error` signal reporting unusable input `raw` (kept truncated in
    /// `metadata.raw`).
    pub fn bad_input(&self, raw: &str, message: &str) -> Signal {
        bad_input_signal(&self.source, self.last_timestamp, raw, message)
    }

    /// The timestamp of the last good signal (0 if none).
    pub fn last_timestamp(&self) -> i64 {
        self.last_timestamp
    }

    fn event(&self, payload: Object) -> Signal {
        Signal {
            id: next_id(),
            kind: "event".into(),
            timestamp: now_ms(),
            source: self.source.clone(),
            correlation_id: None,
            metadata: None,
            payload,
        }
    }

    fn envelope(&self, mut obj: Object) -> Signal {
        let mut unknown = Object::new();
        let kind = match obj.remove("type") {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        let id = match obj.remove("id") {
            Some(Value::String(s)) if !s.is_empty() => s,
            Some(Value::Number(n)) => n.to_string(),
            Some(other) => {
                unknown.insert("id".into(), other);
                next_id()
            }
            None => next_id(),
        };
        let timestamp = match obj.remove("timestamp") {
            Some(Value::Number(n)) => match n.as_i64() {
                Some(i) => i,
                None => n.as_f64().map(|f| f.floor() as i64).unwrap_or(0),
            },
            Some(other) => {
                unknown.insert("timestamp".into(), other);
                now_ms()
            }
            None => now_ms(),
        };
        let source = match obj.remove("source") {
            Some(Value::String(s)) => s,
            Some(other) => {
                unknown.insert("source".into(), other);
                self.source.clone()
            }
            None => self.source.clone(),
        };
        let correlation_id = match obj.remove("correlationId") {
            Some(Value::String(s)) => Some(s),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(Value::Null) | None => None,
            Some(other) => {
                unknown.insert("correlationId".into(), other);
                None
            }
        };
        let mut metadata = match obj.remove("metadata") {
            Some(Value::Object(m)) => Some(m),
            Some(Value::Null) | None => None,
            Some(other) => {
                unknown.insert("metadata".into(), other);
                None
            }
        };
        let payload = match obj.remove("payload") {
            Some(Value::Object(p)) => p,
            None | Some(Value::Null) => Object::new(),
            Some(other) => {
                let mut p = Object::new();
                p.insert("value".into(), other);
                p
            }
        };
        unknown.extend(obj);
        if !unknown.is_empty() {
            metadata
                .get_or_insert_with(Object::new)
                .insert("unknown".into(), Value::Object(unknown));
        }
        let mut signal = Signal {
            id,
            kind,
            timestamp,
            source,
            correlation_id,
            metadata,
            payload,
        };
        well_known::repair(&mut signal);
        signal
    }
}

/// Why an object is neither an envelope nor an event: it has a `type` that is not a
/// string. (An object without `type` is an event; the same rule holds on every path a
/// signal enters by, a file, standard input, a WebSocket or a POST.)
pub fn type_error(object: &Object) -> Option<String> {
    let kind = object.get("type")?;
    let what = match kind {
        Value::String(_) => return None,
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    Some(format!("`type` must be a string, got {what}"))
}

/// An `error` signal `{message, severity: "warning", code: "bad_frame"}` from `source` at
/// `timestamp`, with `raw` (truncated to [`RAW_KEEP`] bytes) in `metadata.raw`.
pub fn bad_input_signal(source: &str, timestamp: i64, raw: &str, message: &str) -> Signal {
    ErrorPayload {
        agent_id: None,
        code: Some("bad_frame".into()),
        message: message.to_owned(),
        severity: Severity::Warning,
    }
    .into_signal(source)
    .at(timestamp)
    .with_meta("raw", truncate(raw, RAW_KEEP))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn n() -> Normalizer {
        Normalizer::new("test:n")
    }

    #[test]
    fn envelope_is_kept_and_filled() {
        let s = n()
            .decode_text(r#"{"type":"x.y","timestamp":0,"payload":{"a":1}}"#)
            .unwrap()
            .into_signal();
        assert_eq!(s.kind, "x.y");
        assert_eq!(s.timestamp, 0, "timestamp 0 is kept");
        assert_eq!(s.source, "test:n");
        assert_eq!(s.id.len(), 26);
        assert_eq!(s.payload["a"], 1);
    }

    #[test]
    fn missing_timestamp_is_filled_with_now() {
        let s = n().from_value(json!({"type": "x"})).into_signal();
        assert!(s.timestamp > 1_600_000_000_000);
    }

    #[test]
    fn object_without_type_is_an_event_and_a_type_that_is_no_string_is_bad_input() {
        let s = n().from_value(json!({"hello": "world"})).into_signal();
        assert_eq!(s.kind, "event");
        assert_eq!(s.payload["hello"], "world");
        let bad = n().from_value(json!({"hello": "world", "type": 5}));
        assert!(bad.is_bad());
        let s = bad.into_signal();
        assert_eq!(s.kind, "error");
        assert_eq!(
            s.payload["message"],
            "`type` must be a string, got a number"
        );
    }

    #[test]
    fn scalar_is_an_event_with_value() {
        let s = n().from_value(json!([1, 2])).into_signal();
        assert_eq!(s.kind, "event");
        assert_eq!(s.payload["value"], json!([1, 2]));
    }

    #[test]
    fn unknown_envelope_fields_go_to_metadata_unknown() {
        let s = n()
            .from_value(json!({"type": "x", "extra": true, "metadata": {"k": 1}}))
            .into_signal();
        assert_eq!(s.meta("unknown").unwrap()["extra"], true);
        assert_eq!(s.meta("k").unwrap(), 1);
        patchbay_testkit::assert_schema_valid(&s.to_value());
    }

    #[test]
    fn bad_text_is_an_error_signal_at_last_good_timestamp() {
        let mut d = n();
        let bad = d.decode_text("{nope").unwrap();
        assert!(bad.is_bad());
        assert_eq!(bad.clone().into_signal().timestamp, 0);
        d.decode_text(r#"{"type":"x","timestamp":1234}"#);
        let bad = d.decode_text("garbage").unwrap().into_signal();
        assert_eq!(bad.kind, "error");
        assert_eq!(bad.timestamp, 1234);
        assert_eq!(bad.payload["code"], "bad_frame");
        assert_eq!(bad.payload["severity"], "warning");
        assert_eq!(bad.meta("raw").unwrap(), "garbage");
        patchbay_testkit::assert_schema_valid(&bad.to_value());
    }

    #[test]
    fn blank_lines_are_skipped() {
        assert!(n().decode_text("  \r").is_none());
    }

    #[test]
    fn well_known_payloads_are_repaired() {
        let s = n()
            .from_value(json!({"type": "text_delta", "payload": {"content": "x", "foo": 1}}))
            .into_signal();
        assert_eq!(s.kind, "text_delta");
        assert_eq!(s.payload["agentId"], "test:n");
        assert_eq!(s.meta("extra").unwrap()["foo"], 1);
        patchbay_testkit::assert_schema_valid(&s.to_value());
    }
}
