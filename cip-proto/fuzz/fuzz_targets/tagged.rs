//! Fuzzes the RFC 2654 tagged index object: parser, writer and incremental updates.
//!
//! The first byte picks the limits and the consistency base; the rest is one object, or two
//! separated by a NUL byte (which no object may hold): a stored index and an update.
//! Checks: no panic; whatever parses writes back to bytes that parse to an equal value (with
//! CRLF or LF line ends); applying an update either succeeds, leaving a total that round
//! trips, or fails and leaves the stored index unchanged; value counts never exceed the
//! record count.

#![no_main]

use cip_proto::tagged::{
    ApplyOptions, IncrementalMode, TaggedIndex, TaggedLimits, parse, parse_with_limits, write,
};
use libfuzzer_sys::fuzz_target;

fn round_trip(idx: &TaggedIndex) {
    let out = write(idx);
    let again = parse(&out).expect("written objects parse");
    assert_eq!(&again, idx, "parse -> write -> parse");
    let lf: Vec<u8> = out.iter().copied().filter(|&b| b != b'\r').collect();
    assert_eq!(&parse(&lf).expect("LF form parses"), idx, "LF line ends");
}

fn counts_are_bounded(idx: &TaggedIndex) {
    let total = idx.record_count();
    for (_, _, values) in idx.value_counts() {
        for (_, n) in values {
            assert!(n > 0 && n <= total, "{n} of {total} records");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, input)) = data.split_first() else {
        return;
    };
    let limits = TaggedLimits {
        max_line_length: 256,
        max_entries: 64,
        max_tags_per_value: 16,
        max_header_lines: 16,
        max_schema_lines: 16,
        max_parts: 4,
        max_blocks: 8,
    };
    let (a, b) = match input.iter().position(|&x| x == 0) {
        Some(i) => (&input[..i], Some(&input[i + 1..])),
        None => (input, None),
    };
    let Ok(stored) = parse_with_limits(a, &limits) else {
        return;
    };
    round_trip(&stored);
    counts_are_bounded(&stored);
    let Some(Ok(update)) = b.map(|b| parse_with_limits(b, &limits)) else {
        return;
    };
    round_trip(&update);
    let mut stored = stored;
    if let Some(last) = update.last_update() {
        stored.this_update = last;
    }
    let options = ApplyOptions {
        consistency: IncrementalMode::ALL[usize::from(first % 3)],
        unique_attribute: if first & 4 == 0 { "dn" } else { "cn" }.to_owned(),
        max_work: 100_000,
    };
    let before = stored.clone();
    match stored.apply_with(&update, &options) {
        Ok(()) => {
            if before.is_total() {
                assert!(stored.is_total());
            }
            round_trip(&stored);
            counts_are_bounded(&stored);
        }
        Err(_) => assert_eq!(stored, before, "a failed apply changes nothing"),
    }
});
