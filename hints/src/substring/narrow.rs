//! Narrow summaries: the best slots of every 4- to 6-byte substring that at least
//! [`SummaryConfig::narrow_min_values`] of a big segment's values hold, precomputed, so
//! that a substring query asked for the first time costs about what a cached one does.
//!
//! A broad summary ([`super::broad`]) keeps every slot's sum, which only pays for the
//! few hundred n-grams a large share of the values hold. Below that share there are tens
//! of thousands of n-grams, each matching tens to tens of thousands of values: too many to
//! keep whole, too broad to sum on the spot within microseconds. A referral page needs
//! only the best few slots, though. So for each such n-gram, per attribute, a narrow
//! summary keeps the first [`SummaryConfig::narrow_slots`] slots in rank order (highest
//! sum, then the table's tie position) with their sums, matched values and best values,
//! and says whether others were left out.
//!
//! The order is the query's own: a slot's tie position among the live peers follows from
//! its hint alone (its total, then its DSI), so the order of two slots never changes while
//! they live, and a dead slot never lives again. A slot's postings sit in one segment, so
//! the pages of the segments merge into the table's. A page of `limit` is therefore among
//! the kept slots while `limit` of them live ([`crate::index::sums::Summary::exact_for`]); a query
//! it cannot answer (a bigger page, too many peers gone since) scans as before, and once
//! more than an eighth of a segment's slots have died its summaries are built again
//! ([`super::summarize`]).
//!
//! The build shares work by 4-gram: each 4-gram held by enough values has its values read
//! in one pipelined pass that sums them and counts the 5- and 6-grams starting with it
//! there (all of whose values are in the 4-gram's list). An extension held by as many
//! values as its one-byte-shorter prefix is held by the same ones and shares its blocks
//! (`garci`, `garcia`); the others held by enough values have their values gathered in a
//! second pass and sum their own. Every value is so read at most twice per distinct
//! 4-gram it holds, whatever the number of n-grams summarized, and a worker's memory is
//! bounded by the values of the extensions it sums, not by every value's extensions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use memchr::memmem;

use crate::hasher::RandomState;
use crate::index::Segment;
use crate::threads::workers;

use super::accumulate::Accumulator;
use super::config::SummaryConfig;
use crate::index::sums::{CutBlocks, NARROW_MAX, NARROW_MIN, SumEntry, Summaries, pack, unpack};

/// One n-gram's narrow summary: per attribute, its kept entries by slot with their full
/// sums, and how the block was cut.
pub(crate) type NarrowBlocks = CutBlocks;

/// One n-gram's part of what [`build`] made.
#[derive(Debug)]
pub(crate) enum Made {
    /// Its blocks.
    Blocks(NarrowBlocks),
    /// The same values hold it as hold this shorter n-gram (summarized here, or broadly
    /// already): it shares that one's blocks.
    Same(u64),
}

/// What [`build`] made.
#[derive(Debug, Default)]
pub(crate) struct Built {
    /// Per n-gram (packed, [`pack`]), ascending: its summary.
    pub grams: Vec<(u64, Made)>,
    /// The 4-grams (substring index keys) whose extensions were all considered,
    /// ascending: every one held by `min_values` values or more unless the memory bound
    /// stopped the build.
    pub quads: Vec<u32>,
}

/// Adds to `out`, `seg`'s broad summaries, the narrow ones ([`build`]) within
/// [`SummaryConfig::narrow_budget_divisor`].
pub(crate) fn add(out: &mut Summaries, seg: &Segment, cfg: &SummaryConfig, ties: &[u32]) {
    let budget = match cfg.narrow_budget_divisor {
        0 => usize::MAX,
        d => seg.record_bytes() / d,
    };
    let narrow = build(seg, cfg, &out.index, budget, ties);
    out.index.reserve(narrow.grams.len());
    let mut same = Vec::new();
    let mut complete = true;
    for (key, made) in narrow.grams {
        match made {
            // Under no attribute are enough postings: summed on the spot.
            Made::Blocks(blocks) if blocks.is_empty() => {}
            Made::Blocks(blocks) => complete &= out.push_narrow(key, blocks),
            Made::Same(origin) => same.push((key, origin)),
        }
    }
    // An origin is never itself a `Same`, and its blocks are in by now.
    for (key, origin) in same {
        if let Some(&range) = out.index.get(&origin) {
            out.index.insert(key, range);
        }
    }
    // A store too full for some n-gram (over 2^31 blocks) covers nothing.
    if complete && cfg.narrow_min_values > 0 {
        out.narrow_cover = cfg.narrow_min_values;
        out.narrow_quads = narrow.quads;
    }
    out.store.shrink_to_fit();
    out.index.shrink_to_fit();
}

