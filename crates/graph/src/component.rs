//! The interfaces of sources and outputs, and what the runtime hands them.
//!
//! A component is built from its options when the config loads (no I/O then, so that
//! `patchbay validate` starts nothing), and runs as one tokio task once the graph starts.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use patchbay_signal::normalize::Decoded;
use patchbay_signal::{SharedSignal, Signal, spent};
use tokio::sync::{mpsc, watch};

use crate::events::EventSender;
use crate::queue::SignalQueue;
use crate::telemetry::{ComponentStats, HealthState, Telemetry};

/// A boxed, sendable future: what `run` returns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The error a component's task ends with.
pub type ComponentError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A source: produces signals into the graph until its input ends or shutdown.
pub trait Source: Send {
    /// Whether the source ends on its own (a file, stdin). `patchbay run` exits when every
    /// source has ended and the graph has drained.
    fn is_finite(&self) -> bool {
        false
    }

    /// Whether the source acquires something at start that can fail (a port to listen
    /// on, a file to open) and calls [`SourceContext::started`] once it has: the daemon
    /// reports itself ready, or exits with "unavailable", only after every such
    /// component has started or failed.
    fn reports_started(&self) -> bool {
        false
    }

    /// Runs the source. Returning `Ok` means the input ended.
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>>;
}

/// An output: consumes its queue until it is closed and empty.
pub trait Output: Send {
    /// Whether the output acquires something at start that can fail (a port, a file)
    /// and calls [`OutputContext::started`] once it has (see
    /// [`Source::reports_started`]).
    fn reports_started(&self) -> bool {
        false
    }

    /// Runs the output. For outputs that talk both ways, what they receive goes into
    /// [`OutputContext::inbound`].
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>>;
}

/// What a component's task tells the runtime about itself, by slot, apart from its
/// signals (an unbounded channel: a few messages per component).
#[derive(Debug)]
pub(crate) enum Life {
    /// It acquired what it needs ([`SourceContext::started`]).
    Started(usize),
    /// Its task ended: how.
    Ended(usize, Ending),
}

/// How a component's task ended.
#[derive(Debug, Clone)]
pub(crate) enum Ending {
    /// It returned `Ok`.
    Finished,
    /// It returned an error.
    Failed(String),
    /// It panicked (the message).
    Panicked(String),
    /// It was stopped without finishing (aborted at the deadline).
    Aborted,
}

/// How a component reports itself started (see [`Source::reports_started`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct StartReport {
    pub(crate) slot: usize,
    pub(crate) life: Option<mpsc::UnboundedSender<Life>>,
    /// Set before the message is sent: the runtime reads it when the component's end
    /// (which travels another channel) arrives first.
    pub(crate) flag: Arc<std::sync::atomic::AtomicBool>,
}

impl StartReport {
    fn started(&self) {
        self.flag.store(true, std::sync::atomic::Ordering::Release);
        if let Some(life) = &self.life {
            let _ = life.send(Life::Started(self.slot));
        }
    }
}

/// Tells components to stop, and by when the graph must have drained.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<Option<Deadline>>,
}

/// When a requested shutdown must be done: the instant, or never (the graph ends on its
/// own and drains without a bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline(pub(crate) Option<tokio::time::Instant>);

impl Shutdown {
    pub(crate) fn new() -> (watch::Sender<Option<Deadline>>, Shutdown) {
        let (tx, rx) = watch::channel(None);
        (tx, Shutdown { rx })
    }

    /// A handle that never fires (for tests and one-shot tools).
    pub fn never() -> Shutdown {
        let (tx, rx) = watch::channel(None);
        // Keep the sender alive forever so `wait` never resolves.
        std::mem::forget(tx);
        Shutdown { rx }
    }

    /// Whether shutdown has been requested.
    pub fn is_requested(&self) -> bool {
        self.rx.borrow().is_some()
    }

    /// By when the graph must have drained (`[runtime] shutdown_timeout_ms` after the stop
    /// request): an output with clients of its own gives them until then to take what is
    /// queued for them. `None` before shutdown is requested, or when the graph ends on its
    /// own (then the drain has no bound).
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.rx.borrow().and_then(|d| d.0)
    }

    /// Resolves when shutdown is requested.
    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        while rx.borrow_and_update().is_none() {
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

/// The graph is gone (shutting down): stop producing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the graph is shutting down")]
pub struct Closed;

/// Why a bounded emit did not hand a signal to the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The graph's inbound queue stayed full for the whole wait.
    #[error("the graph stayed full")]
    Full,
    /// The graph is shutting down.
    #[error("the graph is shutting down")]
    Closed,
}

/// What [`SourceContext::emit_batch_within`] did with a run of signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Emitted {
    /// How many signals, from the first, the graph took.
    pub accepted: usize,
    /// Why the rest (if any) were refused.
    pub refused: Option<Refused>,
}

