//! `type = "opencode"` end to end with the REAL OpenCode CLI.
//!
//! The npm package `opencode-ai` is installed into `target/opencode/` by
//! `tests/support/opencode-install.sh` (run by the tests when missing;
//! `PATCHBAY_SKIP_OPENCODE=1` skips them). Each test starts `opencode serve` on a free
//! port, offline: `HOME` and the `XDG_*` directories in a scratch directory, a config
//! (`OPENCODE_CONFIG`) whose only provider is a scripted OpenAI-compatible chat
//! completions API written here, and OpenCode asking before `bash`. The model calls
//! `bash` with the command the prompt names (`Run: COMMAND`), then, once the conversation
//! has the call's result, streams "Done." in four deltas. patchbay runs an `opencode`
//! output with a gate on `bash`, and a WebSocket client of the sidecar plays the UI: it
//! sends the prompts and answers the permissions.

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
use patchbay_testkit::process::{Killed, free_port, http};
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// A guard against a hang (nothing is timed).
const GUARD: Duration = Duration::from_secs(120);

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The installed CLI, or `None` when the tests are skipped.
fn opencode_binary() -> Option<PathBuf> {
    if std::env::var_os("PATCHBAY_SKIP_OPENCODE").is_some() {
        return None;
    }
    let status = Command::new("bash")
        .arg(root().join("tests/support/opencode-install.sh"))
        .stdout(Stdio::null())
        .status()
        .expect("run the install script");
    assert!(
        status.success(),
        "installing OpenCode failed (PATCHBAY_SKIP_OPENCODE=1 skips these tests)"
    );
    Some(root().join("target/opencode/node_modules/.bin/opencode"))
}

// ---- the scripted model ----------------------------------------------------------------

/// The scripted chat completions API on a free loopback port.
async fn start_model() -> SocketAddr {
    let app = Router::new()
        .route("/v1/chat/completions", post(completions))
        .with_state(Arc::new(AtomicU64::new(0)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A message's text: a string, or the text parts of an array.
fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// What the model does next: `Some(command)` to call `bash` with, `None` to answer (the
/// last prompt naming a command already has a tool result after it, or none names one).
fn next_step(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let (at, command) = messages.iter().enumerate().rev().find_map(|(at, m)| {
        let text = text_of(m);
        let (_, command) = text.split_once("Run: ")?;
        (m["role"] == "user").then(|| (at, command.trim().to_owned()))
    })?;
    let answered = messages[at..].iter().any(|m| m["role"] == "tool");
    (!answered).then_some(command)
}

/// One `chat.completion.chunk` of request `n`.
fn chunk(n: u64, choice: Value) -> String {
    let chunk = json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk",
        "created": 1, "model": "fake-model", "choices": [choice]});
    format!("data: {chunk}\n\n")
}

async fn completions(State(calls): State<Arc<AtomicU64>>, body: String) -> impl IntoResponse {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let n = calls.fetch_add(1, Ordering::Relaxed);
    let mut sse = String::new();
    let usage;
    match next_step(&body) {
        Some(command) => {
            let call = format!("call_{n}");
            let args = json!({"command": command, "description": "run it"}).to_string();
            sse.push_str(&chunk(
                n,
                json!({"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls":
                    [{"index": 0, "id": call, "type": "function",
                      "function": {"name": "bash", "arguments": ""}}]}, "finish_reason": null}),
            ));
            sse.push_str(&chunk(
                n,
                json!({"index": 0, "delta": {"tool_calls":
                    [{"index": 0, "function": {"arguments": args}}]}, "finish_reason": null}),
            ));
            sse.push_str(&chunk(
                n,
                json!({"index": 0, "delta": {}, "finish_reason": "tool_calls"}),
            ));
            usage = json!({"prompt_tokens": 200, "completion_tokens": 12, "total_tokens": 212});
        }
        None => {
            for (i, delta) in ["Done. ", "I ran ", "the ", "command."].iter().enumerate() {
                let mut d = json!({"content": delta});
                if i == 0 {
                    d["role"] = json!("assistant");
                }
                sse.push_str(&chunk(
                    n,
                    json!({"index": 0, "delta": d, "finish_reason": null}),
                ));
            }
            sse.push_str(&chunk(
                n,
                json!({"index": 0, "delta": {}, "finish_reason": "stop"}),
            ));
            usage = json!({"prompt_tokens": 230, "completion_tokens": 9, "total_tokens": 239});
        }
    }
    let last = json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk",
        "created": 1, "model": "fake-model", "choices": [], "usage": usage});
    sse.push_str(&format!("data: {last}\n\ndata: [DONE]\n\n"));
    ([("content-type", "text/event-stream")], sse)
}

