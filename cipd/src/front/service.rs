//! The CIP service: how this node answers requests on its stream listeners.
//!
//! * `noop` → 200 (RFC 2652 §2.3.1).
//! * `poll` for `tagged` (RFC 2654) → 201 with a tagged index object of the local
//!   collections (legacy Whois++ gatherers poll so);
//! * `poll` for `HARVEST-SOIF-1` → 201 with our out-bound hint in a `multipart/mixed`
//!   result (RFC 2652 §2.4), leaving out the poller's own data when it names itself with
//!   `poller-dsi` or is recognised by address (digest A21); other types → 200, "no index of
//!   that type" (RFC 2652 §2.3.2). Anyone may poll (RFC 2652 §4.2 encourages answering
//!   anonymous polls).
//!   A poll with `separate` (a cipd node) gets the aggregate without the datasets it
//!   names, then each of them as an object of its own with its `Path`; with `have` naming
//!   the version it holds, `200 unchanged` when nothing changed.
//! * `datachanged` from a peer we poll → 200 and an immediate poll of it (digest A9); from a
//!   peer that pushes to us → 200 (the object follows).
//! * A pushed index object from a peer we poll or that pushes to us → validated, stored,
//!   200; refused with the code [`crate::pipeline::inbound::Rejection::code`] gives.
//! * `datachanged` or a push from anyone else → 530: RFC 2652 §4.2 requires a 530-series
//!   code for refusals on authentication grounds, and an unknown peer is exactly that.
//! * Vendor requests → 501.

use std::sync::Arc;

use cip_proto::Dsi;
use cip_proto::cip::{PollResult, Request, ResponseCode};

use crate::model::config::PeerRole;
use crate::node::Node;
use crate::store::routes::{parse_version, version_text};
use crate::transport::{
    APART_PARAM, BASE_URI_PARAM, DELTA_PARAM, HAVE_PARAM, POLLER_DSI_PARAM, SEPARATE_PARAM,
    UNCHANGED, VERSION,
};
use crate::transport::{PeerContext, Reply, RequestHandler};

/// The [`RequestHandler`] of a node's CIP listeners.
#[derive(Debug, Clone)]
pub struct CipService {
    node: Arc<Node>,
}

impl CipService {
    /// A service answering for `node`.
    pub fn new(node: Arc<Node>) -> Self {
        Self { node }
    }
}

/// The datasets a poll's parameter `name` lists (`separate`, `apart`: DSIs separated by
/// spaces; invalid ones skipped, at most `limits.max_provenance`), `None` when the poll
/// has no such parameter.
fn dsi_list_param(
    params: &[(String, String)],
    name: &str,
    node: &Node,
) -> Option<std::collections::BTreeSet<Dsi>> {
    let (_, v) = params.iter().find(|(n, _)| n == name)?;
    let max = node.config().limits.table.max_provenance;
    Some(
        v.split_ascii_whitespace()
            .filter_map(|d| Dsi::new(d).ok())
            .take(max)
            .collect(),
    )
}

fn unknown_peer(node: &Node, what: &str, peer: &PeerContext) -> Reply {
    tracing::warn!(remote = %peer.remote, request = what, "refused: not a configured peer");
    node.update_status(|s| s.unknown_peer_refusals += 1);
    Reply::status(
        ResponseCode::SignatureRequired,
        format!("{what} accepted from configured peers only"),
    )
}

