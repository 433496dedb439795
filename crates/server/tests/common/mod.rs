//! A real graph with a sidecar on 127.0.0.1 port 0, and tiny raw HTTP / WebSocket clients.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use patchbay_graph::runtime::RunReport;
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, Options, Registry, RunningGraph, Source, SourceContext,
    SourceText, compile,
};
use patchbay_signal::{Signal, object};
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Failure guard for anything awaited in a test (never a timing assertion).
pub const GUARD: Duration = Duration::from_secs(30);

/// Awaits `f`, failing the test if it takes longer than [`GUARD`].
pub async fn guard<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(GUARD, f).await {
        Ok(v) => v,
        Err(_) => panic!("timed out: {what}"),
    }
}

/// A test source: emits `n` signals (types cycling through `kinds`, payload `{i, pad}`),
/// then ends.
struct Count {
    n: u64,
    kinds: Vec<String>,
    pad: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountOptions {
    n: u64,
    #[serde(default)]
    kinds: Vec<String>,
    #[serde(default)]
    pad: usize,
}

fn build_count(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let o: CountOptions = options.parse()?;
    let kinds = if o.kinds.is_empty() {
        vec!["test.tick".to_owned()]
    } else {
        o.kinds
    };
    Ok(Box::new(Count {
        n: o.n,
        kinds,
        pad: o.pad,
    }))
}

impl Source for Count {
    fn is_finite(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let pad = "x".repeat(self.pad);
            for i in 0..self.n {
                let kind = &self.kinds[(i as usize) % self.kinds.len()];
                let signal = Signal::new(
                    kind.clone(),
                    "test:count",
                    object! {"i" => i, "pad" => pad.clone()},
                );
                if cx.emit(signal).await.is_err() {
                    break;
                }
            }
            Ok(())
        })
    }
}

/// A running graph whose sidecar output is `name` (dropped, it stops).
pub struct Server {
    pub name: String,
    pub addr: SocketAddr,
    graph: RunningGraph,
}

/// Starts a graph: output `name` (a sidecar on 127.0.0.1:0 with `options`) reading
/// `inputs`, plus `extra` TOML (sources).
pub async fn start(name: &str, inputs: &[&str], options: &str, extra: &str) -> Server {
    start_with(name, inputs, options, extra, |_| {}).await
}

/// [`start`], with more types registered by `register` (dropped with the registry once
/// the config is compiled).
pub async fn start_with(
    name: &str,
    inputs: &[&str],
    options: &str,
    extra: &str,
    register: impl FnOnce(&mut Registry),
) -> Server {
    start_on(name, inputs, "127.0.0.1:0", options, extra, register).await
}

/// [`start_with`] listening on `listen` (a fixed port, to start a sidecar again where
/// another ran).
pub async fn start_on(
    name: &str,
    inputs: &[&str],
    listen: &str,
    options: &str,
    extra: &str,
    register: impl FnOnce(&mut Registry),
) -> Server {
    let inputs: Vec<String> = inputs.iter().map(|i| format!("\"{i}\"")).collect();
    let text = format!(
        "{extra}\n[outputs.{name}]\ntype = \"sidecar\"\ninputs = [{}]\nlisten = \"{listen}\"\n{options}\n",
        inputs.join(", ")
    );
    let mut registry = Registry::new();
    registry.adapter(&patchbay_server::ADAPTER);
    registry.source("count", build_count);
    register(&mut registry);
    let graph = match compile(&[SourceText::new("test.toml", text)], &registry) {
        Ok(g) => g,
        Err(errors) => panic!("config: {errors:?}"),
    };
    drop(registry);
    let graph = RunningGraph::spawn(graph);
    let addr = guard("the sidecar binds", patchbay_server::wait_bound(name)).await;
    Server {
        name: name.to_owned(),
        addr,
        graph,
    }
}

impl Server {
    /// `ws://ADDR/ws?QUERY`.
    pub fn ws_url(&self, query: &str) -> String {
        if query.is_empty() {
            format!("ws://{}/ws", self.addr)
        } else {
            format!("ws://{}/ws?{query}", self.addr)
        }
    }

    /// Stops the graph and waits for it (the sidecar closes its clients).
    pub async fn stop(self) -> RunReport {
        guard("the graph stops", self.graph.stop())
            .await
            .expect("graph task")
    }

    /// GET /health as JSON.
    pub async fn health(&self) -> Value {
        let r = http(self.addr, "GET", "/health", &[], b"").await;
        assert_eq!(r.status, 200, "{}", r.body);
        serde_json::from_str(&r.body).expect("health JSON")
    }

    /// A component's snapshot from /health.
    pub async fn component(&self, name: &str) -> Value {
        let h = self.health().await;
        h["components"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == name).cloned())
            .unwrap_or_else(|| panic!("no component {name} in {h}"))
    }
}

