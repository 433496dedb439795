//! Decoder tests: every message type at its boundaries, running status, real-time bytes,
//! system messages, bad input, and properties over pseudo-random bytes.

use patchbay_signal::normalize::Decoded;
use patchbay_signal::{Object, Signal, object};
use patchbay_testkit::prng::Rng;
use serde_json::{Value, json};

use super::*;

const SOURCE: &str = "midi:test";
const PORT: &str = "ctl:pad";
const TS: i64 = 1_700_000_000_000;

fn plain() -> MidiDecoder {
    MidiDecoder::new(SOURCE, PORT)
}

fn with_system() -> MidiDecoder {
    let config = DecoderConfig {
        system: true,
        ..DecoderConfig::default()
    };
    MidiDecoder::with_config(SOURCE, PORT, &config).unwrap()
}

/// Feeds `bytes` as one stream and ends it; checks every signal against the schema.
fn run(decoder: &mut MidiDecoder, bytes: &[u8]) -> Vec<Decoded> {
    let mut out = Vec::new();
    decoder.feed_at(bytes, TS, &mut out);
    decoder.finish_at(TS, &mut out);
    check_all(&out);
    out
}

fn check_all(out: &[Decoded]) {
    for d in out {
        let (Decoded::Signal(s) | Decoded::BadInput(s)) = d;
        patchbay_testkit::assert_schema_valid(&s.to_value());
        assert_eq!(s.source, SOURCE);
        if let Decoded::BadInput(s) = d {
            assert_eq!(s.kind, "error");
            assert_eq!(s.payload["code"], "bad_frame");
            assert_eq!(s.payload["severity"], "warning");
        } else {
            assert_eq!(
                s.payload["port"], PORT,
                "every signal names its port: {s:?}"
            );
        }
    }
}

/// The one good signal of `bytes` (panics if there is not exactly one and no bad input).
fn one(bytes: &[u8]) -> Signal {
    let out = run(&mut plain(), bytes);
    assert_eq!(out.len(), 1, "{out:?}");
    match out.into_iter().next() {
        Some(Decoded::Signal(s)) => s,
        other => panic!("expected a signal, got {other:?}"),
    }
}

/// (type, payload) of every output, bad input as `("BAD", {message})`.
fn summary(out: &[Decoded]) -> Vec<(String, Value)> {
    out.iter()
        .map(|d| match d {
            Decoded::Signal(s) => (s.kind.to_string(), Value::Object(s.payload.clone())),
            Decoded::BadInput(s) => ("BAD".to_owned(), s.meta("raw").cloned().unwrap_or_default()),
        })
        .collect()
}

fn kinds(out: &[Decoded]) -> Vec<String> {
    summary(out).into_iter().map(|(k, _)| k).collect()
}

fn note(channel: u8, note: u8, velocity: u8) -> Object {
    object! {"channel" => channel, "note" => note, "velocity" => velocity, "port" => PORT}
}

#[test]
fn note_on_at_its_boundaries() {
    let s = one(&[0x90, 0x00, 0x01]);
    assert_eq!(s.kind, "midi.note_on");
    assert_eq!(s.payload, note(1, 0, 1));
    assert_eq!(s.timestamp, TS);
    assert_eq!(s.metadata, None);
    let s = one(&[0x9F, 0x7F, 0x7F]);
    assert_eq!(s.kind, "midi.note_on");
    assert_eq!(s.payload, note(16, 127, 127));
}

#[test]
fn note_on_with_velocity_zero_is_a_note_off() {
    let s = one(&[0x99, 0x24, 0x00]);
    assert_eq!(s.kind, "midi.note_off");
    assert_eq!(s.payload, note(10, 36, 0));
    assert_eq!(s.meta("noteOnZero"), Some(&json!(true)));
}

#[test]
fn note_off_at_its_boundaries() {
    let s = one(&[0x80, 0x3C, 0x00]);
    assert_eq!(s.kind, "midi.note_off");
    assert_eq!(s.payload, note(1, 60, 0));
    assert_eq!(s.metadata, None, "a real note-off is not marked");
    let s = one(&[0x8F, 0x3C, 0x7F]);
    assert_eq!(s.payload, note(16, 60, 127));
}

