//! The component registry and the built-in default pipeline.

use patchbay_graph::Registry;

/// The pipeline `patchbay run` uses without a config: a sidecar on 127.0.0.1:7878 that
/// serves what is posted to it (and NDJSON piped on standard input) to every UI, a log of
/// the same signals on standard output (readable on a terminal, NDJSON when piped), and
/// discovery of the local services.
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

# Local services (Ollama, LM Studio, an OpenClaw gateway, MIDI ports) as `local:<service>`
# sources: their health says what is there, and `discovery.found` / `discovery.lost`
# signals tell the UIs when that changes.
[discovery]
enabled = true
connect = ["ui", "log"]
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
    patchbay_escapement::register(&mut registry);
    patchbay_codelia::register(&mut registry);
    patchbay_openclaw::register(&mut registry);
    patchbay_proxy::register(&mut registry);
    patchbay_websocket::register(&mut registry);
    patchbay_sse::register(&mut registry);
    crate::discovery::register(&mut registry, Some(midi_lister()));
    registry
}

/// Lists MIDI ports for discovery.
pub fn midi_lister() -> crate::discovery::MidiLister {
    std::sync::Arc::new(|| {
        patchbay_midi::list_ports()
            .map(|ports| crate::discovery::MidiListing {
                system: ports.backend.to_owned(),
                inputs: ports.inputs,
                outputs: ports.outputs,
            })
            .map_err(|err| err.to_string())
    })
}
