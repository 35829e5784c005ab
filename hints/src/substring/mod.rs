//! Substring sums: per peer, the summed counts of the values that hold a needle, computed
//! ahead so that a substring query need not read every matching value's postings.
//!
//! A substring term is answered by adding up, per peer, the counts of every value holding
//! its needle. A segment of the value index finds those values; for a needle that many
//! values hold, adding them up is the cost, bounded only by the size of the answer. So a
//! segment may hold the sums already, in one of three forms:
//!
//! * broad summaries (`broad.rs`): every peer's sum for each n-gram that a large share of a
//!   big segment's values hold, mined once the segment is built;
//! * narrow summaries (`narrow.rs`): for every other 4- to 6-byte n-gram that enough values
//!   hold, only the best peers, which is all a page of referrals reads;
//! * the substring cache (`memo` in the configuration's and the figures' names): the sums
//!   of a needle that a query had to compute, kept for its next asking.
//!
//! A query under one attribute reads a summary when one holds its page, else the cache,
//! else finds the values and sums them, keeping the sums in the cache when that was costly
//! (the routing table's query evaluation). Which sums are kept changes only speed: answers
//! are the same either way. [`SummaryConfig`] bounds all three.
//!
//! A segment holds its sums, so how they are kept is the value index's part (the private
//! `index` module: `sums.rs`, and `cache.rs` for the cache); this module computes them from
//! a segment's values, and sits above the index. Its files:
//!
//! * `config.rs`: [`SummaryConfig`];
//! * `accumulate.rs`: summing the values that hold a needle per attribute and peer, which
//!   every form is computed with; a needle's sums computed and kept in the cache;
//! * `broad.rs`, `narrow.rs`: building the two kinds of summaries;
//! * `summarize.rs`: when a segment's summaries are built, and built again, broad ones
//!   first, then narrow ones.

mod accumulate;
mod broad;
mod config;
mod narrow;
mod summarize;

pub use crate::index::sums::SUMMARY_TOPS;
pub use config::{DEFAULT_NARROW_MIN_VALUES, DEFAULT_NARROW_SLOTS, SummaryConfig};
