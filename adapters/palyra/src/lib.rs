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
//! output ([`ADAPTER`], [`PalyraConfig`]).

pub mod acp;
pub mod decode;
mod envelope;
pub mod realtime;
pub mod transport;

use patchbay_graph::{Adapter, ComponentType, options_of};
use patchbay_signal::decode::StreamDecoder;

pub use acp::{
    ACP_COMMAND_PATH, AcpClientContext, AcpCommander, AcpRequest, EncodeError,
    decode_command_result,
};
pub use decode::PalyraDecoder;
pub use realtime::{HandshakeOptions, RealtimeResume, Subscription};
pub use transport::{Mode, PalyraConfig, Secret};

/// `type = "palyra"`: as an output it talks both ways (prompts and controls to the
/// daemon, its events out of `NAME.inbound`); as a source it only listens. Also the decoder
/// of `patchbay parse --protocol palyra`.
pub const ADAPTER: Adapter = Adapter::new(
    "palyra",
    "Palyra agents: the daemon's realtime WebSocket and its ACP bridge",
    &[ComponentType::link(
        "palyra",
        "a Palyra daemon: console events in, prompts and controls out",
        transport::build_source,
        transport::build_output,
        options_of::<PalyraConfig>,
    )],
)
.parse(parse_decoder);

/// The decoder `patchbay parse --protocol palyra` drives: NDJSON whose lines are console
/// run stream lines, realtime frames, ACP result envelopes or recorded lines
/// (`{"t","dir":"in","frame"}`), told apart per line; a frame pretty-printed over several
/// lines is read whole.
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(PalyraDecoder::new(source))
}
