//! The generic SSE decoder over real captures and edge cases.

use patchbay_signal::Signal;
use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_sse::{SseDecoder, parse_decoder};
use patchbay_testkit::decoding::{decode_split, decode_whole, into_signals};
use patchbay_testkit::prng::Rng;
use patchbay_testkit::random_input::random_pieces;
use patchbay_testkit::validity::assert_all_decoded_valid;
use patchbay_testkit::{assert_schema_valid, fixture_text};
use serde_json::{Value, json};

/// Decodes `input` in one piece with `parse:sse`.
fn decode(input: &str) -> Vec<Decoded> {
    decode_whole(parse_decoder("parse:sse").as_mut(), input)
}

fn signals(input: &str) -> Vec<Signal> {
    into_signals(decode(input))
}

/// The parts of a signal that do not depend on the clock or the id generator.
fn stable(decoded: &Decoded) -> Value {
    let (Decoded::Signal(s) | Decoded::BadInput(s)) = decoded;
    let mut v = s.to_value();
    if let Some(o) = v.as_object_mut() {
        if s.id.len() == 26 {
            o.remove("id");
        }
        o.remove("timestamp");
    }
    json!({"bad": decoded.is_bad(), "signal": v})
}

#[test]
fn sajou_scenarios_served_as_sse_round_trip() {
    for name in [
        "sajou/emitter-scenario-simple-task.jsonl",
        "sajou/emitter-scenario-multi-agent.jsonl",
        "sajou/emitter-scenario-error-recovery.jsonl",
    ] {
        let mut sse = String::from(": patchbay test stream\r\n\r\n");
        let mut expected = Vec::new();
        for (n, line) in fixture_text(name).lines().enumerate() {
            let v: Value = serde_json::from_str(line).unwrap();
            let signal = v["signal"].clone();
            // Every other event is named, some carry an id; CRLF endings throughout.
            if n % 2 == 1 {
                sse.push_str("event: signal\r\n");
            }
            sse.push_str(&format!("id: {n}\r\ndata: {signal}\r\n\r\n"));
            expected.push((n, signal));
        }
        let out = decode(&sse);
        assert_all_decoded_valid(&out);
        assert_eq!(out.len(), expected.len(), "{name}");
        for (decoded, (n, original)) in out.iter().zip(&expected) {
            assert!(!decoded.is_bad());
            let s = decoded.clone().into_signal();
            assert_eq!(s.id, original["id"], "{name}: ids kept");
            assert_eq!(s.kind, original["type"]);
            assert_eq!(s.timestamp, 0, "timestamp 0 kept");
            assert_eq!(Value::Object(s.payload.clone()), original["payload"]);
            assert_eq!(
                s.correlation_id.as_deref(),
                original["correlationId"].as_str()
            );
            assert_eq!(s.meta("sseId"), Some(&json!(n.to_string())));
            if n % 2 == 1 {
                assert_eq!(s.meta("sseEvent"), Some(&json!("signal")));
            } else {
                assert_eq!(s.meta("sseEvent"), None);
            }
        }
    }
}

#[test]
fn openai_capture_decodes_generically_and_done_emits_nothing() {
    let text = fixture_text("openai/openai-python-chat-stream-finish-length.sse");
    let mut d = SseDecoder::new("parse:sse");
    let mut out = Vec::new();
    d.feed(text.as_bytes(), &mut out);
    d.finish(&mut out);
    assert_all_decoded_valid(&out);
    assert!(d.is_done());
    // Four chunks, no `type`: generic events with the chunk as payload; `[DONE]` nothing.
    let kinds: Vec<_> = out.iter().map(|d| d.clone().into_signal().kind).collect();
    assert_eq!(kinds, ["event", "event", "event", "event"]);
    let last = out[3].clone().into_signal();
    assert_eq!(last.payload["usage"]["prompt_tokens"], 79);
}

#[test]
fn anthropic_captures_are_envelopes_named_by_their_type() {
    for (name, count) in [
        ("anthropic/py-basic_response.sse", 9),
        ("anthropic/py-tool_use_response.sse", 15),
    ] {
        let out = signals(&fixture_text(name));
        assert_eq!(out.len(), count, "{name}");
        for s in &out {
            // The JSON `type` is the signal type; the SSE event name agrees with it.
            assert_eq!(
                s.meta("sseEvent").and_then(Value::as_str),
                Some(s.kind.as_str())
            );
            assert_schema_valid(&s.to_value());
        }
        // The file has no newline at its end: the last event is still decoded.
        assert_eq!(out.last().unwrap().kind, "message_stop");
    }
}

