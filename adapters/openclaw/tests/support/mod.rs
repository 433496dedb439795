//! Helpers shared by the integration tests.
#![allow(dead_code)]

use patchbay_signal::Signal;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::well_known::{check_signal, is_well_known};

/// Decodes `bytes` fed in chunks of the given sizes (cycled), then finishes.
pub fn decode_chunked(bytes: &[u8], sizes: &[usize]) -> Vec<Decoded> {
    let mut decoder = patchbay_openclaw::parse_decoder("parse:openclaw");
    let mut out = Vec::new();
    let mut rest = bytes;
    let mut i = 0;
    while !rest.is_empty() {
        let n = sizes[i % sizes.len()].clamp(1, rest.len());
        decoder.feed(&rest[..n], &mut out);
        rest = &rest[n..];
        i += 1;
    }
    decoder.finish(&mut out);
    out
}

/// Decodes a whole text in one `feed`.
pub fn decode(text: &str) -> Vec<Decoded> {
    decode_chunked(text.as_bytes(), &[usize::MAX])
}

/// The signals of a decode, asserting none reports bad input.
pub fn signals(text: &str) -> Vec<Signal> {
    decode(text)
        .into_iter()
        .map(|d| {
            assert!(!d.is_bad(), "unexpected bad input: {d:?}");
            d.into_signal()
        })
        .collect()
}

/// Every signal validates against the real schema, and well-known ones pass the typed check.
pub fn assert_all_valid(signals: &[Signal]) {
    for s in signals {
        patchbay_testkit::assert_schema_valid(&s.to_value());
        if is_well_known(&s.kind) {
            assert_eq!(check_signal(s), Ok(()), "{s:?}");
        }
    }
}

/// The types of the signals, in order.
pub fn kinds(signals: &[Signal]) -> Vec<&str> {
    signals.iter().map(|s| s.kind.as_str()).collect()
}

/// A tiny deterministic pseudo-random generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// What of a signal must not depend on how the input was split: everything but the id
/// (and the timestamp, which is "now" for frames without a time).
pub fn comparable(d: &Decoded) -> (bool, String, Option<String>, String, String) {
    let bad = d.is_bad();
    let s = d.clone().into_signal();
    (
        bad,
        s.kind,
        s.correlation_id,
        serde_json::Value::Object(s.payload).to_string(),
        s.metadata
            .map(|m| serde_json::Value::Object(m).to_string())
            .unwrap_or_default(),
    )
}
