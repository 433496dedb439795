//! WebSocket client connections: `ws://` and `wss://` (TLS through [`crate::tls`]).

use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderMap, HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Error as WsError};
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use crate::redact::RedactedUrl;

/// An open WebSocket client connection.
pub type WsStream = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The largest message (and frame) a client connection accepts unless told otherwise
/// (`max_frame`): 16 MiB.
pub const DEFAULT_MAX_MESSAGE: usize = 16 << 20;

/// The largest `max_frame` that may be configured: 64 MiB.
pub const MAX_MESSAGE_LIMIT: usize = 64 << 20;

/// What [`describe`] says of a message over the bound; the [`Driver`](crate::Driver)
/// counts a session lost to one as bad input.
pub(crate) const OVERSIZED: &str = "message larger than max_frame";

/// Whether a session's end reason is a message over the bound: [`describe`]'s text, or
/// tungstenite's own (`Message too long: N > M`) from an adapter that shows the error
/// as it is.
pub(crate) fn is_oversized(reason: &str) -> bool {
    reason.contains(OVERSIZED) || reason.contains("Message too long")
}

/// Why a WebSocket connection could not be opened. The texts hold no header value and
/// only redacted URLs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WsConnectError {
    /// The URL cannot be requested (a retry cannot fix it).
    #[error("bad url {0}")]
    BadUrl(String),
    /// The server refused the upgrade with 401 or 403 (a retry cannot fix it).
    #[error("{url} refused the connection: HTTP {status}")]
    Unauthorized {
        /// The redacted URL.
        url: String,
        /// 401 or 403.
        status: u16,
    },
    /// Anything else (no route, refused, TLS, another HTTP status): worth a retry.
    #[error("cannot connect to {url}: {reason}")]
    Failed {
        /// The redacted URL.
        url: String,
        /// What went wrong.
        reason: String,
    },
}

impl WsConnectError {
    /// Whether a retry may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, WsConnectError::Failed { .. })
    }
}

/// Opens a WebSocket to `url` with extra `headers`: TCP with `TCP_NODELAY` (a small frame
/// is not held back waiting for an ACK), then TLS for `wss://` with `tls`, then the
/// upgrade. Messages from the peer are bounded by [`DEFAULT_MAX_MESSAGE`]. Not bounded in
/// time: the caller (the [`Driver`](crate::Driver)) bounds it.
pub async fn connect_websocket(
    url: &str,
    headers: impl IntoIterator<Item = (HeaderName, HeaderValue)>,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<WsStream, WsConnectError> {
    connect_websocket_bounded(url, headers, tls, DEFAULT_MAX_MESSAGE).await
}

/// [`connect_websocket`] that also returns the headers of the server's upgrade response
/// (a sidecar names its epoch there).
pub async fn connect_websocket_with_response(
    url: &str,
    headers: impl IntoIterator<Item = (HeaderName, HeaderValue)>,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<(WsStream, HeaderMap), WsConnectError> {
    open(url, headers, tls, DEFAULT_MAX_MESSAGE).await
}

/// [`connect_websocket`] accepting messages of at most `max_message` bytes: a larger one
/// ends the stream with an error ([`describe`] says `message larger than max_frame`)
/// instead of being buffered.
pub async fn connect_websocket_bounded(
    url: &str,
    headers: impl IntoIterator<Item = (HeaderName, HeaderValue)>,
    tls: Option<&Arc<rustls::ClientConfig>>,
    max_message: usize,
) -> Result<WsStream, WsConnectError> {
    open(url, headers, tls, max_message).await.map(|(ws, _)| ws)
}

async fn open(
    url: &str,
    headers: impl IntoIterator<Item = (HeaderName, HeaderValue)>,
    tls: Option<&Arc<rustls::ClientConfig>>,
    max_message: usize,
) -> Result<(WsStream, HeaderMap), WsConnectError> {
    let shown = RedactedUrl(url).to_string();
    let failed = |reason: String| WsConnectError::Failed {
        url: shown.clone(),
        reason,
    };
    let mut request = url
        .trim()
        .into_client_request()
        .map_err(|e| WsConnectError::BadUrl(format!("{shown}: {}", describe(&e))))?;
    for (name, value) in headers {
        request.headers_mut().insert(name, value);
    }
    let uri = request.uri();
    let secure = uri.scheme_str() == Some("wss");
    let host = uri
        .host()
        .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned())
        .ok_or_else(|| WsConnectError::BadUrl(format!("{shown}: no host")))?;
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let stream = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| failed(e.to_string()))?;
    stream
        .set_nodelay(true)
        .map_err(|e| failed(e.to_string()))?;
    let connector = match (secure, tls) {
        (false, _) => Connector::Plain,
        (true, Some(tls)) => Connector::Rustls(Arc::clone(tls)),
        (true, None) => {
            Connector::Rustls(crate::tls::client_config(None).map_err(|e| failed(e.to_string()))?)
        }
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message));
    match tokio_tungstenite::client_async_tls_with_config(
        request,
        stream,
        Some(config),
        Some(connector),
    )
    .await
    {
        Ok((ws, response)) => Ok((ws, response.into_parts().0.headers)),
        Err(WsError::Http(response)) if matches!(response.status().as_u16(), 401 | 403) => {
            Err(WsConnectError::Unauthorized {
                url: shown.clone(),
                status: response.status().as_u16(),
            })
        }
        Err(e) => Err(failed(describe(&e))),
    }
}

