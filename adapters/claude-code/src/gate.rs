//! The tool-call gate: which calls are held, how a `control.answer` decides them, and the
//! answer Claude Code gets back (pure; the transport does the waiting).

use std::collections::VecDeque;

use patchbay_signal::Signal;
use serde::Deserialize;
use serde_json::{Value, json};

/// `gate = { tools = ["Bash", "Write"], timeout_ms = 30000, default = "ask" }`: hold the
/// calls of these tools until a `control.answer` decides them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// The tools whose calls wait for an answer (Claude Code's tool names: `Bash`,
    /// `Write`, `Edit`, `mcp__server__tool`, …; `"*"`: every tool).
    pub tools: Vec<String>,
    /// How long a call waits for an answer before the `default` is given. Default 30000.
    /// `patchbay hooks install --gate` sets the hook's timeout above it, so that the
    /// default is what Claude Code gets.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The decision when no answer comes in time: `ask` (Claude Code asks as it would
    /// without patchbay), `allow` or `deny`. Default `ask`.
    #[serde(default)]
    pub default: Decision,
}

fn default_timeout_ms() -> u64 {
    30_000
}

impl GateConfig {
    /// Whether calls of `tool` are held.
    pub fn holds(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == "*" || t == tool)
    }

    /// The hook `timeout` (whole seconds) that lets the gate answer first: `timeout_ms`
    /// rounded up, plus 5 s.
    pub fn hook_timeout_s(&self) -> u64 {
        self.timeout_ms.div_ceil(1000) + 5
    }
}

/// A gate's decision.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Let the call run.
    Allow,
    /// Refuse it: Claude Code does not run the tool and tells the model why.
    Deny,
    /// Leave it to Claude Code (its own permission rules and prompt).
    #[default]
    Ask,
}

impl Decision {
    /// `allow`, `deny` or `ask`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Deny => "deny",
            Decision::Ask => "ask",
        }
    }

    /// The word for a reason: `allowed`, `denied`, `left to Claude Code`.
    fn past(self) -> &'static str {
        match self {
            Decision::Allow => "allowed",
            Decision::Deny => "denied",
            Decision::Ask => "left to Claude Code",
        }
    }
}

/// What a `control.answer` says: which approval (`promptId`; absent: the oldest waiting)
/// and the decision; `cancelled: true` means the gate's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The approval it answers (`None`: the oldest waiting one, what a MIDI pad sends).
    pub prompt_id: Option<String>,
    /// The decision (`None`: cancelled, the default applies).
    pub decision: Option<Decision>,
    /// Who decided: the signal's source.
    pub by: String,
}

/// Why a `control.answer` cannot decide anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// `value` is not one of the decisions.
    #[error("`value` must be \"allow\", \"deny\" or \"ask\" (or `cancelled: true`), not {0}")]
    BadValue(String),
}

/// Reads a `control.answer` signal. Besides `allow`/`deny`/`ask`, `true`/`false` and
/// `yes`/`no`/`approve`/`reject` are understood, so that a pad or a UI button can send
/// what it naturally has.
pub fn parse_answer(signal: &Signal) -> Result<Answer, AnswerError> {
    let p = &signal.payload;
    let prompt_id = p.get("promptId").and_then(|v| match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    let cancelled = p.get("cancelled").and_then(Value::as_bool) == Some(true);
    let decision = if cancelled {
        None
    } else {
        Some(match p.get("value") {
            Some(Value::Bool(true)) => Decision::Allow,
            Some(Value::Bool(false)) => Decision::Deny,
            Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
                "allow" | "yes" | "approve" | "approved" => Decision::Allow,
                "deny" | "no" | "reject" | "rejected" => Decision::Deny,
                "ask" => Decision::Ask,
                _ => return Err(AnswerError::BadValue(format!("\"{s}\""))),
            },
            Some(other) => return Err(AnswerError::BadValue(other.to_string())),
            None => return Err(AnswerError::BadValue("nothing".into())),
        })
    };
    Ok(Answer {
        prompt_id,
        decision,
        by: signal.source.to_string(),
    })
}

/// The reason Claude Code is given, naming who decided.
pub fn reason(decision: Decision, by: &str) -> String {
    format!("patchbay: {} by {by}", decision.past())
}

/// The reason when no answer came in time.
pub fn timeout_reason(decision: Decision, timeout_ms: u64) -> String {
    format!(
        "patchbay: no answer within {timeout_ms} ms, {} by default",
        decision.past()
    )
}

