//! The generic envelope reader: each line through `Normalizer::decode_text` (and
//! `decode_line`, which also reads sajou scenario lines), the fast envelope path
//! `envelope_from_str`, and `from_value` on whatever JSON the line holds.
#![no_main]

use patchbay_signal::decode::decode_line;
use patchbay_signal::normalize::Normalizer;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = patchbay_fuzz::text(data);
    let mut normalizer = Normalizer::new(patchbay_fuzz::SOURCE);
    for line in text.split('\n') {
        if let Some(decoded) = normalizer.decode_text(line) {
            patchbay_fuzz::check_decoded(&[decoded]);
        }
        if let Some(decoded) = decode_line(&mut normalizer, line) {
            patchbay_fuzz::check_decoded(&[decoded]);
        }
        if let Some(signal) = normalizer.envelope_from_str(line) {
            patchbay_fuzz::check_signal(&signal);
        }
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(line) {
            patchbay_fuzz::check_decoded(&[normalizer.from_value(value)]);
        }
    }
});
