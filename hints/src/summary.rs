//! Summaries of broad substrings: per-peer sums precomputed for the short n-grams that a
//! large share of a segment's values contain.
//!
//! A substring query must sum the counts of every value that holds the needle. For a
//! needle such as `"son "` that can be a tenth of a million values, and the work is then
//! bounded by the answer, not by any index: hundreds of thousands of postings to add. So a
//! big segment mines, when it is built, the n-grams (3 to 7 bytes, ASCII-folded) held by at
//! least [`SummaryConfig::min_share_permille`] of its values, and stores for each, per
//! attribute and slot: the summed count, the number of values matched and the slot's best
//! [`SUMMARY_TOPS`] values. A query for exactly such an n-gram under one attribute reads
//! the summary (work proportional to the peers) instead of the values; every other needle
//! matches fewer values than the threshold, which the substring index finds quickly.
//!
//! Mining is level-wise (an n-gram is frequent only if both its (n-1)-grams are): one pass
//! over the values per length counts the candidates, starting from the substring index's
//! counts. Summaries are then computed broadest first, on
//! [`SummaryConfig::threads`] threads, until their bytes reach the segment's record bytes
//! divided by [`SummaryConfig::budget_divisor`]. Which n-grams are summarized changes only
//! speed: answers are the same either way.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use memchr::memmem;

use crate::hasher::RandomState;
use crate::index::{Group, Segment};
use crate::memo::MemoBudget;
use crate::sums::{Blocks, CutBlocks, MAX_GRAM, Store, SumEntry, Summaries, pack, unpack};
use crate::threads::workers;

pub use crate::sums::SUMMARY_TOPS;

/// Default for [`SummaryConfig::narrow_min_values`]: a needle held by fewer values is
/// summed on the spot in a few microseconds.
pub const DEFAULT_NARROW_MIN_VALUES: usize = 128;
/// Default for [`SummaryConfig::narrow_slots`]: a page of 10 referrals, the two more the
/// daemon asks for (its own dataset, and whether there are more), and four spare for
/// peers that went away since the summary was built.
pub const DEFAULT_NARROW_SLOTS: usize = 16;

/// How big segments summarize their broad n-grams (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryConfig {
    /// Segments with fewer distinct values get no summaries: scanning them is cheap.
    pub min_values: usize,
    /// An n-gram is summarized when at least this many thousandths of the segment's values
    /// hold it (and at least [`SummaryConfig::min_matches`]).
    pub min_share_permille: usize,
    /// Fewest values an n-gram must be in to be summarized.
    pub min_matches: usize,
    /// Summaries stop growing once their bytes pass the segment's record bytes divided by
    /// this (0: no bound).
    pub budget_divisor: usize,
    /// Most n-grams summarized in one segment.
    pub max_ngrams: usize,
    /// Each summary costs a pass over the values holding its n-gram: the values visited
    /// to build a segment's summaries are at most this many times its values, so that
    /// values crafted to hold many frequent n-grams cannot make a build take minutes.
    pub max_work_per_value: usize,
    /// Threads that compute summaries (1: the building thread alone).
    pub threads: usize,
    /// Build summaries on a thread of their own after the segment is in use, so that
    /// imports are not held up by them; queries scan until they are ready.
    pub background: bool,
    /// Bytes of memoized substring sums the table may hold (0: none kept; see
    /// [`crate::memo`]).
    pub memo_bytes: usize,
    /// A substring term whose index candidates in a segment of at least
    /// [`SummaryConfig::min_values`] values are at least this many has its sums memoized.
    pub memo_min_candidates: usize,
    /// Every 4- to 6-byte n-gram held by at least this many values of a segment of
    /// [`SummaryConfig::min_values`] or more gets a narrow summary of its best slots
    /// under each attribute it has this many postings under ([`crate::narrow`]; 0: none).
    pub narrow_min_values: usize,
    /// Slots a narrow summary keeps per attribute: queries asking for a page of up to
    /// about this many referrals use them.
    pub narrow_slots: usize,
    /// Narrow summaries stop growing once their bytes pass the segment's record bytes
    /// divided by this (0: no bound).
    pub narrow_budget_divisor: usize,
}

