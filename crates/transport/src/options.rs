//! The connection options every network adapter embeds, and how they are parsed.

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use patchbay_graph::config::MAX_DURATION_MS;
use patchbay_graph::{Diagnostic, Options};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::backoff::{Backoff, check_delays};
use crate::redact::RedactedUrl;
use crate::tls::{self, TlsError};

/// Which URLs an adapter connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `ws://` or `wss://` (TLS).
    WebSocket,
    /// `http://` or `https://` (TLS).
    Http,
}

impl Scheme {
    /// The plain and the TLS prefix.
    pub fn prefixes(self) -> (&'static str, &'static str) {
        match self {
            Scheme::WebSocket => ("ws://", "wss://"),
            Scheme::Http => ("http://", "https://"),
        }
    }
}

/// An adapter's defaults for [`TransportOptions`]: each adapter keeps the defaults it has
/// always documented (a marker type per adapter implements this).
pub trait Defaults: 'static {
    /// The URLs the adapter takes.
    const SCHEME: Scheme;
    /// An example URL, shown when `url` is wrong.
    const URL_EXAMPLE: &'static str;
    /// The default `url`; empty: `url` is required.
    const URL: &'static str = "";
    /// The default `backoff_initial_ms`.
    const BACKOFF_INITIAL_MS: u64 = 1_000;
    /// The default `backoff_max_ms`.
    const BACKOFF_MAX_MS: u64 = 30_000;
    /// The default `max_attempts` (`None`: retry forever).
    const MAX_ATTEMPTS: Option<u32> = None;
    /// The default `connect_timeout_ms`.
    const CONNECT_TIMEOUT_MS: u64 = 10_000;
}

fn default_url<D: Defaults>() -> String {
    D::URL.to_owned()
}
fn default_backoff_initial_ms<D: Defaults>() -> u64 {
    D::BACKOFF_INITIAL_MS
}
fn default_backoff_max_ms<D: Defaults>() -> u64 {
    D::BACKOFF_MAX_MS
}
fn default_max_attempts<D: Defaults>() -> Option<u32> {
    D::MAX_ATTEMPTS
}
fn default_connect_timeout_ms<D: Defaults>() -> u64 {
    D::CONNECT_TIMEOUT_MS
}
fn default_max_frame() -> usize {
    crate::ws::DEFAULT_MAX_MESSAGE
}

/// How a network adapter connects and reconnects. Embedded in the adapter's options with
/// `#[serde(flatten)]`, so these keys sit beside the adapter's own; the defaults are the
/// adapter's (`D`).
#[derive(Clone, Deserialize, schemars::JsonSchema)]
#[serde(bound = "")]
#[schemars(bound = "D: Defaults + schemars::JsonSchema")]
pub struct TransportOptions<D: Defaults> {
    /// The peer's address: `ws://HOST:PORT/PATH` or `wss://…` (TLS) for a WebSocket,
    /// `http://HOST:PORT/PATH` or `https://…` (TLS) for HTTP. A password in it and the
    /// values of token-like query parameters (`token`, `access_token`, `api_key`, `key`,
    /// `password`, `secret`, `auth`) are never logged or shown.
    #[serde(default = "default_url::<D>")]
    pub url: String,
    /// The first reconnect delay, in ms (from 1 to 86400000, one day); it doubles per
    /// failed attempt in a row, plus up to a quarter of jitter.
    #[serde(default = "default_backoff_initial_ms::<D>")]
    pub backoff_initial_ms: u64,
    /// The longest reconnect delay, in ms (from `backoff_initial_ms` to 86400000, one
    /// day); a server's `retry:` is clamped to it too.
    #[serde(default = "default_backoff_max_ms::<D>")]
    pub backoff_max_ms: u64,
    /// Reconnect attempts after failures in a row (a lost connection counts as one)
    /// before giving up (health `failed`); a successful connection starts the count
    /// again. Unset, where the default is unset: retry forever.
    #[serde(default = "default_max_attempts::<D>")]
    pub max_attempts: Option<u32>,
    /// The longest one connection attempt (connecting, TLS, and the adapter's handshake)
    /// may take, in ms (from 1 to 86400000, one day).
    #[serde(default = "default_connect_timeout_ms::<D>")]
    pub connect_timeout_ms: u64,
    /// A PEM file of CA certificates to trust for `wss://` / `https://`, besides the
    /// system's roots (a private CA, a self-signed local server).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// WebSocket URLs only: the largest message (and frame) accepted from the peer, in
    /// bytes (from 1 to 67108864, 64 MiB; default 16777216, 16 MiB). A larger one is
    /// counted as bad input and the connection is reset (then reopened with the backoff
    /// above), so that a peer can never make patchbay buffer without bound.
    #[serde(default = "default_max_frame")]
    pub max_frame: usize,
    #[serde(skip)]
    #[schemars(skip)]
    defaults: PhantomData<fn() -> D>,
}

