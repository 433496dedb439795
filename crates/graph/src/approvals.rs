//! The approvals every agent component of a graph is waiting on, in one place.
//!
//! Each agent that asks before acting (Claude Code's gate, Codex, Gemini CLI, OpenCode,
//! Palyra, OpenClaw) opens an entry here while one of its approvals waits, and closes it
//! when the approval is decided (from anywhere: a UI, a pad, the agent's own terminal, the
//! gate's timeout). Two things need all of them at once:
//!
//! - a `control.answer` without a `promptId` (what a MIDI pad sends) answers the oldest
//!   pending approval of any agent: [`Approvals::target`] says which, the same for every
//!   component the answer reaches, so exactly one agent acts on it;
//! - the status page lists what waits, oldest first ([`Approvals::pending`]).
//!
//! The board belongs to the graph's [`Telemetry`](crate::Telemetry), so that a reload
//! keeps it and two graphs in one process do not share it.
//!
//! The vocabulary is shared too: every agent emits [`REQUESTED`] and [`DECIDED`] signals
//! (built by [`requested`] and [`decided`]), reads `control.answer` with
//! [`parse_answer`], and is configured with the same [`GateConfig`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use patchbay_signal::{Object, Signal, object};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `approval.requested {promptId, agentId, toolName, input, choices}`: an agent waits for a
/// person (the agent's own details in `metadata`).
pub const REQUESTED: &str = "approval.requested";
/// `approval.decided {promptId, value, by}`: an approval was answered, from anywhere (a
/// UI, a pad, the agent's own terminal, the gate's timeout).
pub const DECIDED: &str = "approval.decided";

/// What an answer decides: the common words every agent understands.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Let it run (this once).
    Allow,
    /// Let it run, and calls like it from now on, where the agent can remember that
    /// (Codex's `acceptForSession`, OpenCode's `always`); elsewhere `allow`.
    Always,
    /// Refuse it: the agent does not run it and goes on.
    Deny,
    /// Refuse it and stop the turn, where the agent can (Codex's `cancel`); elsewhere
    /// `deny`.
    Cancel,
    /// Leave it to the agent (its own rules and prompt), where it asks by itself (Claude
    /// Code and Gemini CLI through their hooks, OpenCode's own UI); elsewhere `deny`.
    #[default]
    Ask,
}

impl Verdict {
    /// `allow`, `always`, `deny`, `cancel` or `ask`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Always => "always",
            Verdict::Deny => "deny",
            Verdict::Cancel => "cancel",
            Verdict::Ask => "ask",
        }
    }

    /// Reads an answer's word: the common ones, each agent's own (`accept`, `decline`,
    /// `once`, `always`, `reject`, `acceptForSession`), and what a pad or a button
    /// naturally sends (`yes`/`no`, `approve`, `true`/`false`).
    pub fn parse(value: &Value) -> Option<Verdict> {
        match value {
            Value::Bool(true) => Some(Verdict::Allow),
            Value::Bool(false) => Some(Verdict::Deny),
            Value::String(s) => match s.to_ascii_lowercase().as_str() {
                "allow" | "yes" | "approve" | "approved" | "accept" | "once" => {
                    Some(Verdict::Allow)
                }
                "always" | "acceptforsession" | "allow_always" => Some(Verdict::Always),
                "deny" | "no" | "reject" | "rejected" | "decline" => Some(Verdict::Deny),
                "cancel" => Some(Verdict::Cancel),
                "ask" => Some(Verdict::Ask),
                _ => None,
            },
            _ => None,
        }
    }

    /// The past tense for a reason: `allowed`, `denied`, …
    pub fn past(self) -> &'static str {
        match self {
            Verdict::Allow => "allowed",
            Verdict::Always => "allowed from now on",
            Verdict::Deny => "denied",
            Verdict::Cancel => "cancelled",
            Verdict::Ask => "left to the agent",
        }
    }
}

/// `gate = { tools = ["Bash"], timeout_ms = 30000, default = "ask" }`: hold the calls of
/// these tools until a `control.answer` decides them. The same on every agent component.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateConfig {
    /// The tools whose calls wait for an answer, in the agent's own names (Claude Code's
    /// `Bash`, Codex's `commandExecution` and `fileChange`, Gemini CLI's
    /// `run_shell_command`, OpenCode's `bash`, …; `"*"`: every tool).
    pub tools: Vec<String>,
    /// How long a call waits for an answer before the `default` is given, in ms. Default
    /// 30000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The decision when no answer comes in time: `ask` (the agent asks as it would
    /// without patchbay, where it can; elsewhere `deny`), `allow`, `deny` or `cancel`.
    /// Default `ask`.
    #[serde(default)]
    pub default: Verdict,
}

