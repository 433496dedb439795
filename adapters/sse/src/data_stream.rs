//! The [`StreamDecoder`] the LLM stream decoders share: payloads framed by [`DataFramer`]
//! (raw SSE or one JSON payload per line), decoded by a [`DataDecoder`].

use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::{SmallString, now_ms};

use crate::framing::{DataFramer, Framing};

/// A decoder of one stream's `data` payloads into signals (the OpenAI chunk decoder, the
/// Anthropic event decoder): what [`DataStreamDecoder`] drives.
pub trait DataDecoder {
    /// A decoder whose signals have source `source`.
    fn for_source(source: SmallString) -> Self
    where
        Self: Sized;

    /// Decodes one `data` payload, stamping its signals with `timestamp` (ms). A blank
    /// payload (see [`data_payload`]) yields nothing.
    fn decode_data_at(&mut self, data: &str, timestamp: i64, out: &mut Vec<Decoded>);

    /// The stream ended (or was cut) at `timestamp` (ms): emits what is still open.
    fn end_stream_at(&mut self, timestamp: i64, out: &mut Vec<Decoded>);

    /// Decodes one `data` payload, stamped now.
    fn decode_data(&mut self, data: &str, out: &mut Vec<Decoded>) {
        self.decode_data_at(data, now_ms(), out);
    }

    /// [`DataDecoder::end_stream_at`], stamped now.
    fn end_stream(&mut self, out: &mut Vec<Decoded>) {
        self.end_stream_at(now_ms(), out);
    }
}

/// The payload of one `data` field without its surrounding white space, or `None` when
/// nothing is left (a keep-alive, or the blank line between JSON lines): what every
/// [`DataDecoder::decode_data_at`] decodes.
pub fn data_payload(data: &str) -> Option<&str> {
    let data = data.trim();
    (!data.is_empty()).then_some(data)
}

/// Decodes an LLM stream from bytes: raw SSE text or one JSON payload per line, detected
/// from the first significant byte unless told (see [`DataFramer`]); each payload goes to
/// the [`DataDecoder`], and the end of the input ends its stream.
#[derive(Debug, Clone)]
pub struct DataStreamDecoder<D> {
    framer: DataFramer,
    decoder: D,
}

impl<D: DataDecoder> DataStreamDecoder<D> {
    /// A decoder that detects the framing, with signals from `source`.
    pub fn new(source: impl Into<SmallString>) -> Self {
        Self::from_parts(DataFramer::detect(), source)
    }

    /// A decoder for a known framing (an HTTP response is always [`Framing::Sse`]).
    pub fn with_framing(source: impl Into<SmallString>, framing: Framing) -> Self {
        Self::from_parts(DataFramer::with_framing(framing), source)
    }

    fn from_parts(framer: DataFramer, source: impl Into<SmallString>) -> Self {
        DataStreamDecoder {
            framer,
            decoder: D::for_source(source.into()),
        }
    }

    /// The payload decoder (the stream's state so far, its source).
    pub fn decoder(&self) -> &D {
        &self.decoder
    }
}

impl<D: DataDecoder + Send> StreamDecoder for DataStreamDecoder<D> {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        // One clock read per read of bytes, not per event: what arrived together is
        // stamped together, and reading the clock costs more than decoding a small event.
        let ts = now_ms();
        let decoder = &mut self.decoder;
        self.framer
            .feed(bytes, |frame| decoder.decode_data_at(frame.data, ts, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let decoder = &mut self.decoder;
        self.framer
            .finish(|frame| decoder.decode_data(frame.data, out));
        decoder.end_stream(out);
    }
}

#[cfg(test)]
mod tests {
    use super::data_payload;

    #[test]
    fn data_payload_trims_and_skips_blank() {
        assert_eq!(data_payload("  {\"a\":1}\r\n"), Some("{\"a\":1}"));
        assert_eq!(data_payload("[DONE]"), Some("[DONE]"));
        assert_eq!(data_payload(" \t\r\n"), None);
        assert_eq!(data_payload(""), None);
    }
}
