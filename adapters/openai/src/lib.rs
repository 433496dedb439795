//! The OpenAI-compatible adapter's decoders (OpenAI, Ollama, LM Studio, vLLM).
//!
//! - [`ChatDecoder`]: `chat.completion.chunk` payloads (and whole `chat.completion`
//!   bodies) → signals (the mapping, field by field, is on the type).
//! - [`OpenAiStreamDecoder`]: the same over raw bytes (SSE or one JSON chunk per line),
//!   what `patchbay parse --protocol openai` drives ([`parse_decoder`]).
//! - [`decode_response`]: a non-streaming response body → the signals its streaming form
//!   would give.
//! - [`model_ids`]: `/v1/models` and Ollama `/api/tags` bodies → model ids.

mod chat;
mod models;
mod stream;

use patchbay_graph::Adapter;
use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::now_ms;

pub use chat::ChatDecoder;
pub use models::{ModelListError, model_ids};
pub use stream::OpenAiStreamDecoder;

/// The decoder of `patchbay parse --protocol openai` (the `openai` components are the LLM
/// proxy's).
pub const ADAPTER: Adapter = Adapter::new(
    "openai",
    "OpenAI-compatible chat completions (streamed or whole), for `parse`",
    &[],
)
.parse(parse_decoder);

/// The decoder `patchbay parse --protocol openai` drives: raw SSE text or one JSON chunk
/// per line.
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(OpenAiStreamDecoder::new(source))
}

/// Decodes a non-streaming `chat.completion` body (or an error body) from `source`, stamped
/// now. See [`ChatDecoder::decode_response_at`].
pub fn decode_response(source: &str, body: &str) -> Vec<Decoded> {
    let mut out = Vec::new();
    ChatDecoder::new(source).decode_response_at(body, now_ms(), &mut out);
    out
}
