//! `stdout` and `file` outputs: one JSON envelope per line.

use std::io::IsTerminal;
use std::path::PathBuf;

use patchbay_graph::{BoxFuture, ComponentError, Diagnostic, Options, Output, OutputContext};
use patchbay_signal::Signal;
use serde::Deserialize;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};

/// How `stdout` writes signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LineFormat {
    /// One JSON envelope per line (NDJSON).
    Json,
    /// A readable line per signal: time, type, source and a short summary.
    Log,
    /// `log` on a terminal, `json` otherwise.
    Auto,
}

/// `[outputs.NAME] type = "stdout"`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StdoutConfig {
    /// `"json"` (default), `"log"` or `"auto"`.
    #[serde(default = "default_format")]
    pub format: LineFormat,
}

fn default_format() -> LineFormat {
    LineFormat::Json
}

/// `[outputs.NAME] type = "file"`: appends JSONL to a file.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileOutputConfig {
    /// The file to append to (created if missing); a relative path is relative to the
    /// config file's folder.
    pub path: PathBuf,
}

pub(crate) fn build_stdout(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    let config: StdoutConfig = options.parse()?;
    let readable = match config.format {
        LineFormat::Json => false,
        LineFormat::Log => true,
        LineFormat::Auto => std::io::stdout().is_terminal(),
    };
    Ok(Box::new(StdoutOutput { readable }))
}

pub(crate) fn build_file(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    let mut config: FileOutputConfig = options.parse()?;
    config.path = options.resolve_path(&config.path);
    Ok(Box::new(FileOutput { config }))
}

struct StdoutOutput {
    readable: bool,
}

impl Output for StdoutOutput {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(write_lines(tokio::io::stdout(), cx, self.readable))
    }
}

struct FileOutput {
    config: FileOutputConfig,
}

impl Output for FileOutput {
    fn reports_started(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let file = tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.config.path)
                .await
                .map_err(|e| format!("{}: {e}", self.config.path.display()))?;
            cx.started();
            write_lines(file, cx, false).await
        })
    }
}

async fn write_lines(
    sink: impl AsyncWrite + Unpin,
    cx: OutputContext,
    readable: bool,
) -> Result<(), ComponentError> {
    let mut out = BufWriter::new(sink);
    let mut line = String::new();
    while let Some(signal) = cx.next().await {
        line.clear();
        if readable {
            readable_line(&signal, &mut line);
        } else {
            line.push_str(&signal.to_json());
        }
        line.push('\n');
        if let Err(e) = out.write_all(line.as_bytes()).await {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(e.into());
        }
        cx.delivered(1);
        // Write promptly when nothing else waits: a live tail shows signals at once.
        if cx.queue().is_empty() {
            out.flush().await?;
        }
    }
    out.flush().await?;
    Ok(())
}

/// `12:03:04.567 text_delta openai:ollama  "Hello"` — time (UTC), type, source, summary.
pub fn readable_line(signal: &Signal, out: &mut String) {
    use std::fmt::Write;
    let ms = signal.timestamp.rem_euclid(86_400_000);
    let _ = write!(
        out,
        "{:02}:{:02}:{:02}.{:03} {:<20} {:<18} ",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000,
        signal.kind,
        signal.source
    );
    let p: &patchbay_signal::Object = &signal.payload;
    let text = [
        "content",
        "message",
        "toolName",
        "description",
        "to",
        "result",
    ]
    .iter()
    .find_map(|k| p.get(*k).and_then(|v| v.as_str()));
    match text {
        Some(t) => {
            let _ = write!(
                out,
                "{}",
                serde_json::Value::from(patchbay_signal::truncate(t, 80))
            );
        }
        None => out.push_str(&patchbay_signal::truncate(
            &serde_json::Value::Object(p.clone()).to_string(),
            100,
        )),
    }
}
