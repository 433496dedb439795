//! The side of the relay that turns response bytes into signals: [`Tap`] decodes inline
//! (the decoders are fast) and hands the signals to an [`Emitter`], which never waits.

use std::sync::Arc;

use patchbay_graph::{ComponentStats, SourceContext};
use patchbay_signal::normalize::Decoded;
use patchbay_signal::well_known::{ErrorPayload, Payload, Severity};
use patchbay_signal::{Signal, now_ms, truncate};
use patchbay_sse::SseParser;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::api::{Api, ResponseDecoder, error_body};

/// How many decoded signals may wait between the relay and the graph per component.
pub const EMIT_BUFFER: usize = 4096;
/// Largest non-streaming or error body decoded (the client still gets all of it).
pub const MAX_DECODED_BODY: usize = 16 * 1024 * 1024;
/// Longest raw body excerpt put in an error signal's metadata.
const BODY_EXCERPT: usize = 2048;

/// Hands signals to the graph without ever waiting: a bounded channel to a task that
/// emits them (with back-pressure on that task only). When the channel is full the signal
/// is dropped and counted in the component's `dropped` counter, so a slow graph never
/// slows a relayed stream.
#[derive(Debug, Clone)]
pub struct Emitter {
    tx: mpsc::Sender<Decoded>,
    stats: Arc<ComponentStats>,
}

impl Emitter {
    /// An emitter feeding `cx`, and the task that drains it (spawn it; it ends when every
    /// emitter is dropped or the graph closes).
    pub fn new(cx: SourceContext) -> (Emitter, impl Future<Output = ()> + Send + 'static) {
        let (tx, mut rx) = mpsc::channel::<Decoded>(EMIT_BUFFER);
        let stats = cx.stats().clone();
        let task = async move {
            while let Some(decoded) = rx.recv().await {
                if cx.emit_decoded(decoded).await.is_err() {
                    break;
                }
            }
        };
        (Emitter { tx, stats }, task)
    }

    /// An emitter whose outcomes go to the returned receiver (for use outside a graph:
    /// benchmarks, tests); drops are counted in `stats`.
    pub fn channel(stats: Arc<ComponentStats>) -> (Emitter, mpsc::Receiver<Decoded>) {
        let (tx, rx) = mpsc::channel(EMIT_BUFFER);
        (Emitter { tx, stats }, rx)
    }

    /// Queues one outcome; returns whether it was queued (else it was counted as dropped).
    pub fn send(&self, decoded: Decoded) -> bool {
        match self.tx.try_send(decoded) {
            Ok(()) => true,
            Err(_) => {
                ComponentStats::add(&self.stats.dropped, 1);
                false
            }
        }
    }
}

/// What the response body is, which decides how it is decoded.
#[derive(Debug)]
enum Body {
    /// `text/event-stream`: decoded event by event as bytes arrive.
    Sse(SseParser),
    /// A whole JSON response: kept (up to [`MAX_DECODED_BODY`]) and decoded at its end.
    Json(Vec<u8>),
    /// An error status: kept and reported as one `error` signal at its end.
    Error(u16, Vec<u8>),
    /// Not decoded (a route other than generation).
    Ignored,
}

/// Decodes one response (of one request) into signals as its bytes pass.
#[derive(Debug)]
pub struct Tap {
    decoder: ResponseDecoder,
    body: Body,
    emitter: Emitter,
    source: String,
    request_id: String,
    /// Replaces the decoded signals' correlation id (prompt mode); the stream's own id is
    /// kept in `metadata.streamId`.
    correlation: Option<String>,
    model: Option<String>,
    /// A `completion` or `error` came out: the stream reached an end.
    ended: bool,
    finished: bool,
    scratch: Vec<Decoded>,
}

/// What a tap knows of its request before the answer comes: a [`Tap`] per answer is made
/// from it with [`TapRequest::tap`].
#[derive(Debug, Clone)]
pub struct TapRequest<'a> {
    /// The API spoken.
    pub api: Api,
    /// The source of the signals.
    pub source: &'a str,
    /// The request's id (`metadata.requestId` of the signals).
    pub request_id: &'a str,
    /// The model the request asked for, if any.
    pub model: Option<String>,
    /// False for routes that are only relayed (their errors are still reported).
    pub decode: bool,
    /// Where the signals go.
    pub emitter: Emitter,
}

impl TapRequest<'_> {
    /// A tap for the response of `status` with `content_type`.
    pub fn tap(&self, status: u16, content_type: &str) -> Tap {
        Tap::new(self.clone(), status, content_type)
    }
}

