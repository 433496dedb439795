//! The server side of a sidecar's WebSocket connections (RFC 6455), after the upgrade.
//!
//! Why not axum's `WebSocket`: on the data path every message went through a shared
//! `Bytes` of its own (a reference count up and down per message, each way), a zero-filled
//! read buffer, and a conversion between axum's and tungstenite's message types. Here a
//! connection reads into one buffer and hands out each message's bytes in place (unmasked
//! there), and writes frames into one buffer flushed once, copying each frame's text
//! straight from where the hub keeps it.
//!
//! The reading is a pure decoder ([`Reader`]: bytes in, messages out, no I/O), so that it is
//! tested and fuzzed alone; the connection type of this module adds the socket. No
//! extensions are negotiated (no compression), so every reserved bit must be clear.

use std::ops::Range;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How much a connection reads at once unless told otherwise (and what its read buffer
/// grows by).
pub(crate) const READ_CHUNK: usize = 16 * 1024;

/// A buffer grown beyond this for a large message is let go once it is empty again, so
/// that one large message does not hold its memory for the connection's life.
const KEEP_BUFFER: usize = 256 * 1024;

/// Close codes (RFC 6455, 7.4.1).
pub(crate) mod close_code {
    /// A normal closure (the answer to the peer's close).
    pub const NORMAL: u16 = 1000;
    /// The endpoint is going away (patchbay shutting down).
    pub const GOING_AWAY: u16 = 1001;
    /// A protocol error.
    pub const PROTOCOL: u16 = 1002;
    /// A text message that is not UTF-8.
    pub const INVALID_DATA: u16 = 1007;
    /// A message larger than the limit.
    pub const TOO_BIG: u16 = 1009;
    /// Try again later: a lagging client of a lossless sidecar, cut off.
    pub const TRY_AGAIN_LATER: u16 = 1013;
}

/// Why the peer's bytes are not a WebSocket stream the server can take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// A frame or message over the limit.
    #[error("frame larger than max_frame ({0} bytes)")]
    TooLong(usize),
    /// A text message that is not UTF-8.
    #[error("text message that is not UTF-8")]
    NotUtf8,
    /// Anything else the protocol forbids.
    #[error("bad frame: {0}")]
    Protocol(&'static str),
}

impl Violation {
    /// The close code that tells the peer.
    pub fn close_code(&self) -> u16 {
        match self {
            Violation::TooLong(_) => close_code::TOO_BIG,
            Violation::NotUtf8 => close_code::INVALID_DATA,
            Violation::Protocol(_) => close_code::PROTOCOL,
        }
    }
}

/// Where a message's bytes are: read them with [`Reader::bytes`] or [`Reader::text`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload(Place);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// In the reader's buffer (a message of one frame, the usual case), until more bytes
    /// are added to it.
    InBuffer {
        /// The payload's place in the buffer.
        range: Range<usize>,
        /// Every byte is ASCII (found while unmasking): as text, it needs no UTF-8 check.
        ascii: bool,
        /// The reader's [`fills`](Reader::fills) when the frame was read: the bytes are
        /// the payload's while it has not changed.
        fill: u64,
    },
    /// Put together from fragments.
    Assembled(Vec<u8>),
}

/// What the peer sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    /// A data message: text (`true`) or binary, its bytes (see [`Reader::bytes`]).
    Message(bool, Payload),
    /// A ping, with its data (answered with a pong of the same data).
    Ping(Vec<u8>),
    /// A close, with the peer's code if it gave one.
    Close(Option<u16>),
}

/// The decoding half of a connection: bytes in, messages out.
#[derive(Debug)]
pub struct Reader {
    buffer: Vec<u8>,
    /// Where the next frame starts in `buffer` (everything before is consumed).
    at: usize,
    /// The largest frame and message taken.
    max: usize,
    /// A fragmented message being put together: text or binary, and its bytes so far.
    partial: Option<(bool, Vec<u8>)>,
    /// How much a read takes at most ([`READ_CHUNK`] unless told otherwise).
    chunk: usize,
    /// How many times bytes were added (each may move the ones not consumed).
    fills: u64,
}

