//! The generic `websocket` and `sse` sources end to end, run by the root test
//! `tests/generic_sources.rs` (the binary) and `adapters/websocket/tests/e2e.rs` (the graph
//! in process). Behind the `generic-e2e` feature.
//!
//! Peers written here: a WebSocket server whose first connection sends three envelopes
//! and a malformed frame then drops, which refuses connections until the test has seen the
//! source `Recovering`, then accepts and sends one more; an SSE server whose first stream
//! sends `retry:`, events 1–3 (3 malformed) and ends, and which, given `Last-Event-ID: 3`,
//! replays from event 4. Checked: every signal arrives once, in order, malformed frames
//! become `error {code: "bad_frame"}` signals and the connections live on, the headers
//! arrive, SSE resumes after the last id.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::scratch::ScratchDir;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response as WsResponse};

/// Failure guard of every wait (never a timed assertion).
pub const GUARD: Duration = Duration::from_secs(60);

/// How the scenario runs patchbay.
#[allow(async_fn_in_trait)]
pub trait Patchbay {
    /// Starts patchbay on the config file.
    async fn start(&mut self, config: &Path);
    /// Resolves once the source `name` has shown `Recovering` ("retrying in N s").
    async fn wait_recovering(&mut self, name: &str);
    /// Stops it and waits for it to end.
    async fn stop(&mut self);
}

/// A temporary directory for one test, removed when the guard is dropped.
pub fn temp_dir(tag: &str) -> ScratchDir {
    ScratchDir::new(&format!("generic-{tag}"))
}

/// The signals of an NDJSON file.
pub fn read_signals(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The WebSocket peer.
pub struct WsPeer {
    /// `ws://127.0.0.1:PORT/feed`.
    pub url: String,
    /// Connections accepted (handshakes completed).
    pub accepted: Arc<AtomicUsize>,
    /// Let connections after the first through.
    pub open: Arc<AtomicBool>,
    /// `authorization` headers seen.
    pub auth: Arc<Mutex<Vec<String>>>,
}

fn envelope(kind: &str, n: u64) -> String {
    json!({"type": kind, "source": "peer", "payload": {"n": n}}).to_string()
}

/// Starts the WebSocket peer.
#[allow(clippy::result_large_err)] // tungstenite's handshake callback signature
pub async fn start_ws() -> WsPeer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(AtomicBool::new(false));
    let auth = Arc::new(Mutex::new(Vec::new()));
    let (a, o, h) = (accepted.clone(), open.clone(), auth.clone());
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            if a.load(Ordering::SeqCst) >= 1 && !o.load(Ordering::SeqCst) {
                // Refused before the handshake: the source retries.
                drop(tcp);
                continue;
            }
            let h = h.clone();
            let callback = move |request: &Request, response: WsResponse| {
                if let Some(v) = request
                    .headers()
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                {
                    h.lock().expect("lock").push(v.to_owned());
                }
                Ok(response)
            };
            let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(tcp, callback).await else {
                continue;
            };
            let n = a.fetch_add(1, Ordering::SeqCst) + 1;
            if n == 1 {
                for frame in [
                    envelope("demo.tick", 1),
                    envelope("demo.tick", 2),
                    "this is {not json".to_owned(),
                    envelope("demo.tick", 3),
                ] {
                    let _ = ws.send(Message::Text(frame.into())).await;
                }
                let _ = ws.flush().await;
                // Dropped without a close frame: a lost connection.
                drop(ws);
            } else {
                tokio::spawn(async move {
                    let _ = ws
                        .send(Message::Text(envelope("demo.after_reconnect", 4).into()))
                        .await;
                    // Read (which answers pings) until the client goes.
                    while let Some(Ok(_)) = ws.next().await {}
                });
            }
        }
    });
    WsPeer {
        url: format!("ws://{addr}/feed"),
        accepted,
        open,
        auth,
    }
}

/// The SSE peer.
pub struct SsePeer {
    /// `http://127.0.0.1:PORT/events`.
    pub url: String,
    /// The `Last-Event-ID` of each request (`None` when absent).
    pub last_ids: Arc<Mutex<Vec<Option<String>>>>,
}

