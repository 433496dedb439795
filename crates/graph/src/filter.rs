//! The filter interface: a pure, synchronous state machine driven by the runtime's clock.

use std::sync::Arc;

use patchbay_signal::SharedSignal;

/// Which output of a filter a signal leaves by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Port {
    /// The filter's main output (`NAME`).
    Main,
    /// What the filter drops or replaces (`NAME.dropped`).
    Dropped,
    /// One of the named outputs the filter declares (`NAME.<port>`), by its index in
    /// [`FilterSpec::ports`].
    Named(u16),
}

/// Where a filter's time comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClockKind {
    /// The machine's clock: timers fire on real time.
    #[default]
    Wall,
    /// The signals' `timestamp`s: "now" is the largest timestamp seen so far, so a
    /// recording replayed at any speed gives the same output.
    Event,
}

/// Collects what a filter emits while handling one input or timer.
#[derive(Debug, Default)]
pub struct Emit {
    items: Vec<(Port, SharedSignal)>,
}

impl Emit {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Emits on the main output.
    pub fn pass(&mut self, signal: SharedSignal) {
        self.items.push((Port::Main, signal));
    }

    /// Emits on the `.dropped` output.
    pub fn drop(&mut self, signal: SharedSignal) {
        self.items.push((Port::Dropped, signal));
    }

    /// Emits on the named output numbered `port` (an index into [`FilterSpec::ports`]).
    pub fn to(&mut self, port: u16, signal: SharedSignal) {
        self.items.push((Port::Named(port), signal));
    }

    /// Takes what was emitted, in order.
    pub fn take(&mut self) -> Vec<(Port, SharedSignal)> {
        std::mem::take(&mut self.items)
    }

    /// Takes what was emitted, in order, keeping the buffer for reuse.
    pub fn drain(&mut self) -> std::vec::Drain<'_, (Port, SharedSignal)> {
        self.items.drain(..)
    }

    /// Whether nothing was emitted.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Forgets what was emitted (a filter that panicked half-way).
    pub(crate) fn clear(&mut self) {
        self.items.clear();
    }

    /// Emitted signals, in order (for tests).
    pub fn items(&self) -> &[(Port, SharedSignal)] {
        &self.items
    }
}

/// A filter node's behaviour.
///
/// The runtime owns the clock: before calling [`Filter::on_signal`] with time `now`, it
/// fires every timer due at or before `now` through [`Filter::on_timer`], so a timer due
/// exactly at `now` fires before the signal at `now`. With the event clock, `now` is the
/// largest timestamp the filter has seen (it never goes back); with the wall clock, it is
/// the machine's time in epoch milliseconds.
pub trait Filter: Send {
    /// Handles one signal at time `now`.
    fn on_signal(&mut self, signal: SharedSignal, now: i64, emit: &mut Emit);

    /// The earliest time a timer of this filter is due, if any.
    fn next_due(&self) -> Option<i64> {
        None
    }

    /// Fires every timer due at or before `now`, in order of due time (ties in the order
    /// of the signals they release).
    fn on_timer(&mut self, now: i64, emit: &mut Emit) {
        let _ = (now, emit);
    }

    /// End of input: emits everything still held, in order of due time.
    fn flush(&mut self, emit: &mut Emit) {
        let _ = emit;
    }
}

/// A compiled filter: how to make instances of it, and its clock.
#[derive(Clone)]
pub struct FilterSpec {
    /// The clock of a time-based filter; `None` for filters without timers.
    pub clock: Option<ClockKind>,
    /// The names of the filter's named outputs (`route`'s branches), [`Port::Named`] by
    /// index; empty for filters with only `NAME` and `NAME.dropped`.
    ports: Arc<[String]>,
    make: Arc<dyn Fn() -> Box<dyn Filter> + Send + Sync>,
}

impl FilterSpec {
    /// A spec from a constructor.
    pub fn new(
        clock: Option<ClockKind>,
        make: impl Fn() -> Box<dyn Filter> + Send + Sync + 'static,
    ) -> Self {
        FilterSpec {
            clock,
            ports: Arc::from([]),
            make: Arc::new(make),
        }
    }

    /// Declares named outputs, each read as `NAME.<port>`. A filter with named outputs
    /// emits on them (and `.dropped`) only: its bare name is not an input anyone can use.
    pub fn with_ports(mut self, ports: Vec<String>) -> Self {
        self.ports = ports.into();
        self
    }

    /// The named outputs, in [`Port::Named`] order.
    pub fn ports(&self) -> &[String] {
        &self.ports
    }

    /// The named output called `name`.
    pub fn port(&self, name: &str) -> Option<Port> {
        let i = self.ports.iter().position(|p| p == name)?;
        u16::try_from(i).ok().map(Port::Named)
    }

    /// A fresh instance with empty state.
    pub fn instantiate(&self) -> Box<dyn Filter> {
        (self.make)()
    }
}

impl std::fmt::Debug for FilterSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterSpec")
            .field("clock", &self.clock)
            .field("ports", &self.ports)
            .finish()
    }
}
