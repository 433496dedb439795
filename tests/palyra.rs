//! The `palyra` component end to end: `patchbay run` on a pipeline (file of control
//! signals → `palyra` output → `agent.inbound` → `file` output) against a stand-in Palyra
//! daemon speaking the realtime WebSocket and the ACP command route (see
//! `patchbay_testkit::palyra_e2e` for what is checked: exact envelopes,
//! a retried command keeping its idempotency key, a reconnect repeating no signal).

use patchbay_testkit::palyra_e2e;

use std::process::Stdio;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn palyra_realtime_resume_and_acp_commands() {
    let (fake, port) = palyra_e2e::start_fake().await;
    let dir = palyra_e2e::temp_dir("bin");
    let (config, out) = palyra_e2e::write_pipeline(&dir, port);

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .arg("run")
        .arg(&config)
        .env("PATCHBAY_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("patchbay starts");

    let exited = tokio::select! {
        () = palyra_e2e::wait_complete(&out) => None,
        status = child.wait() => Some(status),
    };
    if let Some(status) = exited {
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            use tokio::io::AsyncReadExt;
            let _ = pipe.read_to_string(&mut stderr).await;
        }
        panic!("patchbay exited early ({status:?}): {stderr}");
    }
    if let Some(pid) = child.id() {
        // SAFETY: signals the process this test started, by its pid.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
    }
    let _ = tokio::time::timeout(palyra_e2e::GUARD, child.wait()).await;
    palyra_e2e::check(&fake, &out);
    let _ = std::fs::remove_dir_all(&dir);
}
