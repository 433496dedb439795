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
    "\"jsonrpc\"",
    "\"2.0\"",
    "\"id\"",
    "\"method\"",
    "\"params\"",
    "\"result\"",
    "\"error\"",
    "\"agent.event\"",
    "\"run.status\"",
    "\"event\"",
    "\"type\"",
    "\"text\"",
    "\"final\"",
    "\"tool_call\"",
    "\"tool_result\"",
    "\"step_start\"",
    "\"llm.retry\"",
    "\"status\"",
    "\"running\"",
    "\"cancelled\"",
    "\"error\"",
    "\"run_id\"",
    "\"content\"",
    "\"timestamp\"",
    "\"ui.confirm.request\"",
    "\"client.tool.cancel\"",
    "\"request_id\"",
    "\"dir\"",
    "\"in\"",
    "\"msg\"",
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
    let text = fixture_text("codelia/codelia-run-mock-toolcalls.ndjson");
    let mut rng = Rng(42);
    assert_mutated_text_gives_schema_valid_signals(decoder, &text, PIECES, &mut rng, 300);
}

#[test]
fn splitting_does_not_change_the_signals() {
    let mut rng = Rng(7);
    for fixture in [
        "codelia/codelia-initialize-session-model.ndjson",
        "codelia/codelia-run-mock-cancel.ndjson",
        "codelia/codelia-run-mock-toolcalls.ndjson",
        "codelia/tui-test-wire-messages.ndjson",
    ] {
        assert_chunking_keeps_comparable(decoder, &fixture_text(fixture), fixture, &mut rng);
    }
}
