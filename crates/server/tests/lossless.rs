//! Nothing acknowledged is lost, nothing is lost silently: ingest into a full graph (what
//! is acknowledged was taken, what was not is refused and counted) and a slow client of a
//! lossless sidecar (cut off, resumed from the ring, told of what the ring lost).
//! Correctness only: timeouts are short, and no duration is asserted.

mod common;

use common::*;
use futures_util::SinkExt;
use patchbay_graph::ChannelOutput;
use patchbay_signal::SharedSignal;
use serde_json::{Value, json};
use tokio::net::TcpSocket;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_websocket_frames_arrives_whole_and_in_order() {
    // More frames than one ingest batch, written at once, with a bad one among them.
    let server = start(
        "ui_burst",
        &["ui_burst.inbound"],
        "when_full = \"block\"\nclient_queue = 4096\n",
        "",
    )
    .await;
    let mut reader = ws(&server.ws_url("")).await;
    let mut writer = ws(&server.ws_url("types=nothing")).await;
    let ids: Vec<String> = (0..1000).map(|i| format!("b{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        if i == 600 {
            writer
                .feed(Message::Text("{oops".into()))
                .await
                .expect("feed");
        }
        let frame = json!({"type": "t", "id": id}).to_string();
        writer
            .feed(Message::Text(frame.into()))
            .await
            .expect("feed");
    }
    writer.flush().await.expect("flush");
    for (n, id) in ids.iter().enumerate() {
        let frame = recv(&mut reader).await.expect("a frame");
        assert_eq!(frame["id"], id.as_str(), "{frame}");
        assert_eq!(seq_of(&frame), n as u64 + 1, "{frame}");
    }
    let refusal = recv(&mut writer).await.expect("the bad frame's error");
    assert!(
        refusal["message"].as_str().unwrap().contains("not JSON"),
        "{refusal}"
    );
    server.stop().await;
}

/// What a client read from one connection: frames' seqs, notices, and how it ended.
#[derive(Debug, Default)]
struct Session {
    seqs: Vec<u64>,
    gaps: Vec<(u64, u64)>,
    lagged: Option<u64>,
    close: Option<(u16, String)>,
}

