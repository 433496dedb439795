//! Hand-written cases for every rule of the OpenAI-compatible streaming mapping (see
//! `ChatDecoder`) that the captures do not show.

mod common;

use common::{decode, decoder, signals, sse};
use patchbay_openai::{ChatDecoder, decode_response};
use patchbay_signal::Signal;
use patchbay_signal::normalize::Decoded;
use patchbay_sse::DataDecoder;
use patchbay_testkit::decoding::{decode_split, kinds, stable};
use patchbay_testkit::prng::Rng;
use patchbay_testkit::random_input::random_pieces;
use patchbay_testkit::validity::assert_all_decoded_valid;
use serde_json::{Value, json};

fn chunk(choices: Value) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
           "model": "m1", "choices": choices})
}

fn delta(index: u64, delta: Value) -> Value {
    chunk(json!([{"index": index, "delta": delta, "finish_reason": null}]))
}

fn finish(index: u64, reason: &str) -> Value {
    chunk(json!([{"index": index, "delta": {}, "finish_reason": reason}]))
}

fn tool(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
    let mut f = json!({"index": index, "function": {"arguments": args}});
    if let Some(id) = id {
        f["id"] = json!(id);
        f["type"] = json!("function");
    }
    if let Some(name) = name {
        f["function"]["name"] = json!(name);
    }
    f
}

fn payload(s: &Signal) -> Value {
    Value::Object(s.payload.clone())
}

#[test]
fn several_choices_interleaved_with_parallel_tool_calls() {
    let chunks = [
        delta(0, json!({"role": "assistant", "content": "Hel"})),
        delta(1, json!({"role": "assistant", "content": "Bon"})),
        delta(0, json!({"content": "lo"})),
        delta(
            1,
            json!({"tool_calls": [tool(0, Some("c1a"), Some("search"), ""), tool(1, Some("c1b"), Some("fetch"), "{\"u")]}),
        ),
        delta(
            0,
            json!({"tool_calls": [tool(0, Some("c0a"), Some("calc"), "{\"x\": ")]}),
        ),
        delta(
            1,
            json!({"tool_calls": [tool(1, None, None, "rl\": \"a\"}"), tool(0, None, None, "{\"q\":1}")]}),
        ),
        delta(0, json!({"tool_calls": [tool(0, None, None, "2}")]})),
        finish(1, "tool_calls"),
        delta(0, json!({"content": "!"})),
        finish(0, "stop"),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
               "model": "m1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}}),
    ];
    let out = signals(&sse(&chunks));
    assert_eq!(
        kinds(&out),
        [
            "text_delta",
            "text_delta",
            "text_delta",
            "tool_call",
            "tool_call",
            "completion",
            "text_delta",
            "tool_call",
            "completion",
            "token_usage"
        ]
    );
    // The first chunk came before a second choice was known: no `choice` yet; every
    // choice-scoped signal after it has one.
    assert_eq!(out[0].meta("choice"), None);
    for s in &out[1..9] {
        assert!(s.meta("choice").is_some(), "{s:?}");
    }
    assert_eq!(out[9].meta("choice"), None, "usage is not choice-scoped");
    let text = |c: u64| -> String {
        out.iter()
            .filter(|s| {
                s.kind == "text_delta" && s.meta("choice").and_then(Value::as_u64).unwrap_or(0) == c
            })
            .map(|s| s.payload["content"].as_str().unwrap())
            .collect()
    };
    assert_eq!(text(0), "Hello!");
    assert_eq!(text(1), "Bon");
    assert_eq!(out[6].payload["index"], 2, "index runs per choice");
    assert_eq!(out[1].payload["index"], 0);
    // Choice 1's two calls, in tool index order, complete.
    assert_eq!(
        payload(&out[3]),
        json!({"toolName": "search", "agentId": "m1", "callId": "c1a", "input": {"q": 1}})
    );
    assert_eq!(
        payload(&out[4]),
        json!({"toolName": "fetch", "agentId": "m1", "callId": "c1b", "input": {"url": "a"}})
    );
    assert_eq!(out[4].meta("toolIndex"), Some(&json!(1)));
    assert_eq!(out[5].payload["result"], "tool_calls");
    assert_eq!(out[5].meta("choice"), Some(&json!(1)));
    assert_eq!(
        payload(&out[7]),
        json!({"toolName": "calc", "agentId": "m1", "callId": "c0a", "input": {"x": 2}})
    );
    assert_eq!(out[8].meta("choice"), Some(&json!(0)));
    assert_eq!(out[8].payload["result"], "stop");
}

