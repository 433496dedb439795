//! Serving HTTP (and WebSocket upgrades) on a listening socket, hardened the same way for
//! every listener patchbay opens (the sidecar, the LLM tap proxy, the Claude Code hook
//! endpoint):
//!
//! - **Header timeout**: a request's head (request line and headers) must arrive within
//!   `header_timeout_ms`, counted from the connection's start for its first request and
//!   from the first byte of each next one; past it the connection is closed (a slowloris
//!   client holds nothing for long) and counted (`header_timeout`).
//! - **Idle timeout**: a keep-alive connection with no new request for `idle_timeout_ms`
//!   after its last answer ended is closed. A request being answered (a long SSE stream
//!   included) is never idle, and an upgraded WebSocket is no longer HTTP: neither is cut.
//! - **Connection cap**: beyond `max_connections` open connections (WebSockets and
//!   streams included), a new one is answered `503` and closed (what it sent is read and
//!   thrown away for up to half a second first, so that the close does not reset the
//!   connection before the client reads the answer), and counted
//!   (`too_many_connections`).
//! - **Host and Origin** ([`Access`]): checked on every request before any route, so that
//!   no endpoint can forget them; refusals are `403` and counted (`forbidden_host`,
//!   `forbidden_origin`).
//!
//! Refusals are counted in the component's `patchbay_http_refused_total{reason=…}`.
//! Each request carries the client's address as [`axum::extract::ConnectInfo`].
//!
//! [`serve`] speaks HTTP/1.1; [`serve_h2c`] speaks HTTP/2 without TLS by prior knowledge
//! (h2c, what gRPC clients send to an `http://` endpoint), with the same bounds: there
//! the header timeout bounds the connection preface and first request (HTTP/2 clients
//! also send frames that are no request: PINGs, SETTINGS), the idle timeout ends a
//! connection with no stream open with a `GOAWAY`, the host is the request's
//! `:authority`, and a connection over the cap is told so with a `GOAWAY`.

mod access;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use patchbay_graph::ComponentStats;
use patchbay_graph::config::{MAX_DURATION_MS, out_of_range};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::Instant;

pub use access::{Access, Origins, Refused, check_hosts};

/// The default `header_timeout_ms`: 10 s.
pub const DEFAULT_HEADER_TIMEOUT_MS: u64 = 10_000;
/// The default `idle_timeout_ms`: 60 s.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 60_000;
/// The default `max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// The largest `max_connections`.
pub const MAX_CONNECTIONS_LIMIT: usize = 1_000_000;

/// The default `ingest_timeout_ms` of a listener that takes signals in (the sidecar, the
/// OTLP receiver): how long a request waits for room when the graph is full, 5 s.
pub const DEFAULT_INGEST_TIMEOUT_MS: u64 = 5000;

/// [`DEFAULT_INGEST_TIMEOUT_MS`], for `#[serde(default = "…")]`.
pub fn default_ingest_timeout_ms() -> u64 {
    DEFAULT_INGEST_TIMEOUT_MS
}

/// Checks a listener's `ingest_timeout_ms` (at most one day; 0 refuses at once when the
/// graph is full), the error at its value.
pub fn check_ingest_timeout(
    options: &patchbay_graph::Options<'_>,
    ingest_timeout_ms: u64,
) -> Result<Duration, patchbay_graph::Diagnostic> {
    options
        .check_range("ingest_timeout_ms", ingest_timeout_ms, 0..=MAX_DURATION_MS)
        .map(Duration::from_millis)
}

