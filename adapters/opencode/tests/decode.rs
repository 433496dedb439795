//! The OpenCode decoder on the real capture of `/event` (`tests/fixtures/`, see its
//! README), on synthetic events for what the capture does not show, and on malformed
//! input.

use patchbay_opencode::{EventDecoder, EventStream, id_time, parse_decoder};
use patchbay_signal::Signal;
use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_testkit::decoding::{comparable, decode_chunked, decode_whole, good_signals, kinds};
use patchbay_testkit::prng::Rng;
use patchbay_testkit::properties::{
    assert_chunking_keeps_comparable, assert_mutated_text_gives_schema_valid_signals,
    assert_random_input_gives_schema_valid_signals, assert_random_splits_keep_stable,
};
use patchbay_testkit::validity::assert_all_decoded_valid;
use serde_json::{Value, json};

const SOURCE: &str = "parse:opencode";
const SESSION: &str = "ses_ddf229cfaffep6iUEXOwj8t312";
const USER_MSG: &str = "msg_220dd63e3001JC5B3LOuaanRPs";
const TOOL_MSG: &str = "msg_220dd6c7f001IM1Olmy6IYUQl6";
const TEXT_MSG: &str = "msg_220dd7a5f0012NnxyXr0elJyZ0";
const PERMISSION: &str = "per_220dd77dd001rIUnF6YIrigUev";

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn decoder() -> Box<dyn StreamDecoder> {
    parse_decoder(SOURCE)
}

/// The signals of `text` (raw SSE), asserting all are valid and none reports bad input.
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

/// Events as the SSE stream carries them.
fn sse(events: &[Value]) -> String {
    events.iter().map(|e| format!("data: {e}\n\n")).collect()
}

