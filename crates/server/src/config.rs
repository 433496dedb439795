//! The `sidecar` output's options and the checks made on them when the config loads.

use std::net::SocketAddr;

use patchbay_graph::config::{MAX_DURATION_MS, MAX_QUEUE};
use patchbay_graph::{Diagnostic, Options};
use patchbay_transport::listen::{
    Limits, ListenerOptions, Origins, check_ingest_timeout, default_ingest_timeout_ms,
};
use patchbay_transport::parse_flattened;
use serde::Deserialize;

/// The address a sidecar listens on when the config names none.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// `[outputs.NAME] type = "sidecar"`: the options as written in the config.
// Not `deny_unknown_fields`: it does not work through `flatten`; unknown keys are refused
// by `Settings::from_options`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct SidecarConfig {
    /// `IP:PORT` to listen on (`localhost:PORT` means `127.0.0.1:PORT`); port 0 picks a
    /// free port.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// How many signals are kept for `?since` replay, whatever their age (at most
    /// 1000000; 0: no replay). A lossless sidecar also keeps every signal of the last
    /// `resume_window_ms`.
    #[serde(default = "default_ring")]
    pub ring: usize,
    /// A lossless sidecar (`when_full = "block"`) keeps every signal it published for at
    /// least this long, in ms, besides the newest `ring`: a client that was cut off, or
    /// whose connection dropped, and that comes back with `?since=N` within this long of
    /// signal N+1's publication gets every signal after N, however many were published
    /// meanwhile. 0: the ring's count alone. Ignored by other sidecars. At most 86400000
    /// (one day).
    #[serde(default = "default_resume_window_ms")]
    pub resume_window_ms: u64,
    /// The most memory the ring may hold, in bytes (from 65536 to 68719476736, 64 GiB):
    /// its signals' text and about 110 bytes of bookkeeping each. Past it the oldest
    /// signals go even when `ring` or `resume_window_ms` would keep them: counted
    /// (`ring_evicted_early`) and logged, and a client that resumes from one of them is
    /// told in a `gap` frame.
    #[serde(default = "default_ring_max_bytes")]
    pub ring_max_bytes: usize,
    /// How many frames each client may have waiting. When a client's queue is full, its
    /// oldest frames are dropped (it gets a `lagged` notice); with `when_full = "block"`
    /// nothing is dropped: the client is cut off (close 1013, after the frames queued for
    /// it) and resumes with `?since=N` from the ring, told of any range the ring lost.
    /// From 1 to 1000000.
    #[serde(default = "default_client_queue")]
    pub client_queue: usize,
    /// Bearer token every endpoint requires, if set (`Authorization: Bearer …`, or
    /// `?token=` where a browser cannot set headers); `/health` answers without it, but
    /// then only with the overall status.
    #[serde(default)]
    pub token: Option<Secret>,
    /// Origins allowed on every endpoint (a browser sends `Origin`; a request from
    /// another origin is refused with 403). Absent: requests without `Origin`, and http(s)
    /// origins on localhost, 127.0.0.1 and `[::1]` (any port). Entries are exact origins
    /// (`https://app.example`), may end in `:*` for any port, or be `*` for any. A page the
    /// sidecar serves itself is always allowed.
    #[serde(default)]
    pub allowed_origins: Option<Vec<String>>,
    /// `allowed_hosts`, `header_timeout_ms`, `idle_timeout_ms`, `max_connections`: as
    /// every listener's.
    #[serde(flatten)]
    pub listener: ListenerOptions,
    /// Largest WebSocket message or POST body accepted, in bytes (at most 67108864, 64 MiB).
    #[serde(default = "default_max_frame")]
    pub max_frame: usize,
    /// How long ingest (`POST /signal`, frames a UI sends on `/ws`) waits for room when the
    /// graph is full before refusing the signal: `503` with `Retry-After` over HTTP, an
    /// error frame naming the refused `id`s over WebSocket. Refusals are counted. At most
    /// 86400000 (one day).
    #[serde(default = "default_ingest_timeout_ms")]
    pub ingest_timeout_ms: u64,
}

/// The largest `max_frame`: 64 MiB.
pub const MAX_FRAME_LIMIT: usize = 64 << 20;
/// The smallest `ring_max_bytes`: 64 KiB.
pub const MIN_RING_BYTES: usize = 64 << 10;
/// The largest `ring_max_bytes`: 64 GiB.
pub const MAX_RING_BYTES: usize = 64 << 30;

fn default_listen() -> String {
    DEFAULT_LISTEN.into()
}
fn default_ring() -> usize {
    10_000
}
fn default_resume_window_ms() -> u64 {
    60_000
}
fn default_ring_max_bytes() -> usize {
    64 << 20
}
fn default_client_queue() -> usize {
    1024
}
fn default_max_frame() -> usize {
    1 << 20
}
impl Default for SidecarConfig {
    fn default() -> Self {
        SidecarConfig {
            listen: default_listen(),
            ring: default_ring(),
            resume_window_ms: default_resume_window_ms(),
            ring_max_bytes: default_ring_max_bytes(),
            client_queue: default_client_queue(),
            token: None,
            allowed_origins: None,
            max_frame: default_max_frame(),
            ingest_timeout_ms: default_ingest_timeout_ms(),
            listener: ListenerOptions::default(),
        }
    }
}

