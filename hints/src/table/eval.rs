//! Reading a snapshot: query evaluation, tallies, ranking and answers (the read side of
//! [`RoutingTable`]; see the parent module's "Queries" section).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use cip_proto::Dsi;

use crate::hint::AttrSpec;
use crate::index::sums::{SUMMARY_TOPS, Store};
use crate::index::{Segment, TOUCH_BATCH, attr_mask, cmp_folded, hash_lower};
use crate::peer::PeerMeta;
use crate::query::{MatchOp, Query, Term};
use crate::rank::{
    Explanation, MatchedValue, QueryOptions, RankKey, Referral, TermExplanation, TermStatus,
    ValueBuf, rank_order,
};
use crate::table::answer::{Answer, Item};
use crate::thesaurus::AttrPattern;

use super::state::{AttrTable, PeerEntry, RoutingTable, Snapshot};

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
    /// The segments whose summaries or memoized sums answered the current substring
    /// term, with those.
    summed: Vec<(u32, Summed)>,
    /// Set by [`rank_direct`]: the one value every ranked slot matched (its `count` is
    /// unused); their best values are then not kept in the tally.
    single: Option<Top>,
    /// The ranked peers of the last single-term query (returned to [`Scratch`] after use,
    /// so that its buffer is reused).
    ranked: Vec<Ranked>,
    /// `(slot, value id)` of the best values a summary lists for the ranked slots.
    tops: Vec<(u32, u32)>,
    /// The current segment's hidden values holding the needle, and what they add to its
    /// sums ([`lessen`]).
    hidden: Vec<u32>,
    less: Vec<Lessen>,
}

/// Per-slot sums that answered a substring term in one segment, held until its best
/// values are read.
enum Summed {
    /// The segment's summaries (a newer build may replace them meanwhile).
    Built(Arc<crate::index::sums::Summaries>),
    /// Sums a query kept ([`crate::index::cache`]).
    Kept(Arc<Store>),
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
pub(super) const QUICK_SCAN_VALUES: usize = 20_000;

/// Most values per referral ([`QueryOptions::max_values`]) for which a single-term query
/// keeps each peer's best values while matching; more take a second pass.
pub(super) const TALLY_MAX_VALUES: usize = 16;

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
    /// Per slot, once its `tops` are full: the segment of the value a newcomer with the
    /// `floor` count would have to beat (the last-ranked of those with that count), else
    /// `u32::MAX`. Values of one segment are tallied in id order, which is their order, so
    /// a newcomer from that segment tied on the floor count ranks after it: one comparison
    /// settles it.
    floor_seg: Vec<u32>,
    /// The current value's `(slot, count)` pairs.
    pairs: Vec<(u32, u64)>,
    k: usize,
}

/// What a segment's hidden values holding a needle add for one slot to sums computed from
/// its core: `(slot, summed count, values)`.
type Lessen = (u32, u64, u32);

/// Puts in `less`, by slot, what the hidden values `hidden` of `seg` (those holding the
/// needle, [`Segment::hidden_matches`]) add under `attr` to sums computed from its core.
fn lessen(seg: &Segment, hidden: &[u32], attr: u32, less: &mut Vec<Lessen>) {
    less.clear();
    for &id in hidden {
        let start = seg.start_of(id);
        if let Some(g) = seg.groups_in_core(start).find(|g| g.attr == attr) {
            less.extend(seg.group_postings(g).map(|(slot, count)| (slot, count, 1)));
        }
    }
    less.sort_unstable_by_key(|l| l.0);
    less.dedup_by(|b, a| {
        let same = a.0 == b.0;
        if same {
            a.1 = a.1.saturating_add(b.1);
            a.2 += b.2;
        }
        same
    });
}

