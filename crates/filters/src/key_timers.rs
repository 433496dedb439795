//! The per-key bookkeeping of the filters that hold a signal until a timer releases it
//! (`throttle`, `sample` with `interval_ms`): keyed states bounded by `max_keys`, at most
//! one held signal per key, the timers that release them, and the filter's clock.

use patchbay_graph::Emit;
use patchbay_signal::path::Path;
use patchbay_signal::{SharedSignal, Signal};

use crate::keyed::{Key, Keyed, Slot, Timers};

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

/// A held signal whose timer fired, taken from its key (which is kept, with its state).
#[derive(Debug)]
pub(crate) struct Release {
    /// When the timer was due (at or before the `now` it fired at).
    pub(crate) due: i64,
    /// The key that held the signal.
    pub(crate) slot: Slot,
    /// The signal to emit.
    pub(crate) signal: SharedSignal,
}

/// Filter states by key (see [`Keyed`]), each key holding at most one signal until a timer
/// due at a given time releases it. Timers fire in order of due time, then in the order
/// the signals were held, and a key evicted by `max_keys` first emits what it holds: one
/// implementation of the rules `throttle` and `sample` share.
pub(crate) struct KeyTimers<S> {
    keys: Keyed<Entry<S>>,
    timers: Timers,
    /// Numbers the held signals, so that timers due at the same time fire in order.
    seq: u64,
    /// The filter's clock: the latest `now` it was given (it never goes back).
    now: i64,
}

impl<S> KeyTimers<S> {
    /// No keys, keyed by the values at `paths` (one shared key without a path), at most
    /// `max_keys` of them.
    pub(crate) fn new(paths: impl IntoIterator<Item = Path>, max_keys: usize) -> Self {
        KeyTimers {
            keys: Keyed::new(paths, max_keys),
            timers: Timers::default(),
            seq: 0,
            now: i64::MIN,
        }
    }

    /// Whether a `key` path is configured.
    pub(crate) fn is_keyed(&self) -> bool {
        self.keys.is_keyed()
    }

    /// Moves the clock to `now` unless it is already later, and returns it: a signal
    /// older than the clock is handled at the clock's time.
    pub(crate) fn advance(&mut self, now: i64) -> i64 {
        self.now = self.now.max(now);
        self.now
    }

    /// The earliest due timer.
    pub(crate) fn next_due(&self) -> Option<i64> {
        self.timers.next_due()
    }

    /// Takes the earliest held signal whose timer is due at or before `now` (and moves the
    /// clock to `now`); the filter emits it and updates its key.
    pub(crate) fn pop_due(&mut self, now: i64) -> Option<Release> {
        self.advance(now);
        while let Some((due, slot)) = self.timers.pop_due(now) {
            let held = self.keys.get_mut(slot).and_then(|e| e.held.take());
            if let Some(held) = held {
                return Some(Release {
                    due,
                    slot,
                    signal: held.signal,
                });
            }
        }
        None
    }

    /// Emits every held signal in order of due time and forgets every key (for a `reset`
    /// signal and at end of input).
    pub(crate) fn release_all(&mut self, emit: &mut Emit) {
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
    pub(crate) fn take(&mut self, slot: Slot) -> Option<SharedSignal> {
        let held = self.keys.get_mut(slot)?.held.take()?;
        self.timers.remove(held.due, held.seq);
        Some(held.signal)
    }

    /// Takes the earliest held signal that was held before the one `slot` holds (its timer
    /// due earlier, or at the same time and held first), so that a filter releasing
    /// `slot` early can first release what came before it.
    pub(crate) fn pop_before(&mut self, slot: Slot) -> Option<Release> {
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
                return Some(Release {
                    due: held.due,
                    slot: other,
                    signal: held.signal,
                });
            }
        }
    }

    /// Forgets the key at `slot`, returning its state: for a key whose signal was just
    /// released (a held signal would be lost with it).
    pub(crate) fn remove(&mut self, slot: Slot) -> Option<S> {
        self.keys.remove(slot).map(|e| e.state)
    }
}
