//! `type = "otlp"` end to end with the real binary and the official OpenTelemetry Python
//! packages:
//!
//! - the source: `tests/support/otel-sdk.py` exports a GenAI `chat` span with token
//!   usage, an `execute_tool` span, a log record and a metric point with the SDK's OTLP
//!   exporters, over HTTP protobuf (to `listen`) and over gRPC (to `grpc_listen`), with
//!   the exporters' defaults (only `OTEL_EXPORTER_OTLP_ENDPOINT`,
//!   `OTEL_EXPORTER_OTLP_HEADERS` and the protocol set, the receiver requiring a token);
//!   the signals reach a sidecar's UI client.
//! - the output: signals piped into `patchbay run` go out through three `otlp` outputs
//!   (`http/protobuf`, `http/json` gzipped, `grpc` gzipped) to
//!   `tests/support/otel-receiver.py`, which decodes them with the `opentelemetry-proto`
//!   messages (and grpcio's server for gRPC), an implementation independent of
//!   patchbay's, and every field is checked.
//!
//! `opentelemetry-sdk` and the `opentelemetry-exporter-otlp-proto-http` and `-grpc`
//! exporters (which bring `opentelemetry-proto` and `grpcio`) are installed from PyPI
//! into the venv `target/pyenv` when missing (`tests/support/llm/setup.sh` makes the
//! venv); `PATCHBAY_SKIP_OTEL_SDK=1` skips these tests.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use patchbay_testkit::process::{Killed, free_port};
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python with the OpenTelemetry SDK and its OTLP/HTTP and OTLP/gRPC
/// exporters installed.
fn python() -> std::path::PathBuf {
    let venv = root().join("target/pyenv");
    let py = venv.join("bin/python");
    if !py.exists() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 runs");
        assert!(made.success(), "cannot make the venv {}", venv.display());
    }
    let has = |module: &str| {
        Command::new(&py)
            .args(["-c", &format!("import {module}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let wanted = [
        "opentelemetry.sdk",
        "opentelemetry.exporter.otlp.proto.http",
        "opentelemetry.exporter.otlp.proto.grpc",
        "opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc",
    ];
    if !wanted.iter().all(|m| has(m)) {
        let installed = Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "opentelemetry-sdk",
                "opentelemetry-exporter-otlp-proto-http",
                "opentelemetry-exporter-otlp-proto-grpc",
            ])
            .status()
            .expect("pip runs");
        assert!(installed.success(), "pip install failed");
    }
    py
}

