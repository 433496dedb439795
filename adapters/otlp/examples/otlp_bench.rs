//! The OTLP receiver's throughput: spans/s and log records/s, protobuf and JSON, over
//! OTLP/HTTP keep-alive connections, against (a) patchbay's `otlp` source in a running
//! graph whose signals go to a counting sink, and (b) a plain axum endpoint that only
//! decodes the same bodies with the same decoder (no graph), measured in one run.
//!
//! Both servers and the load generator run in this process, on loopback. Each
//! measurement sends the same prebuilt export (a batch of `execute_tool` spans, or of log
//! records) from several connections at once, as fast as the server answers, for a fixed
//! time; an export counts once answered 200 (patchbay answers only once every signal of
//! it is in the graph). Measurements alternate between the two servers.
//!
//! ```text
//! cargo run --release -p patchbay-otlp --example otlp_bench -- --help
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use patchbay_graph::{ChannelOutput, Registry, RunningGraph, SourceText, compile};
use patchbay_otlp::OtlpDecoder;
use patchbay_otlp::encode::{Encoder, logs_json, logs_protobuf, traces_json, traces_protobuf};
use patchbay_otlp::model::{Export, SignalKind};
use patchbay_signal::{Object, Signal};
use serde_json::{Value, json};
use tokio::sync::Mutex;

const HELP: &str = "\
otlp_bench: the OTLP receiver's throughput against a plain axum endpoint that only decodes

USAGE:
    otlp_bench [--seconds N] [--connections N] [--batch N] [--warmup N]

OPTIONS:
    --seconds N       how long each measurement runs (default 10)
    --connections N   concurrent keep-alive connections sending (default 8)
    --batch N         spans or log records per export (default 100)
    --warmup N        seconds of warm-up before each measurement (default 1)
    -h, --help        this text

Prints, for spans and log records, protobuf and JSON: items/s through patchbay's `otlp`
source into a graph, items/s through the plain endpoint, and their ratio.
";

/// What the command line asks.
#[derive(Debug, Clone, Copy)]
struct Args {
    seconds: u64,
    connections: usize,
    batch: usize,
    warmup: u64,
}

fn args() -> Result<Option<Args>, String> {
    let mut args = Args {
        seconds: 10,
        connections: 8,
        batch: 100,
        warmup: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0 || name == "--warmup")
                .ok_or_else(|| format!("{name} takes a positive number"))
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--seconds" => args.seconds = number("--seconds")?,
            "--connections" => args.connections = number("--connections")? as usize,
            "--batch" => args.batch = number("--batch")? as usize,
            "--warmup" => args.warmup = number("--warmup")?,
            other => return Err(format!("unknown argument `{other}` (see --help)")),
        }
    }
    Ok(Some(args))
}

/// One export to send over and over.
struct Body {
    kind: SignalKind,
    json: bool,
    bytes: Bytes,
    /// Spans or log records in it.
    items: usize,
}

impl Body {
    fn path(&self) -> &'static str {
        match self.kind {
            SignalKind::Logs => "/v1/logs",
            SignalKind::Traces => "/v1/traces",
            SignalKind::Metrics => "/v1/metrics",
        }
    }

    fn content_type(&self) -> &'static str {
        if self.json {
            "application/json"
        } else {
            "application/x-protobuf"
        }
    }

    fn label(&self) -> String {
        let kind = match self.kind {
            SignalKind::Traces => "spans",
            _ => "log records",
        };
        let encoding = if self.json { "JSON" } else { "protobuf" };
        format!("{kind}, {encoding}")
    }
}

fn signal(kind: &str, payload: Value, at: i64) -> Signal {
    let Value::Object(payload) = payload else {
        unreachable!("an object literal")
    };
    let payload: Object = payload;
    Signal::new(kind, "bench:agent", payload).at(at)
}

