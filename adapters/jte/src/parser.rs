//! The streaming parser: terminal output bytes in, passthrough bytes and decoded escapes
//! out.
//!
//! Grammar (from the JSON terminal escapes proposal, plus the form Wave Terminal writes):
//!
//! ```text
//! ESC ] 23198 ; <num-bytes> ; <json> <terminator>     num-bytes > 0: exactly that many bytes of JSON
//! ESC ] 23198 ; 0 ; <json> <terminator>               0: read to the terminator
//! ESC ] 23198 ; <json> <terminator>                   no num-bytes field (Wave Terminal)
//! terminator: BEL (0x07) | ESC \ | 0x9C (C1 ST)
//! ```
//!
//! (and the same with 23199). Rules:
//!
//! - Only `ESC ] 23198 ;` and `ESC ] 23199 ;` start an escape of ours. Every other byte,
//!   other OSC sequences included, is passed through untouched, in order.
//! - `0x9C` is also a UTF-8 continuation byte (`œ` is `C5 9C`), so it only terminates where
//!   a character may start: the parser tracks UTF-8 sequences and a `0x9C` inside one is
//!   JSON. When num-bytes is given, the JSON is exactly that many bytes whatever they are,
//!   and the terminator must follow. BEL and ESC cannot occur in JSON (control characters
//!   must be escaped in JSON strings), so they always end the escape.
//! - Every escape of ours gives exactly one [`JteEvent`]: a [`JteCommand`] or a
//!   [`JteError`] (JSON that does not parse or is not an object, a payload over the limit
//!   (default 1 MiB, [`JteParser::with_max_payload`]), a num-bytes that does not match the
//!   payload, an escape interrupted by `ESC` (not followed by `\`), `CAN` or `SUB`, or cut by
//!   the end of the stream). An escape's bytes are consumed even when it is bad; the bytes
//!   around it pass through. An interrupting `ESC` starts a new sequence, as in a terminal.
//! - A payload over the limit is not buffered: the parser skips to the terminator (never
//!   trusting a huge num-bytes to swallow the output after it).
//! - Unterminated at the end of the stream ([`JteParser::finish`]): an error, and the bytes
//!   are dropped rather than passed through: written to a real terminal they would open an
//!   OSC string that swallows whatever the terminal shows next (the shell prompt after the
//!   wrapped program exits). A prefix that is not yet known to be ours (`ESC ] 231`) is
//!   passed through.
//! - Input can be split across [`JteParser::feed`] calls at any byte: the output is the
//!   same.

use patchbay_signal::Object;
use serde_json::Value;

/// OSC number of commands a program sends to the terminal.
pub const OSC_TO_TERMINAL: u16 = 23198;
/// OSC number of commands the terminal sends to the program.
pub const OSC_TO_PROGRAM: u16 = 23199;
/// Default largest JSON payload, in bytes.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

const ESC: u8 = 0x1b;
const BEL: u8 = 0x07;
const C1_ST: u8 = 0x9c;
const CAN: u8 = 0x18;
const SUB: u8 = 0x1a;
/// Longest num-bytes field read as a number (more digits are taken as the JSON).
const MAX_LEN_DIGITS: usize = 20;
/// How much of a bad payload an error keeps.
const SNIPPET: usize = 256;

/// One decoded escape: its OSC number and its JSON object.
#[derive(Debug, Clone, PartialEq)]
pub struct JteCommand {
    /// [`OSC_TO_TERMINAL`] or [`OSC_TO_PROGRAM`].
    pub osc: u16,
    /// The num-bytes field as written: `None` when absent (Wave Terminal's form), `Some(0)`
    /// for "read to the terminator".
    pub num_bytes: Option<usize>,
    /// The JSON command `{command, rpcid, resid, timeout, cont, error, datatype, data, …}`.
    pub json: Object,
}

/// What was wrong with an escape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JteErrorKind {
    /// The payload is not valid JSON (or not UTF-8).
    #[error("payload is not valid JSON: {0}")]
    Malformed(String),
    /// The payload is JSON but not an object.
    #[error("payload is JSON but not an object")]
    NotAnObject,
    /// The escape has no payload.
    #[error("payload is empty")]
    Empty,
    /// The payload (or its num-bytes) is over the limit.
    #[error("payload exceeds the {limit}-byte limit")]
    Oversized {
        /// The limit in bytes.
        limit: usize,
    },
    /// num-bytes does not match the payload before the terminator.
    #[error("num-bytes says {declared} but the payload is {actual} bytes")]
    LengthMismatch {
        /// The num-bytes field.
        declared: usize,
        /// Bytes before the terminator (at least).
        actual: usize,
    },
    /// A control character ended the escape before its terminator.
    #[error("escape interrupted by {0} before its terminator")]
    Interrupted(&'static str),
    /// The stream ended inside the escape.
    #[error("the stream ended inside the escape")]
    Unterminated,
}

