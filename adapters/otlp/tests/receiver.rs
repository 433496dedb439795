//! The `otlp` source in a running graph: the captures posted as OTLP/HTTP exporters post
//! them (JSON, protobuf, gzip) become signals; what the collector refuses is refused
//! with the collector's status codes, answered in the request's encoding.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use flate2::Compression;
use flate2::write::GzEncoder;
use patchbay_graph::{ChannelOutput, Registry, RunningGraph, SourceText, compile};
use patchbay_signal::SharedSignal;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Guards a wait (a hang fails the test; nothing is timed).
const GUARD: Duration = Duration::from_secs(30);

fn fixture(dir: &str, name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn gzip(body: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(body).expect("gzip");
    gz.finish().expect("gzip")
}

struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// One HTTP/1.1 request on its own connection; `headers` are extra header lines.
async fn request(port: u16, method: &str, path: &str, headers: &[&str], body: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.expect("write");
    // A refusal may come before the body is read: the rest may not be taken.
    let _ = stream.write_all(body).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(GUARD, stream.read_to_end(&mut out))
        .await
        .expect("an answer in time");
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let mut body = out[split + 4..].to_vec();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = unchunk(&body);
    }
    Answer { status, head, body }
}

fn unchunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(std::str::from_utf8(&data[..end]).unwrap().trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[end + 2..end + 2 + size]);
        data = &data[end + 4 + size..];
    }
}

async fn post(port: u16, path: &str, content_type: &str, extra: &[&str], body: &[u8]) -> Answer {
    let ct = format!("Content-Type: {content_type}");
    let mut headers = vec![ct.as_str()];
    headers.extend_from_slice(extra);
    request(port, "POST", path, &headers, body).await
}

/// Signals arrived at the sink until one of `kind` is among them.
async fn until(out: &mut mpsc::Receiver<SharedSignal>, kind: &str) -> Vec<SharedSignal> {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(GUARD, async {
        loop {
            let s = out.recv().await.expect("the graph runs");
            let done = s.kind == kind;
            seen.push(s);
            if done {
                return;
            }
        }
    })
    .await;
    let kinds: Vec<&str> = seen.iter().map(|s| &*s.kind).collect();
    assert!(found.is_ok(), "no {kind} in time; seen: {kinds:?}");
    seen
}

