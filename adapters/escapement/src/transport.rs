//! The WebSocket transport: `type = "escapement"` as a source (listen only) and as a
//! two-way output (controls out, frames in through `NAME.inbound`).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use patchbay_graph::backoff::{self, Backoff};
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, HealthState, LinkEnds, Options, Output, OutputContext,
    Source, SourceContext,
};
use patchbay_signal::SharedSignal;
use patchbay_signal::normalize::Decoded;
use serde::Deserialize;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

use crate::decode::EscapementDecoder;
use crate::encode::encode_control;
use crate::replay::ReplayGuard;

/// `[outputs.NAME]` (two-way) or `[sources.NAME]` (listen only) with `type =
/// "escapement"`: one WebSocket connection to an Escapement agent.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EscapementConfig {
    /// The agent's WebSocket, `ws://HOST:PORT/PATH` (plain WebSocket; no TLS).
    pub url: String,
    /// First reconnect delay (doubles per failed attempt). Default 1000.
    #[serde(default = "default_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    /// Longest reconnect delay. Default 30000.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// Failed attempts in a row before giving up (`failed`); absent: never give up.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// How long one connection attempt may take. Default 10000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
}

fn default_backoff_initial_ms() -> u64 {
    1000
}
fn default_backoff_max_ms() -> u64 {
    30_000
}
fn default_connect_timeout_ms() -> u64 {
    10_000
}

fn parse_config(options: &Options<'_>) -> Result<EscapementConfig, Diagnostic> {
    let config: EscapementConfig = options.parse()?;
    let url = config.url.trim();
    let Some(rest) = url.strip_prefix("ws://") else {
        let message = if url.starts_with("wss://") {
            "`wss://` is not supported (no TLS): use a `ws://` URL on loopback"
        } else {
            "`url` must be a WebSocket URL: ws://HOST:PORT/PATH"
        };
        return Err(options.error_at("url", message));
    };
    if rest.is_empty() || rest.starts_with('/') {
        return Err(options.error_at("url", "`url` has no host"));
    }
    backoff::check_delays(options, config.backoff_initial_ms, config.backoff_max_ms)?;
    if config.max_attempts == Some(0) {
        return Err(options.error_at(
            "max_attempts",
            "must be at least 1 (omit it to retry forever)",
        ));
    }
    if config.connect_timeout_ms == 0 {
        return Err(options.error_at("connect_timeout_ms", "must be at least 1"));
    }
    Ok(config)
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    Ok(Box::new(Escapement {
        config: parse_config(options)?,
    }))
}

pub(crate) fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(Escapement {
        config: parse_config(options)?,
    }))
}

/// One agent connection; the same value runs as a source or as an output.
struct Escapement {
    config: EscapementConfig,
}

impl Source for Escapement {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = format!("escapement:{}", cx.name());
            Link::new(self.config, source)
                .run(LinkEnds::source(&cx))
                .await
        })
    }
}

impl Output for Escapement {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = format!("escapement:{}", cx.name());
            Link::new(self.config, source)
                .run(LinkEnds::output(&cx))
                .await
        })
    }
}

/// Why a connection ended.
enum Ended {
    /// The peer closed or the socket broke: reconnect.
    Lost(String),
    /// Shutdown, or the graph ended: stop.
    Stop,
}

/// The state kept across reconnections: the decoder (with its seq dedupe), the replay
/// guard, the backoff, and a control signal not yet sent when the socket broke.
struct Link {
    config: EscapementConfig,
    decoder: EscapementDecoder,
    guard: ReplayGuard,
    backoff: Backoff,
    unsent: Option<SharedSignal>,
}

impl Link {
    fn new(config: EscapementConfig, source: String) -> Self {
        let backoff = Backoff::new(
            Duration::from_millis(config.backoff_initial_ms),
            Duration::from_millis(config.backoff_max_ms),
            config.max_attempts,
        );
        Link {
            config,
            decoder: EscapementDecoder::new(source),
            guard: ReplayGuard::new(),
            backoff,
            unsent: None,
        }
    }

