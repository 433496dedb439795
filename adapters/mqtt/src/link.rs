//! The transport: one MQTT connection per component, opened and reopened by the transport
//! crate's [`Driver`](patchbay_transport::Driver) (backoff with jitter, `max_attempts`,
//! health states), with the session on top of it here: CONNECT, keep-alive, and the
//! acknowledgements that make QoS 1 lossless.
//!
//! - The source acknowledges a QoS 1 message only after the graph took its signal
//!   (messages a read brought in go to the graph as one batch; the PUBACKs of the part the
//!   graph took follow it). A message the graph did not take is not acknowledged: the
//!   broker sends it again (persistent session) once the connection is back.
//! - The output counts a QoS 1 signal as sent only when the broker's PUBACK for it
//!   arrived. What is unacknowledged when a connection breaks is published again, first
//!   and in order, on the next one: a message whose PUBACK was cut may then reach the
//!   broker twice (MQTT has no deduplication; `mqtt_resent` counts these).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use patchbay_graph::{ComponentStats, HealthState, LinkEnds, OutputContext, SourceContext};
use patchbay_signal::SharedSignal;
use patchbay_transport::{Ended, Link, RedactedUrl};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::codec::{self, ConnAck, ConnectParams, Delivery, Framer, Incoming, Outgoing, Version};
use crate::config::{Connection, MqttOutputConfig, MqttSourceConfig};
use crate::decode::{Message, MessageDecoder, MessageEncoder};
use crate::topic::MAX_TOPIC_LEN;

/// At most this many signals are taken from the graph, or handed to it, in one go.
const BATCH: usize = 256;

/// How many bytes a source reads ahead while the graph has no room for its last batch.
const READ_AHEAD: usize = 64 * 1024;

/// What the gauges of an `mqtt` source measure.
pub(crate) const SOURCE_GAUGES: &[(&str, &str)] = &[
    (
        "mqtt_connects",
        "Connections made to the broker (more than one: it reconnected).",
    ),
    (
        "mqtt_subscribed",
        "Topic filters the broker granted on the current connection.",
    ),
    (
        "mqtt_redelivered",
        "Messages the broker sent again after a reconnect (DUP flag): their acknowledgement may have been lost, so the graph may see them twice.",
    ),
];

/// What the gauges of an `mqtt` output measure.
pub(crate) const OUTPUT_GAUGES: &[(&str, &str)] = &[
    (
        "mqtt_connects",
        "Connections made to the broker (more than one: it reconnected).",
    ),
    (
        "mqtt_inflight",
        "QoS 1 messages published and not yet acknowledged by the broker.",
    ),
    (
        "mqtt_resent",
        "QoS 1 messages published again after a reconnect because their acknowledgement had not arrived: each may reach subscribers twice.",
    ),
];

/// A connection's byte stream: TCP, or TLS over TCP.
trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// When to ping and when the broker counts as gone.
struct KeepAlive {
    period: Option<Duration>,
    last_write: Instant,
    last_read: Instant,
    /// A PINGREQ went out then, and nothing came back since.
    ping_at: Option<Instant>,
}

impl KeepAlive {
    fn new(period: Option<Duration>) -> Self {
        let now = Instant::now();
        KeepAlive {
            period,
            last_write: now,
            last_read: now,
            ping_at: None,
        }
    }

    /// A ping is due: nothing was written for a whole period.
    fn ping_due(&self, now: Instant) -> bool {
        self.period
            .is_some_and(|p| self.ping_at.is_none() && now >= self.last_write + p)
    }

    /// A ping went out a whole period ago and nothing came back since.
    fn dead(&self, now: Instant) -> bool {
        match (self.period, self.ping_at) {
            (Some(p), Some(at)) => now >= at + p && self.last_read <= at,
            _ => false,
        }
    }

    /// When to look again (`None`: never).
    fn next_wake(&self) -> Option<Instant> {
        let p = self.period?;
        Some(match self.ping_at {
            Some(at) => at + p,
            None => self.last_write + p,
        })
    }

    fn read(&mut self) {
        self.last_read = Instant::now();
        self.ping_at = None;
    }

