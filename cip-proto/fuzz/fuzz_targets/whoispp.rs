//! Fuzzes the Whois++ query line parser (`cip_proto::whoispp::parse`), which faces every
//! client of a `[listen] whoispp` port.
//!
//! The input, when UTF-8, is a query line. Checks: no panic; an error's column points
//! inside the line (or just past it); a parsed query has at most the allowed alternatives,
//! no empty values, and `maxhits` within the cap.

#![no_main]

use cip_proto::whoispp::{MAX_DISJUNCTS, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    match parse(line, 50) {
        Ok(q) => {
            assert!(q.disjuncts.len() <= MAX_DISJUNCTS);
            assert!(q.globals.max_hits >= 1 && q.globals.max_hits <= 50);
            for c in &q.disjuncts {
                for t in c.terms.iter().chain(&c.excluded) {
                    assert!(!t.value.is_empty(), "empty value in {line:?}");
                }
            }
        }
        Err(e) => {
            assert!(
                e.column >= 1 && e.column <= line.len() + 2,
                "column {} of {} bytes: {e}",
                e.column,
                line.len()
            );
        }
    }
});
