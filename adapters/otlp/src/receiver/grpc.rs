//! The receiver's OTLP/gRPC door: a call is checked and unframed here, its message handed
//! to the same [`ingest`] as an OTLP/HTTP body, and the outcome answered as gRPC
//! (see the [module](super) for the statuses).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;

use super::{
    BodyError, Encoding, Ingested, Shared, authorized, bad, collect, declared_too_large, inflate,
    ingest,
};
use crate::grpc::{self, code};

const GRPC: &str = "application/grpc";

/// A call's answer: `200`, `content-type: application/grpc`, and `grpc-status` (with a
/// `grpc-message` when not OK).
fn answer(code: u32, message: &str) -> Response {
    let mut response = StatusCode::OK.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(GRPC));
    insert_status(headers, code, message);
    response
}

fn insert_status(headers: &mut HeaderMap, code: u32, message: &str) {
    headers.insert("grpc-status", HeaderValue::from(code));
    if !message.is_empty()
        && let Ok(value) = HeaderValue::from_str(&grpc::encode_message(message))
    {
        headers.insert("grpc-message", value);
    }
}

/// A refusal at the door (`Host` or `Origin`, HTTP 403) as gRPC tells it:
/// `PERMISSION_DENIED`.
pub(super) fn refusal(status: StatusCode, message: &'static str) -> Response {
    let code = if status == StatusCode::FORBIDDEN {
        code::PERMISSION_DENIED
    } else {
        grpc::code_of_http(status.as_u16())
    };
    answer(code, message)
}

/// Counts a refused call and answers it with `code`.
fn refuse(shared: &Shared, code: u32, why: &str) -> Response {
    bad(shared, why);
    answer(code, why)
}

/// Answers one call (every path of the gRPC listener comes here, as a whole request).
pub(super) async fn handle(State(shared): State<Arc<Shared>>, call: Request) -> Response {
    let (parts, body) = call.into_parts();
    let (method, uri, headers) = (parts.method, parts.uri, parts.headers);
    // `:authority` and `Origin` were checked at the door (`listen::serve_h2c`).
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !grpc::is_grpc_proto(content_type) {
        // As gRPC's protocol says: not a gRPC call, so an HTTP answer.
        let why = format!(
            "`{content_type}` is not a gRPC content type: OTLP/gRPC takes {GRPC} (OTLP/HTTP \
             is served on `listen`)"
        );
        bad(&shared, &why);
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, why).into_response();
    }
    let path = uri.path();
    let Some(kind) = grpc::kind_of_method(path).filter(|_| method == Method::POST) else {
        let why = format!(
            "unknown method {method} {path}: OTLP/gRPC serves the Export method of \
             LogsService, TraceService and MetricsService"
        );
        return refuse(&shared, code::UNIMPLEMENTED, &why);
    };
    if !authorized(&shared, &headers) {
        shared.cx.stats().http_refused("unauthorized");
        return answer(
            code::UNAUTHENTICATED,
            "missing or wrong bearer token in the `authorization` metadata",
        );
    }
    let compression = headers
        .get("grpc-encoding")
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .unwrap_or_default();
    if !matches!(compression.as_str(), "" | "identity" | "gzip" | "deflate") {
        let mut response = refuse(
            &shared,
            code::UNIMPLEMENTED,
            &format!("unsupported grpc-encoding `{compression}`: supported are gzip, deflate"),
        );
        response.headers_mut().insert(
            "grpc-accept-encoding",
            HeaderValue::from_static("gzip,deflate,identity"),
        );
        return response;
    }
    let max = shared.settings.max_body;
    let too_large = |shared: &Shared| {
        refuse(
            shared,
            code::RESOURCE_EXHAUSTED,
            &format!("message larger than max_body ({max} bytes)"),
        )
    };
    let body = match read_message(&headers, body, max).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => return too_large(&shared),
        Err(BodyError::Broken(why) | BodyError::Encoding(why)) => {
            return refuse(&shared, code::INTERNAL, &why);
        }
    };
    let (compressed, message) = match grpc::unframe(&body) {
        Ok(unframed) => unframed,
        Err(e) => return refuse(&shared, e.code(), &e.to_string()),
    };
    let inflated;
    let message = match (compressed, compression.as_str()) {
        (false, _) => message,
        (true, "" | "identity") => {
            return refuse(
                &shared,
                code::INTERNAL,
                "compressed flag set with identity or empty grpc-encoding",
            );
        }
        (true, which) => {
            let read = if which == "gzip" {
                inflate(flate2::read::MultiGzDecoder::new(message), max)
            } else {
                inflate(flate2::read::ZlibDecoder::new(message), max)
            };
            match read {
                Ok(bytes) => {
                    inflated = bytes;
                    &inflated[..]
                }
                Err(BodyError::TooLarge) => return too_large(&shared),
                Err(BodyError::Broken(why) | BodyError::Encoding(why)) => {
                    return refuse(&shared, code::INVALID_ARGUMENT, &why);
                }
            }
        }
    };
    // The client's deadline, when shorter: past it the client has given up, and an
    // export taken after would come again with its retry.
    let within = headers
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(grpc::parse_timeout)
        .map_or(shared.settings.ingest_timeout, |deadline| {
            shared.settings.ingest_timeout.min(deadline)
        });
    match ingest(&shared, kind, Encoding::Protobuf, message, within).await {
        Ingested::Accepted { rejected, message } => {
            let framed = grpc::frame(false, &grpc::export_response(rejected, &message));
            let mut trailers = HeaderMap::new();
            insert_status(&mut trailers, code::OK, "");
            let body = http_body_util::Full::new(axum::body::Bytes::from(framed))
                .with_trailers(std::future::ready(Some(Ok(trailers))));
            let mut response = Response::new(Body::new(body));
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(GRPC));
            response
        }
        Ingested::Invalid(why) => answer(code::INVALID_ARGUMENT, &why),
        Ingested::Unavailable(message) => {
            let mut response = answer(code::UNAVAILABLE, &message);
            let details =
                grpc::retry_details(code::UNAVAILABLE, &message, super::retry_after(&shared));
            if let Ok(value) = HeaderValue::from_str(&details) {
                response
                    .headers_mut()
                    .insert("grpc-status-details-bin", value);
            }
            response
        }
    }
}

