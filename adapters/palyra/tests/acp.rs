//! The ACP control output: control signals → command envelopes, results → signals.

mod common;

use common::*;
use patchbay_palyra::acp::idempotency_key;
use patchbay_palyra::{AcpClientContext, AcpCommander, EncodeError, decode_command_result};
use patchbay_signal::{Signal, object};
use serde_json::{Value, json};

fn commander() -> AcpCommander {
    AcpCommander::new(AcpClientContext::new(
        "patchbay",
        "user:ops",
        "01ARZ3NDEKTSV4RRFFQ69G5FAV",
    ))
}

fn control(kind: &str, payload: patchbay_signal::Object) -> Signal {
    Signal::new(kind, "ui:deck", payload)
}

#[test]
fn cancel_with_run_id_is_run_abort() {
    let signal = control("control.cancel", object! {"runId" => RUN});
    let req = commander().encode(&signal).unwrap();
    let body = req.body();
    assert_eq!(
        body["client"],
        json!({
            "protocol_version": 1, "client_id": "patchbay", "transport": "http",
            "owner_principal": "user:ops", "device_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "scopes": ["runs:read", "runs:write", "approvals:read", "approvals:write"],
            "capabilities": ["run_control", "approval_bridge"]
        })
    );
    let command = &body["command"];
    assert_eq!(command["command"], "run.abort");
    assert_eq!(
        command["params"],
        json!({"run_id": RUN, "reason": "patchbay control.cancel"})
    );
    assert_eq!(command["request_id"].as_str().unwrap().len(), 26);
    assert_eq!(
        command["idempotency_key"],
        format!("patchbay:{}", signal.id)
    );
    assert_eq!(command.as_object().unwrap().len(), 4);
    assert_eq!(req.run_id.as_deref(), Some(RUN));
    assert_eq!(patchbay_palyra::ACP_COMMAND_PATH, "/console/v1/acp/command");
}

#[test]
fn interrupt_uses_the_last_seen_run() {
    let mut c = commander();
    let signal = control("control.interrupt", object! {});
    assert_eq!(c.encode(&signal), Err(EncodeError::NoRun));
    // Signals decoded from Palyra name their run.
    c.observe(
        &Signal::new("text_delta", "palyra:x", object! {}).correlated("01RUNAAAAAAAAAAAAAAAAAAAAA"),
    );
    c.observe(&Signal::new("x", "y", object! {}));
    let req = c.encode(&signal).unwrap();
    assert_eq!(req.command, "run.abort");
    assert_eq!(req.params["run_id"], "01RUNAAAAAAAAAAAAAAAAAAAAA");
    assert_eq!(req.params["reason"], "patchbay control.interrupt");
    // An explicit run wins, and a reason is passed on.
    let req = c
        .encode(&control(
            "control.interrupt",
            object! {"run_id" => RUN, "reason" => "user pressed stop"},
        ))
        .unwrap();
    assert_eq!(
        req.params,
        json!({"run_id": RUN, "reason": "user pressed stop"})
    );
}

#[test]
fn retries_keep_the_idempotency_key_and_change_the_request_id() {
    let c = commander();
    let signal = control("control.cancel", object! {"runId" => RUN});
    let first = c.encode(&signal).unwrap();
    let retry = first.retry();
    let again = c.encode(&signal).unwrap();
    assert_ne!(first.request_id, retry.request_id);
    assert_ne!(first.request_id, again.request_id);
    assert_eq!(first.idempotency_key, retry.idempotency_key);
    assert_eq!(first.idempotency_key, again.idempotency_key);
    assert_eq!(first.params, retry.params);
    let other = c
        .encode(&control("control.cancel", object! {"runId" => RUN}))
        .unwrap();
    assert_ne!(
        first.idempotency_key, other.idempotency_key,
        "another signal, another key"
    );
    assert_eq!(
        first.realtime_frame(),
        json!({"type": "command", "payload": first.envelope()})
    );
}

#[test]
fn idempotency_keys_are_safe_and_stable() {
    assert_eq!(idempotency_key("01ABC"), "patchbay:01ABC");
    let weird = idempotency_key("id with spaces/and ünicode");
    assert!(weird.starts_with("patchbay:h"));
    assert_eq!(weird.len(), "patchbay:h".len() + 32);
    assert_eq!(weird, idempotency_key("id with spaces/and ünicode"));
    assert_ne!(weird, idempotency_key("id with spaces/and unicode"));
    assert!(idempotency_key(&"x".repeat(500)).starts_with("patchbay:h"));
}

