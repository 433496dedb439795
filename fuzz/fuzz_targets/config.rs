//! The config loader: arbitrary TOML text compiled through the real registry (every
//! adapter of the default build), as `patchbay validate` does; errors are rendered as the
//! command prints them. Nothing is started.
#![no_main]

use std::sync::OnceLock;

use patchbay_graph::{Registry, SourceText};

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(patchbay::registry)
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = patchbay_fuzz::text(data);
    let files = [SourceText::new("fuzz.toml", text)];
    // A fixed environment: `${VAR}` resolves the same way on every run.
    let env = |name: &str| (name == "FUZZ_TOKEN").then(|| "s3cret".to_owned());
    match patchbay_graph::compile::compile_with_env(&files, registry(), &env) {
        Ok(graph) => drop(graph),
        Err(errors) => {
            for error in errors {
                let message = error.to_string();
                assert!(
                    !message.contains("s3cret"),
                    "a secret in an error: {message}"
                );
            }
        }
    }
});
