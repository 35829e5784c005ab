//! The bulk-load path: one segment from many imports at once.

use crate::hasher::RandomState;

use super::builder::Builder;
use super::exact::hash_folded;
use super::segment::{GROUP, HEADER, POSTING, Segment, SegmentOverflow, cmp_folded};

/// Builds one segment from many imports at once by interning values in a hash table and
/// sorting only the distinct ones: the bulk-load path, much cheaper than merging one small
/// segment per import.
///
/// Kept small, for it sits beside the segment it builds: per distinct value its bytes and
/// 12 bytes, per posting 20, and a table of 4 bytes per slot at most half full.
#[derive(Debug, Default)]
pub(crate) struct BulkBuilder {
    /// Open addressing: value id + 1, 0 when empty.
    table: Vec<u32>,
    /// Representative spellings, concatenated.
    arena: Vec<u8>,
    /// Per value id, where its spelling is in `arena`, and its tag.
    spans: Vec<Span>,
    /// The postings of every import added so far.
    postings: Vec<Posting>,
}

/// A value of a [`BulkBuilder`]: its spelling at `arena[start..start + len]`, and `tag`, the
/// high half of its hash, which picks its home in the table and settles nearly every
/// mismatch there without reading the arena.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
    tag: u32,
}

/// One posting of a [`BulkBuilder`]: value (its id, then its rank once sorted), attribute,
/// slot, count (in two halves: 20 bytes, not the 24 a `u64` field would align to).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Posting {
    value: u32,
    attr: u32,
    slot: u32,
    count_hi: u32,
    count_lo: u32,
}

impl Posting {
    fn new(value: u32, attr: u32, slot: u32, count: u64) -> Self {
        Self {
            value,
            attr,
            slot,
            count_hi: (count >> 32) as u32,
            count_lo: count as u32,
        }
    }

    fn count(&self) -> u64 {
        u64::from(self.count_hi) << 32 | u64::from(self.count_lo)
    }
}

/// The table position a tag is looked for first.
#[inline]
fn tag_home(tag: u32, mask: usize) -> usize {
    tag as usize & mask
}

/// Values whose spellings [`BulkBuilder::finish`] loads together before building their
/// records.
const AHEAD: usize = 16;

impl BulkBuilder {
    fn value(&self, id: u32) -> &[u8] {
        let s = self.spans[id as usize];
        &self.arena[s.start as usize..s.start as usize + s.len as usize]
    }

    /// Makes room for `values` more distinct values of `bytes` bytes together and
    /// `postings` more postings, so that adding them grows nothing. A caller that knows an
    /// import's size says so first: the buffers are then allocated once, at their size,
    /// instead of grown (never held twice while copied, and a big allocation made at once
    /// is one the allocator returns to the system as soon as it is freed).
    ///
    /// Only what is written front to back is reserved so: pages of it never written cost
    /// nothing. The hash table, written all over, grows as values come.
    pub(crate) fn reserve(&mut self, values: usize, postings: usize, bytes: usize) {
        self.postings.reserve(postings);
        self.spans.reserve(values);
        self.arena.reserve(bytes);
    }

    /// Grows the table so that `values` more values can be added without growing it again.
    fn table_room(&mut self, values: usize) {
        if (self.spans.len() + values) * 2 >= self.table.len() {
            let mut size = (self.table.len() * 2).max(1024);
            while (self.spans.len() + values) * 2 >= size {
                size *= 2;
            }
            let mask = size - 1;
            let mut table = vec![0u32; size];
            for (id, s) in self.spans.iter().enumerate() {
                let mut at = tag_home(s.tag, mask);
                while table[at] != 0 {
                    at = (at + 1) & mask;
                }
                table[at] = id as u32 + 1;
            }
            self.table = table;
        }
    }

    /// The id of `value` (hash `h`, from [`hash_folded`]), added when new. The table must
    /// have room ([`BulkBuilder::table_room`]).
    fn intern(&mut self, value: &[u8], h: u64) -> Result<u32, SegmentOverflow> {
        let tag = (h >> 32) as u32;
        let mask = self.table.len() - 1;
        let mut at = tag_home(tag, mask);
        loop {
            let entry = self.table[at];
            if entry == 0 {
                break;
            }
            let id = entry - 1;
            if self.spans[id as usize].tag != tag {
                at = (at + 1) & mask;
                continue;
            }
            let current = self.value(id);
            // Most repeats are spelled alike: a plain comparison settles them.
            if current == value {
                return Ok(id);
            }
            if current.eq_ignore_ascii_case(value) {
                if value < current {
                    // Keep the byte-wise smallest spelling; the old bytes stay unused.
                    let start = self.arena_end(value.len())?;
                    self.arena.extend_from_slice(value);
                    self.spans[id as usize].start = start;
                }
                return Ok(id);
            }
            at = (at + 1) & mask;
        }
        let id = u32::try_from(self.spans.len())
            .ok()
            .filter(|&id| id < u32::MAX - 1)
            .ok_or(SegmentOverflow)?;
        let len = u32::try_from(value.len()).map_err(|_| SegmentOverflow)?;
        let start = self.arena_end(value.len())?;
        self.spans.push(Span { start, len, tag });
        self.arena.extend_from_slice(value);
        self.table[at] = id + 1;
        Ok(id)
    }

