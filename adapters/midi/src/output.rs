//! The `midi` output: `midi.*` signals sent as MIDI bytes to a port (controller LEDs,
//! motorized faders), or to a virtual port of patchbay's that other programs connect to.

use std::time::Duration;

use midir::os::unix::VirtualOutput;
use midir::{MidiOutput, MidiOutputConnection};
use patchbay_graph::{
    BoxFuture, ComponentError, ComponentStats, Diagnostic, HealthState, Options, Output,
    OutputContext,
};
use serde::Deserialize;
use tokio::time::MissedTickBehavior;

use crate::input::{Absent, Gone, PortHold, lost_detail};
use crate::session::{Held, Session, with_session};
use crate::source::{check_common, default_client_name, default_rescan_ms};
use crate::system::{self, MidiError};
use crate::{PortMatcher, encode};

/// The options of an `[outputs.NAME]` table with `type = "midi"`: exactly one of `port`
/// and `virtual`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MidiOutputConfig {
    /// The port to send to: its full name, or an unanchored regex. patchbay's own ports
    /// are never matched by a regex.
    #[serde(default)]
    pub port: Option<String>,
    /// Create a virtual port with this name (it shows as `CLIENT:NAME`) that other
    /// programs connect to.
    #[serde(default, rename = "virtual")]
    pub virtual_port: Option<String>,
    /// How often the port list is checked for the device leaving or returning, ms (from 10
    /// to 86400000, one day).
    #[serde(default = "default_rescan_ms")]
    pub rescan_ms: u64,
    /// The MIDI client name.
    #[serde(default = "default_client_name")]
    pub client_name: String,
}

/// Where an output sends.
#[derive(Debug, Clone)]
enum Target {
    /// A port of another program, matched by name.
    Port(PortMatcher),
    /// A virtual port of patchbay's.
    Virtual(String),
}

/// Builds a `midi` output (no I/O).
pub(crate) fn build(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    let config: MidiOutputConfig = options.parse()?;
    let target = match (&config.port, &config.virtual_port) {
        (Some(port), None) => Target::Port(
            PortMatcher::new(port)
                .map_err(|e| options.error_at("port", e.to_string()))?
                .with_own_client(&config.client_name),
        ),
        (None, Some(name)) => {
            if name.is_empty() || name.contains(['\0', ':']) {
                return Err(options.error_at(
                    "virtual",
                    "a virtual port name must be non-empty, without `:` or NUL",
                ));
            }
            Target::Virtual(name.clone())
        }
        (Some(_), Some(_)) => {
            return Err(options.error_at("virtual", "set either `port` or `virtual`, not both"));
        }
        (None, None) => {
            return Err(options.error(
                "set `port` (a port to send to, by name or regex) or `virtual` (a port of \
                 patchbay's that other programs connect to)",
            ));
        }
    };
    check_common(options, config.rescan_ms, &config.client_name)?;
    Ok(Box::new(MidiOut { config, target }))
}

/// A `midi` output, built.
struct MidiOut {
    config: MidiOutputConfig,
    target: Target,
}

/// What a rescan of an output found.
#[derive(Debug, Clone, PartialEq)]
enum OutStatus {
    /// Connected (or the virtual port exists); the text names the port.
    Ready(String),
    /// Not connected: what is waited for.
    Waiting(Absent),
    /// The port disappeared.
    Lost(String),
    /// The MIDI system cannot be reached, or opening failed.
    Error(MidiError),
}

/// The midir side of an output. Its methods block briefly (call them from
/// `spawn_blocking`), except [`OutputPort::send`], which only queues bytes.
struct OutputPort {
    target: Target,
    client_name: String,
    /// Its scanner lists ports: an output client for `port`, an input client for
    /// `virtual` (to see whether the virtual port is still there, as a readable port).
    held: PortHold<Scanner, MidiOutputConnection>,
}

/// A client used only to list ports.
enum Scanner {
    Out(MidiOutput),
    In(midir::MidiInput),
}

impl OutputPort {
    fn new(target: Target, client_name: &str) -> Self {
        OutputPort {
            target,
            client_name: client_name.to_owned(),
            held: PortHold::new(),
        }
    }

    /// Checks the port is still there, and connects or creates it when it is not.
    fn rescan(&mut self) -> OutStatus {
        with_session(|session| self.rescan_in(session))
    }

