//! CIP requests, results and index objects as MIME entities (RFC 2652).
//!
//! * Requests: `application/index.cmd.noop`, `.poll`, `.datachanged` (RFC 2652 §2.3), a pushed
//!   `application/index.obj.<type>` (RFC 2653 §2.1 example) and `application/index.vnd.*`.
//! * Results: `multipart/mixed` of `application/index.obj.<type>` parts (RFC 2652 §2.4).
//! * `application/index.response` (RFC 2652 §2.2), accepted inside results.
//!
//! Parsing returns a [`MessageError`] whose [`MessageError::code`] is the code to answer
//! with: 500 for bad MIME, 501 for an unknown or missing command, 502 for a missing or
//! invalid required parameter (RFC 2652 §2.3).

use std::fmt;
use std::hash::{Hash, Hasher};

use bytes::{BufMut, Bytes, BytesMut};

use super::Limits;
use super::code::ResponseCode;
use super::mime::{
    ContentType, Entity, MimeError, TransferEncoding, choose_boundary, write_multipart,
};
use crate::dsi::{Dsi, DsiError};

const OBJ_PREFIX: &str = "application/index.obj.";
const CMD_PREFIX: &str = "application/index.cmd";
const VND_PREFIX: &str = "application/index.vnd";
const RESPONSE_TYPE: &str = "application/index.response";

/// An index type: the facet of `application/index.obj.<type>` (RFC 2652 §2.1.1).
///
/// 1 to 20 characters from `[A-Za-z0-9-]`, compared case-insensitively (equality, hashing
/// and ordering ignore ASCII case); the spelling given is kept for display.
#[derive(Debug, Clone)]
pub struct IndexType(String, TypeSpelling);

/// How a request's `type` parameter is spelled (digest A5): RFC 2652's bare facet
/// (`tagged`), or the full media type (`application/index.obj.tagged`), the only spelling
/// ROADS' `wppd` understands. Equality of [`IndexType`]s ignores it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TypeSpelling {
    /// `type="tagged"`.
    #[default]
    Facet,
    /// `type="application/index.obj.tagged"`.
    MediaType,
}

/// Why a string is not an index type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid index type {value:?}: expected 1-20 characters from [A-Za-z0-9-]")]
pub struct IndexTypeError {
    /// The rejected value.
    pub value: String,
}

impl IndexType {
    /// Longest facet, in characters (RFC 2652 §2.1.1).
    pub const MAX_LEN: usize = 20;

    /// Validates a bare facet such as `tagged` or `HARVEST-SOIF-1`.
    ///
    /// # Errors
    /// [`IndexTypeError`] when the length or a character is wrong.
    pub fn new(facet: &str) -> Result<Self, IndexTypeError> {
        if facet.is_empty()
            || facet.len() > Self::MAX_LEN
            || !facet
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(IndexTypeError {
                value: facet.to_owned(),
            });
        }
        Ok(Self(facet.to_owned(), TypeSpelling::Facet))
    }

    /// Parses a `type` parameter in any of the three spellings of digest A5: a bare facet
    /// (`tagged`, RFC 2652), a full media type (`application/index.obj.tagged`, RFC 2654), or
    /// the tagged index's version string `x-tagged-index-1` (RFC 2653 example), which maps to
    /// `tagged`. Case is ignored; surrounding whitespace is trimmed.
    ///
    /// # Errors
    /// [`IndexTypeError`] when what remains is not a valid facet.
    pub fn from_param(value: &str) -> Result<Self, IndexTypeError> {
        let v = value.trim();
        if v.eq_ignore_ascii_case("x-tagged-index-1") {
            return Ok(Self::tagged());
        }
        // `get`: the value may hold non-ASCII text, and byte n need not start a character.
        if v.len() > OBJ_PREFIX.len()
            && v.get(..OBJ_PREFIX.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(OBJ_PREFIX))
        {
            return Self::new(&v[OBJ_PREFIX.len()..]);
        }
        Self::new(v)
    }

    /// `tagged` (RFC 2654).
    pub fn tagged() -> Self {
        Self("tagged".to_owned(), TypeSpelling::Facet)
    }

    /// `HARVEST-SOIF-1` (RFC 2655).
    pub fn harvest_soif() -> Self {
        Self("HARVEST-SOIF-1".to_owned(), TypeSpelling::Facet)
    }

    /// The facet as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `application/index.obj.<facet>`.
    pub fn media_type(&self) -> String {
        format!("{OBJ_PREFIX}{}", self.0)
    }

    /// The same type, written in requests as `spelling`.
    pub fn spelled(mut self, spelling: TypeSpelling) -> Self {
        self.1 = spelling;
        self
    }

    /// How requests spell it.
    pub fn spelling(&self) -> TypeSpelling {
        self.1
    }

    /// The `type` parameter of a request: the facet, or the media type.
    pub fn param_value(&self) -> String {
        match self.1 {
            TypeSpelling::Facet => self.0.clone(),
            TypeSpelling::MediaType => self.media_type(),
        }
    }
}

