//! CIP-HINT index objects, and the routing table that answers queries with referrals from
//! them.
//!
//! Nothing here does I/O or spawns tasks; the daemon feeds it bytes and hints.
//!
//! # Map
//!
//! The modules in layers, bottom up. A module imports only from its own layer and the
//! layers below it, and no files import each other in a circle (`cipd/tests/layers.rs`
//! checks both).
//!
//! **sys**: facilities that know nothing of CIP.
//! * `hasher`: the seeded hasher of value bytes, so that a peer cannot choose values that
//!   collide in the index's tables.
//! * `pages`: big read-only buffers on huge pages, since the index's records and tables are
//!   read at random; a build's big passing buffers, given back the moment they are dropped.
//! * `threads`: work on scoped threads that falls back to the caller's thread, so that a
//!   table write never fails for want of a thread.
//!
//! **model**: CIP-HINTs, queries and referrals as plain values.
//! * [`weightlist`]: the `Weightlist-[Template:Attribute]` value codec, the bulk of a hint.
//! * [`hint`]: the CIP-HINT (RFC 2655 Appendix B): its model, tolerant parser and canonical
//!   writer.
//! * [`query`]: the routing query language (`Template:Attribute=value`, `~`, `&`).
//! * [`thesaurus`]: attribute equivalences applied at query time (RFC 2655 §4).
//! * `peer`: what the node knows of a peer's hint besides its payload ([`table::PeerMeta`]).
//! * [`rank`]: referrals and their order (RFC 2651 §4), and the options a query is ranked
//!   with.
//!
//! **index**: `index`, the value index the table is made of: immutable segments of
//! case-folded values with their postings (peer, attribute, count), an exact-match table, a
//! 4-gram substring index, and the per-peer substring sums a segment keeps (summaries and
//! the substring cache). Segments are built per import or in bulk and merged, never
//! changed.
//!
//! **substring**: [`substring`] computes those sums from a segment's values (broad and
//! narrow summaries, and a costly needle's sums for the cache), so that a substring query
//! need not read every matching value; [`substring::SummaryConfig`] bounds them.
//!
//! **table**: [`table`], the routing table: peers' hints imported into segments behind a
//! snapshot that readers load without locks, queries evaluated and ranked, import limits
//! and loop prevention; [`answer`] (re-exported from it): an answer's referrals, borrowed
//! from its snapshot.
//!
//! **make**: the ways the node makes a CIP-HINT.
//! * [`builder`]: from SOIF collections: the hint of the local data.
//! * [`aggregate`]: from the local hint and the peers' in the table (RFC 2651 §3.2.3): the
//!   hint the node hands its own pollers.
//! * [`delta`]: from another hint and the change between them (`CIP-HINT-DELTA`), in
//!   cipd's aggregation order, so that a change travels at its own size; its
//!   [`delta::journal`] keeps the recent changesets for pollers a few answers behind.
//!
//! `summary` is the old name of [`substring`], which the daemon's configuration uses.

// Outside tests, a failure is an error or a justified `expect`: never a bare unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod hasher;
mod pages;
mod threads;

pub mod delta;
pub mod hint;
mod peer;
pub mod query;
pub mod rank;
pub mod thesaurus;
pub mod weightlist;

mod index;

pub mod substring;
/// The path the daemon's configuration names [`substring::SummaryConfig`] by.
pub use substring as summary;

pub mod table;
pub use table::answer;

pub mod aggregate;
pub mod builder;