/// Reads `ws` until it closes or frame `last` arrived.
async fn read_session(ws: &mut Ws, last: u64) -> Session {
    let mut s = Session::default();
    loop {
        let msg = guard("a frame", futures_util::StreamExt::next(ws)).await;
        match msg {
            Some(Ok(Message::Text(t))) => {
                let f: Value = serde_json::from_str(t.as_str()).expect("JSON");
                match f["kind"].as_str() {
                    Some("gap") => {
                        let (from, to) = (f["from"].as_u64().unwrap(), f["to"].as_u64().unwrap());
                        assert_eq!(f["missed"].as_u64(), Some(to - from + 1), "{f}");
                        s.gaps.push((from, to));
                    }
                    Some("lagged") => s.lagged = f["resume_from"].as_u64(),
                    _ => {
                        assert!(s.lagged.is_none(), "nothing after the lagged notice");
                        s.seqs.push(seq_of(&f));
                        if s.seqs.last() == Some(&last) {
                            return s;
                        }
                    }
                }
            }
            Some(Ok(Message::Close(frame))) => {
                s.close = frame.map(|f| (u16::from(f.code), f.reason.as_str().to_owned()));
                return s;
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("connection failed: {e}"),
            None => return s,
        }
    }
}

const N: u64 = 3200;
const RING: u64 = 1000;

/// A client that never reads while 3200 large signals go through a lossless sidecar
/// (`options` added to its config): it is cut off, not dropped from, and the reading
/// client is not held up. Returns the server, the seq the stalled client was told to
/// resume from, and what it got up to it.
async fn a_client_stalls_while_3200_signals_pass(name: &str, options: &str) -> (Server, u64) {
    const BATCH: u64 = 32;
    let server = start(
        name,
        &[&format!("{name}.inbound")],
        &format!("when_full = \"block\"\nclient_queue = 64\nring = {RING}\n{options}"),
        "",
    )
    .await;

    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(server.addr).await.unwrap();
    let (mut stalled, _) = guard(
        "stalled client handshake",
        tokio_tungstenite::client_async(
            server.ws_url(""),
            tokio_tungstenite::MaybeTlsStream::Plain(stream),
        ),
    )
    .await
    .expect("handshake");

    let (progress_tx, mut progress) = tokio::sync::watch::channel(0u64);
    let mut reader = ws(&server.ws_url("")).await;
    let reading = tokio::spawn(async move {
        for expected in 1..=N {
            let f = recv(&mut reader).await.expect("every frame");
            assert_eq!(seq_of(&f), expected, "the reading client misses nothing");
            let _ = progress_tx.send(expected);
        }
    });
    let pad = "p".repeat(8 * 1024);
    for batch in 0..N / BATCH {
        let body: Vec<Value> = (0..BATCH)
            .map(|i| json!({"type": "load", "payload": {"i": batch * BATCH + i, "pad": pad}}))
            .collect();
        let r = post(server.addr, &Value::Array(body)).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let upto = (batch + 1) * BATCH;
        guard(
            "the reading client keeps up",
            progress.wait_for(|n| *n >= upto),
        )
        .await
        .unwrap();
    }
    guard("the reading client finishes", reading).await.unwrap();
    let ui = server.component(name).await;
    assert_eq!(ui["gauges"]["clients_cut"], 1.0, "{ui}");
    assert!(ui["gauges"].get("client_frames_dropped").is_none(), "{ui}");

    // The stalled client: a contiguous start, the lagged notice, then a close saying so.
    let first = read_session(&mut stalled, N).await;
    let resume_from = first.lagged.expect("a lagged notice");
    assert_eq!(first.seqs, (1..=resume_from).collect::<Vec<_>>());
    assert!(
        resume_from < N - RING,
        "more than `ring` frames followed the cut: {resume_from}"
    );
    let (code, reason) = first.close.expect("a close frame");
    assert_eq!(CloseCode::from(code), CloseCode::Again);
    assert!(reason.contains(&format!("since={resume_from}")), "{reason}");
    (server, resume_from)
}

/// The soak's case, made deterministic: far more than `ring` frames are published after a
/// client of a lossless sidecar is cut off, and it comes back within the resume window
/// (the default, a minute): it gets every frame, no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_client_back_within_the_window_misses_nothing_however_much_followed() {
    let (server, resume_from) = a_client_stalls_while_3200_signals_pass("ui_window", "").await;
    let mut again = ws(&server.ws_url(&format!("since={resume_from}"))).await;
    let second = read_session(&mut again, N).await;
    assert_eq!(second.gaps, []);
    assert_eq!(second.seqs, (resume_from + 1..=N).collect::<Vec<_>>());
    let ui = server.component("ui_window").await;
    assert!(ui["gauges"].get("ring_evicted_early").is_none(), "{ui}");
    server.stop().await;
}

/// With the ring's count alone (`resume_window_ms = 0`), reconnecting with `since` gives
/// the ring's frames and a gap notice for exactly what the ring no longer holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_count_alone_a_cut_client_is_told_exactly_what_the_ring_lost() {
    let (server, resume_from) =
        a_client_stalls_while_3200_signals_pass("ui_count", "resume_window_ms = 0\n").await;
    let mut again = ws(&server.ws_url(&format!("since={resume_from}"))).await;
    let second = read_session(&mut again, N).await;
    assert_eq!(second.gaps, [(resume_from + 1, N - RING)]);
    assert_eq!(second.seqs, (N - RING + 1..=N).collect::<Vec<_>>());
    server.stop().await;
}

/// A ring bounded in bytes below what the window needs lets the oldest frames go: counted
/// (`ring_evicted_early`), and a resuming client is told of them in a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_beyond_ring_max_bytes_is_counted_and_named_in_a_gap() {
    // Frames of about 8 KiB: room for about 1500 of the 3200.
    let (server, resume_from) =
        a_client_stalls_while_3200_signals_pass("ui_bytes", "ring_max_bytes = 12582912\n").await;
    let mut again = ws(&server.ws_url(&format!("since={resume_from}"))).await;
    let second = read_session(&mut again, N).await;
    let [(from, to)] = second.gaps[..] else {
        panic!("one gap: {second:?}");
    };
    assert_eq!(from, resume_from + 1);
    assert_eq!(second.seqs, (to + 1..=N).collect::<Vec<_>>());
    assert!(N - to < RING + 600 && N - to > RING, "{to}");
    let ui = server.component("ui_bytes").await;
    // Every frame let go was within the window.
    assert_eq!(ui["gauges"]["ring_evicted_early"], to as f64, "{ui}");
    server.stop().await;
}
