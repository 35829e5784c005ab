//! The seeded hasher of value bytes, shared by the value index ([`crate::index`]), its
//! summaries and its memoized sums.

/// The seeded hasher of value bytes: `foldhash`, seeded randomly per table.
pub(crate) type RandomState = foldhash::fast::RandomState;
