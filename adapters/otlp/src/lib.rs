//! The OTLP adapter: the pure decoder of OpenTelemetry exports (OTLP/HTTP bodies, JSON or
//! protobuf: logs, traces, metrics) into signals. Codex, Gemini CLI and Claude Code all
//! export their telemetry this way; so does anything instrumented with the GenAI
//! semantic conventions.
//!
//! A body is first read into a small typed [`model`] (from JSON by [`Model::from_json`],
//! from protobuf by [`protobuf::decode`]; bounded by [`Limits`], what was cut counted in
//! [`Cuts`], a body of the wrong shape a [`ModelError`]); [`OtlpDecoder`] turns the model
//! into signals. [`parse_decoder`] reads files of OTLP/JSON bodies for `patchbay parse
//! --protocol otlp`. The [`receiver`] (`[sources.NAME] type = "otlp"`, [`OtlpConfig`]) is
//! an OTLP/HTTP and OTLP/gRPC endpoint answering as the OpenTelemetry Collector's: it
//! hands each POSTed body, or each `Export` call's message, to
//! [`OtlpDecoder::decode_json`] or [`OtlpDecoder::decode_protobuf`] with the
//! [`SignalKind`] of its path or method.
//!
//! The other way, the [`exporter`] (`[outputs.NAME] type = "otlp"`,
//! [`OtlpExporterConfig`]) sends signals to any OTLP receiver: [`encode`] turns each
//! signal into a log record, and tool calls and tasks into GenAI `execute_tool` and
//! `invoke_agent` spans, written as OTLP/JSON or protobuf, POSTed over HTTP or called
//! over gRPC. [`grpc`] is OTLP/gRPC on the wire, for both.
//!
//! # Signals
//!
//! `agentId` is the record's session: its `session.id`, `gen_ai.agent.id`,
//! `gen_ai.conversation.id` or `conversation.id` attribute (the record's, then the
//! resource's), else the resource's `service.name`, else the decoder's source. Claude
//! Code's `session.id` is the `session_id` its hooks send, so a session seen through both
//! is one agent; Codex's `conversation.id` is the thread id the `codex` adapter uses.
//! `correlationId` is the record's trace id, else its `prompt.id` / `prompt_id`; a tool
//! event's is its call id (as Claude Code's hooks do). A log record's time is its
//! `timeUnixNano`, else `observedTimeUnixNano` (Codex sends 0), else `event.timestamp`.
//! The event name is the `event.name` attribute (Claude Code's lacks the `claude_code.`
//! prefix its body has: it is put back), else the record's `eventName`.
//!
//! | OTLP                                                     | signal                                              |
//! |----------------------------------------------------------|-----------------------------------------------------|
//! | log `*.user_prompt` (Claude Code, Codex, Gemini CLI)     | `task_dispatch {taskId: prompt id (else the correlation), from: "user", to: agent, description: prompt}` (a `<REDACTED>` prompt is left out) |
//! | log `claude_code.tool_result`, `codex.tool_result`, `gemini_cli.tool_call` | `tool_call {toolName, callId, input: the arguments}` then `tool_result {success, output: the event's other attributes}` (the call is only reported once done) |
//! | log `*.tool_decision` with a known decision word         | `approval.decided {promptId: call id, value: allow / always / deny / cancel, by: its source lowercased}` (the word in `metadata.decision`); else passed on by name |
//! | log `*.api_error`                                        | `error {code: status_code / error.type, message: error}` |
//! | any other log event with input and output token counts (`claude_code.api_request`, `codex.sse_event` of `response.completed`, `gemini_cli.api_response`, `gen_ai.client.inference.operation.details`) | `token_usage {promptTokens, completionTokens, model, cost: cost_usd}`, by the token rule below |
//! | any other named log event `N`                            | `N` (`claude_code.plugin_loaded`, `codex.sse_event`, `gemini_cli.config`, …), the attributes as payload |
//! | log without an event name                                | `otel.log {body, severityNumber, severityText, eventName, attributes}`, resource and scope in metadata |
//! | span `chat` / `text_completion` / `generate_content` (`gen_ai.operation.name`, else the span name's first word) | `token_usage` (if it has `gen_ai.usage.*`, by the token rule), `completion {taskId: gen_ai.response.id / span id, success: status not ERROR, result: finish reasons}` |
//! | span `execute_tool`                                      | `tool_call {toolName: gen_ai.tool.name, callId: gen_ai.tool.call.id, input: gen_ai.tool.call.arguments}` at its start, `tool_result {success: status not ERROR, output: {result, error, durationMs}}` at its end |
//! | span `invoke_agent`                                      | `agent_state_change` idle → thinking at its start and thinking → done (error) at its end, `agentId`: `gen_ai.agent.id`, else `gen_ai.agent.name` |
//! | any other span (Gemini CLI's `llm_call`, `tool_call`, …) | `otel.span {name, kind, startTime, endTime, durationMs, statusCode, attributes, events}` |
//! | every metric data point                                  | `otel.metric {name, kind, unit, temporality, value / count, sum, min, max, startTime, attributes}` |
//! | token metric points (`claude_code.token.usage`, `gemini_cli.token.usage`, `gen_ai.client.token.usage`) | also `token_usage` per session and model, by the token rule |
//!
//! Mapped signals keep what their payload has no room for in `metadata` (`attributes`,
//! `service`, `scope`, `traceId`, `spanId`, `sessionId`, `promptId`); every signal is
//! schema-valid (repaired as a last resort).
//!
//! # The token rule: nothing counted twice
//!
//! The same tokens reach an OTLP receiver up to three times: Claude Code sends them in its
//! `api_request` events and its `token.usage` metric; Gemini CLI in `api_response`, in
//! `gen_ai.client.inference.operation.details` and in two metrics. So, per session:
//!
//! 1. The first kind of event (by name) or span that carries token counts is that
//!    session's source of `token_usage`; token counts of any other kind of event or span
//!    are not `token_usage` (they pass on by name, with `metadata.tokensCountedBy`).
//! 2. Token metrics become `token_usage` only for a session that has sent no token-bearing
//!    event. Since an exporter may send its metrics before its logs (Claude Code did),
//!    a metric's counts are held: dropped if a token-bearing event of the session follows,
//!    emitted when the next metric export of the session comes with none in between, or
//!    at [`OtlpDecoder::flush`] (the end of a `parse` stream). Of several token metrics
//!    of one session (Gemini CLI sends `gemini_cli.token.usage` and
//!    `gen_ai.client.token.usage` of the same calls), only the first one seen counts.
//!    Cumulative series are turned into increments.
//!
//! The metric points themselves always pass as `otel.metric`.

