//! The Gemini CLI adapter: Google's Gemini CLI (`@google/gemini-cli` 0.61) through its
//! hooks, with a tool-call gate. Everything but the transport is pure (no I/O, no sockets,
//! no child processes).
//!
//! Gemini CLI speaks two ways a program can read:
//!
//! - **command hooks**: for each event, Gemini CLI runs the hooks its `settings.json`
//!   lists (`hooks.<Event>`, when `hooksConfig.enabled`), writes the event's JSON on
//!   their stdin and reads a decision from their stdout. [`HookDecoder`] turns the
//!   payloads into signals, [`gate`] writes the answer of a held `BeforeTool`, and
//!   [`settings`] puts patchbay's hooks into a `.gemini/settings.json` text and takes them
//!   out again;
//! - **`gemini --output-format stream-json`**: one event per line on stdout (`init`,
//!   `message`, `tool_use`, `tool_result`, `error`, `result`), read by
//!   [`StreamJsonDecoder`].
//!
//! [`parse_decoder`] reads captures of either (`patchbay parse --protocol gemini`).
//!
//! The transport, `type = "gemini_cli"` ([`GeminiCliConfig`]), is the endpoint the hooks
//! post to, `http://LISTEN/hook` (default `127.0.0.1:7880`; the endpoint is every hook
//! agent's, `patchbay_hooks`): each hook runs `patchbay hooks emit --agent gemini --url
//! URL`, which posts the event's JSON and prints the answer (`patchbay hooks install
//! --agent gemini` writes them). Under `[sources.NAME]` it only listens; under
//! `[outputs.NAME]` its `inputs` bring `control.answer` signals for the gate (other
//! signals are let through unused) and its signals come out of `NAME.inbound`.
//!
//! # Hook payloads
//!
//! Every payload has `session_id` (the `agentId` of every signal), `transcript_path`,
//! `cwd`, `hook_event_name` and `timestamp`: the timestamp is the signal's, the others go
//! to `metadata` (`sessionId`, `transcriptPath`, `cwd`, `hookEvent`), not into payloads.
//! The `correlationId` is the call's `callId` for tool events, else the prompt's task
//! while one is in progress, else the session.
//!
//! | event                 | signals                                                                    |
//! |-----------------------|----------------------------------------------------------------------------|
//! | `SessionStart`        | `gemini_cli.session_start {source}`, `agent_state_change →idle`             |
//! | `BeforeAgent`         | `task_dispatch {taskId: SESSION@TIMESTAMP, from: "user", to: session, description: prompt}`, `agent_state_change →thinking` |
//! | `BeforeModel`         | `gemini_cli.before_model {model, config, messageCount}` (`→thinking` if the agent was not thinking: after a call a hook blocked, or a notification) |
//! | `BeforeToolSelection` | `gemini_cli.before_tool_selection {model, config, messageCount, toolConfig?}` (the same) |
//! | `AfterModel` (every streamed chunk) | `gemini_cli.after_model {model, text, finishReason?, usageMetadata?}`; `text_delta {content: text}` when the chunk has text; `token_usage {promptTokens: promptTokenCount, completionTokens: candidatesTokenCount, model}` for the chunk with a `finishReason` only (each chunk repeats the response's running usage) |
//! | `BeforeTool`          | `tool_call {toolName: tool_name, callId, input: tool_input}`, `agent_state_change →acting` |
//! | `AfterTool`           | `tool_result {toolName, callId, success: no tool_response.error, output: tool_response}`, `agent_state_change →thinking` |
//! | `AfterAgent`          | `completion {taskId, success: true, result: prompt_response}`, `agent_state_change →idle` |
//! | `PreCompress`         | `gemini_cli.pre_compress {trigger}` (it fires before every turn, compressing or not) |
//! | `Notification`        | `gemini_cli.notification {notification_type, message, details}`, `agent_state_change →waiting` |
//! | `SessionEnd`          | `gemini_cli.session_end {reason}`, `agent_state_change →done`               |
//! | any other `E`         | `gemini_cli.<e in snake_case>` with its own fields                         |
//!
//! The hooks carry no id for a tool call: the `callId` of both hooks of a call is derived
//! from the session, the tool and its input ([`call_id`]). Each session's last state is
//! remembered so that `from` is right (idle when first seen). Long texts (prompts,
//! answers, tool output strings) are cut to 4 KiB.
//!
//! # `--output-format stream-json`
//!
//! One run is one session: `init`'s `session_id` is the `agentId`, the `taskId` and the
//! `correlationId` (a tool event's is its `tool_id`); each event's `timestamp` is the
//! signal's. A state change to the state the agent is in already is not emitted.
//!
//! | event                              | signals                                                         |
//! |------------------------------------|-----------------------------------------------------------------|
//! | `init`                             | `gemini_cli.init {session_id, model}`, `agent_state_change idle→thinking` |
//! | `message` role `user`              | `task_dispatch {taskId: session, from: "user", to: session, description: content}` |
//! | `message` role `assistant`         | `text_delta {content}` (`delta` in metadata)                      |
//! | `tool_use`                         | `tool_call {toolName: tool_name, callId: tool_id, input: parameters}`, `→acting` |
//! | `tool_result`                      | `tool_result {toolName (from its tool_use), callId: tool_id, success: status "success", output: {status, output?, error?}}`, `→thinking` |
//! | `error`                            | `error {message, severity: warning or error}`                    |
//! | `result`                           | (`error` if `status` is not `success`), `token_usage {promptTokens: stats.input_tokens, completionTokens: stats.output_tokens}` (the rest of `stats` in metadata), `completion {taskId: session, success, result: the assistant's text after the last tool call}`, `→idle` (`→error` if it failed) |
//! | other `T`                          | `gemini_cli.<t>` with the event's fields                         |
//!
//! A line that is not JSON, not an object, or an object with neither a string `type` nor
//! a `hook_event_name` is a counted bad input (an `error` signal with `code: bad_frame`).
//!
//! # The gate
//!
//! With `gate = { tools = ["run_shell_command"], timeout_ms = 30000, default = "deny" }`
//! a `BeforeTool` of a held tool waits: `agent_state_change → waiting` and
//! `approval.requested {promptId: callId, agentId, toolName, input, choices}` go out, and
//! the approval is on the graph's board; a `control.answer {promptId, value}` (`allow`,
//! `deny`, `cancel`, `ask`; without `promptId`: the oldest approval of the graph, when it
//! is this component's) decides it, else the `default` after `timeout_ms`. Then
//! `approval.decided {promptId, value, by}` and the state change; every other event is
//! answered `{}` at once.
//!
//! A held `BeforeTool` is answered with [`hook_answer`] (exit status 0, JSON on stdout:
//! `{"decision": "allow"}`, `{"decision": "deny", "reason"}`, for `cancel` also
//! `"continue": false`, and `{}` for `ask`); the approval signals use the graph's shared
//! vocabulary (`patchbay_graph::approvals`): [`gate::approval_requested`],
//! [`gate::approval_decided`].

