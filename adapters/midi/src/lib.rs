//! The MIDI adapter: a pure codec, and the midir transport around it.
//!
//! The pure part (no ports, no midir):
//!
//! - [`MidiDecoder`] turns MIDI bytes into `midi.*` signals, either as a continuous byte
//!   stream ([`MidiDecoder::feed_at`], running status across calls) or as whole messages
//!   the way midir delivers them ([`MidiDecoder::decode_message`]).
//! - [`parse_decoder`] reads the text format of `patchbay parse --protocol midi`: one
//!   message per line as hex bytes (`90 3c 64`).
//! - [`encode()`] turns a `midi.*` signal back into bytes (controller LEDs, motorized faders).
//! - [`learn_block`] writes the `[filters.<name>]` TOML block mapping a pad or knob to a
//!   control signal.
//! - [`PortMatcher`] selects ports by exact name or regex, leaving patchbay's own ports out.
//!
//! The transport (midir: ALSA by default, JACK with the cargo feature `jack`, see
//! [`BACKEND`]):
//!
//! - [`ADAPTER`] describes the `midi` source ([`MidiSourceConfig`]) and output
//!   ([`MidiOutputConfig`]). Both follow their port across hot-plug: the
//!   port list is polled every `rescan_ms`, a port that was never there sets health
//!   `waiting` (no fault: the device is not plugged in yet), a vanished port `recovering`,
//!   and a matching port that appears or returns is opened without a restart. With no
//!   MIDI system at all they stay `recovering`, say why in health, and keep trying.
//! - [`list_ports`], [`monitor`] and [`learn()`]: `patchbay midi list|monitor|learn`.
//!
//! # Signals
//!
//! Channel messages (payload `port` is always the port name; `channel` is 1-16):
//!
//! | bytes            | type                     | payload                          |
//! |------------------|--------------------------|----------------------------------|
//! | `8n kk vv`       | `midi.note_off`          | `channel, note, velocity, port`  |
//! | `9n kk vv`       | `midi.note_on`           | `channel, note, velocity, port`  |
//! | `9n kk 00`       | `midi.note_off`          | same, `velocity: 0`, and `metadata.noteOnZero: true` |
//! | `An kk vv`       | `midi.aftertouch`        | `channel, note, value, port`     |
//! | `Bn cc vv`       | `midi.control_change`    | `channel, controller, value, port` |
//! | `Cn pp`          | `midi.program_change`    | `channel, program, port` (0-127) |
//! | `Dn vv`          | `midi.channel_pressure`  | `channel, value, port`           |
//! | `En ll mm`       | `midi.pitch_bend`        | `channel, value, port` (−8192..8191, center 0) |
//!
//! System messages are dropped unless [`DecoderConfig::system`] is set; then each gets its
//! own type, with payload `{hex, port}` (`hex` = the message's bytes as lowercase hex
//! separated by spaces) plus the decoded field where there is one:
//! `midi.sysex` (`F0 … F7`), `midi.mtc_quarter_frame` (`F1`, `value`),
//! `midi.song_position` (`F2`, `value` in MIDI beats, 0-16383), `midi.song_select`
//! (`F3`, `song`), `midi.tune_request` (`F6`), `midi.clock` (`F8`), `midi.start` (`FA`),
//! `midi.continue` (`FB`), `midi.stop` (`FC`), `midi.active_sensing` (`FE`), `midi.reset`
//! (`FF`), and `midi.system` for the undefined status bytes `F4`, `F5`, `F9`, `FD`.

mod decode;
mod encode;
mod input;
mod learn;
mod output;
mod parse;
mod port;
pub mod probe;
mod session;
mod source;
mod system;
mod tools;

