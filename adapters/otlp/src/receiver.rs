//! The OTLP/HTTP receiver: `[sources.NAME] type = "otlp"`, the endpoint OpenTelemetry
//! exporters post to, answering as the OpenTelemetry Collector's `otlp` receiver does so
//! that exporters' defaults work unchanged.
//!
//! - `POST /v1/logs`, `/v1/traces`, `/v1/metrics`, `Content-Type: application/x-protobuf`
//!   or `application/json` (parameters allowed), `Content-Encoding: gzip` or `deflate`
//!   (inflated with a bound: past `max_body`, 413).
//! - 200 with an `Export*ServiceResponse` in the request's encoding (empty, or its
//!   `partialSuccess` when records past the decoder's limits were dropped), only once
//!   every signal of the export is in the graph; 503 with `Retry-After` when the graph
//!   could not take them within `ingest_timeout_ms` (the signals it took before are not
//!   taken back: a retried export may repeat them).
//! - 400 (a `google.rpc.Status`, in the request's encoding) for a body that does not
//!   decode, 404 for another path, 405 for another method, 415 for another content type,
//!   413 past `max_body`, 401 without the `token`, 403 for another `Host` or any `Origin`.
//! - Metric token counts the decoder holds back are let go every 5 s and at shutdown.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use patchbay_graph::config::{MAX_DURATION_MS, Secret};
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, HealthState, Options, Refused, Source, SourceContext,
};
use patchbay_server::parse_listen;
use patchbay_signal::SharedSignal;
use patchbay_signal::normalize::Decoded;
use patchbay_transport::listen::{self, Access, Limits, Listener, Origins};
use serde::Deserialize;
use tokio::sync::{Mutex, watch};

use crate::{OtlpDecoder, SignalKind};

/// The address the receiver listens on when the config names none: OTLP/HTTP's port.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4318";
/// The largest `max_body`: 64 MiB.
pub const MAX_BODY_LIMIT: usize = 64 << 20;
/// How often the token counts the decoder holds back (metrics waiting to see whether
/// events of the same session carry the tokens) are let go.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// `[sources.NAME] type = "otlp"`: an OTLP/HTTP receiver (`POST /v1/logs`, `/v1/traces`,
/// `/v1/metrics`; protobuf or JSON; gzip or deflate), as the OpenTelemetry Collector's:
/// point an exporter's `OTEL_EXPORTER_OTLP_ENDPOINT` at `http://LISTEN`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// `IP:PORT` to listen on (`localhost:PORT` means `127.0.0.1:PORT`). Default
    /// `127.0.0.1:4318`, OTLP/HTTP's port. Not on loopback, a `token` is required.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Bearer token exporters must send (`Authorization: Bearer …`; set it with
    /// `OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer …"`). A request without it gets
    /// 401.
    #[serde(default)]
    pub token: Option<Secret>,
    /// Largest body accepted, in bytes, as sent and once decompressed (a gzip body that
    /// inflates past it is refused with 413 as it inflates). From 1 to 67108864 (64 MiB).
    /// Default 4194304 (4 MiB).
    #[serde(default = "default_max_body")]
    pub max_body: usize,
    /// How long an export waits for room when the graph is full, in ms, before it is
    /// refused with `503` and `Retry-After` (exporters retry it; refusals are counted).
    /// An export is answered 200 only once every one of its signals is in the graph. At
    /// most 86400000 (one day). Default 5000.
    #[serde(default = "default_ingest_timeout_ms")]
    pub ingest_timeout_ms: u64,
    /// Host names the receiver answers to besides `localhost`, `127.0.0.1` and `[::1]`
    /// (any port); `["*"]` for any. Absent: a loopback `listen` answers only to the
    /// loopback names, any other `listen` to any host. A request naming another host gets
    /// 403; one with an `Origin` (a web page) always does.
    #[serde(default)]
    pub allowed_hosts: Option<Vec<String>>,
    /// How long a client may take to send a request's head, in ms (from the connection's
    /// start, then from the first byte of each next request); past it the connection is
    /// closed. From 1 to 86400000 (one day). Default 10000.
    #[serde(default = "default_header_timeout_ms")]
    pub header_timeout_ms: u64,
    /// How long a keep-alive connection may wait for its next request, in ms, before it is
    /// closed. From 1 to 86400000. Default 60000.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// How many connections may be open at once; beyond it a new one gets 503 and is
    /// closed at once, counted as `too_many_connections`. From 1 to 1000000. Default 1024.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
}

