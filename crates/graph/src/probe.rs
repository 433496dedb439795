//! Finding local services: what an adapter's [`Probe`](crate::descriptor::Probe) reports.
//!
//! A probe only looks (an HTTP `GET`, a TCP connect, a port listing), each within its
//! [`ProbeContext::timeout`]; it never opens a connection a configured source would use.
//! `patchbay discover` prints what the probes of every adapter found, and the daemon's
//! `discovery` sources (`local:<service>`) probe periodically and say in their health
//! whether the service is there.

use std::time::Duration;

use serde::Serialize;

/// The default probe timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(300);

/// What a probe is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeContext {
    /// The time the probe may take, all of it.
    pub timeout: Duration,
    /// Where to look (`host:port`) instead of the service's well-known address.
    pub address: Option<String>,
}

impl ProbeContext {
    /// At the well-known address, within `timeout`.
    pub fn new(timeout: Duration) -> Self {
        ProbeContext {
            timeout,
            address: None,
        }
    }

    /// The address to probe: the one given, else `default`.
    pub fn address_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.address.as_deref().unwrap_or(default)
    }
}

impl Default for ProbeContext {
    fn default() -> Self {
        ProbeContext::new(DEFAULT_TIMEOUT)
    }
}

/// Whether a service answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceState {
    /// It answered as expected.
    Available,
    /// Nothing there (refused, timed out, no MIDI system).
    Unavailable,
    /// Something answered, but not as expected (an HTTP error, a body that is not a model
    /// list).
    Error,
}

impl ServiceState {
    /// `available`, `unavailable` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceState::Available => "available",
            ServiceState::Unavailable => "unavailable",
            ServiceState::Error => "error",
        }
    }
}

/// What kind of thing a service offers: how a table or a health detail shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Offers {
    /// Models (an LLM server): shown as its model list.
    Models,
    /// Ports (a MIDI system): shown as its inputs and outputs.
    Ports,
    /// A connection (a gateway): shown as its address.
    #[default]
    Endpoint,
}

/// One probed service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Service {
    /// Which service (`ollama`, `lmstudio`, `openclaw`, `midi`): the probe's name.
    pub service: &'static str,
    /// What it offers (not serialized: the fields below say it).
    #[serde(skip)]
    pub offers: Offers,
    /// Where it was probed (`http://127.0.0.1:11434`, `127.0.0.1:18789`; for MIDI the
    /// system, `alsa` or `jack`, or `midi` when there is none).
    pub address: String,
    /// Whether it answered.
    pub state: ServiceState,
    /// Why it is unavailable or in error, or a remark (which endpoint answered, the token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Model ids (Ollama, LM Studio).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// MIDI input ports.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    /// MIDI output ports.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    /// Whether a credential was found where the service keeps it (never the credential).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_found: Option<bool>,
}

impl Service {
    /// A service in `state`, with nothing else known.
    pub fn new(
        service: &'static str,
        offers: Offers,
        address: impl Into<String>,
        state: ServiceState,
    ) -> Self {
        Service {
            service,
            offers,
            address: address.into(),
            state,
            detail: None,
            models: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            token_found: None,
        }
    }

    /// The same, with a detail.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Whether it answered as expected.
    pub fn is_available(&self) -> bool {
        self.state == ServiceState::Available
    }

    /// Whether what it offers (models, ports) differs from `other`'s.
    pub fn offers_other_than(&self, other: &Service) -> bool {
        self.models != other.models || self.inputs != other.inputs || self.outputs != other.outputs
    }

    /// One line for a health detail: what an available service offers.
    pub fn summary(&self) -> String {
        match self.offers {
            Offers::Models => format!("{} model(s) at {}", self.models.len(), self.address),
            Offers::Ports => format!(
                "{} input(s), {} output(s) on {}",
                self.inputs.len(),
                self.outputs.len(),
                self.address
            ),
            Offers::Endpoint => format!(
                "{} at {}{}",
                self.service,
                self.address,
                match self.token_found {
                    Some(true) => ", token found",
                    Some(false) => ", no token found",
                    None => "",
                }
            ),
        }
    }

    /// What a table shows of it: the models or the ports of an available service, then
    /// the detail.
    pub fn offer_text(&self) -> String {
        let list = |names: &[String], none: &str| {
            if names.is_empty() {
                none.to_owned()
            } else {
                names.join(", ")
            }
        };
        let mut parts = Vec::new();
        if self.is_available() {
            match self.offers {
                Offers::Models => parts.push(list(&self.models, "no models")),
                Offers::Ports => parts.push(format!(
                    "in: {}; out: {}",
                    list(&self.inputs, "none"),
                    list(&self.outputs, "none")
                )),
                Offers::Endpoint => {}
            }
        }
        if let Some(detail) = &self.detail {
            parts.push(if parts.is_empty() {
                detail.clone()
            } else {
                format!("({detail})")
            });
        }
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape() {
        let service = Service {
            token_found: Some(true),
            ..Service::new(
                "openclaw",
                Offers::Endpoint,
                "127.0.0.1:18789",
                ServiceState::Available,
            )
        };
        assert_eq!(
            serde_json::to_value(&service).unwrap(),
            serde_json::json!({"service": "openclaw", "address": "127.0.0.1:18789", "state": "available", "token_found": true})
        );
        assert_eq!(
            service.summary(),
            "openclaw at 127.0.0.1:18789, token found"
        );
    }
}
