//! MIDI end to end: the `patchbay` binary against real MIDI ports in user space.
//!
//! A JACK server with its dummy driver provides the ports (`patchbay_testkit::jack`); a
//! controller made with midir in this test process opens a virtual output `ctl:pad` (the
//! pads) and a virtual input `lamp:leds` (the LEDs). patchbay runs a pipeline
//! `midi` source → `stdout` and → `midi` output, and the test checks what comes out of its
//! stdout, its log (stderr) and the LED port.
//!
//! Needs: `jackd2` and `libjack-jackd2-dev` installed, and patchbay built with JACK:
//! `cargo test --features jack --test midi_jack`. One test function, because the JACK server
//! is chosen through this process's environment (`JACK_DEFAULT_SERVER`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use midir::os::unix::{VirtualInput, VirtualOutput};
use midir::{MidiInput, MidiInputConnection, MidiOutput, MidiOutputConnection};
use patchbay_testkit::jack::{self, JackServer, wait_for};
use patchbay_testkit::scratch::ScratchDir;
use serde_json::Value;

/// Failure guard for what must happen (never a timing assertion).
const GUARD: Duration = Duration::from_secs(20);

const CONFIG: &str = r#"
[sources.pads]
type = "midi"
port = "ctl:pad"
rescan_ms = 50

[outputs.stdout]
type = "stdout"
inputs = ["pads"]
format = "json"

[outputs.leds]
type = "midi"
port = "lamp:leds"
inputs = ["pads"]
rescan_ms = 50
"#;

/// The controller: pads out (`ctl:pad`), LEDs in (`lamp:leds`).
struct Controller {
    pad: Option<MidiOutputConnection>,
    _leds: MidiInputConnection<()>,
    leds: Receiver<Vec<u8>>,
}

impl Controller {
    fn new() -> Controller {
        let (tx, leds) = channel();
        let input = MidiInput::new("lamp").expect("controller input client");
        let leds_port = input
            .create_virtual(
                "leds",
                move |_, bytes, _| {
                    let _ = tx.send(bytes.to_vec());
                },
                (),
            )
            .expect("virtual port lamp:leds");
        let mut controller = Controller {
            pad: None,
            _leds: leds_port,
            leds,
        };
        controller.open_pad();
        controller
    }

    fn open_pad(&mut self) {
        let output = MidiOutput::new("ctl").expect("controller output client");
        self.pad = Some(output.create_virtual("pad").expect("virtual port ctl:pad"));
    }

    fn close_pad(&mut self) {
        self.pad = None;
    }

    fn send(&mut self, bytes: &[u8]) {
        if let Some(pad) = self.pad.as_mut() {
            pad.send(bytes).expect("send on ctl:pad");
        }
    }
}

/// A running patchbay with its stdout (JSON lines) and stderr (log lines) collected.
struct Patchbay {
    child: Child,
    stdout: Receiver<Value>,
    log: Arc<Mutex<String>>,
    /// The JACK server's name, for failure messages.
    server: String,
}

impl Patchbay {
    fn run(config: &std::path::Path, server: &str) -> Patchbay {
        let mut child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .arg("run")
            .arg(config)
            .env("JACK_DEFAULT_SERVER", server)
            .env("PATCHBAY_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("patchbay starts");
        let (tx, stdout) = channel();
        let out = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(value) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(value);
                }
            }
        });
        let log = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().expect("stderr");
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        Patchbay {
            child,
            stdout,
            log,
            server: server.to_owned(),
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// For failure messages: patchbay's log, the JACK server's log and its ports.
    fn context(&self) -> String {
        format!(
            "patchbay's log:\n{}\n{}",
            self.log(),
            jack::diagnostics(&self.server)
        )
    }

    /// Waits until the log contains `text` at least `times` times.
    fn wait_log(&self, text: &str, times: usize) {
        wait_for(
            &format!("`{text}` ×{times} in patchbay's log"),
            GUARD,
            || (self.log().matches(text).count() >= times).then_some(()),
            || self.context(),
        );
    }

    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("patchbay exited ({status}):\n{}", self.context());
        }
    }

    /// SIGTERM, then the exit status.
    fn stop(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        wait_for(
            "patchbay to exit after SIGTERM",
            GUARD,
            || self.child.try_wait().ok().flatten(),
            String::new,
        )
    }
}

