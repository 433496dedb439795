//! The hook endpoint: `type = "claude_code"` as a source (listen only) and as a two-way
//! output (`control.answer` in for the gate, the hook signals out of `NAME.inbound`).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use patchbay_graph::approvals;
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, HealthState, LinkEnds, Options, Output, OutputContext,
    Source, SourceContext,
};
use patchbay_server::{Secret, parse_listen};
use patchbay_signal::normalize::Decoded;
use patchbay_signal::well_known::AgentState;
use patchbay_signal::{Signal, control};
use patchbay_transport::listen::{self, Access, Limits, Listener, Origins};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};

use crate::client::{HEALTH_PATH, HOOK_PATH};
use crate::decode::{HookDecoder, agent_of};
use crate::gate::{self, CallKey, Decided, GateConfig, Verdict};
use crate::transcript::TranscriptReader;

/// The address the component listens on when the config names none.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7879";

/// `[outputs.NAME]` (two-way: takes `control.answer` for the gate) or `[sources.NAME]`
/// (listen only) with `type = "claude_code"`: the endpoint Claude Code's http hooks post
/// to (`http://LISTEN/hook`; `patchbay hooks install` writes them).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaudeCodeConfig {
    /// `IP:PORT` to listen on (`localhost:PORT` means `127.0.0.1:PORT`). Default
    /// `127.0.0.1:7879`. Not on loopback, a `token` is required.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Bearer token the hooks must send (`Authorization: Bearer …`). `patchbay hooks
    /// install` makes them send `$PATCHBAY_HOOK_TOKEN`, so it is never written in clear.
    #[serde(default)]
    pub token: Option<Secret>,
    /// Hold the calls of some tools until a `control.answer` decides them (outputs only).
    #[serde(default)]
    pub gate: Option<GateConfig>,
    /// Largest hook body accepted, in bytes (a `Write` carries the whole file). Default
    /// 8 MiB.
    #[serde(default = "default_max_body")]
    pub max_body: usize,
    /// Host names the endpoint answers to besides `localhost`, `127.0.0.1` and `[::1]`
    /// (any port); `["*"]` for any. Absent: a loopback `listen` answers only to the
    /// loopback names (the hooks post to `http://127.0.0.1:PORT/hook`), any other `listen`
    /// to any host. A request naming another host gets 403; one with an `Origin` (a web
    /// page) always does.
    #[serde(default)]
    pub allowed_hosts: Option<Vec<String>>,
    /// How long a client may take to send a request's head, in ms (from the connection's
    /// start, then from the first byte of each next request); past it the connection is
    /// closed. From 1 to 86400000 (one day). Default 10000.
    #[serde(default = "default_header_timeout_ms")]
    pub header_timeout_ms: u64,
    /// How long a keep-alive connection may wait for its next request, in ms, before it is
    /// closed (a call held by the gate is not idle). From 1 to 86400000. Default 60000.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// How many connections may be open at once; beyond it a new one gets 503 and is
    /// closed at once, counted as `too_many_connections`. From 1 to 1000000. Default 1024.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
}

fn default_listen() -> String {
    DEFAULT_LISTEN.into()
}
fn default_header_timeout_ms() -> u64 {
    listen::DEFAULT_HEADER_TIMEOUT_MS
}
fn default_idle_timeout_ms() -> u64 {
    listen::DEFAULT_IDLE_TIMEOUT_MS
}
fn default_max_connections() -> usize {
    listen::DEFAULT_MAX_CONNECTIONS
}
fn default_max_body() -> usize {
    8 << 20
}

/// Checked options.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The address to bind.
    pub listen: SocketAddr,
    /// The token, if any.
    pub token: Option<Secret>,
    /// The gate, if any.
    pub gate: Option<GateConfig>,
    /// Largest body.
    pub max_body: usize,
    /// Host names answered besides the loopback ones.
    pub allowed_hosts: Option<Vec<String>>,
    /// Header and idle timeouts, connection cap.
    pub limits: Limits,
}

