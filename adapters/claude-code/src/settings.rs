//! Claude Code's settings files: patchbay's hooks in them, added, found and removed
//! without touching anything else (pure: JSON values in, JSON values out).
//!
//! patchbay's hooks are marked so that they can be told apart from the user's: an http
//! hook carries the header `X-Patchbay-Hook: 1`, a command hook ends with
//! `# patchbay-hook` (a shell comment). Installing first removes every marked hook, then
//! appends one matcher group per event; other hooks, other keys and their order stay.

use patchbay_hooks::settings_file::{emptied, position_of, strip, strip_position};
use serde_json::{Map, Value, json};

use crate::gate::GateConfig;

/// The settings as written back: two-space indented JSON and a final newline.
pub use patchbay_hooks::settings_file::render;

/// The header that marks patchbay's http hooks.
pub const MARK_HEADER: &str = "X-Patchbay-Hook";
/// The shell comment that ends patchbay's command hooks.
pub const MARK_COMMAND: &str = "# patchbay-hook";
/// The environment variable the hooks take the token from (`allowedEnvVars`).
pub const TOKEN_VAR: &str = "PATCHBAY_HOOK_TOKEN";
/// The `timeout` (seconds) of hooks that only report: short, so that a hung patchbay
/// never holds Claude Code up for long (a stopped one refuses at once).
pub const REPORT_TIMEOUT_S: u64 = 2;
/// The `timeout` (seconds) of the command hook (`patchbay hooks emit` gives up after 1 s).
pub const COMMAND_TIMEOUT_S: u64 = 5;

/// Every event Claude Code 2.1.328 knows, each with whether it is installed by default
/// (the ones patchbay maps, issue 16, item 1).
const KNOWN_EVENTS: [(&str, bool); 33] = [
    ("SessionStart", true),
    ("Setup", false),
    ("InstructionsLoaded", false),
    ("UserPromptSubmit", true),
    ("UserPromptExpansion", true),
    ("MessageDisplay", false),
    ("PreToolUse", true),
    ("PermissionRequest", true),
    ("PermissionDenied", false),
    ("PostToolUse", true),
    ("PostToolUseFailure", true),
    ("PostToolBatch", true),
    ("Notification", true),
    ("SubagentStart", true),
    ("SubagentStop", true),
    ("TeammateIdle", false),
    ("TaskCreated", false),
    ("TaskCompleted", false),
    ("Elicitation", false),
    ("ElicitationResult", false),
    ("PreCompact", true),
    ("PostCompact", true),
    ("PreModelSwitch", false),
    ("PostModelSwitch", false),
    ("ConfigChange", false),
    ("WorktreeCreate", false),
    ("WorktreeRemove", false),
    ("CwdChanged", false),
    ("FileChanged", false),
    ("DirectoryAdded", false),
    ("Stop", true),
    ("StopFailure", true),
    ("SessionEnd", true),
];

/// The events installed by default: the ones patchbay maps (issue 16, item 1).
pub const EVENTS: [&str; 16] = event_names(true);

/// Every event Claude Code 2.1.328 knows (`--events all`).
pub const ALL_EVENTS: [&str; 33] = event_names(false);

/// The names of [`KNOWN_EVENTS`] (only the default ones when `by_default`), in its order;
/// `N` must be their number (checked when compiling).
const fn event_names<const N: usize>(by_default: bool) -> [&'static str; N] {
    let mut names = [""; N];
    let (mut i, mut n) = (0, 0);
    while i < KNOWN_EVENTS.len() {
        let (name, default) = KNOWN_EVENTS[i];
        if default || !by_default {
            names[n] = name;
            n += 1;
        }
        i += 1;
    }
    assert!(n == N, "the event count does not match KNOWN_EVENTS");
    names
}

/// Events Claude Code does not send to http hooks: a command hook posts them.
pub const COMMAND_ONLY: [&str; 2] = ["SessionStart", "Setup"];

