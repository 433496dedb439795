//! End-to-end check of `wrap --protocol jte`, run by the adapter's test
//! (`adapters/jte/tests/wrap.rs`, which runs the wrap in a copy of itself) and the root test
//! `tests/jte_wrap.rs` (which runs the real `patchbay` binary). Behind the `jte-wrap-e2e`
//! feature.
//!
//! The test opens a pseudo-terminal itself (the user's terminal) and runs the wrap on it,
//! with a shell script as the wrapped program. The script prints ordinary output and JSON
//! terminal escapes in every accepted form (exact num-bytes, num-bytes 0, no num-bytes;
//! BEL, `ESC \` and 0x9C terminators; a malformed one), as one byte stream split at
//! pseudo-random byte boundaries across `printf` calls with short sleeps between some of
//! them. A stand-in sidecar (axum) takes `POST /signal` and serves `GET /ws`. Checked:
//!
//! - what the user's terminal shows is the ordinary output only (another OSC included),
//!   and the window size reached the program;
//! - the signals arrive at the sidecar in order;
//! - of the frames the sidecar sends, only the `control.pause` addressed to the wrap comes
//!   back on the program's input, as the exact OSC 23199 command;
//! - the program's exit code is the wrap's.
//!
//! Timeouts are failure guards only.

// The test plays the user's terminal: libc calls on the pseudo-terminal it opens.
#![allow(unsafe_code)]

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::scratch::ScratchDir;
use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{RawQuery, State};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const ESC: &str = "\x1b";
const GUARD: Duration = Duration::from_secs(60);

/// The OSC 23199 command the program must receive for the addressed `control.pause`.
pub fn expected_control() -> Vec<u8> {
    let body = r#"{"command":"control:pause","data":{"target":"sh"}}"#;
    format!("{ESC}]23199;{};{body}\x07", body.len()).into_bytes()
}

fn escape_with_len(json: &str, terminator: &str) -> String {
    format!("{ESC}]23198;{};{json}{terminator}", json.len())
}

/// The program's output before it reads its input: `(bytes, what the terminal must show,
/// the signals' types)`.
fn first_part() -> (Vec<u8>, String) {
    let text_delta = r#"{"command":"text_delta","data":{"content":"hello"}}"#;
    let state = r#"{"command":"agent_state_change","data":{"from":"idle","to":"thinking"}}"#;
    let tool =
        r#"{"command":"tool_call","rpcid":"r1","data":{"toolName":"ls","input":{"path":"."}}}"#;
    let custom = r#"{"command":"my.event","data":{"n":1}}"#;
    let mut out: Vec<u8> = Vec::new();
    let mut shown = String::new();
    let mut text = |out: &mut Vec<u8>, s: &str| {
        out.extend_from_slice(s.as_bytes());
        shown.push_str(s);
    };
    text(&mut out, "starting agent\n");
    // Exact num-bytes, BEL.
    out.extend_from_slice(escape_with_len(text_delta, "\x07").as_bytes());
    text(&mut out, "line one\n");
    // num-bytes 0, ESC \.
    out.extend_from_slice(format!("{ESC}]23198;0;{state}{ESC}\\").as_bytes());
    // Another OSC (a window title) is ordinary output.
    text(&mut out, &format!("{ESC}]0;title\x07"));
    text(&mut out, "mid");
    // No num-bytes (Wave Terminal's form), C1 ST.
    out.extend_from_slice(format!("{ESC}]23198;{tool}").as_bytes());
    out.push(0x9c);
    text(&mut out, "dle\n");
    // Malformed: num-bytes does not match the payload.
    out.extend_from_slice(format!("{ESC}]23198;5;{custom}\x07").as_bytes());
    text(&mut out, "after bad\n");
    // No num-bytes, BEL; then num-bytes 0, BEL.
    out.extend_from_slice(format!("{ESC}]23198;{custom}\x07").as_bytes());
    out.extend_from_slice(
        format!(
            "{ESC}]23198;0;{}\x07",
            r#"{"command":"my.event","data":{"n":2}}"#
        )
        .as_bytes(),
    );
    text(&mut out, "done printing\n");
    (out, shown)
}

