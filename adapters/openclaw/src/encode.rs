//! `control.*` signals to gateway requests.

use patchbay_graph::approvals::Verdict;
use patchbay_signal::control::FieldError;
use patchbay_signal::{Signal, control, next_id};
use serde_json::{Value, json};

use crate::decode::RunTracker;

/// Why a signal cannot be sent to the gateway.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The protocol has no verb for this signal (OpenClaw cannot pause, step, continue,
    /// arm or quit a run).
    #[error("OpenClaw has no request for `{0}`")]
    Unsupported(String),
    /// An abort with no run in its payload and none seen.
    #[error("no run to abort")]
    NoRun,
    /// An abort of a run whose session is unknown (`chat.abort` needs the session key).
    #[error("the session of run `{0}` is unknown: add `sessionKey` to the payload")]
    NoSession(String),
    /// A field the request needs is missing from the payload, or unusable.
    #[error(transparent)]
    Field(#[from] FieldError),
}

/// A request frame to send, with what the transport needs to track its answer (see
/// [`PendingRequests`](crate::PendingRequests)).
#[derive(Debug, Clone, PartialEq)]
pub struct OutgoingRequest {
    /// The request id.
    pub id: String,
    /// The method.
    pub method: String,
    /// The whole `req` frame.
    pub frame: Value,
}

/// The request for a control signal, with a fresh id:
///
/// - `control.interrupt` / `control.cancel` → `chat.abort {sessionKey, runId}`: the run
///   and session of the payload (`runId`, `sessionKey`), else the last run seen;
///   needs the `operator.write` scope;
/// - `control.answer {promptId, value | cancelled}` → `exec.approval.resolve {id,
///   decision}` (`plugin.approval.resolve` for a `plugin:` id); `value` is a decision
///   (`allow-once`, `allow-always`, `deny`), a boolean (`true` = `allow-once`,
///   `false` = `deny`) or a common word (`allow`, `always`, `deny`, `cancel`, …: `ask` and
///   `cancel` are `deny`); cancelled is `deny`; needs `operator.approvals`.
///
/// The protocol has no verb for `control.pause`, `control.step`, `control.continue`,
/// `control.arm` or `control.quit`: those, and any other type, are refused.
pub fn encode_control(signal: &Signal, runs: &RunTracker) -> Result<OutgoingRequest, EncodeError> {
    encode_control_with_id(signal, runs, next_id().into())
}

/// [`encode_control`] with a given request id.
pub fn encode_control_with_id(
    signal: &Signal,
    runs: &RunTracker,
    id: String,
) -> Result<OutgoingRequest, EncodeError> {
    let (method, params) = match signal.kind.as_str() {
        control::INTERRUPT | control::CANCEL => ("chat.abort", abort_params(signal, runs)?),
        control::ANSWER => resolve_params(signal)?,
        other => return Err(EncodeError::Unsupported(other.to_owned())),
    };
    let frame = json!({"type": "req", "id": id, "method": method, "params": params});
    Ok(OutgoingRequest {
        id,
        method: method.to_owned(),
        frame,
    })
}

fn string_field(signal: &Signal, field: &'static str) -> Result<Option<String>, EncodeError> {
    match signal.payload.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        None | Some(Value::Null) => Ok(None),
        Some(_) => Err(EncodeError::Field(FieldError::Invalid {
            kind: signal.kind.to_string(),
            field,
            expected: "a non-empty string",
        })),
    }
}

fn abort_params(signal: &Signal, runs: &RunTracker) -> Result<Value, EncodeError> {
    let run = string_field(signal, "runId")?;
    let session = string_field(signal, "sessionKey")?;
    let (run, session) = match (run, session) {
        (Some(run), Some(session)) => (Some(run), session),
        (Some(run), None) => match runs.session_of(&run) {
            Some(session) => (Some(run), session.to_owned()),
            None => return Err(EncodeError::NoSession(run)),
        },
        // A session alone aborts whatever runs in it.
        (None, Some(session)) => (None, session),
        (None, None) => {
            let last = runs.last().ok_or(EncodeError::NoRun)?;
            let session = last
                .session_key
                .clone()
                .ok_or_else(|| EncodeError::NoSession(last.run_id.clone()))?;
            (Some(last.run_id.clone()), session)
        }
    };
    let mut params = json!({"sessionKey": session});
    if let Some(run) = run {
        params["runId"] = Value::String(run);
    }
    Ok(params)
}

fn resolve_params(signal: &Signal) -> Result<(&'static str, Value), EncodeError> {
    let id = match signal.payload.get("promptId") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        None | Some(Value::Null) => {
            return Err(EncodeError::Field(FieldError::Missing {
                kind: signal.kind.to_string(),
                field: "promptId",
            }));
        }
        Some(_) => {
            return Err(EncodeError::Field(FieldError::Invalid {
                kind: signal.kind.to_string(),
                field: "promptId",
                expected: "a non-empty string",
            }));
        }
    };
    let invalid = |field, expected| {
        EncodeError::Field(FieldError::Invalid {
            kind: signal.kind.to_string(),
            field,
            expected,
        })
    };
    let cancelled = match signal.payload.get("cancelled") {
        Some(Value::Bool(b)) => *b,
        None | Some(Value::Null) => false,
        Some(_) => return Err(invalid("cancelled", "a boolean")),
    };
    let decision = if cancelled {
        "deny"
    } else {
        match signal.payload.get("value") {
            Some(Value::Bool(true)) => "allow-once",
            Some(Value::Bool(false)) => "deny",
            Some(Value::String(d)) if d == "allow-once" => "allow-once",
            Some(Value::String(d)) if d == "allow-always" => "allow-always",
            // The common words every agent understands.
            Some(word @ Value::String(_)) if Verdict::parse(word).is_some() => {
                match Verdict::parse(word) {
                    Some(Verdict::Allow) => "allow-once",
                    Some(Verdict::Always) => "allow-always",
                    _ => "deny",
                }
            }
            None => {
                return Err(EncodeError::Field(FieldError::Missing {
                    kind: signal.kind.to_string(),
                    field: "value",
                }));
            }
            Some(_) => {
                return Err(invalid(
                    "value",
                    "a boolean, one of allow-once, allow-always, deny, or allow, always, cancel",
                ));
            }
        }
    };
    let method = if id.starts_with("plugin:") {
        "plugin.approval.resolve"
    } else {
        "exec.approval.resolve"
    };
    Ok((method, json!({"id": id, "decision": decision})))
}
