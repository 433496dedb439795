//! A real `nats-server` on loopback, for the tests of the NATS adapter and of patchbay
//! processes talking through one.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::process::{Killed, http, wait_until};
use crate::scratch::ScratchDir;

/// A running `nats-server`, killed when dropped.
#[derive(Debug)]
pub struct NatsServer {
    _process: Killed,
    /// Where clients connect: `nats://127.0.0.1:<port>`.
    pub url: String,
    /// Its HTTP monitoring port (`/connz`, …).
    pub monitor: u16,
    /// Holds the server's ports file; removed after the process (fields drop in order).
    _dir: ScratchDir,
}

impl NatsServer {
    /// The installed `nats-server` (`bash scripts/test` installs the Debian package).
    pub fn binary() -> &'static str {
        ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("nats-server is installed (`bash scripts/test` installs the Debian package)")
    }

    /// Starts `nats-server` with these arguments (a config file, credentials, JetStream…)
    /// on loopback, and waits until it listens. The server picks its own client and
    /// monitoring ports and writes them to a ports file, which is read here: a port found
    /// free beforehand can be taken by a test running beside this one before the server
    /// binds it, and the test would then talk to another test's server.
    pub fn start(args: &[&str]) -> NatsServer {
        let dir = ScratchDir::new("nats-server");
        let process = Killed(
            Command::new(Self::binary())
                .args(args)
                // After the caller's arguments: these win over a config file's `listen`.
                .args([
                    "-a",
                    "127.0.0.1",
                    "-p",
                    "-1",
                    "-m",
                    "-1",
                    "--ports_file_dir",
                ])
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("nats-server starts"),
        );
        let ports_file = dir.join(format!("nats-server_{}.ports", process.0.id()));
        // Read again until whole: the file may be caught half written.
        let ports = wait_until("nats-server's ports file", || {
            std::fs::read_to_string(&ports_file)
                .ok()
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        });
        let url = ports["nats"][0].as_str().expect("a client URL").to_owned();
        let monitor = ports["monitoring"][0]
            .as_str()
            .and_then(|u| u.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .expect("a monitoring port");
        NatsServer {
            _process: process,
            url,
            monitor,
            _dir: dir,
        }
    }

    /// The subscriptions the server's clients hold (`/connz`; not `/subsz`, which counts
    /// the server's own too): a core NATS subscriber gets only what is published after
    /// it subscribed. 0 when the monitor does not answer.
    pub fn subscriptions(&self) -> u64 {
        http(
            SocketAddr::from(([127, 0, 0, 1], self.monitor)),
            "GET",
            "/connz",
            &[],
            b"",
        )
        .ok()
        .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
        .and_then(|v| {
            v["connections"]
                .as_array()
                .map(|cs| cs.iter().filter_map(|c| c["subscriptions"].as_u64()).sum())
        })
        .unwrap_or(0)
    }
}
