//! Hand-written cases for every decoding rule, including those the fixtures don't show.

mod support;

use patchbay_escapement::EscapementDecoder;
use patchbay_signal::Signal;
use patchbay_signal::decode::FrameDecoder as _;
use patchbay_signal::normalize::Decoded;
use patchbay_testkit::decoding::{decode_whole, good_signals, kinds};
use patchbay_testkit::validity::assert_all_valid;
use serde_json::{Value, json};
use support::signals;

fn decode_one(frame: Value) -> Vec<Signal> {
    let mut d = EscapementDecoder::new("escapement:test");
    let mut out = Vec::new();
    d.decode_frame(frame, None, &mut out);
    let out = good_signals(out);
    assert_all_valid(&out);
    out
}

fn event(name: &str, data: Value) -> Value {
    json!({"kind": "event", "seq": 1, "ts": 1000, "event": name, "data": data})
}

#[test]
fn frames_seen_before_a_reconnect_are_dropped() {
    let mut d = EscapementDecoder::new("escapement:test");
    let mut out = Vec::new();
    for seq in 0..5 {
        d.decode_frame(event("runner/tick", json!({"n": seq})), None, &mut out);
        let last = out.last().unwrap().clone().into_signal();
        assert_eq!(
            last.meta("upstreamSeq").unwrap(),
            &json!(1),
            "event() uses seq 1"
        );
    }
    // Only the first seq 1 passed.
    assert_eq!(out.len(), 1);

    let mut d = EscapementDecoder::new("escapement:test");
    let mut out = Vec::new();
    let frame = |seq: u64| json!({"kind": "event", "seq": seq, "ts": 1, "event": "x", "data": {}});
    for seq in 0..=5 {
        d.decode_frame(frame(seq), None, &mut out);
    }
    // Reconnect: the agent replays from 3.
    for seq in 3..=7 {
        d.decode_frame(frame(seq), None, &mut out);
    }
    let seqs: Vec<u64> = out
        .iter()
        .map(|d| {
            d.clone()
                .into_signal()
                .meta("upstreamSeq")
                .unwrap()
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(d.dedupe().highest(), Some(7));
    assert_eq!(d.dedupe().dropped(), 3);

    // Frames without seq are never dropped.
    let no_seq = json!({"kind": "event", "ts": 1, "event": "x", "data": {}});
    d.decode_frame(no_seq.clone(), None, &mut out);
    d.decode_frame(no_seq, None, &mut out);
    assert_eq!(out.len(), 10);

    // A new agent session: the transport resets, seq 0 passes again.
    d.dedupe_mut().reset();
    d.decode_frame(frame(0), None, &mut out);
    assert_eq!(out.len(), 11);
}

#[test]
fn a_raw_transcript_line_without_kind_is_an_event() {
    let out = decode_one(json!({"seq": 4, "ts": 7, "event": "llm/start",
        "data": {"invokeid": "a", "session-id": "s"}, "transcript/node-id": "n1", "transcript/visit": 2}));
    assert_eq!(kinds(&out), ["agent_state_change"]);
    assert_eq!(out[0].meta("transcript/node-id").unwrap(), "n1");
    assert_eq!(out[0].meta("transcript/visit").unwrap(), 2);
    assert_eq!(out[0].meta("upstreamSeq").unwrap(), 4);
    assert_eq!(out[0].timestamp, 7);
}

#[test]
fn agent_control_frames_never_become_control_signals() {
    let out =
        decode_one(json!({"kind": "control", "op": "run-finished", "final-config": "[:done]"}));
    assert_eq!(kinds(&out), ["escapement.run_finished"]);
    assert_eq!(out[0].payload["final-config"], "[:done]");
    assert_eq!(out[0].payload["op"], "run-finished");
    // Even a UI op seen on the forward path stays under escapement.*.
    let out = decode_one(json!({"kind": "control", "op": "ui-quit"}));
    assert_eq!(kinds(&out), ["escapement.ui_quit"]);
    let out = decode_one(json!({"kind": "control"}));
    assert_eq!(kinds(&out), ["escapement.control"]);
}

#[test]
fn phase_prompt_debug_and_unknown_kinds() {
    let out =
        decode_one(json!({"kind": "debug", "seq": 9, "ts": 5, "paused": true, "step-budget": 0}));
    assert_eq!(kinds(&out), ["escapement.debug"]);
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"paused": true, "step-budget": 0})
    );
    assert_eq!(out[0].meta("upstreamSeq").unwrap(), 9);
    assert_eq!(out[0].timestamp, 5);

    let out = decode_one(
        json!({"kind": "prompt", "prompt-id": "p#1", "invokeid": "p", "type": "confirm",
        "opts": {"prompt": "Sure?", "default": true}}),
    );
    assert_eq!(kinds(&out), ["escapement.prompt"]);
    assert_eq!(out[0].payload["opts"]["default"], true);

    let out = decode_one(json!({"kind": "hello", "x": 1}));
    assert_eq!(kinds(&out), ["escapement.hello"]);
    assert_eq!(out[0].payload["x"], 1);
}

