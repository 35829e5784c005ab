use super::eval::{QUICK_SCAN_VALUES, TALLY_MAX_VALUES, rank_keys};
use super::*;
use crate::hint::{WeightEntry, Weightlist};
use crate::query::Query;
use crate::rank::{QueryOptions, Referral, TermStatus};
use crate::substring::{SUMMARY_TOPS, SummaryConfig};
use crate::thesaurus::Thesaurus;
use bytes::Bytes;
use std::time::Duration;

/// A DSI from its text (tests here and above the table).
pub(crate) fn dsi(s: &str) -> Dsi {
    Dsi::new(s).unwrap()
}

/// Metadata of peer `d`, as a poll would bring it.
pub(crate) fn meta(d: &str) -> PeerMeta {
    PeerMeta {
        dsi: dsi(d),
        base_uris: vec![format!("cip://peer-{d}/")],
        dsi_description: Some(format!("peer {d}")),
        received: SystemTime::UNIX_EPOCH,
        expires: None,
        via: Some("upstream".into()),
        path: Vec::new(),
    }
}

fn spec(t: &str, a: &str) -> AttrSpec {
    AttrSpec {
        template: t.into(),
        attribute: a.into(),
    }
}

type Lists<'a> = [(&'a str, &'a str, &'a [(&'a str, u64)])];

fn hint(total: u64, lists: &Lists<'_>) -> CipHint {
    CipHint {
        url: "-".into(),
        total_object_count: total,
        weightlists: lists
            .iter()
            .map(|(t, a, es)| {
                let entries = es
                    .iter()
                    .map(|(v, c)| WeightEntry {
                        value: Bytes::copy_from_slice(v.as_bytes()),
                        count: *c,
                    })
                    .collect();
                (spec(t, a), Weightlist::new(entries))
            })
            .collect(),
        ..CipHint::default()
    }
}

fn q(s: &str) -> Query {
    Query::parse(s).unwrap()
}

fn summary(r: &[Referral]) -> Vec<(String, u64, bool)> {
    r.iter()
        .map(|r| (r.dsi.to_string(), r.count, r.definite))
        .collect()
}

fn sample() -> RoutingTable {
    let t = RoutingTable::new(TableConfig {
        node: Some(dsi("9.9")),
        ..TableConfig::default()
    });
    t.replace(
        meta("1.1"),
        &hint(
            100,
            &[(
                "DOCUMENT",
                "Author",
                &[("Garcia", 10), ("Jose Garcia y Montes", 3)],
            )],
        ),
    )
    .unwrap();
    t.replace(
        meta("1.2"),
        &hint(
            50,
            &[("document", "AUTHOR-1", &[("GARCIA", 20), ("Smith", 5)])],
        ),
    )
    .unwrap();
    t.replace(
        meta("1.3"),
        &hint(10, &[("FILE", "Author", &[("garcia", 10)])]),
    )
    .unwrap();
    t
}

#[test]
fn exact_lookup_folds_case_suffix_and_template() {
    let t = sample();
    let opts = QueryOptions::default();
    assert_eq!(
        summary(&t.query(&q("DOCUMENT:Author=garcia"), &opts)),
        vec![("1.2".into(), 20, true), ("1.1".into(), 10, true)]
    );
    // Without a template FILE:Author counts too; 1.3 beats 1.1 on count/total.
    assert_eq!(
        summary(&t.query(&q("author=GARCIA"), &opts)),
        vec![
            ("1.2".into(), 20, true),
            ("1.3".into(), 10, true),
            ("1.1".into(), 10, true)
        ]
    );
    let r = &t.query(&q("Author=garcia"), &opts)[0];
    assert_eq!(r.base_uris(), ["cip://peer-1.2/".to_string()]);
    assert_eq!(r.dsi_description(), Some("peer 1.2"));
    assert_eq!(r.values, vec![(Bytes::from_static(b"GARCIA"), 20)]);
    assert_eq!(r.values.to_vec(), vec![(Bytes::from_static(b"GARCIA"), 20)]);
    assert!(t.query(&q("Author=Garci"), &opts).is_empty());
    assert!(t.query(&q("Title=Garcia"), &opts).is_empty());
}

#[test]
fn substring_rfc_example() {
    let t = sample();
    let r = t.query(&q("DOCUMENT:Author~Garcia"), &QueryOptions::default());
    assert_eq!(
        summary(&r),
        vec![("1.2".into(), 20, true), ("1.1".into(), 13, true)]
    );
    assert_eq!(r[1].matched_values, 2);
    // One spelling stands for all that fold together.
    let (value, count) = r[1].values.get(0).unwrap();
    assert!(value.eq_ignore_ascii_case(b"garcia"));
    assert_eq!(count, 10);
}

#[test]
fn single_term_order_matches_rank_order() {
    // Equal counts: higher ratio (smaller total) first, then DSI; the fast path must
    // agree with `rank_order` (the general path). (A total of 0 ranks last, but a hint
    // with counts and no total is refused, so none is here.)
    let t = RoutingTable::new(TableConfig::default());
    for (d, total, count) in [
        ("1.5", 20, 5),
        ("1.4", 10, 5),
        ("1.3", 5, 5),
        ("1.2", 5, 5),
        ("1.1", 9, 9),
        ("1.6", 1, 1),
    ] {
        let lists: &Lists<'_> = &[("DOCUMENT", "Author", &[("Smith", count)])];
        t.replace(meta(d), &hint(total, lists)).unwrap();
    }
    let fast = t.query(&q("Author=smith"), &QueryOptions::default());
    let order: Vec<String> = fast.iter().map(|r| r.dsi.to_string()).collect();
    assert_eq!(order, ["1.1", "1.2", "1.3", "1.4", "1.5", "1.6"]);
    let general = t.query(
        &q("Author=smith"),
        &QueryOptions {
            max_values: TALLY_MAX_VALUES + 1,
            ..QueryOptions::default()
        },
    );
    assert_eq!(summary(&fast), summary(&general));
    let routes: Vec<String> = t
        .route(&q("Author=smith"), &QueryOptions::default())
        .iter()
        .map(|r| r.meta.dsi.to_string())
        .collect();
    assert_eq!(routes, order);
}

#[test]
fn conjunction_takes_the_minimum() {
    let t = sample();
    let r = t.query(&q("Author~garcia & Author=smith"), &QueryOptions::default());
    assert_eq!(summary(&r), vec![("1.2".into(), 5, true)]);
    let e = t.explain(&q("Author~garcia & Author=smith"), &QueryOptions::default());
    assert!(e[0].rank.contains("min(20, 5)"), "{}", e[0].rank);
    // The first spelling the table saw names the attribute.
    assert_eq!(
        e[0].terms[1].matches[0].attribute,
        spec("DOCUMENT", "Author")
    );
}

/// Imports `hints` as peers `1.0`, `1.1`, ...: in one batch (one segment) or one by one.
fn load(t: &RoutingTable, hints: &[CipHint], bulk: bool) {
    if bulk {
        let r = t.replace_all(
            hints
                .iter()
                .enumerate()
                .map(|(p, h)| (meta(&format!("1.{p}")), h)),
        );
        assert!(r.iter().all(Result::is_ok));
    } else {
        for (p, h) in hints.iter().enumerate() {
            t.replace(meta(&format!("1.{p}")), h).unwrap();
        }
    }
}

/// A background build that panics still counts itself done: waiting for the
/// summaries never hangs on it.
#[test]
fn a_failed_summary_build_is_not_waited_for() {
    let t = RoutingTable::default();
    let build = PendingBuild::new(&t.pending);
    assert_eq!(t.stats().summaries_pending, 1);
    let thread = std::thread::spawn(move || {
        let _build = build;
        panic!("summary build failed (on purpose, in a test)");
    });
    assert!(thread.join().is_err());
    t.wait_for_summaries();
    assert_eq!(t.stats().summaries_pending, 0);
}

/// A value held in several segments lists, for each peer, the spelling of the segment
/// holding that peer's posting.
#[test]
fn exact_values_keep_each_segments_spelling() {
    let t = RoutingTable::default();
    // The first hint is more than twice the second, so the two segments stay apart.
    let first: &[(&str, u64)] = &[("Garcia", 3), ("a", 1), ("b", 1), ("c", 1), ("d", 1)];
    let hints = [
        hint(10, &[("DOCUMENT", "Author", first)]),
        hint(10, &[("DOCUMENT", "Author", &[("GARCIA", 5)])]),
    ];
    load(&t, &hints, false);
    assert_eq!(t.stats().segments, 2);
    let r = t.query(&q("DOCUMENT:Author=garcia"), &QueryOptions::default());
    let listed: Vec<(String, Vec<(Bytes, u64)>)> = r
        .iter()
        .map(|r| (r.dsi.to_string(), r.values.to_vec()))
        .collect();
    assert_eq!(
        listed,
        [
            ("1.1".to_string(), vec![(Bytes::from_static(b"GARCIA"), 5)]),
            ("1.0".to_string(), vec![(Bytes::from_static(b"Garcia"), 3)])
        ]
    );
}

/// Counts past 32 bits rank as exactly as small ones (the wide rank keys), in both the
/// direct exact path (one bulk segment) and the summing one.
#[test]
fn counts_past_32_bits_rank_exactly() {
    let big = 5_000_000_000u64;
    for bulk in [true, false] {
        let t = RoutingTable::default();
        let total = 2 * big;
        let hints = [
            hint(
                total,
                &[("DOCUMENT", "Author", &[("Garcia", big), ("Garcin", 7)])],
            ),
            hint(
                total,
                &[("DOCUMENT", "Author", &[("Garcia", u64::from(u32::MAX))])],
            ),
            hint(
                total,
                &[("DOCUMENT", "Author", &[("Garcia", 3), ("Garcin", big)])],
            ),
        ];
        load(&t, &hints, bulk);
        let opts = QueryOptions::default();
        assert_eq!(
            summary(&t.query(&q("DOCUMENT:Author=garcia"), &opts)),
            vec![
                ("1.0".into(), big, true),
                ("1.1".into(), u64::from(u32::MAX), true),
                ("1.2".into(), 3, true)
            ],
            "bulk {bulk}"
        );
        // Sums over two values: big + 7 for 1.0, big + 3 for 1.2.
        assert_eq!(
            summary(&t.query(&q("DOCUMENT:Author~garci"), &opts)),
            vec![
                ("1.0".into(), big + 7, true),
                ("1.2".into(), big + 3, true),
                ("1.1".into(), u64::from(u32::MAX), true)
            ],
            "bulk {bulk}"
        );
    }
}

/// An exact answer from one segment lists its one value for every referral, whether
/// the value is held inline (short) or in the answer's buffer (long).
#[test]
fn exact_answers_list_their_one_value() {
    let long = "A value well over forty-six bytes long, to leave the inline slot";
    for value in ["Garcia", long] {
        let t = RoutingTable::default();
        let hints = [
            hint(10, &[("DOCUMENT", "Author", &[(value, 3), ("x", 1)])]),
            hint(20, &[("DOCUMENT", "Author", &[(value, 5)])]),
        ];
        load(&t, &hints, true);
        assert_eq!(t.stats().segments, 1);
        let opts = QueryOptions::default();
        let text = format!("DOCUMENT:Author=\"{}\"", value.to_ascii_uppercase());
        let answer = t.answer(&q(&text), &opts);
        type Listed = Vec<(String, Vec<(Vec<u8>, u64)>)>;
        let got: Listed = answer
            .iter()
            .map(|r| {
                let values = r.values().map(|(v, c)| (v.to_vec(), c)).collect();
                (r.dsi().to_string(), values)
            })
            .collect();
        let v = value.as_bytes().to_vec();
        assert_eq!(
            got,
            [
                ("1.1".to_string(), vec![(v.clone(), 5)]),
                ("1.0".to_string(), vec![(v.clone(), 3)])
            ]
        );
        let owned = t.query(&q(&text), &opts);
        assert_eq!(owned[1].values, vec![(Bytes::from(v), 3)]);
        assert_eq!(owned[1].matched_values, 1);
    }
}

/// Twelve peers' values made of a few syllables (so that substrings match many of them,
/// in mixed case), with their hints over two attributes.
fn syllable_peers() -> (Vec<Vec<(String, u64)>>, Vec<CipHint>) {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    const SYL: [&str; 6] = ["an", "Ber", "cor", "dal", "EL", "tor"];
    let value = |next: &mut dyn FnMut(u64) -> u64| {
        let mut v = String::new();
        for _ in 0..2 + next(3) {
            v.push_str(SYL[next(SYL.len() as u64) as usize]);
            if next(3) == 0 {
                v.push(' ');
            }
        }
        v
    };
    let mut peers: Vec<Vec<(String, u64)>> = Vec::new();
    for _ in 0..12 {
        peers.push((0..40).map(|_| (value(&mut next), 1 + next(9))).collect());
    }
    let hints = peers
        .iter()
        .enumerate()
        .map(|(p, list)| {
            let es: Vec<(&str, u64)> = list.iter().map(|(v, c)| (v.as_str(), *c)).collect();
            // Two attributes, so that lookups under one of them skip the other's sums.
            let (a, b) = es.split_at(es.len() / 3);
            hint(
                100 + p as u64,
                &[("DOCUMENT", "Author", b), ("DOCUMENT", "Title", a)],
            )
        })
        .collect();
    (peers, hints)
}

/// 30 peers of 800 values each (`anber 7 79`), past [`QUICK_SCAN_VALUES`] together.
fn anber_hints() -> Vec<CipHint> {
    (0..30)
        .map(|p| {
            let values: Vec<String> = (0..800).map(|i| format!("anber {p} {i}")).collect();
            let es: Vec<(&str, u64)> = values.iter().map(|v| (v.as_str(), 1)).collect();
            hint(1000, &[("DOCUMENT", "Author", &es)])
        })
        .collect()
}

/// Memoized substring sums answer as scanning does: when first computed, when read
/// back, after hints were replaced or removed (their slots dead in the memoized
/// segment), and with a budget so small that entries keep being forgotten.
#[test]
fn memoized_sums_answer_as_scanning_does() {
    let (peers, hints) = syllable_peers();
    let off = SummaryConfig {
        min_values: usize::MAX,
        ..SummaryConfig::everything()
    };
    // No n-gram summarized; every substring memoized.
    let memo = |bytes: usize| SummaryConfig {
        min_matches: usize::MAX,
        memo_bytes: bytes,
        memo_min_candidates: 1,
        ..SummaryConfig::everything()
    };
    let build = |cfg: SummaryConfig| {
        let t = RoutingTable::new(TableConfig {
            summaries: cfg,
            ..TableConfig::default()
        });
        load(&t, &hints, true);
        t
    };
    let plain = build(off);
    let memoized = build(memo(64 << 20));
    let tiny = build(memo(3000));
    assert_eq!(memoized.stats().summaries, 0);
    let compare = |round: &str| {
        for list in &peers {
            for (v, _) in list.iter().take(4) {
                let lower = v.to_ascii_lowercase();
                for len in 1..=8.min(lower.len()) {
                    let needle = &lower[lower.len() - len..];
                    for (attr, k, limit) in [("Author", 0, 3), ("Author", 3, 100), ("Title", 5, 4)]
                    {
                        let opts = QueryOptions {
                            limit,
                            max_values: k,
                            ..QueryOptions::default()
                        };
                        let text = format!("DOCUMENT:{attr}~\"{needle}\"");
                        let want = plain.query(&q(&text), &opts);
                        for t in [&memoized, &tiny] {
                            // Computed, then read back.
                            for pass in 0..2 {
                                assert_eq!(
                                    t.query(&q(&text), &opts),
                                    want,
                                    "{round}: {text} k {k} limit {limit} pass {pass}"
                                );
                            }
                        }
                    }
                }
            }
        }
    };
    compare("loaded");
    let st = memoized.stats();
    assert!(st.memoized > 20 && st.memo_bytes > 0, "{st:?}");
    // Each needle computed once, then read back (the second pass, and the first pass
    // of the queries asking it again).
    assert!(st.memo_computed >= st.memoized as u64, "{st:?}");
    assert!(st.memo_hits >= st.memo_computed, "{st:?}");
    assert!(tiny.stats().memo_bytes <= 3000);
    // Replace two peers' hints with others' values and remove a third: their slots
    // die in the memoized segment.
    for t in [&plain, &memoized, &tiny] {
        for (p, from) in [(0usize, 5usize), (1, 7)] {
            t.replace(meta(&format!("1.{p}")), &hints[from]).unwrap();
        }
        assert!(t.remove(&Dsi::new("1.2").unwrap()));
    }
    compare("after replacing");
    // Merging everything drops the old segments and their memo charge with them.
    memoized.compact();
    let st = memoized.stats();
    assert_eq!(st.segments, 1);
    assert_eq!(st.memoized, 0, "{st:?}");
    assert_eq!(st.memo_bytes, 0);
    compare("after merging");
}

/// A substring term is quick once every big segment has its sums; other shapes of
/// query are not, whatever is cached.
#[test]
fn substring_queries_are_quick_once_their_sums_are_kept() {
    let (_, hints) = syllable_peers();
    let t = RoutingTable::new(TableConfig {
        summaries: SummaryConfig {
            min_values: 1,
            min_matches: usize::MAX,
            memo_bytes: 1 << 20,
            memo_min_candidates: 1,
            ..SummaryConfig::everything()
        },
        ..TableConfig::default()
    });
    load(&t, &hints, true);
    let opts = QueryOptions::default();
    assert!(t.answers_quickly(&q("DOCUMENT:Author=anber"), &opts));
    assert!(
        t.answers_quickly(&q("DOCUMENT:Nothing~anb"), &opts),
        "no such attribute"
    );
    // The table is smaller than QUICK_SCAN_VALUES: any substring is quick.
    assert!(t.answers_quickly(&q("DOCUMENT:Author~anb"), &opts));
    // Past it, only once the sums are kept.
    let big = anber_hints();
    let r = t.replace_all(
        big.iter()
            .enumerate()
            .map(|(p, h)| (meta(&format!("2.{p}")), h)),
    );
    assert!(r.iter().all(Result::is_ok));
    assert!(t.stats().distinct_values >= QUICK_SCAN_VALUES);
    let term = q("DOCUMENT:Author~anber");
    assert!(!t.answers_quickly(&term, &opts));
    let first = t.query(&term, &opts);
    assert!(t.answers_quickly(&term, &opts));
    assert_eq!(t.query(&term, &opts), first);
    assert!(!t.answers_quickly(&q("DOCUMENT:Author~anbe"), &opts));
    // Two terms, possible referrals or many values per referral take the general path.
    assert!(!t.answers_quickly(&q("DOCUMENT:Author~anber & DOCUMENT:Author=x"), &opts));
    let possible = QueryOptions {
        include_possible: true,
        ..QueryOptions::default()
    };
    assert!(!t.answers_quickly(&term, &possible));
    let many = QueryOptions {
        max_values: SUMMARY_TOPS + 1,
        ..QueryOptions::default()
    };
    assert!(!t.answers_quickly(&term, &many));
    // Through a thesaurus naming one attribute the same sums serve; naming two, the
    // general path.
    let with = |text: &str| QueryOptions {
        thesaurus: Some(Arc::new(crate::thesaurus::Thesaurus::parse(text).unwrap())),
        ..QueryOptions::default()
    };
    assert!(t.answers_quickly(&term, &with("DOCUMENT:Author = DC:Creator\n")));
    assert!(!t.answers_quickly(&term, &with("DOCUMENT:Author = DOCUMENT:Title\n")));
}

/// Summaries change only speed: with every n-gram summarized, bulk and incremental
/// segments answer every substring query as scanning does.
#[test]
fn summaries_answer_as_scanning_does() {
    let (peers, hints) = syllable_peers();
    let forced = SummaryConfig::everything();
    let off = SummaryConfig {
        min_values: usize::MAX,
        ..forced
    };
    let build = |cfg: SummaryConfig, bulk: bool| {
        let t = RoutingTable::new(TableConfig {
            summaries: cfg,
            ..TableConfig::default()
        });
        load(&t, &hints, bulk);
        t
    };
    let plain = build(off, true);
    assert_eq!(plain.stats().summaries, 0);
    for (bulk, background) in [(true, false), (false, false), (true, true)] {
        let summed = build(
            SummaryConfig {
                background,
                ..forced
            },
            bulk,
        );
        // Queries while the summaries are being built (in the background case) and
        // after: the answers never change.
        let compare = |summed: &RoutingTable| {
            let mut asked = 0;
            for list in &peers {
                for (v, _) in list.iter().take(6) {
                    let lower = v.to_ascii_lowercase();
                    for len in 3..=7.min(lower.len()) {
                        for at in [0, lower.len() - len] {
                            let needle = &lower[at..at + len];
                            for (k, limit) in [(0, 3), (1, 100), (3, 5), (5, 100), (7, 2)] {
                                let opts = QueryOptions {
                                    limit,
                                    max_values: k,
                                    ..QueryOptions::default()
                                };
                                let text = format!("DOCUMENT:Author~\"{needle}\"");
                                let want = plain.query(&q(&text), &opts);
                                let got = summed.query(&q(&text), &opts);
                                assert_eq!(got, want, "{text} k {k} limit {limit} bulk {bulk}");
                                let routes = |t: &RoutingTable| -> Vec<(String, u64)> {
                                    t.route(&q(&text), &opts)
                                        .iter()
                                        .map(|r| (r.meta.dsi.to_string(), r.count))
                                        .collect()
                                };
                                assert_eq!(routes(summed), routes(&plain), "{text}");
                                asked += 1;
                            }
                        }
                    }
                }
            }
            asked
        };
        std::thread::scope(|s| {
            let during = s.spawn(|| compare(&summed));
            summed.wait_for_summaries();
            assert!(during.join().is_ok_and(|n| n > 500));
        });
        let st = summed.stats();
        assert!(st.summaries > 0);
        assert_eq!(st.summaries_pending, 0);
        let asked = compare(&summed);
        assert!(asked > 500);
    }
}

/// Narrow summaries keep only each n-gram's best slots: pages among them are answered
/// from them, others (bigger pages, ties cut at the last kept sum, peers gone since)
/// scan, and the answers never change.
#[test]
fn narrow_summaries_answer_as_scanning_does() {
    // Counts with ties at every place a cut can fall; totals so that the order of tied
    // peers is not their slot order.
    let counts = [3u64, 1, 3, 2, 3, 1, 2, 3, 1, 1, 2];
    let hints: Vec<CipHint> = counts
        .iter()
        .enumerate()
        .map(|(p, &c)| {
            let own = format!("garcia {p}");
            let es = [(own.as_str(), c), ("garcia", 1), ("lopez", 2)];
            // Under Title, too few postings for a narrow summary: summed on the spot.
            let titles: &[(&str, u64)] = if p == 3 { &[("garcia's way", 4)] } else { &[] };
            hint(
                50 + (p as u64 * 37) % 11,
                &[("DOCUMENT", "Author", &es), ("DOCUMENT", "Title", titles)],
            )
        })
        .collect();
    let plain = RoutingTable::default();
    load(&plain, &hints, true);
    for slots in [1, 2, 3, 5] {
        let narrow = SummaryConfig {
            min_matches: usize::MAX,
            narrow_min_values: 2,
            narrow_slots: slots,
            ..SummaryConfig::everything()
        };
        for bulk in [true, false] {
            let t = RoutingTable::new(TableConfig {
                summaries: narrow,
                ..TableConfig::default()
            });
            load(&t, &hints, bulk);
            t.wait_for_summaries();
            assert!(t.stats().summaries > 0);
            let compare = |t: &RoutingTable, plain: &RoutingTable, what: &str| {
                for (attr, needle) in ["garc", "garci", "arcia", "garcia", "rcia ", "lope"]
                    .into_iter()
                    .flat_map(|n| [("Author", n), ("Title", n)])
                {
                    let text = format!("DOCUMENT:{attr}~\"{needle}\"");
                    for limit in 1..=counts.len() + 1 {
                        for k in [0, 1, 5] {
                            let opts = QueryOptions {
                                limit,
                                max_values: k,
                                ..QueryOptions::default()
                            };
                            assert_eq!(
                                t.query(&q(&text), &opts),
                                plain.query(&q(&text), &opts),
                                "{text} limit {limit} k {k} slots {slots} bulk {bulk} {what}"
                            );
                        }
                    }
                }
            };
            compare(&t, &plain, "");
            // Dead slots among the kept ones.
            let gone = |t: &RoutingTable| {
                for p in [0, 4] {
                    assert!(t.remove(&dsi(&format!("1.{p}"))));
                }
            };
            let less = RoutingTable::default();
            load(&less, &hints, true);
            gone(&less);
            gone(&t);
            compare(&t, &less, "after removals");
        }
    }
}

/// Peers replaced or removed leave dead slots among a narrow summary's kept ones; once
/// more than an eighth of a segment's slots have died, its summaries are built again,
/// and pages are read from them again.
#[test]
fn narrow_summaries_are_rebuilt_once_enough_peers_are_gone() {
    let hints: Vec<CipHint> = (0..16u64)
        .map(|p| {
            let own = format!("garcia {p}");
            hint(100, &[("DOCUMENT", "Author", &[(own.as_str(), 10 + p)])])
        })
        .collect();
    let t = narrow_table(3);
    load(&t, &hints, true);
    t.wait_for_summaries();
    // Whether the segment's summary of `garc` holds a page of 3.
    let page_of_3 = |t: &RoutingTable| {
        let snap = t.snapshot();
        let attr = snap.attrs.id(&spec("DOCUMENT", "Author")).unwrap();
        let [seg] = &snap.segments[..] else {
            panic!("one segment: {}", snap.segments.len());
        };
        let sums = seg.summaries().expect("summarized");
        let summary = sums.lookup(b"garc", attr).expect("garc is summarized");
        summary.exact_for(3, |slot| snap.live_tie(slot, None).is_some())
    };
    assert!(page_of_3(&t));
    // Two of the three best are gone: 14 of 16 slots live, seven eighths.
    for p in [15, 14] {
        assert!(t.remove(&dsi(&format!("1.{p}"))));
    }
    t.wait_for_summaries();
    assert!(!page_of_3(&t), "not built again yet");
    let plain = RoutingTable::default();
    load(&plain, &hints, true);
    let opts = QueryOptions {
        limit: 3,
        ..QueryOptions::default()
    };
    let ask = |t: &RoutingTable| t.query(&q("DOCUMENT:Author~garc"), &opts);
    for p in [15, 14, 13] {
        plain.remove(&dsi(&format!("1.{p}")));
    }
    // One more: 13 of 16, under seven eighths.
    assert!(t.remove(&dsi("1.13")));
    t.wait_for_summaries();
    assert!(page_of_3(&t), "built again");
    assert_eq!(ask(&t), ask(&plain));
    assert_eq!(ask(&t).len(), 3);
}

/// On a table too big to scan on the spot, a needle is quick when its narrow summary
/// holds the page asked for, or when narrow summaries cover its length and it has none
/// (few values hold it).
#[test]
fn narrowly_summarized_substrings_are_quick() {
    let t = RoutingTable::new(TableConfig {
        summaries: SummaryConfig {
            min_values: 1,
            min_matches: usize::MAX,
            narrow_min_values: 64,
            narrow_slots: 16,
            ..SummaryConfig::everything()
        },
        ..TableConfig::default()
    });
    let big = anber_hints();
    load(&t, &big, true);
    t.wait_for_summaries();
    assert!(t.stats().distinct_values >= QUICK_SCAN_VALUES);
    let page = |limit| QueryOptions {
        limit,
        ..QueryOptions::default()
    };
    // Held by every value: its best 16 slots answer pages of up to 16.
    assert!(t.answers_quickly(&q("DOCUMENT:Author~anber"), &page(12)));
    assert!(t.answers_quickly(&q("DOCUMENT:Author~nber "), &page(16)));
    assert!(!t.answers_quickly(&q("DOCUMENT:Author~anber"), &page(17)));
    // Held by 11 values: covered, not summarized.
    assert!(t.answers_quickly(&q("DOCUMENT:Author~\" 7 79\""), &page(100)));
    // Held by no value: nothing to sum.
    assert!(t.answers_quickly(&q("DOCUMENT:Author~zzzzz"), &page(12)));
    // Seven bytes: longer than narrow summaries go.
    assert!(!t.answers_quickly(&q("DOCUMENT:Author~\"anber 7\""), &page(12)));
    // With room for one 4-gram's summaries (the broadest: `anbe`, `nber` and `ber ` are
    // in every value; ties by key), the others' extensions are not known to be narrow.
    let tight = RoutingTable::new(TableConfig {
        summaries: SummaryConfig {
            min_values: 1,
            min_matches: usize::MAX,
            narrow_min_values: 64,
            narrow_slots: 16,
            narrow_budget_divisor: usize::MAX,
            // One thread takes one 4-gram before it sees the bound.
            threads: 1,
            ..SummaryConfig::everything()
        },
        ..TableConfig::default()
    });
    load(&tight, &big, true);
    tight.wait_for_summaries();
    assert!(tight.answers_quickly(&q("DOCUMENT:Author~\"anber\""), &page(12)));
    assert!(tight.answers_quickly(&q("DOCUMENT:Author~\"anbex\""), &page(12)));
    assert!(!tight.answers_quickly(&q("DOCUMENT:Author~\"ber 7\""), &page(12)));
    // A 4-gram too few values hold (`7 79`: 33 values, with 7, 17 and 27): its extensions
    // are narrow whatever the bound.
    assert!(tight.answers_quickly(&q("DOCUMENT:Author~\"7 799\""), &page(12)));
    assert!(!tight.answers_quickly(&q("DOCUMENT:Author~\" 7 79\""), &page(12)));
    for text in [
        "DOCUMENT:Author~anber",
        "DOCUMENT:Author~\" 7 79\"",
        "DOCUMENT:Author~\"ber 7\"",
        "DOCUMENT:Author~\"7 799\"",
    ] {
        let plain = RoutingTable::default();
        load(&plain, &big, true);
        for limit in [1, 12, 16, 17, 100] {
            assert_eq!(
                tight.query(&q(text), &page(limit)),
                plain.query(&q(text), &page(limit)),
                "{text} limit {limit}"
            );
        }
    }
    for text in ["DOCUMENT:Author~anber", "DOCUMENT:Author~\" 7 79\""] {
        let plain = RoutingTable::default();
        load(&plain, &big, true);
        for limit in [1, 12, 16, 17, 100] {
            assert_eq!(
                t.query(&q(text), &page(limit)),
                plain.query(&q(text), &page(limit)),
                "{text} limit {limit}"
            );
        }
    }
}

#[test]
fn possible_referrals_follow_definite_ones() {
    let t = sample();
    let mut h = hint(1000, &[("DOCUMENT", "Author", &[("Other", 50)])]);
    h.thresholds.push((spec("DOCUMENT", "Author"), 10));
    t.replace(meta("1.4"), &h).unwrap();
    let opts = QueryOptions {
        include_possible: true,
        ..QueryOptions::default()
    };
    let r = t.query(&q("DOCUMENT:Author=Garcia"), &opts);
    assert_eq!(summary(&r).last(), Some(&("1.4".into(), 0, false)));
    assert_eq!(r.last().unwrap().threshold, Some(10));
    assert_eq!(r.len(), 3);
    assert_eq!(
        t.query(&q("DOCUMENT:Author=Garcia"), &QueryOptions::default())
            .len(),
        2
    );
    let e = t.explain(&q("DOCUMENT:Author=Garcia"), &opts);
    assert_eq!(e[2].terms[0].status, TermStatus::Possible { threshold: 10 });
}

#[test]
fn replace_remove_expire() {
    let t = sample();
    let out = t
        .replace(
            meta("1.1"),
            &hint(5, &[("DOCUMENT", "Author", &[("Nobody", 1)])]),
        )
        .unwrap();
    assert!(out.replaced);
    assert_eq!(
        summary(&t.query(&q("DOCUMENT:Author=garcia"), &QueryOptions::default())),
        vec![("1.2".into(), 20, true)]
    );
    assert_eq!(t.peer_meta(&dsi("1.2")).unwrap().dsi, dsi("1.2"));
    assert!(t.remove(&dsi("1.2")));
    assert!(t.peer_meta(&dsi("1.2")).is_none());
    assert!(!t.remove(&dsi("1.2")));
    assert!(
        t.query(&q("DOCUMENT:Author=garcia"), &QueryOptions::default())
            .is_empty()
    );
    let mut m = meta("1.5");
    m.expires = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(10));
    t.replace(m, &hint(1, &[("DOCUMENT", "Author", &[("Garcia", 1)])]))
        .unwrap();
    let late = QueryOptions {
        now: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(20)),
        ..QueryOptions::default()
    };
    assert!(t.query(&q("DOCUMENT:Author=garcia"), &late).is_empty());
    assert_eq!(
        t.query(&q("DOCUMENT:Author=garcia"), &QueryOptions::default())
            .len(),
        1
    );
    assert_eq!(
        t.expire(SystemTime::UNIX_EPOCH + Duration::from_secs(5)),
        Vec::<Dsi>::new()
    );
    assert_eq!(
        t.expire(SystemTime::UNIX_EPOCH + Duration::from_secs(10)),
        vec![dsi("1.5")]
    );
    let peers: Vec<String> = t.peers().iter().map(|p| p.dsi.to_string()).collect();
    assert_eq!(peers, vec!["1.1", "1.3"]);
    t.compact();
    let st = t.stats();
    assert_eq!(
        (st.peers, st.segments, st.entries, st.dead_entries),
        (2, 1, 2, 0)
    );
}

