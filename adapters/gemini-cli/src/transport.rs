//! The hook endpoint: `type = "gemini_cli"` as a source (listen only) and as a two-way
//! output (`control.answer` in for the gate, the hook signals out of `NAME.inbound`). The
//! endpoint itself is every hook agent's (`patchbay_hooks`); this module gives it Gemini
//! CLI's decoder and answers. Gemini CLI runs command hooks, not HTTP ones: each runs
//! `patchbay hooks emit --agent gemini --url URL`, which posts the event's JSON here and
//! prints the answer.

use patchbay_hooks::payload::event_of;
use patchbay_hooks::{Call, Decision, EndpointDefaults, EndpointOptions, HookAgent};
use patchbay_signal::Signal;
use patchbay_signal::well_known::AgentState;
use serde_json::Value;

use crate::decode::{GeminiHooks, HookDecoder};
use crate::gate::{self, GateConfig, Verdict};

/// The address the component listens on when the config names none.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7880";

/// `[outputs.NAME]` (two-way: takes `control.answer` for the gate) or `[sources.NAME]`
/// (listen only) with `type = "gemini_cli"`: the endpoint Gemini CLI's command hooks post
/// to through `patchbay hooks emit --agent gemini` (`http://LISTEN/hook`; `patchbay hooks
/// install --agent gemini` writes them).
///
/// Its options are every hook agent's: [`EndpointOptions`].
pub type GeminiCliConfig = EndpointOptions<Gemini>;

/// Gemini CLI's side of the shared endpoint.
pub struct Gemini {
    decoder: HookDecoder,
}

impl EndpointDefaults for Gemini {
    const LISTEN: &'static str = DEFAULT_LISTEN;
}

impl HookAgent for Gemini {
    type Events = GeminiHooks;

    fn new(component: &str) -> Self {
        Gemini {
            decoder: HookDecoder::for_component(component),
        }
    }

    fn decoder(&mut self) -> &mut HookDecoder {
        &mut self.decoder
    }

    /// `BeforeTool`; the `promptId` is the call's `callId` ([`gate::prompt_id`]).
    fn call(&mut self, hook: &Value) -> Option<Call> {
        if event_of(hook) != "BeforeTool" {
            return None;
        }
        Some(Call::of(hook, gate::prompt_id(hook)))
    }

    fn requested(&mut self, hook: &Value, call: &Call, gate: &GateConfig) -> Signal {
        gate::approval_requested(&self.decoder, hook, &call.prompt_id, gate)
    }

    fn verdict(&self, verdict: Verdict) -> Verdict {
        gate::decision(verdict)
    }

    fn decided(&mut self, hook: &Value, d: &Decision<'_>) -> Signal {
        gate::approval_decided(
            &self.decoder,
            hook,
            &d.call.prompt_id,
            d.verdict,
            d.by,
            d.reason,
        )
    }

    fn state_after(&self, verdict: Verdict) -> AgentState {
        gate::state_after(verdict)
    }

    fn answer(&mut self, _hook: &Value, _call: &Call, verdict: Verdict, reason: &str) -> Value {
        gate::hook_answer(verdict, reason).0
    }
}
