//! A segment's summary build: the sums of its broad n-grams ([`crate::summary`]), then the
//! best slots of its narrow ones ([`crate::narrow`]), which read the former.

use std::sync::atomic::Ordering;

use crate::index::Segment;
use crate::summary::SummaryConfig;
use crate::sums::Summaries;

impl Segment {
    /// True when the segment is big enough for summaries under `cfg` and none were
    /// started.
    pub(crate) fn wants_summaries(&self, cfg: &SummaryConfig) -> bool {
        self.len() >= cfg.min_values.max(1) && !self.summarizing.load(Ordering::Acquire)
    }

    /// Builds the summaries of broad n-grams and narrow ones (`ties` holds each slot's tie
    /// position, `u32::MAX` when dead; empty, slot order: see [`crate::narrow::build`])
    /// unless another call did or does; queries use them once built.
    pub(crate) fn summarize(&self, cfg: &SummaryConfig, ties: &[u32]) {
        if self.summarizing.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut summaries = Summaries::build(self, cfg);
        crate::narrow::add(&mut summaries, self, cfg, ties);
        // Only this call gets here: the cell is empty.
        let _ = self.summaries.set(summaries);
    }
}
