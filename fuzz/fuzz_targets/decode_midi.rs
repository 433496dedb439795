//! The MIDI text capture format of `parse --protocol midi` (hex bytes per line).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_midi::parse_decoder, data);
});