    fn wrote(&mut self) {
        self.last_write = Instant::now();
    }

    fn pinged(&mut self) {
        let now = Instant::now();
        self.ping_at = Some(now);
        self.last_write = now;
    }
}

/// An open connection: CONNECT answered.
pub(crate) struct Session {
    stream: Box<dyn Stream>,
    version: Version,
    rbuf: BytesMut,
    wbuf: BytesMut,
    framer: Framer,
    /// The broker's CONNACK.
    ack: ConnAck,
    keep_alive: KeepAlive,
    /// The URL as it may be shown.
    url: String,
}

/// How a session is opened.
struct Open<'a> {
    connection: &'a Connection,
    client_id: &'a str,
    clean: bool,
    session_expiry: Option<u32>,
    receive_maximum: Option<u16>,
}

impl Session {
    /// Connects (TCP, TLS for `mqtts://`), sends CONNECT and reads the CONNACK. A refusal
    /// of who we are is [`Ended::Refused`]; anything else [`Ended::Lost`].
    async fn open(o: Open<'_>) -> Result<Session, Ended> {
        let c = o.connection;
        let url = RedactedUrl(c.url.trim()).to_string();
        let broker = c.broker().map_err(Ended::Refused)?;
        let tcp = tokio::net::TcpStream::connect((broker.host.as_str(), broker.port))
            .await
            .map_err(|e| Ended::Lost(format!("cannot connect to {url}: {e}")))?;
        // Small packets (acknowledgements, pings) go at once.
        let _ = tcp.set_nodelay(true);
        let stream: Box<dyn Stream> = if broker.tls {
            let config = patchbay_transport::tls::client_config(c.ca_file.as_deref())
                .map_err(|e| Ended::Refused(e.to_string()))?;
            let name = tokio_rustls::rustls::pki_types::ServerName::try_from(broker.host.clone())
                .map_err(|_| {
                Ended::Refused(format!("`{}` is not a TLS server name", broker.host))
            })?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|e| Ended::Lost(format!("TLS with {url}: {e}")))?;
            Box::new(tls)
        } else {
            Box::new(tcp)
        };
        let mut session = Session {
            stream,
            version: c.version,
            rbuf: BytesMut::with_capacity(8 * 1024),
            wbuf: BytesMut::with_capacity(8 * 1024),
            framer: Framer::new(c.version, c.max_packet_size as usize),
            ack: ConnAck::default(),
            keep_alive: KeepAlive::new(c.keep_alive()),
            url: url.clone(),
        };
        let params = ConnectParams {
            client_id: o.client_id,
            clean: o.clean,
            keep_alive: c.keep_alive_s,
            user: c.user.as_deref(),
            password: c.secret(),
            session_expiry: o.session_expiry,
            receive_maximum: o.receive_maximum,
            max_packet_size: Some(c.max_packet_size),
        };
        codec::connect(c.version, &params, &mut session.wbuf)
            .map_err(|e| Ended::Refused(e.to_string()))?;
        session.flush().await.map_err(Ended::Lost)?;
        let ack = match session.next_packet().await {
            Ok(Some(Incoming::ConnAck(ack))) => ack,
            Ok(Some(other)) => {
                return Err(Ended::Lost(format!(
                    "{url} answered CONNECT with {other:?}"
                )));
            }
            Ok(None) => {
                return Err(Ended::Lost(format!(
                    "{url} closed the connection before answering CONNECT ({} spoken)",
                    c.version
                )));
            }
            Err(e) => return Err(Ended::Lost(e)),
        };
        if let Some(refusal) = &ack.refusal {
            let why = format!("{url} refused the connection: {}", refusal.reason);
            return Err(if refusal.permanent {
                Ended::Refused(why)
            } else {
                Ended::Lost(why)
            });
        }
        if let Some(seconds) = ack.server_keep_alive {
            // MQTT 5: the broker's keep-alive replaces ours.
            session.keep_alive.period =
                (seconds > 0).then(|| Duration::from_secs(u64::from(seconds)));
        }
        session.ack = ack;
        Ok(session)
    }

    /// Writes what is buffered.
    async fn flush(&mut self) -> Result<(), String> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let result = async {
            self.stream.write_all(&self.wbuf).await?;
            self.stream.flush().await
        }
        .await;
        self.wbuf.clear();
        self.keep_alive.wrote();
        result.map_err(|e| format!("writing to {}: {e}", self.url))
    }

    /// The next packet, reading as needed; `None` when the broker closed the connection.
    async fn next_packet(&mut self) -> Result<Option<Incoming>, String> {
        loop {
            if let Some(p) = self
                .framer
                .next(&mut self.rbuf)
                .map_err(|e| e.to_string())?
            {
                return Ok(Some(p));
            }
            if !self.fill().await? {
                return Ok(None);
            }
        }
    }

    /// Reads what the socket has (at least one byte); `false` at the end of the stream.
    /// Cancel-safe: nothing is lost when it is dropped before it completes.
    async fn fill(&mut self) -> Result<bool, String> {
        self.rbuf.reserve(16 * 1024);
        let n = self
            .stream
            .read_buf(&mut self.rbuf)
            .await
            .map_err(|e| format!("reading from {}: {e}", self.url))?;
        if n > 0 {
            self.keep_alive.read();
        }
        Ok(n > 0)
    }

    /// Pings when due; `Err` when the broker stopped answering.
    fn keep_alive_due(&mut self) -> Result<(), String> {
        let now = Instant::now();
        if self.keep_alive.dead(now) {
            return Err(format!(
                "{} did not answer a ping within the keep-alive",
                self.url
            ));
        }
        if self.keep_alive.ping_due(now) {
            codec::pingreq(&mut self.wbuf);
            self.keep_alive.pinged();
        }
        Ok(())
    }

    /// Sleeps until the keep-alive wants a look (forever when it is off).
    async fn keep_alive_wake(wake: Option<Instant>) {
        match wake {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    /// Says goodbye (a normal DISCONNECT: a persistent session is kept).
    async fn close(&mut self) {
        codec::disconnect(self.version, &mut self.wbuf);
        let _ = self.flush().await;
        let _ = self.stream.shutdown().await;
    }
}

/// The client id: the configured one, else `patchbay-HOSTNAME-NAME` (stable across
/// restarts, distinct across machines).
pub(crate) fn client_id(connection: &Connection, name: &str) -> String {
    if let Some(id) = &connection.client_id {
        return id.clone();
    }
    let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect()
    };
    format!("patchbay-{}-{}", clean(&host), clean(name))
}

