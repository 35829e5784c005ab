//! The local object store: load time, index memory and query latency.
//!
//! Run with `cargo bench -p cipd --bench local`. Generates a SOIF collection (default
//! 1,000,000 DOCUMENT objects, about 150 bytes each; `CIPD_BENCH_OBJECTS=N` to change),
//! loads it through the store with three exported attributes, and prints the load time, the
//! process RSS, the index's estimated bytes per object, and p50/p99 latency of the `local`
//! count of `/v1/referrals` and of `/v1/objects` (first 10 objects) for exact and substring
//! queries. `CIPD_BENCH_BASELINE=1` also loads the collection whole into memory and scans it,
//! as the daemon did before the store, for comparison.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cip_proto::soif::{Limits, SoifObject};
use cipd::store::collection::{CollectionSource, SoifSource, load_all};
use cipd::store::local::object_matches;
use cipd::store::local::{Job, query, rebuild};
use hints::builder::Thresholds;
use hints::hint::AttrSpec;
use hints::query::Query;

const AUTHORS: usize = 20_000;
const KEYWORDS: usize = 2_000;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn author(i: usize) -> String {
    format!("Author{i:05} Surname{}", i % 97)
}

fn generate(path: &Path, n: usize) -> u64 {
    let mut rng = fastrand::Rng::with_seed(7);
    let mut out = BufWriter::new(std::fs::File::create(path).expect("create the collection"));
    let mut buf = Vec::new();
    for i in 0..n {
        let mut o = SoifObject::new("DOCUMENT", format!("http://example.org/d/{i}")).unwrap();
        o.push("Author", author(rng.usize(..AUTHORS))).unwrap();
        o.push("Title", format!("Report {} on item {}", rng.u32(..), i))
            .unwrap();
        o.push("Keywords", format!("kw{:04}", rng.usize(..KEYWORDS)))
            .unwrap();
        o.push(
            "Type",
            ["text/html", "application/pdf", "text/plain"][i % 3],
        )
        .unwrap();
        buf.clear();
        cip_proto::soif::write_object(&o, &mut buf);
        out.write_all(&buf).expect("write the collection");
    }
    out.flush().expect("write the collection");
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn percentiles(mut d: Vec<Duration>) -> (Duration, Duration) {
    d.sort();
    let at = |p: f64| d[((d.len() as f64 - 1.0) * p) as usize];
    (at(0.5), at(0.99))
}

fn main() {
    let n: usize = std::env::var("CIPD_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("bench.soif");
    let started = Instant::now();
    let bytes = generate(&file, n);
    println!(
        "generated {n} objects, {:.1} MB, in {:.1?}",
        bytes as f64 / 1e6,
        started.elapsed()
    );
    let source: Arc<dyn CollectionSource> = Arc::new(SoifSource {
        files: cipd::store::collection::FileSet {
            path: file.clone(),
            recursive: false,
            extensions: Vec::new(),
        },
        limits: Limits::default(),
    });
    let specs: Vec<AttrSpec> = ["DOCUMENT:Author", "DOCUMENT:Keywords", "DOCUMENT:Type"]
        .iter()
        .map(|s| AttrSpec::parse(s).unwrap())
        .collect();
    let rss_before = rss_mib();
    let started = Instant::now();
    let jobs = vec![Job::Load {
        name: "bench".into(),
        source: source.clone(),
        previous: None,
    }];
    let (outcomes, hint) = rebuild(
        jobs,
        &dir.path().join("local"),
        specs.clone(),
        Thresholds::default(),
        true,
    );
    let load = started.elapsed();
    let hint = hint.finish("-", Vec::new());
    let store = outcomes.into_iter().next().expect("one outcome").store;
    let rss_after = rss_mib();
    let (values, postings) = store.index_sizes();
    println!(
        "load (parse, cache file, index, hint): {load:.2?} = {:.0} MB/s; hint values {}",
        bytes as f64 / 1e6 / load.as_secs_f64(),
        hint.weightlists.iter().map(|w| w.1.len()).sum::<usize>()
    );
    println!(
        "index memory (estimate): {:.1} MB = {:.1} bytes/object ({values} distinct values, \
         {postings} postings)",
        store.memory_estimate() as f64 / 1e6,
        store.memory_estimate() as f64 / n as f64
    );
    println!("RSS: {rss_before:.0} MiB before load, {rss_after:.0} MiB after");
    // Loading from an intact cache file, as at a restart.
    let started = Instant::now();
    let jobs = vec![Job::Load {
        name: "bench".into(),
        source: source.clone(),
        previous: None,
    }];
    let (again, _) = rebuild(
        jobs,
        &dir.path().join("local"),
        specs.clone(),
        Thresholds::default(),
        true,
    );
    println!("restart (cache reused): {:.2?}", started.elapsed());
    drop(again);

    let mut rng = fastrand::Rng::with_seed(11);
    let stores = [&*store];
    let mut run = |label: &str, want: usize, make: &mut dyn FnMut(&mut fastrand::Rng) -> String| {
        let mut times = Vec::new();
        let mut total = 0;
        for _ in 0..2000 {
            let q = Query::parse(&make(&mut rng)).unwrap();
            let t = Instant::now();
            let got = query(stores, &q, want, 100_000).expect("query");
            times.push(t.elapsed());
            total += got.total;
        }
        let (p50, p99) = percentiles(times);
        println!(
            "{label:<44} p50 {p50:>9.1?}  p99 {p99:>9.1?}  (mean matches {})",
            total / 2000
        );
    };
    run("referrals local: DOCUMENT:Author=<name>", 0, &mut |r| {
        format!("DOCUMENT:Author={}", author(r.usize(..AUTHORS)))
    });
    run("objects (10): DOCUMENT:Author=<name>", 10, &mut |r| {
        format!("DOCUMENT:Author={}", author(r.usize(..AUTHORS)))
    });
    run(
        "referrals local: Keywords=<kw> & Type=text/html",
        0,
        &mut |r| format!("Keywords=kw{:04} & Type=text/html", r.usize(..KEYWORDS)),
    );
    run("referrals local: Author~<surname>", 0, &mut |r| {
        format!("Author~Surname{}", r.usize(..97))
    });
    run("objects (10): Author~<number prefix>", 10, &mut |r| {
        format!("Author~Author{:03}", r.usize(..200))
    });
    run(
        "referrals local: Author=<name> & Title~Report",
        0,
        &mut |r| format!("Author={} & Title~Report", author(r.usize(..AUTHORS))),
    );

    if std::env::var_os("CIPD_BENCH_BASELINE").is_some() {
        drop(store);
        let rss0 = rss_mib();
        let started = Instant::now();
        let (objects, _, _) = load_all("bench", source.as_ref()).expect("load");
        let load = started.elapsed();
        println!(
            "baseline (all objects in memory): load {load:.2?}, RSS {rss0:.0} -> {:.0} MiB",
            rss_mib()
        );
        let mut times = Vec::new();
        for _ in 0..20 {
            let q =
                Query::parse(&format!("DOCUMENT:Author={}", author(rng.usize(..AUTHORS)))).unwrap();
            let t = Instant::now();
            let c = objects.iter().filter(|o| object_matches(&q, o)).count();
            std::hint::black_box(c);
            times.push(t.elapsed());
        }
        let (p50, p99) = percentiles(times);
        println!("baseline scan DOCUMENT:Author=<name>      p50 {p50:>9.1?}  p99 {p99:>9.1?}");
    }
}
