//! What the hook agents' decoders share (pure, no I/O): a hook payload with its accessors,
//! and the agents' last states, bounded, from which each `agent_state_change` is made.

use std::collections::HashMap;

use patchbay_signal::Object;
use patchbay_signal::well_known::{AgentState, AgentStateChange, Payload};
use serde_json::Value;

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

/// One agent's entry: its last state, what the decoder keeps besides (`T`), and when it
/// was last touched.
#[derive(Debug, Clone)]
struct Entry<T> {
    state: AgentState,
    extra: T,
    tick: u64,
}

/// The agents a decoder has seen (sessions, subagents), each with its last state and what
/// else the decoder keeps of it (`T`), at most `capacity` of them: the least recently
/// touched one is forgotten first, so that a daemon running for months does not grow.
#[derive(Debug, Clone)]
pub struct Agents<T> {
    entries: HashMap<String, Entry<T>>,
    capacity: usize,
    tick: u64,
}

impl<T: Default> Agents<T> {
    /// No agents yet; at most `capacity` kept (at least one).
    pub fn new(capacity: usize) -> Self {
        Agents {
            entries: HashMap::new(),
            capacity: capacity.max(1),
            tick: 0,
        }
    }

    /// The state `agent` was last seen in (`idle` if never, or forgotten).
    pub fn state_of(&self, agent: &str) -> AgentState {
        self.entries
            .get(agent)
            .map_or(AgentState::Idle, |e| e.state)
    }

    /// What is kept of `agent`, without touching it.
    pub fn get(&self, agent: &str) -> Option<&T> {
        self.entries.get(agent).map(|e| &e.extra)
    }

    /// What is kept of `agent`, touched (created idle if new).
    pub fn get_mut(&mut self, agent: &str) -> &mut T {
        &mut self.touch(agent).extra
    }

    /// The payload of an `agent_state_change` of `agent` to `to`, from its last state
    /// (which becomes `to`).
    pub fn change(&mut self, agent: String, to: AgentState, reason: String) -> Object {
        let entry = self.touch(&agent);
        let from = std::mem::replace(&mut entry.state, to);
        AgentStateChange {
            agent_id: agent,
            from,
            to,
            reason: Some(reason),
        }
        .into_object()
    }

    /// The entry of `agent`, created idle if new (forgetting the least recently touched
    /// one when full), marked as touched now.
    fn touch(&mut self, agent: &str) -> &mut Entry<T> {
        self.tick += 1;
        if !self.entries.contains_key(agent)
            && self.entries.len() >= self.capacity
            && let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.tick)
                .map(|(k, _)| k.clone())
        {
            self.entries.remove(&oldest);
        }
        let tick = self.tick;
        let entry = self.entries.entry(agent.to_owned()).or_insert(Entry {
            state: AgentState::Idle,
            extra: T::default(),
            tick,
        });
        entry.tick = tick;
        entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_change_starts_from_the_last_state() {
        let mut agents = Agents::<()>::new(8);
        let first = agents.change("a".into(), AgentState::Thinking, "prompt".into());
        assert_eq!(first.get("from"), Some(&json!("idle")));
        assert_eq!(first.get("to"), Some(&json!("thinking")));
        assert_eq!(first.get("reason"), Some(&json!("prompt")));
        let second = agents.change("a".into(), AgentState::Acting, "tool".into());
        assert_eq!(second.get("from"), Some(&json!("thinking")));
        assert_eq!(agents.state_of("a"), AgentState::Acting);
        assert_eq!(agents.state_of("b"), AgentState::Idle);
    }

    #[test]
    fn the_least_recently_touched_agent_is_forgotten_first() {
        let mut agents = Agents::<Option<u32>>::new(2);
        *agents.get_mut("a") = Some(1);
        agents.change("b".into(), AgentState::Acting, "x".into());
        // Touching `a` again makes `b` the oldest.
        agents.change("a".into(), AgentState::Thinking, "x".into());
        agents.change("c".into(), AgentState::Waiting, "x".into());
        assert_eq!(agents.get("a"), Some(&Some(1)));
        assert_eq!(agents.get("b"), None);
        assert_eq!(agents.state_of("b"), AgentState::Idle);
        assert_eq!(agents.state_of("c"), AgentState::Waiting);
    }

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
}
