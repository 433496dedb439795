//! The hook endpoint's listener on a real loopback socket: a client that never finishes
//! its request head is closed by the header timeout, a foreign `Host` or any `Origin` is
//! refused, and a hook posted the way Claude Code posts it is served.

use std::time::Duration;

use patchbay_graph::{ChannelOutput, Registry, RunningGraph, SourceText, compile};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Guards a wait (a hang fails the test; nothing is timed).
const GUARD: Duration = Duration::from_secs(30);

/// The status code of a raw answer.
fn status(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

async fn request(port: u16, host: &str, extra: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!(
        "POST /hook HTTP/1.0\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(GUARD, stream.read_to_end(&mut out))
        .await
        .expect("answered in time")
        .expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_endpoint_is_hardened() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut registry = Registry::new();
    registry.adapter(&patchbay_claude_code::ADAPTER);
    let mut signals = ChannelOutput::register(&mut registry, "out", 64);
    let config = format!(
        "[sources.hooks]\ntype = \"claude_code\"\nlisten = \"127.0.0.1:{port}\"\nheader_timeout_ms = 300\n\n[outputs.sink]\ntype = \"out\"\ninputs = [\"hooks\"]\n"
    );
    let graph = compile(&[SourceText::new("hooks.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    let up = tokio::time::timeout(GUARD, async {
        while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(up.is_ok(), "the endpoint never listened");

    // A head that never ends: closed.
    let mut slow = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    slow.write_all(b"POST /hook HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .expect("write");
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(GUARD, async {
        loop {
            match slow.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the slow client was never closed");

    let hook =
        r#"{"hook_event_name":"SessionStart","session_id":"s1","source":"startup","cwd":"/tmp"}"#;
    let host = format!("127.0.0.1:{port}");
    let r = request(port, &format!("rebind.example:{port}"), "", hook).await;
    assert_eq!(status(&r), 403, "{r}");
    let r = request(port, &host, "Origin: http://127.0.0.1:9\r\n", hook).await;
    assert_eq!(status(&r), 403, "{r}");
    let r = request(port, &host, "", hook).await;
    assert_eq!(status(&r), 200, "{r}");
    let first = tokio::time::timeout(GUARD, signals.recv())
        .await
        .expect("a signal in time")
        .expect("a signal");
    assert!(first.source.starts_with("claude_code:"), "{first:?}");

    let report = graph.stop().await.expect("graph task");
    let hooks = report.telemetry.component("hooks").expect("stats");
    for reason in ["header_timeout", "forbidden_host", "forbidden_origin"] {
        assert_eq!(
            hooks.http_refused.get(reason),
            Some(&1),
            "{reason}: {hooks:?}"
        );
    }
}

/// The options `patchbay components claude_code` prints: every endpoint option, each with
/// its doc, the listen default Claude Code's own; unknown keys refused with a suggestion.
#[test]
fn every_option_is_described_and_unknown_keys_are_refused() {
    let schema = (patchbay_claude_code::ADAPTER.components[0].options)();
    let properties = schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
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
        let doc = option
            .get("description")
            .and_then(serde_json::Value::as_str);
        assert!(doc.is_some_and(|d| !d.is_empty()), "{name} has no doc");
    }
    assert_eq!(properties["listen"]["default"], "127.0.0.1:7879");

    let mut registry = Registry::new();
    registry.adapter(&patchbay_claude_code::ADAPTER);
    let typo = "[sources.c]\ntype = \"claude_code\"\nmax_bdy = 1\n";
    let Err(errors) = compile(&[SourceText::new("c.toml", typo)], &registry) else {
        panic!("an unknown key is refused");
    };
    assert!(
        errors
            .iter()
            .any(|e| e.to_string().contains("did you mean `max_body`")),
        "{errors:?}"
    );
}
