//! Golden tests: streams built from Palyra's published golden run tape (console NDJSON and
//! realtime frames) decode to the exact signal sequence.

mod common;

use common::*;
use patchbay_palyra::{HandshakeOptions, PalyraDecoder, parse_decoder};
use patchbay_signal::Signal;
use serde_json::{Value, json};

const SOURCE: &str = "parse:palyra";

/// The run's signals after the stream's framing: the same from both surfaces.
fn assert_run_signals(run: &[Signal]) {
    assert_eq!(
        kinds(run),
        [
            "agent_state_change",
            "agent_state_change",
            "text_delta",
            "palyra.provider_turn_output",
            "palyra.message.replied",
            "completion",
        ]
    );
    for s in run {
        assert_eq!(s.correlation_id.as_deref(), Some(RUN), "{}", s.to_json());
        assert_eq!(s.source, SOURCE);
    }
    assert_eq!(run[0].payload["from"], "idle");
    assert_eq!(run[0].payload["to"], "thinking");
    assert_eq!(
        run[0].payload["reason"],
        "accepted session=01ARZ3NDEKTSV4RRFFQ69G5FAW principal=user:ops"
    );
    assert_eq!(run[0].payload["agentId"], SOURCE);
    assert_eq!(run[1].payload["from"], "thinking");
    assert_eq!(run[1].payload["to"], "acting");
    assert_eq!(run[1].payload["reason"], "streaming");
    assert_eq!(run[2].payload["content"], "<redacted>");
    assert_eq!(run[2].payload["index"], 0);
    assert_eq!(run[2].meta("is_final"), Some(&Value::Bool(true)));
    assert_eq!(run[3].payload["full_text"], "alpha beta gamma");
    assert_eq!(run[3].payload["finish_reason"], "stop");
    assert_eq!(
        run[4].payload,
        *json!({"reply_text": "alpha beta gamma"})
            .as_object()
            .unwrap()
    );
    assert_eq!(run[5].payload["taskId"], RUN);
    assert_eq!(run[5].payload["success"], true);
    assert_eq!(run[5].payload["result"], "done");
    assert_eq!(run[5].meta("message"), Some(&json!("completed")));
}

#[test]
fn console_stream_from_the_golden_tape() {
    let out = decode_whole(&mut PalyraDecoder::new(SOURCE), &console_stream());
    assert!(out.iter().all(|d| !d.is_bad()));
    let signals = into_signals(out);
    assert_all_valid(&signals);
    assert_eq!(signals.len(), 8, "{:#?}", kinds(&signals));
    assert_eq!(signals[0].kind, "palyra.meta");
    assert_eq!(signals[0].payload["session_id"], SESSION);
    assert_eq!(signals[0].correlation_id.as_deref(), Some(RUN));
    assert_run_signals(&signals[1..7]);
    // The closing `complete` repeats `done`: no second completion.
    assert_eq!(signals[7].kind, "palyra.complete");
    assert_eq!(signals[7].payload["status"], "done");
    assert_eq!(
        kinds(&signals)
            .iter()
            .filter(|k| **k == "completion")
            .count(),
        1
    );
}

#[test]
fn realtime_frames_from_the_golden_tape() {
    let frames = realtime_frames();
    let out = decode_whole(&mut PalyraDecoder::new(SOURCE), &ndjson(&frames));
    assert!(out.iter().all(|d| !d.is_bad()));
    let signals = into_signals(out);
    assert_all_valid(&signals);
    assert_eq!(signals[0].kind, "palyra.handshake.accepted");
    assert_eq!(signals[0].meta("internal"), Some(&Value::Bool(true)));
    assert_eq!(signals[0].timestamp, T0 - 5, "server_time_unix_ms");
    assert_eq!(signals[1].kind, "palyra.subscribed");
    assert_run_signals(&signals[2..]);
    // Realtime events carry their own time and envelope fields.
    let run = &signals[2..];
    let seqs = [0u64, 1, 2, 3, 4, 5];
    for (s, seq) in run.iter().zip(seqs) {
        assert_eq!(s.timestamp, T0 + 10 * seq as i64);
        assert_eq!(s.meta("sequence"), Some(&json!(seq + 1)));
        assert_eq!(s.meta("event_id"), Some(&json!(format!("evt-{}", seq + 1))));
        assert_eq!(s.meta("topic"), Some(&json!("run")));
        assert_eq!(s.meta("owner_session_id"), Some(&json!(SESSION)));
    }
}

