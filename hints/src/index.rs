//! Immutable value-index segments: interned values, postings and a substring index.
//!
//! A [`Segment`] holds the weightlist entries of one or more peer imports (each import is a
//! *slot*). Its values are distinct under ASCII case folding, stored once each, sorted in
//! folded order; each keeps one representative spelling (the byte-wise smallest of the
//! spellings that fold to it), so that "Garcia" and "GARCIA" share an entry. For each
//! value, the postings `(slot, attribute, count)` say which import reported it under which
//! attribute and in how many objects.
//!
//! Each value is one *record* in a single buffer: a 12-byte header, the value
//! ASCII-lowercased (lookups compare that), a bitmap of the bytes uppercase in its
//! representative spelling (only when there are any; answers show the spelling), then its
//! postings grouped by attribute, 8 bytes each (slot, count; counts of `u32::MAX` or more
//! are kept apart). A lookup that found a value thus reads its postings from the same or
//! the next cache line.
//!
//! Lookups:
//! * exact: an open-addressing table keyed by a randomly seeded `foldhash` of the folded
//!   bytes (seeded so that a peer cannot choose colliding values offline). An entry holds
//!   the record's start and the hash's high 32 bits, so an exact lookup costs two dependent
//!   cache misses, table then record, and other values' records are nearly never read;
//! * substring: a 4-gram index over folded values: each 4-gram lists, delta-varint coded
//!   (a bitmap when dense), the ids of the values containing it, and each trigram the ids
//!   of the values ending with it. A search for four bytes or more intersects the lists
//!   of the needle's 4-grams, rarest first, for as long as a list is short next to the
//!   candidates left; a four-byte needle's list is the answer, longer needles' candidates
//!   are checked with `memchr::memmem`. A three-byte needle's values are the union of the
//!   lists of the 4-grams it starts and of the values it ends. (4-grams rather than
//!   trigrams: decoding trigram lists was half the cost of a first substring query; on
//!   the 1,000-peer bench table of 2.3 million values the 4-gram index takes 3 MB more,
//!   and such a query costs 350 us on average instead of 560 us.) Checking and reading the
//!   postings are one pipelined pass over the candidates' records (loaded a batch ahead,
//!   so that cache misses overlap). Needles shorter than three bytes scan all records;
//! * prefix: binary search over the sorted values.
//!
//! A segment is limited to 4 GiB of records (32-bit record starts); a bigger one is
//! refused with [`SegmentOverflow`].
//!
//! Segments never change once built; the routing table replaces them whole.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;

use memchr::memmem;

use crate::hasher::RandomState;
use crate::memo::Memo;
use crate::pages::{Pages, PagesMut};
use crate::sums::{Store, Summaries};
use crate::threads::spawn_or_run;

/// Most ids [`Segment::touch_postings`] takes at once.
pub(crate) const TOUCH_BATCH: usize = 16;

/// Segments with at least this many values build their exact table and substring index on
/// two threads.
const PARALLEL_INDEX: usize = 65_536;

/// Merges of at least this many values run on two threads ([`Segment::merge_from`]): the
/// pile merges of a 1,000-peer cold start are bigger, those of a 200-peer one mostly not
/// (where the second thread's buffers weighed more on the import's peak than the time
/// saved).
const PARALLEL_MERGE: usize = 1_000_000;

/// Values per batch of the pipeline of [`Segment::for_each_substring`].
const SCAN_BATCH: usize = 32;

/// Counts at or above this are kept in [`Segment::big_counts`].
const BIG: u32 = u32::MAX;

/// Bit of a record's length word set when the value's spelling has uppercase bytes (its
/// record then holds their bitmap).
const HAS_UPPER: u32 = 1 << 31;

/// Bytes of a record header: length word, attribute group count, value id.
const HEADER: usize = 12;

/// Bytes of one posting: slot, count.
const POSTING: usize = 8;

/// Bytes of an attribute group header: attribute id, posting count.
const GROUP: usize = 8;

/// A segment would exceed the 32-bit offsets it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentOverflow;

/// An immutable set of values with their postings and lookup structures.
///
/// Each value is one *record* in `recs`, little-endian:
/// `len | HAS_UPPER` (u32), attribute groups (u32), value id (u32); the value's bytes
/// ASCII-lowercased; when `HAS_UPPER` is set, a bitmap (bit `k % 8` of byte `k / 8`) of
/// the bytes uppercase in the representative spelling; then per attribute (ascending):
/// attribute id (u32), postings (u32), and that many `(slot, count)` pairs (u32 each,
/// by slot). Records follow one another in folded value order.
#[derive(Debug, Default)]
pub(crate) struct Segment {
    recs: Pages,
    /// Per value id: where its record starts in `recs`.
    starts: Vec<u32>,
    /// Per value id: [`attr_bit`] of each attribute it is reported under, OR-ed; lets a
    /// search under some attributes skip values without loading their records.
    attr_bits: Vec<u8>,
    /// Exact-match table, linear probing from [`home`]: `hash >> 32 << 32 | record start +
    /// 1`, 0 when empty; `u64`s, little-endian. A bulk load's segments go without it until
    /// the load ends ([`Segment::ensure_exact`]); exact lookups binary-search the sorted
    /// values meanwhile.
    table: OnceLock<Pages>,
    /// `(position in recs of a posting's count, count)` for counts of [`BIG`] or more.
    big_counts: Vec<(u32, u64)>,
    slots: Vec<(u32, u64)>,
    entries: usize,
    value_bytes: usize,
    /// Built with the segment, except in a bulk load ([`Segment::ensure_grams`]); without
    /// it substring searches scan every value.
    grams: OnceLock<GramIndex>,
    /// Built after the segment is in use ([`Segment::summarize`]), and built again once
    /// enough of its peers have gone that narrow summaries thin out; readers hold the
    /// ones they loaded.
    pub(crate) summaries: ArcSwapOption<Summaries>,
    /// Set while [`Segment::summarize`] builds them.
    pub(crate) summarizing: AtomicBool,
    /// Sums of expensive substring needles, kept as queries compute them.
    pub(crate) memo: Memo,
}

/// A value's record, decoded from its header.
#[derive(Debug, Clone, Copy)]
struct Rec {
    /// Where the value's bytes start in `recs`.
    bytes: usize,
    len: usize,
    upper: bool,
    /// Where its attribute groups start.
    groups: usize,
    ngroups: u32,
}

/// One attribute's postings within a record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Group {
    /// Table-wide attribute id.
    pub attr: u32,
    /// Where its first posting starts in `recs`.
    start: usize,
    /// Postings in it.
    len: usize,
}

#[inline]
fn rd32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// Compares byte strings as if ASCII-lowercased.
pub(crate) fn cmp_folded(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i < n {
        // Skip the bytes that are equal as they stand, eight at a time; only a raw
        // difference needs folding.
        while i + 8 <= n && a[i..i + 8] == b[i..i + 8] {
            i += 8;
        }
        while i < n && a[i] == b[i] {
            i += 1;
        }
        if i == n {
            break;
        }
        let (x, y) = (a[i].to_ascii_lowercase(), b[i].to_ascii_lowercase());
        if x != y {
            return x.cmp(&y);
        }
        i += 1;
    }
    a.len().cmp(&b.len())
}

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

/// The bit of [`Segment::attr_bits`] standing for table-wide attribute `attr`: attributes
/// share bits modulo 8, so a set bit means "maybe".
#[inline]
pub(crate) fn attr_bit(attr: u32) -> u8 {
    1 << (attr % 8)
}

/// Every bit of [`attr_bit`]: no filtering.
pub(crate) const ANY_ATTR: u8 = u8::MAX;

/// The bits of `attrs` together.
pub(crate) fn attr_mask(attrs: &[u32]) -> u8 {
    attrs.iter().fold(0, |m, &a| m | attr_bit(a))
}

/// Hash of bytes already ASCII-lowercased.
#[inline]
pub(crate) fn hash_lower(hasher: &RandomState, lower: &[u8]) -> u64 {
    hasher.hash_one(lower)
}

