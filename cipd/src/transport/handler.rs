//! What the stream transport serves and is served with: the [`RequestHandler`] a service
//! implements, the [`Reply`] it gives, the peer it is told of ([`PeerContext`]), the limits
//! and timeouts ([`TransportConfig`]) and the errors ([`TransportError`]).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use cip_proto::cip::{
    Limits, MessageError, MimeError, PollResult, Request, ResponseCode, Status, StreamError,
};
use rustls_pki_types::CertificateDer;

use crate::model::config::Config;

/// Limits and timeouts of the stream transport. Plain data so the daemon's configuration can
/// fill it; [`Default`] gives safe values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportConfig {
    /// Size limits for lines, messages, headers and multipart parts.
    pub limits: Limits,
    /// TCP connect plus TLS handshake, for outgoing connections (default 30 s); also the
    /// handshake limit for [`super::tls_accept::accept`] callers that reuse it.
    pub connect_timeout: Duration,
    /// Receiver: writing the banner. Sender: waiting for the `220` banner (default 60 s).
    pub banner_timeout: Duration,
    /// Receiver: waiting for `# CIP-Version: 3`. Sender: waiting for `300` (default 60 s).
    pub negotiation_timeout: Duration,
    /// Receiver: waiting for the first byte of the next request (default 300 s).
    pub idle_timeout: Duration,
    /// Receiver: reading the rest of a request once its first byte arrived, and writing a
    /// reply. Sender: one whole exchange, from writing the request to the last byte of the
    /// result (default 600 s).
    pub transfer_timeout: Duration,
    /// The receiver's `220` banner text.
    pub banner: String,
    /// Once an exchange is under way (not while waiting for the next request), the longest
    /// time no byte may move in either direction before it fails as stalled; `None`: only
    /// the phase deadlines bound it.
    pub stall_timeout: Option<Duration>,
    /// Idle time before TCP keepalive probes on connections this side opens (a silently
    /// dropped connection is found while idle too); `None`: the system's default (none).
    pub keepalive: Option<Duration>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            connect_timeout: Duration::from_secs(30),
            banner_timeout: Duration::from_secs(60),
            negotiation_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(300),
            transfer_timeout: Duration::from_secs(600),
            banner: "cipd CIP server ready".to_owned(),
            stall_timeout: None,
            keepalive: None,
        }
    }
}

/// The connection phase a timeout or unexpected close happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// TCP connect.
    Connect,
    /// TLS handshake.
    Handshake,
    /// Banner (`220`).
    Banner,
    /// Version negotiation (`# CIP-Version: 3` / `300`).
    Negotiation,
    /// Waiting for the next request.
    Idle,
    /// Reading or writing a request, status or result.
    Transfer,
    /// Closing (`222`).
    Closing,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Connect => "connect",
            Self::Handshake => "tls handshake",
            Self::Banner => "banner",
            Self::Negotiation => "version negotiation",
            Self::Idle => "idle wait",
            Self::Transfer => "transfer",
            Self::Closing => "closing",
        })
    }
}

/// Sees a result's bytes so far, from its first, each time more arrive
/// ([`crate::transport::CipConnection::request_watched`]); an error refuses the result.
pub type Watch = dyn FnMut(&[u8]) -> Result<(), String> + Send;

/// A connection that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// Socket or TLS I/O failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The peer broke the framing or a limit.
    #[error("protocol error: {0}")]
    Stream(#[from] StreamError),
    /// The shared in-flight memory budget was not available within the request's deadline.
    #[error(transparent)]
    Budget(#[from] crate::sys::budget::Exhausted),
    /// A deadline passed.
    #[error("timed out during {phase}")]
    Timeout {
        /// Where.
        phase: Phase,
    },
    /// No byte moved in either direction for `after` while an exchange was under way.
    #[error("stalled: no byte moved for {} ({phase})", humantime::format_duration(*after))]
    Stalled {
        /// Where.
        phase: Phase,
        /// The stall timeout that passed.
        after: Duration,
    },
    /// The peer closed the connection where the protocol does not allow it.
    #[error("connection closed by peer during {phase}")]
    Closed {
        /// Where.
        phase: Phase,
    },
    /// The peer refused CIP version 3 (a legacy Whois++ / CIPv1-2 server answers 5xx).
    #[error("peer refused cip version 3: {} {}", .status.code, .status.comment)]
    VersionRefused {
        /// The peer's status line.
        status: Status,
    },
    /// The peer answered the version line with something that is not a CIP status line:
    /// a Whois++ (or other) server, not CIPv3.
    #[error("not a CIPv3 server: it answered the version line with {answer:?}")]
    NotCipV3 {
        /// What it sent (shortened).
        answer: String,
    },
    /// The sender did not start with `# CIP-Version: 3` (receiver side; answered 500).
    #[error("peer did not negotiate cip version 3: {line:?}")]
    NotNegotiated {
        /// The first line it sent.
        line: String,
    },
    /// A status code that makes no sense at this point.
    #[error("unexpected status {} {} during {phase}", .status.code, .status.comment)]
    UnexpectedStatus {
        /// Where.
        phase: Phase,
        /// The status line.
        status: Status,
    },
    /// A result refused while it arrived (by the caller's watch: a hint over its memory
    /// budget).
    #[error("result refused while it arrived: {0}")]
    Refused(String),
    /// A result that does not parse.
    #[error("bad result: {0}")]
    Result(#[from] MessageError),
    /// A request that cannot be written.
    #[error("cannot encode request: {0}")]
    Encode(#[from] MimeError),
}

/// What a served connection's request loop reports to its listener, which chooses whom to
/// evict when every slot is wanted ([`crate::front::conn_limit`]).
pub trait RequestActivity: Send + Sync {
    /// A whole request was read and is being answered. False when the connection was
    /// evicted already: it should stop.
    fn begin(&self) -> bool;
    /// The request was answered; the connection waits for the next one.
    fn end(&self);
}

/// What a served connection reports to, and draws on, besides its handler.
#[derive(Clone, Copy, Default)]
pub struct ConnHooks<'a> {
    /// Where each request's start and end are reported.
    pub activity: Option<&'a dyn RequestActivity>,
    /// The shared byte budget its read buffer grows into past the free allowance.
    pub budget: Option<&'a std::sync::Arc<crate::sys::budget::ByteBudget>>,
}

impl std::fmt::Debug for ConnHooks<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnHooks")
            .field("activity", &self.activity.is_some())
            .field("budget", &self.budget)
            .finish()
    }
}

