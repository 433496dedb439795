//! The MIDI byte decoder: a state machine over the MIDI 1.0 byte stream.
//!
//! Rules (MIDI 1.0 spec):
//! - A channel status byte (`80`–`EF`) becomes the running status: following data bytes
//!   without a status byte repeat it, across calls.
//! - Real-time bytes (`F8`–`FF`) may appear anywhere, even between the data bytes of another
//!   message or inside a SysEx; they are handled on their own and leave the message being
//!   assembled untouched.
//! - SysEx (`F0`) and system common (`F1`–`F7`) bytes cancel the running status. Any status
//!   byte other than real-time ends a SysEx (one cut this way is "unterminated").
//!
//! Bad input is reported as [`Decoded::BadInput`] (an `error` signal, code `bad_frame`,
//! the bytes as hex in `metadata.raw`, the port in `metadata.port`, stamped with the
//! timestamp of the last good message), never as a panic:
//! - a run of data bytes with no status byte to apply them to (at the very start, after a
//!   system common message, a stray `F7`): one report per run, made when the next status
//!   byte arrives or the input ends, so the reports do not depend on how bytes are split;
//! - a message cut by a status byte, or by the end of the input, before its data bytes
//!   were all there.

use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::{Decoded, bad_input_signal};
use patchbay_signal::{Object, Signal, now_ms, object};
use serde::Deserialize;

use crate::{to_hex, types};

/// Longest SysEx message kept whole (bytes, `F0` and `F7` included). Longer ones are
/// emitted with their first `MAX_SYSEX` bytes, `metadata.truncated: true` and the full
/// length in `metadata.length`, so a device dumping megabytes cannot grow memory.
pub const MAX_SYSEX: usize = 65_536;

/// How many stray bytes a bad-input report quotes.
const STRAY_KEEP: usize = 32;

/// Options of a MIDI decoder (the `[sources.NAME]` keys of a `midi` source that concern
/// decoding).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct DecoderConfig {
    /// Only this channel (1-16) passes; messages of other channels are dropped. System
    /// messages have no channel and are not affected.
    pub channel: Option<u8>,
    /// Emit system messages (SysEx, system common, real-time) instead of dropping them.
    pub system: bool,
}

impl DecoderConfig {
    /// Checks the options (a channel filter must be 1-16).
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.channel {
            Some(c) if !(1..=16).contains(&c) => Err(ConfigError::Channel(c)),
            _ => Ok(()),
        }
    }
}

/// A decoder option that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The channel filter is not 1-16.
    #[error("channel {0} is out of range: MIDI channels are 1-16")]
    Channel(u8),
}

/// A SysEx message being received.
#[derive(Debug, Clone, Default)]
struct Sysex {
    /// The bytes kept so far (`F0` first), at most [`MAX_SYSEX`]; empty when system
    /// messages are dropped anyway.
    kept: Vec<u8>,
    /// The number of bytes received so far, `F0` included.
    len: usize,
}

/// A run of data bytes that belong to no message.
#[derive(Debug, Clone, Default)]
struct Stray {
    /// The first bytes of the run, quoted in the report.
    kept: Vec<u8>,
    /// The length of the run.
    count: usize,
}

/// Decodes MIDI bytes from one port into `midi.*` signals. See the crate docs for the
/// signal types and payloads.
#[derive(Debug, Clone)]
pub struct MidiDecoder {
    source: String,
    port: String,
    channel: Option<u8>,
    system: bool,
    /// The status of the message being assembled: a channel status (which is also the
    /// running status) or a system common status that takes data bytes (`F1`–`F3`).
    status: Option<u8>,
    /// The data bytes received so far for `status`.
    data: [u8; 2],
    data_len: usize,
    sysex: Option<Sysex>,
    stray: Stray,
    /// Timestamp of the last good message, given to bad-input reports.
    last_timestamp: i64,
}

impl MidiDecoder {
    /// A decoder for the port named `port` whose signals have source `source`, with the
    /// default options (every channel, system messages dropped).
    pub fn new(source: impl Into<String>, port: impl Into<String>) -> Self {
        MidiDecoder {
            source: source.into(),
            port: port.into(),
            channel: None,
            system: false,
            status: None,
            data: [0; 2],
            data_len: 0,
            sysex: None,
            stray: Stray::default(),
            last_timestamp: 0,
        }
    }

