//! RFC 2654's examples, tolerance, errors, limits, incremental updates and round trips.
//!
//! The fixtures are RFC 2654 §5's examples as printed (indentation removed), plus one object
//! in the style ROADS's CIPv3 code writes (one io-part per template, `Template-Type` lines,
//! blank lines after the header, no space after `:`).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

fn fixture(name: &str) -> &'static str {
    match name {
        "5.1.1" => include_str!("fixtures/rfc2654-5.1.1-complete-total.txt"),
        "5.1.2" => include_str!("fixtures/rfc2654-5.1.2-tag-total.txt"),
        "5.1.3" => include_str!("fixtures/rfc2654-5.1.3-unique-total.txt"),
        "5.2.1" => include_str!("fixtures/rfc2654-5.2.1-complete-incremental.txt"),
        "5.2.2" => include_str!("fixtures/rfc2654-5.2.2-tag-incremental.txt"),
        "5.2.3" => include_str!("fixtures/rfc2654-5.2.3-unique-incremental.txt"),
        "5.3.1" => include_str!("fixtures/rfc2654-5.3.1-complete-incremental.txt"),
        "5.3.2" => include_str!("fixtures/rfc2654-5.3.2-tag-incremental.txt"),
        "5.3.3" => include_str!("fixtures/rfc2654-5.3.3-unique-incremental.txt"),
        "roads" => include_str!("fixtures/roads-cipv3-style.txt"),
        other => panic!("no fixture {other}"),
    }
}

/// 5.3.1 prints `END New    END Update Block` on one line (a page-layout slip); this is the
/// example with the two markers on lines of their own.
fn fixture_5_3_1_repaired() -> String {
    fixture("5.3.1").replace("END New    END Update Block", "END New\nEND Update Block")
}

/// The 5.2 examples have `lastupdate` and `thisupdate` swapped (digest A15); this puts them
/// the right way round, so that they follow the 5.1 totals.
fn repaired_5_2(name: &str) -> TaggedIndex {
    let text = fixture(name)
        .replace("lastupdate: 855940000", "lastupdate: X")
        .replace("thisupdate: 855938804", "thisupdate: 855940000")
        .replace("lastupdate: X", "lastupdate: 855938804");
    parse(text.as_bytes()).unwrap()
}

