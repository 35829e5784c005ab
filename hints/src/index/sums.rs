//! Per-slot sums of substring needles as a segment keeps them: the [`Summaries`] of its
//! broad and narrow n-grams, and the [`Store`] that the substring cache ([`super::cache`])
//! keeps sums in as well.
//!
//! This is only their storage and lookup: which n-grams are summarized and how the sums are
//! computed from a segment's values is [`crate::substring`]'s part.

use std::collections::HashMap;

use crate::hasher::RandomState;

/// Best values kept per slot in a summary: queries asking for at most this many values
/// per referral can use summaries.
pub const SUMMARY_TOPS: usize = 5;

/// Longest n-gram summarized (packed with its length into a `u64`).
pub(crate) const MAX_GRAM: usize = 7;

/// Shortest n-gram summarized narrowly (see [`crate::substring`]).
pub(crate) const NARROW_MIN: usize = 4;
/// Longest n-gram summarized narrowly.
pub(crate) const NARROW_MAX: usize = 6;

/// One slot's aggregate for one n-gram under one attribute: 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SumEntry {
    /// Table-wide slot.
    pub slot: u32,
    /// Values holding the n-gram that the slot reported.
    pub matched: u32,
    /// Their summed counts; [`BIG_SUM`] when the sum is kept in [`Store::big`].
    pub(crate) sum: u32,
    /// The slot's best values (highest count, then folded order), best first; `u32::MAX`
    /// pads.
    pub tops: [u32; SUMMARY_TOPS],
}

/// Set in the first block index of a narrow summary's range in [`Summaries::index`].
const NARROW: u32 = 1 << 31;

/// Marks a [`SumEntry`] whose sum does not fit its 32 bits.
const BIG_SUM: u32 = u32::MAX;

/// A block's [`Cut`] flag: it keeps only its n-gram's best slots in rank order (highest
/// sums, then tie position), not all.
pub(crate) const CUT: u8 = 1;

/// How a block was cut ([`CUT`]; 0: every slot is there).
pub(crate) type Cut = u8;

/// Summed entries, grouped in blocks by attribute: the storage of precomputed summaries
/// and of memoized ones ([`super::cache`]).
#[derive(Debug, Default)]
pub(crate) struct Store {
    /// `(attribute, entries start, entries end)`, by attribute within a needle.
    blocks: Vec<(u32, u32, u32)>,
    /// Per block: how it was cut; empty when no block is.
    cuts: Vec<Cut>,
    /// By slot within a block.
    entries: Vec<SumEntry>,
    /// `(index in entries, sum)` of the sums of [`BIG_SUM`] or more, by index.
    big: Vec<(u32, u64)>,
}

impl Store {
    /// Appends one needle's blocks; returns their range in `blocks`.
    pub(crate) fn push(&mut self, blocks: Blocks) -> (u32, u32) {
        self.push_cut(blocks.into_iter().map(|(a, e)| (a, e, 0)))
    }

    /// Appends one needle's blocks, each with how it was cut; returns their range in
    /// `blocks`.
    pub(crate) fn push_cut(
        &mut self,
        blocks: impl IntoIterator<Item = (u32, Vec<(SumEntry, u64)>, Cut)>,
    ) -> (u32, u32) {
        let first = self.blocks.len() as u32;
        for (attr, entries, cut) in blocks {
            if cut != 0 && self.cuts.len() < self.blocks.len() {
                self.cuts.resize(self.blocks.len(), 0);
            }
            if cut != 0 || !self.cuts.is_empty() {
                self.cuts.push(cut);
            }
            let start = self.entries.len() as u32;
            for (mut e, sum) in entries {
                e.sum = match u32::try_from(sum) {
                    Ok(s) if s != BIG_SUM => s,
                    _ => {
                        self.big.push((self.entries.len() as u32, sum));
                        BIG_SUM
                    }
                };
                self.entries.push(e);
            }
            self.blocks.push((attr, start, self.entries.len() as u32));
        }
        (first, self.blocks.len() as u32)
    }

