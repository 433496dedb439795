//! The connection handshake and RPC bookkeeping: what to send, given what arrived.

use std::collections::HashMap;

use patchbay_signal::next_id;
use serde_json::{Value, json};

/// What patchbay says about itself in `connect` (the parts a user may change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectConfig {
    /// The gateway token (`gateway.auth.token` of `~/.openclaw/openclaw.json`); empty
    /// sends no `auth`.
    pub token: String,
    /// `client.version`.
    pub client_version: String,
    /// `client.platform` (`linux`, `macos`, …).
    pub platform: String,
    /// Requested scopes. `operator.read` receives events; aborting a run
    /// (`chat.abort`) needs `operator.write`, resolving approvals `operator.approvals`.
    pub scopes: Vec<String>,
    /// Capabilities; `tool-events` is what makes the gateway send the tool stream.
    pub caps: Vec<String>,
    /// Lowest protocol accepted.
    pub min_protocol: u32,
    /// Highest protocol accepted (current gateways answer 4 and refuse 3-only clients).
    pub max_protocol: u32,
}

impl ConnectConfig {
    /// The defaults: client `gateway-client` in `backend` mode with this crate's version
    /// and the OS name, role `operator`, scope `operator.read`, caps `tool-events`,
    /// protocols 3 to 4.
    pub fn new(token: impl Into<String>) -> Self {
        ConnectConfig {
            token: token.into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
            platform: match std::env::consts::OS {
                "macos" => "macos".into(),
                os => os.into(),
            },
            scopes: vec!["operator.read".into()],
            caps: vec!["tool-events".into()],
            min_protocol: 3,
            max_protocol: 4,
        }
    }
}

/// The `connect` request frame, in the shape the real gateway accepted (recorded in
/// `tests/fixtures/openclaw/`): `caps` and `auth` are left out when empty.
pub fn connect_frame(config: &ConnectConfig, id: &str) -> Value {
    let mut params = json!({
        "minProtocol": config.min_protocol,
        "maxProtocol": config.max_protocol,
        "client": {
            "id": "gateway-client",
            "version": config.client_version,
            "platform": config.platform,
            "mode": "backend",
        },
        "role": "operator",
        "scopes": config.scopes,
    });
    if !config.caps.is_empty() {
        params["caps"] = json!(config.caps);
    }
    if !config.token.is_empty() {
        params["auth"] = json!({"token": config.token});
    }
    json!({"type": "req", "id": id, "method": "connect", "params": params})
}

/// What the gateway said in `hello-ok`.
#[derive(Debug, Clone, PartialEq)]
pub struct Hello {
    /// The protocol version the connection speaks.
    pub protocol: Option<u64>,
    /// `server.version`.
    pub server_version: Option<String>,
    /// `server.connId`.
    pub conn_id: Option<String>,
    /// `policy.tickIntervalMs`: the gateway's keepalive period.
    pub tick_interval_ms: Option<u64>,
    /// The whole `hello-ok` payload (features, snapshot, auth, policy).
    pub payload: Value,
}

impl Hello {
    fn from_payload(payload: &Value) -> Self {
        let str_at = |ptr: &str| {
            payload
                .pointer(ptr)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        Hello {
            protocol: payload.get("protocol").and_then(Value::as_u64),
            server_version: str_at("/server/version"),
            conn_id: str_at("/server/connId"),
            tick_interval_ms: payload
                .pointer("/policy/tickIntervalMs")
                .and_then(Value::as_u64),
            payload: payload.clone(),
        }
    }
}

/// How a refused `connect` failed, so a transport knows whether to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Wrong, missing or unpaired credentials (`AUTH_*` details, `unauthorized`): do not
    /// retry, the configuration must change.
    Auth,
    /// Too many failed attempts (`AUTH_RATE_LIMITED`): retry later.
    RateLimited,
    /// No protocol version in common (`PROTOCOL_MISMATCH`): do not retry.
    ProtocolMismatch,
    /// Anything else: retry with the usual backoff.
    Other,
}

/// A `connect` the gateway refused (`res ok:false`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("OpenClaw refused the connection ({kind:?}): {message}")]
pub struct ConnectFailure {
    /// The classification.
    pub kind: FailureKind,
    /// `error.code` (e.g. `INVALID_REQUEST`).
    pub code: Option<String>,
    /// `error.details.code` (e.g. `AUTH_TOKEN_MISMATCH`, `PROTOCOL_MISMATCH`).
    pub detail_code: Option<String>,
    /// `error.message`.
    pub message: String,
    /// The whole `error` object.
    pub error: Value,
}

