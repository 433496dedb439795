//! The HTTP client every patchbay transport uses (the `sse` source, the LLM proxy's
//! upstreams, Palyra's console and ACP routes, `wrap` posting to a sidecar, discovery).

use std::sync::Arc;

use rustls::ClientConfig;

use crate::tls;

/// A client builder for `http://` and `https://` URLs, trusting the system's roots
/// ([`tls::client_config`]). Build clients only through this (or
/// [`client_builder_with`]) so that every one gets the same TLS setup.
pub fn client_builder() -> reqwest::ClientBuilder {
    tls::install_crypto_provider();
    let builder = reqwest::Client::builder();
    match tls::client_config(None) {
        Ok(config) => builder.tls_backend_preconfigured(ClientConfig::clone(&config)),
        // Only a broken crypto provider gets here; reqwest then reports its own error
        // when the client is built.
        Err(error) => {
            tracing::warn!("TLS setup: {error}");
            builder
        }
    }
}

/// A client builder with the given TLS configuration (one with a `ca_file`, say).
pub fn client_builder_with(tls: &Arc<ClientConfig>) -> reqwest::ClientBuilder {
    tls::install_crypto_provider();
    reqwest::Client::builder().tls_backend_preconfigured(ClientConfig::clone(tls))
}

/// A request error as it may be shown: what failed and why, without the URL (whose
/// query may carry a token) and without any header.
pub fn describe_http_error(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "cannot connect"
    } else if error.is_body() || error.is_decode() {
        "the response broke off"
    } else {
        "request failed"
    };
    // The source chain has the cause (connection refused, a TLS error) but no URL.
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !causes.contains(&text) {
            causes.push(text);
        }
        source = cause.source();
    }
    if causes.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}: {}", causes.join(": "))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn clients_build_with_tls_available() {
        assert!(super::client_builder().build().is_ok());
    }
}
