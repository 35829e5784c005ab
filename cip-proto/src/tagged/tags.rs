//! Tag sets: the record handles one index line names (RFC 2654 §4.3, §4.3.3).
//!
//! A tag list is `*` (every record) or comma-separated tags and `first-last` ranges. Sets are
//! kept as sorted, disjoint, non-adjacent inclusive ranges, so `1-1000000000` costs sixteen
//! bytes and no operation here ever expands a range into its tags.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// The records an index line applies to: `*` (all of them) or a finite set of tags.
///
/// Equal sets compare equal however they were written (`3,4,5` and `3-5`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TagSet(Repr);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// `*`: every record of the directory.
    All,
    /// Sorted, disjoint, non-adjacent inclusive ranges.
    Ranges(Ranges),
}

impl Default for Repr {
    fn default() -> Self {
        Self::Ranges(Ranges::default())
    }
}

impl TagSet {
    /// `*`: every record.
    pub fn all() -> Self {
        Self(Repr::All)
    }

    /// No tags.
    pub fn empty() -> Self {
        Self::default()
    }

    /// One tag.
    pub fn single(tag: u64) -> Self {
        Self(Repr::Ranges(Ranges(vec![(tag, tag)])))
    }

    /// The union of inclusive ranges `(first, last)`; `None` if a range has `first > last`.
    pub fn from_ranges(ranges: impl IntoIterator<Item = (u64, u64)>) -> Option<Self> {
        let mut v = Vec::new();
        for (a, b) in ranges {
            if a > b {
                return None;
            }
            v.push((a, b));
        }
        Some(Self(Repr::Ranges(Ranges::normalize(v))))
    }

    /// True for `*`.
    pub fn is_all(&self) -> bool {
        matches!(self.0, Repr::All)
    }

    /// True when no record is named (never true for `*`).
    pub fn is_empty(&self) -> bool {
        matches!(&self.0, Repr::Ranges(r) if r.0.is_empty())
    }

    /// The explicit tags as sorted, disjoint, non-adjacent inclusive ranges; empty for `*`.
    pub fn ranges(&self) -> &[(u64, u64)] {
        match &self.0 {
            Repr::All => &[],
            Repr::Ranges(r) => &r.0,
        }
    }

    /// How many tags; `None` for `*` (which depends on the directory). Saturates at
    /// `u64::MAX` (the full range `0-18446744073709551615` holds one more).
    pub fn len(&self) -> Option<u64> {
        match &self.0 {
            Repr::All => None,
            Repr::Ranges(r) => Some(saturate(r.count())),
        }
    }

    /// True when `tag` is in the set (always for `*`).
    pub fn contains(&self, tag: u64) -> bool {
        match &self.0 {
            Repr::All => true,
            Repr::Ranges(r) => r.contains(tag),
        }
    }

    /// The tags in either set.
    pub fn union(&self, other: &Self) -> Self {
        match (&self.0, &other.0) {
            (Repr::All, _) | (_, Repr::All) => Self::all(),
            (Repr::Ranges(a), Repr::Ranges(b)) => Self(Repr::Ranges(a.union(b))),
        }
    }

    /// The tags in both sets (`*` is the identity).
    pub fn intersection(&self, other: &Self) -> Self {
        match (&self.0, &other.0) {
            (Repr::All, _) => other.clone(),
            (_, Repr::All) => self.clone(),
            (Repr::Ranges(a), Repr::Ranges(b)) => Self(Repr::Ranges(a.intersection(b))),
        }
    }

    /// Number of items the tag list is written with (`1`, for `*`).
    pub(crate) fn written_items(&self) -> usize {
        match &self.0 {
            Repr::All => 1,
            Repr::Ranges(r) => r.0.len(),
        }
    }

    pub(crate) fn explicit(&self) -> Option<&Ranges> {
        match &self.0 {
            Repr::All => None,
            Repr::Ranges(r) => Some(r),
        }
    }

