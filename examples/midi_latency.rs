//! MIDI pad → control frame latency through patchbay, over real JACK MIDI ports.
//!
//! This program plays both ends: a controller (a JACK MIDI port that sends note-ons) and an
//! Escapement agent (a WebSocket server receiving `{"kind":"control","op":"pause"}`). It
//! starts a JACK server with its dummy driver and `patchbay run` on a pipeline
//! `midi → when → map (control.pause) → escapement`, then sends one note at a time and
//! times how long each takes to come out of patchbay as a control frame: the end-to-end
//! latency, MIDI in to WebSocket frame out. JACK moves MIDI once per period of its dummy
//! driver (jackd's default 1024 frames, 21.3 ms at 48 kHz), which dominates the figure.
//!
//! ```text
//! cargo build --release --features jack
//! cargo run --release --features jack --example midi_latency -- [MESSAGES]
//! ```
//!
//! Needs `jackd` (Debian's `jackd2`).

#[path = "../tests/support/jack.rs"]
mod jack;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use midir::MidiOutput;
use midir::os::unix::VirtualOutput;
use tokio_tungstenite::tungstenite::Message;

#[tokio::main]
async fn main() {
    let messages: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let server = jack::JackServer::start("latency");
    // SAFETY of the environment: set before any thread that reads it (JACK clients below).
    unsafe { std::env::set_var("JACK_DEFAULT_SERVER", server.name()) };

    // The controller: a virtual MIDI output port, `bench:pad`.
    let output = MidiOutput::new("bench").expect("a JACK MIDI client");
    let mut pad = output.create_virtual("pad").expect("a virtual MIDI port");

    // The agent: a WebSocket server that forwards each frame's arrival time.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, mut frames) = tokio::sync::mpsc::unbounded_channel::<Instant>();
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

    let dir = std::env::temp_dir().join(format!("patchbay-midi-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("latency.toml");
    std::fs::write(
        &config,
        format!(
            "[sources.pads]\ntype = \"midi\"\nport = \"bench:pad\"\nrescan_ms = 100\n\n\
             [filters.pressed]\ntype = \"when\"\ninputs = [\"pads\"]\nwhen = {{ type = \"midi.note_on\" }}\n\n\
             [filters.pause]\ntype = \"map\"\ninputs = [\"pressed\"]\nset_type = \"control.pause\"\n\n\
             [outputs.agent]\ntype = \"escapement\"\ninputs = [\"pause\"]\nurl = \"ws://127.0.0.1:{port}/ws\"\n"
        ),
    )
    .unwrap();
    let mut patchbay = Command::new("target/release/patchbay")
        .args(["run", config.to_str().unwrap()])
        .env("PATCHBAY_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .expect("target/release/patchbay (cargo build --release --features jack)");

    // Warm up: send until the first frame comes back (patchbay connects to the port and
    // the agent on its own schedule).
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
    // Drain what the warm-up left in flight.
    while tokio::time::timeout(Duration::from_millis(300), frames.recv())
        .await
        .is_ok()
    {}

    let mut latencies = Vec::with_capacity(messages);
    for _ in 0..messages {
        let sent = Instant::now();
        pad.send(&[0x99, 36, 100]).unwrap();
        let Ok(Some(arrived)) = tokio::time::timeout(Duration::from_secs(5), frames.recv()).await
        else {
            panic!("a control frame did not come back");
        };
        latencies.push(arrived.duration_since(sent));
    }
    let _ = patchbay.kill();
    let _ = patchbay.wait();
    latencies.sort();
    let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
    println!(
        "{messages} messages, MIDI note-on in → control frame out: p50 {:?}, p99 {:?}, max {:?}",
        at(0.5),
        at(0.99),
        latencies[latencies.len() - 1]
    );
}
