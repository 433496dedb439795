//! End-to-end tests of the `patchbay` binary: config checking, `parse`, `run` on files,
//! `test`, and the shipped pipelines.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use patchbay_testkit::scratch::ScratchDir;
use serde_json::Value;

fn patchbay(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PATCHBAY_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("patchbay starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("patchbay exits")
}

fn write(dir: &ScratchDir, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write file");
    path.display().to_string()
}

fn lines(text: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(text)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// Validates `config` and returns stderr, asserting exit code 1.
fn invalid(config: &str) -> (String, String) {
    let dir = ScratchDir::new("cli-invalid");
    let path = write(&dir, "p.toml", config);
    let out = patchbay(&["validate", &path], "");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "expected exit 1, stderr: {stderr}"
    );
    (path, stderr)
}

#[test]
fn validate_reports_each_kind_of_error_with_its_location() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[sources.a]\ntype = \"stdin\"\nbogus = 1\n",
            ":3:1:",
            "unknown field `bogus`",
        ),
        (
            "[sources.a]\ntype = \"stdinn\"\n",
            ":2:8:",
            "did you mean `stdin`",
        ),
        (
            "[sources.a]\ntype = \"stdin\"\n[outputs.o]\ntype = \"stdout\"\ninputs = [\"b\"]\n",
            ":5:11:",
            "unknown input `b`",
        ),
        (
            "[sources.agent]\ntype = \"stdin\"\n[outputs.o]\ntype = \"stdout\"\ninputs = [\"agnet\"]\n",
            ":5:11:",
            "did you mean `agent`",
        ),
        (
            "[sources.a]\ntype = \"file\"\n",
            ":1:1:",
            "missing field `path`",
        ),
        (
            "[sources.a]\ntype = \"stdin\"\n[filters.t]\ntype = \"throttle\"\ninputs = [\"a\"]\ninterval_ms = -5\n",
            ":6:15:",
            "t:",
        ),
        (
            "[sources.a]\ntype = \"stdin\"\n[filters.w]\ntype = \"when\"\ninputs = [\"a\"]\nexpr = '.type =='\n",
            ":6:",
            "w:",
        ),
        (
            "[sources.a]\ntype = \"stdin\"\n[filters.x]\ntype = \"when\"\ninputs = [\"a\", \"y\"]\nwhen = { type = \"a\" }\n[filters.y]\ntype = \"when\"\ninputs = [\"x\"]\nwhen = { type = \"a\" }\n",
            ":",
            "cycle",
        ),
        (
            "[sourcez.a]\ntype = \"stdin\"\n",
            ":1:2:",
            "did you mean `sources`",
        ),
        ("[sources.a\ntype = \"stdin\"\n", ":1:", ""),
    ];
    for (config, location, message) in cases {
        let (path, stderr) = invalid(config);
        assert!(
            stderr.contains(&format!("{path}{location}")) && stderr.contains(message),
            "config:\n{config}\nexpected `{location}` and `{message}` in:\n{stderr}"
        );
    }
}

#[test]
fn environment_values_never_appear_in_errors() {
    let dir = ScratchDir::new("cli-env");
    let path = write(
        &dir,
        "p.toml",
        "[sources.a]\ntype = \"file\"\npath = \"x\"\nspeed = \"${PATCHBAY_TEST_SECRET}\"\nformat = \"scenario\"\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["validate", &path])
        .env("PATCHBAY_TEST_SECRET", "hunter2-secret")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(!stderr.contains("hunter2-secret"), "{stderr}");
    assert!(stderr.contains(":4:9:"), "{stderr}");
}

#[test]
fn parse_sajou_gives_the_scenarios_envelopes_all_schema_valid() {
    for name in ["simple-task", "multi-agent", "error-recovery"] {
        let file = format!("tests/fixtures/sajou/emitter-scenario-{name}.jsonl");
        let out = patchbay(&["parse", "--protocol", "sajou", &file], "");
        assert!(out.status.success());
        let signals = lines(&out.stdout);
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(&file)).unwrap();
        let expected: Vec<Value> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["signal"].clone())
            .collect();
        assert_eq!(signals, expected, "{name}");
        for s in &signals {
            patchbay_testkit::assert_schema_valid(s);
        }
    }
}

