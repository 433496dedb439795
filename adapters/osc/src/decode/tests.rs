//! The decoder on hand-written packets (not made by this crate's encoder): every type tag,
//! bundles nested and in order, and every way a packet is refused.

use super::*;
use patchbay_signal::normalize::Decoded;
use patchbay_testkit::prng::Rng;
use patchbay_testkit::random_input::{mutate, random_pieces};
use serde_json::json;

/// An OSC string: its bytes, a NUL, NULs to the word.
fn s(text: &str) -> Vec<u8> {
    let mut b = text.as_bytes().to_vec();
    b.push(0);
    while !b.len().is_multiple_of(4) {
        b.push(0);
    }
    b
}

/// A message from its address, its type tags (without the comma) and its data.
fn msg(address: &str, tags: &str, data: &[u8]) -> Vec<u8> {
    let mut b = s(address);
    b.extend(s(&format!(",{tags}")));
    b.extend_from_slice(data);
    b
}

/// A bundle from its time tag bits and its elements.
fn bundle(timetag: u64, elements: &[Vec<u8>]) -> Vec<u8> {
    let mut b = b"#bundle\0".to_vec();
    b.extend(timetag.to_be_bytes());
    for e in elements {
        b.extend((e.len() as u32).to_be_bytes());
        b.extend(e);
    }
    b
}

fn one(bytes: &[u8]) -> Message {
    match parse_packet(bytes) {
        Ok(Packet::Message(m)) => m,
        other => panic!("{other:?}"),
    }
}

fn args(bytes: &[u8]) -> Vec<Arg> {
    one(bytes).args
}

fn error(bytes: &[u8]) -> OscError {
    parse_packet(bytes).expect_err("refused")
}

#[test]
fn every_type_tag() {
    assert_eq!(
        args(&msg("/i", "i", &(-2i32).to_be_bytes())),
        [Arg::Int(-2)]
    );
    assert_eq!(
        args(&msg("/h", "h", &(-(1i64 << 40)).to_be_bytes())),
        [Arg::Long(-(1 << 40))]
    );
    assert_eq!(
        args(&msg("/f", "f", &0.5f32.to_be_bytes())),
        [Arg::Float(0.5)]
    );
    assert_eq!(
        args(&msg("/d", "d", &2.25f64.to_be_bytes())),
        [Arg::Double(2.25)]
    );
    assert_eq!(
        args(&msg("/s", "s", &s("hello"))),
        [Arg::String("hello".into())]
    );
    assert_eq!(args(&msg("/s", "s", &s(""))), [Arg::String(String::new())]);
    assert_eq!(
        args(&msg("/s", "s", &s("four"))),
        [Arg::String("four".into())]
    );
    assert_eq!(
        args(&msg("/s", "s", &s("ünï"))),
        [Arg::String("ünï".into())]
    );
    assert_eq!(
        args(&msg("/S", "S", &s("sym"))),
        [Arg::Symbol("sym".into())]
    );
    let mut blob = 3i32.to_be_bytes().to_vec();
    blob.extend([1, 2, 3, 0]);
    assert_eq!(args(&msg("/b", "b", &blob)), [Arg::Blob(vec![1, 2, 3])]);
    assert_eq!(
        args(&msg("/b", "b", &0i32.to_be_bytes())),
        [Arg::Blob(vec![])]
    );
    let mut four = 4i32.to_be_bytes().to_vec();
    four.extend([9, 9, 9, 9]);
    assert_eq!(args(&msg("/b", "b", &four)), [Arg::Blob(vec![9; 4])]);
    let t = (3_908_988_800u64 << 32) | (1 << 31);
    assert_eq!(
        args(&msg("/t", "t", &t.to_be_bytes())),
        [Arg::Time(TimeTag {
            seconds: 3_908_988_800,
            fraction: 1 << 31
        })]
    );
    assert_eq!(
        args(&msg("/c", "c", &97u32.to_be_bytes())),
        [Arg::Char('a')]
    );
    assert_eq!(
        args(&msg("/r", "r", &[255, 128, 0, 64])),
        [Arg::Color([255, 128, 0, 64])]
    );
    assert_eq!(
        args(&msg("/m", "m", &[0, 0x90, 60, 100])),
        [Arg::Midi([0, 0x90, 60, 100])]
    );
    assert_eq!(
        args(&msg("/flags", "TFNI", &[])),
        [Arg::True, Arg::False, Arg::Nil, Arg::Impulse]
    );
    let mut data = 1i32.to_be_bytes().to_vec();
    data.extend(2i32.to_be_bytes());
    data.extend(s("x"));
    assert_eq!(
        args(&msg("/arr", "i[i[s]]T", &data)),
        [
            Arg::Int(1),
            Arg::Array(vec![Arg::Int(2), Arg::Array(vec![Arg::String("x".into())])]),
            Arg::True
        ]
    );
    assert_eq!(args(&msg("/empty", "[]", &[])), [Arg::Array(vec![])]);
}

