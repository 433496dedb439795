//! A real `mosquitto` broker on a free loopback port for the MQTT tests (started from a
//! generated config, optionally with a password file, persistence or TLS; killed when
//! dropped), its `mosquitto_pub` as an independent client, and a graph around the
//! adapter with channels in and out and its live telemetry.
#![allow(dead_code)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use patchbay_graph::{
    BoxFuture, ChannelOutput, ChannelSource, ComponentError, Output, OutputContext, Registry,
    RunningGraph, SourceText, Telemetry, WhenFull, compile, telemetry::ComponentSnapshot,
};
use patchbay_signal::{SharedSignal, Signal};
use patchbay_testkit::process::free_port;
use patchbay_testkit::scratch::ScratchDir;
use tokio::sync::mpsc;

/// The installed broker (`bash scripts/test` installs the Debian packages `mosquitto` and
/// `mosquitto-clients`).
pub fn binary() -> &'static str {
    ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("mosquitto is installed (`apt-get install mosquitto mosquitto-clients`, or `bash scripts/test`)")
}

/// How a broker is set up.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// Users (name, password) of a password file; empty: anonymous clients allowed.
    pub users: Vec<(String, String)>,
    /// Keep sessions and messages on disk across a restart.
    pub persistent: bool,
    /// TLS with this (certificate PEM, key PEM).
    pub tls: Option<(String, String)>,
}

/// A running `mosquitto`, killed when dropped.
pub struct Mosquitto {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    config: PathBuf,
    dir: ScratchDir,
}

impl Mosquitto {
    /// Starts a broker on a free loopback port and waits until it listens. A port found
    /// free can be taken before the broker binds it: then another is tried.
    pub fn start(setup: Setup) -> Mosquitto {
        let dir = ScratchDir::new("mosquitto");
        for _ in 0..10 {
            let port = free_port();
            let config = write_config(&dir, port, &setup);
            if let Some(child) = spawn(&config, port) {
                return Mosquitto {
                    child: Some(child),
                    port,
                    config,
                    dir,
                };
            }
        }
        panic!(
            "mosquitto never started (see its log under {})",
            dir.path().display()
        );
    }

