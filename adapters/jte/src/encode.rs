//! Control signals → OSC 23199 commands written to the program's input.
//!
//! `control.pause` becomes `ESC ] 23199 ; <num-bytes> ; {"command":"control:pause",
//! "data":{…}} BEL`: the command is the signal type with the system separated by a colon,
//! as the proposal's command names are (`term:setstyle`, `event:mouseclick`), and `data`
//! is the signal's payload (`control.step {n}`, `control.answer {promptId, value |
//! cancelled}`, …). The terminal→program form follows the proposal's own example for
//! 23199, with the exact num-bytes (the proposal asks producers that know the size to give
//! it) and BEL (the terminator it recommends). The JSON is written in ASCII (other
//! characters as `\u` escapes), so a program that scans for a C1 ST (0x9C) instead of using
//! num-bytes still reads it whole.

use patchbay_signal::{Signal, control};
use serde_json::{Value, json};

use crate::parser::OSC_TO_PROGRAM;

/// Why a signal cannot be sent to the program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// Only `control.*` signals go back to the program.
    #[error("`{0}` is not a control signal")]
    NotControl(String),
}

/// The JSON terminal escape command name of a control type: `control.pause` →
/// `control:pause`.
pub fn control_command_name(kind: &str) -> Option<String> {
    let action = kind.strip_prefix("control.")?;
    Some(format!("control:{action}"))
}

/// The OSC 23199 bytes carrying a control signal (see the module docs).
pub fn encode_control(signal: &Signal) -> Result<Vec<u8>, EncodeError> {
    if !control::is_control(&signal.kind) {
        return Err(EncodeError::NotControl(signal.kind.to_string()));
    }
    let name = control_command_name(&signal.kind)
        .ok_or_else(|| EncodeError::NotControl(signal.kind.to_string()))?;
    let command = json!({ "command": name, "data": signal.payload });
    Ok(encode_escape(OSC_TO_PROGRAM, &command))
}

/// `ESC ] <osc> ; <num-bytes> ; <json> BEL`, the JSON in ASCII.
pub fn encode_escape(osc: u16, json: &Value) -> Vec<u8> {
    let text = ascii_json(json);
    let mut out = format!("\x1b]{osc};{};", text.len()).into_bytes();
    out.extend_from_slice(text.as_bytes());
    out.push(0x07);
    out
}

/// Compact JSON with every non-ASCII character (and DEL) written as `\uXXXX`: such
/// characters only occur inside JSON strings, where the escape means the same.
fn ascii_json(json: &Value) -> String {
    let text = json.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() && c != '\u{7f}' {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}