#[test]
fn control_change_at_its_boundaries() {
    let s = one(&[0xB0, 0x00, 0x00]);
    assert_eq!(s.kind, "midi.control_change");
    assert_eq!(
        s.payload,
        object! {"channel" => 1, "controller" => 0, "value" => 0, "port" => PORT}
    );
    let s = one(&[0xBF, 0x7F, 0x7F]);
    assert_eq!(
        s.payload,
        object! {"channel" => 16, "controller" => 127, "value" => 127, "port" => PORT}
    );
}

#[test]
fn program_change_at_its_boundaries() {
    let s = one(&[0xC0, 0x00]);
    assert_eq!(s.kind, "midi.program_change");
    assert_eq!(
        s.payload,
        object! {"channel" => 1, "program" => 0, "port" => PORT}
    );
    let s = one(&[0xCF, 0x7F]);
    assert_eq!(
        s.payload,
        object! {"channel" => 16, "program" => 127, "port" => PORT}
    );
}

#[test]
fn pitch_bend_min_center_max() {
    let bend = |bytes: &[u8]| {
        let s = one(bytes);
        assert_eq!(s.kind, "midi.pitch_bend");
        s.payload
    };
    assert_eq!(
        bend(&[0xE0, 0x00, 0x00]),
        object! {"channel" => 1, "value" => -8192, "port" => PORT}
    );
    assert_eq!(
        bend(&[0xE0, 0x00, 0x40])["value"],
        0,
        "0x2000 is the center"
    );
    assert_eq!(bend(&[0xE0, 0x7F, 0x3F])["value"], -1);
    assert_eq!(bend(&[0xE0, 0x01, 0x40])["value"], 1, "LSB first");
    assert_eq!(
        bend(&[0xEF, 0x7F, 0x7F]),
        object! {"channel" => 16, "value" => 8191, "port" => PORT}
    );
}

#[test]
fn aftertouch_and_channel_pressure() {
    let s = one(&[0xA0, 0x00, 0x7F]);
    assert_eq!(s.kind, "midi.aftertouch");
    assert_eq!(
        s.payload,
        object! {"channel" => 1, "note" => 0, "value" => 127, "port" => PORT}
    );
    let s = one(&[0xAF, 0x7F, 0x00]);
    assert_eq!(s.payload["channel"], 16);
    let s = one(&[0xD0, 0x00]);
    assert_eq!(s.kind, "midi.channel_pressure");
    assert_eq!(
        s.payload,
        object! {"channel" => 1, "value" => 0, "port" => PORT}
    );
    let s = one(&[0xDF, 0x7F]);
    assert_eq!(
        s.payload,
        object! {"channel" => 16, "value" => 127, "port" => PORT}
    );
}

#[test]
fn running_status_within_and_across_calls() {
    let mut d = plain();
    let mut out = Vec::new();
    d.feed_at(&[0x90, 0x3C, 0x64, 0x3E], TS, &mut out);
    d.feed_at(&[0x64, 0x3C], TS, &mut out);
    d.feed_at(
        &[0x00, 0xC2, 0x05, 0x06, 0xB0, 0x07, 0x10, 0x07, 0x20],
        TS,
        &mut out,
    );
    d.finish_at(TS, &mut out);
    check_all(&out);
    assert_eq!(
        summary(&out),
        vec![
            ("midi.note_on".into(), Value::Object(note(1, 60, 100))),
            ("midi.note_on".into(), Value::Object(note(1, 62, 100))),
            ("midi.note_off".into(), Value::Object(note(1, 60, 0))),
            (
                "midi.program_change".into(),
                json!({"channel": 3, "program": 5, "port": PORT})
            ),
            (
                "midi.program_change".into(),
                json!({"channel": 3, "program": 6, "port": PORT})
            ),
            (
                "midi.control_change".into(),
                json!({"channel": 1, "controller": 7, "value": 16, "port": PORT})
            ),
            (
                "midi.control_change".into(),
                json!({"channel": 1, "controller": 7, "value": 32, "port": PORT})
            ),
        ]
    );
}

