//! The routing table: peers' CIP-HINTs, merged into an index that answers queries with
//! ranked referrals.
//!
//! # Design
//!
//! The table is an immutable `Snapshot` behind an [`ArcSwap`]. A reader loads the current
//! snapshot (no lock, never waits for a writer) and answers from it alone, so it sees each
//! peer's old hint or its new one, never a mix. Writers take a mutex, build the next
//! snapshot off to the side and swap it in.
//!
//! A snapshot holds:
//! * `slots`: one per imported hint, each with its peer's metadata; a peer's DSI maps to its
//!   live slot. Replacing a peer's hint gives the new hint a new slot and marks the old one
//!   dead, which hides every old posting at once;
//! * `segments`: immutable value indexes (the private `index` module), shared between snapshots by
//!   `Arc`. Each import becomes a new small segment (cost proportional to the hint), and
//!   segments are merged LSM-style: while the second-newest holds no more than twice the
//!   newest's live entries, the two merge, and a segment whose dead entries outnumber its
//!   live ones is rewritten. So the segment count stays logarithmic, each entry is rewritten
//!   a few times over its life, and a replacement never rebuilds the whole index. A slot's
//!   postings always sit in exactly one segment; a dead slot number is reused only once no
//!   segment refers to it;
//! * `attrs`: the table-wide attribute dictionary, keyed by lowercase template and lowercase
//!   attribute base name (RFC 2655 §3.3, §4), with the first spelling seen.
//!
//! [`RoutingTable::replace_all`] imports many hints into one new segment, interning values
//! in a hash map and sorting only the distinct ones: the path for loading at start-up.
//! During a bulk load ([`RoutingTable::set_bulk_load`]) its segments get no trigram index
//! (substring searches scan them) until the final merge indexes everything once.
//! Writes run on the caller's thread and may take a while when they trigger a big merge:
//! call them from a blocking task, not an async executor thread.
//!
//! # Queries
//!
//! A term's matching values come from each segment's exact table or trigram index; their
//! postings are summed per slot in flat per-thread arrays indexed by slot (no hashing, no
//! per-query allocation of them), so the work is one pass over the matching postings.
//!
//! A single-term query (the common case; no possible referrals) needs nothing more: during
//! that pass each slot also counts its distinct matched values and keeps its best
//! [`QueryOptions::max_values`] values (up to 16; ties in case-insensitive value order,
//! which within a segment is id order, so no value bytes are read; a per-slot floor settles
//! most values with one comparison). The peers are ranked without touching their entries:
//! the snapshot keeps per slot a *tie position* (the order of the live peers by ratio, then
//! DSI) and an expiry, so a peer's rank key is one integer, `count` descending then tie
//! position, and a few keys are ranked by counting, without branches. An exact value found
//! in one segment under one attribute skips the summing: each slot appears once among its
//! postings, which rank as they stand.
//!
//! [`RoutingTable::answer`] returns an [`Answer`]: one reference to the snapshot, the
//! ranked slots and one buffer holding every referral's values, so an answer costs a few
//! allocations and no per-referral reference counts; the daemon serializes from its
//! borrowed views. [`RoutingTable::query`] turns it into owned [`Referral`]s.
//!
//! Substring matches are checked and their postings summed in one pipelined pass: record
//! starts two batches ahead, whole records one batch ahead, so that cache misses overlap.
//! A needle held by a large share of a big segment's values reads that segment's
//! precomputed sums instead ([`crate::summary`]): its cost would otherwise be bounded
//! only by the number of postings to add. A narrower needle that still matched many
//! candidates in a big segment has the same sums computed in its pass and kept with the
//! segment for its next asking ([`crate::memo`], bounded by [`SummaryConfig::memo_bytes`]).
//!
//! Other queries (several terms, possible referrals, many values) rank candidates over all
//! terms, then a second pass collects the matched values of just the `limit` best.
//! Attribute names resolve without allocating, and the last resolution is cached per
//! thread.
//!
//! # Loop prevention (digest A21)
//!
//! Every hint may carry `Provenance-N` attributes naming the DSIs of the datasets it was
//! aggregated from ([`crate::aggregate`]). Import refuses a hint whose DSI is this node's, or
//! whose provenance names this node's DSI, or that names more datasets than
//! [`TableLimits::max_provenance`] (CIP v1's hop count served the same end).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::dsi::DsiError;
use cip_proto::soif::attr::base_name;

use crate::answer::{Answer, Item};
use crate::hint::{AttrSpec, CipHint};
use crate::index::{
    BulkBuilder, RandomState, Segment, TOUCH_BATCH, attr_mask, cmp_folded, hash_lower,
};
use crate::memo::MemoBudget;
use crate::query::{MatchOp, Query, Term};
use crate::rank::{
    Explanation, MatchedValue, QueryOptions, RankKey, Referral, TermExplanation, TermStatus,
    ValueBuf, rank_order,
};
use crate::summary::{SUMMARY_TOPS, Store, SummaryConfig};
use crate::thesaurus::AttrPattern;

/// Name of the CIP-HINT attribute (with `-N` multi-value suffixes) that lists provenance
/// DSIs.
pub const PROVENANCE_ATTRIBUTE: &str = "Provenance";

/// Default for [`TableLimits::max_peers`].
pub const DEFAULT_MAX_PEERS: usize = 10_000;
/// Default for [`TableLimits::max_entries_per_hint`].
pub const DEFAULT_MAX_ENTRIES_PER_HINT: usize = 20_000_000;
/// Default for [`TableLimits::max_value_len`].
pub const DEFAULT_MAX_VALUE_LEN: usize = 4096;
/// Default for [`TableLimits::max_provenance`].
pub const DEFAULT_MAX_PROVENANCE: usize = 256;
/// Default for [`TableLimits::max_attributes`].
pub const DEFAULT_MAX_ATTRIBUTES: usize = 65_536;
/// Most segments a bulk load leaves before it merges any ([`RoutingTable::set_bulk_load`]).
const BULK_MAX_SEGMENTS: usize = 32;

/// Default for [`TableLimits::max_total_objects`]: a trillion objects, far above any real
/// collection or aggregate, far below the sums that would crowd out honest peers.
pub const DEFAULT_MAX_TOTAL_OBJECTS: u64 = 1_000_000_000_000;

/// Default for [`TableLimits::max_peer_bytes`]: 1 GiB, about 12 million short values.
pub const DEFAULT_MAX_PEER_BYTES: u64 = 1 << 30;
/// Default for [`TableLimits::max_table_bytes`]: 8 GiB.
pub const DEFAULT_MAX_TABLE_BYTES: u64 = 8 << 30;
/// What one weightlist entry is charged against the memory budgets besides its value's
/// bytes: its share of a segment's offsets, hash slots and postings when no other peer
/// holds the value (the README's sizing: 8 bytes per entry plus 65 per distinct value).
pub const ENTRY_BUDGET_BYTES: u64 = 73;

/// What a hint is charged against the memory budgets: every entry as if its value were
/// held by no other peer, so an upper bound of what the hint adds to the table.
pub fn budget_bytes(hint: &CipHint) -> u64 {
    hint.weightlists
        .iter()
        .flat_map(|(_, w)| &w.entries)
        .map(|e| e.value.len() as u64 + ENTRY_BUDGET_BYTES)
        .sum()
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
    /// Largest memory charge ([`budget_bytes`]) of one peer's hint.
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
}

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
}

/// A peer as [`RoutingTable::peers`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSummary {
    /// DSI.
    pub dsi: Dsi,
    /// Base-URIs.
    pub base_uris: Vec<String>,
    /// DSI-description.
    pub dsi_description: Option<String>,
    /// Total-Object-Count of its hint.
    pub total: u64,
    /// Distinct values (case-folded) over all its weightlists.
    pub distinct_values: usize,
    /// `(attribute, value)` entries.
    pub entries: usize,
    /// When the hint arrived.
    pub received: SystemTime,
    /// When it expires.
    pub expires: Option<SystemTime>,
    /// The configured peer it came from.
    pub via: Option<String>,
    /// DSIs the hint says it was aggregated from.
    pub provenance: Vec<Dsi>,
}

/// Size figures of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableStats {
    /// Peers.
    pub peers: usize,
    /// Index segments.
    pub segments: usize,
    /// Distinct values, summed over segments (a value held in two segments counts twice
    /// until they merge; [`RoutingTable::compact`] merges all).
    pub distinct_values: usize,
    /// Bytes of those values.
    pub value_bytes: usize,
    /// Live `(value, peer, attribute)` entries.
    pub entries: usize,
    /// Entries of replaced or removed hints not yet merged away.
    pub dead_entries: usize,
    /// Approximate heap bytes of the index and peer data.
    pub approx_bytes: usize,
    /// Broad n-grams summarized (see [`crate::summary`]), summed over segments.
    pub summaries: usize,
    /// Summary builds still running in the background.
    pub summaries_pending: usize,
    /// Approximate heap bytes of the summaries (included in `approx_bytes`).
    pub summary_bytes: usize,
    /// The hints' memory charge against [`TableLimits::max_table_bytes`] ([`budget_bytes`]).
    pub budget_bytes: u64,
    /// Substring needles whose sums are memoized ([`crate::memo`]), summed over segments.
    pub memoized: usize,
    /// Bytes those take (not in `approx_bytes`: bounded by
    /// [`SummaryConfig::memo_bytes`]).
    pub memo_bytes: usize,
    /// Segment searches answered from memoized sums since the table was made.
    pub memo_hits: u64,
    /// Segment searches whose sums were computed for the memo (kept, or not when over
    /// its budget).
    pub memo_computed: u64,
}

/// One row of [`RoutingTable::entries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRow {
    /// The attribute.
    pub attribute: AttrSpec,
    /// The value (one spelling of its case-folded class).
    pub value: Bytes,
    /// Sum of the peers' counts.
    pub total: u64,
    /// Per peer count, by DSI.
    pub peers: Vec<(Dsi, u64)>,
}

