//! The generic SSE source decoder: each event's `data` is a generic JSON envelope (or any
//! JSON), decoded by [`Normalizer`].

use patchbay_signal::decode::StreamDecoder;
use patchbay_signal::normalize::{Decoded, Normalizer};
use patchbay_signal::{Signal, SmallString};
use serde_json::Value;

use crate::parser::{SseEvent, SseEventRef, SseParser};

/// The data that ends an OpenAI-style stream.
pub const DONE: &str = "[DONE]";

/// Decodes a generic SSE stream (`patchbay parse --protocol sse`, and the SSE source):
/// every event's data goes through the generic [`Normalizer`]; the SSE `id` is kept in
/// `metadata.sseId`, the event name in `metadata.sseEvent` when it is not `message`, and a
/// `retry:` given with the event in `metadata.sseRetry`.
///
/// A `[DONE]` event emits nothing and marks the stream as done ([`SseDecoder::is_done`]),
/// so that a transport can close it; events after it are still decoded (a capture may
/// hold several streams back to back).
#[derive(Debug, Clone)]
pub struct SseDecoder {
    parser: SseParser,
    normalizer: Normalizer,
    done: bool,
}

impl SseDecoder {
    /// A decoder whose signals default to `source`.
    pub fn new(source: impl Into<SmallString>) -> Self {
        SseDecoder {
            parser: SseParser::new(),
            normalizer: Normalizer::new(source),
            done: false,
        }
    }

    /// Whether a `[DONE]` event has arrived.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The last event ID, for `Last-Event-ID` on reconnect.
    pub fn last_event_id(&self) -> Option<&str> {
        self.parser.last_event_id()
    }

    /// The reconnection time the server asked for, in milliseconds.
    pub fn retry(&self) -> Option<u64> {
        self.parser.retry()
    }

    /// Decodes one already-parsed event.
    pub fn decode_event(&mut self, event: &SseEvent, out: &mut Vec<Decoded>) {
        let event = SseEventRef {
            event: event.event.as_deref(),
            data: &event.data,
            id: event.id.as_deref(),
            retry: event.retry,
        };
        decode_event(&mut self.normalizer, &mut self.done, event, out);
    }
}

fn decode_event(
    normalizer: &mut Normalizer,
    done: &mut bool,
    event: SseEventRef<'_>,
    out: &mut Vec<Decoded>,
) {
    if event.data.trim() == DONE {
        *done = true;
        return;
    }
    let Some(mut decoded) = normalizer.decode_text(event.data) else {
        return;
    };
    let (Decoded::Signal(signal) | Decoded::BadInput(signal)) = &mut decoded;
    annotate(signal, event);
    out.push(decoded);
}

/// Adds the SSE fields of `event` to the signal's metadata.
fn annotate(signal: &mut Signal, event: SseEventRef<'_>) {
    if let Some(id) = event.id {
        signal
            .metadata_mut()
            .insert("sseId".into(), Value::String(id.to_owned()));
    }
    if let Some(name) = event.event.filter(|e| *e != "message") {
        signal
            .metadata_mut()
            .insert("sseEvent".into(), Value::String(name.to_owned()));
    }
    if let Some(retry) = event.retry {
        signal
            .metadata_mut()
            .insert("sseRetry".into(), Value::from(retry));
    }
}

impl StreamDecoder for SseDecoder {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Decoded>) {
        let (normalizer, done) = (&mut self.normalizer, &mut self.done);
        self.parser
            .feed_ref(bytes, |event| decode_event(normalizer, done, event, out));
    }

    fn finish(&mut self, out: &mut Vec<Decoded>) {
        let (normalizer, done) = (&mut self.normalizer, &mut self.done);
        self.parser
            .finish_ref(|event| decode_event(normalizer, done, event, out));
    }
}

/// The decoder `patchbay parse --protocol sse` drives: raw SSE text in.
pub fn parse_decoder(source: &str) -> Box<dyn StreamDecoder> {
    Box::new(SseDecoder::new(source))
}
