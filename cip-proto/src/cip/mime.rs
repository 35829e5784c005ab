//! The MIME layer CIP messages are built from (RFC 2045, RFC 2046, RFC 822 headers).
//!
//! Only what CIP needs: header sections with case-insensitive names and folded continuation
//! lines, `Content-Type` with parameters, `Content-Transfer-Encoding` (7bit, 8bit, binary,
//! base64) and `multipart/mixed`. Parsing is tolerant (bare LF line ends, whitespace around
//! `=`, quoted or bare parameter values, unknown parameters and headers ignored); writing is
//! strict (CRLF, quoted parameter values, folded long `Content-Type` lines).
//!
//! Bodies are [`Bytes`] slices of the input, so parsing a large message does not copy it.

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};
use memchr::memmem;

use super::Limits;
use crate::base64::{Base64Error, decode_mime, encode_mime};

/// Longest line this writer produces when folding `Content-Type` (RFC 5322 §2.1.1 SHOULD).
const FOLD_AT: usize = 78;

/// A MIME entity that could not be parsed or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MimeError {
    /// The header section is longer than [`Limits::max_header`].
    #[error("header section exceeds {max} bytes")]
    HeaderTooLarge {
        /// The configured limit.
        max: usize,
    },
    /// A header line that is neither `name: value` nor a continuation.
    #[error("malformed header line at byte {offset}: {reason}")]
    MalformedHeader {
        /// Offset of the line in the entity.
        offset: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A `Content-Type` value that does not follow RFC 2045 §5.1.
    #[error("malformed content-type {value:?}: {reason}")]
    BadContentType {
        /// The header value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A `Content-Transfer-Encoding` this implementation does not decode.
    #[error("unsupported content-transfer-encoding {0:?}")]
    UnsupportedTransferEncoding(String),
    /// A base64 body that does not decode.
    #[error("bad base64 body: {0}")]
    Base64(#[from] Base64Error),
    /// `multipart/*` without a `boundary` parameter.
    #[error("multipart content-type without a boundary parameter")]
    MissingBoundary,
    /// A multipart body in which the boundary never appears.
    #[error("multipart body has no delimiter line for boundary {boundary:?}")]
    NoDelimiter {
        /// The boundary looked for.
        boundary: String,
    },
    /// More parts than [`Limits::max_parts`].
    #[error("multipart body has more than {max} parts")]
    TooManyParts {
        /// The configured limit.
        max: usize,
    },
    /// A header or parameter value that cannot be written (it holds CR, LF or another
    /// control character).
    #[error("cannot write {what}: value {value:?} holds a control character")]
    Unwritable {
        /// Which header or parameter.
        what: String,
        /// The offending value.
        value: String,
    },
}

/// A header section: fields in order, names as received, values unfolded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    fields: Vec<(String, String)>,
}

impl Headers {
    /// The value of the first field named `name` (compared case-insensitively).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// All fields, in the order received.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.fields.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Appends a field.
    pub fn push(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.fields.push((name.into(), value.into()));
    }

    /// True when a `Content-Type` field names an index object (`application/index.obj.*`).
    fn declares_index_object(&self) -> bool {
        self.get("content-type").is_some_and(|v| {
            v.trim_start()
                .get(..22)
                .is_some_and(|t| t.eq_ignore_ascii_case("application/index.obj."))
        })
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// True when there are no fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The parsed `Content-Type`, if the header is present.
    ///
    /// # Errors
    /// [`MimeError::BadContentType`] when the value does not parse.
    pub fn content_type(&self) -> Result<Option<ContentType>, MimeError> {
        self.get("content-type").map(ContentType::parse).transpose()
    }

    /// The `Content-Transfer-Encoding`, 7bit when absent (RFC 2045 §6.1).
    ///
    /// # Errors
    /// [`MimeError::UnsupportedTransferEncoding`] for anything but 7bit, 8bit, binary, base64.
    pub fn transfer_encoding(&self) -> Result<TransferEncoding, MimeError> {
        self.get("content-transfer-encoding")
            .map_or(Ok(TransferEncoding::SevenBit), TransferEncoding::parse)
    }
}

/// A parsed MIME entity: its headers and its still-encoded body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entity {
    /// The header section.
    pub headers: Headers,
    /// The body as it appeared after the blank line (transfer encoding not undone).
    pub body: Bytes,
}

impl Entity {
    /// Parses a header section and takes the rest as the body.
    ///
    /// The header section ends at the first empty line (CRLF or bare LF), at a line
    /// starting with `--` (a multipart boundary that legacy servers put right after the
    /// header fields, with no blank line; no field name starts with `-`), or, in an index
    /// object (`application/index.obj.*`), at a `version:` line: ROADS writes a tagged
    /// object's first line straight after its part headers. An input that ends
    /// without one is all headers with an empty body, which tolerates peers that put the
    /// separator's line end into the transport terminator. Continuation lines (starting with
    /// space or tab) are appended to the previous field as RFC 822 §3.1.1 unfolding.
    ///
    /// # Errors
    /// [`MimeError::HeaderTooLarge`] past `limits.max_header` bytes,
    /// [`MimeError::MalformedHeader`] for a line with no colon, an empty name, or a
    /// continuation before any field.
    pub fn parse(input: &Bytes, limits: &Limits) -> Result<Self, MimeError> {
        let mut headers = Headers::default();
        let mut pos = 0;
        loop {
            if pos >= input.len() {
                return Ok(Self {
                    headers,
                    body: Bytes::new(),
                });
            }
            let (line, next) = match memchr::memchr(b'\n', &input[pos..]) {
                Some(i) => (&input[pos..pos + i], pos + i + 1),
                None => (&input[pos..], input.len()),
            };
            if next > limits.max_header {
                return Err(MimeError::HeaderTooLarge {
                    max: limits.max_header,
                });
            }
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                return Ok(Self {
                    headers,
                    body: input.slice(next..),
                });
            }
            // A boundary line straight after the header fields (legacy servers omit the
            // blank line): the body starts here.
            if line.starts_with(b"--") {
                return Ok(Self {
                    headers,
                    body: input.slice(pos..),
                });
            }
            let text = String::from_utf8_lossy(line);
            if matches!(line[0], b' ' | b'\t') {
                let Some(last) = headers.fields.last_mut() else {
                    return Err(MimeError::MalformedHeader {
                        offset: pos,
                        reason: "continuation line before any header field",
                    });
                };
                last.1.push_str(&text);
            } else {
                let Some((name, value)) = text.split_once(':') else {
                    return Err(MimeError::MalformedHeader {
                        offset: pos,
                        reason: "no colon",
                    });
                };
                let name = name.trim_end();
                if name.is_empty() || name.bytes().any(|b| b <= b' ' || b == 0x7f) {
                    return Err(MimeError::MalformedHeader {
                        offset: pos,
                        reason: "empty or invalid field name",
                    });
                }
                if name.eq_ignore_ascii_case("version") && headers.declares_index_object() {
                    return Ok(Self {
                        headers,
                        body: input.slice(pos..),
                    });
                }
                headers.push(name, value.trim_start());
            }
            pos = next;
        }
    }

    /// The body with its `Content-Transfer-Encoding` undone.
    ///
    /// # Errors
    /// An unsupported encoding or a base64 body that does not decode.
    pub fn decoded_body(&self) -> Result<Bytes, MimeError> {
        match self.headers.transfer_encoding()? {
            TransferEncoding::Base64 => Ok(Bytes::from(decode_mime(&self.body)?)),
            _ => Ok(self.body.clone()),
        }
    }
}

