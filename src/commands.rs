//! `run`, `validate`, `graph` and `test`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use patchbay_graph::{Graph, NodeKind, Port, SourceText};

use patchbay_graph::WrapRequest;
use patchbay_graph::config::suggestion;

use crate::config_files::{self, ConfigChoice, DefaultPipeline};
use crate::daemon::{self, ConfigSource, Daemon};
use crate::instance::{self, InstanceLock};
use crate::pipeline::{ADAPTERS, DEFAULT_PIPELINE, registry};

/// The exit status of `run` when a config is wrong (sysexits' `EX_CONFIG`).
pub const EXIT_CONFIG: u8 = 78;
/// The exit status of `run` when something it needs is not there: the instance is
/// already running, a port is taken, a file is missing (sysexits' `EX_UNAVAILABLE`).
pub const EXIT_UNAVAILABLE: u8 = 69;

/// Which daemon: its configs, `--listen` and instance name. `run` starts it; `reload`,
/// given the same, finds it.
#[derive(Debug, Default, clap::Args)]
pub struct DaemonArgs {
    /// A config file, or a folder of `*.toml` files; repeat for more, merged into one
    /// graph. None: `PATCHBAY_CONFIG`, else `$XDG_CONFIG_HOME/patchbay/`, else the
    /// built-in default pipeline.
    #[arg(short = 'c', long = "config", value_name = "PATH")]
    config: Vec<PathBuf>,
    /// Config files or folders (the same as `-c`).
    #[arg(value_name = "CONFIG")]
    configs: Vec<PathBuf>,
    /// The default pipeline's sidecar address (default `127.0.0.1:7878`).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// The instance's name: a second daemon of one instance refuses to start (default:
    /// derived from the configs and `--listen`).
    #[arg(long, value_name = "NAME")]
    instance: Option<String>,
}

impl DaemonArgs {
    /// The configs this daemon runs.
    fn choice(&self) -> ConfigChoice {
        let given: Vec<PathBuf> = self.config.iter().chain(&self.configs).cloned().collect();
        config_files::choose(
            &given,
            std::env::var_os("PATCHBAY_CONFIG"),
            config_files::user_config_dir(),
        )
    }

    /// The instance's name: `--instance`, else derived from the configs (as `choice`
    /// gives them) and `--listen`.
    fn instance(&self, choice: &ConfigChoice) -> String {
        let configs: &[PathBuf] = match choice {
            ConfigChoice::Paths(paths) => paths,
            ConfigChoice::Default => &[],
        };
        self.instance
            .clone()
            .unwrap_or_else(|| instance::derived_name(configs, self.listen.as_deref()))
    }
}

/// `patchbay run`'s options.
#[derive(Debug, Default, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
    /// Reload when a config file changes (polled twice a second; a change is applied once
    /// the files have stayed the same for one more poll).
    #[arg(long)]
    watch: bool,
}

/// `patchbay reload`'s options: which daemon, given as its `run` was.
#[derive(Debug, Default, clap::Args)]
pub struct ReloadArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
}

/// `patchbay reload`: the running daemon reloads its config.
pub fn reload(args: &ReloadArgs) -> anyhow::Result<ExitCode> {
    let choice = args.daemon.choice();
    let instance = args.daemon.instance(&choice);
    daemon::request_reload(&instance::lock_dir(), &instance)
}

/// Loads and compiles config files; on errors prints them and returns `None`.
fn load(configs: &[PathBuf]) -> Option<Graph> {
    let files = if configs.is_empty() {
        vec![SourceText::new("<default pipeline>", DEFAULT_PIPELINE)]
    } else {
        read(configs)?
    };
    compile(&files)
}

/// Reads config paths; on errors prints them and returns `None`.
fn read(configs: &[PathBuf]) -> Option<Vec<SourceText>> {
    match patchbay_graph::read_config_paths(configs) {
        Ok(files) if files.is_empty() => {
            eprintln!("patchbay: no *.toml config in {configs:?}");
            None
        }
        Ok(files) => Some(files),
        Err(e) => {
            eprintln!("{e}");
            None
        }
    }
}

