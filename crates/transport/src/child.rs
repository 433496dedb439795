//! Programs patchbay starts and talks to over their stdio (a Codelia runtime, `codex
//! app-server`): the options that say what to run, starting it with its stdio piped and
//! its log lines in patchbay's log, writing a line, and ending it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use patchbay_graph::{Diagnostic, Options};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long a program gets to exit on its own once its input is closed.
pub const EXIT_GRACE: Duration = Duration::from_secs(3);

/// The options of a component that runs a program, flattened into its config (parse the
/// config with [`parse_child_options`]).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct ChildOptions<D: ChildDefaults> {
    /// The program's command line, program first.
    #[serde(default = "D::command")]
    #[schemars(default = "D::command")]
    pub command: Vec<String>,
    /// Its working directory (default: patchbay's); a relative path is relative to the
    /// config file's folder.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Extra environment variables for it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(skip)]
    #[schemars(skip)]
    defaults: std::marker::PhantomData<D>,
}

/// An adapter's default command line (empty: the config must name one).
pub trait ChildDefaults: schemars::JsonSchema {
    /// The command run when the config names none.
    fn command() -> Vec<String>;
}

/// The defaults of a program that has no default command: the config names it.
#[derive(Debug, Clone, schemars::JsonSchema)]
pub struct NoDefaultCommand;

impl ChildDefaults for NoDefaultCommand {
    fn command() -> Vec<String> {
        Vec::new()
    }
}

/// A config that embeds [`ChildOptions`].
pub trait ChildConfig: for<'de> Deserialize<'de> + schemars::JsonSchema {
    /// Its defaults.
    type Defaults: ChildDefaults;
    /// The embedded options, to check and resolve.
    fn child_mut(&mut self) -> &mut ChildOptions<Self::Defaults>;
}

/// Parses a config that embeds [`ChildOptions`]: unknown keys refused (with a
/// did-you-mean), `cwd` resolved against the config file's folder, and a `command` with
/// at least the program to run.
pub fn parse_child_options<T: ChildConfig>(options: &Options<'_>) -> Result<T, Diagnostic> {
    let known = crate::known_keys::<T>();
    options.refuse_unknown_keys(known.iter().map(String::as_str))?;
    let mut config: T = options.parse()?;
    let child = config.child_mut();
    child.cwd = child.cwd.take().map(|cwd| options.resolve_path(&cwd));
    if child.command.first().is_none_or(|p| p.trim().is_empty()) {
        return Err(options.error_at("command", "`command` needs at least the program to run"));
    }
    Ok(config)
}

/// A program running with its stdin and stdout piped to patchbay.
pub struct StdioChild {
    /// The process (killed if dropped while running).
    pub child: Child,
    /// Its input.
    pub stdin: ChildStdin,
    /// Its output.
    pub stdout: ChildStdout,
}

impl<D: ChildDefaults> ChildOptions<D> {
    /// The command line as one string, for health details and logs.
    pub fn describe(&self) -> String {
        self.command.join(" ")
    }

    /// Starts the program; its stderr lines go to patchbay's log under `component`. The
    /// error says which program could not be started and why (not found, not executable).
    pub fn spawn(&self, component: &str) -> Result<StdioChild, String> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| "`command` is empty".to_owned())?;
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(&self.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(cwd) = &self.cwd {
            command.current_dir(cwd);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start `{program}`: {e}"))?;
        if let Some(stderr) = child.stderr.take() {
            let name = component.to_owned();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::info!(component = %name, "{line}");
                }
            });
        }
        match (child.stdin.take(), child.stdout.take()) {
            (Some(stdin), Some(stdout)) => Ok(StdioChild {
                child,
                stdin,
                stdout,
            }),
            _ => Err(format!("`{program}`: its stdio is not piped")),
        }
    }
}

/// Writes `line` and a newline, and flushes.
pub async fn write_line(stdin: &mut ChildStdin, line: &str) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(line.len() + 1);
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    stdin.write_all(&bytes).await?;
    stdin.flush().await
}

/// Closes the program's input (`stdin`, when still open: that asks it to exit) and waits
/// for it: `graph_open` (it ended by itself), until it exits; else (patchbay is stopping)
/// for [`EXIT_GRACE`], then kills it (`None`).
pub async fn finish(
    child: &mut Child,
    stdin: Option<ChildStdin>,
    graph_open: bool,
) -> Option<ExitStatus> {
    drop(stdin);
    if graph_open {
        return child.wait().await.ok();
    }
    match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            let _ = child.kill().await;
            None
        }
    }
}
