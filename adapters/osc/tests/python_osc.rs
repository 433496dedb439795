//! The `osc` source and output in a running graph against python-osc, the real library, on
//! loopback (`tests/support/osc_peer.py`, run with the venv `target/pyenv` that
//! `scripts/test` fills): its messages and bundles reach the graph as `osc.message`
//! signals (every argument type, bundle order and time tags); malformed and oversized
//! packets are counted and the source serves on; a sender outside `allowed_peers` is
//! refused and counted; and what the output sends is read back by python-osc (address
//! template, every argument type, several targets, bundles).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use patchbay_graph::telemetry::ComponentSnapshot;
use patchbay_graph::{
    BoxFuture, ChannelSource, ComponentError, HealthState, Output, OutputContext, Registry,
    RunningGraph, SourceText, Telemetry, WhenFull, compile,
};
use patchbay_signal::{SharedSignal, Signal, object};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};
use tokio::sync::mpsc;

/// Guards every wait (a hang fails the test; nothing is timed).
const GUARD: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python with python-osc; fails saying how to install it.
fn python() -> PathBuf {
    let py = root().join("../../target/pyenv/bin/python");
    let has = std::process::Command::new(&py)
        .args(["-c", "import pythonosc"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has,
        "python-osc is not installed in {}: run `bash scripts/test` once (it makes the venv \
         and installs the test peers), or `python3 -m venv target/pyenv && \
         target/pyenv/bin/python -m pip install python-osc` from the repository root",
        py.display()
    );
    py
}

fn peer_script() -> PathBuf {
    root().join("tests/support/osc_peer.py")
}

/// Runs `osc_peer.py send 127.0.0.1 PORT ARGS…` to its end.
async fn send(port: u16, args: &[&str]) {
    let status = Command::new(python())
        .arg(peer_script())
        .args(["send", "127.0.0.1", &port.to_string()])
        .args(args)
        .status()
        .await
        .expect("python runs");
    assert!(status.success(), "osc_peer.py send {args:?} failed");
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free port")
        .port()
}

/// An output handing each signal to the test, and the graph's telemetry.
struct Sink {
    signals: mpsc::Sender<SharedSignal>,
    telemetry: Arc<OnceLock<Arc<Telemetry>>>,
}

impl Output for Sink {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let _ = self.telemetry.set(Arc::clone(cx.telemetry()));
            while let Some(signal) = cx.next().await {
                if self.signals.send(signal).await.is_ok() {
                    cx.delivered(1);
                }
            }
            Ok(())
        })
    }
}

/// A running graph with the `osc` adapter, a `feed` source and a `sink` output.
struct Harness {
    signals: mpsc::Receiver<SharedSignal>,
    telemetry: Arc<OnceLock<Arc<Telemetry>>>,
    feed: mpsc::Sender<Signal>,
    graph: Option<RunningGraph>,
}

impl Harness {
    /// Compiles `config`; `before` runs with the feed before the graph starts (signals
    /// queued then arrive together).
    fn start(config: &str, before: impl FnOnce(&mpsc::Sender<Signal>)) -> Harness {
        let mut registry = Registry::new();
        registry.adapter(&patchbay_osc::ADAPTER);
        registry.adapter(&patchbay_filters::ADAPTER);
        let feed = ChannelSource::register(&mut registry, "feed", 1024);
        let (tx, signals) = mpsc::channel(4096);
        let telemetry = Arc::new(OnceLock::new());
        let slot = Arc::clone(&telemetry);
        registry.output_fn("sink", WhenFull::Block, move |_| {
            Ok(Box::new(Sink {
                signals: tx.clone(),
                telemetry: Arc::clone(&slot),
            }) as Box<dyn Output>)
        });
        let graph = compile(&[SourceText::new("osc.toml", config)], &registry)
            .unwrap_or_else(|e| panic!("{e:?}"));
        before(&feed);
        Harness {
            signals,
            telemetry,
            feed,
            graph: Some(RunningGraph::spawn(graph)),
        }
    }

    fn component(&self, name: &str) -> Option<ComponentSnapshot> {
        self.telemetry.get()?.component(name)
    }

