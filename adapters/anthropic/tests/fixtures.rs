//! Golden tests over every Anthropic capture in `tests/fixtures/anthropic/`.

mod common;

use common::{decode, decoder, signals};
use patchbay_signal::Signal;
use patchbay_testkit::decoding::{kinds, stable};
use patchbay_testkit::fixture_text;
use patchbay_testkit::prng::Rng;
use patchbay_testkit::properties::assert_random_splits_keep_stable;
use serde_json::{Value, json};

const CAPTURES: [&str; 3] = [
    "anthropic/py-basic_response.sse",
    "anthropic/py-tool_use_response.sse",
    "anthropic/vercel-anthropic-text.chunks.jsonl",
];

/// The JSON events of a capture, SSE or JSON lines.
fn events(capture: &str) -> Vec<Value> {
    capture
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").or(l.starts_with('{').then_some(l)))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The text of a capture's text deltas and the assembled JSON of its tool blocks, straight
/// from the JSON events.
fn expected_text_and_tools(capture: &str) -> (String, Vec<(String, String, Value)>) {
    let mut text = String::new();
    let mut tools: Vec<(u64, String, String, String)> = Vec::new();
    for e in events(capture) {
        match e["type"].as_str().unwrap() {
            "content_block_start" if e["content_block"]["type"] == "tool_use" => tools.push((
                e["index"].as_u64().unwrap(),
                e["content_block"]["id"].as_str().unwrap().to_owned(),
                e["content_block"]["name"].as_str().unwrap().to_owned(),
                String::new(),
            )),
            "content_block_delta" => match e["delta"]["type"].as_str().unwrap() {
                "text_delta" => text.push_str(e["delta"]["text"].as_str().unwrap()),
                "input_json_delta" => {
                    let t = tools
                        .iter_mut()
                        .find(|t| t.0 == e["index"].as_u64().unwrap())
                        .unwrap();
                    t.3.push_str(e["delta"]["partial_json"].as_str().unwrap());
                }
                _ => {}
            },
            _ => {}
        }
    }
    let tools = tools
        .into_iter()
        .map(|(_, id, name, json)| (id, name, serde_json::from_str(&json).unwrap()))
        .collect();
    (text, tools)
}

fn check_against_capture(name: &str, capture: &str, out: &[Signal]) {
    let (text, tools) = expected_text_and_tools(capture);
    let decoded: String = out
        .iter()
        .filter(|s| s.kind == "text_delta")
        .map(|s| s.payload["content"].as_str().unwrap())
        .collect();
    assert_eq!(decoded, text, "{name}: reassembled text");
    for (i, s) in out.iter().filter(|s| s.kind == "text_delta").enumerate() {
        assert_eq!(s.payload["index"], json!(i), "{name}");
    }
    let calls: Vec<&Signal> = out.iter().filter(|s| s.kind == "tool_call").collect();
    assert_eq!(calls.len(), tools.len(), "{name}");
    for (s, (id, tool, input)) in calls.iter().zip(&tools) {
        assert_eq!(s.payload["callId"], json!(id));
        assert_eq!(s.payload["toolName"], json!(tool));
        assert_eq!(&s.payload["input"], input, "{name}: tool input complete");
    }
    let evs = events(capture);
    let start = &evs[0]["message"];
    let delta = evs.iter().find(|e| e["type"] == "message_delta").unwrap();
    for s in out {
        assert_eq!(s.correlation_id.as_deref(), start["id"].as_str(), "{name}");
    }
    let first = &out[0];
    assert_eq!(first.kind, "agent_state_change");
    assert_eq!(
        Value::Object(first.payload.clone()),
        json!({"agentId": start["model"], "from": "idle", "to": "thinking"})
    );
    let usage: Vec<&Signal> = out.iter().filter(|s| s.kind == "token_usage").collect();
    assert_eq!(usage.len(), 1);
    assert_eq!(
        usage[0].payload["promptTokens"],
        start["usage"]["input_tokens"]
    );
    assert_eq!(
        usage[0].payload["completionTokens"],
        delta["usage"]["output_tokens"]
    );
    assert_eq!(usage[0].payload["model"], start["model"]);
    let last = out.last().unwrap();
    assert_eq!(last.kind, "completion");
    assert_eq!(
        Value::Object(last.payload.clone()),
        json!({"taskId": start["id"], "agentId": start["model"], "success": true,
               "result": delta["delta"]["stop_reason"]})
    );
}

#[test]
fn basic_response() {
    let capture = fixture_text(CAPTURES[0]);
    let out = signals(&capture);
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "text_delta",
            "text_delta",
            "text_delta",
            "token_usage",
            "completion"
        ]
    );
    assert_eq!(out[1].meta("block"), Some(&json!(0)));
    assert_eq!(out[4].payload["promptTokens"], 11);
    assert_eq!(out[4].payload["completionTokens"], 6);
    assert_eq!(out[5].payload["result"], "end_turn");
    check_against_capture(CAPTURES[0], &capture, &out);
}

