//! The `sidecar` output's options and the checks made on them when the config loads.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use patchbay_graph::config::{MAX_DURATION_MS, MAX_QUEUE};
use patchbay_graph::{Diagnostic, Options};
use serde::Deserialize;

/// The address a sidecar listens on when the config names none.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// `[outputs.NAME] type = "sidecar"`: the options as written in the config.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SidecarConfig {
    /// `IP:PORT` to listen on (`localhost:PORT` means `127.0.0.1:PORT`); port 0 picks a
    /// free port.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// How many signals are kept for `?since` replay (at most 1000000).
    #[serde(default = "default_ring")]
    pub ring: usize,
    /// How many frames each client may have waiting. When a client's queue is full, its
    /// oldest frames are dropped (it gets a `lagged` notice); with `when_full = "block"`
    /// nothing is dropped: the client is cut off (close 1013, after the frames queued for
    /// it) and resumes with `?since=N` from the ring, told of any range the ring lost.
    /// From 1 to 1000000.
    #[serde(default = "default_client_queue")]
    pub client_queue: usize,
    /// Bearer token every endpoint but `/health` requires, if set.
    #[serde(default)]
    pub token: Option<Secret>,
    /// Origins allowed to open a WebSocket or POST. Absent: requests without `Origin`,
    /// and http(s) origins on localhost, 127.0.0.1 and `[::1]` (any port). Entries are exact
    /// origins (`https://app.example`), may end in `:*` for any port, or be `*` for any.
    #[serde(default)]
    pub allowed_origins: Option<Vec<String>>,
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

fn default_listen() -> String {
    DEFAULT_LISTEN.into()
}
fn default_ring() -> usize {
    10_000
}
fn default_client_queue() -> usize {
    1024
}
fn default_max_frame() -> usize {
    1 << 20
}
fn default_ingest_timeout_ms() -> u64 {
    5000
}

impl Default for SidecarConfig {
    fn default() -> Self {
        SidecarConfig {
            listen: default_listen(),
            ring: default_ring(),
            client_queue: default_client_queue(),
            token: None,
            allowed_origins: None,
            max_frame: default_max_frame(),
            ingest_timeout_ms: default_ingest_timeout_ms(),
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
    /// Per-client queue size (at least 1).
    pub client_queue: usize,
    /// The bearer token, if any.
    pub token: Option<Secret>,
    /// The origin allow-list; `None` is the localhost default.
    pub allowed_origins: Option<Vec<String>>,
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
        let config: SidecarConfig = options.parse()?;
        options.check_range("ring", config.ring, 0..=MAX_QUEUE)?;
        options.check_range("client_queue", config.client_queue, 1..=MAX_QUEUE)?;
        options.check_range("max_frame", config.max_frame, 1..=MAX_FRAME_LIMIT)?;
        options.check_range(
            "ingest_timeout_ms",
            config.ingest_timeout_ms,
            0..=MAX_DURATION_MS,
        )?;
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
            for (i, o) in origins.iter().enumerate() {
                if o != "*" && parse_origin(o.strip_suffix(":*").unwrap_or(o)).is_none() {
                    return Err(BadSetting::new(
                        ORIGIN_KEYS.get(i).copied().unwrap_or("allowed_origins"),
                        format!(
                            "`{o}` is not an origin (`http://host[:port]`, `https://host:*` or `*`)"
                        ),
                    ));
                }
            }
        }
        Ok(Settings {
            listen,
            ring: config.ring,
            client_queue: config.client_queue,
            token: config.token,
            allowed_origins: config.allowed_origins,
            max_frame: config.max_frame,
            ingest_timeout: std::time::Duration::from_millis(config.ingest_timeout_ms),
        })
    }

    /// Whether a request with this `Origin` header (or none) may connect.
    pub fn origin_allowed(&self, origin: Option<&str>) -> bool {
        let Some(origin) = origin else {
            // Non-browser clients send no Origin; browsers always do on cross-site requests.
            return true;
        };
        let origin = origin.trim();
        match &self.allowed_origins {
            None => parse_origin(origin).is_some_and(|(_, host, _)| {
                matches!(host.as_str(), "localhost" | "127.0.0.1" | "[::1]")
            }),
            Some(list) => {
                let Some((scheme, host, port)) = parse_origin(origin) else {
                    return list.iter().any(|o| o == "*");
                };
                list.iter().any(|allowed| {
                    if allowed == "*" {
                        return true;
                    }
                    let (pattern, any_port) = match allowed.strip_suffix(":*") {
                        Some(p) => (p, true),
                        None => (allowed.as_str(), false),
                    };
                    parse_origin(pattern).is_some_and(|(s, h, p)| {
                        s == scheme && h == host && (any_port || p == port)
                    })
                })
            }
        }
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

/// Parses a `listen` option: `IP:PORT`, or `localhost:PORT` for `127.0.0.1:PORT` (no
/// name lookup). Other listening components use it so that `listen` reads the same
/// everywhere.
pub fn parse_listen(text: &str) -> Option<SocketAddr> {
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr);
    }
    // `localhost` is resolved here without I/O: it is loopback by definition.
    let port = text.strip_prefix("localhost:")?.parse::<u16>().ok()?;
    Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port))
}

/// Splits an origin `scheme://host[:port]` into lowercase scheme, host and port (the
/// scheme's default when absent). `None` when it is not an http(s) origin.
fn parse_origin(origin: &str) -> Option<(String, String, u16)> {
    let lower = origin.to_ascii_lowercase();
    let (scheme, rest) = lower.split_once("://")?;
    let default_port = match scheme {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return None;
    }
    // An IPv6 host is bracketed; its colons are not the port separator.
    let (host, port) = if let Some(end) = rest.find(']') {
        let (host, tail) = rest.split_at(end + 1);
        match tail.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if tail.is_empty() => (host, None),
            None => return None,
        }
    } else {
        match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => p.parse::<u16>().ok()?,
        None => default_port,
    };
    Some((scheme.to_owned(), host.to_owned(), port))
}

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
        assert!(s.token.is_none());
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
        assert!(settings("lisen = \"127.0.0.1:1\"").is_err());
    }

    #[test]
    fn token_is_not_in_debug_output() {
        let s = settings("token = \"s3cret\"").unwrap();
        assert!(!format!("{s:?}").contains("s3cret"));
    }

    #[test]
    fn default_origins() {
        let s = settings("").unwrap();
        assert!(s.origin_allowed(None));
        for ok in [
            "http://localhost:3000",
            "https://127.0.0.1",
            "http://[::1]:8080",
            "HTTP://LOCALHOST",
        ] {
            assert!(s.origin_allowed(Some(ok)), "{ok}");
        }
        for bad in [
            "https://evil.example",
            "null",
            "http://localhost.evil.example",
            "file://",
            "http://127.0.0.1.evil:80",
            "http://localhost:3000/path",
        ] {
            assert!(!s.origin_allowed(Some(bad)), "{bad}");
        }
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
