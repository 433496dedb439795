//! `type = "opencode"`: a client of `opencode serve`. It reads the server's event stream
//! (`GET /event`, raw SSE) and, as an output, sends `prompt_async` for each `prompt`,
//! `abort` for `control.interrupt` / `control.cancel`, and the reply to a permission for
//! `control.answer` (or the gate's default).
//!
//! Connecting and reconnecting are the transport layer's ([`Driver`]): the link's
//! connection is the event stream; the calls go out on the same HTTP client, each in a
//! task of its own so that the stream is never held up by them. Prompts and aborts keep
//! their order (one at a time, a session created first when none is known); answers go
//! out at once, side by side.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use patchbay_graph::approvals::{self, GateConfig, Verdict};
use patchbay_graph::config::Secret;
use patchbay_graph::{ComponentError, Diagnostic, HealthState, LinkEnds, Options, Output, Source};
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{SharedSignal, control};
use patchbay_sse::{SseParser, http};
use patchbay_transport::two_way::{TwoWay, TwoWayComponent};
use patchbay_transport::{
    Defaults, Driver, Ended, Headers, Link, RedactedUrl, Scheme, TransportConfig, TransportOptions,
    describe_http_error, parse_options,
};
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::{self, EncodeError, Method, PROMPT, Request};
use crate::decode::EventDecoder;

/// `opencode serve`'s default address.
pub const DEFAULT_URL: &str = "http://127.0.0.1:4096";

/// The title of the session patchbay creates.
const SESSION_TITLE: &str = "patchbay";

/// How long one call (a prompt, an abort, an answer, creating the session) may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Prompts and aborts waiting their turn, at most this many (beyond: refused).
const MAX_QUEUED: usize = 64;

/// Answers on their way to OpenCode at once, at most this many (beyond: refused).
const MAX_ANSWERS: usize = 64;

/// The longest reason quoted from an error answer of OpenCode.
const MAX_REASON: usize = 200;

/// OpenCode's transport defaults: the local server, retry forever.
#[derive(Debug, Clone, Copy, schemars::JsonSchema)]
pub struct OpenCodeDefaults;

impl Defaults for OpenCodeDefaults {
    const SCHEME: Scheme = Scheme::Http;
    const URL_EXAMPLE: &'static str = "http://127.0.0.1:4096";
    const URL: &'static str = DEFAULT_URL;
}

/// `[outputs.NAME]` (two-way: prompts, controls and answers in, its events out of
/// `NAME.inbound`) or `[sources.NAME]` (listen only) with `type = "opencode"`: a client
/// of a running `opencode serve`.
///
/// Declared under `[outputs]`, its queue keeps the controls while the server is away;
/// they are sent once it is back.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct OpenCodeConfig {
    /// Connecting and reconnecting: `url` (the server, default `http://127.0.0.1:4096`;
    /// `https://` for TLS; a path prefix is kept), `connect_timeout_ms` (until the event
    /// stream's response headers; default 10000), `max_attempts` (default: retry forever),
    /// `backoff_initial_ms` (default 1000), `backoff_max_ms` (default 30000), `ca_file`.
    #[serde(flatten)]
    pub transport: TransportOptions<OpenCodeDefaults>,
    /// Extra request headers on every call (e.g. `Authorization = "Bearer ${TOKEN}"` for
    /// a proxy in front of the server); values are never logged.
    #[serde(default)]
    pub headers: Headers,
    /// The server's password (`OPENCODE_SERVER_PASSWORD` of `opencode serve`), sent as
    /// HTTP Basic authentication with `username`, e.g. `password =
    /// "${OPENCODE_SERVER_PASSWORD}"`. Never logged. Unset: no authentication (the server
    /// runs unsecured).
    #[serde(default)]
    pub password: Option<Secret>,
    /// The user name of the Basic authentication (`OPENCODE_SERVER_USERNAME`); default
    /// `opencode`. Only sent with a `password`.
    #[serde(default = "default_username")]
    pub username: String,
    /// The project directory the calls are about (`?directory=` on every call: the event
    /// stream and the sessions are those of this directory). Unset: the server's own
    /// working directory.
    #[serde(default)]
    pub directory: Option<String>,
    /// The session (`ses_…`) prompts go to when they name none (`sessionId`). Unset: one
    /// is created (`POST /session`, title "patchbay") at the first prompt and kept; an
    /// interrupt without a session goes to the last session seen.
    #[serde(default)]
    pub session: Option<String>,
    /// Which permissions wait for a person (outputs only): `tools` are OpenCode's
    /// permission names (`bash`, `edit`, `webfetch`, …, or `"*"`). A permission held
    /// waits for a `control.answer` up to `timeout_ms`, then gets the `default`; `ask`
    /// sends nothing (OpenCode's own UI still asks). Permissions of other tools, and every
    /// permission without a gate, are left to OpenCode's own UI and rules (reported as
    /// `approval.requested`; a `control.answer` still answers them). `deny` rejects with
    /// a message the model reads (the turn goes on), `cancel` rejects without one
    /// (OpenCode stops the turn).
    #[serde(default)]
    pub gate: Option<GateConfig>,
}

