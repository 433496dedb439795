//! Finding a running `opencode serve`: `GET http://127.0.0.1:4096/global/health`, which
//! answers `{"healthy": true, "version"}` (or 401 when the server has a password). Only
//! that request is made, within the probe's timeout, over a client of its own without
//! proxies (the address is loopback) or pooled connections.

use std::time::Duration;

use patchbay_graph::BoxFuture;
use patchbay_graph::descriptor::Probe;
use patchbay_graph::probe::{Offers, ProbeContext, Service, ServiceState};
use patchbay_transport::probe::probe_client;
use serde_json::Value;

/// `opencode serve`'s well-known local address.
pub const ADDRESS: &str = "127.0.0.1:4096";

/// The path that says the server is there (and its version).
pub const HEALTH_PATH: &str = "/global/health";

/// The largest health answer read (it is a few dozen bytes).
const MAX_BODY: usize = 64 * 1024;

/// The probe of `local:opencode`.
pub const PROBE: Probe = Probe::new("opencode", run_probe);

fn run_probe(cx: ProbeContext) -> BoxFuture<Option<Service>> {
    Box::pin(async move {
        let address = cx.address_or(ADDRESS).to_owned();
        Some(probe(&address, cx.timeout).await)
    })
}

/// What answers at `http://{address}/global/health` within `timeout`: available with
/// its version, or with a password asked for (401); an error when something else
/// answers; unavailable when nothing does.
pub async fn probe(address: &str, timeout: Duration) -> Service {
    let base = format!("http://{address}");
    let found = |state| Service::new(PROBE.service, Offers::Endpoint, base.clone(), state);
    match tokio::time::timeout(timeout, get(&format!("{base}{HEALTH_PATH}"))).await {
        Err(_) => found(ServiceState::Unavailable)
            .with_detail(format!("no answer within {} ms", timeout.as_millis())),
        Ok(Err(Failure::Unreachable(why))) => found(ServiceState::Unavailable).with_detail(why),
        Ok(Err(Failure::BadAnswer(why))) => {
            found(ServiceState::Error).with_detail(format!("GET {HEALTH_PATH}: {why}"))
        }
        Ok(Ok((401, _))) => Service {
            token_found: Some(std::env::var_os("OPENCODE_SERVER_PASSWORD").is_some()),
            ..found(ServiceState::Available).with_detail(
                "the server has a password (OPENCODE_SERVER_PASSWORD): give it as `password`",
            )
        },
        Ok(Ok((200, body))) => match health(&body) {
            Some(version) => {
                found(ServiceState::Available).with_detail(format!("opencode {version}"))
            }
            None => found(ServiceState::Error)
                .with_detail(format!("GET {HEALTH_PATH}: not OpenCode's health answer")),
        },
        Ok(Ok((status, _))) => {
            found(ServiceState::Error).with_detail(format!("GET {HEALTH_PATH}: HTTP {status}"))
        }
    }
}

/// The version in a health answer `{"healthy": true, "version"}`.
fn health(body: &[u8]) -> Option<String> {
    let json: Value = serde_json::from_slice(body).ok()?;
    if json.get("healthy") != Some(&Value::Bool(true)) {
        return None;
    }
    Some(
        json.get("version")
            .and_then(Value::as_str)
            .unwrap_or("(version unknown)")
            .to_owned(),
    )
}

/// Why a probe got no usable answer.
#[derive(Debug)]
enum Failure {
    /// Nothing answers there: the server is not running.
    Unreachable(String),
    /// Something answered, but not HTTP, or too much.
    BadAnswer(String),
}

/// `GET url`: the status and the body.
async fn get(url: &str) -> Result<(u16, Vec<u8>), Failure> {
    let client = probe_client().map_err(|e| Failure::BadAnswer(e.clone()))?;
    let mut response = client
        .get(url)
        .header("accept", "application/json")
        .send()
        .await
        .map_err(|e| classify(&e))?;
    let status = response.status().as_u16();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| classify(&e))? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(Failure::BadAnswer(format!(
                "the body is larger than {MAX_BODY} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((status, body))
}

/// A refused or failed connection means nobody is there; anything after the connection
/// (an answer that is not HTTP) means something else answered.
fn classify(err: &reqwest::Error) -> Failure {
    let refused = std::iter::successors(Some(err as &(dyn std::error::Error + 'static)), |e| {
        e.source()
    })
    .filter_map(|e| e.downcast_ref::<std::io::Error>())
    .any(|e| e.kind() == std::io::ErrorKind::ConnectionRefused);
    let why = patchbay_transport::describe_http_error(err);
    if refused {
        Failure::Unreachable("connection refused".into())
    } else if err.is_connect() {
        Failure::Unreachable(why)
    } else {
        Failure::BadAnswer(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_testkit::stand_in::answer_once;

    /// What the probe finds at a stand-in that answers `response`, which must have been
    /// asked `GET /global/health`.
    async fn probe_answered(response: &'static [u8]) -> Service {
        let peer = answer_once(Some(response)).await;
        let found = probe(&peer.addr, Duration::from_secs(5)).await;
        let head = peer.request_head().await;
        let shown = String::from_utf8_lossy(&head).into_owned();
        assert!(
            head.starts_with(b"GET /global/health HTTP/1.1\r\n"),
            "{shown}"
        );
        found
    }

    #[tokio::test]
    async fn the_probe_tells_opencode_from_nobody_and_from_something_else() {
        let healthy = probe_answered(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 36\r\n\r\n\
              {\"healthy\":true,\"version\":\"1.18.33\"}",
        )
        .await;
        assert_eq!(healthy.state, ServiceState::Available, "{healthy:?}");
        assert_eq!(healthy.detail.as_deref(), Some("opencode 1.18.33"));
        assert!(healthy.address.starts_with("http://127.0.0.1:"));

        let locked = probe_answered(
            b"HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Basic realm=\"Secure Area\"\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert_eq!(locked.state, ServiceState::Available, "{locked:?}");
        assert!(locked.detail.unwrap().contains("password"));

        let html = probe_answered(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n<html>").await;
        assert_eq!(html.state, ServiceState::Error, "{html:?}");

        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let nobody = probe(&closed, Duration::from_secs(5)).await;
        assert_eq!(nobody.state, ServiceState::Unavailable, "{nobody:?}");
        assert_eq!(nobody.detail.as_deref(), Some("connection refused"));
    }
}
