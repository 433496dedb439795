//! Generic Server-Sent Events carrying envelopes (the `sse` source's decoder).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_sse::parse_decoder, data);
});
