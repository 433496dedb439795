//! The async runtime: sources and outputs as tokio tasks around the [`Engine`].
//!
//! Sources send into one bounded queue (a full queue makes them wait: back-pressure);
//! one task runs the engine; each output has its own bounded queue with its configured
//! overflow decision, so a slow output only ever affects itself unless it is configured
//! to `block`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use patchbay_signal::{SharedSignal, now_ms};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::compile::{Graph, NodeKind};
use crate::component::{Deadline, Event, OutputContext, Shutdown, SourceContext};
use crate::engine::Engine;
use crate::queue::SignalQueue;
use crate::telemetry::{ComponentStats, HealthState, Role, Telemetry};

/// At most this many events are taken from the sources at once (a batch never waits to
/// fill: it is whatever is ready).
const ENGINE_BATCH: usize = 256;

/// How long outputs still running at the shutdown deadline get to report what they could
/// not deliver before they are stopped.
const REPORT_GRACE: Duration = Duration::from_millis(250);

/// How a run ended.
#[derive(Debug)]
pub struct RunReport {
    /// Every component's final counters and health.
    pub telemetry: Arc<Telemetry>,
    /// Whether the drain on shutdown finished within `shutdown_timeout_ms`.
    pub drained: bool,
}

/// Builds the telemetry for a graph's nodes (one stats handle per node, in node order).
pub fn telemetry_for(graph: &Graph) -> (Telemetry, Vec<Arc<ComponentStats>>) {
    let mut telemetry = Telemetry::default();
    let stats = graph
        .nodes
        .iter()
        .map(|n| {
            let role = match n.kind {
                NodeKind::Source(_) | NodeKind::Inbound { .. } => Role::Source,
                NodeKind::Filter(_) => Role::Filter,
                NodeKind::Output { .. } => Role::Output,
            };
            let inputs = n
                .inputs
                .iter()
                .map(|e| graph.nodes[e.from].port_name(e.port))
                .collect();
            telemetry.register(ComponentStats::new(&n.name, &n.type_name, role).with_inputs(inputs))
        })
        .collect();
    (telemetry, stats)
}

