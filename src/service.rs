//! `patchbay service install|uninstall|status`: patchbay as a background service of the
//! user's session, a systemd user unit on Linux and a launchd agent on macOS.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The service manager a unit file is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Manager {
    /// A systemd user unit (`~/.config/systemd/user/patchbay.service`).
    Systemd,
    /// A launchd agent (`~/Library/LaunchAgents/dev.patchbay.plist`).
    Launchd,
}

impl Manager {
    /// This system's: launchd on macOS, systemd elsewhere.
    pub fn native() -> Manager {
        if cfg!(target_os = "macos") {
            Manager::Launchd
        } else {
            Manager::Systemd
        }
    }
}

/// What the service runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    /// The `patchbay` binary, an absolute path (a service manager has its own `PATH`).
    pub binary: PathBuf,
    /// The configs given to `run` (absolute paths); none: `run`'s own lookup.
    pub configs: Vec<PathBuf>,
}

impl ServiceSpec {
    /// `patchbay run` and its `-c` arguments.
    fn arguments(&self) -> Vec<String> {
        let mut args = vec![self.binary.display().to_string(), "run".to_owned()];
        for config in &self.configs {
            args.push("-c".to_owned());
            args.push(config.display().to_string());
        }
        args
    }
}

/// The systemd user unit: restarted on failure (but not after a bad config, exit 78, which
/// needs a person), logs to the journal (standard error), JSON-free text lines.
pub fn systemd_unit(spec: &ServiceSpec) -> String {
    let exec = spec
        .arguments()
        .iter()
        .map(|a| systemd_quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "# Written by `patchbay service install`; `patchbay service uninstall` removes it.
[Unit]
Description=patchbay: a signal router for AI agents and the hardware around them
After=network.target

[Service]
# patchbay tells systemd when every listener is bound and every file open (READY=1).
Type=notify
NotifyAccess=main
ExecStart={exec}
# Reload by diff: unchanged components keep their connections.
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2
# A wrong config (exit 78) is not retried: it waits for a fix and `systemctl --user restart patchbay`.
RestartPreventExitStatus=78
# SIGTERM drains the graph; patchbay exits within its shutdown timeout.
KillSignal=SIGTERM
TimeoutStopSec=30
Environment=PATCHBAY_LOG=info
# No transparent huge pages for the allocator, even where the system gives them to every
# process: zeroing them as the heap follows bursts costs more than they save.
Environment=MIMALLOC_ALLOW_THP=0

[Install]
WantedBy=default.target
"
    )
}

/// A systemd `ExecStart` word: quoted when it holds a space or a quote.
fn systemd_quote(word: &str) -> String {
    if word.is_empty() || word.contains([' ', '"', '\'', '\\', '$', '%']) {
        let escaped = word
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('$', "$$")
            .replace('%', "%%");
        format!("\"{escaped}\"")
    } else {
        word.to_owned()
    }
}

/// The launchd agent: started at login, restarted when it did not exit cleanly, logs to
/// `~/Library/Logs/patchbay.log`.
pub fn launchd_plist(spec: &ServiceSpec, log: &Path) -> String {
    let arguments: String = spec
        .arguments()
        .iter()
        .map(|a| format!("        <string>{}</string>\n", xml_escape(a)))
        .collect();
    let log = xml_escape(&log.display().to_string());
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by `patchbay service install`; `patchbay service uninstall` removes it. -->
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
    <key>Label</key>
    <string>{LAUNCHD_LABEL}</string>
    <key>ProgramArguments</key>
    <array>
{arguments}    </array>
    <key>RunAtLoad</key>
    <true/>
    <key>KeepAlive</key>
    <dict>
        <key>SuccessfulExit</key>
        <false/>
    </dict>
    <key>StandardErrorPath</key>
    <string>{log}</string>
</dict>
</plist>
"#
    )
}

/// The launchd agent's label.
pub const LAUNCHD_LABEL: &str = "dev.patchbay";

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Where the unit file of `manager` goes, from the user's home and config folders.
pub fn unit_path(manager: Manager) -> anyhow::Result<PathBuf> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| anyhow::anyhow!("HOME is not set: cannot find the user's unit folder"))?;
    Ok(match manager {
        Manager::Systemd => std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map_or_else(|| home.join(".config"), PathBuf::from)
            .join("systemd/user/patchbay.service"),
        Manager::Launchd => home.join(format!("Library/LaunchAgents/{LAUNCHD_LABEL}.plist")),
    })
}

/// The unit file's text for `manager`.
pub fn unit_text(manager: Manager, spec: &ServiceSpec) -> anyhow::Result<String> {
    Ok(match manager {
        Manager::Systemd => systemd_unit(spec),
        Manager::Launchd => {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            launchd_plist(spec, &home.join("Library/Logs/patchbay.log"))
        }
    })
}

/// The spec of this binary with `configs` made absolute.
pub fn spec(configs: &[PathBuf]) -> anyhow::Result<ServiceSpec> {
    let binary = std::env::current_exe()?;
    let cwd = std::env::current_dir()?;
    Ok(ServiceSpec {
        binary,
        configs: configs.iter().map(|c| cwd.join(c)).collect(),
    })
}

