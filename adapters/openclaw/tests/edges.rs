//! Hand-written cases for every decoding rule, including those the fixtures don't show.

mod support;

use patchbay_openclaw::OpenClawDecoder;
use patchbay_signal::Signal;
use patchbay_signal::decode::FrameDecoder as _;
use patchbay_signal::normalize::Decoded;
use patchbay_testkit::decoding::{good_signals, kinds};
use patchbay_testkit::validity::assert_all_valid;
use serde_json::{Value, json};

fn decode(d: &mut OpenClawDecoder, frame: Value) -> Vec<Signal> {
    let mut out = Vec::new();
    d.decode_frame(frame, Some(5), &mut out);
    let out = good_signals(out);
    assert_all_valid(&out);
    out
}

fn agent(stream: &str, data: Value) -> Value {
    json!({"type": "event", "event": "agent", "seq": 40, "payload": {
        "runId": "r1", "sessionKey": "agent:main:s", "agentId": "main", "stream": stream,
        "data": data, "seq": 3, "ts": 1000}})
}

fn dec() -> OpenClawDecoder {
    OpenClawDecoder::new("openclaw:test")
}

fn payload(s: &Signal) -> Value {
    Value::Object(s.payload.clone())
}

#[test]
fn lifecycle() {
    let mut d = dec();
    let out = decode(
        &mut d,
        agent(
            "lifecycle",
            json!({"phase": "end", "aborted": true, "stopReason": "aborted"}),
        ),
    );
    assert_eq!(
        payload(&out[0]),
        json!({"taskId": "r1", "agentId": "main", "success": false, "result": "aborted"})
    );
    assert_eq!(out[0].correlation_id.as_deref(), Some("r1"));
    assert_eq!(out[0].timestamp, 1000);
    assert_eq!(out[0].meta("upstreamSeq").unwrap(), 40);
    assert_eq!(out[0].meta("runSeq").unwrap(), 3);
    let out = decode(&mut d, agent("lifecycle", json!({"phase": "end"})));
    assert_eq!(
        payload(&out[0]),
        json!({"taskId": "r1", "agentId": "main", "success": true})
    );
    let out = decode(
        &mut d,
        agent(
            "lifecycle",
            json!({"phase": "error", "error": "provider down"}),
        ),
    );
    assert_eq!(
        payload(&out[0]),
        json!({"agentId": "main", "code": "lifecycle_error", "message": "provider down", "severity": "error"})
    );
    let out = decode(&mut d, agent("lifecycle", json!({"phase": "error"})));
    assert_eq!(out[0].payload["message"], "run failed");
    let out = decode(
        &mut d,
        agent("lifecycle", json!({"phase": "compacting", "x": 1})),
    );
    assert_eq!(kinds(&out), ["openclaw.lifecycle"]);
    assert_eq!(payload(&out[0]), json!({"phase": "compacting", "x": 1}));
    let out = decode(&mut d, agent("lifecycle", json!({})));
    assert_eq!(kinds(&out), ["openclaw.lifecycle"]);
    // A run end without a runId.
    let out = decode(
        &mut d,
        json!({"type": "event", "event": "agent", "payload": {"stream": "lifecycle", "data": {"phase": "end"}}}),
    );
    assert_eq!(out[0].payload["taskId"], "unknown-run");
    assert_eq!(
        out[0].payload["agentId"], "openclaw:test",
        "no agent anywhere: the source"
    );
}

