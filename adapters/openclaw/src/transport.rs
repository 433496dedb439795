//! The WebSocket transport: `type = "openclaw"` as a source (listen only) and as a
//! two-way output (aborts out, gateway events in through `NAME.inbound`).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use patchbay_graph::config::Secret;
use patchbay_graph::{ComponentError, Diagnostic, LinkEnds, Options, Output, Source};
use patchbay_transport::two_way::{TwoWay, TwoWayComponent};
use patchbay_transport::{
    Defaults, Driver, Ended, Link, Scheme, TransportConfig, TransportOptions, WsStream,
    close_reason, parse_options,
};
use serde::Deserialize;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use crate::decode::OpenClawDecoder;
use crate::encode::encode_control;
use crate::handshake::{ConnectConfig, Handshake, HandshakeStep, PendingRequests, RpcOutcome};
use patchbay_signal::decode::FrameDecoder as _;

/// The gateway's default address.
pub const DEFAULT_URL: &str = "ws://127.0.0.1:18789";

/// OpenClaw's transport defaults: the local gateway, 10 attempts.
#[derive(Debug, Clone, Copy, schemars::JsonSchema)]
pub struct OpenClawDefaults;

impl Defaults for OpenClawDefaults {
    const SCHEME: Scheme = Scheme::WebSocket;
    const URL_EXAMPLE: &'static str = "ws://HOST:PORT";
    const URL: &'static str = DEFAULT_URL;
    const MAX_ATTEMPTS: Option<u32> = Some(10);
}

/// `[outputs.NAME]` (two-way) or `[sources.NAME]` (listen only) with `type =
/// "openclaw"`: one WebSocket connection to an OpenClaw gateway.
///
/// Declared under `[outputs]`, its queue (`queue`, default 1024 signals) keeps taking
/// controls while the gateway is away and sends them once it is back; when it overflows
/// the oldest control is dropped and counted (`dropped`). `when_full` defaults to
/// `drop_oldest` for this reason: `block` would stall the whole graph meanwhile.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct OpenClawConfig {
    /// Connecting and reconnecting: `url` (default `ws://127.0.0.1:18789`; `wss://` for
    /// TLS), `connect_timeout_ms` (connecting and the handshake up to `hello-ok`; default
    /// 10000), `max_attempts` (default 10), `backoff_initial_ms` (default 1000),
    /// `backoff_max_ms` (default 30000), `ca_file`.
    #[serde(flatten)]
    pub transport: TransportOptions<OpenClawDefaults>,
    /// The gateway token. Absent: `gateway.auth.token` of `~/.openclaw/openclaw.json`,
    /// read when the connection starts (none there: connect without a token).
    #[serde(default)]
    pub token: Option<Secret>,
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

impl TransportConfig for OpenClawConfig {
    type Defaults = OpenClawDefaults;
    fn transport(&self) -> &TransportOptions<OpenClawDefaults> {
        &self.transport
    }
}

fn default_true() -> bool {
    true
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    Ok(TwoWayComponent::source(parse_options::<OpenClawConfig>(
        options,
    )?))
}

pub(crate) fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(TwoWayComponent::output(parse_options::<OpenClawConfig>(
        options,
    )?))
}

impl TwoWay for OpenClawConfig {
    const TYPE: &'static str = "openclaw";

    /// As an output (it takes controls) it connects as an operator that may send.
    async fn run(self, source: String, side: LinkEnds<'_>) -> Result<(), ComponentError> {
        let mut link = OpenClawLink::new(self, source, side.controls.is_some());
        Driver::new(Self::TYPE, &link.config.transport, side)
            .run(&mut link)
            .await
    }
}

/// What is kept across reconnections: the decoder (runs seen), the connect request.
struct OpenClawLink {
    config: OpenClawConfig,
    decoder: OpenClawDecoder,
    two_way: bool,
    connect: Option<ConnectConfig>,
}

impl Link for OpenClawLink {
    /// The socket and the tick interval of `hello-ok`.
    type Connection = (WsStream, Option<u64>);

