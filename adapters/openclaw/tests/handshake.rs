//! The handshake state machine, replayed against the recorded sessions with the real
//! gateway, and the RPC bookkeeping.

use patchbay_openclaw::{
    ConnectConfig, ConnectFailure, FailureKind, Handshake, HandshakeState, HandshakeStep,
    PendingRequests, RpcOutcome, connect_frame, is_challenge,
};
use patchbay_testkit::fixture_text;
use serde_json::{Value, json};

struct Recording {
    incoming: Vec<Value>,
    connect: Value,
}

fn recording(fixture: &str) -> Recording {
    let mut incoming = Vec::new();
    let mut connect = Value::Null;
    for line in fixture_text(fixture).lines() {
        let line: Value = serde_json::from_str(line).unwrap();
        match line["dir"].as_str() {
            Some("in") => incoming.push(line["frame"].clone()),
            Some("out") if line["frame"]["method"] == "connect" => connect = line["frame"].clone(),
            _ => {}
        }
    }
    Recording { incoming, connect }
}

/// A config that reproduces the recorded `connect` params.
fn config_like(connect: &Value) -> ConnectConfig {
    let p = &connect["params"];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    };
    ConnectConfig {
        token: p["auth"]["token"].as_str().unwrap().to_owned(),
        client_version: p["client"]["version"].as_str().unwrap().to_owned(),
        platform: p["client"]["platform"].as_str().unwrap().to_owned(),
        scopes: strings(&p["scopes"]),
        caps: strings(&p["caps"]),
        min_protocol: p["minProtocol"].as_u64().unwrap() as u32,
        max_protocol: p["maxProtocol"].as_u64().unwrap() as u32,
    }
}

/// Replays a recording: the frame sent on the challenge must be the recorded one.
fn replay(fixture: &str) -> (Handshake, Vec<HandshakeStep>) {
    let rec = recording(fixture);
    let id = rec.connect["id"].as_str().unwrap().to_owned();
    let mut hs = Handshake::new(config_like(&rec.connect));
    let mut steps = Vec::new();
    for frame in &rec.incoming {
        if let Some(step) = hs.on_frame_with_id(frame, || id.clone()) {
            steps.push(step);
        }
    }
    assert_eq!(
        steps.first(),
        Some(&HandshakeStep::Send(rec.connect)),
        "{fixture}"
    );
    (hs, steps)
}

#[test]
fn recorded_handshakes_replay_exactly() {
    // Protocol 3-4 without caps: accepted as 4.
    let (hs, steps) = replay("openclaw/openclaw-hello-min3-max4.jsonl");
    assert_eq!(
        steps.len(),
        2,
        "health and tick after hello are not the handshake's"
    );
    let HandshakeStep::Connected(hello) = &steps[1] else {
        panic!("{steps:?}")
    };
    assert_eq!(hello.protocol, Some(4));
    assert_eq!(hello.server_version.as_deref(), Some("2026.9.6"));
    assert_eq!(
        hello.conn_id.as_deref(),
        Some("c9ac8268-664f-4b29-a7d0-aeb00868af2f")
    );
    assert_eq!(hello.tick_interval_ms, Some(30000));
    assert_eq!(hello.payload["type"], "hello-ok");
    assert!(hs.is_connected());

    // Protocol 4 with tool-events and write scope (the chat.send session).
    let (hs, steps) = replay("openclaw/openclaw-chat-send-mock-toolcall.jsonl");
    assert!(matches!(steps[1], HandshakeStep::Connected(_)));
    assert_eq!(steps.len(), 2);
    assert!(hs.is_connected());

    // 3-only: refused, protocol mismatch, do not retry.
    let (hs, steps) = replay("openclaw/openclaw-hello-min3-max3.jsonl");
    let HandshakeStep::Failed(failure) = &steps[1] else {
        panic!("{steps:?}")
    };
    assert_eq!(failure.kind, FailureKind::ProtocolMismatch);
    assert_eq!(failure.detail_code.as_deref(), Some("PROTOCOL_MISMATCH"));
    assert_eq!(failure.code.as_deref(), Some("INVALID_REQUEST"));
    assert!(!failure.retryable());
    assert!(matches!(hs.state(), HandshakeState::Failed(_)));

    // Wrong token: an auth failure, do not retry.
    let (_, steps) = replay("openclaw/openclaw-wrong-token.jsonl");
    let HandshakeStep::Failed(failure) = &steps[1] else {
        panic!("{steps:?}")
    };
    assert_eq!(failure.kind, FailureKind::Auth);
    assert_eq!(failure.detail_code.as_deref(), Some("AUTH_TOKEN_MISMATCH"));
    assert!(!failure.retryable());
    assert_eq!(
        failure.to_string(),
        "OpenClaw refused the connection (Auth): unauthorized: gateway token mismatch (provide gateway auth token)"
    );
}