impl Reader {
    /// A reader taking frames and messages of up to `max` bytes.
    pub fn new(max: usize) -> Reader {
        Reader {
            buffer: Vec::new(),
            at: 0,
            max,
            partial: None,
            chunk: READ_CHUNK,
            fills: 0,
        }
    }

    /// Appends bytes that arrived (the socket itself reads in place).
    pub fn push(&mut self, bytes: &[u8]) {
        self.compact();
        self.buffer.extend_from_slice(bytes);
    }

    /// Drops the consumed bytes, so the buffer holds only what is not decoded yet (before
    /// bytes are added).
    fn compact(&mut self) {
        self.fills += 1;
        if self.at > 0 {
            self.buffer.drain(..self.at);
            self.at = 0;
        }
        if self.buffer.is_empty() && self.buffer.capacity() > KEEP_BUFFER {
            self.buffer = Vec::new();
        }
    }

    /// Reads what `io` has (at least one byte, or 0 at the end of the stream) after the
    /// bytes not decoded yet. Cancel-safe: nothing is lost when the read is dropped.
    pub(crate) async fn fill_from(
        &mut self,
        io: &mut (impl AsyncRead + Unpin),
    ) -> std::io::Result<usize> {
        self.compact();
        if self.buffer.capacity() - self.buffer.len() < self.chunk / 4 {
            self.buffer.reserve(self.chunk);
        }
        io.read_buf(&mut self.buffer).await
    }

    /// Reads take up to `chunk` bytes from now on.
    pub(crate) fn read_in(&mut self, chunk: usize) {
        self.chunk = chunk;
    }

    /// The bytes of a message's payload.
    pub fn bytes<'a>(&'a self, payload: &'a Payload) -> &'a [u8] {
        match &payload.0 {
            Place::InBuffer { range, .. } => &self.buffer[range.clone()],
            Place::Assembled(bytes) => bytes,
        }
    }

    /// A message's payload as text, when it is UTF-8.
    pub fn text<'a>(&'a self, payload: &'a Payload) -> Result<&'a str, std::str::Utf8Error> {
        match &payload.0 {
            Place::InBuffer {
                range,
                ascii: true,
                fill,
            } if *fill == self.fills => {
                let bytes = &self.buffer[range.clone()];
                // SAFETY: `unmask` found every byte ASCII as it wrote them, and the bytes of a
                // frame read are not changed until bytes are added (which counts a fill), so
                // they are UTF-8. (The check would read every byte of every message again.)
                #[allow(unsafe_code)]
                Ok(unsafe { std::str::from_utf8_unchecked(bytes) })
            }
            _ => std::str::from_utf8(self.bytes(payload)),
        }
    }

    /// Whether a frame was begun and not finished (bytes are waiting for the rest).
    #[cfg(test)]
    fn is_mid_frame(&self) -> bool {
        self.at < self.buffer.len() || self.partial.is_some()
    }

    /// The next whole message or control frame in the buffer; `None` when more bytes are
    /// needed. After a violation the stream is unusable (the caller closes it).
    pub fn decode_next(&mut self) -> Result<Option<Incoming>, Violation> {
        loop {
            let Some((header, payload, ascii)) = self.frame()? else {
                return Ok(None);
            };
            let opcode = header & 0x0f;
            let fin = header & 0x80 != 0;
            match opcode {
                // Continuation.
                0x0 => {
                    let Some((text, mut bytes)) = self.partial.take() else {
                        return Err(Violation::Protocol("continuation frame without a message"));
                    };
                    if bytes.len() + payload.len() > self.max {
                        return Err(Violation::TooLong(self.max));
                    }
                    bytes.extend_from_slice(&self.buffer[payload]);
                    if fin {
                        let payload = Payload(Place::Assembled(bytes));
                        return Ok(Some(Incoming::Message(text, payload)));
                    }
                    self.partial = Some((text, bytes));
                }
                0x1 | 0x2 => {
                    if self.partial.is_some() {
                        return Err(Violation::Protocol("new message before the last one ended"));
                    }
                    let text = opcode == 0x1;
                    if fin {
                        let payload = Payload(Place::InBuffer {
                            range: payload,
                            ascii,
                            fill: self.fills,
                        });
                        return Ok(Some(Incoming::Message(text, payload)));
                    }
                    self.partial = Some((text, self.buffer[payload].to_vec()));
                }
                0x8 => return close_body(&self.buffer[payload]).map(|c| Some(Incoming::Close(c))),
                0x9 => return Ok(Some(Incoming::Ping(self.buffer[payload].to_vec()))),
                // A pong needs no answer.
                0xa => {}
                _ => return Err(Violation::Protocol("unknown opcode")),
            }
        }
    }

