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

/// A bounded multi-producer, single-consumer queue of signals.
#[derive(Debug)]
pub struct SignalQueue {
    items: Mutex<VecDeque<SharedSignal>>,
    capacity: usize,
    policy: WhenFull,
    closed: AtomicBool,
    not_empty: Notify,
    not_full: Notify,
}

impl SignalQueue {
    /// A queue holding at most `capacity` signals (at least 1).
    pub fn new(capacity: usize, policy: WhenFull) -> Self {
        SignalQueue {
            items: Mutex::new(VecDeque::with_capacity(capacity.clamp(1, 4096))),
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
        self.lock().len()
    }

    /// Whether no signal waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<SharedSignal>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pushes a signal, applying the policy when full (`Block` waits for room).
    pub async fn push(&self, signal: SharedSignal) -> Pushed {
        loop {
            let waiting = self.not_full.notified();
            {
                let mut items = self.lock();
                if self.closed.load(Ordering::Acquire) {
                    return Pushed::Closed;
                }
                if items.len() < self.capacity {
                    items.push_back(signal);
                    drop(items);
                    self.not_empty.notify_one();
                    return Pushed::Queued;
                }
                match self.policy {
                    WhenFull::DropNewest => return Pushed::DroppedNewest,
                    WhenFull::DropOldest => {
                        let old = items.pop_front();
                        items.push_back(signal);
                        drop(items);
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
                let mut items = self.lock();
                if self.closed.load(Ordering::Acquire) {
                    drop(items);
                    return lost + signals.count() as u64;
                }
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
                drop(items);
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
                let mut items = self.lock();
                let n = items.len().min(max.max(1));
                if n > 0 {
                    into.extend(items.drain(..n));
                    drop(items);
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
                let mut items = self.lock();
                if let Some(s) = items.pop_front() {
                    drop(items);
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
        let mut items = self.lock();
        let n = items.len().min(max);
        into.extend(items.drain(..n));
        drop(items);
        if n > 0 {
            self.not_full.notify_one();
        }
    }

    /// Closes the queue: pushes are refused, `pop` returns what is left, then `None`.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
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