impl<D: Defaults> std::fmt::Debug for TransportOptions<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportOptions")
            .field("url", &self.shown_url())
            .field("backoff_initial_ms", &self.backoff_initial_ms)
            .field("backoff_max_ms", &self.backoff_max_ms)
            .field("max_attempts", &self.max_attempts)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("ca_file", &self.ca_file)
            .field("max_frame", &self.max_frame)
            .finish()
    }
}

impl<D: Defaults> TransportOptions<D> {
    /// Options with the adapter's defaults and this `url` (for tests and embedders).
    pub fn new(url: impl Into<String>) -> Self {
        TransportOptions {
            url: url.into(),
            backoff_initial_ms: D::BACKOFF_INITIAL_MS,
            backoff_max_ms: D::BACKOFF_MAX_MS,
            max_attempts: D::MAX_ATTEMPTS,
            connect_timeout_ms: D::CONNECT_TIMEOUT_MS,
            ca_file: None,
            max_frame: crate::ws::DEFAULT_MAX_MESSAGE,
            defaults: PhantomData,
        }
    }

    /// Checks the values (no I/O); an error points at the key at fault.
    pub fn check(&self, options: &Options<'_>) -> Result<(), Diagnostic> {
        let url = self.url();
        if url.is_empty() {
            return Err(options.error_at("url", "missing field `url`"));
        }
        let (plain, secure) = D::SCHEME.prefixes();
        let Some(rest) = url.strip_prefix(plain).or_else(|| url.strip_prefix(secure)) else {
            return Err(options.error_at(
                "url",
                format!(
                    "`url` must be a {plain} or {secure} URL (e.g. {})",
                    D::URL_EXAMPLE
                ),
            ));
        };
        if rest.is_empty() || rest.starts_with(['/', '?', '#']) {
            return Err(options.error_at("url", "`url` has no host"));
        }
        check_delays(options, self.backoff_initial_ms, self.backoff_max_ms)?;
        if self.max_attempts == Some(0) {
            let hint = match D::MAX_ATTEMPTS {
                None => " (omit it to retry forever)".to_owned(),
                Some(n) => format!(" (default {n})"),
            };
            return Err(options.error_at("max_attempts", format!("must be at least 1{hint}")));
        }
        options.check_range(
            "connect_timeout_ms",
            self.connect_timeout_ms,
            1..=MAX_DURATION_MS,
        )?;
        if D::SCHEME != Scheme::WebSocket && options.has("max_frame") {
            return Err(options.error_at(
                "max_frame",
                "`max_frame` applies to WebSocket connections only",
            ));
        }
        options.check_range(
            "max_frame",
            self.max_frame,
            1..=crate::ws::MAX_MESSAGE_LIMIT,
        )?;
        Ok(())
    }

    /// The URL, trimmed.
    pub fn url(&self) -> &str {
        self.url.trim()
    }

