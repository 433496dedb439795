//! The HTTP side of a sidecar: routes, access checks, and the per-connection loops.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{ConnectInfo, DefaultBodyLimit, FromRequestParts, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use patchbay_graph::{ComponentStats, Refused, SourceContext, Telemetry};
use patchbay_signal::SmallString;
use patchbay_signal::normalize::Normalizer;
use serde::Deserialize;
use serde_json::json;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use crate::config::Settings;
use crate::hub::{
    Format, FrameRef, Hub, Outgoing, Replay, Subscription, TypeFilter, cut_reason, gap_text,
    lagged_text,
};
use crate::inbound::{body_to_signals, ui_frame_to_signal};
use crate::websocket::{Incoming, Socket, Violation, close_code};

/// At most this many frames are written before a flush.
const WRITE_BATCH: usize = 256;

/// At most this many frames a UI sent are handed to the graph at once.
const INGEST_BATCH: usize = 1024;

/// How often an idle SSE stream gets a comment, so proxies keep it open.
const SSE_KEEPALIVE: Duration = Duration::from_secs(15);

/// What every request handler shares.
pub(crate) struct AppState {
    pub name: String,
    pub settings: Settings,
    pub hub: Arc<Hub>,
    pub inbound: Option<SourceContext>,
    pub telemetry: Arc<Telemetry>,
    pub stats: Arc<ComponentStats>,
    pub local: SocketAddr,
    /// This run's epoch: `seq` numbers belong to it.
    pub epoch: String,
    /// The last seq handed to the hub.
    pub published: Arc<AtomicU64>,
    /// Its WebSocket counters (protocol violations by clients, hot connections).
    pub ws: Arc<crate::ws_metrics::WsMetrics>,
}

type Shared = Arc<AppState>;

impl AppState {
    fn source_name(&self) -> String {
        format!("sidecar:{}", self.name)
    }

    /// Where a client resuming with `since` (and the `epoch` it saw, if it says) starts:
    /// a `since` of another epoch, or beyond the last seq published (a sidecar that
    /// restarted, for a client that cannot name the epoch), means the whole ring.
    fn resume_point(&self, since: Option<u64>, epoch: Option<&str>) -> Option<u64> {
        let since = since?;
        let other_epoch = epoch.is_some_and(|e| e.trim() != self.epoch);
        let beyond = epoch.is_none() && since > self.published.load(Ordering::Acquire);
        Some(if other_epoch || beyond { 0 } else { since })
    }

    /// The `X-Patchbay-Epoch` header value.
    fn epoch_header(&self) -> HeaderValue {
        HeaderValue::from_str(&self.epoch).unwrap_or(HeaderValue::from_static("0"))
    }

    /// The `X-Patchbay-Status` header value: the overall state now (`None` when a component
    /// name cannot be sent in a header).
    fn status_header(&self) -> Option<HeaderValue> {
        HeaderValue::from_str(&self.telemetry.overall().summary()).ok()
    }

    /// Logs and counts a WebSocket protocol violation by the client at `peer`.
    fn ws_violation(&self, peer: SocketAddr, what: &str) {
        self.ws.violations.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(sidecar = %self.name, client = %peer, "WebSocket protocol violation: {what}");
    }

    /// Counts unusable input on the inbound side (where it would have entered the graph).
    fn bad_input(&self, why: &str) {
        match &self.inbound {
            Some(i) => i.stats().bad_input(why),
            None => self.stats.bad_input(why),
        }
    }
}

/// The sidecar's routes.
pub(crate) fn router(state: Shared) -> Router {
    let limit = state.settings.max_frame;
    Router::new()
        .route("/", get(status_page))
        .route("/status/stream", get(status_stream))
        .route("/ws", get(ws_handler))
        .route("/events", get(sse_handler))
        .route("/signal", post(post_signal))
        .route("/api/signal", post(post_signal))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such endpoint") })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            cors,
        ))
        .with_state(state)
}