#[test]
fn assistant_text_with_and_without_delta() {
    // Fresh: an empty delta with a text is not dropped.
    let mut d = dec();
    let out = decode(
        &mut d,
        agent("assistant", json!({"text": "Hello", "delta": ""})),
    );
    assert_eq!(kinds(&out), ["text_delta"]);
    assert_eq!(
        payload(&out[0]),
        json!({"agentId": "main", "content": "Hello"})
    );
    assert!(out[0].meta("extra").is_none());

    // After deltas, a text-only frame gives only what it adds.
    let mut d = dec();
    decode(
        &mut d,
        agent("assistant", json!({"text": "Hel", "delta": "Hel"})),
    );
    let out = decode(
        &mut d,
        agent("assistant", json!({"text": "Hello", "delta": ""})),
    );
    assert_eq!(out[0].payload["content"], "lo");
    let out = decode(&mut d, agent("assistant", json!({"text": "Hello world"})));
    assert_eq!(out[0].payload["content"], " world");
    // The same text again adds nothing: kept as openclaw.assistant, not a second delta.
    let out = decode(
        &mut d,
        agent("assistant", json!({"text": "Hello world", "delta": ""})),
    );
    assert_eq!(kinds(&out), ["openclaw.assistant"]);
    assert_eq!(out[0].payload["text"], "Hello world");
    // A rewrite that does not extend the text: all of it, marked as a snapshot.
    let out = decode(&mut d, agent("assistant", json!({"text": "Goodbye"})));
    assert_eq!(out[0].payload["content"], "Goodbye");
    assert_eq!(out[0].meta("extra").unwrap(), &json!({"snapshot": true}));
    // Deltas without text accumulate too.
    let mut d = dec();
    decode(&mut d, agent("assistant", json!({"delta": "ab"})));
    let out = decode(&mut d, agent("assistant", json!({"text": "abc"})));
    assert_eq!(out[0].payload["content"], "c");
    // Texts are per item.
    let out = decode(
        &mut d,
        agent("assistant", json!({"text": "abc", "itemId": "i2"})),
    );
    assert_eq!(out[0].payload["content"], "abc");
    // Nothing at all, or a delta that is not text: passed through.
    let out = decode(&mut d, agent("assistant", json!({"delta": ""})));
    assert_eq!(kinds(&out), ["openclaw.assistant"]);
    let out = decode(&mut d, agent("assistant", json!({"delta": 5})));
    assert_eq!(kinds(&out), ["openclaw.assistant"]);
    // The run's end forgets its texts: the same text after it is new again.
    decode(&mut d, agent("lifecycle", json!({"phase": "end"})));
    let out = decode(&mut d, agent("assistant", json!({"text": "abc"})));
    assert_eq!(out[0].payload["content"], "abc");
}

#[test]
fn thinking() {
    let mut d = dec();
    let out = decode(
        &mut d,
        agent("thinking", json!({"delta": "hmm", "text": "hmm"})),
    );
    assert_eq!(kinds(&out), ["thinking"]);
    assert_eq!(
        payload(&out[0]),
        json!({"agentId": "main", "content": "hmm"})
    );
    let out = decode(
        &mut d,
        agent("thinking", json!({"delta": "", "text": "hmm, ok"})),
    );
    assert_eq!(out[0].payload["content"], ", ok");
}

#[test]
fn tools() {
    let mut d = dec();
    let out = decode(
        &mut d,
        agent(
            "tool",
            json!({"phase": "start", "name": "exec", "toolCallId": "c", "args": "ls"}),
        ),
    );
    assert_eq!(
        payload(&out[0]),
        json!({"toolName": "exec", "agentId": "main", "callId": "c", "input": {"_raw": "ls"}})
    );
    let out = decode(
        &mut d,
        agent("tool", json!({"phase": "start", "name": "exec"})),
    );
    assert_eq!(
        payload(&out[0]),
        json!({"toolName": "exec", "agentId": "main"})
    );
    let out = decode(
        &mut d,
        agent("tool", json!({"phase": "start", "toolCallId": "c"})),
    );
    assert_eq!(kinds(&out), ["openclaw.tool"], "no name, no tool_call");
    let out = decode(
        &mut d,
        agent(
            "tool",
            json!({"phase": "update", "name": "exec", "partialResult": "..."}),
        ),
    );
    assert_eq!(kinds(&out), ["openclaw.tool_update"]);
    assert_eq!(out[0].payload["partialResult"], "...");
    assert_eq!(out[0].correlation_id.as_deref(), Some("r1"));
    let out = decode(
        &mut d,
        agent(
            "tool",
            json!({"phase": "result", "name": "exec", "toolCallId": "c", "isError": true, "result": "boom"}),
        ),
    );
    assert_eq!(
        payload(&out[0]),
        json!({"toolName": "exec", "agentId": "main", "callId": "c", "success": false, "output": {"result": "boom"}})
    );
    let out = decode(
        &mut d,
        agent(
            "tool",
            json!({"phase": "result", "name": "exec", "isError": "?"}),
        ),
    );
    assert_eq!(kinds(&out), ["openclaw.tool"]);
    let out = decode(
        &mut d,
        agent("tool", json!({"phase": "other", "name": "exec"})),
    );
    assert_eq!(kinds(&out), ["openclaw.tool"]);
}

