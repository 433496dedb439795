//! `type = "codelia"`: patchbay runs a Codelia runtime as a child and speaks to it as its
//! UI, over NDJSON on the child's stdin/stdout.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, HealthState, LinkEnds, Options, Output, OutputContext,
    Source, SourceContext,
};
use patchbay_signal::decode::{DEFAULT_MAX_LINE, LineSplitter, line_too_long};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::now_ms;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use crate::client::UiClient;

/// How long the runtime gets to exit on its own once its input is closed.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// `[outputs.NAME]` (two-way) or `[sources.NAME]` (listen only) with `type = "codelia"`:
/// a Codelia runtime patchbay starts and talks to as its UI.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeliaConfig {
    /// The runtime's command line, program first (e.g. `["node",
    /// "packages/runtime/dist/index.js"]`).
    pub command: Vec<String>,
    /// Its working directory (default: patchbay's); a relative path is relative to the
    /// config file's folder.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Extra environment variables for it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

fn parse_config(options: &Options<'_>) -> Result<CodeliaConfig, Diagnostic> {
    let mut config: CodeliaConfig = options.parse()?;
    config.cwd = config.cwd.map(|cwd| options.resolve_path(&cwd));
    if config.command.first().is_none_or(|p| p.trim().is_empty()) {
        return Err(options.error_at("command", "`command` needs at least the program to run"));
    }
    Ok(config)
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    Ok(Box::new(Codelia {
        config: parse_config(options)?,
    }))
}

pub(crate) fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(Codelia {
        config: parse_config(options)?,
    }))
}

struct Codelia {
    config: CodeliaConfig,
}

impl Source for Codelia {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = format!("codelia:{}", cx.name());
            talk(self.config, source, LinkEnds::source(&cx)).await
        })
    }
}

impl Output for Codelia {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = format!("codelia:{}", cx.name());
            talk(self.config, source, LinkEnds::output(&cx)).await
        })
    }
}

fn spawn(config: &CodeliaConfig) -> Result<Child, String> {
    let (program, args) = config
        .command
        .split_first()
        .ok_or_else(|| "`command` is empty".to_owned())?;
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(&config.env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(cwd) = &config.cwd {
        command.current_dir(cwd);
    }
    command
        .spawn()
        .map_err(|e| format!("cannot start `{program}`: {e}"))
}

async fn write_line(stdin: &mut ChildStdin, msg: &Value) -> std::io::Result<()> {
    let mut line = msg.to_string();
    line.push('\n');
    stdin.write_all(line.as_bytes()).await?;
    stdin.flush().await
}

/// Runs the runtime until it exits, the graph ends or shutdown.
async fn talk(
    config: CodeliaConfig,
    source: String,
    side: LinkEnds<'_>,
) -> Result<(), ComponentError> {
    side.set_state(
        HealthState::Starting,
        Some(format!("starting {}", config.command.join(" "))),
    );
    let mut child = match spawn(&config) {
        Ok(child) => child,
        Err(why) => return Err(fail(&side, why).await),
    };
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(fail(&side, "the runtime's stdio is not piped".into()).await);
    };
    if let Some(stderr) = child.stderr.take() {
        // The runtime's log lines go to patchbay's log.
        let name = source.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(component = %name, "{line}");
            }
        });
    }

    let mut client = UiClient::new(source.clone());
    let init = client.initialize();
    let init_id = init.get("id").cloned();
    if let Err(e) = write_line(&mut stdin, &init).await {
        return Err(fail(&side, format!("cannot talk to the runtime: {e}")).await);
    }

    let mut stdout = stdout;
    let mut stdin = Some(stdin);
    let mut splitter = LineSplitter::new(DEFAULT_MAX_LINE);
    let mut buf = vec![0u8; 64 * 1024];
    let mut out: Vec<Decoded> = Vec::new();
    let mut graph_open = true;
    loop {
        tokio::select! {
            n = stdout.read(&mut buf) => {
                let n = n.unwrap_or(0);
                if n == 0 {
                    splitter.finish(|line| decode_line(&mut client, &source, line, init_id.as_ref(), &side, &mut out));
                    let _ = side.emit_all(&mut out).await;
                    break;
                }
                splitter.feed(&buf[..n], |line| decode_line(&mut client, &source, line, init_id.as_ref(), &side, &mut out));
                if side.emit_all(&mut out).await.is_err() {
                    graph_open = false;
                    break;
                }
            }
            signal = side.next_control(), if stdin.is_some() => match signal {
                Some(signal) => {
                    let Some(cx) = side.controls else { continue };
                    match client.encode(&signal) {
                        Ok(msg) => match stdin.as_mut().map(|s| write_line(s, &msg)) {
                            Some(write) => match write.await {
                                Ok(()) => cx.delivered(1),
                                Err(e) => cx.refused(format!("{}: the runtime is not reading: {e}", signal.kind)),
                            },
                            None => cx.refused(format!("{}: the runtime's input is closed", signal.kind)),
                        },
                        Err(e) => cx.refused(format!("{}: {e}", signal.kind)),
                    }
                }
                None => {
                    // The graph ended: closing stdin asks the runtime to exit.
                    graph_open = false;
                    break;
                }
            },
            () = side.shutdown(), if side.controls.is_none() => {
                graph_open = false;
                break;
            }
        }
    }
    drop(stdin);
    let status = if graph_open {
        child.wait().await.ok()
    } else {
        match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = child.kill().await;
                return Ok(());
            }
        }
    };
    if !graph_open {
        return Ok(());
    }
    match status {
        Some(s) if s.success() => {
            side.set_state(HealthState::Stopped, Some("the runtime exited".into()));
            side.drain_refusing("the runtime has exited").await;
            Ok(())
        }
        Some(s) => Err(fail(&side, format!("the runtime exited with {s}")).await),
        None => Err(fail(&side, "lost the runtime".into()).await),
    }
}

/// Decodes one line from the runtime; the answer to `initialize` makes the link `ok`.
fn decode_line(
    client: &mut UiClient,
    source: &str,
    line: Result<&str, &str>,
    init_id: Option<&Value>,
    side: &LinkEnds<'_>,
    out: &mut Vec<Decoded>,
) {
    let text = match line {
        Ok(text) => text.trim(),
        Err(cut) => {
            out.push(Decoded::BadInput(bad_input_signal(
                source,
                now_ms(),
                cut,
                &line_too_long(DEFAULT_MAX_LINE),
            )));
            return;
        }
    };
    if text.is_empty() {
        return;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(msg) => {
            if msg.get("method").is_none() && init_id.is_some_and(|id| msg.get("id") == Some(id)) {
                match msg.get("error") {
                    Some(error) => side.set_state(
                        HealthState::Failed,
                        Some(format!("initialize refused: {error}")),
                    ),
                    None => side.set_state(HealthState::Ok, None),
                }
            }
            client.decode(msg, None, out);
        }
        Err(e) => out.push(Decoded::BadInput(bad_input_signal(
            source,
            now_ms(),
            text,
            &format!("not JSON: {e}"),
        ))),
    }
}

/// Logs the failure and [fails](LinkEnds::fail) the link with it.
async fn fail(side: &LinkEnds<'_>, why: String) -> ComponentError {
    tracing::warn!("{why}");
    side.fail(&why).await;
    why.into()
}