/// What to install.
#[derive(Debug, Clone)]
pub struct HookPlan {
    /// The component's hook endpoint (`http://127.0.0.1:7879/hook`).
    pub url: String,
    /// Whether the endpoint needs the token (then sent from `$PATCHBAY_HOOK_TOKEN`).
    pub token: bool,
    /// The gate, when the hooks that can be held get a timeout above its `timeout_ms`.
    pub gate: Option<GateConfig>,
    /// The events.
    pub events: Vec<&'static str>,
    /// The absolute path of the `patchbay` binary, for the command hook.
    pub program: String,
}

impl HookPlan {
    /// The hooks of one event.
    fn hook_for(&self, event: &str) -> Value {
        if COMMAND_ONLY.contains(&event) {
            return json!({
                "type": "command",
                "command": format!(
                    "{} hooks emit --url {} {MARK_COMMAND}",
                    shell_quote(&self.program),
                    shell_quote(&self.url)
                ),
                "timeout": COMMAND_TIMEOUT_S,
            });
        }
        let held = matches!(event, "PreToolUse" | "PermissionRequest");
        let timeout = match &self.gate {
            Some(gate) if held => crate::gate::hook_timeout_s(gate),
            _ => REPORT_TIMEOUT_S,
        };
        let mut headers = Map::new();
        headers.insert(MARK_HEADER.into(), "1".into());
        let mut hook = json!({"type": "http", "url": self.url, "timeout": timeout});
        if self.token {
            headers.insert(
                "Authorization".into(),
                format!("Bearer ${TOKEN_VAR}").into(),
            );
            hook["headers"] = Value::Object(headers);
            hook["allowedEnvVars"] = json!([TOKEN_VAR]);
        } else {
            hook["headers"] = Value::Object(headers);
        }
        hook
    }
}

/// Quotes a word for `/bin/sh` (single quotes), unless it needs none.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=@%+,".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Why a settings file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// Not JSON.
    #[error("{file}:{line}:{col}: not valid JSON ({message}); left unchanged")]
    Syntax {
        /// The file.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong.
        message: String,
    },
    /// JSON, but not a settings object (or `hooks` is not an object of arrays).
    #[error("{file}:{line}:{col}: {message}; left unchanged")]
    Shape {
        /// The file.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong.
        message: String,
    },
}

/// Parses a settings file's text (`file` names it in errors). Empty or blank text is an
/// empty object.
pub fn parse(file: &str, text: &str) -> Result<Value, SettingsError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| SettingsError::Syntax {
        file: file.to_owned(),
        line: e.line(),
        col: e.column(),
        message: strip_position(&e.to_string()),
    })?;
    let shape = |message: &str| SettingsError::Shape {
        file: file.to_owned(),
        line: 1,
        col: 1,
        message: message.to_owned(),
    };
    let Some(root) = value.as_object() else {
        return Err(shape("the settings are not a JSON object"));
    };
    match root.get("hooks") {
        None => {}
        Some(Value::Object(hooks)) => {
            if let Some((event, _)) = hooks.iter().find(|(_, groups)| !groups.is_array()) {
                let (line, col) = position_of(text, event);
                return Err(SettingsError::Shape {
                    file: file.to_owned(),
                    line,
                    col,
                    message: format!("`hooks.{event}` is not an array"),
                });
            }
        }
        Some(_) => {
            let (line, col) = position_of(text, "hooks");
            return Err(SettingsError::Shape {
                file: file.to_owned(),
                line,
                col,
                message: "`hooks` is not an object".into(),
            });
        }
    }
    Ok(value)
}

/// Whether a hook entry is patchbay's.
pub fn is_ours(hook: &Value) -> bool {
    let http = hook
        .get("headers")
        .and_then(Value::as_object)
        .is_some_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case(MARK_HEADER)));
    let command = hook
        .get("command")
        .and_then(Value::as_str)
        .is_some_and(|c| c.trim_end().ends_with(MARK_COMMAND));
    http || command
}

