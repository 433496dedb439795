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
use serde_json::value::RawValue;

use crate::id::next_id_at;
use crate::payload::{
    KeySet, canonical_object_len, canonical_object_len_visiting, is_canonical_object, plain_len,
};
use crate::well_known::{self, ErrorPayload, Fit, MetadataFields, Payload, Severity, TextRepair};
use crate::{LazyObject, Object, SharedSignal, Signal, SmallString, now_ms, truncate};

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
    source: SmallString,
    last_timestamp: i64,
    /// The clock reading made-up ids and timestamps get: per signal, or shared by a batch
    /// (see [`Normalizer::start_batch`]).
    clock: Option<i64>,
    /// A batch is being decoded: the reading is kept until it ends.
    batch: bool,
    /// Where a repair on the text writes the payload and metadata it makes, before they
    /// are copied into the signal (kept between signals: no allocation of its own).
    scratch: String,
}

impl Normalizer {
    /// A decoder whose signals, when they name no `source`, get `source`.
    pub fn new(source: impl Into<SmallString>) -> Self {
        Normalizer {
            source: source.into(),
            last_timestamp: 0,
            clock: None,
            batch: false,
            scratch: String::new(),
        }
    }

    /// Lets the signals decoded from now until [`end_batch`](Normalizer::end_batch) share
    /// one reading of the clock (taken when the first of them needs it) for the ids and
    /// timestamps they are given: for input that arrived at once (every frame one read
    /// from a socket gave, a POSTed array), so that the clock is read once per batch, not
    /// once per signal.
    pub fn start_batch(&mut self) {
        self.batch = true;
        self.clock = None;
    }

    /// Ends a batch: each signal gets its own reading of the clock again.
    pub fn end_batch(&mut self) {
        self.batch = false;
        self.clock = None;
    }

    /// Starts a new signal: it reads the clock afresh, unless a batch shares one reading.
    fn next_signal(&mut self) {
        if !self.batch {
            self.clock = None;
        }
    }

    /// The clock reading for the signal being made (see
    /// [`start_batch`](Normalizer::start_batch)).
    fn now(&mut self) -> i64 {
        *self.clock.get_or_insert_with(now_ms)
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
        if let Some(signal) = self.envelope_from_str(trimmed) {
            return Some(Decoded::Signal(signal));
        }
        Some(match serde_json::from_str::<Value>(trimmed) {
            Ok(value) => self.from_value(value),
            Err(err) => Decoded::BadInput(self.bad_input(trimmed, &format!("not JSON: {err}"))),
        })
    }

    /// Decodes `text` when it is a JSON envelope (an object with a string `type`), exactly
    /// as [`from_value`](Normalizer::from_value) would, without building the envelope's
    /// own object first (its fields go straight into the signal; only `metadata` and
    /// unknown fields become JSON values, and the `payload` keeps its text when it is
    /// compact JSON as `serde_json` writes it: see [`LazyObject`]). `None` for anything
    /// else (other JSON, or text that is not JSON): the caller takes the general path,
    /// which words the errors.
    pub fn envelope_from_str(&mut self, text: &str) -> Option<Signal> {
        self.envelope_text(text)
    }

    /// [`envelope_from_str`](Normalizer::envelope_from_str), the signal made in its `Arc`:
    /// for a caller that shares it (the sidecar's ingest), so that the signal is written
    /// once, where it stays, rather than moved into its `Arc`.
    pub fn shared_envelope_from_str(&mut self, text: &str) -> Option<SharedSignal> {
        self.envelope_text(text)
    }

