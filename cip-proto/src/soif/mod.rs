//! Harvest's Summary Object Interchange Format (RFC 2655 §3).
//!
//! A SOIF stream is a run of summary objects:
//!
//! ```text
//! @TEMPLATE-TYPE { URL
//! Identifier{VALUE-SIZE}:<TAB>VALUE
//! ...
//! }
//! ```
//!
//! Values are taken by byte count, so they may hold any octet (CR, LF, NUL, `}`, `@`).
//! The pieces:
//!
//! * [`SoifObject`] / [`Attribute`]: owned objects whose fields are zero-copy [`Bytes`] slices
//!   of the input, validated on construction so that the writer cannot emit bad SOIF.
//! * [`SoifDecoder`]: an incremental parser (a `tokio_util` [`Decoder`]) over a growing buffer,
//!   for sockets and multi-gigabyte files read in chunks. It never rescans a value it has seen.
//! * [`SoifReader`]: the same grammar over a complete `&[u8]`, yielding borrowed
//!   [`ObjectRef`]s with no allocation per attribute, for bulk work such as hint building.
//! * [`check_stream`] and [`check_file`]: validation without building objects, every error
//!   listed, a big file split over threads.
//! * [`write_object`] and [`SoifEncoder`]: canonical output (one pair per line, LF ends).
//! * [`attr`]: attribute naming and matching (§3.3 multi-value suffixes, §4 matching).
//! * [`template`]: the templates RFC 2655 names (FILE, DOCUMENT, OBJECT, CIP-HINT, Dublin-Core).
//!
//! [`Decoder`]: tokio_util::codec::Decoder

pub mod attr;
mod check;
mod error;
mod parse;
pub mod template;
mod write;

use bytes::Bytes;

pub use check::{CheckReport, DEFAULT_WINDOW, PARALLEL_MIN_BYTES, check_file, check_stream};
pub use error::{SoifError, SoifErrorKind};
pub use parse::{AttrRef, Limits, ObjectRef, SoifDecoder, SoifReader, parse_all};
pub use write::{SoifEncoder, write_object, write_object_ref};

/// True for the bytes allowed in template types and attribute identifiers.
///
/// RFC 2655 §3.5 allows `[A-Za-z0-9_-]`; the CIP-HINT template (Appendix B) needs `[`, `]`,
/// `:` and `.` as well (`Weightlist-[IMAGE:Subject]`), so they are accepted too.
#[inline]
pub fn is_identifier_byte(b: u8) -> bool {
    IDENT[b as usize]
}

static IDENT: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric()
            || b == b'-'
            || b == b'_'
            || b == b'['
            || b == b']'
            || b == b':'
            || b == b'.';
        i += 1;
    }
    t
};

/// An attribute identifier or template type: non-empty, identifier bytes only (so ASCII).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identifier(Bytes);

impl Identifier {
    /// Validates `bytes` as an identifier.
    ///
    /// # Errors
    /// [`SoifErrorKind::InvalidIdentifier`] (offset relative to `bytes`) when empty or when a
    /// byte is outside the identifier alphabet.
    pub fn new(bytes: impl Into<Bytes>) -> Result<Self, SoifError> {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return Err(SoifError::new(
                0,
                SoifErrorKind::InvalidIdentifier { found: None },
            ));
        }
        if let Some(i) = bytes.iter().position(|&b| !is_identifier_byte(b)) {
            return Err(SoifError::new(
                i as u64,
                SoifErrorKind::InvalidIdentifier {
                    found: Some(bytes[i]),
                },
            ));
        }
        Ok(Self(bytes))
    }

    /// Wraps bytes the parser has already checked.
    pub(crate) fn from_checked(bytes: Bytes) -> Self {
        debug_assert!(!bytes.is_empty() && bytes.iter().all(|&b| is_identifier_byte(b)));
        Self(bytes)
    }

    /// The identifier as text; always ASCII.
    #[allow(
        clippy::expect_used,
        reason = "every identifier byte is ASCII (checked in `new` / by the parser)"
    )]
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("identifier bytes are ASCII")
    }

    /// The identifier's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The identifier without any multi-value suffix (`Author-2` → `Author`), RFC 2655 §3.3.
    pub fn base_name(&self) -> &str {
        attr::base_name(self.as_str())
    }
}

impl std::fmt::Debug for Identifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Identifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<&str> for Identifier {
    type Error = SoifError;
    fn try_from(s: &str) -> Result<Self, SoifError> {
        Self::new(Bytes::copy_from_slice(s.as_bytes()))
    }
}

/// One `IDENTIFIER{SIZE}:<TAB>VALUE` pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    /// The attribute identifier as written, multi-value suffix included.
    pub name: Identifier,
    /// The value's exact bytes.
    pub value: Bytes,
}

impl Attribute {
    /// Builds a pair; the name is validated.
    ///
    /// # Errors
    /// When `name` is not a valid identifier.
    pub fn new(name: &str, value: impl Into<Bytes>) -> Result<Self, SoifError> {
        Ok(Self {
            name: Identifier::try_from(name)?,
            value: value.into(),
        })
    }
}

/// A summary object: template type, URL and attribute-value pairs in input order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoifObject {
    template: Identifier,
    url: Bytes,
    /// The pairs in input order.
    pub attributes: Vec<Attribute>,
}

/// The URL placeholder for an object with no URL (RFC 2655 §3.5).
pub const NO_URL: &[u8] = b"-";