/// A `Content-Type` value: lower-cased `type/subtype` and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentType {
    mime_type: String,
    params: Vec<(String, String)>,
}

impl ContentType {
    /// A content type with no parameters; `mime_type` is lower-cased.
    pub fn new(mime_type: &str) -> Self {
        Self {
            mime_type: mime_type.to_ascii_lowercase(),
            params: Vec::new(),
        }
    }

    /// Adds a parameter (builder style). Names are lower-cased.
    pub fn with_param(mut self, name: &str, value: impl Into<String>) -> Self {
        self.params.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// Parses a header value: `type/subtype *(";" name "=" value)`.
    ///
    /// Values may be tokens or quoted strings with backslash escapes; whitespace (including
    /// what folding left) may surround `;` and `=`. Empty parameters (`;;`, a trailing `;`)
    /// are skipped. A bare value runs to the next `;` or whitespace, which tolerates unquoted
    /// URIs.
    ///
    /// # Errors
    /// [`MimeError::BadContentType`] when the type has no `/`, a parameter has no `=`, or a
    /// quoted string is unterminated.
    pub fn parse(value: &str) -> Result<Self, MimeError> {
        let bad = |reason| MimeError::BadContentType {
            value: value.to_owned(),
            reason,
        };
        let mut rest = value.trim_start();
        let end = rest
            .find([';', ' ', '\t', '\r', '\n'])
            .unwrap_or(rest.len());
        let mime_type = &rest[..end];
        let Some((top, sub)) = mime_type.split_once('/') else {
            return Err(bad("media type without '/'"));
        };
        if top.is_empty() || sub.is_empty() {
            return Err(bad("empty media type or subtype"));
        }
        let mut out = Self::new(mime_type);
        rest = rest[end..].trim_start();
        while !rest.is_empty() {
            let Some(after) = rest.strip_prefix(';') else {
                return Err(bad("expected ';' between parameters"));
            };
            rest = after.trim_start();
            if rest.is_empty() || rest.starts_with(';') {
                continue;
            }
            let Some(eq) = rest.find('=') else {
                return Err(bad("parameter without '='"));
            };
            let name = rest[..eq].trim();
            if name.is_empty() || name.contains([';', ' ', '\t', '"']) {
                return Err(bad("invalid parameter name"));
            }
            rest = rest[eq + 1..].trim_start();
            let param_value = if let Some(quoted) = rest.strip_prefix('"') {
                let mut v = String::new();
                let mut chars = quoted.char_indices();
                let mut closed = None;
                while let Some((i, c)) = chars.next() {
                    match c {
                        '"' => {
                            closed = Some(i + 1);
                            break;
                        }
                        '\\' => match chars.next() {
                            Some((_, escaped)) => v.push(escaped),
                            None => break,
                        },
                        // Unfolding leaves CR/LF out already; drop any that remain.
                        '\r' | '\n' => {}
                        c => v.push(c),
                    }
                }
                let Some(closed) = closed else {
                    return Err(bad("unterminated quoted string"));
                };
                rest = &quoted[closed..];
                v
            } else {
                let end = rest
                    .find([';', ' ', '\t', '\r', '\n'])
                    .unwrap_or(rest.len());
                let v = rest[..end].to_owned();
                rest = &rest[end..];
                v
            };
            out.params.push((name.to_ascii_lowercase(), param_value));
            rest = rest.trim_start();
        }
        Ok(out)
    }

    /// The lower-cased `type/subtype`.
    pub fn mime_type(&self) -> &str {
        &self.mime_type
    }

    /// The value of the first parameter named `name` (case-insensitive).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// All parameters, names lower-cased, in order.
    pub fn params(&self) -> &[(String, String)] {
        &self.params
    }

    /// Writes `Content-Type: ...` CRLF, every value quoted but a `boundary` that is a token
    /// (written bare: ROADS' gatherer takes all after `boundary=` as the boundary, quotes
    /// included), folded before a parameter that would take the line past 78 characters.
    ///
    /// # Errors
    /// [`MimeError::Unwritable`] when the type or a parameter holds a control character.
    pub fn write_header(&self, out: &mut BytesMut) -> Result<(), MimeError> {
        check_writable("content-type", &self.mime_type)?;
        let mut line = format!("Content-Type: {}", self.mime_type);
        let mut line_start = 0;
        for (name, value) in &self.params {
            check_writable(name, value)?;
            let mut piece = String::with_capacity(name.len() + value.len() + 4);
            if name.eq_ignore_ascii_case("boundary") && is_token(value) {
                let _ = write!(piece, "{name}={value}");
            } else {
                let _ = write!(piece, "{name}=\"");
                for c in value.chars() {
                    if c == '"' || c == '\\' {
                        piece.push('\\');
                    }
                    piece.push(c);
                }
                piece.push('"');
            }
            if line.len() - line_start + 2 + piece.len() > FOLD_AT {
                line.push_str(";\r\n ");
                line_start = line.len() - 1;
            } else {
                line.push_str("; ");
            }
            line.push_str(&piece);
        }
        out.put_slice(line.as_bytes());
        out.put_slice(b"\r\n");
        Ok(())
    }
}

/// True when `value` is an RFC 2045 token: printable ASCII, no space and no tspecial.
fn is_token(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?=".contains(&b))
}

fn check_writable(what: &str, value: &str) -> Result<(), MimeError> {
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(MimeError::Unwritable {
            what: what.to_owned(),
            value: value.to_owned(),
        });
    }
    Ok(())
}

