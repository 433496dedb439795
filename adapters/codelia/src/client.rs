//! The UI side of the protocol, for a transport that speaks to a runtime as its UI.

use std::collections::HashMap;

use patchbay_signal::control::FieldError;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{Signal, control};
use serde_json::{Value, json};

use crate::decode::{CodeliaDecoder, PendingRequest, id_key};

/// The protocol version patchbay speaks (spec §4.1).
const PROTOCOL_VERSION: &str = "0";

/// JSON-RPC error code for "user cancelled" (spec §9), used to cancel a runtime request
/// whose result shape patchbay does not know.
const USER_CANCELLED: i64 = -32003;

/// Why a signal cannot be sent to a Codelia runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The protocol has no message for this signal type (Codelia has no pause, step,
    /// continue, arm or quit).
    #[error("Codelia has no message for `{0}`")]
    Unsupported(String),
    /// A cancel or interrupt arrived with no run in progress and no `runId` in its
    /// payload.
    #[error("no run to cancel")]
    NoRun,
    /// A `control.answer` names a request that is not pending (already answered,
    /// cancelled by the runtime, or never seen).
    #[error("no pending request `{0}`")]
    UnknownPrompt(String),
    /// A field the message needs is missing from the payload, or unusable.
    #[error(transparent)]
    Field(#[from] FieldError),
}

/// The UI end of a Codelia connection: builds what the UI sends, decodes what the
/// runtime sends (through its [`CodeliaDecoder`]) and keeps the state the two share:
/// its own request ids, the current run, the runtime's pending requests.
///
/// - [`UiClient::initialize`] → the `initialize` request (send it first);
/// - `prompt {text}` → `run.start {input: {type: "text", text}}` (`sessionId` in the
///   payload resumes that session);
/// - `control.cancel` / `control.interrupt` (`runId` and `reason` optional) →
///   `run.cancel {run_id, reason?}` of the current run;
/// - `control.answer {promptId, value | cancelled}` → the JSON-RPC response to that
///   pending request, shaped for its method: `ui.confirm.request` `{ok}` (a `value`
///   object is sent as the result), `ui.prompt.request` `{value}` (`null` when
///   cancelled), `ui.pick.request` `{ids}` (`[]` when cancelled), `client.tool.call`
///   `{ok: true, result}` / `{ok: false, error: "cancelled"}`; other methods get `value`
///   as the result, or the error `-32003 user cancelled`.
#[derive(Debug, Clone)]
pub struct UiClient {
    decoder: CodeliaDecoder,
    client_name: String,
    client_version: String,
    next_id: u64,
    sent: HashMap<String, String>,
}

impl UiClient {
    /// A client whose decoded signals come from `source`; it introduces itself as
    /// `patchbay` with this crate's version.
    pub fn new(source: impl Into<String>) -> Self {
        UiClient {
            decoder: CodeliaDecoder::new(source),
            client_name: "patchbay".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
            next_id: 1,
            sent: HashMap::new(),
        }
    }

    /// Sets the name and version sent in `initialize` (builder style).
    pub fn with_client(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.client_name = name.into();
        self.client_version = version.into();
        self
    }

    /// Replaces the decoder (e.g. one with its own agent id) (builder style).
    pub fn with_decoder(mut self, decoder: CodeliaDecoder) -> Self {
        self.decoder = decoder;
        self
    }

    /// The decoder (current run, pending requests).
    pub fn decoder(&self) -> &CodeliaDecoder {
        &self.decoder
    }

    /// The run a cancel would stop.
    pub fn current_run(&self) -> Option<&str> {
        self.decoder.current_run()
    }

    /// The runtime's requests waiting for an answer.
    pub fn pending_requests(&self) -> impl Iterator<Item = &PendingRequest> {
        self.decoder.pending_requests()
    }

    /// The method of a request this client sent and that is not answered yet.
    pub fn sent_method(&self, id: &str) -> Option<&str> {
        self.sent.get(id).map(String::as_str)
    }

    /// The `initialize` request, announcing confirm, prompt and pick support.
    pub fn initialize(&mut self) -> Value {
        self.request(
            "initialize",
            json!({
                "protocol_version": PROTOCOL_VERSION,
                "client": {"name": self.client_name, "version": self.client_version},
                "ui_capabilities": {
                    "supports_confirm": true,
                    "supports_prompt": true,
                    "supports_pick": true,
                },
            }),
        )
    }

    /// Decodes one message from the runtime; a response to a request of this client
    /// gets its `method` in the `codelia.response` payload.
    pub fn decode(&mut self, msg: Value, recorded_t: Option<i64>, out: &mut Vec<Decoded>) {
        let answered = match (&msg.get("method"), msg.get("id")) {
            (None, Some(id)) => self.sent.remove(&id_key(id)),
            _ => None,
        };
        let start = out.len();
        self.decoder.decode_message(msg, recorded_t, out);
        if let Some(method) = answered {
            for decoded in &mut out[start..] {
                match decoded {
                    Decoded::Signal(s) if s.kind == "codelia.response" => {
                        s.payload
                            .insert("method".into(), Value::String(method.clone()));
                    }
                    _ => {}
                }
            }
        }
    }

