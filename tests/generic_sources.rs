//! The generic `websocket` and `sse` sources end to end with the real binary: signals
//! arrive, a dropped connection is retried (the `Recovering` state is read from the log:
//! "websocket ws: retrying in N s") and reconnected, SSE resumes with `Last-Event-ID`, and
//! a malformed frame becomes an error signal while the connection lives on. See
//! `patchbay_testkit::generic_e2e`.

use patchbay_testkit::generic_e2e;

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

/// `patchbay run CONFIG` as a child, its log collected.
#[derive(Default)]
struct Binary {
    child: Option<tokio::process::Child>,
    log: Arc<Mutex<Vec<String>>>,
}

impl generic_e2e::Patchbay for Binary {
    async fn start(&mut self, config: &Path) {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .arg("run")
            .arg(config)
            .env("PATCHBAY_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("patchbay starts");
        let stderr = child.stderr.take().expect("stderr");
        let log = self.log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                log.lock().expect("log").push(line);
            }
        });
        self.child = Some(child);
    }

    async fn wait_recovering(&mut self, name: &str) {
        let needle = format!("websocket {name}: retrying in ");
        let deadline = tokio::time::Instant::now() + generic_e2e::GUARD;
        loop {
            let log = self.log.lock().expect("log").clone();
            if log.iter().any(|l| l.contains(&needle)) {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("patchbay exited ({status}): {}", log.join("\n"));
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no `{needle}` in the log:\n{}",
                log.join("\n")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = child.id() {
            // SAFETY: signals the process this test started, by its pid.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
        }
        let _ = tokio::time::timeout(generic_e2e::GUARD, child.wait()).await;
        let log = self.log.lock().expect("log").clone();
        for line in &log {
            assert!(!line.contains("secret-token"), "a token was logged: {line}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_and_sse_sources() {
    generic_e2e::run_scenario(Binary::default(), "bin").await;
}
