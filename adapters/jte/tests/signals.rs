//! Commands → signals, the `parse` decoder, the control encoder, and the snippet of docs/runtimes.md.

use patchbay_jte::{
    JteCommand, JteDecoder, JteEvent, JteParser, JteSignals, OSC_TO_PROGRAM, OSC_TO_TERMINAL,
    command_signal, encode_control, encode_escape, parse_decoder,
};
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{Signal, object};
use patchbay_testkit::prng::Rng;
use serde_json::{Value, json};

const SOURCE: &str = "parse:jte";

fn command(json: Value) -> JteCommand {
    JteCommand {
        osc: OSC_TO_TERMINAL,
        num_bytes: Some(0),
        json: json.as_object().unwrap().clone(),
    }
}

fn assert_valid(signal: &Signal) {
    patchbay_testkit::assert_schema_valid(&signal.to_value());
}

fn osc(json: &Value) -> Vec<u8> {
    format!("\x1b]23198;0;{json}\x07").into_bytes()
}

fn decode_bytes(bytes: &[u8]) -> Vec<Decoded> {
    let mut decoder = parse_decoder(SOURCE);
    let mut out = Vec::new();
    decoder.feed(bytes, &mut out);
    decoder.finish(&mut out);
    out
}

#[test]
fn a_command_is_a_signal_of_its_name() {
    let s = command_signal(
        SOURCE,
        &command(json!({
            "command": "term:setstyle", "rpcid": "r-1", "timeout": 500, "cont": false,
            "datatype": "style", "data": {"color": 31, "bold": true}, "vendor_field": [1]
        })),
        1234,
    );
    assert_eq!(s.kind, "term:setstyle");
    assert_eq!(s.timestamp, 1234);
    assert_eq!(s.source, SOURCE);
    assert_eq!(s.correlation_id.as_deref(), Some("r-1"));
    assert_eq!(
        Value::Object(s.payload.clone()),
        json!({"color": 31, "bold": true})
    );
    assert_eq!(
        Value::Object(s.metadata.as_deref().unwrap().clone()),
        json!({"timeout": 500, "cont": false, "datatype": "style", "vendor_field": [1]})
    );
    assert_valid(&s);
}

#[test]
fn data_that_is_not_an_object_and_other_ids() {
    let s = command_signal(
        SOURCE,
        &command(json!({"command": "x", "data": [1, 2], "reqid": "w-9"})),
        0,
    );
    assert_eq!(Value::Object(s.payload.clone()), json!({"value": [1, 2]}));
    assert_eq!(
        s.correlation_id.as_deref(),
        Some("w-9"),
        "Wave Terminal's reqid"
    );
    let s = command_signal(SOURCE, &command(json!({"command": "x", "data": "text"})), 0);
    assert_eq!(s.payload["value"], "text");
    let s = command_signal(SOURCE, &command(json!({"command": "x", "data": null})), 0);
    assert!(s.payload.is_empty());
    let s = command_signal(SOURCE, &command(json!({"command": "x"})), 0);
    assert!(s.payload.is_empty());
    assert!(s.metadata.is_none());
    assert!(s.correlation_id.is_none());
    let s = command_signal(
        SOURCE,
        &command(json!({"command": "x", "rpcid": 7, "reqid": "w"})),
        0,
    );
    assert_eq!(s.correlation_id.as_deref(), Some("7"));
    assert_eq!(s.meta("reqid"), Some(&json!("w")));
}

#[test]
fn responses_and_continuations() {
    let s = command_signal(
        SOURCE,
        &command(
            json!({"resid": "r-1", "error": "ECTIMEOUT: Request timed out", "data": {"partial": true}}),
        ),
        0,
    );
    assert_eq!(s.kind, "jte.response");
    assert_eq!(s.correlation_id.as_deref(), Some("r-1"));
    assert_eq!(s.meta("resid"), Some(&json!("r-1")));
    assert_eq!(
        s.meta("error"),
        Some(&json!("ECTIMEOUT: Request timed out"))
    );
    let s = command_signal(
        SOURCE,
        &command(json!({"rpcid": "r-2", "cont": true, "data": {"n": 2}})),
        0,
    );
    assert_eq!(s.kind, "jte.packet");
    assert_eq!(s.correlation_id.as_deref(), Some("r-2"));
    let s = command_signal(SOURCE, &command(json!({"command": 5})), 0);
    assert_eq!(s.kind, "jte.packet");
    assert_eq!(s.meta("command"), Some(&json!(5)));
}

