//! What `opencode serve` sends on `GET /event` to signals.

use std::collections::{BTreeMap, VecDeque};

use patchbay_graph::approvals::{self, Pending, Verdict};
use patchbay_signal::agent_table::AgentTable;
use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::well_known::{
    AgentState, Completion, ErrorPayload, Payload, Severity, TaskDispatch, TextDelta, Thinking,
    TokenUsage, ToolCall, ToolResult, as_count,
};
use patchbay_signal::{Object, Signal, is_informative, millis_of, now_ms, object};
use patchbay_sse::{SseEventRef, SseParser};
use serde_json::Value;

/// Which program asks, on the approvals board.
pub const PROGRAM: &str = "opencode";

/// `approval.decided`'s `by` when patchbay did not send the answer: the decision came
/// through OpenCode (its `permission.replied` says what was answered, not who answered).
const BY: &str = "opencode";

/// The words `POST /permission/{id}/reply` accepts, as `approval.requested`'s `choices`.
pub const CHOICES: [&str; 3] = ["once", "always", "reject"];

/// Event types that are OpenCode's own housekeeping, marked `metadata.internal = true`.
pub const INTERNAL_EVENTS: [&str; 5] = [
    "plugin.added",
    "catalog.updated",
    "reference.updated",
    "integration.updated",
    "server.heartbeat",
];

/// How many sessions' states are remembered (a server has a few live at a time; the
/// bound only guards against one that never ends).
const MAX_TRACKED_SESSIONS: usize = 64;

/// How many parts (text, reasoning, tools) and messages are remembered.
const MAX_TRACKED_PARTS: usize = 256;

/// How many unanswered permissions are remembered.
const MAX_PENDING: usize = 256;

/// A permission OpenCode asked for (`permission.asked`) and that has not been answered
/// yet: answer it with [`crate::reply`] (`POST /permission/{id}/reply`).
#[derive(Debug, Clone, PartialEq)]
pub struct PendingPermission {
    /// Its id (`per_…`): the signals' `promptId`, the path segment of the reply.
    pub id: String,
    /// The session that waits (`sessionID`).
    pub session_id: String,
    /// What is asked (`permission`: the tool, e.g. `bash`).
    pub permission: String,
    /// What it would run (`patterns`, e.g. the command line).
    pub patterns: Vec<String>,
    /// What `always` would allow from now on (`always`, e.g. `echo *`).
    pub always: Vec<String>,
    /// The message of the tool call it is about (`tool.messageID`).
    pub message_id: Option<String>,
    /// The tool call it is about (`tool.callID`).
    pub call_id: Option<String>,
    /// Its entry for the graph's approvals board (what `approval.requested` says;
    /// `component` is the decoder's source).
    pub approval: Pending,
}

/// What the decoder keeps of one session besides its state.
#[derive(Debug, Clone, Default)]
struct Session {
    /// The model of its last assistant message (`modelID`).
    model: Option<String>,
    /// The user message being answered (the task), until the session goes idle.
    turn: Option<String>,
    /// The turn ran into a `session.error`.
    failed: bool,
    /// The last assistant text part of the turn: the completion's result.
    last_text: Option<String>,
}

/// What kind of part a part id is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartKind {
    Text,
    Reasoning,
    Tool,
}

/// A part the decoder has seen.
#[derive(Debug, Clone)]
struct Part {
    id: String,
    session: String,
    kind: PartKind,
    /// Text and reasoning parts: the text sent out so far (deltas, or what an update
    /// added).
    text: String,
    /// Tool parts: the call was announced (`tool_call`).
    announced: bool,
    /// Tool parts: the call ended (`tool_result`).
    done: bool,
}

/// What one event is about: its session (agent), message and time.
#[derive(Debug, Clone)]
struct Ctx {
    session: String,
    agent: String,
    message: Option<String>,
    ts: i64,
}

/// Decodes OpenCode's `/event` messages (`{id, type, properties}`, the JSON of each SSE
/// `data:` field) into signals (see the crate docs). It tracks each session's state, the
/// parts streaming, the tool calls announced and the permissions still unanswered.
#[derive(Debug, Clone)]
pub struct EventDecoder {
    source: String,
    /// Each session's state; the current one is the last session seen, the agent of an
    /// event that names none.
    sessions: AgentTable<Session>,
    parts: VecDeque<Part>,
    /// Message id → role (`user`, `assistant`).
    roles: VecDeque<(String, String)>,
    pending: BTreeMap<String, PendingPermission>,
    /// Who answered a permission through patchbay (its id, the answer's source), until
    /// OpenCode says it was answered: `approval.decided`'s `by`.
    answered_by: VecDeque<(String, String)>,
    last_timestamp: i64,
}