    /// The entries under `attr` among the blocks `range` (empty when none).
    fn lookup(&self, (start, end): (u32, u32), attr: u32) -> Option<Summary<'_>> {
        let blocks = self.blocks.get(start as usize..end as usize)?;
        let (s, e, cut) = match blocks.binary_search_by_key(&attr, |b| b.0) {
            Ok(k) => {
                let cut = self.cuts.get(start as usize + k).copied().unwrap_or(0);
                (blocks[k].1, blocks[k].2, cut)
            }
            Err(_) => (0, 0, 0),
        };
        Some(Summary {
            big: &self.big,
            start: s,
            entries: self.entries.get(s as usize..e as usize).unwrap_or(&[]),
            cut,
        })
    }

    /// Whether the blocks `range` hold one under `attr`.
    fn has_block(&self, (start, end): (u32, u32), attr: u32) -> bool {
        self.blocks
            .get(start as usize..end as usize)
            .is_some_and(|b| b.binary_search_by_key(&attr, |b| b.0).is_ok())
    }

    /// The entries under `attr` of a store holding one needle.
    pub(crate) fn only(&self, attr: u32) -> Summary<'_> {
        self.lookup((0, self.blocks.len() as u32), attr)
            .unwrap_or(Summary {
                big: &[],
                start: 0,
                entries: &[],
                cut: 0,
            })
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.blocks.shrink_to_fit();
        self.cuts.shrink_to_fit();
        self.entries.shrink_to_fit();
        self.big.shrink_to_fit();
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.blocks.capacity() * 12
            + self.cuts.capacity()
            + self.entries.capacity() * std::mem::size_of::<SumEntry>()
            + self.big.capacity() * 16
    }
}

/// A segment's summaries.
#[derive(Debug, Default)]
pub(crate) struct Summaries {
    /// Packed n-gram (see [`pack`]) -> its blocks in `store`.
    pub(crate) index: HashMap<u64, (u32, u32), RandomState>,
    pub(crate) store: Store,
    /// When nonzero, every 4- to 6-byte n-gram starting with a 4-gram of
    /// [`Summaries::narrow_quads`], held by this many values and with this many postings
    /// under an attribute, is summarized under it (narrow summaries, [`crate::substring`]).
    pub(crate) narrow_cover: usize,
    /// Entries of the segment's slots live when they were built.
    pub(crate) live_entries: u64,
    /// The 4-grams (keys of the substring index) whose extensions were all considered,
    /// ascending: those held by [`Summaries::narrow_cover`] values or more, but for any a
    /// memory bound left out.
    pub(crate) narrow_quads: Vec<u32>,
}

/// One summarized n-gram under one attribute: its entries by slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Summary<'a> {
    big: &'a [(u32, u64)],
    /// Index of `entries[0]` in `all.entries`.
    start: u32,
    /// By slot.
    pub entries: &'a [SumEntry],
    /// How the block was cut: when it was, `entries` are only the best slots.
    pub cut: Cut,
}

impl Summary<'_> {
    /// True when the `limit` best of the slots `live` accepts are all among the entries,
    /// with their full sums: always for a block that was not cut. A cut block keeps the
    /// first slots in rank order among those live when it was built, an order that stays
    /// as long as the slots live (a slot's tie position follows from its own hint); a slot
    /// that died since is skipped, so the block answers while `limit` of its slots live.
    pub(crate) fn exact_for(&self, limit: usize, live: impl Fn(u32) -> bool) -> bool {
        self.cut & CUT == 0
            || limit == 0
            || self
                .entries
                .iter()
                .filter(|e| live(e.slot))
                .nth(limit - 1)
                .is_some()
    }

    /// The summed count of `entries[i]`.
    pub(crate) fn sum(&self, i: usize) -> u64 {
        let Some(e) = self.entries.get(i) else {
            return 0;
        };
        if e.sum != BIG_SUM {
            return u64::from(e.sum);
        }
        let at = self.start + i as u32;
        match self.big.binary_search_by_key(&at, |b| b.0) {
            Ok(k) => self.big[k].1,
            Err(_) => u64::from(BIG_SUM),
        }
    }
}

