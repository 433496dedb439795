//! The well-known signal types: typed payloads and their validation.
//!
//! The payload schemas are those of sajou's `signal.schema.json`. Validation is typed code,
//! not a JSON Schema engine: [`check`] says whether a payload is valid for its type, and
//! [`repair`] makes any signal of a well-known type valid without losing anything (extra
//! fields move to `metadata.extra`; what cannot be repaired becomes `invalid.<type>`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::ops::Range;

use crate::payload::KeySet;
use crate::{LazyObject, Object, Signal, SmallString};

/// A payload type with a well-known signal type.
pub trait Payload: Serialize {
    /// The signal `type` this payload belongs to.
    const KIND: &'static str;

    /// The payload as a JSON object.
    fn into_object(self) -> Object
    where
        Self: Sized,
    {
        match serde_json::to_value(self) {
            Ok(Value::Object(map)) => map,
            _ => Object::new(),
        }
    }

    /// A signal of this type from `source`, with a fresh id and the current time.
    fn into_signal(self, source: impl Into<SmallString>) -> Signal
    where
        Self: Sized,
    {
        Signal::new(Self::KIND, source, self.into_object())
    }
}

/// The state of an agent, as in `agent_state_change`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentState {
    /// No task.
    Idle,
    /// Processing or reasoning.
    Thinking,
    /// Executing a tool or an action.
    Acting,
    /// Blocked on external input (an approval, a user answer).
    Waiting,
    /// Task completed.
    Done,
    /// Failed.
    Error,
}

/// Severity of an `error` signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Subtle: something recoverable (a retry, a bad frame).
    Warning,
    /// An error.
    Error,
    /// A failure that needs attention now.
    Critical,
}

/// What a value of a [`Kind`] must be, as the reasons say it (see [`describe`]).
macro_rules! must_be {
    (Str) => {
        "a string"
    };
    (Bool) => {
        "a boolean"
    };
    (Count) => {
        "an integer >= 0"
    };
    (Amount) => {
        "a number >= 0"
    };
    (Obj) => {
        "an object"
    };
    (State) => {
        "one of idle, thinking, acting, waiting, done, error"
    };
    (Severity) => {
        "one of warning, error, critical"
    };
    (ContentType) => {
        "one of text, code, markdown"
    };
    (Position) => {
        "an object {x, y}"
    };
    (Bounds) => {
        "an object {x, y, w >= 0, h >= 0}"
    };
}

/// The [`Field`] `name` of kind `kind`, with its reasons.
macro_rules! field {
    ($name:literal, $kind:ident, $required:expr) => {
        Field {
            name: $name,
            kind: Kind::$kind,
            required: $required,
            missing: concat!("missing required field `", $name, "`"),
            wrong: concat!("field `", $name, "` must be ", must_be!($kind)),
        }
    };
}

/// A required [`Field`] (see [`field!`]).
macro_rules! req {
    ($name:literal, $kind:ident) => {
        field!($name, $kind, true)
    };
}

/// An optional [`Field`] (see [`field!`]).
macro_rules! opt {
    ($name:literal, $kind:ident) => {
        field!($name, $kind, false)
    };
}

/// A well-known payload, declared once: the struct (its fields, their JSON names) and the
/// schema [`check`] and [`repair`] read (each field's kind; `Option` fields are optional).
macro_rules! payload {
    ($(#[$doc:meta])* $name:ident = $kind:literal { $($(#[$fdoc:meta])* $field:ident : $ty:ty => $json:literal as $fkind:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $(
                $(#[$fdoc])*
                #[serde(rename = $json)]
                #[serde(skip_serializing_if = "is_absent")]
                pub $field: $ty,
            )*
        }
        impl Payload for $name {
            const KIND: &'static str = $kind;
        }
        impl $name {
            /// The schema of the payload's fields, in order.
            const FIELDS: &'static [Field] =
                &[$(field!($json, $fkind, <$ty as Absent>::REQUIRED)),*];
        }
    };
}

/// Trait used by `skip_serializing_if` so that `Option::None` fields are omitted while
/// required fields are always written, and by the schema to tell which fields are required.
trait Absent {
    /// Whether the schema requires the field (all but `Option` fields).
    const REQUIRED: bool = true;

    fn absent(&self) -> bool {
        false
    }
}
impl<T> Absent for Option<T> {
    const REQUIRED: bool = false;

    fn absent(&self) -> bool {
        self.is_none()
    }
}
impl Absent for String {}
impl Absent for bool {}
impl Absent for u64 {}
impl Absent for AgentState {}
impl Absent for Severity {}
fn is_absent<T: Absent>(v: &T) -> bool {
    v.absent()
}

payload!(
    /// `task_dispatch`: a task is assigned to an agent.
    TaskDispatch = "task_dispatch" {
        /// The task being dispatched.
        task_id: String => "taskId" as Str,
        /// Who dispatches it.
        from: String => "from" as Str,
        /// Who receives it.
        to: String => "to" as Str,
        /// Human-readable description.
        description: Option<String> => "description" as Str,
    }
);

payload!(
    /// `tool_call`: an agent invokes a tool.
    ToolCall = "tool_call" {
        /// The tool's name.
        tool_name: String => "toolName" as Str,
        /// The calling agent.
        agent_id: String => "agentId" as Str,
        /// Correlates with the `tool_result`.
        call_id: Option<String> => "callId" as Str,
        /// The arguments (an object).
        input: Option<Object> => "input" as Obj,
    }
);

