//! Writing a segment: the record writer every segment is built with ([`Builder`]), one
//! import's segment ([`Segment::from_entries`]), and the lookup structures a built one gets
//! ([`Segment::index`]). Not to be confused with [`crate::builder`], which derives a hint.

use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;

use arc_swap::ArcSwapOption;

use crate::hasher::RandomState;
use crate::pages::PagesMut;
use crate::threads::spawn_or_run;

use super::cache::Cache;
use super::segment::{
    BIG, Core, GROUP, HAS_UPPER, HEADER, POSTING, Segment, SegmentOverflow, attr_bit, cmp_folded,
    rd32,
};

/// Segments with at least this many values build their exact table and substring index on
/// two threads.
const PARALLEL_INDEX: usize = 65_536;

impl Segment {
    /// Builds a segment from one import's entries `(value, attribute, count)`. Values that
    /// fold to the same bytes under one attribute are merged, their counts summed.
    pub(crate) fn from_entries<V: AsRef<[u8]>>(
        entries: Vec<(V, u32, u64)>,
        slot: u32,
        hasher: &RandomState,
    ) -> Result<Self, SegmentOverflow> {
        Ok(Self::from_entries_unindexed(entries, slot)?.index(hasher, true, true))
    }

    fn from_entries_unindexed<V: AsRef<[u8]>>(
        mut entries: Vec<(V, u32, u64)>,
        slot: u32,
    ) -> Result<Self, SegmentOverflow> {
        // Within a folded group the byte-wise smallest spelling sorts first.
        entries.sort_unstable_by(|a, b| {
            let (a, b) = (a.0.as_ref(), b.0.as_ref());
            cmp_folded(a, b).then_with(|| a.cmp(b))
        });
        let bound = entries
            .iter()
            .map(|e| {
                let len = e.0.as_ref().len();
                HEADER + len + len.div_ceil(8) + GROUP + POSTING
            })
            .sum();
        let mut builder = Builder::with_capacity(entries.len(), bound);
        let mut group: Vec<(u32, u32, u64)> = Vec::new();
        let mut i = 0;
        while i < entries.len() {
            let mut j = i + 1;
            while j < entries.len()
                && cmp_folded(entries[i].0.as_ref(), entries[j].0.as_ref()).is_eq()
            {
                j += 1;
            }
            group.clear();
            group.extend(
                entries[i..j]
                    .iter()
                    .map(|(_, attr, count)| (*attr, slot, *count)),
            );
            builder.push(entries[i].0.as_ref(), &mut group)?;
            i = j;
        }
        Ok(builder.finish())
    }

    /// Adds, with `exact`, the exact-match table and, with `grams`, the substring index.
    pub(super) fn index(self, hasher: &RandomState, exact: bool, grams: bool) -> Self {
        // The two structures read only the records: build them side by side when the
        // segment is big enough to be worth a thread.
        if exact && grams && self.len() >= PARALLEL_INDEX {
            let (table, grams) = std::thread::scope(|s| {
                let grams = spawn_or_run(s, std::thread::Builder::new(), || self.build_grams());
                let table = self.exact_table(hasher);
                // The thread only builds a value; if it panicked, build it here.
                let grams = match grams.join() {
                    Some(Ok(grams)) => grams,
                    _ => self.build_grams(),
                };
                (table, grams)
            });
            // Invariant: the segment is new, so neither is set yet.
            let _ = self.table.set(table);
            let _ = self.grams.set(grams);
        } else {
            if exact {
                let _ = self.table.set(self.exact_table(hasher));
            }
            if grams {
                let _ = self.grams.set(self.build_grams());
            }
        }
        self
    }
}

/// Writes the segment a delta applied in place adds ([`crate::table`]): whole records,
/// pushed in folded order, with their postings `(attribute, slot, count)`.
pub(crate) struct PatchBuilder {
    builder: Builder,
    values: usize,
}

