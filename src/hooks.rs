//! `patchbay hooks install | uninstall | status | emit`: patchbay's hooks in Claude
//! Code's settings, pointing at a `claude_code` component, and (`--agent gemini`) in
//! Gemini CLI's, pointing at a `gemini_cli` component.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand, ValueEnum};
use patchbay_claude_code::gate::GateConfig;
use patchbay_claude_code::settings::{self, HookPlan, TOKEN_VAR};
use patchbay_claude_code::{ClaudeCodeConfig, client, probe};
use patchbay_graph::SourceText;
use serde_json::Value;

use crate::pipeline::{DEFAULT_PIPELINE, registry};

/// The agent whose hooks a command is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Agent {
    /// Claude Code (`.claude/settings.local.json`, a `claude_code` component).
    Claude,
    /// Gemini CLI (`.gemini/settings.json`, a `gemini_cli` component).
    Gemini,
}

impl Agent {
    /// The component type its hooks post to.
    fn component_type(self) -> &'static str {
        match self {
            Agent::Claude => "claude_code",
            Agent::Gemini => "gemini_cli",
        }
    }

    /// The hook URL of its component's default `listen`.
    fn default_url(self) -> String {
        let listen = match self {
            Agent::Claude => patchbay_claude_code::DEFAULT_LISTEN,
            Agent::Gemini => GEMINI_DEFAULT_LISTEN,
        };
        format!("http://{listen}{}", client::HOOK_PATH)
    }
}

#[cfg(feature = "gemini-cli")]
const GEMINI_DEFAULT_LISTEN: &str = patchbay_gemini_cli::DEFAULT_LISTEN;
#[cfg(not(feature = "gemini-cli"))]
const GEMINI_DEFAULT_LISTEN: &str = "127.0.0.1:7880";

