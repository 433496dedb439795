//! The `webhook` output: each signal (or a batch of them) POSTed as JSON to a URL.
//!
//! A request that times out, cannot connect or gets a 5xx answer is retried with capped
//! exponential backoff; a 4xx answer is not retried (the receiver refused that body: the
//! same body would be refused again): it is logged and counted as refused. What the
//! retries cannot deliver is logged and counted as dropped. The queue in front of the
//! output is the graph's usual one (`queue`, `when_full`, default `drop_oldest`: a dead
//! receiver never holds up the rest of the graph).
//!
//! With `signature`, every request carries an HMAC-SHA256 of its exact body, hex, in a
//! header (`X-Patchbay-Signature: sha256=<hex>` by default), so the receiver can check it
//! came from whoever holds the secret. The secret, the headers' values and the URL's
//! credentials and query never appear in logs or health details.

use std::collections::BTreeMap;
use std::time::Duration;

use patchbay_graph::{
    Adapter, BoxFuture, ComponentError, ComponentStats, ComponentType, Diagnostic, HealthState,
    Options, Output, OutputContext, WhenFull, options_of,
};
use patchbay_signal::SharedSignal;
use patchbay_transport::backoff::Backoff;
use patchbay_transport::client_builder;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;

/// The webhook output, described for the registry and `patchbay components`.
pub const ADAPTER: Adapter = Adapter::new(
    "webhook",
    "HTTP webhooks: signals POSTed as JSON",
    &[ComponentType::output(
        "webhook",
        "POST each signal (or batches) as JSON to a URL, signed, retried on 5xx",
        build,
        options_of::<WebhookConfig>,
    )
    .when_full(WhenFull::DropOldest)],
);

/// `[outputs.NAME] type = "webhook"`.
///
/// ```toml
/// [outputs.alerts]
/// type = "webhook"
/// inputs = ["kinds.errors"]
/// url = "https://hooks.example.com/patchbay"
/// headers = { Authorization = "Bearer ${HOOK_TOKEN}" }
/// signature = { secret = "${HOOK_SECRET}" }
/// batch = { max = 50, max_wait_ms = 1000 }
/// ```
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// The `http://` or `https://` URL to POST to.
    pub url: String,
    /// Headers sent with every request (`Content-Type: application/json` is always sent).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Send batches as JSON arrays instead of one envelope per request.
    #[serde(default)]
    pub batch: Option<BatchConfig>,
    /// Sign each body with HMAC-SHA256.
    #[serde(default)]
    pub signature: Option<SignatureConfig>,
    /// How long one request may take (ms, default 10000) before it is retried.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// How many times a failed request is retried (default 5; 0: never).
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// The first delay between retries (ms, default 500), doubled each retry.
    #[serde(default = "default_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    /// The longest delay between retries (ms, default 30000).
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
}

/// `batch = { max = N, max_wait_ms = T }`: a batch is sent when it has `max` signals or its
/// first signal has waited `max_wait_ms`, whichever comes first.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// The most signals in one request (≥ 1).
    pub max: usize,
    /// The longest a signal waits for the batch to fill (ms, default 1000).
    #[serde(default = "default_batch_wait_ms")]
    pub max_wait_ms: u64,
}

/// `signature = { secret = "…" }`: the HMAC-SHA256 of each body, in a header.
#[derive(Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignatureConfig {
    /// The shared secret (write `${ENV_VAR}` to keep it out of the file).
    pub secret: String,
    /// The header carrying the signature (default `X-Patchbay-Signature`).
    #[serde(default = "default_signature_header")]
    pub header: String,
    /// Written before the hex digest (default `sha256=`).
    #[serde(default = "default_signature_prefix")]
    pub prefix: String,
}

impl std::fmt::Debug for SignatureConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignatureConfig")
            .field("secret", &"<redacted>")
            .field("header", &self.header)
            .field("prefix", &self.prefix)
            .finish()
    }
}

