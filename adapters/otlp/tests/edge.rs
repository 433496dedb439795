//! The OTLP/JSON mapping's edge cases on synthetic bodies (hex ids, 64-bit integers as
//! strings, enum names, every `AnyValue`), the GenAI spans, and bad input: a typed error
//! or a bounded model, never a panic.

use patchbay_otlp::model::{AnyValue, PointValue};
use patchbay_otlp::{Limits, Model, ModelError, OtlpDecoder, SignalKind, parse_decoder, protobuf};
use patchbay_signal::Signal;
use patchbay_signal::normalize::Decoded;
use patchbay_testkit::decoding::{decode_whole, good_signals};
use patchbay_testkit::prng::Rng;
use patchbay_testkit::properties::{
    assert_mutated_text_gives_schema_valid_signals, assert_random_input_gives_schema_valid_signals,
};
use patchbay_testkit::random_input::mutate;
use patchbay_testkit::validity::assert_all_decoded_valid;
use serde_json::{Value, json};

const SOURCE: &str = "otlp:edge";

fn decode(kind: SignalKind, body: &Value) -> Vec<Signal> {
    let mut decoder = OtlpDecoder::new(SOURCE);
    let mut out = Vec::new();
    decoder
        .decode_json(kind, body.to_string().as_bytes(), &mut out)
        .unwrap();
    decoder.flush(&mut out);
    assert_all_decoded_valid(&out);
    good_signals(out)
}

fn logs(attributes: Value, record: Value) -> Value {
    let mut record = record;
    record["attributes"] = attributes;
    json!({"resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
        "scopeLogs": [{"scope": {"name": "lib", "version": "1"}, "logRecords": [record]}]
    }]})
}

fn kv(key: &str, value: Value) -> Value {
    json!({"key": key, "value": value})
}

