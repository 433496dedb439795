//! The sidecar's WebSocket server against RFC 6455 §5 (framing) and §7 (closing), driven
//! over raw TCP by a client that writes every frame by hand (masked, as a client must,
//! unless the case says otherwise) against a real sidecar on 127.0.0.1. Each case opens a
//! connection, writes its bytes in one write, and reads what the server answers, frame by
//! frame: the exact close code, a pong's payload, the signal a message became (the sidecar
//! reads its own `.inbound`, so a message the server took comes back to its sender as a
//! signal frame; the sidecar's messages are JSON signals), or the error frame refusing it.
//! A case that does not end in a close checks the connection is still usable (a ping gets
//! its pong, a close its 1000). After every case the server must have closed the TCP
//! connection (a close), and `patchbay_ws_protocol_errors_total` must have counted exactly
//! the violations. Every server frame is checked as it is read: FIN set, no reserved bit,
//! unmasked, control frames within 125 bytes, a close reason in UTF-8.
//!
//! The sidecar takes messages of up to `max_frame = 70000` bytes here.
//!
//! | id | RFC | the client sends | the server answers |
//! |----|-----|------------------|--------------------|
//! | `mask-none` | 5.1, 5.3 | an unmasked text frame | 1002 |
//! | `mask-none-ping` | 5.1 | an unmasked ping | 1002 |
//! | `mask-zero` | 5.3 | a text frame masked with the key 0 0 0 0 (a key like any other) | the signal |
//! | `rsv1`, `rsv2`, `rsv3` | 5.2 | a text frame with RSV1, RSV2 or RSV3 set (no extension negotiated) | 1002 |
//! | `rsv-ping` | 5.2 | a ping with all three reserved bits set | 1002 |
//! | `rsv-cont` | 5.2 | a fragmented text whose continuation has RSV1 set | 1002 |
//! | `rsv-close` | 5.2 | a close 1000 with RSV2 set | 1002 |
//! | `op-3` … `op-7` | 5.2 | a frame of each reserved data opcode 0x3–0x7 | 1002 |
//! | `op-b` … `op-f` | 5.2 | a frame of each reserved control opcode 0xB–0xF | 1002 |
//! | `len-0` | 5.2, 5.6 | an empty text message | refused as not JSON (patchbay's rule, not the RFC's); open |
//! | `len-125` | 5.2 | a 125-byte text (7-bit length) | the signal |
//! | `len-126` | 5.2 | a 126-byte text (16-bit length) | the signal |
//! | `len-65535` | 5.2 | a 65535-byte text (largest 16-bit length) | the signal |
//! | `len-65536` | 5.2 | a 65536-byte text (64-bit length) | the signal |
//! | `len-max` | 5.2 | a 70000-byte text (exactly `max_frame`) | the signal |
//! | `len-long16`, `len-long64` | 5.2 | a short text whose length is in the 16-bit, 64-bit form (not minimal: a sender's duty, taken) | the signal |
//! | `len-top-bit` | 5.2 | a 64-bit length with its most significant bit set | 1002 |
//! | `len-over` | 5.2, 10.4 | a header declaring `max_frame` + 1 bytes (no payload sent: the header decides) | error frame, 1009 |
//! | `len-huge` | 5.2, 10.4 | a header declaring 2^62 bytes | error frame, 1009 |
//! | `frag-text` | 5.4 | a text in three fragments | the signal, whole |
//! | `frag-binary` | 5.4, 5.6 | a binary message (UTF-8 JSON, which the sidecar takes) in two fragments | the signal, whole |
//! | `frag-empty` | 5.4 | a text whose first and middle fragments are empty | the signal |
//! | `frag-bytes` | 5.4 | a text in fragments of one byte each | the signal |
//! | `frag-ping` | 5.4, 5.5.2 | a ping between two fragments | the pong first, then the signal |
//! | `frag-pings` | 5.4, 5.5.2 | a ping between every two of four fragments | three pongs in order, then the signal |
//! | `frag-pong` | 5.4, 5.5.3 | an unsolicited pong between fragments | the signal only |
//! | `frag-close` | 5.4, 5.5.1 | a close 1000 in the middle of a fragmented message | 1000 (the unfinished message is dropped) |
//! | `cont-alone` | 5.4 | a continuation frame (FIN) with no message begun | 1002 |
//! | `cont-alone-nofin` | 5.4 | a continuation frame (no FIN) with no message begun | 1002 |
//! | `cont-after-fin` | 5.4 | a whole text, then a continuation frame | 1002 |
//! | `frag-new-text` | 5.4 | a text begun while another is in fragments | 1002 |
//! | `frag-new-binary` | 5.4 | a binary begun while a text is in fragments | 1002 |
//! | `frag-over` | 5.4, 10.4 | three fragments of 30000 bytes (each within `max_frame`, not their sum) | error frame, 1009 |
//! | `ping-0` | 5.5.2, 5.5.3 | an empty ping | an empty pong |
//! | `ping-125` | 5.5.2, 5.5.3 | a ping of 125 bytes (every byte value 0–124) | a pong with the same 125 bytes |
//! | `ping-2` | 5.5.3 | two pings in one write | two pongs, in order, each with its ping's payload |
//! | `ping-126` | 5.5 | a ping of 126 bytes | 1002 |
//! | `pong-126` | 5.5 | a pong of 126 bytes | 1002 |
//! | `close-126` | 5.5 | a close of 126 bytes | 1002 |
//! | `ping-nofin` | 5.5, 5.4 | a ping without FIN (a fragmented control frame) | 1002 |
//! | `pong-nofin` | 5.5, 5.4 | a pong without FIN | 1002 |
//! | `close-nofin` | 5.5, 5.4 | a close without FIN | 1002 |
//! | `pong-alone` | 5.5.3 | an unsolicited pong | nothing; open |
//! | `close-empty` | 5.5.1, 7.1.5 | a close with no body | 1000, then the TCP connection ends |
//! | `close-reason` | 5.5.1 | a close 1000 "bye" | 1000 |
//! | `close-reason-123` | 5.5, 5.5.1 | a close whose reason is 123 bytes of multi-byte UTF-8 (the most a control frame holds) | 1000 |
//! | `close-NNNN` | 7.4.1, 7.4.2 | a close with each code a peer may send: 1000–1003, 1007–1011, 1012–1014 (registered with IANA since the RFC; the sidecar sends 1013 itself), 3000, 3999, 4000, 4999 | 1000 |
//! | `close-bad-NNNN` | 7.4.1, 7.4.2 | a close with each code a peer may not send: 0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535 | 1002 |
//! | `close-1-byte` | 5.5.1 | a close whose body is one byte | 1002 |
//! | `close-reason-bad` | 5.5.1, 8.1 | a close 1000 whose reason is not UTF-8 (0xFF) | 1002 |
//! | `close-reason-cut` | 5.5.1, 8.1 | a close 1000 whose reason ends inside a character | 1002 |
//! | `close-then-data` | 5.5.1, 1.4 | a close, then a text and a ping in the same write | 1000 and nothing after it (no pong, no signal) |
//! | `utf8-bad` | 5.6, 8.1 | a text with the byte 0xFF | 1007 |
//! | `utf8-split` | 5.6, 5.4 | a text whose 2-, 3- and 4-byte characters are each split across fragments | the signal, its text intact |
//! | `utf8-bad-split` | 5.6, 5.4 | a text whose invalid sequence starts in one fragment (0xCE) and ends in the next (0xFF) | 1007 |
//! | `utf8-cut` | 5.6, 5.4 | a fragmented text whose last fragment ends inside a character | 1007 |
//! | `utf8-overlong` | 8.1 | a text with an overlong encoding (0xC0 0xAF) | 1007 |
//! | `utf8-surrogate` | 8.1 | a text with an encoded UTF-16 surrogate (0xED 0xA0 0x80) | 1007 |
//! | `utf8-beyond` | 8.1 | a text with a code point above U+10FFFF (0xF4 0x90 0x80 0x80) | 1007 |
//! | `utf8-max` | 8.1 | a text with U+10FFFF (0xF4 0x8F 0xBF 0xBF) | the signal |
//! | `binary-not-utf8` | 5.6 | a binary message that is not UTF-8 (the sidecar reads binary as JSON text) | refused with an error frame, counted; open |
//! | (test `what_came_before_a_close_is_handed_over`) | 5.5.1, 7.1.2 | a text and a close in one write | 1000 to the sender; the signal reaches another client |
//! | (test `the_server_closes_with_1001_when_the_graph_stops`) | 7.1.2, 7.4.1 | nothing; the graph stops | 1001 "going away", then the TCP connection ends |
//!
//! Invalid UTF-8 is found when the message is whole (8.1 allows either); the cases send
//! the rest of the message, so they do not depend on when.

