//! Dot paths into a signal: `type`, `source`, `payload.note`, `metadata.seq`, …
//!
//! A leading `signal.` is ignored, and a first segment that is not an envelope field
//! (`id`, `type`, `timestamp`, `source`, `correlationId`, `metadata`, `payload`) is looked
//! up in `payload`, so sajou's `content` and `signal.content` both mean `payload.content`.
//! A segment that is a number indexes an array.

use std::fmt;

use serde_json::Value;

use crate::{Object, Signal};

/// The envelope field a path starts at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    /// `id`
    Id,
    /// `type`
    Type,
    /// `timestamp`
    Timestamp,
    /// `source`
    Source,
    /// `correlationId`
    CorrelationId,
    /// `metadata`
    Metadata,
    /// `payload`
    Payload,
}

/// A parsed dot path.
#[derive(Clone, PartialEq, Eq)]
pub struct Path {
    text: String,
    root: Root,
    segments: Vec<String>,
}

/// Why a path cannot be parsed or a value cannot be written at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path text is empty or has an empty segment.
    #[error("path `{0}` has an empty segment")]
    Empty(String),
    /// A value of the wrong type for an envelope field.
    #[error("`{path}` must be {expected}")]
    WrongType {
        /// The path.
        path: String,
        /// What the field needs.
        expected: &'static str,
    },
    /// An intermediate value is not an object or array.
    #[error("cannot write `{0}`: a value on the way is not an object")]
    NotContainer(String),
}

/// A value found at a path: envelope fields are borrowed without building JSON values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Found<'a> {
    /// A string envelope field (`id`, `type`, `source`, `correlationId`).
    Str(&'a str),
    /// `timestamp`.
    Int(i64),
    /// `metadata` or `payload` themselves.
    Map(&'a Object),
    /// A JSON value inside `metadata` or `payload`.
    Json(&'a Value),
}

impl Found<'_> {
    /// The value as an owned JSON value.
    pub fn to_value(&self) -> Value {
        match *self {
            Found::Str(s) => Value::String(s.to_owned()),
            Found::Int(i) => Value::from(i),
            Found::Map(m) => Value::Object(m.clone()),
            Found::Json(v) => v.clone(),
        }
    }

    /// The value as a string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match *self {
            Found::Str(s) => Some(s),
            Found::Json(Value::String(s)) => Some(s),
            _ => None,
        }
    }

    /// The value as a number, if it is one.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Found::Int(i) => Some(i as f64),
            Found::Json(Value::Number(n)) => n.as_f64(),
            _ => None,
        }
    }

    /// Whether the value is JSON null.
    pub fn is_null(&self) -> bool {
        matches!(self, Found::Json(Value::Null))
    }

    /// JSON equality with `other` (`"5"` is not `5`; `1` equals `1.0`).
    pub fn equals(&self, other: &Value) -> bool {
        match (*self, other) {
            (Found::Str(s), Value::String(o)) => s == o,
            (Found::Int(i), Value::Number(n)) => n.as_f64() == Some(i as f64),
            (Found::Map(m), Value::Object(o)) => json_eq_obj(m, o),
            (Found::Json(v), o) => json_eq(v, o),
            _ => false,
        }
    }
}

/// JSON equality where numbers compare by value (`1 == 1.0`).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || (x.as_f64().is_some() && x.as_f64() == y.as_f64())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => json_eq_obj(x, y),
        _ => a == b,
    }
}

fn json_eq_obj(x: &Object, y: &Object) -> bool {
    x.len() == y.len()
        && x.iter()
            .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
}