#[test]
fn deltas() {
    let thinking = decode_one(event(
        "llm/delta",
        json!({"type": "thinking-delta", "text": "hmm", "invokeid": "a", "session-id": "s"}),
    ));
    assert_eq!(kinds(&thinking), ["thinking"]);
    assert_eq!(
        Value::Object(thinking[0].payload.clone()),
        json!({"agentId": "a", "content": "hmm"})
    );
    assert_eq!(thinking[0].correlation_id.as_deref(), Some("s"));
    assert!(thinking[0].meta("extra").is_none());

    // An unknown delta type, or a delta without text, keeps the event as it is.
    let other = decode_one(event(
        "llm/delta",
        json!({"type": "tool-input-delta", "text": "{", "invokeid": "a"}),
    ));
    assert_eq!(kinds(&other), ["llm/delta"]);
    assert_eq!(other[0].payload["type"], "tool-input-delta");
    let no_text = decode_one(event(
        "llm/delta",
        json!({"type": "text-delta", "invokeid": "a"}),
    ));
    assert_eq!(kinds(&no_text), ["llm/delta"]);

    // An empty text is still a (valid) delta.
    let empty = decode_one(event(
        "llm/delta",
        json!({"type": "text-delta", "text": "", "invokeid": "a"}),
    ));
    assert_eq!(kinds(&empty), ["text_delta"]);
    assert_eq!(empty[0].payload["content"], "");
}

#[test]
fn missing_invokeid_falls_back_to_the_source() {
    let out = decode_one(event("llm/start", json!({})));
    assert_eq!(out[0].payload["agentId"], "escapement:test");
    assert!(out[0].correlation_id.is_none());
}

#[test]
fn responses() {
    // No usage: no token_usage at all (never 0/0).
    let out = decode_one(event(
        "llm/response",
        json!({"invokeid": "a", "session-id": "s", "stop-reason": "end_turn"}),
    ));
    assert_eq!(kinds(&out), ["completion"]);
    // Usage without counts: still none, and the usage is kept.
    let out = decode_one(event(
        "llm/response",
        json!({"invokeid": "a", "usage": {"cache": 3}}),
    ));
    assert_eq!(kinds(&out), ["completion"]);
    assert_eq!(out[0].meta("extra").unwrap()["usage"], json!({"cache": 3}));
    // No session-id: the task is the invokeid; no stop-reason: success, no result.
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"taskId": "a", "agentId": "a", "success": true})
    );
    // One count only: the other is 0 and named in metadata.missing.
    let out = decode_one(event(
        "llm/response",
        json!({"invokeid": "a", "usage": {"output-tokens": 7, "cache-read": 2}, "stop-reason": "max_tokens"}),
    ));
    assert_eq!(kinds(&out), ["token_usage", "completion"]);
    assert_eq!(out[0].payload["promptTokens"], 0);
    assert_eq!(out[0].payload["completionTokens"], 7);
    assert_eq!(out[0].meta("missing").unwrap(), &json!(["promptTokens"]));
    assert_eq!(out[0].meta("usage").unwrap(), &json!({"cache-read": 2}));
    assert_eq!(
        out[1].payload["success"], false,
        "max_tokens is not a success"
    );
    assert_eq!(out[1].payload["result"], "max_tokens");
    let out = decode_one(event(
        "llm/response",
        json!({"invokeid": "a", "stop-reason": "refusal"}),
    ));
    assert_eq!(out[0].payload["success"], false);
    // Both share the frame's time and seq.
    let out = decode_one(event(
        "llm/response",
        json!({"invokeid": "a", "usage": {"input-tokens": 1, "output-tokens": 2}}),
    ));
    assert!(
        out.iter()
            .all(|s| s.timestamp == 1000 && s.meta("upstreamSeq") == Some(&json!(1)))
    );
}

