//! The generic SSE source, `[sources.NAME] type = "sse"`: `GET url` with `Accept:
//! text/event-stream`, each event decoded by [`SseDecoder`] (generic envelopes; a bad one
//! becomes an `error {code: "bad_frame"}` signal and the stream lives on).
//!
//! It connects through `patchbay_transport` (`http://` or `https://`, with `ca_file`): it
//! reconnects with capped exponential backoff and jitter (`backoff_initial_ms`,
//! `backoff_max_ms`, `max_attempts`; reset by each successful connection; a server's
//! `retry:` replaces the first delay), bounds each attempt by `connect_timeout_ms`, and
//! resumes with `Last-Event-ID` (the id of the last event dispatched). An event cut off by
//! a lost connection is dropped (the server sends it again after the last id); one cut off
//! by a clean end of the body is still decoded. Health: `Starting` ("connecting to URL"),
//! `Ok` ("connected"), `Recovering` ("retrying in N s: reason"), `Failed` (attempts
//! exhausted, HTTP 401/403). An HTTP 204 means the server wants no more reconnects
//! (`Stopped`). Header values are never logged.

use std::time::Duration;

use futures_util::StreamExt;
use patchbay_graph::config::MAX_DURATION_MS;
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, LinkEnds, Options, Source, SourceContext,
};
use patchbay_transport::{
    Backoff, Defaults, Driver, Ended, Headers, Link, RedactedUrl, Scheme, TransportConfig,
    TransportOptions, describe_http_error, parse_options,
};
use reqwest::header::HeaderValue;
use serde::Deserialize;

use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::now_ms;

use crate::{SseDecoder, SseEvent, SseParser, http};

/// The component type name.
pub const TYPE_NAME: &str = "sse";

/// The `sse` source's transport defaults: `url` required, retry forever.
#[derive(Debug, Clone, Copy, schemars::JsonSchema)]
pub struct SseDefaults;

impl Defaults for SseDefaults {
    const SCHEME: Scheme = Scheme::Http;
    const URL_EXAMPLE: &'static str = "http://127.0.0.1:9000/events";
}

/// `[sources.NAME] type = "sse"`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct SseSourceConfig {
    /// Connecting and reconnecting: `url` (`http://` or `https://`), `backoff_initial_ms`
    /// (default 1000; a server's `retry:` replaces it), `backoff_max_ms` (default 30000),
    /// `max_attempts` (default: retry forever), `connect_timeout_ms` (until the response
    /// headers; default 10000), `ca_file`.
    #[serde(flatten)]
    pub transport: TransportOptions<SseDefaults>,
    /// Extra request headers (e.g. `Authorization = "Bearer ${TOKEN}"`); values are never
    /// logged.
    #[serde(default)]
    pub headers: Headers,
    /// A stream silent (no byte, not even a comment) for this long is lost, in ms (from 1
    /// to 86400000, one day); unset: no limit.
    #[serde(default)]
    pub idle_timeout_ms: Option<u64>,
    /// The longest line (one field, `data:` included) accepted, in bytes (default 1048576,
    /// 1 MiB; from 1 to 67108864, 64 MiB). A longer one becomes an `error` signal
    /// (`code: "bad_frame"`) and the connection is reset: the source reconnects and
    /// resumes after the last event received.
    #[serde(default = "default_max_line_bytes")]
    pub max_line_bytes: usize,
    /// The largest event (its `data:` lines joined) accepted, in bytes (default 4194304,
    /// 4 MiB; from 1 to 67108864, 64 MiB); a larger one is handled as a line too long.
    #[serde(default = "default_max_event_bytes")]
    pub max_event_bytes: usize,
}

/// The largest `max_line_bytes` and `max_event_bytes`: 64 MiB.
pub const MAX_SIZE_LIMIT: usize = 64 << 20;

fn default_max_line_bytes() -> usize {
    crate::parser::DEFAULT_MAX_LINE
}

fn default_max_event_bytes() -> usize {
    crate::parser::DEFAULT_MAX_EVENT
}

impl TransportConfig for SseSourceConfig {
    type Defaults = SseDefaults;
    fn transport(&self) -> &TransportOptions<SseDefaults> {
        &self.transport
    }
}

