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

use std::sync::Arc;
use std::time::Duration;

use patchbay_graph::config::suggestion;
use patchbay_graph::{
    BoxFuture, ComponentError, Declaration, Diagnostic, DiscoveryExpansion, HealthState, Options,
    Registry, Source, SourceContext,
};
use patchbay_signal::{Object, Signal};
use serde::{Deserialize, Serialize};

use super::{DiscoverySettings, Probe, ProbeContext, Service, default_interval_ms};

/// Registers the `discovery` source type and what the `[discovery]` section expands to:
/// `probes` are the services discovery knows (the adapters' probes).
pub fn register(registry: &mut Registry, probes: Vec<Probe>) {
    let probes: Arc<[Probe]> = probes.into();
    let known = Arc::clone(&probes);
    registry.source("discovery", move |options: &Options<'_>| {
        DiscoveredSource::build(options, &known)
    });
    registry.discovery(move |options: &Options<'_>| expand(options, &probes));
}

/// The options of a `discovery` source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoverySourceOptions {
    /// The service it probes (`patchbay discover` lists them: `ollama`, `lmstudio`,
    /// `openclaw`, `midi`).
    pub service: String,
    /// How often to probe, ms (some services are probed more often: MIDI ports are
    /// listed at least every second).
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    /// Where to probe (`host:port`) instead of the service's well-known address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// `[discovery]` → a `local:<service>` declaration per service.
fn expand(options: &Options<'_>, probes: &[Probe]) -> Result<DiscoveryExpansion, Diagnostic> {
    let settings: DiscoverySettings = options.parse()?;
    if settings.interval_ms == 0 {
        return Err(options.error_at("interval_ms", "`interval_ms` must be at least 1"));
    }
    if !settings.enabled {
        return Ok(DiscoveryExpansion::default());
    }
    let sources = probes
        .iter()
        .map(|probe| {
            let source = DiscoverySourceOptions {
                service: probe.service.into(),
                interval_ms: settings.interval_ms,
                address: None,
            };
            Declaration::new(format!("local:{}", probe.service), "discovery", &source)
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
    probe: Probe,
    cx: ProbeContext,
    interval: Duration,
}

impl DiscoveredSource {
    /// Builds a `discovery` source from its options; `probes` are the services it may
    /// probe.
    pub fn build(options: &Options<'_>, probes: &[Probe]) -> Result<Box<dyn Source>, Diagnostic> {
        let o: DiscoverySourceOptions = options.parse()?;
        if o.interval_ms == 0 {
            return Err(options.error_at("interval_ms", "`interval_ms` must be at least 1"));
        }
        let Some(probe) = probes.iter().find(|p| p.service == o.service) else {
            let names: Vec<&str> = probes.iter().map(|p| p.service).collect();
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
            probe: *probe,
            cx: ProbeContext {
                address: o.address,
                ..ProbeContext::default()
            },
            interval: probe
                .rescan
                .map_or(interval, |at_most| at_most.min(interval)),
        }))
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
            let service = self.probe.service;
            let source = format!("discovery:{service}");
            cx.set_state(HealthState::Starting, Some("probing".into()));
            let mut previous: Option<Service> = None;
            let mut ticker = tokio::time::interval(self.interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = ticker.tick() => {}
                    () = cx.shutdown().wait() => return Ok(()),
                }
                let Some(now) = (self.probe.run)(self.cx.clone()).await else {
                    return Ok(());
                };
                let was = previous.as_ref().map(Service::is_available);
                let event = match (was, now.is_available()) {
                    (Some(true), true) => previous
                        .as_ref()
                        .is_some_and(|before| now.offers_other_than(before))
                        .then_some("discovery.updated"),
                    (_, true) => Some("discovery.found"),
                    (Some(true), false) => Some("discovery.lost"),
                    _ => None,
                };
                if now.is_available() {
                    cx.set_state(HealthState::Ok, Some(now.summary()));
                } else {
                    let why = now.detail.clone().unwrap_or_else(|| "not found".into());
                    // An absent service is what discovery reports, not a fault of patchbay's.
                    cx.set_state(
                        HealthState::Waiting,
                        Some(format!("unavailable at {}: {why}", now.address)),
                    );
                }
                if let Some(kind) = event {
                    tracing::info!(service, "{kind}: {}", now.summary());
                    if cx.emit(signal(kind, &source, &now)).await.is_err() {
                        return Ok(());
                    }
                }
                previous = Some(now);
            }
        })
    }
}
