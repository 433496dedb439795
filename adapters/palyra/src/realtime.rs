//! The realtime WebSocket's resume point and the frames the transport sends.
//!
//! Palyra numbers realtime events with one daemon-wide `sequence`. A client that reconnects
//! names the last sequence it saw in its handshake (`event_cursor: {sequence}`) and the
//! daemon replays the buffered events after it. [`RealtimeResume`] remembers the highest
//! sequence decoded and drops any event at or below it, so a replay that overlaps what was
//! already decoded (a cursor sent before the last frames were processed, a frame in flight
//! during the reconnect) never produces a signal twice.
//!
//! Palyra's `subscribe` frame (`{topics, session_ids}`) has no resume field: the cursor
//! travels in the `handshake`, which may also carry the subscriptions, so
//! [`RealtimeResume::handshake_frame`] restores both at once on reconnect.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The realtime protocol version patchbay speaks (Palyra accepts 1..=1).
pub const REALTIME_PROTOCOL_VERSION: u32 = 1;

/// How much later than every event seen an event at or below the cursor must have
/// occurred to be taken as new: Palyra restarts its sequence at 1 when the daemon
/// restarts, and such events are newer than anything decoded, while a replayed duplicate
/// is not. The slack covers events stamped slightly out of sequence order.
pub const RESTART_SLACK_MS: i64 = 1_000;

/// The realtime resume point: the highest `sequence` decoded (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RealtimeResume {
    highest: Option<u64>,
    /// Latest `occurred_at_unix_ms` among accepted events.
    latest_occurred: Option<i64>,
    dropped: u64,
}

impl RealtimeResume {
    /// A resume point with nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The highest sequence accepted, the cursor to resume after.
    pub fn cursor(&self) -> Option<u64> {
        self.highest
    }

    /// How many duplicate events were dropped.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Forgets the resume point (the daemon was reset and its sequences start over).
    pub fn reset(&mut self) {
        self.highest = None;
        self.latest_occurred = None;
    }

    /// Whether an event with this `sequence` (and `occurred_at_unix_ms`) is new; a new
    /// event moves the resume point, a duplicate is counted.
    ///
    /// An event at or below the cursor is a duplicate, unless it occurred more than
    /// [`RESTART_SLACK_MS`] after every event seen: then the daemon restarted and its
    /// sequence started over, and the resume point follows it.
    pub fn accept(&mut self, sequence: u64, occurred_at_unix_ms: Option<i64>) -> bool {
        let is_new = match self.highest {
            None => true,
            Some(highest) if sequence > highest => true,
            Some(_) => match (occurred_at_unix_ms, self.latest_occurred) {
                (Some(occurred), Some(latest)) => {
                    occurred > latest.saturating_add(RESTART_SLACK_MS)
                }
                _ => false,
            },
        };
        if !is_new {
            self.dropped += 1;
            return false;
        }
        self.highest = Some(sequence);
        if let Some(occurred) = occurred_at_unix_ms {
            self.latest_occurred = Some(self.latest_occurred.map_or(occurred, |l| l.max(occurred)));
        }
        true
    }

    /// The first frame to send on a (re)connected socket: `{"type":"handshake",
    /// "payload":{protocol_version, client_id, role, requested_*, event_cursor,
    /// subscriptions, heartbeat_interval_ms}}`, with `event_cursor` set to the resume point
    /// once an event has been seen (on a first connection Palyra replays its buffer).
    pub fn handshake_frame(&self, options: &HandshakeOptions) -> Value {
        let mut payload = json!({
            "protocol_version": REALTIME_PROTOCOL_VERSION,
            "client_id": options.client_id,
            "role": options.role,
            "requested_scopes": options.requested_scopes,
            "requested_capabilities": options.requested_capabilities,
            "requested_commands": options.requested_commands,
        });
        if let Value::Object(p) = &mut payload {
            if let Some(sequence) = self.highest {
                p.insert("event_cursor".into(), json!({ "sequence": sequence }));
            }
            if !options.subscriptions.is_empty() {
                p.insert("subscriptions".into(), json!(options.subscriptions));
            }
            if let Some(ms) = options.heartbeat_interval_ms {
                p.insert("heartbeat_interval_ms".into(), json!(ms));
            }
        }
        json!({ "type": "handshake", "payload": payload })
    }

    /// A `subscribe` frame: `{"type":"subscribe","payload":{topics, session_ids}}` (empty
    /// lists mean everything). It replaces the connection's subscriptions; it carries no
    /// resume point (see the module docs).
    pub fn subscribe_frame(subscription: &Subscription) -> Value {
        json!({ "type": "subscribe", "payload": subscription })
    }

    /// A `ping` frame; Palyra closes a socket idle for two heartbeat intervals.
    pub fn ping_frame(payload: Value) -> Value {
        json!({ "type": "ping", "payload": payload })
    }
}

/// What the handshake asks for. Empty `requested_*` lists let Palyra grant everything the
/// role allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandshakeOptions {
    /// A stable client id, 1 to 128 bytes.
    pub client_id: String,
    /// `operator`, `read_only`, `agent`, `connector` or `node`.
    pub role: String,
    /// Scopes such as `runs:read`, `approvals:read`, `events:read`.
    pub requested_scopes: Vec<String>,
    /// Capabilities such as `event_stream`.
    pub requested_capabilities: Vec<String>,
    /// Commands such as `run.abort`.
    pub requested_commands: Vec<String>,
    /// Topic and session filters restored with the connection.
    pub subscriptions: Vec<Subscription>,
    /// Heartbeat interval to negotiate (Palyra clamps it to 5–60 s, default 15 s).
    pub heartbeat_interval_ms: Option<u64>,
}

impl HandshakeOptions {
    /// An operator reading runs, approvals and events: what a patchbay source needs.
    pub fn new(client_id: impl Into<String>) -> Self {
        HandshakeOptions {
            client_id: client_id.into(),
            role: "operator".into(),
            requested_scopes: vec![
                "runs:read".into(),
                "approvals:read".into(),
                "events:read".into(),
            ],
            requested_capabilities: Vec::new(),
            requested_commands: Vec::new(),
            subscriptions: Vec::new(),
            heartbeat_interval_ms: None,
        }
    }
}

/// A realtime subscription filter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscription {
    /// Topics (`run`, `approval`, `node`, `config`, `system`); empty means all.
    pub topics: Vec<String>,
    /// Session ids; empty means all.
    pub session_ids: Vec<String>,
}