mod common;

use std::net::SocketAddr;

use Answer::{Close, Pong, Refused, Signal};
use common::*;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `max_frame` of the sidecar under test.
const MAX_FRAME: usize = 70_000;

/// The mask key of the client's frames (the one in RFC 6455, 5.7).
const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// What the server answers, as the test reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// A pong with this payload.
    Pong(Vec<u8>),
    /// The signal made of this case's message, with this `payload.pad`.
    Signal(String),
    /// An error frame refusing what the client sent (`{"kind": "error", ...}`).
    Refused,
    /// A close frame with this code.
    Close(u16),
}

/// One row of the table in the module's documentation.
struct Case {
    id: String,
    /// Written in one write.
    bytes: Vec<u8>,
    /// In order; unless the last is a close, the connection must stay usable.
    answers: Vec<Answer>,
    /// How many protocol violations the server must count for it.
    violations: u64,
}

fn case(id: impl Into<String>, frames: &[Vec<u8>], answers: Vec<Answer>) -> Case {
    let violations = u64::from(matches!(
        answers.last(),
        Some(Answer::Close(code)) if *code != 1000
    ));
    Case {
        id: id.into(),
        bytes: frames.concat(),
        answers,
        violations,
    }
}

/// A client frame: first header byte `first` (FIN, reserved bits, opcode), masked with
/// `key`, its length in the shortest form.
fn frame_with_key(first: u8, payload: &[u8], key: [u8; 4]) -> Vec<u8> {
    let form = match payload.len() {
        0..=125 => Length::Short,
        126..=0xffff => Length::Two,
        _ => Length::Eight,
    };
    frame_as(first, form, payload.len() as u64, Some(key), payload)
}

