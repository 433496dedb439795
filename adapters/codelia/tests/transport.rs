//! The transports end to end, in process, against a stand-in runtime
//! (`tests/support/codelia_standin.py` at the workspace root) that replays recordings
//! of the real runtime: `wrap_io` between a UI written here and the stand-in, and the
//! `codelia` output inside a graph.

use std::path::{Path, PathBuf};
use std::time::Duration;

use patchbay_graph::{
    ChannelOutput, ChannelSource, Registry, RunningGraph, SourceText, compile, runtime,
};
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{Object, SharedSignal, Signal};
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn standin() -> String {
    root()
        .join("tests/support/codelia_standin.py")
        .display()
        .to_string()
}

fn recording(name: &str) -> String {
    root()
        .join("tests/fixtures/codelia")
        .join(name)
        .display()
        .to_string()
}

/// The recording's lines as `(dir, msg)`.
fn lines(name: &str) -> Vec<(String, Value)> {
    std::fs::read_to_string(recording(name))
        .expect("recording")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("recorded line");
            (
                v["dir"].as_str().unwrap_or_default().to_owned(),
                v["msg"].clone(),
            )
        })
        .collect()
}

/// A stand-in for a sidecar's `POST /signal`: every body received, parsed.
async fn sidecar() -> (String, mpsc::UnboundedReceiver<Value>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/signal",
        axum::routing::post(move |body: String| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(serde_json::from_str::<Value>(&body).unwrap_or(Value::Null));
                axum::Json(json!({"ok": true}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, rx)
}

/// Plays the UI's side of a recording through `wrap_io` and checks both byte streams.
/// Returns the exit code and the signals published.
async fn wrap_session(
    name: &str,
    to: String,
    exit_code: i32,
) -> (i32, Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    let dir = ScratchDir::new("codelia-wrap");
    let (log_in, log_out) = (dir.join("in.bin"), dir.join("out.bin"));
    let command = vec![
        "python3".to_owned(),
        standin(),
        recording(name),
        "--log-in".into(),
        log_in.display().to_string(),
        "--log-out".into(),
        log_out.display().to_string(),
        "--exit-code".into(),
        exit_code.to_string(),
    ];
    let (ui_tx, ui_rx) = mpsc::channel(16);
    let (ui_out, from_wrap) = tokio::io::duplex(1 << 20);
    let wrap = tokio::spawn(patchbay_codelia::wrap_io(command, to, ui_rx, ui_out));
    let mut from_wrap = BufReader::new(from_wrap);
    let (mut sent, mut received) = (Vec::new(), Vec::new());
    for (dir, msg) in lines(name) {
        match dir.as_str() {
            "out" => {
                let line = format!("{msg}\n").into_bytes();
                sent.extend_from_slice(&line);
                // Sent in two pieces, as a pipe may deliver it.
                let (a, b) = line.split_at(line.len() / 2);
                ui_tx.send(a.to_vec()).await.expect("wrap takes input");
                ui_tx.send(b.to_vec()).await.expect("wrap takes input");
            }
            "in" => {
                let mut line = Vec::new();
                tokio::time::timeout(
                    Duration::from_secs(20),
                    from_wrap.read_until(b'\n', &mut line),
                )
                .await
                .expect("the runtime's line arrives")
                .expect("read");
                let got: Value = serde_json::from_slice(&line).expect("a JSON line");
                assert_eq!(got, msg, "the UI receives what the runtime sent");
                received.extend_from_slice(&line);
            }
            _ => {}
        }
    }
    drop(ui_tx);
    let code = tokio::time::timeout(Duration::from_secs(20), wrap)
        .await
        .expect("wrap ends when the runtime exits")
        .expect("wrap task")
        .expect("wrap runs");
    let runtime_got = std::fs::read(&log_in).expect("log in");
    let runtime_sent = std::fs::read(&log_out).expect("log out");
    (code, sent, runtime_got, received, runtime_sent)
}

/// What the recording's runtime → UI side decodes to: `(type, correlationId)`.
fn expected_signals(name: &str) -> Vec<(String, Value)> {
    let mut decoder = patchbay_codelia::parse_decoder("codelia:wrap");
    let mut out = Vec::new();
    decoder.feed(
        std::fs::read_to_string(recording(name))
            .expect("recording")
            .as_bytes(),
        &mut out,
    );
    decoder.finish(&mut out);
    out.into_iter()
        .map(|d| match d {
            Decoded::Signal(s) | Decoded::BadInput(s) => (
                s.kind.to_string(),
                s.correlation_id.map(Value::from).unwrap_or(Value::Null),
            ),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrap_relays_byte_for_byte_and_publishes_the_signals() {
    let (url, mut posts) = sidecar().await;
    let name = "codelia-run-mock-toolcalls.ndjson";
    let (code, ui_sent, runtime_got, ui_got, runtime_sent) = wrap_session(name, url, 3).await;
    assert_eq!(code, 3, "the child's exit code");
    assert_eq!(
        runtime_got, ui_sent,
        "the runtime receives exactly what the UI sent"
    );
    assert_eq!(
        ui_got, runtime_sent,
        "the UI receives exactly what the runtime sent"
    );

    let expected = expected_signals(name);
    let mut got: Vec<(String, Value)> = Vec::new();
    while got.len() < expected.len() {
        let batch = tokio::time::timeout(Duration::from_secs(10), posts.recv())
            .await
            .expect("signals arrive")
            .expect("sidecar alive");
        for s in batch.as_array().expect("a JSON array") {
            assert_eq!(s["source"], "codelia:wrap");
            got.push((
                s["type"].as_str().unwrap_or_default().to_owned(),
                s["correlationId"].clone(),
            ));
        }
    }
    assert_eq!(got, expected);
    assert!(got.iter().any(|(k, _)| k == "tool_call"));
    assert!(got.iter().any(|(k, _)| k == "codelia.request"));
    assert_eq!(got.iter().filter(|(k, _)| k == "completion").count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrap_keeps_relaying_when_patchbay_is_unreachable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let name = "codelia-run-mock-cancel.ndjson";
    let (code, ui_sent, runtime_got, ui_got, runtime_sent) =
        wrap_session(name, format!("http://127.0.0.1:{port}"), 0).await;
    assert_eq!(code, 0);
    assert_eq!(runtime_got, ui_sent);
    assert_eq!(ui_got, runtime_sent);
}

#[tokio::test]
async fn wrap_without_a_command_is_an_error() {
    let (_tx, rx) = mpsc::channel(1);
    let err = patchbay_codelia::wrap_io(
        Vec::new(),
        "http://127.0.0.1:1".into(),
        rx,
        tokio::io::sink(),
    )
    .await
    .expect_err("no command");
    assert!(err.to_string().contains("needs a command"), "{err}");
}

// --- the `codelia` output in a graph ---------------------------------------------

fn registry() -> Registry {
    let mut r = Registry::new();
    r.adapter(&patchbay_codelia::ADAPTER);
    r
}

/// A graph `feed → codelia(stand-in) → capture`, and the ends the test drives.
struct Session {
    feed: mpsc::Sender<Signal>,
    seen: mpsc::Receiver<SharedSignal>,
    graph: RunningGraph,
    log_in: PathBuf,
    /// Last: fields drop in order, so the graph (and the stand-in it runs) has gone when
    /// the directory does.
    _dir: ScratchDir,
}

fn start_session(name: &str) -> Session {
    let dir = ScratchDir::new("codelia-graph");
    let log_in = dir.join("in.bin");
    let mut registry = registry();
    let feed = ChannelSource::register(&mut registry, "feed", 64);
    let seen = ChannelOutput::register(&mut registry, "capture", 1024);
    let config = format!(
        r#"
[sources.ui]
type = "feed"

[outputs.rt]
type = "codelia"
inputs = ["ui"]
command = ["python3", "{standin}", "{recording}", "--log-in", "{log_in}"]
env = {{ PYTHONUNBUFFERED = "1" }}

[outputs.seen]
type = "capture"
inputs = ["rt.inbound"]
"#,
        standin = standin(),
        recording = recording(name),
        log_in = log_in.display(),
    );
    let graph =
        compile(&[SourceText::new("codelia.toml", config)], &registry).expect("graph compiles");
    Session {
        feed,
        seen,
        graph: RunningGraph::spawn(graph),
        log_in,
        _dir: dir,
    }
}

impl Session {
    fn send(&self, kind: &str, payload: Value) {
        let payload: Object = payload.as_object().cloned().unwrap_or_default();
        self.feed
            .try_send(Signal::new(kind, "test", payload))
            .expect("the feed is open and has room");
    }

    /// Waits for the first signal matching `pred`.
    async fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            let s = tokio::time::timeout(Duration::from_secs(20), self.seen.recv())
                .await
                .unwrap_or_else(|_| panic!("waiting for {what}"))
                .expect("graph alive")
                .to_value();
            assert_eq!(s["source"], "codelia:rt");
            if pred(&s) {
                return s;
            }
        }
    }

    async fn finish(self) -> (Vec<Value>, runtime::RunReport) {
        let report = tokio::time::timeout(Duration::from_secs(20), self.graph.stop())
            .await
            .expect("graph stops")
            .expect("graph task");
        let lines = std::fs::read_to_string(&self.log_in)
            .expect("log")
            .lines()
            .map(|l| serde_json::from_str(l).expect("the stand-in got JSON"))
            .collect();
        (lines, report)
    }
}

fn is(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |s| s["type"] == kind
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_codelia_output_prompts_answers_and_cancels() {
    // A run with a confirm request, answered from a control.answer.
    let mut s = start_session("codelia-run-mock-toolcalls.ndjson");
    let init = s
        .wait_for("initialize answer", is("codelia.response"))
        .await;
    assert_eq!(init["payload"]["method"], "initialize");
    s.send("control.pause", json!({})); // Codelia cannot pause: refused, counted
    s.send(
        "prompt",
        json!({"text": "CALLTOOL:read:{\"file_path\":\"README.md\"}"}),
    );
    let done = s.wait_for("first completion", is("completion")).await;
    assert_eq!(
        done["payload"]["taskId"],
        "f3c3700e-1df4-4a24-87fb-4c1a40f598fa"
    );
    s.send(
        "prompt",
        json!({"text": "CALLTOOL:shell:{\"command\":\"echo hi-from-shell\"}"}),
    );
    let request = s.wait_for("confirm request", is("codelia.request")).await;
    assert_eq!(request["payload"]["method"], "ui.confirm.request");
    assert_eq!(request["payload"]["promptId"], "ui_1");
    s.send("control.answer", json!({"promptId": "ui_1", "value": true}));
    let done = s.wait_for("second completion", is("completion")).await;
    assert_eq!(
        done["payload"]["taskId"],
        "24a11f48-d351-4388-b892-3275a5920439"
    );
    let (got, report) = s.finish().await;
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(got[0]["method"], "initialize");
    assert_eq!(got[1]["method"], "run.start");
    assert_eq!(
        got[1]["params"]["input"]["text"],
        "CALLTOOL:read:{\"file_path\":\"README.md\"}"
    );
    assert_eq!(got[2]["method"], "run.start");
    assert_eq!(
        got[3],
        json!({"jsonrpc": "2.0", "id": "ui_1", "result": {"ok": true}})
    );
    let rt = report.telemetry.component("rt").expect("stats");
    assert_eq!(rt.sent, 3);
    assert_eq!(rt.bad_input, 1, "control.pause refused");

    // A run cancelled from control.cancel, then a cancel of the ended run.
    let mut s = start_session("codelia-run-mock-cancel.ndjson");
    s.wait_for("initialize answer", is("codelia.response"))
        .await;
    s.send("prompt", json!({"text": "SLOW please"}));
    s.wait_for("running", |v| {
        v["type"] == "agent_state_change" && v["payload"]["to"] == "acting"
    })
    .await;
    s.send("control.cancel", json!({"reason": "probe cancel"}));
    let idle = s
        .wait_for("cancelled", |v| {
            v["type"] == "agent_state_change" && v["payload"]["to"] == "idle"
        })
        .await;
    assert_eq!(
        idle["correlationId"],
        "c3374cef-7952-43d7-afb7-77fbf37096c1"
    );
    s.send(
        "control.interrupt",
        json!({"runId": "c3374cef-7952-43d7-afb7-77fbf37096c1"}),
    );
    let refused = s
        .wait_for("the error answer", |v| {
            v["type"] == "codelia.response" && v["payload"].get("error").is_some()
        })
        .await;
    assert_eq!(refused["payload"]["method"], "run.cancel");
    let (got, _) = s.finish().await;
    assert_eq!(
        got[2],
        json!({"jsonrpc": "2.0", "id": "3", "method": "run.cancel",
               "params": {"run_id": "c3374cef-7952-43d7-afb7-77fbf37096c1", "reason": "probe cancel"}})
    );
    assert_eq!(got[3]["method"], "run.cancel");
    assert_eq!(
        got[3]["params"]["run_id"],
        "c3374cef-7952-43d7-afb7-77fbf37096c1"
    );
}

#[test]
fn config_needs_a_command() {
    let r = registry();
    for (options, message) in [
        ("command = []", "at least the program"),
        ("command = [\"x\"]\nbogus = 1", "`bogus`"),
        ("cwd = \"/\"", "at least the program"),
    ] {
        let config = format!("[sources.rt]\ntype = \"codelia\"\n{options}\n");
        let err = compile(&[SourceText::new("c.toml", config)], &r).expect_err(options);
        assert!(
            err.iter().any(|d| d.message.contains(message)),
            "{options}: {err:?}"
        );
    }
}
