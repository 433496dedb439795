//! Discovery inside the daemon: the `discovery` source type and the `[discovery]` section
//! of a pipeline.
//!
//! A `discovery` source probes one service every `interval_ms` (MIDI every second, so a
//! controller plugged in shows at once), says in its health whether the service is there
//! (`ok` with its models or ports, or `recovering` with why not), and emits
//! `discovery.found`, `discovery.updated` and `discovery.lost` signals when that changes.
//! It only probes: it never opens a connection to a service, so the connections of
//! configured sources are never touched.
//!
//! ```toml
//! [discovery]
//! enabled = true
//! interval_ms = 30000
//! connect = ["ui"]        # the outputs the discovered services feed
//! ```
//!
//! expands to one such source per service, `local:ollama`, `local:lmstudio`,
//! `local:openclaw` and `local:midi`, each added to the `inputs` of the outputs named in
//! `connect`: the same as writing, for each service,
//!
//! ```toml
//! [sources."local:ollama"]
//! type = "discovery"
//! service = "ollama"
//! interval_ms = 30000
//! ```

use std::time::Duration;

use patchbay_graph::config::suggestion;
use patchbay_graph::{
    BoxFuture, ComponentError, Declaration, Diagnostic, DiscoveryExpansion, HealthState, Options,
    Registry, Source, SourceContext,
};
use patchbay_signal::{Object, Signal};
use serde::{Deserialize, Serialize};

use super::{
    DiscoveryConfig, DiscoverySettings, MidiLister, Service, ServiceKind, default_interval_ms,
    probe_midi, probe_ollama, probe_openai_models, probe_openclaw,
};

/// How often MIDI ports are listed, whatever `interval_ms` says: hot-plug shows at once.
const MIDI_RESCAN: Duration = Duration::from_secs(1);

/// Registers the `discovery` source type and what the `[discovery]` section expands to;
/// `midi` lists MIDI ports (none: MIDI is not a service discovery knows).
pub fn register(registry: &mut Registry, midi: Option<MidiLister>) {
    let with_midi = midi.is_some();
    registry.source("discovery", move |options: &Options<'_>| {
        DiscoveredSource::build(options, midi.clone())
    });
    registry.discovery(move |options: &Options<'_>| expand(options, with_midi));
}

/// The services discovery knows, MIDI only with a lister.
fn services(midi: bool) -> Vec<ServiceKind> {
    let mut kinds = vec![
        ServiceKind::Ollama,
        ServiceKind::Lmstudio,
        ServiceKind::Openclaw,
    ];
    if midi {
        kinds.push(ServiceKind::Midi);
    }
    kinds
}

/// The options of a `discovery` source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoverySourceOptions {
    /// The service it probes: `ollama`, `lmstudio`, `openclaw` or `midi`.
    pub service: String,
    /// How often to probe, ms (MIDI ports are listed at least every second).
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
}

/// `[discovery]` → a `local:<service>` declaration per service.
fn expand(options: &Options<'_>, midi: bool) -> Result<DiscoveryExpansion, Diagnostic> {
    let settings: DiscoverySettings = options.parse()?;
    if settings.interval_ms == 0 {
        return Err(options.error_at("interval_ms", "`interval_ms` must be at least 1"));
    }
    if !settings.enabled {
        return Ok(DiscoveryExpansion::default());
    }
    let sources = services(midi)
        .into_iter()
        .map(|kind| {
            let source = DiscoverySourceOptions {
                service: kind.name().into(),
                interval_ms: settings.interval_ms,
            };
            Declaration::new(format!("local:{}", kind.name()), "discovery", &source)
                .map_err(|e| options.error(e.to_string()))
        })
        .collect::<Result<_, _>>()?;
    Ok(DiscoveryExpansion {
        sources,
        connect: settings.connect,
    })
}

/// One discovered service, probed periodically: the `discovery` source type.
pub struct DiscoveredSource {
    kind: ServiceKind,
    config: DiscoveryConfig,
    interval: Duration,
}