impl EventDecoder {
    /// A decoder whose signals come from `source`.
    pub fn new(source: impl Into<String>) -> Self {
        EventDecoder {
            source: source.into(),
            sessions: AgentTable::new(MAX_TRACKED_SESSIONS),
            parts: VecDeque::new(),
            roles: VecDeque::new(),
            pending: BTreeMap::new(),
            answered_by: VecDeque::new(),
            last_timestamp: 0,
        }
    }

    /// The source name of the signals.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The session ids seen (their `sessionID`), first seen first.
    pub fn sessions(&self) -> impl Iterator<Item = &str> {
        self.sessions.agents().filter(|s| !s.is_empty())
    }

    /// The last session seen (the `agentId` of an event that names none; the session a
    /// control without `sessionId` is for).
    pub fn current_session(&self) -> Option<&str> {
        self.sessions.current()
    }

    /// The state of `session` as the signals told it (`None` for a session not seen).
    pub fn state(&self, session: &str) -> Option<AgentState> {
        self.sessions.state(session)
    }

    /// The permissions asked and not yet answered, by id.
    pub fn pending(&self) -> impl Iterator<Item = &PendingPermission> {
        self.pending.values()
    }

    /// Removes the pending permission `id` (to answer it).
    pub fn take_pending(&mut self, id: &str) -> Option<PendingPermission> {
        self.pending.remove(id)
    }

    /// Notes that permission `id` is being answered by `by` (a `control.answer`'s source,
    /// or `timeout`): the `approval.decided` of its `permission.replied` names it as `by`
    /// instead of `opencode` (which says only that OpenCode was answered, not by whom).
    pub fn answered(&mut self, id: &str, by: &str) {
        self.answered_by.retain(|(known, _)| known != id);
        if self.answered_by.len() >= MAX_PENDING {
            self.answered_by.pop_front();
        }
        self.answered_by.push_back((id.to_owned(), by.to_owned()));
    }

    /// Decodes the text of one SSE `data:` field: JSON, else a counted bad input.
    pub fn decode_text(&mut self, text: &str, out: &mut Vec<Decoded>) {
        match serde_json::from_str::<Value>(text) {
            Ok(value) => self.event(&value, out),
            Err(e) => out.push(self.bad(text, &format!("an OpenCode event must be JSON: {e}"))),
        }
    }

    /// Decodes one `/event` message: `{id, type, properties}`. One that is not an object
    /// with a string `type` (and an object `properties`, if any) is a counted bad input.
    pub fn event(&mut self, data: &Value, out: &mut Vec<Decoded>) {
        let Value::Object(obj) = data else {
            out.push(self.bad(&data.to_string(), "an OpenCode event must be a JSON object"));
            return;
        };
        let Some(kind) = obj.get("type").and_then(Value::as_str) else {
            out.push(self.bad(&data.to_string(), "an OpenCode event needs a string `type`"));
            return;
        };
        let props = match obj.get("properties") {
            None | Some(Value::Null) => Object::new(),
            Some(Value::Object(p)) => p.clone(),
            Some(_) => {
                out.push(self.bad(
                    &data.to_string(),
                    "an OpenCode event's `properties` must be an object",
                ));
                return;
            }
        };
        let start = out.len();
        let ts = self.time_of(obj, &props);
        self.dispatch(kind, props, ts, out);
        if let Some(Decoded::Signal(last)) = out[start..].iter().rev().find(|d| !d.is_bad()) {
            self.last_timestamp = last.timestamp;
        }
    }

