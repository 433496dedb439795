//! A running graph's state: the engine, the running instances, and how a new config is
//! applied to them by diff.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use patchbay_signal::{PREFETCH_AHEAD, SharedSignal, now_ms};
use tokio::sync::{mpsc, watch};
use tokio::task::{AbortHandle, JoinSet};

use super::task::{Predecessor, TaskEnds, component_task};
use super::{Notice, Reload, RunReport, inputs_of, stats_for};
use crate::compile::{Graph, Node, NodeKind};
use crate::component::{
    Deadline, Ending, Life, OutputContext, Shutdown, SourceContext, StartReport,
};
use crate::engine::Engine;
use crate::events::{self, Event, EventReceiver, EventSender};
use crate::queue::SignalQueue;
use crate::telemetry::{ComponentStats, HealthState, Telemetry};

/// At most this many events are taken from the sources at once (a batch never waits to
/// fill: it is whatever is ready).
pub(super) const ENGINE_BATCH: usize = 256;

/// How long outputs still running at the shutdown deadline get to report what they could
/// not deliver before they are stopped.
const REPORT_GRACE: Duration = Duration::from_millis(250);

/// What a node is, as far as a reload is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Source,
    Inbound,
    Filter,
    Output,
}

impl Kind {
    fn of(kind: &NodeKind) -> Kind {
        match kind {
            NodeKind::Source(_) => Kind::Source,
            NodeKind::Inbound { .. } => Kind::Inbound,
            NodeKind::Filter(_) => Kind::Filter,
            NodeKind::Output { .. } => Kind::Output,
        }
    }
}

/// What a reload changes, decided before anything is touched (see `plan`).
struct ReloadPlan {
    /// The running nodes, by name.
    old_by_name: HashMap<String, usize>,
    /// The new graph's nodes, by name.
    new_by_name: HashMap<String, usize>,
    /// For each new node, the running node it is when it keeps running.
    keep: Vec<Option<usize>>,
    /// The running nodes that keep running.
    kept: HashSet<usize>,
    /// For each running node that does not keep running, the new node of its name and
    /// kind that replaces it, if any.
    replacement: Vec<Option<usize>>,
    same: usize,
    rebuilt: usize,
    added: usize,
    removed: usize,
}

impl ReloadPlan {
    /// What changed, as the log and `/health` say it.
    fn summary(&self) -> String {
        let ReloadPlan {
            same,
            rebuilt,
            added,
            removed,
            ..
        } = self;
        format!("{same} kept, {rebuilt} rebuilt, {added} added, {removed} removed")
    }
}

/// A node of the running config.
struct NodeInfo {
    name: String,
    fingerprint: u64,
    kind: Kind,
    /// The slot of its running instance (sources, inbound sides, outputs).
    slot: Option<usize>,
    /// A source that ends on its own: a reload never restarts it.
    finite: bool,
}

/// Where the signals of a slot go.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// Into this node of the running config.
    Node(usize),
    /// Into this node, which replaced it: its own end is not the node's end.
    Replaced(usize),
    /// Into this retired producer of the engine (a removed source, until it stops).
    Retired(usize),
    /// Nowhere.
    Gone,
}

/// A running instance: a source, an output, or an output's inbound side.
struct Slot {
    name: String,
    target: Target,
    /// A source, whose end the graph waits for.
    source: bool,
    /// Its task has not ended (a source: its end has not reached the engine).
    running: bool,
    task: Option<TaskHandle>,
}

/// Stops, waits for, or aborts one instance's task.
struct TaskHandle {
    stop: watch::Sender<Option<Deadline>>,
    done: watch::Receiver<bool>,
    abort: AbortHandle,
}

