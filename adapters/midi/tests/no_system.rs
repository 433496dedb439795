//! Without any MIDI system (no ALSA sequencer: these machines have no sound hardware),
//! listing ports fails with a clear error, and a pipeline with `midi` source and output
//! runs on: both report `recovering` with the reason in health and keep retrying.
//!
//! Skipped (passes trivially) where `/dev/snd/seq` exists; the JACK build is covered by
//! `tests/jack.rs` and the root `tests/midi_jack.rs`.

#![cfg(not(feature = "jack"))]

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use patchbay_graph::telemetry::ComponentSnapshot;
use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, HealthState, Options, Output, OutputContext, OutputKind,
    Registry, SourceText, Telemetry, WhenFull,
};
use patchbay_midi::MidiError;

static TELEMETRY: OnceLock<Arc<Telemetry>> = OnceLock::new();

/// Publishes the graph's telemetry to the test.
struct Probe;

impl Output for Probe {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let _ = TELEMETRY.set(Arc::clone(cx.telemetry()));
            while cx.next().await.is_some() {}
            Ok(())
        })
    }
}

fn build_probe(_: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(Probe))
}

fn no_sequencer() -> bool {
    !std::path::Path::new("/dev/snd/seq").exists()
}

#[test]
fn list_ports_says_there_is_no_midi_system() {
    if !no_sequencer() {
        return;
    }
    let err = patchbay_midi::list_ports().unwrap_err();
    assert!(matches!(err, MidiError::NoSystem(_)), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("no MIDI system available: cannot open the ALSA sequencer /dev/snd/seq"),
        "{err}"
    );
}

#[test]
fn a_midi_pipeline_runs_on_without_midi() {
    if !no_sequencer() {
        return;
    }
    let config = r#"
[sources.pads]
type = "midi"
port = "nanoPAD2.*"
rescan_ms = 20

[outputs.probe]
type = "probe"
inputs = ["pads"]

[outputs.leds]
type = "midi"
virtual = "leds"
inputs = ["pads"]
rescan_ms = 20
"#;
    let mut registry = Registry::new();
    registry.adapter(&patchbay_midi::ADAPTER);
    registry.output(
        "probe",
        OutputKind {
            build: build_probe,
            inbound: false,
            when_full: WhenFull::Block,
        },
    );
    let graph = patchbay_graph::compile(&[SourceText::new("midi.toml", config)], &registry)
        .unwrap_or_else(|e| panic!("{e:?}"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = runtime.spawn(patchbay_graph::runtime::run(graph, async {
        let _ = stop_rx.await;
    }));

    let find = |name: &str| -> Option<ComponentSnapshot> { TELEMETRY.get()?.component(name) };
    let started = Instant::now();
    let (pads, leds) = loop {
        let pads = find("pads").filter(|s| s.state == HealthState::Recovering);
        let leds = find("leds").filter(|s| s.state == HealthState::Recovering);
        if let (Some(pads), Some(leds)) = (pads, leds) {
            break (pads, leds);
        }
        // A failure guard, not a timing assertion.
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no recovering state: {:?}",
            TELEMETRY.get().map(|t| t.snapshot())
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    for component in [&pads, &leds] {
        let detail = component.detail.as_deref().unwrap_or("");
        assert!(
            detail.contains("no MIDI system available: cannot open the ALSA sequencer"),
            "{component:?}"
        );
    }
    // Several rescans later it is still running and still says why.
    std::thread::sleep(Duration::from_millis(100));
    assert!(!run.is_finished());
    assert_eq!(find("pads").unwrap().state, HealthState::Recovering);

    stop_tx.send(()).unwrap();
    let report = runtime.block_on(run).unwrap();
    let pads = report.telemetry.component("pads").unwrap();
    assert_eq!(pads.state, HealthState::Stopped);
}
