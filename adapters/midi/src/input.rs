//! A MIDI input that follows a port pattern across hot-plug.
//!
//! midir has no disconnect callback, and on JACK a vanished port's connection goes silent
//! without an error and is not restored when the port returns. So [`InputWatch::rescan`]
//! lists the ports with a scanning client of its own (`connect()` consumes the client it
//! is called on), notices when the connected port is gone, and connects again when a
//! matching port exists. A dead or restarted JACK server is noticed by the session check
//! (see `session`): the old clients are forgotten and new ones opened.
//!
//! The input callback runs on the MIDI system's thread (JACK's process thread): it must
//! never block, so it only stamps the bytes and `try_send`s them to a bounded channel,
//! counting what does not fit.

use std::sync::Arc;
use std::time::Duration;

use midir::{MidiInput, MidiInputConnection};
use patchbay_graph::HealthState;
use patchbay_signal::now_ms;
use tokio::sync::mpsc;
use tokio::time::{Interval, MissedTickBehavior};

use crate::PortMatcher;
use crate::session::{Held, Session, with_session};
use crate::system::{self, MidiError};

/// How many messages wait between the MIDI thread and the task decoding them.
pub(crate) const INPUT_QUEUE: usize = 1024;

/// The bytes of one message, inline when short so the MIDI thread does not allocate for
/// channel messages.
#[derive(Debug, Clone)]
pub(crate) enum Raw {
    /// Up to three bytes.
    Short([u8; 3], u8),
    /// A longer message (SysEx).
    Long(Vec<u8>),
}

impl Raw {
    fn new(bytes: &[u8]) -> Raw {
        match bytes {
            [a] => Raw::Short([*a, 0, 0], 1),
            [a, b] => Raw::Short([*a, *b, 0], 2),
            [a, b, c] => Raw::Short([*a, *b, *c], 3),
            other => Raw::Long(other.to_vec()),
        }
    }

    /// The message bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Raw::Short(bytes, len) => bytes.get(..usize::from(*len)).unwrap_or(&[]),
            Raw::Long(bytes) => bytes,
        }
    }
}

/// One message as received.
#[derive(Debug, Clone)]
pub(crate) struct Message {
    /// When the callback ran, epoch ms.
    pub(crate) at: i64,
    /// The bytes.
    pub(crate) raw: Raw,
}

/// What a rescan found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Status {
    /// Connected to this port now.
    Connected(String),
    /// Still connected to this port.
    Still(String),
    /// No port matches (what is waited for, and whether a port was connected before).
    Waiting(Absent),
    /// The connected port disappeared; the connection is closed.
    Lost(String),
    /// The MIDI system cannot be reached (the connection, if any, is closed).
    NoSystem(MidiError),
    /// A matching port exists but opening it failed.
    OpenFailed(MidiError),
}

impl Status {
    /// The health detail for this status.
    pub(crate) fn detail(&self, pattern: &str) -> String {
        match self {
            Status::Connected(port) | Status::Still(port) => format!("connected to {port}"),
            Status::Waiting(absent) => absent.detail().to_owned(),
            Status::Lost(port) => lost_detail(port, pattern, None),
            Status::NoSystem(err) | Status::OpenFailed(err) => err.to_string(),
        }
    }
}

/// Why a watch has no port: none matching has appeared yet, or the one it had disappeared.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Absent {
    /// No matching port since the start: the device is not plugged in yet, which is no
    /// fault (`waiting`). The text says what is waited for and what exists.
    NotYet(String),
    /// The port that was connected disappeared and has not returned (`recovering`).
    Gone(String),
}

impl Absent {
    /// The health detail.
    pub(crate) fn detail(&self) -> &str {
        match self {
            Absent::NotYet(text) | Absent::Gone(text) => text,
        }
    }

    /// The health state.
    pub(crate) fn state(&self) -> HealthState {
        match self {
            Absent::NotYet(_) => HealthState::Waiting,
            Absent::Gone(_) => HealthState::Recovering,
        }
    }
}

/// The health detail while waiting for a port that disappeared to return.
pub(crate) fn lost_detail(port: &str, pattern: &str, available: Option<&str>) -> String {
    match available {
        Some(available) => format!(
            "waiting for port {port} to return (it disappeared; matching `{pattern}`, \
             available: {available})"
        ),
        None => format!("waiting for port {port} to return (it disappeared; matching `{pattern}`)"),
    }
}

/// `a, b` or `none`: the ports that are not patchbay's own.
pub(crate) fn available(names: &[String], matcher: &PortMatcher) -> String {
    let names: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !matcher.is_own_port(n))
        .collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// The midir objects of a watch over one port, input or output: the client that lists the
