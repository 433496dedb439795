//! The generic `websocket` and `sse` sources end to end with the graph in process (the
//! root test `tests/generic_sources.rs` runs the same scenario on the binary). The health
//! states are read through a probe output that keeps the graph's telemetry.

mod probe;

use patchbay_testkit::generic_e2e;

use probe::{build_probe, telemetry};

use std::path::Path;
use std::time::Duration;

use patchbay_graph::{
    HealthState, OutputKind, Registry, RunningGraph, SourceText, WhenFull, compile,
};

#[derive(Default)]
struct InProcess {
    graph: Option<RunningGraph>,
}

impl generic_e2e::Patchbay for InProcess {
    async fn start(&mut self, config: &Path) {
        let mut registry = Registry::new();
        registry.adapter(&patchbay_ndjson::ADAPTER);
        registry.adapter(&patchbay_websocket::ADAPTER);
        registry.adapter(&patchbay_sse::ADAPTER);
        registry.output(
            "probe",
            OutputKind {
                build: build_probe,
                inbound: false,
                when_full: WhenFull::DropOldest,
            },
        );
        let text = std::fs::read_to_string(config).expect("config")
            + "\n[outputs.probe]\ntype = \"probe\"\ninputs = [\"ws\"]\n";
        let graph = compile(&[SourceText::new("generic.toml", text)], &registry)
            .unwrap_or_else(|e| panic!("{e:?}"));
        self.graph = Some(RunningGraph::spawn(graph));
    }

    async fn wait_recovering(&mut self, name: &str) {
        let deadline = tokio::time::Instant::now() + generic_e2e::GUARD;
        loop {
            if let Some(t) = telemetry() {
                let seen = t.component(name);
                if let Some(c) = seen
                    && c.state == HealthState::Recovering
                {
                    let detail = c.detail.clone().unwrap_or_default();
                    assert!(detail.starts_with("retrying in "), "{detail}");
                    return;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name} never recovering"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn stop(&mut self) {
        if let Some(graph) = self.graph.take() {
            let _ = tokio::time::timeout(generic_e2e::GUARD, graph.stop()).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_and_sse_reconnect_and_resume_in_process() {
    generic_e2e::run_scenario(InProcess::default(), "inproc").await;
}
