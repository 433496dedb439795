//! Finding a hook agent (Claude Code, Gemini CLI) the same way for each: its program on
//! `PATH`, its settings files, and what each says of patchbay's hooks. Only files are
//! read; nothing is connected to, no process is started, nothing is written.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use patchbay_graph::BoxFuture;
use patchbay_graph::descriptor::Probe;
use patchbay_graph::probe::{Offers, ProbeContext, Service};
use patchbay_transport::probe::{find_program, program_state, report_blocking};

use crate::settings_file::read_existing;

/// What a probe of a hook agent reports from, given `HOME`, the current directory and
/// `PATH`.
pub type ReportFn = fn(Option<&Path>, Option<&Path>, Option<&OsStr>) -> Service;

/// A hook agent: what its probe looks for.
#[derive(Debug, Clone, Copy)]
pub struct HookAgentProbe {
    /// The service name (`claude-code`).
    pub service: &'static str,
    /// The agent's program (`claude`), looked for on `PATH`.
    pub program: &'static str,
    /// The command that writes patchbay's hooks, named when there is no settings file
    /// (`patchbay hooks install`).
    pub install: &'static str,
}

impl HookAgentProbe {
    /// The agent of service `service` whose program is `program`, its hooks written by
    /// `install`.
    pub const fn new(service: &'static str, program: &'static str, install: &'static str) -> Self {
        HookAgentProbe {
            service,
            program,
            install,
        }
    }

    /// The discovery probe of the agent, which `run` runs (calling [`run`](Self::run)).
    pub const fn probe(self, run: fn(ProbeContext) -> BoxFuture<Option<Service>>) -> Probe {
        Probe::new(self.service, run)
    }

    /// Runs `report` on patchbay's own `HOME`, current directory and `PATH`, on the
    /// blocking pool (it reads files): a probe's `run`.
    pub fn run(self, report: ReportFn) -> BoxFuture<Option<Service>> {
        Box::pin(async move {
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let cwd = std::env::current_dir().ok();
            let path = std::env::var_os("PATH");
            Some(
                report_blocking(self.service, self.program, move || {
                    report(home.as_deref(), cwd.as_deref(), path.as_deref())
                })
                .await,
            )
        })
    }

    /// The report: available, at the program's path, when the program is on `path`, else
    /// unavailable; the detail has what `describe` says of each of `files` that exists
    /// (given its name as shown and its text), or that there is none.
    pub fn report(
        self,
        path: Option<&OsStr>,
        files: Vec<PathBuf>,
        mut describe: impl FnMut(&str, &str) -> String,
    ) -> Service {
        let binary = find_program(path, self.program);
        let (address, state) = program_state(binary.as_deref(), self.program);
        let mut parts = Vec::new();
        if binary.is_none() {
            parts.push(format!("`{}` is not on PATH", self.program));
        }
        let files = read_existing(files);
        for (file, text) in &files {
            parts.push(describe(&file.display().to_string(), text));
        }
        if files.is_empty() {
            parts.push(format!("no settings file ({} writes one)", self.install));
        }
        Service::new(self.service, Offers::Endpoint, address, state).with_detail(parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_graph::probe::ServiceState;

    const AGENT: HookAgentProbe = HookAgentProbe::new(
        "agent",
        "no-such-agent-program",
        "patchbay hooks install --agent x",
    );

    #[test]
    fn each_settings_file_that_exists_is_described() {
        let dir = std::env::temp_dir().join(format!("patchbay-hook-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("settings.json");
        std::fs::write(&file, "{}").unwrap();
        let files = vec![file.clone(), dir.join("absent.json")];
        let service = AGENT.report(None, files, |shown, text| format!("{shown} has {text}"));
        assert_eq!(service.state, ServiceState::Unavailable);
        let detail = service.detail.unwrap_or_default();
        assert_eq!(
            detail,
            format!(
                "`no-such-agent-program` is not on PATH; {} has {{}}",
                file.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_settings_file_names_the_install_command() {
        let service = AGENT.report(None, Vec::new(), |_, _| unreachable!());
        assert_eq!(
            service.detail.as_deref(),
            Some(
                "`no-such-agent-program` is not on PATH; no settings file (patchbay hooks \
                 install --agent x writes one)"
            )
        );
    }
}
