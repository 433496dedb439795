//! The per-key bookkeeping of the filters that hold a signal until a timer releases it
//! (`throttle`, `sample` with `interval_ms`, `coalesce`, `debounce`): keyed states bounded
//! by `max_keys`, at most one held signal per key, the timers that release them, the
//! filter's clock and what a `reset` signal does to them ([`KeyTimers`]), and the running
//! filter around them ([`Holding`]), so that each of those filters is only its rules
//! ([`HoldRules`]).

use std::sync::Arc;

use patchbay_graph::{ClockKind, Emit, Filter, FilterSpec};
use patchbay_signal::{SharedSignal, Signal};

use crate::RESET;
use crate::keyed::{Key, KeySpec, Keyed, Slot, Timers};

/// A signal waiting for its timer.
#[derive(Debug)]
struct Held {
    signal: SharedSignal,
    due: i64,
    seq: u64,
}

/// A key's filter state and the signal it holds.
struct Entry<S> {
    state: S,
    held: Option<Held>,
}

/// What becomes of a key once its timer released the signal it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterRelease {
    /// The key and its state are kept (the state may have been updated).
    Keep,
    /// The key is forgotten: it has nothing left to remember.
    Forget,
}

/// Filter states by key (see [`Keyed`]), each key holding at most one signal until a timer
/// due at a given time releases it. Timers fire in order of due time, then in the order
/// the signals were held, and a key evicted by `max_keys` first emits what it holds: one
/// implementation of the rules the holding filters share.
pub(crate) struct KeyTimers<S> {
    keys: Keyed<Entry<S>>,
    timers: Timers,
    /// Numbers the held signals, so that timers due at the same time fire in order.
    seq: u64,
    /// The filter's clock: the latest `now` it was given (it never goes back).
    now: i64,
}

impl<S> KeyTimers<S> {
    /// No keys yet, keyed as `spec` says.
    pub(crate) fn new(spec: &KeySpec) -> Self {
        KeyTimers {
            keys: Keyed::new(spec),
            timers: Timers::default(),
            seq: 0,
            now: i64::MIN,
        }
    }

    /// Whether a `key` path is configured.
    pub(crate) fn is_keyed(&self) -> bool {
        self.keys.is_keyed()
    }

    /// The filter's clock: the latest time it was given.
    pub(crate) fn now(&self) -> i64 {
        self.now
    }

    /// Moves the clock to `now` unless it is already later, and returns it: a signal
    /// older than the clock is handled at the clock's time.
    fn advance(&mut self, now: i64) -> i64 {
        self.now = self.now.max(now);
        self.now
    }

    /// The earliest due timer.
    fn next_due(&self) -> Option<i64> {
        self.timers.next_due()
    }

    /// Emits every held signal whose timer is due at or before `now`, in firing order (and
    /// moves the clock to `now`). Before each one leaves, `released` is given its due time
    /// and its key's state, to update, and says whether the key is kept.
    fn release_due(
        &mut self,
        now: i64,
        emit: &mut Emit,
        mut released: impl FnMut(i64, &mut S) -> AfterRelease,
    ) {
        self.advance(now);
        while let Some((due, slot)) = self.timers.pop_due(now) {
            let Some(entry) = self.keys.get_mut(slot) else {
                continue;
            };
            let Some(held) = entry.held.take() else {
                continue;
            };
            if released(due, &mut entry.state) == AfterRelease::Forget {
                self.keys.remove(slot);
            }
            emit.pass(held.signal);
        }
    }

    /// Handles a `reset` signal: emits every held signal (in order of due time), forgets
    /// every key and passes the reset on, then returns `None`. Any other signal is handed
    /// back to the filter.
    fn pass_reset(&mut self, signal: SharedSignal, emit: &mut Emit) -> Option<SharedSignal> {
        if signal.kind != RESET {
            return Some(signal);
        }
        self.release_all(emit);
        emit.pass(signal);
        None
    }

    /// Emits every held signal in order of due time and forgets every key (for a `reset`
    /// signal and at end of input).
    fn release_all(&mut self, emit: &mut Emit) {
        for slot in self.timers.take_all() {
            if let Some(held) = self.keys.get_mut(slot).and_then(|e| e.held.take()) {
                emit.pass(held.signal);
            }
        }
        self.keys.clear();
    }

    /// The slot of `signal`'s key, marked most recently used; its state is created by
    /// `make` when the key is new. The key evicted to make room, if any, first emits the
    /// signal it holds.
    pub(crate) fn entry(
        &mut self,
        signal: &Signal,
        make: impl FnOnce(&Key) -> S,
        emit: &mut Emit,
    ) -> Slot {
        let (slot, evicted) = self.keys.entry(signal, |key| Entry {
            state: make(key),
            held: None,
        });
        if let Some(held) = evicted.and_then(|e| e.held) {
            self.timers.remove(held.due, held.seq);
            emit.pass(held.signal);
        }
        slot
    }

    /// The filter state of the key at `slot`.
    pub(crate) fn state_mut(&mut self, slot: Slot) -> Option<&mut S> {
        self.keys.get_mut(slot).map(|e| &mut e.state)
    }

