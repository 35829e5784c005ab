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
//!   live ones is rewritten (one with none live is dropped). So the segment count stays
//!   logarithmic, each entry is rewritten a few times over its life, and a replacement never
//!   rebuilds the whole index. A slot's
//!   posting of a value under an attribute always sits in exactly one segment (a whole
//!   import's in one; a delta applied in place may spread them, see "Deltas in place"); a
//!   dead slot number is reused only once no
//!   segment refers to it;
//! * `attrs`: the table-wide attribute dictionary, keyed by lowercase template and lowercase
//!   attribute base name (RFC 2655 §3.3, §4), with the first spelling seen.
//!
//! [`RoutingTable::replace_all`] imports many hints into one new segment, interning values
//! in a hash map and sorting only the distinct ones: the path for loading at start-up.
//! During a bulk load ([`RoutingTable::set_bulk_load`]) its segments get no substring index
//! (substring searches scan them) until the final merge indexes everything once.
//! Writes run on the caller's thread and may take a while when they trigger a big merge:
//! call them from a blocking task, not an async executor thread.
//!
//! This module holds the writers (imports, removals, merges) and the import checks; the
//! table's state (the table, its snapshot, peer entries and attribute dictionary) is in
//! `state`, the configuration and import limits are in `config`, the read side (query
//! evaluation, tallies, ranking, answers) is in `eval`, and the tests are in `tests`.
//! `state` and `config` import nothing from the other two, and `eval` nothing from this
//! module.
//!
//! # Queries
//!
//! A term's matching values come from each segment's exact table or substring index; their
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
//! precomputed sums instead (its broad summaries): its cost would otherwise be bounded
//! only by the number of postings to add. A narrower needle that still matched many
//! candidates in a big segment has the same sums computed in its pass and kept with the
//! segment for its next asking (the substring cache, bounded by
//! [`SummaryConfig::memo_bytes`]). Below the broad share, every 4- to 6-byte needle held by
//! enough values has the first slots of its page precomputed (narrow summaries), so that a
//! first asking reads those; a needle of that length without them is held by few values and
//! is summed on the spot. All three are [`crate::substring`]'s.
//!
//! Other queries (several terms, possible referrals, many values) rank candidates over all
//! terms, then a second pass collects the matched values of just the `limit` best.
//! Attribute names resolve without allocating, and the last resolution is cached per
//! thread.
//!
//! # Deltas in place
//!
//! [`RoutingTable::apply_delta`] takes a peer's changed entries (a hint delta's, with their
//! counts before and after) and keeps the peer's slot. Per changed value (case-folded), the
//! records holding the peer's postings of it are copied whole, with every other peer's
//! postings, into one new small segment (the *patch*) with the change applied, and the
//! segments they came from get a new version that hides them: a hidden value keeps its
//! bytes and lookup entries, but has no postings, so exact lookups, substring searches,
//! listings, merges and the out-bound aggregation all pass over it. So each
//! `(value, attribute, slot)` posting still sits in exactly one segment, and readers sum
//! and rank as before. A version shares everything but its hidden set with the segment it
//! replaces: a change costs its values' records and that set, not the peer's hint.
//!
//! Substring sums (summaries and the memo) are computed from a segment's records, hidden
//! ones included. A query finds the hidden values holding its needle (one `memmem` pass
//! over their text) and takes what they add off the sums, per slot; it uses the sums so
//! lessened where they stay exact (`eval::exact_lessened`: a cut block still holds the
//! page, a slot's best values listed still hold the page's values), and searches the
//! segment otherwise. A segment hiding more than 4,096 values and a sixteenth of its
//! values is rewritten by the merge policy, hidden entries counting as dead; the patches
//! merge tier by tier like any import's segment.
//!
//! # Loop prevention (digest A21)
//!
//! Every hint may carry `Provenance-N` attributes naming the DSIs of the datasets it was
//! aggregated from ([`crate::aggregate`]). Import refuses a hint whose DSI is this node's, or
//! whose provenance names this node's DSI, or that names more datasets than
//! [`TableLimits::max_provenance`] (CIP v1's hop count served the same end).
//!
//! [`QueryOptions::max_values`]: crate::rank::QueryOptions::max_values
//! [`Answer`]: crate::table::answer::Answer
//! [`Referral`]: crate::rank::Referral
//! [`SummaryConfig::memo_bytes`]: crate::substring::SummaryConfig::memo_bytes

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use cip_proto::Dsi;