impl Path {
    /// Parses a dot path.
    pub fn parse(text: &str) -> Result<Path, PathError> {
        let mut parts: Vec<&str> = text.split('.').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(PathError::Empty(text.to_owned()));
        }
        if parts.len() > 1 && parts[0] == "signal" {
            parts.remove(0);
        }
        let root = match parts[0] {
            "id" => Some(Root::Id),
            "type" => Some(Root::Type),
            "timestamp" => Some(Root::Timestamp),
            "source" => Some(Root::Source),
            "correlationId" => Some(Root::CorrelationId),
            "metadata" => Some(Root::Metadata),
            "payload" => Some(Root::Payload),
            _ => None,
        };
        let (root, rest) = match root {
            Some(r) => (r, &parts[1..]),
            None => (Root::Payload, &parts[..]),
        };
        Ok(Path {
            text: text.to_owned(),
            root,
            segments: rest.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The envelope field the path starts at.
    pub fn root(&self) -> Root {
        self.root
    }

    /// The value at this path, if any.
    pub fn get<'a>(&self, signal: &'a Signal) -> Option<Found<'a>> {
        let scalar = |f: Found<'a>| {
            if self.segments.is_empty() {
                Some(f)
            } else {
                None
            }
        };
        let map = match self.root {
            Root::Id => return scalar(Found::Str(&signal.id)),
            Root::Type => return scalar(Found::Str(&signal.kind)),
            Root::Source => return scalar(Found::Str(&signal.source)),
            Root::Timestamp => return scalar(Found::Int(signal.timestamp)),
            Root::CorrelationId => {
                return signal
                    .correlation_id
                    .as_deref()
                    .and_then(|c| scalar(Found::Str(c)));
            }
            Root::Metadata => signal.metadata.as_ref()?,
            Root::Payload => &*signal.payload,
        };
        let Some((first, rest)) = self.segments.split_first() else {
            return Some(Found::Map(map));
        };
        let mut value = map.get(first)?;
        for seg in rest {
            value = step(value, seg)?;
        }
        Some(Found::Json(value))
    }

    /// Removes and returns the value at this path. Envelope fields that every signal must
    /// have (`id`, `type`, `timestamp`, `source`) are copied, not removed.
    pub fn take(&self, signal: &mut Signal) -> Option<Value> {
        let map = match self.root {
            Root::Id | Root::Type | Root::Source | Root::Timestamp => {
                return self.get(signal).map(|f| f.to_value());
            }
            Root::CorrelationId => {
                return if self.segments.is_empty() {
                    signal.correlation_id.take().map(Value::from)
                } else {
                    None
                };
            }
            Root::Metadata if self.segments.is_empty() => {
                return signal.metadata.take().map(Value::from);
            }
            Root::Payload if self.segments.is_empty() => {
                return Some(std::mem::take(&mut signal.payload).into());
            }
            Root::Metadata => signal.metadata.as_mut()?,
            Root::Payload => &mut *signal.payload,
        };
        let (last, parents) = self.segments.split_last()?;
        let Some((first, rest)) = parents.split_first() else {
            return map.remove(last);
        };
        let mut value = map.get_mut(first)?;
        for seg in rest {
            value = step_mut(value, seg)?;
        }
        match value {
            Value::Object(o) => o.remove(last),
            Value::Array(a) => {
                let i: usize = last.parse().ok()?;
                (i < a.len()).then(|| a.remove(i))
            }
            _ => None,
        }
    }

    /// Writes `value` at this path, creating objects on the way.
    pub fn set(&self, signal: &mut Signal, value: Value) -> Result<(), PathError> {
        let wrong = |expected| PathError::WrongType {
            path: self.text.clone(),
            expected,
        };
        if !self.segments.is_empty() && !matches!(self.root, Root::Metadata | Root::Payload) {
            return Err(PathError::NotContainer(self.text.clone()));
        }
        let map = match self.root {
            Root::Id | Root::Type | Root::Source | Root::CorrelationId => {
                let s: crate::SmallString = match value {
                    Value::String(s) => s.into(),
                    Value::Number(n) => n.to_string().into(),
                    _ => return Err(wrong("a string")),
                };
                match self.root {
                    Root::Id => signal.id = s,
                    Root::Type => signal.kind = s,
                    Root::Source => signal.source = s,
                    _ => signal.correlation_id = Some(s),
                }
                return Ok(());
            }
            Root::Timestamp => {
                signal.timestamp = value
                    .as_i64()
                    .or_else(|| value.as_f64().map(|f| f.floor() as i64))
                    .ok_or_else(|| wrong("a number"))?;
                return Ok(());
            }
            Root::Metadata if self.segments.is_empty() => {
                match value {
                    Value::Object(o) => signal.metadata = Some(o.into()),
                    Value::Null => signal.metadata = None,
                    _ => return Err(wrong("an object")),
                }
                return Ok(());
            }
            Root::Payload if self.segments.is_empty() => {
                match value {
                    Value::Object(o) => signal.payload = o.into(),
                    _ => return Err(wrong("an object")),
                }
                return Ok(());
            }
            Root::Metadata => signal.metadata_mut(),
            Root::Payload => &mut *signal.payload,
        };
        let (last, parents) = self
            .segments
            .split_last()
            .ok_or_else(|| PathError::Empty(self.text.clone()))?;
        let mut current = map;
        for seg in parents {
            let entry = current
                .entry(seg.clone())
                .or_insert_with(|| Value::Object(Object::new()));
            if entry.is_null() {
                *entry = Value::Object(Object::new());
            }
            current = entry
                .as_object_mut()
                .ok_or_else(|| PathError::NotContainer(self.text.clone()))?;
        }
        current.insert(last.clone(), value);
        Ok(())
    }
}