    fn dispatch(&mut self, kind: &str, props: Object, ts: i64, out: &mut Vec<Decoded>) {
        let session = session_of(&props).or_else(|| {
            // `session.created` / `updated` / `deleted`: the session is the `info`.
            kind.starts_with("session.")
                .then(|| nested_str(&props, "info", "id"))
                .flatten()
        });
        if let Some(session) = &session {
            self.sessions.set_current(session);
        }
        let mut ctx = self.ctx(session, ts);
        let handled = match kind {
            "message.part.delta" => {
                ctx.message = str_of(&props, "messageID");
                self.delta(&ctx, &props, out)
            }
            "message.part.updated" => match props.get("part") {
                Some(Value::Object(part)) => {
                    ctx.message = str_of(part, "messageID");
                    self.part_updated(&ctx, part, out)
                }
                _ => false,
            },
            "message.updated" => {
                if let Some(Value::Object(info)) = props.get("info") {
                    ctx.message = str_of(info, "id");
                    self.message_updated(&ctx, info);
                }
                false
            }
            "session.status" => {
                ctx.message = self.turn_of(&ctx.session);
                self.status(&ctx, &props, out)
            }
            "session.idle" => {
                ctx.message = self.turn_of(&ctx.session);
                self.idle(&ctx, "idle", out)
            }
            "session.error" => {
                ctx.message = self.turn_of(&ctx.session);
                self.session_error(&ctx, &props, out)
            }
            "permission.asked" => self.permission_asked(&mut ctx, &props, out),
            "permission.replied" => self.permission_replied(&mut ctx, &props, out),
            _ => false,
        };
        if !handled {
            let mut signal = Signal::new(format!("opencode.{kind}"), &self.source, props);
            if INTERNAL_EVENTS.contains(&kind) {
                signal = signal.with_meta("internal", true);
            }
            out.push(self.finish(&ctx, signal));
        }
    }

    // ---- parts -----------------------------------------------------------------------

    fn delta(&mut self, ctx: &Ctx, props: &Object, out: &mut Vec<Decoded>) -> bool {
        let (Some(delta), Some("text")) = (
            props.get("delta").and_then(Value::as_str),
            props.get("field").and_then(Value::as_str),
        ) else {
            return false;
        };
        let part_id = str_of(props, "partID").unwrap_or_default();
        let kind = match self.part(&part_id) {
            Some(p) => p.kind,
            None => {
                self.remember_part(&part_id, &ctx.session, PartKind::Text);
                PartKind::Text
            }
        };
        if !matches!(kind, PartKind::Text | PartKind::Reasoning) {
            return false;
        }
        let mut text = None;
        if let Some(part) = self.part_mut(&part_id) {
            part.text.push_str(delta);
            text = Some(part.text.clone());
        }
        if kind == PartKind::Text {
            self.sessions.get_mut(&ctx.session).last_text = text;
        }
        let signal = self.text_signal(ctx, kind, delta, &part_id);
        out.push(self.finish(ctx, signal));
        true
    }

    fn part_updated(&mut self, ctx: &Ctx, part: &Object, out: &mut Vec<Decoded>) -> bool {
        let id = str_of(part, "id").unwrap_or_default();
        match part.get("type").and_then(Value::as_str) {
            Some("text") => self.text_part(ctx, &id, part, PartKind::Text, out),
            Some("reasoning") => self.text_part(ctx, &id, part, PartKind::Reasoning, out),
            Some("tool") => self.tool_part(ctx, &id, part, out),
            Some("step-start") => self
                .transition(ctx, AgentState::Thinking, Some("step started"))
                .map(|change| out.push(change))
                .is_some(),
            Some("step-finish") => self.step_finish(ctx, part, out),
            _ => false,
        }
    }

    /// A text or reasoning part's update: what it adds to what went out as deltas (a
    /// user's text: the task), else nothing (it passes as `opencode.message.part.updated`).
    fn text_part(
        &mut self,
        ctx: &Ctx,
        id: &str,
        part: &Object,
        kind: PartKind,
        out: &mut Vec<Decoded>,
    ) -> bool {
        let text = part.get("text").and_then(Value::as_str).unwrap_or("");
        if self.part(id).is_none() {
            self.remember_part(id, &ctx.session, kind);
        }
        let role = ctx.message.as_deref().and_then(|m| self.role(m));
        if role == Some("user") {
            return kind == PartKind::Text && self.user_text(ctx, text, out);
        }
        let sent = self.part(id).map(|p| p.text.len()).unwrap_or(0);
        let added = match self.part(id) {
            Some(p) if text.len() > sent && text.starts_with(p.text.as_str()) => &text[sent..],
            _ => return false,
        };
        let added = added.to_owned();
        if let Some(p) = self.part_mut(id) {
            p.text.push_str(&added);
        }
        if kind == PartKind::Text {
            self.sessions.get_mut(&ctx.session).last_text = Some(text.to_owned());
        }
        let signal = self.text_signal(ctx, kind, &added, id);
        out.push(self.finish(ctx, signal));
        true
    }

