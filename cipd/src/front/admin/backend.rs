//! The daemon's answers to admin commands, read from and acted on through [`Node`].

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cip_proto::Dsi;
use hints::hint::AttrSpec;
use serde_json::{Value, json};

use super::protocol::{
    ExplainInfo, ExplainTerm, ImportProgress, ListenerInfo, OutboundInfo, PeerInfo, StatusInfo,
    TableRowInfo, TableSize,
};
use super::{AdminBackend, AdminError, AdminRequest};
use crate::node::{Node, display_addr};

/// Serves admin commands for one node.
#[derive(Debug, Clone)]
pub struct NodeAdmin {
    node: Arc<Node>,
}

impl NodeAdmin {
    /// An admin backend for `node`.
    pub fn new(node: Arc<Node>) -> Self {
        Self { node }
    }
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    // Serializing plain data structs into a Value cannot fail.
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `cipctl table`: the table's rows, filtered.
fn table(
    node: &Node,
    attr: Option<String>,
    peer: Option<String>,
    prefix: Option<String>,
    top: usize,
) -> Result<Value, AdminError> {
    let attr = attr
        .map(|a| AttrSpec::parse(&a))
        .transpose()
        .map_err(|e| AdminError::InvalidArgument(format!("--attr: {e}")))?;
    let peer = peer
        .map(|p| Dsi::new(&p))
        .transpose()
        .map_err(|e| AdminError::InvalidArgument(format!("--peer: {e}")))?;
    let rows: Vec<TableRowInfo> = node
        .table()
        .entries(
            attr.as_ref(),
            peer.as_ref(),
            prefix.as_deref().map(str::as_bytes),
            top,
        )
        .into_iter()
        .map(|r| TableRowInfo {
            attr: r.attribute.to_string(),
            value: lossy(&r.value),
            total: r.total,
            peers: r
                .peers
                .into_iter()
                .map(|(d, n)| (d.to_string(), n))
                .collect(),
        })
        .collect();
    Ok(json!({ "rows": rows }))
}

/// A route's DSIs, space-separated, from the peer to the dataset.
fn path_text(path: &[cip_proto::Dsi]) -> String {
    let parts: Vec<&str> = path.iter().map(cip_proto::Dsi::as_str).collect();
    parts.join(" ")
}

/// `cipctl explain`: why each referral ranks where it does.
fn explain(node: &Node, query: String, possible: bool) -> Result<Value, AdminError> {
    let explanations = node
        .explain(&query, possible)
        .map_err(|e| AdminError::InvalidArgument(e.to_string()))?;
    let referrals: Vec<ExplainInfo> = explanations
        .into_iter()
        .map(|e| {
            let via = match (e.via, e.path.is_empty()) {
                (Some(v), true) => format!(" (hint from peer {v})"),
                (Some(v), false) => format!(" (hint from peer {v}, path {})", path_text(&e.path)),
                (None, _) => String::new(),
            };
            ExplainInfo {
                rank: e.position,
                dsi: e.referral.dsi.to_string(),
                base_uris: e.referral.base_uris().to_vec(),
                count: e.referral.count,
                total: e.referral.total,
                definite: e.referral.definite,
                reason: format!("{}{via}", e.rank),
                terms: e
                    .terms
                    .into_iter()
                    .map(|t| ExplainTerm {
                        term: t.term,
                        count: t.count,
                        possible: !matches!(t.status, hints::rank::TermStatus::Definite),
                        matches: t
                            .matches
                            .into_iter()
                            .map(|m| (m.attribute.to_string(), lossy(&m.value), m.count))
                            .collect(),
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(json!({ "query": query, "referrals": referrals }))
}

impl AdminBackend for NodeAdmin {
    async fn handle(&self, request: AdminRequest) -> Result<Value, AdminError> {
        let node = &self.node;
        match request {
            AdminRequest::Status => Ok(to_value(&status(node))),
            AdminRequest::Peers => Ok(json!({ "peers": peers(node) })),
            AdminRequest::Table {
                attr,
                peer,
                prefix,
                top,
            } => table(node, attr, peer, prefix, top),
            AdminRequest::Explain { query, possible } => explain(node, query, possible),
            AdminRequest::Poll { peer } => {
                let (name, under_way) = node
                    .poll_now(&peer)
                    .map_err(|_| AdminError::UnknownPeer(peer))?;
                let message = match under_way {
                    None => format!("polling {name} now"),
                    Some(e) => format!(
                        "a poll of {name} is under way since {} ago ({}); another follows when it ends",
                        humantime::format_duration(Duration::from_secs(
                            e.since.elapsed().unwrap_or_default().as_secs()
                        )),
                        e.phase
                    ),
                };
                Ok(json!({ "message": message }))
            }
            AdminRequest::Reload => {
                let report = node
                    .reload()
                    .await
                    .map_err(|e| AdminError::Failed(e.to_string()))?;
                let mut message = String::from(if report.config_reloaded {
                    "configuration reloaded"
                } else {
                    "collections rescanned"
                });
                if !report.collections_reloaded.is_empty() {
                    message.push_str(&format!(
                        "; collections rebuilt: {}",
                        report.collections_reloaded.join(", ")
                    ));
                }
                if !report.needs_restart.is_empty() {
                    message.push_str(&format!(
                        "; needs a restart to take effect: {}",
                        report.needs_restart.join(", ")
                    ));
                }
                Ok(json!({
                    "message": message,
                    "config_reloaded": report.config_reloaded,
                    "collections_reloaded": report.collections_reloaded,
                    "needs_restart": report.needs_restart,
                }))
            }
            AdminRequest::DropPeer { dsi } => {
                let parsed = Dsi::new(&dsi)
                    .map_err(|e| AdminError::InvalidArgument(format!("dsi {dsi:?}: {e}")))?;
                let n = node.clone();
                let dropped = crate::sys::net::spawn_blocking(move || n.drop_dataset(&parsed))
                    .await
                    .map_err(|e| AdminError::Failed(format!("drop-peer failed: {e}")))?;
                if dropped {
                    Ok(json!({ "message": format!("dropped the hint of {dsi}") }))
                } else {
                    Err(AdminError::UnknownPeer(dsi))
                }
            }
            AdminRequest::LogLevel { level } => {
                let handle = node.log_handle().ok_or_else(|| {
                    AdminError::Failed("this daemon does not manage its own logging".into())
                })?;
                handle
                    .set_level(&level)
                    .map_err(|e| AdminError::InvalidArgument(e.to_string()))?;
                Ok(json!({ "message": format!("log level is now {}", handle.current()) }))
            }
            AdminRequest::Export => {
                let soif = node.current_outbound().await;
                Ok(json!({ "soif": lossy(&soif) }))
            }
            AdminRequest::PeerHint { peer } => {
                let e = node.received_hint(&peer).map_err(AdminError::Failed)?;
                Ok(json!({
                    "peer": e.peer,
                    "dsi": e.dsi.to_string(),
                    "type": e.index_type,
                    "received": unix(e.received),
                    "payload": lossy(&e.payload),
                }))
            }
            AdminRequest::Metrics => Ok(json!({ "text": node.render_metrics() })),
            AdminRequest::Shutdown => {
                node.shutdown();
                Ok(json!({ "message": "shutting down" }))
            }
        }
    }
}

fn status(node: &Node) -> StatusInfo {
    let identity = node.identity();
    let l = node.listeners();
    let mut listeners = Vec::new();
    let mut add = |kind: &str, address: String| {
        listeners.push(ListenerInfo {
            kind: kind.to_owned(),
            address,
        });
    };
    l.cip.iter().for_each(|a| add("cip", display_addr(*a)));
    l.cip_tls
        .iter()
        .for_each(|a| add("cip-tls", display_addr(*a)));
    l.whoispp
        .iter()
        .for_each(|a| add("whoispp", display_addr(*a)));
    l.http
        .iter()
        .for_each(|a| add("http", format!("http://{}", display_addr(*a))));
    l.https
        .iter()
        .for_each(|a| add("https", format!("https://{}", display_addr(*a))));
    if let Some(p) = &l.admin {
        add("admin", p.display().to_string());
    }
    let stats = node.table().stats();
    let outbound = node.outbound().stats();
    let (expected, imported) = node.import_progress();
    StatusInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        uptime_seconds: node.uptime().as_secs(),
        dsi: identity.dsi.to_string(),
        base_uris: identity.base_uris.clone(),
        listeners,
        local_objects: node.local_objects_count(),
        peers: node.config().peers.len(),
        table: TableSize {
            peers: stats.peers as u64,
            values: stats.distinct_values as u64,
            entries: stats.entries as u64,
            bytes: stats.approx_bytes as u64,
        },
        import: ImportProgress { expected, imported },
        starting: node.startup().snapshot(),
        outbound: OutboundInfo {
            table_generation: node.table().generation(),
            built_from: outbound.table_generation,
            generation: outbound.generation,
            builds: outbound.builds,
            last_build_seconds: outbound.last_build.as_secs_f64(),
            lag_seconds: outbound.lag.as_secs_f64(),
            eager: crate::pipeline::outbound::eager(&node.config()),
        },
    }
}

/// Configured peers with their state and hint, then datasets known only from the table
/// (hints forwarded by a peer for datasets behind it, or restored from the spool).
fn peers(node: &Node) -> Vec<PeerInfo> {
    let now = SystemTime::now();
    let summaries = node.table().peers();
    let mut shown = std::collections::HashSet::new();
    let mut out = Vec::new();
    for p in node.peer_states() {
        let summary = p
            .dsi
            .as_deref()
            .and_then(|d| summaries.iter().find(|s| s.dsi.as_str() == d));
        if let Some(s) = summary {
            shown.insert(s.dsi.clone());
        }
        out.push(PeerInfo {
            name: p.name.clone(),
            address: Some(p.address.clone()).filter(|a| !a.is_empty()),
            role: p.roles.join(","),
            dsi: p.dsi.clone(),
            last_poll: p.last_attempt.map(unix),
            last_success: p.last_success.map(unix),
            last_error: p.last_error.clone(),
            hint_age_seconds: summary
                .map(|s| s.received)
                .or(p.hint_received)
                .and_then(|r| now.duration_since(r).ok())
                .map(|d| d.as_secs()),
            expires: summary.and_then(|s| s.expires).map(unix),
            objects: summary.map(|s| s.total).or(p.hint_objects),
            values: summary.map(|s| s.distinct_values as u64),
            signature: node.trust().describe(&p.name),
            failures: p.consecutive_failures,
            next_poll: p.next_attempt.map(unix),
            index_type: p.index_type.clone(),
            damped_until: p.damped_until.map(unix),
        });
    }
    for s in summaries.iter().filter(|s| !shown.contains(&s.dsi)) {
        out.push(PeerInfo {
            name: s.dsi.to_string(),
            address: None,
            role: match (&s.via, s.path.is_empty()) {
                (Some(v), true) => format!("learned via {v}"),
                // A dataset passed on with its route (PROTOCOL.md, "Routes in a mesh with
                // cycles"): the path it came by.
                (Some(v), false) => format!("route via {v}: {}", path_text(&s.path)),
                (None, _) => "learned".to_owned(),
            },
            dsi: Some(s.dsi.to_string()),
            last_poll: None,
            last_success: Some(unix(s.received)),
            last_error: None,
            hint_age_seconds: now.duration_since(s.received).ok().map(|d| d.as_secs()),
            expires: s.expires.map(unix),
            objects: Some(s.total),
            values: Some(s.distinct_values as u64),
            // Its counts came inside the forwarding peer's (aggregate) hint.
            signature: match &s.via {
                Some(v) => format!("as {v}'s hint"),
                None => "unsigned".to_owned(),
            },
            failures: 0,
            next_poll: None,
            index_type: None,
            damped_until: None,
        });
    }
    out
}
