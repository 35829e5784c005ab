//! TLS for the CIP stream transport (RFC 2653 §3).
//!
//! RFC 2653 names TLS but defines no way to start it on a plain connection (no STARTTLS), so
//! a listener is either plain or TLS from the first byte (implicit TLS, digest A20). The
//! configurations are built in [`crate::sys::tls`]; this is the server handshake.

use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{TlsAcceptor, server::TlsStream};

use super::handler::{Phase, TransportError};

/// Runs the server side of the TLS handshake on an accepted connection, within `timeout`,
/// and returns the stream with the client's certificate chain (when it sent one).
///
/// # Errors
/// [`TransportError::Timeout`] with [`Phase::Handshake`], or the handshake's I/O error.
pub async fn accept<S>(
    config: Arc<rustls::ServerConfig>,
    stream: S,
    timeout: Duration,
) -> Result<(TlsStream<S>, Option<Vec<CertificateDer<'static>>>), TransportError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let acceptor = TlsAcceptor::from(config);
    let tls = tokio::time::timeout(timeout, acceptor.accept(stream))
        .await
        .map_err(|_| TransportError::Timeout {
            phase: Phase::Handshake,
        })??;
    let certs = tls.get_ref().1.peer_certificates().map(|c| c.to_vec());
    Ok((tls, certs))
}
