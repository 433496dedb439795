//! Hand-written cases for every rule of the Anthropic Messages streaming mapping (see
//! `MessagesDecoder`) that the captures do not show.

mod common;

use common::{decode, decoder, signals};
use patchbay_anthropic::{MessagesDecoder, decode_response};
use patchbay_signal::Signal;
use patchbay_testkit::decoding::{decode_split, kinds, stable};
use patchbay_testkit::prng::Rng;
use patchbay_testkit::random_input::random_pieces;
use patchbay_testkit::validity::assert_all_decoded_valid;
use serde_json::{Value, json};

/// One JSON event per line.
fn lines(events: &[Value]) -> String {
    events.iter().map(|e| format!("{e}\n")).collect()
}

fn start(id: &str, model: &str, input_tokens: u64) -> Value {
    json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
        "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1}}})
}

fn block_start(index: u64, block: Value) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": block})
}

fn block_delta(index: u64, delta: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

fn text(index: u64, t: &str) -> Value {
    block_delta(index, json!({"type": "text_delta", "text": t}))
}

fn json_part(index: u64, part: &str) -> Value {
    block_delta(
        index,
        json!({"type": "input_json_delta", "partial_json": part}),
    )
}

fn block_stop(index: u64) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

fn message_delta(stop_reason: &str, output_tokens: u64) -> Value {
    json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
           "usage": {"output_tokens": output_tokens}})
}

fn stop() -> Value {
    json!({"type": "message_stop"})
}

fn tool_block(id: &str, name: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": {}})
}

fn payload(s: &Signal) -> Value {
    Value::Object(s.payload.clone())
}

#[test]
fn thinking_with_signature() {
    let out = signals(&lines(&[
        start("msg_t", "claude-think", 20),
        block_start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        block_delta(
            0,
            json!({"type": "thinking_delta", "thinking": "Let me think"}),
        ),
        block_delta(
            0,
            json!({"type": "thinking_delta", "thinking": " about it."}),
        ),
        block_delta(
            0,
            json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}),
        ),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
        text(1, "Answer."),
        block_stop(1),
        message_delta("end_turn", 40),
        stop(),
    ]));
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "thinking",
            "thinking",
            "text_delta",
            "token_usage",
            "completion"
        ]
    );
    assert_eq!(
        payload(&out[1]),
        json!({"agentId": "claude-think", "content": "Let me think"})
    );
    // The first signal of each block carries its index.
    assert_eq!(out[1].meta("block"), Some(&json!(0)));
    assert_eq!(out[2].meta("block"), None);
    assert_eq!(out[3].payload["index"], 0);
    assert_eq!(out[3].meta("block"), Some(&json!(1)));
    for s in &out {
        assert!(
            !s.to_json().contains("EqQBCgIYAhIM"),
            "signatures are not emitted"
        );
    }
}

#[test]
fn tool_use_without_arguments_and_with_start_input() {
    let out = signals(&lines(&[
        start("msg_n", "m", 5),
        block_start(0, tool_block("toolu_a", "get_time")),
        json_part(0, ""),
        block_stop(0),
        block_start(
            1,
            json!({"type": "tool_use", "id": "toolu_b", "name": "lookup", "input": {"q": "x"}}),
        ),
        block_stop(1),
        block_start(
            2,
            json!({"type": "tool_use", "id": "toolu_c", "name": "list", "input": {"q": "stale"}}),
        ),
        json_part(2, "{\"q\": \"fresh\"}"),
        block_stop(2),
        block_start(
            3,
            json!({"type": "tool_use", "id": "toolu_d", "name": "arr", "input": {}}),
        ),
        json_part(3, "[1]"),
        block_stop(3),
        message_delta("tool_use", 9),
        stop(),
    ]));
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "tool_call",
            "tool_call",
            "tool_call",
            "tool_call",
            "token_usage",
            "completion"
        ]
    );
    assert_eq!(
        payload(&out[1]),
        json!({"toolName": "get_time", "agentId": "m", "callId": "toolu_a", "input": {}})
    );
    assert_eq!(
        out[2].payload["input"],
        json!({"q": "x"}),
        "the start block's input when no delta came"
    );
    assert_eq!(
        out[3].payload["input"],
        json!({"q": "fresh"}),
        "deltas win over the start input"
    );
    assert_eq!(out[4].payload["input"], json!({"_raw": "[1]"}));
    assert_eq!(out[6].payload["success"], true);
}

