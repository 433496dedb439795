//! The graph's inbound queue: what sources send to the engine, bounded by signals.
//!
//! A source hands over a whole batch as one message (one push, at most one wake-up of
//! the engine) while the bound still counts signals: a sender takes room for each signal
//! before it sends, and the engine gives the room back as it takes them. The end of a
//! source's task travels the same queue, after its last signal, without taking room.

use std::sync::Arc;
use std::time::Duration;

use patchbay_signal::{SharedSignal, Signal};
use tokio::sync::{Semaphore, TryAcquireError, mpsc};

use crate::component::{Closed, Ending, Refused};

/// What moves from sources to the graph task, by the source's slot (a number the
/// runtime gives each running instance).
#[derive(Debug)]
pub(crate) enum Event {
    /// One signal.
    Signal(usize, SharedSignal),
    /// Several signals of one source, in order.
    Signals(usize, Vec<SharedSignal>),
    /// The source's task ended, after its last signal: how.
    Ended(usize, Ending),
}

impl Event {
    /// How many signals it carries (the room it holds in the queue).
    fn signals(&self) -> usize {
        match self {
            Event::Signal(..) => 1,
            Event::Signals(_, signals) => signals.len(),
            Event::Ended(..) => 0,
        }
    }

    /// The signals it carries, in order (of an event that was not sent).
    fn into_signals(self) -> Vec<SharedSignal> {
        match self {
            Event::Signal(_, signal) => vec![signal],
            Event::Signals(_, signals) => signals,
            Event::Ended(..) => Vec::new(),
        }
    }
}

/// A queue for `capacity` signals (at least 1).
pub(crate) fn channel(capacity: usize) -> (EventSender, EventReceiver) {
    // Room is taken in `u32` steps: a larger queue would never fill anyway.
    let capacity = capacity.clamp(1, u32::MAX as usize);
    let room = Arc::new(Semaphore::new(capacity));
    let (tx, rx) = mpsc::unbounded_channel();
    (
        EventSender {
            room: Arc::clone(&room),
            tx,
        },
        EventReceiver { room, rx },
    )
}

/// The sending end, one clone per source.
#[derive(Debug, Clone)]
pub(crate) struct EventSender {
    /// Room left, in signals.
    room: Arc<Semaphore>,
    tx: mpsc::UnboundedSender<Event>,
}

impl EventSender {
    /// Sends one signal, waiting for room.
    pub(crate) async fn send(&self, node: usize, signal: SharedSignal) -> Result<(), Closed> {
        self.room.acquire().await.map_err(|_| Closed)?.forget();
        self.tx
            .send(Event::Signal(node, signal))
            .map_err(|_| Closed)
    }

    /// Sends one signal if there is room now (else it is dropped).
    pub(crate) fn try_send(&self, node: usize, signal: Signal) -> Result<(), Refused> {
        match self.room.try_acquire() {
            Ok(permit) => permit.forget(),
            Err(TryAcquireError::NoPermits) => return Err(Refused::Full),
            Err(TryAcquireError::Closed) => return Err(Refused::Closed),
        }
        self.tx
            .send(Event::Signal(node, Arc::new(signal)))
            .map_err(|_| Refused::Closed)
    }