impl PatchBuilder {
    /// A builder for about `values` values.
    pub(crate) fn new(values: usize) -> Self {
        Self {
            builder: Builder::with_capacity(values, values * 64),
            values: 0,
        }
    }

    /// Adds the next value, after every one before in folded order and folding to other
    /// bytes; postings of count 0 are left out, and a value with none.
    pub(crate) fn push(
        &mut self,
        spelling: &[u8],
        postings: &mut [(u32, u32, u64)],
    ) -> Result<(), SegmentOverflow> {
        if postings.iter().all(|p| p.2 == 0) {
            return Ok(());
        }
        self.values += 1;
        self.builder.push(spelling, postings)
    }

    /// The indexed segment; `None` when no value was pushed.
    pub(crate) fn finish(self, hasher: &RandomState) -> Option<Segment> {
        (self.values > 0).then(|| self.builder.finish().index(hasher, true, true))
    }
}

/// Where a [`Builder`] appends its records.
pub(super) trait RecSink {
    /// Bytes written.
    fn len(&self) -> usize;
    /// Appends `bytes`.
    fn extend_from_slice(&mut self, bytes: &[u8]);
}

impl RecSink for PagesMut {
    #[inline]
    fn len(&self) -> usize {
        PagesMut::len(self)
    }

    #[inline]
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        PagesMut::extend_from_slice(self, bytes);
    }
}

/// Bytes of one of [`Chunks`]' buffers (tests cross their edges with small records).
const CHUNK: usize = if cfg!(test) { 64 } else { 8 << 20 };

/// Records written in buffers of [`CHUNK`] bytes, to be appended to other records and
/// freed one by one ([`Builder::append`]). Each big buffer is a mapping of its own
/// ([`PagesMut`]), unmapped when dropped: a chunk copied and freed is not still counted
/// while the next is copied.
#[derive(Default)]
pub(super) struct Chunks {
    chunks: Vec<PagesMut>,
    len: usize,
}

impl RecSink for Chunks {
    fn len(&self) -> usize {
        self.len
    }

    fn extend_from_slice(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len();
        while !bytes.is_empty() {
            match self.chunks.last_mut().filter(|c| c.len() < CHUNK) {
                Some(last) => {
                    let n = (CHUNK - last.len()).min(bytes.len());
                    last.extend_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                }
                None => self.chunks.push(PagesMut::with_capacity(CHUNK)),
            }
        }
    }
}

pub(super) struct Builder<S = PagesMut> {
    recs: S,
    /// Where [`Builder::push`] puts a record together.
    scratch: Vec<u8>,
    starts: Vec<u32>,
    attr_bits: Vec<u8>,
    big_counts: Vec<(u32, u64)>,
    slot_entries: Vec<u64>,
    entries: usize,
    value_bytes: usize,
}

impl Builder {
    /// A builder for about `values` values whose records take at most `bound` bytes.
    pub(super) fn with_capacity(values: usize, bound: usize) -> Self {
        Builder::with_sink(values, PagesMut::with_capacity(bound))
    }

    /// Appends the records of `tail`, whose values all come after this builder's in
    /// folded order ([`Segment::merge_from`]): copied a chunk at a time, each freed once
    /// copied, with the tail's record starts, count positions and value ids moved past
    /// this builder's.
    pub(super) fn append(&mut self, tail: Builder<Chunks>) -> Result<(), SegmentOverflow> {
        let base = self.recs.len();
        let first = self.starts.len();
        // Record starts and count positions stay u32, value ids below u32::MAX.
        if u32::try_from(base + tail.recs.len).is_err()
            || u32::try_from(first + tail.starts.len()).is_err()
        {
            return Err(SegmentOverflow);
        }
        let (base, first) = (base as u32, first as u32);
        for mut chunk in tail.recs.chunks {
            self.recs.extend_from_slice(chunk.bytes_mut());
        }
        let recs = self.recs.bytes_mut();
        for &start in &tail.starts {
            let at = (base + start) as usize + 8;
            let id = rd32(recs, at) + first;
            recs[at..at + 4].copy_from_slice(&id.to_le_bytes());
        }
        self.starts.extend(tail.starts.iter().map(|&s| s + base));
        self.attr_bits.extend_from_slice(&tail.attr_bits);
        self.big_counts.extend(
            tail.big_counts
                .iter()
                .map(|&(at, count)| (at + base, count)),
        );
        if self.slot_entries.len() < tail.slot_entries.len() {
            self.slot_entries.resize(tail.slot_entries.len(), 0);
        }
        for (n, m) in self.slot_entries.iter_mut().zip(&tail.slot_entries) {
            *n += m;
        }
        self.entries += tail.entries;
        self.value_bytes += tail.value_bytes;
        Ok(())
    }
}

