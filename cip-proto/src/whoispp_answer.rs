//! Whois++ answers (RFC 1835 §4; grammar in RFC 2958) as a server sends them: records,
//! `# SERVER-TO-ASK` referrals (RFC 1913), system message codes and hit counts, so the daemon
//! can query a legacy Whois++ server (ROADS v2.3's `wppd`) and follow its referrals. No I/O:
//! the caller reads the whole answer and hands it to [`parse_answer`].
//!
//! ```text
//! answer   = *( message / block / handle / blank )
//! message  = "%" [ SP ] 3DIGIT ( SP text / "-" text / "" )  ; "NNN-": the message goes on
//!                                                           ; to the next "NNN" line
//! block    = header *( data / message / blank ) "# END"
//! header   = "# FULL " template [ server-handle ] handle    ; a record (also "# ABRIDGED")
//!          / "# SERVER-TO-ASK " server-handle               ; a referral
//!          / "# " other *( word )                           ; SUMMARY, unknown: skipped
//! handle   = "# HANDLE " template server-handle handle      ; one line, no "# END": skipped
//! data     = ( SP / HTAB ) name ":" [ SP ] value            ; an attribute
//!          / "+" text                                       ; the value goes on, joined as is
//!          / "-" text                                       ; the value goes on after "\n"
//! ```
//!
//! * Lines end in CRLF or LF. A line that is not UTF-8 is read as ISO-8859-1 (Whois++
//!   predates UTF-8), so no text makes the parse fail.
//! * Keywords (`FULL`, `END`, ...) and attribute names compare ignoring ASCII case; names and
//!   values are kept as sent. A value loses the one space after its `:` and nothing else.
//! * A 5xx message is a refusal: [`AnswerError::Refused`].
//! * A record block whose template is `COUNT` (ROADS' `# FULL COUNT <server> HITS`), or whose
//!   attributes are all `Local-Count` / `Referral-Count`, is a hit count: it fills
//!   [`WhoisAnswer::count`] (summed if there are several), not [`WhoisAnswer::records`].
//! * An `# ABRIDGED` data line without `name:` (RFC 1835's abridged form is free text) is
//!   kept as an attribute with an empty name.
//! * A `# END` outside any block is ignored (a server that ends its `# HANDLE` lines).
//!
//! Every error names the 1-based line and the byte offset where that line starts.

use std::borrow::Cow;

/// Longest piece of the input an error message quotes, in bytes.
const SHOWN: usize = 64;

/// Longest refusal text an error keeps, in bytes.
const SHOWN_REFUSAL: usize = 1024;

/// Limits on what one answer may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerLimits {
    /// Most bytes in the whole answer.
    pub max_bytes: usize,
    /// Most records, and most referrals, in one answer.
    pub max_records: usize,
    /// Most bytes on one line, not counting its line end.
    pub max_line: usize,
}

impl Default for AnswerLimits {
    /// 4 MiB, 10 000 records, 64 KiB lines.
    fn default() -> Self {
        Self {
            max_bytes: 4 << 20,
            max_records: 10_000,
            max_line: 64 << 10,
        }
    }
}

/// One parsed answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WhoisAnswer {
    /// `# FULL` and `# ABRIDGED` records, in order.
    pub records: Vec<Record>,
    /// `# SERVER-TO-ASK` referrals, in order.
    pub referrals: Vec<ServerToAsk>,
    /// The code of every system message, in order (a message continued over several
    /// `% NNN-` lines counts once).
    pub codes: Vec<u16>,
    /// `(Local-Count, Referral-Count)` from the count blocks, if any (a missing one is 0).
    pub count: Option<(u64, u64)>,
}

/// One `# FULL` (or `# ABRIDGED`) record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// The template, as sent (`document`).
    pub template: String,
    /// The server handle of the header (`# FULL <template> <server handle> <handle>`);
    /// empty when the header names only a handle.
    pub server_handle: String,
    /// The record's handle on that server; empty when the header names none.
    pub handle: String,
    /// `(name, value)` in order; continuation lines are joined to their value (`+` as is,
    /// `-` after a `"\n"`).
    pub attributes: Vec<(String, String)>,
}

impl Record {
    /// The first value of attribute `name` (ignoring ASCII case), so callers need not scan.
    pub fn value(&self, name: &str) -> Option<&str> {
        first_value(&self.attributes, name)
    }
}

/// One `# SERVER-TO-ASK` referral: a server that may hold more matches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerToAsk {
    /// The `Server-Handle` attribute, else the word after `SERVER-TO-ASK` (may be empty).
    pub handle: String,
    /// The `Host-Name` attribute; empty when the block has none.
    pub host: String,
    /// The `Host-Port` attribute, if any.
    pub port: Option<u16>,
    /// Every attribute in order, the three above included.
    pub attributes: Vec<(String, String)>,
}

impl ServerToAsk {
    /// The first value of attribute `name` (ignoring ASCII case), so callers need not scan.
    pub fn value(&self, name: &str) -> Option<&str> {
        first_value(&self.attributes, name)
    }
}

