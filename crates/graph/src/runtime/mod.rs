//! The async runtime: sources and outputs as tokio tasks around the [`Engine`](crate::engine::Engine).
//!
//! Sources send into one bounded queue (a full queue makes them wait: back-pressure);
//! one task runs the engine; each output has its own bounded queue with its configured
//! overflow decision, so a slow output only ever affects itself unless it is configured
//! to `block`.
//!
//! A running graph takes a new config by diff ([`Reload`]): components whose type and
//! options are unchanged keep running (their connections, queues, sequence numbers and
//! filter state), changed ones are rebuilt and swapped in, removed ones drain. Each
//! source and output runs in its own task: a panic there is caught, counted and reported
//! ([`Notice::Panicked`]), and the component can be rebuilt by a reload; a filter's
//! panic is contained by the engine.

mod running;
mod task;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use patchbay_signal::now_ms;
use tokio::sync::{mpsc, oneshot};

use crate::compile::{Graph, NodeKind};
use crate::telemetry::{ComponentStats, Role, Telemetry};

use running::Running;

/// How a run ended.
#[derive(Debug)]
pub struct RunReport {
    /// Every component's final counters and health.
    pub telemetry: Arc<Telemetry>,
    /// Whether the drain on shutdown finished within `shutdown_timeout_ms`.
    pub drained: bool,
    /// A component that could not start (`NAME: why`): the graph was stopped.
    pub start_failure: Option<String>,
    /// What may have lost signals: components that panicked, finite sources that failed
    /// before their end (`NAME: why`).
    pub failures: Vec<String>,
}

/// A request to a running graph: run this config instead, by diff.
#[derive(Debug)]
pub struct Reload {
    /// The new config, compiled; or why it could not be (the errors, for `/health`):
    /// then the running graph goes on untouched.
    pub graph: Result<Graph, String>,
    /// Where to say how it went.
    pub reply: Option<oneshot::Sender<Result<String, String>>>,
}

/// What a running graph tells the program that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Every component that acquires something at start (a port, a file) has: the
    /// service is ready.
    Ready,
    /// A component could not start (`NAME: why`); the graph is stopping.
    StartFailed(String),
    /// A source or output panicked (its name): a reload rebuilds it.
    Panicked(String),
}

/// Channels to and from a running graph (all optional).
#[derive(Debug, Default)]
pub struct Controls {
    /// Reloads to apply, in order.
    pub reloads: Option<mpsc::Receiver<Reload>>,
    /// Where notices go.
    pub notices: Option<mpsc::UnboundedSender<Notice>>,
}

/// Builds the telemetry for a graph's nodes (one stats handle per node, in node order).
pub fn telemetry_for(graph: &Graph) -> (Telemetry, Vec<Arc<ComponentStats>>) {
    let mut telemetry = Telemetry::default();
    let stats = graph
        .nodes
        .iter()
        .map(|n| telemetry.register(stats_for(graph, n)))
        .collect();
    (telemetry, stats)
}

/// The stats of a node of `graph`, its inputs named.
fn stats_for(graph: &Graph, n: &crate::compile::Node) -> ComponentStats {
    ComponentStats::new(&n.name, &n.type_name, role_of(&n.kind)).with_inputs(inputs_of(graph, n))
}

fn role_of(kind: &NodeKind) -> Role {
    match kind {
        NodeKind::Source(_) | NodeKind::Inbound { .. } => Role::Source,
        NodeKind::Filter(_) => Role::Filter,
        NodeKind::Output { .. } => Role::Output,
    }
}

fn inputs_of(graph: &Graph, n: &crate::compile::Node) -> Vec<String> {
    n.inputs
        .iter()
        .map(|e| graph.nodes[e.from].port_name(e.port))
        .collect()
}

/// Runs a graph until every source has ended (then drains and returns), or until
/// `stop` resolves (then stops the sources and drains for at most
/// `runtime.shutdown_timeout_ms`).
pub async fn run(graph: Graph, stop: impl Future<Output = ()>) -> RunReport {
    run_with(graph, stop, Controls::default()).await
}

/// [`run`], taking reloads and giving notices.
pub async fn run_with(
    graph: Graph,
    stop: impl Future<Output = ()>,
    controls: Controls,
) -> RunReport {
    let Controls {
        mut reloads,
        notices,
    } = controls;
    let mut running = Running::start(graph, notices).await;
    let mut events = Vec::with_capacity(running::ENGINE_BATCH);

    let stop = std::pin::pin!(stop);
    let mut stop = stop;
    let mut stopping: Option<tokio::time::Instant> = None;
    if !running.nothing_can_arrive() {
        loop {
            let due = running.next_wall_due();
            let timer = async {
                match due {
                    Some(d) => {
                        let wait = (d - now_ms()).max(0) as u64;
                        tokio::time::sleep(Duration::from_millis(wait)).await
                    }
                    None => std::future::pending().await,
                }
            };
            let deadline = async {
                match stopping {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let reload = async {
                match reloads.as_mut() {
                    Some(r) if stopping.is_none() => r.recv().await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                // Everything the sources have queued, at once (bounded): one wake-up and
                // one hand-over to each output for a burst.
                n = running.rx.recv_many(&mut events, running::ENGINE_BATCH) => {
                    if n == 0 {
                        break;
                    }
                    running.on_events(&mut events);
                    if running.finished(stopping.is_some()) {
                        deliver_or_stop(&mut running, stop.as_mut(), &mut stopping).await;
                        break;
                    }
                },
                Some(life) = running.life_rx.recv() => {
                    running.on_life(life);
                    if running.start_failed() && stopping.is_none() {
                        stopping = Some(running.stop());
                    }
                    if running.finished(stopping.is_some()) {
                        break;
                    }
                }
                () = timer => running.fire_wall_timers(),
                reload = reload => match reload {
                    Some(r) => running.reload(r).await,
                    None => reloads = None,
                },
                () = &mut stop, if stopping.is_none() => {
                    stopping = Some(begin_stop(&mut running));
                    if running.finished(true) {
                        break;
                    }
                }
                () = deadline => break,
            }
            deliver_or_stop(&mut running, stop.as_mut(), &mut stopping).await;
            if stopping.is_some() && running.finished(true) {
                break;
            }
        }
    }
    running.finish(stopping).await
}

fn begin_stop(running: &mut Running) -> tokio::time::Instant {
    tracing::info!("shutting down: stopping sources, draining");
    running.stop()
}

/// Hands what reached outputs to their queues. Before a stop, the wait for a full
/// `block` queue gives way to a stop request (an output whose reader stopped reading
/// must not keep the daemon from stopping); after it, it lasts until the deadline.
async fn deliver_or_stop(
    running: &mut Running,
    mut stop: std::pin::Pin<&mut impl Future<Output = ()>>,
    stopping: &mut Option<tokio::time::Instant>,
) {
    if stopping.is_none() {
        let stopped = tokio::select! {
            () = running.deliver_pending() => false,
            () = stop.as_mut() => true,
        };
        if !stopped {
            return;
        }
        *stopping = Some(begin_stop(running));
    }
    if let Some(at) = *stopping {
        let _ = tokio::time::timeout_at(at, running.deliver_pending()).await;
    }
}