#[test]
fn running_status_across_messages() {
    let mut d = plain();
    let mut out = Vec::new();
    d.decode_message(&[0x91, 0x3C, 0x64], 10, &mut out);
    d.decode_message(&[0x3C, 0x00], 20, &mut out);
    check_all(&out);
    assert_eq!(kinds(&out), ["midi.note_on", "midi.note_off"]);
    let stamps: Vec<i64> = out.into_iter().map(|d| d.into_signal().timestamp).collect();
    assert_eq!(stamps, [10, 20], "each message keeps its own timestamp");
}

#[test]
fn real_time_bytes_inside_a_message_are_transparent() {
    let bytes = [0x90, 0xF8, 0x3C, 0xFE, 0x64, 0xF8, 0x3E, 0xFA, 0x64];
    let out = run(&mut plain(), &bytes);
    assert_eq!(
        kinds(&out),
        ["midi.note_on", "midi.note_on"],
        "dropped by default"
    );
    let out = run(&mut with_system(), &bytes);
    assert_eq!(
        kinds(&out),
        [
            "midi.clock",
            "midi.active_sensing",
            "midi.note_on",
            "midi.clock",
            "midi.start",
            "midi.note_on"
        ]
    );
    assert_eq!(out[2].clone().into_signal().payload, note(1, 60, 100));
    assert_eq!(
        out[0].clone().into_signal().payload,
        object! {"hex" => "f8", "port" => PORT}
    );
}

#[test]
fn every_real_time_byte_has_a_type() {
    let out = run(
        &mut with_system(),
        &[0xF8, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF],
    );
    assert_eq!(
        kinds(&out),
        [
            "midi.clock",
            "midi.system",
            "midi.start",
            "midi.continue",
            "midi.stop",
            "midi.system",
            "midi.active_sensing",
            "midi.reset"
        ]
    );
    assert_eq!(out[1].clone().into_signal().payload["hex"], "f9");
}

#[test]
fn sysex_is_ignored_by_default_and_cancels_running_status() {
    let bytes = [
        0x90, 0x3C, 0x64, 0xF0, 0x7E, 0x7F, 0x06, 0x01, 0xF7, 0x3C, 0x64,
    ];
    let out = run(&mut plain(), &bytes);
    assert_eq!(kinds(&out), ["midi.note_on", "BAD"]);
    assert_eq!(
        summary(&out)[1].1,
        "3c 64",
        "data after a SysEx has no status"
    );
}

#[test]
fn sysex_is_kept_with_system() {
    let out = run(
        &mut with_system(),
        &[0xF0, 0x7E, 0xF8, 0x7F, 0x06, 0x01, 0xF7],
    );
    assert_eq!(kinds(&out), ["midi.clock", "midi.sysex"]);
    let s = out[1].clone().into_signal();
    assert_eq!(
        s.payload,
        object! {"hex" => "f0 7e 7f 06 01 f7", "port" => PORT}
    );
    assert_eq!(s.metadata, None);
}

#[test]
fn sysex_cut_by_a_status_byte_or_the_end_is_kept_as_unterminated() {
    let out = run(
        &mut with_system(),
        &[0xF0, 0x01, 0x02, 0x90, 0x3C, 0x64, 0xF0, 0x03],
    );
    assert_eq!(kinds(&out), ["midi.sysex", "midi.note_on", "midi.sysex"]);
    let first = out[0].clone().into_signal();
    assert_eq!(first.payload["hex"], "f0 01 02");
    assert_eq!(first.meta("unterminated"), Some(&json!(true)));
    let last = out[2].clone().into_signal();
    assert_eq!(last.payload["hex"], "f0 03");
    assert_eq!(last.meta("unterminated"), Some(&json!(true)));
    // Without `system` the same input only gives the note, and no bad input.
    assert_eq!(
        kinds(&run(
            &mut plain(),
            &[0xF0, 0x01, 0x02, 0x90, 0x3C, 0x64, 0xF0, 0x03]
        )),
        ["midi.note_on"]
    );
}

