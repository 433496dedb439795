//! The OTLP decoder on the real captures (`tests/fixtures/`, see its README): Codex's,
//! Gemini CLI's and Claude Code's exports, JSON and protobuf.

use patchbay_otlp::{Model, OtlpDecoder, SignalKind, parse_decoder, protobuf};
use patchbay_signal::Signal;
use patchbay_testkit::decoding::{decode_whole, good_signals};
use patchbay_testkit::prng::Rng;
use patchbay_testkit::properties::assert_chunking_keeps_comparable;
use patchbay_testkit::validity::{assert_all_decoded_valid, assert_all_valid};
use serde_json::Value;

const SOURCE: &str = "otlp:test";
const CLAUDE_SESSION: &str = "c2c0f9a7-0ab8-49f4-b96e-865cc6fccece";
const CLAUDE_PROMPT: &str = "bf6ed3b1-3ace-44ac-bbbe-e46c4fa224a0";
const CODEX_EXEC: &str = "01a220dc-3c76-72e3-9e4a-78235af470c7";
const CODEX_THREAD_B: &str = "01a220dc-4a35-7012-8a24-14e08574fbfa";
const GEMINI_SESSION: &str = "30568d26-96fc-4a8c-9732-c165521174c8";

const CLAUDE: [&str; 4] = [
    "001-v1_metrics",
    "002-v1_logs",
    "003-v1_logs",
    "004-v1_metrics",
];
const CODEX: [&str; 3] = ["001-v1_logs", "002-v1_logs", "003-v1_logs"];
const GEMINI: [&str; 3] = ["001-v1_traces", "002-v1_logs", "003-v1_metrics"];

