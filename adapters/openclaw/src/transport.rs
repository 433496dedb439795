//! The WebSocket transport: `type = "openclaw"` as a source (listen only) and as a
//! two-way output (aborts out, gateway events in through `NAME.inbound`).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use patchbay_graph::backoff::{self, Backoff};
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, HealthState, LinkEnds, Options, Output, OutputContext,
    Source, SourceContext,
};
use serde::Deserialize;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use crate::decode::OpenClawDecoder;
use crate::encode::encode_control;
use crate::handshake::{
    ConnectConfig, ConnectFailure, Handshake, HandshakeStep, PendingRequests, RpcOutcome,
};

/// The gateway's default address.
pub const DEFAULT_URL: &str = "ws://127.0.0.1:18789";

/// `[outputs.NAME]` (two-way) or `[sources.NAME]` (listen only) with `type =
/// "openclaw"`: one WebSocket connection to an OpenClaw gateway.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenClawConfig {
    /// The gateway, `ws://HOST:PORT` (default `ws://127.0.0.1:18789`; no TLS).
    #[serde(default = "default_url")]
    pub url: String,
    /// The gateway token. Absent: `gateway.auth.token` of `~/.openclaw/openclaw.json`,
    /// read when the connection starts (none there: connect without a token).
    #[serde(default)]
    pub token: Option<String>,
    /// How long connecting and the handshake (up to `hello-ok`) may take. Default 10000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Failed attempts in a row before giving up (`failed`). Default 10.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// First reconnect delay (doubles per failed attempt). Default 1000.
    #[serde(default = "default_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    /// Longest reconnect delay. Default 30000.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// Sends `sessions.subscribe` once connected (default true): the gateway sends the
    /// tool stream of a run only to the client that started it and to session
    /// subscribers.
    #[serde(default = "default_true")]
    pub subscribe_sessions: bool,
    /// Scopes requested in `connect`. Default `operator.read`; declared under
    /// `[outputs]`, also `operator.write` (`chat.abort`) and `operator.admin`: the
    /// gateway lets a client abort a run another client started (a UI, the CLI) only
    /// with the admin scope (checked against openclaw 2026.9.6).
    /// `operator.approvals` (for `control.answer`) must be asked for here.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
}

fn default_url() -> String {
    DEFAULT_URL.into()
}
fn default_true() -> bool {
    true
}
fn default_connect_timeout_ms() -> u64 {
    10_000
}
fn default_max_attempts() -> u32 {
    10
}
fn default_backoff_initial_ms() -> u64 {
    1000
}
fn default_backoff_max_ms() -> u64 {
    30_000
}

fn parse_config(options: &Options<'_>) -> Result<OpenClawConfig, Diagnostic> {
    let config: OpenClawConfig = options.parse()?;
    let url = config.url.trim();
    let Some(rest) = url.strip_prefix("ws://") else {
        let message = if url.starts_with("wss://") {
            "`wss://` is not supported (no TLS): use a `ws://` URL on loopback"
        } else {
            "`url` must be a WebSocket URL: ws://HOST:PORT"
        };
        return Err(options.error_at("url", message));
    };
    if rest.is_empty() || rest.starts_with('/') {
        return Err(options.error_at("url", "`url` has no host"));
    }
    for (key, value) in [
        ("connect_timeout_ms", config.connect_timeout_ms),
        ("max_attempts", u64::from(config.max_attempts)),
    ] {
        if value == 0 {
            return Err(options.error_at(key, "must be at least 1"));
        }
    }
    backoff::check_delays(options, config.backoff_initial_ms, config.backoff_max_ms)?;
    Ok(config)
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    Ok(Box::new(OpenClaw {
        config: parse_config(options)?,
    }))
}

pub(crate) fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(OpenClaw {
        config: parse_config(options)?,
    }))
}

struct OpenClaw {
    config: OpenClawConfig,
}

impl Source for OpenClaw {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = format!("openclaw:{}", cx.name());
            Link::new(self.config, source, false)
                .run(LinkEnds::source(&cx))
                .await
        })
    }
}

impl Output for OpenClaw {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = format!("openclaw:{}", cx.name());
            Link::new(self.config, source, true)
                .run(LinkEnds::output(&cx))
                .await
        })
    }
}

/// Why a connection ended.
enum Ended {
    /// Worth another attempt (network, timeout, a close, a retryable refusal).
    Retry(String),
    /// The gateway refused for good (a wrong token, no common protocol).
    Refused(ConnectFailure),
    /// Shutdown, or the graph ended.
    Stop,
}

/// What is kept across reconnections: the decoder (runs seen), the backoff.
struct Link {
    config: OpenClawConfig,
    decoder: OpenClawDecoder,
    backoff: Backoff,
    two_way: bool,
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

impl Link {
    fn new(config: OpenClawConfig, source: String, two_way: bool) -> Self {
        let backoff = Backoff::new(
            Duration::from_millis(config.backoff_initial_ms),
            Duration::from_millis(config.backoff_max_ms),
            Some(config.max_attempts),
        );
        Link {
            config,
            decoder: OpenClawDecoder::new(source),
            backoff,
            two_way,
        }
    }

