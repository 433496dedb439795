//! Load generator for the sidecar: N signals in, S subscribers out.
//!
//! It measures patchbay and, in the same run, a plain WebSocket relay (every text frame a
//! client sends goes to every other client, nothing else) as the floor, and Node-RED
//! running the same pipeline (websocket in → json → switch on `payload.type` → change
//! (forget the sender's session, so that the frame goes to every client) → websocket out)
//! when it is installed:
//!
//! ```text
//! cargo build --release
//! npm install --prefix target/node-red node-red    # optional: adds Node-RED to the run
//! cargo run --release --example loadgen -- [--signals N] [--subscribers 1,10,100] [--rate 1000] [--via ws|post] [--patchbay PATH] [--rounds K] [--senders 4] [--shapes clean,extra,unknown,invalid|all] [--paced N] [--client-queue N|default] [--node-red PATH/red.js|none]
//! ```
//!
//! `--shapes` picks the envelopes sent, as producers really write them (each measured in
//! turn, against the relay in the same run): `clean`, a `text_delta` whose payload has
//! exactly its schema's fields (the send stamp in `metadata`); `extra`, the same with two
//! fields the schema does not allow in the payload (a sequence number and the send stamp,
//! as a producer that measures itself adds), which patchbay moves to `metadata.extra`;
//! `unknown`, a type that is not well known (`loadgen.tick`), passed as it is; `invalid`,
//! a `text_delta` whose text is under another name, which becomes `invalid.text_delta`
//! (its reason in `metadata.invalid`). The `when` filter keeps the type each shape arrives
//! as.
//!
//! The generator must not be the bottleneck: at full speed the signals are serialized
//! before the clock starts and sent by `--senders` connections at once, each writing a
//! batch of frames before one flush, and each subscriber walks the frames of a read in
//! place (no copy, check or allocation per frame), so that the generator's CPU per signal
//! stays under each server's, with 1 subscriber or 100 (it prints both). patchbay runs
//! `ui.inbound → when → sidecar`, lossless (`when_full = "block"`), with a `client_queue`
//! that holds the whole run (at least 65 536, at most the sidecar's limit of 1 000 000), as
//! the relay's channel does, unless `--client-queue` says otherwise (`default` leaves the
//! sidecar's default, 1024: a subscriber that falls that far behind a lossless sidecar is
//! cut off, so use it to measure memory, not throughput).
//!
//! For each target and subscriber count it reports the delivered frames per second at full
//! speed, the end-to-end latency percentiles (p50, p99, p999) at `--rate` signals per
//! second (over `--paced` signals, by default a tenth of `--signals`), the server's peak
//! resident memory (VmHWM) and the CPU time it spent per signal during the throughput run
//! (user and system, from `/proc`). patchbay runs as `target/release/patchbay` (or
//! `--patchbay PATH`, e.g. `target/dist/patchbay`) with a sidecar fed by its own ingest; signals are sent on a
//! WebSocket (`--via ws`, the default) or by HTTP POST (`--via post`). With `--rounds K`,
//! every measurement runs K times (the relay, patchbay and Node-RED taking turns, each on a
//! fresh server) and the table shows the median of each figure, with the range of the p99s;
//! the ratio row adds each round's ratio to the relay run just before it (median and
//! range), which a change in the machine's speed between rounds does not skew.
//!
//! Node-RED (`node` on the `PATH`, `red.js` from `--node-red`, by default where the `npm`
//! line above puts it) gets a flow file written for the run; publishers connect to its
//! `/in` and subscribers to its `/ws`. Its websocket out node writes without waiting for
//! slow clients (it has no lossless mode), so its "delivered" column is what arrived.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use patchbay_testkit::scratch::ScratchDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::Message;

