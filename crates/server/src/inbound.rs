//! What UIs send back: WebSocket text frames and POST bodies, turned into signals.
//!
//! A frame is an envelope (normalized like any generic JSON), or one of the Escapement
//! OpenTUI back-channel messages: `{"kind":"control","op":…}` becomes `control.<op>` and
//! `{"kind":"answer","prompt-id":…,"value"|"cancelled":…}` becomes `control.answer`.

use std::sync::Arc;

use patchbay_signal::normalize::{Normalizer, type_error};
use patchbay_signal::{Object, SharedSignal, Signal, control};
use serde_json::Value;
use serde_json::value::RawValue;

/// Why a frame or body could not be used; the text is sent back to the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadFrame(pub String);

/// Turns one WebSocket text frame into a signal, shared as the graph takes it.
pub fn ui_frame_to_signal(
    normalizer: &mut Normalizer,
    text: &str,
) -> Result<SharedSignal, BadFrame> {
    let text = text.trim();
    // An envelope (the usual frame) is read straight into a signal, made in its `Arc`;
    // anything else takes the general path.
    if let Some(signal) = normalizer.shared_envelope_from_str(text) {
        return Ok(signal);
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| BadFrame(format!("not JSON: {e}")))?;
    value_to_signal(normalizer, value).map(Arc::new)
}

/// Turns one JSON value (a frame, or one element of a POSTed array) into a signal.
pub fn value_to_signal(normalizer: &mut Normalizer, value: Value) -> Result<Signal, BadFrame> {
    let Value::Object(obj) = value else {
        return Err(BadFrame(format!(
            "expected a JSON object (a signal envelope), got {}",
            json_kind(&value)
        )));
    };
    // An envelope's `type` wins: `kind` is only the Escapement discriminant without one.
    if !obj.get("type").is_some_and(Value::is_string) {
        match obj.get("kind").and_then(Value::as_str) {
            Some("control") => return control_frame(normalizer, obj),
            Some("answer") => return answer_frame(normalizer, obj),
            Some(other) => {
                return Err(BadFrame(format!(
                    "unknown frame kind `{other}` (expected `control` or `answer`, or an envelope with a `type`)"
                )));
            }
            None => {}
        }
    }
    // The same rule as every other path: an object without `type` is a generic event, a
    // `type` that is not a string is bad input, told to the sender.
    if let Some(why) = type_error(&obj) {
        return Err(BadFrame(why));
    }
    Ok(normalizer.from_value(Value::Object(obj)).into_signal())
}

fn control_frame(normalizer: &Normalizer, mut obj: Object) -> Result<Signal, BadFrame> {
    let op = match obj.remove("op") {
        Some(Value::String(op)) if !op.is_empty() => op,
        Some(other) => {
            return Err(BadFrame(format!(
                "control frame: `op` must be a non-empty string, got {}",
                json_kind(&other)
            )));
        }
        None => return Err(BadFrame("control frame without `op`".into())),
    };
    obj.remove("kind");
    let kind = match op.as_str() {
        "ui-interrupt" => control::INTERRUPT.to_owned(),
        "ui-quit" => control::QUIT.to_owned(),
        other => format!("control.{other}"),
    };
    // The remaining fields (`n` for `step`) are the payload.
    Ok(Signal::new(kind, normalizer.source(), obj))
}

fn answer_frame(normalizer: &Normalizer, mut obj: Object) -> Result<Signal, BadFrame> {
    obj.remove("kind");
    let prompt_id = match obj.remove("prompt-id").or_else(|| obj.remove("promptId")) {
        Some(Value::String(id)) => id,
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(BadFrame(format!(
                "answer frame: `prompt-id` must be a string, got {}",
                json_kind(&other)
            )));
        }
        None => return Err(BadFrame("answer frame without `prompt-id`".into())),
    };
    let mut payload = Object::new();
    payload.insert("promptId".into(), Value::String(prompt_id));
    match (obj.remove("value"), obj.remove("cancelled")) {
        (_, Some(Value::Bool(true))) => {
            payload.insert("cancelled".into(), Value::Bool(true));
        }
        (Some(value), _) => {
            payload.insert("value".into(), value);
        }
        (None, _) => {
            return Err(BadFrame(
                "answer frame needs `value` or `\"cancelled\": true`".into(),
            ));
        }
    }
    let mut signal = Signal::new(control::ANSWER, normalizer.source(), payload);
    if !obj.is_empty() {
        // Keep what the frame carried beyond the answer, as everywhere: nothing is lost.
        signal
            .metadata_mut()
            .insert("unknown".into(), Value::Object(obj));
    }
    Ok(signal)
}

