//! Golden tests over every Codelia fixture: the exact signal sequence.

mod support;

use patchbay_codelia::{CodeliaDecoder, CodeliaStream};
use patchbay_signal::Signal;
use patchbay_signal::decode::StreamDecoder;
use patchbay_testkit::decoding::kinds;
use patchbay_testkit::fixture_text;
use patchbay_testkit::validity::assert_all_valid;
use serde_json::{Value, json};
use support::signals;

const AGENT: &str = "parse:codelia";

fn state(s: &Signal) -> (String, String, Option<String>) {
    (
        s.payload["from"].as_str().unwrap().to_owned(),
        s.payload["to"].as_str().unwrap().to_owned(),
        s.payload
            .get("reason")
            .and_then(Value::as_str)
            .map(str::to_owned),
    )
}

fn st(from: &str, to: &str, reason: Option<&str>) -> (String, String, Option<String>) {
    (from.into(), to.into(), reason.map(str::to_owned))
}

#[test]
fn initialize_session_model() {
    let out = signals(&fixture_text(
        "codelia/codelia-initialize-session-model.ndjson",
    ));
    assert_all_valid(&out);
    // Only the runtime's three responses: out, stderr, note and exit lines are skipped.
    assert_eq!(kinds(&out), ["codelia.response"; 3]);
    assert_eq!(out[0].payload["id"], "1");
    assert_eq!(
        out[0].payload["result"]["server"]["name"],
        "codelia-runtime"
    );
    assert_eq!(
        out[0].payload["result"]["server_capabilities"]["supports_run_cancel"],
        true
    );
    assert_eq!(out[1].payload["result"]["sessions"], json!([]));
    assert_eq!(out[2].payload["result"]["current"], "gpt-5.6");
    assert!(out.iter().all(|s| s.correlation_id.is_none()));
    // The recorded t is the time.
    assert_eq!(out[0].timestamp, 1795305457098);
    assert_eq!(out[2].timestamp, 1795305457138);
}

#[test]
fn run_mock_cancel() {
    let text = fixture_text("codelia/codelia-run-mock-cancel.ndjson");
    let mut stream = CodeliaStream::new(CodeliaDecoder::new(AGENT));
    let mut decoded = Vec::new();
    stream.feed(text.as_bytes(), &mut decoded);
    stream.finish(&mut decoded);
    let out: Vec<Signal> = decoded.into_iter().map(|d| d.into_signal()).collect();
    assert_all_valid(&out);
    assert_eq!(
        kinds(&out),
        [
            "codelia.response",
            "codelia.response",
            "agent_state_change",
            "codelia.response",
            "agent_state_change",
            "codelia.response",
        ]
    );
    let run = "c3374cef-7952-43d7-afb7-77fbf37096c1";
    assert_eq!(out[1].payload["result"]["run_id"], run);
    assert_eq!(out[1].correlation_id.as_deref(), Some(run));
    assert_eq!(state(&out[2]), st("idle", "acting", None));
    assert_eq!(out[2].correlation_id.as_deref(), Some(run));
    assert_eq!(out[2].payload["agentId"], AGENT);
    assert_eq!(out[3].payload["result"], json!({"ok": true}));
    assert_eq!(state(&out[4]), st("acting", "idle", Some("cancelled")));
    assert_eq!(out[4].meta("message").unwrap(), "Operation aborted");
    assert_eq!(out[4].timestamp, 1795305601493);
    assert_eq!(
        out[5].payload["error"],
        json!({"code": -32002, "message": "run not found"})
    );
    // The run is over: nothing left to cancel.
    assert_eq!(stream.decoder().current_run(), None);
}

