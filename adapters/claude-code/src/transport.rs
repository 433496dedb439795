//! The hook endpoint: `type = "claude_code"` as a source (listen only) and as a two-way
//! output (`control.answer` in for the gate, the hook signals out of `NAME.inbound`).

use std::path::Path;

use patchbay_graph::approvals;
use patchbay_hooks::payload::event_of;
use patchbay_hooks::{Call, Decision, EndpointDefaults, EndpointOptions, HookAgent};
use patchbay_signal::Signal;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::well_known::AgentState;
use serde_json::Value;

use crate::decode::{ClaudeHooks, HookDecoder, agent_of};
use crate::gate::{self, CallKey, Decided, GateConfig, Verdict};
use crate::transcript::TranscriptReader;

/// The address the component listens on when the config names none.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7879";

/// `[outputs.NAME]` (two-way: takes `control.answer` for the gate) or `[sources.NAME]`
/// (listen only) with `type = "claude_code"`: the endpoint Claude Code's http hooks post
/// to (`http://LISTEN/hook`; `patchbay hooks install` writes them).
///
/// Its options are every hook agent's: [`EndpointOptions`].
pub type ClaudeCodeConfig = EndpointOptions<Claude>;

/// Claude Code's side of the shared endpoint: its decoder, its transcripts (the usage a
/// `Stop` reports), and the decisions given at a call's `PreToolUse` (its
/// `PermissionRequest` gets the same).
pub struct Claude {
    decoder: HookDecoder,
    transcripts: TranscriptReader,
    decided: Decided,
}

impl EndpointDefaults for Claude {
    const LISTEN: &'static str = DEFAULT_LISTEN;
}

impl HookAgent for Claude {
    type Events = ClaudeHooks;

    fn new(component: &str) -> Self {
        Claude {
            decoder: HookDecoder::for_component(component),
            transcripts: TranscriptReader::new(),
            decided: Decided::default(),
        }
    }

    fn decoder(&mut self) -> &mut HookDecoder {
        &mut self.decoder
    }

    /// `PreToolUse` and `PermissionRequest`; the `promptId` is the `tool_use_id` (a
    /// `PermissionRequest` has none: one is made up).
    fn call(&mut self, hook: &Value) -> Option<Call> {
        if !matches!(event_of(hook), "PreToolUse" | "PermissionRequest") {
            return None;
        }
        let prompt_id = hook
            .get("tool_use_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("permission-{}", patchbay_signal::next_id()));
        Some(Call::of(hook, prompt_id))
    }

    /// The same call held at its `PreToolUse`: one call, one approval.
    fn decided_before(&mut self, hook: &Value, _call: &Call) -> Option<Value> {
        let event = event_of(hook);
        if event != "PermissionRequest" {
            return None;
        }
        let (decision, reason) = self.decided.take(&CallKey::of(hook))?;
        Some(gate::hook_answer(event, decision, &reason))
    }

    fn requested(&mut self, hook: &Value, call: &Call, gate: &GateConfig) -> Signal {
        let choices = ["allow", "deny", "ask"].map(String::from);
        let payload = approvals::request_payload(
            &call.prompt_id,
            &agent_of(hook),
            &call.tool,
            call.input.clone(),
            &choices,
        );
        let mut request = self.decoder.signal_for(hook, approvals::REQUESTED, payload);
        let meta = request.metadata_mut();
        meta.insert("hookEvent".into(), event_of(hook).into());
        meta.insert("timeoutMs".into(), gate.timeout_ms.into());
        meta.insert("default".into(), gate.default.as_str().into());
        request
    }

    fn verdict(&self, verdict: Verdict) -> Verdict {
        gate::decision(verdict)
    }

    fn decided(&mut self, hook: &Value, decision: &Decision<'_>) -> Signal {
        let call = decision.call;
        let mut decided = self.decoder.signal_for(
            hook,
            approvals::DECIDED,
            approvals::decided_payload(&call.prompt_id, decision.verdict, decision.by),
        );
        let meta = decided.metadata_mut();
        meta.insert("toolName".into(), call.tool.clone().into());
        meta.insert("reason".into(), decision.reason.into());
        decided
    }

    fn state_after(&self, verdict: Verdict) -> AgentState {
        match verdict {
            Verdict::Allow | Verdict::Always => AgentState::Acting,
            Verdict::Deny | Verdict::Cancel => AgentState::Thinking,
            Verdict::Ask => AgentState::Waiting,
        }
    }

    /// Remembers a `PreToolUse`'s decision for the call's `PermissionRequest`.
    fn answer(&mut self, hook: &Value, _call: &Call, verdict: Verdict, reason: &str) -> Value {
        let event = event_of(hook);
        if event == "PreToolUse" {
            self.decided
                .record(CallKey::of(hook), verdict, reason.to_owned());
        }
        gate::hook_answer(event, verdict, reason)
    }

    /// On `Stop`/`SubagentStop`: the `token_usage` of what the transcript gained.
    fn after(&mut self, hook: &Value) -> Vec<Decoded> {
        if !matches!(event_of(hook), "Stop" | "SubagentStop") {
            return Vec::new();
        }
        let key = if hook.get("agent_transcript_path").is_some() {
            "agent_transcript_path"
        } else {
            "transcript_path"
        };
        let Some(path) = hook.get(key).and_then(Value::as_str) else {
            return Vec::new();
        };
        let signals =
            self.transcripts
                .usage(Path::new(path), self.decoder.source(), &agent_of(hook));
        signals.into_iter().map(Decoded::Signal).collect()
    }
}