    /// The URL as it may be shown.
    pub fn shown_url(&self) -> RedactedUrl<'_> {
        RedactedUrl(self.url())
    }

    /// Whether the URL asks for TLS (`wss://`, `https://`).
    pub fn is_tls(&self) -> bool {
        self.url().starts_with(D::SCHEME.prefixes().1)
    }

    /// A fresh reconnect policy from these options.
    pub fn backoff(&self) -> Backoff {
        Backoff::new(
            Duration::from_millis(self.backoff_initial_ms),
            Duration::from_millis(self.backoff_max_ms),
            self.max_attempts,
        )
    }

    /// The bound of one connection attempt.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    /// The TLS client configuration: the system's roots, plus `ca_file` (read now).
    pub fn tls(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        tls::client_config(self.ca_file.as_deref())
    }

    /// [`TransportOptions::tls`] when the URL asks for TLS, else `None`.
    pub fn tls_if_needed(&self) -> Result<Option<Arc<rustls::ClientConfig>>, TlsError> {
        if self.is_tls() {
            self.tls().map(Some)
        } else {
            Ok(None)
        }
    }
}

/// An adapter's options struct that embeds [`TransportOptions`] (flattened).
pub trait TransportConfig: DeserializeOwned + schemars::JsonSchema {
    /// The adapter's defaults.
    type Defaults: Defaults;
    /// The embedded transport options.
    fn transport(&self) -> &TransportOptions<Self::Defaults>;
}

