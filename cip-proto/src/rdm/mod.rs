//! Resource Description Messages (RDM, Netscape's W3C note): SOIF-encoded requests and
//! responses for resource descriptions (RDs), carried over HTTP as `application/x-rdm`.
//!
//! A message is an `@RDMHEADER` object, then a body that depends on the header's type:
//! an `@RDMQUERY` (scope and view) for requests, a SOIF stream of RDs for `rd-response`, an
//! `@RDMSERVER` ([`ServerDescription`]), an `@SCHEMA` ([`Schema`]), a `@TAXONOMY` with its
//! `@CLASSIFICATION`s ([`Taxonomy`]), or — for `status-response` only — an HTML 2.0
//! document. [`Message::parse`] reads one, [`Message::write`] writes one; the typed
//! objects convert to and from [`SoifObject`]s.
//!
//! Query languages: [`GathererScope`] (`all`, `since DATE`), [`SchemaScope`] (`defined
//! ATTR`) and [`TaxonomyScope`] (`descendant[/N]`, `children`, `anklebiter`).

mod objects;
mod scope;

pub use objects::{Classification, Schema, SchemaEntry, ServerDescription, Taxonomy};
pub use scope::{GathererScope, SchemaScope, TaxonomyScope};

use bytes::Bytes;

use crate::soif::{Limits, SoifError, SoifObject, parse_all};

/// The MIME type of RDM messages.
pub const CONTENT_TYPE: &str = "application/x-rdm";

/// The RDM version this implementation speaks.
pub const VERSION: &str = "1.0";

/// The twelve message types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmType {
    /// Send RDs matching a query.
    RdRequest,
    /// Send RDs deleted, matching a query.
    RdRequestDeleted,
    /// RDs.
    RdResponse,
    /// RDs to delete.
    RdResponseDeleted,
    /// Send the schema.
    SchemaDescriptionRequest,
    /// The schema.
    SchemaDescriptionResponse,
    /// Send the server description.
    ServerDescriptionRequest,
    /// The server description.
    ServerDescriptionResponse,
    /// Send the taxonomy.
    TaxonomyDescriptionRequest,
    /// The taxonomy.
    TaxonomyDescriptionResponse,
    /// Are you there?
    StatusRequest,
    /// Status (an HTML 2.0 document).
    StatusResponse,
}

impl RdmType {
    /// Every type, requests first.
    pub const ALL: [Self; 12] = [
        Self::RdRequest,
        Self::RdRequestDeleted,
        Self::SchemaDescriptionRequest,
        Self::ServerDescriptionRequest,
        Self::TaxonomyDescriptionRequest,
        Self::StatusRequest,
        Self::RdResponse,
        Self::RdResponseDeleted,
        Self::SchemaDescriptionResponse,
        Self::ServerDescriptionResponse,
        Self::TaxonomyDescriptionResponse,
        Self::StatusResponse,
    ];

    /// The wire name (`rd-request`).
    pub fn name(self) -> &'static str {
        match self {
            Self::RdRequest => "rd-request",
            Self::RdRequestDeleted => "rd-request-deleted",
            Self::RdResponse => "rd-response",
            Self::RdResponseDeleted => "rd-response-deleted",
            Self::SchemaDescriptionRequest => "schema-description-request",
            Self::SchemaDescriptionResponse => "schema-description-response",
            Self::ServerDescriptionRequest => "server-description-request",
            Self::ServerDescriptionResponse => "server-description-response",
            Self::TaxonomyDescriptionRequest => "taxonomy-description-request",
            Self::TaxonomyDescriptionResponse => "taxonomy-description-response",
            Self::StatusRequest => "status-request",
            Self::StatusResponse => "status-response",
        }
    }

    /// The type named `s`, ignoring case (`RD-Request`, `rd-request`). The GET form's short
    /// names (`schema-request`, `server-request`, `taxonomy-request`) are accepted too.
    pub fn from_name(s: &str) -> Option<Self> {
        let s = s.trim();
        let short = [
            ("schema-request", Self::SchemaDescriptionRequest),
            ("server-request", Self::ServerDescriptionRequest),
            ("taxonomy-request", Self::TaxonomyDescriptionRequest),
        ];
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .or_else(|| {
                short
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(s))
                    .map(|(_, t)| *t)
            })
    }

    /// The type a server answers this request with (`None` for `status-response`).
    pub fn reply(self) -> Option<Self> {
        Some(match self {
            Self::RdRequest | Self::RdRequestDeleted => Self::RdResponse,
            Self::SchemaDescriptionRequest => Self::SchemaDescriptionResponse,
            Self::ServerDescriptionRequest => Self::ServerDescriptionResponse,
            Self::TaxonomyDescriptionRequest => Self::TaxonomyDescriptionResponse,
            Self::StatusResponse => return None,
            _ => Self::StatusResponse,
        })
    }

    /// True for the `*-request` types (which need a query language, but `status-request`
    /// and `server-description-request`).
    pub fn is_request(self) -> bool {
        self.name().ends_with("request") || self == Self::RdRequestDeleted
    }

    /// True when a request of this type must name a query language.
    pub fn needs_query_language(self) -> bool {
        matches!(
            self,
            Self::RdRequest
                | Self::RdRequestDeleted
                | Self::SchemaDescriptionRequest
                | Self::TaxonomyDescriptionRequest
        )
    }
}

