//! The transport end to end, in process: a graph with an `escapement` output talking to
//! an agent endpoint written here (a tokio-tungstenite server on 127.0.0.1) that plays
//! the recorded haiku session.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use patchbay_graph::{HealthState, Registry, RunningGraph, SourceText, compile};
use patchbay_signal::normalize::Decoded;
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

fn registry() -> Registry {
    let mut r = Registry::new();
    r.adapter(&patchbay_ndjson::ADAPTER);
    r.adapter(&patchbay_escapement::ADAPTER);
    r
}

/// The frames an agent sends (the recorded session minus the UI's `answer` line).
fn agent_frames() -> Vec<Value> {
    patchbay_testkit::fixture_text("escapement/haiku-sample.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).expect("fixture line"))
        .filter(|f| f["kind"] != "answer")
        .collect()
}

/// The control signals sent into the graph, and the frames the agent must receive for
/// them (`control.cancel` has no Escapement frame: refused).
fn controls() -> (String, Vec<Value>) {
    let signals = [
        json!({"type": "control.pause", "payload": {}}),
        json!({"type": "control.step", "payload": {"n": 2}}),
        json!({"type": "control.continue", "payload": {}}),
        json!({"type": "control.arm", "payload": {}}),
        json!({"type": "control.cancel", "payload": {}}),
        json!({"type": "control.interrupt", "payload": {}}),
        json!({"type": "control.answer", "payload": {"promptId": "pick-winner#1", "value": "poet1"}}),
        json!({"type": "control.answer", "payload": {"promptId": "pick-winner#1", "cancelled": true}}),
        json!({"type": "control.quit", "payload": {}}),
    ];
    let frames = vec![
        json!({"kind": "control", "op": "pause"}),
        json!({"kind": "control", "op": "step", "n": 2}),
        json!({"kind": "control", "op": "continue"}),
        json!({"kind": "control", "op": "arm"}),
        json!({"kind": "control", "op": "ui-interrupt"}),
        json!({"kind": "answer", "prompt-id": "pick-winner#1", "value": "poet1"}),
        json!({"kind": "answer", "prompt-id": "pick-winner#1", "cancelled": true}),
        json!({"kind": "control", "op": "ui-quit"}),
    ];
    let text = signals.iter().map(|s| format!("{s}\n")).collect();
    (text, frames)
}

/// The agent: on the first connection it plays the frames up to seq 30, collects
/// `expect` control frames, and drops the socket; on the second it replays from seq 20
/// to the end and stays open.
async fn agent(listener: TcpListener, expect: usize, received: mpsc::UnboundedSender<Value>) {
    let frames = agent_frames();
    let seq = |f: &Value| f["seq"].as_u64();
    // First connection.
    let (tcp, _) = listener.accept().await.expect("accept 1");
    let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("ws 1");
    for f in frames.iter().take_while(|f| seq(f).is_none_or(|s| s <= 30)) {
        ws.send(Message::text(f.to_string())).await.expect("send");
    }
    let mut got = 0;
    while got < expect {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => {
                got += 1;
                let _ =
                    received.send(serde_json::from_str(t.as_str()).expect("control frame is JSON"));
            }
            Some(Ok(_)) => {}
            _ => panic!("the first connection ended before all controls arrived"),
        }
    }
    drop(ws); // no close frame: the socket just goes away
    // Second connection: replay from an earlier seq.
    let (tcp, _) = listener.accept().await.expect("accept 2");
    let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("ws 2");
    let start = frames
        .iter()
        .position(|f| seq(f) == Some(20))
        .expect("seq 20");
    for f in &frames[start..] {
        ws.send(Message::text(f.to_string())).await.expect("send");
    }
    // Stay open (and answer pings) until the test ends.
    while let Some(Ok(msg)) = ws.next().await {
        if let Message::Text(t) = msg {
            let _ = received.send(serde_json::from_str(t.as_str()).unwrap_or(Value::Null));
        }
    }
}