/// Summarizes narrowly every 4- to 6-gram of `seg` held by at least
/// `cfg.narrow_min_values` values, except those in `skip` (summarized broadly already),
/// on `cfg.threads` threads, until the blocks made pass `budget` bytes. `ties` holds each
/// slot's tie position ([`crate::table`]'s rank order between equal sums; `u32::MAX` for
/// a dead slot); empty, slots tie in slot order.
pub(crate) fn build(
    seg: &Segment,
    cfg: &SummaryConfig,
    skip: &HashMap<u64, (u32, u32), RandomState>,
    budget: usize,
    ties: &[u32],
) -> Built {
    let min = cfg.narrow_min_values;
    if min == 0 || cfg.narrow_slots == 0 || seg.len() < cfg.min_values.max(1) {
        return Built::default();
    }
    let mut quads = seg.quad_cards(min);
    // Broadest first, so that a memory bound leaves out the cheapest to scan.
    quads.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let next = AtomicUsize::new(0);
    let bytes = AtomicUsize::new(0);
    let work = || {
        let mut b = QuadBuild::new(seg, cfg, skip, ties);
        let mut out: Vec<(u64, Made)> = Vec::new();
        let mut done = Vec::new();
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= quads.len() || bytes.load(Ordering::Relaxed) > budget {
                break;
            }
            let made = b.quad(quads[k].0, &mut out);
            bytes.fetch_add(made, Ordering::Relaxed);
            done.push(quads[k].0);
        }
        (out, done)
    };
    // A worker that panicked leaves its 4-grams out: only speed is lost.
    let parts = workers(cfg.threads.max(1), work);
    let mut built = Built::default();
    for (grams, done) in parts {
        built.grams.extend(grams);
        built.quads.extend(done);
    }
    built.grams.sort_unstable_by_key(|g| g.0);
    built.quads.sort_unstable();
    built
}

/// One worker's state while it summarizes 4-grams and their extensions.
struct QuadBuild<'a> {
    seg: &'a Segment,
    min: usize,
    keep: usize,
    skip: &'a HashMap<u64, (u32, u32), RandomState>,
    ties: &'a [u32],
    acc: Accumulator,
    /// The current 4-gram's values.
    ids: Vec<u32>,
    /// Extension -> how many of the 4-gram's values hold it.
    counts: HashMap<u64, u32, RandomState>,
    /// Extension -> its place in the lists of values gathered for the extensions summed on
    /// their own.
    list_of: HashMap<u64, usize, RandomState>,
    /// n-gram -> `(values holding it, the n-gram whose blocks it has)`, for the current
    /// 4-gram and its extensions.
    shared: HashMap<u64, (usize, u64), RandomState>,
    local: Vec<u64>,
}

