//! Finding local LLM servers: Ollama and LM Studio, by their OpenAI-compatible model list.
//!
//! - **Ollama**: `GET http://127.0.0.1:11434/v1/models`, then `/api/tags` if that fails;
//! - **LM Studio**: `GET http://127.0.0.1:1234/v1/models`.
//!
//! Model lists are read by `patchbay_openai::model_ids` (OpenAI, Ollama with
//! `"data": null`, LM Studio without `created`, Ollama's `/api/tags`). Each probe, connect
//! to last byte, takes at most the context's timeout, over a client of its own without
//! proxies (these addresses are loopback) or pooled connections.

use std::time::Duration;

use patchbay_graph::BoxFuture;
use patchbay_graph::descriptor::Probe;
use patchbay_graph::probe::{Offers, ProbeContext, Service, ServiceState};
use patchbay_transport::probe::probe_client;

/// Ollama's well-known local address.
pub const OLLAMA_ADDRESS: &str = "127.0.0.1:11434";
/// LM Studio's well-known local address.
pub const LMSTUDIO_ADDRESS: &str = "127.0.0.1:1234";

/// The probes of `local:ollama` and `local:lmstudio`.
pub const PROBES: [Probe; 2] = [
    Probe::new("ollama", run_ollama),
    Probe::new("lmstudio", run_lmstudio),
];

fn run_ollama(cx: ProbeContext) -> BoxFuture<Option<Service>> {
    Box::pin(async move { Some(probe_ollama(&cx).await) })
}

fn run_lmstudio(cx: ProbeContext) -> BoxFuture<Option<Service>> {
    Box::pin(async move {
        let address = cx.address_or(LMSTUDIO_ADDRESS).to_owned();
        Some(probe_models("lmstudio", &address, "/v1/models", cx.timeout).await)
    })
}

/// Ollama: `/v1/models`, then `/api/tags` when that does not give a model list.
pub async fn probe_ollama(cx: &ProbeContext) -> Service {
    let address = cx.address_or(OLLAMA_ADDRESS);
    let first = probe_models("ollama", address, "/v1/models", cx.timeout).await;
    if first.state != ServiceState::Error {
        return first;
    }
    let tags = probe_models("ollama", address, "/api/tags", cx.timeout).await;
    if tags.is_available() {
        return tags.with_detail(format!(
            "/v1/models failed ({}); models from /api/tags",
            first.detail.as_deref().unwrap_or("error")
        ));
    }
    first
}

/// A server's model list at `GET http://{address}{path}`.
pub async fn probe_models(
    service: &'static str,
    address: &str,
    path: &str,
    timeout: Duration,
) -> Service {
    let base = format!("http://{address}");
    let found = |state| Service::new(service, Offers::Models, base.clone(), state);
    match get(&base, path, timeout).await {
        Ok((status, body)) if status.is_success() => match patchbay_openai::model_ids(&body) {
            Ok(models) => Service {
                models,
                ..found(ServiceState::Available)
            },
            Err(err) => found(ServiceState::Error).with_detail(format!("GET {path}: {err}")),
        },
        Ok((status, _)) => {
            found(ServiceState::Error).with_detail(format!("GET {path}: HTTP {}", status.as_u16()))
        }
        Err(ProbeError::Unreachable(reason)) => {
            found(ServiceState::Unavailable).with_detail(reason)
        }
        Err(ProbeError::BadAnswer(reason)) => {
            found(ServiceState::Error).with_detail(format!("GET {path}: {reason}"))
        }
    }
}

/// The largest model list accepted (they are a few kB).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Why an HTTP probe got no usable answer.
#[derive(Debug)]
enum ProbeError {
    /// Nothing answers there (refused, timed out, reset): the service is not running.
    Unreachable(String),
    /// Something answered, but not HTTP, or too much.
    BadAnswer(String),
}