/// The keys an options struct takes, its flattened parts included, from its schema.
pub fn known_keys<T: schemars::JsonSchema>() -> Vec<String> {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    schema
        .get("properties")
        .and_then(|p| p.as_object())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// Parses an adapter's options: unknown keys are refused over the adapter's and the
/// transport's keys together (serde's `deny_unknown_fields` does not work through
/// `flatten`), then the whole struct is parsed (a value of the wrong type is reported at
/// that value, whichever part it belongs to), then the transport's values are checked.
pub fn parse_options<T: TransportConfig>(options: &Options<'_>) -> Result<T, Diagnostic> {
    let config: T = parse_flattened(options)?;
    config.transport().check(options)?;
    Ok(config)
}

/// Parses a config that flattens shared options (the transport's, a listener's): unknown
/// keys are refused over all its keys (serde's `deny_unknown_fields` does not work through
/// `flatten`), then the whole struct is parsed.
pub fn parse_flattened<T: schemars::JsonSchema + serde::de::DeserializeOwned>(
    options: &Options<'_>,
) -> Result<T, Diagnostic> {
    let known = known_keys::<T>();
    options.refuse_unknown_keys(known.iter().map(String::as_str))?;
    options.parse()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(schemars::JsonSchema)]
    struct Demo;
    impl Defaults for Demo {
        const SCHEME: Scheme = Scheme::WebSocket;
        const URL_EXAMPLE: &'static str = "ws://127.0.0.1:9/x";
        const MAX_ATTEMPTS: Option<u32> = Some(7);
        const CONNECT_TIMEOUT_MS: u64 = 2_000;
    }

    /// An adapter's options as the adapters write them.
    #[derive(Debug, Deserialize, schemars::JsonSchema)]
    struct DemoConfig {
        #[serde(flatten)]
        transport: TransportOptions<Demo>,
        /// Ping interval.
        #[serde(default)]
        ping_interval_ms: Option<u64>,
    }

    impl TransportConfig for DemoConfig {
        type Defaults = Demo;
        fn transport(&self) -> &TransportOptions<Demo> {
            &self.transport
        }
    }

    fn parse(text: &str) -> Result<DemoConfig, Diagnostic> {
        Options::parse_snippet_with(text, parse_options::<DemoConfig>)
    }

    #[test]
    fn the_adapter_supplies_the_defaults() {
        let c = parse("url = \"ws://h:1/x\"\nping_interval_ms = 5").expect("parses");
        assert_eq!(c.transport.max_attempts, Some(7));
        assert_eq!(c.transport.connect_timeout_ms, 2_000);
        assert_eq!(c.transport.backoff_initial_ms, 1_000);
        assert_eq!(c.transport.backoff_max_ms, 30_000);
        assert_eq!(c.ping_interval_ms, Some(5));
        let c = parse("url = \"wss://h\"\nmax_attempts = 2\nca_file = \"ca.pem\"").expect("parses");
        assert_eq!(c.transport.max_attempts, Some(2));
        assert!(c.transport.is_tls());
        assert_eq!(
            c.transport.ca_file.as_deref(),
            Some(std::path::Path::new("ca.pem"))
        );
    }

    #[test]
    fn unknown_keys_point_at_the_key_and_suggest_over_both_parts() {
        let err = parse("url = \"ws://h\"\n  conect_timeout_ms = 3\n").unwrap_err();
        assert_eq!((err.line, err.col), (2, 3), "{err}");
        assert!(
            err.message.contains("did you mean `connect_timeout_ms`"),
            "{err}"
        );
        let err = parse("url = \"ws://h\"\nping_intervl_ms = 3\n").unwrap_err();
        assert_eq!((err.line, err.col), (2, 1), "{err}");
        assert!(
            err.message.contains("did you mean `ping_interval_ms`"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_point_at_their_key() {
        let err = parse("url = \"ws://h\"\nbackoff_max_ms = \"x\"\n").unwrap_err();
        assert_eq!((err.line, err.col), (2, 18), "{err}");
        let err = parse("url = \"ws://h\"\nping_interval_ms = \"x\"\n").unwrap_err();
        assert_eq!((err.line, err.col), (2, 20), "{err}");
        let err = parse("url = \"http://h\"\n").unwrap_err();
        assert!(err.message.contains("ws:// or wss://"), "{err}");
        assert_eq!((err.line, err.col), (1, 7), "{err}");
        let err = parse("url = \"wss://\"\n").unwrap_err();
        assert!(err.message.contains("no host"), "{err}");
        let err = parse("ping_interval_ms = 1\n").unwrap_err();
        assert!(err.message.contains("missing field `url`"), "{err}");
        // A value of the wrong type is told before what the values mean together.
        let err = parse("ping_interval_ms = \"x\"\n").unwrap_err();
        assert_eq!((err.line, err.col), (1, 20), "{err}");
        assert!(
            err.message
                .contains("ping_interval_ms: expected a whole number of milliseconds"),
            "{err}"
        );
        let err = parse("connect_timeout_ms = true\n").unwrap_err();
        assert_eq!((err.line, err.col), (1, 22), "{err}");
        assert!(
            err.message.contains(
                "connect_timeout_ms: expected a whole number of milliseconds, found true"
            ),
            "{err}"
        );
        let err = parse("url = \"ws://h\"\nmax_attempts = 0").unwrap_err();
        assert!(err.message.contains("at least 1 (default 7)"), "{err}");
        let err =
            parse("url = \"ws://h\"\nbackoff_initial_ms = 10\nbackoff_max_ms = 5").unwrap_err();
        assert!(
            err.message.contains("at least `backoff_initial_ms`"),
            "{err}"
        );
    }

    #[test]
    fn the_schema_lists_the_flattened_keys_with_the_adapters_defaults() {
        let mut keys = known_keys::<DemoConfig>();
        keys.sort();
        assert_eq!(
            keys,
            [
                "backoff_initial_ms",
                "backoff_max_ms",
                "ca_file",
                "connect_timeout_ms",
                "max_attempts",
                "max_frame",
                "ping_interval_ms",
                "url"
            ]
        );
        let schema = schemars::schema_for!(DemoConfig);
        let properties = schema.get("properties").expect("properties");
        assert_eq!(properties["max_attempts"]["default"], serde_json::json!(7));
        assert!(
            properties["ca_file"]["description"]
                .as_str()
                .is_some_and(|d| d.contains("PEM"))
        );
    }

    #[test]
    fn max_frame_is_bounded_and_for_websockets_only() {
        assert_eq!(
            parse("url = \"ws://h\"").unwrap().transport.max_frame,
            16 << 20
        );
        assert_eq!(
            parse("url = \"ws://h\"\nmax_frame = 1024")
                .unwrap()
                .transport
                .max_frame,
            1024
        );
        for bad in ["max_frame = 0", "max_frame = 67108865"] {
            let err = parse(&format!("url = \"ws://h\"\n{bad}")).unwrap_err();
            assert_eq!((err.line, err.col), (2, 13), "{err}");
        }
    }

    #[test]
    fn debug_hides_secrets_in_the_url() {
        let options = TransportOptions::<Demo>::new("wss://u:pw@h/x?token=abc");
        let shown = format!("{options:?}");
        assert!(!shown.contains("pw") && !shown.contains("abc"), "{shown}");
    }
}
