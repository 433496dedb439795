//! The live status page in a real browser: headless Chromium (Debian's `chromium`, which
//! `scripts/test` installs) driven through its DevTools protocol. The page loads, draws the
//! wiring, shows a posted signal in its tail, and turns a component whose upstream dies
//! `failed`, all without a reload. Screenshots land in the test's target folder
//! (`status-page-*.png`) for a person to look at.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use patchbay_testkit::process::{Killed, free_port};
use patchbay_testkit::scratch::ScratchDir;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

const CHROMIUM: &str = "/usr/bin/chromium";

fn post(addr: SocketAddr, body: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    write!(
        stream,
        "POST /signal HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    response
}

/// A DevTools session on one page.
struct Page {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    session: String,
    next_id: u64,
}

impl Page {
    /// Sends a command and waits for its answer (events in between are skipped).
    async fn call(&mut self, method: &str, params: Value, session: bool) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if session {
            message["sessionId"] = json!(self.session);
        }
        self.ws
            .send(Message::text(message.to_string()))
            .await
            .expect("send to Chromium");
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(60), self.ws.next())
                .await
                .expect("Chromium answers")
                .expect("DevTools connection open")
                .expect("a frame");
            let Message::Text(text) = frame else { continue };
            let answer: Value = serde_json::from_str(&text).expect("JSON");
            if answer["id"] == id {
                assert!(answer.get("error").is_none(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// Evaluates `expression` in the page; its JSON value.
    async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
                true,
            )
            .await;
        result["result"]["value"].clone()
    }

    /// Waits (bounded, a guard against hanging) until `expression` is `true`.
    async fn wait_for(&mut self, what: &str, expression: &str) {
        let start = Instant::now();
        loop {
            if self.eval(expression).await == json!(true) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the page never showed {what}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn screenshot(&mut self, name: &str) {
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}), true)
            .await;
        let png = base64_decode(shot["data"].as_str().expect("base64 data"));
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        std::fs::write(&path, png).expect("write the screenshot");
        eprintln!("screenshot: {}", path.display());
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => 0,
    };
    let bytes: Vec<u8> = text.bytes().filter(|c| *c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, c)| {
            acc | (u32::from(value(*c)) << (18 - 6 * i))
        });
        let take = chunk.len().saturating_sub(1);
        out.extend_from_slice(&n.to_be_bytes()[1..1 + take]);
    }
    out
}

/// The daemon on `config`, once its sidecar at `addr` listens.
fn daemon(config: &std::path::Path, addr: SocketAddr) -> Killed {
    let daemon = Killed(
        Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .args(["run", "-c"])
            .arg(config)
            .env("PATCHBAY_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("patchbay runs"),
    );
    let start = Instant::now();
    while TcpStream::connect(addr).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the sidecar never came up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    daemon
}

/// Headless Chromium with the status page at `addr` open.
async fn open(dir: &ScratchDir, addr: SocketAddr) -> (Killed, Page) {
    assert!(
        std::path::Path::new(CHROMIUM).exists(),
        "chromium is not installed (`bash scripts/test` installs Debian's package)"
    );
    let profile = dir.join("chromium");
    let mut chromium = Killed(
        Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--window-size=1400,900",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium starts"),
    );
    let stderr = chromium.0.stderr.take().expect("stderr");
    let devtools = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| {
                line.split_once("DevTools listening on ")
                    .map(|(_, url)| url.trim().to_owned())
            })
    })
    .join()
    .unwrap()
    .expect("Chromium prints its DevTools address");

    let (ws, _) = tokio_tungstenite::connect_async(devtools.as_str())
        .await
        .expect("DevTools connects");
    let mut page = Page {
        ws,
        session: String::new(),
        next_id: 0,
    };
    let target = page
        .call(
            "Target.createTarget",
            json!({"url": format!("http://{addr}/")}),
            false,
        )
        .await;
    let attached = page
        .call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
            false,
        )
        .await;
    page.session = attached["sessionId"].as_str().unwrap().to_owned();
    (chromium, page)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_is_live_in_a_browser() {
    let dir = ScratchDir::new("status-page");

    // An upstream WebSocket feed that stays quiet until it is taken away.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_port = upstream.local_addr().unwrap().port();
    let feed = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = upstream.accept().await {
            if let Ok(ws) = tokio_tungstenite::accept_async(tcp).await {
                held.push(ws);
            }
        }
    });

    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = dir.join("status.toml");
    std::fs::write(
        &config,
        format!(
            "[sources.feed]\ntype = \"websocket\"\nurl = \"ws://127.0.0.1:{upstream_port}/\"\nmax_attempts = 1\nbackoff_initial_ms = 100\n\n[filters.keep]\ntype = \"when\"\ninputs = [\"ui.inbound\", \"feed\"]\nwhen = {{ type = {{ not = {{ equals = \"skip\" }} }} }}\n\n[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"keep\"]\nlisten = \"{addr}\"\n"
        ),
    )
    .unwrap();
    let _daemon = daemon(&config, addr);
    let (_chromium, mut page) = open(&dir, addr).await;

    // The wiring is drawn, and the feed is connected.
    page.wait_for(
        "the wiring with every component",
        "['feed','keep','ui','ui.inbound'].every(n => document.querySelector(`[data-node=\"${n}\"]`))",
    )
    .await;
    page.wait_for(
        "the feed connected",
        "document.querySelector('[data-node=\"feed\"]').getAttribute('class') === 'node ok'",
    )
    .await;
    page.wait_for(
        "the overall status ok",
        "document.getElementById('overall').textContent === 'ok'",
    )
    .await;

    // A posted signal appears in the live tail, without a reload.
    let answer = post(
        addr,
        r#"{"type":"hello.page","payload":{"from":"the test"}}"#,
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    page.wait_for(
        "the posted signal in the tail",
        "[...document.querySelectorAll('#tail li')].some(li => li.dataset.type === 'hello.page')",
    )
    .await;
    page.wait_for(
        "the counters of the sidecar",
        "Number(document.querySelector('tr[data-component=\"ui\"] td:nth-child(7)').textContent) >= 1",
    )
    .await;
    page.screenshot("status-page-live.png").await;

    // The upstream dies: the feed turns failed on the page.
    feed.abort();
    let _ = feed.await;
    page.wait_for(
        "the feed failed",
        "document.querySelector('[data-node=\"feed\"]').getAttribute('class') === 'node failed'",
    )
    .await;
    page.wait_for(
        "the failure in the table",
        "document.querySelector('tr[data-component=\"feed\"]').dataset.state === 'failed'",
    )
    .await;
    // The daemon as a whole, as /health says it: degraded, and which component failed.
    page.wait_for(
        "the overall status degraded",
        "document.getElementById('overall').textContent === 'degraded (failed: feed)'",
    )
    .await;
    page.screenshot("status-page-failed.png").await;
}

