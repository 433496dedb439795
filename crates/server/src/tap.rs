//! `patchbay tap`: prints the signals a running sidecar sends.

use std::io::Write;

use futures_util::StreamExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

/// Where `patchbay tap` connects when given no URL.
pub const DEFAULT_TAP_URL: &str = "ws://127.0.0.1:7878/ws";

/// Why tapping failed.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// The URL is not a `ws://` or `wss://` URL.
    #[error("`{0}` is not a WebSocket URL (expected ws://HOST:PORT/ws)")]
    BadUrl(String),
    /// Connecting or reading failed.
    #[error("cannot tap {url}: {source}")]
    Connect {
        /// The URL (without its query string, which may hold a token).
        url: String,
        /// The WebSocket error.
        #[source]
        source: Box<tokio_tungstenite::tungstenite::Error>,
    },
    /// Writing to stdout failed (a closed pipe).
    #[error("cannot write to stdout: {0}")]
    Stdout(#[from] std::io::Error),
}

/// Connects to a sidecar's `/ws` and prints each signal on stdout until the server closes
/// the connection: a readable line per signal when `readable`, else the frames as NDJSON.
/// `types` (`a,b*`) and `since` are passed as `?types=` and `?since=`.
pub async fn tap(
    url: &str,
    types: Option<&str>,
    since: Option<u64>,
    readable: bool,
) -> Result<(), TapError> {
    tap_to(url, types, since, readable, &mut std::io::stdout()).await
}

/// [`tap`], writing to `out` (flushed after each line, so a pipe sees signals live).
pub async fn tap_to<W: Write + Send>(
    url: &str,
    types: Option<&str>,
    since: Option<u64>,
    readable: bool,
    out: &mut W,
) -> Result<(), TapError> {
    let full = tap_url(url, types, since)?;
    let shown = url.split('?').next().unwrap_or(url).to_owned();
    let connect_error = |e| TapError::Connect {
        url: shown.clone(),
        source: Box::new(e),
    };
    // `true`: TCP_NODELAY, so a small frame is not held back for an ACK.
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(full.as_str(), None, true)
        .await
        .map_err(connect_error)?;
    while let Some(message) = ws.next().await {
        let text = match message.map_err(connect_error)? {
            Message::Text(t) => t,
            Message::Close(_) => break,
            _ => continue,
        };
        if readable {
            writeln!(out, "{}", readable_line(&text))?;
        } else {
            writeln!(out, "{}", text.as_str())?;
        }
        out.flush()?;
    }
    Ok(())
}

/// The URL with `types` and `since` added to its query string.
pub fn tap_url(url: &str, types: Option<&str>, since: Option<u64>) -> Result<String, TapError> {
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
            tap_url(DEFAULT_TAP_URL, Some("a,b*"), Some(5)).unwrap(),
            "ws://127.0.0.1:7878/ws?types=a,b*&since=5"
        );
        assert_eq!(
            tap_url("ws://h:1/ws?token=x", Some("a b"), None).unwrap(),
            "ws://h:1/ws?token=x&types=a%20b"
        );
        assert!(matches!(
            tap_url("http://h/ws", None, None),
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
