//! Palyra as a control output: control signals → ACP command envelopes, and their result
//! envelopes → signals.
//!
//! The body of `POST /console/v1/acp/command` is `{client, command}`: `client` is the ACP
//! client context (`protocol_version`, `client_id`, `transport`, `owner_principal`,
//! `device_id`, `channel`, `scopes`, `capabilities`; Palyra checks it against the console
//! session), `command` is `{request_id, command, params, idempotency_key}`.
//!
//! | control signal | command | params |
//! |---|---|---|
//! | `control.cancel`, `control.interrupt` | `run.abort` | `{run_id, reason}`: the payload's `runId` (or `run_id`), else the last run seen |
//! | `control.answer {promptId, value \| cancelled}` | `approval.decide` | `{approval_id: promptId, approved, decision: "allow"\|"deny", decision_scope, reason}` |
//!
//! Palyra's command router reads `approved` (a boolean) and `decision_scope`
//! (`once`/`session`/`timeboxed`, with `decision_scope_ttl_ms`); its live ACP bridge reads
//! `decision`: both are sent. An answer's `value` may be a boolean, a word (`approve`,
//! `allow`, `yes`, `session` (allow for the session), `deny`, `reject`, `no`, …) or an object
//! `{approved | decision, scope, ttlMs, reason}`; `cancelled: true` denies. Anything else is
//! refused ([`EncodeError::UnrecognizedAnswer`]): an approval is never guessed.
//!
//! `request_id` is fresh for every attempt; `idempotency_key` is derived from the control
//! signal's `id` only, so a retried command ([`AcpRequest::retry`]) is applied once: Palyra
//! answers a repeat with the stored result (`replayed: true`).

use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::well_known::{self};
use patchbay_signal::{Object, Signal, control, next_id, now_ms};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::envelope::{command_result_signal, str_field};

/// The console endpoint ACP command envelopes are posted to.
pub const ACP_COMMAND_PATH: &str = "/console/v1/acp/command";

/// The ACP client context sent with every command (Palyra's `AcpClientContext`; it
/// refuses unknown fields, and `owner_principal`/`device_id` must match the console
/// session the request is authenticated with).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcpClientContext {
    /// ACP protocol version (Palyra accepts 1).
    pub protocol_version: u32,
    /// This client's id.
    pub client_id: String,
    /// `http` for the console endpoint.
    pub transport: String,
    /// The principal of the console session (e.g. `user:ops`).
    pub owner_principal: String,
    /// The device id of the console session.
    pub device_id: String,
    /// The channel of the console session, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Scopes, e.g. `runs:write`, `approvals:write`.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Capabilities, e.g. `run_control`, `approval_bridge`.
    #[serde(default)]
    pub capabilities: Vec<String>,
}

impl AcpClientContext {
    /// A context over HTTP with the grants `run.abort` and `approval.decide` need.
    pub fn new(
        client_id: impl Into<String>,
        owner_principal: impl Into<String>,
        device_id: impl Into<String>,
    ) -> Self {
        AcpClientContext {
            protocol_version: 1,
            client_id: client_id.into(),
            transport: "http".into(),
            owner_principal: owner_principal.into(),
            device_id: device_id.into(),
            channel: None,
            scopes: vec![
                "runs:read".into(),
                "runs:write".into(),
                "approvals:read".into(),
                "approvals:write".into(),
            ],
            capabilities: vec!["run_control".into(), "approval_bridge".into()],
        }
    }
}

/// Why a control signal cannot become an ACP command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The signal is not a `control.*` signal.
    #[error("`{0}` is not a control signal")]
    NotControl(String),
    /// Palyra has no command for this control type (pause, step, continue, arm, quit).
    #[error("Palyra has no command for `{0}`")]
    Unsupported(String),
    /// A cancel or interrupt names no run and no run has been seen.
    #[error("no run to abort: the signal has no `runId` and no Palyra run has been seen")]
    NoRun,
    /// A `control.answer` without a `promptId` (the approval id).
    #[error("control.answer needs a `promptId` (the Palyra approval id)")]
    MissingPromptId,
    /// A `control.answer` whose value is not a recognizable approve/deny decision.
    #[error("control.answer value {0} is not an approve/deny decision")]
    UnrecognizedAnswer(String),
}

/// One ACP command ready to post, with what is needed to retry it and to read its result.
#[derive(Debug, Clone, PartialEq)]
pub struct AcpRequest {
    /// The client context.
    pub client: AcpClientContext,
    /// `run.abort` or `approval.decide`.
    pub command: String,
    /// The command's params.
    pub params: Value,
    /// Fresh for every attempt.
    pub request_id: String,
    /// Derived from the control signal's id: the same for every attempt.
    pub idempotency_key: String,
    /// The control signal's id.
    pub control_id: String,
    /// The run the command concerns, when known.
    pub run_id: Option<String>,
}

