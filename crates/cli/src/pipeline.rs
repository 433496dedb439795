//! The component registry and the built-in default pipeline.

use patchbay_graph::Registry;

/// The pipeline `patchbay run` uses without a config: a sidecar on 127.0.0.1:7878 that
/// serves what is posted to it (and NDJSON piped on standard input) to every UI, and a log
/// of the same signals on standard output (readable on a terminal, NDJSON when piped).
pub const DEFAULT_PIPELINE: &str = r#"# patchbay's built-in default pipeline.
[sources.stdin]
type = "stdin"

[outputs.ui]
type = "sidecar"
inputs = ["ui.inbound", "stdin"]
listen = "127.0.0.1:7878"

[outputs.log]
type = "stdout"
inputs = ["ui.inbound", "stdin"]
format = "auto"
when_full = "drop_oldest"    # a slow terminal never holds up the UIs
"#;

/// Every component type patchbay knows.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    for (name, build) in patchbay_filters::builders() {
        registry.filter(name, build);
    }
    patchbay_ndjson::register(&mut registry);
    patchbay_server::register(&mut registry);
    patchbay_midi::register(&mut registry);
    patchbay_palyra::register(&mut registry);
    registry
}
