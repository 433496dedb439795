//! The transparent tap proxy: forwards `/v1/` requests to the upstream and relays each
//! response chunk to the client as soon as it is read, feeding the same bytes to a
//! [`Tap`] on the side.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use patchbay_graph::ComponentStats;
use patchbay_signal::normalize::Decoded;
use patchbay_signal::well_known::{Payload, TaskDispatch};
use patchbay_signal::{next_id, truncate};
use patchbay_transport::listen::{Access, Limits, Listener, Origins};
use serde_json::json;
use tokio::net::TcpListener;

use crate::api::{Api, RequestSummary};
use crate::tap::{Emitter, Tap, TapRequest};

/// Largest request body forwarded (LLM requests with images can be large).
pub const MAX_REQUEST_BODY: usize = 64 * 1024 * 1024;
/// Longest `description` of a `task_dispatch` (the last user message).
pub const DESCRIPTION_MAX: usize = 500;

/// Headers that belong to one connection, not to the message (RFC 9110 §7.6.1), plus
/// those the proxy sets itself: never forwarded either way. `accept-encoding` is dropped
/// from requests so that the upstream answers uncompressed bytes the tap can decode.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// What every request handler shares.
#[derive(Debug)]
pub struct ProxyState {
    /// The API spoken.
    pub api: Api,
    /// The client of the upstream.
    pub client: reqwest::Client,
    /// The upstream's base URL, without trailing `/`.
    pub upstream: String,
    /// The source of the signals.
    pub source: String,
    /// Bounds the wait for the answer and between two chunks.
    pub timeout: Duration,
    /// Where the signals go.
    pub emitter: Emitter,
}

/// The HTTP client the proxy (and prompt mode) uses: the transport's TLS setup for
/// `https://` upstreams (rustls with the ring provider, the system's roots), no redirects
/// followed (the client sees them), no automatic
/// decompression (bytes are relayed as they are).
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    patchbay_transport::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

/// The proxy's routes: everything is handled by `forward` (which answers 404 outside
/// `/v1/`).
pub fn router(state: Arc<ProxyState>) -> Router {
    Router::new().fallback(forward).with_state(state)
}

/// Serves the proxy on `listener` until the future is dropped, with the listeners'
/// default bounds (refusals are counted in stats of their own; the component counts them
/// in its own through the hardened listener it builds).
pub async fn serve(listener: TcpListener, state: Arc<ProxyState>) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    let stats = Arc::new(patchbay_graph::ComponentStats::new(
        "proxy",
        "proxy",
        patchbay_graph::telemetry::Role::Source,
    ));
    let door = door("proxy", local, None, Limits::default(), stats);
    serve_with(listener, state, door).await;
    Ok(())
}

/// Serves the proxy on `listener` until the future is dropped, through the hardened
/// listener of `door` (header and idle timeouts, connection cap, `Host` and `Origin`
/// checked: the SDKs send `Host: 127.0.0.1:PORT` or `localhost:PORT` and no `Origin`).
pub(crate) async fn serve_with(listener: TcpListener, state: Arc<ProxyState>, door: Listener) {
    patchbay_transport::listen::serve(listener, router(state), door, std::future::pending()).await
}

/// The door of a proxy listening on `local`: it listens on loopback only (its config
/// refuses anything else), so it answers to loopback host names and `allowed_hosts`,
/// and to no browser page but a local one.
pub(crate) fn door(
    name: &str,
    local: SocketAddr,
    allowed_hosts: Option<Vec<String>>,
    limits: Limits,
    stats: Arc<ComponentStats>,
) -> Listener {
    Listener {
        name: name.to_owned(),
        limits,
        access: Access::new(local, allowed_hosts, Origins::Local),
        stats,
        refusal,
    }
}

/// How the proxy answers a request refused at the door: an API-style error, which the
/// SDKs show as it is.
pub fn refusal(status: StatusCode, message: &'static str) -> Response {
    json_error(status, "forbidden", message)
}

fn json_error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"error": {"type": kind, "message": message}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn is_hop_by_hop(name: &HeaderName, connection_listed: &[String]) -> bool {
    let name = name.as_str();
    HOP_BY_HOP.contains(&name) || connection_listed.iter().any(|c| c == name)
}