/// The signals of the capture that are not `opencode.*` pass-throughs.
fn mapped(out: &[Signal]) -> Vec<&Signal> {
    out.iter()
        .filter(|s| !s.kind.starts_with("opencode."))
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
fn the_capture_decodes_to_valid_signals_one_per_event_at_least() {
    let text = fixture("opencode-events.sse");
    let out = signals(&text);
    let events = text.lines().filter(|l| l.starts_with("data: ")).count();
    assert_eq!(events, 93);
    assert!(out.len() >= events, "{} signals", out.len());
    assert!(out.iter().all(|s| s.source == SOURCE));
    // Event by event through a fresh decoder too: nothing needs the events before it to
    // stay valid.
    for line in text.lines().filter(|l| l.starts_with("data: ")) {
        decoded(&format!("{line}\n\n"));
    }
}

#[test]
fn the_run_in_order() {
    let out = signals(&fixture("opencode-events.sse"));
    let run = mapped(&out);
    assert_eq!(
        run.iter().map(|s| s.kind.as_str()).collect::<Vec<_>>(),
        [
            "task_dispatch",
            "agent_state_change",
            "tool_call",
            "agent_state_change",
            "agent_state_change",
            "approval.requested",
            "approval.decided",
            "agent_state_change",
            "tool_result",
            "agent_state_change",
            "token_usage",
            "text_delta",
            "text_delta",
            "text_delta",
            "text_delta",
            "token_usage",
            "completion",
            "agent_state_change",
        ]
    );
    // Every well-known signal is the session's.
    for s in &run {
        if let Some(agent) = s.payload.get("agentId") {
            assert_eq!(agent, SESSION, "{s:?}");
        }
    }
    let st = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(
        states(&run),
        [
            st("idle", "thinking"),
            st("thinking", "acting"),
            st("acting", "waiting"),
            st("waiting", "acting"),
            st("acting", "thinking"),
            st("thinking", "idle"),
        ]
    );

    let dispatch = first(&run, "task_dispatch");
    assert_eq!(dispatch.payload["taskId"], USER_MSG);
    assert_eq!(dispatch.payload["from"], "user");
    assert_eq!(dispatch.payload["to"], SESSION);
    assert_eq!(
        dispatch.payload["description"],
        "Create out.txt containing hi using the shell."
    );
    assert_eq!(dispatch.correlation_id.as_deref(), Some(USER_MSG));
    assert_eq!(dispatch.timestamp, 1795847709699, "properties.time");

    let call = first(&run, "tool_call");
    assert_eq!(call.payload["toolName"], "bash");
    assert_eq!(call.payload["callId"], "call_1");
    assert_eq!(
        call.payload["input"],
        json!({"command": "echo hi > out.txt", "description": "Write hi to out.txt"})
    );
    assert_eq!(
        call.meta("partId").unwrap(),
        "prt_220dd7683001QL1BHTZRmly3w7"
    );
    assert_eq!(call.correlation_id.as_deref(), Some(TOOL_MSG));

    let asked = first(&run, "approval.requested");
    assert_eq!(asked.payload["promptId"], PERMISSION);
    assert_eq!(asked.payload["agentId"], SESSION);
    assert_eq!(asked.payload["toolName"], "bash");
    assert_eq!(
        asked.payload["choices"],
        json!(["once", "always", "reject"])
    );
    assert_eq!(
        asked.payload["input"],
        json!({"command": "echo hi > out.txt", "patterns": ["echo hi > out.txt"], "always": ["echo *"]})
    );
    let details = asked.meta("opencode").unwrap();
    assert_eq!(details["id"], PERMISSION);
    assert_eq!(details["tool"]["callID"], "call_1");
    assert_eq!(asked.correlation_id.as_deref(), Some(TOOL_MSG));
    // No `properties.time`: the time the event id carries.
    assert_eq!(asked.timestamp, 1795847714784);

    let decided = first(&run, "approval.decided");
    assert_eq!(
        Value::from(decided.payload.clone()),
        json!({"promptId": PERMISSION, "value": "allow", "by": "opencode"})
    );
    assert_eq!(decided.meta("reply").unwrap(), "once");
    assert_eq!(decided.correlation_id.as_deref(), Some(TOOL_MSG));

    let result = first(&run, "tool_result");
    assert_eq!(result.payload["toolName"], "bash");
    assert_eq!(result.payload["callId"], "call_1");
    assert_eq!(result.payload["success"], true);
    assert_eq!(
        result.payload["output"],
        json!({"output": "(no output)", "exitCode": 0})
    );
    assert_eq!(
        result.meta("opencode").unwrap()["title"],
        "echo hi > out.txt"
    );

    let deltas: Vec<&&Signal> = run.iter().filter(|s| s.kind == "text_delta").collect();
    let text: String = deltas
        .iter()
        .map(|s| s.payload["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Done. I wrote hi to out.txt.");
    assert!(
        deltas
            .iter()
            .all(|s| s.correlation_id.as_deref() == Some(TEXT_MSG))
    );

    let usage: Vec<(u64, u64, Option<f64>)> = run
        .iter()
        .filter(|s| s.kind == "token_usage")
        .map(|s| {
            assert_eq!(s.payload["model"], "fake-model");
            assert_eq!(s.meta("reasoning").unwrap(), 0);
            assert_eq!(s.meta("cache").unwrap(), &json!({"write": 0, "read": 0}));
            (
                s.payload["promptTokens"].as_u64().unwrap(),
                s.payload["completionTokens"].as_u64().unwrap(),
                s.payload["cost"].as_f64(),
            )
        })
        .collect();
    assert_eq!(usage, [(200, 12, Some(0.0)), (400, 12, Some(0.0))]);
    let reasons: Vec<&Value> = run
        .iter()
        .filter(|s| s.kind == "token_usage")
        .map(|s| s.meta("reason").unwrap())
        .collect();
    assert_eq!(reasons, [&json!("tool-calls"), &json!("stop")]);

    let done = first(&run, "completion");
    assert_eq!(done.payload["taskId"], USER_MSG);
    assert_eq!(done.payload["success"], true);
    assert_eq!(done.payload["result"], "Done. I wrote hi to out.txt.");
    let last = run.last().unwrap();
    assert_eq!(last.payload["to"], "idle");
}

#[test]
fn each_tool_call_appears_once_and_nothing_is_said_twice() {
    let out = signals(&fixture("opencode-events.sse"));
    let count = |kind: &str| out.iter().filter(|s| s.kind == kind).count();
    assert_eq!(count("tool_call"), 1);
    assert_eq!(count("tool_result"), 1);
    assert_eq!(count("approval.requested"), 1);
    assert_eq!(count("approval.decided"), 1);
    assert_eq!(count("task_dispatch"), 1);
    // `session.status idle` said it: `session.idle` passes as it is.
    assert_eq!(count("opencode.session.idle"), 1);
    // The final text part adds nothing to the deltas: it passes as it is.
    let text_updates: Vec<&Signal> = out
        .iter()
        .filter(|s| {
            s.kind == "opencode.message.part.updated" && s.payload["part"]["type"] == "text"
        })
        .collect();
    assert_eq!(text_updates.len(), 2);
    assert_eq!(
        text_updates[1].payload["part"]["text"],
        "Done. I wrote hi to out.txt."
    );
}

#[test]
fn pass_throughs_keep_the_properties_and_mark_the_internal_ones() {
    let out = signals(&fixture("opencode-events.sse"));
    assert_eq!(out[0].kind, "opencode.server.connected");
    assert!(out[0].payload.is_empty());
    assert!(out[0].meta("internal").is_none());
    let created = &out[1];
    assert_eq!(created.kind, "opencode.session.created");
    assert_eq!(created.payload["info"]["title"], "agentcli test");
    let internal: Vec<&Signal> = out
        .iter()
        .filter(|s| s.meta("internal") == Some(&json!(true)))
        .collect();
    // 45 plugin.added, 2 catalog.updated, reference.updated, integration.updated.
    assert_eq!(internal.len(), 49);
    assert_eq!(
        out.iter()
            .filter(|s| s.kind == "opencode.plugin.added")
            .count(),
        45
    );
    assert!(internal.iter().all(|s| {
        [
            "opencode.plugin.added",
            "opencode.catalog.updated",
            "opencode.reference.updated",
            "opencode.integration.updated",
        ]
        .contains(&s.kind.as_str())
    }));
    let updated = out
        .iter()
        .find(|s| s.kind == "opencode.message.updated")
        .unwrap();
    assert_eq!(updated.correlation_id.as_deref(), Some(USER_MSG));
}

#[test]
fn splitting_the_capture_does_not_change_the_signals() {
    let text = fixture("opencode-events.sse");
    let mut rng = Rng(0x0c0d_e0c0);
    assert_chunking_keeps_comparable(decoder, &text, "opencode-events.sse", &mut rng);
    assert_random_splits_keep_stable(decoder, &text, "opencode-events.sse", &mut rng, 64);
    // Cut in two at every byte offset of the events from the tool call running to the
    // permission replied, and of the text deltas (every kind of place: the `data:` name,
    // a JSON string, between the two newlines), and at 300 random offsets anywhere.
    let whole: Vec<_> = decode_whole(decoder().as_mut(), &text)
        .iter()
        .map(comparable)
        .collect();
    let bytes = text.as_bytes();
    let line_of = |needle: &str| text[..text.find(needle).unwrap()].rfind("data: ").unwrap();
    let end_of = |needle: &str| {
        let at = text.find(needle).unwrap();
        at + text[at..].find("\n\n").unwrap() + 2
    };
    let tool = line_of(r#""status":"running""#)..end_of(r#""type":"permission.replied""#);
    let deltas = line_of(r#""delta":"Done. ""#)..end_of(r#""delta":".""#);
    let random: Vec<usize> = (0..300).map(|_| 1 + rng.below(bytes.len() - 1)).collect();
    for cut in tool.chain(deltas).chain(random) {
        let mut d = decoder();
        let mut out = Vec::new();
        d.feed(&bytes[..cut], &mut out);
        d.feed(&bytes[cut..], &mut out);
        d.finish(&mut out);
        let split: Vec<_> = out.iter().map(comparable).collect();
        assert!(split == whole, "cut at {cut}");
    }
    // And one byte at a time, with CRLF line ends.
    let crlf = text.replace('\n', "\r\n");
    let split: Vec<_> = decode_chunked(decoder().as_mut(), crlf.as_bytes(), &[1])
        .iter()
        .map(comparable)
        .collect();
    assert_eq!(split, whole);
}

#[test]
fn the_decoder_remembers_sessions_and_pending_permissions() {
    let text = fixture("opencode-events.sse");
    let mut decoder = EventDecoder::new(SOURCE);
    let mut out = Vec::new();
    let mut seen_pending = false;
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let event: Value = serde_json::from_str(data).unwrap();
        decoder.event(&event, &mut out);
        if event["type"] == "permission.asked" {
            let pending: Vec<_> = decoder.pending().collect();
            assert_eq!(pending.len(), 1);
            let p = pending[0];
            assert_eq!(p.id, PERMISSION);
            assert_eq!(p.session_id, SESSION);
            assert_eq!(p.permission, "bash");
            assert_eq!(p.patterns, ["echo hi > out.txt"]);
            assert_eq!(p.always, ["echo *"]);
            assert_eq!(p.message_id.as_deref(), Some(TOOL_MSG));
            assert_eq!(p.call_id.as_deref(), Some("call_1"));
            let board = &p.approval;
            assert_eq!(
                (board.program.as_str(), board.component.as_str()),
                ("opencode", SOURCE)
            );
            assert_eq!(board.agent_id, SESSION);
            assert_eq!(board.tool_name, "bash");
            assert_eq!(board.choices, ["once", "always", "reject"]);
            assert_eq!(board.requested_at_ms, 1795847714784);
            assert_eq!(
                decoder.state(SESSION),
                Some(patchbay_signal::well_known::AgentState::Waiting)
            );
            seen_pending = true;
        }
    }
    assert!(seen_pending);
    assert_eq!(
        decoder.pending().count(),
        0,
        "replied permissions are forgotten"
    );
    assert_eq!(decoder.sessions().collect::<Vec<_>>(), [SESSION]);
    assert_eq!(decoder.current_session(), Some(SESSION));
    assert_eq!(
        decoder.state(SESSION),
        Some(patchbay_signal::well_known::AgentState::Idle)
    );
    assert!(out.iter().all(|d| !d.is_bad()));

    // A transport takes a permission to answer it.
    let mut decoder = EventDecoder::new(SOURCE);
    let asked = json!({"type": "permission.asked", "properties": {"id": "per_1", "sessionID": "ses_a",
        "permission": "edit", "patterns": ["a.txt"], "metadata": {"filepath": "a.txt"}, "always": ["*"]}});
    decoder.event(&asked, &mut out);
    let taken = decoder.take_pending("per_1").unwrap();
    assert_eq!(taken.permission, "edit");
    assert_eq!(taken.call_id, None);
    assert!(decoder.take_pending("per_1").is_none());
}

#[test]
fn a_decision_sent_through_patchbay_names_who_made_it() {
    let mut decoder = EventDecoder::new(SOURCE);
    let mut out = Vec::new();
    for id in ["per_1", "per_2"] {
        let asked = json!({"type": "permission.asked", "properties": {"id": id,
            "sessionID": "ses_a", "permission": "bash", "patterns": ["ls"]}});
        decoder.event(&asked, &mut out);
    }
    // The same permission again (listed, then seen on the stream): asked once.
    let again = json!({"type": "permission.asked", "properties": {"id": "per_1",
        "sessionID": "ses_a", "permission": "bash", "patterns": ["ls"]}});
    decoder.event(&again, &mut out);
    let asked: Vec<_> = good_signals(std::mem::take(&mut out))
        .into_iter()
        .filter(|s| s.kind == "approval.requested")
        .map(|s| s.payload["promptId"].clone())
        .collect();
    assert_eq!(asked, ["per_1", "per_2"]);
    decoder.answered("per_1", "sidecar:ui");
    let replied = |id: &str, reply: &str| {
        json!({"type": "permission.replied",
            "properties": {"sessionID": "ses_a", "requestID": id, "reply": reply}})
    };
    decoder.event(&replied("per_1", "reject"), &mut out);
    // OpenCode rejects the session's other permissions along with it: no one of ours.
    decoder.event(&replied("per_2", "reject"), &mut out);
    let decided: Vec<Value> = good_signals(out)
        .into_iter()
        .filter(|s| s.kind == "approval.decided")
        .map(|s| Value::from(s.payload.clone()))
        .collect();
    assert_eq!(
        decided,
        [
            json!({"promptId": "per_1", "value": "deny", "by": "sidecar:ui"}),
            json!({"promptId": "per_2", "value": "deny", "by": "opencode"}),
        ]
    );
}

#[test]
fn events_the_capture_does_not_show() {
    let s = "ses_b";
    let ev = |kind: &str, props: Value| json!({"type": kind, "properties": props});
    let part = |p: Value| ev("message.part.updated", json!({"sessionID": s, "part": p}));
    let events = [
        ev(
            "session.status",
            json!({"sessionID": s, "status": {"type": "busy"}}),
        ),
        ev(
            "message.updated",
            json!({"sessionID": s, "info": {"id": "m1", "role": "assistant", "sessionID": s,
            "parentID": "u1", "modelID": "gpt-x"}}),
        ),
        part(
            json!({"id": "r1", "messageID": "m1", "sessionID": s, "type": "reasoning", "text": ""}),
        ),
        ev(
            "message.part.delta",
            json!({"sessionID": s, "messageID": "m1", "partID": "r1", "field": "text", "delta": "hmm"}),
        ),
        // An update that adds to the deltas: only what it adds.
        part(
            json!({"id": "r1", "messageID": "m1", "sessionID": s, "type": "reasoning", "text": "hmm, ok"}),
        ),
        // A text part never streamed: all of it.
        part(
            json!({"id": "t1", "messageID": "m1", "sessionID": s, "type": "text", "text": "Hello"}),
        ),
        part(
            json!({"id": "p1", "messageID": "m1", "sessionID": s, "type": "tool", "tool": "read", "callID": "c1",
            "state": {"status": "pending", "input": {}, "raw": ""}}),
        ),
        part(
            json!({"id": "p1", "messageID": "m1", "sessionID": s, "type": "tool", "tool": "read", "callID": "c1",
            "state": {"status": "error", "input": {"filePath": "/nope"}, "error": "File not found: /nope"}}),
        ),
        // The same call again: nothing new.
        part(
            json!({"id": "p1", "messageID": "m1", "sessionID": s, "type": "tool", "tool": "read", "callID": "c1",
            "state": {"status": "error", "input": {"filePath": "/nope"}, "error": "File not found: /nope"}}),
        ),
        ev(
            "permission.asked",
            json!({"id": "per_2", "sessionID": s, "permission": "bash", "patterns": ["rm -rf x"],
            "metadata": {"command": "rm -rf x"}, "always": ["rm *"], "tool": {"messageID": "m1", "callID": "c2"}}),
        ),
        ev(
            "permission.replied",
            json!({"sessionID": s, "requestID": "per_2", "reply": "reject"}),
        ),
        ev(
            "permission.asked",
            json!({"id": "per_3", "sessionID": s, "permission": "bash", "patterns": ["ls"]}),
        ),
        ev(
            "permission.replied",
            json!({"sessionID": s, "requestID": "per_3", "reply": "always"}),
        ),
        ev(
            "session.status",
            json!({"sessionID": s, "status": {"type": "retry", "attempt": 1, "message": "rate limited", "next": 5}}),
        ),
        ev(
            "session.error",
            json!({"sessionID": s, "error": {"name": "ProviderAuthError", "data": {"message": "bad key"}}}),
        ),
        ev("session.idle", json!({"sessionID": s})),
        ev("server.heartbeat", json!({})),
    ];
    let out = signals(&sse(&events));
    assert_eq!(
        kinds(&out),
        [
            "agent_state_change",
            "opencode.message.updated",
            "opencode.message.part.updated",
            "thinking",
            "thinking",
            "text_delta",
            "opencode.message.part.updated",
            "tool_call",
            "tool_result",
            "opencode.message.part.updated",
            "agent_state_change",
            "approval.requested",
            "approval.decided",
            "agent_state_change",
            "agent_state_change",
            "approval.requested",
            "approval.decided",
            "agent_state_change",
            "error",
            "error",
            "agent_state_change",
            "completion",
            "agent_state_change",
            "opencode.server.heartbeat",
        ]
    );
    assert_eq!(out[3].payload["content"], "hmm");
    assert_eq!(out[4].payload["content"], ", ok");
    assert_eq!(out[5].payload["content"], "Hello");
    assert_eq!(out[7].payload["toolName"], "read");
    assert_eq!(out[7].payload["input"], json!({"filePath": "/nope"}));
    assert_eq!(out[8].payload["success"], false);
    assert_eq!(
        out[8].payload["output"],
        json!({"error": "File not found: /nope"})
    );
    assert_eq!(out[10].payload["to"], "waiting");
    assert_eq!(out[12].payload["value"], "deny");
    assert_eq!(out[13].payload["to"], "thinking");
    assert_eq!(out[14].payload["to"], "waiting");
    assert_eq!(out[16].payload["value"], "always");
    assert_eq!(out[17].payload["to"], "acting");
    assert_eq!(out[18].payload["code"], "retry");
    assert_eq!(out[18].payload["severity"], "warning");
    assert_eq!(out[18].meta("opencode").unwrap()["attempt"], 1);
    assert_eq!(out[19].payload["code"], "ProviderAuthError");
    assert_eq!(out[19].payload["message"], "bad key");
    assert_eq!(out[19].payload["severity"], "error");
    assert_eq!(out[20].payload["to"], "error");
    // The turn (the assistant message's parent) failed.
    assert_eq!(out[21].payload["taskId"], "u1");
    assert_eq!(out[21].payload["success"], false);
    assert_eq!(out[21].payload["result"], "Hello");
    assert_eq!(
        (&out[22].payload["from"], &out[22].payload["to"]),
        (&json!("error"), &json!("idle"))
    );
    assert_eq!(out[23].meta("internal").unwrap(), true);
    assert!(
        out.iter()
            .all(|x| x.payload.get("agentId").is_none_or(|a| a == s))
    );
}

#[test]
fn an_event_without_a_session_belongs_to_the_last_one_seen() {
    let out = signals(&sse(&[
        json!({"type": "server.connected", "properties": {}}),
        json!({"type": "session.status", "properties": {"status": {"type": "busy"}}}),
        json!({"type": "session.created", "properties": {"info": {"id": "ses_c", "title": "x"}}}),
        json!({"type": "session.status", "properties": {"status": {"type": "busy"}}}),
    ]));
    assert_eq!(
        out[1].payload["agentId"], SOURCE,
        "no session yet: the source"
    );
    assert_eq!(out[3].payload["agentId"], "ses_c");
}

#[test]
fn event_ids_carry_their_time() {
    // The capture's first events have no `properties.time`: their ids give it.
    let reference = 1795847709699;
    assert_eq!(
        id_time("evt_220dd613e001pGzOZYkbM5oS0m", reference),
        Some(1795847708990)
    );
    assert_eq!(
        id_time("per_220dd77dd001rIUnF6YIrigUev", reference),
        Some(1795847714781)
    );
    // Nearest to the reference, across the 2^36 ms wrap.
    let period = 1i64 << 36;
    assert_eq!(
        id_time("evt_220dd613e001pGzOZYkbM5oS0m", reference + period - 10),
        Some(1795847708990 + period)
    );
    for bad in [
        "evt",
        "evt_",
        "evt_220dd613e001",
        "evt_xyz0d613e001abc",
        "plain",
    ] {
        assert_eq!(id_time(bad, reference), None, "{bad}");
    }
    let out = signals(&fixture("opencode-events.sse"));
    assert_eq!(out[0].timestamp, 1795847708990);
    // Never backwards by more than OpenCode's own ordering of events.
    assert!(
        out.windows(2)
            .all(|w| w[1].timestamp + 1000 >= w[0].timestamp)
    );
}

#[test]
fn malformed_events_are_counted_and_never_panic() {
    let cases: &[(&str, Option<&str>)] = &[
        // (data, the type it gives; None: a counted bad input)
        (r#"{"type":"message.part.del"#, None),
        ("42", None),
        (r#""text""#, None),
        ("[1,2]", None),
        ("not json at all", None),
        ("{}", None),
        (r#"{"properties":{}}"#, None),
        (r#"{"type":5}"#, None),
        (r#"{"type":"x","properties":7}"#, None),
        (r#"{"type":"x","properties":[1]}"#, None),
        (r#"{"type":"some.new"}"#, Some("opencode.some.new")),
        (r#"{"type":"x","properties":null}"#, Some("opencode.x")),
        (
            r#"{"type":"message.part.delta","properties":{"delta":5,"field":"text"}}"#,
            Some("opencode.message.part.delta"),
        ),
        (
            r#"{"type":"message.part.delta","properties":{"delta":"x","field":"title"}}"#,
            Some("opencode.message.part.delta"),
        ),
        (
            r#"{"type":"message.part.updated","properties":{"part":5}}"#,
            Some("opencode.message.part.updated"),
        ),
        (
            r#"{"type":"message.part.updated","properties":{"part":{"type":"tool"}}}"#,
            Some("opencode.message.part.updated"),
        ),
        (
            r#"{"type":"message.part.updated","properties":{"part":{"type":"step-finish","tokens":"many"}}}"#,
            Some("opencode.message.part.updated"),
        ),
        (
            r#"{"type":"session.status","properties":{"status":"busy"}}"#,
            Some("opencode.session.status"),
        ),
        (
            r#"{"type":"permission.asked","properties":{"id":3}}"#,
            Some("opencode.permission.asked"),
        ),
        (
            r#"{"type":"permission.replied","properties":{"requestID":"per_x"}}"#,
            Some("opencode.permission.replied"),
        ),
        (
            r#"{"type":"session.idle","properties":{"sessionID":7}}"#,
            Some("opencode.session.idle"),
        ),
    ];
    for (data, kind) in cases {
        let out = decoded(&format!("data: {data}\n\n"));
        assert_eq!(out.len(), 1, "{data}: {out:?}");
        match kind {
            None => {
                assert!(out[0].is_bad(), "{data}");
                let s = out[0].clone().into_signal();
                assert_eq!(s.payload["code"], "bad_frame");
            }
            Some(kind) => {
                assert!(!out[0].is_bad(), "{data}");
                assert_eq!(out[0].clone().into_signal().kind, *kind, "{data}");
            }
        }
    }
    // A bad event between good ones changes nothing around it.
    let text = fixture("opencode-events.sse");
    let (head, tail) = text.split_at(text.find("data: {\"id\":\"evt_220dd6430").unwrap());
    let damaged = format!("{head}data: {{oops\n\n{tail}");
    let out = decoded(&damaged);
    assert_eq!(out.iter().filter(|d| d.is_bad()).count(), 1);
    let good: Vec<_> = out.iter().filter(|d| !d.is_bad()).map(comparable).collect();
    let clean: Vec<_> = decoded(&text).iter().map(comparable).collect();
    assert_eq!(good, clean);
    // Random and damaged input: valid signals, no panic.
    let mut rng = Rng(0x0bad_0bad);
    let pieces = [
        "data: ",
        "\n",
        "\n\n",
        "{",
        "}",
        r#""type":"message.part.updated""#,
        r#""properties":{"part":{"type":"tool","state":{"status":"completed"}}}"#,
        r#"{"type":"permission.replied","properties":{"requestID":"per_1","reply":"once"}}"#,
        ":",
        "event: x\n",
    ];
    assert_random_input_gives_schema_valid_signals(decoder, &pieces, &mut rng, 100);
    assert_mutated_text_gives_schema_valid_signals(decoder, &text, &pieces, &mut rng, 100);
}

#[test]
fn an_oversized_event_is_counted() {
    let mut stream = EventStream::new(EventDecoder::new(SOURCE));
    let mut out = Vec::new();
    let huge = format!("data: {}\n\n", "x".repeat(2 << 20));
    stream.feed(huge.as_bytes(), &mut out);
    stream.feed(b"data: {\"type\":\"server.connected\"}\n\n", &mut out);
    stream.finish(&mut out);
    assert_all_decoded_valid(&out);
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(out[0].is_bad());
    assert_eq!(
        out[1].clone().into_signal().kind,
        "opencode.server.connected"
    );
}