/// Adds patchbay's hooks (`plan`) to `settings`, after removing any installed before:
/// installing twice is installing once.
pub fn install(settings: &mut Value, plan: &HookPlan) {
    let Some(root) = settings.as_object_mut() else {
        return;
    };
    let hooks = root
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    if !hooks.is_object() {
        *hooks = Value::Object(Map::new());
    }
    let Some(hooks) = hooks.as_object_mut() else {
        return;
    };
    // Every event keeps its place: ours are stripped in place, then appended.
    for (_, groups) in hooks.iter_mut() {
        strip(groups, is_ours);
    }
    for event in &plan.events {
        let groups = hooks
            .entry(event.to_string())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(groups) = groups.as_array_mut() {
            groups.retain(|g| !g.is_null());
            groups.push(json!({"hooks": [plan.hook_for(event)]}));
        }
    }
    hooks.retain(|_, groups| !emptied(groups));
}

/// Removes patchbay's hooks; returns how many there were. Groups and events left empty
/// by the removal go too (and `hooks` itself if nothing else is left in it).
pub fn uninstall(settings: &mut Value) -> usize {
    let Some(root) = settings.as_object_mut() else {
        return 0;
    };
    let Some(hooks) = root.get_mut("hooks").and_then(Value::as_object_mut) else {
        return 0;
    };
    let mut removed = 0;
    for (_, groups) in hooks.iter_mut() {
        removed += strip(groups, is_ours);
    }
    hooks.retain(|_, groups| !emptied(groups));
    if removed > 0 && hooks.is_empty() {
        root.remove("hooks");
    }
    removed
}

/// One of patchbay's hooks found in a settings file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The event.
    pub event: String,
    /// Where it sends the event: the http hook's URL, or the URL `hooks emit` posts to.
    pub url: Option<String>,
    /// Its `timeout` in seconds, if written.
    pub timeout_s: Option<u64>,
}