#[test]
fn answers_become_approval_decisions() {
    let c = commander();
    let approval = "01ARZ3NDEKTSV4RRFFQ69G5FB0";
    let params = |payload: patchbay_signal::Object| {
        let req = c.encode(&control("control.answer", payload)).unwrap();
        assert_eq!(req.command, "approval.decide");
        req.params
    };
    assert_eq!(
        params(object! {"promptId" => approval, "value" => "approve"}),
        json!({"approval_id": approval, "approved": true, "decision": "allow",
               "decision_scope": "once", "reason": "approved via patchbay"})
    );
    assert_eq!(
        params(object! {"promptId" => approval, "value" => true})["approved"],
        true
    );
    let deny = params(object! {"promptId" => approval, "value" => "Deny"});
    assert_eq!(
        (deny["approved"].clone(), deny["decision"].clone()),
        (json!(false), json!("deny"))
    );
    assert_eq!(
        params(object! {"promptId" => approval, "value" => false})["decision"],
        "deny"
    );
    assert_eq!(
        params(object! {"promptId" => approval, "value" => "session"})["decision_scope"],
        "session"
    );
    let cancelled = params(object! {"promptId" => approval, "cancelled" => true});
    assert_eq!(cancelled["approved"], false);
    assert_eq!(cancelled["reason"], "cancelled");
    let detailed = params(object! {"promptId" => approval, "value" => json!({
    "decision": "approve", "scope": "timeboxed", "ttlMs": 60000, "reason": "ok for a minute"})});
    assert_eq!(
        detailed,
        json!({"approval_id": approval, "approved": true, "decision": "allow",
               "decision_scope": "timeboxed", "reason": "ok for a minute", "decision_scope_ttl_ms": 60000})
    );
}

#[test]
fn unclear_answers_and_other_controls_are_refused() {
    let c = commander();
    assert_eq!(
        c.encode(&control(
            "control.answer",
            object! {"promptId" => "A", "value" => "maybe"}
        )),
        Err(EncodeError::UnrecognizedAnswer("\"maybe\"".into()))
    );
    assert!(matches!(
        c.encode(&control("control.answer", object! {"promptId" => "A"})),
        Err(EncodeError::UnrecognizedAnswer(_))
    ));
    assert!(matches!(
        c.encode(&control(
            "control.answer",
            object! {"promptId" => "A", "value" => json!({"scope": "once"})}
        )),
        Err(EncodeError::UnrecognizedAnswer(_))
    ));
    assert_eq!(
        c.encode(&control("control.answer", object! {"value" => "approve"})),
        Err(EncodeError::MissingPromptId)
    );
    for kind in [
        "control.pause",
        "control.step",
        "control.continue",
        "control.arm",
        "control.quit",
    ] {
        assert_eq!(
            c.encode(&control(kind, object! {"runId" => RUN})),
            Err(EncodeError::Unsupported(kind.into()))
        );
    }
    assert_eq!(
        c.encode(&control("text_delta", object! {})),
        Err(EncodeError::NotControl("text_delta".into()))
    );
    // Errors explain themselves.
    assert!(EncodeError::NoRun.to_string().contains("runId"));
}

#[test]
fn results_decode_to_signals() {
    let c = commander();
    let signal = control("control.cancel", object! {"runId" => RUN});
    let req = c.encode(&signal).unwrap();

    let ok = json!({"request_id": req.request_id, "command": "run.abort", "ok": true,
        "result": {"cancel": {"accepted": true}}, "idempotency_key": req.idempotency_key, "replayed": true});
    let s = req
        .decode_result("palyra:local", ok.to_string().as_bytes())
        .into_signal();
    assert_eq!(s.kind, "palyra.command_result");
    assert_eq!(s.correlation_id.as_deref(), Some(RUN));
    assert_eq!(s.payload["replayed"], true);
    assert_eq!(s.meta("control_id"), Some(&json!(signal.id)));

    let err = json!({"request_id": req.request_id, "command": "run.abort", "ok": false,
        "error": {"code": "run/not_found", "message": "orchestrator run was not found", "recovery_hint": "refresh run state"},
        "replayed": false});
    let s = req
        .decode_result("palyra:local", err.to_string().as_bytes())
        .into_signal();
    assert_eq!(s.kind, "error");
    assert_eq!(s.payload["code"], "run/not_found");
    assert_eq!(s.payload["message"], "orchestrator run was not found");
    assert_eq!(s.payload["severity"], "error");
    assert_eq!(s.meta("recovery_hint"), Some(&json!("refresh run state")));
    assert_eq!(s.correlation_id.as_deref(), Some(RUN));
    patchbay_testkit::assert_schema_valid(&s.to_value());

    // An HTTP error body that is no envelope, and a body that is not JSON.
    let s = req
        .decode_result("palyra:local", br#"{"error":"permission denied"}"#)
        .into_signal();
    assert_eq!(s.kind, "error");
    assert_eq!(s.payload["message"], "permission denied");
    assert_eq!(s.payload["code"], "command_failed");
    assert_eq!(s.meta("command"), Some(&json!("run.abort")));
    patchbay_testkit::assert_schema_valid(&s.to_value());
    let bad = req.decode_result("palyra:local", b"<html>502</html>");
    assert!(bad.is_bad());

    // The standalone decoder names the run from the result when it can.
    let s = decode_command_result(
        "palyra:local",
        json!({"request_id": "r", "command": "approval.decide", "ok": true,
               "result": {"approval": {"approval_id": "A", "run_id": RUN}}, "replayed": false})
        .to_string()
        .as_bytes(),
    )
    .into_signal();
    assert_eq!(s.correlation_id.as_deref(), Some(RUN));
    assert!(decode_command_result("x", b"[]").is_bad());
    assert!(decode_command_result("x", b"{").is_bad());
    let _: Value = s.to_value();
}
