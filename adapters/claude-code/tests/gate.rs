//! One gate for every agent: two gated agent components in one graph, each holding a
//! call; an answer without `promptId` (what a pad sends) decides the oldest of the two,
//! the next answer the other, and each decision goes out as `approval.decided`.

use std::time::Duration;

use patchbay_graph::{ChannelOutput, ChannelSource, Registry, RunningGraph, SourceText, compile};
use patchbay_signal::{SharedSignal, Signal, object};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Guards a wait (a hang fails the test; nothing is timed).
const GUARD: Duration = Duration::from_secs(30);

/// Posts a hook the way Claude Code does and returns the answer's JSON body.
async fn hook(port: u16, body: Value) -> Value {
    let body = body.to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!(
        "POST /hook HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.expect("read");
    let text = String::from_utf8_lossy(&out);
    let (_, json) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    serde_json::from_str(json).expect("a JSON answer")
}

fn pre_tool_use(session: &str, call: &str) -> Value {
    json!({"hook_event_name": "PreToolUse", "session_id": session, "cwd": "/tmp",
           "transcript_path": "/tmp/none.jsonl", "tool_name": "Bash",
           "tool_input": {"command": "echo hi > out.txt"}, "tool_use_id": call})
}

/// The next signal of `kind` at the sink.
async fn next_of(out: &mut mpsc::Receiver<SharedSignal>, kind: &str) -> SharedSignal {
    tokio::time::timeout(GUARD, async {
        loop {
            let s = out.recv().await.expect("the graph runs");
            if s.kind == kind {
                return s;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {kind} in time"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promptless_answer_decides_the_oldest_approval_of_any_agent() {
    let port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port()
    };
    let (a, b) = (port(), port());
    let mut registry = Registry::new();
    registry.adapter(&patchbay_claude_code::ADAPTER);
    let pad = ChannelSource::register(&mut registry, "pad", 8);
    let mut out = ChannelOutput::register(&mut registry, "out", 256);
    let gate = r#"gate = { tools = ["Bash"], timeout_ms = 60000, default = "deny" }"#;
    let config = format!(
        "[sources.pad]\ntype = \"pad\"\n\n\
         [outputs.a]\ntype = \"claude_code\"\ninputs = [\"pad\"]\nlisten = \"127.0.0.1:{a}\"\n{gate}\n\n\
         [outputs.b]\ntype = \"claude_code\"\ninputs = [\"pad\"]\nlisten = \"127.0.0.1:{b}\"\n{gate}\n\n\
         [outputs.sink]\ntype = \"out\"\ninputs = [\"a.inbound\", \"b.inbound\"]\n"
    );
    let graph = compile(&[SourceText::new("gate.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    for port in [a, b] {
        tokio::time::timeout(GUARD, async {
            while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the endpoint listens");
    }

    // Agent b asks first, then agent a.
    let held_b = tokio::spawn(hook(b, pre_tool_use("session-b", "toolu_b")));
    let asked = next_of(&mut out, "approval.requested").await;
    assert_eq!(asked.payload.get("promptId"), Some(&json!("toolu_b")));
    assert_eq!(asked.payload.get("agentId"), Some(&json!("session-b")));
    assert_eq!(asked.payload.get("toolName"), Some(&json!("Bash")));
    let held_a = tokio::spawn(hook(a, pre_tool_use("session-a", "toolu_a")));
    let asked = next_of(&mut out, "approval.requested").await;
    assert_eq!(asked.payload.get("promptId"), Some(&json!("toolu_a")));

    // The pad's first answer goes to b's call, the oldest; a's still waits.
    let answer = |value: &str| Signal::new("control.answer", "pad", object! {"value" => value});
    pad.send(answer("deny")).await.expect("the graph runs");
    let denied = tokio::time::timeout(GUARD, held_b)
        .await
        .expect("b answered")
        .expect("b's hook");
    let output = &denied["hookSpecificOutput"];
    assert_eq!(output["permissionDecision"], "deny", "{denied}");
    assert_eq!(
        output["permissionDecisionReason"],
        "patchbay: denied by pad"
    );
    let decided = next_of(&mut out, "approval.decided").await;
    assert_eq!(
        (decided.payload.get("promptId"), decided.payload.get("by")),
        (Some(&json!("toolu_b")), Some(&json!("pad")))
    );
    assert!(!held_a.is_finished(), "a's call is still held");

    // The next answer, in an agent's own word, goes to a's.
    pad.send(answer("accept")).await.expect("the graph runs");
    let allowed = tokio::time::timeout(GUARD, held_a)
        .await
        .expect("a answered")
        .expect("a's hook");
    assert_eq!(
        allowed["hookSpecificOutput"]["permissionDecision"], "allow",
        "{allowed}"
    );
    let decided = next_of(&mut out, "approval.decided").await;
    assert_eq!(decided.payload.get("promptId"), Some(&json!("toolu_a")));
    assert_eq!(decided.payload.get("value"), Some(&json!("allow")));

    drop(pad);
    let report = graph.stop().await.expect("graph task");
    assert!(report.telemetry.approvals().pending().is_empty());
}
