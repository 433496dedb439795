//! The interface every protocol decoder offers, so that `patchbay parse` and the
//! transports can drive any of them the same way.

use serde_json::Value;

use crate::normalize::{Decoded, Normalizer, RAW_KEEP};

/// A pure, incremental decoder: bytes in (split anywhere), signals out. No I/O.
pub trait StreamDecoder: Send {
    /// Feeds the next bytes of the stream; complete units (lines, events, frames) are
    /// decoded into `out`, partial ones are kept for the next call.
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>);

    /// The stream ended: decodes what is still buffered (a last line or event without its
    /// terminator is not thrown away) and emits anything held back.
    fn finish(&mut self, out: &mut Vec<Decoded>);
}

/// The longest line a decoder of a line-delimited protocol accepts where no option sets
/// it (frame protocols read as NDJSON, Codelia's stdio, `patchbay parse`): 16 MiB. A
/// longer one is reported and skipped.
pub const DEFAULT_MAX_LINE: usize = 16 << 20;

/// Bytes as lowercase hex pairs separated by spaces (`90 3c 64`): how a binary decoder
/// shows the bytes of a message in a signal, and the text `patchbay parse` reads back.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 3);
    for (i, byte) in bytes.iter().enumerate() {
        if i > 0 {
            text.push(' ');
        }
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    text
}

/// A producer's `snake_case` key as patchbay's payloads and metadata name keys,
/// lowerCamelCase (`cached_input_tokens` → `cachedInputTokens`).
pub fn camel_case(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Splits a byte stream into lines (`\n`, with an optional `\r` before it) of at most
/// `max` bytes, keeping a partial last line until more bytes or the end arrive. A longer
/// line is reported once, as soon as it passes the limit (its newline may be far away),
/// and skipped up to its end: at most `max` bytes are ever kept, whatever the input.
#[derive(Debug, Clone)]
pub struct LineSplitter {
    max: usize,
    pending: Vec<u8>,
    /// Dropping the rest of a line already reported as too long.
    skipping: bool,
}

impl LineSplitter {
    /// A splitter of lines up to `max` bytes.
    pub fn new(max: usize) -> Self {
        LineSplitter {
            max,
            pending: Vec::new(),
            skipping: false,
        }
    }

    /// The longest line passed whole.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Feeds bytes; calls `line` with each complete line (without its terminator, lossily
    /// decoded as UTF-8), and with `Err(first bytes)` once for each line over the limit.
    pub fn feed(&mut self, bytes: &[u8], mut line: impl FnMut(Result<&str, &str>)) {
        let mut rest = bytes;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            let segment = &rest[..pos];
            rest = &rest[pos + 1..];
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            // A `\r` before the newline is not part of the line (nor of its length).
            let segment = match segment.split_last() {
                Some((b'\r', head)) => head,
                _ if segment.is_empty() && self.pending.last() == Some(&b'\r') => {
                    self.pending.pop();
                    segment
                }
                _ => segment,
            };
            if self.pending.len() + segment.len() > self.max {
                self.report(segment, &mut line);
            } else if self.pending.is_empty() {
                line(Ok(&String::from_utf8_lossy(segment)));
            } else {
                self.pending.extend_from_slice(segment);
                line(Ok(&String::from_utf8_lossy(&self.pending)));
                self.pending.clear();
            }
        }
        if self.skipping || rest.is_empty() {
            return;
        }
        // One byte of slack: a `\r` ending a line of exactly `max` bytes may arrive
        // before its `\n`.
        if self.pending.len() + rest.len() > self.max + 1 {
            self.report(rest, &mut line);
            self.skipping = true;
        } else {
            self.pending.extend_from_slice(rest);
        }
    }

    /// Ends the stream: passes a last line that had no terminator.
    pub fn finish(&mut self, mut line: impl FnMut(Result<&str, &str>)) {
        let skipping = std::mem::take(&mut self.skipping);
        let mut pending = std::mem::take(&mut self.pending);
        if pending.last() == Some(&b'\r') {
            pending.pop();
        }
        if skipping || pending.is_empty() {
            return;
        }
        if pending.len() > self.max {
            pending.truncate(RAW_KEEP);
            line(Err(&head_of(&pending)));
        } else {
            line(Ok(&String::from_utf8_lossy(&pending)));
        }
    }

    /// Reports the line made of what is pending and `more` as too long, and forgets it.
    fn report(&mut self, more: &[u8], line: &mut impl FnMut(Result<&str, &str>)) {
        let keep = RAW_KEEP.saturating_sub(self.pending.len()).min(more.len());
        self.pending.truncate(RAW_KEEP);
        self.pending.extend_from_slice(&more[..keep]);
        line(Err(&head_of(&self.pending)));
        // Give back the memory a long partial line took.
        self.pending = Vec::new();
    }
}

