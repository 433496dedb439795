//! `patchbay wrap --protocol codex -- codex exec --json …`: runs the command with its
//! output passed through unchanged, and publishes what [`CodexDecoder`] makes of it to a
//! running patchbay (`POST {to}/signal`, through `patchbay_transport::publish`).

use patchbay_signal::decode::{DEFAULT_MAX_LINE, LineSplitter, line_too_long};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::now_ms;
use patchbay_transport::publish::{Publisher, exit_code};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::CodexDecoder;

/// Why `wrap` could not run its program.
#[derive(Debug, thiserror::Error)]
pub enum WrapError {
    /// No program was given.
    #[error("wrap needs a command to run: patchbay wrap --protocol codex -- codex exec --json …")]
    NoCommand,
    /// The program could not be started.
    #[error("cannot start `{program}`")]
    Spawn {
        /// The program, as given.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for the program to exit failed.
    #[error("waiting for `{0}`")]
    Wait(String, #[source] std::io::Error),
}

/// Runs `command` (its standard input and error are this process's), writes what it
/// prints to this process's standard output as it comes, and publishes the decoded
/// `exec --json` events to the sidecar at `to`; publishing never slows the run. Returns
/// the program's exit code (128 + the signal number when a signal ended it).
pub async fn wrap(command: Vec<String>, to: String) -> Result<i32, WrapError> {
    let (program, args) = command.split_first().ok_or(WrapError::NoCommand)?;
    let mut child = Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|source| WrapError::Spawn {
            program: program.clone(),
            source,
        })?;
    let publisher = Publisher::start(&to);
    let mut decoder = CodexDecoder::new("codex:wrap");
    if let Some(mut output) = child.stdout.take() {
        let mut stdout = tokio::io::stdout();
        let mut splitter = LineSplitter::new(DEFAULT_MAX_LINE);
        let mut buf = vec![0u8; 64 * 1024];
        let mut out = Vec::new();
        loop {
            let n = match output.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // The user first; decoding never delays what they see.
            let _ = stdout.write_all(&buf[..n]).await;
            let _ = stdout.flush().await;
            splitter.feed(&buf[..n], |line| decode_line(&mut decoder, line, &mut out));
            for decoded in out.drain(..) {
                publisher.send(decoded.into_signal());
            }
        }
        splitter.finish(|line| decode_line(&mut decoder, line, &mut out));
        for decoded in out.drain(..) {
            publisher.send(decoded.into_signal());
        }
    }
    let status = child
        .wait()
        .await
        .map_err(|e| WrapError::Wait(program.clone(), e))?;
    publisher.finish().await;
    Ok(exit_code(status))
}

/// One line of the program's output: an `exec --json` event is decoded; other text (what
/// `codex exec` prints without `--json`) is only passed through.
fn decode_line(decoder: &mut CodexDecoder, line: Result<&str, &str>, out: &mut Vec<Decoded>) {
    match line {
        Ok(text) => {
            if let Ok(value) = serde_json::from_str::<Value>(text.trim()) {
                decoder.decode_value(&value, out);
            }
        }
        Err(cut) => {
            let why = line_too_long(DEFAULT_MAX_LINE);
            let bad = bad_input_signal(decoder.source(), now_ms(), cut, &why);
            out.push(Decoded::BadInput(bad));
        }
    }
}
