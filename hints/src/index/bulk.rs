//! The bulk-load path: one segment from many imports at once.

use crate::hasher::RandomState;
use crate::pages::Scratch;

use super::builder::Builder;
use super::exact::hash_folded;
use super::segment::{GROUP, HEADER, POSTING, Segment, SegmentOverflow, cmp_folded};

/// Builds one segment from many imports at once by interning values in a hash table and
/// sorting only the distinct ones: the bulk-load path, much cheaper than merging one small
/// segment per import.
///
/// Kept small, for it sits beside the segment it builds: per distinct value its bytes and
/// 12 bytes, per posting 20, and a table of 4 bytes per slot at most half full; each in a
/// [`Scratch`] buffer, whose memory is the system's again as soon as the build is done
/// with it.
#[derive(Debug, Default)]
pub(crate) struct BulkBuilder {
    /// Open addressing: value id + 1, 0 when empty.
    table: Scratch<u32>,
    /// Representative spellings, concatenated.
    arena: Scratch<u8>,
    /// Per value id, where its spelling is in `arena`, and its tag.
    spans: Scratch<Span>,
    /// The postings of every import added so far.
    postings: Scratch<Posting>,
}

/// A value of a [`BulkBuilder`]: its spelling at `arena[start..start + len]`, and `tag`, the
/// high half of its hash, which picks its home in the table and settles nearly every
/// mismatch there without reading the arena.
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Span {
    start: u32,
    len: u32,
    tag: u32,
}

/// One posting of a [`BulkBuilder`]: value (its id, then its rank once sorted), attribute,
/// slot, count (in two halves: 20 bytes, not the 24 a `u64` field would align to).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
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
            let mut table = Scratch::filled(size, 0u32);
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
            postings,
        } = self;
        drop(table);
        let value = |id: u32| {
            let s = spans[id as usize];
            &arena[s.start as usize..s.start as usize + s.len as usize]
        };
        let n = spans.len();
        let order = sort_folded(n, value);
        let total = postings.len();
        // A bound on the records' size (every byte maybe uppercase, a group per posting):
        // they are written straight into their final buffer, whose pages past the real size
        // are never touched.
        let bound = spans
            .iter()
            .map(|s| HEADER + s.len as usize + (s.len as usize).div_ceil(8))
            .sum::<usize>()
            + total * (GROUP + POSTING);
        let mut by_rank = {
            let mut rank = Scratch::filled(n, 0u32);
            for (r, &id) in order.iter().enumerate() {
                rank[id as usize] = r as u32;
            }
            let ranked = ByRank::sort(&postings, &rank);
            drop(postings);
            ranked
        };
        let mut builder = Builder::with_capacity(n, bound);
        let mut run: Vec<(u32, u32, u64)> = Vec::new();
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
                by_rank.take(r, &mut run);
                builder.push(value(id), &mut run)?;
            }
        }
        std::hint::black_box(digest);
        drop((by_rank, order, arena, spans));
        // A bulk load's segment (`grams` false) goes without both lookup structures until
        // the load ends: most are merged away before then.
        Ok(builder.finish().index(hasher, grams, grams))
    }
}

/// Postings in chunks of this many (5 MiB: each chunk a mapping of its own, see
/// [`Scratch`]).
const RANKED_CHUNK: usize = 1 << 18;

/// A builder's postings grouped by the rank of their value, in chunks that the records'
/// writing gives back as soon as it has read past them: the postings then cost nothing at
/// the end of a build, when the records are all written (for one hint of millions of
/// values, that is where the import's memory peaks).
struct ByRank {
    chunks: Vec<Scratch<Posting>>,
    /// Per rank, where its postings end (after [`ByRank::sort`]); they start where the
    /// rank before ends.
    ends: Scratch<u32>,
    /// Where the next rank's postings start.
    at: usize,
}

impl ByRank {
    /// `postings` by `rank` of their value (a counting sort: one pass to count, one to
    /// place; a value's own postings in no particular order, [`Builder::push`] orders
    /// them).
    fn sort(postings: &[Posting], rank: &[u32]) -> Self {
        let n = rank.len();
        let mut ends = Scratch::filled(n, 0u32);
        for p in postings {
            ends[rank[p.value as usize] as usize] += 1;
        }
        // Each rank's start, to be advanced past its postings as they are placed.
        let mut sum = 0u32;
        for e in ends.iter_mut() {
            let count = *e;
            *e = sum;
            sum += count;
        }
        let mut chunks: Vec<Scratch<Posting>> = (0..postings.len().div_ceil(RANKED_CHUNK))
            .map(|k| {
                let len = RANKED_CHUNK.min(postings.len() - k * RANKED_CHUNK);
                Scratch::filled(len, bytemuck::Zeroable::zeroed())
            })
            .collect();
        for p in postings {
            let r = rank[p.value as usize] as usize;
            let at = ends[r] as usize;
            ends[r] += 1;
            chunks[at / RANKED_CHUNK][at % RANKED_CHUNK] = *p;
        }
        Self {
            chunks,
            ends,
            at: 0,
        }
    }