fn skipped() -> bool {
    let skip = std::env::var_os("PATCHBAY_SKIP_OTEL_SDK").is_some();
    if skip {
        eprintln!("skipped: PATCHBAY_SKIP_OTEL_SDK is set");
    }
    skip
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_opentelemetry_sdk_exports_over_http_reach_a_sidecar_ui() {
    if !skipped() {
        sdk_exports_reach_a_sidecar_ui("http/protobuf").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_opentelemetry_sdk_exports_over_grpc_reach_a_sidecar_ui() {
    if !skipped() {
        sdk_exports_reach_a_sidecar_ui("grpc").await;
    }
}

async fn sdk_exports_reach_a_sidecar_ui(protocol: &str) {
    let py = python();
    let dir = ScratchDir::new("otlp-sdk");
    let (ui, http, grpc) = (free_port(), free_port(), free_port());
    let otlp = if protocol == "grpc" { grpc } else { http };
    let config = dir.join("patchbay.toml");
    std::fs::write(
        &config,
        format!(
            "[sources.otel]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{http}\"\ngrpc_listen = \"127.0.0.1:{grpc}\"\ntoken = \"s3cret\"\n\n\
             [outputs.ui]\ntype = \"sidecar\"\ninputs = [\"otel\"]\nlisten = \"127.0.0.1:{ui}\"\n"
        ),
    )
    .expect("write the config");
    let _patchbay = Killed(
        Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .arg("run")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("patchbay.log")).expect("log"))
            .spawn()
            .expect("patchbay runs"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", otlp)).is_err()
        || std::net::TcpStream::connect(("127.0.0.1", ui)).is_err()
    {
        assert!(Instant::now() < deadline, "patchbay did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{ui}/ws"))
        .await
        .expect("the ui connects");
    let (_sink, mut stream) = ws.split();

    let sdk = Command::new(&py)
        .arg(root().join("tests/support/otel-sdk.py"))
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{otlp}"),
        )
        .env("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer s3cret")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        .output()
        .expect("the SDK script runs");
    assert!(
        sdk.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&sdk.stdout),
        String::from_utf8_lossy(&sdk.stderr)
    );

    let mut seen: Vec<Value> = Vec::new();
    let wanted = [
        "tool_call",
        "tool_result",
        "token_usage",
        "completion",
        "otel.log",
        "otel.metric",
    ];
    let _ = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(Ok(message)) = stream.next().await {
            let Message::Text(text) = message else {
                continue;
            };
            if let Ok(signal) = serde_json::from_str::<Value>(text.as_str()) {
                seen.push(signal);
            }
            if wanted.iter().all(|w| seen.iter().any(|s| s["type"] == *w)) {
                return;
            }
        }
    })
    .await;
    let kinds: Vec<&str> = seen.iter().filter_map(|s| s["type"].as_str()).collect();
    for w in wanted {
        assert!(kinds.contains(&w), "no {w} among {kinds:?}");
    }
    let of = |kind: &str| seen.iter().find(|s| s["type"] == kind).expect(kind);
    let usage = &of("token_usage")["payload"];
    assert_eq!(usage["promptTokens"], 123, "{usage}");
    assert_eq!(usage["completionTokens"], 45);
    assert_eq!(usage["model"], "gpt-test");
    assert_eq!(usage["agentId"], "conv-sdk-1");
    let call = &of("tool_call")["payload"];
    assert_eq!(call["toolName"], "shell", "{call}");
    assert_eq!(call["callId"], "call-sdk-1");
    let log = &of("otel.log")["payload"];
    assert_eq!(log["body"], "the agent wrote hi to out.txt", "{log}");
    let metric = &of("otel.metric")["payload"];
    assert_eq!(
        metric["name"], "gen_ai.client.operation.duration",
        "{metric}"
    );
    assert_eq!(metric["kind"], "histogram", "{metric}");
    assert_eq!(metric["count"], 1, "{metric}");
    assert_eq!(metric["sum"], 1.5, "{metric}");
    assert!(seen.iter().all(|s| s["source"] == "otlp:otel"));
}

/// The signals piped into `patchbay run`: a task, a failed tool call made in it, and the
/// task's completion, all of one run (`correlationId`).
const SIGNALS: &str = r#"{"id":"sig-1","type":"task_dispatch","timestamp":1700000000000,"source":"test:feed","correlationId":"run-1","payload":{"taskId":"t1","from":"user","to":"coder","description":"fix it"}}
{"id":"sig-2","type":"tool_call","timestamp":1700000001000,"source":"test:feed","correlationId":"run-1","metadata":{"host":"box"},"payload":{"toolName":"Bash","agentId":"s1","callId":"c1","input":{"command":"ls"}}}
{"id":"sig-3","type":"tool_result","timestamp":1700000003000,"source":"test:feed","correlationId":"run-1","payload":{"toolName":"Bash","agentId":"s1","callId":"c1","success":false,"output":{"error":"exit 1"}}}
{"id":"sig-4","type":"completion","timestamp":1700000004000,"source":"test:feed","correlationId":"run-1","payload":{"taskId":"t1","success":true,"result":"done"}}
"#;