/// The source's side of a connection: the decoder and what is kept across reconnects.
pub(crate) struct SourceLink {
    config: MqttSourceConfig,
    client_id: String,
    decoder: MessageDecoder,
    connects: u64,
    redelivered: u64,
    ignored_warned: bool,
}

impl SourceLink {
    pub(crate) fn new(config: MqttSourceConfig, cx: &SourceContext) -> Self {
        let client_id = client_id(&config.connection, cx.name());
        let decoder = MessageDecoder::new(&format!("mqtt:{}", cx.name()), config.payload);
        cx.stats().describe_gauges(SOURCE_GAUGES);
        for (gauge, _) in SOURCE_GAUGES {
            cx.stats().set_gauge(gauge, 0.0);
        }
        SourceLink {
            config,
            client_id,
            decoder,
            connects: 0,
            redelivered: 0,
            ignored_warned: false,
        }
    }
}

#[allow(clippy::cast_precision_loss)]
fn gauge(stats: &ComponentStats, name: &str, value: u64) {
    stats.set_gauge(name, value as f64);
}

/// One packet's worth of work for the graph: a message's signal (if it made one) and
/// what acknowledges it.
struct Taken {
    /// The QoS 1 packet identifier to acknowledge (0: QoS 0, nothing to acknowledge).
    pkid: u16,
    /// The index of its signal in the batch, if it made one.
    signal: Option<usize>,
}

impl Link for SourceLink {
    type Connection = Session;