/// Header names listed in `Connection` (also hop-by-hop).
fn connection_listed(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The headers forwarded upstream: all but hop-by-hop ones, `host` (the upstream's is
/// set by the client), `content-length` (recomputed) and `accept-encoding`. API keys
/// (`authorization`, `x-api-key`, `api-key`) pass through untouched and are never logged.
fn request_headers(headers: &HeaderMap) -> HeaderMap {
    let listed = connection_listed(headers);
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if is_hop_by_hop(name, &listed)
            || name == header::HOST
            || name == header::CONTENT_LENGTH
            || name == header::ACCEPT_ENCODING
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// The headers relayed to the client: all but hop-by-hop ones.
fn response_headers(headers: &HeaderMap) -> HeaderMap {
    let listed = connection_listed(headers);
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if !is_hop_by_hop(name, &listed) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// Who made the request: its `User-Agent`, else its address.
fn client_name(headers: &HeaderMap, addr: Option<SocketAddr>) -> String {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .or_else(|| addr.map(|a| a.to_string()))
        .unwrap_or_else(|| "unknown".into())
}

/// Handles one request: forwards it, relays the answer, taps it.
async fn forward(State(state): State<Arc<ProxyState>>, request: Request) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    if path != "/v1" && !path.starts_with("/v1/") {
        return json_error(
            StatusCode::NOT_FOUND,
            "not_found",
            "patchbay's LLM proxy forwards /v1/ routes only",
        );
    }
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BODY).await {
        Ok(body) => body,
        Err(_) => {
            return json_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                "the request body is larger than the proxy forwards",
            );
        }
    };
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or(path.as_str(), |p| p.as_str());
    let url = format!("{}{}", state.upstream, path_and_query);
    let request_id: String = next_id().into();
    let tapped = parts.method == axum::http::Method::POST && state.api.is_generation(&path);
    let summary = if tapped {
        RequestSummary::read(&body)
    } else {
        RequestSummary::default()
    };
    if tapped {
        let dispatch = TaskDispatch {
            task_id: request_id.clone(),
            from: client_name(&parts.headers, peer),
            to: summary
                .model
                .clone()
                .unwrap_or_else(|| state.upstream.clone()),
            description: summary
                .last_user_message
                .as_deref()
                .map(|m| truncate(m, DESCRIPTION_MAX)),
        }
        .into_signal(state.source.clone())
        .correlated(request_id.clone())
        .with_meta("requestId", request_id.clone())
        .with_meta("method", parts.method.as_str())
        .with_meta("path", path.clone())
        .with_meta("stream", summary.stream)
        .with_meta("upstream", state.upstream.clone());
        state.emitter.send(Decoded::Signal(dispatch));
    }
    tracing::debug!(request_id, method = %parts.method, path, "proxying");

    let upstream_request = state
        .client
        .request(parts.method.clone(), &url)
        .headers(request_headers(&parts.headers))
        .body(body);
    let taps = TapRequest {
        api: state.api,
        source: &state.source,
        request_id: &request_id,
        model: summary.model.clone(),
        decode: tapped,
        emitter: state.emitter.clone(),
    };
    let response = match tokio::time::timeout(state.timeout, upstream_request.send()).await {
        Ok(Ok(response)) => response,
        Ok(Err(err)) => {
            // The error text names the URL, never a header: no key can leak here.
            let message = format!("the upstream {} did not answer: {err}", state.upstream);
            taps.tap(502, "")
                .error("upstream_unreachable", message.clone(), Some(502));
            return json_error(StatusCode::BAD_GATEWAY, "upstream_unreachable", &message);
        }
        Err(_) => {
            let message = format!(
                "the upstream {} did not answer within {} ms",
                state.upstream,
                state.timeout.as_millis()
            );
            taps.tap(504, "")
                .error("upstream_timeout", message.clone(), Some(504));
            return json_error(StatusCode::GATEWAY_TIMEOUT, "timeout", &message);
        }
    };

    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let tap = taps.tap(status.as_u16(), &content_type);
    let headers = response_headers(response.headers());
    let relay = relay(response, tap, state.timeout);
    let mut out = Response::new(Body::from_stream(relay));
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    out
}

/// The relayed body: each upstream chunk is fed to the tap and yielded at once. An
/// upstream error or a chunk later than `idle` cuts the client's stream (as the upstream
/// did) and is reported; dropping the stream (the client hung up) drops the upstream
/// response, which cancels the upstream request, and the tap reports it.
fn relay(
    response: reqwest::Response,
    tap: Tap,
    idle: Duration,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    struct Relay {
        body: futures_util::stream::BoxStream<'static, reqwest::Result<Bytes>>,
        tap: Tap,
        /// Bytes still due when the length is known: the server stops polling the body
        /// once it has sent them, so the tap finishes on the last byte, not on the end.
        remaining: Option<u64>,
    }
    let state = Relay {
        remaining: response.content_length(),
        body: response.bytes_stream().boxed(),
        tap,
    };
    futures_util::stream::unfold(Some(state), move |state| async move {
        let mut state = state?;
        match tokio::time::timeout(idle, state.body.next()).await {
            Ok(Some(Ok(chunk))) => {
                state.tap.feed(&chunk);
                if let Some(remaining) = &mut state.remaining {
                    *remaining = remaining.saturating_sub(chunk.len() as u64);
                    if *remaining == 0 {
                        state.tap.finish();
                    }
                }
                Some((Ok(chunk), Some(state)))
            }
            Ok(None) => {
                state.tap.finish();
                None
            }
            Ok(Some(Err(err))) => {
                let message = format!("the upstream stream failed: {err}");
                state.tap.abort("upstream_error", message.clone());
                Some((Err(std::io::Error::other(message)), None))
            }
            Err(_) => {
                let message = format!("no data from the upstream for {} ms", idle.as_millis());
                state.tap.abort("upstream_timeout", message.clone());
                Some((Err(std::io::Error::other(message)), None))
            }
        }
    })
}

/// Polls the upstream's `/v1/models` once: the number of models, or why it failed.
pub async fn poll_models(
    client: &reqwest::Client,
    api: Api,
    upstream: &str,
    api_key: Option<&str>,
    timeout: Duration,
) -> Result<usize, String> {
    let mut request = client.get(format!("{upstream}/v1/models"));
    if let Some(key) = api_key.filter(|k| !k.is_empty()) {
        for (name, value) in api.auth_headers(key) {
            let Ok(value) = HeaderValue::from_str(&value) else {
                return Err("the api_key is not a valid header value".into());
            };
            request = request.header(name, value);
        }
    } else if api == Api::Anthropic {
        request = request.header("anthropic-version", crate::api::ANTHROPIC_VERSION);
    }
    let response = tokio::time::timeout(timeout, request.send())
        .await
        .map_err(|_| format!("{upstream}/v1/models did not answer in time"))?
        .map_err(|e| format!("{upstream}/v1/models: {e}"))?;
    let status = response.status();
    let body = tokio::time::timeout(timeout, response.bytes())
        .await
        .map_err(|_| format!("{upstream}/v1/models did not answer in time"))?
        .map_err(|e| format!("{upstream}/v1/models: {e}"))?;
    if !status.is_success() {
        return Err(format!(
            "{upstream}/v1/models answered HTTP {}",
            status.as_u16()
        ));
    }
    patchbay_openai::model_ids(&body)
        .map(|ids| ids.len())
        .map_err(|e| format!("{upstream}/v1/models: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_encoding_headers_are_not_forwarded() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONNECTION, "keep-alive, x-private".parse().unwrap());
        headers.insert("x-private", "1".parse().unwrap());
        headers.insert(header::HOST, "127.0.0.1:1".parse().unwrap());
        headers.insert(header::ACCEPT_ENCODING, "gzip".parse().unwrap());
        headers.insert(header::AUTHORIZATION, "Bearer k".parse().unwrap());
        headers.insert("x-api-key", "k".parse().unwrap());
        headers.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        let out = request_headers(&headers);
        let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["authorization", "x-api-key"]);
    }

    #[test]
    fn client_is_its_user_agent_or_address() {
        let mut headers = HeaderMap::new();
        let addr: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        assert_eq!(client_name(&headers, Some(addr)), "127.0.0.1:5000");
        headers.insert(header::USER_AGENT, "OpenAI/Python 1.0".parse().unwrap());
        assert_eq!(client_name(&headers, Some(addr)), "OpenAI/Python 1.0");
    }
}
