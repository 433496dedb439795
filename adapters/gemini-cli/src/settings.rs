//! Gemini CLI's settings file (`.gemini/settings.json`): patchbay's hooks in it, added and
//! removed without touching anything else (pure: text in, text out; no file I/O).
//!
//! Gemini CLI 0.61 reads hooks from `hooks.<Event>`: an array of groups `{matcher?,
//! sequential?, hooks: [{type: "command", command, name?, timeout?, description?}]}`, the
//! `timeout` in **milliseconds** (default 60000; the recorded settings use 10000), and runs
//! them only when `hooksConfig.enabled` is `true`. (`docs/hooks/reference.md` and
//! `packages/core/src/hooks/types.ts` in `google-gemini/gemini-cli`.)
//!
//! patchbay's hooks are the ones named [`MARK_NAME`] (`"name": "patchbay"`). [`install`]
//! first removes every one of them, then appends one group per event of [`EVENTS`]
//! without a `matcher` (every tool, every trigger); the user's hooks, groups and keys and
//! their order stay. [`uninstall`] removes only patchbay's (and the groups and events it
//! leaves empty), and leaves `hooksConfig` as it is: the user's other hooks may need it.

use std::fmt;

use patchbay_hooks::settings_file::{emptied, position_of, render, strip, strip_position};
use serde_json::{Map, Value, json};

/// The `name` that marks patchbay's hooks.
pub const MARK_NAME: &str = "patchbay";

/// The `timeout` (ms) of hooks that only report: short, so that a hung patchbay never holds
/// Gemini CLI up for long (`patchbay hooks emit` gives up after 1 s).
pub const REPORT_TIMEOUT_MS: u64 = 5_000;

/// The events patchbay installs a hook for: every event Gemini CLI 0.61 has
/// (`HookEventName` in `packages/core/src/hooks/types.ts`). `AfterModel` fires once per
/// streamed chunk.
pub const EVENTS: [&str; 11] = [
    "SessionStart",
    "BeforeAgent",
    "BeforeModel",
    "AfterModel",
    "BeforeToolSelection",
    "BeforeTool",
    "AfterTool",
    "AfterAgent",
    "PreCompress",
    "Notification",
    "SessionEnd",
];

/// The keys of `hooks` that are not events (`HOOKS_CONFIG_FIELDS`: where older versions
/// kept what is now `hooksConfig`): left alone.
const NOT_EVENTS: [&str; 3] = ["enabled", "disabled", "notifications"];

/// Why a settings text cannot be used (it is left unchanged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingsError {
    /// Not JSON (Gemini CLI also accepts comments in its settings; patchbay does not
    /// rewrite such a file).
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong.
        message: String,
    },
    /// JSON, but not a settings object (or `hooks`, `hooksConfig` or an event's hooks
    /// have another shape).
    Shape {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong.
        message: String,
    },
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsError::Syntax { line, col, message } => {
                write!(
                    f,
                    "{line}:{col}: not valid JSON ({message}); left unchanged"
                )
            }
            SettingsError::Shape { line, col, message } => {
                write!(f, "{line}:{col}: {message}; left unchanged")
            }
        }
    }
}

impl std::error::Error for SettingsError {}

/// Adds patchbay's hooks to a settings text (`None` or blank: a new file): `hooksConfig.enabled
/// = true`, and for every event of [`EVENTS`] one hook `{type: "command", command, name:
/// "patchbay", timeout}` in a group of its own. `timeout` is [`REPORT_TIMEOUT_MS`], but
/// `BeforeTool`'s is `gate_timeout_s` seconds (in ms) when given (see
/// [`crate::gate::hook_timeout_s`]). patchbay's hooks installed before are removed first:
/// installing twice is installing once. Returns the new text: two-space indented JSON and
/// a final newline.
pub fn install(
    existing: Option<&str>,
    command: &str,
    gate_timeout_s: Option<u64>,
) -> Result<String, SettingsError> {
    let mut settings = parse(existing.unwrap_or_default())?;
    let Some(root) = settings.as_object_mut() else {
        return Err(shape(1, 1, "the settings are not a JSON object"));
    };
    let config = root
        .entry("hooksConfig")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(config) = config.as_object_mut() {
        config.insert("enabled".into(), Value::Bool(true));
    }
    let hooks = root
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(hooks) = hooks.as_object_mut() else {
        return Err(shape(1, 1, "`hooks` is not an object"));
    };
    // Every event keeps its place: ours are stripped in place, then appended.
    for (event, groups) in hooks.iter_mut() {
        if !NOT_EVENTS.contains(&event.as_str()) {
            strip(groups, is_ours);
        }
    }
    for event in EVENTS {
        let timeout_ms = match gate_timeout_s {
            Some(s) if event == "BeforeTool" => s.saturating_mul(1000),
            _ => REPORT_TIMEOUT_MS,
        };
        let hook = json!({
            "type": "command",
            "command": command,
            "name": MARK_NAME,
            "timeout": timeout_ms,
        });
        let groups = hooks
            .entry(event.to_owned())
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(groups) = groups.as_array_mut() {
            groups.retain(|g| !g.is_null());
            groups.push(json!({ "hooks": [hook] }));
        }
    }
    hooks.retain(|_, groups| !emptied(groups));
    Ok(render(&settings))
}