/// `GET {base}{path}`, all of it (connect, send, read the body) within `timeout`.
async fn get(
    base: &str,
    path: &str,
    timeout: Duration,
) -> Result<(reqwest::StatusCode, Vec<u8>), ProbeError> {
    let client = probe_client().map_err(|e| ProbeError::BadAnswer(e.clone()))?;
    let exchange = async {
        let mut response = client
            .get(format!("{base}{path}"))
            .header("accept", "application/json")
            .send()
            .await?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > MAX_BODY {
                return Ok(Err(format!("the body is larger than {MAX_BODY} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Ok((status, body)))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Err(ProbeError::Unreachable(format!(
            "no answer within {} ms",
            timeout.as_millis()
        ))),
        Ok(Ok(Ok(answer))) => Ok(answer),
        Ok(Ok(Err(too_large))) => Err(ProbeError::BadAnswer(too_large)),
        Ok(Err(err)) => Err(classify(&err)),
    }
}

/// Sorts a reqwest error: a refused or failed connection means nobody is there; anything
/// after the connection (a response that is not HTTP) means something else answered.
fn classify(err: &reqwest::Error) -> ProbeError {
    let io_kind = std::iter::successors(Some(err as &(dyn std::error::Error + 'static)), |e| {
        e.source()
    })
    .find_map(|e| e.downcast_ref::<std::io::Error>())
    .map(std::io::Error::kind);
    match io_kind {
        Some(std::io::ErrorKind::ConnectionRefused) => {
            ProbeError::Unreachable("connection refused".to_owned())
        }
        Some(kind) if err.is_connect() => ProbeError::Unreachable(kind.to_string()),
        _ if err.is_connect() => ProbeError::Unreachable(error_chain(err)),
        _ => ProbeError::BadAnswer(error_chain(err)),
    }
}

/// An error and its causes, `a: b: c`.
fn error_chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The address of a one-connection stand-in that answers `response` (or stays silent).
    async fn stand_in(response: Option<&'static [u8]>) -> String {
        patchbay_testkit::stand_in::answer_once(response).await.addr
    }

    #[tokio::test]
    async fn probes_tell_nobody_there_from_a_wrong_answer() {
        let timeout = Duration::from_millis(300);
        let probe = |addr: String| async move {
            probe_models("lmstudio", &addr, "/v1/models", timeout).await
        };
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let refused = probe(closed).await;
        assert_eq!(refused.state, ServiceState::Unavailable);
        assert_eq!(refused.detail.as_deref(), Some("connection refused"));

        let silent = probe(stand_in(None).await).await;
        assert_eq!(silent.state, ServiceState::Unavailable);
        assert_eq!(silent.detail.as_deref(), Some("no answer within 300 ms"));

        let chunked = probe(
            stand_in(Some(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                  7\r\n{\"data\"\r\nf\r\n:[{\"id\":\"m1\"}]}\r\n0\r\n\r\n",
            ))
            .await,
        )
        .await;
        assert_eq!(chunked.state, ServiceState::Available, "{chunked:?}");
        assert_eq!(chunked.models, ["m1"]);

        let until_close =
            probe(stand_in(Some(b"HTTP/1.1 200 OK\r\n\r\n{\"data\":[{\"id\":\"m2\"}]}")).await)
                .await;
        assert_eq!(until_close.models, ["m2"], "{until_close:?}");

        let not_found =
            probe(stand_in(Some(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")).await)
                .await;
        assert_eq!(not_found.state, ServiceState::Error);
        assert_eq!(
            not_found.detail.as_deref(),
            Some("GET /v1/models: HTTP 404")
        );

        let not_a_list =
            probe(stand_in(Some(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n<html>")).await)
                .await;
        assert_eq!(not_a_list.state, ServiceState::Error, "{not_a_list:?}");

        let not_http = probe(stand_in(Some(b"SSH-2.0-OpenSSH_9.2\r\n")).await).await;
        assert_eq!(not_http.state, ServiceState::Error, "{not_http:?}");
        assert!(
            not_http
                .detail
                .as_deref()
                .unwrap_or("")
                .starts_with("GET /v1/models: "),
            "{not_http:?}"
        );
    }
}
