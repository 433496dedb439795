//! The generic SSE source, `[sources.NAME] type = "sse"`: `GET url` with `Accept:
//! text/event-stream`, each event decoded by [`SseDecoder`] (generic envelopes; a bad one
//! becomes an `error {code: "bad_frame"}` signal and the stream lives on).
//!
//! It reconnects with capped exponential backoff and jitter (`backoff_initial_ms`,
//! `backoff_max_ms`, `max_attempts`; reset by each successful connection; a server's
//! `retry:` replaces the first delay), bounds each attempt by `connect_timeout_ms`, and
//! resumes with `Last-Event-ID` (the id of the last event dispatched). An event cut off by
//! a lost connection is dropped (the server sends it again after the last id); one cut off
//! by a clean end of the body is still decoded. Health: `Starting` ("connecting to URL"),
//! `Ok` ("connected"), `Recovering` ("retrying in N s: reason"), `Failed` (attempts
//! exhausted, HTTP 401/403). An HTTP 204 means the server wants no more reconnects
//! (`Stopped`). Header values are never logged.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use patchbay_graph::backoff::{self, Backoff, retry_detail};
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, HealthState, LinkEnds, Options, Source, SourceContext,
};
use patchbay_signal::normalize::Decoded;
use reqwest::header::{HeaderName, HeaderValue};
use serde::Deserialize;

use crate::{SseDecoder, SseEvent, SseParser};

/// The component type name.
pub const TYPE_NAME: &str = "sse";

/// `[sources.NAME] type = "sse"`.
#[derive(Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SseSourceConfig {
    /// The event stream, `http://host:port/path`.
    pub url: String,
    /// Extra request headers (e.g. `Authorization = "Bearer ${TOKEN}"`); values are never
    /// logged.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// First reconnect delay, in ms (a server's `retry:` replaces it).
    #[serde(default = "default_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    /// Largest reconnect delay, in ms.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// Give up after this many failures in a row (a lost stream counts as one); unset:
    /// never.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// The longest one connection attempt may take until the response headers, in ms.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// A stream silent (no byte, not even a comment) for this long is lost, in ms; unset:
    /// no limit.
    #[serde(default)]
    pub idle_timeout_ms: Option<u64>,
}

impl std::fmt::Debug for SseSourceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseSourceConfig")
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("backoff_initial_ms", &self.backoff_initial_ms)
            .field("backoff_max_ms", &self.backoff_max_ms)
            .field("max_attempts", &self.max_attempts)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("idle_timeout_ms", &self.idle_timeout_ms)
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

impl SseSourceConfig {
    /// Parses and checks the options (no I/O).
    pub fn from_options(options: &Options<'_>) -> Result<SseSourceConfig, Diagnostic> {
        let config: SseSourceConfig = options.parse()?;
        let url = config.url.trim();
        if url.starts_with("https://") {
            return Err(options.error_at(
                "url",
                "https:// is not supported by the sse source (plain http:// only)",
            ));
        }
        if !url.starts_with("http://") || url.len() <= "http://".len() {
            return Err(options.error_at("url", "`url` must be an http:// URL"));
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
        if config.connect_timeout_ms == 0 || config.idle_timeout_ms == Some(0) {
            return Err(options.error_at("connect_timeout_ms", "timeouts must be positive"));
        }
        Ok(config)
    }
}

pub(crate) fn build(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    Ok(Box::new(SseSource {
        config: SseSourceConfig::from_options(options)?,
    }))
}

/// The `sse` source.
#[derive(Debug)]
pub struct SseSource {
    config: SseSourceConfig,
}

impl SseSource {
    /// A source with a checked config.
    pub fn new(config: SseSourceConfig) -> Self {
        SseSource { config }
    }
}

/// Why a connection ended.
enum Ended {
    Stop,
    Lost(String),
    Fatal(String),
    /// HTTP 204: the server asks not to reconnect.
    NoMore,
}

/// What survives reconnects.
struct Resume {
    decoder: SseDecoder,
    last_event_id: Option<String>,
    retry: Option<u64>,
}

impl Source for SseSource {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let config = self.config;
            let client = patchbay_http::client_builder()
                .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
                .build()?;
            let url = config.url.trim().to_owned();
            let mut resume = Resume {
                decoder: SseDecoder::new(format!("sse:{}", cx.name())),
                last_event_id: None,
                retry: None,
            };
            let mut backoff = Backoff::new(
                Duration::from_millis(config.backoff_initial_ms),
                Duration::from_millis(config.backoff_max_ms),
                config.max_attempts,
            );
            let ends = LinkEnds::source(&cx);
            loop {
                if backoff.attempts() == 0 {
                    cx.set_state(HealthState::Starting, Some(format!("connecting to {url}")));
                }
                let ended = tokio::select! {
                    e = connection(&client, &config, &url, &cx, &mut resume, &mut backoff) => e,
                    () = cx.shutdown().wait() => Ended::Stop,
                };
                let reason = match ended {
                    Ended::Stop => {
                        cx.set_state(HealthState::Stopped, None);
                        return Ok(());
                    }
                    Ended::NoMore => {
                        cx.set_state(
                            HealthState::Stopped,
                            Some("the server answered 204: no more reconnects".into()),
                        );
                        return Ok(());
                    }
                    Ended::Fatal(reason) => {
                        cx.set_state(HealthState::Failed, Some(reason.clone()));
                        return Err(reason.into());
                    }
                    Ended::Lost(reason) => reason,
                };
                if let Some(retry) = resume.retry.filter(|r| *r > 0) {
                    backoff.set_initial(Duration::from_millis(retry));
                }
                let delay = ends.retry_delay(&mut backoff, &reason).await?;
                tracing::info!(url, "sse {}: {}", cx.name(), retry_detail(delay, &reason));
                if !ends.wait_to_reconnect(delay).await {
                    cx.set_state(HealthState::Stopped, None);
                    return Ok(());
                }
            }
        })
    }
}