    async fn connect(&mut self, ends: &LinkEnds<'_>) -> Result<Session, Ended> {
        let c = &self.config.connection;
        let mut session = Session::open(Open {
            connection: c,
            client_id: &self.client_id,
            clean: self.config.clean_session,
            session_expiry: (!self.config.clean_session).then_some(self.config.session_expiry_s),
            receive_maximum: Some(c.inflight),
        })
        .await?;
        // The first connection subscribes (the config may have changed since the session
        // was made); a resumed session keeps its subscriptions, so a reconnect subscribes
        // only when the broker has none for us (subscribing again would send every
        // retained message again).
        if self.connects == 0 || !session.ack.session_present {
            let filters: Vec<&str> = self.config.topics.iter().map(|f| f.as_str()).collect();
            codec::subscribe(c.version, 1, &filters, c.qos, &mut session.wbuf)
                .map_err(|e| Ended::Refused(e.to_string()))?;
            session.flush().await.map_err(Ended::Lost)?;
        }
        self.connects += 1;
        if let Some(cx) = ends.signals_in {
            gauge(cx.stats(), "mqtt_connects", self.connects);
        }
        Ok(session)
    }

    async fn session(&mut self, session: Session, ends: &LinkEnds<'_>) -> Ended {
        let Some(cx) = ends.signals_in else {
            return Ended::Stop;
        };
        self.read(session, cx).await
    }
}

impl SourceLink {
    /// Reads messages and hands them to the graph until the connection ends.
    async fn read(&mut self, mut s: Session, cx: &SourceContext) -> Ended {
        let mut signals: Vec<SharedSignal> = Vec::with_capacity(BATCH);
        let mut taken: Vec<Taken> = Vec::with_capacity(BATCH);
        loop {
            if let Err(e) = s.keep_alive_due() {
                return Ended::Lost(e);
            }
            if let Err(e) = s.flush().await {
                return Ended::Lost(e);
            }
            // The whole packets already read, up to a batch, decoded together.
            let mut ended = None;
            let mut packets = 0;
            self.decoder.start_batch();
            while taken.len() < BATCH {
                let packet = match s.framer.next(&mut s.rbuf) {
                    Ok(Some(p)) => p,
                    Ok(None) => break,
                    Err(e) => {
                        cx.stats().bad_input(&e);
                        ended = Some(Ended::Lost(e.to_string()));
                        break;
                    }
                };
                packets += 1;
                if let Err(end) = self.on_packet(packet, cx, &mut signals, &mut taken) {
                    ended = Some(end);
                    break;
                }
            }
            self.decoder.end_batch();
            if packets == 0 && ended.is_none() {
                let wake = s.keep_alive.next_wake();
                tokio::select! {
                    biased;
                    read = s.fill() => match read {
                        Ok(true) => {}
                        Ok(false) => return Ended::Lost(format!("{} closed the connection", s.url)),
                        Err(e) => return Ended::Lost(e),
                    },
                    () = Session::keep_alive_wake(wake) => {}
                }
                continue;
            }
            if !taken.is_empty() {
                let accepted = match self.hand_over(&mut s, cx, &mut signals).await {
                    Ok(accepted) => accepted,
                    Err(end) => return end,
                };
                // Acknowledge, in order, what the graph took (and what made no signal
                // before it); stop at the first message it did not take (the graph is
                // shutting down: the broker sends the rest again later).
                for t in taken.drain(..) {
                    if t.signal.is_some_and(|i| i >= accepted) {
                        ended = Some(Ended::Stop);
                        break;
                    }
                    if t.pkid != 0 {
                        codec::puback(s.version, t.pkid, &mut s.wbuf);
                    }
                }
                taken.clear();
                signals.clear();
            }
            if let Some(end) = ended {
                // The acknowledgements of what came before go first.
                let _ = s.flush().await;
                return end;
            }
        }
    }

