//! The daemon around a running graph: signals (stop, reload), the config watcher,
//! readiness for the service manager, restarts of panicked components, exit statuses.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use patchbay_graph::runtime::{Controls, Notice, Reload, RunReport};
use patchbay_graph::{Graph, SourceText};
use tokio::sync::{mpsc, oneshot};

use crate::commands::{EXIT_CONFIG, EXIT_UNAVAILABLE};
use crate::pipeline::registry;

/// How often `run --watch` looks at the config files, and how long they must stay
/// unchanged before a reload (an editor writes a file in several steps).
const WATCH_POLL: Duration = Duration::from_millis(500);

/// The first wait before a panicked component is rebuilt; doubled for each panic of the
/// same component, up to [`RESTART_MAX`].
const RESTART_FIRST: Duration = Duration::from_secs(1);
const RESTART_MAX: Duration = Duration::from_secs(60);
/// A component that ran this long since its last panic starts its backoff over.
const RESTART_RESET: Duration = Duration::from_secs(300);

/// Where a reload reads its config from.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    /// Files and folders on disk, read again at each reload.
    Paths(Vec<PathBuf>),
    /// A config that is not on disk (the default pipeline): a reload finds it unchanged.
    Fixed(Vec<SourceText>),
}

impl ConfigSource {
    /// Reads and compiles the config; the errors as one text when it does not.
    pub fn load(&self) -> Result<Graph, String> {
        let files = match self {
            ConfigSource::Paths(paths) => match patchbay_graph::read_config_paths(paths) {
                Ok(files) if files.is_empty() => {
                    return Err(format!("no *.toml config in {paths:?}"));
                }
                Ok(files) => files,
                Err(e) => return Err(e.to_string()),
            },
            ConfigSource::Fixed(files) => files.clone(),
        };
        patchbay_graph::compile(&files, &registry()).map_err(|errors| {
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    /// What a watcher compares: each config file's path, length and modification time.
    fn stamp(&self) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>)> {
        let ConfigSource::Paths(paths) = self else {
            return Vec::new();
        };
        let mut files = Vec::new();
        for path in paths {
            match std::fs::read_dir(path) {
                Ok(entries) => files.extend(
                    entries
                        .filter_map(Result::ok)
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "toml")),
                ),
                Err(_) => files.push(path.clone()),
            }
        }
        files.sort();
        files
            .into_iter()
            .map(|p| {
                let meta = std::fs::metadata(&p).ok();
                let len = meta.as_ref().map_or(u64::MAX, |m| m.len());
                let modified = meta.and_then(|m| m.modified().ok());
                (p, len, modified)
            })
            .collect()
    }
}

/// A daemon to run.
#[derive(Debug)]
pub struct Daemon {
    /// Its config, compiled.
    pub graph: Graph,
    /// Where reloads read the config.
    pub source: ConfigSource,
    /// Reload when the config files change.
    pub watch: bool,
    /// Where the outcome of each reload is written for `patchbay reload`.
    pub reload_status: PathBuf,
}

/// Runs the daemon until SIGINT/SIGTERM (or the end of a finite graph); the exit status
/// says how it ended.
pub fn serve(daemon: Daemon) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // While a sidecar connection is hot, the workers yield the CPU to it.
        .on_thread_start(patchbay_server::on_thread_start)
        .on_thread_unpark(patchbay_server::on_worker_unpark)
        .build()?;
    // On a worker thread, with the tasks it trades signals with: handing a batch to the
    // engine is then a task wake-up (`block_on`'s own thread would be one thread more than
    // the cores, woken through the kernel for every batch).
    let report = match runtime.block_on(async { tokio::spawn(supervise(daemon)).await }) {
        Ok(report) => report,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(e) => anyhow::bail!("the graph's task ended: {e}"),
        },
    };
    // Sources may be blocked in reads (stdin) or writes (a stdout nobody reads) that
    // cannot be cancelled: do not wait for them.
    runtime.shutdown_background();
    Ok(exit_status(&report))
}

