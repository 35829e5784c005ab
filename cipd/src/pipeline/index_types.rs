//! Index-object types by name (RFC 2652 §2.1.1): the registry of what this node does with
//! each type it speaks — `HARVEST-SOIF-1` (CIP-HINT, RFC 2655) and `tagged` (RFC 2654).
//!
//! For every type: how an in-bound payload becomes routing-table entries (a [`hints::hint::CipHint`]),
//! what is kept in the spool (for tagged incremental updates: the applied total), and what
//! this node answers a poll of that type with.

use bytes::Bytes;

use cip_proto::cip::TypeSpelling;

pub use crate::model::index_kind::IndexKind;
pub use crate::pipeline::inbound::{Converted, Rejection, parse_hint};

/// Converts an in-bound payload of `kind` (see [`Converted`]); `previous` is the payload
/// stored for the dataset, which a tagged incremental update applies to.
///
/// # Errors
/// [`Rejection::Invalid`] when the payload does not parse or an update does not apply.
pub fn convert(
    kind: IndexKind,
    payload: &Bytes,
    previous: Option<&Bytes>,
    soif: cip_proto::soif::Limits,
) -> Result<Converted, Rejection> {
    match kind {
        IndexKind::Soif => Ok(Converted {
            hint: parse_hint(payload, soif)?,
            stored: payload.clone(),
        }),
        IndexKind::Tagged => crate::pipeline::tagged::convert(payload, previous),
    }
}

/// What the registry remembers: the tagged totals held per dataset (incremental updates
/// apply to them), and the index type learned for peers configured without one.
#[derive(Debug, Default)]
pub struct State {
    totals: std::sync::Mutex<std::collections::HashMap<cip_proto::Dsi, Bytes>>,
    learned: std::sync::Mutex<std::collections::HashMap<String, IndexKind>>,
    spellings: std::sync::Mutex<std::collections::HashMap<String, TypeSpelling>>,
}

impl State {
    /// The total stored for `dsi`, for a tagged dataset.
    pub fn stored(&self, dsi: &cip_proto::Dsi) -> Option<Bytes> {
        crate::sys::lock(&self.totals).get(dsi).cloned()
    }

    /// Records what was stored for `dsi` (kept only for tagged objects: SOIF hints are
    /// always totals).
    pub fn note_stored(&self, facet: &str, dsi: &cip_proto::Dsi, stored: &Bytes) {
        if IndexKind::from_name(facet) == Some(IndexKind::Tagged) {
            crate::sys::lock(&self.totals).insert(dsi.clone(), stored.clone());
        }
    }

    /// The kind learned for `peer`.
    pub fn learned(&self, peer: &str) -> Option<IndexKind> {
        crate::sys::lock(&self.learned).get(peer).copied()
    }

    /// Records the kind `peer` answers with.
    pub fn learn(&self, peer: &str, kind: IndexKind) {
        let mut l = crate::sys::lock(&self.learned);
        if l.insert(peer.to_owned(), kind) != Some(kind) {
            tracing::info!(%peer, index_type = %kind, "peer's index type learned");
        }
    }

    /// How `peer` wants the `type` of a tagged poll spelled, once learned.
    pub fn spelling(&self, peer: &str) -> Option<TypeSpelling> {
        crate::sys::lock(&self.spellings).get(peer).copied()
    }

    /// Records the spelling `peer` answered a tagged poll to (ROADS' `wppd` knows only the
    /// media type; RFC 2652 peers the facet).
    pub fn learn_spelling(&self, peer: &str, spelling: TypeSpelling) {
        let mut l = crate::sys::lock(&self.spellings);
        if l.insert(peer.to_owned(), spelling) != Some(spelling) {
            tracing::info!(%peer, ?spelling, "peer's poll type spelling learned");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            IndexKind::from_name("harvest-soif-1"),
            Some(IndexKind::Soif)
        );
        assert_eq!(
            IndexKind::from_name("application/index.obj.tagged"),
            Some(IndexKind::Tagged)
        );
        assert_eq!(
            IndexKind::from_name("CIP-Index-Object"),
            Some(IndexKind::Tagged)
        );
        assert_eq!(IndexKind::from_name("centroid"), None);
        for k in IndexKind::ALL {
            assert_eq!(IndexKind::of(&k.index_type()), Some(k));
        }
    }
}