fn default_username() -> String {
    "opencode".into()
}

impl TransportConfig for OpenCodeConfig {
    type Defaults = OpenCodeDefaults;
    fn transport(&self) -> &TransportOptions<OpenCodeDefaults> {
        &self.transport
    }
}

impl OpenCodeConfig {
    /// Parses and checks the options (no I/O).
    pub fn from_options(options: &Options<'_>) -> Result<OpenCodeConfig, Diagnostic> {
        let config: OpenCodeConfig = parse_options(options)?;
        config
            .headers
            .check()
            .map_err(|e| options.error_at("headers", e))?;
        if let Some(gate) = &config.gate {
            gate.check()
                .map_err(|message| options.error_at("gate", message))?;
        }
        for (key, value) in [
            ("directory", &config.directory),
            ("session", &config.session),
        ] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return Err(options.error_at(key, format!("`{key}` is empty: remove it")));
            }
        }
        if config.password.as_ref().is_some_and(Secret::is_blank) {
            return Err(options.error_at(
                "password",
                "`password` is empty (an unset variable?): remove it if the server has none",
            ));
        }
        if config.transport.url().contains(['?', '#']) {
            return Err(options.error_at(
                "url",
                "`url` is the server's address, without a query (`directory` is an option)",
            ));
        }
        Ok(config)
    }
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let config = OpenCodeConfig::from_options(options)?;
    GateConfig::refuse_on_a_source(config.gate.as_ref(), options)?;
    Ok(TwoWayComponent::source(config))
}

pub(crate) fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(TwoWayComponent::output(OpenCodeConfig::from_options(
        options,
    )?))
}

impl TwoWay for OpenCodeConfig {
    const TYPE: &'static str = "opencode";

    async fn run(self, source: String, side: LinkEnds<'_>) -> Result<(), ComponentError> {
        let mut link = OpenCodeLink::new(self, source);
        Driver::new(Self::TYPE, &link.config.transport, side)
            .run(&mut link)
            .await
    }
}

/// The HTTP side of the calls: the client, where, and the credentials. Shared by the
/// calls' tasks.
struct Api {
    client: reqwest::Client,
    /// The server's URL without a trailing `/`.
    base: String,
    directory: Option<String>,
    headers: HeaderMap,
    /// `(username, password)` of the Basic authentication.
    auth: Option<(String, Secret)>,
}

