//! Fuzzes the SOIF parser.
//!
//! The first byte picks the read size; the rest is the input. Checks: no panic; the
//! incremental decoder (fed in chunks) and the borrowed reader (whole input) agree on the
//! objects and on the offset of the first error; objects written back parse to themselves.

#![no_main]

use bytes::BytesMut;
use cip_proto::soif::{Limits, SoifDecoder, SoifObject, SoifReader, write_object};
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;

fn limits() -> Limits {
    Limits {
        max_value_size: 4096,
        max_attributes: 64,
        max_object_size: 16384,
        max_token_len: 256,
    }
}

fn decode_chunked(input: &[u8], chunk: usize) -> (Vec<SoifObject>, Option<u64>) {
    let mut dec = SoifDecoder::new(limits());
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in input.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match dec.decode(&mut buf) {
                Ok(Some(o)) => out.push(o),
                Ok(None) => break,
                Err(e) => return (out, Some(e.offset())),
            }
        }
    }
    loop {
        match dec.decode_eof(&mut buf) {
            Ok(Some(o)) => out.push(o),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e.offset())),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, input)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(first % 64) + 1;
    let (objects, error) = decode_chunked(input, chunk);

    let mut reader = SoifReader::with_limits(input, limits());
    let mut borrowed = Vec::new();
    let mut reader_error = None;
    loop {
        match reader.next_object() {
            Ok(Some(o)) => borrowed.push(o.to_owned_object()),
            Ok(None) => break,
            Err(e) => {
                reader_error = Some(e.offset());
                break;
            }
        }
    }
    assert_eq!(objects, borrowed, "decoder and reader disagree");
    assert_eq!(
        error, reader_error,
        "decoder and reader report different errors"
    );

    let mut canonical = Vec::new();
    for o in &objects {
        write_object(o, &mut canonical);
    }
    let (again, err) = decode_chunked(&canonical, chunk);
    assert_eq!(err, None, "canonical output must parse");
    assert_eq!(again, objects, "write -> parse round trip");
});