#[test]
fn parse_reports_bad_lines_as_error_signals() {
    let out = patchbay(
        &["parse", "--protocol", "sajou"],
        "{\"type\":\"a\",\"timestamp\":7}\nnot json\n",
    );
    assert!(out.status.success());
    let signals = lines(&out.stdout);
    assert_eq!(signals.len(), 2);
    assert_eq!(signals[1]["type"], "error");
    assert_eq!(signals[1]["payload"]["code"], "bad_frame");
    assert_eq!(signals[1]["timestamp"], 7);
    patchbay_testkit::assert_schema_valid(&signals[1]);
}

/// Runs `input lines → [filter] → file` with the given filter options and returns the
/// timestamps of what came out.
fn run_filter(filter: &str, input: &[(i64, &str)]) -> Vec<i64> {
    let dir = ScratchDir::new("cli-filter");
    let lines_in: String = input
        .iter()
        .map(|(t, k)| format!("{{\"type\":\"{k}\",\"timestamp\":{t},\"payload\":{{\"v\":{t}}}}}\n"))
        .collect();
    let input_path = write(&dir, "in.jsonl", &lines_in);
    let out_path = dir.join("out.jsonl");
    let config = format!(
        "[sources.in]\ntype = \"file\"\npath = \"{input_path}\"\n\n[filters.f]\ninputs = [\"in\"]\n{filter}\n\n[outputs.out]\ntype = \"file\"\ninputs = [\"f\"]\npath = \"{}\"\n",
        out_path.display()
    );
    let config_path = write(&dir, "p.toml", &config);
    let out = patchbay(&["run", &config_path], "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read(&out_path).unwrap_or_default();
    lines(&text)
        .iter()
        .map(|s| s["timestamp"].as_i64().unwrap())
        .collect()
}

#[test]
fn run_file_to_file_with_event_clock_throttle() {
    let input = [
        (0, "x"),
        (50, "x"),
        (99, "x"),
        (100, "x"),
        (150, "x"),
        (260, "x"),
    ];
    let leading = run_filter(
        "type = \"throttle\"\ninterval_ms = 100\nemit = \"leading\"\nclock = \"event\"",
        &input,
    );
    assert_eq!(leading, [0, 100, 260]);
    let both = run_filter(
        "type = \"throttle\"\ninterval_ms = 100\nemit = \"both\"\nclock = \"event\"",
        &input,
    );
    assert_eq!(both, [0, 99, 150, 260]);
    let trailing = run_filter(
        "type = \"throttle\"\ninterval_ms = 100\nemit = \"trailing\"\nclock = \"event\"",
        &input,
    );
    assert_eq!(trailing, [99, 150, 260]);
}

#[test]
fn run_file_to_file_with_sample_and_delta() {
    let input = [(0, "x"), (10, "x"), (20, "x"), (30, "x"), (40, "x")];
    assert_eq!(
        run_filter("type = \"sample\"\nevery = 2", &input),
        [0, 20, 40]
    );
    assert_eq!(
        run_filter(
            "type = \"sample\"\ninterval_ms = 25\nclock = \"event\"",
            &input
        ),
        [20, 40]
    );
    assert_eq!(
        run_filter(
            "type = \"delta\"\npath = \"payload.v\"\nthreshold = 20",
            &input
        ),
        [0, 20, 40]
    );
}

#[test]
fn every_shipped_pipeline_validates_and_its_tests_pass() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        count += 1;
        let p = path.display().to_string();
        let out = patchbay(&["validate", &p], "");
        assert!(
            out.status.success(),
            "{p}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = patchbay(&["test", &p], "");
        assert!(
            out.status.success(),
            "{p}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(count >= 3, "at least three example pipelines");
}

#[test]
fn config_test_failures_show_a_diff() {
    let dir = ScratchDir::new("cli-cfgtest");
    let path = write(
        &dir,
        "p.toml",
        r#"
[sources.a]
type = "stdin"
[filters.w]
type = "when"
inputs = ["a"]
when = { type = "keep" }
[outputs.o]
type = "stdout"
inputs = ["w"]
[[tests]]
name = "wrong expectation"
inputs = [{ insert_at = "a", signal = { type = "keep", payload = { n = 1 } } }]
outputs = [{ extract_from = "w", expect = [{ payload = { n = 2 } }] }]
"#,
    );
    let out = patchbay(&["test", &path], "");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout.contains("FAILED") && stdout.contains("- {\"payload\":{\"n\":2}}"),
        "{stdout}"
    );
    assert!(stdout.contains("0 passed, 1 failed"), "{stdout}");
}

#[test]
fn graph_draws_dot_and_mermaid() {
    let out = patchbay(&["graph", "pipelines/token-meter.toml"], "");
    let dot = String::from_utf8_lossy(&out.stdout);
    assert!(
        dot.starts_with("digraph") && dot.contains("dropped"),
        "{dot}"
    );
    let out = patchbay(
        &["graph", "pipelines/token-meter.toml", "--format", "mermaid"],
        "",
    );
    let m = String::from_utf8_lossy(&out.stdout);
    assert!(m.starts_with("flowchart LR") && m.contains("-->"), "{m}");
}

#[test]
fn graph_labels_edges_from_route_branches_and_unmatched() {
    let dir = ScratchDir::new("cli-graph-ports");
    let path = write(
        &dir,
        "p.toml",
        r#"[sources.agent]
type = "stdin"

[filters.kinds]
type = "route"
inputs = ["agent"]

[filters.kinds.branches]
errors = { type = "error" }
tools = { type = { matches = "^tool_" } }

[outputs.alerts]
type = "stdout"
inputs = ["kinds.errors"]

[outputs.log]
type = "file"
path = "log.jsonl"
inputs = ["kinds.tools", "kinds._unmatched", "agent"]
"#,
    );
    let out = patchbay(&["graph", &path], "");
    assert!(out.status.success(), "{out:?}");
    let dot = String::from_utf8_lossy(&out.stdout);
    // Nodes in declaration order: agent n0, kinds n1, alerts n2, log n3.
    for edge in [
        "n1 -> n2 [label=\"errors\"];",
        "n1 -> n3 [label=\"tools\"];",
        "n1 -> n3 [label=\"_unmatched\"];",
        "n0 -> n3;",
        "n0 -> n1;",
    ] {
        assert!(dot.contains(edge), "no `{edge}` in\n{dot}");
    }
    let out = patchbay(&["graph", &path, "--format", "mermaid"], "");
    assert!(out.status.success(), "{out:?}");
    let m = String::from_utf8_lossy(&out.stdout);
    for edge in [
        "n1 -->|\"errors\"| n2",
        "n1 -->|\"tools\"| n3",
        "n1 -->|\"_unmatched\"| n3",
        "n0 --> n3",
        "n0 --> n1",
    ] {
        assert!(m.contains(edge), "no `{edge}` in\n{m}");
    }
}

#[test]
fn sigterm_stops_sources_flushes_filters_and_exits_zero() {
    let dir = ScratchDir::new("cli-sigterm");
    let out_path = dir.join("out.jsonl");
    let config = format!(
        "[sources.in]\ntype = \"stdin\"\n\n[filters.t]\ntype = \"throttle\"\ninputs = [\"in\"]\ninterval_ms = 3600000\nemit = \"both\"\n\n[outputs.out]\ntype = \"file\"\ninputs = [\"t\"]\npath = \"{}\"\n",
        out_path.display()
    );
    let config_path = write(&dir, "p.toml", &config);
    let mut child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["run", &config_path])
        .env("PATCHBAY_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("patchbay starts");
    // stdin stays open: the source never ends by itself.
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(b"{\"type\":\"first\"}\n{\"type\":\"held\"}\n")
        .expect("write");
    stdin.flush().expect("flush");
    // Wait (bounded) until the first signal has gone through: the second is then held by
    // the throttle for an hour.
    let guard = std::time::Instant::now();
    while std::fs::read_to_string(&out_path).map_or(true, |t| !t.contains("first")) {
        assert!(guard.elapsed().as_secs() < 60, "first signal never arrived");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let out = child.wait_with_output().expect("exits");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kinds: Vec<String> = lines(&std::fs::read(&out_path).unwrap())
        .iter()
        .map(|s| s["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        ["first", "held"],
        "the held signal is flushed on shutdown"
    );
    drop(stdin);
}
