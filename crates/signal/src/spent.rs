//! Signals at the end of their way, handed back to be freed where signals are made.
//!
//! A signal is three blocks of memory (its `Arc`, its payload's text, its metadata's),
//! made by the task that decodes a connection's envelopes and most often freed by its last
//! consumer's task, on the other core. mimalloc frees another thread's block with an
//! atomic operation on that thread's page, and that thread later collects such blocks one
//! by one before it can reuse them: at full rate mimalloc took 22% of the daemon's CPU, 7%
//! once the frees moved (BENCHMARKS.md, "This round: signals freed where they were made").
//! So a consumer that ends signals a batch at a time (the sidecar, once it has written
//! their frames) hands the batch to [`hand_back`], and a source that hands the graph its
//! signals a batch at a time (a connection that decodes envelopes; the graph's
//! `emit_batch` calls it) calls [`free`] before each batch: the blocks are then most often
//! freed by the thread that made them, which is a plain store.
//!
//! Nothing here is a queue of data: what is in the bin has been delivered, and freeing it
//! anywhere is correct; only where it is freed changes. The bin holds at most
//! [`MAX_SIGNALS`]; a batch that does not fit, or that meets the bin in use, is freed at
//! once by the consumer (as it was before). Neither side ever waits for the other.

use std::sync::Mutex;

use crate::SharedSignal;

/// The most signals the bin holds, so that, when no producer takes them (signals that come
/// from sources that do not call [`free`]), a few batches' memory stays held, no more.
pub const MAX_SIGNALS: usize = 4096;

/// Spent batches, and how many signals they hold.
struct Bin {
    batches: Vec<Vec<SharedSignal>>,
    signals: usize,
}

static BIN: Mutex<Bin> = Mutex::new(Bin {
    batches: Vec::new(),
    signals: 0,
});

/// Takes the signals of `batch`, which the caller is done with, to be freed by the next
/// producer that calls [`free`]; leaves `batch` empty with its capacity. The signals are
/// freed here when the bin is full or in use.
pub fn hand_back(batch: &mut Vec<SharedSignal>) {
    if batch.is_empty() {
        return;
    }
    if let Ok(mut bin) = BIN.try_lock()
        && bin.signals + batch.len() <= MAX_SIGNALS
    {
        bin.signals += batch.len();
        let spent = std::mem::replace(batch, Vec::with_capacity(batch.capacity()));
        bin.batches.push(spent);
        return;
    }
    batch.clear();
}

/// Frees the signals consumers have handed back, on the caller's thread; a producer calls
/// it before handing a batch of new signals to the graph. Returns at once when the bin is
/// in use.
pub fn free() {
    let spent = match BIN.try_lock() {
        Ok(mut bin) if bin.signals > 0 => {
            bin.signals = 0;
            std::mem::take(&mut bin.batches)
        }
        _ => return,
    };
    // Outside the lock: a consumer handing back meanwhile is not turned away.
    drop(spent);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Signal, object};
    use std::sync::Arc;

    fn batch(n: usize) -> Vec<SharedSignal> {
        (0..n)
            .map(|i| Arc::new(Signal::new("t", "test:spent", object! {"i" => i})))
            .collect()
    }

    #[test]
    fn handed_back_signals_live_until_freed_and_the_bin_stays_bounded() {
        // One test for the whole bin: it is the process's, and tests run side by side.
        let mut first = batch(3);
        let watch = Arc::downgrade(&first[0]);
        let capacity = first.capacity();
        hand_back(&mut first);
        assert!(first.is_empty());
        assert_eq!(first.capacity(), capacity);
        assert!(watch.upgrade().is_some(), "held until a producer frees it");
        free();
        assert!(watch.upgrade().is_none(), "freed by the producer");

        // A batch that would take the bin past its bound is freed by the consumer.
        let mut large = batch(MAX_SIGNALS + 1);
        let watch = Arc::downgrade(&large[MAX_SIGNALS]);
        hand_back(&mut large);
        assert!(large.is_empty());
        assert!(watch.upgrade().is_none(), "freed at once");

        // A signal someone else still holds is not freed by either.
        let kept = Arc::clone(&batch(1)[0]);
        let mut shared = vec![Arc::clone(&kept)];
        hand_back(&mut shared);
        free();
        assert_eq!(Arc::strong_count(&kept), 1);
    }
}
