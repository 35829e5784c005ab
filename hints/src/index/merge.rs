//! Merging segments: one k-way merge in folded order that drops the postings of dead
//! slots, on two threads when the segments are big.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::hasher::RandomState;
use crate::threads::spawn_or_run;

use super::builder::{Builder, Chunks, RecSink};
use super::segment::{Segment, SegmentOverflow, cmp_folded, partition};

/// Merges of at least this many values run on two threads ([`Segment::merge_from`]): the
/// pile merges of a 1,000-peer cold start are bigger, those of a 200-peer one mostly not
/// (where the second thread's buffers weighed more on the import's peak than the time
/// saved).
const PARALLEL_MERGE: usize = 1_000_000;

impl Segment {
    /// Merges segments, keeping only postings whose slot is `live`, on two threads when it
    /// is big and `threads` allows; without `grams`, the substring index and the
    /// exact-match table are left for later ([`Segment::ensure_grams`],
    /// [`Segment::ensure_exact`]).
    pub(crate) fn merge(
        segments: &[&Segment],
        live: &(dyn Fn(u32) -> bool + Sync),
        hasher: &RandomState,
        grams: bool,
        threads: usize,
    ) -> Result<Self, SegmentOverflow> {
        let parallel = if threads >= 2 {
            PARALLEL_MERGE
        } else {
            usize::MAX
        };
        Self::merge_from(segments, live, hasher, grams, parallel)
    }

    /// [`Segment::merge`], on two threads when the segments hold `parallel` values or more
    /// (tests compare both ways).
    ///
    /// The two threads split the values at the middle one of the biggest segment: one
    /// merges those before it, the other the rest into chunks, which are then appended to
    /// the first half's records one by one, each freed once copied (so the second half is
    /// never held twice), with its record starts and value ids moved past the first's.
    /// The records come out byte for byte as one thread writes them.
    fn merge_from(
        segments: &[&Segment],
        live: &(dyn Fn(u32) -> bool + Sync),
        hasher: &RandomState,
        grams: bool,
        parallel: usize,
    ) -> Result<Self, SegmentOverflow> {
        let values: usize = segments.iter().map(|s| s.len()).sum();
        // Merged records are never bigger than the records they merge.
        let bound: usize = segments.iter().map(|s| s.recs.len()).sum();
        let mut builder = Builder::with_capacity(values, bound);
        let whole: Vec<(u32, u32)> = segments.iter().map(|s| (0, s.len() as u32)).collect();
        let big = segments.iter().max_by_key(|s| s.len());
        match big.filter(|_| values >= parallel && values > 0) {
            Some(big) => {
                let pivot = big.folded_value(big.len() as u32 / 2);
                let cuts: Vec<u32> = segments
                    .iter()
                    .map(|s| {
                        partition(s.len() as u32, |id| {
                            cmp_folded(s.folded_value(id), pivot).is_lt()
                        })
                    })
                    .collect();
                let head: Vec<(u32, u32)> = cuts.iter().map(|&c| (0, c)).collect();
                let tail: Vec<(u32, u32)> = segments
                    .iter()
                    .zip(&cuts)
                    .map(|(s, &c)| (c, s.len() as u32))
                    .collect();
                let tail_values = tail.iter().map(|r| (r.1 - r.0) as usize).sum();
                let merge_tail = || {
                    let mut b = Builder::with_sink(tail_values, Chunks::default());
                    merge_into(&mut b, segments, &tail, live).map(|()| b)
                };
                let (head_done, tail_done) = std::thread::scope(|scope| {
                    let name = std::thread::Builder::new().name("segment-merge".into());
                    let tail = spawn_or_run(scope, name, merge_tail);
                    let head_done = merge_into(&mut builder, segments, &head, live);
                    // If the tail's thread panicked, the tail is merged again here.
                    let tail_done = match tail.join() {
                        Some(Ok(done)) => done,
                        _ => merge_tail(),
                    };
                    (head_done, tail_done)
                });
                head_done?;
                builder.append(tail_done?)?;
            }
            None => merge_into(&mut builder, segments, &whole, live)?,
        }
        // Without `grams` (a merge that ends or happens during a bulk load), the exact-match
        // table waits too: built once the merged-away segments are freed.
        Ok(builder.finish().index(hasher, grams, grams))
    }
}

