//! `type = "gemini_cli"` on a real loopback socket: a hook posted the way `patchbay hooks
//! emit --agent gemini` posts it is decoded; a gated `BeforeTool` waits for the pad's
//! answer and gets Gemini CLI's decision; other events, and tools not gated, get `{}` at
//! once; a wrong token is refused.

use std::time::Duration;

use patchbay_graph::{ChannelOutput, ChannelSource, Registry, RunningGraph, SourceText, compile};
use patchbay_signal::{SharedSignal, Signal, object};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Guards a wait (a hang fails the test; nothing is timed).
const GUARD: Duration = Duration::from_secs(30);

fn fixture(event: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/gemini-hook-{event}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

/// Posts a hook and returns the status and the body.
async fn post(port: u16, token: Option<&str>, body: &Value) -> (u16, String) {
    let body = body.to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /hook HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(GUARD, stream.read_to_end(&mut out))
        .await
        .expect("answered in time")
        .expect("read");
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned());
    (status, body.unwrap_or_default())
}

async fn hook(port: u16, body: Value) -> Value {
    let (status, text) = post(port, Some("s3cret"), &body).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).expect("a JSON answer")
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
async fn a_gated_before_tool_waits_for_its_answer() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut registry = Registry::new();
    registry.adapter(&patchbay_gemini_cli::ADAPTER);
    let pad = ChannelSource::register(&mut registry, "pad", 8);
    let mut out = ChannelOutput::register(&mut registry, "out", 256);
    let config = format!(
        "[sources.pad]\ntype = \"pad\"\n\n\
         [outputs.gemini]\ntype = \"gemini_cli\"\ninputs = [\"pad\"]\nlisten = \"127.0.0.1:{port}\"\n\
         token = \"s3cret\"\n\
         gate = {{ tools = [\"run_shell_command\"], timeout_ms = 60000, default = \"deny\" }}\n\n\
         [outputs.sink]\ntype = \"out\"\ninputs = [\"gemini.inbound\"]\n"
    );
    let graph = compile(&[SourceText::new("gemini.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    tokio::time::timeout(GUARD, async {
        while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the endpoint listens");

    // No token, or a wrong one: refused.
    let start = fixture("SessionStart");
    assert_eq!(post(port, None, &start).await.0, 401);
    assert_eq!(post(port, Some("nope"), &start).await.0, 401);
    // Not a hook payload: refused.
    assert_eq!(post(port, Some("s3cret"), &json!([1])).await.0, 400);

    // An event that is not a call: `{}` at once, its signals out.
    assert_eq!(hook(port, start).await, json!({}));
    let started = next_of(&mut out, "gemini_cli.session_start").await;
    assert!(started.source.starts_with("gemini_cli:"), "{started:?}");

    // A tool not gated: `{}` at once.
    let mut read = fixture("BeforeTool");
    read["tool_name"] = json!("read_file");
    read["tool_input"] = json!({"file_path": "a.txt"});
    assert_eq!(hook(port, read).await, json!({}));

    // The gated call waits; the pad's promptless answer decides it.
    let held = tokio::spawn(hook(port, fixture("BeforeTool")));
    let asked = next_of(&mut out, "approval.requested").await;
    let prompt = asked.payload.get("promptId").cloned().expect("promptId");
    assert_eq!(
        prompt,
        json!(patchbay_gemini_cli::call_id(&fixture("BeforeTool")))
    );
    assert_eq!(
        asked.payload.get("toolName"),
        Some(&json!("run_shell_command"))
    );
    assert!(!held.is_finished(), "the call is held");
    let answer = Signal::new("control.answer", "pad", object! {"value" => "deny"});
    pad.send(answer).await.expect("the graph runs");
    let denied = tokio::time::timeout(GUARD, held)
        .await
        .expect("answered")
        .expect("the hook");
    assert_eq!(
        denied,
        json!({"decision": "deny", "reason": "patchbay: denied by pad"})
    );
    let decided = next_of(&mut out, "approval.decided").await;
    assert_eq!(decided.payload.get("promptId"), Some(&prompt));
    assert_eq!(decided.payload.get("value"), Some(&json!("deny")));

    // Allowed, by name.
    let held = tokio::spawn(hook(port, fixture("BeforeTool")));
    let asked = next_of(&mut out, "approval.requested").await;
    let prompt = asked.payload.get("promptId").cloned().expect("promptId");
    let answer = Signal::new(
        "control.answer",
        "pad",
        object! {"value" => "allow", "promptId" => prompt},
    );
    pad.send(answer).await.expect("the graph runs");
    let allowed = tokio::time::timeout(GUARD, held)
        .await
        .expect("answered")
        .expect("the hook");
    assert_eq!(allowed, json!({"decision": "allow"}));

    drop(pad);
    let report = graph.stop().await.expect("graph task");
    assert!(report.telemetry.approvals().pending().is_empty());
    let stats = report.telemetry.component("gemini").expect("stats");
    assert_eq!(
        stats.http_refused.get("unauthorized"),
        Some(&2),
        "{stats:?}"
    );
}

#[test]
fn a_gate_needs_an_output_and_the_listen_address_is_checked() {
    let mut registry = Registry::new();
    registry.adapter(&patchbay_gemini_cli::ADAPTER);
    let gated_source = "[sources.g]\ntype = \"gemini_cli\"\ngate = { tools = [\"*\"] }\n";
    let Err(errors) = compile(&[SourceText::new("a.toml", gated_source)], &registry) else {
        panic!("a gated source is refused");
    };
    assert!(
        errors.iter().any(|e| e.to_string().contains("gate")),
        "{errors:?}"
    );
    let open = "[sources.g]\ntype = \"gemini_cli\"\nlisten = \"0.0.0.0:7880\"\n";
    let Err(errors) = compile(&[SourceText::new("b.toml", open)], &registry) else {
        panic!("not on loopback without a token is refused");
    };
    assert!(
        errors.iter().any(|e| e.to_string().contains("token")),
        "{errors:?}"
    );
}

/// The options `patchbay components gemini_cli` prints: every endpoint option, each with
/// its doc, the listen default Gemini CLI's own.
#[test]
fn every_option_is_described_with_gemini_cli_defaults() {
    let schema = (patchbay_gemini_cli::ADAPTER.components[0].options)();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .expect("properties");
    let mut names: Vec<&str> = properties.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "allowed_hosts",
            "gate",
            "header_timeout_ms",
            "idle_timeout_ms",
            "listen",
            "max_body",
            "max_connections",
            "token"
        ]
    );
    for (name, option) in properties {
        let doc = option.get("description").and_then(Value::as_str);
        assert!(doc.is_some_and(|d| !d.is_empty()), "{name} has no doc");
    }
    assert_eq!(properties["listen"]["default"], json!("127.0.0.1:7880"));
    assert_eq!(properties["max_body"]["default"], json!(8 << 20));
}

#[test]
fn unknown_keys_are_refused_with_a_suggestion() {
    let mut registry = Registry::new();
    registry.adapter(&patchbay_gemini_cli::ADAPTER);
    let typo = "[sources.g]\ntype = \"gemini_cli\"\nlisen = \"127.0.0.1:1\"\n";
    let Err(errors) = compile(&[SourceText::new("c.toml", typo)], &registry) else {
        panic!("an unknown key is refused");
    };
    assert!(
        errors
            .iter()
            .any(|e| e.to_string().contains("did you mean `listen`")),
        "{errors:?}"
    );
    let checked = serde_json::from_value::<patchbay_gemini_cli::GeminiCliConfig>(json!({}))
        .expect("all defaults")
        .check()
        .expect("checks");
    assert_eq!(checked.hook_url(), "http://127.0.0.1:7880/hook");
}
