//! The answers a held `BeforeTool` gets, and the approval signals of a held call.

use patchbay_gemini_cli::gate::{
    self, CHOICES, GateConfig, Verdict, approval_decided, approval_requested, hook_timeout_s,
    prompt_id, state_after,
};
use patchbay_gemini_cli::{HookDecoder, call_id, hook_answer};
use patchbay_graph::approvals::{DECIDED, REQUESTED};
use patchbay_signal::well_known::AgentState;
use patchbay_testkit::validity::assert_all_valid;
use serde_json::{Value, json};

fn before_tool() -> Value {
    let path = format!(
        "{}/tests/fixtures/gemini-hook-BeforeTool.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn hook_answers_are_what_gemini_cli_reads() {
    assert_eq!(
        hook_answer(Verdict::Allow, "ok"),
        (json!({"decision": "allow"}), 0)
    );
    assert_eq!(
        hook_answer(Verdict::Always, "ok"),
        (json!({"decision": "allow"}), 0)
    );
    assert_eq!(
        hook_answer(Verdict::Deny, "patchbay: denied by ui"),
        (
            json!({"decision": "deny", "reason": "patchbay: denied by ui"}),
            0
        )
    );
    assert_eq!(
        hook_answer(Verdict::Cancel, "stop"),
        (
            json!({"decision": "deny", "reason": "stop", "continue": false, "stopReason": "stop"}),
            0
        )
    );
    assert_eq!(hook_answer(Verdict::Ask, "?"), (json!({}), 0));
    assert_eq!(gate::decision(Verdict::Always), Verdict::Allow);
    assert_eq!(gate::decision(Verdict::Cancel), Verdict::Cancel);
}

#[test]
fn the_hook_timeout_leaves_room_for_the_default() {
    let gate = GateConfig {
        tools: vec!["run_shell_command".into()],
        timeout_ms: 1500,
        default: Verdict::Deny,
    };
    assert_eq!(hook_timeout_s(&gate), 7);
    assert!(gate.holds("run_shell_command") && !gate.holds("read_file"));
}

#[test]
fn approval_signals_use_the_shared_vocabulary() {
    let hook = before_tool();
    let mut decoder = HookDecoder::new("gemini_cli:test");
    let mut out = Vec::new();
    decoder.decode(&hook, &mut out);
    let gate = GateConfig {
        tools: vec!["run_shell_command".into()],
        timeout_ms: 30_000,
        default: Verdict::Ask,
    };
    let id = prompt_id(&hook);
    assert_eq!(id, call_id(&hook));
    let requested = approval_requested(&decoder, &hook, &id, &gate);
    assert_eq!(requested.kind, REQUESTED);
    assert_eq!(requested.payload["promptId"], id.as_str());
    assert_eq!(
        requested.payload["agentId"],
        "30568d26-96fc-4a8c-9732-c165521174c8"
    );
    assert_eq!(requested.payload["toolName"], "run_shell_command");
    assert_eq!(requested.payload["input"]["command"], "echo hi > out.txt");
    assert_eq!(requested.payload["choices"], json!(CHOICES));
    assert_eq!(requested.meta("timeoutMs").unwrap(), 30_000);
    assert_eq!(requested.meta("default").unwrap(), "ask");
    assert_eq!(requested.meta("hookEvent").unwrap(), "BeforeTool");
    assert_eq!(requested.correlation_id.as_deref(), Some(id.as_str()));

    let decided = approval_decided(&decoder, &hook, &id, Verdict::Always, "ui:main", "fine");
    assert_eq!(decided.kind, DECIDED);
    assert_eq!(
        decided.payload.get("value"),
        Some(&json!("allow")),
        "{decided:?}"
    );
    assert_eq!(decided.payload["by"], "ui:main");
    assert_eq!(decided.meta("toolName").unwrap(), "run_shell_command");
    assert_eq!(decided.meta("reason").unwrap(), "fine");
    assert_all_valid(&[requested, decided]);

    assert_eq!(state_after(Verdict::Allow), AgentState::Acting);
    assert_eq!(state_after(Verdict::Ask), AgentState::Acting);
    assert_eq!(state_after(Verdict::Deny), AgentState::Thinking);
    assert_eq!(state_after(Verdict::Cancel), AgentState::Idle);
}
