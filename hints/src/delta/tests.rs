use super::*;
use proptest::prelude::*;

fn soif(bytes: &[u8]) -> Result<Vec<SoifObject>, cip_proto::soif::SoifError> {
    cip_proto::soif::parse_all(
        Bytes::copy_from_slice(bytes),
        cip_proto::soif::Limits::default(),
    )
}

fn spec(i: usize) -> AttrSpec {
    const SPECS: [&str; 3] = ["DOCUMENT:Author", "DOCUMENT:Title", "IMAGE:Subject"];
    AttrSpec::parse(SPECS[i % SPECS.len()]).unwrap()
}

/// A hint of `lists` (weightlist index → values and counts) and header `extra` attributes.
fn hint(
    total: u64,
    lists: &BTreeMap<usize, BTreeMap<String, u64>>,
    extra: &[(&str, &str)],
    date: &str,
) -> CipHint {
    let mut h = CipHint {
        url: "cip://n1.example/".into(),
        total_object_count: total,
        date: Some(date.to_owned()),
        ..CipHint::default()
    };
    for (i, values) in lists {
        h.attributes.push(spec(*i));
        h.weightlists.push((
            spec(*i),
            Weightlist::new(
                values
                    .iter()
                    .map(|(v, c)| WeightEntry {
                        value: Bytes::from(v.clone()),
                        count: *c,
                    })
                    .collect(),
            ),
        ));
    }
    for (n, v) in extra {
        h.extra
            .push(Attribute::new(n, Bytes::from(v.to_string())).unwrap());
    }
    h
}

/// What a delta keeps: the URL, the header but `Date` in no order, the weightlists as maps.
type Content = (
    Bytes,
    Vec<(String, Bytes)>,
    Vec<(String, BTreeMap<Bytes, u64>)>,
);

fn content(h: &CipHint) -> Content {
    let p = parts(h).expect("a hint a delta can describe");
    let mut header: Vec<(String, Bytes)> = p
        .header
        .into_iter()
        .filter(|(n, _)| n != DATE)
        .flat_map(|(n, vs)| vs.into_iter().map(move |v| (n.clone(), v)))
        .collect();
    header.sort();
    let mut lists: Vec<(String, BTreeMap<Bytes, u64>)> = p
        .lists
        .into_iter()
        .map(|(s, m)| (s.to_string(), m))
        .collect();
    lists.sort();
    (p.url, header, lists)
}

fn values() -> impl Strategy<Value = BTreeMap<String, u64>> {
    // Commas, backslashes, semicolons, leading spaces and non-ASCII: what the weightlist
    // syntax must escape or keep.
    prop::collection::btree_map("[ a-c,;\\\\é]{1,6}", 1u64..1000, 0..12)
}

fn lists() -> impl Strategy<Value = BTreeMap<usize, BTreeMap<String, u64>>> {
    prop::collection::btree_map(0usize..3, values(), 0..3)
}

fn header() -> impl Strategy<Value = Vec<(&'static str, &'static str)>> {
    prop::collection::vec(
        prop::sample::select(vec![
            ("Provenance", "1.2.3 1.2.4"),
            ("Provenance", "1.2.3"),
            ("Path", "1.2.9 1.2.3"),
            ("X-Note", "a"),
            ("X-Note", "b"),
        ]),
        0..3,
    )
}