/// A client frame masked with [`KEY`].
fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
    frame_with_key(first, payload, KEY)
}

/// The form a frame header gives its length in.
#[derive(Clone, Copy)]
enum Length {
    /// In the 7 bits of the second byte.
    Short,
    /// 126, then 16 bits.
    Two,
    /// 127, then 64 bits.
    Eight,
}

/// A frame exactly as described: `declared` in `form` (whatever `payload`'s length),
/// masked with `key` or not at all.
fn frame_as(
    first: u8,
    form: Length,
    declared: u64,
    key: Option<[u8; 4]>,
    payload: &[u8],
) -> Vec<u8> {
    let mask_bit = if key.is_some() { 0x80 } else { 0 };
    let mut out = vec![first];
    match form {
        Length::Short => out.push(mask_bit | u8::try_from(declared).expect("7-bit length")),
        Length::Two => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&u16::try_from(declared).expect("16 bits").to_be_bytes());
        }
        Length::Eight => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&declared.to_be_bytes());
        }
    }
    match key {
        Some(key) => {
            out.extend_from_slice(&key);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

/// The text of a signal the sidecar takes: this case's id and `pad`.
fn message(id: &str, pad: &str) -> Vec<u8> {
    serde_json::json!({"type": "conformance", "payload": {"case": id, "pad": pad}})
        .to_string()
        .into_bytes()
}

/// [`message`] of exactly `len` bytes; its pad.
fn message_of(id: &str, len: usize) -> (Vec<u8>, String) {
    let empty = message(id, "").len();
    let pad = "x".repeat(len.checked_sub(empty).expect("room for the envelope"));
    let bytes = message(id, &pad);
    assert_eq!(bytes.len(), len);
    (bytes, pad)
}

/// A close frame's body: `code` and `reason`.
fn close_body(code: u16, reason: &[u8]) -> Vec<u8> {
    let mut body = code.to_be_bytes().to_vec();
    body.extend_from_slice(reason);
    body
}

/// `bytes` in fragments cut at `cuts` (a text or binary frame of `opcode`, continuations,
/// FIN on the last).
fn fragments(opcode: u8, bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(bytes.len());
    let last = bounds.len() - 2;
    bounds
        .windows(2)
        .enumerate()
        .map(|(i, w)| {
            let op = if i == 0 { opcode } else { 0x0 };
            let fin = if i == last { 0x80 } else { 0 };
            frame(fin | op, &bytes[w[0]..w[1]])
        })
        .collect()
}

/// A text message with `bad` (bytes that are not UTF-8) inside, for the 1007 cases.
fn text_with(bad: &[u8]) -> Vec<u8> {
    let mut text = b"{\"type\":\"conformance\",\"payload\":{\"pad\":\"".to_vec();
    text.extend_from_slice(bad);
    text.extend_from_slice(b"\"}}");
    text
}

/// Every case of the table, in its order.
fn cases() -> Vec<Case> {
    let mut cases = Vec::new();

    // 5.1, 5.3: masking.
    cases.push(case(
        "mask-none",
        &[frame_as(0x81, Length::Short, 2, None, b"{}")],
        vec![Close(1002)],
    ));
    cases.push(case(
        "mask-none-ping",
        &[frame_as(0x89, Length::Short, 2, None, b"hi")],
        vec![Close(1002)],
    ));
    let pad = "zero key";
    cases.push(case(
        "mask-zero",
        &[frame_with_key(0x81, &message("mask-zero", pad), [0; 4])],
        vec![Signal(pad.into())],
    ));

    // 5.2: reserved bits.
    for (id, bit) in [("rsv1", 0x40), ("rsv2", 0x20), ("rsv3", 0x10)] {
        cases.push(case(
            id,
            &[frame(0x81 | bit, &message(id, ""))],
            vec![Close(1002)],
        ));
    }
    cases.push(case("rsv-ping", &[frame(0xf9, b"p")], vec![Close(1002)]));
    let text = message("rsv-cont", "");
    cases.push(case(
        "rsv-cont",
        &[frame(0x01, &text[..5]), frame(0xc0, &text[5..])],
        vec![Close(1002)],
    ));
    cases.push(case(
        "rsv-close",
        &[frame(0xa8, &close_body(1000, b""))],
        vec![Close(1002)],
    ));

    // 5.2: reserved opcodes, data (0x3-0x7) and control (0xB-0xF).
    for opcode in (0x3..=0x7).chain(0xb..=0xf) {
        cases.push(case(
            format!("op-{opcode:x}"),
            &[frame(0x80 | opcode, b"x")],
            vec![Close(1002)],
        ));
    }

    // 5.2: payload lengths.
    cases.push(case("len-0", &[frame(0x81, b"")], vec![Refused]));
    for len in [125, 126, 65_535, 65_536, MAX_FRAME] {
        let id = match len {
            MAX_FRAME => "len-max".to_owned(),
            _ => format!("len-{len}"),
        };
        let (text, pad) = message_of(&id, len);
        cases.push(case(id, &[frame(0x81, &text)], vec![Signal(pad)]));
    }
    for (id, form) in [("len-long16", Length::Two), ("len-long64", Length::Eight)] {
        let pad = "not minimal";
        let text = message(id, pad);
        cases.push(case(
            id,
            &[frame_as(0x81, form, text.len() as u64, Some(KEY), &text)],
            vec![Signal(pad.into())],
        ));
    }
    cases.push(case(
        "len-top-bit",
        &[frame_as(0x82, Length::Eight, 1 << 63 | 5, Some(KEY), b"")],
        vec![Close(1002)],
    ));
    cases.push(case(
        "len-over",
        &[frame_as(
            0x81,
            Length::Eight,
            MAX_FRAME as u64 + 1,
            Some(KEY),
            b"",
        )],
        vec![Refused, Close(1009)],
    ));
    cases.push(case(
        "len-huge",
        &[frame_as(0x82, Length::Eight, 1 << 62, Some(KEY), b"")],
        vec![Refused, Close(1009)],
    ));

    // 5.4: fragmentation.
    let pad = "in three fragments";
    let text = message("frag-text", pad);
    cases.push(case(
        "frag-text",
        &fragments(0x1, &text, &[10, 30]),
        vec![Signal(pad.into())],
    ));
    let pad = "binary, in two";
    let text = message("frag-binary", pad);
    cases.push(case(
        "frag-binary",
        &fragments(0x2, &text, &[20]),
        vec![Signal(pad.into())],
    ));
    let pad = "after empty fragments";
    let text = message("frag-empty", pad);
    cases.push(case(
        "frag-empty",
        &fragments(0x1, &text, &[0, 0]),
        vec![Signal(pad.into())],
    ));
    let pad = "byte by byte";
    let text = message("frag-bytes", pad);
    let cuts: Vec<usize> = (1..text.len()).collect();
    cases.push(case(
        "frag-bytes",
        &fragments(0x1, &text, &cuts),
        vec![Signal(pad.into())],
    ));
    let pad = "around a ping";
    let text = message("frag-ping", pad);
    let parts = fragments(0x1, &text, &[12]);
    cases.push(case(
        "frag-ping",
        &[parts[0].clone(), frame(0x89, b"between"), parts[1].clone()],
        vec![Pong(b"between".to_vec()), Signal(pad.into())],
    ));
    let pad = "around pings";
    let text = message("frag-pings", pad);
    let parts = fragments(0x1, &text, &[5, 15, 25]);
    cases.push(case(
        "frag-pings",
        &[
            parts[0].clone(),
            frame(0x89, b"one"),
            parts[1].clone(),
            frame(0x89, b"two"),
            parts[2].clone(),
            frame(0x89, b"three"),
            parts[3].clone(),
        ],
        vec![
            Pong(b"one".to_vec()),
            Pong(b"two".to_vec()),
            Pong(b"three".to_vec()),
            Signal(pad.into()),
        ],
    ));
    let pad = "around a pong";
    let text = message("frag-pong", pad);
    let parts = fragments(0x1, &text, &[12]);
    cases.push(case(
        "frag-pong",
        &[parts[0].clone(), frame(0x8a, b"unasked"), parts[1].clone()],
        vec![Signal(pad.into())],
    ));
    let text = message("frag-close", "");
    cases.push(case(
        "frag-close",
        &[frame(0x01, &text[..8]), frame(0x88, &close_body(1000, b""))],
        vec![Close(1000)],
    ));
    cases.push(case("cont-alone", &[frame(0x80, b"x")], vec![Close(1002)]));
    cases.push(case(
        "cont-alone-nofin",
        &[frame(0x00, b"x")],
        vec![Close(1002)],
    ));
    cases.push(case(
        "cont-after-fin",
        &[
            frame(0x81, &message("cont-after-fin", "")),
            frame(0x80, b"x"),
        ],
        vec![Close(1002)],
    ));
    let text = message("frag-new-text", "");
    cases.push(case(
        "frag-new-text",
        &[frame(0x01, &text[..8]), frame(0x81, &text)],
        vec![Close(1002)],
    ));
    cases.push(case(
        "frag-new-binary",
        &[frame(0x01, &text[..8]), frame(0x82, &text)],
        vec![Close(1002)],
    ));
    let part = vec![b' '; 30_000];
    cases.push(case(
        "frag-over",
        &[frame(0x01, &part), frame(0x00, &part), frame(0x80, &part)],
        vec![Refused, Close(1009)],
    ));

    // 5.5: control frames.
    cases.push(case("ping-0", &[frame(0x89, b"")], vec![Pong(Vec::new())]));
    let data: Vec<u8> = (0..125).collect();
    cases.push(case("ping-125", &[frame(0x89, &data)], vec![Pong(data)]));
    cases.push(case(
        "ping-2",
        &[frame(0x89, b"first"), frame(0x89, b"second")],
        vec![Pong(b"first".to_vec()), Pong(b"second".to_vec())],
    ));
    for (id, first) in [("ping-126", 0x89), ("pong-126", 0x8a), ("close-126", 0x88)] {
        let body = close_body(1000, &[b'r'; 124]);
        cases.push(case(id, &[frame(first, &body)], vec![Close(1002)]));
    }
    for (id, first, body) in [
        ("ping-nofin", 0x09, b"p".to_vec()),
        ("pong-nofin", 0x0a, b"p".to_vec()),
        ("close-nofin", 0x08, close_body(1000, b"")),
    ] {
        cases.push(case(id, &[frame(first, &body)], vec![Close(1002)]));
    }
    cases.push(case("pong-alone", &[frame(0x8a, b"unasked")], vec![]));

    // 5.5.1, 7: the close handshake and close codes.
    cases.push(case("close-empty", &[frame(0x88, b"")], vec![Close(1000)]));
    cases.push(case(
        "close-reason",
        &[frame(0x88, &close_body(1000, b"bye"))],
        vec![Close(1000)],
    ));
    let reason = "é".repeat(61) + "!";
    assert_eq!(reason.len(), 123);
    cases.push(case(
        "close-reason-123",
        &[frame(0x88, &close_body(1000, reason.as_bytes()))],
        vec![Close(1000)],
    ));
    let allowed = [
        1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000,
        4999,
    ];
    for code in allowed {
        cases.push(case(
            format!("close-{code}"),
            &[frame(0x88, &close_body(code, b""))],
            vec![Close(1000)],
        ));
    }
    let forbidden = [
        0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535,
    ];
    for code in forbidden {
        cases.push(case(
            format!("close-bad-{code}"),
            &[frame(0x88, &close_body(code, b""))],
            vec![Close(1002)],
        ));
    }
    cases.push(case(
        "close-1-byte",
        &[frame(0x88, &[0x03])],
        vec![Close(1002)],
    ));
    cases.push(case(
        "close-reason-bad",
        &[frame(0x88, &close_body(1000, &[b'o', b'k', 0xff]))],
        vec![Close(1002)],
    ));
    cases.push(case(
        "close-reason-cut",
        &[frame(0x88, &close_body(1000, &[b'o', b'k', 0xe2, 0x9c]))],
        vec![Close(1002)],
    ));
    cases.push(case(
        "close-then-data",
        &[
            frame(0x88, &close_body(1000, b"")),
            frame(0x81, &message("close-then-data", "")),
            frame(0x89, b"too late"),
        ],
        vec![Close(1000)],
    ));

    // 5.6, 8.1: UTF-8.
    cases.push(case(
        "utf8-bad",
        &[frame(0x81, &text_with(&[0xff]))],
        vec![Close(1007)],
    ));
    let pad = "é € 😀";
    let text = message("utf8-split", pad);
    let at = |c: &str| {
        text.windows(c.len())
            .position(|w| w == c.as_bytes())
            .expect("in the text")
    };
    // Inside each character: after the first byte of é, the second of €, the third of 😀.
    let cuts = [at("é") + 1, at("€") + 2, at("😀") + 3];
    cases.push(case(
        "utf8-split",
        &fragments(0x1, &text, &cuts),
        vec![Signal(pad.into())],
    ));
    let text = text_with(&[0xce, 0xff]);
    let cut = text.iter().position(|b| *b == 0xce).expect("the bad byte") + 1;
    cases.push(case(
        "utf8-bad-split",
        &fragments(0x1, &text, &[cut]),
        vec![Close(1007)],
    ));
    let mut text = message("utf8-cut", "");
    text.extend_from_slice(&"€".as_bytes()[..2]);
    cases.push(case(
        "utf8-cut",
        &fragments(0x1, &text, &[10]),
        vec![Close(1007)],
    ));
    for (id, bad) in [
        ("utf8-overlong", &[0xc0, 0xaf][..]),
        ("utf8-surrogate", &[0xed, 0xa0, 0x80]),
        ("utf8-beyond", &[0xf4, 0x90, 0x80, 0x80]),
    ] {
        cases.push(case(id, &[frame(0x81, &text_with(bad))], vec![Close(1007)]));
    }
    let pad = "\u{10ffff}";
    cases.push(case(
        "utf8-max",
        &[frame(0x81, &message("utf8-max", pad))],
        vec![Signal(pad.into())],
    ));
    let mut binary = case(
        "binary-not-utf8",
        &[frame(0x82, &[0xff, 0xfe])],
        vec![Refused],
    );
    binary.violations = 1;
    cases.push(binary);
    cases
}

/// A frame the server sent.
struct ServerFrame {
    opcode: u8,
    payload: Vec<u8>,
}

/// Opens `/ws` by hand; the socket after the 101.
async fn connect(addr: SocketAddr) -> TcpStream {
    guard("the WebSocket upgrade", async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = format!(
            "GET /ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).await.expect("read the head");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 101"), "{head}");
        // RFC 6455, 1.3: the accept key of the RFC's own example key.
        assert!(
            head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
            "{head}"
        );
        stream
    })
    .await
}

