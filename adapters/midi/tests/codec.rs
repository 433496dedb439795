//! The codec from the outside: encoder round trips and errors, the `parse` text format,
//! and learned config blocks.

use patchbay_midi::{
    EncodeError, LearnError, MidiDecoder, PARSE_PORT, encode, learn_block, parse_decoder,
};
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{Object, Signal, object};
use serde_json::{Value, json};

const PORT: &str = "patchbay:leds";

fn signal(kind: &str, payload: Object) -> Signal {
    Signal::new(kind, "test:out", payload).at(42)
}

fn decode_one(bytes: &[u8]) -> Signal {
    let mut decoder = MidiDecoder::new("midi:back", PORT);
    let mut out = Vec::new();
    decoder.decode_message(bytes, 42, &mut out);
    assert_eq!(out.len(), 1, "{bytes:02x?} gave {out:?}");
    match out.pop() {
        Some(Decoded::Signal(s)) => s,
        other => panic!("{bytes:02x?} gave {other:?}"),
    }
}

/// Every channel message at its boundaries, as the decoder makes them.
fn boundary_signals() -> Vec<Signal> {
    let mut signals = Vec::new();
    for channel in [1u8, 16] {
        for (a, b) in [(0u8, 1u8), (127, 127), (60, 64)] {
            signals.push(signal(
                "midi.note_on",
                object! {"channel" => channel, "note" => a, "velocity" => b, "port" => PORT},
            ));
        }
        for (a, b) in [(0u8, 0u8), (127, 127)] {
            signals.push(signal(
                "midi.note_off",
                object! {"channel" => channel, "note" => a, "velocity" => b, "port" => PORT},
            ));
            signals.push(signal(
                "midi.control_change",
                object! {"channel" => channel, "controller" => a, "value" => b, "port" => PORT},
            ));
            signals.push(signal(
                "midi.aftertouch",
                object! {"channel" => channel, "note" => a, "value" => b, "port" => PORT},
            ));
            signals.push(signal(
                "midi.program_change",
                object! {"channel" => channel, "program" => a, "port" => PORT},
            ));
            signals.push(signal(
                "midi.channel_pressure",
                object! {"channel" => channel, "value" => b, "port" => PORT},
            ));
        }
        for value in [-8192i64, -1, 0, 1, 8191] {
            signals.push(signal(
                "midi.pitch_bend",
                object! {"channel" => channel, "value" => value, "port" => PORT},
            ));
        }
    }
    signals
}