impl AcpRequest {
    /// The HTTP body: `{client, command: {request_id, command, params, idempotency_key}}`.
    pub fn body(&self) -> Value {
        json!({ "client": self.client, "command": self.envelope() })
    }

    /// The command envelope alone.
    pub fn envelope(&self) -> Value {
        json!({
            "request_id": self.request_id,
            "command": self.command,
            "params": self.params,
            "idempotency_key": self.idempotency_key,
        })
    }

    /// The same command as a realtime WebSocket frame (`{"type":"command","payload":…}`),
    /// for a transport that already holds a realtime socket with the needed grants.
    pub fn realtime_frame(&self) -> Value {
        json!({ "type": "command", "payload": self.envelope() })
    }

    /// Another attempt of the same command: a fresh `request_id`, the same params and
    /// idempotency key (so Palyra applies it at most once).
    pub fn retry(&self) -> AcpRequest {
        AcpRequest {
            request_id: next_id().into(),
            ..self.clone()
        }
    }

    /// Decodes the HTTP response body to this request into a signal (see
    /// [`decode_command_result`]), correlated with the request's run and naming the control
    /// signal (`metadata.control_id`).
    pub fn decode_result(&self, source: &str, body: &[u8]) -> Decoded {
        let ts = now_ms();
        let value = match serde_json::from_slice::<Value>(body) {
            Ok(v) => v,
            Err(err) => {
                let raw = String::from_utf8_lossy(body);
                return Decoded::BadInput(bad_input_signal(
                    source,
                    ts,
                    &raw,
                    &format!("ACP result is not JSON: {err}"),
                ));
            }
        };
        let Value::Object(obj) = value else {
            return Decoded::BadInput(bad_input_signal(
                source,
                ts,
                &value.to_string(),
                "ACP result is not a JSON object",
            ));
        };
        let mut signal = command_result_signal(source, &obj, ts, self.run_id.as_deref());
        let meta = signal.metadata_mut();
        meta.insert("control_id".into(), Value::String(self.control_id.clone()));
        meta.entry("command")
            .or_insert_with(|| Value::String(self.command.clone()));
        meta.entry("request_id")
            .or_insert_with(|| Value::String(self.request_id.clone()));
        well_known::repair(&mut signal);
        Decoded::Signal(signal)
    }
}

/// Encodes control signals as ACP commands for one client, remembering the last run seen.
#[derive(Debug, Clone)]
pub struct AcpCommander {
    client: AcpClientContext,
    last_run: Option<String>,
}

impl AcpCommander {
    /// A commander sending as `client`.
    pub fn new(client: AcpClientContext) -> Self {
        AcpCommander {
            client,
            last_run: None,
        }
    }

    /// Notes a signal decoded from the same Palyra daemon: its `correlationId` is the run a
    /// cancel without `runId` aborts. Pass every decoded signal.
    pub fn observe(&mut self, signal: &Signal) {
        if let Some(run) = &signal.correlation_id
            && !run.is_empty()
        {
            self.last_run = Some(run.to_string());
        }
    }

    /// The run a cancel without `runId` would abort.
    pub fn last_run_id(&self) -> Option<&str> {
        self.last_run.as_deref()
    }

    /// The ACP command for a control signal (see the module docs).
    pub fn encode(&self, signal: &Signal) -> Result<AcpRequest, EncodeError> {
        if !control::is_control(&signal.kind) {
            return Err(EncodeError::NotControl(signal.kind.to_string()));
        }
        let (command, params, run_id) = match signal.kind.as_str() {
            control::CANCEL | control::INTERRUPT => {
                let run = str_field(&signal.payload, "runId")
                    .or_else(|| str_field(&signal.payload, "run_id"))
                    .filter(|r| !r.is_empty())
                    .or_else(|| self.last_run.clone())
                    .ok_or(EncodeError::NoRun)?;
                let reason = str_field(&signal.payload, "reason")
                    .unwrap_or_else(|| format!("patchbay {}", signal.kind));
                let params = json!({ "run_id": run, "reason": reason });
                ("run.abort", params, Some(run))
            }
            control::ANSWER => ("approval.decide", answer_params(&signal.payload)?, None),
            other => return Err(EncodeError::Unsupported(other.to_owned())),
        };
        Ok(AcpRequest {
            client: self.client.clone(),
            command: command.to_owned(),
            params,
            request_id: next_id().into(),
            idempotency_key: idempotency_key(&signal.id),
            control_id: signal.id.to_string(),
            run_id,
        })
    }
}

/// One approve/deny decision read from a `control.answer`.
struct Decision {
    approved: bool,
    scope: Option<String>,
    ttl_ms: Option<i64>,
    reason: Option<String>,
}