impl std::fmt::Display for RdmType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A catalog service id: `x-catalog://host:port/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Csid {
    /// Host.
    pub host: String,
    /// Port, if given.
    pub port: Option<u16>,
    /// Catalog name (the path without its leading `/`).
    pub name: String,
}

impl Csid {
    /// Parses `x-catalog://host[:port]/name`.
    ///
    /// # Errors
    /// [`RdmError::BadCsid`] otherwise.
    pub fn parse(s: &str) -> Result<Self, RdmError> {
        let bad = || RdmError::BadCsid(s.to_owned());
        let s = s.trim();
        let rest = s
            .get(..12)
            .filter(|p| p.eq_ignore_ascii_case("x-catalog://"))
            .map(|_| &s[12..])
            .ok_or_else(bad)?;
        let (authority, name) = rest.split_once('/').ok_or_else(bad)?;
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !p.is_empty() => (h, Some(p.parse().map_err(|_| bad())?)),
            _ => (authority, None),
        };
        if host.is_empty() || name.is_empty() || name.contains(char::is_whitespace) {
            return Err(bad());
        }
        Ok(Self {
            host: host.to_owned(),
            port,
            name: name.to_owned(),
        })
    }
}

impl std::fmt::Display for Csid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(p) => write!(f, "x-catalog://{}:{p}/{}", self.host, self.name),
            None => write!(f, "x-catalog://{}/{}", self.host, self.name),
        }
    }
}

/// Why a message cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RdmError {
    /// The SOIF does not parse.
    #[error("{0}")]
    Soif(#[from] SoifError),
    /// No `@RDMHEADER` first.
    #[error("an RDM message starts with an @RDMHEADER object")]
    NoHeader,
    /// A required header attribute is missing.
    #[error("@RDMHEADER has no {0}")]
    Missing(&'static str),
    /// An unknown `RDM-Type`.
    #[error("unknown RDM-Type {0:?}")]
    UnknownType(String),
    /// A malformed catalog service id.
    #[error("{0:?} is not a catalog service id (x-catalog://host:port/name)")]
    BadCsid(String),
    /// An object of the body is not what the type calls for.
    #[error("{0}")]
    Body(String),
    /// A scope that does not parse in its query language.
    #[error("bad scope {scope:?}: {reason}")]
    BadScope {
        /// The scope.
        scope: String,
        /// Why.
        reason: String,
    },
}

/// The `@RDMHEADER` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// `RDM-Version` (`1.0`).
    pub version: String,
    /// `RDM-Type`.
    pub rdm_type: RdmType,
    /// `RDM-Query-Language` (`gatherer`), for requests.
    pub query_language: Option<String>,
    /// `Catalog-Service-ID`.
    pub csid: Option<Csid>,
    /// `RDM-Error-Message`.
    pub error_message: Option<String>,
    /// Any other attributes, kept in order (`RDM-Response-Interpret`, ...).
    pub extra: Vec<(String, Bytes)>,
}