proptest! {
    #[test]
    fn applying_the_delta_between_two_hints_makes_the_second(
        (ta, la, ha) in (0u64..500, lists(), header()),
        (tb, lb, hb) in (0u64..500, lists(), header()),
    ) {
        let a = hint(ta, &la, &ha, "Mon, 01 Jan 2024 00:00:00 GMT");
        let b = hint(tb, &lb, &hb, "Tue, 02 Jan 2024 00:00:00 GMT");
        let d = HintDelta::between(&a, &b).expect("distinct values: a delta");
        let made = d.apply(&a).unwrap();
        prop_assert_eq!(content(&made), content(&b));
        prop_assert_eq!(digest(&made), digest(&b));
        prop_assert_eq!(made.date.as_deref(), b.date.as_deref());
        // Through the wire: written, parsed, read back, the same delta.
        let bytes = d.to_soif().to_bytes();
        let objects = soif(&bytes).unwrap();
        prop_assert_eq!(objects.len(), 1);
        let read = HintDelta::from_soif(&objects[0]).unwrap();
        prop_assert_eq!(&read, &d);
        // Applied twice, or to the wrong hint, it is refused.
        if d.base != d.result {
            let again = d.apply(&made);
            prop_assert!(matches!(again, Err(DeltaError::WrongBase { .. })), "{:?}", again);
        }
    }

    #[test]
    fn applied_to_the_head_alone_a_delta_gives_what_applied_whole_gives(
        (ta, la, ha) in (0u64..500, lists(), header()),
        (tb, lb, hb) in (0u64..500, lists(), header()),
        wrong in any::<bool>(),
    ) {
        let a = hint(ta, &la, &ha, "Mon, 01 Jan 2024 00:00:00 GMT");
        let b = hint(tb, &lb, &hb, "Tue, 02 Jan 2024 00:00:00 GMT");
        let d = HintDelta::between(&a, &b).expect("distinct values: a delta");
        let head = HintHead::of(&a, digest(&a)).unwrap();
        // The old counts as a table would give them: looked up in the held hint.
        let count = |spec: &AttrSpec, value: &[u8]| {
            a.weightlists
                .iter()
                .filter(|(s, _)| s == spec)
                .flat_map(|(_, l)| l.entries())
                .find(|e| e.value[..] == *value)
                .map_or(0, |e| e.count)
        };
        let whole = d.apply_changes(&a);
        if d.removed.iter().any(|r| r.starts_with(LIST_PREFIX)) {
            let needs = d.apply_to_head(&head, count);
            prop_assert!(matches!(needs, Err(DeltaError::NeedsHint(_))), "{:?}", needs);
            return Ok(());
        }
        let (made, changes) = whole.unwrap();
        let (next, header_only, head_changes) = d.apply_to_head(&head, count).unwrap();
        // The same changes, in any order.
        let sorted = |mut c: Vec<ListChanges>| {
            for l in &mut c {
                l.entries.sort_by(|x, y| x.value.cmp(&y.value));
            }
            c.sort_by_key(|l| l.attribute.to_string());
            c
        };
        prop_assert_eq!(sorted(head_changes), sorted(changes.clone()));
        prop_assert_eq!(next.digest, digest(&made));
        prop_assert_eq!(Some(next.clone()), HintHead::of(&made, digest(&made)));
        let mut header = made.clone();
        header.weightlists.clear();
        prop_assert_eq!(header_only, header);
        // An old count that is not the held hint's is refused.
        if wrong && !changes.is_empty() {
            let off = |spec: &AttrSpec, value: &[u8]| count(spec, value) + 1;
            let refused = d.apply_to_head(&head, off);
            prop_assert!(matches!(refused, Err(DeltaError::WrongResult { .. })), "{:?}", refused);
        }
        // Not on its base: refused.
        if d.base != d.result {
            let again = d.apply_to_head(&next, count);
            prop_assert!(matches!(again, Err(DeltaError::WrongBase { .. })), "{:?}", again);
        }
    }

    #[test]
    fn the_digest_ignores_order_and_date(l in lists(), h in header()) {
        let a = hint(7, &l, &h, "Mon, 01 Jan 2024 00:00:00 GMT");
        let mut b = hint(7, &l, &h, "Wed, 03 Jan 2024 00:00:00 GMT");
        for (_, list) in &mut b.weightlists {
            list.entries_mut().reverse();
        }
        prop_assert_eq!(digest(&a), digest(&b));
        let d = HintDelta::between(&a, &b).unwrap();
        prop_assert!(d.is_empty());
    }

    #[test]
    fn joined_deltas_make_what_the_deltas_make_in_turn_byte_for_byte(
        steps in prop::collection::vec((0u64..500, lists(), header()), 2..6),
    ) {
        let hints: Vec<CipHint> = steps
            .iter()
            .enumerate()
            .map(|(i, (t, l, h))| hint(*t, l, h, &format!("Mon, {:02} Jan 2024 00:00:00 GMT", i + 1)))
            .collect();
        let deltas: Vec<HintDelta> = hints
            .windows(2)
            .map(|w| HintDelta::between(&w[0], &w[1]).unwrap())
            .collect();
        // In turn, as a receiver that took every answer would.
        let mut held = hints[0].clone();
        for d in &deltas {
            held = d.apply(&held).unwrap();
        }
        let joined = deltas[1..]
            .iter()
            .try_fold(deltas[0].clone(), |acc, d| acc.then(d))
            .expect("each delta starts where the last ends");
        let made = joined.apply(&hints[0]).unwrap();
        prop_assert_eq!(
            made.to_soif().to_bytes(),
            held.to_soif().to_bytes()
        );
        prop_assert_eq!(digest(&made), digest(hints.last().unwrap()));
        // Through the wire too.
        let read = HintDelta::from_soif(&soif(&joined.to_soif().to_bytes()).unwrap()[0]).unwrap();
        prop_assert_eq!(read.apply(&hints[0]).unwrap().to_soif().to_bytes(), held.to_soif().to_bytes());
        // Out of order, they do not join.
        if deltas.len() >= 2 && deltas[1].result != deltas[0].base {
            prop_assert!(deltas[1].then(&deltas[0]).is_none());
        }
    }

    #[test]
    fn a_delta_parser_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(objects) = soif(&bytes) {
            for o in &objects {
                let _ = HintDelta::from_soif(o);
            }
        }
    }
}