/// A tiny deterministic generator (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// `printf` commands printing `bytes` in pieces split at random boundaries, every byte as
/// an octal escape.
fn printf_split(bytes: &[u8], rng: &mut Rng) -> String {
    let mut script = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let n = 1 + rng.below(12) as usize;
        let end = (i + n).min(bytes.len());
        script.push_str("printf '");
        for b in &bytes[i..end] {
            script.push_str(&format!("\\{b:03o}"));
        }
        script.push_str("'\n");
        if rng.below(4) == 0 {
            script.push_str("sleep 0.02\n");
        }
        i = end;
    }
    script
}

#[derive(Clone)]
struct Sidecar {
    signals: mpsc::UnboundedSender<Value>,
    sockets: mpsc::UnboundedSender<(Option<String>, mpsc::UnboundedSender<String>)>,
}

async fn post_signal(State(s): State<Sidecar>, body: String) -> axum::Json<Value> {
    let value: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let items = match value {
        Value::Array(items) => items,
        other => vec![other],
    };
    let n = items.len();
    for item in items {
        let _ = s.signals.send(item);
    }
    axum::Json(json!({ "ok": true, "ids": vec![Value::Null; n], "clients": 0 }))
}

async fn ws(
    State(s): State<Sidecar>,
    RawQuery(query): RawQuery,
    upgrade: WebSocketUpgrade,
) -> axum::response::Response {
    upgrade.on_upgrade(move |socket| serve_socket(socket, query, s))
}

async fn serve_socket(mut socket: WebSocket, query: Option<String>, s: Sidecar) {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let _ = s.sockets.send((query, tx));
    loop {
        tokio::select! {
            frame = rx.recv() => match frame {
                Some(text) => if socket.send(Message::Text(text.into())).await.is_err() { return },
                None => return,
            },
            incoming = socket.recv() => match incoming {
                Some(Ok(_)) => {}
                _ => return,
            },
        }
    }
}

/// The user's terminal: a pseudo-terminal of `rows` × `cols`, opened as `wrap` opens its own.
fn open_terminal(rows: u16, cols: u16) -> (OwnedFd, OwnedFd) {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = patchbay_jte::pty::open_pty(Some(size)).expect("openpty");
    (pty.master, pty.slave)
}

/// A wrap running in a terminal the test opened, with a stand-in sidecar.
struct Session {
    runtime: tokio::runtime::Runtime,
    signals: mpsc::UnboundedReceiver<Value>,
    sockets: mpsc::UnboundedReceiver<(Option<String>, mpsc::UnboundedSender<String>)>,
    child: Option<std::process::Child>,
    pid: u32,
    screen: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    stderr: Option<std::thread::JoinHandle<String>>,
    /// A copy of the terminal's master side, to read its settings.
    terminal: OwnedFd,
}

