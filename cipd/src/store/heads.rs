//! The heads of peers' hints the node keeps so that their deltas apply without the hints
//! themselves (PROTOCOL.md "Applied by the head"; the node's side is `node/deltas.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cip_proto::Dsi;
use hints::delta::HintHead;

use crate::sys::lock;

/// A peer's hint as a delta by the head needs it.
#[derive(Debug)]
pub struct HeldHead {
    /// Its head: URL, header, digest.
    pub head: HintHead,
    /// The digest the import queue holds it under: the delta applies in place only while
    /// the table still holds exactly this hint.
    pub imported: u64,
}

/// The heads kept, by (peer, DSI): one per dataset a polled peer sends, the size of a
/// header each.
#[derive(Debug, Default)]
pub struct Heads {
    by_peer: Mutex<HashMap<(String, Dsi), Arc<HeldHead>>>,
}

impl Heads {
    /// The head kept for `peer`'s `dsi`, if any.
    pub fn get(&self, peer: &str, dsi: &Dsi) -> Option<Arc<HeldHead>> {
        lock(&self.by_peer)
            .get(&(peer.to_owned(), dsi.clone()))
            .cloned()
    }

    /// Keeps `head` for `peer`'s `dsi`, in place of any before.
    pub fn keep(&self, peer: &str, dsi: &Dsi, head: HeldHead) {
        lock(&self.by_peer).insert((peer.to_owned(), dsi.clone()), Arc::new(head));
    }

    /// Forgets the head of `peer`'s `dsi`.
    pub fn forget(&self, peer: &str, dsi: &Dsi) {
        lock(&self.by_peer).remove(&(peer.to_owned(), dsi.clone()));
    }

    /// Forgets every head of `dsi`, whoever sent it.
    pub fn forget_dataset(&self, dsi: &Dsi) {
        lock(&self.by_peer).retain(|(_, d), _| d != dsi);
    }
}
