//! The event-stream parser of the HTML standard ("9.2.6 Interpreting an event stream"),
//! incremental over bytes split anywhere.

use std::borrow::Cow;

/// The default longest line (a field, `data:` included), in bytes: 1 MiB.
pub const DEFAULT_MAX_LINE: usize = 1 << 20;
/// The default largest event (its `data` lines joined), in bytes: 4 MiB.
pub const DEFAULT_MAX_EVENT: usize = 4 << 20;

/// The UTF-8 byte order mark, ignored once at the start of a stream.
const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// One dispatched server-sent event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field; `None` when absent or empty, which the standard reads as
    /// `"message"` (see [`SseEvent::event_type`]).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n` (no trailing newline).
    pub data: String,
    /// The last event ID in force when this event was dispatched (the standard's
    /// `lastEventId`: it carries over from earlier events until an `id:` field changes it;
    /// an empty `id:` resets it to `None`).
    pub id: Option<String>,
    /// The `retry:` value given in this event's block, if any (milliseconds).
    pub retry: Option<u64>,
}

impl SseEvent {
    /// The event type: the `event:` field, or `"message"` when there was none.
    pub fn event_type(&self) -> &str {
        self.event.as_deref().unwrap_or("message")
    }
}

/// A dispatched event borrowed from the parser's buffers (see [`SseParser::feed_ref`]);
/// the fields mean what they mean in [`SseEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEventRef<'a> {
    /// The `event:` field; `None` when absent or empty (`"message"`).
    pub event: Option<&'a str>,
    /// The `data:` lines joined with `\n`.
    pub data: &'a str,
    /// The last event ID in force.
    pub id: Option<&'a str>,
    /// The `retry:` value given in this event's block.
    pub retry: Option<u64>,
}

impl SseEventRef<'_> {
    /// The event type: the `event:` field, or `"message"` when there was none.
    pub fn event_type(&self) -> &str {
        self.event.unwrap_or("message")
    }

    /// An owned copy.
    pub fn to_event(&self) -> SseEvent {
        SseEvent {
            event: self.event.map(str::to_owned),
            data: self.data.to_owned(),
            id: self.id.map(str::to_owned),
            retry: self.retry,
        }
    }
}

/// An incremental SSE parser: feed bytes as they arrive (split at any byte, even inside a
/// CRLF or a UTF-8 character), get the events whose blank line has arrived.
///
/// Follows the HTML standard, with one deliberate difference: [`SseParser::finish`]
/// dispatches a last event that the stream cut off before its blank line, because what
/// arrived must not be thrown away.
///
/// Memory is bounded: a line longer than its `max_line` is dropped (up to its end), and so
/// is the event it belongs to; an event whose data grows past `max_event` is dropped.
/// Either is reported by [`SseParser::take_overflow`].
#[derive(Debug, Clone)]
pub struct SseParser {
    /// The longest line kept, in bytes.
    max_line: usize,
    /// The largest event data kept, in bytes.
    max_event: usize,
    /// A line or an event was dropped for its size since the last `take_overflow`.
    overflow: bool,
    /// Dropping the rest of a line that passed `max_line`.
    skipping: bool,
    /// Dropping the event in progress (up to its blank line).
    dropping_event: bool,
    /// Bytes of the current line, when it spans several `feed` calls.
    line: Vec<u8>,
    /// The previous chunk ended with CR: a LF starting the next chunk belongs to it.
    after_cr: bool,
    /// How many bytes of a possible leading BOM have been seen.
    bom_seen: usize,
    /// Whether the start of the stream (and its possible BOM) is behind us.
    started: bool,
    /// The data buffer: each `data:` value followed by `\n`.
    data: String,
    /// The event type buffer.
    event_type: String,
    /// The last event ID buffer (persists across events).
    last_event_id: String,
    /// `retry:` given in the current block.
    block_retry: Option<u64>,
    /// The reconnection time in force.
    retry: Option<u64>,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_limits(DEFAULT_MAX_LINE, DEFAULT_MAX_EVENT)
    }
}

impl SseParser {
    /// A parser at the start of a stream, with the default limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser whose lines are at most `max_line` bytes and events at most `max_event`.
    pub fn with_limits(max_line: usize, max_event: usize) -> Self {
        SseParser {
            max_line,
            max_event,
            overflow: false,
            skipping: false,
            dropping_event: false,
            line: Vec::new(),
            after_cr: false,
            bom_seen: 0,
            started: false,
            data: String::new(),
            event_type: String::new(),
            last_event_id: String::new(),
            block_retry: None,
            retry: None,
        }
    }

    /// Whether a line or an event was dropped for its size since the last call (and
    /// clears the flag).
    pub fn take_overflow(&mut self) -> bool {
        std::mem::take(&mut self.overflow)
    }