#[test]
fn long_sysex_is_truncated_with_its_length() {
    let mut bytes = vec![0xF0];
    bytes.extend(std::iter::repeat_n(0x11, MAX_SYSEX + 10));
    bytes.push(0xF7);
    let out = run(&mut with_system(), &bytes);
    assert_eq!(out.len(), 1);
    let s = out[0].clone().into_signal();
    assert_eq!(s.meta("truncated"), Some(&json!(true)));
    assert_eq!(s.meta("length"), Some(&json!(MAX_SYSEX + 12)));
    let hex = s.payload["hex"].as_str().unwrap();
    assert_eq!(hex.len(), MAX_SYSEX * 3 - 1);
}

#[test]
fn system_common_messages() {
    let bytes = [0xF1, 0x25, 0xF2, 0x01, 0x02, 0xF3, 0x07, 0xF6, 0xF4, 0xF5];
    let out = run(&mut with_system(), &bytes);
    assert_eq!(
        summary(&out),
        vec![
            (
                "midi.mtc_quarter_frame".into(),
                json!({"hex": "f1 25", "value": 0x25, "port": PORT})
            ),
            (
                "midi.song_position".into(),
                json!({"hex": "f2 01 02", "value": 0x101, "port": PORT})
            ),
            (
                "midi.song_select".into(),
                json!({"hex": "f3 07", "song": 7, "port": PORT})
            ),
            (
                "midi.tune_request".into(),
                json!({"hex": "f6", "port": PORT})
            ),
            ("midi.system".into(), json!({"hex": "f4", "port": PORT})),
            ("midi.system".into(), json!({"hex": "f5", "port": PORT})),
        ]
    );
    assert!(run(&mut plain(), &bytes).is_empty(), "ignored by default");
}

#[test]
fn system_common_cancels_running_status_and_takes_no_running_status() {
    let out = run(&mut plain(), &[0x90, 0x3C, 0x64, 0xF3, 0x01, 0x02, 0x03]);
    assert_eq!(kinds(&out), ["midi.note_on", "BAD"]);
    assert_eq!(summary(&out)[1].1, "02 03");
}

#[test]
fn data_bytes_without_status_are_one_bad_input_per_run() {
    let mut d = plain();
    let out = run(&mut d, &[0x3C, 0x64, 0x90, 0x3C, 0x64]);
    assert_eq!(kinds(&out), ["BAD", "midi.note_on"]);
    let bad = out[0].clone().into_signal();
    assert_eq!(bad.meta("raw"), Some(&json!("3c 64")));
    assert_eq!(bad.meta("port"), Some(&json!(PORT)));
    assert!(
        bad.payload["message"]
            .as_str()
            .unwrap()
            .contains("2 MIDI byte(s)")
    );
    assert_eq!(bad.timestamp, 0, "no good message yet");
}

#[test]
fn bad_input_takes_the_last_good_timestamp() {
    let mut d = plain();
    let mut out = Vec::new();
    d.decode_message(&[0x90, 0x3C, 0x64], 500, &mut out);
    d.decode_message(&[0xF7, 0x01], 900, &mut out);
    check_all(&out);
    assert_eq!(kinds(&out), ["midi.note_on", "BAD"]);
    let bad = out[1].clone().into_signal();
    assert_eq!(bad.timestamp, 500);
    assert_eq!(
        bad.meta("raw"),
        Some(&json!("f7 01")),
        "a lone F7 is outside any message"
    );
    assert_eq!(d.last_timestamp(), 500);
}

#[test]
fn long_stray_runs_are_quoted_cut() {
    let out = run(&mut plain(), &[0x01; 100]);
    assert_eq!(out.len(), 1);
    let bad = out[0].clone().into_signal();
    let raw = bad.meta("raw").unwrap().as_str().unwrap();
    assert!(raw.ends_with(" …"), "{raw}");
    assert!(
        bad.payload["message"]
            .as_str()
            .unwrap()
            .starts_with("100 MIDI byte(s)")
    );
}

