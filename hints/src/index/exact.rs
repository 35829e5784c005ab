//! The exact-match table: per value, its hash's high bits and its record's start, so that
//! an exact lookup costs two dependent cache misses, table then record. A bulk load's
//! segments go without it until the load ends: their lookups binary-search the sorted
//! values meanwhile.

use std::cmp::Ordering;
use std::hash::BuildHasher;

use crate::hasher::RandomState;
use crate::pages::{Pages, PagesMut};

use super::segment::{Segment, rd32};

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

impl Segment {
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

    /// The exact-match table (see [`Segment::table`]).
    pub(super) fn exact_table(&self, hasher: &RandomState) -> Pages {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::BulkBuilder;
    use proptest::prelude::*;

    proptest! {
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
