//! The `midi` source: a port followed across hot-plug, decoded into `midi.*` signals.

use std::sync::Arc;
use std::time::Duration;

use patchbay_graph::config::MAX_DURATION_MS;
use patchbay_graph::{
    BoxFuture, ComponentError, ComponentStats, Diagnostic, HealthState, Options, Source,
    SourceContext,
};
use serde::Deserialize;

use crate::input::{Event, InputDriver, Status};
use crate::system::{self, DEFAULT_CLIENT_NAME};
use crate::{DecoderConfig, MidiDecoder, PortMatcher};

/// The default rescan interval, ms.
pub const DEFAULT_RESCAN_MS: u64 = 1000;

/// The shortest rescan interval accepted, ms (each rescan opens the MIDI system).
pub const MIN_RESCAN_MS: u64 = 10;

/// The options of a `[sources.NAME]` table with `type = "midi"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MidiSourceConfig {
    /// The input port: its full name, or an unanchored regex (`nanoPAD2.*`, `ctl:`).
    /// patchbay's own ports are never matched by a regex.
    pub port: String,
    /// Only this channel (1-16) passes.
    #[serde(default)]
    pub channel: Option<u8>,
    /// Emit system messages (SysEx, clock, …) instead of dropping them.
    #[serde(default)]
    pub system: bool,
    /// How often the port list is checked for the device leaving or returning, ms (from 10
    /// to 86400000, one day).
    #[serde(default = "default_rescan_ms")]
    pub rescan_ms: u64,
    /// The MIDI client name patchbay opens the system with (its ports show as
    /// `CLIENT:NAME`; JACK renames a second client with the same name `CLIENT-01`).
    #[serde(default = "default_client_name")]
    pub client_name: String,
}

/// The default `rescan_ms` of the source and the output.
pub(crate) fn default_rescan_ms() -> u64 {
    DEFAULT_RESCAN_MS
}

/// The default `client_name` of the source and the output.
pub(crate) fn default_client_name() -> String {
    DEFAULT_CLIENT_NAME.to_owned()
}

impl MidiSourceConfig {
    /// The decoding options.
    pub fn decoder_config(&self) -> DecoderConfig {
        DecoderConfig {
            channel: self.channel,
            system: self.system,
        }
    }
}

/// Checks a rescan interval and a client name, with errors located at their keys.
pub(crate) fn check_common(
    options: &Options<'_>,
    rescan_ms: u64,
    client_name: &str,
) -> Result<(), Diagnostic> {
    options.check_range("rescan_ms", rescan_ms, MIN_RESCAN_MS..=MAX_DURATION_MS)?;
    system::check_client_name(client_name)
        .map_err(|e| options.error_at("client_name", e.to_string()))
}

/// Builds a `midi` source (no I/O: the port is opened when it runs).
pub(crate) fn build(options: &Options<'_>) -> Result<Box<dyn Source>, Diagnostic> {
    let config: MidiSourceConfig = options.parse()?;
    config
        .decoder_config()
        .validate()
        .map_err(|e| options.error_at("channel", e.to_string()))?;
    let matcher =
        PortMatcher::new(&config.port).map_err(|e| options.error_at("port", e.to_string()))?;
    check_common(options, config.rescan_ms, &config.client_name)?;
    Ok(Box::new(MidiSource { config, matcher }))
}

/// A running `midi` source.
struct MidiSource {
    config: MidiSourceConfig,
    matcher: PortMatcher,
}

impl Source for MidiSource {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let MidiSource { config, matcher } = *self;
            let mut decoder = MidiDecoder::with_config(
                format!("midi:{}", cx.name()),
                "",
                &config.decoder_config(),
            )?;
            let stats = Arc::clone(cx.stats());
            let mut driver = InputDriver::new(
                matcher,
                &config.client_name,
                cx.name(),
                Duration::from_millis(config.rescan_ms),
                Arc::new(move || ComponentStats::add(&stats.dropped, 1)),
            );
            let mut health = Health::new(config.port.clone());
            let mut out = Vec::new();
            let result = loop {
                let event = tokio::select! {
                    _ = cx.shutdown().wait() => break Ok(()),
                    event = driver.next() => event,
                };
                match event {
                    Ok(Event::Message(message)) => {
                        decoder.decode_message(message.raw.bytes(), message.at, &mut out);
                        let mut closed = false;
                        for decoded in out.drain(..) {
                            if !closed && cx.emit_decoded(decoded).await.is_err() {
                                closed = true;
                            }
                        }
                        if closed {
                            // The graph is gone (shutting down): stop.
                            break Ok(());
                        }
                    }
                    Ok(Event::Status(status)) => {
                        if let Status::Connected(port) = &status {
                            decoder.set_port(port.clone());
                        }
                        health.report(&cx, &status);
                    }
                    Err(err) => break Err(err),
                }
            };
            driver.close().await;
            match result {
                Ok(()) => {
                    cx.set_state(HealthState::Stopped, None);
                    Ok(())
                }
                Err(err) => {
                    cx.set_state(HealthState::Failed, Some(err.to_string()));
                    Err(err.into())
                }
            }
        })
    }
}

/// Turns rescan outcomes into health states, logging each change once (a rescan every
/// second must not repeat the same warning every second).
pub(crate) struct Health {
    pattern: String,
    last: Option<String>,
}

impl Health {
    pub(crate) fn new(pattern: String) -> Self {
        Health {
            pattern,
            last: None,
        }
    }

    /// Sets the health state for `status`, and logs it if it changed.
    pub(crate) fn report(&mut self, cx: &SourceContext, status: &Status) {
        self.apply(cx.stats(), cx.name(), status);
    }

    /// [`Health::report`] on bare stats.
    pub(crate) fn apply(&mut self, stats: &ComponentStats, name: &str, status: &Status) {
        let detail = status.detail(&self.pattern);
        let changed = self.last.as_deref() != Some(detail.as_str());
        let state = match status {
            Status::Connected(_) | Status::Still(_) => HealthState::Ok,
            Status::Waiting(absent) => absent.state(),
            Status::Lost(_) | Status::NoSystem(_) | Status::OpenFailed(_) => {
                HealthState::Recovering
            }
        };
        if changed {
            match status {
                Status::Connected(_) | Status::Still(_) => {
                    tracing::info!(component = %name, "MIDI: {detail}");
                }
                Status::Waiting(_) => tracing::info!(component = %name, "MIDI: {detail}"),
                Status::Lost(port) => {
                    stats.record_error(format!("MIDI port {port} disappeared"));
                }
                Status::NoSystem(err) | Status::OpenFailed(err) => stats.record_error(err),
            }
        }
        stats.set_state(state, Some(detail.clone()));
        self.last = Some(detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let config: MidiSourceConfig = Options::parse_snippet("port = \"pad\"\n").unwrap();
        assert_eq!(
            config,
            MidiSourceConfig {
                port: "pad".into(),
                channel: None,
                system: false,
                rescan_ms: 1000,
                client_name: "patchbay".into(),
            }
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err =
            Options::parse_snippet::<MidiSourceConfig>("port = \"pad\"\nchanel = 3\n").unwrap_err();
        assert!(err.message.contains("did you mean `channel`"), "{err}");
    }

    #[test]
    fn port_is_required() {
        let err = Options::parse_snippet::<MidiSourceConfig>("channel = 3\n").unwrap_err();
        assert!(err.message.contains("missing field `port`"), "{err}");
    }
}