/// A running graph.
pub(super) struct Running {
    engine: Engine,
    nodes: Vec<NodeInfo>,
    /// Each output node's queue, by node index.
    queues: Vec<Option<Arc<SignalQueue>>>,
    /// Each node's stats, by node index.
    stats: Vec<Arc<ComponentStats>>,
    slots: Vec<Slot>,
    /// What reached outputs and is not in their queues yet: `(node, signal)`.
    pending: Vec<(usize, SharedSignal)>,
    running_sources: usize,
    /// No source or inbound side runs without end: the graph ends with its input.
    finite: bool,
    /// An output's inbound side can still bring signals after every source ended.
    has_inbound: bool,
    /// Endless sources that panicked, reported to whoever rebuilds them: the graph
    /// waits for them instead of ending.
    panicked: HashSet<String>,
    /// Slots of the first config that report when they have started, and have not yet
    /// (with the flag their report sets).
    starting: HashMap<usize, Arc<AtomicBool>>,
    ready: bool,
    start_failure: Option<String>,
    failures: Vec<String>,
    stopping: bool,
    timeout: Duration,
    queue_size: usize,
    pub(super) rx: EventReceiver,
    tx: EventSender,
    pub(super) life_rx: mpsc::UnboundedReceiver<Life>,
    life: mpsc::UnboundedSender<Life>,
    notices: Option<mpsc::UnboundedSender<Notice>>,
    telemetry: Arc<Telemetry>,
    sources: JoinSet<()>,
    outputs: JoinSet<()>,
}

impl Running {
    /// Starts every component of `graph`.
    pub(super) async fn start(
        graph: Graph,
        notices: Option<mpsc::UnboundedSender<Notice>>,
    ) -> Running {
        let (tx, rx) = events::channel(graph.runtime.queue);
        let (life, life_rx) = mpsc::unbounded_channel();
        let mut running = Running {
            engine: Engine::new(&[], Vec::new()),
            nodes: Vec::new(),
            queues: Vec::new(),
            stats: Vec::new(),
            slots: Vec::new(),
            pending: Vec::new(),
            running_sources: 0,
            finite: true,
            has_inbound: false,
            panicked: HashSet::new(),
            starting: HashMap::new(),
            ready: false,
            start_failure: None,
            failures: Vec::new(),
            stopping: false,
            timeout: Duration::from_millis(graph.runtime.shutdown_timeout_ms),
            queue_size: graph.runtime.queue,
            rx,
            tx,
            life_rx,
            life,
            notices,
            telemetry: Arc::new(Telemetry::default()),
            sources: JoinSet::new(),
            outputs: JoinSet::new(),
        };
        running.apply(graph).await;
        running.telemetry.start_generation();
        running.check_ready();
        running
    }

    /// Nothing can ever arrive: no source, no inbound side.
    pub(super) fn nothing_can_arrive(&self) -> bool {
        self.finite && self.running_sources == 0
    }

    /// Whether the run is over: every source has ended, and the graph ends with its
    /// input, or is stopping, or has no inbound side that could bring more.
    pub(super) fn finished(&self, stopping: bool) -> bool {
        self.running_sources == 0
            && (self.finite || stopping || (!self.has_inbound && self.panicked.is_empty()))
    }

    /// A component could not start.
    pub(super) fn start_failed(&self) -> bool {
        self.start_failure.is_some()
    }

    /// The earliest due timer among wall-clock filters.
    pub(super) fn next_wall_due(&self) -> Option<i64> {
        self.engine.next_wall_due()
    }

    /// Fires the wall-clock timers that are due.
    pub(super) fn fire_wall_timers(&mut self) {
        let pending = &mut self.pending;
        self.engine
            .fire_wall_timers(now_ms(), &mut |o, s| pending.push((o, s)));
    }

    /// Moves a batch of source events through the engine.
    pub(super) fn on_events(&mut self, events: &mut Vec<Event>) {
        let now = now_ms();
        for event in events.drain(..) {
            match event {
                Event::Signal(slot, signal) => self.push(slot, signal, now),
                Event::Signals(slot, signals) => {
                    // Made on another core: each signal's memory asked for a few places
                    // ahead of its turn (see `Signal::prefetch`).
                    let mut signals = signals.into_iter();
                    while let Some(signal) = signals.next() {
                        if let Some(ahead) = signals.as_slice().get(PREFETCH_AHEAD) {
                            ahead.prefetch();
                        }
                        self.push(slot, signal, now);
                    }
                }
                Event::Ended(slot, ending) => self.task_ended(slot, ending),
            }
        }
    }

