//! What the fuzz targets share: driving a decoder over arbitrary bytes, split where the
//! input says, and checking what comes out the way the decoders' tests do (every signal,
//! bad-input reports included, valid against sajou's schema and patchbay's typed check).

use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{LazyObject, Signal};

/// The `source` given to the decoders under test.
pub const SOURCE: &str = "fuzz";

/// Feeds `data` to a fresh decoder from `new_decoder` in chunks (see [`chunk_size`]), then
/// ends the stream; every signal out must be valid.
pub fn stream(new_decoder: impl Fn(&str) -> Box<dyn StreamDecoder>, data: &[u8]) {
    let mut decoder = new_decoder(SOURCE);
    let mut out = Vec::new();
    for part in data.chunks(chunk_size(data)) {
        decoder.feed(part, &mut out);
        check_decoded(&out);
        out.clear();
    }
    decoder.finish(&mut out);
    check_decoded(&out);
}

/// How `data` is split into `feed` calls: whole when its length is even, else in chunks of 1
/// to 64 bytes chosen by its length (so that a split inside a line, a CRLF or a UTF-8
/// character is tried too). Taken from the length, not from a byte, so that the fixtures
/// used as seeds are read as they are.
pub fn chunk_size(data: &[u8]) -> usize {
    if data.len() % 2 == 0 {
        data.len().max(1)
    } else {
        data.len() / 2 % 64 + 1
    }
}

/// Panics unless every decoded signal, bad-input reports included, is valid.
pub fn check_decoded(decoded: &[Decoded]) {
    patchbay_testkit::validity::assert_all_decoded_valid(decoded);
}

/// Panics unless `signal` is valid, and unless its metadata and payload, where kept as
/// text, answer for their fields as their trees do (see [`check_kept`]).
pub fn check_signal(signal: &Signal) {
    patchbay_testkit::validity::assert_valid(signal);
    for kept in signal.metadata.iter().chain([&signal.payload]) {
        check_kept(kept);
    }
}

/// Panics unless an object kept as text finds each of its plain keys at the top level, as
/// its field written with its value, and does not find a name that is no key (the keys a
/// reading pass noted answer most of these without the text: they must agree with it).
pub fn check_kept(kept: &LazyObject) {
    let Some(raw) = kept.raw_json() else {
        return;
    };
    let tree: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(raw).expect("kept text is a JSON object");
    let plain = |key: &&str| !key.bytes().any(patchbay_signal::payload::needs_escape);
    let keys = tree.keys().map(String::as_str).filter(plain);
    for name in keys.chain(["seq", "extra", "invalid", "a"]) {
        let written = tree.get(name).map(|v| format!("\"{name}\":{v}"));
        let found = kept.raw_field(name).map(|f| f.map(|f| &raw[f]));
        assert_eq!(found, Some(written.as_deref()), "{name} in {raw}");
    }
}

/// `data` as text: its valid UTF-8 prefix (the text APIs take `&str`).
pub fn text(data: &[u8]) -> &str {
    match std::str::from_utf8(data) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&data[..e.valid_up_to()]).unwrap_or_default(),
    }
}
