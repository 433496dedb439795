//! patchbay's `sidecar` output: an HTTP server that fans signals out to UIs.
//!
//! Sidecar UIs (visualizers, agent TUIs, dashboards) connect and disconnect at will; some
//! are slow, several watch at once, and the agent behind them never waits for them. One
//! sidecar output runs one server:
//!
//! - `GET /ws`: WebSocket, one JSON text frame per signal (`?format=escapement`,
//!   `?since=N` replay, `?types=a,b*`); text frames a UI sends come back into the graph
//!   from `NAME.inbound`.
//! - `GET /events`: the same frames as Server-Sent Events (`id:` = seq).
//! - `POST /signal`, `POST /api/signal`: ingest one envelope or an array.
//! - `GET /health`, `GET /metrics`, `GET /`: the graph's health, counters and a status
//!   page.
//!
//! Each signal the output accepts gets the next `seq` (from 1). A client whose queue
//! (`client_queue`) overflows loses its oldest frames and gets one
//! `{"kind":"lagged","resume_from":N}` frame first: reconnecting with `?since=N` loses
//! nothing the ring still holds. On a lossless sidecar (`when_full = "block"`) such a
//! client loses nothing silently: it gets what was queued for it, the `lagged` frame and a
//! close (1013, the reason naming `?since=N`); reconnecting with `?since=N` replays the
//! ring, preceded by `{"kind":"gap","from":A,"to":B,"missed":M}` if the ring no longer
//! holds all of it. A lossless sidecar's ring keeps every frame of the last
//! `resume_window_ms` besides the newest `ring`, within `ring_max_bytes`: a client that
//! comes back within the window of the first frame it missed gets every frame. The
//! output's stats carry the gauges `clients`, `lagged_clients` (connected clients that
//! have lagged), `client_frames_dropped`, `clients_cut`, `ring_evicted_early` and `port`
//! (the bound port, useful with `listen = "127.0.0.1:0"`).
//!
//! Each run of a sidecar has an **epoch**, a fresh id sent in the `X-Patchbay-Epoch` header
//! of the `/ws` and `/events` responses (and in `/health`): `seq` numbers are only
//! meaningful within one epoch. A client resuming with `?since=N&epoch=E` where `E` is
//! not the current epoch (the daemon restarted), or with a `since` beyond the last seq
//! published, gets the whole ring replayed instead of nothing.
//!
//! The listener is [`patchbay_transport::listen`]'s: header and idle timeouts, a
//! connection cap, `Host` and `Origin` checked on every endpoint.
//!
//! [`tap()`] is the client side: it prints what a running sidecar sends.

mod config;
mod http;
mod hub;
mod inbound;
mod status;
pub mod tap;
pub mod websocket;
mod worker_policy;
mod ws_metrics;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use patchbay_graph::{
    Adapter, BoxFuture, ComponentError, ComponentStats, ComponentType, Diagnostic, Options, Output,
    OutputContext, WhenFull, options_of,
};
use tokio::sync::watch;

pub use config::{BadSetting, DEFAULT_LISTEN, Secret, Settings, SidecarConfig, parse_listen};
pub use hub::{Format, TypeFilter};
pub use inbound::{BadFrame, body_to_signals, ui_frame_to_signal, value_to_signal};
pub use tap::{DEFAULT_TAP_URL, TapError, TapOptions, tap};
pub use worker_policy::{on_thread_start, on_worker_unpark};

/// The response header that names a sidecar's epoch (see the crate's documentation).
pub const EPOCH_HEADER: &str = "x-patchbay-epoch";

/// The response header of a WebSocket or SSE connection that says the daemon's overall
/// state when it connected ([`patchbay_graph::Overall::summary`]: `ok (done: replay)`),
/// for clients such as `patchbay tap` that have no other request to make.
pub const STATUS_HEADER: &str = "x-patchbay-status";

/// The output type name in configs.
pub const TYPE_NAME: &str = "sidecar";

/// How long a sidecar whose graph ended on its own lets its clients receive what is
/// queued for them (on a shutdown, `[runtime] shutdown_timeout_ms` decides), and how long
/// its server gets to close.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The `sidecar` output: it talks both ways (what UIs send comes out of `NAME.inbound`),
/// and a slow UI never holds up the graph (its queue drops the oldest when full).
pub const ADAPTER: Adapter = Adapter::new(
    "sidecar",
    "the sidecar: WebSocket and SSE fan-out to UIs, signal ingest, health and metrics",
    &[ComponentType::output(
        TYPE_NAME,
        "serve signals to UIs (WebSocket, SSE), take signals and controls back",
        build,
        options_of::<SidecarConfig>,
    )
    .inbound()
    .when_full(WhenFull::DropOldest)],
);

fn build(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(Sidecar::new(Settings::from_options(options)?)))
}

/// A `sidecar` output, built from checked settings. It binds its listener when it runs.
#[derive(Debug, Clone)]
pub struct Sidecar {
    settings: Settings,
}

impl Sidecar {
    /// A sidecar with these settings (no I/O).
    pub fn new(settings: Settings) -> Self {
        Sidecar { settings }
    }

    /// Its settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }
}

impl Output for Sidecar {
    fn reports_started(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(run(self.settings, cx))
    }
}

/// The sidecar's gauges and what they measure (`# HELP` in `/metrics`).
const GAUGES: &[(&str, &str)] = &[
    ("port", "The TCP port a sidecar listens on."),
    ("clients", "UIs connected to a sidecar (WebSocket and SSE)."),
    (
        "lagged_clients",
        "Clients of a sidecar that fell behind and lost frames (drop_oldest).",
    ),
    (
        "clients_cut",
        "Clients of a lossless sidecar cut off for lagging, since start (they resume by seq).",
    ),
    (
        "ring_evicted_early",
        "Frames a sidecar's ring let go for ring_max_bytes that ring or resume_window_ms would have kept, since start.",
    ),
    (
        "client_frames_dropped",
        "Frames queued for clients that the drain timeout at shutdown left undelivered.",
    ),
];