#[test]
fn tool_use_response() {
    let capture = fixture_text(CAPTURES[1]);
    let out = signals(&capture);
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "text_delta",
            "text_delta",
            "tool_call",
            "token_usage",
            "completion"
        ]
    );
    assert_eq!(
        Value::Object(out[3].payload.clone()),
        json!({"toolName": "get_weather", "agentId": "claude-sonnet-4-20250514",
               "callId": "toolu_01NRLabsLyVHZPKxbKvkfSMn", "input": {"location": "Paris"}})
    );
    assert_eq!(out[3].meta("block"), Some(&json!(1)));
    assert_eq!(out[3].meta("caller"), Some(&json!({"type": "direct"})));
    assert_eq!(out[3].meta("incomplete"), None);
    assert_eq!(out[4].payload["promptTokens"], 377);
    assert_eq!(out[4].meta("cache_read_input_tokens"), Some(&json!(0)));
    assert_eq!(out[4].meta("service_tier"), Some(&json!("standard")));
    assert_eq!(out[5].payload["result"], "tool_use");
    check_against_capture(CAPTURES[1], &capture, &out);
}

#[test]
fn vercel_json_lines() {
    let capture = fixture_text(CAPTURES[2]);
    let out = signals(&capture);
    let mut expected = vec!["agent_state_change"];
    expected.extend(["text_delta"; 6]);
    expected.extend(["token_usage", "completion"]);
    assert_eq!(kinds(&out), expected);
    // The delta's own input_tokens are used; cache details kept.
    assert_eq!(out[7].payload["promptTokens"], 12);
    assert_eq!(out[7].payload["completionTokens"], 30);
    assert_eq!(
        out[7].meta("cache_creation"),
        Some(&json!({"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}))
    );
    assert_eq!(out[7].meta("inference_geo"), Some(&json!("not_available")));
    check_against_capture(CAPTURES[2], &capture, &out);
}

#[test]
fn sse_and_json_lines_forms_agree() {
    for name in CAPTURES {
        let capture = fixture_text(name);
        let evs = events(&capture);
        let lines: String = evs.iter().map(|e| format!("{e}\n")).collect();
        // SSE without `event:` lines, CRLF endings, no final blank line.
        let sse: String = evs.iter().map(|e| format!("data: {e}\r\n\r\n")).collect();
        let sse = sse.trim_end().to_owned();
        // SSE whose `event:` lines are split from (and disagree with) their data.
        let misnamed: String = evs
            .iter()
            .map(|e| format!("event: ping\n\n: gap\ndata: {e}\n\n"))
            .collect();
        let reference: Vec<Value> = decode(&capture).iter().map(stable).collect();
        for (form, text) in [("lines", lines), ("sse", sse), ("misnamed", misnamed)] {
            let out: Vec<Value> = decode(&text).iter().map(stable).collect();
            assert_eq!(out, reference, "{name} as {form}");
        }
    }
}

#[test]
fn captures_are_insensitive_to_how_input_is_split() {
    let mut rng = Rng(99);
    for name in CAPTURES {
        assert_random_splits_keep_stable(decoder, &fixture_text(name), name, &mut rng, 200);
    }
}