impl RequestHandler for CipService {
    async fn handle(&self, request: Request, peer: &PeerContext) -> Reply {
        let node = &self.node;
        match request {
            Request::Noop => Reply::ok(),
            Request::Poll {
                index_type, params, ..
            } => {
                match crate::model::index_kind::IndexKind::of(&index_type) {
                    Some(crate::model::index_kind::IndexKind::Soif) => {}
                    Some(crate::model::index_kind::IndexKind::Tagged) => {
                        // Legacy Whois++ gatherers poll for tagged objects: ours describe
                        // the local collections, a record per object.
                        return match crate::pipeline::tagged::local_object(
                            node.config(),
                            node.local(),
                            &node.identity(),
                        )
                        .await
                        {
                            Ok(obj) => Reply::result(PollResult { objects: vec![obj] }),
                            Err(e) => Reply::status(
                                ResponseCode::TemporarilyUnable,
                                format!("cannot build the tagged index: {e}"),
                            ),
                        };
                    }
                    None => {
                        return Reply::status(
                            ResponseCode::Ok,
                            format!("no index of type {}", index_type.as_str()),
                        );
                    }
                }
                let named = params
                    .iter()
                    .find(|(n, _)| n == POLLER_DSI_PARAM)
                    .and_then(|(_, v)| Dsi::new(v.trim()).ok());
                let poller = named.or_else(|| {
                    node.identify_peer(peer.remote.ip(), None, &[PeerRole::Poller, PeerRole::Push])
                        .and_then(|name| node.peer_dsi(&name))
                });
                tracing::debug!(remote = %peer.remote, poller = ?poller.as_ref().map(Dsi::as_str), "poll");
                // Pollers that name where they are queried (ROADS and cipd do) are where a
                // search widens to (RFC 1913's POLLED-BY; PROTOCOL.md, "Search").
                if let Some((_, uris)) = params.iter().find(|(n, _)| n == BASE_URI_PARAM) {
                    node.note_poller(peer.remote.ip(), poller.as_ref(), uris);
                }
                // A poller that asks datasets apart (a cipd node) gets its own answer, and
                // only when it changed; any other gets the aggregate (PROTOCOL.md, "Routes
                // in a mesh with cycles").
                let Some(separate) = dsi_list_param(&params, SEPARATE_PARAM, node) else {
                    return Reply::result(PollResult {
                        objects: vec![node.outbound_object(poller.as_ref()).await],
                    });
                };
                let apart = dsi_list_param(&params, APART_PARAM, node).unwrap_or_default();
                if let Some(p) = &poller {
                    // What a poller asks apart shapes what we ask of our peers: only a
                    // configured poller's request counts.
                    let configured = node
                        .identify_peer(peer.remote.ip(), Some(p), &[PeerRole::Poller])
                        .is_some();
                    if configured {
                        node.note_separate(p, separate.clone(), apart.clone());
                    }
                }
                // Marked in progress until its version is noted: the notifier waits for
                // it before deciding whether this poller needs a `datachanged`.
                let answering = poller.as_ref().map(|p| node.routes().answering(p));
                let (mut objects, version, first_digest) = node
                    .poll_answer(poller.as_ref(), &separate, &apart, true)
                    .await;
                let have = params
                    .iter()
                    .find(|(n, _)| n == HAVE_PARAM)
                    .and_then(|(_, v)| parse_version(v));
                let own = node.identity().dsi.clone();
                let first = objects
                    .first()
                    .filter(|o| o.dsi == own)
                    .map(|o| o.payload.clone())
                    .zip(first_digest);
                // Where a delta starts: the hint of the answer this poller holds (its
                // `have`), if we remember that answer, and the one we last sent it.
                let base = poller
                    .as_ref()
                    .zip(have)
                    .and_then(|(p, have)| node.routes().delta_base(p, have));
                if let Some(p) = &poller {
                    node.routes().note_sent(p, version, first.clone());
                }
                drop(answering);
                if have == Some(version) {
                    return Reply::status(
                        ResponseCode::Ok,
                        format!("{UNCHANGED} {}", version_text(version)),
                    );
                }
                let asks_delta = params.iter().any(|(n, v)| n == DELTA_PARAM && v == "yes");
                if let (true, Some((base, last)), Some((whole, to))) = (asks_delta, base, first)
                    && let Some(delta) = node.delta_for(base, last, whole, to).await
                {
                    objects[0].payload = delta;
                }
                Reply {
                    code: ResponseCode::OkOutputFollows,
                    comment: Some(format!("{VERSION} {}", version_text(version))),
                    result: Some(PollResult { objects }),
                }
            }
            Request::DataChanged { dsi, .. } => {
                let roles = [PeerRole::Poll, PeerRole::Pusher];
                let Some(name) = node.identify_peer(peer.remote.ip(), Some(&dsi), &roles) else {
                    return unknown_peer(node, "datachanged", peer);
                };
                node.update_status(|s| s.datachanged_received += 1);
                let polls = node
                    .config()
                    .peer(&name)
                    .is_some_and(|p| p.has_role(PeerRole::Poll));
                if polls && !node.hold_if_damped(&name) {
                    node.poll_notifier(&name).notify_one();
                    tracing::info!(peer = %name, "datachanged: polling now");
                }
                Reply::ok()
            }
            Request::IndexObject(obj) => {
                let roles = [PeerRole::Poll, PeerRole::Pusher];
                let Some(name) = node.identify_peer(peer.remote.ip(), Some(&obj.dsi), &roles)
                else {
                    node.update_status(|s| s.hints_rejected += 1);
                    return unknown_peer(node, "index objects", peer);
                };
                match node.accept_index(&name, obj).await {
                    Ok(()) => {
                        node.update_peer(&name, |s| {
                            s.last_success = Some(std::time::SystemTime::now())
                        });
                        Reply::ok()
                    }
                    Err(e) => Reply::status(e.code(), e.to_string()),
                }
            }
            Request::Vendor { subtype, .. } => Reply::status(
                ResponseCode::UnknownRequest,
                format!("vendor request {subtype:?} not supported"),
            ),
        }
    }
}