#[test]
fn the_specification_examples() {
    // OSC 1.0: "/oscillator/4/frequency" ,f 440.0
    let bytes = b"/oscillator/4/frequency\0,f\0\0\x43\xdc\x00\x00";
    assert_eq!(
        one(bytes),
        Message {
            address: "/oscillator/4/frequency".into(),
            args: vec![Arg::Float(440.0)]
        }
    );
    // "/foo" ,iisff 1000 -1 "hello" 1.234 5.678
    let bytes = b"/foo\0\0\0\0,iisff\0\0\0\0\x03\xe8\xff\xff\xff\xffhello\0\0\0\x3f\x9d\xf3\xb6\x40\xb5\xb2\x2d";
    assert_eq!(
        args(bytes),
        [
            Arg::Int(1000),
            Arg::Int(-1),
            Arg::String("hello".into()),
            Arg::Float(1.234),
            Arg::Float(5.678)
        ]
    );
}

#[test]
fn a_message_without_type_tags_has_no_arguments() {
    assert_eq!(
        one(&s("/old/sender")),
        Message {
            address: "/old/sender".into(),
            args: vec![]
        }
    );
    assert_eq!(args(&msg("/no/args", "", &[])), []);
}

#[test]
fn refused_messages_say_why() {
    assert_eq!(error(b""), OscError::Empty);
    assert_eq!(error(b"/a\0"), OscError::NotAligned { len: 3 });
    assert_eq!(
        error(b"abc\0"),
        OscError::NotAPacket {
            start: "abc".into()
        }
    );
    assert_eq!(
        error(b"#bun\0\0\0\0"),
        OscError::NotAPacket {
            start: "#bun".into()
        }
    );
    assert_eq!(
        error(b"\x01\xff\0\0").to_string(),
        "starts with `\\x01\\xff`: neither an address (`/…`) nor `#bundle`"
    );
    assert_eq!(
        error(b"/abc"),
        OscError::Unterminated {
            part: Part::Address
        }
    );
    assert_eq!(
        error(b"/a\xff\0"),
        OscError::NotUtf8 {
            part: Part::Address
        }
    );
    let mut no_tags = s("/a");
    no_tags.extend(1i32.to_be_bytes());
    assert_eq!(
        error(&no_tags),
        OscError::NoTypeTags {
            address: "/a".into()
        }
    );
    let mut cut_tags = s("/a");
    cut_tags.extend(b",iii");
    assert_eq!(
        error(&cut_tags),
        OscError::Unterminated {
            part: Part::TypeTags("/a".into())
        }
    );
    assert_eq!(
        error(&msg("/a", "ix", &1i32.to_be_bytes())),
        OscError::UnknownTag {
            tag: 'x',
            part: Part::Arg {
                address: "/a".into(),
                position: 2,
                tag: 'x'
            }
        }
    );
    assert_eq!(
        error(&msg("/a", "ix", &1i32.to_be_bytes())).to_string(),
        "unknown type tag `x` at argument 2 (`x`) of `/a`"
    );
    assert_eq!(
        error(&msg("/a", "ii", &1i32.to_be_bytes())).to_string(),
        "argument 2 (`i`) of `/a` is cut off: 4 bytes needed at offset 12, 0 left"
    );
    assert!(matches!(
        error(&msg("/a", "d", &1i32.to_be_bytes())),
        OscError::Truncated {
            needed: 8,
            left: 4,
            ..
        }
    ));
    assert!(matches!(
        error(&msg("/a", "h", &[])),
        OscError::Truncated {
            needed: 8,
            left: 0,
            ..
        }
    ));
    assert!(matches!(
        error(&msg("/a", "t", &[])),
        OscError::Truncated { .. }
    ));
    assert!(matches!(
        error(&msg("/a", "f", &[])),
        OscError::Truncated { .. }
    ));
    assert!(matches!(
        error(&msg("/a", "r", &[])),
        OscError::Truncated { .. }
    ));
    assert!(matches!(
        error(&msg("/a", "m", &[])),
        OscError::Truncated { .. }
    ));
    assert!(matches!(
        error(&msg("/a", "c", &[])),
        OscError::Truncated { .. }
    ));
    assert!(matches!(
        error(&msg("/a", "b", &[])),
        OscError::Truncated { .. }
    ));
    assert_eq!(
        error(&msg("/a", "s", b"abcd")),
        OscError::Unterminated {
            part: Part::Arg {
                address: "/a".into(),
                position: 1,
                tag: 's'
            }
        }
    );
    assert!(matches!(
        error(&msg("/a", "S", b"\xc3\x28\0\0")),
        OscError::NotUtf8 { .. }
    ));
    let mut long_blob = 100i32.to_be_bytes().to_vec();
    long_blob.extend([0; 8]);
    assert!(matches!(
        error(&msg("/a", "b", &long_blob)),
        OscError::Truncated {
            needed: 100,
            left: 8,
            ..
        }
    ));
    assert!(matches!(
        error(&msg("/a", "b", &(-4i32).to_be_bytes())),
        OscError::NegativeBlob { size: -4, .. }
    ));
    // A blob of 3 whose padding is missing: cut off.
    let mut unpadded = 3i32.to_be_bytes().to_vec();
    unpadded.extend([1, 2, 3]);
    let mut packet = msg("/a", "bi", &unpadded);
    packet.push(0);
    assert!(
        matches!(error(&packet), OscError::Truncated { .. }),
        "{:?}",
        error(&packet)
    );
    assert_eq!(
        error(&msg("/a", "c", &0xD800u32.to_be_bytes())).to_string(),
        "argument 1 (`c`) of `/a` is 0xd800, not a character"
    );
    assert_eq!(
        error(&msg("/a", "i", &[0, 0, 0, 1, 0, 0, 0, 2])),
        OscError::TrailingBytes {
            address: "/a".into(),
            count: 4
        }
    );
    assert_eq!(
        error(&msg("/a", "", &[0, 0, 0, 1])).to_string(),
        "4 bytes after the last argument of `/a`"
    );
}

