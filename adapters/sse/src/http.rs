//! Asking for an event stream over HTTP, and checking that the answer is one: what the
//! `sse` source and other clients of event streams (OpenCode's `GET /event`) share.

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