    /// Appends to `run` the `(attribute, slot, count)` of rank `r`'s postings; ranks are
    /// taken in order, and each chunk is given back once read past.
    fn take(&mut self, r: usize, run: &mut Vec<(u32, u32, u64)>) {
        let end = self.ends.get(r).map_or(self.at, |&e| e as usize);
        while self.at < end {
            let (k, i) = (self.at / RANKED_CHUNK, self.at % RANKED_CHUNK);
            let Some(p) = self.chunks.get(k).and_then(|c| c.get(i)) else {
                break;
            };
            run.push((p.attr, p.slot, p.count()));
            self.at += 1;
            if self.at.is_multiple_of(RANKED_CHUNK) {
                self.chunks[k] = Scratch::default();
            }
        }
    }
}

/// A value id with the first 16 bytes of its value, folded, as a big-endian number in two
/// halves: what [`sort_folded`] sorts (24 bytes; a `u128` key would align it to 32).
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Keyed {
    hi: u64,
    lo: u64,
    id: u32,
    pad: u32,
}

/// The ids `0..n` in ASCII-case-insensitive order of their values ([`cmp_folded`]), which
/// must differ under it. Sorting pairs of (first 16 folded bytes, id) moves no value
/// bytes; only ids whose 16-byte prefixes tie are compared in full.
fn sort_folded<'a>(n: usize, value: impl Fn(u32) -> &'a [u8]) -> Scratch<u32> {
    let prefix = |v: &[u8]| {
        let mut b = [0u8; 16];
        for (d, s) in b.iter_mut().zip(v) {
            *d = s.to_ascii_lowercase();
        }
        u128::from_be_bytes(b)
    };
    let mut keyed: Scratch<Keyed> = Scratch::with_capacity(n);
    for id in 0..n as u32 {
        let key = prefix(value(id));
        keyed.push(Keyed {
            hi: (key >> 64) as u64,
            lo: key as u64,
            id,
            pad: 0,
        });
    }
    keyed.sort_unstable_by_key(|k| (k.hi, k.lo));
    let mut i = 0;
    while i < keyed.len() {
        let mut j = i + 1;
        while j < keyed.len() && (keyed[j].hi, keyed[j].lo) == (keyed[i].hi, keyed[i].lo) {
            j += 1;
        }
        // A shorter value pads with zeros, so ties include prefixes and zero bytes alike.
        if j - i > 1 {
            keyed[i..j].sort_unstable_by(|a, b| cmp_folded(value(a.id), value(b.id)));
        }
        i = j;
    }
    let mut order = Scratch::with_capacity(n);
    for k in keyed.iter() {
        order.push(k.id);
    }
    order
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
                .iter()
                .map(|&id| &distinct[id as usize][..])
                .collect();
            let mut want: Vec<&[u8]> = distinct.iter().map(Vec::as_slice).collect();
            want.sort_by(|a, b| cmp_folded(a, b));
            prop_assert_eq!(got, want);
        }
    }

    /// Postings sorted by rank come back rank by rank, each rank's whole, across chunk
    /// boundaries, and the chunks read past are given back.
    #[test]
    fn postings_by_rank_span_chunks() {
        let n = 1_000u32;
        let total = RANKED_CHUNK * 2 + 12_345;
        // Value ids spread over the ranks unevenly; the rank of id `v` is `n - 1 - v`.
        let postings: Vec<Posting> = (0..total)
            .map(|i| {
                let v = ((i * 7_919) % (n as usize * 3)) as u32 % n;
                Posting::new(v, (i % 3) as u32, i as u32, i as u64 + (1 << 33))
            })
            .collect();
        let rank: Vec<u32> = (0..n).map(|v| n - 1 - v).collect();
        let mut by_rank = ByRank::sort(&postings, &rank);
        let mut wants: Vec<Vec<(u32, u32, u64)>> = vec![Vec::new(); n as usize];
        for p in &postings {
            wants[rank[p.value as usize] as usize].push((p.attr, p.slot, p.count()));
        }
        let mut seen = 0usize;
        let mut run = Vec::new();
        for (r, mut want) in wants.into_iter().enumerate() {
            run.clear();
            by_rank.take(r, &mut run);
            let mut got = run.clone();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "rank {r}");
            seen += run.len();
            let read_past = seen / RANKED_CHUNK;
            assert!(by_rank.chunks[..read_past].iter().all(|c| c.is_empty()));
        }
        assert_eq!(seen, total);
    }
}