/// `service install`: writes the unit (or prints it with `print`), then asks the service
/// manager to start it, saying how to do it by hand when that fails.
pub fn install(manager: Manager, configs: &[PathBuf], print: bool) -> anyhow::Result<ExitCode> {
    let text = unit_text(manager, &spec(configs)?)?;
    if print {
        print!("{text}");
        return Ok(ExitCode::SUCCESS);
    }
    let path = unit_path(manager)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Written beside and renamed: a unit is never seen half-written.
    let partial = path.with_extension("partial");
    std::fs::write(&partial, &text)?;
    std::fs::rename(&partial, &path)?;
    println!("wrote {}", path.display());
    let commands: Vec<Vec<String>> = match manager {
        Manager::Systemd => vec![
            vec!["systemctl".into(), "--user".into(), "daemon-reload".into()],
            ["systemctl", "--user", "enable", "--now", "patchbay.service"]
                .map(String::from)
                .to_vec(),
        ],
        Manager::Launchd => vec![vec![
            "launchctl".into(),
            "load".into(),
            "-w".into(),
            path.display().to_string(),
        ]],
    };
    let by_hand = commands
        .iter()
        .map(|c| c.join(" "))
        .collect::<Vec<_>>()
        .join(" && ");
    for command in &commands {
        match std::process::Command::new(&command[0])
            .args(&command[1..])
            .status()
        {
            Ok(status) if status.success() => {}
            Ok(status) => {
                eprintln!(
                    "patchbay: `{}` failed ({status}); start it by hand: {by_hand}",
                    command[0]
                );
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) => {
                eprintln!(
                    "patchbay: cannot run `{}` ({e}); start it by hand: {by_hand}",
                    command[0]
                );
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
    println!("patchbay runs as a service");
    Ok(ExitCode::SUCCESS)
}

/// `service uninstall`: stops the service and removes the unit.
pub fn uninstall(manager: Manager) -> anyhow::Result<ExitCode> {
    let path = unit_path(manager)?;
    if !path.exists() {
        println!("no service installed ({} does not exist)", path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let stop = match manager {
        Manager::Systemd => std::process::Command::new("systemctl")
            .args(["--user", "disable", "--now", "patchbay.service"])
            .status(),
        Manager::Launchd => std::process::Command::new("launchctl")
            .args(["unload", "-w"])
            .arg(&path)
            .status(),
    };
    if !stop.is_ok_and(|s| s.success()) {
        eprintln!("patchbay: could not stop the service through its manager; removing its unit");
    }
    std::fs::remove_file(&path)?;
    println!("removed {}", path.display());
    Ok(ExitCode::SUCCESS)
}

/// `service status`: whether a unit is installed, and what the service manager says.
pub fn status(manager: Manager) -> anyhow::Result<ExitCode> {
    let path = unit_path(manager)?;
    if !path.exists() {
        println!("not installed ({} does not exist)", path.display());
        return Ok(ExitCode::from(3));
    }
    println!("installed: {}", path.display());
    let answer = match manager {
        Manager::Systemd => std::process::Command::new("systemctl")
            .args(["--user", "is-active", "patchbay.service"])
            .output(),
        Manager::Launchd => std::process::Command::new("launchctl")
            .args(["list", LAUNCHD_LABEL])
            .output(),
    };
    match answer {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            println!("service manager: {}", text.trim());
            Ok(if out.status.success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            })
        }
        Err(e) => {
            println!("service manager: not reachable ({e})");
            Ok(ExitCode::from(3))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ServiceSpec {
        ServiceSpec {
            binary: PathBuf::from("/opt/patch bay/patchbay"),
            configs: vec![PathBuf::from("/home/u/.config/patchbay/main.toml")],
        }
    }

    #[test]
    fn the_systemd_unit_runs_the_binary_with_its_configs_and_restarts_on_failure() {
        let unit = systemd_unit(&spec());
        assert!(
            unit.contains(
                "ExecStart=\"/opt/patch bay/patchbay\" run -c /home/u/.config/patchbay/main.toml\n"
            ),
            "{unit}"
        );
        assert!(unit.contains("Restart=on-failure\n"));
        assert!(unit.contains("RestartPreventExitStatus=78\n"));
        assert!(unit.contains("WantedBy=default.target\n"));
    }

    #[test]
    fn the_launchd_agent_lists_each_argument() {
        let plist = launchd_plist(&spec(), Path::new("/Users/u/Library/Logs/patchbay.log"));
        assert!(plist.contains("<string>/opt/patch bay/patchbay</string>\n        <string>run</string>\n        <string>-c</string>"), "{plist}");
        assert!(plist.contains("<key>KeepAlive</key>"));
        assert!(plist.contains("<string>dev.patchbay</string>"));
    }

    #[test]
    fn quoting_keeps_systemd_specifiers_literal() {
        assert_eq!(systemd_quote("plain"), "plain");
        assert_eq!(systemd_quote("100%"), "\"100%%\"");
        assert_eq!(systemd_quote("a\"b"), "\"a\\\"b\"");
    }
}