/// The exports: `batch` GenAI `execute_tool` spans, and `batch` log records (tool calls
/// and results, with their attributes), each as protobuf and JSON.
fn bodies(batch: usize) -> Vec<Body> {
    let mut signals = Vec::with_capacity(batch * 2);
    for n in 0..batch {
        let call = format!("call-{n}");
        let at = 1_700_000_000_000 + n as i64 * 10;
        signals.push(
            signal(
                "tool_call",
                json!({"toolName": "Bash", "agentId": "session-1", "callId": call,
                       "input": {"command": format!("grep -rn needle src/{n}")}}),
                at,
            )
            .correlated("run-1"),
        );
        signals.push(
            signal(
                "tool_result",
                json!({"toolName": "Bash", "agentId": "session-1", "callId": call,
                       "success": true, "output": {"stdout": "src/a.rs:1: needle", "exitCode": 0}}),
                at + 5,
            )
            .correlated("run-1"),
        );
    }
    let encoded = Encoder::new("bench-agent").encode(&signals);
    let traces = encoded.traces.unwrap_or_default();
    let mut logs = encoded.logs;
    for resource in &mut logs.resources {
        for scope in &mut resource.scopes {
            scope.items.truncate(batch);
        }
    }
    let (spans, records) = (count(&traces), count(&logs));
    vec![
        Body {
            kind: SignalKind::Traces,
            json: false,
            bytes: traces_protobuf(&traces).into(),
            items: spans,
        },
        Body {
            kind: SignalKind::Traces,
            json: true,
            bytes: traces_json(&traces).into(),
            items: spans,
        },
        Body {
            kind: SignalKind::Logs,
            json: false,
            bytes: logs_protobuf(&logs).into(),
            items: records,
        },
        Body {
            kind: SignalKind::Logs,
            json: true,
            bytes: logs_json(&logs).into(),
            items: records,
        },
    ]
}

/// The spans or records in an export.
fn count<T>(export: &Export<T>) -> usize {
    export
        .resources
        .iter()
        .flat_map(|r| &r.scopes)
        .map(|s| s.items.len())
        .sum()
}

/// The baseline: the same decoder behind one lock, as the receiver holds it, and
/// nothing after it.
#[derive(Clone)]
struct Plain {
    decoder: Arc<Mutex<OtlpDecoder>>,
    signals: Arc<AtomicU64>,
}

async fn plain(
    State(plain): State<Plain>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let Some(kind) = SignalKind::from_path(uri.path()) else {
        return StatusCode::NOT_FOUND;
    };
    let json = headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let mut out = Vec::new();
    let mut decoder = plain.decoder.lock().await;
    let decoded = if json {
        decoder.decode_json(kind, &body, &mut out)
    } else {
        decoder.decode_protobuf(kind, &body, &mut out)
    };
    drop(decoder);
    plain.signals.fetch_add(out.len() as u64, Ordering::Relaxed);
    match decoded {
        Ok(()) => StatusCode::OK,
        Err(_) => StatusCode::BAD_REQUEST,
    }
}

/// Sends `body` from `connections` connections for `time`; the exports answered 200.
async fn load(url: &str, body: &Body, connections: usize, time: Duration) -> Result<u64, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..connections {
        // One client each: one keep-alive connection each.
        let client = patchbay_transport::client_builder()
            .pool_max_idle_per_host(1)
            .build()
            .map_err(|e| e.to_string())?;
        let (url, stop) = (format!("{url}{}", body.path()), Arc::clone(&stop));
        let (bytes, content_type) = (body.bytes.clone(), body.content_type());
        workers.push(tokio::spawn(async move {
            let mut ok = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let sent = client
                    .post(&url)
                    .header("content-type", content_type)
                    .body(bytes.clone())
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status() == StatusCode::OK => {
                        // The answer's body, so that the connection is reused.
                        let _ = r.bytes().await;
                        ok += 1;
                    }
                    Ok(r) => return Err(format!("answered {}", r.status())),
                    Err(e) => return Err(format!("request failed: {e}")),
                }
            }
            Ok(ok)
        }));
    }
    tokio::time::sleep(time).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for worker in workers {
        total += worker.await.map_err(|e| e.to_string())??;
    }
    Ok(total)
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

