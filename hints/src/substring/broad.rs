//! Broad summaries: per-peer sums precomputed for the short n-grams that a large share of a
//! segment's values contain.
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
//!
//! [`SUMMARY_TOPS`]: super::SUMMARY_TOPS

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::hasher::RandomState;
use crate::index::Segment;
use crate::threads::workers;

use super::accumulate::Accumulator;
use super::config::SummaryConfig;
use crate::index::sums::{Blocks, MAX_GRAM, SumEntry, Summaries, pack, unpack};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::substring::SUMMARY_TOPS;

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
}