/// ports, the connection with its port's name, and the port that disappeared until one
/// is connected again (for health). Its objects are closed inside a session, wherever it
/// is dropped (closing a JACK client waits for its thread: drop it off async threads).
pub(crate) struct PortHold<S, C> {
    /// Lists the ports.
    pub(crate) scanner: Option<Held<S>>,
    /// The connection, and the name of its port.
    pub(crate) connection: Option<(String, Held<C>)>,
    /// The port that disappeared, until a port is connected again.
    pub(crate) lost: Option<String>,
}

/// Why a rescan cannot go on with what a [`PortHold`] holds.
pub(crate) enum Gone {
    /// The connected port disappeared (its name).
    Lost(String),
    /// The MIDI system is down.
    Down(MidiError),
}

impl<S, C> PortHold<S, C> {
    /// Nothing held.
    pub(crate) fn new() -> Self {
        PortHold {
            scanner: None,
            connection: None,
            lost: None,
        }
    }

    /// The start of every rescan: forgets the objects of a dead server (see `session`),
    /// and says whether the connection is gone with it or the system is down.
    pub(crate) fn check(&mut self, session: &Session) -> Option<Gone> {
        if self.scanner.as_ref().is_some_and(|s| !s.is_current()) {
            self.scanner = None;
        }
        if self
            .connection
            .as_ref()
            .is_some_and(|(_, connection)| !connection.is_current())
        {
            return self.lose().map(Gone::Lost);
        }
        if let Some(reason) = session.down() {
            self.scanner = None;
            self.connection = None;
            return Some(Gone::Down(MidiError::NoSystem(reason.to_owned())));
        }
        None
    }

    /// Closes the connection, remembering its port as lost; returns the port's name.
    pub(crate) fn lose(&mut self) -> Option<String> {
        let (port, _) = self.connection.take()?;
        self.lost = Some(port.clone());
        Some(port)
    }

    /// Keeps a new connection to `port`.
    pub(crate) fn connected(&mut self, session: &Session, port: String, connection: C) {
        self.lost = None;
        self.connection = Some((port, Held::new(session, connection)));
    }

    /// What is waited for when no port of `names` matches `matcher`.
    pub(crate) fn waiting(&self, names: &[String], matcher: &PortMatcher) -> Absent {
        let available = available(names, matcher);
        let pattern = matcher.pattern();
        match &self.lost {
            Some(lost) => Absent::Gone(lost_detail(lost, pattern, Some(&available))),
            None => Absent::NotYet(format!(
                "waiting for a port matching `{pattern}` (available: {available})"
            )),
        }
    }
}

impl<S, C> Drop for PortHold<S, C> {
    fn drop(&mut self) {
        let connection = self.connection.take();
        let scanner = self.scanner.take();
        with_session(|_| {
            drop(connection);
            drop(scanner);
        });
    }
}

/// Called when a message is dropped because the channel is full.
pub(crate) type OnDrop = Arc<dyn Fn() + Send + Sync>;

/// The midir side of an input: a scanning client and the connection, if any. Its methods
/// block (briefly): call them from `spawn_blocking`.
pub(crate) struct InputWatch {
    matcher: PortMatcher,
    client_name: String,
    local_port: String,
    held: PortHold<MidiInput, MidiInputConnection<()>>,
    tx: mpsc::Sender<Message>,
    on_drop: OnDrop,
}

impl InputWatch {
    /// A watch for ports matching `matcher`, whose connection port is named `local_port`
    /// in the client `client_name`.
    pub(crate) fn new(
        matcher: PortMatcher,
        client_name: &str,
        local_port: &str,
        tx: mpsc::Sender<Message>,
        on_drop: OnDrop,
    ) -> Self {
        InputWatch {
            matcher: matcher.with_own_client(client_name),
            client_name: client_name.to_owned(),
            local_port: system::local_port_name(local_port),
            held: PortHold::new(),
            tx,
            on_drop,
        }
    }

    /// Lists the ports and connects, reconnects or notices a loss.
    pub(crate) fn rescan(&mut self) -> Status {
        with_session(|session| self.rescan_in(session))
    }

    fn rescan_in(&mut self, session: &Session) -> Status {
        match self.held.check(session) {
            Some(Gone::Lost(port)) => return Status::Lost(port),
            Some(Gone::Down(err)) => return Status::NoSystem(err),
            None => {}
        }
        let scanner = match self.held.scanner.take() {
            Some(scanner) => scanner,
            None => {
                match system::input_client(session, &system::scan_client_name(&self.client_name)) {
                    Ok(scanner) => Held::new(session, scanner),
                    Err(err) => {
                        self.held.connection = None;
                        return Status::NoSystem(err);
                    }
                }
            }
        };
        let names = scanner
            .get(session)
            .map(system::input_names)
            .unwrap_or_default();
        self.held.scanner = Some(scanner);
        if let Some((port, _)) = &self.held.connection {
            if names.iter().any(|n| n == port) {
                return Status::Still(port.clone());
            }
            if let Some(port) = self.held.lose() {
                return Status::Lost(port);
            }
        }
        let Some(name) = self.matcher.pick(names.iter().map(String::as_str)) else {
            return Status::Waiting(self.held.waiting(&names, &self.matcher));
        };
        let name = name.to_owned();
        match self.connect(session, &name) {
            Ok(connection) => {
                self.held.connected(session, name.clone(), connection);
                Status::Connected(name)
            }
            Err(err @ MidiError::NoSystem(_)) => Status::NoSystem(err),
            Err(err) => Status::OpenFailed(err),
        }
    }