#[test]
fn run_mock_toolcalls() {
    let text = fixture_text("codelia/codelia-run-mock-toolcalls.ndjson");
    let mut stream = CodeliaStream::new(CodeliaDecoder::new(AGENT));
    let mut decoded = Vec::new();
    stream.feed(text.as_bytes(), &mut decoded);
    stream.finish(&mut decoded);
    let out: Vec<Signal> = decoded.into_iter().map(|d| d.into_signal()).collect();
    assert_all_valid(&out);
    assert_eq!(
        kinds(&out),
        [
            "codelia.response",
            // run 1: read README.md
            "codelia.response",
            "agent_state_change",
            "agent_state_change",
            "codelia.run.context",
            "tool_call",
            "tool_result",
            "agent_state_change",
            "completion",
            "agent_state_change",
            // run 2: a shell command that needs a confirmation
            "codelia.response",
            "agent_state_change",
            "agent_state_change",
            "codelia.run.context",
            "tool_call",
            "codelia.permission.ready",
            "agent_state_change",
            "codelia.request",
            "agent_state_change",
            "tool_result",
            "agent_state_change",
            "completion",
            "agent_state_change",
        ]
    );
    let run1 = "f3c3700e-1df4-4a24-87fb-4c1a40f598fa";
    let run2 = "24a11f48-d351-4388-b892-3275a5920439";
    for s in &out[1..10] {
        assert_eq!(s.correlation_id.as_deref(), Some(run1), "{s:?}");
    }
    for s in &out[10..] {
        assert_eq!(s.correlation_id.as_deref(), Some(run2), "{s:?}");
    }
    assert_eq!(state(&out[2]), st("idle", "acting", None));
    assert_eq!(state(&out[3]), st("thinking", "acting", Some("read")));
    assert_eq!(
        out[3].meta("extra").unwrap(),
        &json!({"step_id": "call_a3bacc0e", "step_number": 1})
    );
    assert_eq!(out[3].meta("seq").unwrap(), 0);
    assert_eq!(out[4].payload["context_left_percent"], 100);
    assert_eq!(
        Value::Object(out[5].payload.clone()),
        json!({"toolName": "read", "agentId": AGENT, "callId": "call_a3bacc0e",
               "input": {"file_path": "README.md"}})
    );
    assert_eq!(
        out[5].meta("extra").unwrap()["raw_args"],
        r#"{"file_path":"README.md"}"#
    );
    assert_eq!(out[6].payload["toolName"], "read");
    assert_eq!(out[6].payload["callId"], "call_a3bacc0e");
    assert_eq!(out[6].payload["success"], true);
    assert!(
        out[6].payload["output"]["result"]
            .as_str()
            .unwrap()
            .starts_with("    1  # probe workspace")
    );
    assert_eq!(state(&out[7]), st("acting", "thinking", Some("completed")));
    assert_eq!(out[7].meta("extra").unwrap()["duration_ms"], 23);
    assert_eq!(out[8].payload["taskId"], run1);
    assert_eq!(out[8].payload["success"], true);
    assert!(
        out[8].payload["result"]
            .as_str()
            .unwrap()
            .starts_with("tool said:")
    );
    assert_eq!(out[8].meta("seq").unwrap(), 4);
    assert_eq!(state(&out[9]), st("thinking", "done", None));

    assert_eq!(state(&out[11]), st("idle", "acting", None));
    assert_eq!(out[15].payload["tool"], "shell");
    assert_eq!(
        state(&out[16]),
        st("acting", "waiting", Some("waiting for confirmation"))
    );
    let request = &out[17];
    assert_eq!(request.payload["method"], "ui.confirm.request");
    assert_eq!(request.payload["promptId"], "ui_1");
    assert_eq!(request.payload["params"]["title"], "Run command?");
    assert_eq!(state(&out[18]), st("waiting", "acting", None));
    assert!(
        out[19].payload["output"]["result"]
            .as_str()
            .unwrap()
            .contains("hi-from-shell")
    );
    assert_eq!(state(&out[20]), st("acting", "thinking", Some("completed")));
    assert_eq!(out[21].payload["taskId"], run2);
    assert_eq!(state(&out[22]), st("thinking", "done", None));
    // The parse decoder saw the UI's answer only as an `out` line: still pending for it.
    assert_eq!(stream.decoder().pending_requests().count(), 1);
    assert_eq!(stream.decoder().current_run(), None);
}