    fn connect_config(&self) -> ConnectConfig {
        let token = match &self.config.token {
            Some(token) => token.clone(),
            None => crate::config_file::default_config_file()
                .and_then(|path| crate::config_file::token_from_file(&path))
                .unwrap_or_default(),
        };
        let mut connect = ConnectConfig::new(token);
        connect.scopes = match &self.config.scopes {
            Some(scopes) => scopes.clone(),
            None if self.two_way => vec![
                "operator.read".into(),
                "operator.write".into(),
                "operator.admin".into(),
            ],
            None => vec!["operator.read".into()],
        };
        connect
    }

    async fn run(mut self, side: LinkEnds<'_>) -> Result<(), ComponentError> {
        side.set_state(
            HealthState::Starting,
            Some(format!("connecting to {}", self.config.url)),
        );
        let connect = self.connect_config();
        loop {
            let reason = match self.connect(&connect, &side).await {
                Ended::Stop => return Ok(()),
                Ended::Refused(failure) => {
                    let why = format!("{failure}; not retrying: fix the token or the gateway");
                    side.record_error(&why);
                    side.fail(&why).await;
                    return Err(why.into());
                }
                Ended::Retry(reason) => reason,
            };
            side.record_error(&reason);
            let delay = side.retry_delay(&mut self.backoff, &reason).await?;
            if !side.wait_to_reconnect(delay).await {
                return Ok(());
            }
        }
    }

    /// One connection: the handshake (with the timeout), then the session.
    async fn connect(&mut self, connect: &ConnectConfig, side: &LinkEnds<'_>) -> Ended {
        let timeout = Duration::from_millis(self.config.connect_timeout_ms);
        let deadline = tokio::time::Instant::now() + timeout;
        let url = self.config.url.clone();
        let opened = tokio::select! {
            // `true`: TCP_NODELAY, so a small frame is not held back for an ACK.
            r = tokio::time::timeout_at(deadline, tokio_tungstenite::connect_async_with_config(url.as_str(), None, true)) => r,
            () = side.shutdown() => return Ended::Stop,
        };
        let mut ws: Ws = match opened {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => return Ended::Retry(format!("cannot connect to {url}: {e}")),
            Err(_) => return Ended::Retry(format!("connecting to {url} timed out")),
        };
        let mut handshake = Handshake::new(connect.clone());
        let mut out = Vec::new();
        loop {
            let msg = tokio::select! {
                r = tokio::time::timeout_at(deadline, ws.next()) => match r {
                    Ok(msg) => msg,
                    Err(_) => return Ended::Retry(format!("no hello from {url} within {} ms", self.config.connect_timeout_ms)),
                },
                () = side.shutdown() => return Ended::Stop,
            };
            let text = match msg {
                Some(Ok(Message::Text(t))) => t.as_str().to_owned(),
                Some(Ok(Message::Close(frame))) => {
                    return Ended::Retry(format!(
                        "the gateway closed during the handshake{}",
                        close_reason(frame.as_ref())
                    ));
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    return Ended::Retry(format!("connection lost during the handshake: {e}"));
                }
                None => return Ended::Retry("connection lost during the handshake".into()),
            };
            let Ok(frame) = serde_json::from_str::<Value>(&text) else {
                self.decoder.decode_text(&text, &mut out);
                let _ = side.emit_all(&mut out).await;
                continue;
            };
            let step = handshake.on_frame(&frame);
            self.decoder.decode_frame(frame, None, &mut out);
            if side.emit_all(&mut out).await.is_err() {
                return Ended::Stop;
            }
            match step {
                Some(HandshakeStep::Send(request)) => {
                    if let Err(e) = ws.send(Message::text(request.to_string())).await {
                        return Ended::Retry(format!("sending connect failed: {e}"));
                    }
                }
                Some(HandshakeStep::Connected(hello)) => {
                    self.backoff.reset();
                    side.set_state(HealthState::Ok, None);
                    tracing::info!(url = %url, protocol = ?hello.protocol, server = ?hello.server_version, "openclaw: connected");
                    return self.session(ws, side, hello.tick_interval_ms).await;
                }
                Some(HandshakeStep::Failed(failure)) => {
                    let _ = ws.close(None).await;
                    return if failure.retryable() {
                        Ended::Retry(failure.to_string())
                    } else {
                        Ended::Refused(failure)
                    };
                }
                None => {}
            }
        }
    }

