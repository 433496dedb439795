//! The OpenCode adapter: a client of `opencode serve`, OpenCode's HTTP server. `type =
//! "opencode"` ([`OpenCodeConfig`]) reads its event stream and, as an output, sends it
//! prompts, aborts and the answers to its permissions; the probe `local:opencode` finds
//! it on `127.0.0.1:4096`. The decoding and the requests are pure (no sockets, no HTTP
//! client) and tested on captures; the transport (`transport`) only connects.
//!
//! A client subscribes to `GET /event?directory=…` (raw server-sent events, each `data:`
//! one JSON event `{id, type, properties}`), creates a session (`POST /session {title}`),
//! starts turns (`POST /session/{id}/prompt_async {parts: [{type: "text", text}]}`,
//! answered 204) and answers permissions (`permission.asked` →
//! `POST /permission/{id}/reply {"reply": "once" | "always" | "reject"}`, answered `true`).
//!
//! [`EventDecoder`] turns the events into signals and tracks what a transport needs: the
//! sessions seen ([`EventDecoder::sessions`]), each one's state, and the permissions still
//! unanswered ([`EventDecoder::pending`], [`EventDecoder::take_pending`]);
//! [`EventStream`] reads the raw SSE. The [`client`] module builds the requests
//! ([`prompt`], [`create_session`], [`abort`], [`reply`], and [`encode_control`] for
//! control signals). [`parse_decoder`] reads a capture of the `/event` stream for
//! `patchbay parse --protocol opencode`.
//!
//! # Signals
//!
//! `agentId` is the session id (`sessionID`, in the properties or in their `info` or
//! `part`; an event without one belongs to the last session seen; the decoder's source
//! before any). The `correlationId` is the id of the message an event is about (a part's
//! `messageID`, `info.id` of `message.updated`, `tool.messageID` of a permission); for
//! the session's own events (status, idle, error) the user message being answered, when
//! one is. The `timestamp` is `properties.time` when the event has it, else the time
//! OpenCode's event id carries ([`id_time`]), else now.
//!
//! | event (`type`)                                   | signal                                                   |
//! |--------------------------------------------------|----------------------------------------------------------|
//! | `message.part.delta` `{field: "text", delta}`    | `text_delta {content: delta}` (`thinking` for a `reasoning` part; `partId` in metadata) |
//! | `message.part.updated` `text` of a user message  | `task_dispatch {taskId: message id, from: "user", to: session, description: text}` (once per message) |
//! | `message.part.updated` `text` / `reasoning`      | `text_delta` / `thinking` of what it adds to the deltas sent; `opencode.message.part.updated` when it adds nothing |
//! | `message.part.updated` `tool`, `running` (or `pending` with its input) | `tool_call {toolName: tool, callId, input}` once per call (`partId` in metadata), `agent_state_change →acting` |
//! | `message.part.updated` `tool`, `completed`       | `tool_result {success: true, output: {output, exitCode?}}` (the rest of the state in `metadata.opencode`), `→thinking` when no other call runs |
//! | `message.part.updated` `tool`, `error`           | `tool_result {success: false, output: {error}}`, `→thinking` |
//! | `message.part.updated` `step-start`              | `agent_state_change →thinking`                           |
//! | `message.part.updated` `step-finish`             | `token_usage {promptTokens: tokens.input, completionTokens: tokens.output, model, cost}` (`total`, `reasoning`, `cache`, `reason` in metadata) |
//! | `session.status` `busy`                          | `agent_state_change →thinking` (from idle, done or error) |
//! | `session.status` `idle`, `session.idle`          | `completion {taskId: user message, success, result: last text}` if a turn was in progress, `agent_state_change →idle` (once) |
//! | `session.status` `retry`                         | `error {code: "retry", severity: warning, message}`      |
//! | `session.error` `{error: {name, data: {message}}}` | `error {code: name, message}`, `agent_state_change →error` (the turn's completion fails) |
//! | `permission.asked` `{id, sessionID, permission, patterns, metadata, always, tool}` | `agent_state_change →waiting`, `approval.requested {promptId: id, agentId, toolName: permission, input: metadata + {patterns, always}, choices: ["once", "always", "reject"]}` (the properties in `metadata.opencode`) |
//! | `permission.replied` `{requestID, reply}`        | `approval.decided {promptId, value: once → allow, always → always, reject → deny, by: "opencode"}` (`reply` in metadata), `→acting` (allowed) or `→thinking` (rejected) |
//! | any other `T` (`server.connected`, `session.created`, `message.updated`, …) and the above when they change nothing | `opencode.T`, `properties` as payload; `plugin.added`, `catalog.updated`, `reference.updated`, `integration.updated`, `server.heartbeat` with `metadata.internal = true` |
//!
//! The `from` of a state change is the session's last state (idle at first); a change to
//! the state the session is in already is not emitted (the event passes as `opencode.T`).
//! An event that is not JSON, not an object, or has no string `type` is a counted bad
//! input. The approval signals use the graph's shared vocabulary
//! (`patchbay_graph::approvals`); each pending permission carries its board entry
//! ([`PendingPermission::approval`], program [`PROGRAM`]).
//!
//! # Controls
//!
//! | signal                                            | request ([`encode_control`])                          |
//! |---------------------------------------------------|-------------------------------------------------------|
//! | `prompt {text, sessionId?}`                       | `POST /session/{id}/prompt_async {parts: [{type: "text", text}]}` |
//! | `control.interrupt`, `control.cancel` `{sessionId?}` | `POST /session/{id}/abort`                          |
//! | `control.answer {promptId, value}`                | `POST /permission/{promptId}/reply {"reply"}`: allow → `once`, always → `always`, deny, cancel and `cancelled: true` → `reject`; `ask` → nothing ([`EncodeError::LeftToOpenCode`]) |
//! | anything else                                     | [`EncodeError::Unsupported`]                           |
//!
//! The session is the payload's `sessionId` (or `agentId`), else the transport's current
//! one. Path segments are percent-encoded; [`Request::target`] adds the `directory`
//! query.
//!
//! # The component
//!
//! `type = "opencode"` ([`OpenCodeConfig`]) connects through the transport layer: `GET
//! /event` is its connection (health `ok` while it is open, `recovering` while the server
//! is away), decoded as above. On each connection it lists the permissions waiting
//! (`GET /permission`, [`permissions`]): one never seen is reported as if asked now, one
//! seen but gone is `approval.decided {value: "cancel", by: "opencode"}`. As an output it
//! sends the controls: prompts and aborts one at a time in order (the session created
//! with [`create_session`] at the first prompt when none is configured), answers at once
//! with [`answer`] (a `deny` tells the model why, so that the turn goes on; `cancel`
//! stops it), each call in a task of its own. A call OpenCode refuses is a refused
//! control with the status and OpenCode's reason. The gate holds the permissions of the
//! tools it names until an answer or its timeout (then its `default`); the decision's
//! `by` is the answer's source (or `timeout`) when patchbay sent it.

