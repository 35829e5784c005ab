//! The substring index: per 4-gram, the values holding it; per trigram, the values ending
//! with it. Its lists are delta-varint coded, or bitmaps for the grams many values hold.
//!
//! The searches through it are [`super::search`]'s.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

pub(super) fn gram_key(w: &[u8]) -> u32 {
    (u32::from(w[0].to_ascii_lowercase()) << 16)
        | (u32::from(w[1].to_ascii_lowercase()) << 8)
        | u32::from(w[2].to_ascii_lowercase())
}

/// The key of a 4-gram: its bytes ASCII-lowercased, big-endian, so that the 4-grams
/// starting with one trigram are the keys from `gram_key << 8` to `gram_key << 8 | 0xff`.
pub(super) fn quad_key(w: &[u8]) -> u32 {
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
pub(super) struct GramIndex {
    pub(super) quads: GramLists,
    ends: GramLists,
}

impl GramIndex {
    /// The index of `n` values, `folded(id)` giving value `id` ASCII-lowercased.
    pub(super) fn build<'a>(n: usize, folded: impl Fn(u32) -> &'a [u8] + Copy) -> Self {
        Self {
            quads: GramLists::build(n, folded, |v, keys| keys.extend(v.windows(4).map(quad_key))),
            ends: GramLists::build(n, folded, |v, keys| {
                if let Some(end) = v.len().checked_sub(3) {
                    keys.push(gram_key(&v[end..]));
                }
            }),
        }
    }

    /// Puts in `out` the ids (ascending) of the values holding trigram `key`.
    pub(super) fn trigram_ids(&self, key: u32, out: &mut Vec<u32>) {
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
    pub(super) fn trigram_cards(&self, min: usize) -> Vec<(u32, u32)> {
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

    pub(super) fn heap_bytes(&self) -> usize {
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
pub(super) struct GramLists {
    pub(super) keys: Vec<u32>,
    /// Per key: end of its list in `lists` (bitmaps have an empty one).
    ends: Vec<usize>,
    lists: Vec<u8>,
    /// Per key: how many values hold it.
    pub(super) cards: Vec<u32>,
    /// Per key: the index of its bitmap in `bitmaps`, or `u32::MAX`.
    bitmap_of: Vec<u32>,
    /// The bitmaps, `words` words each; bit `id % 64` of word `id / 64` is value `id`.
    pub(super) bitmaps: Vec<u64>,
    words: usize,
}

/// A gram whose values are at least one in this many of the segment's gets a bitmap.
pub(super) const DENSE: usize = 8;

/// One gram's ids.
#[derive(Debug, Clone, Copy)]
pub(super) enum GramList<'a> {
    /// Delta-varint coded.
    Ids(&'a [u8]),
    /// A bitmap over the value ids.
    Bits(&'a [u64]),
}

impl GramList<'_> {
    /// Appends the ids, ascending.
    pub(super) fn decode(self, out: &mut Vec<u32>) {
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
    fn build<'a>(
        n: usize,
        folded: impl Fn(u32) -> &'a [u8],
        keys_of: impl Fn(&[u8], &mut Vec<u32>),
    ) -> Self {
        // Dense index per distinct gram, then per gram its list so far, last id and
        // number of ids.
        let mut dense: HashMap<u32, u32, BuildGramHasher> = HashMap::default();
        let mut building: Vec<(u32, u32, u32, Vec<u8>)> = Vec::new();
        let mut grams: Vec<u32> = Vec::new();
        for id in 0..n as u32 {
            grams.clear();
            keys_of(folded(id), &mut grams);
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
    pub(super) fn list(&self, gram: u32) -> Option<(GramList<'_>, u32)> {
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

    pub(super) fn heap_bytes(&self) -> usize {
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
pub(super) fn intersect(out: &mut Vec<u32>, first: usize, list: &[u8]) {
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
pub(super) fn decode_ids(list: &[u8], out: &mut Vec<u32>) {
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
    use proptest::prelude::*;

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
    }
}
