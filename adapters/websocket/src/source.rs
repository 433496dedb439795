//! The `websocket` source: connect, decode frames, ping, reconnect.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, HealthState, LinkEnds, Options, Source, SourceContext,
};
use patchbay_signal::normalize::{Decoded, Normalizer};
use serde::Deserialize;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use patchbay_graph::backoff::{self, Backoff, retry_detail};

/// `[sources.NAME] type = "websocket"`.
#[derive(Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebSocketConfig {
    /// The server, `ws://host:port/path`.
    pub url: String,
    /// Extra request headers (e.g. `Authorization = "Bearer ${TOKEN}"`); values are never
    /// logged.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// First reconnect delay, in ms.
    #[serde(default = "default_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    /// Largest reconnect delay, in ms.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// Give up after this many failures in a row (a lost connection counts as one); unset:
    /// never.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// The longest one connection attempt may take, in ms.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// How often to ping, in ms (0: never); a ping unanswered by the next is a lost
    /// connection.
    #[serde(default = "default_ping_interval_ms")]
    pub ping_interval_ms: u64,
}

impl std::fmt::Debug for WebSocketConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSocketConfig")
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("backoff_initial_ms", &self.backoff_initial_ms)
            .field("backoff_max_ms", &self.backoff_max_ms)
            .field("max_attempts", &self.max_attempts)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("ping_interval_ms", &self.ping_interval_ms)
            .finish()
    }
}

fn default_backoff_initial_ms() -> u64 {
    1_000
}
fn default_backoff_max_ms() -> u64 {
    30_000
}
fn default_connect_timeout_ms() -> u64 {
    10_000
}
fn default_ping_interval_ms() -> u64 {
    15_000
}

impl WebSocketConfig {
    /// Parses and checks the options (no I/O).
    pub fn from_options(options: &Options<'_>) -> Result<WebSocketConfig, Diagnostic> {
        let config: WebSocketConfig = options.parse()?;
        let url = config.url.trim();
        if url.starts_with("wss://") {
            return Err(options.error_at(
                "url",
                "wss:// is not supported by this build (plain ws:// only, e.g. on loopback)",
            ));
        }
        if !url.starts_with("ws://") || url.len() <= "ws://".len() {
            return Err(options.error_at("url", "`url` must be a ws:// URL"));
        }
        for (name, value) in &config.headers {
            if HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(options.error_at("headers", format!("`{name}` is not a header name")));
            }
            if HeaderValue::from_str(value).is_err() {
                return Err(options.error_at(
                    "headers",
                    format!("the value of `{name}` is not a valid header value"),
                ));
            }
        }
        backoff::check_delays(options, config.backoff_initial_ms, config.backoff_max_ms)?;
        if config.max_attempts == Some(0) {
            return Err(options.error_at("max_attempts", "must be at least 1"));
        }
        if config.connect_timeout_ms == 0 {
            return Err(options.error_at("connect_timeout_ms", "must be positive"));
        }
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

/// Why a connection ended.
enum Ended {
    /// Shutdown was requested (or the graph is gone).
    Stop,
    /// Lost: reconnect.
    Lost(String),
    /// Refused for good (401/403): do not retry.
    Fatal(String),
}

impl Source for WebSocketSource {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let config = self.config;
            let mut normalizer = Normalizer::new(format!("websocket:{}", cx.name()));
            let mut backoff = Backoff::new(
                Duration::from_millis(config.backoff_initial_ms),
                Duration::from_millis(config.backoff_max_ms),
                config.max_attempts,
            );
            let url = config.url.trim().to_owned();
            let ends = LinkEnds::source(&cx);
            loop {
                if backoff.attempts() == 0 {
                    cx.set_state(HealthState::Starting, Some(format!("connecting to {url}")));
                }
                let ended = tokio::select! {
                    e = connection(&config, &url, &cx, &mut normalizer, &mut backoff) => e,
                    () = cx.shutdown().wait() => Ended::Stop,
                };
                let reason = match ended {
                    Ended::Stop => {
                        cx.set_state(HealthState::Stopped, None);
                        return Ok(());
                    }
                    Ended::Fatal(reason) => {
                        cx.set_state(HealthState::Failed, Some(reason.clone()));
                        return Err(reason.into());
                    }
                    Ended::Lost(reason) => reason,
                };
                let delay = ends.retry_delay(&mut backoff, &reason).await?;
                tracing::info!(
                    url,
                    "websocket {}: {}",
                    cx.name(),
                    retry_detail(delay, &reason)
                );
                if !ends.wait_to_reconnect(delay).await {
                    cx.set_state(HealthState::Stopped, None);
                    return Ok(());
                }
            }
        })
    }
}

