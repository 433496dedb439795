//! Codelia JSON-RPC messages (bare or recorded lines).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_codelia::parse_decoder, data);
});
