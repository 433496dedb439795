//! Ingest into a full graph: what is acknowledged was taken, what was not is refused and
//! counted (correctness only: the timeout is short, and no duration is asserted).

mod common;

use common::*;
use futures_util::SinkExt;
use patchbay_graph::ChannelOutput;
use patchbay_signal::SharedSignal;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// A sidecar `name` whose inbound side also feeds `held`, a lossless output delivering to
/// a channel the test reads only when it chooses: until then the graph stays full.
async fn stalled(name: &str) -> (Server, mpsc::Receiver<SharedSignal>) {
    let inbound = format!("{name}.inbound");
    let extra = format!(
        "[runtime]\nqueue = 1\n\n[outputs.held]\ntype = \"held\"\ninputs = [\"{inbound}\"]\nqueue = 1\n"
    );
    let mut held = None;
    let server = start_with(
        name,
        &[&inbound],
        "ingest_timeout_ms = 100\n",
        &extra,
        |registry| held = Some(ChannelOutput::register(registry, "held", 1)),
    )
    .await;
    (server, held.expect("registered"))
}

async fn next_held(held: &mut mpsc::Receiver<SharedSignal>) -> SharedSignal {
    guard("a held signal", held.recv())
        .await
        .expect("the graph runs")
}

/// The graph takes a signal again once `held` is read, and nothing refused comes out.
async fn only_accepted_then(
    server: &Server,
    held: &mut mpsc::Receiver<SharedSignal>,
    accepted: &[String],
) {
    for id in accepted {
        assert_eq!(&next_held(held).await.id, id);
    }
    let after = post(server.addr, &json!({"type": "after", "id": "after"})).await;
    assert_eq!(after.status, 200, "{}", after.body);
    assert_eq!(
        next_held(held).await.id,
        "after",
        "a refused signal got through"
    );
}

async fn refused_metric(server: &Server) -> u64 {
    let m = http(server.addr, "GET", "/metrics", &[], b"").await;
    let prefix = format!(
        "patchbay_refused_total{{component=\"{}.inbound\",type=\"inbound\"}} ",
        server.name
    );
    assert!(
        m.body.contains("# HELP patchbay_refused_total "),
        "{}",
        m.body
    );
    m.body
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in\n{}", m.body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_into_a_stalled_graph_is_refused_after_the_prefix_it_took() {
    let (server, mut held) = stalled("ui_full").await;
    let ids: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
    let body: Vec<Value> = ids
        .iter()
        .map(|id| json!({"type": "t", "id": id}))
        .collect();
    let r = post(server.addr, &Value::Array(body)).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(
        r.head.to_ascii_lowercase().contains("\r\nretry-after: 1"),
        "{}",
        r.head
    );
    let answer = r.json();
    assert_eq!(answer["ok"], false);
    let accepted = answer["accepted"].as_u64().expect("accepted") as usize;
    let refused = answer["refused"].as_u64().expect("refused") as usize;
    assert_eq!(accepted + refused, ids.len(), "{answer}");
    assert!(accepted >= 1 && refused >= 1, "{answer}");
    assert_eq!(refused_metric(&server).await, refused as u64);
    only_accepted_then(&server, &mut held, &ids[..accepted]).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_ingest_names_the_refused_ids() {
    let (server, mut held) = stalled("ui_full_ws").await;
    let mut client = ws(&server.ws_url("types=nothing")).await;
    let ids: Vec<String> = (0..12).map(|i| format!("w{i}")).collect();
    for id in &ids {
        send(&mut client, &json!({"type": "t", "id": id}).to_string()).await;
    }
    // The session answers frames in order: the reply to this one comes after every refusal.
    client
        .send(Message::Text("{oops".into()))
        .await
        .expect("send");
    let mut refused = Vec::new();
    loop {
        let frame = recv(&mut client).await.expect("an error frame");
        assert_eq!(frame["kind"], "error", "{frame}");
        match frame.get("refused") {
            Some(Value::Array(named)) => {
                refused.extend(named.iter().map(|v| v.as_str().expect("an id").to_owned()))
            }
            _ => {
                assert!(
                    frame["message"].as_str().unwrap().contains("not JSON"),
                    "{frame}"
                );
                break;
            }
        }
    }
    // What was refused is a suffix: every signal waits its turn.
    let accepted = ids.len() - refused.len();
    assert!(accepted >= 1 && !refused.is_empty(), "{refused:?}");
    assert_eq!(refused, ids[accepted..]);
    assert_eq!(refused_metric(&server).await, refused.len() as u64);
    only_accepted_then(&server, &mut held, &ids[..accepted]).await;
    server.stop().await;
}
