//! The `otlp` output (`[outputs.NAME] type = "otlp"`, [`OtlpExporterConfig`]): signals
//! exported as OTLP/HTTP to any OTLP receiver (the OpenTelemetry Collector, Jaeger,
//! Langfuse, Phoenix, another patchbay's `otlp` source), as the OpenTelemetry SDKs'
//! exporters send them.
//!
//! Signals are batched (`batch_max`, `batch_timeout_ms`), encoded by
//! [`Encoder`] (a log record per signal; `execute_tool` and
//! `invoke_agent` spans for tool calls and tasks) and POSTed to `{endpoint}/v1/logs` and,
//! when the batch completed spans, `{endpoint}/v1/traces`, as protobuf or JSON, gzipped
//! if asked. A request answered 429, 502, 503 or 504, timed out or not connected is
//! retried with capped exponential backoff (a `Retry-After` in seconds is waited, up to
//! `backoff_max_ms`); any other answer that is not a success refuses the batch: it is
//! dropped, counted as refused with the receiver's reason, and not retried. Delivery
//! counts the signals of the logs request. The endpoint's credentials and secret query
//! parameters and the headers' values never appear in logs or health details.

use std::io::Write as _;
use std::time::Duration;

use patchbay_graph::{
    BoxFuture, ComponentError, Diagnostic, HealthState, Options, Output, OutputContext,
};
use patchbay_signal::SharedSignal;
use patchbay_transport::{
    Backoff, Headers, RedactedUrl, client_builder, describe_http_error, retry_detail,
};
use serde::Deserialize;

use crate::encode::{Encoder, logs_json, logs_protobuf, traces_json, traces_protobuf};

/// `[outputs.NAME] type = "otlp"`: signals to an OTLP/HTTP receiver.
///
/// ```toml
/// [outputs.otel]
/// type = "otlp"
/// inputs = ["claude"]
/// endpoint = "https://otel.example.com:4318"
/// protocol = "http/protobuf"
/// headers = { Authorization = "Bearer ${OTEL_TOKEN}" }
/// gzip = true
/// ```
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OtlpExporterConfig {
    /// The receiver's base URL, `http://` or `https://` (default
    /// `http://127.0.0.1:4318`); `/v1/logs` and `/v1/traces` are appended to its path, as
    /// the OTLP exporters do with `OTEL_EXPORTER_OTLP_ENDPOINT`.
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
    /// `http/protobuf` (default) or `http/json`. `grpc` is not supported: only OTLP/HTTP.
    #[serde(default)]
    pub protocol: Protocol,
    /// Headers sent with every request (`Authorization = "Bearer ${TOKEN}"`); their
    /// values are never logged.
    #[serde(default)]
    pub headers: Headers,
    /// Compress request bodies with gzip (`Content-Encoding: gzip`). Default false.
    #[serde(default)]
    pub gzip: bool,
    /// The most signals in one export (default 512, at least 1).
    #[serde(default = "default_batch_max")]
    pub batch_max: usize,
    /// The longest the first signal of a batch waits for the batch to fill, in ms
    /// (default 1000; 0: send what is waiting at once).
    #[serde(default = "default_batch_timeout_ms")]
    pub batch_timeout_ms: u64,
    /// How long one request may take, in ms (default 10000), before it is retried.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The first delay between retries, in ms (default 1000), doubled each retry.
    #[serde(default = "default_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    /// The longest delay between retries, in ms (default 30000); also caps a
    /// `Retry-After`.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// The resource's `service.name` (default `patchbay`).
    #[serde(default = "default_service_name")]
    pub service_name: String,
}

/// The OTLP transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
pub enum Protocol {
    /// Protobuf bodies (`application/x-protobuf`).
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// OTLP/JSON bodies (`application/json`).
    #[serde(rename = "http/json")]
    HttpJson,
    /// Not supported (refused when the config is checked).
    #[serde(rename = "grpc")]
    Grpc,
}

fn default_endpoint() -> String {
    "http://127.0.0.1:4318".into()
}
fn default_batch_max() -> usize {
    512
}
fn default_batch_timeout_ms() -> u64 {
    1000
}
fn default_timeout_ms() -> u64 {
    10_000
}
fn default_backoff_initial_ms() -> u64 {
    1000
}
fn default_backoff_max_ms() -> u64 {
    30_000
}
fn default_service_name() -> String {
    "patchbay".into()
}