impl PartialEq for IndexType {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq_ignore_ascii_case(&other.0)
    }
}

impl Eq for IndexType {}

impl Hash for IndexType {
    fn hash<H: Hasher>(&self, state: &mut H) {
        for b in self.0.bytes() {
            state.write_u8(b.to_ascii_lowercase());
        }
        state.write_u8(0xff);
    }
}

impl PartialOrd for IndexType {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IndexType {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let a = self.0.bytes().map(|b| b.to_ascii_lowercase());
        a.cmp(other.0.bytes().map(|b| b.to_ascii_lowercase()))
    }
}

impl fmt::Display for IndexType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for IndexType {
    type Err = IndexTypeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_param(s)
    }
}

/// A message that cannot be taken as a request, result or index object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MessageError {
    /// The MIME structure is broken (answer 500).
    #[error(transparent)]
    Mime(#[from] MimeError),
    /// No `Content-Type` header (answer 501: missing request).
    #[error("message has no content-type")]
    MissingContentType,
    /// A content type that is not a CIP request (answer 501).
    #[error("{mime_type} is not a cip request")]
    NotARequest {
        /// The lower-cased media type.
        mime_type: String,
    },
    /// An `application/index.cmd.*` command CIP does not define (answer 501).
    #[error("unknown command application/index.cmd.{command}")]
    UnknownCommand {
        /// The command facet, possibly empty.
        command: String,
    },
    /// An `application/index.obj.*` whose facet is not a valid index type (answer 501).
    #[error(transparent)]
    BadIndexType(#[from] IndexTypeError),
    /// A required parameter is absent (answer 502).
    #[error("required parameter {name} is missing")]
    MissingParameter {
        /// The parameter name.
        name: &'static str,
    },
    /// A required parameter's value is invalid (answer 502).
    #[error("parameter {name}={value:?} is invalid: {reason}")]
    InvalidParameter {
        /// The parameter name.
        name: &'static str,
        /// The value received.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A result whose content type is neither multipart nor an index object.
    #[error("{mime_type} is not a poll result")]
    NotAResult {
        /// The lower-cased media type.
        mime_type: String,
    },
    /// A part of a multipart result that does not parse.
    #[error("part {index} of the result: {source}")]
    BadPart {
        /// Zero-based part number.
        index: usize,
        /// Why it does not parse.
        source: Box<MessageError>,
    },
}

impl MessageError {
    /// The response code a receiver answers this error with (RFC 2652 §2.3, App. B).
    pub fn code(&self) -> ResponseCode {
        match self {
            Self::Mime(_) => ResponseCode::BadMimeFormat,
            Self::MissingContentType
            | Self::NotARequest { .. }
            | Self::UnknownCommand { .. }
            | Self::BadIndexType(_)
            | Self::NotAResult { .. } => ResponseCode::UnknownRequest,
            Self::MissingParameter { .. } | Self::InvalidParameter { .. } => {
                ResponseCode::MissingAttributes
            }
            Self::BadPart { source, .. } => source.code(),
        }
    }
}

/// An index object (RFC 2652 §2.4): type, dataset, referral bases and the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexObject {
    /// The index type (the media type's facet).
    pub index_type: IndexType,
    /// The dataset the index describes.
    pub dsi: Dsi,
    /// Referral base URIs (`base-uri`, whitespace-separated on the wire). At least one.
    pub base_uris: Vec<String>,
    /// Optional human-readable dataset description (`dsi-description`, our own parameter
    /// name; RFC 2651 §4.1 gives no syntax, digest A11).
    pub dsi_description: Option<String>,
    /// The payload with its transfer encoding undone.
    pub payload: Bytes,
}

/// The entity's `Content-Type`, which every CIP message must have.
fn content_type(entity: &Entity) -> Result<ContentType, MessageError> {
    entity
        .headers
        .content_type()?
        .ok_or(MessageError::MissingContentType)
}

impl IndexObject {
    /// Reads an index object from a parsed entity whose content type is
    /// `application/index.obj.<facet>`.
    ///
    /// `dsi` and `base-uri` are required (502 when absent or invalid); a `type` parameter is
    /// accepted and ignored, the media type's facet wins (digest A6).
    ///
    /// # Errors
    /// [`MessageError`] as described.
    pub fn from_entity(entity: &Entity) -> Result<Self, MessageError> {
        let ct = content_type(entity)?;
        let Some(facet) = ct.mime_type().strip_prefix(OBJ_PREFIX) else {
            return Err(MessageError::NotARequest {
                mime_type: ct.mime_type().to_owned(),
            });
        };
        let index_type = IndexType::new(facet)?;
        let dsi = dsi_param(&ct)?;
        let raw = ct
            .param("base-uri")
            .ok_or(MessageError::MissingParameter { name: "base-uri" })?;
        let base_uris: Vec<String> = raw.split_ascii_whitespace().map(str::to_owned).collect();
        if base_uris.is_empty() {
            return Err(MessageError::InvalidParameter {
                name: "base-uri",
                value: raw.to_owned(),
                reason: "no uri".into(),
            });
        }
        let dsi_description = ct.param("dsi-description").map(str::to_owned);
        let payload = entity.decoded_body()?;
        Ok(Self {
            index_type,
            dsi,
            base_uris,
            dsi_description,
            payload,
        })
    }

    /// Writes the object as a MIME entity (headers, blank line, encoded payload), with a
    /// `Mime-Version` header when `top_level`.
    ///
    /// Parameters: `type` (bare facet, digest A5/A6), `dsi`, `base-uri` (joined by spaces),
    /// `dsi-description` when set, all quoted. The transfer encoding is chosen by
    /// [`TransferEncoding::for_payload`]; 7bit gets no header.
    ///
    /// # Errors
    /// [`MimeError::Unwritable`] when a base URI is empty or a value holds control characters.
    pub fn write_entity(&self, out: &mut BytesMut, top_level: bool) -> Result<(), MimeError> {
        write_entity(out, top_level, &self.content_type()?, &self.payload)
    }

    fn content_type(&self) -> Result<ContentType, MimeError> {
        if self.base_uris.is_empty()
            || self
                .base_uris
                .iter()
                .any(|u| u.is_empty() || u.contains(char::is_whitespace))
        {
            return Err(MimeError::Unwritable {
                what: "base-uri".into(),
                value: self.base_uris.join(" "),
            });
        }
        let mut ct = ContentType::new(&self.index_type.media_type())
            .with_param("type", self.index_type.as_str())
            .with_param("dsi", self.dsi.as_str())
            .with_param("base-uri", self.base_uris.join(" "));
        if let Some(d) = &self.dsi_description {
            ct = ct.with_param("dsi-description", d.as_str());
        }
        Ok(ct)
    }
}

/// A request the sender-CIP sends after version negotiation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `application/index.cmd.noop` (RFC 2652 §2.3.1): always answered 200.
    Noop,
    /// `application/index.cmd.poll` (RFC 2652 §2.3.2).
    Poll {
        /// The index type asked for.
        index_type: IndexType,
        /// The dataset asked for.
        dsi: Dsi,
        /// Other parameters, names lower-cased (RFC 2652 §2.3: ignored unless understood).
        params: Vec<(String, String)>,
        /// The type-specific poll body, decoded; usually empty (digest A12).
        body: Bytes,
    },
    /// `application/index.cmd.datachanged` (RFC 2652 §2.3.3).
    DataChanged {
        /// The index type whose data changed.
        index_type: IndexType,
        /// The dataset whose data changed.
        dsi: Dsi,
        /// RFC 822-style attribute lines defined by the index type, decoded.
        body: Bytes,
    },
    /// A pushed index object (RFC 2653 §2.1 example, RFC 2651 §3.2.2).
    IndexObject(IndexObject),
    /// `application/index.vnd.<subtype>`, passed through.
    Vendor {
        /// What follows `application/index.vnd.` (lower-cased; empty for the bare branch).
        subtype: String,
        /// Parameters, names lower-cased.
        params: Vec<(String, String)>,
        /// The body, decoded.
        body: Bytes,
    },
}

