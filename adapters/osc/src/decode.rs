//! The pure OSC decoder: one UDP datagram's bytes in, `osc.message` signals out, no I/O.
//!
//! [`parse_packet`] reads the bytes into the [`Packet`] model, or says exactly what is
//! wrong with them ([`OscError`]); [`OscDecoder`] turns a packet into signals, one per
//! message, bundles unpacked in order, or into one `error` signal (`code: "bad_frame"`) for
//! a packet it refuses.
//!
//! The reading is strict where OSC 1.0 is exact and bounded everywhere:
//!
//! - a packet (and a bundle element) is a whole number of 4-byte words, every string is
//!   NUL-terminated and padded to a word, every string is UTF-8;
//! - after the address comes the type tag string (`,` then one tag per argument); a
//!   message that ends right after its address has no arguments (OSC 1.0 asks receivers to
//!   accept the senders that omit the type tags);
//! - the type tags known are `i h f d s S b t c r m T F N I [ ]`; any other is refused
//!   ([`OscError::UnknownTag`]), since the size of its data cannot be known;
//! - bytes left after the last argument are refused, an argument cut off by the end of
//!   the packet too;
//! - bundles nest at most [`Limits::max_depth`] deep, arrays [`Limits::max_array_depth`],
//!   and one packet holds at most [`Limits::max_messages`] messages.
//!
//! A packet is taken whole or refused whole: the messages of a bundle are meant to take
//! effect together, so a bundle with one bad element gives none of them.

use std::net::SocketAddr;

use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::{Signal, SmallString};

use crate::packet::{Arg, Bundle, Message, Packet, TimeTag};

/// The type of the signals the decoder makes.
pub const MESSAGE_TYPE: &str = "osc.message";

/// The bounds of one packet's structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How deep bundles may nest (a bundle in a bundle is 2).
    pub max_depth: usize,
    /// How deep arrays may nest in one message's arguments.
    pub max_array_depth: usize,
    /// How many messages one packet may hold, bundles unpacked.
    pub max_messages: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 8,
            max_array_depth: 8,
            max_messages: 1024,
        }
    }
}

/// The part of a packet an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// The address of a message.
    Address,
    /// The type tag string of the message at this address.
    TypeTags(String),
    /// An argument: the message's address, its place among the type tags (1-based), its tag.
    Arg {
        /// The message's address.
        address: String,
        /// Its place among the type tags, from 1.
        position: usize,
        /// Its type tag.
        tag: char,
    },
    /// The time tag of a bundle.
    BundleTimeTag,
    /// The size word of a bundle element (its index, from 0).
    ElementSize(usize),
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Part::Address => f.write_str("the address"),
            Part::TypeTags(address) => write!(f, "the type tags of `{address}`"),
            Part::Arg {
                address,
                position,
                tag,
            } => write!(f, "argument {position} (`{tag}`) of `{address}`"),
            Part::BundleTimeTag => f.write_str("the bundle's time tag"),
            Part::ElementSize(index) => write!(f, "the size of bundle element {index}"),
        }
    }
}

