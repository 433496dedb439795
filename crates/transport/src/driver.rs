//! The reconnect loop every network adapter runs: one [`Driver`], a [`Link`] per adapter.

use std::future::Future;
use std::sync::Arc;

use patchbay_graph::{ComponentError, ComponentStats, HealthState, LinkEnds};

use crate::backoff::{Backoff, retry_detail};
use crate::options::{Defaults, TransportOptions};
use crate::redact::RedactedUrl;

/// How a connection attempt or a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Lost, or never made (refused, a timeout, a broken handshake): reconnect after the
    /// backoff delay.
    Lost(String),
    /// Refused in a way a retry cannot fix (a wrong token, HTTP 401/403): the link is
    /// `failed` at once, without retrying.
    Refused(String),
    /// The peer asked for no more reconnects (an SSE server's 204): `stopped`, with this
    /// detail.
    Finished(String),
    /// Shutdown was requested, or the graph ended.
    Stop,
}

/// A link used up its reconnection attempts; its ends are `failed` with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("gave up after {attempts} attempts: {reason}")]
pub struct GaveUp {
    /// The failed attempts in a row.
    pub attempts: u32,
    /// Why the last one failed.
    pub reason: String,
}

/// What an adapter supplies to the [`Driver`]: how to connect (its handshake) and how to
/// talk on a connection (its framing). Everything else, retrying included, is the
/// driver's. The link value lives across reconnections (decoders, resume points).
pub trait Link: Send {
    /// An open, handshaken connection.
    type Connection: Send;

    /// One connection attempt, handshake included; the driver bounds it by
    /// `connect_timeout_ms` and ends it at shutdown. `Err` says how it failed.
    fn connect(
        &mut self,
        ends: &LinkEnds<'_>,
    ) -> impl Future<Output = Result<Self::Connection, Ended>> + Send;

    /// Talks on a connection until it ends. A listen-only link's session is ended by the
    /// driver at shutdown; an output's ends when [`LinkEnds::next_control`] says the graph
    /// has ended.
    fn session(
        &mut self,
        connection: Self::Connection,
        ends: &LinkEnds<'_>,
    ) -> impl Future<Output = Ended> + Send;

    /// Called after a loss, before the next delay is drawn (an SSE server's `retry:`
    /// changes the first delay here).
    fn on_lost(&mut self, backoff: &mut Backoff) {
        let _ = backoff;
    }
}

/// The reconnect loop: connect (bounded by the connect timeout) → run the session → on a
/// loss, back off with jitter and retry; give up after `max_attempts` failures in a row
/// (health `failed`, controls refused until the graph ends). Health: `starting`
/// ("connecting to URL"), `ok` ("connected to URL"), `recovering` ("retrying in N s:
/// reason"), `failed`. Every wait ends at shutdown; a successful connection resets the
/// backoff. URLs are shown redacted.
pub struct Driver<'a> {
    kind: &'static str,
    url: String,
    backoff: Backoff,
    connect_timeout: std::time::Duration,
    ends: LinkEnds<'a>,
    mirror: Option<Arc<ComponentStats>>,
}

impl<'a> Driver<'a> {
    /// A driver for a link of type `kind` (used in logs) with these options and ends.
    pub fn new<D: Defaults>(
        kind: &'static str,
        options: &TransportOptions<D>,
        ends: LinkEnds<'a>,
    ) -> Self {
        Driver {
            kind,
            url: options.shown_url().to_string(),
            backoff: options.backoff(),
            connect_timeout: options.connect_timeout(),
            ends,
            mirror: None,
        }
    }

    /// Shows this URL in health details and logs (a link that connects to a URL derived
    /// from its `url`).
    pub fn with_url(mut self, url: &str) -> Self {
        self.url = RedactedUrl(url).to_string();
        self
    }

    /// Also reports health to `stats` (an output whose inbound side runs the link while
    /// the output does other work).
    pub fn mirror_health(mut self, stats: Arc<ComponentStats>) -> Self {
        self.mirror = Some(stats);
        self
    }

    /// Runs the link until shutdown, the graph's end, a refusal, or the attempts run
    /// out (`Err`: a refusal or [`GaveUp`]).
    pub async fn run<L: Link>(mut self, link: &mut L) -> Result<(), ComponentError> {
        let name = self.name();
        self.set_state(
            HealthState::Starting,
            Some(format!("connecting to {}", self.url)),
        );
        loop {
            let attempt = tokio::select! {
                r = tokio::time::timeout(self.connect_timeout, link.connect(&self.ends)) => r,
                () = self.ends.shutdown() => return Ok(()),
            };
            let ended = match attempt {
                Err(_) => Ended::Lost(format!(
                    "no connection to {} within {} ms",
                    self.url,
                    self.connect_timeout.as_millis()
                )),
                Ok(Err(ended)) => ended,
                Ok(Ok(connection)) => {
                    self.backoff.reset();
                    self.set_state(HealthState::Ok, Some(format!("connected to {}", self.url)));
                    tracing::info!("{} {name}: connected to {}", self.kind, self.url);
                    let listen_only = self.ends.controls.is_none();
                    tokio::select! {
                        ended = link.session(connection, &self.ends) => ended,
                        () = self.ends.shutdown(), if listen_only => Ended::Stop,
                    }
                }
            };
            let reason = match ended {
                Ended::Stop => return Ok(()),
                Ended::Finished(detail) => {
                    self.set_state(HealthState::Stopped, Some(detail));
                    return Ok(());
                }
                Ended::Refused(reason) => {
                    let why = format!("{reason}; not retrying");
                    self.ends.record_error(&why);
                    self.fail(&why).await;
                    return Err(why.into());
                }
                Ended::Lost(reason) => reason,
            };
            if crate::ws::is_oversized(&reason) {
                // A peer that sends more than `max_frame`: counted like any bad input;
                // the connection is reset below.
                self.bad_input(&reason);
            }
            self.ends
                .record_error(&format!("{} {name}: {reason}", self.kind));
            link.on_lost(&mut self.backoff);
            let Some(delay) = self.backoff.next_jittered() else {
                let gave_up = GaveUp {
                    attempts: self.backoff.attempts(),
                    reason,
                };
                self.fail(&gave_up.to_string()).await;
                return Err(gave_up.into());
            };
            let detail = retry_detail(delay, &reason);
            tracing::info!("{} {name}: {detail}", self.kind);
            self.set_state(HealthState::Recovering, Some(detail));
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.ends.shutdown() => return Ok(()),
            }
        }
    }

    fn name(&self) -> String {
        match (self.ends.controls, self.ends.signals_in) {
            (Some(cx), _) => cx.name().to_owned(),
            (None, Some(cx)) => cx.name().to_owned(),
            (None, None) => self.kind.to_owned(),
        }
    }

    fn bad_input(&self, why: &str) {
        match (self.ends.signals_in, self.ends.controls) {
            (Some(cx), _) => cx.stats().bad_input(why),
            (None, Some(cx)) => cx.stats().bad_input(why),
            (None, None) => {}
        }
    }

    fn set_state(&self, state: HealthState, detail: Option<String>) {
        if let Some(stats) = &self.mirror {
            stats.set_state(state, detail.clone());
        }
        self.ends.set_state(state, detail);
    }

    /// Every end `failed` with `why`; an output refuses (and counts) what the graph still
    /// sends it until the graph ends, so that its queue never stalls the graph.
    async fn fail(&self, why: &str) {
        if let Some(stats) = &self.mirror {
            stats.set_state(HealthState::Failed, Some(why.to_owned()));
        }
        self.ends.fail(why).await;
    }
}
