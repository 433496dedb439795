//! The proxy's listener: it answers to loopback host names only (DNS rebinding) and to
//! no page on another origin, as the SDKs (`Host: 127.0.0.1:PORT`, no `Origin`) need.

use std::time::Duration;

use patchbay_graph::{ChannelOutput, Registry, RunningGraph, SourceText, compile};
use patchbay_testkit::llm_proxy_e2e as proxy_e2e;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The status code of a raw answer.
fn status(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

async fn get(port: u16, host: &str, extra: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!("GET /v1/models HTTP/1.0\r\nHost: {host}\r\n{extra}\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut out))
        .await
        .expect("answered in time")
        .expect("read");
    String::from_utf8_lossy(&out).into_owned()
}

/// A graph with an `openai` proxy on `port` in front of `upstream`, with `extra`
/// options; returns once the proxy listens.
async fn start_proxy(port: u16, upstream: &str, extra: &str) -> RunningGraph {
    let mut registry = Registry::new();
    registry.adapter(&patchbay_proxy::ADAPTER);
    let _out = ChannelOutput::register(&mut registry, "out", 64);
    let config = format!(
        "[sources.llm]\ntype = \"openai\"\nlisten = \"127.0.0.1:{port}\"\nupstream = \"{upstream}\"\nhealth_interval_ms = 0\n{extra}\n[outputs.sink]\ntype = \"out\"\ninputs = [\"llm\"]\n",
    );
    let graph = compile(&[SourceText::new("proxy.toml", config)], &registry).expect("compiles");
    let graph = RunningGraph::spawn(graph);
    let served = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(served.is_ok(), "the proxy never listened");
    graph
}

/// [`get`] with no extra header, or what was read before a reset (nothing: status 0).
async fn get_or_reset(port: u16, host: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!("GET /v1/models HTTP/1.0\r\nHost: {host}\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut out))
        .await
        .expect("answered in time");
    match read {
        Ok(_) => String::from_utf8_lossy(&out).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => String::new(),
        Err(e) => panic!("read: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_loopback_hosts_and_local_origins_are_served() {
    let replay = proxy_e2e::start_replay().await;
    let port = proxy_e2e::free_port();
    let graph = start_proxy(port, &replay.url, "").await;

    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let r = get(port, &host, "").await;
        assert_eq!(status(&r), 200, "{host}: {r}");
    }
    let r = get(port, &format!("rebind.example:{port}"), "").await;
    assert_eq!(status(&r), 403, "{r}");
    let r = get(
        port,
        &format!("127.0.0.1:{port}"),
        "Origin: https://evil.example\r\n",
    )
    .await;
    assert_eq!(status(&r), 403, "{r}");
    let r = get(
        port,
        &format!("127.0.0.1:{port}"),
        "Origin: http://localhost:3000\r\n",
    )
    .await;
    assert_eq!(status(&r), 200, "{r}");
    let report = graph.stop().await.expect("graph task");
    let llm = report.telemetry.component("llm").expect("stats");
    assert_eq!(llm.http_refused.get("forbidden_host"), Some(&1), "{llm:?}");
    assert_eq!(
        llm.http_refused.get("forbidden_origin"),
        Some(&1),
        "{llm:?}"
    );
}

/// [`get`], again while the connection is refused for the cap (a connection just closed
/// may still count): answered 503, or reset because the request was still unread when
/// the refused connection closed.
async fn get_past_the_cap(port: u16, host: &str) -> String {
    for _ in 0..200 {
        let r = get_or_reset(port, host).await;
        if !matches!(status(&r), 503 | 0) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{host}: still refused for the connection cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_hosts_and_the_connection_cap_are_options() {
    let replay = proxy_e2e::start_replay().await;
    let port = proxy_e2e::free_port();
    let extra = "allowed_hosts = [\"box.lan\"]\nmax_connections = 1\nheader_timeout_ms = 600000\n";
    let graph = start_proxy(port, &replay.url, extra).await;

    // With one connection allowed, the previous one may not be counted out yet: retry
    // while the answer is 503.
    let r = get_past_the_cap(port, &format!("box.lan:{port}")).await;
    assert_eq!(status(&r), 200, "an allowed host: {r}");
    let r = get_past_the_cap(port, &format!("other.lan:{port}")).await;
    assert_eq!(status(&r), 403, "{r}");
    // A client holding the one connection (it sends nothing: the header timeout is long)
    // leaves none for the next, which is told so at once.
    let held = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    // Sending nothing, so that the refused connection closes cleanly after its answer.
    let mut over = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), over.read_to_end(&mut answer))
        .await
        .expect("answered in time")
        .expect("read");
    let r = String::from_utf8_lossy(&answer);
    assert_eq!(status(&r), 503, "a connection over the cap: {r}");
    drop(held);
    let report = graph.stop().await.expect("graph task");
    let llm = report.telemetry.component("llm").expect("stats");
    assert_eq!(llm.http_refused.get("forbidden_host"), Some(&1), "{llm:?}");
    assert!(
        llm.http_refused.get("too_many_connections") >= Some(&1),
        "{llm:?}"
    );
}
