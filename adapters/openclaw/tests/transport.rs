//! The transport end to end, in process, against a gateway stand-in written here (a
//! WebSocket server on 127.0.0.1) that replays the frames recorded from the real
//! gateway (`tests/fixtures/openclaw/`): the handshake, a `chat.send` run's events, an
//! abort, a wrong token, a dropped connection.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use patchbay_graph::{
    ChannelOutput, ChannelSource, HealthState, Registry, RunningGraph, SourceText, compile, runtime,
};
use patchbay_signal::{Object, SharedSignal, Signal};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// The recorded lines of a fixture: `(dir, frame)`.
fn recorded(name: &str) -> Vec<(String, Value)> {
    patchbay_testkit::fixture_text(&format!("openclaw/{name}"))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("recorded line");
            (
                v["dir"].as_str().unwrap_or_default().to_owned(),
                v["frame"].clone(),
            )
        })
        .collect()
}

fn incoming(name: &str) -> Vec<Value> {
    recorded(name)
        .into_iter()
        .filter(|(d, _)| d == "in")
        .map(|(_, f)| f)
        .collect()
}

/// How the stand-in treats each connection.
#[derive(Clone, Copy)]
enum Play {
    /// Drop the socket at once, before the challenge.
    Drop,
    /// The recorded wrong-token refusal, then close 1008.
    WrongToken,
    /// Handshake, the recorded `chat.send` run, then answer requests until closed.
    Run,
    /// Handshake announcing a 50 ms tick, then silence with the socket open.
    Silent,
}

type Requests = mpsc::UnboundedSender<Value>;

async fn gateway(
    listener: TcpListener,
    plays: Vec<Play>,
    connections: &'static AtomicUsize,
    requests: Requests,
) {
    for play in plays {
        let (tcp, _) = listener.accept().await.expect("accept");
        connections.fetch_add(1, Ordering::SeqCst);
        let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("ws");
        if matches!(play, Play::Drop) {
            drop(ws);
            continue;
        }
        let hello = incoming("openclaw-hello-min3-max4.jsonl");
        ws.send(Message::text(hello[0].to_string()))
            .await
            .expect("challenge");
        let connect = loop {
            match ws.next().await {
                Some(Ok(Message::Text(t))) => {
                    break serde_json::from_str::<Value>(t.as_str()).expect("json");
                }
                Some(Ok(_)) => continue,
                _ => panic!("no connect request"),
            }
        };
        let _ = requests.send(connect.clone());
        let id = connect["id"].clone();
        if matches!(play, Play::WrongToken) {
            let mut refusal = incoming("openclaw-wrong-token.jsonl")[1].clone();
            refusal["id"] = id;
            ws.send(Message::text(refusal.to_string()))
                .await
                .expect("refusal");
            let _ = ws
                .send(Message::Close(Some(CloseFrame {
                    code: CloseCode::Policy,
                    reason: "unauthorized: gateway token mismatch".into(),
                })))
                .await;
            continue;
        }
        let mut ok = hello[1].clone();
        ok["id"] = id;
        if matches!(play, Play::Silent) {
            ok["payload"]["policy"]["tickIntervalMs"] = json!(50);
            ws.send(Message::text(ok.to_string())).await.expect("hello");
            // Hold the socket open without a word until the client gives up on it.
            let _ = ws.next().await; // its sessions.subscribe
            let _ = requests.send(json!({"silent": true}));
            let _ = ws.next().await;
            continue;
        }
        ws.send(Message::text(ok.to_string())).await.expect("hello");
        // The run, as the gateway sent it (its answers to the recorder's own requests
        // left out).
        for frame in incoming("openclaw-chat-send-mock-toolcall.jsonl") {
            if frame["type"] == "event" && frame["event"] != "connect.challenge" {
                ws.send(Message::text(frame.to_string()))
                    .await
                    .expect("event");
            }
        }
        while let Some(Ok(msg)) = ws.next().await {
            if let Message::Text(t) = msg {
                let req: Value = serde_json::from_str(t.as_str()).expect("json");
                let _ = requests.send(req.clone());
                let res = json!({"type": "res", "id": req["id"], "ok": true, "payload": {"ok": true, "aborted": true}});
                let _ = ws.send(Message::text(res.to_string())).await;
            }
        }
    }
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.adapter(&patchbay_openclaw::ADAPTER);
    r
}