/// CORS for the allowed origins, so that a UI served from another local port can POST,
/// read `/events` and `/health`: answers preflights, and names the origin on responses.
/// Requests from other origins get no CORS headers (browsers then hide the response), and
/// their preflights a 403.
async fn cors(
    State(state): State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let origin = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .map(str::to_owned);
    let allowed = origin
        .as_deref()
        .filter(|o| state.settings.origin_allowed(Some(o)))
        .and_then(|o| HeaderValue::from_str(o).ok());
    if request.method() == axum::http::Method::OPTIONS && origin.is_some() {
        let Some(allowed) = allowed else {
            return error(StatusCode::FORBIDDEN, "origin not allowed");
        };
        let mut response = StatusCode::NO_CONTENT.into_response();
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allowed);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type, last-event-id"),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        return response;
    }
    let mut response = next.run(request).await;
    if let Some(allowed) = allowed {
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allowed);
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}

/// How the sidecar answers a request refused at the door (a foreign `Host` or `Origin`).
pub(crate) fn refusal(status: StatusCode, message: &'static str) -> Response {
    error(status, message)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({"ok": false, "error": message.into()})),
    )
        .into_response()
}

/// A refused request: `{"ok":false,"error":…}` with its status (small, unlike a
/// `Response`, so that checks can return it).
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut response = error(self.status, self.message);
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Query parameters of the streaming endpoints (all optional; checked by hand so that
/// errors name the parameter).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct StreamQuery {
    since: Option<String>,
    types: Option<String>,
    format: Option<String>,
    token: Option<String>,
    epoch: Option<String>,
    /// `false`: a WebSocket client that only sends (it is sent no signal).
    receive: Option<String>,
}

struct StreamParams {
    since: Option<u64>,
    format: Format,
    filter: TypeFilter,
}

impl StreamQuery {
    fn params(&self) -> Result<StreamParams, Refusal> {
        let since = match &self.since {
            Some(s) => Some(s.trim().parse::<u64>().map_err(|_| {
                Refusal::new(
                    StatusCode::BAD_REQUEST,
                    format!("`since` must be a sequence number, got `{s}`"),
                )
            })?),
            None => None,
        };
        let format = match &self.format {
            Some(f) => Format::parse(f).ok_or_else(|| {
                Refusal::new(
                    StatusCode::BAD_REQUEST,
                    format!("unknown `format` `{f}` (expected `sajou` or `escapement`)"),
                )
            })?,
            None => Format::Sajou,
        };
        let receive = match self.receive.as_deref().map(str::trim) {
            None | Some("true") => true,
            Some("false") if self.since.is_some() || self.types.is_some() => {
                return Err(Refusal::new(
                    StatusCode::BAD_REQUEST,
                    "`receive=false` takes no `since` or `types`: the client is sent no signal",
                ));
            }
            Some("false") => false,
            Some(other) => {
                return Err(Refusal::new(
                    StatusCode::BAD_REQUEST,
                    format!("`receive` must be `true` or `false`, got `{other}`"),
                ));
            }
        };
        let filter = if receive {
            TypeFilter::parse(self.types.as_deref().unwrap_or(""))
        } else {
            TypeFilter::Nothing
        };
        Ok(StreamParams {
            since,
            format,
            filter,
        })
    }
}

fn query_or_error(q: Result<Query<StreamQuery>, QueryRejection>) -> Result<StreamQuery, Refusal> {
    q.map(|Query(q)| q).map_err(|e| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("bad query string: {}", e.body_text()),
        )
    })
}

/// Checks the bearer token (when one is set); a refusal is counted by its reason
/// (`patchbay_http_refused_total`). `Host` and `Origin` were checked at the door, for
/// every endpoint (`patchbay_transport::listen`).
fn authorize(
    state: &AppState,
    headers: &HeaderMap,
    query_token: Option<&str>,
) -> Result<(), Refusal> {
    if has_token(state, headers, query_token) {
        return Ok(());
    }
    state.stats.http_refused("unauthorized");
    Err(Refusal::new(
        StatusCode::UNAUTHORIZED,
        "missing or wrong bearer token",
    ))
}

