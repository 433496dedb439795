//! OTLP/gRPC on the wire, both ways, as pure functions (no I/O): the three `Export`
//! methods, the length-prefixed message, the status codes and how a status travels
//! (`grpc-status`, a percent-encoded `grpc-message`, a `google.rpc.Status` with a
//! `google.rpc.RetryInfo` in `grpc-status-details-bin`), and `grpc-timeout`.
//!
//! A gRPC call is an HTTP/2 `POST` to `/SERVICE/METHOD` with `content-type:
//! application/grpc`; its body is one message prefixed by a compressed flag (one byte: 0,
//! or 1 when the message is compressed per `grpc-encoding`) and its length (four bytes,
//! big-endian). The answer is `200` with one such message and the status in the
//! trailers, or, for an error, the status alone in the headers ("trailers-only").

use std::time::Duration;

use base64::Engine as _;

use crate::{SignalKind, protobuf};

/// The gRPC status codes this adapter gives or reads by name.
pub mod code {
    /// Success.
    pub const OK: u32 = 0;
    /// The call was cancelled (by the client, typically).
    pub const CANCELLED: u32 = 1;
    /// An error with no better code.
    pub const UNKNOWN: u32 = 2;
    /// The request does not decode: trying it again would not help.
    pub const INVALID_ARGUMENT: u32 = 3;
    /// The deadline passed before the call ended.
    pub const DEADLINE_EXCEEDED: u32 = 4;
    /// The caller may not do this (a `Host` or `Origin` refused at the door).
    pub const PERMISSION_DENIED: u32 = 7;
    /// Too large, or out of room (retried only when a `RetryInfo` says when).
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    /// The call was aborted (a concurrency conflict).
    pub const ABORTED: u32 = 10;
    /// Out of range.
    pub const OUT_OF_RANGE: u32 = 11;
    /// No such method, or a compression the server does not know.
    pub const UNIMPLEMENTED: u32 = 12;
    /// A broken protocol invariant (a compressed flag without an encoding, a truncated
    /// frame): what gRPC's own servers answer.
    pub const INTERNAL: u32 = 13;
    /// The server cannot take it now; retry later.
    pub const UNAVAILABLE: u32 = 14;
    /// Data was lost.
    pub const DATA_LOSS: u32 = 15;
    /// Missing or wrong credentials.
    pub const UNAUTHENTICATED: u32 = 16;
}

/// The name of a status code, for messages.
pub fn code_name(code: u32) -> &'static str {
    match code {
        0 => "OK",
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => "an unknown code",
    }
}

/// Whether an exporter tries a call that ended with `code` again, as the OpenTelemetry
/// specification says: `CANCELLED`, `DEADLINE_EXCEEDED`, `ABORTED`, `OUT_OF_RANGE`,
/// `UNAVAILABLE` and `DATA_LOSS` always; `RESOURCE_EXHAUSTED` only when the server said
/// when (a `RetryInfo`), since a request too large stays too large.
pub fn retryable(code: u32, has_retry_info: bool) -> bool {
    match code {
        code::CANCELLED
        | code::DEADLINE_EXCEEDED
        | code::ABORTED
        | code::OUT_OF_RANGE
        | code::UNAVAILABLE
        | code::DATA_LOSS => true,
        code::RESOURCE_EXHAUSTED => has_retry_info,
        _ => false,
    }
}

/// The status a gRPC client gives a call answered with an HTTP status other than 200
/// (a proxy's answer), per gRPC's `http-grpc-status-mapping`.
pub fn code_of_http(status: u16) -> u32 {
    match status {
        400 => code::INTERNAL,
        401 => code::UNAUTHENTICATED,
        403 => code::PERMISSION_DENIED,
        404 => code::UNIMPLEMENTED,
        429 | 502 | 503 | 504 => code::UNAVAILABLE,
        _ => code::UNKNOWN,
    }
}