/// Why an answer cannot be read; each names the 1-based `line` and the byte `offset` at which
/// that line starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The server refused the query with a 5xx message.
    #[error("line {line} (byte {offset}): the server refused: {code} {message}")]
    Refused {
        /// Its code (500..=599).
        code: u16,
        /// Its text (the lines of a continued message joined with `"\n"`).
        message: String,
        /// Line of the message's first line.
        line: usize,
        /// Offset of that line.
        offset: usize,
    },
    /// The answer is longer than [`AnswerLimits::max_bytes`].
    #[error("line {line} (byte {offset}): the answer is longer than {max} bytes")]
    TooLarge {
        /// The limit.
        max: usize,
        /// Line holding the first byte past the limit.
        line: usize,
        /// Offset of that line.
        offset: usize,
    },
    /// A line is longer than [`AnswerLimits::max_line`].
    #[error("line {line} (byte {offset}): the line is longer than {max} bytes")]
    LineTooLong {
        /// The limit.
        max: usize,
        /// The long line.
        line: usize,
        /// Offset of that line.
        offset: usize,
    },
    /// More records (or referrals) than [`AnswerLimits::max_records`].
    #[error("line {line} (byte {offset}): more than {max} {what}")]
    TooMany {
        /// `"records"` or `"referrals"`.
        what: &'static str,
        /// The limit.
        max: usize,
        /// Header line of the first block past the limit.
        line: usize,
        /// Offset of that line.
        offset: usize,
    },
    /// A data line (attribute or continuation) outside any block.
    #[error("line {line} (byte {offset}): a data line outside any `# ...` block")]
    OutsideBlock {
        /// The line.
        line: usize,
        /// Its offset.
        offset: usize,
    },
    /// The input ends inside a block.
    #[error("line {line} (byte {offset}): `# {block}` has no `# END` before the input ends")]
    Unterminated {
        /// The block's header, after the `#` (shortened).
        block: String,
        /// The header's line.
        line: usize,
        /// Its offset.
        offset: usize,
    },
    /// A `# ...` header inside another block.
    #[error(
        "line {line} (byte {offset}): a `#` line inside `# {block}` (line {start_line}), \
         which has no `# END` yet"
    )]
    NestedBlock {
        /// The open block's header, after the `#` (shortened).
        block: String,
        /// The open block's header line.
        start_line: usize,
        /// The unexpected `#` line.
        line: usize,
        /// Its offset.
        offset: usize,
    },
    /// A `#` line with no kind, or a `# FULL` / `# ABRIDGED` with no template.
    #[error("line {line} (byte {offset}): block header without a kind or template")]
    MalformedHeader {
        /// The line.
        line: usize,
        /// Its offset.
        offset: usize,
    },
    /// A data line that is not ` Name: value` (no `:`, or a name with spaces or none).
    #[error("line {line} (byte {offset}): not an attribute line (` Name: value`)")]
    MalformedAttribute {
        /// The line.
        line: usize,
        /// Its offset.
        offset: usize,
    },
    /// A `+` or `-` continuation line with no attribute before it in its block.
    #[error("line {line} (byte {offset}): a continuation line with no value to continue")]
    DanglingContinuation {
        /// The line.
        line: usize,
        /// Its offset.
        offset: usize,
    },
    /// A `%` line without a three-digit code.
    #[error("line {line} (byte {offset}): a `%` line without a three-digit code")]
    MalformedMessage {
        /// The line.
        line: usize,
        /// Its offset.
        offset: usize,
    },
    /// A `Host-Port` that is not a port number.
    #[error("line {line} (byte {offset}): Host-Port {value:?} is not a port number")]
    BadPort {
        /// The value (shortened).
        value: String,
        /// The attribute's line.
        line: usize,
        /// Its offset.
        offset: usize,
    },
    /// A `Local-Count` or `Referral-Count` that is not a number.
    #[error("line {line} (byte {offset}): {name} {value:?} is not a count")]
    BadCount {
        /// The attribute name.
        name: String,
        /// The value (shortened).
        value: String,
        /// The attribute's line.
        line: usize,
        /// Its offset.
        offset: usize,
    },
}

impl AnswerError {
    /// The 1-based line the error is about.
    pub fn line(&self) -> usize {
        match self {
            Self::Refused { line, .. }
            | Self::TooLarge { line, .. }
            | Self::LineTooLong { line, .. }
            | Self::TooMany { line, .. }
            | Self::OutsideBlock { line, .. }
            | Self::Unterminated { line, .. }
            | Self::NestedBlock { line, .. }
            | Self::MalformedHeader { line, .. }
            | Self::MalformedAttribute { line, .. }
            | Self::DanglingContinuation { line, .. }
            | Self::MalformedMessage { line, .. }
            | Self::BadPort { line, .. }
            | Self::BadCount { line, .. } => *line,
        }
    }

    /// The byte offset at which that line starts.
    pub fn offset(&self) -> usize {
        match self {
            Self::Refused { offset, .. }
            | Self::TooLarge { offset, .. }
            | Self::LineTooLong { offset, .. }
            | Self::TooMany { offset, .. }
            | Self::OutsideBlock { offset, .. }
            | Self::Unterminated { offset, .. }
            | Self::NestedBlock { offset, .. }
            | Self::MalformedHeader { offset, .. }
            | Self::MalformedAttribute { offset, .. }
            | Self::DanglingContinuation { offset, .. }
            | Self::MalformedMessage { offset, .. }
            | Self::BadPort { offset, .. }
            | Self::BadCount { offset, .. } => *offset,
        }
    }
}

