//! What the hook agents' decoders share (pure, no I/O): a hook body read as JSON (or its
//! bad-input signal), a hook payload with its accessors and its event, event names in
//! snake case (the agents' last states are `patchbay_signal::agent_table`'s).

use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::{Object, now_ms};
use serde_json::Value;

/// The `hook_event_name` of a hook payload (empty when it has none).
pub fn event_of(hook: &Value) -> &str {
    hook.get("hook_event_name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// An event name in snake case, as the hook agents' signal types have it
/// (`BeforeToolSelection` → `before_tool_selection`, `tool_use` as it is); anything but
/// ASCII letters and digits becomes `_`.
pub fn snake_case(event: &str) -> String {
    let mut name = String::with_capacity(event.len() + 4);
    for (i, c) in event.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 && !name.ends_with('_') {
                name.push('_');
            }
            name.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() {
            name.push(c);
        } else {
            name.push('_');
        }
    }
    name
}

/// A hook body (bytes as received) read as JSON; for one that is not JSON, `None`, and
/// the bad-input `error` signal of the agent `agent` (`claude_code`), from `source`, in
/// `out`.
pub fn read_body(body: &[u8], agent: &str, source: &str, out: &mut Vec<Decoded>) -> Option<Value> {
    let text = String::from_utf8_lossy(body);
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(value) => Some(value),
        Err(e) => {
            out.push(Decoded::BadInput(bad_input_signal(
                source,
                now_ms(),
                &text,
                &format!("{agent}: the hook body is not JSON: {e}"),
            )));
            None
        }
    }
}

/// One hook payload and its event, with the accessors every agent's decoder uses.
#[derive(Debug, Clone, Copy)]
pub struct Hook<'a> {
    /// The payload.
    pub value: &'a Value,
    /// Its `hook_event_name`.
    pub event: &'a str,
}

impl<'a> Hook<'a> {
    /// The payload `value` of the event `event`.
    pub fn new(value: &'a Value, event: &'a str) -> Self {
        Hook { value, event }
    }

    /// The payload `value` of the event its `hook_event_name` names (empty when none).
    pub fn of(value: &'a Value) -> Self {
        Hook::new(value, event_of(value))
    }

    /// The payload's own fields: all but `common`, the ones every payload of the agent
    /// shares (they go to the envelope or `metadata`).
    pub fn fields_except(&self, common: &[&str]) -> Object {
        self.value
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| !common.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The string at `key`.
    pub fn str(&self, key: &str) -> Option<&'a str> {
        self.value.get(key).and_then(Value::as_str)
    }

    /// The object at `key`; another value is wrapped as `{"value": …}`, `null` is none.
    pub fn object(&self, key: &str) -> Option<Object> {
        match self.value.get(key) {
            Some(Value::Object(o)) => Some(o.clone()),
            Some(Value::Null) | None => None,
            Some(other) => Some(patchbay_signal::object! {"value" => other.clone()}),
        }
    }

    /// The `tool_name` (`tool` when there is none).
    pub fn tool(&self) -> &'a str {
        self.str("tool_name").unwrap_or("tool")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_accessors_read_the_payload() {
        let value = json!({"tool_name": "Bash", "tool_input": {"command": "ls"}, "n": 3});
        let hook = Hook::new(&value, "PreToolUse");
        assert_eq!(hook.tool(), "Bash");
        assert_eq!(hook.str("n"), None);
        assert_eq!(
            hook.object("tool_input")
                .and_then(|o| o.get("command").cloned()),
            Some(json!("ls"))
        );
        assert_eq!(
            hook.object("n").and_then(|o| o.get("value").cloned()),
            Some(json!(3))
        );
        assert_eq!(hook.object("absent"), None);
        let empty = json!({});
        assert_eq!(Hook::new(&empty, "").tool(), "tool");
    }

    #[test]
    fn event_names_in_snake_case() {
        assert_eq!(snake_case("BeforeToolSelection"), "before_tool_selection");
        assert_eq!(snake_case("InstructionsLoaded"), "instructions_loaded");
        assert_eq!(snake_case("tool_use"), "tool_use");
        assert_eq!(snake_case("Odd Name!"), "odd_name_");
    }

    #[test]
    fn the_event_and_the_own_fields_are_read_from_the_payload() {
        let value = json!({"hook_event_name": "Stop", "session_id": "s", "reason": "done"});
        let hook = Hook::of(&value);
        assert_eq!(hook.event, "Stop");
        assert_eq!(
            Value::Object(hook.fields_except(&["hook_event_name", "session_id"])),
            json!({"reason": "done"})
        );
        assert_eq!(event_of(&json!({"hook_event_name": 3})), "");
        assert_eq!(Hook::of(&json!([1])).fields_except(&[]), Object::new());
    }

    #[test]
    fn a_body_that_is_not_json_is_bad_input_named_for_its_agent() {
        let mut out = Vec::new();
        let value = read_body(b" {\"a\": 1}\n", "claude_code", "claude_code:x", &mut out);
        assert_eq!(value, Some(json!({"a": 1})));
        assert!(out.is_empty());
        assert_eq!(
            read_body(b"{nope", "gemini_cli", "gemini_cli:x", &mut out),
            None
        );
        match out.as_slice() {
            [Decoded::BadInput(signal)] => {
                assert_eq!(signal.source.as_str(), "gemini_cli:x");
                let message = signal.payload.get("message").and_then(Value::as_str);
                let message = message.unwrap_or_default().to_owned();
                assert!(
                    message.starts_with("gemini_cli: the hook body is not JSON: "),
                    "{message}"
                );
            }
            other => panic!("not one bad-input signal: {other:?}"),
        }
    }
}
