//! OSC throughput: messages per second through the `osc` source into a graph, against a
//! plain UDP receiver that only decodes, in the same run, on loopback.
//!
//! ```text
//! cargo build --release -p patchbay-osc --example osc_bench
//! ./target/release/examples/osc_bench [--messages N] [--rounds K] [--only plain|patchbay]
//! ```
//!
//! - **sender**: one thread sends N pre-encoded OSC messages (`/1/fader1 ,f`, the
//!   20 bytes a TouchOSC fader sends) on one UDP socket as fast as the kernel takes them:
//!   it outruns either receiver, so what is measured is the receiver.
//! - **plain**: one thread on a blocking UDP socket reads each datagram and decodes it
//!   (`parse_packet`), counting messages. No signals, no graph: the floor.
//! - **patchbay**: a graph with an `osc` source on a UDP port, delivering to a program's
//!   channel, where the signals are counted.
//!
//! Each figure is the messages received per second, from the first send to the last
//! receipt (or to 2 s of silence). UDP drops what a receiver does not take in time, so the
//! share received and the kernel's drop count for the receiving socket are shown too. With
//! `--rounds K` the two take turns K times and the median is shown, with the range.

use std::net::UdpSocket;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use patchbay_graph::{
    BoxFuture, ComponentError, Output, OutputContext, Registry, RunningGraph, SourceText,
    Telemetry, WhenFull, compile,
};
use patchbay_osc::{Arg, Message, encode_message, kernel_drops, parse_packet};
use patchbay_signal::SharedSignal;
use tokio::sync::mpsc;

#[global_allocator]
static ALLOCATOR: patchbay_allocator::MiMalloc = patchbay_allocator::MiMalloc;

/// How long without a new message before a run counts as over.
const QUIET: Duration = Duration::from_secs(2);

/// The load: a fader's moves.
fn packets(n: usize) -> Arc<Vec<Vec<u8>>> {
    Arc::new(
        (0..n)
            .map(|i| {
                let message = Message {
                    address: "/1/fader1".into(),
                    args: vec![Arg::Float((i % 1000) as f32 / 1000.0)],
                };
                let mut bytes = Vec::new();
                encode_message(&message, &mut bytes).expect("encodes");
                bytes
            })
            .collect(),
    )
}

/// Sends every packet to `port`, as fast as the kernel takes them.
fn blast(port: u16, packets: Arc<Vec<Vec<u8>>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a socket");
        socket.connect(("127.0.0.1", port)).expect("connects");
        for packet in packets.iter() {
            // On loopback a send only fails when the sender's own buffer is full.
            while socket.send(packet).is_err() {
                std::thread::yield_now();
            }
        }
    })
}

/// One measurement.
struct Run {
    received: usize,
    seconds: f64,
    kernel_drops: Option<u64>,
}

impl Run {
    fn rate(&self) -> f64 {
        self.received as f64 / self.seconds
    }
}

fn plain(packets: &Arc<Vec<Vec<u8>>>) -> Run {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("a socket");
    socket.set_read_timeout(Some(QUIET)).expect("a timeout");
    let port = socket.local_addr().expect("bound").port();
    let n = packets.len();
    let start = Instant::now();
    let sender = blast(port, Arc::clone(packets));
    let mut buf = vec![0u8; 8193];
    let mut received = 0;
    let mut last = start;
    while received < n {
        let Ok(len) = socket.recv(&mut buf) else {
            break;
        };
        if let Ok(packet) = parse_packet(&buf[..len]) {
            std::hint::black_box(&packet);
            received += 1;
            last = Instant::now();
        }
    }
    sender.join().expect("the sender ends");
    Run {
        received,
        seconds: last.duration_since(start).as_secs_f64().max(1e-9),
        kernel_drops: kernel_drops(&socket),
    }
}

/// An output that counts into a channel and publishes the graph's telemetry.
struct Sink {
    tx: mpsc::Sender<SharedSignal>,
    telemetry: Arc<OnceLock<Arc<Telemetry>>>,
}

impl Output for Sink {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let _ = self.telemetry.set(Arc::clone(cx.telemetry()));
            let mut batch = Vec::with_capacity(1024);
            while cx.next_batch(1024, &mut batch).await {
                let n = batch.len() as u64;
                for signal in batch.drain(..) {
                    if self.tx.send(signal).await.is_err() {
                        return Ok(());
                    }
                }
                cx.delivered(n);
            }
            Ok(())
        })
    }
}

