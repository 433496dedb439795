//! Golden tests over every OpenAI-compatible capture in `tests/fixtures/`.

mod common;

use std::collections::BTreeMap;

use common::{decode, decoder, signals};
use patchbay_openai::{ModelListError, model_ids};
use patchbay_signal::Signal;
use patchbay_testkit::decoding::{kinds, stable};
use patchbay_testkit::fixture_text;
use patchbay_testkit::prng::Rng;
use patchbay_testkit::properties::assert_random_splits_keep_stable;
use serde_json::{Value, json};

const STREAMS: [&str; 3] = [
    "openai/openai-python-chat-stream-plain-text.sse",
    "openai/openai-python-chat-stream-tool-call-single.sse",
    "openai/openai-python-chat-stream-finish-length.sse",
];

/// What the capture says, computed straight from its JSON chunks (independently of the
/// decoder): per choice its text, its tool calls (arguments concatenated), its finish
/// reasons; and the usage objects.
#[derive(Default, Debug)]
struct Expected {
    text: BTreeMap<u64, String>,
    tools: BTreeMap<(u64, u64), (String, String, String)>,
    finishes: BTreeMap<u64, Vec<String>>,
    usage: Vec<Value>,
    id: String,
    model: String,
}

fn expected(capture: &str) -> Expected {
    let mut e = Expected::default();
    for line in capture.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        e.id = chunk["id"].as_str().unwrap().to_owned();
        e.model = chunk["model"].as_str().unwrap().to_owned();
        for choice in chunk["choices"].as_array().unwrap() {
            let i = choice["index"].as_u64().unwrap();
            if let Some(t) = choice["delta"]["content"].as_str() {
                e.text.entry(i).or_default().push_str(t);
            }
            for tc in choice["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let entry = e
                    .tools
                    .entry((i, tc["index"].as_u64().unwrap()))
                    .or_default();
                if let Some(id) = tc["id"].as_str() {
                    entry.0 = id.to_owned();
                }
                if let Some(n) = tc["function"]["name"].as_str() {
                    entry.1.push_str(n);
                }
                if let Some(a) = tc["function"]["arguments"].as_str() {
                    entry.2.push_str(a);
                }
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                e.finishes.entry(i).or_default().push(f.to_owned());
            }
        }
        if chunk["usage"].is_object() {
            e.usage.push(chunk["usage"].clone());
        }
    }
    e
}

fn choice_of(s: &Signal) -> u64 {
    s.meta("choice").and_then(Value::as_u64).unwrap_or(0)
}

/// Checks the decoded signals against what the capture says.
fn check_against_capture(name: &str, capture: &str, out: &[Signal]) {
    let e = expected(capture);
    // Text reassembled per choice, indices running from 0 without gaps.
    let mut text: BTreeMap<u64, String> = BTreeMap::new();
    let mut next_index: BTreeMap<u64, u64> = BTreeMap::new();
    for s in out.iter().filter(|s| s.kind == "text_delta") {
        let c = choice_of(s);
        text.entry(c)
            .or_default()
            .push_str(s.payload["content"].as_str().unwrap());
        let expected_index = next_index.entry(c).or_default();
        assert_eq!(s.payload["index"], json!(*expected_index), "{name}");
        *expected_index += 1;
        assert_eq!(s.payload["agentId"], json!(e.model));
    }
    let nonempty: BTreeMap<u64, String> = e
        .text
        .clone()
        .into_iter()
        .filter(|(_, t)| !t.is_empty())
        .collect();
    assert_eq!(text, nonempty, "{name}: reassembled text");
    // Tool calls complete, with parsed arguments.
    let tools: Vec<&Signal> = out.iter().filter(|s| s.kind == "tool_call").collect();
    assert_eq!(tools.len(), e.tools.len(), "{name}");
    for ((choice, _), (id, tool, args)) in &e.tools {
        let s = tools
            .iter()
            .find(|s| s.payload["callId"] == json!(id))
            .unwrap_or_else(|| panic!("{name}: no tool_call {id}"));
        assert_eq!(choice_of(s), *choice);
        assert_eq!(s.payload["toolName"], json!(tool));
        let parsed: Value = serde_json::from_str(args).unwrap();
        assert_eq!(s.payload["input"], parsed, "{name}: arguments complete");
    }
    // Each choice completes exactly once, with its finish reason.
    for (choice, reasons) in &e.finishes {
        let completions: Vec<&Signal> = out
            .iter()
            .filter(|s| s.kind == "completion" && choice_of(s) == *choice)
            .collect();
        assert_eq!(
            completions.len(),
            1,
            "{name}: choice {choice} completes once"
        );
        let c = completions[0];
        assert_eq!(c.payload["result"], json!(reasons[0]));
        assert_eq!(c.payload["taskId"], json!(e.id));
        let success = !matches!(reasons[0].as_str(), "length" | "content_filter");
        assert_eq!(c.payload["success"], json!(success));
    }
    // Usage matches.
    let usage: Vec<&Signal> = out.iter().filter(|s| s.kind == "token_usage").collect();
    assert_eq!(usage.len(), e.usage.len(), "{name}");
    for (s, u) in usage.iter().zip(&e.usage) {
        assert_eq!(s.payload["promptTokens"], u["prompt_tokens"]);
        assert_eq!(s.payload["completionTokens"], u["completion_tokens"]);
        assert_eq!(s.payload["model"], json!(e.model));
        assert_eq!(s.meta("total_tokens"), Some(&u["total_tokens"]));
        assert_eq!(
            s.meta("completion_tokens_details"),
            Some(&u["completion_tokens_details"])
        );
    }
    // Everything is correlated by the chunk id.
    for s in out {
        assert_eq!(
            s.correlation_id.as_deref(),
            Some(e.id.as_str()),
            "{name}: {s:?}"
        );
    }
}

