//! The requests a transport sends to `opencode serve`, as values: method, path, JSON body.

use patchbay_graph::approvals::{self, AnswerError, Verdict};
use patchbay_signal::control::FieldError;
use patchbay_signal::{Signal, control};
use serde_json::{Value, json};

/// The signal type that starts a turn: `prompt {text, sessionId?}`.
pub const PROMPT: &str = "prompt";

/// An HTTP method OpenCode's API is called with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `POST`.
    Post,
}

impl Method {
    /// `GET` or `POST`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// One call of OpenCode's HTTP API, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The path, its segments percent-encoded (no query).
    pub path: String,
    /// The JSON body (`None`: no body).
    pub body: Option<Value>,
}

impl Request {
    fn post(path: String, body: Value) -> Self {
        Request {
            method: Method::Post,
            path,
            body: Some(body),
        }
    }

    /// The path with the `directory` query OpenCode scopes a call to (the project
    /// directory a server serves; `None`: the server's own).
    pub fn target(&self, directory: Option<&str>) -> String {
        match directory {
            Some(dir) => format!("{}?directory={}", self.path, encode_component(dir)),
            None => self.path.clone(),
        }
    }
}

/// `GET /event`: the server's event stream (raw SSE, read by
/// [`EventStream`](crate::EventStream)).
pub fn events() -> Request {
    Request {
        method: Method::Get,
        path: "/event".into(),
        body: None,
    }
}

/// `POST /session {title}`: a new session (the answer is the session, its `id`
/// `ses_…`).
pub fn create_session(title: &str) -> Request {
    Request::post("/session".into(), json!({ "title": title }))
}

/// `POST /session/{id}/prompt_async {parts: [{type: "text", text}]}`: starts a turn
/// (answered 204 at once; what happens arrives on the event stream).
pub fn prompt(session: &str, text: &str) -> Request {
    Request::post(
        format!("/session/{}/prompt_async", encode_component(session)),
        json!({ "parts": [{ "type": "text", "text": text }] }),
    )
}

/// `POST /session/{id}/abort`: stops the session's turn.
pub fn abort(session: &str) -> Request {
    Request {
        method: Method::Post,
        path: format!("/session/{}/abort", encode_component(session)),
        body: None,
    }
}

/// `GET /session/{id}/message`: the session's messages and their parts.
pub fn messages(session: &str) -> Request {
    Request {
        method: Method::Get,
        path: format!("/session/{}/message", encode_component(session)),
        body: None,
    }
}

/// `GET /permission`: the permissions waiting for an answer (each as the properties of
/// its `permission.asked`).
pub fn permissions() -> Request {
    Request {
        method: Method::Get,
        path: "/permission".into(),
        body: None,
    }
}

/// OpenCode's word for a verdict: `allow` → `once`, `always` → `always`, `deny` and
/// `cancel` → `reject`; `None` for `ask` (left to OpenCode's own UI: nothing is sent).
pub fn reply_word(verdict: Verdict) -> Option<&'static str> {
    match verdict {
        Verdict::Allow => Some("once"),
        Verdict::Always => Some("always"),
        Verdict::Deny | Verdict::Cancel => Some("reject"),
        Verdict::Ask => None,
    }
}

/// `POST /permission/{id}/reply {"reply": once|always|reject}` (answered `true`); `None`
/// for [`Verdict::Ask`] (see [`reply_word`]).
pub fn reply(permission_id: &str, verdict: Verdict) -> Option<Request> {
    let word = reply_word(verdict)?;
    Some(Request::post(
        format!("/permission/{}/reply", encode_component(permission_id)),
        json!({ "reply": word }),
    ))
}

/// The reply a transport sends for a decision, where [`reply`] sends the bare word:
/// `deny` rejects with `message` (OpenCode hands it to the model as the user's feedback
/// and the turn goes on without the call), `cancel` rejects without one (OpenCode stops
/// the turn, unless its `experimental.continue_loop_on_deny` is set); `allow` → `once`,
/// `always` → `always`; `None` for `ask`. OpenCode rejects the session's other pending
/// permissions along with a rejected one.
pub fn answer(permission_id: &str, verdict: Verdict, message: &str) -> Option<Request> {
    let mut request = reply(permission_id, verdict)?;
    if verdict == Verdict::Deny
        && !message.is_empty()
        && let Some(Value::Object(body)) = request.body.as_mut()
    {
        body.insert("message".into(), Value::from(message));
    }
    Some(request)
}

