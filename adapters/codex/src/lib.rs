//! The Codex adapter: the pure decoder of OpenAI's Codex CLI, and `type = "codex"`, which
//! runs `codex app-server` and drives it.
//!
//! Codex speaks two ways a program can read:
//!
//! - `codex app-server`: JSON-RPC 2.0 as NDJSON over stdio, without the `"jsonrpc"`
//!   field. The client sends `initialize`, `thread/start`, `turn/start`; the server
//!   answers, streams notifications (each with a top-level `emittedAtMs`) and asks the
//!   client through requests (`item/commandExecution/requestApproval`, …).
//! - `codex exec --json`: one event per line (`thread.started`, `turn.started`,
//!   `item.started` / `item.completed`, `turn.completed` with `usage`, `turn.failed`,
//!   `error`); whole messages, no text deltas.
//!
//! [`CodexDecoder`] turns both into signals and tracks what a transport needs: each
//! thread's state and turn, and the server's requests still unanswered
//! ([`CodexDecoder::pending`], [`CodexDecoder::take_pending`]). [`parse_decoder`] reads
//! captures for `patchbay parse --protocol codex`: NDJSON whose lines are recorded
//! transcript lines (`{"dir": "server->client" | "client->server", "t", "msg"}`), bare
//! JSON-RPC messages or exec events.
//!
//! # Signals
//!
//! `agentId` is the thread id (`threadId`, exec's `thread_id`; a message without one
//! belongs to the last thread seen; the decoder's source before any thread); the
//! `correlationId` is the turn id when known (app-server only: exec names no turn). A
//! notification's `emittedAtMs` is the signal's `timestamp`; in a transcript, a message
//! without it (responses, requests) is timed by the transcript's clock (its `t` plus the
//! offset between `t` and `emittedAtMs` of the last line that had both); else now.
//!
//! | app-server (server → client)                  | signal                                                    |
//! |-----------------------------------------------|-----------------------------------------------------------|
//! | `item/agentMessage/delta`                     | `text_delta {content: delta}` (`itemId` in metadata)       |
//! | `item/reasoning/textDelta`, `…/summaryTextDelta` | `thinking {content: delta}`                            |
//! | `item/started` `commandExecution`             | `tool_call {toolName: "commandExecution", callId: item id, input: {command, cwd}}` |
//! | `item/started` `fileChange`                   | `tool_call {toolName: "fileChange", input: {changes}}`     |
//! | `item/started` `mcpToolCall`                  | `tool_call {toolName: the MCP tool, input: its arguments}` |
//! | `item/completed` of those                     | `tool_result {success, output: {status, exitCode?, output?: aggregatedOutput, changes?, result?, error?, declined?: true}}`; success: `completed` (and exit code 0 or none, no MCP error) |
//! | `item/started` `userMessage`                  | `task_dispatch {taskId: turn id, from: "user", to: thread, description: its text}` |
//! | other `item/started`, `item/completed`        | `codex.item/started`, `codex.item/completed` (the final `agentMessage` too: its text went out as deltas) |
//! | `thread/tokenUsage/updated`                   | `token_usage` from `tokenUsage.last` (one model request's increment; `total` in metadata) |
//! | `turn/started`                                | `agent_state_change →thinking`                             |
//! | `turn/completed`                              | (`error` if `failed`), `completion {taskId: turn id, success: status completed, result: last agent message}`, `agent_state_change →idle` (`→error` if failed) |
//! | `thread/status/changed` `waitingOnApproval`   | `agent_state_change →waiting` (and back `→thinking` when the flag clears) |
//! | `thread/status/changed` `systemError`         | `agent_state_change →error`                                |
//! | `error`                                       | `error {code: codexErrorInfo, message}` (warning if `willRetry`) |
//! | `warning`                                     | `error {code: "warning", severity: warning}`               |
//! | request `item/commandExecution/requestApproval`, `item/fileChange/requestApproval` | `agent_state_change →waiting`, `approval.requested {promptId: THREAD:ID (the thread and the request id: unique across every Codex of a graph), agentId, toolName, input, choices}` (params in `metadata.codex`) |
//! | other request `M`                             | `codex.M` (params; `promptId` in metadata), kept pending too |
//! | `serverRequest/resolved`                      | `approval.decided {promptId, value, by: "client"}` when the client's answer was seen, else `codex.serverRequest/resolved` |
//! | other notification `M`                        | `codex.M`, params as payload (`codex.thread/started`, `codex.account/rateLimits/updated`, …) |
//! | response                                      | `codex.response {id, result}`; an error response: `error {code, message}` |
//!
//! | exec event                                     | signal                                                   |
//! |------------------------------------------------|----------------------------------------------------------|
//! | `thread.started`                               | `codex.thread.started` (the thread is remembered)         |
//! | `turn.started`                                 | `agent_state_change →thinking`                            |
//! | `item.started` `command_execution` (`file_change`, `mcp_tool_call`) | `tool_call` as above                   |
//! | `item.completed` of those                      | `tool_result` as above (`exit_code`, `aggregated_output`) |
//! | `item.completed` `agent_message`               | `text_delta {content: text}` (the whole message)          |
//! | `item.completed` `reasoning`                   | `thinking {content: text}`                                |
//! | `item.completed` `error`                       | `error {code: "warning", severity: warning}`              |
//! | `turn.completed`                               | `token_usage {promptTokens: input_tokens, completionTokens: output_tokens}` (the rest in metadata), `completion {taskId: thread id, success: true, result: last message}`, `agent_state_change →idle` |
//! | `turn.failed`                                  | `error {code: "turn_failed"}`, `completion {success: false}`, `agent_state_change →error` |
//! | `error`                                        | `error`                                                   |
//! | other `T`                                      | `codex.T` (the event minus `type`)                        |
//!
//! The `from` of a state change is the thread's last state (idle at first); a change to
//! the state the thread is in already is not emitted. Choices are the request's
//! `availableDecisions` (strings as they are, an object entry by its single key; the
//! four of the schema when absent). The approval signals are built with the graph's
//! shared vocabulary (`patchbay_graph::approvals`): `approval.decided`'s `value` is the
//! common word (`accept` → `allow`, `acceptForSession` and the `…Amendment` decisions →
//! `always`, `decline` → `deny`, `cancel`; an unknown word as it is), Codex's own word in
//! `metadata.decision`; each pending approval carries its board entry
//! ([`PendingApproval::approval`], program [`PROGRAM`]). Item fields a payload has no
//! room for go to `metadata.codex`.