    /// A decoder with options; fails on an option that cannot work.
    pub fn with_config(
        source: impl Into<String>,
        port: impl Into<String>,
        config: &DecoderConfig,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut decoder = MidiDecoder::new(source, port);
        decoder.channel = config.channel;
        decoder.system = config.system;
        Ok(decoder)
    }

    /// The source name of the signals.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The port name put in every payload.
    pub fn port(&self) -> &str {
        &self.port
    }

    /// The timestamp of the last good message (0 if none): bad-input reports get it, so
    /// they never move an event clock.
    pub fn last_timestamp(&self) -> i64 {
        self.last_timestamp
    }

    /// Changes the port name, when the transport reconnects to a port named differently
    /// (a duplicate client renamed `name-01`). The decoder state is reset: bytes of the old
    /// connection must not complete messages of the new one.
    pub fn set_port(&mut self, port: impl Into<String>) {
        self.port = port.into();
        self.reset();
    }

    /// Forgets the running status and any partial message, silently (after a reconnect,
    /// what was pending will never be completed and is not the device's fault).
    pub fn reset(&mut self) {
        self.status = None;
        self.data_len = 0;
        self.sysex = None;
        self.stray = Stray::default();
    }

    /// Decodes one whole message as midir delivers it (one callback, one message, with its
    /// timestamp in epoch ms). Running status still applies (a message may omit its status
    /// byte); a channel or system common message left incomplete at the end of `bytes` is
    /// reported as bad input at once (running status is kept); a SysEx stays open, since
    /// some backends deliver long SysEx in several chunks.
    pub fn decode_message(&mut self, bytes: &[u8], timestamp: i64, out: &mut Vec<Decoded>) {
        self.feed_at(bytes, timestamp, out);
        self.end_message(out);
    }

    /// Feeds the next bytes of a continuous stream, all received at `timestamp` (epoch
    /// ms): complete messages are decoded into `out`, a partial one is kept for the next
    /// call.
    pub fn feed_at(&mut self, bytes: &[u8], timestamp: i64, out: &mut Vec<Decoded>) {
        for &byte in bytes {
            self.byte(byte, timestamp, out);
        }
    }

    /// The stream ended: reports a partial message or a stray run, and emits an
    /// unterminated SysEx (when system messages are kept) with what arrived.
    pub fn finish_at(&mut self, timestamp: i64, out: &mut Vec<Decoded>) {
        self.end_pending(timestamp, out);
    }

    fn byte(&mut self, byte: u8, ts: i64, out: &mut Vec<Decoded>) {
        match byte {
            0xF8..=0xFF => self.real_time(byte, ts, out),
            0xF0 => {
                self.end_pending(ts, out);
                self.status = None;
                let mut sysex = Sysex::default();
                sysex.push(byte, self.system);
                self.sysex = Some(sysex);
            }
            0xF7 => match self.sysex.take() {
                Some(mut sysex) => {
                    sysex.push(byte, self.system);
                    self.emit_sysex(sysex, true, ts, out);
                }
                // An end of SysEx with no SysEx: a byte outside any message, which
                // still cancels the running status. It joins a stray run in progress.
                None => {
                    self.end_incomplete(out);
                    self.status = None;
                    self.stray.push(byte);
                }
            },
            0xF1..=0xF6 => {
                self.end_pending(ts, out);
                self.status = None;
                if data_bytes(byte) == 0 {
                    self.emit_system(&[byte], ts, out);
                } else {
                    self.status = Some(byte);
                }
            }
            0x80..=0xEF => {
                self.end_pending(ts, out);
                self.status = Some(byte);
            }
            _ => self.data_byte(byte, ts, out),
        }
    }

    fn data_byte(&mut self, byte: u8, ts: i64, out: &mut Vec<Decoded>) {
        if let Some(sysex) = &mut self.sysex {
            sysex.push(byte, self.system);
            return;
        }
        let Some(status) = self.status else {
            self.stray.push(byte);
            return;
        };
        if let Some(slot) = self.data.get_mut(self.data_len) {
            *slot = byte;
            self.data_len += 1;
        }
        if self.data_len < data_bytes(status) {
            return;
        }
        let (first, second) = (self.data[0], self.data[1]);
        self.data_len = 0;
        if status >= 0xF0 {
            // System common messages do not set a running status.
            self.status = None;
            let bytes = [status, first, second];
            let len = 1 + data_bytes(status);
            self.emit_system(bytes.get(..len).unwrap_or(&bytes), ts, out);
        } else {
            self.emit_channel(status, first, second, ts, out);
        }
    }

