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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referral {
    /// The dataset's DSI.
    pub dsi: Dsi,
    /// Base-URIs to refer to.
    pub base_uris: Vec<String>,
    /// DSI-description, when the peer gave one.
    pub dsi_description: Option<String>,
    /// Matching object count (see the module doc); 0 for a possible referral.
    pub count: u64,
    /// The peer's Total-Object-Count.
    pub total: u64,
    /// True when reported values matched every term; false for a possible referral.
    pub definite: bool,
    /// For a possible referral: the smallest threshold among the terms no reported value
    /// matched; the peer may hold up to `threshold - 1` objects per unreported value.
    pub threshold: Option<u64>,
    /// Matched values with their counts, highest count first, at most
    /// [`QueryOptions::max_values`].
    pub values: Vec<(Bytes, u64)>,
    /// How many distinct values matched in all.
    pub matched_values: usize,
}

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
fn ratio_cmp(c1: u64, t1: u64, c2: u64, t2: u64) -> Ordering {
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
