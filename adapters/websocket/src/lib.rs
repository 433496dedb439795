//! The generic WebSocket source, `[sources.NAME] type = "websocket"`: every text (or UTF-8
//! binary) frame is a generic JSON envelope decoded by
//! [`patchbay_signal::normalize::Normalizer`]; a frame that is not JSON becomes an `error
//! {code: "bad_frame"}` signal (counted) and the connection lives on.
//!
//! The connection reconnects with capped exponential backoff and jitter (`patchbay_transport::Backoff`:
//! `backoff_initial_ms`, `backoff_max_ms`, at most `max_attempts` failures in a row when
//! set, reset by each successful connection), each attempt bounded by
//! `connect_timeout_ms`. It pings every `ping_interval_ms`; a ping not answered by the next
//! one counts as a lost connection. Health: `Starting` ("connecting to URL"), `Ok`
//! ("connected to URL"), `Recovering` ("retrying in N s: reason"), `Failed` (attempts
//! exhausted, or the server refused the upgrade with 401/403). Header values (tokens) are
//! never logged.

mod source;

use patchbay_graph::{Adapter, ComponentType, options_of};

pub use source::{WebSocketConfig, WebSocketSource};

/// The component type name.
pub const TYPE_NAME: &str = "websocket";

/// The `websocket` source.
pub const ADAPTER: Adapter = Adapter::new(
    TYPE_NAME,
    "any WebSocket server that sends JSON or text frames",
    &[ComponentType::source(
        "websocket",
        "a WebSocket feed: each text frame decoded as a signal (NDJSON, SSE or plain)",
        source::build,
        options_of::<WebSocketConfig>,
    )],
);