#[test]
fn thesaurus_at_query_time() {
    let t = RoutingTable::default();
    t.replace(
        meta("1.1"),
        &hint(10, &[("Dublin-Core-1", "CREATOR", &[("Garcia", 4)])]),
    )
    .unwrap();
    let plain = QueryOptions::default();
    assert!(t.query(&q("DOCUMENT:Author=garcia"), &plain).is_empty());
    let th = Thesaurus::parse("DOCUMENT:Author = FILE:Author = Dublin-Core-1:CREATOR").unwrap();
    let opts = QueryOptions {
        thesaurus: Some(Arc::new(th)),
        ..QueryOptions::default()
    };
    assert_eq!(
        summary(&t.query(&q("DOCUMENT:Author=garcia"), &opts)),
        vec![("1.1".into(), 4, true)]
    );
    assert_eq!(
        summary(&t.query(&q("Author~GARC"), &opts)),
        vec![("1.1".into(), 4, true)]
    );
}

#[test]
fn refuses_loops() {
    let t = sample();
    assert!(matches!(
        t.replace(meta("9.9"), &hint(1, &[])),
        Err(ImportError::OwnDsi { .. })
    ));
    let mut h = hint(1, &[("DOCUMENT", "Author", &[("x", 1)])]);
    h.extra
        .push(cip_proto::soif::Attribute::new("Provenance-1", "1.7").unwrap());
    h.extra
        .push(cip_proto::soif::Attribute::new("provenance-2", "9.9").unwrap());
    assert_eq!(
        t.replace(meta("1.7"), &h),
        Err(ImportError::Loop {
            peer: dsi("1.7"),
            node: dsi("9.9")
        })
    );
    h.extra[1] = cip_proto::soif::Attribute::new("Provenance-2", "1.02").unwrap();
    assert!(matches!(
        t.replace(meta("1.7"), &h),
        Err(ImportError::BadProvenance { .. })
    ));
    h.extra.pop();
    t.replace(meta("1.7"), &h).unwrap();
    let p = t.peers().into_iter().find(|p| p.dsi == dsi("1.7")).unwrap();
    assert_eq!(p.provenance, vec![dsi("1.7")]);
}