/// The exit status of a run: unavailable when a component could not start, failure
/// when signals may have been lost, success otherwise.
fn exit_status(report: &RunReport) -> ExitCode {
    if !report.drained {
        tracing::warn!("shutdown timeout reached before every output drained");
    }
    if let Some(failure) = &report.start_failure {
        eprintln!("patchbay: could not start {failure}");
        return ExitCode::from(EXIT_UNAVAILABLE);
    }
    if !report.failures.is_empty() {
        for f in &report.failures {
            eprintln!("patchbay: {f}");
        }
        eprintln!("patchbay: signals may have been lost (see above)");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

async fn supervise(daemon: Daemon) -> RunReport {
    let (reload_tx, reloads) = mpsc::channel::<Reload>(4);
    let (notices, mut notice_rx) = mpsc::unbounded_channel();
    let controls = Controls {
        reloads: Some(reloads),
        notices: Some(notices),
    };
    let stop = async {
        stop_signal().await;
        notify_service("STOPPING=1");
        // The graph drains for at most `shutdown_timeout_ms`; a second signal exits at once.
        tokio::spawn(async {
            stop_signal().await;
            tracing::warn!("second stop signal: exiting without draining");
            std::process::exit(130);
        });
    };
    let (trigger_tx, mut triggers) = mpsc::unbounded_channel::<Trigger>();
    spawn_reload_signal(trigger_tx.clone());
    if daemon.watch {
        spawn_watcher(daemon.source.clone(), trigger_tx.clone());
    }
    let source = daemon.source.clone();
    let status_file = daemon.reload_status.clone();
    let manager = async move {
        let mut restarts: HashMap<String, (u32, Instant)> = HashMap::new();
        loop {
            tokio::select! {
                Some(notice) = notice_rx.recv() => match notice {
                    Notice::Ready => {
                        tracing::info!("patchbay is ready");
                        notify_service("READY=1");
                    }
                    Notice::StartFailed(_) => {}
                    Notice::Panicked(name) => {
                        let wait = restart_backoff(&mut restarts, &name);
                        tracing::warn!("{name} panicked: rebuilding it in {} ms", wait.as_millis());
                        let tx = trigger_tx.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(wait).await;
                            let _ = tx.send(Trigger::Restart(name));
                        });
                    }
                },
                Some(trigger) = triggers.recv() => {
                    let why = match &trigger {
                        Trigger::Signal => "SIGHUP".to_owned(),
                        Trigger::Changed => "config changed".to_owned(),
                        Trigger::Restart(name) => format!("restarting {name}"),
                    };
                    tracing::info!("reloading the config ({why})");
                    notify_service("RELOADING=1");
                    let graph = source.load();
                    let (reply, outcome) = oneshot::channel();
                    if reload_tx.send(Reload { graph, reply: Some(reply) }).await.is_err() {
                        return;
                    }
                    let outcome = outcome.await.unwrap_or_else(|_| Err("the graph stopped".into()));
                    notify_service("READY=1");
                    write_reload_status(&status_file, &outcome);
                }
                else => return,
            }
        }
    };
    let manager = tokio::spawn(manager);
    let report = patchbay_graph::runtime::run_with(daemon.graph, stop, controls).await;
    manager.abort();
    report
}

/// Why the daemon reloads.
#[derive(Debug)]
enum Trigger {
    /// SIGHUP (`patchbay reload`, `systemctl reload`).
    Signal,
    /// `--watch` saw the files change.
    Changed,
    /// A panicked component's backoff is over.
    Restart(String),
}

fn restart_backoff(restarts: &mut HashMap<String, (u32, Instant)>, name: &str) -> Duration {
    let now = Instant::now();
    let entry = restarts.entry(name.to_owned()).or_insert((0, now));
    if now.duration_since(entry.1) > RESTART_RESET {
        entry.0 = 0;
    }
    entry.1 = now;
    let wait = RESTART_FIRST
        .saturating_mul(1 << entry.0.min(16))
        .min(RESTART_MAX);
    entry.0 += 1;
    wait
}

fn spawn_reload_signal(triggers: mpsc::UnboundedSender<Trigger>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(mut hup) => {
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        if triggers.send(Trigger::Signal).is_err() {
                            return;
                        }
                    }
                });
            }
            Err(e) => tracing::warn!("cannot listen for SIGHUP (reload): {e}"),
        }
    }
    #[cfg(not(unix))]
    let _ = triggers;
}

