//! The table's configuration and import limits, what a hint is charged against the
//! memory budgets, and what an import did or why it was refused.

use cip_proto::Dsi;
use cip_proto::dsi::DsiError;

use crate::substring::SummaryConfig;

/// Default for [`TableLimits::max_peers`].
pub const DEFAULT_MAX_PEERS: usize = 10_000;
/// Default for [`TableLimits::max_entries_per_hint`].
pub const DEFAULT_MAX_ENTRIES_PER_HINT: usize = 20_000_000;
/// Default for [`TableLimits::max_value_len`].
pub const DEFAULT_MAX_VALUE_LEN: usize = 4096;
/// Default for [`TableLimits::max_provenance`]: an aggregate names every dataset below it,
/// so a node of a mesh of hundreds of thousands of datasets must take lists this long (the
/// DSIs are charged against the memory budgets, [`super::budget_bytes`]).
pub const DEFAULT_MAX_PROVENANCE: usize = 65_536;
/// Default for [`TableLimits::max_attributes`].
pub const DEFAULT_MAX_ATTRIBUTES: usize = 65_536;

/// Default for [`TableLimits::max_total_objects`]: a trillion objects, far above any real
/// collection or aggregate, far below the sums that would crowd out honest peers.
pub const DEFAULT_MAX_TOTAL_OBJECTS: u64 = 1_000_000_000_000;

/// Default for [`TableLimits::max_peer_bytes`]: 1 GiB, about 12 million short values.
pub const DEFAULT_MAX_PEER_BYTES: u64 = 1 << 30;
/// Default for [`TableLimits::max_table_bytes`]: 8 GiB.
pub const DEFAULT_MAX_TABLE_BYTES: u64 = 8 << 30;
/// What one weightlist entry is charged against the memory budgets besides its value's
/// bytes: its share of a segment's offsets, hash slots and postings when no other peer
/// holds the value (docs/sizing.md: 8 bytes per entry plus 65 per distinct value).
pub const ENTRY_BUDGET_BYTES: u64 = 73;

/// Bytes a provenance DSI is charged beside its own: its place in the peer's list.
pub const PROVENANCE_BUDGET_BYTES: u64 = 32;

/// What a hint's provenance list is charged ([`super::budget_bytes`]).
pub(crate) fn provenance_charge(provenance: &[cip_proto::Dsi]) -> u64 {
    provenance
        .iter()
        .map(|d| d.as_str().len() as u64 + PROVENANCE_BUDGET_BYTES)
        .sum()
}

/// What one entry whose value has `len` bytes is charged ([`super::budget_bytes`]).
pub(crate) fn entry_charge(len: usize) -> u64 {
    len as u64 + ENTRY_BUDGET_BYTES
}

/// Bounds on what the table accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableLimits {
    /// Most peers (DSIs) in the table.
    pub max_peers: usize,
    /// Most weightlist entries in one hint.
    pub max_entries_per_hint: usize,
    /// Longest weightlist value, in bytes.
    pub max_value_len: usize,
    /// Most provenance DSIs on one hint.
    pub max_provenance: usize,
    /// Most distinct `Template:Attribute` keys in the table.
    pub max_attributes: usize,
    /// Largest `Total-Object-Count` a hint may claim; a larger one cannot be true and would
    /// outrank every honest peer, so the hint is refused.
    pub max_total_objects: u64,
    /// Largest memory charge ([`super::budget_bytes`]) of one peer's hint.
    pub max_peer_bytes: u64,
    /// Largest memory charge of all hints in the table together.
    pub max_table_bytes: u64,
}

impl Default for TableLimits {
    fn default() -> Self {
        Self {
            max_peers: DEFAULT_MAX_PEERS,
            max_entries_per_hint: DEFAULT_MAX_ENTRIES_PER_HINT,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            max_provenance: DEFAULT_MAX_PROVENANCE,
            max_attributes: DEFAULT_MAX_ATTRIBUTES,
            max_total_objects: DEFAULT_MAX_TOTAL_OBJECTS,
            max_peer_bytes: DEFAULT_MAX_PEER_BYTES,
            max_table_bytes: DEFAULT_MAX_TABLE_BYTES,
        }
    }
}

/// Table configuration.
#[derive(Debug, Clone, Default)]
pub struct TableConfig {
    /// This node's DSI: hints from it, or derived from it, are refused.
    pub node: Option<Dsi>,
    /// Bounds.
    pub limits: TableLimits,
    /// Summaries of broad substrings in big segments.
    pub summaries: SummaryConfig,
    /// Threads that index a big batch of hints ([`super::RoutingTable::replace_all`]); at
    /// 1, big merges stay on one thread too (else they take two). 0 (the default): one per
    /// CPU, at most four.
    pub index_threads: usize,
    /// Run first on each thread the table starts for work nobody waits on (summaries
    /// built in the background): the daemon lowers the thread's CPU priority there.
    pub background_start: Option<ThreadStart>,
}

