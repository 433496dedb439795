//! `patchbay wrap --protocol codelia -- COMMAND…`: sits between a UI and its runtime,
//! relays both byte streams untouched, and publishes what it decodes on the side.

use std::collections::HashMap;
use std::io::Read;
use std::time::Duration;

use patchbay_signal::decode::{DEFAULT_MAX_LINE, LineSplitter};
use patchbay_signal::normalize::Decoded;
use patchbay_transport::publish::{Publisher, exit_code};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::mpsc;

use crate::decode::{CodeliaDecoder, id_key, line_text};
use patchbay_signal::decode::FrameDecoder as _;

pub use patchbay_transport::publish::DEFAULT_PUBLISH_URL;

/// Watches a Codelia conversation from the side: runtime → UI lines are decoded into
/// signals; UI → runtime lines keep the decoder's bookkeeping right (an answered
/// `ui.*.request` is no longer pending). Pure: bytes in, signals out.
#[derive(Debug)]
pub struct WrapObserver {
    decoder: CodeliaDecoder,
    from_runtime: LineSplitter,
    from_ui: LineSplitter,
    ui_requests: HashMap<String, String>,
}

impl WrapObserver {
    /// An observer whose signals come from `source`.
    pub fn new(source: impl Into<String>) -> Self {
        WrapObserver {
            decoder: CodeliaDecoder::new(source),
            from_runtime: LineSplitter::new(DEFAULT_MAX_LINE),
            from_ui: LineSplitter::new(DEFAULT_MAX_LINE),
            ui_requests: HashMap::new(),
        }
    }

    /// The decoder (current run, pending requests).
    pub fn decoder(&self) -> &CodeliaDecoder {
        &self.decoder
    }

    /// Bytes the runtime wrote to the UI.
    pub fn runtime_bytes(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let Self {
            decoder,
            from_runtime,
            ui_requests,
            ..
        } = self;
        from_runtime.feed(bytes, |line| runtime_line(decoder, ui_requests, line, out));
    }

    /// Bytes the UI wrote to the runtime.
    pub fn ui_bytes(&mut self, bytes: &[u8]) {
        let Self {
            decoder,
            from_ui,
            ui_requests,
            ..
        } = self;
        from_ui.feed(bytes, |line| ui_line(decoder, ui_requests, line));
    }

    /// Both streams ended: decodes a last runtime line without a newline.
    pub fn finish(&mut self, out: &mut Vec<Decoded>) {
        let Self {
            decoder,
            from_runtime,
            ui_requests,
            ..
        } = self;
        from_runtime.finish(|line| runtime_line(decoder, ui_requests, line, out));
    }
}

fn runtime_line(
    decoder: &mut CodeliaDecoder,
    ui_requests: &mut HashMap<String, String>,
    line: Result<&str, &str>,
    out: &mut Vec<Decoded>,
) {
    let Some(text) = line_text(line, decoder.source(), out) else {
        return;
    };
    let msg = match serde_json::from_str::<Value>(text) {
        Ok(msg) => msg,
        Err(_) => return decoder.decode_text(text, out),
    };
    // A response to a request the UI sent: name its method, as the UI client does.
    let answered = match (msg.get("method"), msg.get("id")) {
        (None, Some(id)) => ui_requests.remove(&id_key(id)),
        _ => None,
    };
    let start = out.len();
    decoder.decode_message(msg, None, out);
    if let Some(method) = answered {
        for decoded in &mut out[start..] {
            if let Decoded::Signal(s) = decoded
                && s.kind == "codelia.response"
            {
                s.payload
                    .insert("method".into(), Value::String(method.clone()));
            }
        }
    }
}

/// How many UI requests are remembered for naming their responses (a UI that never
/// gets answers must not grow this forever).
const MAX_UI_REQUESTS: usize = 1024;