/// `patchbay hooks …`.
#[derive(Debug, Subcommand)]
pub enum HooksCommand {
    /// Write patchbay's hooks into an agent's settings (again: replaces them).
    Install {
        /// Whose settings: Claude Code's or Gemini CLI's.
        #[arg(long, value_enum, default_value = "claude")]
        agent: Agent,
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        endpoint: Endpoint,
        /// Let the component's gate answer: the hooks that ask about a call
        /// (`PreToolUse` and `PermissionRequest`; Gemini CLI's `BeforeTool`) wait longer
        /// than the gate's `timeout_ms` (30000 with `--url`).
        #[arg(long)]
        gate: bool,
        /// `default`: the events patchbay maps; `all`: every event Claude Code has (Claude
        /// Code only: Gemini CLI gets every event it has).
        #[arg(long, default_value = "default", value_parser = ["default", "all"])]
        events: String,
    },
    /// Remove patchbay's hooks (and only them) from an agent's settings.
    Uninstall {
        /// Whose settings: Claude Code's or Gemini CLI's.
        #[arg(long, value_enum, default_value = "claude")]
        agent: Agent,
        #[command(flatten)]
        target: Target,
    },
    /// Say where patchbay's hooks are installed and whether their endpoint answers.
    Status {
        /// The project whose settings to look at (default: the current directory).
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
    /// Post a hook payload from standard input to a component (what the command hook
    /// runs); always exits 0, within a second, even when patchbay is not running (a held
    /// Gemini CLI `BeforeTool` waits up to `--wait-ms`).
    Emit {
        /// Which agent runs it: Claude Code (prints only a decision) or Gemini CLI (always
        /// prints a JSON object, `{}` when there is nothing to say).
        #[arg(long, value_enum, default_value = "claude")]
        agent: Agent,
        /// The component's hook URL (default: the agent's component on its default
        /// `listen`).
        #[arg(long)]
        url: Option<String>,
        /// Gemini CLI: how long a `BeforeTool` may wait for the gate's answer, in ms (what
        /// `hooks install --gate` writes); without it, a second like every other event.
        #[arg(long, value_name = "MS")]
        wait_ms: Option<u64>,
    },
}

/// Which settings file.
#[derive(Debug, Args)]
pub struct Target {
    /// `DIR/.claude/settings.local.json`, or `DIR/.gemini/settings.json` (the default,
    /// with the current directory).
    #[arg(long, value_name = "DIR", conflicts_with = "user")]
    project: Option<PathBuf>,
    /// `~/.claude/settings.json` or `~/.gemini/settings.json`: every project of this user.
    #[arg(long)]
    user: bool,
}

/// Where the hooks point.
#[derive(Debug, Args)]
pub struct Endpoint {
    /// The config whose `claude_code` (or `gemini_cli`) component the hooks point at
    /// (repeatable; default: the built-in default pipeline, what `patchbay` runs without
    /// arguments).
    #[arg(long = "config", value_name = "FILE", conflicts_with = "url")]
    configs: Vec<PathBuf>,
    /// The component to use when the config has several of the agent's type.
    #[arg(long, value_name = "NAME", conflicts_with = "url")]
    component: Option<String>,
    /// The hook URL itself, instead of a config's component.
    #[arg(long)]
    url: Option<String>,
    /// With `--url`: the endpoint requires the token (sent from `$PATCHBAY_HOOK_TOKEN`).
    #[arg(long, requires = "url")]
    token: bool,
}

/// Runs a `hooks` subcommand.
pub fn run(command: HooksCommand) -> anyhow::Result<ExitCode> {
    match command {
        HooksCommand::Install {
            agent: Agent::Claude,
            target,
            endpoint,
            gate,
            events,
        } => install(&target, &endpoint, gate, &events),
        HooksCommand::Install {
            agent: Agent::Gemini,
            target,
            endpoint,
            gate,
            events: _,
        } => gemini::install(&target, &endpoint, gate),
        HooksCommand::Uninstall {
            agent: Agent::Claude,
            target,
        } => uninstall(&target),
        HooksCommand::Uninstall {
            agent: Agent::Gemini,
            target,
        } => gemini::uninstall(&target),
        HooksCommand::Status { project } => status(project.as_deref()),
        HooksCommand::Emit {
            agent: Agent::Claude,
            url,
            wait_ms: _,
        } => Ok(emit(&url.unwrap_or_else(|| Agent::Claude.default_url()))),
        HooksCommand::Emit {
            agent: Agent::Gemini,
            url,
            wait_ms,
        } => Ok(gemini::emit(
            &url.unwrap_or_else(|| Agent::Gemini.default_url()),
            wait_ms,
        )),
    }
}

impl Target {
    fn file(&self) -> anyhow::Result<PathBuf> {
        self.file_of(Agent::Claude)
    }

