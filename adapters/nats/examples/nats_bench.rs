//! NATS throughput: patchbay → nats-server → patchbay against a plain async-nats
//! publisher/subscriber pair, in the same run, on one `nats-server` started on loopback.
//!
//! ```text
//! cargo build --release -p patchbay-nats --example nats_bench
//! ./target/release/examples/nats_bench [--signals N] [--rounds K] [--only patchbay]
//! ```
//!
//! (`--only patchbay` runs that target alone, for a profiler.)
//!
//! - **plain**: one async-nats client publishes the signals' envelopes, serialized before
//!   the clock starts, on one subject; another counts what its subscription receives. No
//!   parsing, no serialization: the floor.
//! - **patchbay**: two graphs, as two patchbay processes would run them: the first takes
//!   the signals from a program's channel (the load generator) and has a `nats` output
//!   (subject template `patchbay.{source}.{type}`); the second has a `nats` source on
//!   `patchbay.>` and delivers to a program's channel, where they are counted.
//! - **generator**: the same first graph with the `nats` output replaced by a program's
//!   channel: what the load generator and a graph can push without NATS. It must be well
//!   above the patchbay figure, or the generator, not NATS, is what is measured.
//!
//! Each figure is the signals received per second, from the first send to the last
//! receipt (or to 2 s of silence: core NATS drops what a slow subscriber cannot buffer, so
//! the delivered share is shown too). With `--rounds K` the targets take turns K times and
//! the median is shown, with the range.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use patchbay_graph::{ChannelOutput, ChannelSource, Registry, RunningGraph, SourceText, compile};
use patchbay_signal::{Signal, object};
use tokio::sync::mpsc;

#[global_allocator]
static ALLOCATOR: patchbay_allocator::MiMalloc = patchbay_allocator::MiMalloc;

/// How long without a new message before a run counts as over.
const QUIET: Duration = Duration::from_secs(2);

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server() -> (Server, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let binary = ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("nats-server is installed (Debian package `nats-server`)");
    let server = Server(
        Command::new(binary)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts"),
    );
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "nats-server never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, format!("nats://127.0.0.1:{port}"))
}

/// The load: text deltas of one agent, as a streaming model makes them.
fn signals(n: usize) -> Vec<Signal> {
    (0..n)
        .map(|i| {
            Signal::new(
                "text_delta",
                "bench:agent",
                object! { "agentId" => "agent-1", "content" => "a few tokens of text ", "i" => i },
            )
        })
        .collect()
}

/// One measurement: signals received, and the seconds from the first send to the last
/// receipt.
struct Run {
    received: usize,
    seconds: f64,
    /// Signals sent, and the seconds until the sender had published them all (patchbay
    /// only).
    sent: Option<usize>,
    sent_in: Option<f64>,
    /// What the receiving source counted as dropped (patchbay only).
    dropped: Option<u64>,
}

impl Run {
    fn rate(&self) -> f64 {
        self.received as f64 / self.seconds
    }

    /// The rate at which the sender published (all of them, per second).
    fn published(&self) -> f64 {
        self.sent.unwrap_or(0) as f64 / self.sent_in.unwrap_or(f64::NAN)
    }
}