/// The `Content-Transfer-Encoding` values this implementation reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferEncoding {
    /// `7bit`: the default; the body is used as it is.
    SevenBit,
    /// `8bit`: the body is used as it is.
    EightBit,
    /// `binary`: the body is used as it is.
    Binary,
    /// `base64` (RFC 2045 §6.8).
    Base64,
}

impl TransferEncoding {
    /// Parses a header value, case-insensitively, ignoring surrounding whitespace.
    ///
    /// # Errors
    /// [`MimeError::UnsupportedTransferEncoding`] for quoted-printable and anything unknown.
    pub fn parse(value: &str) -> Result<Self, MimeError> {
        let v = value.trim();
        if v.eq_ignore_ascii_case("7bit") {
            Ok(Self::SevenBit)
        } else if v.eq_ignore_ascii_case("8bit") {
            Ok(Self::EightBit)
        } else if v.eq_ignore_ascii_case("binary") {
            Ok(Self::Binary)
        } else if v.eq_ignore_ascii_case("base64") {
            Ok(Self::Base64)
        } else {
            Err(MimeError::UnsupportedTransferEncoding(v.to_owned()))
        }
    }

    /// The header value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::SevenBit => "7bit",
            Self::EightBit => "8bit",
            Self::Binary => "binary",
            Self::Base64 => "base64",
        }
    }

    /// The encoding this writer uses for a payload.
    ///
    /// Text (see [`crate::soif::is_text`]) that is empty or ends in a line feed and whose
    /// lines are at most 998 bytes (RFC 5322 §2.1.1) travels as it is: `7bit` when it is
    /// ASCII, `8bit` otherwise. Everything else is base64, so the bytes survive exactly: the
    /// stream transport ends every message with a line end, and peers cap line lengths.
    pub fn for_payload(payload: &[u8]) -> Self {
        let ends_cleanly = payload.is_empty() || payload.ends_with(b"\n");
        if !ends_cleanly || !crate::soif::is_text(payload) || longest_line(payload) > 998 {
            Self::Base64
        } else if payload.is_ascii() {
            Self::SevenBit
        } else {
            Self::EightBit
        }
    }

    /// Encodes `payload` for this transfer encoding.
    pub fn encode(self, payload: &Bytes) -> Bytes {
        match self {
            Self::Base64 => Bytes::from(encode_mime(payload)),
            _ => payload.clone(),
        }
    }
}

