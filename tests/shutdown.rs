//! SIGTERM always completes: whatever an output's reader or a peer is doing, the daemon
//! exits within its drain timeout.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use patchbay_testkit::process::{Daemon, wait_until};
use patchbay_testkit::scratch::ScratchDir;

/// A daemon copying stdin to a stdout nobody reads, with `shutdown_timeout_ms`, once its
/// output is stalled (or about to be).
fn stalled_daemon(dir: &ScratchDir, shutdown_timeout_ms: u64) -> Daemon {
    let config = dir.join("p.toml");
    std::fs::write(
        &config,
        format!("[sources.in]\ntype = \"stdin\"\n\n[outputs.out]\ntype = \"stdout\"\ninputs = [\"in\"]\n\n[runtime]\nshutdown_timeout_ms = {shutdown_timeout_ms}\n"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .arg("run")
        .arg(&config)
        .env("PATCHBAY_LOG", "warn")
        .env("XDG_RUNTIME_DIR", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped()) // never read
        .stderr(Stdio::null())
        .spawn()
        .expect("runs");
    let mut stdin = child.stdin.take().unwrap();
    // Kept open (and never read) for the daemon's life: the thread below owns it.
    let stdout = child.stdout.take().unwrap();
    // Far more than the pipes and the queues hold: the writer blocks once the daemon is
    // stalled on its stdout.
    let written = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&written);
    std::thread::spawn(move || {
        let _stdout = stdout;
        let line = format!(
            "{{\"type\":\"x\",\"payload\":{{\"pad\":\"{}\"}}}}\n",
            "y".repeat(100)
        );
        for _ in 0..100_000 {
            if stdin.write_all(line.as_bytes()).is_err() {
                return;
            }
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    // 1 500 lines written: the daemon has read at least 1 500 less what the stdin pipe
    // holds (~550 lines of 120 bytes), more than its stdout pipe takes (~550): its
    // output is stalled, or about to be.
    wait_until("the daemon took 1 500 lines", || {
        (written.load(Ordering::SeqCst) >= 1_500).then_some(())
    });
    Daemon(child)
}

#[test]
fn sigterm_completes_with_a_stdout_nobody_reads() {
    let dir = ScratchDir::new("shutdown-stdout");
    let daemon = stalled_daemon(&dir, 300);
    let status = daemon.terminate();
    assert!(status.code().is_some(), "ended by a signal: {status}");
}

#[test]
fn a_second_sigterm_exits_at_once() {
    let dir = ScratchDir::new("shutdown-second");
    // Draining could take ten minutes: only the second signal ends it sooner.
    let mut daemon = stalled_daemon(&dir, 600_000);
    daemon.signal("TERM");
    let status = wait_until("the daemon exits on a second SIGTERM", || {
        // Repeated: a signal that arrives before the first one is handled is not a second.
        let _ = Command::new("kill")
            .args(["-TERM", &daemon.0.id().to_string()])
            .status();
        std::thread::sleep(std::time::Duration::from_millis(100));
        daemon.0.try_wait().expect("wait")
    });
    assert_eq!(status.code(), Some(130), "{status}");
}