fn p(name: &str) -> TaggedIndex {
    parse(fixture(name).as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn tags(s: &str) -> TagSet {
    s.parse().unwrap()
}

fn info_of(idx: &TaggedIndex) -> &IndexInfo {
    idx.info().expect("a total")
}

fn lines(idx: &TaggedIndex) -> Vec<String> {
    info_of(idx)
        .entries()
        .map(|(a, v, t)| format!("{a}: {t}/{v}"))
        .collect()
}

fn options(mode: IncrementalMode) -> ApplyOptions {
    ApplyOptions {
        consistency: mode,
        ..ApplyOptions::default()
    }
}

const HEAD: &str = "version: x-tagged-index-1\nupdatetype: total\nthisupdate: 1\n";

fn total(body: &str) -> String {
    format!("{HEAD}BEGIN IO-Schema\nEND IO-Schema\nBEGIN Index-Info\n{body}END Index-Info\n")
}

// ---- RFC 2654 §5 ----------------------------------------------------------------------------

#[test]
fn rfc_5_1_totals_parse() {
    let t = p("5.1.1");
    assert_eq!(t.this_update, 855_938_804);
    assert!(t.is_total());
    assert_eq!(t.last_update(), None);
    assert_eq!(t.context_size, None);
    assert_eq!(
        t.schema.iter().collect::<Vec<_>>(),
        [
            ("cn", TokenType::Token),
            ("sn", TokenType::Full),
            ("title", TokenType::Token)
        ]
    );
    let i = info_of(&t);
    assert!(i.get("cn", "Jensen").unwrap().is_all());
    assert!(i.get("sn", "Jensen").unwrap().is_all());
    assert_eq!(i.get("title", "manager"), Some(&tags("1,2")));
    assert_eq!(i.get("title", "testpilot"), Some(&tags("3,4")));
    assert_eq!(i.get("cn", "Babs"), Some(&tags("1")));
    assert_eq!(i.len(), 14);
    assert_eq!(t.record_count(), 4);
    // 5.1.2 is 5.1.1 with a blank line in the Index-Info.
    assert_eq!(p("5.1.2"), t);
    let u = p("5.1.3");
    assert_eq!(u.schema.get("DN"), Some(TokenType::Full));
    assert_eq!(
        info_of(&u).get(
            "dn",
            "cn=Gern Jensen, ou=Product Testing, o=Ace Industry, c=US"
        ),
        Some(&tags("3"))
    );
}

#[test]
fn rfc_5_2_and_5_3_incrementals_parse() {
    let u = p("5.2.1");
    assert_eq!(u.this_update, 855_938_804);
    assert_eq!(u.last_update(), Some(855_940_000));
    let Body::Incremental { mode, blocks, .. } = &u.body else {
        panic!("incremental")
    };
    assert_eq!(*mode, None, "the examples leave the mode to the agreement");
    let [Block::Update { old, new }] = blocks.as_slice() else {
        panic!("{blocks:?}")
    };
    assert_eq!(old.get("title", "testpilot"), Some(&tags("1")));
    assert_eq!(new.get("title", "chiefpilot"), Some(&tags("1")));
    assert_eq!(old.len(), 5, "repeated `cn:` lines are one attribute");
    assert_eq!(u.schema.get("title"), Some(TokenType::Full));
    for name in ["5.2.2", "5.2.3", "5.3.2", "5.3.3"] {
        assert!(!p(name).is_total(), "{name}");
    }
    let s = parse(fixture_5_3_1_repaired().as_bytes()).unwrap();
    let Body::Incremental { blocks, .. } = &s.body else {
        panic!("incremental")
    };
    assert_eq!(
        blocks.iter().map(Block::kind).collect::<Vec<_>>(),
        ["Add", "Delete", "Update"]
    );
    let Block::Update { new, .. } = &blocks[2] else {
        panic!()
    };
    assert_eq!(new.get("locality", "New"), Some(&tags("1-3")));
}

#[test]
fn rfc_5_3_1_as_printed_fails_at_the_merged_end_line() {
    let e = parse(fixture("5.3.1").as_bytes()).unwrap_err();
    let line = fixture("5.3.1")
        .lines()
        .position(|l| l.starts_with("END New "))
        .unwrap() as u64
        + 1;
    assert_eq!(e.line(), line);
    assert!(matches!(e.kind(), TaggedErrorKind::UnknownMarker { .. }));
    assert!(e.to_string().starts_with(&format!("line {line}: ")), "{e}");
}

#[test]
fn rfc_fixtures_round_trip() {
    let mut all: Vec<TaggedIndex> = ["5.1.1", "5.1.2", "5.1.3", "5.2.1", "5.2.2", "5.2.3"]
        .into_iter()
        .chain(["5.3.2", "5.3.3", "roads"])
        .map(p)
        .collect();
    all.push(parse(fixture_5_3_1_repaired().as_bytes()).unwrap());
    for idx in all {
        let out = write(&idx);
        let again = parse(&out).unwrap();
        assert_eq!(again, idx);
        assert_eq!(write(&again), out, "the canonical form is a fixed point");
    }
}

#[test]
fn the_canonical_form_of_rfc_5_1_1() {
    let out = String::from_utf8(write(&p("5.1.1"))).unwrap();
    assert_eq!(
        out,
        "version: x-tagged-index-1\r\nupdatetype: total\r\nthisupdate: 855938804\r\n\
         BEGIN IO-Schema\r\ncn: TOKEN\r\nsn: FULL\r\ntitle: TOKEN\r\nEND IO-Schema\r\n\
         BEGIN Index-Info\r\ncn: 1/Babs\r\n-1/Barbara\r\n-2/Bjorn\r\n-3/Gern\r\n-4/Horatio\r\n\
         -1/J\r\n-*/Jensen\r\n-4/N\r\n-3/O\r\nsn: */Jensen\r\ntitle: 1/accounting\r\n\
         -1,2/manager\r\n-1/product\r\n-3,4/testpilot\r\nEND Index-Info\r\n"
    );
    let inc = String::from_utf8(write(&p("5.2.2"))).unwrap();
    assert!(
        inc.contains(
            "updatetype: incremental\r\nthisupdate: 855938804\r\nlastupdate: 855940000\r\n"
        ),
        "{inc}"
    );
    assert!(inc.ends_with(
        "BEGIN Update Block\r\nBEGIN Old\r\ntitle: 3/testpilot\r\nEND Old\r\nBEGIN New\r\n\
         title: 3/chiefpilot\r\nEND New\r\nEND Update Block\r\n"
    ));
}

#[test]
fn rfc_5_2_headers_do_not_follow_the_5_1_totals() {
    // As printed, 5.2's lastupdate (855940000) is not 5.1's thisupdate (855938804).
    for (base, update) in [("5.1.1", "5.2.1"), ("5.1.2", "5.2.2"), ("5.1.3", "5.2.3")] {
        let mut stored = p(base);
        let before = stored.clone();
        let e = stored.apply(&p(update)).unwrap_err();
        assert_eq!(
            e,
            ApplyError::LastUpdateMismatch {
                stored: 855_938_804,
                last_update: 855_940_000
            }
        );
        assert!(e.to_string().contains("poll for a total update"), "{e}");
        assert_eq!(stored, before, "a failed apply changes nothing");
    }
}

#[test]
fn rfc_5_2_updates_give_one_result_in_every_mode() {
    for (base, update, mode) in [
        ("5.1.1", "5.2.1", IncrementalMode::CompleteRecord),
        ("5.1.2", "5.2.2", IncrementalMode::TagBased),
        ("5.1.3", "5.2.3", IncrementalMode::UniqueIdBased),
    ] {
        let mut stored = p(base);
        stored
            .apply_with(&repaired_5_2(update), &options(mode))
            .unwrap_or_else(|e| panic!("{update}: {e}"));
        let i = info_of(&stored);
        assert_eq!(i.get("title", "testpilot"), Some(&tags("4")), "{update}");
        assert_eq!(i.get("title", "chiefpilot"), Some(&tags("3")), "{update}");
        assert!(i.get("cn", "Jensen").unwrap().is_all(), "{update}");
        assert_eq!(stored.this_update, 855_940_000);
        assert_eq!(stored.last_update(), None);
        assert_eq!(stored.schema.get("title"), Some(TokenType::Full));
        if mode == IncrementalMode::UniqueIdBased {
            assert_eq!(
                i.get(
                    "dn",
                    "cn=Gern Jensen, ou=Product Testing, o=Ace Industry, c=US"
                ),
                Some(&tags("3")),
                "the ID on Old and New stays"
            );
        }
    }
}

/// 5.3.2 and 5.3.3 applied to 5.1.2 and 5.1.3: Bo Didley added, Bjorn deleted, localities
/// added to the others.
const AFTER_5_3: &[&str] = &[
    "cn: 1/Babs",
    "cn: 1/Barbara",
    "cn: 5/Bo",
    "cn: 5/Didley",
    "cn: 3/Gern",
    "cn: 4/Horatio",
    "cn: 1/J",
    "cn: 1,3,4/Jensen",
    "cn: 4/N",
    "cn: 3/O",
    "locality: 4/Caledonia",
    "locality: 1/Jersey",
    "locality: 1,3-5/New",
    "locality: 3/Orleans",
    "locality: 5/York",
    "sn: 5/Didley",
    "sn: 1,3,4/Jensen",
    "title: 5/Policy",
    "title: 1/accounting",
    "title: 5/maker",
    "title: 1/manager",
    "title: 1/product",
    "title: 3,4/testpilot",
];

#[test]
fn rfc_5_3_tag_update() {
    let mut stored = p("5.1.2");
    stored
        .apply_with(&p("5.3.2"), &options(IncrementalMode::TagBased))
        .unwrap();
    // As printed, the Update Block gives Orleans to tag 2 (Bjorn, deleted just before) where
    // Gern is tag 3: tag 2 comes back as a record holding only localities.
    assert_eq!(
        info_of(&stored).get("locality", "Orleans"),
        Some(&tags("2"))
    );
    assert_eq!(
        info_of(&stored).get("locality", "New"),
        Some(&tags("1,2,4,5"))
    );
    assert_eq!(info_of(&stored).get("cn", "Bjorn"), None);
    assert_eq!(stored.this_update, 855_939_525);

    let mut stored = p("5.1.2");
    let repaired = fixture("5.3.2")
        .replace("-2/Orleans", "-3/Orleans")
        .replace("-1,2,4/New", "-1,3,4/New");
    stored
        .apply_with(
            &parse(repaired.as_bytes()).unwrap(),
            &options(IncrementalMode::TagBased),
        )
        .unwrap();
    assert_eq!(lines(&stored), AFTER_5_3);
    assert_eq!(stored.schema.get("locality"), Some(TokenType::Token));
    assert_eq!(stored.record_count(), 4);
}

#[test]
fn rfc_5_3_unique_update() {
    let mut stored = p("5.1.3");
    stored
        .apply_with(&p("5.3.3"), &options(IncrementalMode::UniqueIdBased))
        .unwrap();
    let got: Vec<String> = lines(&stored)
        .into_iter()
        .filter(|l| !l.starts_with("dn:"))
        .collect();
    assert_eq!(got, AFTER_5_3);
    let i = info_of(&stored);
    assert_eq!(
        i.get("dn", "cn=Bo Didley, ou=Marketing, o=Ace Industry, c=US"),
        Some(&tags("5")),
        "the added record gets the next free tag"
    );
    assert_eq!(
        i.get("dn", "cn=Bjorn Jensen, ou=Accounting, o=Ace Industry, c=US"),
        None
    );
    assert_eq!(i.attribute("dn").unwrap().len(), 4);
}

#[test]
fn rfc_5_3_complete_update_does_not_fit_the_rfc_total() {
    // 5.3.1's Delete Block lists Bjorn's title as `Accounting` and `Manager`, where 5.1.1 has
    // `manager` (and gives `accounting` to record 1): no stored record has those tokens.
    let mut stored = p("5.1.1");
    let before = stored.clone();
    let update = parse(fixture_5_3_1_repaired().as_bytes()).unwrap();
    assert_eq!(
        stored.apply(&update),
        Err(ApplyError::RecordNotFound {
            block: 2,
            kind: "Delete",
            tag: 1
        })
    );
    assert_eq!(stored, before);
}

#[test]
fn roads_style_io_parts_merge_into_one_object() {
    let r = p("roads");
    assert_eq!(r.this_update, 912_345_679, "the latest part's thisupdate");
    assert_eq!(r.schema.get("template-type"), Some(TokenType::Dns));
    assert_eq!(
        r.templates().into_iter().collect::<Vec<_>>(),
        ["DOCUMENT", "SERVICE"]
    );
    assert_eq!(info_of(&r).get("Title", "cip"), Some(&tags("1,3")));
    assert_eq!(
        r.value_counts(),
        vec![
            (
                "DOCUMENT".into(),
                "Description".into(),
                vec![("mesh".into(), 2)]
            ),
            (
                "DOCUMENT".into(),
                "Title".into(),
                vec![("cip".into(), 1), ("index".into(), 1)]
            ),
            ("SERVICE".into(), "Title".into(), vec![("cip".into(), 1)]),
        ]
    );
    assert_eq!(r.record_count(), 3);
}

// ---- tolerance ------------------------------------------------------------------------------

#[test]
fn headers_in_any_order_and_case_with_unknown_ones_kept() {
    let text = "\n  \nThisUpdate:5\nX-Foo:   bar baz  \nlastupdate: 4\nUPDATETYPE: Total\n\
                name-space:\ncontextsize: 1000\nVersion: X-Tagged-Index-1\n\n\n\
                BEGIN IO-Schema\ncn:token\nEND IO-Schema\nBEGIN Index-Info\nEND Index-Info\n";
    let t = parse(text.as_bytes()).unwrap();
    assert_eq!(t.this_update, 5);
    assert_eq!(t.last_update(), Some(4));
    assert_eq!(t.context_size, Some(1000));
    assert_eq!(t.record_count(), 1000);
    let extra: Vec<(&str, &str)> = t
        .extra_headers
        .iter()
        .map(|h| (h.name(), h.value()))
        .collect();
    assert_eq!(extra, [("X-Foo", "bar baz"), ("name-space", "")]);
    assert_eq!(t.schema.get("cn"), Some(TokenType::Token));
    assert_eq!(parse(&write(&t)).unwrap(), t);
}

#[test]
fn every_sub_mode_spelling_is_accepted() {
    let cases = [
        ("incremental", None),
        (
            "incremental complete",
            Some(IncrementalMode::CompleteRecord),
        ),
        (
            "INCREMENTAL completeRecord",
            Some(IncrementalMode::CompleteRecord),
        ),
        (
            "incremental   COMPLETERECORD",
            Some(IncrementalMode::CompleteRecord),
        ),
        ("incremental tag", Some(IncrementalMode::TagBased)),
        ("incremental tagBased", Some(IncrementalMode::TagBased)),
        ("Incremental\ttagbased", Some(IncrementalMode::TagBased)),
        ("incremental unique", Some(IncrementalMode::UniqueIdBased)),
        (
            "incremental uniqueIDBased",
            Some(IncrementalMode::UniqueIdBased),
        ),
        (
            "incremental uniqueIDbased",
            Some(IncrementalMode::UniqueIdBased),
        ),
        (
            "incremental UNIQUEIDBASED",
            Some(IncrementalMode::UniqueIdBased),
        ),
    ];
    for (value, want) in cases {
        let text = format!(
            "version: x-tagged-index-1\nupdatetype: {value}\nthisupdate: 2\nlastupdate: 1\n\
             BEGIN IO-Schema\nEND IO-Schema\n"
        );
        let t = parse(text.as_bytes()).unwrap_or_else(|e| panic!("{value}: {e}"));
        let Body::Incremental { mode, blocks, .. } = &t.body else {
            panic!("{value}")
        };
        assert_eq!(*mode, want, "{value}");
        assert!(blocks.is_empty(), "an incremental may have no block");
        assert_eq!(parse(&write(&t)).unwrap(), t);
    }
    for bad in [
        "incremental tags",
        "incremental tag based",
        "total tagbased",
        "full",
        "",
    ] {
        let text = format!(
            "version: x-tagged-index-1\nupdatetype: {bad}\nthisupdate: 2\nlastupdate: 1\n\
             BEGIN IO-Schema\nEND IO-Schema\n"
        );
        let e = parse(text.as_bytes()).unwrap_err();
        assert_eq!(e.line(), 2, "{bad}");
        assert!(
            matches!(e.kind(), TaggedErrorKind::BadUpdateType { .. }),
            "{bad}: {e}"
        );
    }
}

#[test]
fn crlf_lf_mixed_and_missing_final_line_end_read_the_same() {
    let lf = fixture("5.1.1");
    let want = parse(lf.as_bytes()).unwrap();
    let crlf = lf.replace('\n', "\r\n");
    assert_eq!(parse(crlf.as_bytes()).unwrap(), want);
    let mixed: String = lf
        .split_inclusive('\n')
        .enumerate()
        .map(|(i, l)| {
            if i % 2 == 0 {
                l.replace('\n', "\r\n")
            } else {
                l.to_owned()
            }
        })
        .collect();
    assert_eq!(parse(mixed.as_bytes()).unwrap(), want);
    assert_eq!(parse(lf.trim_end().as_bytes()).unwrap(), want);
    assert_eq!(
        parse(format!("\u{feff}{lf}").as_bytes()).unwrap(),
        want,
        "BOM"
    );
    assert_eq!(parse(crlf.trim_end().as_bytes()).unwrap(), want);
}

#[test]
fn blank_lines_and_keyword_case_and_spacing_are_tolerated() {
    let text = "version: x-tagged-index-1\n\t\nupdatetype: incremental tag\n\nthisupdate: 9\n\
                lastupdate: 8\n \nbegin   io-schema\n\ncn: TOKEN\n  \nEnd IO-SCHEMA\n\n\
                Begin add BLOCK\n\ncn: 1/Bo\n\n-1/Didley\nEND\tAdd Block\n\nbegin update block\n\
                \nbegin new\nsn: 1/Didley\nend new\n\nbegin old\nsn: 1/Diddley\nend old\n\
                end update block\n\n";
    let t = parse(text.as_bytes()).unwrap();
    let Body::Incremental { blocks, .. } = &t.body else {
        panic!()
    };
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        blocks[0],
        Block::Add({
            let mut i = IndexInfo::new();
            i.insert("cn", "Bo", &tags("1")).unwrap();
            i.insert("cn", "Didley", &tags("1")).unwrap();
            i
        })
    );
    let Block::Update { old, new } = &blocks[1] else {
        panic!()
    };
    assert_eq!(
        old.get("sn", "Diddley"),
        Some(&tags("1")),
        "Old after New is read"
    );
    assert_eq!(new.get("sn", "Didley"), Some(&tags("1")));
}

#[test]
fn index_lines_as_the_grammar_defines_them() {
    let t = parse(
        total(
            "cn: 1,3,7/a\n-2-5/b\n-*/c\ncn:9/ spaced value / with:colon \n-10/d:e\n\
             -x: 4/dash-name\nsn;lang-sv: 0/x\n2.5.4.3: 18446744073709551615/oid\n\
             cn:  3/a\nCN: 8/a\nsn;lang-sv: 0/x\n",
        )
        .as_bytes(),
    )
    .unwrap();
    let i = info_of(&t);
    assert_eq!(i.get("cn", "a"), Some(&tags("1,3,7,8")), "repeats merge");
    assert_eq!(i.get("cn", "b"), Some(&tags("2-5")));
    assert!(i.get("cn", "c").unwrap().is_all());
    assert_eq!(i.get("cn", " spaced value / with:colon "), Some(&tags("9")));
    assert_eq!(i.get("cn", "d:e"), Some(&tags("10")));
    assert_eq!(
        i.get("-x", "dash-name"),
        Some(&tags("4")),
        "a name may start with '-'"
    );
    assert_eq!(i.get("SN;LANG-SV", "x"), Some(&tags("0")));
    assert_eq!(i.get("2.5.4.3", "oid"), Some(&tags("18446744073709551615")));
    assert_eq!(parse(&write(&t)).unwrap(), t);
    // A continuation line continues the attribute of the line before, even a dashed one.
    let t = parse(total("-x: 4/a\n-5/b\n").as_bytes()).unwrap();
    assert_eq!(info_of(&t).get("-x", "b"), Some(&tags("5")));
}

#[test]
fn schemas_may_be_empty_and_index_lines_need_not_be_listed() {
    let t = parse(total("dn: 1/x\n").as_bytes()).unwrap();
    assert!(t.schema.is_empty());
    assert_eq!(info_of(&t).len(), 1);
    let t = parse(
        format!("{HEAD}BEGIN IO-Schema\ncn: FULL\ncn: full\nEND IO-Schema\nBEGIN Index-Info\nEND Index-Info\n")
            .as_bytes(),
    )
    .unwrap();
    assert_eq!(
        t.schema.len(),
        1,
        "a repeated schema line with the same type"
    );
    assert!(info_of(&t).is_empty());
}

// ---- errors ---------------------------------------------------------------------------------

#[test]
fn malformed_input_names_its_line() {
    let s = "BEGIN IO-Schema\nEND IO-Schema\n";
    let cases: Vec<(String, u64, &str)> = vec![
        (String::new(), 1, "empty"),
        ("\n\n".into(), 2, "empty"),
        ("hello\n".into(), 1, "expected a header line"),
        (format!("{HEAD}version: x-tagged-index-1\n{s}"), 4, "given twice"),
        (format!("{HEAD}thisupdate: 2\n{s}"), 4, "thisupdate given twice"),
        ("version: x-tagged-index-2\n".into(), 1, "unsupported version"),
        (
            "version: x-tagged-index-1\nupdatetype: total\nthisupdate: -1\n".into(),
            3,
            "thisupdate must be a number",
        ),
        (
            "version: x-tagged-index-1\nupdatetype: total\nthisupdate: 99999999999999999999\n"
                .into(),
            3,
            "must be a number",
        ),
        (
            "version: x-tagged-index-1\nupdatetype: total\nBEGIN IO-Schema\n".into(),
            3,
            "thisupdate is missing",
        ),
        (
            "updatetype: total\nthisupdate: 1\nBEGIN IO-Schema\n".into(),
            3,
            "version is missing",
        ),
        (
            "version: x-tagged-index-1\nupdatetype: incremental\nthisupdate: 1\n\nBEGIN IO-Schema\n"
                .into(),
            5,
            "lastupdate is missing",
        ),
        (format!("{HEAD}a b: c\n{s}"), 4, "expected a header line"),
        (format!("{HEAD}BEGIN Index-Info\n"), 4, "expected a header line or BEGIN IO-Schema"),
        (format!("{HEAD}BEGIN IO-Schema\ncn TOKEN\n"), 5, "schema line"),
        (format!("{HEAD}BEGIN IO-Schema\ncn: WORDS\n"), 5, "unknown token type"),
        (format!("{HEAD}BEGIN IO-Schema\nc n: FULL\n"), 5, "invalid attribute name"),
        (
            format!("{HEAD}BEGIN IO-Schema\ncn: FULL\nCN: TOKEN\n"),
            6,
            "token type TOKEN after FULL",
        ),
        (format!("{HEAD}BEGIN IO-Schema\nBEGIN Index-Info\n"), 5, "END IO-Schema"),
        (format!("{HEAD}BEGIN IO-Schema\nBEGIN IO-Scheme\n"), 5, "unknown section marker"),
        (format!("{HEAD}{s}BEGIN Add Block\n"), 6, "the updatetype is total"),
        (format!("{HEAD}{s}cn: 1/x\n"), 6, "BEGIN Index-Info"),
        (format!("{HEAD}{s}"), 5, "expected BEGIN Index-Info"),
        (format!("{HEAD}BEGIN IO-Schema\n"), 4, "IO-Schema opened at line 4"),
        (total("cn: 1/x\n-2/y\ncn 3/z\n"), 9, "expected an index line"),
        (total("-1/x\n"), 7, "continuation line with no attribute"),
        (total("cn: 1/\n"), 7, "empty value"),
        (total("cn: /x\n"), 7, "empty tag list"),
        (total("cn: 1 /x\n"), 7, "\"1 \" is not a tag"),
        (total("cn: 1,,2/x\n"), 7, "is not a tag"),
        (total("cn: 3-1/x\n"), 7, "runs backwards"),
        (total("cn: 18446744073709551616/x\n"), 7, "too large"),
        (total("c_n: 1/x\n"), 7, "invalid attribute name"),
        (total("cn: 1/x\nEND Add Block\n"), 8, "END Index-Info"),
        (total("cn: 1/x\n") + "cn: 2/y\n", 9, "the header of another io-part"),
        (total("") + "BEGIN Index-Info\n", 8, "the end of the object"),
        (
            format!("{HEAD}{s}BEGIN Index-Info\ncn: 1/x\n"),
            7,
            "Index-Info opened at line 6",
        ),
        (
            "version: x-tagged-index-1\nupdatetype: incremental\nthisupdate: 2\nlastupdate: 1\n\
             BEGIN IO-Schema\nEND IO-Schema\nBEGIN Update Block\ncn: 1/x\n"
                .into(),
            8,
            "BEGIN Old, BEGIN New or END Update Block",
        ),
        (
            "version: x-tagged-index-1\nupdatetype: incremental\nthisupdate: 2\nlastupdate: 1\n\
             BEGIN IO-Schema\nEND IO-Schema\nBEGIN Update Block\nBEGIN New\ncn: 1/x\nEND Old\n"
                .into(),
            10,
            "END New",
        ),
        (
            "version: x-tagged-index-1\nupdatetype: incremental\nthisupdate: 2\nlastupdate: 1\n\
             BEGIN IO-Schema\nEND IO-Schema\nBEGIN Delete Block\ncn: 1/x\n"
                .into(),
            8,
            "Delete Block opened at line 7",
        ),
        (
            "version: x-tagged-index-1\nupdatetype: incremental\nthisupdate: 2\nlastupdate: 1\n\
             BEGIN IO-Schema\nEND IO-Schema\nBEGIN Index-Info\n"
                .into(),
            7,
            "the updatetype is incremental",
        ),
        (
            "version: x-tagged-index-1\nupdatetype: incremental\nthisupdate: 2\nlastupdate: 1\n\
             BEGIN IO-Schema\nEND IO-Schema\ncn: 1/x\n"
                .into(),
            7,
            "or the header of another io-part",
        ),
        (total("cn: 1/x\n") + "version: x-tagged-index-1\n", 9, "BEGIN IO-Schema"),
        (
            total("cn: 1/x\n")
                + "version: x-tagged-index-1\nupdatetype: incremental\nthisupdate: 1\n\
                   lastupdate: 1\nBEGIN IO-Schema\nEND IO-Schema\n",
            13,
            "io-part's updatetype differs",
        ),
        (
            format!("{HEAD}BEGIN IO-Schema\ncn: FULL\nEND IO-Schema\nBEGIN Index-Info\nEND Index-Info\n")
                + &format!("{HEAD}BEGIN IO-Schema\ncn: DNS\nEND IO-Schema\nBEGIN Index-Info\nEND Index-Info\n"),
            13,
            "token type DNS after FULL",
        ),
        (format!("{HEAD}x: a\0b\n"), 4, "NUL"),
        (format!("{HEAD}x: a\rb\n"), 4, "bare CR"),
        ("version: x-tagged-index-1\nx: \u{fffd}\n".replace('\u{fffd}', "\u{e9}"), 0, ""),
    ];
    for (input, line, needle) in cases {
        if line == 0 {
            // Valid UTF-8 (é) is fine; the byte 0xE9 alone is not.
            assert!(!matches!(
                parse(input.as_bytes()).map_err(|e| e.kind().clone()),
                Err(TaggedErrorKind::NotUtf8)
            ));
            continue;
        }
        let e = parse(input.as_bytes()).expect_err(&input);
        assert_eq!(e.line(), line, "{input:?}: {e}");
        let msg = e.to_string();
        assert!(msg.starts_with(&format!("line {line}: ")), "{msg}");
        assert!(msg.contains(needle), "{input:?}: {msg:?} lacks {needle:?}");
    }
    let e = parse(b"version: x-tagged-index-1\nx-bad: \xe9t\xe9\n").unwrap_err();
    assert_eq!((e.line(), e.kind()), (2, &TaggedErrorKind::NotUtf8));
}

#[test]
fn limits_are_enforced_at_their_line() {
    let tight = TaggedLimits {
        max_line_length: 40,
        max_entries: 3,
        max_tags_per_value: 3,
        max_header_lines: 4,
        max_schema_lines: 2,
        max_parts: 2,
        max_blocks: 2,
    };
    let check = |input: &str, line: u64, kind: TaggedErrorKind| {
        let e = parse_with_limits(input.as_bytes(), &tight).unwrap_err();
        assert_eq!((e.line(), e.kind()), (line, &kind), "{input:?}: {e}");
        assert!(e.to_string().starts_with(&format!("line {line}: ")));
    };
    check(
        &total(&format!("cn: 1/{}\n", "x".repeat(40))),
        7,
        TaggedErrorKind::LineTooLong { max: 40 },
    );
    assert!(
        parse_with_limits(
            total(&format!("cn: 1/{}\n", "x".repeat(34))).as_bytes(),
            &tight
        )
        .is_ok(),
        "exactly 40 bytes"
    );
    check(
        &total("cn: 1/a\n-2/b\n-3/c\n-4/d\n"),
        10,
        TaggedErrorKind::TooManyEntries { max: 3 },
    );
    check(
        &total("cn: 1,2,3,4/a\n"),
        7,
        TaggedErrorKind::BadTagList(TagListError::TooMany { max: 3 }),
    );
    check(
        &total("cn: 1,3,5/a\n-7/a\n"),
        8,
        TaggedErrorKind::TooManyTags {
            attribute: "cn".into(),
            value: "a".into(),
            max: 3,
        },
    );
    // Counted as written, over the lines that repeat a value, before merging.
    check(
        &total("cn: 1,3/a\n-5/b\n-7,9/a\n"),
        9,
        TaggedErrorKind::TooManyTags {
            attribute: "cn".into(),
            value: "a".into(),
            max: 3,
        },
    );
    assert!(parse_with_limits(total("cn: 1,3/a\n-5/a\n").as_bytes(), &tight).is_ok());
    check(
        &format!("{HEAD}a: 1\nb: 2\n"),
        5,
        TaggedErrorKind::TooManyHeaderLines { max: 4 },
    );
    check(
        &format!("{HEAD}BEGIN IO-Schema\na: FULL\nb: FULL\nc: FULL\n"),
        7,
        TaggedErrorKind::TooManySchemaLines { max: 2 },
    );
    check(
        &total("").repeat(3),
        15,
        TaggedErrorKind::TooManyParts { max: 2 },
    );
    check(
        "version: x-tagged-index-1\nupdatetype: incremental\nthisupdate: 2\nlastupdate: 1\n\
         BEGIN IO-Schema\nEND IO-Schema\nBEGIN Add Block\nEND Add Block\n\
         BEGIN Delete Block\nEND Delete Block\nBEGIN Update Block\n",
        11,
        TaggedErrorKind::TooManyBlocks { max: 2 },
    );
    // A huge line is refused without reading it into a String.
    let mut big = total("").into_bytes();
    big.extend(std::iter::repeat_n(b'x', 10 << 20));
    let e = parse(&big).unwrap_err();
    assert_eq!(
        e.kind(),
        &TaggedErrorKind::LineTooLong {
            max: TaggedLimits::default().max_line_length
        }
    );
    // One range is one item however many tags it covers.
    let t = parse_with_limits(total("cn: 0-18446744073709551615/a\n").as_bytes(), &tight).unwrap();
    assert_eq!(t.record_count(), u64::MAX);
}

// ---- incremental updates --------------------------------------------------------------------

fn index(this_update: u64, entries: &[(&str, &str, &str)]) -> TaggedIndex {
    let mut info = IndexInfo::new();
    for (a, v, t) in entries {
        info.insert(a, v, &tags(t)).unwrap();
    }
    TaggedIndex {
        body: Body::Total {
            last_update: None,
            info,
        },
        ..TaggedIndex::total(this_update)
    }
}

fn block_info(entries: &[(&str, &str, &str)]) -> IndexInfo {
    index(0, entries).info().unwrap().clone()
}

fn incremental(mode: Option<IncrementalMode>, last: u64, blocks: Vec<Block>) -> TaggedIndex {
    TaggedIndex {
        body: Body::Incremental {
            mode,
            last_update: last,
            blocks,
        },
        ..TaggedIndex::total(last + 1)
    }
}

#[test]
fn apply_needs_a_stored_total_and_a_matching_lastupdate() {
    let mut stored = index(10, &[("cn", "a", "1")]);
    let before = stored.clone();
    // Equality, not ordering: a lastupdate before or after the stored thisupdate is refused.
    for last in [9, 11, 0] {
        let up = incremental(None, last, vec![]);
        assert_eq!(
            stored.apply(&up),
            Err(ApplyError::LastUpdateMismatch {
                stored: 10,
                last_update: last
            })
        );
    }
    assert_eq!(stored, before);
    let mut up = incremental(None, 10, vec![]);
    up.this_update = 3;
    stored.apply(&up).unwrap();
    assert_eq!(
        stored.this_update, 3,
        "a thisupdate earlier than lastupdate is fine"
    );
    let mut inc = incremental(None, 3, vec![]);
    assert_eq!(
        inc.apply(&incremental(None, 4, vec![])),
        Err(ApplyError::NotTotal)
    );
    // A total replaces the stored index, whatever its timestamps.
    let replacement = index(1, &[("sn", "b", "*")]);
    stored.apply(&replacement).unwrap();
    assert_eq!(stored, replacement);
}

#[test]
fn the_header_mode_overrides_the_agreement() {
    let stored = index(1, &[("cn", "a", "1"), ("cn", "b", "2")]);
    let del = vec![Block::Delete(block_info(&[("cn", "b", "1")]))];
    // Tag based: tag 1 is stored record 1.
    let mut s = stored.clone();
    s.apply_with(
        &incremental(Some(IncrementalMode::TagBased), 1, del.clone()),
        &options(IncrementalMode::CompleteRecord),
    )
    .unwrap();
    assert_eq!(lines(&s), ["cn: 2/b"]);
    // Complete record (the agreement, for a bare `incremental`): the record holding exactly b.
    let mut s = stored.clone();
    s.apply(&incremental(None, 1, del)).unwrap();
    assert_eq!(lines(&s), ["cn: 1/a"]);
}

#[test]
fn complete_record_matches_exact_token_sets() {
    let stored = index(
        1,
        &[
            ("cn", "Jensen", "1-4"),
            ("cn", "Bo", "2,3"),
            ("sn", "x", "3"),
            ("o", "Ace", "*"),
        ],
    );
    let run = |blocks: Vec<Block>| {
        let mut s = stored.clone();
        s.apply(&incremental(None, 1, blocks)).map(|()| lines(&s))
    };
    // {cn Jensen, cn Bo, o Ace} is record 2 only: record 3 also has sn x.
    assert_eq!(
        run(vec![Block::Delete(block_info(&[
            ("cn", "Jensen", "7"),
            ("cn", "Bo", "7"),
            ("o", "Ace", "*"),
        ]))]),
        Ok(vec![
            "cn: 3/Bo".to_owned(),
            "cn: 1,3,4/Jensen".into(),
            "o: */Ace".into(),
            "sn: 3/x".into()
        ])
    );
    // A record lacking a `*` value, or with a value no record has, matches nothing.
    for blocks in [
        vec![Block::Delete(block_info(&[
            ("cn", "Jensen", "1"),
            ("cn", "Bo", "1"),
        ]))],
        vec![Block::Delete(block_info(&[
            ("cn", "Jensen", "1"),
            ("o", "Acme", "1"),
        ]))],
        vec![Block::Delete(block_info(&[("o", "Ace", "1")]))],
    ] {
        assert_eq!(
            run(blocks),
            Err(ApplyError::RecordNotFound {
                block: 1,
                kind: "Delete",
                tag: 1
            })
        );
    }
    // Identical records 1 and 4: two deletes take both, a third finds none.
    let two = block_info(&[("cn", "Jensen", "1,2"), ("o", "Ace", "*")]);
    assert_eq!(
        run(vec![Block::Delete(two)]),
        Ok(vec![
            "cn: 2,3/Bo".to_owned(),
            "cn: 2,3/Jensen".into(),
            "o: */Ace".into(),
            "sn: 3/x".into()
        ])
    );
    let three = block_info(&[("cn", "Jensen", "1-3"), ("o", "Ace", "*")]);
    assert_eq!(
        run(vec![Block::Delete(three)]),
        Err(ApplyError::RecordNotFound {
            block: 1,
            kind: "Delete",
            tag: 3
        })
    );
    // Update: record 3 loses sn x and `o: Ace`, so `*` becomes explicit for the others.
    let update = Block::Update {
        old: block_info(&[
            ("cn", "Jensen", "5"),
            ("cn", "Bo", "5"),
            ("sn", "x", "5"),
            ("o", "Ace", "5"),
        ]),
        new: block_info(&[("cn", "Jensen", "5"), ("cn", "Bo", "5"), ("sn", "y", "5")]),
    };
    assert_eq!(
        run(vec![update]),
        Ok(vec![
            "cn: 2,3/Bo".to_owned(),
            "cn: 1-4/Jensen".into(),
            "o: 1,2,4/Ace".into(),
            "sn: 3/y".into()
        ])
    );
    let orphan = Block::Update {
        old: block_info(&[
            ("sn", "x", "1"),
            ("cn", "Jensen", "1"),
            ("cn", "Bo", "1"),
            ("o", "Ace", "1"),
        ]),
        new: block_info(&[("sn", "z", "1,2")]),
    };
    assert_eq!(
        run(vec![orphan]),
        Err(ApplyError::UnmatchedNew { block: 1, tag: 2 })
    );
    // Added records get fresh tags after the largest, in order; `*` is every added record.
    let add = Block::Add(block_info(&[
        ("cn", "New", "10,20"),
        ("o", "Ace", "*"),
        ("sn", "q", "20"),
    ]));
    assert_eq!(
        run(vec![add]),
        Ok(vec![
            "cn: 2,3/Bo".to_owned(),
            "cn: 1-4/Jensen".into(),
            "cn: 5,6/New".into(),
            "o: */Ace".into(),
            "sn: 6/q".into(),
            "sn: 3/x".into()
        ])
    );
}

#[test]
fn complete_record_work_is_bounded() {
    let stored = index(1, &[("cn", "a", "1-1000000")]);
    let mut s = stored.clone();
    let del = Block::Delete(block_info(&[("cn", "a", "1-1000000")]));
    let small = ApplyOptions {
        max_work: 1000,
        ..ApplyOptions::default()
    };
    assert_eq!(
        s.apply_with(&incremental(None, 1, vec![del]), &small),
        Err(ApplyError::TooLarge {
            block: 1,
            kind: "Delete",
            max: 1000
        })
    );
    assert_eq!(s, stored);
    // Tag-based and unique-ID updates never walk single tags.
    let tagged = Block::Delete(block_info(&[("cn", "a", "1-999999")]));
    s.apply_with(
        &incremental(Some(IncrementalMode::TagBased), 1, vec![tagged]),
        &small,
    )
    .unwrap();
    assert_eq!(lines(&s), ["cn: 1000000/a"]);
}

#[test]
fn every_update_is_bounded_by_the_work_budget() {
    let small = ApplyOptions {
        consistency: IncrementalMode::TagBased,
        max_work: 1000,
        ..ApplyOptions::default()
    };
    // 50 `*` lines over 50 scattered records: a newcomer lacking them would copy the record
    // set into each (50 x 50 ranges).
    let mut entries: Vec<(String, String, String)> = (0..50)
        .map(|i| ("sn".to_owned(), format!("v{i}"), "*".to_owned()))
        .collect();
    let odd: Vec<String> = (0..50).map(|i| (2 * i + 1).to_string()).collect();
    entries.push(("cn".into(), "x".into(), odd.join(",")));
    let borrowed: Vec<(&str, &str, &str)> = entries
        .iter()
        .map(|(a, v, t)| (a.as_str(), v.as_str(), t.as_str()))
        .collect();
    let stored = index(1, &borrowed);
    let newcomer = incremental(
        None,
        1,
        vec![Block::Add(block_info(&[("cn", "y", "1000")]))],
    );
    let mut s = stored.clone();
    assert_eq!(
        s.apply_with(&newcomer, &small),
        Err(ApplyError::TooLarge {
            block: 1,
            kind: "Add",
            max: 1000
        })
    );
    assert_eq!(s, stored);
    s.apply_with(&newcomer, &options(IncrementalMode::TagBased))
        .unwrap();
    assert_eq!(info_of(&s).get("sn", "v7").unwrap().len(), Some(50));
    // Each block scans the index (2 units here): many blocks cost as much as a big one.
    let tiny = index(1, &[("cn", "a", "1")]);
    let many = incremental(None, 1, vec![Block::Delete(IndexInfo::new()); 600]);
    let mut t = tiny.clone();
    assert!(matches!(
        t.apply_with(&many, &small),
        Err(ApplyError::TooLarge { block: 501, .. })
    ));
    assert_eq!(t, tiny);
}

#[test]
fn fresh_tags_never_overflow() {
    let mut s = index(1, &[("cn", "a", "18446744073709551614")]);
    let add = |t| incremental(None, 1, vec![Block::Add(block_info(&[("cn", "b", t)]))]);
    let before = s.clone();
    assert_eq!(
        s.apply(&add("1,2")),
        Err(ApplyError::TagSpaceExhausted { block: 1 })
    );
    assert_eq!(s, before);
    s.apply(&add("7")).unwrap();
    assert_eq!(
        lines(&s),
        ["cn: 18446744073709551614/a", "cn: 18446744073709551615/b"]
    );
}

#[test]
fn tag_based_star_lines_and_lenient_tokens() {
    let stored = index(
        1,
        &[("sn", "Jensen", "*"), ("cn", "a", "1,2"), ("cn", "b", "3")],
    );
    let run = |blocks: Vec<Block>| {
        let mut s = stored.clone();
        s.apply(&incremental(Some(IncrementalMode::TagBased), 1, blocks))
            .unwrap();
        lines(&s)
    };
    // A newcomer without Jensen makes `*` explicit; one with it keeps `*`.
    assert_eq!(
        run(vec![Block::Add(block_info(&[("cn", "c", "4")]))]),
        ["cn: 1,2/a", "cn: 3/b", "cn: 4/c", "sn: 1-3/Jensen"]
    );
    assert_eq!(
        run(vec![Block::Add(block_info(&[
            ("cn", "c", "4"),
            ("sn", "Jensen", "*")
        ]))]),
        ["cn: 1,2/a", "cn: 3/b", "cn: 4/c", "sn: */Jensen"]
    );
    // Deleting a record removes its tag everywhere, whatever tokens the block lists.
    assert_eq!(
        run(vec![Block::Delete(block_info(&[("cn", "zzz", "1")]))]),
        ["cn: 2/a", "cn: 3/b", "sn: */Jensen"]
    );
    // Removing Jensen from record 2 makes `*` explicit; a missing old token is ignored.
    assert_eq!(
        run(vec![Block::Update {
            old: block_info(&[("sn", "Jensen", "2"), ("cn", "nope", "1")]),
            new: block_info(&[("sn", "Smith", "2")]),
        }]),
        ["cn: 1,2/a", "cn: 3/b", "sn: 1,3/Jensen", "sn: 2/Smith"]
    );
    // `*` in an Update Block is every record of the index.
    assert_eq!(
        run(vec![Block::Update {
            old: block_info(&[("sn", "Jensen", "*")]),
            new: block_info(&[("o", "Ace", "*")]),
        }]),
        ["cn: 1,2/a", "cn: 3/b", "o: */Ace"]
    );
}

#[test]
fn unique_id_renames_and_errors() {
    let stored = index(1, &[("dn", "A", "1"), ("dn", "B", "2"), ("cn", "x", "1,2")]);
    let run = |blocks: Vec<Block>| {
        let mut s = stored.clone();
        s.apply(&incremental(
            Some(IncrementalMode::UniqueIdBased),
            1,
            blocks,
        ))
        .map(|()| lines(&s))
    };
    // An ID on Old and another on New renames; Old's other tokens go, New's come.
    assert_eq!(
        run(vec![Block::Update {
            old: block_info(&[("dn", "A", "9"), ("cn", "x", "9")]),
            new: block_info(&[("dn", "A2", "9"), ("cn", "y", "9")]),
        }]),
        Ok(vec![
            "cn: 2/x".to_owned(),
            "cn: 1/y".into(),
            "dn: 1/A2".into(),
            "dn: 2/B".into()
        ])
    );
    // The ID on Old alone is kept.
    assert_eq!(
        run(vec![Block::Update {
            old: block_info(&[("DN", "B", "1"), ("cn", "x", "1")]),
            new: IndexInfo::new(),
        }]),
        Ok(vec![
            "cn: 1/x".to_owned(),
            "dn: 1/A".into(),
            "dn: 2/B".into()
        ])
    );
    assert_eq!(
        run(vec![Block::Delete(block_info(&[("dn", "C", "1")]))]),
        Err(ApplyError::UniqueIdNotFound {
            block: 1,
            kind: "Delete",
            value: "C".into()
        })
    );
    assert_eq!(
        run(vec![Block::Delete(block_info(&[
            ("dn", "A", "1"),
            ("cn", "x", "2")
        ]))]),
        Err(ApplyError::MissingUniqueId {
            block: 1,
            kind: "Delete",
            tag: 2,
            attribute: "dn".into()
        })
    );
    assert_eq!(
        run(vec![Block::Update {
            old: IndexInfo::new(),
            new: block_info(&[("dn", "A", "1"), ("cn", "z", "1,2")]),
        }]),
        Err(ApplyError::MissingUniqueId {
            block: 1,
            kind: "Update",
            tag: 2,
            attribute: "dn".into()
        })
    );
    assert_eq!(
        run(vec![Block::Update {
            old: block_info(&[("dn", "A", "1"), ("dn", "B", "1")]),
            new: IndexInfo::new(),
        }]),
        Err(ApplyError::AmbiguousUniqueId { block: 1, tag: 1 })
    );
    // Another unique attribute, by agreement.
    let mut s = index(1, &[("uid", "bjensen", "4"), ("cn", "x", "4")]);
    s.apply_with(
        &incremental(
            None,
            1,
            vec![Block::Delete(block_info(&[("uid", "bjensen", "1")]))],
        ),
        &ApplyOptions {
            consistency: IncrementalMode::UniqueIdBased,
            unique_attribute: "UID".into(),
            ..ApplyOptions::default()
        },
    )
    .unwrap();
    assert!(info_of(&s).is_empty());
}

#[test]
fn large_objects_take_linear_work() {
    // One line per (record, token), as RFC 2654 §5.2.1 writes its Old block: a value repeated
    // on 30000 lines is merged once, not once per line.
    let n = 30_000u64;
    let mut text = String::from(HEAD);
    text.push_str("BEGIN IO-Schema\nEND IO-Schema\nBEGIN Index-Info\n");
    for t in 1..=n {
        text.push_str(&format!(
            "dn: {t}/id{t}\nsn: {t}/Jensen\ncn: {}/c{}\n",
            t,
            t % 97
        ));
    }
    text.push_str("END Index-Info\n");
    let stored = parse(text.as_bytes()).unwrap();
    assert_eq!(info_of(&stored).get("sn", "Jensen"), Some(&tags("1-30000")));
    assert_eq!(stored.record_count(), n);

    // Unique-ID: a new attribute for every record, named by its dn (as in §5.3.3).
    let mut new = IndexInfo::new();
    for t in 1..=n {
        new.insert("dn", &format!("id{t}"), &TagSet::single(t + 7))
            .unwrap();
    }
    new.insert("locality", "New", &tags("8-30007")).unwrap();
    let up = incremental(
        Some(IncrementalMode::UniqueIdBased),
        1,
        vec![Block::Update {
            old: IndexInfo::new(),
            new,
        }],
    );
    let mut s = stored.clone();
    s.apply(&up).unwrap();
    assert_eq!(info_of(&s).get("locality", "New"), Some(&tags("1-30000")));

    // Complete record: delete 600 records found by their token sets.
    let mut del = IndexInfo::new();
    for t in (1..=n).step_by(50) {
        let local = TagSet::single(t * 3);
        del.insert("dn", &format!("id{t}"), &local).unwrap();
        del.insert("sn", "Jensen", &local).unwrap();
        del.insert("cn", &format!("c{}", t % 97), &local).unwrap();
    }
    let mut s = stored.clone();
    s.apply(&incremental(None, 1, vec![Block::Delete(del)]))
        .unwrap();
    assert_eq!(s.record_count(), n - 600);
}

// ---- property tests -------------------------------------------------------------------------

fn arb_tags() -> impl Strategy<Value = TagSet> {
    prop_oneof![
        1 => Just(TagSet::all()),
        8 => prop::collection::vec((0u64..40, 0u64..5), 1..4).prop_map(|v| {
            TagSet::from_ranges(v.into_iter().map(|(a, l)| (a, a + l))).unwrap()
        }),
        1 => (0u64..3).prop_map(|d| TagSet::single(u64::MAX - d)),
    ]
}

fn arb_info() -> impl Strategy<Value = IndexInfo> {
    prop::collection::vec(
        (
            "[A-Za-z0-9;.-][A-Za-z0-9;.-]{0,6}",
            "[^\r\n\u{0}]{1,10}",
            arb_tags(),
        ),
        0..8,
    )
    .prop_map(|v| {
        let mut i = IndexInfo::new();
        for (a, val, t) in v {
            i.insert(&a, &val, &t).unwrap();
        }
        i
    })
}

fn arb_block() -> impl Strategy<Value = Block> {
    prop_oneof![
        arb_info().prop_map(Block::Add),
        arb_info().prop_map(Block::Delete),
        (arb_info(), arb_info()).prop_map(|(old, new)| Block::Update { old, new }),
    ]
}

fn arb_mode() -> impl Strategy<Value = Option<IncrementalMode>> {
    prop::option::of(prop::sample::select(IncrementalMode::ALL.to_vec()))
}

fn arb_index() -> impl Strategy<Value = TaggedIndex> {
    let body = prop_oneof![
        (prop::option::of(any::<u64>()), arb_info())
            .prop_map(|(last_update, info)| Body::Total { last_update, info }),
        (
            arb_mode(),
            any::<u64>(),
            prop::collection::vec(arb_block(), 0..4)
        )
            .prop_map(|(mode, last_update, blocks)| Body::Incremental {
                mode,
                last_update,
                blocks
            }),
    ];
    let schema = prop::collection::vec(
        (
            "[A-Za-z0-9;.-]{1,6}",
            prop::sample::select(TokenType::ALL.to_vec()),
        ),
        0..5,
    )
    .prop_map(|v| {
        let mut s = Schema::new();
        for (a, t) in v {
            s.insert(&a, t).unwrap();
        }
        s
    });
    let extra = prop::collection::vec(
        (
            "x-[a-z]{1,5}",
            "([^\r\n\u{0} \t]([^\r\n\u{0}]{0,8}[^\r\n\u{0} \t])?)?",
        ),
        0..3,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(n, val)| HeaderField::new(&n, &val).unwrap())
            .collect::<Vec<_>>()
    });
    (
        any::<u64>(),
        prop::option::of(any::<u64>()),
        extra,
        schema,
        body,
    )
        .prop_map(
            |(this_update, context_size, extra_headers, schema, body)| TaggedIndex {
                this_update,
                context_size,
                extra_headers,
                schema,
                body,
            },
        )
}