/// Parses a whole answer (banner to the last message) within `limits`.
///
/// # Errors
/// [`AnswerError`] for a refusal, an answer over `limits`, or text that does not follow the
/// grammar in the [module documentation](self).
pub fn parse_answer(bytes: &[u8], limits: &AnswerLimits) -> Result<WhoisAnswer, AnswerError> {
    if bytes.len() > limits.max_bytes {
        let offset = memchr::memrchr(b'\n', &bytes[..limits.max_bytes]).map_or(0, |i| i + 1);
        return Err(AnswerError::TooLarge {
            max: limits.max_bytes,
            line: 1 + memchr::memchr_iter(b'\n', &bytes[..offset]).count(),
            offset,
        });
    }
    let mut parser = Parser {
        limits,
        answer: WhoisAnswer::default(),
        open: None,
        message: None,
    };
    let (mut offset, mut line) = (0, 0);
    while offset < bytes.len() {
        line += 1;
        let (end, next) = match memchr::memchr(b'\n', &bytes[offset..]) {
            Some(i) => (offset + i, offset + i + 1),
            None => (bytes.len(), bytes.len()),
        };
        let raw = &bytes[offset..end];
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.len() > limits.max_line {
            return Err(AnswerError::LineTooLong {
                max: limits.max_line,
                line,
                offset,
            });
        }
        parser.line(&decode(raw), Pos { line, offset })?;
        offset = next;
    }
    parser.finish()
}

/// A line as text: UTF-8 when it is, else ISO-8859-1 (every byte is the code point).
fn decode(raw: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(raw) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(raw.iter().map(|&b| char::from(b)).collect()),
    }
}

/// At most `max` bytes of `s` (cut on a character boundary), for error messages.
fn shown(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &s[..cut])
}

fn first_value<'a>(attributes: &'a [(String, String)], name: &str) -> Option<&'a str> {
    attributes
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Where a line starts.
#[derive(Debug, Clone, Copy)]
struct Pos {
    line: usize,
    offset: usize,
}

/// What an open block becomes at its `# END`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Record { abridged: bool },
    Referral,
    Skip,
}

/// A block read up to its `# END`.
#[derive(Debug)]
struct Block {
    kind: Kind,
    /// The header after `#`, shortened, for errors.
    header: String,
    /// The header's words after the kind.
    words: Vec<String>,
    attributes: Vec<(String, String)>,
    /// Where each attribute starts.
    at: Vec<Pos>,
    start: Pos,
}

impl Block {
    /// Takes one data line (not blank, not `%`, not `#`).
    fn data(&mut self, text: &str, at: Pos) -> Result<(), AnswerError> {
        if self.kind == Kind::Skip {
            return Ok(());
        }
        if let Some(rest) = text.strip_prefix('+') {
            return self.continue_value("", rest, at);
        }
        if let Some(rest) = text.strip_prefix('-') {
            return self.continue_value("\n", rest, at);
        }
        let malformed = AnswerError::MalformedAttribute {
            line: at.line,
            offset: at.offset,
        };
        let Some(body) = text.strip_prefix([' ', '\t']) else {
            return Err(malformed);
        };
        let attribute = body.split_once(':').and_then(|(name, value)| {
            let name = name.trim();
            (!name.is_empty() && !name.contains(char::is_whitespace))
                .then(|| (name, value.strip_prefix(' ').unwrap_or(value)))
        });
        let (name, value) = match attribute {
            Some(a) => a,
            None if self.kind == (Kind::Record { abridged: true }) => ("", body),
            None => return Err(malformed),
        };
        self.attributes.push((name.to_owned(), value.to_owned()));
        self.at.push(at);
        Ok(())
    }

    /// Appends a continuation line to the last value, after `separator`.
    fn continue_value(&mut self, separator: &str, text: &str, at: Pos) -> Result<(), AnswerError> {
        let Some((_, value)) = self.attributes.last_mut() else {
            return Err(AnswerError::DanglingContinuation {
                line: at.line,
                offset: at.offset,
            });
        };
        value.push_str(separator);
        value.push_str(text);
        Ok(())
    }

    /// The attributes named `name` (ignoring ASCII case), with where each starts.
    fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (&'a str, Pos)> + 'a {
        self.attributes
            .iter()
            .zip(&self.at)
            .filter(move |((n, _), _)| n.eq_ignore_ascii_case(name))
            .map(|((_, v), at)| (v.as_str(), *at))
    }

    /// True for a hit count: template `COUNT`, or only count attributes.
    fn is_count(&self) -> bool {
        self.words
            .first()
            .is_some_and(|t| t.eq_ignore_ascii_case("COUNT"))
            || (!self.attributes.is_empty()
                && self.attributes.iter().all(|(n, _)| {
                    n.eq_ignore_ascii_case("Local-Count")
                        || n.eq_ignore_ascii_case("Referral-Count")
                }))
    }

    /// The sum of the values of count attribute `name`.
    fn count(&self, name: &str) -> Result<u64, AnswerError> {
        let mut sum = 0u64;
        for (value, at) in self.named(name) {
            let n = value
                .trim()
                .parse::<u64>()
                .map_err(|_| AnswerError::BadCount {
                    name: name.to_owned(),
                    value: shown(value, SHOWN),
                    line: at.line,
                    offset: at.offset,
                })?;
            sum = sum.saturating_add(n);
        }
        Ok(sum)
    }
}

/// A system message that may go on over more `% NNN-` lines.
#[derive(Debug)]
struct Message {
    code: u16,
    text: String,
    start: Pos,
}

struct Parser<'a> {
    limits: &'a AnswerLimits,
    answer: WhoisAnswer,
    open: Option<Block>,
    /// A message whose last line was `% NNN-...`.
    message: Option<Message>,
}