/// A bad escape: consumed, reported, and the stream goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("OSC {osc} escape: {kind}")]
pub struct JteError {
    /// The escape's OSC number.
    pub osc: u16,
    /// What was wrong.
    pub kind: JteErrorKind,
    /// The first bytes of its payload (at most 256), for the report.
    pub raw: Vec<u8>,
}

/// What one escape decoded to.
#[derive(Debug, Clone, PartialEq)]
pub enum JteEvent {
    /// A JSON command.
    Command(JteCommand),
    /// A bad escape.
    Error(JteError),
}

/// The result of one [`JteParser::feed`] call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JteOutput {
    /// Bytes to write to the user's terminal: the input without the escapes.
    pub passthrough: Vec<u8>,
    /// The escapes completed in these bytes, in order.
    pub events: Vec<JteEvent>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// After `ESC ] 2319x ;`: an optional num-bytes field.
    Length,
    /// The JSON.
    Body,
    /// num-bytes reached: the terminator must come.
    Terminator,
}

/// An escape of ours being read.
#[derive(Debug, Clone)]
struct Escape {
    osc: u16,
    phase: Phase,
    /// Digits of the num-bytes field while in [`Phase::Length`].
    digits: Vec<u8>,
    num_bytes: Option<usize>,
    /// Exact payload size when num-bytes > 0.
    declared: Option<usize>,
    /// The payload (only a snippet once `error` is set).
    payload: Vec<u8>,
    /// Payload bytes seen, kept or not.
    size: usize,
    /// UTF-8 continuation bytes still expected.
    utf8_need: u8,
    /// An ESC was seen: `\` ends the escape, anything else interrupts it.
    esc_pending: bool,
    /// The first problem found; the rest of the escape is skipped.
    error: Option<JteErrorKind>,
}

/// How a byte left an escape.
enum Step {
    /// Still inside.
    Continue,
    /// The terminator was read.
    End,
    /// `ESC` + something else: the escape ends, and `ESC` + this byte start over.
    InterruptedByEsc,
    /// `CAN` or `SUB` (consumed) ended it.
    Cancelled(&'static str),
}

impl Escape {
    fn new(osc: u16) -> Self {
        Escape {
            osc,
            phase: Phase::Length,
            digits: Vec::new(),
            num_bytes: None,
            declared: None,
            payload: Vec::new(),
            size: 0,
            utf8_need: 0,
            esc_pending: false,
            error: None,
        }
    }

    fn step(&mut self, b: u8, max: usize) -> Step {
        if self.esc_pending {
            self.esc_pending = false;
            return if b == b'\\' {
                Step::End
            } else {
                Step::InterruptedByEsc
            };
        }
        match self.phase {
            Phase::Length => {
                if b.is_ascii_digit() && self.digits.len() < MAX_LEN_DIGITS {
                    self.digits.push(b);
                    return Step::Continue;
                }
                if b == b';' {
                    let n = std::str::from_utf8(&self.digits)
                        .ok()
                        .and_then(|d| {
                            if d.is_empty() {
                                Some(0)
                            } else {
                                d.parse().ok()
                            }
                        })
                        .unwrap_or(usize::MAX);
                    self.num_bytes = Some(n);
                    self.phase = Phase::Body;
                    if n > max {
                        self.error = Some(JteErrorKind::Oversized { limit: max });
                    } else if n > 0 {
                        // What num-bytes is for: sizing the buffer once.
                        self.declared = Some(n);
                        self.payload.reserve_exact(n);
                    }
                    return Step::Continue;
                }
                // No num-bytes field: what looked like digits is the start of the JSON.
                self.phase = Phase::Body;
                for d in std::mem::take(&mut self.digits) {
                    self.data(d, max);
                }
                self.body(b, max)
            }
            Phase::Body => self.body(b, max),
            Phase::Terminator => match b {
                BEL => Step::End,
                C1_ST if self.utf8_need == 0 => Step::End,
                ESC => {
                    self.esc_pending = true;
                    Step::Continue
                }
                CAN => Step::Cancelled("CAN"),
                SUB => Step::Cancelled("SUB"),
                _ => {
                    // More JSON than num-bytes said: skip to the terminator.
                    let declared = self.declared.unwrap_or(self.size);
                    self.error = Some(JteErrorKind::LengthMismatch {
                        declared,
                        actual: declared.saturating_add(1),
                    });
                    self.phase = Phase::Body;
                    self.body(b, max)
                }
            },
        }
    }

