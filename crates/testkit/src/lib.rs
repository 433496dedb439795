//! Test support shared by patchbay's crates.
//!
//! Signals are validated against sajou's real `signal.schema.json` (copied under
//! `tests/fixtures/sajou/`) with a JSON Schema validator, independently of patchbay's own
//! typed check, so the two keep each other honest.
//!
//! The modules hold what the adapters' tests and benches would otherwise each write again:
//! [`decoding`] drives a decoder over split input, [`validity`] checks its signals,
//! [`prng`] and [`random_input`] make seeded random input, [`properties`] runs the shared
//! property checks, [`throughput`] builds the LLM decoders' bench input, and [`scratch`]
//! gives the end-to-end tests temporary directories that remove themselves. [`jack`] runs a
//! JACK server for the MIDI tests, [`nats_server`] a `nats-server` for the NATS tests.
//! `stand_in` (feature `stand-in`) is a one-connection TCP peer for probe tests.
//!
//! End-to-end scenarios that an adapter's tests and the root package's tests (on the
//! binary) both run are here too, each behind a feature so that a test builds only the
//! peers it uses: `generic-e2e` (`generic_e2e`: the `websocket` and `sse` sources),
//! `palyra-e2e` (`palyra_e2e`: a stand-in Palyra daemon) and `jte-wrap-e2e`
//! (`jte_wrap_e2e`: `wrap --protocol jte` in a pseudo-terminal).

pub mod decoding;
#[cfg(feature = "generic-e2e")]
pub mod generic_e2e;
pub mod jack;
#[cfg(feature = "jte-wrap-e2e")]
pub mod jte_wrap_e2e;
#[cfg(feature = "llm-proxy-e2e")]
pub mod llm_proxy_e2e;
pub mod nats_server;
#[cfg(feature = "palyra-e2e")]
pub mod palyra_e2e;
pub mod prng;
pub mod process;
pub mod properties;
pub mod random_input;
pub mod scratch;
#[cfg(feature = "stand-in")]
pub mod stand_in;
pub mod throughput;
pub mod validity;

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::Value;

/// The project's root directory.
pub fn project_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("project root")
}

/// The path of a fixture under `tests/fixtures/`, e.g. `fixture("openai/x.sse")`.
pub fn fixture(relative: &str) -> PathBuf {
    project_root().join("tests/fixtures").join(relative)
}

/// The text of a fixture under `tests/fixtures/`.
pub fn fixture_text(relative: &str) -> String {
    let path = fixture(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn validator() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| {
        let schema: Value = serde_json::from_str(&fixture_text("sajou/signal.schema.json"))
            .expect("schema is JSON");
        jsonschema::validator_for(&schema).expect("schema compiles")
    })
}

/// The schema errors of a signal (as JSON), empty when it is valid.
pub fn schema_errors(signal: &Value) -> Vec<String> {
    validator()
        .iter_errors(signal)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// Panics with the schema errors if `signal` (as JSON) does not validate against
/// sajou's signal schema.
pub fn assert_schema_valid(signal: &Value) {
    let errors = schema_errors(signal);
    assert!(
        errors.is_empty(),
        "schema-invalid signal {signal}: {errors:?}"
    );
}

/// The well-known types: signals of these must always validate.
pub use patchbay_signal::well_known::WELL_KNOWN_TYPES as WELL_KNOWN;
