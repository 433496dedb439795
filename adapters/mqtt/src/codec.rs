//! MQTT packets, both versions, as the few things a client does with them: what it sends
//! (CONNECT, PUBLISH, PUBACK, SUBSCRIBE, PINGREQ, DISCONNECT) and what the broker's bytes
//! say ([`Incoming`]). rumqttc's packet codecs (MQTT 3.1.1 and 5) do the bytes; this
//! module frames a byte stream into packets, bounds their size, and says what each means
//! for one version-independent session. Pure: no I/O.

use bytes::{Buf, Bytes, BytesMut};
use rumqttc::mqttbytes::QoS;
use rumqttc::mqttbytes::v4;
use rumqttc::v5::mqttbytes::QoS as QoS5;
use rumqttc::v5::mqttbytes::v5;
use serde::{Deserialize, Serialize};

/// The protocol version spoken.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
pub enum Version {
    /// MQTT 3.1.1 (protocol level 4): what every broker and device library speaks.
    #[default]
    #[serde(rename = "3.1.1")]
    V311,
    /// MQTT 5.
    #[serde(rename = "5")]
    V5,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Version::V311 => "MQTT 3.1.1",
            Version::V5 => "MQTT 5",
        })
    }
}

/// What a CONNECT carries.
#[derive(Clone)]
pub struct ConnectParams<'a> {
    /// The client identifier (the session's name at the broker).
    pub client_id: &'a str,
    /// Start a new session (3.1.1: clean session; 5: clean start) rather than resume one.
    pub clean: bool,
    /// Seconds between the client's packets before the broker may drop it (0: off).
    pub keep_alive: u16,
    /// The user name.
    pub user: Option<&'a str>,
    /// The password (or token).
    pub password: Option<&'a str>,
    /// MQTT 5: how long the broker keeps the session after a disconnection, in seconds.
    pub session_expiry: Option<u32>,
    /// MQTT 5: how many QoS 1 messages the broker may have unacknowledged with us.
    pub receive_maximum: Option<u16>,
    /// MQTT 5: the largest packet we accept (the broker drops larger messages for us).
    pub max_packet_size: Option<u32>,
}

/// Why the broker refused a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The broker's reason, in words.
    pub reason: String,
    /// A refusal of who we are (credentials, authorization, client id, protocol
    /// version): retrying the same cannot help.
    pub permanent: bool,
}

/// A CONNACK, as the session needs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnAck {
    /// The broker resumed the session we asked for.
    pub session_present: bool,
    /// `Some` when the connection was refused.
    pub refusal: Option<Refusal>,
    /// MQTT 5: how many of our QoS 1 messages the broker takes unacknowledged.
    pub receive_maximum: Option<u16>,
    /// MQTT 5: the highest QoS the broker takes.
    pub max_qos: Option<u8>,
    /// MQTT 5: whether the broker takes retained messages.
    pub retain_available: Option<bool>,
    /// MQTT 5: the largest packet the broker takes.
    pub max_packet_size: Option<u32>,
    /// MQTT 5: the keep-alive the broker wants instead of ours.
    pub server_keep_alive: Option<u16>,
}

/// A message the broker delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Its topic.
    pub topic: String,
    /// Its bytes.
    pub payload: Bytes,
    /// 0 or 1 (2 is refused: we never subscribe at QoS 2).
    pub qos: u8,
    /// The packet identifier to acknowledge (QoS 1).
    pub pkid: u16,
    /// Sent again after a reconnect.
    pub dup: bool,
    /// The broker's retained value of the topic.
    pub retain: bool,
}

/// What one packet from the broker says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// The answer to CONNECT.
    ConnAck(ConnAck),
    /// A message.
    Publish(Delivery),
    /// A message larger than the limit: skipped (its bytes are read and dropped), to be
    /// acknowledged (QoS 1) and counted.
    Oversized {
        /// Its topic (when it could be read).
        topic: String,
        /// 0 or 1.
        qos: u8,
        /// The packet identifier to acknowledge (QoS 1).
        pkid: u16,
        /// Its size in bytes.
        size: usize,
    },
    /// The broker took one of our QoS 1 messages (`refused`: MQTT 5's refusal of it).
    PubAck {
        /// The message's packet identifier.
        pkid: u16,
        /// Why the broker refused it, if it did.
        refused: Option<String>,
    },
    /// The answer to SUBSCRIBE: per filter, the QoS granted or why it was refused.
    SubAck {
        /// The SUBSCRIBE's packet identifier.
        pkid: u16,
        /// One per filter, in order.
        results: Vec<Result<u8, String>>,
    },
    /// The answer to PINGREQ.
    PingResp,
    /// MQTT 5: the broker closes the connection, saying why.
    Disconnect {
        /// Its reason.
        reason: String,
    },
}

/// The broker sent something a client cannot use: the connection is reset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// Bytes that are not an MQTT packet of this version.
    #[error("malformed packet from the broker: {0}")]
    Malformed(String),
    /// A packet a broker does not send to a client (or not in this session).
    #[error("unexpected {0} from the broker")]
    Unexpected(&'static str),
    /// A packet other than a message over the size limit.
    #[error("a {size}-byte packet from the broker is over the limit of {max} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
}