/// What is wrong with a packet: each names the part and the fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OscError {
    /// Zero bytes.
    #[error("an empty packet")]
    Empty,
    /// Larger than the source's `max_packet`.
    #[error("a packet of more than {max} bytes (the source's `max_packet`)")]
    Oversized {
        /// The source's `max_packet`.
        max: usize,
    },
    /// Not a whole number of 4-byte words.
    #[error("{len} bytes, not a multiple of 4: OSC packets are made of 4-byte words")]
    NotAligned {
        /// The length.
        len: usize,
    },
    /// Neither an address (`/…`) nor `#bundle`.
    #[error("starts with `{start}`: neither an address (`/…`) nor `#bundle`")]
    NotAPacket {
        /// The first bytes, as text.
        start: String,
    },
    /// A string without its terminating NUL before the end.
    #[error("{part} has no terminating NUL")]
    Unterminated {
        /// Which string.
        part: Part,
    },
    /// A string that is not UTF-8.
    #[error("{part} is not UTF-8")]
    NotUtf8 {
        /// Which string.
        part: Part,
    },
    /// Data cut off by the end of the packet.
    #[error("{part} is cut off: {needed} bytes needed at offset {at}, {left} left")]
    Truncated {
        /// What was being read.
        part: Part,
        /// Where, from the start of the message or bundle.
        at: usize,
        /// Bytes it needs.
        needed: usize,
        /// Bytes there were.
        left: usize,
    },
    /// Bytes after the address that are not a type tag string.
    #[error("no type tag string after the address `{address}` (it must start with `,`)")]
    NoTypeTags {
        /// The message's address.
        address: String,
    },
    /// A type tag this decoder does not know: the size of its data is unknown.
    #[error("unknown type tag `{tag}` at {part}")]
    UnknownTag {
        /// The tag.
        tag: char,
        /// Where.
        part: Part,
    },
    /// A `]` with no `[` open.
    #[error("`]` without `[` in {part}")]
    ArrayNotOpen {
        /// The type tags.
        part: Part,
    },
    /// A `[` never closed.
    #[error("`[` not closed in {part}")]
    ArrayNotClosed {
        /// The type tags.
        part: Part,
    },
    /// Arrays nested too deep.
    #[error("arrays nested more than {max} deep in {part}")]
    ArrayTooDeep {
        /// The bound.
        max: usize,
        /// The type tags.
        part: Part,
    },
    /// A blob whose size is negative.
    #[error("{part} has a negative size ({size})")]
    NegativeBlob {
        /// The blob.
        part: Part,
        /// Its size word.
        size: i32,
    },
    /// A `c` argument that is not a Unicode scalar value.
    #[error("{part} is {value:#x}, not a character")]
    BadChar {
        /// The argument.
        part: Part,
        /// Its value.
        value: u32,
    },
    /// Bytes after the last argument.
    #[error("{count} bytes after the last argument of `{address}`")]
    TrailingBytes {
        /// The message's address.
        address: String,
        /// How many.
        count: usize,
    },
    /// A bundle element's size is not a positive multiple of 4.
    #[error("bundle element {index} has size {size}: not a positive multiple of 4")]
    BadElementSize {
        /// The element, from 0.
        index: usize,
        /// Its size word.
        size: i32,
    },
    /// A bundle element longer than what is left of the bundle.
    #[error("bundle element {index} says {size} bytes, {left} left in the bundle")]
    ElementPastEnd {
        /// The element, from 0.
        index: usize,
        /// Its size word.
        size: usize,
        /// Bytes left.
        left: usize,
    },
    /// A fault inside a bundle element.
    #[error("in bundle element {index}: {error}")]
    InElement {
        /// The element, from 0.
        index: usize,
        /// What is wrong with it.
        error: Box<OscError>,
    },
    /// Bundles nested too deep.
    #[error("bundles nested more than {max} deep")]
    TooDeep {
        /// The bound.
        max: usize,
    },
    /// Too many messages in one packet.
    #[error("more than {max} messages in one packet")]
    TooManyMessages {
        /// The bound.
        max: usize,
    },
}

impl OscError {
    /// The fault itself, out of the bundle elements it is in.
    pub fn innermost(&self) -> &OscError {
        match self {
            OscError::InElement { error, .. } => error.innermost(),
            other => other,
        }
    }
}

/// Reads one packet with the default [`Limits`].
pub fn parse_packet(bytes: &[u8]) -> Result<Packet, OscError> {
    parse_packet_with(bytes, &Limits::default())
}

/// Reads one packet within `limits`.
pub fn parse_packet_with(bytes: &[u8], limits: &Limits) -> Result<Packet, OscError> {
    let mut messages = 0;
    packet(bytes, 0, limits, &mut messages)
}