#[test]
fn a_chunk_with_several_choices_marks_all_of_them() {
    let out = signals(&sse(&[chunk(json!([
        {"index": 0, "delta": {"content": "a"}},
        {"index": 1, "delta": {"content": "b"}}
    ]))]));
    assert_eq!(out[0].meta("choice"), Some(&json!(0)));
    assert_eq!(out[1].meta("choice"), Some(&json!(1)));
}

#[test]
fn reasoning_fields_are_thinking() {
    let out = signals(&sse(&[
        delta(0, json!({"reasoning_content": "deep"})),
        delta(0, json!({"reasoning": "ollama"})),
        delta(0, json!({"reasoning": "same", "reasoning_content": "same"})),
        delta(0, json!({"reasoning_content": "a", "reasoning": "b"})),
        delta(0, json!({"reasoning_content": "", "content": "answer"})),
    ]));
    assert_eq!(
        kinds(&out),
        ["thinking", "thinking", "thinking", "thinking", "text_delta"]
    );
    assert_eq!(
        payload(&out[0]),
        json!({"agentId": "m1", "content": "deep"})
    );
    assert_eq!(out[1].payload["content"], "ollama");
    assert_eq!(out[2].payload["content"], "same");
    assert_eq!(out[2].metadata, None);
    assert_eq!(out[3].payload["content"], "a");
    assert_eq!(out[3].meta("reasoning"), Some(&json!("b")));
    assert_eq!(out[4].payload["index"], 0);
}

#[test]
fn refusal_is_a_text_delta_flagged_in_metadata() {
    let out = signals(&sse(&[
        delta(
            0,
            json!({"role": "assistant", "content": null, "refusal": ""}),
        ),
        delta(0, json!({"refusal": "I can't"})),
        delta(0, json!({"refusal": " help."})),
        finish(0, "stop"),
    ]));
    assert_eq!(kinds(&out), ["text_delta", "text_delta", "completion"]);
    assert_eq!(out[0].meta("refusal"), Some(&json!(true)));
    assert_eq!(out[1].payload["index"], 1);
}

#[test]
fn tool_arguments_empty_non_object_and_cut_off() {
    let out = signals(&sse(&[
        delta(
            0,
            json!({"tool_calls": [tool(0, Some("a"), Some("no_args"), "")]}),
        ),
        delta(
            0,
            json!({"tool_calls": [tool(1, Some("b"), Some("array"), "[1, 2]")]}),
        ),
        delta(
            0,
            json!({"tool_calls": [tool(2, Some("c"), Some("cut"), "{\"path\": \"/tm")]}),
        ),
        delta(
            0,
            json!({"tool_calls": [tool(3, Some("d"), Some("spaces"), "  ")]}),
        ),
        finish(0, "length"),
    ]));
    assert_eq!(
        kinds(&out),
        [
            "tool_call",
            "tool_call",
            "tool_call",
            "tool_call",
            "completion"
        ]
    );
    assert_eq!(out[0].payload["input"], json!({}));
    assert_eq!(out[1].payload["input"], json!({"_raw": "[1, 2]"}));
    assert_eq!(out[2].payload["input"], json!({"_raw": "{\"path\": \"/tm"}));
    assert_eq!(out[3].payload["input"], json!({}));
    assert_eq!(out[4].payload["success"], false);
}

