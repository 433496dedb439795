//! The graph ends of a two-way link (an agent runtime's connection): one transport runs
//! either as a listen-only source or as an output whose peer's messages come out of
//! `NAME.inbound`, and [`LinkEnds`] lets it talk to whichever ends it has without caring
//! which of the two it runs as.

use patchbay_signal::SharedSignal;
use patchbay_signal::normalize::Decoded;

use crate::approvals::Route;
use crate::component::{Closed, OutputContext, SourceContext};
use crate::telemetry::HealthState;

/// The graph ends a link talks to: where the signals it receives go, and where the
/// controls it sends come from. A source has only the first; an output has the second and,
/// when declared two-way, the first (its `NAME.inbound`).
#[derive(Debug, Clone, Copy)]
pub struct LinkEnds<'a> {
    /// Where received signals go (`None`: an output without an inbound side).
    pub signals_in: Option<&'a SourceContext>,
    /// Where controls come from (`None`: a listen-only source).
    pub controls: Option<&'a OutputContext>,
}

impl<'a> LinkEnds<'a> {
    /// The ends of a link running as a source: it only listens.
    pub fn source(cx: &'a SourceContext) -> Self {
        LinkEnds {
            signals_in: Some(cx),
            controls: None,
        }
    }

    /// The ends of a link running as an output: controls from its queue, received
    /// signals out of its `NAME.inbound`, if it has one.
    pub fn output(cx: &'a OutputContext) -> Self {
        LinkEnds {
            signals_in: cx.inbound(),
            controls: Some(cx),
        }
    }

    /// Sets the health of every end: one link, one state.
    pub fn set_state(&self, state: HealthState, detail: Option<String>) {
        if let Some(cx) = self.controls {
            cx.set_state(state, detail.clone());
        }
        if let Some(cx) = self.signals_in {
            cx.set_state(state, detail);
        }
    }

    /// Logs an error and keeps it as the `last_error` of the output (else the source).
    pub fn record_error(&self, message: &str) {
        if let Some(cx) = self.controls {
            cx.stats().record_error(message);
        } else if let Some(cx) = self.signals_in {
            cx.stats().record_error(message);
        } else {
            tracing::warn!("{message}");
        }
    }

    /// Resolves when shutdown is requested.
    pub async fn shutdown(&self) {
        match (self.controls, self.signals_in) {
            (Some(cx), _) => cx.shutdown().wait().await,
            (None, Some(cx)) => cx.shutdown().wait().await,
            (None, None) => std::future::pending().await,
        }
    }

    /// The next control signal; `None` once the graph has ended and the queue is empty.
    /// Never resolves for a listen-only link, so that it can sit in a `select!`.
    ///
    /// A `control.answer` without `promptId` (what a pad sends) comes out naming the
    /// approval it decides when that is the oldest any agent of the graph waits on and
    /// this link holds it; when another component holds it, this link never sees it
    /// (it is counted delivered: it went where it belongs). See [`crate::approvals`].
    pub async fn next_control(&self) -> Option<SharedSignal> {
        let Some(cx) = self.controls else {
            return std::future::pending().await;
        };
        loop {
            let signal = cx.next().await?;
            match cx.telemetry().approvals().route(cx.name(), signal) {
                Route::Handle(signal) => return Some(signal),
                Route::Elsewhere => cx.delivered(1),
            }
        }
    }

    /// Emits the decoded signals in `out` (emptying it) into the graph; without an
    /// inbound side they are dropped. `Err` when the graph is gone. The approvals a
    /// two-way link emits (`approval.requested`, `approval.decided`) keep the graph's
    /// board in step, so that the status page lists them and a promptless answer finds
    /// them, and each says in `metadata.pendingApprovals` how many of the graph's agents'
    /// approvals wait after it (what a pad's LED shows).
    pub async fn emit_all(&self, out: &mut Vec<Decoded>) -> Result<(), Closed> {
        let Some(cx) = self.signals_in else {
            out.clear();
            return Ok(());
        };
        if let Some(controls) = self.controls {
            let board = controls.telemetry().approvals();
            for decoded in out.iter_mut() {
                if let Decoded::Signal(signal) = decoded {
                    board.note_emitted(controls.name(), signal);
                }
            }
        }
        cx.emit_all_decoded(out.drain(..)).await
    }

    /// Gives up: every end `Failed` with `why`. An output still takes what the graph
    /// sends it (refused and counted) until the graph ends, so that its blocking queue
    /// never stalls the rest of the graph.
    pub async fn fail(&self, why: &str) {
        self.set_state(HealthState::Failed, Some(why.to_owned()));
        self.drain_refusing(why).await;
    }

    /// Refuses every control until the graph ends (at once for a listen-only link).
    pub async fn drain_refusing(&self, why: &str) {
        if let Some(cx) = self.controls {
            while let Some(signal) = cx.next().await {
                cx.refused(format!("{} not sent: {why}", signal.kind));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use patchbay_signal::{Object, Signal};

    use super::*;
    use crate::component::Shutdown;
    use crate::events::{self, Event, EventReceiver};
    use crate::queue::{SignalQueue, WhenFull};
    use crate::telemetry::{ComponentStats, Role, Telemetry};

    /// An output `agent` with its `agent.inbound` side, as the runtime builds them.
    fn two_way() -> (OutputContext, EventReceiver) {
        let (tx, rx) = events::channel(8);
        let inbound = SourceContext::new(
            1,
            "agent.inbound".into(),
            tx,
            Arc::new(ComponentStats::new("agent.inbound", "test", Role::Source)),
            Shutdown::never(),
        );
        let cx = OutputContext {
            name: "agent".into(),
            queue: Arc::new(SignalQueue::new(8, WhenFull::Block)),
            stats: Arc::new(ComponentStats::new("agent", "test", Role::Output)),
            inbound: Some(inbound),
            telemetry: Arc::new(Telemetry::default()),
            shutdown: Shutdown::never(),
            start: Default::default(),
        };
        (cx, rx)
    }

    #[test]
    fn one_state_for_every_end_and_errors_on_the_output() {
        let (cx, _rx) = two_way();
        let ends = LinkEnds::output(&cx);
        ends.set_state(HealthState::Ok, Some("connected".into()));
        ends.record_error("boom");
        let output = cx.stats().snapshot();
        let inbound = cx.inbound().expect("inbound").stats().snapshot();
        assert_eq!(output.state, HealthState::Ok);
        assert_eq!(inbound.state, HealthState::Ok);
        assert_eq!(inbound.detail.as_deref(), Some("connected"));
        assert_eq!(output.last_error.as_deref(), Some("boom"));
        assert_eq!(inbound.last_error, None);
    }

    #[tokio::test]
    async fn decoded_signals_go_to_the_inbound_side_or_nowhere() {
        let (cx, mut rx) = two_way();
        let signal = || Decoded::Signal(Signal::new("text", "test", Object::new()));
        let mut out = vec![signal(), signal()];
        LinkEnds::output(&cx)
            .emit_all(&mut out)
            .await
            .expect("open");
        assert!(out.is_empty());
        assert!(matches!(rx.try_recv(), Some(Event::Signals(1, s)) if s.len() == 2));

        let without_inbound = LinkEnds {
            signals_in: None,
            controls: Some(&cx),
        };
        let mut out = vec![signal()];
        without_inbound.emit_all(&mut out).await.expect("dropped");
        assert!(out.is_empty());
        assert!(rx.try_recv().is_none());
    }
}