#[test]
fn the_otlp_output_is_read_by_the_official_messages_in_each_protocol() {
    use std::io::{BufRead as _, Write as _};
    use std::sync::{Arc, Mutex};

    if skipped() {
        return;
    }
    let py = python();
    let dir = ScratchDir::new("otlp-output");
    let (http, grpc) = (free_port(), free_port());
    let mut receiver = Killed(
        Command::new(&py)
            .arg(root().join("tests/support/otel-receiver.py"))
            .arg(http.to_string())
            .arg(grpc.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("receiver.log")).expect("log"))
            .spawn()
            .expect("the receiver runs"),
    );
    let lines: Arc<Mutex<Vec<Value>>> = Arc::default();
    let stdout = receiver.0.stdout.take().expect("its stdout");
    std::thread::spawn({
        let lines = Arc::clone(&lines);
        move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    lines.lock().unwrap().push(v);
                }
            }
        }
    });
    let wait_for = |what: &str, done: &dyn Fn(&[Value]) -> bool| {
        // A guard, not a timing.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(&lines.lock().unwrap()) {
            assert!(
                Instant::now() < deadline,
                "{what}: {:?}\n{}",
                lines.lock().unwrap(),
                std::fs::read_to_string(dir.join("receiver.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for("the receiver is not ready", &|l| {
        l.iter().any(|v| v == "ready")
    });

    let config = dir.join("patchbay.toml");
    std::fs::write(
        &config,
        format!(
            "[sources.feed]\ntype = \"stdin\"\n\n\
             [outputs.pb]\ntype = \"otlp\"\ninputs = [\"feed\"]\nendpoint = \"http://127.0.0.1:{http}\"\n\
             service_name = \"via-http/protobuf\"\nheaders = {{ Authorization = \"Bearer t0k\" }}\n\n\
             [outputs.json]\ntype = \"otlp\"\ninputs = [\"feed\"]\nendpoint = \"http://127.0.0.1:{http}\"\n\
             protocol = \"http/json\"\ngzip = true\nservice_name = \"via-http/json\"\n\n\
             [outputs.grpc]\ntype = \"otlp\"\ninputs = [\"feed\"]\nendpoint = \"http://127.0.0.1:{grpc}\"\n\
             protocol = \"grpc\"\ngzip = true\nservice_name = \"via-grpc\"\nheaders = {{ Authorization = \"Bearer t0k\" }}\n"
        ),
    )
    .expect("write the config");
    let mut patchbay = Killed(
        Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .arg("run")
            .arg(&config)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("patchbay.log")).expect("log"))
            .spawn()
            .expect("patchbay runs"),
    );
    let mut stdin = patchbay.0.stdin.take().expect("its stdin");
    stdin
        .write_all(SIGNALS.as_bytes())
        .expect("write the signals");
    drop(stdin);
    // Its one source ended: the graph drains its outputs and patchbay exits.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = patchbay.0.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "patchbay did not end");
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(dir.join("patchbay.log")).unwrap_or_default();
    assert!(status.success(), "{log}");

    let transports = ["http/protobuf", "http/json", "grpc"];
    let items = |lines: &[Value], transport: &str, kind: &str| -> Vec<Value> {
        lines
            .iter()
            .filter(|l| l["transport"] == transport && l["kind"] == kind)
            .flat_map(|l| l["items"].as_array().cloned().unwrap_or_default())
            .collect()
    };
    wait_for("not every export arrived", &|l| {
        transports
            .iter()
            .all(|t| items(l, t, "logs").len() == 4 && items(l, t, "traces").len() == 2)
    });
    let lines = lines.lock().unwrap().clone();
    assert!(
        !lines.iter().any(|l| l.get("error").is_some()),
        "a body did not parse: {lines:?}"
    );

    let mut normalized = Vec::new();
    for transport in transports {
        let requests: Vec<&Value> = lines
            .iter()
            .filter(|l| l["transport"] == transport)
            .collect();
        for r in &requests {
            match transport {
                "http/protobuf" => {
                    assert_eq!(r["contentType"], "application/x-protobuf", "{r}");
                    assert_eq!(r["encoding"], "", "{r}");
                    assert_eq!(r["authorization"], "Bearer t0k", "{r}");
                }
                "http/json" => {
                    assert_eq!(r["contentType"], "application/json", "{r}");
                    assert_eq!(r["encoding"], "gzip", "{r}");
                    assert_eq!(r["authorization"], Value::Null, "{r}");
                }
                // (grpcio inflates the gzipped message itself and keeps `grpc-encoding`
                // from the metadata it shows.)
                _ => assert_eq!(r["authorization"], "Bearer t0k", "{r}"),
            }
        }
        let records = items(&lines, transport, "logs");
        let spans = items(&lines, transport, "traces");
        let names: Vec<&str> = records
            .iter()
            .filter_map(|r| r["eventName"].as_str())
            .collect();
        assert_eq!(
            names,
            ["task_dispatch", "tool_call", "tool_result", "completion"],
            "{transport}"
        );
        for (n, r) in records.iter().enumerate() {
            assert_eq!(r["service"], format!("via-{transport}"), "{r}");
            assert_eq!(r["scope"], "patchbay", "{r}");
            assert_eq!(r["severity"], 9, "{r}");
            assert_eq!(r["attributes"]["event.name"], r["eventName"], "{r}");
            assert_eq!(
                r["attributes"]["signal.id"],
                format!("sig-{}", n + 1),
                "{r}"
            );
            assert_eq!(r["attributes"]["signal.source"], "test:feed", "{r}");
            assert_eq!(r["attributes"]["signal.correlation_id"], "run-1", "{r}");
        }
        let call = &records[1];
        assert_eq!(call["time"], json!(1_700_000_001_000_000_000u64), "{call}");
        assert_eq!(
            call["body"],
            json!({"toolName": "Bash", "agentId": "s1", "callId": "c1", "input": {"command": "ls"}}),
            "{call}"
        );
        assert_eq!(call["attributes"]["gen_ai.agent.id"], "s1", "{call}");
        assert_eq!(call["attributes"]["session.id"], "s1", "{call}");
        assert_eq!(
            call["attributes"]["patchbay.metadata.host"], "box",
            "{call}"
        );
        assert_eq!(records[2]["body"]["success"], false);

        let span = |name: &str| {
            spans
                .iter()
                .find(|s| s["name"] == name)
                .unwrap_or_else(|| panic!("{transport}: no {name} in {spans:?}"))
        };
        let tool = span("execute_tool Bash");
        let agent = span("invoke_agent coder");
        for s in [tool, agent] {
            assert_eq!(s["service"], format!("via-{transport}"), "{s}");
            assert_eq!(s["kind"], 1, "INTERNAL: {s}");
            assert_eq!(s["traceId"].as_str().map(str::len), Some(32), "{s}");
            assert_eq!(s["spanId"].as_str().map(str::len), Some(16), "{s}");
            // One run, one trace: the records carry it too.
            assert_eq!(s["traceId"], call["traceId"], "{s}");
        }
        assert_eq!(
            tool["parentSpanId"], agent["spanId"],
            "the call is made in the task"
        );
        assert_eq!(agent["parentSpanId"], "", "{agent}");
        assert_eq!(tool["spanId"], call["spanId"]);
        assert_eq!(tool["spanId"], records[2]["spanId"]);
        assert_eq!(agent["spanId"], records[0]["spanId"]);
        assert_eq!(agent["spanId"], records[3]["spanId"]);
        assert_eq!(tool["status"], 2, "ERROR: {tool}");
        assert_eq!(tool["message"], "exit 1");
        assert_eq!(
            tool["end"].as_u64().unwrap() - tool["start"].as_u64().unwrap(),
            2_000_000_000
        );
        let attrs = &tool["attributes"];
        assert_eq!(attrs["gen_ai.operation.name"], "execute_tool", "{attrs}");
        assert_eq!(attrs["gen_ai.tool.name"], "Bash");
        assert_eq!(attrs["gen_ai.tool.call.id"], "c1");
        assert_eq!(attrs["gen_ai.tool.call.arguments"], r#"{"command":"ls"}"#);
        assert_eq!(attrs["gen_ai.tool.call.result"], r#"{"error":"exit 1"}"#);
        assert_eq!(attrs["gen_ai.agent.id"], "s1");
        assert_eq!(attrs["error.type"], "tool_error");
        let attrs = &agent["attributes"];
        assert_eq!(attrs["gen_ai.operation.name"], "invoke_agent", "{attrs}");
        assert_eq!(attrs["gen_ai.agent.id"], "coder");
        assert_eq!(attrs["gen_ai.agent.description"], "fix it");
        assert_eq!(attrs["patchbay.task.id"], "t1");
        assert_eq!(attrs["patchbay.task.result"], "done");
        assert_eq!(agent["status"], 0);

        // What differs between transports is the service name alone.
        let mut records = records.clone();
        let mut spans = spans.clone();
        for item in records.iter_mut().chain(spans.iter_mut()) {
            item["service"] = Value::Null;
        }
        normalized.push(json!({"records": records, "spans": spans}));
    }
    assert_eq!(normalized[0], normalized[1], "http/protobuf and http/json");
    assert_eq!(normalized[0], normalized[2], "http/protobuf and grpc");
}
