//! Server-sent events for patchbay.
//!
//! - [`SseParser`]: the event-stream parser of the HTML standard, incremental over bytes
//!   split anywhere (`event:`, multi-line `data:`, `id:` kept for `Last-Event-ID`,
//!   `retry:`, comments, CRLF/LF/CR, a leading BOM), which also dispatches a last event
//!   cut off by the end of the stream.
//! - [`DataFramer`]: payloads from either raw SSE or one JSON payload per line, for the
//!   LLM stream decoders that accept both.
//! - [`DataStreamDecoder`]: the LLM stream decoders' `StreamDecoder` over a
//!   [`DataFramer`], each payload decoded by a [`DataDecoder`] (OpenAI chunks, Anthropic
//!   events).
//! - [`SseDecoder`]: the generic SSE source decoder (`patchbay parse --protocol sse`),
//!   whose events carry generic JSON envelopes.
//! - With the `http` feature: [`http`], asking for an event stream over HTTP and
//!   checking that one answers.
//! - With the `source` feature (default): the `sse` source ([`ADAPTER`],
//!   [`SseSource`]), which subscribes to a stream over HTTP, reconnects with backoff and
//!   resumes with `Last-Event-ID`.

mod data_stream;
mod decoder;
mod framing;
#[cfg(feature = "http")]
pub mod http;
mod parser;
#[cfg(feature = "source")]
mod source;

pub use data_stream::{DataDecoder, DataStreamDecoder, data_payload};
pub use decoder::{DONE, SseDecoder, parse_decoder};
pub use framing::{DataFramer, Frame, Framing};
pub use parser::{SseEvent, SseEventRef, SseParser};
#[cfg(feature = "source")]
pub use source::{SseSource, SseSourceConfig, TYPE_NAME};

/// The `sse` source and the decoder of `patchbay parse --protocol sse`.
#[cfg(feature = "source")]
pub const ADAPTER: patchbay_graph::Adapter = patchbay_graph::Adapter::new(
    TYPE_NAME,
    "any Server-Sent Events stream over HTTP",
    &[patchbay_graph::ComponentType::source(
        TYPE_NAME,
        "an SSE feed: each event's data decoded as a signal, resumed by Last-Event-ID",
        source::build,
        patchbay_graph::options_of::<SseSourceConfig>,
    )],
)
.parse(parse_decoder);