/// The three collector services' `Export` methods.
pub const LOGS_METHOD: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
/// The traces service's `Export`.
pub const TRACES_METHOD: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// The metrics service's `Export`.
pub const METRICS_METHOD: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// The method that exports `kind`.
pub fn method(kind: SignalKind) -> &'static str {
    match kind {
        SignalKind::Logs => LOGS_METHOD,
        SignalKind::Traces => TRACES_METHOD,
        SignalKind::Metrics => METRICS_METHOD,
    }
}

/// The kind a method path exports (`None`: not one of the three).
pub fn kind_of_method(path: &str) -> Option<SignalKind> {
    match path {
        LOGS_METHOD => Some(SignalKind::Logs),
        TRACES_METHOD => Some(SignalKind::Traces),
        METRICS_METHOD => Some(SignalKind::Metrics),
        _ => None,
    }
}

/// Whether a `content-type` is gRPC's with protobuf messages (`application/grpc`,
/// `application/grpc+proto`, parameters allowed).
pub fn is_grpc_proto(content_type: &str) -> bool {
    let media = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    matches!(
        media.as_str(),
        "application/grpc" | "application/grpc+proto"
    )
}

/// The length prefix of a message: the compressed flag and four bytes of length.
pub const PREFIX: usize = 5;

/// A message with its length prefix.
pub fn frame(compressed: bool, message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX + message.len());
    out.push(u8::from(compressed));
    // A message past 4 GiB cannot be framed; the callers bound theirs far below.
    let length = u32::try_from(message.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// Why a request's body is not one length-prefixed message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than a length prefix (an empty body included).
    #[error("the message is truncated: {0} bytes, less than the 5-byte length prefix")]
    NoPrefix(usize),
    /// The prefix names more bytes than follow it.
    #[error("the message is truncated: {declared} bytes declared, {got} sent")]
    Truncated {
        /// The length the prefix names.
        declared: usize,
        /// The bytes that follow it.
        got: usize,
    },
    /// A compressed flag other than 0 or 1.
    #[error("unexpected compressed flag {0} (0 or 1)")]
    Flag(u8),
    /// Bytes after the message: a unary call carries exactly one.
    #[error("{0} bytes after the message: a unary call carries one message")]
    Trailing(usize),
}

impl FrameError {
    /// The status gRPC's own servers answer it with.
    pub fn code(&self) -> u32 {
        code::INTERNAL
    }
}

/// The one message of a unary call's body and whether it is compressed.
pub fn unframe(body: &[u8]) -> Result<(bool, &[u8]), FrameError> {
    let Some((prefix, rest)) = body.split_first_chunk::<PREFIX>() else {
        return Err(FrameError::NoPrefix(body.len()));
    };
    let compressed = match prefix[0] {
        0 => false,
        1 => true,
        other => return Err(FrameError::Flag(other)),
    };
    let declared = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if rest.len() < declared {
        return Err(FrameError::Truncated {
            declared,
            got: rest.len(),
        });
    }
    if rest.len() > declared {
        return Err(FrameError::Trailing(rest.len() - declared));
    }
    Ok((compressed, rest))
}

/// The length a message's prefix names, once its first five bytes are known (to refuse
/// an oversized message before reading it).
pub fn declared_length(body: &[u8]) -> Option<usize> {
    let prefix = body.first_chunk::<PREFIX>()?;
    Some(u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize)
}

