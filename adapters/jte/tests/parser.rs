//! The byte parser: every escape form, terminators, splits, passthrough, errors.

use patchbay_jte::{JteErrorKind, JteEvent, JteOutput, JteParser, OSC_TO_PROGRAM, OSC_TO_TERMINAL};
use patchbay_testkit::prng::Rng;
use serde_json::{Value, json};

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;

#[derive(Clone, Copy, Debug)]
enum Len {
    /// `; <exact num-bytes> ;`
    Exact,
    /// `; 0 ;`
    Zero,
    /// no num-bytes field (Wave Terminal)
    Absent,
}

#[derive(Clone, Copy, Debug)]
enum Term {
    Bel,
    EscBackslash,
    C1,
}

const LENS: [Len; 3] = [Len::Exact, Len::Zero, Len::Absent];
const TERMS: [Term; 3] = [Term::Bel, Term::EscBackslash, Term::C1];

fn escape(osc: u16, len: Len, json: &[u8], term: Term) -> Vec<u8> {
    let mut out = format!("\x1b]{osc};").into_bytes();
    match len {
        Len::Exact => out.extend_from_slice(format!("{};", json.len()).as_bytes()),
        Len::Zero => out.extend_from_slice(b"0;"),
        Len::Absent => {}
    }
    out.extend_from_slice(json);
    match term {
        Term::Bel => out.push(BEL),
        Term::EscBackslash => out.extend_from_slice(b"\x1b\\"),
        Term::C1 => out.push(0x9c),
    }
    out
}

/// Feeds in chunks of `size` bytes, then finishes.
fn run_chunks(bytes: &[u8], size: usize) -> JteOutput {
    let mut parser = JteParser::new();
    let mut out = JteOutput::default();
    for chunk in bytes.chunks(size.max(1)) {
        parser.feed_into(chunk, &mut out.passthrough, &mut out.events);
    }
    parser.finish_into(&mut out.passthrough, &mut out.events);
    out
}

fn run(bytes: &[u8]) -> JteOutput {
    run_chunks(bytes, usize::MAX)
}

fn command_json(event: &JteEvent) -> Value {
    match event {
        JteEvent::Command(c) => Value::Object(c.json.clone()),
        JteEvent::Error(e) => panic!("expected a command, got {e}"),
    }
}

fn error_kind(event: &JteEvent) -> JteErrorKind {
    match event {
        JteEvent::Error(e) => e.kind.clone(),
        JteEvent::Command(c) => panic!("expected an error, got {:?}", c.json),
    }
}

#[test]
fn every_form_and_terminator() {
    let json = br#"{"command":"text_delta","data":{"content":"hi"}}"#;
    for len in LENS {
        for term in TERMS {
            let mut input = b"before ".to_vec();
            input.extend(escape(OSC_TO_TERMINAL, len, json, term));
            input.extend_from_slice(b" after");
            let out = run(&input);
            assert_eq!(out.passthrough, b"before  after", "{len:?} {term:?}");
            assert_eq!(out.events.len(), 1, "{len:?} {term:?}");
            assert_eq!(
                command_json(&out.events[0]),
                serde_json::from_slice::<Value>(json).unwrap()
            );
            let JteEvent::Command(c) = &out.events[0] else {
                unreachable!()
            };
            assert_eq!(c.osc, OSC_TO_TERMINAL);
            let expected = match len {
                Len::Exact => Some(json.len()),
                Len::Zero => Some(0),
                Len::Absent => None,
            };
            assert_eq!(c.num_bytes, expected);
        }
    }
}

#[test]
fn the_proposals_own_examples() {
    let input = concat!(
        "\x1b]23198;49;{\"command\": \"term:cursormove\", \"data\": {\"y\": -2}}\x07",
        "\x1b]23198;0;{\"command\": \"term:setstyle\", \"data\": {\"color\": 31, \"bgcolor\": \"#aaaaaa\", \"bold\": true}}\x07",
        "\x1b]23198;0;{\"command\": \"term:resetstyle\"}\x07",
        "\x1b]23199;0;{\"command\": \"event:mouseclick\", \"data\": {\"row\": 10, \"col\": 20}}\x07",
    );
    let out = run(input.as_bytes());
    assert!(out.passthrough.is_empty());
    let commands: Vec<_> = out
        .events
        .iter()
        .map(|e| command_json(e)["command"].clone())
        .collect();
    assert_eq!(
        commands,
        [
            "term:cursormove",
            "term:setstyle",
            "term:resetstyle",
            "event:mouseclick"
        ]
    );
    let JteEvent::Command(last) = &out.events[3] else {
        unreachable!()
    };
    assert_eq!(last.osc, OSC_TO_PROGRAM);
}

