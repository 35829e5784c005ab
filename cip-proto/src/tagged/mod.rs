//! The tagged index object of RFC 2654 (`application/index.obj.tagged`,
//! `x-tagged-index-1`): typed model, parser, canonical writer, incremental updates.
//!
//! An object is a header (`version`, `updatetype`, `thisupdate`, `lastupdate`,
//! `contextsize`), an IO-Schema (the indexed attributes and how their values were tokenized)
//! and either the full Index-Info of a total update or the Add, Delete and Update blocks of
//! an incremental one. Each index line gives an attribute, a value and the tags of the records
//! holding it (`cn: 1,3-5/Jensen`, continued by `-*/Smith`).
//!
//! * [`parse`] / [`parse_with_limits`] read an object, tolerantly (RFC 2654 §4.3 plus digest
//!   A17: unordered headers, blank lines, CRLF or LF, keywords in any case), with a line number
//!   in every error and every input bounded by [`TaggedLimits`].
//! * [`write()`] writes the canonical form, which [`parse`] reads back to an equal value.
//! * [`TaggedIndex::apply`] applies an incremental update to a stored total (RFC 2654 §4.4):
//!   `lastupdate` must equal the stored `thisupdate` (digest A15), and the three consistency
//!   bases (complete record, tag based, unique-ID based) each have their own meaning of the
//!   blocks; see [`apply`](TaggedIndex::apply) and `PROTOCOL.md`.
//! * [`TaggedIndex::value_counts`] and [`TaggedIndex::from_records`] convert to and from the
//!   daemon's per-template value counts and records.
//!
//! **Templates.** RFC 2654 has none: its schema and index lines name attributes only. The
//! Whois++ convention (RFC 1913 templates, ROADS's CIPv3 code) carries a record's template as
//! the value of its [`TEMPLATE_ATTRIBUTE`] (`Template-Type`) index line, and this module does
//! the same: [`TaggedIndex::from_records`] writes one, [`TaggedIndex::value_counts`] reads it.
//! Records without one fall under the template `""`.

mod apply;
mod info;
mod parse;
mod records;
mod tags;
mod write;

#[cfg(test)]
mod tests;

pub use apply::{ApplyError, ApplyOptions};
pub use info::{
    AttributeValues, DEFINED_HEADERS, EntryError, HeaderField, IndexInfo, Schema, TokenType,
};
pub use parse::{TaggedError, TaggedErrorKind, TaggedLimits, parse, parse_with_limits};
pub use records::{Record, RecordError, ValueCounts};
pub use tags::{TagListError, TagSet};
pub use write::{write, write_for_gatherers};

use std::fmt;

/// The version string of this index type (`version: x-tagged-index-1`).
pub const VERSION: &str = "x-tagged-index-1";

/// The media type (RFC 2654 §5 examples; §4.2's `application/cip-index-object` is a stale
/// draft name, digest A16).
pub const MEDIA_TYPE: &str = "application/index.obj.tagged";

/// The attribute whose value names a record's template (the Whois++ `Template-Type`);
/// matched ignoring ASCII case.
pub const TEMPLATE_ATTRIBUTE: &str = "Template-Type";

/// A tagged index object: one total or incremental update.
///
/// Every part is validated on construction ([`IndexInfo`], [`Schema`], [`HeaderField`],
/// [`TagSet`]), so any value can be written and parses back equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaggedIndex {
    /// `thisupdate`: when the supplier built this update, in seconds since 1970.
    pub this_update: u64,
    /// `contextsize`: the approximate number of entries in the subtree, for statistics.
    pub context_size: Option<u64>,
    /// Header lines the RFC does not define, in order.
    pub extra_headers: Vec<HeaderField>,
    /// The IO-Schema.
    pub schema: Schema,
    /// What the object carries, with its `updatetype` and `lastupdate`.
    pub body: Body,
}