/// Frames the broker's byte stream into packets, at most `max_packet` bytes each (a
/// larger message is skipped as it arrives and reported as [`Incoming::Oversized`]:
/// the read buffer never holds more than the limit and a little).
#[derive(Debug, Clone)]
pub struct Framer {
    version: Version,
    max_packet: usize,
    /// Bytes of an oversized message still to drop.
    skip: usize,
}

impl Framer {
    /// A framer for `version` with this packet limit.
    pub fn new(version: Version, max_packet: usize) -> Self {
        Framer {
            version,
            max_packet,
            skip: 0,
        }
    }

    /// Whether a packet is being skipped (what is in the buffer is not one to keep).
    pub fn skipping(&self) -> bool {
        self.skip > 0
    }

    /// The next whole packet in `buf` (consumed from it), `None` when more bytes are
    /// needed.
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Option<Incoming>, ProtocolError> {
        if self.skip > 0 {
            let n = self.skip.min(buf.len());
            buf.advance(n);
            self.skip -= n;
            if self.skip > 0 {
                return Ok(None);
            }
        }
        let Some((header_len, remaining)) = fixed_header(buf)? else {
            return Ok(None);
        };
        let size = header_len + remaining;
        if size > self.max_packet {
            return self.oversized(buf, header_len, size);
        }
        if buf.len() < size {
            return Ok(None);
        }
        let mut frame = buf.split_to(size);
        if self.version == Version::V5 && byte1_of(&frame) == 0xe0 {
            // rumqttc refuses the short forms MQTT 5 allows (and brokers send: mosquitto's
            // shutdown notice is the reason code alone), so DISCONNECT is read here.
            return Ok(Some(disconnect_v5(&frame[header_len..])));
        }
        let packet_type = byte1_of(&frame) >> 4;
        let incoming = match self.version {
            Version::V311 => from_v4(v4::Packet::read(&mut frame, usize::MAX).map_err(malformed)?),
            Version::V5 => from_v5(v5::Packet::read(&mut frame, None).map_err(malformed)?),
        }?;
        incoming.map(Some).ok_or_else(|| unexpected(packet_type))
    }

    /// A packet over the limit: a message is skipped once its topic and packet
    /// identifier are in (they come first), anything else is an error.
    fn oversized(
        &mut self,
        buf: &mut BytesMut,
        header_len: usize,
        size: usize,
    ) -> Result<Option<Incoming>, ProtocolError> {
        let byte1 = buf[0];
        if byte1 >> 4 != 3 {
            return Err(ProtocolError::TooLarge {
                size,
                max: self.max_packet,
            });
        }
        let qos = (byte1 >> 1) & 0b11;
        if qos > 1 {
            return Err(ProtocolError::Unexpected("QoS 2 message"));
        }
        let at = header_len;
        if buf.len() < at + 2 {
            return Ok(None);
        }
        let topic_len = usize::from(u16::from_be_bytes([buf[at], buf[at + 1]]));
        let id_len = if qos > 0 { 2 } else { 0 };
        let head = at + 2 + topic_len + id_len;
        if head > size {
            return Err(ProtocolError::Malformed(
                "a message's topic runs past its end".into(),
            ));
        }
        if buf.len() < head {
            return Ok(None);
        }
        let topic = String::from_utf8_lossy(&buf[at + 2..at + 2 + topic_len]).into_owned();
        let pkid = if qos > 0 {
            u16::from_be_bytes([buf[head - 2], buf[head - 1]])
        } else {
            0
        };
        if qos > 0 && pkid == 0 {
            return Err(ProtocolError::Malformed("packet identifier 0".into()));
        }
        let n = size.min(buf.len());
        buf.advance(n);
        self.skip = size - n;
        Ok(Some(Incoming::Oversized {
            topic,
            qos,
            pkid,
            size,
        }))
    }
}

fn byte1_of(frame: &[u8]) -> u8 {
    frame.first().copied().unwrap_or_default()
}

/// An MQTT 5 DISCONNECT's body: its reason code (0, normal, when absent) and, when its
/// properties hold one, the reason string.
fn disconnect_v5(body: &[u8]) -> Incoming {
    let code = body.first().copied().unwrap_or(0);
    let mut reason = match v5::DisconnectReasonCode::try_from(code) {
        Ok(known) => split_words(&format!("{known:?}")),
        Err(_) => format!("reason code {code:#04x}"),
    };
    if let Some(text) = body.get(1..).and_then(reason_string) {
        reason = format!("{reason} ({text})");
    }
    Incoming::Disconnect { reason }
}

