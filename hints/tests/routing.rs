//! Routing table against brute force over the raw collections, and replacement atomicity
//! under concurrent readers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::soif::attr::contains_ignore_ascii_case;
use hints::hint::{AttrSpec, CipHint, WeightEntry, Weightlist};
use hints::query::{MatchOp, Query};
use hints::rank::QueryOptions;
use hints::substring::SummaryConfig;
use hints::table::{PeerMeta, RoutingTable, TableConfig};
use proptest::prelude::*;

const POOL: &[&str] = &[
    "Garcia",
    "GARCIA",
    "Jose Garcia y Montes",
    "Smith",
    "smith",
    "Aldrin, Buzz",
    "Moon",
    "Sun",
    "Planet",
];
const TEMPLATES: &[&str] = &["DOCUMENT", "FILE"];

/// One peer's raw collection: objects, each a list of (template index, value index).
#[derive(Debug, Clone)]
struct Peer {
    objects: Vec<Vec<(usize, usize)>>,
    threshold: u64,
    attr_spelling: usize,
}

fn peer() -> impl Strategy<Value = Peer> {
    (
        prop::collection::vec(
            prop::collection::vec((0..TEMPLATES.len(), 0..POOL.len()), 0..4),
            0..25,
        ),
        0u64..4,
        0usize..3,
    )
        .prop_map(|(objects, threshold, attr_spelling)| Peer {
            objects,
            threshold,
            attr_spelling,
        })
}

fn dsi(i: usize) -> Dsi {
    Dsi::new(&format!("1.3.{i}")).unwrap()
}

fn meta(i: usize) -> PeerMeta {
    PeerMeta {
        dsi: dsi(i),
        base_uris: vec![format!("cip://peer{i}/")],
        dsi_description: None,
        received: SystemTime::UNIX_EPOCH,
        expires: None,
        via: None,
        path: Vec::new(),
    }
}

/// Objects per (template, exact value) in one collection.
fn counts(p: &Peer) -> BTreeMap<(usize, usize), u64> {
    let mut out = BTreeMap::new();
    for obj in &p.objects {
        let mut seen: Vec<(usize, usize)> = obj.clone();
        seen.sort_unstable();
        seen.dedup();
        for k in seen {
            *out.entry(k).or_insert(0) += 1;
        }
    }
    out
}

fn to_hint(p: &Peer) -> CipHint {
    let attr = ["Author", "AUTHOR", "author-1"][p.attr_spelling];
    let mut hint = CipHint {
        url: "-".into(),
        total_object_count: p.objects.len() as u64,
        ..CipHint::default()
    };
    for (t, template) in TEMPLATES.iter().enumerate() {
        let spec = AttrSpec {
            template: (*template).into(),
            attribute: attr.into(),
        };
        let entries: Vec<WeightEntry> = counts(p)
            .into_iter()
            .filter(|&((tt, _), n)| tt == t && n >= p.threshold)
            .map(|((_, v), n)| WeightEntry {
                value: Bytes::from_static(POOL[v].as_bytes()),
                count: n,
            })
            .collect();
        hint.weightlists
            .push((spec.clone(), Weightlist::new(entries)));
        if p.threshold > 0 {
            hint.thresholds.push((spec, p.threshold));
        }
    }
    hint
}

/// Expected (dsi, count, total, matched distinct folded values), in rank order, and per
/// peer its matched folded values with their summed counts.
type Expected = (
    Vec<(Dsi, u64, u64, usize)>,
    BTreeMap<Dsi, BTreeMap<String, u64>>,
);

fn brute_force(
    peers: &[Option<Peer>],
    template: Option<usize>,
    op: MatchOp,
    needle: &str,
) -> Expected {
    let mut per_value = BTreeMap::new();
    let mut out = Vec::new();
    for (i, p) in peers.iter().enumerate() {
        let Some(p) = p else { continue };
        let mut count = 0;
        let mut values: Vec<String> = Vec::new();
        for ((t, v), n) in counts(p) {
            let value = POOL[v];
            let matches = match op {
                MatchOp::Exact => value.eq_ignore_ascii_case(needle),
                MatchOp::Substring => {
                    contains_ignore_ascii_case(value.as_bytes(), needle.as_bytes())
                }
            };
            if n >= p.threshold && template.is_none_or(|x| x == t) && matches {
                count += n;
                values.push(value.to_ascii_lowercase());
                *per_value
                    .entry(dsi(i))
                    .or_insert_with(BTreeMap::new)
                    .entry(value.to_ascii_lowercase())
                    .or_insert(0) += n;
            }
        }
        values.sort();
        values.dedup();
        if count > 0 {
            out.push((dsi(i), count, p.objects.len() as u64, values.len()));
        }
    }
    out.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| {
                (u128::from(b.1) * u128::from(a.2)).cmp(&(u128::from(a.1) * u128::from(b.2)))
            })
            .then_with(|| a.0.cmp(&b.0))
    });
    (out, per_value)
}

