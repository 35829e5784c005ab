//! Referrals and their order (RFC 2651 §4: one referral per dataset, with DSI, base-uri
//! and, when known, the DSI-description).
//!
//! Order, total and stable:
//! 1. definite referrals (a reported value matched every term) before possible ones;
//! 2. definite: by matching object count, descending. For one term the count is the sum of
//!    the counts of every matching value; for `a & b` it is the minimum of the terms' counts
//!    (an upper bound on the objects matching both, and the estimate we rank by);
//!    then by `count / Total-Object-Count`, descending (a peer with no total ranks as ratio
//!    0); then by DSI, ascending;
//! 3. possible: by the declared threshold, descending (more may hide below a higher one);
//!    then by Total-Object-Count, descending; then by DSI, ascending.

use std::cmp::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use cip_proto::Dsi;

use crate::hint::AttrSpec;
use crate::peer::PeerMeta;
use crate::thesaurus::Thesaurus;

/// Default for [`QueryOptions::limit`].
pub const DEFAULT_LIMIT: usize = 100;
/// Default for [`QueryOptions::max_values`].
pub const DEFAULT_MAX_VALUES: usize = 5;

/// How [`crate::table::RoutingTable::query`] answers.
#[derive(Debug, Clone)]
pub struct QueryOptions {
    /// Also return possible referrals (peers whose threshold may hide a match).
    pub include_possible: bool,
    /// Most referrals returned.
    pub limit: usize,
    /// Most matched values listed per referral (and per term in explanations).
    pub max_values: usize,
    /// Attribute equivalences to apply.
    pub thesaurus: Option<Arc<Thesaurus>>,
    /// When set, peers whose hint expired at or before this time are left out even before
    /// [`crate::table::RoutingTable::expire`] removes them.
    pub now: Option<SystemTime>,
}

impl Default for QueryOptions {
    fn default() -> Self {
        Self {
            include_possible: false,
            limit: DEFAULT_LIMIT,
            max_values: DEFAULT_MAX_VALUES,
            thesaurus: None,
            now: None,
        }
    }
}

/// Where to send the query next: one dataset that may hold matches.
///
/// The peer's data (DSI, base-URIs, description) is shared with the routing table rather
/// than copied, and the values of all referrals of one answer share one buffer, so that a
/// referral costs a few reference-count increments instead of several allocations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referral {
    /// The dataset's DSI (with the peer's other data, see [`Referral::base_uris`]).
    pub dsi: PeerDsi,
    /// Matching object count (see the module doc); 0 for a possible referral.
    pub count: u64,
    /// The peer's Total-Object-Count.
    pub total: u64,
    /// True when reported values matched every term; false for a possible referral.
    pub definite: bool,
    /// For a possible referral: the smallest threshold among the terms no reported value
    /// matched; the peer may hold up to `threshold - 1` objects per unreported value.
    pub threshold: Option<u64>,
    /// Matched values with their counts, highest count first (ties in ASCII-case-insensitive
    /// value order), at most [`QueryOptions::max_values`].
    pub values: ValueList,
    /// How many distinct values matched in all.
    pub matched_values: usize,
}

impl Referral {
    /// Base-URIs to refer to.
    pub fn base_uris(&self) -> &[String] {
        &self.dsi.meta().base_uris
    }

    /// DSI-description, when the peer gave one.
    pub fn dsi_description(&self) -> Option<&str> {
        self.dsi.meta().dsi_description.as_deref()
    }
}

/// A referral's dataset: its DSI, with the rest of what the table knows about the peer,
/// shared with the table. Dereferences to, compares with and prints as the [`Dsi`].
#[derive(Debug, Clone)]
pub struct PeerDsi(Arc<PeerMeta>);

impl PeerDsi {
    /// Wraps a peer's metadata.
    pub fn new(meta: Arc<PeerMeta>) -> Self {
        Self(meta)
    }

    /// The DSI.
    pub fn as_dsi(&self) -> &Dsi {
        &self.0.dsi
    }

    /// Everything the table knows about the peer.
    pub fn meta(&self) -> &PeerMeta {
        &self.0
    }
}

