//! The `patchbay` binary: the one place that assembles every adapter.
//!
//! [`ADAPTERS`] lists the adapters of this build (each behind its cargo feature); the
//! component [`registry`], `parse --protocol`, `wrap --protocol` and `components` are
//! derived from it. The command line: `run` starts the daemon on config files (or the
//! built-in default pipeline), `validate` checks configs, `parse` decodes a capture into
//! NDJSON signals, `graph` draws the wiring, `test` runs the `[[tests]]` written in configs,
//! `components` lists the component types and their options, and `tap` prints what a
//! running sidecar sends. [`discovery`] finds the local services, for `discover` and the
//! daemon.

mod commands;
mod components;
mod config_files;
mod daemon;
mod discover;
pub mod discovery;
#[cfg(feature = "claude-code")]
mod hooks;
mod instance;
#[cfg(feature = "midi")]
mod midi;
mod parse;
mod pipeline;
mod service;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use pipeline::{ADAPTERS, DEFAULT_PIPELINE, probes, registry};

/// patchbay: a signal router for AI agents and the hardware around them.
#[derive(Debug, Parser)]
#[command(name = "patchbay", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// How log lines are written to standard error: `text` (coloured only on a terminal)
    /// or `json` (one object per line, for a log collector).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Probe local services (Ollama, LM Studio, OpenClaw) and MIDI ports.
    Discover {
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the component types, or show the options of one.
    Components {
        /// A component type (`throttle`, `sidecar`, …): show its options.
        #[arg(value_name = "TYPE")]
        type_name: Option<String>,
        /// As JSON (a type's options as a JSON schema).
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// As Markdown: without TYPE, the whole component reference
        /// (docs/reference/components.md is this output).
        #[arg(long)]
        markdown: bool,
    },
    /// Run patchbay as a background service of your session (systemd user unit on
    /// Linux, launchd agent on macOS).
    Service {
        #[command(subcommand)]
        command: ServiceCommand,
    },
    /// MIDI ports: list them, watch one, learn a control.
    #[cfg(not(feature = "midi"))]
    Midi {
        /// (This build has no MIDI.)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        rest: Vec<String>,
    },
    /// MIDI ports: list them, watch one, learn a control.
    #[cfg(feature = "midi")]
    Midi {
        #[command(subcommand)]
        command: MidiCommand,
    },
    /// Run the daemon on CONFIG files or directories (no CONFIG: the default pipeline).
    Run(commands::RunArgs),
    /// Make the running daemon reload its config (SIGHUP); says what changed, or why the
    /// new config was refused (exit 78). The daemon is found by the configs, `--listen` and
    /// `--instance` its `run` was given.
    Reload(commands::ReloadArgs),
    /// Check configs; exit 1 with FILE:LINE:COL messages.
    Validate {
        /// Config files or directories.
        #[arg(required = true)]
        configs: Vec<std::path::PathBuf>,
    },
    /// Decode a capture (stdin if no FILE) into NDJSON signals on stdout.
    Parse {
        /// The capture's protocol.
        #[arg(long, short)]
        protocol: String,
        /// The capture file; standard input when absent.
        file: Option<std::path::PathBuf>,
    },
    /// Draw the wiring graph of configs.
    Graph {
        /// Config files or directories.
        #[arg(required = true)]
        configs: Vec<std::path::PathBuf>,
        /// Output format.
        #[arg(long, default_value = "dot", value_parser = ["dot", "mermaid"])]
        format: String,
    },
    /// Run the `[[tests]]` written in configs.
    Test {
        /// Config files or directories.
        #[arg(required = true)]
        configs: Vec<std::path::PathBuf>,
    },
    /// Run a program and publish its signals to a running patchbay (`jte`: JSON terminal
    /// escapes in a pseudo-terminal; `codelia`: a Codelia runtime on stdio).
    Wrap {
        /// What the program speaks.
        #[arg(long, short, value_parser = clap::builder::PossibleValuesParser::new(commands::wrap_protocols()))]
        protocol: String,
        /// The running patchbay's sidecar.
        #[arg(long, default_value = "http://127.0.0.1:7878")]
        to: String,
        /// The name control signals address it by (`payload.target`; jte only; default:
        /// the command's name).
        #[arg(long)]
        name: Option<String>,
        /// The program and its arguments, after `--`.
        #[arg(required = true, last = true)]
        command: Vec<String>,
    },
    /// Agents' hooks (Claude Code; Gemini CLI with `--agent gemini`): install, uninstall,
    /// status (and `emit`, what they run).
    #[cfg(feature = "claude-code")]
    Hooks {
        #[command(subcommand)]
        command: hooks::HooksCommand,
    },
    /// Print the signals flowing through a running patchbay's sidecar.
    Tap(commands::TapArgs),
}