#[test]
fn max_tokens_cut_mid_tool_input() {
    // The tool block is still open at message_stop.
    let out = signals(&lines(&[
        start("msg_cut", "m", 7),
        block_start(0, tool_block("toolu_x", "write_file")),
        json_part(0, "{\"path\": \"/tmp/a\", \"content\": \"hel"),
        message_delta("max_tokens", 100),
        stop(),
    ]));
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "token_usage",
            "tool_call",
            "completion"
        ]
    );
    assert_eq!(
        out[2].payload["input"],
        json!({"_raw": "{\"path\": \"/tmp/a\", \"content\": \"hel"})
    );
    assert_eq!(out[2].meta("incomplete"), Some(&json!(true)));
    assert_eq!(
        payload(&out[3]),
        json!({"taskId": "msg_cut", "agentId": "m", "success": false, "result": "max_tokens"})
    );
    // The same with the block stopped before message_delta.
    let out = signals(&lines(&[
        start("msg_cut2", "m", 7),
        block_start(0, tool_block("toolu_y", "write_file")),
        json_part(0, "{\"path\": "),
        block_stop(0),
        message_delta("max_tokens", 100),
        stop(),
    ]));
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "tool_call",
            "token_usage",
            "completion"
        ]
    );
    assert_eq!(out[1].payload["input"], json!({"_raw": "{\"path\": "}));
    assert_eq!(out[1].meta("incomplete"), None);
}

#[test]
fn spliced_message_start_abandons_the_message_in_progress() {
    let out = signals(&lines(&[
        start("msg_A", "model-a", 10),
        block_start(0, json!({"type": "text", "text": ""})),
        text(0, "Old "),
        block_start(1, tool_block("toolu_old", "old_tool")),
        json_part(1, "{\"stale\": "),
        // A restarted message spliced in the middle.
        start("msg_B", "model-b", 12),
        block_start(0, json!({"type": "text", "text": ""})),
        text(0, "New"),
        // A leftover fragment of A's tool block: there is no block 1 in B.
        json_part(1, "true}"),
        block_stop(0),
        block_start(1, tool_block("toolu_new", "new_tool")),
        json_part(1, "{\"fresh\": 1}"),
        block_stop(1),
        message_delta("tool_use", 30),
        stop(),
    ]));
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "text_delta",
            "agent_state_change",
            "text_delta",
            "anthropic.content_block_delta",
            "tool_call",
            "token_usage",
            "completion"
        ]
    );
    assert_eq!(out[2].meta("restarted"), Some(&json!(true)));
    assert_eq!(out[2].meta("abandonedMessageId"), Some(&json!("msg_A")));
    assert_eq!(out[2].payload["agentId"], "model-b");
    assert_eq!(
        out[3].payload["index"], 0,
        "text index restarts with the new message"
    );
    assert_eq!(out[4].meta("orphan"), Some(&json!(true)));
    assert_eq!(out[4].payload["delta"]["partial_json"], "true}");
    assert_eq!(
        payload(&out[5]),
        json!({"toolName": "new_tool", "agentId": "model-b", "callId": "toolu_new", "input": {"fresh": 1}})
    );
    assert!(
        out.iter()
            .all(|s| s.payload.get("callId") != Some(&json!("toolu_old"))),
        "no tool_call for the abandoned block"
    );
    assert_eq!(
        out[6].payload["promptTokens"], 12,
        "input tokens of the new message"
    );
    assert_eq!(out[7].payload["taskId"], "msg_B");
    for s in &out[2..] {
        assert_eq!(s.correlation_id.as_deref(), Some("msg_B"));
    }
}