/// The reason string (property 0x1F) among MQTT 5 properties (a variable-length count,
/// then the properties), if the bytes are well formed enough to find it.
fn reason_string(properties: &[u8]) -> Option<String> {
    let (len_len, len) = variable_int(properties)?;
    let mut rest = properties.get(len_len..len_len + len)?;
    while let Some((&id, after)) = rest.split_first() {
        rest = after;
        let skip = match id {
            // A string or binary data: a 2-byte length first.
            0x1f | 0x1c | 0x03 | 0x08 | 0x09 | 0x12 | 0x15 | 0x16 | 0x1a => {
                let n = usize::from(u16::from_be_bytes([*rest.first()?, *rest.get(1)?]));
                if id == 0x1f {
                    return Some(String::from_utf8_lossy(rest.get(2..2 + n)?).into_owned());
                }
                2 + n
            }
            // A user property: two strings.
            0x26 => {
                let a = usize::from(u16::from_be_bytes([*rest.first()?, *rest.get(1)?]));
                let b_at = 2 + a;
                let b = usize::from(u16::from_be_bytes([*rest.get(b_at)?, *rest.get(b_at + 1)?]));
                b_at + 2 + b
            }
            0x11 | 0x02 | 0x18 | 0x27 => 4,
            0x21 | 0x22 | 0x23 | 0x13 => 2,
            0x0b => variable_int(rest)?.0,
            _ => 1,
        };
        rest = rest.get(skip..)?;
    }
    None
}

/// A variable-byte integer: (its length in bytes, its value).
fn variable_int(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut value = 0usize;
    for (i, &byte) in bytes.iter().take(4).enumerate() {
        value |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((i + 1, value));
        }
    }
    None
}

/// The fixed header's length and the remaining length, `None` when incomplete.
fn fixed_header(buf: &[u8]) -> Result<Option<(usize, usize)>, ProtocolError> {
    let mut remaining = 0usize;
    for i in 0..4 {
        let Some(&byte) = buf.get(1 + i) else {
            return Ok(None);
        };
        remaining |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((2 + i, remaining)));
        }
    }
    Err(ProtocolError::Malformed(
        "a remaining length over 4 bytes".into(),
    ))
}

fn malformed(e: impl std::fmt::Display) -> ProtocolError {
    ProtocolError::Malformed(e.to_string())
}

/// A delivery's QoS level (rumqttc's `QoS` of either version, as its number): 0 or 1, as
/// we never subscribe at QoS 2.
fn delivery_qos(level: u8) -> Result<u8, ProtocolError> {
    if level > 1 {
        return Err(ProtocolError::Unexpected("QoS 2 message"));
    }
    Ok(level)
}

/// What a client says of a packet a broker must not send it, by packet type (the fixed
/// header's high nibble), the same for both versions.
fn unexpected(packet_type: u8) -> ProtocolError {
    ProtocolError::Unexpected(match packet_type {
        1 => "CONNECT",
        5..=7 => "QoS 2 exchange",
        8 => "SUBSCRIBE",
        10 => "UNSUBSCRIBE",
        11 => "UNSUBACK",
        12 => "PINGREQ",
        14 => "DISCONNECT",
        15 => "AUTH",
        _ => "packet",
    })
}

/// A SUBACK of either version: `granted` reads one of its reason codes as the QoS granted
/// or why the filter was refused.
fn sub_ack<C>(pkid: u16, codes: Vec<C>, granted: impl Fn(C) -> Result<u8, String>) -> Incoming {
    Incoming::SubAck {
        pkid,
        results: codes.into_iter().map(granted).collect(),
    }
}

/// What an MQTT 3.1.1 packet says; `None` for a packet a broker does not send a client.
fn from_v4(packet: v4::Packet) -> Result<Option<Incoming>, ProtocolError> {
    use v4::{ConnectReturnCode as C, Packet as P};
    Ok(Some(match packet {
        P::ConnAck(ack) => {
            let (reason, permanent) = match ack.code {
                C::Success => ("", false),
                C::RefusedProtocolVersion => ("the broker does not speak MQTT 3.1.1", true),
                C::BadClientId => ("the client id was refused", true),
                C::ServiceUnavailable => ("the broker is unavailable", false),
                C::BadUserNamePassword => ("bad user name or password", true),
                C::NotAuthorized => ("not authorized", true),
            };
            Incoming::ConnAck(ConnAck {
                session_present: ack.session_present,
                refusal: (ack.code != C::Success).then(|| Refusal {
                    reason: reason.into(),
                    permanent,
                }),
                ..ConnAck::default()
            })
        }
        P::Publish(p) => Incoming::Publish(Delivery {
            qos: delivery_qos(p.qos as u8)?,
            topic: p.topic,
            payload: p.payload,
            pkid: p.pkid,
            dup: p.dup,
            retain: p.retain,
        }),
        P::PubAck(ack) => Incoming::PubAck {
            pkid: ack.pkid,
            refused: None,
        },
        P::SubAck(ack) => sub_ack(ack.pkid, ack.return_codes, |code| match code {
            v4::SubscribeReasonCode::Success(q) => Ok(q as u8),
            v4::SubscribeReasonCode::Failure => Err("refused".to_owned()),
        }),
        P::PingResp => Incoming::PingResp,
        _ => return Ok(None),
    }))
}

