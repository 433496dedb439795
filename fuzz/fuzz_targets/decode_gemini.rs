//! Gemini CLI: hook payloads and stream-json lines.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_gemini_cli::parse_decoder, data);
});
