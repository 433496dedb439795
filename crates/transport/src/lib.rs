//! How patchbay's network adapters connect, in one place.
//!
//! An adapter (the `websocket` and `sse` sources, the `openclaw`, `escapement` and
//! `palyra` links) keeps only its handshake, framing and decoder; this crate owns the rest:
//!
//! - [`TransportOptions`]: the connection options every network adapter embeds with
//!   `#[serde(flatten)]` (`url`, `backoff_initial_ms`, `backoff_max_ms`, `max_attempts`,
//!   `connect_timeout_ms`, `ca_file`, `max_frame`), with defaults the adapter supplies ([`Defaults`]),
//!   parsed by [`parse_options`], which refuses unknown keys over the adapter's and the
//!   transport's keys together (FILE:LINE:COL and a did-you-mean). [`Headers`] are the
//!   extra request headers of the adapters that take them.
//! - [`Driver`]: the reconnect loop. Connect within `connect_timeout_ms`, run the session,
//!   on a loss back off with jitter ([`Backoff`]) and retry, give up after `max_attempts`
//!   (`failed`); health `starting` → `ok` → `recovering` ("retrying in N s: reason") →
//!   `failed`; every wait ends at shutdown; a successful connection resets the backoff. An
//!   adapter implements [`Link`] (connect + session) and hands it to the driver.
//! - [`connect_websocket`]: a WebSocket client connection (tokio-tungstenite) with
//!   headers, `TCP_NODELAY`, and TLS for `wss://`; [`client_builder`]: the HTTP client
//!   (reqwest) for `http://` and `https://`. Both use one TLS setup ([`tls`]): rustls on
//!   the ring provider, the system's roots, plus the PEM file of `ca_file`.
//! - [`listen`]: the other direction, every listening socket patchbay opens: an axum
//!   router served with a header timeout, an idle timeout, a connection cap, and `Host`
//!   and `Origin` checked on every request ([`listen::serve`]).
//! - [`RedactedUrl`]: a URL as it may be logged (password and token-like query values
//!   replaced by `***`); header values are never shown.
//! - [`publish`]: signals from a program that is not patchbay (`patchbay wrap`) to a
//!   running patchbay's `POST /signal`, never waiting, bounded while it is unreachable.
//! - [`child`]: the programs a component starts and talks to over stdio (`command`, `cwd`,
//!   `env`; started with their log lines in patchbay's log, ended with a grace period).

pub mod backoff;
pub mod child;
mod driver;
mod headers;
mod http;
pub mod listen;
mod options;
pub mod probe;
pub mod publish;
mod redact;
pub mod tls;
pub mod two_way;
mod ws;

pub use backoff::{Backoff, check_delays, retry_detail};
pub use driver::{Driver, Ended, GaveUp, Link};
pub use headers::Headers;
pub use http::{client_builder, client_builder_with, describe_http_error};
pub use options::{
    Defaults, Scheme, TransportConfig, TransportOptions, known_keys, parse_flattened, parse_options,
};
pub use redact::{RedactedUrl, SECRET_QUERY_KEYS};
pub use tls::TlsError;
pub use ws::{
    DEFAULT_MAX_MESSAGE, MAX_MESSAGE_LIMIT, WsConnectError, WsStream, close_reason,
    connect_websocket, connect_websocket_bounded, connect_websocket_with_response,
    describe as describe_ws_error,
};