    /// Where `len` more bytes would start in the arena, which stays under 4 GiB.
    fn arena_end(&self, len: usize) -> Result<u32, SegmentOverflow> {
        let start = u32::try_from(self.arena.len()).map_err(|_| SegmentOverflow)?;
        u32::try_from(self.arena.len() + len).map_err(|_| SegmentOverflow)?;
        Ok(start)
    }

    /// Adds one import; returns its distinct values and `(attribute, value)` entries.
    pub(crate) fn add<V: AsRef<[u8]> + Default>(
        &mut self,
        entries: impl IntoIterator<Item = (V, u32, u64)>,
        slot: u32,
        hasher: &RandomState,
    ) -> Result<(usize, usize), SegmentOverflow> {
        const BATCH: usize = 16;
        let begin = self.postings.len();
        let mut hashes = [0u64; BATCH];
        let mut digest = 0u64;
        // Taken a batch at a time from the iterator: the caller need not collect a hint's
        // entries into a list first (for a hint of millions of values, a large one).
        let mut entries = entries.into_iter();
        let mut buf: [(V, u32, u64); BATCH] = std::array::from_fn(|_| (V::default(), 0, 0));
        loop {
            let mut filled = 0;
            for (slot_in_batch, e) in buf.iter_mut().zip(entries.by_ref()) {
                *slot_in_batch = e;
                filled += 1;
            }
            if filled == 0 {
                break;
            }
            let batch = &buf[..filled];
            self.table_room(batch.len());
            for (h, e) in hashes.iter_mut().zip(batch) {
                *h = hash_folded(hasher, e.0.as_ref());
            }
            // Load, in tight loops, the memory the lookups will read first: the cache misses
            // of a batch then overlap instead of following one another.
            let mask = self.table.len() - 1;
            let mut ids = [0u32; BATCH];
            for (id, &h) in ids.iter_mut().zip(&hashes[..batch.len()]) {
                *id = self.table[tag_home((h >> 32) as u32, mask)];
            }
            let mut starts = [0u32; BATCH];
            for (start, &id) in starts.iter_mut().zip(&ids[..batch.len()]) {
                if let Some(id) = id.checked_sub(1) {
                    let span = self.spans[id as usize];
                    digest ^= u64::from(span.tag);
                    *start = span.start;
                }
            }
            for &start in &starts[..batch.len()] {
                digest ^= u64::from(self.arena.get(start as usize).copied().unwrap_or(0));
            }
            for (&h, (value, attr, count)) in hashes.iter().zip(batch) {
                let id = self.intern(value.as_ref(), h)?;
                self.postings.push(Posting::new(id, *attr, slot, *count));
            }
        }
        std::hint::black_box(digest);
        // Values this import repeats under one attribute (spelt alike, or folding alike)
        // become one posting with the counts summed, in place. Only `(value, attr)` needs
        // ordering (the slot is this import's), and one `u64` key compares faster than the
        // whole posting.
        let mine = &mut self.postings[begin..];
        mine.sort_unstable_by_key(|p| u64::from(p.value) << 32 | u64::from(p.attr));
        let mut kept = begin;
        let mut distinct = 0;
        for k in begin..self.postings.len() {
            let p = self.postings[k];
            if kept > begin {
                let last = &mut self.postings[kept - 1];
                if last.value == p.value && last.attr == p.attr {
                    *last = Posting::new(
                        p.value,
                        p.attr,
                        slot,
                        last.count().saturating_add(p.count()),
                    );
                    continue;
                }
            }
            if kept == begin || self.postings[kept - 1].value != p.value {
                distinct += 1;
            }
            self.postings[kept] = p;
            kept += 1;
        }
        self.postings.truncate(kept);
        Ok((distinct, kept - begin))
    }