async fn run(settings: Settings, cx: OutputContext) -> Result<(), ComponentError> {
    let name = cx.name().to_owned();
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", settings.listen))?;
    cx.started();
    let local = listener.local_addr()?;
    cx.stats().describe_gauges(GAUGES);
    cx.stats().set_gauge("port", f64::from(local.port()));
    tracing::info!(sidecar = %name, "listening: ws://{local}/ws  http://{local}/events  http://{local}/");

    let lossless = cx.queue().policy() == WhenFull::Block;
    let hub = Arc::new(hub::Hub::new(
        hub::RingLimits {
            frames: settings.ring,
            window: if lossless {
                settings.resume_window
            } else {
                Duration::ZERO
            },
            max_bytes: settings.ring_max_bytes,
        },
        settings.client_queue,
        lossless,
        Arc::clone(cx.stats()),
    ));
    let published = Arc::new(AtomicU64::new(0));
    let door = patchbay_transport::listen::Listener {
        name: name.clone(),
        limits: settings.limits,
        access: patchbay_transport::listen::Access::new(
            local,
            settings.allowed_hosts.clone(),
            settings.origins(),
        ),
        stats: Arc::clone(cx.stats()),
        refusal: http::refusal,
    };
    let state = Arc::new(http::AppState {
        name: name.clone(),
        settings,
        hub: Arc::clone(&hub),
        inbound: cx.inbound().cloned(),
        telemetry: Arc::clone(cx.telemetry()),
        stats: Arc::clone(cx.stats()),
        local,
        epoch: new_epoch(),
        published: Arc::clone(&published),
        ws: ws_metrics::register(cx.telemetry(), &name),
    });
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let app = http::router(state);
    let mut server = tokio::spawn(patchbay_transport::listen::serve(
        listener,
        app,
        door,
        async move {
            let _ = stop_rx.wait_for(|stop| *stop).await;
        },
    ));
    announce(&name, Some(local));

    // Signals are numbered, serialized once and handed to every client in the graph's
    // own task as it routes them: publishing never waits for a client (a lossless sidecar
    // cuts off one that falls behind), so there is no queue to wait on.
    cx.deliver_inline({
        let hub = Arc::clone(&hub);
        let published = Arc::clone(&published);
        let stats = Arc::clone(cx.stats());
        let mut seq = 0u64;
        move |batch| {
            let n = batch.len() as u64;
            // Stored first, so that no client can have seen a seq beyond it.
            published.store(seq + n, Ordering::Release);
            hub.publish_all(hub::frames(seq + 1, batch));
            seq += n;
            ComponentStats::add(&stats.sent, n);
        }
    });
    let result = tokio::select! {
        closed = cx.closed() => match closed {
            Ok(()) => Ok(()),
            // Contained and rebuilt as a panic of this task.
            Err(panic) => std::panic::resume_unwind(Box::new(panic)),
        },
        ended = &mut server => {
            // The server only ends when told to, or when its task fails.
            Err(match ended {
                Ok(()) => "server stopped".into(),
                Err(e) => format!("server task failed: {e}").into(),
            })
        }
    };
    announce(&name, None);
    // Every client gets what is queued for it, then a close (1001) or the end of its
    // stream, until the drain deadline; what a client could not take by then is counted
    // and logged.
    hub.close();
    let deadline = cx
        .shutdown()
        .deadline()
        .unwrap_or_else(|| tokio::time::Instant::now() + CLOSE_GRACE);
    if tokio::time::timeout_at(deadline, hub.wait_no_clients())
        .await
        .is_err()
    {
        hub.abandon(&name);
    }
    let _ = stop_tx.send(true);
    if !server.is_finished()
        && tokio::time::timeout(CLOSE_GRACE, &mut server)
            .await
            .is_err()
    {
        server.abort();
    }
    result
}

/// A new epoch: distinct for each run of a sidecar (the clock in nanoseconds, mixed with
/// the process id and a per-process count), as 16 hex digits.
fn new_epoch() -> String {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed = nanos
        ^ (u64::from(std::process::id()) << 40)
        ^ RUNS
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!("{mixed:016x}")
}

type Addresses = HashMap<String, SocketAddr>;

fn addresses() -> &'static watch::Sender<Addresses> {
    static ADDRESSES: OnceLock<watch::Sender<Addresses>> = OnceLock::new();
    ADDRESSES.get_or_init(|| watch::Sender::new(HashMap::new()))
}

fn announce(name: &str, addr: Option<SocketAddr>) {
    addresses().send_modify(|m| {
        match addr {
            Some(a) => m.insert(name.to_owned(), a),
            None => m.remove(name),
        };
    });
}

/// The address the running sidecar output `name` listens on (in this process), if it is
/// running. Useful with `listen = "127.0.0.1:0"`.
pub fn bound_addr(name: &str) -> Option<SocketAddr> {
    addresses().borrow().get(name).copied()
}

/// Waits until the sidecar output `name` (in this process) is listening, and returns its
/// address.
pub async fn wait_bound(name: &str) -> SocketAddr {
    let mut rx = addresses().subscribe();
    loop {
        if let Some(addr) = rx.borrow_and_update().get(name) {
            return *addr;
        }
        if rx.changed().await.is_err() {
            // The sender is static: it never goes away.
            std::future::pending::<()>().await;
        }
    }
}