/// The next frame the server sent, checked against what a server may send; `None` when
/// the connection ended (at a frame boundary: a frame cut short fails the test).
async fn read_frame(stream: &mut TcpStream) -> Option<ServerFrame> {
    let mut head = [0u8; 2];
    if stream.read_exact(&mut head).await.is_err() {
        // The end of the stream, or a reset after it.
        return None;
    }
    let [first, second] = head;
    assert_eq!(
        first & 0x80,
        0x80,
        "a server frame is never fragmented here"
    );
    assert_eq!(first & 0x70, 0, "no reserved bit in a server frame");
    assert_eq!(second & 0x80, 0, "a server frame is not masked (5.1)");
    let opcode = first & 0x0f;
    let len = match second & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            stream.read_exact(&mut b).await.expect("the 16-bit length");
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            stream.read_exact(&mut b).await.expect("the 64-bit length");
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    let mut payload = vec![0u8; usize::try_from(len).expect("a length that fits")];
    stream
        .read_exact(&mut payload)
        .await
        .expect("the whole payload");
    match opcode {
        0x1 => assert!(std::str::from_utf8(&payload).is_ok(), "text is UTF-8"),
        0x8..=0xa => assert!(payload.len() <= 125, "a control frame within 125 bytes"),
        other => panic!("the server sent opcode {other:#x}"),
    }
    Some(ServerFrame { opcode, payload })
}

