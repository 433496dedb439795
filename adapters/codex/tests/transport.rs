//! The `codex` component when Codex is not what it should be: a missing program, one that
//! dies, one that prints what is not JSON. Each is a named, counted failure, and the graph
//! goes on. (The real `codex app-server` is driven in the root package's tests/codex.rs.)

use std::time::Duration;

use patchbay_graph::{ChannelOutput, ChannelSource, Registry, RunningGraph, SourceText, compile};
use patchbay_signal::{Signal, object};

type Snapshot = patchbay_graph::telemetry::ComponentSnapshot;

/// A graph feeding a `codex` output running `command`, its inbound side captured; runs
/// until the program's end shows, then stops and returns the report's view of `codex` and
/// `codex.inbound`, and what came out.
async fn run(command: &str) -> (Snapshot, Snapshot, Vec<Signal>) {
    let mut registry = Registry::new();
    registry.adapter(&patchbay_codex::ADAPTER);
    let feed = ChannelSource::register(&mut registry, "feed", 8);
    let mut seen = ChannelOutput::register(&mut registry, "capture", 64);
    let config = format!(
        "[sources.ui]\ntype = \"feed\"\n\n[outputs.codex]\ntype = \"codex\"\ninputs = [\"ui\"]\n\
         command = {command}\n\n[outputs.seen]\ntype = \"capture\"\ninputs = [\"codex.inbound\"]\n"
    );
    let graph = compile(&[SourceText::new("codex.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    // A prompt while the program is gone is refused, not stuck.
    feed.send(Signal::new("prompt", "ui", object! {"text" => "hello"}))
        .await
        .expect("the graph runs");
    let mut signals = Vec::new();
    // What the program said before its end (bounded: a guard, not a timing).
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(s) = seen.recv().await {
            signals.push((*s).clone());
        }
    })
    .await;
    drop(feed);
    let report = tokio::time::timeout(Duration::from_secs(30), graph.stop())
        .await
        .expect("the graph stops")
        .expect("graph task");
    let codex = report.telemetry.component("codex").expect("codex's stats");
    let inbound = report
        .telemetry
        .component("codex.inbound")
        .expect("its inbound side");
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
        r#"["sh", "-c", "read line; echo 'not json'; echo '[1,2]'; echo '{\"method\":\"some/thing\",\"params\":{}}'"]"#,
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