impl SummaryConfig {
    /// Summaries for every n-gram in two values or more, built before a segment is used:
    /// for tests that compare answers with and without them.
    #[cfg(test)]
    pub(crate) fn everything() -> Self {
        Self {
            min_values: 1,
            min_share_permille: 0,
            min_matches: 2,
            budget_divisor: 0,
            max_ngrams: usize::MAX,
            max_work_per_value: usize::MAX,
            threads: 2,
            background: false,
            memo_bytes: 0,
            memo_min_candidates: 1,
            narrow_min_values: 0,
            narrow_slots: 0,
            narrow_budget_divisor: 0,
        }
    }
}

impl Default for SummaryConfig {
    fn default() -> Self {
        Self {
            min_values: 100_000,
            min_share_permille: 10,
            min_matches: 256,
            budget_divisor: 5,
            max_ngrams: 4096,
            max_work_per_value: 48,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            background: true,
            memo_bytes: 128 << 20,
            memo_min_candidates: 1,
            narrow_min_values: DEFAULT_NARROW_MIN_VALUES,
            narrow_slots: DEFAULT_NARROW_SLOTS,
            narrow_budget_divisor: 2,
        }
    }
}

impl Store {
    /// The sums under `attr` of the values holding `finder`'s needle (ASCII-lowercased):
    /// one pass over the matches of `seg`, whose candidates (from
    /// [`Segment::substring_candidates`]) are `ids`.
    pub(crate) fn of_needle(
        seg: &Segment,
        finder: &memchr::memmem::Finder<'_>,
        ids: &[u32],
        exact: bool,
        attr: u32,
    ) -> Self {
        let mut acc = Accumulator::new(seg);
        seg.for_each_candidate(finder, ids, exact, |id, start| {
            acc.add_under(seg, id, start, attr);
        });
        let mut store = Self::default();
        store.push(acc.take());
        store.shrink_to_fit();
        store
    }
}

impl Summaries {
    /// Mines and summarizes `seg`'s broad n-grams.
    pub(crate) fn build(seg: &Segment, cfg: &SummaryConfig) -> Self {
        let n = seg.len();
        if n == 0 || n < cfg.min_values {
            return Self::default();
        }
        let threshold = (n.saturating_mul(cfg.min_share_permille) / 1000)
            .max(cfg.min_matches)
            .max(1);
        let mut out = Self::default();
        let mut grams = mine(seg, threshold);
        // Bound the work (see `max_work_per_value`), keeping the broadest n-grams.
        let mut work = 0usize;
        let keep = grams
            .iter()
            .take_while(|g| {
                work = work.saturating_add(g.1 as usize);
                work <= n.saturating_mul(cfg.max_work_per_value)
            })
            .count()
            .min(cfg.max_ngrams);
        grams.truncate(keep);
        let budget = match cfg.budget_divisor {
            0 => usize::MAX,
            d => seg.record_bytes() / d,
        };
        let done = if grams.is_empty() {
            Vec::new()
        } else {
            aggregate(seg, &grams, budget, cfg.threads.max(1))
        };
        let mut bytes = 0usize;
        // Broadest first, for as long as the budget lasts.
        for (key, blocks) in grams.iter().map(|g| g.0).zip(done) {
            let Some(blocks) = blocks else {
                break;
            };
            let size: usize =
                blocks.iter().map(|b| b.1.len()).sum::<usize>() * std::mem::size_of::<SumEntry>();
            if bytes.saturating_add(size) > budget {
                break;
            }
            bytes += size;
            let range = out.store.push(blocks);
            out.index.insert(key, range);
        }
        out.store.shrink_to_fit();
        out.index.shrink_to_fit();
        out
    }
}

/// Memoized sums: here rather than with the rest of [`Segment`] in [`crate::index`], since
/// they read the segment's values.
impl Segment {
    /// Computes the sums under `attr` of the values holding `finder`'s needle from `ids`
    /// (the candidates, see [`Segment::substring_candidates`]) and keeps them if `budget`
    /// has room (see [`crate::memo`]).
    pub(crate) fn memoize(
        &self,
        finder: &memmem::Finder<'_>,
        ids: &[u32],
        exact: bool,
        attr: u32,
        budget: &Arc<MemoBudget>,
    ) -> Arc<Store> {
        let store = Arc::new(Store::of_needle(self, finder, ids, exact, attr));
        self.memo.put(finder.needle(), attr, store.clone(), budget);
        store
    }
}