/// Polls the config files; a change that stays for one more poll is a reload.
fn spawn_watcher(source: ConfigSource, triggers: mpsc::UnboundedSender<Trigger>) {
    tokio::spawn(async move {
        let mut seen = source.stamp();
        let mut changed: Option<Vec<_>> = None;
        loop {
            tokio::time::sleep(WATCH_POLL).await;
            let now = source.stamp();
            match changed.take() {
                Some(previous) if previous == now => {
                    seen = now;
                    if triggers.send(Trigger::Changed).is_err() {
                        return;
                    }
                }
                _ if now != seen => changed = Some(now),
                _ => {}
            }
        }
    });
}

/// Writes how the last reload went, for `patchbay reload` to read.
fn write_reload_status(path: &Path, outcome: &Result<String, String>) {
    let (ok, text) = match outcome {
        Ok(summary) => (true, summary.as_str()),
        Err(errors) => (false, errors.as_str()),
    };
    let body = serde_json::json!({ "ok": ok, "outcome": text, "at_ms": patchbay_signal::now_ms() });
    if let Err(e) = std::fs::write(path, format!("{body}\n")) {
        tracing::warn!("cannot write {}: {e}", path.display());
    }
}

/// `patchbay reload`: asks the running daemon of an instance to reload, and says how it
/// went.
pub fn request_reload(lock_dir: &Path, instance: &str) -> anyhow::Result<ExitCode> {
    use crate::instance::{InstanceLock, LockError};
    let pid = match InstanceLock::acquire(lock_dir, instance) {
        Err(LockError::Taken { pid: Some(pid), .. }) => pid,
        Err(e) => anyhow::bail!("{e}"),
        Ok(_lock) => {
            eprintln!("patchbay: no daemon runs instance `{instance}`");
            return Ok(ExitCode::from(EXIT_UNAVAILABLE));
        }
    };
    let status = reload_status_path(lock_dir, instance);
    let before = std::fs::read_to_string(&status).ok();
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status();
    match sent {
        Ok(status) if status.success() => {}
        Ok(_) => anyhow::bail!("cannot send SIGHUP to pid {pid} (`kill -HUP {pid}` failed)"),
        Err(e) => anyhow::bail!("cannot run `kill -HUP {pid}`: {e}"),
    }
    // The daemon writes the outcome when it has applied (or refused) the config.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let now = std::fs::read_to_string(&status).ok();
        if now.is_some() && now != before {
            let value: serde_json::Value =
                serde_json::from_str(now.as_deref().unwrap_or("")).unwrap_or_default();
            let outcome = value["outcome"].as_str().unwrap_or("");
            return Ok(if value["ok"] == true {
                println!("reloaded: {outcome}");
                ExitCode::SUCCESS
            } else {
                eprintln!("{outcome}");
                eprintln!("patchbay: reload refused; the daemon runs the previous config");
                ExitCode::from(EXIT_CONFIG)
            });
        }
    }
    anyhow::bail!("sent SIGHUP to pid {pid}, but it did not report a reload within 30 s")
}

/// Where the daemon of `instance` writes the outcome of its reloads.
pub fn reload_status_path(lock_dir: &Path, instance: &str) -> PathBuf {
    lock_dir.join(format!("{}.reload", crate::instance::file_name(instance)))
}

/// Tells systemd (when it started us with `Type=notify`) how the service is.
fn notify_service(state: &str) {
    #[cfg(target_os = "linux")]
    {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixDatagram};
        let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
            return;
        };
        let bytes = path.as_encoded_bytes();
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => SocketAddr::from_abstract_name(name),
            None => SocketAddr::from_pathname(&path),
        };
        let sent = addr.and_then(|addr| {
            let socket = UnixDatagram::unbound()?;
            socket.send_to_addr(state.as_bytes(), &addr)
        });
        if let Err(e) = sent {
            tracing::warn!("cannot notify the service manager: {e}");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = state;
}

/// Resolves on SIGINT or SIGTERM.
pub async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_that_keeps_panicking_waits_longer_each_time_up_to_a_minute() {
        let mut restarts = HashMap::new();
        let waits: Vec<u64> = (0..9)
            .map(|_| restart_backoff(&mut restarts, "ui").as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        // Another component has its own count.
        assert_eq!(restart_backoff(&mut restarts, "claw").as_secs(), 1);
    }
}