/// Whether the request carries the token (always true without one configured).
fn has_token(state: &AppState, headers: &HeaderMap, query_token: Option<&str>) -> bool {
    let Some(secret) = &state.settings.token else {
        return true;
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    bearer.or(query_token).is_some_and(|g| secret.matches(g))
}

/// A stream's query (`/ws`, `/events`), once the request is known to carry the token.
fn authorized_stream(
    state: &AppState,
    headers: &HeaderMap,
    query: Result<Query<StreamQuery>, QueryRejection>,
) -> Result<StreamQuery, Refusal> {
    let query = query_or_error(query)?;
    authorize(state, headers, query.token.as_deref())?;
    Ok(query)
}

async fn ws_handler(
    State(state): State<Shared>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, QueryRejection>,
    request: Request,
) -> Response {
    let query = match authorized_stream(&state, &headers, query) {
        Ok(q) => q,
        Err(r) => return r.into_response(),
    };
    let params = match query.params() {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let (accept, upgrade) = match upgrade_request(request) {
        Ok(taken) => taken,
        Err(r) => return r.into_response(),
    };
    let since = state.resume_point(params.since, query.epoch.as_deref());
    let Some((sub, replay)) = state.hub.subscribe(since, params.format, params.filter) else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the sidecar is stopping");
    };
    let epoch = state.epoch_header();
    let status = state.status_header();
    tokio::spawn(async move {
        // The connection is ours once hyper has sent the 101 below.
        let Ok(upgraded) = upgrade.await else {
            return;
        };
        let socket = Socket::new(TokioIo::new(upgraded), state.settings.max_frame);
        ws_client(state, peer, socket, sub, replay).await;
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    headers.insert(crate::EPOCH_HEADER, epoch);
    if let Some(status) = status {
        headers.insert(crate::STATUS_HEADER, status);
    }
    response
}

/// Checks a WebSocket opening request (RFC 6455, 4.2.1) and returns the
/// `Sec-WebSocket-Accept` value and the connection to come.
fn upgrade_request(mut request: Request) -> Result<(HeaderValue, OnUpgrade), Refusal> {
    let headers = request.headers();
    let has_token = |name: header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|value| {
            value.to_str().is_ok_and(|v| {
                v.split(',')
                    .any(|part| part.trim().eq_ignore_ascii_case(token))
            })
        })
    };
    if request.method() != axum::http::Method::GET {
        return Err(Refusal::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "a WebSocket is opened with GET",
        ));
    }
    if !has_token(header::CONNECTION, "upgrade") || !has_token(header::UPGRADE, "websocket") {
        return Err(Refusal::new(
            StatusCode::UPGRADE_REQUIRED,
            "this is a WebSocket endpoint: send `Connection: upgrade` and `Upgrade: websocket`",
        ));
    }
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "`Sec-WebSocket-Version` must be 13",
        ));
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "`Sec-WebSocket-Key` is missing",
        ));
    };
    let accept = derive_accept_key(key.as_bytes());
    let accept = HeaderValue::from_str(&accept)
        .map_err(|_| Refusal::new(StatusCode::BAD_REQUEST, "`Sec-WebSocket-Key` is not usable"))?;
    let Some(upgrade) = request.extensions_mut().remove::<OnUpgrade>() else {
        return Err(Refusal::new(
            StatusCode::UPGRADE_REQUIRED,
            "this connection cannot be upgraded",
        ));
    };
    Ok((accept, upgrade))
}

/// A WebSocket connection of a sidecar.
type WsSocket = Socket<TokioIo<Upgraded>>;

async fn ws_client(
    state: Shared,
    peer: SocketAddr,
    socket: WsSocket,
    sub: Subscription,
    replay: Replay,
) {
    let hub = Arc::clone(&state.hub);
    // A client still taking its frames when the drain deadline passes is dropped (the
    // sidecar counted what it did not take).
    tokio::select! {
        () = ws_session(state, peer, socket, sub, replay) => {}
        () = hub.wait_abandoned() => {}
    }
}

async fn ws_session(
    state: Shared,
    peer: SocketAddr,
    // Not split in two halves: reading and writing take turns in this task.
    mut socket: WsSocket,
    sub: Subscription,
    replay: Replay,
) {
    let format = sub.client.format;
    if let Some((from, to)) = replay.gap {
        socket.queue_text(&gap_text(from, to));
    }
    // Frames are written in batches and flushed once: one write for a burst, not one each.
    for chunk in replay.frames.chunks(WRITE_BATCH) {
        for frame in chunk {
            socket.queue_text(frame.as_str(format));
        }
        if socket.flush().await.is_err() {
            return;
        }
    }
    if socket.flush().await.is_err() {
        return;
    }
    let mut session = Session {
        ingest: Ingest {
            normalizer: Normalizer::new(state.source_name()),
            signals: Vec::new(),
            peer,
            binary_noted: false,
        },
        state,
        socket,
        sub,
        ready: Vec::with_capacity(WRITE_BATCH),
    };
    loop {
        match session.turn().await {
            Turn::Ended => break,
            Turn::Read(messages) if messages >= HOT_READ => {
                // With many clients, writing to them keeps the other cores busy already,
                // and the graph's hand-overs are larger when it shares a thread with this
                // connection: a move would cost more than it gives.
                if session.state.hub.receiving_count() > HOT_CLIENTS {
                    continue;
                }
                if let Some(_hot) = hot::Hot::enter() {
                    session.state.ws.hot.fetch_add(1, Ordering::Relaxed);
                    if session.hot().await {
                        break;
                    }
                }
            }
            Turn::Read(_) | Turn::Wrote => {}
        }
    }
}

