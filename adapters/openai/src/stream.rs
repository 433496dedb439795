//! The [`StreamDecoder`](patchbay_signal::decode::StreamDecoder) over raw bytes: SSE or
//! one JSON chunk per line.

use patchbay_signal::SmallString;
use patchbay_signal::normalize::Decoded;
use patchbay_sse::{DataDecoder, DataStreamDecoder};

use crate::chat::ChatDecoder;

/// Decodes an OpenAI-compatible stream from bytes: raw SSE text (`data:` lines) or one
/// JSON chunk per line, detected from the first significant byte (`{` means JSON lines).
/// `[DONE]` ends a stream; the end of the input ends it too (tool calls still being
/// assembled are emitted then). [`DataStreamDecoder::decoder`] is the chunk decoder (model
/// of the stream, source, whether `[DONE]` was the last payload).
pub type OpenAiStreamDecoder = DataStreamDecoder<ChatDecoder>;

impl DataDecoder for ChatDecoder {
    fn for_source(source: SmallString) -> Self {
        ChatDecoder::new(source)
    }

    fn decode_data_at(&mut self, data: &str, timestamp: i64, out: &mut Vec<Decoded>) {
        ChatDecoder::decode_data_at(self, data, timestamp, out);
    }

    fn end_stream_at(&mut self, timestamp: i64, out: &mut Vec<Decoded>) {
        ChatDecoder::end_stream_at(self, timestamp, out);
    }
}
