//! One component's task: its run future, caught if it panics, its end reported.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;
use tracing::Instrument as _;

use crate::approvals::Approvals;
use crate::component::{BoxFuture, ComponentError, Ending, Life};
use crate::engine::panic_message;
use crate::events::EventSender;
use crate::telemetry::{ComponentStats, HealthState};

/// Polls a component's future inside `catch_unwind`: a panic in a component ends its
/// task with [`Ending::Panicked`] instead of unwinding into the runtime.
struct CatchUnwind(BoxFuture<Result<(), ComponentError>>);

impl Future for CatchUnwind {
    type Output = Ending;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ending> {
        let fut = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(Ok(()))) => Poll::Ready(Ending::Finished),
            Ok(Poll::Ready(Err(e))) => Poll::Ready(Ending::Failed(e.to_string())),
            Err(panic) => Poll::Ready(Ending::Panicked(panic_message(panic.as_ref()))),
        }
    }
}

/// Reports a task's end when it is dropped: after it ran to the end, or when it is
/// aborted (then as [`Ending::Aborted`]), unless a source's end already went with its
/// signals.
struct EndReport {
    slot: usize,
    life: mpsc::UnboundedSender<Life>,
    ending: Option<Ending>,
    done: watch::Sender<bool>,
    /// An output's approvals, taken off the board when it ends (before `done`, so that
    /// the instance replacing it starts with none of them).
    approvals: Option<(Arc<Approvals>, String)>,
}

impl Drop for EndReport {
    fn drop(&mut self) {
        if let Some((board, name)) = self.approvals.take() {
            board.close_all(&name);
        }
        if let Some(ending) = self.ending.take() {
            let _ = self.life.send(Life::Ended(self.slot, ending));
        }
        self.done.send_replace(true);
    }
}

/// What a component's task needs besides its run future.
pub(super) struct TaskEnds {
    /// Its slot (what its signals and its end are reported under).
    pub(super) slot: usize,
    /// Its name, for the span every log line of it carries.
    pub(super) name: String,
    pub(super) stats: Arc<ComponentStats>,
    pub(super) life: mpsc::UnboundedSender<Life>,
    /// For a source: where its end goes, after its last signal.
    pub(super) events: Option<EventSender>,
    /// Set when the task has ended.
    pub(super) done: watch::Sender<bool>,
    /// The instance this one replaces (a reload rebuilt it): it must be gone first (its
    /// port released), or be stopped at `grace`'s end.
    pub(super) after: Option<Predecessor>,
    /// An output's `.inbound` side, which runs and stops with it.
    pub(super) inbound: Option<Arc<ComponentStats>>,
    /// An output's board of approvals (the graph's): what it left open is closed when it
    /// ends.
    pub(super) approvals: Option<Arc<Approvals>>,
}

/// The instance a rebuilt one waits for.
pub(super) struct Predecessor {
    pub(super) done: watch::Receiver<bool>,
    pub(super) abort: AbortHandle,
    pub(super) grace: Duration,
}

/// The task of a source or an output: waits for the instance it replaces, runs, catches
/// a panic, counts and reports how it ended.
pub(super) async fn component_task(
    run: impl FnOnce() -> BoxFuture<Result<(), ComponentError>>,
    ends: TaskEnds,
) {
    let span = tracing::info_span!("component", name = %ends.name);
    async move {
        let mut report = EndReport {
            slot: ends.slot,
            life: ends.life,
            ending: Some(Ending::Aborted),
            done: ends.done,
            approvals: ends.approvals.map(|board| (board, ends.name.clone())),
        };
        if let Some(p) = ends.after {
            let mut done = p.done;
            let in_time = tokio::time::timeout(p.grace, done.wait_for(|d| *d))
                .await
                .is_ok();
            if !in_time {
                tracing::warn!("the instance it replaces did not stop in time: stopping it");
                p.abort.abort();
                let _ = done.wait_for(|d| *d).await;
            }
        }
        let st = ends.stats;
        st.set_state(HealthState::Ok, None);
        if let Some(s) = &ends.inbound {
            s.set_state(HealthState::Ok, None);
        }
        let ending = CatchUnwind(run()).await;
        match &ending {
            Ending::Finished => st.set_state(HealthState::Stopped, None),
            Ending::Failed(e) => {
                st.record_error(e);
                st.set_state(HealthState::Failed, None);
            }
            Ending::Panicked(why) => {
                ComponentStats::add(&st.panics, 1);
                st.record_error(format!("panicked: {why}"));
                st.set_state(HealthState::Failed, Some("panicked".into()));
            }
            Ending::Aborted => {}
        }
        if let Some(s) = ends.inbound {
            s.set_state(HealthState::Stopped, None);
        }
        match ends.events {
            // A source's end follows its last signal, so that the graph sees them in
            // order; the end report is then not needed.
            Some(events) => {
                report.ending = Some(ending.clone());
                if events.ended(ends.slot, ending) {
                    report.ending = None;
                }
            }
            None => report.ending = Some(ending),
        }
    }
    .instrument(span)
    .await
}
