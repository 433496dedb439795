//! Property-style tests: arbitrary input never panics, every emitted well-known signal is
//! schema-valid, and how input is split into `feed` calls does not matter.

mod common;

use common::*;
use patchbay_palyra::{AcpClientContext, AcpCommander, PalyraDecoder};
use patchbay_signal::Signal;
use serde_json::{Map, Value, json};

const SOURCE: &str = "parse:palyra";

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..300 {
        let len = rng.below(600);
        let bytes: Vec<u8> = (0..len)
            .map(|_| match rng.below(4) {
                // Lean towards JSON punctuation and newlines so lines get parsed.
                0 => b"{}[]\":,\n"[rng.below(8)],
                _ => rng.next_u64() as u8,
            })
            .collect();
        let sizes = [rng.below(40) + 1, rng.below(5) + 1];
        let out = decode_chunked(&mut PalyraDecoder::new(SOURCE), &bytes, &sizes);
        assert_all_valid(&into_signals(out));
    }
}

#[test]
fn mutated_streams_never_panic_and_stay_valid() {
    let mut rng = Rng(42);
    let mut base = console_stream();
    base.push_str(&ndjson(&realtime_frames()));
    let base = base.into_bytes();
    for _ in 0..300 {
        let mut bytes = base.clone();
        mutate(&mut rng, &mut bytes, b"\"{}[],:0n\n");
        let out = decode_chunked(
            &mut PalyraDecoder::new(SOURCE),
            &bytes,
            &[rng.below(64) + 1],
        );
        assert_all_valid(&into_signals(out));
    }
}

const KEYS: [&str; 24] = [
    "type",
    "event",
    "payload",
    "run_id",
    "event_type",
    "status",
    "kind",
    "message",
    "token",
    "model_token",
    "tool_proposal",
    "tool_result",
    "proposal_id",
    "tool_name",
    "input_json",
    "output_json",
    "sequence",
    "occurred_at_unix_ms",
    "error",
    "ok",
    "request_id",
    "a2ui_update",
    "patch_json",
    "tool_approval_request",
];
const WORDS: [&str; 16] = [
    "meta",
    "event",
    "error",
    "complete",
    "handshake.accepted",
    "subscribed",
    "command.result",
    "snapshot.required",
    "status",
    "accepted",
    "in_progress",
    "done",
    "failed",
    "model_token",
    "tool_approval_response",
    "a2ui_update",
];

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 3 { 5 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => json!(rng.next_u64() as i64 >> rng.below(64)),
        3 => Value::String(WORDS[rng.below(WORDS.len())].to_owned()),
        4 => Value::String(RUN.to_owned()),
        5 => Value::Array(
            (0..rng.below(3))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut obj = Map::new();
            for _ in 0..rng.below(6) {
                obj.insert(
                    KEYS[rng.below(KEYS.len())].to_owned(),
                    random_value(rng, depth + 1),
                );
            }
            Value::Object(obj)
        }
    }
}

#[test]
fn random_protocol_shaped_json_never_panics_and_stays_valid() {
    let mut rng = Rng(7);
    let mut commander = AcpCommander::new(AcpClientContext::new("p", "user:ops", "dev"));
    for _ in 0..2000 {
        let line = random_value(&mut rng, 0);
        let mut decoder = PalyraDecoder::new(SOURCE);
        let out = decode_whole(&mut decoder, &format!("{line}\n"));
        let signals = into_signals(out);
        assert_all_valid(&signals);
        for s in &signals {
            commander.observe(s);
        }
        // The encoder never panics on arbitrary control payloads either.
        let payload = match random_value(&mut rng, 1) {
            Value::Object(o) => o,
            _ => Map::new(),
        };
        for kind in ["control.cancel", "control.answer", "control.pause"] {
            let _ = commander.encode(&Signal::new(kind, "x", payload.clone()));
        }
    }
}

#[test]
fn random_chunking_is_irrelevant() {
    let mut text = console_stream();
    text.push_str(&ndjson(&realtime_frames()));
    text.push_str("garbage line\n");
    let reference = comparable(&into_signals(decode_whole(
        &mut PalyraDecoder::new(SOURCE),
        &text,
    )));
    let mut rng = Rng(99);
    for _ in 0..50 {
        let sizes: Vec<usize> = (0..5).map(|_| rng.below(30) + 1).collect();
        let out = decode_chunked(&mut PalyraDecoder::new(SOURCE), text.as_bytes(), &sizes);
        assert_eq!(comparable(&into_signals(out)), reference);
    }
}
