//! CIP's TCP stream transport (RFC 2653 §2.1): serving connections, connecting to peers,
//! timeouts and TLS.
//!
//! The framing and message types come from `cip_proto::cip`; this module adds the socket
//! side: [`serve_connection`] runs the receiver-CIP role on any stream with a
//! [`RequestHandler`], [`CipClient`] / [`CipConnection`] the sender-CIP role, and [`tls`]
//! builds rustls configurations for implicit TLS (digest A20).
//!
//! Timeouts (none in the RFCs, digest A19): every wait has a deadline from
//! [`TransportConfig`]; when the receiver's fires it sends `% 520` with the reason and
//! closes.

mod conn;
mod handler;
pub mod tls;

pub use conn::{
    CipClient, CipConnection, ClientReply, OtherProtocol, keepalive, serve_connection,
    serve_shared_connection, serve_tracked_connection,
};
pub use handler::*;

#[cfg(test)]
mod tests;
