//! The `--output-format stream-json` decoder on the real capture (`tests/fixtures/`, see
//! its README), on events the capture does not show, and on malformed input.

use patchbay_gemini_cli::{ADAPTER, StreamJsonDecoder, parse_decoder};
use patchbay_signal::Signal;
use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::well_known::AgentState;
use patchbay_testkit::decoding::{decode_whole, good_signals, kinds};
use patchbay_testkit::prng::Rng;
use patchbay_testkit::properties::{
    assert_chunking_keeps_comparable, assert_mutated_text_gives_schema_valid_signals,
    assert_random_input_gives_schema_valid_signals,
};
use patchbay_testkit::validity::assert_all_decoded_valid;
use serde_json::json;

const SOURCE: &str = "parse:gemini";
const SESSION: &str = "30568d26-96fc-4a8c-9732-c165521174c8";
const TOOL_ID: &str = "run_shell_command__run_shell_command_1795847653561_0";

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn decoder() -> Box<dyn StreamDecoder> {
    parse_decoder(SOURCE)
}

/// Every decoded item of `text` (bad input included), all checked valid.
fn decoded(text: &str) -> Vec<Decoded> {
    let decoded = decode_whole(decoder().as_mut(), text);
    assert_all_decoded_valid(&decoded);
    decoded
}

/// The signals of `text`, asserting all are valid and none reports bad input.
fn signals(text: &str) -> Vec<Signal> {
    let decoded = decoded(text);
    assert!(decoded.iter().all(|d| !d.is_bad()), "{decoded:?}");
    good_signals(decoded)
}