/// True when `summary` (of `seg`'s core), less `less` ([`lessen`]), answers a page of
/// `limit` referrals with `k` values each exactly:
/// * a slot whose best values it lists lost hidden ones still has `k` listed, or the
///   list held every value it matched;
/// * a cut block ([`crate::index::sums::Summary::exact_for`]) still has `limit` live slots
///   that rank before every slot it left out: those left out summed at most its lowest
///   sum, and only lose by hiding, so a kept slot whose sum did not change, or is still
///   above that, ranks before them.
///
/// Without `less`, [`crate::index::sums::Summary::exact_for`].
fn exact_lessened(
    summary: &crate::index::sums::Summary<'_>,
    less: &[Lessen],
    seg: &Segment,
    limit: usize,
    k: usize,
    live: impl Fn(u32) -> bool,
) -> bool {
    if less.is_empty() {
        return summary.exact_for(limit, live);
    }
    let entries = summary.entries;
    for &(slot, _, _) in less {
        let Ok(e) = entries.binary_search_by_key(&slot, |e| e.slot) else {
            continue;
        };
        let (listed, hidden) = entries[e]
            .tops
            .iter()
            .take_while(|&&id| id != u32::MAX)
            .fold((0usize, 0usize), |(n, h), &id| {
                (n + 1, h + usize::from(seg.is_hidden(id)))
            });
        if hidden > 0 && entries[e].matched as usize > listed && listed - hidden < k {
            return false;
        }
    }
    if summary.cut & crate::index::sums::CUT == 0 || limit == 0 {
        return true;
    }
    let floor = (0..entries.len())
        .map(|i| summary.sum(i))
        .min()
        .unwrap_or(0);
    let certain = entries
        .iter()
        .enumerate()
        .filter(|&(i, e)| {
            live(e.slot)
                && match less.binary_search_by_key(&e.slot, |l| l.0) {
                    Err(_) => true,
                    Ok(x) => {
                        let (_, sum, values) = less[x];
                        e.matched > values && summary.sum(i).saturating_sub(sum) > floor
                    }
                }
        })
        .count();
    certain >= limit
}

/// True when no segment but `segs[si]` has postings of a slot that `segs[si]` has
/// postings of and `summary` (a cut block of it) left out: the block then holds every
/// slot the other segments can count ([`cut_blocks_hold`]).
fn others_within_cut(
    segs: &[Arc<Segment>],
    si: usize,
    summary: &crate::index::sums::Summary<'_>,
) -> bool {
    let seg = &segs[si];
    segs.iter().enumerate().all(|(ti, other)| {
        ti == si
            || other.slots().iter().all(|&(slot, _)| {
                seg.slot_entries(slot) == 0
                    || summary
                        .entries
                        .binary_search_by_key(&slot, |e| e.slot)
                        .is_ok()
            })
    })
}

