//! The daemon reloading its config by diff (`patchbay reload`, SIGHUP, `run --watch`)
//! while a UI stays connected, and its start-up failures.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use patchbay_testkit::process::{Daemon, free_port, http, wait_until};
use patchbay_testkit::scratch::ScratchDir;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

fn patchbay(runtime_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_patchbay"));
    command
        .env("PATCHBAY_LOG", "warn")
        .env_remove("PATCHBAY_CONFIG")
        .env("XDG_RUNTIME_DIR", runtime_dir)
        .stdin(Stdio::null());
    command
}

/// A sidecar fed by its own POSTs through a `when` filter, plus `extra`.
fn config(port: u16, keep: &str, extra: &str) -> String {
    format!(
        "[filters.keep]\ntype = \"when\"\ninputs = [\"ui.inbound\"]\nwhen = {{ type = \"{keep}\" }}\n\n[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"keep\"]\nlisten = \"127.0.0.1:{port}\"\n{extra}"
    )
}

fn post(addr: SocketAddr, kind: &str) {
    let body = format!("{{\"type\":\"{kind}\",\"payload\":{{}}}}");
    let (status, text) = http(addr, "POST", "/signal", &[], body.as_bytes()).expect("POST");
    assert_eq!(status, 200, "{text}");
}

fn metric(addr: SocketAddr, name: &str) -> Option<f64> {
    let (_, body) = http(addr, "GET", "/metrics", &[], b"").ok()?;
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
}

async fn next_frame<S>(ws: &mut S) -> Value
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .expect("a frame within the guard time")
            .expect("the connection stays open")
            .expect("a frame");
        if let Message::Text(t) = msg {
            return serde_json::from_str(&t).expect("JSON");
        }
    }
}