/// Runs a graph until every source has ended (then drains and returns), or until
/// `stop` resolves (then stops the sources and drains for at most
/// `runtime.shutdown_timeout_ms`).
pub async fn run(graph: Graph, stop: impl Future<Output = ()>) -> RunReport {
    let (telemetry, stats) = telemetry_for(&graph);
    let telemetry = Arc::new(telemetry);
    let mut engine = Engine::new(&graph.nodes, stats.clone());
    let (shutdown_tx, shutdown) = Shutdown::new();
    let (tx, mut rx) = mpsc::channel::<Event>(graph.runtime.queue.max(1));
    let timeout = Duration::from_millis(graph.runtime.shutdown_timeout_ms);

    let mut queues: Vec<Option<Arc<SignalQueue>>> = vec![None; graph.nodes.len()];
    let mut inbound_of: Vec<Option<usize>> = vec![None; graph.nodes.len()];
    let mut sources_left = 0usize;
    let mut has_endless = false;
    for (i, node) in graph.nodes.iter().enumerate() {
        match &node.kind {
            NodeKind::Output {
                when_full, queue, ..
            } => queues[i] = Some(Arc::new(SignalQueue::new(*queue, *when_full))),
            NodeKind::Inbound { output } => {
                inbound_of[*output] = Some(i);
                has_endless = true;
            }
            NodeKind::Source(s) => {
                sources_left += 1;
                has_endless |= !s.is_finite();
            }
            NodeKind::Filter(_) => {}
        }
    }

    let mut sources = JoinSet::new();
    let mut outputs = JoinSet::new();
    for (i, node) in graph.nodes.into_iter().enumerate() {
        let name = node.name;
        match node.kind {
            NodeKind::Source(source) => {
                let cx = SourceContext::new(
                    i,
                    name,
                    tx.clone(),
                    Arc::clone(&stats[i]),
                    shutdown.clone(),
                );
                let tx = tx.clone();
                let st = Arc::clone(&stats[i]);
                sources.spawn(async move {
                    st.set_state(HealthState::Ok, None);
                    match source.run(cx).await {
                        Ok(()) => st.set_state(HealthState::Stopped, None),
                        Err(e) => {
                            st.record_error(&e);
                            st.set_state(HealthState::Failed, None);
                        }
                    }
                    let _ = tx.send(Event::Ended(i)).await;
                });
            }
            NodeKind::Output { output, .. } => {
                let inbound = inbound_of[i].map(|n| {
                    stats[n].set_state(HealthState::Ok, None);
                    SourceContext::new(
                        n,
                        graph_name_inbound(&name),
                        tx.clone(),
                        Arc::clone(&stats[n]),
                        shutdown.clone(),
                    )
                });
                let Some(queue) = queues[i].clone() else {
                    continue;
                };
                let cx = OutputContext {
                    name,
                    queue,
                    stats: Arc::clone(&stats[i]),
                    inbound,
                    telemetry: Arc::clone(&telemetry),
                    shutdown: shutdown.clone(),
                };
                let st = Arc::clone(&stats[i]);
                let inbound_stats = inbound_of[i].map(|n| Arc::clone(&stats[n]));
                outputs.spawn(async move {
                    st.set_state(HealthState::Ok, None);
                    match output.run(cx).await {
                        Ok(()) => st.set_state(HealthState::Stopped, None),
                        Err(e) => {
                            st.record_error(&e);
                            st.set_state(HealthState::Failed, None);
                        }
                    }
                    if let Some(s) = inbound_stats {
                        s.set_state(HealthState::Stopped, None);
                    }
                });
            }
            NodeKind::Filter(_) => stats[i].set_state(HealthState::Ok, None),
            NodeKind::Inbound { .. } => {}
        }
    }
    drop(tx);

    let mut pending: Vec<(usize, SharedSignal)> = Vec::new();
    let mut events: Vec<Event> = Vec::with_capacity(ENGINE_BATCH);

    let stop = std::pin::pin!(stop);
    let mut stop = stop;
    let mut stopping: Option<tokio::time::Instant> = None;
    let finite = !has_endless;
    if finite && sources_left == 0 {
        // Nothing can ever arrive.
    } else {
        loop {
            let due = engine.next_wall_due();
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
            tokio::select! {
                // Everything the sources have queued, at once (bounded): one wake-up and
                // one hand-over to each output for a burst.
                n = rx.recv_many(&mut events, ENGINE_BATCH) => {
                    if n == 0 {
                        break;
                    }
                    let now = now_ms();
                    let mut finished = false;
                    for event in events.drain(..) {
                        match event {
                            Event::Signal(node, signal) => {
                                engine.push(node, signal, now, &mut |o, s| pending.push((o, s)));
                            }
                            Event::Ended(node) => {
                                engine.end(node, now, &mut |o, s| pending.push((o, s)));
                                sources_left = sources_left.saturating_sub(1);
                                finished |= sources_left == 0 && (finite || stopping.is_some());
                            }
                        }
                    }
                    if finished {
                        deliver(&mut pending, &queues, &stats).await;
                        break;
                    }
                },
                () = timer => engine.fire_wall_timers(now_ms(), &mut |o, s| pending.push((o, s))),
                () = &mut stop, if stopping.is_none() => {
                    tracing::info!("shutting down: stopping sources, draining");
                    let at = tokio::time::Instant::now() + timeout;
                    let _ = shutdown_tx.send(Some(Deadline(Some(at))));
                    stopping = Some(at);
                    if sources_left == 0 {
                        break;
                    }
                }
                () = deadline => break,
            }
            match stopping {
                Some(at) => {
                    let _ =
                        tokio::time::timeout_at(at, deliver(&mut pending, &queues, &stats)).await;
                }
                None => deliver(&mut pending, &queues, &stats).await,
            }
        }
    }

    // What ingest acknowledged before the stop is still queued: it goes through too.
    while let Ok(event) = rx.try_recv() {
        match event {
            Event::Signal(node, signal) => {
                engine.push(node, signal, now_ms(), &mut |o, s| pending.push((o, s)))
            }
            Event::Ended(node) => engine.end(node, now_ms(), &mut |o, s| pending.push((o, s))),
        }
    }
    // Flush what filters hold, then let outputs drain. A graph ending on its own drains
    // without a bound.
    shutdown_tx.send_if_modified(|state| {
        let unset = state.is_none();
        if unset {
            *state = Some(Deadline(None));
        }
        unset
    });
    engine.end_all(now_ms(), &mut |o, s| pending.push((o, s)));
    let flushed = match stopping {
        Some(at) => tokio::time::timeout_at(at, deliver(&mut pending, &queues, &stats))
            .await
            .is_ok(),
        None => {
            deliver(&mut pending, &queues, &stats).await;
            true
        }
    };
    for q in queues.iter().flatten() {
        q.close();
    }
    sources.abort_all();
    let drained = match stopping {
        Some(at) => {
            let all_ended = async { while outputs.join_next().await.is_some() {} };
            let mut all_ended = std::pin::pin!(all_ended);
            let in_time = tokio::time::timeout_at(at, &mut all_ended).await.is_ok();
            // Outputs past the deadline get a moment to report what they could not
            // deliver (they know the deadline) before they are stopped.
            if !in_time {
                let _ = tokio::time::timeout(REPORT_GRACE, &mut all_ended).await;
            }
            in_time
        }
        None => {
            while outputs.join_next().await.is_some() {}
            true
        }
    };
    outputs.abort_all();
    for c in telemetry.components() {
        if c.state() == HealthState::Ok {
            c.set_state(HealthState::Stopped, None);
        }
    }
    RunReport {
        telemetry,
        drained: drained && flushed,
    }
}

/// Pushes what reached outputs into their queues, in order, counting what their overflow
/// decision drops: each output gets its signals of the batch in one hand-over.
async fn deliver(
    items: &mut Vec<(usize, SharedSignal)>,
    queues: &[Option<Arc<SignalQueue>>],
    stats: &[Arc<ComponentStats>],
) {
    while let Some(&(node, _)) = items.first() {
        // This output's signals, in order; the others' keep theirs for the next round.
        let mut mine = Vec::with_capacity(items.len());
        let mut others = Vec::new();
        for (n, s) in items.drain(..) {
            if n == node {
                mine.push(s);
            } else {
                others.push((n, s));
            }
        }
        *items = others;
        let Some(q) = &queues[node] else { continue };
        let lost = q.push_all(mine).await;
        if lost > 0 {
            ComponentStats::add(&stats[node].dropped, lost);
        }
    }
}

fn graph_name_inbound(output: &str) -> String {
    format!("{output}.inbound")
}