async fn run(args: Args) -> Result<(), String> {
    // (a) patchbay: the `otlp` source in a graph, into a counting sink.
    let port = free_port()?;
    let mut registry = Registry::new();
    registry.adapter(&patchbay_otlp::ADAPTER);
    let mut sink = ChannelOutput::register(&mut registry, "count", 65_536);
    let config = format!(
        "[sources.otel]\ntype = \"otlp\"\nlisten = \"127.0.0.1:{port}\"\ngrpc_listen = \"\"\n\
         max_connections = 4096\ningest_timeout_ms = 60000\n\n\
         [outputs.sink]\ntype = \"count\"\ninputs = [\"otel\"]\n"
    );
    let graph = compile(&[SourceText::new("bench.toml", config)], &registry)
        .map_err(|e| format!("the graph does not compile: {e:?}"))?;
    let graph = RunningGraph::spawn(graph);
    let counted = Arc::new(AtomicU64::new(0));
    let counter = tokio::spawn({
        let counted = Arc::clone(&counted);
        async move {
            while let Some(_signal) = sink.recv().await {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        }
    });

    // (b) the plain endpoint.
    let plain_port = free_port()?;
    let baseline = Plain {
        decoder: Arc::new(Mutex::new(OtlpDecoder::new("bench"))),
        signals: Arc::new(AtomicU64::new(0)),
    };
    let app = Router::new().fallback(plain).with_state(baseline.clone());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", plain_port))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let patchbay_url = format!("http://127.0.0.1:{port}");
    let plain_url = format!("http://127.0.0.1:{plain_port}");
    for url in [&patchbay_url, &plain_url] {
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(url.trim_start_matches("http://"))
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                return Err(format!("{url} does not listen"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    let bodies = bodies(args.batch);
    println!(
        "otlp_bench: {} s per measurement, {} connections, {} items per export, {} CPUs",
        args.seconds,
        args.connections,
        args.batch,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for body in &bodies {
        println!("  {}: {} bytes per export", body.label(), body.bytes.len());
    }
    println!();
    println!(
        "{:<24} {:>16} {:>16} {:>8} {:>18}",
        "export", "patchbay items/s", "plain items/s", "ratio", "patchbay signals/s"
    );
    let time = Duration::from_secs(args.seconds);
    let warmup = Duration::from_secs(args.warmup);
    for body in &bodies {
        // patchbay
        load(&patchbay_url, body, args.connections, warmup).await?;
        let before = counted.load(Ordering::Relaxed);
        let started = Instant::now();
        let exports = load(&patchbay_url, body, args.connections, time).await?;
        let elapsed = started.elapsed().as_secs_f64();
        let signals = counted.load(Ordering::Relaxed) - before;
        let ours = (exports * body.items as u64) as f64 / elapsed;
        // the plain endpoint
        load(&plain_url, body, args.connections, warmup).await?;
        let started = Instant::now();
        let exports = load(&plain_url, body, args.connections, time).await?;
        let theirs = (exports * body.items as u64) as f64 / started.elapsed().as_secs_f64();
        println!(
            "{:<24} {:>16.0} {:>16.0} {:>8.2} {:>18.0}",
            body.label(),
            ours,
            theirs,
            ours / theirs,
            signals as f64 / elapsed
        );
    }
    println!();
    println!(
        "ratio: patchbay's items/s over the plain endpoint's (1.00: the graph costs nothing \
         over decoding)"
    );
    graph.stop().await.map_err(|e| e.to_string())?;
    counter.abort();
    Ok(())
}

fn main() {
    let args = match args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            print!("{HELP}");
            return;
        }
        Err(e) => {
            eprintln!("otlp_bench: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("otlp_bench: no runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(args)) {
        eprintln!("otlp_bench: {e}");
        std::process::exit(1);
    }
}