pub use patchbay_graph::config::Secret;

/// Checked options: what the running sidecar uses.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The address to bind.
    pub listen: SocketAddr,
    /// Ring size.
    pub ring: usize,
    /// How long a lossless sidecar keeps every frame (`resume_window_ms`).
    pub resume_window: std::time::Duration,
    /// The most text the ring holds, in bytes.
    pub ring_max_bytes: usize,
    /// Per-client queue size (at least 1).
    pub client_queue: usize,
    /// The bearer token, if any.
    pub token: Option<Secret>,
    /// The origin allow-list; `None` is the localhost default.
    pub allowed_origins: Option<Vec<String>>,
    /// Host names answered besides the loopback ones; `None`: the default for `listen`.
    pub allowed_hosts: Option<Vec<String>>,
    /// Header and idle timeouts, connection cap.
    pub limits: Limits,
    /// Largest frame or body, in bytes.
    pub max_frame: usize,
    /// How long ingest waits for room in a full graph before refusing.
    pub ingest_timeout: std::time::Duration,
}

/// A sidecar option that cannot be used: which key, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}`: {message}")]
pub struct BadSetting {
    /// The offending key (`listen`, `token`, `allowed_origins`, …).
    pub key: &'static str,
    /// What is wrong, for the user.
    pub message: String,
}

impl BadSetting {
    fn new(key: &'static str, message: impl Into<String>) -> BadSetting {
        BadSetting {
            key,
            message: message.into(),
        }
    }
}

impl Settings {
    /// Parses and checks a sidecar's options (no I/O).
    pub fn from_options(options: &Options<'_>) -> Result<Settings, Diagnostic> {
        let config: SidecarConfig = parse_flattened(options)?;
        // Sizes are `usize`: as `u64` (lossless) they share one table with the durations.
        let size = |n: usize| n as u64;
        for (key, value, range) in [
            ("ring", size(config.ring), 0..=size(MAX_QUEUE)),
            (
                "client_queue",
                size(config.client_queue),
                1..=size(MAX_QUEUE),
            ),
            (
                "resume_window_ms",
                config.resume_window_ms,
                0..=MAX_DURATION_MS,
            ),
            (
                "ring_max_bytes",
                size(config.ring_max_bytes),
                size(MIN_RING_BYTES)..=size(MAX_RING_BYTES),
            ),
            (
                "max_frame",
                size(config.max_frame),
                1..=size(MAX_FRAME_LIMIT),
            ),
        ] {
            options.check_range(key, value, range)?;
        }
        check_ingest_timeout(options, config.ingest_timeout_ms)?;
        Settings::check(config).map_err(|e| options.error_at(e.key, e.message))
    }

    /// Checks parsed options; an error names the offending key and what is wrong.
    pub fn check(config: SidecarConfig) -> Result<Settings, BadSetting> {
        let listen = parse_listen(&config.listen).ok_or_else(|| {
            BadSetting::new(
                "listen",
                format!(
                    "`{}` is not an `IP:PORT` address (e.g. `127.0.0.1:7878`)",
                    config.listen
                ),
            )
        })?;
        if let Some(Secret(t)) = &config.token
            && t.trim().is_empty()
        {
            return Err(BadSetting::new("token", "the token must not be empty"));
        }
        if !listen.ip().is_loopback() && config.token.is_none() {
            return Err(BadSetting::new(
                "listen",
                format!(
                    "`{listen}` is not a loopback address: set a `token` so that only clients \
                     that know it can connect"
                ),
            ));
        }
        if config.client_queue == 0 {
            return Err(BadSetting::new("client_queue", "must be at least 1"));
        }
        if config.max_frame == 0 {
            return Err(BadSetting::new("max_frame", "must be at least 1 byte"));
        }
        if let Some(origins) = &config.allowed_origins {
            Origins::check_list(origins).map_err(|(i, message)| {
                BadSetting::new(
                    ORIGIN_KEYS.get(i).copied().unwrap_or("allowed_origins"),
                    message,
                )
            })?;
        }
        let limits = config
            .listener
            .check()
            .map_err(|(key, message)| BadSetting::new(key, message))?;
        Ok(Settings {
            listen,
            ring: config.ring,
            resume_window: std::time::Duration::from_millis(config.resume_window_ms),
            ring_max_bytes: config.ring_max_bytes,
            client_queue: config.client_queue,
            token: config.token,
            allowed_origins: config.allowed_origins,
            allowed_hosts: config.listener.allowed_hosts,
            max_frame: config.max_frame,
            ingest_timeout: std::time::Duration::from_millis(config.ingest_timeout_ms),
            limits,
        })
    }

