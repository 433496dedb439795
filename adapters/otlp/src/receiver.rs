//! The OTLP receiver: `[sources.NAME] type = "otlp"`, the endpoint OpenTelemetry
//! exporters send to (OTLP/HTTP and OTLP/gRPC), answering as the OpenTelemetry
//! Collector's `otlp` receiver does so that exporters' defaults work unchanged.
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
//!
//! OTLP/gRPC ([`grpc`](crate::grpc) on the wire) is served on `grpc_listen` (default
//! `127.0.0.1:4317`, `""` for none), over HTTP/2 without TLS (h2c), with the same token,
//! `Host`/`Origin` rules, bounds and counters:
//!
//! - `/opentelemetry.proto.collector.{logs,trace,metrics}.v1.{Logs,Trace,Metrics}Service/Export`,
//!   one length-prefixed `Export*ServiceRequest`, `grpc-encoding: gzip` or `deflate`
//!   (inflated with the same bound).
//! - `grpc-status` 0 with the `Export*ServiceResponse` (its `partial_success` as over
//!   HTTP) once every signal is in the graph; 14 `UNAVAILABLE` with a `RetryInfo` when the
//!   graph could not take them within `ingest_timeout_ms` (or the call's `grpc-timeout`,
//!   if shorter); 3 `INVALID_ARGUMENT` for a message that does not decode; 13 `INTERNAL`
//!   for a broken frame (truncated, a compressed flag without an encoding), as gRPC's own
//!   servers answer; 8 `RESOURCE_EXHAUSTED` past `max_body`; 16 `UNAUTHENTICATED` without
//!   the token (the `authorization` metadata); 12 `UNIMPLEMENTED` for another method or
//!   compression; 7 `PERMISSION_DENIED` for another `:authority` or any `Origin`; HTTP 415
//!   for a content type that is not `application/grpc`.
//!
//! Both doors hand a decoded body and its kind to one `ingest` function; they only frame it.

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
use patchbay_transport::listen::{
    self, Access, Limits, Listener, ListenerOptions, Origins, check_ingest_timeout,
    default_ingest_timeout_ms,
};
use patchbay_transport::parse_flattened;
use serde::Deserialize;
use tokio::sync::{Mutex, watch};

use crate::grpc::code::{INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE};
use crate::{OtlpDecoder, SignalKind};

mod grpc;

/// The address the receiver listens on when the config names none: OTLP/HTTP's port.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:4318";
/// The address OTLP/gRPC is served on when the config names none: OTLP/gRPC's port.
pub const DEFAULT_GRPC_LISTEN: &str = "127.0.0.1:4317";
/// The largest `max_body`: 64 MiB.
pub const MAX_BODY_LIMIT: usize = 64 << 20;
/// How often the token counts the decoder holds back (metrics waiting to see whether
/// events of the same session carry the tokens) are let go.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// `[sources.NAME] type = "otlp"`: an OTLP receiver, as the OpenTelemetry Collector's:
/// OTLP/HTTP on `listen` (`POST /v1/logs`, `/v1/traces`, `/v1/metrics`; protobuf or
/// JSON; gzip or deflate) and OTLP/gRPC on `grpc_listen` (the three `Export` services;
/// gzip). Point an exporter's `OTEL_EXPORTER_OTLP_ENDPOINT` at `http://LISTEN` for
/// `http/protobuf` and `http/json`, at `http://GRPC_LISTEN` for `grpc`.
// Not `deny_unknown_fields`: it does not work through `flatten`; `build_source` refuses
// unknown keys.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct OtlpConfig {
    /// `IP:PORT` to serve OTLP/HTTP on (`localhost:PORT` means `127.0.0.1:PORT`). Default
    /// `127.0.0.1:4318`, OTLP/HTTP's port. Not on loopback, a `token` is required.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// `IP:PORT` to serve OTLP/gRPC on (HTTP/2 without TLS), or `""` for no gRPC.
    /// Default `127.0.0.1:4317`, OTLP/gRPC's port. Not on loopback, a `token` is required.
    /// The token, `max_body`, `ingest_timeout_ms` and the listener options apply to it as
    /// to `listen`.
    #[serde(default = "default_grpc_listen")]
    pub grpc_listen: String,
    /// Bearer token exporters must send (`Authorization: Bearer …`; set it with
    /// `OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer …"`, which gRPC exporters send as
    /// `authorization` metadata). A request without it gets 401 (gRPC: status 16
    /// `UNAUTHENTICATED`).
    #[serde(default)]
    pub token: Option<Secret>,
    /// Largest body accepted, in bytes, as sent and once decompressed (a gzip body that
    /// inflates past it is refused with 413, gRPC status 8 `RESOURCE_EXHAUSTED`, as it
    /// inflates). From 1 to 67108864 (64 MiB). Default 4194304 (4 MiB).
    #[serde(default = "default_max_body")]
    pub max_body: usize,
    /// How long an export waits for room when the graph is full, in ms, before it is
    /// refused with `503` and `Retry-After` (gRPC: status 14 `UNAVAILABLE` with a
    /// `RetryInfo`; exporters retry it; refusals are counted). An export is answered
    /// success only once every one of its signals is in the graph. At most 86400000 (one
    /// day). Default 5000.
    #[serde(default = "default_ingest_timeout_ms")]
    pub ingest_timeout_ms: u64,
    /// `allowed_hosts`, `header_timeout_ms`, `idle_timeout_ms`, `max_connections`: as
    /// every listener's, on `listen` and `grpc_listen` alike.
    #[serde(flatten)]
    pub listener: ListenerOptions,
}

