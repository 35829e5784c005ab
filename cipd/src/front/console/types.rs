//! The console's own JSON answers (`/v1/mesh`, `/v1/counters`, the counters' history) and
//! how they are drawn from the node.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::node::Node;

/// `/v1/mesh`: what the mesh picture needs beyond `/v1/peers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeshInfo {
    /// This node's DSI.
    pub dsi: String,
    /// This node's base URIs.
    pub base_uris: Vec<String>,
    /// This node's DSI-description.
    pub description: Option<String>,
    /// Configured peers, with their roles and poll schedule.
    pub peers: Vec<MeshPeer>,
    /// Every dataset in the routing table, with the peer it came through and its provenance.
    pub datasets: Vec<MeshDataset>,
}

/// A configured peer in `/v1/mesh`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshPeer {
    /// Configured name.
    pub name: String,
    /// Roles (`poll`, `poller`, `push`, `pusher`).
    pub roles: Vec<String>,
    /// The peer's DSI, configured or learned.
    pub dsi: Option<String>,
    /// Failed attempts since the last success (the poll backoff grows with them).
    pub consecutive_failures: u32,
    /// Unix seconds until which its changes are held (damped, RFC 2439); `None` when not.
    #[serde(default)]
    pub damped_until: Option<u64>,
    /// Unix seconds when the next poll (or push) is due.
    pub next_poll: Option<u64>,
    /// Successful polls or pushes.
    pub successes: u64,
    /// Failed polls or pushes.
    pub failures: u64,
}

/// A dataset of the routing table in `/v1/mesh`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshDataset {
    /// Its DSI.
    pub dsi: String,
    /// Its base URIs.
    pub base_uris: Vec<String>,
    /// Its DSI-description.
    pub description: Option<String>,
    /// The configured peer its hint came through.
    pub via: Option<String>,
    /// DSIs its hint says it aggregates (Provenance-N).
    pub provenance: Vec<String>,
    /// The route it came by, from the peer to the dataset; empty for a peer's own hint.
    #[serde(default)]
    pub path: Vec<String>,
    /// Total-Object-Count of its hint.
    pub total: u64,
    /// Unix seconds when its hint expires.
    pub expires: Option<u64>,
}

/// `/v1/counters`: cumulative counters; the page turns two samples into rates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Unix milliseconds when sampled.
    pub unix_ms: u64,
    /// Seconds since the daemon started (the clock to take rates against).
    pub uptime_seconds: f64,
    /// Polls done, successful or not (`cipd_polls_total`).
    pub polls: u64,
    /// Of those, failed.
    pub polls_failed: u64,
    /// In-bound index objects accepted (`cipd_index_objects_received_total`).
    pub imports: u64,
    /// In-bound index objects refused (`cipd_index_objects_rejected_total`).
    pub rejected: u64,
    /// Referral queries answered (`cipd_queries_total`).
    pub queries: u64,
}

/// How often the counters are sampled for `/v1/counters/history`.
pub const HISTORY_EVERY: std::time::Duration = std::time::Duration::from_secs(2);
/// Samples kept: three minutes.
pub const HISTORY_SAMPLES: usize = 90;

/// The last [`HISTORY_SAMPLES`] counter samples, oldest first.
#[derive(Debug, Default)]
pub struct History(std::sync::Mutex<std::collections::VecDeque<Counters>>);

impl History {
    /// Adds a sample, dropping the oldest past [`HISTORY_SAMPLES`].
    pub fn push(&self, c: Counters) {
        let mut h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        h.push_back(c);
        while h.len() > HISTORY_SAMPLES {
            h.pop_front();
        }
    }

    /// Every sample kept, oldest first.
    pub fn samples(&self) -> Vec<Counters> {
        let h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        h.iter().copied().collect()
    }
}

/// Samples the counters every [`HISTORY_EVERY`] until the node shuts down.
pub(super) async fn sample_history(node: Arc<Node>, history: Arc<History>) {
    let token = node.token.child_token();
    let mut every = tokio::time::interval(HISTORY_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            _ = every.tick() => history.push(counters_now(&node)),
        }
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The data of the mesh picture.
pub fn mesh_info(node: &Node) -> MeshInfo {
    let identity = node.identity();
    let peers = node
        .peer_states()
        .into_iter()
        .map(|p| MeshPeer {
            name: p.name,
            roles: p.roles,
            dsi: p.dsi,
            consecutive_failures: p.consecutive_failures,
            damped_until: p.damped_until.map(unix),
            next_poll: p.next_attempt.map(unix),
            successes: p.successes,
            failures: p.failures,
        })
        .collect();
    let datasets = node
        .table()
        .peers()
        .into_iter()
        .map(|s| MeshDataset {
            dsi: s.dsi.to_string(),
            base_uris: s.base_uris,
            description: s.dsi_description,
            via: s.via,
            provenance: s.provenance.iter().map(ToString::to_string).collect(),
            path: s.path.iter().map(ToString::to_string).collect(),
            total: s.total,
            expires: s.expires.map(unix),
        })
        .collect();
    MeshInfo {
        dsi: identity.dsi.to_string(),
        base_uris: identity.base_uris.clone(),
        description: identity.description.clone(),
        peers,
        datasets,
    }
}

/// The counters now.
pub fn counters_now(node: &Node) -> Counters {
    let m = node.metrics();
    let (ok, failed) = m
        .polls()
        .values()
        .fold((0, 0), |(ok, failed), c| (ok + c.ok, failed + c.failed));
    Counters {
        unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        uptime_seconds: node.uptime().as_secs_f64(),
        polls: ok + failed,
        polls_failed: failed,
        imports: m.index_objects_received.get(),
        rejected: m.index_objects_rejected.get(),
        queries: m.queries.get(),
    }
}
