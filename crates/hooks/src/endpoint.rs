//! The endpoint itself: the listener, the token, the signals to the graph, and the calls
//! held by the gate.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use patchbay_graph::approvals::{self, GateConfig, Verdict};
use patchbay_graph::{ComponentError, ComponentStats, HealthState, LinkEnds};
use patchbay_server::Secret;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::well_known::AgentState;
use patchbay_signal::{Signal, control};
use patchbay_transport::listen::{self, Access, Listener, Origins};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use crate::{Call, Decision, HEALTH_PATH, HOOK_PATH, HookAgent, Settings};

/// How many signals may wait between the handlers and the graph; beyond, hook signals
/// are dropped (and counted) rather than holding the agent up.
const SIGNALS_QUEUED: usize = 1024;

/// A held call.
struct Waiting {
    prompt_id: String,
    /// The decision, its reason, and who gave it.
    reply: oneshot::Sender<(Verdict, String, String)>,
}

/// What the request handlers share with the component's loop.
struct Shared<A> {
    name: &'static str,
    agent: Mutex<A>,
    signals: mpsc::Sender<Decoded>,
    token: Option<Secret>,
    /// The gate, when the component takes answers (an output).
    gate: Option<GateConfig>,
    waiting: Mutex<VecDeque<Waiting>>,
    stats: Arc<ComponentStats>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<A> Shared<A> {
    /// Queues signals for the graph, in order.
    fn send(&self, signals: impl IntoIterator<Item = Decoded>) {
        for decoded in signals {
            if self.signals.try_send(decoded).is_err() {
                self.stats.record_error(format!(
                    "{}: the graph is not keeping up: a hook signal was dropped",
                    self.name
                ));
            }
        }
    }

    fn send_signals(&self, signals: impl IntoIterator<Item = Signal>) {
        self.send(signals.into_iter().map(Decoded::Signal));
    }

    /// The verdict a call gets when nothing answers it: the gate's default.
    fn default_verdict(&self) -> Verdict {
        self.gate.as_ref().map_or(Verdict::Ask, |g| g.default)
    }
}

/// Runs the endpoint of `agent` with `settings` between the graph's `ends` until the
/// graph stops it: the listener on `settings.listen` (`POST /hook`, `GET /health`), each
/// hook's signals into the graph (out of `NAME.inbound` for an output), and, when the
/// component runs as an output with a `gate`, the held calls answered by the
/// `control.answer` signals at its inputs. A listen-only source ignores the gate.
pub async fn serve<A: HookAgent>(
    agent: A,
    settings: Settings,
    ends: LinkEnds<'_>,
) -> Result<(), ComponentError> {
    let name = agent.name();
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", settings.listen))?;
    let local = listener.local_addr()?;
    let stats = match (ends.controls, ends.signals_in) {
        (Some(cx), _) => Arc::clone(cx.stats()),
        (None, Some(cx)) => Arc::clone(cx.stats()),
        (None, None) => return Err(format!("{name}: no graph ends").into()),
    };
    stats.set_gauge("port", f64::from(local.port()));
    let (tx, mut rx) = mpsc::channel(SIGNALS_QUEUED);
    let shared = Arc::new(Shared {
        name,
        agent: Mutex::new(agent),
        signals: tx,
        token: settings.token.clone(),
        gate: settings.gate.clone().filter(|_| ends.controls.is_some()),
        waiting: Mutex::new(VecDeque::new()),
        stats,
    });
    let app = Router::new()
        .route(HOOK_PATH, post(hook_handler::<A>))
        .route(HEALTH_PATH, get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(settings.max_body))
        .with_state(Arc::clone(&shared));
    // Agents' hooks send no Origin; a browser does: a web page must not post hooks.
    let door = Listener {
        name: format!("{name} {local}"),
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
    tracing::info!(url = %url, "{name}: hook endpoint listening");
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
        let _ = waiting.reply.send((
            shared.default_verdict(),
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
fn answer<A>(shared: &Shared<A>, signal: &Signal) {
    if signal.kind != control::ANSWER {
        return;
    }
    let name = shared.name;
    let answer = match approvals::parse_answer(signal) {
        Ok(a) => a,
        Err(e) => {
            shared
                .stats
                .record_error(format!("{name}: control.answer ignored: {e}"));
            return;
        }
    };
    let Some(prompt_id) = answer.prompt_id else {
        tracing::debug!("{name}: a control.answer came while nothing waits");
        return;
    };
    let mut waiting = lock(&shared.waiting);
    let Some(index) = waiting.iter().position(|w| w.prompt_id == prompt_id) else {
        // Another agent's approval, or a call already decided.
        tracing::debug!(prompt = %prompt_id, "{name}: no call of this component waits for this answer");
        return;
    };
    let Some(w) = waiting.remove(index) else {
        return;
    };
    let verdict = answer.verdict.unwrap_or_else(|| shared.default_verdict());
    let _ = w
        .reply
        .send((verdict, approvals::reason(verdict, &answer.by), answer.by));
}

fn refuse(status: StatusCode, message: &'static str) -> Response {
    (status, message).into_response()
}

async fn hook_handler<A: HookAgent>(
    State(shared): State<Arc<Shared<A>>>,
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
        let mut agent = lock(&shared.agent);
        match &hook {
            Some(hook) => agent.decode(hook, &mut out),
            None => agent.decode_bytes(&body, &mut out),
        }
    }
    let bad = out.iter().any(Decoded::is_bad);
    shared.send(out);
    let Some(hook) = hook.filter(|_| !bad) else {
        return refuse(StatusCode::BAD_REQUEST, "not a hook payload");
    };
    let after = lock(&shared.agent).after(&hook);
    shared.send(after);
    let call = match &shared.gate {
        Some(gate) => lock(&shared.agent)
            .call(&hook)
            .filter(|call| gate.holds(&call.tool))
            .map(|call| (gate, call)),
        None => None,
    };
    let answer = match call {
        Some((gate, call)) => held(&shared, gate, &hook, call).await,
        None => json!({}),
    };
    axum::Json(answer).into_response()
}

/// A call of a held tool waits for its answer (or the gate's default), between the
/// agent's `waiting` state and the state its verdict leaves it in.
async fn held<A: HookAgent>(
    shared: &Shared<A>,
    gate: &GateConfig,
    hook: &Value,
    call: Call,
) -> Value {
    if let Some(answer) = lock(&shared.agent).decided_before(hook, &call) {
        return answer;
    }
    let (reply_tx, reply_rx) = oneshot::channel();
    lock(&shared.waiting).push_back(Waiting {
        prompt_id: call.prompt_id.clone(),
        reply: reply_tx,
    });
    {
        let mut agent = lock(&shared.agent);
        let reason = format!("approval for {}", call.tool);
        let waiting = agent.state_change(hook, AgentState::Waiting, reason);
        let request = agent.requested(hook, &call, gate);
        shared.send_signals([waiting, request]);
    }
    let (verdict, reason, by) =
        match tokio::time::timeout(Duration::from_millis(gate.timeout_ms), reply_rx).await {
            Ok(Ok(decided)) => decided,
            _ => {
                lock(&shared.waiting).retain(|w| w.prompt_id != call.prompt_id);
                (
                    gate.default,
                    approvals::timeout_reason(gate.default, gate.timeout_ms),
                    "timeout".to_owned(),
                )
            }
        };
    let mut agent = lock(&shared.agent);
    let verdict = agent.verdict(verdict);
    let answer = agent.answer(hook, &call, verdict, &reason);
    let decision = Decision {
        call: &call,
        verdict,
        by: &by,
        reason: &reason,
    };
    let decided = agent.decided(hook, &decision);
    let next = agent.state_after(verdict);
    let change = agent.state_change(hook, next, reason);
    shared.send_signals([decided, change]);
    answer
}