    /// The origin rules.
    pub fn origins(&self) -> Origins {
        match &self.allowed_origins {
            None => Origins::Local,
            Some(list) => Origins::List(list.clone()),
        }
    }

    /// Whether a request with this `Origin` header (or none) may connect.
    pub fn origin_allowed(&self, origin: Option<&str>) -> bool {
        self.origins().allows(origin)
    }
}

/// Dotted keys for the first entries of `allowed_origins`, so errors point at the entry.
const ORIGIN_KEYS: [&str; 8] = [
    "allowed_origins.0",
    "allowed_origins.1",
    "allowed_origins.2",
    "allowed_origins.3",
    "allowed_origins.4",
    "allowed_origins.5",
    "allowed_origins.6",
    "allowed_origins.7",
];

pub use patchbay_transport::listen::parse_listen;

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(toml: &str) -> Result<Settings, BadSetting> {
        let config: SidecarConfig =
            Options::parse_snippet(toml).map_err(|e| BadSetting::new("parse", e.message))?;
        Settings::check(config)
    }

    #[test]
    fn defaults() {
        let s = settings("").unwrap();
        assert_eq!(s.listen, DEFAULT_LISTEN.parse().unwrap());
        assert_eq!(
            (s.ring, s.client_queue, s.max_frame),
            (10_000, 1024, 1 << 20)
        );
        assert_eq!(
            (s.resume_window.as_millis(), s.ring_max_bytes),
            (60_000, 64 << 20)
        );
        assert!(s.token.is_none());
        assert_eq!(s.limits, Limits::default());
        assert_eq!(s.limits.max_connections, 1024);
    }

    #[test]
    fn listener_bounds_are_range_checked_at_their_key() {
        for (text, col) in [
            ("header_timeout_ms = 0", 21),
            ("idle_timeout_ms = 86400001", 19),
            ("max_connections = 0", 19),
            ("resume_window_ms = 86400001", 20),
            ("ring_max_bytes = 65535", 18),
        ] {
            let err = Options::parse_snippet_with(&format!("ring = 1\n{text}"), |o| {
                Settings::from_options(o)
            })
            .unwrap_err();
            assert_eq!((err.line, err.col), (2, col), "{text}: {err}");
        }
        let s = settings("header_timeout_ms = 500\nidle_timeout_ms = 700\nmax_connections = 3")
            .unwrap();
        assert_eq!(s.limits.header_timeout.as_millis(), 500);
        assert_eq!(s.limits.idle_timeout.as_millis(), 700);
        assert_eq!(s.limits.max_connections, 3);
        assert_eq!(
            settings("allowed_hosts = [\"box.lan\", \"http://x\"]")
                .unwrap_err()
                .key,
            "allowed_hosts.1"
        );
    }

    #[test]
    fn public_listen_needs_a_token() {
        let BadSetting { key, message: msg } = settings("listen = \"0.0.0.0:7878\"").unwrap_err();
        assert_eq!(key, "listen");
        assert!(msg.contains("token"), "{msg}");
        assert!(settings("listen = \"0.0.0.0:7878\"\ntoken = \"s3cret\"").is_ok());
        assert!(settings("listen = \"[::1]:0\"").is_ok());
        assert!(settings("listen = \"localhost:9000\"").is_ok());
        assert_eq!(settings("listen = \"nowhere\"").unwrap_err().key, "listen");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let error = Options::parse_snippet_with("lisen = \"127.0.0.1:1\"", Settings::from_options)
            .expect_err("an unknown key");
        assert!(error.message.contains("did you mean `listen`"), "{error:?}");
    }

    #[test]
    fn token_is_not_in_debug_output() {
        let s = settings("token = \"s3cret\"").unwrap();
        assert!(!format!("{s:?}").contains("s3cret"));
    }

    #[test]
    fn default_origins() {
        // The rules themselves are `Origins::Local`'s (tested in patchbay-transport).
        let s = settings("").unwrap();
        assert!(s.origin_allowed(None));
        assert!(s.origin_allowed(Some("http://localhost:3000")));
        assert!(!s.origin_allowed(Some("https://evil.example")));
    }

    #[test]
    fn configured_origins() {
        let s = settings("allowed_origins = [\"https://app.example\", \"http://localhost:*\"]")
            .unwrap();
        assert!(s.origin_allowed(Some("https://app.example")));
        assert!(s.origin_allowed(Some("https://app.example:443")));
        assert!(!s.origin_allowed(Some("https://app.example:444")));
        assert!(s.origin_allowed(Some("http://localhost:5173")));
        assert!(!s.origin_allowed(Some("http://127.0.0.1:5173")));
        let any = settings("allowed_origins = [\"*\"]").unwrap();
        assert!(any.origin_allowed(Some("null")));
        assert_eq!(
            settings("allowed_origins = [\"https://ok\", \"not an origin\"]")
                .unwrap_err()
                .key,
            "allowed_origins.1"
        );
    }
}