/// What a running source gets: a way to emit signals, its counters and health, and the
/// shutdown signal.
#[derive(Debug, Clone)]
pub struct SourceContext {
    node: usize,
    name: String,
    tx: EventSender,
    stats: Arc<ComponentStats>,
    shutdown: Shutdown,
    start: StartReport,
}

impl SourceContext {
    pub(crate) fn new(
        node: usize,
        name: String,
        tx: EventSender,
        stats: Arc<ComponentStats>,
        shutdown: Shutdown,
    ) -> Self {
        SourceContext {
            node,
            name,
            tx,
            stats,
            shutdown,
            start: StartReport::default(),
        }
    }

    /// The same, reporting [`SourceContext::started`] to the runtime.
    pub(crate) fn with_start(mut self, start: StartReport) -> Self {
        self.start = start;
        self
    }

    /// The source's name in the config (`pads`, `ui.inbound`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Says that the source acquired what it needs to run (its port is bound, its file
    /// open): see [`Source::reports_started`].
    pub fn started(&self) {
        self.start.started();
    }

    /// Emits a signal, waiting while the graph's inbound queue is full (back-pressure on
    /// the peer).
    pub async fn emit(&self, signal: Signal) -> Result<(), Closed> {
        self.emit_shared(Arc::new(signal)).await
    }

    /// Emits an already shared signal.
    pub async fn emit_shared(&self, signal: SharedSignal) -> Result<(), Closed> {
        ComponentStats::add(&self.stats.received, 1);
        self.tx.send(self.node, signal).await?;
        ComponentStats::add(&self.stats.sent, 1);
        Ok(())
    }

    /// Emits `signals` in order, each waiting at most `wait` for room in the graph's
    /// inbound queue: for ingest that must answer its peer ("slow" and "stuck" are told
    /// apart). At the first refusal the rest are refused too (and counted, when the graph
    /// was full), so that what was accepted is always a prefix: the accepted signals are
    /// taken from `signals` (a batch taken whole takes the vector's buffer along), and the
    /// refused ones are left in it, in order, so that the caller can name them.
    ///
    /// Whatever room the graph's queue has is taken for the whole run at once: a burst is
    /// one hand-over (and one wake-up of the graph), not one per signal. Before it, the
    /// signals consumers have finished with are freed on this thread (see [`spent`]).
    pub async fn emit_batch_within(
        &self,
        signals: &mut Vec<SharedSignal>,
        wait: Duration,
    ) -> Emitted {
        spent::free();
        ComponentStats::add(&self.stats.received, signals.len() as u64);
        let (accepted, refused) = self.tx.send_within(self.node, signals, Some(wait)).await;
        ComponentStats::add(&self.stats.sent, accepted as u64);
        if refused == Some(Refused::Full) {
            ComponentStats::add(&self.stats.refused, signals.len() as u64);
        }
        Emitted { accepted, refused }
    }

    /// Emits without waiting, for producers that must never block (a MIDI callback):
    /// when the graph's queue is full the signal is dropped and counted. Returns whether it
    /// was queued.
    pub fn try_emit(&self, signal: Signal) -> bool {
        ComponentStats::add(&self.stats.received, 1);
        match self.tx.try_send(self.node, signal) {
            Ok(()) => {
                ComponentStats::add(&self.stats.sent, 1);
                true
            }
            Err(_) => {
                ComponentStats::add(&self.stats.dropped, 1);
                false
            }
        }
    }

    /// Emits `signals` in order, waiting while the graph's inbound queue is full (as
    /// [`emit`](SourceContext::emit) does); whatever room there is is taken at once, so
    /// that a burst is one hand-over. The signals are taken from `signals`. Before it, the
    /// signals consumers have finished with are freed on this thread (see [`spent`]).
    pub async fn emit_batch(&self, signals: &mut Vec<SharedSignal>) -> Result<(), Closed> {
        spent::free();
        ComponentStats::add(&self.stats.received, signals.len() as u64);
        let (sent, refused) = self.tx.send_within(self.node, signals, None).await;
        ComponentStats::add(&self.stats.sent, sent as u64);
        match refused {
            None => Ok(()),
            Some(_) => Err(Closed),
        }
    }

    /// Emits a decoder's outcome, counting bad input (whose `error` signal is emitted too).
    pub async fn emit_decoded(&self, decoded: Decoded) -> Result<(), Closed> {
        self.emit(self.counted(decoded)).await
    }

