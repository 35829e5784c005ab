//! Fuzzes the Whois++ answer parser (`cip_proto::whoispp_answer::parse_answer`), which reads
//! whatever a Whois++ server we query sends back.
//!
//! The input is an answer's bytes. Checks: no panic; an error points at the start of a line
//! of the input; a parsed answer holds at most `max_records` records and referrals, and every
//! record has a template.

#![no_main]

use cip_proto::whoispp_answer::{AnswerLimits, parse_answer};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Small limits, so that the limit checks are reached too.
    let limits = AnswerLimits {
        max_bytes: 1 << 16,
        max_records: 16,
        max_line: 1024,
    };
    match parse_answer(data, &limits) {
        Ok(a) => {
            assert!(a.records.len() <= limits.max_records);
            assert!(a.referrals.len() <= limits.max_records);
            for r in &a.records {
                assert!(!r.template.is_empty(), "record without a template: {r:?}");
            }
        }
        Err(e) => {
            let offset = e.offset();
            assert!(offset <= data.len(), "{e}");
            assert!(offset == 0 || data[offset - 1] == b'\n', "not a line start: {e}");
            let line = 1 + data[..offset].iter().filter(|&&b| b == b'\n').count();
            assert_eq!(e.line(), line, "{e}");
        }
    }
});
