//! `type = "otlp"` end to end with the real binary and the official OpenTelemetry Python
//! SDK: `tests/support/otel-sdk.py` exports a GenAI `chat` span with token usage, an
//! `execute_tool` span and a log record over OTLP/HTTP protobuf, with the exporters'
//! defaults (only `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_EXPORTER_OTLP_HEADERS` set, the
//! receiver requiring a token); the signals reach a sidecar's UI client.
//!
//! `opentelemetry-sdk` and `opentelemetry-exporter-otlp-proto-http` are installed from
//! PyPI into the venv `target/pyenv` when missing (`tests/support/llm/setup.sh` makes
//! the venv); `PATCHBAY_SKIP_OTEL_SDK=1` skips the test.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use patchbay_testkit::process::{Killed, free_port};
use patchbay_testkit::scratch::ScratchDir;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python with the OpenTelemetry SDK and OTLP/HTTP exporter installed.
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
    if !has("opentelemetry.sdk") || !has("opentelemetry.exporter.otlp.proto.http") {
        let installed = Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "opentelemetry-sdk",
                "opentelemetry-exporter-otlp-proto-http",
            ])
            .status()
            .expect("pip runs");
        assert!(installed.success(), "pip install failed");
    }
    py
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_opentelemetry_sdk_exports_reach_a_sidecar_ui() {
    if std::env::var_os("PATCHBAY_SKIP_OTEL_SDK").is_some() {
        eprintln!("skipped: PATCHBAY_SKIP_OTEL_SDK is set");
        return;
    }
    let py = python();
    let dir = ScratchDir::new("otlp-sdk");
    let (ui, otlp) = (free_port(), free_port());
    let config = dir.join("patchbay.toml");
    std::fs::write(
        &config,
        format!(
            "[sources.otel]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{otlp}\"\ntoken = \"s3cret\"\n\n\
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
    assert!(seen.iter().all(|s| s["source"] == "otlp:otel"));
}
