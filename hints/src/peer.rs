//! What the node knows about a peer's hint besides its payload: shared by the routing
//! table ([`crate::table`]), the referrals it makes ([`crate::rank`]) and its answers
//! ([`crate::table::answer`]).

use std::time::SystemTime;

use cip_proto::Dsi;

/// What the node knows about a peer hint besides its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerMeta {
    /// The dataset's DSI (the index object's `dsi` parameter).
    pub dsi: Dsi,
    /// Its base-uri(s), for referrals.
    pub base_uris: Vec<String>,
    /// DSI-description, when the peer sent one.
    pub dsi_description: Option<String>,
    /// When the hint arrived.
    pub received: SystemTime,
    /// When it stops counting, if ever.
    pub expires: Option<SystemTime>,
    /// The configured peer it came from.
    pub via: Option<String>,
    /// The DSIs it travelled through, from the peer that sent it to the dataset it
    /// describes (its `Path` attribute); empty for a peer's own hint. Its length is the
    /// route's length: the shortest route to a dataset is the one kept.
    pub path: Vec<Dsi>,
}