impl SoifObject {
    /// A new object with no attributes. Use `"-"` ([`NO_URL`]) when there is no URL.
    ///
    /// # Errors
    /// When the template is not an identifier, or the URL is empty or holds whitespace or `}`
    /// (which would end it early on the wire).
    pub fn new(template: &str, url: impl Into<Bytes>) -> Result<Self, SoifError> {
        let url = url.into();
        check_url(&url)?;
        Ok(Self {
            template: Identifier::try_from(template)?,
            url,
            attributes: Vec::new(),
        })
    }

    pub(crate) fn from_parts(template: Identifier, url: Bytes, attributes: Vec<Attribute>) -> Self {
        Self {
            template,
            url,
            attributes,
        }
    }

    /// The template type (`DOCUMENT`, `CIP-HINT`, ...).
    pub fn template(&self) -> &Identifier {
        &self.template
    }

    /// The URL bytes; `-` when the object has none.
    pub fn url(&self) -> &Bytes {
        &self.url
    }

    /// The URL as text when it is UTF-8.
    pub fn url_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.url).ok()
    }

    /// Appends a pair; the name is validated.
    ///
    /// # Errors
    /// When `name` is not a valid identifier.
    pub fn push(&mut self, name: &str, value: impl Into<Bytes>) -> Result<&mut Self, SoifError> {
        self.attributes.push(Attribute::new(name, value)?);
        Ok(self)
    }

    /// Every value of attribute `name`, multi-value identifiers (`Author-1`, `Author-2`)
    /// included, compared case-insensitively as RFC 2655 §4 asks.
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Bytes> + 'a {
        self.attributes
            .iter()
            .filter(move |a| attr::attribute_matches(name, a.name.as_str()))
            .map(|a| &a.value)
    }

    /// The first value of attribute `name` (see [`SoifObject::values`]).
    pub fn first<'a>(&'a self, name: &'a str) -> Option<&'a Bytes> {
        self.values(name).next()
    }

    /// The object as canonical SOIF bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        write_object(self, &mut out);
        out
    }

    /// Exact length of [`SoifObject::to_bytes`].
    pub fn encoded_len(&self) -> usize {
        write::encoded_len(self)
    }

    /// True when some value is not printable text, so that RFC 2655 §3 asks for Base64 when
    /// the object travels in a CIP message (see [`crate::base64`]).
    pub fn has_binary_values(&self) -> bool {
        self.attributes.iter().any(|a| !is_text(&a.value))
    }
}

/// True when `bytes` are UTF-8 text with no control characters other than TAB, CR and LF.
pub fn is_text(bytes: &[u8]) -> bool {
    // In valid UTF-8 the control characters are exactly the bytes 0x00-0x1F and 0x7F (C0,
    // DEL) and the two-byte sequences C2 80 - C2 9F (C1), so a byte scan after validation
    // finds them without decoding characters.
    std::str::from_utf8(bytes).is_ok()
        && !bytes.iter().enumerate().any(|(i, &b)| match b {
            b'\t' | b'\r' | b'\n' => false,
            0x00..=0x1f | 0x7f => true,
            0xc2 => bytes.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)),
            _ => false,
        })
}

fn check_url(url: &[u8]) -> Result<(), SoifError> {
    if url.is_empty() {
        return Err(SoifError::new(0, SoifErrorKind::MissingUrl { found: None }));
    }
    if let Some(i) = url
        .iter()
        .position(|&b| b.is_ascii_whitespace() || b == b'}')
    {
        return Err(SoifError::new(
            i as u64,
            SoifErrorKind::InvalidUrl { found: url[i] },
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        assert!(Identifier::try_from("Weightlist-[IMAGE:Subject]").is_ok());
        assert!(Identifier::try_from("Dublin-Core-1").is_ok());
        assert!(Identifier::try_from("").is_err());
        let e = Identifier::try_from("bad name").unwrap_err();
        assert_eq!(e.offset(), 3);
    }

    #[test]
    fn object_builder_validates() {
        assert!(SoifObject::new("FILE", "http://x/").is_ok());
        assert!(SoifObject::new("FILE", "").is_err());
        assert!(SoifObject::new("FILE", "a b").is_err());
        assert!(SoifObject::new("FI LE", "-").is_err());
        let mut o = SoifObject::new("DOCUMENT", "-").unwrap();
        o.push("Author-1", "A")
            .unwrap()
            .push("author-2", "B")
            .unwrap();
        o.push("Title", "T").unwrap();
        let v: Vec<_> = o.values("AUTHOR").collect();
        assert_eq!(v, [&Bytes::from("A"), &Bytes::from("B")]);
        assert_eq!(o.first("title").unwrap(), "T");
        assert!(o.push("x y", "").is_err());
    }

    #[test]
    fn text_detection() {
        assert!(is_text(b"plain\ttext\r\n"));
        assert!(is_text("caf\u{e9} \u{a0}\u{100}".as_bytes()));
        assert!(!is_text(b"nul\0"));
        assert!(!is_text(b"del\x7f"));
        assert!(!is_text("c1 \u{85}".as_bytes()));
        assert!(!is_text(&[0xff, 0xfe]));
    }

    proptest::proptest! {
        #[test]
        fn byte_scan_agrees_with_char_scan(s in "\\PC*|[\\x00-\\x{a0}]{0,40}") {
            let by_chars =
                !s.chars().any(|c| c.is_control() && c != '\t' && c != '\r' && c != '\n');
            proptest::prop_assert_eq!(is_text(s.as_bytes()), by_chars);
        }
    }
}
