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

/// Reads `input` with a `file` source of `format` and `max_line_bytes`; returns the signals.
async fn read_file(input: &[u8], format: &str, max_line_bytes: usize) -> Vec<Value> {
    let dir = ScratchDir::new("ndjson-line-limits");
    let path = dir.join("in.jsonl");
    std::fs::write(&path, input).unwrap();
    let out = dir.join("out.jsonl");
    let config = format!(
        "[sources.in]\ntype = \"file\"\nformat = \"{format}\"\nmax_line_bytes = {max_line_bytes}\npath = \"{}\"\n\n[outputs.out]\ntype = \"file\"\ninputs = [\"in\"]\npath = \"{}\"\n",
        path.display(),
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
async fn a_line_too_long_is_one_error_and_reading_goes_on() {
    let mut input = b"{\"type\":\"a\"}\n".to_vec();
    input.extend(std::iter::repeat_n(b'x', 3 << 20));
    input.extend(b"\n{\"type\":\"b\"}\n");
    input.extend(std::iter::repeat_n(b'y', 5000));
    let out = read_file(&input, "signals", 1024).await;
    let kinds: Vec<&str> = out.iter().map(|s| s["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["a", "error", "b", "error"]);
    let error = &out[1];
    assert_eq!(error["payload"]["code"], "bad_frame");
    let message = error["payload"]["message"].as_str().unwrap();
    assert!(message.contains("longer than 1024 bytes"), "{message}");
    let raw = error["metadata"]["raw"].as_str().unwrap();
    assert!(raw.starts_with("xxxx") && raw.len() < 1024, "{}", raw.len());
}

#[tokio::test]
async fn a_scenario_line_too_long_is_one_error_and_the_replay_goes_on() {
    let line = |n: u32| {
        format!(
            "{{\"delayMs\": 0, \"signal\": {{\"type\": \"x\", \"payload\": {{\"n\": {n}}}}}}}\n"
        )
    };
    let mut input = line(1).into_bytes();
    input.extend(
        format!(
            "{{\"delayMs\": 0, \"signal\": {{\"type\": \"x\", \"payload\": {{\"s\": \"{}\"}}}}}}\n",
            "z".repeat(4096)
        )
        .bytes(),
    );
    input.extend(line(3).bytes());
    let out = read_file(&input, "scenario", 1024).await;
    let kinds: Vec<&str> = out.iter().map(|s| s["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["x", "error", "x"]);
    assert_eq!(out[2]["payload"]["n"], 3);
}

#[test]
fn max_line_bytes_is_range_checked_at_validation() {
    for (source, value) in [("file\"\npath = \"x", "0"), ("stdin", "67108865")] {
        let errors = compile(&format!(
            "[sources.in]\ntype = \"{source}\"\nmax_line_bytes = {value}\n"
        ))
        .expect_err("refused");
        let e = &errors[0];
        assert!(e.message.contains("max_line_bytes"), "{e}");
        assert!(e.line >= 3, "{e}");
    }
    compile("[sources.in]\ntype = \"stdin\"\nmax_line_bytes = 4096\n[outputs.o]\ntype = \"stdout\"\ninputs = [\"in\"]\n")
        .unwrap_or_else(|e| panic!("{e:?}"));
}