#[test]
fn limits_are_enforced() {
    let limits = TableLimits {
        max_peers: 1,
        max_value_len: 3,
        ..TableLimits::default()
    };
    let t = RoutingTable::new(TableConfig {
        node: None,
        limits,
        ..TableConfig::default()
    });
    t.replace(meta("1.1"), &hint(1, &[("D", "A", &[("abc", 1)])]))
        .unwrap();
    assert!(matches!(
        t.replace(meta("1.1"), &hint(1, &[("D", "A", &[("abcd", 1)])])),
        Err(ImportError::ValueTooLong {
            index: 0,
            len: 4,
            max: 3,
            ..
        })
    ));
    assert_eq!(
        t.replace(meta("1.2"), &hint(1, &[])),
        Err(ImportError::TooManyPeers { max: 1 })
    );
    // The refused replacement left the old hint in place.
    assert_eq!(t.query(&q("A=abc"), &QueryOptions::default()).len(), 1);
}

/// An aggregate names every dataset below it: a mesh node with a thousand datasets under
/// it must be taken by default (the old default of 256 refused a simulated mesh's
/// aggregates), with its provenance charged against the memory budget and a list over the
/// configured limit refused.
#[test]
fn long_provenance_lists_are_taken_and_charged() {
    let mut h = hint(1000, &[("DOCUMENT", "Author", &[("x", 1)])]);
    for k in 0..1000 {
        h.extra.push(
            cip_proto::soif::Attribute::new(
                &format!("Provenance-{}", k + 1),
                Bytes::from(format!("1.5.{k}")),
            )
            .unwrap(),
        );
    }
    // "1.5.0".."1.5.9" are 5 bytes, "1.5.10".. 6, "1.5.100".. 7; each 32 more.
    let dsi_bytes: u64 = 10 * 5 + 90 * 6 + 900 * 7;
    assert_eq!(budget_bytes(&h), 1 + 73 + dsi_bytes + 1000 * 32);
    let t = RoutingTable::new(TableConfig::default());
    t.replace(meta("1.7"), &h).unwrap();
    let p = t.peers().into_iter().find(|p| p.dsi == dsi("1.7")).unwrap();
    assert_eq!(p.provenance.len(), 1000);
    assert_eq!(t.stats().budget_bytes, budget_bytes(&h));
    let strict = RoutingTable::new(TableConfig {
        limits: TableLimits {
            max_provenance: 999,
            ..TableLimits::default()
        },
        ..TableConfig::default()
    });
    assert_eq!(
        strict.replace(meta("1.7"), &h),
        Err(ImportError::TooManyProvenance {
            count: 1000,
            max: 999
        })
    );
}

