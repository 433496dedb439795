//! The component registry and the built-in default pipeline.

use patchbay_graph::{Adapter, Probe, Registry};

/// The default pipeline's text: `$inputs` is what its UIs and its log both take (with the
/// agents' inbound streams when this build has them), `$agents` the agents' declarations.
macro_rules! default_pipeline {
    ($inputs:literal, $agents:literal) => {
        concat!(
            r#"# patchbay's built-in default pipeline.
[sources.stdin]
type = "stdin"

[outputs.ui]
type = "sidecar"
inputs = "#,
            $inputs,
            r#"
listen = "127.0.0.1:7878"

[outputs.log]
type = "stdout"
inputs = "#,
            $inputs,
            r#"
format = "auto"
when_full = "drop_oldest"    # a slow terminal never holds up the UIs
"#,
            $agents,
            r#"
# Local services (Ollama, LM Studio, an OpenClaw gateway, MIDI ports) as `local:<service>`
# sources: their health says what is there, and `discovery.found` / `discovery.lost`
# signals tell the UIs when that changes.
[discovery]
enabled = true
connect = ["ui", "log"]
"#
        )
    };
}

/// The pipeline `patchbay run` uses without a config: a sidecar on 127.0.0.1:7878 that
/// serves what is posted to it (and NDJSON piped on standard input) to every UI, a log of
/// the same signals on standard output (readable on a terminal, NDJSON when piped), the
/// hook endpoints of Claude Code on 127.0.0.1:7879 and Gemini CLI on 127.0.0.1:7880
/// (`patchbay hooks install [--agent gemini]` points them at it; a UI's `control.answer`
/// reaches them), and discovery of the local services.
#[cfg(all(feature = "claude-code", feature = "gemini-cli"))]
pub const DEFAULT_PIPELINE: &str = default_pipeline!(
    r#"["ui.inbound", "stdin", "claude.inbound", "gemini.inbound"]"#,
    r#"
# Claude Code's and Gemini CLI's hooks post here (`patchbay hooks install`, `patchbay hooks
# install --agent gemini`); a UI's `control.answer` reaches them for a gate (none by
# default: add `gate = { tools = ["Bash"] }` in a config).
[outputs.claude]
type = "claude_code"
inputs = ["ui.inbound"]
listen = "127.0.0.1:7879"

[outputs.gemini]
type = "gemini_cli"
inputs = ["ui.inbound"]
listen = "127.0.0.1:7880"
"#
);

/// The default pipeline with Claude Code's hook endpoint alone (a build without Gemini CLI).
#[cfg(all(feature = "claude-code", not(feature = "gemini-cli")))]
pub const DEFAULT_PIPELINE: &str = default_pipeline!(
    r#"["ui.inbound", "stdin", "claude.inbound"]"#,
    r#"
# Claude Code's hooks post here (`patchbay hooks install`); a UI's `control.answer`
# reaches it for a gate (none by default: add `gate = { tools = ["Bash"] }` in a config).
[outputs.claude]
type = "claude_code"
inputs = ["ui.inbound"]
listen = "127.0.0.1:7879"
"#
);

/// The pipeline `patchbay run` uses without a config: a sidecar on 127.0.0.1:7878 that
/// serves what is posted to it (and NDJSON piped on standard input) to every UI, a log of
/// the same signals on standard output (readable on a terminal, NDJSON when piped), and
/// discovery of the local services.
#[cfg(not(feature = "claude-code"))]
pub const DEFAULT_PIPELINE: &str = default_pipeline!(r#"["ui.inbound", "stdin"]"#, "");

/// Every adapter this build has: the one list everything that enumerates components is
/// derived from (the registry, `parse`, `wrap`, `components`). Adding an adapter is one
/// line here (behind its cargo feature).
pub const ADAPTERS: &[&Adapter] = &[
    &patchbay_ndjson::ADAPTER,
    &patchbay_server::ADAPTER,
    &patchbay_filters::ADAPTER,
    #[cfg(feature = "openai")]
    &patchbay_openai::ADAPTER,
    #[cfg(feature = "anthropic")]
    &patchbay_anthropic::ADAPTER,
    #[cfg(feature = "proxy")]
    &patchbay_proxy::ADAPTER,
    #[cfg(feature = "websocket")]
    &patchbay_websocket::ADAPTER,
    #[cfg(feature = "sse")]
    &patchbay_sse::ADAPTER,
    #[cfg(feature = "openclaw")]
    &patchbay_openclaw::ADAPTER,
    #[cfg(feature = "escapement")]
    &patchbay_escapement::ADAPTER,
    #[cfg(feature = "codelia")]
    &patchbay_codelia::ADAPTER,
    #[cfg(feature = "palyra")]
    &patchbay_palyra::ADAPTER,
    #[cfg(feature = "jte")]
    &patchbay_jte::ADAPTER,
    #[cfg(feature = "claude-code")]
    &patchbay_claude_code::ADAPTER,
    #[cfg(feature = "codex")]
    &patchbay_codex::ADAPTER,
    #[cfg(feature = "gemini-cli")]
    &patchbay_gemini_cli::ADAPTER,
    #[cfg(feature = "opencode")]
    &patchbay_opencode::ADAPTER,
    #[cfg(feature = "otlp")]
    &patchbay_otlp::ADAPTER,
    #[cfg(feature = "midi")]
    &patchbay_midi::ADAPTER,
    #[cfg(feature = "webhook")]
    &patchbay_webhook::ADAPTER,
    #[cfg(feature = "nats")]
    &patchbay_nats::ADAPTER,
    #[cfg(feature = "osc")]
    &patchbay_osc::ADAPTER,
    #[cfg(feature = "mqtt")]
    &patchbay_mqtt::ADAPTER,
];

/// Why `type = "midi"` is refused by a build without the `midi` feature.
#[cfg(not(feature = "midi"))]
pub const NO_MIDI: &str = "this patchbay was built without MIDI: rebuild it with the cargo \
     feature `midi` (`cargo build --release --features midi`; on Debian/Ubuntu it needs \
     `libasound2-dev`)";

/// Every component type this build knows, and the `[discovery]` section.
pub fn registry() -> Registry {
    let mut registry = Registry::from_adapters(ADAPTERS.iter().copied());
    // A config written for MIDI says why it cannot run here, not just "unknown type".
    #[cfg(not(feature = "midi"))]
    registry
        .source("midi", |o: &patchbay_graph::Options<'_>| {
            Err(o.error(NO_MIDI))
        })
        .output_fn(
            "midi",
            patchbay_graph::WhenFull::Block,
            |o: &patchbay_graph::Options<'_>| Err(o.error(NO_MIDI)),
        );
    crate::discovery::register(&mut registry, probes());
    registry
}

/// Every local service this build can find: the adapters' probes.
pub fn probes() -> Vec<Probe> {
    ADAPTERS
        .iter()
        .flat_map(|a| a.probes.iter().copied())
        .collect()
}