/// What [`RoutingTable::replace`] did.
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
    /// The hint's index would exceed 32-bit offsets.
    #[error("hint too large to index")]
    TooLarge,
    /// The hint alone is charged more than [`TableLimits::max_peer_bytes`].
    #[error(
        "hint needs {bytes} bytes of table memory, above the per-peer budget of {max}          (limits.max_peer_table_bytes)"
    )]
    OverPeerBudget {
        /// Its charge ([`budget_bytes`]).
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

/// The DSIs a hint's `Provenance` / `Provenance-N` attributes list (values may also hold
/// several DSIs separated by whitespace or commas).
///
/// # Errors
/// [`ImportError::BadProvenance`] for a value that is not a DSI.
pub fn provenance(hint: &CipHint) -> Result<Vec<Dsi>, ImportError> {
    let mut out = Vec::new();
    for a in &hint.extra {
        if !a
            .name
            .base_name()
            .eq_ignore_ascii_case(PROVENANCE_ATTRIBUTE)
        {
            continue;
        }
        let text = String::from_utf8_lossy(&a.value);
        for part in text
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|p| !p.is_empty())
        {
            let dsi = Dsi::new(part).map_err(|source| ImportError::BadProvenance {
                value: part.to_owned(),
                source,
            })?;
            out.push(dsi);
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// A peer's hint as the table keeps it (values live in the segments).
#[derive(Debug, Clone)]
pub(crate) struct PeerEntry {
    pub meta: Arc<PeerMeta>,
    pub total: u64,
    pub attributes: Vec<AttrSpec>,
    pub sources: Vec<String>,
    /// `(attribute id, threshold)`, sorted by id.
    pub thresholds: Vec<(u32, u64)>,
    pub provenance: Vec<Dsi>,
    pub distinct_values: usize,
    pub entries: usize,
    /// Its memory charge ([`budget_bytes`]).
    pub budget: u64,
}

impl PeerEntry {
    fn threshold_for(&self, attrs: &[u32]) -> Option<u64> {
        self.thresholds
            .iter()
            .filter(|(a, t)| *t > 1 && attrs.binary_search(a).is_ok())
            .map(|e| e.1)
            .max()
    }

    fn live_at(&self, now: Option<SystemTime>) -> bool {
        match (now, self.meta.expires) {
            (Some(now), Some(exp)) => exp > now,
            _ => true,
        }
    }
}

/// A normalised attribute.
#[derive(Debug, Clone)]
pub(crate) struct AttrInfo {
    pub template: String,
    pub spelling: AttrSpec,
}

/// Table-wide attribute dictionary.
#[derive(Debug, Clone, Default)]
pub(crate) struct AttrTable {
    pub infos: Vec<AttrInfo>,
    by_key: HashMap<(String, String), u32>,
    by_attribute: HashMap<String, Vec<u32>>,
}

pub(crate) fn attr_key(spec: &AttrSpec) -> (String, String) {
    (
        spec.template.to_ascii_lowercase(),
        base_name(&spec.attribute).to_ascii_lowercase(),
    )
}

impl AttrTable {
    pub(crate) fn id(&self, spec: &AttrSpec) -> Option<u32> {
        self.by_key.get(&attr_key(spec)).copied()
    }

    fn intern(&mut self, spec: &AttrSpec) -> u32 {
        let key = attr_key(spec);
        if let Some(&id) = self.by_key.get(&key) {
            return id;
        }
        let id = self.infos.len() as u32;
        let spelling = AttrSpec {
            template: spec.template.clone(),
            attribute: base_name(&spec.attribute).to_owned(),
        };
        self.by_attribute.entry(key.1.clone()).or_default().push(id);
        self.infos.push(AttrInfo {
            template: key.0.clone(),
            spelling,
        });
        self.by_key.insert(key, id);
        id
    }

    /// Ids of the attributes `[template:]attribute` names (ASCII case and multi-value
    /// suffix ignored), sorted, into `out`; allocates only for names over 64 bytes.
    pub(crate) fn resolve_term(&self, template: Option<&str>, attribute: &str, out: &mut Vec<u32>) {
        out.clear();
        let name = base_name(attribute);
        let mut buf = [0u8; 64];
        let owned;
        let key: &str = if !name.bytes().any(|b| b.is_ascii_uppercase()) {
            name
        } else if let Some(b) = buf.get_mut(..name.len()) {
            b.copy_from_slice(name.as_bytes());
            b.make_ascii_lowercase();
            // ASCII lowercasing keeps UTF-8 valid; an error cannot happen.
            match std::str::from_utf8(b) {
                Ok(k) => k,
                Err(_) => return,
            }
        } else {
            owned = name.to_ascii_lowercase();
            &owned
        };
        if let Some(ids) = self.by_attribute.get(key) {
            for &id in ids {
                let info = &self.infos[id as usize];
                if template.is_none_or(|t| info.template.eq_ignore_ascii_case(t)) {
                    out.push(id);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
    }

    /// Ids of the attributes any pattern matches, sorted.
    pub(crate) fn resolve(&self, patterns: &[AttrPattern]) -> Vec<u32> {
        let mut out = Vec::new();
        for p in patterns {
            if let Some(ids) = self.by_attribute.get(&p.attribute) {
                for &id in ids {
                    let info = &self.infos[id as usize];
                    if p.template.as_ref().is_none_or(|t| *t == info.template) {
                        out.push(id);
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// One consistent state of the table.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// Bumped by every published change ([`RoutingTable::generation`]).
    pub generation: u64,
    pub peers: BTreeMap<Dsi, u32>,
    pub slots: Vec<Option<Arc<PeerEntry>>>,
    free: Vec<u32>,
    pub attrs: Arc<AttrTable>,
    pub segments: Vec<Arc<Segment>>,
    /// Per slot: `(Total-Object-Count, tie position)`, so that ranking reads one small
    /// array instead of the peers' entries. The tie position orders the live peers as
    /// [`crate::rank`] does between equal counts: by ratio (smaller non-zero total first,
    /// a total of 0 last), then by DSI; so a definite referral's rank key is just
    /// `(count descending, tie position)`.
    pub rank_keys: Vec<(u64, u32)>,
    /// Per slot: the live peer's metadata, so that answers reach it in one step.
    pub metas: Vec<Option<Arc<PeerMeta>>>,
    /// Per slot: when the live peer's hint expires, so that ranking checks liveness
    /// without reaching into the entries.
    pub expires: Vec<Option<SystemTime>>,
    /// Per tie position: its slot.
    pub by_tie: Vec<u32>,
}

impl Snapshot {
    /// Recomputes [`Snapshot::rank_keys`] and [`Snapshot::metas`]; call before publishing
    /// the snapshot.
    fn rerank(&mut self) {
        self.rank_keys.clear();
        self.rank_keys.resize(self.slots.len(), (0, u32::MAX));
        self.metas.clear();
        self.metas.resize(self.slots.len(), None);
        self.expires.clear();
        self.expires.resize(self.slots.len(), None);
        // `peers` iterates in DSI order; the stable sort keeps it between equal totals.
        let mut live: Vec<(u32, u64)> = Vec::with_capacity(self.peers.len());
        for &slot in self.peers.values() {
            if let Some(e) = self.slots.get(slot as usize).and_then(Option::as_ref) {
                live.push((slot, e.total));
                self.metas[slot as usize] = Some(e.meta.clone());
                self.expires[slot as usize] = e.meta.expires;
            }
        }
        live.sort_by_key(|&(_, total)| (total == 0, total));
        self.by_tie.clear();
        for (tie, &(slot, total)) in live.iter().enumerate() {
            self.rank_keys[slot as usize] = (total, tie as u32);
            self.by_tie.push(slot);
        }
    }

    /// The tie position of `slot` when it holds a peer live at `now` (any peer without).
    #[inline]
    fn live_tie(&self, slot: u32, now: Option<SystemTime>) -> Option<u32> {
        let &(_, tie) = self.rank_keys.get(slot as usize)?;
        // Only live slots have a tie position (`rerank`).
        if tie == u32::MAX {
            return None;
        }
        match (now, self.expires.get(slot as usize).copied().flatten()) {
            (Some(now), Some(exp)) if exp <= now => None,
            _ => Some(tie),
        }
    }

    pub(crate) fn entry(&self, slot: u32) -> Option<&Arc<PeerEntry>> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    /// The metadata of the live peer in `slot`.
    #[inline]
    pub(crate) fn meta(&self, slot: u32) -> Option<&Arc<PeerMeta>> {
        self.metas.get(slot as usize).and_then(Option::as_ref)
    }

    /// Loads the metadata of `ranked`'s peers in a tight loop, so that their cache misses
    /// overlap before the answer clones them one by one; returns a digest (pass it to
    /// [`std::hint::black_box`]).
    fn touch_metas(&self, ranked: &[Ranked]) -> u64 {
        let mut digest = 0u64;
        for r in ranked {
            if let Some(m) = self.meta(r.slot) {
                // The reference count, which cloning updates.
                digest ^= Arc::strong_count(m) as u64;
            }
        }
        digest
    }

    fn live_entries(&self, seg: &Segment) -> u64 {
        seg.slots()
            .iter()
            .filter(|(s, _)| self.entry(*s).is_some())
            .map(|e| e.1)
            .sum()
    }

    /// The memory charge of every hint held.
    fn budget_held(&self) -> u64 {
        self.peers
            .values()
            .filter_map(|&slot| self.slots.get(slot as usize)?.as_ref())
            .map(|e| e.budget)
            .sum()
    }

    /// The memory charge of `dsi`'s hint, 0 when none is held.
    fn budget_of(&self, dsi: &Dsi) -> u64 {
        self.peers
            .get(dsi)
            .and_then(|&slot| self.slots.get(slot as usize)?.as_ref())
            .map_or(0, |e| e.budget)
    }

    fn kill(&mut self, dsi: &Dsi) -> bool {
        match self.peers.remove(dsi) {
            Some(slot) => {
                self.slots[slot as usize] = None;
                true
            }
            None => false,
        }
    }

    fn merge_range(&mut self, range: std::ops::Range<usize>, hasher: &RandomState) -> bool {
        let parts: Vec<&Segment> = self.segments[range.clone()].iter().map(|s| &**s).collect();
        let bytes: usize = parts.iter().map(|s| s.value_bytes()).sum();
        let entries: usize = parts.iter().map(|s| s.entries()).sum();
        let values: usize = parts.iter().map(|s| s.len()).sum();
        if [bytes, entries, values]
            .iter()
            .any(|&n| n >= u32::MAX as usize)
        {
            return false;
        }
        let slots = &self.slots;
        let live = |s: u32| slots.get(s as usize).is_some_and(Option::is_some);
        match Segment::merge(&parts, &live, hasher) {
            Ok(merged) => {
                self.segments.splice(range, [Arc::new(merged)]);
                true
            }
            Err(_) => false,
        }
    }

    /// Applies the merge policy of the module doc; `full` merges everything into one.
    fn compact(&mut self, hasher: &RandomState, full: bool, bulk: bool) {
        self.segments.retain(|s| s.entries() > 0);
        let dead = self
            .segments
            .iter()
            .any(|s| self.live_entries(s) < s.entries() as u64);
        if full && (self.segments.len() > 1 || dead) {
            let n = self.segments.len();
            self.merge_range(0..n, hasher);
        }
        loop {
            self.segments.retain(|s| s.entries() > 0);
            let n = self.segments.len();
            if n >= 2 {
                let older = self.live_entries(&self.segments[n - 2]);
                let newer = self.live_entries(&self.segments[n - 1]);
                // In a bulk load, segments pile up (up to a bound) for one merge at the end.
                let tiered = !bulk && older <= newer.saturating_mul(2);
                let over = bulk && n > BULK_MAX_SEGMENTS;
                if (tiered || over) && self.merge_range(n - 2..n, hasher) {
                    continue;
                }
            }
            let dirty = self.segments.iter().position(|s| {
                let live = self.live_entries(s);
                s.entries() as u64 - live > live
            });
            if let Some(i) = dirty {
                let n = self.segments.len();
                if (i + 1 < n && self.merge_range(i..i + 2, hasher))
                    || self.merge_range(i..i + 1, hasher)
                {
                    continue;
                }
            }
            break;
        }
        // Slots no segment refers to any more can be handed out again.
        let mut referenced = vec![false; self.slots.len()];
        for seg in &self.segments {
            for &(s, _) in seg.slots() {
                referenced[s as usize] = true;
            }
        }
        self.free = (0..self.slots.len() as u32)
            .filter(|&s| self.slots[s as usize].is_none() && !referenced[s as usize])
            .collect();
        while self.slots.last().is_some_and(Option::is_none)
            && self.free.last() == Some(&(self.slots.len() as u32 - 1))
        {
            self.slots.pop();
            self.free.pop();
        }
    }
}

/// Peers' hints, indexed for routing queries. Cheap to share in an `Arc`; all methods take
/// `&self`; readers never wait for writers.
#[derive(Debug)]
pub struct RoutingTable {
    config: TableConfig,
    hasher: RandomState,
    current: ArcSwap<Snapshot>,
    writer: Mutex<()>,
    /// Summaries being built in the background.
    pending: Arc<Pending>,
    /// Set during a bulk load ([`RoutingTable::set_bulk_load`]).
    bulk_load: std::sync::atomic::AtomicBool,
    /// Bytes of memoized substring sums, over all segments ([`crate::memo`]).
    memo: Arc<MemoBudget>,
}

/// A count of background summary builds, to wait on.
#[derive(Debug, Default)]
struct Pending {
    count: Mutex<usize>,
    done: Condvar,
    /// Held by the build running: builds take turns, so that a burst of big segments
    /// does not start a crowd of threads.
    turn: Mutex<()>,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        // A plain counter: a panic elsewhere leaves it consistent.
        self.count
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Counts one background build from creation to drop (also when the build panics).
struct PendingBuild(Arc<Pending>);

impl PendingBuild {
    fn new(pending: &Arc<Pending>) -> Self {
        *pending.lock() += 1;
        Self(pending.clone())
    }
}

impl Drop for PendingBuild {
    fn drop(&mut self) {
        let mut n = self.0.lock();
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.0.done.notify_all();
        }
    }
}

impl Default for RoutingTable {
    fn default() -> Self {
        Self::new(TableConfig::default())
    }
}

/// A ranked peer, as [`RoutingTable::route`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The peer.
    pub meta: Arc<PeerMeta>,
    /// Matching object count (see [`crate::rank`]); 0 when possible.
    pub count: u64,
    /// The peer's Total-Object-Count.
    pub total: u64,
    /// Definite or possible.
    pub definite: bool,
    /// For a possible route: the smallest threshold among the unmatched terms.
    pub threshold: Option<u64>,
}

/// A term's matches.
struct TermResult {
    attrs: Vec<u32>,
    /// `(segment, value id)` of every matched value, by segment, then id.
    values: Vec<(u32, u32)>,
    /// `(slot, summed count)` of the live slots with a match, by slot.
    by_slot: Vec<(u32, u64)>,
}

/// How a candidate met one term.
#[derive(Debug, Clone, Copy)]
enum TermRef {
    /// Index into the term's `by_slot`.
    Hits(u32),
    /// Only possibly, below this threshold.
    Possible(u64),
}

struct Candidate<'a> {
    slot: u32,
    entry: &'a PeerEntry,
    definite: bool,
    count: u64,
    threshold: u64,
    /// Start of this candidate's per-term refs in [`Evaluation::refs`].
    refs: usize,
}

struct Evaluation<'a> {
    terms: Vec<TermResult>,
    candidates: Vec<Candidate<'a>>,
    refs: Vec<TermRef>,
}

/// One posting that matched a term for a ranked candidate.
#[derive(Debug, Clone, Copy, Default)]
struct Hit {
    term: u32,
    seg: u32,
    id: u32,
    attr: u32,
    count: u64,
}

/// Per-thread buffers reused between queries, so that a lookup allocates little and
/// touches no fresh memory.
#[derive(Default)]
struct Scratch {
    /// Per slot: the summed count of the current term, 0 when untouched.
    counts: Vec<u64>,
    /// Slots with a non-zero entry in `counts`.
    touched: Vec<u32>,
    /// Per slot: the candidate index + 1, 0 for none.
    cand_of: Vec<u32>,
    ids: Vec<u32>,
    lower: Vec<u8>,
    /// The attribute ids of the last term resolved, for `attr_cache`.
    attrs: Vec<u32>,
    attr_cache: Option<AttrCache>,
    tally: Tally,
    /// Rank keys of the peers matched by a single-term query.
    keys: RankKeys,
    /// The live matches `(slot, count, tie position)` of a single-term query.
    hits: Vec<(u32, u64, u32)>,
    /// The segments holding an exact value: `(segment, id, record start)`.
    found: Vec<(u32, u32, u32)>,
    /// Per slot: which of `found` its postings came from (read only for ranked slots).
    seg_of: Vec<u32>,
    /// The segments whose summaries answered the current substring term, with the
    /// memoized sums where those did.
    summed: Vec<(u32, Option<Arc<Store>>)>,
    /// Set by [`rank_direct`]: the one value every ranked slot matched (its `count` is
    /// unused); their best values are then not kept in the tally.
    single: Option<Top>,
    /// The ranked peers of the last single-term query (returned to [`Scratch`] after use,
    /// so that its buffer is reused).
    ranked: Vec<Ranked>,
}

/// What `Scratch::attrs` was resolved from. Holding the `Arc`s keeps their addresses from
/// being reused, so pointer equality identifies them.
struct AttrCache {
    table: Arc<AttrTable>,
    thesaurus: Option<Arc<crate::thesaurus::Thesaurus>>,
    template: Option<String>,
    attribute: String,
}

/// Values few enough to search for any substring on a network thread:
/// [`RoutingTable::answers_quickly`] does not ask segments holding fewer than this in all
/// for their sums.
const QUICK_SCAN_VALUES: usize = 20_000;

/// Most values per referral ([`QueryOptions::max_values`]) for which a single-term query
/// keeps each peer's best values while matching; more take a second pass.
const TALLY_MAX_VALUES: usize = 16;

/// A value a peer matched, with the peer's count for it.
#[derive(Debug, Clone, Copy, Default)]
struct Top {
    seg: u32,
    id: u32,
    /// Where the value's record starts in its segment.
    start: u32,
    count: u64,
}

/// Per-slot sums of one term, with each slot's best `k` values, in one pass.
#[derive(Default)]
struct Tally {
    /// Per slot: the summed count, 0 when untouched.
    counts: Vec<u64>,
    /// Per slot: distinct values matched.
    matched: Vec<u32>,
    /// Slots with a non-zero entry in `counts`.
    touched: Vec<u32>,
    /// Per slot, `k` entries from `slot * k`: its best values so far, unordered.
    tops: Vec<Top>,
    /// Per slot: how many of its `tops` are filled.
    top_len: Vec<u8>,
    /// Per slot: the lowest count among its `tops` once they are full, else 0; a value
    /// with a lower count cannot enter them.
    floor: Vec<u64>,
    /// The current value's `(slot, count)` pairs.
    pairs: Vec<(u32, u64)>,
    k: usize,
}

/// True when `a` ranks before `b` among a referral's values: higher count, then
/// ASCII-case-insensitive value order.
fn value_before(segs: &[Arc<Segment>], a: Top, b: Top) -> bool {
    a.count > b.count
        || (a.count == b.count && folded_order(segs, (a.seg, a.id), (b.seg, b.id)).is_lt())
}

/// The ASCII-case-insensitive order of two values: within one segment that is the order of
/// their ids, so no value bytes are read.
fn folded_order(segs: &[Arc<Segment>], a: (u32, u32), b: (u32, u32)) -> std::cmp::Ordering {
    if a.0 == b.0 {
        a.1.cmp(&b.1)
    } else {
        cmp_folded(
            segs[a.0 as usize].folded_value(a.1),
            segs[b.0 as usize].folded_value(b.1),
        )
    }
}

impl Tally {
    /// Readies the buffers for a table of `slots` slots keeping `k` values per slot.
    fn reset(&mut self, slots: usize, k: usize) {
        self.touched.clear();
        if self.counts.len() < slots {
            self.counts.resize(slots, 0);
            self.matched.resize(slots, 0);
            self.top_len.resize(slots, 0);
            self.floor.resize(slots, 0);
        }
        self.k = k;
        if self.tops.len() < slots * k {
            self.tops.resize(slots * k, Top::default());
        }
    }

    /// Counts value `id` of segment `si` (its record starting at `start`) for every slot
    /// that reported it under one of `attrs` (sorted).
    fn add_at(&mut self, segs: &[Arc<Segment>], si: u32, id: u32, start: u32, attrs: &[u32]) {
        let seg = &segs[si as usize];
        if let [only] = attrs {
            // One attribute: a slot appears at most once among its postings.
            if let Some(g) = seg.group_in(start, *only) {
                for (slot, count) in seg.group_postings(g) {
                    self.bump(segs, si, id, start, slot, count);
                }
            }
            return;
        }
        self.pairs.clear();
        for g in seg.groups_in(start) {
            if contains_sorted(attrs, g.attr) {
                self.pairs.extend(seg.group_postings(g));
            }
        }
        if attrs.len() > 1 && self.pairs.len() > 1 {
            // Postings go by attribute, then slot: one slot may appear once per attribute.
            self.pairs.sort_unstable_by_key(|p| p.0);
            self.pairs.dedup_by(|b, a| {
                let same = a.0 == b.0;
                if same {
                    a.1 = a.1.saturating_add(b.1);
                }
                same
            });
        }
        for i in 0..self.pairs.len() {
            let (slot, count) = self.pairs[i];
            self.bump(segs, si, id, start, slot, count);
        }
    }

    /// Counts `matched` values summing to `sum` for `slot` (from a summary).
    fn add_summary(&mut self, summary: &crate::summary::Summary<'_>) {
        for (i, e) in summary.entries.iter().enumerate() {
            self.add_summed(e.slot, summary.sum(i), e.matched);
        }
    }

    fn add_summed(&mut self, slot: u32, sum: u64, matched: u32) {
        let s = slot as usize;
        let Some(c) = self.counts.get_mut(s) else {
            return;
        };
        if *c == 0 {
            self.touched.push(slot);
        }
        *c = c.saturating_add(sum).max(1);
        self.matched[s] += matched;
    }

    /// Counts value `id` of segment `si` for `slot` with `count`.
    #[inline]
    fn bump(&mut self, segs: &[Arc<Segment>], si: u32, id: u32, start: u32, slot: u32, count: u64) {
        let s = slot as usize;
        let Some(c) = self.counts.get_mut(s) else {
            return;
        };
        if *c == 0 {
            self.touched.push(slot);
        }
        // Stored counts are at least 1, so a touched slot never reads 0.
        *c = c.saturating_add(count).max(1);
        self.matched[s] += 1;
        // Most values of a broad match cannot enter a slot's best values: one comparison
        // settles them.
        if self.k > 0 && count >= self.floor[s] {
            self.offer(
                segs,
                s,
                Top {
                    seg: si,
                    id,
                    start,
                    count,
                },
            );
        }
    }

    /// Keeps `t` among slot `s`'s best `k` values if it ranks high enough.
    fn offer(&mut self, segs: &[Arc<Segment>], s: usize, t: Top) {
        let k = self.k;
        let len = usize::from(self.top_len[s]);
        let tops = &mut self.tops[s * k..(s + 1) * k];
        if len < k {
            tops[len] = t;
            self.top_len[s] += 1;
            if len + 1 == k {
                self.floor[s] = tops.iter().map(|t| t.count).min().unwrap_or(0);
            }
            return;
        }
        let min = self.floor[s];
        if t.count < min {
            return;
        }
        let mut worst = usize::MAX;
        for i in 0..k {
            if tops[i].count == min
                && (worst == usize::MAX || value_before(segs, tops[worst], tops[i]))
            {
                worst = i;
            }
        }
        if let Some(w) = tops.get_mut(worst)
            && value_before(segs, t, *w)
        {
            *w = t;
            self.floor[s] = tops.iter().map(|t| t.count).min().unwrap_or(0);
        }
    }

    /// Slot `s`'s kept values, best first.
    fn best(&mut self, segs: &[Arc<Segment>], s: usize) -> &[Top] {
        let k = self.k;
        let len = usize::from(self.top_len[s]);
        let tops = &mut self.tops[s * k..s * k + len];
        tops.sort_unstable_by(|a, b| {
            if value_before(segs, *a, *b) {
                std::cmp::Ordering::Less
            } else {
                std::cmp::Ordering::Greater
            }
        });
        tops
    }

    /// Forgets the kept values of every touched slot.
    fn clear_tops(&mut self) {
        for &slot in &self.touched {
            self.top_len[slot as usize] = 0;
            self.floor[slot as usize] = 0;
        }
        self.touched.clear();
    }
}

/// A ranked peer of a single-term query.
struct Ranked {
    slot: u32,
    matched: u32,
    count: u64,
    total: u64,
}

/// The values of all referrals of one answer, gathered into one buffer.
struct ValuesOut {
    buf: ValueBuf,
    /// The segment (by address, never dereferenced) and id of the last value written:
    /// referrals of an exact query all list the same value.
    last: Option<(*const Segment, u32)>,
}

impl ValuesOut {
    fn with_capacity(values: usize) -> Self {
        Self {
            buf: ValueBuf::with_capacity(values, values * 24),
            last: None,
        }
    }

    fn push_value(&mut self, seg: &Segment, id: u32, count: u64) {
        self.push_value_at(seg, id, seg.start_of(id), count);
    }

    /// [`ValuesOut::push_value`] of the value whose record starts at `start`.
    fn push_value_at(&mut self, seg: &Segment, id: u32, start: u32, count: u64) {
        let key = (std::ptr::from_ref(seg), id);
        if self.last == Some(key) && self.buf.repeat_last(count) {
            return;
        }
        // Values are at most `max_value_len` each: a full buffer would take more referrals
        // and values than any answer holds; leave the rest out rather than fail.
        if self
            .buf
            .push_with(count, |out| seg.write_value_at(start, out))
            .is_ok()
        {
            self.last = Some(key);
        }
    }

    fn len(&self) -> usize {
        self.buf.len()
    }

    fn into_buf(self) -> ValueBuf {
        self.buf
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// Runs `f` with this thread's scratch buffers (fresh ones if they are in use already).
fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => f(&mut scratch),
        Err(_) => f(&mut Scratch::default()),
    })
}

impl RoutingTable {
    /// An empty table.
    pub fn new(config: TableConfig) -> Self {
        Self {
            hasher: RandomState::default(),
            current: ArcSwap::from_pointee(Snapshot::default()),
            writer: Mutex::new(()),
            pending: Arc::default(),
            bulk_load: std::sync::atomic::AtomicBool::new(false),
            memo: MemoBudget::new(config.summaries.memo_bytes),
            config,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TableConfig {
        &self.config
    }

    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Builds the summaries the segments of `snap` lack ([`crate::summary`]): in the
    /// background when [`SummaryConfig::background`] is set (queries scan meanwhile), else
    /// before returning.
    fn summarize(&self, snap: &Snapshot) {
        if self.bulk() {
            return;
        }
        let cfg = self.config.summaries;
        for seg in &snap.segments {
            if !seg.wants_summaries(&cfg) {
                continue;
            }
            if cfg.background {
                let (seg, build) = (seg.clone(), PendingBuild::new(&self.pending));
                let spawned = std::thread::Builder::new()
                    .name("table-summaries".into())
                    .spawn(move || {
                        let turn = build.0.turn.lock();
                        // A segment merged away meanwhile is not worth summarizing.
                        if Arc::strong_count(&seg) > 1 {
                            seg.summarize(&cfg);
                        }
                        drop(turn);
                        drop(build);
                    });
                if spawned.is_ok() {
                    continue;
                }
            }
            // Without a thread (or when none could be started) the caller builds them.
            seg.summarize(&cfg);
        }
    }

    /// Starts or ends a bulk load (a hub's cold start, hundreds of hints arriving within
    /// seconds). Meanwhile imports pile their segments up instead of merging them tier by
    /// tier (up to 32; each value is then written once instead of once per tier), and the
    /// segments of [`RoutingTable::replace_all`] get neither a trigram index nor summaries
    /// (all are merged away at the end; substring searches scan them meanwhile, which
    /// changes only speed). Ending it merges everything into one segment, indexes and
    /// summarizes it: call it off the async workers.
    pub fn set_bulk_load(&self, on: bool) {
        let was = self.bulk_load.swap(on, std::sync::atomic::Ordering::AcqRel);
        if was && !on {
            self.compact();
        }
    }

    fn bulk(&self) -> bool {
        self.bulk_load.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until no summaries are being built in the background.
    pub fn wait_for_summaries(&self) {
        let mut n = self.pending.lock();
        while *n > 0 {
            n = self
                .pending
                .done
                .wait(n)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Publishes `next` as the new current snapshot with the next generation. Callers hold
    /// the writer lock, so generations are published in order.
    fn publish(&self, mut next: Snapshot) {
        next.generation = self.current.load().generation + 1;
        self.current.store(Arc::new(next));
    }

    /// The generation of the current contents: 0 for a new table, bumped by every import,
    /// removal and expiry (not by [`RoutingTable::compact`] or [`RoutingTable::refresh`],
    /// which change no contents). Whatever is derived from the table (the out-bound
    /// hint) records the generation it was computed from.
    pub fn generation(&self) -> u64 {
        self.current.load().generation
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        // The guarded data is `()`: a panic in another writer leaves nothing inconsistent.
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Imports `hint` from `peer`, atomically replacing any hint with the same DSI.
    ///
    /// # Errors
    /// [`ImportError`] when the hint is this node's own or derived from it, or breaks a
    /// limit; the table is then unchanged.
    pub fn replace(&self, peer: PeerMeta, hint: &CipHint) -> Result<ReplaceOutcome, ImportError> {
        let _writer = self.lock();
        let mut next = (*self.current.load_full()).clone();
        let mut held = next.budget_held();
        let (slot, mut entry, entries) = self.prepare(&mut next, peer, hint, &mut held)?;
        let segment = Segment::from_entries(entries, slot, &self.hasher)
            .map_err(|_| ImportError::TooLarge)?;
        entry.distinct_values = segment.len();
        entry.entries = segment.entries();
        let outcome = install(&mut next, slot, entry);
        next.segments.push(Arc::new(segment));
        next.compact(&self.hasher, false, self.bulk());
        next.rerank();
        self.summarize(&next);
        self.publish(next);
        Ok(outcome)
    }

    /// Imports many hints and indexes them in one pass: the fast path for loading. Each
    /// hint succeeds or fails on its own; all successful ones appear in one swap.
    pub fn replace_all<I, H>(&self, hints: I) -> Vec<Result<ReplaceOutcome, ImportError>>
    where
        I: IntoIterator<Item = (PeerMeta, H)>,
        H: std::borrow::Borrow<CipHint>,
    {
        // Flush a bulk segment well before its 32-bit offsets could overflow.
        const FLUSH_AT: usize = (u32::MAX / 2) as usize;
        let _writer = self.lock();
        let mut next = (*self.current.load_full()).clone();
        let mut bulk = BulkBuilder::default();
        let (mut bulk_bytes, mut bulk_entries) = (0usize, 0usize);
        let mut results = Vec::new();
        let mut held = next.budget_held();
        for (peer, hint) in hints {
            let result = self
                .prepare(&mut next, peer, hint.borrow(), &mut held)
                .and_then(|(slot, mut entry, entries)| {
                    let bytes: usize = entries.iter().map(|e| e.0.len()).sum();
                    if bulk_bytes + bytes > FLUSH_AT || bulk_entries + entries.len() > FLUSH_AT {
                        let full = std::mem::take(&mut bulk);
                        let segment = full
                            .finish(&self.hasher, !self.bulk())
                            .map_err(|_| ImportError::TooLarge)?;
                        next.segments.push(Arc::new(segment));
                        (bulk_bytes, bulk_entries) = (0, 0);
                    }
                    bulk_bytes += bytes;
                    bulk_entries += entries.len();
                    let (distinct, count) = bulk
                        .add(&entries, slot, &self.hasher)
                        .map_err(|_| ImportError::TooLarge)?;
                    entry.distinct_values = distinct;
                    entry.entries = count;
                    Ok(install(&mut next, slot, entry))
                });
            results.push(result);
        }
        if results.iter().all(Result::is_err) {
            // Nothing to publish: the table, and its generation, stay as they were.
            return results;
        }
        match bulk.finish(&self.hasher, !self.bulk()) {
            Ok(segment) => next.segments.push(Arc::new(segment)),
            // Unreachable with FLUSH_AT well under the offsets' range; refuse the batch
            // rather than keep hints that no segment holds.
            Err(_) => {
                return results
                    .into_iter()
                    .map(|_| Err(ImportError::TooLarge))
                    .collect();
            }
        }
        next.compact(&self.hasher, false, self.bulk());
        next.rerank();
        self.summarize(&next);
        self.publish(next);
        results
    }

    /// Checks a hint and turns it into a slot, a peer entry (counts not yet filled in) and
    /// the entries `(value, attribute id, count)` to index. `held` is the memory charge of
    /// the table's hints; it is updated when the hint passes.
    #[allow(clippy::type_complexity)]
    fn prepare<'h>(
        &self,
        next: &mut Snapshot,
        peer: PeerMeta,
        hint: &'h CipHint,
        held: &mut u64,
    ) -> Result<(u32, PeerEntry, Vec<(&'h [u8], u32, u64)>), ImportError> {
        let limits = &self.config.limits;
        let provenance = provenance(hint)?;
        if provenance.len() > limits.max_provenance {
            return Err(ImportError::TooManyProvenance {
                count: provenance.len(),
                max: limits.max_provenance,
            });
        }
        if let Some(node) = &self.config.node {
            if *node == peer.dsi {
                return Err(ImportError::OwnDsi { dsi: peer.dsi });
            }
            if provenance.contains(node) {
                return Err(ImportError::Loop {
                    peer: peer.dsi,
                    node: node.clone(),
                });
            }
        }
        if !next.peers.contains_key(&peer.dsi) && next.peers.len() >= limits.max_peers {
            return Err(ImportError::TooManyPeers {
                max: limits.max_peers,
            });
        }
        let count: usize = hint.weightlists.iter().map(|(_, w)| w.entries.len()).sum();
        if count > limits.max_entries_per_hint {
            return Err(ImportError::TooManyEntries {
                count,
                max: limits.max_entries_per_hint,
            });
        }
        if hint.total_object_count > limits.max_total_objects {
            return Err(ImportError::ImplausibleTotal {
                total: hint.total_object_count,
                max: limits.max_total_objects,
            });
        }
        for (spec, w) in &hint.weightlists {
            if let Some((index, e)) = w
                .entries
                .iter()
                .enumerate()
                .find(|(_, e)| e.count > hint.total_object_count)
            {
                return Err(ImportError::CountAboveTotal {
                    attribute: format!("{}:{}", spec.template, spec.attribute),
                    index,
                    count: e.count,
                    total: hint.total_object_count,
                });
            }
            if let Some((index, e)) = w
                .entries
                .iter()
                .enumerate()
                .find(|(_, e)| e.value.len() > limits.max_value_len)
            {
                return Err(ImportError::ValueTooLong {
                    attribute: format!("{}:{}", spec.template, spec.attribute),
                    index,
                    len: e.value.len(),
                    max: limits.max_value_len,
                });
            }
        }
        let budget = budget_bytes(hint);
        if budget > limits.max_peer_bytes {
            return Err(ImportError::OverPeerBudget {
                bytes: budget,
                max: limits.max_peer_bytes,
            });
        }
        // The hint it replaces frees its charge.
        let others = held.saturating_sub(next.budget_of(&peer.dsi));
        if others.saturating_add(budget) > limits.max_table_bytes {
            return Err(ImportError::OverTableBudget {
                bytes: budget,
                held: others,
                max: limits.max_table_bytes,
            });
        }
        let specs = hint
            .weightlists
            .iter()
            .map(|(s, _)| s)
            .chain(hint.thresholds.iter().map(|(s, _)| s));
        let missing: Vec<&AttrSpec> = specs.filter(|s| next.attrs.id(s).is_none()).collect();
        if !missing.is_empty() {
            let mut attrs = (*next.attrs).clone();
            for s in missing {
                attrs.intern(s);
            }
            if attrs.infos.len() > limits.max_attributes {
                return Err(ImportError::TooManyAttributes {
                    max: limits.max_attributes,
                });
            }
            next.attrs = Arc::new(attrs);
        }
        let attrs = &next.attrs;
        let mut entries = Vec::with_capacity(count);
        for (spec, w) in &hint.weightlists {
            // Invariant: every weightlist attribute was interned just above.
            let Some(id) = attrs.id(spec) else { continue };
            entries.extend(
                w.entries
                    .iter()
                    .filter(|e| e.count > 0)
                    .map(|e| (&e.value[..], id, e.count)),
            );
        }
        let mut thresholds: Vec<(u32, u64)> = hint
            .thresholds
            .iter()
            .filter_map(|(s, t)| Some((attrs.id(s)?, *t)))
            .collect();
        thresholds.sort_unstable();
        thresholds.dedup_by(|b, a| {
            let same = a.0 == b.0;
            if same {
                a.1 = a.1.max(b.1);
            }
            same
        });
        let slot = next.free.pop().unwrap_or(next.slots.len() as u32);
        let entry = PeerEntry {
            meta: Arc::new(peer),
            total: hint.total_object_count,
            attributes: hint.attributes.clone(),
            sources: hint.sources.clone(),
            thresholds,
            provenance,
            distinct_values: 0,
            entries: 0,
            budget,
        };
        *held = others + budget;
        Ok((slot, entry, entries))
    }

    /// Removes a peer's hint; false when there was none.
    pub fn remove(&self, dsi: &Dsi) -> bool {
        let _writer = self.lock();
        let mut next = (*self.current.load_full()).clone();
        if !next.kill(dsi) {
            return false;
        }
        next.compact(&self.hasher, false, self.bulk());
        next.rerank();
        self.summarize(&next);
        self.publish(next);
        true
    }

    /// Removes every hint that expired at or before `now`; returns their DSIs.
    pub fn expire(&self, now: SystemTime) -> Vec<Dsi> {
        let _writer = self.lock();
        let mut next = (*self.current.load_full()).clone();
        let gone: Vec<Dsi> = next
            .peers
            .iter()
            .filter(|&(_, &slot)| next.entry(slot).is_some_and(|e| !e.live_at(Some(now))))
            .map(|(d, _)| d.clone())
            .collect();
        if gone.is_empty() {
            return gone;
        }
        for d in &gone {
            next.kill(d);
        }
        next.compact(&self.hasher, false, self.bulk());
        next.rerank();
        self.summarize(&next);
        self.publish(next);
        gone
    }

    /// Merges all segments into one, dropping dead entries.
    pub fn compact(&self) {
        let _writer = self.lock();
        let mut next = (*self.current.load_full()).clone();
        next.compact(&self.hasher, true, false);
        // Segments a bulk load left unmerged (too big to merge) get their trigram index.
        for seg in &next.segments {
            seg.ensure_grams();
        }
        next.rerank();
        self.summarize(&next);
        // The same contents, laid out anew: the generation stays.
        self.current.store(Arc::new(next));
    }

    /// Replaces the metadata (arrival, expiry, base-uris) of the hint held for `meta.dsi`
    /// without indexing it again: the path for a peer that re-serves an unchanged hint.
    /// Queries see the new expiry at once; the generation stays, as the contents do.
    /// False when the table holds no hint for that DSI.
    pub fn refresh(&self, meta: PeerMeta) -> bool {
        self.refresh_all([meta]).first().copied().unwrap_or(false)
    }

    /// [`RoutingTable::refresh`] for many hints in one swap (one copy of the snapshot's
    /// peer arrays, one re-ranking); says for each whether the table held it.
    pub fn refresh_all(&self, metas: impl IntoIterator<Item = PeerMeta>) -> Vec<bool> {
        let _writer = self.lock();
        let mut next = (*self.current.load_full()).clone();
        let held: Vec<bool> = metas
            .into_iter()
            .map(|meta| {
                let Some(&slot) = next.peers.get(&meta.dsi) else {
                    return false;
                };
                let Some(entry) = next.entry(slot) else {
                    return false;
                };
                let mut entry = (**entry).clone();
                entry.meta = Arc::new(meta);
                next.slots[slot as usize] = Some(Arc::new(entry));
                true
            })
            .collect();
        if held.contains(&true) {
            next.rerank();
            self.current.store(Arc::new(next));
        }
        held
    }

    /// True when the table holds a hint for `dsi`.
    pub fn contains(&self, dsi: &Dsi) -> bool {
        self.current.load().peers.contains_key(dsi)
    }

    /// The peers, by DSI.
    pub fn peers(&self) -> Vec<PeerSummary> {
        let snap = self.current.load();
        snap.peers
            .values()
            .filter_map(|&slot| snap.entry(slot))
            .map(|e| PeerSummary {
                dsi: e.meta.dsi.clone(),
                base_uris: e.meta.base_uris.clone(),
                dsi_description: e.meta.dsi_description.clone(),
                total: e.total,
                distinct_values: e.distinct_values,
                entries: e.entries,
                received: e.meta.received,
                expires: e.meta.expires,
                via: e.meta.via.clone(),
                provenance: e.provenance.clone(),
            })
            .collect()
    }

    /// Size figures.
    pub fn stats(&self) -> TableStats {
        let snap = self.current.load();
        let mut st = TableStats {
            peers: snap.peers.len(),
            segments: snap.segments.len(),
            ..TableStats::default()
        };
        for seg in &snap.segments {
            let live = snap.live_entries(seg) as usize;
            st.distinct_values += seg.len();
            st.value_bytes += seg.value_bytes();
            st.entries += live;
            st.dead_entries += seg.entries() - live;
            st.approx_bytes += seg.heap_bytes();
            st.summaries += seg.summarized();
            st.summary_bytes += seg.summary_bytes();
            st.memoized += seg.memo_stats().0;
        }
        st.memo_bytes = self.memo.used();
        (st.memo_hits, st.memo_computed) = self.memo.counts();
        st.summaries_pending = *self.pending.lock();
        st.budget_bytes = snap.budget_held();
        st.approx_bytes += snap.slots.capacity() * 8
            + snap.peers.len() * (std::mem::size_of::<PeerEntry>() + 64)
            + snap.attrs.infos.len() * 128;
        st
    }

    /// The ranked peers for `q` without building referrals: the cheap path when only the
    /// order and the counts are needed.
    pub fn route(&self, q: &Query, opts: &QueryOptions) -> Vec<Route> {
        let snap = self.current.load();
        if let Some(term) = single_term(q, opts) {
            return with_scratch(|scratch| {
                let ranked = self.tally(&snap, term, opts, 0, scratch);
                scratch.tally.clear_tops();
                // `tally` returns live slots only: every entry is there.
                std::hint::black_box(snap.touch_metas(&ranked));
                let mut out = Vec::with_capacity(ranked.len());
                out.extend(ranked.iter().filter_map(|r| {
                    Some(Route {
                        meta: snap.meta(r.slot)?.clone(),
                        count: r.count,
                        total: r.total,
                        definite: true,
                        threshold: None,
                    })
                }));
                scratch.ranked = ranked;
                out
            });
        }
        let eval = self.evaluate(&snap, q, opts);
        eval.candidates
            .iter()
            .map(|c| Route {
                meta: c.entry.meta.clone(),
                count: c.count,
                total: c.entry.total,
                definite: c.definite,
                threshold: (!c.definite).then_some(c.threshold),
            })
            .collect()
    }

    /// True when answering `q` costs about what an exact lookup does, whatever the
    /// table's size: every term is exact, or the one term is a substring whose per-peer
    /// sums every big segment has (summarized or memoized, see [`crate::memo`]) and whose
    /// other segments are small. The daemon answers such queries on the spot instead of
    /// handing them to a scanning thread.
    pub fn answers_quickly(&self, q: &Query, opts: &QueryOptions) -> bool {
        if q.terms().iter().all(|t| t.op == MatchOp::Exact) {
            return true;
        }
        let Some(term) = single_term(q, opts) else {
            return false;
        };
        if opts.max_values > SUMMARY_TOPS {
            return false;
        }
        let snap = self.current.load();
        let mut attrs = Vec::new();
        resolve_attrs(&snap, term, opts, &mut attrs);
        let attr = match attrs[..] {
            [] => return true,
            [attr] => attr,
            _ => return false,
        };
        let lower = term.value.to_ascii_lowercase();
        let mut scanned = 0;
        snap.segments.iter().all(|seg| {
            seg.summary(&lower, attr).is_some() || seg.has_memoized(&lower, attr) || {
                scanned += seg.len();
                scanned < QUICK_SCAN_VALUES
            }
        })
    }

    /// Ranked referrals for `q` (see [`crate::rank`] for the order), owned.
    pub fn query(&self, q: &Query, opts: &QueryOptions) -> Vec<Referral> {
        self.answer(q, opts).into_referrals()
    }

    /// Ranked referrals for `q` (see [`crate::rank`] for the order), borrowed from the
    /// table: the cheap form to serialize from, which shares the peers' data with the
    /// table instead of taking a reference to each peer.
    pub fn answer(&self, q: &Query, opts: &QueryOptions) -> Answer {
        let snap = self.current.load_full();
        if let Some(term) = single_term(q, opts).filter(|_| opts.max_values <= TALLY_MAX_VALUES) {
            return with_scratch(move |scratch| {
                let ranked = self.tally(&snap, term, opts, opts.max_values, scratch);
                let mut items = Vec::with_capacity(ranked.len());
                let mut out = ValuesOut::with_capacity(0);
                let single = scratch.single.take();
                for r in &ranked {
                    let start = out.len();
                    for t in scratch.tally.best(&snap.segments, r.slot as usize) {
                        out.push_value_at(&snap.segments[t.seg as usize], t.id, t.start, t.count);
                    }
                    items.push(Item {
                        slot: r.slot,
                        matched_values: r.matched,
                        count: r.count,
                        total: r.total,
                        threshold: None,
                        start: start as u32,
                        end: out.len() as u32,
                    });
                }
                scratch.ranked = ranked;
                scratch.tally.clear_tops();
                if let Some(t) = single {
                    scratch.lower.clear();
                    snap.segments[t.seg as usize].write_value_at(t.start, &mut scratch.lower);
                }
                let mut answer = Answer::new(snap, items, out.into_buf());
                if single.is_some() {
                    // Every referral lists this one value with its own count.
                    answer.set_single(&scratch.lower);
                }
                answer
            });
        }
        let eval = self.evaluate(&snap, q, opts);
        let (hits, starts) = self.gather(&snap, &eval);
        let terms = eval.terms.len();
        let mut out = ValuesOut::with_capacity(0);
        let items: Vec<Item> = eval
            .candidates
            .iter()
            .enumerate()
            .map(|(i, c)| {
                referral(
                    &snap,
                    c,
                    &hits[starts[i]..starts[i + 1]],
                    terms,
                    opts,
                    &mut out,
                )
            })
            .collect();
        drop(eval);
        Answer::new(snap, items, out.into_buf())
    }

    /// Matches one term, summing counts per slot and keeping each slot's best `k` values
    /// in `scratch.tally` (release them with [`Tally::clear_tops`]); returns the live
    /// matching peers, at most `opts.limit`, in rank order.
    fn tally(
        &self,
        snap: &Snapshot,
        term: &Term,
        opts: &QueryOptions,
        k: usize,
        scratch: &mut Scratch,
    ) -> Vec<Ranked> {
        let segs = &snap.segments[..];
        scratch.tally.reset(snap.slots.len(), k);
        let cached = scratch.attr_cache.as_ref().is_some_and(|c| {
            Arc::ptr_eq(&c.table, &snap.attrs)
                && match (&c.thesaurus, &opts.thesaurus) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                }
                && c.template.as_deref() == term.template.as_deref()
                && c.attribute == term.attribute
        });
        if !cached {
            resolve_attrs(snap, term, opts, &mut scratch.attrs);
            scratch.attr_cache = Some(AttrCache {
                table: snap.attrs.clone(),
                thesaurus: opts.thesaurus.clone(),
                template: term.template.clone(),
                attribute: term.attribute.clone(),
            });
        }
        if scratch.attrs.is_empty() {
            return Vec::new();
        }
        scratch.lower.clear();
        scratch.lower.extend_from_slice(&term.value);
        scratch.lower.make_ascii_lowercase();
        let attrs = &scratch.attrs[..];
        let tally = &mut scratch.tally;
        scratch.summed.clear();
        scratch.single = None;
        match term.op {
            MatchOp::Exact => {
                let hash = hash_lower(&self.hasher, &scratch.lower);
                if segs.len() > 1 {
                    // Load every segment's table entry first, so that their cache misses
                    // overlap.
                    let entries = segs.iter().fold(0, |d, seg| d ^ seg.touch_exact(hash));
                    std::hint::black_box(entries);
                }
                let mut found = std::mem::take(&mut scratch.found);
                found.clear();
                for (si, seg) in segs.iter().enumerate() {
                    if let Some((id, start)) = seg.find_exact_record(hash, &scratch.lower) {
                        found.push((si as u32, id, start));
                    }
                }
                if let (&[attr], false) = (attrs, found.is_empty()) {
                    // The usual case: one value under one attribute. A slot's postings sit
                    // in one segment and name it once there, so they rank as they stand.
                    let ranked = rank_direct(snap, &found, attr, opts, k, scratch);
                    scratch.found = found;
                    return ranked;
                }
                for &(si, id, start) in &found {
                    tally.add_at(segs, si, id, start, attrs);
                }
                scratch.found = found;
            }
            MatchOp::Substring => {
                let finder = memchr::memmem::Finder::new(&scratch.lower);
                let summable = attrs.len() == 1 && k <= SUMMARY_TOPS;
                let mask = attr_mask(attrs);
                let memo = &self.memo;
                let cfg = &self.config.summaries;
                for (si, seg) in segs.iter().enumerate() {
                    let si = si as u32;
                    if summable {
                        let attr = attrs[0];
                        // A broad needle under one attribute: the segment's summary has
                        // the sums; the ranked slots' best values are read from it
                        // afterwards.
                        if let Some(summary) = seg.summary(&scratch.lower, attr) {
                            tally.add_summary(&summary);
                            scratch.summed.push((si, None));
                            continue;
                        }
                        if let Some(store) = seg.memoized(&scratch.lower, attr) {
                            memo.hit();
                            tally.add_summary(&store.only(attr));
                            scratch.summed.push((si, Some(store)));
                            continue;
                        }
                    }
                    let Some(exact) = seg.substring_candidates(&finder, &mut scratch.ids) else {
                        continue;
                    };
                    // Values reported under other attributes only need not be loaded.
                    seg.retain_under(&mut scratch.ids, mask);
                    if summable
                        && memo.enabled()
                        && seg.len() >= cfg.min_values
                        && scratch.ids.len() >= cfg.memo_min_candidates
                    {
                        // Expensive, and likely asked again: sum it for every attribute
                        // and slot in one pass, and keep that.
                        memo.computed();
                        let store = seg.memoize(&finder, &scratch.ids, exact, attrs[0], memo);
                        tally.add_summary(&store.only(attrs[0]));
                        scratch.summed.push((si, Some(store)));
                        continue;
                    }
                    // One pipelined pass: each match's postings are read right after its
                    // bytes were checked, while the next batches load.
                    seg.for_each_candidate(&finder, &scratch.ids, exact, |id, start| {
                        tally.add_at(segs, si, id, start, attrs);
                    });
                }
            }
        }
        // Ranked by `rank_hits` (counts are at least 1 here).
        let hits = &mut scratch.hits;
        hits.clear();
        for &slot in &tally.touched {
            let count = std::mem::take(&mut tally.counts[slot as usize]);
            if let Some(tie) = snap.live_tie(slot, opts.now) {
                hits.push((slot, count, tie));
            }
        }
        let mut ranked = std::mem::take(&mut scratch.ranked);
        ranked.clear();
        rank_hits(snap, hits, opts.limit, &mut scratch.keys, |slot, count| {
            ranked.push(Ranked {
                slot,
                matched: tally.matched[slot as usize],
                count,
                total: snap.rank_keys.get(slot as usize).map_or(0, |k| k.0),
            });
        });
        for &slot in &tally.touched {
            tally.matched[slot as usize] = 0;
        }
        if k > 0 && !scratch.summed.is_empty() {
            // The ranked slots' best values in the summarized segments.
            let (attr, lower) = (scratch.attrs[0], &scratch.lower[..]);
            for (si, store) in &scratch.summed {
                let (si, seg) = (*si, &segs[*si as usize]);
                let summary = match store {
                    Some(store) => store.only(attr),
                    None => match seg.summary(lower, attr) {
                        Some(summary) => summary,
                        None => continue,
                    },
                };
                let entries = summary.entries;
                for r in &ranked {
                    let Ok(e) = entries.binary_search_by_key(&r.slot, |e| e.slot) else {
                        continue;
                    };
                    for &id in entries[e]
                        .tops
                        .iter()
                        .take(k)
                        .take_while(|&&id| id != u32::MAX)
                    {
                        let start = seg.start_of(id);
                        if let Some(count) = seg.count_at(start, attr, r.slot) {
                            let top = Top {
                                seg: si,
                                id,
                                start,
                                count,
                            };
                            tally.offer(segs, r.slot as usize, top);
                        }
                    }
                }
            }
        }
        ranked
    }

    /// The referrals of [`RoutingTable::query`] with how each was matched and ranked.
    pub fn explain(&self, q: &Query, opts: &QueryOptions) -> Vec<Explanation> {
        let snap = self.current.load();
        let eval = self.evaluate(&snap, q, opts);
        let (all_hits, starts) = self.gather(&snap, &eval);
        let nterms = eval.terms.len();
        eval.candidates
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let entry = c.entry;
                let cand_hits = &all_hits[starts[i]..starts[i + 1]];
                let mut counts = Vec::new();
                let terms = q
                    .terms()
                    .iter()
                    .enumerate()
                    .map(|(t, term)| {
                        let (status, count, hits) = match eval.refs[c.refs + t] {
                            TermRef::Hits(k) => {
                                let (_, count) = eval.terms[t].by_slot[k as usize];
                                (TermStatus::Definite, count, cand_hits)
                            }
                            TermRef::Possible(threshold) => {
                                (TermStatus::Possible { threshold }, 0, &[][..])
                            }
                        };
                        counts.push(count.to_string());
                        let mut matches: Vec<MatchedValue> = hits
                            .iter()
                            .filter(|h| h.term as usize == t)
                            .map(|h| MatchedValue {
                                attribute: snap.attrs.infos[h.attr as usize].spelling.clone(),
                                value: Bytes::from(
                                    snap.segments[h.seg as usize].value(h.id).into_owned(),
                                ),
                                count: h.count,
                            })
                            .collect();
                        matches.sort_by(|a, b| {
                            b.count
                                .cmp(&a.count)
                                .then_with(|| cmp_folded(&a.value, &b.value))
                        });
                        let matched_values = matches.len();
                        matches.truncate(opts.max_values);
                        TermExplanation {
                            term: term.to_string(),
                            status,
                            count,
                            matches,
                            matched_values,
                        }
                    })
                    .collect::<Vec<_>>();
                let rank = if c.definite {
                    let estimate = if counts.len() > 1 {
                        format!("count = min({}) = {}", counts.join(", "), c.count)
                    } else {
                        format!("count = {} (sum over matching values)", c.count)
                    };
                    format!(
                        "definite; {estimate}; then count/total = {}/{}; then dsi {}",
                        c.count, entry.total, entry.meta.dsi
                    )
                } else {
                    format!(
                        "possible (after all definite); threshold {}; then total {}; then dsi {}",
                        c.threshold, entry.total, entry.meta.dsi
                    )
                };
                let mut out = ValuesOut::with_capacity(opts.max_values);
                let item = referral(&snap, c, cand_hits, nterms, opts, &mut out);
                let referral = crate::answer::owned(&entry.meta, &item, &Arc::new(out.into_buf()));
                Explanation {
                    referral,
                    position: i + 1,
                    via: entry.meta.via.clone(),
                    received: entry.meta.received,
                    terms,
                    rank,
                }
            })
            .collect()
    }

    /// Matches, filters and ranks; keeps at most `opts.limit` candidates in rank order.
    fn evaluate<'a>(&self, snap: &'a Snapshot, q: &Query, opts: &QueryOptions) -> Evaluation<'a> {
        with_scratch(|scratch| self.evaluate_with(snap, q, opts, scratch))
    }

    fn evaluate_with<'a>(
        &self,
        snap: &'a Snapshot,
        q: &Query,
        opts: &QueryOptions,
        scratch: &mut Scratch,
    ) -> Evaluation<'a> {
        // Without `now`, liveness is the slot's presence: no need to touch the entry.
        let live = |slot: u32| match opts.now {
            None => snap.entry(slot).is_some(),
            Some(_) => snap.entry(slot).is_some_and(|e| e.live_at(opts.now)),
        };
        let mut eval = Evaluation {
            terms: Vec::with_capacity(q.terms().len()),
            candidates: Vec::new(),
            refs: Vec::new(),
        };
        if scratch.counts.len() < snap.slots.len() {
            scratch.counts.resize(snap.slots.len(), 0);
        }
        for term in q.terms() {
            let pattern = AttrPattern::new(term.template.as_deref(), &term.attribute);
            let attrs = match &opts.thesaurus {
                Some(th) => snap.attrs.resolve(&th.expand(&pattern)),
                None => snap.attrs.resolve(std::slice::from_ref(&pattern)),
            };
            if attrs.is_empty() {
                return eval;
            }
            scratch.lower.clear();
            scratch.lower.extend_from_slice(&term.value);
            scratch.lower.make_ascii_lowercase();
            let mut values: Vec<(u32, u32)> = Vec::new();
            let counts = &mut scratch.counts;
            let touched = &mut scratch.touched;
            touched.clear();
            let mut add = |si: usize, seg: &Segment, id: u32| {
                values.push((si as u32, id));
                for (slot, attr, count) in seg.postings(id) {
                    if contains_sorted(&attrs, attr) {
                        let c = &mut counts[slot as usize];
                        if *c == 0 {
                            touched.push(slot);
                        }
                        // Stored counts are at least 1, so a touched slot never reads 0.
                        *c = c.saturating_add(count).max(1);
                    }
                }
            };
            match term.op {
                MatchOp::Exact => {
                    let hash = hash_lower(&self.hasher, &scratch.lower);
                    for (si, seg) in snap.segments.iter().enumerate() {
                        if let Some(id) = seg.find_exact(hash, &scratch.lower) {
                            add(si, seg, id);
                        }
                    }
                }
                MatchOp::Substring => {
                    let finder = memchr::memmem::Finder::new(&scratch.lower);
                    let mask = attr_mask(&attrs);
                    for (si, seg) in snap.segments.iter().enumerate() {
                        scratch.ids.clear();
                        seg.find_substring(&finder, mask, &mut scratch.ids);
                        let mut digest = 0;
                        for batch in scratch.ids.chunks(TOUCH_BATCH) {
                            digest ^= seg.touch_postings(batch);
                            for &id in batch {
                                add(si, seg, id);
                            }
                        }
                        std::hint::black_box(digest);
                    }
                }
            }
            let mut by_slot: Vec<(u32, u64)> = Vec::with_capacity(scratch.touched.len());
            for &slot in &scratch.touched {
                let c = std::mem::take(&mut scratch.counts[slot as usize]);
                if live(slot) {
                    by_slot.push((slot, c));
                }
            }
            by_slot.sort_unstable_by_key(|e| e.0);
            eval.terms.push(TermResult {
                attrs,
                values,
                by_slot,
            });
        }
        let consider = |slot: u32, eval: &mut Evaluation<'a>| {
            let Some(entry) = snap.entry(slot) else {
                return;
            };
            let start = eval.refs.len();
            let mut definite = true;
            let mut count = u64::MAX;
            let mut threshold = u64::MAX;
            for t in 0..eval.terms.len() {
                let term = &eval.terms[t];
                match term.by_slot.binary_search_by_key(&slot, |e| e.0) {
                    Ok(k) => {
                        count = count.min(term.by_slot[k].1);
                        eval.refs.push(TermRef::Hits(k as u32));
                    }
                    Err(_) => {
                        let possible = if opts.include_possible {
                            entry.threshold_for(&term.attrs)
                        } else {
                            None
                        };
                        let Some(th) = possible else {
                            eval.refs.truncate(start);
                            return;
                        };
                        definite = false;
                        threshold = threshold.min(th);
                        eval.refs.push(TermRef::Possible(th));
                    }
                }
            }
            eval.candidates.push(Candidate {
                slot,
                entry,
                definite,
                count: if definite { count } else { 0 },
                threshold: if definite { 0 } else { threshold },
                refs: start,
            });
        };
        if opts.include_possible {
            for &slot in snap.peers.values() {
                if live(slot) {
                    consider(slot, &mut eval);
                }
            }
        } else if !eval.terms.is_empty() {
            for k in 0..eval.terms[0].by_slot.len() {
                let slot = eval.terms[0].by_slot[k].0;
                consider(slot, &mut eval);
            }
        }
        fn key<'k>(c: &'k Candidate<'_>) -> RankKey<'k> {
            RankKey {
                definite: c.definite,
                count: c.count,
                total: c.entry.total,
                threshold: c.threshold,
                dsi: &c.entry.meta.dsi,
            }
        }
        let by_rank = |a: &Candidate<'_>, b: &Candidate<'_>| rank_order(&key(a), &key(b));
        if eval.candidates.len() > opts.limit && opts.limit > 0 {
            eval.candidates
                .select_nth_unstable_by(opts.limit - 1, by_rank);
        }
        eval.candidates.truncate(opts.limit);
        eval.candidates.sort_unstable_by(by_rank);
        eval
    }

    /// The postings behind each ranked candidate's definite terms: for candidate `c`,
    /// `hits[starts[c]..starts[c + 1]]`, by term, then segment and value id.
    fn gather(&self, snap: &Snapshot, eval: &Evaluation<'_>) -> (Vec<Hit>, Vec<usize>) {
        with_scratch(|scratch| gather_with(snap, eval, scratch))
    }

    /// Table contents for operators: the `top` `(attribute, value)` rows with the highest
    /// summed count, optionally only one attribute, one peer, or values starting with
    /// `prefix` (ASCII-case-insensitive). Ties by value, then attribute.
    pub fn entries(
        &self,
        attr: Option<&AttrSpec>,
        peer: Option<&Dsi>,
        prefix: Option<&[u8]>,
        top: usize,
    ) -> Vec<TableRow> {
        let snap = self.current.load();
        let attr_ids = match attr {
            Some(a) => {
                let ids = snap
                    .attrs
                    .resolve(&[AttrPattern::new(Some(&a.template), &a.attribute)]);
                if ids.is_empty() {
                    return Vec::new();
                }
                Some(ids)
            }
            None => None,
        };
        let peer_slot = match peer {
            Some(d) => match snap.peers.get(d) {
                Some(&s) => Some(s),
                None => return Vec::new(),
            },
            None => None,
        };
        // (attribute, folded value) -> (smallest spelling, total, per-slot counts)
        type Row = (Vec<u8>, u64, Vec<(u32, u64)>);
        let mut rows: HashMap<(u32, Vec<u8>), Row> = HashMap::new();
        for seg in &snap.segments {
            if peer_slot.is_some_and(|s| seg.slot_entries(s) == 0) {
                continue;
            }
            let range = match prefix {
                Some(p) => seg.prefix_range(p),
                None => 0..seg.len() as u32,
            };
            for id in range {
                let value = seg.value(id);
                let value = &value[..];
                for (slot, a, count) in seg.postings(id) {
                    let keep = snap.entry(slot).is_some()
                        && peer_slot.is_none_or(|s| s == slot)
                        && attr_ids.as_ref().is_none_or(|ids| contains_sorted(ids, a));
                    if !keep {
                        continue;
                    }
                    let row = rows
                        .entry((a, value.to_ascii_lowercase()))
                        .or_insert_with(|| (value.to_vec(), 0, Vec::new()));
                    if value < row.0.as_slice() {
                        row.0 = value.to_vec();
                    }
                    row.1 = row.1.saturating_add(count);
                    row.2.push((slot, count));
                }
            }
        }
        let mut rows: Vec<_> = rows.into_iter().collect();
        rows.sort_by(|a, b| {
            b.1.1
                .cmp(&a.1.1)
                .then_with(|| a.0.1.cmp(&b.0.1))
                .then(a.0.0.cmp(&b.0.0))
        });
        rows.truncate(top);
        rows.into_iter()
            .map(|((a, _), (value, total, peers))| {
                let mut peers: Vec<(Dsi, u64)> = peers
                    .into_iter()
                    .filter_map(|(s, n)| Some((snap.entry(s)?.meta.dsi.clone(), n)))
                    .collect();
                peers.sort();
                TableRow {
                    attribute: snap.attrs.infos[a as usize].spelling.clone(),
                    value: Bytes::from(value),
                    total,
                    peers,
                }
            })
            .collect()
    }
}

fn gather_with(
    snap: &Snapshot,
    eval: &Evaluation<'_>,
    scratch: &mut Scratch,
) -> (Vec<Hit>, Vec<usize>) {
    let n = eval.candidates.len();
    let mut starts = vec![0usize; n + 1];
    if n == 0 {
        return (Vec::new(), starts);
    }
    if scratch.cand_of.len() < snap.slots.len() {
        scratch.cand_of.resize(snap.slots.len(), 0);
    }
    let cand_of = &mut scratch.cand_of;
    for (i, c) in eval.candidates.iter().enumerate() {
        cand_of[c.slot as usize] = i as u32 + 1;
    }
    let mut raw: Vec<(u32, Hit)> = Vec::new();
    let mut digest = 0;
    for (t, term) in eval.terms.iter().enumerate() {
        for (k, &(seg, id)) in term.values.iter().enumerate() {
            if k % TOUCH_BATCH == 0 {
                // Values come by segment: touch the run of this segment's ids ahead.
                let ahead = &term.values[k..(k + TOUCH_BATCH).min(term.values.len())];
                let run = ahead.iter().take_while(|v| v.0 == seg).count();
                scratch.ids.clear();
                scratch.ids.extend(ahead[..run].iter().map(|v| v.1));
                digest ^= snap.segments[seg as usize].touch_postings(&scratch.ids);
            }
            for (slot, attr, count) in snap.segments[seg as usize].postings(id) {
                let c = cand_of[slot as usize];
                if c != 0 && contains_sorted(&term.attrs, attr) {
                    starts[c as usize] += 1;
                    raw.push((
                        c - 1,
                        Hit {
                            term: t as u32,
                            seg,
                            id,
                            attr,
                            count,
                        },
                    ));
                }
            }
        }
    }
    std::hint::black_box(digest);
    for c in &eval.candidates {
        cand_of[c.slot as usize] = 0;
    }
    for k in 1..starts.len() {
        starts[k] += starts[k - 1];
    }
    // A stable counting sort by candidate keeps each one's hits in generation order.
    let mut fill = starts.clone();
    let mut hits = vec![Hit::default(); raw.len()];
    for (c, h) in raw {
        hits[fill[c as usize]] = h;
        fill[c as usize] += 1;
    }
    (hits, starts)
}

fn referral(
    snap: &Snapshot,
    c: &Candidate<'_>,
    hits: &[Hit],
    terms: usize,
    opts: &QueryOptions,
    out: &mut ValuesOut,
) -> Item {
    // Per value: its count summed over the attributes one term matched it under; the
    // largest such count when several terms matched it.
    let mut values: Vec<(u32, u32, u64)> = Vec::with_capacity(hits.len().min(64));
    let mut last_term = u32::MAX;
    for h in hits {
        match values.last_mut() {
            Some(last) if last_term == h.term && last.0 == h.seg && last.1 == h.id => {
                last.2 = last.2.saturating_add(h.count);
            }
            _ => values.push((h.seg, h.id, h.count)),
        }
        last_term = h.term;
    }
    if terms > 1 {
        values.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then(b.2.cmp(&a.2)));
        values.dedup_by(|b, a| a.0 == b.0 && a.1 == b.1);
    }
    let matched_values = values.len();
    let by_rank = |a: &(u32, u32, u64), b: &(u32, u32, u64)| {
        b.2.cmp(&a.2)
            .then_with(|| folded_order(&snap.segments, (a.0, a.1), (b.0, b.1)))
    };
    if values.len() > opts.max_values && opts.max_values > 0 {
        values.select_nth_unstable_by(opts.max_values - 1, by_rank);
    }
    values.truncate(opts.max_values);
    values.sort_by(by_rank);
    let start = out.len();
    for v in &values {
        out.push_value(&snap.segments[v.0 as usize], v.1, v.2);
    }
    Item {
        slot: c.slot,
        matched_values: u32::try_from(matched_values).unwrap_or(u32::MAX),
        count: c.count,
        total: c.entry.total,
        threshold: (!c.definite).then_some(c.threshold),
        start: start as u32,
        end: out.len() as u32,
    }
}

/// The rank key `!count << 64 | tie position << 32 | slot` of a definite match: ascending
/// keys are the order of `rank_order` (see [`RoutingTable::tally`]).
#[inline]
fn rank_key(count: u64, tie: u32, slot: u32) -> u128 {
    (u128::from(!count) << 64) | (u128::from(tie) << 32) | u128::from(slot)
}

/// [`RoutingTable::tally`] of one value found in the segments `found` (`(segment, id,
/// record start)` each), matched under one attribute only: a slot's postings sit in one
/// segment and name it once there, so they rank without summing. When `k > 0`, each ranked
/// slot keeps the value as its best: through [`Scratch::single`] when one segment holds it.
fn rank_direct(
    snap: &Snapshot,
    found: &[(u32, u32, u32)],
    attr: u32,
    opts: &QueryOptions,
    k: usize,
    scratch: &mut Scratch,
) -> Vec<Ranked> {
    let hits = &mut scratch.hits;
    hits.clear();
    if scratch.seg_of.len() < snap.slots.len() {
        scratch.seg_of.resize(snap.slots.len(), 0);
    }
    for (h, &(si, _, start)) in found.iter().enumerate() {
        let seg = &snap.segments[si as usize];
        if let Some(g) = seg.group_in(start, attr) {
            for (slot, count) in seg.group_postings(g) {
                if let Some(tie) = snap.live_tie(slot, opts.now) {
                    hits.push((slot, count, tie));
                    if let Some(s) = scratch.seg_of.get_mut(slot as usize) {
                        *s = h as u32;
                    }
                }
            }
        }
    }
    let mut ranked = std::mem::take(&mut scratch.ranked);
    ranked.clear();
    rank_hits(snap, hits, opts.limit, &mut scratch.keys, |slot, count| {
        ranked.push(Ranked {
            slot,
            matched: 1,
            count,
            total: snap.rank_keys.get(slot as usize).map_or(0, |k| k.0),
        });
    });
    if k > 0 {
        if let &[(seg, id, start)] = found {
            // Every ranked slot matched this one value, with its own count: the answer
            // lists it without going through the slots' best values.
            scratch.single = Some(Top {
                seg,
                id,
                start,
                count: 0,
            });
        } else {
            for r in &ranked {
                let h = scratch.seg_of.get(r.slot as usize).copied().unwrap_or(0);
                if let Some(&(seg, id, start)) = found.get(h as usize) {
                    let top = Top {
                        seg,
                        id,
                        start,
                        count: r.count,
                    };
                    scratch.tally.offer(&snap.segments, r.slot as usize, top);
                    scratch.tally.touched.push(r.slot);
                }
            }
        }
    }
    ranked
}

/// Ranks the live matches `(slot, count, tie position)` (counts at least 1) and hands the
/// `limit` best, in rank order, to `out(slot, count)`.
///
/// Rank keys are plain integers, which sort fast: ascending is the order of `rank_order`
/// for definite referrals (between equal counts the higher ratio is the smaller non-zero
/// total, which the tie position orders; see `Snapshot::rank_keys`). When every count
/// fits 32 bits (nearly always) a key is `!count << 32 | tie position` in a `u64`, and the
/// slot comes back from the tie position; otherwise `!count << 64 | tie << 32 | slot`.
fn rank_hits(
    snap: &Snapshot,
    hits: &[(u32, u64, u32)],
    limit: usize,
    keys: &mut RankKeys,
    mut out: impl FnMut(u32, u64),
) {
    if hits.iter().all(|h| h.1 <= u64::from(u32::MAX)) {
        let k = &mut keys.narrow;
        k.clear();
        k.extend(
            hits.iter()
                .map(|&(_, count, tie)| (u64::from(!(count as u32)) << 32) | u64::from(tie)),
        );
        rank_keys(k, limit);
        for &key in k.iter() {
            if let Some(&slot) = snap.by_tie.get((key as u32) as usize) {
                out(slot, u64::from(!((key >> 32) as u32)));
            }
        }
    } else {
        let k = &mut keys.wide;
        k.clear();
        k.extend(
            hits.iter()
                .map(|&(slot, count, tie)| rank_key(count, tie, slot)),
        );
        rank_keys(k, limit);
        for &key in k.iter() {
            out(key as u32, !((key >> 64) as u64));
        }
    }
}

/// Buffers for [`rank_hits`].
#[derive(Default)]
struct RankKeys {
    narrow: Vec<u64>,
    wide: Vec<u128>,
}

/// Keeps the `limit` smallest of `keys` (distinct), ascending.
fn rank_keys<T: Copy + Ord + Default>(keys: &mut Vec<T>, limit: usize) {
    const SMALL: usize = 32;
    let n = keys.len();
    if n <= SMALL {
        // Few keys (the usual case): each one's position is the number of smaller keys,
        // counted without branches; cheaper than sorting with mispredicted comparisons.
        let mut out = [T::default(); SMALL];
        for &k in keys.iter() {
            let below = keys.iter().map(|&x| usize::from(x < k)).sum::<usize>();
            if let Some(slot) = out.get_mut(below) {
                *slot = k;
            }
        }
        keys.clear();
        keys.extend_from_slice(&out[..n.min(limit)]);
        return;
    }
    if limit > 0 && n > limit {
        keys.select_nth_unstable(limit - 1);
    }
    keys.truncate(limit);
    keys.sort_unstable();
}

/// The one term of `q` when the single-pass path answers it: one term, no possible
/// referrals.
/// Puts in `out` the attribute ids `term` names, through the thesaurus of `opts` if any.
fn resolve_attrs(snap: &Snapshot, term: &Term, opts: &QueryOptions, out: &mut Vec<u32>) {
    match &opts.thesaurus {
        Some(th) => {
            let pattern = AttrPattern::new(term.template.as_deref(), &term.attribute);
            *out = snap.attrs.resolve(&th.expand(&pattern));
        }
        None => snap
            .attrs
            .resolve_term(term.template.as_deref(), &term.attribute, out),
    }
}

fn single_term<'q>(q: &'q Query, opts: &QueryOptions) -> Option<&'q Term> {
    match q.terms() {
        [term] if !opts.include_possible => Some(term),
        _ => None,
    }
}

/// Makes `entry` the live hint of its peer in `slot`, retiring any older one.
fn install(next: &mut Snapshot, slot: u32, entry: PeerEntry) -> ReplaceOutcome {
    let dsi = entry.meta.dsi.clone();
    let outcome = ReplaceOutcome {
        replaced: next.kill(&dsi),
        distinct_values: entry.distinct_values,
        entries: entry.entries,
    };
    if slot as usize >= next.slots.len() {
        next.slots.resize(slot as usize + 1, None);
    }
    next.slots[slot as usize] = Some(Arc::new(entry));
    next.peers.insert(dsi, slot);
    outcome
}

fn contains_sorted(ids: &[u32], id: u32) -> bool {
    if ids.len() <= 8 {
        ids.contains(&id)
    } else {
        ids.binary_search(&id).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hint::{WeightEntry, Weightlist};
    use crate::thesaurus::Thesaurus;
    use std::time::Duration;

    fn dsi(s: &str) -> Dsi {
        Dsi::new(s).unwrap()
    }

    fn meta(d: &str) -> PeerMeta {
        PeerMeta {
            dsi: dsi(d),
            base_uris: vec![format!("cip://peer-{d}/")],
            dsi_description: Some(format!("peer {d}")),
            received: SystemTime::UNIX_EPOCH,
            expires: None,
            via: Some("upstream".into()),
        }
    }

    fn spec(t: &str, a: &str) -> AttrSpec {
        AttrSpec {
            template: t.into(),
            attribute: a.into(),
        }
    }

    type Lists<'a> = [(&'a str, &'a str, &'a [(&'a str, u64)])];

    fn hint(total: u64, lists: &Lists<'_>) -> CipHint {
        CipHint {
            url: "-".into(),
            total_object_count: total,
            weightlists: lists
                .iter()
                .map(|(t, a, es)| {
                    let entries = es
                        .iter()
                        .map(|(v, c)| WeightEntry {
                            value: Bytes::copy_from_slice(v.as_bytes()),
                            count: *c,
                        })
                        .collect();
                    (spec(t, a), Weightlist { entries })
                })
                .collect(),
            ..CipHint::default()
        }
    }

    fn q(s: &str) -> Query {
        Query::parse(s).unwrap()
    }

    fn summary(r: &[Referral]) -> Vec<(String, u64, bool)> {
        r.iter()
            .map(|r| (r.dsi.to_string(), r.count, r.definite))
            .collect()
    }

    fn sample() -> RoutingTable {
        let t = RoutingTable::new(TableConfig {
            node: Some(dsi("9.9")),
            ..TableConfig::default()
        });
        t.replace(
            meta("1.1"),
            &hint(
                100,
                &[(
                    "DOCUMENT",
                    "Author",
                    &[("Garcia", 10), ("Jose Garcia y Montes", 3)],
                )],
            ),
        )
        .unwrap();
        t.replace(
            meta("1.2"),
            &hint(
                50,
                &[("document", "AUTHOR-1", &[("GARCIA", 20), ("Smith", 5)])],
            ),
        )
        .unwrap();
        t.replace(
            meta("1.3"),
            &hint(10, &[("FILE", "Author", &[("garcia", 10)])]),
        )
        .unwrap();
        t
    }

    #[test]
    fn exact_lookup_folds_case_suffix_and_template() {
        let t = sample();
        let opts = QueryOptions::default();
        assert_eq!(
            summary(&t.query(&q("DOCUMENT:Author=garcia"), &opts)),
            vec![("1.2".into(), 20, true), ("1.1".into(), 10, true)]
        );
        // Without a template FILE:Author counts too; 1.3 beats 1.1 on count/total.
        assert_eq!(
            summary(&t.query(&q("author=GARCIA"), &opts)),
            vec![
                ("1.2".into(), 20, true),
                ("1.3".into(), 10, true),
                ("1.1".into(), 10, true)
            ]
        );
        let r = &t.query(&q("Author=garcia"), &opts)[0];
        assert_eq!(r.base_uris(), ["cip://peer-1.2/".to_string()]);
        assert_eq!(r.dsi_description(), Some("peer 1.2"));
        assert_eq!(r.values, vec![(Bytes::from_static(b"GARCIA"), 20)]);
        assert_eq!(r.values.to_vec(), vec![(Bytes::from_static(b"GARCIA"), 20)]);
        assert!(t.query(&q("Author=Garci"), &opts).is_empty());
        assert!(t.query(&q("Title=Garcia"), &opts).is_empty());
    }

    #[test]
    fn substring_rfc_example() {
        let t = sample();
        let r = t.query(&q("DOCUMENT:Author~Garcia"), &QueryOptions::default());
        assert_eq!(
            summary(&r),
            vec![("1.2".into(), 20, true), ("1.1".into(), 13, true)]
        );
        assert_eq!(r[1].matched_values, 2);
        // One spelling stands for all that fold together.
        let (value, count) = r[1].values.get(0).unwrap();
        assert!(value.eq_ignore_ascii_case(b"garcia"));
        assert_eq!(count, 10);
    }

    #[test]
    fn single_term_order_matches_rank_order() {
        // Equal counts: higher ratio (smaller total) first, then DSI; the fast path must
        // agree with `rank_order` (the general path). (A total of 0 ranks last, but a hint
        // with counts and no total is refused, so none is here.)
        let t = RoutingTable::new(TableConfig::default());
        for (d, total, count) in [
            ("1.5", 20, 5),
            ("1.4", 10, 5),
            ("1.3", 5, 5),
            ("1.2", 5, 5),
            ("1.1", 9, 9),
            ("1.6", 1, 1),
        ] {
            let lists: &Lists<'_> = &[("DOCUMENT", "Author", &[("Smith", count)])];
            t.replace(meta(d), &hint(total, lists)).unwrap();
        }
        let fast = t.query(&q("Author=smith"), &QueryOptions::default());
        let order: Vec<String> = fast.iter().map(|r| r.dsi.to_string()).collect();
        assert_eq!(order, ["1.1", "1.2", "1.3", "1.4", "1.5", "1.6"]);
        let general = t.query(
            &q("Author=smith"),
            &QueryOptions {
                max_values: TALLY_MAX_VALUES + 1,
                ..QueryOptions::default()
            },
        );
        assert_eq!(summary(&fast), summary(&general));
        let routes: Vec<String> = t
            .route(&q("Author=smith"), &QueryOptions::default())
            .iter()
            .map(|r| r.meta.dsi.to_string())
            .collect();
        assert_eq!(routes, order);
    }

    #[test]
    fn conjunction_takes_the_minimum() {
        let t = sample();
        let r = t.query(&q("Author~garcia & Author=smith"), &QueryOptions::default());
        assert_eq!(summary(&r), vec![("1.2".into(), 5, true)]);
        let e = t.explain(&q("Author~garcia & Author=smith"), &QueryOptions::default());
        assert!(e[0].rank.contains("min(20, 5)"), "{}", e[0].rank);
        // The first spelling the table saw names the attribute.
        assert_eq!(
            e[0].terms[1].matches[0].attribute,
            spec("DOCUMENT", "Author")
        );
    }

    /// Imports `hints` as peers `1.0`, `1.1`, ...: in one batch (one segment) or one by one.
    fn load(t: &RoutingTable, hints: &[CipHint], bulk: bool) {
        if bulk {
            let r = t.replace_all(
                hints
                    .iter()
                    .enumerate()
                    .map(|(p, h)| (meta(&format!("1.{p}")), h)),
            );
            assert!(r.iter().all(Result::is_ok));
        } else {
            for (p, h) in hints.iter().enumerate() {
                t.replace(meta(&format!("1.{p}")), h).unwrap();
            }
        }
    }

    /// A background build that panics still counts itself done: waiting for the
    /// summaries never hangs on it.
    #[test]
    fn a_failed_summary_build_is_not_waited_for() {
        let t = RoutingTable::default();
        let build = PendingBuild::new(&t.pending);
        assert_eq!(t.stats().summaries_pending, 1);
        let thread = std::thread::spawn(move || {
            let _build = build;
            panic!("summary build failed (on purpose, in a test)");
        });
        assert!(thread.join().is_err());
        t.wait_for_summaries();
        assert_eq!(t.stats().summaries_pending, 0);
    }

    /// A value held in several segments lists, for each peer, the spelling of the segment
    /// holding that peer's posting.
    #[test]
    fn exact_values_keep_each_segments_spelling() {
        let t = RoutingTable::default();
        // The first hint is more than twice the second, so the two segments stay apart.
        let first: &[(&str, u64)] = &[("Garcia", 3), ("a", 1), ("b", 1), ("c", 1), ("d", 1)];
        let hints = [
            hint(10, &[("DOCUMENT", "Author", first)]),
            hint(10, &[("DOCUMENT", "Author", &[("GARCIA", 5)])]),
        ];
        load(&t, &hints, false);
        assert_eq!(t.stats().segments, 2);
        let r = t.query(&q("DOCUMENT:Author=garcia"), &QueryOptions::default());
        let listed: Vec<(String, Vec<(Bytes, u64)>)> = r
            .iter()
            .map(|r| (r.dsi.to_string(), r.values.to_vec()))
            .collect();
        assert_eq!(
            listed,
            [
                ("1.1".to_string(), vec![(Bytes::from_static(b"GARCIA"), 5)]),
                ("1.0".to_string(), vec![(Bytes::from_static(b"Garcia"), 3)])
            ]
        );
    }

    /// Counts past 32 bits rank as exactly as small ones (the wide rank keys), in both the
    /// direct exact path (one bulk segment) and the summing one.
    #[test]
    fn counts_past_32_bits_rank_exactly() {
        let big = 5_000_000_000u64;
        for bulk in [true, false] {
            let t = RoutingTable::default();
            let total = 2 * big;
            let hints = [
                hint(
                    total,
                    &[("DOCUMENT", "Author", &[("Garcia", big), ("Garcin", 7)])],
                ),
                hint(
                    total,
                    &[("DOCUMENT", "Author", &[("Garcia", u64::from(u32::MAX))])],
                ),
                hint(
                    total,
                    &[("DOCUMENT", "Author", &[("Garcia", 3), ("Garcin", big)])],
                ),
            ];
            load(&t, &hints, bulk);
            let opts = QueryOptions::default();
            assert_eq!(
                summary(&t.query(&q("DOCUMENT:Author=garcia"), &opts)),
                vec![
                    ("1.0".into(), big, true),
                    ("1.1".into(), u64::from(u32::MAX), true),
                    ("1.2".into(), 3, true)
                ],
                "bulk {bulk}"
            );
            // Sums over two values: big + 7 for 1.0, big + 3 for 1.2.
            assert_eq!(
                summary(&t.query(&q("DOCUMENT:Author~garci"), &opts)),
                vec![
                    ("1.0".into(), big + 7, true),
                    ("1.2".into(), big + 3, true),
                    ("1.1".into(), u64::from(u32::MAX), true)
                ],
                "bulk {bulk}"
            );
        }
    }

    /// An exact answer from one segment lists its one value for every referral, whether
    /// the value is held inline (short) or in the answer's buffer (long).
    #[test]
    fn exact_answers_list_their_one_value() {
        let long = "A value well over forty-six bytes long, to leave the inline slot";
        for value in ["Garcia", long] {
            let t = RoutingTable::default();
            let hints = [
                hint(10, &[("DOCUMENT", "Author", &[(value, 3), ("x", 1)])]),
                hint(20, &[("DOCUMENT", "Author", &[(value, 5)])]),
            ];
            load(&t, &hints, true);
            assert_eq!(t.stats().segments, 1);
            let opts = QueryOptions::default();
            let text = format!("DOCUMENT:Author=\"{}\"", value.to_ascii_uppercase());
            let answer = t.answer(&q(&text), &opts);
            type Listed = Vec<(String, Vec<(Vec<u8>, u64)>)>;
            let got: Listed = answer
                .iter()
                .map(|r| {
                    let values = r.values().map(|(v, c)| (v.to_vec(), c)).collect();
                    (r.dsi().to_string(), values)
                })
                .collect();
            let v = value.as_bytes().to_vec();
            assert_eq!(
                got,
                [
                    ("1.1".to_string(), vec![(v.clone(), 5)]),
                    ("1.0".to_string(), vec![(v.clone(), 3)])
                ]
            );
            let owned = t.query(&q(&text), &opts);
            assert_eq!(owned[1].values, vec![(Bytes::from(v), 3)]);
            assert_eq!(owned[1].matched_values, 1);
        }
    }

    /// Twelve peers' values made of a few syllables (so that substrings match many of them,
    /// in mixed case), with their hints over two attributes.
    fn syllable_peers() -> (Vec<Vec<(String, u64)>>, Vec<CipHint>) {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        const SYL: [&str; 6] = ["an", "Ber", "cor", "dal", "EL", "tor"];
        let value = |next: &mut dyn FnMut(u64) -> u64| {
            let mut v = String::new();
            for _ in 0..2 + next(3) {
                v.push_str(SYL[next(SYL.len() as u64) as usize]);
                if next(3) == 0 {
                    v.push(' ');
                }
            }
            v
        };
        let mut peers: Vec<Vec<(String, u64)>> = Vec::new();
        for _ in 0..12 {
            peers.push((0..40).map(|_| (value(&mut next), 1 + next(9))).collect());
        }
        let hints = peers
            .iter()
            .enumerate()
            .map(|(p, list)| {
                let es: Vec<(&str, u64)> = list.iter().map(|(v, c)| (v.as_str(), *c)).collect();
                // Two attributes, so that lookups under one of them skip the other's sums.
                let (a, b) = es.split_at(es.len() / 3);
                hint(
                    100 + p as u64,
                    &[("DOCUMENT", "Author", b), ("DOCUMENT", "Title", a)],
                )
            })
            .collect();
        (peers, hints)
    }

    /// Memoized substring sums answer as scanning does: when first computed, when read
    /// back, after hints were replaced or removed (their slots dead in the memoized
    /// segment), and with a budget so small that entries keep being forgotten.
    #[test]
    fn memoized_sums_answer_as_scanning_does() {
        let (peers, hints) = syllable_peers();
        let off = SummaryConfig {
            min_values: usize::MAX,
            ..SummaryConfig::everything()
        };
        // No n-gram summarized; every substring memoized.
        let memo = |bytes: usize| SummaryConfig {
            min_matches: usize::MAX,
            memo_bytes: bytes,
            memo_min_candidates: 1,
            ..SummaryConfig::everything()
        };
        let build = |cfg: SummaryConfig| {
            let t = RoutingTable::new(TableConfig {
                summaries: cfg,
                ..TableConfig::default()
            });
            load(&t, &hints, true);
            t
        };
        let plain = build(off);
        let memoized = build(memo(64 << 20));
        let tiny = build(memo(3000));
        assert_eq!(memoized.stats().summaries, 0);
        let compare = |round: &str| {
            for list in &peers {
                for (v, _) in list.iter().take(4) {
                    let lower = v.to_ascii_lowercase();
                    for len in 1..=8.min(lower.len()) {
                        let needle = &lower[lower.len() - len..];
                        for (attr, k, limit) in
                            [("Author", 0, 3), ("Author", 3, 100), ("Title", 5, 4)]
                        {
                            let opts = QueryOptions {
                                limit,
                                max_values: k,
                                ..QueryOptions::default()
                            };
                            let text = format!("DOCUMENT:{attr}~\"{needle}\"");
                            let want = plain.query(&q(&text), &opts);
                            for t in [&memoized, &tiny] {
                                // Computed, then read back.
                                for pass in 0..2 {
                                    assert_eq!(
                                        t.query(&q(&text), &opts),
                                        want,
                                        "{round}: {text} k {k} limit {limit} pass {pass}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        };
        compare("loaded");
        let st = memoized.stats();
        assert!(st.memoized > 20 && st.memo_bytes > 0, "{st:?}");
        // Each needle computed once, then read back (the second pass, and the first pass
        // of the queries asking it again).
        assert!(st.memo_computed >= st.memoized as u64, "{st:?}");
        assert!(st.memo_hits >= st.memo_computed, "{st:?}");
        assert!(tiny.stats().memo_bytes <= 3000);
        // Replace two peers' hints with others' values and remove a third: their slots
        // die in the memoized segment.
        for t in [&plain, &memoized, &tiny] {
            for (p, from) in [(0usize, 5usize), (1, 7)] {
                t.replace(meta(&format!("1.{p}")), &hints[from]).unwrap();
            }
            assert!(t.remove(&Dsi::new("1.2").unwrap()));
        }
        compare("after replacing");
        // Merging everything drops the old segments and their memo charge with them.
        memoized.compact();
        let st = memoized.stats();
        assert_eq!(st.segments, 1);
        assert_eq!(st.memoized, 0, "{st:?}");
        assert_eq!(st.memo_bytes, 0);
        compare("after merging");
    }

    /// A substring term is quick once every big segment has its sums; other shapes of
    /// query are not, whatever is cached.
    #[test]
    fn substring_queries_are_quick_once_their_sums_are_kept() {
        let (_, hints) = syllable_peers();
        let t = RoutingTable::new(TableConfig {
            summaries: SummaryConfig {
                min_values: 1,
                min_matches: usize::MAX,
                memo_bytes: 1 << 20,
                memo_min_candidates: 1,
                ..SummaryConfig::everything()
            },
            ..TableConfig::default()
        });
        load(&t, &hints, true);
        let opts = QueryOptions::default();
        assert!(t.answers_quickly(&q("DOCUMENT:Author=anber"), &opts));
        assert!(
            t.answers_quickly(&q("DOCUMENT:Nothing~anb"), &opts),
            "no such attribute"
        );
        // The table is smaller than QUICK_SCAN_VALUES: any substring is quick.
        assert!(t.answers_quickly(&q("DOCUMENT:Author~anb"), &opts));
        // Past it, only once the sums are kept.
        let big: Vec<CipHint> = (0..30)
            .map(|p| {
                let values: Vec<String> = (0..800).map(|i| format!("anber {p} {i}")).collect();
                let es: Vec<(&str, u64)> = values.iter().map(|v| (v.as_str(), 1)).collect();
                hint(1000, &[("DOCUMENT", "Author", &es)])
            })
            .collect();
        let r = t.replace_all(
            big.iter()
                .enumerate()
                .map(|(p, h)| (meta(&format!("2.{p}")), h)),
        );
        assert!(r.iter().all(Result::is_ok));
        assert!(t.stats().distinct_values >= QUICK_SCAN_VALUES);
        let term = q("DOCUMENT:Author~anber");
        assert!(!t.answers_quickly(&term, &opts));
        let first = t.query(&term, &opts);
        assert!(t.answers_quickly(&term, &opts));
        assert_eq!(t.query(&term, &opts), first);
        assert!(!t.answers_quickly(&q("DOCUMENT:Author~anbe"), &opts));
        // Two terms, possible referrals or many values per referral take the general path.
        assert!(!t.answers_quickly(&q("DOCUMENT:Author~anber & DOCUMENT:Author=x"), &opts));
        let possible = QueryOptions {
            include_possible: true,
            ..QueryOptions::default()
        };
        assert!(!t.answers_quickly(&term, &possible));
        let many = QueryOptions {
            max_values: SUMMARY_TOPS + 1,
            ..QueryOptions::default()
        };
        assert!(!t.answers_quickly(&term, &many));
        // Through a thesaurus naming one attribute the same sums serve; naming two, the
        // general path.
        let with = |text: &str| QueryOptions {
            thesaurus: Some(Arc::new(crate::thesaurus::Thesaurus::parse(text).unwrap())),
            ..QueryOptions::default()
        };
        assert!(t.answers_quickly(&term, &with("DOCUMENT:Author = DC:Creator\n")));
        assert!(!t.answers_quickly(&term, &with("DOCUMENT:Author = DOCUMENT:Title\n")));
    }

    /// Summaries change only speed: with every n-gram summarized, bulk and incremental
    /// segments answer every substring query as scanning does.
    #[test]
    fn summaries_answer_as_scanning_does() {
        let (peers, hints) = syllable_peers();
        let forced = SummaryConfig::everything();
        let off = SummaryConfig {
            min_values: usize::MAX,
            ..forced
        };
        let build = |cfg: SummaryConfig, bulk: bool| {
            let t = RoutingTable::new(TableConfig {
                summaries: cfg,
                ..TableConfig::default()
            });
            load(&t, &hints, bulk);
            t
        };
        let plain = build(off, true);
        assert_eq!(plain.stats().summaries, 0);
        for (bulk, background) in [(true, false), (false, false), (true, true)] {
            let summed = build(
                SummaryConfig {
                    background,
                    ..forced
                },
                bulk,
            );
            // Queries while the summaries are being built (in the background case) and
            // after: the answers never change.
            let compare = |summed: &RoutingTable| {
                let mut asked = 0;
                for list in &peers {
                    for (v, _) in list.iter().take(6) {
                        let lower = v.to_ascii_lowercase();
                        for len in 3..=7.min(lower.len()) {
                            for at in [0, lower.len() - len] {
                                let needle = &lower[at..at + len];
                                for (k, limit) in [(0, 3), (1, 100), (3, 5), (5, 100), (7, 2)] {
                                    let opts = QueryOptions {
                                        limit,
                                        max_values: k,
                                        ..QueryOptions::default()
                                    };
                                    let text = format!("DOCUMENT:Author~\"{needle}\"");
                                    let want = plain.query(&q(&text), &opts);
                                    let got = summed.query(&q(&text), &opts);
                                    assert_eq!(got, want, "{text} k {k} limit {limit} bulk {bulk}");
                                    let routes = |t: &RoutingTable| -> Vec<(String, u64)> {
                                        t.route(&q(&text), &opts)
                                            .iter()
                                            .map(|r| (r.meta.dsi.to_string(), r.count))
                                            .collect()
                                    };
                                    assert_eq!(routes(summed), routes(&plain), "{text}");
                                    asked += 1;
                                }
                            }
                        }
                    }
                }
                asked
            };
            std::thread::scope(|s| {
                let during = s.spawn(|| compare(&summed));
                summed.wait_for_summaries();
                assert!(during.join().is_ok_and(|n| n > 500));
            });
            let st = summed.stats();
            assert!(st.summaries > 0);
            assert_eq!(st.summaries_pending, 0);
            let asked = compare(&summed);
            assert!(asked > 500);
        }
    }

    #[test]
    fn possible_referrals_follow_definite_ones() {
        let t = sample();
        let mut h = hint(1000, &[("DOCUMENT", "Author", &[("Other", 50)])]);
        h.thresholds.push((spec("DOCUMENT", "Author"), 10));
        t.replace(meta("1.4"), &h).unwrap();
        let opts = QueryOptions {
            include_possible: true,
            ..QueryOptions::default()
        };
        let r = t.query(&q("DOCUMENT:Author=Garcia"), &opts);
        assert_eq!(summary(&r).last(), Some(&("1.4".into(), 0, false)));
        assert_eq!(r.last().unwrap().threshold, Some(10));
        assert_eq!(r.len(), 3);
        assert_eq!(
            t.query(&q("DOCUMENT:Author=Garcia"), &QueryOptions::default())
                .len(),
            2
        );
        let e = t.explain(&q("DOCUMENT:Author=Garcia"), &opts);
        assert_eq!(e[2].terms[0].status, TermStatus::Possible { threshold: 10 });
    }

    #[test]
    fn replace_remove_expire() {
        let t = sample();
        let out = t
            .replace(
                meta("1.1"),
                &hint(5, &[("DOCUMENT", "Author", &[("Nobody", 1)])]),
            )
            .unwrap();
        assert!(out.replaced);
        assert_eq!(
            summary(&t.query(&q("DOCUMENT:Author=garcia"), &QueryOptions::default())),
            vec![("1.2".into(), 20, true)]
        );
        assert!(t.remove(&dsi("1.2")));
        assert!(!t.remove(&dsi("1.2")));
        assert!(
            t.query(&q("DOCUMENT:Author=garcia"), &QueryOptions::default())
                .is_empty()
        );
        let mut m = meta("1.5");
        m.expires = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(10));
        t.replace(m, &hint(1, &[("DOCUMENT", "Author", &[("Garcia", 1)])]))
            .unwrap();
        let late = QueryOptions {
            now: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(20)),
            ..QueryOptions::default()
        };
        assert!(t.query(&q("DOCUMENT:Author=garcia"), &late).is_empty());
        assert_eq!(
            t.query(&q("DOCUMENT:Author=garcia"), &QueryOptions::default())
                .len(),
            1
        );
        assert_eq!(
            t.expire(SystemTime::UNIX_EPOCH + Duration::from_secs(5)),
            Vec::<Dsi>::new()
        );
        assert_eq!(
            t.expire(SystemTime::UNIX_EPOCH + Duration::from_secs(10)),
            vec![dsi("1.5")]
        );
        let peers: Vec<String> = t.peers().iter().map(|p| p.dsi.to_string()).collect();
        assert_eq!(peers, vec!["1.1", "1.3"]);
        t.compact();
        let st = t.stats();
        assert_eq!(
            (st.peers, st.segments, st.entries, st.dead_entries),
            (2, 1, 2, 0)
        );
    }

    #[test]
    fn thesaurus_at_query_time() {
        let t = RoutingTable::default();
        t.replace(
            meta("1.1"),
            &hint(10, &[("Dublin-Core-1", "CREATOR", &[("Garcia", 4)])]),
        )
        .unwrap();
        let plain = QueryOptions::default();
        assert!(t.query(&q("DOCUMENT:Author=garcia"), &plain).is_empty());
        let th = Thesaurus::parse("DOCUMENT:Author = FILE:Author = Dublin-Core-1:CREATOR").unwrap();
        let opts = QueryOptions {
            thesaurus: Some(Arc::new(th)),
            ..QueryOptions::default()
        };
        assert_eq!(
            summary(&t.query(&q("DOCUMENT:Author=garcia"), &opts)),
            vec![("1.1".into(), 4, true)]
        );
        assert_eq!(
            summary(&t.query(&q("Author~GARC"), &opts)),
            vec![("1.1".into(), 4, true)]
        );
    }

    #[test]
    fn refuses_loops() {
        let t = sample();
        assert!(matches!(
            t.replace(meta("9.9"), &hint(1, &[])),
            Err(ImportError::OwnDsi { .. })
        ));
        let mut h = hint(1, &[("DOCUMENT", "Author", &[("x", 1)])]);
        h.extra
            .push(cip_proto::soif::Attribute::new("Provenance-1", "1.7").unwrap());
        h.extra
            .push(cip_proto::soif::Attribute::new("provenance-2", "9.9").unwrap());
        assert_eq!(
            t.replace(meta("1.7"), &h),
            Err(ImportError::Loop {
                peer: dsi("1.7"),
                node: dsi("9.9")
            })
        );
        h.extra[1] = cip_proto::soif::Attribute::new("Provenance-2", "1.02").unwrap();
        assert!(matches!(
            t.replace(meta("1.7"), &h),
            Err(ImportError::BadProvenance { .. })
        ));
        h.extra.pop();
        t.replace(meta("1.7"), &h).unwrap();
        let p = t.peers().into_iter().find(|p| p.dsi == dsi("1.7")).unwrap();
        assert_eq!(p.provenance, vec![dsi("1.7")]);
    }

    #[test]
    fn limits_are_enforced() {
        let limits = TableLimits {
            max_peers: 1,
            max_value_len: 3,
            ..TableLimits::default()
        };
        let t = RoutingTable::new(TableConfig {
            node: None,
            limits,
            ..TableConfig::default()
        });
        t.replace(meta("1.1"), &hint(1, &[("D", "A", &[("abc", 1)])]))
            .unwrap();
        assert!(matches!(
            t.replace(meta("1.1"), &hint(1, &[("D", "A", &[("abcd", 1)])])),
            Err(ImportError::ValueTooLong {
                index: 0,
                len: 4,
                max: 3,
                ..
            })
        ));
        assert_eq!(
            t.replace(meta("1.2"), &hint(1, &[])),
            Err(ImportError::TooManyPeers { max: 1 })
        );
        // The refused replacement left the old hint in place.
        assert_eq!(t.query(&q("A=abc"), &QueryOptions::default()).len(), 1);
    }

    #[test]
    fn memory_budgets_are_enforced_at_import() {
        // "abc" costs 3 + 73 bytes: a per-peer budget of 200 takes two such entries, a table
        // budget of 400 five.
        let t = RoutingTable::new(TableConfig {
            limits: TableLimits {
                max_peer_bytes: 200,
                max_table_bytes: 400,
                ..TableLimits::default()
            },
            ..TableConfig::default()
        });
        let two = hint(10, &[("D", "A", &[("abc", 4), ("abd", 1)])]);
        assert_eq!(budget_bytes(&two), 152);
        let three = hint(10, &[("D", "A", &[("abc", 4), ("abd", 1), ("abe", 1)])]);
        assert_eq!(
            t.replace(meta("1.1"), &three).unwrap_err(),
            ImportError::OverPeerBudget {
                bytes: 228,
                max: 200
            }
        );
        t.replace(meta("1.1"), &two).unwrap();
        t.replace(meta("1.2"), &two).unwrap();
        assert_eq!(t.stats().budget_bytes, 304);
        let e = t.replace(meta("1.3"), &two).unwrap_err();
        assert_eq!(
            e,
            ImportError::OverTableBudget {
                bytes: 152,
                held: 304,
                max: 400
            }
        );
        assert!(e.to_string().contains("limits.max_table_bytes"), "{e}");
        // Replacing a held hint frees its own charge first; removing one frees room.
        let one = hint(10, &[("D", "A", &[("abc", 4)])]);
        t.replace(meta("1.2"), &one).unwrap();
        assert_eq!(t.stats().budget_bytes, 228);
        t.replace(meta("1.3"), &two).unwrap();
        assert_eq!(t.stats().budget_bytes, 380);
        assert!(t.replace(meta("1.4"), &one).is_err());
        t.remove(&dsi("1.1"));
        t.replace(meta("1.4"), &one).unwrap();
        assert_eq!(t.stats().budget_bytes, 304);
        // The bulk path charges each hint of the batch against the ones before it.
        let t = RoutingTable::new(TableConfig {
            limits: TableLimits {
                max_table_bytes: 400,
                ..TableLimits::default()
            },
            ..TableConfig::default()
        });
        let results = t.replace_all([
            (meta("2.1"), two.clone()),
            (meta("2.2"), two.clone()),
            (meta("2.3"), two.clone()),
        ]);
        assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
        assert!(
            matches!(results[2], Err(ImportError::OverTableBudget { .. })),
            "{results:?}"
        );
        assert_eq!(t.peers().len(), 2);
    }

    #[test]
    fn implausible_counts_are_refused_and_the_old_hint_stays() {
        let t = RoutingTable::new(TableConfig {
            limits: TableLimits {
                max_total_objects: 1000,
                ..TableLimits::default()
            },
            ..TableConfig::default()
        });
        t.replace(meta("1.1"), &hint(10, &[("D", "A", &[("abc", 4)])]))
            .unwrap();
        let generation = t.generation();
        // A count above the hint's own total.
        assert_eq!(
            t.replace(
                meta("1.1"),
                &hint(10, &[("D", "A", &[("abc", 3), ("x", 11)])])
            ),
            Err(ImportError::CountAboveTotal {
                attribute: "D:A".into(),
                index: 1,
                count: 11,
                total: 10
            })
        );
        // Counts without a total cannot be true either.
        assert!(matches!(
            t.replace(meta("1.1"), &hint(0, &[("D", "A", &[("abc", 1)])])),
            Err(ImportError::CountAboveTotal { total: 0, .. })
        ));
        // A total above the ceiling, however consistent its counts.
        assert_eq!(
            t.replace(meta("1.1"), &hint(u64::MAX, &[("D", "A", &[("abc", 9)])])),
            Err(ImportError::ImplausibleTotal {
                total: u64::MAX,
                max: 1000
            })
        );
        let refused = t.replace_all([(meta("1.2"), hint(1001, &[("D", "A", &[("abc", 1)])]))]);
        assert!(matches!(
            refused[0],
            Err(ImportError::ImplausibleTotal { .. })
        ));
        // Nothing changed: the honest hint still answers, nothing was published.
        let r = t.query(&q("A=abc"), &QueryOptions::default());
        assert_eq!(summary(&r), vec![("1.1".into(), 4, true)]);
        assert_eq!(t.peers().len(), 1);
        assert_eq!(t.generation(), generation);
    }

    #[test]
    fn a_bulk_load_piles_segments_up_and_merges_them_at_its_end() {
        let t = RoutingTable::default();
        t.set_bulk_load(true);
        for i in 0..6u64 {
            let v = format!("v{i}");
            let h = hint(10, &[("D", "A", &[("shared", 1 + i), (v.as_str(), 2)])]);
            // One at a time, and in batches, which leave the trigram index for later.
            if i < 3 {
                t.replace(meta(&format!("1.{i}")), &h).unwrap();
            } else {
                assert!(t.replace_all([(meta(&format!("1.{i}")), &h)])[0].is_ok());
            }
        }
        assert_eq!(t.stats().segments, 6, "no tiered merges during the load");
        let grams = |t: &RoutingTable| -> Vec<bool> {
            t.current
                .load()
                .segments
                .iter()
                .map(|s| s.has_grams())
                .collect()
        };
        assert_eq!(grams(&t), [true, true, true, false, false, false]);
        let ask =
            |t: &RoutingTable, text: &str| summary(&t.query(&q(text), &QueryOptions::default()));
        let during = ask(&t, "A=shared");
        let during_substring = [ask(&t, "A~hare"), ask(&t, "A~v4"), ask(&t, "A~ar")];
        assert_eq!(during_substring[0], during);
        assert_eq!(during_substring[1], vec![("1.4".into(), 2, true)]);
        let generation = t.generation();
        t.set_bulk_load(false);
        assert_eq!(t.stats().segments, 1);
        assert_eq!(grams(&t), [true]);
        assert_eq!(ask(&t, "A=shared"), during);
        assert_eq!(
            [ask(&t, "A~hare"), ask(&t, "A~v4"), ask(&t, "A~ar")],
            during_substring
        );
        assert_eq!(during.len(), 6);
        assert_eq!(t.generation(), generation, "the merge changes no contents");
        assert_eq!(t.stats().distinct_values, 7);
    }

    #[test]
    fn generation_counts_changes() {
        let t = RoutingTable::default();
        assert_eq!(t.generation(), 0);
        t.replace(meta("1.1"), &hint(5, &[("D", "A", &[("abc", 4)])]))
            .unwrap();
        assert_eq!(t.generation(), 1);
        t.replace_all([(meta("1.2"), hint(5, &[("D", "A", &[("x", 1)])]))]);
        assert_eq!(t.generation(), 2);
        assert!(t.remove(&dsi("1.1")));
        assert_eq!(t.generation(), 3);
        assert!(!t.remove(&dsi("1.1")), "nothing removed, nothing published");
        assert_eq!(t.generation(), 3);
        // Same contents: new expiry, same generation.
        let mut m = meta("1.2");
        m.expires = Some(SystemTime::UNIX_EPOCH);
        assert!(t.refresh(m));
        assert_eq!(t.generation(), 3);
        assert!(
            t.query(
                &q("A=x"),
                &QueryOptions {
                    now: Some(SystemTime::now()),
                    ..QueryOptions::default()
                }
            )
            .is_empty(),
            "the new expiry counts"
        );
        assert!(!t.refresh(meta("1.7")));
        assert_eq!(t.refresh_all([meta("1.2"), meta("1.7")]), [true, false]);
        t.compact();
        assert_eq!(t.generation(), 3);
    }

    #[test]
    fn entries_lists_rows() {
        let t = sample();
        let rows = t.entries(None, None, Some(b"gar"), 10);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].total, 30);
        assert_eq!(rows[0].peers, vec![(dsi("1.1"), 10), (dsi("1.2"), 20)]);
        assert_eq!(rows[1].attribute, spec("FILE", "Author"));
        let rows = t.entries(
            Some(&spec("document", "author")),
            Some(&dsi("1.2")),
            None,
            1,
        );
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].value.clone(), rows[0].total),
            (Bytes::from_static(b"GARCIA"), 20)
        );
    }

    #[test]
    fn many_replacements_keep_segments_few_and_slots_bounded() {
        let t = RoutingTable::default();
        for round in 0..30u64 {
            for p in 0..20 {
                let v = format!("v{p}");
                t.replace(
                    meta(&format!("2.{p}")),
                    &hint(round + 1, &[("D", "A", &[(&v, round + 1), ("shared", 1)])]),
                )
                .unwrap();
            }
        }
        let st = t.stats();
        assert!(st.segments <= 8, "{st:?}");
        assert!(st.dead_entries <= st.entries, "{st:?}");
        assert!(t.snapshot().slots.len() <= 80);
        let r = t.query(&q("A=shared"), &QueryOptions::default());
        assert_eq!(r.len(), 20);
        assert!(r.iter().all(|r| r.count == 1 && r.total == 30));
        assert_eq!(t.query(&q("A=v3"), &QueryOptions::default())[0].count, 30);
    }

    #[test]
    fn broad_substring_counts_every_value() {
        let t = RoutingTable::default();
        for p in 0..3u64 {
            let values: Vec<String> = (0..400).map(|i| format!("value {i}")).collect();
            let entries: Vec<(&str, u64)> = values.iter().map(|v| (v.as_str(), p + 1)).collect();
            t.replace(
                meta(&format!("3.{p}")),
                &hint(1000, &[("D", "A", &entries)]),
            )
            .unwrap();
        }
        let r = t.query(&q("A~VALUE"), &QueryOptions::default());
        assert_eq!(
            summary(&r),
            vec![
                ("3.2".into(), 1200, true),
                ("3.1".into(), 800, true),
                ("3.0".into(), 400, true)
            ]
        );
        assert!(
            r.iter()
                .all(|r| r.matched_values == 400 && r.values.len() == 5)
        );
        let r = t.query(&q("A~lue 39"), &QueryOptions::default());
        assert_eq!(r[0].matched_values, 11);
    }

    proptest::proptest! {
        /// `rank_keys` keeps the `limit` smallest keys, ascending, like a full sort.
        #[test]
        fn rank_keys_is_a_partial_sort(
            keys in proptest::collection::btree_set(proptest::prelude::any::<u128>(), 0..80),
            limit in 0usize..90,
            shuffle in proptest::prelude::any::<u64>(),
        ) {
            let mut sorted: Vec<u128> = keys.into_iter().collect();
            let mut got = sorted.clone();
            // A deterministic shuffle: rotate, then reverse every other run.
            if !got.is_empty() {
                let len = got.len();
                got.rotate_left(shuffle as usize % len);
                for chunk in got.chunks_mut(3).step_by(2) {
                    chunk.reverse();
                }
            }
            rank_keys(&mut got, limit);
            sorted.truncate(limit);
            proptest::prop_assert_eq!(got, sorted);
        }
    }
}