    /// Emits decoders' outcomes in order, as one batch (see
    /// [`emit_batch`](SourceContext::emit_batch)), counting bad input.
    pub async fn emit_all_decoded(
        &self,
        decoded: impl IntoIterator<Item = Decoded>,
    ) -> Result<(), Closed> {
        let mut signals: Vec<SharedSignal> = decoded
            .into_iter()
            .map(|d| Arc::new(self.counted(d)))
            .collect();
        self.emit_batch(&mut signals).await
    }

    /// A decoder's outcome as the signal to emit, bad input counted (with the `message`
    /// of its `error` signal as the reason): for a source that gathers its own batches.
    pub fn counted(&self, decoded: Decoded) -> Signal {
        if let Decoded::BadInput(s) = &decoded {
            let reason = s
                .payload
                .get("message")
                .and_then(|m| m.as_str())
                .unwrap_or("bad input");
            self.stats.bad_input(reason.to_owned());
        }
        decoded.into_signal()
    }

    /// The source's counters and health.
    pub fn stats(&self) -> &Arc<ComponentStats> {
        &self.stats
    }

    /// Sets the health state.
    pub fn set_state(&self, state: HealthState, detail: Option<String>) {
        self.stats.set_state(state, detail);
    }

    /// The shutdown signal.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }
}

/// What a running output gets.
#[derive(Debug)]
pub struct OutputContext {
    pub(crate) name: String,
    pub(crate) queue: Arc<SignalQueue>,
    pub(crate) stats: Arc<ComponentStats>,
    pub(crate) inbound: Option<SourceContext>,
    pub(crate) telemetry: Arc<Telemetry>,
    pub(crate) shutdown: Shutdown,
    pub(crate) start: StartReport,
}

impl OutputContext {
    /// The output's name in the config.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Says that the output acquired what it needs to run (its port is bound, its file
    /// open): see [`Output::reports_started`].
    pub fn started(&self) {
        self.start.started();
    }

    /// The next signal to deliver; `None` when the graph has ended and the queue is empty.
    pub async fn next(&self) -> Option<SharedSignal> {
        let s = self.queue.pop().await?;
        ComponentStats::add(&self.stats.received, 1);
        Some(s)
    }

    /// Waits for the next signals and takes every one waiting, up to `max`, into `into`
    /// (one wake-up for a burst; nothing waits to fill a batch). `false` when the graph
    /// has ended and the queue is empty.
    pub async fn next_batch(&self, max: usize, into: &mut Vec<SharedSignal>) -> bool {
        let before = into.len();
        let got = self.queue.pop_batch(max, into).await;
        ComponentStats::add(&self.stats.received, (into.len() - before) as u64);
        got
    }

    /// Has the graph hand this output's signals to `sink` in the graph's own task as it
    /// routes them, instead of queueing them for this output's task: one hand-over between
    /// tasks less per batch. Only for an output whose delivery never waits (a sidecar's
    /// hub: a client that falls behind is cut off or dropped from, never waited for);
    /// `sink` gets each batch in order and leaves the vector empty, and counts what it
    /// delivers in the output's `sent` counter (a clone of [`stats`](OutputContext::stats)
    /// goes into it). The output's task then waits with [`closed`](OutputContext::closed).
    pub fn deliver_inline(&self, mut sink: impl FnMut(&mut Vec<SharedSignal>) + Send + 'static) {
        let stats = Arc::clone(&self.stats);
        self.queue.deliver_inline(Box::new(move |batch| {
            ComponentStats::add(&stats.received, batch.len() as u64);
            sink(batch);
        }));
    }

    /// Resolves when the graph has ended or removed this output and nothing is left in its
    /// queue. `Err` with the message when the [inline](OutputContext::deliver_inline)
    /// consumer panicked: panic with it in the output's task, so that it is contained and
    /// the output rebuilt as when the task itself panics.
    pub async fn closed(&self) -> Result<(), String> {
        self.queue.closed().await
    }

    /// Counts a delivered signal.
    pub fn delivered(&self, n: u64) {
        ComponentStats::add(&self.stats.sent, n);
    }

    /// Counts a refused signal (a type this output cannot send) and records why.
    pub fn refused(&self, reason: impl std::fmt::Display) {
        self.stats.bad_input(reason);
    }

    /// The queue the graph fills.
    pub fn queue(&self) -> &Arc<SignalQueue> {
        &self.queue
    }

    /// The output's counters and health.
    pub fn stats(&self) -> &Arc<ComponentStats> {
        &self.stats
    }

    /// Sets the health state.
    pub fn set_state(&self, state: HealthState, detail: Option<String>) {
        self.stats.set_state(state, detail);
    }

    /// For outputs that talk both ways: the `NAME.inbound` source their peers' messages
    /// enter the graph from.
    pub fn inbound(&self) -> Option<&SourceContext> {
        self.inbound.as_ref()
    }

    /// Every component of the graph (for `/health` and `/metrics`).
    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }

    /// The shutdown signal.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }
}
