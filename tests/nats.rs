//! Two patchbay processes on one real `nats-server` (with JetStream): a publisher replays
//! signals into a stream, a subscriber reads them through a durable consumer into a file,
//! and is stopped and restarted mid-stream. Every signal arrives, once.

#![cfg(feature = "nats")]

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use patchbay_testkit::scratch::ScratchDir;

/// A child process killed when dropped (a failing test leaves nothing running).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Running {
    /// SIGTERM, then waits for the process to exit; returns whether it exited cleanly.
    fn stop(&mut self) -> bool {
        let pid = i32::try_from(self.0.id()).expect("a pid");
        // SAFETY: sending a signal to our own child, which has not been reaped yet.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        self.0.wait().is_ok_and(|s| s.success())
    }
}

fn nats_server() -> String {
    for candidate in ["/usr/sbin/nats-server", "/usr/bin/nats-server"] {
        if Path::new(candidate).exists() {
            return candidate.into();
        }
    }
    panic!("nats-server is not installed (`bash scripts/test` installs the Debian package)");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Waits until `done` holds, at most `limit` (a bound against hanging, not a timing
/// assertion).
fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn patchbay(config: &Path, log: &Path) -> Running {
    let log = std::fs::File::create(log).expect("a log file");
    Running(
        Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .args(["run", &config.display().to_string()])
            .env("PATCHBAY_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("patchbay starts"),
    )
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn jetstream_delivers_every_signal_once_across_a_subscriber_restart() {
    const N: u64 = 600;
    let dir = ScratchDir::new("nats-js");
    let port = free_port();
    let store = dir.join("js");
    let _server = Running(
        Command::new(nats_server())
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(&store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts"),
    );
    wait_until(Duration::from_secs(20), "nats-server", || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let url = format!("nats://127.0.0.1:{port}");

    // A scenario spread over about a second, so the subscriber is stopped mid-stream.
    let scenario = dir.join("ticks.jsonl");
    let mut file = std::fs::File::create(&scenario).unwrap();
    for i in 0..N {
        writeln!(
            file,
            r#"{{"delayMs": 2, "signal": {{"id": "tick-{i}", "type": "tick", "source": "test:pub", "payload": {{"i": {i}}}}}}}"#
        )
        .unwrap();
    }
    drop(file);
    let publisher = dir.join("pub.toml");
    std::fs::write(
        &publisher,
        format!(
            r#"[sources.ticks]
type = "file"
path = "{}"
format = "scenario"
speed = 1.0

[outputs.bus]
type = "nats"
inputs = ["ticks"]
url = "{url}"
jetstream = {{ stream = "PATCHBAY" }}
"#,
            scenario.display()
        ),
    )
    .unwrap();
    let received = dir.join("received.jsonl");
    let subscriber = dir.join("sub.toml");
    std::fs::write(
        &subscriber,
        format!(
            r#"[sources.bus]
type = "nats"
url = "{url}"
subject = "patchbay.>"
jetstream = {{ stream = "PATCHBAY", durable = "sub" }}

[outputs.out]
type = "file"
inputs = ["bus"]
path = "{}"
"#,
            received.display()
        ),
    )
    .unwrap();

    let mut sub = patchbay(&subscriber, &dir.join("sub1.log"));
    let mut publ = patchbay(&publisher, &dir.join("pub.log"));
    wait_until(Duration::from_secs(60), "the first signals", || {
        lines(&received).len() >= 50
    });
    assert!(sub.stop(), "the subscriber stops cleanly");
    let before = lines(&received).len();
    assert!((before as u64) < N, "stopped mid-stream ({before} of {N})");
    wait_until(Duration::from_secs(60), "the publisher", || {
        matches!(publ.0.try_wait(), Ok(Some(_)))
    });
    assert!(
        publ.0.wait().unwrap().success(),
        "the publisher ends cleanly"
    );

    let mut sub = patchbay(&subscriber, &dir.join("sub2.log"));
    wait_until(Duration::from_secs(60), "every signal", || {
        lines(&received).len() as u64 >= N
    });
    assert!(sub.stop(), "the subscriber stops cleanly");

    let mut seen: Vec<u64> = lines(&received)
        .iter()
        .map(|s| {
            assert_eq!(s["type"], "tick");
            s["payload"]["i"].as_u64().expect("payload.i")
        })
        .collect();
    let total = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(total, seen.len(), "no signal twice");
    assert_eq!(seen, (0..N).collect::<Vec<_>>(), "every signal");
}
