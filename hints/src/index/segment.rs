//! The segment: its record format, and reading values and postings from it.
//!
//! How a segment is written is [`super::builder`]'s part; how it is searched, [`super::exact`]'s
//! and [`super::search`]'s.

use std::cmp::Ordering;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwapOption;

use crate::pages::Pages;

use super::cache::Cache;
use super::grams::GramIndex;
use super::sums::{Store, Summaries};

/// Most ids [`Segment::touch_postings`] takes at once.
pub(crate) const TOUCH_BATCH: usize = 16;

/// Counts at or above this are kept in [`Segment::big_counts`].
pub(super) const BIG: u32 = u32::MAX;

/// Bit of a record's length word set when the value's spelling has uppercase bytes (its
/// record then holds their bitmap).
pub(super) const HAS_UPPER: u32 = 1 << 31;

/// Bytes of a record header: length word, attribute group count, value id.
pub(super) const HEADER: usize = 12;

/// Bytes of one posting: slot, count.
pub(super) const POSTING: usize = 8;

/// Bytes of an attribute group header: attribute id, posting count.
pub(super) const GROUP: usize = 8;

/// A segment would exceed the 32-bit offsets it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentOverflow;

/// An immutable set of values with their postings and lookup structures: a [`Core`], shared
/// by every version of the segment, and the values this version hides.
///
/// A delta applied in place ([`crate::table`]) moves the records of the values it changes
/// to a new small segment and hides them here: a hidden value is still found by lookups
/// (its bytes, exact-table entry and 4-grams stay), but has no postings, so every reader
/// passes over it. Summaries and memoized sums are computed from the core as if nothing
/// were hidden: a query takes off them what the hidden values holding its needle add
/// ([`Segment::hidden_matches`]), and uses them only where that leaves them exact.
/// Versions share the core by `Arc`: hiding costs the hidden set, not the segment.
#[derive(Debug, Default)]
pub(crate) struct Segment {
    core: Arc<Core>,
    hidden: Arc<Hidden>,
}

impl std::ops::Deref for Segment {
    type Target = Core;

    #[inline]
    fn deref(&self) -> &Core {
        &self.core
    }
}

/// The values a version of a segment hides (see [`Segment`]).
#[derive(Debug, Default)]
pub(crate) struct Hidden {
    /// Their ids, sorted.
    ids: Vec<u32>,
    /// Their folded values, each followed by a 0 byte: one `memmem` pass finds those that
    /// hold a needle (one holding a 0 byte may match across two: then the sums are not
    /// used, which costs only time).
    text: Vec<u8>,
    /// The id of each value in `text`, in `text`'s order (the order they were hidden).
    text_ids: Vec<u32>,
    /// Where each value's 0 byte is in `text`, in the same order.
    text_ends: Vec<u32>,
    /// Their postings by slot, sorted by slot.
    by_slot: Vec<(u32, u64)>,
}

/// The records, postings and lookup structures of a segment, shared by its versions.
///
/// Each value is one *record* in `recs`, little-endian:
/// `len | HAS_UPPER` (u32), attribute groups (u32), value id (u32); the value's bytes
/// ASCII-lowercased; when `HAS_UPPER` is set, a bitmap (bit `k % 8` of byte `k / 8`) of
/// the bytes uppercase in the representative spelling; then per attribute (ascending):
/// attribute id (u32), postings (u32), and that many `(slot, count)` pairs (u32 each,
/// by slot). Records follow one another in folded value order.
#[derive(Debug, Default)]
pub(crate) struct Core {
    pub(super) recs: Pages,
    /// Per value id: where its record starts in `recs`.
    pub(super) starts: Vec<u32>,
    /// Per value id: [`attr_bit`] of each attribute it is reported under, OR-ed; lets a
    /// search under some attributes skip values without loading their records.
    pub(super) attr_bits: Vec<u8>,
    /// Exact-match table ([`super::exact`]), linear probing from a hash's home:
    /// `hash >> 32 << 32 | record start + 1`, 0 when empty; `u64`s, little-endian. A bulk
    /// load's segments go without it until the load ends ([`Segment::ensure_exact`]);
    /// exact lookups binary-search the sorted values meanwhile.
    pub(super) table: OnceLock<Pages>,
    /// `(position in recs of a posting's count, count)` for counts of [`BIG`] or more.
    pub(super) big_counts: Vec<(u32, u64)>,
    pub(super) slots: Vec<(u32, u64)>,
    pub(super) entries: usize,
    pub(super) value_bytes: usize,
    /// Built with the segment, except in a bulk load ([`Segment::ensure_grams`]); without
    /// it substring searches scan every value.
    pub(super) grams: OnceLock<GramIndex>,
    /// Built after the segment is in use ([`Segment::build_summaries`]), and built again once
    /// enough of its peers have gone that narrow summaries thin out; readers hold the
    /// ones they loaded.
    pub(crate) summaries: ArcSwapOption<Summaries>,
    /// Set while [`Segment::build_summaries`] builds them.
    pub(crate) summarizing: AtomicBool,
    /// Sums of expensive substring needles, kept as queries compute them.
    pub(crate) cache: Cache,
}