struct Options {
    signals: usize,
    subscribers: Vec<usize>,
    rate: u64,
    via_post: bool,
    patchbay: String,
    /// Runs of each measurement; the table shows each figure's median over them.
    rounds: usize,
    /// Sender connections for the throughput run (each sends its share, pre-serialized,
    /// in batched writes), so that the generator is not the bottleneck.
    senders: usize,
    /// The sidecar's `client_queue`.
    client_queue: ClientQueue,
    /// Node-RED's `red.js`; `None` leaves Node-RED out.
    node_red: Option<String>,
    /// The envelope shapes to measure, each in turn.
    shapes: Vec<Shape>,
    /// Signals in the paced (latency) run; `None`: a tenth of `signals`, at least 2000 and
    /// at most 20 seconds' worth.
    paced: Option<usize>,
}

/// An envelope shape a producer sends (see the module's doc).
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Clean,
    Extra,
    Unknown,
    Invalid,
}

impl Shape {
    const ALL: [Shape; 4] = [Shape::Clean, Shape::Extra, Shape::Unknown, Shape::Invalid];

    fn name(self) -> &'static str {
        match self {
            Shape::Clean => "clean",
            Shape::Extra => "extra",
            Shape::Unknown => "unknown",
            Shape::Invalid => "invalid",
        }
    }

    /// The type the envelope is sent with.
    fn sent_type(self) -> &'static str {
        match self {
            Shape::Unknown => "loadgen.tick",
            _ => "text_delta",
        }
    }

    /// The type patchbay gives it (what its `when` keeps).
    fn delivered_type(self) -> &'static str {
        match self {
            Shape::Invalid => "invalid.text_delta",
            other => other.sent_type(),
        }
    }

    /// Envelope `i`, stamped now (`t0`, nanoseconds, which the subscribers read back).
    fn signal(self, i: usize) -> String {
        let t0 = now_ns();
        let kind = self.sent_type();
        match self {
            Shape::Clean | Shape::Unknown => format!(
                "{{\"type\":\"{kind}\",\"source\":\"loadgen\",\"payload\":{{\"agentId\":\"load\",\"content\":\"token {i} of the stream\",\"index\":{i}}},\"metadata\":{{\"t0\":{t0}}}}}"
            ),
            Shape::Extra => format!(
                "{{\"type\":\"{kind}\",\"source\":\"loadgen\",\"payload\":{{\"agentId\":\"load\",\"content\":\"token {i} of the stream\",\"index\":{i},\"seq\":{i},\"t0\":{t0}}}}}"
            ),
            Shape::Invalid => format!(
                "{{\"type\":\"{kind}\",\"source\":\"loadgen\",\"payload\":{{\"agentId\":\"load\",\"text\":\"token {i} of the stream\",\"index\":{i}}},\"metadata\":{{\"t0\":{t0}}}}}"
            ),
        }
    }
}

/// The sidecar's `client_queue` for patchbay's runs.
enum ClientQueue {
    /// Room for every signal of the run (as the relay's channel has).
    WholeRun,
    /// The sidecar's default (1024).
    Default,
    /// This many frames.
    Exactly(usize),
}

impl ClientQueue {
    /// The value to configure for a run of `signals`; `None` leaves the default.
    fn size(&self, signals: usize) -> Option<usize> {
        match self {
            ClientQueue::WholeRun => Some(signals.clamp(65_536, 1_000_000)),
            ClientQueue::Default => None,
            ClientQueue::Exactly(n) => Some(*n),
        }
    }
}

/// The command line, for `--help` and a bad argument.
const USAGE: &str = "loadgen [--signals N] [--subscribers 1,10,100] [--rate 1000] \
                     [--via ws|post] [--patchbay PATH] [--rounds K] [--senders 4] \
                     [--shapes clean,extra,unknown,invalid|all] [--paced N] \
                     [--client-queue N|default] [--node-red PATH/red.js|none]";

/// Says what is wrong with the command line, and how it goes, and exits.
fn usage_error(what: &str) -> ! {
    eprintln!("loadgen: {what}\nusage: {USAGE}");
    std::process::exit(2)
}