struct Session {
    feed: mpsc::Sender<Signal>,
    seen: mpsc::Receiver<SharedSignal>,
    requests: mpsc::UnboundedReceiver<Value>,
    graph: RunningGraph,
}

async fn start(plays: Vec<Play>, connections: &'static AtomicUsize, token: &str) -> Session {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (req_tx, requests) = mpsc::unbounded_channel();
    tokio::spawn(gateway(listener, plays, connections, req_tx));
    let mut registry = registry();
    let feed = ChannelSource::register(&mut registry, "feed", 64);
    let seen = ChannelOutput::register(&mut registry, "capture", 1024);
    let config = format!(
        r#"
[sources.ctl]
type = "feed"

[outputs.claw]
type = "openclaw"
inputs = ["ctl"]
url = "ws://127.0.0.1:{port}"
token = "{token}"
backoff_initial_ms = 10
backoff_max_ms = 20
connect_timeout_ms = 5000

[outputs.seen]
type = "capture"
inputs = ["claw.inbound"]
"#
    );
    let graph =
        compile(&[SourceText::new("openclaw.toml", config)], &registry).expect("graph compiles");
    Session {
        feed,
        seen,
        requests,
        graph: RunningGraph::spawn(graph),
    }
}

impl Session {
    fn send(&self, kind: &str, payload: Value) {
        let payload: Object = payload.as_object().cloned().unwrap_or_default();
        self.feed
            .try_send(Signal::new(kind, "test", payload))
            .expect("the feed is open and has room");
    }