/// What the whole session decodes to, once.
fn expected_signals() -> Vec<(String, Option<u64>)> {
    let mut decoder = patchbay_escapement::EscapementDecoder::new("escapement:agent");
    let mut out = Vec::new();
    for f in agent_frames() {
        decoder.decode_frame(f, None, &mut out);
    }
    out.into_iter()
        .map(|d| match d {
            Decoded::Signal(s) | Decoded::BadInput(s) => (
                s.kind.to_string(),
                s.meta("upstreamSeq").and_then(Value::as_u64),
            ),
        })
        .collect()
}

fn read_signals(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controls_reach_the_agent_and_a_reconnect_repeats_no_signal() {
    let dir = ScratchDir::new("escapement-e2e");
    let (cmds, expected_frames) = controls();
    std::fs::write(dir.join("cmds.ndjson"), cmds).expect("cmds");
    let out_path = dir.join("out.ndjson");

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let agent = tokio::spawn(agent(listener, expected_frames.len(), tx));

    let config = format!(
        r#"
[sources.cmds]
type = "file"
path = "{cmds}"

[outputs.agent]
type = "escapement"
inputs = ["cmds"]
url = "ws://127.0.0.1:{port}/ws"
backoff_initial_ms = 20

[outputs.out]
type = "file"
inputs = ["agent.inbound"]
path = "{out}"
"#,
        cmds = dir.join("cmds.ndjson").display(),
        out = out_path.display(),
    );
    let graph =
        compile(&[SourceText::new("e2e.toml", config)], &registry()).expect("graph compiles");
    let graph = RunningGraph::spawn(graph);

    // The agent receives exactly the frames, in order.
    let mut frames = Vec::new();
    while frames.len() < expected_frames.len() {
        let f = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("control frames arrive in time")
            .expect("agent alive");
        frames.push(f);
    }
    assert_eq!(frames, expected_frames);

    // Every signal of the session arrives once, even though seq 20..30 were sent twice.
    let expected = expected_signals();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut got = read_signals(&out_path);
    while got.len() < expected.len() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        got = read_signals(&out_path);
    }
    let report = tokio::time::timeout(Duration::from_secs(20), graph.stop())
        .await
        .expect("graph stops")
        .expect("graph task");
    // Nothing more arrived after the stop (the drain could have added a late duplicate).
    let got = read_signals(&out_path);
    let kinds: Vec<(String, Option<u64>)> = got
        .iter()
        .map(|s| {
            (
                s["type"].as_str().unwrap_or_default().to_owned(),
                s["metadata"]["upstreamSeq"].as_u64(),
            )
        })
        .collect();
    assert_eq!(kinds, expected);
    let seqs: BTreeSet<u64> = kinds.iter().filter_map(|(_, s)| *s).collect();
    assert_eq!(seqs, (0..=55).collect());
    for s in &got {
        assert_eq!(s["source"], "escapement:agent");
    }

    let agent_stats = report.telemetry.component("agent").expect("agent stats");
    assert_eq!(agent_stats.sent, 8);
    assert_eq!(
        agent_stats.bad_input, 1,
        "control.cancel is refused and counted"
    );
    // The last error is the dropped connection (recorded after the refusal).
    assert!(
        agent_stats
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("connection lost")),
        "{agent_stats:?}"
    );
    assert_eq!(agent_stats.state, HealthState::Stopped);
    agent.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gives_up_after_max_attempts() {
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let config = format!(
        r#"
[sources.agent]
type = "escapement"
url = "ws://127.0.0.1:{port}/ws"
backoff_initial_ms = 5
backoff_max_ms = 10
max_attempts = 3
"#
    );
    let graph =
        compile(&[SourceText::new("e2e.toml", config)], &registry()).expect("graph compiles");
    let graph = RunningGraph::spawn(graph);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let report = tokio::time::timeout(Duration::from_secs(20), graph.stop())
        .await
        .expect("graph stops")
        .expect("graph task");
    let stats = report.telemetry.component("agent").expect("stats");
    assert_eq!(stats.state, HealthState::Failed);
    assert!(
        stats
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("gave up after 3 attempts")),
        "{stats:?}"
    );
}

