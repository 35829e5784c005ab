//! TLS configurations, with rustls and the `ring` provider: servers' (listeners), mesh
//! clients' (a mesh CA, a client certificate) and web clients' (the system's roots plus a mesh
//! CA). Certificates and keys are read from PEM files with `rustls-pki-types`; every error
//! names the file and what is wrong with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A TLS configuration that could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid PEM.
    #[error("{path}: invalid PEM: {source}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rustls_pki_types::pem::Error,
    },
    /// The file holds no `CERTIFICATE` section.
    #[error("{path}: no PEM CERTIFICATE section found")]
    NoCertificates {
        /// The file.
        path: PathBuf,
    },
    /// The file holds no private key section (PKCS#8, PKCS#1 or SEC1).
    #[error("{path}: no PEM private key section found")]
    NoPrivateKey {
        /// The file.
        path: PathBuf,
    },
    /// A CA certificate rustls refuses as a trust anchor.
    #[error("{path}: certificate {index} is not a usable trust anchor: {source}")]
    BadTrustAnchor {
        /// The file.
        path: PathBuf,
        /// Zero-based position in the file.
        index: usize,
        /// Why.
        source: rustls::Error,
    },
    /// The client-certificate verifier could not be built from the CA file.
    #[error("{path}: cannot verify client certificates with these CAs: {source}")]
    ClientVerifier {
        /// The CA file.
        path: PathBuf,
        /// Why.
        source: rustls::server::VerifierBuilderError,
    },
    /// rustls refused the certificate chain and key (for example, they do not match).
    #[error("certificate {cert} with key {key}: {source}")]
    CertifiedKey {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        source: rustls::Error,
    },
    /// A protocol-version or provider setting rustls refused.
    #[error("tls configuration: {0}")]
    Config(rustls::Error),
    /// A host name that is not a valid TLS server name.
    #[error("invalid tls server name {name:?}")]
    ServerName {
        /// The name given.
        name: String,
    },
}

/// A server configuration: the certificate chain in `cert_pem` (leaf first), the private key
/// in `key_pem`, and, when `client_ca_pem` is given, mandatory client certificates that must
/// chain to one of the CAs in that file.
///
/// # Errors
/// [`TlsError`] naming the file at fault.
pub fn server_config(
    cert_pem: &Path,
    key_pem: &Path,
    client_ca_pem: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = provider();
    let certs = load_certs(cert_pem)?;
    let key = load_key(key_pem)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = Arc::new(load_roots(ca)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|source| TlsError::ClientVerifier {
                    path: ca.to_owned(),
                    source,
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|source| TlsError::CertifiedKey {
            cert: cert_pem.to_owned(),
            key: key_pem.to_owned(),
            source,
        })?;
    Ok(Arc::new(config))
}

/// A client configuration trusting the CAs in `ca_pem`, presenting the certificate chain and
/// key of `client_cert_key` (certificate file, key file) when given.
///
/// # Errors
/// [`TlsError`] naming the file at fault.
pub fn client_config(
    ca_pem: &Path,
    client_cert_key: Option<(&Path, &Path)>,
) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let roots = load_roots(ca_pem)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_root_certificates(roots);
    let config = match client_cert_key {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
            .map_err(|source| TlsError::CertifiedKey {
                cert: cert.to_owned(),
                key: key.to_owned(),
                source,
            })?,
    };
    Ok(Arc::new(config))
}

/// Parses a host name or IP address, for a client connection's server name.
///
/// # Errors
/// [`TlsError::ServerName`] when it is neither.
pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(host.to_owned()).map_err(|_| TlsError::ServerName {
        name: host.to_owned(),
    })
}