/// The body that gives Claude Code `decision` for a `PreToolUse` or `PermissionRequest`
/// hook (`{}` for other events, and for `ask` on a `PermissionRequest`: no decision,
/// Claude Code asks as usual).
pub fn hook_answer(event: &str, decision: Decision, reason: &str) -> Value {
    match (event, decision) {
        ("PreToolUse", d) => json!({
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": d.as_str(),
                "permissionDecisionReason": reason,
            }
        }),
        ("PermissionRequest", Decision::Allow) => json!({
            "hookSpecificOutput": {
                "hookEventName": "PermissionRequest",
                "decision": {"behavior": "allow"},
            }
        }),
        ("PermissionRequest", Decision::Deny) => json!({
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
    recent: VecDeque<(CallKey, Decision, String)>,
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
    pub fn record(&mut self, key: CallKey, decision: Decision, reason: String) {
        if self.recent.len() >= DECIDED_KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back((key, decision, reason));
    }

    /// The decision already given to this call (taken: one `PermissionRequest` per call).
    pub fn take(&mut self, key: &CallKey) -> Option<(Decision, String)> {
        let i = self.recent.iter().rposition(|(k, _, _)| k == key)?;
        self.recent.remove(i).map(|(_, d, r)| (d, r))
    }
}

#[cfg(test)]
mod tests {
    use patchbay_signal::object;

    use super::*;

    fn answer(payload: patchbay_signal::Object) -> Result<Answer, AnswerError> {
        parse_answer(&Signal::new("control.answer", "sidecar:ui", payload))
    }

    #[test]
    fn answers_read_their_decision_and_who_sent_them() {
        let a = answer(object! {"promptId" => "toolu_1", "value" => "deny"}).unwrap();
        assert_eq!(a.prompt_id.as_deref(), Some("toolu_1"));
        assert_eq!(a.decision, Some(Decision::Deny));
        assert_eq!(a.by, "sidecar:ui");
        let pad = answer(object! {"value" => true}).unwrap();
        assert_eq!((pad.prompt_id, pad.decision), (None, Some(Decision::Allow)));
        let cancelled = answer(object! {"promptId" => "p", "cancelled" => true}).unwrap();
        assert_eq!(cancelled.decision, None);
        assert_eq!(
            answer(object! {"value" => "maybe"})
                .unwrap_err()
                .to_string(),
            "`value` must be \"allow\", \"deny\" or \"ask\" (or `cancelled: true`), not \"maybe\""
        );
        assert!(answer(object! {"promptId" => "p"}).is_err());
    }

    #[test]
    fn hook_answers_are_what_claude_code_honours() {
        let deny = hook_answer("PreToolUse", Decision::Deny, "no");
        assert_eq!(
            deny["hookSpecificOutput"]["permissionDecision"], "deny",
            "{deny}"
        );
        assert_eq!(deny["hookSpecificOutput"]["permissionDecisionReason"], "no");
        let allow = hook_answer("PermissionRequest", Decision::Allow, "yes");
        assert_eq!(
            allow["hookSpecificOutput"]["decision"],
            json!({"behavior": "allow"})
        );
        assert_eq!(
            hook_answer("PermissionRequest", Decision::Ask, "?"),
            json!({})
        );
        assert_eq!(hook_answer("Stop", Decision::Deny, "?"), json!({}));
    }

    #[test]
    fn a_decision_is_given_once_to_the_same_call() {
        let pre = json!({"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "ls"}});
        let other =
            json!({"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "rm"}});
        let mut decided = Decided::default();
        decided.record(CallKey::of(&pre), Decision::Deny, "r".into());
        assert_eq!(decided.take(&CallKey::of(&other)), None);
        assert_eq!(
            decided.take(&CallKey::of(&pre)),
            Some((Decision::Deny, "r".into()))
        );
        assert_eq!(decided.take(&CallKey::of(&pre)), None);
    }

    #[test]
    fn the_hook_timeout_leaves_room_for_the_default() {
        let gate = GateConfig {
            tools: vec!["Bash".into()],
            timeout_ms: 1500,
            default: Decision::Deny,
        };
        assert_eq!(gate.hook_timeout_s(), 7);
        assert!(gate.holds("Bash") && !gate.holds("Read"));
    }
}
