//! The LLM tap proxy end to end with the real binary: `patchbay run` on a pipeline of four
//! proxies (`openai`/`anthropic` × replay upstream / llmock) → `file` output; the official
//! `openai` and `anthropic` Python SDKs call each upstream directly and through the proxy
//! and must get the same; faults (429, truncated and cut streams, latency) reach the SDK
//! unchanged and become `error` signals; a hang-up cancels the upstream request. Needs
//! `tests/support/llm/setup.sh` (run by the test). See `patchbay_testkit::llm_proxy_e2e`.

use patchbay_testkit::llm_proxy_e2e as proxy_e2e;

use std::path::Path;
use std::process::Stdio;

/// `patchbay run CONFIG` as a child process.
#[derive(Default)]
struct Binary {
    child: Option<tokio::process::Child>,
}

impl proxy_e2e::Patchbay for Binary {
    async fn start(&mut self, config: &Path) {
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .arg("run")
            .arg(config)
            .env("PATCHBAY_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("patchbay starts");
        self.child = Some(child);
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
        let status = tokio::time::timeout(proxy_e2e::GUARD, child.wait())
            .await
            .expect("patchbay stops on SIGTERM")
            .expect("wait");
        assert!(status.success(), "patchbay exited with {status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdks_through_the_proxy() {
    proxy_e2e::run_scenario(Binary::default(), "bin").await;
}