#[test]
fn bad_data_is_reported_with_sse_fields() {
    let out = decode(
        "id: 4\nevent: oops\ndata: {not json\n\ndata: {\"type\":\"x\",\"timestamp\":77}\n\ndata: nope\n\n",
    );
    assert_all_decoded_valid(&out);
    assert!(out[0].is_bad());
    let bad = out[0].clone().into_signal();
    assert_eq!(bad.payload["code"], "bad_frame");
    assert_eq!(bad.meta("sseId"), Some(&json!("4")));
    assert_eq!(bad.meta("sseEvent"), Some(&json!("oops")));
    assert_eq!(bad.timestamp, 0, "no good signal yet");
    assert!(!out[1].is_bad());
    let later_bad = out[2].clone().into_signal();
    assert_eq!(
        later_bad.timestamp, 77,
        "stamped with the last good signal's time"
    );
}

#[test]
fn multiline_data_is_one_payload() {
    let out = signals(
        "data: {\"type\": \"text_delta\",\ndata:  \"payload\": {\"agentId\": \"a\", \"content\": \"x\"}}\n\n",
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].kind, "text_delta");
    assert_eq!(out[0].payload["content"], "x");
}

#[test]
fn retry_and_message_event_name() {
    let out = signals("event: message\nretry: 2500\ndata: {\"type\":\"a\"}\n\n");
    assert_eq!(
        out[0].meta("sseEvent"),
        None,
        "`message` is the default name"
    );
    assert_eq!(out[0].meta("sseRetry"), Some(&json!(2500)));
    assert_eq!(out[0].meta("sseId"), None);
}

#[test]
fn cut_off_last_event_and_done_handling() {
    let out = signals("data: {\"type\":\"a\"}\n\ndata: [DONE]\n\ndata: {\"type\":\"b\"}");
    let kinds: Vec<_> = out.iter().map(|s| s.kind.as_str()).collect();
    assert_eq!(kinds, ["a", "b"]);
    let mut d = SseDecoder::new("x:y");
    let mut out = Vec::new();
    d.feed(b"id: 12\n\ndata:  [DONE] \n\n", &mut out);
    assert!(out.is_empty());
    assert!(d.is_done());
    assert_eq!(d.last_event_id(), Some("12"));
    d.feed(b"retry: 10\n\n", &mut out);
    assert_eq!(d.retry(), Some(10));
}

#[test]
fn empty_data_emits_nothing() {
    assert!(decode("data:\n\ndata\n\n: only a comment\n\n").is_empty());
}

#[test]
fn insensitive_to_how_input_is_split() {
    let mut inputs = vec![
        fixture_text("anthropic/py-tool_use_response.sse"),
        fixture_text("openai/openai-python-chat-stream-tool-call-single.sse").replace('\n', "\r\n"),
        "\u{feff}data: {\"type\":\"é☃\"}\r\rdata: bad\rid: 1\r\rdata: {\"x\":1}".to_owned(),
    ];
    inputs.push(inputs[0].replace('\n', "\r"));
    let mut rng = Rng(0x5EED);
    for input in &inputs {
        let whole: Vec<Value> = decode(input).iter().map(stable).collect();
        assert!(!whole.is_empty());
        for round in 0..40 {
            let max = if round < 10 { 3 } else { 64 };
            let split: Vec<Value> = decode_split(
                parse_decoder("parse:sse").as_mut(),
                input.as_bytes(),
                &mut || rng.below(max) + 1,
            )
            .iter()
            .map(stable)
            .collect();
            assert_eq!(split, whole);
        }
    }
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = Rng(42);
    let alphabet: &[&[u8]] = &[
        b"data:",
        b"event:",
        b"id:",
        b"retry:",
        b":",
        b" ",
        b"\n",
        b"\r",
        b"\r\n",
        b"{",
        b"}",
        b"\"type\"",
        b"[DONE]",
        b"\xEF\xBB\xBF",
        b"\xFF",
        b"\0",
        b"123",
    ];
    for _ in 0..300 {
        let input = random_pieces(&mut rng, 400, alphabet, 3);
        let out = decode_split(parse_decoder("parse:sse").as_mut(), &input, &mut || {
            rng.below(16) + 1
        });
        assert_all_decoded_valid(&out);
    }
}