impl Request {
    /// Parses a request from a message as the stream codec delivers it.
    ///
    /// # Errors
    /// [`MessageError`]; answer with [`MessageError::code`].
    pub fn from_mime(message: &Bytes, limits: &Limits) -> Result<Self, MessageError> {
        let entity = Entity::parse(message, limits)?;
        let ct = content_type(&entity)?;
        let mime_type = ct.mime_type();
        if mime_type.starts_with(OBJ_PREFIX) {
            return Ok(Self::IndexObject(IndexObject::from_entity(&entity)?));
        }
        if let Some(rest) = mime_type.strip_prefix(VND_PREFIX)
            && (rest.is_empty() || rest.starts_with('.'))
        {
            return Ok(Self::Vendor {
                subtype: rest.trim_start_matches('.').to_owned(),
                params: ct.params().to_vec(),
                body: entity.decoded_body()?,
            });
        }
        let Some(rest) = mime_type.strip_prefix(CMD_PREFIX) else {
            return Err(MessageError::NotARequest {
                mime_type: mime_type.to_owned(),
            });
        };
        let command = rest.strip_prefix('.').unwrap_or(rest);
        match command {
            "noop" => Ok(Self::Noop),
            "poll" => Ok(Self::Poll {
                index_type: type_param(&ct)?,
                dsi: dsi_param(&ct)?,
                params: ct
                    .params()
                    .iter()
                    .filter(|(n, _)| n != "type" && n != "dsi")
                    .cloned()
                    .collect(),
                body: entity.decoded_body()?,
            }),
            "datachanged" => Ok(Self::DataChanged {
                index_type: type_param(&ct)?,
                dsi: dsi_param(&ct)?,
                body: entity.decoded_body()?,
            }),
            other => Err(MessageError::UnknownCommand {
                command: other.to_owned(),
            }),
        }
    }