fn big(n: usize) -> BTreeMap<usize, BTreeMap<String, u64>> {
    let values = (0..n)
        .map(|i| (format!("value {i}"), 1 + (i as u64 % 50)))
        .collect();
    BTreeMap::from([(0, values)])
}

#[test]
fn one_changed_value_of_ten_thousand_costs_a_few_hundred_bytes() {
    let before = big(10_000);
    let mut after = before.clone();
    *after.get_mut(&0).unwrap().get_mut("value 17").unwrap() += 1;
    let a = hint(
        100_000,
        &before,
        &[("Provenance", "1.2.3 1.2.4")],
        "Mon, 01 Jan 2024 00:00:00 GMT",
    );
    let b = hint(
        100_001,
        &after,
        &[("Provenance", "1.2.3 1.2.4")],
        "Tue, 02 Jan 2024 00:00:00 GMT",
    );
    let d = HintDelta::between(&a, &b).unwrap();
    assert_eq!(d.changed_entries(), 1);
    let wire = d.to_soif().to_bytes();
    assert!(
        wire.len() < 300,
        "{} bytes:\n{}",
        wire.len(),
        String::from_utf8_lossy(&wire)
    );
    assert!(a.to_soif().to_bytes().len() > 100_000);
    assert_eq!(content(&d.apply(&a).unwrap()), content(&b));
}

#[test]
fn a_corrupt_delta_is_refused_and_changes_nothing() {
    let a = hint(3, &big(5), &[], "Mon, 01 Jan 2024 00:00:00 GMT");
    let mut l = big(5);
    l.get_mut(&0).unwrap().insert("new".into(), 2);
    let b = hint(5, &l, &[], "Mon, 01 Jan 2024 00:00:00 GMT");
    let mut d = HintDelta::between(&a, &b).unwrap();
    d.lists[0].1[0].count += 1;
    assert!(matches!(d.apply(&a), Err(DeltaError::WrongResult { .. })));
}