fn ui_line(
    decoder: &mut CodeliaDecoder,
    ui_requests: &mut HashMap<String, String>,
    line: Result<&str, &str>,
) {
    let Ok(text) = line else { return };
    let Ok(msg) = serde_json::from_str::<Value>(text.trim()) else {
        return;
    };
    match (msg.get("method").and_then(Value::as_str), msg.get("id")) {
        (Some(method), Some(id)) if !id.is_null() => {
            if ui_requests.len() >= MAX_UI_REQUESTS {
                ui_requests.clear();
            }
            ui_requests.insert(id_key(id), method.to_owned());
        }
        (None, Some(id)) => {
            // The UI answered one of the runtime's requests.
            decoder.take_pending(&id_key(id));
        }
        _ => {}
    }
}

/// Why a wrap could not start its runtime, or lost track of it. Once the runtime runs,
/// problems publishing to patchbay are warnings, not errors.
#[derive(Debug, thiserror::Error)]
pub enum WrapError {
    /// No program was given.
    #[error("wrap needs a command to run: patchbay wrap --protocol codelia -- COMMAND…")]
    NoCommand,
    /// The thread reading standard input could not be started.
    #[error("cannot start the stdin reader")]
    StdinReader(#[source] std::io::Error),
    /// The runtime could not be started.
    #[error("cannot start `{program}`")]
    Spawn {
        /// The program, as given.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The runtime was started without the pipe named (`stdin` or `stdout`).
    #[error("the child has no {0}")]
    NoPipe(&'static str),
    /// Waiting for the runtime to exit failed.
    #[error("waiting for the runtime")]
    Wait(#[source] std::io::Error),
}

/// Runs `command` as a Codelia runtime between this process's standard input/output
/// (the UI that started `wrap`) and the child, relaying both directions byte for byte
/// (the child's standard error is inherited), and publishes the decoded signals to a
/// running patchbay with `POST {to}/signal` (JSON array batches). Publishing never
/// slows the relay: when patchbay cannot be reached, signals are buffered (bounded) and
/// retried, and a warning goes to standard error. Returns the child's exit code (128 +
/// the signal number when a signal ended it).
pub async fn wrap(command: Vec<String>, to: String) -> Result<i32, WrapError> {
    // A plain thread reads stdin: a blocking read cannot be cancelled, and on a runtime's
    // blocking pool it would keep the process from exiting until the UI writes again.
    let (tx, rx) = mpsc::channel::<Vec<u8>>(16);
    std::thread::Builder::new()
        .name("wrap-stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            return;
                        }
                    }
                }
            }
        })
        .map_err(WrapError::StdinReader)?;
    wrap_io(command, to, rx, tokio::io::stdout()).await
}

