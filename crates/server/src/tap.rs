//! `patchbay tap`: prints the signals a running sidecar sends.

use std::io::Write;
use std::time::Duration;

use futures_util::StreamExt;
use patchbay_graph::config::Secret;
use patchbay_transport::{
    Backoff, RedactedUrl, WsConnectError, WsStream, close_reason, connect_websocket_with_response,
    describe_ws_error,
};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::http::{HeaderValue, header};

/// Where `patchbay tap` connects when given no URL.
pub const DEFAULT_TAP_URL: &str = "ws://127.0.0.1:7878/ws";

/// Why tapping failed.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// The URL is not a `ws://` or `wss://` URL.
    #[error("`{0}` is not a WebSocket URL (expected ws://HOST:PORT/ws)")]
    BadUrl(String),
    /// Connecting failed (nothing there, or the sidecar refused the token).
    #[error("cannot tap: {0}")]
    Connect(#[from] WsConnectError),
    /// The token cannot be sent as a header.
    #[error("the token is not a valid header value")]
    BadToken,
    /// Writing to stdout failed (a closed pipe).
    #[error("cannot write to stdout: {0}")]
    Stdout(#[from] std::io::Error),
}

/// What `patchbay tap` prints, and from where.
#[derive(Debug, Clone)]
pub struct TapOptions {
    /// The sidecar's WebSocket URL.
    pub url: String,
    /// Only these types (`a,b*`), passed as `?types=`.
    pub types: Option<String>,
    /// First replay what the sidecar still holds after this seq (`?since=`).
    pub since: Option<u64>,
    /// A readable line per signal, else the frames as NDJSON.
    pub readable: bool,
    /// The sidecar's token, sent as `Authorization: Bearer` (never in the URL, which
    /// may end up in a log).
    pub token: Option<Secret>,
    /// When the connection ends, reconnect (with backoff) and resume after the last
    /// `seq` printed, until stopped; else return.
    pub follow: bool,
}

impl TapOptions {
    /// Tapping `url` once, NDJSON, everything live.
    pub fn new(url: impl Into<String>) -> Self {
        TapOptions {
            url: url.into(),
            types: None,
            since: None,
            readable: false,
            token: None,
            follow: false,
        }
    }
}

/// Connects to a sidecar's `/ws` and prints each signal to `out` (flushed after each line,
/// so a pipe sees signals live) until the sidecar closes the connection, or, with
/// `follow`, forever: the connection is opened again with backoff and resumes after the
/// last `seq` printed, naming the sidecar's epoch so that a sidecar that restarted in
/// between (whose seqs start again from 1) replays its whole ring. `note` hears what happens to the connection (for standard error).
/// The first connection must succeed; a refused token always ends it.
pub async fn tap<W: Write + Send>(
    options: &TapOptions,
    out: &mut W,
    mut note: impl FnMut(&str),
) -> Result<(), TapError> {
    let mut headers = Vec::new();
    if let Some(Secret(token)) = &options.token {
        let value =
            HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| TapError::BadToken)?;
        headers.push((header::AUTHORIZATION, value));
    }
    let shown = RedactedUrl(&options.url).to_string();
    let mut since = options.since;
    // The epoch of the sidecar the `since` was seen on (none before the first frame).
    let mut epoch: Option<String> = None;
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5), None);
    let mut connected_once = false;
    loop {
        let resume_epoch = epoch.as_deref().filter(|_| since.is_some());
        let url = tap_url(&options.url, options.types.as_deref(), since, resume_epoch)?;
        let ws = match connect_websocket_with_response(&url, headers.iter().cloned(), None).await {
            Ok((ws, response)) => {
                let now = response
                    .get(crate::EPOCH_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                if connected_once && now.is_some() && now != epoch {
                    // A new run: its seqs start again, and it replays all it holds.
                    note("the sidecar restarted: replaying what it holds");
                    since = since.map(|_| 0);
                }
                epoch = now;
                if let Some(status) = response
                    .get(crate::STATUS_HEADER)
                    .and_then(|v| v.to_str().ok())
                {
                    note(&format!("{shown}: {status}"));
                }
                ws
            }
            Err(e) if connected_once && e.is_retryable() => {
                let delay = backoff.next_jittered().unwrap_or(Duration::from_secs(5));
                note(&format!("{e}; retrying in {:.1} s", delay.as_secs_f64()));
                tokio::time::sleep(delay).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if connected_once {
            note(&format!("connected to {shown} again"));
        }
        connected_once = true;
        backoff.reset();
        let (ended, last) = print_frames(ws, options.readable, out).await?;
        since = last.or(since);
        if !options.follow {
            return Ok(());
        }
        let resume = since.map_or_else(String::new, |s| format!(", resuming after seq {s}"));
        note(&format!("{ended}; reconnecting{resume}"));
    }
}

/// Prints the frames of one connection; returns why it ended and the last `seq` seen.
async fn print_frames<W: Write>(
    mut ws: WsStream,
    readable: bool,
    out: &mut W,
) -> Result<(String, Option<u64>), TapError> {
    let mut last = None;
    while let Some(message) = ws.next().await {
        let text = match message {
            Ok(Message::Text(t)) => t,
            Ok(Message::Close(frame)) => {
                return Ok((
                    format!(
                        "the sidecar closed the connection ({})",
                        close_reason(frame.as_ref())
                    ),
                    last,
                ));
            }
            Ok(_) => continue,
            Err(e) => {
                return Ok((
                    format!("the connection broke: {}", describe_ws_error(&e)),
                    last,
                ));
            }
        };
        last = frame_seq(&text).or(last);
        if readable {
            writeln!(out, "{}", readable_line(&text))?;
        } else {
            writeln!(out, "{}", text.as_str())?;
        }
        out.flush()?;
    }
    Ok(("the connection ended".to_owned(), last))
}

/// The `seq` of a frame: `metadata.seq` of an envelope, `seq` of an Escapement frame.
fn frame_seq(text: &str) -> Option<u64> {
    let frame: Value = serde_json::from_str(text).ok()?;
    frame
        .get("metadata")
        .and_then(|m| m.get("seq"))
        .or_else(|| frame.get("seq"))
        .and_then(Value::as_u64)
}

/// The URL with `types`, `since` and `epoch` added to its query string.
pub fn tap_url(
    url: &str,
    types: Option<&str>,
    since: Option<u64>,
    epoch: Option<&str>,
) -> Result<String, TapError> {
    let url = url.trim();
    if !(url.starts_with("ws://") || url.starts_with("wss://")) {
        return Err(TapError::BadUrl(url.to_owned()));
    }
    let mut full = url.to_owned();
    let mut sep = if url.contains('?') { '&' } else { '?' };
    if let Some(types) = types {
        full.push(sep);
        full.push_str("types=");
        full.push_str(&encode(types));
        sep = '&';
    }
    if let Some(since) = since {
        full.push(sep);
        full.push_str(&format!("since={since}"));
        sep = '&';
    }
    if let Some(epoch) = epoch {
        full.push(sep);
        full.push_str("epoch=");
        full.push_str(&encode(epoch));
    }
    Ok(full)
}

/// Percent-encodes a query value (keeping `,` and `*`, which type lists use).
fn encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~,*".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One readable line for a frame: `seq HH:MM:SS.mmm type source payload`.
pub fn readable_line(text: &str) -> String {
    let Ok(Value::Object(frame)) = serde_json::from_str::<Value>(text) else {
        return text.to_owned();
    };
    match frame.get("kind").and_then(Value::as_str) {
        Some("lagged") => {
            let resume = frame
                .get("resume_from")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            return format!("… lagged: signals were dropped; resume with --since {resume}");
        }
        Some("error") => {
            let msg = frame.get("message").and_then(Value::as_str).unwrap_or("");
            return format!("! error from sidecar: {msg}");
        }
        _ => {}
    }
    let seq = frame
        .get("metadata")
        .and_then(|m| m.get("seq"))
        .or_else(|| frame.get("seq"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let kind = frame
        .get("type")
        .or_else(|| frame.get("event"))
        .and_then(Value::as_str)
        .unwrap_or("?");
    let ts = frame
        .get("timestamp")
        .or_else(|| frame.get("ts"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let source = frame.get("source").and_then(Value::as_str).unwrap_or("");
    let payload = frame
        .get("payload")
        .or_else(|| frame.get("data"))
        .map(Value::to_string)
        .unwrap_or_default();
    let payload = patchbay_signal::truncate(&payload, 200);
    format!("{seq:>6} {} {kind:<24} {source:<20} {payload}", clock(ts))
}

/// `HH:MM:SS.mmm` (UTC) of an epoch-milliseconds timestamp.
fn clock(ts: i64) -> String {
    let ms = ts.rem_euclid(86_400_000);
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_gets_the_query() {
        assert_eq!(
            tap_url(DEFAULT_TAP_URL, Some("a,b*"), Some(5), None).unwrap(),
            "ws://127.0.0.1:7878/ws?types=a,b*&since=5"
        );
        assert_eq!(
            tap_url(DEFAULT_TAP_URL, None, Some(5), Some("00ff")).unwrap(),
            "ws://127.0.0.1:7878/ws?since=5&epoch=00ff"
        );
        assert_eq!(
            tap_url("ws://h:1/ws?token=x", Some("a b"), None, None).unwrap(),
            "ws://h:1/ws?token=x&types=a%20b"
        );
        assert!(matches!(
            tap_url("http://h/ws", None, None, None),
            Err(TapError::BadUrl(_))
        ));
    }

    #[test]
    fn readable_lines() {
        let line = readable_line(
            r#"{"id":"1","type":"text_delta","timestamp":3723004,"source":"openai:x","metadata":{"seq":9},"payload":{"content":"hi"}}"#,
        );
        assert!(line.contains("01:02:03.004"), "{line}");
        assert!(
            line.contains("text_delta") && line.contains("openai:x") && line.contains("\"hi\"")
        );
        assert!(line.trim_start().starts_with('9'));
        let esc = readable_line(r#"{"kind":"event","seq":2,"ts":0,"event":"x","data":{}}"#);
        assert!(
            esc.contains(" x ") && esc.trim_start().starts_with('2'),
            "{esc}"
        );
        assert!(readable_line(r#"{"kind":"lagged","resume_from":41}"#).contains("--since 41"));
        assert_eq!(readable_line("not json"), "not json");
    }
}
