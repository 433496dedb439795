//! `type = "codex"` end to end with the REAL Codex CLI.
//!
//! The npm package `@openai/codex` is installed into `target/codex/` by
//! `tests/support/codex-install.sh` (run by the tests when missing; `PATCHBAY_SKIP_CODEX=1`
//! skips them). patchbay starts `codex app-server` with a temporary `CODEX_HOME` whose
//! config points Codex at a scripted Responses API written here: the model asks for the
//! shell (`exec_command`) with the command the prompt names (`Run: COMMAND`), then, once
//! the conversation has the command's output, streams "Done." in four deltas. A WebSocket
//! client of the sidecar plays the UI: it sends the prompt and answers the approval.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// A guard against a hang (nothing is timed).
const GUARD: Duration = Duration::from_secs(120);

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The installed CLI, or `None` when the tests are skipped.
fn codex_binary() -> Option<PathBuf> {
    if std::env::var_os("PATCHBAY_SKIP_CODEX").is_some() {
        return None;
    }
    let status = Command::new("bash")
        .arg(root().join("tests/support/codex-install.sh"))
        .stdout(Stdio::null())
        .status()
        .expect("run the install script");
    assert!(
        status.success(),
        "installing Codex failed (PATCHBAY_SKIP_CODEX=1 skips these tests)"
    );
    Some(root().join("target/codex/node_modules/.bin/codex"))
}

