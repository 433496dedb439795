//! MQTT round trip: patchbay → mosquitto → patchbay against a plain rumqttc client pair,
//! in the same run, through one `mosquitto` started on loopback, at QoS 1 (both sides).
//!
//! ```text
//! cargo build --release -p patchbay-mqtt --example mqtt_bench
//! ./target/release/examples/mqtt_bench [--signals N] [--rounds K] [--pings M] [--version 3.1.1|5]
//! ```
//!
//! - **plain**: one rumqttc client publishes the signals' envelopes (serialized before the
//!   clock starts) at QoS 1; another, subscribed at QoS 1, counts what arrives (rumqttc
//!   acknowledges each message as it reads it). No parsing, no serialization: the floor.
//! - **patchbay**: two graphs, as two patchbay processes would run them: the first takes
//!   the signals from a program's channel and has an `mqtt` output (topic template
//!   `bench/pb/{source}/{type}`, QoS 1: a signal counts as sent once acknowledged); the
//!   second has an `mqtt` source on `bench/pb/#` (QoS 1: each message acknowledged once
//!   the graph took it) and delivers to a program's channel.
//!
//! Throughput: signals received per second, from the first send to the last receipt.
//! Latency: `--pings M` single signals, each sent when the last one arrived, the time
//! from send to receipt (median and 99th percentile). With `--rounds K` the two targets
//! take turns K times and the median is shown, with the range.

use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use patchbay_graph::{ChannelOutput, ChannelSource, Registry, RunningGraph, SourceText, compile};
use patchbay_signal::{SharedSignal, Signal, object};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use tokio::sync::mpsc;

#[global_allocator]
static ALLOCATOR: patchbay_allocator::MiMalloc = patchbay_allocator::MiMalloc;

/// How long without a new message before a run counts as over (nothing is lost at QoS 1:
/// this only guards against a hang).
const QUIET: Duration = Duration::from_secs(10);

struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_broker(dir: &Path) -> (Broker, u16) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let binary = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("mosquitto is installed (Debian package `mosquitto`)");
    let config = dir.join("mosquitto.conf");
    std::fs::write(
        &config,
        format!("listener {port} 127.0.0.1\nallow_anonymous true\nuser root\nmax_queued_messages 1000000\n"),
    )
    .expect("write the config");
    let broker = Broker(
        Command::new(binary)
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mosquitto starts"),
    );
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "mosquitto never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (broker, port)
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

/// One measurement.
struct Run {
    received: usize,
    seconds: f64,
    /// Round trips of single signals, in microseconds, sorted.
    latencies: Vec<f64>,
}

impl Run {
    fn rate(&self) -> f64 {
        self.received as f64 / self.seconds
    }

    fn percentile(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let at = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        self.latencies[at]
    }
}

/// Counts what arrives on `rx` until `n` or silence; returns (received, seconds).
async fn count<T>(rx: &mut mpsc::Receiver<T>, n: usize, start: Instant) -> (usize, f64) {
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
    (received, last.duration_since(start).as_secs_f64().max(1e-9))
}

fn options(id: &str, port: u16) -> MqttOptions {
    let mut o = MqttOptions::new(id, "127.0.0.1", port);
    o.set_keep_alive(Duration::from_secs(30));
    o.set_max_packet_size(1 << 20, 1 << 20);
    o
}