    /// The first text of a user message: `task_dispatch` (once per message).
    fn user_text(&mut self, ctx: &Ctx, text: &str, out: &mut Vec<Decoded>) -> bool {
        let Some(message) = ctx.message.clone() else {
            return false;
        };
        let session = self.sessions.get_mut(&ctx.session);
        if text.is_empty() || session.turn.as_deref() == Some(message.as_str()) {
            return false;
        }
        session.turn = Some(message.clone());
        session.failed = false;
        session.last_text = None;
        let signal = TaskDispatch {
            task_id: message,
            from: "user".into(),
            to: ctx.agent.clone(),
            description: Some(text.to_owned()),
        }
        .into_signal(&self.source);
        out.push(self.finish(ctx, signal));
        true
    }

    fn text_signal(&self, ctx: &Ctx, kind: PartKind, content: &str, part_id: &str) -> Signal {
        let signal = if kind == PartKind::Reasoning {
            Thinking {
                agent_id: ctx.agent.clone(),
                content: content.to_owned(),
            }
            .into_signal(&self.source)
        } else {
            TextDelta {
                agent_id: ctx.agent.clone(),
                content: content.to_owned(),
                content_type: None,
                index: None,
            }
            .into_signal(&self.source)
        };
        if part_id.is_empty() {
            signal
        } else {
            signal.with_meta("partId", part_id)
        }
    }

