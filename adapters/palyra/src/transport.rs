//! The Palyra transport: `type = "palyra"` as a source (listen only) and as a two-way
//! output (`inbound: true`).
//!
//! **Receiving** (`mode = "realtime"`, the default): the realtime WebSocket
//! (`ws://…/realtime/v1/ws`, `Authorization: Bearer <token>`). Each connection sends the
//! `handshake` (with the resume cursor once an event has been seen) and, on
//! `handshake.accepted`, a `subscribe` for `topics` and `session`; event frames are decoded
//! by [`PalyraDecoder`], which drops every event at or below the cursor, so a reconnect
//! repeats no signal. Connection frames (`handshake.accepted`, `subscribed`, `pong`) are
//! not signals. The socket connects and reconnects through `patchbay_transport` (`wss://`
//! when `url` is `https://`; `ca_file`): capped exponential backoff and jitter
//! (`backoff_initial_ms`, `backoff_max_ms`, at most `max_attempts` reconnect attempts in a
//! row when set), each attempt up to the accepted handshake bounded by
//! `connect_timeout_ms`, the count reset by each accepted handshake; an HTTP 401/403 on
//! the upgrade or an authentication `error` frame is a failure, not retried. Health:
//! `Starting` while connecting, `Ok` once accepted, `Recovering` ("retrying in N s:
//! reason"), `Failed` with the reason.
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
use patchbay_graph::approvals::{Approvals, Route};
use patchbay_graph::config::MAX_DURATION_MS;
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, HealthState, LinkEnds, Options, Output, OutputContext,
    Source, SourceContext,
};
use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{Object, Signal, control, now_ms};
use patchbay_transport::{
    Backoff, Defaults, Driver, Ended, Link, Scheme, TransportConfig, TransportOptions, WsStream,
    client_builder_with, describe_http_error, describe_ws_error, parse_options,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::http::{HeaderValue, header};

use crate::{
    ACP_COMMAND_PATH, AcpClientContext, AcpCommander, AcpRequest, HandshakeOptions, PalyraDecoder,
    RealtimeResume, Subscription,
};

pub use patchbay_graph::config::Secret;

/// The component type name in configs.
pub const TYPE_NAME: &str = "palyra";
/// The realtime WebSocket path.
pub const REALTIME_PATH: &str = "/realtime/v1/ws";

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

/// Palyra's transport defaults: `url` required, retry forever.
#[derive(Debug, Clone, Copy, schemars::JsonSchema)]
pub struct PalyraDefaults;

impl Defaults for PalyraDefaults {
    const SCHEME: Scheme = Scheme::Http;
    const URL_EXAMPLE: &'static str = "http://127.0.0.1:7142";
}

/// `[sources.NAME]` / `[outputs.NAME]` `type = "palyra"`.
///
/// Declared under `[outputs]`, its queue (`queue`, default 1024 signals) keeps taking
/// controls whatever the daemon's state; when it overflows the oldest one is dropped and
/// counted (`dropped`): `when_full` defaults to `drop_oldest`, so that a slow daemon never
/// stalls the graph.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct PalyraConfig {
    /// The daemon and the realtime connection: `url` (the daemon's base URL,
    /// `http://host:port`, or `https://` for TLS; the realtime socket is `ws(s)://` on the
    /// same address), `backoff_initial_ms` (default 1000), `backoff_max_ms` (default
    /// 30000), `max_attempts` (default: retry forever), `connect_timeout_ms` (up to the
    /// accepted handshake; default 10000), `ca_file`.
    #[serde(flatten)]
    pub transport: TransportOptions<PalyraDefaults>,
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
    /// Attempts per ACP command (1 = no retry; at most 100).
    #[serde(default = "default_command_attempts")]
    pub command_attempts: u32,
    /// Delay before the first command retry, in ms (doubles per retry; at most 86400000,
    /// one day).
    #[serde(default = "default_command_backoff_ms")]
    pub command_backoff_ms: u64,
    /// Realtime heartbeat to negotiate, in ms (from 1 to 86400000, one day); patchbay
    /// pings at this interval.
    #[serde(default)]
    pub heartbeat_interval_ms: Option<u64>,
    /// Timeout of one HTTP request (not of a streaming run), in ms (from 1 to 86400000,
    /// one day).
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
}