/// A `grpc-message` value: the text percent-encoded (every byte outside printable ASCII,
/// and `%`), as the protocol wants.
pub fn encode_message(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The text of a `grpc-message` value (what does not decode is kept as it is).
pub fn decode_message(value: &[u8]) -> String {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        if value[i] == b'%'
            && let Some(hex) = value.get(i + 1..i + 3)
            && let Ok(hex) = std::str::from_utf8(hex)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(value[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// A `grpc-status-details-bin` value: a `google.rpc.Status` (`code`, `message`) whose
/// details hold a `google.rpc.RetryInfo` saying to retry after `retry_after`; base64
/// without padding.
pub fn retry_details(code: u32, message: &str, retry_after: Duration) -> String {
    let mut delay = Vec::new();
    // google.protobuf.Duration { seconds = 1, nanos = 2 }
    if retry_after.as_secs() > 0 {
        delay.push(0x08);
        varint(retry_after.as_secs(), &mut delay);
    }
    if retry_after.subsec_nanos() > 0 {
        delay.push(0x10);
        varint(u64::from(retry_after.subsec_nanos()), &mut delay);
    }
    // RetryInfo { retry_delay = 1 }
    let mut info = Vec::new();
    bytes_field(1, &delay, &mut info);
    // google.protobuf.Any { type_url = 1, value = 2 }
    let mut any = Vec::new();
    bytes_field(1, RETRY_INFO_TYPE.as_bytes(), &mut any);
    bytes_field(2, &info, &mut any);
    // google.rpc.Status { code = 1, message = 2, details = 3 }
    let mut status = vec![0x08];
    varint(u64::from(code), &mut status);
    bytes_field(2, message.as_bytes(), &mut status);
    bytes_field(3, &any, &mut status);
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(status)
}

/// The delay a `grpc-status-details-bin` value's `RetryInfo` asks for, if it has one.
/// Anything that does not read as one is `None`.
pub fn retry_delay(details: &[u8]) -> Option<Duration> {
    // Padded or not: gRPC implementations send both.
    let text = std::str::from_utf8(details)
        .ok()?
        .trim()
        .trim_end_matches('=');
    let status = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(text)
        .ok()?;
    for (number, value) in fields(&status)? {
        let (3, Field::Bytes(any)) = (number, value) else {
            continue;
        };
        let any = fields(any)?;
        let is_retry_info = any.iter().any(|(n, v)| {
            *n == 1 && matches!(v, Field::Bytes(url) if *url == RETRY_INFO_TYPE.as_bytes())
        });
        if !is_retry_info {
            continue;
        }
        let info = any.iter().find_map(|(n, v)| match (n, v) {
            (2, Field::Bytes(b)) => Some(*b),
            _ => None,
        })?;
        let delay = fields(info)?.into_iter().find_map(|(n, v)| match (n, v) {
            (1, Field::Bytes(b)) => Some(b),
            _ => None,
        });
        let (mut secs, mut nanos) = (0u64, 0u64);
        for (n, v) in fields(delay.unwrap_or_default())? {
            match (n, v) {
                (1, Field::Varint(s)) => secs = s,
                (2, Field::Varint(ns)) => nanos = ns.min(999_999_999),
                _ => {}
            }
        }
        return Some(Duration::from_secs(secs) + Duration::from_nanos(nanos));
    }
    None
}

/// A `grpc-timeout` value: the deadline a client gives its call (`None` when it does not
/// read as one: at most 8 digits and a unit `H`, `M`, `S`, `m`, `u` or `n`).
pub fn parse_timeout(value: &str) -> Option<Duration> {
    let value = value.trim();
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A `grpc-timeout` value for a deadline (milliseconds, or seconds when the number would
/// be too long).
pub fn format_timeout(timeout: Duration) -> String {
    let ms = timeout.as_millis();
    if ms < 100_000_000 {
        format!("{ms}m")
    } else {
        format!("{}S", timeout.as_secs().min(99_999_999))
    }
}

/// The answer message of an `Export` call: empty, or with its `partial_success` when
/// some records were dropped (`Export*ServiceResponse { partial_success = 1 {
/// rejected_* = 1, error_message = 2 } }`; the same bytes as OTLP/HTTP's protobuf answer).
pub fn export_response(rejected: u64, message: &str) -> Vec<u8> {
    if rejected == 0 {
        return Vec::new();
    }
    let mut inner = vec![0x08];
    varint(rejected, &mut inner);
    bytes_field(2, message.as_bytes(), &mut inner);
    let mut out = Vec::new();
    bytes_field(1, &inner, &mut out);
    out
}

/// The `partial_success` of an `Export` answer message: the rejected count and the
/// message (`None` when there is none, or it does not read).
pub fn partial_success(message: &[u8]) -> Option<(u64, String)> {
    let partial = fields(message)?
        .into_iter()
        .find_map(|(n, v)| match (n, v) {
            (1, Field::Bytes(b)) => Some(b),
            _ => None,
        })?;
    let (mut rejected, mut text) = (0, String::new());
    for (n, v) in fields(partial)? {
        match (n, v) {
            (1, Field::Varint(r)) => rejected = r,
            (2, Field::Bytes(b)) => text = String::from_utf8_lossy(b).into_owned(),
            _ => {}
        }
    }
    Some((rejected, text))
}

fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn bytes_field(number: u8, bytes: &[u8], out: &mut Vec<u8>) {
    out.push((number << 3) | 2);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// A field's value, as far as these small messages need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Other,
}

/// A message's fields in order (`None` when it does not read as protobuf).
fn fields(mut bytes: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = protobuf::varint(&mut bytes)?;
        let value = match key & 7 {
            0 => Field::Varint(protobuf::varint(&mut bytes)?),
            1 => {
                bytes = bytes.get(8..)?;
                Field::Other
            }
            2 => {
                let len = usize::try_from(protobuf::varint(&mut bytes)?).ok()?;
                let (value, rest) = (bytes.get(..len)?, bytes.get(len..)?);
                bytes = rest;
                Field::Bytes(value)
            }
            5 => {
                bytes = bytes.get(4..)?;
                Field::Other
            }
            _ => return None,
        };
        out.push((key >> 3, value));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_framed_and_unframed() {
        let framed = frame(false, b"abc");
        assert_eq!(framed, [0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(unframe(&framed), Ok((false, &b"abc"[..])));
        assert_eq!(declared_length(&framed), Some(3));
        assert_eq!(unframe(&frame(true, b"")), Ok((true, &b""[..])));
        assert_eq!(unframe(&[0, 0, 0]), Err(FrameError::NoPrefix(3)));
        assert_eq!(unframe(&[]), Err(FrameError::NoPrefix(0)));
        assert_eq!(
            unframe(&framed[..6]),
            Err(FrameError::Truncated {
                declared: 3,
                got: 1
            })
        );
        let mut two = framed.clone();
        two.extend_from_slice(&framed);
        assert_eq!(unframe(&two), Err(FrameError::Trailing(8)));
        let mut flagged = framed;
        flagged[0] = 2;
        assert_eq!(unframe(&flagged), Err(FrameError::Flag(2)));
        assert_eq!(
            declared_length(&[0, 0xff, 0xff, 0xff, 0xff]),
            Some(u32::MAX as usize)
        );
        assert_eq!(declared_length(&[0, 1]), None);
    }

    #[test]
    fn methods_name_their_kind() {
        for kind in [SignalKind::Logs, SignalKind::Traces, SignalKind::Metrics] {
            assert_eq!(kind_of_method(method(kind)), Some(kind));
        }
        assert_eq!(
            kind_of_method("/opentelemetry.proto.collector.logs.v1.LogsService/Other"),
            None
        );
        assert_eq!(kind_of_method("/v1/logs"), None);
        assert!(is_grpc_proto("application/grpc"));
        assert!(is_grpc_proto("Application/GRPC+proto; charset=x"));
        assert!(!is_grpc_proto("application/grpc+json"));
        assert!(!is_grpc_proto("application/x-protobuf"));
    }

    #[test]
    fn messages_are_percent_encoded() {
        let text = "50% full: «graph»\n";
        let encoded = encode_message(text);
        assert_eq!(encoded, "50%25 full: %C2%ABgraph%C2%BB%0A");
        assert_eq!(decode_message(encoded.as_bytes()), text);
        assert_eq!(decode_message(b"bad %zz and %4"), "bad %zz and %4");
    }

    #[test]
    fn retry_info_goes_there_and_back() {
        let details = retry_details(code::UNAVAILABLE, "full", Duration::from_millis(1500));
        assert!(!details.contains('='));
        assert_eq!(
            retry_delay(details.as_bytes()),
            Some(Duration::from_millis(1500))
        );
        let padded = format!("{details}==");
        assert_eq!(
            retry_delay(padded.as_bytes()),
            Some(Duration::from_millis(1500))
        );
        // A Status without details, and garbage.
        let plain = base64::engine::general_purpose::STANDARD.encode([0x08, 14]);
        assert_eq!(retry_delay(plain.as_bytes()), None);
        assert_eq!(retry_delay(b"!!not base64"), None);
        assert_eq!(retry_delay(b""), None);
    }

    /// The bytes `google.rpc.Status(code=14, message="x", details=[Any.Pack(RetryInfo(
    /// retry_delay=Duration(seconds=2)))]).SerializeToString()` gives in Python.
    #[test]
    fn retry_info_reads_as_protobuf_writes_it() {
        let mut status = vec![0x08, 0x0e, 0x12, 0x01, b'x', 0x1a, 0x30, 0x0a, 0x28];
        status.extend_from_slice(RETRY_INFO_TYPE.as_bytes());
        status.extend_from_slice(&[0x12, 0x04, 0x0a, 0x02, 0x08, 0x02]);
        let b64 = base64::engine::general_purpose::STANDARD.encode(&status);
        assert_eq!(retry_delay(b64.as_bytes()), Some(Duration::from_secs(2)));
        assert_eq!(
            retry_details(14, "x", Duration::from_secs(2)),
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(&status)
        );
    }

    #[test]
    fn timeouts_parse_and_format() {
        assert_eq!(parse_timeout("10S"), Some(Duration::from_secs(10)));
        assert_eq!(parse_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_timeout("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "S", "10", "10x", "123456789S", "-1S", "1.5S"] {
            assert_eq!(parse_timeout(bad), None, "{bad}");
        }
        assert_eq!(format_timeout(Duration::from_secs(10)), "10000m");
        assert_eq!(
            parse_timeout(&format_timeout(Duration::from_secs(86_400 * 365))),
            Some(Duration::from_secs(86_400 * 365))
        );
    }

    #[test]
    fn partial_success_goes_there_and_back() {
        assert!(export_response(0, "").is_empty());
        assert_eq!(partial_success(&[]), None);
        let answer = export_response(3, "3 dropped");
        assert_eq!(partial_success(&answer), Some((3, "3 dropped".into())));
        assert_eq!(partial_success(&[0x0a, 0x05, 0x08]), None);
    }

    #[test]
    fn statuses_map_and_retry_as_the_specification_says() {
        assert!(retryable(code::UNAVAILABLE, false));
        assert!(!retryable(code::RESOURCE_EXHAUSTED, false));
        assert!(retryable(code::RESOURCE_EXHAUSTED, true));
        assert!(!retryable(code::INVALID_ARGUMENT, true));
        assert!(!retryable(code::UNAUTHENTICATED, false));
        assert_eq!(code_of_http(503), code::UNAVAILABLE);
        assert_eq!(code_of_http(404), code::UNIMPLEMENTED);
        assert_eq!(code_of_http(500), code::UNKNOWN);
        assert_eq!(code_name(code::UNAVAILABLE), "UNAVAILABLE");
    }

    #[test]
    fn random_input_never_panics() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..20_000 {
            let len = n % 40;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let _ = unframe(&bytes);
            let _ = fields(&bytes);
            let _ = partial_success(&bytes);
            let _ = decode_message(&bytes);
            let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
            let _ = retry_delay(b64.as_bytes());
        }
    }
}
