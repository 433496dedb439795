//! `type = "claude_code"` and `patchbay hooks` end to end with the REAL Claude Code CLI.
//!
//! The npm package `@anthropic-ai/claude-code` is installed into `target/claude-code/` by
//! `tests/support/claude-code-install.sh` (run by the tests when missing;
//! `PATCHBAY_SKIP_CLAUDE_CODE=1` skips them). The CLI runs headless (`-p`, a temporary
//! HOME and TMPDIR, an API key, no non-essential traffic) against a scripted Anthropic
//! Messages server written here: it streams a `tool_use` of Bash first, then text once
//! the conversation has the tool's result, and records what the CLI sent back. Hooks are
//! written into a temporary project by `patchbay hooks install`; a WebSocket client of the
//! sidecar plays the UI.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::post;
use futures_util::{SinkExt, StreamExt};
use patchbay_testkit::process::{Killed, free_port};
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The installed CLI, or `None` when the tests are skipped.
fn claude_binary() -> Option<PathBuf> {
    if std::env::var_os("PATCHBAY_SKIP_CLAUDE_CODE").is_some() {
        return None;
    }
    let status = Command::new("bash")
        .arg(root().join("tests/support/claude-code-install.sh"))
        .stdout(Stdio::null())
        .status()
        .expect("run the install script");
    assert!(
        status.success(),
        "installing Claude Code failed (PATCHBAY_SKIP_CLAUDE_CODE=1 skips these tests)"
    );
    Some(root().join("target/claude-code/node_modules/.bin/claude"))
}

/// What the CLI sent back as tool results (`is_error`, content).
type ToolResults = Arc<Mutex<Vec<(bool, String)>>>;

/// The scripted Anthropic Messages API: a Bash `tool_use` for a conversation without a
/// tool result, text after one.
async fn start_model() -> (SocketAddr, ToolResults) {
    let results: ToolResults = Arc::default();
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .with_state(Arc::clone(&results));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, results)
}

fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

async fn messages(State(results): State<ToolResults>, body: String) -> impl IntoResponse {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let mut tool_result = None;
    for message in request["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                let content = match &block["content"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                tool_result = Some((block["is_error"] == true, content));
            }
        }
    }
    let wants_tool = tool_result.is_none() && body.contains("please run the command");
    let id = format!("msg_{}", patchbay_signal::next_id());
    let start = json!({"type": "message_start", "message": {
        "id": id, "type": "message", "role": "assistant", "model": "claude-scripted",
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 120, "output_tokens": 1}}});
    let (block, delta, stop) = if wants_tool {
        let input = json!({"command": "echo hello-from-tool", "description": "say hello"});
        (
            json!({"type": "tool_use", "id": format!("toolu_{}", patchbay_signal::next_id()), "name": "Bash", "input": {}}),
            json!({"type": "input_json_delta", "partial_json": input.to_string()}),
            "tool_use",
        )
    } else {
        let text = match &tool_result {
            Some((is_error, content)) => {
                results.lock().unwrap().push((*is_error, content.clone()));
                format!("Final answer. is_error={is_error}. Tool result: {content}")
            }
            None => "ok".to_owned(),
        };
        (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
            "end_turn",
        )
    };
    let body = sse(&[
        start,
        json!({"type": "content_block_start", "index": 0, "content_block": block}),
        json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": 17}}),
        json!({"type": "message_stop"}),
    ]);
    ([("content-type", "text/event-stream")], body)
}

