//! The `patchbay` command line.
//!
//! `run` starts the daemon on config files (or the built-in default pipeline), `validate`
//! checks configs, `parse` decodes a capture into NDJSON signals, `graph` draws the wiring,
//! `test` runs the `[[tests]]` written in configs and `tap` prints what a running sidecar
//! sends.

mod commands;
mod parse;
mod pipeline;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use pipeline::{DEFAULT_PIPELINE, registry};

/// patchbay: a signal router for AI agents and the hardware around them.
#[derive(Debug, Parser)]
#[command(name = "patchbay", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon on CONFIG files or directories (no CONFIG: the default pipeline).
    Run {
        /// Config files, or directories of `*.toml` files, merged into one graph.
        configs: Vec<std::path::PathBuf>,
    },
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
    /// Run the [[tests]] written in configs.
    Test {
        /// Config files or directories.
        #[arg(required = true)]
        configs: Vec<std::path::PathBuf>,
    },
    /// Print the signals flowing through a running patchbay's sidecar.
    Tap {
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
    },
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result = match cli.command.unwrap_or(Command::Run {
        configs: Vec::new(),
    }) {
        Command::Run { configs } => commands::run(&configs),
        Command::Validate { configs } => commands::validate(&configs),
        Command::Parse { protocol, file } => parse::parse(&protocol, file.as_deref()),
        Command::Graph { configs, format } => commands::graph(&configs, &format),
        Command::Test { configs } => commands::test(&configs),
        Command::Tap {
            url,
            types,
            since,
            json,
        } => commands::tap(&url, types.as_deref(), since, json),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("patchbay: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("PATCHBAY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
