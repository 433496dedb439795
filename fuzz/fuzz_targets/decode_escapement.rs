//! Escapement wire frames.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_escapement::parse_decoder, data);
});
