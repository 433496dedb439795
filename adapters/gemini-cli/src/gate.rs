//! Gemini CLI's side of the gate (the gate itself, its config and the answers' words are
//! every agent's: `patchbay_graph::approvals`): the answer a `BeforeTool` command hook
//! prints, and the approval signals of a held call (pure; the transport waits).
//!
//! # The answer's format
//!
//! From Gemini CLI's hooks reference (`docs/hooks/reference.md` in
//! `google-gemini/gemini-cli`) and its code (`packages/core/src/hooks/hookRunner.ts`,
//! `types.ts`, `hookAggregator.ts`, `packages/core/src/core/coreToolHookTriggers.ts`):
//!
//! - exit status 0 and one JSON object on stdout (the way the reference prefers: "Preferred
//!   for all logic"); exit status 2 blocks too, but then Gemini reads the reason from
//!   stderr and ignores stdout, so patchbay never uses it;
//! - `decision`: `"allow"` or `"deny"` (alias `"block"`); a `"deny"` keeps the tool from
//!   running and sends `reason` to the model as the tool's error (`Tool execution
//!   blocked: REASON`), and the turn goes on;
//! - `continue: false` stops the whole agent loop (checked before `decision`), the model
//!   told `Agent execution stopped by hook: REASON` (`stopReason`, else `reason`);
//! - `{}`: no decision. Hooks' decisions are OR-ed (any deny wins), so `{}` leaves the call
//!   to Gemini CLI and the other hooks.
//!
//! `BeforeTool` fires when Gemini CLI executes a call (`executeToolWithHooks`), after its
//! own approval prompt if its approval mode asks one.

use patchbay_graph::approvals;
pub use patchbay_graph::approvals::{GateConfig, Verdict};
use patchbay_signal::Signal;
use patchbay_signal::well_known::AgentState;
use serde_json::{Value, json};

use crate::decode::{HookDecoder, agent_of, call_id};

/// The exit status of every answer: 0, Gemini CLI reads the JSON on stdout.
pub const EXIT_OK: i32 = 0;

/// The words `approval.requested` offers for a held Gemini CLI call.
pub const CHOICES: [&str; 4] = ["allow", "deny", "cancel", "ask"];

/// A verdict in Gemini CLI's terms: `always` is an `allow` (a hook cannot make Gemini
/// remember a decision); the others as they are.
pub fn decision(verdict: Verdict) -> Verdict {
    match verdict {
        Verdict::Allow | Verdict::Always => Verdict::Allow,
        other => other,
    }
}

/// The answer to a held `BeforeTool`: the JSON to print on stdout, and the exit status.
///
/// | verdict            | stdout                                                                 | exit |
/// |--------------------|------------------------------------------------------------------------|------|
/// | `allow`, `always`  | `{"decision": "allow"}`                                                | 0    |
/// | `deny`             | `{"decision": "deny", "reason": REASON}`: not run, the model told why  | 0    |
/// | `cancel`           | `{"decision": "deny", "reason": REASON, "continue": false, "stopReason": REASON}`: not run, and the agent loop stops | 0 |
/// | `ask`              | `{}`: no decision, Gemini CLI goes on as it would without patchbay     | 0    |
///
/// See the module docs for where the format comes from.
pub fn hook_answer(verdict: Verdict, reason: &str) -> (Value, i32) {
    let answer = match decision(verdict) {
        Verdict::Allow | Verdict::Always => json!({"decision": "allow"}),
        Verdict::Deny => json!({"decision": "deny", "reason": reason}),
        Verdict::Cancel => json!({
            "decision": "deny",
            "reason": reason,
            "continue": false,
            "stopReason": reason,
        }),
        Verdict::Ask => json!({}),
    };
    (answer, EXIT_OK)
}

/// Gemini CLI's hook `timeout` for a held `BeforeTool`, in whole seconds (give
/// [`crate::settings::install`] this; it writes milliseconds): the gate's `timeout_ms`
/// rounded up, plus 5 s, so that the gate's default is what Gemini CLI gets.
pub fn hook_timeout_s(gate: &GateConfig) -> u64 {
    gate.timeout_ms.div_ceil(1000) + 5
}

/// The `promptId` of a held call: its [`call_id`], the same as the `callId` of its
/// `tool_call`.
pub fn prompt_id(hook: &Value) -> String {
    call_id(hook)
}

/// The `approval.requested` signal of a held `BeforeTool` (`prompt_id` from
/// [`prompt_id`], also its `correlationId`: the call's), with the hook's envelope; the
/// gate's `timeoutMs` and `default` in metadata.
pub fn approval_requested(
    decoder: &HookDecoder,
    hook: &Value,
    prompt_id: &str,
    gate: &GateConfig,
) -> Signal {
    let tool = hook
        .get("tool_name")
        .and_then(Value::as_str)
        .unwrap_or("tool");
    let input = hook
        .get("tool_input")
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    let choices = CHOICES.map(String::from);
    let payload = approvals::request_payload(prompt_id, &agent_of(hook), tool, input, &choices);
    let mut signal = decoder
        .signal_for(hook, approvals::REQUESTED, payload)
        .correlated(prompt_id);
    let meta = signal.metadata_mut();
    meta.insert("timeoutMs".into(), gate.timeout_ms.into());
    meta.insert("default".into(), gate.default.as_str().into());
    signal
}

/// The `approval.decided` signal of a held call: `verdict` (in Gemini CLI's terms, see
/// [`decision`]) by `by` (a signal's source, or `timeout`), correlated with the call;
/// the tool and the reason in metadata.
pub fn approval_decided(
    decoder: &HookDecoder,
    hook: &Value,
    prompt_id: &str,
    verdict: Verdict,
    by: &str,
    reason: &str,
) -> Signal {
    let payload = approvals::decided_payload(prompt_id, decision(verdict), by);
    let mut signal = decoder
        .signal_for(hook, approvals::DECIDED, payload)
        .correlated(prompt_id);
    let meta = signal.metadata_mut();
    if let Some(tool) = hook.get("tool_name").and_then(Value::as_str) {
        meta.insert("toolName".into(), tool.into());
    }
    meta.insert("reason".into(), reason.into());
    signal
}

/// The state the agent is in once the answer is given: `acting` when the tool runs
/// (`allow`; `ask` too: `BeforeTool` fires after Gemini CLI's own approval, so a call left
/// to it runs), `thinking` when refused (the model hears why), `idle` when cancelled (the
/// loop stops).
pub fn state_after(verdict: Verdict) -> AgentState {
    match decision(verdict) {
        Verdict::Allow | Verdict::Always | Verdict::Ask => AgentState::Acting,
        Verdict::Deny => AgentState::Thinking,
        Verdict::Cancel => AgentState::Idle,
    }
}