    /// Hands the batch to the graph, waiting for room as long as it takes and pinging
    /// meanwhile; how many signals (from the first) it took.
    async fn hand_over(
        &mut self,
        s: &mut Session,
        cx: &SourceContext,
        signals: &mut Vec<SharedSignal>,
    ) -> Result<usize, Ended> {
        if signals.is_empty() {
            return Ok(0);
        }
        let emit = cx.emit_batch_within(signals, Duration::MAX);
        tokio::pin!(emit);
        loop {
            let wake = s.keep_alive.next_wake();
            // Reading on (a bounded amount) while the graph is full tells a broker that
            // went away at once, not at the next ping.
            let read_ahead = s.rbuf.len() < READ_AHEAD;
            tokio::select! {
                read = s.fill(), if read_ahead => match read {
                    Ok(true) => {}
                    Ok(false) => return Err(Ended::Lost(format!("{} closed the connection", s.url))),
                    Err(e) => return Err(Ended::Lost(e)),
                },
                emitted = &mut emit => {
                    // An answer to a ping sent meanwhile may wait unread: no verdict on it.
                    s.keep_alive.ping_at = None;
                    return Ok(emitted.accepted);
                }
                () = Session::keep_alive_wake(wake) => {
                    // The read-ahead may be full (the broker's answer unread behind it), so
                    // its silence says nothing: only keep pinging, once a period, so that
                    // the broker keeps the connection.
                    s.keep_alive.ping_at = None;
                    if s.keep_alive.ping_due(Instant::now()) {
                        codec::pingreq(&mut s.wbuf);
                        s.keep_alive.pinged();
                        s.flush().await.map_err(Ended::Lost)?;
                    }
                }
            }
        }
    }

    /// What one packet means for the batch.
    fn on_packet(
        &mut self,
        packet: Incoming,
        cx: &SourceContext,
        signals: &mut Vec<SharedSignal>,
        taken: &mut Vec<Taken>,
    ) -> Result<(), Ended> {
        match packet {
            Incoming::Publish(d) => {
                let signal = self.decode(&d, cx).map(|decoded| {
                    signals.push(Arc::new(decoded));
                    signals.len() - 1
                });
                taken.push(Taken {
                    pkid: if d.qos > 0 { d.pkid } else { 0 },
                    signal,
                });
            }
            Incoming::Oversized {
                topic,
                qos,
                pkid,
                size,
            } => {
                cx.stats().bad_input(format!(
                    "a message of {size} bytes on `{topic}` is over max_packet_size ({}); skipped",
                    self.config.connection.max_packet_size
                ));
                taken.push(Taken {
                    pkid: if qos > 0 { pkid } else { 0 },
                    signal: None,
                });
            }
            Incoming::SubAck { results, .. } => {
                let mut granted = 0;
                for (filter, result) in self.config.topics.iter().zip(results) {
                    match result {
                        Ok(qos) => {
                            granted += 1;
                            if qos < self.config.connection.qos {
                                tracing::warn!(
                                    source = cx.name(),
                                    "MQTT: the broker granted QoS {qos} only for `{}`",
                                    filter.as_str()
                                );
                            }
                        }
                        Err(reason) => {
                            return Err(Ended::Refused(format!(
                                "the broker refused the subscription to `{}`: {reason}",
                                filter.as_str()
                            )));
                        }
                    }
                }
                gauge(cx.stats(), "mqtt_subscribed", granted);
                tracing::info!(
                    source = cx.name(),
                    "MQTT: subscribed to {granted} topic filter(s)"
                );
            }
            Incoming::PingResp | Incoming::PubAck { .. } => {}
            Incoming::Disconnect { reason } => {
                return Err(Ended::Lost(format!("the broker disconnected: {reason}")));
            }
            Incoming::ConnAck(_) => {
                cx.stats().bad_input("a second CONNACK from the broker");
                return Err(Ended::Lost("a second CONNACK from the broker".into()));
            }
        }
        Ok(())
    }

    /// The signal of one message, bad input counted; `None` for a message that makes
    /// none (an empty envelope, a topic we no longer subscribe to).
    fn decode(&mut self, d: &Delivery, cx: &SourceContext) -> Option<patchbay_signal::Signal> {
        if d.dup {
            self.redelivered += 1;
            gauge(cx.stats(), "mqtt_redelivered", self.redelivered);
        }
        if !self.config.topics.iter().any(|f| f.matches(&d.topic)) {
            // A persistent session keeps the subscriptions of an earlier config.
            ComponentStats::add(&cx.stats().dropped, 1);
            if !self.ignored_warned {
                self.ignored_warned = true;
                tracing::warn!(
                    source = cx.name(),
                    "MQTT: a message on `{}` matches none of `topics` (a subscription the \
                     broker's session kept from an earlier config?); such messages are \
                     acknowledged and counted as dropped",
                    d.topic
                );
            }
            return None;
        }
        let message = Message {
            topic: &d.topic,
            payload: &d.payload,
            retained: d.retain,
            redelivered: d.dup,
        };
        self.decoder
            .decode(&message)
            .map(|decoded| cx.counted(decoded))
    }
}

