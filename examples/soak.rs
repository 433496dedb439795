//! Fault soak: the real `patchbay` binary on loopback for a bounded time, under faults.
//!
//! ```text
//! cargo build --release && cargo build --release --example soak
//! target/release/examples/soak [--minutes 10] [--patchbay target/release/patchbay] [--rate 400] [--keep]
//! ```
//! (`scripts/soak` does both builds and runs it.)
//!
//! It writes a config to a scratch directory and runs the daemon with it:
//!
//! - a `websocket` source and an `sse` source read two upstream servers this program runs,
//!   each sending numbered signals with malformed frames mixed in (bad JSON, a non-string
//!   `type`, a non-UTF-8 binary frame, an oversized frame or line); both servers are killed
//!   (connections dropped, no close) and restarted every few seconds;
//! - signals are ingested into a lossless sidecar (`when_full = "block"`) by `POST /signal`
//!   (singles and arrays) and by WebSocket frames, with malformed requests and frames mixed
//!   in; a signal counts as acknowledged when its POST answered `ok` (or named it among the
//!   `accepted`), or when the WebSocket that carried it was closed cleanly without a
//!   refusal naming it;
//! - a lossless subscriber reads the sidecar's `/ws`, resuming by `seq` and epoch whenever
//!   it is cut off (it stalls on purpose now and then, so that it is cut with close 1013,
//!   and drops its own connection now and then); slow clients (a frame a second) and
//!   vanishing clients (connect, read a little, drop without a close) share the sidecar;
//! - the config is reloaded (SIGHUP) once a minute with a changed filter and the sidecar
//!   unchanged; the daemon's RSS and `/metrics` are sampled every five seconds.
//!
//! At the end it sends SIGTERM and prints a report. It exits 1 when an acknowledged signal
//! was lost, a signal arrived twice, the subscriber saw a gap or a jump in `seq`, the
//! daemon panicked or exited non-zero (or did not exit within 30 s of SIGTERM), malformed
//! input went uncounted, a reload failed, or RSS grew without bound: of the run after its
//! first two minutes (while the sidecar's ring fills), the largest sample of the last third is
//! over 1.5 times the largest of the first third and over it by more than 16 MB (runs
//! shorter than 3.5 minutes are not judged on RSS).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use patchbay_testkit::prng::Rng;
use patchbay_testkit::process::free_port;
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;

/// The `websocket` source's `max_frame` in the soak's config: the oversized frames are
/// just over it.
const WS_MAX_FRAME: usize = 65_536;
/// The `sse` source's `max_line_bytes` in the soak's config.
const SSE_MAX_LINE: usize = 65_536;
/// The sidecar's `max_frame` (largest POST body or ingest frame).
const SIDECAR_MAX_FRAME: usize = 262_144;
/// The sidecar's `resume_window_ms`. The lossless subscriber stalls for 20 s now and then
/// and reads only a little faster than frames are published (its receive buffer is
/// small), so it can be a minute behind when it comes back: the window is two, and the
/// ring's text bound holds two minutes of the soak's traffic (about 600 frames of 1 KB a
/// second).
const RESUME_WINDOW_MS: u64 = 120_000;
/// The sidecar's `ring_max_bytes`.
const RING_MAX_BYTES: usize = 256 << 20;
/// How often the daemon's RSS and `/metrics` are sampled.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// RSS growth that fails the soak: last third's max over this factor of the first third's…
const RSS_FACTOR: f64 = 1.5;
/// …and over it by more than this (allocator noise on a small process is not growth).
const RSS_SLACK_KB: u64 = 16 * 1024;
/// RSS before this is not judged: the sidecar's ring fills during the first two minutes
/// (its resume window).
const RSS_WARM_UP: Duration = Duration::from_millis(RESUME_WINDOW_MS);
/// The growth rule is applied when the run lasts at least this long after the warm-up.
const RSS_MIN_SPAN: Duration = Duration::from_secs(90);

struct Options {
    minutes: f64,
    patchbay: PathBuf,
    /// Ingested signals per second (POST and WebSocket together, roughly).
    rate: u64,
    /// Keep the scratch directory (config, daemon log) even when the soak passes.
    keep: bool,
    /// Seeds every random choice of the soak (upstream lifetimes, ingest batch sizes and
    /// sessions, vanishing clients), so that a failing run's choices can be made again.
    seed: u64,
    /// Seconds between reloads.
    reload_every: u64,
}

fn options() -> Options {
    let mut o = Options {
        minutes: 10.0,
        patchbay: "target/release/patchbay".into(),
        rate: 400,
        keep: false,
        seed: 1,
        reload_every: 60,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--minutes" => o.minutes = value.parse().expect("--minutes N"),
            "--patchbay" => o.patchbay = value.into(),
            "--rate" => o.rate = value.parse::<u64>().expect("--rate N").max(10),
            "--seed" => o.seed = value.parse().expect("--seed N"),
            "--reload-every" => {
                o.reload_every = value.parse::<u64>().expect("--reload-every SECONDS").max(5)
            }
            "--keep" => {
                o.keep = true;
                i += 1;
                continue;
            }
            other => {
                eprintln!(
                    "soak: unknown argument {other}\nusage: soak [--minutes N] [--patchbay PATH] [--rate N] [--seed N] [--reload-every SECONDS] [--keep]"
                );
                std::process::exit(2);
            }
        }
        i += 2;
    }
    o
}

/// Counters shared by every task of the soak.
#[derive(Default)]
struct Tally {
    /// `--seed`: each task's random choices start from it (mixed with the task's own
    /// constant, see [`Tally::rng`]).
    seed: u64,
    /// Set when the run's time is up: senders and fault injectors stop.
    stop: AtomicBool,
    /// Ingested signals sent (each numbered once).
    ingest_sent: AtomicU64,
    /// Ingested signals the sidecar refused (503, or an error frame naming them).
    ingest_refused: AtomicU64,
    /// Sent on a WebSocket that ended before a clean close: neither acknowledged nor refused.
    ingest_unconfirmed: AtomicU64,
    /// The ids of the acknowledged ingested signals.
    acked: Mutex<Vec<String>>,
    /// POST requests answered 200, and arrays among them.
    posts_ok: AtomicU64,
    post_arrays: AtomicU64,
    /// WebSocket ingest connections closed cleanly.
    ws_ingest_sessions: AtomicU64,
    /// Malformed inputs sent, per target: the websocket upstream, the SSE upstream, ingest.
    bad_ws_up: AtomicU64,
    bad_sse_up: AtomicU64,
    bad_ingest: AtomicU64,
    /// Malformed ingest answered with a 4xx or an error frame (as it must be).
    bad_ingest_answered: AtomicU64,
    /// Numbered signals written by the upstream servers.
    ws_up_sent: AtomicU64,
    sse_up_sent: AtomicU64,
    /// Upstream server restarts (kill + start again), per server.
    ws_up_restarts: AtomicU64,
    sse_up_restarts: AtomicU64,
    /// Upstream connections accepted (patchbay's reconnects).
    ws_up_connections: AtomicU64,
    sse_up_connections: AtomicU64,
    /// Slow client sessions (each ends after 60 s, and the client connects again).
    slow_sessions: AtomicU64,
    /// Vanishing clients that connected and went away without a close.
    vanished: AtomicU64,
}

