//! MIDI learn: press a pad or turn a knob, get the config block that maps it.

use std::fmt::Write;

use patchbay_signal::Signal;
use serde_json::Value;

use crate::types;

/// The comment a learned knob or fader gets: its value is raw 0-127.
const SCALE_HINT: &str = "\
# payload.value is 0-127; to map it to another range, add a scale, e.g.
# scale = { path = \"payload.value\", fn = \"lerp\", in = [0, 127], out = [0.0, 1.0] }
";

/// Why a signal cannot be learned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LearnError {
    /// Only notes, control changes and program changes name one pad, knob or button.
    #[error(
        "`{0}` cannot be learned: press a pad or key (midi.note_on), move a knob or fader \
         (midi.control_change) or send a program change"
    )]
    NotLearnable(String),
    /// The signal lacks a field that identifies the control, or it is not a MIDI number.
    #[error("{kind}: payload.{field} is missing or not a number in 0-127 (channel 1-16)")]
    BadField {
        /// The signal type.
        kind: String,
        /// The payload field.
        field: &'static str,
    },
}

/// A ready-to-paste `[filters.<name>]` block: a `map` filter on `source` that passes the
/// control `signal` came from (matched on its note, controller or program, and channel)
/// and turns it into a `target` signal (e.g. `control.pause`).
///
/// A note-off learns the same pad as its note-on: the block matches the press
/// (`midi.note_on`). The filter is named after the control and the target's last
/// segment: `pad_36_pause`, `cc_7_volume`, `program_5_step`.
///
/// ```
/// let pad = patchbay_signal::Signal::new(
///     "midi.note_on",
///     "midi:pads",
///     patchbay_signal::object! {"channel" => 10, "note" => 36, "velocity" => 100, "port" => "ctl:pad"},
/// );
/// let block = patchbay_midi::learn_block(&pad, "pads", "control.pause").unwrap();
/// assert!(block.starts_with("[filters.pad_36_pause]\n"));
/// ```
pub fn learn_block(signal: &Signal, source: &str, target: &str) -> Result<String, LearnError> {
    let kind = signal.kind.as_str();
    let (prefix, match_kind, field) = match kind {
        types::NOTE_ON | types::NOTE_OFF => ("pad", types::NOTE_ON, "note"),
        types::CONTROL_CHANGE => ("cc", types::CONTROL_CHANGE, "controller"),
        types::PROGRAM_CHANGE => ("program", types::PROGRAM_CHANGE, "program"),
        other => return Err(LearnError::NotLearnable(other.to_owned())),
    };
    let number = midi_number(signal, kind, field, 0..=127)?;
    let channel = midi_number(signal, kind, "channel", 1..=16)?;

    let mut name = format!("{prefix}_{number}");
    let suffix = bare_key(target.rsplit('.').next().unwrap_or(""));
    let suffix = suffix.trim_matches('_');
    if !suffix.is_empty() {
        name.push('_');
        name.push_str(suffix);
    }

    let mut block = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(block, "[filters.{name}]");
    let _ = writeln!(block, "type = \"map\"");
    let _ = writeln!(block, "inputs = [{}]", toml_string(source));
    let _ = writeln!(
        block,
        "when = {{ type = {}, \"payload.{field}\" = {number}, \"payload.channel\" = {channel} }}",
        toml_string(match_kind)
    );
    let _ = writeln!(block, "set_type = {}", toml_string(target));
    if match_kind == types::CONTROL_CHANGE {
        block.push_str(SCALE_HINT);
    }
    Ok(block)
}

/// A payload number of the signal, checked to be in `range`.
fn midi_number(
    signal: &Signal,
    kind: &str,
    field: &'static str,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, LearnError> {
    signal
        .payload
        .get(field)
        .and_then(Value::as_u64)
        .filter(|n| range.contains(n))
        .ok_or_else(|| LearnError::BadField {
            kind: kind.to_owned(),
            field,
        })
}

/// `text` as a TOML bare key: letters, digits, `_` and `-`, anything else as `_`.
fn bare_key(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `text` as a TOML basic string, quoted and escaped.
fn toml_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\t' => quoted.push_str("\\t"),
            '\r' => quoted.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(quoted, "\\u{:04X}", u32::from(c));
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}
