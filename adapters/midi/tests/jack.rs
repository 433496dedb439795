//! The `midi` source and output on real MIDI ports: a JACK server with its dummy driver,
//! a controller made with midir in this process, and the graph runtime in between.
//!
//! Run with `cargo test -p patchbay-midi --features jack` (needs `jackd2` and
//! `libjack-jackd2-dev`). One test function, because the JACK server is chosen through
//! the process environment (`JACK_DEFAULT_SERVER`).

#![cfg(feature = "jack")]

use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use midir::os::unix::{VirtualInput, VirtualOutput};
use midir::{MidiInput, MidiInputConnection, MidiOutput, MidiOutputConnection};
use patchbay_graph::telemetry::ComponentSnapshot;
use patchbay_graph::{
    BoxFuture, ChannelSource, ComponentError, Diagnostic, HealthState, Options, Output,
    OutputContext, OutputKind, Registry, SourceText, Telemetry, WhenFull,
};
use patchbay_signal::{SharedSignal, Signal, object};
use patchbay_testkit::jack::{JackServer, wait_for};

/// Failure guard for things that must happen (never a timing assertion).
const GUARD: Duration = Duration::from_secs(20);

/// What the probe output received.
static PROBED: Mutex<Option<std_mpsc::Sender<SharedSignal>>> = Mutex::new(None);
/// The running graph's telemetry, published by the probe.
static TELEMETRY: OnceLock<Arc<Telemetry>> = OnceLock::new();

/// An output that hands what it receives to the test.
struct Probe;

impl Output for Probe {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let _ = TELEMETRY.set(Arc::clone(cx.telemetry()));
            let tx = PROBED.lock().unwrap().clone().expect("probe channel");
            while let Some(signal) = cx.next().await {
                let _ = tx.send(signal);
                cx.delivered(1);
            }
            Ok(())
        })
    }
}

fn build_probe(_: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    Ok(Box::new(Probe))
}

const CONFIG: &str = r#"
[sources.pads]
type = "midi"
port = "ctl:pad"
rescan_ms = 50

[sources.unplugged_pads]
type = "midi"
port = "nothing-plugged-in"
rescan_ms = 50

[sources.inject]
type = "inject"

[outputs.probe]
type = "probe"
inputs = ["pads", "unplugged_pads"]

[outputs.unplugged_leds]
type = "midi"
port = "nothing-plugged-in"
inputs = ["inject"]
rescan_ms = 50

[outputs.leds]
type = "midi"
port = "lamp:leds"
inputs = ["inject"]
rescan_ms = 50

[outputs.feedback]
type = "midi"
virtual = "feedback"
inputs = ["inject"]
rescan_ms = 50
"#;

/// The controller: a virtual output `ctl:pad` (pads) and a virtual input `lamp:leds` (another client: JACK names clients uniquely).
struct Controller {
    pad: Option<MidiOutputConnection>,
    leds: Option<MidiInputConnection<()>>,
    leds_rx: std_mpsc::Receiver<Vec<u8>>,
    leds_tx: std_mpsc::Sender<Vec<u8>>,
}

impl Controller {
    fn new() -> Controller {
        let (leds_tx, leds_rx) = std_mpsc::channel();
        let mut controller = Controller {
            pad: None,
            leds: None,
            leds_rx,
            leds_tx,
        };
        controller.open_pad();
        let tx = controller.leds_tx.clone();
        let input = MidiInput::new("lamp").expect("controller input client");
        controller.leds = Some(
            input
                .create_virtual(
                    "leds",
                    move |_, bytes, _| {
                        let _ = tx.send(bytes.to_vec());
                    },
                    (),
                )
                .expect("virtual leds port"),
        );
        controller
    }

    fn open_pad(&mut self) {
        let output = MidiOutput::new("ctl").expect("controller output client");
        self.pad = Some(output.create_virtual("pad").expect("virtual pad port"));
    }

    fn close_pad(&mut self) {
        self.pad = None;
    }

    fn send(&mut self, bytes: &[u8]) {
        self.pad
            .as_mut()
            .expect("pad open")
            .send(bytes)
            .expect("send");
    }
}

fn snapshot(name: &str) -> Option<ComponentSnapshot> {
    TELEMETRY.get()?.component(name)
}

fn health_text() -> String {
    TELEMETRY
        .get()
        .map(|t| format!("{:#?}", t.snapshot()))
        .unwrap_or_else(|| "no telemetry yet".to_owned())
}

fn wait_state(name: &str, state: HealthState, detail: &str) -> ComponentSnapshot {
    wait_for(
        &format!("{name} to be {state:?} with detail containing `{detail}`"),
        GUARD,
        || {
            snapshot(name)
                .filter(|s| s.state == state && s.detail.as_deref().unwrap_or("").contains(detail))
        },
        health_text,
    )
}

