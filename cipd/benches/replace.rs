//! The memory transient of importing one big hint, first and as a replacement (issue #44,
//! item 6): a routing table that holds one peer's hint of `BENCH_VALUES` values (default
//! 2,000,000), parsed from SOIF text as the daemon parses a poll's payload and handed to
//! [`RoutingTable::replace_all`] as the daemon's import pipeline hands it, under the
//! daemon's allocator (jemalloc, `.cargo/config.toml`'s settings). Prints the settled RSS,
//! the first import's peak and the peak while a changed version (`BENCH_CHANGED` percent of
//! the values, default 5) replaces it, each against the 1.5x target; then the peak while the
//! same change back is applied in place as a delta ([`RoutingTable::apply_delta`]), against
//! 1.2x, with its rate in changed entries a second.
//!
//! Run with `cargo bench -p cipd --bench replace`. The peaks are the process's `VmHWM`,
//! reset before each import (`/proc/self/clear_refs`) and read once the segment's substring
//! summaries, built in the background, are done; the new hint is parsed before the reset,
//! so a peak counts what the import holds on top of the hint it was handed.

use std::time::{Duration, SystemTime};

use hints::hint::{AttrSpec, CipHint};
use hints::table::{CountChange, ListChanges, PeerMeta, RoutingTable, TableConfig};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The target: an import's peak at most this many times the settled RSS.
const TARGET: f64 = 1.5;

fn kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Resets `VmHWM` to the current RSS.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Waits until the RSS stops falling (the allocator returns freed pages within ~100 ms).
fn settle() -> u64 {
    let mut last = kib("VmRSS:");
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(150));
        let now = kib("VmRSS:");
        if last.abs_diff(now) < 1024 {
            return now;
        }
        last = now;
    }
    last
}

/// A hint of `n` values, `changed` percent of them different from generation 0's, as the
/// daemon has it: SOIF text parsed, the values slices of that text.
fn hint(n: usize, changed: usize) -> CipHint {
    let text = {
        let values: Vec<String> = (0..n)
            .map(|i| {
                let tag = if i % 100 < changed { "b" } else { "a" };
                format!("Author {i:08} {tag}")
            })
            .collect();
        let spec = AttrSpec::parse("DOCUMENT:Author").expect("a valid spec");
        let h = CipHint::with_weightlist(
            spec,
            n as u64 * 2,
            values
                .iter()
                .map(|v| (v.as_str(), 1 + (v.len() as u64 % 7))),
        );
        bytes::Bytes::from(h.to_soif().to_bytes())
    };
    let limits = cip_proto::soif::Limits {
        max_value_size: 1 << 30,
        ..Default::default()
    };
    let objs = cip_proto::soif::parse_all(text, limits).expect("the hint parses");
    CipHint::from_soif(&objs[0]).expect("a CIP-HINT").0
}

fn meta() -> PeerMeta {
    PeerMeta {
        dsi: cip_proto::Dsi::new("1.3.6.1.4.1.99999.9").expect("a valid DSI"),
        base_uris: vec!["cip://peer.example:7070".into()],
        dsi_description: None,
        received: SystemTime::now(),
        expires: None,
        via: None,
        path: Vec::new(),
    }
}

/// Imports `hint` as the daemon's import pipeline does: handed over whole to
/// [`RoutingTable::replace_all`], which drops it once its values are taken.
fn import(table: &RoutingTable, hint: CipHint) {
    for result in table.replace_all([(meta(), hint)]) {
        result.expect("the import");
    }
    // The segment's substring summaries are built in the background: part of the import.
    table.wait_for_summaries();
}

fn verdict(ratio: f64) -> &'static str {
    if ratio <= TARGET { "MET" } else { "MISSED" }
}

fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let n = env("BENCH_VALUES", 2_000_000);
    let changed = env("BENCH_CHANGED", 5).min(100);
    let table = RoutingTable::new(TableConfig::default());
    let base = settle();

    let first = hint(n, 0);
    let handed = settle();
    reset_peak();
    import(&table, first);
    let first_peak = kib("VmHWM:");
    let settled = settle();
    let stats = table.stats();
    println!(
        "one hint of {n} values: table {} entries, {:.1} MB (table's estimate); RSS {:.0} MiB before, {:.0} MiB settled",
        stats.entries,
        stats.approx_bytes as f64 / 1e6,
        mib(base),
        mib(settled)
    );
    let ratio = first_peak as f64 / settled as f64;
    println!(
        "first import: peak {:.0} MiB with its hint ({:.0} MiB) held = {ratio:.2}x settled (target {TARGET}x: {})",
        mib(first_peak),
        mib(handed.saturating_sub(base)),
        verdict(ratio)
    );

    let second = hint(n, changed);
    let before = settle();
    reset_peak();
    import(&table, second);
    let peak = kib("VmHWM:");
    let after = settle();
    let ratio = peak as f64 / settled as f64;
    println!(
        "replacement ({changed} % of values changed): {:.0} MiB with the new hint, peak {:.0} MiB = {ratio:.2}x settled (target {TARGET}x: {}); {:.0} MiB after",
        mib(before),
        mib(peak),
        verdict(ratio),
        mib(after)
    );

    // The same change back, as a delta applied in place: the changed values' entries (the
    // tag "b" spellings leave, the "a" ones come back) and the new hint's header.
    let spec = AttrSpec::parse("DOCUMENT:Author").expect("a valid spec");
    // The values are slices of one buffer, as those of a delta parsed from the wire.
    let mut text = String::new();
    let mut spans = Vec::new();
    for i in (0..n).filter(|i| i % 100 < changed) {
        for (tag, before, after) in [("b", true, false), ("a", false, true)] {
            let start = text.len();
            text.push_str(&format!("Author {i:08} {tag}"));
            let count = 1 + ((text.len() - start) as u64 % 7);
            spans.push((
                start..text.len(),
                before.then_some(count),
                after.then_some(count),
            ));
        }
    }
    let text = bytes::Bytes::from(text);
    let entries: Vec<CountChange> = spans
        .into_iter()
        .map(|(at, before, after)| CountChange {
            value: text.slice(at),
            before: before.unwrap_or(0),
            after: after.unwrap_or(0),
        })
        .collect();
    let changes = [ListChanges {
        attribute: spec.clone(),
        entries,
    }];
    let header = CipHint::with_weightlist(spec, n as u64 * 2, std::iter::empty::<(&str, u64)>());
    // As for the replacement: the peak counts the delta held, the ratio is to the table's
    // settled RSS.
    let settled = after;
    let with_delta = settle();
    reset_peak();
    let started = std::time::Instant::now();
    table
        .apply_delta(meta(), &header, &changes)
        .expect("the delta applies in place");
    let took = started.elapsed();
    table.wait_for_summaries();
    let peak = kib("VmHWM:");
    let stats = table.stats();
    let ratio = peak as f64 / settled as f64;
    println!(
        "the change back as a delta in place ({} entries): {:.0} MiB with the delta, {:.0} ms ({:.2} M changed entries a second), peak {:.0} MiB = {ratio:.2}x settled (target 1.2x: {}); {} segments, {} values hidden",
        changes[0].entries.len(),
        mib(with_delta),
        took.as_secs_f64() * 1e3,
        changes[0].entries.len() as f64 / took.as_secs_f64() / 1e6,
        mib(peak),
        if ratio <= 1.2 { "MET" } else { "MISSED" },
        stats.segments,
        stats.distinct_values.saturating_sub(n),
    );
}