    /// [`envelope_from_str`](Normalizer::envelope_from_str), made into `M`.
    fn envelope_text<M: Made>(&mut self, text: &str) -> Option<M> {
        if !text.trim_start().starts_with('{') {
            return None;
        }
        // Read in place (the fields are not small, and moving them costs).
        let mut fields = Fields::default();
        if !plain_envelope(text, &mut fields) {
            fields = serde_json::from_str::<TopLevel>(text).ok()?.0?;
        }
        Some(self.build(&mut fields))
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

    fn event(&mut self, payload: Object) -> Signal {
        self.next_signal();
        let now = self.now();
        Signal {
            id: next_id_at(now.max(0) as u64),
            kind: "event".into(),
            timestamp: now,
            source: self.source.clone(),
            correlation_id: None,
            metadata: None,
            payload: payload.into(),
        }
    }

    fn envelope(&mut self, mut obj: Object) -> Signal {
        // `shift_remove` keeps the order of the fields left over (they go to
        // `metadata.unknown` as the producer wrote them).
        let mut fields = Fields {
            kind: match obj.shift_remove("type") {
                Some(Value::String(s)) => s.into(),
                _ => SmallString::new(),
            },
            id: obj.shift_remove("id").map(Scalar::from),
            timestamp: obj.shift_remove("timestamp").map(Scalar::from),
            source: obj.shift_remove("source").map(Scalar::from),
            correlation_id: obj.shift_remove("correlationId").map(Scalar::from),
            metadata: obj.shift_remove("metadata").map(ObjectField::tree),
            payload: obj.shift_remove("payload").map(ObjectField::tree),
            rest: (!obj.is_empty()).then(|| Box::new(obj)),
            payload_fit: None,
            metadata_fields: None,
        };
        self.build(&mut fields)
    }

    /// The signal of an envelope's fields (taken out of `fields`): missing ones filled,
    /// misfits kept under `metadata.unknown`, the payload of a well-known type repaired.
    ///
    /// The fields are borrowed, not moved: with the payload's [`Fit`] they are several
    /// hundred bytes, and copying them on each call took a tenth of the decoder's time in
    /// the ingest bench.
    ///
    /// The signal is made into `M` (itself, or its `Arc`) once it is complete, and not
    /// moved after: a signal is 200 bytes, and each move a copy. Its timestamp becomes the
    /// decoder's last good one.
    fn build<M: Made>(&mut self, fields: &mut Fields<'_>) -> M {
        let kind = std::mem::take(&mut fields.kind);
        let id = fields.id.take();
        let timestamp = fields.timestamp.take();
        let source = fields.source.take();
        let correlation_id = fields.correlation_id.take();
        let metadata = fields.metadata.take();
        let payload = fields.payload.take();
        let rest = fields.rest.take();
        let payload_fit = fields.payload_fit.as_ref();
        let metadata_fields = fields.metadata_fields.take();
        // Fields that do not fit where they belong, kept under `metadata.unknown` (in the
        // order below, then the rest in the producer's).
        let mut unknown: Vec<(String, Value)> = Vec::new();
        // One reading of the clock for the id and the timestamp that are made up (or one
        // for the batch).
        self.next_signal();
        let mut now = || self.now();
        let id = match id {
            Some(Scalar::Str(s)) if !s.is_empty() => s,
            Some(Scalar::Int(n)) => n.to_string().into(),
            Some(other) => match Value::from(other) {
                Value::Number(n) => n.to_string().into(),
                other => {
                    unknown.push(("id".into(), other));
                    next_id_at(now().max(0) as u64)
                }
            },
            None => next_id_at(now().max(0) as u64),
        };
        let timestamp = match timestamp {
            Some(Scalar::Int(i)) => i,
            None => now(),
            Some(other) => match Value::from(other) {
                Value::Number(n) => n.as_f64().map(|f| f.floor() as i64).unwrap_or(0),
                other => {
                    unknown.push(("timestamp".into(), other));
                    now()
                }
            },
        };
        let source = match source {
            Some(Scalar::Str(s)) => s,
            Some(other) => {
                unknown.push(("source".into(), other.into()));
                self.source.clone()
            }
            None => self.source.clone(),
        };
        let correlation_id = match correlation_id {
            Some(Scalar::Str(s)) => Some(s),
            Some(Scalar::Int(n)) => Some(n.to_string().into()),
            None => None,
            Some(Scalar::Other(other)) => match *other {
                Value::Number(n) => Some(n.to_string().into()),
                Value::Null => None,
                other => {
                    unknown.push(("correlationId".into(), other));
                    None
                }
            },
        };
        // The usual envelope: its payload and metadata kept as text, and nothing for
        // `metadata.unknown`. Checked, and repaired, on the text before any of it is
        // copied: a repaired payload or metadata is written once.
        let texts = match (&payload, &metadata) {
            (Some(ObjectField::Text(raw)), None) => Some((*raw, None)),
            (Some(ObjectField::Text(raw)), Some(ObjectField::Text(m))) => Some((*raw, Some(*m))),
            _ => None,
        }
        .filter(|_| unknown.is_empty() && rest.is_none());
        let (kind, metadata, payload, left) = match texts {
            Some((raw, metadata)) => {
                let envelope = well_known::Envelope {
                    kind: &kind,
                    correlation_id: correlation_id.as_deref(),
                    source: &source,
                };
                // The metadata's top-level keys: those its pass saw, none when there is no
                // metadata (the repair starts from `{}`), any when no pass noted them.
                let keys = match (metadata, metadata_fields) {
                    (None, _) => KeySet::NONE,
                    (Some(_), Some(seen)) => seen.keys,
                    (Some(_), None) => KeySet::ANY,
                };
                let kept = |text: Option<&str>| {
                    text.map(|text| LazyObject::from_canonical_with_keys(text, keys))
                };
                let scratch = &mut self.scratch;
                match well_known::repair_on_text(
                    envelope,
                    payload_fit,
                    raw,
                    Some(metadata),
                    metadata_fields,
                    scratch,
                ) {
                    TextRepair::Fits => (
                        kind,
                        kept(metadata),
                        LazyObject::from_canonical(raw),
                        Left::Nothing,
                    ),
                    TextRepair::Repaired {
                        payload_len,
                        metadata: repaired,
                        invalid,
                    } => {
                        let kind = if invalid {
                            well_known::invalid_kind(&kind)
                        } else {
                            kind
                        };
                        // The repaired payload is in `scratch`, followed by the metadata
                        // when the repair changed it.
                        let (payload, changed) = scratch.split_at(payload_len);
                        let metadata = if repaired {
                            let keys = keys.with("extra").with("invalid");
                            Some(LazyObject::from_canonical_with_keys(changed, keys))
                        } else {
                            kept(metadata)
                        };
                        (
                            kind,
                            metadata,
                            LazyObject::from_canonical(payload),
                            Left::Nothing,
                        )
                    }
                    // Rare (see `TextRepair::Tree`): the repair on the signal, below.
                    TextRepair::Tree => (
                        kind,
                        kept(metadata),
                        LazyObject::from_canonical(raw),
                        Left::Tree,
                    ),
                }
            }
            None => {
                let (metadata, payload) = Self::trees(metadata, payload, rest, unknown);
                (kind, metadata, payload, Left::Fitted(payload_fit))
            }
        };
        let mut signal = Signal {
            id,
            kind,
            timestamp,
            source,
            correlation_id,
            metadata,
            payload,
        };
        match left {
            Left::Nothing => {}
            Left::Fitted(fit) => {
                well_known::repair_fitted(&mut signal, fit);
            }
            Left::Tree => {
                well_known::repair_on_tree(&mut signal);
            }
        }
        self.last_timestamp = signal.timestamp;
        M::made(signal)
    }

    /// An envelope's `metadata` and `payload` for the signal: kept as text, or trees, with
    /// the envelope's misfits (`unknown`, then the fields it does not know, `rest`) added
    /// to the metadata under `unknown`.
    fn trees(
        metadata: Option<ObjectField<'_>>,
        payload: Option<ObjectField<'_>>,
        rest: Option<Box<Object>>,
        mut unknown: Vec<(String, Value)>,
    ) -> (Option<LazyObject>, LazyObject) {
        let mut metadata = match metadata {
            Some(ObjectField::Text(m)) => Some(LazyObject::from_canonical(m)),
            None => None,
            Some(ObjectField::Tree(tree)) => match *tree {
                Value::Object(m) => Some(m.into()),
                Value::Null => None,
                other => {
                    unknown.push(("metadata".into(), other));
                    None
                }
            },
        };
        let payload = match payload {
            Some(ObjectField::Text(p)) => LazyObject::from_canonical(p),
            None => LazyObject::new(),
            Some(ObjectField::Tree(tree)) => match *tree {
                Value::Object(p) => p.into(),
                Value::Null => LazyObject::new(),
                other => {
                    let mut p = Object::new();
                    p.insert("value".into(), other);
                    p.into()
                }
            },
        };
        if let Some(rest) = rest {
            unknown.extend(*rest);
        }
        if !unknown.is_empty() {
            metadata.get_or_insert_with(LazyObject::new).insert(
                "unknown".into(),
                Value::Object(unknown.into_iter().collect()),
            );
        }
        (metadata, payload)
    }
}

/// The one-pass reading of [`Normalizer::envelope_from_str`], for the usual envelope: an
/// object written compactly whose fields are all envelope fields, each once, with plain
/// values (`type`, `id`, `source` and `correlationId` strings without escapes, an integer
/// `timestamp`, `payload` and `metadata` objects kept as text, see [`LazyObject`]), read
/// into `fields` (which start empty). `false` as soon as anything else is met, with
/// `fields` partly filled; the general reading then takes the text, and gives the same
/// fields for everything this one accepts.
fn plain_envelope<'a>(text: &'a str, fields: &mut Fields<'a>) -> bool {
    plain_envelope_fields(text, fields).is_some()
}

