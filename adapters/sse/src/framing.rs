//! Payload framing for decoders whose input is either raw SSE text or one JSON payload per
//! line (as `patchbay parse --protocol openai|anthropic` accepts both).

use std::borrow::Cow;

use crate::parser::{SseEventRef, SseParser};

/// How a byte stream carries its payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events: each event's `data` is one payload.
    Sse,
    /// One payload per line (NDJSON). Lines written as SSE fields are tolerated: a
    /// `data:` prefix is removed and `event:`, `id:`, `retry:` and comment lines are
    /// skipped.
    JsonLines,
}

/// One payload, with the SSE fields that came with it (none for JSON lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The payload text (an SSE event's data, or one line).
    pub data: &'a str,
    /// The SSE event type, when one was given.
    pub event: Option<&'a str>,
    /// The SSE last event ID in force, if any.
    pub id: Option<&'a str>,
}

/// Splits a byte stream into payloads, detecting its [`Framing`] from the first
/// significant byte unless told: `{` or `[` means JSON lines, anything else SSE.
#[derive(Debug, Clone)]
pub struct DataFramer {
    framing: Option<Framing>,
    /// Leading whitespace (and BOM bytes) seen before the framing was known.
    head: Vec<u8>,
    sse: SseParser,
    /// A JSON line that spans several `feed` calls.
    line: Vec<u8>,
}

impl Default for DataFramer {
    fn default() -> Self {
        Self::detect()
    }
}

impl DataFramer {
    /// A framer that detects the framing from the input.
    pub fn detect() -> Self {
        DataFramer {
            framing: None,
            head: Vec::new(),
            sse: SseParser::new(),
            line: Vec::new(),
        }
    }

    /// A framer with a known framing.
    pub fn with_framing(framing: Framing) -> Self {
        DataFramer {
            framing: Some(framing),
            ..Self::detect()
        }
    }

    /// The framing in use, once known.
    pub fn framing(&self) -> Option<Framing> {
        self.framing
    }

    /// The SSE parser (for its last event ID and retry time).
    pub fn sse(&self) -> &SseParser {
        &self.sse
    }

    /// Feeds bytes, calling `on_frame` for each complete payload.
    pub fn feed(&mut self, bytes: &[u8], mut on_frame: impl FnMut(Frame<'_>)) {
        let framing = match self.framing {
            Some(f) => f,
            None => {
                let Some(pos) = bytes.iter().position(|b| !is_blank(*b)) else {
                    self.head.extend_from_slice(bytes);
                    return;
                };
                let framing = match bytes.get(pos) {
                    Some(b'{' | b'[') => Framing::JsonLines,
                    _ => Framing::Sse,
                };
                self.framing = Some(framing);
                let head = std::mem::take(&mut self.head);
                self.feed_framed(framing, &head, &mut on_frame);
                framing
            }
        };
        self.feed_framed(framing, bytes, &mut on_frame);
    }

    /// The stream ended: passes a last payload that had no terminator.
    pub fn finish(&mut self, mut on_frame: impl FnMut(Frame<'_>)) {
        match self.framing {
            Some(Framing::Sse) => self.sse.finish_ref(|e| sse_frame(e, &mut on_frame)),
            Some(Framing::JsonLines) => {
                let line = std::mem::take(&mut self.line);
                line_frame(&line, &mut on_frame);
            }
            None => {} // only blank input
        }
        self.head.clear();
    }

    fn feed_framed(
        &mut self,
        framing: Framing,
        bytes: &[u8],
        on_frame: &mut impl FnMut(Frame<'_>),
    ) {
        if bytes.is_empty() {
            return;
        }
        match framing {
            Framing::Sse => self.sse.feed_ref(bytes, |e| sse_frame(e, on_frame)),
            Framing::JsonLines => self.feed_lines(bytes, on_frame),
        }
    }
}

impl DataFramer {
    /// Splits JSON lines at `\n` (a `\r` before it is dropped); complete lines are passed
    /// straight from `bytes`, only a partial one is buffered.
    fn feed_lines(&mut self, bytes: &[u8], on_frame: &mut impl FnMut(Frame<'_>)) {
        let mut rest = bytes;
        while let Some(pos) = memchr::memchr(b'\n', rest) {
            let line = &rest[..pos];
            rest = &rest[pos + 1..];
            if self.line.is_empty() {
                line_frame(line, on_frame);
            } else {
                let mut joined = std::mem::take(&mut self.line);
                joined.extend_from_slice(line);
                line_frame(&joined, on_frame);
                joined.clear();
                self.line = joined; // keep the allocation
            }
        }
        self.line.extend_from_slice(rest);
    }
}

/// Whitespace or a BOM byte: what may come before the first significant byte.
fn is_blank(b: u8) -> bool {
    b.is_ascii_whitespace() || matches!(b, 0xEF | 0xBB | 0xBF)
}

fn sse_frame(event: SseEventRef<'_>, on_frame: &mut impl FnMut(Frame<'_>)) {
    on_frame(Frame {
        data: event.data,
        event: event.event,
        id: event.id,
    });
}

fn line_frame(line: &[u8], on_frame: &mut impl FnMut(Frame<'_>)) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = match std::str::from_utf8(line) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(line),
    };
    let line: &str = &line;
    let line = line.strip_prefix('\u{feff}').unwrap_or(line);
    let data = if let Some(value) = line.strip_prefix("data:") {
        value.strip_prefix(' ').unwrap_or(value)
    } else if line.starts_with(':')
        || line.starts_with("event:")
        || line.starts_with("id:")
        || line.starts_with("retry:")
    {
        return;
    } else {
        line
    };
    if data.trim().is_empty() {
        return;
    }
    on_frame(Frame {
        data,
        event: None,
        id: None,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8], split: usize) -> (Option<Framing>, Vec<String>) {
        let mut f = DataFramer::detect();
        let mut out = Vec::new();
        for chunk in input.chunks(split.max(1)) {
            f.feed(chunk, |fr| out.push(fr.data.to_owned()));
        }
        f.finish(|fr| out.push(fr.data.to_owned()));
        (f.framing(), out)
    }

    #[test]
    fn detects_sse() {
        let input = b"\n\nevent: a\ndata: {\"x\":1}\n\ndata: [DONE]";
        for split in 1..input.len() {
            let (framing, out) = frames(input, split);
            assert_eq!(framing, Some(Framing::Sse));
            assert_eq!(out, ["{\"x\":1}", "[DONE]"]);
        }
    }

    #[test]
    fn detects_json_lines() {
        let input =
            b"\xEF\xBB\xBF  {\"a\":1}\r\n\n{\"b\":\n:comment\ndata: {\"c\":3}\nevent: x\n{\"d\":4}";
        for split in 1..input.len() {
            let (framing, out) = frames(input, split);
            assert_eq!(framing, Some(Framing::JsonLines));
            assert_eq!(out, ["  {\"a\":1}", "{\"b\":", "{\"c\":3}", "{\"d\":4}"]);
        }
    }

    #[test]
    fn blank_input_gives_nothing() {
        assert_eq!(frames(b" \n\r\n", 2), (None, vec![]));
    }
}
