//! Claude Code hook payloads, one a line.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_claude_code::parse_decoder, data);
});
