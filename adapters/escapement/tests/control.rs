//! The encoder (signal → frame), and the sidecar back-channel (UI frame → signal) feeding it.

use patchbay_escapement::{EncodeError, encode_control};
use patchbay_signal::Signal;
use patchbay_signal::control::FieldError;
use patchbay_signal::normalize::Normalizer;
use serde_json::{Value, json};

fn signal(kind: &str, payload: Value) -> Signal {
    let Value::Object(payload) = payload else {
        panic!("payload must be an object")
    };
    Signal::new(kind, "test:ui", payload)
}

#[test]
fn control_ops_encode_to_the_spec_frames() {
    let cases = [
        (
            "control.pause",
            json!({}),
            json!({"kind": "control", "op": "pause"}),
        ),
        (
            "control.continue",
            json!({}),
            json!({"kind": "control", "op": "continue"}),
        ),
        (
            "control.arm",
            json!({}),
            json!({"kind": "control", "op": "arm"}),
        ),
        (
            "control.interrupt",
            json!({}),
            json!({"kind": "control", "op": "ui-interrupt"}),
        ),
        (
            "control.quit",
            json!({}),
            json!({"kind": "control", "op": "ui-quit"}),
        ),
        (
            "control.step",
            json!({}),
            json!({"kind": "control", "op": "step"}),
        ),
        (
            "control.step",
            json!({"n": 3}),
            json!({"kind": "control", "op": "step", "n": 3}),
        ),
        (
            "control.step",
            json!({"n": 2.0}),
            json!({"kind": "control", "op": "step", "n": 2}),
        ),
        (
            "control.answer",
            json!({"promptId": "ask#1", "value": "blue"}),
            json!({"kind": "answer", "prompt-id": "ask#1", "value": "blue"}),
        ),
        (
            "control.answer",
            json!({"promptId": "ask#1", "value": ["a", "b"]}),
            json!({"kind": "answer", "prompt-id": "ask#1", "value": ["a", "b"]}),
        ),
        (
            "control.answer",
            json!({"promptId": "ask#1", "value": ""}),
            json!({"kind": "answer", "prompt-id": "ask#1", "value": ""}),
        ),
        (
            "control.answer",
            json!({"promptId": "ask#1", "value": false, "cancelled": false}),
            json!({"kind": "answer", "prompt-id": "ask#1", "value": false}),
        ),
        (
            "control.answer",
            json!({"promptId": "ask#1", "cancelled": true}),
            json!({"kind": "answer", "prompt-id": "ask#1", "cancelled": true}),
        ),
        (
            "control.answer",
            json!({"promptId": "ask#1", "cancelled": true, "value": "ignored"}),
            json!({"kind": "answer", "prompt-id": "ask#1", "cancelled": true}),
        ),
    ];
    for (kind, payload, frame) in cases {
        assert_eq!(
            encode_control(&signal(kind, payload.clone())),
            Ok(frame),
            "{kind} {payload}"
        );
    }
}

#[test]
fn unusable_signals_are_refused_with_a_reason() {
    assert_eq!(
        encode_control(&signal("control.cancel", json!({}))),
        Err(EncodeError::Unsupported("control.cancel".into()))
    );
    assert_eq!(
        encode_control(&signal(
            "text_delta",
            json!({"agentId": "a", "content": "x"})
        )),
        Err(EncodeError::Unsupported("text_delta".into()))
    );
    assert!(matches!(
        encode_control(&signal("control.step", json!({"n": 0}))),
        Err(EncodeError::Field(FieldError::Invalid { field: "n", .. }))
    ));
    assert!(matches!(
        encode_control(&signal("control.step", json!({"n": "two"}))),
        Err(EncodeError::Field(FieldError::Invalid { field: "n", .. }))
    ));
    assert!(matches!(
        encode_control(&signal("control.answer", json!({"value": 1}))),
        Err(EncodeError::Field(FieldError::Missing {
            field: "promptId",
            ..
        }))
    ));
    assert!(matches!(
        encode_control(&signal(
            "control.answer",
            json!({"promptId": 5, "value": 1})
        )),
        Err(EncodeError::Field(FieldError::Invalid {
            field: "promptId",
            ..
        }))
    ));
    assert!(matches!(
        encode_control(&signal("control.answer", json!({"promptId": "p"}))),
        Err(EncodeError::Field(FieldError::Missing {
            field: "value",
            ..
        }))
    ));
    assert!(matches!(
        encode_control(&signal(
            "control.answer",
            json!({"promptId": "p", "cancelled": "yes"})
        )),
        Err(EncodeError::Field(FieldError::Invalid {
            field: "cancelled",
            ..
        }))
    ));
    // Errors read well.
    let err = encode_control(&signal("control.cancel", json!({}))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Escapement has no frame for `control.cancel`"
    );
}

/// A UI frame as the sidecar's back-channel turns it into a signal.
fn from_ui(frame: &Value) -> Signal {
    let mut normalizer = Normalizer::new("sidecar:ui.inbound");
    patchbay_server::value_to_signal(&mut normalizer, frame.clone()).unwrap()
}

/// The back-channel end to end: what a UI written for Escapement sends through the sidecar
/// reaches the agent as the very frame it sent.
#[test]
fn ui_frames_reach_the_agent_unchanged() {
    for frame in [
        json!({"kind": "control", "op": "pause"}),
        json!({"kind": "control", "op": "continue"}),
        json!({"kind": "control", "op": "arm"}),
        json!({"kind": "control", "op": "ui-interrupt"}),
        json!({"kind": "control", "op": "ui-quit"}),
        json!({"kind": "control", "op": "step"}),
        json!({"kind": "control", "op": "step", "n": 4}),
        json!({"kind": "answer", "prompt-id": "ask#1", "value": "blue"}),
        json!({"kind": "answer", "prompt-id": "ask#1", "value": null}),
        json!({"kind": "answer", "prompt-id": "ask#1", "cancelled": true}),
    ] {
        let s = from_ui(&frame);
        assert!(s.kind.starts_with("control."), "{frame}: {}", s.kind);
        patchbay_testkit::assert_schema_valid(&s.to_value());
        assert_eq!(encode_control(&s), Ok(frame.clone()), "{frame}");
    }
}

/// Ops a UI may send but Escapement has no frame for are refused when encoded, with a
/// reason, rather than sent on.
#[test]
fn ui_frames_the_agent_cannot_take_are_refused() {
    for (frame, expected) in [
        (
            json!({"kind": "control", "op": "run-finished"}),
            EncodeError::Unsupported("control.run-finished".into()),
        ),
        (
            json!({"kind": "control", "op": "cancel"}),
            EncodeError::Unsupported("control.cancel".into()),
        ),
    ] {
        assert_eq!(encode_control(&from_ui(&frame)), Err(expected), "{frame}");
    }
    for frame in [
        json!({"kind": "control", "op": "step", "n": -1}),
        json!({"kind": "answer", "prompt-id": "", "value": 1}),
    ] {
        assert!(
            matches!(
                encode_control(&from_ui(&frame)),
                Err(EncodeError::Field(FieldError::Invalid { .. }))
            ),
            "{frame}"
        );
    }
}