fn path(dir: &str, name: &str) -> String {
    format!("{}/tests/fixtures/{dir}/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn read(dir: &str, name: &str) -> Vec<u8> {
    let path = path(dir, name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The kind of a capture, from the path its `.meta.json` recorded.
fn kind_of(dir: &str, stem: &str) -> SignalKind {
    let meta: Value = serde_json::from_slice(&read(dir, &format!("{stem}.meta.json"))).unwrap();
    SignalKind::from_path(meta["path"].as_str().unwrap()).unwrap()
}

/// The signals of a run's JSON captures through one decoder, in order, flushed at the end.
fn run_json(dir: &str, stems: &[&str]) -> Vec<Signal> {
    let mut decoder = OtlpDecoder::new(SOURCE);
    let mut out = Vec::new();
    for stem in stems {
        let body = read(dir, &format!("{stem}.json"));
        decoder
            .decode_json(kind_of(dir, stem), &body, &mut out)
            .unwrap_or_else(|e| panic!("{dir}/{stem}: {e}"));
    }
    decoder.flush(&mut out);
    assert_all_decoded_valid(&out);
    assert!(out.iter().all(|d| !d.is_bad()));
    good_signals(out)
}

fn run_protobuf(stems: &[&str]) -> Vec<Signal> {
    let mut decoder = OtlpDecoder::new(SOURCE);
    let mut out = Vec::new();
    for stem in stems {
        let body = read("claude-protobuf", &format!("{stem}.bin"));
        decoder
            .decode_protobuf(kind_of("claude-protobuf", stem), &body, &mut out)
            .unwrap_or_else(|e| panic!("{stem}: {e}"));
    }
    decoder.flush(&mut out);
    assert_all_decoded_valid(&out);
    good_signals(out)
}

fn of_kind<'a>(signals: &'a [Signal], kind: &str) -> Vec<&'a Signal> {
    signals.iter().filter(|s| s.kind == kind).collect()
}

fn tokens(signals: &[Signal]) -> Vec<(u64, u64)> {
    of_kind(signals, "token_usage")
        .iter()
        .map(|s| {
            (
                s.payload["promptTokens"].as_u64().unwrap(),
                s.payload["completionTokens"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// A file of every capture of a run, each body on its own lines as recorded.
fn concatenated(dir: &str, stems: &[&str], ext: &str) -> String {
    stems
        .iter()
        .map(|s| String::from_utf8(read(dir, &format!("{s}.{ext}"))).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_capture_decodes_to_valid_signals_through_parse() {
    for (dir, stems, ext) in [
        ("claude-json", &CLAUDE[..], "json"),
        ("claude-protobuf", &CLAUDE[..], "decoded.json"),
        ("codex", &CODEX[..], "json"),
        ("gemini", &GEMINI[..], "json"),
    ] {
        let text = concatenated(dir, stems, ext);
        let decoded = decode_whole(parse_decoder(SOURCE).as_mut(), &text);
        assert_all_decoded_valid(&decoded);
        assert!(decoded.iter().all(|d| !d.is_bad()), "{dir}");
        let signals = good_signals(decoded);
        assert!(signals.len() > 10, "{dir}: {}", signals.len());
        assert!(signals.iter().all(|s| s.source == SOURCE));
        // Each body alone too, and as one line.
        for stem in stems {
            let body = String::from_utf8(read(dir, &format!("{stem}.{ext}"))).unwrap();
            let line = serde_json::from_str::<Value>(&body).unwrap().to_string();
            for text in [body, line] {
                let decoded = decode_whole(parse_decoder(SOURCE).as_mut(), &text);
                assert_all_decoded_valid(&decoded);
                assert!(!decoded.is_empty() && decoded.iter().all(|d| !d.is_bad()));
            }
        }
    }
}

#[test]
fn splitting_a_capture_does_not_change_the_signals() {
    let mut rng = Rng(0x07e1_0007);
    for (dir, stems) in [("claude-json", &CLAUDE[..]), ("codex", &CODEX[..1])] {
        let text = concatenated(dir, stems, "json");
        assert_chunking_keeps_comparable(|| parse_decoder(SOURCE), &text, dir, &mut rng);
    }
}

#[test]
fn claude_code_prompt_tool_and_tokens_arrive_once() {
    let out = run_json("claude-json", &CLAUDE);
    // Every well-known signal is the session's: the hooks' `session_id`.
    for s in &out {
        if let Some(agent) = s.payload.get("agentId") {
            assert_eq!(agent, CLAUDE_SESSION, "{s:?}");
        }
    }
    let dispatch = of_kind(&out, "task_dispatch");
    assert_eq!(dispatch.len(), 1);
    assert_eq!(dispatch[0].payload["taskId"], CLAUDE_PROMPT);
    assert_eq!(dispatch[0].payload["to"], CLAUDE_SESSION);
    // The prompt was redacted: no description.
    assert!(dispatch[0].payload.get("description").is_none());

    let decided = of_kind(&out, "approval.decided");
    assert_eq!(decided.len(), 1);
    assert_eq!(decided[0].payload["promptId"], "toolu_fake_1");
    assert_eq!(decided[0].payload["value"], "allow");
    assert_eq!(decided[0].meta("decision").unwrap(), "accept");

    let call = of_kind(&out, "tool_call");
    let result = of_kind(&out, "tool_result");
    assert_eq!((call.len(), result.len()), (1, 1));
    assert_eq!(call[0].payload["toolName"], "Bash");
    assert_eq!(result[0].payload["callId"], "toolu_fake_1");
    assert_eq!(result[0].payload["success"], true);
    assert_eq!(result[0].correlation_id.as_deref(), Some("toolu_fake_1"));

    // Two API requests: their events' counts, not the token metric's again.
    assert_eq!(tokens(&out), [(100, 15), (200, 15)]);
    let usage = of_kind(&out, "token_usage");
    assert_eq!(usage[0].payload["model"], "claude-opus-5-5");
    assert_eq!(usage[1].payload["cost"], 0.0011);
    assert_eq!(usage[0].correlation_id.as_deref(), Some(CLAUDE_PROMPT));
    // The metric points still pass as otel.metric, marked.
    let metrics = of_kind(&out, "otel.metric");
    assert!(
        metrics
            .iter()
            .any(|m| m.payload["name"] == "claude_code.token.usage"
                && m.meta("tokensCountedBy").is_some())
    );
    assert!(of_kind(&out, "claude_code.plugin_loaded").len() == 4);
    assert!(of_kind(&out, "claude_code.assistant_response").len() == 1);
}

#[test]
fn claude_code_metrics_alone_give_token_usage_once() {
    // Without its logs, the session's token metric is its token usage: the first export's
    // counts are released when the next comes, the last at the end.
    let out = run_json("claude-json", &["001-v1_metrics", "004-v1_metrics"]);
    assert_eq!(tokens(&out), [(100, 15), (200, 15)]);
    let usage = of_kind(&out, "token_usage");
    assert_eq!(usage[0].payload["agentId"], CLAUDE_SESSION);
    assert_eq!(usage[0].meta("metric").unwrap(), "claude_code.token.usage");
    assert_eq!(usage[0].meta("otherTokens").unwrap()["cacheRead"], 0);
}

#[test]
fn claude_code_json_and_protobuf_give_the_same_signals() {
    let json = run_json("claude-json", &CLAUDE);
    let proto = run_protobuf(&CLAUDE);
    // Two runs: the same signals but for ids, times and the session.
    let shape = |signals: &[Signal]| -> Vec<(String, Vec<String>)> {
        signals
            .iter()
            .map(|s| (s.kind.to_string(), s.payload.keys().cloned().collect()))
            .collect()
    };
    assert_eq!(shape(&json), shape(&proto));
    assert_eq!(tokens(&json), tokens(&proto));
    let call = of_kind(&proto, "tool_result");
    assert_eq!(call[0].payload["toolName"], "Bash");
}

#[test]
fn protobuf_bodies_read_as_their_decoded_json() {
    for stem in CLAUDE {
        let kind = kind_of("claude-protobuf", stem);
        let limits = Default::default();
        let from_bin = protobuf::decode(
            kind,
            &read("claude-protobuf", &format!("{stem}.bin")),
            &limits,
        )
        .unwrap();
        let from_json = Model::from_json(
            kind,
            &read("claude-protobuf", &format!("{stem}.decoded.json")),
            &limits,
        )
        .unwrap();
        assert_eq!(from_bin, from_json, "{stem}");
        assert!(!from_bin.cuts().any());
    }
}

#[test]
fn codex_exec_prompt_tool_and_tokens() {
    let out = run_json("codex", &CODEX[..1]);
    for s in &out {
        if let Some(agent) = s.payload.get("agentId") {
            assert_eq!(agent, CODEX_EXEC, "{s:?}");
        }
    }
    let dispatch = of_kind(&out, "task_dispatch");
    assert_eq!(
        dispatch[0].payload["description"],
        "Create out.txt containing hi using the shell."
    );
    let call = of_kind(&out, "tool_call");
    assert_eq!(call.len(), 1);
    assert_eq!(call[0].payload["toolName"], "exec_command");
    assert_eq!(call[0].payload["callId"], "call_1");
    assert_eq!(call[0].payload["input"]["cmd"], "echo hi > out.txt");
    let result = of_kind(&out, "tool_result");
    assert_eq!(result[0].payload["success"], true);
    assert!(
        result[0].payload["output"]["output"]
            .as_str()
            .unwrap()
            .contains("exited with code 0")
    );
    assert_eq!(
        of_kind(&out, "approval.decided")[0].payload["value"],
        "allow"
    );
    // Two model requests: the `response.completed` SSE events' counts.
    assert_eq!(tokens(&out), [(120, 17), (240, 17)]);
    assert_eq!(
        of_kind(&out, "token_usage")[0].payload["model"],
        "fake-model"
    );
    // Codex sends no record time: the observed time is used.
    assert!(out.iter().all(|s| s.timestamp > 1_700_000_000_000));
}

#[test]
fn codex_app_server_denied_command_fails() {
    let out = run_json("codex", &CODEX[2..]);
    let denied: Vec<_> = of_kind(&out, "approval.decided")
        .into_iter()
        .filter(|s| s.payload["value"] == "deny")
        .collect();
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0].meta("decision").unwrap(), "denied");
    assert_eq!(denied[0].payload["by"], "user");
    let failed: Vec<_> = of_kind(&out, "tool_result")
        .into_iter()
        .filter(|s| s.payload["success"] == false)
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].payload["agentId"], CODEX_THREAD_B);
}

#[test]
fn gemini_cli_tool_call_and_tokens_counted_once() {
    let out = run_json("gemini", &GEMINI);
    for s in &out {
        if let Some(agent) = s.payload.get("agentId") {
            assert_eq!(agent, GEMINI_SESSION, "{s:?}");
        }
    }
    // Three model calls (the router's and two of the main loop): `api_response`'s counts;
    // neither the operation-details events nor the two token metrics count them again.
    assert_eq!(tokens(&out), [(50, 10), (300, 20), (400, 12)]);
    let details = of_kind(&out, "gen_ai.client.inference.operation.details");
    assert!(details.iter().any(|d| {
        d.meta("tokensCountedBy")
            .is_some_and(|by| by == "event:gemini_cli.api_response")
    }));
    let call = of_kind(&out, "tool_call");
    assert_eq!(call.len(), 1);
    assert_eq!(call[0].payload["toolName"], "run_shell_command");
    assert_eq!(call[0].payload["input"]["command"], "echo hi > out.txt");
    assert_eq!(of_kind(&out, "tool_result")[0].payload["success"], true);
    assert_eq!(
        of_kind(&out, "task_dispatch")[0].payload["description"],
        "Create out.txt containing hi using the shell."
    );
    // Gemini CLI's spans are not the GenAI operations: they pass as otel.span.
    let spans = of_kind(&out, "otel.span");
    assert_eq!(spans.len(), 5);
    assert!(spans.iter().all(|s| s.correlation_id.is_some()));
    assert_all_valid(&out);
}

#[test]
fn gemini_cli_cumulative_metrics_alone_give_token_usage() {
    let out = run_json("gemini", &GEMINI[2..]);
    // Per model, from `gemini_cli.token.usage` (the first token metric seen); the
    // `gen_ai.client.token.usage` histogram of the same calls is not added again.
    let usage = of_kind(&out, "token_usage");
    assert_eq!(tokens(&out), [(50, 10), (700, 32)], "{usage:?}");
}
