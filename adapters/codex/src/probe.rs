//! Finding Codex: the `codex` binary on `PATH`, and its home (`$CODEX_HOME`, else
//! `~/.codex`) with its `config.toml`. Only the file system is looked at: no process is
//! started, no file is read beyond its metadata, nothing is written.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use patchbay_graph::probe::{Offers, ProbeContext, Service};
use patchbay_graph::{BoxFuture, descriptor::Probe};
use patchbay_transport::probe::{find_program, program_state, report_blocking};

/// The probe of `local:codex`.
pub const PROBE: Probe = Probe::new("codex", run_probe);

fn run_probe(_cx: ProbeContext) -> BoxFuture<Option<Service>> {
    Box::pin(async move {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let codex_home = std::env::var_os("CODEX_HOME").map(PathBuf::from);
        let path = std::env::var_os("PATH");
        Some(
            report_blocking(PROBE.service, "codex", move || {
                report(home.as_deref(), codex_home.as_deref(), path.as_deref())
            })
            .await,
        )
    })
}

/// Codex's home directory: `codex_home` (the value of `$CODEX_HOME`) when it is set and
/// not empty, else `HOME/.codex`; `None` when neither is known.
pub fn home_dir(home: Option<&Path>, codex_home: Option<&Path>) -> Option<PathBuf> {
    match codex_home {
        Some(dir) if !dir.as_os_str().is_empty() => Some(dir.to_path_buf()),
        _ => home.map(|h| h.join(".codex")),
    }
}

/// The `codex` binary found on `path` (a `PATH` value): the first executable file named
/// `codex` in its directories.
pub fn find_binary(path: Option<&OsStr>) -> Option<PathBuf> {
    find_program(path, "codex")
}