/// A raw HTTP response.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl HttpResponse {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One HTTP/1.0 request (so the body ends with the connection: no chunked decoding).
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    guard("an HTTP request", async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let mut req = format!(
            "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        stream.write_all(req.as_bytes()).await.expect("write");
        stream.write_all(body).await.expect("write body");
        let mut raw = Vec::new();
        // The server may close while a large body is still unread: keep what was answered.
        let _ = stream.read_to_end(&mut raw).await;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {head:?}"));
        HttpResponse {
            status,
            head: head.to_owned(),
            body: body.to_owned(),
        }
    })
    .await
}

/// The value of a metric line (`name{labels}`) in `/metrics`, 0 when absent.
pub async fn metric(addr: SocketAddr, series: &str) -> u64 {
    let r = http(addr, "GET", "/metrics", &[], b"").await;
    assert_eq!(r.status, 200, "{}", r.head);
    r.body
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// POSTs a JSON body to /signal.
pub async fn post(addr: SocketAddr, body: &Value) -> HttpResponse {
    http(
        addr,
        "POST",
        "/signal",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
    .await
}

/// An SSE connection read event by event.
pub struct Sse {
    reader: BufReader<TcpStream>,
    pub head: String,
}

/// One SSE event: its `id:` (if any) and its `data:`.
#[derive(Debug)]
pub struct SseEvent {
    pub id: Option<u64>,
    pub data: Value,
}

impl Sse {
    pub async fn connect(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Sse {
        guard("SSE connect", async {
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            let mut req =
                format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
            for (k, v) in headers {
                req.push_str(&format!("{k}: {v}\r\n"));
            }
            req.push_str("\r\n");
            stream.write_all(req.as_bytes()).await.expect("write");
            let mut reader = BufReader::new(stream);
            let mut head = String::new();
            loop {
                let mut line = String::new();
                let n = reader.read_line(&mut line).await.expect("read head");
                assert!(n > 0, "connection closed in the head: {head}");
                if line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            Sse { reader, head }
        })
        .await
    }

    /// The next event (comments skipped); `None` at the end of the stream.
    pub async fn next(&mut self) -> Option<SseEvent> {
        guard("an SSE event", async {
            let mut id = None;
            let mut data: Option<String> = None;
            loop {
                let mut line = String::new();
                if self.reader.read_line(&mut line).await.expect("read") == 0 {
                    return None;
                }
                let line = line.trim_end_matches(['\r', '\n']);
                if line.is_empty() {
                    if let Some(d) = data.take() {
                        return Some(SseEvent {
                            id,
                            data: serde_json::from_str(&d).expect("data is JSON"),
                        });
                    }
                    continue;
                }
                if let Some(v) = line.strip_prefix("id: ") {
                    id = v.parse().ok();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = Some(v.to_owned());
                }
            }
        })
        .await
    }
}

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Opens a WebSocket with extra request headers.
pub async fn ws_connect(url: &str, headers: &[(&str, &str)]) -> Result<Ws, WsError> {
    let mut request = url.into_client_request()?;
    for (k, v) in headers {
        let name = tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes())
            .expect("header name");
        request
            .headers_mut()
            .insert(name, HeaderValue::from_str(v).expect("header value"));
    }
    guard(
        "WebSocket connect",
        tokio_tungstenite::connect_async(request),
    )
    .await
    .map(|(ws, _)| ws)
}

/// Opens a WebSocket or fails the test.
pub async fn ws(url: &str) -> Ws {
    ws_connect(url, &[]).await.expect("WebSocket connects")
}

/// The HTTP status a refused WebSocket handshake got.
pub fn refused_status(result: Result<Ws, WsError>) -> u16 {
    match result {
        Err(WsError::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("expected an HTTP refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, the WebSocket connected"),
    }
}

/// The next text frame as JSON (`None` when the connection closed).
pub async fn recv(ws: &mut Ws) -> Option<Value> {
    guard("a WebSocket frame", async {
        loop {
            match ws.next().await? {
                Ok(Message::Text(t)) => {
                    return Some(serde_json::from_str(t.as_str()).expect("frame is JSON"));
                }
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            }
        }
    })
    .await
}

/// Sends a text frame.
pub async fn send(ws: &mut Ws, text: &str) {
    ws.send(Message::Text(text.into())).await.expect("send");
}

/// The seq of a frame in either format.
pub fn seq_of(frame: &Value) -> u64 {
    frame["metadata"]["seq"]
        .as_u64()
        .or_else(|| frame["seq"].as_u64())
        .unwrap_or_else(|| panic!("no seq in {frame}"))
}