/// A read of at least this many messages makes a connection hot (see [`hot`]).
const HOT_READ: usize = 32;

/// A connection goes hot only while its sidecar has at most this many clients taking
/// frames.
const HOT_CLIENTS: usize = 4;

/// How much a hot connection reads at once.
const HOT_READ_CHUNK: usize = 64 * 1024;

/// A hot connection goes back to the workers after this many smaller reads in a row…
const COOL_READS: usize = 4;

/// … or once it had nothing to do for this long.
const COOL_AFTER: Duration = Duration::from_millis(50);

/// One connection of a sidecar after its handshake and replay.
struct Session {
    state: Shared,
    socket: WsSocket,
    sub: Subscription,
    ingest: Ingest,
    /// Frames taken from the client's queue, to be written together.
    ready: Vec<Outgoing>,
}

/// What a [`Session`] waits for: frames for its client, or bytes from it.
enum Ready {
    /// A frame or notice for the client (`None`: the sidecar stopped).
    Out(Option<Outgoing>),
    /// What reading the socket gave.
    Read(std::io::Result<usize>),
}

/// What one turn of a [`Session`] did.
enum Turn {
    /// It read this many messages (and handed their signals over).
    Read(usize),
    /// It wrote the frames ready for the client.
    Wrote,
    /// The connection is over.
    Ended,
}

impl Session {
    /// Waits for frames to write or bytes to read, and handles what came first.
    async fn turn(&mut self) -> Turn {
        let ready = self.wait().await;
        self.handle(ready).await
    }

    /// Waits for frames to write or bytes to read. Cancel-safe: nothing is lost when the
    /// wait is dropped.
    async fn wait(&mut self) -> Ready {
        tokio::select! {
            out = self.sub.client.pop() => Ready::Out(out),
            read = self.socket.fill() => Ready::Read(read),
        }
    }

    /// Writes the frames ready, or takes the messages read.
    async fn handle(&mut self, ready: Ready) -> Turn {
        match ready {
            Ready::Out(Some(out)) => {
                // Every frame ready, written and then flushed once.
                self.ready.push(out);
                self.sub.client.take_ready(WRITE_BATCH, &mut self.ready);
                let format = self.sub.client.format;
                let mut cut = None;
                for out in self.ready.drain(..) {
                    match out {
                        Outgoing::Frame(frame) => self.socket.queue_text(frame.as_str(format)),
                        Outgoing::Lagged(resume_from) => {
                            self.socket.queue_text(&lagged_text(resume_from));
                        }
                        Outgoing::Cut(resume_from) => {
                            self.socket.queue_text(&lagged_text(resume_from));
                            cut = Some(resume_from);
                        }
                    }
                }
                if self.socket.flush().await.is_err() {
                    return Turn::Ended;
                }
                if let Some(resume_from) = cut {
                    tracing::info!(sidecar = %self.state.name, resume_from, "a client lagged behind a lossless sidecar: cut off, it can resume from the ring");
                    self.socket
                        .close(close_code::TRY_AGAIN_LATER, &cut_reason(resume_from))
                        .await;
                    return Turn::Ended;
                }
                Turn::Wrote
            }
            Ready::Out(None) => {
                // The sidecar stopped and this client has everything queued for it.
                self.socket
                    .close(close_code::GOING_AWAY, "patchbay is shutting down")
                    .await;
                Turn::Ended
            }
            // The end of the stream without a close frame is a closed tab or a dropped
            // network, not a broken rule (what was read is handed over already).
            Ready::Read(read) if !matches!(read, Ok(1..)) => Turn::Ended,
            Ready::Read(_) => match self.ingest.read_all(&self.state, &mut self.socket).await {
                Ok(messages) => Turn::Read(messages),
                Err(Ended::Closed) => Turn::Ended,
                Err(Ended::Failed(violation)) => {
                    let state = &self.state;
                    let why = violation.to_string();
                    state.ws_violation(self.ingest.peer, &why);
                    match violation {
                        Violation::TooLong(_) => refuse(state, &why, &mut self.socket),
                        Violation::NotUtf8 | Violation::Protocol(_) => state.bad_input(&why),
                    }
                    self.socket.close(violation.close_code(), &why).await;
                    Turn::Ended
                }
            },
        }
    }

