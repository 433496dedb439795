//! The requests, against the HTTP calls recorded in `tests/fixtures/opencode-http.jsonl`,
//! and the control signals that become them.

use patchbay_graph::approvals::Verdict;
use patchbay_opencode::{
    EncodeError, Method, Request, abort, answer, create_session, encode_control, events, messages,
    prompt, reply, reply_word,
};
use patchbay_signal::Signal;
use patchbay_signal::control::FieldError;
use serde_json::{Value, json};

const SESSION: &str = "ses_ddf229cfaffep6iUEXOwj8t312";
const PERMISSION: &str = "per_220dd77dd001rIUnF6YIrigUev";
const DIRECTORY: &str = "/home/dev/home/dev/work/opencode/work";

/// The recorded calls: `{t, method, path, query, request, status, response}`.
fn recorded() -> Vec<Value> {
    let path = format!(
        "{}/tests/fixtures/opencode-http.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `request` is the recorded call `call` (method, path, body, `directory` query).
fn assert_recorded(request: &Request, call: &Value) {
    assert_eq!(request.method.as_str(), call["method"], "{call}");
    assert_eq!(request.path, call["path"], "{call}");
    assert_eq!(
        request.body.clone().unwrap_or(Value::Null),
        call["request"],
        "{call}"
    );
    assert_eq!(call["query"]["directory"], DIRECTORY);
    assert_eq!(
        request.target(Some(DIRECTORY)),
        format!(
            "{}?directory=%2Fhome%2Fdev%2Fhome%2Fdev%2Fwork%2Fopencode%2Fwork",
            call["path"].as_str().unwrap()
        )
    );
}

fn signal(kind: &str, payload: Value) -> Signal {
    let Value::Object(payload) = payload else {
        panic!("an object")
    };
    Signal::new(kind, "sidecar:ui", payload)
}

#[test]
fn the_builders_make_the_recorded_calls() {
    let calls = recorded();
    assert_eq!(calls.len(), 4);
    assert_recorded(&create_session("agentcli test"), &calls[0]);
    assert_eq!(calls[0]["response"]["id"], SESSION);
    assert_recorded(
        &prompt(SESSION, "Create out.txt containing hi using the shell."),
        &calls[1],
    );
    assert_eq!(calls[1]["status"], 204);
    assert_recorded(&reply(PERMISSION, Verdict::Allow).unwrap(), &calls[2]);
    assert_eq!(calls[2]["response"], true);
    assert_recorded(&messages(SESSION), &calls[3]);

    assert_eq!(
        events(),
        Request {
            method: Method::Get,
            path: "/event".into(),
            body: None
        }
    );
    assert_eq!(events().target(None), "/event");
    let stop = abort(SESSION);
    assert_eq!(
        (stop.method, stop.path.as_str(), &stop.body),
        (
            Method::Post,
            "/session/ses_ddf229cfaffep6iUEXOwj8t312/abort",
            &None
        )
    );
}

#[test]
fn verdicts_become_opencode_words() {
    for (verdict, word) in [
        (Verdict::Allow, Some("once")),
        (Verdict::Always, Some("always")),
        (Verdict::Deny, Some("reject")),
        (Verdict::Cancel, Some("reject")),
        (Verdict::Ask, None),
    ] {
        assert_eq!(reply_word(verdict), word, "{verdict:?}");
        let request = reply("per_1", verdict);
        assert_eq!(
            request.as_ref().map(|r| r.body.clone().unwrap()),
            word.map(|w| json!({"reply": w})),
            "{verdict:?}"
        );
        if let Some(r) = request {
            assert_eq!(r.path, "/permission/per_1/reply");
            assert_eq!(r.method, Method::Post);
        }
    }
}

#[test]
fn a_denial_tells_the_model_why_and_a_cancel_stops_the_turn() {
    let body =
        |verdict| answer("per_1", verdict, "patchbay: denied by ui").map(|r| r.body.unwrap());
    assert_eq!(
        body(Verdict::Deny),
        Some(json!({"reply": "reject", "message": "patchbay: denied by ui"}))
    );
    assert_eq!(body(Verdict::Cancel), Some(json!({"reply": "reject"})));
    assert_eq!(body(Verdict::Allow), Some(json!({"reply": "once"})));
    assert_eq!(body(Verdict::Always), Some(json!({"reply": "always"})));
    assert_eq!(body(Verdict::Ask), None);
    assert_eq!(
        answer("per_1", Verdict::Deny, "").unwrap().body,
        Some(json!({"reply": "reject"}))
    );
    assert_eq!(
        answer("per_1", Verdict::Deny, "x").unwrap().path,
        "/permission/per_1/reply"
    );
}

#[test]
fn path_segments_are_percent_encoded() {
    assert_eq!(
        prompt("a/b c?#é", "x").path,
        "/session/a%2Fb%20c%3F%23%C3%A9/prompt_async"
    );
    assert_eq!(
        reply("../x", Verdict::Deny).unwrap().path,
        "/permission/..%2Fx/reply"
    );
    assert_eq!(
        messages("ses_A-b.c~d").target(Some("/w d&x=1")),
        "/session/ses_A-b.c~d/message?directory=%2Fw%20d%26x%3D1"
    );
}

#[test]
fn controls_become_requests() {
    // A prompt to the session it names, else the current one.
    let named = signal("prompt", json!({"text": "hi", "sessionId": "ses_x"}));
    assert_eq!(
        encode_control(&named, Some(SESSION)),
        Ok(prompt("ses_x", "hi"))
    );
    let current = signal("prompt", json!({"text": "hi"}));
    assert_eq!(
        encode_control(&current, Some(SESSION)),
        Ok(prompt(SESSION, "hi"))
    );
    assert_eq!(
        encode_control(&current, None),
        Err(EncodeError::NoSession("prompt".into()))
    );
    // Interrupt and cancel abort; the agentId of the signals is the session too.
    for kind in ["control.interrupt", "control.cancel"] {
        assert_eq!(
            encode_control(&signal(kind, json!({})), Some(SESSION)),
            Ok(abort(SESSION))
        );
        assert_eq!(
            encode_control(&signal(kind, json!({"agentId": "ses_y"})), None),
            Ok(abort("ses_y"))
        );
    }
    // Answers: the common words and OpenCode's own.
    for (value, word) in [
        (json!("allow"), "once"),
        (json!("once"), "once"),
        (json!(true), "once"),
        (json!("always"), "always"),
        (json!("deny"), "reject"),
        (json!("reject"), "reject"),
        (json!("cancel"), "reject"),
        (json!(false), "reject"),
    ] {
        let answer = signal(
            "control.answer",
            json!({"promptId": PERMISSION, "value": value}),
        );
        let request = encode_control(&answer, None).unwrap();
        assert_eq!(request.path, format!("/permission/{PERMISSION}/reply"));
        assert_eq!(request.body, Some(json!({"reply": word})), "{value}");
    }
    let cancelled = signal(
        "control.answer",
        json!({"promptId": "per_1", "cancelled": true}),
    );
    assert_eq!(
        encode_control(&cancelled, None).unwrap().body,
        Some(json!({"reply": "reject"}))
    );
}

#[test]
fn what_cannot_be_sent_says_why() {
    let err = |kind: &str, payload: Value| {
        encode_control(&signal(kind, payload), Some(SESSION)).unwrap_err()
    };
    assert_eq!(
        err("prompt", json!({})),
        EncodeError::Field(FieldError::Missing {
            kind: "prompt".into(),
            field: "text"
        })
    );
    assert!(matches!(
        err("prompt", json!({"text": 1})),
        EncodeError::Field(FieldError::Invalid { field: "text", .. })
    ));
    assert!(matches!(
        err("prompt", json!({"text": "x", "sessionId": 1})),
        EncodeError::Field(FieldError::Invalid {
            field: "sessionId",
            ..
        })
    ));
    assert_eq!(
        err("control.answer", json!({"value": "allow"})),
        EncodeError::Field(FieldError::Missing {
            kind: "control.answer".into(),
            field: "promptId"
        })
    );
    let bad = err(
        "control.answer",
        json!({"promptId": "per_1", "value": "maybe"}),
    );
    assert!(matches!(bad, EncodeError::BadAnswer(_)));
    assert!(bad.to_string().contains("maybe"), "{bad}");
    assert_eq!(
        err(
            "control.answer",
            json!({"promptId": "per_1", "value": "ask"})
        ),
        EncodeError::LeftToOpenCode("per_1".into())
    );
    for kind in [
        "control.pause",
        "control.step",
        "control.continue",
        "control.arm",
        "control.quit",
        "text_delta",
    ] {
        assert_eq!(err(kind, json!({})), EncodeError::Unsupported(kind.into()));
    }
    let message = EncodeError::NoSession("prompt".into()).to_string();
    assert!(message.contains("sessionId"), "{message}");
}
