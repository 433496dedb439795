//! The Codelia adapter: the pure part (no child process, no sockets).
//!
//! A Codelia runtime speaks JSON-RPC 2.0 as NDJSON (spec: `codelia-ui-protocol.txt`): the
//! UI sends `initialize`, `run.start`, `run.cancel`; the runtime streams `agent.event`
//! and `run.status` notifications and asks the UI through `ui.*.request` requests.
//!
//! - [`CodeliaDecoder`] turns what the runtime sends into signals, and tracks what a
//!   transport needs: the current run id and the runtime's requests still unanswered.
//! - [`UiClient`] is the UI side for a transport that speaks to a runtime as its UI:
//!   it builds `initialize`, turns `prompt` and `control.*` signals into requests and
//!   answers, and decodes through its own [`CodeliaDecoder`].
//! - [`parse_decoder`] reads captures for `patchbay parse --protocol codelia`.
//!
//! And the transports:
//!
//! - `type = "codelia"` ([`ADAPTER`], [`CodeliaConfig`]): patchbay starts the runtime
//!   (`command`, `cwd`, `env`) and is its UI: it sends `initialize`, decodes what the
//!   runtime sends, and, declared under `[outputs.NAME]`, sends `run.start` for `prompt
//!   {text}`, `run.cancel` for `control.cancel`/`control.interrupt` and the response to
//!   a pending `ui.*.request` for `control.answer` (other types are refused and
//!   counted); the decoded signals come out of `NAME.inbound`. Under `[sources.NAME]`
//!   it only listens. The runtime's stderr goes to patchbay's log.
//! - [`wrap()`]: `patchbay wrap --protocol codelia -- COMMAND…` relays a UI's stdio to the
//!   runtime byte for byte and publishes what it decodes ([`WrapObserver`]) to a running
//!   patchbay's `POST /signal`.
//!
//! # Signals
//!
//! `agentId` is the decoder's agent id (its source unless set with
//! [`CodeliaDecoder::with_agent_id`]: the protocol names no agent); `correlationId` is
//! the `run_id` (the current run's when a message has none).
//!
//! | runtime → UI                        | signal                                              |
//! |-------------------------------------|-----------------------------------------------------|
//! | `agent.event` `text`                | `text_delta {content}`                               |
//! | `agent.event` `reasoning`           | `thinking {content}`                                 |
//! | `agent.event` `tool_call`           | `tool_call {toolName: tool, callId: tool_call_id, input: args}` |
//! | `agent.event` `tool_result`         | `tool_result {toolName, callId, success: !is_error, output}` (a non-object `result` is `output: {result}`) |
//! | `agent.event` `final`               | `completion {taskId: run_id, success: true, result: content}` |
//! | `agent.event` `step_start`          | `agent_state_change thinking→acting` (reason: the step title: a step is a tool run) |
//! | `agent.event` `step_complete`       | `agent_state_change acting→thinking` (reason: its status; back to the model) |
//! | `agent.event` `llm.retry`           | `error {code: "llm.retry", severity: warning}`       |
//! | `agent.event` other `T`             | `codelia.T`, the event (minus `type`) as payload     |
//! | `run.status` `running`              | `agent_state_change →acting` (from the run's last state, idle at first) |
//! | `run.status` `awaiting_ui`          | `agent_state_change →waiting`                        |
//! | `run.status` `completed`            | `agent_state_change →done`                           |
//! | `run.status` `error`                | `error {code: "run_error"}` and `agent_state_change →error` |
//! | `run.status` `cancelled`            | `agent_state_change →idle`, reason `cancelled`       |
//! | other notification `M`              | `codelia.M` (`codelia.run.context`, `codelia.run.diagnostics`, …), params as payload |
//! | request (has an `id`)               | `codelia.request {method, params, promptId: id}`, answered by `control.answer` |
//! | response                            | `codelia.response {id, result | error}` (and `method` when [`UiClient`] sent it) |
//!
//! The `from` of a state change is the run's last known state (so `running` after
//! `awaiting_ui` is `waiting→acting`). Event fields a payload has no room for go to
//! `metadata.extra`; `agent.event`'s `seq` and `meta` go to `metadata.seq` and
//! `metadata.meta`; a `run.status` `message` is the `reason` (in `metadata.message` for
//! `cancelled`). The event's `timestamp` is the signal's (else the recorded `t`, else
//! now). A `final` without any run id has `taskId: "unknown-run"`.

mod client;
mod decode;
mod transport;
mod wrap;

pub use client::{EncodeError, UiClient};
pub use decode::{CodeliaDecoder, CodeliaStream, PendingRequest};
pub use transport::CodeliaConfig;
pub use wrap::{DEFAULT_PUBLISH_URL, WrapError, WrapObserver, wrap, wrap_io};

use patchbay_graph::{Adapter, BoxFuture, ComponentType, WrapRequest, options_of};
use patchbay_signal::decode::StreamDecoder;

/// `type = "codelia"`: as an output it talks both ways (prompts and controls to the
/// runtime, its messages out of `NAME.inbound`); as a source it only listens. Also the
/// decoder of `patchbay parse --protocol codelia` and the wrapper of `patchbay wrap
/// --protocol codelia`.
pub const ADAPTER: Adapter = Adapter::new(
    "codelia",
    "Codelia agent runtimes over stdio (JSON-RPC)",
    &[ComponentType::link(
        "codelia",
        "a Codelia runtime started as a child process: prompts and controls in, its messages out",
        transport::build_source,
        transport::build_output,
        options_of::<CodeliaConfig>,
    )],
)
.parse(parse_decoder)
.wrap(wrap_request);

/// `patchbay wrap --protocol codelia`: [`wrap()`] on the request (it has no `--name`).
fn wrap_request(
    request: WrapRequest,
) -> BoxFuture<Result<i32, patchbay_graph::descriptor::WrapError>> {
    Box::pin(async move { wrap(request.command, request.to).await.map_err(Into::into) })
}

/// The decoder `patchbay parse --protocol codelia` drives: NDJSON, one JSON-RPC message
/// per line, bare or recorded (`{"t","dir","msg"}`; only `dir: "in"`, runtime → UI, is
/// decoded; `out`, `stderr`, `note` and `exit` lines are skipped).
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(CodeliaStream::new(CodeliaDecoder::new(source)))
}
