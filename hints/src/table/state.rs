//! The table's state: the [`RoutingTable`] itself, its snapshots and the peer entries and
//! attribute dictionary they hold (see the parent module's "Design" section). The parent
//! module writes it (imports, removals, merges); `eval` reads it (queries).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use cip_proto::Dsi;
use cip_proto::soif::attr::base_name;

use crate::hasher::RandomState;
use crate::hint::AttrSpec;
use crate::index::Segment;
use crate::index::cache::CacheBudget;
use crate::peer::PeerMeta;
use crate::thesaurus::AttrPattern;

use super::config::TableConfig;

/// Most segments a bulk load leaves before it merges any ([`RoutingTable::set_bulk_load`]).
///
/// Each segment holds its own copy of the values its hints share with other segments, and
/// the merge ending the load writes the whole table beside them: with many segments the
/// pile itself is larger than the merged table. Four keeps a 1,000-peer cold start's peak
/// under 1.5 times its settled memory (measured: 32 gave 1.65x; 4 costs the load about a
/// second of merging, and the final merge as much less).
const BULK_MAX_SEGMENTS: usize = 4;

/// Values a segment may hide (deltas applied in place moved them away) before it is
/// rewritten, or a sixteenth of its values when more: each substring query that its sums
/// would answer first looks for the needle in the hidden values' text, and hidden records
/// stay in memory beside the patches that replaced them. (A quarter halves the CPU of a
/// 1,000-peer churn, whose rewrites are most of it, but peaks at 1.50x the settled RSS
/// against 1.38x, and substring queries wait longer: `TABLE_BENCH_ONLY=churn`.)
const HIDDEN_REWRITE: usize = 4096;

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
    /// Its memory charge ([`budget_bytes`](super::budget_bytes)).
    pub budget: u64,
    /// Weightlist entries its hint lists (those of count 0 too).
    pub listed: usize,
    /// At least the highest count it lists: a delta lowering the total below it is applied
    /// whole, where every count is checked against the total.
    pub max_count: u64,
}

impl PeerEntry {
    pub(super) fn threshold_for(&self, attrs: &[u32]) -> Option<u64> {
        self.thresholds
            .iter()
            .filter(|(a, t)| *t > 1 && attrs.binary_search(a).is_ok())
            .map(|e| e.1)
            .max()
    }

