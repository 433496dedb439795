//! A minimal HTTP/1.1 GET for loopback probes (plain HTTP, no TLS, no redirects).
//!
//! The response framing is parsed incrementally, so a server that keeps the connection
//! open despite `Connection: close` is read exactly as far as its `Content-Length` or its
//! last chunk: `Content-Length`, `Transfer-Encoding: chunked`, or (neither) the body runs to
//! the end of the connection. Heads and bodies are size-capped.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest response head accepted.
pub const MAX_HEAD: usize = 16 * 1024;
/// The largest response body accepted (model lists are small).
pub const MAX_BODY: usize = 4 * 1024 * 1024;

/// Why a GET failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// Nothing listens there.
    #[error("connection refused")]
    Refused,
    /// No complete answer in time.
    #[error("no answer within {0} ms")]
    Timeout(u128),
    /// Another I/O error.
    #[error("{0}")]
    Io(String),
    /// The answer is not HTTP/1.x, or its framing is broken.
    #[error("bad HTTP response: {0}")]
    Malformed(String),
    /// The head or body is larger than allowed.
    #[error("response too large")]
    TooLarge,
}

/// A response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Response {
    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// `GET http://{addr}{path}`, all of it (connect, send, read) within `timeout`.
pub async fn get(addr: &str, path: &str, timeout: Duration) -> Result<Response, HttpError> {
    match tokio::time::timeout(timeout, get_inner(addr, path)).await {
        Ok(result) => result,
        Err(_) => Err(HttpError::Timeout(timeout.as_millis())),
    }
}

async fn get_inner(addr: &str, path: &str) -> Result<Response, HttpError> {
    let mut stream = TcpStream::connect(addr).await.map_err(io_error)?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\
         User-Agent: patchbay-discovery\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(io_error)?;
    let mut parser = ResponseParser::default();
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream.read(&mut chunk).await.map_err(io_error)?;
        let data = chunk.get(..n).unwrap_or(&[]);
        if let Some(response) = parser.push(data, n == 0)? {
            return Ok(response);
        }
        if n == 0 {
            return Err(HttpError::Malformed("connection closed early".into()));
        }
    }
}

fn io_error(err: std::io::Error) -> HttpError {
    match err.kind() {
        std::io::ErrorKind::ConnectionRefused => HttpError::Refused,
        _ => HttpError::Io(err.to_string()),
    }
}

/// How the body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

/// An incremental response parser: push bytes as they arrive.
#[derive(Debug, Default)]
pub struct ResponseParser {
    buffer: Vec<u8>,
    head: Option<(u16, Framing, usize)>,
}

impl ResponseParser {
    /// Adds bytes (`eof`: the connection ended after them). Returns the response once
    /// complete.
    pub fn push(&mut self, data: &[u8], eof: bool) -> Result<Option<Response>, HttpError> {
        self.buffer.extend_from_slice(data);
        if self.head.is_none() {
            match find(&self.buffer, b"\r\n\r\n") {
                Some(end) => {
                    let head = self.buffer.get(..end).unwrap_or(&[]);
                    let (status, framing) = parse_head(head)?;
                    self.head = Some((status, framing, end + 4));
                }
                None if self.buffer.len() > MAX_HEAD => return Err(HttpError::TooLarge),
                None if eof => return Err(HttpError::Malformed("no complete head".into())),
                None => return Ok(None),
            }
        }
        let Some((status, framing, start)) = self.head else {
            return Ok(None);
        };
        let body = self.buffer.get(start..).unwrap_or(&[]);
        if body.len() > MAX_BODY + MAX_HEAD {
            return Err(HttpError::TooLarge);
        }
        // 1xx, 204 and 304 have no body.
        if (100..200).contains(&status) || status == 204 || status == 304 {
            return Ok(Some(Response {
                status,
                body: Vec::new(),
            }));
        }
        let body = match framing {
            Framing::Length(len) if len > MAX_BODY => return Err(HttpError::TooLarge),
            Framing::Length(len) => match body.get(..len) {
                Some(body) => body.to_vec(),
                None if eof => {
                    return Err(HttpError::Malformed(
                        "body shorter than Content-Length".into(),
                    ));
                }
                None => return Ok(None),
            },
            Framing::Chunked => match dechunk(body)? {
                Some(body) => body,
                None if eof => return Err(HttpError::Malformed("chunked body cut short".into())),
                None => return Ok(None),
            },
            Framing::UntilClose if eof => body.to_vec(),
            Framing::UntilClose => return Ok(None),
        };
        Ok(Some(Response { status, body }))
    }
}