fn step<'a>(value: &'a Value, seg: &str) -> Option<&'a Value> {
    match value {
        Value::Object(o) => o.get(seg),
        Value::Array(a) => a.get(seg.parse::<usize>().ok()?),
        _ => None,
    }
}

fn step_mut<'a>(value: &'a mut Value, seg: &str) -> Option<&'a mut Value> {
    match value {
        Value::Object(o) => o.get_mut(seg),
        Value::Array(a) => a.get_mut(seg.parse::<usize>().ok()?),
        _ => None,
    }
}

impl fmt::Debug for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Path({})", self.text)
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object;
    use serde_json::json;

    fn sig() -> Signal {
        Signal::new(
            "midi.note_on",
            "midi:pads",
            object! {"note" => 36, "list" => json!([1, {"a": 2}])},
        )
        .at(5)
    }

    fn get(path: &str) -> Option<Value> {
        Path::parse(path).unwrap().get(&sig()).map(|f| f.to_value())
    }

    #[test]
    fn envelope_and_payload_lookup() {
        assert_eq!(get("type"), Some(json!("midi.note_on")));
        assert_eq!(get("signal.type"), Some(json!("midi.note_on")));
        assert_eq!(get("timestamp"), Some(json!(5)));
        assert_eq!(get("payload.note"), Some(json!(36)));
        assert_eq!(get("note"), Some(json!(36)));
        assert_eq!(get("signal.note"), Some(json!(36)));
        assert_eq!(get("payload.list.1.a"), Some(json!(2)));
        assert_eq!(get("payload.missing"), None);
        assert_eq!(get("correlationId"), None);
        assert_eq!(get("type.x"), None);
        assert!(Path::parse("a..b").is_err());
        assert!(Path::parse("").is_err());
    }

    #[test]
    fn set_and_take() {
        let mut s = sig();
        Path::parse("payload.a.b")
            .unwrap()
            .set(&mut s, json!(1))
            .unwrap();
        assert_eq!(s.payload["a"]["b"], 1);
        Path::parse("type")
            .unwrap()
            .set(&mut s, json!("control.pause"))
            .unwrap();
        assert_eq!(s.kind, "control.pause");
        assert!(
            Path::parse("timestamp")
                .unwrap()
                .set(&mut s, json!("x"))
                .is_err()
        );
        assert_eq!(Path::parse("note").unwrap().take(&mut s), Some(json!(36)));
        assert!(!s.payload.contains_key("note"));
        assert_eq!(
            Path::parse("type").unwrap().take(&mut s),
            Some(json!("control.pause"))
        );
        assert_eq!(s.kind, "control.pause");
        Path::parse("metadata.seq")
            .unwrap()
            .set(&mut s, json!(3))
            .unwrap();
        assert_eq!(s.meta("seq"), Some(&json!(3)));
    }

    #[test]
    fn equality_is_json_equality() {
        let s = sig();
        let f = Path::parse("note").unwrap();
        assert!(f.get(&s).unwrap().equals(&json!(36)));
        assert!(f.get(&s).unwrap().equals(&json!(36.0)));
        assert!(!f.get(&s).unwrap().equals(&json!("36")));
    }
}