/// The options every listener takes beside its `listen` (the sidecar, the hook
/// endpoints, the OTLP receiver, the LLM tap proxy): which host names it answers, and how
/// long and how many connections it keeps. A component's config flattens them
/// (`#[serde(flatten)] listener: ListenerOptions`), so they are described once, here;
/// such a config refuses unknown keys with
/// [`Options::refuse_unknown_keys`](patchbay_graph::Options::refuse_unknown_keys) over
/// [`known_keys`](crate::known_keys) (serde's `deny_unknown_fields` does not work
/// through `flatten`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
pub struct ListenerOptions {
    /// Host names answered besides `localhost`, `127.0.0.1` and `[::1]` (any port), e.g.
    /// `["box.lan"]`, or `["host.docker.internal"]` for an agent in a container; `["*"]`
    /// for any. Absent: a loopback `listen` answers only to the loopback names (a web page
    /// cannot reach it through DNS rebinding), any other `listen` to any host. A request
    /// naming another host gets 403.
    #[serde(default)]
    pub allowed_hosts: Option<Vec<String>>,
    /// How long a client may take to send a request's head (request line and headers), in
    /// ms, counted from the connection's start for its first request and from the first
    /// byte of each next one (over HTTP/2, gRPC's, the connection's first request); past
    /// it the connection is closed (a slowloris client holds nothing for long). From 1 to
    /// 86400000 (one day).
    #[serde(default = "default_header_timeout_ms")]
    pub header_timeout_ms: u64,
    /// How long a keep-alive connection may wait for its next request, in ms, before it
    /// is closed. A stream (a WebSocket, SSE, a response being relayed, a call held by a
    /// gate) is never idle: this does not cut it. From 1 to 86400000 (one day).
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// How many connections (streams included) may be open at once on each address the
    /// component listens on; beyond it a new one gets 503 (over HTTP/2 a `GOAWAY`) and is
    /// closed at once, counted as `too_many_connections`. From 1 to 1000000.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
}

fn default_header_timeout_ms() -> u64 {
    DEFAULT_HEADER_TIMEOUT_MS
}
fn default_idle_timeout_ms() -> u64 {
    DEFAULT_IDLE_TIMEOUT_MS
}
fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}

impl Default for ListenerOptions {
    fn default() -> Self {
        ListenerOptions {
            allowed_hosts: None,
            header_timeout_ms: DEFAULT_HEADER_TIMEOUT_MS,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Dotted keys for the first entries of `allowed_hosts`, so that an error points at the
/// entry.
const HOST_KEYS: [&str; 8] = [
    "allowed_hosts.0",
    "allowed_hosts.1",
    "allowed_hosts.2",
    "allowed_hosts.3",
    "allowed_hosts.4",
    "allowed_hosts.5",
    "allowed_hosts.6",
    "allowed_hosts.7",
];

impl ListenerOptions {
    /// Checks the host names and the bounds into the listener's [`Limits`]; an error
    /// names the key (`allowed_hosts.N` for one of the first entries) and what is wrong.
    pub fn check(&self) -> Result<Limits, (&'static str, String)> {
        if let Some(hosts) = &self.allowed_hosts {
            check_hosts(hosts).map_err(|(i, message)| {
                (
                    HOST_KEYS.get(i).copied().unwrap_or("allowed_hosts"),
                    message,
                )
            })?;
        }
        Limits::check(
            self.header_timeout_ms,
            self.idle_timeout_ms,
            self.max_connections,
        )
    }
}

/// What a connection refused for the cap is told before it is closed.
const TOO_MANY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/// The same for an HTTP/2 client: the server's preface (an empty SETTINGS frame), then a
/// GOAWAY (no stream processed, ENHANCE_YOUR_CALM) whose debug data says why; gRPC
/// clients report it as UNAVAILABLE and retry.
const TOO_MANY_H2: &[u8] = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00\
    \x00\x00\x1c\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0btoo many connections";

/// Which HTTP a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// HTTP/1.1 (with upgrades to WebSocket).
    Http1,
    /// HTTP/2 by prior knowledge, without TLS (h2c).
    Http2,
}

impl Protocol {
    fn too_many(self) -> &'static [u8] {
        match self {
            Protocol::Http1 => TOO_MANY,
            Protocol::Http2 => TOO_MANY_H2,
        }
    }
}

/// A listener's connection bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a request's head may take to arrive.
    pub header_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// How many connections may be open at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_millis(DEFAULT_HEADER_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl Limits {
    /// The bounds from a component's `header_timeout_ms`, `idle_timeout_ms` and
    /// `max_connections`, range-checked: an error names the key and what is wrong.
    pub fn check(
        header_timeout_ms: u64,
        idle_timeout_ms: u64,
        max_connections: usize,
    ) -> Result<Limits, (&'static str, String)> {
        for (key, value, max) in [
            ("header_timeout_ms", header_timeout_ms, MAX_DURATION_MS),
            ("idle_timeout_ms", idle_timeout_ms, MAX_DURATION_MS),
            (
                "max_connections",
                max_connections as u64,
                MAX_CONNECTIONS_LIMIT as u64,
            ),
        ] {
            if let Some(message) = out_of_range(key, value, &(1..=max)) {
                return Err((key, message));
            }
        }
        Ok(Limits {
            header_timeout: Duration::from_millis(header_timeout_ms),
            idle_timeout: Duration::from_millis(idle_timeout_ms),
            max_connections,
        })
    }
}