impl Session {
    /// Starts the sidecar, opens a 40×100 terminal and runs the wrap of `program` on it
    /// (as the leader of a session whose controlling terminal it is, like a shell's job).
    fn start(wrap_command: impl FnOnce(&str, &[String]) -> Command, program: &[String]) -> Session {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (signal_tx, signals) = mpsc::unbounded_channel();
        let (socket_tx, sockets) = mpsc::unbounded_channel();
        let sidecar = Sidecar {
            signals: signal_tx,
            sockets: socket_tx,
        };
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let app = Router::new()
            .route("/signal", post(post_signal))
            .route("/ws", get(ws))
            .with_state(sidecar);
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });

        let (master, slave) = open_terminal(40, 100);
        let terminal = master.try_clone().expect("dup");
        let to = format!("http://127.0.0.1:{port}");
        let mut command = wrap_command(&to, program);
        command
            .stdin(Stdio::from(slave.try_clone().expect("dup")))
            .stdout(Stdio::from(slave.try_clone().expect("dup")))
            .stderr(Stdio::piped());
        // SAFETY: async-signal-safe calls only, in the child before exec.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                libc::ioctl(0, libc::TIOCSCTTY as _, 0);
                Ok(())
            });
        }
        let mut child = command.spawn().expect("the wrap starts");
        // The command keeps its copies of the slave side: the terminal ends only when the
        // wrap and its program have closed theirs.
        drop(command);
        drop(slave);
        let pid = child.id();

        let screen = Arc::new(Mutex::new(Vec::<u8>::new()));
        let reader = {
            let screen = screen.clone();
            std::thread::spawn(move || {
                let mut file = std::fs::File::from(master);
                let mut buf = [0u8; 4096];
                loop {
                    match file.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => screen.lock().expect("lock").extend_from_slice(&buf[..n]),
                    }
                }
            })
        };
        let stderr = {
            let mut pipe = child.stderr.take().expect("stderr");
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        };
        Session {
            runtime,
            signals,
            sockets,
            child: Some(child),
            pid,
            screen,
            reader: Some(reader),
            stderr: Some(stderr),
            terminal,
        }
    }

    fn fail(&self, what: &str) -> ! {
        // SAFETY: signals the process this test started, by its pid.
        unsafe {
            libc::kill(self.pid as libc::pid_t, libc::SIGKILL);
        }
        let screen = String::from_utf8_lossy(&self.screen.lock().expect("lock")).into_owned();
        panic!("{what}\nterminal so far: {screen:?}");
    }

    /// The control WebSocket the wrap opened: its query and a way to send it frames.
    fn control_socket(&mut self) -> (Option<String>, mpsc::UnboundedSender<String>) {
        let (runtime, sockets) = (&self.runtime, &mut self.sockets);
        let got = runtime.block_on(async { tokio::time::timeout(GUARD, sockets.recv()).await });
        match got {
            Ok(Some(socket)) => socket,
            _ => self.fail("the wrap never opened the control WebSocket"),
        }
    }

    /// Signals received until (and with) one of type `kind`.
    fn signals_until(&mut self, kind: &str, signals: &mut Vec<Value>) {
        self.signals_until_match(kind, |s| s["type"] == kind, signals);
    }

    /// Signals received until (and with) one matching `wanted` (described by `what`).
    fn signals_until_match(
        &mut self,
        what: &str,
        wanted: impl Fn(&Value) -> bool,
        signals: &mut Vec<Value>,
    ) {
        loop {
            let (runtime, rx) = (&self.runtime, &mut self.signals);
            let got = runtime.block_on(async { tokio::time::timeout(GUARD, rx.recv()).await });
            match got {
                Ok(Some(s)) => {
                    let done = wanted(&s);
                    signals.push(s);
                    if done {
                        return;
                    }
                }
                _ => self.fail(&format!("no `{what}` signal; got {signals:?}")),
            }
        }
    }

    /// Whether the terminal is in canonical (cooked) mode.
    fn canonical(&self) -> bool {
        // SAFETY: termios is plain data, filled by tcgetattr on a descriptor we own.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe { libc::tcgetattr(self.terminal.as_raw_fd(), &mut t) };
        assert_eq!(rc, 0, "tcgetattr");
        t.c_lflag & libc::ICANON != 0
    }

    /// Waits for the wrap to exit; returns its status, what it wrote on stderr and what
    /// the terminal showed (without `\r`).
    fn finish(&mut self) -> (std::process::ExitStatus, String, String) {
        let mut child = self.child.take().expect("running");
        let waited = self.runtime.block_on(async {
            tokio::time::timeout(GUARD, tokio::task::spawn_blocking(move || child.wait())).await
        });
        let status = match waited {
            Ok(Ok(Ok(status))) => status,
            _ => self.fail("the wrap did not exit"),
        };
        let stderr = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        if let Some(reader) = self.reader.take() {
            reader.join().expect("reader");
        }
        let screen = String::from_utf8_lossy(&self.screen.lock().expect("lock")).replace('\r', "");
        (status, stderr, screen)
    }
}

