//! Fuzzes the MIME layer of CIP messages: entities, `Content-Type`, transfer encodings,
//! `multipart/mixed`, and the requests, poll results and index responses built on them.
//!
//! The first byte picks the multipart boundary tried on the raw body (`b`, the default
//! `cipv3-part`, or whatever the entity's own `Content-Type` names); the rest is one message
//! as the stream codec delivers it (already unstuffed). Checks: no panic; header errors point
//! inside the input; a body is a suffix of the input and every multipart part a slice of the
//! body; a `Content-Type` that parses and writes reads back equal; a request, poll result or
//! index response that parses and writes reads back equal.

#![no_main]

use bytes::{Bytes, BytesMut};
use cip_proto::cip::mime::{ContentType, DEFAULT_BOUNDARY, Entity, split_multipart};
use cip_proto::cip::{IndexResponse, Limits, MimeError, PollResult, Request};
use libfuzzer_sys::fuzz_target;

fn limits() -> Limits {
    Limits {
        max_line: 256,
        max_message: 1 << 16,
        max_header: 2048,
        max_parts: 16,
    }
}

/// For reading back what the writers produced: folding, quoting and base64 make it longer.
fn roomy() -> Limits {
    Limits {
        max_header: 1 << 20,
        ..limits()
    }
}

/// True when `part` points into `whole` (multipart parts and bodies are zero-copy slices).
fn is_within(part: &[u8], whole: &[u8]) -> bool {
    let (p, w) = (part.as_ptr() as usize, whole.as_ptr() as usize);
    part.is_empty() || (p >= w && p + part.len() <= w + whole.len())
}

fn check_parts(body: &Bytes, boundary: &str) {
    match split_multipart(body, boundary, &limits()) {
        Ok(parts) => {
            assert!(parts.len() <= limits().max_parts);
            for p in &parts {
                assert!(is_within(p, body), "a part is not a slice of the body");
            }
        }
        Err(MimeError::NoDelimiter { .. } | MimeError::TooManyParts { .. }) => {}
        Err(e) => panic!("unexpected multipart error {e:?}"),
    }
}

fn check_content_type(ct: &ContentType) {
    let mut out = BytesMut::new();
    if ct.write_header(&mut out).is_err() {
        return;
    }
    out.extend_from_slice(b"\r\n");
    let e = Entity::parse(&out.freeze(), &roomy()).expect("a written content-type parses");
    let back = e
        .headers
        .content_type()
        .expect("a written content-type is valid")
        .expect("a written content-type is there");
    assert_eq!(&back, ct, "content-type write -> parse");
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, input)) = data.split_first() else {
        return;
    };
    let input = Bytes::copy_from_slice(input);

    match Entity::parse(&input, &limits()) {
        Ok(entity) => {
            assert!(
                input.ends_with(&entity.body),
                "the body is the input's tail"
            );
            let _ = entity.decoded_body();
            let ct = entity.headers.content_type();
            if let Ok(Some(ct)) = &ct {
                check_content_type(ct);
            }
            let own = ct
                .ok()
                .flatten()
                .and_then(|c| c.param("boundary").map(str::to_owned));
            let boundary = match selector % 3 {
                0 => "b",
                1 => DEFAULT_BOUNDARY,
                _ => own.as_deref().unwrap_or("b"),
            };
            if !boundary.is_empty() {
                check_parts(&entity.body, boundary);
            }
            if let Ok(r) = IndexResponse::from_entity(&entity)
                && let Ok(mime) = r.to_mime()
            {
                let e = Entity::parse(&mime, &roomy()).expect("a written response parses");
                let back = IndexResponse::from_entity(&e).expect("a written response reads");
                assert_eq!(back, r, "index response write -> parse");
            }
        }
        Err(MimeError::MalformedHeader { offset, .. }) => {
            assert!(offset < input.len(), "error offset {offset} past the input");
        }
        Err(MimeError::HeaderTooLarge { .. }) => {}
        Err(e) => panic!("unexpected entity error {e:?}"),
    }

    if let Ok(r) = Request::from_mime(&input, &limits())
        && let Ok(mime) = r.to_mime()
    {
        let back = Request::from_mime(&mime, &roomy()).expect("a written request parses");
        assert_eq!(back, r, "request write -> parse");
    }

    if let Ok(result) = PollResult::from_mime(&input, &limits())
        && let Ok(mime) = result.to_mime()
    {
        let back = PollResult::from_mime(&mime, &roomy()).expect("a written result parses");
        assert_eq!(back, result, "poll result write -> parse");
    }

    // The header value parser on its own, with whatever the input holds (CR, LF, NUL...).
    if let Ok(text) = std::str::from_utf8(&input)
        && let Ok(ct) = ContentType::parse(text)
    {
        let _ = ct.param("boundary");
    }
});
