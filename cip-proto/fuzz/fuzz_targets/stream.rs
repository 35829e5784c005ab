//! Fuzzes the CIP stream decoder: decode -> encode -> decode must give the same frames.
//!
//! The first input byte picks what the codec expects (message, legacy-tolerant result,
//! status or version line) and
//! how the rest is split into reads; the rest is the wire data.

#![no_main]

use bytes::BytesMut;
use cip_proto::cip::stream::scan_message;
use cip_proto::cip::{CipCodec, Expect, Frame, Limits};
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::{Decoder, Encoder};

fn limits() -> Limits {
    Limits {
        max_line: 256,
        max_message: 4096,
        max_header: 1024,
        max_parts: 16,
    }
}

fn decode_all(
    expect: Expect,
    input: &[u8],
    chunk: usize,
    limits: Limits,
) -> Result<Vec<Frame>, ()> {
    let mut codec = CipCodec::new(limits, expect);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for piece in input.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(_) => return Err(()),
            }
        }
    }
    match codec.decode_eof(&mut buf) {
        Ok(Some(f)) => frames.push(f),
        Ok(None) => {}
        Err(_) => return Err(()),
    }
    Ok(frames)
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, wire)) = data.split_first() else {
        return;
    };
    let expect = match selector % 4 {
        0 => Expect::Message,
        1 => Expect::Status,
        2 => Expect::Result,
        _ => Expect::Version,
    };
    let chunk = usize::from(selector / 4) + 1;
    let Ok(frames) = decode_all(expect, wire, chunk, limits()) else {
        // The pure scanner must agree that something is wrong or incomplete, without panics.
        let _ = scan_message(wire, &mut Default::default(), &limits());
        return;
    };
    // Same frames whether the input arrives whole or in pieces.
    assert_eq!(
        decode_all(expect, wire, wire.len().max(1), limits()).ok(),
        Some(frames.clone())
    );
    let mut codec = CipCodec::new(limits(), expect);
    let mut again = BytesMut::new();
    for frame in &frames {
        codec
            .encode(frame, &mut again)
            .expect("a decoded frame re-encodes within the same limits");
    }
    // Status and version lines are re-encoded in the canonical, possibly longer form
    // ("% NNN text"), so they are read back with room to spare.
    let roomy = Limits {
        max_line: 1024,
        max_header: 65536,
        ..limits()
    };
    let back =
        decode_all(expect, &again, again.len().max(1), roomy).expect("re-encoded frames decode");
    match expect {
        Expect::Message | Expect::Result => assert_eq!(back, frames),
        Expect::Status => {
            let codes: Vec<_> = frames.iter().map(code_of).collect();
            assert_eq!(back.iter().map(code_of).collect::<Vec<_>>(), codes);
        }
        Expect::Version => {
            let versions: Vec<_> = frames.iter().map(version_of).collect();
            // Any line re-encodes as a version line, so only well-formed ones compare.
            for (a, b) in versions.iter().zip(back.iter().map(version_of)) {
                if a.is_some() {
                    assert_eq!(*a, b);
                }
            }
        }
    }
});

fn code_of(f: &Frame) -> Option<u16> {
    match f {
        Frame::Status(s) => Some(s.code.code()),
        _ => None,
    }
}

fn version_of(f: &Frame) -> Option<u32> {
    match f {
        Frame::Version { version, .. } => *version,
        _ => None,
    }
}