/// One connection: connect (bounded), then read frames and ping until it ends.
async fn connection(
    config: &WebSocketConfig,
    url: &str,
    cx: &SourceContext,
    normalizer: &mut Normalizer,
    backoff: &mut Backoff,
) -> Ended {
    let mut request = match url.into_client_request() {
        Ok(r) => r,
        Err(e) => return Ended::Fatal(format!("bad url {url}: {e}")),
    };
    for (name, value) in &config.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            request.headers_mut().insert(name, value);
        }
    }
    let timeout = Duration::from_millis(config.connect_timeout_ms);
    // `true`: TCP_NODELAY, so a small frame is not held back for an ACK.
    let ws = match tokio::time::timeout(
        timeout,
        tokio_tungstenite::connect_async_with_config(request, None, true),
    )
    .await
    {
        Err(_) => return Ended::Lost(format!("no connection within {} ms", timeout.as_millis())),
        Ok(Err(WsError::Http(response)))
            if matches!(
                response.status(),
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
            ) =>
        {
            return Ended::Fatal(format!(
                "{url} refused the connection: HTTP {}",
                response.status().as_u16()
            ));
        }
        Ok(Err(e)) => return Ended::Lost(describe(&e)),
        Ok(Ok((ws, _))) => ws,
    };
    backoff.reset();
    cx.set_state(HealthState::Ok, Some(format!("connected to {url}")));
    let (mut sink, mut stream) = ws.split();
    let ping_every =
        (config.ping_interval_ms > 0).then(|| Duration::from_millis(config.ping_interval_ms));
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
                    Some(Err(e)) => return Ended::Lost(describe(&e)),
                    Some(Ok(Message::Text(text))) => text.as_str().to_owned(),
                    Some(Ok(Message::Binary(bytes))) => match std::str::from_utf8(&bytes) {
                        Ok(text) => text.to_owned(),
                        Err(_) => {
                            let signal = normalizer.bad_input(
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
                        let why = frame.map(|f| format!(" ({} {})", u16::from(f.code), f.reason)).unwrap_or_default();
                        return Ended::Lost(format!("the server closed the connection{why}"));
                    }
                    Some(Ok(_)) => continue,
                };
                // Any frame shows the peer is alive.
                awaiting_pong = false;
                if let Some(decoded) = normalizer.decode_text(&text)
                    && cx.emit_decoded(decoded).await.is_err()
                {
                    return Ended::Stop;
                }
            }
            () = ping_due => {
                if awaiting_pong {
                    return Ended::Lost(format!(
                        "no pong within {} ms",
                        config.ping_interval_ms
                    ));
                }
                if let Err(e) = sink.send(Message::Ping(Vec::new().into())).await {
                    return Ended::Lost(describe(&e));
                }
                awaiting_pong = true;
                next_ping = ping_every.map(|d| tokio::time::Instant::now() + d);
            }
        }
    }
}

/// A connection error without anything from the request (headers hold tokens).
fn describe(error: &WsError) -> String {
    match error {
        WsError::Http(response) => format!("HTTP {}", response.status().as_u16()),
        WsError::ConnectionClosed | WsError::AlreadyClosed => "the connection closed".into(),
        WsError::Io(e) => e.to_string(),
        other => other.to_string(),
    }
}
