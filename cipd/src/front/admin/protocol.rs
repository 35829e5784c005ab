//! The admin socket's wire format: one JSON request per line, one JSON response per line.
//!
//! Request: `{"version": 1, "command": "peers"}`, with a command's arguments beside
//! `command` (`{"version": 1, "command": "table", "attr": "DOCUMENT:Author", "top": 10}`).
//! Response: `{"version": 1, "ok": true, "result": {...}}` or
//! `{"version": 1, "ok": false, "error": {"kind": "unknown-peer", "message": "..."}}`.
//! The key sets of every result are pinned by tests: scripts may rely on them.

pub use crate::model::config::MAX_REQUEST_LINE;
use serde::{Deserialize, Serialize};

/// Version of the admin protocol this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// A request with its version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Protocol version of the sender; the daemon refuses versions it does not speak.
    pub version: u32,
    /// The command and its arguments.
    #[serde(flatten)]
    pub request: AdminRequest,
}

/// The admin commands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case", deny_unknown_fields)]
pub enum AdminRequest {
    /// Version, uptime, identity, listeners, collection and table sizes.
    Status,
    /// Every configured or known peer and its state.
    Peers,
    /// The hint table: values with per-peer counts.
    Table {
        /// Only this `Template:Attribute` (or bare attribute).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attr: Option<String>,
        /// Only this peer's DSI.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<String>,
        /// Only values starting with this prefix (ASCII case-insensitive).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prefix: Option<String>,
        /// At most this many rows.
        #[serde(default = "default_top")]
        top: usize,
    },
    /// The referrals for a query and how each rank was computed.
    Explain {
        /// The query, as `/v1/referrals` takes it.
        query: String,
        /// Include possible (threshold) referrals.
        #[serde(default)]
        possible: bool,
    },
    /// Poll a peer now.
    Poll {
        /// The peer's name, address or DSI.
        peer: String,
    },
    /// Re-read the configuration and the local collections.
    Reload,
    /// Forget a peer's hint (until its next poll or push).
    DropPeer {
        /// The peer's DSI.
        dsi: String,
    },
    /// Change the log filter (`debug`, `cipd=trace,info`, ...).
    LogLevel {
        /// An `EnvFilter` directive string.
        level: String,
    },
    /// The current out-bound hint as SOIF.
    Export,
    /// The index object last taken from a peer, as it arrived (signature included).
    PeerHint {
        /// The peer's name or DSI.
        peer: String,
    },
    /// The metrics in the Prometheus text format.
    Metrics,
    /// Drain and stop the daemon.
    Shutdown,
}

fn default_top() -> usize {
    50
}

/// A response line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Protocol version of the daemon.
    pub version: u32,
    /// True when `result` holds the answer, false when `error` says why not.
    pub ok: bool,
    /// The command's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why the command failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// A failed command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable, machine-readable kind (`bad-request`, `unknown-peer`, ...).
    pub kind: String,
    /// What went wrong, for people.
    pub message: String,
}

/// Why the daemon refused a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The request was not valid JSON or named no known command.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The request's protocol version is not spoken here.
    #[error("protocol version {got} is not supported (this daemon speaks {PROTOCOL_VERSION})")]
    Version {
        /// The version sent.
        got: u32,
    },
    /// No such peer.
    #[error("unknown peer {0:?}")]
    UnknownPeer(String),
    /// An argument was malformed (a query, a DSI, a log filter).
    #[error("{0}")]
    InvalidArgument(String),
    /// The command could not be carried out (e.g. reload with a bad config).
    #[error("{0}")]
    Failed(String),
}

impl AdminError {
    /// The stable kind string sent on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::BadRequest(_) => "bad-request",
            Self::Version { .. } => "version",
            Self::UnknownPeer(_) => "unknown-peer",
            Self::InvalidArgument(_) => "invalid-argument",
            Self::Failed(_) => "failed",
        }
    }
}

impl Response {
    /// A successful response.
    pub fn ok(result: serde_json::Value) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            ok: true,
            result: Some(result),
            error: None,
        }
    }

    /// A failed response.
    pub fn error(e: &AdminError) -> Self {
        Self {
            version: PROTOCOL_VERSION,
            ok: false,
            result: None,
            error: Some(ErrorBody {
                kind: e.kind().to_owned(),
                message: e.to_string(),
            }),
        }
    }
}

/// `status` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusInfo {
    /// cipd version.
    pub version: String,
    /// Seconds since start.
    pub uptime_seconds: u64,
    /// This node's DSI.
    pub dsi: String,
    /// This node's base URIs.
    pub base_uris: Vec<String>,
    /// Bound listeners.
    pub listeners: Vec<ListenerInfo>,
    /// Objects in local collections.
    pub local_objects: u64,
    /// Configured peers.
    pub peers: usize,
    /// Routing table size.
    pub table: TableSize,
    /// Configured peers that deliver hints, and how many of them the table holds.
    #[serde(default)]
    pub import: ImportProgress,
    /// The out-bound hint against the table it derives from.
    #[serde(default)]
    pub outbound: OutboundInfo,
    /// While the node starts: the running phase (spool restore, collection loads) and how
    /// far it is; absent once it serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting: Option<crate::sys::startup::StartupProgress>,
}

/// Cold-start progress: configured peers that deliver hints (role `poll` or `pusher`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportProgress {
    /// Peers expected.
    pub expected: u64,
    /// Of those, peers whose hint the table holds.
    pub imported: u64,
}

