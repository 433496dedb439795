//! The generic envelope reader: each line through `Normalizer::decode_text` (and
//! `decode_line`, which also reads sajou scenario lines), the fast envelope path
//! `envelope_from_str`, and `from_value` on whatever JSON the line holds; an envelope
//! read by `envelope_from_str` must be the signal `from_value` makes of it, and text kept
//! as canonical (`LazyObject::from_json`) must be exactly what `serde_json` writes for it,
//! and a payload repaired on its text must be written as the repaired tree is.
#![no_main]

use patchbay_signal::LazyObject;
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
        if let Some(kept) = LazyObject::from_json(line) {
            let tree: serde_json::Value = serde_json::from_str(line).expect("canonical is JSON");
            assert_eq!(serde_json::to_string(&tree).unwrap(), line);
            patchbay_fuzz::check_kept(&kept);
        }
        let fast = normalizer.envelope_from_str(line);
        if let Some(signal) = &fast {
            patchbay_fuzz::check_signal(signal);
        }
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(line) {
            let general = normalizer.from_value(value.clone());
            patchbay_fuzz::check_decoded(std::slice::from_ref(&general));
            // The envelope reading gives what the general one gives (but for the id and
            // timestamp it makes up when the envelope has none).
            if let (Some(mut fast), patchbay_signal::normalize::Decoded::Signal(general)) =
                (fast, general)
            {
                let id = value.get("id");
                if !id
                    .is_some_and(|id| id.is_number() || id.as_str().is_some_and(|s| !s.is_empty()))
                {
                    fast.id.clone_from(&general.id);
                }
                if !value
                    .get("timestamp")
                    .is_some_and(serde_json::Value::is_number)
                {
                    fast.timestamp = general.timestamp;
                }
                assert_eq!(fast, general, "{line}");
                // To the byte: a payload repaired on its text is written as the tree is.
                assert_eq!(fast.to_json(), general.to_json(), "{line}");
            }
        }
    }
});
