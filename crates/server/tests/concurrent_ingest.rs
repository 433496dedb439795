//! Many producers at once into a lossless sidecar: POSTed arrays, POSTed single signals
//! and WebSocket ingest, several of each, while the graph is first held full (so that some
//! ingest is refused) and then drained. Whatever was acknowledged arrives exactly once, in
//! `seq` order, each producer's signals in the order it sent them; whatever was not was
//! answered as refused. Correctness only: no duration is asserted.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use common::*;
use futures_util::SinkExt;
use patchbay_graph::ChannelOutput;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::Message;

/// What one producer sent and what it was told was taken.
#[derive(Debug)]
struct Sent {
    producer: String,
    sent: Vec<String>,
    accepted: Vec<String>,
}

impl Sent {
    fn new(producer: &str) -> Sent {
        Sent {
            producer: producer.to_owned(),
            sent: Vec::new(),
            accepted: Vec::new(),
        }
    }
}

fn signal(producer: &str, n: usize) -> (String, Value) {
    let id = format!("{producer}-{n}");
    let body = json!({"type": "t", "id": id, "payload": {"by": producer, "n": n}});
    (id, body)
}

/// POSTs `requests` bodies of `size` signals, one request at a time: arrays, or single
/// signals when `size` is 0. A 503 says how many of the request were taken; the rest is
/// refused, and not sent again.
async fn poster(
    addr: SocketAddr,
    producer: String,
    requests: usize,
    size: usize,
    refusal: Arc<Notify>,
) -> Sent {
    let mut out = Sent::new(&producer);
    for _ in 0..requests {
        let first = out.sent.len() + 1;
        let (ids, bodies): (Vec<String>, Vec<Value>) = (first..first + size.max(1))
            .map(|n| signal(&producer, n))
            .unzip();
        let body = if size == 0 {
            bodies.into_iter().next().expect("one signal")
        } else {
            Value::Array(bodies)
        };
        let r = post(addr, &body).await;
        let taken = match r.status {
            200 => {
                assert_eq!(r.json()["ok"], true, "{}", r.body);
                ids.len()
            }
            503 => {
                let answer = r.json();
                assert_eq!(answer["ok"], false, "{answer}");
                let accepted = answer["accepted"].as_u64().expect("accepted") as usize;
                let refused = answer["refused"].as_u64().expect("refused") as usize;
                assert_eq!(accepted + refused, ids.len(), "{answer}");
                refusal.notify_one();
                accepted
            }
            other => panic!("{producer}: status {other}: {}", r.body),
        };
        out.accepted.extend(ids[..taken].iter().cloned());
        out.sent.extend(ids);
    }
    out
}