    /// The segment, indexed; without `grams`, its substring index and exact-match table are
    /// left for later ([`Segment::ensure_grams`], [`Segment::ensure_exact`]).
    pub(crate) fn finish(
        self,
        hasher: &RandomState,
        grams: bool,
    ) -> Result<Segment, SegmentOverflow> {
        // What only adding needed goes first, and each buffer as soon as it is used up: the
        // segment is built beside the builder, and for one hint of millions of values these
        // buffers are a large part of the import's peak memory.
        let Self {
            table,
            arena,
            spans,
            mut postings,
        } = self;
        drop(table);
        let value = |id: u32| {
            let s = spans[id as usize];
            &arena[s.start as usize..s.start as usize + s.len as usize]
        };
        let n = spans.len();
        let order = sort_folded(n, value);
        // The postings by value rank: ids become ranks, then one sort in place.
        {
            let mut rank = vec![0u32; n];
            for (r, &id) in order.iter().enumerate() {
                rank[id as usize] = r as u32;
            }
            for p in &mut postings {
                p.value = rank[p.value as usize];
            }
        }
        // By value rank only: [`Builder::push`] orders each value's own postings.
        postings.sort_unstable_by_key(|p| p.value);
        // A bound on the records' size (every byte maybe uppercase, a group per posting):
        // they are written straight into their final buffer, whose pages past the real size
        // are never touched.
        let bound = spans
            .iter()
            .map(|s| HEADER + s.len as usize + (s.len as usize).div_ceil(8))
            .sum::<usize>()
            + postings.len() * (GROUP + POSTING);
        let mut builder = Builder::with_capacity(n, bound);
        let mut run: Vec<(u32, u32, u64)> = Vec::new();
        let mut at = 0;
        let mut digest = 0u8;
        for (chunk, ids) in order.chunks(AHEAD).enumerate() {
            // The spellings are read in sorted order, scattered over the arena: touch a
            // chunk's first, in a tight loop, so that their cache misses overlap instead
            // of stalling each push in turn.
            for &id in ids {
                digest ^= value(id).first().copied().unwrap_or(0);
            }
            for (k, &id) in ids.iter().enumerate() {
                let r = chunk * AHEAD + k;
                run.clear();
                while let Some(p) = postings.get(at).filter(|p| p.value as usize == r) {
                    run.push((p.attr, p.slot, p.count()));
                    at += 1;
                }
                builder.push(value(id), &mut run)?;
            }
        }
        std::hint::black_box(digest);
        drop((postings, order, arena, spans));
        // A bulk load's segment (`grams` false) goes without both lookup structures until
        // the load ends: most are merged away before then.
        Ok(builder.finish().index(hasher, grams, grams))
    }
}

/// The ids `0..n` in ASCII-case-insensitive order of their values ([`cmp_folded`]), which
/// must differ under it. Sorting pairs of (first 16 folded bytes, id) moves no value
/// bytes; only ids whose 16-byte prefixes tie are compared in full.
fn sort_folded<'a>(n: usize, value: impl Fn(u32) -> &'a [u8]) -> Vec<u32> {
    let prefix = |v: &[u8]| {
        let mut b = [0u8; 16];
        for (d, s) in b.iter_mut().zip(v) {
            *d = s.to_ascii_lowercase();
        }
        u128::from_be_bytes(b)
    };
    let mut keyed: Vec<(u128, u32)> = (0..n as u32).map(|id| (prefix(value(id)), id)).collect();
    keyed.sort_unstable_by_key(|k| k.0);
    let mut i = 0;
    while i < keyed.len() {
        let mut j = i + 1;
        while j < keyed.len() && keyed[j].0 == keyed[i].0 {
            j += 1;
        }
        // A shorter value pads with zeros, so ties include prefixes and zero bytes alike.
        if j - i > 1 {
            keyed[i..j].sort_unstable_by(|a, b| cmp_folded(value(a.1), value(b.1)));
        }
        i = j;
    }
    keyed.into_iter().map(|k| k.1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The prefix-keyed sort orders values as comparing them in full does, including
        /// long shared prefixes, prefixes of one another and zero bytes.
        #[test]
        fn sort_folded_orders_as_cmp_folded(
            values in prop::collection::hash_set("(shared prefix 0123|[aA]{0,3})[aAb\\x00]{0,20}", 0..300),
        ) {
            let mut distinct: Vec<Vec<u8>> = Vec::new();
            for v in values {
                let v = v.into_bytes();
                if !distinct.iter().any(|d| d.eq_ignore_ascii_case(&v)) {
                    distinct.push(v);
                }
            }
            let got: Vec<&[u8]> = sort_folded(distinct.len(), |id| &distinct[id as usize])
                .into_iter()
                .map(|id| &distinct[id as usize][..])
                .collect();
            let mut want: Vec<&[u8]> = distinct.iter().map(Vec::as_slice).collect();
            want.sort_by(|a, b| cmp_folded(a, b));
            prop_assert_eq!(got, want);
        }
    }
}
