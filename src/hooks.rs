//! `patchbay hooks install | uninstall | status | emit`: patchbay's hooks in Claude
//! Code's settings, pointing at a `claude_code` component.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use patchbay_claude_code::gate::GateConfig;
use patchbay_claude_code::settings::{self, HookPlan, TOKEN_VAR};
use patchbay_claude_code::{ClaudeCodeConfig, client, probe};
use patchbay_graph::SourceText;
use serde_json::Value;

use crate::pipeline::{DEFAULT_PIPELINE, registry};

/// `patchbay hooks …`.
#[derive(Debug, Subcommand)]
pub enum HooksCommand {
    /// Write patchbay's hooks into Claude Code's settings (again: replaces them).
    Install {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        endpoint: Endpoint,
        /// Let the component's gate answer: `PreToolUse` and `PermissionRequest` hooks
        /// wait longer than the gate's `timeout_ms` (30000 with `--url`).
        #[arg(long)]
        gate: bool,
        /// `default`: the events patchbay maps; `all`: every event Claude Code has.
        #[arg(long, default_value = "default", value_parser = ["default", "all"])]
        events: String,
    },
    /// Remove patchbay's hooks (and only them) from Claude Code's settings.
    Uninstall {
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
    /// runs); always exits 0, within a second, even when patchbay is not running.
    Emit {
        /// The component's hook URL.
        #[arg(long)]
        url: String,
    },
}

/// Which settings file.
#[derive(Debug, Args)]
pub struct Target {
    /// `DIR/.claude/settings.local.json` (the default, with the current directory).
    #[arg(long, value_name = "DIR", conflicts_with = "user")]
    project: Option<PathBuf>,
    /// `~/.claude/settings.json`: every project of this user.
    #[arg(long)]
    user: bool,
}

/// Where the hooks point.
#[derive(Debug, Args)]
pub struct Endpoint {
    /// The config whose `claude_code` component the hooks point at (repeatable; default:
    /// the built-in default pipeline, what `patchbay` runs without arguments).
    #[arg(long = "config", value_name = "FILE", conflicts_with = "url")]
    configs: Vec<PathBuf>,
    /// The `claude_code` component to use when the config has several.
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
            target,
            endpoint,
            gate,
            events,
        } => install(&target, &endpoint, gate, &events),
        HooksCommand::Uninstall { target } => uninstall(&target),
        HooksCommand::Status { project } => status(project.as_deref()),
        HooksCommand::Emit { url } => Ok(emit(&url)),
    }
}

impl Target {
    fn file(&self) -> anyhow::Result<PathBuf> {
        if self.user {
            let home = std::env::var_os("HOME").context("HOME is not set")?;
            return Ok(PathBuf::from(home).join(".claude/settings.json"));
        }
        let dir = match &self.project {
            Some(dir) => dir.clone(),
            None => std::env::current_dir()?,
        };
        let dir = dir
            .canonicalize()
            .with_context(|| format!("{}: no such directory", dir.display()))?;
        Ok(dir.join(".claude/settings.local.json"))
    }
}

/// The endpoint's URL, whether it needs the token, and its gate.
struct Resolved {
    url: String,
    token: bool,
    gate: Option<GateConfig>,
    from: String,
}

fn resolve(endpoint: &Endpoint) -> anyhow::Result<Resolved> {
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
                if options.get("type").and_then(toml::Value::as_str) == Some("claude_code") {
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
                "the config has several claude_code components ({}): choose one with --component",
                names.join(", ")
            );
        }
        None => found.into_iter().next(),
    };
    let Some((path, name, options)) = chosen else {
        bail!("the config has no claude_code component (add one, or give --url)");
    };
    let mut options = options.as_table().cloned().unwrap_or_default();
    for key in ["type", "inputs", "queue", "when_full"] {
        options.remove(key);
    }
    let config: ClaudeCodeConfig = toml::Value::Table(options)
        .try_into()
        .with_context(|| format!("{path}: component `{name}`"))?;
    let checked = patchbay_claude_code::Settings::check(config)
        .map_err(|(key, message)| anyhow::anyhow!("{path}: `{name}.{key}`: {message}"))?;
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
        out.write_all(settings::render(value).as_bytes())?;
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
    let resolved = resolve(endpoint)?;
    let gate = match (gate, resolved.gate) {
        (false, _) => None,
        (true, Some(g)) => Some(g),
        (true, None) if endpoint.url.is_some() => Some(GateConfig {
            tools: vec!["*".into()],
            timeout_ms: 30_000,
            default: Default::default(),
        }),
        (true, None) => bail!(
            "--gate: the {} has no `gate` (add `gate = {{ tools = [\"Bash\"] }}` to it)",
            resolved.from
        ),
    };
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
            let body = tokio::task::spawn_blocking(|| {
                let mut body = Vec::new();
                std::io::stdin()
                    .take(16 << 20)
                    .read_to_end(&mut body)
                    .map(|_| body)
            })
            .await
            .ok()?
            .ok()?;
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