impl Settings {
    /// Checks parsed options; an error names the offending key and what is wrong.
    pub fn check(config: ClaudeCodeConfig) -> Result<Settings, (&'static str, String)> {
        let listen = parse_listen(&config.listen).ok_or_else(|| {
            (
                "listen",
                format!(
                    "`{}` is not an `IP:PORT` address (e.g. `{DEFAULT_LISTEN}`)",
                    config.listen
                ),
            )
        })?;
        if let Some(Secret(t)) = &config.token
            && t.trim().is_empty()
        {
            return Err(("token", "the token must not be empty".into()));
        }
        if !listen.ip().is_loopback() && config.token.is_none() {
            return Err((
                "listen",
                format!(
                    "`{listen}` is not a loopback address: set a `token` so that only hooks \
                     that know it are heard"
                ),
            ));
        }
        if let Some(gate) = &config.gate {
            gate.check().map_err(|message| ("gate", message))?;
        }
        if config.max_body == 0 {
            return Err(("max_body", "must be at least 1 byte".into()));
        }
        if let Some(hosts) = &config.allowed_hosts {
            listen::check_hosts(hosts).map_err(|(_, message)| ("allowed_hosts", message))?;
        }
        let limits = Limits::check(
            config.header_timeout_ms,
            config.idle_timeout_ms,
            config.max_connections,
        )?;
        Ok(Settings {
            listen,
            token: config.token,
            gate: config.gate,
            max_body: config.max_body,
            allowed_hosts: config.allowed_hosts,
            limits,
        })
    }

    /// The URL the hooks post to.
    pub fn hook_url(&self) -> String {
        let host = if self.listen.ip().is_unspecified() {
            "127.0.0.1".to_owned()
        } else if self.listen.is_ipv6() {
            format!("[{}]", self.listen.ip())
        } else {
            self.listen.ip().to_string()
        };
        format!("http://{host}:{}{HOOK_PATH}", self.listen.port())
    }
}

fn parse_options(options: &Options<'_>) -> Result<Settings, Diagnostic> {
    let config: ClaudeCodeConfig = options.parse()?;
    Settings::check(config).map_err(|(key, msg)| options.error_at(key, msg))
}

pub(crate) fn build_source(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let settings = parse_options(options)?;
    if settings.gate.is_some() {
        return Err(options.error_at(
            "gate",
            "a gate needs answers: declare the component under [outputs.NAME] with the \
             `inputs` its `control.answer` signals come from",
        ));
    }
    Ok(Box::new(ClaudeCode { settings }))
}

pub(crate) fn build_output(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(ClaudeCode {
        settings: parse_options(options)?,
    }))
}

/// One hook endpoint; the same value runs as a source or as an output.
struct ClaudeCode {
    settings: Settings,
}

impl Source for ClaudeCode {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = format!("claude_code:{}", cx.name());
            serve(self.settings, source, LinkEnds::source(&cx)).await
        })
    }
}

impl Output for ClaudeCode {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = format!("claude_code:{}", cx.name());
            serve(self.settings, source, LinkEnds::output(&cx)).await
        })
    }
}

/// A held call.
struct Waiting {
    prompt_id: String,
    /// The decision, its reason, and who gave it.
    reply: oneshot::Sender<(Verdict, String, String)>,
}

/// What the request handlers share with the component's loop.
struct Shared {
    decoder: Mutex<HookDecoder>,
    transcripts: Mutex<TranscriptReader>,
    signals: mpsc::Sender<Decoded>,
    token: Option<Secret>,
    /// The gate, when the component takes answers (an output).
    gate: Option<GateConfig>,
    waiting: Mutex<VecDeque<Waiting>>,
    decided: Mutex<Decided>,
    stats: Arc<patchbay_graph::ComponentStats>,
}

/// How many signals may wait between the handlers and the graph; beyond, hook signals
/// are dropped (and counted) rather than holding Claude Code up.
const SIGNALS_QUEUED: usize = 1024;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Queues signals for the graph, in order.
    fn send(&self, signals: impl IntoIterator<Item = Decoded>) {
        for decoded in signals {
            if self.signals.try_send(decoded).is_err() {
                self.stats.record_error(
                    "claude_code: the graph is not keeping up: a hook signal was dropped",
                );
            }
        }
    }

    fn send_signal(&self, signal: Signal) {
        self.send([Decoded::Signal(signal)]);
    }
}