fn default_listen() -> String {
    DEFAULT_LISTEN.into()
}
fn default_grpc_listen() -> String {
    DEFAULT_GRPC_LISTEN.into()
}
fn default_max_body() -> usize {
    4 << 20
}
/// Checked options: what the running receiver uses.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The address to serve OTLP/HTTP on.
    pub listen: SocketAddr,
    /// The address to serve OTLP/gRPC on, if any.
    pub grpc_listen: Option<SocketAddr>,
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
        let grpc_listen = match self.grpc_listen.trim() {
            "" => None,
            text => Some(parse_listen(text).ok_or_else(|| {
                (
                    "grpc_listen",
                    format!(
                        "`{text}` is not an `IP:PORT` address (e.g. `{DEFAULT_GRPC_LISTEN}`, or \
                         `\"\"` for no gRPC)"
                    ),
                )
            })?),
        };
        if let Some(Secret(t)) = &self.token
            && t.trim().is_empty()
        {
            return Err(("token", "the token must not be empty".into()));
        }
        for (key, address) in [("listen", Some(listen)), ("grpc_listen", grpc_listen)] {
            if let Some(address) = address
                && !address.ip().is_loopback()
                && self.token.is_none()
            {
                return Err((
                    key,
                    format!(
                        "`{address}` is not a loopback address: set a `token` so that only \
                         exporters that know it are heard"
                    ),
                ));
            }
        }
        if grpc_listen == Some(listen) && listen.port() != 0 {
            return Err((
                "grpc_listen",
                format!("`{listen}` is `listen` too: OTLP/gRPC needs a port of its own"),
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
        let limits = self.listener.check()?;
        Ok(Settings {
            listen,
            grpc_listen,
            token: self.token,
            max_body: self.max_body,
            ingest_timeout: Duration::from_millis(self.ingest_timeout_ms),
            allowed_hosts: self.listener.allowed_hosts,
            limits,
        })
    }
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let config: OtlpConfig = parse_flattened(options)?;
    options.check_range("max_body", config.max_body, 1..=MAX_BODY_LIMIT)?;
    check_ingest_timeout(options, config.ingest_timeout_ms)?;
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

/// A listener's address as a URL an exporter can use.
fn url_of(local: SocketAddr) -> String {
    if local.ip().is_unspecified() {
        format!("http://127.0.0.1:{}", local.port())
    } else {
        format!("http://{local}")
    }
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
            let grpc_listener = match settings.grpc_listen {
                Some(address) => Some(
                    tokio::net::TcpListener::bind(address)
                        .await
                        .map_err(|e| format!("cannot serve OTLP/gRPC on {address}: {e}"))?,
                ),
                None => None,
            };
            let local = listener.local_addr()?;
            let grpc_local = grpc_listener
                .as_ref()
                .map(tokio::net::TcpListener::local_addr)
                .transpose()?;
            cx.started();
            cx.stats().set_gauge("port", f64::from(local.port()));
            if let Some(grpc_local) = grpc_local {
                cx.stats()
                    .set_gauge("grpc_port", f64::from(grpc_local.port()));
            }
            let shared = Arc::new(Shared {
                name: cx.name().to_owned(),
                decoder: Mutex::new(OtlpDecoder::new(format!("otlp:{}", cx.name()))),
                settings: settings.clone(),
                cx: cx.clone(),
            });
            // Exporters send no Origin; a browser does: a web page must not post here.
            let door = |name: String, local: SocketAddr, refusal: listen::Refusal| Listener {
                name,
                limits: settings.limits,
                access: Access::new(local, settings.allowed_hosts.clone(), Origins::None),
                stats: Arc::clone(cx.stats()),
                refusal,
            };
            let (stop_tx, stop_rx) = watch::channel(false);
            let stopped = |mut stop: watch::Receiver<bool>| async move {
                let _ = stop.wait_for(|stop| *stop).await;
            };
            let app = Router::new()
                .fallback(handle)
                .with_state(Arc::clone(&shared));
            let mut server = tokio::spawn(listen::serve(
                listener,
                app,
                door(format!("otlp {local}"), local, listen::text_refusal),
                stopped(stop_rx.clone()),
            ));
            let mut grpc_server = match (grpc_listener, grpc_local) {
                (Some(grpc_listener), Some(grpc_local)) => {
                    let app = Router::new()
                        .fallback(grpc::handle)
                        .with_state(Arc::clone(&shared));
                    Some(tokio::spawn(listen::serve_h2c(
                        grpc_listener,
                        app,
                        door(format!("otlp grpc {grpc_local}"), grpc_local, grpc::refusal),
                        stopped(stop_rx.clone()),
                    )))
                }
                _ => None,
            };
            let url = url_of(local);
            tracing::info!(url = %url, "otlp {}: OTLP/HTTP receiver listening", shared.name);
            let mut detail = format!("otlp: {url}");
            if let Some(grpc_local) = grpc_local {
                let grpc_url = url_of(grpc_local);
                tracing::info!(url = %grpc_url, "otlp {}: OTLP/gRPC receiver listening", shared.name);
                detail.push_str(&format!(", grpc: {grpc_url}"));
            }
            cx.set_state(HealthState::Ok, Some(detail));

            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            let result = loop {
                let grpc_ended = async {
                    match &mut grpc_server {
                        Some(server) => server.await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = tick.tick() => {
                        if flush(&shared).await.is_err() {
                            break Ok(());
                        }
                    }
                    ended = &mut server => break Err(server_ended("OTLP/HTTP", ended)),
                    ended = grpc_ended => break Err(server_ended("OTLP/gRPC", ended)),
                    () = cx.shutdown().wait() => break Ok(()),
                }
            };
            // Requests in flight finish (and hand their signals over) before the last flush.
            let _ = stop_tx.send(true);
            for server in std::iter::once(&mut server).chain(grpc_server.as_mut()) {
                if !server.is_finished()
                    && tokio::time::timeout(Duration::from_secs(1), &mut *server)
                        .await
                        .is_err()
                {
                    server.abort();
                }
            }
            let _ = flush(&shared).await;
            result
        })
    }
}