fn default_listen() -> String {
    DEFAULT_LISTEN.into()
}
fn default_max_body() -> usize {
    4 << 20
}
fn default_ingest_timeout_ms() -> u64 {
    5000
}
fn default_header_timeout_ms() -> u64 {
    listen::DEFAULT_HEADER_TIMEOUT_MS
}
fn default_idle_timeout_ms() -> u64 {
    listen::DEFAULT_IDLE_TIMEOUT_MS
}
fn default_max_connections() -> usize {
    listen::DEFAULT_MAX_CONNECTIONS
}

/// Checked options: what the running receiver uses.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The address to bind.
    pub listen: SocketAddr,
    /// The bearer token, if any.
    pub token: Option<Secret>,
    /// Largest body, compressed or not.
    pub max_body: usize,
    /// How long an export waits for room in a full graph.
    pub ingest_timeout: Duration,
    /// Host names answered besides the loopback ones.
    pub allowed_hosts: Option<Vec<String>>,
    /// Header and idle timeouts, connection cap.
    pub limits: Limits,
}

impl OtlpConfig {
    /// Checks parsed options; an error names the offending key and what is wrong.
    pub fn check(self) -> Result<Settings, (&'static str, String)> {
        let listen = parse_listen(&self.listen).ok_or_else(|| {
            (
                "listen",
                format!(
                    "`{}` is not an `IP:PORT` address (e.g. `{DEFAULT_LISTEN}`)",
                    self.listen
                ),
            )
        })?;
        if let Some(Secret(t)) = &self.token
            && t.trim().is_empty()
        {
            return Err(("token", "the token must not be empty".into()));
        }
        if !listen.ip().is_loopback() && self.token.is_none() {
            return Err((
                "listen",
                format!(
                    "`{listen}` is not a loopback address: set a `token` so that only \
                     exporters that know it are heard"
                ),
            ));
        }
        if !(1..=MAX_BODY_LIMIT).contains(&self.max_body) {
            return Err((
                "max_body",
                format!("must be from 1 to {MAX_BODY_LIMIT} bytes"),
            ));
        }
        if self.ingest_timeout_ms > MAX_DURATION_MS {
            return Err((
                "ingest_timeout_ms",
                format!("must be at most {MAX_DURATION_MS}"),
            ));
        }
        if let Some(hosts) = &self.allowed_hosts {
            listen::check_hosts(hosts).map_err(|(_, message)| ("allowed_hosts", message))?;
        }
        let limits = Limits::check(
            self.header_timeout_ms,
            self.idle_timeout_ms,
            self.max_connections,
        )?;
        Ok(Settings {
            listen,
            token: self.token,
            max_body: self.max_body,
            ingest_timeout: Duration::from_millis(self.ingest_timeout_ms),
            allowed_hosts: self.allowed_hosts,
            limits,
        })
    }
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let config: OtlpConfig = options.parse()?;
    options.check_range("max_body", config.max_body, 1..=MAX_BODY_LIMIT)?;
    options.check_range(
        "ingest_timeout_ms",
        config.ingest_timeout_ms,
        0..=MAX_DURATION_MS,
    )?;
    let settings = config
        .check()
        .map_err(|(key, msg)| options.error_at(key, msg))?;
    Ok(Box::new(Receiver { settings }))
}

struct Receiver {
    settings: Settings,
}

/// What the request handlers share.
struct Shared {
    name: String,
    settings: Settings,
    /// Held while a body is decoded and its signals handed over, so that exports reach
    /// the graph in the order they were decoded.
    decoder: Mutex<OtlpDecoder>,
    cx: SourceContext,
}

