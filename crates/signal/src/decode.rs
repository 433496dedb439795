//! The interface every protocol decoder offers, so that `patchbay parse` and the
//! transports can drive any of them the same way.

use serde_json::Value;

use crate::normalize::{Decoded, Normalizer};

/// A pure, incremental decoder: bytes in (split anywhere), signals out. No I/O.
pub trait StreamDecoder: Send {
    /// Feeds the next bytes of the stream; complete units (lines, events, frames) are
    /// decoded into `out`, partial ones are kept for the next call.
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>);

    /// The stream ended: decodes what is still buffered (a last line or event without its
    /// terminator is not thrown away) and emits anything held back.
    fn finish(&mut self, out: &mut Vec<Decoded>);
}

/// Splits a byte stream into lines (`\n`, with an optional `\r` before it), keeping a
/// partial last line until more bytes or the end arrive.
#[derive(Debug, Default, Clone)]
pub struct LineSplitter {
    pending: Vec<u8>,
    /// Largest line kept; longer lines are cut and reported by [`LineSplitter::feed`].
    max_line: Option<usize>,
}

impl LineSplitter {
    /// A splitter without a line length limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// A splitter that refuses lines longer than `max` bytes.
    pub fn with_max_line(max: usize) -> Self {
        LineSplitter {
            pending: Vec::new(),
            max_line: Some(max),
        }
    }

    /// Feeds bytes; calls `line` with each complete line (without its terminator,
    /// lossily decoded as UTF-8). A line over the limit is passed as `Err(first bytes)`.
    pub fn feed(&mut self, bytes: &[u8], mut line: impl FnMut(Result<&str, &str>)) {
        let mut rest = bytes;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            self.pending.extend_from_slice(&rest[..pos]);
            rest = &rest[pos + 1..];
            self.emit(&mut line);
        }
        self.pending.extend_from_slice(rest);
        if self.max_line.is_some_and(|max| self.pending.len() > max) {
            // Keep reading past it but report it once, as cut.
            self.emit(&mut line);
        }
    }

    /// Ends the stream: passes a last line that had no terminator.
    pub fn finish(&mut self, mut line: impl FnMut(Result<&str, &str>)) {
        if !self.pending.is_empty() {
            self.emit(&mut line);
        }
    }

    fn emit(&mut self, line: &mut impl FnMut(Result<&str, &str>)) {
        let mut bytes = std::mem::take(&mut self.pending);
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        let text = String::from_utf8_lossy(&bytes);
        match self.max_line {
            Some(max) if bytes.len() > max => {
                line(Err(&crate::truncate(&text, crate::normalize::RAW_KEEP)))
            }
            _ => line(Ok(&text)),
        }
    }
}

/// Splits a byte stream into JSON texts, one per line as in NDJSON, but also a value
/// written over several lines (a pretty-printed capture): a line that opens a JSON value
/// without finishing it is joined with the next lines until the value is complete. A
/// line that is not JSON at all is passed on as it is (the decoder reports it), and a
/// value still open after `max` bytes is passed as `Err(first bytes)`.
#[derive(Debug, Clone, Default)]
pub struct JsonTexts {
    lines: LineSplitter,
    partial: String,
    max: usize,
}

impl JsonTexts {
    /// A splitter of texts up to `max` bytes.
    pub fn new(max: usize) -> Self {
        JsonTexts {
            lines: LineSplitter::with_max_line(max),
            partial: String::new(),
            max,
        }
    }

    /// Feeds bytes; calls `text` with each complete JSON text (or line).
    pub fn feed(&mut self, bytes: &[u8], mut text: impl FnMut(Result<&str, &str>)) {
        let mut lines = std::mem::take(&mut self.lines);
        lines.feed(bytes, |line| self.on_line(line, &mut text));
        self.lines = lines;
    }

    /// Ends the stream: passes what is left, finished or not.
    pub fn finish(&mut self, mut text: impl FnMut(Result<&str, &str>)) {
        let mut lines = std::mem::take(&mut self.lines);
        lines.finish(|line| self.on_line(line, &mut text));
        self.lines = lines;
        if !self.partial.is_empty() {
            text(Ok(&std::mem::take(&mut self.partial)));
        }
    }

    fn on_line(&mut self, line: Result<&str, &str>, text: &mut impl FnMut(Result<&str, &str>)) {
        let line = match line {
            Ok(line) => line,
            Err(cut) => {
                self.partial.clear();
                return text(Err(cut));
            }
        };
        if self.partial.is_empty() {
            let opens = line.trim_start().starts_with(['{', '[']);
            if opens && is_unfinished(line) {
                self.partial.push_str(line);
            } else {
                text(Ok(line));
            }
            return;
        }
        self.partial.push('\n');
        self.partial.push_str(line);
        if self.partial.len() > self.max {
            let cut = crate::truncate(
                &std::mem::take(&mut self.partial),
                crate::normalize::RAW_KEEP,
            );
            text(Err(&cut));
        } else if !is_unfinished(&self.partial) {
            text(Ok(&std::mem::take(&mut self.partial)));
        }
    }
}

/// Whether `text` is the beginning of a JSON value that more text could complete.
fn is_unfinished(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text).is_err_and(|e| e.is_eof())
}

/// NDJSON of generic envelopes (`patchbay parse --protocol sajou`, `stdin`, `file`).
#[derive(Debug, Clone)]
pub struct NdjsonDecoder {
    lines: LineSplitter,
    normalizer: Normalizer,
}

impl NdjsonDecoder {
    /// A decoder whose signals default to `source`.
    pub fn new(source: impl Into<String>) -> Self {
        NdjsonDecoder {
            lines: LineSplitter::new(),
            normalizer: Normalizer::new(source),
        }
    }
}

impl StreamDecoder for NdjsonDecoder {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let normalizer = &mut self.normalizer;
        self.lines
            .feed(bytes, |line| push_line(normalizer, line, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let normalizer = &mut self.normalizer;
        self.lines.finish(|line| push_line(normalizer, line, out));
    }
}

fn push_line(normalizer: &mut Normalizer, line: Result<&str, &str>, out: &mut Vec<Decoded>) {
    match line {
        Ok(text) => out.extend(decode_line(normalizer, text)),
        Err(cut) => out.push(Decoded::BadInput(
            normalizer.bad_input(cut, "line too long"),
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
    /// Drives `decoder` over NDJSON.
    pub fn new(decoder: D) -> Self {
        FrameLines {
            lines: LineSplitter::new(),
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
        Err(cut) => {
            out.push(decoder.bad_line(cut, "line too long"));
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
    use serde_json::json;

    #[test]
    fn lines_split_anywhere_and_last_line_is_kept() {
        let mut d = NdjsonDecoder::new("parse:sajou");
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
        let mut d = NdjsonDecoder::new("parse:sajou");
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

    #[test]
    fn overlong_lines_are_reported() {
        let mut s = LineSplitter::with_max_line(4);
        let mut seen = Vec::new();
        s.feed(b"ab\nabcdefgh\nxy", |l| {
            seen.push(l.map(str::to_owned).map_err(str::to_owned))
        });
        s.finish(|l| seen.push(l.map(str::to_owned).map_err(str::to_owned)));
        assert_eq!(seen[0], Ok("ab".to_owned()));
        assert!(seen[1].is_err());
        assert_eq!(seen.last().unwrap(), &Ok("xy".to_owned()));
    }
}
