//! The encoder: control signals to gateway requests.

use patchbay_openclaw::{
    EncodeError, OpenClawDecoder, RunTracker, encode_control, encode_control_with_id,
};
use patchbay_signal::Signal;
use patchbay_signal::control::FieldError;
use patchbay_signal::normalize::Decoded;
use serde_json::{Value, json};

fn signal(kind: &str, payload: Value) -> Signal {
    let Value::Object(payload) = payload else {
        panic!("payload must be an object")
    };
    Signal::new(kind, "test:pad", payload)
}

fn seen_run(run: &str, session: &str) -> RunTracker {
    let mut d = OpenClawDecoder::new("openclaw:test");
    let mut out: Vec<Decoded> = Vec::new();
    d.decode_frame(
        json!({"type": "event", "event": "agent", "seq": 1, "payload": {
            "runId": run, "sessionKey": session, "stream": "lifecycle", "data": {"phase": "start"}}}),
        None,
        &mut out,
    );
    d.runs().clone()
}

#[test]
fn abort_the_last_run_seen() {
    let runs = seen_run("r1", "agent:main:main");
    for kind in ["control.interrupt", "control.cancel"] {
        let req = encode_control_with_id(&signal(kind, json!({})), &runs, "id-1".into()).unwrap();
        assert_eq!(req.id, "id-1");
        assert_eq!(req.method, "chat.abort");
        assert_eq!(
            req.frame,
            json!({"type": "req", "id": "id-1", "method": "chat.abort",
                   "params": {"sessionKey": "agent:main:main", "runId": "r1"}})
        );
    }
    // Fresh ids by default.
    let a = encode_control(&signal("control.cancel", json!({})), &runs).unwrap();
    let b = encode_control(&signal("control.cancel", json!({})), &runs).unwrap();
    assert_ne!(a.id, b.id);
    assert_eq!(a.frame["id"], a.id.as_str());
}

#[test]
fn abort_what_the_payload_names() {
    let runs = seen_run("r1", "agent:main:main");
    let req = |payload: Value| {
        encode_control_with_id(&signal("control.interrupt", payload), &runs, "x".into())
            .map(|r| r.frame["params"].clone())
    };
    assert_eq!(
        req(json!({"runId": "r9", "sessionKey": "agent:ops:s"})),
        Ok(json!({"sessionKey": "agent:ops:s", "runId": "r9"}))
    );
    // A known run: its session is looked up.
    assert_eq!(
        req(json!({"runId": "r1"})),
        Ok(json!({"sessionKey": "agent:main:main", "runId": "r1"}))
    );
    // An unknown run without a session cannot be addressed.
    assert_eq!(
        req(json!({"runId": "r9"})),
        Err(EncodeError::NoSession("r9".into()))
    );
    // A session alone aborts whatever runs in it.
    assert_eq!(
        req(json!({"sessionKey": "agent:ops:s"})),
        Ok(json!({"sessionKey": "agent:ops:s"}))
    );
    assert!(matches!(
        req(json!({"runId": 5})),
        Err(EncodeError::Field(FieldError::Invalid {
            field: "runId",
            ..
        }))
    ));
}

#[test]
fn abort_with_nothing_seen() {
    let none = RunTracker::new();
    assert_eq!(
        encode_control(&signal("control.cancel", json!({})), &none),
        Err(EncodeError::NoRun)
    );
    // A run known only from a `chat.send` answer (no session yet).
    let mut d = OpenClawDecoder::new("openclaw:test");
    let mut out = Vec::new();
    d.decode_frame(json!({"type": "res", "id": "s", "ok": true, "payload": {"runId": "r2", "status": "started"}}), None, &mut out);
    assert!(out.is_empty());
    assert_eq!(d.runs().last().unwrap().run_id, "r2");
    assert_eq!(
        encode_control(&signal("control.cancel", json!({})), d.runs()),
        Err(EncodeError::NoSession("r2".into()))
    );
    // Its first event brings the session.
    d.decode_frame(
        json!({"type": "event", "event": "agent", "payload": {"runId": "r2", "sessionKey": "agent:a:b", "stream": "assistant", "data": {"delta": "x"}}}),
        None,
        &mut out,
    );
    let req =
        encode_control_with_id(&signal("control.cancel", json!({})), d.runs(), "i".into()).unwrap();
    assert_eq!(
        req.frame["params"],
        json!({"sessionKey": "agent:a:b", "runId": "r2"})
    );
    // The transport can register a run itself.
    let mut runs = RunTracker::new();
    runs.note("r3", Some("agent:x:y"));
    assert_eq!(runs.session_of("r3"), Some("agent:x:y"));
}

