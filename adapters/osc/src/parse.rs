//! The text format of `patchbay parse --protocol osc`: one packet per line, as hex bytes.
//!
//! ```text
//! # /agent/pause with the float 1.0, as TouchOSC sends a button press
//! 2f 61 67 65 6e 74 2f 70 61 75 73 65 00 00 00 00 2c 66 00 00 3f 80 00 00
//! ```
//!
//! Bytes are hex pairs, separated by spaces or not at all, `#` starts a comment, blank
//! lines are skipped. A line that is not hex, or not an OSC packet, is reported as bad
//! input.

use patchbay_signal::decode::{LineSplitter, StreamDecoder, line_too_long};
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::now_ms;

use crate::decode::OscDecoder;
use crate::source::MAX_PACKET_LIMIT;

/// Longest line: the largest packet written as spaced hex, with room for a comment.
const MAX_LINE: usize = 4 * MAX_PACKET_LIMIT;

/// The decoder of `patchbay parse --protocol osc` (packets up to 65535 bytes).
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(HexPacketDecoder {
        lines: LineSplitter::new(MAX_LINE),
        osc: OscDecoder::new(source, MAX_PACKET_LIMIT),
    })
}

/// Hex text lines in, one OSC packet per line.
struct HexPacketDecoder {
    lines: LineSplitter,
    osc: OscDecoder,
}

impl StreamDecoder for HexPacketDecoder {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let osc = &mut self.osc;
        self.lines.feed(bytes, |line| push_line(osc, line, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let osc = &mut self.osc;
        self.lines.finish(|line| push_line(osc, line, out));
    }
}

fn push_line(osc: &mut OscDecoder, line: Result<&str, &str>, out: &mut Vec<Decoded>) {
    let (raw, message) = match line {
        Ok(text) => match hex_bytes(text) {
            Ok(bytes) if bytes.is_empty() => return,
            Ok(bytes) => {
                // The error signal is in `out` already.
                let _ = osc.decode(&bytes, None, now_ms(), out);
                return;
            }
            Err(e) => (text, e),
        },
        Err(cut) => (cut, line_too_long(MAX_LINE)),
    };
    out.push(Decoded::BadInput(bad_input_signal(
        osc.source(),
        osc.last_timestamp(),
        raw,
        &message,
    )));
}

/// The bytes of one line (hex pairs, spaces between them or not, a `#` comment).
fn hex_bytes(line: &str) -> Result<Vec<u8>, String> {
    let text = line.split('#').next().unwrap_or("");
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if let Some(bad) = digits.iter().find(|b| !b.is_ascii_hexdigit()) {
        return Err(format!(
            "`{}` is not a hex digit",
            char::from(*bad).escape_default()
        ));
    }
    if !digits.len().is_multiple_of(2) {
        return Err("an odd number of hex digits".into());
    }
    Ok(digits
        .chunks(2)
        .map(|pair| (nibble(pair[0]) << 4) | nibble(pair[1]))
        .collect())
}

fn nibble(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit.wrapping_sub(b'A').wrapping_add(10),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_hex_packets() {
        let text = "# a comment\n\n2f61 0000 2c69 0000 0000 0007\n2F 61 00 00 2c 78 00 00 # unknown tag\nzz\n2f6";
        let mut decoder = parse_decoder("parse:osc");
        let mut out = Vec::new();
        decoder.feed(text.as_bytes(), &mut out);
        decoder.finish(&mut out);
        let texts: Vec<(bool, String)> = out
            .iter()
            .map(|d| match d {
                Decoded::Signal(s) => (true, s.payload.get("address").unwrap().to_string()),
                Decoded::BadInput(s) => (false, s.payload.get("message").unwrap().to_string()),
            })
            .collect();
        assert_eq!(texts.len(), 4, "{texts:?}");
        assert_eq!(texts[0], (true, "\"/a\"".into()));
        assert!(
            !texts[1].0 && texts[1].1.contains("unknown type tag `x`"),
            "{texts:?}"
        );
        assert!(
            !texts[2].0 && texts[2].1.contains("`z` is not a hex digit"),
            "{texts:?}"
        );
        assert!(
            !texts[3].0 && texts[3].1.contains("odd number"),
            "{texts:?}"
        );
        patchbay_testkit::validity::assert_all_decoded_valid(&out);
    }
}