/// A web client's configuration: the system's trusted roots, plus the CAs in `extra_ca`
/// (a mesh's own CA) when given, presenting `client_cert_key` (certificate file, key file)
/// to servers that ask for one. For https feeds, RDM servers and CIP-over-HTTP peers.
///
/// # Errors
/// [`TlsError`] naming the file at fault, or [`TlsError::Config`] when the system's roots
/// cannot be read.
pub fn web_client_config(
    extra_ca: Option<&Path>,
    client_cert_key: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig, TlsError> {
    // The plain configuration (the system's roots only) is built once: reading the system's
    // certificate store takes milliseconds, and every cipctl request would pay it.
    static PLAIN: std::sync::OnceLock<rustls::ClientConfig> = std::sync::OnceLock::new();
    if extra_ca.is_none() && client_cert_key.is_none() {
        if let Some(c) = PLAIN.get() {
            return Ok(c.clone());
        }
        let built = build_web_client_config(None, None)?;
        return Ok(PLAIN.get_or_init(|| built).clone());
    }
    build_web_client_config(extra_ca, client_cert_key)
}

fn build_web_client_config(
    extra_ca: Option<&Path>,
    client_cert_key: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig, TlsError> {
    let provider = provider();
    let extra = match extra_ca {
        Some(ca) => load_certs(ca)?,
        None => Vec::new(),
    };
    let verifier: Arc<dyn rustls::client::danger::ServerCertVerifier> = if extra.is_empty() {
        match rustls_platform_verifier::Verifier::new(provider.clone()) {
            Ok(v) => Arc::new(v),
            // No system roots (a minimal container): plain http still works, and every https
            // request fails saying why, instead of the daemon not starting.
            Err(e) => {
                tracing::warn!(error = %e, "no system CA certificates: https will fail");
                Arc::new(NoRoots(provider.clone()))
            }
        }
    } else {
        Arc::new(
            rustls_platform_verifier::Verifier::new_with_extra_roots(extra, provider.clone())
                .map_err(TlsError::Config)?,
        )
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match client_cert_key {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
            .map_err(|source| TlsError::CertifiedKey {
                cert: cert.to_owned(),
                key: key.to_owned(),
                source,
            }),
    }
}

/// The verifier of a web client with no trusted roots at all: refuses every server.
#[derive(Debug)]
struct NoRoots(Arc<CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoRoots {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Err(rustls::Error::General(
            "no trusted CA certificates: the system has none (install ca-certificates) and \
             no CA file is configured"
                .into(),
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: path.to_owned(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificates {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    use std::os::unix::fs::PermissionsExt as _;
    // Certificate tooling sometimes shares keys with a group on purpose: warn, not refuse
    // (the signing key, which only cipd uses, is refused; see crate::model::trust::keys).
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            file = %path.display(),
            mode = format!("{:04o}", meta.permissions().mode() & 0o7777),
            "TLS private key is readable by its group or other users; chmod 600 it"
        );
    }
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|source| match source {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::NoPrivateKey {
            path: path.to_owned(),
        },
        source => TlsError::Pem {
            path: path.to_owned(),
            source,
        },
    })
}

fn load_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for (index, cert) in load_certs(path)?.into_iter().enumerate() {
        roots.add(cert).map_err(|source| TlsError::BadTrustAnchor {
            path: path.to_owned(),
            index,
            source,
        })?;
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = client_config(&missing, None).unwrap_err();
        assert!(matches!(e, TlsError::Read { .. }));
        assert!(e.to_string().contains("missing.pem"), "{e}");

        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not pem\n").unwrap();
        let e = client_config(&empty, None).unwrap_err();
        assert!(matches!(e, TlsError::NoCertificates { .. }), "{e}");
        assert!(e.to_string().contains("empty.pem"));

        let bad = dir.path().join("bad.pem");
        std::fs::write(&bad, "-----BEGIN CERTIFICATE-----\nAAAA\n").unwrap();
        let e = client_config(&bad, None).unwrap_err();
        assert!(matches!(e, TlsError::Pem { .. }), "{e}");

        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let cert_path = dir.path().join("cert.pem");
        std::fs::write(&cert_path, cert.pem()).unwrap();
        let e = server_config(&cert_path, &cert_path, None).unwrap_err();
        assert!(matches!(e, TlsError::NoPrivateKey { .. }), "{e}");
        let other_key = dir.path().join("other.key");
        std::fs::write(
            &other_key,
            rcgen::KeyPair::generate().unwrap().serialize_pem(),
        )
        .unwrap();
        let e = server_config(&cert_path, &other_key, None).unwrap_err();
        assert!(matches!(e, TlsError::CertifiedKey { .. }), "{e}");
        assert!(server_name("bad name!").is_err());
        assert!(server_name("127.0.0.1").is_ok());
    }
}
