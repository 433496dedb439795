//! The Palyra adapter: decodes the JSON edges of Palyra's daemon (`palyrad`) into signals
//! and encodes control signals as ACP command envelopes.
//!
//! Palyra speaks protobuf over gRPC inside; patchbay reads the two JSON surfaces it exposes:
//!
//! - the **console run stream** (`POST /console/v1/chat/sessions/{id}/messages/stream`,
//!   `application/x-ndjson`): lines `{"type":"meta",run_id,session_id}`,
//!   `{"type":"event","event":{run_id,event_type,<event_type>:{…}}}`,
//!   `{"type":"error",run_id,error}`, `{"type":"complete",run_id,status}`;
//! - the **realtime WebSocket** (`/realtime/v1/ws`): frames `{type, payload}`
//!   (`handshake.accepted`, `subscribed`, `event` carrying `{schema_version, sequence,
//!   event_id, topic, occurred_at_unix_ms, payload}`, `snapshot.required`, `pong`,
//!   `command.result`, `error`).
//!
//! [`PalyraDecoder`] tells the two apart line by line (see [`decode`] for the mapping),
//! [`RealtimeResume`] keeps the realtime resume point and builds the `handshake` and
//! `subscribe` frames, and [`AcpCommander`] turns `control.cancel`, `control.interrupt`
//! and `control.answer` into ACP command envelopes (`POST /console/v1/acp/command`) and
//! their result envelopes back into signals. These are pure: no I/O.
//!
//! [`transport`] connects them to a daemon: `type = "palyra"` as a source and as a two-way
//! output ([`register`], [`PalyraConfig`]).

pub mod acp;
pub mod decode;
mod envelope;
pub mod realtime;
pub mod transport;

use patchbay_signal::decode::StreamDecoder;

pub use acp::{
    ACP_COMMAND_PATH, AcpClientContext, AcpCommander, AcpRequest, EncodeError,
    decode_command_result,
};
pub use decode::PalyraDecoder;
pub use realtime::{HandshakeOptions, RealtimeResume, Subscription};
pub use transport::{Mode, PalyraConfig, Secret, register};

/// The decoder `patchbay parse --protocol palyra` drives: NDJSON whose lines are console
/// run stream lines, realtime frames, ACP result envelopes or recorded lines
/// (`{"t","dir":"in","frame"}`), told apart per line.
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(PalyraDecoder::new(source))
}