    /// Serialises the request as a MIME message (before stuffing): `Mime-Version: 1.0`,
    /// `Content-Type` with quoted parameters, `Content-Transfer-Encoding` when not 7bit, a
    /// blank line and the body.
    ///
    /// # Errors
    /// [`MimeError::Unwritable`] when a value cannot be written.
    pub fn to_mime(&self) -> Result<Bytes, MimeError> {
        let mut out = BytesMut::new();
        match self {
            Self::Noop => {
                write_entity(
                    &mut out,
                    true,
                    &ContentType::new("application/index.cmd.noop"),
                    &Bytes::new(),
                )?;
            }
            Self::Poll {
                index_type,
                dsi,
                params,
                body,
            } => {
                let mut ct = ContentType::new("application/index.cmd.poll")
                    .with_param("type", index_type.param_value())
                    .with_param("dsi", dsi.as_str());
                for (n, v) in params.iter().filter(|(n, _)| {
                    !n.eq_ignore_ascii_case("type") && !n.eq_ignore_ascii_case("dsi")
                }) {
                    ct = ct.with_param(n, v.as_str());
                }
                write_entity(&mut out, true, &ct, body)?;
            }
            Self::DataChanged {
                index_type,
                dsi,
                body,
            } => {
                let ct = ContentType::new("application/index.cmd.datachanged")
                    .with_param("type", index_type.as_str())
                    .with_param("dsi", dsi.as_str());
                write_entity(&mut out, true, &ct, body)?;
            }
            Self::IndexObject(obj) => obj.write_entity(&mut out, true)?,
            Self::Vendor {
                subtype,
                params,
                body,
            } => {
                let mime_type = if subtype.is_empty() {
                    VND_PREFIX.to_owned()
                } else {
                    format!("{VND_PREFIX}.{subtype}")
                };
                let mut ct = ContentType::new(&mime_type);
                for (n, v) in params {
                    ct = ct.with_param(n, v.as_str());
                }
                write_entity(&mut out, true, &ct, body)?;
            }
        }
        Ok(out.freeze())
    }

    /// A short name for logs: `noop`, `poll`, `datachanged`, `index-object`, `vendor`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Noop => "noop",
            Self::Poll { .. } => "poll",
            Self::DataChanged { .. } => "datachanged",
            Self::IndexObject(_) => "index-object",
            Self::Vendor { .. } => "vendor",
        }
    }
}

/// `application/index.response` (RFC 2652 §2.2): a code, a comment line and a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexResponse {
    /// The `code` parameter.
    pub code: ResponseCode,
    /// The first body line (may be empty).
    pub comment: String,
    /// Lines after the comment.
    pub payload: Bytes,
}

impl IndexResponse {
    /// Reads an index response from a parsed entity.
    ///
    /// # Errors
    /// 502-class errors when `code` is missing or not a CIP code; MIME errors.
    pub fn from_entity(entity: &Entity) -> Result<Self, MessageError> {
        let ct = content_type(entity)?;
        let raw = ct
            .param("code")
            .ok_or(MessageError::MissingParameter { name: "code" })?;
        let code = raw
            .trim()
            .parse::<u16>()
            .ok()
            .and_then(|n| ResponseCode::try_from(n).ok())
            .ok_or_else(|| MessageError::InvalidParameter {
                name: "code",
                value: raw.to_owned(),
                reason: "not a cip response code".into(),
            })?;
        let body = entity.decoded_body()?;
        let (comment, payload) = match memchr::memchr(b'\n', &body) {
            Some(i) => (&body[..i], body.slice(i + 1..)),
            None => (&body[..], Bytes::new()),
        };
        let comment = comment.strip_suffix(b"\r").unwrap_or(comment);
        Ok(Self {
            code,
            comment: String::from_utf8_lossy(comment).into_owned(),
            payload,
        })
    }

