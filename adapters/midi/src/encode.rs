//! `midi.*` signals back to MIDI bytes, for controller LEDs and motorized faders.
//!
//! The payload is the one the decoder makes (`port` is ignored: the output knows its
//! port). Numbers may be integers or floats (a `map` filter's `scale` makes floats): floats
//! are rounded to the nearest integer, then checked. Anything that cannot be sent exactly
//! is a typed [`EncodeError`], never a silently clamped value: outputs count these and show
//! them in health.

use patchbay_signal::{Object, Signal};
use serde_json::Value;

use crate::types;

/// Why a signal cannot be sent as MIDI.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EncodeError {
    /// The signal type is not a MIDI channel message.
    #[error(
        "`{0}` cannot be sent as MIDI: expected one of midi.note_on, midi.note_off, \
         midi.control_change, midi.program_change, midi.pitch_bend, midi.aftertouch, \
         midi.channel_pressure"
    )]
    UnsupportedType(String),
    /// A payload field the message needs is absent (or null).
    #[error("{kind}: payload.{field} is missing")]
    MissingField {
        /// The signal type.
        kind: String,
        /// The payload field.
        field: &'static str,
    },
    /// A payload field is not a number.
    #[error("{kind}: payload.{field} must be a number, got {value}")]
    NotANumber {
        /// The signal type.
        kind: String,
        /// The payload field.
        field: &'static str,
        /// The value found, as JSON.
        value: String,
    },
    /// A payload field is outside its MIDI range.
    #[error("{kind}: payload.{field} = {value} is out of range {min}..={max}")]
    OutOfRange {
        /// The signal type.
        kind: String,
        /// The payload field.
        field: &'static str,
        /// The value found, as JSON.
        value: String,
        /// The smallest value allowed.
        min: i64,
        /// The largest value allowed.
        max: i64,
    },
}

/// The MIDI bytes of a `midi.*` channel message signal.
///
/// Fields: `channel` 1-16 and, by type, `note`, `velocity`, `controller`, `program`,
/// `value` 0-127 (`value` −8192..8191 for `midi.pitch_bend`, 0 = center). A
/// `midi.note_off` without `velocity` is sent with velocity 0; one with velocity 0 and
/// `metadata.noteOnZero` (as decoded from `9n kk 00`) is sent as that note-on again.
pub fn encode(signal: &Signal) -> Result<Vec<u8>, EncodeError> {
    let kind = signal.kind.as_str();
    let fields = Fields {
        kind,
        payload: &signal.payload,
    };
    let status = |high: u8| -> Result<u8, EncodeError> {
        let channel = fields.get("channel", 1, 16)?;
        Ok(high | (channel as u8 - 1))
    };
    let bytes = match kind {
        types::NOTE_ON => vec![
            status(0x90)?,
            fields.data("note")?,
            fields.data("velocity")?,
        ],
        types::NOTE_OFF => {
            let velocity = match fields.payload.get("velocity") {
                None | Some(Value::Null) => 0,
                Some(_) => fields.data("velocity")?,
            };
            let note_on_zero =
                velocity == 0 && signal.meta("noteOnZero").and_then(Value::as_bool) == Some(true);
            let high = if note_on_zero { 0x90 } else { 0x80 };
            vec![status(high)?, fields.data("note")?, velocity]
        }
        types::AFTERTOUCH => vec![status(0xA0)?, fields.data("note")?, fields.data("value")?],
        types::CONTROL_CHANGE => vec![
            status(0xB0)?,
            fields.data("controller")?,
            fields.data("value")?,
        ],
        types::PROGRAM_CHANGE => vec![status(0xC0)?, fields.data("program")?],
        types::CHANNEL_PRESSURE => vec![status(0xD0)?, fields.data("value")?],
        types::PITCH_BEND => {
            let raw = fields.get("value", -8192, 8191)? + 8192;
            vec![status(0xE0)?, (raw & 0x7F) as u8, (raw >> 7) as u8]
        }
        other => return Err(EncodeError::UnsupportedType(other.to_owned())),
    };
    Ok(bytes)
}

/// The payload of the signal being encoded, with the type for error messages.
struct Fields<'a> {
    kind: &'a str,
    payload: &'a Object,
}

impl Fields<'_> {
    /// A 7-bit data field.
    fn data(&self, field: &'static str) -> Result<u8, EncodeError> {
        // In range 0..=127, so the cast is exact.
        Ok(self.get(field, 0, 127)? as u8)
    }

    /// An integer field in `min..=max` (floats rounded to the nearest integer).
    fn get(&self, field: &'static str, min: i64, max: i64) -> Result<i64, EncodeError> {
        let value = match self.payload.get(field) {
            None | Some(Value::Null) => {
                return Err(EncodeError::MissingField {
                    kind: self.kind.to_owned(),
                    field,
                });
            }
            Some(value) => value,
        };
        let out_of_range = || EncodeError::OutOfRange {
            kind: self.kind.to_owned(),
            field,
            value: value.to_string(),
            min,
            max,
        };
        let number = match value {
            Value::Number(n) => n,
            other => {
                return Err(EncodeError::NotANumber {
                    kind: self.kind.to_owned(),
                    field,
                    value: other.to_string(),
                });
            }
        };
        let integer = match (number.as_i64(), number.as_f64()) {
            (Some(i), _) => i,
            (None, Some(f)) => {
                let rounded = f.round();
                // Compared as floats first, so a huge float is an error, not a saturated cast.
                if !(min as f64..=max as f64).contains(&rounded) {
                    return Err(out_of_range());
                }
                rounded as i64
            }
            (None, None) => return Err(out_of_range()),
        };
        if (min..=max).contains(&integer) {
            Ok(integer)
        } else {
            Err(out_of_range())
        }
    }
}
