//! SOIF parse and write throughput, single core.
//!
//! `cargo bench -p cip-proto --bench soif` prints MB/s for:
//! (a) Harvest-like records: 20 attributes per object, values around 40 bytes;
//! (b) large values: 64 KiB and 1 MiB values.
//!
//! Parse is measured both with the borrowed `SoifReader` (bulk path) and with the incremental
//! `SoifDecoder` producing owned, zero-copy `SoifObject`s (socket/file path).

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use cip_proto::soif::{Limits, SoifDecoder, SoifObject, SoifReader, write_object};
use tokio_util::codec::Decoder;

const NAMES: [&str; 20] = [
    "Title",
    "Author-1",
    "Author-2",
    "Keywords",
    "Description",
    "Type",
    "File-Size",
    "MD5",
    "Gatherer-Host",
    "Gatherer-Name",
    "Gatherer-Port",
    "Gatherer-Version",
    "Update-Time",
    "Last-Modification-Time",
    "Refresh-Rate",
    "Time-to-Live",
    "URL-References",
    "Abstract",
    "Content-Type",
    "Content-Length",
];

/// A small deterministic generator (xorshift) so runs are comparable.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn text(&mut self, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| b"abcdefghijklmnopqrstuvwxyz ABCDEFG0123456789"[(self.next() % 44) as usize])
            .collect()
    }
}

fn typical(objects: usize) -> Vec<SoifObject> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    (0..objects)
        .map(|i| {
            let mut o = SoifObject::new(
                "FILE",
                format!("http://host{}.example/doc/{i}.html", i % 97),
            )
            .unwrap();
            for name in NAMES {
                let len = 25 + (rng.next() % 31) as usize; // 25..55, mean 40
                o.push(name, rng.text(len)).unwrap();
            }
            o
        })
        .collect()
}

fn large(objects: usize, value: usize) -> Vec<SoifObject> {
    let mut rng = Rng(42);
    (0..objects)
        .map(|i| {
            let mut o = SoifObject::new("FILE", format!("http://big.example/{i}")).unwrap();
            o.push("Title", rng.text(40)).unwrap();
            let body: Vec<u8> = (0..value).map(|j| (j as u64 ^ rng.0) as u8).collect();
            o.push("Full-Text", body).unwrap();
            o
        })
        .collect()
}

fn encode(objs: &[SoifObject]) -> Vec<u8> {
    let mut out = Vec::new();
    for o in objs {
        write_object(o, &mut out);
    }
    out
}

/// Runs `f` repeatedly for at least `min` and returns the best MB/s over rounds.
fn measure(bytes: usize, min: Duration, mut f: impl FnMut()) -> f64 {
    f(); // warm up
    let start = Instant::now();
    let mut best = f64::MAX;
    let mut rounds = 0;
    while start.elapsed() < min || rounds < 3 {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
        rounds += 1;
    }
    bytes as f64 / best / 1e6
}

fn run(label: &str, objs: &[SoifObject]) {
    let input = encode(objs);
    let bytes = input.len();
    let min = Duration::from_millis(1500);
    let attrs: usize = objs.iter().map(|o| o.attributes.len()).sum();

    let reader = measure(bytes, min, || {
        let mut n = 0;
        let mut r = SoifReader::with_limits(&input, Limits::unlimited());
        while let Some(o) = r.next_object().unwrap() {
            n += o.attributes.len();
        }
        assert_eq!(n, attrs);
    });
    let frozen = Bytes::from(input.clone());
    let decoder = measure(bytes, min, || {
        let mut dec = SoifDecoder::new(Limits::unlimited());
        let mut buf = BytesMut::from(frozen.clone());
        let mut n = 0;
        while let Some(o) = dec.decode_eof(&mut buf).unwrap() {
            n += o.attributes.len();
            black_box(&o);
        }
        assert_eq!(n, attrs);
    });
    let mut out = Vec::with_capacity(bytes);
    let write = measure(bytes, min, || {
        out.clear();
        for o in objs {
            write_object(o, &mut out);
        }
        assert_eq!(out.len(), bytes);
        black_box(&out);
    });
    println!(
        "{label:<44} {:>7.1} MiB  parse(reader) {reader:>8.0} MB/s  parse(decoder) {decoder:>8.0} MB/s  write {write:>8.0} MB/s",
        bytes as f64 / (1 << 20) as f64
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a name filter is accepted and ignored.
    println!("SOIF codec, single core, best of repeated rounds");
    run(
        "(a) typical: 50k objects x 20 attrs x ~40 B",
        &typical(50_000),
    );
    run(
        "(b) large: 256 objects x 64 KiB value",
        &large(256, 64 << 10),
    );
    run("(b) large: 32 objects x 1 MiB value", &large(32, 1 << 20));
}