/// The server's next answer to case `id`; `None` when the connection ended. Signals of
/// other cases (a message taken just before a violation reaches every client later) are
/// passed over.
async fn next_answer(stream: &mut TcpStream, id: &str) -> Option<Answer> {
    guard("the server's answer", async {
        loop {
            let frame = read_frame(stream).await?;
            match frame.opcode {
                0x1 => {
                    let value: Value =
                        serde_json::from_slice(&frame.payload).expect("a JSON text frame");
                    if value["kind"] == "error" {
                        assert!(value["message"].is_string(), "{value}");
                        return Some(Refused);
                    }
                    if value["payload"]["case"] == id {
                        assert_eq!(value["type"], "conformance", "{value}");
                        let pad = value["payload"]["pad"].as_str().expect("pad");
                        return Some(Signal(pad.to_owned()));
                    }
                }
                0x8 => {
                    let body = &frame.payload;
                    assert!(body.len() >= 2, "the server's close gives a code");
                    assert!(
                        std::str::from_utf8(&body[2..]).is_ok(),
                        "the close reason is UTF-8"
                    );
                    return Some(Close(u16::from_be_bytes([body[0], body[1]])));
                }
                0xa => return Some(Pong(frame.payload)),
                other => panic!("the server sent opcode {other:#x}"),
            }
        }
    })
    .await
}