    /// Sends the front of `signals`, in order, taking all the room there is at once and
    /// then waiting (at most `wait`, when given) for each signal that finds none. The
    /// signals sent are removed from `signals`; the rest stay, in order. Returns how many
    /// were sent and why the rest were not, if any.
    pub(crate) async fn send_within(
        &self,
        node: usize,
        signals: &mut Vec<SharedSignal>,
        wait: Option<Duration>,
    ) -> (usize, Option<Refused>) {
        let total = signals.len();
        if total == 0 {
            return (0, None);
        }
        // The usual case: room for the whole batch, which travels as it is.
        if let Ok(count) = u32::try_from(total)
            && let Ok(permit) = self.room.try_acquire_many(count)
        {
            permit.forget();
            return match self.tx.send(Event::Signals(node, std::mem::take(signals))) {
                Ok(()) => (total, None),
                Err(unsent) => {
                    *signals = unsent.0.into_signals();
                    (0, Some(Refused::Closed))
                }
            };
        }
        // Drained in order (never shifted from the front: a POSTed array can be long),
        // and what is left goes back at the end.
        let mut pending = signals.drain(..);
        let mut given_back = Vec::new();
        let mut sent = 0;
        let refused = loop {
            let left = total - sent;
            if left == 0 {
                break None;
            }
            // All the room there is, in one message.
            let room = left.min(self.room.available_permits());
            let taken = match self.room.try_acquire_many(room as u32) {
                Ok(permit) if room > 0 => {
                    permit.forget();
                    room
                }
                Err(TryAcquireError::Closed) => break Some(Refused::Closed),
                // None left, or taken meanwhile by another source: wait for one.
                _ => {
                    let room = match wait {
                        Some(wait) => tokio::time::timeout(wait, self.room.acquire()).await,
                        None => Ok(self.room.acquire().await),
                    };
                    match room {
                        Ok(Ok(permit)) => {
                            permit.forget();
                            1
                        }
                        Ok(Err(_)) => break Some(Refused::Closed),
                        Err(_) => break Some(Refused::Full),
                    }
                }
            };
            let event = match taken {
                1 => match pending.next() {
                    Some(signal) => Event::Signal(node, signal),
                    None => break None,
                },
                _ => Event::Signals(node, pending.by_ref().take(taken).collect()),
            };
            if let Err(unsent) = self.tx.send(event) {
                // The engine is gone: the signals go back, refused.
                given_back = unsent.0.into_signals();
                break Some(Refused::Closed);
            }
            sent += taken;
        };
        let rest: Vec<SharedSignal> = pending.collect();
        signals.extend(given_back.into_iter().chain(rest));
        (sent, refused)
    }

    /// Sends the end of a source's task (after its last signal); `false` when the engine
    /// is gone.
    pub(crate) fn ended(&self, slot: usize, ending: Ending) -> bool {
        self.tx.send(Event::Ended(slot, ending)).is_ok()
    }
}

/// The engine's end.
#[derive(Debug)]
pub(crate) struct EventReceiver {
    room: Arc<Semaphore>,
    rx: mpsc::UnboundedReceiver<Event>,
}

impl EventReceiver {
    /// Waits for events and appends every one ready (at most `limit`); 0 when every
    /// sender is gone.
    pub(crate) async fn recv_many(&mut self, events: &mut Vec<Event>, limit: usize) -> usize {
        let from = events.len();
        let n = self.rx.recv_many(events, limit).await;
        let signals = events[from..].iter().map(Event::signals).sum();
        self.room.add_permits(signals);
        n
    }

    /// Takes no more: senders waiting for room, and any that send from now on, are
    /// refused (`Refused::Closed`); what was sent before stays to be taken.
    pub(crate) fn close(&mut self) {
        self.room.close();
        self.rx.close();
    }

    /// The next event if one is ready.
    pub(crate) fn try_recv(&mut self) -> Option<Event> {
        let event = self.rx.try_recv().ok()?;
        self.room.add_permits(event.signals());
        Some(event)
    }
}

impl Drop for EventReceiver {
    fn drop(&mut self) {
        // Senders waiting for room learn that the graph is gone.
        self.room.close();
    }
}

#[cfg(test)]
mod tests {
    use patchbay_signal::Object;

    use super::*;

    fn signals(n: usize) -> Vec<SharedSignal> {
        (0..n)
            .map(|i| Arc::new(Signal::new(format!("s{i}"), "test", Object::new())))
            .collect()
    }

    fn signal() -> Signal {
        Signal::new("s0", "test", Object::new())
    }

    fn names(signals: &[SharedSignal]) -> Vec<&str> {
        signals.iter().map(|s| s.kind.as_str()).collect()
    }

    fn kinds(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .flat_map(|e| match e {
                Event::Signal(_, s) => vec![s.kind.to_string()],
                Event::Signals(_, s) => s.iter().map(|s| s.kind.to_string()).collect(),
                Event::Ended(..) => vec!["end".into()],
            })
            .collect()
    }

