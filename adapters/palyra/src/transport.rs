//! The Palyra transport: `type = "palyra"` as a source (listen only) and as a two-way
//! output (`inbound: true`).
//!
//! **Receiving** (`mode = "realtime"`, the default): the realtime WebSocket
//! (`ws://…/realtime/v1/ws`, `Authorization: Bearer <token>`). Each connection sends the
//! `handshake` (with the resume cursor once an event has been seen) and, on
//! `handshake.accepted`, a `subscribe` for `topics` and `session`; event frames are decoded
//! by [`PalyraDecoder`], which drops every event at or below the cursor, so a reconnect
//! repeats no signal. Connection frames (`handshake.accepted`, `subscribed`, `pong`) are
//! not signals. The socket reconnects with capped exponential backoff and jitter
//! (`backoff_initial_ms`, `backoff_max_ms`, at most `max_attempts` failures in a row when
//! set), reset by each accepted handshake; an HTTP 401/403 on the upgrade or an
//! authentication `error` frame is a failure, not retried. Health: `Starting` while
//! connecting, `Ok` once accepted, `Recovering` ("retrying in N s"), `Failed` with the
//! reason.
//!
//! **Console runs** (`mode = "console"`, or a `prompt {text}` signal given to the output):
//! `POST /console/v1/chat/sessions/{session}/messages/stream` with `{"text": …}`, the
//! `application/x-ndjson` answer read line by line as it streams. In console mode the
//! lines are decoded into signals; a console source posts its configured `prompt` once
//! and ends with the run. In realtime mode the run's events already come from the
//! socket, so the console answer of a `prompt` is read to its end but not decoded (each
//! event would otherwise arrive twice).
//!
//! **Commands** (the output): `control.cancel`/`control.interrupt` → `run.abort`,
//! `control.answer` → `approval.decide`, posted as ACP envelopes to
//! `POST /console/v1/acp/command` ([`AcpCommander`]). A transport failure (no connection,
//! a timeout, HTTP 408/429/5xx) is retried up to `command_attempts` times with a fresh
//! `request_id` and the same `idempotency_key` ([`AcpRequest::retry`]); the result
//! envelope (`ok` → `palyra.command_result`, else `error`) is emitted from `NAME.inbound`,
//! and so is an `error {code: "acp_unreachable"}` when every attempt failed. Other control
//! types are refused (counted, with the reason).
//!
//! The token is never logged or put in an error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use patchbay_graph::{
    BoxFuture, ComponentError, ComponentStats, Diagnostic, HealthState, Options, Output,
    OutputContext, Source, SourceContext,
};
use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{Object, Signal, control, now_ms};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode, header};

use crate::{
    ACP_COMMAND_PATH, AcpClientContext, AcpCommander, AcpRequest, HandshakeOptions, PalyraDecoder,
    RealtimeResume, Subscription,
};
use patchbay_graph::backoff::{self, Backoff};

/// The component type name in configs.
pub const TYPE_NAME: &str = "palyra";
/// The realtime WebSocket path.
pub const REALTIME_PATH: &str = "/realtime/v1/ws";

/// A secret config value: never shown by `Debug`.
#[derive(Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"<secret>\"")
    }
}

/// Which Palyra surface a component reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The realtime WebSocket (events of every run of the session).
    #[default]
    Realtime,
    /// Console run streams of the prompts patchbay sends.
    Console,
}

/// `[sources.NAME]` / `[outputs.NAME]` `type = "palyra"`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PalyraConfig {
    /// The daemon's base URL, `http://host:port` (plain HTTP: loopback).
    pub url: String,
    /// Bearer token of the console/realtime API.
    #[serde(default)]
    pub token: Option<Secret>,
    /// The console session id: the realtime subscription's session filter, and the
    /// session console prompts go to (required in console mode).
    #[serde(default)]
    pub session: Option<String>,
    /// `"realtime"` (default) or `"console"`.
    #[serde(default)]
    pub mode: Mode,
    /// Console mode: a prompt sent when the component starts.
    #[serde(default)]
    pub prompt: Option<String>,
    /// The client id in the realtime handshake and the ACP client context.
    #[serde(default = "default_client_id")]
    pub client_id: String,
    /// ACP client context: the console session's principal (e.g. `user:ops`).
    #[serde(default)]
    pub owner_principal: Option<String>,
    /// ACP client context: the console session's device id.
    #[serde(default)]
    pub device_id: Option<String>,
    /// ACP client context: the console session's channel, if any.
    #[serde(default)]
    pub channel: Option<String>,
    /// Realtime topics to subscribe to (empty: all).
    #[serde(default)]
    pub topics: Vec<String>,
    /// Realtime: give up after this many connection failures in a row, a lost connection
    /// counting as one (unset: never give up).
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// First reconnect delay.
    #[serde(default = "default_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    /// Largest reconnect delay.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// Attempts per ACP command (1 = no retry).
    #[serde(default = "default_command_attempts")]
    pub command_attempts: u32,
    /// Delay before the first command retry (doubles per retry).
    #[serde(default = "default_command_backoff_ms")]
    pub command_backoff_ms: u64,
    /// Realtime heartbeat to negotiate; patchbay pings at this interval.
    #[serde(default)]
    pub heartbeat_interval_ms: Option<u64>,
    /// Timeout of one HTTP request (not of a streaming run), in ms.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
}