    /// Serialises the response as a MIME message. `charset=UTF-8` is added only for a
    /// non-ASCII comment (digest A25).
    ///
    /// # Errors
    /// [`MimeError::Unwritable`] when the comment holds CR or LF.
    pub fn to_mime(&self) -> Result<Bytes, MimeError> {
        let mut ct =
            ContentType::new(RESPONSE_TYPE).with_param("code", self.code.code().to_string());
        if !self.comment.is_ascii() {
            ct = ct.with_param("charset", "UTF-8");
        }
        if self.comment.contains(['\r', '\n']) {
            return Err(MimeError::Unwritable {
                what: "comment".into(),
                value: self.comment.clone(),
            });
        }
        let mut body = BytesMut::with_capacity(self.comment.len() + 2 + self.payload.len());
        body.put_slice(self.comment.as_bytes());
        body.put_slice(b"\r\n");
        body.put_slice(&self.payload);
        let mut out = BytesMut::new();
        write_entity(&mut out, true, &ct, &body.freeze())?;
        Ok(out.freeze())
    }
}

/// The output of a successful poll: the index objects sent after a 201.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollResult {
    /// The index objects, in order.
    pub objects: Vec<IndexObject>,
}

impl PollResult {
    /// Serialises the result as `multipart/mixed` holding only index-object parts
    /// (RFC 2652 §2.4, digest A4), whatever the number of objects. The boundary is
    /// `cipv3-part` unless a part contains it (see [`choose_boundary`]).
    ///
    /// # Errors
    /// [`MimeError::Unwritable`] when an object cannot be written.
    pub fn to_mime(&self) -> Result<Bytes, MimeError> {
        let mut heads = Vec::with_capacity(self.objects.len());
        let mut bodies = Vec::with_capacity(self.objects.len());
        for obj in &self.objects {
            // Headers and payload stay apart so the payload is copied once, into the output.
            let mut head = BytesMut::new();
            let encoding = write_head(&mut head, false, &obj.content_type()?, &obj.payload)?;
            heads.push(head.freeze());
            bodies.push(encoding.encode(&obj.payload));
        }
        let mut slices: Vec<&[u8]> = heads.iter().map(|h| &h[..]).collect();
        slices.extend(bodies.iter().map(|b| &b[..]));
        let boundary = choose_boundary(&slices);
        let ct = ContentType::new("multipart/mixed").with_param("boundary", boundary.as_str());
        let total: usize = heads
            .iter()
            .zip(&bodies)
            .map(|(h, b)| h.len() + b.len())
            .sum();
        let mut out =
            BytesMut::with_capacity(total + 128 + self.objects.len() * (boundary.len() + 8));
        out.put_slice(b"Mime-Version: 1.0\r\n");
        ct.write_header(&mut out)?;
        out.put_slice(b"\r\n");
        if self.objects.is_empty() {
            write_multipart(&mut out, &boundary, &[]);
        }
        for (i, (head, body)) in heads.iter().zip(&bodies).enumerate() {
            out.put_slice(b"--");
            out.put_slice(boundary.as_bytes());
            out.put_slice(b"\r\n");
            out.put_slice(head);
            out.put_slice(body);
            out.put_slice(b"\r\n");
            if i + 1 == heads.len() {
                out.put_slice(b"--");
                out.put_slice(boundary.as_bytes());
                out.put_slice(b"--\r\n");
            }
        }
        Ok(out.freeze())
    }

