//! The `codex` component when Codex is not what it should be: a missing program, one that
//! dies, one that prints what is not JSON. Each is a named, counted failure, Codex is
//! started again with backoff, and the graph goes on. (The real `codex app-server` is
//! driven in the root package's tests/codex.rs.)

use std::time::Duration;

use patchbay_graph::{ChannelOutput, ChannelSource, Registry, RunningGraph, SourceText, compile};
use patchbay_signal::{SharedSignal, Signal, object};
use tokio::sync::mpsc;

type Snapshot = patchbay_graph::telemetry::ComponentSnapshot;

/// A graph feeding a `codex` output running `command`, its inbound side captured.
fn start(
    command: &str,
) -> (
    RunningGraph,
    mpsc::Sender<Signal>,
    mpsc::Receiver<SharedSignal>,
) {
    let mut registry = Registry::new();
    registry.adapter(&patchbay_codex::ADAPTER);
    let feed = ChannelSource::register(&mut registry, "feed", 8);
    let seen = ChannelOutput::register(&mut registry, "capture", 64);
    let config = format!(
        "[sources.ui]\ntype = \"feed\"\n\n[outputs.codex]\ntype = \"codex\"\ninputs = [\"ui\"]\n\
         command = {command}\n\n[outputs.seen]\ntype = \"capture\"\ninputs = [\"codex.inbound\"]\n"
    );
    let graph = compile(&[SourceText::new("codex.toml", config)], &registry).expect("compiles");
    (RunningGraph::spawn(graph), feed, seen)
}

/// Stops the graph; the report's view of `codex` and `codex.inbound`.
async fn stop(graph: RunningGraph) -> (Snapshot, Snapshot) {
    let report = tokio::time::timeout(Duration::from_secs(30), graph.stop())
        .await
        .expect("the graph stops")
        .expect("graph task");
    let codex = report.telemetry.component("codex").expect("codex's stats");
    let inbound = report
        .telemetry
        .component("codex.inbound")
        .expect("its inbound side");
    (codex, inbound)
}

/// Runs `command` as Codex: a prompt goes in, and what comes out within a few seconds is
/// collected (a prompt while the program is gone is refused, not stuck).
async fn run(command: &str) -> (Snapshot, Snapshot, Vec<Signal>) {
    let (graph, feed, mut seen) = start(command);
    feed.send(Signal::new("prompt", "ui", object! {"text" => "hello"}))
        .await
        .expect("the graph runs");
    let mut signals = Vec::new();
    // What the program said before its end (a guard on the collection, not a timing).
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(s) = seen.recv().await {
            signals.push((*s).clone());
        }
    })
    .await;
    drop(feed);
    let (codex, inbound) = stop(graph).await;
    (codex, inbound, signals)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_codex_is_a_failure_that_names_the_program() {
    let (codex, _, _) = run(r#"["/nonexistent/bin/codex", "app-server"]"#).await;
    let error = codex.last_error.clone().unwrap_or_default();
    assert!(
        error.contains("cannot start `/nonexistent/bin/codex`"),
        "{codex:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_that_dies_is_a_failure_with_its_status() {
    let (codex, _, _) = run(r#"["sh", "-c", "read line; exit 3"]"#).await;
    let error = codex.last_error.clone().unwrap_or_default();
    assert!(error.contains("codex exited with"), "{codex:?}");
    assert!(error.contains('3'), "{codex:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_that_are_not_json_are_counted_bad_input_and_codex_goes_on() {
    let (_, inbound, signals) = run(
        r#"["sh", "-c", "read line; echo 'not json'; echo '[1,2]'; echo '{\"method\":\"some/thing\",\"params\":{}}'; sleep 60"]"#,
    )
    .await;
    let kinds: Vec<&str> = signals.iter().map(|s| s.kind.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "error").count(),
        2,
        "two bad lines: {kinds:?}"
    );
    assert!(
        kinds.contains(&"codex.some/thing"),
        "then a good one: {kinds:?}"
    );
    assert_eq!(inbound.bad_input, 2, "{inbound:?}");
    for s in &signals {
        patchbay_testkit::validity::assert_valid(s);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_that_dies_is_started_again() {
    let dir = patchbay_testkit::scratch::ScratchDir::new("codex-restart");
    let starts = dir.join("starts");
    let (graph, feed, _seen) = start(&format!(
        r#"["sh", "-c", "echo start >> {}; read line; exit 3"]"#,
        starts.display()
    ));
    // Started, died, started again (a guard against a hang; nothing is timed).
    tokio::time::timeout(Duration::from_secs(60), async {
        while std::fs::read_to_string(&starts).map_or(0, |s| s.lines().count()) < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("codex was started again");
    drop(feed);
    let (codex, _) = stop(graph).await;
    let error = codex.last_error.clone().unwrap_or_default();
    assert!(error.contains("codex exited with"), "{codex:?}");
}