/// A WebSocket error without anything from the request (headers hold tokens, URLs may).
pub fn describe(error: &WsError) -> String {
    match error {
        WsError::Http(response) => format!("HTTP {}", response.status().as_u16()),
        WsError::ConnectionClosed | WsError::AlreadyClosed => "the connection closed".into(),
        WsError::Io(e) => e.to_string(),
        WsError::Url(e) => e.to_string(),
        WsError::Tls(e) => format!("TLS: {e}"),
        WsError::Capacity(e) => format!("{OVERSIZED}: {e}"),
        other => other.to_string(),
    }
}

/// The ` (CODE reason)` of a close frame, for "the peer closed the connection (…)".
pub fn close_reason(frame: Option<&tungstenite::protocol::CloseFrame>) -> String {
    match frame {
        Some(f) if f.reason.is_empty() => format!(" ({})", u16::from(f.code)),
        Some(f) => format!(" ({} {})", u16::from(f.code), f.reason),
        None => String::new(),
    }
}

impl<D: crate::Defaults> crate::TransportOptions<D> {
    /// Opens a WebSocket to this `url` ([`connect_websocket`] with TLS per `ca_file`);
    /// the error says whether to retry ([`Ended::Lost`](crate::Ended::Lost)) or not
    /// (a bad URL or CA file, HTTP 401/403: [`Ended::Refused`](crate::Ended::Refused)).
    pub async fn open_websocket(
        &self,
        headers: impl IntoIterator<Item = (HeaderName, HeaderValue)>,
    ) -> Result<WsStream, crate::Ended> {
        self.open_websocket_at(self.url(), headers).await
    }

    /// [`TransportOptions::open_websocket`](crate::TransportOptions::open_websocket) to
    /// another URL (one derived from `url`).
    pub async fn open_websocket_at(
        &self,
        url: &str,
        headers: impl IntoIterator<Item = (HeaderName, HeaderValue)>,
    ) -> Result<WsStream, crate::Ended> {
        let tls = if url.trim().starts_with("wss://") {
            Some(
                self.tls()
                    .map_err(|e| crate::Ended::Refused(e.to_string()))?,
            )
        } else {
            None
        };
        connect_websocket_bounded(url, headers, tls.as_ref(), self.max_frame)
            .await
            .map_err(|e| {
                if e.is_retryable() {
                    crate::Ended::Lost(e.to_string())
                } else {
                    crate::Ended::Refused(e.to_string())
                }
            })
    }
}
