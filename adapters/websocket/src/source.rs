//! The `websocket` source: its handshake is the upgrade, its framing one JSON envelope
//! per frame; connecting, pinging and reconnecting are `patchbay_transport`'s.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use patchbay_graph::config::MAX_DURATION_MS;
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, LinkEnds, Options, Source, SourceContext,
};
use patchbay_signal::normalize::{Decoded, Normalizer};
use patchbay_transport::{
    Defaults, Driver, Ended, Headers, Link, Scheme, TransportConfig, TransportOptions, WsStream,
    close_reason, describe_ws_error, parse_options,
};
use serde::Deserialize;
use tokio_tungstenite::tungstenite::Message;

/// The `websocket` source's transport defaults: `url` required, retry forever.
#[derive(Debug, Clone, Copy, schemars::JsonSchema)]
pub struct WebSocketDefaults;

impl Defaults for WebSocketDefaults {
    const SCHEME: Scheme = Scheme::WebSocket;
    const URL_EXAMPLE: &'static str = "ws://127.0.0.1:9000/events";
}

/// `[sources.NAME] type = "websocket"`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct WebSocketConfig {
    /// Connecting and reconnecting: `url` (`ws://` or `wss://`), `backoff_initial_ms`
    /// (default 1000), `backoff_max_ms` (default 30000), `max_attempts` (default: retry
    /// forever), `connect_timeout_ms` (default 10000), `ca_file`.
    #[serde(flatten)]
    pub transport: TransportOptions<WebSocketDefaults>,
    /// Extra request headers (e.g. `Authorization = "Bearer ${TOKEN}"`); values are never
    /// logged.
    #[serde(default)]
    pub headers: Headers,
    /// How often to ping, in ms (0: never; at most 86400000, one day); a ping unanswered
    /// by the next is a lost connection.
    #[serde(default = "default_ping_interval_ms")]
    pub ping_interval_ms: u64,
}

impl TransportConfig for WebSocketConfig {
    type Defaults = WebSocketDefaults;
    fn transport(&self) -> &TransportOptions<WebSocketDefaults> {
        &self.transport
    }
}

fn default_ping_interval_ms() -> u64 {
    15_000
}

impl WebSocketConfig {
    /// Parses and checks the options (no I/O).
    pub fn from_options(options: &Options<'_>) -> Result<WebSocketConfig, Diagnostic> {
        let config: WebSocketConfig = parse_options(options)?;
        config
            .headers
            .check()
            .map_err(|e| options.error_at("headers", e))?;
        options.check_range(
            "ping_interval_ms",
            config.ping_interval_ms,
            0..=MAX_DURATION_MS,
        )?;
        Ok(config)
    }
}

pub(crate) fn build(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    Ok(Box::new(WebSocketSource {
        config: WebSocketConfig::from_options(options)?,
    }))
}

/// The `websocket` source.
#[derive(Debug)]
pub struct WebSocketSource {
    config: WebSocketConfig,
}

impl WebSocketSource {
    /// A source with a checked config.
    pub fn new(config: WebSocketConfig) -> Self {
        WebSocketSource { config }
    }
}

impl Source for WebSocketSource {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let mut link = GenericLink {
                normalizer: Normalizer::new(format!("websocket:{}", cx.name())),
                config: self.config,
            };
            Driver::new("websocket", &link.config.transport, LinkEnds::source(&cx))
                .run(&mut link)
                .await
        })
    }
}

/// The connection's state across reconnects: the decoder.
struct GenericLink {
    config: WebSocketConfig,
    normalizer: Normalizer,
}

impl Link for GenericLink {
    type Connection = WsStream;

    async fn connect(&mut self, _ends: &LinkEnds<'_>) -> Result<WsStream, Ended> {
        let transport = &self.config.transport;
        transport.open_websocket(self.config.headers.pairs()).await
    }

    async fn session(&mut self, ws: WsStream, ends: &LinkEnds<'_>) -> Ended {
        let Some(cx) = ends.signals_in else {
            return Ended::Stop;
        };
        let ping_interval_ms = self.config.ping_interval_ms;
        let ping_every = (ping_interval_ms > 0).then(|| Duration::from_millis(ping_interval_ms));
        let (mut sink, mut stream) = ws.split();
        let mut next_ping = ping_every.map(|d| tokio::time::Instant::now() + d);
        let mut awaiting_pong = false;
        loop {
            let ping_due = async {
                match next_ping {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                frame = stream.next() => {
                    let text = match frame {
                        None => return Ended::Lost("the connection ended".into()),
                        Some(Err(e)) => return Ended::Lost(describe_ws_error(&e)),
                        Some(Ok(Message::Text(text))) => text.as_str().to_owned(),
                        Some(Ok(Message::Binary(bytes))) => match std::str::from_utf8(&bytes) {
                            Ok(text) => text.to_owned(),
                            Err(_) => {
                                let signal = self.normalizer.bad_input(
                                    &String::from_utf8_lossy(&bytes),
                                    "a binary frame that is not UTF-8",
                                );
                                if cx.emit_decoded(Decoded::BadInput(signal)).await.is_err() {
                                    return Ended::Stop;
                                }
                                continue;
                            }
                        },
                        Some(Ok(Message::Pong(_))) => {
                            awaiting_pong = false;
                            continue;
                        }
                        Some(Ok(Message::Close(frame))) => {
                            return Ended::Lost(format!(
                                "the server closed the connection{}",
                                close_reason(frame.as_ref())
                            ));
                        }
                        Some(Ok(_)) => continue,
                    };
                    // Any frame shows the peer is alive.
                    awaiting_pong = false;
                    if let Some(decoded) = self.normalizer.decode_text(&text)
                        && cx.emit_decoded(decoded).await.is_err()
                    {
                        return Ended::Stop;
                    }
                }
                () = ping_due => {
                    if awaiting_pong {
                        return Ended::Lost(format!("no pong within {ping_interval_ms} ms"));
                    }
                    if let Err(e) = sink.send(Message::Ping(Vec::new().into())).await {
                        return Ended::Lost(describe_ws_error(&e));
                    }
                    awaiting_pong = true;
                    next_ping = ping_every.map(|d| tokio::time::Instant::now() + d);
                }
            }
        }
    }
}
