//! The `osc` source: OSC packets on a UDP socket become `osc.message` signals.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use patchbay_graph::{
    BoxFuture, ComponentError, ComponentStats, Diagnostic, HealthState, Options, Source,
    SourceContext,
};
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{SharedSignal, now_ms};
use patchbay_transport::listen::parse_listen;
use serde::Deserialize;
use tokio::net::UdpSocket;

use crate::decode::{OscDecoder, OscError};
use crate::kernel_drops::kernel_drops;
use crate::peers::{AllowedPeers, Network};

/// The address the source listens on when the config names none: TouchOSC's default
/// outgoing port, on loopback.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8000";
/// The default `max_packet`.
pub const DEFAULT_MAX_PACKET: usize = 8192;
/// The smallest `max_packet`: a message with a short address and one argument.
pub const MIN_PACKET: usize = 16;
/// The largest `max_packet`: the largest UDP payload.
pub const MAX_PACKET_LIMIT: usize = 65_535;

/// `[sources.NAME] type = "osc"`: OSC packets (Open Sound Control over UDP) from a phone,
/// a tablet, a lighting desk or a patch, each message an `osc.message` signal
/// `{address, args, tags}` (bundles unpacked in order, with their `timetag`).
///
/// ```toml
/// [sources.phone]
/// type = "osc"
/// listen = "0.0.0.0:8000"
/// allowed_peers = ["192.168.1.50"]
/// ```
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OscSourceConfig {
    /// `IP:PORT` to receive UDP packets on (`localhost:PORT` means `127.0.0.1:PORT`).
    /// Default `127.0.0.1:8000` (TouchOSC's default outgoing port). For a phone on the
    /// local network, `0.0.0.0:8000`; any address that is not loopback needs
    /// `allowed_peers`.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The senders packets are taken from: IP addresses or networks
    /// (`["192.168.1.50"]`, `["192.168.1.0/24"]`, `["::1"]`). A packet from anyone else
    /// is dropped unread and counted (`osc_refused_peers`; the first from each address is
    /// logged). Required when `listen` is not loopback; absent on loopback, any program
    /// of this machine may send.
    #[serde(default)]
    pub allowed_peers: Option<Vec<String>>,
    /// The largest packet accepted, in bytes; a larger one is refused, counted
    /// (`osc_oversized`, `bad_input`) and reported as an `error` signal. From 16 to 65535.
    /// Default 8192.
    #[serde(default = "default_max_packet")]
    pub max_packet: usize,
}

fn default_listen() -> String {
    DEFAULT_LISTEN.into()
}

fn default_max_packet() -> usize {
    DEFAULT_MAX_PACKET
}

/// The options, checked: what the running source uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSettings {
    /// The address to bind.
    pub listen: SocketAddr,
    /// Who may send (`None`: anyone who can reach a loopback `listen`).
    pub allowed_peers: Option<AllowedPeers>,
    /// The largest packet taken.
    pub max_packet: usize,
}

impl OscSourceConfig {
    /// Checks the options; an error names the key and what is wrong.
    pub fn check(&self) -> Result<SourceSettings, (&'static str, String)> {
        let listen = parse_listen(&self.listen).ok_or_else(|| {
            (
                "listen",
                format!(
                    "`{}` is not an `IP:PORT` address (e.g. `{DEFAULT_LISTEN}`, or `0.0.0.0:8000` for a phone)",
                    self.listen
                ),
            )
        })?;
        if !(MIN_PACKET..=MAX_PACKET_LIMIT).contains(&self.max_packet) {
            return Err((
                "max_packet",
                format!("must be from {MIN_PACKET} to {MAX_PACKET_LIMIT} bytes"),
            ));
        }
        let allowed_peers = match &self.allowed_peers {
            None if listen.ip().is_loopback() => None,
            None => {
                return Err((
                    "listen",
                    format!(
                        "`{listen}` is not a loopback address: set `allowed_peers` to the \
                         phones and consoles that may send (`[\"192.168.1.50\"]`, or a \
                         network: `[\"192.168.1.0/24\"]`)"
                    ),
                ));
            }
            Some(list) if list.is_empty() => {
                return Err((
                    "allowed_peers",
                    "is empty: no packet could be taken; name the senders, or remove it".into(),
                ));
            }
            Some(list) => Some(AllowedPeers(
                list.iter()
                    .map(|p| Network::parse(p))
                    .collect::<Result<_, _>>()
                    .map_err(|e| ("allowed_peers", e.to_string()))?,
            )),
        };
        Ok(SourceSettings {
            listen,
            allowed_peers,
            max_packet: self.max_packet,
        })
    }
}