/// JSON whose UTF-8 contains 0x9C bytes: `œ` (C5 9C), `✜` (E2 9C 9C), `💜` (F0 9F 92 9C).
fn json_with_9c() -> Vec<u8> {
    let json = json!({"command": "text_delta", "data": {"content": "œuvre ✜ 💜 Ŝ"}}).to_string();
    let bytes = json.into_bytes();
    assert!(bytes.iter().filter(|&&b| b == 0x9c).count() >= 4);
    bytes
}

#[test]
fn c1_st_inside_utf8_is_json_not_a_terminator() {
    let json = json_with_9c();
    for len in LENS {
        for term in TERMS {
            let mut input = b"<".to_vec();
            input.extend(escape(OSC_TO_TERMINAL, len, &json, term));
            input.push(b'>');
            let out = run(&input);
            assert_eq!(out.passthrough, b"<>", "{len:?} {term:?}");
            assert_eq!(out.events.len(), 1);
            assert_eq!(
                command_json(&out.events[0])["data"]["content"],
                "œuvre ✜ 💜 Ŝ"
            );
        }
    }
}

#[test]
fn with_num_bytes_a_stray_9c_byte_is_data() {
    // Invalid UTF-8 (a lone 0x9C) inside: num-bytes decides where the JSON ends, so the
    // escape is read whole and reported as malformed, and nothing leaks to the output.
    let json = b"{\"command\":\"x\",\"data\":\"\x9c\"}";
    let mut input = escape(OSC_TO_TERMINAL, Len::Exact, json, Term::Bel);
    input.extend_from_slice(b"tail");
    let out = run(&input);
    assert_eq!(out.passthrough, b"tail");
    assert!(matches!(
        error_kind(&out.events[0]),
        JteErrorKind::Malformed(_)
    ));
    // Without num-bytes, a 0x9C at a character boundary is the C1 ST.
    let mut input = escape(OSC_TO_TERMINAL, Len::Zero, b"{\"command\":\"x\"}", Term::C1);
    input.extend_from_slice(b"tail");
    let out = run(&input);
    assert_eq!(out.passthrough, b"tail");
    assert_eq!(command_json(&out.events[0])["command"], "x");
}

/// A stream mixing ordinary output, other escape sequences and ours, and the output
/// expected from it.
fn sample_stream() -> (Vec<u8>, Vec<u8>, usize) {
    let mut input = Vec::new();
    let mut expected = Vec::new();
    let mut commands = 0;
    let text = |input: &mut Vec<u8>, expected: &mut Vec<u8>, t: &[u8]| {
        input.extend_from_slice(t);
        expected.extend_from_slice(t);
    };
    text(&mut input, &mut expected, "plain line ✓\r\n".as_bytes());
    text(&mut input, &mut expected, b"\x1b[1;31mred\x1b[0m ");
    text(&mut input, &mut expected, b"\x1b]0;window title\x07");
    text(
        &mut input,
        &mut expected,
        b"\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\",
    );
    for (i, (len, term)) in LENS.iter().zip(TERMS).enumerate() {
        let json = json!({"command": "text_delta", "rpcid": format!("r{i}"), "data": {"content": format!("chunk {i} œ")}});
        input.extend(escape(
            OSC_TO_TERMINAL,
            *len,
            json.to_string().as_bytes(),
            term,
        ));
        commands += 1;
        text(
            &mut input,
            &mut expected,
            format!("between {i}\n").as_bytes(),
        );
    }
    text(&mut input, &mut expected, b"\x1b]2319;not ours\x07");
    text(
        &mut input,
        &mut expected,
        b"\x1b]231980;not ours either\x07",
    );
    text(&mut input, &mut expected, b"\x1b]23198 no semicolon\x07");
    text(&mut input, &mut expected, b"\x1bP+q544e\x1b\\");
    text(&mut input, &mut expected, b"\x1b\x1b[K");
    input.extend(escape(
        OSC_TO_PROGRAM,
        Len::Exact,
        br#"{"command":"control:pause","data":{}}"#,
        Term::Bel,
    ));
    commands += 1;
    text(&mut input, &mut expected, b"\x1b]");
    text(&mut input, &mut expected, "end é\x1b".as_bytes());
    (input, expected, commands)
}

