//! Helpers shared by the integration tests.
#![allow(dead_code)]

use patchbay_signal::normalize::Decoded;
use patchbay_signal::{Signal, well_known};
use serde_json::{Value, json};

/// Decodes `input` with `parse_decoder`, fed in pieces whose sizes `sizes` picks.
pub fn decode_split(input: &[u8], sizes: &mut dyn FnMut() -> usize) -> Vec<Decoded> {
    let mut d = patchbay_anthropic::parse_decoder("parse:anthropic");
    let mut out = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        let n = sizes().clamp(1, rest.len());
        d.feed(&rest[..n], &mut out);
        rest = &rest[n..];
    }
    d.finish(&mut out);
    out
}

/// Decodes `input` in one piece; every signal is checked valid.
pub fn decode(input: &str) -> Vec<Decoded> {
    let out = decode_split(input.as_bytes(), &mut || usize::MAX);
    check_valid(&out);
    out
}

/// The signals of [`decode`].
pub fn signals(input: &str) -> Vec<Signal> {
    decode(input)
        .into_iter()
        .map(Decoded::into_signal)
        .collect()
}

/// One SSE stream of the given chunks, ended by `[DONE]`.
pub fn sse(chunks: &[Value]) -> String {
    let mut s = String::new();
    for c in chunks {
        s.push_str(&format!("data: {c}\n\n"));
    }
    s.push_str("data: [DONE]\n\n");
    s
}

/// The signal types, in order.
pub fn kinds(signals: &[Signal]) -> Vec<&str> {
    signals.iter().map(|s| s.kind.as_str()).collect()
}

/// The parts of a decoded signal that do not depend on the clock or the id generator.
pub fn stable(decoded: &Decoded) -> Value {
    let (Decoded::Signal(s) | Decoded::BadInput(s)) = decoded;
    let mut v = s.to_value();
    if let Some(o) = v.as_object_mut() {
        o.remove("id");
        o.remove("timestamp");
    }
    json!({"bad": decoded.is_bad(), "signal": v})
}

/// Every signal passes the typed check and the real JSON schema.
pub fn check_valid(out: &[Decoded]) {
    for d in out {
        let (Decoded::Signal(s) | Decoded::BadInput(s)) = d;
        assert_eq!(well_known::check_signal(s), Ok(()), "{s:?}");
        patchbay_testkit::assert_schema_valid(&s.to_value());
    }
}

/// A tiny deterministic pseudo-random generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