#[test]
fn memory_budgets_are_enforced_at_import() {
    // "abc" costs 3 + 73 bytes: a per-peer budget of 200 takes two such entries, a table
    // budget of 400 five.
    let t = RoutingTable::new(TableConfig {
        limits: TableLimits {
            max_peer_bytes: 200,
            max_table_bytes: 400,
            ..TableLimits::default()
        },
        ..TableConfig::default()
    });
    let two = hint(10, &[("D", "A", &[("abc", 4), ("abd", 1)])]);
    assert_eq!(budget_bytes(&two), 152);
    let three = hint(10, &[("D", "A", &[("abc", 4), ("abd", 1), ("abe", 1)])]);
    assert_eq!(
        t.replace(meta("1.1"), &three).unwrap_err(),
        ImportError::OverPeerBudget {
            bytes: 228,
            max: 200
        }
    );
    t.replace(meta("1.1"), &two).unwrap();
    t.replace(meta("1.2"), &two).unwrap();
    assert_eq!(t.stats().budget_bytes, 304);
    let e = t.replace(meta("1.3"), &two).unwrap_err();
    assert_eq!(
        e,
        ImportError::OverTableBudget {
            bytes: 152,
            held: 304,
            max: 400
        }
    );
    assert!(e.to_string().contains("limits.max_table_bytes"), "{e}");
    // Replacing a held hint frees its own charge first; removing one frees room.
    let one = hint(10, &[("D", "A", &[("abc", 4)])]);
    t.replace(meta("1.2"), &one).unwrap();
    assert_eq!(t.stats().budget_bytes, 228);
    t.replace(meta("1.3"), &two).unwrap();
    assert_eq!(t.stats().budget_bytes, 380);
    assert!(t.replace(meta("1.4"), &one).is_err());
    t.remove(&dsi("1.1"));
    t.replace(meta("1.4"), &one).unwrap();
    assert_eq!(t.stats().budget_bytes, 304);
    // The bulk path charges each hint of the batch against the ones before it.
    let t = RoutingTable::new(TableConfig {
        limits: TableLimits {
            max_table_bytes: 400,
            ..TableLimits::default()
        },
        ..TableConfig::default()
    });
    let results = t.replace_all([
        (meta("2.1"), two.clone()),
        (meta("2.2"), two.clone()),
        (meta("2.3"), two.clone()),
    ]);
    assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
    assert!(
        matches!(results[2], Err(ImportError::OverTableBudget { .. })),
        "{results:?}"
    );
    assert_eq!(t.peers().len(), 2);
}

