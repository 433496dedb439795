//! The OpenClaw gateway adapter: the pure part (no sockets).
//!
//! The gateway speaks JSON frames over a WebSocket: `req` (`{type, id, method, params}`),
//! `res` (`{type, id, ok, payload | error}`) and `event` (`{type, event, payload, seq}`).
//!
//! - [`Handshake`] is the connection handshake as a state machine: it answers the
//!   `connect.challenge` with the `connect` request ([`connect_frame`]) and reports
//!   `hello-ok` or a classified [`ConnectFailure`] (auth failures are not retryable).
//! - [`PendingRequests`] tracks RPCs, which may answer twice with the same id
//!   (`accepted`, then the final answer).
//! - [`OpenClawDecoder`] turns frames into signals and remembers the runs it saw
//!   ([`RunTracker`]).
//! - [`encode_control`] turns `control.interrupt`/`control.cancel` into `chat.abort` and
//!   `control.answer` into `exec.approval.resolve`.
//! - [`parse_decoder`] reads captures for `patchbay parse --protocol openclaw`.
//!
//! The transport is described by [`ADAPTER`] as `type = "openclaw"` ([`OpenClawConfig`]): it
//! connects, completes the handshake within `connect_timeout_ms`, decodes every frame,
//! and reconnects with `min(1 s·2^(n−1), 30 s)` plus jitter
//! ([`Backoff`](patchbay_transport::Backoff)), 10 attempts by default, counted again
//! from 0 after a success. A refusal that a retry cannot fix
//! (a wrong token, no common protocol) is a `failed` state at once, with no retry loop.
//! Declared under `[outputs.NAME]` it also sends `chat.abort` for `control.interrupt` /
//! `control.cancel` (and `exec.approval.resolve` for `control.answer`), asking for the
//! `operator.write` and `operator.admin` scopes (the gateway lets only an admin abort a
//! run another client started); under `[sources.NAME]` it only listens. It also sends
//! `sessions.subscribe`, without which the gateway sends a run's tool stream only to
//! the client that started it.
//!
//! How the transport uses the pure parts: open the socket, feed every frame to [`Handshake::on_frame`] and send
//! what it says until `Connected`; then feed frames to [`OpenClawDecoder::decode_frame`]
//! (and `res` frames to [`PendingRequests::on_response`]); on `Failed`, reconnect only if
//! [`ConnectFailure::retryable`].
//!
//! # Signals
//!
//! `agent` events (`payload {runId, stream, data, sessionKey, agentId, seq, ts}`):
//!
//! | stream / phase            | signal                                                     |
//! |---------------------------|------------------------------------------------------------|
//! | `lifecycle` `start`       | `agent_state_change idle→acting`                           |
//! | `lifecycle` `end`         | `completion {taskId: runId, success: !aborted, result: stopReason}` |
//! | `lifecycle` `error`       | `error {code: "lifecycle_error", message: data.error}`    |
//! | `lifecycle` other         | `openclaw.lifecycle` (`data` as payload)                   |
//! | `assistant` / `thinking`  | `text_delta` / `thinking` with the `delta`; a frame with an empty `delta` but a `text` gives what that text adds to the text streamed so far |
//! | `tool` `start`            | `tool_call {toolName: name, callId: toolCallId, input: args}` |
//! | `tool` `update`           | `openclaw.tool_update`                                      |
//! | `tool` `result`           | `tool_result {toolName, callId, success: !isError, output: result}` |
//! | `usage`                   | `token_usage` when it has a token count (the missing one is 0, named in `metadata.missing`), else `openclaw.usage` |
//! | other stream `S`          | `openclaw.S` (`openclaw.run_status`, `openclaw.item`, …)    |
//!
//! `session.tool` events (the tool stream of a run another client started, sent to
//! clients that called `sessions.subscribe`) decode like `agent` events, with
//! `metadata.event = "session.tool"`.
//!
//! Other events: `chat` → `openclaw.chat`, passed through (it repeats the `agent`
//! streams: decoding both would double every token); `exec.approval.requested` →
//! `agent_state_change acting→waiting` plus `openclaw.exec.approval.requested` (the
//! approval, `metadata.promptId` = its id); `exec.approval.resolved` →
//! `agent_state_change waiting→acting` plus the event; `heartbeat`, `cron`, `tick`,
//! `presence`, `health` → `openclaw.<event>` with `metadata.internal = true`; any other
//! event `E` → `openclaw.E`, its payload kept.
//!
//! Envelope: `correlationId` = `runId`; timestamp = `payload.ts` (else the recorded `t`,
//! else now); `metadata.upstreamSeq` = the frame `seq` (per connection), `metadata.runSeq` = the
//! payload `seq` (per run); `channel`, `channelLabel`, `label`, `sessionKey`,
//! `sessionId`, `lane` are copied to metadata; `metadata.stream` names the agent stream;
//! data fields a well-known payload has no room for go to `metadata.extra`, other
//! payload fields (session snapshots) to `metadata.frame`; an agent event with
//! `isHeartbeat: true` is `metadata.internal`. The cumulative `text` of assistant frames
//! is not repeated (it is the sum of the deltas).
//!
//! `agentId` is the payload's `agentId`, else the agent of the session key
//! (`agent:<id>:…`), else the session key, else the decoder's source.
//!
//! Handshake and RPC frames: the challenge gives nothing; `hello-ok` gives
//! `openclaw.connected {protocol, server, policy}`; a refused request gives `error
//! {code: error.details.code | error.code, message}` (the error in `metadata.error`);
//! other answers give nothing (a `runId` they name is remembered); a `req` frame in a
//! capture gives `openclaw.request` with its `auth` values redacted.

mod config_file;
mod decode;
mod encode;
mod handshake;
pub mod probe;
mod transport;

pub use decode::{OpenClawDecoder, OpenClawStream, RunRef, RunTracker};
pub use encode::{EncodeError, OutgoingRequest, encode_control, encode_control_with_id};
pub use handshake::{
    ConnectConfig, ConnectFailure, FailureKind, Handshake, HandshakeState, HandshakeStep, Hello,
    PendingRequests, RpcOutcome, connect_frame, is_challenge,
};

pub use config_file::{NoToken, default_config_file, read_token, token_from_file};
pub use transport::{DEFAULT_URL, OpenClawConfig};

use patchbay_graph::{Adapter, ComponentType, options_of};

/// `type = "openclaw"`: as an output it talks both ways (aborts to the gateway, its
/// events out of `NAME.inbound`); as a source it only listens. Also the decoder of
/// `patchbay parse --protocol openclaw`.
pub const ADAPTER: Adapter = Adapter::new(
    "openclaw",
    "an OpenClaw gateway over a WebSocket",
    &[ComponentType::link(
        "openclaw",
        "an OpenClaw gateway: agent and chat events in, aborts out",
        transport::build_source,
        transport::build_output,
        options_of::<OpenClawConfig>,
    )],
)
.parse(parse_decoder)
.probes(&[probe::PROBE]);
use patchbay_signal::decode::StreamDecoder;

/// The decoder `patchbay parse --protocol openclaw` drives: NDJSON, one frame per line,
/// bare or recorded (`{"t","dir","frame"}`; only `dir: "in"` lines are decoded).
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(OpenClawStream::new(OpenClawDecoder::new(source)))
}