#[test]
fn arrays_are_balanced_and_bounded() {
    assert_eq!(
        error(&msg("/a", "]", &[])),
        OscError::ArrayNotOpen {
            part: Part::TypeTags("/a".into())
        }
    );
    assert_eq!(
        error(&msg("/a", "[[]", &[])).to_string(),
        "`[` not closed in the type tags of `/a`"
    );
    let deep = format!("{}{}", "[".repeat(8), "]".repeat(8));
    assert!(parse_packet(&msg("/a", &deep, &[])).is_ok());
    let deeper = format!("{}{}", "[".repeat(9), "]".repeat(9));
    assert_eq!(
        error(&msg("/a", &deeper, &[])),
        OscError::ArrayTooDeep {
            max: 8,
            part: Part::TypeTags("/a".into())
        }
    );
}

fn addresses(packet: &Packet) -> Vec<(String, Option<TimeTag>)> {
    let mut seen = Vec::new();
    for_each_message(packet, &mut |m, t| seen.push((m.address.clone(), t)));
    seen
}

#[test]
fn bundles_are_unpacked_in_order_with_their_time_tags() {
    let inner = bundle(7 << 32, &[s("/b"), msg("/c", "i", &3i32.to_be_bytes())]);
    let outer = bundle(1, &[s("/a"), inner, msg("/d", "", &[])]);
    let packet = parse_packet(&outer).unwrap();
    let t7 = Some(TimeTag {
        seconds: 7,
        fraction: 0,
    });
    assert_eq!(
        addresses(&packet),
        [
            ("/a".into(), Some(TimeTag::IMMEDIATELY)),
            ("/b".into(), t7),
            ("/c".into(), t7),
            ("/d".into(), Some(TimeTag::IMMEDIATELY)),
        ]
    );
    // An empty bundle holds nothing, and is not an error.
    assert_eq!(
        parse_packet(&bundle(1, &[])),
        Ok(Packet::Bundle(Bundle {
            timetag: TimeTag::IMMEDIATELY,
            elements: vec![]
        }))
    );
}