    /// The next whole frame: its first header byte, its payload's place in the buffer
    /// (unmasked there) and whether the payload is all ASCII; `None` when more bytes are
    /// needed.
    fn frame(&mut self) -> Result<Option<(u8, Range<usize>, bool)>, Violation> {
        let bytes = &self.buffer[self.at..];
        let [first, second, ..] = *bytes else {
            return Ok(None);
        };
        if first & 0x70 != 0 {
            return Err(Violation::Protocol("reserved bits set"));
        }
        let control = first & 0x08 != 0;
        if second & 0x80 == 0 {
            return Err(Violation::Protocol("client frame without a mask"));
        }
        let (length, mut header_len) = match second & 0x7f {
            126 => match bytes.get(2..4) {
                Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
                None => return Ok(None),
            },
            127 => match bytes.get(2..10) {
                Some(b) => (u64::from_be_bytes(b.try_into().unwrap_or_default()), 10),
                None => return Ok(None),
            },
            n => (u64::from(n), 2),
        };
        check_length(length)?;
        if control && (first & 0x80 == 0 || length > 125) {
            return Err(Violation::Protocol("fragmented or long control frame"));
        }
        let length = match usize::try_from(length) {
            Ok(n) if n <= self.max => n,
            _ => return Err(Violation::TooLong(self.max)),
        };
        let Some(mask) = bytes.get(header_len..header_len + 4) else {
            return Ok(None);
        };
        let mask: [u8; 4] = mask.try_into().unwrap_or_default();
        header_len += 4;
        let whole = header_len + length;
        if bytes.len() < whole {
            // Room for the whole frame at once. The next read drops the decoded bytes
            // before it: a buffer that can hold the frame then does not grow (and copy
            // itself) for it.
            if self.buffer.capacity() < whole {
                self.buffer.reserve(whole - bytes.len());
            }
            return Ok(None);
        }
        let start = self.at + header_len;
        let payload = start..start + length;
        let ascii = unmask(&mut self.buffer[payload.clone()], mask);
        self.at = payload.end;
        Ok(Some((first, payload, ascii)))
    }
}

/// Checks a frame's length as the header gives it (RFC 6455, 5.2): the 64-bit form has its
/// most significant bit clear. (A length in a longer form than needed is taken: the RFC
/// puts that rule on the sender, and refusing it would gain nothing.)
fn check_length(length: u64) -> Result<(), Violation> {
    if length >> 63 != 0 {
        return Err(Violation::Protocol("64-bit length with its top bit set"));
    }
    Ok(())
}

/// The code in a close frame's body (RFC 6455, 5.5.1): none, or a code a peer may send
/// followed by a UTF-8 reason. Anything else is a protocol error (7.1.6, 7.4.1), answered
/// with 1002.
fn close_body(data: &[u8]) -> Result<Option<u16>, Violation> {
    let (code, reason) = match data {
        [] => return Ok(None),
        [_] => return Err(Violation::Protocol("close frame of one byte")),
        [high, low, reason @ ..] => (u16::from_be_bytes([*high, *low]), reason),
    };
    if !may_send_close_code(code) {
        return Err(Violation::Protocol(
            "close code a peer may not send (RFC 6455, 7.4)",
        ));
    }
    if std::str::from_utf8(reason).is_err() {
        return Err(Violation::Protocol("close reason that is not UTF-8"));
    }
    Ok(Some(code))
}