/// The most attempts per ACP command.
const MAX_COMMAND_ATTEMPTS: u32 = 100;

fn default_client_id() -> String {
    "patchbay".into()
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

impl TransportConfig for PalyraConfig {
    type Defaults = PalyraDefaults;
    fn transport(&self) -> &TransportOptions<PalyraDefaults> {
        &self.transport
    }
}

impl PalyraConfig {
    /// Parses and checks a component's options (no I/O).
    pub fn from_options(options: &Options<'_>) -> Result<PalyraConfig, Diagnostic> {
        let config: PalyraConfig = parse_options(options)?;
        if config.mode == Mode::Console && config.session.as_deref().is_none_or(str::is_empty) {
            return Err(options.error_at("session", "console mode needs `session`"));
        }
        options.check_range(
            "command_attempts",
            config.command_attempts,
            1..=MAX_COMMAND_ATTEMPTS,
        )?;
        options.check_range(
            "command_backoff_ms",
            config.command_backoff_ms,
            0..=MAX_DURATION_MS,
        )?;
        options.check_range_opt(
            "heartbeat_interval_ms",
            config.heartbeat_interval_ms,
            1..=MAX_DURATION_MS,
        )?;
        options.check_range(
            "request_timeout_ms",
            config.request_timeout_ms,
            1..=MAX_DURATION_MS,
        )?;
        Ok(config)
    }

    /// `host:port[/prefix]` of the URL, and whether it is `https://`.
    fn base(&self) -> (&str, bool) {
        let url = self.transport.url().trim_end_matches('/');
        match url.strip_prefix("https://") {
            Some(rest) => (rest, true),
            None => (url.strip_prefix("http://").unwrap_or(url), false),
        }
    }

    /// The realtime WebSocket URL (`wss://` for an `https://` daemon).
    pub fn realtime_url(&self) -> String {
        let (base, tls) = self.base();
        let scheme = if tls { "wss" } else { "ws" };
        format!("{scheme}://{base}{REALTIME_PATH}")
    }

    /// `http(s)://host:port[/prefix]`, as configured.
    fn http_base(&self) -> String {
        let (base, tls) = self.base();
        let scheme = if tls { "https" } else { "http" };
        format!("{scheme}://{base}")
    }

    /// The ACP command URL.
    pub fn command_url(&self) -> String {
        format!("{}{ACP_COMMAND_PATH}", self.http_base())
    }

    /// The console run stream URL of the session.
    pub fn console_url(&self) -> String {
        format!(
            "{}/console/v1/chat/sessions/{}/messages/stream",
            self.http_base(),
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
            .filter(|t| !t.is_blank())
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

fn http_client(config: &PalyraConfig) -> Result<reqwest::Client, ComponentError> {
    let tls = config.transport.tls()?;
    Ok(client_builder_with(&tls)
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
            match config.mode {
                Mode::Realtime => realtime_loop(config, source, cx, None, None).await,
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
    let commander = config.client_context().map(|c| {
        Arc::new(Mutex::new(Answering {
            commander: AcpCommander::new(c),
            board: Arc::clone(cx.telemetry().approvals()),
            component: cx.name().to_owned(),
        }))
    });
    let inbound = cx.inbound().cloned();
    let mut tasks = tokio::task::JoinSet::new();

    if let Some(inbound) = &inbound {
        match config.mode {
            Mode::Realtime => {
                tasks.spawn(realtime_loop(
                    config.clone(),
                    source.clone(),
                    inbound.clone(),
                    Some(cx.stats().clone()),
                    commander.clone(),
                ));
            }
            Mode::Console => {
                cx.stats().set_state(HealthState::Ok, None);
                inbound.stats().set_state(HealthState::Ok, None);
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
        // A promptless answer decides the oldest approval of the graph: this component's,
        // or another's (then it is not for Palyra).
        let signal = match cx.telemetry().approvals().route(cx.name(), signal) {
            Route::Handle(signal) => signal,
            Route::Elsewhere => {
                cx.delivered(1);
                continue;
            }
        };
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
                .commander
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
                Err(err) => last_error = describe_http_error(&err),
            },
            Err(err) => last_error = describe_http_error(&err),
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
    signal.correlation_id = request.run_id.as_deref().map(Into::into);
    Decoded::Signal(signal)
}

/// The realtime socket, run by the transport's [`Driver`] (under `[sources]` for the
/// source, on the inbound side for the output, whose commands go over HTTP meanwhile).
async fn realtime_loop(
    config: Arc<PalyraConfig>,
    source: String,
    emit: SourceContext,
    output: Option<Arc<patchbay_graph::ComponentStats>>,
    commander: Option<Arc<Mutex<Answering>>>,
) -> Result<(), ComponentError> {
    let mut link = Realtime {
        decoder: PalyraDecoder::new(source),
        config,
        commander,
    };
    let mut driver = Driver::new("palyra", &link.config.transport, LinkEnds::source(&emit))
        .with_url(&link.config.realtime_url());
    if let Some(output) = output {
        driver = driver.mirror_health(output);
    }
    driver.run(&mut link).await
}

/// The realtime link's state across reconnects: the decoder holds the resume cursor.
struct Realtime {
    config: Arc<PalyraConfig>,
    decoder: PalyraDecoder,
    commander: Option<Arc<Mutex<Answering>>>,
}

impl Link for Realtime {
    type Connection = WsStream;

    /// The upgrade (with the bearer token), the `handshake` up to `handshake.accepted`,
    /// then the `subscribe`.
    async fn connect(&mut self, ends: &LinkEnds<'_>) -> Result<WsStream, Ended> {
        let Some(emit) = ends.signals_in else {
            return Err(Ended::Stop);
        };
        let config = Arc::clone(&self.config);
        let bearer = config
            .bearer()
            .and_then(|b| HeaderValue::from_str(&b).ok())
            .map(|mut value| {
                value.set_sensitive(true);
                (header::AUTHORIZATION, value)
            });
        let mut ws = config
            .transport
            .open_websocket_at(&config.realtime_url(), bearer)
            .await?;
        let handshake = self
            .decoder
            .resume()
            .handshake_frame(&config.handshake_options());
        send(&mut ws, handshake).await?;
        let mut out = Vec::new();
        loop {
            let value = match next_frame(&mut ws).await? {
                Frame::Json(value) => value,
                Frame::Text(text) => {
                    self.decoder.decode_frame(&text, &mut out);
                    emit_all(emit, self.commander.as_deref(), &mut out)
                        .await
                        .map_err(|_| Ended::Stop)?;
                    continue;
                }
            };
            match value.get("type").and_then(Value::as_str) {
                Some("handshake.accepted") => {
                    send(
                        &mut ws,
                        RealtimeResume::subscribe_frame(&config.subscription()),
                    )
                    .await?;
                    return Ok(ws);
                }
                Some("error") if is_auth_error(&value) => {
                    let message = value
                        .pointer("/payload/error/message")
                        .and_then(Value::as_str)
                        .unwrap_or("authentication refused");
                    return Err(Ended::Refused(format!(
                        "realtime handshake refused: {message}"
                    )));
                }
                _ => {
                    self.decoder.decode_value(value, None, &mut out);
                    emit_all(emit, self.commander.as_deref(), &mut out)
                        .await
                        .map_err(|_| Ended::Stop)?;
                }
            }
        }
    }

    /// Events until the connection ends, pinging at the heartbeat interval.
    async fn session(&mut self, mut ws: WsStream, ends: &LinkEnds<'_>) -> Ended {
        let Some(emit) = ends.signals_in else {
            return Ended::Stop;
        };
        let ping_every = Duration::from_millis(
            self.config
                .heartbeat_interval_ms
                .unwrap_or(15_000)
                .max(1_000),
        );
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + ping_every, ping_every);
        let mut out = Vec::new();
        loop {
            let frame = tokio::select! {
                f = next_frame(&mut ws) => f,
                _ = ping.tick() => {
                    let frame = RealtimeResume::ping_frame(json!({ "sent_at_unix_ms": now_ms() }));
                    if let Err(ended) = send(&mut ws, frame).await {
                        return ended;
                    }
                    continue;
                }
            };
            match frame {
                Err(ended) => return ended,
                Ok(Frame::Text(text)) => self.decoder.decode_frame(&text, &mut out),
                Ok(Frame::Json(value)) => match value.get("type").and_then(Value::as_str) {
                    Some("subscribed" | "pong" | "handshake.accepted") => continue,
                    _ => self.decoder.decode_value(value, None, &mut out),
                },
            }
            if emit_all(emit, self.commander.as_deref(), &mut out)
                .await
                .is_err()
            {
                return Ended::Stop;
            }
        }
    }
}

/// A realtime text frame: JSON, or text that is not (which the decoder reports).
enum Frame {
    Json(Value),
    Text(String),
}

/// The next text frame; a close or an error ends the connection.
async fn next_frame(ws: &mut WsStream) -> Result<Frame, Ended> {
    loop {
        let text = match ws.next().await {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(frame))) => {
                return Err(Ended::Lost(frame.map_or_else(
                    || "closed".to_owned(),
                    |f| format!("closed: {}", f.reason),
                )));
            }
            Some(Ok(_)) => continue,
            Some(Err(err)) => return Err(Ended::Lost(describe_ws_error(&err))),
            None => return Err(Ended::Lost("connection closed".into())),
        };
        return Ok(match serde_json::from_str::<Value>(text.as_str()) {
            Ok(value) => Frame::Json(value),
            Err(_) => Frame::Text(text.as_str().to_owned()),
        });
    }
}

async fn send(ws: &mut WsStream, frame: Value) -> Result<(), Ended> {
    ws.send(Message::Text(frame.to_string().into()))
        .await
        .map_err(|err| Ended::Lost(describe_ws_error(&err)))
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

/// What an output that answers Palyra's approvals keeps about the stream it reads: the
/// ACP commander (the last run seen), and the graph's board of approvals with this
/// component's name (its approvals are listed there, and promptless answers find them).
struct Answering {
    commander: AcpCommander,
    board: Arc<Approvals>,
    component: String,
}

async fn emit_all(
    emit: &SourceContext,
    commander: Option<&Mutex<Answering>>,
    out: &mut Vec<Decoded>,
) -> Result<(), patchbay_graph::component::Closed> {
    for mut decoded in out.drain(..) {
        if let (Some(answering), Decoded::Signal(signal)) = (commander, &mut decoded) {
            let mut answering = answering.lock().unwrap_or_else(|e| e.into_inner());
            answering.commander.observe(signal);
            answering.board.note_emitted(&answering.component, signal);
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
    commander: Option<Arc<Mutex<Answering>>>,
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
    commander: Option<&Mutex<Answering>>,
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
        .map_err(|e| format!("console run: {}", describe_http_error(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("console run refused: HTTP {status}"));
    }
    let mut decoder = PalyraDecoder::new(source);
    let mut body = response.bytes_stream();
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| format!("console run cut: {}", describe_http_error(&e)))?;
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
        Options::parse_snippet_with(
            &format!("url = \"http://127.0.0.1:7142/\"\n{extra}"),
            PalyraConfig::from_options,
        )
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
        assert_eq!(c.transport.max_attempts, None);
        assert_eq!(c.transport.backoff_initial_ms, 1_000);
        assert_eq!(c.transport.backoff_max_ms, 30_000);
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
    fn an_https_daemon_is_reached_over_tls() {
        let c: PalyraConfig = Options::parse_snippet_with(
            "url = \"https://palyra.example:7142\"\nsession = \"S\"",
            PalyraConfig::from_options,
        )
        .expect("config parses");
        assert_eq!(c.realtime_url(), "wss://palyra.example:7142/realtime/v1/ws");
        assert_eq!(
            c.command_url(),
            "https://palyra.example:7142/console/v1/acp/command"
        );
    }

    #[test]
    fn unknown_options_are_refused() {
        let err = Options::parse_snippet_with(
            "url = \"http://x\"\nsesion = \"s\"",
            PalyraConfig::from_options,
        )
        .expect_err("unknown key");
        assert_eq!((err.line, err.col), (2, 1), "{err}");
        assert!(err.message.contains("did you mean `session`"), "{err}");
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
