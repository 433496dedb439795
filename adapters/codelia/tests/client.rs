//! The UI side: the exact messages [`UiClient`] sends, checked against what the recorded
//! UI sent, and the answers to each kind of runtime request.

use patchbay_codelia::{EncodeError, UiClient};
use patchbay_signal::Signal;
use patchbay_signal::control::FieldError;
use patchbay_signal::normalize::Decoded;
use patchbay_testkit::fixture_text;
use serde_json::{Value, json};

fn signal(kind: &str, payload: Value) -> Signal {
    let Value::Object(payload) = payload else {
        panic!("payload must be an object")
    };
    Signal::new(kind, "test:ui", payload)
}

fn feed(client: &mut UiClient, msg: Value) -> Vec<Signal> {
    let mut out = Vec::new();
    client.decode(msg, None, &mut out);
    out.into_iter().map(Decoded::into_signal).collect()
}

/// The signal that should make the client send what the recorded UI sent.
fn signal_for(recorded: &Value) -> Signal {
    match recorded["method"].as_str() {
        Some("run.start") => signal(
            "prompt",
            json!({"text": recorded["params"]["input"]["text"]}),
        ),
        Some("run.cancel") => {
            let mut payload = json!({"runId": recorded["params"]["run_id"]});
            if let Some(reason) = recorded["params"].get("reason") {
                payload["reason"] = reason.clone();
            }
            signal("control.cancel", payload)
        }
        None => signal(
            "control.answer",
            json!({"promptId": recorded["id"], "value": recorded["result"]["ok"]}),
        ),
        other => panic!("unexpected recorded method {other:?}"),
    }
}

/// Replays a recording: what came in is decoded, what went out must be exactly what the
/// client builds from the matching signal.
fn replay(fixture: &str, compare_initialize: bool) -> UiClient {
    let mut client = UiClient::new("codelia:test").with_client("probe", "0.0.0");
    for line in fixture_text(fixture).lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        let msg = line["msg"].clone();
        match line["dir"].as_str() {
            Some("in") => {
                feed(&mut client, msg);
            }
            Some("out") if msg["method"] == "initialize" => {
                let built = client.initialize();
                if compare_initialize {
                    assert_eq!(built, msg);
                }
            }
            Some("out") => assert_eq!(client.encode(&signal_for(&msg)), Ok(msg)),
            _ => {}
        }
    }
    client
}

#[test]
fn replaying_the_toolcalls_recording_builds_the_same_messages() {
    let client = replay("codelia/codelia-run-mock-toolcalls.ndjson", true);
    assert_eq!(client.pending_requests().count(), 0, "ui_1 was answered");
    assert_eq!(client.current_run(), None, "both runs completed");
}

#[test]
fn replaying_the_cancel_recording_builds_the_same_messages() {
    let mut client = replay("codelia/codelia-run-mock-cancel.ndjson", false);
    // After the cancelled status there is no current run: a cancel without runId is refused.
    assert_eq!(
        client.encode(&signal("control.interrupt", json!({}))),
        Err(EncodeError::NoRun)
    );
}

#[test]
fn initialize_and_ids() {
    let mut client = UiClient::new("codelia:test");
    let init = client.initialize();
    assert_eq!(
        init,
        json!({"jsonrpc": "2.0", "id": "1", "method": "initialize", "params": {
            "protocol_version": "0",
            "client": {"name": "patchbay", "version": env!("CARGO_PKG_VERSION")},
            "ui_capabilities": {"supports_confirm": true, "supports_prompt": true, "supports_pick": true}
        }})
    );
    let start = client
        .encode(&signal("prompt", json!({"text": "hi", "sessionId": "s-1"})))
        .unwrap();
    assert_eq!(
        start,
        json!({"jsonrpc": "2.0", "id": "2", "method": "run.start",
               "params": {"input": {"type": "text", "text": "hi"}, "session_id": "s-1"}})
    );
    assert_eq!(client.sent_method("2"), Some("run.start"));
    // The runtime answers: the response is tagged with the method, the run becomes current.
    let out = feed(
        &mut client,
        json!({"jsonrpc": "2.0", "id": "2", "result": {"run_id": "r1"}}),
    );
    assert_eq!(out[0].kind, "codelia.response");
    assert_eq!(out[0].payload["method"], "run.start");
    assert_eq!(out[0].correlation_id.as_deref(), Some("r1"));
    assert_eq!(client.current_run(), Some("r1"));
    assert_eq!(client.sent_method("2"), None);
    // Cancel and interrupt both cancel the current run.
    for kind in ["control.cancel", "control.interrupt"] {
        let cancel = client.encode(&signal(kind, json!({}))).unwrap();
        assert_eq!(cancel["method"], "run.cancel");
        assert_eq!(cancel["params"], json!({"run_id": "r1"}));
    }
    let cancel = client
        .encode(&signal(
            "control.cancel",
            json!({"runId": "other", "reason": "user"}),
        ))
        .unwrap();
    assert_eq!(
        cancel["params"],
        json!({"run_id": "other", "reason": "user"})
    );
    assert_eq!(cancel["id"], "5");
}