/// Compiles configs; on errors prints them and returns `None`.
fn compile(files: &[SourceText]) -> Option<Graph> {
    match patchbay_graph::compile(files, &registry()) {
        Ok(graph) => Some(graph),
        Err(errors) => {
            for e in &errors {
                eprintln!("{e}");
            }
            eprintln!(
                "patchbay: {} error{} in the config",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
            None
        }
    }
}

/// `patchbay validate CONFIG…`.
pub fn validate(configs: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let Some(graph) = load(configs) else {
        return Ok(ExitCode::FAILURE);
    };
    let count = |f: fn(&NodeKind) -> bool| graph.nodes.iter().filter(|n| f(&n.kind)).count();
    println!(
        "ok: {} source(s), {} filter(s), {} output(s), {} test(s)",
        count(|k| matches!(k, NodeKind::Source(_) | NodeKind::Inbound { .. })),
        count(|k| matches!(k, NodeKind::Filter(_))),
        count(|k| matches!(k, NodeKind::Output { .. })),
        graph.tests.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// `patchbay run`: the daemon, until SIGINT or SIGTERM.
pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    let choice = args.daemon.choice();
    let (files, source) = match &choice {
        ConfigChoice::Paths(paths) => {
            if args.daemon.listen.is_some() {
                eprintln!(
                    "patchbay: --listen moves the default pipeline's sidecar; with configs, set `listen` in them"
                );
                return Ok(ExitCode::from(EXIT_CONFIG));
            }
            let Some(files) = read(paths) else {
                return Ok(ExitCode::from(EXIT_CONFIG));
            };
            (files, ConfigSource::Paths(paths.clone()))
        }
        ConfigChoice::Default => {
            let pipeline = DefaultPipeline {
                listen: args.daemon.listen.clone(),
                stdin: !std::io::stdin().is_terminal(),
            };
            match pipeline.source_text() {
                Ok(text) => (vec![text.clone()], ConfigSource::Fixed(vec![text])),
                Err(e) => anyhow::bail!("the default pipeline does not parse: {e}"),
            }
        }
    };
    let Some(graph) = compile(&files) else {
        return Ok(ExitCode::from(EXIT_CONFIG));
    };
    let instance = args.daemon.instance(&choice);
    let lock_dir = instance::lock_dir();
    let _lock = match InstanceLock::acquire(&lock_dir, &instance) {
        Ok(lock) => {
            tracing::debug!(lock = %lock.path().display(), "instance `{instance}`");
            lock
        }
        Err(e) => {
            eprintln!("patchbay: {e}");
            return Ok(ExitCode::from(EXIT_UNAVAILABLE));
        }
    };
    if args.watch && matches!(source, ConfigSource::Fixed(_)) {
        tracing::warn!("--watch: the default pipeline has no file to watch");
    }
    daemon::serve(Daemon {
        graph,
        source,
        watch: args.watch,
        reload_status: daemon::reload_status_path(&lock_dir, &instance),
    })
}

pub fn graph(configs: &[PathBuf], format: &str) -> anyhow::Result<ExitCode> {
    let Some(graph) = load(configs) else {
        return Ok(ExitCode::FAILURE);
    };
    print!("{}", draw(&graph, format == "mermaid"));
    Ok(ExitCode::SUCCESS)
}

/// The graph as Graphviz dot or a Mermaid flowchart.
pub fn draw(graph: &Graph, mermaid: bool) -> String {
    let mut out = String::new();
    let id = |i: usize| format!("n{i}");
    if mermaid {
        out.push_str("flowchart LR\n");
    } else {
        out.push_str("digraph patchbay {\n  rankdir=LR;\n");
    }
    for (i, n) in graph.nodes.iter().enumerate() {
        let label = format!("{}\\n{}", n.name, n.type_name);
        if mermaid {
            let (open, close) = match n.kind {
                NodeKind::Source(_) | NodeKind::Inbound { .. } => ("([", "])"),
                NodeKind::Filter(_) => ("[", "]"),
                NodeKind::Output { .. } => ("[[", "]]"),
            };
            let _ = writeln!(
                out,
                "  {}{open}\"{} ({})\"{close}",
                id(i),
                n.name,
                n.type_name
            );
        } else {
            let shape = match n.kind {
                NodeKind::Source(_) | NodeKind::Inbound { .. } => "ellipse",
                NodeKind::Filter(_) => "box",
                NodeKind::Output { .. } => "doubleoctagon",
            };
            let _ = writeln!(out, "  {} [label=\"{label}\", shape={shape}];", id(i));
        }
    }
    for (i, n) in graph.nodes.iter().enumerate() {
        for e in &n.inputs {
            // An edge from a named port (a route's branch, `_unmatched`) is labelled with
            // the port, as one from `dropped` is: otherwise a route's branches look alike.
            let port = match (e.port, &graph.nodes[e.from].kind) {
                (Port::Named(p), NodeKind::Filter(spec)) => spec.ports().get(usize::from(p)),
                _ => None,
            };
            if mermaid {
                let arrow = match (&port, e.port) {
                    (_, Port::Dropped) => "-. dropped .->".to_owned(),
                    (Some(p), _) => format!("-->|\"{}\"|", p.replace('"', "#quot;")),
                    (None, _) => "-->".to_owned(),
                };
                let _ = writeln!(out, "  {} {arrow} {}", id(e.from), id(i));
            } else {
                let style = match (&port, e.port) {
                    (_, Port::Dropped) => " [style=dashed, label=\"dropped\"]".to_owned(),
                    (Some(p), _) => format!(
                        " [label=\"{}\"]",
                        p.replace('\\', "\\\\").replace('"', "\\\"")
                    ),
                    (None, _) => String::new(),
                };
                let _ = writeln!(out, "  {} -> {}{style};", id(e.from), id(i));
            }
        }
        if let NodeKind::Inbound { output } = n.kind {
            if mermaid {
                let _ = writeln!(out, "  {} -. inbound .-> {}", id(output), id(i));
            } else {
                let _ = writeln!(out, "  {} -> {} [style=dotted];", id(output), id(i));
            }
        }
    }
    if !mermaid {
        out.push_str("}\n");
    }
    out
}

pub fn test(configs: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let Some(graph) = load(configs) else {
        return Ok(ExitCode::FAILURE);
    };
    let results = patchbay_graph::testing::run_tests(&graph);
    let mut failed = 0;
    for r in &results {
        if r.passed() {
            println!("test {} ... passed", r.name);
        } else {
            failed += 1;
            println!("test {} ... FAILED", r.name);
            for f in &r.failures {
                println!("{f}");
            }
        }
    }
    println!("{} passed, {} failed", results.len() - failed, failed);
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `patchbay tap`'s options.
#[derive(Debug, clap::Args)]
pub struct TapArgs {
    /// The sidecar's WebSocket URL.
    #[arg(default_value = patchbay_server::DEFAULT_TAP_URL)]
    url: String,
    /// Only these types (comma-separated; a trailing `*` matches a prefix).
    #[arg(long)]
    types: Option<String>,
    /// First replay what the sidecar still holds after this seq.
    #[arg(long)]
    since: Option<u64>,
    /// NDJSON even on a terminal.
    #[arg(long)]
    json: bool,
    /// The sidecar's token (also `PATCHBAY_TOKEN`), sent as a bearer header.
    #[arg(long, env = "PATCHBAY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Stop when the connection ends instead of reconnecting.
    #[arg(long)]
    once: bool,
}

/// `patchbay tap`: prints what a sidecar sends until Ctrl-C; reconnects and resumes by
/// `seq` when the connection ends (unless `--once`). Exits 1 when it cannot connect at all.
pub fn tap(args: TapArgs) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    let options = patchbay_server::TapOptions {
        readable: !args.json && std::io::stdout().is_terminal(),
        types: args.types,
        since: args.since,
        token: args.token.map(patchbay_graph::config::Secret),
        follow: !args.once,
        url: args.url,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut out = std::io::stdout();
        let note = |what: &str| eprintln!("patchbay tap: {what}");
        tokio::select! {
            result = patchbay_server::tap(&options, &mut out, note) => result.map_err(anyhow::Error::from),
            () = daemon::stop_signal() => Ok(()),
        }
    })?;
    Ok(ExitCode::SUCCESS)
}

/// `patchbay wrap --protocol P -- COMMAND…`: the wrapper of the adapter that speaks `P`.
pub fn wrap(
    protocol: &str,
    to: String,
    name: Option<String>,
    command: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let Some(wrap) = ADAPTERS
        .iter()
        .find(|a| a.protocol == protocol)
        .and_then(|a| a.wrap)
    else {
        let known: Vec<&str> = wrap_protocols().collect();
        anyhow::bail!(
            "`wrap --protocol {protocol}` is not available{}; known: {}",
            suggestion(protocol, known.iter().copied()),
            known.join(", ")
        );
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let code = runtime
        .block_on(wrap(WrapRequest { command, to, name }))
        .map_err(|e| anyhow::anyhow!(e))?;
    // The relay tasks may still wait on the terminal: do not wait for them.
    runtime.shutdown_background();
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// The protocols `wrap` knows.
pub fn wrap_protocols() -> impl Iterator<Item = &'static str> {
    ADAPTERS
        .iter()
        .filter(|a| a.wrap.is_some())
        .map(|a| a.protocol)
}