/// Builds an `osc` source (no I/O).
pub(crate) fn build(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let config: OscSourceConfig = options.parse()?;
    options.check_range(
        "max_packet",
        config.max_packet,
        MIN_PACKET..=MAX_PACKET_LIMIT,
    )?;
    let settings = config
        .check()
        .map_err(|(key, message)| options.error_at(key, message))?;
    Ok(Box::new(OscSource { settings }))
}

struct OscSource {
    settings: SourceSettings,
}

/// What the gauges of an `osc` source measure.
pub const SOURCE_GAUGES: &[(&str, &str)] = &[
    ("port", "The UDP port the source listens on."),
    (
        "osc_malformed",
        "Packets refused as malformed OSC (each also counted in bad_input and emitted as an error signal).",
    ),
    (
        "osc_oversized",
        "Packets larger than max_packet, refused (also counted in bad_input).",
    ),
    (
        "osc_refused_peers",
        "Packets from senders not in allowed_peers, dropped unread.",
    ),
    (
        "osc_kernel_drops",
        "Packets the kernel dropped because the socket's receive buffer was full while the graph was (Linux).",
    ),
];

/// At most this many packets are read, and signals handed to the graph, in one go.
const BATCH: usize = 256;

/// How many refused senders are logged by address (each once); past it, refusals are only
/// counted.
const LOGGED_PEERS: usize = 64;

/// How often the kernel's drop count is read.
const KERNEL_EVERY: Duration = Duration::from_secs(1);

impl Source for OscSource {
    fn reports_started(&self) -> bool {
        true
    }

    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let settings = self.settings;
            let socket = UdpSocket::bind(settings.listen)
                .await
                .map_err(|e| format!("cannot listen on udp {}: {e}", settings.listen))?;
            let local = socket.local_addr()?;
            cx.started();
            let stats = cx.stats();
            stats.describe_gauges(SOURCE_GAUGES);
            stats.set_gauge("port", f64::from(local.port()));
            let mut receiver = Receiver::new(&settings, &cx);
            receiver.publish(stats, &socket);
            tracing::info!(source = cx.name(), "OSC: listening on udp {local}");
            cx.set_state(HealthState::Ok, Some(format!("listening on udp {local}")));
            receiver.run(&socket, &cx).await;
            receiver.publish(stats, &socket);
            cx.set_state(HealthState::Stopped, None);
            Ok(())
        })
    }
}

/// The receiving side of a running source: its decoder, what it counts, its buffers.
struct Receiver {
    allowed: Option<AllowedPeers>,
    decoder: OscDecoder,
    buf: Vec<u8>,
    decoded: Vec<Decoded>,
    batch: Vec<SharedSignal>,
    malformed: u64,
    oversized: u64,
    refused_peers: u64,
    logged_peers: HashSet<IpAddr>,
    /// Whether a counter changed since the gauges were last set.
    changed: bool,
}

impl Receiver {
    fn new(settings: &SourceSettings, cx: &SourceContext) -> Self {
        Receiver {
            allowed: settings.allowed_peers.clone(),
            decoder: OscDecoder::new(format!("osc:{}", cx.name()), settings.max_packet),
            // One byte more than the largest packet: a datagram that fills it was larger
            // (the kernel cuts what does not fit), and is refused as oversized.
            buf: vec![0; settings.max_packet + 1],
            decoded: Vec::new(),
            batch: Vec::with_capacity(BATCH),
            malformed: 0,
            oversized: 0,
            refused_peers: 0,
            logged_peers: HashSet::new(),
            changed: true,
        }
    }

    /// Reads until shutdown: each wake-up takes every packet ready (up to [`BATCH`]) and
    /// hands their signals to the graph at once, waiting for room (meanwhile packets wait
    /// in the socket's buffer, past which the kernel drops and counts them).
    async fn run(&mut self, socket: &UdpSocket, cx: &SourceContext) {
        let mut tick = tokio::time::interval(KERNEL_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let received = tokio::select! {
                r = socket.recv_from(&mut self.buf) => r,
                _ = tick.tick() => {
                    self.changed = true;
                    self.publish(cx.stats(), socket);
                    continue;
                }
                () = cx.shutdown().wait() => break,
            };
            let mut next = Some(received);
            let mut packets = 0;
            while let Some(received) = next.take() {
                packets += 1;
                match received {
                    Ok((len, peer)) => self.take(len, peer, cx.stats()),
                    Err(e) => {
                        cx.stats().record_error(format!("OSC: receiving: {e}"));
                        // An error that repeats must not spin.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        break;
                    }
                }
                if packets < BATCH && self.batch.len() < BATCH {
                    match socket.try_recv_from(&mut self.buf) {
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        other => next = Some(other),
                    }
                }
            }
            self.publish(cx.stats(), socket);
            if !self.batch.is_empty() {
                if cx.emit_batch(&mut self.batch).await.is_err() {
                    break;
                }
                // A batch taken whole went to the graph with its vector.
                self.batch.reserve(BATCH);
            }
        }
    }