fn query_text(template: Option<usize>, op: MatchOp, needle: &str) -> String {
    let t = template
        .map(|t| format!("{}:", TEMPLATES[t]))
        .unwrap_or_default();
    let value: String = needle
        .chars()
        .flat_map(|c| {
            (c == '&' || c == '\\')
                .then_some('\\')
                .into_iter()
                .chain([c])
        })
        .collect();
    format!("{t}Author{}\"{value}\"", op.symbol())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Random collections -> hints -> table (bulk, incremental, with replacements and
    /// removals): every query's ranking equals brute force over the raw collections.
    #[test]
    fn ranking_matches_brute_force(
        initial in prop::collection::vec(peer(), 1..8),
        updates in prop::collection::vec((0usize..10, prop::option::of(peer())), 0..12),
        bulk in any::<bool>(),
        summarize in 0u8..4,
        queries in prop::collection::vec(
            (prop::option::of(0..TEMPLATES.len()), any::<bool>(), 0..POOL.len(), 0usize..6, 1usize..5, 0usize..4),
            1..8,
        ),
    ) {
        // Summaries on every segment, for every n-gram in two values or more; or narrow
        // summaries of the best two slots; or every substring's sums memoized: answers
        // must not change.
        let forced = SummaryConfig { min_values: 1, min_share_permille: 0, min_matches: 2, budget_divisor: 0, max_ngrams: usize::MAX, max_work_per_value: usize::MAX, threads: 2, background: false, memo_bytes: 0, memo_min_candidates: 1, narrow_min_values: 0, narrow_slots: 0, narrow_budget_divisor: 0 };
        let summaries = match summarize {
            0 => SummaryConfig::default(),
            1 => forced,
            // Narrow summaries only, of two slots: most pages need more, or fewer.
            2 => SummaryConfig { min_matches: usize::MAX, narrow_min_values: 2, narrow_slots: 2, ..forced },
            _ => SummaryConfig { min_matches: usize::MAX, memo_bytes: 1 << 20, ..forced },
        };
        let table = RoutingTable::new(TableConfig { summaries, ..TableConfig::default() });
        let mut peers: Vec<Option<Peer>> = initial.iter().cloned().map(Some).collect();
        if bulk {
            let results = table.replace_all(initial.iter().enumerate().map(|(i, p)| (meta(i), to_hint(p))));
            prop_assert!(results.iter().all(Result::is_ok));
        } else {
            for (i, p) in initial.iter().enumerate() {
                table.replace(meta(i), &to_hint(p)).unwrap();
            }
        }
        for (i, p) in updates {
            if peers.len() <= i {
                peers.resize(i + 1, None);
            }
            match p {
                Some(p) => {
                    table.replace(meta(i), &to_hint(&p)).unwrap();
                    peers[i] = Some(p);
                }
                None => {
                    prop_assert_eq!(table.remove(&dsi(i)), peers[i].is_some());
                    peers[i] = None;
                }
            }
        }
        for (template, substring, v, start, len, max_values) in queries {
            let op = if substring { MatchOp::Substring } else { MatchOp::Exact };
            let value = POOL[v];
            let needle: String = if substring {
                let chars: Vec<char> = value.chars().collect();
                let s = start.min(chars.len() - 1);
                chars[s..(s + len).min(chars.len())].iter().collect()
            } else if start % 2 == 0 { value.to_ascii_uppercase() } else { value.to_string() };
            let text = query_text(template, op, &needle);
            let q = Query::parse(&text).unwrap();
            let opts = QueryOptions { limit: usize::MAX, max_values, ..QueryOptions::default() };
            let referrals = table.query(&q, &opts);
            let got: Vec<(Dsi, u64, u64, usize)> = referrals
                .iter()
                .map(|r| { assert!(r.definite); (r.dsi.as_dsi().clone(), r.count, r.total, r.matched_values) })
                .collect();
            let (want, per_value) = brute_force(&peers, template, op, &needle);
            prop_assert_eq!(&got, &want, "{}", text);
            // The borrowed answer says the same as the owned referrals.
            let answer = table.answer(&q, &opts);
            prop_assert_eq!(answer.len(), referrals.len());
            for (i, (view, r)) in answer.iter().zip(&referrals).enumerate() {
                prop_assert_eq!(view.dsi(), r.dsi.as_dsi());
                prop_assert_eq!(view.base_uris(), r.base_uris());
                prop_assert_eq!((view.count(), view.total(), view.matched_values()), (r.count, r.total, r.matched_values));
                let values: Vec<(&[u8], u64)> = view.values().collect();
                prop_assert_eq!(values, r.values.iter().collect::<Vec<_>>());
                prop_assert_eq!(&view.to_referral(), r);
                prop_assert_eq!(answer.get(i).map(|v| v.dsi().clone()), Some(r.dsi.as_dsi().clone()));
            }
            // A smaller limit keeps the best of the same order.
            let limited = QueryOptions { limit: len, max_values, ..QueryOptions::default() };
            let want_top: Vec<(Dsi, u64)> =
                want.iter().take(len).map(|w| (w.0.clone(), w.1)).collect();
            let top: Vec<(Dsi, u64)> = table
                .query(&q, &limited)
                .iter()
                .map(|r| (r.dsi.as_dsi().clone(), r.count))
                .collect();
            prop_assert_eq!(&top, &want_top, "{} limit {}", text, len);
            let top: Vec<(Dsi, u64)> =
                table.route(&q, &limited).into_iter().map(|r| (r.meta.dsi.clone(), r.count)).collect();
            prop_assert_eq!(&top, &want_top, "{} limit {}", text, len);
            let routes: Vec<(Dsi, u64)> =
                table.route(&q, &opts).into_iter().map(|r| (r.meta.dsi.clone(), r.count)).collect();
            let counts: Vec<(Dsi, u64)> =
                referrals.iter().map(|r| (r.dsi.as_dsi().clone(), r.count)).collect();
            prop_assert_eq!(routes, counts, "{}", text);
            // Each referral lists its best values: the highest counts, each value matched
            // with the count brute force gives it.
            for r in &referrals {
                let values = &per_value[r.dsi.as_dsi()];
                // Highest count first, ties in case-insensitive value order.
                let mut best: Vec<(String, u64)> =
                    values.iter().map(|(v, n)| (v.clone(), *n)).collect();
                best.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                best.truncate(max_values);
                let listed: Vec<(String, u64)> = r
                    .values
                    .iter()
                    .map(|(v, n)| (String::from_utf8_lossy(v).to_ascii_lowercase(), n))
                    .collect();
                prop_assert_eq!(&listed, &best, "{}", text);
                for (v, n) in r.values.iter() {
                    let folded = String::from_utf8_lossy(v).to_ascii_lowercase();
                    prop_assert_eq!(values.get(&folded), Some(&n), "{}", text);
                }
                for w in r.values.to_vec().windows(2) {
                    let (a, b) = (w[0].0.to_ascii_lowercase(), w[1].0.to_ascii_lowercase());
                    prop_assert!(w[0].1 > w[1].1 || (w[0].1 == w[1].1 && a < b));
                }
            }
        }
    }
}

/// Every hint version `k` holds two values with count `k` and Total-Object-Count `k`: a
/// reader that saw half a replacement would see different counts.
#[test]
fn replacement_is_atomic_under_concurrent_readers() {
    fn version(k: u64, peer: usize) -> CipHint {
        let spec = AttrSpec {
            template: "DOCUMENT".into(),
            attribute: "Author".into(),
        };
        let mut entries = vec![
            WeightEntry {
                value: Bytes::from("marker-a"),
                count: k,
            },
            WeightEntry {
                value: Bytes::from("marker-b"),
                count: k,
            },
        ];
        // Vary the rest so that merges move data around.
        entries.extend((0..(k % 7) * 50).map(|i| WeightEntry {
            value: Bytes::from(format!("filler {peer} {k} {i}")),
            count: 1,
        }));
        CipHint {
            url: "-".into(),
            total_object_count: k,
            weightlists: vec![(spec, Weightlist::new(entries))],
            ..CipHint::default()
        }
    }
    let table = Arc::new(RoutingTable::default());
    for p in 0..4 {
        table.replace(meta(p), &version(1, p)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (table, stop) = (table.clone(), stop.clone());
            std::thread::spawn(move || {
                let q = Query::parse("Author~marker-").unwrap();
                let mut checked = 0u64;
                while !stop.load(Ordering::Relaxed) || checked == 0 {
                    let refs = table.query(&q, &QueryOptions::default());
                    assert_eq!(refs.len(), 4);
                    for r in refs {
                        assert_eq!(r.values.len(), 2);
                        assert!(r.values.iter().all(|(_, n)| n == r.total), "{r:?}");
                        assert_eq!(r.count, 2 * r.total);
                    }
                    checked += 1;
                }
                checked
            })
        })
        .collect();
    for k in 2..300 {
        table
            .replace(meta((k % 4) as usize), &version(k, (k % 4) as usize))
            .unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}
