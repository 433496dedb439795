//! `patchbay run` as a daemon: where its configs come from, its exit statuses, one daemon
//! per instance, and paths relative to the config that names them.

use std::path::Path;
use std::process::{Command, Stdio};

use patchbay_testkit::process::Killed;
use patchbay_testkit::scratch::ScratchDir;

fn patchbay() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_patchbay"));
    command
        .env("PATCHBAY_LOG", "warn")
        .env_remove("PATCHBAY_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Waits (bounded) until `path` holds at least `n` lines.
fn wait_for_lines(path: &Path, n: usize) -> Vec<String> {
    for _ in 0..600 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= n {
            return lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("{} never had {n} lines", path.display());
}

#[test]
fn a_bad_config_exits_78_with_its_location() {
    let dir = ScratchDir::new("daemon-bad");
    let config = dir.join("p.toml");
    std::fs::write(&config, "[sources.a]\ntype = \"stdn\"\n").unwrap();
    let out = patchbay()
        .args(["run", "-c"])
        .arg(&config)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(stderr.contains("p.toml:2:8"), "{stderr}");
    assert!(stderr.contains("did you mean `stdin`"), "{stderr}");
}

#[test]
fn paths_are_relative_to_the_config_and_the_config_comes_from_the_environment() {
    let dir = ScratchDir::new("daemon-relative");
    std::fs::write(
        dir.join("in.jsonl"),
        "{\"type\":\"text_delta\",\"payload\":{\"agentId\":\"a\",\"content\":\"hi\"}}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("p.toml"),
        "[sources.in]\ntype = \"file\"\npath = \"in.jsonl\"\n\n[outputs.out]\ntype = \"file\"\ninputs = [\"in\"]\npath = \"out.jsonl\"\n",
    )
    .unwrap();
    // Run from elsewhere, the config named by PATCHBAY_CONFIG only.
    let elsewhere = ScratchDir::new("daemon-cwd");
    let out = patchbay()
        .arg("run")
        .env("PATCHBAY_CONFIG", dir.join("p.toml"))
        .current_dir(elsewhere.path())
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = std::fs::read_to_string(dir.join("out.jsonl")).expect("out.jsonl beside p.toml");
    assert!(written.contains("\"content\":\"hi\""), "{written}");
    assert!(!elsewhere.join("out.jsonl").exists());
}

#[test]
fn a_second_daemon_of_one_instance_exits_69_naming_the_first() {
    let dir = ScratchDir::new("daemon-instance");
    let out_path = dir.join("out.jsonl");
    let config = dir.join("p.toml");
    // A sidecar on a free port keeps the first daemon running; it writes one signal on
    // start so that the test knows it is up.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    std::fs::write(dir.join("in.jsonl"), "{\"type\":\"up\",\"payload\":{}}\n").unwrap();
    std::fs::write(
        &config,
        format!(
            "[sources.in]\ntype = \"file\"\npath = \"in.jsonl\"\n\n[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"in\"]\nlisten = \"127.0.0.1:{port}\"\n\n[outputs.out]\ntype = \"file\"\ninputs = [\"in\"]\npath = \"{}\"\n",
            out_path.display()
        ),
    )
    .unwrap();
    let runtime_dir = ScratchDir::new("daemon-runtime");
    let first = Killed(
        patchbay()
            .arg("run")
            .arg(&config)
            .env("XDG_RUNTIME_DIR", runtime_dir.path())
            .spawn()
            .expect("first daemon"),
    );
    wait_for_lines(&out_path, 1);
    let second = patchbay()
        .args(["run", "-c"])
        .arg(&config)
        .env("XDG_RUNTIME_DIR", runtime_dir.path())
        .output()
        .expect("second daemon");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(69), "{stderr}");
    assert!(
        stderr.contains(&format!("as pid {}", first.0.id())),
        "{stderr}"
    );
    drop(first);
}

#[test]
fn service_install_writes_a_user_unit_that_uninstall_removes() {
    let home = ScratchDir::new("daemon-service");
    let config = home.join("main.toml");
    std::fs::write(&config, "").unwrap();
    // No service manager on PATH: the unit is written and the manual command printed.
    let empty_path = ScratchDir::new("daemon-no-path");
    let service = |args: &[&str]| {
        patchbay()
            .arg("service")
            .args(args)
            .args(["--manager", "systemd"])
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("PATH", empty_path.path())
            .output()
            .expect("runs")
    };
    let printed = service(&["install", "--print", "-c", config.to_str().unwrap()]);
    let unit_text = String::from_utf8_lossy(&printed.stdout).into_owned();
    assert!(unit_text.contains("Restart=on-failure"), "{unit_text}");
    assert!(
        unit_text.contains(&format!("run -c {}", config.display())),
        "{unit_text}"
    );
    let unit = home.join("config/systemd/user/patchbay.service");
    assert!(!unit.exists(), "--print writes nothing");

    let installed = service(&["install", "-c", config.to_str().unwrap()]);
    assert!(installed.status.success());
    assert_eq!(std::fs::read_to_string(&unit).unwrap(), unit_text);
    let stderr = String::from_utf8_lossy(&installed.stderr);
    assert!(
        stderr.contains("systemctl --user enable --now patchbay.service"),
        "{stderr}"
    );

    let status = service(&["status"]);
    assert_eq!(
        status.status.code(),
        Some(3),
        "not running: no manager here"
    );
    assert!(String::from_utf8_lossy(&status.stdout).contains("installed:"));

    assert!(service(&["uninstall"]).status.success());
    assert!(!unit.exists());
    assert_eq!(service(&["status"]).status.code(), Some(3));
}

#[test]
fn metrics_pass_promtool() {
    let dir = ScratchDir::new("daemon-metrics");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let config = dir.join("p.toml");
    std::fs::write(
        &config,
        format!(
            "[sources.in]\ntype = \"stdin\"\n\n[filters.keep]\ntype = \"when\"\ninputs = [\"in\", \"ui.inbound\"]\nwhen = {{ type = \"keep\" }}\n\n[outputs.ui]\ntype = \"sidecar\"\ninputs = [\"keep\"]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"s3cret\"\n"
        ),
    )
    .unwrap();
    let _daemon = Killed(patchbay().arg("run").arg(&config).spawn().expect("runs"));
    let get = |path: &str, extra: &str| -> Option<String> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}Connection: close\r\n\r\n"
        )
        .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        Some(response)
    };
    let mut up = false;
    for _ in 0..600 {
        if get("/health", "Authorization: Bearer s3cret\r\n").is_some() {
            up = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(up, "the sidecar never answered");
    // A request without the token is refused, and the refusal counted by its reason.
    let refused = get("/metrics", "").unwrap();
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    let metrics = get("/metrics", "Authorization: Bearer s3cret\r\n").unwrap();
    let metrics = metrics.split_once("\r\n\r\n").unwrap().1.to_owned();
    assert!(metrics.contains("# HELP patchbay_clients "), "{metrics}");
    assert!(
        metrics.contains("patchbay_http_refused_total{component=\"ui\",reason=\"unauthorized\"} 1"),
        "{metrics}"
    );
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (`bash scripts/test` installs Debian's prometheus)");
    use std::io::Write;
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {}{}\n{metrics}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