    /// Whether the key at `slot` holds a signal.
    pub(crate) fn is_holding(&self, slot: Slot) -> bool {
        self.keys.get(slot).is_some_and(|e| e.held.is_some())
    }

    /// Makes the key at `slot` hold `signal` until `due`; the signal it held before is
    /// replaced and leaves by the dropped port.
    pub(crate) fn hold(&mut self, slot: Slot, signal: SharedSignal, due: i64, emit: &mut Emit) {
        let Some(entry) = self.keys.get_mut(slot) else {
            return;
        };
        if let Some(old) = entry.held.take() {
            self.timers.remove(old.due, old.seq);
            emit.drop(old.signal);
        }
        self.seq += 1;
        let seq = self.seq;
        entry.held = Some(Held { signal, due, seq });
        self.timers.insert(due, seq, slot);
    }

    /// The slot of `signal`'s key if it is remembered.
    pub(crate) fn find(&self, signal: &Signal) -> Option<Slot> {
        self.keys.find(signal)
    }

    /// The signal the key at `slot` holds, to change in place (its timer is unchanged).
    pub(crate) fn held_mut(&mut self, slot: Slot) -> Option<&mut SharedSignal> {
        self.keys
            .get_mut(slot)?
            .held
            .as_mut()
            .map(|h| &mut h.signal)
    }

    /// Takes the signal the key at `slot` holds, cancelling its timer (the key is kept).
    fn take(&mut self, slot: Slot) -> Option<SharedSignal> {
        let held = self.keys.get_mut(slot)?.held.take()?;
        self.timers.remove(held.due, held.seq);
        Some(held.signal)
    }

    /// Emits the signal the key at `slot` holds now, before its timer, after the held
    /// signals whose timers come before its own: held signals leave in timer order even
    /// when one of them leaves early.
    pub(crate) fn release_early(&mut self, slot: Slot, emit: &mut Emit) {
        while let Some(earlier) = self.pop_before(slot) {
            emit.pass(earlier);
        }
        if let Some(signal) = self.take(slot) {
            emit.pass(signal);
        }
    }

    /// Takes the earliest held signal that was held before the one `slot` holds (its timer
    /// due earlier, or at the same time and held first).
    fn pop_before(&mut self, slot: Slot) -> Option<SharedSignal> {
        let (due, seq) = {
            let held = self.keys.get(slot)?.held.as_ref()?;
            (held.due, held.seq)
        };
        loop {
            let (first, other) = self.timers.first()?;
            if first >= (due, seq) {
                return None;
            }
            self.timers.remove(first.0, first.1);
            if let Some(held) = self.keys.get_mut(other).and_then(|e| e.held.take()) {
                return Some(held.signal);
            }
        }
    }
}

/// What one holding filter does with the keys that [`Holding`] keeps for it: the part
/// that differs between `throttle`, `sample`, `coalesce` and `debounce`.
pub(crate) trait HoldRules: Send + Sync + 'static {
    /// What the filter remembers per key, besides the signal the key holds.
    type State: Send;

    /// Handles a signal at the time of `keys`' clock ([`KeyTimers::now`]): the timers
    /// due by then have fired and a `reset` signal was handled already, so `signal` is
    /// never one.
    fn on_signal(&self, keys: &mut KeyTimers<Self::State>, signal: SharedSignal, emit: &mut Emit);

    /// A key's timer, due at `due`, is releasing the signal the key held: updates the
    /// key's state and says whether the key is kept.
    fn released(&self, due: i64, state: &mut Self::State) -> AfterRelease;
}

/// A running holding filter: the rules `R` over [`KeyTimers`]. What every holding filter
/// does alike is written here once: the clock never goes back, due timers fire before a
/// signal, a `reset` signal emits every held signal and forgets every key, and the end of
/// input emits every held signal.
pub(crate) struct Holding<R: HoldRules> {
    rules: Arc<R>,
    keys: KeyTimers<R::State>,
}

impl<R: HoldRules> Holding<R> {
    /// The spec of a filter running `rules` on `clock`, keyed as `keys` says: each
    /// instance starts with no keys.
    pub(crate) fn spec(clock: Option<ClockKind>, keys: KeySpec, rules: R) -> FilterSpec {
        let rules = Arc::new(rules);
        FilterSpec::new(clock, move || {
            Box::new(Holding {
                keys: KeyTimers::new(&keys),
                rules: rules.clone(),
            })
        })
    }
}

impl<R: HoldRules> Filter for Holding<R> {
    fn on_signal(&mut self, signal: SharedSignal, now: i64, emit: &mut Emit) {
        let now = self.keys.advance(now);
        self.on_timer(now, emit);
        let Some(signal) = self.keys.pass_reset(signal, emit) else {
            return;
        };
        self.rules.on_signal(&mut self.keys, signal, emit);
    }

    fn next_due(&self) -> Option<i64> {
        self.keys.next_due()
    }

    fn on_timer(&mut self, now: i64, emit: &mut Emit) {
        let rules = &self.rules;
        self.keys
            .release_due(now, emit, |due, state| rules.released(due, state));
    }

    fn flush(&mut self, emit: &mut Emit) {
        self.keys.release_all(emit);
    }
}