payload!(
    /// `tool_result`: a tool returned.
    ToolResult = "tool_result" {
        /// The tool's name.
        tool_name: String => "toolName" as Str,
        /// The agent that made the call.
        agent_id: String => "agentId" as Str,
        /// Correlates with the `tool_call`.
        call_id: Option<String> => "callId" as Str,
        /// Whether the call succeeded.
        success: bool => "success" as Bool,
        /// The tool's output (an object).
        output: Option<Object> => "output" as Obj,
    }
);

payload!(
    /// `token_usage`: tokens consumed.
    TokenUsage = "token_usage" {
        /// The consuming agent.
        agent_id: String => "agentId" as Str,
        /// Prompt (input) tokens.
        prompt_tokens: u64 => "promptTokens" as Count,
        /// Completion (output) tokens.
        completion_tokens: u64 => "completionTokens" as Count,
        /// The model used.
        model: Option<String> => "model" as Str,
        /// Estimated cost in USD.
        cost: Option<f64> => "cost" as Amount,
    }
);

payload!(
    /// `agent_state_change`: an agent moves between states.
    AgentStateChange = "agent_state_change" {
        /// The agent.
        agent_id: String => "agentId" as Str,
        /// Previous state.
        from: AgentState => "from" as State,
        /// New state.
        to: AgentState => "to" as State,
        /// Why.
        reason: Option<String> => "reason" as Str,
    }
);

payload!(
    /// `error`: something went wrong.
    ErrorPayload = "error" {
        /// The agent concerned.
        agent_id: Option<String> => "agentId" as Str,
        /// Machine-readable code.
        code: Option<String> => "code" as Str,
        /// Human-readable message.
        message: String => "message" as Str,
        /// How bad it is.
        severity: Severity => "severity" as Severity,
    }
);

payload!(
    /// `completion`: a task or a stream finished.
    Completion = "completion" {
        /// The task that completed.
        task_id: String => "taskId" as Str,
        /// The agent that completed it.
        agent_id: Option<String> => "agentId" as Str,
        /// Whether it succeeded.
        success: bool => "success" as Bool,
        /// Summary of the result (a finish or stop reason, for LLM streams).
        result: Option<String> => "result" as Str,
    }
);

payload!(
    /// `text_delta`: a streaming text chunk.
    TextDelta = "text_delta" {
        /// The agent producing the text.
        agent_id: String => "agentId" as Str,
        /// The chunk (a delta, not cumulative).
        content: String => "content" as Str,
        /// `text`, `code` or `markdown`.
        content_type: Option<String> => "contentType" as ContentType,
        /// Chunk index within the stream (0-based).
        index: Option<u64> => "index" as Count,
    }
);

payload!(
    /// `thinking`: a reasoning chunk.
    Thinking = "thinking" {
        /// The agent thinking.
        agent_id: String => "agentId" as Str,
        /// The reasoning text chunk.
        content: String => "content" as Str,
    }
);

/// The well-known signal types, whose payloads have a schema.
pub const WELL_KNOWN_TYPES: [&str; 14] = [
    "task_dispatch",
    "tool_call",
    "tool_result",
    "token_usage",
    "agent_state_change",
    "error",
    "completion",
    "text_delta",
    "thinking",
    "user.click",
    "user.move",
    "user.zone",
    "user.command",
    "user.point",
];

/// The `arguments` of a `tool_call` from the JSON text a stream assembled: the object as
/// it is, `{}` when the text is empty, `{"_raw": text}` when it is not a JSON object (cut
/// off mid-stream, or another JSON value), so that nothing the model sent is lost.
pub fn tool_call_arguments(text: String) -> Object {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Object::new();
    }
    if let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(trimmed) {
        return obj;
    }
    let mut raw = Object::new();
    raw.insert("_raw".into(), Value::String(text));
    raw
}

/// A count (token numbers, indexes) as the schema's integers allow it: a non-negative
/// integer, `3.0` included.
pub fn as_count(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f <= u64::MAX as f64)
            .map(|f| f as u64)
    })
}

/// Whether `kind` is a well-known type.
pub fn is_well_known(kind: &str) -> bool {
    spec(kind).is_some()
}

#[derive(Clone, Copy)]
#[cfg_attr(test, derive(Debug, PartialEq))]
enum Kind {
    Str,
    Bool,
    /// Integer ≥ 0.
    Count,
    /// Number ≥ 0.
    Amount,
    Obj,
    State,
    Severity,
    ContentType,
    Position,
    Bounds,
}

#[cfg_attr(test, derive(Debug, PartialEq))]
struct Field {
    name: &'static str,
    kind: Kind,
    required: bool,
    /// The reason when it is required and missing (what [`Invalid::Missing`] says),
    /// written once when compiled: the repair on the text copies it.
    missing: &'static str,
    /// The reason when its value does not fit (what [`Invalid::WrongType`] says).
    wrong: &'static str,
}

fn spec(kind: &str) -> Option<&'static [Field]> {
    Some(match kind {
        "task_dispatch" => TaskDispatch::FIELDS,
        "tool_call" => ToolCall::FIELDS,
        "tool_result" => ToolResult::FIELDS,
        "token_usage" => TokenUsage::FIELDS,
        "agent_state_change" => AgentStateChange::FIELDS,
        "error" => ErrorPayload::FIELDS,
        "completion" => Completion::FIELDS,
        "text_delta" => TextDelta::FIELDS,
        "thinking" => Thinking::FIELDS,
        "user.click" => &const { [req!("target", Str), opt!("position", Position)] },
        "user.move" => {
            &const {
                [
                    req!("entityId", Str),
                    req!("toSlot", Str),
                    opt!("toZone", Str),
                ]
            }
        }
        "user.zone" => &const { [req!("bounds", Bounds), opt!("intent", Str)] },
        "user.command" => {
            &const {
                [
                    req!("entityId", Str),
                    req!("action", Str),
                    opt!("params", Obj),
                ]
            }
        }
        "user.point" => &const { [req!("position", Position), opt!("zone", Str)] },
        _ => return None,
    })
}

