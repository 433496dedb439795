//! The bounded signal queue in front of every output, with its overflow decision.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use patchbay_signal::SharedSignal;
use serde::Deserialize;
use tokio::sync::Notify;

/// What an output's queue does when it is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WhenFull {
    /// Wait for room: nothing is lost, and the graph waits for this output (`stdout` and
    /// `file` default to this).
    Block,
    /// Drop the oldest queued signal to make room (UI outputs and two-way links default
    /// to this: a link whose peer is away keeps the latest controls without stalling the
    /// graph).
    DropOldest,
    /// Drop the incoming signal.
    DropNewest,
}

/// What happened to a pushed signal.
#[derive(Debug, Clone, PartialEq)]
pub enum Pushed {
    /// Queued.
    Queued,
    /// Queued, and the oldest signal was dropped to make room.
    DroppedOldest(SharedSignal),
    /// Not queued: the queue was full and the policy is drop-newest.
    DroppedNewest,
    /// Not queued: the queue is closed.
    Closed,
}

/// A consumer that takes an output's signals in the task that pushes them (the graph's),
/// instead of from the queue: see [`SignalQueue::deliver_inline`]. It is handed each
/// batch in order and leaves the vector empty.
pub type InlineSink = Box<dyn FnMut(&mut Vec<SharedSignal>) + Send>;

/// A bounded multi-producer, single-consumer queue of signals.
pub struct SignalQueue {
    state: Mutex<State>,
    capacity: usize,
    policy: WhenFull,
    closed: AtomicBool,
    not_empty: Notify,
    not_full: Notify,
}

/// What the queue's lock guards: the signals waiting, or the consumer that takes them at
/// once.
struct State {
    items: VecDeque<SharedSignal>,
    inline: Option<InlineSink>,
    /// The inline consumer panicked (its message): the queue closed then.
    failure: Option<String>,
}

impl State {
    /// Hands `batch` to the inline consumer (there is none: nothing happens); `false`
    /// when it panicked. The panic is caught here, in the pusher's task: the consumer is
    /// dropped, the queue closes and [`SignalQueue::closed`] reports the panic to the
    /// output's own task (the batch counts as lost).
    fn hand_inline(&mut self, batch: &mut Vec<SharedSignal>, closed: &AtomicBool) -> bool {
        let Some(sink) = self.inline.as_mut() else {
            return true;
        };
        let call = std::panic::AssertUnwindSafe(|| sink(batch));
        if let Err(panic) = std::panic::catch_unwind(call) {
            self.inline = None;
            self.failure = Some(crate::engine::panic_message(&*panic));
            closed.store(true, Ordering::Release);
            return false;
        }
        true
    }
}