    pub(crate) fn from_explicit(r: Ranges) -> Self {
        Self(Repr::Ranges(r))
    }
}

impl From<Ranges> for TagSet {
    fn from(r: Ranges) -> Self {
        Self::from_explicit(r)
    }
}

impl FromIterator<u64> for TagSet {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Self {
        Self(Repr::Ranges(Ranges::normalize(
            iter.into_iter().map(|t| (t, t)).collect(),
        )))
    }
}

/// The canonical tag list: `*`, or ranges of three or more tags as `first-last`, shorter runs
/// as single tags, comma-separated (`1-3,5,7,8`). The empty set displays as nothing, which is
/// not a valid tag list.
impl fmt::Display for TagSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = match &self.0 {
            Repr::All => return f.write_str("*"),
            Repr::Ranges(r) => r,
        };
        let mut sep = "";
        for &(a, b) in &r.0 {
            match b - a {
                0 => write!(f, "{sep}{a}")?,
                1 => write!(f, "{sep}{a},{b}")?,
                _ => write!(f, "{sep}{a}-{b}")?,
            }
            sep = ",";
        }
        Ok(())
    }
}

/// Why a tag list does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TagListError {
    /// Nothing where a tag list belongs.
    #[error("empty tag list")]
    Empty,
    /// Something that is not `DIGITS` or `DIGITS-DIGITS`.
    #[error("{found:?} is not a tag or a tag range")]
    NotATag {
        /// The item.
        found: String,
    },
    /// A tag over 18446744073709551615.
    #[error("tag {found} is too large")]
    TooLarge {
        /// The digits.
        found: String,
    },
    /// `b-a` with `b > a`.
    #[error("tag range {first}-{last} runs backwards")]
    Backwards {
        /// The first tag.
        first: u64,
        /// The last tag.
        last: u64,
    },
    /// More items than the limit.
    #[error("more than {max} tags in one tag list")]
    TooMany {
        /// The limit.
        max: usize,
    },
}

impl TagSet {
    /// Parses a tag list, RFC 2654 §4.3: `taglist = tag *("," tag) / "*"`,
    /// `tag = 1*DIGIT ["-" 1*DIGIT]`. No spaces are allowed. At most `max_items` tags and
    /// ranges (a limit on the work, not on the tags a range covers).
    ///
    /// # Errors
    /// A [`TagListError`] naming the offending item.
    pub fn parse_list(s: &str, max_items: usize) -> Result<Self, TagListError> {
        if s == "*" {
            return Ok(Self::all());
        }
        if s.is_empty() {
            return Err(TagListError::Empty);
        }
        let mut v = Vec::new();
        for item in s.split(',') {
            if v.len() >= max_items {
                return Err(TagListError::TooMany { max: max_items });
            }
            let (a, b) = match item.split_once('-') {
                Some((a, b)) => (tag(a, item)?, tag(b, item)?),
                None => {
                    let t = tag(item, item)?;
                    (t, t)
                }
            };
            if a > b {
                return Err(TagListError::Backwards { first: a, last: b });
            }
            v.push((a, b));
        }
        Ok(Self(Repr::Ranges(Ranges::normalize(v))))
    }
}

fn tag(digits: &str, item: &str) -> Result<u64, TagListError> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TagListError::NotATag {
            found: item.chars().take(40).collect(),
        });
    }
    digits.parse().map_err(|_| TagListError::TooLarge {
        found: digits.chars().take(40).collect(),
    })
}

/// Parses with no limit on the number of items; see [`TagSet::parse_list`].
impl FromStr for TagSet {
    type Err = TagListError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_list(s, usize::MAX)
    }
}

