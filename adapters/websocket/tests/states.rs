//! Health states of the `websocket` source: a peer that never answers pings is a lost
//! connection (reconnect, `Recovering` "no pong"); a server that is not there exhausts
//! `max_attempts` (`Failed`). Read through a probe output keeping the graph's telemetry.

mod probe;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use patchbay_graph::{
    HealthState, OutputKind, Registry, RunningGraph, SourceText, WhenFull, compile,
};

const GUARD: Duration = Duration::from_secs(30);

/// Waits until `name` is in `state` with a detail containing `needle`.
async fn wait_state(name: &str, state: HealthState, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        if let Some(t) = probe::telemetry()
            && let Some(c) = t.component(name)
            && c.state == state
            // (the runtime records a failed source's error as `last_error`)
            && let Some(detail) = c.detail.or(c.last_error).filter(|d| d.contains(needle))
        {
            return detail;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} never {state:?} with {needle:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_pongs_reconnect_and_exhausted_attempts_fail() {
    // A peer that completes the handshake, then never reads: no pong ever comes back.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            if let Ok(ws) = tokio_tungstenite::accept_async(tcp).await {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(ws);
            }
        }
    });
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let config = format!(
        r#"
[sources.pongless]
type = "websocket"
url = "ws://{addr}/"
ping_interval_ms = 100
backoff_initial_ms = 400
backoff_max_ms = 800

[sources.nowhere]
type = "websocket"
url = "ws://127.0.0.1:{closed}/"
max_attempts = 2
backoff_initial_ms = 10
backoff_max_ms = 20
connect_timeout_ms = 1000

[outputs.probe]
type = "probe"
inputs = ["pongless", "nowhere"]
"#
    );
    let mut registry = Registry::new();
    registry.adapter(&patchbay_websocket::ADAPTER);
    registry.output(
        "probe",
        OutputKind {
            build: probe::build_probe,
            inbound: false,
            when_full: WhenFull::DropOldest,
        },
    );
    let graph = compile(&[SourceText::new("states.toml", config)], &registry)
        .unwrap_or_else(|e| panic!("{e:?}"));
    let graph = RunningGraph::spawn(graph);

    let detail = wait_state("pongless", HealthState::Recovering, "no pong").await;
    assert!(detail.starts_with("retrying in "), "{detail}");
    wait_state("pongless", HealthState::Ok, "connected").await;
    assert!(accepted.load(Ordering::SeqCst) >= 2);

    let detail = wait_state("nowhere", HealthState::Failed, "gave up after 2").await;
    assert!(!detail.is_empty());

    let _ = tokio::time::timeout(GUARD, graph.stop()).await;
}
