//! The hook agents' decoder (pure, no I/O): what every agent's does the same (reading the
//! body, the event, repairing the signals, each agent's last state) once, and what
//! differs, how an event becomes signals and their envelope, one trait, [`HookEvents`].

use std::fmt::Debug;

use patchbay_signal::agent_table::AgentTable;
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::well_known::{self, AgentState, AgentStateChange, Payload};
use patchbay_signal::{Object, Signal, SmallString, now_ms};
use serde_json::Value;

use crate::payload::{self, Hook};

/// How many agents' last states a decoder remembers (sessions and subagents); the least
/// recently seen are forgotten first, so that a daemon running for months does not grow.
pub const AGENTS_KEPT: usize = 1024;

/// What one agent's hook payloads mean: everything its decoder does not share.
pub trait HookEvents: Sized {
    /// The component type (`claude_code`), the prefix of its bad-input messages.
    const NAME: &'static str;

    /// What the decoder keeps of each agent besides its state.
    type Kept: Default + Clone + Debug + Send;

    /// The agent a payload is about (`agentId` of its signals).
    fn agent_id(hook: &Hook<'_>) -> String;

    /// The signals of one hook event, in order (repaired afterwards, see
    /// [`HookDecoder::decode`]).
    fn signals(decoder: &mut HookDecoder<Self>, hook: &Hook<'_>, out: &mut Vec<Signal>);

    /// A signal of type `kind` with `payload` in the hook's envelope (timestamp,
    /// correlation id, metadata).
    fn envelope(
        decoder: &HookDecoder<Self>,
        hook: &Hook<'_>,
        kind: &str,
        payload: Object,
    ) -> Signal;
}

/// Decodes one agent's hook payloads (the JSON a hook receives) into signals, remembering
/// each agent's last state so that `agent_state_change.from` is right, and what else `E`
/// keeps of it.
#[derive(Debug, Clone)]
pub struct HookDecoder<E: HookEvents> {
    source: SmallString,
    agents: AgentTable<E::Kept>,
}

impl<E: HookEvents> HookDecoder<E> {
    /// A decoder whose signals have `source` (`claude_code:NAME`).
    pub fn new(source: impl Into<SmallString>) -> Self {
        HookDecoder {
            source: source.into(),
            agents: AgentTable::new(AGENTS_KEPT),
        }
    }

    /// The decoder of the component named `component` (its source `E::NAME:component`).
    pub fn for_component(component: &str) -> Self {
        Self::new(format!("{}:{component}", E::NAME))
    }

    /// The signals' source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// A signal of type `kind` with `payload` from this decoder's source (no envelope).
    pub fn signal(&self, kind: &str, payload: Object) -> Signal {
        Signal::new(kind, self.source.clone(), payload)
    }

    /// The agents seen, with their last states and what else is kept of them.
    pub fn agents(&self) -> &AgentTable<E::Kept> {
        &self.agents
    }

    /// The agents seen, to change what is kept of them.
    pub fn agents_mut(&mut self) -> &mut AgentTable<E::Kept> {
        &mut self.agents
    }

    /// Decodes one hook body (bytes as received); a body that is not JSON gives one counted
    /// bad-input `error` signal (as does a JSON body that is not a hook payload, see
    /// [`decode`](Self::decode)).
    pub fn decode_bytes(&mut self, body: &[u8], out: &mut Vec<Decoded>) {
        if let Some(value) = payload::read_body(body, E::NAME, &self.source, out) {
            self.decode(&value, out);
        }
    }

    /// Decodes one hook payload; one that is not an object with a string
    /// `hook_event_name` gives one counted bad-input `error` signal.
    pub fn decode(&mut self, hook: &Value, out: &mut Vec<Decoded>) {
        let Some(event) = hook
            .as_object()
            .and_then(|o| o.get("hook_event_name"))
            .and_then(Value::as_str)
        else {
            let message = format!(
                "{}: a hook payload must be a JSON object with a string `hook_event_name`",
                E::NAME
            );
            let raw = hook.to_string();
            let signal = bad_input_signal(&self.source, now_ms(), &raw, &message);
            out.push(Decoded::BadInput(signal));
            return;
        };
        let mut signals = Vec::new();
        E::signals(self, &Hook::new(hook, event), &mut signals);
        for mut signal in signals {
            // The typed payloads are valid by construction; this only guards a field the
            // agent might one day send with another shape.
            well_known::repair(&mut signal);
            out.push(Decoded::Signal(signal));
        }
    }

    /// The state `agent` was last seen in (`idle` if never).
    pub fn state_of(&self, agent: &str) -> AgentState {
        self.agents.state_of(agent)
    }

    /// An `agent_state_change` of the hook's agent to `to`, for the gate (`waiting` while
    /// a call is held, and back).
    pub fn state_change(&mut self, hook: &Value, to: AgentState, reason: String) -> Signal {
        self.change(&Hook::of(hook), to, reason)
    }

    /// A signal of type `kind` from this decoder's source with the hook's envelope: what
    /// the gate's own signals use.
    pub fn signal_for(&self, hook: &Value, kind: &str, payload: Object) -> Signal {
        self.envelope(&Hook::of(hook), kind, payload)
    }

    /// The `agent_state_change` of the hook's agent to `to`, from its last state.
    pub fn change(&mut self, hook: &Hook<'_>, to: AgentState, reason: String) -> Signal {
        let payload = self.agents.change(E::agent_id(hook), to, reason);
        self.envelope(hook, AgentStateChange::KIND, payload)
    }

    /// A signal of type `kind` with `payload` in the hook's envelope.
    pub fn envelope(&self, hook: &Hook<'_>, kind: &str, payload: Object) -> Signal {
        E::envelope(self, hook, kind, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A minimal agent: its events' signals are their fields; `Go` moves it to acting.
    #[derive(Debug)]
    struct Probe;

    impl HookEvents for Probe {
        const NAME: &'static str = "probe";
        type Kept = ();

        fn agent_id(hook: &Hook<'_>) -> String {
            hook.str("session_id").unwrap_or("probe").to_owned()
        }

        fn signals(decoder: &mut HookDecoder<Self>, hook: &Hook<'_>, out: &mut Vec<Signal>) {
            out.push(decoder.envelope(hook, "probe.event", hook.fields_except(&[])));
            if hook.event == "Go" {
                out.push(decoder.change(hook, AgentState::Acting, "go".into()));
            }
        }

        fn envelope(
            decoder: &HookDecoder<Self>,
            hook: &Hook<'_>,
            kind: &str,
            payload: Object,
        ) -> Signal {
            let mut signal = Signal::new(kind, decoder.source(), payload);
            signal.correlation_id = hook.str("session_id").map(Into::into);
            signal
        }
    }

    fn signals(out: &[Decoded]) -> Vec<&Signal> {
        out.iter()
            .map(|d| match d {
                Decoded::Signal(s) => s,
                other => panic!("not a signal: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn an_event_gives_its_signals_and_the_agent_its_state() {
        let mut decoder = HookDecoder::<Probe>::for_component("x");
        assert_eq!(decoder.source(), "probe:x");
        let mut out = Vec::new();
        decoder.decode_bytes(
            br#"{"hook_event_name": "Go", "session_id": "s1"}"#,
            &mut out,
        );
        let got = signals(&out);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].kind, "probe.event");
        assert_eq!(got[1].kind, AgentStateChange::KIND);
        assert_eq!(got[1].payload.get("from"), Some(&json!("idle")));
        assert_eq!(got[1].payload.get("to"), Some(&json!("acting")));
        assert_eq!(
            got[1].correlation_id.as_ref().map(|c| c.as_str()),
            Some("s1")
        );
        assert_eq!(decoder.state_of("s1"), AgentState::Acting);
        let hook = json!({"hook_event_name": "Stop", "session_id": "s1"});
        let back = decoder.state_change(&hook, AgentState::Idle, "done".into());
        assert_eq!(back.payload.get("from"), Some(&json!("acting")));
        assert_eq!(decoder.state_of("s1"), AgentState::Idle);
    }

    #[test]
    fn a_payload_without_an_event_is_bad_input_named_for_its_agent() {
        let mut decoder = HookDecoder::<Probe>::new("probe:x");
        for bad in [
            json!({"session_id": "s"}),
            json!([1]),
            json!({"hook_event_name": 3}),
        ] {
            let mut out = Vec::new();
            decoder.decode(&bad, &mut out);
            match out.as_slice() {
                [Decoded::BadInput(signal)] => {
                    let message = signal.payload.get("message").and_then(Value::as_str);
                    assert_eq!(
                        message,
                        Some(
                            "probe: a hook payload must be a JSON object with a string \
                             `hook_event_name`"
                        )
                    );
                }
                other => panic!("not one bad-input signal: {other:?}"),
            }
        }
    }
}
