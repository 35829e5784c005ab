//! Inputs the fuzz targets (`cip-proto/fuzz`) found crashing, kept as regression tests.
//!
//! Each test feeds the input exactly as the target's parser saw it (the target's selector
//! byte removed) and checks the answer the parser should give instead of a panic.

use bytes::Bytes;
use cip_proto::cip::{IndexType, Limits, MessageError, PollResult, Request, ResponseCode};

/// `mime` target: a `type` parameter holding non-ASCII text longer than
/// `application/index.obj.` sliced a `str` inside a character
/// (`IndexType::from_param`, cip-proto/src/cip/message.rs).
#[test]
fn mime_poll_type_with_non_ascii_value() {
    // Minimised: the bytes after `type=` are invalid UTF-8, read as U+FFFD (3 bytes each),
    // so byte 22 falls inside a character.
    let input: &[u8] =
        b"Content-Type:application/index.cmdpoll;type=\xff\xff\xff\xff\xff\xff\xff\xff";
    let e = Request::from_mime(&Bytes::from_static(input), &Limits::default()).unwrap_err();
    assert!(
        matches!(e, MessageError::InvalidParameter { name: "type", .. }),
        "{e:?}"
    );
    assert_eq!(e.code(), ResponseCode::MissingAttributes);

    // As first found: a quoted value.
    let mut found = b"Content-Type: application/index.cmd.poll; type=\"tagged".to_vec();
    found.extend_from_slice(&[0xff; 86]);
    found.extend_from_slice(b"\"; dsi=\"1.3.6.1.4.1.99999.7\"\r\n\r\n");
    let e = Request::from_mime(&Bytes::from(found), &Limits::default()).unwrap_err();
    assert!(
        matches!(e, MessageError::InvalidParameter { name: "type", .. }),
        "{e:?}"
    );

    // Valid UTF-8 does it too, and so does the same value in a datachanged request.
    for value in [
        "tagged\u{20ac}\u{20ac}\u{20ac}\u{20ac}\u{20ac}",
        "xééééééééééééééééééééééé",
    ] {
        assert!(IndexType::from_param(value).is_err(), "{value}");
        let text = format!(
            "Content-Type: application/index.cmd.datachanged; type=\"{value}\"; dsi=1.2\r\n\r\n"
        );
        assert!(Request::from_mime(&Bytes::from(text), &Limits::default()).is_err());
    }
    // The full-media-type spelling still works, in any case.
    assert_eq!(
        IndexType::from_param("Application/Index.Obj.Tagged").unwrap(),
        IndexType::tagged()
    );
    let r = PollResult::from_mime(
        &Bytes::from_static(
            b"Content-Type: application/index.obj.tagged; dsi=1.2; base-uri=a:b\r\n\r\nx\r\n",
        ),
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(r.objects.len(), 1);
}