    /// A connected session, until it ends. The gateway sends a `tick` every
    /// `tick_interval_ms` (from `hello-ok`): two intervals without any frame mean the
    /// connection is dead even if the socket did not say so.
    async fn session(
        &mut self,
        ws: Ws,
        side: &LinkEnds<'_>,
        tick_interval_ms: Option<u64>,
    ) -> Ended {
        let silence_limit = tick_interval_ms
            .filter(|t| *t > 0)
            .map(|t| Duration::from_millis(t.saturating_mul(2)));
        let mut last_heard = tokio::time::Instant::now();
        let (mut sink, mut stream) = ws.split();
        let mut pending = PendingRequests::new();
        let mut out = Vec::new();
        if self.config.subscribe_sessions {
            let id = patchbay_signal::next_id();
            let req = serde_json::json!({"type": "req", "id": id, "method": "sessions.subscribe", "params": {}});
            if let Err(e) = sink.send(Message::text(req.to_string())).await {
                return Ended::Retry(format!("connection lost: {e}"));
            }
            pending.register(id, "sessions.subscribe");
        }
        loop {
            tokio::select! {
                () = silence(last_heard, silence_limit) => {
                    return Ended::Retry(format!(
                        "no frame from the gateway for {} ms (two tick intervals): the connection is dead",
                        silence_limit.map(|d| d.as_millis()).unwrap_or_default()
                    ));
                }
                msg = stream.next() => match msg {
                    Some(Ok(Message::Text(text))) => {
                        last_heard = tokio::time::Instant::now();
                        match serde_json::from_str::<Value>(text.as_str()) {
                            Ok(frame) => {
                                if let Some(RpcOutcome::Done { method, result: Err(error), .. }) = pending.on_response(&frame) {
                                    side.record_error(&format!("the gateway refused `{method}`: {error}"));
                                }
                                self.decoder.decode_frame(frame, None, &mut out);
                            }
                            Err(_) => self.decoder.decode_text(text.as_str(), &mut out),
                        }
                        if side.emit_all(&mut out).await.is_err() {
                            return Ended::Stop;
                        }
                    }
                    Some(Ok(Message::Close(frame))) => {
                        return Ended::Retry(format!("the gateway closed the connection{}", close_reason(frame.as_ref())));
                    }
                    Some(Ok(_)) => last_heard = tokio::time::Instant::now(),
                    Some(Err(e)) => return Ended::Retry(format!("connection lost: {e}")),
                    None => return Ended::Retry("connection lost".into()),
                },
                signal = side.next_control() => match signal {
                    Some(signal) => {
                        let Some(cx) = side.controls else { continue };
                        match encode_control(&signal, self.decoder.runs()) {
                            Ok(request) => {
                                if let Err(e) = sink.send(Message::text(request.frame.to_string())).await {
                                    cx.refused(format!("{}: not sent, the connection broke", signal.kind));
                                    return Ended::Retry(format!("connection lost: {e}"));
                                }
                                pending.register(request.id, request.method);
                                cx.delivered(1);
                            }
                            Err(e) => cx.refused(format!("{}: {e}", signal.kind)),
                        }
                    }
                    None => {
                        let _ = sink.send(Message::Close(None)).await;
                        return Ended::Stop;
                    }
                },
                () = side.shutdown(), if side.controls.is_none() => {
                    let _ = sink.send(Message::Close(None)).await;
                    return Ended::Stop;
                }
            }
        }
    }
}

/// Resolves when nothing was heard for `limit` since `last_heard` (never without a limit).
async fn silence(last_heard: tokio::time::Instant, limit: Option<Duration>) {
    match limit {
        Some(limit) => tokio::time::sleep_until(last_heard + limit).await,
        None => std::future::pending().await,
    }
}

fn close_reason(frame: Option<&tokio_tungstenite::tungstenite::protocol::CloseFrame>) -> String {
    match frame {
        Some(f) if f.reason.is_empty() => format!(" ({})", u16::from(f.code)),
        Some(f) => format!(" ({} {})", u16::from(f.code), f.reason),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_comes_from_the_openclaw_config() {
        let dir = patchbay_testkit::scratch::ScratchDir::new("openclaw-token");
        let path = dir.join("openclaw.json");
        std::fs::write(
            &path,
            r#"{"gateway": {"mode": "local", "auth": {"token": "abc"}}}"#,
        )
        .expect("write");
        assert_eq!(
            crate::config_file::token_from_file(&path).as_deref(),
            Some("abc")
        );
        std::fs::write(&path, r#"{"gateway": {"auth": {"token": ""}}}"#).expect("write");
        assert_eq!(crate::config_file::token_from_file(&path), None);
        std::fs::write(&path, "not json").expect("write");
        assert_eq!(crate::config_file::token_from_file(&path), None);
        assert_eq!(
            crate::config_file::token_from_file(&dir.join("missing.json")),
            None
        );
    }

    #[test]
    fn an_output_asks_for_the_write_scope() {
        let config: OpenClawConfig = Options::parse_snippet("token = \"t\"").expect("config");
        let read = Link::new(config.clone(), "s".into(), false).connect_config();
        assert_eq!(read.scopes, ["operator.read"]);
        assert_eq!(read.token, "t");
        let write = Link::new(config, "s".into(), true).connect_config();
        assert_eq!(
            write.scopes,
            ["operator.read", "operator.write", "operator.admin"]
        );
    }
}
