//! CIP-HINT index objects and the routing table built from them.
//!
//! * [`hint`]: the CIP-HINT model (RFC 2655 Appendix B), its tolerant parser and canonical
//!   writer.
//! * [`builder`]: derives a hint from SOIF collections.
//!
//! Nothing here does I/O or spawns tasks; the daemon feeds it bytes and hints.

pub mod builder;
pub mod hint;
pub mod weightlist;

pub mod aggregate;
pub use table::answer;
mod hasher;
mod index;
mod pages;
mod peer;
pub mod query;
pub mod rank;
pub mod substring;
/// The path the daemon's configuration names [`substring::SummaryConfig`] by.
pub use substring as summary;
pub mod table;
pub mod thesaurus;
mod threads;