    /// Parses a result in any of the three forms of digest A4: `multipart/mixed` of
    /// index objects; the same with `application/index.response` parts (informational,
    /// logged and skipped); or a single bare `application/index.obj.*` entity. Parts of other
    /// types are skipped with a debug log. Objects of any index type are kept.
    ///
    /// # Errors
    /// [`MessageError`] for broken MIME, a part that is not a valid index object, or a
    /// top-level type that is neither multipart nor an index object.
    pub fn from_mime(message: &Bytes, limits: &Limits) -> Result<Self, MessageError> {
        let entity = Entity::parse(message, limits)?;
        let ct = content_type(&entity)?;
        if ct.mime_type().starts_with(OBJ_PREFIX) {
            return Ok(Self {
                objects: vec![IndexObject::from_entity(&entity)?],
            });
        }
        if !ct.mime_type().starts_with("multipart/") {
            return Err(MessageError::NotAResult {
                mime_type: ct.mime_type().to_owned(),
            });
        }
        let boundary = ct.param("boundary").ok_or(MimeError::MissingBoundary)?;
        let body = entity.decoded_body()?;
        let parts = super::mime::split_multipart(&body, boundary, limits)?;
        let mut objects = Vec::with_capacity(parts.len());
        for (index, part) in parts.iter().enumerate() {
            let bad = |e: MessageError| MessageError::BadPart {
                index,
                source: Box::new(e),
            };
            let part_entity = Entity::parse(part, limits).map_err(|e| bad(e.into()))?;
            let part_type = match part_entity.headers.content_type() {
                Ok(Some(t)) => t,
                Ok(None) => {
                    tracing::debug!(index, "skipping result part without content-type");
                    continue;
                }
                Err(e) => return Err(bad(e.into())),
            };
            if part_type.mime_type().starts_with(OBJ_PREFIX) {
                objects.push(IndexObject::from_entity(&part_entity).map_err(bad)?);
            } else if part_type.mime_type() == RESPONSE_TYPE {
                match IndexResponse::from_entity(&part_entity) {
                    Ok(r) => tracing::debug!(index, code = %r.code, comment = %r.comment,
                        "index.response part in result"),
                    Err(e) => tracing::debug!(index, error = %e, "unreadable index.response part"),
                }
            } else {
                tracing::debug!(
                    index,
                    mime_type = part_type.mime_type(),
                    "skipping result part"
                );
            }
        }
        Ok(Self { objects })
    }
}

fn write_entity(
    out: &mut BytesMut,
    top_level: bool,
    ct: &ContentType,
    payload: &Bytes,
) -> Result<(), MimeError> {
    let encoding = write_head(out, top_level, ct, payload)?;
    out.put_slice(&encoding.encode(payload));
    Ok(())
}

