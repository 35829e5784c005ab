//! The Hina-Di reader: a line-fed parser and a streaming driver over `BufRead`.

use std::io::{self, BufRead};

use encoding_rs::Encoding;

use super::field::{Block, Field, KnownField};
use super::{DEFAULT_CHARSET, VERSION, charset, charset_param, date};

/// Bounds on what the reader accepts; a file past them gets errors, never unbounded memory.
#[derive(Debug, Clone, Copy)]
pub struct HinaLimits {
    /// Longest line in bytes; a longer one discards its block.
    pub max_line_bytes: usize,
    /// Most fields in a block; more discard it.
    pub max_fields: usize,
    /// Most lines in the header block; more end the read.
    pub max_header_lines: usize,
    /// The charset of files whose header declares none (the spec says EUC-JP).
    pub default_charset: &'static Encoding,
}

impl Default for HinaLimits {
    fn default() -> Self {
        Self {
            max_line_bytes: 64 << 10,
            max_fields: 256,
            max_header_lines: 64,
            default_charset: DEFAULT_CHARSET,
        }
    }
}

/// How bad a [`Diagnostic`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The file departs from the spec in a way the reader works around without losing data.
    Warning,
    /// The file breaks a MUST of the spec; something (a line, a block) was not read.
    Error,
}

/// A problem the reader found and read past.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DiagnosticKind {
    /// The first line is not `HINA/...`, but the file reads as Hina-Di.
    #[error("the first line must be {VERSION}; found {found:?}")]
    MissingHinaLine {
        /// The first line (shortened).
        found: String,
    },
    /// A `HINA/` line of another version.
    #[error("version {found:?} is not {VERSION}; read as {VERSION}")]
    OtherVersion {
        /// The version line.
        found: String,
    },
    /// The header has no `User-Agent`.
    #[error("the header block has no User-Agent field (required)")]
    MissingUserAgent,
    /// An entity field in the header block.
    #[error("{name} is not a header field; ignored in the header")]
    NotAHeaderField {
        /// Its name.
        name: String,
    },
    /// The header ran into an entity block without a blank line.
    #[error("no blank line after the header block; URL starts the first entity block")]
    NoBlankAfterHeader,
    /// A line holds bytes that are not in the file's charset.
    #[error("bytes that are not valid {charset}; {consequence}")]
    Undecodable {
        /// The charset.
        charset: &'static str,
        /// What was dropped (`block discarded`, `line ignored`).
        consequence: &'static str,
    },
    /// A line longer than the limit.
    #[error("line longer than {limit} bytes; block discarded")]
    LineTooLong {
        /// The limit.
        limit: usize,
    },
    /// A line that is not `Name: value`.
    #[error("expected `Name: value`, found {found:?}; line ignored")]
    Malformed {
        /// The line (shortened).
        found: String,
    },
    /// A field name outside `WORD *("-" WORD)`.
    #[error("{name:?} is not a field name (letters, digits and inner hyphens); line ignored")]
    BadFieldName {
        /// The name.
        name: String,
    },
    /// A field name seen twice in a block (the spec: such a block MUST be discarded).
    #[error("field {name} repeats the one on line {first}; block discarded")]
    DuplicateField {
        /// The name.
        name: String,
        /// Where it first appeared.
        first: u64,
    },
    /// A header field seen twice; the first is kept.
    #[error("header field {name} repeats the one on line {first}; the first is kept")]
    DuplicateHeaderField {
        /// The name.
        name: String,
        /// Where it first appeared.
        first: u64,
    },
    /// An entity block with neither `URL` nor `Virtual`.
    #[error("entity block has no URL field; block discarded")]
    NoUrl,
    /// A block with more fields than the limit.
    #[error("more than {limit} fields; block discarded")]
    TooManyFields {
        /// The limit.
        limit: usize,
    },
    /// A date field that is not a date.
    #[error("{field}: {value:?} is not an RFC 1123 date; kept as text")]
    BadDate {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
    },
    /// A date field read as a date, but not in the spec's RFC 1123 form
    /// (`Wed, 05 Dec 2001 21:30:00 GMT`): other writers may read it otherwise.
    #[error("{field}: {value:?} is not an RFC 1123 date (e.g. {read_as:?}); read as that")]
    NonStandardDate {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
        /// The date it was read as, in the spec's form.
        read_as: String,
    },
    /// `Image-Width`/`Image-Height` not a number.
    #[error("{field}: {value:?} is not a number of pixels; kept as text")]
    BadNumber {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
    },
    /// `HINA-Version` not `HINA/<digits>.<digits>`.
    #[error("HINA-Version: {value:?} is not HINA/<major>.<minor>; kept as text")]
    BadHinaVersion {
        /// Its value.
        value: String,
    },
    /// `Method` not `method-type *("/" method-type) "/" result-code`.
    #[error(
        "Method: {value:?} is not a chain of GET, HEAD, FILE or REMOTE ending in a result \
         code (e.g. \"REMOTE/GET/200\"); kept as text"
    )]
    BadMethod {
        /// Its value.
        value: String,
    },
    /// `URL`, `Virtual` or `Authorized-url` not an absolute URI (RFC 2396).
    #[error("{field}: {value:?} is not an absolute URL (scheme:...); kept as text")]
    BadUrl {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
    },
    /// `Content-Type` not `type/subtype[; parameters]` (RFC 1521).
    #[error("Content-Type: {value:?} is not type/subtype (RFC 1521); kept as text")]
    BadContentType {
        /// Its value.
        value: String,
    },
    /// A file with a header and no entity block.
    #[error("no entity blocks (at least one is required)")]
    NoBlocks,
}