/// Counts what arrives on `rx` (items for which `counts` holds) until `n` or silence.
async fn count<T>(
    rx: &mut mpsc::Receiver<T>,
    n: usize,
    start: Instant,
    counts: impl Fn(&T) -> bool,
) -> Run {
    let mut received = 0;
    let mut last = start;
    while received < n {
        match tokio::time::timeout(QUIET, rx.recv()).await {
            Ok(Some(item)) => {
                if counts(&item) {
                    received += 1;
                    last = Instant::now();
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    Run {
        received,
        seconds: last.duration_since(start).as_secs_f64().max(1e-9),
        sent: None,
        sent_in: None,
        dropped: None,
    }
}

async fn plain(url: &str, n: usize) -> Run {
    let payloads: Vec<bytes::Bytes> = signals(n)
        .iter()
        .map(|s| bytes::Bytes::from(s.to_json()))
        .collect();
    let subscriber = async_nats::connect(url).await.expect("connects");
    let publisher = async_nats::connect(url).await.expect("connects");
    let mut subscription = subscriber.subscribe("plain.>").await.expect("subscribes");
    subscriber
        .flush()
        .await
        .expect("the subscription is in place");
    // The subscription's stream, as a channel, so that counting is the same for both.
    let (tx, mut rx) = mpsc::channel(1024);
    let forward = tokio::spawn(async move {
        use futures_util::StreamExt;
        while let Some(m) = subscription.next().await {
            if tx.send(m).await.is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let send = tokio::spawn(async move {
        for payload in payloads {
            publisher
                .publish("plain.bench_agent.text_delta", payload)
                .await
                .expect("publishes");
        }
        publisher.flush().await.expect("flushes");
    });
    let run = count(&mut rx, n, start, |_| true).await;
    send.await.expect("the publisher ends");
    forward.abort();
    run
}

/// The receiving graph: `nats` source → channel. Returns the channel and the graph.
fn receiver(url: &str) -> (mpsc::Receiver<patchbay_signal::SharedSignal>, RunningGraph) {
    let mut registry = Registry::from_adapters([&patchbay_nats::ADAPTER]);
    let seen = ChannelOutput::register(&mut registry, "seen", 4096);
    let config = format!(
        "[sources.bus]\ntype = \"nats\"\nurl = \"{url}\"\nsubject = \"patchbay.>\"\n\n[outputs.app]\ntype = \"seen\"\ninputs = [\"bus\"]\n"
    );
    let graph = compile(&[SourceText::new("receiver.toml", &config)], &registry)
        .unwrap_or_else(|e| panic!("{e:?}"));
    drop(registry);
    (seen, RunningGraph::spawn(graph))
}

/// The sending graph: channel → `nats` output (or, with `url` `None`, → channel).
fn sender(
    url: Option<&str>,
) -> (
    mpsc::Sender<Signal>,
    Option<mpsc::Receiver<patchbay_signal::SharedSignal>>,
    RunningGraph,
) {
    let mut registry = Registry::from_adapters([&patchbay_nats::ADAPTER]);
    let feed = ChannelSource::register(&mut registry, "feed", 4096);
    let (config, seen) = match url {
        Some(url) => (
            format!(
                "[sources.agent]\ntype = \"feed\"\n\n[outputs.bus]\ntype = \"nats\"\ninputs = [\"agent\"]\nurl = \"{url}\"\n"
            ),
            None,
        ),
        None => (
            "[sources.agent]\ntype = \"feed\"\n\n[outputs.app]\ntype = \"seen\"\ninputs = [\"agent\"]\n"
                .to_owned(),
            Some(ChannelOutput::register(&mut registry, "seen", 4096)),
        ),
    };
    let graph = compile(&[SourceText::new("sender.toml", &config)], &registry)
        .unwrap_or_else(|e| panic!("{e:?}"));
    drop(registry);
    (feed, seen, RunningGraph::spawn(graph))
}

async fn through_patchbay(url: &str, n: usize) -> Run {
    let load = signals(n);
    let (mut seen, receiving) = receiver(url);
    let (feed, _, sending) = sender(Some(url));
    // Core NATS delivers only to subscriptions in place: warm up until one arrives.
    loop {
        let warmup = Signal::new("warmup", "bench:agent", object! {});
        feed.send(warmup).await.expect("the graph runs");
        if tokio::time::timeout(Duration::from_millis(50), seen.recv())
            .await
            .is_ok()
        {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    while seen.try_recv().is_ok() {}

    let start = Instant::now();
    let send = tokio::spawn(async move {
        for signal in load {
            feed.send(signal).await.expect("the graph runs");
        }
        // The end of the input: the sending graph drains, flushes and ends.
        drop(feed);
        sending.wait().await.expect("the sending graph ends");
        start.elapsed().as_secs_f64()
    });
    let mut run = count(&mut seen, n, start, |s| s.kind == "text_delta").await;
    run.sent_in = Some(send.await.expect("the generator ends"));
    run.sent = Some(n);
    let report = receiving.stop().await.expect("the receiving graph ends");
    // What core NATS dropped because the receiving graph fell behind: the source counts
    // the client's slow-consumer events.
    if let Some(bus) = report.telemetry.component("bus") {
        run.dropped = Some(bus.dropped);
    }
    run
}

async fn generator(n: usize) -> Run {
    let load = signals(n);
    let (feed, seen, running) = sender(None);
    let mut seen = seen.expect("a channel output");
    let start = Instant::now();
    let send = tokio::spawn(async move {
        for signal in load {
            feed.send(signal).await.expect("the graph runs");
        }
    });
    let run = count(&mut seen, n, start, |_| true).await;
    send.await.expect("the generator ends");
    let _ = running.wait().await;
    run
}

fn median(runs: &mut [Run]) -> (f64, f64, f64, f64) {
    runs.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
    let rates: Vec<f64> = runs.iter().map(Run::rate).collect();
    let delivered = runs.iter().map(|r| r.received).min().unwrap_or(0) as f64;
    (
        rates[rates.len() / 2],
        rates[0],
        rates[rates.len() - 1],
        delivered,
    )
}

fn main() {
    let mut n = 200_000usize;
    let mut rounds = 3usize;
    let mut only_patchbay = false;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--signals" => n = value.parse().expect("--signals N"),
            "--rounds" => rounds = value.parse::<usize>().expect("--rounds K").max(1),
            "--only" if value == "patchbay" => only_patchbay = true,
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (_server, url) = start_server();
    let (mut plains, mut patchbays, mut generators) = (Vec::new(), Vec::new(), Vec::new());
    runtime.block_on(async {
        for round in 0..rounds {
            if only_patchbay {
                let b = through_patchbay(&url, n).await;
                eprintln!(
                    "round {}: patchbay {:.0}/s ({}, published at {:.0}/s, {} counted dropped)",
                    round + 1,
                    b.rate(),
                    b.received,
                    b.published(),
                    b.dropped.unwrap_or(0)
                );
                continue;
            }
            let p = plain(&url, n).await;
            let b = through_patchbay(&url, n).await;
            let g = generator(n).await;
            eprintln!(
                "round {}: plain {:.0}/s ({}), patchbay {:.0}/s ({}, published at {:.0}/s, {} counted dropped), generator {:.0}/s ({})",
                round + 1,
                p.rate(),
                p.received,
                b.rate(),
                b.received,
                b.published(),
                b.dropped.unwrap_or(0),
                g.rate(),
                g.received
            );
            plains.push(p);
            patchbays.push(b);
            generators.push(g);
        }
    });
    if only_patchbay {
        return;
    }
    println!("{n} signals, {rounds} rounds (median, range; delivered: the fewest of any round)");
    println!("| target | signals/s | range | delivered |");
    println!("|---|---|---|---|");
    let mut medians = Vec::new();
    for (name, runs) in [
        ("plain async-nats pair", &mut plains),
        ("patchbay → nats-server → patchbay", &mut patchbays),
        ("generator → graph (no NATS)", &mut generators),
    ] {
        let (m, lo, hi, delivered) = median(runs);
        medians.push(m);
        println!(
            "| {name} | {m:.0} | {lo:.0}–{hi:.0} | {:.1}% |",
            delivered / n as f64 * 100.0
        );
    }
    println!("patchbay / plain: {:.2}x", medians[1] / medians[0]);
    let mut published: Vec<f64> = patchbays.iter().map(Run::published).collect();
    published.sort_by(f64::total_cmp);
    println!(
        "patchbay's sending graph published at {:.0}/s (median)",
        published[published.len() / 2]
    );
}
