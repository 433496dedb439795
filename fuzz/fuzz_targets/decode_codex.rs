//! OpenAI Codex: app-server JSON-RPC, recorded transcripts and exec --json events.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_codex::parse_decoder, data);
});