#[test]
fn usage_without_counts_is_not_a_zero_token_usage() {
    let mut d = dec();
    let out = decode(&mut d, agent("usage", json!({"model": "m"})));
    assert_eq!(kinds(&out), ["openclaw.usage"]);
    assert_eq!(payload(&out[0]), json!({"model": "m"}));
    let out = decode(
        &mut d,
        agent(
            "usage",
            json!({"inputTokens": 12, "outputTokens": 3, "model": "m", "cost": 0.5, "cacheRead": 1}),
        ),
    );
    assert_eq!(
        payload(&out[0]),
        json!({"agentId": "main", "promptTokens": 12, "completionTokens": 3, "model": "m", "cost": 0.5})
    );
    assert_eq!(out[0].meta("extra").unwrap(), &json!({"cacheRead": 1}));
    assert!(out[0].meta("missing").is_none());
    let out = decode(&mut d, agent("usage", json!({"input": 7})));
    assert_eq!(out[0].payload["promptTokens"], 7);
    assert_eq!(
        out[0].meta("missing").unwrap(),
        &json!(["completionTokens"])
    );
    // Session events never become token_usage, whatever they carry.
    let out = decode(
        &mut d,
        json!({"type": "event", "event": "sessions.changed", "payload": {"sessionKey": "agent:main:s", "totalTokens": 0}}),
    );
    assert_eq!(kinds(&out), ["openclaw.sessions.changed"]);
}

#[test]
fn chat_is_passed_through_not_decoded() {
    let mut d = dec();
    let out = decode(
        &mut d,
        json!({"type": "event", "event": "chat", "seq": 9, "payload": {
        "runId": "r1", "sessionKey": "agent:main:s", "seq": 2, "state": "delta", "deltaText": "hi",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}}}),
    );
    assert_eq!(kinds(&out), ["openclaw.chat"]);
    assert_eq!(out[0].payload["deltaText"], "hi");
    assert_eq!(out[0].correlation_id.as_deref(), Some("r1"));
    assert_eq!(out[0].meta("upstreamSeq").unwrap(), 9);
    assert_eq!(out[0].meta("runSeq").unwrap(), 2);
    assert_eq!(out[0].timestamp, 5, "no payload.ts: the recorded time");
}

#[test]
fn approvals_put_the_agent_in_waiting() {
    let mut d = dec();
    let requested = json!({"type": "event", "event": "exec.approval.requested", "seq": 3, "payload": {
        "id": "ap-1", "request": {"command": "rm -rf build", "agentId": "ops", "sessionKey": "agent:ops:main"},
        "createdAtMs": 10, "expiresAtMs": 20}});
    let out = decode(&mut d, requested);
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "openclaw.exec.approval.requested",
            "approval.requested"
        ]
    );
    assert_eq!(
        payload(&out[2]),
        json!({"promptId": "ap-1", "agentId": "ops", "toolName": "exec",
               "input": {"command": "rm -rf build", "agentId": "ops", "sessionKey": "agent:ops:main"},
               "choices": ["allow-once", "allow-always", "deny"]}),
        "the common approval, what every UI reads"
    );
    assert_eq!(
        payload(&out[0]),
        json!({"agentId": "ops", "from": "acting", "to": "waiting", "reason": "exec.approval.requested"})
    );
    assert_eq!(
        out[1].payload["request"]["command"], "rm -rf build",
        "the approval itself is kept"
    );
    assert_eq!(out[1].meta("promptId").unwrap(), "ap-1");
    assert!(out.iter().all(|s| s.meta("upstreamSeq") == Some(&json!(3))));

    let out = decode(
        &mut d,
        json!({"type": "event", "event": "exec.approval.requested", "payload": {
        "id": "ap-2", "runId": "r5", "request": {"sessionKey": "agent:dev:x"}}}),
    );
    assert_eq!(out[0].payload["agentId"], "dev", "from the session key");
    assert_eq!(out[0].correlation_id.as_deref(), Some("r5"));

    let out = decode(
        &mut d,
        json!({"type": "event", "event": "exec.approval.resolved", "payload": {
        "id": "ap-1", "decision": "deny", "request": {"agentId": "ops"}}}),
    );
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "openclaw.exec.approval.resolved",
            "approval.decided"
        ]
    );
    assert_eq!(
        payload(&out[2]),
        json!({"promptId": "ap-1", "value": "deny", "by": "openclaw"})
    );
    assert_eq!(out[0].payload["from"], "waiting");
    assert_eq!(out[0].payload["to"], "acting");
    assert_eq!(out[1].payload["decision"], "deny");
}

