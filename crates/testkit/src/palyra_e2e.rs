//! End-to-end check of the `palyra` component against a stand-in daemon, run by the
//! adapter's test (`adapters/palyra/tests/transport.rs`, the graph in process) and the root
//! test `tests/palyra.rs` (the real `patchbay run`). Behind the `palyra-e2e` feature.
//!
//! The stand-in (axum) speaks the realtime WebSocket and the ACP command route, and
//! checks the bearer token:
//!
//! - realtime, first connection: `handshake` → `handshake.accepted`, `subscribe` →
//!   `subscribed`, events 1–4 of the golden run tape (sequence = tape seq + 1), then the
//!   connection drops without a close frame;
//! - second connection: the handshake must carry `event_cursor {sequence: 4}`; the
//!   stand-in then replays from *before* the cursor (2–4 again), then 5–6 and a marker
//!   journal event 7;
//! - ACP: the first POST answers 503 (a transport failure), later ones answer with result
//!   envelopes (`run.abort` ok, `approval.decide` an error).
//!
//! Checked: the exact envelopes (`request_id` fresh per attempt, `idempotency_key` stable
//! across the retry), the signals in the `file` output (each realtime event exactly once,
//! in order; the command results as signals), and schema validity.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::scratch::ScratchDir;
use axum::Router;
use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// The run of the tape.
pub const RUN: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
/// The console session.
pub const SESSION: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAW";
const TOKEN: &str = "secret-token";
const T0: i64 = 1_700_000_000_000;
/// Failure guard.
pub const GUARD: Duration = Duration::from_secs(60);

/// What the stand-in saw.
#[derive(Default)]
pub struct Seen {
    /// The first frame of each realtime connection.
    pub handshakes: Vec<Value>,
    /// The second frame of each realtime connection.
    pub subscribes: Vec<Value>,
    /// ACP command bodies, in order.
    pub commands: Vec<Value>,
    /// Requests refused for a wrong token.
    pub unauthorized: usize,
    /// Console prompts: `(session, body)`.
    pub prompts: Vec<(String, Value)>,
}

/// The stand-in daemon.
#[derive(Clone, Default)]
pub struct Fake {
    /// What it saw.
    pub seen: Arc<Mutex<Seen>>,
    connections: Arc<AtomicUsize>,
    posts: Arc<AtomicUsize>,
}

fn tape_events() -> Vec<Value> {
    let text = crate::fixture_text("palyra/golden__run_tape_basic.json");
    let entries: Vec<Value> = serde_json::from_str(&text).expect("tape");
    let mut frames: Vec<Value> = entries
        .iter()
        .map(|e| {
            let seq = e["seq"].as_u64().expect("seq");
            let event_type = e["event_type"].as_str().expect("event_type");
            let payload: Value =
                serde_json::from_str(e["payload_json"].as_str().expect("payload_json"))
                    .expect("payload");
            event_frame(seq + 1, event_type, payload)
        })
        .collect();
    frames.push(event_frame(
        frames.len() as u64 + 1,
        "journal_event",
        json!({"kind": "marker", "timestamp_unix_ms": T0 + 1000}),
    ));
    frames
}

fn event_frame(sequence: u64, event_type: &str, body: Value) -> Value {
    json!({
        "type": "event",
        "payload": {
            "schema_version": 1,
            "sequence": sequence,
            "event_id": format!("evt-{sequence}"),
            "topic": "run",
            "owner_session_id": SESSION,
            "occurred_at_unix_ms": T0 + 10 * sequence as i64,
            "payload": { "run_id": RUN, "event_type": event_type, event_type: body },
        }
    })
}

fn authorized(fake: &Fake, headers: &HeaderMap) -> bool {
    let ok = headers.get("authorization").and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {TOKEN}"));
    if !ok {
        fake.seen.lock().expect("lock").unauthorized += 1;
    }
    ok
}