#[test]
fn refused_bundles_say_why() {
    assert!(matches!(
        error(b"#bundle\0\0\0\0\x01"),
        OscError::Truncated {
            part: Part::BundleTimeTag,
            ..
        }
    ));
    let mut zero = bundle(1, &[]);
    zero.extend(0i32.to_be_bytes());
    assert_eq!(error(&zero), OscError::BadElementSize { index: 0, size: 0 });
    let mut odd = bundle(1, &[s("/a")]);
    odd.extend(6i32.to_be_bytes());
    odd.extend([0; 8]);
    assert_eq!(error(&odd), OscError::BadElementSize { index: 1, size: 6 });
    let mut negative = bundle(1, &[]);
    negative.extend((-8i32).to_be_bytes());
    assert_eq!(
        error(&negative),
        OscError::BadElementSize { index: 0, size: -8 }
    );
    let mut past = bundle(1, &[]);
    past.extend(64i32.to_be_bytes());
    past.extend(s("/a"));
    assert_eq!(
        error(&past).to_string(),
        "bundle element 0 says 64 bytes, 4 left in the bundle"
    );
    let bad_inside = bundle(1, &[s("/ok"), bundle(1, &[msg("/x", "q", &[])])]);
    let e = error(&bad_inside);
    assert_eq!(
        e.to_string(),
        "in bundle element 1: in bundle element 0: unknown type tag `q` at argument 1 (`q`) of `/x`"
    );
    assert!(matches!(
        e.innermost(),
        OscError::UnknownTag { tag: 'q', .. }
    ));
}

#[test]
fn bundles_nest_only_so_deep() {
    let mut packet = s("/deep");
    for _ in 0..8 {
        packet = bundle(1, &[packet]);
    }
    assert!(parse_packet(&packet).is_ok());
    let deeper = bundle(1, &[packet]);
    assert_eq!(error(&deeper), OscError::TooDeep { max: 8 });
}

#[test]
fn a_packet_holds_only_so_many_messages() {
    let many: Vec<Vec<u8>> = (0..1025).map(|_| s("/m")).collect();
    assert_eq!(
        error(&bundle(1, &many)),
        OscError::TooManyMessages { max: 1024 }
    );
    assert!(parse_packet(&bundle(1, &many[..1024])).is_ok());
    let limits = Limits {
        max_messages: 2,
        ..Limits::default()
    };
    assert!(parse_packet_with(&bundle(1, &many[..2]), &limits).is_ok());
    assert!(parse_packet_with(&bundle(1, &many[..3]), &limits).is_err());
}

fn decode(decoder: &mut OscDecoder, bytes: &[u8]) -> (Result<usize, OscError>, Vec<Decoded>) {
    let mut out = Vec::new();
    let peer: SocketAddr = "192.168.1.50:53211".parse().unwrap();
    let result = decoder.decode(bytes, Some(peer), 1_000, &mut out);
    patchbay_testkit::validity::assert_all_decoded_valid(&out);
    (result, out)
}

#[test]
fn messages_become_signals() {
    let mut decoder = OscDecoder::new("osc:phone", 8192);
    let packet = bundle(
        1,
        &[
            msg("/agent/pause", "f", &1.0f32.to_be_bytes()),
            msg("/agent/step", "i", &2i32.to_be_bytes()),
        ],
    );
    let (result, out) = decode(&mut decoder, &packet);
    assert_eq!(result, Ok(2));
    let signals: Vec<Value> = out
        .iter()
        .map(|d| match d {
            Decoded::Signal(s) => s.to_value(),
            Decoded::BadInput(s) => panic!("{s:?}"),
        })
        .collect();
    for (signal, (address, args, tags)) in signals.iter().zip([
        ("/agent/pause", json!([1.0]), "f"),
        ("/agent/step", json!([2]), "i"),
    ]) {
        assert_eq!(signal["type"], "osc.message");
        assert_eq!(signal["source"], "osc:phone");
        assert_eq!(signal["timestamp"], 1_000);
        assert_eq!(signal["metadata"], json!({"peer": "192.168.1.50:53211"}));
        assert_eq!(
            signal["payload"],
            json!({"address": address, "args": args, "tags": tags,
                   "timetag": {"seconds": 0, "fraction": 1, "immediate": true}})
        );
    }
    // A message alone has no `timetag`.
    let (_, out) = decode(&mut decoder, &s("/go"));
    let Decoded::Signal(signal) = &out[0] else {
        panic!()
    };
    assert_eq!(
        signal.to_value()["payload"],
        json!({"address": "/go", "args": [], "tags": ""})
    );
    assert_eq!(decoder.last_timestamp(), 1_000);
}

use serde_json::Value;