fn longest_line(data: &[u8]) -> usize {
    let mut longest = 0;
    let mut start = 0;
    for nl in memchr::memchr_iter(b'\n', data) {
        longest = longest.max(nl - start);
        start = nl + 1;
    }
    longest.max(data.len() - start)
}

/// Splits a multipart body into its parts (RFC 2046 §5.1.1), as slices of `body`.
///
/// A delimiter is a line starting with `--boundary`, optionally followed by `--` (the close
/// delimiter) and trailing whitespace. The line end before a delimiter belongs to it, so a
/// part's bytes come back exactly. The preamble and epilogue are dropped. A body that ends
/// without a close delimiter is accepted: the transport already delimited the message.
///
/// # Errors
/// [`MimeError::NoDelimiter`] when no delimiter line exists, [`MimeError::TooManyParts`]
/// past `limits.max_parts`.
pub fn split_multipart(
    body: &Bytes,
    boundary: &str,
    limits: &Limits,
) -> Result<Vec<Bytes>, MimeError> {
    let delimiter = format!("--{boundary}");
    let finder = memmem::Finder::new(delimiter.as_bytes());
    let mut parts = Vec::new();
    let mut part_start: Option<usize> = None;
    let mut search = 0;
    while let Some(found) = finder.find(&body[search..]) {
        let at = search + found;
        search = at + delimiter.len();
        if at != 0 && body[at - 1] != b'\n' {
            continue;
        }
        let mut after = at + delimiter.len();
        let close = body[after..].starts_with(b"--");
        if close {
            after += 2;
        }
        let line_end = memchr::memchr(b'\n', &body[after..]).map_or(body.len(), |i| after + i);
        if !body[after..line_end]
            .iter()
            .all(|b| matches!(b, b' ' | b'\t' | b'\r'))
        {
            continue;
        }
        if let Some(start) = part_start {
            let mut end = at.max(start);
            if end > start && body[end - 1] == b'\n' {
                end -= 1;
                if end > start && body[end - 1] == b'\r' {
                    end -= 1;
                }
            }
            if parts.len() == limits.max_parts {
                return Err(MimeError::TooManyParts {
                    max: limits.max_parts,
                });
            }
            parts.push(body.slice(start..end));
        }
        if close {
            return Ok(parts);
        }
        part_start = Some((line_end + 1).min(body.len()));
        search = part_start.unwrap_or(body.len());
    }
    match part_start {
        None => Err(MimeError::NoDelimiter {
            boundary: boundary.to_owned(),
        }),
        Some(start) => {
            if parts.len() == limits.max_parts {
                return Err(MimeError::TooManyParts {
                    max: limits.max_parts,
                });
            }
            let mut end = body.len();
            if body[start..end].ends_with(b"\n") {
                end -= 1;
                if body[start..end].ends_with(b"\r") {
                    end -= 1;
                }
            }
            parts.push(body.slice(start..end));
            Ok(parts)
        }
    }
}