fn is_number(v: &Value) -> bool {
    v.is_number()
}

fn fits(kind: Kind, v: &Value) -> bool {
    match kind {
        Kind::Str => v.is_string(),
        Kind::Bool => v.is_boolean(),
        // JSON Schema's "integer" accepts 3.0 too.
        Kind::Count => match v {
            Value::Number(n) => {
                n.as_u64().is_some() || n.as_f64().is_some_and(|f| f >= 0.0 && f.fract() == 0.0)
            }
            _ => false,
        },
        Kind::Amount => v.as_f64().is_some_and(|f| f >= 0.0),
        Kind::Obj => v.is_object(),
        Kind::State => matches!(
            v.as_str(),
            Some("idle" | "thinking" | "acting" | "waiting" | "done" | "error")
        ),
        Kind::Severity => matches!(v.as_str(), Some("warning" | "error" | "critical")),
        Kind::ContentType => matches!(v.as_str(), Some("text" | "code" | "markdown")),
        Kind::Position => v.as_object().is_some_and(|o| {
            o.len() == 2 && o.get("x").is_some_and(is_number) && o.get("y").is_some_and(is_number)
        }),
        Kind::Bounds => v.as_object().is_some_and(|o| {
            o.len() == 4
                && o.get("x").is_some_and(is_number)
                && o.get("y").is_some_and(is_number)
                && o.get("w").and_then(Value::as_f64).is_some_and(|w| w >= 0.0)
                && o.get("h").and_then(Value::as_f64).is_some_and(|h| h >= 0.0)
        }),
    }
}

/// Whether a payload given as canonical JSON text (a kept payload's) is valid for the
/// fields of its type: the same verdict as [`check`] on its tree. `false` also when the
/// text cannot be read field by field (then the tree decides).
#[cfg(test)]
fn fits_text(fields: &'static [Field], raw: &str) -> bool {
    Fit::scan(fields, raw).is_some_and(|fit| fit.fits())
}

/// How many top-level fields of a payload [`Fit`] remembers, for a repair on the text: a
/// well-known payload has at most five of its own.
const MEMBERS: usize = 16;

/// One top-level field of a payload's text, as [`Fit`] saw it.
#[derive(Clone, Copy, Default)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct Member {
    /// From the key's opening quote to the value's end: the field as written.
    from: u32,
    to: u32,
    /// It stays in the payload (a field of the type, valid or required); else it goes to
    /// `metadata.extra`.
    stays: bool,
}

/// [`check`]'s verdict on a payload's text, built up field by field (so that the reader of
/// an envelope has it from the pass that finds the payload canonical), with where each
/// field lies, so that [`repair`] can work on the text without a second pass.
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(crate) struct Fit {
    fields: &'static [Field],
    /// The type's fields present with a valid value (a spec has fewer than 64; keys are
    /// unique in canonical text).
    valid: u64,
    /// The type's required fields present with a value that is not valid.
    wrong: u64,
    /// A field the type does not allow, or an optional one with a value that is not
    /// valid: it goes to `metadata.extra`.
    stray: bool,
    /// The fields in the order written, while there is room (`count` may go past it).
    members: [Member; MEMBERS],
    count: usize,
}

impl Fit {
    fn new(fields: &'static [Field]) -> Self {
        Fit {
            fields,
            valid: 0,
            wrong: 0,
            stray: false,
            members: [Member::default(); MEMBERS],
            count: 0,
        }
    }

    /// The check for payloads of `kind`; `None` for a type that is not well-known.
    pub(crate) fn of(kind: &str) -> Option<Self> {
        spec(kind).map(Fit::new)
    }

    /// The check of a payload's canonical text, in one pass; `None` when the text cannot be
    /// read field by field.
    fn scan(fields: &'static [Field], raw: &str) -> Option<Self> {
        let mut fit = Fit::new(fields);
        crate::payload::spans_of_canonical(raw, |key, value| {
            fit.field(raw, key, value);
            true
        })
        .then_some(fit)
    }

    /// Takes one top-level field of the object `text`: the spans of its key (as written,
    /// between its quotes) and of its value's JSON text.
    pub(crate) fn field(&mut self, text: &str, key: Range<usize>, value: Range<usize>) {
        let (from, to) = (key.start.saturating_sub(1), value.end);
        // As bytes: the spans lie next to ASCII punctuation, and a `str` would check that
        // again for each.
        let bytes = text.as_bytes();
        let (Some(key), Some(value)) = (bytes.get(key), bytes.get(value)) else {
            self.stray = true;
            return;
        };
        // Keys are compared as written: a field name has no character that needs
        // escaping, so a key with an escape is never one of them (and is unknown, as for
        // `check`).
        let named = |f: &Field| crate::payload::same_key(f.name.as_bytes(), key);
        let stays = match self.fields.iter().position(named) {
            Some(i) if i < 64 => {
                let field = &self.fields[i];
                if fits_value(field.kind, value) {
                    self.valid |= 1 << i;
                    true
                } else {
                    self.wrong |= u64::from(field.required) << i;
                    field.required
                }
            }
            _ => false,
        };
        self.stray |= !stays;
        if let Some(member) = self.members.get_mut(self.count) {
            *member = Member {
                from: from as u32,
                to: to as u32,
                stays,
            };
        }
        self.count += 1;
    }