impl DiscoveredSource {
    /// Builds a `discovery` source from its options; `midi` lists MIDI ports (none: the
    /// `midi` service is unknown).
    pub fn build(
        options: &Options<'_>,
        midi: Option<MidiLister>,
    ) -> Result<Box<dyn Source>, Diagnostic> {
        let o: DiscoverySourceOptions = options.parse()?;
        if o.interval_ms == 0 {
            return Err(options.error_at("interval_ms", "`interval_ms` must be at least 1"));
        }
        let known = services(midi.is_some());
        let Some(kind) = known.iter().copied().find(|k| k.name() == o.service) else {
            let names: Vec<&str> = known.iter().map(|k| k.name()).collect();
            return Err(options.error_at(
                "service",
                format!(
                    "unknown service `{}`{}; known: {}",
                    o.service,
                    suggestion(&o.service, names.iter().copied()),
                    names.join(", ")
                ),
            ));
        };
        let interval = Duration::from_millis(o.interval_ms);
        Ok(Box::new(DiscoveredSource {
            kind,
            config: DiscoveryConfig {
                midi,
                ..DiscoveryConfig::default()
            },
            interval: if kind == ServiceKind::Midi {
                MIDI_RESCAN.min(interval)
            } else {
                interval
            },
        }))
    }

    async fn probe(&self) -> Option<Service> {
        let c = &self.config;
        Some(match self.kind {
            ServiceKind::Ollama => probe_ollama(&c.ollama, c.timeout).await,
            ServiceKind::Lmstudio => {
                probe_openai_models(ServiceKind::Lmstudio, &c.lmstudio, c.timeout).await
            }
            ServiceKind::Openclaw => {
                probe_openclaw(&c.openclaw, c.openclaw_config.clone(), c.timeout).await
            }
            ServiceKind::Midi => probe_midi(c.midi.clone(), c.timeout).await?,
        })
    }
}

/// What the health detail says about an available service.
fn summary(service: &Service) -> String {
    match service.service {
        ServiceKind::Midi => format!(
            "{} input(s), {} output(s) on {}",
            service.inputs.len(),
            service.outputs.len(),
            service.address
        ),
        ServiceKind::Openclaw => format!(
            "gateway at {}{}",
            service.address,
            match service.token_found {
                Some(true) => ", token found",
                Some(false) => ", no token found",
                None => "",
            }
        ),
        _ => format!("{} model(s) at {}", service.models.len(), service.address),
    }
}

fn signal(kind: &str, source: &str, service: &Service) -> Signal {
    let payload = match serde_json::to_value(service) {
        Ok(serde_json::Value::Object(o)) => o,
        _ => Object::new(),
    };
    Signal::new(kind, source, payload)
}

impl Source for DiscoveredSource {
    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let source = format!("discovery:{}", self.kind.name());
            cx.set_state(HealthState::Starting, Some("probing".into()));
            let mut previous: Option<Service> = None;
            let mut ticker = tokio::time::interval(self.interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticker.tick() => {}
                    () = cx.shutdown().wait() => return Ok(()),
                }
                let Some(now) = self.probe().await else {
                    return Ok(());
                };
                let was = previous.as_ref().map(Service::is_available);
                let event = match (was, now.is_available()) {
                    (Some(true), true) => {
                        let before = previous.as_ref();
                        let changed = before.is_some_and(|b| {
                            b.models != now.models
                                || b.inputs != now.inputs
                                || b.outputs != now.outputs
                        });
                        changed.then_some("discovery.updated")
                    }
                    (_, true) => Some("discovery.found"),
                    (Some(true), false) => Some("discovery.lost"),
                    _ => None,
                };
                if now.is_available() {
                    cx.set_state(HealthState::Ok, Some(summary(&now)));
                } else {
                    let why = now.detail.clone().unwrap_or_else(|| "not found".into());
                    cx.set_state(
                        HealthState::Recovering,
                        Some(format!("unavailable at {}: {why}", now.address)),
                    );
                }
                if let Some(kind) = event {
                    tracing::info!(service = self.kind.name(), "{kind}: {}", summary(&now));
                    if cx.emit(signal(kind, &source, &now)).await.is_err() {
                        return Ok(());
                    }
                }
                previous = Some(now);
            }
        })
    }
}