/// The number `value` given to `flag`.
fn number<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| usage_error(&format!("{flag} takes a number, not `{value}`")))
}

/// The shape named `name` on the command line.
fn shape_named(name: &str) -> Shape {
    let known = Shape::ALL.into_iter().find(|s| s.name() == name);
    known.unwrap_or_else(|| {
        usage_error(&format!(
            "--shapes takes clean, extra, unknown, invalid or all, not `{name}`"
        ))
    })
}

fn options() -> Options {
    let mut o = Options {
        signals: 20_000,
        subscribers: vec![1, 10, 100],
        rate: 1000,
        via_post: false,
        patchbay: "target/release/patchbay".into(),
        rounds: 1,
        senders: 4,
        client_queue: ClientQueue::WholeRun,
        node_red: Some("target/node-red/node_modules/node-red/red.js".into()),
        shapes: vec![Shape::Clean],
        paced: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--help" | "-h" => {
                println!("usage: {USAGE}");
                std::process::exit(0);
            }
            "--signals" => o.signals = number("--signals", &value),
            "--subscribers" => {
                o.subscribers = value
                    .split(',')
                    .map(|s| number("--subscribers", s))
                    .collect()
            }
            "--rate" => o.rate = number("--rate", &value),
            "--via" => {
                o.via_post = match value.as_str() {
                    "ws" => false,
                    "post" => true,
                    other => usage_error(&format!("--via takes ws or post, not `{other}`")),
                }
            }
            "--patchbay" => o.patchbay = value,
            "--rounds" => o.rounds = number::<usize>("--rounds", &value).max(1),
            "--senders" => o.senders = number::<usize>("--senders", &value).max(1),
            "--client-queue" => {
                o.client_queue = match value.as_str() {
                    "default" => ClientQueue::Default,
                    n => ClientQueue::Exactly(number("--client-queue", n)),
                }
            }
            "--node-red" => o.node_red = (value != "none").then_some(value),
            "--paced" => o.paced = Some(number::<usize>("--paced", &value).max(100)),
            "--shapes" if value == "all" => o.shapes = Shape::ALL.to_vec(),
            "--shapes" => o.shapes = value.split(',').map(shape_named).collect(),
            other => usage_error(&format!("unknown argument `{other}`")),
        }
        i += 2;
    }
    o
}

/// The floor: a WebSocket relay with a broadcast channel and no serialization work. A
/// client whose URL asks for `receive=false` is a publisher and receives nothing (as with
/// patchbay); each subscriber's writer writes every frame ready and flushes once.
async fn relay(port: u16, capacity: usize) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    // Room for every signal of a run: a slow subscriber is never skipped (as patchbay's
    // lossless sidecar never skips one), so the floor delivers everything too.
    let (tx, _) = broadcast::channel::<Arc<str>>(capacity.max(1024));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        // As patchbay's sidecar does: no Nagle delay on small frames.
        let _ = stream.set_nodelay(true);
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut publisher = false;
            // The handshake callback's error type is tungstenite's, not ours to shrink.
            #[allow(clippy::result_large_err)]
            let callback = |req: &tokio_tungstenite::tungstenite::handshake::server::Request,
                            resp| {
                publisher = req
                    .uri()
                    .query()
                    .is_some_and(|q| q.contains("receive=false"));
                Ok(resp)
            };
            let Ok(ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
                return;
            };
            let (mut sink, mut stream) = ws.split();
            let forward = (!publisher).then(|| {
                let mut rx = tx.subscribe();
                tokio::spawn(async move {
                    loop {
                        let first = match rx.recv().await {
                            Ok(text) => text,
                            Err(broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(_) => return,
                        };
                        if sink.feed(Message::text(&*first)).await.is_err() {
                            return;
                        }
                        for _ in 0..255 {
                            match rx.try_recv() {
                                Ok(text) => {
                                    if sink.feed(Message::text(&*text)).await.is_err() {
                                        return;
                                    }
                                }
                                Err(_) => break,
                            }
                        }
                        if sink.flush().await.is_err() {
                            return;
                        }
                    }
                })
            });
            while let Some(Ok(msg)) = stream.next().await {
                if let Message::Text(t) = msg {
                    let _ = tx.send(Arc::from(t.as_str()));
                }
            }
            if let Some(f) = forward {
                f.abort();
            }
        });
    }
}