#[test]
fn bad_deltas_say_which_attribute_and_where() {
    let text = b"@CIP-HINT-DELTA { -\nDelta-Base{16}:\t00000000000000zz\nDelta-Result{16}:\t0000000000000000\n}\n";
    let o = &soif(text).unwrap()[0];
    let e = HintDelta::from_soif(o).unwrap_err();
    assert_eq!(e.to_string(), "Delta-Base: byte 14: not a hex digit");

    let text = b"@CIP-HINT-DELTA { -\nDelta-Base{16}:\t0000000000000000\nDelta-Result{16}:\t0000000000000000\nWeightlist-Delta-[DOCUMENT:Author]{5}:\ta;1,\\\n}\n";
    let o = &soif(text).unwrap()[0];
    let e = HintDelta::from_soif(o).unwrap_err();
    assert!(
        matches!(&e, DeltaError::BadValue { attribute, offset: 4, .. } if attribute == "Weightlist-Delta-[DOCUMENT:Author]"),
        "{e}"
    );

    let text = b"@CIP-HINT-DELTA { -\nDelta-Base{16}:\t0000000000000000\n}\n";
    let o = &soif(text).unwrap()[0];
    assert_eq!(
        HintDelta::from_soif(o).unwrap_err().to_string(),
        "Delta-Result is missing"
    );

    let text = b"@CIP-HINT-DELTA { -\nDelta-Base{16}:\t0000000000000000\nDelta-Result{16}:\t0000000000000000\nTotal-Object-Count{1}:\t3\n}\n";
    let o = &soif(text).unwrap()[0];
    assert_eq!(
        HintDelta::from_soif(o).unwrap_err().to_string(),
        "Total-Object-Count: byte 0: not an attribute of a delta"
    );

    let text = b"@CIP-HINT { -\nTotal-Object-Count{1}:\t3\n}\n";
    let o = &soif(text).unwrap()[0];
    assert!(matches!(
        HintDelta::from_soif(o),
        Err(DeltaError::WrongTemplate { .. })
    ));
}

/// What a hub sends: an aggregate of its peers' hints. One peer's one changed value makes a
/// delta of a few hundred bytes that rebuilds the hub's next aggregate byte for byte (so a
/// signature over it holds), including values of equal counts that differ in case.
#[test]
fn an_aggregate_s_change_travels_as_a_byte_exact_delta() {
    use crate::aggregate::{NodeIdentity, aggregate};
    use crate::peer::PeerMeta;
    use crate::table::{RoutingTable, TableConfig};
    use cip_proto::Dsi;

    let dsi = |s: &str| Dsi::new(s).unwrap();
    let meta = |d: &str| PeerMeta {
        dsi: dsi(d),
        base_uris: vec![format!("cip://{d}/")],
        dsi_description: None,
        received: std::time::SystemTime::UNIX_EPOCH,
        expires: None,
        via: None,
        path: Vec::new(),
    };
    let peer_hint = |i: usize, extra: u64| {
        let mut values: BTreeMap<String, u64> = (0..2_000)
            .map(|v| (format!("Author {v} of {}", v % (i + 2)), 1 + (v as u64 % 7)))
            .collect();
        values.insert(format!("zeta{i}"), 3);
        values.insert(format!("Zeta{i}"), 3);
        values.insert(format!("own {i}"), 1 + extra);
        hint(
            4_000 + extra,
            &BTreeMap::from([(0, values)]),
            &[],
            "Mon, 01 Jan 2024 00:00:00 GMT",
        )
    };
    let table = RoutingTable::new(TableConfig {
        node: Some(dsi("1.9")),
        ..TableConfig::default()
    });
    for i in 0..3 {
        table
            .replace(meta(&format!("1.{i}")), &peer_hint(i, 0))
            .unwrap();
    }
    let node = NodeIdentity {
        dsi: dsi("1.9"),
        base_uris: vec!["cip://hub/".into()],
        url: "http://hub/".into(),
    };
    let before = aggregate(None, &table, &node, None).hint;
    table.replace(meta("1.1"), &peer_hint(1, 1)).unwrap();
    let after = aggregate(None, &table, &node, None).hint;
    let (delta, wire) = HintDelta::for_wire(&before, &after).expect("a delta is worth sending");
    let whole = after.to_soif().to_bytes();
    assert!(
        wire.len() < 400,
        "{} bytes against {} whole",
        wire.len(),
        whole.len()
    );
    assert!(whole.len() > 50_000);
    let made = delta.apply(&before).unwrap();
    assert_eq!(made.to_soif().to_bytes(), whole);
    // The receiver holds what it parsed from the wire: the same.
    let held = CipHint::from_soif(&soif(&before.to_soif().to_bytes()).unwrap()[0])
        .unwrap()
        .0;
    assert_eq!(delta.apply(&held).unwrap().to_soif().to_bytes(), whole);
}