/// Reads a call's body: the length prefix and at most `max` bytes of message (a prefix
/// naming more is refused before the message is read).
async fn read_message(
    headers: &HeaderMap,
    body: Body,
    max: usize,
) -> Result<axum::body::Bytes, BodyError> {
    let limit = max.saturating_add(grpc::PREFIX);
    if declared_too_large(headers, limit) {
        return Err(BodyError::TooLarge);
    }
    // The first bytes name the message's length: an oversized message is refused as soon
    // as its prefix arrives, before the rest is read.
    let mut body = body;
    let mut head = Vec::with_capacity(grpc::PREFIX);
    while head.len() < grpc::PREFIX {
        match body.frame().await {
            None => return Ok(head.into()),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    head.extend_from_slice(&data);
                    if head.len() > limit {
                        return Err(BodyError::TooLarge);
                    }
                }
            }
            Some(Err(e)) => return Err(BodyError::Broken(format!("cannot read the body: {e}"))),
        }
    }
    if grpc::declared_length(&head).is_some_and(|n| n > max) {
        return Err(BodyError::TooLarge);
    }
    let rest = collect(body, limit - head.len()).await?;
    if head.len() + rest.len() > limit {
        return Err(BodyError::TooLarge);
    }
    head.extend_from_slice(&rest);
    Ok(head.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_at_the_door_are_grpc_statuses() {
        let response = refusal(StatusCode::FORBIDDEN, "host not allowed");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["grpc-status"], "7");
        assert_eq!(response.headers()["grpc-message"], "host not allowed");
        assert_eq!(response.headers()["content-type"], GRPC);
        let response = answer(code::UNAVAILABLE, "full: 50%");
        assert_eq!(response.headers()["grpc-message"], "full: 50%25");
    }
}
