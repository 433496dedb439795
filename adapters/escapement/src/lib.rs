//! The Escapement adapter: the pure part (no sockets).
//!
//! Escapement agents speak JSON frames over a WebSocket, one object per frame, routed on
//! their top-level `kind` (spec: `escapement-opentui-wire-schema.txt`):
//!
//! - [`EscapementDecoder`] turns the frames an agent sends (`event`, `phase`, `prompt`,
//!   `debug`, `control`) into signals; [`SeqDedupe`] drops frames replayed after a
//!   reconnect.
//! - [`encode_control`] turns `control.*` signals into the frames an agent accepts
//!   (`{"kind":"control","op":…}`, `{"kind":"answer",…}`).
//! - [`parse_decoder`] reads captures for `patchbay parse --protocol escapement`.
//!
//! And the transport, described by [`ADAPTER`] as `type = "escapement"`: one WebSocket connection
//! to an agent ([`EscapementConfig`]). Under `[outputs.NAME]` it sends `control.*`
//! signals as control and answer frames (types the protocol has no frame for are
//! refused and counted) and what the agent sends comes out of `NAME.inbound`; under
//! `[sources.NAME]` it only listens. It reconnects with capped exponential backoff and
//! jitter ([`Backoff`](patchbay_transport::Backoff)); frames replayed after a
//! reconnect are dropped by `seq`, and a new agent session (a `runner/started` with another `session-id`) starts the count
//! again ([`ReplayGuard`]).
//!
//! # Signals
//!
//! `event` frames (`{"kind":"event","seq","ts","event","data"}`); `agentId` is
//! `data.invokeid` (the decoder's source when absent) and `correlationId` is
//! `data.session-id`, as an opaque string:
//!
//! | event                     | signal                                                     |
//! |---------------------------|------------------------------------------------------------|
//! | `llm/delta` `text-delta`  | `text_delta {agentId, content: text}` (a delta without `type` is text) |
//! | `llm/delta` `thinking-delta` | `thinking {agentId, content: text}`                     |
//! | `llm/start`               | `agent_state_change {agentId, from: idle, to: thinking}`   |
//! | `llm/response`            | `token_usage` (when `usage` has a count) then `completion {taskId: session-id, success, result: stop-reason}` |
//! | `llm/tool-result`         | `tool_result {toolName: tool, success: !is-error, output: {content-preview}}` |
//! | `llm/error`               | `error {code: "llm/error", severity: error}`               |
//! | `llm/model-down`          | `error {code: "llm/model-down"}`, `warning` while `remaining > 0` |
//! | anything else             | the event name as the type, `data` as the payload          |
//!
//! `completion.success` is false for the stop reasons `max_tokens` and `refusal`. Its
//! `taskId` is the `session-id`, else the `invokeid`, else the source. A `token_usage`
//! lacking one of the two counts has it as 0 and names it in `metadata.missing`; a
//! response without any count gives no `token_usage` (never a fake 0/0).
//!
//! Other frames: `phase`, `prompt`, `debug` → `escapement.phase`, `escapement.prompt`,
//! `escapement.debug` with the frame (minus `kind`, `seq`, `ts`) as payload; `control`
//! frames an agent sends (`run-finished`) → `escapement.<op>` with `-` turned into `_`
//! (`escapement.run_finished`), never `control.*`, which would loop back to agents; an
//! `answer` frame found in a capture → `escapement.answer`; an unknown kind →
//! `escapement.<kind>`. A frame without `kind` but with an `event` (a raw transcript
//! line) is an event frame.
//!
//! Metadata: `upstreamSeq` (the frame's `seq`; `seq` is left to the sidecar, which numbers what it sends), `extra` (the `data` fields a well-known payload has no
//! room for, e.g. `model`), and any other top-level frame key under its own name
//! (`transcript/node-id`). The frame `ts` is the timestamp (else the recorded `t`, else
//! now).

mod decode;
mod encode;
mod replay;
mod transport;

pub use decode::{EscapementDecoder, EscapementStream, SeqDedupe};
pub use encode::{EncodeError, encode_control};
pub use replay::ReplayGuard;
pub use transport::EscapementConfig;

use patchbay_graph::{Adapter, ComponentType, options_of};

/// `type = "escapement"`: as an output it talks both ways (controls out, the agent's
/// frames in through `NAME.inbound`); as a source it only listens. Also the decoder of
/// `patchbay parse --protocol escapement`.
pub const ADAPTER: Adapter = Adapter::new(
    "escapement",
    "Escapement agents over a WebSocket",
    &[ComponentType::link(
        "escapement",
        "an Escapement agent's WebSocket: its events in, pause/step/answer controls out",
        transport::build_source,
        transport::build_output,
        options_of::<EscapementConfig>,
    )],
)
.parse(parse_decoder);
use patchbay_signal::decode::StreamDecoder;

/// The decoder `patchbay parse --protocol escapement` drives: NDJSON, one frame per line,
/// bare or recorded (`{"t","dir","frame"}`, only `dir: "in"` lines are decoded). Frames
/// whose `seq` was already seen are dropped, as after a reconnect.
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(EscapementStream::new(EscapementDecoder::new(source)))
}
