//! Discovery inside the daemon: the `[discovery]` section of a pipeline.
//!
//! ```toml
//! [discovery]
//! enabled = true
//! interval_ms = 30000
//! connect = ["ui"]        # the outputs the discovered services feed
//! ```
//!
//! makes one source per service, `local:ollama`, `local:lmstudio`, `local:openclaw` and
//! `local:midi`, each feeding the outputs named in `connect`. A source probes its service
//! every `interval_ms` (MIDI every second, so a controller plugged in shows at once), says
//! in its health whether the service is there (`ok` with its models or ports, or
//! `recovering` with why not), and emits `discovery.found`, `discovery.updated` and
//! `discovery.lost` signals when that changes. It only probes: it never opens a connection
//! to a service, so the connections of configured sources are never touched.

use std::time::Duration;

use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, DiscoveryPlan, HealthState, Options, Registry, Source,
    SourceContext,
};
use patchbay_signal::{Object, Signal};

use super::{
    DiscoveryConfig, DiscoverySettings, MidiLister, Service, ServiceKind, probe_midi, probe_ollama,
    probe_openai_models, probe_openclaw,
};

/// How often MIDI ports are listed, whatever `interval_ms` says: hot-plug shows at once.
const MIDI_RESCAN: Duration = Duration::from_secs(1);

/// Registers the `[discovery]` section; `midi` lists MIDI ports (none: MIDI is not
/// discovered).
pub fn register(registry: &mut Registry, midi: Option<MidiLister>) {
    registry.discovery(std::sync::Arc::new(move |options: &Options<'_>| {
        build(options, midi.clone())
    }));
}

fn build(options: &Options<'_>, midi: Option<MidiLister>) -> Result<DiscoveryPlan, Diagnostic> {
    let settings: DiscoverySettings = options.parse()?;
    if settings.interval_ms == 0 {
        return Err(options.error_at("interval_ms", "`interval_ms` must be at least 1"));
    }
    if !settings.enabled {
        return Ok(DiscoveryPlan {
            sources: Vec::new(),
            connect: Vec::new(),
        });
    }
    let config = DiscoveryConfig {
        midi,
        ..DiscoveryConfig::default()
    };
    let interval = Duration::from_millis(settings.interval_ms);
    let mut kinds = vec![
        ServiceKind::Ollama,
        ServiceKind::Lmstudio,
        ServiceKind::Openclaw,
    ];
    if config.midi.is_some() {
        kinds.push(ServiceKind::Midi);
    }
    let sources = kinds
        .into_iter()
        .map(|kind| {
            let source: Box<dyn Source> = Box::new(DiscoveredSource {
                kind,
                config: config.clone(),
                interval: if kind == ServiceKind::Midi {
                    MIDI_RESCAN.min(interval)
                } else {
                    interval
                },
            });
            (format!("local:{}", kind.name()), source)
        })
        .collect();
    Ok(DiscoveryPlan {
        sources,
        connect: settings.connect,
    })
}

/// One discovered service, probed periodically.
pub struct DiscoveredSource {
    kind: ServiceKind,
    config: DiscoveryConfig,
    interval: Duration,
}

impl DiscoveredSource {
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