/// How a line too long is quoted: its first [`RAW_KEEP`] bytes as text.
fn head_of(bytes: &[u8]) -> String {
    crate::truncate(&String::from_utf8_lossy(bytes), RAW_KEEP)
}

/// The message of the `error` signal for a line longer than `max` bytes.
pub fn line_too_long(max: usize) -> String {
    format!("a line longer than {max} bytes: skipped up to its end")
}

/// Splits a byte stream into JSON texts, one per line as in NDJSON, but also a value
/// written over several lines (a pretty-printed capture): a line that opens a JSON value
/// without finishing it is joined with the next lines until the value is complete. A
/// line that is not JSON at all is passed on as it is (the decoder reports it), and a
/// value still open after `max` bytes is passed as `Err(first bytes)`.
#[derive(Debug, Clone)]
pub struct JsonTexts {
    lines: LineSplitter,
    partial: String,
}

impl JsonTexts {
    /// A splitter of texts up to `max` bytes.
    pub fn new(max: usize) -> Self {
        JsonTexts {
            lines: LineSplitter::new(max),
            partial: String::new(),
        }
    }

    /// Feeds bytes; calls `text` with each complete JSON text (or line).
    pub fn feed(&mut self, bytes: &[u8], mut text: impl FnMut(Result<&str, &str>)) {
        let (partial, max) = (&mut self.partial, self.lines.max());
        self.lines
            .feed(bytes, |line| join_line(partial, max, line, &mut text));
    }

    /// Ends the stream: passes what is left, finished or not.
    pub fn finish(&mut self, mut text: impl FnMut(Result<&str, &str>)) {
        let (partial, max) = (&mut self.partial, self.lines.max());
        self.lines
            .finish(|line| join_line(partial, max, line, &mut text));
        if !self.partial.is_empty() {
            text(Ok(&std::mem::take(&mut self.partial)));
        }
    }
}

/// Adds one line to the JSON text being joined in `partial`; passes on what is complete.
fn join_line(
    partial: &mut String,
    max: usize,
    line: Result<&str, &str>,
    text: &mut impl FnMut(Result<&str, &str>),
) {
    let line = match line {
        Ok(line) => line,
        Err(cut) => {
            partial.clear();
            return text(Err(cut));
        }
    };
    if partial.is_empty() {
        let opens = line.trim_start().starts_with(['{', '[']);
        if opens && is_unfinished(line) {
            partial.push_str(line);
        } else {
            text(Ok(line));
        }
        return;
    }
    partial.push('\n');
    partial.push_str(line);
    if partial.len() > max {
        let cut = crate::truncate(&std::mem::take(partial), RAW_KEEP);
        text(Err(&cut));
    } else if !is_unfinished(partial) {
        text(Ok(&std::mem::take(partial)));
    }
}

/// Whether `text` is the beginning of a JSON value that more text could complete.
fn is_unfinished(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text).is_err_and(|e| e.is_eof())
}

/// NDJSON of generic envelopes, or sajou scenario lines decoded as their signal
/// (`patchbay parse --protocol sajou`, the `stdin` and `file` sources). A line longer than
/// its limit is one `error` signal (`code: "bad_frame"`), and reading goes on at the next
/// line.
#[derive(Debug, Clone)]
pub struct NdjsonDecoder {
    lines: LineSplitter,
    normalizer: Normalizer,
}

impl NdjsonDecoder {
    /// A decoder whose signals default to `source`, refusing lines over `max_line` bytes.
    pub fn new(source: impl Into<crate::SmallString>, max_line: usize) -> Self {
        NdjsonDecoder {
            lines: LineSplitter::new(max_line),
            normalizer: Normalizer::new(source),
        }
    }
}

