//! The built binary serving a sidecar, with real clients on loopback: a WebSocket client,
//! raw HTTP for POST, SSE and the safety checks, and `patchbay tap`.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use patchbay_testkit::process::{Daemon, free_port, http};
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// Writes `text` to `name` in a fresh scratch directory; the guard must outlive the
/// daemon reading the file.
fn temp_file(name: &str, text: &str) -> (ScratchDir, PathBuf) {
    let dir = ScratchDir::new("sidecar");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    (dir, path)
}

fn start(args: &[&str], stdin: Stdio) -> Daemon {
    let child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PATCHBAY_LOG", "warn")
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("patchbay starts");
    Daemon(child)
}

/// Waits (bounded) until the sidecar answers `/health`.
fn wait_ready(addr: SocketAddr) {
    let guard = Instant::now();
    loop {
        if http(addr, "GET", "/health", &[], b"").is_ok_and(|r| r.0 == 200) {
            return;
        }
        assert!(
            guard.elapsed() < Duration::from_secs(60),
            "sidecar on {addr} never came up"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

async fn next_json<S>(ws: &mut S) -> Value
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("a frame within the guard time")
            .expect("stream open")
            .expect("frame");
        if let Message::Text(t) = msg {
            return serde_json::from_str(&t).expect("JSON frame");
        }
    }
}

fn scenario_len() -> usize {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sajou/emitter-scenario-multi-agent.jsonl"),
    )
    .unwrap()
    .lines()
    .filter(|l| !l.trim().is_empty())
    .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_replay_reaches_websocket_clients_in_order_and_resumes() {
    let port = free_port();
    let (_dir, config) = temp_file(
        "replay.toml",
        &format!(
            "[sources.scenario]\ntype = \"file\"\npath = \"{}/tests/fixtures/sajou/emitter-scenario-multi-agent.jsonl\"\nformat = \"scenario\"\nspeed = 0\n\n[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"scenario\", \"ui.inbound\"]\nlisten = \"127.0.0.1:{port}\"\n",
            env!("CARGO_MANIFEST_DIR")
        ),
    );
    let _daemon = start(&["run", config.to_str().unwrap()], Stdio::null());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    tokio::task::spawn_blocking(move || wait_ready(addr))
        .await
        .unwrap();
    let n = scenario_len();

    // Everything the ring holds, in order, with seq 1..=n.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws?since=0"))
        .await
        .expect("ws connects");
    let mut types = Vec::new();
    for expected_seq in 1..=n as u64 {
        let frame = next_json(&mut ws).await;
        assert_eq!(frame["metadata"]["seq"], expected_seq, "{frame}");
        patchbay_testkit::assert_schema_valid(&frame);
        types.push(frame["type"].as_str().unwrap().to_owned());
    }
    assert_eq!(types[0], "task_dispatch");

    // Resume from the middle: nothing lost, nothing repeated, then live.
    let (mut resumed, _) =
        tokio_tungstenite::connect_async(format!("ws://{addr}/ws?since=5&format=escapement"))
            .await
            .expect("ws connects");
    for expected_seq in 6..=n as u64 {
        let frame = next_json(&mut resumed).await;
        assert_eq!(frame["kind"], "event");
        assert_eq!(frame["seq"], expected_seq);
    }

    // A UI's back-channel: an Escapement control frame comes out of ui.inbound as
    // control.pause, and the sidecar (fed by ui.inbound) sends it to every client.
    ws.send(Message::text(r#"{"kind":"control","op":"pause"}"#))
        .await
        .unwrap();
    let frame = next_json(&mut ws).await;
    assert_eq!(frame["type"], "control.pause");
    assert_eq!(frame["metadata"]["seq"], n as u64 + 1);
    let frame = next_json(&mut resumed).await;
    assert_eq!(
        (frame["event"].as_str(), frame["seq"].as_u64()),
        (Some("control.pause"), Some(n as u64 + 1))
    );

    // A malformed frame gets an error frame; the connection stays open.
    ws.send(Message::text("{nope")).await.unwrap();
    let frame = next_json(&mut ws).await;
    assert_eq!(frame["kind"], "error", "{frame}");
    ws.send(Message::text(
        r#"{"type":"user.click","payload":{"target":"agent-1"}}"#,
    ))
    .await
    .unwrap();
    let frame = next_json(&mut ws).await;
    assert_eq!(frame["type"], "user.click");

    // POST reaches WebSocket clients.
    let body = json!([{"type": "a.b", "payload": {"n": 1}}, {"type": "a.c"}]).to_string();
    let (status, answer) = tokio::task::spawn_blocking(move || {
        http(
            addr,
            "POST",
            "/api/signal",
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["ok"], true);
    assert_eq!(answer["ids"].as_array().map(Vec::len), Some(2));
    assert_eq!(next_json(&mut ws).await["type"], "a.b");
    assert_eq!(next_json(&mut ws).await["type"], "a.c");

    // Browser safety: a foreign Origin is refused, a local one accepted.
    let (status, _) = tokio::task::spawn_blocking(move || {
        http(
            addr,
            "POST",
            "/signal",
            &[("Origin", "https://evil.example")],
            b"{\"type\":\"x\"}",
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(status, 403);
    let (status, _) = tokio::task::spawn_blocking(move || {
        http(
            addr,
            "POST",
            "/signal",
            &[("Origin", "http://localhost:5173")],
            b"{\"type\":\"x\"}",
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(status, 200);

    // SSE resumes from Last-Event-ID.
    let events = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let last = n - 2;
        write!(
            stream,
            "GET /events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nLast-Event-ID: {last}\r\n\r\n"
        )
        .unwrap();
        let mut reader = BufReader::new(stream);
        let mut ids = Vec::new();
        let mut line = String::new();
        while ids.len() < 2 {
            line.clear();
            if reader.read_line(&mut line).unwrap() == 0 {
                break;
            }
            if let Some(id) = line.trim_end().strip_prefix("id:") {
                ids.push(id.trim().parse::<usize>().unwrap());
            }
        }
        ids
    })
    .await
    .unwrap();
    assert_eq!(events, [n - 1, n]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_is_required_and_tap_prints_signals() {
    let port = free_port();
    let (_dir, config) = temp_file(
        "token.toml",
        &format!(
            "[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"ui.inbound\"]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"${{PATCHBAY_TEST_TOKEN}}\"\n"
        ),
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_patchbay"));
    cmd.args(["run", config.to_str().unwrap()])
        .env("PATCHBAY_TEST_TOKEN", "t0ken")
        .env("PATCHBAY_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let _daemon = Daemon(cmd.spawn().expect("starts"));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    tokio::task::spawn_blocking(move || wait_ready(addr))
        .await
        .unwrap();

    let (status, _) = tokio::task::spawn_blocking(move || {
        http(addr, "POST", "/signal", &[], b"{\"type\":\"x\"}")
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(status, 401);
    let (status, _) = tokio::task::spawn_blocking(move || {
        http(
            addr,
            "POST",
            "/signal",
            &[("Authorization", "Bearer t0ken")],
            b"{\"type\":\"first\"}",
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(status, 200);
    assert!(
        tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
            .await
            .is_err()
    );

    // `patchbay tap` with the token in the URL replays and prints NDJSON.
    let mut tap = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args([
            "tap",
            &format!("ws://{addr}/ws?token=t0ken"),
            "--since",
            "0",
            "--json",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("tap starts");
    let stdout = tap.stdout.take().unwrap();
    let first = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let _ = tap.kill();
    let _ = tap.wait();
    let signal: Value = serde_json::from_str(&first).expect("tap prints NDJSON");
    assert_eq!(signal["type"], "first");
    assert_eq!(signal["metadata"]["seq"], 1);
}

/// A daemon whose finite `file` source has finished while its sidecar serves is `ok`, with
/// the source `done`, in `/health`, `/metrics`, and what `patchbay tap` says on connecting
/// (the status page draws the same `overall`: tests/status_page.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_file_source_leaves_the_daemon_serving_everywhere_it_says_so() {
    let port = free_port();
    let (_dir, config) = temp_file(
        "done.toml",
        &format!(
            "[sources.scenario]\ntype = \"file\"\npath = \"{}/tests/fixtures/sajou/emitter-scenario-multi-agent.jsonl\"\nformat = \"scenario\"\nspeed = 0\n\n[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"scenario\"]\nlisten = \"127.0.0.1:{port}\"\n",
            env!("CARGO_MANIFEST_DIR")
        ),
    );
    let _daemon = start(&["run", config.to_str().unwrap()], Stdio::null());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let health = tokio::task::spawn_blocking(move || {
        wait_ready(addr);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, body) = http(addr, "GET", "/health", &[], b"").expect("health");
            let health: Value = serde_json::from_str(&body).expect("JSON");
            if health["done"] == json!(["scenario"]) {
                return health;
            }
            assert!(
                Instant::now() < deadline,
                "the file never finished: {health}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["serving"], true, "{health}");
    assert!(health.get("failed").is_none(), "{health}");

    let metrics = tokio::task::spawn_blocking(move || http(addr, "GET", "/metrics", &[], b""))
        .await
        .unwrap()
        .expect("metrics");
    let metrics = metrics.1;
    assert!(
        metrics.contains("patchbay_status{status=\"ok\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("patchbay_status{status=\"stopped\"} 0\n"),
        "{metrics}"
    );
    assert!(metrics.contains("patchbay_serving 1\n"), "{metrics}");

    let mut tap = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["tap", &format!("ws://{addr}/ws"), "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tap starts");
    let stderr = tap.stderr.take().unwrap();
    let said = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stderr).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let _ = tap.kill();
    let _ = tap.wait();
    assert!(said.contains("ok (done: scenario)"), "{said}");
}

#[test]
fn non_loopback_listen_without_token_is_a_config_error() {
    let (_dir, config) = temp_file(
        "open.toml",
        "[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"ui.inbound\"]\nlisten = \"0.0.0.0:7878\"\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["validate", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("open.toml:4:10:") && stderr.contains("token"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_pipeline_serves_stdin_and_posts_on_7878() {
    let addr: SocketAddr = "127.0.0.1:7878".parse().unwrap();
    assert!(
        TcpListener::bind(addr).is_ok(),
        "port 7878 is taken by another program: stop it to run this test"
    );
    let mut daemon = start(&[], Stdio::piped());
    let mut stdin = daemon.0.stdin.take().unwrap();
    stdin.write_all(b"{\"type\":\"from.stdin\"}\n").unwrap();
    drop(stdin);
    tokio::task::spawn_blocking(move || wait_ready(addr))
        .await
        .unwrap();
    let (mut ws, _) =
        tokio_tungstenite::connect_async("ws://127.0.0.1:7878/ws?since=0&types=from.stdin,posted")
            .await
            .unwrap();
    assert_eq!(next_json(&mut ws).await["type"], "from.stdin");
    let (status, _) = tokio::task::spawn_blocking(move || {
        http(addr, "POST", "/signal", &[], b"{\"type\":\"posted\"}")
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(next_json(&mut ws).await["type"], "posted");
    // The log on stdout (piped: NDJSON) has both.
    let stdout = daemon.0.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .take(2)
            .map(|l| {
                serde_json::from_str::<Value>(&l.unwrap()).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert_eq!(lines, ["from.stdin", "posted"]);

    // Once every discovery source has probed, a healthy default daemon is `ok` whether or
    // not the local services are there: one that is absent is `waiting`, not a fault.
    let health = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, body) = http(addr, "GET", "/health", &[], b"").expect("health");
            let health: Value = serde_json::from_str(&body).expect("JSON");
            if health.get("starting").is_none() {
                return health;
            }
            assert!(Instant::now() < deadline, "still starting: {health}");
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["serving"], true, "{health}");
    assert_eq!(health["done"], json!(["stdin"]), "{health}");
    let discovered = health["components"]
        .as_array()
        .expect("components")
        .iter()
        .filter(|c| c["name"].as_str().is_some_and(|n| n.starts_with("local:")));
    for source in discovered {
        assert!(
            source["state"] == "ok" || source["state"] == "waiting",
            "{source}"
        );
    }
}

/// SIGTERM while a client has read nothing yet: it still gets every frame queued for it,
/// in order, then a close frame 1001, and patchbay exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_slow_client_take_everything_queued_then_closes_1001() {
    const N: u64 = 2000;
    const BATCH: u64 = 100;
    let port = free_port();
    let (_dir, config) = temp_file(
        "shutdown.toml",
        &format!(
            "[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"ui.inbound\"]\nlisten = \"127.0.0.1:{port}\"\nclient_queue = 100000\nmax_frame = 4194304\n\n[runtime]\nshutdown_timeout_ms = 120000\n"
        ),
    );
    let mut daemon = start(&["run", config.to_str().unwrap()], Stdio::null());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    tokio::task::spawn_blocking(move || wait_ready(addr))
        .await
        .unwrap();

    // A client with a tiny receive window that reads nothing until the signal.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let (mut slow, _) = tokio_tungstenite::client_async(
        format!("ws://{addr}/ws"),
        tokio_tungstenite::MaybeTlsStream::Plain(stream),
    )
    .await
    .expect("handshake");

    tokio::task::spawn_blocking(move || {
        let pad = "p".repeat(8 * 1024);
        for batch in 0..N / BATCH {
            let body: Vec<Value> = (0..BATCH)
                .map(|i| json!({"type": "load", "payload": {"i": batch * BATCH + i, "pad": pad}}))
                .collect();
            let (status, answer) = http(
                addr,
                "POST",
                "/signal",
                &[],
                Value::Array(body).to_string().as_bytes(),
            )
            .expect("POST");
            assert_eq!(status, 200, "{answer}");
        }
        // Every signal is in the client's queue (or its socket) once the sidecar sent it.
        let guard = Instant::now();
        loop {
            let (_, health) = http(addr, "GET", "/health", &[], b"").expect("health");
            let health: Value = serde_json::from_str(&health).expect("JSON");
            let ui = health["components"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["name"] == "ui").cloned())
                .expect("the sidecar's stats");
            if ui["sent"] == N {
                break;
            }
            assert!(guard.elapsed() < Duration::from_secs(60), "{ui}");
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .unwrap();

    // SAFETY: signals the process this test started, by its pid.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(daemon.0.id() as libc::pid_t, libc::SIGTERM);
    }
    let mut seqs = Vec::with_capacity(N as usize);
    let close = loop {
        let msg = tokio::time::timeout(Duration::from_secs(60), slow.next())
            .await
            .expect("a frame within the guard time");
        match msg {
            Some(Ok(Message::Text(t))) => {
                let frame: Value = serde_json::from_str(&t).expect("JSON frame");
                seqs.push(frame["metadata"]["seq"].as_u64().expect("seq"));
            }
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => {}
            other => panic!("the connection ended without a close frame: {other:?}"),
        }
    };
    assert_eq!(
        seqs,
        (1..=N).collect::<Vec<_>>(),
        "every queued frame, in order"
    );
    let close = close.expect("a close code");
    assert_eq!(u16::from(close.code), 1001, "{close:?}");
    let status = tokio::task::block_in_place(|| daemon.0.wait()).expect("exit status");
    assert!(status.success(), "{status:?}");
}