/// [`plain_envelope`], with `?` for "not the usual envelope".
fn plain_envelope_fields<'a>(text: &'a str, fields: &mut Fields<'a>) -> Option<()> {
    let text = text.trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'));
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b'{') {
        return None;
    }
    let mut kind = None;
    let mut seen = 0u8;
    let mut at = 1;
    loop {
        let (key, after) = plain_string(text, at)?;
        if bytes.get(after) != Some(&b':') {
            return None;
        }
        at = after + 1;
        let (bit, key) = match key {
            "type" => (1, Key::Type),
            "id" => (2, Key::Id),
            "timestamp" => (4, Key::Timestamp),
            "source" => (8, Key::Source),
            "correlationId" => (16, Key::CorrelationId),
            "metadata" => (32, Key::Metadata),
            "payload" => (64, Key::Payload),
            _ => return None,
        };
        if seen & bit != 0 {
            return None;
        }
        seen |= bit;
        match key {
            Key::Payload | Key::Metadata => {
                // A payload whose type was read already is checked against it in the same
                // pass (the usual order: `type` first). The check is made where it is
                // kept: it is large, and not moved.
                if matches!(key, Key::Payload) {
                    fields.payload_fit = kind.as_deref().and_then(Fit::of);
                }
                let rest = &text[at..];
                let len = match (&key, &mut fields.payload_fit) {
                    (Key::Payload, Some(fit)) => {
                        canonical_object_len_visiting(rest, |k, v| fit.field(rest, k, v))?
                    }
                    // The metadata's keys (the fields a repair would write among them), seen
                    // in the same pass.
                    (Key::Metadata, _) => {
                        let known = fields.metadata_fields.insert(MetadataFields::default());
                        canonical_object_len_visiting(rest, |k, _| known.saw(&rest.as_bytes()[k]))?
                    }
                    _ => canonical_object_len(rest)?,
                };
                let object = Some(ObjectField::Text(&text[at..at + len]));
                at += len;
                match key {
                    Key::Payload => fields.payload = object,
                    _ => fields.metadata = object,
                }
            }
            Key::Timestamp => {
                let (n, after) = plain_integer(bytes, at)?;
                fields.timestamp = Some(Scalar::Int(n));
                at = after;
            }
            _ => {
                let (value, after) = plain_string(text, at)?;
                at = after;
                // Read without escapes: written back between quotes as it is.
                let value = SmallString::json_plain(value);
                match key {
                    Key::Type => kind = Some(value),
                    Key::Id => fields.id = Some(Scalar::Str(value)),
                    Key::Source => fields.source = Some(Scalar::Str(value)),
                    _ => fields.correlation_id = Some(Scalar::Str(value)),
                }
            }
        }
        match bytes.get(at) {
            Some(b',') => at += 1,
            Some(b'}') if at + 1 == bytes.len() => break,
            _ => return None,
        }
    }
    fields.kind = kind?;
    Some(())
}