/// Runs the check. `wrap_command(to, program)` builds the command that wraps `program`
/// (e.g. `patchbay wrap --protocol jte --to TO -- PROGRAM…`).
pub fn run(wrap_command: impl FnOnce(&str, &[String]) -> Command) {
    let seed = std::env::var("JTE_WRAP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15u64);
    eprintln!("jte wrap e2e: seed {seed} (set JTE_WRAP_SEED to repeat)");
    let mut rng = Rng(seed | 1);

    let dir = ScratchDir::new("jte-wrap");
    let control_file = dir.join("control.hex");
    let (first, mut shown) = first_part();
    let expected = expected_control();
    let mut script = String::from("#!/bin/sh\n");
    script.push_str(&printf_split(&first, &mut rng));
    script.push_str("stty size\n");
    script.push_str("stty raw -echo\n");
    script.push_str(&printf_split(
        format!("{ESC}]23198;{}\x07", r#"{"command":"ready"}"#).as_bytes(),
        &mut rng,
    ));
    script.push_str(&format!(
        "head -c {} | od -An -tx1 > '{}'\n",
        expected.len(),
        control_file.display()
    ));
    script.push_str("printf 'bye\\n'\nexit 3\n");
    let script_path = dir.join("agent.sh");
    std::fs::write(&script_path, &script).expect("write script");
    shown.push_str("40 100\nbye\n");

    let mut session = Session::start(
        wrap_command,
        &["sh".into(), script_path.display().to_string()],
    );
    // The wrap subscribes to control signals, then the program says it is ready.
    let (query, socket) = session.control_socket();
    assert_eq!(query.as_deref(), Some("types=control.*"));
    let mut signals = Vec::new();
    session.signals_until("ready", &mut signals);
    assert!(!session.canonical(), "the user's terminal is in raw mode");
    // Only the last frame is for this wrap.
    for frame in [
        json!({"id":"c1","type":"control.pause","timestamp":1,"source":"ui.inbound","payload":{"target":"other"},"metadata":{"seq":1}}),
        json!({"id":"t1","type":"text_delta","timestamp":1,"source":"x","payload":{"content":"no"},"metadata":{"seq":2}}),
        json!({"id":"c2","type":"control.pause","timestamp":2,"source":"ui.inbound","payload":{"target":"sh"},"metadata":{"seq":3}}),
    ] {
        socket.send(frame.to_string()).expect("socket open");
    }

    let (status, stderr, screen) = session.finish();
    // Signals still in flight when `ready` arrived.
    while let Ok(s) = session.signals.try_recv() {
        signals.push(s);
    }

    assert_eq!(status.code(), Some(3), "exit code; stderr: {stderr}");
    assert!(session.canonical(), "the user's terminal is restored");
    assert_eq!(screen, shown, "the terminal shows the ordinary output only");
    let got = std::fs::read_to_string(&control_file).expect("the program wrote what it read");
    let bytes: Vec<u8> = got
        .split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).expect("hex"))
        .collect();
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        String::from_utf8_lossy(&expected),
        "the program's input"
    );

    let types: Vec<&str> = signals
        .iter()
        .map(|s| s["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        types,
        [
            "text_delta",
            "agent_state_change",
            "tool_call",
            "error",
            "my.event",
            "my.event",
            "ready"
        ],
        "signals in order: {signals:#?}"
    );
    for s in &signals {
        assert_eq!(s["source"], "jte:sh");
    }
    assert_eq!(signals[0]["payload"]["content"], "hello");
    assert_eq!(signals[1]["payload"]["to"], "thinking");
    assert_eq!(signals[2]["payload"]["toolName"], "ls");
    assert_eq!(signals[2]["correlationId"], "r1");
    assert_eq!(signals[3]["payload"]["code"], "bad_frame");
    assert_eq!(signals[4]["payload"]["n"], 1);
    assert_eq!(signals[5]["payload"]["n"], 2);
}