    fn rescan_in(&mut self, session: &Session) -> OutStatus {
        match self.held.check(session) {
            Some(Gone::Lost(port)) => return OutStatus::Lost(port),
            Some(Gone::Down(err)) => return OutStatus::Error(err),
            None => {}
        }
        let scan_name = system::scan_client_name(&self.client_name);
        let scanner = match self.held.scanner.take() {
            Some(scanner) => Ok(scanner),
            None => match &self.target {
                Target::Port(_) => system::output_client(session, &scan_name)
                    .map(|c| Held::new(session, Scanner::Out(c))),
                Target::Virtual(_) => system::input_client(session, &scan_name)
                    .map(|c| Held::new(session, Scanner::In(c))),
            },
        };
        let scanner = match scanner {
            Ok(scanner) => scanner,
            Err(err) => {
                self.held.connection = None;
                return OutStatus::Error(err);
            }
        };
        let names = match scanner.get(session) {
            Some(Scanner::Out(out)) => system::output_names(out),
            Some(Scanner::In(input)) => system::input_names(input),
            None => Vec::new(),
        };
        self.held.scanner = Some(scanner);
        if let Some((port, _)) = &self.held.connection {
            let present = match &self.target {
                Target::Port(_) => names.iter().any(|n| n == port),
                Target::Virtual(name) => names.iter().any(|n| self.is_our_virtual(n, name)),
            };
            if present {
                return OutStatus::Ready(port.clone());
            }
            if let Some(port) = self.held.lose() {
                return OutStatus::Lost(port);
            }
        }
        match &self.target {
            Target::Port(matcher) => {
                let Some(name) = matcher.pick(names.iter().map(String::as_str)) else {
                    return OutStatus::Waiting(self.held.waiting(&names, matcher));
                };
                let name = name.to_owned();
                match self.connect(session, &name) {
                    Ok(connection) => {
                        self.held.connected(session, name.clone(), connection);
                        OutStatus::Ready(name)
                    }
                    Err(err) => OutStatus::Error(err),
                }
            }
            Target::Virtual(name) => {
                let created = system::output_client(session, &self.client_name).and_then(|out| {
                    out.create_virtual(name).map_err(|err| MidiError::Open {
                        port: name.clone(),
                        reason: err.to_string(),
                    })
                });
                match created {
                    Ok(connection) => {
                        // Its full name, as others see it (`patchbay:leds`, or
                        // `patchbay-01:leds` when another client took the name first).
                        let listed =
                            self.held
                                .scanner
                                .as_ref()
                                .and_then(|s| match s.get(session) {
                                    Some(Scanner::In(input)) => system::input_names(input)
                                        .into_iter()
                                        .find(|n| self.is_our_virtual(n, name)),
                                    _ => None,
                                });
                        let label = listed.unwrap_or_else(|| {
                            format!("virtual port {name} of client {}", self.client_name)
                        });
                        self.held.connected(session, label.clone(), connection);
                        OutStatus::Ready(label)
                    }
                    Err(err) => OutStatus::Error(err),
                }
            }
        }
    }

    /// Whether `port` (`client:name`) is our virtual port `name`: the client is ours
    /// (`patchbay` or a renamed `patchbay-NN`).
    /// ALSA names end with the port's address (`patchbay:leds 128:0`), which is ignored.
    fn is_our_virtual(&self, port: &str, name: &str) -> bool {
        strip_alsa_address(port)
            .strip_suffix(name)
            .and_then(|p| p.strip_suffix(':'))
            .is_some_and(|client| {
                crate::port::is_own_port(&self.client_name, &format!("{client}:{name}"))
            })
    }

    fn connect(&self, session: &Session, name: &str) -> Result<MidiOutputConnection, MidiError> {
        let out = system::output_client(session, &self.client_name)?;
        let port = out
            .ports()
            .into_iter()
            .find(|p| out.port_name(p).is_ok_and(|n| n == name))
            .ok_or_else(|| MidiError::Open {
                port: name.to_owned(),
                reason: "it disappeared while connecting".to_owned(),
            })?;
        out.connect(&port, "out").map_err(|err| MidiError::Open {
            port: name.to_owned(),
            reason: err.to_string(),
        })
    }

    /// Sends one message; `Ok(false)` when not connected (or its server is gone). Touches
    /// no JACK client (midir queues the bytes in its ring buffer), so no session is needed.
    fn send(&mut self, bytes: &[u8]) -> Result<bool, MidiError> {
        let Some((port, held)) = &mut self.held.connection else {
            return Ok(false);
        };
        let Some(connection) = held.get_mut() else {
            return Ok(false);
        };
        connection
            .send(bytes)
            .map(|()| true)
            .map_err(|err| MidiError::Send {
                port: port.clone(),
                reason: err.to_string(),
            })
    }

    fn is_connected(&self) -> bool {
        self.held.connection.is_some()
    }
}

/// `name` without a trailing ALSA address ` CLIENT:PORT` (digits), as midir's ALSA backend
/// appends it.
fn strip_alsa_address(name: &str) -> &str {
    let Some((head, address)) = name.rsplit_once(' ') else {
        return name;
    };
    let is_address = address.split_once(':').is_some_and(|(client, port)| {
        !client.is_empty()
            && !port.is_empty()
            && client.bytes().all(|b| b.is_ascii_digit())
            && port.bytes().all(|b| b.is_ascii_digit())
    });
    if is_address { head } else { name }
}