impl Header {
    /// A header of `rdm_type`, version 1.0, nothing else.
    pub fn new(rdm_type: RdmType) -> Self {
        Self {
            version: VERSION.to_owned(),
            rdm_type,
            query_language: None,
            csid: None,
            error_message: None,
            extra: Vec::new(),
        }
    }

    /// The header as a SOIF object.
    pub fn to_object(&self) -> SoifObject {
        let mut o = object("RDMHEADER");
        push(&mut o, "RDM-Version", &self.version);
        push(&mut o, "RDM-Type", self.rdm_type.name());
        if let Some(q) = &self.query_language {
            push(&mut o, "RDM-Query-Language", q);
        }
        if let Some(c) = &self.csid {
            push(&mut o, "Catalog-Service-ID", &c.to_string());
        }
        if let Some(e) = &self.error_message {
            push(&mut o, "RDM-Error-Message", e);
        }
        for (n, v) in &self.extra {
            // Invariant: names came from a parsed object or are validated by the caller.
            if let Ok(a) = crate::soif::Attribute::new(n, v.clone()) {
                o.attributes.push(a);
            }
        }
        o
    }

    /// Reads a header object.
    ///
    /// # Errors
    /// When it is not an `@RDMHEADER`, lacks `RDM-Version` or `RDM-Type`, or names an
    /// unknown type or a malformed CSID.
    pub fn from_object(o: &SoifObject) -> Result<Self, RdmError> {
        if !o.template().as_str().eq_ignore_ascii_case("RDMHEADER") {
            return Err(RdmError::NoHeader);
        }
        let mut h = Self::new(RdmType::StatusRequest);
        let (mut version, mut ty) = (None, None);
        for a in &o.attributes {
            let v = text(&a.value);
            match a.name.as_str().to_ascii_lowercase().as_str() {
                "rdm-version" => version = Some(v),
                "rdm-type" => {
                    ty = Some(RdmType::from_name(&v).ok_or(RdmError::UnknownType(v))?);
                }
                "rdm-query-language" => h.query_language = Some(v.trim().to_owned()),
                "catalog-service-id" => h.csid = Some(Csid::parse(&v)?),
                "rdm-error-message" => h.error_message = Some(v),
                _ => h.extra.push((a.name.as_str().to_owned(), a.value.clone())),
            }
        }
        h.version = version.ok_or(RdmError::Missing("RDM-Version"))?;
        h.rdm_type = ty.ok_or(RdmError::Missing("RDM-Type"))?;
        Ok(h)
    }
}

/// Sort direction of a `View-Order` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `+Title` or `Title`.
    Ascending,
    /// `-Score`.
    Descending,
}

/// A view: which attributes, how many hits, in what order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// `View-Attributes`: the attributes to send (`URL` stands for the object's URL, which
    /// is always sent); `None` sends all.
    pub attributes: Option<Vec<String>>,
    /// `View-Hits`: at most this many results.
    pub hits: Option<usize>,
    /// `View-Order`: sort keys.
    pub order: Vec<(String, Direction)>,
}

impl View {
    /// True when the view changes nothing.
    pub fn is_empty(&self) -> bool {
        self.attributes.is_none() && self.hits.is_none() && self.order.is_empty()
    }

