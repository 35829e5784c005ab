//! Fuzzes the hint delta reader (`CIP-HINT-DELTA`, PROTOCOL.md "Hint deltas") and applying
//! what it reads.
//!
//! The input is read as SOIF; each object is read as a delta. Checks: no panic; a delta
//! that reads writes back to SOIF that parses and reads back to an equal delta; applying
//! it to an empty hint and to a small one never panics and, when it succeeds, makes a hint
//! whose digest is the delta's result.

#![no_main]

use bytes::Bytes;
use cip_proto::soif::{Limits, parse_all};
use hints::delta::{HintDelta, digest};
use hints::hint::{AttrSpec, CipHint};
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

fuzz_target!(|data: &[u8]| {
    let Ok(objects) = parse_all(Bytes::copy_from_slice(data), limits()) else {
        return;
    };
    for obj in &objects {
        let Ok(delta) = HintDelta::from_soif(obj) else {
            continue;
        };
        let written = delta.to_soif();
        let back = parse_all(written.to_bytes(), Limits::default()).expect("a written delta is SOIF");
        assert_eq!(back.len(), 1);
        assert_eq!(HintDelta::from_soif(&back[0]).expect("a written delta reads"), delta);
        for base in [CipHint::default(), small()] {
            if let Ok(made) = delta.apply(&base) {
                assert_eq!(digest(&made), delta.result, "applied, the result's digest");
            }
        }
    }
});
