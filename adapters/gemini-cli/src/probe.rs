//! Finding Gemini CLI: the `gemini` binary on `PATH`, its settings files
//! (`~/.gemini/settings.json`, `./.gemini/settings.json`), and whether patchbay's hooks
//! are in them and where they point. Only files are read; nothing is connected to, no
//! process is started, nothing is written.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use patchbay_graph::probe::{ProbeContext, Service};
use patchbay_graph::{BoxFuture, descriptor::Probe};
use patchbay_hooks::probe::HookAgentProbe;
use patchbay_transport::probe::find_program;
use serde_json::Value;

use crate::settings;

/// The probe of `local:gemini-cli`.
pub const PROBE: Probe = AGENT.probe(run_probe);

/// Gemini CLI as a hook agent to find.
const AGENT: HookAgentProbe = HookAgentProbe::new(
    "gemini-cli",
    "gemini",
    "patchbay hooks install --agent gemini",
);

fn run_probe(_cx: ProbeContext) -> BoxFuture<Option<Service>> {
    AGENT.run(report)
}

/// The settings files Gemini CLI reads that patchbay may write: the user's
/// (`~/.gemini/settings.json`) and the project's (`DIR/.gemini/settings.json`), once each
/// (the project in the home directory is the user).
pub fn settings_files(home: Option<&Path>, project: Option<&Path>) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in [home, project].into_iter().flatten() {
        let file = dir.join(".gemini/settings.json");
        if !files.contains(&file) {
            files.push(file);
        }
    }
    files
}

/// The `gemini` binary found on `path` (a `PATH` value): the first executable file named
/// `gemini` in its directories.
pub fn find_binary(path: Option<&OsStr>) -> Option<PathBuf> {
    find_program(path, "gemini")
}

/// Where patchbay's hooks in a settings value send their events: the `--url` of each
/// hook command that is patchbay's ([`settings::is_ours`]), sorted, each once.
pub fn hook_urls(settings: &Value) -> Vec<String> {
    let mut urls: Vec<String> = settings
        .get("hooks")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|hooks| hooks.values())
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|group| group.get("hooks").and_then(Value::as_array))
        .flatten()
        .filter(|hook| settings::is_ours(hook))
        .filter_map(|hook| url_of(hook.get("command")?.as_str()?))
        .collect();
    urls.sort_unstable();
    urls.dedup();
    urls
}

/// The word after ` --url ` in a hook command (`patchbay hooks emit --agent gemini --url
/// URL`), without the single quotes it may be written in.
fn url_of(command: &str) -> Option<String> {
    let after = command.split(" --url ").nth(1)?;
    let word = after.split_whitespace().next()?;
    Some(word.trim_matches('\'').to_owned())
}