#[test]
fn implausible_counts_are_refused_and_the_old_hint_stays() {
    let t = RoutingTable::new(TableConfig {
        limits: TableLimits {
            max_total_objects: 1000,
            ..TableLimits::default()
        },
        ..TableConfig::default()
    });
    t.replace(meta("1.1"), &hint(10, &[("D", "A", &[("abc", 4)])]))
        .unwrap();
    let generation = t.generation();
    // A count above the hint's own total.
    assert_eq!(
        t.replace(
            meta("1.1"),
            &hint(10, &[("D", "A", &[("abc", 3), ("x", 11)])])
        ),
        Err(ImportError::CountAboveTotal {
            attribute: "D:A".into(),
            index: 1,
            count: 11,
            total: 10
        })
    );
    // Counts without a total cannot be true either.
    assert!(matches!(
        t.replace(meta("1.1"), &hint(0, &[("D", "A", &[("abc", 1)])])),
        Err(ImportError::CountAboveTotal { total: 0, .. })
    ));
    // A total above the ceiling, however consistent its counts.
    assert_eq!(
        t.replace(meta("1.1"), &hint(u64::MAX, &[("D", "A", &[("abc", 9)])])),
        Err(ImportError::ImplausibleTotal {
            total: u64::MAX,
            max: 1000
        })
    );
    let refused = t.replace_all([(meta("1.2"), hint(1001, &[("D", "A", &[("abc", 1)])]))]);
    assert!(matches!(
        refused[0],
        Err(ImportError::ImplausibleTotal { .. })
    ));
    // Nothing changed: the honest hint still answers, nothing was published.
    let r = t.query(&q("A=abc"), &QueryOptions::default());
    assert_eq!(summary(&r), vec![("1.1".into(), 4, true)]);
    assert_eq!(t.peers().len(), 1);
    assert_eq!(t.generation(), generation);
}

#[test]
fn a_bulk_load_piles_segments_up_and_merges_them_at_its_end() {
    let t = RoutingTable::default();
    t.set_bulk_load(true);
    // Four: the most a load piles up (the fifth segment would merge two).
    for i in 0..4u64 {
        let v = format!("v{i}");
        let h = hint(10, &[("D", "A", &[("shared", 1 + i), (v.as_str(), 2)])]);
        // One at a time, and in batches, which leave the substring index for later.
        if i < 2 {
            t.replace(meta(&format!("1.{i}")), &h).unwrap();
        } else {
            assert!(t.replace_all([(meta(&format!("1.{i}")), &h)])[0].is_ok());
        }
    }
    assert_eq!(t.stats().segments, 4, "no tiered merges during the load");
    // Per segment: (substring index built, exact-match table built).
    let built = |t: &RoutingTable| -> Vec<(bool, bool)> {
        t.current
            .load()
            .segments
            .iter()
            .map(|s| (s.has_grams(), s.has_exact()))
            .collect()
    };
    let (yes, no) = ((true, true), (false, false));
    // Exact lookups in the batches' segments binary-search meanwhile.
    assert_eq!(built(&t), [yes, yes, no, no]);
    let ask = |t: &RoutingTable, text: &str| summary(&t.query(&q(text), &QueryOptions::default()));
    assert_eq!(ask(&t, "A=v2"), vec![("1.2".into(), 2, true)]);
    assert_eq!(ask(&t, "A=V3"), vec![("1.3".into(), 2, true)]);
    let during = ask(&t, "A=shared");
    let during_substring = [ask(&t, "A~hare"), ask(&t, "A~v3"), ask(&t, "A~ar")];
    assert_eq!(during_substring[0], during);
    assert_eq!(during_substring[1], vec![("1.3".into(), 2, true)]);
    let generation = t.generation();
    t.set_bulk_load(false);
    assert_eq!(t.stats().segments, 1);
    assert_eq!(built(&t), [yes]);
    assert_eq!(ask(&t, "A=shared"), during);
    assert_eq!(
        [ask(&t, "A~hare"), ask(&t, "A~v3"), ask(&t, "A~ar")],
        during_substring
    );
    assert_eq!(during.len(), 4);
    assert_eq!(t.generation(), generation, "the merge changes no contents");
    assert_eq!(t.stats().distinct_values, 5);
}

#[test]
fn a_bulk_load_past_its_pile_merges_the_smallest_neighbours() {
    let t = RoutingTable::default();
    t.set_bulk_load(true);
    // Segments of 3, 1, 1, 2 and then 1 entries: the fifth makes five, and the smallest
    // neighbours (1 + 1) become one.
    let sizes = [3usize, 1, 1, 2, 1];
    for (i, &n) in sizes.iter().enumerate() {
        let values: Vec<String> = (0..n).map(|k| format!("p{i}v{k}")).collect();
        let entries: Vec<(&str, u64)> = values.iter().map(|v| (v.as_str(), 1)).collect();
        let h = hint(10, &[("D", "A", &entries)]);
        assert!(t.replace_all([(meta(&format!("1.{i}")), &h)])[0].is_ok());
    }
    let entries = |t: &RoutingTable| -> Vec<usize> {
        t.current
            .load()
            .segments
            .iter()
            .map(|s| s.entries())
            .collect()
    };
    assert_eq!(entries(&t), [3, 2, 2, 1]);
    for i in 0..sizes.len() {
        let r = t.query(&q(&format!("A=p{i}v0")), &QueryOptions::default());
        assert_eq!(summary(&r), vec![(format!("1.{i}"), 1, true)]);
    }
    t.set_bulk_load(false);
    assert_eq!(entries(&t), [8]);
}

#[test]
fn generation_counts_changes() {
    let t = RoutingTable::default();
    assert_eq!(t.generation(), 0);
    t.replace(meta("1.1"), &hint(5, &[("D", "A", &[("abc", 4)])]))
        .unwrap();
    assert_eq!(t.generation(), 1);
    t.replace_all([(meta("1.2"), hint(5, &[("D", "A", &[("x", 1)])]))]);
    assert_eq!(t.generation(), 2);
    assert!(t.remove(&dsi("1.1")));
    assert_eq!(t.generation(), 3);
    assert!(!t.remove(&dsi("1.1")), "nothing removed, nothing published");
    assert_eq!(t.generation(), 3);
    // Same contents: new expiry, same generation.
    let mut m = meta("1.2");
    m.expires = Some(SystemTime::UNIX_EPOCH);
    assert!(t.refresh(m));
    assert_eq!(t.generation(), 3);
    assert!(
        t.query(
            &q("A=x"),
            &QueryOptions {
                now: Some(SystemTime::now()),
                ..QueryOptions::default()
            }
        )
        .is_empty(),
        "the new expiry counts"
    );
    assert!(!t.refresh(meta("1.7")));
    assert_eq!(t.refresh_all([meta("1.2"), meta("1.7")]), [true, false]);
    t.compact();
    assert_eq!(t.generation(), 3);
}

