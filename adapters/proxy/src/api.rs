//! What differs between the two LLM APIs: the decoder, the generation route, the request
//! fields patchbay reads, the error body and the authentication headers.

use patchbay_anthropic::MessagesDecoder;
use patchbay_openai::ChatDecoder;
use patchbay_signal::normalize::Decoded;
use serde_json::{Value, json};

/// The Anthropic API version header prompt mode and the health poll send.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// An LLM API the proxy and the prompt mode speak: it picks the decoder and the request
/// shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI-compatible chat completions (OpenAI, Ollama, LM Studio, vLLM).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl Api {
    /// The component type name (`openai`, `anthropic`), also the prefix of signal sources.
    pub fn type_name(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
        }
    }

    /// A fresh response decoder whose signals have source `source`.
    pub fn decoder(self, source: &str) -> ResponseDecoder {
        match self {
            Api::OpenAi => ResponseDecoder::OpenAi(ChatDecoder::new(source)),
            Api::Anthropic => ResponseDecoder::Anthropic(MessagesDecoder::new(source)),
        }
    }

    /// Whether a request path is a generation whose response patchbay decodes (other
    /// routes, such as `/v1/models` or embeddings, are only relayed).
    pub fn is_generation(self, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        match self {
            Api::OpenAi => path.ends_with("/chat/completions"),
            Api::Anthropic => path.ends_with("/messages"),
        }
    }

    /// The generation endpoint for a configured prompt-mode `url`: used as is when it
    /// already names the route, else the route is appended (after `/v1` if missing).
    pub fn endpoint(self, url: &str) -> String {
        let url = url.trim().trim_end_matches('/');
        let route = match self {
            Api::OpenAi => "/chat/completions",
            Api::Anthropic => "/messages",
        };
        if url.ends_with(route) {
            url.to_owned()
        } else if url.ends_with("/v1") {
            format!("{url}{route}")
        } else {
            format!("{url}/v1{route}")
        }
    }

    /// The streaming request body prompt mode sends for one prompt.
    pub fn prompt_body(
        self,
        model: &str,
        text: &str,
        system: Option<&str>,
        max_tokens: u32,
    ) -> Value {
        match self {
            Api::OpenAi => {
                let mut messages = Vec::new();
                if let Some(system) = system {
                    messages.push(json!({"role": "system", "content": system}));
                }
                messages.push(json!({"role": "user", "content": text}));
                json!({
                    "model": model,
                    "messages": messages,
                    "max_tokens": max_tokens,
                    "stream": true,
                    "stream_options": {"include_usage": true},
                })
            }
            Api::Anthropic => {
                let mut body = json!({
                    "model": model,
                    "max_tokens": max_tokens,
                    "messages": [{"role": "user", "content": text}],
                    "stream": true,
                });
                if let (Some(system), Some(object)) = (system, body.as_object_mut()) {
                    object.insert("system".into(), Value::String(system.to_owned()));
                }
                body
            }
        }
    }

    /// The authentication headers for an API key (prompt mode, health poll).
    pub fn auth_headers(self, api_key: &str) -> Vec<(&'static str, String)> {
        match self {
            Api::OpenAi => vec![("authorization", format!("Bearer {api_key}"))],
            Api::Anthropic => vec![
                ("x-api-key", api_key.to_owned()),
                ("anthropic-version", ANTHROPIC_VERSION.to_owned()),
            ],
        }
    }
}

/// What patchbay reads from a generation request body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestSummary {
    /// The `model` field.
    pub model: Option<String>,
    /// The `stream` field.
    pub stream: bool,
    /// The text of the last user message (text parts joined).
    pub last_user_message: Option<String>,
}

impl RequestSummary {
    /// Reads a request body (both APIs share `model`, `stream` and `messages[].role`/
    /// `content`, a string or a list of `{type: "text", text}` parts). A body that is not
    /// JSON gives an empty summary.
    pub fn read(body: &[u8]) -> RequestSummary {
        let Ok(Value::Object(request)) = serde_json::from_slice::<Value>(body) else {
            return RequestSummary::default();
        };
        let model = request
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
        let last_user_message = request
            .get("messages")
            .and_then(Value::as_array)
            .and_then(|messages| {
                messages
                    .iter()
                    .rev()
                    .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            })
            .and_then(|m| m.get("content"))
            .and_then(content_text);
        RequestSummary {
            model,
            stream,
            last_user_message,
        }
    }
}