#[test]
fn json_encodings_of_ids_integers_enums_and_every_any_value() {
    let attributes = json!([
        kv("s", json!({"stringValue": "text"})),
        kv("big", json!({"intValue": "9007199254740993"})),
        kv("neg", json!({"intValue": -3})),
        kv("d", json!({"doubleValue": 1.5})),
        kv("dstr", json!({"doubleValue": "2.5"})),
        kv("nan", json!({"doubleValue": "NaN"})),
        kv("b", json!({"boolValue": true})),
        kv("bytes", json!({"bytesValue": "aGk="})),
        kv(
            "arr",
            json!({"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "x"}]}})
        ),
        kv(
            "kv",
            json!({"kvlistValue": {"values": [kv("inner", json!({"boolValue": false}))]}})
        ),
        kv("empty", json!({})),
    ]);
    let body = logs(
        attributes,
        json!({
            "timeUnixNano": "1795847597290000000",
            "observedTimeUnixNano": 1795847597291000000u64,
            "severityNumber": "SEVERITY_NUMBER_WARN",
            "severityText": "WARN",
            "body": {"stringValue": "hello"},
            "traceId": "5B8EFFF798038103D269B633813FC60C",
            "spanId": "EEE19B7EC3C1B174",
        }),
    );
    let Model::Logs(model) = Model::from_json(
        SignalKind::Logs,
        body.to_string().as_bytes(),
        &Limits::default(),
    )
    .unwrap() else {
        panic!("logs")
    };
    let record = &model.resources[0].scopes[0].items[0];
    assert_eq!(record.time_unix_nano, 1_795_847_597_290_000_000);
    assert_eq!(record.observed_time_unix_nano, 1_795_847_597_291_000_000);
    assert_eq!(record.severity_number, 13);
    assert_eq!(
        record.trace_id.as_deref(),
        Some("5b8efff798038103d269b633813fc60c")
    );
    assert_eq!(record.span_id.as_deref(), Some("eee19b7ec3c1b174"));
    let value = |k: &str| &record.attributes.iter().find(|a| a.key == k).unwrap().value;
    assert_eq!(value("big"), &AnyValue::Int(9_007_199_254_740_993));
    assert_eq!(value("neg"), &AnyValue::Int(-3));
    assert_eq!(value("dstr"), &AnyValue::Double(2.5));
    assert!(matches!(value("nan"), AnyValue::Double(d) if d.is_nan()));
    assert_eq!(value("bytes"), &AnyValue::Bytes(b"hi".to_vec()));
    assert_eq!(value("empty"), &AnyValue::Empty);

    let out = decode(SignalKind::Logs, &body);
    assert_eq!(out.len(), 1);
    let log = &out[0];
    assert_eq!(log.kind, "otel.log");
    assert_eq!(log.timestamp, 1_795_847_597_290);
    assert_eq!(
        log.correlation_id.as_deref(),
        Some("5b8efff798038103d269b633813fc60c")
    );
    assert_eq!(log.payload["body"], "hello");
    assert_eq!(log.payload["severityNumber"], 13);
    let attrs = &log.payload["attributes"];
    assert_eq!(attrs["big"], 9_007_199_254_740_993i64);
    assert_eq!(attrs["nan"], "NaN");
    assert_eq!(attrs["bytes"], "aGk=");
    assert_eq!(attrs["arr"], json!([1, "x"]));
    assert_eq!(attrs["kv"], json!({"inner": false}));
    assert_eq!(attrs["empty"], Value::Null);
    assert_eq!(log.meta("resource").unwrap()["service.name"], "svc");
    assert_eq!(log.meta("scope").unwrap()["name"], "lib");
    // The agent is the resource's service when no session is named.
    assert_eq!(log.source, SOURCE);
}

#[test]
fn snake_case_keys_and_numeric_enums_read_too() {
    let body = json!({"resource_logs": [{"scope_logs": [{"log_records": [{
        "time_unix_nano": 5_000_000, "severity_number": 17,
        "attributes": [kv("event.name", json!({"string_value": "x.thing"}))]
    }]}]}]});
    let out = decode(SignalKind::Logs, &body);
    assert_eq!(out[0].kind, "x.thing");
    assert_eq!(out[0].timestamp, 5);
    assert_eq!(out[0].meta("severityNumber").unwrap(), 17);
}

fn spans(spans: Value) -> Value {
    json!({"resourceSpans": [{
        "resource": {"attributes": [kv("service.name", json!({"stringValue": "app"}))]},
        "scopeSpans": [{"scope": {"name": "genai"}, "spans": spans}]
    }]})
}

#[test]
fn genai_spans_become_completions_tools_and_agent_states() {
    let body = spans(json!([
        {
            "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",
            "name": "chat gpt-5", "kind": "SPAN_KIND_CLIENT",
            "startTimeUnixNano": "1000000000", "endTimeUnixNano": "3000000000",
            "attributes": [
                kv("gen_ai.operation.name", json!({"stringValue": "chat"})),
                kv("gen_ai.conversation.id", json!({"stringValue": "conv-1"})),
                kv("gen_ai.request.model", json!({"stringValue": "gpt-5"})),
                kv("gen_ai.response.model", json!({"stringValue": "gpt-5-2026"})),
                kv("gen_ai.response.id", json!({"stringValue": "resp-1"})),
                kv("gen_ai.response.finish_reasons", json!({"arrayValue": {"values": [{"stringValue": "stop"}]}})),
                kv("gen_ai.usage.input_tokens", json!({"intValue": "42"})),
                kv("gen_ai.usage.output_tokens", json!({"intValue": 7})),
            ],
            "status": {}
        },
        {
            "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "c7ad6b7169203331",
            "name": "execute_tool get_weather",
            "startTimeUnixNano": "4000000000", "endTimeUnixNano": "4500000000",
            "attributes": [
                kv("gen_ai.operation.name", json!({"stringValue": "execute_tool"})),
                kv("gen_ai.conversation.id", json!({"stringValue": "conv-1"})),
                kv("gen_ai.tool.name", json!({"stringValue": "get_weather"})),
                kv("gen_ai.tool.call.id", json!({"stringValue": "call-9"})),
                kv("gen_ai.tool.call.arguments", json!({"stringValue": "{\"city\":\"Paris\"}"})),
                kv("gen_ai.tool.call.result", json!({"stringValue": "{\"temp\":20}"})),
            ],
            "status": {"code": "STATUS_CODE_ERROR", "message": "timed out"}
        },
        {
            "traceId": "1af7651916cd43dd8448eb211c80319c", "spanId": "d7ad6b7169203331",
            "name": "invoke_agent Planner",
            "startTimeUnixNano": "5000000000", "endTimeUnixNano": "9000000000",
            "attributes": [
                kv("gen_ai.agent.name", json!({"stringValue": "Planner"})),
                kv("gen_ai.agent.id", json!({"stringValue": "agent-7"})),
            ],
            "status": {"code": 1}
        },
        {"traceId": "", "spanId": "", "name": "GET /", "attributes": [],
         "events": [{"timeUnixNano": "1", "name": "exception", "attributes": []}]}
    ]));
    let out = decode(SignalKind::Traces, &body);
    let kinds: Vec<&str> = out.iter().map(|s| s.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "token_usage",
            "completion",
            "tool_call",
            "tool_result",
            "agent_state_change",
            "agent_state_change",
            "otel.span"
        ]
    );
    assert_eq!(out[0].payload["agentId"], "conv-1");
    assert_eq!(out[0].payload["promptTokens"], 42);
    assert_eq!(out[0].payload["completionTokens"], 7);
    assert_eq!(out[0].payload["model"], "gpt-5-2026");
    assert_eq!(out[1].payload["taskId"], "resp-1");
    assert_eq!(out[1].payload["success"], true);
    assert_eq!(out[1].payload["result"], "stop");
    assert_eq!(
        out[1].correlation_id.as_deref(),
        Some("0af7651916cd43dd8448eb211c80319c")
    );
    assert_eq!(out[2].payload["input"], json!({"city": "Paris"}));
    assert_eq!(out[2].payload["callId"], "call-9");
    assert_eq!(out[2].timestamp, 4000);
    assert_eq!(out[3].payload["success"], false);
    assert_eq!(out[3].payload["output"]["error"], "timed out");
    assert_eq!(out[3].payload["output"]["result"], json!({"temp": 20}));
    assert_eq!(out[3].timestamp, 4500);
    assert_eq!(out[4].payload["agentId"], "agent-7");
    assert_eq!(
        (&out[4].payload["from"], &out[4].payload["to"]),
        (&json!("idle"), &json!("thinking"))
    );
    assert_eq!(out[5].payload["to"], "done");
    assert_eq!(out[5].meta("agentName").unwrap(), "Planner");
    assert_eq!(out[6].payload["name"], "GET /");
    assert_eq!(out[6].payload["events"][0]["name"], "exception");
    assert!(out[6].correlation_id.is_none());
}

#[test]
fn a_session_s_tokens_count_from_one_kind_of_record_only() {
    // A span with usage claims the session first: a log event of the same counts later
    // is not `token_usage` again.
    let span = spans(json!([{
        "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",
        "name": "chat", "startTimeUnixNano": "1", "endTimeUnixNano": "2",
        "attributes": [
            kv("session.id", json!({"stringValue": "s1"})),
            kv("gen_ai.usage.input_tokens", json!({"intValue": 5})),
            kv("gen_ai.usage.output_tokens", json!({"intValue": 6})),
        ]
    }]));
    let event = logs(
        json!([
            kv("session.id", json!({"stringValue": "s1"})),
            kv("event.name", json!({"stringValue": "vendor.api_response"})),
            kv("input_token_count", json!({"intValue": 5})),
            kv("output_token_count", json!({"intValue": 6})),
        ]),
        json!({"timeUnixNano": "3"}),
    );
    let mut decoder = OtlpDecoder::new(SOURCE);
    let mut out = Vec::new();
    decoder
        .decode_json(SignalKind::Traces, span.to_string().as_bytes(), &mut out)
        .unwrap();
    decoder
        .decode_json(SignalKind::Logs, event.to_string().as_bytes(), &mut out)
        .unwrap();
    let out = good_signals(out);
    let kinds: Vec<&str> = out.iter().map(|s| s.kind.as_str()).collect();
    assert_eq!(kinds, ["token_usage", "completion", "vendor.api_response"]);
    assert_eq!(out[2].meta("tokensCountedBy").unwrap(), "span");
}

#[test]
fn metric_enum_names_and_string_integers() {
    let body = json!({"resourceMetrics": [{"scopeMetrics": [{"metrics": [{
        "name": "requests", "unit": "1",
        "sum": {"aggregationTemporality": "AGGREGATION_TEMPORALITY_CUMULATIVE", "isMonotonic": true,
                "dataPoints": [{"asInt": "12", "timeUnixNano": "2000000", "attributes": []}]}
    }, {
        "name": "latency",
        "histogram": {"aggregationTemporality": 1, "dataPoints": [{"count": "3", "sum": 1.5, "min": 0.1, "max": 1}]}
    }]}]}]});
    let Model::Metrics(model) = Model::from_json(
        SignalKind::Metrics,
        body.to_string().as_bytes(),
        &Limits::default(),
    )
    .unwrap() else {
        panic!("metrics")
    };
    let metrics = &model.resources[0].scopes[0].items;
    assert_eq!(metrics[0].temporality, 2);
    assert!(metrics[0].monotonic);
    assert_eq!(metrics[0].points[0].value, PointValue::Int(12));
    let out = decode(SignalKind::Metrics, &body);
    assert_eq!(out[0].payload["value"], 12);
    assert_eq!(out[0].payload["temporality"], "cumulative");
    assert_eq!(out[0].timestamp, 2);
    assert_eq!(out[1].payload["count"], 3);
    assert_eq!(out[1].payload["sum"], 1.5);
}

// ---- bad input -------------------------------------------------------------------------

fn model_error(kind: SignalKind, body: &[u8]) -> ModelError {
    Model::from_json(kind, body, &Limits::default()).unwrap_err()
}

#[test]
fn a_truncated_or_misshapen_body_is_a_typed_error() {
    let whole = logs(json!([]), json!({})).to_string();
    assert!(matches!(
        model_error(SignalKind::Logs, &whole.as_bytes()[..whole.len() / 2]),
        ModelError::Json(_)
    ));
    assert!(matches!(
        model_error(SignalKind::Logs, b"[1, 2]"),
        ModelError::Shape { .. }
    ));
    let err = model_error(SignalKind::Logs, br#"{"resourceLogs": {"a": 1}}"#);
    assert_eq!(
        err,
        ModelError::Shape {
            path: "resourceLogs".into(),
            expected: "an array"
        }
    );
    let err = model_error(
        SignalKind::Logs,
        br#"{"resourceLogs": [{"scopeLogs": [{"logRecords": [7]}]}]}"#,
    );
    assert!(
        err.to_string()
            .contains("resourceLogs.0.scopeLogs.0.logRecords.0"),
        "{err}"
    );
    assert_eq!(
        model_error(SignalKind::Traces, whole.as_bytes()),
        ModelError::WrongKind {
            expected: SignalKind::Traces,
            found: SignalKind::Logs
        }
    );
    // An object naming no export is an empty one.
    let empty = Model::from_json(SignalKind::Logs, b"{}", &Limits::default()).unwrap();
    assert!(matches!(empty, Model::Logs(l) if l.resources.is_empty()));
    // Through the decoder: an error and nothing emitted.
    let mut decoder = OtlpDecoder::new(SOURCE);
    let mut out = Vec::new();
    assert!(
        decoder
            .decode_json(SignalKind::Logs, b"{\"resourceLogs\": 3}", &mut out)
            .is_err()
    );
    assert!(out.is_empty());
}

#[test]
fn huge_attributes_are_cut_and_counted() {
    let huge = "é".repeat(20_000);
    let many: Vec<Value> = (0..1000)
        .map(|i| kv(&format!("k{i}"), json!({"intValue": i})))
        .collect();
    let mut attributes = vec![kv("huge", json!({"stringValue": huge}))];
    attributes.extend(many);
    let long_array: Vec<Value> = (0..1000).map(|i| json!({"intValue": i})).collect();
    attributes.insert(1, kv("arr", json!({"arrayValue": {"values": long_array}})));
    let body = logs(Value::Array(attributes), json!({}));
    let limits = Limits::default();
    let model = Model::from_json(SignalKind::Logs, body.to_string().as_bytes(), &limits).unwrap();
    let cuts = model.cuts();
    assert_eq!(cuts.strings, 1);
    assert_eq!(cuts.attributes, 1002 - limits.max_attributes as u64);
    assert_eq!(cuts.array_items, 1000 - limits.max_array as u64);
    let Model::Logs(logs) = model else { panic!() };
    let record = &logs.resources[0].scopes[0].items[0];
    assert_eq!(record.attributes.len(), limits.max_attributes);
    let AnyValue::Str(cut) = &record.attributes[0].value else {
        panic!()
    };
    assert!(cut.len() <= limits.max_string && cut.len() > limits.max_string - 4);
    let mut decoder = OtlpDecoder::new(SOURCE);
    let mut out = Vec::new();
    decoder
        .decode_json(SignalKind::Logs, body.to_string().as_bytes(), &mut out)
        .unwrap();
    assert_all_decoded_valid(&out);
    assert_eq!(decoder.cuts(), cuts);
}

fn nested_kvlist(depth: usize) -> Value {
    let mut value = json!({"stringValue": "leaf"});
    for _ in 0..depth {
        value = json!({"kvlistValue": {"values": [{"key": "k", "value": value}]}});
    }
    value
}

#[test]
fn deep_nesting_is_cut_or_refused() {
    let limits = Limits::default();
    // Deeper than the model keeps, within what JSON reads: emptied, counted.
    let body = logs(json!([kv("deep", nested_kvlist(20))]), json!({}));
    let model = Model::from_json(SignalKind::Logs, body.to_string().as_bytes(), &limits).unwrap();
    assert_eq!(model.cuts().depth, 1);
    let out = decode(SignalKind::Logs, &body);
    let mut v = &out[0].payload["attributes"]["deep"];
    let mut levels = 0;
    while let Some(inner) = v.get("k") {
        v = inner;
        levels += 1;
    }
    assert_eq!(levels, limits.max_depth);
    assert_eq!(*v, Value::Null);
    // Far deeper: the JSON reader refuses it (its recursion limit), a typed error.
    let mut deep = String::new();
    for _ in 0..500 {
        deep.push_str(r#"{"kvlistValue":{"values":[{"key":"k","value":"#);
    }
    deep.push_str(r#"{"stringValue":"x"}"#);
    for _ in 0..500 {
        deep.push_str("}]}}");
    }
    let text = format!(
        r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{{"attributes":[{{"key":"d","value":{deep}}}]}}]}}]}}]}}"#
    );
    assert!(matches!(
        Model::from_json(SignalKind::Logs, text.as_bytes(), &limits),
        Err(ModelError::Json(_))
    ));
    let decoded = decode_whole(parse_decoder(SOURCE).as_mut(), &text);
    assert_eq!(decoded.len(), 1);
    assert!(decoded[0].is_bad());
}

