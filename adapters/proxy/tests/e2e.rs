//! The tap proxy end to end with the graph run in process (the same scenario as the root
//! test `tests/llm_proxy.rs`, which runs the binary): official SDKs, a replay upstream,
//! llmock faults. See `patchbay_testkit::llm_proxy_e2e`.

use patchbay_testkit::llm_proxy_e2e as proxy_e2e;

use std::path::Path;

use patchbay_graph::{Registry, RunningGraph, SourceText, compile};

/// Runs the config's graph in this process.
#[derive(Default)]
struct InProcess {
    graph: Option<RunningGraph>,
}

impl proxy_e2e::Patchbay for InProcess {
    async fn start(&mut self, config: &Path) {
        let mut registry = Registry::new();
        registry.adapter(&patchbay_ndjson::ADAPTER);
        registry.adapter(&patchbay_proxy::ADAPTER);
        let text = std::fs::read_to_string(config).expect("config");
        let graph = compile(
            &[SourceText::new(config.display().to_string(), text)],
            &registry,
        )
        .unwrap_or_else(|e| panic!("config: {e:?}"));
        self.graph = Some(RunningGraph::spawn(graph));
    }

    async fn stop(&mut self) {
        if let Some(graph) = self.graph.take() {
            let _ = tokio::time::timeout(proxy_e2e::GUARD, graph.stop()).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdks_through_the_proxy_in_process() {
    proxy_e2e::run_scenario(InProcess::default(), "inproc").await;
}
