//! SOIF codec tests: the RFC 2655 examples, every error path, chunked input, round trips.

use bytes::{Bytes, BytesMut};
use cip_proto::soif::{
    Limits, SoifDecoder, SoifErrorKind, SoifObject, SoifReader, parse_all, write_object,
};
use proptest::prelude::*;
use tokio_util::codec::Decoder;

const SECTION6: &[u8] = include_bytes!("data/rfc2655-section6.soif");
const APPENDIX_B: &[u8] = include_bytes!("data/rfc2655-appendix-b.soif");
const APPENDIX_C: &[u8] = include_bytes!("data/rfc2655-appendix-c.soif");
const APPENDIX_C_FIXED: &[u8] = include_bytes!("data/rfc2655-appendix-c-fixed.soif");

fn parse(input: &[u8]) -> Vec<SoifObject> {
    parse_all(Bytes::copy_from_slice(input), Limits::default()).expect("valid SOIF")
}

fn parse_err(input: &[u8], limits: Limits) -> cip_proto::SoifError {
    parse_all(Bytes::copy_from_slice(input), limits).expect_err("invalid SOIF")
}

fn pairs(obj: &SoifObject) -> Vec<(&str, &[u8])> {
    obj.attributes
        .iter()
        .map(|a| (a.name.as_str(), &a.value[..]))
        .collect()
}

#[test]
fn rfc_section_6_documents() {
    let objs = parse(SECTION6);
    assert_eq!(objs.len(), 3);
    assert_eq!(objs[0].template().as_str(), "DOCUMENT");
    assert_eq!(objs[0].url(), "http://home.netscape.com:80/");
    assert_eq!(
        pairs(&objs[0]),
        [
            ("Title", &b"Welcome to Netscape"[..]),
            ("Content-Type", b"text/html"),
            ("Content-Length", b"33262")
        ]
    );
    let authors: Vec<_> = objs[1].values("author").collect();
    assert_eq!(
        authors,
        ["Alan O. Freier", "Philip Karlton", "Paul C. Kocher"]
    );
    // The Abstract spans six lines; the RFC declares 318 bytes for the text it prints, which
    // is 312 bytes long, so the fixture declares the true length.
    let abs = objs[1].first("Abstract").unwrap();
    assert!(abs.starts_with(b"This document specifies"));
    assert!(abs.ends_with(b"message forgery."));
    assert_eq!(abs.iter().filter(|&&b| b == b'\n').count(), 5);
    let thumb = objs[2].first("Thumbnail").unwrap();
    assert_eq!(thumb.len(), 259);
    assert!(objs[2].has_binary_values());
    assert!(!objs[0].has_binary_values());
}

#[test]
fn rfc_appendix_b_cip_hint_identifiers() {
    let objs = parse(APPENDIX_B);
    assert_eq!(objs.len(), 1);
    let o = &objs[0];
    assert_eq!(o.template().as_str(), "CIP-HINT");
    assert_eq!(o.url(), "http://nic.nasa.gov:80/Harvest/brokers/NASA/");
    let names: Vec<_> = o.attributes.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "Attribute-Identifier-list",
            "Source-1",
            "Source-2",
            "Total-Object-Count",
            "Weightlist-[IMAGE:Subject]",
            "Threshold-[IMAGE:Subject]",
            "Weightlist-[DOCUMENT:Author]",
            "Threshold-[DOCMENT:Author]",
            "Certification-Type",
            "Certification",
            "Date"
        ]
    );
    assert_eq!(
        o.first("weightlist-[document:author]").unwrap(),
        &b"Grizzard;12, Aldrin\\, Buzz;15, Aldrin\\, James;45,"[..]
    );
    assert_eq!(o.values("Source").count(), 2);
    assert_eq!(o.first("Date").unwrap(), "Sun, 05 Jan 1997 08:33:33 GMT");
}