/// What an MQTT 5 packet says; `None` for a packet a broker does not send a client.
fn from_v5(packet: v5::Packet) -> Result<Option<Incoming>, ProtocolError> {
    use v5::{ConnectReturnCode as C, Packet as P};
    Ok(Some(match packet {
        P::ConnAck(ack) => {
            let permanent = matches!(
                ack.code,
                C::RefusedProtocolVersion
                    | C::UnsupportedProtocolVersion
                    | C::BadClientId
                    | C::ClientIdentifierNotValid
                    | C::BadUserNamePassword
                    | C::NotAuthorized
                    | C::Banned
                    | C::BadAuthenticationMethod
            );
            let props = ack.properties;
            let reason = props
                .as_ref()
                .and_then(|p| p.reason_string.clone())
                .map_or_else(
                    || words(&ack.code),
                    |r| format!("{} ({r})", words(&ack.code)),
                );
            Incoming::ConnAck(ConnAck {
                session_present: ack.session_present,
                refusal: (ack.code != C::Success).then_some(Refusal { reason, permanent }),
                receive_maximum: props.as_ref().and_then(|p| p.receive_max),
                max_qos: props.as_ref().and_then(|p| p.max_qos),
                retain_available: props
                    .as_ref()
                    .and_then(|p| p.retain_available)
                    .map(|r| r != 0),
                max_packet_size: props.as_ref().and_then(|p| p.max_packet_size),
                server_keep_alive: props.as_ref().and_then(|p| p.server_keep_alive),
            })
        }
        P::Publish(p) => {
            if p.properties
                .as_ref()
                .is_some_and(|pr| pr.topic_alias.is_some())
            {
                // We announce no topic alias maximum, so the broker may not use one.
                return Err(ProtocolError::Unexpected("topic alias"));
            }
            let topic = String::from_utf8(p.topic.to_vec())
                .map_err(|_| ProtocolError::Malformed("a topic that is not UTF-8".into()))?;
            Incoming::Publish(Delivery {
                qos: delivery_qos(p.qos as u8)?,
                topic,
                payload: p.payload,
                pkid: p.pkid,
                dup: p.dup,
                retain: p.retain,
            })
        }
        P::PubAck(ack) => {
            use v5::PubAckReason as R;
            let refused = match ack.reason {
                R::Success | R::NoMatchingSubscribers => None,
                other => Some(format!("{other:?}")),
            };
            Incoming::PubAck {
                pkid: ack.pkid,
                refused: refused.map(|r| split_words(&r)),
            }
        }
        P::SubAck(ack) => sub_ack(ack.pkid, ack.return_codes, |code| match code {
            v5::SubscribeReasonCode::Success(q) => Ok(q as u8),
            other => Err(split_words(&format!("{other:?}"))),
        }),
        P::PingResp(_) => Incoming::PingResp,
        P::Disconnect(d) => {
            let mut reason = split_words(&format!("{:?}", d.reason_code));
            if let Some(text) = d.properties.and_then(|p| p.reason_string) {
                reason = format!("{reason} ({text})");
            }
            Incoming::Disconnect { reason }
        }
        _ => return Ok(None),
    }))
}

fn words(code: &v5::ConnectReturnCode) -> String {
    match code {
        v5::ConnectReturnCode::BadUserNamePassword => "bad user name or password".into(),
        other => split_words(&format!("{other:?}")),
    }
}

/// `BadUserNamePassword` → `bad user name password`: rumqttc's reason names, in words.
fn split_words(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push(' ');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn qos(n: u8) -> QoS {
    if n == 0 {
        QoS::AtMostOnce
    } else {
        QoS::AtLeastOnce
    }
}

fn qos5(n: u8) -> QoS5 {
    if n == 0 {
        QoS5::AtMostOnce
    } else {
        QoS5::AtLeastOnce
    }
}

/// Why a packet cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot encode the packet: {0}")]
pub struct EncodeError(String);

impl From<rumqttc::mqttbytes::Error> for EncodeError {
    fn from(e: rumqttc::mqttbytes::Error) -> Self {
        EncodeError(e.to_string())
    }
}

impl From<rumqttc::v5::mqttbytes::Error> for EncodeError {
    fn from(e: rumqttc::v5::mqttbytes::Error) -> Self {
        EncodeError(e.to_string())
    }
}

/// Appends the CONNECT.
pub fn connect(
    version: Version,
    p: &ConnectParams<'_>,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    match version {
        Version::V311 => {
            let mut connect = v4::Connect::new(p.client_id);
            connect.keep_alive = p.keep_alive;
            connect.clean_session = p.clean;
            if p.user.is_some() || p.password.is_some() {
                connect.set_login(p.user.unwrap_or_default(), p.password.unwrap_or_default());
            }
            connect.write(out)?;
        }
        Version::V5 => {
            let mut props = v5::ConnectProperties::new();
            props.session_expiry_interval = p.session_expiry;
            props.receive_maximum = p.receive_maximum;
            props.max_packet_size = p.max_packet_size;
            let connect = v5::Connect {
                keep_alive: p.keep_alive,
                client_id: p.client_id.to_owned(),
                clean_start: p.clean,
                properties: Some(props),
            };
            let login = (p.user.is_some() || p.password.is_some()).then(|| {
                v5::Login::new(p.user.unwrap_or_default(), p.password.unwrap_or_default())
            });
            connect.write(&None, &login, out)?;
        }
    }
    Ok(())
}

