//! Immutable value-index segments: interned values, postings and a substring index.
//!
//! A [`Segment`] holds the weightlist entries of one or more peer imports (each import is a
//! *slot*). Its values are distinct under ASCII case folding, stored once each, sorted in
//! folded order; each keeps one representative spelling (the byte-wise smallest of the
//! spellings that fold to it), so that "Garcia" and "GARCIA" share an entry. For each
//! value, the postings `(slot, attribute, count)` say which import reported it under which
//! attribute and in how many objects.
//!
//! Each value is one *record* in a single buffer: a 12-byte header, the value
//! ASCII-lowercased (lookups compare that), a bitmap of the bytes uppercase in its
//! representative spelling (only when there are any; answers show the spelling), then its
//! postings grouped by attribute, 8 bytes each (slot, count; counts of `u32::MAX` or more
//! are kept apart). A lookup that found a value thus reads its postings from the same or
//! the next cache line.
//!
//! Lookups:
//! * exact: an open-addressing table keyed by a randomly seeded `foldhash` of the folded
//!   bytes (seeded so that a peer cannot choose colliding values offline). An entry holds
//!   the record's start and the hash's high 32 bits, so an exact lookup costs two dependent
//!   cache misses, table then record, and other values' records are nearly never read;
//! * substring: a 4-gram index over folded values: each 4-gram lists, delta-varint coded
//!   (a bitmap when dense), the ids of the values containing it, and each trigram the ids
//!   of the values ending with it. A search for four bytes or more intersects the lists
//!   of the needle's 4-grams, rarest first, for as long as a list is short next to the
//!   candidates left; a four-byte needle's list is the answer, longer needles' candidates
//!   are checked with `memchr::memmem`. A three-byte needle's values are the union of the
//!   lists of the 4-grams it starts and of the values it ends. (4-grams rather than
//!   trigrams: decoding trigram lists was half the cost of a first substring query; on
//!   the 1,000-peer bench table of 2.3 million values the 4-gram index takes 3 MB more,
//!   and such a query costs 350 us on average instead of 560 us.) Checking and reading the
//!   postings are one pipelined pass over the candidates' records (loaded a batch ahead,
//!   so that cache misses overlap). Needles shorter than three bytes scan all records;
//! * prefix: binary search over the sorted values.
//!
//! A segment is limited to 4 GiB of records (32-bit record starts); a bigger one is
//! refused with [`SegmentOverflow`].
//!
//! Segments never change once built; the routing table replaces them whole, or, for a
//! delta applied in place, with a version that hides some values (see [`Segment`]).
//!
//! The parts, one file each:
//! * [`segment`]: the [`Segment`], its record format, and reading values and postings;
//! * [`builder`]: the record writer every segment is built with, one import's segment, and
//!   the lookup structures a built segment gets;
//! * [`bulk`]: [`BulkBuilder`], one segment from many imports at once (a cold start);
//! * [`merge`]: merging segments, dropping the postings of peers gone;
//! * [`exact`]: the exact-match table and exact lookups;
//! * [`grams`]: the substring index, 4-gram lists;
//! * [`search`]: substring searches through it (or, while it is not built, by scanning);
//! * [`sums`]: the per-peer sums of substring needles a segment keeps, summaries and cached
//!   alike, and their lookup;
//! * [`cache`]: the substring cache (`memo` in the configuration's and the figures' names):
//!   one segment's cached sums, and the byte budget all segments' caches share.
//!
//! The last two are storage only: which sums a segment keeps, and computing them from its
//! values, is [`crate::substring`]'s part.

pub(crate) mod cache;
pub(crate) mod sums;

mod builder;
mod bulk;
mod exact;
mod grams;
mod merge;
mod search;
mod segment;

pub(crate) use builder::PatchBuilder;
pub(crate) use bulk::BulkBuilder;
pub(crate) use exact::hash_lower;
pub(crate) use segment::{Group, Segment, SegmentOverflow, TOUCH_BATCH, attr_mask, cmp_folded};
