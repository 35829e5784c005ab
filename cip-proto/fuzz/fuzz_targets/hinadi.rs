//! Fuzzes the Hina-Di reader.
//!
//! The first byte picks the read size and the default charset; the rest is the input.
//! Checks: no panic; reading in small pieces gives the blocks and diagnostics a whole read
//! gives; every block that the writer accepts reads back identically from UTF-8.

#![no_main]

use cip_proto::hinadi::{HeaderOut, HinaLimits, HinaReader, parse_bytes, write_block, write_header};
use libfuzzer_sys::fuzz_target;

const CHARSETS: [&encoding_rs::Encoding; 4] = [
    encoding_rs::EUC_JP,
    encoding_rs::UTF_8,
    encoding_rs::SHIFT_JIS,
    encoding_rs::ISO_2022_JP,
];

fuzz_target!(|data: &[u8]| {
    let Some((&first, input)) = data.split_first() else {
        return;
    };
    let limits = HinaLimits {
        max_line_bytes: 512,
        max_fields: 32,
        max_header_lines: 16,
        default_charset: CHARSETS[usize::from(first >> 6)],
    };
    let Ok(whole) = parse_bytes(input, limits) else {
        return;
    };

    let chunked = std::io::BufReader::with_capacity(usize::from(first % 16) + 1, input);
    let mut r = HinaReader::new(chunked, limits).expect("a whole read succeeded");
    let mut blocks = Vec::new();
    while let Some(b) = r.next_block().expect("in-memory reads do not fail") {
        blocks.push(b);
    }
    assert_eq!(blocks, whole.blocks, "chunked and whole reads disagree");
    assert_eq!(r.take_diagnostics(), whole.diagnostics);

    // UTF-8 holds every character any charset decodes to (ISO-2022-JP, for one, would
    // write half-width kana back full-width).
    let charset = encoding_rs::UTF_8;
    let mut out = Vec::new();
    write_header(
        &mut out,
        &HeaderOut {
            user_agent: "fuzz",
            charset,
            date: None,
        },
    )
    .expect("a plain user agent writes");
    let mut written = Vec::new();
    for b in &whole.blocks {
        if write_block(&mut out, b, charset).is_ok() {
            written.push(b.fields.clone());
        }
    }
    if written.is_empty() {
        return;
    }
    // A line may grow in UTF-8 (half-width kana: 1 byte in Shift_JIS, 3 in UTF-8), so the
    // read back allows longer lines.
    let reread = HinaLimits {
        max_line_bytes: limits.max_line_bytes * 3 + 64,
        ..limits
    };
    let again = parse_bytes(&out, reread).expect("canonical output parses");
    let fields: Vec<_> = again.blocks.into_iter().map(|b| b.fields).collect();
    assert_eq!(fields, written, "write -> read round trip");
});
