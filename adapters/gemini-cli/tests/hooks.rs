//! The hook decoder on every hook payload recorded from the real Gemini CLI
//! (`tests/fixtures/`, see its README), on payloads the capture does not show, and on
//! malformed input.

use patchbay_gemini_cli::{HookDecoder, call_id, parse_decoder};
use patchbay_signal::Signal;
use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_testkit::decoding::{decode_whole, good_signals, kinds};
use patchbay_testkit::prng::Rng;
use patchbay_testkit::properties::{
    assert_chunking_keeps_comparable, assert_mutated_text_gives_schema_valid_signals,
};
use patchbay_testkit::validity::{assert_all_decoded_valid, assert_all_valid};
use serde_json::{Value, json};

const SOURCE: &str = "gemini_cli:test";
const SESSION: &str = "30568d26-96fc-4a8c-9732-c165521174c8";
const PROMPT: &str = "Create out.txt containing hi using the shell.";

const EVENTS: [&str; 10] = [
    "SessionStart",
    "BeforeAgent",
    "BeforeModel",
    "AfterModel",
    "BeforeToolSelection",
    "BeforeTool",
    "AfterTool",
    "AfterAgent",
    "PreCompress",
    "SessionEnd",
];

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn hook(event: &str) -> Value {
    serde_json::from_str(&fixture(&format!("gemini-hook-{event}.json"))).unwrap()
}

