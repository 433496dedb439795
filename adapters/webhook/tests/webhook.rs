//! The webhook output against a local HTTP server that fails on purpose: 5xx and timeouts
//! are retried, 4xx are not, batches and signatures arrive as configured.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use patchbay_graph::telemetry::ComponentSnapshot;
use patchbay_graph::{ChannelSource, Registry, RunningGraph, SourceText, compile};
use patchbay_signal::{Signal, object};
use serde_json::Value;

/// What the server saw, and how it answers: request `i` (0-based) gets `plan[i]`, or 200
/// past the end of the plan.
#[derive(Default)]
struct Server {
    plan: Vec<Answer>,
    requests: Mutex<Vec<(HeaderMap, Bytes)>>,
}

#[derive(Clone, Copy)]
enum Answer {
    Status(u16),
    /// Answers 200 after this long (longer than the output's timeout).
    Stall(u64),
}

async fn hook(State(server): State<Arc<Server>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let i = {
        let mut requests = server.requests.lock().unwrap();
        requests.push((headers, body));
        requests.len() - 1
    };
    match server.plan.get(i).copied() {
        Some(Answer::Status(code)) => StatusCode::from_u16(code).unwrap(),
        Some(Answer::Stall(ms)) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            StatusCode::OK
        }
        None => StatusCode::OK,
    }
}

async fn serve(plan: Vec<Answer>) -> (String, Arc<Server>) {
    let server = Arc::new(Server {
        plan,
        ..Server::default()
    });
    let app = Router::new()
        .route("/hook", post(hook))
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), server)
}

/// Runs `feed → webhook` with the given options over `signals`; returns the webhook's
/// final counters.
async fn run(options: &str, signals: Vec<Signal>) -> ComponentSnapshot {
    let mut registry = Registry::new();
    registry.adapter(&patchbay_webhook::ADAPTER);
    let feed = ChannelSource::register(&mut registry, "feed", 64);
    let config = format!(
        "[sources.app]\ntype = \"feed\"\n\n[outputs.hook]\ntype = \"webhook\"\ninputs = [\"app\"]\nbackoff_initial_ms = 10\nbackoff_max_ms = 20\n{options}\n"
    );
    let graph = compile(&[SourceText::new("w.toml", config)], &registry).unwrap();
    drop(registry);
    let running = RunningGraph::spawn(graph);
    for s in signals {
        feed.send(s).await.unwrap();
    }
    drop(feed);
    let report = tokio::time::timeout(Duration::from_secs(30), running.wait())
        .await
        .expect("the graph ends")
        .unwrap();
    report
        .telemetry
        .snapshot()
        .into_iter()
        .find(|c| c.name == "hook")
        .unwrap()
}

fn signal(n: u64) -> Signal {
    Signal::new(
        "tool_result",
        "test:app",
        object! {"n" => n, "success" => false},
    )
}

fn hmac_hex(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    ring::hmac::sign(&key, body)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn server_errors_are_retried_and_a_batch_arrives_signed_once() {
    let (url, server) = serve(vec![Answer::Status(503), Answer::Status(500)]).await;
    let options = format!(
        "url = \"{url}\"\nbatch = {{ max = 3, max_wait_ms = 60000 }}\nsignature = {{ secret = \"s3cret\" }}\nheaders = {{ X-Team = \"ops\" }}"
    );
    let stats = run(&options, (0..3).map(signal).collect()).await;
    assert_eq!((stats.sent, stats.dropped, stats.bad_input), (3, 0, 0));
    let requests = server.requests.lock().unwrap();
    assert_eq!(requests.len(), 3, "two failures, then the delivery");
    for (headers, body) in requests.iter() {
        assert_eq!(body, &requests[0].1, "every retry sends the same body");
        assert_eq!(headers["x-team"], "ops");
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(
            headers["x-patchbay-signature"],
            format!("sha256={}", hmac_hex("s3cret", body)).as_str()
        );
    }
    let batch: Value = serde_json::from_slice(&requests[0].1).unwrap();
    let ns: Vec<u64> = batch
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["payload"]["n"].as_u64().unwrap())
        .collect();
    assert_eq!(ns, [0, 1, 2]);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let (url, server) = serve(vec![Answer::Status(400), Answer::Status(422)]).await;
    let stats = run(
        &format!("url = \"{url}\""),
        vec![signal(0), signal(1), signal(2)],
    )
    .await;
    assert_eq!((stats.sent, stats.dropped, stats.bad_input), (1, 0, 2));
    let requests = server.requests.lock().unwrap();
    assert_eq!(requests.len(), 3, "one request per signal, none repeated");
    let first: Value = serde_json::from_slice(&requests[0].1).unwrap();
    assert_eq!(
        first["payload"]["n"], 0,
        "without `batch`, one envelope per request"
    );
}

#[tokio::test]
async fn timeouts_are_retried_and_retries_run_out() {
    let (url, server) = serve(vec![Answer::Stall(2000)]).await;
    let stats = run(
        &format!("url = \"{url}\"\ntimeout_ms = 200"),
        vec![signal(0)],
    )
    .await;
    assert_eq!((stats.sent, stats.dropped), (1, 0));
    assert_eq!(server.requests.lock().unwrap().len(), 2);

    let (url, server) = serve(vec![Answer::Status(503); 10]).await;
    let stats = run(
        &format!("url = \"{url}\"\nmax_retries = 2"),
        vec![signal(0)],
    )
    .await;
    assert_eq!((stats.sent, stats.dropped), (0, 1));
    assert_eq!(
        server.requests.lock().unwrap().len(),
        3,
        "the first try and 2 retries"
    );
}

#[test]
fn options_are_checked_where_written() {
    let errors = |options: &str| -> Vec<String> {
        let mut registry = Registry::new();
        registry.adapter(&patchbay_webhook::ADAPTER);
        let _feed = ChannelSource::register(&mut registry, "feed", 1);
        let config = format!(
            "[sources.app]\ntype = \"feed\"\n[outputs.hook]\ntype = \"webhook\"\ninputs = [\"app\"]\n{options}\n"
        );
        match compile(&[SourceText::new("w.toml", config)], &registry) {
            Ok(_) => panic!("{options} should not compile"),
            Err(errors) => errors.iter().map(|e| e.to_string()).collect(),
        }
    };
    assert_eq!(
        errors("url = \"ftp://x\""),
        ["w.toml:6:7: hook: expected an http:// or https:// URL"]
    );
    let e = errors("url = \"http://x\"\nbatch = { max = 0 }");
    assert!(e[0].starts_with("w.toml:7:"), "{e:?}");
    let e = errors("url = \"http://x\"\nheaders = { \"a b\" = \"1\" }");
    assert!(
        e[0].starts_with("w.toml:7:") && e[0].contains("header name"),
        "{e:?}"
    );
    let e = errors("url = \"http://x\"\nsignature = { secret = \"\" }");
    assert!(
        e[0].starts_with("w.toml:7:") && e[0].contains("empty"),
        "{e:?}"
    );
    let e = errors("url = \"http://x\"\nretries = 3");
    assert!(
        e[0].starts_with("w.toml:7:1") && e[0].contains("max_retries"),
        "{e:?}"
    );
}
