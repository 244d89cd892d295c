//! The loader's TLS client configuration (rustls, for HTTP/1.1 and HTTP/2;
//! HTTP/3's QUIC configuration is quiche's, in `h3.rs`).

use std::sync::Arc;

/// Why the TLS configuration could not be built; printed as
/// `satbench-load: <message>`, exit 2.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The CA file could not be read.
    #[error("--cacert {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// A PEM block of the CA file is malformed.
    #[error("--cacert {path}: {source}")]
    Pem {
        path: String,
        source: std::io::Error,
    },
    /// rustls refused a certificate of the CA file.
    #[error("--cacert {path}: {source}")]
    Certificate { path: String, source: rustls::Error },
    /// The CA file holds no certificate.
    #[error("--cacert {0}: no certificate in it")]
    Empty(String),
    /// An https:// URL without `--cacert`.
    #[error("--cacert is required for https:// URLs (the test CA: satbench ca)")]
    CaRequired,
}

/// The TLS client configuration: the roots of `cacert`, or none for a
/// cleartext URL (a page may still name an https:// object, which then fails
/// verification and makes the load invalid).
pub fn client_config(cacert: Option<&str>, https: bool) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    match cacert {
        Some(p) => {
            let path = || p.to_string();
            let pem = std::fs::read(p).map_err(|source| TlsError::Read {
                path: path(),
                source,
            })?;
            for c in rustls_pemfile::certs(&mut pem.as_slice()) {
                let c = c.map_err(|source| TlsError::Pem {
                    path: path(),
                    source,
                })?;
                roots.add(c).map_err(|source| TlsError::Certificate {
                    path: path(),
                    source,
                })?;
            }
            if roots.is_empty() {
                return Err(TlsError::Empty(path()));
            }
        }
        None if https => return Err(TlsError::CaRequired),
        None => {}
    }
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_ca_file() {
        let e = client_config(Some("/nonexistent/ca.pem"), true).unwrap_err();
        assert!(
            e.to_string().starts_with("--cacert /nonexistent/ca.pem: "),
            "{e}"
        );
        let empty = std::env::temp_dir().join(format!("satbench-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "no PEM here\n").unwrap();
        let e = client_config(empty.to_str(), true).unwrap_err();
        assert!(matches!(e, TlsError::Empty(_)), "{e}");
        std::fs::remove_file(&empty).unwrap();
        assert!(matches!(
            client_config(None, true),
            Err(TlsError::CaRequired)
        ));
        assert!(client_config(None, false).is_ok());
    }
}