/// How a listener answers a request refused at the door (each speaks its clients'
/// error format).
pub type Refusal = fn(StatusCode, &'static str) -> axum::response::Response;

/// What [`serve`] needs besides the socket and the routes.
#[derive(Clone)]
pub struct Listener {
    /// The component's name, for logs.
    pub name: String,
    /// The bounds.
    pub limits: Limits,
    /// Host and Origin rules.
    pub access: Access,
    /// Where refusals are counted.
    pub stats: Arc<ComponentStats>,
    /// The answer to a refused request.
    pub refusal: Refusal,
}

/// A plain-text refusal.
pub fn text_refusal(status: StatusCode, message: &'static str) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    (status, message).into_response()
}

/// Serves `app` on `listener` with the bounds and checks of `config` until `shutdown`
/// resolves; then stops accepting, lets every connection finish its request in flight,
/// and returns once they have all closed. Failures to accept (too many open files) are
/// logged and retried: it only returns on shutdown.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    config: Listener,
    shutdown: impl Future<Output = ()> + Send,
) {
    serve_as(Protocol::Http1, listener, app, config, shutdown).await;
}

/// [`serve`] over HTTP/2 without TLS, by prior knowledge (h2c): the transport of gRPC to
/// an `http://` endpoint. Same bounds and checks; a client that speaks HTTP/1 here is
/// refused (counted as `not_http2`).
pub async fn serve_h2c(
    listener: TcpListener,
    app: Router,
    config: Listener,
    shutdown: impl Future<Output = ()> + Send,
) {
    serve_as(Protocol::Http2, listener, app, config, shutdown).await;
}