use crate::hasher::RandomState;
use crate::hint::{AttrSpec, CipHint};
use crate::index::cache::CacheBudget;
use crate::index::{BulkBuilder, Segment, SegmentOverflow};
use crate::threads::on_threads;

pub mod answer;
mod changes;
mod charge;
mod config;
mod eval;
mod patch;
pub(crate) mod state;

pub use crate::peer::PeerMeta;
pub use charge::{ChargeScanner, MAX_CHARGE_PER_BYTE};
use config::entry_charge;
pub use config::{
    DEFAULT_MAX_ATTRIBUTES, DEFAULT_MAX_ENTRIES_PER_HINT, DEFAULT_MAX_PEER_BYTES,
    DEFAULT_MAX_PEERS, DEFAULT_MAX_PROVENANCE, DEFAULT_MAX_TABLE_BYTES, DEFAULT_MAX_TOTAL_OBJECTS,
    DEFAULT_MAX_VALUE_LEN, ENTRY_BUDGET_BYTES, PROVENANCE_BUDGET_BYTES, TableConfig, TableLimits,
    ThreadStart,
};
pub use config::{ImportError, ReplaceOutcome};
pub use eval::{Route, TableRow};
use patch::thresholds_of;
pub use patch::{CountChange, ListChanges};
pub use state::RoutingTable;
pub(crate) use state::Snapshot;
pub(crate) use state::attr_key;
use state::{PeerEntry, PendingBuild};

/// Name of the CIP-HINT attribute (with `-N` multi-value suffixes) that lists provenance
/// DSIs.
pub const PROVENANCE_ATTRIBUTE: &str = "Provenance";

/// Name of the CIP-HINT attribute that gives the route a passed-on hint came by: the DSIs
/// from the node that sent it to the dataset it describes, separated by spaces.
pub const PATH_ATTRIBUTE: &str = "Path";

/// The route a hint's `Path` attribute gives, in order; empty when it has none (a node's
/// own hint). A path that names a DSI twice is refused here; the caller checks the rest
/// (its ends, this node, its length).
///
/// # Errors
/// [`ImportError::BadPath`] for a value that is not a list of DSIs, or that repeats one.
pub fn path(hint: &CipHint) -> Result<Vec<Dsi>, ImportError> {
    let mut out: Vec<Dsi> = Vec::new();
    for a in hint
        .extra
        .iter()
        .filter(|a| a.name.as_str().eq_ignore_ascii_case(PATH_ATTRIBUTE))
    {
        let text = String::from_utf8_lossy(&a.value);
        for part in text.split_ascii_whitespace() {
            let dsi = Dsi::new(part).map_err(|e| ImportError::BadPath {
                value: text.to_string(),
                reason: format!("{part:?} is not a dsi: {e}"),
            })?;
            if out.contains(&dsi) {
                return Err(ImportError::BadPath {
                    value: text.to_string(),
                    reason: format!("it names {dsi} twice"),
                });
            }
            out.push(dsi);
        }
    }
    Ok(out)
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
    /// The route it came by ([`PeerMeta::path`]): empty for the peer's own hint.
    pub path: Vec<Dsi>,
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
    /// Broad n-grams summarized (see [`crate::substring`]), summed over segments.
    pub summaries: usize,
    /// Summary builds still running in the background.
    pub summaries_pending: usize,
    /// Approximate heap bytes of the summaries (included in `approx_bytes`).
    pub summary_bytes: usize,
    /// The hints' memory charge against [`TableLimits::max_table_bytes`] ([`budget_bytes`]).
    pub budget_bytes: u64,
    /// Substring needles whose sums are memoized ([`crate::substring`]), summed over segments.
    pub memoized: usize,
    /// Bytes those take (not in `approx_bytes`: bounded by
    /// [`SummaryConfig::memo_bytes`](crate::substring::SummaryConfig::memo_bytes)).
    pub memo_bytes: usize,
    /// Segment searches answered from memoized sums since the table was made.
    pub memo_hits: u64,
    /// Segment searches whose sums were computed for the memo (kept, or not when over
    /// its budget).
    pub memo_computed: u64,
}

