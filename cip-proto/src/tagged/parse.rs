//! The parser: RFC 2654 §4.3's grammar, read line by line with the tolerance of digest A17.

use std::collections::BTreeMap;

use super::info::{
    HeaderField, IndexInfo, Schema, TokenType, is_attribute_name, is_value, key, shorten,
};
use super::tags::{Ranges, TagListError, TagSet};
use super::{Block, Body, EntryError, IncrementalMode, TaggedIndex, VERSION};

/// Bounds on what [`parse_with_limits`] accepts. The RFC sets none (digest A19); every one
/// is checked before the memory it protects is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaggedLimits {
    /// Longest line in bytes, without its line ending.
    pub max_line_length: usize,
    /// Most index lines (first and continuation lines, every block and io-part together).
    pub max_entries: usize,
    /// Most tags and ranges written for one value: on one line, and over all the lines that
    /// repeat it within an Index-Info (all io-parts together), a block, or an Update Block's
    /// Old or New lines. Each line counts the ranges its own tags form (`1,2,3` is one, as is
    /// `1-1000000`), before the lines are merged.
    pub max_tags_per_value: usize,
    /// Most header lines in one io-part.
    pub max_header_lines: usize,
    /// Most schema lines, all io-parts together.
    pub max_schema_lines: usize,
    /// Most io-parts in one object.
    pub max_parts: usize,
    /// Most Add, Delete and Update blocks in one object.
    pub max_blocks: usize,
}

impl Default for TaggedLimits {
    fn default() -> Self {
        Self {
            max_line_length: 64 << 10,
            max_entries: 4_000_000,
            max_tags_per_value: 1 << 20,
            max_header_lines: 256,
            max_schema_lines: 65_536,
            max_parts: 4096,
            max_blocks: 1 << 20,
        }
    }
}

/// A tagged index object that cannot be read, and the line where reading stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub struct TaggedError {
    line: u64,
    #[source]
    kind: TaggedErrorKind,
}

impl TaggedError {
    fn new(line: u64, kind: TaggedErrorKind) -> Self {
        Self { line, kind }
    }

    /// The 1-based line number (for the end of the input, the last line).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// What went wrong.
    pub fn kind(&self) -> &TaggedErrorKind {
        &self.kind
    }
}