#[test]
fn plain_text_capture() {
    let capture = fixture_text(STREAMS[0]);
    let out = signals(&capture);
    let mut expected_kinds = vec!["text_delta"; 30];
    expected_kinds.extend(["completion", "token_usage"]);
    assert_eq!(kinds(&out), expected_kinds);
    let text: String = out
        .iter()
        .filter(|s| s.kind == "text_delta")
        .map(|s| s.payload["content"].as_str().unwrap())
        .collect();
    assert!(
        text.starts_with("I'm unable to provide real-time weather updates."),
        "{text}"
    );
    assert_eq!(out[30].payload["result"], "stop");
    assert_eq!(
        out[30].meta("system_fingerprint"),
        Some(&json!("fp_5050236cbd"))
    );
    assert_eq!(out[30].meta("created"), Some(&json!(1727346168)));
    assert_eq!(out[31].payload["promptTokens"], 14);
    assert_eq!(out[31].payload["completionTokens"], 30);
    // Text deltas carry no stream-constant metadata.
    assert_eq!(out[0].metadata, None);
    check_against_capture(STREAMS[0], &capture, &out);
}

#[test]
fn tool_call_capture() {
    let capture = fixture_text(STREAMS[1]);
    let out = signals(&capture);
    assert_eq!(kinds(&out), ["tool_call", "completion", "token_usage"]);
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"toolName": "GetWeatherArgs", "agentId": "gpt-4o-2024-08-06",
               "callId": "call_c91SqDXlYFuETYv8mUHzz6pp",
               "input": {"city": "Edinburgh", "country": "UK", "units": "c"}})
    );
    assert_eq!(out[0].meta("toolIndex"), Some(&json!(0)));
    assert_eq!(out[1].payload["result"], "tool_calls");
    assert_eq!(out[1].payload["success"], true);
    assert_eq!(out[2].payload["promptTokens"], 76);
    assert_eq!(out[2].payload["completionTokens"], 24);
    check_against_capture(STREAMS[1], &capture, &out);
}

#[test]
fn finish_length_capture() {
    let capture = fixture_text(STREAMS[2]);
    let out = signals(&capture);
    assert_eq!(kinds(&out), ["text_delta", "completion", "token_usage"]);
    assert_eq!(out[0].payload["content"], "{\"");
    assert_eq!(out[1].payload["success"], false);
    assert_eq!(out[1].payload["result"], "length");
    check_against_capture(STREAMS[2], &capture, &out);
}

#[test]
fn json_lines_form_gives_the_same_signals() {
    for name in STREAMS {
        let capture = fixture_text(name);
        let lines: String = capture
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|l| *l != "[DONE]")
            .map(|l| format!("{l}\n"))
            .collect();
        let from_sse: Vec<Value> = decode(&capture).iter().map(stable).collect();
        let from_lines: Vec<Value> = decode(&lines).iter().map(stable).collect();
        assert_eq!(from_lines, from_sse, "{name}");
        // CRLF line endings and no final newline change nothing either.
        let crlf = capture.trim_end().replace('\n', "\r\n");
        let from_crlf: Vec<Value> = decode(&crlf).iter().map(stable).collect();
        assert_eq!(from_crlf, from_sse, "{name}");
    }
}

#[test]
fn captures_are_insensitive_to_how_input_is_split() {
    let mut rng = Rng(7);
    for name in STREAMS {
        assert_random_splits_keep_stable(decoder, &fixture_text(name), name, &mut rng, 300);
    }
}

#[test]
fn model_lists() {
    let ids = |f: &str| model_ids(fixture_text(f).as_bytes());
    assert_eq!(
        ids("ollama/v1-models.test-expected.json").unwrap(),
        ["test-model"]
    );
    assert!(
        ids("ollama/v1-models-empty.test-expected.json")
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        ids("ollama/v1-models-retrieve.test-expected.json").unwrap(),
        ["test-model"]
    );
    match ids("ollama/v1-models-retrieve-error.test-expected.json") {
        Err(ModelListError::Upstream(m)) => assert_eq!(m, "model not found"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        ids("ollama/api-tags.docs-example.json").unwrap(),
        ["deepseek-r1:latest", "llama3.2:latest"]
    );
    assert_eq!(
        ids("lmstudio/v1-models.third-party-observed.json").unwrap(),
        ["text-embedding-nomic-embed-text-v1.5"]
    );
    let openai = br#"{"object":"list","data":[{"id":"gpt-4o","object":"model","created":1715367049,"owned_by":"system"},{"id":"o3-mini","object":"model","created":1,"owned_by":"system"}]}"#;
    assert_eq!(model_ids(openai).unwrap(), ["gpt-4o", "o3-mini"]);
    assert_eq!(
        model_ids(br#"{"models": null}"#).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        model_ids(br#"{"models": [{"model": "m:1"}]}"#).unwrap(),
        ["m:1"]
    );
    assert!(matches!(
        model_ids(b"<html>"),
        Err(ModelListError::NotJson(_))
    ));
    assert!(matches!(
        model_ids(br#"{"data": 3}"#),
        Err(ModelListError::NotAList)
    ));
    assert!(matches!(model_ids(b"42"), Err(ModelListError::NotAList)));
    assert!(
        matches!(model_ids(br#"{"error": "boom"}"#), Err(ModelListError::Upstream(m)) if m == "boom")
    );
}
