//! The sidecar against real clients on loopback: a graph with a sidecar output on
//! 127.0.0.1 port 0, WebSocket clients (tokio-tungstenite) and raw HTTP.

mod common;

use common::*;
use serde_json::{Value, json};
use tokio::net::TcpSocket;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_signal_arrives_in_order_with_increasing_seq() {
    let server = start(
        "ui_order",
        &["ui_order.inbound", "seed"],
        "",
        "[sources.seed]\ntype = \"count\"\nn = 300\n",
    )
    .await;
    // `since=0` replays whatever the source already emitted, then goes live: all 300.
    let mut client = ws(&server.ws_url("since=0")).await;
    for expected in 1..=300u64 {
        let frame = recv(&mut client).await.expect("a frame");
        assert_eq!(seq_of(&frame), expected, "{frame}");
        assert_eq!(frame["payload"]["i"], expected - 1, "payload order");
        assert_eq!(frame["type"], "test.tick");
        assert_eq!(frame["source"], "test:count");
    }
    // A client that joins now without `since` only gets what comes next.
    let mut live = ws(&server.ws_url("")).await;
    let r = post(server.addr, &json!({"type": "after", "payload": {}})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(seq_of(&recv(&mut live).await.expect("live frame")), 301);
    assert_eq!(seq_of(&recv(&mut client).await.expect("live frame")), 301);
    let report = server.stop().await;
    assert!(report.drained);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escapement_format_and_type_filter() {
    let seed = "[sources.seed]\ntype = \"count\"\nn = 30\nkinds = [\"a.one\", \"b.two\", \"c\"]\n";
    let server = start("ui_format", &["ui_format.inbound", "seed"], "", seed).await;
    let mut esc = ws(&server.ws_url("since=0&format=escapement")).await;
    for expected in 1..=30u64 {
        let f = recv(&mut esc).await.expect("frame");
        assert_eq!(f["kind"], "event");
        assert_eq!(f["seq"], expected);
        assert!(f["ts"].is_i64());
        assert_eq!(f["data"]["i"], expected - 1);
        let keys: Vec<&str> = f.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["kind", "seq", "ts", "event", "data"]);
    }
    let mut filtered = ws(&server.ws_url("since=0&types=a.*,c")).await;
    let mut kinds = Vec::new();
    for _ in 0..20 {
        let f = recv(&mut filtered).await.expect("frame");
        kinds.push((seq_of(&f), f["type"].as_str().unwrap().to_owned()));
    }
    assert!(
        kinds.iter().all(|(_, k)| k == "a.one" || k == "c"),
        "{kinds:?}"
    );
    assert!(
        kinds.windows(2).all(|w| w[0].0 < w[1].0),
        "increasing seq: {kinds:?}"
    );
    assert_eq!(kinds.first().map(|k| k.0), Some(1));
    assert_eq!(kinds.last().map(|k| k.0), Some(30));
    server.stop().await;
}

/// A client that never reads: its TCP buffers fill, then its queue; it must lag alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_lags_alone_and_resumes_with_since() {
    const N: u64 = 3200;
    // A batch never exceeds `client_queue`: the reading client, caught up before each one,
    // cannot overflow.
    const BATCH: u64 = 32;
    let server = start(
        "ui_slow",
        &["ui_slow.inbound"],
        "client_queue = 64\nring = 10000\n",
        "",
    )
    .await;

    // The stalled client keeps a tiny receive window and never reads until the end.
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
            let f = recv(&mut reader)
                .await
                .expect("the reading client gets every frame");
            assert_eq!(
                seq_of(&f),
                expected,
                "no gap, no lag for the reading client"
            );
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
        // Pace on the reading client (not on time): it must get everything while the
        // other client is stalled.
        let upto = (batch + 1) * BATCH;
        guard(
            "the reading client keeps up",
            progress.wait_for(|n| *n >= upto),
        )
        .await
        .unwrap();
    }
    guard("the reading client finishes", reading).await.unwrap();
    let ui = server.component("ui_slow").await;
    assert_eq!(ui["gauges"]["lagged_clients"], 1.0, "{ui}");

    // Now the stalled client reads: a contiguous start, one `lagged` notice, then newer
    // frames only.
    let mut before = Vec::new();
    let resume_from = loop {
        let f = recv(&mut stalled)
            .await
            .expect("frames then a lagged notice");
        if f["kind"] == "lagged" {
            break f["resume_from"].as_u64().expect("resume_from");
        }
        before.push(seq_of(&f));
    };
    assert_eq!(
        before,
        (1..=before.len() as u64).collect::<Vec<_>>(),
        "contiguous before the gap"
    );
    assert_eq!(
        resume_from,
        before.len() as u64,
        "resume right after the last frame received"
    );
    assert!(resume_from < N - 64, "the client lagged: {resume_from}");
    let mut after = Vec::new();
    while after.last() != Some(&N) {
        let f = recv(&mut stalled).await.expect("newer frames");
        assert_ne!(f["kind"], "lagged", "only one notice");
        after.push(seq_of(&f));
    }
    assert!(
        after.first().is_some_and(|&s| s > resume_from + 1),
        "{after:?}"
    );
    assert!(after.windows(2).all(|w| w[0] < w[1]));

    // Reconnecting with since=resume_from loses nothing and repeats nothing.
    let mut again = ws(&server.ws_url(&format!("since={resume_from}"))).await;
    for expected in resume_from + 1..=N {
        let f = recv(&mut again).await.expect("replayed frame");
        assert_eq!(seq_of(&f), expected);
        assert_eq!(f["payload"]["i"], expected - 1);
    }
    let r = post(server.addr, &json!({"type": "live"})).await;
    assert_eq!(r.status, 200);
    let f = recv(&mut again).await.expect("live after replay");
    assert_eq!((seq_of(&f), f["type"].as_str()), (N + 1, Some("live")));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_streams_and_resumes_from_last_event_id() {
    let seed = "[sources.seed]\ntype = \"count\"\nn = 50\n";
    let server = start("ui_sse", &["ui_sse.inbound", "seed"], "", seed).await;
    let mut sse = Sse::connect(server.addr, "/events?since=0", &[]).await;
    assert!(
        sse.head.starts_with("HTTP/1.0 200") || sse.head.starts_with("HTTP/1.1 200"),
        "{}",
        sse.head
    );
    assert!(
        sse.head
            .to_ascii_lowercase()
            .contains("content-type: text/event-stream")
    );
    for expected in 1..=20u64 {
        let e = sse.next().await.expect("event");
        assert_eq!(e.id, Some(expected));
        assert_eq!(e.data["metadata"]["seq"], expected);
    }
    drop(sse);
    // The browser reconnects with Last-Event-ID (and its original URL): resume after 20.
    let mut resumed =
        Sse::connect(server.addr, "/events?since=0", &[("Last-Event-ID", "20")]).await;
    for expected in 21..=50u64 {
        let e = resumed.next().await.expect("event");
        assert_eq!(e.id, Some(expected));
        assert_eq!(e.data["payload"]["i"], expected - 1);
    }
    // Escapement format over SSE, live.
    let mut esc = Sse::connect(server.addr, "/events?format=escapement", &[]).await;
    let r = post(
        server.addr,
        &json!({"type": "live.one", "payload": {"k": 1}}),
    )
    .await;
    assert_eq!(r.status, 200);
    let e = esc.next().await.expect("live event");
    assert_eq!(e.id, Some(51));
    assert_eq!(e.data["event"], "live.one");
    let e = resumed.next().await.expect("live event");
    assert_eq!(e.id, Some(51));
    let bad = http(server.addr, "GET", "/events?since=x", &[], b"").await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"].as_str().unwrap().contains("since"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posted_signals_reach_websocket_clients() {
    let server = start("ui_post", &["ui_post.inbound"], "max_frame = 2048\n", "").await;
    let mut client = ws(&server.ws_url("")).await;
    let body = json!([
        {"type": "user.click", "payload": {"target": "play"}},
        {"type": "custom.thing", "payload": {"a": 1}, "correlationId": "c1"},
    ]);
    for path in ["/signal", "/api/signal"] {
        let r = http(server.addr, "POST", path, &[], body.to_string().as_bytes()).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let answer = r.json();
        assert_eq!(answer["ok"], true);
        assert_eq!(answer["clients"], 1);
        let ids = answer["ids"].as_array().expect("ids").clone();
        assert_eq!(ids.len(), 2);
        for (id, kind) in ids.iter().zip(["user.click", "custom.thing"]) {
            let f = recv(&mut client).await.expect("frame");
            assert_eq!(&f["id"], id);
            assert_eq!(f["type"], kind);
            assert_eq!(f["source"], "sidecar:ui_post");
        }
    }
    let one = post(server.addr, &json!({"type": "single"})).await;
    assert_eq!(one.json()["ids"].as_array().map(Vec::len), Some(1));
    assert_eq!(recv(&mut client).await.expect("frame")["type"], "single");

    // Bad bodies: 400 naming the problem, counted as bad input on the inbound side.
    for (body, expected) in [
        ("{not json", "not JSON"),
        ("[{\"type\":\"a\"}, 3]", "[1]"),
        ("{\"type\":3}", "`type` must be a string"),
        ("", "empty body"),
    ] {
        let r = http(server.addr, "POST", "/signal", &[], body.as_bytes()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        let e = r.json();
        assert_eq!(e["ok"], false);
        assert!(
            e["error"].as_str().unwrap().contains(expected),
            "{body}: {e}"
        );
    }
    let big = json!({"type": "big", "payload": {"pad": "x".repeat(4096)}}).to_string();
    let r = http(server.addr, "POST", "/signal", &[], big.as_bytes()).await;
    assert_eq!(r.status, 413, "{}", r.body);
    let inbound = server.component("ui_post.inbound").await;
    assert_eq!(inbound["bad_input"], 5, "{inbound}");
    // None of the refused bodies reached the clients.
    let r = post(server.addr, &json!({"type": "last"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(recv(&mut client).await.expect("frame")["type"], "last");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_origins_are_refused() {
    let server = start("ui_origin", &["ui_origin.inbound"], "", "").await;
    let url = server.ws_url("");
    let evil = [("Origin", "https://evil.example")];
    assert_eq!(refused_status(ws_connect(&url, &evil).await), 403);
    let r = http(server.addr, "POST", "/signal", &evil, br#"{"type":"x"}"#).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.json()["ok"], false);
    // Local origins, and clients sending none, are welcome.
    for origin in [
        "http://localhost:5173",
        "http://127.0.0.1:8080",
        "https://[::1]",
    ] {
        ws_connect(&url, &[("Origin", origin)]).await.expect(origin);
        let r = http(
            server.addr,
            "POST",
            "/signal",
            &[("Origin", origin)],
            br#"{"type":"x"}"#,
        )
        .await;
        assert_eq!(r.status, 200, "{origin}: {}", r.body);
    }
    server.stop().await;

    let server = start(
        "ui_origin2",
        &["ui_origin2.inbound"],
        "allowed_origins = [\"https://app.example\"]\n",
        "",
    )
    .await;
    let url = server.ws_url("");
    ws_connect(&url, &[("Origin", "https://app.example")])
        .await
        .expect("listed origin");
    assert_eq!(
        refused_status(ws_connect(&url, &[("Origin", "http://localhost:1")]).await),
        403
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_guards_every_endpoint_but_health() {
    let server = start(
        "ui_token",
        &["ui_token.inbound"],
        "token = \"s3cret\"\n",
        "",
    )
    .await;
    let addr = server.addr;
    assert_eq!(http(addr, "GET", "/health", &[], b"").await.status, 200);
    for path in ["/metrics", "/", "/events"] {
        let r = http(addr, "GET", path, &[], b"").await;
        assert_eq!(r.status, 401, "{path}");
        assert!(
            r.head
                .to_ascii_lowercase()
                .contains("www-authenticate: bearer"),
            "{}",
            r.head
        );
        let r = http(addr, "GET", path, &[("Authorization", "Bearer wrong")], b"").await;
        assert_eq!(r.status, 401, "{path}");
    }
    let bearer = [("Authorization", "Bearer s3cret")];
    assert_eq!(
        http(addr, "GET", "/metrics", &bearer, b"").await.status,
        200
    );
    assert_eq!(
        http(addr, "GET", "/?token=s3cret", &[], b"").await.status,
        200
    );
    assert_eq!(
        http(addr, "POST", "/signal", &[], br#"{"type":"x"}"#)
            .await
            .status,
        401
    );
    assert_eq!(
        http(addr, "POST", "/signal", &bearer, br#"{"type":"x"}"#)
            .await
            .status,
        200
    );
    assert_eq!(
        refused_status(ws_connect(&server.ws_url(""), &[]).await),
        401
    );
    // Browsers' WebSocket cannot set headers: `?token=` works there.
    let mut c = ws(&server.ws_url("token=s3cret&since=0")).await;
    assert_eq!(recv(&mut c).await.expect("replayed")["type"], "x");
    ws_connect(&server.ws_url(""), &bearer)
        .await
        .expect("bearer header");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_get_an_error_and_the_connection_survives() {
    let server = start("ui_bad", &["ui_bad.inbound"], "max_frame = 4096\n", "").await;
    let mut c = ws(&server.ws_url("")).await;
    for (text, expected) in [
        ("{oops", "not JSON"),
        ("[1,2]", "expected a JSON object"),
        (r#"{"kind":"control"}"#, "without `op`"),
        (r#"{"kind":"answer","prompt-id":"p"}"#, "needs `value`"),
    ] {
        send(&mut c, text).await;
        let f = recv(&mut c).await.expect("error frame");
        assert_eq!(f["kind"], "error", "{f}");
        assert!(
            f["message"].as_str().unwrap().contains(expected),
            "{text}: {f}"
        );
    }
    // Still open: a good frame goes into the graph and comes back out.
    send(
        &mut c,
        r#"{"type":"user.command","payload":{"entityId":"e","action":"go"}}"#,
    )
    .await;
    let f = recv(&mut c).await.expect("frame back");
    assert_eq!(f["type"], "user.command");
    assert_eq!(f["source"], "sidecar:ui_bad");
    let inbound = server.component("ui_bad.inbound").await;
    assert_eq!(inbound["bad_input"], 4, "{inbound}");

    // A frame over max_frame is refused; the server is unharmed.
    let mut big = ws(&server.ws_url("")).await;
    send(
        &mut big,
        &format!(
            r#"{{"type":"big","payload":{{"pad":"{}"}}}}"#,
            "x".repeat(8192)
        ),
    )
    .await;
    let refusal = recv(&mut big).await.expect("a refusal before the close");
    assert_eq!(refusal["kind"], "error");
    assert!(
        refusal["message"].as_str().unwrap().contains("max_frame"),
        "{refusal}"
    );
    assert!(recv(&mut big).await.is_none(), "then the connection closes");
    let inbound = server.component("ui_bad.inbound").await;
    assert_eq!(inbound["bad_input"], 5, "{inbound}");
    send(&mut c, r#"{"type":"after.big"}"#).await;
    assert_eq!(recv(&mut c).await.expect("frame")["type"], "after.big");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escapement_control_frames_come_out_of_inbound() {
    let server = start("ui_ctl", &["ui_ctl.inbound"], "", "").await;
    let mut c = ws(&server.ws_url("format=escapement")).await;
    let frames = [
        (
            r#"{"kind":"control","op":"pause"}"#,
            "control.pause",
            json!({}),
        ),
        (
            r#"{"kind":"control","op":"step","n":3}"#,
            "control.step",
            json!({"n": 3}),
        ),
        (
            r#"{"kind":"control","op":"continue"}"#,
            "control.continue",
            json!({}),
        ),
        (
            r#"{"kind":"control","op":"ui-interrupt"}"#,
            "control.interrupt",
            json!({}),
        ),
        (
            r#"{"kind":"control","op":"ui-quit"}"#,
            "control.quit",
            json!({}),
        ),
        (
            r#"{"kind":"answer","prompt-id":"ask#1","value":"blue"}"#,
            "control.answer",
            json!({"promptId": "ask#1", "value": "blue"}),
        ),
        (
            r#"{"kind":"answer","prompt-id":"ask#2","cancelled":true}"#,
            "control.answer",
            json!({"promptId": "ask#2", "cancelled": true}),
        ),
        (r#"{"type":"control.pause"}"#, "control.pause", json!({})),
    ];
    for (i, (text, kind, data)) in frames.iter().enumerate() {
        send(&mut c, text).await;
        let f = recv(&mut c).await.expect("control signal back");
        assert_eq!(f["kind"], "event");
        assert_eq!(f["seq"], i as u64 + 1);
        assert_eq!(f["event"], *kind, "{text}");
        assert_eq!(f["data"], *data, "{text}");
    }
    let inbound = server.component("ui_ctl.inbound").await;
    assert_eq!(inbound["sent"], frames.len() as u64, "{inbound}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_metrics_and_status_page() {
    let server = start("ui_obs", &["ui_obs.inbound"], "", "").await;
    let _client = ws(&server.ws_url("")).await;
    let h = server.health().await;
    assert_eq!(h["sidecar"], "ui_obs");
    let ui = server.component("ui_obs").await;
    assert_eq!(ui["type"], "sidecar");
    assert_eq!(ui["state"], "ok");
    assert_eq!(ui["gauges"]["clients"], 1.0);
    assert_eq!(ui["gauges"]["port"], f64::from(server.addr.port()));
    let m = http(server.addr, "GET", "/metrics", &[], b"").await;
    assert_eq!(m.status, 200);
    assert!(m.head.to_ascii_lowercase().contains("text/plain"));
    for line in [
        "patchbay_clients{component=\"ui_obs\"} 1",
        "patchbay_lagged_clients{component=\"ui_obs\"} 0",
        "patchbay_received_total{component=\"ui_obs\",type=\"sidecar\"}",
        "patchbay_bad_input_total{component=\"ui_obs.inbound\",type=\"inbound\"}",
    ] {
        assert!(m.body.contains(line), "missing {line} in\n{}", m.body);
    }
    let page = http(server.addr, "GET", "/", &[], b"").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<table") && page.body.contains("/status/stream"));
    assert!(
        !page.body.contains("<script src") && !page.body.contains("<link"),
        "no external assets"
    );
    // What the page draws: the status stream's first event names every component.
    let mut status = Sse::connect(server.addr, "/status/stream", &[]).await;
    let first = status.next().await.expect("a status event");
    let names: Vec<&str> = first.data["components"]
        .as_array()
        .expect("components")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["ui_obs.inbound", "ui_obs"]);
    drop(status);
    assert_eq!(
        http(server.addr, "GET", "/nope", &[], b"").await.status,
        404
    );
    server.stop().await;
}

/// A client that only sends (`receive=false`): its signals enter the graph, it is sent
/// none, and it still gets the close when the sidecar stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_only_client_is_sent_no_signal() {
    let server = start("ui_send", &["ui_send.inbound"], "", "").await;
    let mut sender = ws(&server.ws_url("receive=false")).await;
    let mut watcher = ws(&server.ws_url("")).await;
    for i in 0..3 {
        send(
            &mut sender,
            &format!(r#"{{"type":"note","payload":{{"i":{i}}}}}"#),
        )
        .await;
    }
    for expected in 1..=3 {
        assert_eq!(seq_of(&recv(&mut watcher).await.expect("frame")), expected);
    }
    // Refusals still come back: they answer what the client sent.
    send(&mut sender, "{oops").await;
    assert_eq!(
        recv(&mut sender).await.expect("error frame")["kind"],
        "error"
    );
    // Nothing else before the close: no signal frame reached it.
    let report = server.stop().await;
    assert!(report.drained);
    assert!(recv(&mut sender).await.is_none(), "the connection ends");

    let server = start("ui_send_bad", &["ui_send_bad.inbound"], "", "").await;
    for (query, why) in [
        ("receive=maybe", "`receive` must be"),
        ("receive=false&types=a", "takes no `since` or `types`"),
        ("receive=false&since=0", "takes no `since` or `types`"),
    ] {
        let r = http(server.addr, "GET", &format!("/ws?{query}"), &[], b"").await;
        assert_eq!(r.status, 400, "{query}: {}", r.body);
        assert!(r.body.contains(why), "{query}: {}", r.body);
    }
    let r = http(server.addr, "GET", "/events?receive=false", &[], b"").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("`receive` is for `/ws`"), "{}", r.body);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_graph_closes_clients() {
    let seed = "[sources.seed]\ntype = \"count\"\nn = 5\n";
    let server = start("ui_stop", &["ui_stop.inbound", "seed"], "", seed).await;
    let mut c = ws(&server.ws_url("since=0")).await;
    for expected in 1..=5 {
        assert_eq!(seq_of(&recv(&mut c).await.expect("frame")), expected);
    }
    let report = server.stop().await;
    assert!(report.drained);
    assert!(recv(&mut c).await.is_none(), "the connection ends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tap_prints_signals_until_the_sidecar_stops() {
    let seed = "[sources.seed]\ntype = \"count\"\nn = 4\nkinds = [\"keep.a\", \"skip\"]\n";
    let server = start("ui_tap", &["ui_tap.inbound", "seed"], "", seed).await;
    let url = server.ws_url("");
    let ndjson = tokio::spawn(async move {
        let mut out = Vec::new();
        let options = patchbay_server::TapOptions {
            types: Some("keep.*".into()),
            since: Some(0),
            ..patchbay_server::TapOptions::new(url)
        };
        patchbay_server::tap(&options, &mut out, |_| {})
            .await
            .map(|()| out)
    });
    let url = server.ws_url("");
    let readable = tokio::spawn(async move {
        let mut out = Vec::new();
        let options = patchbay_server::TapOptions {
            since: Some(0),
            readable: true,
            ..patchbay_server::TapOptions::new(url)
        };
        patchbay_server::tap(&options, &mut out, |_| {})
            .await
            .map(|()| out)
    });
    // Stop once both taps are connected and the sidecar has published all four signals.
    guard("two taps connect", async {
        loop {
            let ui = server.component("ui_tap").await;
            if ui["gauges"]["clients"] == 2.0 && ui["sent"] == 4 {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    server.stop().await;
    let out = String::from_utf8(guard("tap ends", ndjson).await.unwrap().expect("tap ok")).unwrap();
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("NDJSON"))
        .collect();
    assert_eq!(lines.iter().map(seq_of).collect::<Vec<_>>(), [1, 3]);
    assert!(lines.iter().all(|l| l["type"] == "keep.a"));
    let out =
        String::from_utf8(guard("tap ends", readable).await.unwrap().expect("tap ok")).unwrap();
    assert_eq!(out.lines().count(), 4, "{out}");
    assert!(out.lines().all(|l| l.contains("test:count")), "{out}");

    let err = patchbay_server::tap(
        &patchbay_server::TapOptions::new("http://127.0.0.1:1/ws"),
        &mut Vec::new(),
        |_| {},
    )
    .await
    .unwrap_err();
    assert!(matches!(err, patchbay_server::TapError::BadUrl(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflight_for_local_origins() {
    let server = start("ui_cors", &["ui_cors.inbound"], "", "").await;
    let local = [
        ("Origin", "http://localhost:5173"),
        ("Access-Control-Request-Method", "POST"),
    ];
    let r = http(server.addr, "OPTIONS", "/signal", &local, b"").await;
    assert_eq!(r.status, 204, "{}", r.head);
    let head = r.head.to_ascii_lowercase();
    assert!(
        head.contains("access-control-allow-origin: http://localhost:5173"),
        "{head}"
    );
    assert!(head.contains("access-control-allow-headers"), "{head}");
    let evil = [
        ("Origin", "https://evil.example"),
        ("Access-Control-Request-Method", "POST"),
    ];
    assert_eq!(
        http(server.addr, "OPTIONS", "/signal", &evil, b"")
            .await
            .status,
        403
    );
    let r = http(
        server.addr,
        "GET",
        "/health",
        &[("Origin", "http://localhost:5173")],
        b"",
    )
    .await;
    assert!(
        r.head
            .to_ascii_lowercase()
            .contains("access-control-allow-origin"),
        "{}",
        r.head
    );
    let r = http(
        server.addr,
        "GET",
        "/health",
        &[("Origin", "https://evil.example")],
        b"",
    )
    .await;
    assert!(
        !r.head
            .to_ascii_lowercase()
            .contains("access-control-allow-origin"),
        "{}",
        r.head
    );
    server.stop().await;
}
