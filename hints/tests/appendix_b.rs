//! RFC 2655 Appendix B: the example CIP-HINT, with real TABs after each `}:`, read field by
//! field, then written canonically and read back.

use bytes::Bytes;
use cip_proto::soif::{Limits, parse_all};
use hints::hint::{AttrSpec, CipHint, HintWarning, parse_date};

const APPENDIX_B: &[u8] = include_bytes!("data/appendix-b.soif");

fn spec(s: &str) -> AttrSpec {
    AttrSpec::parse(s).unwrap()
}

fn entries(hint: &CipHint, s: &str) -> Vec<(Bytes, u64)> {
    hint.weightlist(&spec(s))
        .unwrap()
        .entries()
        .map(|e| (e.value.clone(), e.count))
        .collect()
}

fn read() -> (CipHint, Vec<HintWarning>) {
    let objects = parse_all(Bytes::from_static(APPENDIX_B), Limits::default()).unwrap();
    assert_eq!(objects.len(), 1);
    CipHint::from_soif(&objects[0]).unwrap()
}

#[test]
fn appendix_b_field_by_field() {
    let (hint, warnings) = read();
    assert_eq!(hint.url, "http://nic.nasa.gov:80/Harvest/brokers/NASA/");
    // `Attribute-Identifier-list` in other case; whitespace after the commas.
    assert_eq!(
        hint.attributes,
        [
            spec("DOCUMENT:Author"),
            spec("DOCUMENT:Keywords"),
            spec("IMAGE:Subject")
        ]
    );
    assert_eq!(hint.attributes[1].template, "DOCUMENT");
    assert_eq!(hint.attributes[1].attribute, "Keywords");
    assert_eq!(
        hint.sources,
        [
            "http://nic.nasa.gov/Harvest/gatherers/Eureka/",
            "http://techreports.larc.nasa.gov/cgi-bin/NTRS/",
        ]
    );
    assert_eq!(hint.total_object_count, 10_000);

    // Weightlists in input order.
    assert_eq!(hint.weightlists.len(), 2);
    assert_eq!(hint.weightlists[0].0, spec("IMAGE:Subject"));
    assert_eq!(hint.weightlists[1].0, spec("DOCUMENT:Author"));
    assert_eq!(
        entries(&hint, "IMAGE:Subject"),
        [
            (Bytes::from("Shuttle"), 100),
            (Bytes::from("Planet"), 227),
            (Bytes::from("Moon"), 15),
            (Bytes::from("Sun"), 33),
        ]
    );
    // Escaped commas, and the trailing comma.
    assert_eq!(
        entries(&hint, "DOCUMENT:Author"),
        [
            (Bytes::from("Grizzard"), 12),
            (Bytes::from("Aldrin, Buzz"), 15),
            (Bytes::from("Aldrin, James"), 45),
        ]
    );

    // Both thresholds are kept, the misspelt one too.
    assert_eq!(
        hint.thresholds,
        [(spec("IMAGE:Subject"), 10), (spec("DOCMENT:Author"), 5)]
    );
    assert_eq!(hint.threshold(&spec("image:subject")), Some(10));
    assert_eq!(hint.threshold(&spec("DOCUMENT:Author")), None);
    assert_eq!(hint.threshold(&spec("DOCMENT:Author")), Some(5));

    assert_eq!(hint.certification_type.as_deref(), Some("PGP-Signature"));
    assert_eq!(
        hint.certification.as_deref(),
        Some(&b"mQCNAzFNm5QAAEEALUBOolOWKpby+=YtmtBxUZWQgSGFyZGllID"[..])
    );
    assert_eq!(hint.date.as_deref(), Some("Sun, 05 Jan 1997 08:33:33 GMT"));
    let secs = hint
        .date_time()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(secs, 852_453_213);
    assert!(hint.extra.is_empty());

    // The one oddity: a threshold naming no listed attribute.
    assert_eq!(
        warnings,
        [HintWarning::ThresholdForUnlistedAttribute {
            spec: spec("DOCMENT:Author")
        }]
    );
}

#[test]
fn appendix_b_value_sizes_match_the_values() {
    // Every `{size}` in the fixture is the RFC's, and each equals its value's length (the
    // parser would fail or misalign otherwise); spot-check the wrapped values.
    let objects = parse_all(Bytes::from_static(APPENDIX_B), Limits::default()).unwrap();
    let list = objects[0].first("attribute-identifier-list").unwrap();
    assert_eq!(list.len(), 49);
    assert!(list.starts_with(b"DOCUMENT:Author"));
    let weights = objects[0].first("Weightlist-[DOCUMENT:Author]").unwrap();
    assert_eq!(weights.len(), 49);
    assert!(weights.ends_with(b"45,"));
}

#[test]
fn appendix_b_canonical_rewrite() {
    let (hint, _) = read();
    let written = hint.to_soif().to_bytes();
    let text = String::from_utf8(written.clone()).unwrap();
    let expected = "@CIP-HINT { http://nic.nasa.gov:80/Harvest/brokers/NASA/\n\
        Attribute-Identifier-List{49}:\tDOCUMENT:Author, DOCUMENT:Keywords, IMAGE:Subject\n\
        Source-1{45}:\thttp://nic.nasa.gov/Harvest/gatherers/Eureka/\n\
        Source-2{46}:\thttp://techreports.larc.nasa.gov/cgi-bin/NTRS/\n\
        Total-Object-Count{5}:\t10000\n\
        Weightlist-[IMAGE:Subject]{40}:\tShuttle;100, Planet;227, Moon;15, Sun;33\n\
        Threshold-[IMAGE:Subject]{2}:\t10\n\
        Weightlist-[DOCUMENT:Author]{48}:\tGrizzard;12, Aldrin\\, Buzz;15, Aldrin\\, James;45\n\
        Threshold-[DOCMENT:Author]{1}:\t5\n\
        Certification-Type{13}:\tPGP-Signature\n\
        Certification{51}:\tmQCNAzFNm5QAAEEALUBOolOWKpby+=YtmtBxUZWQgSGFyZGllID\n\
        Date{29}:\tSun, 05 Jan 1997 08:33:33 GMT\n\
        }\n\n";
    assert_eq!(text, expected);
    let again = parse_all(Bytes::from(written), Limits::default()).unwrap();
    let (back, _) = CipHint::from_soif(&again[0]).unwrap();
    assert_eq!(back, hint);
    assert!(parse_date(back.date.as_deref().unwrap()).is_ok());
}