fn default_client_id() -> String {
    "patchbay".into()
}
fn default_backoff_initial_ms() -> u64 {
    1_000
}
fn default_backoff_max_ms() -> u64 {
    30_000
}
fn default_command_attempts() -> u32 {
    3
}
fn default_command_backoff_ms() -> u64 {
    250
}
fn default_request_timeout_ms() -> u64 {
    10_000
}

impl PalyraConfig {
    /// Parses and checks a component's options (no I/O).
    pub fn from_options(options: &Options<'_>) -> Result<PalyraConfig, Diagnostic> {
        let config: PalyraConfig = options.parse()?;
        if config.base().is_none() {
            return Err(options.error_at(
                "url",
                "`url` must be the daemon's http:// address (e.g. http://127.0.0.1:7142)",
            ));
        }
        if config.mode == Mode::Console && config.session.as_deref().is_none_or(str::is_empty) {
            return Err(options.error_at("session", "console mode needs `session`"));
        }
        if config.command_attempts == 0 {
            return Err(options.error_at("command_attempts", "must be at least 1"));
        }
        backoff::check_delays(options, config.backoff_initial_ms, config.backoff_max_ms)?;
        Ok(config)
    }

    /// `host:port[/prefix]` of an `http://` URL.
    fn base(&self) -> Option<&str> {
        let rest = self
            .url
            .trim()
            .trim_end_matches('/')
            .strip_prefix("http://")?;
        (!rest.is_empty()).then_some(rest)
    }

    /// The realtime WebSocket URL.
    pub fn realtime_url(&self) -> String {
        format!("ws://{}{REALTIME_PATH}", self.base().unwrap_or_default())
    }

    /// The ACP command URL.
    pub fn command_url(&self) -> String {
        format!(
            "http://{}{ACP_COMMAND_PATH}",
            self.base().unwrap_or_default()
        )
    }

    /// The console run stream URL of the session.
    pub fn console_url(&self) -> String {
        format!(
            "http://{}/console/v1/chat/sessions/{}/messages/stream",
            self.base().unwrap_or_default(),
            self.session.as_deref().unwrap_or_default()
        )
    }

    /// The realtime handshake options.
    pub fn handshake_options(&self) -> HandshakeOptions {
        let mut options = HandshakeOptions::new(self.client_id.clone());
        options.heartbeat_interval_ms = self.heartbeat_interval_ms;
        options
    }

    /// The realtime subscription.
    pub fn subscription(&self) -> Subscription {
        Subscription {
            topics: self.topics.clone(),
            session_ids: self.session.iter().cloned().collect(),
        }
    }

    /// The ACP client context, when the config names the principal and device.
    pub fn client_context(&self) -> Option<AcpClientContext> {
        let mut context = AcpClientContext::new(
            self.client_id.clone(),
            self.owner_principal.clone()?,
            self.device_id.clone()?,
        );
        context.channel = self.channel.clone();
        Some(context)
    }

    fn bearer(&self) -> Option<String> {
        self.token
            .as_ref()
            .filter(|t| !t.0.is_empty())
            .map(|t| format!("Bearer {}", t.0))
    }
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let config = PalyraConfig::from_options(options)?;
    if config.mode == Mode::Console && config.prompt.is_none() {
        return Err(options.error_at(
            "prompt",
            "a console-mode source needs a `prompt` to send (or declare it under [outputs] and send it `prompt` signals)",
        ));
    }
    Ok(Box::new(PalyraSource { config }))
}

