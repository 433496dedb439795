//! Golden tests over every OpenClaw fixture: the exact signal sequence.

mod support;

use patchbay_openclaw::{OpenClawDecoder, OpenClawStream};
use patchbay_signal::Signal;
use patchbay_signal::decode::StreamDecoder;
use patchbay_testkit::decoding::kinds;
use patchbay_testkit::fixture_text;
use patchbay_testkit::validity::assert_all_valid;
use serde_json::{Value, json};
use support::signals;

const RUN: &str = "probe-tool-1";
const SESSION: &str = "agent:main:patchbay-tool";

#[test]
fn docs_examples_with_placeholders() {
    // Bare frames (no recording wrapper) with `…` placeholders: no panic, no bad input.
    let out = signals(&fixture_text(
        "openclaw/docs-protocol-v4-handshake-examples.jsonl",
    ));
    assert_all_valid(&out);
    // The challenge gives nothing; the requests are kept (redacted); hello-ok connects.
    assert_eq!(
        kinds(&out),
        ["openclaw.request", "openclaw.connected", "openclaw.request"]
    );
    assert_eq!(out[0].payload["method"], "connect");
    assert_eq!(
        out[0].payload["params"]["auth"],
        json!({"token": "[redacted]"})
    );
    assert_eq!(out[0].payload["params"]["client"]["id"], "cli");
    assert_eq!(out[1].payload["protocol"], 4);
    assert_eq!(out[1].payload["policy"]["tickIntervalMs"], 15000);
    assert!(
        out[1].payload.get("auth").is_none(),
        "hello auth may hold a device token"
    );
    assert!(out[1].payload.get("features").is_none());
    assert_eq!(out[2].payload["params"]["role"], "node");
    assert!(!out.iter().any(|s| s.to_json().contains("\"token\":\"…\"")));
}

#[test]
fn hello_min3_max4_connects_then_internal_events() {
    let out = signals(&fixture_text("openclaw/openclaw-hello-min3-max4.jsonl"));
    assert_all_valid(&out);
    assert_eq!(
        kinds(&out),
        ["openclaw.connected", "openclaw.health", "openclaw.tick"]
    );
    assert_eq!(out[0].payload["protocol"], 4);
    assert_eq!(out[0].payload["server"]["version"], "2026.9.6");
    assert_eq!(
        out[0].meta("id").unwrap(),
        "35fbeb2f-d83a-4446-b3e6-c9e9cd5aaddb"
    );
    assert_eq!(out[0].timestamp, 1795304481672, "the recorded t");
    for s in &out[1..] {
        assert_eq!(s.meta("internal").unwrap(), true);
    }
    assert_eq!(out[1].meta("upstreamSeq").unwrap(), 1);
    assert_eq!(
        out[1].meta("stateVersion").unwrap(),
        &json!({"presence": 1, "health": 3})
    );
    assert_eq!(out[1].timestamp, 1795304481691, "payload.ts");
    assert_eq!(out[1].payload["defaultAgentId"], "main");
    assert_eq!(
        Value::Object(out[2].payload.clone()),
        json!({"ts": 1795304489808_i64})
    );
    assert_eq!(out[2].meta("upstreamSeq").unwrap(), 2);
}

#[test]
fn refused_connections_are_errors() {
    let out = signals(&fixture_text("openclaw/openclaw-hello-min3-max3.jsonl"));
    assert_all_valid(&out);
    assert_eq!(kinds(&out), ["error"]);
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"code": "PROTOCOL_MISMATCH", "message": "protocol mismatch", "severity": "error"})
    );
    assert_eq!(
        out[0].meta("error").unwrap()["details"]["expectedProtocol"],
        4
    );
    assert_eq!(out[0].timestamp, 1795304521940);

    let out = signals(&fixture_text("openclaw/openclaw-wrong-token.jsonl"));
    assert_all_valid(&out);
    assert_eq!(kinds(&out), ["error"]);
    assert_eq!(out[0].payload["code"], "AUTH_TOKEN_MISMATCH");
    assert!(
        out[0].payload["message"]
            .as_str()
            .unwrap()
            .starts_with("unauthorized")
    );
    assert_eq!(
        out[0].meta("id").unwrap(),
        "0a18cdfb-d463-4627-b073-1fe59308f21d"
    );
    // The token we sent is an `out` line: never decoded, never in a signal.
    assert!(!out[0].to_json().contains("wrong-token"));
}

fn chat_send() -> (Vec<Signal>, OpenClawStream) {
    let text = fixture_text("openclaw/openclaw-chat-send-mock-toolcall.jsonl");
    let mut stream = OpenClawStream::new(OpenClawDecoder::new("parse:openclaw"));
    let mut decoded = Vec::new();
    stream.feed(text.as_bytes(), &mut decoded);
    stream.finish(&mut decoded);
    let out: Vec<Signal> = decoded
        .into_iter()
        .map(|d| {
            assert!(!d.is_bad());
            d.into_signal()
        })
        .collect();
    (out, stream)
}

