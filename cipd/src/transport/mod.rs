//! CIP's transports below the front-ends: the TCP stream (RFC 2653 §2.1) in both roles,
//! with its timeouts and TLS, and the sender's side of CIP over HTTP (§2.3).
//!
//! The framing and message types come from `cip_proto::cip`; this module adds the socket
//! side: [`serve_connection`] runs the receiver-CIP role on any stream with a
//! [`RequestHandler`], [`CipClient`] / [`CipConnection`] the sender-CIP role, [`tls_accept`]
//! the server's handshake of implicit TLS (digest A20; configurations: `crate::sys::tls`), and
//! [`cip_http_client::CipHttpClient`] POSTs requests to a peer's CIP URL. It knows nothing
//! of the node: the front-ends serve through it, the daemon's peer tasks connect through it.
//!
//! Timeouts (none in the RFCs, digest A19): every wait has a deadline from
//! [`TransportConfig`]; when the receiver's fires it sends `% 520` with the reason and
//! closes.

pub mod cip_http_client;
mod conn;
mod handler;
pub mod tls_accept;

pub use conn::{
    CipClient, CipConnection, ClientReply, OtherProtocol, keepalive, serve_connection,
    serve_shared_connection, serve_tracked_connection,
};
pub use handler::*;

#[cfg(test)]
mod tests;