#[test]
fn tool_results_and_errors() {
    let out = decode_one(event(
        "llm/tool-result",
        json!({"tool": "t", "is-error": true, "invokeid": "a", "extra-key": 1}),
    ));
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"toolName": "t", "agentId": "a", "success": false})
    );
    assert_eq!(out[0].meta("extra").unwrap(), &json!({"extra-key": 1}));
    // Without a tool name there is no valid tool_result: kept as the event.
    let out = decode_one(event("llm/tool-result", json!({"invokeid": "a"})));
    assert_eq!(kinds(&out), ["llm/tool-result"]);

    let out = decode_one(event(
        "llm/model-down",
        json!({"message": "gone", "remaining": 0, "invokeid": "a"}),
    ));
    assert_eq!(out[0].payload["severity"], "error", "no model left");
    let out = decode_one(event("llm/error", json!({"invokeid": "a"})));
    assert_eq!(out[0].payload["message"], "llm/error without a message");
    let out = decode_one(event("llm/error", json!({"message": {"nested": 1}})));
    assert_eq!(out[0].payload["message"], r#"{"nested":1}"#);
}

#[test]
fn odd_data_and_times() {
    let out = decode_one(json!({"kind": "event", "ts": 12.9, "event": "x/y", "data": [1, 2]}));
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"value": [1, 2]})
    );
    assert_eq!(out[0].timestamp, 12);
    let out = decode_one(json!({"kind": "event", "ts": "soon", "event": "x/y"}));
    assert!(out[0].payload.is_empty());
    assert_eq!(out[0].meta("ts").unwrap(), "soon");
    assert!(out[0].timestamp > 1_600_000_000_000, "now");
    let out = decode_one(json!({"kind": "event", "seq": "7", "ts": 1, "event": "x/y"}));
    assert_eq!(
        out[0].meta("upstreamSeq").unwrap(),
        "7",
        "a non-numeric seq is kept, not deduped"
    );
    let out = decode_one(json!({"kind": "event", "ts": 1, "data": {"a": 1}}));
    assert_eq!(kinds(&out), ["escapement.event"]);
    assert_eq!(out[0].payload["data"], json!({"a": 1}));
}

#[test]
fn bad_input_is_reported_at_the_last_good_time() {
    let text = "not json\n[1,2]\n{\"no\":\"kind\"}\n{\"kind\":\"event\",\"ts\":77,\"event\":\"a\"}\n{oops\n";
    let out = decode_whole(support::decoder().as_mut(), text);
    let bad: Vec<&Decoded> = out.iter().filter(|d| d.is_bad()).collect();
    assert_eq!(bad.len(), 4);
    let stamps: Vec<i64> = out
        .iter()
        .map(|d| d.clone().into_signal().timestamp)
        .collect();
    assert_eq!(stamps, [0, 0, 0, 77, 77]);
    for d in &out {
        let s = d.clone().into_signal();
        patchbay_testkit::assert_schema_valid(&s.to_value());
        if d.is_bad() {
            assert_eq!(s.kind, "error");
            assert_eq!(s.payload["code"], "bad_frame");
            assert_eq!(s.payload["severity"], "warning");
            assert!(s.meta("raw").is_some());
        }
    }
}

#[test]
fn text_frames_decode_like_lines() {
    let mut d = EscapementDecoder::new("escapement:test");
    let mut out = Vec::new();
    d.decode_text(r#"{"kind":"phase","ts":3,"config":["a"]}"#, &mut out);
    d.decode_text("   ", &mut out);
    d.decode_text("{", &mut out);
    assert_eq!(out.len(), 2);
    assert!(out[1].is_bad());
    assert_eq!(out[1].clone().into_signal().timestamp, 3);
    let signals = signals("{\"kind\":\"phase\",\"ts\":3}\r\n\r\n");
    assert_eq!(kinds(&signals), ["escapement.phase"]);
}

#[test]
fn an_unmapped_event_named_like_a_well_known_type_is_repaired_or_marked_invalid() {
    // Found by fuzzing: the event kept its name, `user.move`, without the payload sajou's
    // schema requires for it.
    let out = decode_one(event("user.move", json!({"invokeid": "host", "text": "x"})));
    assert_eq!(kinds(&out), ["invalid.user.move"]);
    let out = decode_one(event(
        "text_delta",
        json!({"invokeid": "host", "agentId": "a", "content": "hi"}),
    ));
    assert_eq!(kinds(&out), ["text_delta"]);
}