/// What the probe reports, given `HOME`, `$CODEX_HOME` and `PATH`: available, at the
/// binary's path, when `codex` is on `PATH` (the detail says that `type = "codex"` runs
/// it), else unavailable; either way the detail says where Codex's home is and whether it
/// has a `config.toml`.
pub fn report(home: Option<&Path>, codex_home: Option<&Path>, path: Option<&OsStr>) -> Service {
    let binary = find_binary(path);
    let (address, state) = program_state(binary.as_deref(), "codex");
    let mut parts = Vec::new();
    if binary.is_some() {
        parts.push("patchbay can run it: `type = \"codex\"` (`codex app-server`)".to_owned());
    } else {
        parts.push("`codex` is not on PATH".to_owned());
    }
    let from_env = codex_home.is_some_and(|d| !d.as_os_str().is_empty());
    match home_dir(home, codex_home) {
        None => parts.push("no HOME and no CODEX_HOME: Codex's home is unknown".to_owned()),
        Some(dir) => {
            let shown = dir.display();
            if !dir.is_dir() {
                parts.push(if from_env {
                    format!("CODEX_HOME {shown} does not exist")
                } else {
                    format!("no {shown} yet (Codex makes it on its first run)")
                });
            } else {
                let config = dir.join("config.toml");
                if config.is_file() {
                    parts.push(config.display().to_string());
                } else {
                    parts.push(format!("{shown}: no config.toml (Codex's defaults)"));
                }
            }
        }
    }
    Service::new(PROBE.service, Offers::Endpoint, address, state).with_detail(parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_graph::probe::ServiceState;
    use patchbay_testkit::scratch::ScratchDir;

    /// An executable `bin/codex` under `dir`; returns `bin`.
    fn install_binary(dir: &Path) -> PathBuf {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = bin.join("codex");
        std::fs::write(&exe, "#!/bin/sh\nexit 0\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        bin
    }

    #[test]
    fn not_on_path_is_unavailable_and_says_where_the_home_would_be() {
        let scratch = ScratchDir::new("codex-probe-absent");
        let empty = scratch.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let service = report(Some(scratch.path()), None, Some(empty.as_os_str()));
        assert_eq!(service.service, "codex");
        assert_eq!(service.state, ServiceState::Unavailable);
        assert_eq!(service.address, "codex");
        assert_eq!(
            service.detail.as_deref(),
            Some(
                format!(
                    "`codex` is not on PATH; no {} yet (Codex makes it on its first run)",
                    scratch.join(".codex").display()
                )
                .as_str()
            )
        );
        // No PATH at all is the same.
        let service = report(None, None, None);
        assert_eq!(service.state, ServiceState::Unavailable);
        assert_eq!(
            service.detail.as_deref(),
            Some("`codex` is not on PATH; no HOME and no CODEX_HOME: Codex's home is unknown")
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_file_that_is_not_executable_is_not_the_binary() {
        let scratch = ScratchDir::new("codex-probe-not-exe");
        let bin = scratch.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("codex"), "").unwrap();
        std::fs::create_dir_all(scratch.join("bin2/codex")).unwrap();
        let path = std::env::join_paths([bin, scratch.join("bin2")]).unwrap();
        assert_eq!(find_binary(Some(&path)), None);
    }

    #[test]
    fn on_path_with_its_home_and_config() {
        let scratch = ScratchDir::new("codex-probe-found");
        let bin = install_binary(scratch.path());
        let path = std::env::join_paths([scratch.join("nothing-here"), bin.clone()]).unwrap();

        // `~/.codex` without a config.toml.
        std::fs::create_dir_all(scratch.join(".codex")).unwrap();
        let service = report(Some(scratch.path()), None, Some(&path));
        assert_eq!(service.state, ServiceState::Available);
        assert_eq!(service.address, bin.join("codex").display().to_string());
        assert_eq!(service.offers, Offers::Endpoint);
        assert_eq!(
            service.detail.as_deref(),
            Some(
                format!(
                    "patchbay can run it: `type = \"codex\"` (`codex app-server`); {}: no config.toml (Codex's defaults)",
                    scratch.join(".codex").display()
                )
                .as_str()
            )
        );

        // With one.
        std::fs::write(scratch.join(".codex/config.toml"), "model = \"o3\"\n").unwrap();
        let service = report(Some(scratch.path()), None, Some(&path));
        assert_eq!(
            service.detail.as_deref(),
            Some(
                format!(
                    "patchbay can run it: `type = \"codex\"` (`codex app-server`); {}",
                    scratch.join(".codex/config.toml").display()
                )
                .as_str()
            )
        );
        assert!(service.summary().starts_with("codex at "), "{service:?}");
    }

    #[test]
    fn codex_home_wins_over_home() {
        let scratch = ScratchDir::new("codex-probe-codex-home");
        let bin = install_binary(scratch.path());
        std::fs::create_dir_all(scratch.join(".codex")).unwrap();
        std::fs::write(scratch.join(".codex/config.toml"), "").unwrap();
        let elsewhere = scratch.join("elsewhere");
        assert_eq!(
            home_dir(Some(scratch.path()), Some(&elsewhere)),
            Some(elsewhere.clone())
        );
        // An empty CODEX_HOME is not set.
        assert_eq!(
            home_dir(Some(scratch.path()), Some(Path::new(""))),
            Some(scratch.join(".codex"))
        );

        let service = report(
            Some(scratch.path()),
            Some(&elsewhere),
            Some(bin.as_os_str()),
        );
        assert_eq!(service.state, ServiceState::Available);
        assert!(
            service.detail.as_deref().unwrap().ends_with(&format!(
                "; CODEX_HOME {} does not exist",
                elsewhere.display()
            )),
            "{service:?}"
        );

        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("config.toml"), "").unwrap();
        let service = report(
            Some(scratch.path()),
            Some(&elsewhere),
            Some(bin.as_os_str()),
        );
        assert!(
            service
                .detail
                .as_deref()
                .unwrap()
                .ends_with(&format!("; {}", elsewhere.join("config.toml").display())),
            "{service:?}"
        );
    }
}
