//! Server-sent events for patchbay.
//!
//! - [`SseParser`]: the event-stream parser of the HTML standard, incremental over bytes
//!   split anywhere (`event:`, multi-line `data:`, `id:` kept for `Last-Event-ID`,
//!   `retry:`, comments, CRLF/LF/CR, a leading BOM), which also dispatches a last event
//!   cut off by the end of the stream.
//! - [`DataFramer`]: payloads from either raw SSE or one JSON payload per line, for the
//!   LLM stream decoders that accept both.
//! - [`SseDecoder`]: the generic SSE source decoder (`patchbay parse --protocol sse`),
//!   whose events carry generic JSON envelopes.

mod decoder;
mod framing;
mod parser;

pub use decoder::{DONE, SseDecoder, parse_decoder};
pub use framing::{DataFramer, Frame, Framing};
pub use parser::{SseEvent, SseEventRef, SseParser};