fn reload(runtime_dir: &Path, config: &Path) -> std::process::Output {
    patchbay(runtime_dir)
        .arg("reload")
        .arg(config)
        .output()
        .expect("patchbay reload runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_ui_connected_and_loses_nothing() {
    let dir = ScratchDir::new("reload");
    let runtime = ScratchDir::new("reload-runtime");
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let path = dir.join("p.toml");
    std::fs::write(&path, config(port, "keep", "")).unwrap();
    let daemon = Daemon(
        patchbay(runtime.path())
            .arg("run")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("runs"),
    );
    wait_until("the sidecar answers", || {
        http(addr, "GET", "/health", &[], b"").ok()
    });
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .expect("ws");
    let mut seq = 0;
    let mut expect = async |ws: &mut _, kind: &str| {
        let frame = next_frame(ws).await;
        seq += 1;
        assert_eq!(frame["type"], kind, "{frame}");
        assert_eq!(frame["metadata"]["seq"], seq, "no gap, no repeat: {frame}");
    };
    post(addr, "keep");
    expect(&mut ws, "keep").await;

    // An output added: the sidecar and the filter are kept.
    let log = dir.join("log.jsonl");
    let with_log = format!(
        "\n[outputs.log]\ntype = \"file\"\ninputs = [\"keep\"]\npath = \"{}\"\n",
        log.display()
    );
    std::fs::write(&path, config(port, "keep", &with_log)).unwrap();
    let out = reload(runtime.path(), &path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim(),
        "reloaded: 2 kept, 0 rebuilt, 1 added, 0 removed"
    );
    post(addr, "keep");
    post(addr, "drop");
    post(addr, "keep");
    expect(&mut ws, "keep").await;
    expect(&mut ws, "keep").await;
    wait_until("the new output writes", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        (text.lines().count() == 2).then_some(())
    });

    // A broken config is refused with its place; the daemon goes on with the old one.
    std::fs::write(
        &path,
        config(port, "keep", "\n[outputs.log]\ntype = \"fiel\"\n"),
    )
    .unwrap();
    let out = reload(runtime.path(), &path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(stderr.contains("p.toml:12:8"), "{stderr}");
    assert!(stderr.contains("did you mean `file`"), "{stderr}");
    assert_eq!(metric(addr, "patchbay_config_reload_ok"), Some(0.0));
    post(addr, "keep");
    expect(&mut ws, "keep").await;

    // SIGHUP with a changed filter: it is rebuilt, the UI stays.
    std::fs::write(&path, config(port, "drop", "")).unwrap();
    daemon.signal("HUP");
    wait_until("the third generation runs", || {
        (metric(addr, "patchbay_config_generation")? == 3.0).then_some(())
    });
    assert_eq!(metric(addr, "patchbay_config_reload_ok"), Some(1.0));
    post(addr, "keep");
    post(addr, "drop");
    expect(&mut ws, "drop").await;
    let status = daemon.terminate();
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_watch_applies_a_changed_file() {
    let dir = ScratchDir::new("reload-watch");
    let runtime = ScratchDir::new("reload-watch-runtime");
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let path = dir.join("p.toml");
    std::fs::write(&path, config(port, "a", "")).unwrap();
    let _daemon = Daemon(
        patchbay(runtime.path())
            .args(["run", "--watch"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("runs"),
    );
    wait_until("the sidecar answers", || {
        http(addr, "GET", "/health", &[], b"").ok()
    });
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .expect("ws");
    std::fs::write(&path, config(port, "b", "")).unwrap();
    wait_until("the watcher reloads", || {
        (metric(addr, "patchbay_config_generation")? == 2.0).then_some(())
    });
    post(addr, "a");
    post(addr, "b");
    let frame = next_frame(&mut ws).await;
    assert_eq!(frame["type"], "b", "{frame}");
}

#[test]
fn a_port_in_use_or_a_missing_file_exits_69_in_one_line() {
    let dir = ScratchDir::new("reload-unavailable");
    let runtime = ScratchDir::new("reload-unavailable-runtime");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let path = dir.join("p.toml");
    std::fs::write(&path, config(port, "keep", "")).unwrap();
    let out = patchbay(runtime.path())
        .arg("run")
        .arg(&path)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "could not start ui: cannot listen on 127.0.0.1:{port}"
        )),
        "{stderr}"
    );

    let missing = dir.join("missing.toml");
    std::fs::write(
        &missing,
        "[sources.in]\ntype = \"file\"\npath = \"nowhere.jsonl\"\n\n[outputs.out]\ntype = \"stdout\"\ninputs = [\"in\"]\n",
    )
    .unwrap();
    let out = patchbay(runtime.path())
        .arg("run")
        .arg(&missing)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("could not start in: "), "{stderr}");
    assert!(stderr.contains("nowhere.jsonl"), "{stderr}");
}

#[test]
fn reload_without_a_daemon_says_so() {
    let dir = ScratchDir::new("reload-none");
    let runtime = ScratchDir::new("reload-none-runtime");
    let path = dir.join("p.toml");
    std::fs::write(&path, config(free_port(), "keep", "")).unwrap();
    let out = reload(runtime.path(), &path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("no daemon runs instance"), "{stderr}");
}

#[test]
fn systemd_hears_ready_reloading_and_stopping() {
    use std::os::unix::net::UnixDatagram;
    let dir = ScratchDir::new("reload-notify");
    let runtime = ScratchDir::new("reload-notify-runtime");
    let socket_path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let port = free_port();
    let path = dir.join("p.toml");
    std::fs::write(&path, config(port, "keep", "")).unwrap();
    let daemon = Daemon(
        patchbay(runtime.path())
            .arg("run")
            .arg(&path)
            .env("NOTIFY_SOCKET", &socket_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("runs"),
    );
    let next = || {
        let mut buf = [0u8; 256];
        let n = socket
            .recv(&mut buf)
            .expect("a notification within the guard time");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    // READY=1 only once the sidecar listens.
    assert_eq!(next(), "READY=1");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    assert!(http(addr, "GET", "/health", &[], b"").is_ok());
    daemon.signal("HUP");
    assert_eq!(next(), "RELOADING=1");
    assert_eq!(next(), "READY=1");
    let status = daemon.terminate();
    assert_eq!(next(), "STOPPING=1");
    assert!(status.success(), "{status}");
}