/// What a background thread of the table runs first ([`TableConfig::background_start`]).
#[derive(Clone)]
pub struct ThreadStart(pub std::sync::Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for ThreadStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ThreadStart(..)")
    }
}

impl TableConfig {
    /// The threads [`TableConfig::index_threads`] asks for, 0 resolved.
    pub fn index_threads(&self) -> usize {
        match self.index_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            n => n,
        }
    }
}

/// What [`RoutingTable::replace`](super::RoutingTable::replace) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplaceOutcome {
    /// True when the peer had a hint that this one replaced.
    pub replaced: bool,
    /// Distinct values in the new hint.
    pub distinct_values: usize,
    /// `(attribute, value)` entries in the new hint.
    pub entries: usize,
}

/// Why a hint was not imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The hint claims this node's own DSI.
    #[error("hint carries this node's own dsi {dsi}")]
    OwnDsi {
        /// The DSI.
        dsi: Dsi,
    },
    /// The hint was derived from this node's own out-bound hint.
    #[error("hint from {peer} lists this node ({node}) in its provenance: a routing loop")]
    Loop {
        /// The peer's DSI.
        peer: Dsi,
        /// This node's DSI.
        node: Dsi,
    },
    /// A provenance value is not a DSI.
    #[error("provenance value {value:?} is not a dsi: {source}")]
    BadProvenance {
        /// The value.
        value: String,
        /// Why.
        source: DsiError,
    },
    /// A `Path` that cannot be a route here: not DSIs, empty, naming a DSI twice, through
    /// this node, or longer than allowed.
    #[error("path {value:?} refused: {reason}")]
    BadPath {
        /// The path as written.
        value: String,
        /// Why.
        reason: String,
    },
    /// Too many provenance DSIs.
    #[error("hint lists {count} provenance dsis, the limit is {max}")]
    TooManyProvenance {
        /// How many.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A value longer than the limit.
    #[error("value {index} of weightlist {attribute} is {len} bytes long, the limit is {max}")]
    ValueTooLong {
        /// The weightlist's attribute, as spelled.
        attribute: String,
        /// Position of the value in its weightlist.
        index: usize,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// More entries than the limit.
    #[error("hint has {count} weightlist entries, the limit is {max}")]
    TooManyEntries {
        /// How many.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The table holds the most peers it may.
    #[error("routing table is full ({max} peers)")]
    TooManyPeers {
        /// The limit.
        max: usize,
    },
    /// The table holds the most attributes it may.
    #[error("routing table holds the limit of {max} attributes")]
    TooManyAttributes {
        /// The limit.
        max: usize,
    },
    /// A delta that cannot be applied in place ([`RoutingTable::apply_delta`](super::RoutingTable::apply_delta)): import
    /// the new hint whole.
    #[error("delta not applicable in place: {0}")]
    NeedsWhole(String),
    /// The hint's index would exceed 32-bit offsets.
    #[error("hint too large to index")]
    TooLarge,
    /// The hint alone is charged more than [`TableLimits::max_peer_bytes`].
    #[error(
        "hint needs {bytes} bytes of table memory, above the per-peer budget of {max}          (limits.max_peer_table_bytes)"
    )]
    OverPeerBudget {
        /// Its charge ([`budget_bytes`](super::budget_bytes)).
        bytes: u64,
        /// The budget.
        max: u64,
    },
    /// Taking the hint would put the table over [`TableLimits::max_table_bytes`].
    #[error(
        "hint needs {bytes} bytes of table memory; the table holds {held} of its budget of          {max} (limits.max_table_bytes)"
    )]
    OverTableBudget {
        /// Its charge.
        bytes: u64,
        /// What the other hints are charged.
        held: u64,
        /// The budget.
        max: u64,
    },
    /// `Total-Object-Count` above [`TableLimits::max_total_objects`].
    #[error("Total-Object-Count {total} is above the plausible maximum {max}")]
    ImplausibleTotal {
        /// The claimed total.
        total: u64,
        /// The limit.
        max: u64,
    },
    /// A weightlist count above the hint's own `Total-Object-Count`: more objects hold the
    /// value than the collection has (a missing total counts as 0).
    #[error(
        "value {index} of weightlist {attribute} has a count of {count}, above the hint's \
         Total-Object-Count {total}"
    )]
    CountAboveTotal {
        /// The weightlist's attribute, as spelled.
        attribute: String,
        /// Position of the value in its weightlist.
        index: usize,
        /// The count.
        count: u64,
        /// The hint's total.
        total: u64,
    },
}
