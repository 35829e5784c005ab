//! Hint building over a large collection: SOIF parse plus counting, one thread.
//!
//! Generates Harvest-like FILE objects in memory (about ten attributes each, three indexed:
//! Zipf-distributed authors, one to three per object; keywords from a Zipf vocabulary, up to
//! four per object; a type from a small set), then times `SoifReader` + `HintBuilder` over
//! them and prints objects/s, MB/s, the time, the distinct values and the builder's memory.
//!
//! `cargo bench -p hints --bench build [-- OBJECTS]` (default 1,000,000).

use std::hint::black_box;
use std::time::Instant;

use cip_proto::soif::{Limits, SoifReader};
use hints::builder::{HintBuilder, Thresholds};
use hints::hint::AttrSpec;

/// A small, fast, seeded generator (SplitMix64), so runs are repeatable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Samples ranks 0..n with probability proportional to 1/(rank+1)^s (inverse CDF table).
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0;
        for k in 1..=n {
            sum += 1.0 / (k as f64).powf(s);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Self { cdf }
    }

    fn sample(&self, rng: &mut Rng) -> usize {
        let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

const SURNAMES: [&str; 16] = [
    "Smith", "Garcia", "Müller", "Aldrin", "Nguyen", "Kowalski", "O'Brien", "Tanaka", "Rossi",
    "Dubois", "Ivanova", "Hardie", "Bowman", "Weibel", "Kunze", "Lagoze",
];
const TYPES: [&str; 8] = [
    "HTML",
    "Text",
    "PostScript",
    "PDF",
    "Image",
    "Directory",
    "Mail",
    "News",
];

fn author(rank: usize) -> String {
    // Distinct names per rank; some carry commas, as "Surname, Given" often does.
    let surname = SURNAMES[rank % SURNAMES.len()];
    if rank.is_multiple_of(3) {
        format!("{surname}, A. {rank}")
    } else {
        format!(
            "{} {surname}{}",
            (b'A' + (rank % 26) as u8) as char,
            rank / SURNAMES.len()
        )
    }
}

fn push_attr(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.push(b'{');
    out.extend_from_slice(value.len().to_string().as_bytes());
    out.extend_from_slice(b"}:\t");
    out.extend_from_slice(value.as_bytes());
    out.push(b'\n');
}

fn generate(objects: usize) -> Vec<u8> {
    let mut rng = Rng(0x5eed);
    let authors = Zipf::new(200_000, 1.1);
    let keywords = Zipf::new(50_000, 1.0);
    let mut out = Vec::with_capacity(objects * 420);
    for i in 0..objects {
        out.extend_from_slice(
            format!(
                "@FILE {{ http://host{}.example.org/docs/{i}.html\n",
                i % 997
            )
            .as_bytes(),
        );
        let n_authors = 1 + rng.below(3) as usize;
        for a in 1..=n_authors {
            push_attr(
                &mut out,
                &format!("Author-{a}"),
                &author(authors.sample(&mut rng)),
            );
        }
        push_attr(
            &mut out,
            "Title",
            &format!("Report {} on topic {}", i, rng.below(5000)),
        );
        let kw: Vec<String> = (0..1 + rng.below(4))
            .map(|_| format!("kw{}", keywords.sample(&mut rng)))
            .collect();
        push_attr(&mut out, "Keywords", &kw.join(" "));
        push_attr(
            &mut out,
            "Type",
            TYPES[rng.below(TYPES.len() as u64) as usize],
        );
        push_attr(&mut out, "File-Size", &rng.below(1_000_000).to_string());
        push_attr(
            &mut out,
            "Last-Modification-Time",
            &(850_000_000 + rng.below(1 << 27)).to_string(),
        );
        push_attr(
            &mut out,
            "MD5",
            &format!("{:016x}{:016x}", rng.next(), rng.next()),
        );
        push_attr(&mut out, "Gatherer-Name", "Eureka NASA Technical Reports");
        push_attr(&mut out, "Gatherer-Host", "nic.nasa.gov");
        push_attr(
            &mut out,
            "Description",
            "An example description of moderate length, as Harvest wrote them.",
        );
        out.extend_from_slice(b"}\n\n");
    }
    out
}

/// Peak resident memory so far, in KiB (`VmHWM`), when the platform reports it.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let objects: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let input = generate(objects);
    let mib = input.len() as f64 / (1024.0 * 1024.0);
    println!("collection: {objects} objects, {mib:.1} MiB");
    let rss_before = peak_rss_kib();

    let specs: Vec<AttrSpec> = ["FILE:Author", "FILE:Keywords", "FILE:Type"]
        .iter()
        .map(|s| AttrSpec::parse(s).expect("bench specs are valid"))
        .collect();
    // The parse alone, for reference.
    let start = Instant::now();
    let mut pairs = 0usize;
    for obj in SoifReader::with_limits(&input, Limits::default()) {
        pairs += obj.expect("generated SOIF is valid").attributes.len();
    }
    let parse_secs = start.elapsed().as_secs_f64();
    println!(
        "parse only: {parse_secs:.3} s, {:.0} MB/s ({pairs} attribute-value pairs)",
        input.len() as f64 / 1e6 / parse_secs
    );
    let mut best = f64::MAX;
    let mut finish_secs = f64::MAX;
    let mut last = None;
    for _ in 0..3 {
        let start = Instant::now();
        let mut builder = HintBuilder::new(specs.clone(), Thresholds::new(2));
        for obj in SoifReader::with_limits(&input, Limits::default()) {
            builder.add(&obj.expect("generated SOIF is valid"));
        }
        let distinct = builder.distinct_values();
        let memory = builder.memory_estimate();
        let counted = start.elapsed().as_secs_f64();
        let hint = builder.finish("-", vec![]);
        let secs = start.elapsed().as_secs_f64();
        finish_secs = finish_secs.min(secs - counted);
        assert_eq!(hint.total_object_count, objects as u64);
        best = best.min(secs);
        last = Some((distinct, memory, black_box(hint)));
    }
    let (distinct, memory, hint) = last.expect("three runs");
    let kept: usize = hint.weightlists.iter().map(|(_, l)| l.len()).sum();
    let rss_after = peak_rss_kib();
    println!(
        "build (parse + count + finish, best of 3): {:.3} s, {:.0} objects/s, {:.0} MB/s",
        best,
        objects as f64 / best,
        input.len() as f64 / 1e6 / best
    );
    println!("  of which finish (threshold, sort, drop): {finish_secs:.3} s");
    println!("distinct values: {distinct} ({kept} at or above threshold 2)");
    println!(
        "builder maps: ~{:.1} MiB (estimate)",
        memory as f64 / (1024.0 * 1024.0)
    );
    if let (Some(before), Some(after)) = (rss_before, rss_after) {
        println!(
            "peak RSS: {:.1} MiB with the collection, +{:.1} MiB while building",
            after as f64 / 1024.0,
            after.saturating_sub(before) as f64 / 1024.0
        );
    }
    let encoded = hint.to_soif().to_bytes();
    println!("hint: {} bytes of SOIF", encoded.len());
    println!(
        "target: under 1.5 s for 1,000,000 objects: {}",
        if best < 1.5 { "met" } else { "MISSED" }
    );
}
