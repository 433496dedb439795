//! The `otlp` output (`[outputs.NAME] type = "otlp"`, [`OtlpExporterConfig`]): signals
//! exported as OTLP/HTTP or OTLP/gRPC to any OTLP receiver (the OpenTelemetry Collector,
//! Jaeger, Langfuse, Phoenix, another patchbay's `otlp` source), as the OpenTelemetry
//! SDKs' exporters send them.
//!
//! Signals are batched (`batch_max`, `batch_timeout_ms`), encoded by
//! [`Encoder`] (a log record per signal; `execute_tool` and
//! `invoke_agent` spans for tool calls and tasks) and sent as logs and, when the batch
//! completed spans, as traces: POSTed to `{endpoint}/v1/logs` and `{endpoint}/v1/traces`
//! as protobuf or JSON (`http/protobuf`, `http/json`), or called as the `Export` methods
//! of the collector's `LogsService` and `TraceService` over HTTP/2 (`grpc`, [`grpc`]
//! on the wire), gzipped if asked.
//!
//! Retried with capped exponential backoff: a request answered 429, 502, 503 or 504
//! (after at least its `Retry-After`, in seconds or an HTTP date, up to
//! `backoff_max_ms`), a gRPC call ended with a status the OpenTelemetry specification
//! calls retryable (`UNAVAILABLE`, `CANCELLED`, `DEADLINE_EXCEEDED`, `ABORTED`,
//! `OUT_OF_RANGE`, `DATA_LOSS`, and `RESOURCE_EXHAUSTED` when its `RetryInfo` says when;
//! its delay waited likewise), a timeout, no connection. Any other answer that is not a
//! success refuses the request: it is dropped, not retried, and each of its signals (a
//! traces request: each of its spans) is counted as refused with the receiver's reason.
//! Delivery counts the signals of the logs request. The endpoint's credentials and secret
//! query parameters and the headers' values never appear in logs or health details.

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
use crate::grpc;
use crate::model::Traces;

/// `[outputs.NAME] type = "otlp"`: signals to an OTLP receiver, over OTLP/HTTP or
/// OTLP/gRPC.
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
    /// `http://127.0.0.1:4318`, with `grpc` `http://127.0.0.1:4317`). Over HTTP,
    /// `/v1/logs` and `/v1/traces` are appended to its path, as the OTLP exporters do with
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`; over gRPC its path is not used (the calls go to
    /// `/opentelemetry.proto.collector.logs.v1.LogsService/Export` and the trace
    /// service's), and `http://` means HTTP/2 without TLS.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `http/protobuf` (default), `http/json` or `grpc`.
    #[serde(default)]
    pub protocol: Protocol,
    /// Headers sent with every request (`Authorization = "Bearer ${TOKEN}"`; gRPC metadata
    /// with `grpc`); their values are never logged.
    #[serde(default)]
    pub headers: Headers,
    /// Compress request bodies with gzip (`Content-Encoding: gzip`; with `grpc`, the
    /// message, `grpc-encoding: gzip`). Default false.
    #[serde(default)]
    pub gzip: bool,
    /// The most signals in one export (default 512, at least 1).
    #[serde(default = "default_batch_max")]
    pub batch_max: usize,
    /// The longest the first signal of a batch waits for the batch to fill, in ms
    /// (default 1000; 0: send what is waiting at once).
    #[serde(default = "default_batch_timeout_ms")]
    pub batch_timeout_ms: u64,
    /// How long one request may take, in ms (default 10000), before it is retried (with
    /// `grpc`, also the call's `grpc-timeout`).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The first delay between retries, in ms (default 1000), doubled each retry.
    #[serde(default = "default_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    /// The longest delay between retries, in ms (default 30000); also caps a
    /// `Retry-After` or a gRPC `RetryInfo`.
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
    /// OTLP/gRPC: protobuf messages over HTTP/2 (without TLS for `http://`).
    #[serde(rename = "grpc")]
    Grpc,
}

/// The endpoint when the config names none: a local collector's port for the protocol.
fn default_endpoint(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Grpc => "http://127.0.0.1:4317",
        _ => "http://127.0.0.1:4318",
    }
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
    let endpoint = config
        .endpoint
        .as_deref()
        .unwrap_or(default_endpoint(config.protocol));
    let base = reqwest::Url::parse(endpoint)
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
    let builder = match config.protocol {
        Protocol::Grpc => grpc_client_builder(base.scheme() == "https"),
        _ => client_builder(),
    };
    let client = builder
        .timeout(Duration::from_millis(config.timeout_ms))
        .build()
        .map_err(|e| {
            options.error(format!(
                "the HTTP client could not be built: {}",
                describe_http_error(&e)
            ))
        })?;
    let (logs, traces) = match config.protocol {
        Protocol::Grpc => (
            method_url(&base, grpc::LOGS_METHOD),
            method_url(&base, grpc::TRACES_METHOD),
        ),
        _ => (path_url(&base, "v1/logs"), path_url(&base, "v1/traces")),
    };
    Ok(Box::new(Exporter {
        shown: RedactedUrl(base.as_str()).to_string(),
        logs,
        traces,
        client,
        config,
    }))
}

/// A client for gRPC: HTTP/2 from the start (h2c for `http://`, and over TLS `h2` is the
/// only protocol offered, as gRPC servers require).
fn grpc_client_builder(tls: bool) -> reqwest::ClientBuilder {
    if tls {
        patchbay_transport::tls::install_crypto_provider();
        if let Ok(config) = patchbay_transport::tls::client_config(None) {
            let mut config = (*config).clone();
            config.alpn_protocols = vec![b"h2".to_vec()];
            return patchbay_transport::client_builder_with(&std::sync::Arc::new(config))
                .http2_prior_knowledge();
        }
    }
    client_builder().http2_prior_knowledge()
}