    /// The message for a signal (a request or a response), or why there is none.
    pub fn encode(&mut self, signal: &Signal) -> Result<Value, EncodeError> {
        match signal.kind.as_str() {
            "prompt" => self.run_start(signal),
            control::CANCEL | control::INTERRUPT => self.run_cancel(signal),
            control::ANSWER => self.answer(signal),
            other => Err(EncodeError::Unsupported(other.to_owned())),
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id.to_string();
        self.next_id += 1;
        self.sent.insert(id.clone(), method.to_owned());
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    fn run_start(&mut self, signal: &Signal) -> Result<Value, EncodeError> {
        let text = match signal.payload.get("text") {
            Some(Value::String(text)) => text.clone(),
            None | Some(Value::Null) => return Err(missing(signal, "text")),
            Some(_) => return Err(invalid(signal, "text", "a string")),
        };
        let mut params = json!({"input": {"type": "text", "text": text}});
        match signal.payload.get("sessionId") {
            Some(Value::String(session)) => params["session_id"] = Value::String(session.clone()),
            None | Some(Value::Null) => {}
            Some(_) => return Err(invalid(signal, "sessionId", "a string")),
        }
        Ok(self.request("run.start", params))
    }

    fn run_cancel(&mut self, signal: &Signal) -> Result<Value, EncodeError> {
        let run = match signal.payload.get("runId") {
            Some(Value::String(run)) => run.clone(),
            None | Some(Value::Null) => self.current_run().ok_or(EncodeError::NoRun)?.to_owned(),
            Some(_) => return Err(invalid(signal, "runId", "a string")),
        };
        let mut params = json!({"run_id": run});
        if let Some(Value::String(reason)) = signal.payload.get("reason") {
            params["reason"] = Value::String(reason.clone());
        }
        Ok(self.request("run.cancel", params))
    }

    fn answer(&mut self, signal: &Signal) -> Result<Value, EncodeError> {
        let key = match signal.payload.get("promptId") {
            Some(Value::String(id)) => id.clone(),
            Some(id @ Value::Number(_)) => id.to_string(),
            None | Some(Value::Null) => return Err(missing(signal, "promptId")),
            Some(_) => return Err(invalid(signal, "promptId", "a string")),
        };
        let cancelled = match signal.payload.get("cancelled") {
            Some(Value::Bool(b)) => *b,
            None | Some(Value::Null) => false,
            Some(_) => return Err(invalid(signal, "cancelled", "a boolean")),
        };
        let value = signal.payload.get("value");
        if !cancelled && value.is_none() {
            return Err(missing(signal, "value"));
        }
        let pending = self
            .decoder
            .pending_request(&key)
            .ok_or_else(|| EncodeError::UnknownPrompt(key.clone()))?;
        let answer = if cancelled {
            cancelled_answer(&pending.method)
        } else {
            value_answer(signal, &pending.method, value.unwrap_or(&Value::Null))?
        };
        let id = pending.id.clone();
        self.decoder.take_pending(&key);
        Ok(match answer {
            Answer::Result(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Answer::Error(code, message) => json!({
                "jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}
            }),
        })
    }
}

enum Answer {
    Result(Value),
    Error(i64, &'static str),
}

fn cancelled_answer(method: &str) -> Answer {
    match method {
        "ui.confirm.request" => Answer::Result(json!({"ok": false})),
        "ui.prompt.request" => Answer::Result(json!({"value": null})),
        "ui.pick.request" => Answer::Result(json!({"ids": []})),
        "client.tool.call" => Answer::Result(json!({"ok": false, "error": "cancelled"})),
        _ => Answer::Error(USER_CANCELLED, "user cancelled"),
    }
}

fn value_answer(signal: &Signal, method: &str, value: &Value) -> Result<Answer, EncodeError> {
    Ok(Answer::Result(match method {
        "ui.confirm.request" => match value {
            Value::Bool(ok) => json!({"ok": ok}),
            Value::Object(o) if o.get("ok").is_some_and(Value::is_boolean) => value.clone(),
            _ => return Err(invalid(signal, "value", "a boolean or an object with `ok`")),
        },
        "ui.prompt.request" => match value {
            Value::String(_) | Value::Null => json!({"value": value}),
            _ => return Err(invalid(signal, "value", "a string or null")),
        },
        "ui.pick.request" => match value {
            Value::String(id) => json!({"ids": [id]}),
            Value::Array(ids) if ids.iter().all(Value::is_string) => json!({"ids": ids}),
            _ => return Err(invalid(signal, "value", "an id or an array of ids")),
        },
        "client.tool.call" => json!({"ok": true, "result": value}),
        _ => value.clone(),
    }))
}

fn missing(signal: &Signal, field: &'static str) -> EncodeError {
    EncodeError::Field(FieldError::Missing {
        kind: signal.kind.to_string(),
        field,
    })
}

fn invalid(signal: &Signal, field: &'static str, expected: &'static str) -> EncodeError {
    EncodeError::Field(FieldError::Invalid {
        kind: signal.kind.to_string(),
        field,
        expected,
    })
}