    /// Takes turns on a thread of its own, off the runtime's workers, while its reads
    /// stay large; returns whether the connection ended (or was abandoned) meanwhile.
    async fn hot(&mut self) -> bool {
        let hub = Arc::clone(&self.state.hub);
        let handle = tokio::runtime::Handle::current();
        // Larger reads: fewer, larger hand-overs to the graph, each a wake-up across threads.
        self.socket.reader.read_in(HOT_READ_CHUNK);
        let ended = tokio::task::block_in_place(|| {
            handle.block_on(async {
                let turns = async {
                    let mut small = 0;
                    loop {
                        // Only the wait is given up when idle: a turn, once begun, ends.
                        let Ok(ready) = tokio::time::timeout(COOL_AFTER, self.wait()).await else {
                            return false;
                        };
                        match self.handle(ready).await {
                            Turn::Ended => return true,
                            Turn::Read(messages) if messages < HOT_READ => {
                                small += 1;
                                if small >= COOL_READS {
                                    return false;
                                }
                            }
                            Turn::Read(_) => small = 0,
                            Turn::Wrote => {}
                        }
                    }
                };
                tokio::select! {
                    ended = turns => ended,
                    () = hub.wait_abandoned() => true,
                }
            })
        });
        self.socket.reader.read_in(crate::websocket::READ_CHUNK);
        ended
    }
}

/// Hot connections. A producer sending as fast as it can keeps the task that reads its
/// connection busy, and tokio runs the tasks that task wakes (the graph's engine, then
/// the sidecar's clients) on the same worker, next: one connection's whole pipeline
/// shares one core while the other worker idles. So a connection whose reads bring many
/// messages at once, to a sidecar with few clients (with many, writing to them keeps the
/// other workers busy), leaves the runtime's workers ([`tokio::task::block_in_place`]) and
/// goes on on a thread of its own until its reads get small or stop; the engine and the
/// clients, woken from outside the workers, run on them meanwhile. At low rates (a
/// message or two a read) nothing changes, and no thread is woken more than before.
mod hot {
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// How many connections are hot now.
    static HOT: AtomicUsize = AtomicUsize::new(0);

    /// At most this many at once: each takes a thread beside the workers, and more
    /// connections than one are spread over the workers anyway.
    const MAX_HOT: usize = 1;

    /// A connection's leave to be hot; dropping it gives the place back.
    pub(super) struct Hot(());