fn packet(
    bytes: &[u8],
    depth: usize,
    limits: &Limits,
    messages: &mut usize,
) -> Result<Packet, OscError> {
    if bytes.is_empty() {
        return Err(OscError::Empty);
    }
    if !bytes.len().is_multiple_of(4) {
        return Err(OscError::NotAligned { len: bytes.len() });
    }
    match bytes[0] {
        b'/' => {
            *messages += 1;
            if *messages > limits.max_messages {
                return Err(OscError::TooManyMessages {
                    max: limits.max_messages,
                });
            }
            message(bytes, limits).map(Packet::Message)
        }
        b'#' if bytes.starts_with(b"#bundle\0") => {
            bundle(bytes, depth + 1, limits, messages).map(Packet::Bundle)
        }
        _ => Err(OscError::NotAPacket {
            start: shown_start(bytes),
        }),
    }
}

/// The first bytes of a packet as text (at most 16, up to a NUL, others escaped).
fn shown_start(bytes: &[u8]) -> String {
    let head = bytes.iter().take(16).take_while(|b| **b != 0);
    head.flat_map(|b| std::ascii::escape_default(*b))
        .map(char::from)
        .collect()
}

fn message(bytes: &[u8], limits: &Limits) -> Result<Message, OscError> {
    let mut r = Reader { bytes, pos: 0 };
    let address = r.string(|| Part::Address)?.to_owned();
    if r.at_end() {
        return Ok(Message {
            address,
            args: Vec::new(),
        });
    }
    if r.bytes.get(r.pos) != Some(&b',') {
        return Err(OscError::NoTypeTags { address });
    }
    let tags = r.string(|| Part::TypeTags(address.clone()))?;
    let mut args = Vec::with_capacity(tags.len() - 1);
    let mut open: Vec<Vec<Arg>> = Vec::new();
    for (i, tag) in tags.chars().skip(1).enumerate() {
        match tag {
            '[' => {
                if open.len() >= limits.max_array_depth {
                    return Err(OscError::ArrayTooDeep {
                        max: limits.max_array_depth,
                        part: Part::TypeTags(address),
                    });
                }
                open.push(std::mem::take(&mut args));
            }
            ']' => {
                let Some(outer) = open.pop() else {
                    return Err(OscError::ArrayNotOpen {
                        part: Part::TypeTags(address),
                    });
                };
                let items = std::mem::replace(&mut args, outer);
                args.push(Arg::Array(items));
            }
            _ => {
                let part = || Part::Arg {
                    address: address.clone(),
                    position: i + 1,
                    tag,
                };
                args.push(r.arg(tag, part)?);
            }
        }
    }
    if !open.is_empty() {
        return Err(OscError::ArrayNotClosed {
            part: Part::TypeTags(address),
        });
    }
    if !r.at_end() {
        return Err(OscError::TrailingBytes {
            count: r.bytes.len() - r.pos,
            address,
        });
    }
    Ok(Message { address, args })
}

fn bundle(
    bytes: &[u8],
    depth: usize,
    limits: &Limits,
    messages: &mut usize,
) -> Result<Bundle, OscError> {
    if depth > limits.max_depth {
        return Err(OscError::TooDeep {
            max: limits.max_depth,
        });
    }
    let mut r = Reader { bytes, pos: 8 };
    let timetag = TimeTag::from_bits(r.u64(|| Part::BundleTimeTag)?);
    let mut elements = Vec::new();
    let mut index = 0;
    while !r.at_end() {
        let size = r.i32(|| Part::ElementSize(index))?;
        let Ok(len) = usize::try_from(size) else {
            return Err(OscError::BadElementSize { index, size });
        };
        if len == 0 || !len.is_multiple_of(4) {
            return Err(OscError::BadElementSize { index, size });
        }
        let left = r.bytes.len() - r.pos;
        if len > left {
            return Err(OscError::ElementPastEnd {
                index,
                size: len,
                left,
            });
        }
        let content = &r.bytes[r.pos..r.pos + len];
        r.pos += len;
        let element = packet(content, depth, limits, messages).map_err(|error| match error {
            // Limits are about the whole packet: said as they are.
            e @ (OscError::TooDeep { .. } | OscError::TooManyMessages { .. }) => e,
            e => OscError::InElement {
                index,
                error: Box::new(e),
            },
        })?;
        elements.push(element);
        index += 1;
    }
    Ok(Bundle { timetag, elements })
}