fn server_ended(which: &str, ended: Result<(), tokio::task::JoinError>) -> ComponentError {
    match ended {
        Ok(()) => format!("the {which} server stopped").into(),
        Err(e) => format!("the {which} server task failed: {e}").into(),
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
    out.into_iter().map(|d| Arc::new(cx.counted(d))).collect()
}

/// What became of an export handed to [`ingest`].
#[derive(Debug)]
enum Ingested {
    /// Every signal of it is in the graph; `rejected` records past the decoder's limits
    /// were dropped (`message` says so).
    Accepted { rejected: u64, message: String },
    /// The body does not decode: why (counted).
    Invalid(String),
    /// The graph did not take all of it within the time given (or is shutting down):
    /// what the exporter is told. What it took is not taken back.
    Unavailable(String),
}

/// Decodes one export's body (already inflated) and hands its signals to the graph,
/// waiting at most `within` for room: the one path both OTLP/HTTP and OTLP/gRPC take.
async fn ingest(
    shared: &Shared,
    kind: SignalKind,
    encoding: Encoding,
    body: &[u8],
    within: Duration,
) -> Ingested {
    let mut decoder = shared.decoder.lock().await;
    let before = decoder.cuts().items;
    let mut out = Vec::new();
    let decoded = match encoding {
        Encoding::Json => decoder.decode_json(kind, body, &mut out),
        Encoding::Protobuf => decoder.decode_protobuf(kind, body, &mut out),
    };
    if let Err(e) = decoded {
        drop(decoder);
        let why = format!("cannot decode the {kind:?} export: {e}");
        bad(shared, &why);
        return Ingested::Invalid(why);
    }
    let rejected = decoder.cuts().items - before;
    let max_items = decoder.limits().max_items;
    let mut signals = counted(&shared.cx, out);
    let total = signals.len();
    let emitted = shared.cx.emit_batch_within(&mut signals, within).await;
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
        return Ingested::Unavailable(message);
    }
    let message = if rejected > 0 {
        format!(
            "{rejected} records past the receiver's limit of {max_items} per export were dropped"
        )
    } else {
        String::new()
    };
    Ingested::Accepted { rejected, message }
}