/// Sends `count` signals over one WebSocket in bursts of `burst` frames (each burst written
/// at once), then a frame that is not JSON: the session answers frames in order, so once
/// its error comes back, every refusal (an error frame naming the refused ids) has too.
async fn ws_sender(url: String, producer: String, count: usize, burst: usize) -> Sent {
    let mut out = Sent::new(&producer);
    let mut socket = ws(&url).await;
    for n in 1..=count {
        let (id, body) = signal(&producer, n);
        socket
            .feed(Message::Text(body.to_string().into()))
            .await
            .expect("feed");
        out.sent.push(id);
        if n % burst == 0 {
            socket.flush().await.expect("flush");
        }
    }
    socket
        .send(Message::Text("{oops".into()))
        .await
        .expect("send");
    let mut refused = HashSet::new();
    loop {
        let frame = recv(&mut socket).await.expect("an error frame");
        assert_eq!(frame["kind"], "error", "{frame}");
        match frame.get("refused") {
            Some(Value::Array(named)) => {
                for id in named {
                    let id = id.as_str().expect("an id").to_owned();
                    assert!(out.sent.contains(&id), "{producer}: refused {id}, not sent");
                    assert!(refused.insert(id), "{producer}: refused twice: {frame}");
                }
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
    out.accepted = out
        .sent
        .iter()
        .filter(|id| !refused.contains(*id))
        .cloned()
        .collect();
    out
}

async fn refused_total(server: &Server) -> u64 {
    let series = format!(
        "patchbay_refused_total{{component=\"{}.inbound\",type=\"inbound\"}}",
        server.name
    );
    metric(server.addr, &series).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_producers_get_exactly_once_in_order_or_are_told_they_were_refused() {
    const NAME: &str = "ui_many";
    let inbound = format!("{NAME}.inbound");
    // `held` takes the same signals, and the test reads it only once some ingest has been
    // refused: until then the graph stays full.
    let extra = format!(
        "[runtime]\nqueue = 4\n\n[outputs.held]\ntype = \"held\"\ninputs = [\"{inbound}\"]\nqueue = 4\n"
    );
    let mut held = None;
    let server = start_with(
        NAME,
        &[&inbound],
        "when_full = \"block\"\nclient_queue = 65536\ningest_timeout_ms = 50\n",
        &extra,
        |registry| held = Some(ChannelOutput::register(registry, "held", 4)),
    )
    .await;
    let mut held = held.expect("registered");

    // The lossless subscriber, connected before anything is sent: it reads every frame up
    // to the end marker.
    let mut subscriber = ws(&server.ws_url("")).await;
    let reading = tokio::spawn(async move {
        let mut frames = Vec::new();
        loop {
            let frame = recv(&mut subscriber).await.expect("every frame");
            let id = frame["id"].as_str().expect("an id").to_owned();
            frames.push((seq_of(&frame), id.clone()));
            if id == "end" {
                return frames;
            }
        }
    });

    let refusal = Arc::new(Notify::new());
    let mut producers = Vec::new();
    for (i, (requests, size)) in [(12, 10), (8, 25), (60, 0), (60, 0)]
        .into_iter()
        .enumerate()
    {
        producers.push(tokio::spawn(poster(
            server.addr,
            format!("post{i}"),
            requests,
            size,
            Arc::clone(&refusal),
        )));
    }
    for i in 0..3 {
        producers.push(tokio::spawn(ws_sender(
            server.ws_url("types=nothing"),
            format!("ws{i}"),
            150,
            25,
        )));
    }

    // The graph is released at the first refusal (or once every producer is done).
    let all_done = futures_util::future::join_all(producers);
    tokio::pin!(all_done);
    let early = tokio::select! {
        _ = refusal.notified() => None,
        done = &mut all_done => Some(done),
    };
    let draining = tokio::spawn(async move {
        let mut ids = Vec::new();
        loop {
            let signal = guard("a held signal", held.recv())
                .await
                .expect("the graph runs");
            ids.push(signal.id.clone());
            if signal.id == "end" {
                return ids;
            }
        }
    });
    let sent: Vec<Sent> = match early {
        Some(done) => done,
        None => all_done.await,
    }
    .into_iter()
    .map(|r| r.expect("a producer"))
    .collect();
    let mut refused_end = 0;
    loop {
        let r = post(server.addr, &json!({"type": "t", "id": "end"})).await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 503, "{}", r.body);
        refused_end += 1;
    }
    let frames = guard("the subscriber reads to the end", reading)
        .await
        .expect("the subscriber");
    let held_ids = guard("the held output reads to the end", draining)
        .await
        .expect("the drain");

    // In `seq` order, from 1, with no hole, each once.
    for (n, (seq, _)) in frames.iter().enumerate() {
        assert_eq!(*seq, n as u64 + 1, "frames in seq order without a hole");
    }
    let delivered: Vec<&String> = frames.iter().map(|(_, id)| id).collect();
    let unique: HashSet<&String> = delivered.iter().copied().collect();
    assert_eq!(unique.len(), delivered.len(), "a frame came twice");
    // The other output of the graph saw the same signals in the same order.
    assert_eq!(
        held_ids.iter().collect::<Vec<_>>(),
        delivered,
        "both outputs in one order"
    );

    // Exactly what was acknowledged, each producer's in its own order.
    let mut by_producer: HashMap<&str, Vec<&String>> = HashMap::new();
    for id in &delivered[..delivered.len() - 1] {
        let producer = id.rsplit_once('-').expect("producer-n").0;
        by_producer.entry(producer).or_default().push(id);
    }
    let mut refused = 0;
    for s in &sent {
        let got = by_producer.remove(s.producer.as_str()).unwrap_or_default();
        assert_eq!(
            got,
            s.accepted.iter().collect::<Vec<_>>(),
            "{}: what was acknowledged, once and in order",
            s.producer
        );
        refused += s.sent.len() - s.accepted.len();
    }
    assert!(by_producer.is_empty(), "unknown producers: {by_producer:?}");
    // The graph holds a few signals: some ingest had to be refused, and each refusal was
    // answered (and counted).
    assert!(refused > 0, "nothing refused: the graph was never full");
    assert_eq!(refused_total(&server).await, refused as u64 + refused_end);
    server.stop().await;
}