#[test]
fn entries_lists_rows() {
    let t = sample();
    let rows = t.entries(None, None, Some(b"gar"), 10);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].total, 30);
    assert_eq!(rows[0].peers, vec![(dsi("1.1"), 10), (dsi("1.2"), 20)]);
    assert_eq!(rows[1].attribute, spec("FILE", "Author"));
    let rows = t.entries(
        Some(&spec("document", "author")),
        Some(&dsi("1.2")),
        None,
        1,
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].value.clone(), rows[0].total),
        (Bytes::from_static(b"GARCIA"), 20)
    );
}

#[test]
fn many_replacements_keep_segments_few_and_slots_bounded() {
    let t = RoutingTable::default();
    for round in 0..30u64 {
        for p in 0..20 {
            let v = format!("v{p}");
            t.replace(
                meta(&format!("2.{p}")),
                &hint(round + 1, &[("D", "A", &[(&v, round + 1), ("shared", 1)])]),
            )
            .unwrap();
        }
    }
    let st = t.stats();
    assert!(st.segments <= 8, "{st:?}");
    assert!(st.dead_entries <= st.entries, "{st:?}");
    assert!(t.snapshot().slots.len() <= 80);
    let r = t.query(&q("A=shared"), &QueryOptions::default());
    assert_eq!(r.len(), 20);
    assert!(r.iter().all(|r| r.count == 1 && r.total == 30));
    assert_eq!(t.query(&q("A=v3"), &QueryOptions::default())[0].count, 30);
}

#[test]
fn broad_substring_counts_every_value() {
    let t = RoutingTable::default();
    for p in 0..3u64 {
        let values: Vec<String> = (0..400).map(|i| format!("value {i}")).collect();
        let entries: Vec<(&str, u64)> = values.iter().map(|v| (v.as_str(), p + 1)).collect();
        t.replace(
            meta(&format!("3.{p}")),
            &hint(1000, &[("D", "A", &entries)]),
        )
        .unwrap();
    }
    let r = t.query(&q("A~VALUE"), &QueryOptions::default());
    assert_eq!(
        summary(&r),
        vec![
            ("3.2".into(), 1200, true),
            ("3.1".into(), 800, true),
            ("3.0".into(), 400, true)
        ]
    );
    assert!(
        r.iter()
            .all(|r| r.matched_values == 400 && r.values.len() == 5)
    );
    let r = t.query(&q("A~lue 39"), &QueryOptions::default());
    assert_eq!(r[0].matched_values, 11);
}

proptest::proptest! {
    /// `rank_keys` keeps the `limit` smallest keys, ascending, like a full sort.
    #[test]
    fn rank_keys_is_a_partial_sort(
        keys in proptest::collection::btree_set(proptest::prelude::any::<u128>(), 0..80),
        limit in 0usize..90,
        shuffle in proptest::prelude::any::<u64>(),
    ) {
        let mut sorted: Vec<u128> = keys.into_iter().collect();
        let mut got = sorted.clone();
        // A deterministic shuffle: rotate, then reverse every other run.
        if !got.is_empty() {
            let len = got.len();
            got.rotate_left(shuffle as usize % len);
            for chunk in got.chunks_mut(3).step_by(2) {
                chunk.reverse();
            }
        }
        rank_keys(&mut got, limit);
        sorted.truncate(limit);
        proptest::prop_assert_eq!(got, sorted);
    }
}

/// A batch indexed on several threads (one segment per run of hints) answers, and counts
/// each hint, as one indexed on one thread does, in a bulk load and out of one.
#[test]
fn a_batch_indexed_on_several_threads_answers_as_on_one() {
    let (peers, hints) = syllable_peers();
    let table = |threads: usize, bulk: bool| {
        let t = RoutingTable::new(TableConfig {
            index_threads: threads,
            ..TableConfig::default()
        });
        t.set_bulk_load(bulk);
        let outcomes: Vec<(usize, usize)> = t
            .replace_all(
                hints
                    .iter()
                    .enumerate()
                    .map(|(p, h)| (meta(&format!("1.{p}")), h)),
            )
            .into_iter()
            .map(|r| {
                let r = r.unwrap();
                (r.distinct_values, r.entries)
            })
            .collect();
        (t, outcomes)
    };
    let (one, one_outcomes) = table(1, false);
    assert_eq!(one.stats().segments, 1);
    for (threads, bulk) in [(3, false), (3, true), (12, true)] {
        let (many, outcomes) = table(threads, bulk);
        if bulk {
            assert!(
                many.stats().segments > 1,
                "{threads} threads: one segment per run"
            );
        }
        assert_eq!(outcomes, one_outcomes);
        let counts = |t: &RoutingTable| -> Vec<(String, usize, usize)> {
            t.peers()
                .into_iter()
                .map(|p| (p.dsi.to_string(), p.distinct_values, p.entries))
                .collect()
        };
        assert_eq!(counts(&many), counts(&one));
        let opts = QueryOptions {
            limit: 100,
            ..QueryOptions::default()
        };
        for list in &peers {
            for (v, _) in list.iter().take(8) {
                let lower = v.to_ascii_lowercase();
                for text in [
                    format!("DOCUMENT:Author=\"{v}\""),
                    format!("DOCUMENT:Title=\"{v}\""),
                    format!("DOCUMENT:Author~\"{}\"", &lower[..3.min(lower.len())]),
                    format!(
                        "DOCUMENT:Title~\"{}\"",
                        &lower[lower.len().saturating_sub(4)..]
                    ),
                ] {
                    assert_eq!(
                        many.query(&q(&text), &opts),
                        one.query(&q(&text), &opts),
                        "{text}"
                    );
                }
            }
        }
        many.set_bulk_load(false);
        assert_eq!(many.stats().segments, 1);
        assert_eq!(counts(&many), counts(&one));
    }
}

/// A table fed deltas in place, against one fed the same hints whole.
mod deltas_in_place {
    use super::*;
    use crate::delta::HintDelta;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Values that fold alike, hold one another, or neither.
    const WORDS: &[&str] = &[
        "Garcia",
        "garcia",
        "GARCIA",
        "Garcia y Montes",
        "Smith",
        "smithson",
        "Jones",
        "ones",
        "Zed",
        "zedd",
        "alpha",
        "alphabet",
        "beta",
        "Beta",
        "gamma ray",
        "ray",
    ];

    /// A table whose summaries are `summaries`: 0 none (the tables here are too small for
    /// the defaults), 1 broad ones of every n-gram, 2 narrow ones alone, each keeping one
    /// slot (so their blocks are cut and answer pages of one referral).
    fn table(summaries: u8, memo: bool) -> RoutingTable {
        let mut s = match summaries {
            0 => SummaryConfig::default(),
            1 => SummaryConfig::everything(),
            _ => SummaryConfig {
                min_matches: usize::MAX,
                narrow_min_values: 2,
                narrow_slots: 1,
                ..SummaryConfig::everything()
            },
        };
        s.background = false;
        if memo {
            s.memo_bytes = 1 << 20;
            s.memo_min_candidates = 1;
        }
        RoutingTable::new(TableConfig {
            node: Some(dsi("9.9")),
            summaries: s,
            ..TableConfig::default()
        })
    }

    /// A hint of `(list, word, count)` picks; counts of one value in one list summed.
    fn make(total: u64, picks: &[(usize, usize, u64)], threshold: bool) -> CipHint {
        let mut lists: Vec<BTreeMap<&str, u64>> = vec![BTreeMap::new(), BTreeMap::new()];
        for &(l, w, c) in picks {
            *lists[l].entry(WORDS[w]).or_default() += c;
        }
        let names = [("DOCUMENT", "Author"), ("DOCUMENT", "Title")];
        let mut h = CipHint {
            url: "-".into(),
            total_object_count: total,
            weightlists: names
                .iter()
                .zip(&lists)
                .filter(|(_, l)| !l.is_empty())
                .map(|((t, a), l)| {
                    let entries = l
                        .iter()
                        .map(|(v, c)| WeightEntry {
                            value: Bytes::copy_from_slice(v.as_bytes()),
                            count: (*c).min(total),
                        })
                        .collect();
                    (spec(t, a), Weightlist::new(entries))
                })
                .collect(),
            ..CipHint::default()
        };
        if threshold {
            h.thresholds.push((spec("DOCUMENT", "Title"), 3));
        }
        // Values no step changes, so that a patch is small beside the segment it leaves
        // and stays apart from it for a while (as in a real table).
        let filler = (0..40)
            .map(|i| WeightEntry {
                value: Bytes::from(format!("filler ray {i}")),
                count: 1,
            })
            .collect();
        h.weightlists
            .push((spec("DOCUMENT", "Keywords"), Weightlist::new(filler)));
        h
    }