#[test]
fn tui_test_wire_messages() {
    let text = fixture_text("codelia/tui-test-wire-messages.ndjson");
    let mut stream = CodeliaStream::new(CodeliaDecoder::new(AGENT));
    let mut decoded = Vec::new();
    stream.feed(text.as_bytes(), &mut decoded);
    stream.finish(&mut decoded);
    assert!(decoded.iter().all(|d| !d.is_bad()));
    let out: Vec<Signal> = decoded.into_iter().map(|d| d.into_signal()).collect();
    assert_all_valid(&out);
    let mut expected = vec![
        "error",
        "agent_state_change",
        "codelia.run.diagnostics",
        "codelia.run.diagnostics",
        "codelia.compaction_start",
        "codelia.compaction_complete",
        "codelia.compaction_complete",
    ];
    expected.extend(["tool_call"; 8]);
    expected.extend(["tool_result"; 8]);
    expected.extend(["tool_call"; 3]);
    expected.extend(["tool_result"; 12]);
    expected.extend([
        "codelia.request",
        "codelia.request",
        "tool_result",
        "tool_result",
        "tool_result",
        "codelia.client.tool.cancel",
        "codelia.request",
        "codelia.client.tool.cancel",
    ]);
    assert_eq!(kinds(&out), expected);

    // run.status error without a run id: an error and a state change to error.
    assert_eq!(out[0].payload["code"], "run_error");
    assert_eq!(out[0].payload["severity"], "error");
    assert!(
        out[0].payload["message"]
            .as_str()
            .unwrap()
            .contains("credit too low")
    );
    assert_eq!(state(&out[1]).1, "error");
    assert_eq!(out[1].correlation_id, None);
    // Diagnostics pass through, correlated by their run id.
    assert_eq!(out[2].payload["kind"], "llm_call");
    assert_eq!(out[2].payload["call"]["usage"]["input_tokens"], 100);
    assert_eq!(out[2].correlation_id.as_deref(), Some("run-1"));
    assert_eq!(out[3].payload["summary"]["total_calls"], 3);
    // Event timestamps are used as they are.
    assert_eq!(out[4].timestamp, 123);
    assert_eq!(
        Value::Object(out[5].payload.clone()),
        json!({"compacted": true})
    );
    assert_eq!(out[6].timestamp, 125);
    // Tool calls and results: ids, inputs, outputs (objects as they are, strings wrapped).
    assert_eq!(out[7].payload["toolName"], "lane_create");
    assert_eq!(out[7].payload["callId"], "tool-1");
    assert_eq!(out[7].payload["input"]["mux_backend"], "tmux");
    assert_eq!(out[11].payload["input"], json!({}));
    assert_eq!(
        out[15].payload["output"],
        json!({"result": "WebSearch status=completed | queries=latest ai news | openai | sources=9"})
    );
    assert_eq!(out[16].payload["output"]["status"], 200);
    assert_eq!(out[17].payload["output"]["lane"]["state"], "running");
    assert!(
        out.iter()
            .filter(|s| s.kind == "tool_result")
            .all(|s| s.payload["success"] == true)
    );
    // Requests carry their id as promptId; the cancel drops the pending request.
    let requests: Vec<&Signal> = out.iter().filter(|s| s.kind == "codelia.request").collect();
    assert_eq!(requests[0].payload["method"], "tool.call");
    assert_eq!(requests[0].payload["promptId"], "id-1");
    assert_eq!(requests[1].payload["method"], "client.tool.call");
    assert_eq!(requests[1].payload["promptId"], "ui_choice_1");
    assert_eq!(requests[1].correlation_id.as_deref(), Some("run-1"));
    let pending: Vec<&str> = stream
        .decoder()
        .pending_requests()
        .map(|p| p.id.as_str().unwrap())
        .collect();
    assert_eq!(pending, ["id-1", "ui_choice_active"]);
}
