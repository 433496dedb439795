//! Inputs and inner loops of the LLM stream decoders' throughput benches (plain code, no
//! bench framework): the recorded SSE captures repeated into one large stream, and the
//! ways it is fed, so every decoder is measured the same way on comparable input.

use std::hint::black_box;

use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use serde_json::Value;

/// A large SSE stream and its `data:` payloads (`[DONE]` left out): a decoder of the
/// stream is compared with plain JSON parsing of the payloads over the same byte count.
pub struct SseStream {
    /// The whole stream.
    pub bytes: Vec<u8>,
    /// The payload of every `data:` line, in order.
    pub payloads: Vec<Vec<u8>>,
}

/// The captures (fixture paths under `tests/fixtures/`) back to back, each ended by a blank
/// line, repeated to more than `min_len` bytes.
pub fn repeated_sse_captures(captures: &[&str], min_len: usize) -> SseStream {
    let one: String = captures
        .iter()
        .map(|c| {
            let mut text = crate::fixture_text(c);
            if !text.ends_with("\n\n") {
                text.push_str("\n\n");
            }
            text
        })
        .collect();
    let repeat = min_len / one.len().max(1) + 1;
    let text = one.repeat(repeat);
    let payloads = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| d.as_bytes().to_vec())
        .collect();
    SseStream {
        bytes: text.into_bytes(),
        payloads,
    }
}

/// The floor any decoder pays: every payload parsed into a `serde_json::Value`.
pub fn parse_payloads_as_json(payloads: &[Vec<u8>]) {
    for p in payloads {
        black_box(serde_json::from_slice::<Value>(p).ok());
    }
}

/// Every payload (as text) handed to `decode`, the signals of each handed on before the
/// next (the SSE framing is left out: `decode` wraps a payload decoder).
pub fn decode_each_payload(payloads: &[Vec<u8>], mut decode: impl FnMut(&str, &mut Vec<Decoded>)) {
    let mut out = Vec::with_capacity(64);
    for p in payloads {
        decode(std::str::from_utf8(p).unwrap_or_default(), &mut out);
        black_box(&out);
        out.clear();
    }
}

/// Feeds `bytes` to `decoder` as an LLM stream arrives: reads of `read_len` bytes, each
/// read's signals handed on before the next (as the proxy's tap does), then finishes.
pub fn feed_in_reads<D: StreamDecoder>(mut decoder: D, bytes: &[u8], read_len: usize) {
    let mut out = Vec::with_capacity(64);
    for chunk in bytes.chunks(read_len) {
        decoder.feed(chunk, &mut out);
        black_box(&out);
        out.clear();
    }
    decoder.finish(&mut out);
    black_box(&out);
}
