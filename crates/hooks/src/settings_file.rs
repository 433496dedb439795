//! What editing a hook agent's JSON settings file is the same for every agent: its hooks
//! live in `hooks.<Event>`, an array of groups `{…, hooks: [hook, …]}`; patchbay's hooks
//! are taken out of them without touching anything else, and the file is written back as
//! two-space indented JSON. Which hook is patchbay's is the agent's to say.

use std::path::PathBuf;

use serde_json::Value;

/// The settings files of `files` that exist, each with its text (one that cannot be read
/// is passed over, as if absent).
pub fn read_existing(files: Vec<PathBuf>) -> Vec<(PathBuf, String)> {
    files
        .into_iter()
        .filter_map(|file| {
            let text = std::fs::read_to_string(&file).ok()?;
            Some((file, text))
        })
        .collect()
}

/// serde_json's message without its " at line L column C" (the position leads).
pub fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

/// Where `"key"` first appears in `text` (1-based line and column), else 1:1.
pub fn position_of(text: &str, key: &str) -> (usize, usize) {
    let Some(offset) = text.find(&format!("\"{key}\"")) else {
        return (1, 1);
    };
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rfind('\n').map_or(offset, |nl| offset - nl - 1) + 1;
    (line, col)
}

/// The settings as written back: two-space indented JSON and a final newline.
pub fn render(settings: &Value) -> String {
    let mut text = serde_json::to_string_pretty(settings).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    text
}

/// A group array emptied by [`strip`] (marked with a `null` left behind).
pub fn emptied(groups: &Value) -> bool {
    groups
        .as_array()
        .is_some_and(|g| !g.is_empty() && g.iter().all(Value::is_null))
}

/// Removes the hooks `is_ours` picks from an event's groups; a group left without hooks
/// becomes `null`, and the nulls are removed unless every group became one (then
/// [`emptied`] drops the event). Returns how many hooks were removed.
pub fn strip(groups: &mut Value, is_ours: impl Fn(&Value) -> bool) -> usize {
    let Some(list) = groups.as_array_mut() else {
        return 0;
    };
    let mut removed = 0;
    for group in list.iter_mut() {
        let Some(hooks) = group.get_mut("hooks").and_then(Value::as_array_mut) else {
            continue;
        };
        let before = hooks.len();
        hooks.retain(|h| !is_ours(h));
        let gone = before - hooks.len();
        removed += gone;
        if gone > 0 && hooks.is_empty() {
            *group = Value::Null;
        }
    }
    if list.iter().any(|g| !g.is_null()) {
        list.retain(|g| !g.is_null());
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn positions_are_one_based_and_default_to_the_start() {
        assert_eq!(position_of("{\n  \"hooks\": 1}", "hooks"), (2, 3));
        assert_eq!(position_of("{\"hooks\": 1}", "hooks"), (1, 2));
        assert_eq!(position_of("{}", "hooks"), (1, 1));
        assert_eq!(strip_position("EOF at line 1 column 2"), "EOF");
        assert_eq!(strip_position("no place"), "no place");
    }

    #[test]
    fn strip_takes_ours_and_the_groups_it_empties() {
        let ours = |h: &Value| h.get("name").and_then(Value::as_str) == Some("patchbay");
        let mut groups = json!([
            {"hooks": [{"name": "patchbay"}]},
            {"matcher": "x", "hooks": [{"name": "mine"}, {"name": "patchbay"}]},
        ]);
        assert_eq!(strip(&mut groups, ours), 2);
        assert_eq!(
            groups,
            json!([{"matcher": "x", "hooks": [{"name": "mine"}]}])
        );
        assert!(!emptied(&groups));
        let mut only_ours = json!([{"hooks": [{"name": "patchbay"}]}]);
        assert_eq!(strip(&mut only_ours, ours), 1);
        assert!(emptied(&only_ours));
        assert_eq!(strip(&mut json!({}), ours), 0);
        assert_eq!(render(&json!({"a": 1})), "{\n  \"a\": 1\n}\n");
    }
}
