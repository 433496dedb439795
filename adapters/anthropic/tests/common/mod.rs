//! The decoder these tests drive; the rest of their support is `patchbay_testkit`'s.
#![allow(dead_code)]

use patchbay_signal::Signal;
use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_testkit::decoding::{decode_whole, into_signals};
use patchbay_testkit::validity::assert_all_decoded_valid;

/// A fresh decoder, as `parse:anthropic` builds it.
pub fn decoder() -> Box<dyn StreamDecoder> {
    patchbay_anthropic::parse_decoder("parse:anthropic")
}

/// Decodes `input` in one piece; every signal is checked valid.
pub fn decode(input: &str) -> Vec<Decoded> {
    let out = decode_whole(decoder().as_mut(), input);
    assert_all_decoded_valid(&out);
    out
}

/// The signals of [`decode`].
pub fn signals(input: &str) -> Vec<Signal> {
    into_signals(decode(input))
}