    /// Opens a connection to the port named `name`.
    fn connect(&self, session: &Session, name: &str) -> Result<MidiInputConnection<()>, MidiError> {
        let input = system::input_client(session, &self.client_name)?;
        let port = input
            .ports()
            .into_iter()
            .find(|p| input.port_name(p).is_ok_and(|n| n == name))
            .ok_or_else(|| MidiError::Open {
                port: name.to_owned(),
                reason: "it disappeared while connecting".to_owned(),
            })?;
        let tx = self.tx.clone();
        let on_drop = Arc::clone(&self.on_drop);
        input
            .connect(
                &port,
                &self.local_port,
                move |_stamp, bytes, _| {
                    // The latency probe's start (see `examples/midi_latency.rs`); a disabled
                    // trace event costs one atomic load.
                    tracing::trace!(target: "patchbay::latency", stage = "midi.received");
                    // Never blocks: a full channel drops the message and counts it.
                    let message = Message {
                        at: now_ms(),
                        raw: Raw::new(bytes),
                    };
                    if tx.try_send(message).is_err() {
                        on_drop();
                    }
                },
                (),
            )
            .map_err(|err| MidiError::Open {
                port: name.to_owned(),
                reason: err.to_string(),
            })
    }
}

/// What [`InputDriver::next`] hands out.
#[derive(Debug)]
pub(crate) enum Event {
    /// A message arrived.
    Message(Message),
    /// A rescan ran.
    Status(Status),
}

/// Drives an [`InputWatch`] from async code: messages as they come, and a rescan every
/// `rescan` interval (the first one at once).
pub(crate) struct InputDriver {
    watch: Option<InputWatch>,
    rx: mpsc::Receiver<Message>,
    ticker: Interval,
}

impl InputDriver {
    /// A driver for ports matching `matcher`.
    pub(crate) fn new(
        matcher: PortMatcher,
        client_name: &str,
        local_port: &str,
        rescan: Duration,
        on_drop: OnDrop,
    ) -> Self {
        let (tx, rx) = mpsc::channel(INPUT_QUEUE);
        let mut ticker = tokio::time::interval(rescan.max(Duration::from_millis(1)));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        InputDriver {
            watch: Some(InputWatch::new(
                matcher,
                client_name,
                local_port,
                tx,
                on_drop,
            )),
            rx,
            ticker,
        }
    }

    /// The next message or rescan outcome. Messages are cancel-safe; a rescan cancelled
    /// half-way closes the input (call [`InputDriver::close`] after a cancel).
    pub(crate) async fn next(&mut self) -> Result<Event, MidiError> {
        tokio::select! {
            Some(message) = self.rx.recv() => Ok(Event::Message(message)),
            _ = self.ticker.tick() => {
                let Some(mut watch) = self.watch.take() else {
                    return Err(MidiError::Ended("the MIDI input was closed".to_owned()));
                };
                let outcome = tokio::task::spawn_blocking(move || {
                    let status = watch.rescan();
                    (watch, status)
                })
                .await;
                match outcome {
                    Ok((watch, status)) => {
                        self.watch = Some(watch);
                        Ok(Event::Status(status))
                    }
                    Err(err) => Err(MidiError::Ended(format!("the MIDI port scan failed: {err}"))),
                }
            }
        }
    }

    /// Closes the connection and the scanning client (off the async threads: closing a
    /// JACK client waits for its thread).
    pub(crate) async fn close(mut self) {
        if let Some(watch) = self.watch.take() {
            let _ = tokio::task::spawn_blocking(move || drop(watch)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_keeps_the_bytes() {
        for bytes in [
            &[][..],
            &[0xF8],
            &[0xC0, 5],
            &[0x90, 60, 100],
            &[0xF0, 1, 2, 3, 0xF7],
        ] {
            assert_eq!(Raw::new(bytes).bytes(), bytes);
        }
        assert!(matches!(Raw::new(&[0x90, 60, 100]), Raw::Short(..)));
    }

    #[test]
    fn lost_port_detail_names_the_port() {
        assert_eq!(
            Status::Lost("ctl:pad".into()).detail("pad"),
            "waiting for port ctl:pad to return (it disappeared; matching `pad`)"
        );
        let matcher = PortMatcher::new(".").unwrap();
        let names = vec!["patchbay:leds".to_owned(), "ctl:pad".to_owned()];
        assert_eq!(available(&names, &matcher), "ctl:pad");
        assert_eq!(available(&[], &matcher), "none");
    }
}