/// Sends a note until the probe sees one: after a (re)connect, the first message may be
/// sent before JACK has wired the new connection, and JACK drops it.
fn note_reaches_patchbay(
    controller: &mut Controller,
    rx: &std_mpsc::Receiver<SharedSignal>,
    note: u8,
) -> SharedSignal {
    wait_for(
        &format!("note {note} to reach patchbay"),
        GUARD,
        || {
            controller.send(&[0x90, note, 100]);
            rx.recv_timeout(Duration::from_millis(200))
                .ok()
                .filter(|s| s.kind == "midi.note_on" && s.payload["note"] == note)
        },
        health_text,
    )
}

fn led(note: u8, velocity: u8) -> Signal {
    Signal::new(
        "midi.note_on",
        "test:inject",
        object! {"channel" => 1, "note" => note, "velocity" => velocity},
    )
}

#[test]
fn midi_source_and_output_on_jack() {
    let mut server = JackServer::start("midi-adapter");
    // SAFETY: set once, before any JACK client exists, in the only test of this binary.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("JACK_DEFAULT_SERVER", server.name());
        std::env::set_var("JACK_NO_START_SERVER", "1");
    }
    let mut controller = Controller::new();

    let ports = patchbay_midi::list_ports().expect("list ports");
    assert_eq!(ports.backend, "jack");
    assert!(ports.inputs.contains(&"ctl:pad".to_owned()), "{ports}");
    assert!(ports.outputs.contains(&"lamp:leds".to_owned()), "{ports}");

    let (probe_tx, probe_rx) = std_mpsc::channel();
    *PROBED.lock().unwrap() = Some(probe_tx);

    let mut registry = Registry::new();
    registry.adapter(&patchbay_midi::ADAPTER);
    // A source that emits what the test sends it.
    let inject_tx = ChannelSource::register(&mut registry, "inject", 16);
    registry.output(
        "probe",
        OutputKind {
            build: build_probe,
            inbound: false,
            when_full: WhenFull::Block,
        },
    );
    let graph = patchbay_graph::compile(&[SourceText::new("jack.toml", CONFIG)], &registry)
        .unwrap_or_else(|errors| panic!("config: {errors:?}"));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let graph_thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(patchbay_graph::runtime::run(graph, async {
            let _ = stop_rx.await;
        }))
    });

    // A pad press reaches the graph as midi.note_on with the port name.
    wait_state("pads", HealthState::Ok, "connected to ctl:pad");
    // A device that was never plugged in is waited for, which is no fault.
    for unplugged in ["unplugged_pads", "unplugged_leds"] {
        wait_state(
            unplugged,
            HealthState::Waiting,
            "waiting for a port matching `nothing-plugged-in`",
        );
    }
    let note = note_reaches_patchbay(&mut controller, &probe_rx, 36);
    assert_eq!(note.source, "midi:pads");
    assert_eq!(note.payload["channel"], 1);
    assert_eq!(note.payload["note"], 36);
    assert_eq!(note.payload["velocity"], 100);
    assert_eq!(note.payload["port"], "ctl:pad");

    // An LED signal comes out as MIDI bytes on the controller's input.
    wait_state("leds", HealthState::Ok, "sending to lamp:leds");
    inject_tx.try_send(led(40, 127)).unwrap();
    let bytes = controller
        .leds_rx
        .recv_timeout(GUARD)
        .unwrap_or_else(|_| panic!("no LED bytes\n{}", health_text()));
    assert_eq!(bytes, [0x90, 40, 127]);

    // A signal that is not MIDI is refused, counted, and said in health.
    inject_tx
        .try_send(Signal::new("control.pause", "test:inject", object! {}))
        .unwrap();
    let leds = wait_for(
        "the refused signal to be counted",
        GUARD,
        || snapshot("leds").filter(|s| s.bad_input >= 1),
        health_text,
    );
    assert!(
        leds.last_error
            .as_deref()
            .unwrap_or("")
            .contains("`control.pause` cannot be sent as MIDI"),
        "{leds:?}"
    );

    // The virtual port: another program connects to it and gets the bytes.
    wait_state("feedback", HealthState::Ok, ":feedback");
    let (fb_tx, fb_rx) = std_mpsc::channel();
    let listener = MidiInput::new("ctl-listen").expect("listener client");
    let port = listener
        .ports()
        .into_iter()
        .find(|p| {
            listener
                .port_name(p)
                .is_ok_and(|n| n.ends_with(":feedback") && n.starts_with("patchbay"))
        })
        .unwrap_or_else(|| panic!("no patchbay:feedback port in\n{}", server.ports()));
    let _listening = listener
        .connect(
            &port,
            "in",
            move |_, bytes, _| {
                let _ = fb_tx.send(bytes.to_vec());
            },
            (),
        )
        .expect("connect to the virtual port");
    let fed_back = wait_for(
        "bytes on the virtual port",
        GUARD,
        || {
            // Full: the graph has not taken the earlier tries yet; try again next round.
            let _ = inject_tx.try_send(led(41, 1));
            fb_rx.recv_timeout(Duration::from_millis(200)).ok()
        },
        health_text,
    );
    assert_eq!(fed_back, [0x90, 41, 1]);

    // Hot-plug: the controller's port goes away and comes back; no restart.
    controller.close_pad();
    wait_state("pads", HealthState::Recovering, "disappeared");
    controller.open_pad();
    wait_state("pads", HealthState::Ok, "connected to ctl:pad");
    let note = note_reaches_patchbay(&mut controller, &probe_rx, 37);
    assert_eq!(note.payload["note"], 37);

    // `patchbay midi monitor` and `patchbay midi learn`, on the same port, while the
    // pipeline runs: a pad press is seen by both.
    let pressing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let controller = Arc::new(Mutex::new(controller));
    let presser = {
        let pressing = Arc::clone(&pressing);
        let controller = Arc::clone(&controller);
        std::thread::spawn(move || {
            while pressing.load(std::sync::atomic::Ordering::SeqCst) {
                controller.lock().unwrap().send(&[0x99, 44, 90]);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let tools = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = patchbay_midi::InputOptions::port(Some("ctl:pad"));
    let block = tools
        .block_on(async {
            tokio::time::timeout(
                GUARD,
                patchbay_midi::learn(&options, "pads", "control.pause"),
            )
            .await
        })
        .expect("learn saw no press")
        .expect("learn");
    assert!(block.starts_with("[filters.pad_44_pause]\n"), "{block}");
    assert!(
        block.contains("\"payload.note\" = 44, \"payload.channel\" = 10"),
        "{block}"
    );
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel();
    let mut seen_tx = Some(seen_tx);
    let seen = tools.block_on(async {
        tokio::select! {
            result = patchbay_midi::monitor(&options, |decoded| {
                if let Some(tx) = seen_tx.take() {
                    let _ = tx.send(decoded);
                }
            }) => panic!("the monitor ended by itself: {result:?}"),
            seen = tokio::time::timeout(GUARD, seen_rx) => {
                seen.expect("the monitor saw no message").expect("monitor sender")
            }
        }
    });
    match seen {
        patchbay_signal::normalize::Decoded::Signal(signal) => {
            assert_eq!(signal.kind, "midi.note_on");
            assert_eq!(signal.source, "midi:monitor");
            assert_eq!(signal.payload["port"], "ctl:pad");
        }
        other => panic!("the monitor saw {other:?}"),
    }
    drop(tools);
    pressing.store(false, std::sync::atomic::Ordering::SeqCst);
    presser.join().unwrap();
    let controller = Arc::into_inner(controller).unwrap().into_inner().unwrap();

    // The JACK server dies: midir says nothing, the rescan notices and health says so.
    drop(_listening);
    drop(controller);
    server.kill();
    let pads = wait_for(
        "pads to notice the JACK server is gone",
        GUARD,
        || snapshot("pads").filter(|s| s.state == HealthState::Recovering),
        health_text,
    );
    assert!(pads.last_error.is_some(), "{pads:?}");
    wait_for(
        "pads to report the missing MIDI system",
        GUARD,
        || {
            snapshot("pads")
                .filter(|s| s.detail.as_deref().unwrap_or("").contains("is not running"))
        },
        health_text,
    );

    // The server returns: the source reconnects by itself. The controller's clients are
    // opened only once the source has seen the new server (and found no port yet): the
    // first client opened after a server died makes libjack free every client of the
    // dead one, and when that opening is the controller's, in this process but outside
    // patchbay's MIDI sessions, libjack's cleanup can close sockets that new clients have
    // reused (seen as a controller whose notes never arrive).
    server.restart();
    wait_for(
        "pads to see the new server without the controller's port",
        GUARD,
        || {
            snapshot("pads").filter(|s| {
                s.detail
                    .as_deref()
                    .unwrap_or("")
                    .contains("waiting for port ctl:pad")
            })
        },
        health_text,
    );
    let mut controller = Controller::new();
    wait_state("pads", HealthState::Ok, "connected to ctl:pad");
    let note = note_reaches_patchbay(&mut controller, &probe_rx, 38);
    assert_eq!(note.payload["note"], 38);

    stop_tx.send(()).unwrap();
    let report = graph_thread.join().expect("graph thread");
    let pads = report.telemetry.component("pads").unwrap();
    assert_eq!(pads.state, HealthState::Stopped);
    drop(controller);
}