/// Held by each test while it picks its ports and runs: a port picked free by one test
/// is not taken by the other's listener in between.
static PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_become_signals_and_refusals_are_the_collectors() {
    let _ports = PORTS.lock().await;
    let (open, small, guarded) = (free_port(), free_port(), free_port());
    let mut registry = Registry::new();
    registry.adapter(&patchbay_otlp::ADAPTER);
    let mut out = ChannelOutput::register(&mut registry, "out", 4096);
    let config = format!(
        "[sources.otel]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{open}\"\ngrpc_listen = \"\"\n\n\
         [sources.small]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{small}\"\ngrpc_listen = \"\"\nmax_body = 65536\n\n\
         [sources.guarded]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{guarded}\"\ngrpc_listen = \"\"\ntoken = \"s3cret\"\n\n\
         [outputs.sink]\ntype = \"out\"\ninputs = [\"otel\", \"small\", \"guarded\"]\n"
    );
    let graph = compile(&[SourceText::new("otlp.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    for port in [open, small, guarded] {
        tokio::time::timeout(GUARD, async {
            while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the receiver listens");
    }

    // Claude Code's JSON export: `{}` back, as JSON; the prompt and the tool call come out.
    for stem in [
        "001-v1_metrics",
        "002-v1_logs",
        "003-v1_logs",
        "004-v1_metrics",
    ] {
        let path = format!("/{}", stem[4..].replace('_', "/"));
        let body = fixture("claude-json", &format!("{stem}.json"));
        let answer = post(open, &path, "application/json; charset=utf-8", &[], &body).await;
        assert_eq!(answer.status, 200, "{stem}: {}", answer.head);
        assert_eq!(answer.header("content-type"), Some("application/json"));
        assert_eq!(answer.json(), serde_json::json!({}));
    }
    let seen = until(&mut out, "tool_result").await;
    assert!(seen.iter().any(|s| s.kind == "task_dispatch"), "{seen:?}");
    assert!(seen.iter().any(|s| s.kind == "tool_call"));
    assert!(seen.iter().all(|s| s.source == "otlp:otel"));

    // The protobuf export: an empty `Export*ServiceResponse` back, as protobuf.
    for stem in ["002-v1_logs", "003-v1_logs"] {
        let path = format!("/{}", stem[4..].replace('_', "/"));
        let body = fixture("claude-protobuf", &format!("{stem}.bin"));
        let answer = post(open, &path, "application/x-protobuf", &[], &body).await;
        assert_eq!(answer.status, 200, "{stem}: {}", answer.head);
        assert_eq!(
            answer.header("content-type"),
            Some("application/x-protobuf")
        );
        assert!(answer.body.is_empty());
    }
    until(&mut out, "tool_result").await;

    // Gzip, JSON (Gemini CLI's traces) and protobuf.
    let traces = gzip(&fixture("gemini", "001-v1_traces.json"));
    let answer = post(
        open,
        "/v1/traces",
        "application/json",
        &["Content-Encoding: gzip"],
        &traces,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.head);
    until(&mut out, "otel.span").await;
    let logs = gzip(&fixture("claude-protobuf", "002-v1_logs.bin"));
    let answer = post(
        open,
        "/v1/logs",
        "application/x-protobuf",
        &["Content-Encoding: gzip"],
        &logs,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.head);
    until(&mut out, "tool_result").await;

    // What the collector refuses.
    let answer = post(open, "/v1/logs", "text/plain", &[], b"hi").await;
    assert_eq!(answer.status, 415);
    let answer = request(open, "GET", "/v1/logs", &[], b"").await;
    assert_eq!(answer.status, 405);
    assert_eq!(answer.header("allow"), Some("POST"));
    let answer = post(open, "/v2/logs", "application/json", &[], b"{}").await;
    assert_eq!(answer.status, 404);
    let answer = post(open, "/x/v1/logs", "application/json", &[], b"{}").await;
    assert_eq!(answer.status, 404);
    let whole = fixture("claude-protobuf", "002-v1_logs.bin");
    let answer = post(
        open,
        "/v1/logs",
        "application/x-protobuf",
        &[],
        &whole[..whole.len() / 2],
    )
    .await;
    assert_eq!(answer.status, 400, "{}", answer.head);
    assert_eq!(
        answer.header("content-type"),
        Some("application/x-protobuf")
    );
    // A `google.rpc.Status`: code 3 (INVALID_ARGUMENT), then the message.
    assert_eq!(&answer.body[..2], &[0x08, 3]);
    let answer = post(
        open,
        "/v1/logs",
        "application/json",
        &[],
        br#"{"resourceLogs": 5}"#,
    )
    .await;
    assert_eq!(answer.status, 400);
    let status = answer.json();
    assert_eq!(status["code"], 3, "{status}");
    assert!(
        status["message"].as_str().unwrap().contains("resourceLogs"),
        "{status}"
    );
    let answer = post(
        open,
        "/v1/traces",
        "application/json",
        &[],
        &fixture("claude-json", "002-v1_logs.json"),
    )
    .await;
    assert_eq!(answer.status, 400, "a logs export on /v1/traces");
    let answer = post(
        open,
        "/v1/logs",
        "application/json",
        &["Content-Encoding: gzip"],
        b"not gzip",
    )
    .await;
    assert_eq!(answer.status, 400);

    // Too large as sent, and a gzip bomb: 16 KiB that inflate to 16 MiB.
    let big = fixture("gemini", "002-v1_logs.json");
    assert!(big.len() > 65536);
    let answer = post(small, "/v1/logs", "application/json", &[], &big).await;
    assert_eq!(answer.status, 413, "{}", answer.head);
    let bomb = gzip(&vec![b' '; 16 << 20]);
    assert!(bomb.len() < 65536, "{}", bomb.len());
    let answer = post(
        small,
        "/v1/logs",
        "application/json",
        &["Content-Encoding: gzip"],
        &bomb,
    )
    .await;
    assert_eq!(answer.status, 413, "{}", answer.head);
    assert_eq!(answer.json()["code"], 8);
    // A body within the bound still passes there.
    let answer = post(
        small,
        "/v1/logs",
        "application/json",
        &["Content-Encoding: gzip"],
        &gzip(&fixture("claude-json", "003-v1_logs.json")),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.head);

    // The token.
    let body = fixture("claude-json", "003-v1_logs.json");
    let answer = post(guarded, "/v1/logs", "application/json", &[], &body).await;
    assert_eq!(answer.status, 401);
    let answer = post(
        guarded,
        "/v1/logs",
        "application/json",
        &["Authorization: Bearer nope"],
        &body,
    )
    .await;
    assert_eq!(answer.status, 401);
    let answer = post(
        guarded,
        "/v1/logs",
        "application/json",
        &["Authorization: Bearer s3cret"],
        &body,
    )
    .await;
    assert_eq!(answer.status, 200);
    let seen = until(&mut out, "claude_code.assistant_response").await;
    assert_eq!(seen.last().map(|s| &*s.source), Some("otlp:small"));
    let seen = until(&mut out, "claude_code.assistant_response").await;
    assert_eq!(seen.last().map(|s| &*s.source), Some("otlp:guarded"));

    // A web page is refused at the door.
    let answer = post(
        open,
        "/v1/logs",
        "application/json",
        &["Origin: http://localhost:3000"],
        &body,
    )
    .await;
    assert_eq!(answer.status, 403);

    let report = graph.stop().await.expect("graph task");
    let stats = report.telemetry.snapshot();
    let otel = stats
        .iter()
        .find(|c| c.name == "otel")
        .expect("otel's counters");
    assert_eq!(otel.bad_input, 5, "415, then four 400s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_the_graph_cannot_take_in_time_is_refused_with_retry_after() {
    let _ports = PORTS.lock().await;
    let port = free_port();
    let mut registry = Registry::new();
    registry.adapter(&patchbay_otlp::ADAPTER);
    let mut held = ChannelOutput::register(&mut registry, "held", 1);
    let config = format!(
        "[runtime]\nqueue = 1\n\n\
         [sources.otel]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{port}\"\ngrpc_listen = \"\"\ningest_timeout_ms = 100\n\n\
         [outputs.held]\ntype = \"held\"\ninputs = [\"otel\"]\nqueue = 1\n"
    );
    let graph = compile(&[SourceText::new("otlp.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    tokio::time::timeout(GUARD, async {
        while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the receiver listens");

    // Nothing reads `held`: the export's many signals cannot all go in.
    let body = fixture("claude-protobuf", "002-v1_logs.bin");
    let answer = post(port, "/v1/logs", "application/x-protobuf", &[], &body).await;
    assert_eq!(answer.status, 503, "{}", answer.head);
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert_eq!(
        answer.header("content-type"),
        Some("application/x-protobuf")
    );
    assert_eq!(&answer.body[..2], &[0x08, 14], "UNAVAILABLE");
    let answer = post(
        port,
        "/v1/logs",
        "application/json",
        &[],
        &fixture("claude-json", "003-v1_logs.json"),
    )
    .await;
    assert_eq!(answer.status, 503, "{}", answer.head);
    let status = answer.json();
    assert_eq!(status["code"], 14, "{status}");
    assert!(
        status["message"].as_str().unwrap().contains("retry later"),
        "{status}"
    );

    // Once the graph has room again, the export is taken whole.
    let (kinds_tx, mut kinds_rx) = mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Some(s) = held.recv().await {
            let _ = kinds_tx.send(s.kind.to_string());
        }
    });
    let answer = post(
        port,
        "/v1/logs",
        "application/json",
        &[],
        &fixture("claude-json", "003-v1_logs.json"),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.head);
    assert_eq!(answer.json(), serde_json::json!({}));
    // The export's last signal comes out (after what the refused tries had taken).
    let mut kinds = Vec::new();
    let _ = tokio::time::timeout(GUARD, async {
        while let Some(kind) = kinds_rx.recv().await {
            let last = kind == "claude_code.assistant_response";
            kinds.push(kind);
            if last {
                return;
            }
        }
    })
    .await;
    let report = graph.stop().await.expect("graph task");
    reader.abort();
    assert!(
        kinds
            .last()
            .is_some_and(|k| k == "claude_code.assistant_response"),
        "{kinds:?}"
    );
    let otel = report
        .telemetry
        .snapshot()
        .into_iter()
        .find(|c| c.name == "otel")
        .expect("otel's counters");
    assert!(otel.refused > 0, "refusals are counted");
}
