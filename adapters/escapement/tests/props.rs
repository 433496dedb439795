//! Property-style tests: arbitrary bytes never panic, and how the input is split into
//! `feed` calls does not matter.

mod support;

use patchbay_testkit::fixture_text;
use patchbay_testkit::prng::Rng;
use patchbay_testkit::properties::{
    assert_chunking_keeps_comparable, assert_mutated_text_gives_schema_valid_signals,
    assert_random_input_gives_schema_valid_signals,
};
use support::decoder;

/// Pieces that make random input likely to reach deep into the decoder.
const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\n",
    "\r\n",
    "null",
    "true",
    "1",
    "-3",
    "1e400",
    "\"kind\"",
    "\"event\"",
    "\"control\"",
    "\"prompt\"",
    "\"phase\"",
    "\"seq\"",
    "\"ts\"",
    "\"data\"",
    "\"llm/delta\"",
    "\"llm/response\"",
    "\"llm/start\"",
    "\"llm/tool-result\"",
    "\"llm/model-down\"",
    "\"usage\"",
    "\"input-tokens\"",
    "\"output-tokens\"",
    "\"type\"",
    "\"text\"",
    "\"thinking-delta\"",
    "\"invokeid\"",
    "\"session-id\"",
    "\"op\"",
    "\"dir\"",
    "\"in\"",
    "\"frame\"",
    "\"t\"",
    "\u{e9}",
    "\u{1F600}",
];

#[test]
fn arbitrary_bytes_never_panic_and_give_valid_signals() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    assert_random_input_gives_schema_valid_signals(decoder, PIECES, &mut rng, 3000);
}

#[test]
fn mutated_fixture_lines_never_panic() {
    let text = fixture_text("escapement/haiku-sample.jsonl");
    let mut rng = Rng(42);
    assert_mutated_text_gives_schema_valid_signals(decoder, &text, PIECES, &mut rng, 300);
}

#[test]
fn splitting_does_not_change_the_signals() {
    let mut rng = Rng(7);
    for fixture in [
        "escapement/haiku-sample.jsonl",
        "escapement/live-streaming.jsonl",
    ] {
        assert_chunking_keeps_comparable(decoder, &fixture_text(fixture), fixture, &mut rng);
    }
}