    fn body(&mut self, b: u8, max: usize) -> Step {
        match b {
            BEL => Step::End,
            ESC => {
                self.esc_pending = true;
                Step::Continue
            }
            CAN => Step::Cancelled("CAN"),
            SUB => Step::Cancelled("SUB"),
            // With a num-bytes in force, 0x9C is data; otherwise it is ST at a character
            // boundary and a continuation byte inside a character.
            C1_ST if self.utf8_need == 0 && !self.length_governs() => Step::End,
            _ => {
                self.data(b, max);
                Step::Continue
            }
        }
    }

    fn length_governs(&self) -> bool {
        self.declared.is_some() && self.error.is_none()
    }

    fn data(&mut self, b: u8, max: usize) {
        self.size = self.size.saturating_add(1);
        if self.utf8_need > 0 && b & 0xC0 == 0x80 {
            self.utf8_need -= 1;
        } else {
            self.utf8_need = match b {
                0xC2..=0xDF => 1,
                0xE0..=0xEF => 2,
                0xF0..=0xF4 => 3,
                _ => 0,
            };
        }
        if self.error.is_none() && self.size > max {
            self.error = Some(JteErrorKind::Oversized { limit: max });
            self.payload.truncate(SNIPPET);
            self.payload.shrink_to_fit();
        }
        if self.error.is_none() || self.payload.len() < SNIPPET {
            self.payload.push(b);
        }
        if self.error.is_none() && self.declared == Some(self.size) {
            self.phase = Phase::Terminator;
        }
    }

    fn snippet(&self) -> Vec<u8> {
        self.payload.iter().take(SNIPPET).copied().collect()
    }

    fn fail(self, mut kind: JteErrorKind) -> JteEvent {
        // A payload longer than num-bytes was counted to its end.
        if let JteErrorKind::LengthMismatch { actual, .. } = &mut kind {
            *actual = (*actual).max(self.size);
        }
        JteEvent::Error(JteError {
            osc: self.osc,
            raw: self.snippet(),
            kind,
        })
    }

    /// The event for an escape whose terminator was read.
    fn finish(mut self) -> JteEvent {
        if let Some(kind) = self.error.take() {
            return self.fail(kind);
        }
        if let Some(declared) = self.declared
            && self.size != declared
        {
            let actual = self.size;
            return self.fail(JteErrorKind::LengthMismatch { declared, actual });
        }
        if self.payload.iter().all(u8::is_ascii_whitespace) {
            return self.fail(JteErrorKind::Empty);
        }
        match serde_json::from_slice::<Value>(&self.payload) {
            Ok(Value::Object(json)) => JteEvent::Command(JteCommand {
                osc: self.osc,
                num_bytes: self.num_bytes,
                json,
            }),
            Ok(_) => self.fail(JteErrorKind::NotAnObject),
            Err(err) => self.fail(JteErrorKind::Malformed(err.to_string())),
        }
    }
}

#[derive(Debug, Clone)]
enum State {
    /// Passing bytes through.
    Ground,
    /// An `ESC` was seen (held).
    Esc,
    /// `ESC ]` and these bytes of a possible `2319x;` (held).
    Number(Vec<u8>),
    /// Inside one of our escapes.
    Inside(Box<Escape>),
}

/// The streaming JSON terminal escape parser (see the module docs).
#[derive(Debug, Clone)]
pub struct JteParser {
    max_payload: usize,
    state: State,
}

impl Default for JteParser {
    fn default() -> Self {
        Self::new()
    }
}

impl JteParser {
    /// A parser with the default payload limit (1 MiB).
    pub fn new() -> Self {
        Self::with_max_payload(DEFAULT_MAX_PAYLOAD)
    }

    /// A parser refusing JSON payloads over `max` bytes.
    pub fn with_max_payload(max: usize) -> Self {
        JteParser {
            max_payload: max,
            state: State::Ground,
        }
    }

    /// Feeds the next bytes of terminal output.
    pub fn feed(&mut self, bytes: &[u8]) -> JteOutput {
        let mut out = JteOutput::default();
        self.feed_into(bytes, &mut out.passthrough, &mut out.events);
        out
    }