/// After a close from the server: nothing more, the TCP connection ends.
async fn assert_ended(stream: &mut TcpStream, id: &str) {
    assert_eq!(
        next_answer(stream, id).await,
        None,
        "{id}: nothing after the server's close"
    );
}

/// Runs one case on a connection of its own.
async fn run(addr: SocketAddr, case: &Case) {
    let id = case.id.as_str();
    let mut stream = connect(addr).await;
    stream.write_all(&case.bytes).await.expect("write the case");
    for expected in &case.answers {
        let got = next_answer(&mut stream, id).await;
        assert_eq!(got.as_ref(), Some(expected), "{id}");
    }
    if matches!(case.answers.last(), Some(Close(_))) {
        assert_ended(&mut stream, id).await;
        return;
    }
    // Still open, and nothing else was answered: a ping gets its pong next, a close 1000.
    stream
        .write_all(&frame(0x89, b"still there?"))
        .await
        .expect("write a ping");
    assert_eq!(
        next_answer(&mut stream, id).await,
        Some(Pong(b"still there?".to_vec())),
        "{id}: the connection stays usable, with nothing more answered"
    );
    stream
        .write_all(&frame(0x88, &close_body(1000, b"done")))
        .await
        .expect("write a close");
    assert_eq!(
        next_answer(&mut stream, id).await,
        Some(Close(1000)),
        "{id}"
    );
    assert_ended(&mut stream, id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_of_rfc_6455_sections_5_and_7_gets_its_answer() {
    let name = "ws_conformance";
    let server = start(
        name,
        &["ws_conformance.inbound"],
        &format!("max_frame = {MAX_FRAME}\n"),
        "",
    )
    .await;
    let series = format!("patchbay_ws_protocol_errors_total{{component=\"{name}\"}}");
    let cases = cases();
    let mut ids: Vec<&str> = cases.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), cases.len(), "case ids are unique");
    for case in &cases {
        let before = metric(server.addr, &series).await;
        run(server.addr, case).await;
        // Counted before the close is written, so already visible.
        assert_eq!(
            metric(server.addr, &series).await - before,
            case.violations,
            "{}: violations counted",
            case.id
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_came_before_a_close_is_handed_over() {
    let server = start("ws_conf_before", &["ws_conf_before.inbound"], "", "").await;
    let id = "before-close";
    let mut observer = connect(server.addr).await;
    let mut sender = connect(server.addr).await;
    let pad = "sent with the close";
    let bytes = [
        frame(0x81, &message(id, pad)),
        frame(0x88, &close_body(1001, b"leaving")),
    ]
    .concat();
    sender.write_all(&bytes).await.expect("write");
    assert_eq!(next_answer(&mut sender, id).await, Some(Close(1000)));
    assert_ended(&mut sender, id).await;
    assert_eq!(
        next_answer(&mut observer, id).await,
        Some(Signal(pad.into()))
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_closes_with_1001_when_the_graph_stops() {
    let server = start("ws_conf_stop", &["ws_conf_stop.inbound"], "", "").await;
    let id = "stop";
    let mut client = connect(server.addr).await;
    // The connection is served (a ping answered) before the graph stops.
    client.write_all(&frame(0x89, b"up")).await.expect("write");
    assert_eq!(
        next_answer(&mut client, id).await,
        Some(Pong(b"up".to_vec()))
    );
    let report = server.stop().await;
    assert!(report.drained);
    assert_eq!(next_answer(&mut client, id).await, Some(Close(1001)));
    assert_ended(&mut client, id).await;
}
