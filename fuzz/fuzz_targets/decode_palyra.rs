//! Palyra console run stream lines, realtime frames and ACP envelopes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_palyra::parse_decoder, data);
});