/// A cursor over one message or bundle (offsets, and so padding, relative to its start:
/// bundle elements start on a word, so this is the packet's alignment too).
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn take(&mut self, n: usize, part: impl FnOnce() -> Part) -> Result<&'a [u8], OscError> {
        let left = self.bytes.len() - self.pos;
        if n > left {
            return Err(OscError::Truncated {
                part: part(),
                at: self.pos,
                needed: n,
                left,
            });
        }
        let taken = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(taken)
    }

    fn word(&mut self, part: impl FnOnce() -> Part) -> Result<[u8; 4], OscError> {
        let b = self.take(4, part)?;
        Ok([b[0], b[1], b[2], b[3]])
    }

    fn i32(&mut self, part: impl FnOnce() -> Part) -> Result<i32, OscError> {
        self.word(part).map(i32::from_be_bytes)
    }

    fn u64(&mut self, part: impl FnOnce() -> Part) -> Result<u64, OscError> {
        let b = self.take(8, part)?;
        let mut word = [0u8; 8];
        word.copy_from_slice(b);
        Ok(u64::from_be_bytes(word))
    }

    /// Skips the padding after `len` bytes of data, to the next word.
    fn pad(&mut self, part: impl FnOnce() -> Part) -> Result<(), OscError> {
        let padding = (4 - self.pos % 4) % 4;
        self.take(padding, part).map(|_| ())
    }

    fn string(&mut self, part: impl Fn() -> Part) -> Result<&'a str, OscError> {
        let rest = &self.bytes[self.pos..];
        let Some(nul) = rest.iter().position(|b| *b == 0) else {
            return Err(OscError::Unterminated { part: part() });
        };
        let text =
            std::str::from_utf8(&rest[..nul]).map_err(|_| OscError::NotUtf8 { part: part() })?;
        self.pos += nul + 1;
        self.pad(&part)?;
        Ok(text)
    }

    fn arg(&mut self, tag: char, part: impl Fn() -> Part) -> Result<Arg, OscError> {
        Ok(match tag {
            'i' => Arg::Int(self.i32(&part)?),
            'h' => Arg::Long(self.u64(&part)? as i64),
            'f' => Arg::Float(f32::from_be_bytes(self.word(&part)?)),
            'd' => Arg::Double(f64::from_bits(self.u64(&part)?)),
            's' => Arg::String(self.string(&part)?.to_owned()),
            'S' => Arg::Symbol(self.string(&part)?.to_owned()),
            'b' => {
                let size = self.i32(&part)?;
                let Ok(len) = usize::try_from(size) else {
                    return Err(OscError::NegativeBlob { part: part(), size });
                };
                let data = self.take(len, &part)?.to_vec();
                self.pad(&part)?;
                Arg::Blob(data)
            }
            't' => Arg::Time(TimeTag::from_bits(self.u64(&part)?)),
            'c' => {
                let value = u32::from_be_bytes(self.word(&part)?);
                let c = char::from_u32(value).ok_or_else(|| OscError::BadChar {
                    part: part(),
                    value,
                })?;
                Arg::Char(c)
            }
            'r' => Arg::Color(self.word(&part)?),
            'm' => Arg::Midi(self.word(&part)?),
            'T' => Arg::True,
            'F' => Arg::False,
            'N' => Arg::Nil,
            'I' => Arg::Impulse,
            other => {
                return Err(OscError::UnknownTag {
                    tag: other,
                    part: part(),
                });
            }
        })
    }
}