/// Starts the SSE peer.
pub async fn start_sse() -> SsePeer {
    let last_ids: Arc<Mutex<Vec<Option<String>>>> = Arc::new(Mutex::new(Vec::new()));
    let ids = last_ids.clone();
    let app = Router::new().route(
        "/events",
        get(move |headers: HeaderMap| async move {
            let last = headers
                .get("last-event-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            ids.lock().expect("lock").push(last.clone());
            let all = [
                (1, envelope("demo.event", 1)),
                (2, envelope("demo.event", 2)),
                (3, "not json either {".to_owned()),
                (4, envelope("demo.after_resume", 4)),
            ];
            let after: u64 = last.as_deref().and_then(|l| l.parse().ok()).unwrap_or(0);
            let first = after == 0;
            let mut text = String::new();
            if first {
                text.push_str(": hello\nretry: 150\n\n");
            }
            for (id, data) in all {
                // The first stream stops after 3 (then ends); a resumed one sends the rest.
                if id <= after || (first && id > 3) {
                    continue;
                }
                text.push_str(&format!("id: {id}\nevent: demo\ndata: {data}\n\n"));
            }
            let chunk =
                futures_util::stream::once(
                    async move { Ok::<_, std::io::Error>(Bytes::from(text)) },
                );
            let body = if first {
                Body::from_stream(chunk)
            } else {
                // A resumed stream stays open.
                Body::from_stream(chunk.chain(futures_util::stream::pending()))
            };
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(body)
                .expect("response")
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    SsePeer {
        url: format!("http://{addr}/events"),
        last_ids,
    }
}

/// A client source's table: `kind` connecting to `url` with a bearer `token`, retrying
/// after `backoff_initial_ms`, plus its own `extra` options.
fn client_source(
    name: &str,
    kind: &str,
    url: &str,
    token: &str,
    backoff_initial_ms: u64,
    extra: &str,
) -> String {
    format!(
        r#"
[sources.{name}]
type = "{kind}"
url = "{url}"
headers = {{ Authorization = "Bearer {token}" }}
backoff_initial_ms = {backoff_initial_ms}
connect_timeout_ms = 2000
{extra}"#
    )
}

/// The pipeline: both sources → a file.
pub fn pipeline(dir: &Path, ws: &str, sse: &str, out: &Path) -> PathBuf {
    let ws_extra = "backoff_max_ms = 400\nping_interval_ms = 200\n";
    let text = format!(
        r#"{}{}
[outputs.out]
type = "file"
path = "{}"
inputs = ["ws", "events"]
"#,
        client_source("ws", "websocket", ws, "ws-secret-token", 100, ws_extra),
        client_source("events", "sse", sse, "sse-secret-token", 5000, ""),
        out.display()
    );
    let path = dir.join("generic.toml");
    std::fs::write(&path, text).expect("config");
    path
}

/// The whole scenario.
pub async fn run_scenario(patchbay: impl Patchbay, tag: &str) {
    let ws = start_ws().await;
    let sse = start_sse().await;
    let dir = temp_dir(tag);
    // Bound after the directory, so that when a check fails patchbay is dropped (and
    // stopped) before the directory it writes into is removed.
    let mut patchbay = patchbay;
    let out = dir.join("out.jsonl");
    let config = pipeline(dir.path(), &ws.url, &sse.url, &out);
    patchbay.start(&config).await;

    // The WebSocket peer dropped the first connection and refuses the next ones: the
    // source shows it is retrying; then the peer lets it in.
    patchbay.wait_recovering("ws").await;
    ws.open.store(true, Ordering::SeqCst);

    let deadline = tokio::time::Instant::now() + GUARD;
    let signals = loop {
        let signals = read_signals(&out);
        let has = |kind: &str| signals.iter().any(|s| s["type"] == kind);
        if has("demo.after_reconnect") && has("demo.after_resume") {
            break signals;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sources did not reconnect: {signals:#?}"
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    };
    patchbay.stop().await;

    let of = |source: &str| -> Vec<(String, Value)> {
        signals
            .iter()
            // SSE signals carry their event id; the WebSocket ones do not.
            .filter(|s| s["metadata"]["sseId"].is_string() == (source == "sse:events"))
            .map(|s| {
                (
                    s["type"].as_str().unwrap_or_default().to_owned(),
                    s["payload"]["n"].clone(),
                )
            })
            .collect()
    };
    let ws_kinds: Vec<String> = of("websocket:ws").into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        ws_kinds,
        [
            "demo.tick",
            "demo.tick",
            "error",
            "demo.tick",
            "demo.after_reconnect"
        ],
        "{signals:#?}"
    );
    let sse_kinds: Vec<String> = of("sse:events").into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        sse_kinds,
        ["demo.event", "demo.event", "error", "demo.after_resume"],
        "{signals:#?}"
    );
    for source in ["websocket:ws", "sse:events"] {
        let bad = signals
            .iter()
            .find(|s| s["type"] == "error" && s["source"] == source)
            .unwrap_or_else(|| panic!("no bad_frame error from {source}"));
        assert_eq!(bad["payload"]["code"], "bad_frame", "{bad}");
        assert_eq!(bad["payload"]["severity"], "warning", "{bad}");
        crate::assert_schema_valid(bad);
    }
    // SSE metadata and the resume.
    let resumed = signals
        .iter()
        .find(|s| s["type"] == "demo.after_resume")
        .expect("resumed event");
    assert_eq!(resumed["metadata"]["sseId"], "4");
    assert_eq!(resumed["metadata"]["sseEvent"], "demo");
    let ids = sse.last_ids.lock().expect("lock").clone();
    assert_eq!(ids.first(), Some(&None), "{ids:?}");
    assert_eq!(ids.get(1), Some(&Some("3".to_owned())), "{ids:?}");
    // Headers arrived; the connection count shows one reconnect.
    assert!(ws.accepted.load(Ordering::SeqCst) >= 2);
    let auth = ws.auth.lock().expect("lock").clone();
    assert!(
        auth.iter().all(|a| a == "Bearer ws-secret-token") && !auth.is_empty(),
        "{auth:?}"
    );
    for s in &signals {
        assert!(
            !s.to_string().contains("secret-token"),
            "a token leaked: {s}"
        );
    }
}