fn client_with_request(method: &str, id: Value) -> UiClient {
    let mut client = UiClient::new("codelia:test");
    let out = feed(
        &mut client,
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"run_id": "r", "title": "t"}}),
    );
    assert_eq!(out[0].kind, "codelia.request");
    client
}

fn answer(client: &mut UiClient, payload: Value) -> Result<Value, EncodeError> {
    client.encode(&signal("control.answer", payload))
}

#[test]
fn answers_are_shaped_per_request_method() {
    let cases = [
        (
            "ui.confirm.request",
            json!({"value": true}),
            json!({"result": {"ok": true}}),
        ),
        (
            "ui.confirm.request",
            json!({"value": false}),
            json!({"result": {"ok": false}}),
        ),
        (
            "ui.confirm.request",
            json!({"value": {"ok": false, "remember": true, "reason": "no"}}),
            json!({"result": {"ok": false, "remember": true, "reason": "no"}}),
        ),
        (
            "ui.confirm.request",
            json!({"cancelled": true}),
            json!({"result": {"ok": false}}),
        ),
        (
            "ui.prompt.request",
            json!({"value": "typed"}),
            json!({"result": {"value": "typed"}}),
        ),
        (
            "ui.prompt.request",
            json!({"value": null}),
            json!({"result": {"value": null}}),
        ),
        (
            "ui.prompt.request",
            json!({"cancelled": true}),
            json!({"result": {"value": null}}),
        ),
        (
            "ui.pick.request",
            json!({"value": ["a", "b"]}),
            json!({"result": {"ids": ["a", "b"]}}),
        ),
        (
            "ui.pick.request",
            json!({"value": "a"}),
            json!({"result": {"ids": ["a"]}}),
        ),
        (
            "ui.pick.request",
            json!({"cancelled": true}),
            json!({"result": {"ids": []}}),
        ),
        (
            "client.tool.call",
            json!({"value": {"choice": "continue"}}),
            json!({"result": {"ok": true, "result": {"choice": "continue"}}}),
        ),
        (
            "client.tool.call",
            json!({"cancelled": true}),
            json!({"result": {"ok": false, "error": "cancelled"}}),
        ),
        (
            "ui.clipboard.read",
            json!({"value": {"text": "x"}}),
            json!({"result": {"text": "x"}}),
        ),
        (
            "ui.clipboard.read",
            json!({"cancelled": true}),
            json!({"error": {"code": -32003, "message": "user cancelled"}}),
        ),
    ];
    for (method, mut payload, expected) in cases {
        let mut client = client_with_request(method, json!("q1"));
        payload["promptId"] = json!("q1");
        let mut want = json!({"jsonrpc": "2.0", "id": "q1"});
        for (k, v) in expected.as_object().unwrap() {
            want[k] = v.clone();
        }
        assert_eq!(
            answer(&mut client, payload.clone()),
            Ok(want),
            "{method} {payload}"
        );
        // Answered once: a second answer is refused.
        assert_eq!(
            answer(&mut client, payload),
            Err(EncodeError::UnknownPrompt("q1".into())),
            "{method}"
        );
    }
}

