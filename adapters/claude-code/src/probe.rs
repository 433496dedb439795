//! Finding Claude Code: its binary on `PATH`, its settings files, and whether patchbay's
//! hooks are in them and where they point. Only files are read; nothing is connected to.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use patchbay_graph::probe::{Offers, ProbeContext, Service};
use patchbay_graph::{BoxFuture, descriptor::Probe};
use patchbay_hooks::settings_file::read_existing;
use patchbay_transport::probe::{find_program, program_state, report_blocking};

use crate::settings;

/// The probe of `local:claude-code`.
pub const PROBE: Probe = Probe {
    service: "claude-code",
    rescan: None,
    run: run_probe,
};

fn run_probe(_cx: ProbeContext) -> BoxFuture<Option<Service>> {
    Box::pin(async move {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let cwd = std::env::current_dir().ok();
        let path = std::env::var_os("PATH");
        Some(
            report_blocking(PROBE.service, "claude", move || {
                report(home.as_deref(), cwd.as_deref(), path.as_deref())
            })
            .await,
        )
    })
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
    let binary = find_binary(path);
    let (address, state) = program_state(binary.as_deref(), "claude");
    let mut parts = Vec::new();
    if binary.is_none() {
        parts.push("`claude` is not on PATH".to_owned());
    }
    let files = read_existing(settings_files(home, cwd));
    for (file, text) in &files {
        let shown = file.display();
        match settings::parse(&shown.to_string(), text) {
            Err(e) => parts.push(e.to_string()),
            Ok(value) => {
                let hooks = settings::installed(&value);
                let mut urls: Vec<&str> = hooks.iter().filter_map(|h| h.url.as_deref()).collect();
                urls.sort_unstable();
                urls.dedup();
                if hooks.is_empty() {
                    parts.push(format!("{shown}: no patchbay hooks"));
                } else {
                    parts.push(format!(
                        "{shown}: patchbay hooks for {} event(s) → {}",
                        hooks.len(),
                        urls.join(", ")
                    ));
                }
            }
        }
    }
    if files.is_empty() {
        parts.push("no settings file (patchbay hooks install writes one)".into());
    }
    Service::new(PROBE.service, Offers::Endpoint, address, state).with_detail(parts.join("; "))
}