/// The n-grams (packed) held by at least `threshold` values, with their value counts,
/// broadest first.
fn mine(seg: &Segment, threshold: usize) -> Vec<(u64, u32)> {
    let n = seg.len();
    let mut found: Vec<(u64, u32)> = Vec::new();
    // Level 3 from the substring index; a bitmap over trigram keys (24 bits) to test them.
    let mut tri = vec![0u64; 1 << 18];
    for (key, card) in seg.gram_cards(threshold) {
        tri[key as usize / 64] |= 1 << (key % 64);
        let b = [(key >> 16) as u8, (key >> 8) as u8, key as u8];
        if let Some(p) = pack(&b) {
            found.push((p, card));
        }
    }
    if found.is_empty() {
        return found;
    }
    // Per value: bit `p` set when the n-gram of the current length at `p` is frequent
    // (positions past 63 are not mined: long values only count less).
    let mut masks: Vec<u64> = (0..n as u32)
        .map(|id| {
            let v = seg.folded_value(id);
            let mut m = 0u64;
            for (p, w) in v.windows(3).enumerate().take(64) {
                let key = (u32::from(w[0]) << 16) | (u32::from(w[1]) << 8) | u32::from(w[2]);
                if tri[key as usize / 64] & (1 << (key % 64)) != 0 {
                    m |= 1 << p;
                }
            }
            m
        })
        .collect();
    let mut keys: Vec<u64> = Vec::new();
    for len in 4..=MAX_GRAM {
        // Both (len - 1)-grams of a frequent len-gram are frequent.
        let mut counts: HashMap<u64, u32, RandomState> = HashMap::default();
        for (id, &m) in masks.iter().enumerate() {
            let m = m & (m >> 1);
            if m == 0 {
                continue;
            }
            let v = seg.folded_value(id as u32);
            keys.clear();
            keys.extend(
                bits(m)
                    .filter(|&p| p + len <= v.len())
                    .filter_map(|p| pack(&v[p..p + len])),
            );
            keys.sort_unstable();
            keys.dedup();
            for &k in &keys {
                *counts.entry(k).or_insert(0) += 1;
            }
        }
        let level: HashSet<u64, RandomState> = counts
            .iter()
            .filter(|e| *e.1 as usize >= threshold)
            .map(|e| *e.0)
            .collect();
        if level.is_empty() {
            break;
        }
        found.extend(level.iter().map(|k| (*k, counts[k])));
        for (id, m) in masks.iter_mut().enumerate() {
            let cand = *m & (*m >> 1);
            let mut next = 0u64;
            if cand != 0 {
                let v = seg.folded_value(id as u32);
                for p in bits(cand).filter(|&p| p + len <= v.len()) {
                    if pack(&v[p..p + len]).is_some_and(|k| level.contains(&k)) {
                        next |= 1 << p;
                    }
                }
            }
            *m = next;
        }
    }
    // Broadest first; ties by key, so that the choice is deterministic.
    found.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    found
}

/// The set bit positions of `m`, ascending.
fn bits(mut m: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if m == 0 {
            return None;
        }
        let p = m.trailing_zeros() as usize;
        m &= m - 1;
        Some(p)
    })
}

