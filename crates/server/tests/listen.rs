//! The sidecar's listener under hostile or careless clients, on real loopback sockets:
//! slowloris connections closed by the header timeout, idle keep-alive connections
//! closed (streams are not), the connection cap, `Host` and `Origin` on every endpoint,
//! WebSocket protocol violations counted, `/health` detail behind the token, and resume
//! across a restart by epoch. No timing is asserted: each wait is bounded by [`GUARD`]
//! only so that a hang fails the test.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures_util::SinkExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

/// Sends `request` as it is and reads the answer until the server closes.
async fn raw(addr: SocketAddr, request: &str) -> String {
    guard("a raw request", async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
}

/// `GET path` (HTTP/1.0, so the server closes after the answer) with a given `Host` and
/// extra header lines.
async fn get_as(addr: SocketAddr, path: &str, host: &str, extra: &str) -> String {
    raw(
        addr,
        &format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n{extra}\r\n"),
    )
    .await
}

fn status(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {response:?}"))
}

/// Reads until the server closes the connection (EOF or a reset); what was read.
async fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
    guard("the server closes the connection", async {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return out,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_connections_are_closed_by_the_header_timeout() {
    let server = start(
        "ui_slow",
        &["ui_slow.inbound"],
        "header_timeout_ms = 300\n",
        "",
    )
    .await;
    let addr = server.addr;
    // 50 clients, each sending its head one byte at a time and never finishing it.
    let clients: Vec<_> = (0..50)
        .map(|_| {
            tokio::spawn(async move {
                let mut stream = TcpStream::connect(addr).await.expect("connect");
                let head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
                let mut buf = [0u8; 64];
                let mut sent = 0usize;
                guard("a slowloris client is closed", async {
                    loop {
                        tokio::select! {
                            read = stream.read(&mut buf) => match read {
                                Ok(0) | Err(_) => return,
                                Ok(_) => {}
                            },
                            () = tokio::time::sleep(Duration::from_millis(50)) => {
                                let byte = head.get(sent).copied().unwrap_or(b'x');
                                sent += 1;
                                if stream.write_all(&[byte]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                })
                .await;
            })
        })
        .collect();
    for c in clients {
        c.await.expect("client task");
    }
    assert!(
        metric(
            addr,
            "patchbay_http_refused_total{component=\"ui_slow\",reason=\"header_timeout\"}"
        )
        .await
            >= 50
    );
    // A client that completes its head in time is served.
    assert_eq!(
        status(&get_as(addr, "/health", &addr.to_string(), "").await),
        200
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_close_but_streams_do_not() {
    let server = start(
        "ui_idle",
        &["ui_idle.inbound"],
        "idle_timeout_ms = 200\n",
        "",
    )
    .await;
    let addr = server.addr;
    // Streams opened first, so that they outlive the idle timeout before anything is sent.
    let mut ws_client = ws(&server.ws_url("")).await;
    let mut sse = Sse::connect(addr, "/events", &[]).await;

    // A keep-alive connection: one request answered, then nothing: the server closes it.
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let answered = String::from_utf8_lossy(&until_closed(&mut stream).await).into_owned();
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");

    // Quiet streams are not idle connections: a signal posted after the idle timeout
    // reaches both.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let r = post(addr, &json!({"type": "after.idle"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let frame = recv(&mut ws_client)
        .await
        .expect("the WebSocket is still open");
    assert_eq!(frame["type"], "after.idle");
    let event = sse.next().await.expect("the SSE stream is still open");
    assert_eq!(event.data["type"], "after.idle");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_refused_and_counted() {
    let server = start("ui_cap", &["ui_cap.inbound"], "max_connections = 3\n", "").await;
    let addr = server.addr;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(addr).await.expect("connect"));
    }
    // The server accepts in order: once a request on the third is answered, all three
    // hold their slots.
    held[2]
        .write_all(format!("GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut buf = [0u8; 16];
    guard("the third connection is served", held[2].read(&mut buf))
        .await
        .expect("read");
    // A request with a body is read and thrown away before the close, so the answer
    // arrives (a close with the request unread resets the connection, and the reset can
    // reach the client first).
    let body = "x".repeat(32 * 1024);
    for _ in 0..20 {
        let mut fourth = TcpStream::connect(addr)
            .await
            .expect("the TCP connect itself works");
        let _ = fourth
            .write_all(
                format!(
                    "POST /signal HTTP/1.1\r\nHost: {addr}\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            )
            .await;
        let answer = String::from_utf8_lossy(&until_closed(&mut fourth).await).into_owned();
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    }
    // Slots come back when connections close.
    drop(held);
    let refused = guard("a slot frees up", async {
        loop {
            let r = get_as(addr, "/metrics", &addr.to_string(), "").await;
            if r.split_whitespace().nth(1) == Some("200") {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        refused.contains(
            "patchbay_http_refused_total{component=\"ui_cap\",reason=\"too_many_connections\"}"
        ),
        "{refused}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_and_origin_are_checked_on_every_endpoint() {
    let server = start("ui_host", &["ui_host.inbound"], "", "").await;
    let addr = server.addr;
    let port = addr.port();
    let endpoints = [
        "/health",
        "/metrics",
        "/",
        "/events",
        "/status/stream",
        "/ws",
    ];
    // DNS rebinding: a name that resolved to 127.0.0.1 for a page on another site.
    for path in endpoints {
        let r = get_as(addr, path, &format!("rebind.example:{port}"), "").await;
        assert_eq!(status(&r), 403, "{path}: {r}");
    }
    let r = raw(
        addr,
        &format!(
            "POST /signal HTTP/1.0\r\nHost: rebind.example:{port}\r\nContent-Length: 13\r\n\r\n{{\"type\":\"x\"}}"
        ),
    )
    .await;
    assert_eq!(status(&r), 403, "{r}");
    // A page on another origin: refused on every endpoint, streams included.
    for path in endpoints {
        let r = get_as(
            addr,
            path,
            &addr.to_string(),
            "Origin: https://evil.example\r\n",
        )
        .await;
        assert_eq!(status(&r), 403, "{path}: {r}");
    }
    assert_eq!(
        refused_status(ws_connect(&server.ws_url(""), &[("Origin", "https://evil.example")]).await),
        403
    );
    // Loopback names with any port, and non-browser clients, are served.
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        "[::1]".to_owned(),
    ] {
        let r = get_as(addr, "/health", &host, "").await;
        assert_eq!(status(&r), 200, "{host}: {r}");
    }
    let r = get_as(
        addr,
        "/health",
        &addr.to_string(),
        "Origin: http://localhost:5173\r\n",
    )
    .await;
    assert_eq!(status(&r), 200, "{r}");
    let series = |reason: &str| {
        format!("patchbay_http_refused_total{{component=\"ui_host\",reason=\"{reason}\"}}")
    };
    assert_eq!(metric(addr, &series("forbidden_host")).await, 7);
    assert_eq!(metric(addr, &series("forbidden_origin")).await, 7);
    server.stop().await;

    // `allowed_hosts` adds names.
    let server = start(
        "ui_host2",
        &["ui_host2.inbound"],
        "allowed_hosts = [\"box.lan\"]\n",
        "",
    )
    .await;
    let r = get_as(server.addr, "/health", "box.lan:8080", "").await;
    assert_eq!(status(&r), 200, "{r}");
    let r = get_as(server.addr, "/health", "other.lan", "").await;
    assert_eq!(status(&r), 403, "{r}");
    server.stop().await;
}

/// Opens `/ws` by hand and returns the socket after the 101 (so that raw frames can be
/// written).
async fn raw_ws(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "GET /ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        guard("the upgrade answer", stream.read_exact(&mut byte))
            .await
            .expect("read");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_protocol_violations_are_counted() {
    let server = start("ui_viol", &["ui_viol.inbound"], "max_frame = 64\n", "").await;
    let addr = server.addr;
    let series = "patchbay_ws_protocol_errors_total{component=\"ui_viol\"}";
    assert_eq!(metric(addr, series).await, 0);

    // A client frame without a mask: the protocol forbids it; the server closes.
    let mut stream = raw_ws(addr).await;
    stream
        .write_all(&[0x81, 0x02, b'h', b'i'])
        .await
        .expect("write");
    until_closed(&mut stream).await;
    assert_eq!(metric(addr, series).await, 1);

    // A message over `max_frame`: an error frame, a close (1009), counted.
    let mut client = ws(&server.ws_url("")).await;
    client
        .send(Message::Text("x".repeat(200).into()))
        .await
        .expect("send");
    let error = recv(&mut client).await.expect("an error frame");
    assert_eq!(error["kind"], "error");
    assert!(recv(&mut client).await.is_none(), "the connection closes");
    assert_eq!(metric(addr, series).await, 2);

    // Binary that is not UTF-8: refused, counted, the connection stays.
    let mut client = ws(&server.ws_url("")).await;
    client
        .send(Message::Binary(vec![0xff, 0xfe].into()))
        .await
        .expect("send");
    let error = recv(&mut client).await.expect("an error frame");
    assert_eq!(error["kind"], "error");
    assert_eq!(metric(addr, series).await, 3);
    server.stop().await;
}

/// A client that goes away without a close handshake (a closed tab, a dropped network)
/// broke no rule: it is neither counted as a protocol violation nor as bad input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_without_a_close_is_not_a_violation() {
    let server = start("ui_gone", &["ui_gone.inbound"], "", "").await;
    let addr = server.addr;
    let clients = "patchbay_clients{component=\"ui_gone\"}";
    for _ in 0..3 {
        let client = ws(&server.ws_url("")).await;
        guard("the client is counted", async {
            while metric(addr, clients).await != 1 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        // Dropped: the TCP connection ends with no close frame.
        drop(client);
        guard("the client is gone", async {
            while metric(addr, clients).await != 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    }
    let violations = "patchbay_ws_protocol_errors_total{component=\"ui_gone\"}";
    assert_eq!(metric(addr, violations).await, 0);
    let bad_input = "patchbay_bad_input_total{component=\"ui_gone.inbound\",type=\"inbound\"}";
    assert_eq!(metric(addr, bad_input).await, 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_detail_needs_the_token() {
    let server = start(
        "ui_hdetail",
        &["ui_hdetail.inbound"],
        "token = \"s3cret\"\n",
        "",
    )
    .await;
    let addr = server.addr;
    let r = http(addr, "GET", "/health", &[], b"").await;
    assert_eq!(r.status, 200);
    let bare = r.json();
    assert_eq!(
        bare.as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["status".to_owned(), "serving".to_owned()]),
        "only the overall status and whether it serves: {bare}"
    );
    let r = http(
        addr,
        "GET",
        "/health",
        &[("Authorization", "Bearer s3cret")],
        b"",
    )
    .await;
    let detail = r.json();
    assert_eq!(detail["status"], "ok");
    assert!(detail["components"].is_array(), "{detail}");
    assert!(detail["epoch"].is_string(), "{detail}");
    let r = http(addr, "GET", "/health?token=s3cret", &[], b"").await;
    assert!(r.json()["components"].is_array());
    for path in ["/", "/status/stream"] {
        assert_eq!(
            http(addr, "GET", path, &[], b"").await.status,
            401,
            "{path}"
        );
    }
    server.stop().await;
}

/// What a tap prints, shared with the test.
#[derive(Clone, Default)]
struct Printed(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Printed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Printed {
    fn frames(&self) -> Vec<Value> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(|l| serde_json::from_str(l).expect("NDJSON"))
            .collect()
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_across_a_restart_replays_the_new_ring() {
    let listen = format!("127.0.0.1:{}", free_port());
    let first = start_on("ui_epoch", &["ui_epoch.inbound"], &listen, "", "", |_| {}).await;
    let addr = first.addr;
    let printed = Printed::default();
    let mut out = printed.clone();
    let url = first.ws_url("");
    let tap = tokio::spawn(async move {
        let options = patchbay_server::TapOptions {
            follow: true,
            ..patchbay_server::TapOptions::new(url)
        };
        patchbay_server::tap(&options, &mut out, |_| {}).await
    });
    guard("the tap connects", async {
        while first.component("ui_epoch").await["gauges"]["clients"] != 1.0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    for i in 0..5 {
        post(addr, &json!({"type": "first.run", "payload": {"i": i}})).await;
    }
    guard("the tap prints the first run", async {
        while printed.frames().len() < 5 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let old_epoch = first.health().await["epoch"]
        .as_str()
        .expect("epoch")
        .to_owned();
    first.stop().await;

    // The daemon restarts: its seqs start again from 1. Three signals before anyone
    // resumes (the new run publishes them as it starts).
    let seed = "[sources.seed]\ntype = \"count\"\nn = 3\nkinds = [\"second.run\"]\n";
    let second = start_on(
        "ui_epoch",
        &["ui_epoch.inbound", "seed"],
        &listen,
        "",
        seed,
        |_| {},
    )
    .await;
    // A client resuming with the seq and epoch of the first run gets the whole new ring.
    let mut c = ws(&second.ws_url(&format!("since=5&epoch={old_epoch}"))).await;
    let seqs: Vec<u64> = [
        recv(&mut c).await.expect("frame"),
        recv(&mut c).await.expect("frame"),
        recv(&mut c).await.expect("frame"),
    ]
    .iter()
    .map(seq_of)
    .collect();
    assert_eq!(seqs, [1, 2, 3]);
    // So does one that names no epoch but a seq beyond the last one (a browser's
    // `Last-Event-ID`).
    let mut sse = Sse::connect(addr, "/events", &[("Last-Event-ID", "5")]).await;
    assert_eq!(sse.next().await.expect("event").id, Some(1));
    assert!(
        sse.head.to_ascii_lowercase().contains("x-patchbay-epoch"),
        "{}",
        sse.head
    );
    // A client of this run resumes exactly as before.
    let new_epoch = second.health().await["epoch"]
        .as_str()
        .expect("epoch")
        .to_owned();
    assert_ne!(new_epoch, old_epoch);
    let mut c = ws(&second.ws_url(&format!("since=2&epoch={new_epoch}"))).await;
    assert_eq!(seq_of(&recv(&mut c).await.expect("frame")), 3);

    // And the tap, reconnecting by itself, printed the second run whole.
    guard("the tap prints the second run", async {
        while printed.frames().len() < 8 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let kinds: Vec<String> = printed
        .frames()
        .iter()
        .map(|f| f["type"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "second.run").count(),
        3,
        "{kinds:?}"
    );
    tap.abort();
    second.stop().await;
}