/// Removes patchbay's hooks (those named [`MARK_NAME`]) from a settings text; groups and
/// events left empty go too, and `hooks` itself if nothing else is left in it. Everything
/// else stays, `hooksConfig` included. Returns the new text (the same rendering as
/// [`install`]).
pub fn uninstall(existing: &str) -> Result<String, SettingsError> {
    let mut settings = parse(existing)?;
    if let Some(root) = settings.as_object_mut()
        && let Some(hooks) = root.get_mut("hooks").and_then(Value::as_object_mut)
    {
        let mut removed = 0;
        for (event, groups) in hooks.iter_mut() {
            if !NOT_EVENTS.contains(&event.as_str()) {
                removed += strip(groups, is_ours);
            }
        }
        hooks.retain(|_, groups| !emptied(groups));
        if removed > 0 && hooks.is_empty() {
            root.remove("hooks");
        }
    }
    Ok(render(&settings))
}

/// Whether a hook entry is patchbay's (named [`MARK_NAME`]).
pub fn is_ours(hook: &Value) -> bool {
    hook.get("name").and_then(Value::as_str) == Some(MARK_NAME)
}

/// The events a settings text has a patchbay hook for, in the file's order.
pub fn installed(existing: &str) -> Result<Vec<String>, SettingsError> {
    let settings = parse(existing)?;
    let Some(hooks) = settings.get("hooks").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    Ok(hooks
        .iter()
        .filter(|(event, groups)| {
            !NOT_EVENTS.contains(&event.as_str())
                && groups.as_array().into_iter().flatten().any(|g| {
                    g.get("hooks")
                        .and_then(Value::as_array)
                        .is_some_and(|h| h.iter().any(is_ours))
                })
        })
        .map(|(event, _)| event.clone())
        .collect())
}

/// Parses a settings text: blank text is an empty object; anything but an object whose
/// `hooks` (if any) is an object of arrays and whose `hooksConfig` (if any) is an object
/// is refused, with its place.
fn parse(text: &str) -> Result<Value, SettingsError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| SettingsError::Syntax {
        line: e.line(),
        col: e.column(),
        message: strip_position(&e.to_string()),
    })?;
    let Some(root) = value.as_object() else {
        return Err(shape(1, 1, "the settings are not a JSON object"));
    };
    if let Some(config) = root.get("hooksConfig")
        && !config.is_object()
    {
        let (line, col) = position_of(text, "hooksConfig");
        return Err(shape(line, col, "`hooksConfig` is not an object"));
    }
    match root.get("hooks") {
        None => {}
        Some(Value::Object(hooks)) => {
            if let Some((event, _)) = hooks
                .iter()
                .find(|(event, groups)| !NOT_EVENTS.contains(&event.as_str()) && !groups.is_array())
            {
                let (line, col) = position_of(text, event);
                return Err(shape(
                    line,
                    col,
                    &format!("`hooks.{event}` is not an array"),
                ));
            }
        }
        Some(_) => {
            let (line, col) = position_of(text, "hooks");
            return Err(shape(line, col, "`hooks` is not an object"));
        }
    }
    Ok(value)
}

fn shape(line: usize, col: usize, message: &str) -> SettingsError {
    SettingsError::Shape {
        line,
        col,
        message: message.to_owned(),
    }
}