/// Where publishers connect to the relay and to patchbay: send-only, they get nothing back.
const PUBLISH_PATH: &str = "/ws?receive=false";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Server {
    child: Child,
    port: u16,
    /// Where publishers connect: they receive nothing back.
    publish_path: &'static str,
    /// Node-RED registers its WebSocket paths only once its flow runs, after it listens.
    wait_for_ws: bool,
    /// patchbay's config directory (Node-RED's user directory), removed with the server.
    _config: Option<ScratchDir>,
}

impl Server {
    fn patchbay(binary: &str, client_queue: Option<usize>, shape: Shape) -> Server {
        let port = free_port();
        let dir = ScratchDir::new("loadgen");
        let config = dir.join("loadgen.toml");
        let client_queue = client_queue
            .map(|n| format!("client_queue = {n}\n"))
            .unwrap_or_default();
        let kind = shape.delivered_type();
        std::fs::write(
            &config,
            format!(
                "[filters.deltas]\ntype = \"when\"\ninputs = [\"ui.inbound\"]\nwhen = {{ type = \"{kind}\" }}\n\n[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"deltas\"]\nwhen_full = \"block\"\nlisten = \"127.0.0.1:{port}\"\n{client_queue}max_frame = 1048576\n\n[runtime]\nqueue = 4096\n"
            ),
        )
        .unwrap();
        let child = Command::new(binary)
            .args(["run", config.to_str().unwrap()])
            .env("PATCHBAY_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{binary}: {e} (run `cargo build --release` first)"));
        Server {
            child,
            port,
            publish_path: PUBLISH_PATH,
            wait_for_ws: false,
            _config: Some(dir),
        }
    }

    /// Node-RED with the equivalent flow: the frame parsed (`json`), kept when its
    /// `payload.type` is `text_delta` (`switch`), its publisher's session forgotten
    /// (`change`: else `websocket out` answers the publisher only), serialized again to
    /// every client of `/ws` (`websocket out`).
    fn node_red(red_js: &str, shape: Shape) -> Server {
        let port = free_port();
        let dir = ScratchDir::new("loadgen-node-red");
        let flows = serde_json::json!([
            {"id": "tab", "type": "tab", "label": "loadgen"},
            {"id": "in_path", "type": "websocket-listener", "path": "/in", "wholemsg": "false"},
            {"id": "out_path", "type": "websocket-listener", "path": "/ws", "wholemsg": "false"},
            {"id": "in", "type": "websocket in", "z": "tab", "server": "in_path", "client": "", "wires": [["parse"]]},
            {"id": "parse", "type": "json", "z": "tab", "property": "payload", "action": "obj", "pretty": false, "wires": [["deltas"]]},
            {"id": "deltas", "type": "switch", "z": "tab", "property": "payload.type", "propertyType": "msg",
             "rules": [{"t": "eq", "v": shape.sent_type(), "vt": "str"}], "checkall": "true", "repair": false,
             "outputs": 1, "wires": [["fanout"]]},
            // A message that still names the publisher's session would go back to it only.
            {"id": "fanout", "type": "change", "z": "tab",
             "rules": [{"t": "delete", "p": "_session", "pt": "msg"}], "wires": [["out"]]},
            {"id": "out", "type": "websocket out", "z": "tab", "server": "out_path", "client": "", "wires": []}
        ]);
        std::fs::write(dir.join("flows.json"), flows.to_string()).unwrap();
        // No editor, no admin API, warnings only.
        std::fs::write(
            dir.join("settings.js"),
            format!(
                "module.exports = {{ uiPort: {port}, uiHost: \"127.0.0.1\", httpAdminRoot: false, flowFile: \"flows.json\", logging: {{ console: {{ level: \"warn\" }} }} }};\n"
            ),
        )
        .unwrap();
        let child = Command::new("node")
            .arg(red_js)
            .args(["--settings", dir.join("settings.js").to_str().unwrap()])
            .args(["--userDir", dir.path().to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("node {red_js}: {e}"));
        Server {
            child,
            port,
            publish_path: "/in",
            wait_for_ws: true,
            _config: Some(dir),
        }
    }

    fn relay(capacity: usize) -> Server {
        let port = free_port();
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["relay", &port.to_string(), &capacity.to_string()])
            .spawn()
            .unwrap();
        Server {
            child,
            port,
            publish_path: PUBLISH_PATH,
            wait_for_ws: false,
            _config: None,
        }
    }

    async fn ready(&self) {
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).await.is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "server never came up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        while self.wait_for_ws
            && tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{}/ws", self.port))
                .await
                .is_err()
        {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "server never served /ws"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// CPU time the server has used so far (user and system), in seconds.
    fn cpu_seconds(&self) -> f64 {
        cpu_seconds_of(self.child.id())
    }

    /// Peak resident memory in MB.
    fn peak_mb(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(0.0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time process `pid` has used so far (user and system), in seconds.
fn cpu_seconds_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| fields.get(i - 3).and_then(|v| v.parse::<f64>().ok());
    // Linux reports both in clock ticks of 1/100 s.
    ticks(14)
        .zip(ticks(15))
        .map_or(0.0, |(u, s)| (u + s) / 100.0)
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Connects `count` subscribers; each counts frames carrying `t0` and records their
/// latency. Returns a join handle per subscriber yielding its latencies (µs).
///
/// A subscriber must cost the generator less than a frame costs the server, or with many
/// subscribers the run measures the generator: each one reads its socket 64 KiB at a time
/// and walks the WebSocket frames in place (a server's frames are not masked), with one
/// clock reading for the frames of a read and no copy, check or allocation per frame.
async fn subscribe(
    port: u16,
    count: usize,
    expect: usize,
) -> Vec<tokio::task::JoinHandle<Vec<u64>>> {
    let mut handles = Vec::new();
    for _ in 0..count {
        let (stream, rest) = ws_connect(port, "/ws").await;
        handles.push(tokio::spawn(read_frames(stream, rest, expect)));
    }
    handles
}

/// Opens a WebSocket to `path` on `port` as a client: the stream, and the bytes read past
/// the handshake's answer.
async fn ws_connect(port: u16, path: &str) -> (TcpStream, Vec<u8>) {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("subscriber connects");
    stream.set_nodelay(true).unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut read = Vec::with_capacity(4096);
    loop {
        if let Some(end) = memchr::memmem::find(&read, b"\r\n\r\n") {
            assert!(
                read.starts_with(b"HTTP/1.1 101"),
                "the server refused the WebSocket: {}",
                String::from_utf8_lossy(&read[..end])
            );
            return (stream, read.split_off(end + 4));
        }
        if stream.read_buf(&mut read).await.unwrap() == 0 {
            panic!("the server closed the connection during the WebSocket handshake");
        }
    }
}

/// Reads a server's frames until `expect` frames carrying `t0` arrived, the server closed,
/// or nothing came for 20 s: the latency of each (µs).
async fn read_frames(mut stream: TcpStream, mut buffer: Vec<u8>, expect: usize) -> Vec<u64> {
    let t0 = memchr::memmem::Finder::new(b"\"t0\":");
    let mut latencies = Vec::with_capacity(expect);
    let mut at = 0;
    let mut received = now_ns();
    loop {
        // The frames read so far, walked in place.
        while let Some((opcode, payload)) = server_frame(&buffer[at..]) {
            let whole = payload.end;
            let payload = &buffer[at..][payload];
            match opcode {
                // Text (a message in one frame, as the servers measured send it).
                0x1 => {
                    let stamp = t0.find(payload).map(|i| &payload[i + 5..]);
                    if let Some(digits) = stamp {
                        let sent = digits
                            .iter()
                            .take_while(|b| b.is_ascii_digit())
                            .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
                        latencies.push(received.saturating_sub(sent) / 1000);
                    }
                }
                // Ping: a pong with the same data, masked with the zero key.
                0x9 => {
                    let mut pong = vec![0x8a, 0x80 | payload.len() as u8, 0, 0, 0, 0];
                    pong.extend_from_slice(payload);
                    if stream.write_all(&pong).await.is_err() {
                        return latencies;
                    }
                }
                0x8 => return latencies,
                _ => {}
            }
            at += whole;
        }
        if latencies.len() >= expect {
            break;
        }
        buffer.drain(..at);
        at = 0;
        if buffer.capacity() - buffer.len() < 16 * 1024 {
            buffer.reserve(64 * 1024);
        }
        let read = tokio::time::timeout(Duration::from_secs(20), stream.read_buf(&mut buffer));
        if !matches!(read.await, Ok(Ok(1..))) {
            break;
        }
        received = now_ns();
    }
    latencies
}

/// The first whole frame a server wrote in `bytes` (unmasked): its opcode, and where its
/// payload lies in `bytes` (the frame ends where its payload ends); `None` when more bytes
/// are needed.
fn server_frame(bytes: &[u8]) -> Option<(u8, std::ops::Range<usize>)> {
    let [first, second, ..] = *bytes else {
        return None;
    };
    let (len, header) = match second & 0x7f {
        126 => (
            usize::from(u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?)),
            4,
        ),
        127 => (
            usize::try_from(u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?)).ok()?,
            10,
        ),
        n => (usize::from(n), 2),
    };
    let end = len.checked_add(header)?;
    (bytes.len() >= end).then_some((first & 0x0f, header..end))
}

/// Sends `n` signals, paced at `rate` per second when given (on one connection, each
/// stamped when sent). At full speed the signals are serialized beforehand and sent by
/// `senders` connections at once, each writing every frame of a batch before one flush.
async fn publish(
    shape: Shape,
    port: u16,
    path: &str,
    n: usize,
    rate: Option<u64>,
    via_post: bool,
    senders: usize,
) -> Sending {
    let started = Instant::now();
    let mut pace = rate.map(|r| tokio::time::interval(Duration::from_nanos(1_000_000_000 / r)));
    if via_post {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        stream.set_nodelay(true).unwrap();
        use tokio::io::{AsyncBufReadExt, BufReader};
        for i in 0..n {
            if let Some(p) = pace.as_mut() {
                p.tick().await;
            }
            let body = shape.signal(i);
            let req = format!(
                "POST /signal HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(req.as_bytes()).await.unwrap();
            // Read the response (status line, headers, body by Content-Length).
            let mut reader = BufReader::new(&mut stream);
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).await.unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).await.unwrap();
        }
        return Sending::done(started);
    }
    let url = format!("ws://127.0.0.1:{port}{path}");
    if let Some(mut pace) = pace {
        let (ws, _) = tokio_tungstenite::connect_async_with_config(&url, None, true)
            .await
            .unwrap();
        let (mut sink, _stream) = ws.split();
        for i in 0..n {
            pace.tick().await;
            sink.send(Message::text(shape.signal(i))).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        return Sending::done(started);
    }
    let senders = senders.clamp(1, n.max(1));
    let mut connections = Vec::new();
    for k in 0..senders {
        let (ws, _) = tokio_tungstenite::connect_async_with_config(&url, None, true)
            .await
            .unwrap();
        // Serialized before the clock starts: the generator only writes.
        let frames: Vec<Message> = (k..n)
            .step_by(senders)
            .map(|i| Message::text(shape.signal(i)))
            .collect();
        connections.push((ws, frames));
    }
    let started = Instant::now();
    let mut written = Vec::new();
    let mut senders = Vec::new();
    for (ws, frames) in connections {
        let (done, wrote) = tokio::sync::oneshot::channel();
        written.push(wrote);
        senders.push(tokio::spawn(async move {
            let (mut sink, stream) = ws.split();
            for chunk in frames.chunks(256) {
                for frame in chunk {
                    sink.feed(frame.clone()).await.unwrap();
                }
                sink.flush().await.unwrap();
            }
            let _ = done.send(());
            // The connection stays open until the subscribers are done (then aborted).
            std::future::pending::<()>().await;
            drop((sink, stream));
        }));
    }
    for w in written {
        let _ = w.await;
    }
    Sending { started, senders }
}

/// A run of sends: when it started, and the sender connections kept open until the
/// subscribers are done.
struct Sending {
    started: Instant,
    senders: Vec<tokio::task::JoinHandle<()>>,
}

impl Sending {
    fn done(started: Instant) -> Sending {
        Sending {
            started,
            senders: Vec::new(),
        }
    }

    fn close(self) {
        for s in self.senders {
            s.abort();
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

struct Row {
    throughput: f64,
    delivered: f64,
    p50: f64,
    p99: f64,
    p999: f64,
    peak_mb: f64,
    /// The server's CPU time per signal during the throughput run, in microseconds.
    cpu_us: f64,
    /// The generator's own (this process's: its senders and subscribers), the same way.
    generator_us: f64,
}

async fn measure(
    server: &Server,
    target: &'static str,
    subs: usize,
    shape: Shape,
    o: &Options,
) -> Row {
    server.ready().await;
    // Throughput: everything at full speed.
    let handles = subscribe(server.port, subs, o.signals).await;
    let cpu_before = server.cpu_seconds();
    let generator_before = cpu_seconds_of(std::process::id());
    let sending = publish(
        shape,
        server.port,
        server.publish_path,
        o.signals,
        None,
        o.via_post && target == "patchbay",
        o.senders,
    )
    .await;
    let mut delivered = 0usize;
    for h in handles {
        delivered += h.await.unwrap().len();
    }
    let elapsed = sending.started.elapsed().as_secs_f64();
    let cpu_us = (server.cpu_seconds() - cpu_before) * 1e6 / o.signals as f64;
    let generator_us =
        (cpu_seconds_of(std::process::id()) - generator_before) * 1e6 / o.signals as f64;
    sending.close();
    // Latency: paced, `--paced` signals, else a tenth of the signals, at least 2000 and at
    // most 20 seconds' worth (at `--rate`, the paced run takes its count divided by the
    // rate in seconds).
    let paced = o
        .paced
        .unwrap_or_else(|| (o.signals / 10).clamp(2000, (o.rate as usize * 20).max(2000)));
    let handles = subscribe(server.port, subs, paced).await;
    publish(
        shape,
        server.port,
        server.publish_path,
        paced,
        Some(o.rate),
        o.via_post && target == "patchbay",
        1,
    )
    .await
    .close();
    let mut latencies = Vec::new();
    for h in handles {
        latencies.extend(h.await.unwrap());
    }
    latencies.sort_unstable();
    Row {
        throughput: o.signals as f64 / elapsed,
        delivered: delivered as f64 / (o.signals * subs) as f64,
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        p999: percentile(&latencies, 0.999),
        peak_mb: server.peak_mb(),
        cpu_us,
        generator_us,
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("relay") {
        // Child mode: the plain relay on the given port.
        relay(
            args.get(2)
                .and_then(|p| p.parse().ok())
                .expect("relay PORT CAPACITY"),
            args.get(3)
                .and_then(|c| c.parse().ok())
                .expect("relay PORT CAPACITY"),
        )
        .await;
        return;
    }
    let o = options();
    println!(
        "{} signals from {} sender connections, rate {}/s for latency, via {}",
        o.signals,
        o.senders,
        o.rate,
        if o.via_post { "POST" } else { "WebSocket" }
    );
    println!(
        "| shape | target | subscribers | signals/s (each subscriber) | delivered | p50 ms | p99 ms | p999 ms | peak RSS MB | server CPU µs/signal | generator CPU µs/signal |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let node_red = o.node_red.clone().filter(|path| {
        let found = std::path::Path::new(path).exists();
        if !found {
            println!("(Node-RED left out: no {path}; see the module's doc)");
        }
        found
    });
    let mut targets = vec!["relay", "patchbay"];
    if node_red.is_some() {
        targets.push("node-red");
    }
    for (&shape, &subs) in o
        .shapes
        .iter()
        .flat_map(|shape| o.subscribers.iter().map(move |subs| (shape, subs)))
    {
        let mut rows: Vec<Vec<Row>> = targets.iter().map(|_| Vec::new()).collect();
        for _ in 0..o.rounds {
            for (i, &target) in targets.iter().enumerate() {
                let server = match target {
                    "relay" => Server::relay(o.signals.max(65536)),
                    "patchbay" => {
                        Server::patchbay(&o.patchbay, o.client_queue.size(o.signals), shape)
                    }
                    _ => Server::node_red(node_red.as_deref().unwrap_or_default(), shape),
                };
                rows[i].push(measure(&server, target, subs, shape, &o).await);
            }
        }
        let throughput = |runs: &[Row]| {
            let mut values: Vec<f64> = runs.iter().map(|r| r.throughput).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let ratios: Vec<f64> = rows
            .iter()
            .map(|runs| throughput(runs) / throughput(&rows[0]))
            .collect();
        // Each round's ratio to the relay's run just before it: the two runs share the
        // machine's state of the moment, which the medians of separate runs do not.
        let paired: Vec<Vec<f64>> = rows
            .iter()
            .map(|runs| {
                let mut r: Vec<f64> = runs
                    .iter()
                    .zip(&rows[0])
                    .map(|(run, relay)| run.throughput / relay.throughput)
                    .collect();
                r.sort_by(f64::total_cmp);
                r
            })
            .collect();
        for (target, runs) in targets.iter().zip(rows) {
            let median = |f: fn(&Row) -> f64| {
                let mut values: Vec<f64> = runs.iter().map(f).collect();
                values.sort_by(f64::total_cmp);
                values[values.len() / 2]
            };
            let p99 = if runs.len() > 1 {
                let (lo, hi) = runs.iter().fold((f64::MAX, f64::MIN), |(lo, hi), r| {
                    (lo.min(r.p99), hi.max(r.p99))
                });
                format!("{:.3} ({lo:.3}–{hi:.3})", median(|r| r.p99))
            } else {
                format!("{:.3}", median(|r| r.p99))
            };
            println!(
                "| {} | {target} | {subs} | {:.0} | {:.1}% | {:.3} | {p99} | {:.3} | {:.1} | {:.2} | {:.2} |",
                shape.name(),
                median(|r| r.throughput),
                median(|r| r.delivered) * 100.0,
                median(|r| r.p50),
                median(|r| r.p999),
                median(|r| r.peak_mb),
                median(|r| r.cpu_us),
                median(|r| r.generator_us),
            );
        }
        for ((target, ratio), paired) in targets.iter().zip(&ratios).zip(&paired).skip(1) {
            let rounds = if paired.len() > 1 {
                format!(
                    " (rounds: median {:.2}×, {:.2}–{:.2})",
                    paired[paired.len() / 2],
                    paired[0],
                    paired[paired.len() - 1]
                )
            } else {
                String::new()
            };
            println!(
                "| {} | {target} / relay | {subs} | {ratio:.2}×{rounds} | | | | | | | |",
                shape.name()
            );
        }
    }
}