    /// The agent's settings file: `.claude/settings.local.json` or
    /// `.gemini/settings.json` in the project, `settings.json` in the user's directory.
    fn file_of(&self, agent: Agent) -> anyhow::Result<PathBuf> {
        let (settings_dir, project_file) = match agent {
            Agent::Claude => (".claude", "settings.local.json"),
            Agent::Gemini => (".gemini", "settings.json"),
        };
        if self.user {
            let home = std::env::var_os("HOME").context("HOME is not set")?;
            return Ok(PathBuf::from(home).join(settings_dir).join("settings.json"));
        }
        let dir = match &self.project {
            Some(dir) => dir.clone(),
            None => std::env::current_dir()?,
        };
        let dir = dir
            .canonicalize()
            .with_context(|| format!("{}: no such directory", dir.display()))?;
        Ok(dir.join(settings_dir).join(project_file))
    }
}

/// The endpoint's URL, whether it needs the token, and its gate.
struct Resolved {
    url: String,
    token: bool,
    gate: Option<GateConfig>,
    from: String,
}

fn resolve(endpoint: &Endpoint, agent: Agent) -> anyhow::Result<Resolved> {
    let kind = agent.component_type();
    if let Some(url) = &endpoint.url {
        if !url.starts_with("http://") {
            bail!("--url must be an http:// URL (the component's `http://LISTEN/hook`)");
        }
        return Ok(Resolved {
            url: url.clone(),
            token: endpoint.token,
            gate: None,
            from: "--url".into(),
        });
    }
    let files = if endpoint.configs.is_empty() {
        vec![SourceText::new("<default pipeline>", DEFAULT_PIPELINE)]
    } else {
        patchbay_graph::read_config_paths(&endpoint.configs).map_err(|e| anyhow::anyhow!("{e}"))?
    };
    if let Err(errors) = patchbay_graph::compile(&files, &registry()) {
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        bail!("the config has errors:\n{}", text.join("\n"));
    }
    let mut found = Vec::new();
    for file in &files {
        let table: toml::Table =
            toml::from_str(&file.text).with_context(|| format!("{}: not TOML", file.path))?;
        for section in ["sources", "outputs"] {
            let Some(components) = table.get(section).and_then(toml::Value::as_table) else {
                continue;
            };
            for (name, options) in components {
                if options.get("type").and_then(toml::Value::as_str) == Some(kind) {
                    found.push((file.path.clone(), name.clone(), options.clone()));
                }
            }
        }
    }
    let chosen = match &endpoint.component {
        Some(wanted) => found.into_iter().find(|(_, name, _)| name == wanted),
        None if found.len() > 1 => {
            let names: Vec<&str> = found.iter().map(|(_, n, _)| n.as_str()).collect();
            bail!(
                "the config has several {kind} components ({}): choose one with --component",
                names.join(", ")
            );
        }
        None => found.into_iter().next(),
    };
    let Some((path, name, options)) = chosen else {
        bail!("the config has no {kind} component (add one, or give --url)");
    };
    let mut options = options.as_table().cloned().unwrap_or_default();
    for key in ["type", "inputs", "queue", "when_full"] {
        options.remove(key);
    }
    let options = toml::Value::Table(options);
    let context = || format!("{path}: component `{name}`");
    let checked = match agent {
        Agent::Claude => options
            .try_into::<ClaudeCodeConfig>()
            .with_context(context)?
            .check(),
        #[cfg(feature = "gemini-cli")]
        Agent::Gemini => options
            .try_into::<patchbay_gemini_cli::GeminiCliConfig>()
            .with_context(context)?
            .check(),
        #[cfg(not(feature = "gemini-cli"))]
        Agent::Gemini => bail!("this patchbay is built without the `gemini-cli` feature"),
    };
    let checked =
        checked.map_err(|(key, message)| anyhow::anyhow!("{path}: `{name}.{key}`: {message}"))?;
    Ok(Resolved {
        url: checked.hook_url(),
        token: checked.token.is_some(),
        gate: checked.gate,
        from: format!("component `{name}` of {path}"),
    })
}

/// Reads and parses a settings file (absent: empty); an unparsable one is an error with
/// its FILE:LINE:COL.
fn read_settings(file: &Path) -> anyhow::Result<Value> {
    match std::fs::read_to_string(file) {
        Ok(text) => Ok(settings::parse(&file.display().to_string(), &text)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(Value::Object(serde_json::Map::new()))
        }
        Err(e) => Err(anyhow::anyhow!("{}: {e}", file.display())),
    }
}

/// Writes a settings file atomically: a temporary file next to it, renamed over it.
fn write_settings(file: &Path, value: &Value) -> anyhow::Result<()> {
    write_atomically(file, &settings::render(value))
}

/// Writes `text` to `file` atomically: a temporary file next to it (with the file's
/// permissions), synced, renamed over it.
fn write_atomically(file: &Path, text: &str) -> anyhow::Result<()> {
    let dir = file.parent().context("a settings file has a directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.patchbay-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut out = std::fs::File::create(&tmp)?;
        if let Ok(meta) = std::fs::metadata(file) {
            out.set_permissions(meta.permissions())?;
        }
        out.write_all(text.as_bytes())?;
        out.sync_all()?;
        std::fs::rename(&tmp, file)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("{}: {e}", file.display())
    })
}