/// Visits the messages of a packet in order, each with the time tag of the bundle it is
/// directly in (`None` outside any bundle).
pub fn for_each_message<'p>(
    packet: &'p Packet,
    visit: &mut impl FnMut(&'p Message, Option<TimeTag>),
) {
    fn walk<'p>(
        packet: &'p Packet,
        timetag: Option<TimeTag>,
        visit: &mut impl FnMut(&'p Message, Option<TimeTag>),
    ) {
        match packet {
            Packet::Message(m) => visit(m, timetag),
            Packet::Bundle(b) => {
                for element in &b.elements {
                    walk(element, Some(b.timetag), visit);
                }
            }
        }
    }
    walk(packet, None, visit);
}

/// How many bytes of a refused packet its `error` signal quotes (as hex).
const RAW_BYTES: usize = 128;

/// OSC packets in, `osc.message` signals out (see the crate docs for the payload).
#[derive(Debug, Clone)]
pub struct OscDecoder {
    source: SmallString,
    max_packet: usize,
    limits: Limits,
    /// The timestamp of the last good packet, given to `error` signals so that they never
    /// move an event clock.
    last_timestamp: i64,
}

impl OscDecoder {
    /// A decoder whose signals have source `source` (`osc:NAME`), refusing packets over
    /// `max_packet` bytes.
    pub fn new(source: impl Into<SmallString>, max_packet: usize) -> Self {
        OscDecoder {
            source: source.into(),
            max_packet,
            limits: Limits::default(),
            last_timestamp: 0,
        }
    }

    /// The same with other structural bounds.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The source of the signals.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The timestamp of the last good packet (0 if none).
    pub fn last_timestamp(&self) -> i64 {
        self.last_timestamp
    }

    /// Decodes one datagram received at `timestamp` (epoch ms) from `peer`: one signal per
    /// message into `out` (how many is returned), or, for a packet refused whole, one
    /// `error` signal and the reason. `peer` goes to each signal's `metadata.peer`.
    pub fn decode(
        &mut self,
        bytes: &[u8],
        peer: Option<SocketAddr>,
        timestamp: i64,
        out: &mut Vec<Decoded>,
    ) -> Result<usize, OscError> {
        let parsed = if bytes.len() > self.max_packet {
            Err(OscError::Oversized {
                max: self.max_packet,
            })
        } else {
            parse_packet_with(bytes, &self.limits)
        };
        let packet = match parsed {
            Ok(packet) => packet,
            Err(error) => {
                out.push(self.refusal(bytes, peer, &error));
                return Err(error);
            }
        };
        self.last_timestamp = timestamp;
        let peer = peer.map(|p| p.to_string());
        let mut count = 0;
        for_each_message(&packet, &mut |message, timetag| {
            let mut signal =
                Signal::new(MESSAGE_TYPE, self.source.clone(), message.payload(timetag))
                    .at(timestamp);
            if let Some(peer) = &peer {
                signal = signal.with_meta("peer", peer.as_str());
            }
            out.push(Decoded::Signal(signal));
            count += 1;
        });
        Ok(count)
    }

    /// The `error` signal of a refused packet: the reason, the peer, the first bytes as hex.
    fn refusal(&self, bytes: &[u8], peer: Option<SocketAddr>, error: &OscError) -> Decoded {
        let mut raw = to_hex(&bytes[..bytes.len().min(RAW_BYTES)]);
        if bytes.len() > RAW_BYTES {
            raw.push_str(" …");
        }
        let message = match peer {
            Some(peer) => format!("malformed OSC packet from {peer}: {error}"),
            None => format!("malformed OSC packet: {error}"),
        };
        let mut signal = bad_input_signal(&self.source, self.last_timestamp, &raw, &message);
        if let Some(peer) = peer {
            signal = signal.with_meta("peer", peer.to_string());
        }
        Decoded::BadInput(signal)
    }
}

/// Bytes as lowercase hex pairs separated by spaces (`2f 61 00 00`), the text
/// `patchbay parse --protocol osc` reads back.
pub use patchbay_signal::decode::to_hex;

#[cfg(test)]
mod tests;