/// A message taken from the graph, until the broker acknowledged it.
struct Pending {
    message: Outgoing,
    /// Its packet identifier once it has one (QoS 1).
    pkid: u16,
    /// Published on an earlier connection without an acknowledgement.
    again: bool,
}

/// The packet identifiers in use (QoS 1 messages awaiting their PUBACK).
struct PacketIds {
    used: Vec<u64>,
    next: u16,
}

impl PacketIds {
    fn new() -> Self {
        PacketIds {
            used: vec![0; 1024],
            next: 1,
        }
    }

    fn bit(id: u16) -> (usize, u64) {
        (usize::from(id / 64), 1u64 << (id % 64))
    }

    /// A free identifier (there is one: at most 65535 are in flight, the window's limit).
    fn take(&mut self) -> u16 {
        loop {
            let id = self.next;
            self.next = if id == u16::MAX { 1 } else { id + 1 };
            let (word, mask) = Self::bit(id);
            if self.used[word] & mask == 0 {
                self.used[word] |= mask;
                return id;
            }
        }
    }

    fn release(&mut self, id: u16) {
        let (word, mask) = Self::bit(id);
        self.used[word] &= !mask;
    }
}

/// The output's side of a connection: what waits to be published or acknowledged,
/// kept across reconnects.
pub(crate) struct OutputLink {
    config: MqttOutputConfig,
    client_id: String,
    encoder: MessageEncoder,
    /// Taken from the graph, not yet published on this connection.
    ready: VecDeque<Pending>,
    /// Published at QoS 1, awaiting the PUBACK.
    inflight: VecDeque<Pending>,
    ids: PacketIds,
    graph_done: bool,
    connects: u64,
    resent: u64,
    /// The broker's largest packet (MQTT 5).
    broker_max: Option<u32>,
    window: usize,
    session_present: bool,
}

impl OutputLink {
    pub(crate) fn new(
        config: MqttOutputConfig,
        encoder: MessageEncoder,
        cx: &OutputContext,
    ) -> Self {
        let client_id = client_id(&config.connection, cx.name());
        cx.stats().describe_gauges(OUTPUT_GAUGES);
        for (gauge, _) in OUTPUT_GAUGES {
            cx.stats().set_gauge(gauge, 0.0);
        }
        let window = usize::from(config.connection.inflight);
        OutputLink {
            config,
            client_id,
            encoder,
            ready: VecDeque::new(),
            inflight: VecDeque::new(),
            ids: PacketIds::new(),
            graph_done: false,
            connects: 0,
            resent: 0,
            broker_max: None,
            window,
            session_present: false,
        }
    }

    /// Signals taken from the graph and never acknowledged (when the output ends).
    pub(crate) fn unfinished(&self) -> usize {
        self.ready.len() + self.inflight.len()
    }
}

impl Link for OutputLink {
    type Connection = Session;

    async fn connect(&mut self, ends: &LinkEnds<'_>) -> Result<Session, Ended> {
        let c = &self.config.connection;
        // A clean session: what was unacknowledged is published again whatever the
        // broker kept, so a session of its own would add nothing.
        let session = Session::open(Open {
            connection: c,
            client_id: &self.client_id,
            clean: true,
            session_expiry: None,
            receive_maximum: None,
        })
        .await?;
        let ack = &session.ack;
        if self.config.retain && ack.retain_available == Some(false) {
            return Err(Ended::Refused(format!(
                "{} does not take retained messages: set `retain = false`",
                session.url
            )));
        }
        if c.qos > 0 && ack.max_qos == Some(0) {
            return Err(Ended::Refused(format!(
                "{} takes QoS 0 only: set `qos = 0`",
                session.url
            )));
        }
        self.window =
            usize::from(c.inflight).min(usize::from(ack.receive_maximum.unwrap_or(u16::MAX)));
        self.broker_max = ack.max_packet_size;
        self.session_present = ack.session_present;
        // What the last connection left unacknowledged goes first, in order.
        while let Some(mut p) = self.inflight.pop_back() {
            p.again = true;
            self.ready.push_front(p);
        }
        self.connects += 1;
        if let Some(cx) = ends.controls {
            gauge(cx.stats(), "mqtt_connects", self.connects);
        }
        Ok(session)
    }