/// The status and body framing of a response head (without the blank line).
fn parse_head(head: &[u8]) -> Result<(u16, Framing), HttpError> {
    let text =
        std::str::from_utf8(head).map_err(|_| HttpError::Malformed("head is not UTF-8".into()))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Malformed(format!(
            "status line `{}`",
            truncate(status_line)
        )));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .filter(|s| (100..1000).contains(s))
        .ok_or_else(|| HttpError::Malformed(format!("status line `{}`", truncate(status_line))))?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.trim().eq_ignore_ascii_case("content-length") {
            let parsed: usize = value.parse().map_err(|_| {
                HttpError::Malformed(format!("Content-Length `{}`", truncate(value)))
            })?;
            if length.is_some_and(|l| l != parsed) {
                return Err(HttpError::Malformed("conflicting Content-Length".into()));
            }
            length = Some(parsed);
        } else if name.trim().eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        }
    }
    // Transfer-Encoding wins over Content-Length (RFC 9112 §6.3).
    let framing = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(len)) => Framing::Length(len),
        (false, None) => Framing::UntilClose,
    };
    Ok((status, framing))
}

/// Decodes a chunked body; `None` while incomplete.
fn dechunk(mut data: &[u8]) -> Result<Option<Vec<u8>>, HttpError> {
    let mut body = Vec::new();
    loop {
        let Some(line_end) = find(data, b"\r\n") else {
            if data.len() > 1024 {
                return Err(HttpError::Malformed("chunk size line too long".into()));
            }
            return Ok(None);
        };
        let line = std::str::from_utf8(data.get(..line_end).unwrap_or(&[]))
            .map_err(|_| HttpError::Malformed("chunk size is not text".into()))?;
        // Chunk extensions (`;name=value`) are ignored.
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| HttpError::Malformed(format!("chunk size `{}`", truncate(size_text))))?;
        let rest = data.get(line_end + 2..).unwrap_or(&[]);
        if size == 0 {
            // Trailers until an empty line.
            let mut trailers = rest;
            loop {
                let Some(end) = find(trailers, b"\r\n") else {
                    return Ok(None);
                };
                if end == 0 {
                    return Ok(Some(body));
                }
                trailers = trailers.get(end + 2..).unwrap_or(&[]);
            }
        }
        if body.len() + size > MAX_BODY {
            return Err(HttpError::TooLarge);
        }
        let Some(chunk) = rest.get(..size) else {
            return Ok(None);
        };
        match rest.get(size..size + 2) {
            Some(b"\r\n") => {}
            Some(_) => return Err(HttpError::Malformed("chunk not followed by CRLF".into())),
            None => return Ok(None),
        }
        body.extend_from_slice(chunk);
        data = rest.get(size + 2..).unwrap_or(&[]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn truncate(text: &str) -> String {
    text.chars().take(60).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(bytes: &[u8]) -> Result<Option<Response>, HttpError> {
        ResponseParser::default().push(bytes, true)
    }

    #[test]
    fn content_length() {
        let r = parse_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA").unwrap();
        assert_eq!(
            r,
            Some(Response {
                status: 200,
                body: b"hello".to_vec()
            })
        );
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4;x=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\n";
        let r = parse_all(raw).unwrap().unwrap();
        assert_eq!(r.body, b"Wikipedia");
    }

    #[test]
    fn until_close() {
        let mut p = ResponseParser::default();
        assert_eq!(
            p.push(b"HTTP/1.0 200 OK\r\n\r\n{\"a\"", false).unwrap(),
            None
        );
        let r = p.push(b":1}", true).unwrap().unwrap();
        assert_eq!(r.body, b"{\"a\":1}");
    }

    #[test]
    fn any_split_gives_the_same_response() {
        let raw: &[u8] = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        for split in 0..raw.len() {
            let mut p = ResponseParser::default();
            let (a, b) = raw.split_at(split);
            let first = p.push(a, false).unwrap();
            let response = match first {
                Some(r) => r,
                None => p.push(b, false).unwrap().expect("complete"),
            };
            assert_eq!(response.status, 404);
            assert_eq!(response.body, b"abcde", "split at {split}");
        }
    }

    #[test]
    fn broken_responses_are_errors_not_panics() {
        for raw in [
            &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
            b"HTTP/1.1 abc OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"HTTP/1.1 200",
            b"",
        ] {
            assert!(
                parse_all(raw).is_err(),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
        // Arbitrary bytes never panic.
        let alphabet: &[u8] = b"0123456789abcdef\r\n:; chunkedtransfer-encodingcontent-length";
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..500 {
            let mut bytes = b"HTTP/1.1 200 OK\r\n".to_vec();
            for _ in 0..(seed % 64) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                bytes.push(alphabet[(seed % alphabet.len() as u64) as usize]);
            }
            let _ = parse_all(&bytes);
        }
    }

    #[test]
    fn no_body_statuses() {
        let r = parse_all(b"HTTP/1.1 204 No Content\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.body, b"");
    }

    #[test]
    fn oversized_is_refused() {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert_eq!(parse_all(head.as_bytes()), Err(HttpError::TooLarge));
        let endless = vec![b'a'; MAX_HEAD + 1];
        assert_eq!(
            ResponseParser::default().push(&endless, false),
            Err(HttpError::TooLarge)
        );
    }

    #[tokio::test]
    async fn refused_and_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        // Accepted by the backlog but never answered: a timeout.
        let err = get(&addr, "/", Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(err, HttpError::Timeout(50));
        drop(listener);
        let err = get(&addr, "/", Duration::from_millis(300))
            .await
            .unwrap_err();
        assert_eq!(err, HttpError::Refused);
    }
}
