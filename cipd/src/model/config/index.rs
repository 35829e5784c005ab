//! `[index]`: how the routing table summarizes substrings of big index segments.

use hints::summary::SummaryConfig;
use serde::Deserialize;

use super::validate::Validator;

/// `[index]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIndex {
    /// Precompute per-peer sums for broad substrings in big index segments.
    pub summaries: Option<bool>,
    /// Threads that build those sums.
    pub summary_threads: Option<usize>,
    /// The sums of a segment take at most its record bytes divided by this.
    pub summary_memory_divisor: Option<usize>,
    /// Most substrings summarized per segment.
    pub summary_max_ngrams: Option<usize>,
    /// Values visited to build a segment's sums, at most this many times its values.
    pub summary_work_per_value: Option<usize>,
    /// Bytes of per-peer sums kept for substring needles that were expensive to answer
    /// (0: none).
    pub substring_cache_bytes: Option<usize>,
    /// Precompute the best peers of every 4- to 6-byte substring held by enough values of
    /// a big index segment.
    pub narrow_summaries: Option<bool>,
    /// Fewest values a substring must be in to get those.
    pub narrow_summary_min_values: Option<usize>,
    /// Peers kept per substring and attribute.
    pub narrow_summary_peers: Option<usize>,
    /// They take at most the segment's record bytes divided by this.
    pub narrow_summary_memory_divisor: Option<usize>,
}

/// Most `[index] summary_threads`.
pub const MAX_SUMMARY_THREADS: usize = 64;

impl Validator<'_> {
    /// `page`: the referrals a page holds by default, which narrow summaries must hold.
    pub(super) fn index(&mut self, raw: RawIndex, page: usize) -> SummaryConfig {
        let default = SummaryConfig::default();
        let threads = self.positive(
            "index.summary_threads",
            raw.summary_threads,
            default.threads,
        );
        if threads > MAX_SUMMARY_THREADS {
            self.err(
                "index.summary_threads",
                format!("{threads} is more than {MAX_SUMMARY_THREADS}"),
            );
        }
        SummaryConfig {
            // Off: no segment is big enough.
            min_values: if raw.summaries.unwrap_or(true) {
                default.min_values
            } else {
                usize::MAX
            },
            threads: threads.min(MAX_SUMMARY_THREADS),
            budget_divisor: self.positive(
                "index.summary_memory_divisor",
                raw.summary_memory_divisor,
                default.budget_divisor,
            ),
            max_ngrams: self.positive(
                "index.summary_max_ngrams",
                raw.summary_max_ngrams,
                default.max_ngrams,
            ),
            max_work_per_value: self.positive(
                "index.summary_work_per_value",
                raw.summary_work_per_value,
                default.max_work_per_value,
            ),
            memo_bytes: raw.substring_cache_bytes.unwrap_or(default.memo_bytes),
            narrow_min_values: if raw.narrow_summaries.unwrap_or(true) {
                self.positive(
                    "index.narrow_summary_min_values",
                    raw.narrow_summary_min_values,
                    default.narrow_min_values,
                )
            } else {
                0
            },
            // A default page, the two more the table is asked for (this node's own
            // dataset, and whether there are more) and four for peers gone since the
            // summaries were built.
            narrow_slots: self.positive(
                "index.narrow_summary_peers",
                raw.narrow_summary_peers,
                page.saturating_add(6),
            ),
            narrow_budget_divisor: self.positive(
                "index.narrow_summary_memory_divisor",
                raw.narrow_summary_memory_divisor,
                default.narrow_budget_divisor,
            ),
            ..default
        }
    }
}