/// The string that starts at `at` (its opening quote), when it has no escape: its text
/// and the index after its closing quote.
#[inline(always)]
fn plain_string(text: &str, at: usize) -> Option<(&str, usize)> {
    let bytes = text.as_bytes();
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let from = at + 1;
    let to = from + plain_len(&bytes[from..]);
    // The quotes are ASCII: the span lies on character boundaries.
    (bytes.get(to) == Some(&b'"')).then(|| (&text[from..to], to + 1))
}

/// The integer that starts at `at`, written as `serde_json` reads it into an `i64` (no
/// leading zero, not `-0`, at most 18 digits): its value and the index after it.
fn plain_integer(bytes: &[u8], at: usize) -> Option<(i64, usize)> {
    let negative = bytes.get(at) == Some(&b'-');
    let from = at + usize::from(negative);
    let len = crate::payload::digits_len(&bytes[from..]);
    let digits = &bytes[from..from + len];
    if !(1..=18).contains(&len) || (digits[0] == b'0' && (len > 1 || negative)) {
        return None;
    }
    let value = digits
        .iter()
        .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
    Some((if negative { -value } else { value }, from + len))
}

/// What [`Normalizer::build`] makes a signal into.
trait Made {
    /// `signal`, made into this (moved once, into its place).
    fn made(signal: Signal) -> Self;
}

impl Made for Signal {
    fn made(signal: Signal) -> Self {
        signal
    }
}

impl Made for SharedSignal {
    fn made(signal: Signal) -> Self {
        SharedSignal::new(signal)
    }
}

/// The repair left to make once an envelope's signal is made.
enum Left<'f> {
    /// None: it was made on the text, or there was nothing to repair.
    Nothing,
    /// All of it, with the payload's [`Fit`] when the reader's pass made one.
    Fitted(Option<&'f Fit>),
    /// On the tree: the repair on the text found it cannot be made there.
    Tree,
}

/// An envelope's fields, taken from a JSON object.
#[derive(Default)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Fields<'a> {
    kind: SmallString,
    id: Option<Scalar>,
    timestamp: Option<Scalar>,
    source: Option<Scalar>,
    correlation_id: Option<Scalar>,
    metadata: Option<ObjectField<'a>>,
    payload: Option<ObjectField<'a>>,
    /// Every other field, in the producer's order (rare: boxed, as the other large
    /// parts, so that the fields of the usual envelope stay small to move).
    rest: Option<Box<Object>>,
    /// The check of a payload read as text against its well-known type (made in the pass
    /// that read it): nothing to repair when it fits, and what the repair needs when not.
    payload_fit: Option<Fit>,
    /// The top-level keys of a metadata read as text, seen in the pass that read it: those
    /// a repair writes, and all of them for the signal's metadata.
    metadata_fields: Option<MetadataFields>,
}

/// An envelope's `payload` or `metadata`: an object kept as its text, or any value as a
/// tree.
#[cfg_attr(test, derive(Debug))]
enum ObjectField<'a> {
    /// Canonical text (see [`LazyObject`]), in the envelope's text.
    Text(&'a str),
    Tree(Box<Value>),
}

impl ObjectField<'_> {
    fn tree(value: Value) -> Self {
        ObjectField::Tree(Box::new(value))
    }
}

/// An envelope's `id`, `timestamp`, `source` or `correlationId`: a string or an integer
/// (what the one-pass reading gives), or any other JSON value.
#[cfg_attr(test, derive(Debug, PartialEq))]
enum Scalar {
    Str(SmallString),
    Int(i64),
    Other(Box<Value>),
}

impl From<Value> for Scalar {
    fn from(value: Value) -> Self {
        match value {
            Value::String(s) => Scalar::Str(s.into()),
            Value::Number(n) if let Some(i) = n.as_i64() => Scalar::Int(i),
            other => Scalar::Other(Box::new(other)),
        }
    }
}

impl From<Scalar> for Value {
    fn from(scalar: Scalar) -> Self {
        match scalar {
            Scalar::Str(s) => Value::String(s.into()),
            Scalar::Int(i) => Value::from(i),
            Scalar::Other(value) => *value,
        }
    }
}

/// A top-level JSON object read as an envelope's fields: `None` when its `type` is not a
/// string (then it is not an envelope).
struct TopLevel<'a>(Option<Fields<'a>>);

