//! Hand-written cases for every decoding rule, including those the fixtures don't show.

mod support;

use patchbay_codelia::CodeliaDecoder;
use patchbay_signal::Signal;
use patchbay_signal::decode::FrameDecoder as _;
use patchbay_signal::normalize::Decoded;
use patchbay_testkit::decoding::{good_signals, kinds};
use patchbay_testkit::validity::assert_all_valid;
use serde_json::{Value, json};

fn decode(d: &mut CodeliaDecoder, msg: Value) -> Vec<Signal> {
    let mut out = Vec::new();
    d.decode_message(msg, Some(5), &mut out);
    let out = good_signals(out);
    assert_all_valid(&out);
    out
}

fn event(run: Option<&str>, event: Value) -> Value {
    let mut params = json!({"seq": 3, "event": event});
    if let Some(run) = run {
        params["run_id"] = json!(run);
    }
    json!({"jsonrpc": "2.0", "method": "agent.event", "params": params})
}

fn status(run: &str, status: &str, message: Option<&str>) -> Value {
    let mut params = json!({"run_id": run, "status": status});
    if let Some(m) = message {
        params["message"] = json!(m);
    }
    json!({"jsonrpc": "2.0", "method": "run.status", "params": params})
}

fn dec() -> CodeliaDecoder {
    CodeliaDecoder::new("codelia:test").with_agent_id("coder")
}

#[test]
fn text_and_reasoning() {
    let mut d = dec();
    let out = decode(
        &mut d,
        event(
            Some("r"),
            json!({"type": "text", "content": "Hel", "timestamp": 1730000000000_i64}),
        ),
    );
    assert_eq!(kinds(&out), ["text_delta"]);
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"agentId": "coder", "content": "Hel"})
    );
    assert_eq!(out[0].timestamp, 1730000000000);
    assert_eq!(out[0].correlation_id.as_deref(), Some("r"));
    assert_eq!(out[0].meta("seq").unwrap(), 3);
    assert_eq!(
        d.current_run(),
        Some("r"),
        "an event names the run in progress"
    );

    let out = decode(
        &mut d,
        event(None, json!({"type": "reasoning", "content": "..."})),
    );
    assert_eq!(kinds(&out), ["thinking"]);
    assert_eq!(
        out[0].timestamp, 5,
        "the recorded time when the event has none"
    );
    assert_eq!(
        out[0].correlation_id.as_deref(),
        Some("r"),
        "the current run"
    );

    // A text without string content is kept, not guessed.
    let out = decode(&mut d, event(None, json!({"type": "text", "content": 3})));
    assert_eq!(kinds(&out), ["codelia.text"]);
    assert_eq!(out[0].payload["content"], 3);
}

#[test]
fn final_completion() {
    let mut d = dec();
    let out = decode(
        &mut d,
        event(
            None,
            json!({"type": "final", "content": "done", "termination_reason": "max_steps"}),
        ),
    );
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"taskId": "unknown-run", "agentId": "coder", "success": true, "result": "done"})
    );
    assert_eq!(
        out[0].meta("extra").unwrap(),
        &json!({"termination_reason": "max_steps"})
    );
    let out = decode(&mut d, event(Some("r9"), json!({"type": "final"})));
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"taskId": "r9", "agentId": "coder", "success": true})
    );
}

#[test]
fn tools() {
    let mut d = dec();
    let out = decode(
        &mut d,
        event(
            Some("r"),
            json!({"type": "tool_call", "tool": "t", "tool_call_id": "c", "args": "raw", "display_name": "T"}),
        ),
    );
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"toolName": "t", "agentId": "coder", "callId": "c"})
    );
    assert_eq!(
        out[0].meta("extra").unwrap(),
        &json!({"args": "raw", "display_name": "T"})
    );
    let out = decode(
        &mut d,
        event(
            Some("r"),
            json!({"type": "tool_result", "tool": "t", "tool_call_id": "c", "is_error": true, "result": "boom", "screenshot_base64": null}),
        ),
    );
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"toolName": "t", "agentId": "coder", "callId": "c", "success": false, "output": {"result": "boom"}})
    );
    assert_eq!(
        out[0].meta("extra").unwrap(),
        &json!({"screenshot_base64": null})
    );
    let out = decode(
        &mut d,
        event(
            Some("r"),
            json!({"type": "tool_result", "tool": "t", "is_error": "yes"}),
        ),
    );
    assert_eq!(kinds(&out), ["codelia.tool_result"]);
    let out = decode(
        &mut d,
        event(Some("r"), json!({"type": "tool_call", "args": {}})),
    );
    assert_eq!(kinds(&out), ["codelia.tool_call"], "no tool name");
}