async fn serve(
    settings: Settings,
    source: String,
    ends: LinkEnds<'_>,
) -> Result<(), ComponentError> {
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", settings.listen))?;
    let local = listener.local_addr()?;
    let stats = match (ends.controls, ends.signals_in) {
        (Some(cx), _) => Arc::clone(cx.stats()),
        (None, Some(cx)) => Arc::clone(cx.stats()),
        (None, None) => return Err("claude_code: no graph ends".into()),
    };
    stats.set_gauge("port", f64::from(local.port()));
    let (tx, mut rx) = mpsc::channel(SIGNALS_QUEUED);
    let shared = Arc::new(Shared {
        decoder: Mutex::new(HookDecoder::new(source)),
        transcripts: Mutex::new(TranscriptReader::new()),
        signals: tx,
        token: settings.token.clone(),
        gate: settings.gate.clone().filter(|_| ends.controls.is_some()),
        waiting: Mutex::new(VecDeque::new()),
        decided: Mutex::new(Decided::default()),
        stats,
    });
    let app = Router::new()
        .route(HOOK_PATH, post(hook_handler))
        .route(HEALTH_PATH, get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(settings.max_body))
        .with_state(Arc::clone(&shared));
    // Claude Code sends no Origin; a browser does: a web page must not post hooks.
    let door = Listener {
        name: format!("claude_code {local}"),
        limits: settings.limits,
        access: Access::new(local, settings.allowed_hosts.clone(), Origins::None),
        stats: Arc::clone(&shared.stats),
        refusal: listen::text_refusal,
    };
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let mut server = tokio::spawn(listen::serve(listener, app, door, async move {
        let _ = stop_rx.wait_for(|stop| *stop).await;
    }));
    let url = format!("http://{local}{HOOK_PATH}");
    tracing::info!(url = %url, "claude_code: hook endpoint listening");
    ends.set_state(HealthState::Ok, Some(format!("hooks: {url}")));

    let result = loop {
        tokio::select! {
            decoded = rx.recv() => {
                let Some(decoded) = decoded else { break Ok(()) };
                let mut out = vec![decoded];
                if ends.emit_all(&mut out).await.is_err() {
                    break Ok(());
                }
            }
            signal = ends.next_control() => match signal {
                Some(signal) => {
                    answer(&shared, &signal);
                    if let Some(cx) = ends.controls {
                        cx.delivered(1);
                    }
                }
                None => break Ok(()),
            },
            ended = &mut server => {
                break Err(match ended {
                    Ok(()) => "server stopped".into(),
                    Err(e) => format!("server task failed: {e}").into(),
                });
            }
            () = ends.shutdown(), if ends.controls.is_none() => break Ok(()),
        }
    };
    // Held calls get the default now rather than waiting for a graph that is gone.
    let held: Vec<Waiting> = lock(&shared.waiting).drain(..).collect();
    for waiting in held {
        let decision = shared.gate.as_ref().map_or(Verdict::Ask, |g| g.default);
        let _ = waiting.reply.send((
            decision,
            "patchbay: stopping, the gate's default".into(),
            "patchbay".into(),
        ));
    }
    let _ = stop_tx.send(true);
    if !server.is_finished()
        && tokio::time::timeout(Duration::from_secs(1), &mut server)
            .await
            .is_err()
    {
        server.abort();
    }
    result
}

/// A `control.answer` decides the call it names (one without `promptId` comes named by
/// [`LinkEnds::next_control`] when the oldest approval of the graph is this component's);
/// other signals are not for this component and are let through silently.
fn answer(shared: &Shared, signal: &Signal) {
    if signal.kind != control::ANSWER {
        return;
    }
    let answer = match approvals::parse_answer(signal) {
        Ok(a) => a,
        Err(e) => {
            shared
                .stats
                .record_error(format!("claude_code: control.answer ignored: {e}"));
            return;
        }
    };
    let Some(prompt_id) = answer.prompt_id else {
        tracing::debug!("claude_code: a control.answer came while nothing waits");
        return;
    };
    let mut waiting = lock(&shared.waiting);
    let Some(index) = waiting.iter().position(|w| w.prompt_id == prompt_id) else {
        // Another agent's approval, or a call already decided.
        tracing::debug!(prompt = %prompt_id, "claude_code: no call of this component waits for this answer");
        return;
    };
    let Some(w) = waiting.remove(index) else {
        return;
    };
    let verdict = answer
        .verdict
        .unwrap_or_else(|| shared.gate.as_ref().map_or(Verdict::Ask, |g| g.default));
    let _ = w
        .reply
        .send((verdict, approvals::reason(verdict, &answer.by), answer.by));
}

fn refuse(status: StatusCode, message: &'static str) -> Response {
    (status, message).into_response()
}