pub(crate) fn saturate(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// A finite tag set: sorted, disjoint, non-adjacent inclusive ranges.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub(crate) struct Ranges(pub(crate) Vec<(u64, u64)>);

impl Ranges {
    /// Sorts and merges overlapping or adjacent ranges (each must have `first <= last`).
    pub(crate) fn normalize(mut v: Vec<(u64, u64)>) -> Self {
        v.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (a, b) in v {
            match out.last_mut() {
                Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        Self(out)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn count(&self) -> u128 {
        self.0
            .iter()
            .map(|&(a, b)| u128::from(b - a) + 1)
            .sum::<u128>()
    }

    pub(crate) fn last(&self) -> Option<u64> {
        self.0.last().map(|r| r.1)
    }

    pub(crate) fn contains(&self, t: u64) -> bool {
        self.0
            .binary_search_by(|&(a, b)| {
                if b < t {
                    Ordering::Less
                } else if a > t {
                    Ordering::Greater
                } else {
                    Ordering::Equal
                }
            })
            .is_ok()
    }

    /// Index of the first range whose end is at least `t`.
    fn first_ending_at_or_after(&self, t: u64) -> usize {
        self.0.partition_point(|&(_, b)| b < t)
    }

    pub(crate) fn union(&self, other: &Self) -> Self {
        if other.is_empty() {
            return self.clone();
        }
        if self.is_empty() {
            return other.clone();
        }
        let mut v = Vec::with_capacity(self.0.len() + other.0.len());
        v.extend_from_slice(&self.0);
        v.extend_from_slice(&other.0);
        Self::normalize(v)
    }

    pub(crate) fn intersection(&self, other: &Self) -> Self {
        let (small, big) = if self.0.len() <= other.0.len() {
            (self, other)
        } else {
            (other, self)
        };
        let mut out = Vec::new();
        // Walk the smaller set, binary-searching into the bigger one: cheap when one side is a
        // handful of tags and the other a fragmented set of millions.
        for &(a, b) in &small.0 {
            let mut i = big.first_ending_at_or_after(a);
            while let Some(&(c, d)) = big.0.get(i) {
                if c > b {
                    break;
                }
                out.push((a.max(c), b.min(d)));
                i += 1;
            }
        }
        Self(out)
    }

    pub(crate) fn intersects(&self, other: &Self) -> bool {
        let (small, big) = if self.0.len() <= other.0.len() {
            (self, other)
        } else {
            (other, self)
        };
        small.0.iter().any(|&(a, b)| {
            big.0
                .get(big.first_ending_at_or_after(a))
                .is_some_and(|&(c, _)| c <= b)
        })
    }

    pub(crate) fn difference(&self, other: &Self) -> Self {
        if other.is_empty() || self.is_empty() {
            return self.clone();
        }
        let mut out = Vec::with_capacity(self.0.len());
        for &(a, b) in &self.0 {
            let mut start = a;
            let mut i = other.first_ending_at_or_after(a);
            let mut done = false;
            while let Some(&(c, d)) = other.0.get(i) {
                if c > b {
                    break;
                }
                if c > start {
                    out.push((start, c - 1));
                }
                if d >= b {
                    done = true;
                    break;
                }
                start = d + 1;
                i += 1;
            }
            if !done {
                out.push((start, b));
            }
        }
        Self(out)
    }

    pub(crate) fn is_superset(&self, other: &Self) -> bool {
        other.difference(self).is_empty()
    }

    /// Every tag, in order. Callers bound how many they take.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().flat_map(|&(a, b)| a..=b)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    use super::*;

    fn set(s: &str) -> TagSet {
        s.parse().unwrap()
    }

    #[test]
    fn parses_the_rfc_forms() {
        assert_eq!(set("3,4,5,6,7,8,9,10"), set("3-10"));
        assert_eq!(set("3-10").to_string(), "3-10");
        assert_eq!(set("1,3,7").to_string(), "1,3,7");
        assert_eq!(set("7,1,3,2").to_string(), "1-3,7");
        assert_eq!(set("4,5").to_string(), "4,5");
        assert_eq!(set("1-2").ranges(), &[(1, 2)]);
        assert!(set("*").is_all());
        assert_eq!(set("*").to_string(), "*");
        assert_eq!(set("0").len(), Some(1));
        assert_eq!(set("1-1000000000").len(), Some(1_000_000_000));
        assert_eq!(
            set("0-18446744073709551615").len(),
            Some(u64::MAX),
            "saturates"
        );
        assert!(set("2-4,9").contains(3));
        assert!(!set("2-4,9").contains(5));
    }

    #[test]
    fn refuses_what_the_grammar_does_not_allow() {
        assert_eq!(TagSet::parse_list("", 9), Err(TagListError::Empty));
        for bad in [
            "1,", ",1", "1 ,2", "a", "1-", "-1", "1-2-3", "*,1", "1,*", " 1", "+1",
        ] {
            assert!(
                matches!(
                    TagSet::parse_list(bad, 9),
                    Err(TagListError::NotATag { .. })
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            TagSet::parse_list("5-3", 9),
            Err(TagListError::Backwards { first: 5, last: 3 })
        );
        assert!(matches!(
            TagSet::parse_list("18446744073709551616", 9),
            Err(TagListError::TooLarge { .. })
        ));
        assert_eq!(
            TagSet::parse_list("1,2,3", 2),
            Err(TagListError::TooMany { max: 2 })
        );
        assert!(TagSet::parse_list("1,2", 2).is_ok());
    }

    #[test]
    fn all_behaves_as_the_whole_directory() {
        let all = TagSet::all();
        assert_eq!(all.len(), None);
        assert!(all.contains(12345));
        assert_eq!(all.union(&set("1")), all);
        assert_eq!(all.intersection(&set("1-3")), set("1-3"));
        assert!(!all.is_empty());
        assert!(TagSet::empty().is_empty());
        assert_eq!(TagSet::from_ranges([(3, 1)]), None);
    }

    #[test]
    fn edges_of_the_tag_space() {
        let top = Ranges(vec![(u64::MAX - 1, u64::MAX)]);
        let low = Ranges(vec![(0, 0)]);
        assert_eq!(top.union(&low).0, vec![(0, 0), (u64::MAX - 1, u64::MAX)]);
        assert_eq!(
            Ranges::normalize(vec![(u64::MAX, u64::MAX), (0, u64::MAX - 1)]).0,
            vec![(0, u64::MAX)]
        );
        assert_eq!(
            Ranges(vec![(0, u64::MAX)]).difference(&top).0,
            vec![(0, u64::MAX - 2)]
        );
        assert_eq!(Ranges(vec![(0, u64::MAX)]).count(), 1 << 64);
    }

    fn naive(r: &Ranges) -> BTreeSet<u64> {
        r.iter().collect()
    }

    fn arb_ranges() -> impl Strategy<Value = Ranges> {
        prop::collection::vec((0u64..60, 0u64..6), 0..8)
            .prop_map(|v| Ranges::normalize(v.into_iter().map(|(a, l)| (a, a + l)).collect()))
    }

    proptest! {
        #[test]
        fn set_operations_match_a_naive_oracle(a in arb_ranges(), b in arb_ranges()) {
            let (na, nb) = (naive(&a), naive(&b));
            prop_assert_eq!(naive(&a.union(&b)), &na | &nb);
            prop_assert_eq!(naive(&a.intersection(&b)), &na & &nb);
            prop_assert_eq!(naive(&a.difference(&b)), &na - &nb);
            prop_assert_eq!(a.intersects(&b), !(&na & &nb).is_empty());
            prop_assert_eq!(a.is_superset(&b), nb.is_subset(&na));
            prop_assert_eq!(a.count(), na.len() as u128);
            for r in [a.union(&b), a.intersection(&b), a.difference(&b)] {
                prop_assert_eq!(&Ranges::normalize(r.0.clone()), &r, "normalized");
            }
        }

        #[test]
        fn display_parses_back(a in arb_ranges()) {
            prop_assume!(!a.is_empty());
            let s = TagSet::from_explicit(a);
            prop_assert_eq!(s.to_string().parse::<TagSet>().unwrap(), s);
        }
    }
}