impl DiagnosticKind {
    /// Whether this breaks a MUST (an error) or is worked around (a warning).
    pub fn severity(&self) -> Severity {
        match self {
            Self::OtherVersion { .. }
            | Self::NotAHeaderField { .. }
            | Self::NoBlankAfterHeader
            | Self::BadDate { .. }
            | Self::NonStandardDate { .. }
            | Self::BadNumber { .. }
            | Self::BadHinaVersion { .. }
            | Self::BadMethod { .. }
            | Self::BadUrl { .. }
            | Self::BadContentType { .. } => Severity::Warning,
            _ => Severity::Error,
        }
    }
}

/// A problem at a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub struct Diagnostic {
    /// 1-based line number.
    pub line: u64,
    /// What.
    pub kind: DiagnosticKind,
}

impl Diagnostic {
    /// See [`DiagnosticKind::severity`].
    pub fn severity(&self) -> Severity {
        self.kind.severity()
    }
}

/// A problem that ends the read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HinaError {
    /// The input is not Hina-Di at all.
    #[error("line {line}: not a Hina-Di file: expected {VERSION}, found {found:?}")]
    NotHinaDi {
        /// Where.
        line: u64,
        /// What was there (shortened).
        found: String,
    },
    /// The header names a charset this reader does not know.
    #[error("line {line}: unknown charset {label:?} in the header's Content-Type")]
    UnknownCharset {
        /// Where.
        line: u64,
        /// The label.
        label: String,
    },
    /// The header block is longer than the limit.
    #[error("line {line}: header block longer than {limit} lines")]
    HeaderTooLong {
        /// Where.
        line: u64,
        /// The limit.
        limit: usize,
    },
    /// Reading the input failed.
    #[error("line {line}: read failed: {source}")]
    Io {
        /// The line being read.
        line: u64,
        /// The cause.
        source: io::Error,
    },
}

impl HinaError {
    /// The line the read stopped at.
    pub fn line(&self) -> u64 {
        match self {
            Self::NotHinaDi { line, .. }
            | Self::UnknownCharset { line, .. }
            | Self::HeaderTooLong { line, .. }
            | Self::Io { line, .. } => *line,
        }
    }
}

/// The header block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The version line as written (`HINA/2.2beta`); empty when the file has none.
    pub version: String,
    /// The header's fields.
    pub fields: Vec<Field>,
    /// The charset the file is read in.
    pub charset: &'static Encoding,
}

impl Header {
    /// The value of field `k`, if present.
    pub fn get(&self, k: KnownField) -> Option<&str> {
        self.fields
            .iter()
            .find(|f| f.known() == Some(k))
            .map(|f| f.value.as_str())
    }
}

/// What a line completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The header block (always first).
    Header(Header),
    /// An entity block that passed.
    Block(Block),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Header,
    Body,
    Done,
}

#[derive(Debug, Default)]
struct Pending {
    start: u64,
    fields: Vec<Field>,
    /// (key, line) of each field, for duplicate reports.
    seen: Vec<(String, u64)>,
    discard: bool,
}

/// The Hina-Di grammar, fed one line at a time (without its line end; a trailing CR is
/// dropped). Problems it reads past are kept as [`Diagnostic`]s.
#[derive(Debug)]
pub struct HinaParser {
    limits: HinaLimits,
    line: u64,
    state: State,
    version: String,
    header_lines: Vec<(u64, Vec<u8>)>,
    encoding: &'static Encoding,
    pending: Pending,
    blocks: u64,
    diagnostics: Vec<Diagnostic>,
}

fn shorten(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(&bytes[..bytes.len().min(60)]).into_owned();
    if bytes.len() > 60 { s + "..." } else { s }
}

/// Splits `Name: value`; the name must be `WORD *("-" WORD)` (underscores tolerated).
fn split_field(line: &str) -> Result<(&str, &str), DiagnosticKind> {
    let Some((name, value)) = line.split_once(':') else {
        return Err(DiagnosticKind::Malformed {
            found: shorten(line.as_bytes()),
        });
    };
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !ok {
        return Err(DiagnosticKind::BadFieldName {
            name: shorten(name.as_bytes()),
        });
    }
    Ok((name, value.trim_start_matches([' ', '\t'])))
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|&b| b == b' ' || b == b'\t')
}

impl HinaParser {
    /// A parser at the start of a file.
    pub fn new(limits: HinaLimits) -> Self {
        Self {
            limits,
            line: 0,
            state: State::Start,
            version: String::new(),
            header_lines: Vec::new(),
            encoding: limits.default_charset,
            pending: Pending::default(),
            blocks: 0,
            diagnostics: Vec::new(),
        }
    }

    /// The number of the last line fed.
    pub fn line_number(&self) -> u64 {
        self.line
    }

    /// Entity blocks delivered so far.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Takes the diagnostics gathered since the last call.
    pub fn take_diagnostics(&mut self) -> Vec<Diagnostic> {
        std::mem::take(&mut self.diagnostics)
    }