impl Tally {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The random choices of one task: the run's seed mixed with the task's constant
    /// (xorshift needs a nonzero state).
    fn rng(&self, task: u64) -> Rng {
        Rng((self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ task).max(1))
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// The config: two upstream sources through a `when` filter whose expression changes at
/// each reload (so that it is rebuilt), and a lossless sidecar that stays the same.
fn config(ui: u16, ws_up: u16, sse_up: u16, generation: u64) -> String {
    format!(
        r#"# Written by examples/soak.rs (generation {generation}).
[runtime]
shutdown_timeout_ms = 10000

[sources.wsup]
type = "websocket"
url = "ws://127.0.0.1:{ws_up}/feed"
backoff_initial_ms = 100
backoff_max_ms = 1000
max_frame = {WS_MAX_FRAME}

[sources.sseup]
type = "sse"
url = "http://127.0.0.1:{sse_up}/events"
backoff_initial_ms = 100
backoff_max_ms = 1000
max_line_bytes = {SSE_MAX_LINE}

[filters.upstream]
type = "when"
inputs = ["wsup", "sseup"]
expr = '.type != "soak.never.{generation}"'

[outputs.ui]
type = "sidecar"
inputs = ["ui.inbound", "upstream"]
listen = "127.0.0.1:{ui}"
when_full = "block"
ring = 20000
resume_window_ms = {RESUME_WINDOW_MS}
ring_max_bytes = {RING_MAX_BYTES}
max_frame = {SIDECAR_MAX_FRAME}
"#
    )
}

/// The wall clock in ms since the Unix epoch (what a signal's `timestamp` says).
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A numbered signal, with `pad` bytes of padding.
fn tick(n: u64, id: &str, pad: usize) -> String {
    json!({
        "id": id,
        "type": "soak.tick",
        "source": "soak",
        "payload": {"n": n, "note": "a numbered signal of the fault soak", "pad": ".".repeat(pad)},
    })
    .to_string()
}

/// Padding of the ingested signals: frames of about 1 KB, so that a subscriber that stops
/// reading fills the kernel's socket buffers (a few MB) within seconds and then its queue
/// in the sidecar, which cuts it off.
const INGEST_PAD: usize = 700;

/// A minimal HTTP/1.1 request on a fresh connection; (status, body). The body is read
/// whole (`Connection: close`).
async fn http(port: u16, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    // A refused oversized body may be answered before it is all written.
    let _ = stream.write_all(body).await;
    let mut response = Vec::new();
    let read =
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response)).await;
    if !matches!(read, Ok(Ok(_))) && response.is_empty() {
        return Err(std::io::Error::other("no answer"));
    }
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

// ---------------------------------------------------------------- upstream servers

/// Runs `serve` on `port` for a few seconds at a time: then the listener and every
/// connection are dropped at once (no close frame, no end of stream), and after a pause it
/// starts again, until the soak stops.
async fn restarting<F, Fut>(port: u16, tally: Arc<Tally>, task: u64, websocket: bool, serve: F)
where
    F: Fn(TcpStream, Instant) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut rng = tally.rng(task);
    while !tally.stopping() {
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", port)).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        // Sending stops 300 ms before the kill, so that what was sent has been read.
        let life = Duration::from_millis(3000 + rng.below(4000) as u64);
        let quiet_from = Instant::now() + life;
        let kill_at = tokio::time::Instant::now() + life + Duration::from_millis(300);
        let mut connections = JoinSet::new();
        while tokio::time::Instant::now() < kill_at && !tally.stopping() {
            if let Ok(Ok((stream, _))) =
                tokio::time::timeout(Duration::from_millis(200), listener.accept()).await
            {
                connections.spawn(serve(stream, quiet_from));
            }
        }
        if tally.stopping() {
            // Senders stop at once: what they wrote is read before the end.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        drop(listener);
        connections.abort_all();
        while connections.join_next().await.is_some() {}
        if tally.stopping() {
            return;
        }
        let restarts = if websocket {
            &tally.ws_up_restarts
        } else {
            &tally.sse_up_restarts
        };
        add(restarts, 1);
        tokio::time::sleep(Duration::from_millis(200 + rng.below(1300) as u64)).await;
    }
}

/// One connection of the WebSocket upstream: a numbered signal every 20 ms, a malformed
/// frame every 25th (bad JSON, a non-string `type`, a non-UTF-8 binary frame, a frame over
/// the source's `max_frame`, after which this connection sends nothing more).
async fn ws_upstream_connection(
    stream: TcpStream,
    quiet_from: Instant,
    tally: Arc<Tally>,
    next: Arc<AtomicU64>,
) {
    add(&tally.ws_up_connections, 1);
    let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let (mut sink, mut stream) = ws.split();
    let mut every = tokio::time::interval(Duration::from_millis(20));
    let mut k = 0u64;
    while Instant::now() < quiet_from && !tally.stopping() {
        // Reading (in this task, so that the kill ends it) answers patchbay's pings.
        tokio::select! {
            _ = every.tick() => {}
            incoming = stream.next() => match incoming {
                Some(Ok(_)) => continue,
                _ => return,
            },
        }
        k += 1;
        if k.is_multiple_of(25) {
            let kind = (k / 25) % 4;
            let frame = match kind {
                0 => Message::text("{\"type\": \"soak.tick\", \"payload\": {"),
                1 => Message::text("{\"type\": 5, \"payload\": {}}"),
                2 => Message::binary(vec![0xff, 0xfe, 0x00, 0x80]),
                _ => Message::text(format!(
                    "{{\"type\":\"soak.tick\",\"payload\":{{\"pad\":\"{}\"}}}}",
                    "x".repeat(WS_MAX_FRAME + 1024)
                )),
            };
            if sink.send(frame).await.is_err() {
                break;
            }
            add(&tally.bad_ws_up, 1);
            if kind == 3 {
                // patchbay resets the connection: what followed would be lost on the way.
                break;
            }
            continue;
        }
        let n = next.fetch_add(1, Ordering::Relaxed);
        if sink
            .send(Message::text(tick(n, &format!("soak-ws-{n}"), 0)))
            .await
            .is_err()
        {
            break;
        }
        add(&tally.ws_up_sent, 1);
    }
    // Held open (not closed) until killed.
    while let Some(Ok(_)) = stream.next().await {}
    drop(sink);
}

/// One connection of the SSE upstream: a close-delimited `text/event-stream` answer, an
/// event every 20 ms, a malformed one every 25th (bad JSON, a non-string `type`, a line
/// over `max_line_bytes`, after which this connection sends nothing more).
async fn sse_upstream_connection(
    mut stream: TcpStream,
    quiet_from: Instant,
    tally: Arc<Tally>,
    next: Arc<AtomicU64>,
) {
    add(&tally.sse_up_connections, 1);
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let answer = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
    if stream.write_all(answer.as_bytes()).await.is_err() {
        return;
    }
    let mut every = tokio::time::interval(Duration::from_millis(20));
    let mut k = 0u64;
    while Instant::now() < quiet_from && !tally.stopping() {
        every.tick().await;
        k += 1;
        if k.is_multiple_of(25) {
            let kind = (k / 25) % 3;
            let event = match kind {
                0 => "data: {\"type\": \"soak.tick\", \"payload\": [\n\n".to_owned(),
                1 => "data: {\"type\": [\"soak\"], \"payload\": {}}\n\n".to_owned(),
                _ => format!("data: {}\n\n", "y".repeat(SSE_MAX_LINE + 1024)),
            };
            if stream.write_all(event.as_bytes()).await.is_err() {
                return;
            }
            add(&tally.bad_sse_up, 1);
            if kind == 2 {
                break;
            }
            continue;
        }
        let n = next.fetch_add(1, Ordering::Relaxed);
        let event = format!(
            "id: {n}\ndata: {}\n\n",
            tick(n, &format!("soak-sse-{n}"), 0)
        );
        if stream.write_all(event.as_bytes()).await.is_err() {
            return;
        }
        add(&tally.sse_up_sent, 1);
    }
    // Held open until killed; patchbay's end of it is read (and ignored) meanwhile.
    let mut sink = [0u8; 256];
    while let Ok(n) = stream.read(&mut sink).await {
        if n == 0 {
            break;
        }
    }
}

// ---------------------------------------------------------------- ingest

/// Ingest by `POST /signal`: singles and arrays of up to 20, with a malformed request every
/// 50th (bad JSON, a non-string `type`, an array with one bad element, a body over
/// `max_frame`).
async fn post_sender(port: u16, rate: u64, tally: Arc<Tally>, next: Arc<AtomicU64>) {
    let mut rng = tally.rng(0x5eed_0001);
    let mut k = 0u64;
    let started = Instant::now();
    let mut sent_here = 0u64;
    while !tally.stopping() {
        k += 1;
        if k.is_multiple_of(50) {
            let body = match (k / 50) % 4 {
                0 => b"{\"type\": \"soak.tick\", \"payload\": {".to_vec(),
                1 => b"{\"type\": 5, \"payload\": {}}".to_vec(),
                2 => b"[{\"type\": \"soak.tick\"}, {\"type\": null}]".to_vec(),
                _ => format!(
                    "{{\"type\":\"soak.tick\",\"payload\":{{\"pad\":\"{}\"}}}}",
                    "z".repeat(SIDECAR_MAX_FRAME + 1024)
                )
                .into_bytes(),
            };
            add(&tally.bad_ingest, 1);
            if let Ok((status, _)) = http(port, "POST", "/signal", &body).await
                && (400..500).contains(&status)
            {
                add(&tally.bad_ingest_answered, 1);
            }
            continue;
        }
        let count = if rng.below(2) == 0 {
            1
        } else {
            2 + rng.below(19) as u64
        };
        let mut ids = Vec::new();
        let mut texts = Vec::new();
        for _ in 0..count {
            let n = next.fetch_add(1, Ordering::Relaxed);
            let id = format!("soak-in-{n}");
            texts.push(tick(n, &id, INGEST_PAD));
            ids.push(id);
        }
        let body = if count == 1 {
            texts.pop().unwrap()
        } else {
            format!("[{}]", texts.join(","))
        };
        add(&tally.ingest_sent, count);
        match http(port, "POST", "/signal", body.as_bytes()).await {
            Ok((200, answer)) => {
                let answer: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
                let echoed: Vec<String> = answer["ids"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                assert_eq!(answer["ok"], true, "a 200 answer without ok: {answer}");
                assert_eq!(echoed, ids, "the ids answered are not those sent");
                add(&tally.posts_ok, 1);
                if count > 1 {
                    add(&tally.post_arrays, 1);
                }
                tally.acked.lock().unwrap().extend(ids);
            }
            Ok((503, answer)) => {
                let answer: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
                let accepted = answer["accepted"].as_u64().unwrap_or(0);
                add(&tally.ingest_refused, count - accepted);
                tally
                    .acked
                    .lock()
                    .unwrap()
                    .extend(ids.into_iter().take(accepted as usize));
            }
            // Neither acknowledged nor refused: the request may or may not have been taken.
            _ => add(&tally.ingest_unconfirmed, count),
        }
        sent_here += count;
        pace(started, sent_here, rate / 2).await;
    }
}

/// Sleeps until `sent` signals at `rate` per second are due.
async fn pace(started: Instant, sent: u64, rate: u64) {
    let due = started + Duration::from_micros(sent * 1_000_000 / rate.max(1));
    let now = Instant::now();
    if due > now {
        tokio::time::sleep(due - now).await;
    }
}

/// Ingest over WebSocket: sessions of a few seconds, each closed cleanly (which
/// acknowledges what it carried that was not refused), with a malformed frame every 40th
/// (bad JSON, a non-string `type`, a non-UTF-8 binary frame).
async fn ws_sender(port: u16, rate: u64, tally: Arc<Tally>, next: Arc<AtomicU64>) {
    let mut rng = tally.rng(0x5eed_0002);
    let started = Instant::now();
    let mut sent_here = 0u64;
    let mut k = 0u64;
    while !tally.stopping() {
        // `types` matching nothing: the sender gets only answers to what it sends.
        let url = format!("ws://127.0.0.1:{port}/ws?types=soak.none");
        let Ok((ws, _)) = tokio_tungstenite::connect_async(&url).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let (mut sink, mut stream) = ws.split();
        let session_end = Instant::now() + Duration::from_millis(2000 + rng.below(4000) as u64);
        let mut carried: Vec<String> = Vec::new();
        let mut malformed = 0u64;
        // Answers are read while sending: error frames (malformed, refused).
        let reader = tokio::spawn(async move {
            let mut refused: Vec<String> = Vec::new();
            let mut errors = 0u64;
            let mut clean = false;
            while let Some(frame) = stream.next().await {
                match frame {
                    Ok(Message::Text(text)) => {
                        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                        if v["kind"] == "error" {
                            match v["refused"].as_array() {
                                Some(ids) => refused.extend(
                                    ids.iter().filter_map(|i| i.as_str().map(str::to_owned)),
                                ),
                                None => errors += 1,
                            }
                        }
                    }
                    Ok(Message::Close(_)) => {
                        clean = true;
                        break;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            // The server ends the connection once it handled our close (all it read is
            // then in the graph): EOF after our close counts as clean too.
            (refused, errors, clean)
        });
        let mut failed = false;
        while Instant::now() < session_end && !tally.stopping() {
            k += 1;
            let frame = if k.is_multiple_of(40) {
                malformed += 1;
                match (k / 40) % 3 {
                    0 => Message::text("{\"type\": \"soak.tick\", \"payload\": {"),
                    1 => Message::text("{\"type\": 5}"),
                    _ => Message::binary(vec![0xc3, 0x28, 0xa0, 0xa1]),
                }
            } else {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let id = format!("soak-in-{n}");
                let text = tick(n, &id, INGEST_PAD);
                carried.push(id);
                Message::text(text)
            };
            if sink.send(frame).await.is_err() {
                failed = true;
                break;
            }
            sent_here += 1;
            pace(started, sent_here, rate / 2).await;
        }
        add(&tally.ingest_sent, carried.len() as u64);
        add(&tally.bad_ingest, malformed);
        let closed = !failed && sink.send(Message::Close(None)).await.is_ok();
        let outcome = tokio::time::timeout(Duration::from_secs(30), reader).await;
        match outcome {
            Ok(Ok((refused, errors, _))) if closed => {
                add(&tally.bad_ingest_answered, errors);
                add(&tally.ingest_refused, refused.len() as u64);
                add(&tally.ws_ingest_sessions, 1);
                let refused: std::collections::HashSet<String> = refused.into_iter().collect();
                tally
                    .acked
                    .lock()
                    .unwrap()
                    .extend(carried.into_iter().filter(|id| !refused.contains(id)));
            }
            _ => add(&tally.ingest_unconfirmed, carried.len() as u64),
        }
    }
}

// ---------------------------------------------------------------- subscribers

/// What the lossless subscriber saw.
#[derive(Default)]
struct Seen {
    /// Frames received per signal id.
    ids: HashMap<String, u32>,
    /// Frames whose `seq` was not the last one plus one (within one epoch).
    seq_jumps: u64,
    /// `gap` frames (seqs the ring no longer held) and the seqs they name.
    gaps: u64,
    gap_missed: u64,
    /// Cut off with close 1013 (lagged) and resumed.
    cut: u64,
    /// Connections the subscriber dropped itself (and resumed).
    dropped_self: u64,
    /// Other disconnects (an error, an unexpected close) before the end.
    unexpected: u64,
    /// Epochs seen (more than one: the sidecar was restarted).
    epochs: Vec<String>,
    /// `error` signals (the upstreams' malformed input, as the sources report it).
    error_signals: u64,
    /// Frames received in all.
    frames: u64,
    /// The close that ended it at shutdown (1001 expected).
    final_close: Option<u16>,
    /// The longest time from the publication of the first frame it lacked to its resuming
    /// (the sidecar's promise holds for resumes within `RESUME_WINDOW_MS`), and how many
    /// resumes were later than that.
    longest_absence_ms: u64,
    late_resumes: u64,
}

/// The lossless subscriber: reads `/ws`, resumes with `?since=SEQ&epoch=E` whenever it is
/// cut off. It stalls for 20 s every 60 s from 20 s on (so that it overflows its queue and
/// is cut with close 1013) and drops its own connection every 70 s from 40 s on.
async fn lossless_subscriber(
    port: u16,
    tally: Arc<Tally>,
    seen: Arc<Mutex<Seen>>,
    shutdown: Arc<AtomicBool>,
    timeline: PathBuf,
) {
    use std::io::Write as _;
    // One line per connection, so that a failure can be placed in time.
    let mut timeline = std::fs::File::create(&timeline).ok();
    let mut last_seq: Option<u64> = None;
    // The `timestamp` of the last frame read: the first frame missed was published after it.
    let mut last_ts: Option<i64> = None;
    let mut epoch: Option<String> = None;
    let started = Instant::now();
    let mut next_stall = started + Duration::from_secs(20);
    let mut next_drop = started + Duration::from_secs(40);
    loop {
        let query = match (&epoch, last_seq) {
            (Some(e), Some(s)) => format!("?since={s}&epoch={e}"),
            // The first connection replays the ring from the start: seq 1 onwards.
            _ => "?since=0".to_owned(),
        };
        let (ws, this_epoch) = match ws_small(port, &query).await {
            Some(c) => c,
            None => {
                if shutdown.load(Ordering::Relaxed) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if let Some(e) = &this_epoch {
            let mut s = seen.lock().unwrap();
            if !s.epochs.contains(e) {
                s.epochs.push(e.clone());
            }
            if epoch.as_ref().is_some_and(|old| old != e) {
                // A new run of the sidecar: its seqs start again.
                last_seq = None;
            }
        }
        epoch = this_epoch;
        let connected = started.elapsed();
        let absence_ms = last_ts.map(|ts| (now_ms() - ts).max(0) as u64);
        if let Some(ms) = absence_ms {
            let mut s = seen.lock().unwrap();
            s.longest_absence_ms = s.longest_absence_ms.max(ms);
            s.late_resumes += u64::from(ms >= RESUME_WINDOW_MS);
        }
        let (mut first, mut last, mut frames, mut gap) = (None, None, 0u64, None);
        let (_, mut stream) = ws.split();
        let ended = loop {
            if !tally.stopping() && Instant::now() >= next_stall {
                next_stall += Duration::from_secs(60);
                tokio::time::sleep(Duration::from_secs(20)).await;
            }
            if !tally.stopping() && Instant::now() >= next_drop {
                next_drop += Duration::from_secs(70);
                seen.lock().unwrap().dropped_self += 1;
                break None;
            }
            let frame = match tokio::time::timeout(Duration::from_secs(1), stream.next()).await {
                Err(_) => continue,
                Ok(f) => f,
            };
            match frame {
                Some(Ok(Message::Text(text))) => {
                    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    let mut s = seen.lock().unwrap();
                    s.frames += 1;
                    match v["kind"].as_str() {
                        Some("gap") => {
                            gap = Some((v["from"].as_u64(), v["to"].as_u64()));
                            s.gaps += 1;
                            s.gap_missed += v["missed"].as_u64().unwrap_or(0);
                            if let Some(to) = v["to"].as_u64() {
                                last_seq = Some(to);
                            }
                            continue;
                        }
                        Some(_) => continue,
                        None => {}
                    }
                    last_ts = v["timestamp"].as_i64().or(last_ts);
                    if let Some(seq) = v["metadata"]["seq"].as_u64() {
                        first.get_or_insert(seq);
                        last = Some(seq);
                        frames += 1;
                        if last_seq.map_or(seq != 1, |l| seq != l + 1) {
                            s.seq_jumps += 1;
                        }
                        last_seq = Some(seq);
                    }
                    if v["type"] == "error" {
                        s.error_signals += 1;
                    }
                    if let Some(id) = v["id"].as_str() {
                        *s.ids.entry(id.to_owned()).or_default() += 1;
                    }
                }
                Some(Ok(Message::Close(close))) => break Some(close.map(|c| u16::from(c.code))),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break Some(None),
            }
        };
        if let Some(file) = &mut timeline {
            let _ = writeln!(
                file,
                "{:9.3}s..{:9.3}s {query:<40} absent {absence_ms:?} ms, gap {gap:?} seqs {first:?}..={last:?} ({frames} frames) ended {ended:?}",
                connected.as_secs_f64(),
                started.elapsed().as_secs_f64(),
            );
        }
        let mut s = seen.lock().unwrap();
        match ended {
            None => {}
            Some(Some(1013)) => s.cut += 1,
            Some(code) if shutdown.load(Ordering::Relaxed) => {
                s.final_close = code;
                return;
            }
            Some(_) => s.unexpected += 1,
        }
    }
}

/// A TCP connection to the sidecar with a small receive buffer, so that a client that
/// stops reading is soon behind in the sidecar's queue rather than in the kernel's.
async fn connect_small(port: u16) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(16 * 1024)?;
    socket.connect(([127, 0, 0, 1], port).into()).await
}

/// A WebSocket client connection.
type Ws = tokio_tungstenite::WebSocketStream<TcpStream>;

/// `/ws` (with `query`) over [`connect_small`]; the upgrade answer's epoch header.
async fn ws_small(port: u16, query: &str) -> Option<(Ws, Option<String>)> {
    let stream = connect_small(port).await.ok()?;
    let (ws, response) =
        tokio_tungstenite::client_async(format!("ws://127.0.0.1:{port}/ws{query}"), stream)
            .await
            .ok()?;
    let epoch = response
        .headers()
        .get("x-patchbay-epoch")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Some((ws, epoch))
}

/// A slow WebSocket client: reads a frame a second; after 60 s it closes and connects
/// again (live), so that it falls behind, and is cut off, again. (It never reads as far
/// as the close 1013 of a cut: that comes after every frame queued for it.)
async fn slow_ws_client(port: u16, tally: Arc<Tally>) {
    while !tally.stopping() {
        let Some((ws, _)) = ws_small(port, "").await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        add(&tally.slow_sessions, 1);
        let (mut sink, mut stream) = ws.split();
        let session_end = Instant::now() + Duration::from_secs(60);
        while !tally.stopping() && Instant::now() < session_end {
            match tokio::time::timeout(Duration::from_secs(2), stream.next()).await {
                Ok(Some(Ok(Message::Close(_)))) | Ok(Some(Err(_))) | Ok(None) => break,
                _ => {}
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), sink.send(Message::Close(None))).await;
    }
}

/// A slow SSE client: reads 512 bytes a second from `/events`; after 60 s (or when the
/// stream ends) it connects again.
async fn slow_sse_client(port: u16, tally: Arc<Tally>) {
    while !tally.stopping() {
        let Ok(mut stream) = connect_small(port).await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let head = format!(
            "GET /events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n"
        );
        if stream.write_all(head.as_bytes()).await.is_err() {
            continue;
        }
        add(&tally.slow_sessions, 1);
        let mut buf = [0u8; 512];
        let session_end = Instant::now() + Duration::from_secs(60);
        while !tally.stopping() && Instant::now() < session_end {
            if let Ok(Ok(0) | Err(_)) =
                tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await
            {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Vanishing clients: every 300 ms one connects (WebSocket, live or replaying the ring from
/// 0, or SSE), reads a little and drops the connection without a close.
async fn vanishing_clients(port: u16, tally: Arc<Tally>) {
    let mut rng = tally.rng(0x5eed_0003);
    let mut clients = JoinSet::new();
    while !tally.stopping() {
        let reads = rng.below(40);
        let kind = rng.below(3);
        let tally = tally.clone();
        clients.spawn(async move {
            if kind < 2 {
                let path = if kind == 0 { "/ws" } else { "/ws?since=0" };
                let Ok((ws, _)) =
                    tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}{path}")).await
                else {
                    return;
                };
                let (_, mut stream) = ws.split();
                for _ in 0..reads {
                    if !matches!(
                        tokio::time::timeout(Duration::from_secs(1), stream.next()).await,
                        Ok(Some(Ok(_)))
                    ) {
                        break;
                    }
                }
                // Dropped here: the TCP connection ends with no close frame.
            } else {
                let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else {
                    return;
                };
                let head =
                    format!("GET /events?since=0 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let mut buf = vec![0u8; 64 * reads.max(1)];
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await;
            }
            add(&tally.vanished, 1);
        });
        while clients.try_join_next().is_some() {}
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    while clients.join_next().await.is_some() {}
}

// ---------------------------------------------------------------- the daemon

/// One sample of the daemon: seconds since start, RSS (kB), and the metrics of interest.
#[derive(Clone, Default)]
struct Sample {
    at: f64,
    rss_kb: u64,
    bad_input: f64,
    dropped: f64,
    refused: f64,
    panics: f64,
    clients: f64,
    clients_cut: f64,
    generation: f64,
    reload_ok: f64,
}

fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Parsed `/metrics`: (family, labels, value).
fn parse_metrics(text: &str) -> Vec<(String, String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match key.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (key, ""),
            };
            Some((name.to_owned(), labels.to_owned(), value))
        })
        .collect()
}

fn sum(metrics: &[(String, String, f64)], family: &str, label: Option<&str>) -> f64 {
    metrics
        .iter()
        .filter(|(n, l, _)| n == family && label.is_none_or(|want| l.contains(want)))
        .map(|(_, _, v)| v)
        .fold(0.0, |a, b| a + b)
}

async fn sample(port: u16, pid: u32, started: Instant) -> Option<Sample> {
    let rss = rss_kb(pid)?;
    let (status, text) = http(port, "GET", "/metrics", b"").await.ok()?;
    if status != 200 {
        return None;
    }
    let m = parse_metrics(&text);
    Some(Sample {
        at: started.elapsed().as_secs_f64(),
        rss_kb: rss,
        bad_input: sum(&m, "patchbay_bad_input_total", None),
        dropped: sum(&m, "patchbay_dropped_total", None),
        refused: sum(&m, "patchbay_refused_total", None),
        panics: sum(&m, "patchbay_panics_total", None),
        clients: sum(&m, "patchbay_clients", None),
        clients_cut: sum(&m, "patchbay_clients_cut", None),
        generation: sum(&m, "patchbay_config_generation", None),
        reload_ok: sum(&m, "patchbay_config_reload_ok", None),
    })
}

/// bad_input per component, from `/metrics`.
async fn bad_input_by_component(port: u16) -> Vec<(String, f64)> {
    let Ok((_, text)) = http(port, "GET", "/metrics", b"").await else {
        return Vec::new();
    };
    parse_metrics(&text)
        .into_iter()
        .filter(|(n, _, _)| n == "patchbay_bad_input_total")
        .map(|(_, l, v)| {
            let name = l
                .split_once("component=\"")
                .and_then(|(_, r)| r.split_once('"'))
                .map(|(n, _)| n.to_owned())
                .unwrap_or(l);
            (name, v)
        })
        .collect()
}

fn kill(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status();
}

fn start_daemon(binary: &Path, config: &Path, log: &Path) -> Child {
    let log = std::fs::File::create(log).expect("daemon log");
    Command::new(binary)
        .args(["run", "-c", config.to_str().unwrap()])
        .env("PATCHBAY_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (build it first: cargo build --release)",
                binary.display()
            )
        })
}

async fn wait_listening(port: u16, child: &mut Child) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            eprintln!("soak: patchbay exited at start: {status}");
            std::process::exit(1);
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "patchbay never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::main]
async fn main() {
    let o = options();
    let run_for = Duration::from_secs_f64(o.minutes * 60.0);
    let dir = ScratchDir::new("soak");
    let (ui, ws_up, sse_up) = (free_port(), free_port(), free_port());
    let config_path = dir.join("soak.toml");
    let log_path = dir.join("patchbay.log");
    std::fs::write(&config_path, config(ui, ws_up, sse_up, 0)).unwrap();
    let validate = Command::new(&o.patchbay)
        .args(["validate", config_path.to_str().unwrap()])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", o.patchbay.display()));
    if !validate.status.success() {
        eprintln!(
            "soak: the config does not validate:\n{}",
            String::from_utf8_lossy(&validate.stderr)
        );
        std::process::exit(1);
    }

    let tally = Arc::new(Tally {
        seed: o.seed,
        ..Tally::default()
    });
    let ws_next = Arc::new(AtomicU64::new(1));
    let sse_next = Arc::new(AtomicU64::new(1));
    let mut tasks = JoinSet::new();
    {
        let (t, next) = (tally.clone(), ws_next.clone());
        tasks.spawn(restarting(ws_up, tally.clone(), 11, true, move |s, q| {
            ws_upstream_connection(s, q, t.clone(), next.clone())
        }));
        let (t, next) = (tally.clone(), sse_next.clone());
        tasks.spawn(restarting(sse_up, tally.clone(), 12, false, move |s, q| {
            sse_upstream_connection(s, q, t.clone(), next.clone())
        }));
    }

    let started = Instant::now();
    let mut child = start_daemon(&o.patchbay, &config_path, &log_path);
    let pid = child.id();
    wait_listening(ui, &mut child).await;
    println!(
        "soak: patchbay {} (pid {pid}) for {:.1} min; ingest {} signals/s; scratch {}",
        o.patchbay.display(),
        o.minutes,
        o.rate,
        dir.path().display()
    );

    let seen = Arc::new(Mutex::new(Seen::default()));
    let shutdown = Arc::new(AtomicBool::new(false));
    let subscriber = tokio::spawn(lossless_subscriber(
        ui,
        tally.clone(),
        seen.clone(),
        shutdown.clone(),
        dir.join("subscriber.log"),
    ));
    // The subscriber is connected before anything is ingested.
    while seen.lock().unwrap().epochs.is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ingest_next = Arc::new(AtomicU64::new(1));
    tasks.spawn(post_sender(ui, o.rate, tally.clone(), ingest_next.clone()));
    tasks.spawn(ws_sender(ui, o.rate, tally.clone(), ingest_next.clone()));
    for _ in 0..3 {
        tasks.spawn(slow_ws_client(ui, tally.clone()));
    }
    tasks.spawn(slow_sse_client(ui, tally.clone()));
    tasks.spawn(vanishing_clients(ui, tally.clone()));

    // The main loop: samples, reloads, and a watch on the daemon.
    let reload_every = Duration::from_secs(o.reload_every)
        .min(run_for / 2)
        .max(Duration::from_secs(5));
    let mut next_reload = Instant::now() + reload_every;
    let mut generation = 0u64;
    let mut reloads_applied = 0u64;
    let mut reload_failures = 0u64;
    let mut samples: Vec<Sample> = Vec::new();
    let mut died: Option<std::process::ExitStatus> = None;
    let deadline = started + run_for;
    while Instant::now() < deadline {
        tokio::time::sleep(SAMPLE_EVERY.min(deadline.saturating_duration_since(Instant::now())))
            .await;
        if let Ok(Some(status)) = child.try_wait() {
            died = Some(status);
            break;
        }
        if let Some(s) = sample(ui, pid, started).await {
            samples.push(s);
        }
        if Instant::now() >= next_reload && Instant::now() + Duration::from_secs(5) < deadline {
            next_reload += reload_every;
            generation += 1;
            std::fs::write(&config_path, config(ui, ws_up, sse_up, generation)).unwrap();
            kill(pid, "HUP");
            // Applied when the generation moves on (1 at start).
            let want = (reloads_applied + 2) as f64;
            let mut applied = false;
            for _ in 0..100 {
                if let Some(s) = sample(ui, pid, started).await
                    && s.generation >= want
                {
                    applied = s.reload_ok == 1.0;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if applied {
                reloads_applied += 1;
            } else {
                reload_failures += 1;
            }
        }
    }

    // The end: senders and faults stop; the subscriber gets what was acknowledged.
    tally.stop.store(true, Ordering::Relaxed);
    let stopping = tokio::time::timeout(Duration::from_secs(60), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if stopping.is_err() {
        eprintln!("soak: the soak's own tasks did not stop within 60 s (aborted)");
        tasks.abort_all();
    }
    let acked: Vec<String> = std::mem::take(&mut *tally.acked.lock().unwrap());
    let catch_up = Instant::now();
    while died.is_none() && catch_up.elapsed() < Duration::from_secs(30) {
        let missing = {
            let s = seen.lock().unwrap();
            acked.iter().filter(|id| !s.ids.contains_key(*id)).count()
        };
        if missing == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if died.is_none()
        && let Some(s) = sample(ui, pid, started).await
    {
        samples.push(s);
    }
    let bad_by_component = if died.is_none() {
        bad_input_by_component(ui).await
    } else {
        Vec::new()
    };

    // SIGTERM: it must complete, and with status 0.
    shutdown.store(true, Ordering::Relaxed);
    let term_at = Instant::now();
    let mut term_took = None;
    let exit = match died {
        Some(status) => Some(status),
        None => {
            kill(pid, "TERM");
            let mut status = None;
            while term_at.elapsed() < Duration::from_secs(30) {
                if let Ok(Some(s)) = child.try_wait() {
                    status = Some(s);
                    term_took = Some(term_at.elapsed());
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if status.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
            status
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), subscriber).await;

    // ------------------------------------------------------------ the report
    let s = seen.lock().unwrap();
    let lost: Vec<&String> = acked.iter().filter(|id| !s.ids.contains_key(*id)).collect();
    let duplicates: Vec<(&String, &u32)> = s.ids.iter().filter(|(_, n)| **n > 1).collect();
    let ingest_received = s.ids.keys().filter(|id| id.starts_with("soak-in-")).count();
    let ws_up_received = s.ids.keys().filter(|id| id.starts_with("soak-ws-")).count();
    let sse_up_received = s
        .ids
        .keys()
        .filter(|id| id.starts_with("soak-sse-"))
        .count();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let panic_lines = log.lines().filter(|l| l.contains("panicked")).count();
    let last = samples.last().cloned().unwrap_or_default();
    let counted = |prefix: &str| -> f64 {
        bad_by_component
            .iter()
            .filter(|(n, _)| n == prefix || n.starts_with(&format!("{prefix}.")))
            .map(|(_, v)| v)
            .fold(0.0, |a, b| a + b)
    };

    println!();
    println!(
        "## soak report ({:.1} min, patchbay pid {pid})",
        started.elapsed().as_secs_f64() / 60.0
    );
    println!();
    println!("| ingest | |");
    println!("|---|---|");
    println!(
        "| signals sent (POST + WebSocket) | {} |",
        get(&tally.ingest_sent)
    );
    println!("| acknowledged | {} |", acked.len());
    println!(
        "| refused (503 / error frame naming them) | {} |",
        get(&tally.ingest_refused)
    );
    println!(
        "| unconfirmed (connection failed before an answer) | {} |",
        get(&tally.ingest_unconfirmed)
    );
    println!(
        "| POSTs answered ok (arrays among them) | {} ({}) |",
        get(&tally.posts_ok),
        get(&tally.post_arrays)
    );
    println!(
        "| WebSocket ingest sessions closed cleanly | {} |",
        get(&tally.ws_ingest_sessions)
    );
    println!("| received by the lossless subscriber | {ingest_received} |");
    println!(
        "| **lost** (acknowledged, never received) | **{}** |",
        lost.len()
    );
    println!(
        "| **duplicates** (any id received twice) | **{}** |",
        duplicates.len()
    );
    println!();
    println!("| lossless subscriber | |");
    println!("|---|---|");
    println!("| frames received | {} |", s.frames);
    println!("| cut off with 1013 and resumed | {} |", s.cut);
    println!(
        "| dropped its own connection and resumed | {} |",
        s.dropped_self
    );
    println!("| unexpected disconnects | {} |", s.unexpected);
    println!(
        "| seq jumps (a gap without a `gap` frame) | {} |",
        s.seq_jumps
    );
    println!(
        "| `gap` frames (seqs missed) | {} ({}) |",
        s.gaps, s.gap_missed
    );
    println!("| epochs seen | {} |", s.epochs.len());
    println!(
        "| longest absence (first frame missed → resumed) | {:.1} s ({} resumes beyond the {} s window) |",
        s.longest_absence_ms as f64 / 1000.0,
        s.late_resumes,
        RESUME_WINDOW_MS / 1000
    );
    println!(
        "| close at shutdown | {} |",
        s.final_close.map_or("none".into(), |c| c.to_string())
    );
    println!();
    println!("| faults | |");
    println!("|---|---|");
    println!(
        "| upstream restarts (websocket / sse) | {} / {} |",
        get(&tally.ws_up_restarts),
        get(&tally.sse_up_restarts)
    );
    println!(
        "| upstream connections accepted (websocket / sse) | {} / {} |",
        get(&tally.ws_up_connections),
        get(&tally.sse_up_connections)
    );
    println!(
        "| upstream signals sent → received (websocket) | {} → {ws_up_received} |",
        get(&tally.ws_up_sent)
    );
    println!(
        "| upstream signals sent → received (sse) | {} → {sse_up_received} |",
        get(&tally.sse_up_sent)
    );
    println!(
        "| malformed sent → counted as bad input (websocket source) | {} → {} |",
        get(&tally.bad_ws_up),
        counted("wsup")
    );
    println!(
        "| malformed sent → counted as bad input (sse source) | {} → {} |",
        get(&tally.bad_sse_up),
        counted("sseup")
    );
    println!(
        "| malformed ingest sent → answered with an error → counted (sidecar) | {} → {} → {} |",
        get(&tally.bad_ingest),
        get(&tally.bad_ingest_answered),
        counted("ui")
    );
    println!("| `error` signals received | {} |", s.error_signals);
    println!(
        "| slow client sessions (60 s each) | {} |",
        get(&tally.slow_sessions)
    );
    println!(
        "| clients cut off by the sidecar (`clients_cut`) | {} |",
        last.clients_cut
    );
    println!("| vanishing clients | {} |", get(&tally.vanished));
    println!("| reloads applied (failed) | {reloads_applied} ({reload_failures}) |");
    println!();
    println!("| daemon | |");
    println!("|---|---|");
    let rss: Vec<u64> = samples.iter().map(|s| s.rss_kb).collect();
    let mb = |kb: u64| kb as f64 / 1024.0;
    if let (Some(min), Some(max)) = (rss.iter().min(), rss.iter().max()) {
        println!(
            "| RSS min / max / last (MB) | {:.1} / {:.1} / {:.1} |",
            mb(*min),
            mb(*max),
            mb(last.rss_kb)
        );
    }
    println!(
        "| panics (metric / log lines) | {} / {panic_lines} |",
        last.panics
    );
    println!(
        "| dropped / refused (metrics) | {} / {} |",
        last.dropped, last.refused
    );
    println!(
        "| SIGTERM → exit | {} |",
        match (exit, term_took) {
            (Some(st), Some(t)) => format!("{st} after {} ms", t.as_millis()),
            (Some(st), None) => format!("{st} (exited before SIGTERM)"),
            (None, _) => "did not exit within 30 s (killed)".into(),
        }
    );
    println!();
    println!(
        "| t (s) | RSS (MB) | clients | bad input | dropped | refused | panics | config generation |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let points = 8usize.min(samples.len());
    for i in 0..points {
        let s = &samples[if points > 1 {
            i * (samples.len() - 1) / (points - 1)
        } else {
            0
        }];
        println!(
            "| {:.0} | {:.1} | {} | {} | {} | {} | {} | {} |",
            s.at,
            mb(s.rss_kb),
            s.clients,
            s.bad_input,
            s.dropped,
            s.refused,
            s.panics,
            s.generation
        );
    }

    // ------------------------------------------------------------ the verdict
    let mut failures: Vec<String> = Vec::new();
    if !lost.is_empty() {
        failures.push(format!(
            "{} acknowledged signals never arrived (first: {:?})",
            lost.len(),
            &lost[..lost.len().min(5)]
        ));
    }
    if !duplicates.is_empty() {
        failures.push(format!(
            "{} signals arrived more than once (first: {:?})",
            duplicates.len(),
            &duplicates[..duplicates.len().min(5)]
        ));
    }
    if s.seq_jumps > 0 || s.gaps > 0 {
        failures.push(format!(
            "the subscriber saw {} seq jumps and {} gaps",
            s.seq_jumps, s.gaps
        ));
    }
    if s.epochs.len() > 1 {
        failures.push(format!(
            "the sidecar restarted ({} epochs): a reload must keep it",
            s.epochs.len()
        ));
    }
    if s.unexpected > 0 {
        failures.push(format!(
            "the subscriber was disconnected {} times other than by a cut",
            s.unexpected
        ));
    }
    if last.panics > 0.0 || panic_lines > 0 {
        failures.push(format!(
            "panics: {} counted, {panic_lines} log lines",
            last.panics
        ));
    }
    match exit {
        Some(st) if st.success() && died.is_none() => {}
        Some(st) => failures.push(format!(
            "patchbay exited with {st}{}",
            if died.is_some() {
                " before SIGTERM"
            } else {
                ""
            }
        )),
        None => failures.push("patchbay did not exit within 30 s of SIGTERM".into()),
    }
    if reload_failures > 0 {
        failures.push(format!("{reload_failures} reloads were not applied"));
    }
    let (sent_ws, sent_sse, sent_in) = (
        get(&tally.bad_ws_up) as f64,
        get(&tally.bad_sse_up) as f64,
        get(&tally.bad_ingest) as f64,
    );
    if died.is_none()
        && (counted("wsup") != sent_ws || counted("sseup") != sent_sse || counted("ui") != sent_in)
    {
        failures.push(format!(
            "malformed input sent and counted differ: websocket {sent_ws} vs {}, sse {sent_sse} vs {}, ingest {sent_in} vs {}",
            counted("wsup"),
            counted("sseup"),
            counted("ui")
        ));
    }
    if get(&tally.bad_ingest_answered) != get(&tally.bad_ingest) {
        failures.push(format!(
            "{} of {} malformed ingest requests/frames were not answered with an error",
            get(&tally.bad_ingest) - get(&tally.bad_ingest_answered).min(get(&tally.bad_ingest)),
            get(&tally.bad_ingest)
        ));
    }
    // The thirds are of the run after the ring filled.
    let span = samples.last().map_or(0.0, |s| s.at);
    let from = RSS_WARM_UP.as_secs_f64();
    let third = (span - from) / 3.0;
    let third_max = |a: f64, b: f64| {
        samples
            .iter()
            .filter(|s| s.at >= a && s.at < b)
            .map(|s| s.rss_kb)
            .max()
    };
    if third * 3.0 < RSS_MIN_SPAN.as_secs_f64() {
        println!();
        println!(
            "RSS: the growth rule needs {} s after the first {} s (not applied)",
            RSS_MIN_SPAN.as_secs(),
            RSS_WARM_UP.as_secs()
        );
    } else if let (Some(first), Some(last_third)) = (
        third_max(from, from + third),
        third_max(from + 2.0 * third, f64::MAX),
    ) {
        println!();
        println!(
            "RSS: max of the first third {:.1} MB, of the last third {:.1} MB",
            mb(first),
            mb(last_third)
        );
        if last_third as f64 > first as f64 * RSS_FACTOR && last_third > first + RSS_SLACK_KB {
            failures.push(format!(
                "RSS grew: last third's max {:.1} MB > {RSS_FACTOR} × first third's {:.1} MB",
                mb(last_third),
                mb(first)
            ));
        }
    }
    println!();
    if failures.is_empty() {
        println!("soak: PASS");
        if o.keep {
            println!("soak: kept {}", dir.keep().display());
        }
    } else {
        for f in &failures {
            println!("soak: FAIL: {f}");
        }
        println!(
            "soak: config and daemon log kept in {}",
            dir.keep().display()
        );
        std::process::exit(1);
    }
}
