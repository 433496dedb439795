//! Anthropic Messages captures (SSE streams and whole bodies).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_anthropic::parse_decoder, data);
});