/// How long an exporter refused for a full graph is told to wait.
fn retry_after(shared: &Shared) -> Duration {
    Duration::from_secs(shared.settings.ingest_timeout.as_secs().max(1))
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

/// An error answer as the collector gives it: a `google.rpc.Status` in the request's
/// encoding.
fn status(http: StatusCode, code: u32, message: &str, encoding: Encoding) -> Response {
    let body = match encoding {
        Encoding::Json => serde_json::json!({"code": code, "message": message})
            .to_string()
            .into_bytes(),
        Encoding::Protobuf => {
            let mut out = Vec::with_capacity(message.len() + 8);
            if code != 0 {
                out.push(0x08);
                varint(u64::from(code), &mut out);
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
        Encoding::Protobuf => crate::grpc::export_response(rejected, message),
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

/// Whether a request declares a `Content-Length` past `max` (refused before anything is
/// read).
fn declared_too_large(headers: &HeaderMap, max: usize) -> bool {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|length| length > max as u64)
}

/// Collects a request's body, at most `max` bytes.
async fn collect(body: Body, max: usize) -> Result<axum::body::Bytes, BodyError> {
    use http_body_util::BodyExt as _;
    match http_body_util::Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(BodyError::TooLarge)
        }
        Err(e) => Err(BodyError::Broken(format!("cannot read the body: {e}"))),
    }
}

/// Reads the body, at most `max` bytes, then inflates it per `Content-Encoding`, again
/// at most `max` bytes (read as it inflates: a bomb never fills memory).
async fn read_body(headers: &HeaderMap, body: Body, max: usize) -> Result<Vec<u8>, BodyError> {
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
    if declared_too_large(headers, max) {
        return Err(BodyError::TooLarge);
    }
    let raw = collect(body, max).await?;
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

/// Whether a request carries the token (`Authorization: Bearer …`; gRPC metadata is
/// headers too), or none is needed.
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
    let within = shared.settings.ingest_timeout;
    match ingest(&shared, kind, encoding, &body, within).await {
        Ingested::Accepted { rejected, message } => accepted(kind, rejected, &message, encoding),
        Ingested::Invalid(why) => status(StatusCode::BAD_REQUEST, INVALID_ARGUMENT, &why, encoding),
        Ingested::Unavailable(message) => {
            let mut response = status(
                StatusCode::SERVICE_UNAVAILABLE,
                UNAVAILABLE,
                &message,
                encoding,
            );
            let secs = retry_after(&shared).as_secs();
            if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(grpc_listen: &str, token: Option<&str>) -> OtlpConfig {
        let mut options = serde_json::json!({ "grpc_listen": grpc_listen });
        if let Some(token) = token {
            options["token"] = token.into();
        }
        serde_json::from_value(options).expect("options")
    }

    #[test]
    fn grpc_listen_is_checked() {
        let defaults: OtlpConfig = serde_json::from_value(serde_json::json!({})).expect("options");
        let settings = defaults.check().expect("the defaults are valid");
        assert_eq!(settings.listen.to_string(), DEFAULT_LISTEN);
        assert_eq!(
            settings.grpc_listen.map(|a| a.to_string()).as_deref(),
            Some(DEFAULT_GRPC_LISTEN)
        );
        assert_eq!(config("", None).check().expect("off").grpc_listen, None);
        let key = |c: OtlpConfig| c.check().expect_err("refused").0;
        assert_eq!(key(config("nowhere", None)), "grpc_listen");
        assert_eq!(key(config("127.0.0.1:4318", None)), "grpc_listen");
        assert_eq!(key(config("0.0.0.0:4317", None)), "grpc_listen");
        let open = config("0.0.0.0:4317", Some("t"))
            .check()
            .expect("with a token");
        assert!(open.grpc_listen.is_some_and(|a| a.ip().is_unspecified()));
    }
}