/// A value's record, decoded from its header.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rec {
    /// Its value id.
    pub(super) id: u32,
    /// Where the value's bytes start in `recs`.
    pub(super) bytes: usize,
    pub(super) len: usize,
    pub(super) upper: bool,
    /// Where its attribute groups start.
    pub(super) groups: usize,
    pub(super) ngroups: u32,
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
pub(super) fn rd32(b: &[u8], at: usize) -> u32 {
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

/// First id in `0..n` for which `below` is false (`below` true on a prefix of the ids).
pub(super) fn partition(n: u32, below: impl Fn(u32) -> bool) -> u32 {
    let (mut lo, mut hi) = (0u32, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) { lo = mid + 1 } else { hi = mid }
    }
    lo
}

impl Segment {
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
    pub(super) fn rec_at(&self, at: usize) -> Rec {
        let word = rd32(&self.recs, at);
        let len = (word & !HAS_UPPER) as usize;
        let upper = word & HAS_UPPER != 0;
        let bytes = at + HEADER;
        let groups = bytes + len + if upper { len.div_ceil(8) } else { 0 };
        Rec {
            id: rd32(&self.recs, at + 8),
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
    pub(super) fn rec(&self, id: u32) -> Rec {
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

    /// The attribute groups of record `r`: none when this version hides it.
    #[inline]
    fn groups_of(&self, r: Rec) -> impl Iterator<Item = Group> + '_ {
        let n = if self.is_hidden(r.id) { 0 } else { r.ngroups };
        self.groups_raw(r.groups, n)
    }

    /// `n` attribute groups starting at `at`.
    #[inline]
    fn groups_raw(&self, mut at: usize, n: u32) -> impl Iterator<Item = Group> + '_ {
        (0..n).map(move |_| {
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

    /// [`Segment::groups_in`], hidden or not: what summaries and memoized sums are
    /// computed from (see [`Segment`]).
    #[inline]
    pub(crate) fn groups_in_core(&self, start: u32) -> impl Iterator<Item = Group> + '_ {
        let r = self.rec_at(start as usize);
        self.groups_raw(r.groups, r.ngroups)
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
            + 4 * self.hidden.ids.capacity()
            + self.hidden.text.capacity()
            + 4 * (self.hidden.text_ids.capacity() + self.hidden.text_ends.capacity())
            + 16 * self.hidden.by_slot.capacity()
    }
}

/// Versions: the values a delta moved away ([`Segment`]).
impl Segment {
    /// A segment of `core` hiding nothing.
    pub(super) fn from_core(core: Core) -> Self {
        Self {
            core: Arc::new(core),
            hidden: Arc::default(),
        }
    }

    /// True when this version hides value `id`.
    #[inline]
    pub(crate) fn is_hidden(&self, id: u32) -> bool {
        !self.hidden.ids.is_empty() && self.hidden.ids.binary_search(&id).is_ok()
    }

    /// Appends to `out` the hidden values that hold `finder`'s needle, each once; false
    /// (and nothing appended) when that cannot be told from the hidden text: a needle
    /// holding a 0 byte, which may match across two values.
    pub(crate) fn hidden_matches(
        &self,
        finder: &memchr::memmem::Finder<'_>,
        out: &mut Vec<u32>,
    ) -> bool {
        let needle = finder.needle();
        if needle.contains(&0) {
            return false;
        }
        let h = &*self.hidden;
        let mut from = 0usize;
        while let Some(p) = h.text.get(from..).and_then(|t| finder.find(t)) {
            let end_of_match = from + p + needle.len();
            // The value the match ends in; it starts in it too (no 0 byte in the needle).
            let i = h
                .text_ends
                .partition_point(|&e| (e as usize) < end_of_match);
            let (Some(&id), Some(&end)) = (h.text_ids.get(i), h.text_ends.get(i)) else {
                break;
            };
            out.push(id);
            from = end as usize + 1;
        }
        true
    }

    /// Values hidden.
    pub(crate) fn hidden_values(&self) -> usize {
        self.hidden.ids.len()
    }

    /// True when this version hides any value.
    pub(crate) fn hides(&self) -> bool {
        !self.hidden.ids.is_empty()
    }

    /// Postings of `slot` among the values hidden.
    pub(crate) fn hidden_slot_entries(&self, slot: u32) -> u64 {
        self.hidden
            .by_slot
            .binary_search_by_key(&slot, |e| e.0)
            .map_or(0, |k| self.hidden.by_slot[k].1)
    }

    /// True while another version or snapshot shares this segment's core.
    pub(crate) fn core_shared(&self) -> bool {
        Arc::strong_count(&self.core) > 1
    }

    /// A new version of the segment that also hides `ids` (values not hidden yet).
    pub(crate) fn hiding(&self, ids: &[u32]) -> Self {
        let mut ids: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&id| (id as usize) < self.len() && !self.is_hidden(id))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut hidden = Hidden {
            ids: Vec::with_capacity(self.hidden.ids.len() + ids.len()),
            text: self.hidden.text.clone(),
            text_ids: self.hidden.text_ids.clone(),
            text_ends: self.hidden.text_ends.clone(),
            by_slot: self.hidden.by_slot.clone(),
        };
        for &id in &ids {
            hidden.text.extend_from_slice(self.folded_value(id));
            hidden.text_ids.push(id);
            // Offsets fit: the text is at most the segment's value bytes plus one a value.
            hidden
                .text_ends
                .push(u32::try_from(hidden.text.len()).unwrap_or(u32::MAX));
            hidden.text.push(0);
            let r = self.rec(id);
            for g in self.groups_raw(r.groups, r.ngroups) {
                for (slot, _) in self.group_postings(g) {
                    match hidden.by_slot.binary_search_by_key(&slot, |e| e.0) {
                        Ok(k) => hidden.by_slot[k].1 += 1,
                        Err(k) => hidden.by_slot.insert(k, (slot, 1)),
                    }
                }
            }
        }
        // Both lists are sorted: merge them.
        let (a, b) = (&self.hidden.ids, &ids);
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            if j == b.len() || (i < a.len() && a[i] < b[j]) {
                hidden.ids.push(a[i]);
                i += 1;
            } else {
                hidden.ids.push(b[j]);
                j += 1;
            }
        }
        Self {
            core: Arc::clone(&self.core),
            hidden: Arc::new(hidden),
        }
    }
}

/// What the segment holds of substring sums ([`crate::substring`]).
impl Segment {
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

    /// The memoized sums of `needle` (ASCII-lowercased) under `attr`, if a query kept
    /// them.
    #[inline]
    pub(crate) fn memoized(&self, needle: &[u8], attr: u32) -> Option<Arc<Store>> {
        self.cache.get(needle, attr)
    }

    /// Needles memoized and their bytes.
    pub(crate) fn cache_stats(&self) -> (usize, usize) {
        self.cache.stats()
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
}

#[cfg(test)]
mod tests {
    use crate::hasher::RandomState;
    use crate::index::BulkBuilder;
    use proptest::prelude::*;

    proptest! {
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
    }
}
