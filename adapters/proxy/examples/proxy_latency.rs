//! The latency the tap proxy adds per streamed chunk.
//!
//! A local upstream streams `CHUNKS` OpenAI chunks, one every `INTERVAL_MS`, each carrying
//! the instant it was written. A client reads the stream directly, then through the proxy
//! (which decodes every chunk and hands the signals to a drained channel, as in a graph),
//! and records for each chunk the time from its write to its arrival. Reported: p50, p99
//! and max of each path, and the added latency (proxied − direct) at p50 and p99.
//!
//! Run: `cargo run --release -p patchbay-proxy --example proxy_latency -- [CHUNKS] [INTERVAL_MS]`
//! (defaults 2000 and 2).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::Response;
use axum::routing::post;
use futures_util::StreamExt;
use patchbay_graph::ComponentStats;
use patchbay_graph::telemetry::Role;
use patchbay_proxy::{Api, Emitter, ProxyState, http_client, serve};

/// The process's time origin: chunks carry nanoseconds since it.
static EPOCH: OnceLock<Instant> = OnceLock::new();

fn since_epoch() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

async fn upstream(chunks: usize, interval: Duration) -> String {
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move || async move {
            let stream = futures_util::stream::unfold(0usize, move |i| async move {
                if i > chunks {
                    return None;
                }
                tokio::time::sleep(interval).await;
                let text = if i == chunks {
                    "data: [DONE]\n\n".to_owned()
                } else {
                    format!(
                        "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"model\":\"bench\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"token {i} \"}},\"finish_reason\":null}}],\"sent_ns\":{}}}\n\n",
                        since_epoch()
                    )
                };
                Some((Ok::<_, std::io::Error>(Bytes::from(text)), i + 1))
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .expect("response")
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

async fn proxy(upstream: &str) -> String {
    let stats = Arc::new(ComponentStats::new("bench", "openai", Role::Source));
    let (emitter, mut rx) = Emitter::channel(stats.clone());
    // The graph side: consumes every decoded signal.
    tokio::spawn(async move {
        let mut n = 0u64;
        while rx.recv().await.is_some() {
            n += 1;
        }
        n
    });
    let state = Arc::new(ProxyState {
        api: Api::OpenAi,
        client: http_client().expect("client"),
        upstream: upstream.to_owned(),
        source: "openai:bench".into(),
        timeout: Duration::from_secs(30),
        emitter,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve(listener, state));
    format!("http://{addr}")
}

/// Streams one completion from `base` and returns each chunk's write→arrival latency (µs).
async fn measure(client: &reqwest::Client, base: &str) -> Vec<f64> {
    let response = client
        .post(format!("{base}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(r#"{"model":"bench","stream":true,"messages":[{"role":"user","content":"go"}]}"#)
        .send()
        .await
        .expect("answer");
    let mut body = response.bytes_stream();
    let mut buffer = Vec::<u8>::new();
    let mut latencies = Vec::new();
    while let Some(chunk) = body.next().await {
        let now = since_epoch();
        buffer.extend_from_slice(&chunk.expect("chunk"));
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buffer.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&event);
            if let Some(at) = text.find("\"sent_ns\":") {
                let digits: String = text[at + 10..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                if let Ok(sent) = digits.parse::<u64>() {
                    latencies.push(now.saturating_sub(sent) as f64 / 1000.0);
                }
            }
        }
    }
    latencies
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn summary(name: &str, mut latencies: Vec<f64>) -> (f64, f64) {
    latencies.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&latencies, 50.0), percentile(&latencies, 99.0));
    println!(
        "{name:>8}: {} chunks, p50 {p50:.1} µs, p99 {p99:.1} µs, max {:.1} µs",
        latencies.len(),
        latencies.last().copied().unwrap_or(f64::NAN)
    );
    (p50, p99)
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let chunks: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let interval_ms: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    since_epoch();
    let upstream = upstream(chunks, Duration::from_millis(interval_ms)).await;
    let proxy = proxy(&upstream).await;
    let client = reqwest::Client::new();
    // Warm up both paths (connections, allocations).
    let _ = measure(&client, &upstream).await;
    let _ = measure(&client, &proxy).await;
    println!("{chunks} chunks, one every {interval_ms} ms, on loopback");
    let (d50, d99) = summary("direct", measure(&client, &upstream).await);
    let (p50, p99) = summary("proxied", measure(&client, &proxy).await);
    println!("   added: p50 {:.1} µs, p99 {:.1} µs", p50 - d50, p99 - d99);
}