impl Source for Receiver {
    fn reports_started(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let settings = self.settings;
            let listener = tokio::net::TcpListener::bind(settings.listen)
                .await
                .map_err(|e| format!("cannot listen on {}: {e}", settings.listen))?;
            let local = listener.local_addr()?;
            cx.started();
            cx.stats().set_gauge("port", f64::from(local.port()));
            let shared = Arc::new(Shared {
                name: cx.name().to_owned(),
                decoder: Mutex::new(OtlpDecoder::new(format!("otlp:{}", cx.name()))),
                settings: settings.clone(),
                cx: cx.clone(),
            });
            let app = Router::new()
                .fallback(handle)
                .with_state(Arc::clone(&shared));
            // Exporters send no Origin; a browser does: a web page must not post here.
            let door = Listener {
                name: format!("otlp {local}"),
                limits: settings.limits,
                access: Access::new(local, settings.allowed_hosts.clone(), Origins::None),
                stats: Arc::clone(cx.stats()),
                refusal: listen::text_refusal,
            };
            let (stop_tx, mut stop_rx) = watch::channel(false);
            let mut server = tokio::spawn(listen::serve(listener, app, door, async move {
                let _ = stop_rx.wait_for(|stop| *stop).await;
            }));
            let host = if local.ip().is_unspecified() {
                format!("127.0.0.1:{}", local.port())
            } else {
                local.to_string()
            };
            let url = format!("http://{host}");
            tracing::info!(url = %url, "otlp {}: OTLP/HTTP receiver listening", shared.name);
            cx.set_state(HealthState::Ok, Some(format!("otlp: {url}")));

            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            let result = loop {
                tokio::select! {
                    _ = tick.tick() => {
                        if flush(&shared).await.is_err() {
                            break Ok(());
                        }
                    }
                    ended = &mut server => {
                        break Err(match ended {
                            Ok(()) => "server stopped".into(),
                            Err(e) => format!("server task failed: {e}").into(),
                        });
                    }
                    () = cx.shutdown().wait() => break Ok(()),
                }
            };
            // Requests in flight finish (and hand their signals over) before the last flush.
            let _ = stop_tx.send(true);
            if !server.is_finished()
                && tokio::time::timeout(Duration::from_secs(1), &mut server)
                    .await
                    .is_err()
            {
                server.abort();
            }
            let _ = flush(&shared).await;
            result
        })
    }
}

/// Hands over the token counts the decoder held back.
async fn flush(shared: &Shared) -> Result<(), ()> {
    let mut decoder = shared.decoder.lock().await;
    let mut out = Vec::new();
    decoder.flush(&mut out);
    if out.is_empty() {
        return Ok(());
    }
    let mut signals = counted(&shared.cx, out);
    shared.cx.emit_batch(&mut signals).await.map_err(|_| ())
}

/// Decoders' outcomes as signals, bad input counted.
fn counted(cx: &SourceContext, out: Vec<Decoded>) -> Vec<SharedSignal> {
    out.into_iter()
        .map(|d| {
            if let Decoded::BadInput(s) = &d {
                let why = s
                    .payload
                    .get("message")
                    .and_then(|m| m.as_str())
                    .unwrap_or("bad input");
                cx.stats().bad_input(why.to_owned());
            }
            Arc::new(d.into_signal())
        })
        .collect()
}

/// The encoding of a request's body, and so of its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn of(headers: &HeaderMap) -> Option<Encoding> {
        let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
        let media = value.split(';').next().unwrap_or_default().trim();
        if media.eq_ignore_ascii_case(PROTOBUF)
            || media.eq_ignore_ascii_case("application/protobuf")
        {
            Some(Encoding::Protobuf)
        } else if media.eq_ignore_ascii_case(JSON) {
            Some(Encoding::Json)
        } else {
            None
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => PROTOBUF,
            Encoding::Json => JSON,
        }
    }
}