    impl Hot {
        /// The leave, if the runtime has workers to leave (a multi-thread one) and fewer
        /// than [`MAX_HOT`] connections are hot.
        pub(super) fn enter() -> Option<Hot> {
            let flavor = tokio::runtime::Handle::try_current().ok()?.runtime_flavor();
            if flavor != tokio::runtime::RuntimeFlavor::MultiThread {
                return None;
            }
            HOT.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_HOT).then_some(n + 1)
            })
            .ok()?;
            crate::worker_policy::connection_hot(true);
            Some(Hot(()))
        }
    }

    impl Drop for Hot {
        fn drop(&mut self) {
            if HOT.fetch_sub(1, Ordering::AcqRel) == 1 {
                crate::worker_policy::connection_hot(false);
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::Hot;

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn one_connection_at_a_time_is_hot() {
            let _turn = crate::worker_policy::HOT_TESTS
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let first = Hot::enter();
            assert!(first.is_some());
            assert!(Hot::enter().is_none(), "two at once");
            drop(first);
            assert!(Hot::enter().is_some(), "the place given back");
        }

        #[tokio::test]
        async fn a_runtime_of_one_thread_has_no_workers_to_leave() {
            let _turn = crate::worker_policy::HOT_TESTS
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            assert!(Hot::enter().is_none());
        }
    }
}

/// Why a client's incoming side ended.
enum Ended {
    /// The peer closed, or a reply could not be written.
    Closed,
    /// The peer broke the protocol.
    Failed(Violation),
}

impl From<std::io::Error> for Ended {
    fn from(_: std::io::Error) -> Ended {
        Ended::Closed
    }
}

/// The signals a UI sent, gathered from every frame ready on its socket and handed to the
/// graph at once.
struct Ingest {
    /// Frames to signals; one clock reading per batch of frames read together.
    normalizer: Normalizer,
    signals: Vec<patchbay_signal::SharedSignal>,
    /// The client, for the log line of a violation.
    peer: SocketAddr,
    /// A non-UTF-8 binary message was logged already (the next ones are only counted).
    binary_noted: bool,
}

impl Ingest {
    /// Takes every message read (a frame cut short waits for the next read), answers pings
    /// and refusals, and hands the signals to the graph (at most [`INGEST_BATCH`] at once);
    /// returns how many messages it took.
    async fn read_all(&mut self, state: &AppState, socket: &mut WsSocket) -> Result<usize, Ended> {
        // Frames read together arrived together: one clock reading for them.
        self.normalizer.start_batch();
        let mut messages = 0;
        let ended = loop {
            let kept = match socket.reader.decode_next() {
                Ok(None) => break Ok(messages),
                Ok(Some(Incoming::Message(text, payload))) => {
                    messages += 1;
                    match (socket.reader.text(&payload), text) {
                        (Ok(frame), _) => self.take(state, frame),
                        (Err(_), true) => break Err(Ended::Failed(Violation::NotUtf8)),
                        (Err(_), false) => {
                            self.binary_violation(state);
                            Err("binary frame is not UTF-8 JSON".into())
                        }
                    }
                }
                Ok(Some(Incoming::Ping(data))) => {
                    socket.queue_pong(&data);
                    Ok(())
                }
                Ok(Some(Incoming::Close(_))) => {
                    // The closing handshake (RFC 6455, 5.5.1): what came before is handed
                    // over, then the close is answered.
                    self.flush(state, socket).await;
                    socket.close(close_code::NORMAL, "").await;
                    break Err(Ended::Closed);
                }
                Err(violation) => break Err(Ended::Failed(violation)),
            };
            if let Err(why) = kept {
                self.refuse(state, &why, socket).await;
            }
            if self.signals.len() >= INGEST_BATCH {
                self.flush(state, socket).await;
            }
        };
        self.normalizer.end_batch();
        self.flush(state, socket).await;
        socket.flush().await?;
        ended
    }

    /// A binary message that is not UTF-8 JSON: counted each time, logged once per
    /// connection (the client stays connected and is told, so it could repeat it).
    fn binary_violation(&mut self, state: &AppState) {
        if self.binary_noted {
            state.ws.violations.fetch_add(1, Ordering::Relaxed);
        } else {
            self.binary_noted = true;
            state.ws_violation(
                self.peer,
                "binary message that is not UTF-8 JSON (further ones are counted, not logged)",
            );
        }
    }

    /// A frame a UI sent, kept for the graph (from `NAME.inbound`); or why it is refused
    /// (the caller answers). Not async: the usual frame is only decoded and kept.
    fn take(&mut self, state: &AppState, text: &str) -> Result<(), Cow<'static, str>> {
        if state.inbound.is_none() {
            return Err("this sidecar takes no input".into());
        }
        let signal = ui_frame_to_signal(&mut self.normalizer, text).map_err(|bad| bad.0)?;
        self.signals.push(signal);
        Ok(())
    }

    /// Refuses a frame, after handing over the signals of the frames before it (replies
    /// keep the order of the frames).
    async fn refuse(&mut self, state: &AppState, why: &str, socket: &mut WsSocket) {
        self.flush(state, socket).await;
        refuse(state, why, socket);
        // Handing over may have waited for room in the graph: the frames read after it get
        // a clock reading of their own.
        self.normalizer.start_batch();
    }

    /// Hands the gathered signals to the graph, waiting at most `ingest_timeout` for room;
    /// the sender is told (with the rest of this read's answers) the ids of any it refused.
    async fn flush(&mut self, state: &AppState, socket: &mut WsSocket) {
        let Some(inbound) = &state.inbound else {
            self.signals.clear();
            return;
        };
        if self.signals.is_empty() {
            return;
        }
        let batch = self.signals.len();
        let emitted = inbound
            .emit_batch_within(&mut self.signals, state.settings.ingest_timeout)
            .await;
        // A batch that found room went to the graph with its vector: the next one starts
        // with room for as many.
        self.signals.reserve(batch);
        if let Some(why) = emitted.refused {
            let ids: Vec<SmallString> = self.signals.drain(..).map(|s| s.id.clone()).collect();
            let frame = json!({
                "kind": "error",
                "message": refusal_message(why),
                "refused": ids,
            });
            socket.queue_text(&frame.to_string());
        }
    }
}