impl Api {
    /// A request of `call` (its path, the `directory` query, the headers, the
    /// credentials).
    fn builder(&self, call: &Request) -> reqwest::RequestBuilder {
        let url = format!("{}{}", self.base, call.target(self.directory.as_deref()));
        let method = match call.method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
        };
        let mut request = self
            .client
            .request(method, url)
            .headers(self.headers.clone());
        if let Some((user, password)) = &self.auth {
            request = request.basic_auth(user, Some(&password.0));
        }
        request
    }

    /// Sends `call`; its JSON answer (`Null` for none). An error says what failed: the
    /// status and OpenCode's short reason, never a URL or a header.
    async fn call(&self, call: &Request) -> Result<Value, String> {
        let mut request = self.builder(call).timeout(CALL_TIMEOUT);
        if let Some(body) = &call.body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let started = Instant::now();
        let response = request.send().await.map_err(|e| describe_http_error(&e))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| describe_http_error(&e))?;
        tracing::debug!(
            "opencode: {} {} answered {} in {} ms",
            call.method.as_str(),
            call.path,
            status.as_u16(),
            started.elapsed().as_millis()
        );
        if status.is_success() {
            return Ok(serde_json::from_slice(&body).unwrap_or(Value::Null));
        }
        Err(format!(
            "OpenCode answered HTTP {}{}",
            status.as_u16(),
            error_reason(&body)
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ))
    }
}