#[test]
fn encoder_round_trip() {
    for s in boundary_signals() {
        let bytes = encode(&s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
        let back = decode_one(&bytes);
        assert_eq!(back.kind, s.kind, "{bytes:02x?}");
        assert_eq!(back.payload, s.payload, "{bytes:02x?}");
        patchbay_testkit::assert_schema_valid(&back.to_value());
    }
}

#[test]
fn encoder_bytes() {
    let bend = |v: i64| {
        encode(&signal(
            "midi.pitch_bend",
            object! {"channel" => 1, "value" => v},
        ))
    };
    assert_eq!(bend(-8192), Ok(vec![0xE0, 0x00, 0x00]));
    assert_eq!(bend(0), Ok(vec![0xE0, 0x00, 0x40]));
    assert_eq!(bend(8191), Ok(vec![0xE0, 0x7F, 0x7F]));
    let on = signal(
        "midi.note_on",
        object! {"channel" => 10, "note" => 36, "velocity" => 100},
    );
    assert_eq!(encode(&on), Ok(vec![0x99, 0x24, 0x64]));
    // A note-on with velocity 0 is sent as asked (LED off on many controllers).
    let on0 = signal(
        "midi.note_on",
        object! {"channel" => 1, "note" => 36, "velocity" => 0},
    );
    assert_eq!(encode(&on0), Ok(vec![0x90, 0x24, 0x00]));
    // Floats (from a `scale`) are rounded.
    let cc = signal(
        "midi.control_change",
        object! {"channel" => 1.0, "controller" => 7, "value" => 63.5},
    );
    assert_eq!(encode(&cc), Ok(vec![0xB0, 0x07, 0x40]));
}

#[test]
fn note_off_velocity_defaults_to_zero() {
    let off = signal("midi.note_off", object! {"channel" => 2, "note" => 60});
    assert_eq!(encode(&off), Ok(vec![0x81, 0x3C, 0x00]));
}

#[test]
fn decoded_note_on_zero_is_sent_back_as_such() {
    for bytes in [[0x95u8, 0x30, 0x00], [0x85, 0x30, 0x00]] {
        let decoded = decode_one(&bytes);
        assert_eq!(decoded.kind, "midi.note_off");
        assert_eq!(encode(&decoded), Ok(bytes.to_vec()));
    }
}

#[test]
fn encoder_errors() {
    let err = |kind: &str, payload: Object| encode(&signal(kind, payload)).unwrap_err();

    let e = err("control.pause", object! {});
    assert_eq!(e, EncodeError::UnsupportedType("control.pause".into()));
    assert!(
        e.to_string()
            .starts_with("`control.pause` cannot be sent as MIDI")
    );
    assert!(matches!(
        err("midi.sysex", object! {"hex" => "f0 f7"}),
        EncodeError::UnsupportedType(_)
    ));

    let e = err("midi.note_on", object! {"channel" => 1, "note" => 60});
    assert_eq!(
        e,
        EncodeError::MissingField {
            kind: "midi.note_on".into(),
            field: "velocity"
        }
    );
    assert_eq!(e.to_string(), "midi.note_on: payload.velocity is missing");
    let e = err(
        "midi.control_change",
        object! {"controller" => 1, "value" => 1},
    );
    assert!(matches!(
        e,
        EncodeError::MissingField {
            field: "channel",
            ..
        }
    ));
    let e = err(
        "midi.note_on",
        object! {"channel" => Value::Null, "note" => 1, "velocity" => 1},
    );
    assert!(matches!(
        e,
        EncodeError::MissingField {
            field: "channel",
            ..
        }
    ));

    for channel in [
        json!(0),
        json!(17),
        json!(-1),
        json!(16.6),
        json!(1e300),
        json!(u64::MAX),
    ] {
        let e = err(
            "midi.program_change",
            object! {"channel" => channel.clone(), "program" => 1},
        );
        assert!(
            matches!(
                e,
                EncodeError::OutOfRange {
                    field: "channel",
                    min: 1,
                    max: 16,
                    ..
                }
            ),
            "{channel}: {e:?}"
        );
    }
    let e = err(
        "midi.note_on",
        object! {"channel" => 1, "note" => 128, "velocity" => 1},
    );
    assert_eq!(
        e.to_string(),
        "midi.note_on: payload.note = 128 is out of range 0..=127"
    );
    let e = err(
        "midi.channel_pressure",
        object! {"channel" => 1, "value" => -1},
    );
    assert!(matches!(e, EncodeError::OutOfRange { field: "value", .. }));
    let e = err("midi.pitch_bend", object! {"channel" => 1, "value" => 8192});
    assert_eq!(
        e.to_string(),
        "midi.pitch_bend: payload.value = 8192 is out of range -8192..=8191"
    );
    let e = err(
        "midi.pitch_bend",
        object! {"channel" => 1, "value" => -8193},
    );
    assert!(matches!(
        e,
        EncodeError::OutOfRange {
            min: -8192,
            max: 8191,
            ..
        }
    ));

    let e = err(
        "midi.note_on",
        object! {"channel" => "1", "note" => 1, "velocity" => 1},
    );
    assert_eq!(
        e.to_string(),
        "midi.note_on: payload.channel must be a number, got \"1\""
    );
    let e = err(
        "midi.note_off",
        object! {"channel" => 1, "note" => 1, "velocity" => true},
    );
    assert!(matches!(
        e,
        EncodeError::NotANumber {
            field: "velocity",
            ..
        }
    ));
}

#[test]
fn parse_text_lines() {
    let text = "\
# a pad on channel 10
99 24 64
\r
24 00   # running status
zz 12
903c64
0x80,0x3c,0x00
3c";
    let mut decoder = parse_decoder("parse:midi");
    let mut out = Vec::new();
    decoder.feed(text.as_bytes(), &mut out);
    decoder.finish(&mut out);
    let kinds: Vec<(bool, String)> = out
        .iter()
        .map(|d| (d.is_bad(), d.clone().into_signal().kind.into()))
        .collect();
    assert_eq!(
        kinds,
        [
            (false, "midi.note_on".to_owned()),
            (false, "midi.note_off".to_owned()),
            (true, "error".to_owned()),
            (false, "midi.note_on".to_owned()),
            (false, "midi.note_off".to_owned()),
            (true, "error".to_owned()),
        ]
    );
    let signals: Vec<Signal> = out.into_iter().map(Decoded::into_signal).collect();
    for s in &signals {
        assert_eq!(s.source, "parse:midi");
        patchbay_testkit::assert_schema_valid(&s.to_value());
    }
    assert_eq!(
        signals[0].payload,
        object! {"channel" => 10, "note" => 36, "velocity" => 100, "port" => PORT_OF_PARSE}
    );
    assert_eq!(signals[2].meta("raw"), Some(&json!("zz 12")));
    assert_eq!(signals[2].payload["message"], "`zz` is not hex bytes");
    assert_eq!(
        signals[2].timestamp, signals[1].timestamp,
        "a bad line takes the last good timestamp"
    );
    assert_eq!(
        signals[5].meta("raw"),
        Some(&json!("80 3c")),
        "running status kept, message cut"
    );
}

const PORT_OF_PARSE: &str = PARSE_PORT;

#[test]
fn parse_is_split_insensitive() {
    let text = b"99 24 64\n24 00\nb0 07 7f\n07 00\nnot hex\nf0 01 f7\n3c\n";
    let whole = {
        let mut d = parse_decoder("parse:midi");
        let mut out = Vec::new();
        d.feed(text, &mut out);
        d.finish(&mut out);
        out
    };
    for size in 1..8 {
        let mut d = parse_decoder("parse:midi");
        let mut out = Vec::new();
        for chunk in text.chunks(size) {
            d.feed(chunk, &mut out);
        }
        d.finish(&mut out);
        let view = |o: &[Decoded]| -> Vec<(bool, String, Object)> {
            o.iter()
                .map(|d| {
                    let s = d.clone().into_signal();
                    (d.is_bad(), s.kind.into(), s.payload.into())
                })
                .collect()
        };
        assert_eq!(view(&whole), view(&out), "chunks of {size}");
    }
}

fn toml_value(block: &str) -> toml::Table {
    block
        .parse::<toml::Table>()
        .unwrap_or_else(|e| panic!("{block}\n{e}"))
}

#[test]
fn learn_a_pad() {
    let pad = signal(
        "midi.note_on",
        object! {"channel" => 10, "note" => 36, "velocity" => 100, "port" => "ctl:pad"},
    );
    let block = learn_block(&pad, "pads", "control.pause").unwrap();
    assert_eq!(
        block,
        "[filters.pad_36_pause]\n\
         type = \"map\"\n\
         inputs = [\"pads\"]\n\
         when = { type = \"midi.note_on\", \"payload.note\" = 36, \"payload.channel\" = 10 }\n\
         set_type = \"control.pause\"\n"
    );
    let table = toml_value(&block);
    let filter = &table["filters"]["pad_36_pause"];
    assert_eq!(filter["type"].as_str(), Some("map"));
    assert_eq!(filter["set_type"].as_str(), Some("control.pause"));
    let when = filter["when"].as_table().unwrap();
    assert_eq!(when.len(), 3);
    assert_eq!(when["type"].as_str(), Some("midi.note_on"));
    assert_eq!(when["payload.note"].as_integer(), Some(36));
    assert_eq!(when["payload.channel"].as_integer(), Some(10));

    // The release of the same pad learns the press.
    let release = signal(
        "midi.note_off",
        object! {"channel" => 10, "note" => 36, "velocity" => 0},
    );
    assert_eq!(
        learn_block(&release, "pads", "control.pause").unwrap(),
        block
    );
}

#[test]
fn learn_a_knob() {
    let knob = signal(
        "midi.control_change",
        object! {"channel" => 1, "controller" => 7, "value" => 90, "port" => "ctl:knobs"},
    );
    let block = learn_block(&knob, "knobs", "control.step").unwrap();
    assert!(block.contains("# payload.value is 0-127"), "{block}");
    assert!(block.contains("# scale = "), "suggests a scale: {block}");
    let table = toml_value(&block);
    let filter = &table["filters"]["cc_7_step"];
    let when = filter["when"].as_table().unwrap();
    assert_eq!(when["type"].as_str(), Some("midi.control_change"));
    assert_eq!(when["payload.controller"].as_integer(), Some(7));
    assert_eq!(when["payload.channel"].as_integer(), Some(1));
    assert!(
        when.get("payload.value").is_none(),
        "any position of the knob"
    );
    assert_eq!(
        filter["inputs"].as_array().unwrap()[0].as_str(),
        Some("knobs")
    );
}

#[test]
fn learn_a_program_change_and_odd_names() {
    let program = signal(
        "midi.program_change",
        object! {"channel" => 16, "program" => 0},
    );
    let block = learn_block(&program, "say \"hi\"\\", "my.weird type!").unwrap();
    let table = toml_value(&block);
    let filter = &table["filters"]["program_0_weird_type"];
    assert_eq!(
        filter["inputs"].as_array().unwrap()[0].as_str(),
        Some("say \"hi\"\\")
    );
    assert_eq!(filter["set_type"].as_str(), Some("my.weird type!"));
    assert_eq!(filter["when"]["payload.program"].as_integer(), Some(0));
    // A target with no last segment still gives a valid name.
    let block = learn_block(&program, "p", "control.").unwrap();
    assert!(block.starts_with("[filters.program_0]\n"), "{block}");
    toml_value(&block);
}

#[test]
fn learn_errors() {
    let bend = signal("midi.pitch_bend", object! {"channel" => 1, "value" => 0});
    let e = learn_block(&bend, "pads", "control.pause").unwrap_err();
    assert_eq!(e, LearnError::NotLearnable("midi.pitch_bend".into()));
    assert!(e.to_string().contains("cannot be learned"));
    let no_note = signal("midi.note_on", object! {"channel" => 1, "velocity" => 1});
    assert_eq!(
        learn_block(&no_note, "pads", "control.pause").unwrap_err(),
        LearnError::BadField {
            kind: "midi.note_on".into(),
            field: "note"
        }
    );
    let bad_channel = signal("midi.note_on", object! {"channel" => 0, "note" => 1});
    assert!(matches!(
        learn_block(&bad_channel, "pads", "control.pause"),
        Err(LearnError::BadField {
            field: "channel",
            ..
        })
    ));
}