/// `base` with its path and query replaced by a gRPC method's path.
fn method_url(base: &reqwest::Url, method: &str) -> reqwest::Url {
    let mut url = base.clone();
    url.set_path(method);
    url.set_query(None);
    url
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
    /// Worth trying again (429, 502, 503, 504, a retryable gRPC status, a timeout, no
    /// connection), after at least the receiver's `Retry-After` or `RetryInfo`.
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
                let spans = encoded.traces.as_ref().map_or(0, span_count);
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
                    tracing::warn!(output = cx.name(), endpoint = %self.shown, "OTLP receiver refused {spans} span(s): {reason}");
                    for _ in 0..spans {
                        cx.refused(&reason);
                    }
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
            Protocol::HttpProtobuf => "application/x-protobuf",
            Protocol::Grpc => return self.call(url, body).await,
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
                let after = retry_after(response.headers(), std::time::SystemTime::now());
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

/// The number of spans in an export.
fn span_count(traces: &Traces) -> usize {
    traces
        .resources
        .iter()
        .flat_map(|r| &r.scopes)
        .map(|s| s.items.len())
        .sum()
}

/// How long a `Retry-After` asks to wait: a number of seconds, or an HTTP date (the time
/// until it, as of `now`; none if it has passed).
fn retry_after(
    headers: &reqwest::header::HeaderMap,
    now: std::time::SystemTime,
) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

impl Exporter {
    /// One gRPC call (the body is the protobuf message): its status from the trailers,
    /// or from the headers of a trailers-only answer.
    async fn call(&self, url: &reqwest::Url, message: &[u8]) -> Attempt {
        use http_body_util::BodyExt as _;
        let timeout = Duration::from_millis(self.config.timeout_ms);
        let mut request = self
            .client
            .post(url.clone())
            .headers(self.config.headers.pairs().collect())
            .header(reqwest::header::CONTENT_TYPE, "application/grpc")
            .header(reqwest::header::TE, "trailers")
            .header("grpc-timeout", grpc::format_timeout(timeout))
            .body(grpc::frame(self.config.gzip, message));
        if self.config.gzip {
            request = request.header("grpc-encoding", "gzip");
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => return Attempt::Retry(describe_http_error(&e), None),
        };
        let status = response.status();
        if status != reqwest::StatusCode::OK {
            // Not a gRPC answer (a proxy's): mapped as gRPC clients map it.
            let code = grpc::code_of_http(status.as_u16());
            let after = retry_after(response.headers(), std::time::SystemTime::now());
            let reason = format!("HTTP {} (gRPC {})", status.as_u16(), grpc::code_name(code));
            return if grpc::retryable(code, false) {
                Attempt::Retry(reason, after)
            } else {
                Attempt::Refused(reason)
            };
        }
        let response: axum::http::Response<reqwest::Body> = response.into();
        let (parts, body) = response.into_parts();
        let collected = match body.collect().await {
            Ok(collected) => collected,
            Err(e) => return Attempt::Retry(describe_http_error(&e), None),
        };
        let trailers = collected.trailers().cloned().unwrap_or_default();
        // A trailers-only answer carries its status in the headers.
        let status_in = if parts.headers.contains_key("grpc-status") {
            &parts.headers
        } else {
            &trailers
        };
        let Some(code) = status_in
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u32>().ok())
        else {
            return Attempt::Refused("the answer has no grpc-status".into());
        };
        if code == grpc::code::OK {
            let body = collected.to_bytes();
            if let Ok((false, answer)) = grpc::unframe(&body)
                && let Some((rejected, why)) = grpc::partial_success(answer)
                && rejected > 0
            {
                tracing::warn!(endpoint = %self.shown, "the OTLP receiver dropped {rejected} record(s): {}", clean(&why));
            }
            return Attempt::Delivered;
        }
        let message = status_in
            .get("grpc-message")
            .map(|v| clean(&grpc::decode_message(v.as_bytes())))
            .filter(|m| !m.is_empty());
        let after = status_in
            .get("grpc-status-details-bin")
            .and_then(|v| grpc::retry_delay(v.as_bytes()));
        let reason = match message {
            Some(m) => format!("gRPC {code} {}: {m}", grpc::code_name(code)),
            None => format!("gRPC {code} {}", grpc::code_name(code)),
        };
        if grpc::retryable(code, after.is_some()) {
            Attempt::Retry(reason, after)
        } else {
            Attempt::Refused(reason)
        }
    }
}

/// A receiver's text as it may be shown: no control characters, at most 200 of them.
fn clean(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(200).collect()
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
    let text = clean(&text);
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
    fn grpc_methods_replace_the_path() {
        let base = reqwest::Url::parse("http://h:4317/ignored?k=1").unwrap();
        assert_eq!(
            method_url(&base, grpc::LOGS_METHOD).as_str(),
            "http://h:4317/opentelemetry.proto.collector.logs.v1.LogsService/Export"
        );
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let of = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(RETRY_AFTER, HeaderValue::from_static(value));
            retry_after(&headers, now)
        };
        assert_eq!(of("7"), Some(Duration::from_secs(7)));
        assert_eq!(
            of("Sun, 06 Nov 1994 08:50:07 GMT"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(of("Sun, 06 Nov 1994 08:00:00 GMT"), Some(Duration::ZERO));
        assert_eq!(of("soon"), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
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