    /// `mqtt://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// Stops the broker as an operator would (SIGTERM: a persistent broker saves its
    /// sessions and messages) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let guard = Instant::now();
            while matches!(child.try_wait(), Ok(None)) {
                assert!(
                    guard.elapsed() < Duration::from_secs(60),
                    "mosquitto ignored SIGTERM"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Starts it again, same port, same config (and, when persistent, same state).
    pub fn restart(&mut self) {
        self.child = spawn(&self.config, self.port);
        assert!(
            self.child.is_some(),
            "mosquitto restarted on port {}",
            self.port
        );
    }

    /// The broker's log (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("mosquitto.log")).unwrap_or_default()
    }

    /// A scratch file beside the broker's.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Publishes one message with `mosquitto_pub`, an independent client.
    pub fn publish(&self, topic: &str, payload: &[u8], args: &[&str]) {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let file = self
            .dir
            .join(format!("payload-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
        std::fs::write(&file, payload).expect("write the payload");
        let out = Command::new("mosquitto_pub")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-t",
                topic,
                "-f",
            ])
            .arg(&file)
            .args(args)
            .output()
            .expect("mosquitto_pub runs (Debian package `mosquitto-clients`)");
        assert!(
            out.status.success(),
            "mosquitto_pub {topic}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_file(file);
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts mosquitto with `config` and waits until it listens on `port`; `None` when it
/// exited first (the port was taken).
fn spawn(config: &Path, port: u16) -> Option<Child> {
    let mut child = Command::new(binary())
        .arg("-c")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mosquitto starts");
    let guard = Instant::now();
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(child);
        }
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        if guard.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mosquitto did not listen on {port} within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn write_config(dir: &ScratchDir, port: u16, setup: &Setup) -> PathBuf {
    let mut config = format!(
        "# written by the patchbay MQTT tests\n\
         listener {port} 127.0.0.1\n\
         # Run as root (the tests' user), not as the `mosquitto` user it switches to.\n\
         user root\n\
         log_dest file {log}\n\
         log_type all\n\
         # Room for what queues for a persistent session while it is away.\n\
         max_queued_messages 100000\n",
        log = dir.join("mosquitto.log").display(),
    );
    if setup.users.is_empty() {
        config.push_str("allow_anonymous true\n");
    } else {
        let passwords = dir.join("passwords");
        let _ = std::fs::remove_file(&passwords);
        for (user, password) in &setup.users {
            let mut args = vec!["-b"];
            if !passwords.exists() {
                args.push("-c");
            }
            let status = Command::new("mosquitto_passwd")
                .args(&args)
                .arg(&passwords)
                .args([user, password])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("mosquitto_passwd runs (Debian package `mosquitto`)");
            assert!(status.success(), "mosquitto_passwd");
        }
        set_private(&passwords);
        config.push_str(&format!(
            "allow_anonymous false\npassword_file {}\n",
            passwords.display()
        ));
    }
    if setup.persistent {
        config.push_str(&format!(
            "persistence true\npersistence_location {}/\n",
            dir.path().display()
        ));
    }
    if let Some((cert, key)) = &setup.tls {
        let cert_file = dir.join("broker.pem");
        let key_file = dir.join("broker.key");
        std::fs::write(&cert_file, cert).expect("write the certificate");
        std::fs::write(&key_file, key).expect("write the key");
        set_private(&key_file);
        config.push_str(&format!(
            "certfile {}\nkeyfile {}\n",
            cert_file.display(),
            key_file.display()
        ));
    }
    let path = dir.join("mosquitto.conf");
    std::fs::write(&path, config).expect("write mosquitto.conf");
    path
}

fn set_private(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
}

/// A graph around the adapter: `feed` (signals from the test), `seen` (signals to it),
/// and the graph's live telemetry.
pub struct Graph {
    /// Signals into the `feed` source.
    pub feed: mpsc::Sender<Signal>,
    /// What reaches `seen` outputs.
    pub seen: mpsc::Receiver<SharedSignal>,
    running: RunningGraph,
    telemetry: Arc<OnceLock<Arc<Telemetry>>>,
}

/// Hands the graph's telemetry to the test.
struct Probe(Arc<OnceLock<Arc<Telemetry>>>);

impl Output for Probe {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            let _ = self.0.set(Arc::clone(cx.telemetry()));
            while cx.next().await.is_some() {}
            Ok(())
        })
    }
}

impl Graph {
    /// Starts a graph from `config`, to which a `feed` source and the probe are added
    /// (declare `type = "seen"` outputs to receive signals).
    pub async fn start(config: &str) -> Graph {
        let mut registry = Registry::from_adapters([&patchbay_mqtt::ADAPTER]);
        let feed = ChannelSource::register(&mut registry, "feed", 1024);
        let seen = ChannelOutput::register(&mut registry, "seen", 100_000);
        let telemetry = Arc::new(OnceLock::new());
        let slot = Arc::clone(&telemetry);
        registry.output_fn("probe", WhenFull::Block, move |_| {
            Ok(Box::new(Probe(Arc::clone(&slot))) as Box<dyn Output>)
        });
        let config = format!(
            "[sources.feed]\ntype = \"feed\"\n\n[outputs.probe]\ntype = \"probe\"\ninputs = [\"feed\"]\n\n{config}"
        );
        let graph = compile(&[SourceText::new("mqtt-test.toml", &config)], &registry)
            .unwrap_or_else(|e| panic!("{e:?}\n{config}"));
        drop(registry);
        let graph = Graph {
            feed,
            seen,
            running: RunningGraph::spawn(graph),
            telemetry,
        };
        wait_for("the graph to start", || graph.telemetry.get().is_some()).await;
        graph
    }

    /// A component's counters and health now.
    pub fn component(&self, name: &str) -> ComponentSnapshot {
        self.telemetry
            .get()
            .and_then(|t| t.component(name))
            .unwrap_or_else(|| panic!("no component `{name}`"))
    }

    /// A gauge of a component now (0 when unset).
    pub fn gauge(&self, name: &str, gauge: &str) -> f64 {
        self.component(name)
            .gauges
            .get(gauge)
            .copied()
            .unwrap_or(0.0)
    }

    /// Waits until the source `name` is subscribed to all its `filters` filters.
    pub async fn subscribed(&self, name: &str, filters: usize) {
        wait_for(&format!("`{name}` subscribed"), || {
            self.gauge(name, "mqtt_subscribed") >= filters as f64
        })
        .await;
    }

    /// The next signal `seen` gets (within a generous guard).
    pub async fn next(&mut self) -> SharedSignal {
        tokio::time::timeout(Duration::from_secs(60), self.seen.recv())
            .await
            .expect("a signal within a minute")
            .expect("the graph runs")
    }

    /// Stops the graph and returns its components' final snapshots.
    pub async fn stop(self) -> Vec<ComponentSnapshot> {
        drop(self.feed);
        let report = tokio::time::timeout(Duration::from_secs(60), self.running.stop())
            .await
            .expect("the graph stops within a minute")
            .expect("it ends");
        report.telemetry.snapshot()
    }
}

/// The final snapshot of `name`.
pub fn final_of(snapshots: &[ComponentSnapshot], name: &str) -> ComponentSnapshot {
    snapshots
        .iter()
        .find(|c| c.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("no component `{name}`"))
}

/// Polls `check` until it holds; panics after a minute (a guard against a hang, not a
/// timing assertion).
pub async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let guard = Instant::now();
    while !check() {
        assert!(
            guard.elapsed() < Duration::from_secs(60),
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