#[test]
fn parse_decoder_reads_both_shapes_in_one_file() {
    let mut text = console_stream();
    text.push_str(&ndjson(&realtime_frames()));
    let signals = into_signals(decode_whole(parse_decoder(SOURCE).as_mut(), &text));
    assert_all_valid(&signals);
    // The realtime events repeat an already completed run: its `done` is not a second
    // completion.
    assert_eq!(
        kinds(&signals)
            .iter()
            .filter(|k| **k == "completion")
            .count(),
        1
    );
    assert_eq!(signals.len(), 8 + 2 + 6);
    assert_eq!(signals.last().unwrap().kind, "palyra.status");
}

#[test]
fn reconnect_replay_is_deduplicated() {
    let frames = realtime_frames();
    let mut decoder = PalyraDecoder::new(SOURCE);
    let first = into_signals(decode_whole(&mut decoder, &ndjson(&frames[..5])));
    assert_eq!(first.len(), 2 + 3);
    assert_eq!(decoder.resume().cursor(), Some(3));

    // The transport reconnects with the resume point in its handshake...
    let handshake = decoder
        .resume()
        .handshake_frame(&HandshakeOptions::new("patchbay"));
    assert_eq!(handshake["type"], "handshake");
    assert_eq!(handshake["payload"]["event_cursor"], json!({"sequence": 3}));

    // ...and the daemon's replay overlaps what was decoded (sequence 2 and 3 again).
    let mut replay = vec![handshake_accepted(3)];
    replay.extend(frames[3..].iter().cloned());
    let second = into_signals(decode_whole(&mut decoder, &ndjson(&replay)));
    assert_eq!(decoder.resume().dropped(), 2);
    assert_eq!(
        kinds(&second),
        [
            "palyra.handshake.accepted",
            "palyra.provider_turn_output",
            "palyra.message.replied",
            "completion",
        ]
    );
    assert_eq!(decoder.resume().cursor(), Some(6));
    let mut all = first;
    all.extend(second);
    assert_eq!(
        kinds(&all).iter().filter(|k| **k == "text_delta").count(),
        1
    );
}

#[test]
fn split_anywhere_gives_the_same_signals() {
    let text = {
        let mut t = console_stream();
        t.push_str(&ndjson(&realtime_frames()));
        t
    };
    let reference = comparable(&into_signals(decode_whole(
        &mut PalyraDecoder::new(SOURCE),
        &text,
    )));
    for sizes in [&[1usize][..], &[2, 3], &[7, 1, 13], &[64], &[1000]] {
        let out = decode_chunked(&mut PalyraDecoder::new(SOURCE), text.as_bytes(), sizes);
        assert_eq!(
            comparable(&into_signals(out)),
            reference,
            "chunk sizes {sizes:?}"
        );
    }
    let bytes = text.as_bytes();
    for cut in (0..bytes.len()).step_by(7) {
        let mut decoder = PalyraDecoder::new(SOURCE);
        let mut out = Vec::new();
        use patchbay_signal::decode::StreamDecoder;
        decoder.feed(&bytes[..cut], &mut out);
        decoder.feed(&bytes[cut..], &mut out);
        decoder.finish(&mut out);
        assert_eq!(comparable(&into_signals(out)), reference, "cut at {cut}");
    }
}

#[test]
fn last_line_without_newline_is_decoded() {
    let text = console_stream();
    let trimmed = text.trim_end_matches('\n');
    let signals = into_signals(decode_whole(&mut PalyraDecoder::new(SOURCE), trimmed));
    assert_eq!(signals.last().unwrap().kind, "palyra.complete");
}

#[test]
fn a_capture_pretty_printed_over_several_lines_decodes_the_same() {
    let frames = realtime_frames();
    let compact = into_signals(decode_whole(
        parse_decoder(SOURCE).as_mut(),
        &ndjson(&frames),
    ));
    let pretty: String = frames
        .iter()
        .map(|f| serde_json::to_string_pretty(f).unwrap() + "\n")
        .collect();
    assert!(
        pretty.lines().count() > frames.len() * 3,
        "really multi-line"
    );
    let from_pretty = into_signals(decode_whole(parse_decoder(SOURCE).as_mut(), &pretty));
    assert_all_valid(&from_pretty);
    assert_eq!(kinds(&from_pretty), kinds(&compact));
    assert!(from_pretty.iter().all(|s| s.kind != "error"));
}