/// The body of an object, with the header fields that depend on its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// `updatetype: total` and a full Index-Info.
    Total {
        /// `lastupdate`, which a total may carry (RFC 2654 §4.3 makes it optional).
        last_update: Option<u64>,
        /// The index lines.
        info: IndexInfo,
    },
    /// `updatetype: incremental [mode]` and its blocks, in order.
    Incremental {
        /// The consistency base the header names; `None` for a bare `incremental`, when the
        /// out-of-band agreement decides ([`ApplyOptions::consistency`]).
        mode: Option<IncrementalMode>,
        /// `lastupdate`: the `thisupdate` of the update this one follows (required).
        last_update: u64,
        /// The blocks, to be applied in this order (RFC 2654 §4.3).
        blocks: Vec<Block>,
    },
}

/// The consistency base of an incremental update (RFC 2654 §4.1 `consistencybase`, §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IncrementalMode {
    /// `complete` / `completeRecord`: every change lists all of a record's tokens; tags are
    /// local to the block.
    CompleteRecord,
    /// `tag` / `tagBased`: tags stay the same from the last total on.
    TagBased,
    /// `unique` / `uniqueIDBased`: records are named by a unique attribute (such as `dn`).
    UniqueIdBased,
}

impl IncrementalMode {
    /// Every mode.
    pub const ALL: [Self; 3] = [Self::CompleteRecord, Self::TagBased, Self::UniqueIdBased];

    /// The spelling the writer uses after `incremental`: the BNF's `tagbased` and
    /// `uniqueIDbased`, and §4.4's `completeRecord` (the BNF has no name for it).
    pub fn name(self) -> &'static str {
        match self {
            Self::CompleteRecord => "completeRecord",
            Self::TagBased => "tagbased",
            Self::UniqueIdBased => "uniqueIDbased",
        }
    }

    /// The mode named `s`, ignoring ASCII case, in any spelling RFC 2654 uses (digest A17):
    /// `complete`, `completeRecord`, `tag`, `tagBased`, `unique`, `uniqueIDBased`.
    pub fn from_name(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "complete" | "completerecord" => Some(Self::CompleteRecord),
            "tag" | "tagbased" => Some(Self::TagBased),
            "unique" | "uniqueidbased" => Some(Self::UniqueIdBased),
            _ => None,
        }
    }
}

impl fmt::Display for IncrementalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One block of an incremental update (RFC 2654 §4.3 `add-block`, `delete-block`,
/// `update-block`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    /// `BEGIN Add Block`: records never sent before.
    Add(IndexInfo),
    /// `BEGIN Delete Block`: records removed.
    Delete(IndexInfo),
    /// `BEGIN Update Block`: changed records, old tokens then new ones. Several `Old` or
    /// `New` sub-blocks are read as one of each: the block is one tag namespace.
    Update {
        /// The `BEGIN Old` lines (may be empty: the grammar allows no `Old`).
        old: IndexInfo,
        /// The `BEGIN New` lines.
        new: IndexInfo,
    },
}

impl Block {
    /// The block's name in messages (`Add`, `Delete`, `Update`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Add(_) => "Add",
            Self::Delete(_) => "Delete",
            Self::Update { .. } => "Update",
        }
    }
}

impl TaggedIndex {
    /// An empty total update built at `this_update`.
    pub fn total(this_update: u64) -> Self {
        Self {
            this_update,
            context_size: None,
            extra_headers: Vec::new(),
            schema: Schema::new(),
            body: Body::Total {
                last_update: None,
                info: IndexInfo::new(),
            },
        }
    }

    /// True for `updatetype: total`.
    pub fn is_total(&self) -> bool {
        matches!(self.body, Body::Total { .. })
    }

    /// `lastupdate`, if the header has one.
    pub fn last_update(&self) -> Option<u64> {
        match self.body {
            Body::Total { last_update, .. } => last_update,
            Body::Incremental { last_update, .. } => Some(last_update),
        }
    }

    /// The Index-Info of a total update.
    pub fn info(&self) -> Option<&IndexInfo> {
        match &self.body {
            Body::Total { info, .. } => Some(info),
            Body::Incremental { .. } => None,
        }
    }

    /// The canonical bytes; see [`write()`].
    pub fn to_bytes(&self) -> Vec<u8> {
        write(self)
    }
}