#[test]
fn records_beyond_the_limit_are_cut() {
    let records: Vec<Value> = (0..10)
        .map(|_| json!({"body": {"stringValue": "x"}}))
        .collect();
    let body = json!({"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]});
    let limits = Limits {
        max_items: 4,
        ..Limits::default()
    };
    let model = Model::from_json(SignalKind::Logs, body.to_string().as_bytes(), &limits).unwrap();
    assert_eq!(model.cuts().items, 6);
    let mut decoder = OtlpDecoder::with_limits(SOURCE, limits);
    let mut out = Vec::new();
    decoder
        .decode_json(SignalKind::Logs, body.to_string().as_bytes(), &mut out)
        .unwrap();
    assert_eq!(out.len(), 4);
}

#[test]
fn text_between_bodies_is_counted_bad_input_and_reading_goes_on() {
    let body = logs(json!([]), json!({"body": {"stringValue": "ok"}})).to_string();
    let text = format!("not json\n{body}\n42\n{{\"other\": 1}}\n{{\"resourceLogs\": 5}}\n{body}");
    let decoded = decode_whole(parse_decoder(SOURCE).as_mut(), &text);
    assert_all_decoded_valid(&decoded);
    let bad: Vec<bool> = decoded.iter().map(Decoded::is_bad).collect();
    assert_eq!(bad, [true, false, true, true, true, false]);
    // An unfinished last body is reported too.
    let decoded = decode_whole(parse_decoder(SOURCE).as_mut(), &body[..body.len() - 3]);
    assert_eq!(decoded.len(), 1);
    assert!(decoded[0].is_bad());
}

fn fixture(dir: &str, name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{dir}/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    ":",
    "\n",
    "\"resourceLogs\"",
    "\"resourceSpans\"",
    "\"resourceMetrics\"",
    "\"scopeLogs\"",
    "\"logRecords\"",
    "\"attributes\"",
    "\"key\"",
    "\"value\"",
    "\"stringValue\"",
    "\"intValue\"",
    "\"kvlistValue\"",
    "\"arrayValue\"",
    "\"values\"",
    "\"bytesValue\"",
    "\"traceId\"",
    "\"event.name\"",
    "\"session.id\"",
    "\"claude_code.tool_result\"",
    "\"input_tokens\"",
    "\"output_tokens\"",
    "\"spans\"",
    "\"metrics\"",
    "\"sum\"",
    "\"dataPoints\"",
    "\"asInt\"",
    "\"123\"",
    "-1",
    "1e999",
    "null",
    "true",
    "\\u0000",
];

#[test]
fn random_input_never_panics_and_gives_valid_signals() {
    let mut rng = Rng(0x0a1b_2c3d);
    assert_random_input_gives_schema_valid_signals(|| parse_decoder(SOURCE), PIECES, &mut rng, 300);
}

#[test]
fn mutated_captures_never_panic_and_give_valid_signals() {
    let mut rng = Rng(0x5eed_0715);
    for (dir, name) in [
        ("claude-json", "003-v1_logs.json"),
        ("claude-json", "001-v1_metrics.json"),
    ] {
        let text: Value = serde_json::from_slice(&fixture(dir, name)).unwrap();
        assert_mutated_text_gives_schema_valid_signals(
            || parse_decoder(SOURCE),
            &text.to_string(),
            PIECES,
            &mut rng,
            200,
        );
    }
}

#[test]
fn random_and_mutated_protobuf_never_panics() {
    let mut rng = Rng(0xb1a5_7ed0);
    let limits = Limits::default();
    let kinds = [SignalKind::Logs, SignalKind::Traces, SignalKind::Metrics];
    let check = |bytes: &[u8]| {
        for kind in kinds {
            if let Ok(model) = protobuf::decode(kind, bytes, &limits) {
                let mut decoder = OtlpDecoder::new(SOURCE);
                let mut out = Vec::new();
                decoder.decode(&model, &mut out);
                decoder.flush(&mut out);
                assert_all_decoded_valid(&out);
            }
        }
    };
    for _ in 0..500 {
        let len = rng.below(200);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        check(&bytes);
    }
    let inserts = [0x0a, 0x12, 0x1a, 0x08, 0x80, 0xff, 0x00, 0x09, 0x11];
    for name in ["002-v1_logs.bin", "001-v1_metrics.bin"] {
        let original = fixture("claude-protobuf", name);
        // Every truncation is an error or a model, never a panic.
        for end in (0..original.len()).step_by(7) {
            check(&original[..end]);
        }
        for _ in 0..300 {
            let mut bytes = original.clone();
            mutate(&mut rng, &mut bytes, &inserts);
            check(&bytes);
        }
    }
    // A long chain of nested messages is read without recursion beyond the limits.
    let mut nested = vec![0x08, 0x01];
    for _ in 0..200 {
        let mut outer = vec![0x0a];
        let mut len = nested.len();
        while len >= 0x80 {
            outer.push((len as u8 & 0x7f) | 0x80);
            len >>= 7;
        }
        outer.push(len as u8);
        outer.extend(nested);
        nested = outer;
    }
    check(&nested);
}

#[test]
fn api_errors_and_refused_tools_the_captures_do_not_show() {
    let event = |name: &str, extra: Value| {
        let mut attributes = vec![
            kv("session.id", json!({"stringValue": "s9"})),
            kv("event.name", json!({"stringValue": name})),
        ];
        attributes.extend(extra.as_array().unwrap().iter().cloned());
        logs(
            Value::Array(attributes),
            json!({"timeUnixNano": "7000000", "body": {"stringValue": format!("claude_code.{name}")}}),
        )
    };
    let out = decode(
        SignalKind::Logs,
        &event(
            "api_error",
            json!([
                kv("error", json!({"stringValue": "overloaded"})),
                kv("status_code", json!({"stringValue": "529"}))
            ]),
        ),
    );
    assert_eq!(out[0].kind, "error");
    assert_eq!(out[0].payload["message"], "overloaded");
    assert_eq!(out[0].payload["code"], "529");
    assert_eq!(out[0].payload["agentId"], "s9");
    let out = decode(
        SignalKind::Logs,
        &event(
            "tool_decision",
            json!([
                kv("decision", json!({"stringValue": "reject"})),
                kv("source", json!({"stringValue": "user_reject"})),
                kv("tool_use_id", json!({"stringValue": "toolu_2"})),
            ]),
        ),
    );
    assert_eq!(out[0].kind, "approval.decided");
    assert_eq!(out[0].payload["value"], "deny");
    assert_eq!(out[0].payload["promptId"], "toolu_2");
    // A word the vocabulary does not know passes on by name.
    let out = decode(
        SignalKind::Logs,
        &event(
            "tool_decision",
            json!([
                kv("decision", json!({"stringValue": "maybe"})),
                kv("tool_use_id", json!({"stringValue": "t"}))
            ]),
        ),
    );
    assert_eq!(out[0].kind, "claude_code.tool_decision");
    let out = decode(
        SignalKind::Logs,
        &event(
            "tool_result",
            json!([
                kv("tool_name", json!({"stringValue": "Edit"})),
                kv("success", json!({"stringValue": "false"})),
                kv("error", json!({"stringValue": "no such file"})),
                kv(
                    "tool_parameters",
                    json!({"stringValue": "{\"file_path\":\"/x\"}"})
                ),
            ]),
        ),
    );
    assert_eq!(out[1].kind, "tool_result");
    assert_eq!(out[1].payload["success"], false);
    assert_eq!(out[1].payload["output"]["error"], "no such file");
    assert_eq!(out[0].payload["input"]["file_path"], "/x");
}