/// Queues the error frame telling the client why its frame was refused (counted as bad
/// input); it is written with whatever else the read being handled answers.
fn refuse(state: &AppState, why: &str, socket: &mut WsSocket) {
    state.bad_input(why);
    socket.queue_text(&json!({"kind": "error", "message": why}).to_string());
}

async fn sse_handler(
    State(state): State<Shared>,
    headers: HeaderMap,
    query: Result<Query<StreamQuery>, QueryRejection>,
) -> Response {
    let query = match authorized_stream(&state, &headers, query) {
        Ok(q) => q,
        Err(r) => return r.into_response(),
    };
    if query.receive.is_some() {
        return error(
            StatusCode::BAD_REQUEST,
            "`receive` is for `/ws` (an SSE stream only receives)",
        );
    }
    let mut params = match query.params() {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    // A browser reconnecting sends the last id it saw, with the URL it first used: the
    // header is the more recent position.
    if let Some(last) = headers.get("last-event-id") {
        match last
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            Some(n) => params.since = Some(n),
            None => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "`Last-Event-ID` must be a sequence number",
                );
            }
        }
    }
    let since = state.resume_point(params.since, query.epoch.as_deref());
    let Some((sub, replay)) = state.hub.subscribe(since, params.format, params.filter) else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the sidecar is stopping");
    };
    let mut pending = VecDeque::new();
    if let Some((from, to)) = replay.gap {
        pending.push_back(Bytes::from_static(b"data: "));
        pending.push_back(Bytes::from(gap_text(from, to)));
        pending.push_back(Bytes::from_static(b"\n\n"));
    }
    let stream = SseStream {
        sub,
        replay: replay.frames.into(),
        format: params.format,
        pending,
        ended: false,
    };
    let body = Body::from_stream(futures_util::stream::unfold(stream, |mut s| async move {
        let chunk = s.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), s))
    }));
    let mut response = (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(crate::EPOCH_HEADER, state.epoch_header());
    if let Some(status) = state.status_header() {
        headers.insert(crate::STATUS_HEADER, status);
    }
    response
}

/// One SSE client: the replay, then its live queue, as `id:`/`data:` events whose frame
/// bytes are the shared ones.
struct SseStream {
    sub: Subscription,
    replay: VecDeque<FrameRef>,
    format: Format,
    pending: VecDeque<Bytes>,
    /// Cut off (lossless sidecar): the stream ends once `pending` is sent.
    ended: bool,
}

impl SseStream {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(chunk) = self.pending.pop_front() {
            return Some(chunk);
        }
        if self.ended {
            return None;
        }
        let out = match self.replay.pop_front() {
            Some(frame) => Outgoing::Frame(frame),
            None => match tokio::time::timeout(SSE_KEEPALIVE, self.sub.client.pop()).await {
                Ok(Some(out)) => out,
                Ok(None) => return None,
                Err(_) => return Some(Bytes::from_static(b": keep-alive\n\n")),
            },
        };
        // A cut-off client's stream ends after the notice: the browser reconnects with
        // `Last-Event-ID` and resumes from the ring.
        self.ended = matches!(out, Outgoing::Cut(_));
        let head = match out.seq() {
            Some(seq) => Bytes::from(format!("id: {seq}\ndata: ")),
            None => Bytes::from_static(b"data: "),
        };
        self.pending.push_back(out.bytes(self.format));
        self.pending.push_back(Bytes::from_static(b"\n\n"));
        Some(head)
    }
}

#[derive(Debug, Default, Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// The token a request carries in `?token=` (none in a query that does not parse).
struct QueryToken(Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for QueryToken {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let query = Query::<TokenQuery>::try_from_uri(&parts.uri);
        Ok(QueryToken(query.ok().and_then(|Query(q)| q.token)))
    }
}

