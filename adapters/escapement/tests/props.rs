//! Property-style tests: arbitrary bytes never panic, and how the input is split into
//! `feed` calls does not matter.

mod support;

use patchbay_testkit::fixture_text;
use support::{Rng, comparable, decode_chunked};

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

fn random_input(rng: &mut Rng) -> Vec<u8> {
    let mut bytes = Vec::new();
    for _ in 0..rng.below(200) {
        if rng.below(3) == 0 {
            bytes.push(rng.next() as u8);
        } else {
            bytes.extend_from_slice(PIECES[rng.below(PIECES.len())].as_bytes());
        }
    }
    bytes
}

#[test]
fn arbitrary_bytes_never_panic_and_give_valid_signals() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for _ in 0..3000 {
        let bytes = random_input(&mut rng);
        let sizes = [1 + rng.below(7), 1 + rng.below(64)];
        for d in decode_chunked(&bytes, &sizes) {
            patchbay_testkit::assert_schema_valid(&d.into_signal().to_value());
        }
    }
}

#[test]
fn mutated_fixture_lines_never_panic() {
    let text = fixture_text("escapement/haiku-sample.jsonl");
    let mut rng = Rng(42);
    for _ in 0..300 {
        let mut bytes = text.clone().into_bytes();
        for _ in 0..1 + rng.below(8) {
            let at = rng.below(bytes.len());
            match rng.below(3) {
                0 => bytes[at] = rng.next() as u8,
                1 => {
                    bytes.remove(at);
                }
                _ => bytes.insert(at, PIECES[rng.below(PIECES.len())].as_bytes()[0]),
            }
        }
        for d in decode_chunked(&bytes, &[1 + rng.below(300)]) {
            patchbay_testkit::assert_schema_valid(&d.into_signal().to_value());
        }
    }
}

#[test]
fn splitting_does_not_change_the_signals() {
    let mut rng = Rng(7);
    for fixture in [
        "escapement/haiku-sample.jsonl",
        "escapement/live-streaming.jsonl",
    ] {
        let text = fixture_text(fixture);
        let whole: Vec<_> = decode_chunked(text.as_bytes(), &[usize::MAX])
            .iter()
            .map(comparable)
            .collect();
        for _ in 0..30 {
            let sizes: Vec<usize> = (0..5).map(|_| 1 + rng.below(100)).collect();
            let split: Vec<_> = decode_chunked(text.as_bytes(), &sizes)
                .iter()
                .map(comparable)
                .collect();
            assert_eq!(whole, split, "{fixture} split as {sizes:?}");
        }
        // And with no trailing newline.
        let trimmed = text.trim_end();
        let cut: Vec<_> = decode_chunked(trimmed.as_bytes(), &[3])
            .iter()
            .map(comparable)
            .collect();
        assert_eq!(whole, cut, "{fixture} without its last newline");
    }
}