/// The scripted Responses API on a free loopback port.
async fn start_model() -> SocketAddr {
    let app = Router::new()
        .route("/v1/responses", post(responses))
        .with_state(Arc::new(AtomicU64::new(0)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The SSE body of `events` (each an object with its `type`).
fn sse(events: Vec<Value>) -> String {
    events
        .into_iter()
        .enumerate()
        .map(|(n, mut e)| {
            e["sequence_number"] = json!(n);
            format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())
        })
        .collect()
}

/// The text of every user message and function call output in a request's `input`.
fn inputs(body: &Value) -> (Vec<String>, bool) {
    let items = body["input"].as_array().cloned().unwrap_or_default();
    let answered = items
        .last()
        .is_some_and(|i| i["type"] == "function_call_output");
    let texts = items
        .iter()
        .filter(|i| i["role"] == "user")
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(str::to_owned))
        .collect();
    (texts, answered)
}

async fn responses(State(calls): State<Arc<AtomicU64>>, body: String) -> impl IntoResponse {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let n = calls.fetch_add(1, Ordering::Relaxed);
    let id = format!("resp_{n}");
    let usage = json!({"input_tokens": 120, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 17, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 137});
    let created = json!({"type": "response.created", "response": {"id": id, "object": "response",
        "created_at": 1, "status": "in_progress", "model": "fake-model", "output": []}});
    let (texts, answered) = inputs(&body);
    let events = if answered {
        let item = format!("msg_{n}");
        let deltas = ["Done. ", "I ran ", "the ", "command."];
        let text: String = deltas.concat();
        let message = json!({"type": "message", "id": item, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]});
        let mut events = vec![
            created,
            json!({"type": "response.output_item.added", "output_index": 0, "item":
                {"type": "message", "id": item, "role": "assistant", "status": "in_progress", "content": []}}),
            json!({"type": "response.content_part.added", "item_id": item, "output_index": 0,
                "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        ];
        events.extend(deltas.iter().map(|d| {
            json!({"type": "response.output_text.delta", "item_id": item, "output_index": 0,
                "content_index": 0, "delta": d})
        }));
        events.extend([
            json!({"type": "response.output_text.done", "item_id": item, "output_index": 0,
                "content_index": 0, "text": text}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": message}),
            json!({"type": "response.completed", "response": {"id": id, "object": "response",
                "created_at": 1, "status": "completed", "model": "fake-model",
                "output": [message], "usage": usage}}),
        ]);
        events
    } else {
        // The command the (last) prompt names.
        let command = texts
            .iter()
            .rev()
            .find_map(|t| t.split_once("Run: ").map(|(_, c)| c.trim().to_owned()))
            .unwrap_or_else(|| "true".to_owned());
        let args = json!({"cmd": command}).to_string();
        let (item, call) = (format!("fc_{n}"), format!("call_{n}"));
        let done = json!({"type": "function_call", "id": item, "call_id": call,
            "name": "exec_command", "arguments": args, "status": "completed"});
        vec![
            created,
            json!({"type": "response.output_item.added", "output_index": 0, "item":
                {"type": "function_call", "id": item, "call_id": call, "name": "exec_command",
                 "arguments": "", "status": "in_progress"}}),
            json!({"type": "response.function_call_arguments.delta", "item_id": item,
                "output_index": 0, "delta": args}),
            json!({"type": "response.function_call_arguments.done", "item_id": item,
                "output_index": 0, "arguments": args}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": done}),
            json!({"type": "response.completed", "response": {"id": id, "object": "response",
                "created_at": 1, "status": "completed", "model": "fake-model",
                "output": [done], "usage": usage}}),
        ]
    };
    ([("content-type", "text/event-stream")], sse(events))
}

/// A `codex` output named `name` in `work`, with its own `CODEX_HOME` pointing at `model`.
fn codex_component(name: &str, codex: &Path, dir: &ScratchDir, model: SocketAddr) -> String {
    let home = dir.join(format!("{name}-home"));
    let codex_home = home.join("codex");
    let work = dir.join(format!("{name}-work"));
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"fake-model\"\nmodel_provider = \"fake\"\n\n[model_providers.fake]\n\
             name = \"scripted\"\nbase_url = \"http://{model}/v1\"\nwire_api = \"responses\"\n\
             env_key = \"FAKE_API_KEY\"\n"
        ),
    )
    .unwrap();
    format!(
        "[filters.{name}_prompts]\ntype = \"when\"\ninputs = [\"ui.inbound\"]\n\
         when = {{ type = \"prompt\", \"payload.to\" = \"{name}\" }}\n\n\
         [outputs.{name}]\ntype = \"codex\"\ninputs = [\"{name}_prompts\", \"answers\"]\n\
         command = [\"{codex}\", \"app-server\"]\ncwd = \"{work}\"\n\
         env = {{ HOME = \"{home}\", CODEX_HOME = \"{codex_home}\", FAKE_API_KEY = \"dummy\" }}\n\
         approval_policy = \"untrusted\"\nsandbox = \"danger-full-access\"\nmodel = \"fake-model\"\n\
         gate = {{ tools = [\"commandExecution\"], timeout_ms = 120000, default = \"deny\" }}\n\n",
        codex = codex.display(),
        work = work.display(),
        home = home.display(),
        codex_home = codex_home.display(),
    )
}

/// `patchbay run` with the `codex` outputs `names` and a sidecar `ui` fed by them.
fn start_patchbay(
    dir: &ScratchDir,
    codex: &Path,
    model: SocketAddr,
    names: &[&str],
) -> (Killed, u16) {
    let ui = free_port();
    let inbound: Vec<String> = names.iter().map(|n| format!("\"{n}.inbound\"")).collect();
    let mut config = format!(
        "[outputs.ui]\ntype = \"sidecar\"\ninputs = [{}]\nlisten = \"127.0.0.1:{ui}\"\n\n\
         [filters.answers]\ntype = \"when\"\ninputs = [\"ui.inbound\"]\nwhen = {{ type = \"control.answer\" }}\n\n",
        inbound.join(", ")
    );
    for name in names {
        config.push_str(&codex_component(name, codex, dir, model));
    }
    let path = dir.join("patchbay.toml");
    std::fs::write(&path, config).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .arg("run")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("patchbay.log")).unwrap())
        .spawn()
        .expect("patchbay runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", ui)).is_err() {
        assert!(Instant::now() < deadline, "patchbay did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Killed(child), ui)
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A UI on the sidecar: it sends and it reads.
struct Ui {
    ws: Ws,
    seen: Vec<Value>,
}

impl Ui {
    async fn connect(port: u16) -> Ui {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}/ws"))
            .await
            .expect("the sidecar answers");
        Ui {
            ws,
            seen: Vec::new(),
        }
    }

    async fn send(&mut self, signal: Value) {
        self.ws
            .send(Message::text(signal.to_string()))
            .await
            .expect("send");
    }

    /// Reads until a signal `pred` holds for arrives; returns it.
    async fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let found = tokio::time::timeout(GUARD, async {
            loop {
                let Some(Ok(Message::Text(text))) = self.ws.next().await else {
                    panic!("the sidecar closed while waiting for {what}");
                };
                let Ok(signal) = serde_json::from_str::<Value>(text.as_str()) else {
                    continue;
                };
                self.seen.push(signal.clone());
                if pred(&signal) {
                    return signal;
                }
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("no {what}; saw {:#?}", self.kinds()))
    }

    fn kinds(&self) -> Vec<String> {
        self.seen
            .iter()
            .map(|s| s["type"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// A prompt for the `codex` output `component` (a `when` routes it there by `to`).
fn prompt(component: &str, text: &str) -> Value {
    json!({"type": "prompt", "payload": {"text": text, "to": component}})
}

fn is(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |s| s["type"] == kind
}

/// A turn that ends: the agent back to idle.
fn turn_done(s: &Value) -> bool {
    s["type"] == "agent_state_change" && s["payload"]["to"] == "idle"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_command_runs_only_when_a_ui_allows_it() {
    let Some(codex) = codex_binary() else { return };
    let dir = ScratchDir::new("codex");
    let model = start_model().await;
    let (_patchbay, port) = start_patchbay(&dir, &codex, model, &["codex"]);
    let work = dir.join("codex-work");
    let mut ui = Ui::connect(port).await;

    // Denied: the command does not run, and Codex goes on to its answer.
    ui.send(prompt("codex", "Run: echo hi > denied.txt")).await;
    let asked = ui.until("an approval", is("approval.requested")).await;
    assert_eq!(asked["payload"]["toolName"], "commandExecution", "{asked}");
    assert!(
        asked["payload"]["input"]["command"]
            .as_str()
            .is_some_and(|c| c.contains("echo hi > denied.txt")),
        "{asked}"
    );
    let prompt_id = asked["payload"]["promptId"].clone();
    ui.send(json!({"type": "control.answer", "payload": {"promptId": prompt_id, "value": "deny"}}))
        .await;
    let decided = ui.until("the decision", is("approval.decided")).await;
    assert_eq!(decided["payload"]["value"], "deny", "{decided}");
    assert_eq!(decided["payload"]["by"], "sidecar:ui", "{decided}");
    let result = ui.until("the tool result", is("tool_result")).await;
    assert_eq!(result["payload"]["success"], false, "{result}");
    ui.until("the end of the turn", turn_done).await;
    assert!(
        !work.join("denied.txt").exists(),
        "a denied command must not run"
    );
    let kinds = ui.kinds();
    for wanted in [
        "tool_call",
        "approval.requested",
        "approval.decided",
        "tool_result",
        "text_delta",
        "token_usage",
    ] {
        assert!(kinds.iter().any(|k| k == wanted), "no {wanted}: {kinds:?}");
    }
    let text: String = ui
        .seen
        .iter()
        .filter(|s| s["type"] == "text_delta")
        .filter_map(|s| s["payload"]["content"].as_str())
        .collect();
    assert_eq!(text, "Done. I ran the command.");

    // Allowed: it runs.
    ui.seen.clear();
    ui.send(prompt("codex", "Run: echo hi > allowed.txt")).await;
    let asked = ui.until("an approval", is("approval.requested")).await;
    ui.send(json!({"type": "control.answer",
        "payload": {"promptId": asked["payload"]["promptId"], "value": "allow"}}))
        .await;
    let result = ui.until("the tool result", is("tool_result")).await;
    assert_eq!(result["payload"]["success"], true, "{result}");
    ui.until("the end of the turn", turn_done).await;
    assert_eq!(
        std::fs::read_to_string(work.join("allowed.txt")).expect("the command ran"),
        "hi\n"
    );
}

/// Two agents wait; a `control.answer` without `promptId` (what a pad sends) answers the
/// one that has waited longest, and the next answer the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promptless_answer_goes_to_the_agent_that_waited_longest() {
    let Some(codex) = codex_binary() else { return };
    let dir = ScratchDir::new("codex-two");
    let model = start_model().await;
    let (_patchbay, port) = start_patchbay(&dir, &codex, model, &["first", "second"]);
    let mut ui = Ui::connect(port).await;
    let asked_by = |component: &'static str| {
        move |s: &Value| {
            s["type"] == "approval.requested"
                && s["source"].as_str() == Some(&*format!("codex:{component}"))
        }
    };

    // `second` asks first, then `first`.
    ui.send(prompt("second", "Run: echo hi > second.txt")).await;
    let older = ui.until("second's approval", asked_by("second")).await;
    ui.send(prompt("first", "Run: echo hi > first.txt")).await;
    let newer = ui.until("first's approval", asked_by("first")).await;

    // Each approval signal says how many wait in the graph (what a pad's LED shows).
    let pending = |s: &Value| s["metadata"]["pendingApprovals"].as_u64();
    assert_eq!((pending(&older), pending(&newer)), (Some(1), Some(2)));

    ui.send(json!({"type": "control.answer", "payload": {"value": "deny"}}))
        .await;
    let decided = ui.until("a decision", is("approval.decided")).await;
    assert_eq!(pending(&decided), Some(1));
    assert_eq!(
        decided["source"], "codex:second",
        "the oldest is answered: {decided}"
    );
    assert_eq!(decided["payload"]["promptId"], older["payload"]["promptId"]);
    assert_eq!(decided["payload"]["value"], "deny");

    ui.send(json!({"type": "control.answer", "payload": {"value": "allow"}}))
        .await;
    let decided = ui
        .until("the second decision", is("approval.decided"))
        .await;
    assert_eq!(decided["source"], "codex:first", "{decided}");
    assert_eq!(decided["payload"]["promptId"], newer["payload"]["promptId"]);
    assert_eq!(decided["payload"]["value"], "allow");
    assert_eq!(pending(&decided), Some(0));
    let work = |name: &str| dir.join(format!("{name}-work"));
    ui.until("first's result", |s| {
        s["type"] == "tool_result" && s["source"] == "codex:first"
    })
    .await;
    assert!(work("first").join("first.txt").exists(), "allowed: it ran");
    assert!(
        !work("second").join("second.txt").exists(),
        "denied: it did not"
    );
}

/// `patchbay wrap --protocol codex -- codex exec --json …`: the run's output is passed
/// through, and its events reach a running patchbay's UI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrapped_exec_run_is_published() {
    let Some(codex) = codex_binary() else { return };
    let dir = ScratchDir::new("codex-wrap");
    let model = start_model().await;
    // Only a sidecar: what is POSTed to it comes out of `ui.inbound`, back to its UIs.
    let ui_port = free_port();
    let config = dir.join("patchbay.toml");
    std::fs::write(
        &config,
        format!("[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"ui.inbound\"]\nlisten = \"127.0.0.1:{ui_port}\"\n"),
    )
    .unwrap();
    let _patchbay = Killed(
        Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .arg("run")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("patchbay runs"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", ui_port)).is_err() {
        assert!(Instant::now() < deadline, "patchbay did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut ui = Ui::connect(ui_port).await;
    // The same CODEX_HOME and work folder a component would have.
    codex_component("exec", &codex, &dir, model);
    let (home, work) = (dir.join("exec-home"), dir.join("exec-work"));
    let wrapped = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .args(["wrap", "--protocol", "codex", "--to"])
            .arg(format!("http://127.0.0.1:{ui_port}"))
            .arg("--")
            .arg(&codex)
            .args([
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                "Run: echo hi > wrapped.txt",
            ])
            .current_dir(&work)
            .env("HOME", &home)
            .env("CODEX_HOME", home.join("codex"))
            .env("FAKE_API_KEY", "dummy")
            .stdin(Stdio::null())
            .output()
            .expect("patchbay wrap runs")
    })
    .await
    .unwrap();
    let printed = String::from_utf8_lossy(&wrapped.stdout);
    assert!(
        wrapped.status.success(),
        "{printed}\n{}",
        String::from_utf8_lossy(&wrapped.stderr)
    );
    assert!(
        printed.contains("\"turn.completed\""),
        "passed through: {printed}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("exec-work/wrapped.txt")).expect("the command ran"),
        "hi\n"
    );
    ui.until("the token usage", is("token_usage")).await;
    let kinds = ui.kinds();
    for wanted in ["tool_call", "tool_result", "text_delta"] {
        assert!(kinds.iter().any(|k| k == wanted), "no {wanted}: {kinds:?}");
    }
}

/// Codex's own OpenTelemetry export (`[otel]` in its config, OTLP/HTTP JSON logs, sent at
/// exit) into an `otlp` source: its prompt, tool result and token usage arrive as signals of
/// its thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn its_opentelemetry_export_arrives_as_signals() {
    let Some(codex) = codex_binary() else { return };
    let dir = ScratchDir::new("codex-otlp");
    let model = start_model().await;
    let (ui_port, otlp_port) = (free_port(), free_port());
    let config = dir.join("patchbay.toml");
    std::fs::write(
        &config,
        format!(
            "[sources.otel]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{otlp_port}\"\ngrpc_listen = \"\"\n\n\
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
            .stderr(Stdio::null())
            .spawn()
            .expect("patchbay runs"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", ui_port)).is_err()
        || std::net::TcpStream::connect(("127.0.0.1", otlp_port)).is_err()
    {
        assert!(Instant::now() < deadline, "patchbay did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut ui = Ui::connect(ui_port).await;
    // A CODEX_HOME whose config points the model at the scripted API and the telemetry at
    // patchbay.
    codex_component("otel", &codex, &dir, model);
    let (home, work) = (dir.join("otel-home"), dir.join("otel-work"));
    let codex_config = home.join("codex/config.toml");
    let mut text = std::fs::read_to_string(&codex_config).unwrap();
    text.push_str(&format!(
        "\n[otel]\nenvironment = \"test\"\nlog_user_prompt = true\n\
         exporter = {{ otlp-http = {{ endpoint = \"http://127.0.0.1:{otlp_port}/v1/logs\", protocol = \"json\" }} }}\n\
         metrics_exporter = \"none\"\n"
    ));
    std::fs::write(&codex_config, text).unwrap();
    let ran = tokio::task::spawn_blocking(move || {
        Command::new(&codex)
            .args([
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                "Run: echo hi > traced.txt",
            ])
            .current_dir(&work)
            .env("HOME", &home)
            .env("CODEX_HOME", home.join("codex"))
            .env("FAKE_API_KEY", "dummy")
            .stdin(Stdio::null())
            .output()
            .expect("codex runs")
    })
    .await
    .unwrap();
    let printed = String::from_utf8_lossy(&ran.stdout);
    assert!(ran.status.success(), "{printed}");
    let thread = printed
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v["thread_id"].as_str().map(str::to_owned))
        .expect("exec names its thread");
    // Codex exports once, at exit.
    let usage = ui
        .until("the token usage", |s| {
            s["type"] == "token_usage" && s["source"] == "otlp:otel"
        })
        .await;
    assert_eq!(usage["payload"]["agentId"], thread.as_str(), "{usage}");
    assert!(
        usage["payload"]["promptTokens"].as_u64().unwrap_or(0) > 0,
        "{usage}"
    );
    if !ui.kinds().iter().any(|k| k == "tool_result") {
        ui.until("the tool result", is("tool_result")).await;
    }
    assert!(
        ui.kinds().iter().any(|k| k == "task_dispatch"),
        "{:?}",
        ui.kinds()
    );
}
