//! `file` and `stdin` sources.

use std::path::PathBuf;
use std::time::Duration;

use patchbay_graph::{BoxFuture, ComponentError, Diagnostic, Options, Source, SourceContext};
use patchbay_signal::decode::{
    LineSplitter, NdjsonDecoder, StreamDecoder, is_scenario_line, line_too_long,
};
use patchbay_signal::normalize::{Decoded, Normalizer};
use patchbay_signal::now_ms;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::{DEFAULT_MAX_LINE_BYTES, MAX_LINE_BYTES_LIMIT};

/// How a `file` source reads its lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    /// One envelope per line (NDJSON), emitted as fast as the graph takes them.
    #[default]
    Signals,
    /// sajou emitter lines `{"delayMs": N, "signal": {…}}`, replayed with their delays.
    /// A `delayMs` below 0 or above 86400000 (one day) makes the line a bad line (an
    /// `error` signal); the replay goes on with the next one.
    Scenario,
}

/// `[sources.NAME] type = "file"`: replays a file of signals.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSourceConfig {
    /// The file to read; a relative path is relative to the config file's folder.
    pub path: PathBuf,
    /// `"signals"` (NDJSON envelopes, default) or `"scenario"` (sajou emitter lines).
    #[serde(default)]
    pub format: FileFormat,
    /// Scenario only: each `delayMs` is multiplied by `speed` (1 = real time, 0.5 = twice
    /// as fast, 0 = as fast as possible). Replayed signals are stamped with the scenario's
    /// own timeline (start time + the sum of `delayMs`), whatever the speed, so event-clock
    /// filters give the same output at any speed. At most 1000.
    #[serde(default = "default_speed")]
    pub speed: f64,
    /// Start again from the top when the file ends (the source then never ends).
    #[serde(default, rename = "loop")]
    pub repeat: bool,
    /// The longest line accepted, in bytes (default 1048576, 1 MiB; from 1 to 67108864,
    /// 64 MiB). A longer one becomes an `error` signal (`code: "bad_frame"`, its first
    /// bytes in `metadata.raw`) and is skipped up to its newline, without being kept in
    /// memory; reading goes on with the next line.
    #[serde(default = "default_max_line_bytes")]
    pub max_line_bytes: usize,
}

fn default_max_line_bytes() -> usize {
    DEFAULT_MAX_LINE_BYTES
}

/// The slowest replay: each delay times 1000 (with the one-day bound on a delay, a wait
/// stays far within what a timer can sleep).
const MAX_SPEED: f64 = 1000.0;

fn default_speed() -> f64 {
    1.0
}

/// `[sources.NAME] type = "stdin"`: NDJSON envelopes from standard input.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StdinConfig {
    /// The longest line accepted, in bytes (default 1048576, 1 MiB; from 1 to 67108864,
    /// 64 MiB). A longer one becomes an `error` signal (`code: "bad_frame"`, its first
    /// bytes in `metadata.raw`) and is skipped up to its newline, without being kept in
    /// memory; reading goes on with the next line.
    #[serde(default = "default_max_line_bytes")]
    pub max_line_bytes: usize,
}

pub(crate) fn build_file(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let mut config: FileSourceConfig = options.parse()?;
    config.path = options.resolve_path(&config.path);
    if !(config.speed.is_finite() && (0.0..=MAX_SPEED).contains(&config.speed)) {
        return Err(options.error_at(
            "speed",
            format!("`speed` must be a number from 0 to {MAX_SPEED}"),
        ));
    }
    if options.has("speed") && config.format != FileFormat::Scenario {
        return Err(options.error_at("speed", "`speed` applies to `format = \"scenario\"` only"));
    }
    options.check_range(
        "max_line_bytes",
        config.max_line_bytes,
        1..=MAX_LINE_BYTES_LIMIT,
    )?;
    Ok(Box::new(FileSource { config }))
}

pub(crate) fn build_stdin(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let config: StdinConfig = options.parse()?;
    options.check_range(
        "max_line_bytes",
        config.max_line_bytes,
        1..=MAX_LINE_BYTES_LIMIT,
    )?;
    Ok(Box::new(StdinSource { config }))
}

struct FileSource {
    config: FileSourceConfig,
}

impl Source for FileSource {
    fn is_finite(&self) -> bool {
        !self.config.repeat
    }

    fn reports_started(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = format!("file:{}", cx.name());
            loop {
                let file = tokio::fs::File::open(&self.config.path)
                    .await
                    .map_err(|e| format!("{}: {e}", self.config.path.display()))?;
                cx.started();
                let max = self.config.max_line_bytes;
                let done = match self.config.format {
                    FileFormat::Signals => {
                        read_signals(file, NdjsonDecoder::new(source.clone(), max), &cx).await?
                    }
                    FileFormat::Scenario => {
                        replay_scenario(file, &source, self.config.speed, max, &cx).await?
                    }
                };
                if !done || !self.config.repeat {
                    return Ok(());
                }
            }
        })
    }
}

struct StdinSource {
    config: StdinConfig,
}

impl Source for StdinSource {
    fn is_finite(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = format!("stdin:{}", cx.name());
            let decoder = NdjsonDecoder::new(source, self.config.max_line_bytes);
            read_signals(tokio::io::stdin(), decoder, &cx).await?;
            Ok(())
        })
    }
}

