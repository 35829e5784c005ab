//! Substring searches of a segment: the candidates its 4-gram index ([`super::grams`])
//! leaves, checked and handed on in one pipelined pass; a scan of every record while the
//! index is not built. Also the 4-gram counts that substring summaries are mined from.

use memchr::memmem;

use super::grams::{GramIndex, GramList, decode_ids, gram_key, intersect, quad_key};
use super::segment::{ANY_ATTR, Segment};
use super::sums::{NARROW_MAX, NARROW_MIN};

/// Values per batch of the pipeline of [`Segment::for_each_substring`].
const SCAN_BATCH: usize = 32;

impl Segment {
    /// The substring index of the segment's values.
    pub(super) fn build_grams(&self) -> GramIndex {
        GramIndex::build(self.len(), |id| self.folded_value(id))
    }

    /// Builds the substring index if the segment was made without it.
    pub(crate) fn ensure_grams(&self) {
        self.gram_index();
    }

    /// The substring index, built first if the segment was made without it.
    fn gram_index(&self) -> &GramIndex {
        self.grams.get_or_init(|| self.build_grams())
    }

    /// Whether the substring index is built.
    #[cfg(test)]
    pub(crate) fn has_grams(&self) -> bool {
        self.grams.get().is_some()
    }

    /// True when `needle` (ASCII-lowercased) is not summarized here under `attr` although
    /// the segment's narrow summaries would hold it if enough postings were under it
    /// ([`crate::substring`]): then fewer are, and summing it is cheap.
    pub(crate) fn covers_narrowly(&self, needle: &[u8], attr: u32) -> bool {
        let guard = self.summaries.load();
        let Some(s) = guard.as_deref() else {
            return false;
        };
        if s.narrow_cover == 0 || !(NARROW_MIN..=NARROW_MAX).contains(&needle.len()) {
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

    /// Appends to `out` the ids of values containing the needle `finder` looks for (built
    /// on the ASCII-lowercased needle), in ascending order; with a `mask` other than
    /// [`ANY_ATTR`] ([`attr_mask`](super::attr_mask)), only of values reported under one of
    /// its attributes (and maybe others).
    pub(crate) fn find_substring(&self, finder: &memmem::Finder<'_>, mask: u8, out: &mut Vec<u32>) {
        let mut candidates = Vec::new();
        if let Some(exact) = self.substring_candidates(finder, &mut candidates) {
            self.retain_under(&mut candidates, mask);
            self.for_each_candidate(finder, &candidates, exact, |id, _| out.push(id));
        }
    }

    /// Keeps of `ids` those that may be reported under an attribute of `mask`
    /// ([`attr_mask`](super::attr_mask)): a byte per value, read in id order, instead of a
    /// record each.
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hasher::RandomState;
    use crate::index::exact::hash_folded;
    use crate::index::grams::DENSE;
    use crate::index::{BulkBuilder, attr_mask, cmp_folded};
    use cip_proto::soif::attr::contains_ignore_ascii_case;
    use proptest::prelude::*;

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

    proptest! {
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
    }
}
