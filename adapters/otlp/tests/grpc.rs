//! OTLP/gRPC both ways in a running graph: the `otlp` source's `grpc_listen` takes the
//! captures as gRPC exporters send them (plain and gzip) and answers bad calls with the
//! statuses gRPC's own servers give, counted, without ever stopping serving; its
//! listener keeps the sidecar's bounds over HTTP/2; the `otlp` output's `grpc` protocol
//! reaches the crate's own source and a scripted gRPC server whose statuses decide what
//! is retried.

use std::collections::VecDeque;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, Uri};
use flate2::Compression;
use flate2::write::GzEncoder;
use http_body_util::BodyExt as _;
use patchbay_graph::telemetry::Role;
use patchbay_graph::{
    ChannelOutput, ChannelSource, ComponentStats, Registry, RunningGraph, SourceText, compile,
};
use patchbay_otlp::grpc::{self, code};
use patchbay_otlp::model::{Limits, Model, SignalKind};
use patchbay_signal::{Object, SharedSignal, Signal};
use patchbay_transport::listen::{self, Access, Listener, Origins};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Guards a wait (a hang fails the test; nothing is timed).
const GUARD: Duration = Duration::from_secs(30);

/// Held by each test while it picks its ports and runs.
static PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

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

async fn listening(port: u16) {
    tokio::time::timeout(GUARD, async {
        while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("listening");
}

/// An HTTP/2 client without TLS, by prior knowledge, as gRPC clients talk to `http://`.
fn h2_client() -> reqwest::Client {
    patchbay_transport::client_builder()
        .http2_prior_knowledge()
        .build()
        .expect("a client")
}

/// A call's answer: HTTP status, headers, message bytes, trailers.
#[derive(Debug)]
struct Answer {
    http: u16,
    headers: HeaderMap,
    body: Bytes,
    trailers: HeaderMap,
}

impl Answer {
    /// The `grpc-status`, from the trailers or (trailers-only) the headers.
    fn code(&self) -> Option<u32> {
        self.trailers
            .get("grpc-status")
            .or_else(|| self.headers.get("grpc-status"))
            .and_then(|v| v.to_str().ok()?.parse().ok())
    }

    fn message(&self) -> String {
        self.trailers
            .get("grpc-message")
            .or_else(|| self.headers.get("grpc-message"))
            .map(|v| grpc::decode_message(v.as_bytes()))
            .unwrap_or_default()
    }
}

/// One call: `body` as sent (already framed), `extra` headers besides the gRPC ones.
async fn call(
    client: &reqwest::Client,
    port: u16,
    path: &str,
    extra: &[(&str, &str)],
    body: Vec<u8>,
) -> Answer {
    let mut request = client
        .post(format!("http://127.0.0.1:{port}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body);
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let response = tokio::time::timeout(GUARD, request.send())
        .await
        .expect("an answer in time")
        .expect("an HTTP/2 answer");
    let http = response.status().as_u16();
    let response: axum::http::Response<reqwest::Body> = response.into();
    let (parts, body) = response.into_parts();
    let collected = tokio::time::timeout(GUARD, body.collect())
        .await
        .expect("the body in time")
        .expect("a body");
    Answer {
        http,
        headers: parts.headers,
        trailers: collected.trailers().cloned().unwrap_or_default(),
        body: collected.to_bytes(),
    }
}

/// Signals arrived at the sink until one of `kind` from `source` is among them.
async fn until(out: &mut mpsc::Receiver<SharedSignal>, kind: &str, source: &str) {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(GUARD, async {
        loop {
            let s = out.recv().await.expect("the graph runs");
            let done = s.kind == kind && s.source == source;
            seen.push(format!("{} from {}", s.kind, s.source));
            if done {
                return;
            }
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "no {kind} from {source} in time; seen: {seen:?}"
    );
}

fn signal(kind: &str, payload: Value, at: i64) -> Signal {
    let Value::Object(payload) = payload else {
        panic!("an object")
    };
    let payload: Object = payload;
    Signal::new(kind, "test:feed", payload).at(at)
}

fn tool_pair() -> Vec<Signal> {
    vec![
        signal(
            "tool_call",
            json!({"toolName": "Bash", "agentId": "s1", "callId": "c1", "input": {"command": "ls"}}),
            1_700_000_000_000,
        ),
        signal(
            "tool_result",
            json!({"toolName": "Bash", "agentId": "s1", "callId": "c1", "success": true,
                   "output": {"stdout": "a"}}),
            1_700_000_001_000,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_exports_become_signals_and_bad_calls_get_grpc_statuses() {
    let _ports = PORTS.lock().await;
    let ports: Vec<u16> = (0..6).map(|_| free_port()).collect();
    let (open, small, guarded) = (ports[1], ports[3], ports[5]);
    let mut registry = Registry::new();
    registry.adapter(&patchbay_otlp::ADAPTER);
    let mut out = ChannelOutput::register(&mut registry, "out", 4096);
    let config = format!(
        "[sources.otel]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{}\"\ngrpc_listen = \"127.0.0.1:{open}\"\n\n\
         [sources.small]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{}\"\ngrpc_listen = \"127.0.0.1:{small}\"\nmax_body = 65536\n\n\
         [sources.guarded]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{}\"\ngrpc_listen = \"127.0.0.1:{guarded}\"\ntoken = \"s3cret\"\n\n\
         [outputs.sink]\ntype = \"out\"\ninputs = [\"otel\", \"small\", \"guarded\"]\n",
        ports[0], ports[2], ports[4]
    );
    let graph = compile(&[SourceText::new("otlp.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    for port in [open, small, guarded] {
        listening(port).await;
    }
    let client = h2_client();

    // Claude Code's protobuf logs: OK in the trailers, after an empty answer message.
    let logs = fixture("claude-protobuf", "002-v1_logs.bin");
    let answer = call(
        &client,
        open,
        grpc::LOGS_METHOD,
        &[],
        grpc::frame(false, &logs),
    )
    .await;
    assert_eq!(answer.http, 200);
    assert_eq!(answer.headers["content-type"], "application/grpc");
    assert_eq!(
        answer.trailers.get("grpc-status").map(|v| v.as_bytes()),
        Some(&b"0"[..])
    );
    assert_eq!(
        &answer.body[..],
        &[0, 0, 0, 0, 0],
        "an empty ExportLogsServiceResponse"
    );
    until(&mut out, "tool_result", "otlp:otel").await;
    // Its metrics, gzipped.
    let metrics = fixture("claude-protobuf", "001-v1_metrics.bin");
    let answer = call(
        &client,
        open,
        grpc::METRICS_METHOD,
        &[("grpc-encoding", "gzip")],
        grpc::frame(true, &gzip(&metrics)),
    )
    .await;
    assert_eq!(answer.code(), Some(code::OK), "{answer:?}");
    until(&mut out, "otel.metric", "otlp:otel").await;
    // Spans: a tool call's `execute_tool` span.
    let encoded = patchbay_otlp::encode::Encoder::new("svc").encode(&tool_pair());
    let spans = patchbay_otlp::encode::traces_protobuf(&encoded.traces.expect("a span"));
    let answer = call(
        &client,
        open,
        grpc::TRACES_METHOD,
        &[],
        grpc::frame(false, &spans),
    )
    .await;
    assert_eq!(answer.code(), Some(code::OK), "{answer:?}");
    until(&mut out, "tool_result", "otlp:otel").await;

    // Bad calls on `otel`, each counted as bad input.
    let half = grpc::frame(false, &logs[..logs.len() / 2]);
    let mut truncated_frame = grpc::frame(false, &logs);
    truncated_frame.truncate(truncated_frame.len() / 2);
    let mut flag_two = grpc::frame(false, &logs);
    flag_two[0] = 2;
    // (method, extra headers, body, expected status)
    type BadCall<'a> = (&'a str, Vec<(&'a str, &'a str)>, Vec<u8>, u32);
    let bad: Vec<BadCall> = vec![
        // A truncated protobuf message in a whole frame: it does not decode.
        (grpc::LOGS_METHOD, vec![], half, code::INVALID_ARGUMENT),
        // A frame cut short, as gRPC's servers answer it.
        (grpc::LOGS_METHOD, vec![], truncated_frame, code::INTERNAL),
        (grpc::LOGS_METHOD, vec![], vec![0, 0], code::INTERNAL),
        // A compressed flag without a grpc-encoding, and a flag that is no flag.
        (
            grpc::LOGS_METHOD,
            vec![],
            grpc::frame(true, &logs),
            code::INTERNAL,
        ),
        (grpc::LOGS_METHOD, vec![], flag_two, code::INTERNAL),
        // A logs message where spans were expected is read as spans: wrong shape.
        (
            grpc::TRACES_METHOD,
            vec![],
            grpc::frame(false, b"\x0a\x03\x0a\x01\xff"),
            code::INVALID_ARGUMENT,
        ),
        // gzip that is not.
        (
            grpc::LOGS_METHOD,
            vec![("grpc-encoding", "gzip")],
            grpc::frame(true, b"not gzip"),
            code::INVALID_ARGUMENT,
        ),
        // A compression it does not know.
        (
            grpc::LOGS_METHOD,
            vec![("grpc-encoding", "snappy")],
            grpc::frame(true, &logs),
            code::UNIMPLEMENTED,
        ),
        // Unknown methods.
        (
            "/opentelemetry.proto.collector.logs.v1.LogsService/Nope",
            vec![],
            grpc::frame(false, &logs),
            code::UNIMPLEMENTED,
        ),
        (
            "/v1/logs",
            vec![],
            grpc::frame(false, &logs),
            code::UNIMPLEMENTED,
        ),
    ];
    let refused = bad.len() as u64;
    for (path, headers, body, expected) in bad {
        let answer = call(&client, open, path, &headers, body).await;
        assert_eq!(answer.http, 200, "{path} {headers:?}");
        assert_eq!(
            answer.code(),
            Some(expected),
            "{path} {headers:?}: {answer:?}"
        );
        assert!(!answer.message().is_empty(), "{answer:?}");
        assert!(answer.body.is_empty(), "trailers-only: {answer:?}");
        if expected == code::UNIMPLEMENTED && headers.is_empty() {
            assert!(answer.message().contains("unknown method"), "{answer:?}");
        }
    }
    // Not gRPC at all: HTTP 415, as gRPC's protocol says.
    let response = client
        .post(format!("http://127.0.0.1:{open}{}", grpc::LOGS_METHOD))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // A web page, and another host: refused at the door, as gRPC says it.
    let answer = call(
        &client,
        open,
        grpc::LOGS_METHOD,
        &[("origin", "http://localhost:3000")],
        grpc::frame(false, &logs),
    )
    .await;
    assert_eq!(answer.code(), Some(code::PERMISSION_DENIED), "{answer:?}");
    let answer = call(
        &client,
        open,
        grpc::LOGS_METHOD,
        &[("host", "evil.example:4317")],
        grpc::frame(false, &logs),
    )
    .await;
    assert_eq!(answer.code(), Some(code::PERMISSION_DENIED), "{answer:?}");

    // Past `max_body`: as sent, and a gzip bomb (16 KiB that inflate to 16 MiB).
    let big = fixture("gemini", "002-v1_logs.json");
    assert!(big.len() > 65536);
    let answer = call(
        &client,
        small,
        grpc::LOGS_METHOD,
        &[],
        grpc::frame(false, &big),
    )
    .await;
    assert_eq!(answer.code(), Some(code::RESOURCE_EXHAUSTED), "{answer:?}");
    let bomb = gzip(&vec![b' '; 16 << 20]);
    assert!(bomb.len() < 65536, "{}", bomb.len());
    let answer = call(
        &client,
        small,
        grpc::LOGS_METHOD,
        &[("grpc-encoding", "gzip")],
        grpc::frame(true, &bomb),
    )
    .await;
    assert_eq!(answer.code(), Some(code::RESOURCE_EXHAUSTED), "{answer:?}");
    // Within the bound it passes there.
    let answer = call(
        &client,
        small,
        grpc::LOGS_METHOD,
        &[("grpc-encoding", "gzip")],
        grpc::frame(true, &gzip(&logs)),
    )
    .await;
    assert_eq!(answer.code(), Some(code::OK), "{answer:?}");
    until(&mut out, "tool_result", "otlp:small").await;

    // The token, from the `authorization` metadata.
    for auth in [None, Some("Bearer nope"), Some("s3cret")] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let answer = call(
            &client,
            guarded,
            grpc::LOGS_METHOD,
            &headers,
            grpc::frame(false, &logs),
        )
        .await;
        assert_eq!(
            answer.code(),
            Some(code::UNAUTHENTICATED),
            "{auth:?}: {answer:?}"
        );
        assert!(!answer.message().contains("s3cret"));
    }
    let answer = call(
        &client,
        guarded,
        grpc::LOGS_METHOD,
        &[("authorization", "Bearer s3cret")],
        grpc::frame(false, &logs),
    )
    .await;
    assert_eq!(answer.code(), Some(code::OK), "{answer:?}");
    until(&mut out, "tool_result", "otlp:guarded").await;

    // After all that, `otel` still serves, on the same connection.
    let answer = call(
        &client,
        open,
        grpc::LOGS_METHOD,
        &[],
        grpc::frame(false, &logs),
    )
    .await;
    assert_eq!(answer.code(), Some(code::OK), "{answer:?}");
    until(&mut out, "tool_result", "otlp:otel").await;

    let report = graph.stop().await.expect("graph task");
    let stats = |name: &str| report.telemetry.component(name).expect("stats");
    let otel = stats("otel");
    assert_eq!(
        otel.bad_input,
        refused + 1,
        "the bad calls and the 415: {otel:?}"
    );
    assert_eq!(
        otel.http_refused.get("forbidden_origin"),
        Some(&1),
        "{otel:?}"
    );
    assert_eq!(
        otel.http_refused.get("forbidden_host"),
        Some(&1),
        "{otel:?}"
    );
    assert_eq!(otel.gauges.get("grpc_port"), Some(&f64::from(open)));
    assert_eq!(stats("small").bad_input, 2);
    let guarded = stats("guarded");
    assert_eq!(
        guarded.http_refused.get("unauthorized"),
        Some(&3),
        "{guarded:?}"
    );
    assert_eq!(guarded.bad_input, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_export_the_graph_cannot_take_in_time_is_unavailable_with_a_retry_delay() {
    let _ports = PORTS.lock().await;
    let (http, port) = (free_port(), free_port());
    let mut registry = Registry::new();
    registry.adapter(&patchbay_otlp::ADAPTER);
    let mut held = ChannelOutput::register(&mut registry, "held", 1);
    let config = format!(
        "[runtime]\nqueue = 1\n\n\
         [sources.otel]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{http}\"\ngrpc_listen = \"127.0.0.1:{port}\"\ningest_timeout_ms = 100\n\n\
         [outputs.held]\ntype = \"held\"\ninputs = [\"otel\"]\nqueue = 1\n"
    );
    let graph = compile(&[SourceText::new("otlp.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    listening(port).await;
    let client = h2_client();

    // Nothing reads `held`: the export's many signals cannot all go in.
    let logs = fixture("claude-protobuf", "002-v1_logs.bin");
    let answer = call(
        &client,
        port,
        grpc::LOGS_METHOD,
        &[],
        grpc::frame(false, &logs),
    )
    .await;
    assert_eq!(answer.code(), Some(code::UNAVAILABLE), "{answer:?}");
    assert!(answer.message().contains("retry later"), "{answer:?}");
    let details = answer
        .headers
        .get("grpc-status-details-bin")
        .expect("a RetryInfo");
    assert_eq!(
        grpc::retry_delay(details.as_bytes()),
        Some(Duration::from_secs(1))
    );

    // Once the graph has room again, the export is taken whole.
    let reader = tokio::spawn(async move {
        let mut kinds = Vec::new();
        while let Some(s) = held.recv().await {
            let last = s.kind == "tool_result";
            kinds.push(s.kind.to_string());
            if last {
                break;
            }
        }
        kinds
    });
    let answer = call(
        &client,
        port,
        grpc::LOGS_METHOD,
        &[],
        grpc::frame(false, &logs),
    )
    .await;
    assert_eq!(answer.code(), Some(code::OK), "{answer:?}");
    let kinds = tokio::time::timeout(GUARD, reader)
        .await
        .expect("in time")
        .expect("the reader");
    assert_eq!(kinds.last().map(String::as_str), Some("tool_result"));
    let report = graph.stop().await.expect("graph task");
    let otel = report.telemetry.component("otel").expect("stats");
    assert!(otel.refused > 0, "refusals are counted: {otel:?}");
}

/// Reads what a connection gets until it is closed (or 64 KiB came).
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(GUARD, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    out.extend_from_slice(&buf[..n]);
                    if out.len() > 65536 {
                        return;
                    }
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the connection was not closed");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_listener_keeps_the_sidecars_bounds_over_http2() {
    let _ports = PORTS.lock().await;
    let (http, port) = (free_port(), free_port());
    let mut registry = Registry::new();
    registry.adapter(&patchbay_otlp::ADAPTER);
    let mut out = ChannelOutput::register(&mut registry, "out", 4096);
    let config = format!(
        "[sources.otel]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{http}\"\ngrpc_listen = \"127.0.0.1:{port}\"\n\
         header_timeout_ms = 300\nmax_connections = 1\n\n\
         [outputs.sink]\ntype = \"out\"\ninputs = [\"otel\"]\n"
    );
    let graph = compile(&[SourceText::new("otlp.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    listening(port).await;

    // Each raw client below retries while the one connection allowed is still held by the
    // one before it (closing on both ends is not one instant): it is told so with a
    // GOAWAY saying "too many connections".
    let too_many = |got: &[u8]| String::from_utf8_lossy(got).contains("too many connections");
    // A client that connects and says nothing is closed (a slowloris holds nothing).
    // (It got the server's SETTINGS, then the close: counted as `header_timeout`.)
    tokio::time::timeout(GUARD, async {
        loop {
            let mut silent = TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect");
            if !too_many(&read_until_closed(&mut silent).await) {
                return;
            }
        }
    })
    .await
    .expect("in time");
    // A client speaking HTTP/1 to the gRPC port: not HTTP/2, closed.
    tokio::time::timeout(GUARD, async {
        loop {
            let mut http1 = TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect");
            let _ = http1
                .write_all(
                    b"POST /v1/logs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n",
                )
                .await;
            if !too_many(&read_until_closed(&mut http1).await) {
                return;
            }
        }
    })
    .await
    .expect("in time");

    // A gRPC client holds the one connection; another is told to go away.
    let client = h2_client();
    let logs = fixture("claude-protobuf", "002-v1_logs.bin");
    tokio::time::timeout(GUARD, async {
        loop {
            let sent = client
                .post(format!("http://127.0.0.1:{port}{}", grpc::LOGS_METHOD))
                .header("content-type", "application/grpc")
                .body(grpc::frame(false, &logs))
                .send()
                .await;
            if sent.is_ok_and(|r| r.headers().get("grpc-status").is_none()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a call in time");
    until(&mut out, "tool_result", "otlp:otel").await;
    let mut second = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    second
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .expect("write");
    let got = read_until_closed(&mut second).await;
    // An empty SETTINGS frame, then a GOAWAY (type 7) with ENHANCE_YOUR_CALM and why.
    assert_eq!(&got[..9], &[0, 0, 0, 4, 0, 0, 0, 0, 0], "{got:?}");
    assert_eq!(got[12], 7, "{got:?}");
    assert_eq!(&got[18..26], &[0, 0, 0, 0, 0, 0, 0, 0x0b], "{got:?}");
    assert!(too_many(&got));
    // The first connection still serves.
    let answer = call(
        &client,
        port,
        grpc::LOGS_METHOD,
        &[],
        grpc::frame(false, &logs),
    )
    .await;
    assert_eq!(answer.code(), Some(code::OK), "{answer:?}");

    let report = graph.stop().await.expect("graph task");
    let otel = report.telemetry.component("otel").expect("stats");
    assert!(
        otel.http_refused
            .get("header_timeout")
            .is_some_and(|n| *n >= 1),
        "{otel:?}"
    );
    assert_eq!(otel.http_refused.get("not_http2"), Some(&1), "{otel:?}");
    assert!(
        otel.http_refused
            .get("too_many_connections")
            .is_some_and(|n| *n >= 1),
        "{otel:?}"
    );
}

/// What the scripted gRPC server saw of one call.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: HeaderMap,
    message: Vec<u8>,
}

/// A gRPC server on `listen::serve_h2c` that answers calls from a script (status,
/// message, retry delay), then OK, and records them.
#[derive(Clone, Default)]
struct Stub(Arc<Mutex<StubState>>);

/// The answers still to give (status, message, retry delay) and the calls seen.
type StubState = (VecDeque<(u32, &'static str, Option<Duration>)>, Vec<Seen>);

impl Stub {
    fn script(answers: &[(u32, &'static str, Option<Duration>)]) -> Stub {
        let stub = Stub::default();
        stub.0.lock().unwrap().0 = answers.iter().copied().collect();
        stub
    }

    fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap().1.clone()
    }

    async fn serve(&self, port: u16) {
        let app = Router::new().fallback(stub_answer).with_state(self.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("the stub binds");
        let door = Listener {
            name: "stub".into(),
            limits: listen::Limits::default(),
            access: Access::new(
                listener.local_addr().expect("an address"),
                None,
                Origins::None,
            ),
            stats: Arc::new(ComponentStats::new("stub", "stub", Role::Source)),
            refusal: listen::text_refusal,
        };
        tokio::spawn(listen::serve_h2c(
            listener,
            app,
            door,
            std::future::pending(),
        ));
    }

    async fn until(&self, n: usize) -> Vec<Seen> {
        let got = tokio::time::timeout(GUARD, async {
            loop {
                let seen = self.seen();
                if seen.len() >= n {
                    return seen;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        got.unwrap_or_else(|_| panic!("not {n} calls in time: {:?}", self.seen()))
    }
}

async fn stub_answer(
    State(stub): State<Stub>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let (compressed, message) = grpc::unframe(&body).expect("one message");
    let message = if compressed {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(message), &mut out)
            .expect("gzip");
        out
    } else {
        message.to_vec()
    };
    let mut state = stub.0.lock().unwrap();
    state.1.push(Seen {
        path: uri.path().to_owned(),
        headers: headers.clone(),
        message,
    });
    let (status, text, delay) = state.0.pop_front().unwrap_or((code::OK, "", None));
    let mut response = Response::builder()
        .status(200)
        .header("content-type", "application/grpc");
    if status == code::OK {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        let body = http_body_util::Full::new(Bytes::from(grpc::frame(false, b"")))
            .with_trailers(std::future::ready(Some(Ok(trailers))));
        return response.body(Body::new(body)).expect("a response");
    }
    response = response
        .header("grpc-status", status.to_string())
        .header("grpc-message", grpc::encode_message(text));
    if let Some(delay) = delay {
        response = response.header(
            "grpc-status-details-bin",
            grpc::retry_details(status, text, delay),
        );
    }
    response.body(Body::empty()).expect("a response")
}

/// A graph `feed → [outputs]` (plus whatever `extra` declares).
fn start(
    extra: &str,
) -> (
    mpsc::Sender<Signal>,
    mpsc::Receiver<SharedSignal>,
    RunningGraph,
) {
    let mut registry = Registry::new();
    registry.adapter(&patchbay_otlp::ADAPTER);
    let feed = ChannelSource::register(&mut registry, "feed", 1024);
    let seen = ChannelOutput::register(&mut registry, "seen", 4096);
    let config = format!("[sources.feed]\ntype = \"feed\"\n\n{extra}");
    let graph = compile(&[SourceText::new("exporter.toml", config)], &registry)
        .unwrap_or_else(|e| panic!("compiles: {e:?}"));
    (feed, seen, RunningGraph::spawn(graph))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_output_reaches_its_own_source_and_a_grpc_server() {
    let _ports = PORTS.lock().await;
    let (back_http, back, stub_port) = (free_port(), free_port(), free_port());
    let stub = Stub::default();
    stub.serve(stub_port).await;
    let (feed, mut seen, graph) = start(&format!(
        "[sources.back]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{back_http}\"\ngrpc_listen = \"127.0.0.1:{back}\"\ntoken = \"t0k\"\n\n\
         [outputs.to_self]\ntype = \"otlp\"\ninputs = [\"feed\"]\nprotocol = \"grpc\"\nendpoint = \"http://127.0.0.1:{back}\"\n\
         headers = {{ Authorization = \"Bearer t0k\" }}\ngzip = true\nbatch_timeout_ms = 200\n\n\
         [outputs.to_stub]\ntype = \"otlp\"\ninputs = [\"feed\"]\nprotocol = \"grpc\"\nendpoint = \"http://127.0.0.1:{stub_port}/ignored\"\nbatch_timeout_ms = 200\n\n\
         [outputs.sink]\ntype = \"seen\"\ninputs = [\"back\"]\n"
    ));
    listening(back).await;
    let sent = tool_pair();
    for s in sent.clone() {
        feed.send(s).await.expect("the graph runs");
    }

    // The stub: one logs call with the two records, one traces call with the span.
    let calls = stub.until(2).await;
    let logs = calls
        .iter()
        .find(|c| c.path == grpc::LOGS_METHOD)
        .unwrap_or_else(|| panic!("{calls:?}"));
    let traces = calls
        .iter()
        .find(|c| c.path == grpc::TRACES_METHOD)
        .unwrap_or_else(|| panic!("{calls:?}"));
    assert_eq!(logs.headers["content-type"], "application/grpc");
    assert_eq!(logs.headers["te"], "trailers");
    assert!(logs.headers.contains_key("grpc-timeout"));
    assert!(!logs.headers.contains_key("grpc-encoding"));
    let limits = Limits::default();
    match patchbay_otlp::protobuf::decode(SignalKind::Logs, &logs.message, &limits) {
        Ok(Model::Logs(l)) => {
            let names: Vec<String> = l
                .resources
                .iter()
                .flat_map(|r| &r.scopes)
                .flat_map(|s| &s.items)
                .map(|r| r.event_name.clone())
                .collect();
            assert_eq!(names, ["tool_call", "tool_result"]);
        }
        other => panic!("{other:?}"),
    }
    match patchbay_otlp::protobuf::decode(SignalKind::Traces, &traces.message, &limits) {
        Ok(Model::Traces(t)) => {
            let span = &t.resources[0].scopes[0].items[0];
            assert_eq!(span.name, "execute_tool Bash");
        }
        other => panic!("{other:?}"),
    }

    // Its own source: the records come back as the signals they were.
    let mut back_signals: Vec<SharedSignal> = Vec::new();
    tokio::time::timeout(GUARD, async {
        while back_signals.len() < 4 {
            back_signals.push(seen.recv().await.expect("the graph runs"));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not back in time: {back_signals:?}"));
    for original in &sent {
        let back = back_signals
            .iter()
            .find(|s| s.id == original.id)
            .unwrap_or_else(|| panic!("{} not back: {back_signals:?}", original.kind));
        assert_eq!(back.kind, original.kind);
        assert_eq!(
            Value::Object(back.payload.duplicate().into()),
            Value::Object(original.payload.duplicate().into()),
        );
    }
    drop(feed);
    let report = graph.stop().await.expect("the graph stops");
    for name in ["to_self", "to_stub"] {
        let stats = report.telemetry.component(name).expect("stats");
        assert_eq!((stats.sent, stats.bad_input), (2, 0), "{name}: {stats:?}");
    }
    let back = report.telemetry.component("back").expect("stats");
    assert_eq!(back.bad_input, 0, "{back:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_statuses_decide_what_the_output_retries() {
    let _ports = PORTS.lock().await;
    let port = free_port();
    let stub = Stub::script(&[
        // Retried: UNAVAILABLE, and RESOURCE_EXHAUSTED with a RetryInfo.
        (code::UNAVAILABLE, "busy", None),
        (
            code::RESOURCE_EXHAUSTED,
            "slow down",
            Some(Duration::from_millis(50)),
        ),
        // The first signal delivered; then refused without retry: RESOURCE_EXHAUSTED
        // without a RetryInfo (too large stays too large) and INVALID_ARGUMENT.
        (code::OK, "", None),
        (code::RESOURCE_EXHAUSTED, "too large", None),
        (code::INVALID_ARGUMENT, "bad attribute", None),
    ]);
    stub.serve(port).await;
    let (feed, _seen, graph) = start(&format!(
        "[outputs.otel]\ntype = \"otlp\"\ninputs = [\"feed\"]\nprotocol = \"grpc\"\nendpoint = \"http://127.0.0.1:{port}\"\n\
         batch_max = 1\nbatch_timeout_ms = 0\nbackoff_initial_ms = 10\nbackoff_max_ms = 200\n"
    ));
    let note = |n: u64| signal("note", json!({"n": n}), 1_700_000_000_000 + n as i64);
    feed.send(note(0)).await.expect("the graph runs");
    stub.until(3).await;
    feed.send(note(1)).await.expect("the graph runs");
    stub.until(4).await;
    feed.send(note(2)).await.expect("the graph runs");
    stub.until(5).await;
    // A tool call and its result (one batch each): both logs calls pass, the span's
    // traces call is refused, and the span counted as refused.
    {
        let mut state = stub.0.lock().unwrap();
        state.0.push_back((code::OK, "", None));
        state.0.push_back((code::OK, "", None));
        state
            .0
            .push_back((code::INVALID_ARGUMENT, "no spans here", None));
    }
    for s in tool_pair() {
        feed.send(s).await.expect("the graph runs");
    }
    stub.until(8).await;
    drop(feed);
    let report = graph.wait().await.expect("the graph ends");
    let stats = report.telemetry.component("otel").expect("stats");
    let calls = stub.seen();
    assert_eq!(calls.len(), 8, "nothing refused was retried: {calls:?}");
    assert_eq!(calls[7].path, grpc::TRACES_METHOD, "{calls:?}");
    assert_eq!(stats.sent, 3, "note 0 and the tool pair: {stats:?}");
    assert_eq!(stats.bad_input, 3, "notes 1 and 2, and the span: {stats:?}");
    let error = stats.last_error.unwrap_or_default();
    assert!(
        error.contains("gRPC 3 INVALID_ARGUMENT: no spans here"),
        "{error}"
    );
}

/// An HPACK literal header field without indexing, with a new name.
fn literal(name: &str, value: &str, out: &mut Vec<u8>) {
    out.push(0);
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    out.push(value.len() as u8);
    out.extend_from_slice(value.as_bytes());
}

/// An HTTP/2 frame: length, type, flags, stream, payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_told_to_go_away_then_closed() {
    let _ports = PORTS.lock().await;
    let (http, port) = (free_port(), free_port());
    let mut registry = Registry::new();
    registry.adapter(&patchbay_otlp::ADAPTER);
    let _out = ChannelOutput::register(&mut registry, "out", 16);
    let config = format!(
        "[sources.otel]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{http}\"\ngrpc_listen = \"127.0.0.1:{port}\"\n\
         idle_timeout_ms = 200\nheader_timeout_ms = 1000\n\n\
         [outputs.sink]\ntype = \"out\"\ninputs = [\"otel\"]\n"
    );
    let graph = compile(&[SourceText::new("otlp.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    listening(port).await;

    // One call by hand: the preface, SETTINGS, the request's HEADERS, and an empty
    // ExportLogsServiceRequest as its DATA.
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(4, 0, 0, &[]));
    let mut head = Vec::new();
    literal(":method", "POST", &mut head);
    literal(":scheme", "http", &mut head);
    literal(":path", grpc::LOGS_METHOD, &mut head);
    literal(":authority", "127.0.0.1", &mut head);
    literal("content-type", "application/grpc", &mut head);
    literal("te", "trailers", &mut head);
    out.extend(h2_frame(1, 0x4, 1, &head));
    out.extend(h2_frame(0, 0x1, 1, &grpc::frame(false, b"")));
    stream.write_all(&out).await.expect("write");

    // Then it stays quiet: the server answers, once idle says GOAWAY (and a PING), and,
    // the PING never acknowledged, closes the connection itself a header timeout later.
    let got = read_until_closed(&mut stream).await;
    let mut frames = Vec::new();
    let mut rest = &got[..];
    while rest.len() >= 9 {
        let length = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        let (kind, stream_id) = (
            rest[3],
            u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]) & 0x7fff_ffff,
        );
        frames.push((kind, stream_id));
        rest = &rest[(9 + length).min(rest.len())..];
    }
    let answered = frames.iter().position(|&f| f == (1, 1));
    let gone = frames.iter().position(|&(kind, _)| kind == 7);
    assert!(answered.is_some(), "the call was answered: {frames:?}");
    assert!(
        gone.is_some_and(|g| Some(g) > answered),
        "a GOAWAY after the answer: {frames:?}"
    );
    let report = graph.stop().await.expect("graph task");
    let otel = report.telemetry.component("otel").expect("stats");
    assert_eq!(otel.bad_input, 0, "{otel:?}");
    assert!(
        otel.http_refused.is_empty(),
        "an idle close is no refusal: {otel:?}"
    );
}