/// Who is on the other end of a served connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerContext {
    /// The peer's address.
    pub remote: SocketAddr,
    /// The client certificate chain the peer presented over TLS (leaf first), if any.
    pub tls_peer_certificates: Option<Vec<CertificateDer<'static>>>,
}

/// The receiver's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code. [`ResponseCode::OkOutputFollows`] sends `result` (an empty
    /// multipart when `None`); any other code sends no output and `result` is dropped.
    pub code: ResponseCode,
    /// The status line's comment; `None` uses the code's RFC text.
    pub comment: Option<String>,
    /// The poll result, for 201.
    pub result: Option<PollResult>,
}

impl Reply {
    /// `200` with the RFC text.
    pub fn ok() -> Self {
        Self {
            code: ResponseCode::Ok,
            comment: None,
            result: None,
        }
    }

    /// `201` with `result`.
    pub fn result(result: PollResult) -> Self {
        Self {
            code: ResponseCode::OkOutputFollows,
            comment: None,
            result: Some(result),
        }
    }

    /// Any code with a comment and no output.
    pub fn status(code: ResponseCode, comment: impl Into<String>) -> Self {
        Self {
            code,
            comment: Some(comment.into()),
            result: None,
        }
    }
}

/// Handles the requests of served connections.
pub trait RequestHandler: Send + Sync + 'static {
    /// Answers one request. Not bounded by the transport's timeouts.
    fn handle(&self, request: Request, peer: &PeerContext) -> impl Future<Output = Reply> + Send;
}

/// Our own extension parameter on `poll`: the poller's DSI, so the pollee can leave the
/// poller's own data out of its answer (digest A21). Other implementations ignore it (RFC
/// 2652 §2.3: unknown parameters are silently ignored).
pub const POLLER_DSI_PARAM: &str = "poller-dsi";

/// Poll parameter naming the datasets the poller wants apart for its pollers' sake, DSIs
/// separated by spaces (the polled node asks its own peers for them too):
/// left out of the answer's aggregate and sent as objects of their own, with their `Path`
/// (PROTOCOL.md, "Routes in a mesh with cycles"). A poll with it also gets the answer's
/// version in its `201` comment.
pub const SEPARATE_PARAM: &str = "separate";

/// Poll parameter naming the datasets the poller takes directly (the peers it polls and
/// reaches), DSIs separated by spaces: left out of the answer altogether, and not passed
/// on.
pub const APART_PARAM: &str = "apart";

/// Poll parameter naming the version of the answer the poller holds (16 hex digits, as
/// the `201` comment gave it): an answer of that version is not sent again.
pub const HAVE_PARAM: &str = "have";

/// Poll parameter (`yes`) asking, with `have`, for the answer's first object as a delta from
/// the one of that version when it is smaller (`CIP-HINT-DELTA`, PROTOCOL.md "Hint
/// deltas"); a poller that does not ask gets whole hints.
pub const DELTA_PARAM: &str = "delta";

/// First word of a `201` comment that gives the answer's version.
pub const VERSION: &str = "version";

/// First word of the `200` comment that says the answer has not changed since `have`.
pub const UNCHANGED: &str = "unchanged since version";

/// The poll parameter naming where the poller is queried (its base-URIs, space-separated),
/// as ROADS sends it (digest A18): the polled node's searches widen to it.
pub const BASE_URI_PARAM: &str = "base-uri";

/// The transport settings derived from the configuration.
pub fn transport_config(config: &Config) -> TransportConfig {
    let l = &config.limits;
    TransportConfig {
        limits: cip_proto::cip::Limits {
            max_line: l.max_line_length,
            max_message: l.max_frame_size,
            ..cip_proto::cip::Limits::default()
        },
        connect_timeout: l.connect_timeout,
        banner_timeout: l.handshake_timeout,
        negotiation_timeout: l.handshake_timeout,
        idle_timeout: l.idle_timeout,
        transfer_timeout: l.request_timeout,
        banner: format!("cipd {} CIP server ready", env!("CARGO_PKG_VERSION")),
        stall_timeout: Some(l.stall_timeout),
        keepalive: (!l.tcp_keepalive.is_zero()).then_some(l.tcp_keepalive),
    }
}