/// [`wrap`] with the UI's side given: `ui_in` yields what the UI writes (closed = end
/// of input), `ui_out` receives what the runtime writes.
pub async fn wrap_io(
    command: Vec<String>,
    to: String,
    mut ui_in: mpsc::Receiver<Vec<u8>>,
    mut ui_out: impl AsyncWrite + Unpin + Send + 'static,
) -> Result<i32, WrapError> {
    let (program, args) = command.split_first().ok_or(WrapError::NoCommand)?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .map_err(|source| WrapError::Spawn {
            program: program.clone(),
            source,
        })?;
    let mut child_in = child.stdin.take().ok_or(WrapError::NoPipe("stdin"))?;
    let mut child_out = child.stdout.take().ok_or(WrapError::NoPipe("stdout"))?;

    let observer = std::sync::Arc::new(std::sync::Mutex::new(WrapObserver::new("codelia:wrap")));
    let publisher = Publisher::start(&to);
    let publish_tx = publisher.sender();

    // UI → runtime.
    let ui_observer = std::sync::Arc::clone(&observer);
    let to_runtime = tokio::spawn(async move {
        while let Some(chunk) = ui_in.recv().await {
            if child_in.write_all(&chunk).await.is_err() || child_in.flush().await.is_err() {
                break; // the runtime is gone; its exit ends the wrap
            }
            lock(&ui_observer).ui_bytes(&chunk);
        }
        // End of the UI's input: the runtime sees end of file too (child_in dropped).
    });

    // Runtime → UI.
    let rt_observer = std::sync::Arc::clone(&observer);
    let relay_tx = publish_tx.clone();
    let to_ui = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut out = Vec::new();
        loop {
            let n = match child_out.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // The UI first; decoding comes after and never delays it.
            if ui_out.write_all(&buf[..n]).await.is_err() || ui_out.flush().await.is_err() {
                // The UI went away: keep draining the runtime so that it is not blocked.
            }
            lock(&rt_observer).runtime_bytes(&buf[..n], &mut out);
            for decoded in out.drain(..) {
                relay_tx.send(decoded.into_signal());
            }
        }
        lock(&rt_observer).finish(&mut out);
        for decoded in out.drain(..) {
            relay_tx.send(decoded.into_signal());
        }
    });

    let status = child.wait().await.map_err(WrapError::Wait)?;
    // The runtime's last output is relayed before exiting (bounded: a grandchild may
    // hold its stdout open).
    let _ = tokio::time::timeout(Duration::from_secs(2), to_ui).await;
    to_runtime.abort();
    publisher.finish().await;
    Ok(exit_code(status))
}

fn lock(observer: &std::sync::Mutex<WrapObserver>) -> std::sync::MutexGuard<'_, WrapObserver> {
    observer.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signals(out: Vec<Decoded>) -> Vec<patchbay_signal::Signal> {
        out.into_iter()
            .map(|d| match d {
                Decoded::Signal(s) | Decoded::BadInput(s) => s,
            })
            .collect()
    }

    #[test]
    fn an_answered_request_is_no_longer_pending() {
        let mut o = WrapObserver::new("codelia:wrap");
        let mut out = Vec::new();
        o.runtime_bytes(
            br#"{"jsonrpc":"2.0","id":"ui_1","method":"ui.confirm.request","params":{"title":"Run?"}}
"#,
            &mut out,
        );
        assert_eq!(signals(out)[0].kind, "codelia.request");
        assert!(o.decoder().pending_request("ui_1").is_some());
        // Split across chunks, as a pipe may deliver it.
        o.ui_bytes(br#"{"jsonrpc":"2.0","id":"ui_1","#);
        assert!(o.decoder().pending_request("ui_1").is_some());
        o.ui_bytes(b"\"result\":{\"ok\":true}}\n");
        assert!(o.decoder().pending_request("ui_1").is_none());
    }

    #[test]
    fn responses_to_the_ui_are_named_after_its_requests() {
        let mut o = WrapObserver::new("codelia:wrap");
        o.ui_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":\"2\",\"method\":\"run.start\",\"params\":{}}\n");
        let mut out = Vec::new();
        o.runtime_bytes(
            b"{\"jsonrpc\":\"2.0\",\"id\":\"2\",\"result\":{\"run_id\":\"r1\"}}\n",
            &mut out,
        );
        let s = signals(out);
        assert_eq!(s[0].kind, "codelia.response");
        assert_eq!(s[0].payload["method"], "run.start");
        assert_eq!(o.decoder().current_run(), Some("r1"));
    }

    #[test]
    fn garbage_is_reported_not_fatal() {
        let mut o = WrapObserver::new("codelia:wrap");
        let mut out = Vec::new();
        o.runtime_bytes(b"not json\n", &mut out);
        o.ui_bytes(b"\xff\xfe garbage\n");
        o.runtime_bytes(b"{\"jsonrpc\":\"2.0\",\"method\":\"run.status\",\"params\":{\"run_id\":\"r\",\"status\":\"running\"}}", &mut out);
        o.finish(&mut out);
        assert!(out[0].is_bad());
        assert_eq!(signals(out)[1].kind, "agent_state_change");
    }
}