    async fn session(&mut self, session: Session, ends: &LinkEnds<'_>) -> Ended {
        let Some(cx) = ends.controls else {
            return Ended::Stop;
        };
        self.publish(session, cx).await
    }
}

impl OutputLink {
    /// Publishes what the graph sends until it ends (then waits for the last
    /// acknowledgements and disconnects) or the connection breaks.
    async fn publish(&mut self, mut s: Session, cx: &OutputContext) -> Ended {
        let mut batch: Vec<SharedSignal> = Vec::with_capacity(BATCH);
        let mut topic = String::new();
        loop {
            // Publish what the window allows.
            let mut at_most_once = 0u64;
            while self.inflight.len() < self.window {
                let Some(mut p) = self.ready.pop_front() else {
                    break;
                };
                let dup = p.again && self.session_present;
                if p.message.qos > 0 && p.pkid == 0 {
                    p.pkid = self.ids.take();
                }
                if let Err(e) = codec::publish(s.version, &p.message, p.pkid, dup, &mut s.wbuf) {
                    cx.refused(format!("a message on `{}`: {e}", p.message.topic));
                    self.ids.release(p.pkid);
                    continue;
                }
                if p.again {
                    self.resent += 1;
                    gauge(cx.stats(), "mqtt_resent", self.resent);
                }
                if p.message.qos == 0 {
                    at_most_once += 1;
                } else {
                    self.inflight.push_back(p);
                }
            }
            gauge(cx.stats(), "mqtt_inflight", self.inflight.len() as u64);
            if let Err(e) = s.keep_alive_due() {
                return Ended::Lost(e);
            }
            if let Err(e) = s.flush().await {
                // QoS 0: what was written is gone with the connection.
                ComponentStats::add(&cx.stats().dropped, at_most_once);
                return Ended::Lost(e);
            }
            cx.delivered(at_most_once);
            if self.graph_done && self.ready.is_empty() && self.inflight.is_empty() {
                s.close().await;
                return Ended::Stop;
            }
            let room = self.window.saturating_sub(self.inflight.len()).min(BATCH);
            let take = !self.graph_done && self.ready.is_empty() && room > 0;
            let wake = s.keep_alive.next_wake();
            tokio::select! {
                biased;
                read = s.fill() => match read {
                    Ok(true) => {
                        if let Err(end) = self.on_packets(&mut s, cx) {
                            return end;
                        }
                    }
                    Ok(false) => return Ended::Lost(format!("{} closed the connection", s.url)),
                    Err(e) => return Ended::Lost(e),
                },
                more = cx.next_batch(room, &mut batch), if take => {
                    if !more {
                        self.graph_done = true;
                        continue;
                    }
                    for signal in batch.drain(..) {
                        self.take(&signal, &mut topic, cx);
                    }
                },
                () = Session::keep_alive_wake(wake) => {}
            }
        }
    }

    /// Makes a signal a message waiting to be published, or refuses it (counted).
    fn take(&mut self, signal: &patchbay_signal::Signal, topic: &mut String, cx: &OutputContext) {
        topic.clear();
        self.config.topic.render(signal, topic);
        if topic.len() > MAX_TOPIC_LEN {
            cx.refused(format!("{}: its topic is over 65535 bytes", signal.kind));
            return;
        }
        let payload = match self.encoder.encode(signal) {
            Ok(bytes) => Bytes::from(bytes),
            Err(e) => {
                cx.refused(e);
                return;
            }
        };
        let message = Outgoing {
            topic: topic.clone(),
            payload,
            qos: self.config.connection.qos,
            retain: self.config.retain,
        };
        if let Some(max) = self.broker_max
            && message.size() > max as usize
        {
            cx.refused(format!(
                "{} on `{topic}`: {} bytes, over the broker's maximum packet size ({max})",
                signal.kind,
                message.size()
            ));
            return;
        }
        self.ready.push_back(Pending {
            message,
            pkid: 0,
            again: false,
        });
    }

