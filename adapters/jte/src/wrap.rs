//! `patchbay wrap --protocol jte [--to URL] [--name NAME] -- COMMAND…`: the transport.
//!
//! Runs the program in a pseudo-terminal and sits between it and the user's terminal:
//!
//! - **Output**: the program's output goes to the user's terminal with the JSON terminal
//!   escapes removed ([`JteDecoder::feed_terminal`]); each decoded command becomes a signal
//!   from source `jte:NAME`. A sequence prefix the parser holds back (`ESC ] 231…`) is
//!   released as text after [`UNDECIDED_FLUSH`] without output, so the terminal is never
//!   left waiting.
//! - **Publishing**: signals are posted to a running patchbay (`POST {to}/signal`, JSON
//!   array batches, in order) from a bounded buffer ([`PUBLISH_BUFFER`]): the terminal
//!   never waits for patchbay. When the buffer is full, or patchbay is unreachable, signals
//!   are dropped and one warning per episode is written on stderr.
//! - **Control**: the wrap subscribes to the sidecar's WebSocket (`GET {to as ws}/ws?types=
//!   control.*`, sajou-format envelopes) and writes each `control.*` signal addressed to it
//!   to the program's input as an OSC 23199 command ([`encode_control`]). Addressing: a
//!   control signal is for this wrap when its `payload.target` is absent or null, or is
//!   NAME or `jte:NAME` (a string, or an array containing one of them). NAME is `--name`,
//!   by default the command's basename. The subscription reconnects with backoff; controls
//!   sent while it is down are not replayed (a stale pause is worse than none).
//! - **Terminal**: when stdin is a terminal it is put in raw mode for the run (every key,
//!   Ctrl-C included, reaches the program through its own pseudo-terminal) and restored on
//!   every exit path. The window size is copied at start and on every `SIGWINCH`.
//!   `SIGINT`, `SIGTERM` and `SIGHUP` sent to patchbay are forwarded to the program's
//!   process group (it runs as the leader of its own session).
//! - **Exit**: the program's exit code; death by signal N is `128 + N`, as in a shell.
//!   Output still arriving after the exit is passed on for up to 3 s.
//!
//! The program gets `PATCHBAY_WRAP_NAME=NAME` in its environment, so it can tell which
//! controls are its own if it wants to.
//!
//! `examples/shell-agent.sh` (in this crate) is a shell program that emits signals this way
//! and obeys `control:pause`, `control:continue` and `control:quit`.
//!
//! A program that reads controls should read its terminal in raw (non-canonical) mode: in
//! canonical mode its terminal hands over input line by line, and the escape (which ends
//! with BEL, not a newline) waits for the next Enter. Escapes the pseudo-terminal echoes
//! back are recognized as echoes and removed from the output.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{Object, Signal, control};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_tungstenite::tungstenite::Message;

use crate::pty;
use crate::{DEFAULT_MAX_PAYLOAD, JteDecoder, JteParser, encode_control};
use patchbay_transport::Backoff;

/// Where a running patchbay's sidecar listens by default.
pub const DEFAULT_TO: &str = "http://127.0.0.1:7878";
/// How many signals wait to be published before new ones are dropped.
pub const PUBLISH_BUFFER: usize = 4096;
/// Most signals in one `POST /signal`.
pub const PUBLISH_BATCH: usize = 256;
/// How long a held sequence prefix waits for more output before it is shown as text.
pub const UNDECIDED_FLUSH: Duration = Duration::from_secs(2);
/// After the program exits, how long output still arriving is waited for.
const DRAIN_GRACE: Duration = Duration::from_millis(500);
/// After the program exits, the longest the output is drained.
const DRAIN_LIMIT: Duration = Duration::from_secs(3);
/// After the program exits, how long queued signals may take to be published.
const PUBLISH_GRACE: Duration = Duration::from_secs(3);
/// Timeout of one publishing request.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);

/// What `patchbay wrap --protocol jte` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrapOptions {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// The running patchbay's sidecar base URL (`http://host:port`).
    pub to: String,
    /// The name control signals address (`payload.target`) and the source is named after
    /// (`jte:NAME`); `None`: the command's basename.
    pub name: Option<String>,
    /// Largest escape payload accepted, in bytes.
    pub max_payload: usize,
}

impl WrapOptions {
    /// Options for `command`, publishing to `to`, with the defaults.
    pub fn new(command: Vec<String>, to: impl Into<String>) -> Self {
        WrapOptions {
            command,
            to: to.into(),
            name: None,
            max_payload: DEFAULT_MAX_PAYLOAD,
        }
    }

