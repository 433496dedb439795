//! The patchbay signal envelope.
//!
//! Every stream patchbay reads (an LLM token stream, an agent runtime's events, a MIDI
//! controller) is turned into [`Signal`]s: one JSON envelope with the field names of
//! sajou's `signal.schema.json` (`id`, `type`, `timestamp`, `source`, `correlationId`,
//! `metadata`, `payload`). This crate holds the envelope, the typed payloads of the
//! well-known types and their validation ([`well_known`]), the generic JSON decoder that
//! turns any envelope-ish JSON into a valid signal ([`normalize`]), dot paths into a signal
//! ([`path`]), text templates with `{path}` placeholders ([`template`]) and the id and clock
//! helpers. It does no I/O.

pub mod agent_table;
pub mod control;
pub mod decode;
mod id;
pub mod normalize;
pub mod partial_usage;
pub mod path;
pub mod payload;
mod prefetch;
mod small_string;
pub mod spent;
pub mod template;
pub mod well_known;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use id::next_id;
pub use payload::LazyObject;
pub use small_string::SmallString;

/// A JSON object, as used for payloads and metadata.
pub type Object = Map<String, Value>;

/// Removes a string field from `obj` and returns it, for a decoder that moves what it
/// understands out of an object and keeps the rest (as metadata or payload).
///
/// A `null` there is removed too and gives `None` (it says nothing); a field of another
/// type stays where it is, so that nothing is lost. The other fields keep their order.
///
/// ```
/// use patchbay_signal::{object, take_str};
/// let mut o = object! { "id" => "a", "n" => 1, "gone" => serde_json::Value::Null };
/// assert_eq!(take_str(&mut o, "id").as_deref(), Some("a"));
/// assert_eq!(take_str(&mut o, "n"), None);
/// assert_eq!(take_str(&mut o, "gone"), None);
/// assert_eq!(o, object! { "n" => 1 });
/// ```
pub fn take_str(obj: &mut Object, key: &str) -> Option<String> {
    match obj.get(key)? {
        Value::String(_) | Value::Null => match obj.shift_remove(key)? {
            Value::String(s) => Some(s),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a value carries anything: not null, not an empty string, object or array. A
/// decoder keeps a field it has no place for (as metadata) only when it does.
pub fn is_informative(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

/// A signal shared between branches of the graph: signals are immutable once emitted.
pub type SharedSignal = Arc<Signal>;

/// The signal envelope.
///
/// Serializes to the exact JSON shape of sajou's signal schema; `correlationId` and
/// `metadata` are omitted when absent.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct Signal {
    /// Unique per patchbay process and sortable by creation time (see [`next_id`]).
    pub id: SmallString,
    /// The signal type: a well-known type (`text_delta`, …), a MIDI or control type, or
    /// any other string (the protocol is open).
    #[serde(rename = "type")]
    pub kind: SmallString,
    /// Epoch milliseconds.
    pub timestamp: i64,
    /// The node that produced the signal, `<adapter>:<name>` by convention.
    pub source: SmallString,
    /// Groups the signals of one episode (a completion, a run, a session).
    #[serde(
        rename = "correlationId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub correlation_id: Option<SmallString>,
    /// Adapter extras that the payload schema does not allow. Read and changed as an
    /// [`Object`]; like the payload, metadata that arrived as compact JSON keeps its text
    /// until something reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<LazyObject>,
    /// The typed payload: its shape depends on `kind`. Read and changed as an [`Object`];
    /// a payload that arrived as compact JSON keeps its text until something reads it
    /// (see [`LazyObject`]).
    #[serde(default)]
    pub payload: LazyObject,
}

impl Clone for Signal {
    fn clone(&self) -> Self {
        Signal {
            id: self.id.clone(),
            kind: self.kind.clone(),
            timestamp: self.timestamp,
            source: self.source.clone(),
            correlation_id: self.correlation_id.clone(),
            metadata: self.metadata.as_ref().map(LazyObject::duplicate),
            payload: self.payload.duplicate(),
        }
    }
}

/// How many signals ahead of the one it works on a stage that takes a batch asks for the
/// memory of one (see [`Signal::prefetch`]): far enough for the fetch to arrive in time,
/// near enough that it is still in the cache when its turn comes.
pub const PREFETCH_AHEAD: usize = 3;

impl Signal {
    /// Asks the CPU to bring this signal's fields into its cache: a stage that takes a
    /// batch of signals made on another core calls it for the one [`PREFETCH_AHEAD`] places
    /// ahead of the one it works on, so that the fetch overlaps that work. A hint only.
    #[inline]
    pub fn prefetch(&self) {
        prefetch::lines(
            (self as *const Signal).cast(),
            std::mem::size_of::<Signal>(),
        );
    }

    /// Asks the CPU for the kept texts of this signal's payload and metadata (see
    /// [`prefetch`](Signal::prefetch)), for a stage that copies them.
    #[inline]
    pub fn prefetch_texts(&self) {
        for text in self
            .metadata
            .iter()
            .chain([&self.payload])
            .filter_map(LazyObject::raw_json)
        {
            prefetch::lines(text.as_ptr(), text.len());
        }
    }

    /// A new signal with a fresh id and the current wall-clock time.
    pub fn new(
        kind: impl Into<SmallString>,
        source: impl Into<SmallString>,
        payload: Object,
    ) -> Self {
        Signal::stamped(kind, source, payload, now_ms())
    }

    /// A new signal with a fresh id, stamped `timestamp` (ms): for a decoder that reads the
    /// clock once for what arrived together.
    pub fn stamped(
        kind: impl Into<SmallString>,
        source: impl Into<SmallString>,
        payload: Object,
        timestamp: i64,
    ) -> Self {
        Signal {
            id: next_id(),
            kind: kind.into(),
            timestamp,
            source: source.into(),
            correlation_id: None,
            metadata: None,
            payload: payload.into(),
        }
    }

    /// Sets the timestamp (builder style).
    pub fn at(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// Sets the correlation id (builder style).
    pub fn correlated(mut self, correlation_id: impl Into<SmallString>) -> Self {
        self.correlation_id = Some(correlation_id.into());
        self
    }

    /// Sets one metadata field (builder style).
    pub fn with_meta(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.metadata_mut().insert(key.into(), value.into());
        self
    }

    /// Sets the metadata; an empty object leaves the signal without any.
    pub fn set_metadata(&mut self, metadata: Object) {
        self.metadata = (!metadata.is_empty()).then(|| metadata.into());
    }

    /// The metadata object, created empty if absent.
    pub fn metadata_mut(&mut self) -> &mut Object {
        self.metadata.get_or_insert_with(LazyObject::new)
    }

    /// One metadata field, if present.
    pub fn meta(&self, key: &str) -> Option<&Value> {
        self.metadata.as_ref().and_then(|m| m.get(key))
    }

    /// Serializes the envelope to compact JSON (a payload or metadata kept as text is
    /// copied as it is).
    pub fn to_json(&self) -> String {
        // A Signal holds only strings, integers and JSON values: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The envelope as a JSON value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Current wall-clock time in epoch milliseconds.
pub fn now_ms() -> i64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Epoch milliseconds from a JSON number: an integer as it is, a float floored; `None`
/// for anything else.
pub fn millis_of(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite())
                .map(|f| f.floor() as i64)
        }),
        _ => None,
    }
}

/// An RFC 3339 time, `2026-11-28T06:34:13.289Z` (or with an offset, `+01:00`), as epoch
/// milliseconds; `None` for
/// anything else, or a time before 1970.
pub fn rfc3339_millis(text: &str) -> Option<i64> {
    let (date, rest) = text.split_once('T').or_else(|| text.split_once(' '))?;
    let (time, offset_min) = if let Some(t) = rest.strip_suffix('Z') {
        (t, 0)
    } else if let Some(i) = rest.rfind(['+', '-']) {
        let (t, off) = rest.split_at(i);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let (h, m) = off[1..].split_once(':').unwrap_or((&off[1..], "0"));
        let (h, m) = (number(h, 2)?, number(m, 2)?);
        (t, sign * (h * 60 + m))
    } else {
        (rest, 0)
    };
    let mut d = date.split('-');
    let (y, m, day) = (
        number(d.next()?, 4)?,
        number(d.next()?, 2)?,
        number(d.next()?, 2)?,
    );
    if d.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':');
    let (hh, mm, ss) = (
        number(t.next()?, 2)?,
        number(t.next()?, 2)?,
        number(t.next()?, 2)?,
    );
    if t.next().is_some() || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms = frac
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0, |acc, b| acc * 10 + i64::from(b - b'0'));
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = ((days * 24 + hh) * 60 + mm - offset_min) * 60_000 + ss * 1000 + ms;
    (ms >= 0).then_some(ms)
}

