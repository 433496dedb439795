//! The stream between an `mqtt` output and an `mqtt` source (persistent session) at QoS
//! 1, over MQTT 3.1.1 and 5, broken mid-way: a persistent `mosquitto` stopped (SIGTERM,
//! as an operator or a service manager stops it: it saves its sessions) and started
//! again, or every connection cut at once by a proxy while the broker lives on.
//!
//! What is proved: nothing is lost (every signal arrives); the output counts each signal
//! sent exactly once, when acknowledged; and a repeat happens only where the guarantee
//! says it may, for a message whose acknowledgement the break cut: a repeat marked
//! `metadata.mqtt.redelivered` is one the broker sent again (`mqtt_redelivered` counts
//! them), an unmarked one is one the output published again (`mqtt_resent`), so the
//! repeats of each kind are bounded by those counters. An acknowledged message is never
//! repeated, by either side.
//!
//! (A broker killed with SIGKILL loses what it had not saved yet, acknowledged or not:
//! that is the broker's durability, not the client's, and no client can make up for it.)

mod mosquitto;

use mosquitto::{Graph, Mosquitto, Setup, final_of, wait_for};
use patchbay_graph::HealthState;
use patchbay_signal::{Signal, object};
use serde_json::json;

/// How the stream is broken mid-way.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Break {
    /// The broker is stopped (SIGTERM: it saves its state) and started again.
    Restart,
    /// Every connection is cut (the broker lives on), as a network failure would.
    Cut,
}

async fn restart_mid_stream(version: &str) {
    broken_mid_stream(version, Break::Restart).await;
}

