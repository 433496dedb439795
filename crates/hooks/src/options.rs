//! The endpoint's options, as every agent's config struct gives them, and their check.

use std::net::SocketAddr;

use patchbay_graph::approvals::GateConfig;
use patchbay_server::{Secret, parse_listen};
use patchbay_transport::listen::{self, Limits};

use crate::HOOK_PATH;

/// The defaults of the options every agent's config struct shares (for `#[serde(default =
/// "…")]`).
pub mod defaults {
    use patchbay_transport::listen;

    /// How long a client may take to send a request's head, in ms.
    pub fn header_timeout_ms() -> u64 {
        listen::DEFAULT_HEADER_TIMEOUT_MS
    }

    /// How long a keep-alive connection may wait for its next request, in ms.
    pub fn idle_timeout_ms() -> u64 {
        listen::DEFAULT_IDLE_TIMEOUT_MS
    }

    /// How many connections may be open at once.
    pub fn max_connections() -> usize {
        listen::DEFAULT_MAX_CONNECTIONS
    }

    /// The largest hook body accepted: 8 MiB (a file write carries the whole file).
    pub fn max_body() -> usize {
        8 << 20
    }
}

/// The options of a hook endpoint, unchecked: what an agent's config struct holds (each
/// adapter has its own, documented in its agent's words, with its own default port).
#[derive(Debug, Clone)]
pub struct EndpointOptions {
    /// `IP:PORT` to listen on (`localhost:PORT` means `127.0.0.1:PORT`).
    pub listen: String,
    /// Bearer token the hooks must send.
    pub token: Option<Secret>,
    /// The gate, if any.
    pub gate: Option<GateConfig>,
    /// Largest hook body accepted, in bytes.
    pub max_body: usize,
    /// Host names answered besides the loopback ones (`["*"]`: any).
    pub allowed_hosts: Option<Vec<String>>,
    /// Request head timeout, ms.
    pub header_timeout_ms: u64,
    /// Keep-alive idle timeout, ms.
    pub idle_timeout_ms: u64,
    /// Connection cap.
    pub max_connections: usize,
}

/// Checked options.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The address to bind.
    pub listen: SocketAddr,
    /// The token, if any.
    pub token: Option<Secret>,
    /// The gate, if any.
    pub gate: Option<GateConfig>,
    /// Largest body.
    pub max_body: usize,
    /// Host names answered besides the loopback ones.
    pub allowed_hosts: Option<Vec<String>>,
    /// Header and idle timeouts, connection cap.
    pub limits: Limits,
}

impl Settings {
    /// Checks options (`default_listen` is named in the message of a bad `listen`); an
    /// error names the offending key and what is wrong.
    pub fn check(
        options: EndpointOptions,
        default_listen: &str,
    ) -> Result<Settings, (&'static str, String)> {
        let listen = parse_listen(&options.listen).ok_or_else(|| {
            (
                "listen",
                format!(
                    "`{}` is not an `IP:PORT` address (e.g. `{default_listen}`)",
                    options.listen
                ),
            )
        })?;
        if let Some(Secret(t)) = &options.token
            && t.trim().is_empty()
        {
            return Err(("token", "the token must not be empty".into()));
        }
        if !listen.ip().is_loopback() && options.token.is_none() {
            return Err((
                "listen",
                format!(
                    "`{listen}` is not a loopback address: set a `token` so that only hooks \
                     that know it are heard"
                ),
            ));
        }
        if let Some(gate) = &options.gate {
            gate.check().map_err(|message| ("gate", message))?;
        }
        if options.max_body == 0 {
            return Err(("max_body", "must be at least 1 byte".into()));
        }
        if let Some(hosts) = &options.allowed_hosts {
            listen::check_hosts(hosts).map_err(|(_, message)| ("allowed_hosts", message))?;
        }
        let limits = Limits::check(
            options.header_timeout_ms,
            options.idle_timeout_ms,
            options.max_connections,
        )?;
        Ok(Settings {
            listen,
            token: options.token,
            gate: options.gate,
            max_body: options.max_body,
            allowed_hosts: options.allowed_hosts,
            limits,
        })
    }

    /// The URL the hooks post to.
    pub fn hook_url(&self) -> String {
        let host = if self.listen.ip().is_unspecified() {
            "127.0.0.1".to_owned()
        } else if self.listen.is_ipv6() {
            format!("[{}]", self.listen.ip())
        } else {
            self.listen.ip().to_string()
        };
        format!("http://{host}:{}{HOOK_PATH}", self.listen.port())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(listen: &str) -> EndpointOptions {
        EndpointOptions {
            listen: listen.into(),
            token: None,
            gate: None,
            max_body: defaults::max_body(),
            allowed_hosts: None,
            header_timeout_ms: defaults::header_timeout_ms(),
            idle_timeout_ms: defaults::idle_timeout_ms(),
            max_connections: defaults::max_connections(),
        }
    }

    #[test]
    fn options_are_checked_and_name_their_key() {
        let settings = Settings::check(options("localhost:7880"), "127.0.0.1:7880").unwrap();
        assert_eq!(settings.hook_url(), "http://127.0.0.1:7880/hook");
        let (key, message) = Settings::check(options("nowhere"), "127.0.0.1:7880").unwrap_err();
        assert_eq!(key, "listen");
        assert!(message.contains("127.0.0.1:7880"), "{message}");
        let (key, _) = Settings::check(options("0.0.0.0:1"), "x").unwrap_err();
        assert_eq!(key, "listen");
        let mut open = options("0.0.0.0:7880");
        open.token = Some(Secret("t".into()));
        let settings = Settings::check(open, "x").unwrap();
        assert_eq!(settings.hook_url(), "http://127.0.0.1:7880/hook");
        let mut empty = options("127.0.0.1:1");
        empty.token = Some(Secret(" ".into()));
        assert_eq!(Settings::check(empty, "x").unwrap_err().0, "token");
        let mut zero = options("127.0.0.1:1");
        zero.max_body = 0;
        assert_eq!(Settings::check(zero, "x").unwrap_err().0, "max_body");
    }
}
