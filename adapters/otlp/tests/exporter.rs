//! The `otlp` output in a running graph: exporting to the crate's own `otlp` source and
//! to a stub receiver that records what it gets (protobuf, JSON, gzip); retried on 503
//! (after its `Retry-After`, in seconds or as an HTTP date) and while the receiver is
//! down, never on 400; a refused traces request counts its spans as refused.

use std::collections::VecDeque;
use std::io::Read as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Response, Uri};
use patchbay_graph::{ChannelOutput, ChannelSource, Registry, RunningGraph, SourceText, compile};
use patchbay_otlp::model::{AnyValue, Limits, LogRecord, Model, SignalKind, Span};
use patchbay_otlp::protobuf;
use patchbay_signal::{Object, SharedSignal, Signal};
use serde_json::{Value, json};
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
            json!({"toolName": "Bash", "agentId": "s1", "callId": "c1", "success": false,
                   "output": {"error": "exit 1"}}),
            1_700_000_002_000,
        ),
    ]
}

fn note(n: u64) -> Signal {
    signal("note", json!({"n": n}), 1_700_000_000_000 + n as i64)
}

/// One request the stub got.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    content_type: String,
    gzip: bool,
    authorization: Option<String>,
    body: Vec<u8>,
    at: Instant,
    wall: std::time::SystemTime,
}

impl Seen {
    fn model(&self) -> Model {
        let body = if self.gzip {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&self.body[..])
                .read_to_end(&mut out)
                .expect("a gzip body");
            out
        } else {
            self.body.clone()
        };
        let kind = SignalKind::from_path(&self.path).unwrap_or_else(|| {
            if self.path.ends_with("/v1/logs") {
                SignalKind::Logs
            } else {
                SignalKind::Traces
            }
        });
        let limits = Limits::default();
        if self.content_type == "application/json" {
            Model::from_json(kind, &body, &limits).expect("OTLP/JSON")
        } else {
            assert_eq!(self.content_type, "application/x-protobuf");
            protobuf::decode(kind, &body, &limits).expect("OTLP protobuf")
        }
    }

    fn records(&self) -> Vec<LogRecord> {
        match self.model() {
            Model::Logs(l) => l
                .resources
                .into_iter()
                .flat_map(|r| r.scopes)
                .flat_map(|s| s.items)
                .collect(),
            other => panic!("not logs: {other:?}"),
        }
    }

    fn spans(&self) -> Vec<Span> {
        match self.model() {
            Model::Traces(t) => t
                .resources
                .into_iter()
                .flat_map(|r| r.scopes)
                .flat_map(|s| s.items)
                .collect(),
            other => panic!("not traces: {other:?}"),
        }
    }
}

/// The stub's script (status, `Retry-After`, body), then 200s; and what it saw.
#[derive(Default)]
struct StubState {
    answers: VecDeque<(u16, Option<&'static str>, &'static str)>,
    seen: Vec<Seen>,
}

#[derive(Clone, Default)]
struct Stub(Arc<Mutex<StubState>>);

impl Stub {
    fn script(answers: &[(u16, Option<&'static str>, &'static str)]) -> Stub {
        let stub = Stub::default();
        stub.0.lock().unwrap().answers = answers.iter().copied().collect();
        stub
    }

    fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap().seen.clone()
    }

    async fn serve(&self, port: u16) {
        let app = Router::new().fallback(answer).with_state(self.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("the stub binds");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
    }

    /// Waits until the stub saw `n` requests matching `which`.
    async fn until(&self, n: usize, which: impl Fn(&Seen) -> bool) -> Vec<Seen> {
        let got = tokio::time::timeout(GUARD, async {
            loop {
                let seen: Vec<Seen> = self.seen().into_iter().filter(|s| which(s)).collect();
                if seen.len() >= n {
                    return seen;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        got.unwrap_or_else(|_| panic!("not {n} requests in time: {:?}", self.seen()))
    }
}

async fn answer(
    State(stub): State<Stub>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let mut state = stub.0.lock().unwrap();
    state.seen.push(Seen {
        path: uri.path().to_owned(),
        content_type: header("content-type").unwrap_or_default(),
        gzip: header("content-encoding").as_deref() == Some("gzip"),
        authorization: header("authorization"),
        body: body.to_vec(),
        at: Instant::now(),
        wall: std::time::SystemTime::now(),
    });
    let (status, retry_after, text) = state.answers.pop_front().unwrap_or((200, None, ""));
    let mut response = Response::builder().status(status);
    if let Some(after) = retry_after {
        response = response.header("retry-after", after);
    }
    response
        .header("content-type", "application/json")
        .body(Body::from(if text.is_empty() { "{}" } else { text }))
        .expect("a response")
}

fn attr(attributes: &[patchbay_otlp::model::KeyValue], key: &str) -> Option<AnyValue> {
    attributes
        .iter()
        .find(|a| a.key == key)
        .map(|a| a.value.clone())
}

fn text(s: &str) -> Option<AnyValue> {
    Some(AnyValue::Str(s.into()))
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
async fn exports_decode_as_protobuf_json_and_gzip_and_in_its_own_source() {
    let _ports = PORTS.lock().await;
    let (back, stub_port) = (free_port(), free_port());
    let stub = Stub::default();
    stub.serve(stub_port).await;
    let (feed, mut seen, graph) = start(&format!(
        "[sources.back]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{back}\"\ngrpc_listen = \"\"\n\n\
         [outputs.to_self]\ntype = \"otlp\"\ninputs = [\"feed\"]\nendpoint = \"http://127.0.0.1:{back}\"\nbatch_timeout_ms = 200\n\n\
         [outputs.to_pb]\ntype = \"otlp\"\ninputs = [\"feed\"]\nendpoint = \"http://127.0.0.1:{stub_port}/pb\"\nbatch_timeout_ms = 200\nservice_name = \"bench\"\n\n\
         [outputs.to_json]\ntype = \"otlp\"\ninputs = [\"feed\"]\nendpoint = \"http://127.0.0.1:{stub_port}/json/\"\nprotocol = \"http/json\"\ngzip = true\nheaders = {{ Authorization = \"Bearer t0k\" }}\nbatch_timeout_ms = 200\n\n\
         [outputs.sink]\ntype = \"seen\"\ninputs = [\"back\"]\n"
    ));
    listening(back).await;
    let sent = tool_pair();
    for s in sent.clone() {
        feed.send(s).await.expect("the graph runs");
    }

    // The stub: per encoding, the two records in order and one `execute_tool` span.
    for (prefix, gzip) in [("/pb/", false), ("/json/", true)] {
        let logs = stub
            .until(1, |s| {
                s.path.starts_with(prefix) && s.path.ends_with("/v1/logs")
            })
            .await;
        let traces = stub
            .until(1, |s| {
                s.path.starts_with(prefix) && s.path.ends_with("/v1/traces")
            })
            .await;
        assert_eq!(logs[0].gzip, gzip);
        assert_eq!(traces[0].gzip, gzip);
        if gzip {
            assert_eq!(logs[0].content_type, "application/json");
            assert_eq!(logs[0].authorization.as_deref(), Some("Bearer t0k"));
        } else {
            assert_eq!(logs[0].authorization, None);
        }
        let records: Vec<LogRecord> = logs.iter().flat_map(Seen::records).collect();
        let names: Vec<&str> = records.iter().map(|r| r.event_name.as_str()).collect();
        assert_eq!(names, ["tool_call", "tool_result"], "{prefix}");
        assert_eq!(attr(&records[0].attributes, "gen_ai.agent.id"), text("s1"));
        assert_eq!(
            attr(&records[0].attributes, "signal.source"),
            text("test:feed")
        );
        assert_eq!(records[0].time_unix_nano, 1_700_000_000_000_000_000);
        let spans: Vec<Span> = traces.iter().flat_map(Seen::spans).collect();
        assert_eq!(spans.len(), 1, "{spans:?}");
        let span = &spans[0];
        assert_eq!(span.name, "execute_tool Bash");
        assert_eq!(
            attr(&span.attributes, "gen_ai.operation.name"),
            text("execute_tool")
        );
        assert_eq!(attr(&span.attributes, "gen_ai.tool.call.id"), text("c1"));
        assert_eq!(span.status_code, 2);
        assert_eq!(
            span.end_time_unix_nano - span.start_time_unix_nano,
            2_000_000_000
        );
        assert_eq!(records[1].span_id, span.span_id);
    }
    let pb = stub
        .seen()
        .into_iter()
        .find(|s| s.path == "/pb/v1/logs")
        .unwrap();
    match pb.model() {
        Model::Logs(l) => assert_eq!(
            attr(&l.resources[0].resource.attributes, "service.name"),
            text("bench")
        ),
        other => panic!("{other:?}"),
    }

    // The crate's own source: the two records come back as the signals they were (same id,
    // type, source and payload), and the span as a tool call and its failed result.
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
        assert_eq!(
            (back.kind.as_str(), back.source.as_str()),
            (original.kind.as_str(), "test:feed")
        );
        assert_eq!(
            Value::Object(back.payload.duplicate().into()),
            Value::Object(original.payload.duplicate().into()),
            "{back:?}"
        );
    }
    let from_span: Vec<&SharedSignal> = back_signals
        .iter()
        .filter(|s| s.source == "otlp:back")
        .collect();
    let result = from_span
        .iter()
        .find(|s| s.kind == "tool_result")
        .unwrap_or_else(|| panic!("{back_signals:?}"));
    assert_eq!(result.payload.get("success"), Some(&json!(false)));
    assert_eq!(result.payload.get("toolName"), Some(&json!("Bash")));
    assert_eq!(result.payload.get("callId"), Some(&json!("c1")));
    assert_eq!(result.payload.get("agentId"), Some(&json!("s1")));
    drop(feed);
    let report = graph.stop().await.expect("the graph stops");
    for name in ["to_self", "to_pb", "to_json"] {
        let stats = report.telemetry.component(name).expect("stats");
        assert_eq!((stats.sent, stats.bad_input), (2, 0), "{name}: {stats:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_is_retried_after_its_retry_after_and_delivered_once_in_order() {
    let _ports = PORTS.lock().await;
    let port = free_port();
    let stub = Stub::script(&[(503, Some("1"), "busy")]);
    stub.serve(port).await;
    let (feed, _seen, graph) = start(&format!(
        "[outputs.otel]\ntype = \"otlp\"\ninputs = [\"feed\"]\nendpoint = \"http://127.0.0.1:{port}\"\n\
         batch_max = 1\nbackoff_initial_ms = 10\nbackoff_max_ms = 5000\n"
    ));
    for n in 0..3 {
        feed.send(note(n)).await.expect("the graph runs");
    }
    let seen = stub.until(4, |_| true).await;
    let order: Vec<Value> = seen
        .iter()
        .map(|s| {
            let r = &s.records()[0];
            match &r.body {
                Some(AnyValue::KvList(kvs)) => match &kvs[0].value {
                    AnyValue::Int(n) => json!(n),
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            }
        })
        .collect();
    assert_eq!(order, [json!(0), json!(0), json!(1), json!(2)]);
    assert!(
        seen[1].at - seen[0].at >= Duration::from_millis(950),
        "Retry-After waited"
    );
    drop(feed);
    let report = graph.wait().await.expect("the graph ends");
    let stats = report.telemetry.component("otel").expect("stats");
    assert_eq!((stats.sent, stats.bad_input), (3, 0), "{stats:?}");
    assert_eq!(stub.seen().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_is_not_retried_and_counted_refused_with_the_reason() {
    let _ports = PORTS.lock().await;
    let port = free_port();
    let stub = Stub::script(&[(400, None, r#"{"code":3,"message":"bad attribute"}"#)]);
    stub.serve(port).await;
    let (feed, _seen, graph) = start(&format!(
        "[outputs.otel]\ntype = \"otlp\"\ninputs = [\"feed\"]\nendpoint = \"http://127.0.0.1:{port}\"\n\
         protocol = \"http/json\"\nbatch_max = 1\nbackoff_initial_ms = 10\n"
    ));
    feed.send(note(0)).await.expect("the graph runs");
    stub.until(1, |_| true).await;
    feed.send(note(1)).await.expect("the graph runs");
    stub.until(2, |_| true).await;
    drop(feed);
    let report = graph.wait().await.expect("the graph ends");
    let stats = report.telemetry.component("otel").expect("stats");
    assert_eq!((stats.sent, stats.bad_input), (1, 1), "{stats:?}");
    let error = stats.last_error.unwrap_or_default();
    assert!(error.contains("HTTP 400: bad attribute"), "{error}");
    assert_eq!(stub.seen().len(), 2, "not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_down_is_retried_until_it_is_back() {
    let _ports = PORTS.lock().await;
    let port = free_port();
    let (feed, _seen, graph) = start(&format!(
        "[outputs.otel]\ntype = \"otlp\"\ninputs = [\"feed\"]\nendpoint = \"http://127.0.0.1:{port}\"\n\
         gzip = true\nbatch_timeout_ms = 0\nbackoff_initial_ms = 20\nbackoff_max_ms = 200\n"
    ));
    feed.send(note(7)).await.expect("the graph runs");
    // A few attempts fail before the receiver is there.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let stub = Stub::default();
    stub.serve(port).await;
    let seen = stub.until(1, |_| true).await;
    assert!(seen[0].gzip);
    assert_eq!(seen[0].records()[0].event_name, "note");
    drop(feed);
    let report = graph.wait().await.expect("the graph ends");
    let stats = report.telemetry.component("otel").expect("stats");
    assert_eq!(
        (stats.sent, stats.bad_input, stats.dropped),
        (1, 0, 0),
        "{stats:?}"
    );
    assert_eq!(stub.seen().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_date_is_waited_for() {
    let _ports = PORTS.lock().await;
    let port = free_port();
    // An HTTP date two seconds ahead (dates have whole seconds).
    let until = std::time::SystemTime::now() + Duration::from_secs(2);
    let date: &'static str = Box::leak(httpdate::fmt_http_date(until).into_boxed_str());
    let named = httpdate::parse_http_date(date).expect("a date");
    let stub = Stub::script(&[(503, Some(date), "busy")]);
    stub.serve(port).await;
    let (feed, _seen, graph) = start(&format!(
        "[outputs.otel]\ntype = \"otlp\"\ninputs = [\"feed\"]\nendpoint = \"http://127.0.0.1:{port}\"\n\
         batch_timeout_ms = 0\nbackoff_initial_ms = 10\nbackoff_max_ms = 5000\n"
    ));
    feed.send(note(0)).await.expect("the graph runs");
    let seen = stub.until(2, |_| true).await;
    // The retry came no sooner than the date the receiver named (the backoff alone
    // would have retried after 10 ms).
    assert!(seen[1].wall >= named, "retried before the Retry-After date");
    drop(feed);
    let report = graph.wait().await.expect("the graph ends");
    let stats = report.telemetry.component("otel").expect("stats");
    assert_eq!((stats.sent, stats.bad_input), (1, 0), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_traces_request_counts_its_spans_as_refused() {
    let _ports = PORTS.lock().await;
    let port = free_port();
    // The logs request passes, the traces request is refused.
    let stub = Stub::script(&[
        (200, None, ""),
        (400, None, r#"{"code":3,"message":"no spans"}"#),
    ]);
    stub.serve(port).await;
    let (feed, _seen, graph) = start(&format!(
        "[outputs.otel]\ntype = \"otlp\"\ninputs = [\"feed\"]\nendpoint = \"http://127.0.0.1:{port}\"\n\
         protocol = \"http/json\"\nbatch_max = 2\nbatch_timeout_ms = 5000\n"
    ));
    for s in tool_pair() {
        feed.send(s).await.expect("the graph runs");
    }
    stub.until(2, |_| true).await;
    drop(feed);
    let report = graph.wait().await.expect("the graph ends");
    let stats = report.telemetry.component("otel").expect("stats");
    assert_eq!((stats.sent, stats.bad_input), (2, 1), "{stats:?}");
    let error = stats.last_error.unwrap_or_default();
    assert!(error.contains("HTTP 400: no spans"), "{error}");
    assert_eq!(stub.seen().len(), 2, "not retried");
}

#[test]
fn grpc_is_a_protocol_and_endpoints_are_checked() {
    // A `feed` is used once per registry.
    let registry = || {
        let mut r = Registry::new();
        r.adapter(&patchbay_otlp::ADAPTER);
        let _feed = ChannelSource::register(&mut r, "feed", 1);
        r
    };
    let config = |extra: &str| {
        format!(
            "[sources.feed]\ntype = \"feed\"\n\n[outputs.otel]\ntype = \"otlp\"\ninputs = [\"feed\"]\n{extra}\n"
        )
    };
    for ok in [
        "protocol = \"grpc\"",
        "protocol = \"grpc\"\nendpoint = \"https://otel.example:4317\"\ngzip = true",
    ] {
        compile(&[SourceText::new("grpc.toml", config(ok))], &registry())
            .unwrap_or_else(|e| panic!("{ok}: {e:?}"));
    }
    let error = format!(
        "{:?}",
        compile(
            &[SourceText::new(
                "grpc.toml",
                config("protocol = \"grpc\"\nendpoint = \"ftp://x\"")
            )],
            &registry()
        )
        .expect_err("refused")
    );
    assert!(error.contains("http:// or https://"), "{error}");
    let error = format!(
        "{:?}",
        compile(
            &[SourceText::new("grpc.toml", config("protocol = \"grpc2\""))],
            &registry()
        )
        .expect_err("refused")
    );
    assert!(error.contains("did you mean `grpc`"), "{error}");
}

/// The protobuf bodies the exporter sends, read by the official `opentelemetry-proto`
/// messages (`tests/support/otel-proto-check.py`, in the venv `target/pyenv`; skipped
/// when the venv or the package is missing, or with `PATCHBAY_SKIP_OTEL_SDK=1`).
#[test]
fn the_official_protobuf_messages_read_the_bodies() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let py = root.join("../../target/pyenv/bin/python");
    let usable = std::env::var_os("PATCHBAY_SKIP_OTEL_SDK").is_none()
        && std::process::Command::new(&py)
            .args(["-c", "import opentelemetry.proto.logs.v1.logs_pb2"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !usable {
        eprintln!("skipped: no opentelemetry-proto in {}", py.display());
        return;
    }
    let mut signals = tool_pair();
    signals[0] = signals[0]
        .clone()
        .correlated("run-1")
        .with_meta("host", "box");
    let encoded = patchbay_otlp::encode::Encoder::new("svc").encode(&signals);
    let traces = encoded.traces.expect("a span");
    let dir = std::env::temp_dir().join(format!("patchbay-otel-proto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let check = |kind: &str, body: Vec<u8>| -> Value {
        let file = dir.join(kind);
        std::fs::write(&file, body).expect("write the body");
        let out = std::process::Command::new(&py)
            .arg(root.join("tests/support/otel-proto-check.py"))
            .arg(kind)
            .arg(&file)
            .output()
            .expect("python runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let logs = check("logs", patchbay_otlp::encode::logs_protobuf(&encoded.logs));
    let spans = check("traces", patchbay_otlp::encode::traces_protobuf(&traces));
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(logs.as_array().map(Vec::len), Some(2), "{logs}");
    let call = &logs[0];
    assert_eq!(call["service"], "svc");
    assert_eq!(call["scope"], "patchbay");
    assert_eq!(call["eventName"], "tool_call");
    assert_eq!(call["time"], json!(1_700_000_000_000_000_000u64));
    assert_eq!(call["severity"], 9);
    assert_eq!(
        call["body"],
        json!({"toolName": "Bash", "agentId": "s1", "callId": "c1", "input": {"command": "ls"}})
    );
    assert_eq!(call["attributes"]["event.name"], "tool_call");
    assert_eq!(call["attributes"]["signal.source"], "test:feed");
    assert_eq!(call["attributes"]["signal.correlation_id"], "run-1");
    assert_eq!(call["attributes"]["patchbay.metadata.host"], "box");
    assert_eq!(call["attributes"]["gen_ai.agent.id"], "s1");
    assert_eq!(logs[1]["body"]["success"], false);

    assert_eq!(spans.as_array().map(Vec::len), Some(1), "{spans}");
    let span = &spans[0];
    assert_eq!(span["name"], "execute_tool Bash");
    assert_eq!(span["kind"], 1);
    assert_eq!(span["status"], 2);
    assert_eq!(span["message"], "exit 1");
    assert_eq!(span["traceId"], call["traceId"]);
    assert_eq!(span["spanId"], logs[1]["spanId"]);
    assert_eq!(span["traceId"].as_str().map(str::len), Some(32));
    assert_eq!(span["spanId"].as_str().map(str::len), Some(16));
    assert_eq!(
        span["end"].as_u64().unwrap() - span["start"].as_u64().unwrap(),
        2_000_000_000
    );
    assert_eq!(span["attributes"]["gen_ai.operation.name"], "execute_tool");
    assert_eq!(span["attributes"]["gen_ai.tool.name"], "Bash");
    assert_eq!(span["attributes"]["gen_ai.tool.call.id"], "c1");
    assert_eq!(
        span["attributes"]["gen_ai.tool.call.arguments"],
        r#"{"command":"ls"}"#
    );
}
