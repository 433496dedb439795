//! A JACK server with its dummy driver, for tests that need real MIDI ports in user space.
//!
//! One named server per test run (`jackd -n NAME -r -d dummy`), so concurrent runs do not
//! see each other; clients find it through `JACK_DEFAULT_SERVER=NAME`. Names are
//! `pb-TAG-N` with the first free N: jack's shared registry holds at most 8 servers and
//! reclaims a dead server's slot only for a server of the same name, so names must be
//! reused rather than made unique per process. Readiness is polled
//! with `jack_lsp` (jackd accepts clients about 0.3 s after it starts). A killed server
//! leaves its shared-memory files (`/dev/shm/jack_NAME_0_0`, `jack_sem.*_NAME_*`) behind:
//! they are removed on kill and before every start.
//!
//! Used by the MIDI tests on JACK (the root `tests/midi_jack.rs` and
//! `adapters/midi/tests/jack.rs`) and by the `midi_latency` example.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to run when jackd is missing.
pub const INSTALL: &str = "install JACK with `apt-get install -y --no-install-recommends jackd2 \
                           libjack-jackd2-dev` (the step in .ci/run)";

/// How long a server may take to accept clients before the test fails (a failure guard,
/// not a timing assertion).
const READY_GUARD: Duration = Duration::from_secs(20);

/// A running (or killed) JACK server.
pub struct JackServer {
    name: String,
    /// The dummy driver's period in frames (`-p`); jackd's default (1024) when `None`.
    period: Option<u32>,
    child: Option<Child>,
    log: PathBuf,
}

impl JackServer {
    /// Starts a server named `pb-<tag>-<n>` (the first name no live server has) and waits
    /// until it accepts clients. Panics with the install step when jackd is not installed.
    pub fn start(tag: &str) -> JackServer {
        JackServer::start_with_period(tag, None)
    }

    /// Like [`JackServer::start`], with the dummy driver moving audio and MIDI every
    /// `period` frames (at 48 kHz, 64 frames are 1.3 ms) instead of jackd's default 1024.
    pub fn start_with_period(tag: &str, period: Option<u32>) -> JackServer {
        let mut failures = String::new();
        for n in 0..4 {
            let name = format!("pb-{tag}-{n}");
            let log = log_path(&name);
            let mut server = JackServer {
                name,
                period,
                child: None,
                log,
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(log) => failures.push_str(&log),
            }
        }
        panic!("no JACK server could be started:\n{failures}");
    }

    /// The server name (the value of `JACK_DEFAULT_SERVER` for clients).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the server process is running.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server (SIGKILL, as a crash) and removes what it leaves behind.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        remove_leftovers(&self.name);
    }

    /// Starts the server again under the same name.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(log) = self.spawn() {
            panic!("jackd `{}` did not start again:\n{log}", self.name);
        }
    }

    /// Stops the server cleanly (SIGTERM: it unregisters and removes its shared memory),
    /// killing it if it does not exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        remove_leftovers(&self.name);
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The ports the server lists (`jack_lsp`), for failure messages.
    pub fn ports(&self) -> String {
        ports_of(&self.name)
    }

    /// Starts jackd; on failure (the name is taken by a live server, …) returns its log.
    fn spawn(&mut self) -> Result<(), String> {
        remove_leftovers(&self.name);
        let log = std::fs::File::create(&self.log).expect("create the jackd log file");
        let log_err = log.try_clone().expect("clone the jackd log file");
        let mut command = Command::new("jackd");
        command.args(["-n", &self.name, "-r", "-d", "dummy"]);
        if let Some(period) = self.period {
            command.args(["-p", &period.to_string()]);
        }
        let child = command
            .env("JACK_NO_AUDIO_RESERVATION", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                panic!("jackd is not installed: {INSTALL}")
            }
            Err(err) => panic!("cannot start jackd: {err}"),
        };
        self.child = Some(child);
        self.wait_ready()
    }

    /// Polls `jack_lsp` until the server answers; the log if jackd exits first.
    fn wait_ready(&mut self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let probe = Command::new("jack_lsp")
                .env("JACK_DEFAULT_SERVER", &self.name)
                .env("JACK_NO_START_SERVER", "1")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            match probe {
                Ok(status) if status.success() => return Ok(()),
                Ok(_) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    panic!("jack_lsp is not installed: {INSTALL}")
                }
                Err(err) => panic!("cannot run jack_lsp: {err}"),
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "jackd exited ({status}) before accepting clients:\n{}",
                    self.log()
                );
            }
            assert!(
                started.elapsed() < READY_GUARD,
                "jackd `{}` did not accept clients within {READY_GUARD:?}:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for JackServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Where the server named `name` writes its log.
fn log_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{name}.jackd.log"))
}

/// The ports the server named `name` lists (`jack_lsp`).
fn ports_of(name: &str) -> String {
    Command::new("jack_lsp")
        .env("JACK_DEFAULT_SERVER", name)
        .env("JACK_NO_START_SERVER", "1")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// What the server named `name` (started by this process) says about itself, for failure
/// messages: its log and the ports it lists.
pub fn diagnostics(name: &str) -> String {
    let log = std::fs::read_to_string(log_path(name)).unwrap_or_default();
    format!(
        "jackd `{name}` log:\n{log}\nports (jack_lsp):\n{}",
        ports_of(name)
    )
}

/// Removes the shared-memory files a server named `name` leaves when killed.
fn remove_leftovers(name: &str) {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    let middle = format!("_{name}_");
    for entry in entries.flatten() {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        if file.starts_with("jack") && file.contains(&middle) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Polls `check` every 20 ms until it returns `Some`, failing with `what` (and `context()`)
/// after `guard`: a failure guard for events that must happen, never a timing assertion.
pub fn wait_for<T>(
    what: &str,
    guard: Duration,
    mut check: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            started.elapsed() < guard,
            "timed out after {guard:?} waiting for {what}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