/// Hash of the ASCII-lowercased bytes (equal to [`hash_lower`] of the lowercased copy).
pub(crate) fn hash_folded(hasher: &RandomState, bytes: &[u8]) -> u64 {
    if !bytes.iter().any(u8::is_ascii_uppercase) {
        return hash_lower(hasher, bytes);
    }
    let mut buf = [0u8; 64];
    if let Some(buf) = buf.get_mut(..bytes.len()) {
        buf.copy_from_slice(bytes);
        buf.make_ascii_lowercase();
        return hash_lower(hasher, buf);
    }
    hash_lower(hasher, &bytes.to_ascii_lowercase())
}

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

    /// Adds, with `exact`, the exact-match table and, with `grams`, the substring index.
    fn index(mut self, hasher: &RandomState, exact: bool, grams: bool) -> Self {
        // The two structures read only the records: build them side by side when the
        // segment is big enough to be worth a thread.
        if exact && grams && self.len() >= PARALLEL_INDEX {
            let (table, grams) = std::thread::scope(|s| {
                let grams =
                    spawn_or_run(s, std::thread::Builder::new(), || GramIndex::build(&self));
                let table = self.exact_table(hasher);
                // The thread only builds a value; if it panicked, build it here.
                let grams = match grams.join() {
                    Some(Ok(grams)) => grams,
                    _ => GramIndex::build(&self),
                };
                (table, grams)
            });
            self.table = OnceLock::from(table);
            self.grams = OnceLock::from(grams);
        } else {
            if exact {
                self.table = OnceLock::from(self.exact_table(hasher));
            }
            if grams {
                self.grams = OnceLock::from(GramIndex::build(&self));
            }
        }
        self
    }

    /// Builds the exact-match table if the segment was made without it.
    pub(crate) fn ensure_exact(&self, hasher: &RandomState) {
        self.table.get_or_init(|| self.exact_table(hasher));
    }

    /// The exact-match table's bytes; empty when it is not built.
    #[inline]
    fn table_bytes(&self) -> &[u8] {
        self.table.get().map_or(&[], |t| &t[..])
    }

    /// Whether the exact-match table is built.
    #[cfg(test)]
    pub(crate) fn has_exact(&self) -> bool {
        self.table.get().is_some()
    }

    /// Builds the substring index if the segment was made without it.
    pub(crate) fn ensure_grams(&self) {
        self.gram_index();
    }

    /// The substring index, built first if the segment was made without it.
    fn gram_index(&self) -> &GramIndex {
        self.grams.get_or_init(|| GramIndex::build(self))
    }

    /// Whether the substring index is built.
    #[cfg(test)]
    pub(crate) fn has_grams(&self) -> bool {
        self.grams.get().is_some()
    }

    /// The exact-match table (see [`Segment::table`]).
    fn exact_table(&self, hasher: &RandomState) -> Pages {
        let n = self.len();
        // n < u32::MAX (Builder::push), so this cannot overflow usize. A third empty: a
        // hit probes two entries on average, a miss five, nearly always in one cache line.
        let size = (n + n / 2).max(4);
        // Written in place, in its final buffer.
        let mut table = PagesMut::zeroed(size * 8);
        let bytes = table.bytes_mut();
        for id in 0..n as u32 {
            let h = hash_lower(hasher, self.folded_value(id));
            let mut at = home(h, size);
            while bytes[at * 8..at * 8 + 8] != [0; 8] {
                at = next_slot(at, size);
            }
            // Record starts are below u32::MAX (Builder::push): `+ 1` fits.
            let entry = (h >> 32 << 32) | u64::from(self.starts[id as usize] + 1);
            bytes[at * 8..at * 8 + 8].copy_from_slice(&entry.to_le_bytes());
        }
        table.freeze()
    }

    /// Entries in the exact-match table.
    #[inline]
    fn table_len(&self) -> usize {
        self.table_bytes().len() / 8
    }

    /// Exact-match table entry `at`.
    #[inline]
    fn table_entry(&self, at: usize) -> u64 {
        self.table_bytes()
            .get(at * 8..at * 8 + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    }

    /// The segment's summaries, once built (see [`Segment::summaries`]), to hold on to.
    #[cfg(test)]
    pub(crate) fn summaries(&self) -> Option<Arc<Summaries>> {
        self.summaries.load_full()
    }

    /// The segment's summaries, once built, for a moment (an `Arc` of them to hold on
    /// to is a clone away).
    #[inline]
    pub(crate) fn summaries_now(&self) -> arc_swap::Guard<Option<Arc<Summaries>>> {
        self.summaries.load()
    }

    /// True when `needle` (ASCII-lowercased) is not summarized here under `attr` although
    /// the segment's narrow summaries would hold it if enough postings were under it
    /// ([`crate::narrow`]): then fewer are, and summing it is cheap.
    pub(crate) fn covers_narrowly(&self, needle: &[u8], attr: u32) -> bool {
        let guard = self.summaries.load();
        let Some(s) = guard.as_deref() else {
            return false;
        };
        if s.narrow_cover == 0
            || !(crate::sums::NARROW_MIN..=crate::sums::NARROW_MAX).contains(&needle.len())
        {
            return false;
        }
        let quad = quad_key(&needle[..4]);
        // A 4-gram too few values hold (or none) has no narrow summaries, nor have its
        // extensions.
        s.covers_narrowly(needle, attr, quad)
            || self.grams.get().is_some_and(|g| {
                g.quads
                    .list(quad)
                    .is_none_or(|(_, card)| (card as usize) < s.narrow_cover)
            })
    }

    /// The memoized sums of `needle` (ASCII-lowercased) under `attr`, if a query kept
    /// them.
    #[inline]
    pub(crate) fn memoized(&self, needle: &[u8], attr: u32) -> Option<Arc<Store>> {
        self.memo.get(needle, attr)
    }

    /// Whether a query kept the sums of `needle` (ASCII-lowercased) under `attr`.
    pub(crate) fn has_memoized(&self, needle: &[u8], attr: u32) -> bool {
        self.memo.contains(needle, attr)
    }

    /// Needles memoized and their bytes.
    pub(crate) fn memo_stats(&self) -> (usize, usize) {
        self.memo.stats()
    }

    /// Number of n-grams summarized.
    pub(crate) fn summarized(&self) -> usize {
        self.summaries.load().as_deref().map_or(0, Summaries::len)
    }

    /// Approximate heap bytes of the summaries.
    pub(crate) fn summary_bytes(&self) -> usize {
        self.summaries
            .load()
            .as_deref()
            .map_or(0, Summaries::heap_bytes)
    }

    /// `(trigram key, number of values holding it)` for every trigram held by at least
    /// `min` values (ASCII-folded; a key is the three bytes big-endian).
    pub(crate) fn gram_cards(&self, min: usize) -> Vec<(u32, u32)> {
        self.gram_index().trigram_cards(min.max(1))
    }

    /// The 4-grams held by at least `min` values, as their packed bytes (ASCII-folded,
    /// big-endian: [`Segment::quad_ids`] takes them back), with their value counts.
    pub(crate) fn quad_cards(&self, min: usize) -> Vec<(u32, u32)> {
        let quads = &self.gram_index().quads;
        quads
            .keys
            .iter()
            .zip(&quads.cards)
            .filter(|e| *e.1 as usize >= min)
            .map(|(&k, &c)| (k, c))
            .collect()
    }

    /// Puts in `out` (cleared first) the ids, ascending, of the values holding the 4-gram
    /// `key` (from [`Segment::quad_cards`]).
    pub(crate) fn quad_ids(&self, key: u32, out: &mut Vec<u32>) {
        out.clear();
        if let Some((list, _)) = self.gram_index().quads.list(key) {
            list.decode(out);
        }
    }

    /// Bytes of the records.
    pub(crate) fn record_bytes(&self) -> usize {
        self.recs.len()
    }

    /// The count `slot` reported under `attr` for the value whose record starts at
    /// `start`.
    pub(crate) fn count_at(&self, start: u32, attr: u32, slot: u32) -> Option<u64> {
        let g = self.group_in(start, attr)?;
        let (mut lo, mut hi) = (0, g.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let at = g.start + mid * POSTING;
            match rd32(&self.recs, at).cmp(&slot) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => {
                    let raw = rd32(&self.recs, at + 4);
                    return Some(if raw == BIG {
                        self.big_count(at + 4)
                    } else {
                        u64::from(raw)
                    });
                }
            }
        }
        None
    }

    /// Number of distinct values.
    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }

    /// Number of postings.
    pub(crate) fn entries(&self) -> usize {
        self.entries
    }

    /// Bytes of value text.
    pub(crate) fn value_bytes(&self) -> usize {
        self.value_bytes
    }

    /// The record starting at `at`.
    #[inline]
    fn rec_at(&self, at: usize) -> Rec {
        let word = rd32(&self.recs, at);
        let len = (word & !HAS_UPPER) as usize;
        let upper = word & HAS_UPPER != 0;
        let bytes = at + HEADER;
        let groups = bytes + len + if upper { len.div_ceil(8) } else { 0 };
        Rec {
            bytes,
            len,
            upper,
            groups,
            ngroups: rd32(&self.recs, at + 4),
        }
    }

    /// Where value `id`'s record starts.
    #[inline]
    pub(crate) fn start_of(&self, id: u32) -> u32 {
        self.starts[id as usize]
    }

    /// Value `id`'s record.
    #[inline]
    fn rec(&self, id: u32) -> Rec {
        self.rec_at(self.starts[id as usize] as usize)
    }

    /// The uppercase bitmap of `r` (empty when it has none).
    fn upper_bits(&self, r: &Rec) -> &[u8] {
        if r.upper {
            &self.recs[r.bytes + r.len..r.groups]
        } else {
            &[]
        }
    }

    /// The representative spelling of value `id` (borrowed when it has no uppercase).
    pub(crate) fn value(&self, id: u32) -> std::borrow::Cow<'_, [u8]> {
        let r = self.rec(id);
        if !r.upper {
            return std::borrow::Cow::Borrowed(&self.recs[r.bytes..r.bytes + r.len]);
        }
        let mut out = Vec::with_capacity(r.len);
        self.write_value(id, &mut out);
        std::borrow::Cow::Owned(out)
    }

    /// Appends the representative spelling of value `id` to `out`.
    pub(crate) fn write_value(&self, id: u32, out: &mut Vec<u8>) {
        self.write_value_at(self.starts[id as usize], out);
    }

    /// [`Segment::write_value`] of the value whose record starts at `start`
    /// ([`Segment::find_exact_record`], [`Segment::for_each_substring`]).
    pub(crate) fn write_value_at(&self, start: u32, out: &mut Vec<u8>) {
        let r = self.rec_at(start as usize);
        let at = out.len();
        out.extend_from_slice(&self.recs[r.bytes..r.bytes + r.len]);
        for (i, &bits) in self.upper_bits(&r).iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                let k = at + i * 8 + bits.trailing_zeros() as usize;
                if let Some(b) = out.get_mut(k) {
                    b.make_ascii_uppercase();
                }
                bits &= bits - 1;
            }
        }
    }

    /// Compares the spelling of value `a` here with value `b` of `other`, byte-wise.
    pub(crate) fn cmp_spelling(&self, a: u32, other: &Segment, b: u32) -> Ordering {
        let (ra, rb) = (self.rec(a), other.rec(b));
        let (x, y) = (
            &self.recs[ra.bytes..ra.bytes + ra.len],
            &other.recs[rb.bytes..rb.bytes + rb.len],
        );
        let (ux, uy) = (self.upper_bits(&ra), other.upper_bits(&rb));
        let spelled = |bytes: &[u8], bits: &[u8], k: usize| {
            let up = bits.get(k / 8).is_some_and(|w| w & (1 << (k % 8)) != 0);
            if up {
                bytes[k].to_ascii_uppercase()
            } else {
                bytes[k]
            }
        };
        for k in 0..x.len().min(y.len()) {
            let (p, q) = (spelled(x, ux, k), spelled(y, uy, k));
            if p != q {
                return p.cmp(&q);
            }
        }
        x.len().cmp(&y.len())
    }

    /// The value whose record starts at `start`, ASCII-lowercased.
    pub(crate) fn folded_value_at(&self, start: u32) -> &[u8] {
        let r = self.rec_at(start as usize);
        &self.recs[r.bytes..r.bytes + r.len]
    }

    /// Value `id` ASCII-lowercased.
    pub(crate) fn folded_value(&self, id: u32) -> &[u8] {
        let r = self.rec(id);
        &self.recs[r.bytes..r.bytes + r.len]
    }

    /// The attribute groups of record `r`.
    fn groups_of(&self, r: Rec) -> impl Iterator<Item = Group> + '_ {
        let mut at = r.groups;
        (0..r.ngroups).map(move |_| {
            let g = Group {
                attr: rd32(&self.recs, at),
                start: at + GROUP,
                len: rd32(&self.recs, at + 4) as usize,
            };
            at = g.start + g.len * POSTING;
            g
        })
    }

    /// The postings of value `id` by attribute.
    pub(crate) fn groups(&self, id: u32) -> impl Iterator<Item = Group> + '_ {
        self.groups_of(self.rec(id))
    }

    /// The postings under `attr`, if any, of the value whose record starts at `start`
    /// ([`Segment::find_exact_record`], [`Segment::for_each_substring`]).
    #[inline]
    pub(crate) fn group_in(&self, start: u32, attr: u32) -> Option<Group> {
        self.groups_in(start).find(|g| g.attr == attr)
    }

    /// The attribute groups of the value whose record starts at `start`.
    #[inline]
    pub(crate) fn groups_in(&self, start: u32) -> impl Iterator<Item = Group> + '_ {
        self.groups_of(self.rec_at(start as usize))
    }

    /// The `(slot, count)` postings of group `g`, by slot.
    #[inline]
    pub(crate) fn group_postings(&self, g: Group) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.recs[g.start..g.start + g.len * POSTING]
            .chunks_exact(POSTING)
            .enumerate()
            .map(move |(k, p)| {
                let slot = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
                let raw = u32::from_le_bytes([p[4], p[5], p[6], p[7]]);
                let count = if raw == BIG {
                    self.big_count(g.start + k * POSTING + 4)
                } else {
                    u64::from(raw)
                };
                (slot, count)
            })
    }

    /// The postings of value `id` as `(slot, attribute, count)`, by attribute, then slot.
    pub(crate) fn postings(&self, id: u32) -> impl Iterator<Item = (u32, u32, u64)> + '_ {
        self.groups(id).flat_map(move |g| {
            self.group_postings(g)
                .map(move |(slot, count)| (slot, g.attr, count))
        })
    }

    /// Loads, in tight loops, the memory that reading the postings of `ids` (at most
    /// [`TOUCH_BATCH`]) starts with, and returns a digest of it (pass it to
    /// [`std::hint::black_box`]): the cache misses of many values then overlap instead of
    /// following one another.
    pub(crate) fn touch_postings(&self, ids: &[u32]) -> u64 {
        let mut starts = [0u32; TOUCH_BATCH];
        let n = ids.len().min(TOUCH_BATCH);
        for (s, &id) in starts.iter_mut().zip(&ids[..n]) {
            *s = self.starts.get(id as usize).copied().unwrap_or(0);
        }
        self.touch_lines(&starts[..n], 2)
    }

    /// Loads up to `lines` cache lines of the records starting at `starts`.
    fn touch_lines(&self, starts: &[u32], lines: usize) -> u64 {
        let mut digest = 0u64;
        for &s in starts {
            let s = s as usize;
            for k in 0..lines {
                if let Some(&b) = self.recs.get(s + 64 * k) {
                    digest ^= u64::from(b);
                }
            }
        }
        digest
    }

    /// Loads the record starts of `ids` and returns a digest of them (see
    /// [`Segment::touch_postings`]). The first stage of a pipeline: touch the starts of
    /// batch `b + 2`, then the records of batch `b + 1`, then read batch `b`, so that a
    /// batch's cache misses are in flight while the one before is worked on.
    pub(crate) fn touch_starts(&self, ids: &[u32]) -> u64 {
        let mut digest = 0u64;
        for &id in ids {
            if let Some(&s) = self.starts.get(id as usize) {
                digest ^= u64::from(s);
            }
        }
        digest
    }

    /// Loads every cache line of the records of `ids` (up to 16 each; their starts
    /// should be loaded already) and returns a digest.
    pub(crate) fn touch_records(&self, ids: &[u32]) -> u64 {
        let mut digest = 0u64;
        for &id in ids {
            let Some(&s) = self.starts.get(id as usize) else {
                continue;
            };
            let end = self
                .starts
                .get(id as usize + 1)
                .map_or(self.recs.len(), |&e| e as usize);
            let s = s as usize;
            let end = end.min(s + 16 * 64);
            let mut i = s;
            while i < end {
                digest ^= u64::from(self.recs[i]);
                i += 64;
            }
            if let Some(&b) = end.checked_sub(1).and_then(|i| self.recs.get(i)) {
                digest ^= u64::from(b);
            }
        }
        digest
    }

    /// The count stored apart for the posting whose count word is at `pos`.
    #[cold]
    fn big_count(&self, pos: usize) -> u64 {
        match self.big_counts.binary_search_by_key(&(pos as u32), |e| e.0) {
            Ok(k) => self.big_counts[k].1,
            // Invariant: every BIG marker has a big_counts entry (Builder::push).
            Err(_) => u64::from(BIG),
        }
    }

    /// The slots holding postings here, with their posting counts.
    pub(crate) fn slots(&self) -> &[(u32, u64)] {
        &self.slots
    }

    /// Postings belonging to `slot`.
    pub(crate) fn slot_entries(&self, slot: u32) -> u64 {
        self.slots
            .binary_search_by_key(&slot, |e| e.0)
            .map_or(0, |k| self.slots[k].1)
    }

    /// The id of the value whose lowercase form is `lower` (already ASCII-lowercased);
    /// `hash` is [`hash_lower`] of it with the hasher the segment was built with.
    ///
    /// Two dependent cache misses: the table entry (which carries the record's start and
    /// the hash's high bits, so that other values are rarely looked at), then the record,
    /// whose bytes and postings follow one another.
    pub(crate) fn find_exact(&self, hash: u64, lower: &[u8]) -> Option<u32> {
        self.find_exact_record(hash, lower).map(|(id, _)| id)
    }

    /// [`Segment::find_exact`], with the start of the value's record (for
    /// [`Segment::group_in`], which then reads the record already loaded).
    #[inline]
    pub(crate) fn find_exact_record(&self, hash: u64, lower: &[u8]) -> Option<(u32, u32)> {
        let size = self.table_len();
        if size == 0 {
            // No table yet (a bulk load's segment): the values are sorted by their folded
            // bytes.
            let (mut lo, mut hi) = (0u32, self.len() as u32);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match self.folded_value(mid).cmp(lower) {
                    Ordering::Less => lo = mid + 1,
                    Ordering::Greater => hi = mid,
                    Ordering::Equal => return Some((mid, self.start_of(mid))),
                }
            }
            return None;
        }
        let tag = hash >> 32;
        let mut at = home(hash, size);
        loop {
            let entry = self.table_entry(at);
            if entry == 0 {
                return None;
            }
            if entry >> 32 == tag {
                let start = (entry as u32 - 1) as usize;
                let r = self.rec_at(start);
                // Start loading the postings while the bytes are compared: nearly always
                // they are read next.
                std::hint::black_box(self.recs.get(r.groups + 64));
                if self.recs.get(r.bytes..r.bytes + r.len) == Some(lower) {
                    return Some((rd32(&self.recs, start + 8), start as u32));
                }
            }
            at = next_slot(at, size);
        }
    }

    /// Loads the exact-table entry `hash` starts probing at and returns it (pass it to
    /// [`std::hint::black_box`]): lookups in several segments then miss the cache together
    /// instead of one after another.
    #[inline]
    pub(crate) fn touch_exact(&self, hash: u64) -> u64 {
        match self.table_len() {
            0 => 0,
            n => self.table_entry(home(hash, n)),
        }
    }

    /// Appends to `out` the ids of values containing the needle `finder` looks for (built
    /// on the ASCII-lowercased needle), in ascending order; with a `mask` other than
    /// [`ANY_ATTR`] ([`attr_mask`]), only of values reported under one of its attributes
    /// (and maybe others).
    pub(crate) fn find_substring(&self, finder: &memmem::Finder<'_>, mask: u8, out: &mut Vec<u32>) {
        let mut candidates = Vec::new();
        if let Some(exact) = self.substring_candidates(finder, &mut candidates) {
            self.retain_under(&mut candidates, mask);
            self.for_each_candidate(finder, &candidates, exact, |id, _| out.push(id));
        }
    }

    /// Keeps of `ids` those that may be reported under an attribute of `mask`
    /// ([`attr_mask`]): a byte per value, read in id order, instead of a record each.
    pub(crate) fn retain_under(&self, ids: &mut Vec<u32>, mask: u8) {
        if mask != ANY_ATTR {
            ids.retain(|&id| {
                self.attr_bits
                    .get(id as usize)
                    .is_none_or(|&b| b & mask != 0)
            });
        }
    }

    /// Calls `found(id, record start)` for each value containing the needle `finder`
    /// looks for (built on the ASCII-lowercased needle), in ascending id order;
    /// `candidates` is scratch space.
    pub(crate) fn for_each_substring(
        &self,
        finder: &memmem::Finder<'_>,
        candidates: &mut Vec<u32>,
        found: impl FnMut(u32, u32),
    ) {
        if let Some(exact) = self.substring_candidates(finder, candidates) {
            self.for_each_candidate(finder, candidates, exact, found);
        }
    }

    /// Puts in `candidates` the ids (ascending) of the values that may contain `finder`'s
    /// needle (ASCII-lowercased); `Some(true)` when they are exactly the values that do,
    /// `None` when none can.
    pub(crate) fn substring_candidates(
        &self,
        finder: &memmem::Finder<'_>,
        candidates: &mut Vec<u32>,
    ) -> Option<bool> {
        candidates.clear();
        let n = self.len();
        let needle = finder.needle();
        if n == 0 {
            return None;
        }
        let Some(grams) = self.grams.get().filter(|_| needle.len() >= 3) else {
            self.scan_ids(finder, 0, n as u32, candidates);
            return Some(true);
        };
        if needle.len() == 3 {
            // Exactly the values holding it.
            grams.trigram_ids(gram_key(needle), candidates);
            return (!candidates.is_empty()).then_some(true);
        }
        // A 4-gram's list holds exactly the values containing it.
        let exact = needle.len() == 4;
        self.gram_candidates(grams, needle, candidates)
            .then_some(exact)
    }

    /// Calls `found(id, record start)` for each of `ids` (from
    /// [`Segment::substring_candidates`]) containing `finder`'s needle, in order; with
    /// `exact`, for each of them. Candidates are checked and handed on in one pipelined
    /// pass: record starts two batches ahead and whole records (bytes and postings) one
    /// batch ahead are loaded, so that `found` reads postings already in cache.
    pub(crate) fn for_each_candidate(
        &self,
        finder: &memmem::Finder<'_>,
        ids: &[u32],
        exact: bool,
        mut found: impl FnMut(u32, u32),
    ) {
        let batch = |b: usize| {
            let start = (b * SCAN_BATCH).min(ids.len());
            &ids[start..(start + SCAN_BATCH).min(ids.len())]
        };
        let mut digest = self.touch_starts(batch(0)) ^ self.touch_starts(batch(1));
        digest ^= self.touch_records(batch(0));
        for b in 0..ids.len().div_ceil(SCAN_BATCH) {
            digest ^= self.touch_starts(batch(b + 2));
            digest ^= self.touch_records(batch(b + 1));
            for &id in batch(b) {
                let start = self.starts[id as usize];
                if exact || {
                    let r = self.rec_at(start as usize);
                    finder.find(&self.recs[r.bytes..r.bytes + r.len]).is_some()
                } {
                    found(id, start);
                }
            }
        }
        std::hint::black_box(digest);
    }

    /// Puts in `out` (empty) the ids of the values holding every 4-gram of `needle` (at
    /// least four bytes) that narrows the search; false when some 4-gram occurs nowhere.
    fn gram_candidates(&self, grams_index: &GramIndex, needle: &[u8], out: &mut Vec<u32>) -> bool {
        let mut lists: [(GramList<'_>, u32); 16] = [(GramList::Ids(&[]), 0); 16];
        let mut count = 0;
        let mut grams = [0u32; 16];
        // The first and last few 4-grams narrow as well as all of them would, nearly
        // always; the check below is exact anyway.
        let windows = needle.windows(4);
        let total = windows.len();
        for (k, w) in windows.enumerate() {
            if k >= 8 && k + 8 < total {
                continue;
            }
            let g = quad_key(w);
            if grams[..count].contains(&g) {
                continue;
            }
            match grams_index.quads.list(g) {
                Some(l) => {
                    grams[count] = g;
                    lists[count] = l;
                    count += 1;
                }
                None => return false,
            }
        }
        let lists = &mut lists[..count];
        lists.sort_unstable_by_key(|l| l.1);
        let bits = |i: usize| match lists.get(i) {
            Some((GramList::Bits(b), _)) => Some(*b),
            _ => None,
        };
        match lists.first() {
            None => return true,
            Some((GramList::Bits(first), _)) => {
                // Every list is a bitmap: AND them a word at a time.
                let rest: Vec<&[u64]> = (1..lists.len()).filter_map(bits).collect();
                for (w, &word) in first.iter().enumerate() {
                    let mut word = word;
                    for r in &rest {
                        word &= r.get(w).copied().unwrap_or(0);
                    }
                    while word != 0 {
                        out.push((w * 64) as u32 + word.trailing_zeros());
                        word &= word - 1;
                    }
                }
                return true;
            }
            Some((GramList::Ids(first), _)) => decode_ids(first, out),
        }
        for (list, _) in lists.iter().skip(1) {
            let len = out.len();
            match list {
                // A bit test per candidate.
                GramList::Bits(b) => out.retain(|&id| {
                    b.get(id as usize / 64)
                        .is_some_and(|w| w & (1 << (id % 64)) != 0)
                }),
                // Decoding a list costs about a byte's work per entry; checking a
                // candidate costs a cache miss or two. Stop once the candidates left are
                // cheaper to check.
                GramList::Ids(l) => {
                    if len == 0 || l.len() > 8 * len {
                        continue;
                    }
                    intersect(out, 0, l);
                }
            }
        }
        true
    }

    /// Appends the ids in `start..end` whose folded value contains `finder`'s needle.
    fn scan_ids(&self, finder: &memmem::Finder<'_>, start: u32, end: u32, out: &mut Vec<u32>) {
        let nlen = finder.needle().len();
        if nlen == 0 {
            out.extend(start..end);
            return;
        }
        if start >= end {
            return;
        }
        let rec_start = |id: u32| {
            self.starts
                .get(id as usize)
                .map_or(self.recs.len(), |&s| s as usize)
        };
        // Search the records as one haystack; a match outside a value's bytes (in a
        // header or postings) is skipped.
        let hay_start = rec_start(start);
        let hay_end = rec_start(end);
        let hay = &self.recs[hay_start..hay_end];
        let mut pos = 0;
        let mut id = start;
        while pos <= hay.len() && id < end {
            let Some(found) = finder.find(&hay[pos..]) else {
                break;
            };
            let at = hay_start + pos + found;
            // The record holding byte `at`.
            while id + 1 < end && rec_start(id + 1) <= at {
                id += 1;
            }
            let r = self.rec(id);
            if at < r.bytes {
                // In the header: the value's own bytes come next.
                pos = r.bytes - hay_start;
                continue;
            }
            if at + nlen <= r.bytes + r.len {
                out.push(id);
            }
            // Either way no later match in this value needs looking at: it matched
            // already, or any match from here on would cross its end or lie past it.
            id += 1;
            pos = rec_start(id) - hay_start;
        }
    }

    /// The ids of values starting with `prefix`, ignoring ASCII case.
    pub(crate) fn prefix_range(&self, prefix: &[u8]) -> std::ops::Range<u32> {
        let n = self.len() as u32;
        let lower = partition(n, |id| cmp_folded(self.folded_value(id), prefix).is_lt());
        let upper = partition(n, |id| {
            let v = self.folded_value(id);
            cmp_folded(v, prefix).is_lt()
                || (v.len() >= prefix.len() && v[..prefix.len()].eq_ignore_ascii_case(prefix))
        });
        lower..upper
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.recs.heap_bytes()
            + 4 * self.starts.capacity()
            + self.attr_bits.capacity()
            + self.table.get().map_or(0, Pages::heap_bytes)
            + 16 * (self.big_counts.capacity() + self.slots.capacity())
            + self.grams.get().map_or(0, GramIndex::heap_bytes)
            + self.summary_bytes()
    }
}

/// Where the exact-match table of `size` entries starts probing for `hash`: its low 32
/// bits scaled to the size (the high 32 are the entry's tag, so the two are independent).
#[inline]
fn home(hash: u64, size: usize) -> usize {
    ((u64::from(hash as u32) * size as u64) >> 32) as usize
}

/// The entry after `at` in a table of `size` entries, wrapping around.
#[inline]
fn next_slot(at: usize, size: usize) -> usize {
    if at + 1 == size { 0 } else { at + 1 }
}

/// First id in `0..n` for which `below` is false (`below` true on a prefix of the ids).
fn partition(n: u32, below: impl Fn(u32) -> bool) -> u32 {
    let (mut lo, mut hi) = (0u32, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) { lo = mid + 1 } else { hi = mid }
    }
    lo
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

/// Where a [`Builder`] appends its records.
trait RecSink {
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
struct Chunks {
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

struct Builder<S = PagesMut> {
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
    fn with_capacity(values: usize, bound: usize) -> Self {
        Builder::with_sink(values, PagesMut::with_capacity(bound))
    }

    /// Appends the records of `tail`, whose values all come after this builder's in
    /// folded order ([`Segment::merge_from`]): copied a chunk at a time, each freed once
    /// copied, with the tail's record starts, count positions and value ids moved past
    /// this builder's.
    fn append(&mut self, tail: Builder<Chunks>) -> Result<(), SegmentOverflow> {
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
    fn with_sink(values: usize, recs: S) -> Self {
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
    fn push(
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
    fn finish(self) -> Segment {
        let mut seg = Segment {
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
            memo: Memo::default(),
        };
        seg.starts.shrink_to_fit();
        seg.attr_bits.shrink_to_fit();
        seg
    }
}

fn gram_key(w: &[u8]) -> u32 {
    (u32::from(w[0].to_ascii_lowercase()) << 16)
        | (u32::from(w[1].to_ascii_lowercase()) << 8)
        | u32::from(w[2].to_ascii_lowercase())
}

/// The key of a 4-gram: its bytes ASCII-lowercased, big-endian, so that the 4-grams
/// starting with one trigram are the keys from `gram_key << 8` to `gram_key << 8 | 0xff`.
fn quad_key(w: &[u8]) -> u32 {
    u32::from_be_bytes([
        w[0].to_ascii_lowercase(),
        w[1].to_ascii_lowercase(),
        w[2].to_ascii_lowercase(),
        w[3].to_ascii_lowercase(),
    ])
}

/// The substring index: per 4-gram the values containing it, and per trigram the values
/// ending with it. A needle of four bytes or more intersects its 4-grams' lists; a trigram
/// is in a value either followed by some byte (a 4-gram) or at its end, so its values are
/// the union of those lists.
#[derive(Debug, Default)]
struct GramIndex {
    quads: GramLists,
    ends: GramLists,
}

impl GramIndex {
    fn build(seg: &Segment) -> Self {
        Self {
            quads: GramLists::build(seg, |v, keys| keys.extend(v.windows(4).map(quad_key))),
            ends: GramLists::build(seg, |v, keys| {
                if let Some(end) = v.len().checked_sub(3) {
                    keys.push(gram_key(&v[end..]));
                }
            }),
        }
    }

    /// Puts in `out` the ids (ascending) of the values holding trigram `key`.
    fn trigram_ids(&self, key: u32, out: &mut Vec<u32>) {
        out.clear();
        let lists = self.trigram_lists(key);
        let mut it = lists.clone();
        match (it.next(), it.next()) {
            (None, _) => {}
            (Some((only, _)), None) => only.decode(out),
            // A union: values with the trigram in two places are in two lists.
            _ => union(lists, self.quads.words.max(self.ends.words), out),
        }
    }

    /// The lists whose union holds the values with trigram `key`, with their lengths.
    fn trigram_lists(&self, key: u32) -> impl Iterator<Item = (GramList<'_>, u32)> + Clone {
        self.quads
            .range(key << 8, key << 8 | 0xff)
            .chain(self.ends.list(key))
    }

    /// `(trigram key, number of values holding it)` for every trigram held by at least
    /// `min` values.
    fn trigram_cards(&self, min: usize) -> Vec<(u32, u32)> {
        // Sums of the lists' lengths, an upper bound, per trigram.
        let mut bounds: Vec<(u32, u64)> = Vec::new();
        let mut add = |key: u32, card: u32| match bounds.last_mut() {
            Some(b) if b.0 == key => b.1 += u64::from(card),
            _ => bounds.push((key, u64::from(card))),
        };
        for (k, &key) in self.quads.keys.iter().enumerate() {
            add(key >> 8, self.quads.cards[k]);
        }
        for (k, &key) in self.ends.keys.iter().enumerate() {
            add(key, self.ends.cards[k]);
        }
        bounds.sort_unstable();
        bounds.dedup_by(|b, a| {
            if a.0 == b.0 {
                a.1 += b.1;
                true
            } else {
                false
            }
        });
        let mut ids = Vec::new();
        bounds
            .into_iter()
            .filter(|b| b.1 >= min as u64)
            .filter_map(|(key, _)| {
                self.trigram_ids(key, &mut ids);
                let card = u32::try_from(ids.len()).unwrap_or(u32::MAX);
                (card as usize >= min).then_some((key, card))
            })
            .collect()
    }

    fn heap_bytes(&self) -> usize {
        self.quads.heap_bytes() + self.ends.heap_bytes()
    }
}

/// Puts in `out` (empty) the union of `lists` (with their lengths) over values whose ids fit
/// `words` 64-bit words, ascending: sorted when the lists hold a sixteenth as many ids as
/// there are words or fewer (sorting costs about 16 steps an id), else marked in a bitmap,
/// a pass over the words but no sort.
fn union<'a>(
    lists: impl Iterator<Item = (GramList<'a>, u32)> + Clone,
    words: usize,
    out: &mut Vec<u32>,
) {
    let total: u64 = lists.clone().map(|l| u64::from(l.1)).sum();
    union_by(lists, words, total.saturating_mul(16) <= words as u64, out);
}

/// [`union`], sorting or through a bitmap as `sort` says.
fn union_by<'a>(
    lists: impl Iterator<Item = (GramList<'a>, u32)>,
    words: usize,
    sort: bool,
    out: &mut Vec<u32>,
) {
    if sort {
        for (l, _) in lists {
            l.decode(out);
        }
        out.sort_unstable();
        out.dedup();
        return;
    }
    let mut bits = vec![0u64; words];
    for (l, _) in lists {
        match l {
            GramList::Ids(list) => {
                for id in Ids::new(list) {
                    if let Some(w) = bits.get_mut(id as usize / 64) {
                        *w |= 1 << (id % 64);
                    }
                }
            }
            GramList::Bits(b) => {
                for (w, &x) in bits.iter_mut().zip(b) {
                    *w |= x;
                }
            }
        }
    }
    GramList::Bits(&bits).decode(out);
}

/// Gram -> the ids of the values containing it: a delta-varint list, or, for a gram in at
/// least one value of [`DENSE`], a bitmap (no bigger than the list would be, and
/// intersected a word at a time).
#[derive(Debug, Default)]
struct GramLists {
    keys: Vec<u32>,
    /// Per key: end of its list in `lists` (bitmaps have an empty one).
    ends: Vec<usize>,
    lists: Vec<u8>,
    /// Per key: how many values hold it.
    cards: Vec<u32>,
    /// Per key: the index of its bitmap in `bitmaps`, or `u32::MAX`.
    bitmap_of: Vec<u32>,
    /// The bitmaps, `words` words each; bit `id % 64` of word `id / 64` is value `id`.
    bitmaps: Vec<u64>,
    words: usize,
}

/// A gram whose values are at least one in this many of the segment's gets a bitmap.
const DENSE: usize = 8;

/// One gram's ids.
#[derive(Debug, Clone, Copy)]
enum GramList<'a> {
    /// Delta-varint coded.
    Ids(&'a [u8]),
    /// A bitmap over the value ids.
    Bits(&'a [u64]),
}

impl GramList<'_> {
    /// Appends the ids, ascending.
    fn decode(self, out: &mut Vec<u32>) {
        match self {
            GramList::Ids(list) => decode_ids(list, out),
            GramList::Bits(words) => {
                for (w, &word) in words.iter().enumerate() {
                    let mut word = word;
                    while word != 0 {
                        out.push((w * 64) as u32 + word.trailing_zeros());
                        word &= word - 1;
                    }
                }
            }
        }
    }
}

impl GramLists {
    /// Lists every key `keys_of` puts out for some value (it appends the keys of the
    /// folded value it is given).
    fn build(seg: &Segment, keys_of: impl Fn(&[u8], &mut Vec<u32>)) -> Self {
        // Dense index per distinct gram, then per gram its list so far, last id and
        // number of ids.
        let mut dense: HashMap<u32, u32, BuildGramHasher> = HashMap::default();
        let mut building: Vec<(u32, u32, u32, Vec<u8>)> = Vec::new();
        let mut grams: Vec<u32> = Vec::new();
        let n = seg.len();
        for id in 0..n as u32 {
            grams.clear();
            keys_of(seg.folded_value(id), &mut grams);
            grams.sort_unstable();
            grams.dedup();
            for &g in &grams {
                let next = building.len() as u32;
                let k = *dense.entry(g).or_insert(next);
                if k == next {
                    building.push((g, id, 1, Vec::new()));
                    put_varint(&mut building[k as usize].3, id);
                } else {
                    let e = &mut building[k as usize];
                    put_varint(&mut e.3, id - e.1);
                    e.1 = id;
                    e.2 += 1;
                }
            }
        }
        building.sort_unstable_by_key(|e| e.0);
        let words = n.div_ceil(64);
        let is_dense = |card: u32| n >= 64 && card as usize * DENSE >= n;
        let total = building
            .iter()
            .filter(|e| !is_dense(e.2))
            .map(|e| e.3.len())
            .sum();
        let mut index = Self {
            keys: Vec::with_capacity(building.len()),
            ends: Vec::with_capacity(building.len()),
            lists: Vec::with_capacity(total),
            cards: Vec::with_capacity(building.len()),
            bitmap_of: Vec::with_capacity(building.len()),
            bitmaps: Vec::new(),
            words,
        };
        for (g, _, card, list) in building {
            index.keys.push(g);
            index.cards.push(card);
            if is_dense(card) {
                let at = index.bitmaps.len();
                index.bitmap_of.push((at / words) as u32);
                index.bitmaps.resize(at + words, 0);
                for id in Ids::new(&list) {
                    index.bitmaps[at + id as usize / 64] |= 1 << (id % 64);
                }
            } else {
                index.bitmap_of.push(u32::MAX);
                index.lists.extend_from_slice(&list);
            }
            index.ends.push(index.lists.len());
        }
        index
    }

    /// The ids holding `gram`, with how many there are.
    fn list(&self, gram: u32) -> Option<(GramList<'_>, u32)> {
        let k = self.keys.binary_search(&gram).ok()?;
        Some(self.at(k))
    }

    /// The lists of the keys from `lo` to `hi` (both included).
    fn range(&self, lo: u32, hi: u32) -> impl Iterator<Item = (GramList<'_>, u32)> + Clone {
        let start = self.keys.partition_point(|&k| k < lo);
        let end = self.keys.partition_point(|&k| k <= hi);
        (start..end.max(start)).map(|k| self.at(k))
    }

    /// The list of the `k`-th key, with how many ids it holds.
    fn at(&self, k: usize) -> (GramList<'_>, u32) {
        let card = self.cards[k];
        let b = self.bitmap_of[k];
        if b != u32::MAX {
            let at = b as usize * self.words;
            return (GramList::Bits(&self.bitmaps[at..at + self.words]), card);
        }
        let start = if k == 0 { 0 } else { self.ends[k - 1] };
        (GramList::Ids(&self.lists[start..self.ends[k]]), card)
    }

    fn heap_bytes(&self) -> usize {
        4 * self.keys.capacity()
            + 8 * self.ends.capacity()
            + self.lists.capacity()
            + 8 * (self.cards.capacity() + self.bitmap_of.capacity()) / 2
            + 8 * self.bitmaps.capacity()
    }
}

/// Multiplicative hashing for gram keys (used only while building, so a peer cannot make
/// lookups slow through them).
#[derive(Default, Clone, Copy)]
struct BuildGramHasher;

impl BuildHasher for BuildGramHasher {
    type Hasher = GramHasher;
    fn build_hasher(&self) -> GramHasher {
        GramHasher(0)
    }
}

struct GramHasher(u64);

impl Hasher for GramHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (u64::from(n) ^ self.0).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Keeps in `out[first..]` (ascending) only the ids the delta-varint `list` holds.
fn intersect(out: &mut Vec<u32>, first: usize, list: &[u8]) {
    let mut pos = 0;
    let mut keep = first;
    if let Some(mut current) = read_varint(list, &mut pos) {
        'ids: for k in first..out.len() {
            let id = out[k];
            while current < id {
                match read_varint(list, &mut pos) {
                    Some(delta) => current = current.saturating_add(delta),
                    None => break 'ids,
                }
            }
            if current == id {
                out[keep] = id;
                keep += 1;
            }
        }
    }
    out.truncate(keep);
}

/// Appends the ids of the delta-varint `list` to `out` (what [`Ids`] yields, in a
/// tighter loop).
fn decode_ids(list: &[u8], out: &mut Vec<u32>) {
    // At most one id per byte.
    out.reserve(list.len());
    let mut pos = 0;
    let Some(mut current) = read_varint(list, &mut pos) else {
        return;
    };
    out.push(current);
    while let Some(delta) = read_varint(list, &mut pos) {
        current = current.saturating_add(delta);
        out.push(current);
    }
}

/// Reads the varint at `pos` (moving past it); `None` at the end. Bits past the 32nd are
/// dropped (lists are built here, so there are none).
#[inline(always)]
fn read_varint(list: &[u8], pos: &mut usize) -> Option<u32> {
    let b = *list.get(*pos)?;
    *pos += 1;
    if b < 0x80 {
        return Some(u32::from(b));
    }
    let mut v = u32::from(b & 0x7f);
    let mut shift = 7u32;
    loop {
        let b = *list.get(*pos)?;
        *pos += 1;
        v |= u32::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
        if b < 0x80 {
            return Some(v);
        }
        shift += 7;
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decodes a gram's list of value ids.
struct Ids<'a> {
    data: &'a [u8],
    pos: usize,
    current: Option<u32>,
}

impl<'a> Ids<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            pos: 0,
            current: None,
        }
    }
}

impl Iterator for Ids<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        let v = read_varint(self.data, &mut self.pos)?;
        let next = match self.current {
            None => v,
            Some(c) => c.saturating_add(v),
        };
        self.current = Some(next);
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cip_proto::soif::attr::contains_ignore_ascii_case;
    use proptest::prelude::*;

    fn seg(values: &[(&str, u32, u64)], slot: u32, h: &RandomState) -> Segment {
        let entries = values
            .iter()
            .map(|(v, a, c)| (v.as_bytes(), *a, *c))
            .collect();
        Segment::from_entries(entries, slot, h).unwrap()
    }

    /// A search under some attributes skips the values reported under none of them, by
    /// their attribute bits alone; attributes sharing a bit (1 and 9) stay candidates.
    #[test]
    fn substring_under_attributes_skips_other_attributes() {
        let h = RandomState::default();
        let entries = vec![
            (&b"alpha one"[..], 0, 1),
            (&b"alpha two"[..], 1, 1),
            (&b"alpha six"[..], 9, 1),
            (&b"alpha ten"[..], 0, 1),
            (&b"alpha ten"[..], 2, 1),
        ];
        let seg = Segment::from_entries(entries, 0, &h).unwrap();
        let finder = memmem::Finder::new(b"alpha");
        let found = |mask: u8| -> Vec<String> {
            let mut ids = Vec::new();
            seg.find_substring(&finder, mask, &mut ids);
            ids.iter()
                .map(|&id| String::from_utf8_lossy(seg.folded_value(id)).into_owned())
                .collect()
        };
        assert_eq!(found(ANY_ATTR).len(), 4);
        assert_eq!(found(attr_mask(&[0])), ["alpha one", "alpha ten"]);
        assert_eq!(found(attr_mask(&[2])), ["alpha ten"]);
        assert_eq!(found(attr_mask(&[1])), ["alpha six", "alpha two"]);
        assert_eq!(found(attr_mask(&[0, 9])).len(), 4);
        assert!(found(attr_mask(&[5])).is_empty());
    }

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

    /// A sorted id set as a gram list codes it.
    fn coded(ids: &std::collections::BTreeSet<u32>) -> Vec<u8> {
        let mut out = Vec::new();
        let mut last = 0;
        for (k, &id) in ids.iter().enumerate() {
            put_varint(&mut out, if k == 0 { id } else { id - last });
            last = id;
        }
        out
    }

    proptest! {
        #[test]
        fn gram_lists_decode_and_intersect_as_sets_do(
            list in proptest::collection::btree_set(
                prop_oneof![0u32..300, 0u32..100_000, any::<u32>()], 0..400),
            candidates in proptest::collection::btree_set(
                prop_oneof![0u32..300, 0u32..100_000, any::<u32>()], 0..400),
        ) {
            let code = coded(&list);
            let decoded: Vec<u32> = Ids::new(&code).collect();
            prop_assert_eq!(&decoded, &list.iter().copied().collect::<Vec<_>>());
            let mut fast = vec![7];
            decode_ids(&code, &mut fast);
            prop_assert_eq!(&fast[1..], &decoded[..]);
            let mut out: Vec<u32> = candidates.iter().copied().collect();
            intersect(&mut out, 0, &code);
            let want: Vec<u32> = candidates.intersection(&list).copied().collect();
            prop_assert_eq!(out, want);
        }
    }

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

        /// The count of a slot in a long posting group is found wherever the slots sit
        /// (evenly spread or bunched).
        #[test]
        fn count_at_finds_every_slot(
            slots in prop::collection::btree_set(0u32..5000, 1..300),
            bunched in any::<bool>(),
        ) {
            let h = RandomState::default();
            let slots: Vec<u32> = slots
                .into_iter()
                .map(|s| if bunched && s % 3 == 0 { s / 100 } else { s })
                .collect::<std::collections::BTreeSet<u32>>()
                .into_iter()
                .collect();
            let mut bulk = BulkBuilder::default();
            for &slot in &slots {
                bulk.add([(&b"value"[..], 3, u64::from(slot) + 1)], slot, &h).unwrap();
            }
            let seg = bulk.finish(&h, true).unwrap();
            let start = seg.start_of(0);
            for probe in 0..5001u32 {
                let want = slots.binary_search(&probe).ok().map(|_| u64::from(probe) + 1);
                prop_assert_eq!(seg.count_at(start, 3, probe), want, "slot {}", probe);
            }
            prop_assert_eq!(seg.count_at(start, 4, slots[0]), None);
        }

        /// Without its substring index (a bulk load's segments), a segment finds the same
        /// substrings by scanning.
        #[test]
        fn substring_without_the_substring_index(
            values in prop::collection::vec("[abcAB ]{0,12}", 0..100),
            needle in "[abAB ]{1,6}",
        ) {
            let h = RandomState::default();
            let mut bulk = BulkBuilder::default();
            let entries: Vec<(&[u8], u32, u64)> = values.iter().map(|v| (v.as_bytes(), 0, 1)).collect();
            bulk.add(entries.iter().copied(), 0, &h).unwrap();
            let plain = bulk.finish(&h, false).unwrap();
            prop_assert!(!plain.has_grams() || values.is_empty());
            let indexed = Segment::from_entries(entries, 0, &h).unwrap();
            let lower = needle.to_ascii_lowercase();
            let finder = memmem::Finder::new(lower.as_bytes());
            let (mut a, mut b) = (Vec::new(), Vec::new());
            plain.find_substring(&finder, ANY_ATTR, &mut a);
            indexed.find_substring(&finder, ANY_ATTR, &mut b);
            let values_of = |s: &Segment, ids: &[u32]| -> Vec<Vec<u8>> {
                ids.iter().map(|&id| s.folded_value(id).to_vec()).collect()
            };
            prop_assert_eq!(values_of(&plain, &a), values_of(&indexed, &b));
            plain.ensure_grams();
            a.clear();
            plain.find_substring(&finder, ANY_ATTR, &mut a);
            prop_assert_eq!(values_of(&plain, &a), values_of(&indexed, &b));
        }

        #[test]
        fn unions_sorted_or_through_a_bitmap_are_the_set_union(
            lists in prop::collection::vec(
                prop::collection::btree_set(0u32..2000, 0..300), 0..6),
            sort in any::<bool>(),
        ) {
            // Ids below 2000 fit 32 words. The third list is coded as a bitmap.
            let words = 32;
            let coded: Vec<Vec<u8>> = lists.iter().map(coded).collect();
            let bitmaps: Vec<Vec<u64>> = lists
                .iter()
                .map(|l| {
                    let mut b = vec![0u64; words];
                    for &id in l {
                        b[id as usize / 64] |= 1 << (id % 64);
                    }
                    b
                })
                .collect();
            let gram_lists: Vec<(GramList<'_>, u32)> = (0..lists.len())
                .map(|i| {
                    let l = if i == 2 {
                        GramList::Bits(&bitmaps[i])
                    } else {
                        GramList::Ids(&coded[i])
                    };
                    (l, lists[i].len() as u32)
                })
                .collect();
            let want: std::collections::BTreeSet<u32> = lists.iter().flatten().copied().collect();
            let want: Vec<u32> = want.into_iter().collect();
            let mut out = Vec::new();
            union_by(gram_lists.iter().copied(), words, sort, &mut out);
            prop_assert_eq!(&out, &want);
        }

        #[test]
        fn trigram_cards_count_the_values_holding_each(
            values in prop::collection::vec("[abAB]{0,9}|[abcAB ]{0,9}", 0..150),
            min in 1usize..20,
        ) {
            let h = RandomState::default();
            let entries = values.iter().map(|v| (v.as_bytes(), 0, 1)).collect();
            let s = Segment::from_entries(entries, 0, &h).unwrap();
            let mut want: std::collections::BTreeMap<u32, u32> = Default::default();
            for id in 0..s.len() as u32 {
                let mut grams: Vec<u32> = s.folded_value(id).windows(3).map(gram_key).collect();
                grams.sort_unstable();
                grams.dedup();
                for g in grams {
                    *want.entry(g).or_default() += 1;
                }
            }
            want.retain(|_, &mut c| c as usize >= min);
            let got: std::collections::BTreeMap<u32, u32> = s.gram_cards(min).into_iter().collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn substring_and_exact_match_brute_force(
            // Up to 200 values, half of them over two letters, so that common 4-grams get
            // bitmaps (64 values or more).
            values in prop::collection::vec("[abAB]{6,12}|[abcAB ]{0,12}", 0..200),
            needle in "[abAB ]{1,4}|[abAB]{5,40}",
        ) {
            let h = RandomState::default();
            let entries = values.iter().map(|v| (v.as_bytes(), 0, 1)).collect();
            let s = Segment::from_entries(entries, 0, &h).unwrap();
            let mut got = Vec::new();
            let lower = needle.to_ascii_lowercase();
            s.find_substring(&memmem::Finder::new(lower.as_bytes()), ANY_ATTR, &mut got);
            let want: Vec<u32> = (0..s.len() as u32)
                .filter(|&id| contains_ignore_ascii_case(&s.value(id), needle.as_bytes()))
                .collect();
            prop_assert_eq!(got, want);
            // A 4-gram held by one value in eight of 64 or more has a bitmap.
            let n = s.len();
            let quads = &s.grams.get().unwrap().quads;
            let dense = quads.cards.iter().any(|&c| n >= 64 && c as usize * DENSE >= n);
            prop_assert_eq!(dense, !quads.bitmaps.is_empty());
            if values.len() >= 150 {
                prop_assert!(dense, "the test's values should make some 4-gram dense");
            }
            for v in &values {
                let lower = v.to_ascii_lowercase();
                let id = s.find_exact(hash_folded(&h, v.as_bytes()), lower.as_bytes());
                prop_assert!(id.is_some_and(|id| s.value(id).eq_ignore_ascii_case(v.as_bytes())));
            }
            let mut sorted: Vec<Vec<u8>> = (0..s.len() as u32).map(|id| s.value(id).into_owned()).collect();
            let before = sorted.clone();
            sorted.sort_by(|a, b| cmp_folded(a, b));
            prop_assert_eq!(before, sorted);
        }

        #[test]
        fn exact_lookups_agree_before_and_after_the_table_is_built(
            values in prop::collection::vec("[abcAB ]{0,8}", 0..100),
            probes in prop::collection::vec("[abcAB ]{0,8}", 0..20),
        ) {
            // A bulk load's segment has no exact-match table: lookups binary-search.
            let h = RandomState::default();
            let mut bulk = BulkBuilder::default();
            bulk.add(values.iter().map(|v| (v.as_bytes(), 0, 1)), 0, &h).unwrap();
            let s = bulk.finish(&h, false).unwrap();
            prop_assert!(!s.has_exact() && !s.has_grams());
            let look = |s: &Segment| -> Vec<Option<(u32, u32)>> {
                values.iter().chain(&probes).map(|v| {
                    let lower = v.to_ascii_lowercase();
                    s.find_exact_record(hash_folded(&h, v.as_bytes()), lower.as_bytes())
                }).collect()
            };
            let searched = look(&s);
            s.ensure_exact(&h);
            prop_assert!(s.has_exact());
            prop_assert_eq!(&searched, &look(&s));
            for (v, found) in values.iter().zip(&searched) {
                prop_assert!(found.is_some_and(|(id, _)| s.value(id).eq_ignore_ascii_case(v.as_bytes())));
            }
        }
    }
}