#[test]
fn config_errors_point_at_the_key() {
    let r = registry();
    let cases = [
        ("url = \"http://x\"", "ws://"),
        ("url = \"wss://\"", "no host"),
        ("url = \"ws://\"", "no host"),
        ("url = \"ws://x\"\nbackoff_initial_ms = 0", "at least 1"),
        (
            "url = \"ws://x\"\nbackoff_max_ms = 10",
            "backoff_initial_ms",
        ),
        ("url = \"ws://x\"\nmax_attempts = 0", "retry forever"),
        ("url = \"ws://x\"\nbogus = 1", "unknown field"),
    ];
    for (options, message) in cases {
        let config = format!("[sources.agent]\ntype = \"escapement\"\n{options}\n");
        let err = compile(&[SourceText::new("c.toml", config)], &r).expect_err(options);
        assert!(
            err.iter().any(|d| d.message.contains(message)),
            "{options}: {err:?}"
        );
    }
}

/// An agent that is away does not stall the graph: the escapement output keeps taking
/// controls into its bounded queue (`queue = 4`, the oldest dropped and counted), another
/// output of the same graph keeps receiving, and the queued controls reach the agent once
/// it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_agent_never_stalls_the_graph_and_gets_the_latest_controls_when_back() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let mut registry = registry();
    let feed = patchbay_graph::ChannelSource::register(&mut registry, "feed", 64);
    let mut ui = patchbay_graph::ChannelOutput::register(&mut registry, "ui", 64);
    let config = format!(
        r#"
[sources.feed]
type = "feed"

[outputs.agent]
type = "escapement"
inputs = ["feed"]
url = "ws://127.0.0.1:{port}/ws"
backoff_initial_ms = 20
backoff_max_ms = 50
queue = 4

[outputs.ui]
type = "ui"
inputs = ["feed"]
"#
    );
    let graph = compile(&[SourceText::new("away.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);

    // The agent is away: ten controls go in, and the UI gets every one of them.
    for n in 1..=10u64 {
        let mut payload = patchbay_signal::Object::new();
        payload.insert("n".into(), json!(n));
        feed.send(patchbay_signal::Signal::new(
            "control.step",
            "test",
            payload,
        ))
        .await
        .expect("graph takes signals");
    }
    for n in 1..=10u64 {
        let signal = tokio::time::timeout(Duration::from_secs(10), ui.recv())
            .await
            .expect("the UI is not stalled by the absent agent")
            .expect("ui channel open");
        assert_eq!(signal.payload.get("n"), Some(&json!(n)));
    }

    // The agent comes back: the four latest controls arrive, in order.
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("rebind");
    let (tcp, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
        .await
        .expect("the link reconnects")
        .expect("accept");
    let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("ws");
    let mut frames = Vec::new();
    while frames.len() < 4 {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                frames.push(serde_json::from_str::<Value>(t.as_str()).expect("JSON"));
            }
            Ok(Some(Ok(_))) => {}
            other => panic!("the queued controls did not arrive: {other:?} after {frames:?}"),
        }
    }
    let expected: Vec<Value> = (7..=10u64)
        .map(|n| json!({"kind": "control", "op": "step", "n": n}))
        .collect();
    assert_eq!(frames, expected);

    drop(feed);
    let report = tokio::time::timeout(Duration::from_secs(20), graph.stop())
        .await
        .expect("graph stops")
        .expect("graph task");
    let agent = report.telemetry.component("agent").expect("agent stats");
    assert_eq!(agent.dropped, 6, "{agent:?}");
    assert_eq!(agent.sent, 4, "{agent:?}");
}