#[test]
fn numeric_request_ids_are_answered_with_the_same_number() {
    let mut client = client_with_request("ui.confirm.request", json!(9));
    assert_eq!(client.pending_requests().next().unwrap().id, json!(9));
    assert_eq!(
        answer(&mut client, json!({"promptId": "9", "value": true})),
        Ok(json!({"jsonrpc": "2.0", "id": 9, "result": {"ok": true}}))
    );
    let mut client = client_with_request("ui.confirm.request", json!(9));
    assert_eq!(
        answer(&mut client, json!({"promptId": 9, "value": true})),
        Ok(json!({"jsonrpc": "2.0", "id": 9, "result": {"ok": true}}))
    );
}

#[test]
fn bad_answers_are_refused_and_keep_the_request_pending() {
    let mut client = client_with_request("ui.confirm.request", json!("q"));
    for (payload, field) in [
        (json!({"promptId": "q", "value": "yes"}), "value"),
        (
            json!({"promptId": "q", "value": {"remember": true}}),
            "value",
        ),
        (
            json!({"promptId": "q", "value": true, "cancelled": "no"}),
            "cancelled",
        ),
        (json!({"promptId": ["q"], "value": true}), "promptId"),
    ] {
        assert!(
            matches!(answer(&mut client, payload.clone()), Err(EncodeError::Field(FieldError::Invalid { field: f, .. })) if f == field),
            "{payload}"
        );
    }
    assert!(matches!(
        answer(&mut client, json!({"promptId": "q"})),
        Err(EncodeError::Field(FieldError::Missing {
            field: "value",
            ..
        }))
    ));
    assert!(matches!(
        answer(&mut client, json!({"value": true})),
        Err(EncodeError::Field(FieldError::Missing {
            field: "promptId",
            ..
        }))
    ));
    assert_eq!(client.pending_requests().count(), 1);
    let mut client = client_with_request("ui.prompt.request", json!("p"));
    assert!(matches!(
        answer(&mut client, json!({"promptId": "p", "value": 3})),
        Err(EncodeError::Field(FieldError::Invalid { .. }))
    ));
    let mut client = client_with_request("ui.pick.request", json!("p"));
    assert!(matches!(
        answer(&mut client, json!({"promptId": "p", "value": [1]})),
        Err(EncodeError::Field(FieldError::Invalid { .. }))
    ));
}

#[test]
fn a_request_the_runtime_cancelled_cannot_be_answered() {
    let mut client = client_with_request("client.tool.call", json!("c1"));
    feed(
        &mut client,
        json!({"jsonrpc": "2.0", "method": "client.tool.cancel",
               "params": {"request_id": "c1", "run_id": "r", "name": "n", "reason": "timeout"}}),
    );
    assert_eq!(
        answer(&mut client, json!({"promptId": "c1", "value": 1})),
        Err(EncodeError::UnknownPrompt("c1".into()))
    );
}

#[test]
fn unsupported_and_invalid_signals() {
    let mut client = UiClient::new("codelia:test");
    for kind in [
        "control.pause",
        "control.step",
        "control.continue",
        "control.arm",
        "control.quit",
        "text_delta",
    ] {
        assert_eq!(
            client.encode(&signal(kind, json!({}))),
            Err(EncodeError::Unsupported(kind.into()))
        );
    }
    assert_eq!(
        client.encode(&signal("control.cancel", json!({}))),
        Err(EncodeError::NoRun)
    );
    assert!(matches!(
        client.encode(&signal("control.cancel", json!({"runId": 3}))),
        Err(EncodeError::Field(FieldError::Invalid {
            field: "runId",
            ..
        }))
    ));
    assert!(matches!(
        client.encode(&signal("prompt", json!({}))),
        Err(EncodeError::Field(FieldError::Missing {
            field: "text",
            ..
        }))
    ));
    assert!(matches!(
        client.encode(&signal("prompt", json!({"text": 1}))),
        Err(EncodeError::Field(FieldError::Invalid {
            field: "text",
            ..
        }))
    ));
    assert!(matches!(
        client.encode(&signal("prompt", json!({"text": "x", "sessionId": 1}))),
        Err(EncodeError::Field(FieldError::Invalid {
            field: "sessionId",
            ..
        }))
    ));
    assert_eq!(EncodeError::NoRun.to_string(), "no run to cancel");
}