#[test]
fn rfc_appendix_c_malformed_pair_is_reported() {
    let e = parse_err(APPENDIX_C, Limits::default());
    let at = APPENDIX_C
        .windows(15)
        .position(|w| w == b"IDENTIFIER:{21}")
        .unwrap();
    assert_eq!(e.offset(), (at + 15) as u64, "points just after the size");
    match e.kind() {
        SoifErrorKind::MissingDelimiter { name, size, found } => {
            assert_eq!(name, "IDENTIFIER:");
            assert_eq!(*size, 21);
            assert_eq!(*found, Some(b'\t'));
        }
        k => panic!("unexpected {k:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("expected ':<TAB>'"), "{msg}");
    assert!(msg.contains("delimiter belongs after the size"), "{msg}");
}

#[test]
fn rfc_appendix_c_fixed_parses() {
    let objs = parse(APPENDIX_C_FIXED);
    let o = &objs[0];
    assert_eq!(o.template().as_str(), "Dublin-Core-1");
    assert_eq!(o.values("CONTRIBUTOR").count(), 10);
    assert_eq!(o.values("creator").count(), 3);
    assert_eq!(
        o.first("RIGHTS").unwrap(),
        "Unlimited Distribution;\nreaders must not cite as standard."
    );
    assert_eq!(o.attributes.len(), 26);
}

#[test]
fn value_holding_soif_syntax() {
    let v = b"}\n@DOCUMENT { http://evil/\nTitle{3}:\tabc\n}";
    let mut input = format!("@DOCUMENT {{ -\nBody{{{}}}:\t", v.len()).into_bytes();
    input.extend_from_slice(v);
    input.extend_from_slice(b"\nTitle{1}:\tx\n}\n");
    let objs = parse(&input);
    assert_eq!(objs.len(), 1);
    assert_eq!(objs[0].first("Body").unwrap(), &v[..]);
    assert_eq!(objs[0].first("Title").unwrap(), "x");
}

#[test]
fn crlf_and_odd_whitespace() {
    let input = b"\r\n\r\n@FILE{\thttp://a/\r\nA{1}:\t1\r\n\r\n\t B{2}:\t22\r\n}\r\n\r\n";
    let objs = parse(input);
    assert_eq!(pairs(&objs[0]), [("A", &b"1"[..]), ("B", b"22")]);
    assert_eq!(objs[0].url(), "http://a/");
}

#[test]
fn empty_values_zero_attributes_back_to_back() {
    let input = b"@FILE { -\nEmpty{0}:\t\n}@FILE { x }@OBJECT{ y}";
    let objs = parse(input);
    assert_eq!(objs.len(), 3);
    assert_eq!(objs[0].first("Empty").unwrap(), "");
    assert_eq!(objs[0].url(), "-");
    assert!(objs[1].attributes.is_empty());
    assert_eq!(objs[2].url(), "y");
    // Values run straight into the next identifier: whitespace between pairs is optional.
    let objs = parse(b"@FILE { - A{1}:\taB{1}:\tb}");
    assert_eq!(pairs(&objs[0]), [("A", &b"a"[..]), ("B", b"b")]);
}

#[test]
fn binary_and_large_values() {
    let bin: Vec<u8> = (0..=255u8).collect();
    let big: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let mut o = SoifObject::new("FILE", "-").unwrap();
    o.push("Bin", bin.clone())
        .unwrap()
        .push("Big", big.clone())
        .unwrap();
    let objs = parse(&o.to_bytes());
    assert_eq!(objs[0].first("Bin").unwrap(), &bin[..]);
    assert_eq!(objs[0].first("Big").unwrap().len(), 1 << 20);
    assert_eq!(objs[0], o);
}

#[test]
fn writer_is_canonical() {
    let mut o = SoifObject::new("DOCUMENT", "http://x/").unwrap();
    o.push("Title", "Hi").unwrap().push("Empty", "").unwrap();
    assert_eq!(
        o.to_bytes(),
        b"@DOCUMENT { http://x/\nTitle{2}:\tHi\nEmpty{0}:\t\n}\n\n"
    );
    assert_eq!(o.encoded_len(), o.to_bytes().len());
    // Reformatting is idempotent.
    let once: Vec<u8> = parse(SECTION6).iter().flat_map(|o| o.to_bytes()).collect();
    let twice: Vec<u8> = parse(&once).iter().flat_map(|o| o.to_bytes()).collect();
    assert_eq!(once, twice);
}

fn kind_of(input: &[u8]) -> (u64, String) {
    let e = parse_err(input, Limits::default());
    (e.offset(), format!("{:?}", e.kind()))
}

#[test]
fn error_paths_carry_offsets() {
    let cases: &[(&[u8], u64, &str)] = &[
        (b"garbage", 0, "GarbageBeforeObject"),
        (b"@FILE { -\n}\n x", 13, "GarbageBeforeObject"),
        (b"@ FILE { - }", 1, "MissingTemplate"),
        (b"@{ - }", 1, "MissingTemplate"),
        (b"@FILE x - }", 6, "ExpectedOpenBrace"),
        (b"@FILE { }", 8, "MissingUrl"),
        (b"@FILE { - {", 10, "ExpectedAttribute"),
        (b"@FILE { - Title:\tx }", 16, "ExpectedSize"),
        (b"@FILE { - Title {1}:\tx }", 15, "ExpectedSize"),
        (b"@FILE { - T{1x}:\tx }", 13, "NonNumericSize"),
        (b"@FILE { - T{ 1}:\tx }", 12, "NonNumericSize"),
        (b"@FILE { - T{}:\tx }", 12, "EmptySize"),
        (
            b"@FILE { - T{99999999999999999999999}:\tx }",
            12,
            "SizeOverflow",
        ),
        (b"@FILE { - T{1}:x }", 15, "MissingDelimiter"),
        (b"@FILE { - T{1} x }", 14, "MissingDelimiter"),
        (b"@FILE { - T{10}:\tx }", 11, "SizePastEnd"),
        (b"@FILE { - T{1}:\tx", 17, "UnexpectedEof"),
        (b"@FILE { - T{1}", 14, "UnexpectedEof"),
        (b"@FILE", 5, "UnexpectedEof"),
        (b"@FILE { http://x/", 17, "UnexpectedEof"),
    ];
    for (input, offset, kind) in cases {
        let (got_offset, got_kind) = kind_of(input);
        assert!(
            got_kind.starts_with(kind),
            "{:?}: expected {kind}, got {got_kind}",
            String::from_utf8_lossy(input)
        );
        assert_eq!(
            got_offset,
            *offset,
            "{:?}: {got_kind}",
            String::from_utf8_lossy(input)
        );
    }
}

#[test]
fn error_messages_say_what_was_expected() {
    let e = parse_err(b"@FILE { - T{10}:\tx }", Limits::default());
    assert_eq!(
        e.to_string(),
        "byte 11: value of attribute \"T\" is declared as 10 bytes but only 3 remain"
    );
    let e = parse_err(b"xyz", Limits::default());
    assert_eq!(
        e.to_string(),
        "byte 0: expected '@' to start an object, found 'x'"
    );
    let e = parse_err(b"@FILE { - T{1}", Limits::default());
    assert!(
        e.to_string()
            .contains("starts at byte 0: expected ':<TAB>'"),
        "{e}"
    );
}

#[test]
fn limits_have_their_own_errors() {
    let small = Limits {
        max_value_size: 4,
        max_attributes: 2,
        max_object_size: 64,
        max_token_len: 8,
    };
    let cases: &[(&[u8], &str)] = &[
        (b"@FILE { - T{5}:\t12345 }", "ValueTooLarge"),
        (b"@FILE { - A{0}:\tB{0}:\tC{0}:\t}", "TooManyAttributes"),
        (b"@TEMPLATENAME { - }", "TokenTooLong"),
        (b"@FILE { http://long/ }", "TokenTooLong"),
        (b"@FILE { - LONGNAMEXX{1}:\t1 }", "TokenTooLong"),
    ];
    for (input, kind) in cases {
        let got = format!("{:?}", parse_err(input, small).kind());
        assert!(
            got.starts_with(kind),
            "{:?}: expected {kind}, got {got}",
            String::from_utf8_lossy(input)
        );
    }
    let tiny_object = Limits {
        max_object_size: 20,
        ..Limits::default()
    };
    let e = parse_err(b"@FILE { - A{4}:\t1234B{4}:\t1234 }", tiny_object);
    assert!(
        matches!(e.kind(), SoifErrorKind::ObjectTooLarge { max: 20 }),
        "{e}"
    );
    // A huge declared size is refused before any byte of it is awaited.
    let mut dec = SoifDecoder::new(Limits::default());
    let mut buf = BytesMut::from(&b"@FILE { - T{999999999999}:\t"[..]);
    let e = dec.decode(&mut buf).unwrap_err();
    assert!(matches!(e.kind(), SoifErrorKind::ValueTooLarge { .. }));
}

#[test]
fn stream_errors_use_absolute_offsets() {
    // The second object is bad; its offset counts the first object's bytes.
    let input = b"@FILE { a }\n@FILE { b T{x}:\t }";
    let mut dec = SoifDecoder::default();
    let mut buf = BytesMut::from(&input[..]);
    assert!(dec.decode(&mut buf).unwrap().is_some());
    let e = dec.decode_eof(&mut buf).unwrap_err();
    assert_eq!(e.offset(), 24);
}

/// Feeds `input` to a decoder in pieces cut at `cuts`, collecting objects.
fn decode_in_pieces(input: &[u8], cuts: &[usize]) -> Result<Vec<SoifObject>, cip_proto::SoifError> {
    let mut dec = SoifDecoder::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut last = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        buf.extend_from_slice(&input[last..cut]);
        last = cut;
        while let Some(o) = dec.decode(&mut buf)? {
            out.push(o);
        }
    }
    while let Some(o) = dec.decode_eof(&mut buf)? {
        out.push(o);
    }
    Ok(out)
}

#[test]
fn split_at_every_offset() {
    for input in [SECTION6, APPENDIX_B, APPENDIX_C_FIXED] {
        let whole = parse(input);
        for cut in 0..=input.len() {
            assert_eq!(
                decode_in_pieces(input, &[cut]).unwrap(),
                whole,
                "cut at {cut}"
            );
        }
        let every: Vec<usize> = (1..input.len()).collect();
        assert_eq!(
            decode_in_pieces(input, &every).unwrap(),
            whole,
            "byte by byte"
        );
    }
    // Errors are the same however the input is cut.
    let e = parse_err(APPENDIX_C, Limits::default()).offset();
    for cut in (0..APPENDIX_C.len()).step_by(7) {
        assert_eq!(
            decode_in_pieces(APPENDIX_C, &[cut]).unwrap_err().offset(),
            e
        );
    }
}

#[test]
fn parse_all_slices_the_input_instead_of_copying_it() {
    let input = Bytes::from([SECTION6, APPENDIX_B].concat());
    let range = input.as_ptr() as usize..input.as_ptr() as usize + input.len();
    let objs = parse_all(input.clone(), Limits::default()).unwrap();
    assert_eq!(objs, parse(&input));
    for o in &objs {
        for a in &o.attributes {
            let at = a.value.as_ptr() as usize;
            assert!(
                a.value.is_empty() || range.contains(&at),
                "{:?} was copied",
                a.name
            );
        }
    }
}

#[test]
fn reader_and_decoder_agree() {
    let input: Vec<u8> = [SECTION6, APPENDIX_B, APPENDIX_C_FIXED].concat();
    let owned = parse(&input);
    let borrowed: Vec<SoifObject> = SoifReader::new(&input)
        .map(|r| r.unwrap().to_owned_object())
        .collect();
    assert_eq!(owned, borrowed);
    let mut r = SoifReader::new(APPENDIX_C);
    assert!(r.next_object().is_err());
    assert!(r.next_object().unwrap().is_none(), "nothing after an error");
}

fn arb_identifier() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_\\-\\[\\]:.]{1,24}"
}

