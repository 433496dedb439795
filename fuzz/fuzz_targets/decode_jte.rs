//! JSON terminal escapes in a program's output (`wrap --protocol jte`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_jte::parse_decoder, data);
});