#[test]
fn duplicated_message_start() {
    let out = signals(&lines(&[
        start("msg_D", "m", 3),
        start("msg_D", "m", 3),
        block_start(0, json!({"type": "text", "text": ""})),
        text(0, "once"),
        block_stop(0),
        message_delta("end_turn", 2),
        stop(),
        stop(),
    ]));
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "agent_state_change",
            "text_delta",
            "token_usage",
            "completion"
        ],
        "a repeated message_stop completes once"
    );
    assert_eq!(out[1].meta("restarted"), Some(&json!(true)));
    assert_eq!(out[2].payload["index"], 0);
    assert_eq!(out[3].payload["promptTokens"], 3);
    assert_eq!(out[4].payload["taskId"], "msg_D");
}

#[test]
fn stop_reasons_and_success() {
    for (reason, success) in [
        ("end_turn", true),
        ("tool_use", true),
        ("stop_sequence", true),
        ("pause_turn", true),
        ("max_tokens", false),
        ("refusal", false),
    ] {
        let out = signals(&lines(&[
            start("msg_s", "m", 1),
            message_delta(reason, 1),
            stop(),
        ]));
        let c = out.last().unwrap();
        assert_eq!(c.payload["success"], json!(success), "{reason}");
        assert_eq!(c.payload["result"], json!(reason));
    }
    // No stop reason at all: a success without result.
    let out = signals(&lines(&[start("msg_s", "m", 1), stop()]));
    assert_eq!(
        payload(out.last().unwrap()),
        json!({"taskId": "msg_s", "agentId": "m", "success": true})
    );
}

#[test]
fn usage_fields() {
    let out = signals(&lines(&[
        start("msg_u", "m", 50),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": "###"},
               "usage": {"output_tokens": 8, "cache_read_input_tokens": 40,
                         "server_tool_use": {"web_search_requests": 1}}}),
        stop(),
    ]));
    let usage = &out[1];
    assert_eq!(
        payload(usage),
        json!({"agentId": "m", "promptTokens": 50, "completionTokens": 8, "model": "m"})
    );
    assert_eq!(usage.meta("cache_read_input_tokens"), Some(&json!(40)));
    assert_eq!(
        usage.meta("server_tool_use"),
        Some(&json!({"web_search_requests": 1}))
    );
    assert_eq!(out[2].meta("stop_sequence"), Some(&json!("###")));
}

#[test]
fn errors_pings_and_unknown_events() {
    let out = signals(&lines(&[
        json!({"type": "ping"}),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}, "request_id": "req_1"}),
        start("msg_e", "m", 1),
        json!({"type": "error", "error": {"type": "api_error", "message": "Internal"}}),
        json!({"type": "future_event", "data": {"x": 1}}),
        json!({"no_type": true}),
    ]));
    assert_eq!(
        kinds(&out),
        [
            "error",
            "agent_state_change",
            "error",
            "anthropic.future_event",
            "anthropic.event"
        ]
    );
    assert_eq!(
        payload(&out[0]),
        json!({"code": "overloaded_error", "message": "Overloaded", "severity": "error"})
    );
    assert_eq!(out[0].meta("request_id"), Some(&json!("req_1")));
    assert_eq!(out[0].correlation_id, None);
    assert_eq!(out[2].payload["agentId"], "m");
    assert_eq!(out[2].correlation_id.as_deref(), Some("msg_e"));
    assert_eq!(out[3].payload["data"], json!({"x": 1}));
    assert_eq!(out[4].payload["no_type"], true);
}