/// Puts in `out` (cleared first) the 5- and 6-byte extensions (packed) of the 4-gram
/// `quad` in the folded value `v`, each once.
fn extensions(v: &[u8], quad: &[u8], out: &mut Vec<u64>) {
    out.clear();
    for (p, w) in v.windows(NARROW_MIN).enumerate() {
        if w != quad {
            continue;
        }
        for len in NARROW_MIN + 1..=NARROW_MAX {
            if let Some(k) = v.get(p..p + len).and_then(pack) {
                out.push(k);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
}

impl<'a> QuadBuild<'a> {
    fn new(
        seg: &'a Segment,
        cfg: &SummaryConfig,
        skip: &'a HashMap<u64, (u32, u32), RandomState>,
        ties: &'a [u32],
    ) -> Self {
        Self {
            seg,
            min: cfg.narrow_min_values.max(1),
            keep: cfg.narrow_slots.max(1),
            skip,
            ties,
            acc: Accumulator::new(seg),
            ids: Vec::new(),
            counts: HashMap::default(),
            list_of: HashMap::default(),
            shared: HashMap::default(),
            local: Vec::new(),
        }
    }

    /// Summarizes the 4-gram `key` (big-endian bytes) and its 5- and 6-byte extensions
    /// held by enough values; appends them to `out` and returns the bytes they take.
    ///
    /// One pipelined pass over the 4-gram's values (records loaded a batch ahead) sums
    /// them and counts each one's extensions. An extension held by as many values as its
    /// prefix shares the prefix's blocks; the others held by enough values have their
    /// values gathered in a second pass (only when there are such), each list exactly as
    /// long as its count, and sum them. The memory is so bounded by the values of the
    /// extensions summed, not by every value's every extension: a 4-gram that all of a
    /// big segment's values hold (`auth` in `Author ...`) would otherwise list millions
    /// of `(extension, value)` pairs on each worker at once.
    fn quad(&mut self, key: u32, out: &mut Vec<(u64, Made)>) -> usize {
        let seg = self.seg;
        let quad = key.to_be_bytes();
        let Some(quad_key) = pack(&quad) else {
            return 0;
        };
        let broad = self.skip.contains_key(&quad_key);
        // Every candidate holds the 4-gram: the pass checks nothing.
        let finder = memmem::Finder::new(&quad);
        seg.quad_ids(key, &mut self.ids);
        self.counts.clear();
        {
            let (acc, counts, local) = (&mut self.acc, &mut self.counts, &mut self.local);
            seg.for_each_candidate(&finder, &self.ids, true, |id, start| {
                if !broad {
                    acc.add(seg, id, start);
                }
                extensions(seg.folded_value_at(start), &quad, local);
                for &k in local.iter() {
                    *counts.entry(k).or_insert(0) += 1;
                }
            });
        }
        let mut made = 0;
        if !broad {
            made += self.finish(quad_key, out);
        }
        // By extension: the 5-grams first (the length is the key's top byte), so that a
        // 6-gram's prefix is settled before it.
        let mut held: Vec<(u64, usize)> = self
            .counts
            .iter()
            .filter(|e| *e.1 as usize >= self.min)
            .map(|(&k, &n)| (k, n as usize))
            .collect();
        held.sort_unstable();
        // Per n-gram summarized so far: how many values hold it and whose blocks it has.
        self.shared.clear();
        self.shared.insert(quad_key, (self.ids.len(), quad_key));
        let mut own: Vec<(u64, usize)> = Vec::new();
        for &(ext, n) in &held {
            // An extension's values are among its prefix's: as many are the same ones.
            let (b, len) = unpack(ext);
            let prefix = pack(&b[..len - 1]).unwrap_or(quad_key);
            let same = self.shared.get(&prefix).filter(|s| s.0 == n).map(|s| s.1);
            if let Some(origin) = same {
                self.shared.insert(ext, (n, origin));
                out.push((ext, Made::Same(origin)));
                made += SAME_BYTES;
                continue;
            }
            self.shared.insert(ext, (n, ext));
            if !self.skip.contains_key(&ext) {
                own.push((ext, n));
            }
        }
        if own.is_empty() {
            return made;
        }
        self.list_of.clear();
        let mut lists: Vec<Vec<u32>> = Vec::with_capacity(own.len());
        for (i, &(ext, n)) in own.iter().enumerate() {
            self.list_of.insert(ext, i);
            lists.push(Vec::with_capacity(n));
        }
        {
            let (list_of, local) = (&self.list_of, &mut self.local);
            seg.for_each_candidate(&finder, &self.ids, true, |id, start| {
                extensions(seg.folded_value_at(start), &quad, local);
                for k in local.iter() {
                    if let Some(&i) = list_of.get(k) {
                        lists[i].push(id);
                    }
                }
            });
        }
        for ((ext, _), ids) in own.into_iter().zip(lists) {
            let acc = &mut self.acc;
            seg.for_each_candidate(&finder, &ids, true, |id, start| {
                acc.add(seg, id, start);
            });
            drop(ids);
            made += self.finish(ext, out);
        }
        made
    }

    /// Keeps each attribute's best slots of what was summed as `key`'s summary, appended
    /// to `out`; returns its bytes.
    fn finish(&mut self, key: u64, out: &mut Vec<(u64, Made)>) -> usize {
        let ties = self.ties;
        let blocks = self
            .acc
            .take_best(self.keep, self.min, |slot| tie_of(ties, slot));
        let size = blocks
            .iter()
            .map(|b| 13 + b.1.len() * std::mem::size_of::<SumEntry>())
            .sum::<usize>()
            + SAME_BYTES;
        out.push((key, Made::Blocks(blocks)));
        size
    }
}

/// What an n-gram costs in the summaries' index.
const SAME_BYTES: usize = 24;

/// The tie position of `slot` in `ties` (see [`build`]): `u32::MAX` when dead, the slot
/// itself when `ties` is empty.
pub(crate) fn tie_of(ties: &[u32], slot: u32) -> u32 {
    match ties {
        [] => slot,
        _ => ties.get(slot as usize).copied().unwrap_or(u32::MAX),
    }
}