    #[tokio::test]
    async fn a_batch_takes_the_room_there_is_in_one_message_and_waits_for_the_rest() {
        let (tx, mut rx) = channel(3);
        let mut batch = signals(5);
        let wait = Some(Duration::from_millis(10));
        let (sent, refused) = tx.send_within(1, &mut batch, wait).await;
        // Three fit, in one message; no room came back for the other two.
        assert_eq!((sent, refused), (3, Some(Refused::Full)));
        assert_eq!(names(&batch), ["s3", "s4"]);
        let mut events = Vec::new();
        assert_eq!(rx.recv_many(&mut events, 16).await, 1);
        assert_eq!(kinds(&events), ["s0", "s1", "s2"]);
        // Taking them gave the room back.
        let (sent, refused) = tx.send_within(1, &mut batch, wait).await;
        assert_eq!((sent, refused), (2, None));
        assert!(batch.is_empty());
        assert!(tx.ended(1, Ending::Finished));
        events.clear();
        rx.recv_many(&mut events, 16).await;
        assert_eq!(kinds(&events), ["s3", "s4", "end"]);
    }

    #[tokio::test]
    async fn a_sender_waiting_for_room_gets_it_when_the_engine_takes_signals() {
        let (tx, mut rx) = channel(1);
        assert!(tx.try_send(1, signal()).is_ok());
        let full = tx.try_send(1, signal());
        assert_eq!(full, Err(Refused::Full));
        let waiting = tokio::spawn({
            let tx = tx.clone();
            async move {
                let mut batch = signals(2);
                tx.send_within(1, &mut batch, None).await
            }
        });
        let mut events = Vec::new();
        let mut seen = 0;
        while seen < 3 {
            rx.recv_many(&mut events, 16).await;
            seen = kinds(&events).len();
        }
        assert_eq!(waiting.await.unwrap(), (2, None));
        assert_eq!(kinds(&events), ["s0", "s0", "s1"]);
    }

    #[tokio::test]
    async fn a_long_batch_through_a_small_queue_arrives_whole_and_in_order() {
        let (tx, mut rx) = channel(4);
        let engine = tokio::spawn(async move {
            let mut events = Vec::new();
            while rx.recv_many(&mut events, 8).await > 0 {}
            kinds(&events)
        });
        let mut batch = signals(20_000);
        assert_eq!(tx.send_within(1, &mut batch, None).await, (20_000, None));
        assert!(batch.is_empty());
        drop(tx);
        let arrived = engine.await.unwrap();
        let expected: Vec<String> = (0..20_000).map(|i| format!("s{i}")).collect();
        assert_eq!(arrived, expected);
    }

    #[tokio::test]
    async fn a_closed_queue_refuses_its_waiting_senders_and_keeps_what_was_sent() {
        let (tx, mut rx) = channel(2);
        let mut first = signals(2);
        assert_eq!(tx.send_within(1, &mut first, None).await, (2, None));
        let waiting = tokio::spawn({
            let tx = tx.clone();
            async move {
                let mut batch = signals(3);
                let outcome = tx.send_within(1, &mut batch, None).await;
                (outcome, names(&batch).join(","))
            }
        });
        // The sender waits for room (the queue is full), then the engine closes it.
        tokio::task::yield_now().await;
        rx.close();
        assert_eq!(
            waiting.await.unwrap(),
            ((0, Some(Refused::Closed)), "s0,s1,s2".to_owned())
        );
        // Taking what was sent gives room back, but nothing can take it any more.
        let mut events = Vec::new();
        while let Some(event) = rx.try_recv() {
            events.push(event);
        }
        assert_eq!(kinds(&events), ["s0", "s1"]);
        let mut late = signals(1);
        assert_eq!(
            tx.send_within(1, &mut late, None).await,
            (0, Some(Refused::Closed))
        );
        assert_eq!(tx.try_send(1, signal()), Err(Refused::Closed));
    }

    #[tokio::test]
    async fn when_the_engine_is_gone_nothing_is_taken_and_everything_is_given_back() {
        let (tx, rx) = channel(4);
        drop(rx);
        let mut batch = signals(3);
        let (sent, refused) = tx.send_within(1, &mut batch, None).await;
        assert_eq!((sent, refused), (0, Some(Refused::Closed)));
        assert_eq!(names(&batch), ["s0", "s1", "s2"]);
        assert_eq!(tx.try_send(1, signal()), Err(Refused::Closed));
        assert!(tx.send(1, Arc::new(signal())).await.is_err());
        assert!(!tx.ended(1, Ending::Finished));
    }
}
