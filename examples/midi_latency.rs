//! MIDI pad → control frame latency through patchbay, over real JACK MIDI ports.
//!
//! This program plays both ends around a patchbay pipeline it runs in-process:
//! a controller (a JACK MIDI port that sends note-ons) and an Escapement agent (a
//! WebSocket server receiving `{"kind":"control","op":"pause"}`), with
//! `midi → when → map (control.pause) → escapement` in between. It starts a JACK server with
//! its dummy driver, sends one note at a time and, for each, records three instants:
//!
//! - the controller's send,
//! - patchbay's MIDI callback (the `midi.received` latency probe),
//! - the control frame written to the agent's socket (the `escapement.sent` probe),
//!
//! and the frame's arrival at the agent. The probes are `trace` events of target
//! `patchbay::latency`, caught here by a tracing layer that reads the monotonic clock. So it
//! reports the time inside patchbay (callback to frame written, microsecond clock) apart
//! from JACK's delivery, which waits for the next period of the dummy driver (`--period`
//! frames at 48 kHz; jackd's default of 1024 is 21.3 ms).
//!
//! ```text
//! cargo build --release --features jack --example midi_latency
//! ./target/release/examples/midi_latency [MESSAGES] [--period FRAMES]
//! ```
//!
//! Needs `jackd` (Debian's `jackd2`).

use patchbay_testkit::jack;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use midir::MidiOutput;
use midir::os::unix::VirtualOutput;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{EnvFilter, Layer};

/// The target of patchbay's latency probes.
const PROBE_TARGET: &str = "patchbay::latency";

/// A probe passed: its stage name and when.
type Mark = (String, Instant);

/// A tracing layer that forwards each latency probe, stamped with the monotonic clock.
struct Probes(mpsc::UnboundedSender<Mark>);

impl<S: tracing::Subscriber> Layer<S> for Probes {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let at = Instant::now();
        struct Stage(String);
        impl Visit for Stage {
            fn record_str(&mut self, field: &Field, value: &str) {
                if field.name() == "stage" {
                    value.clone_into(&mut self.0);
                }
            }
            fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
        }
        let mut stage = Stage(String::new());
        event.record(&mut stage);
        let _ = self.0.send((stage.0, at));
    }
}