impl std::ops::Deref for PeerDsi {
    type Target = Dsi;
    fn deref(&self) -> &Dsi {
        &self.0.dsi
    }
}

impl PartialEq for PeerDsi {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.dsi == other.0.dsi
                && self.0.base_uris == other.0.base_uris
                && self.0.dsi_description == other.0.dsi_description)
    }
}

impl Eq for PeerDsi {}

impl PartialEq<Dsi> for PeerDsi {
    fn eq(&self, other: &Dsi) -> bool {
        self.0.dsi == *other
    }
}

impl std::fmt::Display for PeerDsi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.dsi.fmt(f)
    }
}

/// The values of all referrals of one answer: their bytes, concatenated, and per value
/// `(start, end, count)`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ValueBuf {
    bytes: Vec<u8>,
    items: Vec<(u32, u32, u64)>,
}

impl ValueBuf {
    /// An empty buffer with room for `values` values of `bytes` bytes in all.
    pub fn with_capacity(values: usize, bytes: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(bytes),
            items: Vec::with_capacity(values),
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Appends a value; `write` appends its bytes to the vector it is given.
    ///
    /// # Errors
    /// [`ValueBufFull`] when the bytes would pass 4 GiB (the buffer is then unchanged).
    pub fn push_with(
        &mut self,
        count: u64,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), ValueBufFull> {
        let start = self.bytes.len();
        write(&mut self.bytes);
        match (u32::try_from(start), u32::try_from(self.bytes.len())) {
            (Ok(s), Ok(e)) => {
                self.items.push((s, e, count));
                Ok(())
            }
            _ => {
                self.bytes.truncate(start);
                Err(ValueBufFull)
            }
        }
    }

    /// Appends the value the last one holds again (with its own count); false when empty.
    pub fn repeat_last(&mut self, count: u64) -> bool {
        match self.items.last() {
            Some(&(s, e, _)) => {
                self.items.push((s, e, count));
                true
            }
            None => false,
        }
    }

    pub(crate) fn get(&self, i: usize) -> Option<(&[u8], u64)> {
        let &(s, e, count) = self.items.get(i)?;
        Some((self.bytes.get(s as usize..e as usize)?, count))
    }
}

/// A [`ValueBuf`] is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("value buffer over 4 GiB")]
pub struct ValueBufFull;

/// A referral's matched values `(value, count)`, best first: a range of a [`ValueBuf`]
/// that all referrals of one answer share, so that a referral's values cost one
/// reference-count increment; or, for a single short value (the usual answer to an exact
/// query), the value itself, which costs no allocation and no shared count.
#[derive(Clone, Default)]
pub struct ValueList {
    repr: Repr,
}

/// Longest value [`ValueList::single`] keeps inline.
const INLINE_MAX: usize = 38;

#[derive(Clone, Default)]
enum Repr {
    #[default]
    Empty,
    Shared {
        buf: Arc<ValueBuf>,
        start: usize,
        end: usize,
    },
    One {
        len: u8,
        bytes: [u8; INLINE_MAX],
        count: u64,
    },
}

impl ValueList {
    /// Longest value [`ValueList::single`] stores without allocating.
    pub const INLINE_MAX: usize = INLINE_MAX;

    /// The values `buf[range]`; an out-of-range `range` is clamped.
    pub fn new(buf: Arc<ValueBuf>, range: std::ops::Range<usize>) -> Self {
        let end = range.end.min(buf.len());
        let start = range.start.min(end);
        Self {
            repr: Repr::Shared { buf, start, end },
        }
    }

