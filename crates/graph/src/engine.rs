//! The synchronous core of the runtime: moves one signal at a time through the filters.
//!
//! The engine owns every filter's state and its clock. It does no I/O and knows no
//! tokio: the async runtime feeds it, `patchbay test` drives it with virtual time, and the
//! benchmarks measure it directly. Signals are `Arc`s: a signal that fans out to several
//! branches is shared, never copied.
//!
//! A filter that panics is contained here: the signal it was handling is lost (counted
//! as an error of that filter), the filter starts again from a fresh instance, and the
//! rest of the graph goes on.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use patchbay_signal::SharedSignal;

use crate::compile::{Node, NodeKind};
use crate::filter::{ClockKind, Emit, Filter, Port};
use crate::telemetry::ComponentStats;

/// A filter's running state (its instance and its clock), which a reload that keeps the
/// filter moves to the next engine.
pub struct FilterState {
    filter: Box<dyn Filter>,
    spec: crate::filter::FilterSpec,
    clock: Option<ClockKind>,
    now: i64,
}

impl FilterState {
    /// Runs one call into the filter; a panic is caught, counted and logged, and the
    /// filter starts again from a fresh instance (what it held is lost).
    fn call(
        &mut self,
        stats: &ComponentStats,
        f: impl FnOnce(&mut dyn Filter, &mut Emit),
        emit: &mut Emit,
    ) {
        let filter = &mut self.filter;
        let caught = std::panic::catch_unwind(AssertUnwindSafe(|| f(filter.as_mut(), emit)));
        if let Err(panic) = caught {
            let why = panic_message(panic.as_ref());
            ComponentStats::add(&stats.panics, 1);
            stats.record_error(format!("panicked ({why}); restarted with empty state"));
            emit.clear();
            self.filter = self.spec.instantiate();
        }
    }
}

/// The message of a caught panic, when it has one.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

enum Slot {
    Producer,
    Filter(FilterState),
    Output,
}

/// Receives what reaches outputs: `(output node index, signal)`.
pub type Sink<'a> = dyn FnMut(usize, SharedSignal) + 'a;

/// The graph's filters and wiring, ready to move signals.
pub struct Engine {
    slots: Vec<Slot>,
    /// `consumers[node][port]`: the nodes fed by that port (see [`port_index`]).
    consumers: Vec<Vec<Vec<usize>>>,
    /// Edges from producers that have not ended yet, per node.
    live_inputs: Vec<usize>,
    ended: Vec<bool>,
    stats: Vec<Arc<ComponentStats>>,
    taps: Vec<(usize, Port, Vec<SharedSignal>)>,
    spare: Vec<Emit>,
}

/// 0 main, 1 dropped, then the named outputs.
fn port_index(port: Port) -> usize {
    match port {
        Port::Main => 0,
        Port::Dropped => 1,
        Port::Named(i) => 2 + usize::from(i),
    }
}