    /// Parses `View-Attributes`, `View-Hits` and `View-Order` values (any may be absent).
    ///
    /// # Errors
    /// [`RdmError::Body`] for a `View-Hits` that is not a number.
    pub fn parse(
        attributes: Option<&str>,
        hits: Option<&str>,
        order: Option<&str>,
    ) -> Result<Self, RdmError> {
        let list = |s: &str| -> Vec<String> {
            s.split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let hits = match hits.map(str::trim) {
            None | Some("") => None,
            Some(h) => Some(
                h.parse()
                    .map_err(|_| RdmError::Body(format!("View-Hits {h:?} is not a number")))?,
            ),
        };
        let order = order
            .map(|o| {
                list(o)
                    .into_iter()
                    .map(|k| match k.as_bytes()[0] {
                        b'-' => (k[1..].trim().to_owned(), Direction::Descending),
                        b'+' => (k[1..].trim().to_owned(), Direction::Ascending),
                        _ => (k, Direction::Ascending),
                    })
                    .filter(|(k, _)| !k.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            attributes: attributes.map(list),
            hits,
            order,
        })
    }

    /// Writes the view's attributes into `o`.
    fn write(&self, o: &mut SoifObject) {
        if let Some(a) = &self.attributes {
            push(o, "View-Attributes", &a.join(","));
        }
        if let Some(h) = self.hits {
            push(o, "View-Hits", &h.to_string());
        }
        if !self.order.is_empty() {
            let keys: Vec<String> = self
                .order
                .iter()
                .map(|(k, d)| match d {
                    Direction::Ascending => format!("+{k}"),
                    Direction::Descending => format!("-{k}"),
                })
                .collect();
            push(o, "View-Order", &keys.join(","));
        }
    }

    /// Applies the view to `rds`: order, then hits, then attribute projection. Sorting
    /// compares values as text ignoring ASCII case, missing values last; numbers compare
    /// as numbers when both are.
    pub fn apply(&self, rds: &mut Vec<SoifObject>) {
        if !self.order.is_empty() {
            rds.sort_by(|a, b| {
                for (key, dir) in &self.order {
                    let ord = compare(sort_key(a, key), sort_key(b, key));
                    let ord = if *dir == Direction::Descending {
                        ord.reverse()
                    } else {
                        ord
                    };
                    if ord.is_ne() {
                        return ord;
                    }
                }
                std::cmp::Ordering::Equal
            });
        }
        if let Some(h) = self.hits {
            rds.truncate(h);
        }
        for rd in rds.iter_mut() {
            self.project(rd);
        }
    }

    /// Keeps only the view's attributes of `rd` (all when the view names none).
    pub fn project(&self, rd: &mut SoifObject) {
        if let Some(keep) = &self.attributes {
            rd.attributes.retain(|a| {
                keep.iter()
                    .any(|k| crate::soif::attr::attribute_matches(k, a.name.as_str()))
            });
        }
    }
}

fn sort_key<'a>(o: &'a SoifObject, key: &'a str) -> Option<&'a [u8]> {
    if key.eq_ignore_ascii_case("URL") {
        return Some(o.url());
    }
    o.first(key).map(|v| &v[..])
}

fn compare(a: Option<&[u8]>, b: Option<&[u8]>) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Greater,
        (Some(_), None) => Ordering::Less,
        (Some(a), Some(b)) => {
            let num = |x: &[u8]| std::str::from_utf8(x).ok()?.trim().parse::<f64>().ok();
            if let (Some(x), Some(y)) = (num(a), num(b)) {
                return x.partial_cmp(&y).unwrap_or(Ordering::Equal);
            }
            let fold = |x: &[u8]| x.iter().map(u8::to_ascii_lowercase).collect::<Vec<_>>();
            fold(a).cmp(&fold(b))
        }
    }
}

/// The `@RDMQUERY` object: a scope in the header's query language and a view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// `Scope`.
    pub scope: Option<String>,
    /// The view.
    pub view: View,
}

impl Query {
    /// The query as a SOIF object.
    pub fn to_object(&self) -> SoifObject {
        let mut o = object("RDMQUERY");
        if let Some(s) = &self.scope {
            push(&mut o, "Scope", s);
        }
        self.view.write(&mut o);
        o
    }

    /// Reads an `@RDMQUERY`.
    ///
    /// # Errors
    /// When it is another template or its view does not parse.
    pub fn from_object(o: &SoifObject) -> Result<Self, RdmError> {
        if !o.template().as_str().eq_ignore_ascii_case("RDMQUERY") {
            return Err(RdmError::Body(format!(
                "expected @RDMQUERY, found @{}",
                o.template().as_str()
            )));
        }
        let get = |n: &str| o.first(n).map(|v| text(v));
        Ok(Self {
            scope: get("Scope").map(|s| s.trim().to_owned()),
            view: View::parse(
                get("View-Attributes").as_deref(),
                get("View-Hits").as_deref(),
                get("View-Order").as_deref(),
            )?,
        })
    }
}