/// The short reason in an error answer of OpenCode (`{name, data: {message}}`, or
/// `{message}`), else its text, cut to [`MAX_REASON`] characters.
fn error_reason(body: &[u8]) -> Option<String> {
    let text = match serde_json::from_slice::<Value>(body) {
        Ok(json) => {
            let message = json
                .pointer("/data/message")
                .or_else(|| json.get("message"))
                .and_then(Value::as_str);
            let name = json.get("name").and_then(Value::as_str);
            match (name, message) {
                (Some(name), Some(message)) => format!("{name}: {message}"),
                (Some(one), None) | (None, Some(one)) => one.to_owned(),
                (None, None) => json.to_string(),
            }
        }
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut cut: String = text.chars().take(MAX_REASON).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    Some(cut)
}

/// How a call ended.
struct Outcome {
    /// The control it was for (`None`: the gate's default, not a control).
    signal: Option<SharedSignal>,
    /// The session it created, if it did (kept even when the prompt after it failed).
    created: Option<String>,
    result: Result<(), String>,
}

/// What is kept across reconnections: the decoder (sessions, pending permissions), the
/// session prompts go to, the calls under way and waiting, the gate's deadlines.
struct OpenCodeLink {
    config: OpenCodeConfig,
    decoder: EventDecoder,
    api: Option<Arc<Api>>,
    /// The session prompts go to: configured, or created at the first prompt.
    session: Option<String>,
    /// Prompts and aborts waiting for the one under way (`running`) to end.
    queued: VecDeque<SharedSignal>,
    running: Option<JoinHandle<Outcome>>,
    answers: FuturesUnordered<JoinHandle<Outcome>>,
    /// Permissions the gate holds, with the moment its default applies.
    deadlines: BTreeMap<String, Instant>,
}

impl OpenCodeLink {
    fn new(config: OpenCodeConfig, source: String) -> Self {
        OpenCodeLink {
            decoder: EventDecoder::new(source),
            session: config.session.clone(),
            config,
            api: None,
            queued: VecDeque::new(),
            running: None,
            answers: FuturesUnordered::new(),
            deadlines: BTreeMap::new(),
        }
    }

    fn api(&mut self) -> Result<Arc<Api>, Ended> {
        if let Some(api) = &self.api {
            return Ok(api.clone());
        }
        let transport = &self.config.transport;
        let api = Arc::new(Api {
            client: http::client(transport)?,
            base: transport.url().trim_end_matches('/').to_owned(),
            directory: self.config.directory.clone(),
            headers: self.config.headers.pairs().collect(),
            auth: self
                .config
                .password
                .clone()
                .map(|p| (self.config.username.clone(), p)),
        });
        self.api = Some(api.clone());
        Ok(api)
    }
}

impl Link for OpenCodeLink {
    type Connection = reqwest::Response;

    /// `GET /event`, until the response headers.
    async fn connect(&mut self, _ends: &LinkEnds<'_>) -> Result<reqwest::Response, Ended> {
        let api = self.api()?;
        let shown = RedactedUrl(self.config.transport.url()).to_string();
        let stream = http::StreamRequest {
            shown: &shown,
            asked: " to GET /event",
            refused_hint: if self.config.password.is_some() {
                " (check `password` and `username`)"
            } else {
                " (the server has a password: set `password`)"
            },
            not_a_stream_hint: ": is it opencode serve?",
            no_content_ends: false,
        };
        stream
            .open(http::event_stream(api.builder(&client::events())))
            .await
    }

    /// The events until the stream ends; the controls meanwhile.
    async fn session(&mut self, response: reqwest::Response, ends: &LinkEnds<'_>) -> Ended {
        let api = match self.api() {
            Ok(api) => api,
            Err(ended) => return ended,
        };
        // Answers need a two-way link; a source only reports.
        let gate = self.config.gate.clone().filter(|_| ends.controls.is_some());
        let mut parser = SseParser::new();
        let mut body = response.bytes_stream();
        let mut out: Vec<Decoded> = Vec::new();
        self.catch_up(&api, ends, &mut out).await;
        self.hold(gate.as_ref(), &out);
        if ends.emit_all(&mut out).await.is_err() {
            return Ended::Stop;
        }
        loop {
            self.start_next(&api, ends);
            let deadline = self.deadlines.values().min().copied();
            tokio::select! {
                next = body.next() => {
                    let end = match next {
                        Some(Ok(chunk)) => {
                            let decoder = &mut self.decoder;
                            parser.feed_ref(&chunk, |event| decoder.decode_text(event.data, &mut out));
                            None
                        }
                        Some(Err(e)) => Some(Ended::Lost(describe_http_error(&e))),
                        // An event cut off by the end is dropped: it may be half of one.
                        None => Some(Ended::Lost("the server ended the event stream".into())),
                    };
                    if parser.take_overflow() {
                        out.push(self.decoder.bad("", "an SSE line or event too large was dropped"));
                    }
                    self.hold(gate.as_ref(), &out);
                    if ends.emit_all(&mut out).await.is_err() {
                        return Ended::Stop;
                    }
                    if let Some(end) = end {
                        return end;
                    }
                }
                signal = ends.next_control() => {
                    let Some(signal) = signal else {
                        self.finish(&api, ends).await;
                        return Ended::Stop;
                    };
                    self.control(&api, gate.as_ref(), ends, signal);
                }
                outcome = finished(&mut self.running) => self.ended(outcome, ends),
                Some(joined) = self.answers.next(), if !self.answers.is_empty() => {
                    self.ended(outcome_of(joined), ends);
                }
                () = sleep_until(deadline) => self.timeouts(&api, gate.as_ref()),
            }
        }
    }
}

impl OpenCodeLink {
    /// Brings the permissions in step with the server's list (`GET /permission`) when a
    /// stream starts. Those never seen (asked before patchbay connected, or while it was
    /// away) are decoded as if asked now, so that they are reported, held by the gate and
    /// answerable. Those seen but no longer listed (answered in OpenCode while patchbay was
    /// away, or lost with a server that restarted) are `approval.decided {value:
    /// "cancel", by: "opencode"}` with `metadata.reason`, so that nothing waits on them.
    /// A failure is only logged: the stream goes on.
    async fn catch_up(&mut self, api: &Api, ends: &LinkEnds<'_>, out: &mut Vec<Decoded>) {
        let waiting = tokio::time::timeout(
            self.config.transport.connect_timeout(),
            api.call(&client::permissions()),
        )
        .await
        .unwrap_or_else(|_| Err("no answer in time".into()));
        let waiting = match waiting {
            Ok(Value::Array(waiting)) => waiting,
            Ok(_) => return,
            Err(why) => {
                return ends.record_error(&format!(
                    "opencode: cannot list the permissions waiting: {why}"
                ));
            }
        };
        let listed: Vec<&str> = waiting
            .iter()
            .filter_map(|p| p.get("id").and_then(Value::as_str))
            .collect();
        let gone: Vec<String> = self
            .decoder
            .pending()
            .filter(|p| !listed.contains(&p.id.as_str()))
            .map(|p| p.id.clone())
            .collect();
        for id in gone {
            self.decoder.take_pending(&id);
            self.deadlines.remove(&id);
            let decided = approvals::decided(
                self.decoder.source(),
                &id,
                Verdict::Cancel,
                "opencode",
            )
            .with_meta(
                "reason",
                "OpenCode no longer waits on it (answered there or ended while patchbay was away)",
            );
            out.push(Decoded::Signal(decided));
        }
        for permission in &waiting {
            let Some(id) = permission.get("id").and_then(Value::as_str) else {
                continue;
            };
            if self.decoder.pending().all(|p| p.id != id) {
                let asked =
                    serde_json::json!({"type": "permission.asked", "properties": permission});
                self.decoder.event(&asked, out);
            }
        }
    }

    /// The gate's deadlines follow what was decoded: a permission it holds starts
    /// waiting, a decided one stops.
    fn hold(&mut self, gate: Option<&GateConfig>, out: &[Decoded]) {
        let Some(gate) = gate else { return };
        for decoded in out {
            let Decoded::Signal(signal) = decoded else {
                continue;
            };
            let prompt = signal.payload.get("promptId").and_then(Value::as_str);
            match (signal.kind.as_str(), prompt) {
                (approvals::REQUESTED, Some(prompt)) => {
                    let tool = signal.payload.get("toolName").and_then(Value::as_str);
                    if tool.is_some_and(|t| gate.holds(t)) {
                        let at = Instant::now() + Duration::from_millis(gate.timeout_ms);
                        self.deadlines.insert(prompt.to_owned(), at);
                    }
                }
                (approvals::DECIDED, Some(prompt)) => {
                    self.deadlines.remove(prompt);
                }
                _ => {}
            }
        }
    }

    /// A control from the graph: prompts and aborts wait their turn, answers go at once,
    /// anything else is refused.
    fn control(
        &mut self,
        api: &Arc<Api>,
        gate: Option<&GateConfig>,
        ends: &LinkEnds<'_>,
        signal: SharedSignal,
    ) {
        let Some(cx) = ends.controls else { return };
        match signal.kind.as_str() {
            PROMPT | control::INTERRUPT | control::CANCEL => {
                if self.queued.len() >= MAX_QUEUED {
                    cx.refused(format!(
                        "{}: {MAX_QUEUED} prompts and aborts already wait for OpenCode",
                        signal.kind
                    ));
                } else {
                    self.queued.push_back(signal);
                }
            }
            control::ANSWER => {
                let answer = match approvals::parse_answer(&signal) {
                    Ok(answer) => answer,
                    Err(why) => return cx.refused(format!("{}: {why}", signal.kind)),
                };
                let Some(id) = answer.prompt_id else {
                    return cx.refused(format!(
                        "{}: no permission of OpenCode is waiting",
                        signal.kind
                    ));
                };
                let verdict = answer
                    .verdict
                    .unwrap_or_else(|| gate.map_or(Verdict::Deny, |g| g.default));
                self.deadlines.remove(&id);
                let reason = approvals::reason(verdict, &answer.by);
                let Some(call) = client::answer(&id, verdict, &reason) else {
                    // `ask`: left to OpenCode's own UI.
                    tracing::info!("opencode {}: permission {id} left to OpenCode", cx.name());
                    return cx.delivered(1);
                };
                if self.answers.len() >= MAX_ANSWERS {
                    return cx.refused(format!(
                        "{}: {MAX_ANSWERS} answers are already on their way",
                        signal.kind
                    ));
                }
                self.decoder.answered(&id, &answer.by);
                self.answers.push(spawn_call(api, Some(signal), call));
            }
            other => cx.refused(format!(
                "{other}: OpenCode takes `prompt`, `control.interrupt`, `control.cancel` and \
                 `control.answer`, not `{other}`"
            )),
        }
    }

    /// Starts the next prompt or abort when none is under way.
    fn start_next(&mut self, api: &Arc<Api>, ends: &LinkEnds<'_>) {
        while self.running.is_none() {
            let Some(signal) = self.queued.pop_front() else {
                return;
            };
            let session = match signal.kind.as_str() {
                PROMPT => self.session.clone(),
                _ => self
                    .session
                    .clone()
                    .or_else(|| self.decoder.current_session().map(str::to_owned)),
            };
            match client::encode_control(&signal, session.as_deref()) {
                Ok(call) => self.running = Some(spawn_call(api, Some(signal), call)),
                Err(EncodeError::NoSession(_)) if signal.kind == PROMPT => {
                    self.running = Some(spawn_create_then_prompt(api, signal));
                }
                Err(why) => {
                    if let Some(cx) = ends.controls {
                        cx.refused(format!("{}: {why}", signal.kind));
                    }
                }
            }
        }
    }

    /// Counts a call that ended; keeps the session it created.
    fn ended(&mut self, outcome: Outcome, ends: &LinkEnds<'_>) {
        if let Some(session) = outcome.created
            && self.session.is_none()
        {
            tracing::info!("opencode: created session {session}");
            ends.set_state(
                HealthState::Ok,
                Some(format!(
                    "connected to {}, session {session}",
                    self.config.transport.shown_url()
                )),
            );
            self.session = Some(session);
        }
        match (outcome.signal, ends.controls, outcome.result) {
            (Some(_), Some(cx), Ok(())) => cx.delivered(1),
            (Some(signal), Some(cx), Err(why)) => cx.refused(format!("{}: {why}", signal.kind)),
            (None, _, Err(why)) => {
                ends.record_error(&format!("opencode: the gate's default not sent: {why}"));
            }
            _ => {}
        }
    }

    /// The gate's default for the permissions whose time is up.
    fn timeouts(&mut self, api: &Arc<Api>, gate: Option<&GateConfig>) {
        let now = Instant::now();
        let due: Vec<String> = self
            .deadlines
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(prompt, _)| prompt.clone())
            .collect();
        let Some(gate) = gate else {
            self.deadlines.clear();
            return;
        };
        for prompt in due {
            self.deadlines.remove(&prompt);
            let reason = approvals::timeout_reason(gate.default, gate.timeout_ms);
            match client::answer(&prompt, gate.default, &reason) {
                Some(call) => {
                    self.decoder.answered(&prompt, "timeout");
                    self.answers.push(spawn_call(api, None, call));
                }
                None => tracing::info!(
                    "opencode: no answer for permission {prompt} in time: left to OpenCode"
                ),
            }
        }
    }

    /// The graph ended: what is under way and what waits is sent and counted before the
    /// link stops (each call is bounded by its timeout).
    async fn finish(&mut self, api: &Arc<Api>, ends: &LinkEnds<'_>) {
        loop {
            self.start_next(api, ends);
            let Some(running) = self.running.take() else {
                break;
            };
            let outcome = outcome_of(running.await);
            self.ended(outcome, ends);
        }
        while let Some(joined) = self.answers.next().await {
            self.ended(outcome_of(joined), ends);
        }
    }
}