/// Writes the header section and blank line for `payload`; returns the encoding chosen.
fn write_head(
    out: &mut BytesMut,
    top_level: bool,
    ct: &ContentType,
    payload: &[u8],
) -> Result<TransferEncoding, MimeError> {
    if top_level {
        out.put_slice(b"Mime-Version: 1.0\r\n");
    }
    ct.write_header(out)?;
    let encoding = TransferEncoding::for_payload(payload);
    if encoding != TransferEncoding::SevenBit {
        out.put_slice(b"Content-Transfer-Encoding: ");
        out.put_slice(encoding.as_str().as_bytes());
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
    Ok(encoding)
}

fn type_param(ct: &ContentType) -> Result<IndexType, MessageError> {
    let raw = ct
        .param("type")
        .ok_or(MessageError::MissingParameter { name: "type" })?;
    IndexType::from_param(raw).map_err(|e| MessageError::InvalidParameter {
        name: "type",
        value: raw.to_owned(),
        reason: e.to_string(),
    })
}

fn dsi_param(ct: &ContentType) -> Result<Dsi, MessageError> {
    let raw = ct
        .param("dsi")
        .ok_or(MessageError::MissingParameter { name: "dsi" })?;
    Dsi::new(raw.trim()).map_err(|e: DsiError| MessageError::InvalidParameter {
        name: "dsi",
        value: raw.to_owned(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits() -> Limits {
        Limits::default()
    }

    fn dsi() -> Dsi {
        Dsi::new("1.3.6.1.4.1.99999.7").unwrap()
    }

    fn parse(text: &str) -> Result<Request, MessageError> {
        Request::from_mime(&Bytes::from(text.to_owned()), &limits())
    }

    #[test]
    fn index_type_spellings() {
        for s in [
            "tagged",
            "TAGGED",
            "application/index.obj.tagged",
            "Application/Index.Obj.Tagged",
            "x-tagged-index-1",
            " X-TAGGED-INDEX-1 ",
        ] {
            assert_eq!(
                IndexType::from_param(s).unwrap(),
                IndexType::tagged(),
                "{s}"
            );
        }
        assert_eq!(
            IndexType::from_param("harvest-soif-1").unwrap(),
            IndexType::harvest_soif()
        );
        for bad in [
            "",
            "a b",
            "x".repeat(21).as_str(),
            "application/index.obj.",
            "tag_ged",
        ] {
            assert!(IndexType::from_param(bad).is_err(), "{bad}");
        }
        use std::collections::HashSet;
        let set: HashSet<IndexType> =
            [IndexType::new("Tagged").unwrap(), IndexType::tagged()].into();
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn digest_requests_parse() {
        assert_eq!(
            parse("Mime-Version: 1.0\r\nContent-Type: application/index.cmd.noop\r\n\r\n").unwrap(),
            Request::Noop
        );
        let poll = parse("Content-Type: application/index.cmd.poll; type=\"tagged\"; dsi=\"1.3.6.1.4.1.99999.7\"; base-uri=\"x:y\"\r\n\r\n").unwrap();
        assert_eq!(
            poll,
            Request::Poll {
                index_type: IndexType::tagged(),
                dsi: dsi(),
                params: vec![("base-uri".into(), "x:y".into())],
                body: Bytes::new(),
            }
        );
        let e =
            parse("Content-Type: application/index.cmd.poll; type=\"tagged\"\r\n\r\n").unwrap_err();
        assert_eq!(
            (e.code(), e),
            (
                ResponseCode::MissingAttributes,
                MessageError::MissingParameter { name: "dsi" }
            )
        );
        let e = parse("Content-Type: application/index.cmd.reindex\r\n\r\n").unwrap_err();
        assert_eq!(e.code(), ResponseCode::UnknownRequest);
        let e = parse("Content-Type: application/index.cmd.poll; type=tagged; dsi=1.02\r\n\r\n")
            .unwrap_err();
        assert_eq!(e.code(), ResponseCode::MissingAttributes);
        let e = parse("Mime-Version: 1.0\r\n\r\n").unwrap_err();
        assert_eq!(e, MessageError::MissingContentType);
        assert_eq!(e.code(), ResponseCode::UnknownRequest);
        let e = parse("Content-Type: text/plain\r\n\r\n").unwrap_err();
        assert_eq!(e.code(), ResponseCode::UnknownRequest);
        let e = parse("no colon here\r\n\r\n").unwrap_err();
        assert_eq!(e.code(), ResponseCode::BadMimeFormat);
        let e = parse("Content-Type: application/index.cmd.poll; type=\"tagged; dsi=1\r\n\r\n")
            .unwrap_err();
        assert_eq!(e.code(), ResponseCode::BadMimeFormat);
        let e =
            parse("Content-Type: application/index.obj.tagged; dsi=1.2\r\n\r\nx\r\n").unwrap_err();
        assert_eq!(e, MessageError::MissingParameter { name: "base-uri" });
        let e = parse("Content-Type: application/index.obj.tagged; dsi=1.2; base-uri=a:b\r\nContent-Transfer-Encoding: x-gzip\r\n\r\nx\r\n").unwrap_err();
        assert_eq!(e.code(), ResponseCode::BadMimeFormat);
    }

    #[test]
    fn datachanged_and_push_from_rfc_example_shape() {
        let dc = parse("Mime-Version: 1.0\r\nContent-type: application/index.cmd.datachanged; type=x-tagged-index-1; dsi= \"1.3.5.7.9\"\r\n\r\nhost-name: a\r\n").unwrap();
        let Request::DataChanged {
            index_type,
            dsi,
            body,
        } = dc
        else {
            panic!("not datachanged")
        };
        assert_eq!(
            (index_type, dsi.as_str(), &body[..]),
            (IndexType::tagged(), "1.3.5.7.9", &b"host-name: a\r\n"[..])
        );
        let obj = parse("Content-Type: application/index.obj.tagged; dsi=\"1.3.5.7.9\";\r\n  base-uri=\"ldap://x/ whoispp://y:63/\"\r\n\r\nversion: x-tagged-index-1\r\n").unwrap();
        let Request::IndexObject(obj) = obj else {
            panic!("not an object")
        };
        assert_eq!(obj.base_uris, ["ldap://x/", "whoispp://y:63/"]);
        assert_eq!(&obj.payload[..], b"version: x-tagged-index-1\r\n");
        let vnd =
            parse("Content-Type: application/index.vnd.acme.stats; a=b\r\n\r\nq\r\n").unwrap();
        assert_eq!(
            vnd,
            Request::Vendor {
                subtype: "acme.stats".into(),
                params: vec![("a".into(), "b".into())],
                body: Bytes::from_static(b"q\r\n")
            }
        );
    }

    fn object(payload: Vec<u8>) -> IndexObject {
        IndexObject {
            index_type: IndexType::harvest_soif(),
            dsi: dsi(),
            base_uris: vec!["http://a.example/".into(), "ldap://b.example/o=x".into()],
            dsi_description: Some("Example \"dataset\"".into()),
            payload: Bytes::from(payload),
        }
    }

    #[test]
    fn requests_round_trip() {
        let requests = [
            Request::Noop,
            Request::Poll {
                index_type: IndexType::tagged(),
                dsi: dsi(),
                params: vec![("x-a".into(), "b c".into())],
                body: Bytes::from_static(b"updatetype: total\r\n"),
            },
            Request::DataChanged {
                index_type: IndexType::tagged(),
                dsi: dsi(),
                body: Bytes::new(),
            },
            Request::IndexObject(object(b"binary\x00\xff".to_vec())),
            Request::IndexObject(object("utf-8 é\n".as_bytes().to_vec())),
            Request::Vendor {
                subtype: "acme".into(),
                params: vec![],
                body: Bytes::from_static(b"no newline"),
            },
        ];
        for r in requests {
            let mime = r.to_mime().unwrap();
            assert_eq!(
                Request::from_mime(&mime, &limits()).unwrap(),
                r,
                "{}",
                String::from_utf8_lossy(&mime)
            );
        }
        assert_eq!(
            &Request::Noop.to_mime().unwrap()[..],
            b"Mime-Version: 1.0\r\nContent-Type: application/index.cmd.noop\r\n\r\n"
        );
    }

    #[test]
    fn index_response_round_trip() {
        let r = IndexResponse {
            code: ResponseCode::MissingAttributes,
            comment: "missing ü".into(),
            payload: Bytes::from_static(b"Missing-Attribute: dsi\r\n"),
        };
        let mime = r.to_mime().unwrap();
        assert!(String::from_utf8_lossy(&mime).contains("charset=\"UTF-8\""));
        let e = Entity::parse(&mime, &limits()).unwrap();
        assert_eq!(IndexResponse::from_entity(&e).unwrap(), r);
    }

    #[test]
    fn result_forms() {
        // (a) multipart with an index.response part (ROADS), bare LF, unquoted parameters.
        let roads = "Mime-Version: 1.0\nContent-Type: multipart/mixed; boundary=zz\n\n--zz\nContent-Type: application/index.response; code=201\n\nok\n--zz\nContent-type: application/index.obj.tagged; type=x-tagged-index-1; dsi=1.2; base-uri=\"ldap://h/\"\n\nversion: x-tagged-index-1\n--zz\nContent-Type: text/plain\n\nignored\n--zz--\n";
        let r = PollResult::from_mime(&Bytes::from(roads), &limits()).unwrap();
        assert_eq!(r.objects.len(), 1);
        assert_eq!(&r.objects[0].payload[..], b"version: x-tagged-index-1");
        // (b) a single bare object (RFC 2653 grammar).
        let bare = "Content-Type: application/index.obj.tagged; dsi=1.2; base-uri=\"ldap://h/\"\r\n\r\nx\r\n";
        assert_eq!(
            PollResult::from_mime(&Bytes::from(bare), &limits())
                .unwrap()
                .objects
                .len(),
            1
        );
        // A bad part names its index and keeps its code.
        let bad = "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: application/index.obj.tagged; dsi=1.2\r\n\r\nx\r\n--b--\r\n";
        let e = PollResult::from_mime(&Bytes::from(bad), &limits()).unwrap_err();
        assert!(matches!(e, MessageError::BadPart { index: 0, .. }));
        assert_eq!(e.code(), ResponseCode::MissingAttributes);
        let e = PollResult::from_mime(&Bytes::from("Content-Type: text/plain\r\n\r\n"), &limits())
            .unwrap_err();
        assert!(matches!(e, MessageError::NotAResult { .. }));
        let e = PollResult::from_mime(
            &Bytes::from("Content-Type: multipart/mixed\r\n\r\n"),
            &limits(),
        )
        .unwrap_err();
        assert_eq!(e, MessageError::Mime(MimeError::MissingBoundary));
    }

    #[test]
    fn empty_result_round_trips() {
        let mime = PollResult::default().to_mime().unwrap();
        assert_eq!(
            PollResult::from_mime(&mime, &limits()).unwrap(),
            PollResult::default()
        );
    }

    proptest! {
        #[test]
        fn poll_result_round_trip(payloads in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..100),
                "([.a-z -]{0,20}\r?\n){0,5}".prop_map(String::into_bytes),
                Just(b"--cipv3-part\r\n".to_vec()),
            ], 0..5)) {
            let result = PollResult { objects: payloads.into_iter().map(object).collect() };
            let mime = result.to_mime().unwrap();
            prop_assert_eq!(PollResult::from_mime(&mime, &limits()).unwrap(), result);
        }
    }
}