#[test]
fn incomplete_messages_are_reported() {
    // Cut by another status byte.
    let out = run(&mut plain(), &[0x90, 0x3C, 0xB0, 0x07, 0x7F]);
    assert_eq!(kinds(&out), ["BAD", "midi.control_change"]);
    assert_eq!(summary(&out)[0].1, "90 3c");
    let message = out[0].clone().into_signal().payload["message"].clone();
    assert_eq!(
        message,
        "incomplete MIDI message: note on needs 2 data byte(s), got 1"
    );
    // Cut by the end of the stream.
    let out = run(&mut plain(), &[0xE0, 0x00]);
    assert_eq!(kinds(&out), ["BAD"]);
    // A status byte alone at the end is only a running status: nothing to report.
    assert!(run(&mut plain(), &[0x90]).is_empty());
    // A system common status alone is incomplete.
    assert_eq!(kinds(&run(&mut plain(), &[0xF2, 0x01])), ["BAD"]);
}

#[test]
fn incomplete_message_in_one_callback_is_reported_at_once() {
    let mut d = plain();
    let mut out = Vec::new();
    d.decode_message(&[0x90, 0x3C], 10, &mut out);
    assert_eq!(kinds(&out), ["BAD"]);
    // The running status survives: a following message may omit it.
    d.decode_message(&[0x3C, 0x64], 20, &mut out);
    assert_eq!(kinds(&out), ["BAD", "midi.note_on"]);
    check_all(&out);
}

#[test]
fn sysex_stays_open_across_callbacks() {
    let mut d = with_system();
    let mut out = Vec::new();
    d.decode_message(&[0xF0, 0x01], 10, &mut out);
    d.decode_message(&[0x02, 0xF7], 20, &mut out);
    check_all(&out);
    assert_eq!(
        summary(&out),
        vec![(
            "midi.sysex".into(),
            json!({"hex": "f0 01 02 f7", "port": PORT})
        )]
    );
}

#[test]
fn channel_filter() {
    let config = DecoderConfig {
        channel: Some(10),
        system: true,
    };
    let mut d = MidiDecoder::with_config(SOURCE, PORT, &config).unwrap();
    let out = run(
        &mut d,
        &[
            0x99, 0x24, 0x64, 0x90, 0x24, 0x64, 0x24, 0x00, 0xF8, 0x89, 0x24, 0x00,
        ],
    );
    assert_eq!(kinds(&out), ["midi.note_on", "midi.clock", "midi.note_off"]);
    assert!(out.iter().all(|d| {
        let s = d.clone().into_signal();
        s.kind == "midi.clock" || s.payload["channel"] == 10
    }));
}

#[test]
fn invalid_channel_filter_is_a_config_error() {
    for channel in [0, 17, 255] {
        let config = DecoderConfig {
            channel: Some(channel),
            system: false,
        };
        let err = MidiDecoder::with_config(SOURCE, PORT, &config).unwrap_err();
        assert_eq!(err, ConfigError::Channel(channel));
        assert!(err.to_string().contains("1-16"));
    }
    for channel in [1, 16] {
        let config = DecoderConfig {
            channel: Some(channel),
            system: false,
        };
        assert!(config.validate().is_ok());
    }
}

#[test]
fn config_deserializes_with_defaults() {
    let config: DecoderConfig = serde_json::from_value(json!({"channel": 3})).unwrap();
    assert_eq!(
        config,
        DecoderConfig {
            channel: Some(3),
            system: false
        }
    );
    let config: DecoderConfig = serde_json::from_value(json!({})).unwrap();
    assert_eq!(config, DecoderConfig::default());
}

#[test]
fn set_port_renames_and_resets() {
    let mut d = plain();
    let mut out = Vec::new();
    d.feed_at(&[0x90, 0x3C], TS, &mut out);
    d.set_port("ctl-01:pad");
    assert_eq!(d.port(), "ctl-01:pad");
    d.feed_at(&[0x64, 0x90, 0x3C, 0x64], TS, &mut out);
    d.finish_at(TS, &mut out);
    let out: Vec<_> = out.into_iter().map(Decoded::into_signal).collect();
    assert_eq!(out.len(), 2, "the old partial message is gone: {out:?}");
    assert_eq!(out[0].kind, "error", "the orphan data byte is stray");
    assert_eq!(out[1].payload["port"], "ctl-01:pad");
}

