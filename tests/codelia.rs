//! Codelia end to end with the real binary and a stand-in runtime
//! (`tests/support/codelia_standin.py`) that replays recordings of the real runtime
//! (`tests/fixtures/codelia/`):
//!
//! - `patchbay wrap --protocol codelia --to URL -- python3 standin …` between this test
//!   (playing the UI) and the stand-in leaves both byte streams identical, exits with
//!   the runtime's code, and publishes the decoded signals to `POST URL/signal` (a tiny
//!   server here stands in for the sidecar);
//! - `type = "codelia"` under `[outputs]`, fed control signals on patchbay's stdin,
//!   answers a recorded `ui.confirm.request` from `control.answer` and cancels a run
//!   with `run.cancel`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use patchbay_testkit::process::Killed;
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};
use tokio::sync::mpsc;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
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

/// Reads lines on a thread, so that the test can wait for them with a timeout.
fn line_reader(input: impl Read + Send + 'static) -> std_mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = std_mpsc::channel();
    std::thread::spawn(move || {
        let mut input = BufReader::new(input);
        loop {
            let mut line = Vec::new();
            match input.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// A stand-in for a sidecar's `POST /signal`: each body, parsed.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrap_is_transparent_and_publishes_signals() {
    let (url, mut posts) = sidecar().await;
    let dir = ScratchDir::new("codelia-wrap");
    let (log_in, log_out) = (dir.join("in.bin"), dir.join("out.bin"));
    let name = "codelia-run-mock-toolcalls.ndjson";
    let mut child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args([
            "wrap",
            "--protocol",
            "codelia",
            "--to",
            &url,
            "--",
            "python3",
            &standin(),
            &recording(name),
        ])
        .args([
            "--log-in",
            &log_in.display().to_string(),
            "--log-out",
            &log_out.display().to_string(),
        ])
        .args(["--exit-code", "3"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("patchbay wrap starts");
    let mut ui_in = child.stdin.take().expect("stdin");
    let from_runtime = line_reader(child.stdout.take().expect("stdout"));
    let stderr = line_reader(child.stderr.take().expect("stderr"));
    let mut child = Killed(child);

    let (mut sent, mut received) = (Vec::new(), Vec::new());
    for (dir, msg) in lines(name) {
        match dir.as_str() {
            "out" => {
                let line = format!("{msg}\n");
                ui_in.write_all(line.as_bytes()).expect("write to wrap");
                ui_in.flush().expect("flush");
                sent.extend_from_slice(line.as_bytes());
            }
            "in" => {
                let line = from_runtime
                    .recv_timeout(Duration::from_secs(20))
                    .expect("the runtime's line");
                let got: Value = serde_json::from_slice(&line).expect("JSON");
                assert_eq!(got, msg);
                received.extend_from_slice(&line);
            }
            _ => {}
        }
    }
    drop(ui_in);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait") {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "wrap did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(3), "the runtime's exit code");
    assert_eq!(
        std::fs::read(&log_in).expect("log"),
        sent,
        "the runtime got exactly what the UI sent"
    );
    assert_eq!(
        std::fs::read(&log_out).expect("log"),
        received,
        "the UI got exactly what the runtime sent"
    );
    let stderr: Vec<String> = stderr
        .try_iter()
        .map(|l| String::from_utf8_lossy(&l).into_owned())
        .collect();
    assert!(
        stderr
            .iter()
            .any(|l| l.contains("[runtime] runtime started")),
        "stderr passes through: {stderr:?}"
    );

    // The runtime → UI messages as signals: every `in` line decodes to one or more.
    let mut got: Vec<Value> = Vec::new();
    while let Ok(batch) = posts.try_recv() {
        got.extend(batch.as_array().cloned().unwrap_or_default());
    }
    let kinds: Vec<&str> = got
        .iter()
        .map(|s| s["type"].as_str().unwrap_or_default())
        .collect();
    for kind in [
        "codelia.response",
        "agent_state_change",
        "tool_call",
        "tool_result",
        "codelia.request",
        "completion",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    assert_eq!(kinds.iter().filter(|k| **k == "completion").count(), 2);
    assert!(got.iter().all(|s| s["source"] == "codelia:wrap"));
    let confirm = got
        .iter()
        .find(|s| s["type"] == "codelia.request")
        .expect("request");
    assert_eq!(confirm["payload"]["method"], "ui.confirm.request");
}

/// `patchbay run` with control signals on stdin going to a `codelia` output whose
/// signals come out on stdout.
struct Run {
    stdin: std::process::ChildStdin,
    signals: std_mpsc::Receiver<Vec<u8>>,
    log_in: PathBuf,
    _child: Killed,
    /// After the child: fields drop in order, so the stand-in has stopped writing its log
    /// when the directory goes.
    _dir: ScratchDir,
}

fn run_codelia(name: &str) -> Run {
    let dir = ScratchDir::new("codelia-run");
    let log_in = dir.join("in.bin");
    let config = dir.join("pipeline.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[sources.ctl]
type = "stdin"

[outputs.rt]
type = "codelia"
inputs = ["ctl"]
command = ["python3", "{standin}", "{recording}", "--log-in", "{log_in}"]

[outputs.out]
type = "stdout"
inputs = ["rt.inbound"]
format = "json"
"#,
            standin = standin(),
            recording = recording(name),
            log_in = log_in.display(),
        ),
    )
    .expect("config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["run", &config.display().to_string()])
        .env("PATCHBAY_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("patchbay run starts");
    let stdin = child.stdin.take().expect("stdin");
    let signals = line_reader(child.stdout.take().expect("stdout"));
    Run {
        stdin,
        signals,
        log_in,
        _child: Killed(child),
        _dir: dir,
    }
}

impl Run {
    fn send(&mut self, kind: &str, payload: Value) {
        let line = format!("{}\n", json!({"type": kind, "payload": payload}));
        self.stdin.write_all(line.as_bytes()).expect("write");
        self.stdin.flush().expect("flush");
    }

    fn wait_for(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            let line = self
                .signals
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("waiting for {what}"));
            let s: Value = serde_json::from_slice(&line).expect("a JSON signal");
            if pred(&s) {
                return s;
            }
        }
    }

    /// What the stand-in runtime received, one message per line.
    fn runtime_got(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log_in)
            .expect("log")
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect()
    }
}

#[test]
fn the_codelia_output_answers_a_confirm_request() {
    let mut run = run_codelia("codelia-run-mock-toolcalls.ndjson");
    run.wait_for("initialize answer", |s| s["type"] == "codelia.response");
    run.send(
        "prompt",
        json!({"text": "CALLTOOL:read:{\"file_path\":\"README.md\"}"}),
    );
    run.wait_for("first completion", |s| s["type"] == "completion");
    run.send(
        "prompt",
        json!({"text": "CALLTOOL:shell:{\"command\":\"echo hi-from-shell\"}"}),
    );
    let request = run.wait_for("confirm request", |s| s["type"] == "codelia.request");
    assert_eq!(request["payload"]["promptId"], "ui_1");
    run.send("control.answer", json!({"promptId": "ui_1", "value": true}));
    let done = run.wait_for("second completion", |s| s["type"] == "completion");
    assert_eq!(
        done["payload"]["taskId"],
        "24a11f48-d351-4388-b892-3275a5920439"
    );
    let got = run.runtime_got();
    assert_eq!(got[0]["method"], "initialize");
    assert_eq!(
        got[3],
        json!({"jsonrpc": "2.0", "id": "ui_1", "result": {"ok": true}})
    );
}

#[test]
fn the_codelia_output_cancels_a_run() {
    let mut run = run_codelia("codelia-run-mock-cancel.ndjson");
    run.wait_for("initialize answer", |s| s["type"] == "codelia.response");
    run.send("prompt", json!({"text": "SLOW please"}));
    run.wait_for("running", |s| {
        s["type"] == "agent_state_change" && s["payload"]["to"] == "acting"
    });
    run.send("control.cancel", json!({"reason": "probe cancel"}));
    let idle = run.wait_for("cancelled", |s| {
        s["type"] == "agent_state_change" && s["payload"]["to"] == "idle"
    });
    assert_eq!(
        idle["correlationId"],
        "c3374cef-7952-43d7-afb7-77fbf37096c1"
    );
    let got = run.runtime_got();
    assert_eq!(
        got[2],
        json!({"jsonrpc": "2.0", "id": "3", "method": "run.cancel",
               "params": {"run_id": "c3374cef-7952-43d7-afb7-77fbf37096c1", "reason": "probe cancel"}})
    );
}

/// The same relay publishing to a real sidecar (`patchbay run` with `type = "sidecar"`),
/// whose `ui.inbound` is logged on its stdout.
#[test]
fn wrap_publishes_to_a_running_sidecar() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let dir = ScratchDir::new("codelia-sidecar");
    let config = dir.join("sidecar.toml");
    std::fs::write(
        &config,
        format!(
            "[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"ui.inbound\"]\nlisten = \"127.0.0.1:{port}\"\n\n\
             [outputs.log]\ntype = \"stdout\"\ninputs = [\"ui.inbound\"]\nformat = \"json\"\n"
        ),
    )
    .expect("config");
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["run", &config.display().to_string()])
        .env("PATCHBAY_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("patchbay run starts");
    let logged = line_reader(daemon.stdout.take().expect("stdout"));
    let _daemon = Killed(daemon);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sidecar did not open its port"
        );
        std::thread::sleep(Duration::from_millis(25));
    }

    let name = "codelia-run-mock-cancel.ndjson";
    let mut wrap = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args([
            "wrap",
            "--protocol",
            "codelia",
            "--to",
            &format!("http://127.0.0.1:{port}"),
        ])
        .args(["--", "python3", &standin(), &recording(name)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("patchbay wrap starts");
    let mut ui_in = wrap.stdin.take().expect("stdin");
    let from_runtime = line_reader(wrap.stdout.take().expect("stdout"));
    let mut wrap = Killed(wrap);
    for (dir, msg) in lines(name) {
        match dir.as_str() {
            "out" => {
                ui_in
                    .write_all(format!("{msg}\n").as_bytes())
                    .expect("write");
                ui_in.flush().expect("flush");
            }
            "in" => {
                let line = from_runtime
                    .recv_timeout(Duration::from_secs(20))
                    .expect("the runtime's line");
                assert_eq!(serde_json::from_slice::<Value>(&line).expect("JSON"), msg);
            }
            _ => {}
        }
    }
    drop(ui_in);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while wrap.0.try_wait().expect("wait").is_none() {
        assert!(std::time::Instant::now() < deadline, "wrap did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The sidecar received the run: its start, its cancellation, the refused second cancel.
    let mut kinds = Vec::new();
    while !kinds
        .iter()
        .any(|(k, _): &(String, Value)| k == "codelia.response-error")
    {
        let line = logged
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("signals reach the sidecar: {kinds:?}"));
        let s: Value = serde_json::from_slice(&line).expect("a JSON signal");
        assert_eq!(s["source"], "codelia:wrap");
        let kind = match (s["type"].as_str(), s["payload"].get("error")) {
            (Some("codelia.response"), Some(_)) => "codelia.response-error".to_owned(),
            (Some(k), _) => k.to_owned(),
            (None, _) => String::new(),
        };
        kinds.push((kind, s["payload"]["to"].clone()));
    }
    assert!(
        kinds.contains(&("agent_state_change".into(), json!("acting"))),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&("agent_state_change".into(), json!("idle"))),
        "{kinds:?}"
    );
}