pub mod decode;
mod fields;
pub mod gate;
pub mod probe;
pub mod settings;
pub mod stream;
mod transport;

pub use decode::{GeminiHooks, HookDecoder, agent_of, call_id, event_type, task_id};
pub use gate::hook_answer;
pub use settings::SettingsError;
pub use stream::{GeminiStream, StreamJsonDecoder};
pub use transport::{DEFAULT_LISTEN, GeminiCliConfig};

use patchbay_graph::{Adapter, ComponentType, options_of};
use patchbay_signal::decode::StreamDecoder;

/// `type = "gemini_cli"`: the hook endpoint (a source that listens, or an output that
/// also takes `control.answer` for the gate), and the decoder of `patchbay parse
/// --protocol gemini` (no wrapper), and the probe `local:gemini-cli` ([`probe`]).
pub const ADAPTER: Adapter = Adapter::new(
    "gemini_cli",
    "Google Gemini CLI (command hooks, --output-format stream-json)",
    &[ComponentType::link(
        "gemini_cli",
        "Gemini CLI's hook endpoint: every hook event in, control.answer for the gate",
        patchbay_hooks::build_source::<transport::Gemini>,
        patchbay_hooks::build_output::<transport::Gemini>,
        options_of::<GeminiCliConfig>,
    )],
)
.protocol("gemini")
.parse(parse_decoder)
.probes(&[probe::PROBE]);

/// The decoder `patchbay parse --protocol gemini` drives: NDJSON whose lines are
/// `gemini --output-format stream-json` events or hook payloads (a JSON object with
/// `hook_event_name`, one per line), in any mix; see [`GeminiStream`].
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(GeminiStream::new(source))
}
