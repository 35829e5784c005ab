//! Fuzzes the CIP-HINT reader (RFC 2655 Appendix B) and its parts: the weightlist codec and
//! `Template:Attribute` specs.
//!
//! The whole input is tried three ways: as a weightlist value, as an attribute spec (when it
//! is UTF-8), and as SOIF whose objects are read as hints. Checks: no panic; every error's
//! offset (and attribute index) points inside what was read; a weightlist or spec that
//! parses writes back to one that parses equal; a hint that reads writes back to SOIF that
//! parses, and reads back to an equal hint (thresholds may move next to their weightlists,
//! which is the canonical order), which then writes identically. When every object reads
//! as a hint, the charge `ChargeScanner` reads from the bytes (fed in pieces) is at most
//! the table's charge of the largest hint: a poller refusing a hint as it arrives never
//! refuses one the table would take.

#![no_main]

use bytes::Bytes;
use cip_proto::soif::{Limits, SoifObject, parse_all};
use hints::hint::{AttrSpec, CipHint, HintError};
use hints::weightlist;
use libfuzzer_sys::fuzz_target;

fn limits() -> Limits {
    Limits {
        max_value_size: 4096,
        max_attributes: 64,
        max_object_size: 16384,
        max_token_len: 256,
    }
}

fn check_weightlist(input: &Bytes) {
    match weightlist::parse(input) {
        Ok(list) => {
            let encoded = Bytes::from(weightlist::encode(&list));
            let back = weightlist::parse(&encoded).expect("an encoded weightlist parses");
            assert_eq!(back, list, "weightlist encode -> parse");
        }
        Err(e) => assert!(
            e.offset <= input.len(),
            "weightlist error offset {} past {} bytes",
            e.offset,
            input.len()
        ),
    }
}

fn check_spec(text: &str) {
    match AttrSpec::parse(text) {
        Ok(spec) => {
            let back = AttrSpec::parse(&spec.to_string()).expect("a written spec parses");
            assert_eq!(back, spec, "spec display -> parse");
        }
        Err(e) => assert!(e.offset <= text.len(), "spec error offset past the text"),
    }
}

fn check_error(obj: &SoifObject, e: &HintError) {
    match e {
        HintError::WrongTemplate { .. } => {}
        HintError::UrlNotUtf8 { offset } => assert!(*offset < obj.url().len()),
        HintError::Value {
            attribute,
            index,
            offset,
            ..
        } => {
            let a = &obj.attributes[*index];
            assert_eq!(a.name.as_str(), attribute, "error names another attribute");
            assert!(*offset <= a.value.len(), "value offset past the value");
        }
        HintError::BadName {
            attribute,
            index,
            error,
        } => {
            let index = index.expect("a read error has the attribute's index");
            assert_eq!(obj.attributes[index].name.as_str(), attribute);
            assert!(error.offset <= attribute.len());
        }
        _ => {}
    }
}

fn sorted<T: Clone + Ord>(v: &[T]) -> Vec<T> {
    let mut v = v.to_vec();
    v.sort();
    v
}

fn check_hint(obj: &SoifObject) {
    let hint = match CipHint::from_soif(obj) {
        Ok((hint, _warnings)) => hint,
        Err(e) => {
            check_error(obj, &e);
            return;
        }
    };
    let written = hint
        .try_to_soif()
        .expect("every spec a hint read is writable");
    let bytes = written.to_bytes();
    let objects = parse_all(bytes, Limits::default()).expect("a written hint is SOIF");
    assert_eq!(objects, [written.clone()], "SOIF write -> parse");
    let (again, _) = CipHint::from_soif(&objects[0]).expect("a written hint reads");

    assert_eq!(again.attributes, hint.attributes);
    assert_eq!(again.sources, hint.sources);
    assert_eq!(again.total_object_count, hint.total_object_count);
    assert_eq!(again.weightlists, hint.weightlists);
    assert_eq!(sorted(&again.thresholds), sorted(&hint.thresholds));
    assert_eq!(again.certification_type, hint.certification_type);
    assert_eq!(again.certification, hint.certification);
    assert_eq!(again.date, hint.date);
    assert_eq!(again.extra, hint.extra);
    let url_is_plain = !hint.url.is_empty()
        && !hint
            .url
            .chars()
            .any(|c| c.is_ascii_whitespace() || c == '}' || c == '\u{0b}');
    if url_is_plain {
        assert_eq!(again.url, hint.url);
    }
    // One round is canonical.
    assert_eq!(again.to_soif(), written, "canonical form is stable");
}

fn check_charge(data: &[u8], objects: &[SoifObject]) {
    let hints: Option<Vec<CipHint>> = objects
        .iter()
        .map(|o| CipHint::from_soif(o).ok().map(|(h, _)| h))
        .collect();
    let Some(hints) = hints else { return };
    let piece = data.first().map_or(1, |&b| usize::from(b % 13) + 1);
    let mut scanner = hints::table::ChargeScanner::new();
    for chunk in data.chunks(piece) {
        scanner.feed(chunk);
    }
    let most = hints.iter().map(hints::table::budget_bytes).max().unwrap_or(0);
    assert!(
        scanner.largest() <= most,
        "scanned {} above the table's charge {most}",
        scanner.largest()
    );
}

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    check_weightlist(&input);
    if let Ok(text) = std::str::from_utf8(data) {
        check_spec(text);
    }
    if let Ok(objects) = parse_all(input, limits()) {
        for obj in &objects {
            check_hint(obj);
        }
        check_charge(data, &objects);
    }
});