    fn diag(&mut self, line: u64, kind: DiagnosticKind) {
        self.diagnostics.push(Diagnostic { line, kind });
    }

    /// Counts a line the driver skipped for being longer than the limit: its block is
    /// discarded (a header line is only ignored).
    pub fn overlong_line(&mut self) {
        self.line += 1;
        let limit = self.limits.max_line_bytes;
        self.diag(self.line, DiagnosticKind::LineTooLong { limit });
        if self.state == State::Body {
            if self.pending.fields.is_empty() && !self.pending.discard {
                self.pending.start = self.line;
            }
            self.pending.discard = true;
        }
    }

    /// Feeds the next line.
    ///
    /// # Errors
    /// When the input is not Hina-Di, names an unknown charset, or has an overlong header.
    pub fn line(&mut self, raw: &[u8]) -> Result<Option<Event>, HinaError> {
        self.line += 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        match self.state {
            State::Start => {
                let raw = if self.line == 1 {
                    raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw)
                } else {
                    raw
                };
                if is_blank(raw) {
                    return Ok(None);
                }
                if raw.starts_with(b"HINA/") {
                    let v = String::from_utf8_lossy(raw).trim_end().to_owned();
                    if v != VERSION {
                        self.diag(self.line, DiagnosticKind::OtherVersion { found: v.clone() });
                    }
                    self.version = v;
                    self.state = State::Header;
                    return Ok(None);
                }
                // A tolerant start: a file that opens with a field is read as Hina-Di
                // missing its version line.
                let text = String::from_utf8_lossy(raw);
                if split_field(&text).is_err() {
                    return Err(HinaError::NotHinaDi {
                        line: self.line,
                        found: shorten(raw),
                    });
                }
                self.diag(
                    self.line,
                    DiagnosticKind::MissingHinaLine {
                        found: shorten(raw),
                    },
                );
                self.state = State::Header;
                self.line -= 1;
                self.line(raw)
            }
            State::Header => {
                if is_blank(raw) {
                    let h = self.finish_header()?;
                    return Ok(Some(Event::Header(h)));
                }
                let starts_entity = raw.len() >= 4
                    && raw[..3].eq_ignore_ascii_case(b"URL")
                    && matches!(raw[3], b':');
                if starts_entity {
                    self.diag(self.line, DiagnosticKind::NoBlankAfterHeader);
                    let h = self.finish_header()?;
                    self.line -= 1;
                    self.line(raw)?;
                    return Ok(Some(Event::Header(h)));
                }
                if self.header_lines.len() >= self.limits.max_header_lines {
                    return Err(HinaError::HeaderTooLong {
                        line: self.line,
                        limit: self.limits.max_header_lines,
                    });
                }
                self.header_lines.push((self.line, raw.to_vec()));
                Ok(None)
            }
            State::Body => {
                if is_blank(raw) {
                    return Ok(self.finish_block().map(Event::Block));
                }
                self.body_line(raw);
                Ok(None)
            }
            State::Done => Ok(None),
        }
    }

    /// Ends the input.
    ///
    /// # Errors
    /// As [`HinaParser::line`]; an empty input is not Hina-Di.
    pub fn finish(&mut self) -> Result<Option<Event>, HinaError> {
        let event = match self.state {
            State::Start => {
                return Err(HinaError::NotHinaDi {
                    line: self.line,
                    found: String::new(),
                });
            }
            State::Header => Some(Event::Header(self.finish_header()?)),
            State::Body => self.finish_block().map(Event::Block),
            State::Done => return Ok(None),
        };
        self.state = State::Done;
        if self.blocks == 0 {
            self.diag(self.line, DiagnosticKind::NoBlocks);
        }
        Ok(event)
    }

    fn finish_header(&mut self) -> Result<Header, HinaError> {
        self.state = State::Body;
        let lines = std::mem::take(&mut self.header_lines);
        // The charset first: it decides how every other line decodes.
        for (line, raw) in &lines {
            let text = String::from_utf8_lossy(raw);
            if let Ok((name, value)) = split_field(&text)
                && KnownField::from_name(name) == Some(KnownField::ContentType)
                && let Some(label) = charset_param(value)
            {
                self.encoding = charset(label).ok_or_else(|| HinaError::UnknownCharset {
                    line: *line,
                    label: label.to_owned(),
                })?;
            }
        }
        let mut fields: Vec<Field> = Vec::new();
        let mut seen: Vec<(String, u64)> = Vec::new();
        for (line, raw) in lines {
            let Some(text) = self.decode(&raw) else {
                let charset = self.encoding.name();
                self.diag(
                    line,
                    DiagnosticKind::Undecodable {
                        charset,
                        consequence: "line ignored",
                    },
                );
                continue;
            };
            match split_field(&text) {
                Err(kind) => self.diag(line, kind),
                Ok((name, value)) => {
                    let field = Field::new(name, value);
                    let key = field.key();
                    if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
                        let first = *first;
                        self.diag(
                            line,
                            DiagnosticKind::DuplicateHeaderField {
                                name: name.to_owned(),
                                first,
                            },
                        );
                        continue;
                    }
                    match field.known() {
                        Some(KnownField::UserAgent | KnownField::ContentType) | None => {}
                        Some(KnownField::Date) => self.check_value(line, &field),
                        Some(_) => self.diag(
                            line,
                            DiagnosticKind::NotAHeaderField {
                                name: name.to_owned(),
                            },
                        ),
                    }
                    seen.push((key, line));
                    fields.push(field);
                }
            }
        }
        let header = Header {
            version: std::mem::take(&mut self.version),
            fields,
            charset: self.encoding,
        };
        if header.get(KnownField::UserAgent).is_none() {
            self.diag(1, DiagnosticKind::MissingUserAgent);
        }
        Ok(header)
    }

    fn decode(&self, raw: &[u8]) -> Option<String> {
        // A fresh decoder per line: lines of ISO-2022-JP start in ASCII (RFC 1468), and an
        // incomplete character at a line end is an error rather than spilling over.
        self.encoding
            .decode_without_bom_handling_and_without_replacement(raw)
            .map(|c| c.into_owned())
    }

    fn body_line(&mut self, raw: &[u8]) {
        let line = self.line;
        if self.pending.fields.is_empty() && !self.pending.discard {
            self.pending.start = line;
        }
        if self.pending.discard {
            return;
        }
        let Some(text) = self.decode(raw) else {
            let charset = self.encoding.name();
            self.diag(
                line,
                DiagnosticKind::Undecodable {
                    charset,
                    consequence: "block discarded",
                },
            );
            self.pending.discard = true;
            return;
        };
        let (name, value) = match split_field(&text) {
            Ok(nv) => nv,
            Err(kind) => {
                self.diag(line, kind);
                return;
            }
        };
        let field = Field::new(name, value);
        let key = field.key();
        if let Some((_, first)) = self.pending.seen.iter().find(|(k, _)| *k == key) {
            let first = *first;
            self.diag(
                line,
                DiagnosticKind::DuplicateField {
                    name: name.to_owned(),
                    first,
                },
            );
            self.pending.discard = true;
            return;
        }
        if self.pending.fields.len() >= self.limits.max_fields {
            let limit = self.limits.max_fields;
            self.diag(line, DiagnosticKind::TooManyFields { limit });
            self.pending.discard = true;
            return;
        }
        self.check_value(line, &field);
        self.pending.seen.push((key, line));
        self.pending.fields.push(field);
    }

    /// Per-field checks that only warn: dates, pixel counts, `HINA-Version`, `Method`, URLs
    /// and `Content-Type`.
    fn check_value(&mut self, line: u64, f: &Field) {
        let Some(k) = f.known() else { return };
        let value = f.value.trim();
        if value.is_empty() {
            return;
        }
        let kind = if k.is_date() {
            match date::parse(value) {
                None => Some(DiagnosticKind::BadDate {
                    field: k.name(),
                    value: value.to_owned(),
                }),
                // The spec's form is RFC 1123's exactly: what reads as a date but does not
                // write back the same was another form.
                Some(t) if date::format(t) != value => Some(DiagnosticKind::NonStandardDate {
                    field: k.name(),
                    value: value.to_owned(),
                    read_as: date::format(t),
                }),
                Some(_) => None,
            }
        } else if matches!(k, KnownField::ImageWidth | KnownField::ImageHeight) {
            value
                .parse::<u32>()
                .is_err()
                .then(|| DiagnosticKind::BadNumber {
                    field: k.name(),
                    value: value.to_owned(),
                })
        } else if k == KnownField::HinaVersion {
            let ok = value.strip_prefix("HINA/").is_some_and(|v| {
                v.split_once('.').is_some_and(|(a, b)| {
                    !a.is_empty()
                        && a.bytes().all(|c| c.is_ascii_digit())
                        && !b.is_empty()
                        && b.bytes().all(|c| c.is_ascii_alphanumeric())
                })
            });
            (!ok).then(|| DiagnosticKind::BadHinaVersion {
                value: value.to_owned(),
            })
        } else if k == KnownField::Method {
            (!method_ok(value)).then(|| DiagnosticKind::BadMethod {
                value: value.to_owned(),
            })
        } else if matches!(
            k,
            KnownField::Url | KnownField::Virtual | KnownField::AuthorizedUrl
        ) {
            (!absolute_uri(value)).then(|| DiagnosticKind::BadUrl {
                field: k.name(),
                value: value.to_owned(),
            })
        } else if k == KnownField::ContentType {
            (!content_type_ok(value)).then(|| DiagnosticKind::BadContentType {
                value: value.to_owned(),
            })
        } else {
            None
        };
        if let Some(kind) = kind {
            self.diag(line, kind);
        }
    }

    fn finish_block(&mut self) -> Option<Block> {
        let p = std::mem::take(&mut self.pending);
        if p.discard || p.fields.is_empty() {
            return None;
        }
        let block = Block {
            line: p.start,
            fields: p.fields,
        };
        if block.url().is_none() {
            self.diag(p.start, DiagnosticKind::NoUrl);
            return None;
        }
        self.blocks += 1;
        Some(block)
    }
}

