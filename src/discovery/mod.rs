//! Local service discovery: what runs on this machine that patchbay can connect to.
//!
//! Each adapter lists the services it can find as [`Probe`]s in its descriptor (the LLM
//! proxy finds Ollama and LM Studio, the OpenClaw adapter a gateway, the MIDI adapter the
//! ports); [`discover`] runs them all at once, each within its timeout, for `patchbay
//! discover`, and the daemon's [`DiscoveredSource`]s run one each, periodically. The
//! result prints as a table ([`render_table`]) or as JSON
//! (`serde_json::to_string(&services)`).

mod daemon;

pub use daemon::{DiscoveredSource, DiscoverySourceOptions, register};
pub use patchbay_graph::descriptor::Probe;
pub use patchbay_graph::probe::{DEFAULT_TIMEOUT, ProbeContext, Service, ServiceState};

use std::fmt::Write as _;

/// Runs every probe at once, each with its context; the result is in the probes' order,
/// one entry per probe that had something to look at.
pub async fn discover(probes: &[(Probe, ProbeContext)]) -> Vec<Service> {
    let running: Vec<_> = probes
        .iter()
        .map(|(probe, cx)| tokio::spawn((probe.run)(cx.clone())))
        .collect();
    let mut services = Vec::new();
    for (handle, (probe, _)) in running.into_iter().zip(probes) {
        match handle.await {
            Ok(Some(service)) => services.push(service),
            Ok(None) => {}
            Err(err) => tracing::warn!(service = probe.service, "the probe failed: {err}"),
        }
    }
    services
}

/// The `[discovery]` table of a pipeline (the daemon's periodic discovery).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoverySettings {
    /// Whether the daemon discovers local services (the default pipeline turns it on).
    #[serde(default)]
    pub enabled: bool,
    /// How often to probe again, ms.
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    /// The outputs the `local:<service>` sources made for what is found feed.
    #[serde(default)]
    pub connect: Vec<String>,
}

/// The default `interval_ms`.
pub const DEFAULT_INTERVAL_MS: u64 = 30_000;

fn default_interval_ms() -> u64 {
    DEFAULT_INTERVAL_MS
}

impl Default for DiscoverySettings {
    fn default() -> Self {
        DiscoverySettings {
            enabled: false,
            interval_ms: DEFAULT_INTERVAL_MS,
            connect: Vec::new(),
        }
    }
}

/// The table `patchbay discover` prints: service, address, state, then the models, the
/// ports, or why not.
pub fn render_table(services: &[Service]) -> String {
    let rows: Vec<[String; 4]> = services
        .iter()
        .map(|s| {
            [
                s.service.to_owned(),
                s.address.clone(),
                s.state.as_str().to_owned(),
                s.offer_text(),
            ]
        })
        .collect();
    let headers = ["SERVICE", "ADDRESS", "STATE", "MODELS / PORTS"];
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row.iter()).take(3) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; 4]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate().take(3) {
            let width = widths.get(i).copied().unwrap_or(0);
            let _ = write!(text, "{cell:<width$}  ");
        }
        text.push_str(cells[3]);
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(headers);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3]]);
    }
    out
}

#[cfg(test)]
mod tests {
    use patchbay_graph::probe::Offers;

    use super::*;

    #[test]
    fn table_lines_up() {
        let services = vec![
            Service {
                models: vec!["llama3.2:latest".into(), "qwen".into()],
                ..Service::new(
                    "ollama",
                    Offers::Models,
                    "http://127.0.0.1:11434",
                    ServiceState::Available,
                )
            },
            Service::new(
                "lmstudio",
                Offers::Models,
                "http://127.0.0.1:1234",
                ServiceState::Unavailable,
            )
            .with_detail("connection refused"),
            Service {
                inputs: vec!["ctl:pad".into()],
                ..Service::new("midi", Offers::Ports, "jack", ServiceState::Available)
            },
        ];
        assert_eq!(
            render_table(&services),
            "SERVICE   ADDRESS                 STATE        MODELS / PORTS\n\
             ollama    http://127.0.0.1:11434  available    llama3.2:latest, qwen\n\
             lmstudio  http://127.0.0.1:1234   unavailable  connection refused\n\
             midi      jack                    available    in: ctl:pad; out: none\n"
        );
    }

    #[test]
    fn settings_defaults() {
        let settings: DiscoverySettings = serde_json::from_str("{}").unwrap();
        assert_eq!(settings, DiscoverySettings::default());
        assert_eq!(settings.interval_ms, 30_000);
        assert!(serde_json::from_str::<DiscoverySettings>(r#"{"enable": true}"#).is_err());
    }
}