#[test]
fn default_connect_frame() {
    let config = ConnectConfig::new("secret");
    assert_eq!(
        connect_frame(&config, "req-1"),
        json!({"type": "req", "id": "req-1", "method": "connect", "params": {
            "minProtocol": 3,
            "maxProtocol": 4,
            "client": {"id": "gateway-client", "version": env!("CARGO_PKG_VERSION"),
                       "platform": std::env::consts::OS, "mode": "backend"},
            "role": "operator",
            "scopes": ["operator.read"],
            "caps": ["tool-events"],
            "auth": {"token": "secret"},
        }})
    );
    // No token: no auth at all.
    let frame = connect_frame(&ConnectConfig::new(""), "x");
    assert!(frame["params"].get("auth").is_none());
}

#[test]
fn bare_challenge_and_fresh_ids() {
    let mut hs = Handshake::new(ConnectConfig::new("t"));
    let Some(HandshakeStep::Send(frame)) = hs.on_frame(&json!({"type": "connect.challenge"}))
    else {
        panic!()
    };
    let id = frame["id"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 26, "a ULID");
    assert_eq!(
        hs.state(),
        &HandshakeState::AwaitingHello {
            request_id: id.clone()
        }
    );
    let mut other = Handshake::new(ConnectConfig::new("t"));
    let Some(HandshakeStep::Send(frame2)) = other.on_frame(&json!({"type": "connect.challenge"}))
    else {
        panic!()
    };
    assert_ne!(frame2["id"], frame["id"]);
    assert!(is_challenge(
        &json!({"type": "event", "event": "connect.challenge", "payload": {"nonce": "n", "ts": 1}})
    ));
    assert!(!is_challenge(&json!({"type": "event", "event": "tick"})));
}

#[test]
fn the_state_machine_ignores_what_is_not_its_business() {
    let mut hs = Handshake::new(ConnectConfig::new("t"));
    let id = || "c1".to_owned();
    // Before the challenge, other frames do nothing.
    assert_eq!(
        hs.on_frame_with_id(&json!({"type": "event", "event": "tick"}), id),
        None
    );
    assert_eq!(
        hs.on_frame_with_id(&json!({"type": "res", "id": "c1", "ok": true}), id),
        None
    );
    assert!(matches!(
        hs.on_frame_with_id(&json!({"type": "event", "event": "connect.challenge"}), id),
        Some(HandshakeStep::Send(_))
    ));
    // A repeated challenge, or answers to other ids, are ignored.
    assert_eq!(
        hs.on_frame_with_id(&json!({"type": "connect.challenge"}), || "c2".into()),
        None
    );
    assert_eq!(
        hs.on_frame_with_id(&json!({"type": "res", "id": "zz", "ok": false}), id),
        None
    );
    // An interim "accepted" answer keeps waiting (the RPC answers twice with one id).
    assert_eq!(
        hs.on_frame_with_id(
            &json!({"type": "res", "id": "c1", "ok": true, "payload": {"status": "accepted"}}),
            id
        ),
        None
    );
    let hello = json!({"type": "res", "id": "c1", "ok": true, "payload": {"type": "hello-ok", "protocol": 4}});
    assert!(matches!(
        hs.on_frame_with_id(&hello, id),
        Some(HandshakeStep::Connected(_))
    ));
    // A duplicate final answer after connecting changes nothing.
    assert_eq!(hs.on_frame_with_id(&hello, id), None);
    assert!(hs.is_connected());
    hs.reset();
    assert_eq!(hs.state(), &HandshakeState::AwaitingChallenge);
    // A hello without a type but with a protocol also connects.
    hs.on_frame_with_id(&json!({"type": "connect.challenge"}), id);
    assert!(matches!(
        hs.on_frame_with_id(
            &json!({"type": "res", "id": "c1", "ok": true, "payload": {"protocol": 4}}),
            id
        ),
        Some(HandshakeStep::Connected(_))
    ));
}