fn arb_url() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"-".to_vec()),
        proptest::collection::vec(
            any::<u8>().prop_filter("url byte", |b| {
                !b.is_ascii_whitespace() && *b != b'}' && *b != 0x0b && *b != 0x0c
            }),
            1..64
        ),
    ]
}

fn arb_object() -> impl Strategy<Value = SoifObject> {
    (
        arb_identifier(),
        arb_url(),
        proptest::collection::vec(
            (
                arb_identifier(),
                proptest::collection::vec(any::<u8>(), 0..200),
            ),
            0..12,
        ),
    )
        .prop_map(|(t, url, attrs)| {
            let mut o = SoifObject::new(&t, url).unwrap();
            for (n, v) in attrs {
                o.push(&n, v).unwrap();
            }
            o
        })
}

proptest! {
    #[test]
    fn write_then_parse_is_identity(objs in proptest::collection::vec(arb_object(), 1..6)) {
        let mut buf = Vec::new();
        for o in &objs {
            write_object(o, &mut buf);
        }
        prop_assert_eq!(&parse(&buf), &objs);
    }

    #[test]
    fn chunking_does_not_matter(
        objs in proptest::collection::vec(arb_object(), 1..4),
        mut cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut buf = Vec::new();
        for o in &objs {
            write_object(o, &mut buf);
        }
        let mut cuts: Vec<usize> = cuts.drain(..).map(|i| i.index(buf.len() + 1)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(decode_in_pieces(&buf, &cuts).unwrap(), objs);
    }

    #[test]
    fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..512)) {
        // `parse_all` (zero-copy over the input) and the streaming decoder agree, errors
        // and their offsets included.
        let whole = parse_all(Bytes::from(input.clone()), Limits::default())
            .map_err(|e| (e.offset(), e.to_string()));
        let streamed = decode_in_pieces(&input, &[]).map_err(|e| (e.offset(), e.to_string()));
        prop_assert_eq!(whole, streamed);
        let _ = SoifReader::new(&input).count();
    }
}