fn default_timeout_ms() -> u64 {
    10_000
}
fn default_max_retries() -> u32 {
    5
}
fn default_backoff_initial_ms() -> u64 {
    500
}
fn default_backoff_max_ms() -> u64 {
    30_000
}
fn default_batch_wait_ms() -> u64 {
    1000
}
fn default_signature_header() -> String {
    "X-Patchbay-Signature".into()
}
fn default_signature_prefix() -> String {
    "sha256=".into()
}

/// Why a webhook could not be built.
#[derive(Debug, thiserror::Error)]
enum BuildError {
    #[error("the HTTP client could not be built: {0}")]
    Client(reqwest::Error),
}

/// Builds a `webhook` output from its options.
pub fn build(options: &Options<'_>) -> Result<Box<dyn Output>, Diagnostic> {
    let config: WebhookConfig = options.parse()?;
    let url = reqwest::Url::parse(&config.url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
        .ok_or_else(|| options.error_at("url", "expected an http:// or https:// URL"))?;
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in &config.headers {
        let key = format!("headers.{name}");
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| options.error_at(&key, "not a valid header name"))?;
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| options.error_at(&key, "not a valid header value"))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    let signature = match &config.signature {
        Some(s) => {
            let header = HeaderName::from_bytes(s.header.as_bytes())
                .map_err(|_| options.error_at("signature.header", "not a valid header name"))?;
            if s.secret.is_empty() {
                return Err(options.error_at("signature.secret", "the secret is empty"));
            }
            Some(Signer {
                key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, s.secret.as_bytes()),
                header,
                prefix: s.prefix.clone(),
            })
        }
        None => None,
    };
    if let Some(batch) = &config.batch
        && batch.max == 0
    {
        return Err(options.error_at("batch.max", "must be at least 1"));
    }
    if config.timeout_ms == 0 {
        return Err(options.error_at("timeout_ms", "must be at least 1"));
    }
    patchbay_transport::backoff::check_delays(
        options,
        config.backoff_initial_ms,
        config.backoff_max_ms,
    )?;
    let client = client_builder()
        .timeout(Duration::from_millis(config.timeout_ms))
        .build()
        .map_err(|e| options.error(BuildError::Client(e.without_url()).to_string()))?;
    Ok(Box::new(Webhook {
        shown: shown_url(&url),
        url,
        headers,
        signature,
        client,
        config,
    }))
}

/// The URL as logs show it: scheme, host, port and path, without credentials or query.
fn shown_url(url: &reqwest::Url) -> String {
    let mut shown = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(port) = url.port() {
        shown.push_str(&format!(":{port}"));
    }
    shown.push_str(url.path());
    shown
}

/// Signs bodies.
struct Signer {
    key: ring::hmac::Key,
    header: HeaderName,
    prefix: String,
}

