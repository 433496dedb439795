//! `patchbay_ws_protocol_errors_total`: WebSocket protocol violations by a sidecar's
//! clients (bad frames, messages over `max_frame`, text that is not UTF-8, binary
//! messages that are not UTF-8 JSON), per sidecar.
//!
//! The graph's telemetry knows nothing of WebSocket, so the counters live here, one per
//! sidecar, registered against the graph's [`Telemetry`]: every sidecar of a graph shows
//! all of them in its `/metrics`, after the graph's own families.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use patchbay_graph::Telemetry;

/// One sidecar's counter, and the graph it belongs to.
struct Entry {
    graph: Weak<Telemetry>,
    sidecar: String,
    count: Arc<AtomicU64>,
}

fn registry() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    static REGISTRY: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The counter of sidecar `name` in the graph of `telemetry` (the same one if the sidecar
/// runs again in that graph). Entries of graphs that are gone are dropped here.
pub(crate) fn register(telemetry: &Arc<Telemetry>, name: &str) -> Arc<AtomicU64> {
    let mut entries = registry();
    entries.retain(|e| e.graph.strong_count() > 0);
    let graph = Arc::downgrade(telemetry);
    if let Some(e) = entries
        .iter()
        .find(|e| e.graph.ptr_eq(&graph) && e.sidecar == name)
    {
        return Arc::clone(&e.count);
    }
    let count = Arc::new(AtomicU64::new(0));
    entries.push(Entry {
        graph,
        sidecar: name.to_owned(),
        count: Arc::clone(&count),
    });
    count
}

/// The family in Prometheus text format: every sidecar of the graph of `telemetry`.
pub(crate) fn prometheus(telemetry: &Arc<Telemetry>) -> String {
    let graph = Arc::downgrade(telemetry);
    let mut out = String::from(
        "# HELP patchbay_ws_protocol_errors_total WebSocket protocol violations by a sidecar's clients (bad frames, oversized or non-UTF-8 messages).\n# TYPE patchbay_ws_protocol_errors_total counter\n",
    );
    let mut rows: Vec<(String, u64)> = registry()
        .iter()
        .filter(|e| e.graph.ptr_eq(&graph))
        .map(|e| (e.sidecar.clone(), e.count.load(Ordering::Relaxed)))
        .collect();
    rows.sort();
    for (sidecar, n) in rows {
        let name = sidecar.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            out,
            "patchbay_ws_protocol_errors_total{{component=\"{name}\"}} {n}"
        );
    }
    out
}