#[test]
fn signal_type_commands_are_those_signals_and_schema_valid() {
    let cases = [
        json!({"command": "text_delta", "data": {"content": "hi"}}),
        json!({"command": "thinking", "data": {"agentId": "a", "content": "hmm"}}),
        json!({"command": "tool_call", "rpcid": "c1", "data": {"toolName": "grep", "callId": "c1", "input": {"q": "x"}}}),
        json!({"command": "tool_result", "data": {"toolName": "grep", "agentId": "a", "success": true, "output": {"n": 3}}}),
        json!({"command": "agent_state_change", "data": {"from": "idle", "to": "thinking"}}),
        json!({"command": "completion", "rpcid": "task-1", "data": {"success": true}}),
        json!({"command": "error", "data": {"message": "boom", "severity": "warning"}}),
        json!({"command": "token_usage", "data": {"promptTokens": 10, "completionTokens": 5, "model": "m"}}),
        json!({"command": "text_delta", "data": {"agentId": "a", "content": "x", "color": "red"}}),
    ];
    for case in cases {
        let s = command_signal(SOURCE, &command(case.clone()), 0);
        assert_eq!(s.kind, case["command"], "{}", s.to_json());
        assert_valid(&s);
    }
    let s = command_signal(
        SOURCE,
        &command(json!({"command": "text_delta", "data": {"content": "hi"}})),
        0,
    );
    assert_eq!(
        s.payload["agentId"], SOURCE,
        "repaired: agentId from the source"
    );
    let s = command_signal(
        SOURCE,
        &command(json!({"command": "completion", "rpcid": "task-1", "data": {"success": true}})),
        0,
    );
    assert_eq!(
        s.payload["taskId"], "task-1",
        "repaired: taskId from the correlation id"
    );
    let s = command_signal(
        SOURCE,
        &command(
            json!({"command": "text_delta", "data": {"agentId": "a", "content": "x", "color": "red"}}),
        ),
        0,
    );
    assert_eq!(s.meta("extra"), Some(&json!({"color": "red"})));
    // What cannot be repaired never passes as a well-known type.
    let s = command_signal(
        SOURCE,
        &command(
            json!({"command": "agent_state_change", "data": {"from": "idle", "to": "flying"}}),
        ),
        0,
    );
    assert_eq!(s.kind, "invalid.agent_state_change");
    assert_valid(&s);
}