    fn tool_part(&mut self, ctx: &Ctx, id: &str, part: &Object, out: &mut Vec<Decoded>) -> bool {
        let Some(tool) = part.get("tool").and_then(Value::as_str) else {
            return false;
        };
        let state = part.get("state").and_then(Value::as_object);
        let status = state
            .and_then(|s| s.get("status"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let input = match state.and_then(|s| s.get("input")) {
            Some(Value::Object(input)) => input.clone(),
            _ => Object::new(),
        };
        // Keyed by the part id: the model's `callID`s repeat across messages.
        let key = if id.is_empty() {
            str_of(part, "callID").unwrap_or_default()
        } else {
            id.to_owned()
        };
        if self.part(&key).is_none() {
            self.remember_part(&key, &ctx.session, PartKind::Tool);
        }
        let (announced, done) = self
            .part(&key)
            .map_or((false, false), |p| (p.announced, p.done));
        if done {
            return false;
        }
        let call_id = str_of(part, "callID");
        match status {
            // `pending` comes with an empty input (the model is still writing it): the
            // call is announced when its input is there.
            "pending" | "running" if !announced && (status == "running" || !input.is_empty()) => {
                self.tool_call(ctx, &key, tool, call_id, input, out);
                if status == "running" {
                    let reason = format!("running {tool}");
                    out.extend(self.transition(ctx, AgentState::Acting, Some(&reason)));
                }
                true
            }
            "running" if self.sessions.state_of(&ctx.session) == AgentState::Thinking => {
                let reason = format!("running {tool}");
                self.transition(ctx, AgentState::Acting, Some(&reason))
                    .map(|change| out.push(change))
                    .is_some()
            }
            "completed" | "error" => {
                if !announced {
                    self.tool_call(ctx, &key, tool, call_id.clone(), input, out);
                }
                if let Some(p) = self.part_mut(&key) {
                    p.done = true;
                }
                let state = state.cloned().unwrap_or_default();
                let success = status == "completed";
                let mut output = Object::new();
                let mut used = vec!["status", "input"];
                if success {
                    if let Some(v) = state.get("output").filter(|v| !v.is_null()) {
                        output.insert("output".into(), v.clone());
                    }
                    if let Some(exit) = state.get("metadata").and_then(|m| m.get("exit"))
                        && !exit.is_null()
                    {
                        output.insert("exitCode".into(), exit.clone());
                    }
                    used.push("output");
                } else {
                    let error = state.get("error").cloned().unwrap_or(Value::Null);
                    output.insert("error".into(), error);
                    used.push("error");
                }
                let mut signal = ToolResult {
                    tool_name: tool.to_owned(),
                    agent_id: ctx.agent.clone(),
                    call_id,
                    success,
                    output: Some(output),
                }
                .into_signal(&self.source)
                .with_meta("partId", key.as_str());
                let rest = rest_of(&state, &used);
                if !rest.is_empty() {
                    signal = signal.with_meta("opencode", Value::Object(rest));
                }
                out.push(self.finish(ctx, signal));
                if !self.calls_running(&ctx.session) {
                    out.extend(self.transition(
                        ctx,
                        AgentState::Thinking,
                        Some(&format!("{tool} {status}")),
                    ));
                }
                true
            }
            _ => false,
        }
    }

    fn tool_call(
        &mut self,
        ctx: &Ctx,
        key: &str,
        tool: &str,
        call_id: Option<String>,
        input: Object,
        out: &mut Vec<Decoded>,
    ) {
        if let Some(p) = self.part_mut(key) {
            p.announced = true;
        }
        let signal = ToolCall {
            tool_name: tool.to_owned(),
            agent_id: ctx.agent.clone(),
            call_id,
            input: Some(input),
        }
        .into_signal(&self.source)
        .with_meta("partId", key);
        out.push(self.finish(ctx, signal));
    }

    /// Whether a tool call of `session` is announced and not ended.
    fn calls_running(&self, session: &str) -> bool {
        self.parts
            .iter()
            .any(|p| p.session == session && p.kind == PartKind::Tool && p.announced && !p.done)
    }

    fn step_finish(&mut self, ctx: &Ctx, part: &Object, out: &mut Vec<Decoded>) -> bool {
        let Some(Value::Object(tokens)) = part.get("tokens") else {
            return false;
        };
        let n = |k: &str| tokens.get(k).and_then(as_count).unwrap_or(0);
        let cost = part
            .get("cost")
            .and_then(Value::as_f64)
            .filter(|c| c.is_finite() && *c >= 0.0);
        let model = self.sessions.get_mut(&ctx.session).model.clone();
        let mut signal = TokenUsage {
            agent_id: ctx.agent.clone(),
            prompt_tokens: n("input"),
            completion_tokens: n("output"),
            model,
            cost,
        }
        .into_signal(&self.source);
        let mut meta = rest_of(tokens, &["input", "output"]);
        if let Some(reason) = part.get("reason").filter(|v| is_informative(v)) {
            meta.insert("reason".into(), reason.clone());
        }
        signal.set_metadata(meta);
        out.push(self.finish(ctx, signal));
        true
    }

    // ---- messages and sessions -------------------------------------------------------

    fn message_updated(&mut self, ctx: &Ctx, info: &Object) {
        let (Some(id), Some(role)) = (str_of(info, "id"), str_of(info, "role")) else {
            return;
        };
        if role == "assistant" {
            let idle = self.sessions.state_of(&ctx.session) == AgentState::Idle;
            let session = self.sessions.get_mut(&ctx.session);
            if let Some(model) = str_of(info, "modelID") {
                session.model = Some(model);
            }
            // A turn whose user message was not seen: the one this answers (not after the
            // session went idle: a late update of a finished message starts nothing).
            if session.turn.is_none() && !idle {
                session.turn = str_of(info, "parentID");
            }
        }
        if !self.roles.iter().any(|(m, _)| *m == id) {
            if self.roles.len() >= MAX_TRACKED_PARTS {
                self.roles.pop_front();
            }
            self.roles.push_back((id, role));
        }
    }

    fn status(&mut self, ctx: &Ctx, props: &Object, out: &mut Vec<Decoded>) -> bool {
        let Some(Value::Object(status)) = props.get("status") else {
            return false;
        };
        match status.get("type").and_then(Value::as_str) {
            Some("busy") => match self.sessions.state_of(&ctx.session) {
                AgentState::Idle | AgentState::Done | AgentState::Error => self
                    .transition(ctx, AgentState::Thinking, Some("busy"))
                    .map(|change| out.push(change))
                    .is_some(),
                _ => false,
            },
            Some("idle") => self.idle(ctx, "idle", out),
            Some("retry") => {
                let message = status
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("retrying");
                let mut signal = ErrorPayload {
                    agent_id: Some(ctx.agent.clone()),
                    code: Some("retry".into()),
                    message: message.to_owned(),
                    severity: Severity::Warning,
                }
                .into_signal(&self.source);
                let rest = rest_of(status, &["type", "message"]);
                if !rest.is_empty() {
                    signal = signal.with_meta("opencode", Value::Object(rest));
                }
                out.push(self.finish(ctx, signal));
                true
            }
            _ => false,
        }
    }

    /// The session is idle: the turn's `completion` (if one was in progress) and `→idle`;
    /// nothing when it is idle already.
    fn idle(&mut self, ctx: &Ctx, reason: &str, out: &mut Vec<Decoded>) -> bool {
        if self.sessions.state_of(&ctx.session) == AgentState::Idle {
            return false;
        }
        let session = self.sessions.get_mut(&ctx.session);
        if let Some(task_id) = session.turn.take() {
            let success = !std::mem::take(&mut session.failed);
            let result = session.last_text.take();
            let signal = Completion {
                task_id,
                agent_id: Some(ctx.agent.clone()),
                success,
                result,
            }
            .into_signal(&self.source);
            out.push(self.finish(ctx, signal));
        }
        out.extend(self.transition(ctx, AgentState::Idle, Some(reason)));
        true
    }

    fn session_error(&mut self, ctx: &Ctx, props: &Object, out: &mut Vec<Decoded>) -> bool {
        let error = props.get("error");
        let name = error.and_then(|e| e.get("name")).and_then(Value::as_str);
        let message = error
            .and_then(|e| e.get("data"))
            .and_then(|d| d.get("message"))
            .and_then(Value::as_str)
            .or_else(|| error.and_then(|e| e.get("message")).and_then(Value::as_str))
            .or(name)
            .unwrap_or("session error");
        let mut signal = ErrorPayload {
            agent_id: Some(ctx.agent.clone()),
            code: name.map(str::to_owned),
            message: message.to_owned(),
            severity: Severity::Error,
        }
        .into_signal(&self.source);
        if let Some(error) = error.filter(|e| is_informative(e)) {
            signal = signal.with_meta("opencode", error.clone());
        }
        out.push(self.finish(ctx, signal));
        if !ctx.session.is_empty() {
            self.sessions.get_mut(&ctx.session).failed = true;
        }
        out.extend(self.transition(ctx, AgentState::Error, name.or(Some("session error"))));
        true
    }

    // ---- permissions -----------------------------------------------------------------

    fn permission_asked(&mut self, ctx: &mut Ctx, props: &Object, out: &mut Vec<Decoded>) -> bool {
        let (Some(id), Some(permission)) = (str_of(props, "id"), str_of(props, "permission"))
        else {
            return false;
        };
        if self.pending.contains_key(&id) {
            // Asked already (a transport that listed the waiting permissions, then saw
            // the event): nothing new.
            return false;
        }
        let tool = props.get("tool").and_then(Value::as_object);
        let message_id = tool.and_then(|t| str_of(t, "messageID"));
        let call_id = tool.and_then(|t| str_of(t, "callID"));
        if message_id.is_some() {
            ctx.message = message_id.clone();
        }
        let strings = |key: &str| -> Vec<String> {
            props
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        // What it would run: the tool's details (`metadata`: the command), and the
        // patterns asked for and those `always` would allow.
        let mut input = match props.get("metadata") {
            Some(Value::Object(m)) => m.clone(),
            _ => Object::new(),
        };
        for key in ["patterns", "always"] {
            if let Some(v) = props.get(key).filter(|v| is_informative(v)) {
                input.insert(key.into(), v.clone());
            }
        }
        out.extend(self.transition(ctx, AgentState::Waiting, Some("permission asked")));
        let approval = Pending {
            prompt_id: id.clone(),
            component: self.source.clone(),
            agent_id: ctx.agent.clone(),
            program: PROGRAM.to_owned(),
            tool_name: permission.clone(),
            input: Value::Object(input),
            choices: CHOICES.iter().map(|c| (*c).to_owned()).collect(),
            requested_at_ms: ctx.ts,
        };
        let signal = approvals::requested(
            &self.source,
            &approval,
            object! { "opencode" => Value::Object(props.clone()) },
        );
        if self.pending.len() >= MAX_PENDING
            && let Some(oldest) = self.pending.keys().next().cloned()
        {
            self.pending.remove(&oldest);
        }
        self.pending.insert(
            id.clone(),
            PendingPermission {
                id,
                session_id: ctx.session.clone(),
                permission,
                patterns: strings("patterns"),
                always: strings("always"),
                message_id,
                call_id,
                approval,
            },
        );
        out.push(self.finish(ctx, signal));
        true
    }

    fn permission_replied(
        &mut self,
        ctx: &mut Ctx,
        props: &Object,
        out: &mut Vec<Decoded>,
    ) -> bool {
        let (Some(id), Some(reply)) = (
            str_of(props, "requestID").or_else(|| str_of(props, "permissionID")),
            str_of(props, "reply").or_else(|| str_of(props, "response")),
        ) else {
            return false;
        };
        let pending = self.pending.remove(&id);
        if let Some(message) = pending.as_ref().and_then(|p| p.message_id.clone()) {
            ctx.message = Some(message);
        }
        let by = match self.answered_by.iter().position(|(known, _)| *known == id) {
            Some(at) => self.answered_by.remove(at).map(|(_, by)| by),
            None => None,
        };
        let by = by.as_deref().unwrap_or(BY);
        let verdict = Verdict::parse(&Value::from(reply.as_str()));
        let payload = match verdict {
            Some(verdict) => approvals::decided_payload(&id, verdict, by),
            None => object! { "promptId" => id.as_str(), "value" => reply.as_str(), "by" => by },
        };
        let signal = Signal::new(approvals::DECIDED, &self.source, payload)
            .with_meta("reply", reply.as_str());
        out.push(self.finish(ctx, signal));
        let reason = format!("permission {reply}");
        match verdict {
            Some(Verdict::Allow | Verdict::Always) => {
                out.extend(self.transition(ctx, AgentState::Acting, Some(&reason)));
            }
            _ if self.sessions.state_of(&ctx.session) == AgentState::Waiting => {
                out.extend(self.transition(ctx, AgentState::Thinking, Some(&reason)));
            }
            _ => {}
        }
        true
    }

    // ---- state -----------------------------------------------------------------------

    /// The time of an event: its `properties.time` (ms) when it has one, else the time
    /// its id carries (see [`id_time`]), else now.
    fn time_of(&self, event: &Object, props: &Object) -> i64 {
        if let Some(ms) = props.get("time").and_then(millis_of) {
            return ms;
        }
        let reference = if self.last_timestamp > 0 {
            self.last_timestamp
        } else {
            now_ms()
        };
        event
            .get("id")
            .and_then(Value::as_str)
            .and_then(|id| id_time(id, reference))
            .unwrap_or_else(now_ms)
    }

    fn ctx(&self, session: Option<String>, ts: i64) -> Ctx {
        let session = session
            .or_else(|| self.sessions.current().map(str::to_owned))
            .unwrap_or_default();
        Ctx {
            agent: if session.is_empty() {
                self.source.clone()
            } else {
                session.clone()
            },
            session,
            message: None,
            ts,
        }
    }

    fn turn_of(&self, session: &str) -> Option<String> {
        self.sessions.get(session).and_then(|s| s.turn.clone())
    }

    /// The `agent_state_change` to `to` from the session's last state; `None` if it is
    /// there already.
    fn transition(&mut self, ctx: &Ctx, to: AgentState, reason: Option<&str>) -> Option<Decoded> {
        let change = self
            .sessions
            .transition(&ctx.session, &ctx.agent, to, reason)?;
        Some(self.finish(ctx, change.into_signal(&self.source)))
    }

    fn role(&self, message: &str) -> Option<&str> {
        self.roles
            .iter()
            .find(|(m, _)| m == message)
            .map(|(_, r)| r.as_str())
    }

    fn part(&self, id: &str) -> Option<&Part> {
        self.parts.iter().find(|p| p.id == id)
    }

    fn part_mut(&mut self, id: &str) -> Option<&mut Part> {
        self.parts.iter_mut().find(|p| p.id == id)
    }

    fn remember_part(&mut self, id: &str, session: &str, kind: PartKind) {
        if let Some(i) = self.parts.iter().position(|p| p.id == id) {
            self.parts.remove(i);
        }
        if self.parts.len() >= MAX_TRACKED_PARTS {
            self.parts.pop_front();
        }
        self.parts.push_back(Part {
            id: id.to_owned(),
            session: session.to_owned(),
            kind,
            text: String::new(),
            announced: false,
            done: false,
        });
    }

    fn finish(&self, ctx: &Ctx, signal: Signal) -> Decoded {
        let signal = signal.at(ctx.ts);
        Decoded::Signal(match &ctx.message {
            Some(message) => signal.correlated(message.as_str()),
            None => signal,
        })
    }

    /// The counted bad-input `error` signal for `raw`, at the time of the last signal.
    pub fn bad(&self, raw: &str, message: &str) -> Decoded {
        let signal = bad_input_signal(&self.source, self.last_timestamp, raw, message);
        Decoded::BadInput(signal)
    }
}

/// The byte-stream form of [`EventDecoder`]: the raw SSE of `GET /event`, each event's
/// `data` read by [`EventDecoder::decode_text`]. An event too large for the parser is a
/// counted bad input.
#[derive(Debug, Clone)]
pub struct EventStream {
    parser: SseParser,
    decoder: EventDecoder,
}

impl EventStream {
    /// Drives `decoder` over raw SSE.
    pub fn new(decoder: EventDecoder) -> Self {
        EventStream {
            parser: SseParser::new(),
            decoder,
        }
    }

    /// The decoder inside.
    pub fn decoder(&self) -> &EventDecoder {
        &self.decoder
    }

    /// The decoder inside, mutably (to take a pending permission and answer it).
    pub fn decoder_mut(&mut self) -> &mut EventDecoder {
        &mut self.decoder
    }

    /// The last SSE event id (OpenCode sends none today), for `Last-Event-ID`.
    pub fn last_event_id(&self) -> Option<&str> {
        self.parser.last_event_id()
    }

    fn overflow(&mut self, out: &mut Vec<Decoded>) {
        if self.parser.take_overflow() {
            out.push(
                self.decoder
                    .bad("", "an SSE line or event too large was dropped"),
            );
        }
    }
}

fn decode_event(decoder: &mut EventDecoder, event: SseEventRef<'_>, out: &mut Vec<Decoded>) {
    decoder.decode_text(event.data, out);
}

impl StreamDecoder for EventStream {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let decoder = &mut self.decoder;
        self.parser
            .feed_ref(bytes, |event| decode_event(decoder, event, out));
        self.overflow(out);
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let decoder = &mut self.decoder;
        self.parser
            .finish_ref(|event| decode_event(decoder, event, out));
        self.overflow(out);
    }
}

// ---- helpers -----------------------------------------------------------------------

/// The time an OpenCode id carries, in Unix ms, taking the one nearest to `reference`.
///
/// OpenCode's ascending ids (`evt_…`, `msg_…`, `prt_…`, `per_…`) are the prefix, `_`, 12
/// hex digits of `(ms × 4096 + counter) mod 2^48`, then random characters: the digits
/// give the time modulo 2^36 ms (about 795 days).
pub fn id_time(id: &str, reference: i64) -> Option<i64> {
    let (_, rest) = id.split_once('_')?;
    let hex = rest.get(..12)?;
    if rest.len() <= 12 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let value = i64::from_str_radix(hex, 16).ok()?;
    const PERIOD: i64 = 1 << 36;
    let low = value >> 12;
    let base = reference - reference.rem_euclid(PERIOD) + low;
    let best = [base - PERIOD, base, base + PERIOD]
        .into_iter()
        .min_by_key(|t| (t - reference).abs())?;
    (best > 0).then_some(best)
}

/// The session an event is about: `sessionID`, or that of its `info` or `part`.
fn session_of(props: &Object) -> Option<String> {
    str_of(props, "sessionID")
        .or_else(|| nested_str(props, "part", "sessionID"))
        .or_else(|| nested_str(props, "info", "sessionID"))
        .filter(|s| !s.is_empty())
}

fn nested_str(obj: &Object, outer: &str, key: &str) -> Option<String> {
    obj.get(outer)
        .and_then(|o| o.get(key))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn str_of(obj: &Object, key: &str) -> Option<String> {
    obj.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The fields of `obj` not named in `used` that carry something.
fn rest_of(obj: &Object, used: &[&str]) -> Object {
    obj.iter()
        .filter(|(k, v)| !used.contains(&k.as_str()) && is_informative(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
