//! Claude Code's side of the gate (the gate itself, its config and the answers' words, are
//! every agent's: `patchbay_graph::approvals`): the answer Claude Code's hooks get back,
//! and the one decision a call gets at both of its hooks (pure; the transport waits).

use std::collections::VecDeque;

pub use patchbay_graph::approvals::{GateConfig, Verdict};
use serde_json::{Value, json};

/// Claude Code's hooks give a call a little longer than the gate, so that the gate's
/// default is what Claude Code gets: the hook `timeout` (whole seconds) is `timeout_ms`
/// rounded up, plus 5 s.
pub fn hook_timeout_s(gate: &GateConfig) -> u64 {
    gate.timeout_ms.div_ceil(1000) + 5
}

/// A verdict in Claude Code's words: `cancel` is a `deny` (Claude Code has no turn to
/// cancel from a hook), `always` an `allow`.
pub fn decision(verdict: Verdict) -> Verdict {
    match verdict {
        Verdict::Allow | Verdict::Always => Verdict::Allow,
        Verdict::Deny | Verdict::Cancel => Verdict::Deny,
        Verdict::Ask => Verdict::Ask,
    }
}

/// The body that gives Claude Code `verdict` for a `PreToolUse` or `PermissionRequest`
/// hook (`{}` for other events, and for `ask` on a `PermissionRequest`: no decision,
/// Claude Code asks as usual).
pub fn hook_answer(event: &str, verdict: Verdict, reason: &str) -> Value {
    match (event, decision(verdict)) {
        ("PreToolUse", d) => json!({
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": d.as_str(),
                "permissionDecisionReason": reason,
            }
        }),
        ("PermissionRequest", Verdict::Allow) => json!({
            "hookSpecificOutput": {
                "hookEventName": "PermissionRequest",
                "decision": {"behavior": "allow"},
            }
        }),
        ("PermissionRequest", Verdict::Deny) => json!({
            "hookSpecificOutput": {
                "hookEventName": "PermissionRequest",
                "decision": {"behavior": "deny", "message": reason},
            }
        }),
        _ => json!({}),
    }
}

/// The calls decided lately, so that a `PermissionRequest` following a held `PreToolUse`
/// for the same call gets the same decision (Claude Code's `PermissionRequest` has no
/// `tool_use_id`: the call is recognised by session, tool and input).
#[derive(Debug, Default)]
pub struct Decided {
    recent: VecDeque<(CallKey, Verdict, String)>,
}

/// A tool call as both hooks describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallKey {
    session: String,
    tool: String,
    input: String,
}

impl CallKey {
    /// The call a `PreToolUse` or `PermissionRequest` payload is about.
    pub fn of(hook: &Value) -> CallKey {
        let s = |k: &str| {
            hook.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        CallKey {
            session: s("session_id"),
            tool: s("tool_name"),
            input: hook
                .get("tool_input")
                .map(Value::to_string)
                .unwrap_or_default(),
        }
    }
}

/// How many decisions are remembered.
const DECIDED_KEPT: usize = 64;

impl Decided {
    /// Remembers a decision and its reason.
    pub fn record(&mut self, key: CallKey, decision: Verdict, reason: String) {
        if self.recent.len() >= DECIDED_KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back((key, decision, reason));
    }

    /// The decision already given to this call (taken: one `PermissionRequest` per call).
    pub fn take(&mut self, key: &CallKey) -> Option<(Verdict, String)> {
        let i = self.recent.iter().rposition(|(k, _, _)| k == key)?;
        self.recent.remove(i).map(|(_, d, r)| (d, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_answers_are_what_claude_code_honours() {
        let deny = hook_answer("PreToolUse", Verdict::Deny, "no");
        assert_eq!(
            deny["hookSpecificOutput"]["permissionDecision"], "deny",
            "{deny}"
        );
        assert_eq!(deny["hookSpecificOutput"]["permissionDecisionReason"], "no");
        let cancel = hook_answer("PreToolUse", Verdict::Cancel, "stop");
        assert_eq!(cancel["hookSpecificOutput"]["permissionDecision"], "deny");
        let allow = hook_answer("PermissionRequest", Verdict::Always, "yes");
        assert_eq!(
            allow["hookSpecificOutput"]["decision"],
            json!({"behavior": "allow"})
        );
        assert_eq!(
            hook_answer("PermissionRequest", Verdict::Ask, "?"),
            json!({})
        );
        assert_eq!(hook_answer("Stop", Verdict::Deny, "?"), json!({}));
    }

    #[test]
    fn a_decision_is_given_once_to_the_same_call() {
        let pre = json!({"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "ls"}});
        let other =
            json!({"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "rm"}});
        let mut decided = Decided::default();
        decided.record(CallKey::of(&pre), Verdict::Deny, "r".into());
        assert_eq!(decided.take(&CallKey::of(&other)), None);
        assert_eq!(
            decided.take(&CallKey::of(&pre)),
            Some((Verdict::Deny, "r".into()))
        );
        assert_eq!(decided.take(&CallKey::of(&pre)), None);
    }

    #[test]
    fn the_hook_timeout_leaves_room_for_the_default() {
        let gate = GateConfig {
            tools: vec!["Bash".into()],
            timeout_ms: 1500,
            default: Verdict::Deny,
        };
        assert_eq!(hook_timeout_s(&gate), 7);
        assert!(gate.holds("Bash") && !gate.holds("Read"));
    }
}