/// The text of a message `content`: a string, or the `text` of its text parts joined by
/// newlines.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

/// The `(code, message)` of an upstream error body: OpenAI's `{"error": {message, type,
/// code}}` and Anthropic's `{"type": "error", "error": {type, message}}`; `None` when the
/// body is neither.
pub fn error_body(body: &[u8]) -> Option<(Option<String>, Option<String>)> {
    let value = serde_json::from_slice::<Value>(body).ok()?;
    let error = value.get("error")?;
    if let Some(message) = error.as_str() {
        // Some servers (Ollama's native routes) answer `{"error": "text"}`.
        return Some((None, Some(message.to_owned())));
    }
    let field = |name: &str| match error.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    Some((field("type").or_else(|| field("code")), field("message")))
}

/// A response decoder of either API, with the calls the tap needs.
#[derive(Debug, Clone)]
pub enum ResponseDecoder {
    /// OpenAI-compatible chunks.
    OpenAi(ChatDecoder),
    /// Anthropic events.
    Anthropic(MessagesDecoder),
}

impl ResponseDecoder {
    /// Decodes one SSE `data` payload.
    pub fn decode_data_at(&mut self, data: &str, timestamp: i64, out: &mut Vec<Decoded>) {
        match self {
            ResponseDecoder::OpenAi(d) => d.decode_data_at(data, timestamp, out),
            ResponseDecoder::Anthropic(d) => d.decode_data_at(data, timestamp, out),
        }
    }

    /// Decodes a whole non-streaming response body.
    pub fn decode_response_at(&mut self, body: &str, timestamp: i64, out: &mut Vec<Decoded>) {
        match self {
            ResponseDecoder::OpenAi(d) => d.decode_response_at(body, timestamp, out),
            ResponseDecoder::Anthropic(d) => d.decode_response_at(body, timestamp, out),
        }
    }

    /// The stream ended (or was cut): flushes what is still being assembled.
    pub fn end_stream_at(&mut self, timestamp: i64, out: &mut Vec<Decoded>) {
        match self {
            ResponseDecoder::OpenAi(d) => d.end_stream_at(timestamp, out),
            ResponseDecoder::Anthropic(d) => d.end_stream_at(timestamp, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_model_stream_and_last_user_message() {
        let body = br#"{"model":"m","stream":true,"messages":[
            {"role":"user","content":"first"},{"role":"assistant","content":"a"},
            {"role":"user","content":[{"type":"text","text":"x"},{"type":"image"},{"type":"text","text":"y"}]}]}"#;
        let summary = RequestSummary::read(body);
        assert_eq!(summary.model.as_deref(), Some("m"));
        assert!(summary.stream);
        assert_eq!(summary.last_user_message.as_deref(), Some("x\ny"));
        assert_eq!(RequestSummary::read(b"not json"), RequestSummary::default());
    }

    #[test]
    fn endpoints_and_routes() {
        assert_eq!(
            Api::OpenAi.endpoint("http://h:1"),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            Api::OpenAi.endpoint("http://h:1/v1/"),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            Api::Anthropic.endpoint("https://api.anthropic.com/v1/messages"),
            "https://api.anthropic.com/v1/messages"
        );
        assert!(Api::OpenAi.is_generation("/v1/chat/completions"));
        assert!(!Api::OpenAi.is_generation("/v1/models"));
        assert!(Api::Anthropic.is_generation("/v1/messages"));
        assert!(!Api::Anthropic.is_generation("/v1/messages/count_tokens"));
    }

    #[test]
    fn error_bodies_of_both_apis() {
        assert_eq!(
            error_body(br#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#),
            Some((Some("rate_limit_error".into()), Some("slow down".into())))
        );
        assert_eq!(
            error_body(br#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#),
            Some((Some("overloaded_error".into()), Some("busy".into())))
        );
        assert_eq!(
            error_body(br#"{"error":"model not found"}"#),
            Some((None, Some("model not found".into())))
        );
        assert_eq!(error_body(b"<html>"), None);
    }
}