#[test]
fn internal_and_unknown_events() {
    let mut d = dec();
    for name in ["heartbeat", "cron", "tick", "presence", "health"] {
        let out = decode(
            &mut d,
            json!({"type": "event", "event": name, "payload": {"a": 1}}),
        );
        assert_eq!(kinds(&out), [format!("openclaw.{name}").as_str()]);
        assert_eq!(out[0].meta("internal").unwrap(), true);
    }
    let out = decode(
        &mut d,
        json!({"type": "event", "event": "shutdown", "payload": {"reason": "update"}}),
    );
    assert_eq!(kinds(&out), ["openclaw.shutdown"]);
    assert_eq!(out[0].payload["reason"], "update");
    assert!(out[0].meta("internal").is_none());
    let out = decode(
        &mut d,
        json!({"type": "event", "event": "node.pair.requested", "payload": [1, 2]}),
    );
    assert_eq!(payload(&out[0]), json!({"value": [1, 2]}));
    let out = decode(&mut d, json!({"type": "event", "event": "x"}));
    assert!(out[0].payload.is_empty());
    // A run started by a heartbeat is internal too.
    let mut frame = agent("assistant", json!({"delta": "ok"}));
    frame["payload"]["isHeartbeat"] = json!(true);
    let out = decode(&mut d, frame);
    assert_eq!(out[0].meta("internal").unwrap(), true);
    assert_eq!(out[0].meta("heartbeat").unwrap(), true);
    // The challenge event gives nothing.
    assert!(
        decode(
            &mut d,
            json!({"type": "event", "event": "connect.challenge", "payload": {"nonce": "n"}})
        )
        .is_empty()
    );
    assert!(decode(&mut d, json!({"type": "connect.challenge"})).is_empty());
    // Unknown frame types keep their name.
    let out = decode(&mut d, json!({"type": "pong", "ts": 1}));
    assert_eq!(kinds(&out), ["openclaw.pong"]);
}

#[test]
fn agent_ids_and_channel_metadata() {
    let mut d = dec();
    let frame = |payload: Value| json!({"type": "event", "event": "agent", "payload": payload});
    let out = decode(
        &mut d,
        frame(
            json!({"sessionKey": "agent:ops:chan", "stream": "lifecycle", "data": {"phase": "start"},
        "channel": "telegram", "channelLabel": "Team", "label": "standup", "lane": "main", "sessionId": "sid", "extraKey": 1}),
        ),
    );
    assert_eq!(out[0].payload["agentId"], "ops");
    assert_eq!(out[0].meta("channel").unwrap(), "telegram");
    assert_eq!(out[0].meta("channelLabel").unwrap(), "Team");
    assert_eq!(out[0].meta("label").unwrap(), "standup");
    assert_eq!(out[0].meta("lane").unwrap(), "main");
    assert_eq!(out[0].meta("sessionId").unwrap(), "sid");
    assert_eq!(out[0].meta("frame").unwrap(), &json!({"extraKey": 1}));
    let out = decode(
        &mut d,
        frame(json!({"sessionKey": "main", "stream": "lifecycle", "data": {"phase": "start"}})),
    );
    assert_eq!(out[0].payload["agentId"], "main");
    let out = decode(
        &mut d,
        frame(json!({"sessionKey": "agent:", "stream": "lifecycle", "data": {"phase": "start"}})),
    );
    assert_eq!(out[0].payload["agentId"], "agent:");
    // An agent event without a stream is kept whole.
    let out = decode(&mut d, frame(json!({"runId": "r", "data": {"x": 1}})));
    assert_eq!(kinds(&out), ["openclaw.agent"]);
    assert_eq!(out[0].payload["data"], json!({"x": 1}));
    // Other streams keep their name.
    let out = decode(
        &mut d,
        frame(json!({"runId": "r", "stream": "compaction", "data": {"phase": "start"}})),
    );
    assert_eq!(kinds(&out), ["openclaw.compaction"]);
}