pub(crate) fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(PalyraOutput {
        config: PalyraConfig::from_options(options)?,
    }))
}

/// Sets the health of several components at once (an output and its inbound source).
#[derive(Clone)]
struct Health(Vec<Arc<ComponentStats>>);

impl Health {
    fn set(&self, state: HealthState, detail: Option<String>) {
        for stats in &self.0 {
            stats.set_state(state, detail.clone());
        }
    }
}

fn http_client(config: &PalyraConfig) -> Result<reqwest::Client, ComponentError> {
    Ok(patchbay_http::client_builder()
        .connect_timeout(Duration::from_millis(config.request_timeout_ms))
        .build()?)
}

/// `palyra` under `[sources]`: listens only.
struct PalyraSource {
    config: PalyraConfig,
}

impl Source for PalyraSource {
    fn is_finite(&self) -> bool {
        self.config.mode == Mode::Console
    }

    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let config = Arc::new(self.config);
            let source = format!("palyra:{}", cx.name());
            let health = Health(vec![cx.stats().clone()]);
            match config.mode {
                Mode::Realtime => realtime_loop(config, source, cx, health, None).await,
                Mode::Console => {
                    let client = http_client(&config)?;
                    let text = config.prompt.clone().unwrap_or_default();
                    let run = console_run(&client, &config, &text, &source, &cx, None, true);
                    tokio::select! {
                        r = run => r.map_err(ComponentError::from),
                        _ = cx.shutdown().wait() => Ok(()),
                    }
                }
            }
        })
    }
}

/// `palyra` under `[outputs]`: commands out, events in.
struct PalyraOutput {
    config: PalyraConfig,
}

impl Output for PalyraOutput {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(run_output(Arc::new(self.config), cx))
    }
}

async fn run_output(config: Arc<PalyraConfig>, cx: OutputContext) -> Result<(), ComponentError> {
    let client = http_client(&config)?;
    let source = format!("palyra:{}", cx.name());
    let commander = config
        .client_context()
        .map(|c| Arc::new(Mutex::new(AcpCommander::new(c))));
    let inbound = cx.inbound().cloned();
    let mut health_stats = vec![cx.stats().clone()];
    if let Some(i) = &inbound {
        health_stats.push(i.stats().clone());
    }
    let health = Health(health_stats);
    let mut tasks = tokio::task::JoinSet::new();

    if let Some(inbound) = &inbound {
        match config.mode {
            Mode::Realtime => {
                tasks.spawn(realtime_loop(
                    config.clone(),
                    source.clone(),
                    inbound.clone(),
                    health.clone(),
                    commander.clone(),
                ));
            }
            Mode::Console => {
                health.set(HealthState::Ok, None);
                if let Some(text) = config.prompt.clone() {
                    tasks.spawn(console_task(
                        client.clone(),
                        config.clone(),
                        text,
                        source.clone(),
                        inbound.clone(),
                        commander.clone(),
                    ));
                }
            }
        }
    }

    while let Some(signal) = cx.next().await {
        let kind = signal.kind.as_str();
        if kind == "prompt" {
            let Some(text) = signal.payload.get("text").and_then(Value::as_str) else {
                cx.refused("a `prompt` signal needs a `text` string");
                continue;
            };
            if config.session.as_deref().is_none_or(str::is_empty) {
                cx.refused("prompts need `session` in the palyra config");
                continue;
            }
            match &inbound {
                Some(inbound) => {
                    tasks.spawn(console_task(
                        client.clone(),
                        config.clone(),
                        text.to_owned(),
                        source.clone(),
                        inbound.clone(),
                        commander.clone(),
                    ));
                    cx.delivered(1);
                }
                None => cx.refused("no inbound side to stream the run into"),
            }
        } else if control::is_control(kind) {
            let Some(commander) = &commander else {
                cx.refused(
                    "ACP commands need `owner_principal` and `device_id` in the palyra config",
                );
                continue;
            };
            let request = commander
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .encode(&signal);
            let request = match request {
                Ok(r) => r,
                Err(err) => {
                    cx.refused(&err);
                    continue;
                }
            };
            let outcome = send_command(&client, &config, request, &source).await;
            if matches!(outcome, Decoded::Signal(ref s) if s.kind == "palyra.command_result") {
                cx.delivered(1);
            }
            if let Some(inbound) = &inbound
                && inbound.emit_decoded(outcome).await.is_err()
            {
                break;
            }
        } else {
            cx.refused(format!("palyra cannot send `{kind}`"));
        }
        // Reap finished console runs.
        while tasks.try_join_next().is_some() {}
    }
    tasks.abort_all();
    Ok(())
}