fn default_timeout_ms() -> u64 {
    30_000
}

impl GateConfig {
    /// Whether calls of `tool` are held.
    pub fn holds(&self, tool: &str) -> bool {
        self.tools.iter().any(|t| t == "*" || t == tool)
    }

    /// Refuses a gate under `[sources.NAME]` (when `gate` is set): a source takes no
    /// `control.answer`, so nothing could decide what the gate holds.
    pub fn refuse_on_a_source(
        gate: Option<&GateConfig>,
        options: &crate::Options<'_>,
    ) -> Result<(), crate::Diagnostic> {
        match gate {
            Some(_) => Err(options.error_at(
                "gate",
                "a gate needs answers: declare the component under [outputs.NAME] with the \
                 `inputs` its `control.answer` signals come from",
            )),
            None => Ok(()),
        }
    }

    /// The checks a builder makes: an error names what is wrong, for the user.
    pub fn check(&self) -> Result<(), String> {
        if self.tools.is_empty() {
            return Err("`gate.tools` is empty: name the tools to hold".into());
        }
        if self.timeout_ms == 0 {
            return Err("`gate.timeout_ms` must be at least 1".into());
        }
        Ok(())
    }
}

/// What a `control.answer` says: which approval (`promptId`; absent: the oldest waiting
/// of any agent) and the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The approval it answers (`None`: the oldest waiting one, what a MIDI pad sends).
    pub prompt_id: Option<String>,
    /// The decision (`None`: `cancelled: true`, the gate's default applies).
    pub verdict: Option<Verdict>,
    /// Who decided: the signal's source.
    pub by: String,
}

/// Why a `control.answer` cannot decide anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// `value` is not one of the decisions.
    #[error(
        "`value` must be \"allow\", \"deny\", \"cancel\" (or an agent's own word: \"accept\", \"decline\", \"once\", \"always\", \"reject\"; or `cancelled: true`), not {0}"
    )]
    BadValue(String),
}

/// Reads a `control.answer` signal.
pub fn parse_answer(signal: &Signal) -> Result<Answer, AnswerError> {
    let p = &signal.payload;
    let prompt_id = p.get("promptId").and_then(|v| match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    let verdict = if p.get("cancelled").and_then(Value::as_bool) == Some(true) {
        None
    } else {
        Some(match p.get("value") {
            Some(v) => Verdict::parse(v).ok_or_else(|| AnswerError::BadValue(v.to_string()))?,
            None => return Err(AnswerError::BadValue("nothing".into())),
        })
    };
    Ok(Answer {
        prompt_id,
        verdict,
        by: signal.source.to_string(),
    })
}

/// The reason an agent is given, naming who decided.
pub fn reason(verdict: Verdict, by: &str) -> String {
    format!("patchbay: {} by {by}", verdict.past())
}

/// The reason when no answer came in time.
pub fn timeout_reason(verdict: Verdict, timeout_ms: u64) -> String {
    format!(
        "patchbay: no answer within {timeout_ms} ms, {} by default",
        verdict.past()
    )
}

/// The `approval.requested` payload of `pending`.
pub fn requested_payload(pending: &Pending) -> Object {
    request_payload(
        &pending.prompt_id,
        &pending.agent_id,
        &pending.tool_name,
        pending.input.clone(),
        &pending.choices,
    )
}

/// The `approval.requested` payload: `prompt_id` (what a `control.answer` names), the
/// agent, the tool, what it would run, and the agent's own words for an answer.
pub fn request_payload(
    prompt_id: &str,
    agent_id: &str,
    tool_name: &str,
    input: Value,
    choices: &[String],
) -> Object {
    object! {
        "promptId" => prompt_id,
        "agentId" => agent_id,
        "toolName" => tool_name,
        "input" => input,
        "choices" => choices.to_vec(),
    }
}

/// The `approval.requested` signal of `pending`, from `source`; `details` (the agent's
/// own fields) go to `metadata`.
pub fn requested(source: &str, pending: &Pending, details: Object) -> Signal {
    let mut signal = Signal::new(REQUESTED, source, requested_payload(pending));
    if !details.is_empty() {
        signal.set_metadata(details);
    }
    signal
}

/// The `approval.decided` payload: `prompt_id` was answered `value` (the common word) by
/// `by` (a signal's source, the agent itself, or `timeout`).
pub fn decided_payload(prompt_id: &str, value: Verdict, by: &str) -> Object {
    object! {"promptId" => prompt_id, "value" => value.as_str(), "by" => by}
}

/// The `approval.decided` signal (see [`decided_payload`]).
pub fn decided(source: &str, prompt_id: &str, value: Verdict, by: &str) -> Signal {
    Signal::new(DECIDED, source, decided_payload(prompt_id, value, by))
}

/// How many approvals the board holds at most; past it the oldest is taken off (logged).
const MAX_PENDING: usize = 4096;

/// How many answers' targets are remembered (an answer reaches every agent component it
/// is wired to, each asking for its target once, within moments of each other).
const TARGETS_KEPT: usize = 256;

/// One approval an agent waits on.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    /// The id a `control.answer` names it by.
    pub prompt_id: String,
    /// The component that holds it (the one that acts on its answer).
    pub component: String,
    /// The agent (its session, as in the signals' `agentId`).
    pub agent_id: String,
    /// Which program asks: `claude_code`, `codex`, `gemini_cli`, `opencode`, …
    pub program: String,
    /// The tool or action that waits.
    pub tool_name: String,
    /// What it would run (the tool's input, as the agent gave it).
    pub input: Value,
    /// The words this agent understands for it (beyond the common ones).
    pub choices: Vec<String>,
    /// When it was asked (Unix ms).
    pub requested_at_ms: i64,
}