/// Reads a Hina-Di file from any [`BufRead`], block by block, in bounded memory.
#[derive(Debug)]
pub struct HinaReader<R> {
    input: R,
    parser: HinaParser,
    header: Header,
    buf: Vec<u8>,
    bytes: u64,
    done: bool,
}

impl<R: BufRead> HinaReader<R> {
    /// Reads the header block.
    ///
    /// # Errors
    /// When the input is not Hina-Di, cannot be read, or names an unknown charset.
    pub fn new(input: R, limits: HinaLimits) -> Result<Self, HinaError> {
        let mut r = Self {
            input,
            parser: HinaParser::new(limits),
            header: Header {
                version: String::new(),
                fields: Vec::new(),
                charset: limits.default_charset,
            },
            buf: Vec::new(),
            bytes: 0,
            done: false,
        };
        loop {
            let event = if r.read_line()? {
                r.parser.line(&r.buf)?
            } else {
                r.done = true;
                r.parser.finish()?
            };
            if let Some(Event::Header(h)) = event {
                r.header = h;
                return Ok(r);
            }
        }
    }

    /// The header block.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Bytes consumed so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// Takes the diagnostics gathered since the last call.
    pub fn take_diagnostics(&mut self) -> Vec<Diagnostic> {
        self.parser.take_diagnostics()
    }