#[tokio::main]
async fn main() {
    let mut messages = 10_000usize;
    let mut period = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--period" => period = args.next().and_then(|p| p.parse().ok()),
            n => {
                messages = n
                    .parse()
                    .expect("usage: midi_latency [MESSAGES] [--period FRAMES]")
            }
        }
    }

    let (marks_tx, mut marks) = mpsc::unbounded_channel::<Mark>();
    let probes = Probes(marks_tx).with_filter(tracing_subscriber::filter::filter_fn(|meta| {
        meta.target() == PROBE_TARGET
    }));
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(EnvFilter::new("warn"));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(probes).with(log))
        .expect("the only tracing subscriber");

    let server = jack::JackServer::start_with_period("latency", period);
    // SAFETY of the environment: set before any thread that reads it (JACK clients below).
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("JACK_DEFAULT_SERVER", server.name())
    };

    // The controller: a virtual MIDI output port, `bench:pad`.
    let output = MidiOutput::new("bench").expect("a JACK MIDI client");
    let mut pad = output.create_virtual("pad").expect("a virtual MIDI port");

    // The agent: a WebSocket server that forwards each frame's arrival time.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, mut frames) = mpsc::unbounded_channel::<Instant>();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if matches!(msg, Message::Text(_)) {
                        let _ = tx.send(Instant::now());
                    }
                }
            });
        }
    });

    // patchbay, in this process.
    let config = format!(
        "[sources.pads]\ntype = \"midi\"\nport = \"bench:pad\"\nrescan_ms = 100\n\n\
         [filters.pressed]\ntype = \"when\"\ninputs = [\"pads\"]\nwhen = {{ type = \"midi.note_on\" }}\n\n\
         [filters.pause]\ntype = \"map\"\ninputs = [\"pressed\"]\nset_type = \"control.pause\"\n\n\
         [outputs.agent]\ntype = \"escapement\"\ninputs = [\"pause\"]\nurl = \"ws://127.0.0.1:{port}/ws\"\n"
    );
    let graph = patchbay_graph::compile(
        &[patchbay_graph::SourceText::new("latency.toml", config)],
        &patchbay::registry(),
    )
    .unwrap_or_else(|errors| panic!("the pipeline does not compile: {errors:?}"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let patchbay = tokio::spawn(patchbay_graph::runtime::run(graph, async {
        let _ = stopped.await;
    }));

    // Warm up: send until the first frame comes back (patchbay connects to the port and
    // the agent on its own schedule), then drain what the warm-up left in flight.
    let start = Instant::now();
    loop {
        pad.send(&[0x99, 36, 100]).unwrap();
        if tokio::time::timeout(Duration::from_millis(200), frames.recv())
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no control frame came back"
        );
    }
    while tokio::time::timeout(Duration::from_millis(300), frames.recv())
        .await
        .is_ok()
    {}
    while marks.try_recv().is_ok() {}

    let mut jack_hop = Vec::with_capacity(messages);
    let mut inside = Vec::with_capacity(messages);
    let mut end_to_end = Vec::with_capacity(messages);
    // Notes JACK dropped in an xrun cycle, before patchbay's callback saw them.
    let mut lost_in_jack = 0usize;
    while inside.len() < messages {
        let sent = Instant::now();
        pad.send(&[0x99, 36, 100]).unwrap();
        let arrived = match tokio::time::timeout(Duration::from_secs(2), frames.recv()).await {
            Ok(Some(arrived)) => arrived,
            _ => {
                let mut stages = Vec::new();
                while let Ok((stage, _)) = marks.try_recv() {
                    stages.push(stage);
                }
                assert!(
                    stages.is_empty(),
                    "patchbay received note {} but sent no control frame (probes: {stages:?})",
                    inside.len()
                );
                lost_in_jack += 1;
                assert!(
                    lost_in_jack <= messages / 10 + 10,
                    "JACK lost {lost_in_jack} notes\nJACK ports:\n{}\njackd log:\n{}",
                    server.ports(),
                    server.log()
                );
                continue;
            }
        };
        // The agent may read the frame before patchbay's send returns: wait for both marks.
        let (mut received, mut written) = (None, None);
        while received.is_none() || written.is_none() {
            let Ok(Some((stage, at))) =
                tokio::time::timeout(Duration::from_secs(5), marks.recv()).await
            else {
                panic!("a latency probe did not fire (received {received:?}, written {written:?})");
            };
            match stage.as_str() {
                "midi.received" => received = Some(at),
                "escapement.sent" => written = Some(at),
                other => panic!("an unknown latency probe `{other}`"),
            }
        }
        let (received, written) = (received.unwrap(), written.unwrap());
        jack_hop.push(received.duration_since(sent));
        inside.push(written.duration_since(received));
        end_to_end.push(arrived.duration_since(sent));
    }
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), patchbay).await;

    println!(
        "{messages} note-ons, JACK dummy driver period {} frames; {lost_in_jack} more were \
         dropped by JACK in xrun cycles before reaching patchbay",
        period.map_or("1024 (default)".to_owned(), |p| p.to_string())
    );
    for (what, figures) in [
        (
            "inside patchbay (MIDI callback → frame written)",
            &mut inside,
        ),
        (
            "JACK delivery (controller send → MIDI callback)",
            &mut jack_hop,
        ),
        (
            "end to end (controller send → agent reads the frame)",
            &mut end_to_end,
        ),
    ] {
        figures.sort();
        let at = |p: f64| figures[((figures.len() - 1) as f64 * p).round() as usize];
        println!(
            "  {what}: p50 {:?}, p99 {:?}, max {:?}",
            at(0.5),
            at(0.99),
            figures[figures.len() - 1]
        );
    }
}
