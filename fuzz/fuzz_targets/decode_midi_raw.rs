//! Raw MIDI bytes as a port delivers them (running status, SysEx, real-time bytes in the
//! middle of a message, stray data bytes), system messages emitted.
#![no_main]

use patchbay_midi::{DecoderConfig, MidiDecoder};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let config = DecoderConfig {
        channel: None,
        system: true,
    };
    patchbay_fuzz::stream(
        |source| {
            Box::new(MidiDecoder::with_config(source, "fuzz port", &config).expect("valid config"))
        },
        data,
    );
});
