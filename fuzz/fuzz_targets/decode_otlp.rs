//! OpenTelemetry OTLP/JSON bodies (one per line, or one pretty-printed).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    patchbay_fuzz::stream(patchbay_otlp::parse_decoder, data);
});
