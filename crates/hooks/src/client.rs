//! The client side of the hook endpoint: what `patchbay hooks emit` posts and what
//! `patchbay hooks status` asks (the same for every agent).

use std::time::Duration;

/// The path the hooks post their payloads to (`http://LISTEN/hook`).
pub const HOOK_PATH: &str = "/hook";
/// The path that answers `200 ok` while the component runs.
pub const HEALTH_PATH: &str = "/health";

/// Why a request to the endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No connection, a timeout, a broken answer.
    #[error("{0}")]
    Http(String),
    /// The endpoint answered with an error status.
    #[error("HTTP {status}: {body}")]
    Status {
        /// The status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
}

fn client(connect: Duration, total: Duration) -> Result<reqwest::Client, ClientError> {
    patchbay_transport::client_builder()
        .timeout(total)
        .connect_timeout(connect)
        .no_proxy()
        .build()
        .map_err(|e| ClientError::Http(e.to_string()))
}

/// Posts a hook payload to `url` (with the bearer `token` if any) within `timeout`, and
/// returns the answer's body.
pub async fn post_hook(
    url: &str,
    body: Vec<u8>,
    token: Option<&str>,
    timeout: Duration,
) -> Result<String, ClientError> {
    post_hook_within(url, body, token, timeout, timeout).await
}

/// Like [`post_hook`], with a connect timeout of its own: a stopped endpoint is given up
/// on after `connect`, a held call waited for up to `total`.
pub async fn post_hook_within(
    url: &str,
    body: Vec<u8>,
    token: Option<&str>,
    connect: Duration,
    total: Duration,
) -> Result<String, ClientError> {
    let mut request = client(connect, total)?
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request
        .send()
        .await
        .map_err(|e| ClientError::Http(without_url(&e)))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| ClientError::Http(without_url(&e)))?;
    if !status.is_success() {
        return Err(ClientError::Status {
            status: status.as_u16(),
            body: patchbay_signal::truncate(&text, 200),
        });
    }
    Ok(text)
}

/// Whether the component behind the hook `url` answers (`GET /health`).
pub async fn ping(hook_url: &str, timeout: Duration) -> Result<(), ClientError> {
    let health = match hook_url.strip_suffix(HOOK_PATH) {
        Some(base) => format!("{base}{HEALTH_PATH}"),
        None => format!("{}{HEALTH_PATH}", hook_url.trim_end_matches('/')),
    };
    let response = client(timeout, timeout)?
        .get(&health)
        .send()
        .await
        .map_err(|e| ClientError::Http(without_url(&e)))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(ClientError::Status {
            status: response.status().as_u16(),
            body: String::new(),
        })
    }
}

/// reqwest's message without the URL (which could carry credentials), and its cause.
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.without_url_ref().to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

trait WithoutUrl {
    fn without_url_ref(&self) -> String;
}

impl WithoutUrl for reqwest::Error {
    fn without_url_ref(&self) -> String {
        let text = self.to_string();
        match self.url() {
            Some(url) => text
                .replace(&format!(" ({url})"), "")
                .replace(url.as_str(), "<url>"),
            None => text,
        }
    }
}
