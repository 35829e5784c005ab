//! The index-object types this node speaks, by name (RFC 2652 §2.1.1): [`IndexKind`].
//! What the node does with each lives in [`crate::pipeline::index_types`].

use cip_proto::cip::IndexType;

/// The index types this node speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexKind {
    /// `application/index.obj.HARVEST-SOIF-1`: a CIP-HINT SOIF object (RFC 2655).
    Soif,
    /// `application/index.obj.tagged`: a tagged index object (RFC 2654).
    Tagged,
}

impl IndexKind {
    /// Every kind, in the order a peer of unknown type is tried.
    pub const ALL: [Self; 2] = [Self::Soif, Self::Tagged];

    /// The media type's facet.
    pub fn name(self) -> &'static str {
        match self {
            Self::Soif => "HARVEST-SOIF-1",
            Self::Tagged => "tagged",
        }
    }

    /// The kind a configuration or facet names, ignoring case. `x-tagged-index-1` (the
    /// version tag) and `cip-index-object` (RFC 2654 §4.2's stale name, digest A16) are
    /// read as `tagged`.
    pub fn from_name(name: &str) -> Option<Self> {
        let n = name.trim();
        let n = n.strip_prefix("application/index.obj.").unwrap_or(n);
        if n.eq_ignore_ascii_case("HARVEST-SOIF-1") {
            Some(Self::Soif)
        } else if ["tagged", "x-tagged-index-1", "cip-index-object"]
            .iter()
            .any(|t| t.eq_ignore_ascii_case(n))
        {
            Some(Self::Tagged)
        } else {
            None
        }
    }

    /// The kind of an object's type.
    pub fn of(t: &IndexType) -> Option<Self> {
        Self::from_name(t.as_str())
    }

    /// The type to put on objects and polls.
    pub fn index_type(self) -> IndexType {
        match self {
            Self::Soif => IndexType::harvest_soif(),
            Self::Tagged => IndexType::tagged(),
        }
    }
}

impl std::fmt::Display for IndexKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
