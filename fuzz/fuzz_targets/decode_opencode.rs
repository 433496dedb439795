//! OpenCode: the raw SSE /event stream of opencode serve.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_opencode::parse_decoder, data);
});
