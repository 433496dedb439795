//! Hand-written cases for every mapping rule, including what the golden tape does not show.

mod common;

use common::*;
use patchbay_palyra::PalyraDecoder;
use patchbay_palyra::realtime::RealtimeResume;
use patchbay_signal::Signal;
use serde_json::{Value, json};

const SOURCE: &str = "palyra:local";

fn decode(lines: &[Value]) -> Vec<Signal> {
    let signals = into_signals(decode_whole(
        &mut PalyraDecoder::new(SOURCE),
        &ndjson(lines),
    ));
    assert_all_valid(&signals);
    signals
}

fn event_line(event_type: &str, body: Value) -> Value {
    json!({ "type": "event", "event": run_event(RUN, event_type, body) })
}

fn status(kind: &str, message: &str) -> Value {
    event_line("status", json!({ "kind": kind, "message": message }))
}

#[test]
fn tool_proposal_and_result() {
    let s = decode(&[
        event_line(
            "tool_proposal",
            json!({"proposal_id": "P1", "tool_name": "fs.read", "input_json": {"path": "/etc/hosts"}, "approval_required": false}),
        ),
        event_line(
            "tool_result",
            json!({"proposal_id": "P1", "success": true, "output_json": {"bytes": 12}, "error": ""}),
        ),
    ]);
    assert_eq!(kinds(&s), ["tool_call", "tool_result"]);
    assert_eq!(s[0].payload["toolName"], "fs.read");
    assert_eq!(s[0].payload["callId"], "P1");
    assert_eq!(s[0].payload["agentId"], SOURCE);
    assert_eq!(s[0].payload["input"], json!({"path": "/etc/hosts"}));
    assert_eq!(s[0].meta("approval_required"), Some(&json!(false)));
    assert_eq!(
        s[1].payload["toolName"], "fs.read",
        "named from the proposal"
    );
    assert_eq!(s[1].payload["callId"], "P1");
    assert_eq!(s[1].payload["success"], true);
    assert_eq!(s[1].payload["output"], json!({"bytes": 12}));
    assert!(s[1].meta("error").is_none(), "an empty error is no error");
    for x in &s {
        assert_eq!(x.correlation_id.as_deref(), Some(RUN));
    }
}

#[test]
fn tool_inputs_and_outputs_that_are_not_objects() {
    let s = decode(&[
        event_line(
            "tool_proposal",
            json!({"proposal_id": "A", "tool_name": "t", "input_json": null}),
        ),
        event_line(
            "tool_proposal",
            json!({"proposal_id": "B", "tool_name": "t", "input_json": "not json {"}),
        ),
        event_line(
            "tool_proposal",
            json!({"proposal_id": "C", "tool_name": "t", "input_json": [1, 2]}),
        ),
        event_line(
            "tool_proposal",
            json!({"proposal_id": null, "tool_name": "t"}),
        ),
        event_line(
            "tool_result",
            json!({"proposal_id": "C", "success": false, "output_json": null, "error": "boom"}),
        ),
        event_line(
            "tool_result",
            json!({"proposal_id": "ZZ", "output_json": "plain text"}),
        ),
    ]);
    assert_eq!(s[0].payload["input"], json!({}));
    assert_eq!(s[1].payload["input"], json!({"_raw": "not json {"}));
    assert_eq!(s[2].payload["input"], json!({"value": [1, 2]}));
    assert!(s[3].payload.get("callId").is_none());
    assert_eq!(s[4].payload["success"], false);
    assert!(s[4].payload.get("output").is_none());
    assert_eq!(s[4].meta("error"), Some(&json!("boom")));
    assert_eq!(
        s[5].payload["toolName"], "unknown",
        "no proposal seen for ZZ"
    );
    assert_eq!(
        s[5].payload["success"], true,
        "no success field and no error"
    );
    assert_eq!(s[5].payload["output"], json!({"_raw": "plain text"}));
}