    /// Drops the event in progress for its size.
    fn overflowed(&mut self) {
        self.overflow = true;
        self.dropping_event = true;
        self.data.clear();
        self.data.shrink_to(64);
        self.event_type.clear();
    }

    /// Feeds bytes and returns the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        self.feed_ref(bytes, |e| events.push(e.to_event()));
        events
    }

    /// Feeds bytes, calling `on_event` for each event they complete (no intermediate
    /// vector).
    pub fn feed_with(&mut self, bytes: &[u8], mut on_event: impl FnMut(SseEvent)) {
        self.feed_ref(bytes, |e| on_event(e.to_event()));
    }

    /// Feeds bytes, calling `on_event` with each event they complete, borrowed from the
    /// parser's buffers: no allocation per event.
    pub fn feed_ref(&mut self, bytes: &[u8], mut on_event: impl FnMut(SseEventRef<'_>)) {
        let mut rest = self.skip_bom(bytes);
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if let Some((b'\n', tail)) = rest.split_first() {
                rest = tail;
            }
        }
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', rest) {
            let (line, terminator) = (&rest[..pos], rest[pos]);
            rest = &rest[pos + 1..];
            if std::mem::take(&mut self.skipping) {
                // The end of a line already dropped.
            } else if self.line.len() + line.len() > self.max_line {
                self.line.clear();
                self.overflowed();
            } else if self.line.is_empty() {
                self.process_line(line, &mut on_event);
            } else {
                let mut joined = std::mem::take(&mut self.line);
                joined.extend_from_slice(line);
                self.process_line(&joined, &mut on_event);
                joined.clear();
                self.line = joined; // keep the allocation
            }
            if terminator == b'\r' {
                match rest.split_first() {
                    Some((b'\n', tail)) => rest = tail,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        if self.skipping {
            return;
        }
        if self.line.len() + rest.len() > self.max_line {
            self.line = Vec::new();
            self.skipping = true;
            self.overflowed();
            return;
        }
        self.line.extend_from_slice(rest);
    }

    /// The stream ended: processes a last line without terminator and dispatches the
    /// event in progress, if it has data. The parser is then ready for a new stream (a
    /// reconnection), keeping the last event ID and the retry time.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        self.finish_ref(|e| events.push(e.to_event()));
        events
    }

    /// [`SseParser::finish`], calling `on_event` instead of returning a vector.
    pub fn finish_with(&mut self, mut on_event: impl FnMut(SseEvent)) {
        self.finish_ref(|e| on_event(e.to_event()));
    }

    /// [`SseParser::finish`], calling `on_event` with borrowed events.
    pub fn finish_ref(&mut self, mut on_event: impl FnMut(SseEventRef<'_>)) {
        if !self.started {
            // A stream that ended inside what looked like a BOM: those bytes were content.
            let seen = self.bom_seen;
            self.line
                .extend_from_slice(BOM.get(..seen).unwrap_or_default());
        }
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, &mut on_event);
        }
        self.dispatch(&mut on_event);
        self.skipping = false;
        self.after_cr = false;
        self.started = false;
        self.bom_seen = 0;
    }

    /// The last event ID, to send as `Last-Event-ID` when reconnecting.
    pub fn last_event_id(&self) -> Option<&str> {
        (!self.last_event_id.is_empty()).then_some(self.last_event_id.as_str())
    }

    /// The reconnection time the server asked for with `retry:`, in milliseconds.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// Removes a BOM at the very start of the stream, even split across calls.
    fn skip_bom<'a>(&mut self, bytes: &'a [u8]) -> &'a [u8] {
        if self.started {
            return bytes;
        }
        let mut rest = bytes;
        while let Some((&b, tail)) = rest.split_first() {
            if BOM.get(self.bom_seen) == Some(&b) {
                self.bom_seen += 1;
                rest = tail;
                if self.bom_seen == BOM.len() {
                    self.started = true;
                    return rest;
                }
            } else {
                // Not a BOM: the bytes taken for one are content.
                self.started = true;
                let seen = self.bom_seen;
                self.line
                    .extend_from_slice(BOM.get(..seen).unwrap_or_default());
                return rest;
            }
        }
        rest
    }

    fn process_line(&mut self, line: &[u8], on_event: &mut impl FnMut(SseEventRef<'_>)) {
        let (name, value) = match memchr::memchr(b':', line) {
            None if line.is_empty() => return self.dispatch(on_event),
            None => (line, &[][..]),
            Some(0) => return, // a comment
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
        };
        match name {
            b"data" if self.dropping_event => {}
            b"data" => {
                // Counted as kept: a byte that is not UTF-8 becomes a 3-byte U+FFFD.
                let value = text(value);
                if self.data.len() + value.len() + 1 > self.max_event {
                    self.overflowed();
                } else {
                    self.data.push_str(&value);
                    self.data.push('\n');
                }
            }
            b"event" => {
                self.event_type.clear();
                self.event_type.push_str(&text(value));
            }
            b"id" if !value.contains(&0) => {
                self.last_event_id.clear();
                self.last_event_id.push_str(&text(value));
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Digits only, so parsing fails only on overflow: saturate.
                let millis = text(value).parse::<u64>().unwrap_or(u64::MAX);
                self.retry = Some(millis);
                self.block_retry = Some(millis);
            }
            _ => {} // unknown fields are ignored, as the standard says
        }
    }

    fn dispatch(&mut self, on_event: &mut impl FnMut(SseEventRef<'_>)) {
        let retry = self.block_retry.take();
        if std::mem::take(&mut self.dropping_event) || self.data.is_empty() {
            self.data.clear();
            self.event_type.clear();
            return;
        }
        if self.data.ends_with('\n') {
            self.data.pop();
        }
        on_event(SseEventRef {
            event: (!self.event_type.is_empty()).then_some(self.event_type.as_str()),
            data: &self.data,
            id: (!self.last_event_id.is_empty()).then_some(self.last_event_id.as_str()),
            retry,
        });
        // Cleared, not dropped: the buffers are reused by the next event.
        self.data.clear();
        self.event_type.clear();
    }
}

/// Bytes as text, invalid UTF-8 replaced (the strict check is the fast path).
fn text(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &[u8]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut events = p.feed(input);
        events.extend(p.finish());
        events
    }

    fn ev(event: Option<&str>, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
            id: id.map(str::to_owned),
            retry: None,
        }
    }

    #[test]
    fn an_endless_line_is_dropped_with_its_event_and_memory_stays_bounded() {
        let mut p = SseParser::with_limits(16, 32);
        let mut events = p.feed(b"data: ok\n\ndata: ");
        for _ in 0..10_000 {
            events.extend(p.feed(&[b'x'; 1000]));
            assert!(p.line.capacity() <= 1024, "{}", p.line.capacity());
        }
        assert!(p.take_overflow());
        assert!(!p.take_overflow(), "reported once per take");
        events.extend(p.feed(b"xx\ndata: more\n\ndata: next\n\n"));
        // The event of the long line is dropped, the next one comes through.
        assert_eq!(events, [ev(None, "ok", None), ev(None, "next", None)]);
        // Data lines under the line limit that add up past the event limit.
        let mut p = SseParser::with_limits(16, 32);
        let lines = b"data: 0123456789\n".repeat(5);
        assert!(p.feed(&lines).is_empty());
        assert!(p.take_overflow());
        assert_eq!(p.feed(b"\ndata: y\n\n"), [ev(None, "y", None)]);
        // Bytes that are not UTF-8 count as what they become (found by fuzzing: an event
        // of 263 bytes out of a parser limited to 256).
        let mut p = SseParser::with_limits(16, 32);
        assert!(
            p.feed(b"data:\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\n\n")
                .is_empty()
        );
        assert!(p.take_overflow());
        let events = p.feed(b"data:\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\n\n");
        assert_eq!(events, [ev(None, &"\u{fffd}".repeat(10), None)]);
    }

    #[test]
    fn fields_and_multiline_data() {
        let events = parse_all(b"event: add\ndata: a\ndata:b\ndata\nid: 7\n\ndata: x\n\n");
        assert_eq!(
            events,
            [
                ev(Some("add"), "a\nb\n", Some("7")),
                ev(None, "x", Some("7"))
            ]
        );
        assert_eq!(events[1].event_type(), "message");
    }

    #[test]
    fn only_one_leading_space_is_removed() {
        assert_eq!(parse_all(b"data:  two\n\n")[0].data, " two");
        assert_eq!(parse_all(b"data:none\n\n")[0].data, "none");
        assert_eq!(parse_all(b"data: a:b\n\n")[0].data, "a:b");
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        let events = parse_all(b": hello\nfoo: bar\ndata: x\n:\n\n");
        assert_eq!(events, [ev(None, "x", None)]);
    }

    #[test]
    fn empty_data_line_dispatches_an_empty_event() {
        assert_eq!(parse_all(b"data\n\n"), [ev(None, "", None)]);
        assert_eq!(parse_all(b"data:\n\n"), [ev(None, "", None)]);
    }

    #[test]
    fn blocks_without_data_dispatch_nothing_but_set_id_and_retry() {
        let mut p = SseParser::new();
        assert!(p.feed(b"event: x\nid: 5\nretry: 1500\n\n").is_empty());
        assert_eq!(p.last_event_id(), Some("5"));
        assert_eq!(p.retry(), Some(1500));
        // The event type does not leak into the next event.
        assert_eq!(p.feed(b"data: y\n\n"), [ev(None, "y", Some("5"))]);
    }

    #[test]
    fn id_with_nul_is_ignored_and_empty_id_resets() {
        let mut p = SseParser::new();
        p.feed(b"id: 1\n\nid: a\0b\n\n");
        assert_eq!(p.last_event_id(), Some("1"));
        let events = p.feed(b"id\ndata: z\n\n");
        assert_eq!(p.last_event_id(), None);
        assert_eq!(events[0].id, None);
    }

    #[test]
    fn retry_must_be_digits() {
        let mut p = SseParser::new();
        p.feed(b"retry: 10a\nretry: -1\nretry:\nretry: 1 0\n\n");
        assert_eq!(p.retry(), None);
        let events = p.feed(b"retry: 3000\ndata: d\n\n");
        assert_eq!(events[0].retry, Some(3000));
        assert_eq!(p.retry(), Some(3000));
        assert_eq!(p.feed(b"data: e\n\n")[0].retry, None);
        p.feed(b"retry: 99999999999999999999999\n\n");
        assert_eq!(p.retry(), Some(u64::MAX));
    }

    #[test]
    fn crlf_lf_and_cr_line_endings() {
        let expected = [ev(Some("e"), "a\nb", None), ev(None, "c", None)];
        for input in [
            &b"event: e\r\ndata: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n"[..],
            b"event: e\ndata: a\ndata: b\n\ndata: c\n\n",
            b"event: e\rdata: a\rdata: b\r\rdata: c\r\r",
            b"event: e\r\ndata: a\rdata: b\n\r\ndata: c\r\r",
        ] {
            assert_eq!(
                parse_all(input),
                expected,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn split_anywhere_gives_the_same_events() {
        let input = "\u{feff}event: é\r\ndata: naïve ☃\r\nid: 𝄞\r\n\r\ndata: b\rdata: c\r\r: c\ndata: d\n\ndata: last".as_bytes();
        let whole = parse_all(input);
        assert_eq!(whole.len(), 4);
        assert_eq!(whole[0], ev(Some("é"), "naïve ☃", Some("𝄞")));
        assert_eq!(whole[3].data, "last");
        for size in 1..input.len() {
            let mut p = SseParser::new();
            let mut events = Vec::new();
            for chunk in input.chunks(size) {
                events.extend(p.feed(chunk));
            }
            events.extend(p.finish());
            assert_eq!(events, whole, "chunk size {size}");
        }
        for cut in 0..input.len() {
            let mut p = SseParser::new();
            let mut events = p.feed(&input[..cut]);
            events.extend(p.feed(&input[cut..]));
            events.extend(p.finish());
            assert_eq!(events, whole, "cut at {cut}");
        }
    }

    #[test]
    fn bom_is_removed_only_at_the_start() {
        assert_eq!(parse_all(b"\xEF\xBB\xBFdata: x\n\n"), [ev(None, "x", None)]);
        // A BOM later is part of a field name, so the line is an unknown field.
        assert!(parse_all(b"\n\xEF\xBB\xBFdata: x\n\n").is_empty());
        // Only one BOM is removed.
        assert!(parse_all(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n").is_empty());
        // Something that starts like a BOM but is not one is content.
        let events = parse_all(b"\xEF\xBBdata: x\n\n");
        assert!(events.is_empty(), "{events:?}");
        let mut p = SseParser::new();
        p.feed(b"\xEF");
        assert_eq!(p.feed(b"\xBB\xBFdata: y\n\n"), [ev(None, "y", None)]);
    }

    #[test]
    fn cut_off_last_event_is_dispatched_on_finish() {
        let mut p = SseParser::new();
        assert!(p.feed(b"event: end\ndata: tail").is_empty());
        assert_eq!(p.finish(), [ev(Some("end"), "tail", None)]);
        let mut p = SseParser::new();
        assert!(p.feed(b"data: tail\n").is_empty());
        assert_eq!(p.finish(), [ev(None, "tail", None)]);
        // Nothing pending: nothing dispatched.
        let mut p = SseParser::new();
        p.feed(b"data: a\n\n");
        assert!(p.finish().is_empty());
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let events = parse_all(b"data: a\xFFb\n\n");
        assert_eq!(events[0].data, "a\u{FFFD}b");
    }

    #[test]
    fn state_after_finish_allows_a_new_stream() {
        let mut p = SseParser::new();
        p.feed(b"id: 9\nretry: 5\ndata: a\n\n");
        p.finish();
        assert_eq!(
            p.feed(b"\xEF\xBB\xBFdata: b\n\n"),
            [ev(None, "b", Some("9"))]
        );
        assert_eq!(p.retry(), Some(5));
    }
}