#[test]
fn server_tools_results_citations_and_other_blocks() {
    let out = signals(&lines(&[
        start("msg_w", "m", 1),
        block_start(
            0,
            json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}),
        ),
        json_part(0, "{\"query\": \"rust\"}"),
        block_stop(0),
        block_start(
            1,
            json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
            "content": [{"type": "web_search_result", "title": "Rust", "url": "https://www.rust-lang.org"}]}),
        ),
        block_stop(1),
        block_start(
            2,
            json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_2",
            "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}}),
        ),
        block_stop(2),
        block_start(3, json!({"type": "text", "text": "", "citations": []})),
        block_delta(
            3,
            json!({"type": "citations_delta", "citation": {"type": "web_search_result_location", "url": "https://www.rust-lang.org", "cited_text": "Rust"}}),
        ),
        text(3, "Rust is fast."),
        block_stop(3),
        block_start(4, json!({"type": "redacted_thinking", "data": "EmwKAhgB"})),
        block_stop(4),
        block_delta(3, json!({"type": "brand_new_delta", "x": 1})),
        message_delta("end_turn", 5),
        stop(),
    ]));
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "tool_call",
            "tool_result",
            "tool_result",
            "anthropic.citation",
            "text_delta",
            "anthropic.redacted_thinking",
            "anthropic.brand_new_delta",
            "token_usage",
            "completion"
        ]
    );
    assert_eq!(
        payload(&out[1]),
        json!({"toolName": "web_search", "agentId": "m", "callId": "srvtoolu_1", "input": {"query": "rust"}})
    );
    assert_eq!(out[1].meta("serverTool"), Some(&json!(true)));
    assert_eq!(out[1].meta("blockType"), Some(&json!("server_tool_use")));
    assert_eq!(
        out[2].payload["toolName"], "web_search",
        "named after the call it answers"
    );
    assert_eq!(out[2].payload["callId"], "srvtoolu_1");
    assert_eq!(out[2].payload["success"], true);
    assert_eq!(out[2].payload["output"]["content"][0]["title"], "Rust");
    assert_eq!(
        out[2].meta("blockType"),
        Some(&json!("web_search_tool_result"))
    );
    assert_eq!(out[3].payload["success"], false);
    assert_eq!(
        out[3].payload["toolName"], "web_search",
        "unknown call: named after the block type"
    );
    assert_eq!(out[4].payload["citation"]["cited_text"], "Rust");
    assert_eq!(out[4].payload["block"], 3);
    assert_eq!(out[6].payload["data"], "EmwKAhgB");
    assert_eq!(out[7].payload["x"], 1);
}

#[test]
fn mcp_tool_use_and_result() {
    let out = signals(&lines(&[
        start("msg_m", "m", 1),
        block_start(
            0,
            json!({"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "echo", "server_name": "srv", "input": {"a": 1}}),
        ),
        block_stop(0),
        block_start(
            1,
            json!({"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "is_error": true,
            "content": [{"type": "text", "text": "boom"}]}),
        ),
        block_stop(1),
        stop(),
    ]));
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "tool_call",
            "tool_result",
            "completion"
        ]
    );
    assert_eq!(out[1].payload["input"], json!({"a": 1}));
    assert_eq!(out[1].meta("server_name"), Some(&json!("srv")));
    assert_eq!(out[2].payload["toolName"], "echo");
    assert_eq!(out[2].payload["success"], false);
}

#[test]
fn stream_cut_without_message_stop() {
    let out = signals(&lines(&[
        start("msg_c", "m", 1),
        block_start(0, tool_block("toolu_c", "t")),
        json_part(0, "{\"a\": [1, 2"),
    ]));
    assert_eq!(
        kinds(&out),
        ["agent_state_change", "tool_call"],
        "no completion: it did not stop"
    );
    assert_eq!(out[1].payload["input"], json!({"_raw": "{\"a\": [1, 2"}));
    assert_eq!(out[1].meta("incomplete"), Some(&json!(true)));
}