#[test]
fn a_hint_without_url_takes_its_delta_through_the_wire() {
    // `-` is how a hint without URL (a node with no broker URL) writes it; the digests
    // hash it so, and the delta read back must too.
    let mut a = hint(5, &big(3), &[], "Mon, 01 Jan 2024 00:00:00 GMT");
    a.url = "-".into();
    let mut b = a.clone();
    b.total_object_count = 6;
    let d = HintDelta::between(&a, &b).unwrap();
    let objects = soif(&d.to_soif().to_bytes()).unwrap();
    let read = HintDelta::from_soif(&objects[0]).unwrap();
    let made = read.apply(&a).unwrap();
    assert_eq!(digest(&made), digest(&b));
    let head = HintHead::of(&a, digest(&a)).unwrap();
    let (next, _, _) = read.apply_to_head(&head, |_, _| 0).unwrap();
    assert_eq!(next, HintHead::of(&b, digest(&b)).unwrap());
}

/// An aggregate's header names every dataset below it once (`Provenance-1` ... `-N`): a
/// delta that changes a few of thousands of names, joined with the next, applied whole and
/// to the head alone, and read back from the wire, gives the new hint exactly.
#[test]
fn a_header_of_thousands_of_names_takes_its_changes_exactly() {
    let names: Vec<String> = (1..=5_000).map(|i| format!("Provenance-{i}")).collect();
    let dsis: Vec<String> = (1..=5_000).map(|i| format!("1.2.{i}")).collect();
    let header = |skip: usize, extra: &str| -> Vec<(String, String)> {
        let mut h: Vec<(String, String)> = names
            .iter()
            .zip(&dsis)
            .enumerate()
            .filter(|&(i, _)| i != skip)
            .map(|(_, (n, d))| (n.clone(), d.clone()))
            .collect();
        h.push(("Provenance-5001".into(), extra.into()));
        h
    };
    let make = |h: &[(String, String)], date: &str| {
        let pairs: Vec<(&str, &str)> = h.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        hint(9, &big(20), &pairs, date)
    };
    let a = make(&header(4_000, "9.9.1"), "Mon, 01 Jan 2024 00:00:00 GMT");
    let b = make(&header(17, "9.9.2"), "Tue, 02 Jan 2024 00:00:00 GMT");
    // The second change also removes a name, which the join must carry.
    let mut hc = header(17, "9.9.3");
    hc.retain(|(n, _)| n != "Provenance-31");
    let c = make(&hc, "Wed, 03 Jan 2024 00:00:00 GMT");
    let ab = HintDelta::between(&a, &b).unwrap();
    let bc = HintDelta::between(&b, &c).unwrap();
    assert_eq!(bc.removed, ["Provenance-31"]);
    // Only what changed is stated: two names and the `Date` of 5,001.
    assert!(ab.set.len() <= 4, "{} names set", ab.set.len());
    let joined = ab.then(&bc).unwrap();
    let wire = HintDelta::from_soif(&soif(&joined.to_soif().to_bytes()).unwrap()[0]).unwrap();
    assert_eq!(wire, joined);
    // The same content (a name set again comes last, as PROTOCOL.md says) and digest.
    let made = wire.apply(&a).unwrap();
    assert!(content(&made) == content(&c), "not the new hint's content");
    assert_eq!(digest(&made), digest(&c));
    let head = HintHead::of(&a, digest(&a)).unwrap();
    let (next, _, _) = joined.apply_to_head(&head, |_, _| 0).unwrap();
    assert!(
        Some(next) == HintHead::of(&made, digest(&c)),
        "the head alone went elsewhere"
    );
}