    /// Opens the socket and runs the handshake up to `hello-ok`.
    async fn connect(&mut self, side: &LinkEnds<'_>) -> Result<(WsStream, Option<u64>), Ended> {
        let connect = match &self.connect {
            Some(connect) => connect.clone(),
            None => self.connect.insert(self.connect_config()).clone(),
        };
        let mut ws = self.config.transport.open_websocket([]).await?;
        let mut handshake = Handshake::new(connect);
        let mut out = Vec::new();
        loop {
            let text = match ws.next().await {
                Some(Ok(Message::Text(t))) => t.as_str().to_owned(),
                Some(Ok(Message::Close(frame))) => {
                    return Err(Ended::Lost(format!(
                        "the gateway closed during the handshake{}",
                        close_reason(frame.as_ref())
                    )));
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    return Err(Ended::Lost(format!(
                        "connection lost during the handshake: {e}"
                    )));
                }
                None => return Err(Ended::Lost("connection lost during the handshake".into())),
            };
            let Ok(frame) = serde_json::from_str::<Value>(&text) else {
                self.decoder.decode_text(&text, &mut out);
                let _ = side.emit_all(&mut out).await;
                continue;
            };
            let step = handshake.on_frame(&frame);
            self.decoder.decode_frame(frame, None, &mut out);
            if side.emit_all(&mut out).await.is_err() {
                return Err(Ended::Stop);
            }
            match step {
                Some(HandshakeStep::Send(request)) => {
                    if let Err(e) = ws.send(Message::text(request.to_string())).await {
                        return Err(Ended::Lost(format!("sending connect failed: {e}")));
                    }
                }
                Some(HandshakeStep::Connected(hello)) => {
                    tracing::info!(protocol = ?hello.protocol, server = ?hello.server_version, "openclaw: handshake done");
                    return Ok((ws, hello.tick_interval_ms));
                }
                Some(HandshakeStep::Failed(failure)) => {
                    let _ = ws.close(None).await;
                    return Err(if failure.retryable() {
                        Ended::Lost(failure.to_string())
                    } else {
                        Ended::Refused(format!("{failure}: fix the token or the gateway"))
                    });
                }
                None => {}
            }
        }
    }

    async fn session(&mut self, (ws, tick): (WsStream, Option<u64>), side: &LinkEnds<'_>) -> Ended {
        self.talk(ws, side, tick).await
    }
}

impl OpenClawLink {
    fn new(config: OpenClawConfig, source: String, two_way: bool) -> Self {
        OpenClawLink {
            config,
            decoder: OpenClawDecoder::new(source),
            two_way,
            connect: None,
        }
    }

    fn connect_config(&self) -> ConnectConfig {
        let token = match &self.config.token {
            Some(token) => token.0.clone(),
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

    /// A connected session, until it ends. The gateway sends a `tick` every
    /// `tick_interval_ms` (from `hello-ok`): two intervals without any frame mean the
    /// connection is dead even if the socket did not say so.
    async fn talk(
        &mut self,
        ws: WsStream,
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
                return Ended::Lost(format!("connection lost: {e}"));
            }
            pending.register(id, "sessions.subscribe");
        }
        loop {
            tokio::select! {
                () = silence(last_heard, silence_limit) => {
                    return Ended::Lost(format!(
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
                        return Ended::Lost(format!("the gateway closed the connection{}", close_reason(frame.as_ref())));
                    }
                    Some(Ok(_)) => last_heard = tokio::time::Instant::now(),
                    Some(Err(e)) => return Ended::Lost(format!("connection lost: {e}")),
                    None => return Ended::Lost("connection lost".into()),
                },
                signal = side.next_control() => match signal {
                    Some(signal) => {
                        let Some(cx) = side.controls else { continue };
                        match encode_control(&signal, self.decoder.runs()) {
                            Ok(request) => {
                                if let Err(e) = sink.send(Message::text(request.frame.to_string())).await {
                                    cx.refused(format!("{}: not sent, the connection broke", signal.kind));
                                    return Ended::Lost(format!("connection lost: {e}"));
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
            }
        }
    }
}

/// Resolves when nothing was heard for `limit` since `last_heard` (never without a limit).
async fn silence(last_heard: tokio::time::Instant, limit: Option<Duration>) {
    match limit {
        // A gateway's absurd `tick_interval_ms` is "never", not an Instant overflow panic.
        Some(limit) => match last_heard.checked_add(limit) {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_absurd_tick_interval_from_the_gateway_means_no_silence_limit() {
        let limit = Some(Duration::from_millis(u64::MAX.saturating_mul(2)));
        let waited = tokio::time::timeout(
            Duration::from_millis(20),
            silence(tokio::time::Instant::now(), limit),
        )
        .await;
        assert!(waited.is_err(), "no silence reported");
    }

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
        let config: OpenClawConfig =
            Options::parse_snippet_with("token = \"t\"", parse_options).expect("config");
        let read = OpenClawLink::new(config.clone(), "s".into(), false).connect_config();
        assert_eq!(read.scopes, ["operator.read"]);
        assert_eq!(read.token, "t");
        let write = OpenClawLink::new(config, "s".into(), true).connect_config();
        assert_eq!(
            write.scopes,
            ["operator.read", "operator.write", "operator.admin"]
        );
    }
}