impl Tap {
    /// A tap for a response of `status` with `content_type`, for `request`.
    pub fn new(request: TapRequest<'_>, status: u16, content_type: &str) -> Tap {
        let TapRequest {
            api,
            source,
            request_id,
            model,
            decode,
            emitter,
        } = request;
        let body = if status >= 400 {
            Body::Error(status, Vec::new())
        } else if !decode {
            Body::Ignored
        } else if content_type.starts_with("text/event-stream") {
            Body::Sse(SseParser::new())
        } else {
            Body::Json(Vec::new())
        };
        Tap {
            decoder: api.decoder(source),
            body,
            emitter,
            source: source.to_owned(),
            request_id: request_id.to_owned(),
            correlation: None,
            model,
            ended: false,
            finished: false,
            scratch: Vec::new(),
        }
    }

    /// Gives every decoded signal this correlation id (prompt mode).
    pub fn correlate(mut self, correlation: String) -> Tap {
        self.correlation = Some(correlation);
        self
    }

    /// Feeds the bytes of one chunk, as relayed.
    pub fn feed(&mut self, bytes: &[u8]) {
        let ts = now_ms();
        match &mut self.body {
            Body::Sse(parser) => {
                let decoder = &mut self.decoder;
                let out = &mut self.scratch;
                parser.feed_ref(bytes, |event| decoder.decode_data_at(event.data, ts, out));
            }
            Body::Json(buf) | Body::Error(_, buf) => {
                let room = MAX_DECODED_BODY.saturating_sub(buf.len());
                buf.extend_from_slice(bytes.get(..room.min(bytes.len())).unwrap_or_default());
            }
            Body::Ignored => {}
        }
        self.flush();
    }

    /// The body ended normally: decodes what was kept, flushes the decoder, and reports a
    /// stream that stopped before its end (a `completion` or an error) as truncated.
    pub fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let ts = now_ms();
        match std::mem::replace(&mut self.body, Body::Ignored) {
            Body::Sse(mut parser) => {
                let decoder = &mut self.decoder;
                let out = &mut self.scratch;
                parser.finish_ref(|event| decoder.decode_data_at(event.data, ts, out));
                self.decoder.end_stream_at(ts, &mut self.scratch);
                self.flush();
                if !self.ended {
                    self.error(
                        "truncated_stream",
                        "the upstream stream ended before the response was complete".into(),
                        None,
                    );
                }
            }
            Body::Json(buf) => {
                let text = String::from_utf8_lossy(&buf);
                self.decoder
                    .decode_response_at(&text, ts, &mut self.scratch);
                self.flush();
            }
            Body::Error(status, buf) => self.upstream_error(status, &buf),
            Body::Ignored => {}
        }
    }

    /// The relay stopped before the body's end (`code`: `client_cancelled`,
    /// `upstream_error`, `upstream_timeout`): flushes what arrived and reports it.
    pub fn abort(&mut self, code: &str, message: String) {
        if self.finished {
            return;
        }
        self.finished = true;
        let ts = now_ms();
        if let Body::Sse(parser) = &mut self.body {
            let decoder = &mut self.decoder;
            let out = &mut self.scratch;
            parser.finish_ref(|event| decoder.decode_data_at(event.data, ts, out));
            self.decoder.end_stream_at(ts, &mut self.scratch);
            self.flush();
        }
        self.body = Body::Ignored;
        let severity = if code == "client_cancelled" {
            Severity::Warning
        } else {
            Severity::Error
        };
        self.emit_error(code, message, severity, None);
    }

    /// Reports an upstream error answer (status ≥ 400).
    fn upstream_error(&mut self, status: u16, body: &[u8]) {
        let (code, message, raw) = match error_body(body) {
            Some((code, message)) => (code, message, None),
            None => (None, None, Some(String::from_utf8_lossy(body).into_owned())),
        };
        let code = code.unwrap_or_else(|| format!("http_{status}"));
        let message = message.unwrap_or_else(|| format!("the upstream answered HTTP {status}"));
        let mut signal = self.error_signal(&code, message, Severity::Error);
        signal.metadata_mut().insert("status".into(), status.into());
        if let Some(raw) = raw.filter(|r| !r.trim().is_empty()) {
            signal
                .metadata_mut()
                .insert("body".into(), Value::String(truncate(&raw, BODY_EXCERPT)));
        }
        self.send(Decoded::Signal(signal));
    }

    /// Reports an error of patchbay's own (no response, a timeout, a cut stream).
    pub fn error(&mut self, code: &str, message: String, status: Option<u16>) {
        self.finished = true;
        self.body = Body::Ignored;
        let mut signal = self.error_signal(code, message, Severity::Error);
        if let Some(status) = status {
            signal.metadata_mut().insert("status".into(), status.into());
        }
        self.send(Decoded::Signal(signal));
    }

    fn emit_error(&mut self, code: &str, message: String, severity: Severity, status: Option<u16>) {
        let mut signal = self.error_signal(code, message, severity);
        if let Some(status) = status {
            signal.metadata_mut().insert("status".into(), status.into());
        }
        self.send(Decoded::Signal(signal));
    }

    fn error_signal(&self, code: &str, message: String, severity: Severity) -> Signal {
        let mut signal = ErrorPayload {
            agent_id: self.model.clone(),
            code: Some(code.to_owned()),
            message,
            severity,
        }
        .into_signal(self.source.clone());
        if let Some(correlation) = &self.correlation {
            signal.correlation_id = Some(correlation.into());
        }
        signal
    }

    fn flush(&mut self) {
        for decoded in std::mem::take(&mut self.scratch) {
            let signal = match &decoded {
                Decoded::Signal(s) | Decoded::BadInput(s) => s,
            };
            if matches!(signal.kind.as_str(), "completion" | "error") {
                self.ended = true;
            }
            self.send(decoded);
        }
    }

    /// Stamps the request id (and the prompt's correlation) and queues the signal.
    fn send(&self, mut decoded: Decoded) {
        let signal = match &mut decoded {
            Decoded::Signal(s) | Decoded::BadInput(s) => s,
        };
        signal
            .metadata_mut()
            .insert("requestId".into(), Value::String(self.request_id.clone()));
        if let Some(correlation) = &self.correlation {
            if let Some(own) = signal.correlation_id.take().filter(|c| c != correlation) {
                signal
                    .metadata_mut()
                    .insert("streamId".into(), Value::from(own));
            }
            signal.correlation_id = Some(correlation.into());
        }
        self.emitter.send(decoded);
    }
}

