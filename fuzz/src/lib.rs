//! What the fuzz targets share: driving a decoder over arbitrary bytes, split where the
//! input says, and checking what comes out the way the decoders' tests do (every signal,
//! bad-input reports included, valid against sajou's schema and patchbay's typed check).

use patchbay_signal::Signal;
use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;

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

/// Panics unless `signal` is valid.
pub fn check_signal(signal: &Signal) {
    patchbay_testkit::validity::assert_valid(signal);
}

/// `data` as text: its valid UTF-8 prefix (the text APIs take `&str`).
pub fn text(data: &[u8]) -> &str {
    match std::str::from_utf8(data) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&data[..e.valid_up_to()]).unwrap_or_default(),
    }
}