#[test]
fn passthrough_is_the_input_without_our_escapes() {
    let (input, expected, commands) = sample_stream();
    let out = run(&input);
    assert_eq!(
        String::from_utf8_lossy(&out.passthrough),
        String::from_utf8_lossy(&expected)
    );
    assert_eq!(out.passthrough, expected);
    assert_eq!(out.events.len(), commands);
    assert!(out.events.iter().all(|e| matches!(e, JteEvent::Command(_))));
}

#[test]
fn split_at_every_byte_boundary() {
    let (input, expected, _) = sample_stream();
    let reference = run(&input);
    assert_eq!(run_chunks(&input, 1), reference, "one byte at a time");
    for cut in 0..=input.len() {
        let mut parser = JteParser::new();
        let mut out = JteOutput::default();
        parser.feed_into(&input[..cut], &mut out.passthrough, &mut out.events);
        parser.feed_into(&input[cut..], &mut out.passthrough, &mut out.events);
        parser.finish_into(&mut out.passthrough, &mut out.events);
        assert_eq!(out, reference, "split at {cut}");
    }
    assert_eq!(reference.passthrough, expected);
    for size in [2, 3, 5, 7, 64] {
        assert_eq!(run_chunks(&input, size), reference, "chunks of {size}");
    }
}

#[test]
fn oversized_payloads_are_refused_and_skipped() {
    let big = format!(r#"{{"command":"x","data":"{}"}}"#, "a".repeat(2000));
    for len in LENS {
        let mut input = b"A".to_vec();
        input.extend(escape(OSC_TO_TERMINAL, len, big.as_bytes(), Term::Bel));
        input.extend_from_slice(b"B");
        let mut parser = JteParser::with_max_payload(1000);
        let mut out = parser.feed(&input);
        let end = parser.finish();
        out.passthrough.extend(end.passthrough);
        assert_eq!(out.passthrough, b"AB", "{len:?}");
        assert_eq!(out.events.len(), 1);
        assert_eq!(
            error_kind(&out.events[0]),
            JteErrorKind::Oversized { limit: 1000 }
        );
        let JteEvent::Error(e) = &out.events[0] else {
            unreachable!()
        };
        assert_eq!(e.raw.len(), 256.min(e.raw.len()));
    }
    // A huge num-bytes does not swallow the output after the terminator.
    let out = run(b"\x1b]23198;99999999999999;{\"command\":\"x\"}\x07visible");
    assert_eq!(out.passthrough, b"visible");
    assert_eq!(
        error_kind(&out.events[0]),
        JteErrorKind::Oversized { limit: 1024 * 1024 }
    );
    // The default limit is 1 MiB: a payload just under it is fine.
    let content = "z".repeat(1024 * 1024 - 64);
    let json = json!({"command": "text_delta", "data": {"content": content}}).to_string();
    let out = run(&escape(
        OSC_TO_TERMINAL,
        Len::Zero,
        json.as_bytes(),
        Term::Bel,
    ));
    assert_eq!(
        command_json(&out.events[0])["data"]["content"]
            .as_str()
            .unwrap()
            .len(),
        content.len()
    );
}

#[test]
fn malformed_payloads_are_errors_and_the_stream_goes_on() {
    type Check = fn(&JteErrorKind) -> bool;
    let cases: [(&[u8], Check); 5] = [
        (b"{\"command\": ", |k| {
            matches!(k, JteErrorKind::Malformed(_))
        }),
        (b"[1,2,3]", |k| *k == JteErrorKind::NotAnObject),
        (b"\"just a string\"", |k| *k == JteErrorKind::NotAnObject),
        (b"  ", |k| *k == JteErrorKind::Empty),
        (b"{\"command\":\"\xff\xfe\"}", |k| {
            matches!(k, JteErrorKind::Malformed(_))
        }),
    ];
    for (json, check) in cases {
        for len in LENS {
            let mut input = b"x".to_vec();
            input.extend(escape(OSC_TO_TERMINAL, len, json, Term::Bel));
            input.extend(escape(
                OSC_TO_TERMINAL,
                len,
                br#"{"command":"ok"}"#,
                Term::Bel,
            ));
            input.push(b'y');
            let out = run(&input);
            assert_eq!(
                out.passthrough,
                b"xy",
                "{len:?} {:?}",
                String::from_utf8_lossy(json)
            );
            assert_eq!(out.events.len(), 2);
            let kind = error_kind(&out.events[0]);
            assert!(
                check(&kind),
                "{kind:?} for {:?}",
                String::from_utf8_lossy(json)
            );
            assert_eq!(command_json(&out.events[1])["command"], "ok");
            let JteEvent::Error(e) = &out.events[0] else {
                unreachable!()
            };
            assert!(e.to_string().starts_with("OSC 23198 escape: "), "{e}");
        }
    }
    // An empty escape: `ESC ] 23198 ; BEL`.
    let out = run(b"\x1b]23198;\x07!");
    assert_eq!(out.passthrough, b"!");
    assert_eq!(error_kind(&out.events[0]), JteErrorKind::Empty);
}

#[test]
fn num_bytes_that_do_not_match() {
    let json = br#"{"command":"x"}"#;
    // Too large: the terminator comes first.
    let mut input = format!("\x1b]23198;{};", json.len() + 5).into_bytes();
    input.extend_from_slice(json);
    input.extend_from_slice(b"\x07after");
    let out = run(&input);
    assert_eq!(out.passthrough, b"after");
    assert_eq!(
        error_kind(&out.events[0]),
        JteErrorKind::LengthMismatch {
            declared: json.len() + 5,
            actual: json.len()
        }
    );
    // Too small: the escape is skipped to its terminator.
    let mut input = format!("\x1b]23198;{};", json.len() - 3).into_bytes();
    input.extend_from_slice(json);
    input.extend_from_slice(b"\x1b\\after");
    let out = run(&input);
    assert_eq!(out.passthrough, b"after");
    assert_eq!(
        error_kind(&out.events[0]),
        JteErrorKind::LengthMismatch {
            declared: json.len() - 3,
            actual: json.len()
        }
    );
    let e = error_kind(&out.events[0]).to_string();
    assert_eq!(
        e,
        format!(
            "num-bytes says {} but the payload is {} bytes",
            json.len() - 3,
            json.len()
        )
    );
}

#[test]
fn interrupted_escapes() {
    // ESC + not `\`: the escape ends and the new sequence is output (a CSI here)...
    let out = run(b"\x1b]23198;0;{\"command\":\x1b[31mred");
    assert_eq!(out.passthrough, b"\x1b[31mred");
    assert_eq!(error_kind(&out.events[0]), JteErrorKind::Interrupted("ESC"));
    // ...or another escape of ours, which is decoded.
    let out = run(b"\x1b]23198;0;{\"comm\x1b]23198;0;{\"command\":\"second\"}\x07");
    assert!(out.passthrough.is_empty());
    assert_eq!(error_kind(&out.events[0]), JteErrorKind::Interrupted("ESC"));
    assert_eq!(command_json(&out.events[1])["command"], "second");
    // CAN and SUB cancel the escape and are consumed with it.
    for (byte, name) in [(0x18u8, "CAN"), (0x1a, "SUB")] {
        let mut input = b"\x1b]23198;5;{\"co".to_vec();
        input.push(byte);
        input.extend_from_slice(b"ok");
        let out = run(&input);
        assert_eq!(out.passthrough, b"ok");
        assert_eq!(error_kind(&out.events[0]), JteErrorKind::Interrupted(name));
    }
}

#[test]
fn unterminated_at_the_end() {
    for len in LENS {
        let mut input = b"out ".to_vec();
        let full = escape(OSC_TO_TERMINAL, len, br#"{"command":"x"}"#, Term::Bel);
        input.extend_from_slice(&full[..full.len() - 1]);
        let out = run(&input);
        assert_eq!(
            out.passthrough, b"out ",
            "{len:?}: the open escape is not written out"
        );
        assert_eq!(error_kind(&out.events[0]), JteErrorKind::Unterminated);
        let JteEvent::Error(e) = &out.events[0] else {
            unreachable!()
        };
        assert_eq!(e.raw, br#"{"command":"x"}"#);
    }
    // Half an ESC \ terminator is still unterminated.
    let out = run(b"\x1b]23198;0;{\"command\":\"x\"}\x1b");
    assert_eq!(error_kind(&out.events[0]), JteErrorKind::Unterminated);
    // A prefix not yet known to be ours passes through.
    for prefix in [&b"\x1b"[..], b"\x1b]", b"\x1b]2319", b"\x1b]23198"] {
        let out = run(prefix);
        assert_eq!(out.passthrough, prefix);
        assert!(out.events.is_empty());
    }
}

#[test]
fn held_bytes_can_be_flushed() {
    let mut parser = JteParser::new();
    let out = parser.feed(b"abc\x1b]23");
    assert_eq!(out.passthrough, b"abc");
    assert!(!parser.is_idle());
    assert_eq!(parser.flush_undecided(), b"\x1b]23");
    assert!(parser.is_idle());
    // An escape of ours already started is not flushed.
    parser.feed(b"\x1b]23198;0;{");
    assert!(parser.flush_undecided().is_empty());
    let out = parser.feed(b"\"command\":\"x\"}\x07");
    assert_eq!(out.events.len(), 1);
}

#[test]
fn arbitrary_bytes_never_panic_and_are_split_insensitive() {
    let alphabet: &[u8] = b"\x1b]23198;0{}\"\x07\x9c\\\x18a\xc5\xe2\xf0[";
    let mut rng = Rng(0xDEAD_BEEF);
    for round in 0..1500 {
        let len = rng.below(200);
        let input: Vec<u8> = (0..len)
            .map(|_| {
                if round % 2 == 0 {
                    alphabet[rng.below(alphabet.len())]
                } else {
                    rng.next_u64() as u8
                }
            })
            .collect();
        let mut parser = JteParser::with_max_payload(64);
        let mut whole = parser.feed(&input);
        let end = parser.finish();
        whole.passthrough.extend(end.passthrough);
        whole.events.extend(end.events);
        let size = rng.below(9) + 1;
        let mut parser = JteParser::with_max_payload(64);
        let mut chunked = JteOutput::default();
        for chunk in input.chunks(size) {
            parser.feed_into(chunk, &mut chunked.passthrough, &mut chunked.events);
        }
        parser.finish_into(&mut chunked.passthrough, &mut chunked.events);
        assert_eq!(whole, chunked, "round {round}");
        assert!(whole.passthrough.len() <= input.len());
        if !input.contains(&ESC) {
            assert_eq!(
                whole.passthrough, input,
                "no ESC: everything passes through"
            );
            assert!(whole.events.is_empty());
        }
    }
}

#[test]
fn random_mixes_pass_text_through_exactly() {
    // Text segments (with other escape sequences and stray bytes) around escapes of ours,
    // good and bad: the passthrough is exactly the text, one event per escape.
    let text_alphabet: [&[u8]; 10] = [
        b"hello ",
        "ünï ".as_bytes(),
        b"\x1b[2K",
        b"\x1b]0;t\x07",
        b"\x1b",
        b"\x1b]",
        b"\x1b]2319",
        b"\x9c",
        b"\x07",
        b"\r\n",
    ];
    let escapes: [&[u8]; 5] = [
        r#"{"command":"a","data":{"x":"œ"}}"#.as_bytes(),
        br#"{"command":"b"}"#,
        b"not json",
        b"[]",
        "{\"command\":\"c\",\"data\":\"💜✜\"}".as_bytes(),
    ];
    let mut rng = Rng(12345);
    for round in 0..400 {
        let mut input = Vec::new();
        let mut expected = Vec::new();
        let mut count = 0;
        for _ in 0..rng.below(8) {
            for _ in 0..rng.below(4) {
                let t = text_alphabet[rng.below(text_alphabet.len())];
                input.extend_from_slice(t);
                expected.extend_from_slice(t);
            }
            let json = escapes[rng.below(escapes.len())];
            let osc = if rng.below(4) == 0 {
                OSC_TO_PROGRAM
            } else {
                OSC_TO_TERMINAL
            };
            input.extend(escape(osc, LENS[rng.below(3)], json, TERMS[rng.below(3)]));
            count += 1;
        }
        // Text after the last escape, not ending inside a sequence start.
        input.extend_from_slice(b"done");
        expected.extend_from_slice(b"done");
        let out = run_chunks(&input, rng.below(16) + 1);
        assert_eq!(out.passthrough, expected, "round {round}");
        assert_eq!(out.events.len(), count, "round {round}");
    }
}