/// The 18 hook payloads of the run, in arrival order.
fn sequence() -> Vec<Value> {
    fixture("gemini-hooks.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Decodes `hooks` with one decoder, asserting every signal is valid and none is bad input.
fn decode_all(hooks: &[Value]) -> Vec<Signal> {
    let mut decoder = HookDecoder::new(SOURCE);
    let mut out = Vec::new();
    for hook in hooks {
        decoder.decode(hook, &mut out);
    }
    assert_all_decoded_valid(&out);
    out.into_iter()
        .map(|d| match d {
            Decoded::Signal(s) => s,
            Decoded::BadInput(s) => panic!("bad input: {s:?}"),
        })
        .collect()
}

fn summary(signals: &[Signal]) -> Vec<String> {
    signals
        .iter()
        .map(|s| match s.kind.as_str() {
            "agent_state_change" => format!(
                "state {}->{}",
                s.payload["from"].as_str().unwrap(),
                s.payload["to"].as_str().unwrap()
            ),
            "tool_call" | "tool_result" => {
                format!("{} {}", s.kind, s.payload["toolName"].as_str().unwrap())
            }
            "text_delta" => format!("text {:?}", s.payload["content"].as_str().unwrap()),
            other => other.to_owned(),
        })
        .collect()
}

fn first<'a>(out: &'a [Signal], kind: &str) -> &'a Signal {
    out.iter()
        .find(|s| s.kind == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

#[test]
fn every_recorded_payload_decodes_to_valid_signals() {
    for event in EVENTS {
        let out = decode_all(&[hook(event)]);
        assert!(!out.is_empty(), "{event}");
        for s in &out {
            assert_eq!(s.source, SOURCE);
            assert_eq!(s.meta("hookEvent").unwrap(), event);
            assert_eq!(s.meta("sessionId").unwrap(), SESSION);
            assert_eq!(
                s.meta("cwd").unwrap(),
                "/home/dev/home/dev/work/gemini/work"
            );
            assert!(
                s.meta("transcriptPath")
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .ends_with("session-2026-11-28T06-34-30568d26.jsonl")
            );
            if let Some(agent) = s.payload.get("agentId") {
                assert_eq!(agent, SESSION, "{s:?}");
            }
            // The shared fields are not in payloads.
            for key in [
                "session_id",
                "cwd",
                "transcript_path",
                "hook_event_name",
                "timestamp",
            ] {
                assert!(s.payload.get(key).is_none(), "{event}: {key} in {s:?}");
            }
        }
    }
    assert_eq!(decode_all(&sequence()).len(), 31);
}

#[test]
fn the_recorded_run_in_order() {
    let out = decode_all(&sequence());
    assert_eq!(
        summary(&out),
        [
            "gemini_cli.session_start",
            "state idle->idle",
            "task_dispatch",
            "state idle->thinking",
            "gemini_cli.pre_compress",
            "gemini_cli.before_model",
            "gemini_cli.before_tool_selection",
            "gemini_cli.after_model",
            "text \"I'll run a command.\"",
            // The response's last chunk: no text, its finishReason and usage.
            "gemini_cli.after_model",
            "token_usage",
            "tool_call run_shell_command",
            "state thinking->acting",
            "tool_result run_shell_command",
            "state acting->thinking",
            "gemini_cli.pre_compress",
            "gemini_cli.before_model",
            "gemini_cli.before_tool_selection",
            "gemini_cli.after_model",
            "text \"Done. \"",
            "gemini_cli.after_model",
            "text \"I wrote hi \"",
            "gemini_cli.after_model",
            "text \"to out.txt\"",
            "gemini_cli.after_model",
            "text \".\"",
            "token_usage",
            "completion",
            "state thinking->idle",
            "gemini_cli.session_end",
            "state idle->done",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
    );

    // Each signal has its hook's time.
    assert_eq!(out[0].timestamp, 1_795_847_653_289);
    assert_eq!(out.last().unwrap().timestamp, 1_795_847_654_084);

    let task = format!("{SESSION}@2026-11-28T06:34:13.323Z");
    let dispatch = first(&out, "task_dispatch");
    assert_eq!(
        dispatch.payload.clone(),
        json!({"taskId": task, "from": "user", "to": SESSION, "description": PROMPT})
            .as_object()
            .unwrap()
            .clone()
    );

    let call = first(&out, "tool_call");
    assert_eq!(call.payload["toolName"], "run_shell_command");
    assert_eq!(call.payload["agentId"], SESSION);
    assert_eq!(
        call.payload["input"],
        json!({"command": "echo hi > out.txt", "description": "write hi to out.txt"})
    );
    let result = first(&out, "tool_result");
    assert_eq!(result.payload["success"], true);
    assert_eq!(result.payload["output"]["returnDisplay"], "");
    assert!(
        result.payload["output"]["llmContent"]
            .as_str()
            .unwrap()
            .contains("Output: (empty)")
    );
    // Both hooks of the call have the same derived callId, which is their correlation.
    let id = call.payload["callId"].as_str().unwrap();
    assert!(id.starts_with("gemini-") && id.len() == 23, "{id}");
    assert_eq!(result.payload["callId"], id);
    assert_eq!(call.correlation_id.as_deref(), Some(id));
    assert_eq!(result.correlation_id.as_deref(), Some(id));

    // The prompt's signals correlate with its task, the session's with the session.
    assert_eq!(out[0].correlation_id.as_deref(), Some(SESSION));
    assert_eq!(dispatch.correlation_id.as_deref(), Some(task.as_str()));
    let completion = first(&out, "completion");
    assert_eq!(completion.correlation_id.as_deref(), Some(task.as_str()));
    assert_eq!(completion.payload["taskId"], task.as_str());
    assert_eq!(completion.payload["success"], true);
    // Gemini CLI's own prompt_response, as it sent it.
    assert_eq!(
        completion.payload["result"],
        "I'll run a command. \nDone. I wrote hi to out.txt. I wrote hi  to out.txt ."
    );
    assert_eq!(completion.meta("stopHookActive").unwrap(), false);
    assert_eq!(out[28].correlation_id.as_deref(), Some(task.as_str()));
    assert_eq!(out[30].correlation_id.as_deref(), Some(SESSION));

    // The text of the chunks is the model's answer.
    let text: String = out
        .iter()
        .filter(|s| s.kind == "text_delta")
        .map(|s| s.payload["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, "I'll run a command.Done. I wrote hi to out.txt.");

    // Usage once per model response: the main model's 700 input and 32 output tokens
    // (the stream's per-model stats), not once per chunk.
    let usage: Vec<_> = out.iter().filter(|s| s.kind == "token_usage").collect();
    assert_eq!(usage.len(), 2);
    assert_eq!(
        (
            &usage[0].payload["promptTokens"],
            &usage[0].payload["completionTokens"]
        ),
        (&json!(300), &json!(20))
    );
    assert_eq!(
        (
            &usage[1].payload["promptTokens"],
            &usage[1].payload["completionTokens"]
        ),
        (&json!(400), &json!(12))
    );
    assert!(
        usage
            .iter()
            .all(|u| u.payload["model"] == "gemini-3.8-flash")
    );
    assert_eq!(usage[1].meta("totalTokenCount").unwrap(), 412);

    // The model events carry the request's model and shape, not the conversation.
    let before = first(&out, "gemini_cli.before_model");
    assert_eq!(before.payload["model"], "gemini-3.8-flash");
    // The first call's request: the user's message only.
    assert_eq!(before.payload["messageCount"], 1);
    assert_eq!(before.payload["config"]["topK"], 64);
    assert!(before.payload.get("llm_request").is_none());
    let last_chunk = &out[24];
    assert_eq!(last_chunk.kind, "gemini_cli.after_model");
    assert_eq!(last_chunk.payload["text"], ".");
    assert_eq!(last_chunk.payload["finishReason"], "STOP");
    assert_eq!(
        last_chunk.payload["usageMetadata"]["candidatesTokenCount"],
        12
    );

    assert_eq!(out[0].payload["source"], "startup");
    assert_eq!(out[4].payload["trigger"], "auto");
    assert_eq!(out[29].payload["reason"], "exit");
    assert_eq!(out[30].payload["reason"], "session ended (exit)");
}

#[test]
fn the_recorded_payloads_through_parse() {
    // One hook payload per line, the way `patchbay parse --protocol gemini` reads them.
    let text = fixture("gemini-hooks.jsonl");
    let decoded = decode_whole(parse_decoder(SOURCE).as_mut(), &text);
    assert_all_decoded_valid(&decoded);
    let out = good_signals(decoded);
    assert_eq!(kinds(&out), kinds(&decode_all(&sequence())));
    let mut rng = Rng(0x6e6d_1e11);
    assert_chunking_keeps_comparable(
        || parse_decoder(SOURCE),
        &text,
        "gemini-hooks.jsonl",
        &mut rng,
    );
}

#[test]
fn the_call_id_depends_on_session_tool_and_input_only() {
    let before = hook("BeforeTool");
    let after = hook("AfterTool");
    assert_eq!(call_id(&before), call_id(&after));
    // Key order does not matter; anything else does.
    let mut reordered = before.clone();
    reordered["tool_input"] =
        json!({"description": "write hi to out.txt", "command": "echo hi > out.txt"});
    assert_eq!(call_id(&reordered), call_id(&before));
    let mut other = before.clone();
    other["tool_input"]["command"] = json!("echo ho > out.txt");
    assert_ne!(call_id(&other), call_id(&before));
    let mut other_session = before.clone();
    other_session["session_id"] = json!("s2");
    assert_ne!(call_id(&other_session), call_id(&before));
    // Only those three: the time of the hook does not count.
    assert_eq!(call_id(&json!({})), call_id(&json!({"timestamp": "x"})));
    // Stable across runs, platforms and versions: a fixed value.
    assert_eq!(call_id(&before), "gemini-4853acfcecc668de");
}

#[test]
fn payloads_the_capture_does_not_show() {
    let base = |event: &str| {
        json!({"session_id": "s", "transcript_path": "/t", "cwd": "/w",
            "hook_event_name": event, "timestamp": "2026-11-28T06:34:13.000Z"})
    };
    let with = |event: &str, extra: Value| {
        let mut v = base(event);
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    let hooks = [
        with("BeforeAgent", json!({"prompt": "go"})),
        with(
            "BeforeTool",
            json!({"tool_name": "mcp__docs__search", "tool_input": {"q": "x"},
            "mcp_context": {"server_name": "docs", "tool_name": "search"}}),
        ),
        with(
            "AfterTool",
            json!({"tool_name": "mcp__docs__search", "tool_input": {"q": "x"},
            "tool_response": {"llmContent": "failed", "returnDisplay": "failed",
                "error": {"type": "execution_failed", "message": "down"}}}),
        ),
        with(
            "Notification",
            json!({"notification_type": "ToolPermission",
            "message": "Allow run_shell_command?", "details": {"tool_name": "run_shell_command"}}),
        ),
        // After a refusal in Gemini's prompt, the next model call: back to thinking.
        with(
            "BeforeModel",
            json!({"llm_request": {"model": "m", "messages": []}}),
        ),
        with(
            "AfterModel",
            json!({"llm_request": {"model": "m", "messages": []},
            "llm_response": {"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 10, "totalTokenCount": 15}}}),
        ),
        with(
            "AfterAgent",
            json!({"prompt": "go", "prompt_response": "ok", "stop_hook_active": true}),
        ),
        with("SomethingNew", json!({"extra_field": 1})),
        // A second session, first seen at its end.
        json!({"session_id": "s2", "hook_event_name": "SessionEnd", "reason": "clear"}),
    ];
    let out = decode_all(&hooks);
    assert_eq!(
        summary(&out),
        [
            "task_dispatch",
            "state idle->thinking",
            "tool_call mcp__docs__search",
            "state thinking->acting",
            "tool_result mcp__docs__search",
            "state acting->thinking",
            "gemini_cli.notification",
            "state thinking->waiting",
            "gemini_cli.before_model",
            "state waiting->thinking",
            "gemini_cli.after_model",
            "token_usage",
            "completion",
            "state thinking->idle",
            "gemini_cli.something_new",
            "gemini_cli.session_end",
            "state idle->done",
        ]
    );
    assert_eq!(out[0].payload["taskId"], "s@2026-11-28T06:34:13.000Z");
    assert_eq!(out[2].meta("mcpContext").unwrap()["server_name"], "docs");
    assert_eq!(out[4].payload["success"], false);
    assert_eq!(out[4].payload["output"]["error"]["message"], "down");
    assert_eq!(out[6].payload["notification_type"], "ToolPermission");
    assert_eq!(out[6].payload["details"]["tool_name"], "run_shell_command");
    assert_eq!(
        out[7].payload["reason"],
        "notification (Allow run_shell_command?)"
    );
    // No candidatesTokenCount: the total less the prompt.
    assert_eq!(out[11].payload["promptTokens"], 10);
    assert_eq!(out[11].payload["completionTokens"], 5);
    assert_eq!(out[11].payload["model"], "m");
    assert_eq!(out[12].meta("stopHookActive").unwrap(), true);
    assert_eq!(out[12].payload["result"], "ok");
    assert_eq!(out[14].payload["extra_field"], 1);
    assert_eq!(out[15].payload["reason"], "clear");
    assert_eq!(out[16].payload["agentId"], "s2");

    // An AfterAgent without a BeforeAgent: the session is the task.
    let out = decode_all(&[with("AfterAgent", json!({"prompt_response": "x"}))]);
    assert_eq!(out[0].payload["taskId"], "s");

    // Long texts are cut.
    let long = "x".repeat(10_000);
    let out = decode_all(&[with("BeforeAgent", json!({"prompt": long}))]);
    assert!(out[0].payload["description"].as_str().unwrap().len() < 4100);
}

#[test]
fn state_changes_for_the_gate() {
    let mut decoder = HookDecoder::new(SOURCE);
    let before = hook("BeforeTool");
    let mut out = Vec::new();
    decoder.decode(&before, &mut out);
    let waiting = decoder.state_change(
        &before,
        patchbay_signal::well_known::AgentState::Waiting,
        "approval for run_shell_command".into(),
    );
    assert_eq!(waiting.payload["from"], "acting");
    assert_eq!(waiting.payload["to"], "waiting");
    assert_eq!(waiting.timestamp, 1_795_847_653_725);
    assert_eq!(
        decoder.state_of(SESSION),
        patchbay_signal::well_known::AgentState::Waiting
    );
    assert_all_valid(&[waiting]);
}

#[test]
fn malformed_input_is_counted_and_never_panics() {
    let cases = [
        "",
        "   ",
        "not json",
        "{",
        "42",
        "[]",
        "null",
        r#""SessionStart""#,
        "{}",
        r#"{"hook_event_name": 5}"#,
        r#"{"session_id": "s"}"#,
    ];
    for case in cases {
        let mut decoder = HookDecoder::new(SOURCE);
        let mut out = Vec::new();
        decoder.decode_bytes(case.as_bytes(), &mut out);
        assert_eq!(out.len(), 1, "{case:?}: {out:?}");
        assert!(out[0].is_bad(), "{case:?}");
        assert_all_decoded_valid(&out);
        let signal = out[0].clone().into_signal();
        assert_eq!(signal.payload["code"], "bad_frame");
    }
    // Bytes that are not UTF-8 either.
    let mut out = Vec::new();
    HookDecoder::new(SOURCE).decode_bytes(&[0xff, 0xfe, b'{'], &mut out);
    assert!(out[0].is_bad());

    // Fields of the wrong shape: valid signals all the same.
    let odd = [
        json!({"hook_event_name": "BeforeTool", "session_id": 5, "tool_name": ["x"], "tool_input": "ls"}),
        json!({"hook_event_name": "AfterTool", "tool_response": "plain", "timestamp": "never"}),
        json!({"hook_event_name": "AfterTool", "tool_response": {"error": null}}),
        json!({"hook_event_name": "AfterModel", "llm_response": {"candidates": [{"finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": -1, "candidatesTokenCount": 1.5}}}),
        json!({"hook_event_name": "AfterModel", "llm_request": 3, "llm_response": {"text": 7}}),
        json!({"hook_event_name": "BeforeAgent", "prompt": {"x": 1}}),
        json!({"hook_event_name": "", "x": 1}),
        json!({"hook_event_name": "Ünïcode Event"}),
    ];
    let out = decode_all(&odd);
    assert_eq!(out[0].payload["agentId"], "gemini-cli");
    assert_eq!(out[0].payload["toolName"], "tool");
    assert_eq!(out[0].payload["input"], json!({"value": "ls"}));
    assert_eq!(out[2].payload["output"], json!({"content": "plain"}));
    assert_eq!(out[2].meta("hookTimestamp").unwrap(), "never");
    assert_eq!(out[4].payload["success"], true);
    let usage = out.iter().find(|s| s.kind == "token_usage").unwrap();
    assert_eq!(usage.payload["promptTokens"], 0);
    assert!(out.iter().any(|s| s.kind == "gemini_cli."));
    assert!(out.iter().any(|s| s.kind == "gemini_cli._n_code_event"));
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
    "\"hook_event_name\"",
    "\"session_id\"",
    "\"BeforeTool\"",
    "\"AfterTool\"",
    "\"AfterModel\"",
    "\"BeforeAgent\"",
    "\"AfterAgent\"",
    "\"tool_name\"",
    "\"tool_input\"",
    "\"tool_response\"",
    "\"error\"",
    "\"llm_response\"",
    "\"candidates\"",
    "\"finishReason\"",
    "\"usageMetadata\"",
    "\"promptTokenCount\"",
    "\"timestamp\"",
    "\"2026-11-28T06:34:13.289Z\"",
    "\u{e9}",
];

#[test]
fn random_and_mutated_hooks_never_panic() {
    let mut rng = Rng(0x5eed_9e41);
    patchbay_testkit::properties::assert_random_input_gives_schema_valid_signals(
        || parse_decoder(SOURCE),
        PIECES,
        &mut rng,
        1000,
    );
    assert_mutated_text_gives_schema_valid_signals(
        || -> Box<dyn StreamDecoder> { parse_decoder(SOURCE) },
        &fixture("gemini-hooks.jsonl"),
        PIECES,
        &mut rng,
        200,
    );
}
