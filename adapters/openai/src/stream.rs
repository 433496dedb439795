//! The [`StreamDecoder`] over raw bytes: SSE or one JSON chunk per line.

use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{SmallString, now_ms};
use patchbay_sse::{DataFramer, Framing};

use crate::chat::ChatDecoder;

/// Decodes an OpenAI-compatible stream from bytes: raw SSE text (`data:` lines) or one
/// JSON chunk per line, detected from the first significant byte (`{` means JSON lines).
/// `[DONE]` ends a stream; the end of the input ends it too (tool calls still being
/// assembled are emitted then).
#[derive(Debug, Clone)]
pub struct OpenAiStreamDecoder {
    framer: DataFramer,
    chat: ChatDecoder,
}

impl OpenAiStreamDecoder {
    /// A decoder that detects the framing, with signals from `source`.
    pub fn new(source: impl Into<SmallString>) -> Self {
        OpenAiStreamDecoder {
            framer: DataFramer::detect(),
            chat: ChatDecoder::new(source),
        }
    }

    /// A decoder for a known framing (an HTTP response is always [`Framing::Sse`]).
    pub fn with_framing(source: impl Into<SmallString>, framing: Framing) -> Self {
        OpenAiStreamDecoder {
            framer: DataFramer::with_framing(framing),
            chat: ChatDecoder::new(source),
        }
    }

    /// Whether `[DONE]` was the last payload.
    pub fn is_done(&self) -> bool {
        self.chat.is_done()
    }

    /// The chunk decoder (model of the stream, source).
    pub fn chat(&self) -> &ChatDecoder {
        &self.chat
    }
}

impl StreamDecoder for OpenAiStreamDecoder {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        // One clock read per read of bytes, not per event: what arrived together is
        // stamped together, and reading the clock costs more than decoding a small event.
        let ts = now_ms();
        let chat = &mut self.chat;
        self.framer
            .feed(bytes, |frame| chat.decode_data_at(frame.data, ts, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let chat = &mut self.chat;
        self.framer
            .finish(|frame| chat.decode_data(frame.data, out));
        chat.end_stream(out);
    }
}