/// Default multipart boundary, as in the protocol digest's example session.
pub const DEFAULT_BOUNDARY: &str = "cipv3-part";

/// Picks a boundary that appears in none of `parts`: [`DEFAULT_BOUNDARY`], else the first of
/// `cipv3-part-1`, `cipv3-part-2`, ... that is free.
pub fn choose_boundary(parts: &[&[u8]]) -> String {
    let mut n = 0u64;
    loop {
        let candidate = if n == 0 {
            DEFAULT_BOUNDARY.to_owned()
        } else {
            format!("{DEFAULT_BOUNDARY}-{n}")
        };
        let delimiter = format!("--{candidate}");
        let finder = memmem::Finder::new(delimiter.as_bytes());
        if parts.iter().all(|p| finder.find(p).is_none()) {
            return candidate;
        }
        n += 1;
    }
}

/// Writes a multipart body: each part (headers and body already serialised) after a
/// delimiter line, then the close delimiter and CRLF.
pub fn write_multipart(out: &mut BytesMut, boundary: &str, parts: &[Bytes]) {
    let total: usize = parts.iter().map(|p| p.len() + boundary.len() + 6).sum();
    out.reserve(total + boundary.len() + 8);
    for part in parts {
        out.put_slice(b"--");
        out.put_slice(boundary.as_bytes());
        out.put_slice(b"\r\n");
        out.put_slice(part);
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"--");
    out.put_slice(boundary.as_bytes());
    out.put_slice(b"--\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits() -> Limits {
        Limits::default()
    }

    #[test]
    fn headers_fold_and_case() {
        let input = Bytes::from_static(
            b"content-TYPE: application/index.obj.tagged; dsi=1.2;\r\n base-uri=\"a:b c:d\"\r\nX-Other: 1\nMIME-version: 1.0\r\n\r\nbody\r\n",
        );
        let e = Entity::parse(&input, &limits()).unwrap();
        assert_eq!(e.headers.len(), 3);
        assert_eq!(e.headers.get("Mime-Version"), Some("1.0"));
        let ct = e.headers.content_type().unwrap().unwrap();
        assert_eq!(ct.mime_type(), "application/index.obj.tagged");
        assert_eq!(ct.param("DSI"), Some("1.2"));
        assert_eq!(ct.param("base-uri"), Some("a:b c:d"));
        assert_eq!(&e.body[..], b"body\r\n");
    }

    #[test]
    fn headers_without_separator_and_errors() {
        let e = Entity::parse(&Bytes::from_static(b"A: b\r\n"), &limits()).unwrap();
        assert_eq!(e.headers.get("a"), Some("b"));
        assert!(e.body.is_empty());
        assert!(matches!(
            Entity::parse(&Bytes::from_static(b" cont\r\n\r\n"), &limits()),
            Err(MimeError::MalformedHeader { offset: 0, .. })
        ));
        assert!(matches!(
            Entity::parse(&Bytes::from_static(b"A: b\r\nnocolon\r\n\r\n"), &limits()),
            Err(MimeError::MalformedHeader { offset: 6, .. })
        ));
        let small = Limits {
            max_header: 8,
            ..Limits::default()
        };
        assert_eq!(
            Entity::parse(&Bytes::from_static(b"A: bcdefgh\r\n\r\n"), &small),
            Err(MimeError::HeaderTooLarge { max: 8 })
        );
    }

    #[test]
    fn content_type_parameters() {
        let ct = ContentType::parse(
            "Application/Index.Cmd.Poll ; type = \"tag\\\"ged\" ;dsi= \"1.3.5.7.9\"; x-y=z;",
        )
        .unwrap();
        assert_eq!(ct.mime_type(), "application/index.cmd.poll");
        assert_eq!(ct.param("type"), Some("tag\"ged"));
        assert_eq!(ct.param("dsi"), Some("1.3.5.7.9"));
        assert_eq!(ct.param("X-Y"), Some("z"));
        assert!(ContentType::parse("text").is_err());
        assert!(ContentType::parse("a/b; c").is_err());
        assert!(ContentType::parse("a/b; c=\"open").is_err());
    }

    #[test]
    fn content_type_writes_folded_and_reparses() {
        let ct = ContentType::new("application/index.obj.tagged")
            .with_param("type", "tagged")
            .with_param("dsi", "1.3.6.1.4.1.99999.7")
            .with_param(
                "base-uri",
                "ldap://ldap.example.net/dc=example,dc=net whoispp://w:63/",
            );
        let mut out = BytesMut::new();
        ct.write_header(&mut out).unwrap();
        let text = std::str::from_utf8(&out).unwrap();
        assert!(text.lines().all(|l| l.len() <= FOLD_AT), "{text}");
        assert!(text.contains(";\r\n base-uri="));
        let e = Entity::parse(&out.freeze(), &limits()).unwrap();
        assert_eq!(e.headers.content_type().unwrap().unwrap(), ct);
        let bad = ContentType::new("a/b").with_param("x", "a\r\nb");
        assert!(matches!(
            bad.write_header(&mut BytesMut::new()),
            Err(MimeError::Unwritable { .. })
        ));
    }

    #[test]
    fn transfer_encodings() {
        assert_eq!(
            TransferEncoding::parse(" BASE64 ").unwrap(),
            TransferEncoding::Base64
        );
        assert_eq!(
            TransferEncoding::parse("Binary").unwrap(),
            TransferEncoding::Binary
        );
        assert!(TransferEncoding::parse("quoted-printable").is_err());
        assert_eq!(
            TransferEncoding::for_payload(b"a\r\n"),
            TransferEncoding::SevenBit
        );
        assert_eq!(
            TransferEncoding::for_payload("é\n".as_bytes()),
            TransferEncoding::EightBit
        );
        assert_eq!(
            TransferEncoding::for_payload(b"no newline"),
            TransferEncoding::Base64
        );
        assert_eq!(
            TransferEncoding::for_payload(b"\x00\n"),
            TransferEncoding::Base64
        );
        let long = [b"a".repeat(999), b"\n".to_vec()].concat();
        assert_eq!(
            TransferEncoding::for_payload(&long),
            TransferEncoding::Base64
        );
        let input = Bytes::from_static(b"Content-Transfer-Encoding: base64\r\n\r\nQUJD\r\n");
        let e = Entity::parse(&input, &limits()).unwrap();
        assert_eq!(&e.decoded_body().unwrap()[..], b"ABC");
    }

    #[test]
    fn multipart_tolerant_parse() {
        let body = Bytes::from_static(
            b"preamble\n--b\r\nA: 1\r\n\r\none\r\n--bx not a delimiter\r\n--b  \nA: 2\n\ntwo\n--b--\r\nepilogue",
        );
        let parts = split_multipart(&body, "b", &limits()).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(&parts[0][..], b"A: 1\r\n\r\none\r\n--bx not a delimiter");
        assert_eq!(&parts[1][..], b"A: 2\n\ntwo");
        let unclosed = Bytes::from_static(b"--b\r\nx\r\n");
        assert_eq!(
            split_multipart(&unclosed, "b", &limits()).unwrap(),
            vec![Bytes::from("x")]
        );
        assert!(matches!(
            split_multipart(&Bytes::from_static(b"nothing"), "b", &limits()),
            Err(MimeError::NoDelimiter { .. })
        ));
        let many = Bytes::from_static(b"--b\r\n\r\n--b\r\n\r\n--b\r\n\r\n--b--\r\n");
        let two = Limits {
            max_parts: 2,
            ..Limits::default()
        };
        assert_eq!(
            split_multipart(&many, "b", &two),
            Err(MimeError::TooManyParts { max: 2 })
        );
        assert_eq!(split_multipart(&many, "b", &limits()).unwrap().len(), 3);
    }

    #[test]
    fn boundary_avoids_part_content() {
        let a: &[u8] = b"x\r\n--cipv3-part\r\n";
        let b: &[u8] = b"--cipv3-part-1";
        assert_eq!(choose_boundary(&[a, b]), "cipv3-part-2");
        assert_eq!(choose_boundary(&[b"plain"]), DEFAULT_BOUNDARY);
    }

    proptest! {
        #[test]
        fn multipart_round_trip(parts in proptest::collection::vec(
            proptest::collection::vec(prop_oneof![
                Just(b'-'), Just(b'\r'), Just(b'\n'), Just(b'c'), any::<u8>()
            ], 0..60), 1..6)) {
            let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let boundary = choose_boundary(&slices);
            let owned: Vec<Bytes> = parts.iter().map(|p| Bytes::from(p.clone())).collect();
            let mut out = BytesMut::new();
            write_multipart(&mut out, &boundary, &owned);
            let back = split_multipart(&out.freeze(), &boundary, &Limits::default()).unwrap();
            prop_assert_eq!(back, owned);
        }

        #[test]
        fn content_type_round_trip(value in "[ -~]{0,40}", name in "[a-z][a-z0-9-]{0,10}") {
            let ct = ContentType::new("application/index.cmd.poll").with_param(&name, value);
            let mut out = BytesMut::new();
            ct.write_header(&mut out).unwrap();
            let e = Entity::parse(&out.freeze(), &Limits::default()).unwrap();
            prop_assert_eq!(e.headers.content_type().unwrap().unwrap(), ct);
        }
    }
}