/// Merges the values `ranges[i].0..ranges[i].1` of each of `segments` (in folded order)
/// into `builder`, keeping only postings whose slot is `live`.
fn merge_into<S: RecSink>(
    builder: &mut Builder<S>,
    segments: &[&Segment],
    ranges: &[(u32, u32)],
    live: &(dyn Fn(u32) -> bool + Sync),
) -> Result<(), SegmentOverflow> {
    struct Cursor<'a> {
        key: &'a [u8],
        seg: usize,
        id: u32,
    }
    impl PartialEq for Cursor<'_> {
        fn eq(&self, other: &Self) -> bool {
            self.cmp(other).is_eq()
        }
    }
    impl Eq for Cursor<'_> {}
    impl PartialOrd for Cursor<'_> {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Cursor<'_> {
        // Reversed: BinaryHeap is a max-heap and we want the smallest value first.
        fn cmp(&self, other: &Self) -> Ordering {
            cmp_folded(other.key, self.key).then(other.seg.cmp(&self.seg))
        }
    }
    let mut heap = BinaryHeap::with_capacity(segments.len());
    for (seg, (s, &(from, _))) in segments.iter().zip(ranges).enumerate() {
        if from < ranges[seg].1 {
            heap.push(Cursor {
                key: s.folded_value(from),
                seg,
                id: from,
            });
        }
    }
    let mut group: Vec<(usize, u32)> = Vec::new();
    let mut postings: Vec<(u32, u32, u64)> = Vec::new();
    let mut spelling_buf: Vec<u8> = Vec::new();
    while let Some(first) = heap.pop() {
        group.clear();
        group.push((first.seg, first.id));
        while heap
            .peek()
            .is_some_and(|c| cmp_folded(c.key, first.key).is_eq())
        {
            if let Some(c) = heap.pop() {
                group.push((c.seg, c.id));
            }
        }
        postings.clear();
        let mut spelling: Option<(&Segment, u32)> = None;
        for &(seg, id) in &group {
            let s = segments[seg];
            let before = postings.len();
            postings.extend(
                s.postings(id)
                    .filter(|p| live(p.0))
                    .map(|(slot, attr, count)| (attr, slot, count)),
            );
            if postings.len() > before {
                spelling = match spelling {
                    Some((w, wid)) if w.cmp_spelling(wid, s, id).is_le() => Some((w, wid)),
                    _ => Some((s, id)),
                };
            }
            if let Some(next) = id.checked_add(1).filter(|&n| n < ranges[seg].1) {
                heap.push(Cursor {
                    key: s.folded_value(next),
                    seg,
                    id: next,
                });
            }
        }
        if let Some((s, id)) = spelling {
            spelling_buf.clear();
            s.write_value(id, &mut spelling_buf);
            builder.push(&spelling_buf, &mut postings)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::BulkBuilder;
    use crate::index::builder::seg;
    use crate::index::exact::hash_lower;
    use proptest::prelude::*;

    #[test]
    fn merge_drops_dead_slots_and_shares_values() {
        let h = RandomState::default();
        let a = seg(&[("alpha", 0, 1), ("beta", 0, 2)], 0, &h);
        let b = seg(&[("BETA", 0, 3), ("gamma", 0, 4)], 1, &h);
        let c = seg(&[("delta", 0, 4)], 2, &h);
        let m = Segment::merge(&[&a, &b, &c], &|s| s != 2, &h, true, 2).unwrap();
        let values: Vec<Vec<u8>> = (0..m.len() as u32)
            .map(|id| m.value(id).into_owned())
            .collect();
        assert_eq!(
            values,
            vec![b"alpha".to_vec(), b"BETA".to_vec(), b"gamma".to_vec()]
        );
        assert_eq!(
            m.postings(1).collect::<Vec<_>>(),
            vec![(0, 0, 2), (1, 0, 3)]
        );
        assert_eq!(m.slots(), &[(0, 2), (1, 2)]);
        assert_eq!(m.prefix_range(b"B"), 1..2);
        assert_eq!(m.prefix_range(b""), 0..3);
        assert_eq!(m.prefix_range(b"zz"), 3..3);
    }

    proptest! {
        /// A merge on two threads writes its segment byte for byte as one thread does,
        /// whatever the values (folding alike across segments, big counts, dead slots).
        #[test]
        fn a_merge_on_two_threads_writes_what_one_does(
            segs in prop::collection::vec(
                prop::collection::vec(
                    (
                        "[abAB]{0,6}",
                        0u32..3,
                        0u32..4,
                        prop_oneof![1u64..100, Just(u64::from(u32::MAX) + 5)],
                    ),
                    0..60,
                ),
                1..4,
            ),
            dead in 0u32..5,
        ) {
            let h = RandomState::default();
            let built: Vec<Segment> = segs
                .iter()
                .map(|entries| {
                    let mut bulk = BulkBuilder::default();
                    for slot in 0..4u32 {
                        let mine: Vec<(&[u8], u32, u64)> = entries
                            .iter()
                            .filter(|e| e.2 == slot)
                            .map(|e| (e.0.as_bytes(), e.1, e.3))
                            .collect();
                        bulk.add(mine, slot, &h).unwrap();
                    }
                    bulk.finish(&h, false).unwrap()
                })
                .collect();
            let refs: Vec<&Segment> = built.iter().collect();
            let live = |s: u32| s != dead;
            let one = Segment::merge_from(&refs, &live, &h, true, usize::MAX).unwrap();
            let two = Segment::merge_from(&refs, &live, &h, true, 0).unwrap();
            prop_assert_eq!(&one.recs[..], &two.recs[..]);
            prop_assert_eq!(&one.starts, &two.starts);
            prop_assert_eq!(&one.attr_bits, &two.attr_bits);
            prop_assert_eq!(&one.big_counts, &two.big_counts);
            prop_assert_eq!(one.slots(), two.slots());
            prop_assert_eq!(one.entries(), two.entries());
            prop_assert_eq!(one.value_bytes(), two.value_bytes());
            for id in 0..two.len() as u32 {
                let lower = two.folded_value(id).to_vec();
                prop_assert_eq!(two.find_exact(hash_lower(&h, &lower), &lower), Some(id));
            }
        }
    }
}
