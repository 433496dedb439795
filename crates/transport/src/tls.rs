//! The one TLS setup of every client patchbay opens (`wss://` WebSockets and `https://`
//! requests): rustls on the ring provider (not aws-lc-rs, whose C build is slow; not
//! OpenSSL), trusting the system's root certificates plus, when a component sets
//! `ca_file`, the certificates of that PEM file (a private CA, a self-signed local server).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// Why a TLS client configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The `ca_file` could not be read or is not PEM.
    #[error("cannot read the CA file {}: {source}", path.display())]
    ReadCa {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: rustls_pki_types::pem::Error,
    },
    /// The `ca_file` holds no certificate.
    #[error("the CA file {} holds no certificate", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A certificate of the `ca_file` is not a usable trust anchor.
    #[error("the CA file {}: {source}", path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// rustls' reason.
        source: rustls::Error,
    },
    /// rustls refused the configuration.
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Installs rustls' ring provider as the process default, once (later calls, or another
/// provider installed first, are fine). Clients built here carry their provider; this is
/// for any rustls user in the process that relies on the default.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The system's root certificates, read once (unreadable ones are skipped and logged).
fn system_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for error in &found.errors {
            tracing::debug!("system root certificates: {error}");
        }
        let mut roots = RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(found.certs);
        tracing::debug!(added, ignored, "system root certificates loaded");
        roots
    })
}

/// The client configuration trusting the system's roots and, with `ca_file`, that file's
/// certificates too. Without `ca_file` the configuration is built once and shared.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    static SYSTEM: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    let Some(path) = ca_file else {
        if let Some(config) = SYSTEM.get() {
            return Ok(Arc::clone(config));
        }
        let config = build(system_roots().clone())?;
        return Ok(Arc::clone(SYSTEM.get_or_init(|| config)));
    };
    let mut roots = system_roots().clone();
    let read_error = |source| TlsError::ReadCa {
        path: path.to_owned(),
        source,
    };
    let mut count = 0;
    for cert in CertificateDer::pem_file_iter(path).map_err(read_error)? {
        roots
            .add(cert.map_err(read_error)?)
            .map_err(|source| TlsError::BadCertificate {
                path: path.to_owned(),
                source,
            })?;
        count += 1;
    }
    if count == 0 {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    build(roots)
}

fn build(roots: RootCertStore) -> Result<Arc<ClientConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