    /// Feeds the next bytes, appending passthrough bytes and events to the given buffers.
    pub fn feed_into(
        &mut self,
        bytes: &[u8],
        passthrough: &mut Vec<u8>,
        events: &mut Vec<JteEvent>,
    ) {
        let mut i = 0;
        while let Some(&b) = bytes.get(i) {
            match &mut self.state {
                State::Ground => {
                    let rest = bytes.get(i..).unwrap_or_default();
                    match rest.iter().position(|&x| x == ESC) {
                        None => {
                            passthrough.extend_from_slice(rest);
                            return;
                        }
                        Some(p) => {
                            passthrough.extend_from_slice(rest.get(..p).unwrap_or_default());
                            self.state = State::Esc;
                            i += p + 1;
                        }
                    }
                }
                State::Esc => {
                    if b == b']' {
                        self.state = State::Number(Vec::with_capacity(6));
                        i += 1;
                    } else {
                        // Not an OSC: the ESC is ordinary output; `b` is looked at again.
                        passthrough.push(ESC);
                        self.state = State::Ground;
                    }
                }
                State::Number(held) => {
                    let expected = match held.len() {
                        0 => b == b'2',
                        1 => b == b'3',
                        2 => b == b'1',
                        3 => b == b'9',
                        4 => b == b'8' || b == b'9',
                        _ => b == b';',
                    };
                    if !expected {
                        // Another OSC (or something else): pass what was held through and
                        // look at `b` again from the ground state.
                        passthrough.push(ESC);
                        passthrough.push(b']');
                        passthrough.extend_from_slice(held);
                        self.state = State::Ground;
                        continue;
                    }
                    i += 1;
                    if held.len() == 5 {
                        let osc = if held.get(4) == Some(&b'8') {
                            OSC_TO_TERMINAL
                        } else {
                            OSC_TO_PROGRAM
                        };
                        self.state = State::Inside(Box::new(Escape::new(osc)));
                    } else {
                        held.push(b);
                    }
                }
                State::Inside(escape) => match escape.step(b, self.max_payload) {
                    Step::Continue => i += 1,
                    Step::End => {
                        i += 1;
                        if let State::Inside(escape) =
                            std::mem::replace(&mut self.state, State::Ground)
                        {
                            events.push(escape.finish());
                        }
                    }
                    Step::Cancelled(what) => {
                        i += 1;
                        if let State::Inside(escape) =
                            std::mem::replace(&mut self.state, State::Ground)
                        {
                            events.push(escape.fail(JteErrorKind::Interrupted(what)));
                        }
                    }
                    Step::InterruptedByEsc => {
                        // The ESC starts a new sequence; `b` is looked at again after it.
                        if let State::Inside(escape) =
                            std::mem::replace(&mut self.state, State::Esc)
                        {
                            events.push(escape.fail(JteErrorKind::Interrupted("ESC")));
                        }
                    }
                },
            }
        }
    }

    /// The stream ended: bytes held while deciding whether a sequence was ours pass through;
    /// an escape of ours still open is an [`JteErrorKind::Unterminated`] error (its bytes
    /// are dropped, see the module docs).
    pub fn finish(&mut self) -> JteOutput {
        let mut out = JteOutput::default();
        self.finish_into(&mut out.passthrough, &mut out.events);
        out
    }

    /// [`JteParser::finish`], appending to the given buffers.
    pub fn finish_into(&mut self, passthrough: &mut Vec<u8>, events: &mut Vec<JteEvent>) {
        match std::mem::replace(&mut self.state, State::Ground) {
            State::Ground => {}
            State::Esc => passthrough.push(ESC),
            State::Number(held) => {
                passthrough.push(ESC);
                passthrough.push(b']');
                passthrough.extend_from_slice(&held);
            }
            State::Inside(escape) => events.push(escape.fail(JteErrorKind::Unterminated)),
        }
    }

    /// Releases the bytes held while deciding whether a sequence is ours (a trailing `ESC`
    /// or `ESC ] 2319…`, at most 8 bytes) as passthrough, for a transport that must not
    /// delay output when the program goes quiet. An escape of ours already started is not
    /// affected. If the rest of a held escape arrives later, it passes through as text.
    pub fn flush_undecided(&mut self) -> Vec<u8> {
        let mut passthrough = Vec::new();
        match &self.state {
            State::Esc | State::Number(_) => self.finish_into(&mut passthrough, &mut Vec::new()),
            State::Ground | State::Inside(_) => {}
        }
        passthrough
    }

    /// Whether no sequence is in progress (nothing held, no escape open).
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Ground)
    }
}