mod decode;
pub mod probe;
mod transport;
mod wrap;

pub use decode::{CodexDecoder, CodexStream, PROGRAM, PendingApproval};
pub use transport::{AppServer, CodexConfig};
pub use wrap::{WrapError, wrap};

use patchbay_graph::{Adapter, BoxFuture, ComponentType, WrapRequest, options_of};
use patchbay_signal::decode::StreamDecoder;

/// `type = "codex"`: as an output patchbay starts `codex app-server` and drives it
/// (`prompt {text}` → `turn/start`, `control.interrupt` / `control.cancel` →
/// `turn/interrupt`, `control.answer` → the pending approval; its events out of
/// `NAME.inbound`); as a source it only listens. Also the decoder of `patchbay parse
/// --protocol codex`, and the wrapper of `patchbay wrap --protocol codex -- codex exec
/// --json …`, which publishes a run to a running patchbay.
pub const ADAPTER: Adapter = Adapter::new(
    "codex",
    "OpenAI Codex CLI (app-server JSON-RPC, exec --json)",
    &[ComponentType::link(
        "codex",
        "`codex app-server` started as a child process: prompts, controls and approvals in, its events out",
        transport::build_source,
        transport::build_output,
        options_of::<CodexConfig>,
    )],
).parse(parse_decoder).wrap(wrap_request).probes(&[probe::PROBE]);

/// `patchbay wrap --protocol codex`: [`wrap()`] on the request (it has no `--name`).
fn wrap_request(
    request: WrapRequest,
) -> BoxFuture<Result<i32, patchbay_graph::descriptor::WrapError>> {
    Box::pin(async move { wrap(request.command, request.to).await.map_err(Into::into) })
}

/// The decoder `patchbay parse --protocol codex` drives: NDJSON, each line a recorded
/// transcript line (`{"dir", "t", "msg"}`: `server->client` decoded, `client->server`
/// only observed for the answers to approvals), a bare `codex app-server` JSON-RPC
/// message, or a `codex exec --json` event. A line that is not a JSON object is a counted
/// bad input.
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(CodexStream::new(CodexDecoder::new(source)))
}