/// An n-gram of 3 to [`MAX_GRAM`] bytes as one integer: its bytes little-endian, its
/// length in the top byte.
pub(crate) fn pack(gram: &[u8]) -> Option<u64> {
    if !(3..=MAX_GRAM).contains(&gram.len()) {
        return None;
    }
    let mut b = [0u8; 8];
    b[..gram.len()].copy_from_slice(gram);
    b[7] = gram.len() as u8;
    Some(u64::from_le_bytes(b))
}

pub(crate) fn unpack(key: u64) -> ([u8; 8], usize) {
    let b = key.to_le_bytes();
    (b, usize::from(b[7]).min(MAX_GRAM))
}

impl Summaries {
    /// The per-slot aggregates (by slot) of the values holding `needle` (ASCII-lowercased)
    /// under `attr`, if it is summarized; empty when no value holds it under `attr`.
    pub(crate) fn lookup(&self, needle: &[u8], attr: u32) -> Option<Summary<'_>> {
        if self.index.is_empty() {
            return None;
        }
        let (start, end) = *self.index.get(&pack(needle)?)?;
        if start & NARROW != 0 {
            // A narrow summary has no block under an attribute few postings are under.
            let range = (start & !NARROW, end);
            return self
                .store
                .has_block(range, attr)
                .then(|| self.store.lookup(range, attr))
                .flatten();
        }
        self.store.lookup((start, end), attr)
    }

    /// Adds a narrow summary (see [`crate::substring`]) of `key`; false when the store is
    /// full.
    pub(crate) fn push_narrow(&mut self, key: u64, blocks: CutBlocks) -> bool {
        if self.store.blocks.len() + blocks.len() >= NARROW as usize {
            return false;
        }
        let (start, end) = self.store.push_cut(blocks);
        self.index.insert(key, (start | NARROW, end));
        true
    }

    /// True when `needle` (ASCII-lowercased, 4 to 6 bytes) is not summarized under `attr`
    /// although its 4-gram's narrow summaries were built ([`Summaries::narrow_quads`]):
    /// then fewer than [`Summaries::narrow_cover`] values hold it, or fewer postings than
    /// that are under `attr`, and it is cheap to sum. `quad` is the key of its first four
    /// bytes, as the substring index makes it.
    pub(crate) fn covers_narrowly(&self, needle: &[u8], attr: u32, quad: u32) -> bool {
        if self.narrow_quads.binary_search(&quad).is_err() {
            return false;
        }
        let Some(key) = pack(needle) else {
            return false;
        };
        match self.index.get(&key) {
            None => true,
            Some(&(start, end)) => {
                start & NARROW != 0 && !self.store.has_block((start & !NARROW, end), attr)
            }
        }
    }

    /// Number of n-grams summarized.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Approximate heap bytes held.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.index.capacity() * 24 + self.store.heap_bytes()
    }
}

/// One n-gram's summary: per attribute, its entries by slot with their full sums.
pub(crate) type Blocks = Vec<(u32, Vec<(SumEntry, u64)>)>;

/// [`Blocks`] each with how it was cut ([`Store::push_cut`]).
pub(crate) type CutBlocks = Vec<(u32, Vec<(SumEntry, u64)>, Cut)>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_takes_three_to_seven_bytes() {
        assert!(pack(b"ab").is_none());
        assert!(pack(b"abcdefgh").is_none());
        let (b, len) = unpack(pack(b"abc d").unwrap());
        assert_eq!(&b[..len], b"abc d");
    }
}