// ---- opencode serve --------------------------------------------------------------------

/// Where one `opencode serve` lives: its scratch home, its config, its project directory.
struct Server {
    binary: PathBuf,
    /// `OPENCODE_SERVER_PASSWORD` (`None`: the server runs unsecured).
    password: Option<String>,
    home: PathBuf,
    config: PathBuf,
    work: PathBuf,
    log: PathBuf,
    port: u16,
}

impl Server {
    /// Writes the config and the directories under `dir`; nothing started.
    fn new(binary: PathBuf, dir: &ScratchDir, model: SocketAddr) -> Server {
        let home = dir.join("home");
        let work = dir.join("work");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        let config = dir.join("opencode.json");
        let opencode = json!({
            "$schema": "https://opencode.ai/config.json",
            "provider": {"fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": format!("http://{model}/v1"), "apiKey": "dummy"},
                "models": {"fake-model": {"name": "Fake Model", "tool_call": true}}
            }},
            "model": "fake/fake-model",
            "small_model": "fake/fake-model",
            "enabled_providers": ["fake"],
            "permission": {"bash": "ask"},
            "autoupdate": false,
            "share": "disabled"
        });
        std::fs::write(&config, opencode.to_string()).unwrap();
        Server {
            binary,
            home,
            config,
            work,
            log: dir.join("opencode.log"),
            port: free_port(),
            password: None,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `opencode serve` on its port, once `/global/health` answers.
    fn start(&self) -> Killed {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let xdg = |sub: &str| self.home.join(sub);
        let child = Command::new(&self.binary)
            .args(["serve", "--port", &self.port.to_string()])
            .args(["--hostname", "127.0.0.1"])
            .current_dir(&self.work)
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", xdg(".config"))
            .env("XDG_DATA_HOME", xdg(".local/share"))
            .env("XDG_CACHE_HOME", xdg(".cache"))
            .env("XDG_STATE_HOME", xdg(".local/state"))
            .env("OPENCODE_CONFIG", &self.config)
            .env_remove("OPENCODE_SERVER_PASSWORD")
            .envs(
                self.password
                    .iter()
                    .map(|p| ("OPENCODE_SERVER_PASSWORD", p)),
            )
            .envs(
                [
                    "OPENCODE_DISABLE_AUTOUPDATE",
                    "OPENCODE_DISABLE_MODELS_FETCH",
                    "OPENCODE_DISABLE_LSP_DOWNLOAD",
                    "OPENCODE_DISABLE_DEFAULT_PLUGINS",
                    "OPENCODE_DISABLE_SHARE",
                ]
                .map(|k| (k, "1")),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("opencode serve starts");
        let mut child = Killed(child);
        let addr: SocketAddr = format!("127.0.0.1:{}", self.port).parse().unwrap();
        let deadline = Instant::now() + GUARD;
        loop {
            if healthy(addr, self.password.is_some()) {
                return child;
            }
            if let Ok(Some(status)) = child.0.try_wait() {
                panic!(
                    "opencode serve exited with {status}:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "opencode serve did not answer:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Whether `GET /global/health` at `addr` says healthy (or, `locked`, asks for the
/// password). (OpenCode keeps a connection open after its answer even when asked to close
/// it: the answer is read up to what it says, not to the end of the connection.)
fn healthy(addr: SocketAddr, locked: bool) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request =
        format!("GET /global/health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(n @ 1..) = stream.read(&mut buf) {
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if (text.starts_with("HTTP/1.1 200") && text.contains("\"healthy\":true"))
            || (locked && text.starts_with("HTTP/1.1 401"))
        {
            return true;
        }
    }
    false
}

// ---- patchbay and the UI ---------------------------------------------------------------

/// The gate of most tests: a person has all the time there is.
const PATIENT: &str = "gate = { tools = [\"bash\"], timeout_ms = 120000, default = \"deny\" }";

/// `patchbay run` with an `opencode` output `oc` (prompts and answers from the UI, and
/// these `options`: its gate, …) and a sidecar `ui` fed by it. Returns the daemon, the
/// sidecar's port and the log's path.
fn start_patchbay(dir: &ScratchDir, server: &Server, options: &str) -> (Killed, u16, PathBuf) {
    let ui = free_port();
    let config = format!(
        "[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"oc.inbound\"]\nlisten = \"127.0.0.1:{ui}\"\n\n\
         [outputs.oc]\ntype = \"opencode\"\ninputs = [\"ui.inbound\"]\nurl = \"{url}\"\n\
         directory = \"{work}\"\nbackoff_initial_ms = 100\nbackoff_max_ms = 500\n\
         {options}\n",
        url = server.url(),
        work = server.work.display(),
    );
    let path = dir.join(format!("patchbay-{ui}.toml"));
    std::fs::write(&path, config).unwrap();
    let log = dir.join(format!("patchbay-{ui}.log"));
    let child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .arg("run")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("patchbay runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", ui)).is_err() {
        assert!(Instant::now() < deadline, "patchbay did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Killed(child), ui, log)
}

/// The component `name` in the sidecar's `/health`.
fn component(port: u16, name: &str) -> Value {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (status, body) = http(addr, "GET", "/health", &[], b"").expect("/health answers");
    assert_eq!(status, 200, "{body}");
    let health: Value = serde_json::from_str(&body).expect("/health is JSON");
    health["components"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {body}"))
}

/// Polls the state of component `name` until it is `state` (guarded).
async fn wait_state(port: u16, name: &str, state: &str) -> Value {
    let found = tokio::time::timeout(GUARD, async {
        loop {
            let c = tokio::task::spawn_blocking({
                let name = name.to_owned();
                move || component(port, &name)
            })
            .await
            .unwrap();
            if c["state"] == state {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("{name} never became {state}: {}", component(port, name)))
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
        Ui::connect_to(format!("ws://127.0.0.1:{port}/ws")).await
    }

    /// A UI that also gets what the sidecar published before it connected.
    async fn replaying(port: u16) -> Ui {
        Ui::connect_to(format!("ws://127.0.0.1:{port}/ws?since=0")).await
    }

    async fn connect_to(url: String) -> Ui {
        let (ws, _) = tokio_tungstenite::connect_async(url)
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

    /// Where the first signal of `kind` is among those seen.
    fn first(&self, kind: &str) -> usize {
        self.seen
            .iter()
            .position(|s| s["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind}: {:?}", self.kinds()))
    }

    /// The text of the `text_delta`s seen.
    fn text(&self) -> String {
        self.seen
            .iter()
            .filter(|s| s["type"] == "text_delta")
            .filter_map(|s| s["payload"]["content"].as_str())
            .collect()
    }
}

fn prompt(text: &str) -> Value {
    json!({"type": "prompt", "payload": {"text": text}})
}

fn is(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |s| s["type"] == kind
}

/// A turn that ends: the session back to idle.
fn turn_done(s: &Value) -> bool {
    s["type"] == "agent_state_change" && s["payload"]["to"] == "idle"
}

/// The log of patchbay has no panic.
fn assert_no_panic(log: &Path) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(!text.contains("panicked"), "a panic in patchbay:\n{text}");
}

// ---- the tests ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_command_runs_only_when_a_ui_allows_it() {
    let Some(binary) = opencode_binary() else {
        return;
    };
    let dir = ScratchDir::new("opencode");
    let model = start_model().await;
    let server = Server::new(binary, &dir, model);
    let _opencode = server.start();
    let (_patchbay, port, log) = start_patchbay(&dir, &server, PATIENT);
    wait_state(port, "oc", "ok").await;
    let mut ui = Ui::connect(port).await;

    // Denied: the command does not run, and OpenCode goes on to its answer.
    ui.send(prompt("Run: echo hi > denied.txt")).await;
    let asked = ui.until("a permission", is("approval.requested")).await;
    assert_eq!(asked["payload"]["toolName"], "bash", "{asked}");
    assert_eq!(asked["source"], "opencode:oc", "{asked}");
    assert!(
        asked["payload"]["input"]["command"]
            .as_str()
            .is_some_and(|c| c.contains("echo hi > denied.txt")),
        "{asked}"
    );
    let prompt_id = asked["payload"]["promptId"].clone();
    assert!(prompt_id.as_str().is_some_and(|p| p.starts_with("per_")));
    ui.send(json!({"type": "control.answer", "payload": {"promptId": prompt_id, "value": "deny"}}))
        .await;
    let decided = ui.until("the decision", is("approval.decided")).await;
    assert_eq!(decided["payload"]["promptId"], prompt_id, "{decided}");
    assert_eq!(decided["payload"]["value"], "deny", "{decided}");
    assert_eq!(decided["payload"]["by"], "sidecar:ui", "{decided}");
    let result = ui.until("the tool result", is("tool_result")).await;
    assert_eq!(result["payload"]["success"], false, "{result}");
    ui.until("the end of the turn", turn_done).await;
    assert!(
        !server.work.join("denied.txt").exists(),
        "a denied command must not run"
    );
    assert_eq!(ui.text(), "Done. I ran the command.", "{:?}", ui.kinds());

    // Allowed: it runs, and the run's signals come in order.
    ui.seen.clear();
    ui.send(prompt("Run: echo hi > allowed.txt")).await;
    let asked = ui.until("a permission", is("approval.requested")).await;
    ui.send(json!({"type": "control.answer",
        "payload": {"promptId": asked["payload"]["promptId"], "value": "allow"}}))
        .await;
    let result = ui.until("the tool result", is("tool_result")).await;
    assert_eq!(result["payload"]["success"], true, "{result}");
    ui.until("the end of the turn", turn_done).await;
    assert_eq!(
        std::fs::read_to_string(server.work.join("allowed.txt")).expect("the command ran"),
        "hi\n"
    );
    assert_eq!(ui.text(), "Done. I ran the command.");
    // OpenCode asks before or after it marks the call running (either order happens).
    let call = ui.first("tool_call").max(ui.first("approval.requested"));
    let order = [
        call,
        ui.first("approval.decided"),
        ui.first("tool_result"),
        ui.first("text_delta"),
    ];
    assert!(order.is_sorted(), "{order:?}: {:?}", ui.kinds());
    let last_usage = ui
        .seen
        .iter()
        .rposition(|s| s["type"] == "token_usage")
        .expect("token_usage");
    assert!(last_usage > ui.first("text_delta"), "{:?}", ui.kinds());
    assert_eq!(
        ui.seen.last().map(turn_done),
        Some(true),
        "{:?}",
        ui.kinds()
    );
    let states: Vec<&str> = ui
        .seen
        .iter()
        .filter(|s| s["type"] == "agent_state_change")
        .filter_map(|s| s["payload"]["to"].as_str())
        .collect();
    let waiting = states.iter().position(|s| *s == "waiting");
    let acting = states.iter().rposition(|s| *s == "acting");
    assert!(
        waiting.is_some() && acting > waiting && states.last() == Some(&"idle"),
        "{states:?}"
    );
    assert_eq!(component(port, "oc")["state"], "ok");
    assert_no_panic(&log);
}

/// OpenCode killed and started again while a permission waits, then patchbay killed and
/// started again while another waits: each side waits for the other, and what waits on
/// each side is in step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn either_side_may_go_away_and_come_back() {
    let Some(binary) = opencode_binary() else {
        return;
    };
    let dir = ScratchDir::new("opencode-restart");
    let model = start_model().await;
    let server = Server::new(binary, &dir, model);
    let opencode = server.start();
    let (patchbay, port, log) = start_patchbay(&dir, &server, PATIENT);
    wait_state(port, "oc", "ok").await;
    let mut ui = Ui::connect(port).await;
    ui.send(prompt("Run: echo hi > lost.txt")).await;
    let lost = ui.until("a permission", is("approval.requested")).await;

    // OpenCode killed while patchbay is connected: recovering, no panic.
    drop(opencode);
    let recovering = wait_state(port, "oc", "recovering").await;
    assert!(
        recovering["detail"]
            .as_str()
            .is_some_and(|d| d.contains("retrying")),
        "{recovering}"
    );
    assert_no_panic(&log);

    // Back on the same port: ok again. The permission went with the old server: decided,
    // so that nothing waits on it.
    let _opencode = server.start();
    wait_state(port, "oc", "ok").await;
    let gone = ui
        .until("the lost permission decided", is("approval.decided"))
        .await;
    assert_eq!(gone["payload"]["promptId"], lost["payload"]["promptId"]);
    assert_eq!(gone["payload"]["value"], "cancel", "{gone}");
    assert_eq!(gone["payload"]["by"], "opencode", "{gone}");
    assert!(!server.work.join("lost.txt").exists());

    // The session lives on: the next prompt gets its turn up to the permission.
    ui.send(prompt("Run: echo hi > after.txt")).await;
    let asked = ui.until("a permission", is("approval.requested")).await;
    assert_no_panic(&log);

    // patchbay killed while OpenCode waits; the next one finds the permission waiting.
    drop(ui);
    drop(patchbay);
    let (_patchbay, port, log) = start_patchbay(&dir, &server, PATIENT);
    let mut ui = Ui::replaying(port).await;
    let found = ui
        .until("the permission still waiting", is("approval.requested"))
        .await;
    assert_eq!(found["payload"]["promptId"], asked["payload"]["promptId"]);
    assert_eq!(found["payload"]["toolName"], "bash", "{found}");
    // Without `promptId`, as a pad sends it: the oldest waiting, this one.
    ui.send(json!({"type": "control.answer", "payload": {"value": "allow"}}))
        .await;
    let decided = ui.until("the decision", is("approval.decided")).await;
    assert_eq!(decided["payload"]["promptId"], asked["payload"]["promptId"]);
    assert_eq!(decided["payload"]["value"], "allow", "{decided}");
    assert_eq!(decided["payload"]["by"], "sidecar:ui", "{decided}");
    ui.until("the end of the turn", turn_done).await;
    assert_eq!(
        std::fs::read_to_string(server.work.join("after.txt")).expect("the command ran"),
        "hi\n"
    );
    assert_no_panic(&log);
}

/// Polls component `name` until `pred` holds for it (guarded).
async fn wait_component(port: u16, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let found = tokio::time::timeout(GUARD, async {
        loop {
            let name = name.to_owned();
            let c = tokio::task::spawn_blocking(move || component(port, &name))
                .await
                .unwrap();
            if pred(&c) {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("{name}: never {what}: {}", component(port, name)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_decides_in_time_an_interrupt_stops_a_turn_and_the_rest_is_refused() {
    let Some(binary) = opencode_binary() else {
        return;
    };
    let dir = ScratchDir::new("opencode-gate");
    let model = start_model().await;
    // This server has a password: patchbay gives it as Basic authentication.
    let password = "s3cret-pa55-41f";
    let server = Server {
        password: Some(password.into()),
        ..Server::new(binary, &dir, model)
    };
    let _opencode = server.start();
    let options = format!(
        "gate = {{ tools = [\"bash\"], timeout_ms = 300, default = \"deny\" }}\n\
         password = \"{password}\""
    );
    let (_patchbay, port, log) = start_patchbay(&dir, &server, &options);
    wait_state(port, "oc", "ok").await;
    let mut ui = Ui::connect(port).await;

    // No answer: the gate's default, and OpenCode goes on.
    ui.send(prompt("Run: echo hi > late.txt")).await;
    let asked = ui.until("a permission", is("approval.requested")).await;
    let decided = ui.until("the decision", is("approval.decided")).await;
    assert_eq!(decided["payload"]["promptId"], asked["payload"]["promptId"]);
    assert_eq!(decided["payload"]["value"], "deny", "{decided}");
    assert_eq!(decided["payload"]["by"], "timeout", "{decided}");
    let result = ui.until("the tool result", is("tool_result")).await;
    assert_eq!(result["payload"]["success"], false, "{result}");
    ui.until("the end of the turn", turn_done).await;
    assert_eq!(ui.text(), "Done. I ran the command.");
    assert!(
        !server.work.join("late.txt").exists(),
        "denied: it did not run"
    );

    // An interrupt while a permission waits: the turn stops, nothing runs.
    ui.seen.clear();
    ui.send(prompt("Run: echo hi > stopped.txt")).await;
    ui.until("a permission", is("approval.requested")).await;
    ui.send(json!({"type": "control.interrupt", "payload": {}}))
        .await;
    ui.until("the end of the turn", turn_done).await;
    assert!(
        !server.work.join("stopped.txt").exists(),
        "interrupted: it did not run"
    );

    // What OpenCode cannot take is refused and counted, with the reason.
    let before = component(port, "oc")["bad_input"].as_u64().unwrap_or(0);
    let refused_with = |what: &'static str| {
        move |c: &Value| {
            c["last_error"]
                .as_str()
                .is_some_and(|e| e.starts_with(what))
        }
    };
    ui.send(json!({"type": "control.pause", "payload": {}}))
        .await;
    wait_component(
        port,
        "oc",
        "refused the pause",
        refused_with("control.pause: OpenCode takes"),
    )
    .await;
    ui.send(
        json!({"type": "control.answer", "payload": {"promptId": "per_gone", "value": "allow"}}),
    )
    .await;
    let gone = wait_component(
        port,
        "oc",
        "refused the answer",
        refused_with("control.answer: OpenCode answered HTTP 404"),
    )
    .await;
    assert!(
        gone["bad_input"].as_u64().unwrap_or(0) >= before + 2,
        "{gone}"
    );
    assert_eq!(gone["state"], "ok", "{gone}");
    assert_no_panic(&log);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let (_, health) = http(addr, "GET", "/health", &[], b"").expect("/health");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    for (what, text) in [("/health", &health), ("the log", &logged)] {
        assert!(!text.contains(password), "the password in {what}:\n{text}");
    }
}