/// Reads NDJSON to the end; `Ok(false)` when stopped early (shutdown or graph gone).
async fn read_signals(
    mut input: impl AsyncRead + Unpin,
    mut decoder: NdjsonDecoder,
    cx: &SourceContext,
) -> Result<bool, ComponentError> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    loop {
        let n = tokio::select! {
            n = input.read(&mut buf) => n?,
            () = cx.shutdown().wait() => return Ok(false),
        };
        if n == 0 {
            decoder.finish(&mut out);
        } else {
            decoder.feed(&buf[..n], &mut out);
        }
        for decoded in out.drain(..) {
            if cx.emit_decoded(decoded).await.is_err() {
                return Ok(false);
            }
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// The longest `delayMs` a scenario line may ask for: one day. A longer (or negative)
/// delay is a bad line, reported as an `error` signal, and the replay goes on with the
/// next line; this keeps both the wait and the replayed timestamps in range.
pub(crate) const MAX_SCENARIO_DELAY_MS: i64 = 24 * 60 * 60 * 1000;

/// A scenario line's `delayMs` in whole ms (fractions are dropped), or why it is refused.
fn scenario_delay(line: &serde_json::Map<String, Value>) -> Result<i64, String> {
    let delay = line.get("delayMs").and_then(Value::as_f64).unwrap_or(0.0);
    if !(0.0..=MAX_SCENARIO_DELAY_MS as f64).contains(&delay) {
        return Err(format!(
            "`delayMs` must be between 0 and {MAX_SCENARIO_DELAY_MS} (one day), not {delay}"
        ));
    }
    Ok(delay as i64)
}

async fn replay_scenario(
    mut file: tokio::fs::File,
    source: &str,
    speed: f64,
    max_line_bytes: usize,
    cx: &SourceContext,
) -> Result<bool, ComponentError> {
    let mut lines = LineSplitter::new(max_line_bytes);
    let mut buf = vec![0u8; 64 * 1024];
    // The lines of one read, owned (each may wait for its delay); `Err` for a line too long.
    let mut ready: Vec<Result<String, String>> = Vec::new();
    let mut normalizer = Normalizer::new(source);
    let start = now_ms();
    let mut timeline = 0i64;
    loop {
        let n = tokio::select! {
            n = file.read(&mut buf) => n?,
            () = cx.shutdown().wait() => return Ok(false),
        };
        let mut push = |line: Result<&str, &str>| {
            ready.push(line.map(str::to_owned).map_err(str::to_owned));
        };
        if n == 0 {
            lines.finish(&mut push);
        } else {
            lines.feed(&buf[..n], &mut push);
        }
        for line in ready.drain(..) {
            let line = match line {
                Ok(line) => line,
                Err(head) => {
                    let bad = normalizer.bad_input(&head, &line_too_long(max_line_bytes));
                    let bad = Decoded::BadInput(bad);
                    if cx.emit_decoded(bad).await.is_err() {
                        return Ok(false);
                    }
                    continue;
                }
            };
            let decoded =
                match replay_line(&line, &mut normalizer, speed, start, &mut timeline, cx).await {
                    Replay::Emit(decoded) => *decoded,
                    Replay::Blank => continue,
                    Replay::Stopped => return Ok(false),
                };
            if cx.emit_decoded(decoded).await.is_err() {
                return Ok(false);
            }
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// What one scenario line gives.
enum Replay {
    /// A signal (after its delay) or a bad line.
    Emit(Box<Decoded>),
    /// Nothing: a blank line.
    Blank,
    /// Shutdown came during the delay.
    Stopped,
}

/// Replays one scenario line: waits its delay (times `speed`), stamps its signal on the
/// scenario's timeline.
async fn replay_line(
    line: &str,
    normalizer: &mut Normalizer,
    speed: f64,
    start: i64,
    timeline: &mut i64,
    cx: &SourceContext,
) -> Replay {
    if line.trim().is_empty() {
        return Replay::Blank;
    }
    Replay::Emit(Box::new(match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(obj)) if is_scenario_line(&obj) => {
            let delay = match scenario_delay(&obj) {
                Ok(delay) => delay,
                Err(why) => {
                    return Replay::Emit(Box::new(Decoded::BadInput(
                        normalizer.bad_input(line, &why),
                    )));
                }
            };
            let wait = delay as f64 * speed;
            if wait > 0.0 {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs_f64(wait / 1000.0)) => {}
                    () = cx.shutdown().wait() => return Replay::Stopped,
                }
            }
            *timeline = timeline.saturating_add(delay);
            match normalizer.from_value(obj.get("signal").cloned().unwrap_or(Value::Null)) {
                Decoded::Signal(mut signal) => {
                    signal.timestamp = start.saturating_add(*timeline);
                    Decoded::Signal(signal)
                }
                bad => bad,
            }
        }
        Ok(_) => Decoded::BadInput(normalizer.bad_input(
            line,
            "not a scenario line: expected {\"delayMs\": N, \"signal\": {…}}",
        )),
        Err(e) => Decoded::BadInput(normalizer.bad_input(line, &format!("not JSON: {e}"))),
    }))
}