#[test]
fn raw_terminal_output_decodes_to_signals() {
    let mut bytes = b"$ agent run\r\n".to_vec();
    bytes.extend(osc(&json!({"command": "agent_state_change", "data": {"agentId": "a", "from": "idle", "to": "thinking"}})));
    bytes.extend_from_slice(b"thinking...\r\n\x1b[32mok\x1b[0m\r\n");
    bytes.extend(osc(
        &json!({"command": "text_delta", "data": {"agentId": "a", "content": "Hello"}}),
    ));
    bytes.extend_from_slice(b"\x1b]23198;0;{broken\x07");
    // An echo of a control command patchbay wrote to the program: not a signal.
    bytes.extend(encode_control(&Signal::new("control.pause", "x", object! {})).unwrap());
    bytes.extend(osc(
        &json!({"command": "completion", "rpcid": "t1", "data": {"agentId": "a", "success": true}}),
    ));
    let out = decode_bytes(&bytes);
    let bad: Vec<bool> = out.iter().map(Decoded::is_bad).collect();
    assert_eq!(bad, [false, false, true, false]);
    let signals: Vec<Signal> = out.into_iter().map(Decoded::into_signal).collect();
    let kinds: Vec<&str> = signals.iter().map(|s| s.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["agent_state_change", "text_delta", "error", "completion"]
    );
    for s in &signals {
        assert_valid(s);
        assert_eq!(s.source, SOURCE);
    }
    assert_eq!(signals[2].payload["code"], "bad_frame");
    assert!(
        signals[2].payload["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
    assert_eq!(signals[2].meta("raw"), Some(&json!("{broken")));
    assert_eq!(
        signals[2].timestamp, signals[1].timestamp,
        "bad input keeps the last good time"
    );
    assert_eq!(signals[3].payload["taskId"], "t1");
}

#[test]
fn the_wrap_path_gives_passthrough_and_signals() {
    let mut decoder = JteDecoder::new("wrap:agent");
    let mut pass = Vec::new();
    let mut out = Vec::new();
    let mut bytes = b"visible ".to_vec();
    bytes.extend(osc(
        &json!({"command": "text_delta", "data": {"content": "x"}}),
    ));
    bytes.extend(encode_control(&Signal::new("control.step", "x", object! {"n" => 2})).unwrap());
    bytes.extend_from_slice(b"text");
    for chunk in bytes.chunks(3) {
        decoder.feed_terminal(chunk, &mut pass, &mut out);
    }
    decoder.finish_terminal(&mut pass, &mut out);
    assert_eq!(pass, b"visible text");
    assert_eq!(out.len(), 1);
    assert_eq!(decoder.echoes(), 1);
    // A parser reading the terminal side accepts 23199 instead.
    let mut parser = JteParser::new();
    let events = parser.feed(&bytes).events;
    let mut signals = JteSignals::new("term").accepting(OSC_TO_PROGRAM);
    let mut out = Vec::new();
    signals.convert(events, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].clone().into_signal().kind, "control:step");
    assert_eq!(signals.echoes(), 1);
}

#[test]
fn control_signals_encode_as_osc_23199() {
    let bytes = encode_control(&Signal::new("control.pause", "ui:x", object! {})).unwrap();
    let json = br#"{"command":"control:pause","data":{}}"#;
    let mut expected = format!("\x1b]23199;{};", json.len()).into_bytes();
    expected.extend_from_slice(json);
    expected.push(0x07);
    assert_eq!(bytes, expected);

    for (kind, payload) in [
        ("control.step", object! {"n" => 3}),
        ("control.continue", object! {}),
        ("control.interrupt", object! {}),
        ("control.cancel", object! {}),
        ("control.quit", object! {}),
        ("control.arm", object! {}),
        (
            "control.answer",
            object! {"promptId" => "p1", "value" => "ünïcödé ✓ 💜"},
        ),
        (
            "control.answer",
            object! {"promptId" => "p2", "cancelled" => true},
        ),
    ] {
        let bytes = encode_control(&Signal::new(kind, "ui:x", payload.clone())).unwrap();
        assert!(bytes.is_ascii(), "{kind}: pure ASCII on the wire");
        let mut parser = JteParser::new();
        let out = parser.feed(&bytes);
        assert!(out.passthrough.is_empty());
        let [JteEvent::Command(c)] = out.events.as_slice() else {
            panic!("{kind}: {:?}", out.events)
        };
        assert_eq!(c.osc, OSC_TO_PROGRAM);
        assert_eq!(c.json["command"], kind.replacen("control.", "control:", 1));
        assert_eq!(c.json["data"], Value::Object(payload));
        // num-bytes is exact.
        let text = String::from_utf8(bytes.clone()).unwrap();
        let declared: usize = text.split(';').nth(1).unwrap().parse().unwrap();
        assert_eq!(declared, bytes.len() - text.find("{").unwrap() - 1);
    }
    assert!(encode_control(&Signal::new("text_delta", "x", object! {})).is_err());
    assert_eq!(
        encode_escape(23198, &json!({"a": "é"})),
        b"\x1b]23198;14;{\"a\":\"\\u00e9\"}\x07"
    );
}

/// The snippet of docs/runtimes.md: a shell agent emits a text_delta and a tool_call with `printf`.
const SNIPPET: &str = r#"printf '\033]23198;0;{"command":"text_delta","data":{"agentId":"my-agent","content":"Hello from the shell"}}\007'
printf '\033]23198;0;{"command":"tool_call","rpcid":"call-1","data":{"agentId":"my-agent","toolName":"grep","callId":"call-1","input":{"pattern":"TODO"}}}\007'
"#;

fn check_snippet_bytes(bytes: &[u8]) {
    let signals: Vec<Signal> = decode_bytes(bytes)
        .into_iter()
        .map(Decoded::into_signal)
        .collect();
    assert_eq!(signals.len(), 2, "{signals:?}");
    assert_eq!(signals[0].kind, "text_delta");
    assert_eq!(
        Value::Object(signals[0].payload.clone()),
        json!({"agentId": "my-agent", "content": "Hello from the shell"})
    );
    assert_eq!(signals[1].kind, "tool_call");
    assert_eq!(signals[1].correlation_id.as_deref(), Some("call-1"));
    assert_eq!(
        Value::Object(signals[1].payload.clone()),
        json!({"agentId": "my-agent", "toolName": "grep", "callId": "call-1", "input": {"pattern": "TODO"}})
    );
    for s in &signals {
        assert!(s.metadata.is_none());
        assert_valid(s);
    }
    // And nothing of it reaches the user's terminal.
    let out = JteParser::new().feed(bytes);
    assert!(out.passthrough.is_empty());
}

#[test]
fn the_readme_snippet_decodes_as_documented() {
    // The bytes printf writes for the snippet (`\033` is ESC, `\007` is BEL).
    let bytes = SNIPPET
        .lines()
        .map(|l| {
            l.trim_start_matches("printf '")
                .trim_end_matches('\'')
                .replace("\\033", "\x1b")
                .replace("\\007", "\x07")
        })
        .collect::<String>();
    check_snippet_bytes(bytes.as_bytes());
}

#[cfg(unix)]
#[test]
fn the_readme_snippet_run_by_a_real_shell() {
    let output = match std::process::Command::new("sh")
        .arg("-c")
        .arg(SNIPPET)
        .output()
    {
        Ok(output) => output,
        Err(err) => panic!("`sh` is needed to run the snippet of docs/runtimes.md: {err}"),
    };
    assert!(output.status.success());
    check_snippet_bytes(&output.stdout);
}

#[test]
fn arbitrary_escapes_give_valid_signals_only() {
    let words = [
        "text_delta",
        "tool_call",
        "error",
        "completion",
        "agent_state_change",
        "x:y",
    ];
    let keys = [
        "command", "rpcid", "reqid", "resid", "data", "agentId", "content", "toolName", "success",
        "to",
    ];
    let mut rng = Rng(77);
    let mut bytes = Vec::new();
    for _ in 0..500 {
        let mut data = serde_json::Map::new();
        let mut top = serde_json::Map::new();
        for _ in 0..(rng.next_u64() % 5) {
            let key = keys[(rng.next_u64() % keys.len() as u64) as usize];
            let value = match rng.next_u64() % 5 {
                0 => json!(words[(rng.next_u64() % words.len() as u64) as usize]),
                1 => json!(rng.next_u64() % 100),
                2 => json!(true),
                3 => json!({"k": "v"}),
                _ => Value::Null,
            };
            if rng.next_u64().is_multiple_of(2) {
                data.insert(key.into(), value);
            } else {
                top.insert(key.into(), value);
            }
        }
        top.insert("data".into(), Value::Object(data));
        if !rng.next_u64().is_multiple_of(4) {
            top.insert(
                "command".into(),
                json!(words[(rng.next_u64() % words.len() as u64) as usize]),
            );
        }
        bytes.extend(osc(&Value::Object(top)));
        if rng.next_u64().is_multiple_of(7) {
            bytes.extend_from_slice(b"\x1b]23198;0;{\"oops\x07");
        }
    }
    for decoded in decode_bytes(&bytes) {
        let s = decoded.into_signal();
        assert_valid(&s);
        assert!(
            !patchbay_testkit::WELL_KNOWN.contains(&s.kind.as_str())
                || patchbay_signal::well_known::check_signal(&s).is_ok()
        );
    }
    // Random bytes through the signal decoder never panic.
    for _ in 0..200 {
        let junk: Vec<u8> = (0..(rng.next_u64() % 300))
            .map(|_| rng.next_u64() as u8)
            .collect();
        for d in decode_bytes(&junk) {
            assert_valid(&d.into_signal());
        }
    }
}
