//! A producer connection that sends in bursts goes hot (its reads bring many messages at
//! once, and it goes on on a thread of its own) and back, again and again, while a
//! subscriber of the lossless sidecar takes everything: nothing is lost or reordered
//! across the moves, single frames between the bursts arrive too, `/metrics` counts the
//! moves, and the graph stops while the connection is hot. A sidecar with many clients
//! keeps its connections where they are. Its own test binary, its tests taking turns: at
//! most one connection of a process is hot at a time, and no other test may hold the place.
//! Correctness only: no duration is asserted.

mod common;

use common::*;
use futures_util::SinkExt;
use tokio_tungstenite::tungstenite::Message;

/// Held by each test for its whole run (see above).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Frames written in one burst: the sidecar's reads bring hundreds of messages each.
const BURST: usize = 3_000;

fn frame(n: usize) -> String {
    format!(r#"{{"type":"text_delta","id":"s{n}","payload":{{"text":"token {n}"}}}}"#)
}

/// A lossless sidecar `name` whose inbound side feeds it.
async fn lossless(name: &str) -> Server {
    let inbound = format!("{name}.inbound");
    start(
        name,
        &[&inbound],
        "when_full = \"block\"\nclient_queue = 65536\n",
        "",
    )
    .await
}

/// Writes frames `from..from + BURST` at once; returns the number of the last.
async fn burst(producer: &mut Ws, from: usize) -> usize {
    let last = from + BURST - 1;
    for n in from..=last {
        producer
            .feed(Message::Text(frame(n).into()))
            .await
            .expect("feed");
    }
    producer.flush().await.expect("flush");
    last
}

async fn hot_total(server: &Server) -> u64 {
    let series = format!("patchbay_ws_hot_total{{component=\"{}\"}}", server.name);
    metric(server.addr, &series).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_hot_and_back_again_loses_and_reorders_nothing() {
    const ROUNDS: usize = 4;
    let _turn = ONE_AT_A_TIME.lock().await;
    let server = lossless("ui_hot").await;
    assert_eq!(hot_total(&server).await, 0);

    let mut subscriber = ws(&server.ws_url("")).await;
    let mut producer = ws(&server.ws_url("receive=false")).await;
    let mut sent = 0;
    let mut received = 0;
    let expect = |frame: serde_json::Value, received: &mut usize| {
        *received += 1;
        assert_eq!(seq_of(&frame), *received as u64, "{frame}");
        assert_eq!(frame["id"], format!("s{received}"), "in the order sent");
    };
    for _ in 0..ROUNDS {
        sent = burst(&mut producer, sent + 1).await;
        while received < sent {
            let frame = recv(&mut subscriber).await.expect("every frame");
            expect(frame, &mut received);
        }
        // Then single frames, each waited for: small reads, which cool the connection.
        for _ in 0..6 {
            sent += 1;
            send(&mut producer, &frame(sent)).await;
            let frame = recv(&mut subscriber).await.expect("every frame");
            expect(frame, &mut received);
        }
    }
    let moves = hot_total(&server).await;
    assert!(moves >= 1, "the connection never went hot");

    // A last burst, and the graph stops while the connection may still be hot: the stop
    // completes (the subscriber reading on), and the subscriber gets a prefix of what
    // was sent, in order, then the close.
    sent = burst(&mut producer, sent + 1).await;
    let first = recv(&mut subscriber).await.expect("the burst begins");
    expect(first, &mut received);
    let reading = tokio::spawn(async move {
        while let Some(frame) = recv(&mut subscriber).await {
            expect(frame, &mut received);
        }
        received
    });
    server.stop().await;
    let received = guard("the subscriber reads to the close", reading)
        .await
        .expect("the subscriber");
    assert!(received <= sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_stays_on_the_workers_when_its_sidecar_has_many_clients() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let server = lossless("ui_many_clients").await;
    // Five clients taking frames: writing to them is most of the work.
    let mut subscribers = Vec::new();
    for _ in 0..5 {
        subscribers.push(ws(&server.ws_url("")).await);
    }
    let mut producer = ws(&server.ws_url("receive=false")).await;
    let last = burst(&mut producer, 1).await;
    for subscriber in &mut subscribers {
        for n in 1..=last {
            let frame = recv(subscriber).await.expect("every frame");
            assert_eq!(frame["id"], format!("s{n}"), "in the order sent");
        }
    }
    assert_eq!(hot_total(&server).await, 0, "a move with five clients");
    server.stop().await;
}
