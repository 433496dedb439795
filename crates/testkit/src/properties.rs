//! Property checks shared by the decoders' tests: arbitrary or damaged input never panics
//! and gives valid signals, and how the input is split into `feed` calls does not matter.
//!
//! Each takes `new_decoder`, which makes a fresh decoder under test (e.g. the adapter's
//! `parse_decoder`), and the seeded [`Rng`] to draw from, so every run checks the same cases.

use patchbay_signal::decode::StreamDecoder;
use serde_json::Value;

use crate::decoding::{comparable, decode_chunked, decode_split, decode_whole, stable};
use crate::prng::Rng;
use crate::random_input::{mutate, random_pieces};
use crate::validity::assert_all_decoded_valid;

/// `rounds` times: fewer than 200 of `pieces` and random bytes (one item in three), fed in
/// two random chunk sizes, decode without a panic to schema-valid signals.
pub fn assert_random_input_gives_schema_valid_signals(
    mut new_decoder: impl FnMut() -> Box<dyn StreamDecoder>,
    pieces: &[&str],
    rng: &mut Rng,
    rounds: usize,
) {
    for _ in 0..rounds {
        let bytes = random_pieces(rng, 200, pieces, 3);
        let sizes = [1 + rng.below(7), 1 + rng.below(64)];
        for d in decode_chunked(new_decoder().as_mut(), &bytes, &sizes) {
            crate::assert_schema_valid(&d.into_signal().to_value());
        }
    }
}

/// `rounds` times: `text` with a few random edits (see [`mutate`]; inserted bytes are the
/// first bytes of `pieces`), fed in chunks of one random size, decodes without a panic to
/// schema-valid signals.
pub fn assert_mutated_text_gives_schema_valid_signals(
    mut new_decoder: impl FnMut() -> Box<dyn StreamDecoder>,
    text: &str,
    pieces: &[&str],
    rng: &mut Rng,
    rounds: usize,
) {
    let inserts: Vec<u8> = pieces.iter().map(|p| p.as_bytes()[0]).collect();
    for _ in 0..rounds {
        let mut bytes = text.as_bytes().to_vec();
        mutate(rng, &mut bytes, &inserts);
        for d in decode_chunked(new_decoder().as_mut(), &bytes, &[1 + rng.below(300)]) {
            crate::assert_schema_valid(&d.into_signal().to_value());
        }
    }
}

/// `text` (`label` names it in failures) decodes to the same [`comparable`] signals whole,
/// in 30 random cycles of five chunk sizes up to 100, and in chunks of 3 without its
/// trailing newline.
pub fn assert_chunking_keeps_comparable(
    mut new_decoder: impl FnMut() -> Box<dyn StreamDecoder>,
    text: &str,
    label: &str,
    rng: &mut Rng,
) {
    let whole: Vec<_> = decode_chunked(new_decoder().as_mut(), text.as_bytes(), &[usize::MAX])
        .iter()
        .map(comparable)
        .collect();
    for _ in 0..30 {
        let sizes: Vec<usize> = (0..5).map(|_| 1 + rng.below(100)).collect();
        let split: Vec<_> = decode_chunked(new_decoder().as_mut(), text.as_bytes(), &sizes)
            .iter()
            .map(comparable)
            .collect();
        assert_eq!(whole, split, "{label} split as {sizes:?}");
    }
    // And with no trailing newline.
    let trimmed = text.trim_end();
    let cut: Vec<_> = decode_chunked(new_decoder().as_mut(), trimmed.as_bytes(), &[3])
        .iter()
        .map(comparable)
        .collect();
    assert_eq!(whole, cut, "{label} without its last newline");
}

/// `text` (`label` names it in failures) decodes whole to valid signals (see
/// [`assert_all_decoded_valid`]), and to the same [`stable`] signals cut at random 25
/// times: five times into pieces of 1–2 bytes, then of 1–`max_piece` bytes.
pub fn assert_random_splits_keep_stable(
    mut new_decoder: impl FnMut() -> Box<dyn StreamDecoder>,
    text: &str,
    label: &str,
    rng: &mut Rng,
    max_piece: usize,
) {
    let whole = decode_whole(new_decoder().as_mut(), text);
    assert_all_decoded_valid(&whole);
    let whole: Vec<Value> = whole.iter().map(stable).collect();
    for round in 0..25 {
        let max = if round < 5 { 2 } else { max_piece };
        let split: Vec<Value> = decode_split(new_decoder().as_mut(), text.as_bytes(), &mut || {
            rng.below(max) + 1
        })
        .iter()
        .map(stable)
        .collect();
        assert_eq!(split, whole, "{label}");
    }
}