async fn realtime(
    State(fake): State<Fake>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    if !authorized(&fake, &headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    upgrade.on_upgrade(move |socket| serve_realtime(socket, fake))
}

async fn recv_json(socket: &mut WebSocket) -> Option<Value> {
    loop {
        match socket.recv().await? {
            Ok(Message::Text(text)) => return serde_json::from_str(text.as_str()).ok(),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

async fn send(socket: &mut WebSocket, value: &Value) -> bool {
    socket
        .send(Message::Text(value.to_string().into()))
        .await
        .is_ok()
}

async fn serve_realtime(mut socket: WebSocket, fake: Fake) {
    let connection = fake.connections.fetch_add(1, Ordering::SeqCst);
    let Some(handshake) = recv_json(&mut socket).await else {
        return;
    };
    let cursor = handshake
        .pointer("/payload/event_cursor/sequence")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    fake.seen.lock().expect("lock").handshakes.push(handshake);
    let accepted = json!({"type": "handshake.accepted", "payload": {
        "protocol_version": 1, "client_id": "patchbay-test", "role": "operator",
        "cursor": {"sequence": cursor}, "heartbeat_interval_ms": 15000,
        "server_time_unix_ms": T0,
    }});
    if !send(&mut socket, &accepted).await {
        return;
    }
    let Some(subscribe) = recv_json(&mut socket).await else {
        return;
    };
    let subscriptions = subscribe["payload"].clone();
    fake.seen.lock().expect("lock").subscribes.push(subscribe);
    if !send(
        &mut socket,
        &json!({"type": "subscribed", "payload": {"subscriptions": [subscriptions]}}),
    )
    .await
    {
        return;
    }
    let events = tape_events();
    // First connection: 1–4, then an abrupt drop. Later ones: replay from before the
    // cursor, then the rest.
    let (from, to) = if connection == 0 {
        (1, 4)
    } else {
        (cursor.saturating_sub(2).max(1), events.len() as u64)
    };
    for frame in &events {
        let seq = frame["payload"]["sequence"].as_u64().unwrap_or(0);
        if (from..=to).contains(&seq) && !send(&mut socket, frame).await {
            return;
        }
    }
    if connection == 0 {
        // Dropped without a close frame: the connection is lost, not closed.
        return;
    }
    while recv_json(&mut socket).await.is_some() {}
}

async fn acp_command(State(fake): State<Fake>, headers: HeaderMap, body: String) -> Response {
    if !authorized(&fake, &headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let value: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    fake.seen.lock().expect("lock").commands.push(value.clone());
    if fake.posts.fetch_add(1, Ordering::SeqCst) == 0 {
        return (StatusCode::SERVICE_UNAVAILABLE, "try again").into_response();
    }
    let command = &value["command"];
    let envelope = if command["command"] == "run.abort" {
        json!({
            "request_id": command["request_id"], "command": "run.abort", "ok": true,
            "result": {"run": {"run_id": command["params"]["run_id"], "state": "aborted"}},
            "idempotency_key": command["idempotency_key"], "replayed": false,
        })
    } else {
        json!({
            "request_id": command["request_id"], "command": command["command"], "ok": false,
            "error": {"code": "approval_not_found", "message": "no such approval", "retryable": false},
            "idempotency_key": command["idempotency_key"],
        })
    };
    axum::Json(envelope).into_response()
}

/// The console NDJSON run stream of the tape: meta, one event line per entry, complete.
pub fn console_stream() -> String {
    let mut lines = vec![json!({"type": "meta", "run_id": RUN, "session_id": SESSION})];
    for frame in tape_events() {
        let event = frame["payload"]["payload"].clone();
        if event["event_type"] != "journal_event" {
            lines.push(json!({"type": "event", "event": event}));
        }
    }
    lines.push(json!({"type": "complete", "run_id": RUN, "status": "done"}));
    lines.iter().map(|l| format!("{l}\n")).collect()
}

async fn console_messages(
    State(fake): State<Fake>,
    axum::extract::Path(session): axum::extract::Path<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if !authorized(&fake, &headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let value: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    fake.seen
        .lock()
        .expect("lock")
        .prompts
        .push((session, value));
    ([("content-type", "application/x-ndjson")], console_stream()).into_response()
}

/// Starts the stand-in on `127.0.0.1:0`; returns it and its port.
pub async fn start_fake() -> (Fake, u16) {
    let fake = Fake::default();
    let app = Router::new()
        .route("/realtime/v1/ws", get(realtime))
        .route("/console/v1/acp/command", post(acp_command))
        .route(
            "/console/v1/chat/sessions/{session}/messages/stream",
            post(console_messages),
        )
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (fake, port)
}

/// A fresh temporary directory, removed when the guard is dropped.
pub fn temp_dir(tag: &str) -> ScratchDir {
    ScratchDir::new(&format!("palyra-{tag}"))
}

/// Writes the control signals and the pipeline into `dir`; returns the config path and
/// the output file.
pub fn write_pipeline(dir: &ScratchDir, port: u16) -> (PathBuf, PathBuf) {
    let controls = dir.join("controls.ndjson");
    let out = dir.join("out.ndjson");
    let lines = [
        json!({"id": "ctl-cancel-1", "type": "control.cancel", "timestamp": 1, "source": "test", "payload": {"runId": RUN, "reason": "stop"}}),
        // Palyra has no pause: refused, never posted.
        json!({"id": "ctl-pause-1", "type": "control.pause", "timestamp": 2, "source": "test", "payload": {}}),
        json!({"id": "ctl-answer-1", "type": "control.answer", "timestamp": 3, "source": "test", "payload": {"promptId": "appr-1", "value": "approve"}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&controls, text).expect("controls");
    let config = format!(
        r#"[sources.controls]
type = "file"
path = "{controls}"

[outputs.agent]
type = "palyra"
inputs = ["controls"]
url = "http://127.0.0.1:{port}"
token = "{TOKEN}"
session = "{SESSION}"
client_id = "patchbay-test"
owner_principal = "user:ops"
device_id = "dev-1"
backoff_initial_ms = 50
backoff_max_ms = 200
command_backoff_ms = 20

[outputs.out]
type = "file"
inputs = ["agent.inbound"]
path = "{out}"
"#,
        controls = controls.display(),
        out = out.display(),
    );
    let path = dir.join("palyra.toml");
    std::fs::write(&path, config).expect("config");
    (path, out)
}

fn read_signals(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Whether everything expected has arrived: the marker event and both command results.
pub fn complete(out: &Path) -> bool {
    let signals = read_signals(out);
    let has = |f: &dyn Fn(&Value) -> bool| signals.iter().any(f);
    has(&|s| s["type"] == "palyra.journal_event")
        && has(&|s| s["type"] == "palyra.command_result")
        && has(&|s| s["type"] == "error" && s["payload"]["code"] == "approval_not_found")
}

/// Waits (polling, with the failure guard) until [`complete`].
pub async fn wait_complete(out: &Path) {
    let deadline = tokio::time::Instant::now() + GUARD;
    while !complete(out) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "signals did not all arrive; got {:#?}",
            read_signals(out)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn without_request_id(mut body: Value) -> (Value, String) {
    let id = body["command"]["request_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if let Some(command) = body.get_mut("command").and_then(Value::as_object_mut) {
        command.remove("request_id");
    }
    (body, id)
}

/// Checks what the stand-in saw and what came out.
pub fn check(fake: &Fake, out: &Path) {
    let seen = fake.seen.lock().expect("lock");
    assert_eq!(seen.unauthorized, 0, "the token was sent");

    // Realtime: two connections, the second resuming after sequence 4.
    assert!(
        seen.handshakes.len() >= 2,
        "reconnected: {:?}",
        seen.handshakes
    );
    let first = &seen.handshakes[0];
    assert_eq!(first["type"], "handshake");
    assert_eq!(first["payload"]["protocol_version"], 1);
    assert_eq!(first["payload"]["client_id"], "patchbay-test");
    assert!(first["payload"].get("event_cursor").is_none(), "{first}");
    assert_eq!(
        seen.handshakes[1]["payload"]["event_cursor"],
        json!({"sequence": 4})
    );
    for subscribe in &seen.subscribes {
        assert_eq!(
            subscribe,
            &json!({"type": "subscribe", "payload": {"topics": [], "session_ids": [SESSION]}})
        );
    }

    // ACP: the cancel twice (503, then accepted), the answer once; the pause never.
    assert_eq!(seen.commands.len(), 3, "{:#?}", seen.commands);
    let client = json!({
        "protocol_version": 1, "client_id": "patchbay-test", "transport": "http",
        "owner_principal": "user:ops", "device_id": "dev-1",
        "scopes": ["runs:read", "runs:write", "approvals:read", "approvals:write"],
        "capabilities": ["run_control", "approval_bridge"],
    });
    let abort = json!({"client": client, "command": {
        "command": "run.abort",
        "params": {"run_id": RUN, "reason": "stop"},
        "idempotency_key": "patchbay:ctl-cancel-1",
    }});
    let decide = json!({"client": client, "command": {
        "command": "approval.decide",
        "params": {"approval_id": "appr-1", "approved": true, "decision": "allow",
                   "decision_scope": "once", "reason": "approved via patchbay"},
        "idempotency_key": "patchbay:ctl-answer-1",
    }});
    let (b0, id0) = without_request_id(seen.commands[0].clone());
    let (b1, id1) = without_request_id(seen.commands[1].clone());
    let (b2, id2) = without_request_id(seen.commands[2].clone());
    assert_eq!(b0, abort);
    assert_eq!(b1, abort, "the retry is the same command");
    assert_eq!(b2, decide);
    assert!(!id0.is_empty() && !id1.is_empty() && !id2.is_empty());
    assert_ne!(id0, id1, "a retry has a fresh request_id");
    assert_ne!(id1, id2);

    // Signals: every realtime event exactly once, in order, then nothing repeated.
    let signals = read_signals(out);
    let events: Vec<&Value> = signals
        .iter()
        .filter(|s| s["metadata"]["sequence"].is_u64())
        .collect();
    let sequences: Vec<u64> = events
        .iter()
        .map(|s| s["metadata"]["sequence"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(
        sequences,
        [1, 2, 3, 4, 5, 6, 7],
        "no event twice: {signals:#?}"
    );
    let types: Vec<&str> = events
        .iter()
        .map(|s| s["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        types,
        [
            "agent_state_change",
            "agent_state_change",
            "text_delta",
            "palyra.provider_turn_output",
            "palyra.message.replied",
            "completion",
            "palyra.journal_event"
        ]
    );
    for s in &events {
        assert_eq!(s["correlationId"], RUN);
        assert_eq!(s["source"], "palyra:agent");
    }
    assert!(
        !signals.iter().any(|s| s["type"]
            .as_str()
            .is_some_and(|t| t.starts_with("palyra.handshake") || t == "palyra.subscribed")),
        "connection frames are not signals"
    );
    let result = signals
        .iter()
        .find(|s| s["type"] == "palyra.command_result")
        .expect("command result");
    assert_eq!(result["correlationId"], RUN);
    assert_eq!(result["metadata"]["control_id"], "ctl-cancel-1");
    assert_eq!(result["payload"]["ok"], true);
    let refused = signals
        .iter()
        .find(|s| s["type"] == "error" && s["payload"]["code"] == "approval_not_found")
        .expect("answer error");
    assert_eq!(refused["metadata"]["control_id"], "ctl-answer-1");
    assert_eq!(
        signals
            .iter()
            .filter(|s| s["type"] == "palyra.command_result")
            .count(),
        1
    );
    for s in &signals {
        let kind = s["type"].as_str().unwrap_or("");
        if !kind.contains('.') {
            crate::assert_schema_valid(s);
        }
    }
}