#[test]
fn unfinished_tool_calls_are_emitted_at_the_end_of_the_stream() {
    // Cut without [DONE] nor finish_reason.
    let text = format!(
        "data: {}\n\n",
        delta(
            0,
            json!({"tool_calls": [tool(0, Some("x"), Some("t"), "{\"a\":1}")]})
        )
    );
    let out = signals(&text);
    assert_eq!(kinds(&out), ["tool_call"]);
    assert_eq!(out[0].payload["input"], json!({"a": 1}));
    assert_eq!(out[0].meta("unfinished"), Some(&json!(true)));
    // With [DONE] but no finish_reason: emitted at [DONE], before what follows.
    let mut text = sse(&[delta(
        0,
        json!({"tool_calls": [tool(0, Some("y"), Some("t"), "{}")]}),
    )]);
    text.push_str(&sse(&[delta(0, json!({"content": "next stream"}))]));
    let out = signals(&text);
    assert_eq!(kinds(&out), ["tool_call", "text_delta"]);
    assert_eq!(out[1].payload["index"], 0, "a new stream starts afresh");
}

#[test]
fn ollama_style_whole_calls_reusing_index_zero() {
    let out = signals(&sse(&[
        delta(
            0,
            json!({"tool_calls": [{"id": "call_1", "index": 0, "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}),
        ),
        delta(
            0,
            json!({"tool_calls": [{"id": "call_2", "index": 0, "type": "function",
            "function": {"name": "get_time", "arguments": "{\"tz\":\"CET\"}"}}]}),
        ),
        finish(0, "tool_calls"),
    ]));
    assert_eq!(kinds(&out), ["tool_call", "tool_call", "completion"]);
    assert_eq!(out[0].payload["toolName"], "get_weather");
    assert_eq!(out[0].payload["input"], json!({"city": "Paris"}));
    assert_eq!(out[1].payload["toolName"], "get_time");
    assert_eq!(out[1].payload["callId"], "call_2");
}

#[test]
fn calls_without_index_and_arguments_as_objects() {
    let out = signals(&sse(&[
        delta(
            0,
            json!({"tool_calls": [
                {"id": "g1", "type": "function", "function": {"name": "a", "arguments": {"k": 1}}},
                {"id": "g2", "type": "function", "function": {"name": "b", "arguments": "{\"k\""}}
            ]}),
        ),
        delta(
            0,
            json!({"tool_calls": [{"function": {"arguments": ":2}"}}]}),
        ),
        delta(
            0,
            json!({"tool_calls": [{"id": "g3", "type": "custom", "function": {"name": "c"}}]}),
        ),
        finish(0, "tool_calls"),
    ]));
    assert_eq!(
        kinds(&out),
        ["tool_call", "tool_call", "tool_call", "completion"]
    );
    assert_eq!(out[0].payload["input"], json!({"k": 1}));
    assert_eq!(out[1].payload["input"], json!({"k": 2}));
    assert_eq!(out[2].payload["input"], json!({}));
    assert_eq!(out[2].meta("toolType"), Some(&json!("custom")));
}

#[test]
fn repeated_names_are_not_concatenated() {
    let out = signals(&sse(&[
        delta(
            0,
            json!({"tool_calls": [tool(0, Some("r"), Some("lookup"), "{\"a\"")]}),
        ),
        delta(
            0,
            json!({"tool_calls": [tool(0, None, Some("lookup"), ":1}")]}),
        ),
        finish(0, "tool_calls"),
    ]));
    assert_eq!(out[0].payload["toolName"], "lookup");
    assert_eq!(out[0].payload["input"], json!({"a": 1}));
}

#[test]
fn legacy_function_call() {
    let out = signals(&sse(&[
        delta(
            0,
            json!({"function_call": {"name": "f", "arguments": "{\"a\""}}),
        ),
        delta(0, json!({"function_call": {"arguments": ": true}"}})),
        finish(0, "function_call"),
    ]));
    assert_eq!(kinds(&out), ["tool_call", "completion"]);
    assert_eq!(out[0].payload["toolName"], "f");
    assert_eq!(out[0].payload["input"], json!({"a": true}));
    assert_eq!(out[0].meta("functionCall"), Some(&json!(true)));
}

#[test]
fn one_completion_per_choice_and_success_by_reason() {
    for (reason, success) in [
        ("stop", true),
        ("tool_calls", true),
        ("length", false),
        ("content_filter", false),
    ] {
        let out = signals(&sse(&[finish(0, reason), finish(0, reason)]));
        assert_eq!(
            kinds(&out),
            ["completion"],
            "a repeated finish_reason completes once"
        );
        assert_eq!(
            payload(&out[0]),
            json!({"taskId": "chatcmpl-1", "agentId": "m1", "success": success, "result": reason})
        );
        assert_eq!(out[0].correlation_id.as_deref(), Some("chatcmpl-1"));
    }
}

#[test]
fn usage_in_the_finishing_chunk_and_usage_without_counts() {
    let mut last = finish(0, "stop");
    last["usage"] = json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
                           "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": null});
    let out = signals(&sse(&[last]));
    assert_eq!(kinds(&out), ["completion", "token_usage"]);
    assert_eq!(
        payload(&out[1]),
        json!({"agentId": "m1", "promptTokens": 3, "completionTokens": 4, "model": "m1"})
    );
    assert_eq!(
        out[1].meta("prompt_tokens_details"),
        Some(&json!({"cached_tokens": 0}))
    );
    assert_eq!(
        out[1].meta("completion_tokens_details"),
        None,
        "nulls carry nothing"
    );
    assert_eq!(out[1].meta("created"), Some(&json!(1700000000)));
    // No counts: not a 0/0 token_usage.
    let mut odd = chunk(json!([]));
    odd["usage"] = json!({"queue_time": 0.5});
    let out = signals(&sse(&[odd]));
    assert_eq!(kinds(&out), ["openai.usage"]);
    assert_eq!(out[0].payload["queue_time"], 0.5);
    // One count only: the other is 0.
    let mut half = chunk(json!([]));
    half["usage"] = json!({"completion_tokens": 2});
    let out = signals(&sse(&[half]));
    assert_eq!(out[0].payload["promptTokens"], 0);
}

#[test]
fn error_chunks() {
    let out = signals(&sse(&[
        json!({"error": {"message": "context too long", "type": "invalid_request_error",
                         "param": null, "code": "context_length_exceeded"}}),
        json!({"error": {"message": "model 'x' not found", "type": "api_error", "param": null, "code": null}}),
        json!({"error": "plain text error"}),
        json!({"error": {"code": 500}}),
    ]));
    assert_eq!(kinds(&out), ["error", "error", "error", "error"]);
    assert_eq!(
        payload(&out[0]),
        json!({"code": "context_length_exceeded", "message": "context too long", "severity": "error"})
    );
    assert_eq!(
        out[0].meta("errorType"),
        Some(&json!("invalid_request_error"))
    );
    assert_eq!(
        out[1].payload["code"], "api_error",
        "the type when there is no code"
    );
    assert_eq!(out[2].payload["message"], "plain text error");
    assert_eq!(out[2].payload.get("code"), None);
    assert_eq!(out[3].payload["code"], "500");
    // During a stream the error names the model and is correlated.
    let out = signals(&sse(&[
        delta(0, json!({"content": "x"})),
        json!({"error": {"message": "overloaded"}}),
    ]));
    assert_eq!(out[1].payload["agentId"], "m1");
    assert_eq!(out[1].correlation_id.as_deref(), Some("chatcmpl-1"));
}

#[test]
fn extras_go_to_metadata_and_nothing_is_lost() {
    let mut c = chunk(
        json!([{"index": 0, "delta": {"content": "hi", "annotations": [{"type": "url"}], "role": "assistant"},
                              "logprobs": {"content": [{"token": "hi", "logprob": -0.1}]}, "finish_reason": null}]),
    );
    c["obfuscation"] = json!("xYz");
    c["x_groq"] = json!({"id": "req_1"});
    let out = signals(&sse(&[c]));
    assert_eq!(kinds(&out), ["text_delta"]);
    let meta = out[0].metadata.as_ref().unwrap();
    assert_eq!(meta["logprobs"]["content"][0]["token"], "hi");
    assert_eq!(meta["annotations"][0]["type"], "url");
    assert_eq!(meta["x_groq"]["id"], "req_1");
    assert!(!meta.contains_key("obfuscation"), "padding is dropped");
    assert!(
        !meta.contains_key("created"),
        "stream-constant fields only on summaries"
    );
    // Azure's first chunk: no choices, only prompt filter results.
    let azure = json!({"choices": [], "created": 0, "id": "", "model": "", "object": "",
                       "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]});
    let out = signals(&sse(&[azure, delta(0, json!({"content": "a"}))]));
    assert_eq!(kinds(&out), ["openai.chunk", "text_delta"]);
    assert_eq!(
        out[0].payload["prompt_filter_results"][0]["prompt_index"],
        0
    );
    assert_eq!(out[0].correlation_id, None, "an empty id is no id");
    // A choice with nothing but informative fields.
    let out = signals(&sse(&[chunk(
        json!([{"index": 0, "delta": {}, "content_filter_results": {"hate": {"filtered": false}}}]),
    )]));
    assert_eq!(kinds(&out), ["openai.choice"]);
    assert_eq!(out[0].payload["index"], 0);
    // Boilerplate chunks (role only, empty content, nulls) give nothing.
    assert!(
        signals(&sse(&[delta(
            0,
            json!({"role": "assistant", "content": "", "refusal": null})
        )]))
        .is_empty()
    );
}

#[test]
fn legacy_text_completion_chunks() {
    let out = signals(&sse(&[
        json!({"id": "cmpl-1", "object": "text_completion", "model": "m",
        "choices": [{"index": 0, "text": "Once", "logprobs": null, "finish_reason": null}]}),
    ]));
    assert_eq!(kinds(&out), ["text_delta"]);
    assert_eq!(out[0].payload["content"], "Once");
}

#[test]
fn bad_lines_are_reported_and_the_stream_goes_on() {
    let mut d = ChatDecoder::new("openai:test");
    let mut out = Vec::new();
    d.decode_data_at("{oops", 5, &mut out);
    d.decode_data_at(
        &delta(0, json!({"content": "a"})).to_string(),
        1234,
        &mut out,
    );
    d.decode_data_at("not json", 9999, &mut out);
    d.decode_data_at("[1, 2]", 9999, &mut out);
    assert_all_decoded_valid(&out);
    assert!(out[0].is_bad());
    assert_eq!(out[0].clone().into_signal().timestamp, 0);
    assert!(!out[1].is_bad());
    assert_eq!(out[1].clone().into_signal().timestamp, 1234);
    let bad = out[2].clone().into_signal();
    assert!(out[2].is_bad());
    assert_eq!(bad.timestamp, 1234, "stamped with the last good signal");
    assert_eq!(bad.payload["code"], "bad_frame");
    assert_eq!(bad.meta("raw"), Some(&json!("not json")));
    assert!(out[3].is_bad());
}

#[test]
fn done_ends_a_stream() {
    let mut d = ChatDecoder::new("openai:test");
    let mut out = Vec::new();
    d.decode_data(&delta(0, json!({"content": "a"})).to_string(), &mut out);
    assert!(!d.is_done());
    assert_eq!(d.model(), Some("m1"));
    d.decode_data(" [DONE] ", &mut out);
    assert!(d.is_done());
    assert_eq!(d.model(), None);
    assert_eq!(out.len(), 1);
}

#[test]
fn json_lines_input_with_sse_prefixes_and_blank_lines() {
    let text = format!(
        "\n{}\n\ndata: {}\n: comment\n{}\n[DONE]\n",
        delta(0, json!({"content": "a"})),
        delta(0, json!({"content": "b"})),
        finish(0, "stop")
    );
    let out = signals(&text);
    assert_eq!(kinds(&out), ["text_delta", "text_delta", "completion"]);
}

/// The non-streaming body and the stream it corresponds to give the same signals.
#[test]
fn non_streaming_response_matches_its_streaming_form() {
    let body = json!({
        "id": "chatcmpl-9", "object": "chat.completion", "created": 1700000001, "model": "m2",
        "system_fingerprint": "fp_1",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hi there", "refusal": null,
                                     "reasoning_content": "think",
                                     "tool_calls": [
                                        {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
                                        {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": ""}}]},
             "logprobs": null, "finish_reason": "tool_calls"},
            {"index": 1, "message": {"role": "assistant", "content": "Other"}, "finish_reason": "length"}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}
    });
    let response: Vec<Value> = decode_response("parse:openai", &body.to_string())
        .iter()
        .map(stable)
        .collect();
    let c = |choices: Value| {
        json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1700000001,
                                    "model": "m2", "system_fingerprint": "fp_1", "choices": choices})
    };
    let stream = sse(&[
        c(json!([
            {"index": 0, "delta": {"role": "assistant", "reasoning_content": "think", "content": "Hi there",
                "tool_calls": [
                    {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}},
                    {"index": 1, "id": "call_b", "type": "function", "function": {"name": "g", "arguments": ""}}]},
             "finish_reason": "tool_calls"},
            {"index": 1, "delta": {"role": "assistant", "content": "Other"}, "finish_reason": "length"}
        ])),
        {
            let mut u = c(json!([]));
            u["usage"] = json!({"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30});
            u
        },
    ]);
    let streamed: Vec<Value> = decode(&stream).iter().map(stable).collect();
    assert_eq!(response, streamed);
    let kinds: Vec<&str> = response
        .iter()
        .map(|v| v["signal"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "thinking",
            "text_delta",
            "tool_call",
            "tool_call",
            "completion",
            "text_delta",
            "completion",
            "token_usage"
        ]
    );
    assert_eq!(response[2]["signal"]["payload"]["input"], json!({"a": 1}));
    assert_eq!(response[3]["signal"]["payload"]["input"], json!({}));
    assert_eq!(
        response[1]["signal"]["metadata"]["choice"], 0,
        "n>1 known from the body"
    );
    assert_all_decoded_valid(&decode_response("parse:openai", &body.to_string()));
}

#[test]
fn non_streaming_error_and_garbage_bodies() {
    let out = decode_response(
        "openai:x",
        r#"{"error":{"code":null,"message":"model not found","param":null,"type":"invalid_request_error"}}"#,
    );
    assert_all_decoded_valid(&out);
    let s = out[0].clone().into_signal();
    assert_eq!(s.kind, "error");
    assert_eq!(s.payload["code"], "invalid_request_error");
    assert_eq!(s.payload["message"], "model not found");
    let out = decode_response("openai:x", "<html>502</html>");
    assert!(out[0].is_bad());
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = Rng(1234);
    let pieces: &[&str] = &[
        "data: ",
        "\n",
        "\n\n",
        "\r\n",
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "[DONE]",
        "\"choices\"",
        "\"delta\"",
        "\"tool_calls\"",
        "\"index\"",
        "\"content\"",
        "\"usage\"",
        "\"function\"",
        "\"arguments\"",
        "\"finish_reason\"",
        "\"error\"",
        "\"id\"",
        "\"stop\"",
        "0",
        "1",
        "-1",
        "1e400",
        "null",
        "true",
        "\"x\"",
        "é",
        "\u{0}",
    ];
    for round in 0..400 {
        let mut input = Vec::new();
        // Half the rounds start like JSON lines, half like SSE.
        input.extend_from_slice(if round % 2 == 0 { b"{" } else { b"data: {" });
        input.extend(random_pieces(&mut rng, 120, pieces, 8));
        let out = decode_split(decoder().as_mut(), &input, &mut || rng.below(20) + 1);
        assert_all_decoded_valid(&out);
    }
    // Structurally valid chunks with random values in every field.
    let values = [
        json!(null),
        json!(-1),
        json!(1.5),
        json!("s"),
        json!([]),
        json!({}),
        json!([1]),
        json!({"a": 1}),
        json!(18446744073709551615u64),
    ];
    for _ in 0..400 {
        let mut pick = || values[rng.below(values.len())].clone();
        let c = json!({"id": pick(), "model": pick(), "choices": [
            {"index": pick(), "delta": {"content": pick(), "reasoning": pick(), "refusal": pick(),
              "tool_calls": [{"index": pick(), "id": pick(), "type": pick(), "function": {"name": pick(), "arguments": pick()}}, pick()],
              "function_call": pick()}, "finish_reason": pick(), "logprobs": pick()}, pick()],
            "usage": {"prompt_tokens": pick(), "completion_tokens": pick(), "x": pick()}, "error": pick()});
        let out = decode(&sse(&[c]));
        assert_all_decoded_valid(&out);
        let _ = out.into_iter().map(Decoded::into_signal).count();
    }
}
