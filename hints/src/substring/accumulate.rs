//! Summing the values that hold a needle, per attribute and peer: the [`Accumulator`] that
//! broad and narrow summaries are built with, and a needle's sums computed on the spot
//! ([`Store::of_needle`]) to be kept in the substring cache ([`Segment::memoize`]).

use std::sync::Arc;

use memchr::memmem;

use crate::index::{Group, Segment};

use crate::index::cache::CacheBudget;
use crate::index::sums::{Blocks, CUT, CutBlocks, SUMMARY_TOPS, Store, SumEntry};

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

/// Memoized sums: here rather than with the rest of [`Segment`] in [`crate::index`], since
/// they read the segment's values.
impl Segment {
    /// Computes the sums under `attr` of the values holding `finder`'s needle from `ids`
    /// (the candidates, see [`Segment::substring_candidates`]) and keeps them if `budget`
    /// has room (see [`crate::index::cache`]).
    pub(crate) fn memoize(
        &self,
        finder: &memmem::Finder<'_>,
        ids: &[u32],
        exact: bool,
        attr: u32,
        budget: &Arc<CacheBudget>,
    ) -> Arc<Store> {
        let store = Arc::new(Store::of_needle(self, finder, ids, exact, attr));
        self.cache.put(finder.needle(), attr, store.clone(), budget);
        store
    }
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
        // Sums are computed from the core, hidden values included (see `index::Segment`).
        for g in seg.groups_in_core(start) {
            self.add_group(seg, id, g);
        }
    }

    /// Adds value `id` (record at `start`) under `attr` only.
    fn add_under(&mut self, seg: &Segment, id: u32, start: u32, attr: u32) {
        if let Some(g) = seg.groups_in_core(start).find(|g| g.attr == attr) {
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
                cut = CUT;
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
