//! The agents a decoder tracks (sessions, threads, subagents), each with its last state
//! and what else the decoder keeps of it, bounded: from it each `agent_state_change` is
//! made with the right `from`.

use std::collections::HashMap;

use crate::Object;
use crate::well_known::{AgentState, AgentStateChange, Payload};

/// One agent's entry: its last state, what the decoder keeps besides (`T`), when it was
/// first seen and when last touched.
#[derive(Debug, Clone)]
struct Entry<T> {
    state: AgentState,
    extra: T,
    seen: u64,
    touched: u64,
}

/// The agents a decoder has seen, each with its last state and what else the decoder keeps
/// of it (`T`), at most `capacity` of them, and the current one (the agent of a message
/// that names none).
///
/// When a new agent comes and the table is full, the least recently touched agent that is
/// not the current one is forgotten (it starts again from `idle` if it comes back), so that
/// a daemon running for months does not grow and the agent at work is never the one lost.
#[derive(Debug, Clone)]
pub struct AgentTable<T> {
    entries: HashMap<String, Entry<T>>,
    capacity: usize,
    clock: u64,
    current: Option<String>,
}

impl<T: Default> AgentTable<T> {
    /// No agents yet; at most `capacity` kept (at least one).
    pub fn new(capacity: usize) -> Self {
        AgentTable {
            entries: HashMap::new(),
            capacity: capacity.max(1),
            clock: 0,
            current: None,
        }
    }

    /// The state `agent` was last seen in (`idle` if never, or forgotten).
    pub fn state_of(&self, agent: &str) -> AgentState {
        self.state(agent).unwrap_or(AgentState::Idle)
    }

    /// The state `agent` was last seen in; `None` for an agent not known.
    pub fn state(&self, agent: &str) -> Option<AgentState> {
        self.entries.get(agent).map(|e| e.state)
    }

    /// What is kept of `agent`, without touching it.
    pub fn get(&self, agent: &str) -> Option<&T> {
        self.entries.get(agent).map(|e| &e.extra)
    }

    /// What is kept of `agent`, touched (created idle if new).
    pub fn get_mut(&mut self, agent: &str) -> &mut T {
        &mut self.touch(agent).extra
    }

    /// The current agent (the last one [`set_current`](Self::set_current) named).
    pub fn current(&self) -> Option<&str> {
        self.current.as_deref()
    }

    /// Makes `agent` the current one (created idle if new, touched).
    pub fn set_current(&mut self, agent: &str) {
        if self.current.as_deref() != Some(agent) {
            self.current = Some(agent.to_owned());
        }
        self.touch(agent);
    }

    /// The agents known, first seen first.
    pub fn agents(&self) -> impl Iterator<Item = &str> {
        let mut known: Vec<(&String, u64)> =
            self.entries.iter().map(|(k, e)| (k, e.seen)).collect();
        known.sort_unstable_by_key(|&(_, seen)| seen);
        known.into_iter().map(|(k, _)| k.as_str())
    }

    /// The payload of an `agent_state_change` of `agent` to `to` from its last state (which
    /// becomes `to`), even when it is there already (a hook event says it happened).
    pub fn change(&mut self, agent: String, to: AgentState, reason: String) -> Object {
        let from = std::mem::replace(&mut self.touch(&agent).state, to);
        AgentStateChange {
            agent_id: agent,
            from,
            to,
            reason: Some(reason),
        }
        .into_object()
    }

    /// The `agent_state_change` of the agent kept as `key` (named `agent_id` in the
    /// payload) to `to` from its last state, which becomes `to`; `None` when it is in `to`
    /// already.
    pub fn transition(
        &mut self,
        key: &str,
        agent_id: &str,
        to: AgentState,
        reason: Option<&str>,
    ) -> Option<AgentStateChange> {
        // Nothing changes (not even which agent is the least recently touched) when the
        // agent is in `to` already; an unknown one is idle.
        if self.state_of(key) == to {
            return None;
        }
        let from = std::mem::replace(&mut self.touch(key).state, to);
        Some(AgentStateChange {
            agent_id: agent_id.to_owned(),
            from,
            to,
            reason: reason.map(str::to_owned),
        })
    }