    /// One datagram of `len` bytes (in `buf`) from `peer`.
    fn take(&mut self, len: usize, peer: SocketAddr, stats: &ComponentStats) {
        let ip = peer.ip().to_canonical();
        if let Some(allowed) = &self.allowed
            && !allowed.allows(ip)
        {
            self.refused_peers += 1;
            self.changed = true;
            if self.logged_peers.len() < LOGGED_PEERS && self.logged_peers.insert(ip) {
                stats.record_error(format!(
                    "OSC: refused packets from {ip}: not in `allowed_peers` (further ones are only counted)"
                ));
            }
            return;
        }
        let bytes = &self.buf[..len];
        match self
            .decoder
            .decode(bytes, Some(peer), now_ms(), &mut self.decoded)
        {
            Ok(_) => {}
            Err(error) => {
                if matches!(error, OscError::Oversized { .. }) {
                    self.oversized += 1;
                } else {
                    self.malformed += 1;
                }
                self.changed = true;
                tracing::debug!("OSC: malformed packet from {peer}: {error}");
                stats.bad_input(format!("malformed OSC packet from {peer}: {error}"));
            }
        }
        self.batch
            .extend(self.decoded.drain(..).map(|d| Arc::new(d.into_signal())));
    }

    /// Sets the gauges, when something changed.
    fn publish(&mut self, stats: &ComponentStats, socket: &UdpSocket) {
        if !self.changed {
            return;
        }
        self.changed = false;
        #[allow(clippy::cast_precision_loss)]
        {
            stats.set_gauge("osc_malformed", self.malformed as f64);
            stats.set_gauge("osc_oversized", self.oversized as f64);
            stats.set_gauge("osc_refused_peers", self.refused_peers as f64);
            if let Some(drops) = kernel_drops(socket) {
                stats.set_gauge("osc_kernel_drops", drops as f64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(toml: &str) -> Result<SourceSettings, (&'static str, String)> {
        let config: OscSourceConfig =
            Options::parse_snippet(toml).map_err(|e| ("parse", e.message))?;
        config.check()
    }

    #[test]
    fn defaults_are_loopback() {
        let s = check("").unwrap();
        assert_eq!(s.listen, DEFAULT_LISTEN.parse().unwrap());
        assert_eq!(s.allowed_peers, None);
        assert_eq!(s.max_packet, DEFAULT_MAX_PACKET);
        assert_eq!(
            check("listen = \"localhost:9001\"").unwrap().listen,
            "127.0.0.1:9001".parse().unwrap()
        );
    }

    #[test]
    fn another_address_needs_allowed_peers() {
        let (key, message) = check("listen = \"0.0.0.0:8000\"").unwrap_err();
        assert_eq!(key, "listen");
        assert!(message.contains("allowed_peers"), "{message}");
        let s = check("listen = \"0.0.0.0:8000\"\nallowed_peers = [\"192.168.1.0/24\", \"::1\"]")
            .unwrap();
        assert_eq!(s.allowed_peers.map(|p| p.0.len()), Some(2));
        assert_eq!(
            check("listen = \"0.0.0.0:8000\"\nallowed_peers = []")
                .unwrap_err()
                .0,
            "allowed_peers"
        );
        let (key, message) =
            check("listen = \"0.0.0.0:8000\"\nallowed_peers = [\"phone.local\"]").unwrap_err();
        assert_eq!(key, "allowed_peers");
        assert!(message.contains("phone.local"), "{message}");
    }

    #[test]
    fn bad_options_are_named() {
        assert_eq!(check("listen = \"8000\"").unwrap_err().0, "listen");
        assert_eq!(check("max_packet = 8").unwrap_err().0, "max_packet");
        assert_eq!(check("max_packet = 70000").unwrap_err().0, "max_packet");
        assert_eq!(check("nope = 1").unwrap_err().0, "parse");
    }
}