/// Why a signal cannot become a request to OpenCode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// OpenCode has no call for this signal type (pause, step, continue, arm, quit, or not
    /// a control at all).
    #[error("OpenCode has no call for `{0}`")]
    Unsupported(String),
    /// A field the message needs is missing from the payload, or unusable.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// The signal names no session (`sessionId`) and none is known.
    #[error("`{0}` names no session (`payload.sessionId`) and no OpenCode session is known")]
    NoSession(String),
    /// A `control.answer` whose value is not a decision.
    #[error(transparent)]
    BadAnswer(#[from] AnswerError),
    /// A `control.answer` of `ask`: OpenCode asks in its own UI, nothing is sent.
    #[error("`ask` leaves permission `{0}` to OpenCode's own UI: nothing to send")]
    LeftToOpenCode(String),
}

/// The request for a signal a transport received:
///
/// | signal | request |
/// |---|---|
/// | `prompt {text, sessionId?}` | [`prompt`]: `POST /session/{id}/prompt_async` |
/// | `control.interrupt`, `control.cancel` `{sessionId?}` | [`abort`]: `POST /session/{id}/abort` |
/// | `control.answer {promptId, value \| cancelled}` | [`reply`]: `POST /permission/{promptId}/reply` |
///
/// The session is the payload's `sessionId` (or `agentId`: the signals' agent is the
/// session), else `session` (the transport's current one, e.g.
/// [`EventDecoder::current_session`](crate::EventDecoder::current_session)). An answer's
/// `value` is read with [`approvals::parse_answer`] (the common words and OpenCode's own);
/// `cancelled: true` rejects.
pub fn encode_control(signal: &Signal, session: Option<&str>) -> Result<Request, EncodeError> {
    let kind = signal.kind.as_str();
    match kind {
        PROMPT => {
            let text = match signal.payload.get("text") {
                Some(Value::String(t)) => t,
                None | Some(Value::Null) => return Err(missing(kind, "text")),
                Some(_) => return Err(invalid(kind, "text", "a string")),
            };
            Ok(prompt(&session_for(signal, session)?, text))
        }
        control::INTERRUPT | control::CANCEL => Ok(abort(&session_for(signal, session)?)),
        control::ANSWER => {
            let answer = approvals::parse_answer(signal)?;
            let id = answer.prompt_id.ok_or_else(|| missing(kind, "promptId"))?;
            let verdict = answer.verdict.unwrap_or(Verdict::Deny);
            reply(&id, verdict).ok_or(EncodeError::LeftToOpenCode(id))
        }
        other => Err(EncodeError::Unsupported(other.to_owned())),
    }
}

/// The session a signal is for: its `sessionId` (or `agentId`), else `fallback`.
fn session_for(signal: &Signal, fallback: Option<&str>) -> Result<String, EncodeError> {
    let kind = signal.kind.as_str();
    for field in ["sessionId", "agentId"] {
        match signal.payload.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if !s.is_empty() => return Ok(s.clone()),
            Some(_) => return Err(invalid(kind, field, "a non-empty string")),
        }
    }
    fallback
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| EncodeError::NoSession(kind.to_owned()))
}

fn missing(kind: &str, field: &'static str) -> EncodeError {
    EncodeError::Field(FieldError::Missing {
        kind: kind.to_owned(),
        field,
    })
}

fn invalid(kind: &str, field: &'static str, expected: &'static str) -> EncodeError {
    EncodeError::Field(FieldError::Invalid {
        kind: kind.to_owned(),
        field,
        expected,
    })
}

/// Percent-encodes `text` as one path segment or query value: everything but the
/// unreserved characters of RFC 3986 (`A-Z a-z 0-9 - . _ ~`).
pub fn encode_component(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
        }
    }
    out
}