#[derive(Debug, Subcommand)]
enum ServiceCommand {
    /// Write the unit (or agent) and start it; it runs `patchbay run` with these configs.
    Install {
        /// Config files or folders for `run` (none: its own lookup, ~/.config/patchbay/).
        #[arg(short = 'c', long = "config", value_name = "PATH")]
        config: Vec<std::path::PathBuf>,
        /// Print the file instead of writing it.
        #[arg(long)]
        print: bool,
        /// The service manager (default: this system's).
        #[arg(long, value_enum)]
        manager: Option<service::Manager>,
    },
    /// Stop the service and remove its unit.
    Uninstall {
        /// The service manager (default: this system's).
        #[arg(long, value_enum)]
        manager: Option<service::Manager>,
    },
    /// Whether the service is installed and running (exit 3 when it is not).
    Status {
        /// The service manager (default: this system's).
        #[arg(long, value_enum)]
        manager: Option<service::Manager>,
    },
}

#[cfg(feature = "midi")]
#[derive(Debug, Subcommand)]
enum MidiCommand {
    /// List the MIDI input and output ports.
    List {
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the messages of a port as signals (NDJSON) until Ctrl-C.
    Monitor {
        /// The port: full name or regex (default: the first one).
        port: Option<String>,
        /// Also show system messages (clock, SysEx, …).
        #[arg(long)]
        system: bool,
    },
    /// Wait for a pad, key or knob and print the filter block that maps it.
    Learn {
        /// The port: full name or regex (default: the first one).
        port: Option<String>,
        /// The name of the MIDI source in your config.
        #[arg(long, default_value = "pads")]
        source: String,
        /// The signal type to map the control to.
        #[arg(long, default_value = "control.pause")]
        target: String,
    },
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let result = match cli
        .command
        .unwrap_or_else(|| Command::Run(commands::RunArgs::default()))
    {
        Command::Run(args) => commands::run(&args),
        Command::Reload(args) => commands::reload(&args),
        Command::Discover { json } => discover::run(json),
        Command::Components {
            type_name,
            json,
            markdown,
        } => components::run(
            type_name.as_deref(),
            match (json, markdown) {
                (true, _) => components::Format::Json,
                (_, true) => components::Format::Markdown,
                _ => components::Format::Text,
            },
        ),
        Command::Service { command } => match command {
            ServiceCommand::Install {
                config,
                print,
                manager,
            } => service::install(
                manager.unwrap_or_else(service::Manager::native),
                &config,
                print,
            ),
            ServiceCommand::Uninstall { manager } => {
                service::uninstall(manager.unwrap_or_else(service::Manager::native))
            }
            ServiceCommand::Status { manager } => {
                service::status(manager.unwrap_or_else(service::Manager::native))
            }
        },
        #[cfg(not(feature = "midi"))]
        Command::Midi { .. } => {
            eprintln!("patchbay: {}", pipeline::NO_MIDI);
            Ok(ExitCode::FAILURE)
        }
        #[cfg(feature = "midi")]
        Command::Midi { command } => match command {
            MidiCommand::List { json } => midi::list(json),
            MidiCommand::Monitor { port, system } => midi::monitor(port.as_deref(), system),
            MidiCommand::Learn {
                port,
                source,
                target,
            } => midi::learn(port.as_deref(), &source, &target),
        },
        Command::Validate { configs } => commands::validate(&configs),
        Command::Parse { protocol, file } => parse::parse(&protocol, file.as_deref()),
        Command::Graph { configs, format } => commands::graph(&configs, &format),
        Command::Test { configs } => commands::test(&configs),
        Command::Wrap {
            protocol,
            to,
            name,
            command,
        } => commands::wrap(&protocol, to, name, command),
        #[cfg(feature = "claude-code")]
        Command::Hooks { command } => hooks::run(command),
        Command::Tap(args) => commands::tap(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("patchbay: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("PATCHBAY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
    };
    // A panic is logged like everything else, inside the span of the component that
    // panicked (the runtime catches it and restarts the component).
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(%location, "panic: {message}");
    }));
}