pub mod client;
mod decode;
pub mod probe;
mod transport;

pub use client::{
    EncodeError, Method, PROMPT, Request, abort, answer, create_session, encode_control, events,
    messages, permissions, prompt, reply, reply_word,
};
pub use decode::{
    CHOICES, EventDecoder, EventStream, INTERNAL_EVENTS, PROGRAM, PendingPermission, id_time,
};
pub use transport::{DEFAULT_URL, OpenCodeConfig, OpenCodeDefaults};

use patchbay_graph::{Adapter, ComponentType, options_of};
use patchbay_signal::decode::StreamDecoder;

/// `type = "opencode"`: as an output a client of `opencode serve` that sends prompts,
/// aborts and answers (`prompt {text}` → `prompt_async`, `control.interrupt` /
/// `control.cancel` → `abort`, `control.answer` → the permission's reply; its events out of
/// `NAME.inbound`); as a source it only listens. Also the probe `local:opencode` and the
/// decoder of `patchbay parse --protocol opencode`.
pub const ADAPTER: Adapter = Adapter::new(
    "opencode",
    "OpenCode (`opencode serve` HTTP API and /event stream)",
    &[ComponentType::link(
        "opencode",
        "a running `opencode serve`: prompts, controls and permission answers in, its /event stream out",
        transport::build_source,
        transport::build_output,
        options_of::<OpenCodeConfig>,
    )],
).parse(parse_decoder).probes(&[probe::PROBE]);

/// The decoder `patchbay parse --protocol opencode` drives: a raw SSE capture of
/// `GET /event`, each event's `data` one OpenCode event.
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(EventStream::new(EventDecoder::new(source)))
}