impl SseSourceConfig {
    /// Parses and checks the options (no I/O).
    pub fn from_options(options: &Options<'_>) -> Result<SseSourceConfig, Diagnostic> {
        let config: SseSourceConfig = parse_options(options)?;
        config
            .headers
            .check()
            .map_err(|e| options.error_at("headers", e))?;
        options.check_range("max_line_bytes", config.max_line_bytes, 1..=MAX_SIZE_LIMIT)?;
        options.check_range(
            "max_event_bytes",
            config.max_event_bytes,
            1..=MAX_SIZE_LIMIT,
        )?;
        options.check_range_opt(
            "idle_timeout_ms",
            config.idle_timeout_ms,
            1..=MAX_DURATION_MS,
        )?;
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

impl Source for SseSource {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let mut link = SseLink {
                decoder: SseDecoder::new(format!("sse:{}", cx.name())),
                config: self.config,
                client: None,
                last_event_id: None,
                retry: None,
            };
            Driver::new("sse", &link.config.transport, LinkEnds::source(&cx))
                .run(&mut link)
                .await
        })
    }
}

/// What survives reconnects: the client, the decoder, the resume point, the server's
/// `retry:`.
struct SseLink {
    config: SseSourceConfig,
    client: Option<reqwest::Client>,
    decoder: SseDecoder,
    last_event_id: Option<String>,
    retry: Option<u64>,
}

impl SseLink {
    fn client(&mut self) -> Result<reqwest::Client, Ended> {
        if let Some(client) = &self.client {
            return Ok(client.clone());
        }
        let client = http::client(&self.config.transport)?;
        self.client = Some(client.clone());
        Ok(client)
    }
}

impl Link for SseLink {
    type Connection = reqwest::Response;

    /// The request, until the response headers.
    async fn connect(&mut self, _ends: &LinkEnds<'_>) -> Result<reqwest::Response, Ended> {
        let client = self.client()?;
        let url = self.config.transport.url();
        let shown = RedactedUrl(url).to_string();
        let mut request =
            http::event_stream(client.get(url)).headers(self.config.headers.pairs().collect());
        if let Some(id) = &self.last_event_id
            && let Ok(value) = HeaderValue::from_str(id)
        {
            request = request.header("last-event-id", value);
        }
        let stream = http::StreamRequest {
            shown: &shown,
            asked: "",
            refused_hint: "",
            not_a_stream_hint: "",
            no_content_ends: true,
        };
        stream.open(request).await
    }

    /// The events until the body ends.
    async fn session(&mut self, response: reqwest::Response, ends: &LinkEnds<'_>) -> Ended {
        let Some(cx) = ends.signals_in else {
            return Ended::Stop;
        };
        let mut parser =
            SseParser::with_limits(self.config.max_line_bytes, self.config.max_event_bytes);
        let mut body = response.bytes_stream();
        let mut out = Vec::new();
        let idle = self.config.idle_timeout_ms.map(Duration::from_millis);
        loop {
            let next = match idle {
                Some(idle) => match tokio::time::timeout(idle, body.next()).await {
                    Ok(next) => next,
                    Err(_) => return Ended::Lost(format!("no data for {} ms", idle.as_millis())),
                },
                None => body.next().await,
            };
            let mut events: Vec<SseEvent> = Vec::new();
            let end = match next {
                Some(Ok(chunk)) => {
                    parser.feed_with(&chunk, |e| events.push(e));
                    None
                }
                Some(Err(e)) => Some(Ended::Lost(describe_http_error(&e))),
                None => {
                    // A clean end: an event cut off by it is still decoded.
                    parser.finish_with(|e| events.push(e));
                    Some(Ended::Lost("the server ended the stream".into()))
                }
            };
            if let Some(retry) = parser.retry() {
                self.retry = Some(retry);
            }
            for event in &events {
                self.decoder.decode_event(event, &mut out);
                self.last_event_id = event.id.clone();
            }
            let overflow = parser.take_overflow();
            if overflow {
                let why = format!(
                    "an SSE line or event larger than its limit (max_line_bytes = {}, max_event_bytes = {}): dropped, reconnecting",
                    self.config.max_line_bytes, self.config.max_event_bytes
                );
                out.push(Decoded::BadInput(bad_input_signal(
                    &format!("sse:{}", cx.name()),
                    now_ms(),
                    "",
                    &why,
                )));
            }
            for decoded in out.drain(..) {
                if cx.emit_decoded(decoded).await.is_err() {
                    return Ended::Stop;
                }
            }
            if let Some(end) = end {
                return end;
            }
            if overflow {
                // Resync: the server sends again what follows the last event received.
                return Ended::Lost("an SSE line or event was over its size limit".into());
            }
        }
    }

    /// A server's `retry:` becomes the first delay.
    fn on_lost(&mut self, backoff: &mut Backoff) {
        // Clamped to `backoff_max_ms` by the backoff: a server cannot stop reconnects.
        if let Some(retry) = self.retry.filter(|r| *r > 0) {
            backoff.set_initial(Duration::from_millis(retry));
        }
    }
}