async fn hook_handler(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // `Host` and `Origin` were checked at the door (`listen::serve`).
    if let Some(secret) = &shared.token {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if !bearer.is_some_and(|g| secret.matches(g)) {
            shared.stats.http_refused("unauthorized");
            return refuse(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
        }
    }
    let hook = serde_json::from_slice::<Value>(&body).ok();
    let mut out = Vec::new();
    {
        let mut decoder = lock(&shared.decoder);
        match &hook {
            Some(hook) => decoder.decode(hook, &mut out),
            None => decoder.decode_bytes(&body, &mut out),
        }
    }
    let bad = out.iter().any(Decoded::is_bad);
    shared.send(out);
    let Some(hook) = hook.filter(|_| !bad) else {
        return refuse(StatusCode::BAD_REQUEST, "not a hook payload");
    };
    let event = hook
        .get("hook_event_name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let answer = match event.as_str() {
        "PreToolUse" | "PermissionRequest" => held(&shared, &hook, &event).await,
        "Stop" | "SubagentStop" => {
            token_usage(&shared, &hook);
            serde_json::json!({})
        }
        _ => serde_json::json!({}),
    };
    axum::Json(answer).into_response()
}

/// On `Stop`/`SubagentStop`: the `token_usage` of what the transcript gained.
fn token_usage(shared: &Shared, hook: &Value) {
    let key = if hook.get("agent_transcript_path").is_some() {
        "agent_transcript_path"
    } else {
        "transcript_path"
    };
    let Some(path) = hook.get(key).and_then(Value::as_str) else {
        return;
    };
    let source = lock(&shared.decoder).source().to_owned();
    let signals = lock(&shared.transcripts).usage(Path::new(path), &source, &agent_of(hook));
    shared.send(signals.into_iter().map(Decoded::Signal));
}

/// A `PreToolUse` or `PermissionRequest` of a gated tool waits for its answer; others
/// get no decision (`{}`).
async fn held(shared: &Shared, hook: &Value, event: &str) -> Value {
    let Some(gate) = &shared.gate else {
        return serde_json::json!({});
    };
    let tool = hook
        .get("tool_name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !gate.holds(tool) {
        return serde_json::json!({});
    }
    let key = CallKey::of(hook);
    if event == "PermissionRequest"
        && let Some((decision, reason)) = lock(&shared.decided).take(&key)
    {
        // The same call was held at its PreToolUse: one call, one approval.
        return gate::hook_answer(event, decision, &reason);
    }
    let prompt_id = hook
        .get("tool_use_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("permission-{}", patchbay_signal::next_id()));
    let (reply_tx, reply_rx) = oneshot::channel();
    lock(&shared.waiting).push_back(Waiting {
        prompt_id: prompt_id.clone(),
        reply: reply_tx,
    });
    let input = hook
        .get("tool_input")
        .cloned()
        .unwrap_or_else(|| Value::Object(Default::default()));
    let choices = ["allow", "deny", "ask"].map(String::from);
    {
        let mut decoder = lock(&shared.decoder);
        let waiting =
            decoder.state_change(hook, AgentState::Waiting, format!("approval for {tool}"));
        let payload =
            approvals::request_payload(&prompt_id, &agent_of(hook), tool, input, &choices);
        let mut request = decoder.signal_for(hook, approvals::REQUESTED, payload);
        let meta = request.metadata_mut();
        meta.insert("hookEvent".into(), event.into());
        meta.insert("timeoutMs".into(), gate.timeout_ms.into());
        meta.insert("default".into(), gate.default.as_str().into());
        shared.send_signal(waiting);
        shared.send_signal(request);
    }
    let (decision, reason, by) =
        match tokio::time::timeout(Duration::from_millis(gate.timeout_ms), reply_rx).await {
            Ok(Ok(decided)) => decided,
            _ => {
                lock(&shared.waiting).retain(|w| w.prompt_id != prompt_id);
                (
                    gate.default,
                    approvals::timeout_reason(gate.default, gate.timeout_ms),
                    "timeout".to_owned(),
                )
            }
        };
    let decision = gate::decision(decision);
    if event == "PreToolUse" {
        lock(&shared.decided).record(key, decision, reason.clone());
    }
    {
        let mut decoder = lock(&shared.decoder);
        let mut decided = decoder.signal_for(
            hook,
            approvals::DECIDED,
            approvals::decided_payload(&prompt_id, decision, &by),
        );
        let meta = decided.metadata_mut();
        meta.insert("toolName".into(), tool.into());
        meta.insert("reason".into(), reason.clone().into());
        let next = match decision {
            Verdict::Allow | Verdict::Always => AgentState::Acting,
            Verdict::Deny | Verdict::Cancel => AgentState::Thinking,
            Verdict::Ask => AgentState::Waiting,
        };
        let change = decoder.state_change(hook, next, reason.clone());
        shared.send_signal(decided);
        shared.send_signal(change);
    }
    gate::hook_answer(event, decision, &reason)
}
