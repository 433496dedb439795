//! The endpoint agents' hooks post to, the same for every agent that reports through hooks
//! (Claude Code, Gemini CLI): an HTTP listener (`POST /hook`, `GET /health`) through
//! `patchbay_transport::listen`, the bearer token, the hand-over of the decoded signals
//! to the graph, and the tool-call gate (calls held until a `control.answer` names them
//! or the gate's timeout gives its default; `approval.requested` / `approval.decided` and
//! the agent's state changes around each; held calls released with the default when the
//! component stops).
//!
//! What differs between agents is one trait, [`HookAgent`]: its decoder (a
//! [`HookDecoder`] over the agent's [`HookEvents`]: how a payload becomes signals),
//! whether it is a call the gate may hold (and its prompt id, tool and input), the
//! signals of a held call in the agent's envelope, and the body that answers a verdict.
//! An adapter implements it (its default `listen` too: [`EndpointDefaults`]),
//! names [`EndpointOptions`] of its agent as its options struct, and builds its component
//! with [`build_source`] and [`build_output`] (or checks the options into [`Settings`] and
//! runs [`serve`] itself).
//!
//! [`client`] is the other side: what `patchbay hooks emit` posts and `patchbay hooks
//! status` asks.

#![warn(missing_docs)]

pub mod client;
mod component;
pub mod decoder;
mod endpoint;
mod options;
pub mod payload;
pub mod probe;
pub mod settings_file;

pub use client::{HEALTH_PATH, HOOK_PATH};
pub use component::{build_output, build_source, parse_settings};
pub use decoder::{HookDecoder, HookEvents};
pub use endpoint::serve;
pub use options::{EndpointDefaults, EndpointOptions, Settings, defaults};

use patchbay_graph::approvals::{GateConfig, Verdict};
use patchbay_signal::Signal;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::well_known::AgentState;
use serde_json::Value;

/// A call the gate may hold, as the agent's payload describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The `promptId` of its approval (what a `control.answer` names).
    pub prompt_id: String,
    /// The tool (what `gate.tools` is matched against).
    pub tool: String,
    /// The tool's input.
    pub input: Value,
}

impl Call {
    /// The call a hook payload names, as both agents name it: the tool in `tool_name`, its
    /// input in `tool_input` (an empty object when absent).
    pub fn of(hook: &Value, prompt_id: String) -> Call {
        let tool = hook
            .get("tool_name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let input = hook
            .get("tool_input")
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        Call {
            prompt_id,
            tool,
            input,
        }
    }
}

/// A held call's verdict, as its `approval.decided` tells it.
#[derive(Debug, Clone, Copy)]
pub struct Decision<'a> {
    /// The call decided.
    pub call: &'a Call,
    /// The verdict, already in the agent's terms ([`HookAgent::verdict`]).
    pub verdict: Verdict,
    /// Who decided (a `control.answer`'s source, `timeout`).
    pub by: &'a str,
    /// Why.
    pub reason: &'a str,
}

/// What one agent's hooks need of the endpoint: everything protocol-specific. The
/// endpoint keeps one value behind a lock and calls it for each request, in order.
pub trait HookAgent: EndpointDefaults + Send + 'static {
    /// What the agent's hook payloads mean.
    type Events: HookEvents;

    /// The agent's side of the endpoint of the component named `component`.
    fn new(component: &str) -> Self
    where
        Self: Sized;

    /// The agent's decoder.
    fn decoder(&mut self) -> &mut HookDecoder<Self::Events>;

    /// The component type (`claude_code`), the prefix of the endpoint's messages.
    fn name(&self) -> &'static str {
        Self::Events::NAME
    }

    /// Decodes one hook payload (JSON) into signals; one that is not a hook payload gives
    /// a bad-input signal (then the request is refused with 400).
    fn decode(&mut self, hook: &Value, out: &mut Vec<Decoded>) {
        self.decoder().decode(hook, out);
    }

    /// Decodes a body that is not JSON: a bad-input signal.
    fn decode_bytes(&mut self, body: &[u8], out: &mut Vec<Decoded>) {
        self.decoder().decode_bytes(body, out);
    }

    /// The call this payload asks to run, when it is an event the gate may hold (whether
    /// the tool is held is the gate's to say); `None` for every other event.
    fn call(&mut self, hook: &Value) -> Option<Call>;

    /// The answer to a held call that needs no approval of its own (a call decided
    /// already at another of its hooks), instead of holding it again.
    fn decided_before(&mut self, _hook: &Value, _call: &Call) -> Option<Value> {
        None
    }

    /// An `agent_state_change` of the payload's agent to `to`.
    fn state_change(&mut self, hook: &Value, to: AgentState, reason: String) -> Signal {
        self.decoder().state_change(hook, to, reason)
    }

    /// The `approval.requested` of a held call (`patchbay_graph::approvals`' vocabulary,
    /// the gate's `timeoutMs` and `default` in metadata).
    fn requested(&mut self, hook: &Value, call: &Call, gate: &GateConfig) -> Signal;

    /// A verdict in the agent's terms (what it can do with it: `always` may be an
    /// `allow`, `cancel` a `deny`).
    fn verdict(&self, verdict: Verdict) -> Verdict {
        verdict
    }

    /// The `approval.decided` of a held call's `decision`.
    fn decided(&mut self, hook: &Value, decision: &Decision<'_>) -> Signal;

    /// The state the agent is in once the call has its verdict.
    fn state_after(&self, verdict: Verdict) -> AgentState;

    /// The body that gives the agent `verdict` for a held call (and what the agent
    /// remembers of it).
    fn answer(&mut self, hook: &Value, call: &Call, verdict: Verdict, reason: &str) -> Value;

    /// Signals an event brings once its own are out (Claude Code's `Stop`: the token usage
    /// its transcript gained), sent before the answer.
    fn after(&mut self, _hook: &Value) -> Vec<Decoded> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_call_is_read_from_the_payload() {
        let hook = json!({"tool_name": "Bash", "tool_input": {"command": "ls"}});
        let call = Call::of(&hook, "p1".into());
        assert_eq!(call.prompt_id, "p1");
        assert_eq!(call.tool, "Bash");
        assert_eq!(call.input, json!({"command": "ls"}));
        let bare = Call::of(&json!({}), "p2".into());
        assert_eq!((bare.tool.as_str(), bare.input), ("", json!({})));
    }
}
