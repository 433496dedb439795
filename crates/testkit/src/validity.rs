//! Signal validity as decoder tests check it: against sajou's real JSON schema (see
//! [`crate::assert_schema_valid`]) and against patchbay's typed check of well-known
//! payloads, so the two keep each other honest.

use patchbay_signal::Signal;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::well_known::check_signal;

/// Asserts `signal` validates against the schema and passes the typed check (which accepts
/// any payload of a type that is not well-known).
pub fn assert_valid(signal: &Signal) {
    crate::assert_schema_valid(&signal.to_value());
    assert_eq!(check_signal(signal), Ok(()), "{signal:?}");
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
