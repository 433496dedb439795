//! The endpoint's options, as every agent's config struct gives them, and their check.

use std::marker::PhantomData;
use std::net::SocketAddr;

use patchbay_graph::approvals::GateConfig;
use patchbay_server::{Secret, parse_listen};
use patchbay_transport::listen::{Limits, ListenerOptions};
use serde::Deserialize;

use crate::HOOK_PATH;

/// The defaults of the options every agent's config struct shares (for `#[serde(default =
/// "…")]`).
pub mod defaults {
    /// The largest hook body accepted: 8 MiB (a file write carries the whole file).
    pub fn max_body() -> usize {
        8 << 20
    }
}

/// An agent's defaults for [`EndpointOptions`]: the address its endpoint listens on when
/// the config names none (every [`HookAgent`](crate::HookAgent) has them).
pub trait EndpointDefaults: 'static {
    /// The default `listen`, `IP:PORT`.
    const LISTEN: &'static str;
}

fn default_listen<D: EndpointDefaults>() -> String {
    D::LISTEN.to_owned()
}

/// The options of a hook endpoint, unchecked: every hook agent's config struct is this one
/// (the adapter names it, `ClaudeCodeConfig = EndpointOptions<Claude>`), so that they
/// cannot drift apart; the default `listen` is the agent's (`D`). Parse it with
/// [`crate::parse_settings`].
#[derive(Deserialize, schemars::JsonSchema)]
// Not `deny_unknown_fields`: it does not work through `flatten`; `parse_settings` refuses
// unknown keys.
#[serde(bound = "")]
#[schemars(bound = "D: EndpointDefaults", rename = "EndpointOptions")]
pub struct EndpointOptions<D: EndpointDefaults> {
    /// `IP:PORT` to listen on (`localhost:PORT` means `127.0.0.1:PORT`); each agent has
    /// its own default port. Not on loopback, a `token` is required.
    #[serde(default = "default_listen::<D>")]
    pub listen: String,
    /// Bearer token the hooks must send (`Authorization: Bearer …`). `patchbay hooks
    /// install` makes them send `$PATCHBAY_HOOK_TOKEN` (`patchbay hooks emit` sends it),
    /// so it is never written in clear in the agent's settings.
    #[serde(default)]
    pub token: Option<Secret>,
    /// Hold the calls of some tools until a `control.answer` decides them (outputs only).
    /// `tools` are the agent's own names: Claude Code's `Bash`, `Write`, …; Gemini CLI's
    /// `run_shell_command`, `write_file`, `replace`, … (held at its `BeforeTool`).
    #[serde(default)]
    pub gate: Option<GateConfig>,
    /// Largest hook body accepted, in bytes (a file write carries the whole file, Gemini
    /// CLI's `BeforeModel` the whole conversation). Default 8 MiB.
    #[serde(default = "defaults::max_body")]
    pub max_body: usize,
    /// `allowed_hosts`, `header_timeout_ms`, `idle_timeout_ms`, `max_connections`: as
    /// every listener's (a call held by the gate is never idle).
    #[serde(flatten)]
    pub listener: ListenerOptions,
    #[serde(skip)]
    #[schemars(skip)]
    agent: PhantomData<fn() -> D>,
}

// By hand: derived, they would ask the agent's `D` to be `Clone` and `Debug` too.
impl<D: EndpointDefaults> Clone for EndpointOptions<D> {
    fn clone(&self) -> Self {
        EndpointOptions {
            listen: self.listen.clone(),
            token: self.token.clone(),
            gate: self.gate.clone(),
            max_body: self.max_body,
            listener: self.listener.clone(),
            agent: PhantomData,
        }
    }
}

impl<D: EndpointDefaults> std::fmt::Debug for EndpointOptions<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointOptions")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("gate", &self.gate)
            .field("max_body", &self.max_body)
            .field("listener", &self.listener)
            .finish()
    }
}

impl<D: EndpointDefaults> EndpointOptions<D> {
    /// Options with the defaults and this `listen` (for tests and embedders).
    pub fn new(listen: impl Into<String>) -> Self {
        EndpointOptions {
            listen: listen.into(),
            token: None,
            gate: None,
            max_body: defaults::max_body(),
            listener: ListenerOptions::default(),
            agent: PhantomData,
        }
    }

    /// Checks the options into [`Settings`]; an error names the offending key and what is
    /// wrong.
    pub fn check(self) -> Result<Settings, (&'static str, String)> {
        Settings::check(self)
    }
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
    /// Checks options (the agent's default `listen` is named in the message of a bad
    /// one); an error names the offending key and what is wrong.
    pub fn check<D: EndpointDefaults>(
        options: EndpointOptions<D>,
    ) -> Result<Settings, (&'static str, String)> {
        let default_listen = D::LISTEN;
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
        let limits = options.listener.check()?;
        Ok(Settings {
            listen,
            token: options.token,
            gate: options.gate,
            max_body: options.max_body,
            allowed_hosts: options.listener.allowed_hosts,
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

    /// An agent whose default is Gemini CLI's port.
    struct Port7880;
    impl EndpointDefaults for Port7880 {
        const LISTEN: &'static str = "127.0.0.1:7880";
    }

    fn options(listen: &str) -> EndpointOptions<Port7880> {
        EndpointOptions::new(listen)
    }

    #[test]
    fn options_are_checked_and_name_their_key() {
        let settings = Settings::check(options("localhost:7880")).unwrap();
        assert_eq!(settings.hook_url(), "http://127.0.0.1:7880/hook");
        let (key, message) = Settings::check(options("nowhere")).unwrap_err();
        assert_eq!(key, "listen");
        assert!(message.contains("127.0.0.1:7880"), "{message}");
        let (key, _) = Settings::check(options("0.0.0.0:1")).unwrap_err();
        assert_eq!(key, "listen");
        let mut open = options("0.0.0.0:7880");
        open.token = Some(Secret("t".into()));
        let settings = Settings::check(open).unwrap();
        assert_eq!(settings.hook_url(), "http://127.0.0.1:7880/hook");
        let mut empty = options("127.0.0.1:1");
        empty.token = Some(Secret(" ".into()));
        assert_eq!(Settings::check(empty).unwrap_err().0, "token");
        let mut zero = options("127.0.0.1:1");
        zero.max_body = 0;
        assert_eq!(Settings::check(zero).unwrap_err().0, "max_body");
    }
}