fn install(
    target: &Target,
    endpoint: &Endpoint,
    gate: bool,
    events: &str,
) -> anyhow::Result<ExitCode> {
    let file = target.file()?;
    let resolved = resolve(endpoint, Agent::Claude)?;
    let gate = chosen_gate(gate, endpoint, &resolved, "Bash")?;
    let program = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("cannot find the patchbay binary's path")?;
    let plan = HookPlan {
        url: resolved.url.clone(),
        token: resolved.token,
        gate: gate.clone(),
        events: if events == "all" {
            settings::ALL_EVENTS.to_vec()
        } else {
            settings::EVENTS.to_vec()
        },
        program: program.display().to_string(),
    };
    let mut value = read_settings(&file)?;
    let before = value.clone();
    settings::install(&mut value, &plan);
    if value != before || !file.exists() {
        write_settings(&file, &value)?;
    }
    println!(
        "installed patchbay's hooks for {} events in {} → {} ({})",
        plan.events.len(),
        file.display(),
        resolved.url,
        resolved.from
    );
    if let Some(gate) = gate {
        println!(
            "gate: PreToolUse and PermissionRequest hooks wait up to {} s (the gate answers within {} ms)",
            patchbay_claude_code::gate::hook_timeout_s(&gate),
            gate.timeout_ms
        );
    }
    if resolved.token {
        println!("the hooks send the token from ${TOKEN_VAR}: export it where Claude Code runs");
    }
    Ok(ExitCode::SUCCESS)
}

/// The gate the hooks wait for: the component's with `--gate` (any tool, 30 s, with
/// `--url`), none without.
fn chosen_gate(
    gate: bool,
    endpoint: &Endpoint,
    resolved: &Resolved,
    example_tool: &str,
) -> anyhow::Result<Option<GateConfig>> {
    Ok(match (gate, &resolved.gate) {
        (false, _) => None,
        (true, Some(g)) => Some(g.clone()),
        (true, None) if endpoint.url.is_some() => Some(GateConfig {
            tools: vec!["*".into()],
            timeout_ms: 30_000,
            default: Default::default(),
        }),
        (true, None) => bail!(
            "--gate: the {} has no `gate` (add `gate = {{ tools = [\"{example_tool}\"] }}` to it)",
            resolved.from
        ),
    })
}

fn uninstall(target: &Target) -> anyhow::Result<ExitCode> {
    let file = target.file()?;
    if !file.exists() {
        println!("{}: no such file, nothing to remove", file.display());
        return Ok(ExitCode::SUCCESS);
    }
    let mut value = read_settings(&file)?;
    let removed = settings::uninstall(&mut value);
    if removed > 0 {
        write_settings(&file, &value)?;
    }
    println!("removed {removed} patchbay hook(s) from {}", file.display());
    Ok(ExitCode::SUCCESS)
}