impl Engine {
    /// Builds the engine for a graph's nodes, with one stats handle per node.
    pub fn new(nodes: &[Node], stats: Vec<Arc<ComponentStats>>) -> Engine {
        let mut consumers = vec![vec![Vec::new(), Vec::new()]; nodes.len()];
        let mut live_inputs = vec![0; nodes.len()];
        for (i, node) in nodes.iter().enumerate() {
            for e in &node.inputs {
                let ports: &mut Vec<Vec<usize>> = &mut consumers[e.from];
                let p = port_index(e.port);
                if ports.len() <= p {
                    ports.resize(p + 1, Vec::new());
                }
                ports[p].push(i);
                live_inputs[i] += 1;
            }
        }
        let slots = nodes
            .iter()
            .map(|n| match &n.kind {
                NodeKind::Source(_) | NodeKind::Inbound { .. } => Slot::Producer,
                NodeKind::Filter(spec) => Slot::Filter(FilterState {
                    filter: spec.instantiate(),
                    spec: spec.clone(),
                    clock: spec.clock,
                    now: i64::MIN,
                }),
                NodeKind::Output { .. } => Slot::Output,
            })
            .collect();
        Engine {
            slots,
            consumers,
            live_inputs,
            ended: vec![false; nodes.len()],
            stats,
            taps: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Records every signal leaving `node` by `port` (for `patchbay test`); returns the
    /// tap's index for [`Engine::tapped`].
    pub fn tap(&mut self, node: usize, port: Port) -> usize {
        self.taps.push((node, port, Vec::new()));
        self.taps.len() - 1
    }

    /// What a tap recorded.
    pub fn tapped(&self, tap: usize) -> &[SharedSignal] {
        self.taps.get(tap).map(|t| t.2.as_slice()).unwrap_or(&[])
    }

    /// A signal produced by a source (or inbound side) `node`, at wall time `wall_now`.
    pub fn push(&mut self, node: usize, signal: SharedSignal, wall_now: i64, sink: &mut Sink<'_>) {
        self.deliver(node, Port::Main, signal, wall_now, sink);
    }

    /// Inserts a signal: as the input of a filter, or as the output of any other node.
    pub fn inject(
        &mut self,
        node: usize,
        signal: SharedSignal,
        wall_now: i64,
        sink: &mut Sink<'_>,
    ) {
        if matches!(self.slots.get(node), Some(Slot::Filter(_))) {
            self.run_filter(node, signal, wall_now, sink);
        } else {
            self.deliver(node, Port::Main, signal, wall_now, sink);
        }
    }

    /// The earliest due timer among wall-clock filters.
    pub fn next_wall_due(&self) -> Option<i64> {
        self.slots
            .iter()
            .filter_map(|s| match s {
                Slot::Filter(f) if f.clock == Some(ClockKind::Wall) => f.filter.next_due(),
                _ => None,
            })
            .min()
    }

    /// Fires wall-clock timers due at or before `wall_now`.
    pub fn fire_wall_timers(&mut self, wall_now: i64, sink: &mut Sink<'_>) {
        // Emissions may arm timers downstream that are already due: loop until settled,
        // bounded by the number of filters.
        for _ in 0..=self.slots.len() {
            let mut fired = false;
            for i in 0..self.slots.len() {
                let due = match &self.slots[i] {
                    Slot::Filter(f) if f.clock == Some(ClockKind::Wall) => f.filter.next_due(),
                    _ => None,
                };
                if due.is_some_and(|d| d <= wall_now) {
                    fired = true;
                    let mut emit = self.spare.pop().unwrap_or_default();
                    if let Slot::Filter(f) = &mut self.slots[i] {
                        f.now = f.now.max(wall_now);
                        let now = f.now;
                        f.call(&self.stats[i], |f, e| f.on_timer(now, e), &mut emit);
                    }
                    self.route(i, &mut emit, wall_now, sink);
                    self.spare.push(emit);
                }
            }
            if !fired {
                break;
            }
        }
    }

    /// A producer ended: filters whose every input has ended are flushed (their trailing
    /// signals emitted in order) and end in turn.
    pub fn end(&mut self, node: usize, wall_now: i64, sink: &mut Sink<'_>) {
        if self.ended.get(node).copied().unwrap_or(true) {
            return;
        }
        self.ended[node] = true;
        if let Slot::Filter(_) = &self.slots[node] {
            let mut emit = self.spare.pop().unwrap_or_default();
            if let Slot::Filter(f) = &mut self.slots[node] {
                f.call(&self.stats[node], |f, e| f.flush(e), &mut emit);
            }
            self.route(node, &mut emit, wall_now, sink);
            self.spare.push(emit);
        }
        let downstream: Vec<usize> = self.consumers[node].iter().flatten().copied().collect();
        for d in downstream {
            self.live_inputs[d] = self.live_inputs[d].saturating_sub(1);
            if self.live_inputs[d] == 0 && matches!(self.slots[d], Slot::Filter(_)) {
                self.end(d, wall_now, sink);
            }
        }
    }

    /// Ends every producer: everything held by filters is flushed.
    pub fn end_all(&mut self, wall_now: i64, sink: &mut Sink<'_>) {
        for i in 0..self.slots.len() {
            if matches!(self.slots[i], Slot::Producer) {
                self.end(i, wall_now, sink);
            }
        }
        // Filters without any input (impossible after compile) or left over.
        for i in 0..self.slots.len() {
            if matches!(self.slots[i], Slot::Filter(_)) {
                self.end(i, wall_now, sink);
            }
        }
    }

    /// Flushes one filter (everything it holds goes downstream), without ending it or
    /// anything after it: a reload flushes the filters it removes or rebuilds.
    pub fn flush_filter(&mut self, node: usize, wall_now: i64, sink: &mut Sink<'_>) {
        if !matches!(self.slots.get(node), Some(Slot::Filter(_))) {
            return;
        }
        let mut emit = self.spare.pop().unwrap_or_default();
        if let Slot::Filter(f) = &mut self.slots[node] {
            f.call(&self.stats[node], |f, e| f.flush(e), &mut emit);
        }
        self.route(node, &mut emit, wall_now, sink);
        self.spare.push(emit);
    }

    /// Takes a filter's state out (for [`Engine::put_filter`] into the next engine); the
    /// node is left with a fresh instance.
    pub fn take_filter(&mut self, node: usize) -> Option<FilterState> {
        match self.slots.get_mut(node) {
            Some(Slot::Filter(f)) => {
                let fresh = FilterState {
                    filter: f.spec.instantiate(),
                    spec: f.spec.clone(),
                    clock: f.clock,
                    now: i64::MIN,
                };
                Some(std::mem::replace(f, fresh))
            }
            _ => None,
        }
    }

    /// Gives a filter node the state a previous engine ran it with.
    pub fn put_filter(&mut self, node: usize, state: FilterState) {
        if let Some(Slot::Filter(f)) = self.slots.get_mut(node) {
            *f = state;
        }
    }

    /// Whether a node has ended.
    pub fn has_ended(&self, node: usize) -> bool {
        self.ended.get(node).copied().unwrap_or(true)
    }

    /// Adds a producer that is not in the graph any more but still running (a source a
    /// reload removed, until it stops): what it still emits goes to `consumers`, by port.
    /// Returns its node index, for [`Engine::push`] and [`Engine::end`].
    pub fn add_retired_producer(
        &mut self,
        consumers: Vec<Vec<usize>>,
        stats: Arc<ComponentStats>,
    ) -> usize {
        for c in consumers.iter().flatten() {
            self.live_inputs[*c] += 1;
        }
        self.slots.push(Slot::Producer);
        let mut ports = consumers;
        if ports.len() < 2 {
            ports.resize(2, Vec::new());
        }
        self.consumers.push(ports);
        self.live_inputs.push(0);
        self.ended.push(false);
        self.stats.push(stats);
        self.slots.len() - 1
    }

    /// The nodes each port of `node` feeds, by port index.
    pub fn consumers_of(&self, node: usize) -> &[Vec<usize>] {
        self.consumers.get(node).map(Vec::as_slice).unwrap_or(&[])
    }

    fn deliver(
        &mut self,
        from: usize,
        port: Port,
        signal: SharedSignal,
        wall_now: i64,
        sink: &mut Sink<'_>,
    ) {
        for tap in self.taps.iter_mut() {
            if tap.0 == from && tap.1 == port {
                tap.2.push(Arc::clone(&signal));
            }
        }
        let p = port_index(port);
        let Some((&last, rest)) = self.consumers[from].get(p).and_then(|c| c.split_last()) else {
            return;
        };
        // The last consumer gets the signal itself: when nothing else holds it, a filter
        // that makes a new signal (map) can take it over instead of copying it.
        let rest = rest.len();
        for k in 0..rest {
            let target = self.consumers[from][p][k];
            self.hand_to(target, Arc::clone(&signal), wall_now, sink);
        }
        self.hand_to(last, signal, wall_now, sink);
    }

    /// Gives `signal` to the consumer `target`: a filter runs, an output queues it.
    fn hand_to(&mut self, target: usize, signal: SharedSignal, wall_now: i64, sink: &mut Sink<'_>) {
        match self.slots[target] {
            Slot::Filter(_) => self.run_filter(target, signal, wall_now, sink),
            Slot::Output => sink(target, signal),
            Slot::Producer => {}
        }
    }

    fn run_filter(
        &mut self,
        node: usize,
        signal: SharedSignal,
        wall_now: i64,
        sink: &mut Sink<'_>,
    ) {
        ComponentStats::add(&self.stats[node].received, 1);
        let mut emit = self.spare.pop().unwrap_or_default();
        if let Slot::Filter(f) = &mut self.slots[node] {
            let now = match f.clock {
                Some(ClockKind::Event) => f.now.max(signal.timestamp),
                _ => f.now.max(wall_now),
            };
            f.now = now;
            let stats = &self.stats[node];
            if f.filter.next_due().is_some_and(|due| due <= now) {
                f.call(stats, |f, e| f.on_timer(now, e), &mut emit);
            }
            f.call(stats, |f, e| f.on_signal(signal, now, e), &mut emit);
        }
        self.route(node, &mut emit, wall_now, sink);
        self.spare.push(emit);
    }

    fn route(&mut self, node: usize, emit: &mut Emit, wall_now: i64, sink: &mut Sink<'_>) {
        if emit.is_empty() {
            return;
        }
        for (port, s) in emit.drain() {
            let stats = &self.stats[node];
            match port {
                Port::Main | Port::Named(_) => ComponentStats::add(&stats.sent, 1),
                Port::Dropped => ComponentStats::add(&stats.dropped, 1),
            }
            self.deliver(node, port, s, wall_now, sink);
        }
    }
}