#[test]
fn failures_are_classified() {
    let kind = |error: Value| ConnectFailure::from_error(&error).kind;
    let with_detail =
        |code: &str| json!({"code": "INVALID_REQUEST", "message": "x", "details": {"code": code}});
    assert_eq!(kind(with_detail("AUTH_TOKEN_MISSING")), FailureKind::Auth);
    assert_eq!(
        kind(with_detail("AUTH_PASSWORD_MISMATCH")),
        FailureKind::Auth
    );
    assert_eq!(
        kind(with_detail("AUTH_DEVICE_TOKEN_MISMATCH")),
        FailureKind::Auth
    );
    assert_eq!(kind(with_detail("PAIRING_REQUIRED")), FailureKind::Auth);
    assert_eq!(
        kind(with_detail("AUTH_RATE_LIMITED")),
        FailureKind::RateLimited
    );
    assert_eq!(
        kind(with_detail("PROTOCOL_MISMATCH")),
        FailureKind::ProtocolMismatch
    );
    assert_eq!(
        kind(json!({"code": "UNAUTHORIZED", "message": "no"})),
        FailureKind::Auth
    );
    assert_eq!(
        kind(json!({"message": "unauthorized: bad token"})),
        FailureKind::Auth
    );
    assert_eq!(
        kind(json!({"code": "UNAVAILABLE", "message": "gateway starting"})),
        FailureKind::Other
    );
    assert_eq!(kind(Value::Null), FailureKind::Other);
    assert!(ConnectFailure::from_error(&with_detail("AUTH_RATE_LIMITED")).retryable());
    assert!(ConnectFailure::from_error(&json!({"message": "busy"})).retryable());
    assert_eq!(
        ConnectFailure::from_error(&Value::Null).message,
        "connect refused"
    );
}

#[test]
fn rpcs_that_answer_twice() {
    let mut pending = PendingRequests::new();
    pending.register("a1", "agent");
    pending.register("b1", "chat.abort");
    assert_eq!(pending.len(), 2);
    let accepted = json!({"type": "res", "id": "a1", "ok": true, "payload": {"runId": "r", "status": "accepted"}});
    assert_eq!(
        pending.on_response(&accepted),
        Some(RpcOutcome::Accepted {
            id: "a1".into(),
            method: "agent".into(),
            payload: accepted["payload"].clone()
        })
    );
    assert_eq!(pending.len(), 2, "still waiting for the final answer");
    let done =
        json!({"type": "res", "id": "a1", "ok": true, "payload": {"runId": "r", "status": "ok"}});
    assert_eq!(
        pending.on_response(&done),
        Some(RpcOutcome::Done {
            id: "a1".into(),
            method: "agent".into(),
            result: Ok(done["payload"].clone())
        })
    );
    // A late duplicate answers nothing.
    assert_eq!(pending.on_response(&done), None);
    let failed =
        json!({"type": "res", "id": "b1", "ok": false, "error": {"code": "X", "message": "m"}});
    assert_eq!(
        pending.on_response(&failed),
        Some(RpcOutcome::Done {
            id: "b1".into(),
            method: "chat.abort".into(),
            result: Err(json!({"code": "X", "message": "m"}))
        })
    );
    assert!(pending.is_empty());
    assert_eq!(
        pending.on_response(&json!({"type": "event", "id": "a1"})),
        None
    );
    pending.register("c", "m");
    pending.clear();
    assert!(pending.is_empty());
}