/// An envelope field name, recognized without allocating.
enum Key {
    Type,
    Id,
    Timestamp,
    Source,
    CorrelationId,
    Metadata,
    Payload,
    Other(String),
}

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl serde::de::Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Key, E> {
                Ok(match key {
                    "type" => Key::Type,
                    "id" => Key::Id,
                    "timestamp" => Key::Timestamp,
                    "source" => Key::Source,
                    "correlationId" => Key::CorrelationId,
                    "metadata" => Key::Metadata,
                    "payload" => Key::Payload,
                    other => Key::Other(other.to_owned()),
                })
            }
            fn visit_string<E: serde::de::Error>(self, key: String) -> Result<Key, E> {
                match self.visit_str::<E>(&key)? {
                    Key::Other(_) => Ok(Key::Other(key)),
                    known => Ok(known),
                }
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> serde::Deserialize<'de> for TopLevel<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<TopLevel<'de>, D::Error> {
        struct TopVisitor;
        impl<'de> serde::de::Visitor<'de> for TopVisitor {
            type Value = TopLevel<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<TopLevel<'de>, A::Error> {
                // As when parsing into a `Value`: a repeated field's last value wins.
                let mut kind = None;
                let mut fields = Fields {
                    kind: SmallString::new(),
                    id: None,
                    timestamp: None,
                    source: None,
                    correlation_id: None,
                    metadata: None,
                    payload: None,
                    rest: None,
                    payload_fit: None,
                    metadata_fields: None,
                };
                while let Some(key) = map.next_key::<Key>()? {
                    if let Key::Payload | Key::Metadata = key {
                        // Kept as text when it can be (most pass unread); any other value
                        // is read as the general path reads it.
                        let raw: &'de RawValue = map.next_value()?;
                        let field = Some(if is_canonical_object(raw.get()) {
                            ObjectField::Text(raw.get())
                        } else {
                            ObjectField::tree(
                                serde_json::from_str(raw.get())
                                    .map_err(serde::de::Error::custom)?,
                            )
                        });
                        match key {
                            Key::Payload => fields.payload = field,
                            _ => fields.metadata = field,
                        }
                        continue;
                    }
                    let value: Value = map.next_value()?;
                    match key {
                        Key::Type => kind = Some(value),
                        Key::Id => fields.id = Some(value.into()),
                        Key::Timestamp => fields.timestamp = Some(value.into()),
                        Key::Source => fields.source = Some(value.into()),
                        Key::CorrelationId => fields.correlation_id = Some(value.into()),
                        Key::Payload | Key::Metadata => {}
                        Key::Other(name) => {
                            fields.rest.get_or_insert_default().insert(name, value);
                        }
                    }
                }
                Ok(TopLevel(match kind {
                    Some(Value::String(kind)) => Some(Fields {
                        kind: kind.into(),
                        ..fields
                    }),
                    _ => None,
                }))
            }
        }
        deserializer.deserialize_map(TopVisitor)
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

/// `text` parsed as JSON; text that is not JSON is reported in `out`, as the bad input
/// of `source` at `timestamp` that says why (see [`bad_input_signal`]).
pub fn json_or_report(
    text: &str,
    source: &str,
    timestamp: i64,
    out: &mut Vec<Decoded>,
) -> Option<Value> {
    match serde_json::from_str(text) {
        Ok(value) => Some(value),
        Err(err) => {
            let message = format!("not JSON: {err}");
            out.push(Decoded::BadInput(bad_input_signal(
                source, timestamp, text, &message,
            )));
            None
        }
    }
}

/// `value` as a JSON object; another value is reported in `out`, as the bad input of
/// `source` at `timestamp` that says it is not one (see [`bad_input_signal`]).
pub fn object_or_report(
    value: Value,
    source: &str,
    timestamp: i64,
    out: &mut Vec<Decoded>,
) -> Option<Object> {
    match value {
        Value::Object(object) => Some(object),
        other => {
            out.push(Decoded::BadInput(bad_input_signal(
                source,
                timestamp,
                &other.to_string(),
                "not a JSON object",
            )));
            None
        }
    }
}

/// In tests: the same variant, and the same text (a kept one) or tree.
#[cfg(test)]
impl PartialEq for ObjectField<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ObjectField::Text(a), ObjectField::Text(b)) => a == b,
            (ObjectField::Tree(a), ObjectField::Tree(b)) => a == b,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_one_pass_reading_agrees_with_the_general_one() {
        fn general(text: &str) -> Option<Fields<'_>> {
            serde_json::from_str::<TopLevel>(text)
                .ok()
                .and_then(|t| t.0)
        }
        // Read in one pass, as the general reading reads them.
        let mut metadata_seen = 0;
        for text in [
            r#"{"type":"text_delta","source":"loadgen","payload":{"agentId":"a","content":"token 1","index":1},"metadata":{"t0":17}}"#,
            r#"{"id":"01J","type":"x.y","timestamp":0,"source":"s","correlationId":"c","metadata":{},"payload":{"a":[1,{"b":null}],"c":"é\n"}}"#,
            r#"{"type":"x","timestamp":-1700000000000}"#,
            r#"{"type":"x","timestamp":999999999999999999}"#,
            "  {\"type\":\"x\",\"payload\":{\"a\":1}}\n",
            r#"{"payload":{"a":1},"type":"ünïcode"}"#,
            r#"{"type":"x","metadata":{"t0":1,"extra":{"invalid":2},"invalid":"y"},"payload":{}}"#,
            r#"{"type":"x","metadata":{"a":{"extra":1},"b":[{"invalid":2}]}}"#,
        ] {
            let mut plain = Fields::default();
            assert!(plain_envelope(text, &mut plain), "{text}");
            // A verdict on the payload that the general reading leaves to `repair`, found
            // in the pass for a valid well-known payload after its type (the first text).
            let valid_well_known = text.starts_with(r#"{"type":"text_delta""#);
            assert_eq!(
                plain.payload_fit.as_ref().is_some_and(Fit::fits),
                valid_well_known,
                "{text}"
            );
            plain.payload_fit = None;
            // What the pass saw of the metadata's fields, which the repair would look for
            // in its text otherwise.
            if let Some(seen) = plain.metadata_fields.take() {
                metadata_seen += 1;
                let Some(ObjectField::Text(m)) = plain.metadata else {
                    panic!("fields seen of a metadata not kept as text: {text}");
                };
                assert_eq!(
                    (seen.extra, seen.invalid),
                    (
                        crate::payload::field_of_canonical(m, "extra").is_some(),
                        crate::payload::field_of_canonical(m, "invalid").is_some(),
                    ),
                    "{text}"
                );
                assert!(
                    crate::payload::canonical_fields(m, |key, _| seen
                        .keys
                        .may_have(key.as_bytes())),
                    "every key seen: {text}"
                );
            }
            assert_eq!(Some(plain), general(text), "{text}");
        }
        assert_eq!(
            metadata_seen, 4,
            "every metadata kept as text has its fields seen"
        );
        // Left to the general reading (which reads each, or refuses it).
        for text in [
            r#"{"type":"x","extra":1}"#,
            r#"{"type":"x","type":"y"}"#,
            r#"{"type":"x\ty"}"#,
            r#"{"\u0074ype":"x"}"#,
            r#"{"type": "x"}"#,
            r#"{"type":"x","id":7}"#,
            r#"{"type":"x","timestamp":1.5}"#,
            r#"{"type":"x","timestamp":1e3}"#,
            r#"{"type":"x","timestamp":012}"#,
            r#"{"type":"x","timestamp":-0}"#,
            r#"{"type":"x","timestamp":1234567890123456789}"#,
            r#"{"type":"x","correlationId":null}"#,
            r#"{"type":"x","payload":{"a": 1}}"#,
            r#"{"type":"x","payload":[1]}"#,
            r#"{"type":"x","metadata":null}"#,
            r#"{"type":"x"} {}"#,
            r#"{"type":"x"}}"#,
            r#"{"type":"x","#,
            r#"{"source":"s"}"#,
            r#"{"type":7}"#,
            "{}",
            "{",
            "",
        ] {
            assert!(!plain_envelope(text, &mut Fields::default()), "{text}");
        }
    }

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
    fn a_batch_shares_one_clock_reading_and_ids_stay_unique() {
        let mut n = n();
        n.start_batch();
        let texts = [
            r#"{"type":"a"}"#,
            r#"{"type":"b","payload":{"k":1}}"#,
            r#"{"not":"an envelope"}"#,
            r#"{"type":"c","timestamp":7}"#,
        ];
        let signals: Vec<Signal> = texts
            .iter()
            .map(|t| n.decode_text(t).unwrap().into_signal())
            .collect();
        n.end_batch();
        let made_up = [&signals[0], &signals[1], &signals[2]];
        assert!(made_up.iter().all(|s| s.timestamp == signals[0].timestamp));
        assert_eq!(signals[3].timestamp, 7);
        let ids: Vec<&str> = signals.iter().map(|s| s.id.as_str()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        // Out of a batch each signal reads the clock: never earlier than the batch's.
        let later = n.decode_text(r#"{"type":"d"}"#).unwrap().into_signal();
        assert!(later.timestamp >= signals[0].timestamp);
    }

    #[test]
    fn a_shared_envelope_is_the_envelope_in_its_arc() {
        for text in [
            r#"{"id":"a","type":"text_delta","timestamp":5,"source":"s","payload":{"agentId":"x","content":"y"},"metadata":{"t0":1}}"#,
            r#"{"id":"b","type":"text_delta","timestamp":5,"source":"s","payload":{"agentId":"x","text":"y","seq":1}}"#,
            r#"{"id":"c","type":"loadgen.tick","timestamp":5,"payload":{"n": 1},"extra":true}"#,
        ] {
            let (mut plain, mut shared) = (n(), n());
            let signal = plain.envelope_from_str(text).unwrap();
            assert_eq!(
                *shared.shared_envelope_from_str(text).unwrap(),
                signal,
                "{text}"
            );
            assert_eq!(shared.last_timestamp(), plain.last_timestamp());
        }
        assert!(n().shared_envelope_from_str("[1]").is_none());
    }

    #[test]
    fn the_envelope_fast_path_decodes_as_the_tree_does() {
        let cases = [
            r#"{"type":"x.y","id":"a","timestamp":5,"payload":{"z":1,"a":[1,{"b":null}]}}"#,
            r#"{"payload":{"content":"hi","index":3},"metadata":{"t0":1},"source":"s","type":"text_delta","timestamp":7,"id":"i"}"#,
            r#"{"type":"x","id":12,"timestamp":1.5,"correlationId":3,"zeta":1,"alpha":2,"metadata":{"k":1}}"#,
            r#"{"type":"x","id":"i","timestamp":"soon","source":4,"correlationId":[1],"metadata":7,"payload":"bare","kind":"answer"}"#,
            r#"{"type":"x","id":"i","timestamp":1,"extra":1,"extra":2,"payload":{"a":1},"payload":{"b":2}}"#,
            r#"{"t\u0079pe":"esc","id":"i","timestamp":1,"p\u0061yload":{"k\"ey":"v\n"}}"#,
            r#"{"type":"x","id":"","timestamp":2,"correlationId":null,"metadata":null,"payload":null}"#,
            // Well-known payloads after their type (checked in the reading pass): valid,
            // and each way of not being so (repaired alike).
            r#"{"type":"text_delta","id":"i","timestamp":1,"payload":{"agentId":"a","content":"hi","index":3}}"#,
            r#"{"type":"text_delta","id":"i","timestamp":1,"payload":{"content":"hi","index":3}}"#,
            r#"{"type":"text_delta","id":"i","timestamp":1,"payload":{"agentId":"a","content":"hi","index":-3,"x":{"y":1}}}"#,
            r#"{"type":"text_delta","id":"i","timestamp":1,"payload":{"agentId":"a","content":7,"contentType":"code"}}"#,
            r#"{"type":"text_delta","id":"i","timestamp":1,"payload":{"agentId":"a","content":"c","contentType":"prose"}}"#,
            r#"{"type":"agent_state_change","id":"i","timestamp":1,"payload":{"agentId":"a","from":"idle","to":"acting"}}"#,
            r#"{"type":"agent_state_change","id":"i","timestamp":1,"payload":{"agentId":"a","from":"idle","to":"asleep"}}"#,
            r#"{"type":"token_usage","id":"i","timestamp":1,"payload":{"agentId":"a","promptTokens":1.5,"completionTokens":2,"cost":0.25}}"#,
            r#"{"type":"error","id":"i","timestamp":1,"correlationId":"c","payload":{}}"#,
            // Repaired on the text with a check made after the pass (the payload came
            // first), on the tree (the metadata has `extra` already), and with fields
            // for `metadata.unknown`.
            r#"{"payload":{"agentId":"a","text":"hi"},"type":"text_delta","id":"i","timestamp":1,"metadata":{"t0":3}}"#,
            r#"{"type":"text_delta","id":"i","timestamp":1,"payload":{"agentId":"a","content":"hi","seq":1},"metadata":{"extra":{"y":2},"t0":3}}"#,
            r#"{"type":"text_delta","id":"i","timestamp":1,"zeta":1,"payload":{"agentId":"a","content":"hi","seq":1},"metadata":{"t0":3}}"#,
            // The metadata's fields that the repair writes, seen in the reading pass: at
            // the top level (after another field, or before the payload), and only nested.
            r#"{"type":"text_delta","id":"i","timestamp":1,"payload":{"agentId":"a","text":"hi"},"metadata":{"t0":3,"invalid":"x"}}"#,
            r#"{"type":"text_delta","id":"i","timestamp":1,"metadata":{"t0":3,"extra":1},"payload":{"agentId":"a","content":"hi","seq":1}}"#,
            r#"{"type":"text_delta","id":"i","timestamp":1,"payload":{"agentId":"a","text":"hi"},"metadata":{"t0":{"extra":1,"invalid":2},"a":[{"extra":3}]}}"#,
            // A metadata with its own `seq` (which the sidecar looks for), at the top level
            // or nested, kept, repaired, or absent before the repair.
            r#"{"type":"text_delta","id":"i","timestamp":1,"payload":{"agentId":"a","content":"hi","index":1},"metadata":{"t0":3,"seq":9}}"#,
            r#"{"type":"text_delta","id":"i","timestamp":1,"payload":{"agentId":"a","text":"hi"},"metadata":{"seq":9,"t0":{"seq":1}}}"#,
            r#"{"type":"text_delta","id":"i","timestamp":1,"payload":{"agentId":"a","content":"hi","seq":1},"metadata":{"seq":4}}"#,
            r#"{"type":"text_delta","id":"i","timestamp":1,"payload":{"agentId":"a","content":"hi","seq":1}}"#,
            r#"{"type":"x.y","id":"i","timestamp":1,"payload":{"a":1},"metadata":{"n":{"seq":2},"tags":[1]}}"#,
        ];
        for text in cases {
            let slow = n()
                .from_value(serde_json::from_str(text).unwrap())
                .into_signal();
            let mut fast_normalizer = n();
            let fast = fast_normalizer.envelope_from_str(text).unwrap();
            let (mut slow, mut fast) = (slow, fast);
            if text.contains(r#""id":"""#) {
                // A fresh id each time.
                slow.id = SmallString::new();
                fast.id = SmallString::new();
            }
            if text.contains(r#""timestamp":"soon""#) {
                // The time of decoding, read twice: a millisecond may pass between.
                slow.timestamp = fast.timestamp;
            }
            assert_eq!(fast, slow, "{text}");
            assert_eq!(fast.to_json(), slow.to_json(), "{text}: key order");
            assert_eq!(fast_normalizer.last_timestamp(), fast.timestamp);
            // A question about one field of a metadata kept as text has the text's answer
            // (most are answered from the keys its pass noted, without the text).
            if let Some(raw) = fast.metadata.as_ref().and_then(LazyObject::raw_json) {
                let mut keys: Vec<String> = ["seq", "extra", "invalid", "t0", "absent"]
                    .map(String::from)
                    .into();
                crate::payload::canonical_fields(raw, |key, _| {
                    keys.push(key.to_owned());
                    true
                });
                for key in &keys {
                    let answer = crate::payload::field_of_canonical(raw, key);
                    let metadata = fast.metadata.as_ref().unwrap();
                    assert_eq!(metadata.raw_field(key), Some(answer), "{text}: {key}");
                }
            }
        }
        // Not envelopes: the general path decides.
        for text in [
            r#"{"kind":"control","op":"pause"}"#,
            r#"{"type":5}"#,
            r#"{"type":"a","type":null}"#,
            r#"[1]"#,
            r#"{"type":"a""#,
            r#"{"type":"a"} x"#,
            "nope",
        ] {
            assert!(n().envelope_from_str(text).is_none(), "{text}");
        }
    }

    #[test]
    fn unknown_envelope_fields_keep_their_order() {
        let s = n()
            .decode_text(r#"{"type":"x","zeta":1,"id":{},"alpha":2,"mid":3}"#)
            .unwrap()
            .into_signal();
        let unknown = s.meta("unknown").unwrap().as_object().unwrap();
        assert_eq!(
            unknown.keys().collect::<Vec<_>>(),
            ["id", "zeta", "alpha", "mid"]
        );
        let slow = n()
            .from_value(json!({"type":"x","zeta":1,"id":{},"alpha":2,"mid":3}))
            .into_signal();
        assert_eq!(slow.meta("unknown"), s.meta("unknown"));
    }

    #[test]
    fn a_compact_payload_is_kept_as_text_until_read() {
        let payload = r#"{"agentId":"a","content":"hi \"x\"","index":3}"#;
        let text = format!(r#"{{"type":"text_delta","timestamp":1,"payload":{payload}}}"#);
        let s = n().decode_text(&text).unwrap().into_signal();
        assert_eq!(s.payload.raw_json(), Some(payload));
        assert!(
            !s.payload.is_parsed(),
            "a valid well-known payload is checked on its text"
        );
        let tree = n()
            .from_value(serde_json::from_str(&text).unwrap())
            .into_signal();
        assert_eq!(s.payload, tree.payload);
        assert!(s.to_json().ends_with(&format!(r#","payload":{payload}}}"#)));
        assert_eq!(
            s.to_json().replace(s.id.as_str(), ""),
            tree.to_json().replace(tree.id.as_str(), "")
        );

        // An invalid one is repaired on its text too.
        let s = n()
            .decode_text(r#"{"type":"text_delta","payload":{"content":"x","foo":1}}"#)
            .unwrap()
            .into_signal();
        assert_eq!(
            s.payload.raw_json(),
            Some(r#"{"content":"x","agentId":"test:n"}"#)
        );
        assert_eq!(s.payload["agentId"], "test:n");
        assert_eq!(s.meta("extra").unwrap()["foo"], 1);
        // Text that serde_json would write otherwise becomes a tree at once.
        for text in [
            r#"{"type":"x","payload":{"a": 1}}"#,
            r#"{"type":"x","payload":{"a":1,"a":2}}"#,
            r#"{"type":"x","payload":{"a":"\u0041"}}"#,
        ] {
            let s = n().decode_text(text).unwrap().into_signal();
            assert_eq!(s.payload.raw_json(), None, "{text}");
            let tree = n()
                .from_value(serde_json::from_str(text).unwrap())
                .into_signal();
            assert_eq!(s.payload, tree.payload, "{text}");
        }
    }

    #[test]
    fn a_payload_and_its_metadata_are_kept_as_text_in_either_order() {
        let payload = r#"{"agentId":"a","content":"hi","index":3}"#;
        let metadata = r#"{"t0":17}"#;
        let between = format!(r#""source":"{}""#, "s".repeat(100));
        for text in [
            format!(r#"{{"type":"text_delta","payload":{payload},"metadata":{metadata}}}"#),
            format!(r#"{{"type":"text_delta","metadata":{metadata},"payload":{payload}}}"#),
            format!(r#"{{"type":"x","payload":{payload},{between},"metadata":{metadata}}}"#),
            format!(r#"{{"type":"x","metadata":{metadata},{between},"payload":{payload}}}"#),
        ] {
            let s = n().decode_text(&text).unwrap().into_signal();
            assert_eq!(s.payload.raw_json(), Some(payload), "{text}");
            let kept = s.metadata.as_ref().and_then(LazyObject::raw_json);
            assert_eq!(kept, Some(metadata), "{text}");
            // Each changes alone.
            let mut changed = s.clone();
            changed.payload.insert("index".into(), 4.into());
            assert_eq!(changed.metadata.as_ref().unwrap()["t0"], 17);
            assert_eq!(s.payload["index"], 3);
        }
        // A repair that changes both keeps both as text.
        let s = n()
            .decode_text(
                r#"{"type":"text_delta","payload":{"content":"x","foo":1},"metadata":{"t0":1}}"#,
            )
            .unwrap()
            .into_signal();
        assert_eq!(
            s.payload.raw_json(),
            Some(r#"{"content":"x","agentId":"test:n"}"#)
        );
        let kept = s.metadata.as_ref().and_then(LazyObject::raw_json);
        assert_eq!(kept, Some(r#"{"t0":1,"extra":{"foo":1}}"#));
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