    /// Closes whatever is open before a new status byte or at the end of the input.
    fn end_pending(&mut self, ts: i64, out: &mut Vec<Decoded>) {
        if let Some(sysex) = self.sysex.take() {
            self.emit_sysex(sysex, false, ts, out);
        }
        self.end_message(out);
    }

    /// Reports an incomplete channel or system common message and a stray run.
    fn end_message(&mut self, out: &mut Vec<Decoded>) {
        self.end_incomplete(out);
        self.end_stray(out);
    }

    /// Reports a channel or system common message whose data bytes did not all arrive.
    fn end_incomplete(&mut self, out: &mut Vec<Decoded>) {
        let Some(status) = self.status else {
            return;
        };
        // A channel status with no data yet is only the running status, waiting.
        if self.data_len == 0 && status < 0xF0 {
            return;
        }
        let mut bytes = vec![status];
        bytes.extend(self.data.iter().take(self.data_len));
        let message = format!(
            "incomplete MIDI message: {} needs {} data byte(s), got {}",
            status_name(status),
            data_bytes(status),
            self.data_len
        );
        out.push(self.bad(&to_hex(&bytes), &message));
        self.data_len = 0;
        if status >= 0xF0 {
            self.status = None;
        }
    }

    /// Reports the run of bytes outside any message, if there is one.
    fn end_stray(&mut self, out: &mut Vec<Decoded>) {
        if self.stray.count == 0 {
            return;
        }
        let stray = std::mem::take(&mut self.stray);
        let mut raw = to_hex(&stray.kept);
        if stray.count > stray.kept.len() {
            raw.push_str(" …");
        }
        let message = format!(
            "{} MIDI byte(s) outside any message (data without a status byte)",
            stray.count
        );
        out.push(self.bad(&raw, &message));
    }

    /// The bad-input report for `raw` (hex).
    fn bad(&self, raw: &str, message: &str) -> Decoded {
        Decoded::BadInput(
            bad_input_signal(&self.source, self.last_timestamp, raw, message)
                .with_meta("port", self.port.as_str()),
        )
    }

    fn emit_channel(&mut self, status: u8, first: u8, second: u8, ts: i64, out: &mut Vec<Decoded>) {
        self.last_timestamp = ts;
        let channel = (status & 0x0F) + 1;
        if self.channel.is_some_and(|c| c != channel) {
            return;
        }
        let port = self.port.as_str();
        let mut note_on_zero = false;
        let (kind, payload) = match status & 0xF0 {
            0x80 => (
                types::NOTE_OFF,
                object! {"channel" => channel, "note" => first, "velocity" => second, "port" => port},
            ),
            0x90 => {
                note_on_zero = second == 0;
                let kind = if note_on_zero {
                    types::NOTE_OFF
                } else {
                    types::NOTE_ON
                };
                (
                    kind,
                    object! {"channel" => channel, "note" => first, "velocity" => second, "port" => port},
                )
            }
            0xA0 => (
                types::AFTERTOUCH,
                object! {"channel" => channel, "note" => first, "value" => second, "port" => port},
            ),
            0xB0 => (
                types::CONTROL_CHANGE,
                object! {"channel" => channel, "controller" => first, "value" => second, "port" => port},
            ),
            0xC0 => (
                types::PROGRAM_CHANGE,
                object! {"channel" => channel, "program" => first, "port" => port},
            ),
            0xD0 => (
                types::CHANNEL_PRESSURE,
                object! {"channel" => channel, "value" => first, "port" => port},
            ),
            _ => (
                types::PITCH_BEND,
                object! {"channel" => channel, "value" => fourteen_bit(first, second) - 8192, "port" => port},
            ),
        };
        let mut signal = self.signal(kind, payload, ts);
        if note_on_zero {
            // The payload cannot say it was a note-on; the encoder uses this to send the
            // same bytes back (some controllers only turn LEDs off with `9n kk 00`).
            signal = signal.with_meta("noteOnZero", true);
        }
        out.push(Decoded::Signal(signal));
    }