/// One message to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Its topic.
    pub topic: String,
    /// Its bytes.
    pub payload: Bytes,
    /// 0 or 1.
    pub qos: u8,
    /// Kept by the broker as the topic's last value.
    pub retain: bool,
}

impl Outgoing {
    /// The size of its PUBLISH packet (an upper bound for MQTT 5), in bytes.
    pub fn size(&self) -> usize {
        let len = 2 + self.topic.len() + 2 + 1 + self.payload.len();
        1 + 4 + len
    }
}

/// Appends a PUBLISH of `message` (`pkid` for QoS 1; `dup` when it is sent again).
pub fn publish(
    version: Version,
    message: &Outgoing,
    pkid: u16,
    dup: bool,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    match version {
        Version::V311 => {
            let p = v4::Publish {
                dup,
                qos: qos(message.qos),
                retain: message.retain,
                topic: message.topic.clone(),
                pkid,
                payload: message.payload.clone(),
            };
            p.write(out)?;
        }
        Version::V5 => {
            let p = v5::Publish {
                dup,
                qos: qos5(message.qos),
                retain: message.retain,
                topic: Bytes::copy_from_slice(message.topic.as_bytes()),
                pkid,
                payload: message.payload.clone(),
                properties: None,
            };
            p.write(out)?;
        }
    }
    Ok(())
}

/// Appends the PUBACK of a QoS 1 message.
pub fn puback(version: Version, pkid: u16, out: &mut BytesMut) {
    // A PUBACK is four bytes in both versions (MQTT 5 omits the success reason code).
    let _ = version;
    out.extend_from_slice(&[0x40, 0x02]);
    out.extend_from_slice(&pkid.to_be_bytes());
}

/// Appends a SUBSCRIBE of `filters` at `max_qos`.
pub fn subscribe(
    version: Version,
    pkid: u16,
    filters: &[&str],
    max_qos: u8,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    match version {
        Version::V311 => {
            let s = v4::Subscribe {
                pkid,
                filters: filters
                    .iter()
                    .map(|f| v4::SubscribeFilter::new((*f).to_owned(), qos(max_qos)))
                    .collect(),
            };
            s.write(out)?;
        }
        Version::V5 => {
            let mut s = v5::Subscribe::new_many(
                filters.iter().map(|f| v5::Filter::new(*f, qos5(max_qos))),
                None,
            );
            s.pkid = pkid;
            s.write(out)?;
        }
    }
    Ok(())
}

/// Appends a PINGREQ (two bytes in both versions).
pub fn pingreq(out: &mut BytesMut) {
    out.extend_from_slice(&[0xc0, 0x00]);
}

