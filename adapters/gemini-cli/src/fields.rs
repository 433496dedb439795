//! How hook and stream fields become signal fields, for both decoders: payload times,
//! kept text, and the call ids derived from a call's content (event names in snake case
//! are every hook agent's, `patchbay_hooks::payload::snake_case`; keys in camel case every
//! decoder's, `patchbay_signal::decode::camel_case`).

use patchbay_signal::{Object, truncate};
use serde_json::Value;

/// How much of a prompt, a message or a tool's text output a payload keeps.
pub(crate) const TEXT_KEEP: usize = 4096;

/// The timestamp of an event or hook payload (its ISO `timestamp`), if it has one.
pub(crate) fn timestamp_of(value: &Value) -> Option<i64> {
    value
        .get("timestamp")
        .and_then(Value::as_str)
        .and_then(patchbay_signal::rfc3339_millis)
}

/// Every string inside `value` cut to [`TEXT_KEEP`] bytes.
pub(crate) fn truncate_strings(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(truncate(s, TEXT_KEEP)),
        Value::Array(items) => Value::Array(items.iter().map(truncate_strings).collect()),
        Value::Object(o) => Value::Object(truncate_object(o)),
        other => other.clone(),
    }
}

/// Every string inside `o` cut to [`TEXT_KEEP`] bytes.
pub(crate) fn truncate_object(o: &Object) -> Object {
    o.iter()
        .map(|(k, v)| (k.clone(), truncate_strings(v)))
        .collect()
}

/// A JSON value written with its object keys sorted, so that two payloads that differ
/// only in key order give the same text.
pub(crate) fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&o[k.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// 64-bit FNV-1a of `bytes`: stable across runs, platforms and versions.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_text() {
        let (mut a, mut b) = (String::new(), String::new());
        canonical(&json!({"b": [1, {"d": 2, "c": 3}], "a": "x"}), &mut a);
        canonical(&json!({"a": "x", "b": [1, {"c": 3, "d": 2}]}), &mut b);
        assert_eq!(a, b);
        assert_eq!(a, r#"{"a":"x","b":[1,{"c":3,"d":2}]}"#);
    }
}
