//! JSON terminal escape commands → signals.
//!
//! A command `{command, rpcid|reqid, resid, timeout, cont, error, datatype, data}` becomes a
//! signal whose `type` is the command, whose payload is `data` (an object as it is, another
//! value as `{value}`, absent or null as `{}`), whose `correlationId` is `rpcid` (else
//! `reqid`, as Wave Terminal named it, else `resid`), and whose metadata holds every other
//! field under its own name. A command named after a signal type (`text_delta`,
//! `tool_call`, …) is that signal, repaired by [`well_known::repair`] so it is schema-valid
//! (a missing `agentId` is the source; fields the schema does not allow move to
//! `metadata.extra`). A packet without a `command` (a response or a continuation) is
//! `jte.response` when it has a `resid`, else `jte.packet`.

use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::well_known;
use patchbay_signal::{Object, Signal, SmallString, now_ms};
use serde_json::Value;

use crate::parser::{JteCommand, JteEvent, JteParser, OSC_TO_TERMINAL};

/// The signal for one command, stamped `timestamp` (escapes carry no time of their own).
pub fn command_signal(source: &str, command: &JteCommand, timestamp: i64) -> Signal {
    let mut fields = command.json.clone();
    let mut meta = Object::new();
    let kind = match fields.remove("command") {
        Some(Value::String(name)) if !name.is_empty() => Some(name),
        Some(other) => {
            meta.insert("command".into(), other);
            None
        }
        None => None,
    };
    let kind = kind.unwrap_or_else(|| {
        if fields.contains_key("resid") {
            "jte.response".to_owned()
        } else {
            "jte.packet".to_owned()
        }
    });
    let payload = match fields.remove("data") {
        None | Some(Value::Null) => Object::new(),
        Some(Value::Object(data)) => data,
        Some(other) => {
            let mut wrapped = Object::new();
            wrapped.insert("value".into(), other);
            wrapped
        }
    };
    let correlation = ["rpcid", "reqid", "resid"].iter().find_map(|key| {
        let id = match fields.get(*key)? {
            Value::String(s) if !s.is_empty() => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return None,
        };
        // The id used as correlationId is not repeated in metadata, except `resid`, which
        // also says "this is a response".
        if *key != "resid" {
            fields.remove(*key);
        }
        Some(id)
    });
    meta.extend(fields);
    let mut signal = Signal::new(kind, source, payload).at(timestamp);
    signal.correlation_id = correlation.map(Into::into);
    if !meta.is_empty() {
        signal.metadata = Some(meta.into());
    }
    well_known::repair(&mut signal);
    signal
}

/// Turns parser events into signals for one source: commands on the accepted OSC number
/// become signals, bad escapes become bad-input `error` signals, and escapes on the other
/// OSC number are echoes (see [`JteDecoder`]) and are skipped.
#[derive(Debug, Clone)]
pub struct JteSignals {
    source: SmallString,
    accept_osc: u16,
    last_timestamp: i64,
    echoes: u64,
}

impl JteSignals {
    /// Signals from `source`, accepting program→terminal commands (OSC 23198).
    pub fn new(source: impl Into<SmallString>) -> Self {
        JteSignals {
            source: source.into(),
            accept_osc: OSC_TO_TERMINAL,
            last_timestamp: 0,
            echoes: 0,
        }
    }

    /// Accepts commands on `osc` instead (23199 to read what a terminal sends).
    pub fn accepting(mut self, osc: u16) -> Self {
        self.accept_osc = osc;
        self
    }

    /// How many escapes on the other OSC number were skipped.
    pub fn echoes(&self) -> u64 {
        self.echoes
    }

    /// Converts parser events, in order.
    pub fn convert(&mut self, events: impl IntoIterator<Item = JteEvent>, out: &mut Vec<Decoded>) {
        for event in events {
            match event {
                JteEvent::Command(command) if command.osc == self.accept_osc => {
                    let signal = command_signal(&self.source, &command, now_ms());
                    self.last_timestamp = signal.timestamp;
                    out.push(Decoded::Signal(signal));
                }
                JteEvent::Error(error) if error.osc == self.accept_osc => {
                    let raw = String::from_utf8_lossy(&error.raw);
                    out.push(Decoded::BadInput(bad_input_signal(
                        &self.source,
                        self.last_timestamp,
                        &raw,
                        &error.to_string(),
                    )));
                }
                JteEvent::Command(_) | JteEvent::Error(_) => self.echoes += 1,
            }
        }
    }
}

/// Raw terminal output → signals (`patchbay parse --protocol jte`, `patchbay wrap`).
///
/// Only program→terminal escapes (OSC 23198) are decoded. A terminal→program escape
/// (OSC 23199) in a program's output is an echo of what patchbay wrote to the program's
/// input (a pseudo-terminal echoes input while the program is not in raw mode): it is
/// removed from the passthrough like any escape of ours, and never turned into a signal,
/// so control commands cannot loop back as signals.
#[derive(Debug, Clone)]
pub struct JteDecoder {
    parser: JteParser,
    signals: JteSignals,
    /// Scratch passthrough for [`StreamDecoder`] use, where it is dropped.
    scratch: Vec<u8>,
}

impl JteDecoder {
    /// A decoder with the default payload limit.
    pub fn new(source: impl Into<SmallString>) -> Self {
        Self::with_parser(source, JteParser::new())
    }

    /// A decoder using `parser` (e.g. one with another payload limit).
    pub fn with_parser(source: impl Into<SmallString>, parser: JteParser) -> Self {
        JteDecoder {
            parser,
            signals: JteSignals::new(source),
            scratch: Vec::new(),
        }
    }

    /// Feeds program output: appends what to write to the user's terminal to
    /// `passthrough` and the decoded signals to `out`.
    pub fn feed_terminal(
        &mut self,
        bytes: &[u8],
        passthrough: &mut Vec<u8>,
        out: &mut Vec<Decoded>,
    ) {
        let mut events = Vec::new();
        self.parser.feed_into(bytes, passthrough, &mut events);
        self.signals.convert(events, out);
    }

    /// Ends program output (see [`JteParser::finish`]).
    pub fn finish_terminal(&mut self, passthrough: &mut Vec<u8>, out: &mut Vec<Decoded>) {
        let mut events = Vec::new();
        self.parser.finish_into(passthrough, &mut events);
        self.signals.convert(events, out);
    }

    /// The parser, e.g. to [`JteParser::flush_undecided`] held bytes.
    pub fn parser_mut(&mut self) -> &mut JteParser {
        &mut self.parser
    }

    /// How many echoed terminal→program escapes were skipped.
    pub fn echoes(&self) -> u64 {
        self.signals.echoes()
    }
}

impl StreamDecoder for JteDecoder {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.feed_terminal(bytes, &mut scratch, out);
        scratch.clear();
        self.scratch = scratch;
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.finish_terminal(&mut scratch, out);
        scratch.clear();
        self.scratch = scratch;
    }
}
