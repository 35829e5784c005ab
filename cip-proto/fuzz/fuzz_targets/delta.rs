//! Fuzzes the hint delta reader (`CIP-HINT-DELTA`, PROTOCOL.md "Hint deltas") and applying
//! what it reads.
//!
//! The input is read as SOIF; each object is read as a delta. Checks: no panic; a delta
//! that reads writes back to SOIF that parses and reads back to an equal delta; applying
//! it to an empty hint and to a small one never panics and, when it succeeds, makes a hint
//! whose digest is the delta's result, and a routing table that applies it in place ends
//! with the entries of one fed the result whole.

#![no_main]

use bytes::Bytes;
use cip_proto::soif::{Limits, parse_all};
use hints::delta::{HintDelta, digest};
use hints::hint::{AttrSpec, CipHint};
use hints::table::{ImportError, ListChanges, PeerMeta, RoutingTable};
use libfuzzer_sys::fuzz_target;

fn limits() -> Limits {
    Limits {
        max_value_size: 4096,
        max_attributes: 64,
        max_object_size: 16384,
        max_token_len: 256,
    }
}

fn small() -> CipHint {
    let spec = AttrSpec::parse("DOCUMENT:Author").expect("a spec");
    CipHint::with_weightlist(spec, 3, [("Garcia", 2), ("Smith", 1)])
}

fn meta() -> PeerMeta {
    PeerMeta {
        dsi: cip_proto::Dsi::new("1.3.6.1.4.1.99999.7").expect("a dsi"),
        base_uris: vec!["cip://peer.example/".into()],
        dsi_description: None,
        received: std::time::SystemTime::UNIX_EPOCH,
        expires: None,
        via: None,
        path: Vec::new(),
    }
}

fn rows(t: &RoutingTable) -> Vec<(String, Vec<u8>, u64)> {
    let mut rows: Vec<_> = t
        .entries(None, None, None, usize::MAX)
        .into_iter()
        .map(|r| {
            (
                r.attribute.to_string().to_ascii_lowercase(),
                r.value.to_ascii_lowercase(),
                r.total,
            )
        })
        .collect();
    rows.sort();
    rows
}

/// A table holding `base` that applies the delta's changes in place (or, when it cannot,
/// takes `made` whole) ends as a table fed `made` whole: the same outcome and entries.
fn in_place_equals_whole(base: &CipHint, made: &CipHint, changes: &[ListChanges]) {
    let (whole, patched) = (RoutingTable::default(), RoutingTable::default());
    if patched.replace(meta(), base).is_err() {
        return;
    }
    let w = whole.replace(meta(), made);
    let p = match patched.apply_delta(meta(), made, changes) {
        Err(ImportError::NeedsWhole(_)) => patched.replace(meta(), made),
        other => other,
    };
    assert_eq!(w.is_ok(), p.is_ok(), "whole {w:?}, in place {p:?}");
    if w.is_ok() {
        assert_eq!(rows(&whole), rows(&patched), "entries in place and whole");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(objects) = parse_all(Bytes::copy_from_slice(data), limits()) else {
        return;
    };
    for obj in &objects {
        let Ok(delta) = HintDelta::from_soif(obj) else {
            continue;
        };
        let written = delta.to_soif();
        let back =
            parse_all(written.to_bytes(), Limits::default()).expect("a written delta is SOIF");
        assert_eq!(back.len(), 1);
        assert_eq!(
            HintDelta::from_soif(&back[0]).expect("a written delta reads"),
            delta
        );
        for base in [CipHint::default(), small()] {
            if let Ok((made, changes)) = delta.apply_changes(&base) {
                assert_eq!(digest(&made), delta.result, "applied, the result's digest");
                in_place_equals_whole(&base, &made, &changes);
            }
        }
    }
});