/// A rumqttc client whose event loop runs on its own task; the messages it receives go
/// to the returned channel.
fn plain_client(
    id: &str,
    port: u16,
) -> (
    AsyncClient,
    mpsc::Receiver<bytes::Bytes>,
    tokio::task::JoinHandle<()>,
) {
    let (client, mut eventloop) = AsyncClient::new(options(id, port), 4096);
    let (tx, rx) = mpsc::channel(1 << 16);
    let task = tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    if tx.send(p.payload).await.is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    eprintln!("rumqttc: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    (client, rx, task)
}

async fn plain(port: u16, n: usize, pings: usize, round: usize) -> Run {
    let topic = format!("bench/plain/{round}");
    let (subscriber, mut rx, sub_task) = plain_client(&format!("plain-sub-{round}"), port);
    let (publisher, _, pub_task) = plain_client(&format!("plain-pub-{round}"), port);
    subscriber
        .subscribe(format!("{topic}/#"), QoS::AtLeastOnce)
        .await
        .expect("subscribes");
    // Subscribed once a warm-up message comes back.
    loop {
        publisher
            .publish(format!("{topic}/warmup"), QoS::AtLeastOnce, false, "w")
            .await
            .expect("publishes");
        if tokio::time::timeout(Duration::from_millis(100), rx.recv())
            .await
            .is_ok()
        {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    while rx.try_recv().is_ok() {}

    let payloads: Vec<Vec<u8>> = signals(n)
        .iter()
        .map(|s| s.to_json().into_bytes())
        .collect();
    let start = Instant::now();
    let target = format!("{topic}/bench_agent/text_delta");
    let sender = publisher.clone();
    let send = tokio::spawn(async move {
        for payload in payloads {
            sender
                .publish(target.clone(), QoS::AtLeastOnce, false, payload)
                .await
                .expect("publishes");
        }
    });
    let (received, seconds) = count(&mut rx, n, start).await;
    send.await.expect("the publisher ends");

    let mut latencies = Vec::with_capacity(pings);
    let one = signals(1).remove(0).to_json().into_bytes();
    for _ in 0..pings {
        let t = Instant::now();
        publisher
            .publish(
                format!("{topic}/ping"),
                QoS::AtLeastOnce,
                false,
                one.clone(),
            )
            .await
            .expect("publishes");
        if tokio::time::timeout(QUIET, rx.recv()).await.is_err() {
            break;
        }
        latencies.push(t.elapsed().as_secs_f64() * 1e6);
    }
    latencies.sort_by(f64::total_cmp);
    sub_task.abort();
    pub_task.abort();
    Run {
        received,
        seconds,
        latencies,
    }
}

/// The receiving graph: `mqtt` source → channel.
fn receiver(
    port: u16,
    version: &str,
    round: usize,
) -> (mpsc::Receiver<SharedSignal>, RunningGraph) {
    let mut registry = Registry::from_adapters([&patchbay_mqtt::ADAPTER]);
    let seen = ChannelOutput::register(&mut registry, "seen", 1 << 16);
    let config = format!(
        "[sources.bus]\ntype = \"mqtt\"\nurl = \"mqtt://127.0.0.1:{port}\"\nversion = \"{version}\"\n\
         topics = [\"bench/pb{round}/#\"]\nclient_id = \"pb-in-{round}\"\nclean_session = true\n\n\
         [outputs.app]\ntype = \"seen\"\ninputs = [\"bus\"]\n"
    );
    let graph = compile(&[SourceText::new("receiver.toml", &config)], &registry)
        .unwrap_or_else(|e| panic!("{e:?}"));
    drop(registry);
    (seen, RunningGraph::spawn(graph))
}

/// The sending graph: channel → `mqtt` output.
fn sender(port: u16, version: &str, round: usize) -> (mpsc::Sender<Signal>, RunningGraph) {
    let mut registry = Registry::from_adapters([&patchbay_mqtt::ADAPTER]);
    let feed = ChannelSource::register(&mut registry, "feed", 4096);
    let config = format!(
        "[sources.agent]\ntype = \"feed\"\n\n[outputs.bus]\ntype = \"mqtt\"\ninputs = [\"agent\"]\n\
         url = \"mqtt://127.0.0.1:{port}\"\nversion = \"{version}\"\ntopic = \"bench/pb{round}/{{source}}/{{type}}\"\n\
         client_id = \"pb-out-{round}\"\n"
    );
    let graph = compile(&[SourceText::new("sender.toml", &config)], &registry)
        .unwrap_or_else(|e| panic!("{e:?}"));
    drop(registry);
    (feed, RunningGraph::spawn(graph))
}

async fn through_patchbay(port: u16, version: &str, n: usize, pings: usize, round: usize) -> Run {
    let (mut seen, receiving) = receiver(port, version, round);
    let (feed, sending) = sender(port, version, round);
    loop {
        let warmup = Signal::new("warmup", "bench:agent", object! {});
        feed.send(warmup).await.expect("the graph runs");
        if tokio::time::timeout(Duration::from_millis(100), seen.recv())
            .await
            .is_ok()
        {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    while seen.try_recv().is_ok() {}

    let load = signals(n);
    let start = Instant::now();
    let sender_feed = feed.clone();
    let send = tokio::spawn(async move {
        for signal in load {
            sender_feed.send(signal).await.expect("the graph runs");
        }
    });
    let (received, seconds) = count(&mut seen, n, start).await;
    send.await.expect("the generator ends");

    let mut latencies = Vec::with_capacity(pings);
    for _ in 0..pings {
        let t = Instant::now();
        feed.send(signals(1).remove(0))
            .await
            .expect("the graph runs");
        if tokio::time::timeout(QUIET, seen.recv()).await.is_err() {
            break;
        }
        latencies.push(t.elapsed().as_secs_f64() * 1e6);
    }
    latencies.sort_by(f64::total_cmp);
    drop(feed);
    let _ = sending.wait().await;
    let _ = receiving.stop().await;
    Run {
        received,
        seconds,
        latencies,
    }
}

fn median_of(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

fn main() {
    let mut n = 50_000usize;
    let mut rounds = 3usize;
    let mut pings = 1000usize;
    let mut version = "3.1.1".to_owned();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--signals" => n = value.parse().expect("--signals N"),
            "--rounds" => rounds = value.parse::<usize>().expect("--rounds K").max(1),
            "--pings" => pings = value.parse().expect("--pings M"),
            "--version" => version = value,
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    let dir = std::env::temp_dir().join(format!("patchbay-mqtt-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch dir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (_broker, port) = start_broker(&dir);
    let (mut plains, mut patchbays) = (Vec::new(), Vec::new());
    runtime.block_on(async {
        for round in 0..rounds {
            let p = plain(port, n, pings, round).await;
            let b = through_patchbay(port, &version, n, pings, round).await;
            eprintln!(
                "round {}: plain {:.0}/s ({}), p50 {:.0} µs; patchbay {:.0}/s ({}), p50 {:.0} µs",
                round + 1,
                p.rate(),
                p.received,
                p.percentile(0.5),
                b.rate(),
                b.received,
                b.percentile(0.5),
            );
            plains.push(p);
            patchbays.push(b);
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{n} signals and {pings} single round trips per target, {rounds} rounds, QoS 1 (patchbay: MQTT {version}); median, range"
    );
    println!("| target | signals/s | range | delivered | round trip p50 | p99 |");
    println!("|---|---|---|---|---|---|");
    let mut rates = Vec::new();
    let mut p50s = Vec::new();
    for (name, runs) in [
        ("plain rumqttc pair", &plains),
        ("patchbay → mosquitto → patchbay", &patchbays),
    ] {
        let (rate, lo, hi) = median_of(runs.iter().map(Run::rate).collect());
        let delivered = runs.iter().map(|r| r.received).min().unwrap_or(0);
        let (p50, _, _) = median_of(runs.iter().map(|r| r.percentile(0.5)).collect());
        let (p99, _, _) = median_of(runs.iter().map(|r| r.percentile(0.99)).collect());
        rates.push(rate);
        p50s.push(p50);
        println!(
            "| {name} | {rate:.0} | {lo:.0}–{hi:.0} | {:.1}% | {p50:.0} µs | {p99:.0} µs |",
            delivered as f64 / n as f64 * 100.0
        );
    }
    println!(
        "patchbay / plain: {:.2}x the throughput, {:.2}x the round-trip latency",
        rates[1] / rates[0],
        p50s[1] / p50s[0]
    );
}