/// Whether an HTTP status means the command may not have reached Palyra's dispatcher.
pub fn is_transport_failure(status: u16) -> bool {
    matches!(status, 408 | 429 | 502 | 503 | 504)
}

/// Posts one ACP command, retrying transport failures with a fresh `request_id` and the
/// same `idempotency_key`; returns the result signal.
async fn send_command(
    client: &reqwest::Client,
    config: &PalyraConfig,
    mut request: AcpRequest,
    source: &str,
) -> Decoded {
    let url = config.command_url();
    let mut backoff = Backoff::new(
        Duration::from_millis(config.command_backoff_ms),
        Duration::from_millis(config.command_backoff_ms.saturating_mul(16)),
        None,
    );
    let mut last_error = String::new();
    for attempt in 1..=config.command_attempts {
        let mut post = client
            .post(&url)
            .timeout(Duration::from_millis(config.request_timeout_ms))
            .header(header::CONTENT_TYPE, "application/json")
            .body(request.body().to_string());
        if let Some(bearer) = config.bearer() {
            post = post.header(header::AUTHORIZATION, bearer);
        }
        match post.send().await {
            Ok(response) if is_transport_failure(response.status().as_u16()) => {
                last_error = format!("HTTP {}", response.status());
            }
            Ok(response) => match response.bytes().await {
                Ok(body) => return request.decode_result(source, &body),
                Err(err) => last_error = without_url(&err),
            },
            Err(err) => last_error = without_url(&err),
        }
        if attempt < config.command_attempts {
            tokio::time::sleep(backoff.next_jittered().unwrap_or_default()).await;
            request = request.retry();
        }
    }
    let mut payload = Object::new();
    payload.insert("code".into(), json!("acp_unreachable"));
    payload.insert(
        "message".into(),
        json!(format!(
            "ACP command {} failed after {} attempts: {last_error}",
            request.command, config.command_attempts
        )),
    );
    payload.insert("severity".into(), json!("error"));
    let mut signal = Signal::new("error", source, payload)
        .with_meta("control_id", json!(request.control_id))
        .with_meta("idempotency_key", json!(request.idempotency_key));
    signal.correlation_id = request.run_id.clone();
    Decoded::Signal(signal)
}

/// A reqwest error's text without its URL (which is ours and harmless, but keeps messages
/// short).
fn without_url(err: &reqwest::Error) -> String {
    let kind = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    match std::error::Error::source(err) {
        Some(cause) => format!("{kind}: {cause}"),
        None => kind.to_owned(),
    }
}

/// How one realtime connection ended.
enum Ended {
    /// Lost (or never made): reconnect.
    Lost(String),
    /// Refused for authentication: do not retry.
    Refused(String),
    /// The graph is shutting down.
    GraphClosed,
}

async fn realtime_loop(
    config: Arc<PalyraConfig>,
    source: String,
    emit: SourceContext,
    health: Health,
    commander: Option<Arc<Mutex<AcpCommander>>>,
) -> Result<(), ComponentError> {
    let mut decoder = PalyraDecoder::new(source);
    let mut backoff = Backoff::new(
        Duration::from_millis(config.backoff_initial_ms),
        Duration::from_millis(config.backoff_max_ms),
        None,
    );
    let shutdown = emit.shutdown().clone();
    health.set(HealthState::Starting, None);
    loop {
        let ended = tokio::select! {
            ended = realtime_session(&config, &mut decoder, &emit, &health, commander.as_deref(), &mut backoff) => ended,
            _ = shutdown.wait() => return Ok(()),
        };
        let reason = match ended {
            Ended::GraphClosed => return Ok(()),
            Ended::Refused(reason) => {
                health.set(HealthState::Failed, Some(reason));
                shutdown.wait().await;
                return Ok(());
            }
            Ended::Lost(reason) => reason,
        };
        // Failures in a row, this one included (an accepted handshake resets the count).
        if let Some(max) = config.max_attempts
            && backoff.attempts().saturating_add(1) >= max
        {
            health.set(
                HealthState::Failed,
                Some(format!("gave up after {max} attempts: {reason}")),
            );
            shutdown.wait().await;
            return Ok(());
        }
        let delay = backoff.next_jittered().unwrap_or_default();
        health.set(
            HealthState::Recovering,
            Some(format!(
                "retrying in {} s ({reason})",
                delay.as_secs_f64().ceil() as u64
            )),
        );
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.wait() => return Ok(()),
        }
    }
}