fn states(out: &[Signal]) -> Vec<(String, String)> {
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
fn the_descriptor() {
    assert_eq!(ADAPTER.name, "gemini_cli");
    assert_eq!(ADAPTER.protocol, "gemini");
    let names: Vec<&str> = ADAPTER.components.iter().map(|c| c.name).collect();
    assert_eq!(names, ["gemini_cli"]);
    let probes: Vec<&str> = ADAPTER.probes.iter().map(|p| p.service).collect();
    assert_eq!(probes, ["gemini-cli"]);
    assert!(ADAPTER.parse.is_some() && ADAPTER.wrap.is_none());
}

#[test]
fn the_recorded_stream() {
    let out = signals(&fixture("gemini-stream.jsonl"));
    assert_eq!(
        kinds(&out),
        [
            "gemini_cli.init",
            "agent_state_change",
            "task_dispatch",
            "text_delta",
            "tool_call",
            "agent_state_change",
            "tool_result",
            "agent_state_change",
            "text_delta",
            "text_delta",
            "text_delta",
            "text_delta",
            "token_usage",
            "completion",
            "agent_state_change",
        ]
    );
    assert!(out.iter().all(|s| s.source == SOURCE));
    for s in &out {
        if let Some(agent) = s.payload.get("agentId") {
            assert_eq!(agent, SESSION, "{s:?}");
        }
    }
    // Each signal has its event's time.
    assert_eq!(out[0].timestamp, 1_795_847_653_319);
    assert_eq!(out[14].timestamp, 1_795_847_654_081);

    assert_eq!(out[0].payload["session_id"], SESSION);
    assert_eq!(out[0].payload["model"], "auto");
    assert_eq!(
        states(&out),
        [
            ("idle".into(), "thinking".into()),
            ("thinking".into(), "acting".into()),
            ("acting".into(), "thinking".into()),
            ("thinking".into(), "idle".into()),
        ]
    );

    assert_eq!(out[2].payload["taskId"], SESSION);
    assert_eq!(out[2].payload["from"], "user");
    assert_eq!(out[2].payload["to"], SESSION);
    assert_eq!(
        out[2].payload["description"],
        "Create out.txt containing hi using the shell."
    );

    assert_eq!(out[3].payload["content"], "I'll run a command.");
    assert_eq!(out[3].meta("delta").unwrap(), true);

    assert_eq!(out[4].payload["toolName"], "run_shell_command");
    assert_eq!(out[4].payload["callId"], TOOL_ID);
    assert_eq!(
        out[4].payload["input"],
        json!({"command": "echo hi > out.txt", "description": "write hi to out.txt"})
    );
    assert_eq!(out[4].correlation_id.as_deref(), Some(TOOL_ID));
    // The result names the tool of its call.
    assert_eq!(out[6].payload["toolName"], "run_shell_command");
    assert_eq!(out[6].payload["callId"], TOOL_ID);
    assert_eq!(out[6].payload["success"], true);
    assert_eq!(
        out[6].payload["output"],
        json!({"status": "success", "output": ""})
    );

    // The answer after the tool call, in 4 deltas.
    let answer: String = out[8..12]
        .iter()
        .map(|s| s.payload["content"].as_str().unwrap())
        .collect();
    assert_eq!(answer, "Done. I wrote hi to out.txt.");

    // The run's usage: every model, the router's classifier call included.
    let usage = &out[12];
    assert_eq!(usage.payload["promptTokens"], 750);
    assert_eq!(usage.payload["completionTokens"], 42);
    assert!(usage.payload.get("model").is_none());
    assert_eq!(usage.meta("totalTokens").unwrap(), 792);
    assert_eq!(usage.meta("durationMs").unwrap(), 762);
    assert_eq!(usage.meta("toolCalls").unwrap(), 1);
    assert_eq!(
        usage.meta("models").unwrap()["gemini-3.8-flash"]["input_tokens"],
        700
    );

    assert_eq!(out[13].payload["taskId"], SESSION);
    assert_eq!(out[13].payload["success"], true);
    assert_eq!(out[13].payload["result"], "Done. I wrote hi to out.txt.");
    assert_eq!(out[13].correlation_id.as_deref(), Some(SESSION));
}

#[test]
fn splitting_the_captures_does_not_change_the_signals() {
    let mut rng = Rng(0x6e6d_5eed);
    assert_chunking_keeps_comparable(
        decoder,
        &fixture("gemini-stream.jsonl"),
        "gemini-stream.jsonl",
        &mut rng,
    );
    // Line by line through a fresh decoder too: nothing needs the lines before it to stay
    // valid.
    for line in fixture("gemini-stream.jsonl").lines() {
        decoded(line);
    }
}

#[test]
fn hooks_and_stream_in_one_capture() {
    let text = format!(
        "{}{}",
        fixture("gemini-stream.jsonl"),
        fixture("gemini-hooks.jsonl")
    );
    let out = signals(&text);
    assert_eq!(out.len(), 15 + 31);
    assert_eq!(out[15].kind, "gemini_cli.session_start");
}

#[test]
fn events_the_capture_does_not_show() {
    let text = [
        // Before `init`: the source is the agent.
        r#"{"type":"error","timestamp":"2026-11-28T06:34:13.000Z","severity":"warning","message":"Loop detected"}"#,
        r#"{"type":"init","session_id":"s","model":"gemini-2.5-pro"}"#,
        r#"{"type":"message","role":"user","content":"go"}"#,
        r#"{"type":"message","role":"assistant","content":"Checking."}"#,
        r#"{"type":"tool_use","tool_name":"read_file","tool_id":"t1","parameters":{"absolute_path":"/x"}}"#,
        r#"{"type":"tool_result","tool_id":"t1","status":"error","error":{"type":"file_not_found","message":"no /x"}}"#,
        r#"{"type":"tool_result","tool_id":"unknown","status":"success","output":"?"}"#,
        r#"{"type":"error","severity":"error","message":"quota"}"#,
        r#"{"type":"something_new","x":1}"#,
        r#"{"type":"result","status":"error","error":{"type":"FatalTurnLimitedError","message":"too many turns"},"stats":{"input_tokens":5,"output_tokens":1,"models":{"gemini-2.5-pro":{}}}}"#,
    ]
    .join("\n");
    let out = signals(&text);
    assert_eq!(
        kinds(&out),
        [
            "error",
            "gemini_cli.init",
            "agent_state_change",
            "task_dispatch",
            "text_delta",
            "tool_call",
            "agent_state_change",
            "tool_result",
            "agent_state_change",
            "tool_result",
            "error",
            "gemini_cli.something_new",
            "error",
            "token_usage",
            "completion",
            "agent_state_change",
        ]
    );
    assert_eq!(out[0].payload["agentId"], SOURCE);
    assert_eq!(out[0].payload["severity"], "warning");
    assert_eq!(out[0].payload["message"], "Loop detected");
    // A line without a timestamp takes the last one seen.
    assert_eq!(out[1].timestamp, out[0].timestamp);
    assert_eq!(out[3].payload["taskId"], "s");
    assert_eq!(out[7].payload["toolName"], "read_file");
    assert_eq!(out[7].payload["success"], false);
    assert_eq!(out[7].payload["output"]["error"]["message"], "no /x");
    assert_eq!(out[9].payload["toolName"], "tool");
    assert_eq!(out[10].payload["severity"], "error");
    assert_eq!(out[11].payload.get("x"), Some(&json!(1)));
    assert_eq!(out[11].payload.len(), 1);
    assert_eq!(out[12].payload["code"], "FatalTurnLimitedError");
    assert_eq!(out[12].payload["message"], "too many turns");
    assert_eq!(out[13].payload["model"], "gemini-2.5-pro");
    assert_eq!(out[14].payload["success"], false);
    assert_eq!(out[14].meta("status").unwrap(), "error");
    // The text after the last tool call: none.
    assert!(out[14].payload.get("result").is_none());
    assert_eq!(out[15].payload["to"], "error");
}

#[test]
fn the_decoder_alone() {
    let mut d = StreamJsonDecoder::new(SOURCE);
    let mut out = Vec::new();
    d.decode_text(r#"{"type":"init","session_id":"s","model":"m"}"#, &mut out);
    d.decode_text("  ", &mut out);
    assert_eq!(out.len(), 2);
    assert_eq!(d.session(), Some("s"));
    assert_eq!(d.state(), AgentState::Thinking);
    d.decode_text("{oops", &mut out);
    assert!(out[2].is_bad());
}

#[test]
fn malformed_input_is_counted() {
    let cases: &[(&str, Option<&str>)] = &[
        // (line, the type it gives; None: a counted bad input)
        ("not json", None),
        ("{", None),
        ("42", None),
        ("[1]", None),
        (r#""init""#, None),
        ("{}", None),
        (r#"{"type":5}"#, None),
        (r#"{"role":"user","content":"x"}"#, None),
        (r#"{"type":"message"}"#, Some("gemini_cli.message")),
        (
            r#"{"type":"message","role":"system","content":"x"}"#,
            Some("gemini_cli.message"),
        ),
        (
            r#"{"type":"tool_use","tool_id":"x"}"#,
            Some("gemini_cli.tool_use"),
        ),
        (r#"{"type":"error"}"#, Some("gemini_cli.error")),
        ("", Some("")),
        ("\n\n", Some("")),
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
    // Fields of the wrong shape: valid signals all the same.
    let out = signals(concat!(
        r#"{"type":"tool_use","tool_name":"x","parameters":"ls","timestamp":7}"#,
        "\n",
        r#"{"type":"result","status":"success","stats":{"input_tokens":-4,"output_tokens":"many"}}"#,
        "\n",
        r#"{"type":"message","role":"assistant","content":"","delta":true}"#,
    ));
    assert_eq!(out[0].payload["input"], json!({"value": "ls"}));
    let usage = out.iter().find(|s| s.kind == "token_usage").unwrap();
    assert_eq!(usage.payload["promptTokens"], 0);
    assert_eq!(usage.payload["completionTokens"], 0);

    // Bad lines among good ones are reported and reading goes on.
    let out = decoded("{\"type\":\"a\"}\n{oops\n{\"type\":\"b\"}\n");
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
    "\"type\"",
    "\"init\"",
    "\"message\"",
    "\"role\"",
    "\"user\"",
    "\"assistant\"",
    "\"content\"",
    "\"tool_use\"",
    "\"tool_result\"",
    "\"tool_id\"",
    "\"tool_name\"",
    "\"parameters\"",
    "\"status\"",
    "\"success\"",
    "\"error\"",
    "\"result\"",
    "\"stats\"",
    "\"input_tokens\"",
    "\"models\"",
    "\"session_id\"",
    "\"hook_event_name\"",
    "\"timestamp\"",
    "\"2026-11-28T06:34:13.289Z\"",
    "\u{e9}",
];

#[test]
fn arbitrary_bytes_never_panic_and_give_valid_signals() {
    let mut rng = Rng(0x5eed_9e42);
    assert_random_input_gives_schema_valid_signals(decoder, PIECES, &mut rng, 2000);
}

#[test]
fn mutated_captures_never_panic() {
    let mut rng = Rng(43);
    assert_mutated_text_gives_schema_valid_signals(
        decoder,
        &fixture("gemini-stream.jsonl"),
        PIECES,
        &mut rng,
        300,
    );
}