/// The approvals waiting in one graph.
#[derive(Debug, Default)]
pub struct Approvals {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// By the order they were opened: the first is the oldest.
    pending: BTreeMap<u64, Pending>,
    opened: u64,
    /// Which approval (component, prompt) each recent promptless answer went to, by the
    /// answer's signal id.
    targets: VecDeque<(String, Option<(String, String)>)>,
}

/// What a component does with a control signal it took (see [`Approvals::route`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// Handle this signal (a promptless answer now names the approval it decides).
    Handle(Arc<Signal>),
    /// A promptless answer that decides another component's approval: not for this one.
    Elsewhere,
}

impl Approvals {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts an approval on the board (once: the same component and prompt again changes
    /// nothing) until [`Approvals::close`].
    pub fn open(&self, pending: Pending) {
        let mut inner = self.lock();
        let known = inner
            .pending
            .values()
            .any(|p| p.component == pending.component && p.prompt_id == pending.prompt_id);
        if known {
            return;
        }
        if inner.pending.len() >= MAX_PENDING
            && let Some((_, oldest)) = inner.pending.pop_first()
        {
            // An agent that never says its approvals were decided cannot fill the board.
            tracing::warn!(
                component = %oldest.component,
                prompt = %oldest.prompt_id,
                "{MAX_PENDING} approvals wait: the oldest is taken off the board"
            );
        }
        inner.opened += 1;
        let order = inner.opened;
        inner.pending.insert(order, pending);
    }

    /// Takes `component`'s approval `prompt_id` off the board (decided, or timed out).
    pub fn close(&self, component: &str, prompt_id: &str) {
        self.lock()
            .pending
            .retain(|_, p| !(p.component == component && p.prompt_id == prompt_id));
    }

    /// Takes every approval of `component` off the board (it stopped).
    pub fn close_all(&self, component: &str) {
        self.lock().pending.retain(|_, p| p.component != component);
    }

    /// Keeps the board in step with what an agent component emits: its
    /// `approval.requested` opens an approval, its `approval.decided` closes it.
    pub fn note(&self, component: &str, signal: &Signal) {
        let prompt = || signal.payload.get("promptId").and_then(Value::as_str);
        match signal.kind.as_str() {
            REQUESTED => {
                let Some(prompt_id) = prompt() else { return };
                let text = |key: &str| {
                    signal
                        .payload
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let choices = signal
                    .payload
                    .get("choices")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect();
                let program = signal.source.split(':').next().unwrap_or_default();
                self.open(Pending {
                    prompt_id: prompt_id.to_owned(),
                    component: component.to_owned(),
                    agent_id: text("agentId"),
                    program: program.to_owned(),
                    tool_name: text("toolName"),
                    input: signal.payload.get("input").cloned().unwrap_or(Value::Null),
                    choices,
                    requested_at_ms: signal.timestamp,
                });
            }
            DECIDED => {
                if let Some(prompt_id) = prompt() {
                    self.close(component, prompt_id);
                }
            }
            _ => {}
        }
    }

    /// [`Approvals::note`] for a signal `component` is about to emit, which then says in
    /// `metadata.pendingApprovals` how many approvals of the graph wait after it (what a
    /// pad's LED shows). Signals other than `approval.*` are left as they are.
    pub fn note_emitted(&self, component: &str, signal: &mut Signal) {
        if signal.kind.starts_with("approval.") {
            self.note(component, signal);
            signal
                .metadata_mut()
                .insert("pendingApprovals".into(), self.count().into());
        }
    }

    /// What `component` does with a control signal: a `control.answer` without `promptId`
    /// decides the oldest approval any agent waits on ([`Approvals::target`]), so it is
    /// handled, naming it, by the component that holds it, and by no other; every other
    /// signal is handled as it is.
    pub fn route(&self, component: &str, signal: Arc<Signal>) -> Route {
        let promptless = signal.kind == patchbay_signal::control::ANSWER
            && signal
                .payload
                .get("promptId")
                .is_none_or(|p| p.is_null() || p.as_str() == Some(""));
        if !promptless {
            return Route::Handle(signal);
        }
        let Some((holder, prompt)) = self.target(&signal.id) else {
            // Nothing waits: the component says so in its own way.
            return Route::Handle(signal);
        };
        if holder != component {
            return Route::Elsewhere;
        }
        let mut named = (*signal).clone();
        named
            .payload
            .insert("promptId".into(), Value::String(prompt));
        Route::Handle(Arc::new(named))
    }

    /// How many approvals wait.
    pub fn count(&self) -> usize {
        self.lock().pending.len()
    }

    /// The approvals waiting, oldest first.
    pub fn pending(&self) -> Vec<Pending> {
        self.lock().pending.values().cloned().collect()
    }

    /// Which approval the promptless answer `answer_id` (a signal id) decides, as its
    /// component and prompt: the oldest pending when the first component asked, and the
    /// same for every component that asks after it. `None` when nothing was waiting then.
    pub fn target(&self, answer_id: &str) -> Option<(String, String)> {
        let mut inner = self.lock();
        if let Some((_, target)) = inner.targets.iter().find(|(id, _)| id == answer_id) {
            return target.clone();
        }
        let target = inner
            .pending
            .values()
            .next()
            .map(|p| (p.component.clone(), p.prompt_id.clone()));
        if inner.targets.len() == TARGETS_KEPT {
            inner.targets.pop_front();
        }
        inner
            .targets
            .push_back((answer_id.to_owned(), target.clone()));
        target
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(payload: Object) -> Result<Answer, AnswerError> {
        parse_answer(&Signal::new("control.answer", "sidecar:ui", payload))
    }

    #[test]
    fn answers_read_the_common_words_and_each_agents_own() {
        let a = answer(object! {"promptId" => "toolu_1", "value" => "deny"}).unwrap();
        assert_eq!(a.prompt_id.as_deref(), Some("toolu_1"));
        assert_eq!(a.verdict, Some(Verdict::Deny));
        assert_eq!(a.by, "sidecar:ui");
        let pad = answer(object! {"value" => true}).unwrap();
        assert_eq!((pad.prompt_id, pad.verdict), (None, Some(Verdict::Allow)));
        for (word, verdict) in [
            ("accept", Verdict::Allow),
            ("once", Verdict::Allow),
            ("always", Verdict::Always),
            ("acceptForSession", Verdict::Always),
            ("decline", Verdict::Deny),
            ("reject", Verdict::Deny),
            ("cancel", Verdict::Cancel),
            ("ask", Verdict::Ask),
        ] {
            let a = answer(object! {"value" => word}).unwrap();
            assert_eq!(a.verdict, Some(verdict), "{word}");
        }
        let cancelled = answer(object! {"promptId" => "p", "cancelled" => true}).unwrap();
        assert_eq!(cancelled.verdict, None);
        let err = answer(object! {"value" => "maybe"})
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("not \"maybe\""), "{err}");
        assert!(answer(object! {"promptId" => "p"}).is_err());
    }

    #[test]
    fn the_common_signals_carry_what_a_ui_needs() {
        let p = pending("p1", "codex");
        let s = requested("codex:x", &p, object! {"threadId" => "t"});
        assert_eq!(s.kind, REQUESTED);
        assert_eq!(s.payload.get("promptId"), Some(&Value::from("p1")));
        assert_eq!(s.payload.get("toolName"), Some(&Value::from("Bash")));
        assert_eq!(s.meta("threadId"), Some(&Value::from("t")));
        let d = decided("codex:x", "p1", Verdict::Deny, "sidecar:ui");
        assert_eq!(d.payload.get("value"), Some(&Value::from("deny")));
        assert_eq!(d.payload.get("by"), Some(&Value::from("sidecar:ui")));
    }

    fn pending(prompt: &str, component: &str) -> Pending {
        Pending {
            prompt_id: prompt.into(),
            component: component.into(),
            agent_id: "s1".into(),
            program: "test".into(),
            tool_name: "Bash".into(),
            input: Value::Null,
            choices: Vec::new(),
            requested_at_ms: 0,
        }
    }

    #[test]
    fn a_promptless_answer_goes_to_the_oldest_and_every_component_agrees() {
        let board = Approvals::default();
        assert_eq!(board.target("a0"), None);
        board.open(pending("p1", "codex"));
        board.open(pending("p2", "claude"));
        board.open(pending("p2", "claude"));
        assert_eq!(board.pending().len(), 2, "opened once");
        let to = |component: &str, prompt: &str| Some((component.to_owned(), prompt.to_owned()));
        assert_eq!(board.target("a1"), to("codex", "p1"));
        // The first decided, then the same answer asked again: still p1 (it went there).
        board.close("codex", "p1");
        assert_eq!(board.target("a1"), to("codex", "p1"));
        // A new answer goes to the oldest now waiting.
        assert_eq!(board.target("a2"), to("claude", "p2"));
        assert_eq!(
            board
                .pending()
                .iter()
                .map(|p| p.prompt_id.as_str())
                .collect::<Vec<_>>(),
            ["p2"]
        );
        board.close_all("claude");
        assert!(board.pending().is_empty());
    }

    #[test]
    fn emitted_signals_open_and_close_and_answers_are_routed_to_their_holder() {
        let board = Approvals::default();
        let p = pending("call-1", "codex");
        board.note("codex", &requested("codex:codex", &p, Object::new()));
        board.note(
            "claude",
            &requested(
                "claude_code:claude",
                &pending("call-1", "claude"),
                Object::new(),
            ),
        );
        let listed = board.pending();
        assert_eq!(
            (listed[0].program.as_str(), listed[0].tool_name.as_str()),
            ("codex", "Bash")
        );
        let pad = Arc::new(Signal::new(
            "control.answer",
            "pads",
            object! {"value" => "deny"},
        ));
        // The oldest is codex's: claude passes the answer over, codex gets it named.
        assert_eq!(board.route("claude", Arc::clone(&pad)), Route::Elsewhere);
        let Route::Handle(named) = board.route("codex", Arc::clone(&pad)) else {
            panic!("codex handles it");
        };
        assert_eq!(named.payload.get("promptId"), Some(&Value::from("call-1")));
        // Other signals, and answers naming their prompt, pass as they are.
        let other = Arc::new(Signal::new("control.pause", "pads", Object::new()));
        assert_eq!(
            board.route("claude", Arc::clone(&other)),
            Route::Handle(other)
        );
        board.note(
            "codex",
            &decided("codex:codex", "call-1", Verdict::Deny, "pads"),
        );
        assert_eq!(board.pending().len(), 1);
    }

    #[test]
    fn the_board_is_bounded() {
        let board = Approvals::default();
        for i in 0..MAX_PENDING + 3 {
            board.open(pending(&format!("p{i}"), "c"));
        }
        let pending = board.pending();
        assert_eq!(pending.len(), MAX_PENDING);
        assert_eq!(pending[0].prompt_id, "p3", "the oldest went first");
    }

    #[test]
    fn targets_are_remembered_within_a_bound() {
        let board = Approvals::default();
        board.open(pending("p", "c"));
        for i in 0..TARGETS_KEPT * 3 {
            assert!(board.target(&format!("a{i}")).is_some());
        }
        assert_eq!(board.lock().targets.len(), TARGETS_KEPT);
    }
}