    /// Whether every field taken fits and every required one was there.
    pub(crate) fn fits(&self) -> bool {
        !self.stray && self.wrong == 0 && self.missing() == 0
    }

    /// The type's required fields that are not there.
    fn missing(&self) -> u64 {
        let present = self.valid | self.wrong;
        self.fields
            .iter()
            .enumerate()
            .filter(|(i, f)| f.required && present & (1 << i) == 0)
            .fold(0, |bits, (i, _)| bits | 1 << i)
    }

    /// The index of the type's field `name`, when it is there and missing from the
    /// payload.
    fn absent(&self, name: &str, required_only: bool) -> Option<usize> {
        let i = self.fields.iter().position(|f| f.name == name)?;
        let present = (self.valid | self.wrong) & (1 << i) != 0;
        (!present && (!required_only || self.fields[i].required)).then_some(i)
    }
}

/// Whether a field's JSON text `value` (of a canonical object) is valid for `kind`.
fn fits_value(kind: Kind, value: &[u8]) -> bool {
    match kind {
        Kind::Str => value.first() == Some(&b'"'),
        Kind::Bool => value == b"true" || value == b"false",
        Kind::Obj => value.first() == Some(&b'{'),
        // Digits alone are a whole number ≥ 0 (a float beyond 64 bits, still whole). Counts
        // are short: looked at byte by byte, without the word-at-a-time setup.
        Kind::Count | Kind::Amount if value.iter().all(u8::is_ascii_digit) => true,
        _ => serde_json::from_slice::<Value>(value).is_ok_and(|v| fits(kind, &v)),
    }
}

/// What [`repair_on_text`] made of a payload kept as canonical text.
pub(crate) enum TextRepair {
    /// It is valid as it is.
    Fits,
    /// Repaired on the text, exactly as [`repair`] repairs the tree: the payload's new
    /// text was written to the buffer given, followed by the metadata's new text when it
    /// changed; the type becomes `invalid.<type>` when `invalid`.
    Repaired {
        /// The length of the payload's text (the metadata's, if any, follows it).
        payload_len: usize,
        /// The metadata's new text follows the payload's.
        metadata: bool,
        /// The type becomes `invalid.<type>`.
        invalid: bool,
    },
    /// The repair needs the tree (more fields than [`Fit`] remembers, metadata not kept as
    /// text, or that has the field the repair would write already).
    Tree,
}

/// What the reader of an envelope saw of its metadata's top-level keys in its pass: which
/// of the fields a repair writes into the metadata (`extra`, `invalid`) its text already
/// has (so that the repair need not look for them again), and the keys it may have (for
/// the signal's metadata, see [`KeySet`]).
#[derive(Clone, Copy)]
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(crate) struct MetadataFields {
    /// It has a top-level `extra`.
    pub extra: bool,
    /// It has a top-level `invalid`.
    pub invalid: bool,
    /// Its top-level keys, for the signal's metadata (see [`KeySet`]).
    pub keys: KeySet,
}

impl Default for MetadataFields {
    fn default() -> Self {
        MetadataFields {
            extra: false,
            invalid: false,
            keys: KeySet::NONE,
        }
    }
}

impl MetadataFields {
    /// Notes the top-level key `key` (as written between its quotes).
    pub(crate) fn saw(&mut self, key: &[u8]) {
        self.keys.add(key);
        match key {
            b"extra" => self.extra = true,
            b"invalid" => self.invalid = true,
            _ => {}
        }
    }
}