/// Builds an `otlp` output from its options.
pub fn build(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    let config: OtlpExporterConfig = options.parse()?;
    if config.protocol == Protocol::Grpc {
        return Err(options.error_at(
            "protocol",
            "gRPC is not supported: only OTLP/HTTP (`http/protobuf` or `http/json`, port 4318)",
        ));
    }
    let base = reqwest::Url::parse(&config.endpoint)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
        .ok_or_else(|| options.error_at("endpoint", "expected an http:// or https:// URL"))?;
    config
        .headers
        .check()
        .map_err(|e| options.error_at("headers", e))?;
    if config.batch_max == 0 {
        return Err(options.error_at("batch_max", "must be at least 1"));
    }
    if config.timeout_ms == 0 {
        return Err(options.error_at("timeout_ms", "must be at least 1"));
    }
    patchbay_transport::check_delays(options, config.backoff_initial_ms, config.backoff_max_ms)?;
    let client = client_builder()
        .timeout(Duration::from_millis(config.timeout_ms))
        .build()
        .map_err(|e| {
            options.error(format!(
                "the HTTP client could not be built: {}",
                describe_http_error(&e)
            ))
        })?;
    let logs = path_url(&base, "v1/logs");
    let traces = path_url(&base, "v1/traces");
    Ok(Box::new(Exporter {
        shown: RedactedUrl(base.as_str()).to_string(),
        logs,
        traces,
        client,
        config,
    }))
}

/// `base` with `tail` appended to its path (`http://h:4318/otel` → `http://h:4318/otel/v1/logs`).
fn path_url(base: &reqwest::Url, tail: &str) -> reqwest::Url {
    let mut url = base.clone();
    let path = format!("{}/{tail}", base.path().trim_end_matches('/'));
    url.set_path(&path);
    url
}

struct Exporter {
    logs: reqwest::Url,
    traces: reqwest::Url,
    /// The endpoint as logs show it.
    shown: String,
    client: reqwest::Client,
    config: OtlpExporterConfig,
}

/// How one request ended.
enum Attempt {
    Delivered,
    /// Worth trying again (429, 502, 503, 504, a timeout, no connection), after at least
    /// the receiver's `Retry-After`.
    Retry(String, Option<Duration>),
    /// The receiver refused it: trying again would not help.
    Refused(String),
}

impl Output for Exporter {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            cx.set_state(HealthState::Ok, None);
            let mut encoder = Encoder::new(&self.config.service_name);
            let mut batch: Vec<SharedSignal> = Vec::new();
            while self.next_batch(&cx, &mut batch).await {
                let encoded = encoder.encode(&batch);
                let n = batch.len() as u64;
                let (logs, traces) = match self.config.protocol {
                    Protocol::HttpJson => (
                        logs_json(&encoded.logs),
                        encoded.traces.as_ref().map(traces_json),
                    ),
                    _ => (
                        logs_protobuf(&encoded.logs),
                        encoded.traces.as_ref().map(traces_protobuf),
                    ),
                };
                match self.deliver(&cx, &self.logs, logs).await {
                    Ok(()) => cx.delivered(n),
                    Err(reason) => {
                        tracing::warn!(output = cx.name(), endpoint = %self.shown, "OTLP receiver refused {n} signal(s): {reason}");
                        for _ in 0..n {
                            cx.refused(&reason);
                        }
                    }
                }
                if let Some(traces) = traces
                    && let Err(reason) = self.deliver(&cx, &self.traces, traces).await
                {
                    tracing::warn!(output = cx.name(), endpoint = %self.shown, "OTLP receiver refused spans: {reason}");
                }
                batch.clear();
            }
            cx.set_state(HealthState::Stopped, None);
            Ok(())
        })
    }
}

