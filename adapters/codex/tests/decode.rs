//! The Codex decoder on the real captures (`tests/fixtures/`, see its README), on
//! synthetic messages for what the captures do not show, and on malformed input.

use patchbay_codex::{CodexDecoder, parse_decoder};
use patchbay_signal::Signal;
use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_testkit::decoding::{decode_whole, good_signals, kinds};
use patchbay_testkit::prng::Rng;
use patchbay_testkit::properties::{
    assert_chunking_keeps_comparable, assert_mutated_text_gives_schema_valid_signals,
    assert_random_input_gives_schema_valid_signals,
};
use patchbay_testkit::validity::{assert_all_decoded_valid, assert_all_valid};
use serde_json::{Value, json};

const SOURCE: &str = "parse:codex";
const THREAD_A: &str = "01a220dc-4668-75d3-a4b5-c6f8431a591f";
const TURN_A: &str = "01a220dc-4689-7972-837b-9954ee50474b";
const THREAD_B: &str = "01a220dc-4a35-7012-8a24-14e08574fbfa";
const TURN_B: &str = "01a220dc-4a51-7f33-b075-8f5a1153c20a";
const EXEC_THREAD: &str = "01a220dc-3c76-72e3-9e4a-78235af470c7";

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn decoder() -> Box<dyn StreamDecoder> {
    parse_decoder(SOURCE)
}

/// The signals of `text`, asserting all are valid and none reports bad input.
fn signals(text: &str) -> Vec<Signal> {
    let decoded = decode_whole(decoder().as_mut(), text);
    assert_all_decoded_valid(&decoded);
    good_signals(decoded)
}

/// Every decoded item of `text` (bad input included), all checked valid.
fn decoded(text: &str) -> Vec<Decoded> {
    let decoded = decode_whole(decoder().as_mut(), text);
    assert_all_decoded_valid(&decoded);
    decoded
}

fn of_turn<'a>(out: &'a [Signal], turn: &str) -> Vec<&'a Signal> {
    out.iter()
        .filter(|s| s.correlation_id.as_deref() == Some(turn))
        .collect()
}