/// [`repair`] on a payload's canonical text `raw`, from what [`Fit`] saw in its one pass
/// and without building a tree: the fields that stay are copied as written, in order, the
/// others go to `metadata.extra` as written, `taskId` and `agentId` are appended from the
/// envelope, and the reason of an `invalid.<type>` follows from what the pass saw.
/// `metadata` is the signal's metadata text (`Some(None)`: it has none; `None`: it is not
/// kept as text), `known` what the reader of the envelope saw of its fields, if it did.
/// The result is canonical text, the same bytes [`repair`] gives on the tree, written to
/// `out` (emptied first): the payload, then the metadata if it changed.
fn repair_text(
    fit: &Fit,
    raw: &str,
    envelope: Envelope<'_>,
    metadata: Option<Option<&str>>,
    known: Option<MetadataFields>,
    out: &mut String,
) -> TextRepair {
    if fit.fits() {
        return TextRepair::Fits;
    }
    let Some(members) = fit.members.get(..fit.count) else {
        return TextRepair::Tree;
    };
    let text = |m: &Member| &raw[m.from as usize..m.to as usize];
    // What the envelope fills in: `taskId` from `correlationId`, a required `agentId` from
    // `source`.
    let task = envelope
        .correlation_id
        .filter(|_| fit.absent("taskId", false).is_some());
    let agent = fit.absent("agentId", true).map(|_| envelope.source);
    // What `check` would say of the payload then: its first field, in the type's order,
    // missing or not valid (no field it does not allow is left).
    let filled = |name: &str| match name {
        "taskId" => task.is_some(),
        "agentId" => agent.is_some(),
        _ => false,
    };
    let missing = fit.missing();
    // Its words are those of `Invalid` (written once per field when compiled); the
    // type's field names and descriptions need no escape, so they are the JSON string's
    // text as they are.
    let reason = fit.fields.iter().enumerate().find_map(|(i, f)| {
        if missing & (1 << i) != 0 && !filled(f.name) {
            Some(f.missing)
        } else if fit.wrong & (1 << i) != 0 {
            Some(f.wrong)
        } else {
            None
        }
    });
    let moved = members.iter().any(|m| !m.stays);
    // The metadata the repair adds to, checked before anything is written.
    let existing = if moved || reason.is_some() {
        let Some(existing) = metadata else {
            return TextRepair::Tree;
        };
        // A field already there is replaced in place by the tree's insert: rare, left to
        // it. Without a metadata, nothing is there.
        let has = |seen: Option<bool>, name: &str| {
            existing.is_some_and(|existing| {
                seen.unwrap_or_else(|| crate::payload::field_of_canonical(existing, name).is_some())
            })
        };
        if (moved && has(known.map(|k| k.extra), "extra"))
            || (reason.is_some() && has(known.map(|k| k.invalid), "invalid"))
        {
            return TextRepair::Tree;
        }
        Some(existing.unwrap_or("{}"))
    } else {
        None
    };

    out.clear();
    out.push('{');
    let mut first = true;
    for m in members.iter().filter(|m| m.stays) {
        push_member(out, &mut first, text(m));
    }
    if let Some(task) = task {
        push_key(out, &mut first, "taskId");
        push_json_string(out, task);
    }
    if let Some(agent) = agent {
        push_key(out, &mut first, "agentId");
        push_json_string(out, agent);
    }
    out.push('}');
    let payload_len = out.len();

    if let Some(existing) = existing {
        // The keys are written with the punctuation around them as whole literals (each
        // a few stores, where a piece of variable length is a call to copy it).
        let mut lead = existing.len() > 2;
        out.push_str(&existing[..existing.len() - 1]);
        if moved {
            if lead {
                out.push_str(",\"extra\":{");
            } else {
                out.push_str("\"extra\":{");
            }
            let mut first_extra = true;
            for m in members.iter().filter(|m| !m.stays) {
                push_member(out, &mut first_extra, text(m));
            }
            out.push('}');
            lead = true;
        }
        match reason {
            Some(reason) => {
                if lead {
                    out.push_str(",\"invalid\":\"");
                } else {
                    out.push_str("\"invalid\":\"");
                }
                out.push_str(reason);
                out.push_str("\"}");
            }
            None => out.push('}'),
        }
    }
    TextRepair::Repaired {
        payload_len,
        metadata: existing.is_some(),
        invalid: reason.is_some(),
    }
}