    /// The next entity block, or `None` at the end.
    ///
    /// # Errors
    /// When reading fails.
    pub fn next_block(&mut self) -> Result<Option<Block>, HinaError> {
        while !self.done {
            let event = if self.read_line()? {
                self.parser.line(&self.buf)?
            } else {
                self.done = true;
                self.parser.finish()?
            };
            if let Some(Event::Block(b)) = event {
                return Ok(Some(b));
            }
        }
        Ok(None)
    }

    /// Reads one line into `buf` (without its LF). A line past the limit is skipped (the
    /// parser is told, and discards its block) and the next one read. False at the end.
    fn read_line(&mut self) -> Result<bool, HinaError> {
        let limit = self.parser.limits.max_line_bytes;
        loop {
            self.buf.clear();
            let (mut any, mut overflow) = (false, false);
            loop {
                let avail = match self.input.fill_buf() {
                    Ok(b) => b,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(source) => {
                        return Err(HinaError::Io {
                            line: self.parser.line_number() + 1,
                            source,
                        });
                    }
                };
                if avail.is_empty() {
                    break;
                }
                any = true;
                let (content, take, done) = match memchr::memchr(b'\n', avail) {
                    Some(i) => (&avail[..i], i + 1, true),
                    None => (avail, avail.len(), false),
                };
                if content.len() > limit.saturating_sub(self.buf.len()) {
                    overflow = true;
                }
                if !overflow {
                    self.buf.extend_from_slice(content);
                }
                self.input.consume(take);
                self.bytes += take as u64;
                if done {
                    break;
                }
            }
            if !overflow {
                return Ok(any);
            }
            self.parser.overlong_line();
        }
    }
}

/// A whole file, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The header block.
    pub header: Header,
    /// The entity blocks that passed.
    pub blocks: Vec<Block>,
    /// What was read past.
    pub diagnostics: Vec<Diagnostic>,
}

/// Reads all of `input`.
///
/// # Errors
/// As [`HinaReader::new`].
pub fn parse_bytes(input: &[u8], limits: HinaLimits) -> Result<Parsed, HinaError> {
    let mut r = HinaReader::new(input, limits)?;
    let mut blocks = Vec::new();
    while let Some(b) = r.next_block()? {
        blocks.push(b);
    }
    Ok(Parsed {
        header: r.header.clone(),
        blocks,
        diagnostics: r.take_diagnostics(),
    })
}

/// `method-type *("/" method-type) "/" result-code`, method types case-insensitive. The
/// spec leaves `result-code` undefined (its grammar points at an unnamed part of RFC 2396);
/// we take any non-empty word without blanks that is not itself a method type.
fn method_ok(v: &str) -> bool {
    let is_type = |p: &str| {
        ["GET", "HEAD", "FILE", "REMOTE"]
            .iter()
            .any(|t| t.eq_ignore_ascii_case(p))
    };
    let parts: Vec<&str> = v.split('/').collect();
    let Some((code, types)) = parts.split_last() else {
        return false;
    };
    !types.is_empty()
        && types.iter().all(|p| is_type(p))
        && !code.is_empty()
        && !is_type(code)
        && !code.chars().any(char::is_whitespace)
}

/// An absolute URI: `scheme ":" rest`, the scheme `ALPHA *( ALPHA / DIGIT / "+" / "-" /
/// "." )` (RFC 2396 §3.1), no blanks.
fn absolute_uri(v: &str) -> bool {
    let Some((scheme, rest)) = v.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && !rest.is_empty()
        && !v.chars().any(char::is_whitespace)
}

