//! The text format of `patchbay parse --protocol midi`: one message per line as hex bytes.
//!
//! ```text
//! # a pad on channel 10, pressed and released
//! 99 24 64
//! 89 24 00
//! b0 07 7f     # volume, then two more values with running status
//! 07 40
//! 0x07,0x00
//! ```
//!
//! Bytes are hex pairs, separated by spaces or commas or not at all (`903c64`), with an
//! optional `0x` prefix; a single digit between separators is one byte (`9 3c 64` is
//! `09 3c 64`). `#` starts a comment; blank lines are skipped. A line that is not hex is
//! reported as bad input and skipped as a whole. The lines form one byte stream, so running
//! status applies across lines.

use patchbay_signal::decode::{LineSplitter, StreamDecoder, line_too_long};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::now_ms;

use crate::MidiDecoder;

/// The port name of the signals `patchbay parse` makes (a capture file names no port).
pub const PARSE_PORT: &str = "parse";

/// Longest line accepted: a SysEx of [`MAX_SYSEX`](crate::MAX_SYSEX) bytes written as
/// spaced hex, with room for a comment.
const MAX_LINE: usize = 4 * crate::MAX_SYSEX;

/// The decoder `patchbay parse --protocol midi` uses: hex text lines, signals from
/// `source` with port [`PARSE_PORT`], every channel, system messages dropped (as a `midi`
/// source does by default).
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(HexLineDecoder::new(MidiDecoder::new(source, PARSE_PORT)))
}

/// A line of hex text that is not MIDI bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HexLineError {
    /// A token holds a character that is not a hex digit.
    #[error("`{0}` is not hex bytes")]
    NotHex(String),
    /// A token of several digits has an odd number of them, so its bytes are ambiguous.
    #[error("`{0}` has an odd number of hex digits")]
    OddDigits(String),
}

/// Reads the bytes of one line: hex pairs, separated by spaces or commas or not at all,
/// optional `0x` prefixes, a `#` comment. A blank or comment-only line gives no bytes.
pub fn parse_hex_line(line: &str) -> Result<Vec<u8>, HexLineError> {
    let text = line.split('#').next().unwrap_or("");
    let mut bytes = Vec::new();
    for token in text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
    {
        let digits = token
            .strip_prefix("0x")
            .or_else(|| token.strip_prefix("0X"))
            .unwrap_or(token);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(HexLineError::NotHex(token.to_owned()));
        }
        if digits.len() == 1 {
            bytes.push(hex_value(digits.as_bytes()));
            continue;
        }
        if digits.len() % 2 != 0 {
            return Err(HexLineError::OddDigits(token.to_owned()));
        }
        bytes.extend(digits.as_bytes().chunks(2).map(hex_value));
    }
    Ok(bytes)
}

/// The byte written by one or two hex digits (already checked to be hex digits).
fn hex_value(digits: &[u8]) -> u8 {
    digits.iter().fold(0u8, |acc, &d| {
        let nibble = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => 0,
        };
        (acc << 4) | nibble
    })
}

/// Hex text lines in, `midi.*` signals out: wraps a [`MidiDecoder`] (whose port and
/// options it keeps). Signals are stamped with the time the text is fed.
#[derive(Debug, Clone)]
pub struct HexLineDecoder {
    lines: LineSplitter,
    midi: MidiDecoder,
}

impl HexLineDecoder {
    /// A line decoder feeding `midi`.
    pub fn new(midi: MidiDecoder) -> Self {
        HexLineDecoder {
            lines: LineSplitter::new(MAX_LINE),
            midi,
        }
    }

    /// Feeds text received at `timestamp` (epoch ms).
    pub fn feed_at(&mut self, text: &[u8], timestamp: i64, out: &mut Vec<Decoded>) {
        let midi = &mut self.midi;
        self.lines
            .feed(text, |line| push_line(midi, line, timestamp, out));
    }

    /// Ends the text: decodes a last line without a newline, then ends the byte stream.
    pub fn finish_at(&mut self, timestamp: i64, out: &mut Vec<Decoded>) {
        let midi = &mut self.midi;
        self.lines
            .finish(|line| push_line(midi, line, timestamp, out));
        self.midi.finish_at(timestamp, out);
    }
}

impl StreamDecoder for HexLineDecoder {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        self.feed_at(bytes, now_ms(), out);
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        self.finish_at(now_ms(), out);
    }
}

fn push_line(midi: &mut MidiDecoder, line: Result<&str, &str>, ts: i64, out: &mut Vec<Decoded>) {
    let (raw, message) = match line {
        Ok(text) => match parse_hex_line(text) {
            Ok(bytes) => return midi.feed_at(&bytes, ts, out),
            Err(err) => (text, err.to_string()),
        },
        Err(cut) => (cut, line_too_long(MAX_LINE)),
    };
    out.push(Decoded::BadInput(
        bad_input_signal(midi.source(), midi.last_timestamp(), raw, &message)
            .with_meta("port", midi.port()),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_forms() {
        assert_eq!(parse_hex_line("90 3c 64"), Ok(vec![0x90, 0x3c, 0x64]));
        assert_eq!(parse_hex_line("903c64"), Ok(vec![0x90, 0x3c, 0x64]));
        assert_eq!(
            parse_hex_line("0x90,0x3C, 0x64"),
            Ok(vec![0x90, 0x3c, 0x64])
        );
        assert_eq!(parse_hex_line("9 3c64"), Ok(vec![0x09, 0x3c, 0x64]));
        assert_eq!(parse_hex_line("  90 3c # 64"), Ok(vec![0x90, 0x3c]));
        assert_eq!(parse_hex_line("# only a comment"), Ok(vec![]));
        assert_eq!(parse_hex_line(" \t "), Ok(vec![]));
    }

    #[test]
    fn bad_hex() {
        assert_eq!(
            parse_hex_line("90 3g 64"),
            Err(HexLineError::NotHex("3g".into()))
        );
        assert_eq!(
            parse_hex_line("90 0x"),
            Err(HexLineError::NotHex("0x".into()))
        );
        assert_eq!(
            parse_hex_line("903"),
            Err(HexLineError::OddDigits("903".into()))
        );
        assert_eq!(parse_hex_line("é"), Err(HexLineError::NotHex("é".into())));
    }
}