pub use decode::{ConfigError, DecoderConfig, MAX_SYSEX, MidiDecoder};
pub use encode::{EncodeError, encode};
pub use learn::{LearnError, learn_block};
pub use output::MidiOutputConfig;
pub use parse::{HexLineDecoder, HexLineError, PARSE_PORT, parse_decoder, parse_hex_line};
pub use port::{PortMatcher, PortPatternError};
pub use source::{DEFAULT_RESCAN_MS, MIN_RESCAN_MS, MidiSourceConfig};
pub use system::{
    BACKEND, DEFAULT_CLIENT_NAME, MAX_CLIENT_NAME, MidiError, PortList, list_ports, list_ports_as,
};
pub use tools::{InputOptions, learn, monitor};

use patchbay_graph::{Adapter, ComponentType, options_of};

/// The `midi` source and output (which blocks when full: an LED state is never dropped on
/// the way to the port), and the decoder of `patchbay parse --protocol midi`.
pub const ADAPTER: Adapter = Adapter::new(
    "midi",
    "MIDI controllers: pads, keys and knobs in, LEDs and messages out",
    &[
        ComponentType::source(
            "midi",
            "a MIDI input port (by name or regex, hot-plugged)",
            source::build,
            options_of::<MidiSourceConfig>,
        ),
        ComponentType::output(
            "midi",
            "a MIDI output port: LEDs and messages from signals",
            output::build,
            options_of::<MidiOutputConfig>,
        ),
    ],
)
.parse(parse_decoder)
.probes(&[probe::PROBE]);

/// The `midi.*` signal type names.
pub mod types {
    /// `9n kk vv` with `vv > 0`.
    pub const NOTE_ON: &str = "midi.note_on";
    /// `8n kk vv`, and `9n kk 00`.
    pub const NOTE_OFF: &str = "midi.note_off";
    /// `Bn cc vv`.
    pub const CONTROL_CHANGE: &str = "midi.control_change";
    /// `Cn pp`.
    pub const PROGRAM_CHANGE: &str = "midi.program_change";
    /// `En ll mm`, value −8192..8191.
    pub const PITCH_BEND: &str = "midi.pitch_bend";
    /// Polyphonic key pressure, `An kk vv`.
    pub const AFTERTOUCH: &str = "midi.aftertouch";
    /// `Dn vv`.
    pub const CHANNEL_PRESSURE: &str = "midi.channel_pressure";
    /// System exclusive, `F0 … F7`.
    pub const SYSEX: &str = "midi.sysex";
    /// MIDI time code quarter frame, `F1 dd`.
    pub const MTC_QUARTER_FRAME: &str = "midi.mtc_quarter_frame";
    /// Song position pointer, `F2 ll mm`.
    pub const SONG_POSITION: &str = "midi.song_position";
    /// Song select, `F3 ss`.
    pub const SONG_SELECT: &str = "midi.song_select";
    /// Tune request, `F6`.
    pub const TUNE_REQUEST: &str = "midi.tune_request";
    /// Timing clock, `F8` (24 per quarter note).
    pub const CLOCK: &str = "midi.clock";
    /// `FA`.
    pub const START: &str = "midi.start";
    /// `FB`.
    pub const CONTINUE: &str = "midi.continue";
    /// `FC`.
    pub const STOP: &str = "midi.stop";
    /// `FE`.
    pub const ACTIVE_SENSING: &str = "midi.active_sensing";
    /// `FF`.
    pub const RESET: &str = "midi.reset";
    /// An undefined system status byte (`F4`, `F5`, `F9`, `FD`).
    pub const SYSTEM: &str = "midi.system";

    /// The channel message types (the ones [`encode`](crate::encode()) accepts).
    pub const CHANNEL: [&str; 7] = [
        NOTE_ON,
        NOTE_OFF,
        CONTROL_CHANGE,
        PROGRAM_CHANGE,
        PITCH_BEND,
        AFTERTOUCH,
        CHANNEL_PRESSURE,
    ];
}

/// Bytes as lowercase hex pairs separated by spaces (`90 3c 64`): the same text
/// `patchbay parse --protocol midi` reads back.
pub use patchbay_signal::decode::to_hex;