impl ConnectFailure {
    /// Classifies the `error` of a refused `connect`.
    pub fn from_error(error: &Value) -> Self {
        let code = error.get("code").and_then(Value::as_str).map(str::to_owned);
        let detail_code = error
            .pointer("/details/code")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let message = match error.get("message") {
            Some(Value::String(m)) => m.clone(),
            Some(Value::Null) | None => "connect refused".to_owned(),
            Some(other) => other.to_string(),
        };
        let lower = message.to_ascii_lowercase();
        let detail = detail_code.as_deref().unwrap_or_default();
        let kind = if detail == "AUTH_RATE_LIMITED" {
            FailureKind::RateLimited
        } else if detail.starts_with("AUTH_")
            || detail.starts_with("PAIRING_")
            || detail.starts_with("DEVICE_")
            || matches!(
                code.as_deref(),
                Some("UNAUTHORIZED" | "NOT_PAIRED" | "FORBIDDEN")
            )
            || lower.starts_with("unauthorized")
        {
            FailureKind::Auth
        } else if detail == "PROTOCOL_MISMATCH" || lower.contains("protocol mismatch") {
            FailureKind::ProtocolMismatch
        } else {
            FailureKind::Other
        };
        ConnectFailure {
            kind,
            code,
            detail_code,
            message,
            error: error.clone(),
        }
    }

    /// Whether connecting again can succeed without a configuration change.
    pub fn retryable(&self) -> bool {
        matches!(self.kind, FailureKind::RateLimited | FailureKind::Other)
    }
}

/// Where a handshake stands.
#[derive(Debug, Clone, PartialEq)]
pub enum HandshakeState {
    /// Connected, waiting for the gateway's `connect.challenge`.
    AwaitingChallenge,
    /// `connect` sent with this id, waiting for its `res`.
    AwaitingHello {
        /// The `connect` request id.
        request_id: String,
    },
    /// `hello-ok` received.
    Connected(Hello),
    /// The gateway refused.
    Failed(ConnectFailure),
}

/// What the transport must do after a frame.
#[derive(Debug, Clone, PartialEq)]
pub enum HandshakeStep {
    /// Send this frame (the `connect` request).
    Send(Value),
    /// The connection is established: from now on, frames go to the decoder.
    Connected(Hello),
    /// The gateway refused: close, and retry only if [`ConnectFailure::retryable`].
    Failed(ConnectFailure),
}

/// The client side of the OpenClaw handshake as a pure state machine: feed it every
/// incoming frame until it says [`HandshakeStep::Connected`] or
/// [`HandshakeStep::Failed`]; send what it says to send. One per connection (or
/// [`Handshake::reset`] on reconnect).
#[derive(Debug, Clone)]
pub struct Handshake {
    config: ConnectConfig,
    state: HandshakeState,
}

impl Handshake {
    /// A handshake waiting for the challenge.
    pub fn new(config: ConnectConfig) -> Self {
        Handshake {
            config,
            state: HandshakeState::AwaitingChallenge,
        }
    }

    /// Where it stands.
    pub fn state(&self) -> &HandshakeState {
        &self.state
    }

    /// Whether `hello-ok` was received.
    pub fn is_connected(&self) -> bool {
        matches!(self.state, HandshakeState::Connected(_))
    }

    /// Starts over, for a new connection.
    pub fn reset(&mut self) {
        self.state = HandshakeState::AwaitingChallenge;
    }

    /// Handles one incoming frame, with a fresh request id for `connect`.
    pub fn on_frame(&mut self, frame: &Value) -> Option<HandshakeStep> {
        self.on_frame_with_id(frame, || next_id().into())
    }

