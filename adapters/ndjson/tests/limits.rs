//! Hostile or careless scenario files: an absurd `delayMs` is a counted bad line (an
//! `error` signal) and the replay goes on; an absurd `speed` is refused at validation.

use std::path::Path;

use patchbay_graph::embed::RunningGraph;
use patchbay_graph::{Graph, Registry, SourceText};
use patchbay_testkit::scratch::ScratchDir;
use serde_json::Value;

fn compile(config: &str) -> Result<Graph, Vec<patchbay_graph::Diagnostic>> {
    let mut registry = Registry::new();
    registry.adapter(&patchbay_ndjson::ADAPTER);
    patchbay_graph::compile(&[SourceText::new("p.toml", config)], &registry)
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// Replays `scenario` at `speed` into a file output; returns the signals written.
async fn replay(scenario: &str, speed: &str) -> Vec<Value> {
    let dir = ScratchDir::new("ndjson-scenario-limits");
    let input = dir.join("in.jsonl");
    std::fs::write(&input, scenario).unwrap();
    let out = dir.join("out.jsonl");
    let config = format!(
        "[sources.in]\ntype = \"file\"\nformat = \"scenario\"\nspeed = {speed}\npath = \"{}\"\n\n[outputs.out]\ntype = \"file\"\ninputs = [\"in\"]\npath = \"{}\"\n",
        input.display(),
        out.display()
    );
    let graph = compile(&config).unwrap_or_else(|e| panic!("{e:?}"));
    RunningGraph::spawn(graph)
        .wait()
        .await
        .expect("the graph ends");
    read_lines(&out)
}

#[tokio::test]
async fn absurd_scenario_delays_are_bad_lines_and_the_replay_goes_on() {
    let line = |delay: &str, n: u32| {
        format!(
            "{{\"delayMs\": {delay}, \"signal\": {{\"type\": \"x\", \"payload\": {{\"n\": {n}}}}}}}\n"
        )
    };
    let scenario = [
        line("5", 1),
        line("1e300", 2),
        line("-3", 3),
        line("86400001", 4),
        line("7", 5),
    ]
    .concat();
    for speed in ["0", "0.001"] {
        let out = replay(&scenario, speed).await;
        let kinds: Vec<&str> = out.iter().map(|s| s["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["x", "error", "error", "error", "x"],
            "speed {speed}"
        );
        let message = out[1]["payload"]["message"].as_str().unwrap();
        assert!(message.contains("delayMs"), "{message}");
        let (first, last) = (&out[0], &out[4]);
        assert_eq!(last["payload"]["n"], 5);
        // The refused delays are not on the timeline: 5 ms, then 7 ms.
        assert_eq!(
            last["timestamp"].as_i64().unwrap() - first["timestamp"].as_i64().unwrap(),
            7,
            "speed {speed}: {first} {last}"
        );
    }
}

#[test]
fn a_huge_scenario_speed_is_refused_at_validation() {
    let errors = compile(
        "[sources.in]\ntype = \"file\"\nformat = \"scenario\"\npath = \"x\"\nspeed = 1e300\n",
    )
    .expect_err("refused");
    let e = &errors[0];
    assert_eq!((e.line, e.col), (5, 9), "{e}");
    assert!(e.message.contains("from 0 to 1000"), "{e}");
}
