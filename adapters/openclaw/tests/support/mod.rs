//! The decoder these tests drive; the rest of their support is `patchbay_testkit`'s.
#![allow(dead_code)]

use patchbay_signal::Signal;
use patchbay_signal::decode::StreamDecoder;
use patchbay_testkit::decoding::{decode_whole, good_signals};

/// A fresh decoder, as `parse:openclaw` builds it.
pub fn decoder() -> Box<dyn StreamDecoder> {
    patchbay_openclaw::parse_decoder("parse:openclaw")
}

/// The signals of `text` decoded in one `feed`, asserting none reports bad input.
pub fn signals(text: &str) -> Vec<Signal> {
    good_signals(decode_whole(decoder().as_mut(), text))
}