impl Parser<'_> {
    fn line(&mut self, text: &str, at: Pos) -> Result<(), AnswerError> {
        if let Some(rest) = text.strip_prefix('%') {
            return self.message(rest, at);
        }
        self.end_message()?;
        if text.trim().is_empty() {
            return Ok(());
        }
        if let Some(rest) = text.strip_prefix('#') {
            return self.header(rest, at);
        }
        match &mut self.open {
            Some(block) => block.data(text, at),
            None => Err(AnswerError::OutsideBlock {
                line: at.line,
                offset: at.offset,
            }),
        }
    }

    /// A `%` line (`rest` follows the `%`).
    fn message(&mut self, rest: &str, at: Pos) -> Result<(), AnswerError> {
        let malformed = AnswerError::MalformedMessage {
            line: at.line,
            offset: at.offset,
        };
        let rest = rest.trim_start();
        let Some(digits) = rest
            .get(..3)
            .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))
        else {
            return Err(malformed);
        };
        let code = digits
            .bytes()
            .fold(0u16, |n, b| n * 10 + u16::from(b - b'0'));
        let after = &rest[3..];
        let (goes_on, text) = match after.chars().next() {
            None => (false, ""),
            Some('-') => (true, &after[1..]),
            Some(c) if c.is_whitespace() => (false, &after[c.len_utf8()..]),
            Some(_) => return Err(malformed),
        };
        let text = text.trim();
        match &mut self.message {
            Some(m) if m.code == code => {
                if !m.text.is_empty() && !text.is_empty() {
                    m.text.push('\n');
                }
                m.text.push_str(text);
            }
            _ => {
                self.end_message()?;
                self.answer.codes.push(code);
                self.message = Some(Message {
                    code,
                    text: text.to_owned(),
                    start: at,
                });
            }
        }
        if goes_on { Ok(()) } else { self.end_message() }
    }

    /// Ends the message being read, if any: a 5xx one is a refusal.
    fn end_message(&mut self) -> Result<(), AnswerError> {
        match self.message.take() {
            Some(m) if (500..600).contains(&m.code) => Err(AnswerError::Refused {
                code: m.code,
                message: shown(&m.text, SHOWN_REFUSAL),
                line: m.start.line,
                offset: m.start.offset,
            }),
            _ => Ok(()),
        }
    }

    /// A `#` line (`rest` follows the `#`).
    fn header(&mut self, rest: &str, at: Pos) -> Result<(), AnswerError> {
        let mut words = rest.split_whitespace();
        let kind = words.next().unwrap_or("");
        if kind.eq_ignore_ascii_case("END") {
            return match self.open.take() {
                Some(block) => self.close(block),
                None => Ok(()),
            };
        }
        if let Some(open) = &self.open {
            return Err(AnswerError::NestedBlock {
                block: open.header.clone(),
                start_line: open.start.line,
                line: at.line,
                offset: at.offset,
            });
        }
        let malformed = AnswerError::MalformedHeader {
            line: at.line,
            offset: at.offset,
        };
        let kind = if kind.eq_ignore_ascii_case("FULL") {
            Kind::Record { abridged: false }
        } else if kind.eq_ignore_ascii_case("ABRIDGED") {
            Kind::Record { abridged: true }
        } else if kind.eq_ignore_ascii_case("SERVER-TO-ASK") {
            Kind::Referral
        } else if kind.eq_ignore_ascii_case("HANDLE") {
            return Ok(());
        } else if kind.is_empty() {
            return Err(malformed);
        } else {
            Kind::Skip
        };
        let words: Vec<String> = words.map(str::to_owned).collect();
        if matches!(kind, Kind::Record { .. }) && words.is_empty() {
            return Err(malformed);
        }
        self.open = Some(Block {
            kind,
            header: shown(rest.trim(), SHOWN),
            words,
            attributes: Vec::new(),
            at: Vec::new(),
            start: at,
        });
        Ok(())
    }

    /// Files a block that reached its `# END`.
    fn close(&mut self, mut block: Block) -> Result<(), AnswerError> {
        let too_many = |what, max| AnswerError::TooMany {
            what,
            max,
            line: block.start.line,
            offset: block.start.offset,
        };
        let max = self.limits.max_records;
        match block.kind {
            Kind::Skip => {}
            Kind::Record { .. } if block.is_count() => {
                let (local, referral) =
                    (block.count("Local-Count")?, block.count("Referral-Count")?);
                let (l, r) = self.answer.count.unwrap_or((0, 0));
                self.answer.count = Some((l.saturating_add(local), r.saturating_add(referral)));
            }
            Kind::Record { .. } => {
                if self.answer.records.len() >= max {
                    return Err(too_many("records", max));
                }
                let mut words = std::mem::take(&mut block.words).into_iter();
                let template = words.next().unwrap_or_default();
                let rest: Vec<String> = words.collect();
                let (server_handle, handle) = match rest.as_slice() {
                    [] => (String::new(), String::new()),
                    [handle] => (String::new(), handle.clone()),
                    [server, handle @ ..] => (server.clone(), handle.join(" ")),
                };
                self.answer.records.push(Record {
                    template,
                    server_handle,
                    handle,
                    attributes: block.attributes,
                });
            }
            Kind::Referral => {
                if self.answer.referrals.len() >= max {
                    return Err(too_many("referrals", max));
                }
                let mut port = None;
                for (value, at) in block.named("Host-Port") {
                    let p = value
                        .trim()
                        .parse::<u16>()
                        .map_err(|_| AnswerError::BadPort {
                            value: shown(value, SHOWN),
                            line: at.line,
                            offset: at.offset,
                        })?;
                    port.get_or_insert(p);
                }
                let handle = block
                    .named("Server-Handle")
                    .next()
                    .map(|(v, _)| v.trim().to_owned())
                    .or_else(|| block.words.first().cloned())
                    .unwrap_or_default();
                let host = block
                    .named("Host-Name")
                    .next()
                    .map(|(v, _)| v.trim().to_owned())
                    .unwrap_or_default();
                self.answer.referrals.push(ServerToAsk {
                    handle,
                    host,
                    port,
                    attributes: block.attributes,
                });
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<WhoisAnswer, AnswerError> {
        self.end_message()?;
        match self.open {
            Some(block) => Err(AnswerError::Unterminated {
                block: block.header,
                line: block.start.line,
                offset: block.start.offset,
            }),
            None => Ok(self.answer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ROADS: &[u8] =
        include_bytes!("../../integration-tests/tests/fixtures/roads/wppd-query-referral.s2c");

    fn parse(text: &str) -> Result<WhoisAnswer, AnswerError> {
        parse_answer(text.as_bytes(), &AnswerLimits::default())
    }

    fn attrs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// `(line, offset)` of an error.
    fn at(e: &AnswerError) -> (usize, usize) {
        (e.line(), e.offset())
    }

    /// The error's position is the start of its line in `bytes`.
    fn position_is_a_line_start(bytes: &[u8], e: &AnswerError) -> bool {
        let o = e.offset();
        o <= bytes.len()
            && (o == 0 || bytes[o - 1] == b'\n')
            && e.line() == 1 + bytes[..o].iter().filter(|&&b| b == b'\n').count()
    }

    #[test]
    fn roads_wppd_answer_parses() {
        let a = parse_answer(ROADS, &AnswerLimits::default()).unwrap();
        assert_eq!(a.codes, [220, 200, 226, 203]);
        assert_eq!(a.records.len(), 1);
        let r = &a.records[0];
        assert_eq!(r.template, "document");
        assert_eq!(r.server_handle, "roadstest01");
        assert_eq!(r.handle, "1000000001-1001");
        assert_eq!(r.attributes.len(), 6);
        assert_eq!(
            r.value("description"),
            Some("How WHOIS++ centroids are gathered and used for referrals in an index mesh. ")
        );
        assert_eq!(
            r.value("Title"),
            Some("Centroids and the Common Indexing Protocol")
        );
        assert_eq!(r.value("Keywords"), Some("centroid, indexing, whois++"));
        assert_eq!(a.referrals.len(), 1);
        let s = &a.referrals[0];
        assert_eq!(s.handle, "1.3.6.1.4.1.1828.10.127.0.0.1.18238");
        assert_eq!(s.host, "127.0.0.1");
        assert_eq!(s.port, Some(18238));
        assert_eq!(s.attributes.len(), 3);
        assert_eq!(a.count, Some((1, 1)));
    }

    /// The form `cipd::front::whoispp` writes: `-` and `+` continuations, a URI in the
    /// referral, `# HANDLE` lines without `# END`, a skipped `# SUMMARY`, a continued `% 113`.
    #[test]
    fn cipd_front_end_answer_parses() {
        let text = "% 220 ready\r\n\
            % 200 Search is executing: keywords=mesh\r\n\
            % 113-Queries: attribute=value, template=name, handle=h, a bare value;\r\n\
            % 113 colon: format=full|abridged|handle|summary\r\n\
            # FULL DOCUMENT 1.2.3 a1b2\r\n URI: http://h/x\r\n Description: first line\r\n\
            -second li\r\n+ne\r\n# END\r\n\r\n\
            # ABRIDGED DOCUMENT 1.2.3 c3\r\n Title: Meshes\r\n Jon Knight\tjon@example.org\r\n# END\r\n\
            # HANDLE DOCUMENT 1.2.3 a1b2\r\n\
            # HANDLE DOCUMENT 1.2.3 c3\r\n\
            # SUMMARY 1.2.3\r\n Matches: 2\r\n Templates: DOCUMENT\r\n# END\r\n\
            # SERVER-TO-ASK 9.9\r\n Server-Handle: 9.9\r\n Host-Name: wpp.example\r\n \
            Host-Port: 63\r\n URI: whoispp://wpp.example:63/\r\n# END\r\n\r\n\
            % 226 Transaction complete\r\n% 203 Bye\r\n";
        let a = parse(text).unwrap();
        assert_eq!(a.codes, [220, 200, 113, 226, 203]);
        assert_eq!(a.records.len(), 2);
        assert_eq!(
            a.records[0].value("Description"),
            Some("first line\nsecond line")
        );
        assert_eq!(
            a.records[1].attributes,
            attrs(&[("Title", "Meshes"), ("", "Jon Knight\tjon@example.org")])
        );
        assert_eq!(a.referrals.len(), 1);
        assert_eq!(a.referrals[0].host, "wpp.example");
        assert_eq!(a.referrals[0].port, Some(63));
        assert_eq!(
            a.referrals[0].value("uri"),
            Some("whoispp://wpp.example:63/")
        );
        assert_eq!(a.count, None);
    }

    #[test]
    fn referral_handle_falls_back_to_the_header_and_port_is_optional() {
        let a = parse("# SERVER-TO-ASK 7.7\n Host-Name: h\n# END\n").unwrap();
        assert_eq!(a.referrals[0].handle, "7.7");
        assert_eq!(a.referrals[0].port, None);
        let a = parse("# SERVER-TO-ASK\n# END\n").unwrap();
        assert_eq!(a.referrals[0], ServerToAsk::default());
    }

    #[test]
    fn count_blocks_fill_count_not_records() {
        let a = parse("# FULL X s h\n Local-Count: 3\n# END\n# FULL count s HITS\n Referral-Count: 2\n# END\n")
            .unwrap();
        assert!(a.records.is_empty());
        assert_eq!(a.count, Some((3, 2)));
        let a = parse("# FULL X s h\n Local-Count: 3\n Title: t\n# END\n").unwrap();
        assert_eq!(
            a.records.len(),
            1,
            "a record that also has a count attribute"
        );
        assert_eq!(a.count, None);
    }

    #[test]
    fn lf_and_crlf_give_the_same_answer_and_values_keep_their_text() {
        let lf = "% 200 ok\n# FULL t s h\n A:  two spaces\n B:x\n C: trailing \n+ more\n# END\n";
        let crlf = lf.replace('\n', "\r\n");
        let a = parse(lf).unwrap();
        assert_eq!(a, parse(&crlf).unwrap());
        assert_eq!(
            a.records[0].attributes,
            attrs(&[("A", " two spaces"), ("B", "x"), ("C", "trailing  more")])
        );
        // Keywords ignore case; a header with only a handle; a stray `# END`.
        let a = parse("#full t h\n#end\n# END\n").unwrap();
        assert_eq!(
            (
                a.records[0].server_handle.as_str(),
                a.records[0].handle.as_str()
            ),
            ("", "h")
        );
    }

    #[test]
    fn latin1_lines_are_read_as_iso_8859_1() {
        let mut bytes = b"% 200 ok\r\n# FULL user s h\xe9\r\n Name: Jos\xe9 Mar\xeda\r\n".to_vec();
        bytes.extend_from_slice(" City: Malm\u{f6}\r\n# END\r\n".as_bytes());
        bytes.extend_from_slice(b"% 226 \xe9\r\n");
        let a = parse_answer(&bytes, &AnswerLimits::default()).unwrap();
        let r = &a.records[0];
        assert_eq!(r.handle, "h\u{e9}");
        assert_eq!(r.value("name"), Some("Jos\u{e9} Mar\u{ed}a"));
        assert_eq!(
            r.value("city"),
            Some("Malm\u{f6}"),
            "UTF-8 lines stay UTF-8"
        );
        assert_eq!(a.codes, [200, 226]);
    }

    #[test]
    fn refusals_are_errors() {
        let e = parse("% 220 hi\r\n% 500 Syntax error: column 3\r\n% 203 Bye\r\n").unwrap_err();
        assert_eq!(
            e,
            AnswerError::Refused {
                code: 500,
                message: "Syntax error: column 3".into(),
                line: 2,
                offset: 10,
            }
        );
        let e = parse("% 220 hi\n% 530-Authentication\n% 530 failed\n").unwrap_err();
        assert!(
            matches!(&e, AnswerError::Refused { code: 530, message, line: 2, offset: 9 }
                if message == "Authentication\nfailed"),
            "{e:?}"
        );
        // A continued 5xx at the end of the input is still a refusal.
        let e = parse("% 502-too complicated").unwrap_err();
        assert_eq!((at(&e), e.to_string().contains("502")), ((1, 0), true));
    }

    #[test]
    fn errors_say_line_and_offset() {
        let cases: &[(&str, (usize, usize), &str)] = &[
            ("% 200 ok\n Title: x\n", (2, 9), "OutsideBlock"),
            ("% 200 ok\n+more\n", (2, 9), "OutsideBlock"),
            ("% 200 ok\r\nstray text\r\n", (2, 10), "OutsideBlock"),
            ("% 200 ok\n# FULL t s h\n A: b\n", (2, 9), "Unterminated"),
            ("# FULL t s h\n# SUMMARY s\n# END\n", (2, 13), "NestedBlock"),
            (
                "# FULL t s h\n no colon here\n# END\n",
                (2, 13),
                "MalformedAttribute",
            ),
            (
                "# FULL t s h\n two words: x\n# END\n",
                (2, 13),
                "MalformedAttribute",
            ),
            (
                "# FULL t s h\nTitle: x\n# END\n",
                (2, 13),
                "MalformedAttribute",
            ),
            ("# FULL t s h\n+x\n# END\n", (2, 13), "DanglingContinuation"),
            ("#\n", (1, 0), "MalformedHeader"),
            ("# FULL\n# END\n", (1, 0), "MalformedHeader"),
            ("% 200 ok\n%20 x\n", (2, 9), "MalformedMessage"),
            ("%2000\n", (1, 0), "MalformedMessage"),
            (
                "# SERVER-TO-ASK a\n Host-Name: h\n Host-Port: 70000\n# END\n",
                (3, 32),
                "BadPort",
            ),
            (
                "# SERVER-TO-ASK a\n Host-Port: 8\n+x\n# END\n",
                (2, 18),
                "BadPort",
            ),
            (
                "# FULL COUNT s HITS\n Local-Count: many\n# END\n",
                (2, 20),
                "BadCount",
            ),
        ];
        for (text, position, kind) in cases {
            let e = parse(text).unwrap_err();
            assert_eq!(at(&e), *position, "{text:?}: {e}");
            assert!(format!("{e:?}").starts_with(kind), "{text:?}: {e:?}");
            assert!(position_is_a_line_start(text.as_bytes(), &e));
            let line = format!("line {} (byte {})", position.0, position.1);
            assert!(e.to_string().starts_with(&line), "{e}");
        }
        let e = parse("% 200 ok\n# FULL document srv h1\n A: b\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2 (byte 9): `# FULL document srv h1` has no `# END` before the input ends"
        );
        let e = parse("# FULL t s h\n A: b\n# SERVER-TO-ASK x\n").unwrap_err();
        assert!(
            matches!(&e, AnswerError::NestedBlock { block, start_line: 1, line: 3, offset: 19 }
                if block == "FULL t s h"),
            "{e:?}"
        );
    }

    #[test]
    fn limits_are_enforced() {
        let limits = AnswerLimits {
            max_bytes: 30,
            max_records: 2,
            max_line: 16,
        };
        // 33 bytes: the 31st is on line 4, which starts at byte 20.
        let text = b"% 200 0123456789\n#\n\n% 200 0123456";
        let e = parse_answer(&text[..], &limits).unwrap_err();
        assert_eq!(
            e,
            AnswerError::TooLarge {
                max: 30,
                line: 4,
                offset: 20
            }
        );
        let e = parse_answer(&text[..30], &limits).unwrap_err();
        assert!(
            matches!(
                e,
                AnswerError::MalformedHeader {
                    line: 2,
                    offset: 17
                }
            ),
            "{e:?}"
        );
        let long_lines = AnswerLimits {
            max_line: 16,
            ..AnswerLimits::default()
        };
        let e = parse_answer(b"% 200 0123456789\r\n% 200 01234567890\n", &long_lines).unwrap_err();
        assert_eq!(
            e,
            AnswerError::LineTooLong {
                max: 16,
                line: 2,
                offset: 18
            }
        );

        let limits = AnswerLimits {
            max_records: 2,
            ..AnswerLimits::default()
        };
        let records = "# FULL t s a\n# END\n# FULL t s b\n# END\n";
        assert_eq!(
            parse_answer(records.as_bytes(), &limits)
                .unwrap()
                .records
                .len(),
            2
        );
        let e = parse_answer(
            format!("{records}# FULL t s c\n# END\n").as_bytes(),
            &limits,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                AnswerError::TooMany {
                    what: "records",
                    max: 2,
                    line: 5,
                    offset: 38
                }
            ),
            "{e:?}"
        );
        let referrals = "# SERVER-TO-ASK a\n# END\n".repeat(3);
        let e = parse_answer(referrals.as_bytes(), &limits).unwrap_err();
        assert!(
            matches!(
                e,
                AnswerError::TooMany {
                    what: "referrals",
                    line: 5,
                    offset: 48,
                    ..
                }
            ),
            "{e:?}"
        );
        // Count blocks are not records.
        let counts = format!("{records}# FULL COUNT s HITS\n Local-Count: 1\n# END\n");
        assert!(parse_answer(counts.as_bytes(), &limits).is_ok());
        assert_eq!(parse(""), Ok(WhoisAnswer::default()));
    }

    /// One piece of a written answer.
    #[derive(Debug, Clone)]
    enum Item {
        Message(u16, String),
        Record(Record),
        Referral(ServerToAsk),
        Count(u64, u64),
        Handle,
        Summary,
        Blank,
    }

    /// Attribute names the parser reads a meaning into.
    const RESERVED: &[&str] = &[
        "Local-Count",
        "Referral-Count",
        "Host-Port",
        "Host-Name",
        "Server-Handle",
    ];

    fn name() -> impl Strategy<Value = String> {
        "[A-Z][a-z]{0,8}(-[A-Z][a-z]{0,5})?".prop_filter("reserved", |n| {
            !RESERVED.iter().any(|r| r.eq_ignore_ascii_case(n))
        })
    }

    fn value() -> impl Strategy<Value = String> {
        proptest::collection::vec("[ -~\u{e0}-\u{ff}\u{20ac}]{0,90}", 1..4)
            .prop_map(|lines| lines.join("\n"))
    }

    fn attributes(max: usize) -> impl Strategy<Value = Vec<(String, String)>> {
        proptest::collection::vec((name(), value()), 0..max)
    }

    fn item() -> impl Strategy<Value = Item> {
        let record = (
            "[a-z][a-z0-9_]{0,11}".prop_filter("count", |t| t != "count"),
            "[A-Za-z0-9.]{1,12}",
            "[A-Za-z0-9.-]{1,16}",
            attributes(6),
        )
            .prop_map(|(template, server_handle, handle, attributes)| {
                Item::Record(Record {
                    template,
                    server_handle,
                    handle,
                    attributes,
                })
            });
        let referral = (
            "[0-9]{1,4}(\\.[0-9]{1,4}){0,6}",
            "[a-z0-9.-]{1,20}",
            proptest::option::of(any::<u16>()),
            attributes(3),
        )
            .prop_map(|(handle, host, port, extra)| {
                let mut attributes = vec![
                    ("Server-Handle".to_owned(), handle.clone()),
                    ("Host-Name".to_owned(), host.clone()),
                ];
                if let Some(p) = port {
                    attributes.push(("Host-Port".to_owned(), p.to_string()));
                }
                attributes.extend(extra);
                Item::Referral(ServerToAsk {
                    handle,
                    host,
                    port,
                    attributes,
                })
            });
        prop_oneof![
            (100u16..500, "[ -~]{0,30}").prop_map(|(c, t)| Item::Message(c, t)),
            record,
            referral,
            (any::<u32>(), any::<u32>()).prop_map(|(l, r)| Item::Count(l.into(), r.into())),
            Just(Item::Handle),
            Just(Item::Summary),
            Just(Item::Blank),
        ]
    }

    /// Writes ` Name: value` as a server would: later lines of the value as `-` lines, and
    /// every 30 characters a `+` line.
    fn write_attribute(out: &mut String, name: &str, value: &str, eol: &str) {
        for (i, line) in value.split('\n').enumerate() {
            let mut lead = if i == 0 {
                format!(" {name}: ")
            } else {
                "-".to_owned()
            };
            let chars: Vec<char> = line.chars().collect();
            let mut rest = &chars[..];
            loop {
                let cut = rest.len().min(30);
                out.push_str(&lead);
                out.extend(&rest[..cut]);
                out.push_str(eol);
                rest = &rest[cut..];
                if rest.is_empty() {
                    break;
                }
                lead = "+".to_owned();
            }
        }
    }

    /// The answer a server would send for `items`, and what parsing it must give.
    fn write_answer(items: &[Item], eol: &str) -> (String, WhoisAnswer) {
        let mut out = String::new();
        let mut expected = WhoisAnswer::default();
        for item in items {
            match item {
                Item::Message(code, text) => {
                    out.push_str(&format!("% {code} {text}{eol}"));
                    expected.codes.push(*code);
                }
                Item::Record(r) => {
                    out.push_str(&format!(
                        "# FULL {} {} {}{eol}",
                        r.template, r.server_handle, r.handle
                    ));
                    for (n, v) in &r.attributes {
                        write_attribute(&mut out, n, v, eol);
                    }
                    out.push_str(&format!("# END{eol}"));
                    expected.records.push(r.clone());
                }
                Item::Referral(s) => {
                    out.push_str(&format!("# SERVER-TO-ASK {}{eol}", s.handle));
                    for (n, v) in &s.attributes {
                        write_attribute(&mut out, n, v, eol);
                    }
                    out.push_str(&format!("# END{eol}"));
                    expected.referrals.push(s.clone());
                }
                Item::Count(l, r) => {
                    out.push_str(&format!(
                        "# FULL COUNT srv HITS{eol} Local-Count: {l}{eol} Referral-Count: {r}{eol}# END{eol}"
                    ));
                    let (cl, cr) = expected.count.unwrap_or((0, 0));
                    expected.count = Some((cl + l, cr + r));
                }
                Item::Handle => out.push_str(&format!("# HANDLE DOCUMENT srv h1{eol}")),
                Item::Summary => out.push_str(&format!(
                    "# SUMMARY srv{eol} Matches: 2{eol} Templates: DOCUMENT{eol}# END{eol}"
                )),
                Item::Blank => out.push_str(eol),
            }
        }
        (out, expected)
    }

    proptest! {
        /// What a server writes reads back as written, with either line end.
        #[test]
        fn written_answers_round_trip(
            items in proptest::collection::vec(item(), 0..12),
            crlf in any::<bool>(),
        ) {
            let (text, expected) = write_answer(&items, if crlf { "\r\n" } else { "\n" });
            prop_assert_eq!(parse(&text), Ok(expected), "{}", text);
        }

        /// Random bytes: no panic, limits hold, errors point at line starts.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            check_any(&bytes);
        }

        /// Answer-like noise: no panic, limits hold, errors point at line starts.
        #[test]
        fn answer_noise_never_panics(
            pieces in proptest::collection::vec(proptest::sample::select(vec![
                "% 200 ok", "% 113-", "% 113 x", "% 500 no", "%", "#", "# FULL", " t s h",
                "# ABRIDGED", "# SERVER-TO-ASK", "# HANDLE", "# SUMMARY", "# END", "# COUNT",
                " Host-Port: ", "99999", "80", " Host-Name: h", " Local-Count: ", "7",
                " Title: x", " Title", ":", "+", "-", " ", "\t", "\n", "\r\n", "\r", "\u{e9}",
                "\u{ff}", "\u{20ac}",
            ]), 0..60),
        ) {
            let mut bytes = pieces.concat().into_bytes();
            if bytes.len() > 3 {
                bytes[3] ^= 0x80; // sometimes not UTF-8
            }
            check_any(&bytes);
        }
    }

    fn check_any(bytes: &[u8]) {
        let limits = AnswerLimits {
            max_bytes: 400,
            max_records: 3,
            max_line: 40,
        };
        match parse_answer(bytes, &limits) {
            Ok(a) => {
                assert!(a.records.len() <= limits.max_records);
                assert!(a.referrals.len() <= limits.max_records);
                assert!(a.records.iter().all(|r| !r.template.is_empty()));
            }
            Err(e) => {
                assert!(position_is_a_line_start(bytes, &e), "{e:?}");
                let _ = e.to_string();
            }
        }
    }
}