/// `call` in a task of its own.
fn spawn_call(api: &Arc<Api>, signal: Option<SharedSignal>, call: Request) -> JoinHandle<Outcome> {
    let api = api.clone();
    tokio::spawn(async move {
        let result = api.call(&call).await.map(drop);
        Outcome {
            signal,
            created: None,
            result,
        }
    })
}

/// `POST /session`, then the prompt to it, in a task of its own.
fn spawn_create_then_prompt(api: &Arc<Api>, signal: SharedSignal) -> JoinHandle<Outcome> {
    let api = api.clone();
    tokio::spawn(async move {
        let created = match api.call(&client::create_session(SESSION_TITLE)).await {
            Ok(session) => session.get("id").and_then(Value::as_str).map(str::to_owned),
            Err(why) => {
                return Outcome {
                    signal: Some(signal),
                    created: None,
                    result: Err(format!("cannot create a session: {why}")),
                };
            }
        };
        let result = match client::encode_control(&signal, created.as_deref()) {
            Ok(call) => api.call(&call).await.map(drop),
            Err(_) if created.is_none() => {
                Err("cannot create a session: OpenCode's answer has no `id`".into())
            }
            Err(why) => Err(why.to_string()),
        };
        Outcome {
            signal: Some(signal),
            created,
            result,
        }
    })
}