#[test]
fn answers_resolve_approvals() {
    let runs = RunTracker::new();
    let params = |payload: Value| {
        encode_control_with_id(&signal("control.answer", payload), &runs, "q".into())
            .map(|r| (r.method, r.frame["params"].clone()))
    };
    let exec = |decision: &str| {
        Ok((
            "exec.approval.resolve".to_owned(),
            json!({"id": "ap1", "decision": decision}),
        ))
    };
    assert_eq!(
        params(json!({"promptId": "ap1", "value": true})),
        exec("allow-once")
    );
    assert_eq!(
        params(json!({"promptId": "ap1", "value": false})),
        exec("deny")
    );
    assert_eq!(
        params(json!({"promptId": "ap1", "value": "allow-always"})),
        exec("allow-always")
    );
    assert_eq!(
        params(json!({"promptId": "ap1", "value": "allow-once"})),
        exec("allow-once")
    );
    assert_eq!(
        params(json!({"promptId": "ap1", "value": "deny"})),
        exec("deny")
    );
    assert_eq!(
        params(json!({"promptId": "ap1", "cancelled": true})),
        exec("deny")
    );
    // The common words every agent understands.
    for (word, decision) in [
        ("allow", "allow-once"),
        ("accept", "allow-once"),
        ("always", "allow-always"),
        ("reject", "deny"),
        ("cancel", "deny"),
    ] {
        assert_eq!(
            params(json!({"promptId": "ap1", "value": word})),
            exec(decision),
            "{word}"
        );
    }
    assert_eq!(
        params(json!({"promptId": "plugin:7", "value": true})),
        Ok((
            "plugin.approval.resolve".to_owned(),
            json!({"id": "plugin:7", "decision": "allow-once"})
        ))
    );
    assert!(matches!(
        params(json!({"promptId": "ap1", "value": "maybe"})),
        Err(EncodeError::Field(FieldError::Invalid {
            field: "value",
            ..
        }))
    ));
    assert!(matches!(
        params(json!({"promptId": "ap1"})),
        Err(EncodeError::Field(FieldError::Missing {
            field: "value",
            ..
        }))
    ));
    assert!(matches!(
        params(json!({"value": true})),
        Err(EncodeError::Field(FieldError::Missing {
            field: "promptId",
            ..
        }))
    ));
    assert!(matches!(
        params(json!({"promptId": 3, "value": true})),
        Err(EncodeError::Field(FieldError::Invalid {
            field: "promptId",
            ..
        }))
    ));
    assert!(matches!(
        params(json!({"promptId": "a", "cancelled": "y"})),
        Err(EncodeError::Field(FieldError::Invalid {
            field: "cancelled",
            ..
        }))
    ));
}

#[test]
fn verbs_the_protocol_lacks_are_refused() {
    let runs = seen_run("r1", "agent:main:main");
    for kind in [
        "control.pause",
        "control.step",
        "control.continue",
        "control.arm",
        "control.quit",
        "text_delta",
    ] {
        assert_eq!(
            encode_control(&signal(kind, json!({})), &runs),
            Err(EncodeError::Unsupported(kind.into()))
        );
    }
    assert_eq!(
        EncodeError::Unsupported("control.pause".into()).to_string(),
        "OpenClaw has no request for `control.pause`"
    );
}