/// Signals sent to the wrap reach the program's process group: `SIGTERM` kills the
/// program, and the wrap exits with `128 + 15`, the user's terminal restored.
pub fn run_signal_forwarding(wrap_command: impl FnOnce(&str, &[String]) -> Command) {
    let dir = ScratchDir::new("jte-wrap");
    let script = format!(
        "#!/bin/sh\nprintf '{ESC}]23198;0;{{\"command\":\"ready\"}}\\007'\nsleep 60\nexit 0\n"
    );
    let script_path = dir.join("sleeper.sh");
    std::fs::write(&script_path, script).expect("write script");
    let mut session = Session::start(
        wrap_command,
        &["sh".into(), script_path.display().to_string()],
    );
    let mut signals = Vec::new();
    session.signals_until("ready", &mut signals);
    assert!(!session.canonical(), "the user's terminal is in raw mode");
    // SAFETY: signals the process this test started, by its pid.
    unsafe {
        libc::kill(session.pid as libc::pid_t, libc::SIGTERM);
    }
    let (status, stderr, _) = session.finish();
    assert_eq!(status.code(), Some(128 + 15), "exit code; stderr: {stderr}");
    assert!(session.canonical(), "the user's terminal is restored");
}

/// Without a reachable patchbay the program runs as usual: its output passes, its exit
/// code is kept, and the wrap warns (once) on stderr that signals are dropped.
pub fn run_without_patchbay(wrap_command: impl FnOnce(&str, &[String]) -> Command) {
    let dir = ScratchDir::new("jte-wrap");
    // A port nothing listens on: bind one, then close it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let script = format!(
        "#!/bin/sh\nprintf 'one\\n{ESC}]23198;0;{{\"command\":\"x\"}}\\007two\\n'\nexit 7\n"
    );
    let script_path = dir.join("lonely.sh");
    std::fs::write(&script_path, script).expect("write script");
    let mut session = Session::start(
        |_, program| wrap_command(&format!("http://127.0.0.1:{closed}"), program),
        &["sh".into(), script_path.display().to_string()],
    );
    let (status, stderr, screen) = session.finish();
    assert_eq!(status.code(), Some(7), "exit code; stderr: {stderr}");
    assert_eq!(screen, "one\ntwo\n");
    assert_eq!(
        stderr.matches("cannot publish").count(),
        1,
        "one warning: {stderr}"
    );
}

/// The example agent (`adapters/jte/examples/shell-agent.sh`) under the wrap: it reports
/// its steps, and `control.pause`, `control.continue` and `control.quit` sent by the
/// sidecar pause, resume and stop it.
pub fn run_example_agent(wrap_command: impl FnOnce(&str, &[String]) -> Command) {
    let example = crate::project_root().join("adapters/jte/examples/shell-agent.sh");
    assert!(
        example.exists(),
        "the example script: {}",
        example.display()
    );
    let mut session = Session::start(
        |to, program| {
            let mut command = wrap_command(to, program);
            // Enough steps that it is still running when the controls arrive.
            command.env("SHELL_AGENT_STEPS", "1000000");
            command
        },
        &["sh".into(), example.display().to_string()],
    );
    let (_, socket) = session.control_socket();
    let control = |kind: &str| {
        let frame = json!({"id": kind, "type": kind, "timestamp": 1, "source": "ui.inbound", "payload": {}});
        socket.send(frame.to_string()).expect("socket open");
    };
    let mut signals = Vec::new();
    session.signals_until("tool_call", &mut signals);
    control("control.pause");
    let state_to = |to: &'static str| {
        move |s: &Value| s["type"] == "agent_state_change" && s["payload"]["to"] == to
    };
    session.signals_until_match("→waiting", state_to("waiting"), &mut signals);
    control("control.continue");
    session.signals_until_match("→acting", state_to("acting"), &mut signals);
    session.signals_until("tool_call", &mut signals);
    control("control.quit");
    session.signals_until("completion", &mut signals);
    let (status, stderr, screen) = session.finish();
    assert_eq!(status.code(), Some(0), "exit code; stderr: {stderr}");
    for line in ["step 1\n", "paused\n", "continuing\n", "quit requested\n"] {
        assert!(screen.contains(line), "{line:?} in {screen:?}");
    }
    assert!(
        !screen.contains("\x1b]2319"),
        "no escape reaches the terminal"
    );
    let last = signals.last().expect("signals");
    assert_eq!(last["payload"]["result"], "quit");
    for s in &signals {
        assert_eq!(s["source"], "jte:sh");
        crate::assert_schema_valid(s);
    }
}