    /// Moves one signal of the source in `slot` through the engine.
    fn push(&mut self, slot: usize, signal: SharedSignal, now: i64) {
        match self.slots[slot].target {
            Target::Node(n) | Target::Replaced(n) | Target::Retired(n) => {
                let pending = &mut self.pending;
                self.engine
                    .push(n, signal, now, &mut |o, s| pending.push((o, s)));
            }
            Target::Gone => {}
        }
    }

    /// An endless source that panicked is rebuilt by whoever gets the notice: the graph
    /// waits for it.
    fn awaits_rebuild(&mut self, slot: usize) {
        if self.slots[slot].source && self.notices.is_some() {
            self.panicked.insert(self.slots[slot].name.clone());
        }
    }

    fn source_ended(&mut self, slot: usize, now: i64) {
        let s = &mut self.slots[slot];
        if !(s.source && s.running) {
            return;
        }
        s.running = false;
        self.running_sources -= 1;
        match s.target {
            Target::Node(n) | Target::Retired(n) => {
                let pending = &mut self.pending;
                self.engine.end(n, now, &mut |o, s| pending.push((o, s)));
            }
            Target::Replaced(_) | Target::Gone => {}
        }
    }

    /// What a component's task said about itself.
    pub(super) fn on_life(&mut self, life: Life) {
        match life {
            Life::Started(slot) => {
                self.starting.remove(&slot);
                self.check_ready();
            }
            Life::Ended(slot, ending) => self.task_ended(slot, ending),
        }
    }

    /// A component's task ended: a start-up failure, signals lost, a panic to report;
    /// a source's end reaches the engine.
    fn task_ended(&mut self, slot: usize, ending: Ending) {
        let name = self.slots[slot].name.clone();
        // Its `started` report may still be on its way: the flag says.
        let unstarted = self
            .starting
            .remove(&slot)
            .is_some_and(|flag| !flag.load(Ordering::Acquire));
        if !unstarted {
            self.check_ready();
        }
        if unstarted {
            let why = match &ending {
                Ending::Failed(e) => e.clone(),
                Ending::Panicked(p) => format!("panicked: {p}"),
                Ending::Finished | Ending::Aborted => "ended before it started".into(),
            };
            if self.start_failure.is_none() {
                let failure = format!("{name}: {why}");
                tracing::error!("could not start {failure}");
                self.notify(Notice::StartFailed(failure.clone()));
                self.start_failure = Some(failure);
            }
        }
        let finite = self.nodes.iter().any(|n| n.slot == Some(slot) && n.finite);
        match &ending {
            Ending::Panicked(why) => {
                self.failures.push(format!("{name}: panicked: {why}"));
                if !finite && !self.stopping {
                    self.awaits_rebuild(slot);
                    self.notify(Notice::Panicked(name));
                }
            }
            Ending::Failed(why) if finite => self.failures.push(format!("{name}: {why}")),
            _ => {}
        }
        if self.slots[slot].source {
            self.source_ended(slot, now_ms());
        } else {
            self.slots[slot].running = false;
        }
    }

    fn check_ready(&mut self) {
        if !self.ready && self.starting.is_empty() && self.start_failure.is_none() {
            self.ready = true;
            self.notify(Notice::Ready);
        }
    }

    fn notify(&self, notice: Notice) {
        if let Some(n) = &self.notices {
            let _ = n.send(notice);
        }
    }

    /// Asks every component to stop; returns the drain deadline.
    pub(super) fn stop(&mut self) -> tokio::time::Instant {
        let at = tokio::time::Instant::now() + self.timeout;
        self.stopping = true;
        for slot in &self.slots {
            if let Some(t) = &slot.task {
                t.stop.send_replace(Some(Deadline(Some(at))));
            }
        }
        at
    }

    /// Pushes what reached outputs into their queues.
    pub(super) async fn deliver_pending(&mut self) {
        deliver(&mut self.pending, &self.queues, &self.stats).await;
    }

    /// Applies a reload: the new config by diff, or a refusal recorded.
    pub(super) async fn reload(&mut self, reload: Reload) {
        let outcome = match reload.graph {
            Ok(graph) => {
                let summary = self.apply(graph).await;
                tracing::info!("config reloaded: {summary}");
                self.telemetry.record_reload(true, summary.clone());
                Ok(summary)
            }
            Err(errors) => {
                tracing::warn!("config reload refused; the running graph goes on:\n{errors}");
                self.telemetry.record_reload(false, errors.clone());
                Err(errors)
            }
        };
        if let Some(reply) = reload.reply {
            let _ = reply.send(outcome);
        }
    }