proptest! {
    #[test]
    fn written_objects_parse_back_equal(idx in arb_index()) {
        let out = write(&idx);
        let again = parse(&out).map_err(|e| {
            TestCaseError::fail(format!("{e}\n{}", String::from_utf8_lossy(&out)))
        })?;
        prop_assert_eq!(&again, &idx);
        prop_assert_eq!(write(&again), out.clone());
        // The same with LF line ends.
        let lf = String::from_utf8(out).unwrap().replace("\r\n", "\n");
        prop_assert_eq!(parse(lf.as_bytes()).unwrap(), idx);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = parse(&bytes);
        let _ = parse_with_limits(&bytes, &TaggedLimits {
            max_line_length: 16,
            max_entries: 4,
            max_tags_per_value: 2,
            max_header_lines: 3,
            max_schema_lines: 2,
            max_parts: 2,
            max_blocks: 2,
        });
    }

    #[test]
    fn mutated_objects_never_panic(
        idx in arb_index(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
        base in arb_index(),
    ) {
        let mut bytes = write(&idx);
        for (at, byte, op) in edits {
            let i = at.index(bytes.len() + 1);
            match op {
                0 => bytes.insert(i, byte),
                1 if i < bytes.len() => { bytes.remove(i); }
                _ if i < bytes.len() => bytes[i] = byte,
                _ => bytes.push(byte),
            }
        }
        if let Ok(parsed) = parse(&bytes) {
            prop_assert_eq!(parse(&write(&parsed)).unwrap(), parsed.clone());
            // Whatever parses can be applied (or refused) without panicking.
            for mode in IncrementalMode::ALL {
                let mut stored = base.clone();
                if let Body::Incremental { last_update, .. } = &parsed.body {
                    stored.this_update = *last_update;
                }
                let _ = stored.apply_with(&parsed, &options(mode));
                let _ = stored.value_counts();
            }
        }
    }
}

// ---- incremental updates against an oracle ---------------------------------------------------

/// A record's tokens, `(attribute, value)`.
type Rec = BTreeSet<(String, String)>;

const ATTRS: [&str; 3] = ["cn", "sn", "title"];
const VALUES: [&str; 4] = ["a", "b", "c", "A"];

fn rec(tokens: &[(usize, usize)]) -> Rec {
    tokens
        .iter()
        .map(|&(a, v)| (ATTRS[a].to_owned(), VALUES[v].to_owned()))
        .collect()
}

fn info_from(records: &[(u64, Rec)]) -> IndexInfo {
    let mut i = IndexInfo::new();
    for (t, r) in records {
        for (a, v) in r {
            i.insert(a, v, &TagSet::single(*t)).unwrap();
        }
    }
    i
}

/// Every explicitly named record and its tokens (with the `*` lines).
fn forward(idx: &TaggedIndex) -> BTreeMap<u64, Rec> {
    let info = info_of(idx);
    let mut out: BTreeMap<u64, Rec> = BTreeMap::new();
    for t in info
        .explicit_tags()
        .ranges()
        .iter()
        .flat_map(|&(a, b)| a..=b)
    {
        let r = info
            .entries()
            .filter(|(_, _, tags)| tags.contains(t))
            .map(|(a, v, _)| (a.to_owned(), v.to_owned()))
            .collect();
        out.insert(t, r);
    }
    out
}

#[derive(Debug, Clone)]
enum Change {
    Keep,
    Delete,
    Modify(Vec<(usize, usize)>),
}

fn arb_tokens() -> impl Strategy<Value = Vec<(usize, usize)>> {
    prop::collection::vec((0..ATTRS.len(), 0..VALUES.len()), 1..4)
}

fn arb_change() -> impl Strategy<Value = Change> {
    prop_oneof![
        Just(Change::Keep),
        Just(Change::Delete),
        arb_tokens().prop_map(Change::Modify),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn incremental_updates_match_rebuilding_the_index(
        stored in prop::collection::vec(arb_tokens(), 1..6),
        changes in prop::collection::vec(arb_change(), 6),
        added in prop::collection::vec(arb_tokens(), 0..3),
        mode in prop::sample::select(IncrementalMode::ALL.to_vec()),
        star in any::<bool>(),
        order in 0usize..6,
    ) {
        // Records get a unique `dn` in the tag and unique-ID bases (which lets `*` lines be
        // used safely: no record is named by `*` lines alone). Complete-record records have
        // none, so identical records occur.
        let with_id = mode != IncrementalMode::CompleteRecord;
        let id = |r: Rec, name: String| -> Rec {
            let mut r = r;
            if with_id {
                r.insert(("dn".to_owned(), name));
            }
            r
        };
        let before: Vec<(u64, Rec)> = stored
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u64 + 1, id(rec(t), format!("old{i}"))))
            .collect();
        let n = before.len() as u64;
        let mut total_info = info_from(&before);
        if star && with_id && n >= 2 {
            let everyone = TagSet::from_ranges([(1, n)]).unwrap();
            let full: Vec<(String, String)> = total_info
                .entries()
                .filter(|(_, _, t)| **t == everyone)
                .map(|(a, v, _)| (a.to_owned(), v.to_owned()))
                .collect();
            for (a, v) in full {
                total_info.set(&a, &v, TagSet::all());
            }
        }
        let mut stored_idx = TaggedIndex::total(100);
        stored_idx.body = Body::Total { last_update: None, info: total_info };

        // The expected records, and the blocks saying how to get there.
        let mut after: Vec<(u64, Rec)> = Vec::new();
        let (mut add, mut del, mut old, mut new) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, ((tag, r), change)) in before.iter().zip(&changes).enumerate() {
            let local = i as u64 + 1;
            // The tag in the block: the stored one, or a local one.
            let bt = if mode == IncrementalMode::TagBased { *tag } else { local };
            match change {
                Change::Keep => after.push((*tag, r.clone())),
                Change::Delete => {
                    let listed = if mode == IncrementalMode::UniqueIdBased {
                        r.iter().filter(|(a, _)| a == "dn").cloned().collect()
                    } else {
                        r.clone()
                    };
                    del.push((bt, listed));
                }
                Change::Modify(t) => {
                    let name = r.iter().find(|(a, _)| a == "dn").map(|(_, v)| v.clone());
                    let nr = id(rec(t), name.unwrap_or_default());
                    let ids: Rec = r.iter().filter(|(a, _)| a == "dn").cloned().collect();
                    match mode {
                        IncrementalMode::CompleteRecord => {
                            old.push((bt, r.clone()));
                            new.push((bt, nr.clone()));
                        }
                        IncrementalMode::TagBased => {
                            old.push((bt, r.difference(&nr).cloned().collect()));
                            new.push((bt, nr.difference(r).cloned().collect()));
                        }
                        IncrementalMode::UniqueIdBased => {
                            old.push((bt, r.difference(&nr).cloned().chain(ids.clone()).collect()));
                            new.push((bt, nr.difference(r).cloned().chain(ids).collect()));
                        }
                    }
                    after.push((*tag, nr));
                }
            }
        }
        for (j, t) in added.iter().enumerate() {
            let r = id(rec(t), format!("new{j}"));
            let tag = n + 1 + j as u64;
            let bt = if mode == IncrementalMode::TagBased { tag } else { j as u64 + 1 };
            add.push((bt, r.clone()));
            after.push((tag, r));
        }
        let mut blocks = [
            Block::Add(info_from(&add)),
            Block::Delete(info_from(&del)),
            Block::Update { old: info_from(&old), new: info_from(&new) },
        ];
        // The changes touch different records, so any block order gives the same result.
        let orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
        let mut ordered = Vec::new();
        for i in orders[order] {
            ordered.push(std::mem::replace(&mut blocks[i], Block::Add(IndexInfo::new())));
        }
        let update = TaggedIndex {
            body: Body::Incremental { mode: Some(mode), last_update: 100, blocks: ordered },
            ..TaggedIndex::total(200)
        };
        prop_assert_eq!(&parse(&write(&update)).unwrap(), &update);

        let mut applied = stored_idx.clone();
        applied.apply(&update).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(applied.this_update, 200);
        let got = forward(&applied);
        if mode == IncrementalMode::TagBased {
            let want: BTreeMap<u64, Rec> = after.into_iter().collect();
            prop_assert_eq!(got, want);
        } else {
            // Tags are ours to choose: compare the records as a multiset.
            let mut got: Vec<Rec> = got.into_values().collect();
            let mut want: Vec<Rec> = after.into_iter().map(|(_, r)| r).collect();
            got.sort();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }
}
