//! Signal validity as decoder tests check it: against sajou's real JSON schema (see
//! [`crate::assert_schema_valid`]) and against patchbay's typed check of well-known
//! payloads, so the two keep each other honest.

use patchbay_signal::Signal;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::well_known::check_signal;

/// Asserts `signal` validates against the schema and passes the typed check (which accepts
/// any payload of a type that is not well-known), and that each of its short strings said
/// to need no escape in JSON needs none (writers copy those as they are).
pub fn assert_valid(signal: &Signal) {
    crate::assert_schema_valid(&signal.to_value());
    assert_eq!(check_signal(signal), Ok(()), "{signal:?}");
    let short = [&signal.id, &signal.kind, &signal.source];
    for text in short.into_iter().chain(&signal.correlation_id) {
        if text.is_json_plain() {
            assert_eq!(
                serde_json::to_string(text.as_str()).unwrap(),
                format!("\"{text}\""),
                "{signal:?}"
            );
        }
    }
}

/// Asserts every signal is valid (see [`assert_valid`]).
pub fn assert_all_valid(signals: &[Signal]) {
    signals.iter().for_each(assert_valid);
}

/// Asserts every decoded signal, bad-input reports included, is valid (see
/// [`assert_valid`]).
pub fn assert_all_decoded_valid(decoded: &[Decoded]) {
    for d in decoded {
        let (Decoded::Signal(s) | Decoded::BadInput(s)) = d;
        assert_valid(s);
    }
}
