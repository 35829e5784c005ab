//! What the node publishes about itself: the counters of its status channel ([`Status`]),
//! per-peer and per-collection state, its identity and bound listeners. Plain data, shown
//! by the admin socket, the console and `/v1/status`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use cip_proto::Dsi;
use serde::{Deserialize, Serialize};

/// Counters and flags published on the node's `watch` channel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// All listeners are bound and the spool is restored.
    pub ready: bool,
    /// Objects in local collections.
    pub local_objects: u64,
    /// Bumped each time the local hint is rebuilt.
    pub local_generation: u64,
    /// Bumped each time the out-bound hint changes.
    pub outbound_generation: u64,
    /// Datasets in the routing table.
    pub table_peers: u64,
    /// Successful polls.
    pub polls_ok: u64,
    /// Failed polls.
    pub polls_failed: u64,
    /// In-bound index objects accepted (polled, pushed or restored from the spool).
    pub hints_accepted: u64,
    /// In-bound index objects refused.
    pub hints_rejected: u64,
    /// Index objects restored from the spool at start.
    pub spool_restored: u64,
    /// Spool files found corrupt at start.
    pub spool_corrupt: u64,
    /// `datachanged` received from peers we poll.
    pub datachanged_received: u64,
    /// `datachanged` sent to our pollers.
    pub datachanged_sent: u64,
    /// `datachanged` notices not sent: the poller's answer did not change.
    #[serde(default)]
    pub datachanged_skipped: u64,
    /// Index objects pushed to push targets.
    pub pushes_sent: u64,
    /// CIP requests refused because the peer is not configured.
    pub unknown_peer_refusals: u64,
    /// Configuration reloads that took effect.
    pub reloads: u64,
    /// Configuration reloads refused (bad new configuration).
    pub reload_failures: u64,
    /// Hints dropped by TTL.
    pub expired: u64,
    /// The routing table's generation (bumped by every change to it).
    pub table_generation: u64,
    /// The table generation the out-bound hint was last built from.
    pub outbound_table_generation: u64,
    /// Out-bound builds done.
    pub outbound_builds: u64,
    /// Configured peers that deliver hints (role `poll` or `pusher`).
    pub peers_expected: u64,
    /// Of those, the ones whose hint the table holds.
    pub peers_imported: u64,
    /// In-bound index objects refused because their DSI is not their peer's.
    pub dsi_refusals: u64,
    /// In-bound index objects refused for counts that cannot be true.
    pub implausible_refusals: u64,
    /// Spool entries set aside at start (peer or DSI no longer matching).
    pub spool_set_aside: u64,
    /// In-bound hints refused for their signature (missing, invalid, replayed,
    /// uncheckable).
    pub signature_refusals: u64,
    /// In-bound hints refused because they would put the routing table over a memory
    /// budget.
    pub budget_refusals: u64,
}

/// What the node knows about one configured peer (shown by the admin socket).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerState {
    /// Configured name.
    pub name: String,
    /// `host:port` (port absent for receive-only peers).
    pub address: String,
    /// Roles.
    pub roles: Vec<String>,
    /// The peer's DSI: configured, else learned from its index objects.
    pub dsi: Option<String>,
    /// The `type` its last answered poll was spelled with (`HARVEST-SOIF-1`, `tagged`, or
    /// `application/index.obj.tagged`, the only spelling ROADS answers).
    #[serde(default)]
    pub index_type: Option<String>,
    /// Last poll (or push) attempt.
    pub last_attempt: Option<SystemTime>,
    /// Last successful poll (or push).
    pub last_success: Option<SystemTime>,
    /// Last error, if the last attempt failed.
    pub last_error: Option<String>,
    /// Failures since the last success.
    pub consecutive_failures: u32,
    /// When the next poll is due.
    pub next_attempt: Option<SystemTime>,
    /// When its current hint arrived.
    pub hint_received: Option<SystemTime>,
    /// Total-Object-Count of its current hint.
    pub hint_objects: Option<u64>,
    /// Successful polls/pushes.
    pub successes: u64,
    /// Failed polls/pushes.
    pub failures: u64,
    /// Addresses the host resolved to (used to recognise its connections).
    #[serde(skip)]
    pub resolved: Vec<IpAddr>,
    /// The poll under way now, if one is.
    #[serde(default)]
    pub exchange: Option<Exchange>,
    /// Since when its polls fail (`None` while it answers): it is unreachable now.
    #[serde(default)]
    pub unreachable_since: Option<SystemTime>,
    /// The same moment on the node's monotonic clock (time since its start), which
    /// `limits.peer_gone_after` is measured on.
    #[serde(skip)]
    pub unreachable_at: Option<Duration>,
    /// Its hint left the table after `limits.peer_gone_after` unreachable (the spooled copy
    /// stays); its next answer brings it back.
    #[serde(default)]
    pub gone: bool,
    /// Until when its changes are held: it changed too often and is damped (RFC 2439;
    /// `limits.damping_*`). `None` when it is not.
    #[serde(default)]
    pub damped_until: Option<SystemTime>,
    /// Times it was damped since the start.
    #[serde(default)]
    pub dampings: u64,
}

/// A poll under way: where it is, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    /// `connecting`, `waiting for its answer` or `importing its hint`.
    pub phase: String,
    /// When the poll started.
    pub since: SystemTime,
}

/// One local collection's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionStatus {
    /// Configured name.
    pub name: String,
    /// Source description.
    pub source: String,
    /// Objects loaded.
    pub objects: u64,
    /// Objects skipped as unparsable.
    pub skipped: u64,
    /// Files read.
    pub files: u64,
    /// Bytes read.
    pub bytes: u64,
    /// When it was last loaded.
    pub loaded: Option<SystemTime>,
    /// The last load error (the previous objects are kept).
    pub error: Option<String>,
}

/// This node's identity as it appears on out-bound index objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// DSI.
    pub dsi: Dsi,
    /// Base URIs (configured, or derived from the first HTTP listener).
    pub base_uris: Vec<String>,
    /// DSI-description.
    pub description: Option<String>,
}

/// Addresses the daemon's listeners are bound to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listeners {
    /// Plain CIP.
    pub cip: Vec<SocketAddr>,
    /// CIP over TLS.
    pub cip_tls: Vec<SocketAddr>,
    /// HTTP.
    pub http: Vec<SocketAddr>,
    /// HTTPS.
    pub https: Vec<SocketAddr>,
    /// The admin socket's path.
    pub admin: Option<PathBuf>,
    /// Whois++ (and CIP).
    #[serde(default)]
    pub whoispp: Vec<SocketAddr>,
}