/// The kinds of [`TaggedError`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TaggedErrorKind {
    /// A line over [`TaggedLimits::max_line_length`].
    #[error("line is longer than the limit of {max} bytes")]
    LineTooLong {
        /// The limit.
        max: usize,
    },
    /// A line that is not UTF-8 (RFC 2654 §4.2: the payload is UTF-8).
    #[error("line is not UTF-8")]
    NotUtf8,
    /// A CR not followed by LF, or a NUL, inside a line.
    #[error("line holds a {} byte", if *found == 0 { "NUL" } else { "bare CR" })]
    ControlByte {
        /// The byte.
        found: u8,
    },
    /// No object at all.
    #[error("no tagged index object: the input is empty")]
    Empty,
    /// A header-section line that is not `name: value`.
    #[error("expected a header line `name: value` or BEGIN IO-Schema, found {found:?}")]
    ExpectedHeader {
        /// The line (shortened).
        found: String,
    },
    /// A defined header given twice in one io-part.
    #[error("header {name} given twice")]
    DuplicateHeader {
        /// The header name.
        name: &'static str,
    },
    /// `version:` other than `x-tagged-index-1`.
    #[error("unsupported version {found:?}; expected {VERSION}")]
    UnsupportedVersion {
        /// The value (shortened).
        found: String,
    },
    /// An `updatetype:` value that is not `total` or `incremental [mode]`.
    #[error(
        "bad updatetype {found:?}: expected total or incremental, optionally followed by \
         complete(Record), tag(Based) or unique(IDBased)"
    )]
    BadUpdateType {
        /// The value (shortened).
        found: String,
    },
    /// A timestamp or count that is not 1*DIGIT or does not fit in 64 bits.
    #[error("{header} must be a number of at most 20 digits, found {found:?}")]
    BadNumber {
        /// The header name.
        header: &'static str,
        /// The value (shortened).
        found: String,
    },
    /// A required header is missing when the schema begins.
    #[error("header {name} is missing before BEGIN IO-Schema")]
    MissingHeader {
        /// The header name.
        name: &'static str,
    },
    /// An unknown header field that cannot be kept.
    #[error("{0}")]
    InvalidHeader(EntryError),
    /// More header lines than [`TaggedLimits::max_header_lines`].
    #[error("more than {max} header lines")]
    TooManyHeaderLines {
        /// The limit.
        max: usize,
    },
    /// A schema line that is not `attribute: TOKENTYPE`.
    #[error("expected a schema line `attribute: TOKENTYPE` or END IO-Schema, found {found:?}")]
    BadSchemaLine {
        /// The line (shortened).
        found: String,
    },
    /// A token type other than FULL, TOKEN, RFC822, UUCP, DNS.
    #[error("unknown token type {found:?}; expected FULL, TOKEN, RFC822, UUCP or DNS")]
    UnknownTokenType {
        /// The token type (shortened).
        found: String,
    },
    /// One attribute given two token types.
    #[error("attribute {attribute} is given token type {second} after {first}")]
    ConflictingTokenType {
        /// The attribute.
        attribute: String,
        /// The type given first.
        first: TokenType,
        /// The type given later.
        second: TokenType,
    },
    /// More schema lines than [`TaggedLimits::max_schema_lines`].
    #[error("more than {max} schema lines")]
    TooManySchemaLines {
        /// The limit.
        max: usize,
    },
    /// A `BEGIN`/`END` line that names no section of the grammar.
    #[error("unknown section marker {found:?}")]
    UnknownMarker {
        /// The line (shortened).
        found: String,
    },
    /// A line where the grammar wants something else.
    #[error("expected {expected}, found {found:?}")]
    Unexpected {
        /// What belongs here.
        expected: &'static str,
        /// The line (shortened).
        found: String,
    },
    /// An index line that is neither `attribute: tags/value` nor `-tags/value`.
    #[error("expected an index line `attribute: tags/value` or `-tags/value`, found {found:?}")]
    BadIndexLine {
        /// The line (shortened).
        found: String,
    },
    /// An attribute name outside `1*NAMECHAR`.
    #[error("invalid attribute name {name:?}: only letters, digits, '-', ';' and '.' are allowed")]
    InvalidAttributeName {
        /// The name (shortened).
        name: String,
    },
    /// A malformed tag list.
    #[error("bad tag list: {0}")]
    BadTagList(#[from] TagListError),
    /// Nothing after the tag list's `/`.
    #[error("empty value after the tag list")]
    EmptyValue,
    /// A `-tags/value` line with no attribute line before it in its block.
    #[error("continuation line with no attribute line before it")]
    ContinuationWithoutAttribute,
    /// More index lines than [`TaggedLimits::max_entries`].
    #[error("more than {max} index lines")]
    TooManyEntries {
        /// The limit.
        max: usize,
    },
    /// A value written with more tags and ranges than [`TaggedLimits::max_tags_per_value`].
    #[error("value {value:?} of {attribute} has more than {max} tags and ranges")]
    TooManyTags {
        /// The attribute.
        attribute: String,
        /// The value (shortened).
        value: String,
        /// The limit.
        max: usize,
    },
    /// More io-parts than [`TaggedLimits::max_parts`].
    #[error("more than {max} io-parts")]
    TooManyParts {
        /// The limit.
        max: usize,
    },
    /// More blocks than [`TaggedLimits::max_blocks`].
    #[error("more than {max} blocks")]
    TooManyBlocks {
        /// The limit.
        max: usize,
    },
    /// The input ends inside a section.
    #[error("unexpected end of input: {what} opened at line {opened} is not closed")]
    Unterminated {
        /// The section.
        what: &'static str,
        /// Where it began.
        opened: u64,
    },
    /// The input ends where more must follow.
    #[error("unexpected end of input: expected {expected}")]
    Truncated {
        /// What was expected.
        expected: &'static str,
    },
    /// A later io-part whose header contradicts the first one.
    #[error("this io-part's {what} differs from the first io-part's")]
    PartsDisagree {
        /// The header.
        what: &'static str,
    },
}