/// What the probe reports, given `HOME`, the current directory and `PATH`: available, at
/// the binary's path, when `gemini` is on `PATH`, else unavailable; the detail says, for
/// each settings file that exists, for how many events patchbay's hooks are installed and
/// where they point (or that there are none), and when the file turns hooks off.
pub fn report(home: Option<&Path>, cwd: Option<&Path>, path: Option<&OsStr>) -> Service {
    AGENT.report(path, settings_files(home, cwd), |shown, text| {
        match settings::installed(text) {
            Err(e) => format!("{shown}:{e}"),
            Ok(events) if events.is_empty() => format!("{shown}: no patchbay hooks"),
            Ok(events) => {
                // `installed` parsed it: it is JSON.
                let value: Value = serde_json::from_str(text).unwrap_or_default();
                let urls = hook_urls(&value);
                let to = if urls.is_empty() {
                    "no --url".to_owned()
                } else {
                    urls.join(", ")
                };
                let off = value.pointer("/hooksConfig/enabled") == Some(&Value::Bool(false));
                format!(
                    "{shown}: patchbay hooks for {} event(s) → {to}{}",
                    events.len(),
                    if off {
                        " (but hooksConfig.enabled is false)"
                    } else {
                        ""
                    }
                )
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_graph::probe::ServiceState;
    use patchbay_testkit::scratch::ScratchDir;

    const COMMAND: &str =
        "'/opt/patch bay/patchbay' hooks emit --agent gemini --url http://127.0.0.1:7880/hook";

    /// An executable `bin/gemini` under `dir`; returns `bin`.
    fn install_binary(dir: &Path) -> PathBuf {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = bin.join("gemini");
        std::fs::write(&exe, "#!/bin/sh\nexit 0\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        bin
    }

    fn write(file: &Path, text: &str) {
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }

    #[test]
    fn nothing_there() {
        let scratch = ScratchDir::new("gemini-probe-nothing");
        let home = scratch.join("home");
        let project = scratch.join("project");
        let service = report(
            Some(&home),
            Some(&project),
            Some(scratch.path().as_os_str()),
        );
        assert_eq!(service.service, "gemini-cli");
        assert_eq!(service.state, ServiceState::Unavailable);
        assert_eq!(service.address, "gemini");
        assert_eq!(
            service.detail.as_deref(),
            Some(
                "`gemini` is not on PATH; no settings file (patchbay hooks install --agent gemini writes one)"
            )
        );
        assert_eq!(report(None, None, None).state, ServiceState::Unavailable);
    }

    #[test]
    fn the_binary_and_the_hooks_of_each_settings_file() {
        let scratch = ScratchDir::new("gemini-probe-found");
        let bin = install_binary(scratch.path());
        let home = scratch.join("home");
        let project = scratch.join("project");
        let user_file = home.join(".gemini/settings.json");
        let project_file = project.join(".gemini/settings.json");
        // The user's file: the user's own hooks only.
        write(
            &user_file,
            r#"{"hooks": {"BeforeTool": [{"hooks": [{"type": "command", "command": "audit.sh"}]}]}}"#,
        );
        // The project's: patchbay's, as `patchbay hooks install --agent gemini` writes them.
        write(
            &project_file,
            &settings::install(
                Some(r#"{"model": {"name": "gemini-2.5-pro"}}"#),
                COMMAND,
                None,
            )
            .unwrap(),
        );
        let path = std::env::join_paths([scratch.join("nothing-here"), bin.clone()]).unwrap();
        let service = report(Some(&home), Some(&project), Some(&path));
        assert_eq!(service.state, ServiceState::Available);
        assert_eq!(service.address, bin.join("gemini").display().to_string());
        assert_eq!(
            service.detail.as_deref(),
            Some(
                format!(
                    "{}: no patchbay hooks; {}: patchbay hooks for {} event(s) → http://127.0.0.1:7880/hook",
                    user_file.display(),
                    project_file.display(),
                    settings::EVENTS.len()
                )
                .as_str()
            )
        );

        // The project in the home directory is read once; hooks turned off are said.
        write(
            &user_file,
            r#"{
  "hooksConfig": {"enabled": false},
  "hooks": {
    "BeforeTool": [
      {"hooks": [{"type": "command", "name": "patchbay", "command": "patchbay hooks emit --agent gemini --url 'http://127.0.0.1:9000/hook' --wait-ms 30000"}]}
    ],
    "AfterTool": [
      {"hooks": [{"type": "command", "name": "patchbay", "command": "patchbay hooks emit --agent gemini --url http://127.0.0.1:7880/hook"}]}
    ]
  }
}"#,
        );
        let service = report(Some(&home), Some(&home), Some(&path));
        assert_eq!(
            service.detail.as_deref(),
            Some(
                format!(
                    "{}: patchbay hooks for 2 event(s) → http://127.0.0.1:7880/hook, http://127.0.0.1:9000/hook (but hooksConfig.enabled is false)",
                    user_file.display()
                )
                .as_str()
            )
        );
    }

    #[test]
    fn a_file_that_cannot_be_read_as_settings_is_named() {
        let scratch = ScratchDir::new("gemini-probe-bad");
        let home = scratch.join("home");
        let file = home.join(".gemini/settings.json");
        write(&file, "{\n  // a comment\n}\n");
        let service = report(Some(&home), None, None);
        let detail = service.detail.unwrap();
        assert!(
            detail.starts_with(&format!(
                "`gemini` is not on PATH; {}:2:3: ",
                file.display()
            )),
            "{detail}"
        );
        assert!(detail.ends_with("left unchanged"), "{detail}");
    }

    #[test]
    fn urls_of_hooks_that_are_not_ours_are_not_reported() {
        let value = serde_json::json!({"hooks": {
            "BeforeTool": [{"hooks": [
                {"type": "command", "command": "other --url http://elsewhere"},
                {"type": "command", "name": "patchbay", "command": "patchbay hooks emit --agent gemini"}
            ]}],
            "enabled": true
        }});
        assert!(hook_urls(&value).is_empty());
        assert_eq!(
            url_of("p hooks emit --agent gemini --url 'http://h:1/hook' --wait-ms 5"),
            Some("http://h:1/hook".to_owned())
        );
    }
}