    /// The name in use: `name`, else the command's basename, else `wrap`.
    pub fn effective_name(&self) -> String {
        self.name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| command_name(&self.command))
    }
}

/// Why the wrap's URLs cannot be made from `--to`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Only plain `http://` (and `ws://`) is supported: the sidecar listens on loopback.
    #[error("`{0}` is not an http:// URL (the sidecar's address, e.g. {DEFAULT_TO})")]
    Scheme(String),
}

/// Why a wrap could not start its program, or lost track of it. Once the program runs,
/// problems talking to patchbay are warnings, not errors.
#[derive(Debug, thiserror::Error)]
pub enum WrapError {
    /// No program was given.
    #[error("wrap needs a command to run (after `--`)")]
    NoCommand,
    /// `--to` is not the sidecar's address.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// No pseudo-terminal could be opened.
    #[error("cannot open a pseudo-terminal")]
    Pty(#[source] io::Error),
    /// The program could not be started.
    #[error("cannot run `{program}`")]
    Spawn {
        /// The program, as given.
        program: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The HTTP client that publishes signals could not be built.
    #[error("cannot build the HTTP client")]
    HttpClient(#[source] reqwest::Error),
    /// A system call failed: the terminal's setup, the signal handlers, waiting for the
    /// program.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The basename of a command's program (`/usr/bin/claude` → `claude`).
pub fn command_name(command: &[String]) -> String {
    command
        .first()
        .and_then(|p| p.rsplit('/').find(|s| !s.is_empty()))
        .map_or_else(|| "wrap".to_owned(), str::to_owned)
}

fn base(to: &str) -> Result<(&'static str, &str), UrlError> {
    let to = to.trim().trim_end_matches('/');
    if let Some(rest) = to.strip_prefix("http://") {
        Ok(("http://", rest))
    } else if let Some(rest) = to.strip_prefix("ws://") {
        Ok(("http://", rest))
    } else {
        Err(UrlError::Scheme(to.to_owned()))
    }
}

/// `POST` target for signals: `{to}/signal`.
pub fn signal_url(to: &str) -> Result<String, UrlError> {
    let (scheme, rest) = base(to)?;
    Ok(format!("{scheme}{rest}/signal"))
}

/// The control subscription: `ws://…/ws?types=control.*`.
pub fn control_url(to: &str) -> Result<String, UrlError> {
    let (_, rest) = base(to)?;
    Ok(format!("ws://{rest}/ws?types=control.*"))
}

/// Whether a control signal's payload addresses the wrap named `name` (see the module
/// docs).
pub fn is_addressed_to(payload: &Object, name: &str) -> bool {
    let matches = |t: &str| t == name || t.strip_prefix("jte:") == Some(name);
    match payload.get("target") {
        None | Some(Value::Null) => true,
        Some(Value::String(t)) => matches(t),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).any(matches),
        Some(_) => false,
    }
}

/// The control signal in a sidecar WebSocket frame, when it is one addressed to `name`.
pub fn control_for(frame: &str, name: &str) -> Option<Signal> {
    let Ok(Value::Object(mut obj)) = serde_json::from_str::<Value>(frame) else {
        return None;
    };
    let kind = obj.get("type").and_then(Value::as_str)?.to_owned();
    if !control::is_control(&kind) {
        return None;
    }
    let payload = match obj.remove("payload") {
        Some(Value::Object(p)) => p,
        _ => Object::new(),
    };
    if !is_addressed_to(&payload, name) {
        return None;
    }
    let source = obj
        .get("source")
        .and_then(Value::as_str)
        .unwrap_or("patchbay")
        .to_owned();
    let mut signal = Signal::new(kind, source, payload);
    if let Some(id) = obj.get("id").and_then(Value::as_str) {
        signal.id = id.into();
    }
    Some(signal)
}

/// The shell-style exit code of a finished program: its code, or `128 + N` when signal N
/// killed it.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// `patchbay wrap --protocol jte --to URL -- COMMAND…` with the default name and limits:
/// see [`wrap_with`].
pub async fn wrap(command: Vec<String>, to: String) -> Result<i32, WrapError> {
    wrap_with(WrapOptions::new(command, to)).await
}

/// Runs the wrap (see the module docs) and returns the program's exit code. Errors are
/// failures to start (no command, a bad URL, no pseudo-terminal, a program that cannot be
/// run); once the program runs, problems talking to patchbay are warnings.
pub async fn wrap_with(options: WrapOptions) -> Result<i32, WrapError> {
    let (program, args) = options.command.split_first().ok_or(WrapError::NoCommand)?;
    let name = options.effective_name();
    let post_url = signal_url(&options.to)?;
    let ws_url = control_url(&options.to)?;

    let size = pty::window_size(1).or_else(|| pty::window_size(0));
    let pty::Pty { master, slave } = pty::open_pty(size).map_err(WrapError::Pty)?;
    let mut command = pty::command_on(program, args, &slave)?;
    command.env("PATCHBAY_WRAP_NAME", &name);
    let mut child = command.spawn().map_err(|source| WrapError::Spawn {
        program: program.clone(),
        source,
    })?;
    // The program holds the slave now; our copy would keep the master from seeing the end.
    drop(slave);
    drop(command);
    let pgid = child.id();

    let raw = if pty::is_tty(0) {
        match pty::RawMode::enable(0) {
            Ok(guard) => Some(guard),
            Err(err) => {
                warn(&format!("cannot put the terminal in raw mode: {err}"));
                None
            }
        }
    } else {
        None
    };

    pty::set_nonblocking(master.as_raw_fd())?;
    // SAFETY: the AsyncFd owns `master`, which stays open, and the same descriptor, for its
    // whole life.
    #[allow(unsafe_code)]
    let master = unsafe { AsyncFd::register(master) }.map_err(|e| e.into_parts().1)?;
    let master = Arc::new(master);

    let (input_tx, input_rx) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(write_input(master.clone(), input_rx));
    spawn_stdin_reader(input_tx.clone());
    let controls = tokio::spawn(control_loop(ws_url, name.clone(), input_tx));
    let mut publisher = Publisher::start(post_url)?;

    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let mut winch = signal(SignalKind::window_change())?;

    let source = format!("jte:{name}");
    let mut decoder =
        JteDecoder::with_parser(source, JteParser::with_max_payload(options.max_payload));
    let mut out = Terminal::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut master_open = true;

    let status = loop {
        let undecided = !decoder.parser_mut().is_idle();
        tokio::select! {
            read = read_master(&master, &mut buf), if master_open => match read {
                Ok(0) | Err(_) => master_open = false,
                Ok(n) => {
                    let chunk = buf.get(..n).unwrap_or_default();
                    out.feed(&mut decoder, &mut publisher, chunk).await;
                }
            },
            status = child.wait() => break status?,
            _ = sigint.recv() => forward(pgid, libc::SIGINT),
            _ = sigterm.recv() => forward(pgid, libc::SIGTERM),
            _ = sighup.recv() => forward(pgid, libc::SIGHUP),
            _ = winch.recv() => {
                if let Some(size) = pty::window_size(1).or_else(|| pty::window_size(0)) {
                    let _ = pty::set_window_size(master.as_raw_fd(), &size);
                }
            }
            _ = tokio::time::sleep(UNDECIDED_FLUSH), if undecided && master_open => {
                let held = decoder.parser_mut().flush_undecided();
                out.write(&held).await;
            }
        }
    };

    // Output the program wrote just before exiting may still be in the pseudo-terminal.
    // A background process it left holding the terminal cannot keep the wrap alive.
    let drain_deadline = tokio::time::Instant::now() + DRAIN_LIMIT;
    while master_open && tokio::time::Instant::now() < drain_deadline {
        match tokio::time::timeout(DRAIN_GRACE, read_master(&master, &mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                let chunk = buf.get(..n).unwrap_or_default();
                out.feed(&mut decoder, &mut publisher, chunk).await;
            }
            _ => master_open = false,
        }
    }
    let mut passthrough = Vec::new();
    let mut decoded = Vec::new();
    decoder.finish_terminal(&mut passthrough, &mut decoded);
    out.write(&passthrough).await;
    for d in decoded {
        publisher.publish(d);
    }

    drop(raw);
    controls.abort();
    writer.abort();
    publisher.finish(PUBLISH_GRACE).await;
    Ok(exit_code(status))
}

fn forward(pgid: Option<u32>, signal: libc::c_int) {
    if let Some(pgid) = pgid {
        let _ = pty::signal_group(pgid, signal);
    }
}

/// Writes a warning on stderr (with `\r\n` when it is a terminal, which may be in raw
/// mode).
fn warn(message: &str) {
    let end = if pty::is_tty(2) { "\r\n" } else { "\n" };
    let _ = write!(io::stderr(), "patchbay wrap: {message}{end}");
}

/// The user's terminal side: passthrough output, which stops being written (and the
/// program keeps running) if stdout fails.
struct Terminal {
    stdout: tokio::io::Stdout,
    ok: bool,
}

impl Terminal {
    fn new() -> Self {
        Terminal {
            stdout: tokio::io::stdout(),
            ok: true,
        }
    }

    async fn feed(&mut self, decoder: &mut JteDecoder, publisher: &mut Publisher, chunk: &[u8]) {
        let mut passthrough = Vec::with_capacity(chunk.len());
        let mut decoded = Vec::new();
        decoder.feed_terminal(chunk, &mut passthrough, &mut decoded);
        self.write(&passthrough).await;
        for d in decoded {
            publisher.publish(d);
        }
    }

    async fn write(&mut self, bytes: &[u8]) {
        if bytes.is_empty() || !self.ok {
            return;
        }
        let written = async {
            self.stdout.write_all(bytes).await?;
            self.stdout.flush().await
        }
        .await;
        self.ok = written.is_ok();
    }
}

async fn read_master(master: &AsyncFd<OwnedFd>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        let mut guard = master.readable().await?;
        match guard.try_io(|fd| pty::read_fd(fd.as_raw_fd(), buf)) {
            Ok(Ok(n)) => return Ok(n),
            // Linux reports the closed slave side as EIO.
            Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
            Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
}

/// Writes what the user types and the control escapes to the program's input, one chunk
/// at a time (so an escape is never interleaved with keystrokes).
async fn write_input(master: Arc<AsyncFd<OwnedFd>>, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(bytes) = rx.recv().await {
        let mut rest: &[u8] = &bytes;
        while !rest.is_empty() {
            let Ok(mut guard) = master.writable().await else {
                return;
            };
            match guard.try_io(|fd| pty::write_fd(fd.as_raw_fd(), rest)) {
                Ok(Ok(n)) => rest = rest.get(n..).unwrap_or_default(),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(_)) => return,
                Err(_would_block) => {}
            }
        }
    }
}

/// Copies stdin to the program on a plain thread: a blocking read of a terminal cannot be
/// cancelled, and a thread does not hold the runtime open at exit.
fn spawn_stdin_reader(tx: mpsc::Sender<Vec<u8>>) {
    let spawned = std::thread::Builder::new()
        .name("patchbay-wrap-stdin".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match pty::read_fd(0, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let chunk = buf.get(..n).unwrap_or_default().to_vec();
                        if tx.blocking_send(chunk).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        });
    if let Err(err) = spawned {
        warn(&format!("cannot read stdin: {err}"));
    }
}

/// Receives control signals from the sidecar and queues their escapes for the program.
async fn control_loop(url: String, name: String, tx: mpsc::Sender<Vec<u8>>) {
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(10), None);
    let mut warned = false;
    loop {
        // `true`: TCP_NODELAY, so a small frame is not held back for an ACK.
        match tokio_tungstenite::connect_async_with_config(url.as_str(), None, true).await {
            Ok((mut ws, _)) => {
                backoff.reset();
                if warned {
                    warn("control channel connected");
                    warned = false;
                }
                while let Some(message) = ws.next().await {
                    match message {
                        Ok(Message::Text(text)) => {
                            let Some(signal) = control_for(text.as_str(), &name) else {
                                continue;
                            };
                            if let Ok(bytes) = encode_control(&signal)
                                && tx.send(bytes).await.is_err()
                            {
                                return;
                            }
                        }
                        Ok(Message::Close(_)) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
            }
            Err(err) => {
                if !warned {
                    warn(&format!(
                        "no control channel at {url} ({err}); retrying in the background"
                    ));
                    warned = true;
                }
            }
        }
        tokio::time::sleep(backoff.next_jittered().unwrap_or_default()).await;
    }
}

/// Publishes signals to patchbay without ever making the caller wait.
struct Publisher {
    tx: Option<mpsc::Sender<Signal>>,
    task: tokio::task::JoinHandle<()>,
    overflowing: bool,
}

impl Publisher {
    fn start(url: String) -> Result<Publisher, WrapError> {
        let client = patchbay_transport::client_builder()
            .timeout(PUBLISH_TIMEOUT)
            .build()
            .map_err(WrapError::HttpClient)?;
        let (tx, rx) = mpsc::channel(PUBLISH_BUFFER);
        let task = tokio::spawn(publish_loop(client, url, rx));
        Ok(Publisher {
            tx: Some(tx),
            task,
            overflowing: false,
        })
    }

    fn publish(&mut self, decoded: Decoded) {
        let signal = decoded.into_signal();
        let Some(tx) = &self.tx else { return };
        match tx.try_send(signal) {
            Ok(()) => self.overflowing = false,
            Err(TrySendError::Full(_)) => {
                if !self.overflowing {
                    warn("patchbay is not keeping up: dropping signals");
                    self.overflowing = true;
                }
            }
            Err(TrySendError::Closed(_)) => {}
        }
    }

    /// Lets what is queued be sent, for at most `grace`.
    async fn finish(mut self, grace: Duration) {
        self.tx = None;
        if tokio::time::timeout(grace, &mut self.task).await.is_err() {
            self.task.abort();
        }
    }
}

async fn publish_loop(client: reqwest::Client, url: String, mut rx: mpsc::Receiver<Signal>) {
    let mut down = false;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < PUBLISH_BATCH {
            match rx.try_recv() {
                Ok(s) => batch.push(s),
                Err(_) => break,
            }
        }
        let Ok(body) = serde_json::to_vec(&batch) else {
            continue;
        };
        let sent = client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status);
        match sent {
            Ok(_) if down => {
                warn(&format!("publishing to {url} again"));
                down = false;
            }
            Ok(_) => {}
            Err(err) if !down => {
                warn(&format!(
                    "cannot publish to {url} ({err}): dropping signals until patchbay is reachable"
                ));
                down = true;
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_signal::object;

    #[test]
    fn urls_from_the_sidecar_address() {
        assert_eq!(
            signal_url("http://127.0.0.1:7878/").as_deref(),
            Ok("http://127.0.0.1:7878/signal")
        );
        assert_eq!(
            control_url(DEFAULT_TO).as_deref(),
            Ok("ws://127.0.0.1:7878/ws?types=control.*")
        );
        assert_eq!(
            control_url("ws://[::1]:9/p").as_deref(),
            Ok("ws://[::1]:9/p/ws?types=control.*")
        );
        assert!(matches!(
            signal_url("https://example"),
            Err(UrlError::Scheme(_))
        ));
    }

    #[test]
    fn the_name_is_the_basename_unless_given() {
        let cmd = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(command_name(&cmd(&["/usr/bin/claude", "-p"])), "claude");
        assert_eq!(command_name(&cmd(&["sh"])), "sh");
        assert_eq!(command_name(&[]), "wrap");
        let mut options = WrapOptions::new(cmd(&["./agent.sh"]), DEFAULT_TO);
        assert_eq!(options.effective_name(), "agent.sh");
        options.name = Some("bot".into());
        assert_eq!(options.effective_name(), "bot");
    }

    #[test]
    fn addressing_by_payload_target() {
        assert!(is_addressed_to(&object! {}, "sh"));
        assert!(is_addressed_to(&object! {"target" => Value::Null}, "sh"));
        assert!(is_addressed_to(&object! {"target" => "sh"}, "sh"));
        assert!(is_addressed_to(&object! {"target" => "jte:sh"}, "sh"));
        assert!(is_addressed_to(
            &object! {"target" => serde_json::json!(["x", "sh"])},
            "sh"
        ));
        assert!(!is_addressed_to(&object! {"target" => "other"}, "sh"));
        assert!(!is_addressed_to(&object! {"target" => "jte:other"}, "sh"));
        assert!(!is_addressed_to(&object! {"target" => 3}, "sh"));
    }

    #[test]
    fn control_frames_become_escapes_others_are_ignored() {
        let frame = r#"{"id":"s1","type":"control.step","timestamp":1,"source":"ui.inbound","payload":{"n":2},"metadata":{"seq":4}}"#;
        let signal = control_for(frame, "sh").expect("a control");
        assert_eq!(signal.kind, "control.step");
        assert_eq!(signal.id, "s1");
        let bytes = encode_control(&signal).expect("encodes");
        assert_eq!(
            bytes,
            b"\x1b]23199;41;{\"command\":\"control:step\",\"data\":{\"n\":2}}\x07"
        );
        assert!(control_for(r#"{"type":"text_delta","payload":{}}"#, "sh").is_none());
        assert!(
            control_for(r#"{"type":"control.pause","payload":{"target":"x"}}"#, "sh").is_none()
        );
        assert!(control_for(r#"{"kind":"lagged","seq":3}"#, "sh").is_none());
        assert!(control_for("not json", "sh").is_none());
        let bare = control_for(r#"{"type":"control.pause"}"#, "sh").expect("a control");
        assert!(bare.payload.is_empty());
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(3 << 8)), 3);
        // Killed by SIGTERM (15).
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(15)), 143);
    }
}
