//! `control.*` signals to the frames an Escapement agent accepts (spec §5.2 and §6).

use patchbay_signal::control::FieldError;
use patchbay_signal::{Signal, control};
use serde_json::{Value, json};

/// Why a signal cannot be sent to an Escapement agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The protocol has no verb for this signal type (e.g. `control.cancel`: Escapement
    /// only knows `ui-interrupt` and `ui-quit`; a `map` filter can rename it).
    #[error("Escapement has no frame for `{0}`")]
    Unsupported(String),
    /// A field the message needs is missing from the payload, or unusable.
    #[error(transparent)]
    Field(#[from] FieldError),
}

/// The frame for a control signal:
///
/// - `control.pause|continue|arm` → `{"kind":"control","op":"pause"|…}`;
/// - `control.step {n?}` → `{"kind":"control","op":"step","n":n}` (`n` only when the
///   payload has it; the agent defaults to 1);
/// - `control.interrupt` → `op: "ui-interrupt"`, `control.quit` → `op: "ui-quit"`;
/// - `control.answer {promptId, value}` → `{"kind":"answer","prompt-id":…,"value":…}`,
///   with `cancelled: true` → `{"kind":"answer","prompt-id":…,"cancelled":true}`.
///
/// Any other type (including `control.cancel`) is refused with [`EncodeError`].
pub fn encode_control(signal: &Signal) -> Result<Value, EncodeError> {
    let kind = signal.kind.as_str();
    let op = match kind {
        control::PAUSE => "pause",
        control::CONTINUE => "continue",
        control::ARM => "arm",
        control::INTERRUPT => "ui-interrupt",
        control::QUIT => "ui-quit",
        control::STEP => {
            return Ok(match signal.payload.get("n") {
                None | Some(Value::Null) => json!({"kind": "control", "op": "step"}),
                Some(n) => {
                    let n = step_count(n).ok_or_else(|| {
                        EncodeError::Field(FieldError::Invalid {
                            kind: kind.to_owned(),
                            field: "n",
                            expected: "an integer >= 1",
                        })
                    })?;
                    json!({"kind": "control", "op": "step", "n": n})
                }
            });
        }
        control::ANSWER => return answer(signal),
        other => return Err(EncodeError::Unsupported(other.to_owned())),
    };
    Ok(json!({"kind": "control", "op": op}))
}

/// A step count: a positive integer (`2.0` accepted, as JSON Schema does).
fn step_count(v: &Value) -> Option<u64> {
    let n = v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && f.fract() == 0.0 && *f >= 1.0 && *f < 1.8e19)
            .map(|f| f as u64)
    })?;
    (n >= 1).then_some(n)
}

fn answer(signal: &Signal) -> Result<Value, EncodeError> {
    let kind = signal.kind.to_string();
    let prompt_id = match signal.payload.get("promptId") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        None | Some(Value::Null) => {
            return Err(EncodeError::Field(FieldError::Missing {
                kind,
                field: "promptId",
            }));
        }
        Some(_) => {
            return Err(EncodeError::Field(FieldError::Invalid {
                kind,
                field: "promptId",
                expected: "a non-empty string",
            }));
        }
    };
    match signal.payload.get("cancelled") {
        Some(Value::Bool(true)) => {
            return Ok(json!({"kind": "answer", "prompt-id": prompt_id, "cancelled": true}));
        }
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(_) => {
            return Err(EncodeError::Field(FieldError::Invalid {
                kind,
                field: "cancelled",
                expected: "a boolean",
            }));
        }
    }
    match signal.payload.get("value") {
        Some(value) => Ok(json!({"kind": "answer", "prompt-id": prompt_id, "value": value})),
        None => Err(EncodeError::Field(FieldError::Missing {
            kind,
            field: "value",
        })),
    }
}