    type Step = (usize, u64, Vec<(usize, usize, u64)>, bool);

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        proptest::collection::vec(
            (
                0usize..3,
                prop_oneof![Just(20u64), Just(8u64), 5u64..30],
                proptest::collection::vec((0usize..2, 0..WORDS.len(), 1u64..6), 0..12),
                any::<bool>(),
            ),
            1..14,
        )
    }

    type Row = (String, Vec<u8>, u64, Vec<(Dsi, u64)>);

    fn rows(t: &RoutingTable) -> Vec<Row> {
        let mut rows: Vec<_> = t
            .entries(None, None, None, usize::MAX)
            .into_iter()
            .map(|r| {
                (
                    r.attribute.to_string().to_ascii_lowercase(),
                    r.value.to_ascii_lowercase(),
                    r.total,
                    r.peers,
                )
            })
            .collect();
        rows.sort();
        rows
    }

    fn peers(t: &RoutingTable) -> Vec<(Dsi, u64, usize, usize)> {
        t.peers()
            .into_iter()
            .map(|p| (p.dsi, p.total, p.distinct_values, p.entries))
            .collect()
    }

    type Answers = Vec<(
        String,
        u64,
        u64,
        bool,
        Option<u64>,
        Vec<(Vec<u8>, u64)>,
        usize,
    )>;

    fn answers(t: &RoutingTable, query: &str, possible: bool, limit: usize) -> Answers {
        let opts = QueryOptions {
            include_possible: possible,
            max_values: 4,
            limit,
            ..QueryOptions::default()
        };
        t.query(&q(query), &opts)
            .into_iter()
            .map(|r| {
                let mut values: Vec<(Vec<u8>, u64)> = r
                    .values
                    .iter()
                    .map(|(v, c)| (v.to_ascii_lowercase(), c))
                    .collect();
                values.sort();
                (
                    r.dsi.to_string(),
                    r.count,
                    r.total,
                    r.definite,
                    r.threshold,
                    values,
                    r.matched_values,
                )
            })
            .collect()
    }

    fn queries() -> Vec<String> {
        let mut out = Vec::new();
        for w in WORDS {
            out.push(format!("DOCUMENT:Author={w}"));
            out.push(format!("Title={w}"));
        }
        for needle in ["gar", "arci", "ones", "alph", "ray", "mith", "a", "et"] {
            out.push(format!("DOCUMENT:Author~{needle}"));
            out.push(format!("Title~{needle}"));
            out.push(format!("Keywords~{needle}"));
        }
        out.push("Author=garcia and Title~a".into());
        out.push("Author~ones or Title=beta".into());
        out
    }

    fn same(a: &RoutingTable, b: &RoutingTable) -> Result<(), TestCaseError> {
        prop_assert_eq!(rows(a), rows(b));
        prop_assert_eq!(peers(a), peers(b));
        for query in queries() {
            for (possible, limit) in [(false, 10), (true, 10), (false, 1)] {
                prop_assert_eq!(
                    answers(a, &query, possible, limit),
                    answers(b, &query, possible, limit),
                    "{} (possible referrals: {}, limit {})",
                    query,
                    possible,
                    limit
                );
            }
        }
        Ok(())
    }

    fn run(steps: Vec<Step>, summaries: u8, memo: bool) -> Result<(usize, usize), TestCaseError> {
        let (whole, delta) = (table(summaries, memo), table(summaries, memo));
        let mut held: Vec<Option<CipHint>> = vec![None, None, None];
        let (mut in_place, mut by_head) = (0, 0);
        for (peer, total, picks, threshold) in steps {
            let d = format!("1.{peer}");
            let next = make(total, &picks, threshold);
            let w = whole.replace(meta(&d), &next);
            let made = match held[peer].as_ref().and_then(|h| {
                let d = HintDelta::between(h, &next)?;
                let whole = d.apply_changes(h).ok()?;
                // As a receiver keeping only the held hint's head: the old counts from the
                // table, which sums values that fold alike; the digest refuses those sums
                // that are not the hint's own counts, and then the whole hint is used.
                let head = crate::delta::HintHead::of(h, crate::delta::digest(h))?;
                let before = |spec: &AttrSpec, value: &[u8]| {
                    delta
                        .held_counts(&dsi(&format!("1.{peer}")), [(spec, value)])
                        .map_or(0, |c| c[0])
                };
                match d.apply_to_head(&head, before) {
                    Ok((_, header, changes)) => {
                        let key = |c: &[ListChanges]| {
                            let mut c: Vec<_> = c
                                .iter()
                                .flat_map(|l| {
                                    l.entries.iter().map(|e| {
                                        (
                                            l.attribute.to_string(),
                                            e.value.clone(),
                                            e.before,
                                            e.after,
                                        )
                                    })
                                })
                                .collect();
                            c.sort();
                            c
                        };
                        assert_eq!(key(&changes), key(&whole.1), "the head's changes");
                        by_head += 1;
                        Some((header, changes))
                    }
                    Err(_) => Some(whole),
                }
            }) {
                Some((made, changes)) => match delta.apply_delta(meta(&d), &made, &changes) {
                    Err(ImportError::NeedsWhole(_)) => delta.replace(meta(&d), &next),
                    other => {
                        in_place += usize::from(other.is_ok());
                        other
                    }
                },
                None => delta.replace(meta(&d), &next),
            };
            prop_assert_eq!(
                w.as_ref().map(|o| (o.distinct_values, o.entries)).ok(),
                made.as_ref().map(|o| (o.distinct_values, o.entries)).ok()
            );
            prop_assert_eq!(w.is_ok(), made.is_ok(), "{:?} {:?}", w, made);
            if w.is_ok() {
                held[peer] = Some(next);
            }
            same(&whole, &delta)?;
            // Readers of the fully compacted table agree too.
        }
        delta.compact();
        same(&whole, &delta)?;
        Ok((in_place, by_head))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Any sequence of hints, fed whole to one table and as deltas to another, leaves
        /// the same entries, peer figures and answers (exact, substring, several terms,
        /// possible referrals); with summaries of every n-gram and the substring memo on,
        /// so that sums computed before a value was hidden are put to the test.
        #[test]
        fn deltas_in_place_equal_totals(steps in steps(), summaries in 0u8..3, memo in any::<bool>()) {
            run(steps, summaries, memo)?;
        }
    }

    #[test]
    fn the_property_applies_deltas_in_place() {
        // The same peer again and again: every step after the first is a delta.
        let steps: Vec<Step> = (0..8u64)
            .map(|i| {
                let picks = (0..6)
                    .map(|k| (k % 2, (i as usize + k) % WORDS.len(), 1 + k as u64))
                    .collect();
                (0usize, 20u64, picks, i % 3 == 0)
            })
            .collect();
        for (summaries, memo) in [(1, false), (1, true), (2, true), (0, false)] {
            let (applied, by_head) = run(steps.clone(), summaries, memo).unwrap();
            assert_eq!(applied, 7);
            // Some steps list alike-folding values, whose sums the head path refuses.
            assert!((1..7).contains(&by_head), "{by_head} by the head alone");
        }
    }

    #[test]
    fn a_delta_breaking_a_limit_is_refused_and_changes_nothing() {
        let t = RoutingTable::new(TableConfig {
            node: Some(dsi("9.9")),
            limits: TableLimits {
                max_value_len: 32,
                max_entries_per_hint: 42,
                ..TableLimits::default()
            },
            ..TableConfig::default()
        });
        let a = make(20, &[(0, 0, 2)], false);
        t.replace(meta("1.0"), &a).unwrap();
        let (rows_before, generation) = (rows(&t), t.generation());
        let change = |value: &str, after: u64| {
            vec![ListChanges {
                attribute: spec("DOCUMENT", "Author"),
                entries: vec![CountChange {
                    value: Bytes::from(value.to_owned()),
                    before: 0,
                    after,
                }],
            }]
        };
        // A count above the total.
        let r = t.apply_delta(meta("1.0"), &a, &change("Smith", 21));
        assert!(
            matches!(
                r,
                Err(ImportError::CountAboveTotal {
                    count: 21,
                    total: 20,
                    ..
                })
            ),
            "{r:?}"
        );
        // A value over the length limit.
        let long = "x".repeat(33);
        let r = t.apply_delta(meta("1.0"), &a, &change(&long, 1));
        assert!(
            matches!(
                r,
                Err(ImportError::ValueTooLong {
                    len: 33,
                    max: 32,
                    ..
                })
            ),
            "{r:?}"
        );
        // One entry more than the limit (the hint holds 41: 40 fillers and Garcia).
        let r = t.apply_delta(meta("1.0"), &a, &change("Smith", 1));
        assert!(r.is_ok(), "{r:?}");
        let r = t.apply_delta(meta("1.0"), &a, &change("Jones", 1));
        assert!(
            matches!(r, Err(ImportError::TooManyEntries { count: 43, max: 42 })),
            "{r:?}"
        );
        // Only the change within the limits went in.
        assert_eq!(t.generation(), generation + 1);
        let mut want = rows_before;
        want.push((
            "document:author".into(),
            b"smith".to_vec(),
            1,
            vec![(dsi("1.0"), 1)],
        ));
        want.sort();
        assert_eq!(rows(&t), want);
    }

    #[test]
    fn a_delta_moves_only_the_changed_values() {
        let t = table(1, false);
        let big: Vec<(usize, usize, u64)> = (0..WORDS.len()).map(|w| (0, w, 2)).collect();
        let a = make(20, &big, false);
        t.replace(meta("1.0"), &a).unwrap();
        t.replace(meta("1.1"), &a).unwrap();
        t.compact();
        let mut picks = big.clone();
        picks[4].2 = 5; // Smith: 2 -> 5
        let b = make(20, &picks, false);
        let (made, changes) = HintDelta::between(&a, &b)
            .unwrap()
            .apply_changes(&a)
            .unwrap();
        assert_eq!(changes.len(), 1);
        t.apply_delta(meta("1.0"), &made, &changes).unwrap();
        let snap = t.current.load();
        assert_eq!(snap.segments.len(), 2, "the big segment and a patch");
        assert_eq!(snap.segments[0].hidden_values(), 1);
        assert_eq!(snap.segments[1].len(), 1, "the patch holds Smith alone");
        let r = t.query(&q("Author=smith"), &QueryOptions::default());
        assert_eq!(
            summary(&r),
            vec![("1.0".into(), 5, true), ("1.1".into(), 2, true)]
        );
        // An unknown DSI, or a total below a count held: whole, and nothing changed.
        assert!(matches!(
            t.apply_delta(meta("1.5"), &made, &changes),
            Err(ImportError::NeedsWhole(_))
        ));
        let lower = make(1, &[], false);
        assert!(matches!(
            t.apply_delta(meta("1.0"), &lower, &[]),
            Err(ImportError::NeedsWhole(_))
        ));
        assert_eq!(t.generation(), 3);
    }

    #[test]
    fn many_deltas_stay_within_the_hidden_bound() {
        let t = table(0, false);
        let mut a = make(50, &[(0, 0, 1)], false);
        t.replace(meta("1.0"), &a).unwrap();
        for round in 0..200u64 {
            let picks: Vec<(usize, usize, u64)> = (0..WORDS.len())
                .map(|w| (w % 2, w, 1 + (round + w as u64) % 5))
                .collect();
            let b = make(50, &picks, false);
            let (made, changes) = HintDelta::between(&a, &b)
                .unwrap()
                .apply_changes(&a)
                .unwrap();
            t.apply_delta(meta("1.0"), &made, &changes).unwrap();
            a = b;
        }
        let snap = t.current.load();
        assert!(
            snap.segments.len() <= 10,
            "{} segments",
            snap.segments.len()
        );
        let fresh = table(0, false);
        fresh.replace(meta("1.0"), &a).unwrap();
        assert_eq!(rows(&t), rows(&fresh));
    }
}