/// Appends `s` as a JSON string, escaped as `serde_json` escapes it.
fn push_json_string(out: &mut String, s: &str) {
    if !s.bytes().any(crate::payload::needs_escape) {
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    // A string: serializing it cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// Appends a member of an object being written (`"key":value`, as written), after a comma
/// unless it is the first.
fn push_member(out: &mut String, first: &mut bool, member: &str) {
    if !std::mem::take(first) {
        out.push(',');
    }
    out.push_str(member);
}

/// Appends `"key":` to an object being written, after a comma unless it is the first
/// member (`key` needs no escape).
fn push_key(out: &mut String, first: &mut bool, key: &str) {
    if !std::mem::take(first) {
        out.push(',');
    }
    out.push('"');
    out.push_str(key);
    out.push_str("\":");
}

/// Why a payload is not valid for its well-known type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalid {
    /// A required field is missing.
    Missing(&'static str),
    /// A field has the wrong type or value.
    WrongType {
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A field the schema does not allow.
    Unknown(String),
}

impl Invalid {
    /// The reason's words, in order: what `Display` writes (a field's reasons, written
    /// when compiled for the repair on a payload's text, say the same).
    fn words(&self) -> [&str; 4] {
        match self {
            Invalid::Missing(name) => ["missing required field `", name, "`", ""],
            Invalid::WrongType { field, expected } => ["field `", field, "` must be ", expected],
            Invalid::Unknown(name) => ["field `", name, "` is not allowed", ""],
        }
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.words().iter().try_for_each(|w| f.write_str(w))
    }
}

impl std::error::Error for Invalid {}

fn describe(kind: Kind) -> &'static str {
    match kind {
        Kind::Str => must_be!(Str),
        Kind::Bool => must_be!(Bool),
        Kind::Count => must_be!(Count),
        Kind::Amount => must_be!(Amount),
        Kind::Obj => must_be!(Obj),
        Kind::State => must_be!(State),
        Kind::Severity => must_be!(Severity),
        Kind::ContentType => must_be!(ContentType),
        Kind::Position => must_be!(Position),
        Kind::Bounds => must_be!(Bounds),
    }
}

/// Checks a payload against its type's schema. Types that are not well-known are always
/// valid (any object).
pub fn check(kind: &str, payload: &Object) -> Result<(), Invalid> {
    let Some(fields) = spec(kind) else {
        return Ok(());
    };
    for f in fields {
        match payload.get(f.name) {
            None if f.required => return Err(Invalid::Missing(f.name)),
            None => {}
            Some(v) if !fits(f.kind, v) => {
                return Err(Invalid::WrongType {
                    field: f.name,
                    expected: describe(f.kind),
                });
            }
            Some(_) => {}
        }
    }
    match payload
        .keys()
        .find(|k| !fields.iter().any(|f| f.name == *k))
    {
        Some(extra) => Err(Invalid::Unknown(extra.clone())),
        None => Ok(()),
    }
}

/// Checks a whole signal: its payload against its type.
pub fn check_signal(signal: &Signal) -> Result<(), Invalid> {
    check(&signal.kind, &signal.payload)
}

/// Makes a signal of a well-known type valid without losing anything:
///
/// - payload fields the schema does not allow, and optional fields of the wrong type,
///   move to `metadata.extra`;
/// - a missing `taskId` is filled from `correlationId`, a missing `agentId` from `source`;
/// - if it is still invalid, the type becomes `invalid.<type>` and the reason is written to
///   `metadata.invalid`, so consumers of well-known types never see an invalid signal.
///
/// Returns whether the signal was changed. Signals of other types are left alone.
pub fn repair(signal: &mut Signal) -> bool {
    repair_fitted(signal, None)
}

/// The parts of an envelope besides its payload that a repair on the text reads.
#[derive(Clone, Copy)]
pub(crate) struct Envelope<'a> {
    /// The signal's type.
    pub kind: &'a str,
    /// Its `correlationId`, which a missing `taskId` is filled from.
    pub correlation_id: Option<&'a str>,
    /// Its `source`, which a missing required `agentId` is filled from.
    pub source: &'a str,
}

/// [`repair`] on a payload's canonical text `raw`, before the signal is made (so that a
/// payload or metadata that is repaired is written once, not copied first): `Fits` for a
/// payload that needs nothing (or of a type that is not well known), `Tree` when the
/// repair needs the tree. `fit` is the payload's [`Fit`] when the reader of the envelope
/// made it in its pass; `metadata` the envelope's metadata text (`Some(None)`: it has
/// none; `None`: it is not kept as text), `known` what that reader saw of its fields, if it
/// did. What is repaired is written to `out` (see [`TextRepair::Repaired`]).
pub(crate) fn repair_on_text(
    envelope: Envelope<'_>,
    fit: Option<&Fit>,
    raw: &str,
    metadata: Option<Option<&str>>,
    known: Option<MetadataFields>,
    out: &mut String,
) -> TextRepair {
    if let Some(fit) = fit {
        return repair_text(fit, raw, envelope, metadata, known, out);
    }
    match spec(envelope.kind) {
        Some(fields) => match Fit::scan(fields, raw) {
            Some(fit) => repair_text(&fit, raw, envelope, metadata, known, out),
            None => TextRepair::Tree,
        },
        None => TextRepair::Fits,
    }
}

/// [`repair`], given the [`Fit`] of the signal's payload text when the reader of the
/// envelope made it in its pass.
pub(crate) fn repair_fitted(signal: &mut Signal, fit: Option<&Fit>) -> bool {
    let Some(fields) = fit.map(|f| f.fields).or_else(|| spec(&signal.kind)) else {
        return false;
    };
    // A payload kept as text is checked, and repaired, on its text: it is not built as a
    // tree, and stays text for every writer downstream.
    if let Some(raw) = signal.payload.raw_json() {
        let metadata = match &signal.metadata {
            None => Some(None),
            Some(m) => m.raw_json().map(Some),
        };
        let envelope = Envelope {
            kind: &signal.kind,
            correlation_id: signal.correlation_id.as_deref(),
            source: &signal.source,
        };
        let mut out = String::new();
        match repair_on_text(envelope, fit, raw, metadata, None, &mut out) {
            TextRepair::Fits => return false,
            TextRepair::Repaired {
                payload_len,
                metadata,
                invalid,
            } => {
                if invalid {
                    signal.kind = invalid_kind(&signal.kind);
                }
                signal.payload = LazyObject::from_canonical(&out[..payload_len]);
                if metadata {
                    signal.metadata = Some(LazyObject::from_canonical(&out[payload_len..]));
                }
                return true;
            }
            TextRepair::Tree => {}
        }
    }
    repair_tree(signal, fields)
}

/// [`repair`] on the payload's tree (built now if it is kept as text), for a signal of a
/// well-known type whose payload allows `fields`: what a repair on the text cannot do.
fn repair_tree(signal: &mut Signal, fields: &[Field]) -> bool {
    if check(&signal.kind, &signal.payload).is_ok() {
        return false;
    }
    let mut extra = Object::new();
    let keys: Vec<String> = signal.payload.keys().cloned().collect();
    for key in keys {
        let field = fields.iter().find(|f| f.name == key);
        let keep = match field {
            Some(f) => f.required || fits(f.kind, &signal.payload[&key]),
            None => false,
        };
        // `shift_remove`: the fields left keep the producer's order (as on the text).
        if !keep && let Some(v) = signal.payload.shift_remove(&key) {
            extra.insert(key, v);
        }
    }
    if fields.iter().any(|f| f.name == "taskId")
        && !signal.payload.contains_key("taskId")
        && let Some(c) = &signal.correlation_id
    {
        signal.payload.insert("taskId".into(), Value::from(c));
    }
    if fields.iter().any(|f| f.name == "agentId" && f.required)
        && !signal.payload.contains_key("agentId")
    {
        signal
            .payload
            .insert("agentId".into(), Value::from(&signal.source));
    }
    if !extra.is_empty() {
        let meta = signal.metadata_mut();
        match meta.get_mut("extra") {
            Some(Value::Object(existing)) => existing.extend(extra),
            _ => {
                meta.insert("extra".into(), Value::Object(extra));
            }
        }
    }
    if let Err(reason) = check(&signal.kind, &signal.payload) {
        signal.kind = invalid_kind(&signal.kind);
        signal
            .metadata_mut()
            .insert("invalid".into(), Value::String(reason.to_string()));
    }
    true
}

/// [`repair_tree`] for a signal whose type is well known (`false`, nothing done, for any
/// other).
pub(crate) fn repair_on_tree(signal: &mut Signal) -> bool {
    spec(&signal.kind).is_some_and(|fields| repair_tree(signal, fields))
}

/// The type a signal of type `kind` gets when it cannot be made valid.
pub(crate) fn invalid_kind(kind: &SmallString) -> SmallString {
    SmallString::with_prefix("invalid.", kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object;

    #[test]
    fn each_fields_reasons_say_what_invalid_says() {
        for kind in WELL_KNOWN_TYPES {
            for f in spec(kind).unwrap() {
                assert_eq!(f.missing, Invalid::Missing(f.name).to_string());
                let wrong = Invalid::WrongType {
                    field: f.name,
                    expected: describe(f.kind),
                };
                assert_eq!(f.wrong, wrong.to_string());
            }
        }
    }

    #[test]
    fn counts_accept_integral_floats_only() {
        assert_eq!(as_count(&serde_json::json!(3)), Some(3));
        assert_eq!(as_count(&serde_json::json!(3.0)), Some(3));
        assert_eq!(as_count(&serde_json::json!(3.5)), None);
        assert_eq!(as_count(&serde_json::json!(-1)), None);
        assert_eq!(as_count(&serde_json::json!("3")), None);
    }

    #[test]
    fn typed_payloads_serialize_to_valid_payloads() {
        let s = TextDelta {
            agent_id: "m".into(),
            content: "hi".into(),
            content_type: None,
            index: Some(0),
        }
        .into_signal("openai:x");
        assert_eq!(s.kind, "text_delta");
        assert_eq!(check_signal(&s), Ok(()));
        patchbay_testkit::assert_schema_valid(&s.to_value());
        let e = ErrorPayload {
            agent_id: None,
            code: Some("bad_frame".into()),
            message: "x".into(),
            severity: Severity::Warning,
        }
        .into_object();
        assert!(!e.contains_key("agentId"));
        assert_eq!(e["severity"], "warning");
    }

    #[test]
    fn repair_moves_extras_and_fills_from_the_envelope() {
        let mut s = Signal::new(
            "completion",
            "x:y",
            object! {"success" => true, "extraField" => 3},
        )
        .correlated("run-1");
        assert!(repair(&mut s));
        assert_eq!(s.kind, "completion");
        assert_eq!(s.payload["taskId"], "run-1");
        assert_eq!(s.metadata.as_ref().unwrap()["extra"]["extraField"], 3);
        patchbay_testkit::assert_schema_valid(&s.to_value());
    }

    #[test]
    fn unrepairable_becomes_invalid_type() {
        let mut s = Signal::new(
            "agent_state_change",
            "x:y",
            object! {"from" => "idle", "to" => "flying"},
        );
        repair(&mut s);
        assert_eq!(s.kind, "invalid.agent_state_change");
        assert!(
            s.meta("invalid")
                .unwrap()
                .as_str()
                .unwrap()
                .contains("`to`")
        );
        assert_eq!(s.payload["agentId"], "x:y");
    }

    #[test]
    fn optional_field_of_wrong_type_moves_to_extra() {
        let mut s = Signal::new(
            "tool_call",
            "x:y",
            object! {"toolName" => "t", "agentId" => "a", "input" => "not an object"},
        );
        repair(&mut s);
        assert_eq!(s.kind, "tool_call");
        assert_eq!(s.meta("extra").unwrap()["input"], "not an object");
    }

    #[test]
    fn a_payload_kept_as_text_gets_the_verdict_of_its_tree() {
        let cases = [
            ("text_delta", r#"{"agentId":"a","content":"x"}"#),
            ("text_delta", r#"{"agentId":"a","content":"x","index":3}"#),
            ("text_delta", r#"{"agentId":"a"}"#),
            ("text_delta", r#"{"agentId":1,"content":"x"}"#),
            (
                "text_delta",
                r#"{"agentId":"a","content":"x","extra":true}"#,
            ),
            ("text_delta", r#"{"agent\"Id":"a","content":"x"}"#),
            (
                "token_usage",
                r#"{"agentId":"a","promptTokens":3,"completionTokens":4.0}"#,
            ),
            (
                "token_usage",
                r#"{"agentId":"a","promptTokens":-3,"completionTokens":4}"#,
            ),
            (
                "token_usage",
                r#"{"agentId":"a","promptTokens":3,"completionTokens":4,"cost":0.5}"#,
            ),
            (
                "token_usage",
                r#"{"agentId":"a","promptTokens":3,"completionTokens":4,"cost":"x"}"#,
            ),
            (
                "agent_state_change",
                r#"{"agentId":"a","from":"idle","to":"done"}"#,
            ),
            (
                "agent_state_change",
                r#"{"agentId":"a","from":"idle","to":"flying"}"#,
            ),
            (
                "tool_call",
                r#"{"toolName":"t","agentId":"a","input":{"k":[1]}}"#,
            ),
            ("tool_call", r#"{"toolName":"t","agentId":"a","input":[1]}"#),
            (
                "tool_result",
                r#"{"toolName":"t","agentId":"a","success":false}"#,
            ),
            (
                "tool_result",
                r#"{"toolName":"t","agentId":"a","success":null}"#,
            ),
            ("user.click", r#"{"target":"b","position":{"x":1,"y":2.5}}"#),
            ("user.click", r#"{"target":"b","position":{"x":1}}"#),
            ("user.zone", r#"{"bounds":{"x":0,"y":0,"w":1,"h":-1}}"#),
            (
                "user.zone",
                r#"{"bounds":{"x":0,"y":0,"w":1,"h":1},"intent":"i"}"#,
            ),
        ];
        for (kind, text) in cases {
            let tree: Object = serde_json::from_str(text).unwrap();
            assert!(crate::payload::is_canonical_object(text), "{text}");
            assert_eq!(
                fits_text(spec(kind).unwrap(), text),
                check(kind, &tree).is_ok(),
                "{kind} {text}"
            );
        }
    }

    /// The repair on a payload's text gives the very bytes the repair on its tree gives,
    /// for every kind of repair: fields moved to `metadata.extra` (with or without
    /// metadata, metadata that has `extra` or `invalid` already), `taskId` and `agentId`
    /// filled, `invalid.<type>` with its reason, keys with escapes, and nothing to do.
    #[test]
    fn repair_on_the_text_is_repair_on_the_tree() {
        let payloads = [
            ("text_delta", r#"{"agentId":"a","content":"c","index":1}"#),
            (
                "text_delta",
                r#"{"agentId":"a","content":"c","seq":1,"t0":99}"#,
            ),
            (
                "text_delta",
                r#"{"seq":1,"agentId":"a","content":"c","index":2}"#,
            ),
            ("text_delta", r#"{"content":"c"}"#),
            ("text_delta", r#"{"agentId":"a","text":"c","t0":1}"#),
            ("text_delta", r#"{"agentId":"a","content":7,"index":"x"}"#),
            (
                "text_delta",
                r#"{"agentId":"a","content":"c","contentType":"html"}"#,
            ),
            ("text_delta", r#"{"agent\nId":"a","content":"c"}"#),
            ("text_delta", r#"{}"#),
            ("completion", r#"{"success":true}"#),
            ("completion", r#"{"success":true,"extraField":{"a":[1,2]}}"#),
            ("completion", r#"{"taskId":5,"success":true}"#),
            (
                "agent_state_change",
                r#"{"agentId":"a","from":"idle","to":"flying"}"#,
            ),
            (
                "token_usage",
                r#"{"promptTokens":1,"completionTokens":2.5,"cost":-1}"#,
            ),
            (
                "error",
                r#"{"message":"m","severity":"warning","agentId":null}"#,
            ),
            (
                "tool_result",
                r#"{"toolName":"t","agentId":"a","success":false}"#,
            ),
            ("user.click", r#"{"target":"b","position":{"x":1}}"#),
            ("midi.note_on", r#"{"anything":1}"#),
        ];
        let metadatas = [
            None,
            Some("{}"),
            Some(r#"{"t0":1}"#),
            Some(r#"{"extra":{"x":1}}"#),
            Some(r#"{"invalid":"before"}"#),
            // The names, but not as keys of the metadata.
            Some(r#"{"note":"extra","a":{"invalid":1}}"#),
        ];
        let object = |text: &str| serde_json::from_str::<Object>(text).unwrap();
        for (kind, payload) in payloads {
            for metadata in metadatas {
                for correlation in [None, Some("run-1")] {
                    let make = |as_text: bool| Signal {
                        id: "i".into(),
                        kind: kind.into(),
                        timestamp: 1,
                        source: "x:y".into(),
                        correlation_id: correlation.map(Into::into),
                        metadata: metadata.map(|m| match as_text {
                            true => LazyObject::from_json(m).unwrap(),
                            false => object(m).into(),
                        }),
                        payload: match as_text {
                            true => LazyObject::from_json(payload).unwrap(),
                            false => object(payload).into(),
                        },
                    };
                    let (mut text, mut tree) = (make(true), make(false));
                    let case = format!("{kind} {payload} {metadata:?} {correlation:?}");
                    assert_eq!(repair(&mut text), repair(&mut tree), "{case}");
                    assert_eq!(text.to_json(), tree.to_json(), "{case}");
                    patchbay_testkit::assert_schema_valid(&text.to_value());
                }
            }
        }
    }

    /// The usual repairs leave the payload as text: nothing downstream builds its tree.
    #[test]
    fn the_usual_repairs_keep_the_text() {
        for (kind, payload) in [
            (
                "text_delta",
                r#"{"agentId":"a","content":"c","seq":1,"t0":99}"#,
            ),
            ("text_delta", r#"{"content":"c"}"#),
            ("text_delta", r#"{"agentId":"a","text":"c"}"#),
            ("completion", r#"{"success":true}"#),
        ] {
            let mut s = Signal {
                id: "i".into(),
                kind: kind.into(),
                timestamp: 1,
                source: "x:y".into(),
                correlation_id: Some("run-1".into()),
                metadata: Some(LazyObject::from_json(r#"{"t0":1}"#).unwrap()),
                payload: LazyObject::from_json(payload).unwrap(),
            };
            assert!(repair(&mut s));
            assert!(s.payload.raw_json().is_some(), "{payload}");
            assert!(
                s.metadata.as_ref().unwrap().raw_json().is_some(),
                "{payload}"
            );
            assert!(!s.payload.is_parsed(), "{payload}");
        }
    }

    #[test]
    fn other_types_are_untouched() {
        let mut s = Signal::new("midi.note_on", "x", object! {"anything" => 1});
        assert!(!repair(&mut s));
    }
}