/// Whether a peer may put `code` in a close frame (RFC 6455, 7.4.1-7.4.2): the codes the
/// RFC defines for endpoints to send (1000-1003, 1007-1011), the three registered with
/// IANA since (1012-1014: restart, try again later, which patchbay itself sends, and bad
/// gateway), and 3000-4999 for libraries and applications. 1004-1006 and 1015 are reserved
/// and never sent, the rest of 1000-2999 is unassigned, and nothing outside 1000-4999 is
/// used.
fn may_send_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// Removes a client's mask (XOR with the 4-byte key, repeated), eight bytes at a time;
/// returns whether every byte is then ASCII (what a text message's UTF-8 check would
/// otherwise read the bytes again for).
fn unmask(bytes: &mut [u8], mask: [u8; 4]) -> bool {
    let word = u64::from_ne_bytes([
        mask[0], mask[1], mask[2], mask[3], mask[0], mask[1], mask[2], mask[3],
    ]);
    let mut seen = 0u64;
    let mut chunks = bytes.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let value = u64::from_ne_bytes(chunk.try_into().unwrap_or_default()) ^ word;
        seen |= value;
        chunk.copy_from_slice(&value.to_ne_bytes());
    }
    for (byte, key) in chunks.into_remainder().iter_mut().zip(mask.iter().cycle()) {
        *byte ^= key;
        seen |= u64::from(*byte);
    }
    seen & 0x8080_8080_8080_8080 == 0
}

