//! Golden tests over every Escapement fixture: the exact signal sequence.

mod support;

use patchbay_testkit::decoding::kinds;
use patchbay_testkit::fixture_text;
use patchbay_testkit::validity::assert_all_valid;
use serde_json::{Value, json};
use support::signals;

const PLANNER_SESSION: &str = "session/889d14f8-d7ad-4db2-97a2-014342482237";
const RUNNER_SESSION: &str = ":session/889d14f8-d7ad-4db2-97a2-014342482237";

#[test]
fn haiku_sample_exact_sequence() {
    let text = fixture_text("escapement/haiku-sample.jsonl");
    let out = signals(&text);
    assert_all_valid(&out);

    let mut expected: Vec<&str> = vec![
        "cli/config-loaded",
        "runner/started",
        "agent_state_change",
        "runner/start-config",
        "llm/request",
    ];
    expected.extend(std::iter::repeat_n("text_delta", 28));
    expected.extend([
        "token_usage",
        "completion",
        "llm/worker-exit",
        "runner/event-processed",
        "checkpoint/written",
        "runner/event-processed",
        "checkpoint/written",
        "runner/done",
        "escapement.phase",
        "agent_state_change",
        "agent_state_change",
        "text_delta",
        "text_delta",
        "text_delta",
        "thinking",
        "token_usage",
        "completion",
        "llm/worker-exit",
        "tool_result",
        "error",
        "error",
        "llm/worker-exit",
        "escapement.prompt",
        "human-input/start",
        "escapement.answer",
        "human-input/answer",
        "runner/event-processed",
        "runner/done",
    ]);
    assert_eq!(kinds(&out), expected);

    // Every event frame's seq and ts are carried over; seq 0..=55 in order.
    let seqs: Vec<u64> = out
        .iter()
        .filter_map(|s| s.meta("upstreamSeq").and_then(Value::as_u64))
        .collect();
    let mut want: Vec<u64> = (0..=55).collect();
    // llm/response frames give two signals carrying the same seq.
    want.insert(34, 33);
    want.insert(48, 46);
    assert_eq!(seqs, want);
    assert_eq!(out[0].timestamp, 1780798849139);

    // runner/started keeps the colon-prefixed session id as-is (opaque).
    assert_eq!(out[1].correlation_id.as_deref(), Some(RUNNER_SESSION));
    assert_eq!(out[1].payload["chart-id"], ":escapement.runner/chart");

    // llm/start of the planner.
    assert_eq!(out[2].correlation_id.as_deref(), Some(PLANNER_SESSION));
    assert_eq!(
        Value::Object(out[2].payload.clone()),
        json!({"agentId": "planner", "from": "idle", "to": "thinking"})
    );

    // The 28 deltas rebuild the response text, all correlated to the planner's session.
    let planner_text: String = out[5..33]
        .iter()
        .inspect(|s| {
            assert_eq!(s.payload["agentId"], "planner");
            assert_eq!(s.correlation_id.as_deref(), Some(PLANNER_SESSION));
            assert_eq!(s.meta("extra").unwrap()["model"], "gemma3:1b");
        })
        .map(|s| s.payload["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        planner_text,
        "Line 1: the word START\nLine 2: 2\nLine 3: 1\nLine 4: first snow"
    );

    // llm/response → token_usage + completion.
    assert_eq!(
        Value::Object(out[33].payload.clone()),
        json!({"agentId": "planner", "promptTokens": 224, "completionTokens": 29, "model": "gemma3:1b"})
    );
    assert_eq!(
        Value::Object(out[34].payload.clone()),
        json!({"taskId": PLANNER_SESSION, "agentId": "planner", "success": true, "result": "end_turn"})
    );
    let extra = out[34].meta("extra").unwrap();
    assert_eq!(extra["output-tps"], 68.08);
    assert_eq!(extra["content"][0]["type"], "text");
    assert!(extra.get("usage").is_none(), "usage went into token_usage");

    // Unmapped events keep their data as the payload.
    assert_eq!(out[35].payload["reason"], "interrupted");
    assert_eq!(
        out[36].payload["config-after"],
        json!(["run", "route-planner"])
    );

    // The phase snapshot.
    let phase = &out[41];
    assert_eq!(phase.payload["config"], json!(["run", "route-planner"]));
    assert_eq!(
        phase.payload["siblings"],
        json!(["planning", "route-planner", "aborted"])
    );
    assert_eq!(phase.timestamp, 1780798850000);
    assert!(phase.meta("upstreamSeq").is_none());

    // Two concurrent sessions.
    assert_eq!(
        out[42].correlation_id.as_deref(),
        Some("session/889d14f8-poet1")
    );
    assert_eq!(
        out[43].correlation_id.as_deref(),
        Some("session/889d14f8-poet2")
    );
    assert_eq!(out[46].payload["content"], " falls");
    assert_eq!(
        out[46].meta("extra").unwrap()["usage"],
        json!({"output-tokens": 2})
    );
    assert_eq!(
        Value::Object(out[47].payload.clone()),
        json!({"agentId": "poet2", "content": "weighing imagery"})
    );
    assert_eq!(out[48].payload["promptTokens"], 210);
    assert_eq!(out[49].payload["taskId"], "session/889d14f8-poet1");

    // Tool result and errors.
    assert_eq!(
        Value::Object(out[51].payload.clone()),
        json!({"toolName": "save_haiku", "agentId": "poet1", "success": true,
               "output": {"content-preview": "wrote nodes/poet1/haiku.txt (62 bytes)"}})
    );
    assert_eq!(
        Value::Object(out[52].payload.clone()),
        json!({"agentId": "poet2", "code": "llm/error",
               "message": "connection reset by peer (ollama)", "severity": "error"})
    );
    assert_eq!(out[53].payload["code"], "llm/model-down");
    assert_eq!(out[53].payload["severity"], "warning", "2 models remain");
    assert_eq!(out[53].meta("extra").unwrap()["category"], "network");

    // The prompt/answer round trip stays under escapement.*, never control.*.
    let prompt = &out[55];
    assert_eq!(prompt.payload["prompt-id"], "pick-winner#1");
    assert_eq!(prompt.payload["type"], "select");
    assert_eq!(prompt.payload["opts"]["prompt"], "Which haiku wins?");
    assert!(!prompt.payload.contains_key("kind"));
    let answer = &out[57];
    assert_eq!(
        Value::Object(answer.payload.clone()),
        json!({"prompt-id": "pick-winner#1", "value": "poet1"})
    );
    assert!(out.iter().all(|s| !s.kind.starts_with("control.")));
    assert!(out.iter().all(|s| s.source == "parse:escapement"));
}

#[test]
fn live_streaming_exact_sequence() {
    let text = fixture_text("escapement/live-streaming.jsonl");
    let out = signals(&text);
    assert_all_valid(&out);
    let mut expected = vec!["agent_state_change", "llm/request", "text_delta"];
    for _ in 0..2 {
        expected.extend([
            "agent_state_change",
            "llm/request",
            "text_delta",
            "token_usage",
            "completion",
        ]);
    }
    for _ in 0..5 {
        expected.extend(["agent_state_change", "llm/request", "text_delta"]);
    }
    assert_eq!(kinds(&out), expected);
    // Frames without seq have no metadata.seq and are never dropped.
    assert!(out.iter().all(|s| s.meta("upstreamSeq").is_none()));
    // A delta without `type` is text.
    assert_eq!(out[2].payload["content"], "thinking");
    assert_eq!(out[2].payload["agentId"], "host");
    assert_eq!(out[2].correlation_id.as_deref(), Some("session/host-aaaa"));
    assert_eq!(out[2].timestamp, 1780000000030);
    // The poets multiplex: one invokeid, sessions told apart by correlationId.
    let sessions: Vec<&str> = out
        .iter()
        .filter(|s| s.kind == "agent_state_change")
        .map(|s| s.correlation_id.as_deref().unwrap())
        .collect();
    assert_eq!(
        sessions,
        [
            "session/host-aaaa",
            "session/poet-0",
            "session/poet-1",
            "session/poet-2",
            "session/poet-3",
            "session/poet-4",
            "session/poet-5",
            "session/poet-6"
        ]
    );
    assert_eq!(
        Value::Object(out[7].payload.clone()),
        json!({"taskId": "session/poet-0", "agentId": "poets", "success": true, "result": "end_turn"})
    );
    assert_eq!(
        Value::Object(out[6].payload.clone()),
        json!({"agentId": "poets", "promptTokens": 10, "completionTokens": 5, "model": "gemma3:1b"})
    );
}

#[test]
fn recorded_lines_decode_like_bare_frames_and_skip_outgoing() {
    let text = fixture_text("escapement/haiku-sample.jsonl");
    let mut recorded = String::new();
    for (i, line) in text.lines().enumerate() {
        let frame: Value = serde_json::from_str(line).unwrap();
        // What the UI sent is recorded as `out` and must not be decoded.
        let dir = if frame["kind"] == "answer" {
            "out"
        } else {
            "in"
        };
        recorded.push_str(&json!({"t": 5_000 + i, "dir": dir, "frame": frame}).to_string());
        recorded.push('\n');
    }
    recorded.push_str(r#"{"t": 1, "dir": "close", "frame": {"code": 1000}}"#);
    let bare = signals(&text);
    let wrapped = signals(&recorded);
    let bare_kinds: Vec<&str> = kinds(&bare)
        .into_iter()
        .filter(|k| *k != "escapement.answer")
        .collect();
    assert_eq!(kinds(&wrapped), bare_kinds);
    // The prompt frame has no ts: the recorded t is its time.
    let prompt = wrapped
        .iter()
        .find(|s| s.kind == "escapement.prompt")
        .unwrap();
    assert_eq!(prompt.timestamp, 5_000 + 53, "line 54 of the file");
    // Frames with ts keep their own.
    assert_eq!(wrapped[0].timestamp, 1780798849139);
}
