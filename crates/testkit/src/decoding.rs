//! Driving a [`StreamDecoder`] as a transport does: input fed in pieces, then finished.
//!
//! A decoder must give the same signals however its input is split, so tests feed the same
//! bytes whole, in fixed chunk sizes and at random cut points, and compare the parts of the
//! signals that do not depend on the clock or the id generator.

use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{Signal, SmallString};
use serde_json::{Value, json};

/// Feeds `bytes` to `decoder` in pieces whose sizes `sizes` picks (kept between 1 and what
/// is left), then finishes.
pub fn decode_split(
    decoder: &mut dyn StreamDecoder,
    bytes: &[u8],
    sizes: &mut dyn FnMut() -> usize,
) -> Vec<Decoded> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = sizes().clamp(1, rest.len());
        decoder.feed(&rest[..n], &mut out);
        rest = &rest[n..];
    }
    decoder.finish(&mut out);
    out
}

/// Feeds `bytes` to `decoder` in chunks of the given sizes (cycled; at least one size),
/// then finishes.
pub fn decode_chunked(
    decoder: &mut dyn StreamDecoder,
    bytes: &[u8],
    sizes: &[usize],
) -> Vec<Decoded> {
    let mut cycle = sizes.iter().copied().cycle();
    decode_split(decoder, bytes, &mut || {
        cycle.next().expect("at least one chunk size")
    })
}

/// Feeds the whole of `text` to `decoder` in one `feed`, then finishes.
pub fn decode_whole(decoder: &mut dyn StreamDecoder, text: &str) -> Vec<Decoded> {
    decode_chunked(decoder, text.as_bytes(), &[usize::MAX])
}

/// The signals, whether decoded or reporting bad input.
pub fn into_signals(decoded: Vec<Decoded>) -> Vec<Signal> {
    decoded.into_iter().map(Decoded::into_signal).collect()
}

/// The signals, asserting that none reports bad input.
pub fn good_signals(decoded: Vec<Decoded>) -> Vec<Signal> {
    decoded
        .into_iter()
        .map(|d| {
            assert!(!d.is_bad(), "unexpected bad input: {d:?}");
            d.into_signal()
        })
        .collect()
}

/// The types of the signals, in order.
pub fn kinds(signals: &[Signal]) -> Vec<&str> {
    signals.iter().map(|s| s.kind.as_str()).collect()
}

/// What of a decoded signal must not depend on how the input was split: whether it is bad
/// input, its type, correlation id, payload and metadata (as JSON text); not the id, nor
/// the timestamp, which is "now" for frames without a time.
pub fn comparable(decoded: &Decoded) -> (bool, SmallString, Option<SmallString>, String, String) {
    let bad = decoded.is_bad();
    let s = decoded.clone().into_signal();
    (
        bad,
        s.kind,
        s.correlation_id,
        Value::from(s.payload).to_string(),
        s.metadata
            .map(|m| Value::from(m).to_string())
            .unwrap_or_default(),
    )
}

/// A decoded signal as JSON without the parts that depend on the clock or the id generator
/// (`id`, `timestamp`), with whether it is bad input: `{"bad": …, "signal": …}`.
pub fn stable(decoded: &Decoded) -> Value {
    let (Decoded::Signal(s) | Decoded::BadInput(s)) = decoded;
    let mut v = s.to_value();
    if let Some(o) = v.as_object_mut() {
        o.remove("id");
        o.remove("timestamp");
    }
    json!({"bad": decoded.is_bad(), "signal": v})
}