/// True when every cut block among `summed` (the summaries that answered needle `lower`
/// under `attr`, by segment) holds each live slot of `touched` (every slot the term
/// counted) that its segment has postings of: such a slot may hold the needle there past
/// the block's cut, with a sum the tally lacks.
fn cut_blocks_hold(
    segs: &[Arc<Segment>],
    summed: &[(u32, Summed)],
    lower: &[u8],
    attr: u32,
    touched: &[u32],
    live: impl Fn(u32) -> bool,
) -> bool {
    summed.iter().all(|(si, store)| {
        let summary = match store {
            Summed::Kept(store) => store.only(attr),
            Summed::Built(sums) => match sums.lookup(lower, attr) {
                Some(summary) => summary,
                None => return true,
            },
        };
        if summary.cut & crate::index::sums::CUT == 0 {
            return true;
        }
        let seg = &segs[*si as usize];
        touched.iter().all(|&slot| {
            !live(slot)
                || seg.slot_entries(slot) == 0
                || summary
                    .entries
                    .binary_search_by_key(&slot, |e| e.slot)
                    .is_ok()
        })
    })
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
            self.floor_seg.resize(slots, u32::MAX);
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
    fn add_summary(&mut self, summary: &crate::index::sums::Summary<'_>) {
        for (i, e) in summary.entries.iter().enumerate() {
            self.add_summed(e.slot, summary.sum(i), e.matched);
        }
    }

    /// [`Tally::add_summary`] of sums computed from a segment's core, less what its
    /// hidden values holding the needle add (`less`, from [`lessen`]): a slot left with
    /// no value is not counted.
    fn add_summary_less(&mut self, summary: &crate::index::sums::Summary<'_>, less: &[Lessen]) {
        if less.is_empty() {
            return self.add_summary(summary);
        }
        for (i, e) in summary.entries.iter().enumerate() {
            let (mut sum, mut matched) = (summary.sum(i), e.matched);
            if let Ok(x) = less.binary_search_by_key(&e.slot, |l| l.0) {
                sum = sum.saturating_sub(less[x].1);
                matched = matched.saturating_sub(less[x].2);
                if matched == 0 {
                    continue;
                }
            }
            self.add_summed(e.slot, sum, matched);
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
        if self.k > 0
            && (count > self.floor[s] || (count == self.floor[s] && self.floor_seg[s] != si))
        {
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
                self.set_floor(segs, s);
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
            self.set_floor(segs, s);
        }
    }

    /// Sets slot `s`'s `floor` and `floor_seg` from its full `tops`.
    fn set_floor(&mut self, segs: &[Arc<Segment>], s: usize) {
        let k = self.k;
        let tops = &self.tops[s * k..(s + 1) * k];
        let min = tops.iter().map(|t| t.count).min().unwrap_or(0);
        let worst = tops
            .iter()
            .filter(|t| t.count == min)
            .copied()
            .reduce(|w, t| if value_before(segs, w, t) { t } else { w });
        self.floor[s] = min;
        self.floor_seg[s] = worst.map_or(u32::MAX, |w| w.seg);
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
    /// Forgets everything tallied so far (to tally the term again).
    fn clear_touched(&mut self) {
        for &slot in &self.touched {
            let s = slot as usize;
            self.counts[s] = 0;
            self.matched[s] = 0;
        }
        self.clear_tops();
    }

    fn clear_tops(&mut self) {
        for &slot in &self.touched {
            self.top_len[slot as usize] = 0;
            self.floor[slot as usize] = 0;
            self.floor_seg[slot as usize] = u32::MAX;
        }
        self.touched.clear();
    }
}

/// A ranked peer of a single-term query.
pub(super) struct Ranked {
    pub(super) slot: u32,
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
    /// sums every big segment has (summarized or in the substring cache, see
    /// [`crate::substring`]) and whose other segments are small. The daemon answers such
    /// queries on the spot instead of handing them to a scanning thread.
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
        let live = |slot| snap.live_tie(slot, opts.now).is_some();
        let mut scanned = 0;
        let finder = memchr::memmem::Finder::new(&lower);
        let (mut hidden, mut less) = (Vec::new(), Vec::new());
        let segs = &snap.segments[..];
        segs.iter().enumerate().all(|(si, seg)| {
            less.clear();
            if seg.hides() {
                hidden.clear();
                if !seg.hidden_matches(&finder, &mut hidden) {
                    // Its sums may count values it hides: it is searched.
                    scanned += seg.len();
                    return scanned < QUICK_SCAN_VALUES;
                }
                lessen(seg, &hidden, attr, &mut less);
            }
            let k = opts.max_values;
            let summed = match seg.summaries_now().as_deref().and_then(|s| {
                s.lookup(&lower, attr).map(|summary| {
                    exact_lessened(&summary, &less, seg, opts.limit, k, live)
                        // A cut block another segment's slots may pass (see
                        // `cut_blocks_hold`) could send the query to a search.
                        && (summary.cut & crate::index::sums::CUT == 0
                            || others_within_cut(segs, si, &summary))
                })
            }) {
                Some(exact) => exact,
                // Not summarized although narrow summaries would hold it if it were
                // broad enough: it matches few values.
                None => seg.covers_narrowly(&lower, attr),
            };
            summed
                || seg.memoized(&lower, attr).is_some_and(|store| {
                    exact_lessened(&store.only(attr), &less, seg, opts.limit, k, live)
                })
                || {
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
                let cache = &self.cache;
                let cfg = &self.config.summaries;
                let live = |slot| snap.live_tie(slot, opts.now).is_some();
                // A cut block answers for its segment's slots only if it holds each one
                // another segment counts that may hold the needle here too (deltas in
                // place split a peer's values between segments): checked once every
                // segment is tallied; if one does not, the term is tallied again without
                // cut blocks.
                for cuts in [true, false] {
                    for (si, seg) in segs.iter().enumerate() {
                        let si = si as u32;
                        // Sums count the values a segment hides: those that hold the needle
                        // are taken off them (see `index::Segment`), or, when that cannot be
                        // told, the sums are not used.
                        let mut summable = summable;
                        scratch.less.clear();
                        if summable && seg.hides() {
                            scratch.hidden.clear();
                            summable = seg.hidden_matches(&finder, &mut scratch.hidden);
                            lessen(seg, &scratch.hidden, attrs[0], &mut scratch.less);
                        }
                        let less = &scratch.less[..];
                        if summable {
                            let attr = attrs[0];
                            // A broad needle under one attribute: the segment's summary has
                            // the sums; the ranked slots' best values are read from it
                            // afterwards.
                            // A narrow summary holds only the best slots: it answers when the
                            // page asked for is among them.
                            let guard = seg.summaries_now();
                            if let Some(sums) = guard.as_ref()
                                && let Some(summary) = sums
                                    .lookup(&scratch.lower, attr)
                                    .filter(|s| cuts || s.cut & crate::index::sums::CUT == 0)
                                    .filter(|s| exact_lessened(s, less, seg, opts.limit, k, live))
                            {
                                tally.add_summary_less(&summary, less);
                                scratch.summed.push((si, Summed::Built(Arc::clone(sums))));
                                continue;
                            }
                            if let Some(store) = seg.memoized(&scratch.lower, attr)
                                && exact_lessened(&store.only(attr), less, seg, opts.limit, k, live)
                            {
                                cache.hit();
                                tally.add_summary_less(&store.only(attr), less);
                                scratch.summed.push((si, Summed::Kept(store)));
                                continue;
                            }
                        }
                        let Some(exact) = seg.substring_candidates(&finder, &mut scratch.ids)
                        else {
                            continue;
                        };
                        // Values reported under other attributes only need not be loaded.
                        seg.retain_under(&mut scratch.ids, mask);
                        if summable
                        && cache.enabled()
                        && seg.len() >= cfg.min_values
                        // Too few values hold it to be worth keeping.
                        && !seg.covers_narrowly(&scratch.lower, attrs[0])
                        && scratch.ids.len() >= cfg.memo_min_candidates
                        {
                            // Expensive, and likely asked again: sum it for every attribute
                            // and slot in one pass, and keep that.
                            cache.computed();
                            let store = seg.memoize(&finder, &scratch.ids, exact, attrs[0], cache);
                            let summary = store.only(attrs[0]);
                            if exact_lessened(&summary, less, seg, opts.limit, k, live) {
                                tally.add_summary_less(&summary, less);
                                scratch.summed.push((si, Summed::Kept(store)));
                                continue;
                            }
                            // Hidden values took best values it lists: searched below.
                        }
                        // One pipelined pass: each match's postings are read right after its
                        // bytes were checked, while the next batches load.
                        seg.for_each_candidate(&finder, &scratch.ids, exact, |id, start| {
                            tally.add_at(segs, si, id, start, attrs);
                        });
                    }
                    if !cuts
                        || cut_blocks_hold(
                            segs,
                            &scratch.summed,
                            &scratch.lower,
                            attrs[0],
                            &tally.touched,
                            live,
                        )
                    {
                        break;
                    }
                    tally.clear_touched();
                    scratch.summed.clear();
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
                    Summed::Kept(store) => store.only(attr),
                    Summed::Built(sums) => match sums.lookup(lower, attr) {
                        Some(summary) => summary,
                        None => continue,
                    },
                };
                let entries = summary.entries;
                let tops = &mut scratch.tops;
                tops.clear();
                for r in &ranked {
                    let Ok(e) = entries.binary_search_by_key(&r.slot, |e| e.slot) else {
                        continue;
                    };
                    tops.extend(
                        entries[e]
                            .tops
                            .iter()
                            .take_while(|&&id| id != u32::MAX)
                            .filter(|&&id| !seg.is_hidden(id))
                            .take(k)
                            .map(|&id| (r.slot, id)),
                    );
                }
                // Their records are scattered: load them all before reading any, so
                // that the cache misses overlap; once each (a popular value is the best
                // of many slots).
                let ids = &mut scratch.ids;
                ids.clear();
                ids.extend(tops.iter().map(|t| t.1));
                ids.sort_unstable();
                ids.dedup();
                std::hint::black_box(seg.touch_starts(ids) ^ seg.touch_records(ids));
                for &(slot, id) in tops.iter() {
                    let start = seg.start_of(id);
                    if let Some(count) = seg.count_at(start, attr, slot) {
                        let top = Top {
                            seg: si,
                            id,
                            start,
                            count,
                        };
                        tally.offer(segs, slot as usize, top);
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
                let referral =
                    crate::table::answer::owned(&entry.meta, &item, &Arc::new(out.into_buf()));
                Explanation {
                    referral,
                    position: i + 1,
                    via: entry.meta.via.clone(),
                    path: entry.meta.path.clone(),
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
pub(super) fn rank_keys<T: Copy + Ord + Default>(keys: &mut Vec<T>, limit: usize) {
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

impl Snapshot {
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
}

fn contains_sorted(ids: &[u32], id: u32) -> bool {
    if ids.len() <= 8 {
        ids.contains(&id)
    } else {
        ids.binary_search(&id).is_ok()
    }
}
