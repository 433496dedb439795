//! The Anthropic adapter's decoders (Messages API).
//!
//! - [`MessagesDecoder`]: Messages streaming events (and whole `message` bodies) →
//!   signals (the mapping, event by event, is on the type).
//! - [`AnthropicStreamDecoder`]: the same over raw bytes (SSE or one JSON event per line),
//!   what `patchbay parse --protocol anthropic` drives ([`parse_decoder`]).
//! - [`decode_response`]: a non-streaming Messages response body → the signals its
//!   streaming form would give.

mod messages;
mod stream;

use patchbay_graph::Adapter;
use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::now_ms;

pub use messages::MessagesDecoder;
pub use stream::AnthropicStreamDecoder;

/// The decoder of `patchbay parse --protocol anthropic` (the `anthropic` components are the LLM
/// proxy's).
pub const ADAPTER: Adapter = Adapter::new(
    "anthropic",
    "Anthropic Messages (streamed or whole), for `parse`",
    &[],
)
.parse(parse_decoder);

/// The decoder `patchbay parse --protocol anthropic` drives: raw SSE text or one JSON
/// event per line.
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(AnthropicStreamDecoder::new(source))
}

/// Decodes a non-streaming Messages response body (or an error body) from `source`,
/// stamped now. See [`MessagesDecoder::decode_response_at`].
pub fn decode_response(source: &str, body: &str) -> Vec<Decoded> {
    let mut out = Vec::new();
    MessagesDecoder::new(source).decode_response_at(body, now_ms(), &mut out);
    out
}
