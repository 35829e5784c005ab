//! The sample collection bundled with cipd: thirty DOCUMENT and FILE objects describing a
//! fictional library's technical reports, theses and software, so a node started without any
//! configuration has something to index and answer: `DOCUMENT:Author=Garcia` finds one report,
//! `Author~Garcia` nine objects.

/// The sample collection as SOIF (RFC 2655 §3).
pub const SAMPLE_SOIF: &[u8] = include_bytes!("sample.soif");

/// A query the sample answers, printed by the default node as a first thing to try.
pub const SAMPLE_QUERY: &str = "DOCUMENT:Author=Garcia";
