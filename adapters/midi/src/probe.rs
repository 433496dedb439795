//! Finding the MIDI system and its ports, for `patchbay discover` and `local:midi`.

use std::time::Duration;

use patchbay_graph::BoxFuture;
use patchbay_graph::descriptor::Probe;
use patchbay_graph::probe::{Offers, ProbeContext, Service, ServiceState};

use crate::system::{MidiError, PortList, list_ports};

/// The probe of `local:midi`: the ports are listed every second whatever the daemon's
/// `interval_ms`, so that a controller plugged in shows at once.
pub const PROBE: Probe = Probe::new("midi", run_probe).rescan(Duration::from_secs(1));

fn run_probe(cx: ProbeContext) -> BoxFuture<Option<Service>> {
    Box::pin(async move { Some(probe_with(list_ports, &cx).await) })
}

/// Lists the ports with `list` on a blocking thread (opening a MIDI client can block),
/// within the context's timeout.
pub async fn probe_with(list: fn() -> Result<PortList, MidiError>, cx: &ProbeContext) -> Service {
    let found = |address: &str, state| Service::new(PROBE.service, Offers::Ports, address, state);
    let listing = tokio::time::timeout(cx.timeout, tokio::task::spawn_blocking(list)).await;
    match listing {
        Ok(Ok(Ok(ports))) => Service {
            inputs: ports.inputs,
            outputs: ports.outputs,
            ..found(ports.backend, ServiceState::Available)
        },
        Ok(Ok(Err(reason))) => {
            found("midi", ServiceState::Unavailable).with_detail(reason.to_string())
        }
        Ok(Err(err)) => found("midi", ServiceState::Error)
            .with_detail(format!("listing MIDI ports failed: {err}")),
        Err(_) => found("midi", ServiceState::Unavailable)
            .with_detail(format!("no answer within {} ms", cx.timeout.as_millis())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_controller() -> Result<PortList, MidiError> {
        Ok(PortList {
            backend: "jack",
            inputs: vec!["ctl:pad".into()],
            outputs: Vec::new(),
        })
    }

    fn no_system() -> Result<PortList, MidiError> {
        Err(MidiError::NoSystem("no sequencer".into()))
    }

    #[tokio::test]
    async fn ports_are_listed_and_a_missing_system_explained() {
        let found = probe_with(one_controller, &ProbeContext::default()).await;
        assert!(found.is_available());
        assert_eq!(
            (found.address.as_str(), found.inputs.as_slice()),
            ("jack", &["ctl:pad".to_owned()][..])
        );
        assert_eq!(found.summary(), "1 input(s), 0 output(s) on jack");
        let missing = probe_with(no_system, &ProbeContext::default()).await;
        assert_eq!(missing.state, ServiceState::Unavailable);
        assert_eq!(missing.address, "midi");
        assert_eq!(
            missing.detail.as_deref(),
            Some("no MIDI system available: no sequencer")
        );
    }
}
