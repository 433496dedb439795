//! The HTTP client every patchbay transport uses (the LLM proxy's upstreams, Palyra's
//! console and ACP routes, the `sse` source, `wrap` posting to a sidecar).
//!
//! reqwest's TLS is rustls without a built-in crypto provider; this crate installs the
//! ring provider once, before any client is built. Building clients only through
//! [`client_builder`] means no client in the process can miss it, whatever features cargo
//! unified into the build.

#![warn(missing_docs)]

/// Installs rustls' ring provider as the process default, once (later calls, or another
/// provider installed first, are fine).
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client builder with the crypto provider installed.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}

#[cfg(test)]
mod tests {
    #[test]
    fn clients_build_with_tls_available() {
        assert!(super::client_builder().build().is_ok());
    }
}