fn status(project: Option<&Path>) -> anyhow::Result<ExitCode> {
    let project = match project {
        Some(dir) => dir.to_owned(),
        None => std::env::current_dir()?,
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match probe::find_binary(std::env::var_os("PATH").as_deref()) {
        Some(binary) => println!("claude: {}", binary.display()),
        None => println!("claude: not on PATH"),
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for file in probe::settings_files(home.as_deref(), Some(&project)) {
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(_) => {
                println!("{}: absent", file.display());
                continue;
            }
        };
        let value = match settings::parse(&file.display().to_string(), &text) {
            Ok(v) => v,
            Err(e) => {
                println!("{e}");
                continue;
            }
        };
        let hooks = settings::installed(&value);
        if hooks.is_empty() {
            println!("{}: no patchbay hooks", file.display());
            continue;
        }
        let mut urls: Vec<&str> = hooks.iter().filter_map(|h| h.url.as_deref()).collect();
        urls.sort_unstable();
        urls.dedup();
        let events: Vec<&str> = hooks.iter().map(|h| h.event.as_str()).collect();
        println!(
            "{}: patchbay hooks for {} event(s): {}",
            file.display(),
            hooks.len(),
            events.join(", ")
        );
        for url in urls {
            let answer = runtime.block_on(client::ping(url, Duration::from_millis(500)));
            match answer {
                Ok(()) => println!("  → {url}: answers"),
                Err(e) => println!("  → {url}: does not answer ({e})"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Everything `emit` does must end within this, whatever patchbay does.
const EMIT_DEADLINE: Duration = Duration::from_millis(900);

/// The hook's payload: standard input, at most 16 MiB, read on a blocking thread; `None`
/// when it cannot be read.
async fn read_stdin() -> Option<Vec<u8>> {
    tokio::task::spawn_blocking(|| {
        let mut body = Vec::new();
        std::io::stdin()
            .take(16 << 20)
            .read_to_end(&mut body)
            .map(|_| body)
    })
    .await
    .ok()?
    .ok()
}

/// Posts standard input to `url`; prints the answer when it is a decision (a non-empty
/// JSON object). Exit 0 always: a hook must never fail because patchbay is away.
fn emit(url: &str) -> ExitCode {
    // Not even a bug may fail Claude Code's hook: a panic is silent and still exits 0.
    std::panic::set_hook(Box::new(|_| {}));
    let _ = std::panic::catch_unwind(|| emit_inner(url));
    ExitCode::SUCCESS
}

fn emit_inner(url: &str) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let token = std::env::var(TOKEN_VAR).ok().filter(|t| !t.is_empty());
    let answer = runtime.block_on(async {
        tokio::time::timeout(EMIT_DEADLINE, async {
            let body = read_stdin().await?;
            client::post_hook(url, body, token.as_deref(), EMIT_DEADLINE)
                .await
                .ok()
        })
        .await
        .ok()
        .flatten()
    });
    if let Some(text) = answer
        && serde_json::from_str::<Value>(&text)
            .is_ok_and(|v| v.as_object().is_some_and(|o| !o.is_empty()))
    {
        println!("{text}");
    }
    // A stdin read still blocked must not keep the process.
    runtime.shutdown_background();
}

/// Gemini CLI's hooks: command hooks that run `patchbay hooks emit --agent gemini`.
#[cfg(feature = "gemini-cli")]
mod gemini {
    use super::*;
    use patchbay_gemini_cli::gate::hook_timeout_s;
    use patchbay_gemini_cli::settings as gemini_settings;

    /// Reads a Gemini CLI settings file (absent: `None`).
    fn read(file: &Path) -> anyhow::Result<Option<String>> {
        match std::fs::read_to_string(file) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow::anyhow!("{}: {e}", file.display())),
        }
    }

    pub(super) fn install(
        target: &Target,
        endpoint: &Endpoint,
        gate: bool,
    ) -> anyhow::Result<ExitCode> {
        let file = target.file_of(Agent::Gemini)?;
        let resolved = resolve(endpoint, Agent::Gemini)?;
        let gate = chosen_gate(gate, endpoint, &resolved, "run_shell_command")?;
        let program = std::env::current_exe()
            .and_then(|p| p.canonicalize())
            .context("cannot find the patchbay binary's path")?;
        let wait_s = gate.as_ref().map(hook_timeout_s);
        let mut command = format!(
            "{} hooks emit --agent gemini --url {}",
            settings::shell_quote(&program.display().to_string()),
            settings::shell_quote(&resolved.url)
        );
        if let Some(s) = wait_s {
            command.push_str(&format!(" --wait-ms {}", s.saturating_mul(1000)));
        }
        let existing = read(&file)?;
        let text = gemini_settings::install(existing.as_deref(), &command, wait_s)
            .map_err(|e| anyhow::anyhow!("{}:{e}", file.display()))?;
        if existing.as_deref() != Some(text.as_str()) {
            write_atomically(&file, &text)?;
        }
        println!(
            "installed patchbay's hooks for {} Gemini CLI events in {} → {} ({})",
            gemini_settings::EVENTS.len(),
            file.display(),
            resolved.url,
            resolved.from
        );
        if let (Some(gate), Some(s)) = (gate, wait_s) {
            println!(
                "gate: BeforeTool hooks wait up to {s} s (the gate answers within {} ms)",
                gate.timeout_ms
            );
        }
        if resolved.token {
            println!("the hooks send the token from ${TOKEN_VAR}: export it where Gemini CLI runs");
        }
        Ok(ExitCode::SUCCESS)
    }

    pub(super) fn uninstall(target: &Target) -> anyhow::Result<ExitCode> {
        let file = target.file_of(Agent::Gemini)?;
        let Some(text) = read(&file)? else {
            println!("{}: no such file, nothing to remove", file.display());
            return Ok(ExitCode::SUCCESS);
        };
        let at = |e: gemini_settings::SettingsError| anyhow::anyhow!("{}:{e}", file.display());
        let removed = gemini_settings::installed(&text).map_err(at)?.len();
        if removed > 0 {
            let new = gemini_settings::uninstall(&text).map_err(at)?;
            write_atomically(&file, &new)?;
        }
        println!(
            "removed patchbay's hooks for {removed} event(s) from {}",
            file.display()
        );
        Ok(ExitCode::SUCCESS)
    }

    /// How long a stopped or silent endpoint may take to refuse the connection.
    const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

    /// Posts standard input to `url` and prints the answer (a JSON object; `{}` on any
    /// failure). Exit 0 always: patchbay away must never fail or slow Gemini CLI. A
    /// `BeforeTool` waits up to `wait_ms` when given (a held call); everything else, and
    /// everything when patchbay does not answer, ends within a second.
    pub(super) fn emit(url: &str, wait_ms: Option<u64>) -> ExitCode {
        std::panic::set_hook(Box::new(|_| {}));
        let answer = std::panic::catch_unwind(|| emit_inner(url, wait_ms))
            .ok()
            .flatten()
            .unwrap_or_else(|| "{}".to_owned());
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{answer}");
        let _ = stdout.flush();
        ExitCode::SUCCESS
    }

    fn emit_inner(url: &str, wait_ms: Option<u64>) -> Option<String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        let token = std::env::var(TOKEN_VAR).ok().filter(|t| !t.is_empty());
        let answer = runtime.block_on(async {
            let body = tokio::time::timeout(EMIT_DEADLINE, read_stdin())
                .await
                .ok()
                .flatten()?;
            let held = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| {
                    v.get("hook_event_name")
                        .and_then(Value::as_str)
                        .map(|e| e == "BeforeTool")
                })
                .unwrap_or(false);
            let total = match wait_ms {
                Some(ms) if held => Duration::from_millis(ms).max(EMIT_DEADLINE),
                _ => EMIT_DEADLINE,
            };
            let connect = CONNECT_TIMEOUT.min(total);
            tokio::time::timeout(
                total,
                client::post_hook_within(url, body, token.as_deref(), connect, total),
            )
            .await
            .ok()?
            .ok()
        });
        // A stdin read still blocked must not keep the process.
        runtime.shutdown_background();
        let text = answer?;
        let value = serde_json::from_str::<Value>(text.trim()).ok()?;
        value.is_object().then(|| value.to_string())
    }
}

#[cfg(not(feature = "gemini-cli"))]
mod gemini {
    use super::*;

    fn missing() -> anyhow::Error {
        anyhow::anyhow!("this patchbay is built without the `gemini-cli` feature")
    }

    pub(super) fn install(_: &Target, _: &Endpoint, _: bool) -> anyhow::Result<ExitCode> {
        Err(missing())
    }

    pub(super) fn uninstall(_: &Target) -> anyhow::Result<ExitCode> {
        Err(missing())
    }

    /// Prints `{}`: no decision.
    pub(super) fn emit(_: &str, _: Option<u64>) -> ExitCode {
        println!("{{}}");
        ExitCode::SUCCESS
    }
}