/// The outcome of a call's task (one that panicked failed).
fn outcome_of(joined: Result<Outcome, tokio::task::JoinError>) -> Outcome {
    joined.unwrap_or_else(|e| Outcome {
        signal: None,
        created: None,
        result: Err(format!("the call's task failed: {e}")),
    })
}

/// Resolves when the call under way ends (never when there is none).
async fn finished(running: &mut Option<JoinHandle<Outcome>>) -> Outcome {
    let Some(handle) = running.as_mut() else {
        return std::future::pending().await;
    };
    let joined = handle.await;
    *running = None;
    outcome_of(joined)
}

/// Resolves at `deadline`, or never.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(snippet: &str) -> Result<OpenCodeConfig, String> {
        Options::parse_snippet_with(snippet, OpenCodeConfig::from_options)
            .map_err(|d| d.to_string())
    }

    #[test]
    fn the_defaults_are_the_local_server_without_a_session() {
        let config = parse("").expect("config");
        assert_eq!(config.transport.url(), DEFAULT_URL);
        assert_eq!(config.transport.max_attempts, None);
        assert_eq!(config.username, "opencode");
        assert!(config.password.is_none() && config.session.is_none());
        assert!(config.gate.is_none() && config.directory.is_none());
    }

    #[test]
    fn options_are_checked() {
        let config = parse(
            "url = \"http://127.0.0.1:9/\"\ndirectory = \"/w\"\nsession = \"ses_1\"\n\
             password = \"p\"\ngate = { tools = [\"bash\"], timeout_ms = 5, default = \"deny\" }",
        )
        .expect("config");
        assert_eq!(config.directory.as_deref(), Some("/w"));
        assert_eq!(config.session.as_deref(), Some("ses_1"));
        assert!(format!("{config:?}").contains("***"), "{config:?}");
        assert!(!format!("{config:?}").contains("\"p\""), "{config:?}");
        for (snippet, wanted) in [
            ("directory = \"\"", "`directory` is empty"),
            ("session = \" \"", "`session` is empty"),
            ("password = \"\"", "`password` is empty"),
            ("gate = { tools = [] }", "`gate.tools` is empty"),
            ("url = \"http://h:1/?directory=x\"", "without a query"),
            ("url = \"ws://h:1\"", "url"),
            ("token = \"t\"", "token"),
            ("headers = { \"a b\" = \"x\" }", "not a header name"),
        ] {
            let error = parse(snippet).expect_err(snippet);
            assert!(error.contains(wanted), "{snippet}: {error}");
        }
    }

    #[test]
    fn error_answers_are_cut_short() {
        assert_eq!(
            error_reason(br#"{"name":"PermissionNotFoundError","data":{"message":"gone"}}"#)
                .as_deref(),
            Some("PermissionNotFoundError: gone")
        );
        assert_eq!(
            error_reason(br#"{"name":"NotFound"}"#).as_deref(),
            Some("NotFound")
        );
        assert_eq!(error_reason(b"  ").as_deref(), None);
        let long = "x".repeat(500);
        let cut = error_reason(long.as_bytes()).expect("a reason");
        assert_eq!(cut.chars().count(), MAX_REASON + 1);
        assert!(cut.ends_with('…'));
    }
}
