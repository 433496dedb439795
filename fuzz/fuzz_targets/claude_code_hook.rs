//! Claude Code hook bodies (an http hook's POST body), decoded one after another by the same
//! decoder (it keeps each agent's state between hooks).
#![no_main]

use patchbay_claude_code::HookDecoder;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut decoder = HookDecoder::new(patchbay_fuzz::SOURCE);
    let mut out = Vec::new();
    // A body per NUL-separated part, so that a sequence of hooks is tried.
    for body in data.split(|&b| b == 0) {
        decoder.decode_bytes(body, &mut out);
        patchbay_fuzz::check_decoded(&out);
        out.clear();
    }
});