#[test]
fn approval_request_waits_and_response_resumes() {
    let request = json!({
        "proposal_id": "P9", "approval_id": "01ARZ3NDEKTSV4RRFFQ69G5FB0", "tool_name": "shell.exec",
        "input_json": {"cmd": "rm -rf /tmp/x"}, "approval_required": true,
        "request_summary": "run shell.exec",
        "prompt": {"title": "Allow shell?", "risk_level": "high", "options": [{"option_id": "allow_once"}]}
    });
    let s = decode(&[
        status("accepted", "a"),
        status("in_progress", "b"),
        event_line("tool_approval_request", request.clone()),
        event_line(
            "tool_approval_response",
            json!({"proposal_id": "P9", "approval_id": "01ARZ3NDEKTSV4RRFFQ69G5FB0", "approved": true, "decision_scope": "once"}),
        ),
    ]);
    assert_eq!(
        kinds(&s),
        [
            "agent_state_change",
            "agent_state_change",
            "agent_state_change",
            "palyra.approval_request",
            "approval.requested",
            "palyra.tool_approval_response",
            "approval.decided",
            "agent_state_change",
        ]
    );
    assert_eq!(
        s[4].payload,
        *json!({"promptId": "01ARZ3NDEKTSV4RRFFQ69G5FB0", "agentId": s[4].source.as_str(),
               "toolName": "shell.exec", "input": {"cmd": "rm -rf /tmp/x"},
               "choices": ["allow_once"]})
        .as_object()
        .unwrap(),
        "the common approval, what every UI reads"
    );
    assert_eq!(
        s[6].payload,
        *json!({"promptId": "01ARZ3NDEKTSV4RRFFQ69G5FB0", "value": "allow", "by": "palyra"})
            .as_object()
            .unwrap()
    );
    assert_eq!(
        (s[2].payload["from"].as_str(), s[2].payload["to"].as_str()),
        (Some("acting"), Some("waiting"))
    );
    assert_eq!(s[2].payload["reason"], "run shell.exec");
    let mut expected = request.as_object().unwrap().clone();
    expected.insert("promptId".into(), json!("01ARZ3NDEKTSV4RRFFQ69G5FB0"));
    assert_eq!(
        s[3].payload, expected,
        "the request is kept whole, plus promptId"
    );
    assert_eq!(
        (s[7].payload["from"].as_str(), s[7].payload["to"].as_str()),
        (Some("waiting"), Some("acting"))
    );
    assert_eq!(s[7].payload["reason"], "approved");
}

#[test]
fn failed_run_is_an_error_and_one_failed_completion() {
    let s = decode(&[
        json!({"type": "meta", "run_id": RUN, "session_id": SESSION}),
        status("accepted", ""),
        status("failed", "provider unavailable"),
        json!({"type": "complete", "run_id": RUN, "status": "failed"}),
    ]);
    assert_eq!(
        kinds(&s),
        [
            "palyra.meta",
            "agent_state_change",
            "error",
            "completion",
            "palyra.complete"
        ]
    );
    assert!(
        s[1].payload.get("reason").is_none(),
        "an empty message is no reason"
    );
    assert_eq!(s[2].payload["code"], "run_failed");
    assert_eq!(s[2].payload["message"], "provider unavailable");
    assert_eq!(s[2].payload["severity"], "error");
    assert_eq!(s[3].payload["success"], false);
    assert_eq!(s[3].payload["result"], "failed");
}

#[test]
fn complete_line_completes_a_run_without_terminal_status() {
    let s = decode(&[
        json!({"type": "meta", "run_id": RUN, "session_id": SESSION}),
        status("in_progress", "x"),
        json!({"type": "error", "run_id": RUN, "error": "stream reset by peer"}),
        json!({"type": "complete", "run_id": RUN, "status": "failed"}),
    ]);
    assert_eq!(
        kinds(&s),
        ["palyra.meta", "agent_state_change", "error", "completion"]
    );
    assert_eq!(s[1].payload["from"], "idle");
    assert_eq!(s[2].payload["code"], "run_stream_error");
    assert_eq!(s[2].payload["message"], "stream reset by peer");
    assert_eq!(s[3].payload["success"], false);
    assert_eq!(s[3].payload["result"], "failed");

    let s = decode(&[json!({"type": "complete", "run_id": RUN, "status": "done"})]);
    assert_eq!(kinds(&s), ["completion"]);
    assert_eq!(s[0].payload["success"], true);

    let s = decode(&[json!({"type": "complete", "run_id": RUN, "status": "in_progress"})]);
    assert_eq!(
        s[0].payload["success"], false,
        "the stream ended before the run did"
    );
}