async fn broken_mid_stream(version: &str, how: Break) {
    const N: usize = 20_000;
    let mut broker = Mosquitto::start(Setup {
        persistent: true,
        ..Setup::default()
    });
    let retry = "backoff_initial_ms = 50\nbackoff_max_ms = 500";
    let prefix = format!("{how:?}{}", version.replace('.', "")).to_lowercase();
    // A cut goes through a proxy that can drop every connection at once.
    let proxy = CutProxy::start(broker.port).await;
    let url = match how {
        Break::Restart => broker.url(),
        Break::Cut => format!("mqtt://127.0.0.1:{}", proxy.port),
    };
    // The output's queue holds the whole run: a full `block` queue holds the engine, and the
    // source, waiting to hand over, would notice the break only at a keep-alive ping, 30 or
    // 60 s later (docs/pipelines.md, "Queues"). This test is about the MQTT links' promise.
    let mut graph = Graph::start(&format!(
        "[outputs.out]\ntype = \"mqtt\"\nqueue = {N}\ninputs = [\"feed\"]\nurl = \"{url}\"\nversion = \"{version}\"\n\
         topic = \"{prefix}/{{type}}\"\nclient_id = \"{prefix}-out\"\n{retry}\n\n\
         [sources.in]\ntype = \"mqtt\"\nurl = \"{url}\"\nversion = \"{version}\"\ntopics = [\"{prefix}/#\"]\n\
         client_id = \"{prefix}-in\"\nclean_session = false\n{retry}\n\n\
         [outputs.back]\ntype = \"seen\"\ninputs = [\"in\"]\n"
    ))
    .await;
    graph.subscribed("in", 1).await;

    let feed = graph.feed.clone();
    let feeder = tokio::spawn(async move {
        for i in 0..N {
            let signal = Signal::new("tick", "test:restart", object! {"i" => i});
            if feed.send(signal).await.is_err() {
                return;
            }
        }
    });

    let mut copies = vec![0u32; N];
    let (mut distinct, mut repeats_marked, mut repeats_unmarked) = (0, 0u64, 0u64);
    let mut receive = |s: &patchbay_signal::SharedSignal| {
        let i = s.payload["i"].as_u64().expect("payload.i") as usize;
        copies[i] += 1;
        if copies[i] == 1 {
            distinct += 1;
        } else if s.meta("mqtt").and_then(|m| m.get("redelivered")) == Some(&json!(true)) {
            repeats_marked += 1;
        } else {
            repeats_unmarked += 1;
        }
        distinct
    };
    while receive(&graph.next().await) < N / 20 {}

    // Mid-stream: the output is publishing, the source handing over.
    match how {
        Break::Restart => tokio::task::block_in_place(|| broker.stop()),
        Break::Cut => proxy.cut(),
    }
    let sent_before = graph.component("out").sent;
    assert!(
        sent_before < N as u64,
        "the stream broke mid-way ({sent_before} of {N} sent)"
    );
    match how {
        Break::Restart => {
            wait_for("both ends noticed", || {
                graph.component("out").state == HealthState::Recovering
                    && graph.component("in").state == HealthState::Recovering
            })
            .await;
            tokio::task::block_in_place(|| broker.restart());
        }
        // The broker is there: both ends are back as soon as they notice.
        Break::Cut => {
            wait_for("both ends reconnected", || {
                graph.gauge("out", "mqtt_connects") >= 2.0
                    && graph.gauge("in", "mqtt_connects") >= 2.0
            })
            .await;
        }
    }

    while receive(&graph.next().await) < N {}
    wait_for("every signal acknowledged", || {
        graph.component("out").sent == N as u64
    })
    .await;
    feeder.await.expect("the feeder ends");
    // Anything still due (a last repeat) is in by the time the output has nothing in flight
    // and the source's queue drained: take what is there.
    while let Ok(s) = graph.seen.try_recv() {
        receive(&s);
    }
    let out = graph.component("out");
    let inbound = graph.component("in");
    let report = graph.stop().await;
    let (out_end, in_end) = (final_of(&report, "out"), final_of(&report, "in"));

    let missing: Vec<usize> = (0..N).filter(|&i| copies[i] == 0).collect();
    assert!(
        missing.is_empty(),
        "{version}: lost {} signals: {:?}…",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    let resent = out.gauges.get("mqtt_resent").copied().unwrap_or(0.0) as u64;
    let redelivered = inbound
        .gauges
        .get("mqtt_redelivered")
        .copied()
        .unwrap_or(0.0) as u64;
    eprintln!(
        "{version} {how:?}: {sent_before} sent before the break; resent {resent}, redelivered {redelivered}; \
         repeats {repeats_unmarked} unmarked, {repeats_marked} marked"
    );
    assert!(
        repeats_unmarked <= resent,
        "{version}: {repeats_unmarked} repeats the output did not publish again ({resent} resent)"
    );
    assert!(
        repeats_marked <= redelivered,
        "{version}: {repeats_marked} marked repeats, {redelivered} redelivered"
    );
    assert_eq!(
        out_end.sent, N as u64,
        "{version}: each counted once, when acknowledged: {out_end:?}"
    );
    assert_eq!((out_end.dropped, out_end.bad_input), (0, 0), "{out_end:?}");
    assert_eq!((in_end.dropped, in_end.bad_input), (0, 0), "{in_end:?}");
    for c in [&out, &inbound] {
        assert!(
            c.gauges.get("mqtt_connects").copied().unwrap_or(0.0) >= 2.0,
            "reconnected: {c:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_mid_stream_loses_nothing_acknowledged_3_1_1() {
    restart_mid_stream("3.1.1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_mid_stream_loses_nothing_acknowledged_5() {
    restart_mid_stream("5").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_cut_mid_stream_lose_nothing_acknowledged_3_1_1() {
    broken_mid_stream("3.1.1", Break::Cut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_cut_mid_stream_lose_nothing_acknowledged_5() {
    broken_mid_stream("5", Break::Cut).await;
}

/// A TCP proxy to the broker on a loopback port whose connections can all be dropped at
/// once (both directions cut mid-stream, as a failing network would), accepting new ones
/// afterwards.
struct CutProxy {
    port: u16,
    generation: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    async fn start(broker: u16) -> CutProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (generation, watch) = tokio::sync::watch::channel(0u64);
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut cut = watch.clone();
                cut.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(mut upstream) =
                        tokio::net::TcpStream::connect(("127.0.0.1", broker)).await
                    else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                        _ = cut.changed() => {}
                    }
                    // Both sockets dropped here, mid-packet maybe, without an MQTT goodbye.
                });
            }
        });
        CutProxy {
            port,
            generation,
            task,
        }
    }

    /// Drops every open connection.
    fn cut(&self) {
        self.generation.send_modify(|g| *g += 1);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
