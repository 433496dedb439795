//! Generic NDJSON envelopes (`stdin`, `file`, `parse --protocol sajou`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_ndjson::parse_decoder, data);
});