#[test]
fn duplicate_done_status_is_not_a_second_completion() {
    let s = decode(&[status("done", "completed"), status("done", "completed")]);
    assert_eq!(kinds(&s), ["completion", "palyra.status"]);
}

#[test]
fn console_event_without_run_id_takes_the_meta_run() {
    let s = decode(&[
        json!({"type": "meta", "run_id": RUN, "session_id": SESSION}),
        json!({"type": "event", "event": {"run_id": "", "event_type": "model_token", "model_token": {"token": "hi", "is_final": false}}}),
        json!({"type": "event", "event": {"event_type": "model_token", "model_token": {"token": " there", "is_final": true}}}),
    ]);
    assert_eq!(s[1].correlation_id.as_deref(), Some(RUN));
    assert_eq!(s[2].correlation_id.as_deref(), Some(RUN));
    assert_eq!(s[1].payload["index"], 0);
    assert_eq!(s[2].payload["index"], 1);
    assert_eq!(s[2].payload["content"], " there");
}

#[test]
fn text_delta_indexes_count_per_run() {
    let other = "01ARZ3NDEKTSV4RRFFQ69G5FZZ";
    let token = |run: &str, t: &str| json!({"type": "event", "event": run_event(run, "model_token", json!({"token": t, "is_final": false}))});
    let s = decode(&[token(RUN, "a"), token(other, "b"), token(RUN, "c")]);
    let idx: Vec<_> = s
        .iter()
        .map(|x| x.payload["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx, [0, 0, 1]);
}

/// A2UI patches as Palyra's A2UI envelope schema defines them (`patch: {v: 1, ops}`).
fn a2ui_examples() -> Vec<Value> {
    vec![
        json!({"v": 1, "ops": [{"op": "replace", "path": "/title", "value": "Deploy status"}]}),
        json!({"v": 1, "ops": [
            {"op": "add", "path": "/cards/-", "value": {"kind": "progress", "label": "build", "value": 0.42, "tags": ["ci", "linux"]}},
            {"op": "remove", "path": "/cards/0"},
            {"op": "replace", "path": "/footer", "value": null}
        ]}),
        json!({"v": 1, "ops": [{"op": "add", "path": "/text", "value": "héllo ✓ — ünïcode 🚀"}]}),
    ]
}

#[test]
fn a2ui_patches_pass_through_intact() {
    // The examples are real A2UI patches: they validate against the envelope schema's
    // `patch` definition.
    let schema: Value = serde_json::from_str(&patchbay_testkit::fixture_text(
        "palyra/envelopes__a2ui-envelope.v1.json",
    ))
    .unwrap();
    let mut patch_schema = schema["properties"]["patch"].clone();
    patch_schema["$schema"] = schema["$schema"].clone();
    let validator = jsonschema::validator_for(&patch_schema).unwrap();
    for patch in a2ui_examples() {
        let errors: Vec<String> = validator
            .iter_errors(&patch)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{patch}: {errors:?}");
    }
    assert!(
        !validator.is_valid(&json!({"v": 1, "ops": [{"op": "remove", "path": "/x", "value": 1}]}))
    );

    let lines: Vec<Value> = a2ui_examples()
        .into_iter()
        .map(|patch| {
            event_line(
                "a2ui_update",
                json!({"surface": "canvas", "patch_json": patch}),
            )
        })
        .collect();
    let s = decode(&lines);
    for (signal, patch) in s.iter().zip(a2ui_examples()) {
        assert_eq!(signal.kind, "a2ui.update");
        assert_eq!(
            Value::Object(signal.payload.clone()),
            patch,
            "the patch is the payload"
        );
        assert_eq!(signal.meta("surface"), Some(&json!("canvas")));
        assert_eq!(signal.correlation_id.as_deref(), Some(RUN));
    }

    // Realtime frames carry the same patches intact.
    let frames: Vec<Value> = a2ui_examples()
        .into_iter()
        .enumerate()
        .map(|(i, patch)| {
            event_frame(
                i as u64 + 1,
                T0,
                run_event(
                    RUN,
                    "a2ui_update",
                    json!({"surface": "canvas", "patch_json": patch}),
                ),
            )
        })
        .collect();
    let s = decode(&frames);
    for (signal, patch) in s.iter().zip(a2ui_examples()) {
        assert_eq!(Value::Object(signal.payload.clone()), patch);
    }

    // A list of ops, and a patch still encoded as a JSON string.
    let ops = json!([{"op": "replace", "path": "/title", "value": "ok"}]);
    let s = decode(&[
        event_line("a2ui_update", json!({"surface": "chat", "patch_json": ops})),
        event_line(
            "a2ui_update",
            json!({"surface": "chat", "patch_json": ops.to_string()}),
        ),
        event_line(
            "a2ui_update",
            json!({"surface": "chat", "patch_json": "<<not json>>"}),
        ),
    ]);
    assert_eq!(Value::Object(s[0].payload.clone()), json!({"ops": ops}));
    assert_eq!(Value::Object(s[1].payload.clone()), json!({"ops": ops}));
    assert_eq!(
        Value::Object(s[2].payload.clone()),
        json!({"_raw": "<<not json>>"})
    );
}

#[test]
fn journal_and_unknown_events_keep_their_names() {
    let journal = json!({
        "event_id": "E1", "session_id": "<redacted>", "run_id": RUN, "kind": "tool_executed",
        "actor": "agent", "timestamp_unix_ms": 1_711_111_111_111i64, "payload_json": {"x": 1},
        "hash": "h", "prev_hash": "p"
    });
    let s = decode(&[
        event_line("journal_event", journal.clone()),
        event_line(
            "tool_attestation",
            json!({"proposal_id": "P", "timed_out": false}),
        ),
        event_line(
            "tool_decision",
            json!({"proposal_id": "P", "kind": "allow"}),
        ),
        event_line("brand_new_event", json!({"anything": [1, 2]})),
        json!({"type": "event", "event": {"run_id": RUN, "event_type": "unspecified"}}),
        json!({"type": "event", "event": {"run_id": RUN, "event_type": "status", "status": "weird"}}),
        status("unspecified", "?"),
    ]);
    assert_eq!(
        kinds(&s),
        [
            "palyra.journal_event",
            "palyra.tool_attestation",
            "palyra.tool_decision",
            "palyra.brand_new_event",
            "palyra.unspecified",
            "palyra.status",
            "palyra.status",
        ]
    );
    assert_eq!(Value::Object(s[0].payload.clone()), journal);
    assert_eq!(
        s[0].timestamp, 1_711_111_111_111,
        "a journal event has its own time"
    );
    assert_eq!(s[3].payload["anything"], json!([1, 2]));
    assert_eq!(s[5].payload["value"], "weird");
}

#[test]
fn provider_usage_with_counts_is_token_usage() {
    let body = json!({
        "full_text": "hi", "finish_reason": "stop",
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15, "source": "provider"},
        "raw_provider_refs": {"provider_model_id": "gpt-4o-mini"}
    });
    let s = decode(&[event_line("provider_turn_output", body)]);
    assert_eq!(kinds(&s), ["palyra.provider_turn_output", "token_usage"]);
    assert_eq!(s[1].payload["promptTokens"], 12);
    assert_eq!(s[1].payload["completionTokens"], 3);
    assert_eq!(s[1].payload["model"], "gpt-4o-mini");
    assert_eq!(s[1].meta("total_tokens"), Some(&json!(15)));
}

#[test]
fn realtime_non_run_payloads_and_other_frames() {
    let s = decode(&[
        json!({"type": "event", "payload": {
            "schema_version": 1, "sequence": 1, "event_id": "e1", "topic": "run",
            "sensitivity": "internal", "occurred_at_unix_ms": T0,
            "payload": {"command": "run.abort", "role": "operator", "run_id": RUN, "approval_id": null}
        }}),
        json!({"type": "event", "payload": {
            "schema_version": 1, "sequence": 2, "event_id": "e2", "topic": "run",
            "occurred_at_unix_ms": T0 + 1, "payload": {"event": run_event(RUN, "model_token", json!({"token": "x", "is_final": false})), "stream": "chat"}
        }}),
        json!({"type": "snapshot.required", "payload": {
            "schema_version": 1, "sequence": 40, "event_id": "snapshot-refresh-required", "topic": "system",
            "occurred_at_unix_ms": T0 + 2, "payload": {"reason": "cursor_too_old", "cursor": {"sequence": 3}}
        }}),
        json!({"type": "pong", "payload": {"payload": {"n": 1}, "server_time_unix_ms": T0 + 3}}),
        json!({"type": "error", "payload": {"error": {
            "code": "realtime/incompatible_protocol", "message": "realtime protocol version is not supported",
            "recovery_hint": "retry with a supported version"}, "supported_protocol_versions": {"min": 1, "max": 1}}}),
        json!({"type": "mystery.frame", "payload": {"run_id": RUN, "k": 1}}),
    ]);
    assert_eq!(
        kinds(&s),
        [
            "palyra.realtime.run",
            "text_delta",
            "palyra.snapshot.required",
            "palyra.pong",
            "error",
            "palyra.mystery.frame",
        ]
    );
    assert_eq!(s[0].correlation_id.as_deref(), Some(RUN));
    assert_eq!(s[0].payload["command"], "run.abort");
    assert_eq!(s[0].timestamp, T0);
    assert_eq!(s[1].meta("stream"), Some(&json!("chat")));
    assert_eq!(s[1].meta("sequence"), Some(&json!(2)));
    assert_eq!(s[2].payload["reason"], "cursor_too_old");
    assert_eq!(s[2].timestamp, T0 + 2);
    assert_eq!(s[3].meta("internal"), Some(&json!(true)));
    assert_eq!(s[3].timestamp, T0 + 3);
    assert_eq!(s[4].payload["code"], "realtime/incompatible_protocol");
    assert_eq!(
        s[4].meta("recovery_hint"),
        Some(&json!("retry with a supported version"))
    );
    assert_eq!(
        s[4].meta("supported_protocol_versions"),
        Some(&json!({"min": 1, "max": 1}))
    );
    assert_eq!(s[5].correlation_id.as_deref(), Some(RUN));
}

#[test]
fn command_results_in_frames_and_bare() {
    let ok = json!({"request_id": "r1", "command": "run.abort", "ok": true,
        "result": {"cancel": {"accepted": true}}, "idempotency_key": "patchbay:x", "replayed": false});
    let err = json!({"request_id": "r2", "command": "approval.decide", "ok": false,
        "error": {"code": "approval/already_resolved", "message": "approval has already reached a terminal decision",
        "recovery_hint": "refresh approval state before retrying"}, "replayed": false});
    let s = decode(&[
        json!({"type": "command.result", "payload": ok}),
        err.clone(),
    ]);
    assert_eq!(kinds(&s), ["palyra.command_result", "error"]);
    assert_eq!(Value::Object(s[0].payload.clone()), ok);
    assert_eq!(s[1].payload["code"], "approval/already_resolved");
    assert_eq!(s[1].meta("request_id"), Some(&json!("r2")));
    assert_eq!(
        s[1].meta("recovery_hint"),
        Some(&json!("refresh approval state before retrying"))
    );
}

#[test]
fn recorded_lines_are_unwrapped_and_use_t() {
    let lines = [
        json!({"t": 42, "dir": "out", "frame": {"type": "handshake", "payload": {}}}),
        json!({"t": 43, "dir": "in", "frame": status("accepted", "go")}),
        json!({"t": 44, "dir": "in", "frame": event_frame(7, T0, run_event(RUN, "model_token", json!({"token": "z"})))}),
        json!({"t": 45, "dir": "in", "frame": json!({"type": "subscribed", "payload": {}}).to_string()}),
    ];
    let s = decode(&lines);
    assert_eq!(
        kinds(&s),
        ["agent_state_change", "text_delta", "palyra.subscribed"]
    );
    assert_eq!(s[0].timestamp, 43, "recorded t when the frame has no time");
    assert_eq!(s[1].timestamp, T0, "the frame's own time wins");
    assert_eq!(s[2].timestamp, 45);
}

#[test]
fn bad_lines_are_reported_and_the_stream_goes_on() {
    let text = format!(
        "{}\nnot json at all\n[1,2]\n{}\n{}\n\n{}\n",
        json!({"t": 0, "dir": "in", "frame": status("accepted", "x")}),
        json!({"type": "event", "event": "oops"}),
        json!({"type": "event", "payload": 3}),
        json!({"type": "complete", "run_id": RUN, "status": "done"}),
    );
    let out = decode_whole(&mut PalyraDecoder::new(SOURCE), &text);
    let bad: Vec<bool> = out.iter().map(|d| d.is_bad()).collect();
    assert_eq!(bad, [false, true, true, true, true, false]);
    let signals = into_signals(out);
    assert_all_valid(&signals);
    for s in &signals[1..5] {
        assert_eq!(s.kind, "error");
        assert_eq!(s.payload["code"], "bad_frame");
        assert_eq!(s.timestamp, 0, "bad input takes the last good timestamp");
        assert!(s.meta("raw").is_some());
    }
    assert_eq!(signals[5].kind, "completion");
}

#[test]
fn unknown_lines_keep_their_type() {
    let s = decode(&[
        json!({"type": "heartbeat", "run_id": RUN, "n": 3}),
        json!({"no_type": true}),
        run_event(RUN, "model_token", json!({"token": "bare"})),
    ]);
    assert_eq!(
        kinds(&s),
        ["palyra.heartbeat", "palyra.frame", "text_delta"]
    );
    assert_eq!(s[0].payload["n"], 3);
    assert_eq!(s[2].payload["content"], "bare");
}

#[test]
fn resume_detects_a_daemon_restart_but_drops_replays() {
    let mut r = RealtimeResume::new();
    assert!(r.accept(5, Some(1_000)));
    assert!(r.accept(6, Some(1_010)));
    assert!(!r.accept(6, Some(1_010)), "same event again");
    assert!(!r.accept(4, Some(995)), "an older event replayed");
    assert!(
        !r.accept(5, Some(1_500)),
        "stamped out of order, within the slack"
    );
    assert_eq!(r.dropped(), 3);
    // The daemon restarted: its sequence starts over, but the events are newer.
    assert!(r.accept(1, Some(90_000)));
    assert_eq!(r.cursor(), Some(1));
    assert!(r.accept(2, Some(90_001)));
    assert!(
        !r.accept(2, None),
        "without a time, at or below the cursor is a duplicate"
    );
    r.reset();
    assert_eq!(r.cursor(), None);
    assert!(r.accept(1, None));
}

#[test]
fn handshake_and_subscribe_frames() {
    use patchbay_palyra::{HandshakeOptions, Subscription};
    let mut options = HandshakeOptions::new("patchbay-1");
    options.subscriptions = vec![Subscription {
        topics: vec!["run".into(), "approval".into()],
        session_ids: vec![SESSION.into()],
    }];
    options.heartbeat_interval_ms = Some(20_000);
    let fresh = RealtimeResume::new().handshake_frame(&options);
    assert_eq!(
        fresh,
        json!({"type": "handshake", "payload": {
            "protocol_version": 1, "client_id": "patchbay-1", "role": "operator",
            "requested_scopes": ["runs:read", "approvals:read", "events:read"],
            "requested_capabilities": [], "requested_commands": [],
            "subscriptions": [{"topics": ["run", "approval"], "session_ids": [SESSION]}],
            "heartbeat_interval_ms": 20000
        }})
    );
    let mut r = RealtimeResume::new();
    r.accept(17, None);
    assert_eq!(
        r.handshake_frame(&options)["payload"]["event_cursor"],
        json!({"sequence": 17})
    );
    assert_eq!(
        RealtimeResume::subscribe_frame(&options.subscriptions[0]),
        json!({"type": "subscribe", "payload": {"topics": ["run", "approval"], "session_ids": [SESSION]}})
    );
    assert_eq!(
        RealtimeResume::ping_frame(json!(1)),
        json!({"type": "ping", "payload": 1})
    );
}

#[test]
fn last_run_id_follows_events() {
    let mut d = PalyraDecoder::new(SOURCE);
    assert_eq!(d.last_run_id(), None);
    decode_whole(&mut d, &ndjson(&[status("accepted", "x")]));
    assert_eq!(d.last_run_id(), Some(RUN));
}