impl Exporter {
    /// Fills `batch` up to `batch_max`, waiting at most `batch_timeout_ms` after its first
    /// signal; `false` when the input has ended and nothing is left.
    async fn next_batch(&self, cx: &OutputContext, batch: &mut Vec<SharedSignal>) -> bool {
        let max = self.config.batch_max;
        if !cx.next_batch(max, batch).await {
            return false;
        }
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.config.batch_timeout_ms);
        while batch.len() < max {
            match tokio::time::timeout_at(deadline, cx.next_batch(max - batch.len(), batch)).await {
                Ok(true) => {}
                // The input ended or the batch waited long enough: send what there is.
                Ok(false) | Err(_) => break,
            }
        }
        true
    }

    /// Sends one body until it is delivered (`Ok`) or refused (`Err` with the reason).
    async fn deliver(
        &self,
        cx: &OutputContext,
        url: &reqwest::Url,
        body: Vec<u8>,
    ) -> Result<(), String> {
        let body = if self.config.gzip { gzip(&body) } else { body };
        let mut backoff = Backoff::new(
            Duration::from_millis(self.config.backoff_initial_ms),
            Duration::from_millis(self.config.backoff_max_ms),
            None,
        );
        let cap = Duration::from_millis(self.config.backoff_max_ms);
        loop {
            match self.attempt(url, &body).await {
                Attempt::Delivered => {
                    cx.set_state(HealthState::Ok, None);
                    return Ok(());
                }
                Attempt::Refused(reason) => return Err(reason),
                Attempt::Retry(reason, after) => {
                    // Unlimited attempts: there is always a delay. While the graph drains
                    // the runtime bounds this by `shutdown_timeout_ms`.
                    let delay = backoff.next_jittered().unwrap_or(cap);
                    let delay = after.map_or(delay, |a| delay.max(a.min(cap)));
                    tracing::debug!(output = cx.name(), endpoint = %self.shown, "OTLP export failed ({reason}), retrying in {delay:?}");
                    cx.set_state(HealthState::Recovering, Some(retry_detail(delay, &reason)));
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    async fn attempt(&self, url: &reqwest::Url, body: &[u8]) -> Attempt {
        let content_type = match self.config.protocol {
            Protocol::HttpJson => "application/json",
            _ => "application/x-protobuf",
        };
        let mut request = self
            .client
            .post(url.clone())
            .headers(self.config.headers.pairs().collect())
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body.to_vec());
        if self.config.gzip {
            request = request.header(reqwest::header::CONTENT_ENCODING, "gzip");
        }
        match request.send().await {
            Ok(response) => {
                let status = response.status();
                if status.is_success() {
                    return Attempt::Delivered;
                }
                let after = response
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let body = response.bytes().await.unwrap_or_default();
                let reason = match status_message(&body) {
                    Some(m) => format!("HTTP {}: {m}", status.as_u16()),
                    None => format!("HTTP {}", status.as_u16()),
                };
                if matches!(status.as_u16(), 429 | 502 | 503 | 504) {
                    Attempt::Retry(reason, after)
                } else {
                    Attempt::Refused(reason)
                }
            }
            Err(e) => Attempt::Retry(describe_http_error(&e), None),
        }
    }
}

fn gzip(body: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(body);
    gz.finish().unwrap_or_default()
}

/// The receiver's reason in a refusal: a `google.rpc.Status` message, as JSON
/// (`message`) or protobuf (field 2), else the body's text; cut to 200 characters.
fn status_message(body: &[u8]) -> Option<String> {
    let text = if let Ok(serde_json::Value::Object(o)) = serde_json::from_slice(body) {
        o.get("message")?.as_str()?.to_owned()
    } else if let Some(m) = protobuf_message(body) {
        m
    } else {
        String::from_utf8_lossy(body).trim().to_owned()
    };
    let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    (!text.is_empty()).then_some(text)
}

/// Field 2 (a string) of a `google.rpc.Status` in protobuf: the first field must be a
/// varint `code` (1) or the message itself.
fn protobuf_message(body: &[u8]) -> Option<String> {
    let mut rest = body;
    let mut message = None;
    while let Some((&key, tail)) = rest.split_first() {
        rest = tail;
        match key {
            0x08 => {
                let end = rest.iter().position(|b| b & 0x80 == 0)?;
                rest = &rest[end + 1..];
            }
            0x12 => {
                let (&len, tail) = rest.split_first()?;
                // Short messages only (a one-byte length): a reason, not a document.
                if len & 0x80 != 0 || usize::from(len) > tail.len() {
                    return None;
                }
                let (m, tail) = tail.split_at(usize::from(len));
                message = Some(std::str::from_utf8(m).ok()?.to_owned());
                rest = tail;
            }
            _ => return message,
        }
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_appended() {
        let base = reqwest::Url::parse("http://h:4318").unwrap();
        assert_eq!(path_url(&base, "v1/logs").as_str(), "http://h:4318/v1/logs");
        let base = reqwest::Url::parse("https://h/otel/?k=1").unwrap();
        assert_eq!(
            path_url(&base, "v1/traces").as_str(),
            "https://h/otel/v1/traces?k=1"
        );
    }

    #[test]
    fn refusal_reasons_are_read() {
        assert_eq!(
            status_message(br#"{"code":3,"message":"bad body"}"#).as_deref(),
            Some("bad body")
        );
        let mut pb = vec![0x08, 0x03, 0x12, 4];
        pb.extend_from_slice(b"nope");
        assert_eq!(status_message(&pb).as_deref(), Some("nope"));
        assert_eq!(status_message(b"plain\n").as_deref(), Some("plain"));
        assert_eq!(status_message(b""), None);
    }
}