/// A run of 1 to `max` ASCII digits as a number.
fn number(text: &str, max: usize) -> Option<i64> {
    if text.is_empty() || text.len() > max || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Builds a JSON object from `key => value` pairs.
///
/// ```
/// let p = patchbay_signal::object! { "agentId" => "a", "content" => "hi" };
/// assert_eq!(p["content"], "hi");
/// ```
#[macro_export]
macro_rules! object {
    () => { $crate::Object::new() };
    ($($k:expr => $v:expr),+ $(,)?) => {{
        let mut m = $crate::Object::new();
        $( m.insert(::std::string::String::from($k), ::serde_json::Value::from($v)); )+
        m
    }};
}

/// Truncates `text` to at most `max` bytes on a character boundary, adding `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse() {
        assert_eq!(rfc3339_millis("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(
            rfc3339_millis("2026-11-28T06:34:13.289Z"),
            Some(1_795_847_653_289)
        );
        assert_eq!(
            rfc3339_millis("2026-11-28T07:34:13.289+01:00"),
            Some(1_795_847_653_289)
        );
        assert_eq!(
            rfc3339_millis("2026-11-28T06:34:13Z"),
            Some(1_795_847_653_000)
        );
        for bad in [
            "yesterday",
            "",
            "T",
            "2026-13-01T00:00:00Z",
            "2026-11-28T06:34:13.2é9Z",
            "1969-12-31T23:59:59Z",
            "+2026-11-28T06:34:13Z",
            "2026-11-28T06:34:13.289+ab:00",
        ] {
            assert_eq!(rfc3339_millis(bad), None, "{bad}");
        }
    }

    #[test]
    fn envelope_field_names_match_the_schema() {
        let s = Signal::new(
            "text_delta",
            "test:a",
            object! {"agentId" => "a", "content" => "x"},
        )
        .at(0)
        .correlated("c1");
        let v = s.to_value();
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "id",
                "type",
                "timestamp",
                "source",
                "correlationId",
                "payload"
            ]
        );
        patchbay_testkit::assert_schema_valid(&v);
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}