/// Summarizes `grams` in order on `threads` threads; stops taking new ones once the
/// summaries made pass `budget` bytes. `None` for those not made.
fn aggregate(
    seg: &Segment,
    grams: &[(u64, u32)],
    budget: usize,
    threads: usize,
) -> Vec<Option<Blocks>> {
    let next = AtomicUsize::new(0);
    let bytes = AtomicUsize::new(0);
    let work = || {
        let mut acc = Accumulator::new(seg);
        let mut ids = Vec::new();
        let mut done: Vec<(usize, Blocks)> = Vec::new();
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= grams.len() || bytes.load(Ordering::Relaxed) > budget {
                break;
            }
            let (b, len) = unpack(grams[k].0);
            let finder = memchr::memmem::Finder::new(&b[..len]);
            seg.for_each_substring(&finder, &mut ids, |id, start| acc.add(seg, id, start));
            let blocks = acc.take();
            let size: usize =
                blocks.iter().map(|b| b.1.len()).sum::<usize>() * std::mem::size_of::<SumEntry>();
            bytes.fetch_add(size, Ordering::Relaxed);
            done.push((k, blocks));
        }
        done
    };
    let mut out: Vec<Option<Blocks>> = (0..grams.len()).map(|_| None).collect();
    // A worker that panicked leaves its n-grams unsummarized: only speed is lost.
    let parts = workers(threads, work);
    for (k, blocks) in parts.into_iter().flatten() {
        out[k] = Some(blocks);
    }
    out
}

/// Per `(attribute, slot)` sums of one n-gram while it is summarized.
pub(crate) struct Accumulator {
    /// Table-wide slot -> local index + 1 (0: not in this segment).
    slot_local: Vec<u32>,
    /// Local index -> table-wide slot.
    slots: Vec<u32>,
    /// Table-wide attribute -> local index + 1.
    attr_local: Vec<u32>,
    attrs: Vec<u32>,
    /// `attrs.len() x slots.len()` cells.
    cells: Vec<Cell>,
    /// Cells touched since the last `take`.
    touched: Vec<u32>,
    /// Scratch of [`Accumulator::take_best`].
    by_attr: Vec<Vec<(std::cmp::Reverse<u64>, u32, u32)>>,
}

#[derive(Debug, Clone, Copy)]
struct Cell {
    sum: u64,
    matched: u32,
    /// Best values `(id, count)`, best first; `tops_len` of them filled.
    tops: [(u32, u64); SUMMARY_TOPS],
    tops_len: u8,
}

const EMPTY_CELL: Cell = Cell {
    sum: 0,
    matched: 0,
    tops: [(u32::MAX, 0); SUMMARY_TOPS],
    tops_len: 0,
};

impl Accumulator {
    pub(crate) fn new(seg: &Segment) -> Self {
        let slots: Vec<u32> = seg.slots().iter().map(|s| s.0).collect();
        let mut slot_local = vec![0u32; slots.iter().max().map_or(0, |&m| m as usize + 1)];
        for (i, &s) in slots.iter().enumerate() {
            slot_local[s as usize] = i as u32 + 1;
        }
        Self {
            slot_local,
            slots,
            attr_local: Vec::new(),
            attrs: Vec::new(),
            cells: Vec::new(),
            touched: Vec::new(),
            by_attr: Vec::new(),
        }
    }

    /// Adds value `id` (record at `start`) under each attribute it was reported under.
    pub(crate) fn add(&mut self, seg: &Segment, id: u32, start: u32) {
        for g in seg.groups_in(start) {
            self.add_group(seg, id, g);
        }
    }

    /// Adds value `id` (record at `start`) under `attr` only.
    fn add_under(&mut self, seg: &Segment, id: u32, start: u32, attr: u32) {
        if let Some(g) = seg.group_in(start, attr) {
            self.add_group(seg, id, g);
        }
    }

    fn add_group(&mut self, seg: &Segment, id: u32, g: Group) {
        let a = self.attr(g.attr);
        let base = a * self.slots.len();
        for (slot, count) in seg.group_postings(g) {
            let Some(l) = self
                .slot_local
                .get(slot as usize)
                .and_then(|&l| l.checked_sub(1))
            else {
                continue;
            };
            let at = base + l as usize;
            let cell = &mut self.cells[at];
            if cell.matched == 0 {
                self.touched.push(at as u32);
            }
            cell.sum = cell.sum.saturating_add(count);
            cell.matched += 1;
            // Values come in folded order: an equal count ranks after those kept.
            let len = usize::from(cell.tops_len);
            if len == SUMMARY_TOPS && count <= cell.tops[len - 1].1 {
                continue;
            }
            let mut i = len.min(SUMMARY_TOPS - 1);
            cell.tops[i] = (id, count);
            while i > 0 && cell.tops[i - 1].1 < count {
                cell.tops.swap(i - 1, i);
                i -= 1;
            }
            cell.tops_len = (len + 1).min(SUMMARY_TOPS) as u8;
        }
    }