/// Parses one tagged index object with [`TaggedLimits::default`].
///
/// # Errors
/// A [`TaggedError`] with the line number and the reason.
pub fn parse(input: &[u8]) -> Result<TaggedIndex, TaggedError> {
    parse_with_limits(input, &TaggedLimits::default())
}

/// Parses one tagged index object (RFC 2654 §4.3) within `limits`.
///
/// Tolerated beyond the grammar (digest A17): header lines in any order and any case, up to
/// `BEGIN IO-Schema`, with unknown ones kept; blank lines anywhere; CRLF or LF; section
/// keywords in any case and spacing (`BEGIN IO-schema`); spaces or none after a header's or
/// schema line's `:`; empty schemas, Index-Infos and blocks; index lines naming attributes the
/// schema lacks; a leading UTF-8 byte order mark. Several io-parts are merged into one object: they must agree on `updatetype`
/// and `lastupdate`; `thisupdate` and `contextsize` are the largest given; schemas, index
/// lines and blocks are concatenated (blocks keep their order). A value repeated on several
/// lines of one section has the union of their tags.
///
/// # Errors
/// A [`TaggedError`] with the line number and the reason; nothing is returned in part.
pub fn parse_with_limits(input: &[u8], limits: &TaggedLimits) -> Result<TaggedIndex, TaggedError> {
    let mut p = Parser::new(limits);
    // A UTF-8 byte order mark is not part of the first header line.
    let mut rest = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let mut line_no = 0u64;
    while !rest.is_empty() {
        line_no += 1;
        let (raw, next) = match memchr::memchr(b'\n', rest) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = next;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line = decode(raw, limits).map_err(|k| TaggedError::new(line_no, k))?;
        p.line(line_no, line)
            .map_err(|k| TaggedError::new(line_no, k))?;
    }
    p.finish(line_no.max(1))
}

fn decode<'a>(raw: &'a [u8], limits: &TaggedLimits) -> Result<&'a str, TaggedErrorKind> {
    if raw.len() > limits.max_line_length {
        return Err(TaggedErrorKind::LineTooLong {
            max: limits.max_line_length,
        });
    }
    if let Some(&found) = raw.iter().find(|&&b| b == b'\r' || b == 0) {
        return Err(TaggedErrorKind::ControlByte { found });
    }
    std::str::from_utf8(raw).map_err(|_| TaggedErrorKind::NotUtf8)
}

fn is_blank(line: &str) -> bool {
    line.bytes().all(|b| b == b' ' || b == b'\t')
}

fn trim(s: &str) -> &str {
    s.trim_matches([' ', '\t'])
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    IoSchema,
    IndexInfo,
    AddBlock,
    DeleteBlock,
    UpdateBlock,
    Old,
    New,
}