    /// Waits until `name`'s snapshot satisfies `holds`.
    async fn until(
        &self,
        name: &str,
        what: &str,
        holds: impl Fn(&ComponentSnapshot) -> bool,
    ) -> ComponentSnapshot {
        let waited = tokio::time::timeout(GUARD, async {
            loop {
                if let Some(s) = self.component(name).filter(|s| holds(s)) {
                    return s;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| panic!("{name}: {what} never held: {:?}", self.component(name)))
    }

    async fn listening(&self, name: &str) {
        self.until(name, "listening", |s| s.state == HealthState::Ok)
            .await;
    }

    /// The next `n` signals the sink gets.
    async fn take(&mut self, n: usize) -> Vec<Value> {
        let mut got = Vec::new();
        let done = tokio::time::timeout(GUARD, async {
            while got.len() < n {
                let s = self.signals.recv().await.expect("the graph runs");
                got.push(s.to_value());
            }
        })
        .await;
        assert!(
            done.is_ok(),
            "{} of {n} signals in time: {got:#?}",
            got.len()
        );
        got
    }

    async fn stop(mut self) {
        if let Some(graph) = self.graph.take() {
            graph.stop().await.expect("the graph stops");
        }
    }
}

fn gauge(s: &ComponentSnapshot, name: &str) -> f64 {
    s.gauges.get(name).copied().unwrap_or(-1.0)
}

fn source_config(port: u16, extra: &str) -> String {
    format!(
        "[sources.phone]\ntype = \"osc\"\nlisten = \"127.0.0.1:{port}\"\n{extra}\n\n\
         [outputs.out]\ntype = \"sink\"\ninputs = [\"phone\"]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_osc_messages_and_bundles_become_signals() {
    python();
    let port = free_udp_port();
    let mut h = Harness::start(&source_config(port, ""), |_| {});
    h.listening("phone").await;

    send(port, &["types"]).await;
    let got = h.take(3).await;
    for s in &got {
        assert_eq!(s["type"], "osc.message");
        assert_eq!(s["source"], "osc:phone");
        let peer = s["metadata"]["peer"].as_str().expect("the sender");
        assert!(peer.starts_with("127.0.0.1:"), "{peer}");
        assert!(
            s["payload"].get("timetag").is_none(),
            "not in a bundle: {s}"
        );
    }
    assert_eq!(
        got[0]["payload"],
        json!({
            "address": "/types",
            "tags": "ihfdsbrmTFN[is[f]]",
            "args": [7, -1_099_511_627_776i64, 0.25, 0.1, "héllo", "AAH/",
                     {"r": 255, "g": 0, "b": 16, "a": 255},
                     {"port": 0, "status": 144, "data1": 60, "data2": 100},
                     true, false, null, [1, "x", [2.5]]]
        })
    );
    assert_eq!(
        got[1]["payload"],
        json!({"address": "/time", "tags": "t",
               "args": [{"seconds": 3_908_988_800u32, "fraction": 2_147_483_648u32, "unixMs": 1_700_000_000_500i64}]})
    );
    assert_eq!(
        got[2]["payload"],
        json!({"address": "/none", "tags": "", "args": []})
    );

    send(port, &["bundles"]).await;
    let got = h.take(5).await;
    let half_past = json!({"seconds": 3_908_988_800u32, "fraction": 2_147_483_648u32, "unixMs": 1_700_000_000_500i64});
    let immediately = json!({"seconds": 0, "fraction": 1, "immediate": true});
    let seen: Vec<(Value, Value, Value)> = got
        .iter()
        .map(|s| {
            (
                s["payload"]["address"].clone(),
                s["payload"]["args"].clone(),
                s["payload"].get("timetag").cloned().unwrap_or(Value::Null),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (json!("/first"), json!([1]), half_past.clone()),
            (json!("/inner/a"), json!(["a"]), immediately.clone()),
            (json!("/inner/b"), json!(["b"]), immediately),
            (json!("/last"), json!([3]), half_past),
            (json!("/alone"), json!([4]), Value::Null),
        ]
    );
    let phone = h.component("phone").expect("the source");
    assert_eq!(phone.bad_input, 0);
    assert_eq!(gauge(&phone, "port"), f64::from(port));
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_packets_are_counted_and_the_source_serves_on() {
    python();
    let port = free_udp_port();
    let mut h = Harness::start(&source_config(port, "max_packet = 64"), |_| {});
    h.listening("phone").await;

    let oversized = format!("2f{}00{}", "61".repeat(70), "00".repeat(7));
    let bad = [
        ("2f6100002c690000", "argument 1 (`i`) of `/a` is cut off"),
        ("2f6100002c780000", "unknown type tag `x`"),
        ("2f6100", "3 bytes, not a multiple of 4"),
        ("2361626300000000", "neither an address"),
        (oversized.as_str(), "more than 64 bytes"),
    ];
    for (hex, _) in &bad {
        send(port, &["raw", hex]).await;
    }
    send(port, &["press"]).await;
    let got = h.take(bad.len() + 1).await;
    for (signal, (_, why)) in got.iter().zip(&bad) {
        assert_eq!(signal["type"], "error", "{signal}");
        assert_eq!(signal["payload"]["code"], "bad_frame");
        let message = signal["payload"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("malformed OSC packet from 127.0.0.1:"),
            "{message}"
        );
        assert!(message.contains(why), "{message} should say {why}");
    }
    // Served on: the good packet after them is a signal.
    let press = got.last().unwrap();
    assert_eq!(press["type"], "osc.message");
    assert_eq!(press["payload"]["address"], "/agent/pause");
    assert_eq!(press["payload"]["args"], json!([1.0]));
    assert_eq!(press["payload"]["tags"], "f");

    let phone = h
        .until("phone", "the counts", |s| gauge(s, "osc_malformed") == 4.0)
        .await;
    assert_eq!(gauge(&phone, "osc_oversized"), 1.0);
    assert_eq!(phone.bad_input, 5);
    assert_eq!(phone.state, HealthState::Ok);
    assert!(
        phone
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("more than 64 bytes")),
        "{phone:?}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_outside_allowed_peers_is_refused_and_counted() {
    python();
    let port = free_udp_port();
    let mut h = Harness::start(
        &source_config(port, "allowed_peers = [\"127.0.0.2\"]"),
        |_| {},
    );
    h.listening("phone").await;

    // From 127.0.0.1 (not allowed), twice; then from 127.0.0.2.
    send(port, &["press"]).await;
    send(port, &["raw", "2f6100002c780000"]).await;
    send(port, &["press", "127.0.0.2"]).await;
    let got = h.take(1).await;
    assert_eq!(
        got[0]["type"], "osc.message",
        "only the allowed sender's packet: {got:?}"
    );
    let peer = got[0]["metadata"]["peer"].as_str().unwrap();
    assert!(peer.starts_with("127.0.0.2:"), "{peer}");

    let phone = h
        .until("phone", "two refusals", |s| {
            gauge(s, "osc_refused_peers") == 2.0
        })
        .await;
    assert_eq!(phone.bad_input, 0, "a refused packet is not read");
    assert_eq!(gauge(&phone, "osc_malformed"), 0.0);
    assert!(
        phone
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("refused packets from 127.0.0.1")),
        "{phone:?}"
    );
    assert!(h.signals.try_recv().is_err(), "nothing else came through");
    h.stop().await;
}

/// `osc_peer.py receive COUNT 0 0 0`: its ports, and its JSON lines.
async fn receiver(
    messages: usize,
    ports: usize,
) -> (
    tokio::process::Child,
    Vec<u16>,
    Lines<BufReader<ChildStdout>>,
) {
    let mut child = Command::new(python())
        .arg(peer_script())
        .args(["receive", &messages.to_string()])
        .args(std::iter::repeat_n("0", ports))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python runs");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = tokio::time::timeout(GUARD, lines.next_line())
        .await
        .expect("the receiver starts in time")
        .expect("reads")
        .expect("a first line");
    let ports = first
        .strip_prefix("LISTENING ")
        .unwrap_or_else(|| panic!("{first}"))
        .split(' ')
        .map(|p| p.parse().expect("a port"))
        .collect();
    (child, ports, lines)
}

/// The next `n` JSON lines of the receiver.
async fn packets(lines: &mut Lines<BufReader<ChildStdout>>, messages: usize) -> Vec<Value> {
    let mut got: Vec<Value> = Vec::new();
    let mut count = 0;
    let done = tokio::time::timeout(GUARD, async {
        while count < messages {
            let line = lines.next_line().await.expect("reads").expect("a line");
            let packet: Value = serde_json::from_str(&line).expect("JSON");
            count += packet["messages"].as_array().map_or(0, Vec::len);
            got.push(packet);
        }
    })
    .await;
    assert!(
        done.is_ok(),
        "{count} of {messages} messages in time: {got:#?}"
    );
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_osc_receives_what_the_output_sends() {
    python();
    let (_child, ports, mut lines) = receiver(2 + 3, 3).await;
    let (a, b, c) = (ports[0], ports[1], ports[2]);
    let config = format!(
        r#"
[sources.app]
type = "feed"

[filters.states]
type = "when"
inputs = ["app"]
when = {{ type = "test.state" }}

[filters.messages]
type = "when"
inputs = ["app"]
when = {{ type = "osc.message" }}

[outputs.surface]
type = "osc"
inputs = ["states"]
target = ["127.0.0.1:{a}", "localhost:{b}"]
address = "/agents/{{payload.agentId}}/state"
args = [
  "payload.to", "payload.n", "payload.big", "payload.x", "payload.flag", "payload.list",
  "payload.obj", {{ path = "payload.missing", default = "none" }},
  {{ path = "payload.blob", type = "b" }}, {{ path = "payload.x", type = "d" }},
  {{ path = "payload.n", type = "f" }}, {{ path = "payload.n", type = "h" }},
  {{ path = "payload.to", type = "bool" }}, {{ value = "lit", type = "s" }}, 1.5, false,
]

[outputs.relay]
type = "osc"
inputs = ["messages"]
target = "127.0.0.1:{c}"
bundle = true

[outputs.out]
type = "sink"
inputs = ["app"]
"#
    );
    let osc = |address: &str, args: Value| {
        Signal::new(
            "osc.message",
            "t",
            object! {"address" => address, "args" => args},
        )
    };
    let mut h = Harness::start(&config, |feed| {
        // Queued before the graph starts: they reach the relay together, as one batch.
        for s in [
            osc("/a", json!([1])),
            osc("/b", json!(["x", 0.5])),
            osc("/c", json!([])),
        ] {
            feed.try_send(s).expect("room");
        }
    });
    let state = |agent: Option<&str>| {
        let mut p = object! {
            "to" => "acting", "n" => 3, "big" => 3_000_000_000i64, "x" => 0.5, "flag" => true,
            "list" => json!([1, "two", [true]]), "obj" => json!({"k": 1}), "blob" => "AAH/"
        };
        if let Some(agent) = agent {
            p.insert("agentId".into(), agent.into());
        }
        Signal::new("test.state", "t", p)
    };
    // Without `agentId` the address cannot be made: refused, counted, not sent.
    h.feed.send(state(None)).await.expect("the graph runs");
    h.feed
        .send(state(Some("claude 1/main")))
        .await
        .expect("the graph runs");
    h.take(5).await;

    let got = packets(&mut lines, 5).await;
    let (bundled, single): (Vec<&Value>, Vec<&Value>) = got.iter().partition(|p| p["port"] == c);
    // Each target got the message once.
    let mut to: Vec<u64> = single.iter().map(|p| p["port"].as_u64().unwrap()).collect();
    to.sort_unstable();
    let mut expected = vec![u64::from(a), u64::from(b)];
    expected.sort_unstable();
    assert_eq!(to, expected);
    for packet in &single {
        assert_eq!(packet["bundle"], false);
        assert_eq!(
            packet["messages"],
            json!([{
                "address": "/agents/claude_1/main/state",
                "tags": "sihfTis[T]ssbdfhTsfF",
                "args": ["acting", 3, 3_000_000_000i64, 0.5, true, 1, "two", [true], "{\"k\":1}", "none",
                         {"blob": "AAH/"}, 0.5, 3.0, 3, true, "lit", 1.5, false]
            }])
        );
    }
    // The relay: every message in a bundle sent "immediately", in order.
    let mut relayed = Vec::new();
    for packet in &bundled {
        assert_eq!(packet["bundle"], true, "{packet}");
        assert_eq!(packet["timetag"], json!([0, 1]));
        relayed.extend(packet["messages"].as_array().unwrap().iter().cloned());
    }
    assert_eq!(
        relayed,
        [
            json!({"address": "/a", "tags": "i", "args": [1]}),
            json!({"address": "/b", "tags": "sf", "args": ["x", 0.5]}),
            json!({"address": "/c", "tags": "", "args": []}),
        ]
    );

    let surface = h
        .until("surface", "one refusal, one delivery", |s| {
            s.bad_input == 1 && s.sent == 1
        })
        .await;
    assert!(
        surface
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("no value at `payload.agentId` for the address")),
        "{surface:?}"
    );
    assert_eq!(surface.state, HealthState::Ok);
    let relay = h.until("relay", "three sent", |s| s.sent == 3).await;
    assert_eq!(relay.bad_input, 0);
    h.stop().await;
}