    /// The local index of table-wide attribute `attr`, adding a row of cells when new.
    fn attr(&mut self, attr: u32) -> usize {
        let a = attr as usize;
        if self.attr_local.len() <= a {
            self.attr_local.resize(a + 1, 0);
        }
        if self.attr_local[a] == 0 {
            self.attrs.push(attr);
            self.attr_local[a] = self.attrs.len() as u32;
            self.cells
                .resize(self.attrs.len() * self.slots.len(), EMPTY_CELL);
        }
        self.attr_local[a] as usize - 1
    }

    /// The touched cells as blocks by attribute, each keeping only the first `keep` slots
    /// in rank order (highest sum, then `tie`; slots whose tie is `u32::MAX`, dead, are
    /// left out), by slot, with whether live ones were left out; no block for an
    /// attribute with fewer than `min` postings. Resets the cells. Costs a pass over the
    /// touched cells: no entry is made for a slot not kept.
    pub(crate) fn take_best(
        &mut self,
        keep: usize,
        min: usize,
        tie: impl Fn(u32) -> u32,
    ) -> CutBlocks {
        let nslots = self.slots.len().max(1);
        let mut touched = std::mem::take(&mut self.touched);
        let mut by_attr: Vec<Vec<(std::cmp::Reverse<u64>, u32, u32)>> =
            std::mem::take(&mut self.by_attr);
        by_attr.resize_with(self.attrs.len(), Vec::new);
        let mut postings = vec![0usize; self.attrs.len()];
        for &at in &touched {
            let at = at as usize;
            postings[at / nslots] += self.cells[at].matched as usize;
            let t = tie(self.slots[at % nslots]);
            if t != u32::MAX {
                let sum = self.cells[at].sum;
                by_attr[at / nslots].push((std::cmp::Reverse(sum), t, at as u32));
            }
        }
        let mut blocks = Vec::new();
        for (a, ranked) in by_attr.iter_mut().enumerate() {
            if ranked.is_empty() || postings[a] < min {
                ranked.clear();
                continue;
            }
            let mut cut = 0;
            if ranked.len() > keep && keep > 0 {
                ranked.select_nth_unstable(keep - 1);
                ranked.truncate(keep);
                cut = crate::sums::CUT;
            }
            // Local slot order is table-wide slot order.
            ranked.sort_unstable_by_key(|r| r.2);
            let entries = ranked.iter().map(|r| self.entry(r.2 as usize)).collect();
            blocks.push((self.attrs[a], entries, cut));
            ranked.clear();
        }
        // Attribute order.
        blocks.sort_unstable_by_key(|b| b.0);
        for &at in &touched {
            self.cells[at as usize] = EMPTY_CELL;
        }
        touched.clear();
        self.touched = touched;
        self.by_attr = by_attr;
        blocks
    }

    /// Cell `at` as an entry (its sum apart, [`Store::push`] fits it), not reset.
    fn entry(&self, at: usize) -> (SumEntry, u64) {
        let cell = &self.cells[at];
        let mut tops = [u32::MAX; SUMMARY_TOPS];
        for (t, &(id, _)) in tops
            .iter_mut()
            .zip(&cell.tops[..usize::from(cell.tops_len)])
        {
            *t = id;
        }
        let slot = self.slots[at % self.slots.len().max(1)];
        (
            SumEntry {
                slot,
                matched: cell.matched,
                sum: 0,
                tops,
            },
            cell.sum,
        )
    }