/// Parses a POST body: one envelope or an array of envelopes. Errors name what is wrong
/// (with the array index).
///
/// Each element is read as a WebSocket frame is (an envelope straight into a signal, its
/// payload kept as text when it can be), not built as a tree first.
pub fn body_to_signals(
    normalizer: &mut Normalizer,
    body: &[u8],
) -> Result<Vec<SharedSignal>, BadFrame> {
    let not_json = |e: serde_json::Error| {
        if body.iter().all(u8::is_ascii_whitespace) {
            BadFrame("empty body: expected a signal envelope or an array of them".into())
        } else {
            BadFrame(format!("body is not JSON: {e}"))
        }
    };
    let value: &RawValue = serde_json::from_slice(body).map_err(not_json)?;
    let text = value.get();
    if !text.starts_with('[') {
        return ui_frame_to_signal(normalizer, text).map(|s| vec![s]);
    }
    let items: Vec<&RawValue> = serde_json::from_str(text).map_err(not_json)?;
    // The elements arrived together: one clock reading for them.
    normalizer.start_batch();
    let signals = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            ui_frame_to_signal(normalizer, item.get())
                .map_err(|BadFrame(m)| BadFrame(format!("[{i}]: {m}")))
        })
        .collect();
    normalizer.end_batch();
    signals
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn n() -> Normalizer {
        Normalizer::new("sidecar:ui")
    }

    fn frame(text: &str) -> Result<SharedSignal, BadFrame> {
        ui_frame_to_signal(&mut n(), text)
    }

    #[test]
    fn envelopes_are_normalized() {
        let s = frame(r#"{"type":"user.click","payload":{"target":"btn"}}"#).unwrap();
        assert_eq!(
            (s.kind.as_str(), s.source.as_str()),
            ("user.click", "sidecar:ui")
        );
        assert_eq!(s.payload["target"], "btn");
        let s = frame(r#"{"type":"control.pause"}"#).unwrap();
        assert_eq!(s.kind, "control.pause");
    }

    #[test]
    fn escapement_control_ops() {
        let cases = [
            (r#"{"kind":"control","op":"pause"}"#, "control.pause"),
            (r#"{"kind":"control","op":"continue"}"#, "control.continue"),
            (r#"{"kind":"control","op":"arm"}"#, "control.arm"),
            (
                r#"{"kind":"control","op":"ui-interrupt"}"#,
                "control.interrupt",
            ),
            (r#"{"kind":"control","op":"ui-quit"}"#, "control.quit"),
            (r#"{"kind":"control","op":"step"}"#, "control.step"),
        ];
        for (text, kind) in cases {
            let s = frame(text).unwrap();
            assert_eq!(s.kind, kind, "{text}");
            assert!(s.payload.is_empty());
        }
        let s = frame(r#"{"kind":"control","op":"step","n":3}"#).unwrap();
        assert_eq!(s.kind, "control.step");
        assert_eq!(s.payload["n"], 3);
    }

    #[test]
    fn escapement_answers() {
        let s = frame(r#"{"kind":"answer","prompt-id":"ask#1","value":"blue"}"#).unwrap();
        assert_eq!(s.kind, "control.answer");
        assert_eq!(
            s.to_value()["payload"],
            json!({"promptId":"ask#1","value":"blue"})
        );
        let s = frame(r#"{"kind":"answer","prompt-id":"ask#1","cancelled":true}"#).unwrap();
        assert_eq!(
            s.to_value()["payload"],
            json!({"promptId":"ask#1","cancelled":true})
        );
        let s = frame(r#"{"kind":"answer","prompt-id":"ask#1","value":null}"#).unwrap();
        assert_eq!(
            s.to_value()["payload"],
            json!({"promptId":"ask#1","value":null})
        );
        let s = frame(r#"{"kind":"answer","prompt-id":"p","value":false,"extra":1}"#).unwrap();
        assert_eq!(s.payload["value"], false);
        assert_eq!(s.meta("unknown").unwrap()["extra"], 1);
    }

    #[test]
    fn malformed_frames_name_the_problem() {
        let cases = [
            ("{oops", "not JSON"),
            ("42", "expected a JSON object"),
            (r#"{"kind":"control"}"#, "without `op`"),
            (r#"{"kind":"control","op":5}"#, "`op` must be"),
            (r#"{"kind":"answer","value":1}"#, "without `prompt-id`"),
            (r#"{"kind":"answer","prompt-id":"p"}"#, "needs `value`"),
            (r#"{"kind":"nope"}"#, "unknown frame kind `nope`"),
            (r#"{"type":3}"#, "`type` must be a string"),
        ];
        for (text, expected) in cases {
            let err = frame(text).unwrap_err();
            assert!(err.0.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn an_envelope_type_wins_over_kind() {
        let s =
            frame(r#"{"type":"user.click","kind":"control","payload":{"target":"b"}}"#).unwrap();
        assert_eq!(s.kind, "user.click");
    }

    #[test]
    fn objects_without_type_are_events() {
        let s = frame(r#"{"payload":{"a":1}}"#).unwrap();
        assert_eq!(s.kind, "event");
        assert_eq!(s.payload["payload"]["a"], 1);
    }

    #[test]
    fn post_bodies() {
        let one = body_to_signals(&mut n(), br#"{"type":"a"}"#).unwrap();
        assert_eq!(one.len(), 1);
        let many = body_to_signals(&mut n(), br#"[{"type":"a"},{"type":"b"}]"#).unwrap();
        assert_eq!(
            many.iter().map(|s| s.kind.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let err = body_to_signals(&mut n(), br#"[{"type":"a"},7]"#).unwrap_err();
        assert!(err.0.starts_with("[1]: "), "{err}");
        assert!(
            body_to_signals(&mut n(), b"  ")
                .unwrap_err()
                .0
                .contains("empty body")
        );
        assert!(body_to_signals(&mut n(), b"[]").unwrap().is_empty());
    }
}