    /// [`Handshake::on_frame`] with the request id from `new_id` (deterministic tests).
    ///
    /// - the challenge (`{type:"event", event:"connect.challenge"}` or a bare
    ///   `{type:"connect.challenge"}`) → `Send(connect)`; a repeated challenge while
    ///   waiting for the answer is ignored;
    /// - the `res` of `connect`: `ok:true` with a `hello-ok` payload (or a `protocol`)
    ///   → `Connected`; an interim answer (`status: "accepted"`) keeps waiting, since an
    ///   RPC may answer twice with the same id; `ok:false` → `Failed`;
    /// - anything else (other frames, a second answer after the end) → `None`.
    pub fn on_frame_with_id(
        &mut self,
        frame: &Value,
        new_id: impl FnOnce() -> String,
    ) -> Option<HandshakeStep> {
        match &self.state {
            HandshakeState::AwaitingChallenge if is_challenge(frame) => {
                let id = new_id();
                let send = connect_frame(&self.config, &id);
                self.state = HandshakeState::AwaitingHello { request_id: id };
                Some(HandshakeStep::Send(send))
            }
            HandshakeState::AwaitingHello { request_id } => {
                if frame.get("type").and_then(Value::as_str) != Some("res")
                    || frame.get("id").and_then(Value::as_str) != Some(request_id.as_str())
                {
                    return None;
                }
                if frame.get("ok").and_then(Value::as_bool) == Some(true) {
                    let payload = frame.get("payload").cloned().unwrap_or(Value::Null);
                    let is_hello = payload.get("type").and_then(Value::as_str) == Some("hello-ok")
                        || payload.get("protocol").is_some_and(Value::is_u64);
                    if !is_hello {
                        return None;
                    }
                    let hello = Hello::from_payload(&payload);
                    self.state = HandshakeState::Connected(hello.clone());
                    Some(HandshakeStep::Connected(hello))
                } else {
                    let error = frame.get("error").cloned().unwrap_or(Value::Null);
                    let failure = ConnectFailure::from_error(&error);
                    self.state = HandshakeState::Failed(failure.clone());
                    Some(HandshakeStep::Failed(failure))
                }
            }
            _ => None,
        }
    }
}

/// Whether a frame is the gateway's `connect.challenge`, in either shape.
pub fn is_challenge(frame: &Value) -> bool {
    match frame.get("type").and_then(Value::as_str) {
        Some("connect.challenge") => true,
        Some("event") => frame.get("event").and_then(Value::as_str) == Some("connect.challenge"),
        _ => false,
    }
}

/// The outcome of a `res` for a request the transport registered.
#[derive(Debug, Clone, PartialEq)]
pub enum RpcOutcome {
    /// An interim answer (`ok:true`, `status: "accepted"`): the final one follows with
    /// the same id; the request stays pending.
    Accepted {
        /// The request id.
        id: String,
        /// Its method.
        method: String,
        /// The interim payload.
        payload: Value,
    },
    /// The final answer: `Ok(payload)` or `Err(error)`.
    Done {
        /// The request id.
        id: String,
        /// Its method.
        method: String,
        /// The payload, or the error object.
        result: Result<Value, Value>,
    },
}

/// Requests sent and not finally answered, so that a double answer (accepted, then ok)
/// is told apart from a final one, and a late duplicate is ignored.
#[derive(Debug, Clone, Default)]
pub struct PendingRequests {
    methods: HashMap<String, String>,
}

impl PendingRequests {
    /// No pending request.
    pub fn new() -> Self {
        Self::default()
    }

    /// Remembers a sent request.
    pub fn register(&mut self, id: impl Into<String>, method: impl Into<String>) {
        self.methods.insert(id.into(), method.into());
    }

    /// How many requests wait for their final answer.
    pub fn len(&self) -> usize {
        self.methods.len()
    }

    /// Whether none does.
    pub fn is_empty(&self) -> bool {
        self.methods.is_empty()
    }

    /// Forgets every request (the connection closed: no answer will come).
    pub fn clear(&mut self) {
        self.methods.clear();
    }

    /// Handles a `res` frame: `None` when it answers no pending request (not a `res`,
    /// unknown id, or an answer after the final one).
    pub fn on_response(&mut self, frame: &Value) -> Option<RpcOutcome> {
        if frame.get("type").and_then(Value::as_str) != Some("res") {
            return None;
        }
        let id = frame.get("id").and_then(Value::as_str)?;
        let method = self.methods.get(id)?.clone();
        let ok = frame.get("ok").and_then(Value::as_bool) == Some(true);
        let payload = frame.get("payload").cloned().unwrap_or(Value::Null);
        if ok && payload.get("status").and_then(Value::as_str) == Some("accepted") {
            return Some(RpcOutcome::Accepted {
                id: id.to_owned(),
                method,
                payload,
            });
        }
        self.methods.remove(id);
        let result = if ok {
            Ok(payload)
        } else {
            Err(frame.get("error").cloned().unwrap_or(Value::Null))
        };
        Some(RpcOutcome::Done {
            id: id.to_owned(),
            method,
            result,
        })
    }
}