    /// The broker's packets in the read buffer.
    fn on_packets(&mut self, s: &mut Session, cx: &OutputContext) -> Result<(), Ended> {
        loop {
            let packet = match s.framer.next(&mut s.rbuf) {
                Ok(Some(p)) => p,
                Ok(None) => return Ok(()),
                Err(e) => {
                    cx.stats().bad_input(&e);
                    return Err(Ended::Lost(e.to_string()));
                }
            };
            match packet {
                Incoming::PubAck { pkid, refused } => {
                    // The broker acknowledges in order, so the first is the usual match.
                    let Some(at) = self.inflight.iter().position(|p| p.pkid == pkid) else {
                        tracing::debug!(output = cx.name(), "MQTT: PUBACK for unknown id {pkid}");
                        continue;
                    };
                    let Some(p) = self.inflight.remove(at) else {
                        continue;
                    };
                    self.ids.release(pkid);
                    match refused {
                        None => cx.delivered(1),
                        Some(reason) => cx.refused(format!(
                            "the broker refused a message on `{}`: {reason}",
                            p.message.topic
                        )),
                    }
                }
                // Nothing is subscribed: a message can only come from a session the
                // broker kept for this client id. Acknowledged so that it stops.
                Incoming::Publish(Delivery { qos, pkid, .. })
                | Incoming::Oversized { qos, pkid, .. } => {
                    if qos > 0 {
                        codec::puback(s.version, pkid, &mut s.wbuf);
                    }
                }
                Incoming::PingResp | Incoming::SubAck { .. } => {}
                Incoming::Disconnect { reason } => {
                    return Err(Ended::Lost(format!("the broker disconnected: {reason}")));
                }
                Incoming::ConnAck(_) => {
                    cx.stats().bad_input("a second CONNACK from the broker");
                    return Err(Ended::Lost("a second CONNACK from the broker".into()));
                }
            }
        }
    }
}

/// Sets the final state of a component whose driver returned.
pub(crate) fn stopped(stats: &ComponentStats) {
    if !matches!(stats.state(), HealthState::Failed) {
        stats.set_state(HealthState::Stopped, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_ids_are_never_handed_out_twice_while_in_use() {
        let mut ids = PacketIds::new();
        let a = ids.take();
        let b = ids.take();
        assert_eq!((a, b), (1, 2));
        // Wrap around: 1 is still in use, 2 was released.
        ids.release(b);
        ids.next = u16::MAX;
        assert_eq!(ids.take(), u16::MAX);
        assert_eq!(ids.take(), 2, "skips 1 (in use), never 0");
        ids.release(a);
        ids.next = 1;
        assert_eq!(ids.take(), 1);
    }

    #[tokio::test]
    async fn keep_alive_pings_when_quiet_and_gives_up_on_silence() {
        let period = Duration::from_secs(10);
        let mut k = KeepAlive::new(Some(period));
        let t0 = k.last_write;
        assert!(!k.ping_due(t0));
        assert!(k.ping_due(t0 + period));
        k.pinged();
        let pinged = k.ping_at.expect("a ping is out");
        assert!(!k.ping_due(pinged + period * 3), "one ping at a time");
        assert!(!k.dead(pinged + period - Duration::from_millis(1)));
        assert!(k.dead(pinged + period), "a whole period without a word");
        assert_eq!(k.next_wake(), Some(pinged + period));
        k.read();
        assert!(!k.dead(pinged + period * 5), "an answer clears it");
        let off = KeepAlive::new(None);
        assert!(off.next_wake().is_none() && !off.ping_due(t0 + period * 100));
    }
}
