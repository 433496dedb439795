//! The [`StreamDecoder`](patchbay_signal::decode::StreamDecoder) over raw bytes: SSE or
//! one JSON event per line.

use patchbay_signal::SmallString;
use patchbay_signal::normalize::Decoded;
use patchbay_sse::{DataDecoder, DataStreamDecoder};

use crate::messages::MessagesDecoder;

/// Decodes an Anthropic Messages stream from bytes: raw SSE text or one JSON event per
/// line, detected from the first significant byte (`{` means JSON lines). SSE `event:`
/// lines are not needed: the JSON `type` names the event. The end of the input ends the
/// stream (tool blocks still open are emitted then). [`DataStreamDecoder::decoder`] is
/// the event decoder (message in progress, source).
pub type AnthropicStreamDecoder = DataStreamDecoder<MessagesDecoder>;

impl DataDecoder for MessagesDecoder {
    fn for_source(source: SmallString) -> Self {
        MessagesDecoder::new(source)
    }

    fn decode_data_at(&mut self, data: &str, timestamp: i64, out: &mut Vec<Decoded>) {
        MessagesDecoder::decode_data_at(self, data, timestamp, out);
    }

    fn end_stream_at(&mut self, timestamp: i64, out: &mut Vec<Decoded>) {
        MessagesDecoder::end_stream_at(self, timestamp, out);
    }
}