#[test]
fn events_without_message_start_are_still_decoded() {
    let out = signals(&lines(&[
        text(0, "orphan text"),
        message_delta("end_turn", 3),
        stop(),
    ]));
    assert_eq!(kinds(&out), ["text_delta", "token_usage", "completion"]);
    assert_eq!(out[0].payload["agentId"], "parse:anthropic");
    assert_eq!(out[1].payload["promptTokens"], 0);
    assert_eq!(out[2].payload["taskId"], "parse:anthropic");
}

#[test]
fn bad_input_is_reported() {
    let mut d = MessagesDecoder::new("anthropic:test");
    let mut out = Vec::new();
    d.decode_data_at("{nope", 3, &mut out);
    d.decode_data_at(&start("msg_b", "m", 1).to_string(), 500, &mut out);
    d.decode_data_at("\"a string\"", 900, &mut out);
    assert_all_decoded_valid(&out);
    assert!(out[0].is_bad());
    assert_eq!(out[0].clone().into_signal().timestamp, 0);
    assert_eq!(d.message_id(), Some("msg_b"));
    let bad = out[2].clone().into_signal();
    assert!(out[2].is_bad());
    assert_eq!(bad.timestamp, 500);
    assert_eq!(bad.payload["code"], "bad_frame");
}

/// A non-streaming body gives the signals of its streaming form.
#[test]
fn non_streaming_response_matches_its_streaming_form() {
    let body = json!({
        "id": "msg_R", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [
            {"type": "thinking", "thinking": "Hmm.", "signature": "sig"},
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_r", "name": "search", "input": {"q": "cats"}},
            {"type": "tool_use", "id": "toolu_s", "name": "now", "input": {}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 5, "output_tokens": 12}
    });
    let response = decode_response("parse:anthropic", &body.to_string());
    assert_all_decoded_valid(&response);
    let stream = lines(&[
        json!({"type": "message_start", "message": {"id": "msg_R", "type": "message", "role": "assistant",
            "model": "claude-x", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 30, "output_tokens": 1}}}),
        block_start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        block_delta(0, json!({"type": "thinking_delta", "thinking": "Hmm."})),
        block_delta(0, json!({"type": "signature_delta", "signature": "sig"})),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
        text(1, "Let me look."),
        block_stop(1),
        block_start(2, tool_block("toolu_r", "search")),
        json_part(2, "{\"q\": \"cats\"}"),
        block_stop(2),
        block_start(3, tool_block("toolu_s", "now")),
        json_part(3, ""),
        block_stop(3),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
               "usage": {"input_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 5, "output_tokens": 12}}),
        stop(),
    ]);
    let streamed: Vec<Value> = decode(&stream).iter().map(stable).collect();
    let response: Vec<Value> = response.iter().map(stable).collect();
    assert_eq!(response, streamed);
    let kinds: Vec<&str> = response
        .iter()
        .map(|v| v["signal"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "agent_state_change",
            "thinking",
            "text_delta",
            "tool_call",
            "tool_call",
            "token_usage",
            "completion"
        ]
    );
}

#[test]
fn non_streaming_error_and_garbage_bodies() {
    let out = decode_response(
        "anthropic:x",
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"},"request_id":"req_9"}"#,
    );
    assert_all_decoded_valid(&out);
    let s = out[0].clone().into_signal();
    assert_eq!(s.kind, "error");
    assert_eq!(s.payload["code"], "invalid_request_error");
    assert!(decode_response("anthropic:x", "502 Bad Gateway")[0].is_bad());
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = Rng(777);
    let pieces: &[&str] = &[
        "data: ",
        "event: ",
        "\n",
        "\n\n",
        "\r",
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "\"type\"",
        "\"message_start\"",
        "\"content_block_start\"",
        "\"content_block_delta\"",
        "\"content_block_stop\"",
        "\"message_delta\"",
        "\"message_stop\"",
        "\"error\"",
        "\"index\"",
        "\"delta\"",
        "\"input_json_delta\"",
        "\"partial_json\"",
        "\"tool_use\"",
        "\"content_block\"",
        "\"message\"",
        "\"usage\"",
        "0",
        "1",
        "-5",
        "null",
        "é",
    ];
    for round in 0..400 {
        let mut input = Vec::new();
        input.extend_from_slice(if round % 2 == 0 {
            b"{"
        } else {
            b"event: x\ndata: {"
        });
        input.extend(random_pieces(&mut rng, 150, pieces, 8));
        assert_all_decoded_valid(&decode_split(decoder().as_mut(), &input, &mut || {
            rng.below(20) + 1
        }));
    }
    // Well-formed events with random values, in random order.
    let values = [
        json!(null),
        json!(-1),
        json!(2),
        json!(1.5),
        json!("s"),
        json!([]),
        json!({}),
        json!({"type": "tool_use"}),
        json!({"type": "text_delta", "text": 3}),
    ];
    let types = [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "error",
        "ping",
    ];
    for _ in 0..300 {
        let mut events = Vec::new();
        for _ in 0..rng.below(12) {
            let mut pick = || values[rng.below(values.len())].clone();
            let mut e = json!({"index": pick(), "message": {"id": pick(), "model": pick(), "usage": pick()},
                "content_block": {"type": pick(), "id": pick(), "name": pick(), "input": pick(), "text": pick()},
                "delta": {"type": pick(), "text": pick(), "partial_json": pick(), "stop_reason": pick()},
                "usage": {"input_tokens": pick(), "output_tokens": pick()}, "error": pick()});
            e["type"] = json!(types[rng.below(types.len())]);
            events.push(e);
        }
        assert_all_decoded_valid(&decode(&lines(&events)));
    }
}

/// The fast path (small events parsed without a JSON map) gives exactly what the general
/// path gives.
#[test]
fn fast_and_general_paths_agree() {
    let mut streams: Vec<Vec<String>> = [
        "anthropic/py-basic_response.sse",
        "anthropic/py-tool_use_response.sse",
        "anthropic/vercel-anthropic-text.chunks.jsonl",
    ]
    .iter()
    .map(|f| {
        patchbay_testkit::fixture_text(f)
            .lines()
            .filter_map(|l| l.strip_prefix("data: ").or(l.starts_with('{').then_some(l)))
            .map(str::to_owned)
            .collect()
    })
    .collect();
    streams.push(
        [
            start("msg_f", "m", 1),
            block_start(
                0,
                json!({"type": "thinking", "thinking": "", "signature": ""}),
            ),
            block_delta(
                0,
                json!({"type": "thinking_delta", "thinking": "a\"b\\u00e9"}),
            ),
            block_delta(0, json!({"type": "signature_delta", "signature": "s"})),
            block_stop(0),
            block_start(1, tool_block("toolu_f", "t")),
            json_part(1, "{\"k\": "),
            json_part(2, "orphan"),
            json_part(1, "1}"),
            block_delta(1, json!({"type": "text_delta", "text": "x", "extra": 1})),
            block_stop(1),
            block_stop(9),
            json!({"type": "content_block_stop", "index": 1, "more": true}),
            json!({"type": "ping"}),
            message_delta("end_turn", 3),
            stop(),
            stop(),
        ]
        .iter()
        .map(|e| e.to_string())
        .collect(),
    );
    for events in streams {
        let (mut fast, mut general) = (MessagesDecoder::new("s:x"), MessagesDecoder::new("s:x"));
        let (mut fast_out, mut general_out) = (Vec::new(), Vec::new());
        for e in &events {
            fast.decode_data_at(e, 1, &mut fast_out);
            general.decode_value(serde_json::from_str(e).unwrap(), 1, &mut general_out);
        }
        let fast_out: Vec<Value> = fast_out.iter().map(stable).collect();
        let general_out: Vec<Value> = general_out.iter().map(stable).collect();
        assert!(!fast_out.is_empty());
        assert_eq!(fast_out, general_out);
    }
}