/// The out-bound hint's freshness.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct OutboundInfo {
    /// The routing table's generation now.
    pub table_generation: u64,
    /// The table generation the out-bound hint was built from.
    pub built_from: u64,
    /// The hint's change counter.
    pub generation: u64,
    /// Builds done.
    pub builds: u64,
    /// Seconds the last build took.
    pub last_build_seconds: f64,
    /// Seconds it has lagged the changes made since (0 when current).
    pub lag_seconds: f64,
    /// Rebuilt after every change (some peer is a `poller` or `push` target); otherwise
    /// built only when polled or exported.
    #[serde(default)]
    pub eager: bool,
}

/// A bound listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerInfo {
    /// `cip`, `cip-tls`, `whoispp`, `http` or `admin`.
    pub kind: String,
    /// Address or socket path.
    pub address: String,
}

/// Routing table size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSize {
    /// Peers with a hint.
    pub peers: u64,
    /// Distinct values.
    pub values: u64,
    /// (value, peer) entries.
    pub entries: u64,
    /// Approximate bytes of memory.
    pub bytes: u64,
}

/// One row of `peers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// Configured name (or the DSI for peers known only by their hints).
    pub name: String,
    /// `host:port`, when configured.
    pub address: Option<String>,
    /// `poll`, `polled-by`, `push` or `learned`.
    pub role: String,
    /// DSI of the peer's hint, once known.
    pub dsi: Option<String>,
    /// Unix seconds of the last poll attempt.
    pub last_poll: Option<u64>,
    /// Unix seconds of the last successful poll or push.
    pub last_success: Option<u64>,
    /// The last error, if the last attempt failed.
    pub last_error: Option<String>,
    /// Seconds since the hint was received.
    pub hint_age_seconds: Option<u64>,
    /// Unix seconds when the hint expires.
    pub expires: Option<u64>,
    /// Total-Object-Count of the hint.
    pub objects: Option<u64>,
    /// Distinct values in the hint.
    pub values: Option<u64>,
    /// How the peer's last hint checked: `valid ed25519:…`, `unsigned`, `signed, not
    /// checked`, `refused: <reason>` (see `crate::model::trust`).
    pub signature: String,
    /// Failed attempts since the last success (the backoff grows with them).
    #[serde(default)]
    pub failures: u32,
    /// Unix seconds of the next poll or push, when one is scheduled.
    #[serde(default)]
    pub next_poll: Option<u64>,
    /// The `type` the peer's last answered poll was spelled with (`tagged`, or
    /// `application/index.obj.tagged` for ROADS).
    #[serde(default)]
    pub index_type: Option<String>,
    /// Unix seconds until which the peer's changes are held: it changed too often and is
    /// damped (RFC 2439). `None` when it is not.
    #[serde(default)]
    pub damped_until: Option<u64>,
}

/// One row of `table`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableRowInfo {
    /// `Template:Attribute` as the peer spelled it.
    pub attr: String,
    /// The value (lossy UTF-8).
    pub value: String,
    /// Sum of the per-peer counts.
    pub total: u64,
    /// Object count per peer DSI.
    pub peers: Vec<(String, u64)>,
}

/// One referral in `explain`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExplainInfo {
    /// Position in the ranking, from 1.
    pub rank: usize,
    /// The referral's DSI.
    pub dsi: String,
    /// Its base URIs.
    pub base_uris: Vec<String>,
    /// Matching object count used for ranking.
    pub count: u64,
    /// The peer's Total-Object-Count.
    pub total: u64,
    /// Definite (a value matched) or possible (threshold only).
    pub definite: bool,
    /// How the rank was computed, in words.
    pub reason: String,
    /// Per query term: the matched values and their counts.
    pub terms: Vec<ExplainTerm>,
}

/// One query term's matches in `explain`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExplainTerm {
    /// The term as written.
    pub term: String,
    /// `T:A` and value and count, per matched value.
    pub matches: Vec<(String, String, u64)>,
    /// Estimated count for the term.
    pub count: u64,
    /// True when the term matched only through a threshold.
    pub possible: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_on_the_wire() {
        let cases = [
            (
                json!({"version": 1, "command": "status"}),
                AdminRequest::Status,
            ),
            (
                json!({"version": 1, "command": "table", "attr": "DOCUMENT:Author", "top": 3}),
                AdminRequest::Table {
                    attr: Some("DOCUMENT:Author".into()),
                    peer: None,
                    prefix: None,
                    top: 3,
                },
            ),
            (
                json!({"version": 1, "command": "drop-peer", "dsi": "1.2"}),
                AdminRequest::DropPeer { dsi: "1.2".into() },
            ),
            (
                json!({"version": 1, "command": "log-level", "level": "debug"}),
                AdminRequest::LogLevel {
                    level: "debug".into(),
                },
            ),
        ];
        for (wire, req) in cases {
            let env: Envelope = serde_json::from_value(wire.clone()).unwrap();
            assert_eq!(env.request, req);
            assert_eq!(env.version, 1);
            let back = serde_json::to_value(&env).unwrap();
            let again: Envelope = serde_json::from_value(back).unwrap();
            assert_eq!(again, env);
        }
        assert!(
            serde_json::from_value::<Envelope>(json!({"version": 1, "command": "nope"})).is_err()
        );
        assert!(
            serde_json::from_value::<Envelope>(json!({"version": 1, "command": "poll", "x": 1}))
                .is_err()
        );
    }

    #[test]
    fn responses_on_the_wire() {
        let ok = serde_json::to_value(Response::ok(json!({"a": 1}))).unwrap();
        assert_eq!(ok, json!({"version": 1, "ok": true, "result": {"a": 1}}));
        let err =
            serde_json::to_value(Response::error(&AdminError::UnknownPeer("x".into()))).unwrap();
        assert_eq!(
            err,
            json!({"version": 1, "ok": false,
                   "error": {"kind": "unknown-peer", "message": "unknown peer \"x\""}})
        );
    }
}