fn first<'a>(out: &[&'a Signal], kind: &str) -> &'a Signal {
    out.iter()
        .find(|s| s.kind == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn states(out: &[&Signal]) -> Vec<(String, String)> {
    out.iter()
        .filter(|s| s.kind == "agent_state_change")
        .map(|s| {
            (
                s.payload["from"].as_str().unwrap().to_owned(),
                s.payload["to"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn every_line_of_both_captures_decodes_to_valid_signals() {
    for name in ["codex-app-server.jsonl", "codex-exec.jsonl"] {
        let text = fixture(name);
        let out = signals(&text);
        assert!(!out.is_empty(), "{name}");
        assert!(out.iter().all(|s| s.source == SOURCE), "{name}");
        // Line by line through a fresh decoder too: nothing needs the lines before it to
        // stay valid.
        for line in text.lines() {
            decoded(line);
        }
    }
}

#[test]
fn splitting_the_captures_does_not_change_the_signals() {
    let mut rng = Rng(0xc0de_c0de);
    for name in ["codex-app-server.jsonl", "codex-exec.jsonl"] {
        assert_chunking_keeps_comparable(decoder, &fixture(name), name, &mut rng);
    }
}

#[test]
fn app_server_first_thread_accepts_and_runs_the_command() {
    let out = signals(&fixture("codex-app-server.jsonl"));
    let turn = of_turn(&out, TURN_A);
    assert_eq!(
        turn.iter().map(|s| s.kind.as_str()).collect::<Vec<_>>(),
        [
            "agent_state_change",
            "task_dispatch",
            "codex.item/completed",
            "agent_state_change",
            "tool_call",
            "approval.requested",
            "approval.decided",
            "agent_state_change",
            "tool_result",
            "token_usage",
            "codex.account/rateLimits/updated",
            "codex.item/started",
            "text_delta",
            "text_delta",
            "text_delta",
            "text_delta",
            "codex.item/completed",
            "token_usage",
            "codex.account/rateLimits/updated",
            "codex.thread/status/changed",
            "completion",
            "agent_state_change",
        ]
    );
    // Every well-known signal of the turn is the first thread's.
    for s in &turn {
        if let Some(agent) = s.payload.get("agentId") {
            assert_eq!(agent, THREAD_A, "{s:?}");
        }
    }

    let dispatch = first(&turn, "task_dispatch");
    assert_eq!(dispatch.payload["taskId"], TURN_A);
    assert_eq!(dispatch.payload["to"], THREAD_A);
    assert_eq!(
        dispatch.payload["description"],
        "Create out.txt containing hi using the shell."
    );

    let call = first(&turn, "tool_call");
    assert_eq!(call.payload["toolName"], "commandExecution");
    assert_eq!(call.payload["callId"], "call_1");
    assert_eq!(
        call.payload["input"]["command"],
        "/bin/bash -lc 'echo hi > out.txt'"
    );
    assert_eq!(
        call.payload["input"]["cwd"],
        "/home/dev/home/dev/work/codex/work"
    );
    assert_eq!(call.timestamp, 1795847636838, "emittedAtMs is the time");

    let asked = first(&turn, "approval.requested");
    // The thread and the request id: unique across every Codex a graph runs.
    assert_eq!(asked.payload["promptId"], format!("{THREAD_A}:0"));
    assert_eq!(asked.payload["agentId"], THREAD_A);
    assert_eq!(asked.payload["toolName"], "commandExecution");
    assert_eq!(asked.payload["input"], call.payload["input"]);
    assert_eq!(
        asked.payload["choices"],
        json!(["accept", "acceptWithExecpolicyAmendment", "cancel"])
    );
    let details = asked.meta("codex").unwrap();
    assert_eq!(details["itemId"], "call_1");
    assert_eq!(details["availableDecisions"][0], "accept");

    let decided = first(&turn, "approval.decided");
    assert_eq!(
        Value::from(decided.payload.clone()),
        json!({"promptId": format!("{THREAD_A}:0"), "value": "allow", "by": "client"})
    );
    assert_eq!(decided.meta("decision").unwrap(), "accept");

    let result = first(&turn, "tool_result");
    assert_eq!(result.payload["callId"], "call_1");
    assert_eq!(result.payload["success"], true);
    assert_eq!(result.payload["output"]["exitCode"], 0);
    assert_eq!(result.payload["output"]["status"], "completed");
    assert!(result.payload["output"].get("declined").is_none());

    let text: String = turn
        .iter()
        .filter(|s| s.kind == "text_delta")
        .map(|s| s.payload["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Done. I wrote hi to out.txt.");

    // `last` per update: the two add up to the thread's total, nothing counted twice.
    let usage: Vec<(u64, u64)> = turn
        .iter()
        .filter(|s| s.kind == "token_usage")
        .map(|s| {
            assert_eq!(s.payload["model"], "fake-model");
            (
                s.payload["promptTokens"].as_u64().unwrap(),
                s.payload["completionTokens"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(usage, [(120, 17), (240, 17)]);
    let prompt: u64 = usage.iter().map(|u| u.0).sum();
    let completion: u64 = usage.iter().map(|u| u.1).sum();
    assert_eq!((prompt, completion), (360, 34));

    let done = first(&turn, "completion");
    assert_eq!(done.payload["taskId"], TURN_A);
    assert_eq!(done.payload["success"], true);
    assert_eq!(done.payload["result"], "Done. I wrote hi to out.txt.");

    let st = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(
        states(&turn),
        [
            st("idle", "thinking"),
            st("thinking", "waiting"),
            st("waiting", "thinking"),
            st("thinking", "idle"),
        ]
    );
}

#[test]
fn app_server_second_thread_declines_and_goes_on() {
    let out = signals(&fixture("codex-app-server.jsonl"));
    let turn = of_turn(&out, TURN_B);
    let asked = first(&turn, "approval.requested");
    assert_eq!(asked.payload["promptId"], format!("{THREAD_B}:1"));
    assert_eq!(asked.payload["agentId"], THREAD_B);

    let decided = first(&turn, "approval.decided");
    assert_eq!(decided.payload["promptId"], format!("{THREAD_B}:1"));
    assert_eq!(decided.payload["value"], "deny");
    assert_eq!(decided.meta("decision").unwrap(), "decline");

    let result = first(&turn, "tool_result");
    assert_eq!(result.payload["agentId"], THREAD_B);
    assert_eq!(result.payload["success"], false);
    assert_eq!(result.payload["output"]["declined"], true);
    assert_eq!(result.payload["output"]["status"], "declined");
    assert!(result.payload["output"].get("exitCode").is_none());

    // The turn goes on: the answer, then the turn completes.
    let text: String = turn
        .iter()
        .filter(|s| s.kind == "text_delta")
        .map(|s| s.payload["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Done. I wrote hi to out.txt.");
    assert_eq!(first(&turn, "completion").payload["success"], true);
    let last = turn.last().unwrap();
    assert_eq!(last.kind, "agent_state_change");
    assert_eq!(last.payload["to"], "idle");
}

#[test]
fn app_server_without_the_client_lines_reports_resolution_as_is() {
    // What a transport sees: only the server's messages.
    let text: String = fixture("codex-app-server.jsonl")
        .lines()
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["dir"] == "server->client").then(|| format!("{}\n", v["msg"]))
        })
        .collect();
    let out = signals(&text);
    assert!(!kinds(&out).contains(&"approval.decided"));
    let resolved: Vec<&Signal> = out
        .iter()
        .filter(|s| s.kind == "codex.serverRequest/resolved")
        .collect();
    assert_eq!(resolved.len(), 2);
    assert_eq!(resolved[0].payload["requestId"], 0);
    assert_eq!(
        resolved[0].meta("promptId").unwrap(),
        &json!(format!("{THREAD_A}:0"))
    );
    assert_eq!(
        kinds(&out)
            .iter()
            .filter(|k| **k == "approval.requested")
            .count(),
        2
    );
}

#[test]
fn pending_approvals_are_kept_until_resolved_or_taken() {
    let text = fixture("codex-app-server.jsonl");
    let mut decoder = CodexDecoder::new(SOURCE);
    let mut out = Vec::new();
    let mut seen_pending = false;
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        decoder.decode_value(&v, &mut out);
        let is_request = v["msg"]["method"] == "item/commandExecution/requestApproval";
        if is_request && v["msg"]["id"] == 0 {
            let pending: Vec<_> = decoder.pending().collect();
            assert_eq!(pending.len(), 1);
            let p = pending[0];
            assert_eq!(p.id, json!(0));
            assert_eq!(p.prompt_id, format!("{THREAD_A}:0"));
            assert_eq!(p.method, "item/commandExecution/requestApproval");
            assert_eq!(p.thread_id.as_deref(), Some(THREAD_A));
            assert_eq!(p.turn_id.as_deref(), Some(TURN_A));
            assert_eq!(p.item_id.as_deref(), Some("call_1"));
            assert_eq!(p.decision, None);
            let board = p.approval.as_ref().unwrap();
            assert_eq!(
                (board.program.as_str(), board.component.as_str()),
                ("codex", SOURCE)
            );
            assert_eq!(board.agent_id, THREAD_A);
            assert_eq!(board.tool_name, "commandExecution");
            assert_eq!(board.input["cwd"], "/home/dev/home/dev/work/codex/work");
            // The request has no `emittedAtMs`: the transcript's clock times it (t 0.662,
            // as the `item/started` at 1795847636838 before it).
            assert_eq!(board.requested_at_ms, 1795847636838);
            seen_pending = true;
        }
        if v["dir"] == "client->server" && v["msg"]["id"] == 0 && v["msg"].get("result").is_some() {
            let p = decoder.pending().next().unwrap();
            assert_eq!(p.decision.as_deref(), Some("accept"));
        }
    }
    assert!(seen_pending);
    assert_eq!(
        decoder.pending().count(),
        0,
        "resolved requests are forgotten"
    );
    assert_eq!(decoder.current_thread(), Some(THREAD_B));
    assert_eq!(decoder.current_turn(THREAD_B), None, "the turn ended");

    // A transport takes the request to answer it.
    let mut decoder = CodexDecoder::new(SOURCE);
    let request = json!({"id": 9, "method": "item/fileChange/requestApproval",
        "params": {"threadId": "t", "turnId": "u", "itemId": "p1"}});
    decoder.message(&request, &mut out);
    let taken = decoder.take_pending("t:9").unwrap();
    assert_eq!(taken.method, "item/fileChange/requestApproval");
    assert_eq!(
        taken.choices,
        ["accept", "acceptForSession", "decline", "cancel"]
    );
    assert!(decoder.take_pending("t:9").is_none());
}

#[test]
fn decisions_map_to_the_common_words() {
    for (decision, value) in [
        (json!("accept"), "allow"),
        (json!("acceptForSession"), "always"),
        (
            json!({"acceptWithExecpolicyAmendment": {"execpolicy_amendment": ["ls"]}}),
            "always",
        ),
        (json!("decline"), "deny"),
        (json!("cancel"), "cancel"),
        (json!("somethingNew"), "somethingNew"),
    ] {
        let lines = [
            json!({"dir": "server->client", "t": 0, "msg": {"id": "r1", "method": "item/commandExecution/requestApproval",
                "params": {"threadId": "t", "turnId": "u", "itemId": "c", "command": "ls", "cwd": "/"}}}),
            json!({"dir": "client->server", "t": 0, "msg": {"id": "r1", "result": {"decision": decision}}}),
            json!({"dir": "server->client", "t": 0, "msg": {"method": "serverRequest/resolved", "params": {"threadId": "t", "requestId": "r1"}}}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let out = signals(&text);
        assert_eq!(
            kinds(&out),
            [
                "agent_state_change",
                "approval.requested",
                "approval.decided"
            ]
        );
        assert_eq!(out[1].payload["promptId"], "t:r1");
        assert!(
            out[1].meta("rpcId").is_none(),
            "a string id is not repeated as rpcId"
        );
        assert_eq!(out[2].payload["value"], value, "{decision}");
        assert_eq!(out[2].payload["by"], "client");
    }
}

#[test]
fn exec_capture() {
    let out = signals(&fixture("codex-exec.jsonl"));
    assert_eq!(
        kinds(&out),
        [
            "codex.thread.started",
            "error",
            "agent_state_change",
            "tool_call",
            "tool_result",
            "text_delta",
            "token_usage",
            "completion",
            "agent_state_change",
        ]
    );
    for s in &out[1..] {
        assert_eq!(s.payload["agentId"], EXEC_THREAD, "{s:?}");
    }
    assert_eq!(out[0].payload["thread_id"], EXEC_THREAD);
    assert_eq!(out[1].payload["severity"], "warning");
    assert!(
        out[1].payload["message"]
            .as_str()
            .unwrap()
            .starts_with("Model metadata for `fake-model` not found")
    );
    assert_eq!(out[3].payload["toolName"], "commandExecution");
    assert_eq!(out[3].payload["callId"], "item_1");
    assert_eq!(
        out[3].payload["input"],
        json!({"command": "/bin/bash -lc 'echo hi > out.txt'"})
    );
    assert_eq!(out[4].payload["callId"], "item_1");
    assert_eq!(out[4].payload["success"], true);
    assert_eq!(out[4].payload["output"]["exitCode"], 0);
    assert_eq!(out[4].payload["output"]["status"], "completed");
    assert_eq!(out[5].payload["content"], "Done. I wrote hi to out.txt.");
    assert_eq!(out[6].payload["promptTokens"], 360);
    assert_eq!(out[6].payload["completionTokens"], 34);
    assert_eq!(out[6].meta("cachedInputTokens").unwrap(), 0);
    assert_eq!(out[6].meta("reasoningOutputTokens").unwrap(), 0);
    assert_eq!(out[7].payload["taskId"], EXEC_THREAD);
    assert_eq!(out[7].payload["result"], "Done. I wrote hi to out.txt.");
    assert_eq!(
        (&out[2].payload["from"], &out[2].payload["to"]),
        (&json!("idle"), &json!("thinking"))
    );
    assert_eq!(
        (&out[8].payload["from"], &out[8].payload["to"]),
        (&json!("thinking"), &json!("idle"))
    );
}

#[test]
fn app_server_messages_the_captures_do_not_show() {
    let lines = [
        json!({"method": "turn/started", "params": {"threadId": "t", "turn": {"id": "u", "status": "inProgress"}}, "emittedAtMs": 1000}),
        json!({"method": "item/reasoning/summaryTextDelta", "params": {"threadId": "t", "turnId": "u", "itemId": "r", "delta": "hmm", "summaryIndex": 0}}),
        json!({"method": "item/reasoning/textDelta", "params": {"threadId": "t", "turnId": "u", "itemId": "r", "delta": "raw", "contentIndex": 0}}),
        json!({"method": "item/started", "params": {"threadId": "t", "turnId": "u", "item": {"type": "fileChange", "id": "p1", "status": "inProgress",
            "changes": [{"path": "a.txt", "kind": {"type": "add"}, "diff": "+hi"}]}}}),
        json!({"id": 4, "method": "item/fileChange/requestApproval", "params": {"threadId": "t", "turnId": "u", "itemId": "p1", "reason": "writes"}}),
        json!({"method": "item/completed", "params": {"threadId": "t", "turnId": "u", "item": {"type": "fileChange", "id": "p1", "status": "completed",
            "changes": [{"path": "a.txt", "kind": {"type": "add"}, "diff": "+hi"}]}}}),
        json!({"method": "item/started", "params": {"threadId": "t", "turnId": "u", "item": {"type": "mcpToolCall", "id": "m1", "server": "docs",
            "tool": "search", "status": "inProgress", "arguments": {"q": "x"}}}}),
        json!({"method": "item/completed", "params": {"threadId": "t", "turnId": "u", "item": {"type": "mcpToolCall", "id": "m1", "server": "docs",
            "tool": "search", "status": "failed", "arguments": {"q": "x"}, "error": {"message": "down"}}}}),
        json!({"method": "thread/tokenUsage/updated", "params": {"threadId": "t", "turnId": "u", "tokenUsage": {"total": {"inputTokens": 10, "outputTokens": 2}}}}),
        json!({"method": "thread/tokenUsage/updated", "params": {"threadId": "t", "turnId": "u", "tokenUsage": {"total": {"inputTokens": 25, "outputTokens": 5}}}}),
        json!({"method": "error", "params": {"threadId": "t", "turnId": "u", "willRetry": true,
            "error": {"message": "stream disconnected", "codexErrorInfo": {"responseStreamDisconnected": {"httpStatusCode": 502}}}}}),
        json!({"method": "turn/completed", "params": {"threadId": "t", "turn": {"id": "u", "status": "failed", "items": [],
            "error": {"message": "quota", "codexErrorInfo": "usageLimitExceeded"}}}}),
        json!({"id": 12, "error": {"code": -32001, "message": "Server overloaded; retry later."}}),
        json!({"method": "thread/status/changed", "params": {"threadId": "t", "status": {"type": "systemError"}}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let out = signals(&text);
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "thinking",
            "thinking",
            "tool_call",
            "agent_state_change",
            "approval.requested",
            "tool_result",
            "tool_call",
            "tool_result",
            "token_usage",
            "token_usage",
            "error",
            "error",
            "completion",
            "agent_state_change",
            "error",
            // Already in error: no change, the status passes as it is.
            "codex.thread/status/changed",
        ]
    );
    assert_eq!(out[0].timestamp, 1000);
    assert!(
        out[..15]
            .iter()
            .all(|s| s.correlation_id.as_deref() == Some("u"))
    );
    assert_eq!(out[1].payload["content"], "hmm");
    assert_eq!(out[2].payload["content"], "raw");
    assert_eq!(out[3].payload["toolName"], "fileChange");
    assert_eq!(out[3].payload["input"]["changes"][0]["path"], "a.txt");
    assert_eq!(out[4].payload["to"], "waiting");
    // The approval shows the changes the item announced.
    assert_eq!(out[5].payload["toolName"], "fileChange");
    assert_eq!(out[5].payload["input"], out[3].payload["input"]);
    assert_eq!(
        out[5].payload["choices"],
        json!(["accept", "acceptForSession", "decline", "cancel"])
    );
    assert_eq!(out[5].meta("codex").unwrap()["reason"], "writes");
    assert_eq!(out[6].payload["success"], true);
    assert_eq!(out[6].payload["output"]["changes"][0]["diff"], "+hi");
    assert_eq!(out[7].payload["toolName"], "search");
    assert_eq!(out[7].payload["input"], json!({"q": "x"}));
    assert_eq!(out[7].meta("codex").unwrap()["server"], "docs");
    assert_eq!(out[8].payload["success"], false);
    assert_eq!(out[8].payload["output"]["error"]["message"], "down");
    // Without `last`, the increase of the running total.
    assert_eq!(
        (
            &out[9].payload["promptTokens"],
            &out[10].payload["promptTokens"]
        ),
        (&json!(10), &json!(15))
    );
    assert_eq!(out[10].payload["completionTokens"], 3);
    assert_eq!(out[11].payload["severity"], "warning");
    assert_eq!(out[11].payload["code"], "responseStreamDisconnected");
    assert_eq!(out[12].payload["code"], "usageLimitExceeded");
    assert_eq!(out[12].payload["message"], "quota");
    assert_eq!(out[13].payload["success"], false);
    assert_eq!(out[14].payload["to"], "error");
    assert_eq!(out[15].payload["code"], "-32001");
    assert_eq!(out[15].meta("id").unwrap(), 12);
}

#[test]
fn exec_events_the_capture_does_not_show() {
    let text = [
        r#"{"type":"thread.started","thread_id":"x"}"#,
        r#"{"type":"turn.started"}"#,
        r#"{"type":"item.completed","item":{"id":"i0","type":"reasoning","text":"**Planning**"}}"#,
        r#"{"type":"item.completed","item":{"id":"i1","type":"file_change","changes":[{"path":"a","kind":"add"}],"status":"completed"}}"#,
        r#"{"type":"item.started","item":{"id":"i2","type":"mcp_tool_call","server":"s","tool":"t","arguments":{"a":1},"status":"in_progress"}}"#,
        r#"{"type":"item.completed","item":{"id":"i2","type":"mcp_tool_call","server":"s","tool":"t","arguments":{"a":1},"result":{"content":[]},"status":"completed"}}"#,
        r#"{"type":"item.completed","item":{"id":"i3","type":"command_execution","command":"false","aggregated_output":"","exit_code":1,"status":"failed"}}"#,
        r#"{"type":"item.updated","item":{"id":"i4","type":"todo_list","items":[]}}"#,
        r#"{"type":"error","message":"Reconnecting... 1/5"}"#,
        r#"{"type":"turn.failed","error":{"message":"boom"}}"#,
        r#"{"type":"something.new","x":1}"#,
    ]
    .join("\n");
    let out = signals(&text);
    assert_eq!(
        kinds(&out),
        [
            "codex.thread.started",
            "agent_state_change",
            "thinking",
            // A file change exec reports only when done: its call, then its result.
            "tool_call",
            "tool_result",
            "tool_call",
            "tool_result",
            "tool_call",
            "tool_result",
            "codex.item.updated",
            "error",
            "error",
            "completion",
            "agent_state_change",
            "codex.something.new",
        ]
    );
    assert_eq!(out[2].payload["content"], "**Planning**");
    assert_eq!(out[3].payload["toolName"], "fileChange");
    assert_eq!(out[4].payload["success"], true);
    assert_eq!(out[5].payload["toolName"], "t");
    assert_eq!(out[6].payload["output"]["result"], json!({"content": []}));
    assert_eq!(out[8].payload["success"], false);
    assert_eq!(out[8].payload["output"]["exitCode"], 1);
    assert_eq!(out[10].payload["message"], "Reconnecting... 1/5");
    assert_eq!(out[11].payload["message"], "boom");
    assert_eq!(out[12].payload["success"], false);
    assert_eq!(out[13].payload["to"], "error");
    assert_eq!(out[14].payload["x"], 1);
}

#[test]
fn malformed_input_is_counted_or_passed_as_codex_signals() {
    let cases: &[(&str, Option<&str>)] = &[
        // (line, the type it gives; None: a counted bad input)
        (r#"{"method":"item/agentMessage/del"#, None),
        ("42", None),
        (r#""text""#, None),
        ("[1,2]", None),
        ("not json at all", None),
        ("{}", None),
        (r#"{"id":3}"#, None),
        (r#"{"method":7}"#, None),
        (r#"{"type":5}"#, None),
        (r#"{"dir":"server->client","t":1,"msg":5}"#, None),
        (r#"{"method":"some/unknown"}"#, Some("codex.some/unknown")),
        (
            r#"{"method":"item/agentMessage/delta","params":{"delta":5}}"#,
            Some("codex.item/agentMessage/delta"),
        ),
        (
            r#"{"method":"thread/tokenUsage/updated","params":{"tokenUsage":{"last":{"inputTokens":-1}}}}"#,
            Some("codex.thread/tokenUsage/updated"),
        ),
        (
            r#"{"method":"turn/completed","params":{"turn":"x"}}"#,
            Some("codex.turn/completed"),
        ),
        (r#"{"method":"error","params":{}}"#, Some("codex.error")),
        (
            r#"{"method":"item/started","params":[1]}"#,
            Some("codex.item/started"),
        ),
        (
            r#"{"id":5,"method":"item/tool/requestUserInput"}"#,
            Some("codex.item/tool/requestUserInput"),
        ),
        (r#"{"type":"item.completed"}"#, Some("codex.item.completed")),
        (
            r#"{"type":"item.completed","item":{"type":"command_execution"}}"#,
            Some("codex.item.completed"),
        ),
        (
            r#"{"dir":"client->server","t":1,"msg":{"id":1,"result":{}}}"#,
            Some(""),
        ),
        (r#"{"dir":"note","t":1,"msg":{}}"#, Some("")),
    ];
    for (line, expected) in cases {
        let out = decoded(line);
        match expected {
            None => {
                assert_eq!(out.len(), 1, "{line}: {out:?}");
                assert!(out[0].is_bad(), "{line}: {out:?}");
                let signal = out[0].clone().into_signal();
                assert_eq!(signal.kind, "error");
                assert_eq!(signal.payload["code"], "bad_frame");
            }
            Some("") => assert!(out.is_empty(), "{line}: {out:?}"),
            Some(kind) => {
                let kinds: Vec<_> = out
                    .iter()
                    .map(|d| (d.is_bad(), d.clone().into_signal().kind.to_string()))
                    .collect();
                assert_eq!(kinds, [(false, (*kind).to_owned())], "{line}");
            }
        }
    }
    // An unknown method without params: an empty payload.
    let out = good_signals(decoded(r#"{"method":"some/unknown"}"#));
    assert!(out[0].payload.is_empty());

    // An approval request without params is still an approval, of an unknown thread.
    let out = good_signals(decoded(
        r#"{"id":7,"method":"item/commandExecution/requestApproval"}"#,
    ));
    assert_eq!(kinds(&out), ["agent_state_change", "approval.requested"]);
    assert_eq!(out[1].payload["promptId"], "7");
    assert_eq!(out[1].payload["agentId"], SOURCE);
    assert_eq!(out[1].payload["input"], json!({}));

    // Bad lines among good ones are reported and reading goes on.
    let text = "{\"method\":\"a\"}\n{oops\n{\"method\":\"b\"}\n";
    let out = decoded(text);
    assert_eq!(
        out.iter().map(Decoded::is_bad).collect::<Vec<_>>(),
        [false, true, false]
    );
}

/// Pieces that make random input likely to reach deep into the decoder.
const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\n",
    "null",
    "true",
    "0",
    "-3",
    "1e400",
    "\"id\"",
    "\"method\"",
    "\"params\"",
    "\"result\"",
    "\"error\"",
    "\"type\"",
    "\"item\"",
    "\"threadId\"",
    "\"turnId\"",
    "\"turn\"",
    "\"status\"",
    "\"tokenUsage\"",
    "\"last\"",
    "\"total\"",
    "\"inputTokens\"",
    "\"delta\"",
    "\"dir\"",
    "\"msg\"",
    "\"server->client\"",
    "\"client->server\"",
    "\"item/started\"",
    "\"item/completed\"",
    "\"commandExecution\"",
    "\"fileChange\"",
    "\"mcpToolCall\"",
    "\"turn/completed\"",
    "\"failed\"",
    "\"declined\"",
    "\"item/commandExecution/requestApproval\"",
    "\"availableDecisions\"",
    "\"serverRequest/resolved\"",
    "\"requestId\"",
    "\"decision\"",
    "\"turn.completed\"",
    "\"item.completed\"",
    "\"command_execution\"",
    "\"usage\"",
    "\"emittedAtMs\"",
    "\u{e9}",
];

#[test]
fn arbitrary_bytes_never_panic_and_give_valid_signals() {
    let mut rng = Rng(0x5eed_c0de_0001);
    assert_random_input_gives_schema_valid_signals(decoder, PIECES, &mut rng, 2000);
}

#[test]
fn mutated_captures_never_panic() {
    let mut rng = Rng(42);
    for name in ["codex-app-server.jsonl", "codex-exec.jsonl"] {
        assert_mutated_text_gives_schema_valid_signals(
            decoder,
            &fixture(name),
            PIECES,
            &mut rng,
            200,
        );
    }
}

#[test]
fn both_captures_in_one_stream() {
    // An exec run after an app-server session: the exec events belong to the exec thread.
    let text = format!(
        "{}\n{}",
        fixture("codex-app-server.jsonl"),
        fixture("codex-exec.jsonl")
    );
    let out = signals(&text);
    assert_all_valid(&out);
    let tail = &out[out.len() - 9..];
    assert_eq!(tail[0].kind, "codex.thread.started");
    assert!(
        tail[1..]
            .iter()
            .all(|s| s.payload["agentId"] == EXEC_THREAD)
    );
}
