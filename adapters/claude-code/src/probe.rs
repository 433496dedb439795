//! Finding Claude Code: its binary on `PATH`, its settings files, and whether patchbay's
//! hooks are in them and where they point. Only files are read; nothing is connected to.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use patchbay_graph::probe::{ProbeContext, Service};
use patchbay_graph::{BoxFuture, descriptor::Probe};
use patchbay_hooks::probe::HookAgentProbe;
use patchbay_transport::probe::find_program;

use crate::settings;

/// The probe of `local:claude-code`.
pub const PROBE: Probe = AGENT.probe(run_probe);

/// Claude Code as a hook agent to find.
const AGENT: HookAgentProbe =
    HookAgentProbe::new("claude-code", "claude", "patchbay hooks install");

fn run_probe(_cx: ProbeContext) -> BoxFuture<Option<Service>> {
    AGENT.run(report)
}

/// The settings files Claude Code reads that patchbay may write: the user's
/// (`~/.claude/settings.json`) and the project's (`DIR/.claude/settings.json`,
/// `DIR/.claude/settings.local.json`).
pub fn settings_files(home: Option<&Path>, project: Option<&Path>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(home) = home {
        files.push(home.join(".claude/settings.json"));
    }
    if let Some(dir) = project {
        files.push(dir.join(".claude/settings.json"));
        files.push(dir.join(".claude/settings.local.json"));
    }
    files
}

/// The `claude` binary found on `path` (a `PATH` value).
pub fn find_binary(path: Option<&OsStr>) -> Option<PathBuf> {
    find_program(path, "claude")
}

/// What the probe reports, given `HOME`, the current directory and `PATH`: available
/// when the binary is found; the detail says, for each settings file that exists, where
/// patchbay's hooks point (or that there are none).
pub fn report(home: Option<&Path>, cwd: Option<&Path>, path: Option<&OsStr>) -> Service {
    AGENT.report(
        path,
        settings_files(home, cwd),
        |shown, text| match settings::parse(shown, text) {
            Err(e) => e.to_string(),
            Ok(value) => {
                let hooks = settings::installed(&value);
                let mut urls: Vec<&str> = hooks.iter().filter_map(|h| h.url.as_deref()).collect();
                urls.sort_unstable();
                urls.dedup();
                if hooks.is_empty() {
                    format!("{shown}: no patchbay hooks")
                } else {
                    format!(
                        "{shown}: patchbay hooks for {} event(s) → {}",
                        hooks.len(),
                        urls.join(", ")
                    )
                }
            }
        },
    )
}