    async fn run(mut self, side: LinkEnds<'_>) -> Result<(), ComponentError> {
        side.set_state(
            HealthState::Starting,
            Some(format!("connecting to {}", self.config.url)),
        );
        loop {
            let timeout = Duration::from_millis(self.config.connect_timeout_ms);
            let attempt = tokio::select! {
                // `true`: TCP_NODELAY, so a small frame is not held back for an ACK.
                r = tokio::time::timeout(timeout, tokio_tungstenite::connect_async_with_config(self.config.url.as_str(), None, true)) => r,
                () = side.shutdown() => return Ok(()),
            };
            let reason = match attempt {
                Ok(Ok((ws, _response))) => {
                    self.backoff.reset();
                    self.guard.reconnected();
                    side.set_state(HealthState::Ok, None);
                    tracing::info!(url = %self.config.url, "escapement: connected");
                    match self.session(ws, &side).await {
                        Ended::Stop => return Ok(()),
                        Ended::Lost(reason) => reason,
                    }
                }
                Ok(Err(e)) => format!("cannot connect to {}: {e}", self.config.url),
                Err(_) => format!("connecting to {} timed out", self.config.url),
            };
            side.record_error(&reason);
            let delay = side.retry_delay(&mut self.backoff, &reason).await?;
            if !side.wait_to_reconnect(delay).await {
                return Ok(());
            }
        }
    }

    /// Talks on one connection until it ends.
    async fn session<S>(&mut self, ws: S, side: &LinkEnds<'_>) -> Ended
    where
        S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
            + futures_util::Sink<Message, Error = tokio_tungstenite::tungstenite::Error>
            + Unpin,
    {
        let (mut sink, mut stream) = ws.split();
        // A control that was taken from the queue when the last socket broke goes first.
        if let Some(signal) = self.unsent.take()
            && let Err(reason) = self.send_control(&mut sink, signal, side).await
        {
            return Ended::Lost(reason);
        }
        let mut out = Vec::new();
        loop {
            tokio::select! {
                msg = stream.next() => match msg {
                    Some(Ok(Message::Text(text))) => {
                        self.decode(text.as_str(), &mut out);
                        if side.emit_all(&mut out).await.is_err() {
                            return Ended::Stop;
                        }
                    }
                    Some(Ok(Message::Binary(bytes))) => match std::str::from_utf8(&bytes) {
                        Ok(text) => {
                            self.decode(text, &mut out);
                            if side.emit_all(&mut out).await.is_err() {
                                return Ended::Stop;
                            }
                        }
                        Err(_) => side.record_error("escapement: a binary frame that is not UTF-8 was ignored"),
                    },
                    Some(Ok(Message::Close(frame))) => {
                        let why = frame.map(|f| format!(" ({} {})", u16::from(f.code), f.reason)).unwrap_or_default();
                        return Ended::Lost(format!("the agent closed the connection{why}"));
                    }
                    Some(Ok(_)) => {} // ping/pong are answered by tungstenite
                    Some(Err(e)) => return Ended::Lost(format!("connection lost: {e}")),
                    None => return Ended::Lost("connection lost".into()),
                },
                signal = side.next_control() => match signal {
                    Some(signal) => {
                        if let Err(reason) = self.send_control(&mut sink, signal, side).await {
                            return Ended::Lost(reason);
                        }
                    }
                    None => {
                        // The graph ended: say goodbye properly.
                        let _ = sink.send(Message::Close(None)).await;
                        return Ended::Stop;
                    }
                },
                // An output drains its queue until the graph closes it (`None` above);
                // a listen-only source stops at once.
                () = side.shutdown(), if side.controls.is_none() => {
                    let _ = sink.send(Message::Close(None)).await;
                    return Ended::Stop;
                }
            }
        }
    }

    /// Encodes and sends one control signal; a refused type is counted, a send failure
    /// keeps the signal for the next connection.
    async fn send_control<K>(
        &mut self,
        sink: &mut K,
        signal: SharedSignal,
        side: &LinkEnds<'_>,
    ) -> Result<(), String>
    where
        K: futures_util::Sink<Message, Error = tokio_tungstenite::tungstenite::Error> + Unpin,
    {
        let Some(cx) = side.controls else {
            return Ok(());
        };
        match encode_control(&signal) {
            Ok(frame) => match sink.send(Message::text(frame.to_string())).await {
                Ok(()) => {
                    // The latency probe's end: the frame is written to the socket.
                    tracing::trace!(target: "patchbay::latency", stage = "escapement.sent");
                    cx.delivered(1);
                    Ok(())
                }
                Err(e) => {
                    self.unsent = Some(signal);
                    Err(format!("sending a control failed: {e}"))
                }
            },
            Err(e) => {
                cx.refused(format!("{}: {e}", signal.kind));
                Ok(())
            }
        }
    }

    /// Decodes one text frame through the replay guard and the decoder.
    fn decode(&mut self, text: &str, out: &mut Vec<Decoded>) {
        match serde_json::from_str::<Value>(text.trim()) {
            Ok(frame) => {
                for frame in self.guard.admit(frame, self.decoder.dedupe_mut()) {
                    self.decoder.decode_frame(frame, None, out);
                }
            }
            // Not JSON: the decoder reports it as bad input.
            Err(_) => self.decoder.decode_text(text, out),
        }
    }
}