/// `type "/" subtype *(";" parameter)` with RFC 1521 tokens in type and subtype.
fn content_type_ok(v: &str) -> bool {
    let media = v.split(';').next().unwrap_or("").trim();
    let token = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?=".contains(&b))
    };
    media
        .split_once('/')
        .is_some_and(|(t, s)| token(t) && token(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field the spec names, with Japanese text, in `charset` (LF or CRLF ends).
    fn every_field(charset: &'static Encoding, declared: Option<&str>, crlf: bool) -> Vec<u8> {
        let ct = declared.map_or(String::new(), |c| {
            format!("Content-Type: text/plain; charset={c}\n")
        });
        let text = format!(
            "HINA/2.2beta\nUser-Agent: WDB/2.10 (Antenna; HINA/2.2beta)\n{ct}\
             Date: Sun, 6 Nov 1994 08:49:37 GMT\n\n\
             URL:\t\thttp://example.jp/diary/\n\
             HINA-Version: HINA/2.2\n\
             Vitural: http://example.jp/diary/hina.di\n\
             Content-Type: text/html\n\
             Date: Sun, 06 Nov 1994 08:49:37 GMT\n\
             Title: 山田の日記【毎日更新】\n\
             Author-Name: 山田太郎\n\
             Expires: Sun, 06 Nov 1994 14:49:37 GMT\n\
             Expire: Sun, 06 Nov 1994 14:49:37 GMT\n\
             Last-Modified: Sunday, 06-Nov-94 08:00:00 GMT\n\
             Last-Modified-Detected: Sun Nov  6 08:49:37 1994\n\
             Server: Apache/1.3.20\n\
             Authorized: WDB/2.10\n\
             Authorized-url: http://antenna.example.jp/\n\
             Method: REMOTE/GET/200\n\
             Keyword: 日記: 音楽: カメラ\n\
             Image-Width: 640\n\
             Image-Height: 480\n\
             X-WDB-Title: やまだ\n\
             Content-Length: 1234\n\
             \n\
             URL: http://example.jp/second/\n\
             Title: 二番目\n"
        );
        let text = if crlf {
            text.replace('\n', "\r\n")
        } else {
            text
        };
        let (bytes, _, bad) = charset.encode(&text);
        assert!(!bad);
        bytes.into_owned()
    }

    #[test]
    fn values_the_spec_does_not_allow_are_warned_of_with_their_line() {
        let text = "HINA/2.2beta\nUser-Agent: t\n\n\
                    URL: diary.example.jp/\nMethod: GET\nContent-Type: text\n\n\
                    URL: http://ok.example/\nMethod: remote/Get/200\n\
                    Content-Type: text/html; charset=EUC-JP\nAuthorized-url: http://a.example/\n\n\
                    URL: http://b.example/\nMethod: REMOTE/PUSH/200\nAuthorized-url: a b\n";
        let p = parse_bytes(text.as_bytes(), HinaLimits::default()).unwrap();
        let got: Vec<(u64, String)> = p
            .diagnostics
            .iter()
            .map(|d| (d.line, d.kind.to_string()))
            .collect();
        let lines: Vec<u64> = got.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [4, 5, 6, 14, 15], "{got:?}");
        assert!(
            got[0]
                .1
                .starts_with("URL: \"diary.example.jp/\" is not an absolute URL")
        );
        assert!(got[1].1.starts_with("Method: \"GET\" is not a chain"));
        assert!(got[2].1.starts_with("Content-Type: \"text\""));
        assert!(got[3].1.starts_with("Method: \"REMOTE/PUSH/200\""));
        assert!(got[4].1.starts_with("Authorized-url: \"a b\""));
        assert!(
            p.diagnostics
                .iter()
                .all(|d| d.kind.severity() == Severity::Warning)
        );
        // Every block is kept: these are warnings.
        assert_eq!(p.blocks.len(), 3);
        for ok in ["GET/200", "REMOTE/REMOTE/HEAD/304", "FILE/200"] {
            assert!(method_ok(ok), "{ok}");
        }
        for bad in ["", "200", "GET/", "GET/HEAD", "/200", "GET/2 00"] {
            assert!(!method_ok(bad), "{bad}");
        }
    }

    #[test]
    fn every_field_in_every_charset() {
        for (charset, label, crlf) in [
            (encoding_rs::EUC_JP, Some("EUC-JP"), false),
            (encoding_rs::EUC_JP, None, true),
            (encoding_rs::SHIFT_JIS, Some("Shift_JIS"), true),
            (encoding_rs::SHIFT_JIS, Some("x-sjis"), false),
            (encoding_rs::ISO_2022_JP, Some("ISO-2022-JP"), true),
            (encoding_rs::UTF_8, Some("UTF-8"), false),
        ] {
            let bytes = every_field(charset, label, crlf);
            let p = parse_bytes(&bytes, HinaLimits::default()).unwrap();
            // The file uses the other HTTP date forms on purpose: each is read, and said
            // not to be the spec's RFC 1123 form.
            let odd: Vec<&str> = p
                .diagnostics
                .iter()
                .map(|d| match &d.kind {
                    DiagnosticKind::NonStandardDate { field, .. } => *field,
                    other => panic!("{label:?}: unexpected {other:?}"),
                })
                .collect();
            assert_eq!(
                odd,
                ["Date", "Last-Modified", "Last-Modified-Detected"],
                "{label:?}"
            );
            assert_eq!(p.header.charset, charset, "{label:?}");
            assert_eq!(p.header.version, "HINA/2.2beta");
            assert_eq!(
                p.header.get(KnownField::UserAgent),
                Some("WDB/2.10 (Antenna; HINA/2.2beta)")
            );
            assert_eq!(p.blocks.len(), 2, "{label:?}");
            let b = &p.blocks[0];
            assert_eq!(b.line, if label.is_some() { 6 } else { 5 });
            assert_eq!(b.fields.len(), 20);
            assert_eq!(b.url(), Some("http://example.jp/diary/"));
            assert_eq!(b.get(KnownField::Title), Some("山田の日記【毎日更新】"));
            assert_eq!(b.get(KnownField::AuthorName), Some("山田太郎"));
            assert_eq!(b.keywords(), vec!["日記", "音楽", "カメラ"]);
            assert_eq!(
                b.get(KnownField::Virtual),
                Some("http://example.jp/diary/hina.di")
            );
            assert_eq!(b.fields[2].name, "Vitural", "the name as written is kept");
            assert_eq!(b.get(KnownField::Method), Some("REMOTE/GET/200"));
            assert_eq!(b.get(KnownField::ImageHeight), Some("480"));
            let x = b.fields.iter().find(|f| f.is_experimental()).unwrap();
            assert_eq!(
                (x.name.as_str(), x.value.as_str()),
                ("X-WDB-Title", "やまだ")
            );
            assert_eq!(p.blocks[1].get(KnownField::Title), Some("二番目"));
        }
    }

    fn parse(text: &str) -> Parsed {
        parse_bytes(text.as_bytes(), utf8()).unwrap()
    }

    fn utf8() -> HinaLimits {
        HinaLimits {
            default_charset: encoding_rs::UTF_8,
            ..HinaLimits::default()
        }
    }

    fn kinds(p: &Parsed) -> Vec<(u64, DiagnosticKind)> {
        p.diagnostics
            .iter()
            .map(|d| (d.line, d.kind.clone()))
            .collect()
    }

    #[test]
    fn duplicate_fields_discard_their_block_only() {
        let p = parse(
            "HINA/2.2beta\nUser-Agent: a\n\nURL: http://a/\nTitle: x\ntitle: y\n\n\
             URL: http://b/\nVirtual: http://b/di\nVitural: http://b/di2\n\nURL: http://c/\n",
        );
        assert_eq!(p.blocks.len(), 1);
        assert_eq!(p.blocks[0].url(), Some("http://c/"));
        assert_eq!(
            kinds(&p),
            vec![
                (
                    6,
                    DiagnosticKind::DuplicateField {
                        name: "title".into(),
                        first: 5
                    }
                ),
                (
                    10,
                    DiagnosticKind::DuplicateField {
                        name: "Vitural".into(),
                        first: 9
                    }
                ),
            ]
        );
        assert!(
            p.diagnostics
                .iter()
                .all(|d| d.severity() == Severity::Error)
        );
    }

    #[test]
    fn missing_version_line_and_user_agent_are_errors_not_losses() {
        let p = parse("User-Agent: a\n\nURL: http://a/\n");
        assert_eq!(p.blocks.len(), 1);
        assert!(matches!(
            kinds(&p)[..],
            [(1, DiagnosticKind::MissingHinaLine { .. })]
        ));
        let p = parse("HINA/2.2beta\nDate: Sun, 06 Nov 1994 08:49:37 GMT\n\nURL: http://a/\n");
        assert_eq!(kinds(&p), vec![(1, DiagnosticKind::MissingUserAgent)]);
        assert_eq!(p.blocks.len(), 1);
        // A file whose header runs straight into the first block.
        let p = parse("HINA/2.1\nUser-Agent: a\nURL: http://a/\nTitle: t\n");
        assert_eq!(p.blocks.len(), 1);
        assert_eq!(p.blocks[0].get(KnownField::Title), Some("t"));
        assert!(matches!(
            kinds(&p)[..],
            [
                (1, DiagnosticKind::OtherVersion { .. }),
                (3, DiagnosticKind::NoBlankAfterHeader)
            ]
        ));
    }

    #[test]
    fn not_hina_di_at_all() {
        for (text, line) in [("<html>\n", 1), ("", 0), ("\n\n", 2)] {
            match parse_bytes(text.as_bytes(), utf8()) {
                Err(HinaError::NotHinaDi { line: l, .. }) => assert_eq!(l, line, "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        let err = parse_bytes(
            b"HINA/2.2beta\nContent-Type: text/plain; charset=klingon\n\nURL: u\n",
            utf8(),
        )
        .unwrap_err();
        assert_eq!(err.line(), 2);
        assert!(err.to_string().contains("klingon"), "{err}");
    }

    #[test]
    fn undecodable_bytes_discard_the_block_with_its_line() {
        let mut bytes = b"HINA/2.2beta\nUser-Agent: a\nContent-Type: text/plain; charset=UTF-8\n\n\
                          URL: http://a/\nTitle: "
            .to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe]);
        bytes.extend_from_slice(b"\n\nURL: http://b/\n");
        let p = parse_bytes(&bytes, HinaLimits::default()).unwrap();
        assert_eq!(p.blocks.len(), 1);
        assert_eq!(p.blocks[0].url(), Some("http://b/"));
        assert_eq!(
            kinds(&p),
            vec![(
                6,
                DiagnosticKind::Undecodable {
                    charset: "UTF-8",
                    consequence: "block discarded"
                }
            )]
        );
        // The same bytes in an EUC-JP file (no charset): EUC-JP is the default.
        let p = parse_bytes(
            b"HINA/2.2beta\nUser-Agent: a\n\nURL: http://u/\nTitle: \xa4\n",
            HinaLimits::default(),
        )
        .unwrap();
        assert!(p.blocks.is_empty());
        assert_eq!(p.diagnostics[0].line, 5);
    }

    #[test]
    fn bad_values_warn_and_keep_the_block() {
        let p = parse(
            "HINA/2.2beta\nUser-Agent: a\n\nURL: http://a/\nLast-Modified: yesterday\n\
             Image-Width: wide\nHINA-Version: 2.2\nMethod: RSS/-101\nTitle:no-space\n",
        );
        assert_eq!(p.blocks.len(), 1);
        assert_eq!(p.blocks[0].get(KnownField::Title), Some("no-space"));
        assert_eq!(p.blocks[0].get(KnownField::LastModified), Some("yesterday"));
        let lines: Vec<u64> = p.diagnostics.iter().map(|d| d.line).collect();
        assert_eq!(lines, vec![5, 6, 7, 8]);
        assert!(
            p.diagnostics
                .iter()
                .all(|d| d.severity() == Severity::Warning)
        );
    }

    #[test]
    fn malformed_lines_and_blocks_without_url() {
        let p = parse(
            "HINA/2.2beta\nUser-Agent: a\n\nTitle: orphan\n\nURL: http://a/\nno colon here\n\
             Bad Name: x\n",
        );
        assert_eq!(p.blocks.len(), 1);
        assert!(matches!(
            kinds(&p)[..],
            [
                (4, DiagnosticKind::NoUrl),
                (7, DiagnosticKind::Malformed { .. }),
                (8, DiagnosticKind::BadFieldName { .. })
            ]
        ));
        let p = parse("HINA/2.2beta\nUser-Agent: a\n\n\n");
        assert_eq!(kinds(&p), vec![(4, DiagnosticKind::NoBlocks)]);
    }

    #[test]
    fn limits_discard_blocks_and_reading_goes_on() {
        let long = "x".repeat(100);
        let text = format!(
            "HINA/2.2beta\nUser-Agent: a\n\nURL: http://a/\nTitle: {long}\n\nURL: http://b/\n\
             A: 1\nB: 2\nC: 3\n\nURL: http://c/\n"
        );
        let limits = HinaLimits {
            max_line_bytes: 50,
            max_fields: 3,
            ..utf8()
        };
        let p = parse_bytes(text.as_bytes(), limits).unwrap();
        let urls: Vec<_> = p.blocks.iter().map(|b| b.url().unwrap()).collect();
        assert_eq!(urls, vec!["http://c/"]);
        assert_eq!(
            kinds(&p),
            vec![
                (5, DiagnosticKind::LineTooLong { limit: 50 }),
                (10, DiagnosticKind::TooManyFields { limit: 3 })
            ]
        );
        let header = format!("HINA/2.2beta\n{}\n", "X-A: 1\n".repeat(70));
        let err = parse_bytes(header.as_bytes(), utf8()).unwrap_err();
        assert!(
            matches!(err, HinaError::HeaderTooLong { line: 66, .. }),
            "{err}"
        );
    }

    #[test]
    fn streams_in_small_reads() {
        let bytes = every_field(encoding_rs::SHIFT_JIS, Some("Shift_JIS"), true);
        let whole = parse_bytes(&bytes, HinaLimits::default()).unwrap();
        let tiny = std::io::BufReader::with_capacity(3, &bytes[..]);
        let mut r = HinaReader::new(tiny, HinaLimits::default()).unwrap();
        let mut blocks = Vec::new();
        while let Some(b) = r.next_block().unwrap() {
            blocks.push(b);
        }
        assert_eq!(blocks, whole.blocks);
        assert_eq!(r.bytes_read(), bytes.len() as u64);
    }

    #[test]
    fn bom_and_blank_runs() {
        let p = parse(
            "\u{feff}HINA/2.2beta\nUser-Agent: a\n\n\n\nURL: http://a/\n\n\n\nURL: http://b/",
        );
        assert!(p.diagnostics.is_empty(), "{:?}", p.diagnostics);
        assert_eq!(p.blocks.len(), 2);
        assert_eq!(p.blocks[1].line, 10);
    }

    proptest::proptest! {
        /// Hina-ish noise: no panic, and small reads agree with a whole read.
        #[test]
        fn noise_never_panics_and_chunking_agrees(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "HINA/2.2beta", "User-Agent: a", "Content-Type: text/plain; charset=",
                "EUC-JP", "ISO-2022-JP", "\x1b$B", "\x1b(B", "URL: ", "http://a/", "Title",
                ":", " ", "\t", "\n", "\r\n", "\n\n", "\u{a4}", "\u{ff}", "日本",
                "Keyword: a: b", "X-Y: z", "Vitural: v",
            ]), 0..40),
            cap in 1usize..8,
        ) {
            let input = pieces.concat().into_bytes();
            let limits = HinaLimits { max_line_bytes: 40, max_fields: 4, ..HinaLimits::default() };
            if let Ok(whole) = parse_bytes(&input, limits) {
                let mut r = HinaReader::new(std::io::BufReader::with_capacity(cap, &input[..]), limits)
                    .unwrap();
                let mut blocks = Vec::new();
                while let Some(b) = r.next_block().unwrap() {
                    blocks.push(b);
                }
                proptest::prop_assert_eq!(blocks, whole.blocks);
                proptest::prop_assert_eq!(r.take_diagnostics(), whole.diagnostics);
            }
        }
    }
}
