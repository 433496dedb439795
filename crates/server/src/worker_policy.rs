//! The CPU policy of the runtime's workers while a connection is hot.
//!
//! A hot connection (see `http::hot`) reads and decodes on a thread of its own and hands
//! each read's signals to the graph's engine, which runs on the workers. A worker woken by
//! such a hand-over is often placed on the core the connection's thread runs on and
//! preempts it, so the one serial part of the pipeline waits while the worker writes a
//! whole batch, and the other core idles meanwhile (BENCHMARKS.md, "The workers yield to
//! a hot connection"). So while a connection is hot the workers run as `SCHED_BATCH`
//! (Linux): the same share of the CPU, but a worker that wakes does not preempt a running
//! thread; it runs on a core that is free, or when the running thread's turn ends. The
//! connection's thread runs as `SCHED_OTHER`. Each worker sets its own policy as it wakes
//! (a system call only when its policy changes), so once no connection is hot the workers
//! are back to `SCHED_OTHER` as they wake: at low rates nothing changes. A thread the
//! runtime starts meanwhile (a worker, or one of its blocking pool) starts as
//! `SCHED_OTHER`, whatever the thread that started it ran as.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a connection is hot: the workers yield to it.
static YIELDING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Whether this thread runs as `SCHED_BATCH` (`None`: not known yet, a thread may
    /// inherit either policy from the thread that started it).
    static BATCH: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Installed with the runtime's `on_thread_unpark`: a worker that wakes takes the policy
/// of the moment.
pub fn on_worker_unpark() {
    set_batch(YIELDING.load(Ordering::Relaxed));
}

/// Installed with the runtime's `on_thread_start`: a new thread (a worker, or one of the
/// blocking pool, which never unparks as a worker does) starts as `SCHED_OTHER`, whatever
/// the thread that started it ran as.
pub fn on_thread_start() {
    set_batch(false);
}

/// A connection became hot (`true`) or cooled (`false`); the thread that is to carry a hot
/// connection runs as `SCHED_OTHER`.
pub(crate) fn connection_hot(hot: bool) {
    YIELDING.store(hot, Ordering::Relaxed);
    if hot {
        set_batch(false);
    }
}

/// Held by the tests that make a connection hot: they change what the workers of every
/// runtime of the process do.
#[cfg(test)]
pub(crate) static HOT_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether the calling thread runs as `SCHED_BATCH`, as far as this module set it.
#[cfg(test)]
pub(crate) fn is_batch() -> Option<bool> {
    BATCH.with(Cell::get)
}

/// Sets the calling thread's policy, unless it is known to be that already.
fn set_batch(batch: bool) {
    if BATCH.with(|known| known.replace(Some(batch))) != Some(batch) {
        apply(batch);
    }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn apply(batch: bool) {
    let policy = if batch {
        libc::SCHED_BATCH
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid `sched_param` that outlives the call, and pid 0 is the
    // calling thread. Moving between the two policies that are not real-time needs no
    // privilege; a failure leaves the policy as it was, which changes how fast signals
    // go, not what happens to them.
    unsafe {
        libc::sched_setscheduler(0, policy, &param);
    }
}

#[cfg(not(target_os = "linux"))]
fn apply(_batch: bool) {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The calling thread's policy, as the kernel has it.
    #[allow(unsafe_code)]
    fn policy() -> i32 {
        // SAFETY: no arguments but the calling thread's pid (0).
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn workers_yield_while_a_connection_is_hot_and_no_other_thread_does() {
        let _turn = HOT_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .on_thread_start(on_thread_start)
            .on_thread_unpark(on_worker_unpark)
            .build()
            .unwrap();
        // A task on a worker, after a wake: the policy it runs with.
        let on_a_worker = || {
            runtime.block_on(async {
                tokio::spawn(async {
                    tokio::task::yield_now().await;
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    (policy(), is_batch())
                })
                .await
                .unwrap()
            })
        };
        connection_hot(true);
        assert_eq!(policy(), libc::SCHED_OTHER, "the hot connection's thread");
        assert_eq!(on_a_worker(), (libc::SCHED_BATCH, Some(true)));
        // A blocking thread started by a worker that yields does not inherit its policy.
        connection_hot(true);
        let blocking = runtime.block_on(async {
            tokio::spawn(async {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                tokio::task::spawn_blocking(|| (policy(), is_batch()))
                    .await
                    .unwrap()
            })
            .await
            .unwrap()
        });
        assert_eq!(blocking, (libc::SCHED_OTHER, Some(false)));
        connection_hot(false);
        assert_eq!(on_a_worker(), (libc::SCHED_OTHER, Some(false)));
    }
}