/// gRPC status codes of the `google.rpc.Status` an error answer carries.
const INVALID_ARGUMENT: u64 = 3;
const UNAVAILABLE: u64 = 14;
const RESOURCE_EXHAUSTED: u64 = 8;

/// An error answer as the collector gives it: a `google.rpc.Status` in the request's
/// encoding.
fn status(http: StatusCode, code: u64, message: &str, encoding: Encoding) -> Response {
    let body = match encoding {
        Encoding::Json => serde_json::json!({"code": code, "message": message})
            .to_string()
            .into_bytes(),
        Encoding::Protobuf => {
            let mut out = Vec::with_capacity(message.len() + 8);
            if code != 0 {
                out.push(0x08);
                varint(code, &mut out);
            }
            if !message.is_empty() {
                out.push(0x12);
                varint(message.len() as u64, &mut out);
                out.extend_from_slice(message.as_bytes());
            }
            out
        }
    };
    let mut response = (http, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(encoding.content_type()),
    );
    response
}

/// A plain-text refusal (for what comes before the encoding is known).
fn text(http: StatusCode, message: String) -> Response {
    (http, message).into_response()
}

fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The answer to an accepted export: `{}` (an empty message), or its partial success.
fn accepted(kind: SignalKind, rejected: u64, message: &str, encoding: Encoding) -> Response {
    let body = match encoding {
        Encoding::Json if rejected == 0 => b"{}".to_vec(),
        Encoding::Json => {
            let key = match kind {
                SignalKind::Logs => "rejectedLogRecords",
                SignalKind::Traces => "rejectedSpans",
                SignalKind::Metrics => "rejectedDataPoints",
            };
            // int64 is a string in OTLP/JSON.
            serde_json::json!({"partialSuccess": {key: rejected.to_string(), "errorMessage": message}})
                .to_string()
                .into_bytes()
        }
        Encoding::Protobuf if rejected == 0 => Vec::new(),
        Encoding::Protobuf => {
            // Export*ServiceResponse { partial_success = 1 { rejected_* = 1, error_message = 2 } }
            let mut inner = vec![0x08];
            varint(rejected, &mut inner);
            inner.push(0x12);
            varint(message.len() as u64, &mut inner);
            inner.extend_from_slice(message.as_bytes());
            let mut out = vec![0x0a];
            varint(inner.len() as u64, &mut out);
            out.extend_from_slice(&inner);
            out
        }
    };
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(encoding.content_type()),
    );
    response
}

/// Why a body could not be read.
enum BodyError {
    TooLarge,
    Broken(String),
    Encoding(String),
}

/// Reads the body, at most `max` bytes, then inflates it per `Content-Encoding`, again
/// at most `max` bytes (read as it inflates: a bomb never fills memory).
async fn read_body(headers: &HeaderMap, body: Body, max: usize) -> Result<Vec<u8>, BodyError> {
    use http_body_util::BodyExt as _;
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .unwrap_or_default();
    if !matches!(
        encoding.as_str(),
        "" | "identity" | "gzip" | "x-gzip" | "deflate"
    ) {
        return Err(BodyError::Encoding(format!(
            "unsupported Content-Encoding `{encoding}`: supported are gzip, deflate"
        )));
    }
    if let Some(length) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && length > max as u64
    {
        return Err(BodyError::TooLarge);
    }
    let raw = match http_body_util::Limited::new(body, max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            return Err(BodyError::TooLarge);
        }
        Err(e) => return Err(BodyError::Broken(format!("cannot read the body: {e}"))),
    };
    match encoding.as_str() {
        "gzip" | "x-gzip" => inflate(flate2::read::MultiGzDecoder::new(&raw[..]), max),
        "deflate" => inflate(flate2::read::ZlibDecoder::new(&raw[..]), max),
        _ => Ok(Vec::from(raw)),
    }
}

