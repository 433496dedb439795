//! Bounded NDJSON reading: lines of at most `max_line_bytes`, a longer one reported once
//! and skipped up to its newline, so that memory stays bounded whatever the input.

use patchbay_signal::decode::{StreamDecoder, decode_line};
use patchbay_signal::normalize::{Decoded, Normalizer, RAW_KEEP};

/// The default `max_line_bytes`: 1 MiB, as the `sse` source's.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;

/// The largest `max_line_bytes` accepted: 64 MiB, as the `sse` source's.
pub const MAX_LINE_BYTES_LIMIT: usize = 64 << 20;

/// One line out of [`BoundedLines`].
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A whole line, without its terminator (`\n`, or `\r\n`).
    Whole(&'a [u8]),
    /// A line longer than the limit: its first bytes, and whether the stream ended inside
    /// it. The rest of it is skipped.
    TooLong(&'a [u8]),
}

/// Splits a byte stream into lines of at most `max` bytes, keeping at most `max` bytes of
/// a partial line between calls.
#[derive(Debug, Clone)]
pub struct BoundedLines {
    max: usize,
    pending: Vec<u8>,
    /// Dropping the rest of a line already reported as too long.
    skipping: bool,
}

impl BoundedLines {
    /// A splitter of lines up to `max` bytes.
    pub fn new(max: usize) -> Self {
        BoundedLines {
            max,
            pending: Vec::new(),
            skipping: false,
        }
    }

    /// Feeds bytes; calls `line` with each complete line, and once with each line that
    /// passes the limit (as soon as it does: its newline may be far away).
    pub fn feed(&mut self, bytes: &[u8], mut line: impl FnMut(Line<'_>)) {
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
                line(Line::Whole(segment));
            } else {
                self.pending.extend_from_slice(segment);
                line(Line::Whole(&self.pending));
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
    pub fn finish(&mut self, mut line: impl FnMut(Line<'_>)) {
        let skipping = std::mem::take(&mut self.skipping);
        let mut pending = std::mem::take(&mut self.pending);
        if pending.last() == Some(&b'\r') {
            pending.pop();
        }
        if skipping || pending.is_empty() {
            return;
        }
        if pending.len() > self.max {
            line(Line::TooLong(&pending[..RAW_KEEP.min(pending.len())]));
        } else {
            line(Line::Whole(&pending));
        }
    }

    /// Reports the line made of what is pending and `more` as too long, and forgets it.
    fn report(&mut self, more: &[u8], line: &mut impl FnMut(Line<'_>)) {
        let keep = RAW_KEEP.saturating_sub(self.pending.len()).min(more.len());
        self.pending.truncate(RAW_KEEP);
        self.pending.extend_from_slice(&more[..keep]);
        line(Line::TooLong(&self.pending));
        // Give back the memory a long partial line took.
        self.pending = Vec::new();
    }
}

/// NDJSON envelopes (or sajou scenario lines, decoded as their signal) with lines of at
/// most `max_line_bytes`: what the `stdin` and `file` sources and `parse --protocol sajou`
/// read. A longer line is one `error` signal (`code: "bad_frame"`), and reading goes on
/// at the next line.
#[derive(Debug, Clone)]
pub struct BoundedNdjson {
    lines: BoundedLines,
    normalizer: Normalizer,
}

impl BoundedNdjson {
    /// A decoder whose signals default to `source`, refusing lines over `max_line_bytes`.
    pub fn new(source: impl Into<String>, max_line_bytes: usize) -> Self {
        BoundedNdjson {
            lines: BoundedLines::new(max_line_bytes),
            normalizer: Normalizer::new(source),
        }
    }
}

/// Decodes one line: an envelope (or a scenario line), or a bad-input report.
fn push_line(normalizer: &mut Normalizer, max: usize, line: Line<'_>, out: &mut Vec<Decoded>) {
    match line {
        Line::Whole(bytes) => out.extend(decode_line(normalizer, &String::from_utf8_lossy(bytes))),
        Line::TooLong(head) => out.push(Decoded::BadInput(too_long(normalizer, max, head))),
    }
}

/// The `error` signal for a line longer than `max` bytes, quoting its first bytes.
pub(crate) fn too_long(
    normalizer: &Normalizer,
    max: usize,
    head: &[u8],
) -> patchbay_signal::Signal {
    normalizer.bad_input(
        &String::from_utf8_lossy(head),
        &format!("a line longer than max_line_bytes ({max} bytes): skipped up to its end"),
    )
}

impl StreamDecoder for BoundedNdjson {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let (normalizer, max) = (&mut self.normalizer, self.lines.max);
        self.lines
            .feed(bytes, |line| push_line(normalizer, max, line, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let (normalizer, max) = (&mut self.normalizer, self.lines.max);
        self.lines
            .finish(|line| push_line(normalizer, max, line, out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of `input` fed in chunks of `chunk` bytes, `Err` for a line too long.
    fn split(max: usize, input: &[u8], chunk: usize) -> Vec<Result<String, String>> {
        let mut lines = BoundedLines::new(max);
        let mut seen = Vec::new();
        let mut push = |line: Line<'_>| {
            seen.push(match line {
                Line::Whole(b) => Ok(String::from_utf8_lossy(b).into_owned()),
                Line::TooLong(b) => Err(String::from_utf8_lossy(b).into_owned()),
            })
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
        let mut lines = BoundedLines::new(1024);
        let mut reports = 0;
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..1600 {
            // 100 MiB without a newline.
            lines.feed(&chunk, |line| {
                assert!(matches!(line, Line::TooLong(head) if head.len() <= RAW_KEEP));
                reports += 1;
            });
            assert!(
                lines.pending.capacity() <= 2048,
                "{}",
                lines.pending.capacity()
            );
        }
        lines.feed(b"xx\n{\"type\":\"after\"}\n", |line| {
            assert_eq!(line, Line::Whole(b"{\"type\":\"after\"}"));
            reports += 10;
        });
        assert_eq!(reports, 11, "one report, then the next line");
    }

    #[test]
    fn the_decoder_turns_a_line_too_long_into_one_error_signal() {
        let mut decoder = BoundedNdjson::new("stdin:in", 32);
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
        assert!(message.contains("max_line_bytes (32 bytes)"), "{message}");
    }
}
