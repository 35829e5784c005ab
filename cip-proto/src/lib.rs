//! Wire formats of the Common Indexing Protocol family, with no I/O.
//!
//! * [`soif`]: Harvest's Summary Object Interchange Format (RFC 2655): an incremental,
//!   zero-copy parser, a canonical writer, attribute matching helpers and known templates.
//! * [`hinadi`]: Hina-Di 2.2 (Asahina Antenna metadata): reader, writer, mapping to SOIF.
//! * [`rdm`]: Resource Description Messages: headers, queries, views, server, schema and
//!   taxonomy descriptions, and their query languages.
//! * [`tagged`]: RFC 2654's tagged index object: parser, canonical writer, incremental
//!   updates, and conversions to per-template value counts and from records.
//! * [`whoispp`]: Whois++ query lines (RFC 1835), parsed into conjunctions and constraints.
//! * [`whoispp_answer`]: Whois++ answers as a server sends them: records, referrals, codes.
//! * [`http_date`]: HTTP dates in header fields (GMT in all three forms).
//! * [`dsi`]: dataset identifiers (RFC 2652 §2.1.2), validated on construction.
//!
//! The daemon (`cipd`) and the hint model (`hints`) build on these types; nothing here
//! spawns tasks, touches sockets or reads configuration.

// Outside tests, a failure is an error or a justified `expect`: never a bare unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod base64;
pub mod cip;
pub mod dsi;
pub mod hinadi;
pub mod http_date;
pub mod rdm;
pub mod soif;
pub mod tagged;
pub mod whoispp;
pub mod whoispp_answer;

pub use dsi::Dsi;
pub use soif::{Attribute, Identifier, SoifError, SoifObject};