impl std::fmt::Debug for SignalQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalQueue")
            .field("capacity", &self.capacity)
            .field("policy", &self.policy)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl SignalQueue {
    /// A queue holding at most `capacity` signals (at least 1).
    pub fn new(capacity: usize, policy: WhenFull) -> Self {
        SignalQueue {
            state: Mutex::new(State {
                items: VecDeque::with_capacity(capacity.clamp(1, 4096)),
                inline: None,
                failure: None,
            }),
            capacity: capacity.max(1),
            policy,
            closed: AtomicBool::new(false),
            not_empty: Notify::new(),
            not_full: Notify::new(),
        }
    }

    /// The overflow policy.
    pub fn policy(&self) -> WhenFull {
        self.policy
    }

    /// Signals waiting.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// Whether no signal waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// From now on, signals pushed are handed to `sink` in the pusher's task, in order,
    /// without waiting and without being queued (what is queued already goes first): one
    /// hand-over between tasks less, for an output whose delivery never waits (a sidecar's
    /// hub, which cuts or drops from a client that falls behind rather than waiting for
    /// it). The overflow policy no longer applies: nothing is ever full. [`pop_batch`]
    /// and [`pop`] then only wait for the queue to close.
    ///
    /// [`pop_batch`]: SignalQueue::pop_batch
    /// [`pop`]: SignalQueue::pop
    pub fn deliver_inline(&self, sink: InlineSink) {
        let mut st = self.lock();
        st.inline = Some(sink);
        let mut queued: Vec<SharedSignal> = st.items.drain(..).collect();
        if !queued.is_empty() {
            // A panic is reported by `closed`.
            st.hand_inline(&mut queued, &self.closed);
        }
        if self.closed.load(Ordering::Acquire) {
            // Closed before: what was queued is delivered, nothing more comes.
            st.inline = None;
        }
        drop(st);
        self.not_full.notify_one();
        self.not_empty.notify_one();
    }

    /// Waits until the queue is closed and empty. `Err` with the message when an inline
    /// consumer ([`deliver_inline`](SignalQueue::deliver_inline)) panicked: the output's
    /// task should fail with it (a panic there is contained and the output rebuilt).
    pub async fn closed(&self) -> Result<(), String> {
        loop {
            let waiting = self.not_empty.notified();
            {
                let mut st = self.lock();
                if let Some(failure) = st.failure.take() {
                    return Err(failure);
                }
                if self.closed.load(Ordering::Acquire) && st.items.is_empty() {
                    return Ok(());
                }
            }
            waiting.await;
        }
    }

    /// Pushes a signal, applying the policy when full (`Block` waits for room).
    pub async fn push(&self, signal: SharedSignal) -> Pushed {
        loop {
            let waiting = self.not_full.notified();
            {
                let mut st = self.lock();
                if self.closed.load(Ordering::Acquire) {
                    return Pushed::Closed;
                }
                if st.inline.is_some() {
                    if !st.hand_inline(&mut vec![signal], &self.closed) {
                        drop(st);
                        self.not_empty.notify_one();
                        return Pushed::Closed;
                    }
                    return Pushed::Queued;
                }
                let items = &mut st.items;
                if items.len() < self.capacity {
                    items.push_back(signal);
                    drop(st);
                    self.not_empty.notify_one();
                    return Pushed::Queued;
                }
                match self.policy {
                    WhenFull::DropNewest => return Pushed::DroppedNewest,
                    WhenFull::DropOldest => {
                        let old = items.pop_front();
                        items.push_back(signal);
                        drop(st);
                        self.not_empty.notify_one();
                        return old.map(Pushed::DroppedOldest).unwrap_or(Pushed::Queued);
                    }
                    WhenFull::Block => {}
                }
            }
            waiting.await;
        }
    }

    /// Pushes a batch in order, applying the policy to each signal when full (`Block`
    /// waits for room): one lock and one wake-up for everything that fits. Returns how
    /// many were dropped (by the policy, or because the queue is closed).
    pub async fn push_all(&self, signals: impl IntoIterator<Item = SharedSignal>) -> u64 {
        let mut signals = signals.into_iter().peekable();
        let mut lost = 0;
        loop {
            let waiting = self.not_full.notified();
            {
                let mut st = self.lock();
                if self.closed.load(Ordering::Acquire) {
                    drop(st);
                    return lost + signals.count() as u64;
                }
                if st.inline.is_some() {
                    let mut batch: Vec<SharedSignal> = signals.collect();
                    let n = batch.len() as u64;
                    if !st.hand_inline(&mut batch, &self.closed) {
                        drop(st);
                        // Only a panic wakes the output's task (`closed`).
                        self.not_empty.notify_one();
                        return lost + n;
                    }
                    return lost;
                }
                let items = &mut st.items;
                let mut queued = false;
                while signals.peek().is_some() {
                    if items.len() < self.capacity {
                        items.extend(signals.next());
                        queued = true;
                        continue;
                    }
                    match self.policy {
                        WhenFull::DropNewest => {
                            signals.next();
                            lost += 1;
                        }
                        WhenFull::DropOldest => {
                            items.pop_front();
                            items.extend(signals.next());
                            lost += 1;
                            queued = true;
                        }
                        WhenFull::Block => break,
                    }
                }
                drop(st);
                if queued {
                    self.not_empty.notify_one();
                }
                if signals.peek().is_none() {
                    return lost;
                }
            }
            waiting.await;
        }
    }

    /// Waits for at least one signal and takes every waiting one, up to `max` (at least
    /// 1), into `into`: one lock and one wake-up for a batch. `false` once closed and empty.
    pub async fn pop_batch(&self, max: usize, into: &mut Vec<SharedSignal>) -> bool {
        loop {
            let waiting = self.not_empty.notified();
            {
                let mut st = self.lock();
                let n = st.items.len().min(max.max(1));
                if n > 0 {
                    into.extend(st.items.drain(..n));
                    drop(st);
                    self.not_full.notify_one();
                    return true;
                }
                if self.closed.load(Ordering::Acquire) {
                    return false;
                }
            }
            waiting.await;
        }
    }

    /// Takes the next signal, waiting for one; `None` once closed and empty.
    pub async fn pop(&self) -> Option<SharedSignal> {
        loop {
            let waiting = self.not_empty.notified();
            {
                let mut st = self.lock();
                if let Some(s) = st.items.pop_front() {
                    drop(st);
                    self.not_full.notify_one();
                    return Some(s);
                }
                if self.closed.load(Ordering::Acquire) {
                    return None;
                }
            }
            waiting.await;
        }
    }

    /// Takes up to `max` waiting signals without waiting.
    pub fn drain_ready(&self, max: usize, into: &mut Vec<SharedSignal>) {
        let mut st = self.lock();
        let n = st.items.len().min(max);
        into.extend(st.items.drain(..n));
        drop(st);
        if n > 0 {
            self.not_full.notify_one();
        }
    }

    /// Closes the queue: pushes are refused, `pop` returns what is left, then `None`.
    pub fn close(&self) {
        // Under the lock: a push that saw the queue open has finished with the sink, which
        // goes (and what it holds with it).
        let sink = {
            let mut st = self.lock();
            self.closed.store(true, Ordering::Release);
            st.inline.take()
        };
        drop(sink);
        self.not_empty.notify_one();
        self.not_full.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_signal::Signal;
    use std::sync::Arc;

    fn sig(n: i64) -> SharedSignal {
        Arc::new(Signal::new("t", "s", Default::default()).at(n))
    }

    #[tokio::test]
    async fn drop_oldest_keeps_newest() {
        let q = SignalQueue::new(2, WhenFull::DropOldest);
        q.push(sig(1)).await;
        q.push(sig(2)).await;
        assert!(matches!(q.push(sig(3)).await, Pushed::DroppedOldest(s) if s.timestamp == 1));
        q.close();
        assert_eq!(q.pop().await.unwrap().timestamp, 2);
        assert_eq!(q.pop().await.unwrap().timestamp, 3);
        assert!(q.pop().await.is_none());
    }

    #[tokio::test]
    async fn drop_newest_refuses() {
        let q = SignalQueue::new(1, WhenFull::DropNewest);
        q.push(sig(1)).await;
        assert_eq!(q.push(sig(2)).await, Pushed::DroppedNewest);
    }

    #[tokio::test]
    async fn block_waits_for_room() {
        let q = Arc::new(SignalQueue::new(1, WhenFull::Block));
        q.push(sig(1)).await;
        let q2 = Arc::clone(&q);
        let pusher = tokio::spawn(async move { q2.push(sig(2)).await });
        tokio::task::yield_now().await;
        assert!(!pusher.is_finished());
        assert_eq!(q.pop().await.unwrap().timestamp, 1);
        assert_eq!(pusher.await.unwrap(), Pushed::Queued);
        assert_eq!(q.pop().await.unwrap().timestamp, 2);
    }

    #[tokio::test]
    async fn an_inline_consumer_gets_everything_in_order_and_its_panic_closes_the_queue() {
        let q = SignalQueue::new(2, WhenFull::Block);
        q.push(sig(1)).await;
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&got);
        q.deliver_inline(Box::new(move |batch| {
            for s in batch.drain(..) {
                assert!(s.timestamp != 13, "unlucky");
                seen.lock().unwrap().push(s.timestamp);
            }
        }));
        // Past the capacity, without waiting: nothing is queued any more.
        assert_eq!(q.push_all((2..=6).map(sig)).await, 0);
        assert_eq!(q.push(sig(7)).await, Pushed::Queued);
        assert_eq!(*got.lock().unwrap(), [1, 2, 3, 4, 5, 6, 7]);
        assert!(q.is_empty());

        // A panic is caught in the pusher's task: the batch is lost, the queue closed, and
        // the output's task told why.
        assert_eq!(q.push_all([sig(12), sig(13)]).await, 2);
        assert_eq!(q.push_all([sig(14)]).await, 1, "closed: counted as lost");
        assert_eq!(q.closed().await, Err("unlucky".into()));

        let q = SignalQueue::new(2, WhenFull::Block);
        q.deliver_inline(Box::new(Vec::clear));
        q.close();
        assert_eq!(q.closed().await, Ok(()));

        // Closed before the consumer came: it still gets what was queued.
        let q = SignalQueue::new(2, WhenFull::Block);
        q.push(sig(1)).await;
        q.close();
        let got = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&got);
        q.deliver_inline(Box::new(move |batch| {
            seen.lock()
                .unwrap()
                .extend(batch.drain(..).map(|s| s.timestamp));
        }));
        assert_eq!(q.closed().await, Ok(()));
        assert_eq!(*got.lock().unwrap(), [1]);
    }

    #[tokio::test]
    async fn batches_keep_order_and_apply_the_policy_to_each_signal() {
        let q = SignalQueue::new(3, WhenFull::DropOldest);
        assert_eq!(q.push_all((1..=5).map(sig)).await, 2);
        let mut got = Vec::new();
        assert!(q.pop_batch(10, &mut got).await);
        let got: Vec<i64> = got.iter().map(|s| s.timestamp).collect();
        assert_eq!(got, [3, 4, 5]);

        let q = Arc::new(SignalQueue::new(2, WhenFull::Block));
        let q2 = Arc::clone(&q);
        let pusher = tokio::spawn(async move { q2.push_all((1..=5).map(sig)).await });
        let mut got = Vec::new();
        while got.len() < 5 {
            assert!(q.pop_batch(2, &mut got).await);
        }
        assert_eq!(pusher.await.unwrap(), 0, "block loses nothing");
        let got: Vec<i64> = got.iter().map(|s| s.timestamp).collect();
        assert_eq!(got, [1, 2, 3, 4, 5]);
        q.close();
        assert!(!q.pop_batch(2, &mut Vec::new()).await);
        assert_eq!(q.push_all([sig(6)]).await, 1, "closed: counted as lost");
    }
}