impl StreamDecoder for NdjsonDecoder {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let (normalizer, max) = (&mut self.normalizer, self.lines.max());
        self.lines
            .feed(bytes, |line| push_line(normalizer, max, line, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let (normalizer, max) = (&mut self.normalizer, self.lines.max());
        self.lines
            .finish(|line| push_line(normalizer, max, line, out));
    }
}

fn push_line(
    normalizer: &mut Normalizer,
    max: usize,
    line: Result<&str, &str>,
    out: &mut Vec<Decoded>,
) {
    match line {
        Ok(text) => out.extend(decode_line(normalizer, text)),
        Err(head) => out.push(Decoded::BadInput(
            normalizer.bad_input(head, &line_too_long(max)),
        )),
    }
}

/// Decodes one NDJSON line: an envelope, or a sajou emitter scenario line
/// `{"delayMs": N, "signal": {…}}`, whose signal is decoded as it is.
pub fn decode_line(normalizer: &mut Normalizer, text: &str) -> Option<Decoded> {
    let decoded = normalizer.decode_text(text)?;
    Some(match decoded {
        Decoded::Signal(s) if s.kind == "event" && is_scenario_line(&s.payload) => {
            let mut payload = s.payload;
            let signal = payload.remove("signal").unwrap_or(Value::Null);
            normalizer.from_value(signal)
        }
        other => other,
    })
}

/// Whether an object is a sajou emitter scenario line (`delayMs` and a `signal` object).
pub fn is_scenario_line(object: &crate::Object) -> bool {
    object.len() == 2
        && object.get("delayMs").is_some_and(Value::is_number)
        && object.get("signal").is_some_and(Value::is_object)
}

/// A decoder of single frames (JSON values) of a frame protocol (OpenClaw, Escapement,
/// Codelia), which [`FrameLines`] drives over NDJSON.
pub trait FrameDecoder: Send {
    /// Decodes one frame the peer sent; `recorded_t` is the time of a recording line, the
    /// fallback timestamp when the frame has none.
    fn decode_frame(&mut self, frame: Value, recorded_t: Option<i64>, out: &mut Vec<Decoded>);

    /// The `error` signal reporting an unusable line.
    fn bad_line(&self, raw: &str, message: &str) -> Decoded;

    /// Decodes one text frame (a WebSocket message, an NDJSON line): blank text is
    /// skipped, text that is not JSON is reported as bad input.
    fn decode_text(&mut self, text: &str, out: &mut Vec<Decoded>) {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return;
        }
        match serde_json::from_str::<Value>(trimmed) {
            Ok(value) => self.decode_frame(value, None, out),
            Err(err) => out.push(self.bad_line(trimmed, &format!("not JSON: {err}"))),
        }
    }
}

/// The byte-stream form of a [`FrameDecoder`]: NDJSON lines, each a bare frame or a
/// recorded line `{"t","dir","frame"|"msg"}` (only `dir: "in"` is decoded, with `t` as the
/// fallback timestamp).
#[derive(Debug, Clone)]
pub struct FrameLines<D> {
    lines: LineSplitter,
    decoder: D,
}

impl<D: FrameDecoder> FrameLines<D> {
    /// Drives `decoder` over NDJSON, lines up to [`DEFAULT_MAX_LINE`].
    pub fn new(decoder: D) -> Self {
        FrameLines {
            lines: LineSplitter::new(DEFAULT_MAX_LINE),
            decoder,
        }
    }

    /// The frame decoder inside.
    pub fn decoder(&self) -> &D {
        &self.decoder
    }

    /// The frame decoder inside, mutably.
    pub fn decoder_mut(&mut self) -> &mut D {
        &mut self.decoder
    }
}

fn decode_frame_line<D: FrameDecoder>(
    decoder: &mut D,
    line: Result<&str, &str>,
    out: &mut Vec<Decoded>,
) {
    let text = match line {
        Ok(text) => text.trim(),
        Err(head) => {
            out.push(decoder.bad_line(head, &line_too_long(DEFAULT_MAX_LINE)));
            return;
        }
    };
    if text.is_empty() {
        return;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(value) => match recorded_line(value) {
            RecordedLine::Bare(frame) => decoder.decode_frame(frame, None, out),
            RecordedLine::Incoming { t, frame } => decoder.decode_frame(frame, t, out),
            RecordedLine::Other => {}
        },
        Err(err) => out.push(decoder.bad_line(text, &format!("not JSON: {err}"))),
    }
}