/// Appends an unmasked frame (a server's) with `opcode` and `payload` to `out`.
fn put_frame(out: &mut Vec<u8>, opcode: u8, payload: &[u8]) {
    out.push(0x80 | opcode);
    match payload.len() {
        n @ 0..=125 => out.push(n as u8),
        n @ 126..=0xffff => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
}

/// A connection after the upgrade: a [`Reader`] and a write buffer over the socket.
pub(crate) struct Socket<S> {
    io: S,
    /// What the peer sent, decoded.
    pub(crate) reader: Reader,
    write: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Socket<S> {
    /// A connection over `io` taking messages of up to `max` bytes.
    pub(crate) fn new(io: S, max: usize) -> Self {
        Socket {
            io,
            reader: Reader::new(max),
            write: Vec::new(),
        }
    }

    /// Reads what arrived (0 at the end of the stream). Cancel-safe.
    pub(crate) async fn fill(&mut self) -> std::io::Result<usize> {
        self.reader.fill_from(&mut self.io).await
    }

    /// Queues a text frame (written by [`Socket::flush`]).
    pub(crate) fn queue_text(&mut self, text: &str) {
        put_frame(&mut self.write, 0x1, text.as_bytes());
    }

    /// Queues the pong that answers a ping with `data`.
    pub(crate) fn queue_pong(&mut self, data: &[u8]) {
        put_frame(&mut self.write, 0xa, data);
    }

    /// Queues a close frame with `code` and `reason` (cut to the 123 bytes a control frame
    /// has room for, at a character boundary).
    pub(crate) fn queue_close(&mut self, code: u16, reason: &str) {
        let mut end = reason.len().min(123);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        let mut payload = Vec::with_capacity(2 + end);
        payload.extend_from_slice(&code.to_be_bytes());
        payload.extend_from_slice(&reason.as_bytes()[..end]);
        put_frame(&mut self.write, 0x8, &payload);
    }

    /// Writes everything queued.
    pub(crate) async fn flush(&mut self) -> std::io::Result<()> {
        if self.write.is_empty() {
            return Ok(());
        }
        let result = self.io.write_all(&self.write).await;
        self.write.clear();
        if self.write.capacity() > KEEP_BUFFER {
            self.write = Vec::new();
        }
        result?;
        self.io.flush().await
    }

    /// Sends a close frame and ends the connection (after what was queued).
    pub(crate) async fn close(&mut self, code: u16, reason: &str) {
        self.queue_close(code, reason);
        if self.flush().await.is_ok() {
            let _ = self.io.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's frame: masked with `key`.
    fn client_frame(first: u8, payload: &[u8], key: [u8; 4]) -> Vec<u8> {
        let mut out = vec![first];
        match payload.len() {
            n @ 0..=125 => out.push(0x80 | n as u8),
            n @ 126..=0xffff => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        out
    }

    fn text(reader: &mut Reader) -> Option<String> {
        match reader.decode_next().expect("no violation")? {
            Incoming::Message(true, payload) => {
                Some(reader.text(&payload).expect("UTF-8").to_owned())
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn messages_of_every_length_form_arrive_whole_however_the_bytes_are_split() {
        for len in [0, 1, 125, 126, 127, 1000, 65_535, 65_536, 70_000] {
            let message: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
            let frame = client_frame(0x81, message.as_bytes(), [1, 2, 3, 0xff]);
            for split in [1, 3, 7, 4096, frame.len()] {
                let mut reader = Reader::new(100_000);
                let mut got = None;
                for piece in frame.chunks(split) {
                    assert!(got.is_none());
                    reader.push(piece);
                    got = text(&mut reader);
                }
                assert_eq!(
                    got.as_deref(),
                    Some(message.as_str()),
                    "len {len} split {split}"
                );
                assert!(!reader.is_mid_frame());
            }
        }
    }

    #[test]
    fn a_message_is_text_when_it_is_utf8_whether_ascii_or_not() {
        let cases: [(&[u8], bool); 4] = [
            (b"plain ascii, longer than a word", true),
            ("h\u{e9}llo w\u{f6}rld \u{2713}".as_bytes(), true),
            (b"bad \xff byte", false),
            (b"cut \xe2\x9c", false),
        ];
        for (message, utf8) in cases {
            // In one frame, and in two fragments.
            let mut reader = Reader::new(1000);
            reader.push(&client_frame(0x81, message, [3, 1, 4, 1]));
            let mid = message.len() / 2;
            reader.push(&client_frame(0x01, &message[..mid], [5, 9, 2, 6]));
            reader.push(&client_frame(0x80, &message[mid..], [5, 3, 5, 8]));
            for _ in 0..2 {
                let Ok(Some(Incoming::Message(true, payload))) = reader.decode_next() else {
                    panic!("a text message");
                };
                let text = reader.text(&payload);
                assert_eq!(text.is_ok(), utf8, "{message:?}");
                if let Ok(text) = text {
                    assert_eq!(text.as_bytes(), message);
                }
            }
        }
    }

    #[test]
    fn a_payload_read_before_bytes_were_added_is_checked_again() {
        let mut reader = Reader::new(100);
        reader.push(&client_frame(0x81, b"abc", [1, 2, 3, 4]));
        let Ok(Some(Incoming::Message(true, payload))) = reader.decode_next() else {
            panic!("a text message");
        };
        assert_eq!(reader.text(&payload), Ok("abc"));
        // Adding bytes drops the consumed ones: the old place now holds other bytes (here
        // the next frame's payload, not ASCII), which are checked, not trusted.
        reader.push(&client_frame(0x81, &[0xc3; 8], [0, 0, 0, 0]));
        assert!(reader.text(&payload).is_err());
    }

    #[test]
    fn fragments_are_put_together_around_control_frames() {
        let mut reader = Reader::new(100);
        let mut bytes = client_frame(0x01, b"hel", [9, 8, 7, 6]);
        bytes.extend(client_frame(0x89, b"are you there", [1, 1, 1, 1]));
        bytes.extend(client_frame(0x80, b"lo", [5, 5, 5, 5]));
        bytes.extend(client_frame(0x82, &[0xff, 0x00], [0, 1, 0, 1]));
        bytes.extend(client_frame(0x88, &[0x03, 0xe8, b'o', b'k'], [2, 2, 2, 2]));
        reader.push(&bytes);
        assert_eq!(
            reader.decode_next(),
            Ok(Some(Incoming::Ping(b"are you there".to_vec())))
        );
        assert_eq!(text(&mut reader).as_deref(), Some("hello"));
        match reader.decode_next() {
            Ok(Some(Incoming::Message(false, payload))) => {
                assert_eq!(reader.bytes(&payload), [0xff, 0x00])
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(reader.decode_next(), Ok(Some(Incoming::Close(Some(1000)))));
        assert_eq!(reader.decode_next(), Ok(None));
    }

    #[test]
    fn what_the_protocol_forbids_is_a_violation() {
        let cases: &[(&[u8], Violation)] = &[
            (
                &[0x81, 0x02, b'h', b'i'],
                Violation::Protocol("client frame without a mask"),
            ),
            (
                &[0xc1, 0x80, 0, 0, 0, 0],
                Violation::Protocol("reserved bits set"),
            ),
            (
                &[0x83, 0x80, 0, 0, 0, 0],
                Violation::Protocol("unknown opcode"),
            ),
            (
                &[0x80, 0x80, 0, 0, 0, 0],
                Violation::Protocol("continuation frame without a message"),
            ),
            (
                &[0x09, 0x80, 0, 0, 0, 0],
                Violation::Protocol("fragmented or long control frame"),
            ),
            (
                &[0x89, 0xfe, 0, 126, 0, 0, 0, 0],
                Violation::Protocol("fragmented or long control frame"),
            ),
            (
                &[0x88, 0x81, 0, 0, 0, 0, 1],
                Violation::Protocol("close frame of one byte"),
            ),
            (
                &[0x81, 0xff, 0x7f, 0xff, 0, 0, 0, 0, 0, 0],
                Violation::TooLong(64),
            ),
            (
                &[0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0],
                Violation::Protocol("64-bit length with its top bit set"),
            ),
        ];
        for (bytes, violation) in cases {
            let mut reader = Reader::new(64);
            // The header alone decides: no payload bytes are waited for.
            reader.push(bytes);
            assert_eq!(reader.decode_next().as_ref(), Err(violation), "{bytes:?}");
        }
        // A message too long in fragments, each within the limit.
        let mut reader = Reader::new(64);
        reader.push(&client_frame(0x01, &[b'x'; 40], [0; 4]));
        reader.push(&client_frame(0x00, &[b'x'; 40], [0; 4]));
        assert_eq!(reader.decode_next(), Err(Violation::TooLong(64)));
        // A new message while one is in fragments.
        let mut reader = Reader::new(64);
        reader.push(&client_frame(0x01, b"a", [0; 4]));
        reader.push(&client_frame(0x81, b"b", [0; 4]));
        assert_eq!(
            reader.decode_next(),
            Err(Violation::Protocol("new message before the last one ended"))
        );
    }

    #[test]
    fn a_close_frame_is_a_code_a_peer_may_send_and_a_utf8_reason() {
        let close = |body: &[u8]| {
            let mut reader = Reader::new(64);
            reader.push(&client_frame(0x88, body, [7, 0, 7, 0]));
            reader.decode_next()
        };
        assert_eq!(close(b""), Ok(Some(Incoming::Close(None))));
        let allowed = [
            1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999,
            4000, 4999,
        ];
        for code in allowed {
            let mut body = u16::to_be_bytes(code).to_vec();
            assert_eq!(close(&body), Ok(Some(Incoming::Close(Some(code)))));
            body.extend_from_slice("fin ✓".as_bytes());
            assert_eq!(close(&body), Ok(Some(Incoming::Close(Some(code)))));
        }
        let forbidden: [u16; 13] = [
            0, 1, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535,
        ];
        for code in forbidden {
            assert_eq!(
                close(&code.to_be_bytes()),
                Err(Violation::Protocol(
                    "close code a peer may not send (RFC 6455, 7.4)"
                )),
                "{code}"
            );
        }
        assert_eq!(
            close(&[0x03]),
            Err(Violation::Protocol("close frame of one byte"))
        );
        // A reason cut inside a character, and bytes that are never UTF-8.
        for reason in [&[0xe2, 0x9c][..], &[0xff], &[b'o', b'k', 0xc0, 0xaf]] {
            let mut body = vec![0x03, 0xe8];
            body.extend_from_slice(reason);
            assert_eq!(
                close(&body),
                Err(Violation::Protocol("close reason that is not UTF-8")),
                "{reason:?}"
            );
        }
    }

    #[test]
    fn a_large_message_does_not_keep_its_buffer() {
        let mut reader = Reader::new(1 << 20);
        reader.push(&client_frame(0x82, &vec![7; 600_000], [1, 2, 3, 4]));
        assert!(matches!(
            reader.decode_next(),
            Ok(Some(Incoming::Message(false, _)))
        ));
        reader.push(&client_frame(0x81, b"small", [1, 2, 3, 4]));
        assert!(reader.buffer.capacity() <= KEEP_BUFFER);
        assert_eq!(text(&mut reader).as_deref(), Some("small"));
    }

    #[tokio::test]
    async fn a_stream_of_frames_cut_by_reads_keeps_one_chunk_of_buffer() {
        // Every read fills the buffer, so most end inside a frame: that frame waits for the
        // next read without growing the buffer (dropping the decoded bytes makes room).
        let mut stream = Vec::new();
        for i in 0..5_000 {
            let text = format!(
                "{{\"type\":\"text_delta\",\"n\":{i},\"pad\":\"{}\"}}",
                "x".repeat(i % 300)
            );
            stream.extend_from_slice(&client_frame(0x81, text.as_bytes(), [9, 8, 7, 6]));
        }
        let mut io = &stream[..];
        let mut reader = Reader::new(1 << 20);
        let mut messages = 0;
        while reader.fill_from(&mut io).await.unwrap() > 0 {
            while let Some(incoming) = reader.decode_next().unwrap() {
                assert!(matches!(incoming, Incoming::Message(true, _)));
                messages += 1;
            }
            assert!(
                reader.buffer.capacity() <= 2 * READ_CHUNK,
                "{}",
                reader.buffer.capacity()
            );
        }
        assert_eq!(messages, 5_000);
    }

    #[tokio::test]
    async fn reads_take_the_chunk_they_are_told() {
        // A burst of 200 KiB waiting: each read takes at most the chunk, and the buffer
        // holds about one chunk.
        let frame = client_frame(0x81, &[b'x'; 1000], [1, 2, 3, 4]);
        let stream: Vec<u8> = frame
            .iter()
            .copied()
            .cycle()
            .take(frame.len() * 200)
            .collect();
        for chunk in [READ_CHUNK, 4 * READ_CHUNK] {
            let mut io = &stream[..];
            let mut reader = Reader::new(1 << 20);
            reader.read_in(chunk);
            let mut largest = 0;
            loop {
                let n = reader.fill_from(&mut io).await.unwrap();
                if n == 0 {
                    break;
                }
                largest = largest.max(n);
                while reader.decode_next().unwrap().is_some() {}
            }
            assert!(
                largest >= chunk / 2 && largest <= 2 * chunk,
                "{chunk}: {largest}"
            );
            assert!(reader.buffer.capacity() <= 2 * chunk);
        }
    }

    #[tokio::test]
    async fn a_ping_is_answered_and_text_is_framed_for_the_client() {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut socket = Socket::new(server, 1024);
        client
            .write_all(&client_frame(0x89, b"are you there", [4, 3, 2, 1]))
            .await
            .unwrap();
        assert!(socket.fill().await.unwrap() > 0);
        match socket.reader.decode_next() {
            Ok(Some(Incoming::Ping(data))) => socket.queue_pong(&data),
            other => panic!("{other:?}"),
        }
        socket.queue_text("hi");
        socket.queue_close(close_code::GOING_AWAY, "bye");
        socket.flush().await.unwrap();
        let mut got = vec![0; 2 + 13 + 2 + 2 + 2 + 5];
        client.read_exact(&mut got).await.unwrap();
        let mut expected = vec![0x8a, 13];
        expected.extend_from_slice(b"are you there");
        expected.extend_from_slice(&[0x81, 2, b'h', b'i', 0x88, 5, 0x03, 0xe9]);
        expected.extend_from_slice(b"bye");
        assert_eq!(got, expected);
    }

    #[test]
    fn server_frames_use_the_shortest_length() {
        for (len, header) in [(0, 2), (125, 2), (126, 4), (65_535, 4), (65_536, 10)] {
            let mut out = Vec::new();
            put_frame(&mut out, 0x1, &vec![b'a'; len]);
            assert_eq!(out.len(), header + len);
            assert_eq!(out[0], 0x81);
        }
    }

    #[test]
    fn unmasking_matches_the_definition_at_every_length() {
        let key = [0x12, 0x34, 0x56, 0x78];
        for len in 0..40 {
            let plain: Vec<u8> = (0..len as u8).collect();
            let mut bytes: Vec<u8> = plain
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ key[i % 4])
                .collect();
            assert!(unmask(&mut bytes, key));
            assert_eq!(bytes, plain);
            // A byte beyond ASCII anywhere, in a whole word or in the rest, is seen.
            for at in 0..len {
                let mut bytes = plain.clone();
                bytes[at] = 0xc3;
                let mut masked: Vec<u8> = bytes
                    .iter()
                    .enumerate()
                    .map(|(i, b)| b ^ key[i % 4])
                    .collect();
                assert!(!unmask(&mut masked, key), "len {len}, at {at}");
                assert_eq!(masked, bytes);
            }
        }
    }
}