fn inflate(reader: impl Read, max: usize) -> Result<Vec<u8>, BodyError> {
    let mut out = Vec::new();
    reader
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| BodyError::Broken(format!("cannot decompress the body: {e}")))?;
    if out.len() > max {
        return Err(BodyError::TooLarge);
    }
    Ok(out)
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    let Some(secret) = &shared.settings.token else {
        return true;
    };
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .is_some_and(|given| secret.matches(given))
}

/// Counts and logs a refused export (the reason only, never the body).
fn bad(shared: &Shared, why: &str) {
    tracing::debug!("otlp {}: export refused: {why}", shared.name);
    shared.cx.stats().bad_input(why.to_owned());
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // `Host` and `Origin` were checked at the door (`listen::serve`).
    let path = uri.path();
    let exact = matches!(
        path.trim_end_matches('/'),
        "/v1/logs" | "/v1/traces" | "/v1/metrics"
    );
    let Some(kind) = SignalKind::from_path(path).filter(|_| exact) else {
        if uri.path() == "/health" && method == Method::GET {
            return "ok".into_response();
        }
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "{} not found: OTLP/HTTP serves /v1/logs, /v1/traces, /v1/metrics",
                uri.path()
            ),
        );
    };
    if method != Method::POST {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{method} method not allowed, supported: [POST]"),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    if !authorized(&shared, &headers) {
        shared.cx.stats().http_refused("unauthorized");
        let mut response = text(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token".into(),
        );
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    let Some(encoding) = Encoding::of(&headers) else {
        let given = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("no Content-Type");
        let why = format!("{given} unsupported media type, supported: [{JSON}, {PROTOBUF}]");
        bad(&shared, &why);
        return text(StatusCode::UNSUPPORTED_MEDIA_TYPE, why);
    };
    let max = shared.settings.max_body;
    let body = match read_body(&headers, body, max).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => {
            let why = format!("body larger than max_body ({max} bytes)");
            bad(&shared, &why);
            return status(
                StatusCode::PAYLOAD_TOO_LARGE,
                RESOURCE_EXHAUSTED,
                &why,
                encoding,
            );
        }
        Err(BodyError::Broken(why) | BodyError::Encoding(why)) => {
            bad(&shared, &why);
            return status(StatusCode::BAD_REQUEST, INVALID_ARGUMENT, &why, encoding);
        }
    };

    let mut decoder = shared.decoder.lock().await;
    let before = decoder.cuts().items;
    let mut out = Vec::new();
    let decoded = match encoding {
        Encoding::Json => decoder.decode_json(kind, &body, &mut out),
        Encoding::Protobuf => decoder.decode_protobuf(kind, &body, &mut out),
    };
    if let Err(e) = decoded {
        drop(decoder);
        let why = format!("cannot decode the {kind:?} export: {e}");
        bad(&shared, &why);
        return status(StatusCode::BAD_REQUEST, INVALID_ARGUMENT, &why, encoding);
    }
    let rejected = decoder.cuts().items - before;
    let max_items = decoder.limits().max_items;
    let mut signals = counted(&shared.cx, out);
    let total = signals.len();
    let emitted = shared
        .cx
        .emit_batch_within(&mut signals, shared.settings.ingest_timeout)
        .await;
    drop(decoder);
    if let Some(why) = emitted.refused {
        let message = match why {
            Refused::Full => format!(
                "the graph is full: {} of the export's {total} signals taken, retry later",
                emitted.accepted
            ),
            Refused::Closed => "the receiver is shutting down".to_owned(),
        };
        tracing::debug!(
            accepted = emitted.accepted,
            total,
            "otlp {}: {message}",
            shared.name
        );
        let mut response = status(
            StatusCode::SERVICE_UNAVAILABLE,
            UNAVAILABLE,
            &message,
            encoding,
        );
        let secs = shared.settings.ingest_timeout.as_secs().max(1);
        if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    let message = if rejected > 0 {
        format!(
            "{rejected} records past the receiver's limit of {} per export were dropped",
            max_items
        )
    } else {
        String::new()
    };
    accepted(kind, rejected, &message, encoding)
}