/// Whether a realtime `error` frame refuses the client's credentials.
fn is_auth_error(frame: &Value) -> bool {
    let code = frame
        .pointer("/payload/error/code")
        .or_else(|| frame.pointer("/payload/code"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_ascii_lowercase();
    [
        "auth",
        "unauthorized",
        "unauthenticated",
        "forbidden",
        "permission",
    ]
    .iter()
    .any(|w| code.contains(w))
}

async fn realtime_session(
    config: &PalyraConfig,
    decoder: &mut PalyraDecoder,
    emit: &SourceContext,
    health: &Health,
    commander: Option<&Mutex<AcpCommander>>,
    backoff: &mut Backoff,
) -> Ended {
    let mut request = match config.realtime_url().into_client_request() {
        Ok(r) => r,
        Err(err) => return Ended::Refused(format!("bad realtime URL: {err}")),
    };
    if let Some(bearer) = config.bearer()
        && let Ok(value) = HeaderValue::from_str(&bearer)
    {
        request.headers_mut().insert(header::AUTHORIZATION, value);
    }
    // `true`: TCP_NODELAY, so a small frame is not held back for an ACK.
    let mut ws = match tokio_tungstenite::connect_async_with_config(request, None, true).await {
        Ok((ws, _)) => ws,
        Err(tokio_tungstenite::tungstenite::Error::Http(response))
            if matches!(
                response.status(),
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
            ) =>
        {
            return Ended::Refused(format!(
                "realtime connection refused: HTTP {}",
                response.status()
            ));
        }
        Err(err) => return Ended::Lost(err.to_string()),
    };
    let handshake = decoder
        .resume()
        .handshake_frame(&config.handshake_options());
    if let Err(err) = ws.send(Message::Text(handshake.to_string().into())).await {
        return Ended::Lost(err.to_string());
    }
    let ping_every =
        Duration::from_millis(config.heartbeat_interval_ms.unwrap_or(15_000).max(1_000));
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
    let mut accepted = false;
    let mut out = Vec::new();
    loop {
        let message = tokio::select! {
            m = ws.next() => m,
            _ = ping.tick(), if accepted => {
                let frame = RealtimeResume::ping_frame(json!({ "sent_at_unix_ms": now_ms() }));
                if let Err(err) = ws.send(Message::Text(frame.to_string().into())).await {
                    return Ended::Lost(err.to_string());
                }
                continue;
            }
        };
        let text = match message {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(frame))) => {
                return Ended::Lost(
                    frame.map_or_else(|| "closed".to_owned(), |f| format!("closed: {}", f.reason)),
                );
            }
            Some(Ok(_)) => continue,
            Some(Err(err)) => return Ended::Lost(err.to_string()),
            None => return Ended::Lost("connection closed".into()),
        };
        let Ok(value) = serde_json::from_str::<Value>(text.as_str()) else {
            decoder.decode_frame(text.as_str(), &mut out);
            if emit_all(emit, commander, &mut out).await.is_err() {
                return Ended::GraphClosed;
            }
            continue;
        };
        match value.get("type").and_then(Value::as_str) {
            Some("handshake.accepted") => {
                accepted = true;
                backoff.reset();
                health.set(HealthState::Ok, None);
                let subscribe = RealtimeResume::subscribe_frame(&config.subscription());
                if let Err(err) = ws.send(Message::Text(subscribe.to_string().into())).await {
                    return Ended::Lost(err.to_string());
                }
            }
            Some("subscribed" | "pong") => {}
            Some("error") if !accepted && is_auth_error(&value) => {
                let message = value
                    .pointer("/payload/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("authentication refused");
                return Ended::Refused(format!("realtime handshake refused: {message}"));
            }
            _ => {
                decoder.decode_value(value, None, &mut out);
                if emit_all(emit, commander, &mut out).await.is_err() {
                    return Ended::GraphClosed;
                }
            }
        }
    }
}

async fn emit_all(
    emit: &SourceContext,
    commander: Option<&Mutex<AcpCommander>>,
    out: &mut Vec<Decoded>,
) -> Result<(), patchbay_graph::component::Closed> {
    for decoded in out.drain(..) {
        if let (Some(commander), Decoded::Signal(signal)) = (commander, &decoded) {
            commander
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .observe(signal);
        }
        emit.emit_decoded(decoded).await?;
    }
    Ok(())
}

async fn console_task(
    client: reqwest::Client,
    config: Arc<PalyraConfig>,
    text: String,
    source: String,
    emit: SourceContext,
    commander: Option<Arc<Mutex<AcpCommander>>>,
) -> Result<(), ComponentError> {
    let decode = config.mode == Mode::Console;
    if let Err(message) = console_run(
        &client,
        &config,
        &text,
        &source,
        &emit,
        commander.as_deref(),
        decode,
    )
    .await
    {
        let mut payload = Object::new();
        payload.insert("code".into(), json!("console_stream"));
        payload.insert("message".into(), json!(message));
        payload.insert("severity".into(), json!("error"));
        let _ = emit.emit(Signal::new("error", source, payload)).await;
    }
    Ok(())
}

/// Posts a prompt to the session's console run stream and reads the NDJSON answer as it
/// streams, decoding it when `decode` is set.
async fn console_run(
    client: &reqwest::Client,
    config: &PalyraConfig,
    text: &str,
    source: &str,
    emit: &SourceContext,
    commander: Option<&Mutex<AcpCommander>>,
    decode: bool,
) -> Result<(), String> {
    let mut post = client
        .post(config.console_url())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/x-ndjson")
        .body(json!({ "text": text }).to_string());
    if let Some(bearer) = config.bearer() {
        post = post.header(header::AUTHORIZATION, bearer);
    }
    let response = post
        .send()
        .await
        .map_err(|e| format!("console run: {}", without_url(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("console run refused: HTTP {status}"));
    }
    let mut decoder = PalyraDecoder::new(source);
    let mut body = response.bytes_stream();
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| format!("console run cut: {}", without_url(&e)))?;
        if decode {
            decoder.feed(&chunk, &mut out);
            emit_all(emit, commander, &mut out)
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    if decode {
        decoder.finish(&mut out);
        emit_all(emit, commander, &mut out)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> PalyraConfig {
        Options::parse_snippet(&format!("url = \"http://127.0.0.1:7142/\"\n{extra}"))
            .expect("config parses")
    }

    #[test]
    fn urls_and_defaults() {
        let c = config("session = \"S1\"\ntoken = \"tok\"");
        assert_eq!(c.realtime_url(), "ws://127.0.0.1:7142/realtime/v1/ws");
        assert_eq!(
            c.command_url(),
            "http://127.0.0.1:7142/console/v1/acp/command"
        );
        assert_eq!(
            c.console_url(),
            "http://127.0.0.1:7142/console/v1/chat/sessions/S1/messages/stream"
        );
        assert_eq!(c.mode, Mode::Realtime);
        assert_eq!(c.command_attempts, 3);
        assert_eq!(c.bearer().as_deref(), Some("Bearer tok"));
        assert!(
            !format!("{c:?}").contains("tok\""),
            "the token is not shown"
        );
        assert_eq!(c.subscription().session_ids, ["S1"]);
        assert!(c.client_context().is_none());
        let c = config("owner_principal = \"user:ops\"\ndevice_id = \"d\"\nchannel = \"c\"");
        let ctx = c.client_context().expect("context");
        assert_eq!(ctx.owner_principal, "user:ops");
        assert_eq!(ctx.channel.as_deref(), Some("c"));
    }

    #[test]
    fn unknown_options_are_refused() {
        let err = Options::parse_snippet::<PalyraConfig>("url = \"http://x\"\nsesion = \"s\"");
        assert!(err.is_err());
    }

    #[test]
    fn transport_failures_are_retried_others_are_answers() {
        for s in [408, 429, 502, 503, 504] {
            assert!(is_transport_failure(s), "{s}");
        }
        for s in [200, 400, 401, 404, 409, 500] {
            assert!(!is_transport_failure(s), "{s}");
        }
    }

    #[test]
    fn auth_error_frames() {
        assert!(is_auth_error(
            &json!({"type":"error","payload":{"error":{"code":"auth_failed","message":"no"}}})
        ));
        assert!(!is_auth_error(
            &json!({"type":"error","payload":{"error":{"code":"rate_limited"}}})
        ));
    }
}