    async fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            let s = tokio::time::timeout(Duration::from_secs(20), self.seen.recv())
                .await
                .unwrap_or_else(|_| panic!("waiting for {what}"))
                .expect("graph alive")
                .to_value();
            if pred(&s) {
                return s;
            }
        }
    }

    async fn request(&mut self) -> Value {
        tokio::time::timeout(Duration::from_secs(20), self.requests.recv())
            .await
            .expect("a request arrives")
            .expect("gateway alive")
    }

    async fn finish(self) -> runtime::RunReport {
        tokio::time::timeout(Duration::from_secs(20), self.graph.stop())
            .await
            .expect("graph stops")
            .expect("graph task")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_events_and_abort() {
    static CONNECTIONS: AtomicUsize = AtomicUsize::new(0);
    let mut s = start(
        vec![Play::Drop, Play::Run],
        &CONNECTIONS,
        "patchbay-test-token",
    )
    .await;

    let connect = s.request().await;
    assert_eq!(connect["method"], "connect");
    let p = &connect["params"];
    assert_eq!(
        (p["minProtocol"].as_u64(), p["maxProtocol"].as_u64()),
        (Some(3), Some(4))
    );
    assert_eq!(p["role"], "operator");
    assert_eq!(
        p["scopes"],
        json!(["operator.read", "operator.write", "operator.admin"])
    );
    assert_eq!(p["caps"], json!(["tool-events"]));
    assert_eq!(p["client"]["id"], "gateway-client");
    assert_eq!(p["auth"]["token"], "patchbay-test-token");

    let subscribe = s.request().await;
    assert_eq!(subscribe["method"], "sessions.subscribe");
    let connected = s
        .wait_for("connected", |v| v["type"] == "openclaw.connected")
        .await;
    assert_eq!(connected["payload"]["protocol"], 4);
    let call = s.wait_for("tool call", |v| v["type"] == "tool_call").await;
    assert_eq!(call["payload"]["toolName"], "ls");
    assert_eq!(call["correlationId"], "probe-tool-1");
    s.wait_for("tool result", |v| v["type"] == "tool_result")
        .await;
    s.wait_for("text", |v| v["type"] == "text_delta").await;
    let done = s
        .wait_for("completion", |v| v["type"] == "completion")
        .await;
    assert_eq!(done["payload"]["taskId"], "probe-tool-1");
    assert_eq!(done["payload"]["success"], true);

    // An interrupt aborts the last run seen, in its session.
    s.send("control.pause", json!({})); // no OpenClaw verb: refused
    s.send("control.interrupt", json!({}));
    let abort = s.request().await;
    assert_eq!(abort["method"], "chat.abort");
    assert_eq!(
        abort["params"],
        json!({"sessionKey": "agent:main:patchbay-tool", "runId": "probe-tool-1"})
    );
    let report = s.finish().await;
    assert_eq!(
        CONNECTIONS.load(Ordering::SeqCst),
        2,
        "one dropped connection, one retry"
    );
    let claw = report.telemetry.component("claw").expect("stats");
    assert_eq!(claw.sent, 1);
    assert_eq!(claw.bad_input, 1);
    assert_eq!(claw.state, HealthState::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_fails_without_retrying() {
    static CONNECTIONS: AtomicUsize = AtomicUsize::new(0);
    let mut s = start(
        vec![Play::WrongToken, Play::Run],
        &CONNECTIONS,
        "wrong-token",
    )
    .await;
    let error = s.wait_for("the refusal", |v| v["type"] == "error").await;
    assert_eq!(error["payload"]["code"], "AUTH_TOKEN_MISMATCH");
    // A retry would come within milliseconds (backoff 10 ms); none does.
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.send("control.interrupt", json!({})); // refused: the link has failed
    let report = s.finish().await;
    assert_eq!(
        CONNECTIONS.load(Ordering::SeqCst),
        1,
        "no retry after an auth failure"
    );
    let claw = report.telemetry.component("claw").expect("stats");
    assert_eq!(claw.state, HealthState::Failed);
    assert!(
        claw.last_error
            .as_deref()
            .is_some_and(|e| e.contains("not retrying")),
        "{claw:?}"
    );
    assert_eq!(claw.bad_input, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gives_up_after_max_attempts() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let config = format!(
        "[sources.claw]\ntype = \"openclaw\"\nurl = \"ws://127.0.0.1:{port}\"\ntoken = \"t\"\nmax_attempts = 3\nbackoff_initial_ms = 5\nbackoff_max_ms = 10\n"
    );
    let graph = compile(&[SourceText::new("c.toml", config)], &registry()).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = graph.stop().await.expect("graph");
    let claw = report.telemetry.component("claw").expect("stats");
    assert_eq!(claw.state, HealthState::Failed);
    assert!(
        claw.last_error
            .as_deref()
            .is_some_and(|e| e.contains("gave up after 3 attempts")),
        "{claw:?}"
    );
}

#[test]
fn config_errors_point_at_the_key() {
    let r = registry();
    for (options, message) in [
        ("url = \"http://x\"", "ws://"),
        ("url = \"wss://\"", "no host"),
        ("max_attempts = 0", "at least 1"),
        ("connect_timeout_ms = 0", "at least 1"),
        ("backoff_max_ms = 1", "backoff_initial_ms"),
        (
            "connect_timeout_ms = 18446744073709551615",
            "`connect_timeout_ms` must be at least 1 and at most 86400000",
        ),
        (
            "backoff_max_ms = 1000000000000",
            "`backoff_max_ms` must be at least 1 and at most 86400000",
        ),
        ("tokn = \"x\"", "did you mean `token`"),
    ] {
        let config = format!("[sources.claw]\ntype = \"openclaw\"\n{options}\n");
        let err = compile(&[SourceText::new("c.toml", config)], &r).expect_err(options);
        assert!(
            err.iter().any(|d| d.message.contains(message)),
            "{options}: {err:?}"
        );
    }
    // Defaults build without I/O (the token file is read when the link starts).
    compile(
        &[SourceText::new(
            "c.toml",
            "[sources.claw]\ntype = \"openclaw\"\n",
        )],
        &r,
    )
    .expect("defaults");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_dropped_after_two_ticks() {
    static CONNECTIONS: AtomicUsize = AtomicUsize::new(0);
    let mut s = start(
        vec![Play::Silent, Play::Run],
        &CONNECTIONS,
        "patchbay-test-token",
    )
    .await;
    assert_eq!(s.request().await["method"], "connect");
    assert_eq!(s.request().await, json!({"silent": true}));
    // The client notices the silence, reconnects, and the run arrives on the new link.
    assert_eq!(s.request().await["method"], "connect");
    s.wait_for("completion", |v| v["type"] == "completion")
        .await;
    let report = s.finish().await;
    assert_eq!(CONNECTIONS.load(Ordering::SeqCst), 2);
    let claw = report.telemetry.component("claw").expect("stats");
    assert!(
        claw.last_error
            .as_deref()
            .is_some_and(|e| e.contains("two tick intervals")),
        "{claw:?}"
    );
}