/// A request that carries the token (in `Authorization: Bearer` or `?token=`), or any
/// request when none is configured; else it is refused with 401 and counted.
struct Authorized;

impl FromRequestParts<Shared> for Authorized {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<Self, Response> {
        let Ok(QueryToken(token)) = QueryToken::from_request_parts(parts, state).await;
        authorize(state, &parts.headers, token.as_deref())
            .map(|()| Authorized)
            .map_err(IntoResponse::into_response)
    }
}

async fn post_signal(
    State(state): State<Shared>,
    _: Authorized,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            let why = format!(
                "body larger than max_frame ({} bytes)",
                state.settings.max_frame
            );
            state.bad_input(&why);
            return error(StatusCode::PAYLOAD_TOO_LARGE, why);
        }
        Err(rejection) => return error(rejection.status(), rejection.body_text()),
    };
    let Some(inbound) = &state.inbound else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "this sidecar takes no input",
        );
    };
    let mut normalizer = Normalizer::new(state.source_name());
    let mut signals = match body_to_signals(&mut normalizer, &body) {
        Ok(s) => s,
        Err(bad) => {
            state.bad_input(&bad.0);
            return error(StatusCode::BAD_REQUEST, bad.0);
        }
    };
    let total = signals.len();
    let ids: Vec<SmallString> = signals.iter().map(|s| s.id.clone()).collect();
    let emitted = inbound
        .emit_batch_within(&mut signals, state.settings.ingest_timeout)
        .await;
    if let Some(why) = emitted.refused {
        let refused = total - emitted.accepted;
        tracing::debug!(sidecar = %state.name, accepted = emitted.accepted, refused, "ingest refused: {why}");
        let mut response = (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({
                "ok": false,
                "error": refusal_message(why),
                "accepted": emitted.accepted,
                "refused": refused,
                "ids": &ids[..emitted.accepted],
            })),
        )
            .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, retry_after(&state.settings));
        return response;
    }
    axum::Json(json!({"ok": true, "ids": ids, "clients": state.hub.client_count()})).into_response()
}

/// What a refused sender is told.
fn refusal_message(why: Refused) -> &'static str {
    match why {
        Refused::Full => "the graph is full: signals refused, retry later",
        Refused::Closed => "the graph is shutting down",
    }
}

/// `Retry-After` for a refusal: the ingest timeout in whole seconds (at least 1).
fn retry_after(settings: &Settings) -> HeaderValue {
    let secs = settings.ingest_timeout.as_secs().max(1);
    HeaderValue::from_str(&secs.to_string()).unwrap_or(HeaderValue::from_static("1"))
}

/// `GET /health`: the overall status (see [`patchbay_graph::Overall`]: `ok`, `starting`,
/// `degraded`, `failed` or `stopped`) and whether the daemon serves, and, with the token
/// when one is configured, the detail: which components are done, failed, recovering or
/// starting, every component, the seq, the epoch, the clients.
async fn health(
    State(state): State<Shared>,
    headers: HeaderMap,
    QueryToken(token): QueryToken,
) -> Response {
    let components = state.telemetry.snapshot();
    let overall = patchbay_graph::Overall::of(&components);
    if !has_token(&state, &headers, token.as_deref()) {
        // Without the token, nothing but whether it is up: names, addresses and errors
        // can tell an outsider too much.
        return axum::Json(json!({"status": overall.status, "serving": overall.serving}))
            .into_response();
    }
    let mut body = json!(overall);
    let detail = json!({
        "sidecar": state.name,
        "listen": state.local.to_string(),
        "epoch": state.epoch,
        "config": state.telemetry.config(),
        "seq": state.hub.last_seq(),
        "clients": state.hub.client_count(),
        "components": components,
    });
    if let (Some(body), serde_json::Value::Object(detail)) = (body.as_object_mut(), detail) {
        body.extend(detail);
    }
    axum::Json(body).into_response()
}

async fn metrics(State(state): State<Shared>, _: Authorized) -> Response {
    let mut text = state.telemetry.prometheus();
    text.push_str(&crate::ws_metrics::prometheus(&state.telemetry));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn status_page(State(state): State<Shared>, _: Authorized) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        crate::status::page(&state.name),
    )
        .into_response()
}

async fn status_stream(State(state): State<Shared>, _: Authorized) -> Response {
    crate::status::stream(state)
}