mod decode;
pub mod encode;
pub mod exporter;
pub mod grpc;
pub mod model;
pub mod protobuf;
pub mod receiver;

pub use decode::{OtlpDecoder, OtlpStream, TOKEN_METRICS};
pub use exporter::OtlpExporterConfig;
pub use model::{Cuts, Limits, Model, ModelError, SignalKind};
pub use receiver::OtlpConfig;

use patchbay_graph::{Adapter, ComponentType, options_of};
use patchbay_signal::decode::StreamDecoder;

/// The OTLP adapter: the `otlp` source (an OTLP/HTTP and OTLP/gRPC receiver,
/// [`OtlpConfig`]), the `otlp` output (an OTLP/HTTP or OTLP/gRPC exporter,
/// [`OtlpExporterConfig`]) and the decoder of `patchbay parse --protocol otlp` (no
/// wrapper, no probe).
pub const ADAPTER: Adapter = Adapter::new(
    "otlp",
    "OpenTelemetry OTLP exports (logs, traces, metrics) of agent CLIs and GenAI apps",
    &[
        ComponentType::source(
            "otlp",
            "OTLP/HTTP and OTLP/gRPC receiver (as the OpenTelemetry Collector's): logs, traces, metrics in",
            receiver::build_source,
            options_of::<OtlpConfig>,
        ),
        ComponentType::output(
            "otlp",
            "OTLP/HTTP or OTLP/gRPC exporter: signals out as logs, tool calls and tasks as GenAI spans",
            exporter::build,
            options_of::<OtlpExporterConfig>,
        ),
    ],
).parse(parse_decoder);

/// The decoder `patchbay parse --protocol otlp` drives: OTLP/JSON bodies (each an
/// `ExportLogsServiceRequest`, `ExportTraceServiceRequest` or
/// `ExportMetricsServiceRequest`, told apart by their top-level field), one per line or
/// each over several lines; what is not one is a counted bad input.
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(OtlpStream::new(OtlpDecoder::new(source)))
}