fn answer_params(payload: &Object) -> Result<Value, EncodeError> {
    let approval_id = str_field(payload, "promptId")
        .or_else(|| str_field(payload, "approval_id"))
        .filter(|id| !id.is_empty())
        .ok_or(EncodeError::MissingPromptId)?;
    let cancelled = payload.get("cancelled").and_then(Value::as_bool) == Some(true);
    let decision = if cancelled {
        Decision {
            approved: false,
            scope: None,
            ttl_ms: None,
            reason: Some("cancelled".into()),
        }
    } else {
        let value = payload.get("value").unwrap_or(&Value::Null);
        read_decision(value).ok_or_else(|| EncodeError::UnrecognizedAnswer(value.to_string()))?
    };
    let reason = decision.reason.unwrap_or_else(|| {
        if decision.approved {
            "approved via patchbay".into()
        } else {
            "denied via patchbay".into()
        }
    });
    let mut params = json!({
        "approval_id": approval_id,
        "approved": decision.approved,
        "decision": if decision.approved { "allow" } else { "deny" },
        "decision_scope": decision.scope.unwrap_or_else(|| "once".into()),
        "reason": reason,
    });
    if let (Some(ttl), Value::Object(p)) = (decision.ttl_ms, &mut params) {
        p.insert("decision_scope_ttl_ms".into(), json!(ttl));
    }
    Ok(params)
}

/// Reads a decision from a word, a boolean or an object; `None` when it is not one.
fn read_decision(value: &Value) -> Option<Decision> {
    let simple = |approved: bool, scope: Option<&str>| Decision {
        approved,
        scope: scope.map(str::to_owned),
        ttl_ms: None,
        reason: None,
    };
    match value {
        Value::Bool(b) => Some(simple(*b, None)),
        Value::String(word) => match word.trim().to_ascii_lowercase().as_str() {
            "approve" | "approved" | "allow" | "allowed" | "allow_once" | "once" | "yes" | "y"
            | "ok" | "accept" | "accepted" | "true" => Some(simple(true, Some("once"))),
            "session" | "allow_session" | "always" => Some(simple(true, Some("session"))),
            "deny" | "denied" | "reject" | "rejected" | "decline" | "declined" | "no" | "n"
            | "false" | "cancel" => Some(simple(false, None)),
            _ => None,
        },
        Value::Object(obj) => {
            let approved = match (obj.get("approved"), obj.get("decision")) {
                (Some(Value::Bool(b)), _) => *b,
                (_, Some(word @ Value::String(_))) => read_decision(word)?.approved,
                _ => return None,
            };
            let scope = obj
                .get("scope")
                .or_else(|| obj.get("decision_scope"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let ttl_ms = obj
                .get("ttlMs")
                .or_else(|| obj.get("decision_scope_ttl_ms"))
                .and_then(Value::as_i64);
            let reason = obj.get("reason").and_then(Value::as_str).map(str::to_owned);
            Some(Decision {
                approved,
                scope,
                ttl_ms,
                reason,
            })
        }
        _ => None,
    }
}

/// The idempotency key of the command made from a control signal: `patchbay:<id>`, the
/// id hashed when it is long or has characters beyond `[A-Za-z0-9._:-]`.
pub fn idempotency_key(control_id: &str) -> String {
    let plain = control_id.len() <= 96
        && !control_id.is_empty()
        && control_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if plain {
        format!("patchbay:{control_id}")
    } else {
        // Two FNV-1a passes with different offsets: 128 bits, stable across processes.
        let h1 = fnv1a(control_id.as_bytes(), 0xcbf2_9ce4_8422_2325);
        let h2 = fnv1a(control_id.as_bytes(), 0x6c62_272e_07bb_0142);
        format!("patchbay:h{h1:016x}{h2:016x}")
    }
}

fn fnv1a(bytes: &[u8], offset: u64) -> u64 {
    bytes.iter().fold(offset, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Decodes an ACP (or realtime) command result envelope `{request_id, command, ok, result,
/// error, idempotency_key, replayed}` (a JSON text) into a signal: `ok: true` is
/// `palyra.command_result` (the envelope as payload), `ok: false` an `error {code, message,
/// severity: "error"}` with the envelope's other fields in metadata. A body that is not an
/// envelope (an HTTP error such as `{"error": "…"}`) is an `error` too; text that is not
/// JSON is bad input.
pub fn decode_command_result(source: &str, body: &[u8]) -> Decoded {
    let ts = now_ms();
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(obj)) => Decoded::Signal(command_result_signal(source, &obj, ts, None)),
        Ok(other) => Decoded::BadInput(bad_input_signal(
            source,
            ts,
            &other.to_string(),
            "ACP result is not a JSON object",
        )),
        Err(err) => Decoded::BadInput(bad_input_signal(
            source,
            ts,
            &String::from_utf8_lossy(body),
            &format!("ACP result is not JSON: {err}"),
        )),
    }
}