impl Section {
    fn name(self) -> &'static str {
        match self {
            Self::IoSchema => "IO-Schema",
            Self::IndexInfo => "Index-Info",
            Self::AddBlock => "Add Block",
            Self::DeleteBlock => "Delete Block",
            Self::UpdateBlock => "Update Block",
            Self::Old => "Old",
            Self::New => "New",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Begin(Section),
    End(Section),
}

/// `BEGIN x` / `END x`, keywords matched ignoring case and the amount of blank between words.
/// `Ok(None)` when the line is not a marker; an error for `BEGIN`/`END` before anything else.
fn marker(line: &str) -> Result<Option<Marker>, TaggedErrorKind> {
    let mut words = line.split([' ', '\t']).filter(|w| !w.is_empty());
    let Some(first) = words.next() else {
        return Ok(None);
    };
    let begin = if first.eq_ignore_ascii_case("begin") {
        true
    } else if first.eq_ignore_ascii_case("end") {
        false
    } else {
        return Ok(None);
    };
    let rest: Vec<String> = words.map(str::to_ascii_lowercase).collect();
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    let section = match rest.as_slice() {
        ["io-schema"] => Section::IoSchema,
        ["index-info"] => Section::IndexInfo,
        ["add", "block"] => Section::AddBlock,
        ["delete", "block"] => Section::DeleteBlock,
        ["update", "block"] => Section::UpdateBlock,
        ["old"] => Section::Old,
        ["new"] => Section::New,
        _ => {
            return Err(TaggedErrorKind::UnknownMarker {
                found: shorten(line),
            });
        }
    };
    Ok(Some(if begin {
        Marker::Begin(section)
    } else {
        Marker::End(section)
    }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Total,
    Incremental(Option<IncrementalMode>),
}

/// The header of the io-part being read.
#[derive(Debug, Default)]
struct PartHeader {
    header_lines: usize,
    version: bool,
    kind: Option<Kind>,
    this_update: Option<u64>,
    last_update: Option<u64>,
    context_size: Option<u64>,
}

/// The header fields of the object, merged over its io-parts.
#[derive(Debug, Clone, Copy)]
struct ObjectHeader {
    kind: Kind,
    this_update: u64,
    last_update: Option<u64>,
    context_size: Option<u64>,
}

/// Index lines being gathered: each value's tag lists are kept as written and merged once,
/// when the section ends, so that a value repeated on many lines costs no more than one.
#[derive(Debug, Default)]
struct Lines {
    attributes: BTreeMap<String, (String, BTreeMap<String, Gathered>)>,
}

#[derive(Debug, Default)]
struct Gathered {
    all: bool,
    ranges: Vec<(u64, u64)>,
    items: usize,
}

impl Lines {
    fn add(
        &mut self,
        attribute: &str,
        value: &str,
        tags: &TagSet,
        max: usize,
    ) -> Result<(), TaggedErrorKind> {
        let (_, values) = self
            .attributes
            .entry(key(attribute))
            .or_insert_with(|| (attribute.to_owned(), BTreeMap::new()));
        let g = values.entry(value.to_owned()).or_default();
        g.items += tags.written_items();
        if g.items > max {
            return Err(too_many_tags(attribute, value, max));
        }
        match tags.explicit() {
            None => {
                g.all = true;
                g.ranges = Vec::new();
            }
            Some(r) if !g.all => g.ranges.extend_from_slice(&r.0),
            Some(_) => {}
        }
        Ok(())
    }

    fn finish(self) -> IndexInfo {
        let mut info = IndexInfo::new();
        for (name, values) in self.attributes.into_values() {
            for (value, g) in values {
                let tags = if g.all {
                    TagSet::all()
                } else {
                    Ranges::normalize(g.ranges).into()
                };
                info.union_unchecked(&name, &value, &tags);
            }
        }
        info
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the first io-part.
    Start,
    Header,
    Schema {
        opened: u64,
    },
    /// A total's schema is closed; Index-Info must follow.
    AwaitInfo,
    Info {
        opened: u64,
    },
    /// A total's Index-Info is closed.
    InfoDone,
    /// An incremental's schema or last block is closed.
    Blocks,
    Block {
        section: Section,
        opened: u64,
    },
    Update {
        opened: u64,
    },
    Sub {
        update_opened: u64,
        section: Section,
        opened: u64,
    },
}

/// Which gathering the index lines of the open section go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Total,
    Current,
    Old,
    New,
}

struct Parser<'l> {
    limits: &'l TaggedLimits,
    state: State,
    part: PartHeader,
    header: Option<ObjectHeader>,
    extra: Vec<HeaderField>,
    schema: Schema,
    /// The Index-Info of a total, all io-parts together.
    total: Lines,
    blocks: Vec<Block>,
    /// The open Add or Delete Block.
    current: Lines,
    /// The Old and New lines of the open Update Block.
    old: Lines,
    new: Lines,
    target: Target,
    /// The attribute continuation lines belong to, within the open section.
    attribute: Option<String>,
    entries: usize,
    schema_lines: usize,
    parts: usize,
}

impl<'l> Parser<'l> {
    fn new(limits: &'l TaggedLimits) -> Self {
        Self {
            limits,
            state: State::Start,
            part: PartHeader::default(),
            header: None,
            extra: Vec::new(),
            schema: Schema::new(),
            total: Lines::default(),
            blocks: Vec::new(),
            current: Lines::default(),
            old: Lines::default(),
            new: Lines::default(),
            target: Target::Total,
            attribute: None,
            entries: 0,
            schema_lines: 0,
            parts: 0,
        }
    }

    fn line(&mut self, no: u64, line: &str) -> Result<(), TaggedErrorKind> {
        if is_blank(line) {
            return Ok(());
        }
        let m = marker(line)?;
        match self.state {
            State::Start => match m {
                Some(_) => Err(unexpected(
                    "the header (version: x-tagged-index-1 ...)",
                    line,
                )),
                None => {
                    self.start_part()?;
                    self.header(line)
                }
            },
            State::Header => match m {
                Some(Marker::Begin(Section::IoSchema)) => {
                    self.end_header()?;
                    self.state = State::Schema { opened: no };
                    Ok(())
                }
                Some(_) => Err(unexpected("a header line or BEGIN IO-Schema", line)),
                None => self.header(line),
            },
            State::Schema { .. } => match m {
                Some(Marker::End(Section::IoSchema)) => {
                    self.state = match self.part.kind {
                        Some(Kind::Total) => State::AwaitInfo,
                        _ => State::Blocks,
                    };
                    Ok(())
                }
                Some(_) => Err(unexpected("a schema line or END IO-Schema", line)),
                None => self.schema_line(line),
            },
            State::AwaitInfo => match m {
                Some(Marker::Begin(Section::IndexInfo)) => {
                    self.open(Target::Total);
                    self.state = State::Info { opened: no };
                    Ok(())
                }
                _ => Err(unexpected(
                    "BEGIN Index-Info (the updatetype is total)",
                    line,
                )),
            },
            State::Info { .. } => match m {
                Some(Marker::End(Section::IndexInfo)) => {
                    self.state = State::InfoDone;
                    Ok(())
                }
                Some(_) => Err(unexpected("an index line or END Index-Info", line)),
                None => self.entry(line),
            },
            State::InfoDone => match m {
                Some(_) => Err(unexpected(
                    "the end of the object or the header of another io-part",
                    line,
                )),
                None => self.next_part(line),
            },
            State::Blocks => match m {
                Some(Marker::Begin(section @ (Section::AddBlock | Section::DeleteBlock))) => {
                    self.count_block()?;
                    self.current = Lines::default();
                    self.open(Target::Current);
                    self.state = State::Block {
                        section,
                        opened: no,
                    };
                    Ok(())
                }
                Some(Marker::Begin(Section::UpdateBlock)) => {
                    self.count_block()?;
                    self.old = Lines::default();
                    self.new = Lines::default();
                    self.state = State::Update { opened: no };
                    Ok(())
                }
                Some(_) => Err(unexpected(
                    "BEGIN Add Block, BEGIN Delete Block or BEGIN Update Block (the updatetype is \
                     incremental)",
                    line,
                )),
                None => self.next_part(line),
            },
            State::Block { section, .. } => match m {
                Some(Marker::End(s)) if s == section => {
                    let info = std::mem::take(&mut self.current).finish();
                    self.blocks.push(if section == Section::AddBlock {
                        Block::Add(info)
                    } else {
                        Block::Delete(info)
                    });
                    self.state = State::Blocks;
                    Ok(())
                }
                Some(_) => Err(unexpected(
                    if section == Section::AddBlock {
                        "an index line or END Add Block"
                    } else {
                        "an index line or END Delete Block"
                    },
                    line,
                )),
                None => self.entry(line),
            },
            State::Update { opened } => match m {
                Some(Marker::Begin(section @ (Section::Old | Section::New))) => {
                    self.open(if section == Section::Old {
                        Target::Old
                    } else {
                        Target::New
                    });
                    self.state = State::Sub {
                        update_opened: opened,
                        section,
                        opened: no,
                    };
                    Ok(())
                }
                Some(Marker::End(Section::UpdateBlock)) => {
                    self.blocks.push(Block::Update {
                        old: std::mem::take(&mut self.old).finish(),
                        new: std::mem::take(&mut self.new).finish(),
                    });
                    self.state = State::Blocks;
                    Ok(())
                }
                _ => Err(unexpected("BEGIN Old, BEGIN New or END Update Block", line)),
            },
            State::Sub {
                update_opened,
                section,
                ..
            } => match m {
                Some(Marker::End(s)) if s == section => {
                    self.state = State::Update {
                        opened: update_opened,
                    };
                    Ok(())
                }
                Some(_) => Err(unexpected(
                    if section == Section::Old {
                        "an index line or END Old"
                    } else {
                        "an index line or END New"
                    },
                    line,
                )),
                None => self.entry(line),
            },
        }
    }

    fn finish(self, last: u64) -> Result<TaggedIndex, TaggedError> {
        let unterminated =
            |what, opened| TaggedError::new(last, TaggedErrorKind::Unterminated { what, opened });
        let truncated = |expected| TaggedError::new(last, TaggedErrorKind::Truncated { expected });
        match self.state {
            State::Start => return Err(TaggedError::new(last, TaggedErrorKind::Empty)),
            State::Header => return Err(truncated("BEGIN IO-Schema after the header")),
            State::AwaitInfo => return Err(truncated("BEGIN Index-Info after the schema")),
            State::Schema { opened } => return Err(unterminated("IO-Schema", opened)),
            State::Info { opened } => return Err(unterminated("Index-Info", opened)),
            State::Block { section, opened } => return Err(unterminated(section.name(), opened)),
            State::Update { opened } => return Err(unterminated("Update Block", opened)),
            State::Sub {
                section, opened, ..
            } => return Err(unterminated(section.name(), opened)),
            State::InfoDone | State::Blocks => {}
        }
        // The state is past the first BEGIN IO-Schema, where end_header set the header: its
        // absence cannot happen, and would be a truncated object rather than a panic.
        let Some(h) = self.header else {
            return Err(truncated("BEGIN IO-Schema after the header"));
        };
        let body = match h.kind {
            Kind::Total => Body::Total {
                last_update: h.last_update,
                info: self.total.finish(),
            },
            Kind::Incremental(mode) => Body::Incremental {
                mode,
                // end_header refuses an incremental part without lastupdate.
                last_update: h.last_update.unwrap_or_default(),
                blocks: self.blocks,
            },
        };
        Ok(TaggedIndex {
            this_update: h.this_update,
            context_size: h.context_size,
            extra_headers: self.extra,
            schema: self.schema,
            body,
        })
    }

    fn start_part(&mut self) -> Result<(), TaggedErrorKind> {
        self.parts += 1;
        if self.parts > self.limits.max_parts {
            return Err(TaggedErrorKind::TooManyParts {
                max: self.limits.max_parts,
            });
        }
        self.part = PartHeader::default();
        self.state = State::Header;
        Ok(())
    }

    /// A line after a complete io-part: the header of the next one (it must begin with a
    /// defined header, so a stray index line is not mistaken for an unknown header).
    fn next_part(&mut self, line: &str) -> Result<(), TaggedErrorKind> {
        let defined = line.split_once(':').is_some_and(|(n, _)| {
            super::info::DEFINED_HEADERS
                .iter()
                .any(|d| d.eq_ignore_ascii_case(trim(n)))
        });
        if !defined {
            return Err(unexpected(
                match self.state {
                    State::Blocks => {
                        "BEGIN Add Block, BEGIN Delete Block, BEGIN Update Block, or the \
                         header of another io-part"
                    }
                    _ => "the end of the object or the header of another io-part",
                },
                line,
            ));
        }
        self.start_part()?;
        self.header(line)
    }

    fn count_block(&mut self) -> Result<(), TaggedErrorKind> {
        if self.blocks.len() >= self.limits.max_blocks {
            return Err(TaggedErrorKind::TooManyBlocks {
                max: self.limits.max_blocks,
            });
        }
        Ok(())
    }

    fn open(&mut self, target: Target) {
        self.target = target;
        self.attribute = None;
    }

    fn header(&mut self, line: &str) -> Result<(), TaggedErrorKind> {
        self.part.header_lines += 1;
        if self.part.header_lines > self.limits.max_header_lines {
            return Err(TaggedErrorKind::TooManyHeaderLines {
                max: self.limits.max_header_lines,
            });
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(TaggedErrorKind::ExpectedHeader {
                found: shorten(line),
            });
        };
        let (name, value) = (trim(name), trim(value));
        let p = &mut self.part;
        match name.to_ascii_lowercase().as_str() {
            "version" => {
                if p.version {
                    return Err(TaggedErrorKind::DuplicateHeader { name: "version" });
                }
                if !value.eq_ignore_ascii_case(VERSION) {
                    return Err(TaggedErrorKind::UnsupportedVersion {
                        found: shorten(value),
                    });
                }
                p.version = true;
            }
            "updatetype" => {
                if p.kind.is_some() {
                    return Err(TaggedErrorKind::DuplicateHeader { name: "updatetype" });
                }
                p.kind = Some(update_type(value)?);
            }
            "thisupdate" => set_number(&mut p.this_update, "thisupdate", value)?,
            "lastupdate" => set_number(&mut p.last_update, "lastupdate", value)?,
            "contextsize" => set_number(&mut p.context_size, "contextsize", value)?,
            _ => {
                if name.contains([' ', '\t']) || name.is_empty() {
                    return Err(TaggedErrorKind::ExpectedHeader {
                        found: shorten(line),
                    });
                }
                let field =
                    HeaderField::new(name, value).map_err(TaggedErrorKind::InvalidHeader)?;
                self.extra.push(field);
            }
        }
        Ok(())
    }

    /// At BEGIN IO-Schema: checks the io-part's header and merges it into the object's. Later
    /// io-parts must agree on `updatetype` and `lastupdate`; `thisupdate` and `contextsize`
    /// become the largest given.
    fn end_header(&mut self) -> Result<(), TaggedErrorKind> {
        let p = &self.part;
        let missing = |name| Err(TaggedErrorKind::MissingHeader { name });
        if !p.version {
            return missing("version");
        }
        let Some(kind) = p.kind else {
            return missing("updatetype");
        };
        let Some(this_update) = p.this_update else {
            return missing("thisupdate");
        };
        if matches!(kind, Kind::Incremental(_)) && p.last_update.is_none() {
            return missing("lastupdate");
        }
        let Some(h) = &mut self.header else {
            self.header = Some(ObjectHeader {
                kind,
                this_update,
                last_update: p.last_update,
                context_size: p.context_size,
            });
            return Ok(());
        };
        let disagree = |what| Err(TaggedErrorKind::PartsDisagree { what });
        h.kind = match (h.kind, kind) {
            (Kind::Total, Kind::Total) => Kind::Total,
            (Kind::Incremental(Some(a)), Kind::Incremental(Some(b))) if a != b => {
                return disagree("updatetype");
            }
            (Kind::Incremental(a), Kind::Incremental(b)) => Kind::Incremental(a.or(b)),
            _ => return disagree("updatetype"),
        };
        h.last_update = match (h.last_update, p.last_update) {
            (Some(a), Some(b)) if a != b => return disagree("lastupdate"),
            (a, b) => a.or(b),
        };
        h.this_update = h.this_update.max(this_update);
        h.context_size = h.context_size.max(p.context_size);
        Ok(())
    }

    fn schema_line(&mut self, line: &str) -> Result<(), TaggedErrorKind> {
        self.schema_lines += 1;
        if self.schema_lines > self.limits.max_schema_lines {
            return Err(TaggedErrorKind::TooManySchemaLines {
                max: self.limits.max_schema_lines,
            });
        }
        let Some((name, ty)) = line.split_once(':') else {
            return Err(TaggedErrorKind::BadSchemaLine {
                found: shorten(line),
            });
        };
        let (name, ty) = (trim(name), trim(ty));
        if !is_attribute_name(name) {
            return Err(TaggedErrorKind::InvalidAttributeName {
                name: shorten(name),
            });
        }
        let ty = TokenType::from_name(ty)
            .ok_or_else(|| TaggedErrorKind::UnknownTokenType { found: shorten(ty) })?;
        // One attribute, one token type: within an io-part and across io-parts.
        match self.schema.get(name) {
            Some(first) if first != ty => Err(TaggedErrorKind::ConflictingTokenType {
                attribute: name.to_owned(),
                first,
                second: ty,
            }),
            Some(_) => Ok(()),
            None => {
                self.schema.insert_unchecked(name, ty);
                Ok(())
            }
        }
    }

    /// `attr-name ":" *SPACE taglist "/" attr-value` or `"-" taglist "/" attr-value`.
    fn entry(&mut self, line: &str) -> Result<(), TaggedErrorKind> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(TaggedErrorKind::TooManyEntries {
                max: self.limits.max_entries,
            });
        }
        let bad = || TaggedErrorKind::BadIndexLine {
            found: shorten(line),
        };
        // A continuation line has no ':' before its '/'; a first line always does (after the
        // attribute name), so an attribute whose name starts with '-' is still read right.
        let continuation = line
            .strip_prefix('-')
            .and_then(|rest| rest.split_once('/'))
            .filter(|(tags, _)| !tags.contains(':'));
        let (tags, value) = if let Some(tv) = continuation {
            if self.attribute.is_none() {
                return Err(TaggedErrorKind::ContinuationWithoutAttribute);
            }
            tv
        } else {
            let (name, rest) = line.split_once(':').ok_or_else(bad)?;
            let name = name.trim_end_matches([' ', '\t']);
            if !is_attribute_name(name) {
                return Err(TaggedErrorKind::InvalidAttributeName {
                    name: shorten(name),
                });
            }
            let tv = rest
                .trim_start_matches([' ', '\t'])
                .split_once('/')
                .ok_or_else(bad)?;
            self.attribute = Some(name.to_owned());
            tv
        };
        let max = self.limits.max_tags_per_value;
        let tags = TagSet::parse_list(tags, max)?;
        if !is_value(value) {
            return Err(TaggedErrorKind::EmptyValue);
        }
        // Invariant: set above, or checked for a continuation line.
        let attribute = self.attribute.as_deref().unwrap_or_default();
        let lines = match self.target {
            Target::Total => &mut self.total,
            Target::Current => &mut self.current,
            Target::Old => &mut self.old,
            Target::New => &mut self.new,
        };
        lines.add(attribute, value, &tags, max)
    }
}