    fn real_time(&mut self, byte: u8, ts: i64, out: &mut Vec<Decoded>) {
        // Real-time bytes never touch the state: they are transparent to the message or
        // SysEx they interrupt, and to a stray run.
        if self.system {
            self.last_timestamp = ts;
            let signal = self.system_signal(&[byte], ts);
            out.push(Decoded::Signal(signal));
        }
    }

    fn emit_system(&mut self, bytes: &[u8], ts: i64, out: &mut Vec<Decoded>) {
        self.last_timestamp = ts;
        if self.system {
            let signal = self.system_signal(bytes, ts);
            out.push(Decoded::Signal(signal));
        }
    }

    fn system_signal(&self, bytes: &[u8], ts: i64) -> Signal {
        let status = bytes.first().copied().unwrap_or(0);
        let first = bytes.get(1).copied().unwrap_or(0);
        let second = bytes.get(2).copied().unwrap_or(0);
        let mut payload = object! {"hex" => to_hex(bytes)};
        let kind = match status {
            0xF1 => {
                payload.insert("value".into(), first.into());
                types::MTC_QUARTER_FRAME
            }
            0xF2 => {
                payload.insert("value".into(), fourteen_bit(first, second).into());
                types::SONG_POSITION
            }
            0xF3 => {
                payload.insert("song".into(), first.into());
                types::SONG_SELECT
            }
            0xF6 => types::TUNE_REQUEST,
            0xF8 => types::CLOCK,
            0xFA => types::START,
            0xFB => types::CONTINUE,
            0xFC => types::STOP,
            0xFE => types::ACTIVE_SENSING,
            0xFF => types::RESET,
            _ => types::SYSTEM,
        };
        payload.insert("port".into(), self.port.as_str().into());
        self.signal(kind, payload, ts)
    }

    fn emit_sysex(&mut self, sysex: Sysex, terminated: bool, ts: i64, out: &mut Vec<Decoded>) {
        self.last_timestamp = ts;
        if !self.system {
            return;
        }
        let payload = object! {"hex" => to_hex(&sysex.kept), "port" => self.port.as_str()};
        let mut signal = self.signal(types::SYSEX, payload, ts);
        if !terminated {
            signal = signal.with_meta("unterminated", true);
        }
        if sysex.len > sysex.kept.len() {
            signal = signal
                .with_meta("truncated", true)
                .with_meta("length", sysex.len);
        }
        out.push(Decoded::Signal(signal));
    }

    fn signal(&self, kind: &str, payload: Object, ts: i64) -> Signal {
        Signal::new(kind, self.source.as_str(), payload).at(ts)
    }
}

impl Sysex {
    fn push(&mut self, byte: u8, keep: bool) {
        self.len = self.len.saturating_add(1);
        if keep && self.kept.len() < MAX_SYSEX {
            self.kept.push(byte);
        }
    }
}

impl Stray {
    fn push(&mut self, byte: u8) {
        self.count = self.count.saturating_add(1);
        if self.kept.len() < STRAY_KEEP {
            self.kept.push(byte);
        }
    }
}

/// The raw bytes of a MIDI stream, as a [`StreamDecoder`]; signals are stamped with the
/// time they are fed.
impl StreamDecoder for MidiDecoder {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        self.feed_at(bytes, now_ms(), out);
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        self.finish_at(now_ms(), out);
    }
}

/// The number of data bytes a status byte takes.
fn data_bytes(status: u8) -> usize {
    match status {
        0x80..=0xBF | 0xE0..=0xEF | 0xF2 => 2,
        0xC0..=0xDF | 0xF1 | 0xF3 => 1,
        _ => 0,
    }
}

/// A readable name for a status byte, for error messages.
fn status_name(status: u8) -> &'static str {
    match status {
        0x80..=0x8F => "note off",
        0x90..=0x9F => "note on",
        0xA0..=0xAF => "aftertouch",
        0xB0..=0xBF => "control change",
        0xC0..=0xCF => "program change",
        0xD0..=0xDF => "channel pressure",
        0xE0..=0xEF => "pitch bend",
        0xF1 => "MTC quarter frame",
        0xF2 => "song position",
        0xF3 => "song select",
        _ => "system message",
    }
}

/// A 14-bit value from its low and high 7-bit halves.
fn fourteen_bit(lsb: u8, msb: u8) -> i64 {
    (i64::from(msb & 0x7F) << 7) | i64::from(lsb & 0x7F)
}

#[cfg(test)]
mod tests;