impl<S: RecSink> Builder<S> {
    /// A builder for about `values` values writing its records to `recs`.
    pub(super) fn with_sink(values: usize, recs: S) -> Self {
        Self {
            recs,
            scratch: Vec::new(),
            starts: Vec::with_capacity(values),
            attr_bits: Vec::with_capacity(values),
            big_counts: Vec::new(),
            slot_entries: Vec::new(),
            entries: 0,
            value_bytes: 0,
        }
    }

    /// Adds the next value (in folded order) with postings `(attr, slot, count)`; sorts them
    /// and sums duplicates.
    pub(super) fn push(
        &mut self,
        spelling: &[u8],
        postings: &mut [(u32, u32, u64)],
    ) -> Result<(), SegmentOverflow> {
        postings.sort_unstable();
        let len = u32::try_from(spelling.len())
            .ok()
            .filter(|&n| n < HAS_UPPER)
            .ok_or(SegmentOverflow)?;
        let upper = spelling.iter().any(u8::is_ascii_uppercase);
        let bitmap = if upper { spelling.len().div_ceil(8) } else { 0 };
        // At most one group header per posting.
        let most = HEADER + spelling.len() + bitmap + postings.len() * (GROUP + POSTING);
        let at = self.recs.len();
        let id = u32::try_from(self.starts.len()).map_err(|_| SegmentOverflow)?;
        // Record starts (+ 1 in the exact table) and count positions are u32.
        if u32::try_from(at + most).is_err() || id == u32::MAX {
            return Err(SegmentOverflow);
        }
        self.starts.push(at as u32);
        // The record is put together in a scratch buffer that stays in cache, then
        // appended to the segment's pages in one copy.
        let mut rec = std::mem::take(&mut self.scratch);
        rec.clear();
        let word = len | if upper { HAS_UPPER } else { 0 };
        rec.extend_from_slice(&word.to_le_bytes());
        rec.extend_from_slice(&0u32.to_le_bytes());
        rec.extend_from_slice(&id.to_le_bytes());
        let base = rec.len();
        rec.extend_from_slice(spelling);
        rec[base..].make_ascii_lowercase();
        if upper {
            let base = rec.len();
            rec.resize(base + bitmap, 0);
            let bits = &mut rec[base..];
            for (k, b) in spelling.iter().enumerate() {
                if b.is_ascii_uppercase() {
                    bits[k / 8] |= 1 << (k % 8);
                }
            }
        }
        self.value_bytes += spelling.len();
        let mut groups = 0u32;
        let mut bits = 0u8;
        // Where the current group's posting count goes (in `rec`), its attribute, its
        // postings.
        let mut group: Option<(usize, u32, u32)> = None;
        let mut k = 0;
        while k < postings.len() {
            let (attr, slot, mut count) = postings[k];
            k += 1;
            while k < postings.len() && postings[k].0 == attr && postings[k].1 == slot {
                count = count.saturating_add(postings[k].2);
                k += 1;
            }
            if count == 0 {
                continue;
            }
            match &mut group {
                Some((_, a, n)) if *a == attr => *n += 1,
                _ => {
                    if let Some((pos, _, n)) = group {
                        rec[pos..pos + 4].copy_from_slice(&n.to_le_bytes());
                    }
                    rec.extend_from_slice(&attr.to_le_bytes());
                    bits |= attr_bit(attr);
                    group = Some((rec.len(), attr, 1));
                    rec.extend_from_slice(&0u32.to_le_bytes());
                    groups += 1;
                }
            }
            rec.extend_from_slice(&slot.to_le_bytes());
            let stored = if count >= u64::from(BIG) {
                self.big_counts.push(((at + rec.len()) as u32, count));
                BIG
            } else {
                count as u32
            };
            rec.extend_from_slice(&stored.to_le_bytes());
            self.entries += 1;
            let s = slot as usize;
            if self.slot_entries.len() <= s {
                self.slot_entries.resize(s + 1, 0);
            }
            self.slot_entries[s] += 1;
        }
        if let Some((pos, _, n)) = group {
            rec[pos..pos + 4].copy_from_slice(&n.to_le_bytes());
        }
        rec[4..8].copy_from_slice(&groups.to_le_bytes());
        self.recs.extend_from_slice(&rec);
        self.scratch = rec;
        self.attr_bits.push(bits);
        Ok(())
    }
}