impl<D: FrameDecoder> StreamDecoder for FrameLines<D> {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let decoder = &mut self.decoder;
        self.lines
            .feed(bytes, |line| decode_frame_line(decoder, line, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let decoder = &mut self.decoder;
        self.lines
            .finish(|line| decode_frame_line(decoder, line, out));
    }
}

/// One line of a recorded session, as patchbay's captures store them:
/// `{"t": ms, "dir": "in"|"out", "frame"|"msg": …}`, or a bare frame.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordedLine {
    /// A bare frame (not wrapped).
    Bare(Value),
    /// A frame the peer sent to patchbay (`dir: "in"`), with its recorded time.
    Incoming {
        /// The recorded time `t`, if any.
        t: Option<i64>,
        /// The frame.
        frame: Value,
    },
    /// A line to skip: something patchbay sent (`out`), stderr or a note.
    Other,
}

/// Classifies one JSON line of a recording: wrapped lines (`t`, `dir`, `frame`|`msg`) give
/// their frame when `dir` is `in`; any other JSON is a bare frame.
pub fn recorded_line(value: Value) -> RecordedLine {
    let is_wrapped = value.get("dir").is_some_and(Value::is_string)
        && (value.get("frame").is_some() || value.get("msg").is_some());
    if !is_wrapped {
        return RecordedLine::Bare(value);
    }
    let Value::Object(mut obj) = value else {
        return RecordedLine::Other;
    };
    if obj.get("dir").and_then(Value::as_str) != Some("in") {
        return RecordedLine::Other;
    }
    let t = obj.get("t").and_then(Value::as_i64);
    let frame = obj
        .remove("frame")
        .or_else(|| obj.remove("msg"))
        .unwrap_or(Value::Null);
    RecordedLine::Incoming { t, frame }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_case_of_producers_keys() {
        assert_eq!(camel_case("cached_input_tokens"), "cachedInputTokens");
        assert_eq!(camel_case("duration_ms"), "durationMs");
        assert_eq!(camel_case("already"), "already");
    }
    use serde_json::json;

    #[test]
    fn hex_is_spaced_lowercase() {
        assert_eq!(to_hex(&[0x90, 0x3c, 0x0a, 0xff]), "90 3c 0a ff");
        assert_eq!(to_hex(&[0x2f]), "2f");
        assert_eq!(to_hex(&[]), "");
    }

    #[test]
    fn lines_split_anywhere_and_last_line_is_kept() {
        let mut d = NdjsonDecoder::new("parse:sajou", 1024);
        let mut out = Vec::new();
        let text = b"{\"type\":\"a\"}\r\n\n{\"type\":\"b\"}\n{\"type\":\"c\"}";
        for chunk in text.chunks(3) {
            d.feed(chunk, &mut out);
        }
        assert_eq!(out.len(), 2);
        d.finish(&mut out);
        let kinds: Vec<_> = out.into_iter().map(|d| d.into_signal().kind).collect();
        assert_eq!(kinds, ["a", "b", "c"]);
    }

    #[test]
    fn scenario_lines_unwrap_to_their_signal() {
        let mut d = NdjsonDecoder::new("parse:sajou", 1024);
        let mut out = Vec::new();
        d.feed(br#"{"delayMs":80,"signal":{"id":"sig-1","type":"x","timestamp":0,"source":"adapter:emitter","payload":{}}}"#, &mut out);
        d.finish(&mut out);
        let s = out.pop().unwrap().into_signal();
        assert_eq!(
            (s.id.as_str(), s.kind.as_str(), s.timestamp),
            ("sig-1", "x", 0)
        );
        assert_eq!(s.source, "adapter:emitter");
    }

    #[test]
    fn recorded_lines() {
        assert_eq!(
            recorded_line(json!({"t": 1, "dir": "in", "frame": {"x": 1}})),
            RecordedLine::Incoming {
                t: Some(1),
                frame: json!({"x": 1})
            }
        );
        assert_eq!(
            recorded_line(json!({"t": 1, "dir": "out", "msg": {}})),
            RecordedLine::Other
        );
        assert_eq!(
            recorded_line(json!({"kind": "event"})),
            RecordedLine::Bare(json!({"kind": "event"}))
        );
    }

    #[test]
    fn json_texts_join_a_pretty_printed_value_and_pass_lines_as_they_are() {
        let input = "{\"a\": 1}\n{\n  \"b\": [\n    1\n  ]\n}\nnot json\n{\"c\":\n";
        for split in [1, 3, input.len()] {
            let mut texts = JsonTexts::new(1024);
            let mut got: Vec<String> = Vec::new();
            for chunk in input.as_bytes().chunks(split) {
                texts.feed(chunk, |t| {
                    got.push(t.map_or_else(|c| format!("cut:{c}"), str::to_owned))
                });
            }
            texts.finish(|t| got.push(t.map_or_else(|c| format!("cut:{c}"), str::to_owned)));
            assert_eq!(
                got,
                [
                    "{\"a\": 1}",
                    "{\n  \"b\": [\n    1\n  ]\n}",
                    "not json",
                    "{\"c\":"
                ],
                "split {split}"
            );
        }
        let mut texts = JsonTexts::new(8);
        let mut got = Vec::new();
        texts.feed(b"{\n\"long\": \n1234567\n}\n{}\n", |t| got.push(t.is_ok()));
        // Past the bound the value is cut; its remaining lines pass on one by one (the decoder
        // reports them), and the next value is read as usual.
        assert_eq!(got, [false, true, true, true]);
    }

    /// The lines of `input` fed in chunks of `chunk` bytes, `Err` for a line too long.
    fn split(max: usize, input: &[u8], chunk: usize) -> Vec<Result<String, String>> {
        let mut lines = LineSplitter::new(max);
        let mut seen = Vec::new();
        let mut push = |line: Result<&str, &str>| {
            seen.push(line.map(str::to_owned).map_err(str::to_owned));
        };
        for part in input.chunks(chunk) {
            lines.feed(part, &mut push);
        }
        lines.finish(&mut push);
        seen
    }

    #[test]
    fn lines_within_the_limit_pass_whole_however_the_input_is_split() {
        let input = b"ab\r\nabcd\n\nxy\r\nlast";
        for chunk in 1..=input.len() {
            assert_eq!(
                split(4, input, chunk),
                [Ok("ab"), Ok("abcd"), Ok(""), Ok("xy"), Ok("last")].map(|r| r.map(str::to_owned)),
                "chunks of {chunk}"
            );
        }
    }

    #[test]
    fn a_line_too_long_is_reported_once_and_skipped_to_its_end() {
        let input = b"ok\nabcdefghij\nnext\nklmnopqrstuvwxyz";
        for chunk in 1..=input.len() {
            let seen = split(4, input, chunk);
            assert_eq!(seen.len(), 4, "chunks of {chunk}: {seen:?}");
            assert_eq!(seen[0], Ok("ok".to_owned()));
            assert!(
                seen[1]
                    .as_ref()
                    .is_err_and(|head| "abcdefghij".starts_with(head.as_str())),
                "{seen:?}"
            );
            assert_eq!(seen[2], Ok("next".to_owned()), "chunks of {chunk}");
            assert!(seen[3].is_err(), "chunks of {chunk}: {seen:?}");
        }
    }

    #[test]
    fn an_endless_line_keeps_at_most_the_limit_in_memory() {
        let mut lines = LineSplitter::new(1024);
        let mut reports = 0;
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..1600 {
            // 100 MiB without a newline.
            lines.feed(&chunk, |line| {
                assert!(matches!(line, Err(head) if head.len() <= RAW_KEEP));
                reports += 1;
            });
            assert!(
                lines.pending.capacity() <= 2048,
                "{}",
                lines.pending.capacity()
            );
        }
        lines.feed(b"xx\n{\"type\":\"after\"}\n", |line| {
            assert_eq!(line, Ok("{\"type\":\"after\"}"));
            reports += 10;
        });
        assert_eq!(reports, 11, "one report, then the next line");
    }

    #[test]
    fn the_ndjson_decoder_turns_a_line_too_long_into_one_error_signal() {
        let mut decoder = NdjsonDecoder::new("stdin:in", 32);
        let mut out = Vec::new();
        let long = format!(
            "{{\"type\":\"x\",\"payload\":{{\"s\":\"{}\"}}}}\n",
            "y".repeat(100)
        );
        decoder.feed(b"{\"type\":\"a\"}\n", &mut out);
        for b in long.as_bytes().chunks(7) {
            decoder.feed(b, &mut out);
        }
        decoder.feed(b"{\"type\":\"b\"}", &mut out);
        decoder.finish(&mut out);
        let kinds: Vec<(&str, bool)> = out
            .iter()
            .map(|d| match d {
                Decoded::Signal(s) => (s.kind.as_str(), false),
                Decoded::BadInput(s) => (s.kind.as_str(), true),
            })
            .collect();
        assert_eq!(kinds, [("a", false), ("error", true), ("b", false)]);
        let Decoded::BadInput(error) = &out[1] else {
            unreachable!()
        };
        let message = error.payload["message"].as_str().unwrap();
        assert!(message.contains("longer than 32 bytes"), "{message}");
    }
}