impl Signer {
    fn sign(&self, body: &[u8]) -> HeaderValue {
        let tag = ring::hmac::sign(&self.key, body);
        let mut text = self.prefix.clone();
        for byte in tag.as_ref() {
            text.push_str(&format!("{byte:02x}"));
        }
        // The prefix was a valid header value when the config was read (it is one
        // with hex digits appended); a bad one sends no signature rather than a wrong one.
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

struct Webhook {
    url: reqwest::Url,
    shown: String,
    headers: HeaderMap,
    signature: Option<Signer>,
    client: reqwest::Client,
    config: WebhookConfig,
}

/// How one request ended.
enum Attempt {
    Delivered,
    /// Worth trying again: a timeout, no connection, a 5xx.
    Retry(String),
    /// The receiver refused it (4xx): trying again would not help.
    Refused(String),
}

impl Output for Webhook {
    fn run(self: Box<Self>, cx: OutputContext) -> BoxFuture<Result<(), ComponentError>> {
        Box::pin(async move {
            cx.set_state(HealthState::Ok, None);
            let mut batch: Vec<SharedSignal> = Vec::new();
            while self.next_batch(&cx, &mut batch).await {
                self.deliver(&cx, &batch).await;
                batch.clear();
            }
            cx.set_state(HealthState::Stopped, None);
            Ok(())
        })
    }
}

impl Webhook {
    /// Fills `batch` (one signal without `batch`); `false` when the input has ended and
    /// nothing is left.
    async fn next_batch(&self, cx: &OutputContext, batch: &mut Vec<SharedSignal>) -> bool {
        let Some(first) = cx.next().await else {
            return false;
        };
        batch.push(first);
        let Some(config) = &self.config.batch else {
            return true;
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(config.max_wait_ms);
        while batch.len() < config.max {
            match tokio::time::timeout_at(deadline, cx.next()).await {
                Ok(Some(signal)) => batch.push(signal),
                // The input ended or the batch waited long enough: send what there is.
                Ok(None) | Err(_) => break,
            }
        }
        true
    }

    fn body(&self, batch: &[SharedSignal]) -> Vec<u8> {
        if self.config.batch.is_none()
            && let [signal] = batch
        {
            return signal.to_json().into_bytes();
        }
        let mut body = String::from("[");
        for (i, signal) in batch.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            body.push_str(&signal.to_json());
        }
        body.push(']');
        body.into_bytes()
    }

    /// Sends one body, retrying what is worth retrying; counts the outcome.
    async fn deliver(&self, cx: &OutputContext, batch: &[SharedSignal]) {
        let body = self.body(batch);
        let n = batch.len() as u64;
        let mut backoff = Backoff::new(
            Duration::from_millis(self.config.backoff_initial_ms),
            Duration::from_millis(self.config.backoff_max_ms),
            Some(self.config.max_retries),
        );
        loop {
            match self.attempt(&body).await {
                Attempt::Delivered => {
                    cx.delivered(n);
                    cx.set_state(HealthState::Ok, None);
                    return;
                }
                Attempt::Refused(reason) => {
                    tracing::warn!(output = cx.name(), url = %self.shown, "webhook refused {n} signal(s): {reason}");
                    for _ in 0..n {
                        cx.refused(&reason);
                    }
                    return;
                }
                Attempt::Retry(reason) => match backoff.next_jittered() {
                    // Also while the graph drains: the runtime bounds that by
                    // `shutdown_timeout_ms`.
                    Some(delay) => {
                        tracing::debug!(output = cx.name(), url = %self.shown, "webhook failed ({reason}), retrying in {delay:?}");
                        cx.set_state(
                            HealthState::Recovering,
                            Some(patchbay_transport::backoff::retry_detail(delay, &reason)),
                        );
                        tokio::time::sleep(delay).await;
                    }
                    None => {
                        tracing::warn!(output = cx.name(), url = %self.shown, "webhook dropped {n} signal(s) after {} attempt(s): {reason}", backoff.attempts() + 1);
                        ComponentStats::add(&cx.stats().dropped, n);
                        cx.set_state(HealthState::Recovering, Some(reason));
                        return;
                    }
                },
            }
        }
    }

    async fn attempt(&self, body: &[u8]) -> Attempt {
        let mut request = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .body(body.to_vec());
        if let Some(signer) = &self.signature {
            request = request.header(signer.header.clone(), signer.sign(body));
        }
        match request.send().await {
            Ok(response) => {
                let status = response.status();
                if status.is_success() {
                    Attempt::Delivered
                } else if status.is_client_error() {
                    Attempt::Refused(format!("HTTP {status}"))
                } else {
                    Attempt::Retry(format!("HTTP {status}"))
                }
            }
            // Without the URL: it may carry credentials.
            Err(e) if e.is_timeout() => Attempt::Retry("timed out".into()),
            Err(e) => Attempt::Retry(e.without_url().to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_hmac_sha256_hex() {
        // RFC 4231, test case 2.
        let signer = Signer {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"Jefe"),
            header: HeaderName::from_static("x-sig"),
            prefix: "sha256=".into(),
        };
        assert_eq!(
            signer.sign(b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn shown_urls_have_no_secrets() {
        let url = reqwest::Url::parse("https://user:pw@example.com:8443/hook?token=abc").unwrap();
        assert_eq!(shown_url(&url), "https://example.com:8443/hook");
    }
}