fn unexpected(expected: &'static str, line: &str) -> TaggedErrorKind {
    TaggedErrorKind::Unexpected {
        expected,
        found: shorten(line),
    }
}

fn too_many_tags(attribute: &str, value: &str, max: usize) -> TaggedErrorKind {
    TaggedErrorKind::TooManyTags {
        attribute: attribute.to_owned(),
        value: shorten(value),
        max,
    }
}

fn update_type(value: &str) -> Result<Kind, TaggedErrorKind> {
    let bad = || TaggedErrorKind::BadUpdateType {
        found: shorten(value),
    };
    let words: Vec<&str> = value.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
    match words.as_slice() {
        [t] if t.eq_ignore_ascii_case("total") => Ok(Kind::Total),
        [i] if i.eq_ignore_ascii_case("incremental") => Ok(Kind::Incremental(None)),
        [i, m] if i.eq_ignore_ascii_case("incremental") => Ok(Kind::Incremental(Some(
            IncrementalMode::from_name(m).ok_or_else(bad)?,
        ))),
        _ => Err(bad()),
    }
}

fn set_number(
    slot: &mut Option<u64>,
    header: &'static str,
    value: &str,
) -> Result<(), TaggedErrorKind> {
    if slot.is_some() {
        return Err(TaggedErrorKind::DuplicateHeader { name: header });
    }
    let n = (!value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()))
        .then(|| value.parse().ok())
        .flatten()
        .ok_or_else(|| TaggedErrorKind::BadNumber {
            header,
            found: shorten(value),
        })?;
    *slot = Some(n);
    Ok(())
}