#[test]
fn stream_decoder_trait_stamps_with_now() {
    let mut d: Box<dyn StreamDecoder> = Box::new(plain());
    let mut out = Vec::new();
    d.feed(&[0x90, 0x3C, 0x64], &mut out);
    d.finish(&mut out);
    let s = out.remove(0).into_signal();
    assert!(s.timestamp > 1_600_000_000_000);
    assert_eq!(s.kind, "midi.note_on");
}

/// Bytes that look like MIDI often enough to reach every state: mostly data bytes, some
/// channel status bytes, some system and real-time bytes.
fn midi_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| match rng.below(10) {
            0..=5 => rng.below(0x80) as u8,
            6 | 7 => 0x80 + rng.below(0x70) as u8,
            8 => 0xF0 + rng.below(8) as u8,
            _ => 0xF8 + rng.below(8) as u8,
        })
        .collect()
}

fn any_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// Checks the invariants of every output: schema-valid, ports set, numbers in range.
fn check_ranges(out: &[Decoded]) {
    check_all(out);
    for d in out {
        let Decoded::Signal(s) = d else { continue };
        let p = &s.payload;
        if types::CHANNEL.contains(&s.kind.as_str()) {
            let channel = p["channel"].as_u64().unwrap();
            assert!((1..=16).contains(&channel), "{s:?}");
        }
        for key in ["note", "velocity", "controller", "program"] {
            if let Some(v) = p.get(key) {
                assert!(v.as_u64().unwrap() <= 127, "{s:?}");
            }
        }
        if let Some(v) = p.get("value").and_then(Value::as_i64) {
            let range = if s.kind == types::PITCH_BEND {
                -8192..=8191
            } else {
                0..=16383
            };
            assert!(range.contains(&v), "{s:?}");
        }
        if s.kind == types::NOTE_ON {
            assert_ne!(p["velocity"], 0);
        }
    }
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for round in 0..400 {
        let len = rng.below(300);
        let bytes = if round % 2 == 0 {
            any_bytes(&mut rng, len)
        } else {
            midi_bytes(&mut rng, len)
        };
        for mut decoder in [plain(), with_system()] {
            let out = run(&mut decoder, &bytes);
            check_ranges(&out);
            // The same bytes as midir-style messages of random sizes.
            let mut out = Vec::new();
            let mut rest = bytes.as_slice();
            while !rest.is_empty() {
                let n = (rng.below(5) + 1).min(rest.len());
                let (message, tail) = rest.split_at(n);
                decoder.decode_message(message, TS, &mut out);
                rest = tail;
            }
            decoder.finish_at(TS, &mut out);
            check_ranges(&out);
        }
    }
}

/// What must not depend on the split: everything but the id.
fn comparable(out: &[Decoded]) -> Vec<(bool, String, i64, Object, Option<Object>)> {
    out.iter()
        .map(|d| {
            let bad = d.is_bad();
            let s = d.clone().into_signal();
            (
                bad,
                s.kind.into(),
                s.timestamp,
                s.payload.into(),
                s.metadata.map(Into::into),
            )
        })
        .collect()
}

#[test]
fn split_insensitive() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for round in 0..300 {
        let len = rng.below(200);
        let bytes = if round % 3 == 0 {
            any_bytes(&mut rng, len)
        } else {
            midi_bytes(&mut rng, len)
        };
        for system in [false, true] {
            let make = || {
                let config = DecoderConfig {
                    channel: None,
                    system,
                };
                MidiDecoder::with_config(SOURCE, PORT, &config).unwrap()
            };
            let whole = run(&mut make(), &bytes);
            let mut split = make();
            let mut out = Vec::new();
            let mut rest = bytes.as_slice();
            while !rest.is_empty() {
                let n = rng.below(7).min(rest.len());
                let (chunk, tail) = rest.split_at(n);
                split.feed_at(chunk, TS, &mut out);
                rest = tail;
            }
            split.finish_at(TS, &mut out);
            assert_eq!(comparable(&whole), comparable(&out), "bytes {bytes:02x?}");
        }
    }
}
