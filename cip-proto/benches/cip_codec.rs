//! Throughput of the CIP stream codec in memory.
//!
//! Run with `cargo bench -p cip-proto --bench cip_codec`. Prints MB/s for a 1 MiB poll result
//! (framing alone, and framing plus MIME build/parse) and messages/s for small noop
//! requests. The loopback TCP figures are in `cipd/benches/transport.rs`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use cip_proto::Dsi;
use cip_proto::cip::{
    CipCodec, Expect, Frame, IndexObject, IndexType, Limits, PollResult, Request,
};
use tokio_util::codec::{Decoder, Encoder};

const MIB: usize = 1024 * 1024;

fn main() {
    let text = text_payload(MIB);
    let binary: Vec<u8> = (0..MIB as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    for (name, payload) in [("text 8bit", text), ("binary base64", binary)] {
        let result = PollResult {
            objects: vec![object(payload)],
        };
        let mime = result.to_mime().expect("result encodes");
        let mut codec = CipCodec::new(Limits::default(), Expect::Message);
        let mut wire = BytesMut::new();
        codec
            .encode(&Frame::Message(mime.clone()), &mut wire)
            .expect("frame encodes");
        let wire = wire.freeze();
        println!(
            "1 MiB poll result, {name}: message {} bytes, on the wire {} bytes",
            mime.len(),
            wire.len()
        );

        let frame = Frame::Message(mime.clone());
        let mut out = BytesMut::with_capacity(wire.len() + 64);
        report("  frame encode", mime.len(), || {
            out.clear();
            codec.encode(&frame, &mut out).expect("frame encodes");
            black_box(&out);
        });
        report("  frame decode", wire.len(), || {
            let mut buf = BytesMut::from(&wire[..]);
            let f = codec.decode(&mut buf).expect("decodes").expect("complete");
            black_box(f);
        });
        report("  decode in 16 KiB reads", wire.len(), || {
            let mut buf = BytesMut::with_capacity(wire.len());
            let mut got = None;
            for chunk in wire.chunks(16 * 1024) {
                buf.extend_from_slice(chunk);
                if let Some(f) = codec.decode(&mut buf).expect("decodes") {
                    got = Some(f);
                }
            }
            black_box(got.expect("complete"));
        });
        report("  build + frame (PollResult::to_mime)", mime.len(), || {
            let m = result.to_mime().expect("encodes");
            out.clear();
            codec
                .encode(&Frame::Message(m), &mut out)
                .expect("frame encodes");
            black_box(&out);
        });
        report(
            "  unframe + parse (PollResult::from_mime)",
            wire.len(),
            || {
                let mut buf = BytesMut::from(&wire[..]);
                let Some(Frame::Message(m)) = codec.decode(&mut buf).expect("decodes") else {
                    unreachable!("message expected")
                };
                black_box(PollResult::from_mime(&m, &Limits::default()).expect("parses"));
            },
        );
    }

    let noop = Request::Noop.to_mime().expect("noop encodes");
    let mut codec = CipCodec::new(Limits::default(), Expect::Message);
    let mut wire = BytesMut::new();
    let (n, elapsed) = time_loop(|| {
        wire.clear();
        codec
            .encode(
                &Frame::Message(Request::Noop.to_mime().expect("encodes")),
                &mut wire,
            )
            .expect("encodes");
        let Some(Frame::Message(m)) = codec.decode(&mut wire).expect("decodes") else {
            unreachable!("message expected")
        };
        black_box(Request::from_mime(&m, &Limits::default()).expect("parses"));
    });
    println!(
        "noop request ({} bytes) build + frame + unframe + parse: {:.0} messages/s",
        noop.len(),
        n as f64 / elapsed.as_secs_f64()
    );
}

fn report(name: &str, bytes: usize, f: impl FnMut()) {
    let (n, elapsed) = time_loop(f);
    let per = elapsed / n as u32;
    let mbps = (bytes * n) as f64 / elapsed.as_secs_f64() / 1e6;
    println!("{name:<44} {mbps:>8.0} MB/s  ({per:?} per message)");
}

/// Runs `f` for about a second after a short warm-up; returns iterations and time.
fn time_loop(mut f: impl FnMut()) -> (usize, Duration) {
    for _ in 0..3 {
        f();
    }
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < Duration::from_secs(1) {
        for _ in 0..8 {
            f();
        }
        n += 8;
    }
    (n, start.elapsed())
}

fn object(payload: Vec<u8>) -> IndexObject {
    IndexObject {
        index_type: IndexType::harvest_soif(),
        dsi: Dsi::new("1.3.6.1.4.1.99999.7").expect("valid dsi"),
        base_uris: vec!["http://cip.example.net/".into()],
        dsi_description: None,
        payload: Bytes::from(payload),
    }
}

/// SOIF-like text: attribute lines of varying length, some lines of periods.
fn text_payload(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 100);
    let mut i = 0u32;
    while out.len() < len {
        match i % 50 {
            0 => out.extend_from_slice(b"@FILE { http://www.example.net/doc/"),
            49 => out.extend_from_slice(b"}"),
            _ => out.extend_from_slice(
                format!("Keywords{{{}}}:\tindexing mesh referral {i}", 20 + i % 7).as_bytes(),
            ),
        }
        out.extend_from_slice(b"\r\n");
        i += 1;
    }
    out
}
