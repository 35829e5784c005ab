//! A segment's summary build: the sums of its broad n-grams ([`super::broad`]), then the
//! best slots of its narrow ones ([`super::narrow`]), which read the former; built again
//! when enough of the segment's peers have gone that the narrow ones thin out.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::index::Segment;

use super::config::SummaryConfig;
use crate::index::sums::Summaries;

/// Narrow summaries are built again once the segment's live entries fell below this many
/// eighths of what they were at the build: each replaced or removed peer leaves a dead
/// slot among their kept ones, and pages that lose too many are summed again.
const REBUILD_BELOW_EIGHTHS: u64 = 7;

impl Segment {
    /// True when the segment is big enough for summaries under `cfg`, none are being
    /// built, and it has none, or narrow ones built when its live entries (`live`, asked
    /// only then) were more than [`REBUILD_BELOW_EIGHTHS`] eighths higher.
    pub(crate) fn wants_summaries(&self, cfg: &SummaryConfig, live: impl FnOnce() -> u64) -> bool {
        if self.len() < cfg.min_values.max(1) || self.summarizing.load(Ordering::Acquire) {
            return false;
        }
        match self.summaries.load().as_deref() {
            None => true,
            Some(s) => {
                s.narrow_cover > 0
                    && live().saturating_mul(8)
                        < s.live_entries.saturating_mul(REBUILD_BELOW_EIGHTHS)
            }
        }
    }

    /// Claims the next build of the summaries: false when one is claimed already. The
    /// claim ends with [`Segment::build_summaries`] or [`Segment::release_summaries`].
    pub(crate) fn claim_summaries(&self) -> bool {
        !self.summarizing.swap(true, Ordering::AcqRel)
    }

    /// Ends a claim without building.
    pub(crate) fn release_summaries(&self) {
        self.summarizing.store(false, Ordering::Release);
    }

    /// Builds the summaries of broad n-grams and narrow ones (`ties` holds each slot's tie
    /// position, `u32::MAX` when dead; empty, slot order: see [`super::narrow::build`])
    /// under a claim ([`Segment::claim_summaries`]), which it ends, panic or not. Queries
    /// use them once built, and drop the ones they replace once no query holds those.
    pub(crate) fn build_summaries(&self, cfg: &SummaryConfig, ties: &[u32]) {
        struct Release<'a>(&'a Segment);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.release_summaries();
            }
        }
        let _release = Release(self);
        let mut summaries = Summaries::build(self, cfg);
        super::narrow::add(&mut summaries, self, cfg, ties);
        summaries.live_entries = self
            .slots()
            .iter()
            .filter(|s| super::narrow::tie_of(ties, s.0) != u32::MAX)
            .map(|s| s.1)
            .sum();
        self.summaries.store(Some(Arc::new(summaries)));
    }

    /// Claims and builds the summaries ([`Segment::build_summaries`]) unless a build is
    /// claimed already.
    #[cfg(test)]
    pub(crate) fn summarize(&self, cfg: &SummaryConfig, ties: &[u32]) {
        if self.claim_summaries() {
            self.build_summaries(cfg, ties);
        }
    }
}