    pub(super) fn live_at(&self, now: Option<SystemTime>) -> bool {
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

    pub(super) fn intern(&mut self, spec: &AttrSpec) -> u32 {
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
    /// Shared between snapshots until a write adds or removes a peer: a write that keeps
    /// the peers (a delta, a refresh) copies no DSI.
    pub peers: Arc<BTreeMap<Dsi, u32>>,
    pub slots: Vec<Option<Arc<PeerEntry>>>,
    pub(super) free: Vec<u32>,
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
    pub(super) fn rerank(&mut self) {
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
    pub(super) fn live_tie(&self, slot: u32, now: Option<SystemTime>) -> Option<u32> {
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

    /// Postings of live slots in `seg`, hidden ones included.
    pub(super) fn live_slot_entries(&self, seg: &Segment) -> u64 {
        seg.slots()
            .iter()
            .filter(|(s, _)| self.entry(*s).is_some())
            .map(|e| e.1)
            .sum()
    }

    /// Postings of live slots in `seg`, less those it hides.
    pub(super) fn live_entries(&self, seg: &Segment) -> u64 {
        let hides = seg.hides();
        seg.slots()
            .iter()
            .filter(|(s, _)| self.entry(*s).is_some())
            .map(|&(s, n)| {
                if hides {
                    n.saturating_sub(seg.hidden_slot_entries(s))
                } else {
                    n
                }
            })
            .sum()
    }

    /// The memory charge of every hint held.
    pub(super) fn budget_held(&self) -> u64 {
        self.peers
            .values()
            .filter_map(|&slot| self.slots.get(slot as usize)?.as_ref())
            .map(|e| e.budget)
            .sum()
    }

    /// The memory charge of `dsi`'s hint, 0 when none is held.
    pub(super) fn budget_of(&self, dsi: &Dsi) -> u64 {
        self.peers
            .get(dsi)
            .and_then(|&slot| self.slots.get(slot as usize)?.as_ref())
            .map_or(0, |e| e.budget)
    }

    pub(super) fn kill(&mut self, dsi: &Dsi) -> bool {
        match Arc::make_mut(&mut self.peers).remove(dsi) {
            Some(slot) => {
                self.slots[slot as usize] = None;
                true
            }
            None => false,
        }
    }

    /// Drops the segments none of whose entries is live: their postings all belong to dead
    /// slots, so the next snapshot loses nothing, and no merge rewrites a live neighbour
    /// only to leave them out. A big hint replaced leaves its old segment fully dead: merging
    /// it into the new one would copy the new hint whole a second time (a third copy in
    /// memory at the peak).
    fn drop_dead_segments(&mut self) {
        let keep: Vec<bool> = self
            .segments
            .iter()
            .map(|s| s.entries() > 0 && self.live_entries(s) > 0)
            .collect();
        let mut keep = keep.into_iter();
        self.segments.retain(|_| keep.next().unwrap_or(true));
    }

    fn merge_range(
        &mut self,
        range: std::ops::Range<usize>,
        hasher: &RandomState,
        grams: bool,
        threads: usize,
    ) -> bool {
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
        match Segment::merge(&parts, &live, hasher, grams, threads) {
            Ok(merged) => {
                self.segments.splice(range, [Arc::new(merged)]);
                true
            }
            Err(_) => false,
        }
    }

    /// Applies the merge policy of the module doc; `full` merges everything into one.
    ///
    /// The segment of a full merge, and those merged during a bulk load, come without
    /// their substring index and exact-match table: the caller builds them once the
    /// merged-away segments are gone (lowering the peak of the merge that ends a cold
    /// start). Merges use up to `threads` threads ([`super::TableConfig::index_threads`]).
    pub(super) fn compact(&mut self, hasher: &RandomState, full: bool, bulk: bool, threads: usize) {
        self.drop_dead_segments();
        let dead = self
            .segments
            .iter()
            .any(|s| self.live_entries(s) < s.entries() as u64);
        if full && (self.segments.len() > 1 || dead) {
            let n = self.segments.len();
            self.merge_range(0..n, hasher, false, threads);
        }
        loop {
            self.drop_dead_segments();
            let n = self.segments.len();
            if n >= 2 {
                let older = self.live_entries(&self.segments[n - 2]);
                let newer = self.live_entries(&self.segments[n - 1]);
                // In a bulk load, segments pile up (up to a bound) for one merge at the end;
                // otherwise they are merged tier by tier.
                let tiered = !bulk && older <= newer.saturating_mul(2);
                if tiered && self.merge_range(n - 2..n, hasher, true, threads) {
                    continue;
                }
                // Past the bound, the adjacent pair smallest together is merged: the pile
                // stays balanced, and no segment is rewritten once per arrival.
                if bulk && n > BULK_MAX_SEGMENTS {
                    let i = (0..n - 1)
                        .min_by_key(|&i| {
                            self.segments[i].entries() + self.segments[i + 1].entries()
                        })
                        .unwrap_or(n - 2);
                    if self.merge_range(i..i + 2, hasher, false, threads) {
                        continue;
                    }
                }
            }
            // A segment mostly dead, or hiding more values than its substring sums should
            // be checked against (see `index::Segment`), is rewritten.
            let dirty = self.segments.iter().position(|s| {
                let live = self.live_entries(s);
                s.entries() as u64 - live > live
                    || s.hidden_values() > HIDDEN_REWRITE.max(s.len() / 16)
            });
            if let Some(i) = dirty {
                let n = self.segments.len();
                if (i + 1 < n && self.merge_range(i..i + 2, hasher, !bulk, threads))
                    || self.merge_range(i..i + 1, hasher, !bulk, threads)
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
    pub(super) config: TableConfig,
    pub(super) hasher: RandomState,
    pub(super) current: ArcSwap<Snapshot>,
    pub(super) writer: Mutex<()>,
    /// Summaries being built in the background.
    pub(super) pending: Arc<Pending>,
    /// Set during a bulk load ([`RoutingTable::set_bulk_load`]).
    pub(super) bulk_load: std::sync::atomic::AtomicBool,
    /// Bytes of memoized substring sums, over all segments ([`crate::index::cache`]).
    pub(super) cache: Arc<CacheBudget>,
    /// The values recent in-place changes touched ([`RoutingTable::touched_since`]).
    pub(super) changes: Mutex<super::changes::ChangeLog>,
}

/// A count of background summary builds, to wait on.
#[derive(Debug, Default)]
pub(super) struct Pending {
    count: Mutex<usize>,
    pub(super) done: Condvar,
    /// Held by the build running: builds take turns, so that a burst of big segments
    /// does not start a crowd of threads.
    pub(super) turn: Mutex<()>,
}

impl Pending {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        // A plain counter: a panic elsewhere leaves it consistent.
        self.count
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Counts one background build from creation to drop (also when the build panics).
pub(super) struct PendingBuild(pub(super) Arc<Pending>);

impl PendingBuild {
    pub(super) fn new(pending: &Arc<Pending>) -> Self {
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