impl Builder {
    pub(super) fn finish(self) -> Segment {
        let mut seg = Core {
            recs: self.recs.freeze(),
            starts: self.starts,
            attr_bits: self.attr_bits,
            table: OnceLock::new(),
            big_counts: self.big_counts,
            slots: self
                .slot_entries
                .iter()
                .enumerate()
                .filter(|e| *e.1 > 0)
                .map(|(s, &n)| (s as u32, n))
                .collect(),
            entries: self.entries,
            value_bytes: self.value_bytes,
            grams: OnceLock::new(),
            summaries: ArcSwapOption::empty(),
            summarizing: AtomicBool::new(false),
            cache: Cache::default(),
        };
        seg.starts.shrink_to_fit();
        seg.attr_bits.shrink_to_fit();
        Segment::from_core(seg)
    }
}

/// A segment of one import's `(value, attribute, count)`, for tests.
#[cfg(test)]
pub(super) fn seg(values: &[(&str, u32, u64)], slot: u32, h: &RandomState) -> Segment {
    let entries = values
        .iter()
        .map(|(v, a, c)| (v.as_bytes(), *a, *c))
        .collect();
    Segment::from_entries(entries, slot, h).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::exact::hash_folded;

    #[test]
    fn folds_and_merges_spellings() {
        let h = RandomState::default();
        let s = seg(
            &[
                ("Garcia", 0, 3),
                ("GARCIA", 0, 2),
                ("garcia", 1, 1),
                ("Moon", 0, 5),
            ],
            7,
            &h,
        );
        assert_eq!(s.len(), 2);
        let id = s.find_exact(hash_folded(&h, b"gArCiA"), b"garcia").unwrap();
        assert_eq!(&*s.value(id), b"GARCIA");
        assert_eq!(
            s.postings(id).collect::<Vec<_>>(),
            vec![(7, 0, 5), (7, 1, 1)]
        );
        assert_eq!(s.find_exact(hash_folded(&h, b"garci"), b"garci"), None);
        assert_eq!(s.slots(), &[(7, 3)]);
    }

    #[test]
    fn big_counts_survive() {
        let h = RandomState::default();
        let s = seg(
            &[("x", 0, u64::MAX - 1), ("y", 0, u64::from(u32::MAX))],
            0,
            &h,
        );
        let counts: Vec<u64> = (0..2).flat_map(|id| s.postings(id).map(|p| p.2)).collect();
        assert_eq!(counts, vec![u64::MAX - 1, u64::from(u32::MAX)]);
        let m = Segment::merge(&[&s], &|_| true, &h, true, 1).unwrap();
        let counts: Vec<u64> = (0..2).flat_map(|id| m.postings(id).map(|p| p.2)).collect();
        assert_eq!(counts, vec![u64::MAX - 1, u64::from(u32::MAX)]);
    }
}
