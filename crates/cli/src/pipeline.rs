//! The component registry and the built-in default pipeline.

use patchbay_graph::Registry;

/// The pipeline `patchbay run` uses without a config: NDJSON signals from standard input
/// to standard output.
pub const DEFAULT_PIPELINE: &str = r#"# patchbay's built-in default pipeline.
[sources.stdin]
type = "stdin"

[outputs.stdout]
type = "stdout"
inputs = ["stdin"]
format = "auto"
"#;

/// Every component type patchbay knows.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    for (name, build) in patchbay_filters::builders() {
        registry.filter(name, build);
    }
    patchbay_ndjson::register(&mut registry);
    registry
}