    /// One value with its count (stored inline when at most
    /// [`ValueList::INLINE_MAX`] bytes long).
    pub fn single(value: &[u8], count: u64) -> Self {
        let mut bytes = [0u8; INLINE_MAX];
        match bytes.get_mut(..value.len()) {
            Some(b) => {
                b.copy_from_slice(value);
                Self {
                    repr: Repr::One {
                        // value.len() <= INLINE_MAX < 256.
                        len: value.len() as u8,
                        bytes,
                        count,
                    },
                }
            }
            None => Self::from(vec![(Bytes::copy_from_slice(value), count)]),
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Empty => 0,
            Repr::Shared { start, end, .. } => end - start,
            Repr::One { .. } => 1,
        }
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i` with its count.
    pub fn get(&self, i: usize) -> Option<(&[u8], u64)> {
        if i >= self.len() {
            return None;
        }
        match &self.repr {
            Repr::Empty => None,
            Repr::Shared { buf, start, .. } => buf.get(start + i),
            Repr::One { len, bytes, count } => Some((bytes.get(..usize::from(*len))?, *count)),
        }
    }

    /// The values with their counts, best first.
    pub fn iter(&self) -> ValueIter<'_> {
        ValueIter { list: self, at: 0 }
    }

    /// The values as owned pairs.
    pub fn to_vec(&self) -> Vec<(Bytes, u64)> {
        self.iter()
            .map(|(v, c)| (Bytes::copy_from_slice(v), c))
            .collect()
    }
}

impl From<Vec<(Bytes, u64)>> for ValueList {
    fn from(v: Vec<(Bytes, u64)>) -> Self {
        let mut buf = ValueBuf::with_capacity(v.len(), v.iter().map(|e| e.0.len()).sum());
        for (value, count) in &v {
            if buf
                .push_with(*count, |out| out.extend_from_slice(value))
                .is_err()
            {
                break;
            }
        }
        let n = buf.len();
        Self::new(Arc::new(buf), 0..n)
    }
}

impl std::fmt::Debug for ValueList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|(v, c)| (String::from_utf8_lossy(v), c)))
            .finish()
    }
}

impl PartialEq for ValueList {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for ValueList {}

impl PartialEq<Vec<(Bytes, u64)>> for ValueList {
    fn eq(&self, other: &Vec<(Bytes, u64)>) -> bool {
        self.iter().eq(other.iter().map(|(v, c)| (&v[..], *c)))
    }
}

impl<'a> IntoIterator for &'a ValueList {
    type Item = (&'a [u8], u64);
    type IntoIter = ValueIter<'a>;
    fn into_iter(self) -> ValueIter<'a> {
        self.iter()
    }
}

impl IntoIterator for ValueList {
    type Item = (Bytes, u64);
    type IntoIter = std::vec::IntoIter<(Bytes, u64)>;
    fn into_iter(self) -> Self::IntoIter {
        self.to_vec().into_iter()
    }
}

/// Iterator over a [`ValueList`]: `(value, count)`.
#[derive(Debug, Clone)]
pub struct ValueIter<'a> {
    list: &'a ValueList,
    at: usize,
}

impl<'a> Iterator for ValueIter<'a> {
    type Item = (&'a [u8], u64);
    fn next(&mut self) -> Option<(&'a [u8], u64)> {
        let item = self.list.get(self.at)?;
        self.at += 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.list.len().saturating_sub(self.at);
        (n, Some(n))
    }
}

impl ExactSizeIterator for ValueIter<'_> {}

/// Whether a term matched a peer's reported values or only may match below a threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermStatus {
    /// A reported value matched.
    Definite,
    /// No reported value matched; the peer declared this threshold for the attribute.
    Possible {
        /// The declared threshold.
        threshold: u64,
    },
}

/// One matched value in an [`Explanation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedValue {
    /// The attribute it was reported under.
    pub attribute: AttrSpec,
    /// The value.
    pub value: Bytes,
    /// Its object count in the peer's hint.
    pub count: u64,
}

/// How one term matched one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermExplanation {
    /// The term, in canonical query syntax.
    pub term: String,
    /// Definite or possible.
    pub status: TermStatus,
    /// Sum of the matched values' counts.
    pub count: u64,
    /// Matched values, highest count first, at most [`QueryOptions::max_values`].
    pub matches: Vec<MatchedValue>,
    /// How many `(attribute, value)` pairs matched in all.
    pub matched_values: usize,
}

/// Why a referral was made and ranked where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The referral.
    pub referral: Referral,
    /// 1-based position in the ranking.
    pub position: usize,
    /// The configured peer the hint came from, when known.
    pub via: Option<String>,
    /// The route the hint came by ([`crate::table::PeerMeta::path`]): empty when it is
    /// the peer's own.
    pub path: Vec<cip_proto::Dsi>,
    /// When the hint was received.
    pub received: SystemTime,
    /// One entry per query term, in query order.
    pub terms: Vec<TermExplanation>,
    /// How the rank keys were computed, in words.
    pub rank: String,
}

/// The keys a referral is ordered by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RankKey<'a> {
    pub definite: bool,
    pub count: u64,
    pub total: u64,
    pub threshold: u64,
    pub dsi: &'a Dsi,
}

