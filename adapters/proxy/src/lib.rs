//! patchbay's LLM transports, generic over the API's decoder ([`Api`]): the OpenAI-compatible
//! ([`patchbay_openai::ChatDecoder`]) and Anthropic ([`patchbay_anthropic::MessagesDecoder`])
//! component types `openai` and `anthropic`.
//!
//! **Tap proxy** (`[sources.NAME] mode = "proxy"`, `listen`, `upstream`): an HTTP server on
//! a loopback address that forwards every request under `/v1/` to the upstream (method,
//! headers minus hop-by-hop ones and `accept-encoding`, body) and relays the answer to the
//! client chunk by chunk, byte for byte, as each chunk is read. The same bytes are fed to
//! the decoder on the side ([`Tap`]): decoding is inline (it is fast) and the signals go to
//! the graph through a bounded channel (4096) drained by a task ([`Emitter`]): the relay
//! never waits for the graph; when the channel is full a signal is dropped and counted in
//! the source's `dropped` counter. A generation request (`POST …/chat/completions`,
//! `POST …/messages`) becomes one `task_dispatch {taskId: request id, from: User-Agent or
//! address, to: model, description: last user message}` (correlation id = the request
//! id, a ULID), then the decoded response (a non-streaming body gives the signals of its
//! streaming form); every signal carries `metadata.requestId`. Upstream errors reach the
//! client unchanged and become an `error` signal (`code` = the error body's type, else
//! `http_<status>`); no answer within `timeout_ms` → 504 with a JSON error; an unreachable
//! upstream → 502; a stream cut before its end → `error {code: "truncated_stream"}`; a
//! client that hangs up cancels the upstream request (`error {code: "client_cancelled",
//! severity: "warning"}`). API keys pass through and are never logged. Health: the
//! upstream's `/v1/models` is polled at start and every `health_interval_ms` → `Ok`
//! ("N models at URL") or `Recovering` with the error.
//!
//! **Prompt mode** (`[outputs.NAME] mode = "prompt"`, `url`, `model`, `api_key`): each
//! `prompt {text[, model]}` signal starts one streaming request, announced by a
//! `task_dispatch`; its signals share a new correlation id (the stream's own id goes to
//! `metadata.streamId`) and come out of `NAME.inbound`.

mod api;
mod component;
mod config;
pub mod probe;
mod proxy;
mod tap;

use patchbay_graph::registry::{OutputBuilder, SourceBuilder};
use patchbay_graph::{Adapter, ComponentType, options_of};

/// `name` in proxy mode: a tap proxy in front of its API.
const fn proxy_source(
    name: &'static str,
    summary: &'static str,
    build: SourceBuilder,
) -> ComponentType {
    ComponentType::source(name, summary, build, options_of::<LlmConfig>)
}

/// `name` in prompt mode: an output that sends prompts to its API, the answers out of
/// `NAME.inbound`.
const fn prompt_output(name: &'static str, build: OutputBuilder) -> ComponentType {
    let summary = "prompt mode: sends prompts, the streamed answer comes out of NAME.inbound";
    ComponentType::output(name, summary, build, options_of::<LlmConfig>).inbound()
}

/// `openai` and `anthropic`, each as a source (proxy mode) and as a two-way output (prompt
/// mode, signals out of `NAME.inbound`, queue blocking when full so that no prompt is
/// dropped).
pub const ADAPTER: Adapter = Adapter::new(
    "proxy",
    "LLM APIs (OpenAI-compatible, Anthropic): a tap proxy, and prompts from the graph",
    &[
        proxy_source(
            "openai",
            "a tap proxy in front of an OpenAI-compatible API (Ollama, LM Studio, OpenAI)",
            component::build_openai_source,
        ),
        proxy_source(
            "anthropic",
            "a tap proxy in front of the Anthropic Messages API",
            component::build_anthropic_source,
        ),
        prompt_output("openai", component::build_openai_output),
        prompt_output("anthropic", component::build_anthropic_output),
    ],
)
.probes(&probe::PROBES);

pub use api::{ANTHROPIC_VERSION, Api, RequestSummary, ResponseDecoder, error_body};
pub use component::{PromptOutput, ProxySource};
pub use config::{
    LlmConfig, Mode, PromptConfig, ProxyConfig, Secret, parse_base_url, parse_loopback,
};
pub use proxy::{
    DESCRIPTION_MAX, MAX_REQUEST_BODY, ProxyState, http_client, poll_models, router, serve,
};
pub use tap::{EMIT_BUFFER, Emitter, MAX_DECODED_BODY, Tap, TapRequest};