/// Posts a Claude Code hook (as its http hooks do) and returns the answer's body; blocks
/// while the gate holds the call.
fn hook(port: u16, body: &Value) -> String {
    let body = body.to_string();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        stream,
        "POST /hook HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    response
}

/// An agent's call held by the gate shows on the page with its buttons; a click on Deny
/// answers it (the agent gets the denial and goes on), and the page shows the agent and
/// that nothing waits any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_the_agents_and_answers_a_waiting_approval() {
    let dir = ScratchDir::new("status-page-approvals");
    let (port, hooks) = (free_port(), free_port());
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = dir.join("approvals.toml");
    std::fs::write(
        &config,
        format!(
            "[outputs.claude]\ntype = \"claude_code\"\ninputs = [\"ui.inbound\"]\nlisten = \"127.0.0.1:{hooks}\"\ngate = {{ tools = [\"Bash\"], timeout_ms = 120000, default = \"allow\" }}\n\n[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"claude.inbound\"]\nlisten = \"{addr}\"\n"
        ),
    )
    .unwrap();
    let _daemon = daemon(&config, addr);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", hooks)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no hook endpoint"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_chromium, mut page) = open(&dir, addr).await;
    page.wait_for(
        "the wiring",
        "!!document.querySelector('[data-node=\"claude\"]')",
    )
    .await;
    // The page's tail is connected (it is the sidecar's one client), so it sees the
    // agent's signals from the first.
    page.wait_for(
        "the tail connected",
        "document.getElementById('where').textContent.includes('1 client')",
    )
    .await;

    let call = json!({"hook_event_name": "PreToolUse", "session_id": "session-page",
        "cwd": "/tmp", "transcript_path": "/tmp/none.jsonl", "tool_name": "Bash",
        "tool_input": {"command": "rm -rf build"}, "tool_use_id": "toolu_page"});
    let held = std::thread::spawn(move || hook(hooks, &call));
    page.wait_for(
        "the approval waiting, with its buttons",
        "!!document.querySelector('#pending li[data-prompt=\"toolu_page\"] button.deny')",
    )
    .await;
    page.wait_for(
        "the agent waiting",
        "document.querySelector('tr[data-agent=\"session-page\"] td.state')?.textContent === 'waiting'",
    )
    .await;
    page.screenshot("status-page-approval.png").await;

    page.eval(
        "document.querySelector('#pending li[data-prompt=\"toolu_page\"] button.deny').click()",
    )
    .await;
    let answer = tokio::task::spawn_blocking(move || held.join().expect("the hook"))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let body: Value = serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(
        body["hookSpecificOutput"]["permissionDecision"], "deny",
        "{body}"
    );
    page.wait_for(
        "nothing waiting any more",
        "!!document.querySelector('#pending li.none')",
    )
    .await;
    page.wait_for(
        "the agent going on",
        "document.querySelector('tr[data-agent=\"session-page\"] td.state')?.textContent === 'thinking'",
    )
    .await;
}
