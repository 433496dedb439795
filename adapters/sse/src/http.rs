//! Asking for an event stream over HTTP, and checking that the answer is one: what the
//! `sse` source and other clients of event streams (OpenCode's `GET /event`) share: the
//! client, the request, and what its answer means for the link.

use patchbay_transport::{
    Defaults, Ended, TransportOptions, client_builder_with, describe_http_error,
};

/// The media type of an event stream.
pub const EVENT_STREAM: &str = "text/event-stream";

/// `request` asking for an event stream: `accept: text/event-stream`, and no cached
/// answer.
pub fn event_stream(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    request
        .header("accept", EVENT_STREAM)
        .header("cache-control", "no-cache")
}

/// The `content-type` of `response`, lowercased; empty when it has none (or one that is
/// not text).
pub fn content_type(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// The content type of `response` when it is not an event stream (`text/event-stream`,
/// parameters or not); `None` when it is one.
pub fn not_event_stream(response: &reqwest::Response) -> Option<String> {
    let content_type = content_type(response);
    (!content_type.starts_with(EVENT_STREAM)).then_some(content_type)
}

/// The HTTP client of an event stream's connection: TLS as `transport` says (`ca_file`),
/// its `connect_timeout_ms` until the response headers. An error refuses the link (a bad
/// `ca_file` does not get better by retrying).
pub fn client<D: Defaults>(transport: &TransportOptions<D>) -> Result<reqwest::Client, Ended> {
    let tls = transport.tls().map_err(|e| Ended::Refused(e.to_string()))?;
    client_builder_with(&tls)
        .connect_timeout(transport.connect_timeout())
        .build()
        .map_err(|e| Ended::Refused(format!("HTTP client: {}", describe_http_error(&e))))
}

/// An event stream asked for over HTTP: how its answer is judged and a failure worded.
#[derive(Debug, Clone, Copy)]
pub struct StreamRequest<'a> {
    /// The URL as shown (secrets redacted).
    pub shown: &'a str,
    /// What was asked, after `answered …` (` to GET /event`; empty for the URL itself).
    pub asked: &'a str,
    /// Said after a refusal (HTTP 401 or 403): what to check (` (check the token)`).
    pub refused_hint: &'a str,
    /// Said after an answer that is not an event stream (`: is it …?`).
    pub not_a_stream_hint: &'a str,
    /// Whether an HTTP 204 ends the link for good (the SSE rule: the server wants no
    /// more reconnects); else it is an answer like any other that is not a stream.
    pub no_content_ends: bool,
}

impl StreamRequest<'_> {
    /// Sends `request` (built with [`event_stream`]): its response when it is an event
    /// stream (HTTP 200, `text/event-stream`). Otherwise how the link ends: refused (not
    /// retried) on HTTP 401 or 403, finished on HTTP 204 when
    /// [`no_content_ends`](Self::no_content_ends), lost (retried) on anything else.
    pub async fn open(self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, Ended> {
        let response = request
            .send()
            .await
            .map_err(|e| Ended::Lost(describe_http_error(&e)))?;
        let Self { shown, asked, .. } = self;
        match response.status().as_u16() {
            200 => {}
            204 if self.no_content_ends => {
                return Err(Ended::Finished(
                    "the server answered 204: no more reconnects".into(),
                ));
            }
            status @ (401 | 403) => {
                return Err(Ended::Refused(format!(
                    "{shown} refused the event stream: HTTP {status}{}",
                    self.refused_hint
                )));
            }
            status => {
                return Err(Ended::Lost(format!(
                    "{shown} answered HTTP {status}{asked}"
                )));
            }
        }
        match not_event_stream(&response) {
            None => Ok(response),
            Some(content_type) => Err(Ended::Lost(format!(
                "{shown} answered `{content_type}`{asked}, not text/event-stream{}",
                self.not_a_stream_hint
            ))),
        }
    }
}