    /// Makes `graph` the running config: unchanged components are kept, changed ones
    /// rebuilt, removed ones drained, new ones started. Returns what changed.
    async fn apply(&mut self, graph: Graph) -> String {
        let plan = self.plan(&graph);
        self.carry_out(graph, &plan).await;
        plan.summary()
    }

    /// Decides what a reload to `graph` changes, touching nothing: which running node each
    /// new node is, which old node each rebuilt one replaces, and the counts the summary
    /// gives.
    fn plan(&self, graph: &Graph) -> ReloadPlan {
        let old_by_name: HashMap<String, usize> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let new_by_name: HashMap<String, usize> = graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let keep = self.kept_nodes(graph, &old_by_name);
        let kept: HashSet<usize> = keep.iter().flatten().copied().collect();
        // An old node that is not kept is replaced by the new node of its name and kind.
        let replacement: Vec<Option<usize>> =
            self.nodes
                .iter()
                .enumerate()
                .map(|(o, old)| {
                    new_by_name.get(&old.name).copied().filter(|&n| {
                        !kept.contains(&o) && Kind::of(&graph.nodes[n].kind) == old.kind
                    })
                })
                .collect();
        let (mut same, mut rebuilt, mut added) = (0usize, 0usize, 0usize);
        for (i, node) in graph.nodes.iter().enumerate() {
            if Kind::of(&node.kind) == Kind::Inbound {
                continue;
            }
            match (keep[i], old_by_name.contains_key(&node.name)) {
                (Some(_), _) => same += 1,
                (None, true) => rebuilt += 1,
                (None, false) => added += 1,
            }
        }
        let removed = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(o, old)| {
                !kept.contains(o) && replacement[*o].is_none() && old.kind != Kind::Inbound
            })
            .count();
        ReloadPlan {
            old_by_name,
            new_by_name,
            keep,
            kept,
            replacement,
            same,
            rebuilt,
            added,
            removed,
        }
    }

    /// Carries out a reload decided by [`plan`](Self::plan): flushes the filters that go,
    /// carries the kept filters' state and every component's stats into the new engine,
    /// retires what goes, starts what comes.
    async fn carry_out(&mut self, graph: Graph, plan: &ReloadPlan) {
        let now = now_ms();
        let ReloadPlan {
            old_by_name,
            keep,
            kept,
            ..
        } = plan;

        // Filters that go flush what they hold, into today's outputs.
        for o in 0..self.nodes.len() {
            if self.nodes[o].kind == Kind::Filter && !kept.contains(&o) {
                let pending = &mut self.pending;
                self.engine
                    .flush_filter(o, now, &mut |n, s| pending.push((n, s)));
            }
        }
        // Bounded: an output that stays full must not hold the reload (nor the stop
        // request behind it) forever; what it could not take is counted as dropped.
        if tokio::time::timeout(self.timeout, self.deliver_pending())
            .await
            .is_err()
        {
            tracing::warn!("reload: an output stayed full; what it could not take is dropped");
            for (node, _) in self.pending.drain(..) {
                ComponentStats::add(&self.stats[node].dropped, 1);
            }
        }

        // The new engine, with the kept filters' state.
        let stats = self.carry_stats(&graph, keep, old_by_name);
        let mut engine = Engine::new(&graph.nodes, stats.clone());
        let mut ended_kept = Vec::new();
        for (i, k) in keep.iter().enumerate() {
            if let Some(o) = *k {
                if let Some(state) = self.engine.take_filter(o) {
                    engine.put_filter(i, state);
                }
                if matches!(self.nodes[o].kind, Kind::Source | Kind::Inbound)
                    && self.engine.has_ended(o)
                {
                    ended_kept.push(i);
                }
            }
        }

        let mut predecessors = self.retire(plan, &mut engine);

        // The new config's instances: kept ones move to their new node, new ones start.
        let mut queues: Vec<Option<Arc<SignalQueue>>> = vec![None; graph.nodes.len()];
        let mut infos = Vec::with_capacity(graph.nodes.len());
        let mut inbound_of: HashMap<usize, usize> = HashMap::new();
        for (i, node) in graph.nodes.iter().enumerate() {
            if let NodeKind::Inbound { output } = node.kind {
                inbound_of.insert(output, i);
            }
        }
        let mut inbound_slots: HashMap<usize, usize> = HashMap::new();
        let mut has_endless = false;
        let mut has_inbound = false;
        let runtime = graph.runtime.clone();
        let node_names: Vec<String> = graph.nodes.iter().map(|n| n.name.clone()).collect();
        for (i, node) in graph.nodes.into_iter().enumerate() {
            let kind = Kind::of(&node.kind);
            let fingerprint = node.fingerprint;
            let finite = matches!(&node.kind, NodeKind::Source(s) if s.is_finite());
            has_endless |= matches!(kind, Kind::Inbound) || (kind == Kind::Source && !finite);
            has_inbound |= kind == Kind::Inbound;
            let slot = match keep[i] {
                Some(o) => {
                    let slot = self.nodes[o].slot;
                    if let Some(s) = slot {
                        self.slots[s].target = Target::Node(i);
                    }
                    if kind == Kind::Output {
                        queues[i] = self.queues[o].clone();
                    }
                    slot
                }
                None => self.spawn(
                    i,
                    node,
                    &stats,
                    &inbound_of,
                    &mut inbound_slots,
                    &mut queues,
                    &mut predecessors,
                ),
            };
            infos.push(NodeInfo {
                name: node_names[i].clone(),
                fingerprint,
                kind,
                slot,
                finite,
            });
        }
        for (i, info) in infos.iter_mut().enumerate() {
            if let Some(s) = inbound_slots.get(&i) {
                info.slot = Some(*s);
            }
        }

        self.engine = engine;
        self.nodes = infos;
        self.queues = queues;
        self.stats = stats;
        self.finite = !has_endless;
        self.has_inbound = has_inbound;
        // Rebuilt (or removed) now.
        self.panicked.clear();
        self.timeout = Duration::from_millis(runtime.shutdown_timeout_ms);
        if runtime.queue != self.queue_size {
            tracing::warn!(
                "[runtime] queue changed from {} to {}: it applies at the next start",
                self.queue_size,
                runtime.queue
            );
        }
        self.telemetry.replace(self.stats.clone());
        for i in ended_kept {
            let pending = &mut self.pending;
            self.engine.end(i, now, &mut |o, s| pending.push((o, s)));
        }
    }

    /// Which running node each node of `graph` is, when it keeps running: the same name,
    /// kind and fingerprint, and still alive (an endless source or an output whose task
    /// ended is rebuilt). An output's inbound side goes with its output.
    fn kept_nodes(
        &self,
        graph: &Graph,
        old_by_name: &HashMap<String, usize>,
    ) -> Vec<Option<usize>> {
        let mut keep: Vec<Option<usize>> = vec![None; graph.nodes.len()];
        for (i, node) in graph.nodes.iter().enumerate() {
            let kind = Kind::of(&node.kind);
            let Some(&o) = old_by_name.get(node.name.as_str()) else {
                continue;
            };
            let old = &self.nodes[o];
            let alive = match (kind, old.slot) {
                // An output's inbound side lives and dies with its output.
                (Kind::Inbound, _) => continue,
                // An endless source or an output whose task ended is rebuilt.
                (_, Some(s)) => old.finite || self.slots[s].running,
                (_, None) => true,
            };
            if old.kind == kind && old.fingerprint == node.fingerprint && alive {
                keep[i] = Some(o);
            }
        }
        for (i, node) in graph.nodes.iter().enumerate() {
            if let NodeKind::Inbound { output } = node.kind
                && keep[output].is_some()
            {
                keep[i] = old_by_name.get(node.name.as_str()).copied();
            }
        }
        keep
    }

    /// The stats of each node of `graph`: a kept component's, or those of the one it
    /// rebuilds under the same name and type (it goes on counting where the old one
    /// stopped), else new ones.
    fn carry_stats(
        &self,
        graph: &Graph,
        keep: &[Option<usize>],
        old_by_name: &HashMap<String, usize>,
    ) -> Vec<Arc<ComponentStats>> {
        graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let same = keep[i].or_else(|| {
                    old_by_name
                        .get(&n.name)
                        .copied()
                        .filter(|&o| self.stats[o].type_name() == n.type_name)
                });
                match same {
                    Some(o) => {
                        self.stats[o].set_inputs(inputs_of(graph, n));
                        if keep[i].is_none() {
                            self.stats[o].set_state(HealthState::Starting, None);
                        }
                        Arc::clone(&self.stats[o])
                    }
                    None => Arc::new(stats_for(graph, n)),
                }
            })
            .collect()
    }

    /// Stops what the new config does not keep: sources stop (what they still send goes
    /// where it went: to their replacement, or through `engine` to the consumers that
    /// remain), outputs close their queue and drain. Returns the tasks a rebuilt
    /// component must wait for (by name).
    fn retire(&mut self, plan: &ReloadPlan, engine: &mut Engine) -> HashMap<String, Predecessor> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut predecessors: HashMap<String, Predecessor> = HashMap::new();
        for (o, old) in self.nodes.iter().enumerate() {
            if plan.kept.contains(&o) {
                continue;
            }
            let replacement = plan.replacement[o];
            let Some(slot) = old.slot else { continue };
            if matches!(old.kind, Kind::Source | Kind::Inbound) {
                let s = &self.slots[slot];
                let live = s.running || old.kind == Kind::Inbound;
                self.slots[slot].target = match replacement {
                    Some(n) => Target::Replaced(n),
                    None if live => {
                        let consumers = self
                            .engine
                            .consumers_of(o)
                            .iter()
                            .map(|port| {
                                port.iter()
                                    .filter_map(|c| {
                                        plan.new_by_name.get(&self.nodes[*c].name).copied()
                                    })
                                    .collect()
                            })
                            .collect();
                        Target::Retired(
                            engine.add_retired_producer(consumers, Arc::clone(&self.stats[o])),
                        )
                    }
                    None => Target::Gone,
                };
            }
            if old.kind == Kind::Output
                && let Some(q) = &self.queues[o]
            {
                q.close();
            }
            if let Some(t) = &self.slots[slot].task {
                t.stop.send_replace(Some(Deadline(Some(deadline))));
                if replacement.is_some() {
                    predecessors.insert(
                        old.name.clone(),
                        Predecessor {
                            done: t.done.clone(),
                            abort: t.abort.clone(),
                            grace: self.timeout,
                        },
                    );
                }
            }
        }
        predecessors
    }

    /// Starts a new instance of node `i` (a source or an output with its inbound side);
    /// returns its slot. Filters and inbound sides have no task of their own.
    #[allow(clippy::too_many_arguments)]
    fn spawn(
        &mut self,
        i: usize,
        node: Node,
        stats: &[Arc<ComponentStats>],
        inbound_of: &HashMap<usize, usize>,
        inbound_slots: &mut HashMap<usize, usize>,
        queues: &mut [Option<Arc<SignalQueue>>],
        predecessors: &mut HashMap<String, Predecessor>,
    ) -> Option<usize> {
        let Node { name, kind, .. } = node;
        let after = predecessors.remove(&name);
        match kind {
            NodeKind::Filter(_) => {
                stats[i].set_state(HealthState::Ok, None);
                None
            }
            NodeKind::Inbound { .. } => None,
            NodeKind::Source(source) => {
                let (stop, shutdown) = Shutdown::new();
                let slot = self.new_slot(&name, Target::Node(i), true);
                let reports = source.reports_started();
                let cx = SourceContext::new(
                    slot,
                    name.clone(),
                    self.tx.clone(),
                    Arc::clone(&stats[i]),
                    shutdown,
                )
                .with_start(self.start_report(slot, reports));
                self.running_sources += 1;
                let (done_tx, done) = watch::channel(false);
                let ends = TaskEnds {
                    slot,
                    name: name.clone(),
                    stats: Arc::clone(&stats[i]),
                    life: self.life.clone(),
                    events: Some(self.tx.clone()),
                    done: done_tx,
                    after,
                    inbound: None,
                    approvals: None,
                };
                let abort = self
                    .sources
                    .spawn(component_task(move || source.run(cx), ends));
                self.slots[slot].task = Some(TaskHandle { stop, done, abort });
                Some(slot)
            }
            NodeKind::Output {
                output,
                when_full,
                queue,
            } => {
                let (stop, shutdown) = Shutdown::new();
                let slot = self.new_slot(&name, Target::Node(i), false);
                let reports = output.reports_started();
                let inbound = inbound_of.get(&i).map(|&n| {
                    let inbound_slot = self.new_slot(stats[n].name(), Target::Node(n), false);
                    inbound_slots.insert(n, inbound_slot);
                    SourceContext::new(
                        inbound_slot,
                        stats[n].name().to_owned(),
                        self.tx.clone(),
                        Arc::clone(&stats[n]),
                        shutdown.clone(),
                    )
                });
                let q = Arc::new(SignalQueue::new(queue, when_full));
                queues[i] = Some(Arc::clone(&q));
                let cx = OutputContext {
                    name: name.clone(),
                    queue: q,
                    stats: Arc::clone(&stats[i]),
                    inbound,
                    telemetry: Arc::clone(&self.telemetry),
                    shutdown,
                    start: self.start_report(slot, reports),
                };
                let (done_tx, done) = watch::channel(false);
                let ends = TaskEnds {
                    slot,
                    name,
                    stats: Arc::clone(&stats[i]),
                    life: self.life.clone(),
                    events: None,
                    done: done_tx,
                    after,
                    inbound: inbound_of.get(&i).map(|&n| Arc::clone(&stats[n])),
                    approvals: Some(Arc::clone(self.telemetry.approvals())),
                };
                let abort = self
                    .outputs
                    .spawn(component_task(move || output.run(cx), ends));
                self.slots[slot].task = Some(TaskHandle { stop, done, abort });
                Some(slot)
            }
        }
    }

    fn new_slot(&mut self, name: &str, target: Target, source: bool) -> usize {
        self.slots.push(Slot {
            name: name.to_owned(),
            target,
            source,
            running: true,
            task: None,
        });
        self.slots.len() - 1
    }

    /// How a new instance reports it started: only those of the first config that
    /// acquire something at start are waited for.
    fn start_report(&mut self, slot: usize, reports: bool) -> StartReport {
        let flag = Arc::new(AtomicBool::new(false));
        if reports && !self.ready {
            self.starting.insert(slot, Arc::clone(&flag));
        }
        StartReport {
            slot,
            life: Some(self.life.clone()),
            flag,
        }
    }

    /// Drains and stops: what ingest acknowledged is still delivered, filters flush,
    /// outputs drain until `stopping`'s deadline (without a bound when the graph ended
    /// on its own).
    pub(super) async fn finish(mut self, stopping: Option<tokio::time::Instant>) -> RunReport {
        // Closed first: a source still sending (a producer's connection) is refused at
        // once, and told so, instead of waiting for room that taking the last events
        // would give it, its signals then sent where no one takes them.
        self.rx.close();
        let mut events = Vec::new();
        while let Some(event) = self.rx.try_recv() {
            events.push(event);
        }
        self.on_events(&mut events);
        for slot in &self.slots {
            if let Some(t) = &slot.task {
                t.stop.send_if_modified(|state| {
                    let unset = state.is_none();
                    if unset {
                        *state = Some(Deadline(None));
                    }
                    unset
                });
            }
        }
        let pending = &mut self.pending;
        self.engine
            .end_all(now_ms(), &mut |o, s| pending.push((o, s)));
        let flushed = match stopping {
            Some(at) => tokio::time::timeout_at(at, self.deliver_pending())
                .await
                .is_ok(),
            None => {
                self.deliver_pending().await;
                true
            }
        };
        for q in self.queues.iter().flatten() {
            q.close();
        }
        self.sources.abort_all();
        let outputs = &mut self.outputs;
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
        self.outputs.abort_all();
        // Panics reported by tasks that ended while draining.
        while let Ok(life) = self.life_rx.try_recv() {
            self.on_life(life);
        }
        for c in self.telemetry.components() {
            if c.state() == HealthState::Ok {
                c.set_state(HealthState::Stopped, None);
            }
        }
        RunReport {
            telemetry: self.telemetry,
            drained: drained && flushed,
            start_failure: self.start_failure,
            failures: self.failures,
        }
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
