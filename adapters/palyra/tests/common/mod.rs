//! Test support: builds wire streams from Palyra's published golden run tape, and drives
//! decoders.
//!
//! The tape (`golden__run_tape_basic.json`) is the journal of one deterministic run:
//! entries `{seq, event_type, payload_json}`. Palyra's console writes each run stream event
//! as `{"type":"event","event":{run_id, event_type, <event_type>: <payload>}}` between a
//! `meta` line and a `complete` line; its realtime socket wraps the same event in an
//! `event` frame envelope `{schema_version, sequence, event_id, topic,
//! occurred_at_unix_ms, payload}`. These builders do exactly that.

// Each test binary uses a part of this module.
#![allow(dead_code, unused_imports)]

use patchbay_signal::Signal;
use patchbay_testkit::fixture_text;
use serde_json::{Value, json};

pub use patchbay_testkit::decoding::{decode_chunked, decode_whole, into_signals, kinds};
pub use patchbay_testkit::prng::Rng;
pub use patchbay_testkit::random_input::mutate;

/// Run id used for the tape (a canonical ULID, as Palyra requires).
pub const RUN: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";
/// Session id used for the tape.
pub const SESSION: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAW";
/// `occurred_at_unix_ms` of the first realtime event.
pub const T0: i64 = 1_700_000_000_000;

/// The tape entries: `(seq, event_type, payload)`.
pub fn tape() -> Vec<(u64, String, Value)> {
    let text = fixture_text("palyra/golden__run_tape_basic.json");
    let entries: Vec<Value> = serde_json::from_str(&text).expect("tape is JSON");
    entries
        .iter()
        .map(|e| {
            let seq = e["seq"].as_u64().expect("seq");
            let event_type = e["event_type"].as_str().expect("event_type").to_owned();
            let payload: Value =
                serde_json::from_str(e["payload_json"].as_str().expect("payload_json"))
                    .expect("payload_json is JSON");
            (seq, event_type, payload)
        })
        .collect()
}

/// One run stream event as the console serializes it.
pub fn run_event(run: &str, event_type: &str, body: Value) -> Value {
    json!({ "run_id": run, "event_type": event_type, event_type: body })
}

/// A realtime `event` frame carrying a run stream event.
pub fn event_frame(sequence: u64, occurred: i64, payload: Value) -> Value {
    json!({
        "type": "event",
        "payload": {
            "schema_version": 1,
            "sequence": sequence,
            "event_id": format!("evt-{sequence}"),
            "topic": "run",
            "sensitivity": "internal",
            "owner_session_id": SESSION,
            "occurred_at_unix_ms": occurred,
            "payload": payload,
        }
    })
}

/// The console NDJSON stream of the tape's run: meta, one event line per entry, complete
/// (with the last status, as the console does).
pub fn console_stream() -> String {
    let mut lines = vec![json!({ "type": "meta", "run_id": RUN, "session_id": SESSION })];
    let mut last_status = "unknown".to_owned();
    for (_, event_type, payload) in tape() {
        if event_type == "status" {
            last_status = payload["kind"].as_str().unwrap_or("unknown").to_owned();
        }
        lines.push(json!({ "type": "event", "event": run_event(RUN, &event_type, payload) }));
    }
    lines.push(json!({ "type": "complete", "run_id": RUN, "status": last_status }));
    ndjson(&lines)
}

/// The realtime frames of a connection that sees the tape's run: handshake.accepted,
/// subscribed, one event frame per entry (sequence = seq + 1, 10 ms apart).
pub fn realtime_frames() -> Vec<Value> {
    let mut frames = vec![handshake_accepted(0), subscribed()];
    for (seq, event_type, payload) in tape() {
        frames.push(event_frame(
            seq + 1,
            T0 + 10 * seq as i64,
            run_event(RUN, &event_type, payload),
        ));
    }
    frames
}

/// A `handshake.accepted` frame echoing `cursor`.
pub fn handshake_accepted(cursor: u64) -> Value {
    json!({
        "type": "handshake.accepted",
        "payload": {
            "protocol_version": 1,
            "client_id": "patchbay",
            "auth_subject": "user:ops",
            "role": "operator",
            "scopes": ["events:read", "runs:read"],
            "capabilities": ["event_stream"],
            "commands": ["run.get"],
            "cursor": { "sequence": cursor },
            "heartbeat_interval_ms": 15000,
            "server_time_unix_ms": T0 - 5,
            "sdk_abi_version": "palyra.realtime.sdk.v1",
        }
    })
}

/// A `subscribed` frame.
pub fn subscribed() -> Value {
    json!({ "type": "subscribed", "payload": { "subscriptions": [{ "topics": ["run"], "session_ids": [] }] } })
}

/// Values as NDJSON text.
pub fn ndjson(values: &[Value]) -> String {
    values.iter().map(|v| format!("{v}\n")).collect()
}

/// What must not depend on chunking or on the clock: everything but id and timestamp.
pub fn comparable(signals: &[Signal]) -> Vec<Value> {
    signals
        .iter()
        .map(|s| json!([s.kind, s.source, s.correlation_id, s.metadata, s.payload]))
        .collect()
}

/// Asserts every signal validates against sajou's schema (well-known ones included).
pub fn assert_all_valid(signals: &[Signal]) {
    for s in signals {
        patchbay_testkit::assert_schema_valid(&s.to_value());
        assert!(
            !s.kind.starts_with("invalid."),
            "decoder emitted an invalid well-known signal: {}",
            s.to_json()
        );
    }
}