/// `patchbay run` on a config with a sidecar `ui` and a `claude_code` output `claude`.
fn start_patchbay(dir: &ScratchDir, gate: &str) -> (Killed, u16, u16, PathBuf) {
    let (ui, hooks) = (free_port(), free_port());
    let config = dir.join("patchbay.toml");
    std::fs::write(
        &config,
        format!(
            "[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"claude.inbound\"]\nlisten = \"127.0.0.1:{ui}\"\n\n\
             [outputs.claude]\ntype = \"claude_code\"\ninputs = [\"ui.inbound\"]\nlisten = \"127.0.0.1:{hooks}\"\n{gate}\n"
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .arg("run")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("patchbay.log")).unwrap())
        .spawn()
        .expect("patchbay runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", hooks)).is_err()
        || std::net::TcpStream::connect(("127.0.0.1", ui)).is_err()
    {
        assert!(Instant::now() < deadline, "patchbay did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Killed(child), ui, hooks, config)
}

fn patchbay(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(args)
        .output()
        .expect("patchbay runs");
    assert!(
        out.status.success(),
        "patchbay {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the CLI headless in `project`; returns its exit status and stream-json output.
fn run_claude(claude: &Path, project: &Path, model: SocketAddr, extra: &[&str]) -> (bool, String) {
    run_claude_with(claude, project, model, extra, &[])
}

/// [`run_claude`] with `env` set on top (an empty value removes the variable).
fn run_claude_with(
    claude: &Path,
    project: &Path,
    model: SocketAddr,
    extra: &[&str],
    env: &[(&str, String)],
) -> (bool, String) {
    let home = ScratchDir::new("claude-home");
    let tmp = ScratchDir::new("claude-tmp");
    let mut command = Command::new(claude);
    command
        .current_dir(project)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home.path())
        .env("TMPDIR", tmp.path())
        .env("TERM", "dumb")
        .env("SHELL", "/bin/bash")
        .env("ANTHROPIC_BASE_URL", format!("http://{model}"))
        .env("ANTHROPIC_API_KEY", "sk-test-local")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .args([
            "-p",
            "please run the command",
            "--output-format",
            "stream-json",
            "--verbose",
            "--allowedTools",
            "Bash",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        if value.is_empty() {
            command.env_remove(key);
        } else {
            command.env(key, value);
        }
    }
    let mut child = command.spawn().expect("claude runs");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(_status) = child.try_wait().unwrap() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("claude did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        eprintln!("claude stderr: {}", String::from_utf8_lossy(&out.stderr));
    }
    (out.status.success(), text)
}

/// A sidecar client: collects every signal; answers approval requests with `answer`.
async fn ui(port: u16, answer: Arc<Mutex<&'static str>>) -> Arc<Mutex<Vec<Value>>> {
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}/ws"))
        .await
        .expect("ui connects");
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let kept = Arc::clone(&seen);
    tokio::spawn(async move {
        let (mut sink, mut stream) = ws.split();
        while let Some(Ok(message)) = stream.next().await {
            let Message::Text(text) = message else {
                continue;
            };
            let Ok(signal) = serde_json::from_str::<Value>(text.as_str()) else {
                continue;
            };
            if signal["type"] == "approval.requested" {
                let value = *answer.lock().unwrap();
                let reply = json!({"type": "control.answer",
                    "payload": {"promptId": signal["payload"]["promptId"], "value": value}});
                sink.send(Message::text(reply.to_string())).await.unwrap();
            }
            kept.lock().unwrap().push(signal);
        }
    });
    seen
}

fn kinds(seen: &Mutex<Vec<Value>>) -> Vec<String> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|s| {
            s["source"]
                .as_str()
                .is_some_and(|s| s.starts_with("claude_code:"))
        })
        .map(|s| {
            let kind = s["type"].as_str().unwrap_or_default();
            match kind {
                "tool_call" | "tool_result" => format!(
                    "{kind} {}",
                    s["payload"]["toolName"].as_str().unwrap_or_default()
                ),
                _ => kind.to_owned(),
            }
        })
        .collect()
}