/// A table summarizing every n-gram before a write returns.
fn summarized_at_once() -> RoutingTable {
    let mut cfg = SummaryConfig::everything();
    cfg.background = false;
    RoutingTable::new(TableConfig {
        node: Some(dsi("9.9")),
        summaries: cfg,
        ..TableConfig::default()
    })
}

#[test]
fn summaries_never_count_a_hidden_value() {
    let t = summarized_at_once();
    // Enough other values that the patch is not merged at once.
    let filler: Vec<String> = (0..40).map(|i| format!("filler{i}")).collect();
    let with = |garcia: u64| {
        let mut list: Vec<(&str, u64)> = vec![("Garcia", garcia), ("Garcian", 2), ("Smith", 1)];
        list.extend(filler.iter().map(|f| (f.as_str(), 1)));
        hint(20, &[("DOCUMENT", "Author", &list)])
    };
    let a = with(4);
    t.replace(meta("1.0"), &a).unwrap();
    t.replace(meta("1.1"), &a).unwrap();
    t.compact();
    t.wait_for_summaries();
    let snap = t.current.load();
    assert!(snap.segments[0].summaries().is_some(), "summarized");
    drop(snap);
    let opts = QueryOptions::default();
    let before = summary(&t.query(&q("DOCUMENT:Author~garc"), &opts));
    assert_eq!(
        before,
        vec![("1.0".into(), 6, true), ("1.1".into(), 6, true)]
    );
    let b = with(1);
    apply_between(&t, meta("1.0"), &a, &b);
    let snap = t.current.load();
    assert_eq!(snap.segments[0].hidden_values(), 1);
    assert!(
        snap.segments[0].summaries().is_some(),
        "the hiding version shares them"
    );
    drop(snap);
    assert_eq!(
        summary(&t.query(&q("DOCUMENT:Author~garc"), &opts)),
        vec![("1.1".into(), 6, true), ("1.0".into(), 3, true)]
    );
    // A needle no hidden value holds is still answered from the summaries.
    assert_eq!(
        summary(&t.query(&q("DOCUMENT:Author~mith"), &opts)),
        vec![("1.0".into(), 1, true), ("1.1".into(), 1, true)]
    );
}

#[test]
fn background_summary_threads_run_the_configured_start_first() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let started = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&started);
    let t = RoutingTable::new(TableConfig {
        summaries: SummaryConfig {
            background: true,
            ..SummaryConfig::everything()
        },
        background_start: Some(ThreadStart(Arc::new(move || {
            // Counted only on a thread of the table's own.
            if std::thread::current().name() == Some("table-summaries") {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        }))),
        ..TableConfig::default()
    });
    t.replace(
        meta("1.1"),
        &hint(
            100,
            &[("DOCUMENT", "Author", &[("Garcia", 10), ("Smith", 3)])],
        ),
    )
    .unwrap();
    t.wait_for_summaries();
    assert!(started.load(Ordering::SeqCst) >= 1);
    assert_eq!(
        t.query(&q("Author~arci"), &QueryOptions::default()).len(),
        1,
        "the summaries built there answer"
    );
}

/// Sums from the core are used for a needle hidden values hold, less what those add; a
/// slot whose best values listed lost too many of them to hidden values is searched.
#[test]
fn summaries_are_lessened_by_the_hidden_values_that_hold_a_needle() {
    let t = summarized_at_once();
    let filler: Vec<String> = (0..40).map(|i| format!("filler{i}")).collect();
    let garcias: Vec<String> = (0..10).map(|i| format!("Garcia {i}")).collect();
    let with = |top: u64| {
        let mut list: Vec<(&str, u64)> = garcias
            .iter()
            .enumerate()
            .map(|(i, g)| (g.as_str(), if i < 2 { top } else { 10 - i as u64 }))
            .collect();
        list.extend(filler.iter().map(|f| (f.as_str(), 1)));
        hint(100, &[("DOCUMENT", "Author", &list)])
    };
    let (a, b) = (with(20), with(1));
    t.replace(meta("1.0"), &a).unwrap();
    t.replace(meta("1.1"), &with(30)).unwrap();
    t.compact();
    t.wait_for_summaries();
    apply_between(&t, meta("1.0"), &a, &b);
    let snap = t.current.load();
    assert_eq!(
        snap.segments[0].hidden_values(),
        2,
        "the two changed values"
    );
    drop(snap);
    let fresh = RoutingTable::default();
    fresh.replace(meta("1.0"), &b).unwrap();
    fresh.replace(meta("1.1"), &with(30)).unwrap();
    let values = |t: &RoutingTable, max_values: usize| {
        let opts = QueryOptions {
            max_values,
            ..QueryOptions::default()
        };
        t.query(&q("DOCUMENT:Author~garc"), &opts)
            .into_iter()
            .map(|r| {
                let v: Vec<(String, u64)> = r
                    .values
                    .iter()
                    .map(|(v, c)| (String::from_utf8_lossy(v).into_owned(), c))
                    .collect();
                (r.dsi.to_string(), r.count, v)
            })
            .collect::<Vec<_>>()
    };
    for k in 1..=SUMMARY_TOPS {
        assert_eq!(values(&t, k), values(&fresh, k), "{k} values a referral");
    }
    // 1.0's two best values went to 1: its four best are now the next four.
    let four = values(&t, 4);
    assert_eq!(four[1].0, "1.0");
    assert_eq!(four[1].1, 2 + 8 + 7 + 6 + 5 + 4 + 3 + 2 + 1);
    assert_eq!(
        four[1].2,
        [
            ("Garcia 2", 8),
            ("Garcia 3", 7),
            ("Garcia 4", 6),
            ("Garcia 5", 5)
        ]
        .map(|(v, c)| (v.to_owned(), c))
    );
}

/// Applies in place to `t` the delta from `a` to `b` of `peer`'s hint.
fn apply_between(t: &RoutingTable, peer: PeerMeta, a: &CipHint, b: &CipHint) {
    let (made, changes) = crate::delta::HintDelta::between(a, b)
        .unwrap()
        .apply_changes(a)
        .unwrap();
    t.apply_delta(peer, &made, &changes).unwrap();
}

/// A table with narrow summaries alone, of `slots` slots, built before a write returns
/// (and none broad).
fn narrow_table(slots: usize) -> RoutingTable {
    RoutingTable::new(TableConfig {
        summaries: SummaryConfig {
            min_matches: usize::MAX,
            narrow_min_values: 2,
            narrow_slots: slots,
            ..SummaryConfig::everything()
        },
        ..TableConfig::default()
    })
}

/// A narrow summary's cut block is quick while its segment's slots are its own; once a
/// delta splits a peer it left out between that segment and a patch, the query is not
/// (it may search the segment), and the answer stays the one of a fresh table.
#[test]
fn a_cut_block_is_not_quick_once_a_left_out_peer_is_split() {
    let hints = anber_hints();
    let t = narrow_table(2);
    load(&t, &hints, true);
    t.compact();
    t.wait_for_summaries();
    let page = QueryOptions {
        limit: 1,
        ..QueryOptions::default()
    };
    let needle = q("DOCUMENT:Author~anber");
    assert_eq!(t.current.load().segments.len(), 1);
    assert!(
        t.answers_quickly(&needle, &page),
        "one segment, a cut block"
    );
    // The peer ranked last is past the block's cut.
    let all = t.route(
        &needle,
        &QueryOptions {
            limit: 100,
            ..QueryOptions::default()
        },
    );
    let last = all.last().unwrap().meta.dsi.clone();
    let p: usize = last.as_str().rsplit('.').next().unwrap().parse().unwrap();
    let before = &hints[p];
    let mut after = before.clone();
    let mut entries = after.weightlists[0].1.clone().into_entries();
    entries[0].count = 900;
    after.weightlists[0].1 = Weightlist::new(entries);
    apply_between(&t, meta(&format!("1.{p}")), before, &after);
    assert_eq!(t.current.load().segments.len(), 2, "the patch stands apart");
    assert!(!t.answers_quickly(&needle, &page));
    let mut changed = hints.clone();
    changed[p] = after;
    let fresh = RoutingTable::default();
    load(&fresh, &changed, true);
    assert_eq!(
        summary(&t.query(&needle, &page)),
        summary(&fresh.query(&needle, &page))
    );
    assert_eq!(summary(&t.query(&needle, &page))[0].0, format!("1.{p}"));
}