    /// The touched cells as blocks by attribute (entries by slot); resets them.
    pub(crate) fn take(&mut self) -> Blocks {
        let nslots = self.slots.len().max(1);
        let mut touched = std::mem::take(&mut self.touched);
        // Attribute order, then slot order: local slot order is table-wide slot order.
        touched.sort_unstable_by_key(|&at| (self.attrs[at as usize / nslots], at));
        let mut blocks: Blocks = Vec::new();
        for &at in &touched {
            let at = at as usize;
            let attr = self.attrs[at / nslots];
            let entry = self.entry(at);
            self.cells[at] = EMPTY_CELL;
            match blocks.last_mut() {
                Some((a, entries)) if *a == attr => entries.push(entry),
                _ => blocks.push((attr, vec![entry])),
            }
        }
        touched.clear();
        self.touched = touched;
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values that all share a long text hold hundreds of frequent n-grams: the build
    /// stops at its work bound, and what it kept is exact.
    #[test]
    fn crafted_values_meet_the_work_bound() {
        let common = "the quick brown fox jumps over the lazy dog, then naps a while";
        let values: Vec<String> = (0..200).map(|i| format!("{common} {i:03}")).collect();
        let entries = values
            .iter()
            .enumerate()
            .map(|(i, v)| (v.as_bytes(), (i % 2) as u32, 1 + (i % 7) as u64))
            .collect();
        let seg = Segment::from_entries(entries, 3, &RandomState::default()).unwrap();
        let bounded = SummaryConfig {
            max_work_per_value: 48,
            ..SummaryConfig::everything()
        };
        seg.summarize(&bounded, &[]);
        let n = seg.summarized();
        assert!(n > 0 && n <= 48, "{n} summaries");
        let few = Segment::from_entries(
            values.iter().map(|v| (v.as_bytes(), 0, 1)).collect(),
            3,
            &RandomState::default(),
        )
        .unwrap();
        few.summarize(
            &SummaryConfig {
                max_ngrams: 5,
                ..SummaryConfig::everything()
            },
            &[],
        );
        assert_eq!(few.summarized(), 5);
        // Every kept n-gram is in all 200 values: under attribute 0 (even values) the
        // one slot matched 100 of them, summing their counts.
        let want: u64 = (0..200).step_by(2).map(|i| 1 + (i % 7) as u64).sum();
        let sums = seg.summaries().expect("built");
        let s = sums
            .lookup(b"the", 0)
            .expect("the broadest trigram is summarized");
        assert_eq!(s.entries.len(), 1);
        assert_eq!((s.entries[0].slot, s.entries[0].matched), (3, 100));
        assert_eq!(s.sum(0), want);
        // Best values: highest count (6 + 1 = 7), then folded order.
        let best: Vec<String> = s.entries[0]
            .tops
            .iter()
            .take_while(|&&id| id != u32::MAX)
            .map(|&id| String::from_utf8_lossy(&seg.value(id)).into_owned())
            .collect();
        let mut expected: Vec<String> = (0..200)
            .step_by(2)
            .filter(|i| i % 7 == 6)
            .map(|i| format!("{common} {i:03}"))
            .collect();
        expected.truncate(SUMMARY_TOPS);
        assert_eq!(best, expected);
        // A needle held by no value is not summarized.
        assert!(sums.lookup(b"zzz", 0).is_none());
    }

    /// Sums past 32 bits are kept apart and read back exactly.
    #[test]
    fn big_sums_survive() {
        let big = 3_000_000_000u64;
        let entries = vec![
            (&b"abc one"[..], 0, big),
            (&b"abc two"[..], 0, big),
            (&b"abc six"[..], 0, big),
            (&b"xyz one"[..], 0, 5),
            (&b"xyz two"[..], 0, 6),
        ];
        let seg = Segment::from_entries(entries, 7, &RandomState::default()).unwrap();
        seg.summarize(&SummaryConfig::everything(), &[]);
        let sums = seg.summaries().expect("built");
        let abc = sums.lookup(b"abc", 0).expect("abc is summarized");
        assert_eq!((abc.entries.len(), abc.sum(0)), (1, 3 * big));
        let xyz = sums.lookup(b"xyz", 0).expect("xyz is summarized");
        assert_eq!(xyz.sum(0), 11);
        assert_eq!(xyz.sum(1), 0);
        // Under an attribute no value has, a summarized n-gram has no entries.
        assert!(sums.lookup(b"xyz", 1).is_some_and(|s| s.entries.is_empty()));
    }

    #[test]
    fn pack_takes_three_to_seven_bytes() {
        assert!(pack(b"ab").is_none());
        assert!(pack(b"abcdefgh").is_none());
        let (b, len) = unpack(pack(b"abc d").unwrap());
        assert_eq!(&b[..len], b"abc d");
    }
}