/// Appends a DISCONNECT (a normal one: the broker drops the will, keeps the session).
pub fn disconnect(version: Version, out: &mut BytesMut) {
    match version {
        Version::V311 => out.extend_from_slice(&[0xe0, 0x00]),
        // Reason 0x00 (normal disconnection), no properties.
        Version::V5 => out.extend_from_slice(&[0xe0, 0x02, 0x00, 0x00]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_testkit::prng::Rng;

    /// Feeds `bytes` to a framer in pieces of `step` bytes and collects what it says.
    fn frame_all(
        version: Version,
        max: usize,
        bytes: &[u8],
        step: usize,
    ) -> Result<Vec<Incoming>, ProtocolError> {
        let mut framer = Framer::new(version, max);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in bytes.chunks(step.max(1)) {
            buf.extend_from_slice(chunk);
            while let Some(incoming) = framer.next(&mut buf)? {
                out.push(incoming);
            }
        }
        assert!(buf.is_empty() && !framer.skipping(), "everything consumed");
        Ok(out)
    }

    fn v4_bytes(packets: &[v4::Packet]) -> Vec<u8> {
        let mut buf = BytesMut::new();
        for p in packets {
            p.write(&mut buf, usize::MAX).unwrap();
        }
        buf.to_vec()
    }

    fn v5_bytes(packets: &[v5::Packet]) -> Vec<u8> {
        let mut buf = BytesMut::new();
        for p in packets {
            p.write(&mut buf, None).unwrap();
        }
        buf.to_vec()
    }

    fn v4_publish(
        topic: &str,
        payload: &[u8],
        qos: QoS,
        pkid: u16,
        dup: bool,
        retain: bool,
    ) -> v4::Packet {
        v4::Packet::Publish(v4::Publish {
            dup,
            qos,
            retain,
            topic: topic.into(),
            pkid,
            payload: Bytes::copy_from_slice(payload),
        })
    }

    fn delivery(
        topic: &str,
        payload: &[u8],
        qos: u8,
        pkid: u16,
        dup: bool,
        retain: bool,
    ) -> Incoming {
        Incoming::Publish(Delivery {
            topic: topic.into(),
            payload: Bytes::copy_from_slice(payload),
            qos,
            pkid,
            dup,
            retain,
        })
    }

    #[test]
    fn a_v4_session_split_anywhere() {
        let bytes = v4_bytes(&[
            v4::Packet::ConnAck(v4::ConnAck::new(v4::ConnectReturnCode::Success, true)),
            v4::Packet::SubAck(v4::SubAck::new(
                1,
                vec![
                    v4::SubscribeReasonCode::Success(QoS::AtLeastOnce),
                    v4::SubscribeReasonCode::Failure,
                ],
            )),
            v4_publish("a/b", b"hello", QoS::AtLeastOnce, 7, true, false),
            v4_publish("a/c", &[0xff; 300], QoS::AtMostOnce, 0, false, true),
            v4::Packet::PubAck(v4::PubAck::new(9)),
            v4::Packet::PingResp,
        ]);
        let want = vec![
            Incoming::ConnAck(ConnAck {
                session_present: true,
                ..ConnAck::default()
            }),
            Incoming::SubAck {
                pkid: 1,
                results: vec![Ok(1), Err("refused".into())],
            },
            delivery("a/b", b"hello", 1, 7, true, false),
            delivery("a/c", &[0xff; 300], 0, 0, false, true),
            Incoming::PubAck {
                pkid: 9,
                refused: None,
            },
            Incoming::PingResp,
        ];
        for step in [1, 2, 3, 7, 64, bytes.len()] {
            assert_eq!(
                frame_all(Version::V311, 1 << 20, &bytes, step).unwrap(),
                want,
                "step {step}"
            );
        }
    }

    #[test]
    fn v4_refusals_say_why_and_whether_to_retry() {
        use v4::ConnectReturnCode as C;
        for (code, permanent, words) in [
            (C::BadUserNamePassword, true, "bad user name or password"),
            (C::NotAuthorized, true, "not authorized"),
            (C::ServiceUnavailable, false, "the broker is unavailable"),
            (C::BadClientId, true, "the client id was refused"),
            (
                C::RefusedProtocolVersion,
                true,
                "the broker does not speak MQTT 3.1.1",
            ),
        ] {
            let bytes = v4_bytes(&[v4::Packet::ConnAck(v4::ConnAck::new(code, false))]);
            let got = frame_all(Version::V311, 1024, &bytes, 1).unwrap();
            let Incoming::ConnAck(ack) = &got[0] else {
                panic!("{got:?}")
            };
            let refusal = ack.refusal.clone().expect("refused");
            assert_eq!(
                (refusal.reason.as_str(), refusal.permanent),
                (words, permanent)
            );
        }
    }

    #[test]
    fn a_v5_session_split_anywhere() {
        let props = v5::ConnAckProperties {
            session_expiry_interval: None,
            receive_max: Some(20),
            max_qos: Some(1),
            retain_available: Some(0),
            max_packet_size: None,
            assigned_client_identifier: None,
            topic_alias_max: None,
            reason_string: None,
            user_properties: Vec::new(),
            wildcard_subscription_available: None,
            subscription_identifiers_available: None,
            shared_subscription_available: None,
            server_keep_alive: Some(15),
            response_information: None,
            server_reference: None,
            authentication_method: None,
            authentication_data: None,
        };
        let connack = v5::ConnAck {
            session_present: false,
            code: v5::ConnectReturnCode::Success,
            properties: Some(props),
        };
        let mut refused_ack = v5::PubAck::new(4, None);
        refused_ack.reason = v5::PubAckReason::NotAuthorized;
        let mut no_subscribers = v5::PubAck::new(5, None);
        no_subscribers.reason = v5::PubAckReason::NoMatchingSubscribers;
        let mut publish =
            v5::Publish::new("x/y", QoS5::AtLeastOnce, Bytes::from_static(b"{}"), None);
        publish.pkid = 3;
        publish.retain = true;
        let bytes = v5_bytes(&[
            v5::Packet::ConnAck(connack),
            v5::Packet::SubAck(v5::SubAck {
                pkid: 1,
                return_codes: vec![
                    v5::SubscribeReasonCode::Success(QoS5::AtMostOnce),
                    v5::SubscribeReasonCode::NotAuthorized,
                ],
                properties: None,
            }),
            v5::Packet::Publish(publish),
            v5::Packet::PubAck(refused_ack),
            v5::Packet::PubAck(no_subscribers),
            v5::Packet::PingResp(v5::PingResp),
        ]);
        // (rumqttc writes a DISCONNECT one byte longer than its length says.)
        let mut bytes = bytes;
        bytes.extend_from_slice(&[0xe0, 0x01, 0x8e]);
        let want = vec![
            Incoming::ConnAck(ConnAck {
                session_present: false,
                refusal: None,
                receive_maximum: Some(20),
                max_qos: Some(1),
                retain_available: Some(false),
                max_packet_size: None,
                server_keep_alive: Some(15),
            }),
            Incoming::SubAck {
                pkid: 1,
                results: vec![Ok(0), Err("not authorized".into())],
            },
            delivery("x/y", b"{}", 1, 3, false, true),
            Incoming::PubAck {
                pkid: 4,
                refused: Some("not authorized".into()),
            },
            Incoming::PubAck {
                pkid: 5,
                refused: None,
            },
            Incoming::PingResp,
            Incoming::Disconnect {
                reason: "session taken over".into(),
            },
        ];
        for step in [1, 5, bytes.len()] {
            assert_eq!(
                frame_all(Version::V5, 1 << 20, &bytes, step).unwrap(),
                want,
                "step {step}"
            );
        }
    }

    #[test]
    fn v5_disconnects_in_every_form_a_broker_sends() {
        let reason = |bytes: &[u8]| {
            let got = frame_all(Version::V5, 1024, bytes, 1).unwrap();
            let [Incoming::Disconnect { reason }] = &got[..] else {
                panic!("{got:?}")
            };
            reason.clone()
        };
        assert_eq!(reason(&[0xe0, 0x00]), "normal disconnection");
        // mosquitto's shutdown notice: the reason code alone.
        assert_eq!(reason(&[0xe0, 0x01, 0x8b]), "server shutting down");
        assert_eq!(reason(&[0xe0, 0x02, 0x8e, 0x00]), "session taken over");
        assert_eq!(reason(&[0xe0, 0x01, 0x7f]), "reason code 0x7f");
        // With properties: a session expiry, a user property, then the reason string.
        let mut props = vec![0x11, 0, 0, 0, 5, 0x26, 0, 1, b'k', 0, 1, b'v', 0x1f, 0, 4];
        props.extend_from_slice(b"bye!");
        let mut bytes = vec![0xe0, (2 + props.len()) as u8, 0x89, props.len() as u8];
        bytes.extend_from_slice(&props);
        assert_eq!(reason(&bytes), "server busy (bye!)");
        // Broken properties: the reason code still says why.
        assert_eq!(reason(&[0xe0, 0x03, 0x89, 0x05, 0x1f]), "server busy");
    }

    #[test]
    fn v5_refusals() {
        let ack = |code| {
            v5_bytes(&[v5::Packet::ConnAck(v5::ConnAck {
                session_present: false,
                code,
                properties: None,
            })])
        };
        let got = frame_all(
            Version::V5,
            1024,
            &ack(v5::ConnectReturnCode::NotAuthorized),
            1,
        )
        .unwrap();
        assert_eq!(
            got[0],
            Incoming::ConnAck(ConnAck {
                refusal: Some(Refusal {
                    reason: "not authorized".into(),
                    permanent: true
                }),
                ..ConnAck::default()
            })
        );
        let got = frame_all(
            Version::V5,
            1024,
            &ack(v5::ConnectReturnCode::ServerBusy),
            1,
        )
        .unwrap();
        let Incoming::ConnAck(a) = &got[0] else {
            panic!()
        };
        assert_eq!(a.refusal.as_ref().map(|r| r.permanent), Some(false));
    }

    #[test]
    fn an_oversized_message_is_skipped_and_reported_with_what_acks_it() {
        for version in [Version::V311, Version::V5] {
            let big = vec![b'x'; 5000];
            let bytes = match version {
                Version::V311 => v4_bytes(&[
                    v4_publish("big/one", &big, QoS::AtLeastOnce, 42, false, false),
                    v4_publish("small", b"ok", QoS::AtMostOnce, 0, false, false),
                ]),
                Version::V5 => {
                    let mut p = v5::Publish::new("big/one", QoS5::AtLeastOnce, big.clone(), None);
                    p.pkid = 42;
                    let small = v5::Publish::new(
                        "small",
                        QoS5::AtMostOnce,
                        Bytes::from_static(b"ok"),
                        None,
                    );
                    v5_bytes(&[v5::Packet::Publish(p), v5::Packet::Publish(small)])
                }
            };
            for step in [1, 100, 4096, bytes.len()] {
                let got = frame_all(version, 1024, &bytes, step).unwrap();
                assert_eq!(got.len(), 2, "{got:?}");
                let Incoming::Oversized {
                    topic,
                    qos,
                    pkid,
                    size,
                } = &got[0]
                else {
                    panic!("{got:?}")
                };
                assert_eq!((topic.as_str(), *qos, *pkid), ("big/one", 1, 42));
                assert!(*size > 5000);
                assert_eq!(got[1], delivery("small", b"ok", 0, 0, false, false));
            }
        }
    }

    #[test]
    fn broken_streams_are_errors_not_panics() {
        // A remaining length of five bytes.
        let mut buf = BytesMut::from(&[0x30, 0xff, 0xff, 0xff, 0xff, 0x01][..]);
        assert!(Framer::new(Version::V311, 1024).next(&mut buf).is_err());
        // A QoS 2 message: we never subscribe at QoS 2.
        let bytes = v4_bytes(&[v4_publish("a", b"x", QoS::ExactlyOnce, 1, false, false)]);
        assert_eq!(
            frame_all(Version::V311, 1024, &bytes, 1),
            Err(ProtocolError::Unexpected("QoS 2 message"))
        );
        // A packet a broker never sends a client.
        let bytes = v4_bytes(&[v4::Packet::PingReq]);
        assert_eq!(
            frame_all(Version::V311, 1024, &bytes, 1),
            Err(ProtocolError::Unexpected("PINGREQ"))
        );
        // An oversized packet that is not a message.
        let mut buf = BytesMut::from(&[0x90, 0xff, 0x7f][..]);
        assert!(matches!(
            Framer::new(Version::V311, 100).next(&mut buf),
            Err(ProtocolError::TooLarge { .. })
        ));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut rng = Rng(0x6d71_7474);
        for round in 0..4000 {
            let len = rng.below(200);
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            if round % 3 == 0 && !bytes.is_empty() {
                // Start like a message, so that the packet decoders are reached often.
                bytes[0] = 0x30 | (bytes[0] & 0x0f);
            }
            for version in [Version::V311, Version::V5] {
                let mut framer = Framer::new(version, 64);
                let mut buf = BytesMut::from(&bytes[..]);
                while let Ok(Some(_)) = framer.next(&mut buf) {}
            }
        }
    }

    #[test]
    fn what_we_send_is_what_rumqttc_reads() {
        for version in [Version::V311, Version::V5] {
            let mut buf = BytesMut::new();
            let params = ConnectParams {
                client_id: "patchbay-x",
                clean: false,
                keep_alive: 30,
                user: Some("u"),
                password: Some("p"),
                session_expiry: Some(60),
                receive_maximum: Some(10),
                max_packet_size: Some(1 << 20),
            };
            connect(version, &params, &mut buf).unwrap();
            let message = Outgoing {
                topic: "a/b".into(),
                payload: Bytes::from_static(b"hi"),
                qos: 1,
                retain: true,
            };
            publish(version, &message, 5, true, &mut buf).unwrap();
            puback(version, 6, &mut buf);
            subscribe(version, 7, &["a/#", "b/+"], 1, &mut buf).unwrap();
            pingreq(&mut buf);
            disconnect(version, &mut buf);
            match version {
                Version::V311 => {
                    let mut got = Vec::new();
                    while !buf.is_empty() {
                        got.push(v4::Packet::read(&mut buf, usize::MAX).unwrap());
                    }
                    let v4::Packet::Connect(c) = &got[0] else {
                        panic!("{got:?}")
                    };
                    assert_eq!(
                        (c.client_id.as_str(), c.clean_session, c.keep_alive),
                        ("patchbay-x", false, 30)
                    );
                    assert_eq!(
                        c.login
                            .as_ref()
                            .map(|l| (l.username.as_str(), l.password.as_str())),
                        Some(("u", "p"))
                    );
                    assert_eq!(
                        got[1],
                        v4_publish("a/b", b"hi", QoS::AtLeastOnce, 5, true, true)
                    );
                    assert_eq!(got[2], v4::Packet::PubAck(v4::PubAck::new(6)));
                    let v4::Packet::Subscribe(s) = &got[3] else {
                        panic!()
                    };
                    assert_eq!(s.pkid, 7);
                    assert_eq!(s.filters.len(), 2);
                    assert_eq!(got[4..], [v4::Packet::PingReq, v4::Packet::Disconnect]);
                }
                Version::V5 => {
                    let mut got = Vec::new();
                    while !buf.is_empty() {
                        got.push(v5::Packet::read(&mut buf, None).unwrap());
                    }
                    let v5::Packet::Connect(c, _, login) = &got[0] else {
                        panic!("{got:?}")
                    };
                    assert!(!c.clean_start);
                    let props = c.properties.as_ref().unwrap();
                    assert_eq!(props.session_expiry_interval, Some(60));
                    assert_eq!(props.receive_maximum, Some(10));
                    assert_eq!(login.as_ref().map(|l| l.username.as_str()), Some("u"));
                    let v5::Packet::Publish(p) = &got[1] else {
                        panic!()
                    };
                    assert_eq!(
                        (p.pkid, p.dup, p.retain, &p.topic[..]),
                        (5, true, true, &b"a/b"[..])
                    );
                    let v5::Packet::PubAck(a) = &got[2] else {
                        panic!()
                    };
                    assert_eq!((a.pkid, a.reason), (6, v5::PubAckReason::Success));
                    let v5::Packet::Subscribe(s) = &got[3] else {
                        panic!()
                    };
                    assert_eq!((s.pkid, s.filters.len()), (7, 2));
                    assert!(matches!(got[4], v5::Packet::PingReq(_)));
                    let v5::Packet::Disconnect(d) = &got[5] else {
                        panic!()
                    };
                    assert_eq!(d.reason_code, v5::DisconnectReasonCode::NormalDisconnection);
                }
            }
        }
    }
}
