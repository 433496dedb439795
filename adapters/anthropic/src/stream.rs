//! The [`StreamDecoder`] over raw bytes: SSE or one JSON event per line.

use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{SmallString, now_ms};
use patchbay_sse::{DataFramer, Framing};

use crate::messages::MessagesDecoder;

/// Decodes an Anthropic Messages stream from bytes: raw SSE text or one JSON event per
/// line, detected from the first significant byte (`{` means JSON lines). SSE `event:`
/// lines are not needed: the JSON `type` names the event. The end of the input ends the
/// stream (tool blocks still open are emitted then).
#[derive(Debug, Clone)]
pub struct AnthropicStreamDecoder {
    framer: DataFramer,
    messages: MessagesDecoder,
}

impl AnthropicStreamDecoder {
    /// A decoder that detects the framing, with signals from `source`.
    pub fn new(source: impl Into<SmallString>) -> Self {
        AnthropicStreamDecoder {
            framer: DataFramer::detect(),
            messages: MessagesDecoder::new(source),
        }
    }

    /// A decoder for a known framing (an HTTP response is always [`Framing::Sse`]).
    pub fn with_framing(source: impl Into<SmallString>, framing: Framing) -> Self {
        AnthropicStreamDecoder {
            framer: DataFramer::with_framing(framing),
            messages: MessagesDecoder::new(source),
        }
    }

    /// The event decoder (message in progress, source).
    pub fn messages(&self) -> &MessagesDecoder {
        &self.messages
    }
}

impl StreamDecoder for AnthropicStreamDecoder {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        // One clock read per read of bytes, not per event: what arrived together is
        // stamped together, and reading the clock costs more than decoding a small event.
        let ts = now_ms();
        let messages = &mut self.messages;
        self.framer
            .feed(bytes, |frame| messages.decode_data_at(frame.data, ts, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let messages = &mut self.messages;
        self.framer
            .finish(|frame| messages.decode_data(frame.data, out));
        messages.end_stream(out);
    }
}