async fn serve_as(
    protocol: Protocol,
    listener: TcpListener,
    app: Router,
    config: Listener,
    shutdown: impl Future<Output = ()> + Send,
) {
    let config = Arc::new(config);
    let slots = Arc::new(Semaphore::new(config.limits.max_connections));
    let lingering = Arc::new(Semaphore::new(LINGERING));
    let (stop_tx, stop_rx) = watch::channel(false);
    // Every connection task holds a clone: when all are gone, `recv` ends.
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(listener = %config.name, "cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            config.stats.http_refused("too_many_connections");
            tracing::debug!(listener = %config.name, %peer, max = config.limits.max_connections, "refused a connection: too many open");
            match Arc::clone(&lingering).try_acquire_owned() {
                Ok(linger) => {
                    tokio::spawn(async move {
                        refuse_gently(stream, protocol.too_many()).await;
                        drop(linger);
                    });
                }
                // A flood: closed at once (a client that already sent its request may
                // see a reset instead of the 503).
                Err(_) => {
                    let _ = stream.try_write(protocol.too_many());
                }
            }
            continue;
        };
        // Frames and chunks go out as they come: with Nagle's algorithm a small write
        // after another waits for the peer's delayed ACK (up to 40 ms).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {e}");
        }
        tokio::spawn(connection(
            protocol,
            stream,
            peer,
            permit,
            app.clone(),
            Arc::clone(&config),
            stop_rx.clone(),
            alive_tx.clone(),
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(alive_tx);
    let _ = alive_rx.recv().await;
}

/// Connections refused for the cap that may be closing gently at once.
const LINGERING: usize = 64;

/// How long a refused connection's unread request may keep it open.
const LINGER: Duration = Duration::from_millis(500);

/// The most of a refused connection's request that is read and thrown away.
const LINGER_BYTES: usize = 64 * 1024;

/// Answers a connection refused for the cap with `503` (a `GOAWAY` in HTTP/2), then reads
/// and throws away what the client sent (for at most [`LINGER`] and [`LINGER_BYTES`])
/// before closing: closing a socket with unread data resets the connection, and a reset
/// can reach the client before the answer does.
async fn refuse_gently(mut stream: TcpStream, answer: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if stream.write_all(answer).await.is_err() || stream.shutdown().await.is_err() {
        return;
    }
    let mut buf = [0u8; 4096];
    let mut read = 0;
    let _ = tokio::time::timeout(LINGER, async {
        while read < LINGER_BYTES {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    })
    .await;
}

/// Which bound a quiet connection passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expired {
    Header,
    Idle,
}

/// Where a connection is between requests, for its timeouts.
#[derive(Debug)]
struct Phase {
    /// Requests being answered (their response body not yet ended).
    busy: usize,
    /// When the last answer ended (or the connection opened).
    since: Instant,
    /// When the head of the next request began to arrive.
    head_started: Option<Instant>,
}

/// A connection's activity, shared by its socket (reads), its service (requests) and its
/// watchdog.
#[derive(Debug)]
struct Activity {
    phase: Mutex<Phase>,
    changed: Notify,
    /// Cleared once the connection is no longer HTTP (upgraded or closed), and for
    /// HTTP/2, whose reads between requests (PINGs, SETTINGS) start no request head:
    /// reads then cost nothing here.
    watching: AtomicBool,
    /// Whether any byte came in (a client that connects and leaves sent nothing wrong).
    heard: AtomicBool,
    limits: Limits,
}

impl Activity {
    fn new(limits: Limits, protocol: Protocol) -> Activity {
        let now = Instant::now();
        Activity {
            // The first request's head is due from the start: a client that connects and
            // sends nothing is a slowloris too.
            phase: Mutex::new(Phase {
                busy: 0,
                since: now,
                head_started: Some(now),
            }),
            changed: Notify::new(),
            watching: AtomicBool::new(protocol == Protocol::Http1),
            heard: AtomicBool::new(false),
            limits,
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Bytes came in.
    fn read(&self) {
        if !self.heard.load(Ordering::Relaxed) {
            self.heard.store(true, Ordering::Relaxed);
        }
        if !self.watching.load(Ordering::Relaxed) {
            return;
        }
        let mut phase = self.phase();
        if phase.busy == 0 && phase.head_started.is_none() {
            phase.head_started = Some(Instant::now());
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// A request's head was read: it is being answered.
    fn begin(self: &Arc<Self>) -> Busy {
        let mut phase = self.phase();
        phase.busy += 1;
        phase.head_started = None;
        Busy(Arc::clone(self))
    }

    /// Whether a request has been read on the connection.
    fn served(&self) -> bool {
        let phase = self.phase();
        phase.busy > 0 || phase.head_started.is_none()
    }

    /// The deadline the connection is under, if any.
    fn deadline(&self) -> Option<(Instant, Expired)> {
        let phase = self.phase();
        if phase.busy > 0 {
            return None;
        }
        Some(match phase.head_started {
            Some(started) => (started + self.limits.header_timeout, Expired::Header),
            None => (phase.since + self.limits.idle_timeout, Expired::Idle),
        })
    }
}

/// A request being answered; dropped when its response body has ended (or was dropped).
struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut phase = self.0.phase();
        phase.busy = phase.busy.saturating_sub(1);
        if phase.busy == 0 {
            phase.since = Instant::now();
            drop(phase);
            self.0.changed.notify_one();
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn connection(
    protocol: Protocol,
    stream: TcpStream,
    peer: SocketAddr,
    permit: OwnedSemaphorePermit,
    app: Router,
    config: Arc<Listener>,
    stop: watch::Receiver<bool>,
    _alive: mpsc::Sender<()>,
) {
    let activity = Arc::new(Activity::new(config.limits, protocol));
    let io = TokioIo::new(Watched {
        io: stream,
        activity: Arc::clone(&activity),
        _slot: permit,
    });
    let service = Guarded {
        app,
        config: Arc::clone(&config),
        peer,
        activity: Arc::clone(&activity),
    };
    match protocol {
        Protocol::Http1 => {
            let mut builder = hyper::server::conn::http1::Builder::new();
            // The timeouts are this module's (hyper's own header timeout also runs between
            // requests, so it cannot tell idle from slow).
            builder.keep_alive(true).header_read_timeout(None);
            let conn = builder.serve_connection(io, service).with_upgrades();
            drive(conn, protocol, &activity, &config, peer, stop).await;
        }
        Protocol::Http2 => {
            let mut builder =
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
            // hyper's defaults bound a request's head (16 KiB) and the resets a client
            // may cause; each open stream may hold a body, so few at once.
            builder.max_concurrent_streams(H2_MAX_STREAMS);
            let conn = builder.serve_connection(io, service);
            drive(conn, protocol, &activity, &config, peer, stop).await;
        }
    }
    activity.watching.store(false, Ordering::Relaxed);
}

/// The most streams (requests) one HTTP/2 connection may have open at once: each may
/// hold a request body of up to the component's size bound.
const H2_MAX_STREAMS: u32 = 32;

/// A hyper connection that can be asked to finish gracefully.
trait Conn: Future<Output = Result<(), hyper::Error>> {
    fn finish(self: Pin<&mut Self>);
}

impl Conn for hyper::server::conn::http1::UpgradeableConnection<TokioIo<Watched>, Guarded> {
    fn finish(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl Conn
    for hyper::server::conn::http2::Connection<
        TokioIo<Watched>,
        Guarded,
        hyper_util::rt::TokioExecutor,
    >
{
    fn finish(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// Runs a connection to its end under its bounds: the header and idle timeouts, and a
/// graceful end when the listener stops.
async fn drive(
    conn: impl Conn,
    protocol: Protocol,
    activity: &Activity,
    config: &Listener,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    tokio::pin!(conn);
    let mut stopping = false;
    // An HTTP/2 connection told to go (idle, or the listener stopping) is given this
    // long to close by itself once no stream is open.
    let mut closing_by: Option<Instant> = None;
    let mut served = false;
    loop {
        let deadline = match (activity.deadline(), closing_by) {
            // Told to go: closed by force only once no stream is left and it lingers.
            (Some(_), Some(by)) => Some((by, Expired::Idle)),
            (None, Some(_)) => None,
            (d, None) => d,
        };
        let wake = deadline.map_or_else(|| Instant::now() + Duration::from_secs(86_400), |d| d.0);
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    served |= activity.served();
                    if protocol == Protocol::Http2
                        && !served
                        && activity.heard.load(Ordering::Relaxed)
                    {
                        // Not an HTTP/2 client (an HTTP/1 request, TLS, garbage).
                        config.stats.http_refused("not_http2");
                    }
                    tracing::debug!(listener = %config.name, %peer, "connection ended: {e}");
                }
                break;
            }
            () = activity.changed.notified() => {}
            _ = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                conn.as_mut().finish();
            }
            () = tokio::time::sleep_until(wake), if deadline.is_some() => {
                if let Some(by) = closing_by {
                    if by <= Instant::now() && activity.deadline().is_some() {
                        break;
                    }
                    continue;
                }

                match activity.deadline() {
                    Some((at, Expired::Header)) if at <= Instant::now() => {
                        config.stats.http_refused("header_timeout");
                        tracing::debug!(listener = %config.name, %peer, "closed a connection: no complete request head within {} ms", config.limits.header_timeout.as_millis());
                        break;
                    }
                    Some((at, Expired::Idle)) if at <= Instant::now() => {
                        tracing::trace!(listener = %config.name, %peer, "closed an idle connection");
                        if protocol == Protocol::Http1 {
                            break;
                        }
                        // A GOAWAY first: a client about to send a request on the
                        // connection then knows to use a new one instead of failing.
                        conn.as_mut().finish();
                        closing_by = Some(Instant::now() + config.limits.header_timeout);
                    }
                    _ => {}
                }
            }
        }
        served |= activity.served();
    }
}

/// The socket of a connection: reads are reported to its [`Activity`], and it holds the
/// connection's slot (an upgraded WebSocket keeps it until it closes).
struct Watched {
    io: TcpStream,
    activity: Arc<Activity>,
    _slot: OwnedSemaphorePermit,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The routes behind the door: Host and Origin checked, the client's address attached,
/// and the request kept `busy` until its response body ends.
#[derive(Clone)]
struct Guarded {
    app: Router,
    config: Arc<Listener>,
    peer: SocketAddr,
    activity: Arc<Activity>,
}

type ResponseFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Guarded {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let busy = self.activity.begin();
        let checked = if request.version() == axum::http::Version::HTTP_2 {
            let authority = request.uri().authority().map(|a| a.as_str());
            self.config
                .access
                .check_with_authority(request.headers(), authority)
        } else {
            self.config.access.check(request.headers())
        };
        if let Err(refused) = checked {
            self.config.stats.http_refused(refused.reason);
            tracing::debug!(listener = %self.config.name, peer = %self.peer, reason = refused.reason, "refused a request");
            let response = (self.config.refusal)(StatusCode::FORBIDDEN, refused.message);
            return Box::pin(std::future::ready(Ok(tracked(response, busy))));
        }
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(ConnectInfo(self.peer));
        let mut app = self.app.clone();
        Box::pin(async move {
            let response = match std::future::poll_fn(|cx| {
                <Router as tower_service::Service<Request<Body>>>::poll_ready(&mut app, cx)
            })
            .await
            {
                Ok(()) => {
                    <Router as tower_service::Service<Request<Body>>>::call(&mut app, request).await
                }
                Err(e) => Err(e),
            };
            let response = match response {
                Ok(r) => r,
                Err(never) => match never {},
            };
            Ok(tracked(response, busy))
        })
    }
}

fn tracked(response: axum::response::Response, busy: Busy) -> Response<Body> {
    response.map(|body| {
        Body::new(Tracked {
            inner: body,
            _busy: busy,
        })
    })
}

/// A response body that keeps its request `busy` until it has been sent (or dropped).
struct Tracked {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Parses a `listen` option: `IP:PORT`, or `localhost:PORT` for `127.0.0.1:PORT` (no
/// name lookup). Every listening component (the sidecar, hook endpoints, the otlp and
/// osc sources) uses it, so that `listen` reads the same everywhere.
pub fn parse_listen(text: &str) -> Option<SocketAddr> {
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr);
    }
    // `localhost` is resolved here without I/O: it is loopback by definition.
    let port = text.strip_prefix("localhost:")?.parse::<u16>().ok()?;
    Some(SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        port,
    ))
}