impl Drop for Tap {
    /// A tap dropped before its body ended: the client hung up (the relay stream was
    /// dropped, which dropped the upstream request too). After the response's end (its
    /// `completion` or error) that is no cancellation: SDKs stop reading at `[DONE]` and
    /// may close before the upstream's end of body arrives.
    fn drop(&mut self) {
        if self.ended {
            self.finish();
        } else if !self.finished {
            self.abort(
                "client_cancelled",
                "the client disconnected before the response ended; the upstream request was cancelled"
                    .into(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_graph::telemetry::Role;

    fn emitter() -> (Emitter, mpsc::Receiver<Decoded>, Arc<ComponentStats>) {
        let stats = Arc::new(ComponentStats::new("t", "openai", Role::Source));
        let (emitter, rx) = Emitter::channel(stats.clone());
        (emitter, rx, stats)
    }

    /// A decoding request `R` for `api`, its signals sent to `emitter`.
    fn request(api: Api, emitter: Emitter) -> TapRequest<'static> {
        let source = if api == Api::Anthropic {
            "anthropic:t"
        } else {
            "openai:t"
        };
        TapRequest {
            api,
            source,
            request_id: "R",
            model: None,
            decode: true,
            emitter,
        }
    }

    fn drain(rx: &mut mpsc::Receiver<Decoded>) -> Vec<Signal> {
        let mut out = Vec::new();
        while let Ok(d) = rx.try_recv() {
            out.push(d.into_signal());
        }
        out
    }

    fn kinds(signals: &[Signal]) -> Vec<&str> {
        signals.iter().map(|s| s.kind.as_str()).collect()
    }

    const STREAM: &str = "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\ndata: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

    #[test]
    fn a_stream_split_anywhere_gives_the_same_signals_with_the_request_id() {
        let mut reference = None;
        for split in [1usize, 7, 64, STREAM.len()] {
            let (e, mut rx, _) = emitter();
            let mut tap = TapRequest {
                request_id: "REQ",
                ..request(Api::OpenAi, e)
            }
            .tap(200, "text/event-stream; charset=utf-8");
            for chunk in STREAM.as_bytes().chunks(split) {
                tap.feed(chunk);
            }
            tap.finish();
            drop(tap);
            let signals = drain(&mut rx);
            assert!(
                signals
                    .iter()
                    .all(|s| s.meta("requestId") == Some(&Value::from("REQ")))
            );
            assert!(
                signals
                    .iter()
                    .all(|s| s.correlation_id.as_deref() == Some("c1"))
            );
            let got: Vec<String> = kinds(&signals).iter().map(|k| k.to_string()).collect();
            assert_eq!(got, ["text_delta", "completion"]);
            match &reference {
                None => reference = Some(got),
                Some(r) => assert_eq!(r, &got),
            }
        }
    }

    #[test]
    fn a_cut_stream_is_truncated_and_a_dropped_tap_is_a_cancellation() {
        let (e, mut rx, _) = emitter();
        let cut = STREAM.split("\n\n").next().unwrap_or_default();
        let mut tap = TapRequest {
            model: Some("m".into()),
            ..request(Api::OpenAi, e.clone())
        }
        .tap(200, "text/event-stream");
        tap.feed(cut.as_bytes());
        tap.finish();
        drop(tap);
        let signals = drain(&mut rx);
        assert_eq!(kinds(&signals), ["text_delta", "error"]);
        assert_eq!(signals[1].payload["code"], "truncated_stream");

        let mut tap = TapRequest {
            request_id: "R2",
            model: Some("m".into()),
            ..request(Api::OpenAi, e)
        }
        .tap(200, "text/event-stream");
        tap.feed(cut.as_bytes());
        drop(tap);
        let signals = drain(&mut rx);
        assert_eq!(kinds(&signals), ["text_delta", "error"]);
        assert_eq!(signals[1].payload["code"], "client_cancelled");
        assert_eq!(signals[1].payload["severity"], "warning");
        assert_eq!(signals[1].payload["agentId"], "m");
    }

    #[test]
    fn a_client_that_hangs_up_after_the_end_cancelled_nothing() {
        let (e, mut rx, _) = emitter();
        let mut tap = request(Api::OpenAi, e).tap(200, "text/event-stream");
        tap.feed(STREAM.as_bytes());
        drop(tap);
        assert_eq!(kinds(&drain(&mut rx)), ["text_delta", "completion"]);
    }

    #[test]
    fn error_answers_become_one_error_signal() {
        let (e, mut rx, _) = emitter();
        let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#;
        let mut tap = request(Api::Anthropic, e.clone()).tap(529, "application/json");
        tap.feed(&body[..10]);
        tap.feed(&body[10..]);
        tap.finish();
        drop(tap);
        let signals = drain(&mut rx);
        assert_eq!(kinds(&signals), ["error"]);
        assert_eq!(signals[0].payload["code"], "overloaded_error");
        assert_eq!(signals[0].payload["message"], "busy");
        assert_eq!(signals[0].meta("status"), Some(&Value::from(529)));

        let mut tap = request(Api::OpenAi, e).tap(502, "text/html");
        tap.feed(b"<html>bad gateway</html>");
        tap.finish();
        drop(tap);
        let signals = drain(&mut rx);
        assert_eq!(signals[0].payload["code"], "http_502");
        assert_eq!(
            signals[0].meta("body"),
            Some(&Value::from("<html>bad gateway</html>"))
        );
    }

    #[test]
    fn a_whole_response_gives_its_streaming_signals_and_prompt_correlation_wins() {
        let (e, mut rx, _) = emitter();
        let body = r#"{"id":"c9","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
        let mut tap = request(Api::OpenAi, e)
            .tap(200, "application/json")
            .correlate("PROMPT".into());
        tap.feed(body.as_bytes());
        tap.finish();
        drop(tap);
        let signals = drain(&mut rx);
        assert_eq!(kinds(&signals), ["text_delta", "completion", "token_usage"]);
        assert!(
            signals
                .iter()
                .all(|s| s.correlation_id.as_deref() == Some("PROMPT"))
        );
        assert!(
            signals
                .iter()
                .all(|s| s.meta("streamId") == Some(&Value::from("c9")))
        );
    }

    #[test]
    fn a_full_buffer_drops_and_counts() {
        let stats = Arc::new(ComponentStats::new("t", "openai", Role::Source));
        let (tx, _rx) = mpsc::channel(1);
        let e = Emitter {
            tx,
            stats: stats.clone(),
        };
        let signal = || Decoded::Signal(Signal::new("x", "s", Default::default()));
        assert!(e.send(signal()));
        assert!(!e.send(signal()));
        assert_eq!(stats.dropped.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn relayed_only_routes_decode_nothing() {
        let (e, mut rx, _) = emitter();
        let mut tap = TapRequest {
            decode: false,
            ..request(Api::OpenAi, e)
        }
        .tap(200, "application/json");
        tap.feed(br#"{"object":"list","data":[]}"#);
        tap.finish();
        drop(tap);
        assert!(drain(&mut rx).is_empty());
    }
}