/// Waits until `kinds` holds `last` (signals may trail the CLI's exit a little).
async fn wait_for(seen: &Mutex<Vec<Value>>, last: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = kinds(seen);
        if now.iter().any(|k| k == last) || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether `wanted` appear in `all` in this order (others may come between).
fn in_order(all: &[String], wanted: &[&str]) -> bool {
    let mut it = all.iter();
    wanted.iter().all(|w| it.any(|k| k == w))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_a_tool_call_appears_on_a_ui() {
    let Some(claude) = claude_binary() else {
        return;
    };
    let dir = ScratchDir::new("claude-code-e2e");
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let (model, results) = start_model().await;
    let (_patchbay, ui_port, _hooks, config) = start_patchbay(&dir, "");
    let installed = patchbay(&[
        "hooks",
        "install",
        "--project",
        project.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    assert!(
        installed.contains("installed patchbay's hooks for 16 events"),
        "{installed}"
    );
    let seen = ui(ui_port, Arc::new(Mutex::new("allow"))).await;

    let (ok, stream) = tokio::task::spawn_blocking({
        let (claude, project) = (claude.clone(), project.clone());
        move || run_claude(&claude, &project, model, &[])
    })
    .await
    .unwrap();
    assert!(ok, "{stream}");
    let kinds = wait_for(&seen, "claude_code.session_end").await;
    eprintln!("signals: {kinds:?}");
    assert!(
        in_order(
            &kinds,
            &[
                "task_dispatch",
                "agent_state_change",
                "tool_call Bash",
                "agent_state_change",
                "tool_result Bash",
                "claude_code.tool_batch",
                "claude_code.stop",
                "token_usage",
                "claude_code.session_end",
            ]
        ),
        "{kinds:?}"
    );
    // SessionStart comes through the command hook (`patchbay hooks emit`).
    assert!(
        kinds.iter().any(|k| k == "claude_code.session_start"),
        "{kinds:?}"
    );
    assert_eq!(
        results.lock().unwrap().as_slice(),
        [(false, "hello-from-tool".to_owned())]
    );
    let signals = seen.lock().unwrap().clone();
    for s in &signals {
        patchbay_testkit::assert_schema_valid(s);
    }
    let result = signals.iter().find(|s| s["type"] == "tool_result").unwrap();
    assert_eq!(result["payload"]["success"], true);
    assert_eq!(result["payload"]["output"]["stdout"], "hello-from-tool");
    let usage = signals.iter().find(|s| s["type"] == "token_usage").unwrap();
    assert_eq!(usage["payload"]["model"], "claude-scripted");
    assert_eq!(usage["payload"]["completionTokens"], 17);
    let status = patchbay(&["hooks", "status", "--project", project.to_str().unwrap()]);
    assert!(status.contains("answers"), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_call_runs_only_when_a_ui_allows_it() {
    let Some(claude) = claude_binary() else {
        return;
    };
    let dir = ScratchDir::new("claude-code-gate");
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let (model, results) = start_model().await;
    let gate = "gate = { tools = [\"Bash\"], timeout_ms = 20000, default = \"ask\" }";
    let (_patchbay, ui_port, _hooks, config) = start_patchbay(&dir, gate);
    let installed = patchbay(&[
        "hooks",
        "install",
        "--gate",
        "--project",
        project.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    assert!(installed.contains("wait up to 25 s"), "{installed}");
    let answer = Arc::new(Mutex::new("deny"));
    let seen = ui(ui_port, Arc::clone(&answer)).await;

    let run = || {
        let (claude, project) = (claude.clone(), project.clone());
        tokio::task::spawn_blocking(move || run_claude(&claude, &project, model, &[]))
    };
    let (ok, stream) = run().await.unwrap();
    assert!(ok, "{stream}");
    {
        let results = results.lock().unwrap();
        assert_eq!(results.len(), 1);
        assert!(
            results[0].0,
            "the denial is an error tool_result: {results:?}"
        );
        assert!(results[0].1.contains("patchbay: denied by"), "{results:?}");
    }
    let kinds = wait_for(&seen, "claude_code.session_end").await;
    assert!(
        in_order(
            &kinds,
            &["tool_call Bash", "approval.requested", "approval.decided"]
        ),
        "{kinds:?}"
    );
    assert!(
        !kinds.iter().any(|k| k == "tool_result Bash"),
        "the tool did not run: {kinds:?}"
    );

    *answer.lock().unwrap() = "allow";
    seen.lock().unwrap().clear();
    let (ok, stream) = run().await.unwrap();
    assert!(ok, "{stream}");
    assert_eq!(
        results.lock().unwrap()[1],
        (false, "hello-from-tool".to_owned())
    );
    let kinds = wait_for(&seen, "claude_code.session_end").await;
    assert!(
        in_order(
            &kinds,
            &["approval.requested", "approval.decided", "tool_result Bash"]
        ),
        "{kinds:?}"
    );
    let signals = seen.lock().unwrap().clone();
    let decided = signals
        .iter()
        .find(|s| s["type"] == "approval.decided")
        .unwrap();
    assert_eq!(decided["payload"]["value"], "allow");
    assert_eq!(decided["payload"]["by"], "sidecar:ui");
    let waiting = signals
        .iter()
        .find(|s| s["type"] == "agent_state_change" && s["payload"]["to"] == "waiting")
        .unwrap();
    assert_eq!(waiting["payload"]["from"], "acting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_patchbay_down_claude_code_runs_as_usual() {
    let Some(claude) = claude_binary() else {
        return;
    };
    let dir = ScratchDir::new("claude-code-down");
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let (model, results) = start_model().await;
    // Nothing listens there.
    let url = format!("http://127.0.0.1:{}/hook", free_port());
    patchbay(&[
        "hooks",
        "install",
        "--project",
        project.to_str().unwrap(),
        "--url",
        &url,
    ]);
    let (ok, stream) = tokio::task::spawn_blocking({
        let (claude, project) = (claude.clone(), project.clone());
        move || run_claude(&claude, &project, model, &["--include-hook-events"])
    })
    .await
    .unwrap();
    assert!(ok, "{stream}");
    assert_eq!(
        results.lock().unwrap().as_slice(),
        [(false, "hello-from-tool".to_owned())]
    );
    // The command hook (`patchbay hooks emit`) for SessionStart exited 0.
    let start = stream
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["subtype"] == "hook_response" && e["hook_event"] == "SessionStart")
        .unwrap_or_else(|| panic!("no SessionStart hook response in {stream}"));
    assert_eq!(start["exit_code"], 0, "{start}");
    assert_eq!(start["outcome"], "success", "{start}");
}

/// Claude Code's own OpenTelemetry export (`CLAUDE_CODE_ENABLE_TELEMETRY=1`) into an `otlp`
/// source, over OTLP/HTTP JSON and protobuf (to `listen`) and OTLP/gRPC (to
/// `grpc_listen`): its prompt, tool result and token usage arrive as signals whose
/// `agentId` is the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn its_opentelemetry_export_arrives_as_signals() {
    let Some(claude) = claude_binary() else {
        return;
    };
    let dir = ScratchDir::new("claude-code-otlp");
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let (model, _) = start_model().await;
    let (ui_port, otlp_port, grpc_port) = (free_port(), free_port(), free_port());
    let config = dir.join("otel.toml");
    std::fs::write(
        &config,
        format!(
            "[sources.otel]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{otlp_port}\"\ngrpc_listen = \"127.0.0.1:{grpc_port}\"\n\n\
             [outputs.ui]\ntype = \"sidecar\"\ninputs = [\"otel\"]\nlisten = \"127.0.0.1:{ui_port}\"\n"
        ),
    )
    .unwrap();
    let _patchbay = Killed(
        Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .arg("run")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("patchbay.log")).unwrap())
            .spawn()
            .expect("patchbay runs"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", ui_port)).is_err()
        || std::net::TcpStream::connect(("127.0.0.1", otlp_port)).is_err()
        || std::net::TcpStream::connect(("127.0.0.1", grpc_port)).is_err()
    {
        assert!(Instant::now() < deadline, "patchbay did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen = ui(ui_port, Arc::new(Mutex::new("allow"))).await;
    for protocol in ["http/json", "http/protobuf", "grpc"] {
        seen.lock().unwrap().clear();
        let port = if protocol == "grpc" {
            grpc_port
        } else {
            otlp_port
        };
        let env = [
            ("DISABLE_TELEMETRY", String::new()),
            ("CLAUDE_CODE_ENABLE_TELEMETRY", "1".to_owned()),
            ("OTEL_LOGS_EXPORTER", "otlp".to_owned()),
            ("OTEL_METRICS_EXPORTER", "otlp".to_owned()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.to_owned()),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{port}"),
            ),
            ("OTEL_LOGS_EXPORT_INTERVAL", "1000".to_owned()),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1000".to_owned()),
        ];
        let (ok, stream) = tokio::task::spawn_blocking({
            let (claude, project) = (claude.clone(), project.clone());
            move || run_claude_with(&claude, &project, model, &[], &env)
        })
        .await
        .unwrap();
        assert!(ok, "{stream}");
        let session = stream
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find_map(|v| v["session_id"].as_str().map(str::to_owned))
            .expect("the stream names its session");
        // Claude Code exports at its interval and at exit; a guard, not a timing.
        let deadline = Instant::now() + Duration::from_secs(60);
        let has = |kind: &str| {
            seen.lock()
                .unwrap()
                .iter()
                .any(|s| s["type"] == kind && s["source"] == "otlp:otel")
        };
        while !(has("token_usage") && has("tool_result")) {
            assert!(
                Instant::now() < deadline,
                "{protocol}: no token usage and tool result: {:?}",
                seen.lock()
                    .unwrap()
                    .iter()
                    .map(|s| s["type"].clone())
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let signals = seen.lock().unwrap().clone();
        let usage = signals.iter().find(|s| s["type"] == "token_usage").unwrap();
        assert_eq!(usage["payload"]["agentId"], session.as_str(), "{usage}");
        assert!(
            usage["payload"]["promptTokens"].as_u64().unwrap_or(0) > 0,
            "{usage}"
        );
        let result = signals.iter().find(|s| s["type"] == "tool_result").unwrap();
        assert_eq!(result["payload"]["toolName"], "Bash", "{result}");
    }
}