/// Runs a rescan off the async threads; `None` if it panicked (the port is then lost).
async fn rescan(mut port: OutputPort) -> Option<(OutputPort, OutStatus)> {
    tokio::task::spawn_blocking(move || {
        let status = port.rescan();
        (port, status)
    })
    .await
    .ok()
}

impl Output for MidiOut {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let MidiOut { config, target } = *self;
            let pattern = match &target {
                Target::Port(m) => m.pattern().to_owned(),
                Target::Virtual(name) => name.clone(),
            };
            let mut port = Some(OutputPort::new(target.clone(), &config.client_name));
            let mut ticker = tokio::time::interval(Duration::from_millis(config.rescan_ms.max(1)));
            ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let mut last_detail: Option<String> = None;
            // Whether the drops of the current disconnection were already logged (once per
            // disconnection: LED signals may stream in while the device is unplugged).
            let mut drop_logged = false;
            loop {
                tokio::select! {
                    signal = cx.next() => {
                        let Some(signal) = signal else { break };
                        let bytes = match encode(&signal) {
                            Ok(bytes) => bytes,
                            Err(err) => {
                                cx.refused(format!("refused {}: {err}", signal.kind));
                                continue;
                            }
                        };
                        let Some(open) = port.as_mut() else { break };
                        match open.send(&bytes) {
                            Ok(true) => cx.delivered(1),
                            Ok(false) => {
                                ComponentStats::add(&cx.stats().dropped, 1);
                                if !drop_logged {
                                    drop_logged = true;
                                    cx.stats().record_error(format!(
                                        "dropping signals while MIDI port `{pattern}` is not \
                                         open (first: {})",
                                        signal.kind
                                    ));
                                }
                            }
                            Err(err) => {
                                ComponentStats::add(&cx.stats().dropped, 1);
                                cx.stats().record_error(&err);
                                cx.set_state(HealthState::Recovering, Some(err.to_string()));
                                // Look again at once: the port may be gone.
                                ticker.reset_immediately();
                            }
                        }
                    }
                    _ = ticker.tick() => {
                        let Some(current) = port.take() else { break };
                        let Some((current, status)) = rescan(current).await else {
                            let message = "the MIDI port scan failed";
                            cx.set_state(HealthState::Failed, Some(message.to_owned()));
                            return Err(message.into());
                        };
                        port = Some(current);
                        if matches!(status, OutStatus::Ready(_)) {
                            drop_logged = false;
                        }
                        report(&cx, &status, &pattern, &mut last_detail);
                    }
                }
            }
            if let Some(current) = port.take() {
                let connected = current.is_connected();
                let _ = tokio::task::spawn_blocking(move || drop(current)).await;
                tracing::debug!(output = %cx.name(), connected, "MIDI output closed");
            }
            cx.set_state(HealthState::Stopped, None);
            Ok(())
        })
    }
}

/// Sets the health for a rescan outcome, logging changes once.
fn report(cx: &OutputContext, status: &OutStatus, pattern: &str, last: &mut Option<String>) {
    let (state, detail) = match status {
        OutStatus::Ready(port) => (HealthState::Ok, format!("sending to {port}")),
        OutStatus::Waiting(absent) => (absent.state(), absent.detail().to_owned()),
        OutStatus::Lost(port) => (HealthState::Recovering, lost_detail(port, pattern, None)),
        OutStatus::Error(err) => (HealthState::Recovering, err.to_string()),
    };
    if last.as_deref() != Some(detail.as_str()) {
        match status {
            OutStatus::Ready(_) | OutStatus::Waiting(_) => {
                tracing::info!(component = %cx.name(), "MIDI: {detail}");
            }
            OutStatus::Lost(port) => cx
                .stats()
                .record_error(format!("MIDI port {port} disappeared")),
            OutStatus::Error(err) => cx.stats().record_error(err),
        }
    }
    cx.set_state(state, Some(detail.clone()));
    *last = Some(detail);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_virtual_key() {
        let config: MidiOutputConfig = Options::parse_snippet("virtual = \"leds\"\n").unwrap();
        assert_eq!(config.virtual_port.as_deref(), Some("leds"));
        assert_eq!(config.port, None);
        assert_eq!(config.rescan_ms, 1000);
        assert_eq!(config.client_name, "patchbay");
    }

    #[test]
    fn our_virtual_port_is_recognized() {
        let port = OutputPort::new(Target::Virtual("leds".into()), "patchbay");
        assert!(port.is_our_virtual("patchbay:leds", "leds"));
        assert!(port.is_our_virtual("patchbay-02:leds", "leds"));
        assert!(!port.is_our_virtual("ctl:leds", "leds"));
        assert!(!port.is_our_virtual("patchbay:leds2", "leds"));
        assert!(port.is_our_virtual("patchbay:leds 128:0", "leds"), "ALSA");
        assert!(!port.is_our_virtual("patchbay:leds x:0", "leds"));
        assert_eq!(strip_alsa_address("a b"), "a b");
        assert_eq!(strip_alsa_address("a 1:2"), "a");
    }
}