async fn patchbay(packets: &Arc<Vec<Vec<u8>>>) -> Run {
    let port = UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free port")
        .port();
    let mut registry = Registry::new();
    registry.adapter(&patchbay_osc::ADAPTER);
    let (tx, mut rx) = mpsc::channel(65_536);
    let telemetry = Arc::new(OnceLock::new());
    let slot = Arc::clone(&telemetry);
    registry.output_fn("count", WhenFull::Block, move |_| {
        Ok(Box::new(Sink {
            tx: tx.clone(),
            telemetry: Arc::clone(&slot),
        }) as Box<dyn Output>)
    });
    let config = format!(
        "[sources.surface]\ntype = \"osc\"\nlisten = \"127.0.0.1:{port}\"\n\n\
         [outputs.count]\ntype = \"count\"\ninputs = [\"surface\"]\n"
    );
    let graph = compile(&[SourceText::new("bench.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    let ready = Instant::now();
    loop {
        let listening = telemetry
            .get()
            .and_then(|t| t.component("surface"))
            .is_some_and(|s| s.gauges.contains_key("port"));
        if listening {
            break;
        }
        assert!(
            ready.elapsed() < Duration::from_secs(30),
            "the source never listened"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let n = packets.len();
    let start = Instant::now();
    let sender = blast(port, Arc::clone(packets));
    let mut received = 0;
    let mut last = start;
    while received < n {
        match tokio::time::timeout(QUIET, rx.recv()).await {
            Ok(Some(_)) => {
                received += 1;
                last = Instant::now();
            }
            Ok(None) | Err(_) => break,
        }
    }
    sender.join().expect("the sender ends");
    let report = graph.stop().await.expect("the graph stops");
    let surface = report.telemetry.component("surface");
    Run {
        received,
        seconds: last.duration_since(start).as_secs_f64().max(1e-9),
        kernel_drops: surface.and_then(|s| s.gauges.get("osc_kernel_drops").map(|d| *d as u64)),
    }
}

fn median(mut runs: Vec<Run>) -> (Run, f64, f64) {
    runs.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
    let low = runs.first().map_or(0.0, Run::rate);
    let high = runs.last().map_or(0.0, Run::rate);
    let mid = runs.swap_remove(runs.len() / 2);
    (mid, low, high)
}

fn show(name: &str, what: &str, runs: Vec<Run>, n: usize) -> f64 {
    let rounds = runs.len();
    let (run, low, high) = median(runs);
    let drops = run
        .kernel_drops
        .map_or_else(|| "n/a".to_owned(), |d| d.to_string());
    let range = if rounds > 1 {
        format!(", range {low:.0}–{high:.0}")
    } else {
        String::new()
    };
    println!(
        "  {name:<9} {what:<22} {:>12.0} msg/s   (received {} of {n}, {:.1}%; kernel drops {drops}{range})",
        run.rate(),
        run.received,
        100.0 * run.received as f64 / n as f64,
    );
    run.rate()
}

fn main() {
    let mut n = 200_000;
    let mut rounds = 1;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().expect("a value after the flag");
        match arg.as_str() {
            "--messages" => n = value().parse().expect("a number"),
            "--rounds" => rounds = value().parse().expect("a number"),
            "--only" => only = Some(value()),
            other => panic!("unknown argument {other}"),
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let load = packets(n);
    let wants = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let (mut plains, mut graphs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        if wants("plain") {
            plains.push(plain(&load));
        }
        if wants("patchbay") {
            graphs.push(runtime.block_on(patchbay(&load)));
        }
    }
    println!(
        "OSC messages/s, {n} messages of {} bytes over loopback UDP, an unthrottled sender, {rounds} round(s):",
        load.first().map_or(0, Vec::len)
    );
    let floor = (!plains.is_empty()).then(|| show("plain", "UDP + decode only", plains, n));
    let ours = (!graphs.is_empty()).then(|| show("patchbay", "osc source → graph", graphs, n));
    if let (Some(floor), Some(ours)) = (floor, ours) {
        println!("  ratio patchbay/plain: {:.2}", ours / floor);
    }
}