impl Drop for Patchbay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends note `note` on the pads until patchbay prints it (a message sent before JACK has
/// wired a fresh connection is lost, as with any JACK client).
fn note_reaches_stdout(controller: &mut Controller, patchbay: &Patchbay, note: u8) -> Value {
    wait_for(
        &format!("note {note} on patchbay's stdout"),
        GUARD,
        || {
            controller.send(&[0x90, note, 100]);
            patchbay
                .stdout
                .recv_timeout(Duration::from_millis(200))
                .ok()
                .filter(|s| s["type"] == "midi.note_on" && s["payload"]["note"] == note)
        },
        || patchbay.context(),
    )
}

/// Checks the binary can do MIDI on JACK; fails with the step that is missing.
fn check_binary(server: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["midi", "list"])
        .env("JACK_DEFAULT_SERVER", server)
        .output()
        .expect("patchbay runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("unrecognized subcommand"),
        "the patchbay binary has no `midi` command yet: the CLI must call \
         patchbay_midi::list_ports for `patchbay midi list` and register patchbay_midi\n{stderr}"
    );
    assert!(
        !stdout.contains("MIDI backend: alsa") && !stderr.contains("ALSA sequencer"),
        "patchbay was built with the ALSA backend: run `cargo test --features jack` (root \
         feature `jack` → patchbay/jack → patchbay-midi/jack)\n{stdout}{stderr}"
    );
    assert!(
        output.status.success() && stdout.contains("MIDI backend: jack"),
        "`patchbay midi list` failed on a running JACK server:\n{stdout}\n{stderr}\n{}",
        jack::diagnostics(server)
    );
}

#[test]
fn midi_through_patchbay_on_jack() {
    let mut server = JackServer::start("midi-e2e");
    // SAFETY: set once, before any JACK client or other thread of this test exists, in
    // the only test of this binary.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("JACK_DEFAULT_SERVER", server.name());
        std::env::set_var("JACK_NO_START_SERVER", "1");
    }
    check_binary(server.name());

    // Without a MIDI system, `midi list` says so clearly.
    let missing = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["midi", "list"])
        .env("JACK_DEFAULT_SERVER", "pb-no-such-server")
        .output()
        .expect("patchbay runs");
    let text = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success(), "{text}");
    assert!(
        text.contains("no MIDI system available")
            && text.contains("JACK server `pb-no-such-server` is not running"),
        "{text}"
    );

    let dir = ScratchDir::new("midi-jack");
    let config = dir.join("midi.toml");
    std::fs::write(&config, CONFIG).expect("write config");

    let mut controller = Controller::new();
    let mut patchbay = Patchbay::run(&config, server.name());

    // A pad press reaches patchbay as midi.note_on, with the port name.
    patchbay.wait_log("MIDI: connected to ctl:pad", 1);
    let note = note_reaches_stdout(&mut controller, &patchbay, 36);
    assert_eq!(note["source"], "midi:pads");
    assert_eq!(note["payload"]["channel"], 1);
    assert_eq!(note["payload"]["velocity"], 100);
    assert_eq!(note["payload"]["port"], "ctl:pad");

    // The same signal goes to the `midi` output: MIDI bytes on the LED port.
    patchbay.wait_log("MIDI: sending to lamp:leds", 1);
    let led = wait_for(
        "LED bytes on lamp:leds",
        GUARD,
        || {
            controller.send(&[0x90, 40, 127]);
            controller
                .leds
                .recv_timeout(Duration::from_millis(200))
                .ok()
                .filter(|b| b.as_slice() == [0x90, 40, 127])
        },
        || patchbay.context(),
    );
    assert_eq!(led, [0x90, 40, 127]);

    // Hot-plug: the controller's port goes away and comes back; no restart.
    controller.close_pad();
    patchbay.wait_log("MIDI port ctl:pad disappeared", 1);
    controller.open_pad();
    patchbay.wait_log("MIDI: connected to ctl:pad", 2);
    note_reaches_stdout(&mut controller, &patchbay, 37);
    patchbay.assert_running();

    // The JACK server dies: patchbay notices, says so, and runs on.
    drop(controller);
    server.kill();
    patchbay.wait_log("is not running", 1);
    patchbay.assert_running();

    // It comes back: patchbay reconnects by itself.
    server.restart();
    let mut controller = Controller::new();
    patchbay.wait_log("MIDI: connected to ctl:pad", 3);
    note_reaches_stdout(&mut controller, &patchbay, 38);

    let log = patchbay.log();
    let status = patchbay.stop();
    assert!(status.success(), "patchbay exited with {status}\n{log}");
    drop(controller);
}