/// The body of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Nothing (status and server-description requests).
    Empty,
    /// A request's `@RDMQUERY`.
    Query(Query),
    /// A SOIF stream: RDs, or a schema, server description or taxonomy in object form.
    Objects(Vec<SoifObject>),
    /// A `status-response`'s HTML document.
    Html(String),
}

/// A whole RDM message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The header.
    pub header: Header,
    /// The body.
    pub body: Body,
}

/// Finds the end of the first SOIF object in `bytes` (just past its closing `}` line),
/// using the decoder so that values holding `}` are skipped by their sizes.
fn first_object(bytes: &Bytes, limits: Limits) -> Result<(SoifObject, usize), RdmError> {
    use tokio_util::codec::Decoder;
    let mut dec = crate::soif::SoifDecoder::new(limits);
    let mut buf = bytes::BytesMut::from(&bytes[..]);
    let before = buf.len();
    let obj = dec.decode_eof(&mut buf)?.ok_or(RdmError::NoHeader)?;
    Ok((obj, before - buf.len()))
}

impl Message {
    /// A message.
    pub fn new(header: Header, body: Body) -> Self {
        Self { header, body }
    }

    /// Reads a message: the header object, then a body by the header's type.
    ///
    /// # Errors
    /// [`RdmError`] for bad SOIF, a missing or bad header, or a body of the wrong shape.
    pub fn parse(bytes: impl Into<Bytes>, limits: Limits) -> Result<Self, RdmError> {
        let bytes: Bytes = bytes.into();
        let (head, used) = first_object(&bytes, limits)?;
        let header = Header::from_object(&head)?;
        let rest = bytes.slice(used..);
        if header.rdm_type == RdmType::StatusResponse {
            let html = String::from_utf8_lossy(&rest).trim().to_owned();
            return Ok(Self {
                header,
                body: if html.is_empty() {
                    Body::Empty
                } else {
                    Body::Html(html)
                },
            });
        }
        let objects =
            parse_all(rest, limits).map_err(|e| RdmError::Soif(e.shifted(used as u64)))?;
        let body = if header.rdm_type.is_request() {
            match objects.as_slice() {
                [] => Body::Empty,
                [q] => Body::Query(Query::from_object(q)?),
                _ => {
                    return Err(RdmError::Body(format!(
                        "a {} carries one @RDMQUERY, not {} objects",
                        header.rdm_type,
                        objects.len()
                    )));
                }
            }
        } else if objects.is_empty() {
            Body::Empty
        } else {
            Body::Objects(objects)
        };
        Ok(Self { header, body })
    }

    /// The message in wire form.
    pub fn write(&self) -> Vec<u8> {
        let mut out = self.header.to_object().to_bytes();
        match &self.body {
            Body::Empty => {}
            Body::Query(q) => out.extend_from_slice(&q.to_object().to_bytes()),
            Body::Objects(objs) => {
                for o in objs {
                    out.push(b'\n');
                    out.extend_from_slice(&o.to_bytes());
                }
            }
            Body::Html(h) => {
                out.push(b'\n');
                out.extend_from_slice(h.as_bytes());
                out.push(b'\n');
            }
        }
        out
    }
}

/// The HTML 2.0 status document of a `status-response`.
pub fn status_html(title: &str, message: &str) -> String {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    format!(
        "<!DOCTYPE HTML PUBLIC \"-//IETF//DTD HTML 2.0//EN\">\n<HTML><HEAD><TITLE>{}</TITLE></HEAD>\n\
         <BODY><H1>{}</H1>\n<P>{}</P>\n</BODY></HTML>",
        esc(title),
        esc(title),
        esc(message)
    )
}

pub(crate) fn text(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

#[allow(
    clippy::expect_used,
    reason = "the templates used here are valid identifiers and \"-\" a valid URL"
)]
pub(crate) fn object(template: &str) -> SoifObject {
    SoifObject::new(template, "-").expect("a valid template")
}

#[allow(
    clippy::expect_used,
    reason = "the attribute names used here are fixed identifiers"
)]
pub(crate) fn push(o: &mut SoifObject, name: &str, value: &str) {
    o.push(name, value.as_bytes().to_vec())
        .expect("a valid attribute name");
}

#[cfg(test)]
mod tests;