    /// The entry of `agent`, created idle if new (forgetting one when full, see the type),
    /// marked as touched now.
    fn touch(&mut self, agent: &str) -> &mut Entry<T> {
        self.clock += 1;
        let now = self.clock;
        if !self.entries.contains_key(agent) && self.entries.len() >= self.capacity {
            let current = self.current.as_deref();
            let oldest = self
                .entries
                .iter()
                .filter(|(k, _)| Some(k.as_str()) != current)
                .min_by_key(|(_, e)| e.touched)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        let entry = self.entries.entry(agent.to_owned()).or_insert(Entry {
            state: AgentState::Idle,
            extra: T::default(),
            seen: now,
            touched: now,
        });
        entry.touched = now;
        entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_change_starts_from_the_last_state() {
        let mut agents = AgentTable::<()>::new(8);
        let first = agents.change("a".into(), AgentState::Thinking, "prompt".into());
        assert_eq!(first.get("from"), Some(&json!("idle")));
        assert_eq!(first.get("to"), Some(&json!("thinking")));
        assert_eq!(first.get("reason"), Some(&json!("prompt")));
        let again = agents.change("a".into(), AgentState::Thinking, "more".into());
        assert_eq!(again.get("from"), Some(&json!("thinking")));
        let second = agents.change("a".into(), AgentState::Acting, "tool".into());
        assert_eq!(second.get("from"), Some(&json!("thinking")));
        assert_eq!(agents.state_of("a"), AgentState::Acting);
        assert_eq!(agents.state_of("b"), AgentState::Idle);
        assert_eq!(agents.state("b"), None);
    }

    #[test]
    fn a_transition_to_the_same_state_is_none() {
        let mut agents = AgentTable::<()>::new(8);
        let change = agents.transition("t1", "agent-1", AgentState::Thinking, Some("go"));
        let change = change.expect("idle → thinking");
        assert_eq!(change.agent_id, "agent-1");
        assert_eq!(
            (change.from, change.to),
            (AgentState::Idle, AgentState::Thinking)
        );
        assert_eq!(change.reason.as_deref(), Some("go"));
        assert!(
            agents
                .transition("t1", "agent-1", AgentState::Thinking, None)
                .is_none()
        );
        assert_eq!(agents.state("t1"), Some(AgentState::Thinking));
        // An unknown agent is idle: no change, and it is not added.
        assert!(
            agents
                .transition("t2", "t2", AgentState::Idle, None)
                .is_none()
        );
        assert_eq!(agents.state("t2"), None);
    }

    #[test]
    fn the_least_recently_touched_agent_is_forgotten_first() {
        let mut agents = AgentTable::<Option<u32>>::new(2);
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
    fn the_current_agent_is_never_forgotten() {
        let mut agents = AgentTable::<Option<u32>>::new(3);
        agents.set_current("main");
        *agents.get_mut("main") = Some(7);
        agents.transition("main", "main", AgentState::Acting, None);
        // Others come and go; `main`, the oldest touched, stays because it is current.
        for other in ["b", "c", "d", "e"] {
            agents.transition(other, other, AgentState::Thinking, None);
        }
        assert_eq!(agents.current(), Some("main"));
        assert_eq!(agents.get("main"), Some(&Some(7)));
        assert_eq!(agents.state_of("main"), AgentState::Acting);
        assert_eq!(agents.agents().collect::<Vec<_>>(), ["main", "d", "e"]);
        // A new current one: the old current, the least recently touched, goes now.
        agents.set_current("f");
        assert_eq!(agents.agents().collect::<Vec<_>>(), ["d", "e", "f"]);
        assert_eq!(agents.get("main"), None);
        agents.transition("g", "g", AgentState::Thinking, None);
        assert_eq!(agents.agents().collect::<Vec<_>>(), ["e", "f", "g"]);
    }

    #[test]
    fn agents_are_listed_first_seen_first() {
        let mut agents = AgentTable::<()>::new(8);
        for agent in ["z", "a", "m", "a"] {
            agents.get_mut(agent);
        }
        assert_eq!(agents.agents().collect::<Vec<_>>(), ["z", "a", "m"]);
    }
}