/// patchbay's hooks in `settings`.
pub fn installed(settings: &Value) -> Vec<Installed> {
    let mut found = Vec::new();
    let Some(hooks) = settings.get("hooks").and_then(Value::as_object) else {
        return found;
    };
    for (event, groups) in hooks {
        for group in groups.as_array().into_iter().flatten() {
            for hook in group
                .get("hooks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|h| is_ours(h))
            {
                let url = hook
                    .get("url")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| {
                        let command = hook.get("command")?.as_str()?;
                        let after = command.split(" --url ").nth(1)?;
                        let word = after.split_whitespace().next()?;
                        Some(word.trim_matches('\'').to_owned())
                    });
                found.push(Installed {
                    event: event.clone(),
                    url,
                    timeout_s: hook.get("timeout").and_then(Value::as_u64),
                });
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_events_are_the_known_ones_marked_so_in_their_order() {
        assert_eq!(
            EVENTS[..3],
            ["SessionStart", "UserPromptSubmit", "UserPromptExpansion"]
        );
        assert_eq!(EVENTS[13..], ["Stop", "StopFailure", "SessionEnd"]);
        assert_eq!(
            ALL_EVENTS[..3],
            ["SessionStart", "Setup", "InstructionsLoaded"]
        );
        assert!(EVENTS.iter().all(|e| ALL_EVENTS.contains(e)));
        assert!(!EVENTS.contains(&"Setup"));
    }

    fn plan() -> HookPlan {
        HookPlan {
            url: "http://127.0.0.1:7879/hook".into(),
            token: false,
            gate: None,
            events: EVENTS.to_vec(),
            program: "/opt/patch bay/patchbay".into(),
        }
    }

    const USER: &str = r#"{
  "model": "opus",
  "hooks": {
    "Stop": [
      {"hooks": [{"type": "command", "command": "notify-send done"}]}
    ],
    "PreToolUse": [
      {"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}
    ]
  },
  "permissions": {"allow": ["Bash(ls)"]}
}"#;

    #[test]
    fn install_keeps_everything_else_and_twice_is_once() {
        let mut settings = parse("s.json", USER).unwrap();
        install(&mut settings, &plan());
        let once = render(&settings);
        install(&mut settings, &plan());
        assert_eq!(render(&settings), once);

        let keys: Vec<_> = settings.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["model", "hooks", "permissions"]);
        let events: Vec<_> = settings["hooks"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(&events[..2], ["Stop", "PreToolUse"]);
        assert_eq!(events.len(), EVENTS.len());
        assert_eq!(
            settings["hooks"]["Stop"][0]["hooks"][0]["command"],
            "notify-send done"
        );
        assert_eq!(settings["hooks"]["PreToolUse"][0]["matcher"], "Bash");
        let ours = &settings["hooks"]["PreToolUse"][1]["hooks"][0];
        assert_eq!(ours["type"], "http");
        assert_eq!(ours["url"], "http://127.0.0.1:7879/hook");
        assert_eq!(ours["timeout"], REPORT_TIMEOUT_S);
        assert!(ours.get("allowedEnvVars").is_none());
        let start = &settings["hooks"]["SessionStart"][0]["hooks"][0];
        assert_eq!(
            start["command"],
            "'/opt/patch bay/patchbay' hooks emit --url http://127.0.0.1:7879/hook # patchbay-hook"
        );
        assert_eq!(installed(&settings).len(), EVENTS.len());
        assert!(
            installed(&settings)
                .iter()
                .all(|i| i.url.as_deref() == Some("http://127.0.0.1:7879/hook"))
        );

        assert_eq!(uninstall(&mut settings), EVENTS.len());
        assert_eq!(settings, parse("s.json", USER).unwrap());
        assert_eq!(uninstall(&mut settings), 0);
    }

    #[test]
    fn a_token_is_sent_from_the_environment_and_a_gate_lengthens_the_held_hooks() {
        let mut settings = Value::Object(Map::new());
        let mut plan = plan();
        plan.token = true;
        plan.gate = Some(GateConfig {
            tools: vec!["Bash".into()],
            timeout_ms: 20_000,
            default: crate::gate::Verdict::Deny,
        });
        install(&mut settings, &plan);
        let pre = &settings["hooks"]["PreToolUse"][0]["hooks"][0];
        assert_eq!(pre["timeout"], 25);
        assert_eq!(
            pre["headers"]["Authorization"],
            "Bearer $PATCHBAY_HOOK_TOKEN"
        );
        assert_eq!(pre["allowedEnvVars"], json!(["PATCHBAY_HOOK_TOKEN"]));
        assert_eq!(
            settings["hooks"]["PermissionRequest"][0]["hooks"][0]["timeout"],
            25
        );
        assert_eq!(
            settings["hooks"]["Stop"][0]["hooks"][0]["timeout"],
            REPORT_TIMEOUT_S
        );
        assert_eq!(uninstall(&mut settings), EVENTS.len());
        assert_eq!(settings, json!({}));
    }

    #[test]
    fn fewer_events_remove_the_others_installed_before() {
        let mut settings = Value::Object(Map::new());
        let mut all = plan();
        all.events = ALL_EVENTS.to_vec();
        install(&mut settings, &all);
        assert_eq!(installed(&settings).len(), ALL_EVENTS.len());
        install(&mut settings, &plan());
        assert_eq!(installed(&settings).len(), EVENTS.len());
    }

    #[test]
    fn unparsable_settings_are_refused_with_their_place() {
        let err = parse(
            "/p/.claude/settings.local.json",
            "{\n  \"a\": 1,\n  oops\n}",
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/p/.claude/settings.local.json:3:3: not valid JSON"),
            "{err}"
        );
        let err = parse("f", "{\"x\": 1,\n \"hooks\": []}").unwrap_err();
        assert_eq!(
            err.to_string(),
            "f:2:2: `hooks` is not an object; left unchanged"
        );
        let err = parse("f", "[1]").unwrap_err();
        assert_eq!(
            err.to_string(),
            "f:1:1: the settings are not a JSON object; left unchanged"
        );
        assert_eq!(parse("f", " \n").unwrap(), json!({}));
    }
}