#[test]
fn chat_send_with_a_tool_call_exact_sequence() {
    let (out, stream) = chat_send();
    assert_all_valid(&out);
    assert_eq!(
        kinds(&out),
        [
            "openclaw.connected",
            "openclaw.sessions.changed",
            "openclaw.chat",
            "openclaw.run_status",
            "openclaw.chat",
            "openclaw.run_status",
            "openclaw.session.message",
            "agent_state_change", // lifecycle start
            "openclaw.chat",
            "openclaw.run_status",
            "openclaw.sessions.changed",
            "openclaw.lifecycle", // phase model
            "token_usage",
            "openclaw.session.message",
            "openclaw.item",
            "tool_call",
            "openclaw.sessions.changed",
            "openclaw.sessions.changed",
            "tool_result",
            "openclaw.item",
            "openclaw.lifecycle",
            "openclaw.sessions.changed",
            "text_delta",
            "openclaw.chat",
            "text_delta",
            "openclaw.chat",
            "text_delta",
            "token_usage",
            "openclaw.session.message",
            "openclaw.lifecycle", // finishing
            "openclaw.lifecycle", // model
            "completion",         // lifecycle end
            "openclaw.chat",
            "openclaw.chat",
            "openclaw.sessions.changed",
            "openclaw.sessions.changed",
            "openclaw.sessions.changed",
            "openclaw.health",
            "openclaw.tick",
        ]
    );
    // Every agent and chat signal belongs to the run.
    for s in out
        .iter()
        .filter(|s| s.meta("stream").is_some() || s.kind == "openclaw.chat")
    {
        assert_eq!(s.correlation_id.as_deref(), Some(RUN), "{}", s.kind);
        assert_eq!(s.meta("sessionKey").unwrap(), SESSION);
    }
    // Frame seq (per connection) and payload seq (per run) both kept.
    let start = &out[7];
    assert_eq!(start.meta("upstreamSeq").unwrap(), 7);
    assert_eq!(start.meta("runSeq").unwrap(), 3);
    assert_eq!(
        Value::Object(start.payload.clone()),
        json!({"agentId": "main", "from": "idle", "to": "acting"})
    );
    assert_eq!(start.timestamp, 1795304762316);
    assert_eq!(start.meta("stream").unwrap(), "lifecycle");

    assert_eq!(out[11].payload["phase"], "model");
    assert_eq!(out[11].payload["model"], "echo-1");

    // Usage with only output tokens: the missing count is named, not faked silently.
    assert_eq!(
        Value::Object(out[12].payload.clone()),
        json!({"agentId": "main", "promptTokens": 0, "completionTokens": 5})
    );
    assert_eq!(out[12].meta("missing").unwrap(), &json!(["promptTokens"]));

    // The tool call with its args as input, and its result.
    assert_eq!(
        Value::Object(out[15].payload.clone()),
        json!({"toolName": "ls", "agentId": "main", "callId": "call_80a69702", "input": {"path": "."}})
    );
    assert_eq!(
        out[15].meta("frame").unwrap()["session"]["key"],
        SESSION,
        "the rest of the payload is kept"
    );
    let result = &out[18];
    assert_eq!(result.payload["toolName"], "ls");
    assert_eq!(result.payload["callId"], "call_80a69702");
    assert_eq!(result.payload["success"], true);
    assert!(
        result.payload["output"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("AGENTS.md")
    );
    assert_eq!(
        result.meta("extra").unwrap(),
        &json!({"meta": ".", "commandBearing": false})
    );

    // The assistant deltas rebuild the reply; the chat events are not decoded into text.
    let text: String = out
        .iter()
        .filter(|s| s.kind == "text_delta")
        .map(|s| s.payload["content"].as_str().unwrap())
        .collect();
    let final_chat = &out[33];
    assert_eq!(final_chat.payload["state"], "final");
    assert_eq!(
        final_chat.payload["message"]["content"][0]["text"]
            .as_str()
            .unwrap(),
        text
    );
    assert_eq!(
        text,
        "tool said: \".git/\"\n\"AGENTS.md\"\n\"BOOTSTRAP.md\"\n\"IDENTITY.md\"\n\"SOUL.md\"\n\"USER.md\""
    );
    assert_eq!(
        out[22].meta("extra").unwrap(),
        &json!({"itemId": "2bb2d57f-89c5-4d25-bf49-729d58a029ec:2"})
    );
    assert_eq!(out[23].payload["deltaText"], "tool");

    // The run's end.
    let end = &out[31];
    assert_eq!(
        Value::Object(end.payload.clone()),
        json!({"taskId": RUN, "agentId": "main", "success": true, "result": "stop"})
    );
    assert_eq!(
        end.meta("extra").unwrap()["terminalReceipt"]["successfulToolNames"],
        json!(["ls"])
    );
    assert_eq!(end.timestamp, 1795304762714);

    // Internal upkeep events are marked.
    assert_eq!(out[37].meta("internal").unwrap(), true);
    assert_eq!(out[38].meta("internal").unwrap(), true);
    assert!(out[..37].iter().all(|s| s.meta("internal").is_none()));

    // The run is remembered for an abort.
    let last = stream.decoder().runs().last().unwrap();
    assert_eq!(last.run_id, RUN);
    assert_eq!(last.session_key.as_deref(), Some(SESSION));
}
