//! A sidecar's WebSocket counters: `patchbay_ws_protocol_errors_total`, the protocol
//! violations by its clients (bad frames, messages over `max_frame`, text that is not
//! UTF-8, binary messages that are not UTF-8 JSON), and `patchbay_ws_hot_total`, how often
//! one of its connections read so many messages at once that it went on on a thread of
//! its own.
//!
//! The graph's telemetry knows nothing of WebSocket, so the counters live here, one set
//! per sidecar, registered against the graph's [`Telemetry`]: every sidecar of a graph
//! shows all of them in its `/metrics`, after the graph's own families.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use patchbay_graph::Telemetry;

/// One sidecar's WebSocket counters.
#[derive(Default)]
pub(crate) struct WsMetrics {
    /// Protocol violations by its clients (`patchbay_ws_protocol_errors_total`).
    pub violations: AtomicU64,
    /// Times a connection went hot (`patchbay_ws_hot_total`).
    pub hot: AtomicU64,
}

/// One sidecar's counters, and the graph it belongs to.
struct Entry {
    graph: Weak<Telemetry>,
    sidecar: String,
    metrics: Arc<WsMetrics>,
}

fn registry() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    static REGISTRY: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The counters of sidecar `name` in the graph of `telemetry` (the same ones if the
/// sidecar runs again in that graph). Entries of graphs that are gone are dropped here.
pub(crate) fn register(telemetry: &Arc<Telemetry>, name: &str) -> Arc<WsMetrics> {
    let mut entries = registry();
    entries.retain(|e| e.graph.strong_count() > 0);
    let graph = Arc::downgrade(telemetry);
    if let Some(e) = entries
        .iter()
        .find(|e| e.graph.ptr_eq(&graph) && e.sidecar == name)
    {
        return Arc::clone(&e.metrics);
    }
    let metrics = Arc::new(WsMetrics::default());
    entries.push(Entry {
        graph,
        sidecar: name.to_owned(),
        metrics: Arc::clone(&metrics),
    });
    metrics
}

/// The families in Prometheus text format: every sidecar of the graph of `telemetry`.
pub(crate) fn prometheus(telemetry: &Arc<Telemetry>) -> String {
    let graph = Arc::downgrade(telemetry);
    let mut rows: Vec<(String, u64, u64)> = registry()
        .iter()
        .filter(|e| e.graph.ptr_eq(&graph))
        .map(|e| {
            let name = e.sidecar.replace('\\', "\\\\").replace('"', "\\\"");
            let m = &e.metrics;
            let violations = m.violations.load(Ordering::Relaxed);
            (name, violations, m.hot.load(Ordering::Relaxed))
        })
        .collect();
    rows.sort();
    let mut out = String::from(
        "# HELP patchbay_ws_protocol_errors_total WebSocket protocol violations by a sidecar's clients (bad frames, oversized or non-UTF-8 messages).\n# TYPE patchbay_ws_protocol_errors_total counter\n",
    );
    for (name, violations, _) in &rows {
        let _ = writeln!(
            out,
            "patchbay_ws_protocol_errors_total{{component=\"{name}\"}} {violations}"
        );
    }
    out.push_str(
        "# HELP patchbay_ws_hot_total Times a connection of a sidecar read so many messages at once that it went on on a thread of its own.\n# TYPE patchbay_ws_hot_total counter\n",
    );
    for (name, _, hot) in &rows {
        let _ = writeln!(out, "patchbay_ws_hot_total{{component=\"{name}\"}} {hot}");
    }
    out
}
