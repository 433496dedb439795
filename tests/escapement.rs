//! `type = "escapement"` end to end: the real binary against an agent endpoint written
//! here (a WebSocket server on 127.0.0.1) that plays the recorded haiku session
//! (`tests/fixtures/escapement/haiku-sample.jsonl`). Control signals go in from a file
//! source and must reach the agent as the exact control and answer frames; the agent's
//! frames come out of `agent.inbound`; a reconnect mid-session repeats no signal.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use patchbay_testkit::process::Killed;
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

fn start(config: &Path) -> Killed {
    let child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["run", &config.display().to_string()])
        .env("PATCHBAY_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("patchbay starts");
    Killed(child)
}

/// The frames an agent sends: the recorded session minus the UI's `answer` line.
fn agent_frames() -> Vec<Value> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/escapement/haiku-sample.jsonl");
    std::fs::read_to_string(path)
        .expect("fixture")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).expect("fixture line"))
        .filter(|f| f["kind"] != "answer")
        .collect()
}

/// The agent: on the first connection it plays the session up to seq 30, collects
/// `expect` control frames, and drops the socket (no close frame); on the second it
/// replays from seq 20 to the end and stays open.
async fn agent(listener: TcpListener, expect: usize, received: mpsc::UnboundedSender<Value>) {
    let frames = agent_frames();
    let seq = |f: &Value| f["seq"].as_u64();
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
                let _ = received.send(serde_json::from_str(t.as_str()).expect("a JSON frame"));
            }
            Some(Ok(_)) => {}
            _ => panic!("the first connection ended before all controls arrived"),
        }
    }
    drop(ws);
    let (tcp, _) = listener.accept().await.expect("accept 2");
    let mut ws = tokio_tungstenite::accept_async(tcp).await.expect("ws 2");
    let start = frames
        .iter()
        .position(|f| seq(f) == Some(20))
        .expect("seq 20");
    for f in &frames[start..] {
        ws.send(Message::text(f.to_string())).await.expect("send");
    }
    while let Some(Ok(msg)) = ws.next().await {
        if let Message::Text(t) = msg {
            let _ = received.send(serde_json::from_str(t.as_str()).unwrap_or(Value::Null));
        }
    }
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
    let dir = ScratchDir::new("escapement");
    let signals = [
        json!({"type": "control.pause", "payload": {}}),
        json!({"type": "control.step", "payload": {"n": 2}}),
        json!({"type": "control.continue", "payload": {}}),
        json!({"type": "control.arm", "payload": {}}),
        json!({"type": "control.cancel", "payload": {}}), // no Escapement frame: refused
        json!({"type": "control.interrupt", "payload": {}}),
        json!({"type": "control.answer", "payload": {"promptId": "pick-winner#1", "value": "poet1"}}),
        json!({"type": "control.answer", "payload": {"promptId": "pick-winner#1", "cancelled": true}}),
        json!({"type": "control.quit", "payload": {}}),
    ];
    let expected_frames = vec![
        json!({"kind": "control", "op": "pause"}),
        json!({"kind": "control", "op": "step", "n": 2}),
        json!({"kind": "control", "op": "continue"}),
        json!({"kind": "control", "op": "arm"}),
        json!({"kind": "control", "op": "ui-interrupt"}),
        json!({"kind": "answer", "prompt-id": "pick-winner#1", "value": "poet1"}),
        json!({"kind": "answer", "prompt-id": "pick-winner#1", "cancelled": true}),
        json!({"kind": "control", "op": "ui-quit"}),
    ];
    let cmds = dir.join("cmds.ndjson");
    std::fs::write(
        &cmds,
        signals.iter().map(|s| format!("{s}\n")).collect::<String>(),
    )
    .expect("cmds");
    let out = dir.join("out.ndjson");

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let agent = tokio::spawn(agent(listener, expected_frames.len(), tx));

    let config = dir.join("pipeline.toml");
    std::fs::write(
        &config,
        format!(
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
            cmds = cmds.display(),
            out = out.display(),
        ),
    )
    .expect("config");
    let _daemon = start(&config);

    let mut frames = Vec::new();
    while frames.len() < expected_frames.len() {
        let f = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("control frames arrive")
            .expect("agent alive");
        frames.push(f);
    }
    assert_eq!(frames, expected_frames);

    // Every seq of the session once; the frames replayed after the reconnect (seq 20-30)
    // give no second signal. 56 event frames, llm/response giving two signals each (2),
    // plus the phase and prompt frames.
    let expected_count = 56 + 2 + 2;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut got = read_signals(&out);
    while got.len() < expected_count && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        got = read_signals(&out);
    }
    // A little more time for a duplicate to show up, were there one.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = read_signals(&out);
    let pairs: Vec<(String, Option<u64>)> = got
        .iter()
        .map(|s| {
            (
                s["type"].as_str().unwrap_or_default().to_owned(),
                s["metadata"]["upstreamSeq"].as_u64(),
            )
        })
        .collect();
    let unique: BTreeSet<&(String, Option<u64>)> =
        pairs.iter().filter(|(_, s)| s.is_some()).collect();
    assert_eq!(
        unique.len(),
        pairs.iter().filter(|(_, s)| s.is_some()).count(),
        "a signal repeated: {pairs:?}"
    );
    let seqs: BTreeSet<u64> = pairs.iter().filter_map(|(_, s)| *s).collect();
    assert_eq!(seqs, (0..=55).collect());
    assert_eq!(got.len(), expected_count, "{pairs:?}");
    let kinds: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "escapement.phase").count(),
        1
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "escapement.prompt").count(),
        1
    );
    assert_eq!(kinds.iter().filter(|k| **k == "text_delta").count(), 28 + 3);
    assert!(
        kinds.contains(&"thinking")
            && kinds.contains(&"tool_result")
            && kinds.contains(&"completion")
    );
    for s in &got {
        assert_eq!(s["source"], "escapement:agent");
    }
    agent.abort();
}