/// A hint's weightlist entries with a count, as `(value, attribute id, count)`, read from
/// the hint where they are: a list of them would be as large again for a big hint.
#[derive(Debug, Default)]
struct HintEntries<'h> {
    lists: Vec<(u32, &'h crate::weightlist::Weightlist)>,
    /// Entries with a count.
    len: usize,
    /// Their values' bytes.
    bytes: usize,
}

impl<'h> HintEntries<'h> {
    fn iter(&self) -> impl Iterator<Item = (Cow<'h, [u8]>, u32, u64)> + '_ {
        self.lists.iter().flat_map(|&(id, list)| {
            list.iter()
                .filter(|&(_, count)| count > 0)
                .map(move |(value, count)| (value, id, count))
        })
    }
}

/// A bulk segment is flushed well before its 32-bit offsets could overflow.
const FLUSH_AT: usize = (u32::MAX / 2) as usize;

/// Batches of at least this many entries are indexed on several threads (tests take the
/// parallel path with small batches): a spool restore, and the batches of a big hub's
/// polled cold start (1,000 peers x 10,000 entries: the import queue's 187 hints are 1.87 M
/// entries). Each run adds a segment to the cold start's pile, but at 1 M entries a batch
/// indexed on two threads more than pays for the merge: every peer of that hub in the table
/// after 4.65-5.72 s (median 4.96 s over nine runs) instead of 5.69-6.43 s (median 5.80 s)
/// with batches of 64 hints on one thread.
const PARALLEL_BUILD_ENTRIES: usize = if cfg!(test) { 64 } else { 1_000_000 };

/// What [`add_run`] made of a run of hints: the values taken, not yet sorted into a segment.
struct Added {
    /// Segments already flushed (a run past `FLUSH_AT`).
    segments: Vec<Segment>,
    /// The values of the run's last hints.
    bulk: BulkBuilder,
    /// Per hint: `(index in the results, slot, distinct values, entries)`.
    counts: Vec<(usize, u32, usize, usize)>,
}

/// What [`finish_run`] made of a run of hints.
struct Built {
    segments: Vec<Segment>,
    /// Per hint: `(index in the results, slot, distinct values, entries)`.
    counts: Vec<(usize, u32, usize, usize)>,
}

/// Cuts `passed` into at most `threads` contiguous runs of about equal entries.
fn split_runs(
    passed: &[(usize, u32, HintEntries<'_>)],
    threads: usize,
) -> Vec<std::ops::Range<usize>> {
    let total: usize = passed.iter().map(|p| p.2.len).sum();
    let share = total.div_ceil(threads.max(1)).max(1);
    let mut runs = Vec::with_capacity(threads);
    let (mut start, mut sum) = (0, 0);
    for (k, p) in passed.iter().enumerate() {
        sum += p.2.len;
        if sum >= share && runs.len() + 1 < threads {
            runs.push(start..k + 1);
            (start, sum) = (k + 1, 0);
        }
    }
    if start < passed.len() {
        runs.push(start..passed.len());
    }
    runs
}

/// Takes the values of a run of checked hints into a bulk builder (flushing a segment
/// whenever it would pass `FLUSH_AT`). Once this is done the hints' text is no longer
/// needed: [`RoutingTable::replace_all`] drops it before [`finish_run`] sorts the values
/// into their segment.
fn add_run(
    run: &[(usize, u32, HintEntries<'_>)],
    hasher: &RandomState,
    grams: bool,
) -> Result<Added, SegmentOverflow> {
    let (entries, bytes) = run
        .iter()
        .fold((0usize, 0usize), |(n, b), p| (n + p.2.len, b + p.2.bytes));
    let mut bulk = BulkBuilder::default();
    // The builder's buffers sized for the whole run at once (see BulkBuilder::reserve).
    bulk.reserve(
        entries.min(FLUSH_AT),
        entries.min(FLUSH_AT),
        bytes.min(FLUSH_AT),
    );
    let mut added = Added {
        segments: Vec::new(),
        bulk: BulkBuilder::default(),
        counts: Vec::with_capacity(run.len()),
    };
    let (mut bulk_bytes, mut bulk_entries) = (0usize, 0usize);
    for (i, slot, entries) in run {
        if bulk_bytes + entries.bytes > FLUSH_AT || bulk_entries + entries.len > FLUSH_AT {
            let full = std::mem::take(&mut bulk);
            added.segments.push(full.finish(hasher, grams)?);
            (bulk_bytes, bulk_entries) = (0, 0);
        }
        bulk_bytes += entries.bytes;
        bulk_entries += entries.len;
        let (distinct, count) = bulk.add(entries.iter(), *slot, hasher)?;
        added.counts.push((*i, *slot, distinct, count));
    }
    added.bulk = bulk;
    Ok(added)
}

/// Sorts and writes the values [`add_run`] took into their segment.
fn finish_run(added: Added, hasher: &RandomState, grams: bool) -> Result<Built, SegmentOverflow> {
    let Added {
        mut segments,
        bulk,
        counts,
    } = added;
    segments.push(bulk.finish(hasher, grams)?);
    Ok(Built { segments, counts })
}

/// What a hint is charged against the memory budgets: every entry as if its value were
/// held by no other peer, and every provenance DSI, so an upper bound of what the hint
/// adds to the table.
pub fn budget_bytes(hint: &CipHint) -> u64 {
    let entries: u64 = hint
        .weightlists
        .iter()
        .flat_map(|(_, w)| w.iter())
        .map(|(value, _)| entry_charge(value.len()))
        .sum();
    let provenance = provenance(hint).unwrap_or_default();
    entries + config::provenance_charge(&provenance)
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

impl Default for RoutingTable {
    fn default() -> Self {
        Self::new(TableConfig::default())
    }
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
            cache: CacheBudget::new(config.summaries.memo_bytes),
            changes: Mutex::default(),
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

    /// Builds the summaries the segments of `snap` lack ([`crate::substring`]), or whose
    /// narrow ones lost too many peers since: in the background when
    /// [`SummaryConfig::background`](crate::substring::SummaryConfig::background) is set
    /// (queries scan, or use the ones before, meanwhile), else before returning.
    fn summarize(&self, snap: &Snapshot) {
        if self.bulk() {
            return;
        }
        let cfg = self.config.summaries;
        let mut all_ties: Option<Arc<[u32]>> = None;
        for seg in &snap.segments {
            // Summaries count the values a segment hides (queries check those apart), so
            // only peers gone thin them out.
            if !seg.wants_summaries(&cfg, || snap.live_slot_entries(seg)) || !seg.claim_summaries()
            {
                continue;
            }
            // Narrow summaries keep slots in rank order; a slot's tie position among the
            // live follows from its own hint, so these positions order it for its life.
            let ties = all_ties
                .get_or_insert_with(|| snap.rank_keys.iter().map(|k| k.1).collect())
                .clone();
            if cfg.background {
                let (seg, build) = (seg.clone(), PendingBuild::new(&self.pending));
                let ties = ties.clone();
                let start = self.config.background_start.clone();
                let spawned = std::thread::Builder::new()
                    .name("table-summaries".into())
                    .spawn(move || {
                        if let Some(start) = start {
                            (start.0)();
                        }
                        let turn = build.0.turn.lock();
                        // A segment merged away meanwhile is not worth summarizing.
                        // (A newer version of it shares its core: summaries go there.)
                        if Arc::strong_count(&seg) > 1 || seg.core_shared() {
                            seg.build_summaries(&cfg, &ties);
                        } else {
                            seg.release_summaries();
                        }
                        drop(turn);
                        drop(build);
                    });
                if spawned.is_ok() {
                    continue;
                }
            }
            // Without a thread (or when none could be started) the caller builds them.
            seg.build_summaries(&cfg, &ties);
        }
    }

    /// Starts or ends a bulk load (a hub's cold start, hundreds of hints arriving within
    /// seconds). Meanwhile imports pile their segments up instead of merging them tier by
    /// tier (up to 4, past which the two smallest neighbours are merged), and the segments
    /// of [`RoutingTable::replace_all`] get neither a substring index, an exact-match table
    /// nor summaries (nearly all are merged away; substring searches scan them and exact
    /// lookups binary-search them meanwhile, which changes only speed). Ending it merges
    /// everything into one segment, publishes it, then indexes and summarizes it: call it
    /// off the async workers.
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

    /// Ends a write: merges `next`'s segments by the policy, ranks its slots, starts the
    /// summaries its big segments lack and publishes it (under the writer lock).
    fn commit(&self, mut next: Snapshot) {
        next.compact(
            &self.hasher,
            false,
            self.bulk(),
            self.config.index_threads(),
        );
        next.rerank();
        self.summarize(&next);
        self.publish(next);
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

    /// Every `Template:Attribute` a hint in the table has held, as first spelled: what a
    /// query naming no attribute (a Whois++ bare value) can be looked up under.
    pub fn attributes(&self) -> Vec<AttrSpec> {
        self.current
            .load()
            .attrs
            .infos
            .iter()
            .map(|i| i.spelling.clone())
            .collect()
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
        let segment = Segment::from_entries(entries.iter().collect(), slot, &self.hasher)
            .map_err(|_| ImportError::TooLarge)?;
        entry.distinct_values = segment.len();
        entry.entries = segment.entries();
        let outcome = install(&mut next, slot, entry);
        next.segments.push(Arc::new(segment));
        self.commit(next);
        Ok(outcome)
    }

    /// Imports many hints and indexes them in one pass: the fast path for loading. Each
    /// hint succeeds or fails on its own; all successful ones appear in one swap.
    ///
    /// The hints are checked and given their slots in order (each check sees the ones
    /// before it), then indexed on up to [`TableConfig::index_threads`] threads, each
    /// building the segment of a run of them.
    pub fn replace_all<I, H>(&self, hints: I) -> Vec<Result<ReplaceOutcome, ImportError>>
    where
        I: IntoIterator<Item = (PeerMeta, H)>,
        H: std::borrow::Borrow<CipHint>,
    {
        let _writer = self.lock();
        let mut next = (*self.current.load_full()).clone();
        let mut results = Vec::new();
        let mut held = next.budget_held();
        let (peers, hints): (Vec<PeerMeta>, Vec<H>) = hints.into_iter().unzip();
        // `(index in results, slot, entries)` of each hint that passed.
        let mut passed: Vec<(usize, u32, HintEntries<'_>)> = Vec::new();
        for (peer, hint) in peers.into_iter().zip(&hints) {
            let result = self
                .prepare(&mut next, peer, hint.borrow(), &mut held)
                .and_then(|(slot, entry, entries)| {
                    if entries.bytes > FLUSH_AT || entries.len > FLUSH_AT {
                        return Err(ImportError::TooLarge);
                    }
                    passed.push((results.len(), slot, entries));
                    Ok(install(&mut next, slot, entry))
                });
            results.push(result);
        }
        if passed.is_empty() {
            // Nothing to publish: the table, and its generation, stay as they were.
            return results;
        }
        let entries: usize = passed.iter().map(|p| p.2.len).sum();
        let threads = if entries >= PARALLEL_BUILD_ENTRIES {
            self.config.index_threads().min(passed.len())
        } else {
            1
        };
        let grams = !self.bulk();
        let runs: Vec<_> = split_runs(&passed, threads)
            .into_iter()
            .map(|run| &passed[run])
            .collect();
        let added = on_threads(runs, |run| add_run(run, &self.hasher, grams));
        // The values are taken: the hints' text (for one hint of millions of values, tens
        // of megabytes) goes before their segments are built.
        drop(passed);
        drop(hints);
        let built = on_threads(added, |added| {
            added.and_then(|added| finish_run(added, &self.hasher, grams))
        });
        for run in built {
            let Ok(run) = run else {
                // Unreachable with FLUSH_AT well under the offsets' range; refuse the batch
                // rather than keep hints that no segment holds.
                return results
                    .into_iter()
                    .map(|_| Err(ImportError::TooLarge))
                    .collect();
            };
            for (i, slot, distinct, count) in run.counts {
                if let Some(Ok(outcome)) = results.get_mut(i) {
                    outcome.distinct_values = distinct;
                    outcome.entries = count;
                }
                // A later hint of the same batch for the same dataset may have replaced it.
                if let Some(Some(entry)) = next.slots.get_mut(slot as usize)
                    && let Some(entry) = Arc::get_mut(entry)
                {
                    entry.distinct_values = distinct;
                    entry.entries = count;
                }
            }
            next.segments.extend(run.segments.into_iter().map(Arc::new));
        }
        self.commit(next);
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
    ) -> Result<(u32, PeerEntry, HintEntries<'h>), ImportError> {
        let limits = &self.config.limits;
        let provenance = self.check_header(next, &peer, hint)?;
        let count: usize = hint.weightlists.iter().map(|(_, w)| w.len()).sum();
        if count > limits.max_entries_per_hint {
            return Err(ImportError::TooManyEntries {
                count,
                max: limits.max_entries_per_hint,
            });
        }
        // One reading of each weightlist (a parsed one is read from its text each time):
        // the checks, the charge ([`budget_bytes`]) and the entries to index, with a count.
        let mut budget = config::provenance_charge(&provenance);
        let mut counted = Vec::with_capacity(hint.weightlists.len());
        let mut max_count = 0;
        for (spec, w) in &hint.weightlists {
            let (mut above, mut too_long) = (None, None);
            let (mut len, mut bytes) = (0usize, 0usize);
            for (index, (value, count)) in w.iter().enumerate() {
                budget += entry_charge(value.len());
                max_count = max_count.max(count);
                if count > 0 {
                    len += 1;
                    bytes += value.len();
                }
                if above.is_none() && count > hint.total_object_count {
                    above = Some((index, count));
                }
                if too_long.is_none() && value.len() > limits.max_value_len {
                    too_long = Some((index, value.len()));
                }
            }
            if let Some((index, count)) = above {
                return Err(ImportError::CountAboveTotal {
                    attribute: format!("{}:{}", spec.template, spec.attribute),
                    index,
                    count,
                    total: hint.total_object_count,
                });
            }
            if let Some((index, len)) = too_long {
                return Err(ImportError::ValueTooLong {
                    attribute: format!("{}:{}", spec.template, spec.attribute),
                    index,
                    len,
                    max: limits.max_value_len,
                });
            }
            counted.push((len, bytes));
        }
        let others = Self::check_budget(limits, next, &peer.dsi, budget, held)?;
        let specs = hint
            .weightlists
            .iter()
            .map(|(s, _)| s)
            .chain(hint.thresholds.iter().map(|(s, _)| s));
        Self::intern_attrs(limits, next, specs)?;
        let attrs = &next.attrs;
        let mut entries = HintEntries::default();
        for ((spec, w), (len, bytes)) in hint.weightlists.iter().zip(counted) {
            // Invariant: every weightlist attribute was interned just above.
            let Some(id) = attrs.id(spec) else { continue };
            entries.len += len;
            entries.bytes += bytes;
            entries.lists.push((id, w));
        }
        let thresholds = thresholds_of(attrs, hint);
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
            listed: count,
            max_count,
        };
        *held = others + budget;
        Ok((slot, entry, entries))
    }

    /// The checks of a hint's header (its DSI, provenance, total and the peers' limit);
    /// returns its provenance.
    pub(super) fn check_header(
        &self,
        next: &Snapshot,
        peer: &PeerMeta,
        hint: &CipHint,
    ) -> Result<Vec<Dsi>, ImportError> {
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
                return Err(ImportError::OwnDsi {
                    dsi: peer.dsi.clone(),
                });
            }
            if provenance.contains(node) {
                return Err(ImportError::Loop {
                    peer: peer.dsi.clone(),
                    node: node.clone(),
                });
            }
        }
        if !next.peers.contains_key(&peer.dsi) && next.peers.len() >= limits.max_peers {
            return Err(ImportError::TooManyPeers {
                max: limits.max_peers,
            });
        }
        if hint.total_object_count > limits.max_total_objects {
            return Err(ImportError::ImplausibleTotal {
                total: hint.total_object_count,
                max: limits.max_total_objects,
            });
        }
        Ok(provenance)
    }

    /// Checks a hint's charge `budget` against the per-peer and table budgets (the hint
    /// `dsi` holds frees its own); returns what the other hints hold.
    pub(super) fn check_budget(
        limits: &TableLimits,
        next: &Snapshot,
        dsi: &Dsi,
        budget: u64,
        held: &u64,
    ) -> Result<u64, ImportError> {
        if budget > limits.max_peer_bytes {
            return Err(ImportError::OverPeerBudget {
                bytes: budget,
                max: limits.max_peer_bytes,
            });
        }
        let others = held.saturating_sub(next.budget_of(dsi));
        if others.saturating_add(budget) > limits.max_table_bytes {
            return Err(ImportError::OverTableBudget {
                bytes: budget,
                held: others,
                max: limits.max_table_bytes,
            });
        }
        Ok(others)
    }

    /// Adds the attributes of `specs` the dictionary lacks.
    pub(super) fn intern_attrs<'s>(
        limits: &TableLimits,
        next: &mut Snapshot,
        specs: impl Iterator<Item = &'s AttrSpec>,
    ) -> Result<(), ImportError> {
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
        Ok(())
    }

    /// Removes a peer's hint; false when there was none.
    pub fn remove(&self, dsi: &Dsi) -> bool {
        let _writer = self.lock();
        let mut next = (*self.current.load_full()).clone();
        if !next.kill(dsi) {
            return false;
        }
        self.commit(next);
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
        self.commit(next);
        gone
    }

    /// Merges all segments into one, dropping dead entries.
    pub fn compact(&self) {
        let _writer = self.lock();
        let mut next = (*self.current.load_full()).clone();
        next.compact(&self.hasher, true, false, self.config.index_threads());
        next.rerank();
        // The same contents, laid out anew: the generation stays. Published before its
        // substring index is built, so that the merged-away segments are freed first
        // (substring searches scan meanwhile, as during the bulk load).
        let next = Arc::new(next);
        self.current.store(next.clone());
        // Segments without their lookup structures (the merged one has no substring index;
        // one a bulk load left unmerged, alone or too big to merge, has neither) get them.
        for seg in &next.segments {
            seg.ensure_exact(&self.hasher);
            seg.ensure_grams();
        }
        self.summarize(&next);
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

    /// The metadata of the hint the table holds for `dsi` (one lookup, where
    /// [`RoutingTable::peers`] lists them all).
    pub fn peer_meta(&self, dsi: &Dsi) -> Option<Arc<PeerMeta>> {
        let snap = self.current.load();
        snap.peers
            .get(dsi)
            .and_then(|&slot| snap.meta(slot))
            .cloned()
    }

    /// How many datasets the hint held for `dsi` says it aggregates (its provenance list;
    /// 0 for a dataset's own hint), without copying the list: a search shares its budget
    /// of sub-queries among the peers it asks by it.
    pub fn provenance_len(&self, dsi: &Dsi) -> Option<usize> {
        let snap = self.current.load();
        snap.peers
            .get(dsi)
            .and_then(|&slot| snap.entry(slot))
            .map(|e| e.provenance.len())
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
                path: e.meta.path.clone(),
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
            st.memoized += seg.cache_stats().0;
        }
        st.memo_bytes = self.cache.used();
        (st.memo_hits, st.memo_computed) = self.cache.counts();
        st.summaries_pending = *self.pending.lock();
        st.budget_bytes = snap.budget_held();
        st.approx_bytes += snap.slots.capacity() * 8
            + snap.peers.len() * (std::mem::size_of::<PeerEntry>() + 64)
            + snap.attrs.infos.len() * 128;
        st
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
    Arc::make_mut(&mut next.peers).insert(dsi, slot);
    outcome
}

#[cfg(test)]
pub(crate) mod tests;
