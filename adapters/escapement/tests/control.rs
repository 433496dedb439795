//! The encoder (signal → frame) and the UI back-channel decoder (frame → signal).

use patchbay_escapement::{EncodeError, UiFrameError, encode_control, ui_frame_to_signal};
use patchbay_signal::Signal;
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
        Err(EncodeError::InvalidField { field: "n", .. })
    ));
    assert!(matches!(
        encode_control(&signal("control.step", json!({"n": "two"}))),
        Err(EncodeError::InvalidField { field: "n", .. })
    ));
    assert!(matches!(
        encode_control(&signal("control.answer", json!({"value": 1}))),
        Err(EncodeError::MissingField {
            field: "promptId",
            ..
        })
    ));
    assert!(matches!(
        encode_control(&signal(
            "control.answer",
            json!({"promptId": 5, "value": 1})
        )),
        Err(EncodeError::InvalidField {
            field: "promptId",
            ..
        })
    ));
    assert!(matches!(
        encode_control(&signal("control.answer", json!({"promptId": "p"}))),
        Err(EncodeError::MissingField { field: "value", .. })
    ));
    assert!(matches!(
        encode_control(&signal(
            "control.answer",
            json!({"promptId": "p", "cancelled": "yes"})
        )),
        Err(EncodeError::InvalidField {
            field: "cancelled",
            ..
        })
    ));
    // Errors read well.
    let err = encode_control(&signal("control.cancel", json!({}))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Escapement has no frame for `control.cancel`"
    );
}

fn from_ui(frame: Value) -> Signal {
    ui_frame_to_signal(&frame, "sidecar:ui.inbound")
        .unwrap()
        .unwrap()
}

#[test]
fn ui_frames_become_control_signals() {
    let cases = [
        (
            json!({"kind": "control", "op": "pause"}),
            "control.pause",
            json!({}),
        ),
        (
            json!({"kind": "control", "op": "continue"}),
            "control.continue",
            json!({}),
        ),
        (
            json!({"kind": "control", "op": "arm"}),
            "control.arm",
            json!({}),
        ),
        (
            json!({"kind": "control", "op": "ui-interrupt"}),
            "control.interrupt",
            json!({}),
        ),
        (
            json!({"kind": "control", "op": "ui-quit"}),
            "control.quit",
            json!({}),
        ),
        (
            json!({"kind": "control", "op": "step"}),
            "control.step",
            json!({}),
        ),
        (
            json!({"kind": "control", "op": "step", "n": 4}),
            "control.step",
            json!({"n": 4}),
        ),
        (
            json!({"kind": "answer", "prompt-id": "ask#1", "value": "blue"}),
            "control.answer",
            json!({"promptId": "ask#1", "value": "blue"}),
        ),
        (
            json!({"kind": "answer", "prompt-id": "ask#1", "value": null}),
            "control.answer",
            json!({"promptId": "ask#1", "value": null}),
        ),
        (
            json!({"kind": "answer", "prompt-id": "ask#1", "cancelled": true}),
            "control.answer",
            json!({"promptId": "ask#1", "cancelled": true}),
        ),
    ];
    for (frame, kind, payload) in cases {
        let s = from_ui(frame.clone());
        assert_eq!(s.kind, kind, "{frame}");
        assert_eq!(Value::Object(s.payload.clone()), payload, "{frame}");
        assert_eq!(s.source, "sidecar:ui.inbound");
        patchbay_testkit::assert_schema_valid(&s.to_value());
        // And back: the frame the agent gets is the frame the UI sent.
        assert_eq!(encode_control(&s), Ok(frame));
    }
}

#[test]
fn ui_frame_extras_and_time() {
    let s = from_ui(json!({"kind": "control", "op": "pause", "ts": 42, "client": "tui"}));
    assert_eq!(s.timestamp, 42);
    assert_eq!(s.meta("extra").unwrap(), &json!({"client": "tui"}));
    let s = from_ui(json!({"kind": "control", "op": "pause", "ts": "now"}));
    assert_eq!(s.meta("extra").unwrap(), &json!({"ts": "now"}));
    assert!(s.timestamp > 1_600_000_000_000);
    let s = from_ui(json!({"kind": "control", "op": "pause"}));
    assert!(s.metadata.is_none());
}

#[test]
fn ui_frames_that_are_not_control_are_left_to_the_caller() {
    for frame in [
        json!({"kind": "event", "event": "x"}),
        json!({"type": "user.click", "payload": {"target": "a"}}),
        json!({"kind": 3}),
        json!([1]),
        json!("control"),
    ] {
        assert!(ui_frame_to_signal(&frame, "s").is_none(), "{frame}");
    }
}

#[test]
fn bad_ui_frames_are_errors() {
    let err = |frame: Value| ui_frame_to_signal(&frame, "s").unwrap().unwrap_err();
    assert_eq!(
        err(json!({"kind": "control"})),
        UiFrameError::MissingField {
            kind: "control",
            field: "op"
        }
    );
    assert!(matches!(
        err(json!({"kind": "control", "op": 1})),
        UiFrameError::InvalidField { field: "op", .. }
    ));
    assert_eq!(
        err(json!({"kind": "control", "op": "run-finished"})),
        UiFrameError::UnknownOp("run-finished".into())
    );
    assert_eq!(
        err(json!({"kind": "control", "op": "cancel"})),
        UiFrameError::UnknownOp("cancel".into())
    );
    assert!(matches!(
        err(json!({"kind": "control", "op": "step", "n": -1})),
        UiFrameError::InvalidField { field: "n", .. }
    ));
    assert_eq!(
        err(json!({"kind": "answer", "value": 1})),
        UiFrameError::MissingField {
            kind: "answer",
            field: "prompt-id"
        }
    );
    assert!(matches!(
        err(json!({"kind": "answer", "prompt-id": ""})),
        UiFrameError::InvalidField {
            field: "prompt-id",
            ..
        }
    ));
    assert_eq!(
        err(json!({"kind": "answer", "prompt-id": "p"})),
        UiFrameError::MissingField {
            kind: "answer",
            field: "value"
        }
    );
    assert!(matches!(
        err(json!({"kind": "answer", "prompt-id": "p", "cancelled": 1})),
        UiFrameError::InvalidField {
            field: "cancelled",
            ..
        }
    ));
}