/// One connection: the request (bounded), then the events until the body ends.
async fn connection(
    client: &reqwest::Client,
    config: &SseSourceConfig,
    url: &str,
    cx: &SourceContext,
    resume: &mut Resume,
    backoff: &mut Backoff,
) -> Ended {
    let mut request = client
        .get(url)
        .header("accept", "text/event-stream")
        .header("cache-control", "no-cache");
    for (name, value) in &config.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            request = request.header(name, value);
        }
    }
    if let Some(id) = &resume.last_event_id
        && let Ok(value) = HeaderValue::from_str(id)
    {
        request = request.header("last-event-id", value);
    }
    let timeout = Duration::from_millis(config.connect_timeout_ms);
    let response = match tokio::time::timeout(timeout, request.send()).await {
        Err(_) => return Ended::Lost(format!("no answer within {} ms", timeout.as_millis())),
        // The error names the URL, never a header.
        Ok(Err(e)) => return Ended::Lost(e.to_string()),
        Ok(Ok(response)) => response,
    };
    let status = response.status().as_u16();
    match status {
        200 => {}
        204 => return Ended::NoMore,
        401 | 403 => return Ended::Fatal(format!("{url} refused the stream: HTTP {status}")),
        _ => return Ended::Lost(format!("{url} answered HTTP {status}")),
    }
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if !content_type.starts_with("text/event-stream") {
        return Ended::Lost(format!(
            "{url} answered `{content_type}`, not text/event-stream"
        ));
    }
    backoff.reset();
    cx.set_state(HealthState::Ok, Some(format!("connected to {url}")));
    let mut parser = SseParser::new();
    let mut body = response.bytes_stream();
    let mut out = Vec::new();
    let idle = config.idle_timeout_ms.map(Duration::from_millis);
    loop {
        let next = match idle {
            Some(idle) => match tokio::time::timeout(idle, body.next()).await {
                Ok(next) => next,
                Err(_) => {
                    return Ended::Lost(format!("no data for {} ms", idle.as_millis()));
                }
            },
            None => body.next().await,
        };
        let mut events: Vec<SseEvent> = Vec::new();
        let end = match next {
            Some(Ok(chunk)) => {
                parser.feed_with(&chunk, |e| events.push(e));
                None
            }
            Some(Err(e)) => Some(Ended::Lost(e.to_string())),
            None => {
                // A clean end: an event cut off by it is still decoded.
                parser.finish_with(|e| events.push(e));
                Some(Ended::Lost("the server ended the stream".into()))
            }
        };
        if let Some(retry) = parser.retry() {
            resume.retry = Some(retry);
        }
        for event in &events {
            resume.decoder.decode_event(event, &mut out);
            resume.last_event_id = event.id.clone();
        }
        for decoded in out.drain(..) {
            if emit(cx, decoded).await.is_err() {
                return Ended::Stop;
            }
        }
        if let Some(end) = end {
            return end;
        }
    }
}

async fn emit(
    cx: &SourceContext,
    decoded: Decoded,
) -> Result<(), patchbay_graph::component::Closed> {
    cx.emit_decoded(decoded).await
}
