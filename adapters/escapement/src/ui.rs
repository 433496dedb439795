//! UI → agent frames to `control.*` signals: the sidecar back-channel, where a UI written
//! for Escapement sends `{"kind":"control",…}` and `{"kind":"answer",…}`.

use patchbay_signal::{Object, Signal, control, now_ms};
use serde_json::Value;

use crate::decode::as_millis;
use crate::encode::step_count;

/// Why a UI frame of kind `control` or `answer` cannot become a signal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UiFrameError {
    /// The frame lacks a field its kind needs.
    #[error("`{kind}` frame without `{field}`")]
    MissingField {
        /// `control` or `answer`.
        kind: &'static str,
        /// The missing field.
        field: &'static str,
    },
    /// A field has an unusable value.
    #[error("`{kind}` frame: `{field}` must be {expected}")]
    InvalidField {
        /// `control` or `answer`.
        kind: &'static str,
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A control `op` a UI may not send (unknown, or agent → UI such as `run-finished`).
    #[error("unknown control op `{0}`")]
    UnknownOp(String),
}

/// The signal a UI frame means, from `source`:
///
/// - `{"kind":"control","op":"pause"|"continue"|"arm"}` → `control.pause|continue|arm`;
/// - `{"kind":"control","op":"step","n":2}` → `control.step {n: 2}` (`n` only if sent);
/// - `op: "ui-interrupt"` → `control.interrupt`, `op: "ui-quit"` → `control.quit`;
/// - `{"kind":"answer","prompt-id":…,"value":…}` → `control.answer {promptId, value}`,
///   with `"cancelled": true` → `control.answer {promptId, cancelled: true}`.
///
/// `None` when the frame is not a `control` or `answer` frame (the caller decodes it
/// another way); `Some(Err)` when it is one but unusable. Other frame keys are kept in
/// `metadata.extra`; a numeric `ts` is the timestamp, else now.
pub fn ui_frame_to_signal(frame: &Value, source: &str) -> Option<Result<Signal, UiFrameError>> {
    let obj = frame.as_object()?;
    match obj.get("kind").and_then(Value::as_str)? {
        "control" => Some(control_frame(obj, source)),
        "answer" => Some(answer_frame(obj, source)),
        _ => None,
    }
}

fn control_frame(obj: &Object, source: &str) -> Result<Signal, UiFrameError> {
    let op = match obj.get("op") {
        Some(Value::String(op)) => op.as_str(),
        None | Some(Value::Null) => {
            return Err(UiFrameError::MissingField {
                kind: "control",
                field: "op",
            });
        }
        Some(_) => {
            return Err(UiFrameError::InvalidField {
                kind: "control",
                field: "op",
                expected: "a string",
            });
        }
    };
    let mut payload = Object::new();
    let kind = match op {
        "pause" => control::PAUSE,
        "continue" => control::CONTINUE,
        "arm" => control::ARM,
        "ui-interrupt" => control::INTERRUPT,
        "ui-quit" => control::QUIT,
        "step" => {
            match obj.get("n") {
                None | Some(Value::Null) => {}
                Some(n) => {
                    let n = step_count(n).ok_or(UiFrameError::InvalidField {
                        kind: "control",
                        field: "n",
                        expected: "an integer >= 1",
                    })?;
                    payload.insert("n".into(), n.into());
                }
            }
            control::STEP
        }
        other => return Err(UiFrameError::UnknownOp(other.to_owned())),
    };
    Ok(finish(
        Signal::new(kind, source, payload),
        obj,
        &["kind", "op", "n", "ts"],
    ))
}

fn answer_frame(obj: &Object, source: &str) -> Result<Signal, UiFrameError> {
    let prompt_id = match obj.get("prompt-id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        None | Some(Value::Null) => {
            return Err(UiFrameError::MissingField {
                kind: "answer",
                field: "prompt-id",
            });
        }
        Some(_) => {
            return Err(UiFrameError::InvalidField {
                kind: "answer",
                field: "prompt-id",
                expected: "a non-empty string",
            });
        }
    };
    let mut payload = Object::new();
    payload.insert("promptId".into(), Value::String(prompt_id));
    match obj.get("cancelled") {
        Some(Value::Bool(true)) => {
            payload.insert("cancelled".into(), Value::Bool(true));
        }
        None | Some(Value::Null) | Some(Value::Bool(false)) => match obj.get("value") {
            Some(value) => {
                payload.insert("value".into(), value.clone());
            }
            None => {
                return Err(UiFrameError::MissingField {
                    kind: "answer",
                    field: "value",
                });
            }
        },
        Some(_) => {
            return Err(UiFrameError::InvalidField {
                kind: "answer",
                field: "cancelled",
                expected: "a boolean",
            });
        }
    }
    Ok(finish(
        Signal::new(control::ANSWER, source, payload),
        obj,
        &["kind", "prompt-id", "value", "cancelled", "ts"],
    ))
}

fn finish(signal: Signal, obj: &Object, used: &[&str]) -> Signal {
    let ts = obj.get("ts").and_then(as_millis);
    let mut signal = signal.at(ts.unwrap_or_else(now_ms));
    let extra: Object = obj
        .iter()
        // A `ts` that is not a time is kept with the other extras.
        .filter(|(k, _)| !used.contains(&k.as_str()) || (k.as_str() == "ts" && ts.is_none()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !extra.is_empty() {
        signal = signal.with_meta("extra", Value::Object(extra));
    }
    signal
}