#[test]
fn a_refused_packet_is_one_error_signal() {
    let mut decoder = OscDecoder::new("osc:phone", 64);
    let (result, out) = decode(&mut decoder, &msg("/a", "x", &[]));
    assert!(matches!(result, Err(OscError::UnknownTag { tag: 'x', .. })));
    assert_eq!(out.len(), 1);
    let Decoded::BadInput(signal) = &out[0] else {
        panic!("{out:?}")
    };
    let v = signal.to_value();
    assert_eq!(v["type"], "error");
    assert_eq!(v["payload"]["code"], "bad_frame");
    assert_eq!(
        v["payload"]["message"],
        "malformed OSC packet from 192.168.1.50:53211: unknown type tag `x` at argument 1 (`x`) of `/a`"
    );
    assert_eq!(v["metadata"]["raw"], "2f 61 00 00 2c 78 00 00");
    assert_eq!(v["metadata"]["peer"], "192.168.1.50:53211");
    assert_eq!(
        v["timestamp"], 0,
        "no good packet yet: an error never moves the clock"
    );

    let (result, out) = decode(&mut decoder, &[b'/'; 65]);
    assert_eq!(result, Err(OscError::Oversized { max: 64 }));
    let Decoded::BadInput(signal) = &out[0] else {
        panic!()
    };
    assert!(
        signal
            .payload
            .get("message")
            .unwrap()
            .as_str()
            .unwrap()
            .ends_with("a packet of more than 64 bytes (the source's `max_packet`)")
    );
    // Whole or nothing: a bundle with one bad element gives no signal but the error.
    let (result, out) = decode(&mut decoder, &bundle(1, &[s("/ok"), msg("/x", "x", &[])]));
    assert!(result.is_err());
    assert_eq!(out.len(), 1);
    assert!(matches!(out[0], Decoded::BadInput(_)));
}

/// Pieces of OSC packets: property inputs reach past the first byte.
const PIECES: &[&[u8]] = &[
    b"#bundle\0",
    b"/a\0\0",
    b"/agent/pause\0\0\0\0",
    b",\0\0\0",
    b",ifsb",
    b",[i]\0\0\0\0",
    b",TFNI\0\0\0",
    b",htdScrm\0\0\0\0",
    b"\0\0\0\x04",
    b"\0\0\0\x08",
    b"\0\0\0\x10",
    b"\xff\xff\xff\xfc",
    b"\0\0\0\0",
    b"\0\0\0\x01",
    b"[",
    b"]",
];

#[test]
fn arbitrary_bytes_never_panic_and_every_signal_is_valid() {
    let mut rng = Rng(0x05C0_FFEE);
    let mut decoder = OscDecoder::new("osc:prop", 65_535);
    for _ in 0..20_000 {
        let mut bytes = random_pieces(&mut rng, 24, PIECES, 6);
        // Mostly whole words, as real packets are.
        if rng.below(4) != 0 {
            bytes.truncate(bytes.len() / 4 * 4);
        }
        let mut out = Vec::new();
        let result = decoder.decode(&bytes, None, 5, &mut out);
        match result {
            Ok(n) => assert_eq!(n, out.len()),
            Err(_) => assert_eq!(out.len(), 1),
        }
        patchbay_testkit::validity::assert_all_decoded_valid(&out);
        reencodes(&bytes);
    }
}

/// What is taken is written back by the encoder and reads the same (as the fuzz target
/// checks; by `Debug` so that NaN floats compare).
fn reencodes(bytes: &[u8]) {
    if let Ok(packet) = parse_packet(bytes) {
        let mut again = Vec::new();
        crate::encode::encode_packet(&packet, &mut again).expect("a decoded packet encodes");
        let reread = parse_packet(&again).expect("an encoded packet decodes");
        assert_eq!(format!("{packet:?}"), format!("{reread:?}"));
    }
}

#[test]
fn edited_packets_never_panic() {
    let mut data = 1i32.to_be_bytes().to_vec();
    data.extend(0.5f32.to_be_bytes());
    data.extend(s("text"));
    data.extend(3i32.to_be_bytes());
    data.extend([1, 2, 3, 0]);
    data.extend(5i32.to_be_bytes());
    let good = bundle(
        1,
        &[
            msg("/all", "ifsb[i]T", &data),
            bundle(9 << 32, &[msg("/x", "hd", &[0; 16])]),
        ],
    );
    assert!(parse_packet(&good).is_ok());
    let mut rng = Rng(0xBAD_05C);
    let mut decoder = OscDecoder::new("osc:prop", 65_535);
    let mut taken = 0;
    for _ in 0..20_000 {
        let mut bytes = good.clone();
        mutate(&mut rng, &mut bytes, b"\0/,#[]ifsbhtdTFNI\x04\xff");
        let mut out = Vec::new();
        if decoder.decode(&bytes, None, 5, &mut out).is_ok() {
            taken += 1;
        }
        patchbay_testkit::validity::assert_all_decoded_valid(&out);
        reencodes(&bytes);
    }
    // Some edits leave a valid packet (a changed value), most do not.
    assert!(taken > 0 && taken < 20_000, "{taken}");
}