#[test]
fn retries_are_warnings() {
    let mut d = dec();
    let out = decode(
        &mut d,
        event(
            Some("r"),
            json!({"type": "llm.retry", "provider": "openai", "failure_kind": "rate_limit",
        "next_attempt": 2, "max_attempts": 5, "delay_ms": 1500, "delay_source": "retry-after", "status": 429}),
        ),
    );
    assert_eq!(kinds(&out), ["error"]);
    assert_eq!(out[0].payload["severity"], "warning");
    assert_eq!(out[0].payload["code"], "llm.retry");
    assert_eq!(
        out[0].payload["message"],
        "openai rate_limit: retry 2/5 in 1500 ms"
    );
    assert_eq!(out[0].meta("extra").unwrap()["status"], 429);
}

#[test]
fn run_status_follows_the_run() {
    let mut d = dec();
    let states = |out: &[Signal]| -> Vec<(String, String)> {
        out.iter()
            .filter(|s| s.kind == "agent_state_change")
            .map(|s| {
                (
                    s.payload["from"].as_str().unwrap().into(),
                    s.payload["to"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    let mut all = Vec::new();
    all.extend(decode(&mut d, status("r", "running", None)));
    all.extend(decode(
        &mut d,
        event(
            Some("r"),
            json!({"type": "step_start", "step_id": "s", "title": "shell", "step_number": 1}),
        ),
    ));
    all.extend(decode(&mut d, status("r", "awaiting_ui", Some("waiting"))));
    all.extend(decode(&mut d, status("r", "running", None)));
    all.extend(decode(
        &mut d,
        event(
            Some("r"),
            json!({"type": "step_complete", "step_id": "s", "status": "error", "duration_ms": 3}),
        ),
    ));
    all.extend(decode(&mut d, status("r", "completed", None)));
    let pairs: Vec<(&str, &str)> = vec![
        ("idle", "acting"),
        ("thinking", "acting"),
        ("acting", "waiting"),
        ("waiting", "acting"),
        ("acting", "thinking"),
        ("thinking", "done"),
    ];
    let got = states(&all);
    let got: Vec<(&str, &str)> = got.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(got, pairs);
    assert_eq!(all[2].payload["reason"], "waiting");
    assert_eq!(all[4].payload["reason"], "error");
    assert_eq!(d.current_run(), None);

    // error: an error signal then the state change, both correlated.
    let out = decode(&mut d, status("e", "error", Some("boom")));
    assert_eq!(kinds(&out), ["error", "agent_state_change"]);
    assert_eq!(out[0].payload["message"], "boom");
    assert_eq!(out[0].correlation_id.as_deref(), Some("e"));
    assert_eq!(out[1].payload["to"], "error");
    let out = decode(&mut d, status("e2", "error", None));
    assert_eq!(out[0].payload["message"], "run failed");

    // cancelled: back to idle, reason cancelled, the message kept.
    decode(&mut d, status("c", "running", None));
    assert_eq!(d.current_run(), Some("c"));
    let out = decode(&mut d, status("c", "cancelled", Some("Operation aborted")));
    assert_eq!(out[0].payload["from"], "acting");
    assert_eq!(out[0].payload["to"], "idle");
    assert_eq!(out[0].payload["reason"], "cancelled");
    assert_eq!(out[0].meta("message").unwrap(), "Operation aborted");
    assert_eq!(d.current_run(), None);
    // A late event of the cancelled run does not make it current again.
    decode(
        &mut d,
        event(Some("c"), json!({"type": "text", "content": "late"})),
    );
    assert_eq!(d.current_run(), None);

    // An unknown status passes through.
    let out = decode(&mut d, status("x", "paused", None));
    assert_eq!(kinds(&out), ["codelia.run.status"]);
    assert_eq!(out[0].payload["status"], "paused");
}

#[test]
fn many_runs_stay_bounded() {
    let mut d = dec();
    for i in 0..500 {
        let run = format!("r{i}");
        decode(&mut d, status(&run, "running", None));
        if i % 2 == 0 {
            decode(&mut d, status(&run, "completed", None));
        }
    }
    assert_eq!(d.current_run(), Some("r499"));
}

#[test]
fn other_messages() {
    let mut d = dec();
    // Unknown notification: its method under codelia., params as payload.
    let out = decode(
        &mut d,
        json!({"jsonrpc": "2.0", "method": "todos.update", "params": {"run_id": "r", "n": 1}}),
    );
    assert_eq!(kinds(&out), ["codelia.todos.update"]);
    assert_eq!(out[0].correlation_id.as_deref(), Some("r"));
    let out = decode(
        &mut d,
        json!({"jsonrpc": "2.0", "method": "ping", "params": [1]}),
    );
    assert_eq!(Value::Object(out[0].payload.clone()), json!({"value": [1]}));
    let out = decode(&mut d, json!({"jsonrpc": "2.0", "method": "ping"}));
    assert!(out[0].payload.is_empty());
    // agent.event without a readable event.
    let out = decode(
        &mut d,
        json!({"jsonrpc": "2.0", "method": "agent.event", "params": {"run_id": "r", "event": "?"}}),
    );
    assert_eq!(kinds(&out), ["codelia.agent.event"]);
    assert_eq!(out[0].payload["event"], "?");
    // Envelope extras of agent.event go to metadata.
    let out = decode(
        &mut d,
        json!({"jsonrpc": "2.0", "method": "agent.event",
        "params": {"run_id": "r", "seq": 1, "meta": {"k": 1}, "event": {"type": "hidden_user_message", "content": "x"}}}),
    );
    assert_eq!(kinds(&out), ["codelia.hidden_user_message"]);
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"content": "x"})
    );
    assert_eq!(out[0].meta("meta").unwrap(), &json!({"k": 1}));
    // A numeric request id: promptId is its string, the number kept.
    let out = decode(
        &mut d,
        json!({"jsonrpc": "2.0", "id": 7, "method": "ui.prompt.request", "params": {"title": "t", "message": "m"}}),
    );
    assert_eq!(out[0].payload["promptId"], "7");
    assert_eq!(out[0].meta("rpcId").unwrap(), 7);
    assert_eq!(d.pending_request("7").unwrap().method, "ui.prompt.request");
    // A response with an error.
    let out = decode(
        &mut d,
        json!({"jsonrpc": "2.0", "id": "4", "error": {"code": -32001, "message": "busy"}}),
    );
    assert_eq!(
        Value::Object(out[0].payload.clone()),
        json!({"id": "4", "error": {"code": -32001, "message": "busy"}})
    );
}

#[test]
fn bad_messages_are_reported_at_the_last_good_time() {
    let mut d = dec();
    let mut out = Vec::new();
    d.decode_text("not json", &mut out);
    d.decode_text("[1]", &mut out);
    d.decode_message(
        json!({"jsonrpc": "2.0", "method": "x", "params": {}}),
        Some(99),
        &mut out,
    );
    d.decode_message(json!({"jsonrpc": "2.0"}), None, &mut out);
    d.decode_message(json!({"jsonrpc": "2.0", "id": "1"}), None, &mut out);
    d.decode_message(json!({"jsonrpc": "2.0", "method": 5}), None, &mut out);
    d.decode_text("  ", &mut out);
    let bad: Vec<bool> = out.iter().map(Decoded::is_bad).collect();
    assert_eq!(bad, [true, true, false, true, true, true]);
    let times: Vec<i64> = out
        .iter()
        .map(|d| d.clone().into_signal().timestamp)
        .collect();
    assert_eq!(times, [0, 0, 99, 99, 99, 99]);
    for d in out {
        let s = d.into_signal();
        patchbay_testkit::assert_schema_valid(&s.to_value());
    }
}
