//! [`SummaryConfig`]: which segments get summaries, of which substrings, within what bounds,
//! and how many bytes the substring cache may hold. The daemon reads it from its `[index]`
//! section.

/// Default for [`SummaryConfig::narrow_min_values`]: a needle held by fewer values is
/// summed on the spot in a few microseconds.
pub const DEFAULT_NARROW_MIN_VALUES: usize = 128;
/// Default for [`SummaryConfig::narrow_slots`]: a page of 10 referrals, the two more the
/// daemon asks for (its own dataset, and whether there are more), and four spare for
/// peers that went away since the summary was built.
pub const DEFAULT_NARROW_SLOTS: usize = 16;

/// How big segments summarize their substrings, and how much the substring cache keeps
/// (see [`crate::substring`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryConfig {
    /// Segments with fewer distinct values get no summaries: scanning them is cheap.
    pub min_values: usize,
    /// An n-gram is summarized when at least this many thousandths of the segment's values
    /// hold it (and at least [`SummaryConfig::min_matches`]).
    pub min_share_permille: usize,
    /// Fewest values an n-gram must be in to be summarized.
    pub min_matches: usize,
    /// Summaries stop growing once their bytes pass the segment's record bytes divided by
    /// this (0: no bound).
    pub budget_divisor: usize,
    /// Most n-grams summarized in one segment.
    pub max_ngrams: usize,
    /// Each summary costs a pass over the values holding its n-gram: the values visited
    /// to build a segment's summaries are at most this many times its values, so that
    /// values crafted to hold many frequent n-grams cannot make a build take minutes.
    pub max_work_per_value: usize,
    /// Threads that compute summaries (1: the building thread alone).
    pub threads: usize,
    /// Build summaries on a thread of their own after the segment is in use, so that
    /// imports are not held up by them; queries scan until they are ready.
    pub background: bool,
    /// Bytes of memoized substring sums the table may hold: the substring cache (0: none
    /// kept; see [`crate::substring`]).
    pub memo_bytes: usize,
    /// A substring term whose index candidates in a segment of at least
    /// [`SummaryConfig::min_values`] values are at least this many has its sums memoized.
    pub memo_min_candidates: usize,
    /// Every 4- to 6-byte n-gram held by at least this many values of a segment of
    /// [`SummaryConfig::min_values`] or more gets a narrow summary of its best slots
    /// under each attribute it has this many postings under (see [`crate::substring`]; 0:
    /// none).
    pub narrow_min_values: usize,
    /// Slots a narrow summary keeps per attribute: queries asking for a page of up to
    /// about this many referrals use them.
    pub narrow_slots: usize,
    /// Narrow summaries stop growing once their bytes pass the segment's record bytes
    /// divided by this (0: no bound).
    pub narrow_budget_divisor: usize,
}

impl SummaryConfig {
    /// Summaries for every n-gram in two values or more, built before a segment is used:
    /// for tests that compare answers with and without them.
    #[cfg(test)]
    pub(crate) fn everything() -> Self {
        Self {
            min_values: 1,
            min_share_permille: 0,
            min_matches: 2,
            budget_divisor: 0,
            max_ngrams: usize::MAX,
            max_work_per_value: usize::MAX,
            threads: 2,
            background: false,
            memo_bytes: 0,
            memo_min_candidates: 1,
            narrow_min_values: 0,
            narrow_slots: 0,
            narrow_budget_divisor: 0,
        }
    }
}

impl Default for SummaryConfig {
    fn default() -> Self {
        Self {
            min_values: 100_000,
            min_share_permille: 10,
            min_matches: 256,
            budget_divisor: 5,
            max_ngrams: 4096,
            max_work_per_value: 48,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            background: true,
            memo_bytes: 128 << 20,
            memo_min_candidates: 1,
            narrow_min_values: DEFAULT_NARROW_MIN_VALUES,
            narrow_slots: DEFAULT_NARROW_SLOTS,
            narrow_budget_divisor: 2,
        }
    }
}