#[test]
fn responses_and_requests() {
    let mut d = dec();
    // An ok answer that is not hello gives nothing.
    assert!(
        decode(
            &mut d,
            json!({"type": "res", "id": "1", "ok": true, "payload": {"subscribed": true}})
        )
        .is_empty()
    );
    // A refused RPC is an error.
    let out = decode(
        &mut d,
        json!({"type": "res", "id": "2", "ok": false, "error": {"code": "FORBIDDEN", "message": "missing scope"}}),
    );
    assert_eq!(
        payload(&out[0]),
        json!({"code": "FORBIDDEN", "message": "missing scope", "severity": "error"})
    );
    let out = decode(&mut d, json!({"type": "res", "id": "3", "ok": false}));
    assert_eq!(out[0].payload["message"], "request failed");
    // Requests keep everything but their credentials.
    let out = decode(
        &mut d,
        json!({"type": "req", "id": "4", "method": "connect", "params": {"auth": {"token": "t", "password": "p"}}}),
    );
    assert_eq!(
        out[0].payload["params"]["auth"],
        json!({"token": "[redacted]", "password": "[redacted]"})
    );
    assert!(!out[0].to_json().contains("\"t\""));
}

#[test]
fn bad_frames_are_reported_at_the_last_good_time() {
    let mut d = dec();
    let mut out = Vec::new();
    d.decode_text("nope", &mut out);
    d.decode_text("[1]", &mut out);
    d.decode_frame(json!({"no": "type"}), None, &mut out);
    d.decode_frame(
        json!({"type": "event", "payload": {"ts": 500}}),
        None,
        &mut out,
    );
    d.decode_frame(
        json!({"type": "event", "event": "tick", "payload": {"ts": 700}}),
        None,
        &mut out,
    );
    d.decode_frame(json!({"type": 7}), None, &mut out);
    d.decode_text("", &mut out);
    let bad: Vec<bool> = out.iter().map(Decoded::is_bad).collect();
    assert_eq!(bad, [true, true, true, true, false, true]);
    let times: Vec<i64> = out
        .iter()
        .map(|d| d.clone().into_signal().timestamp)
        .collect();
    assert_eq!(times, [0, 0, 0, 0, 700, 700]);
    for d in out {
        let s = d.into_signal();
        patchbay_testkit::assert_schema_valid(&s.to_value());
    }
}

#[test]
fn session_tool_events_decode_like_agent_events() {
    let mut d = dec();
    let mut frame = agent(
        "tool",
        json!({"phase": "start", "name": "ls", "toolCallId": "c1", "args": {"path": "."}}),
    );
    frame["event"] = json!("session.tool");
    let out = decode(&mut d, frame);
    assert_eq!(kinds(&out), ["tool_call"]);
    assert_eq!(out[0].payload["toolName"], "ls");
    assert_eq!(out[0].correlation_id.as_deref(), Some("r1"));
    assert_eq!(out[0].meta("event"), Some(&json!("session.tool")));
    let mut frame = agent(
        "tool",
        json!({"phase": "result", "name": "ls", "toolCallId": "c1", "isError": false, "result": "x"}),
    );
    frame["event"] = json!("session.tool");
    assert_eq!(kinds(&decode(&mut d, frame)), ["tool_result"]);
}