/// The referral order of the module doc.
pub(crate) fn rank_order(a: &RankKey<'_>, b: &RankKey<'_>) -> Ordering {
    b.definite.cmp(&a.definite).then_with(|| {
        if a.definite {
            b.count
                .cmp(&a.count)
                .then_with(|| ratio_cmp(b.count, b.total, a.count, a.total))
                .then_with(|| a.dsi.as_str().cmp(b.dsi.as_str()))
        } else {
            b.threshold
                .cmp(&a.threshold)
                .then_with(|| b.total.cmp(&a.total))
                .then_with(|| a.dsi.as_str().cmp(b.dsi.as_str()))
        }
    })
}

/// Compares `c1 / t1` with `c2 / t2` exactly; a zero total counts as ratio 0.
pub(crate) fn ratio_cmp(c1: u64, t1: u64, c2: u64, t2: u64) -> Ordering {
    match (t1, t2) {
        (0, 0) => Ordering::Equal,
        (0, _) => 0u128.cmp(&u128::from(c2.min(1))),
        (_, 0) => u128::from(c1.min(1)).cmp(&0),
        _ => (u128::from(c1) * u128::from(t2)).cmp(&(u128::from(c2) * u128::from(t1))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_values_inline_or_shared() {
        let short = ValueList::single(b"Garcia", 3);
        assert_eq!(short.len(), 1);
        assert_eq!(short.get(0), Some((&b"Garcia"[..], 3)));
        assert_eq!(short.get(1), None);
        let long_value = vec![b'x'; ValueList::INLINE_MAX + 1];
        let long = ValueList::single(&long_value, 7);
        assert_eq!(long.to_vec(), vec![(Bytes::from(long_value), 7)]);
        let empty = ValueList::single(b"", 1);
        assert_eq!(empty.get(0), Some((&b""[..], 1)));
        assert!(ValueList::default().is_empty());
        assert_eq!(
            short,
            ValueList::from(vec![(Bytes::from_static(b"Garcia"), 3)])
        );
    }

    #[test]
    fn order_is_total() {
        let d = |s: &str| Dsi::new(s).unwrap();
        let (a, b, c, e) = (d("1.1"), d("1.2"), d("1.3"), d("1.4"));
        let key = |dsi, definite, count, total, threshold| RankKey {
            definite,
            count,
            total,
            threshold,
            dsi,
        };
        let mut keys = [
            key(&e, false, 0, 10, 5),
            key(&c, true, 10, 1000, 0),
            key(&b, true, 10, 100, 0),
            key(&a, true, 10, 100, 0),
            key(&a, true, 20, 0, 0),
            key(&b, false, 0, 10, 7),
        ];
        keys.sort_by(rank_order);
        let got: Vec<(&str, u64, u64)> = keys
            .iter()
            .map(|k| (k.dsi.as_str(), k.count, k.total))
            .collect();
        assert_eq!(
            got,
            vec![
                ("1.1", 20, 0),
                ("1.1", 10, 100),
                ("1.2", 10, 100),
                ("1.3", 10, 1000),
                ("1.2", 0, 10),
                ("1.4", 0, 10)
            ]
        );
        assert_eq!(ratio_cmp(1, 3, 2, 6), Ordering::Equal);
        assert_eq!(ratio_cmp(0, 0, 1, 5), Ordering::Less);
    }
}
