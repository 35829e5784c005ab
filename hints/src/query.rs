//! The routing query language: `Template:Attribute=value`, `Attribute~value` and `&`.
//!
//! ```text
//! query     = term *( "&" term )            ; whitespace allowed around terms
//! term      = [ template ":" ] attribute op value
//! template  = 1*name-char
//! attribute = 1*name-char                   ; a multi-value suffix (`Author-2`) is folded
//! name-char = ALPHA / DIGIT / "-" / "_" / "."
//! op        = "=" / "~"                     ; exact / substring, both ASCII-case-insensitive
//! value     = quoted / bare
//! quoted    = DQUOTE *( %x00-21 / %x23-5B / %x5D-10FFFF / "\" any ) DQUOTE
//! bare      = 1*( any char but "&" and "\" / "\" any )   ; surrounding whitespace trimmed
//! ```
//!
//! A backslash takes the next character literally (`\&`, `\\`, `\"`, `\ `), in bare and
//! quoted values alike. A value may not be empty. Errors carry the offset, in characters,
//! of the offending character and what the parser expected there.
//!
//! Matching (RFC 2655 §4): attribute names compare case-insensitively on the part before
//! any `-N` suffix; a term without a template matches the attribute in every template; `=`
//! compares values ignoring ASCII case, `~` looks for the value as an ASCII-case-insensitive
//! substring (`Author~Garcia` matches `Jose Garcia y Montes`). A conjunction matches a peer
//! only when every term does.

use std::fmt;

use bytes::Bytes;
use cip_proto::soif::attr::base_name;

/// Default for [`QueryLimits::max_terms`].
pub const DEFAULT_MAX_TERMS: usize = 16;
/// Default for [`QueryLimits::max_len`].
pub const DEFAULT_MAX_QUERY_LEN: usize = 4096;

/// Bounds on what [`Query::parse_with_limits`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryLimits {
    /// Most `&`-joined terms in one query.
    pub max_terms: usize,
    /// Longest query text, in bytes.
    pub max_len: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        Self {
            max_terms: DEFAULT_MAX_TERMS,
            max_len: DEFAULT_MAX_QUERY_LEN,
        }
    }
}

/// How a term compares its value with the values a peer reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchOp {
    /// `=`: equal ignoring ASCII case.
    Exact,
    /// `~`: the term's value occurs in the reported value, ignoring ASCII case.
    Substring,
}

impl MatchOp {
    /// The operator character.
    pub fn symbol(self) -> char {
        match self {
            Self::Exact => '=',
            Self::Substring => '~',
        }
    }
}

/// One `[Template:]Attribute op value` term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Term {
    /// The template, as spelled; `None` matches any template.
    pub template: Option<String>,
    /// The attribute, as spelled (a multi-value suffix is ignored when matching).
    pub attribute: String,
    /// Exact or substring.
    pub op: MatchOp,
    /// The value, unescaped.
    pub value: Bytes,
}

impl Term {
    /// The template, ASCII-lowercased, for lookups.
    pub fn template_key(&self) -> Option<String> {
        self.template.as_deref().map(str::to_ascii_lowercase)
    }

    /// The attribute without multi-value suffix, ASCII-lowercased, for lookups.
    pub fn attribute_key(&self) -> String {
        base_name(&self.attribute).to_ascii_lowercase()
    }
}

/// A parsed query: one or more terms, all of which must match.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Query {
    terms: Vec<Term>,
}

/// Why a query did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// A character (or the end) that the grammar does not allow there.
    #[error("at character {offset}: expected {expected}, found {}", show_found(*found))]
    Unexpected {
        /// Offset of the offending character, in characters from the start.
        offset: usize,
        /// What the grammar allows at that point.
        expected: &'static str,
        /// The character found, `None` at the end of the query.
        found: Option<char>,
    },
    /// More terms than [`QueryLimits::max_terms`].
    #[error("at character {offset}: query has more than {max} terms")]
    TooManyTerms {
        /// Offset of the `&` that starts the first term over the limit.
        offset: usize,
        /// The limit.
        max: usize,
    },
    /// Longer than [`QueryLimits::max_len`].
    #[error("query is {len} bytes long, the limit is {max}")]
    TooLong {
        /// Length of the query in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl QueryError {
    /// Character offset the error points at, when it points at one.
    pub fn offset(&self) -> Option<usize> {
        match self {
            Self::Unexpected { offset, .. } | Self::TooManyTerms { offset, .. } => Some(*offset),
            Self::TooLong { .. } => None,
        }
    }
}

fn show_found(found: Option<char>) -> String {
    match found {
        Some(c) => format!("{c:?}"),
        None => "end of query".to_owned(),
    }
}

impl Query {
    /// Parses `s` with the default [`QueryLimits`].
    ///
    /// # Errors
    /// [`QueryError`] with the offset of the first offending character.
    pub fn parse(s: &str) -> Result<Self, QueryError> {
        Self::parse_with_limits(s, &QueryLimits::default())
    }

    /// Parses `s`, refusing queries beyond `limits`.
    ///
    /// # Errors
    /// [`QueryError`] with the offset of the first offending character.
    pub fn parse_with_limits(s: &str, limits: &QueryLimits) -> Result<Self, QueryError> {
        if s.len() > limits.max_len {
            return Err(QueryError::TooLong {
                len: s.len(),
                max: limits.max_len,
            });
        }
        let mut p = Parser {
            chars: s.chars().collect(),
            pos: 0,
        };
        let mut terms = vec![p.term()?];
        loop {
            p.skip_ws();
            match p.peek() {
                None => break,
                Some('&') => {
                    if terms.len() >= limits.max_terms {
                        return Err(QueryError::TooManyTerms {
                            offset: p.pos,
                            max: limits.max_terms,
                        });
                    }
                    p.pos += 1;
                    terms.push(p.term()?);
                }
                Some(_) => return Err(p.unexpected("'&' or end of query")),
            }
        }
        Ok(Self { terms })
    }

    /// Builds a query from terms; `None` when `terms` is empty or a term has an empty value
    /// or name.
    pub fn from_terms(terms: Vec<Term>) -> Option<Self> {
        let ok = !terms.is_empty()
            && terms.iter().all(|t| {
                !t.value.is_empty()
                    && valid_name(&t.attribute)
                    && t.template.as_deref().is_none_or(valid_name)
            });
        ok.then_some(Self { terms })
    }

    /// The terms, in query order.
    pub fn terms(&self) -> &[Term] {
        &self.terms
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(is_name_char)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn unexpected(&self, expected: &'static str) -> QueryError {
        QueryError::Unexpected {
            offset: self.pos,
            expected,
            found: self.peek(),
        }
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    fn name(&mut self, expected: &'static str) -> Result<String, QueryError> {
        let start = self.pos;
        while self.peek().is_some_and(is_name_char) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.unexpected(expected));
        }
        Ok(self.chars[start..self.pos].iter().collect())
    }

    fn term(&mut self) -> Result<Term, QueryError> {
        self.skip_ws();
        let first = self.name("a template or attribute name")?;
        let (template, attribute) = if self.peek() == Some(':') {
            self.pos += 1;
            (Some(first), self.name("an attribute name")?)
        } else {
            (None, first)
        };
        self.skip_ws();
        let op = match self.peek() {
            Some('=') => MatchOp::Exact,
            Some('~') => MatchOp::Substring,
            _ => return Err(self.unexpected("'=' or '~'")),
        };
        self.pos += 1;
        self.skip_ws();
        let value = if self.peek() == Some('"') {
            self.quoted()?
        } else {
            self.bare()?
        };
        Ok(Term {
            template,
            attribute,
            op,
            value: Bytes::from(value.into_bytes()),
        })
    }

    fn escaped(&mut self) -> Result<char, QueryError> {
        // At a backslash: take the next character literally.
        self.pos += 1;
        let c = self
            .peek()
            .ok_or_else(|| self.unexpected("a character after '\\'"))?;
        self.pos += 1;
        Ok(c)
    }

    fn quoted(&mut self) -> Result<String, QueryError> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => return Err(self.unexpected("'\"' closing the value")),
                Some('"') => {
                    self.pos += 1;
                    break;
                }
                Some('\\') => out.push(self.escaped()?),
                Some(c) => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
        if out.is_empty() {
            self.pos -= 1;
            return Err(self.unexpected("a non-empty value"));
        }
        Ok(out)
    }

    fn bare(&mut self) -> Result<String, QueryError> {
        let mut out = String::new();
        // Length of `out` up to its last character that is not unescaped whitespace.
        let mut keep = 0;
        loop {
            match self.peek() {
                None | Some('&') => break,
                Some('\\') => {
                    out.push(self.escaped()?);
                    keep = out.len();
                }
                Some(c) => {
                    out.push(c);
                    if !c.is_whitespace() {
                        keep = out.len();
                    }
                    self.pos += 1;
                }
            }
        }
        out.truncate(keep);
        if out.is_empty() {
            return Err(self.unexpected("a value"));
        }
        Ok(out)
    }
}

impl fmt::Display for Term {
    /// Canonical text that [`Query::parse`] reads back to the same term.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(t) = &self.template {
            write!(f, "{t}:")?;
        }
        write!(f, "{}{}", self.attribute, self.op.symbol())?;
        let text = String::from_utf8_lossy(&self.value);
        let needs_quotes = text.starts_with(char::is_whitespace)
            || text.ends_with(char::is_whitespace)
            || text.starts_with('"');
        if needs_quotes {
            f.write_str("\"")?;
        }
        for c in text.chars() {
            if matches!(c, '&' | '\\' | '"') {
                f.write_str("\\")?;
            }
            write!(f, "{c}")?;
        }
        if needs_quotes {
            f.write_str("\"")?;
        }
        Ok(())
    }
}

impl fmt::Display for Query {
    /// Canonical text: terms joined by ` & `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(" & ")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Query {
    type Err = QueryError;
    fn from_str(s: &str) -> Result<Self, QueryError> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn term(q: &Query, i: usize) -> (&Option<String>, &str, MatchOp, &[u8]) {
        let t = &q.terms()[i];
        (&t.template, t.attribute.as_str(), t.op, &t.value[..])
    }

    #[test]
    fn simple_forms() {
        let q = Query::parse("DOCUMENT:Author=Garcia").unwrap();
        assert_eq!(
            term(&q, 0),
            (
                &Some("DOCUMENT".into()),
                "Author",
                MatchOp::Exact,
                &b"Garcia"[..]
            )
        );
        let q = Query::parse("  Author ~  Jose Garcia  ").unwrap();
        assert_eq!(
            term(&q, 0),
            (&None, "Author", MatchOp::Substring, &b"Jose Garcia"[..])
        );
        let q = Query::parse("Author=Garcia & IMAGE:Subject~moon").unwrap();
        assert_eq!(q.terms().len(), 2);
        assert_eq!(
            term(&q, 1),
            (
                &Some("IMAGE".into()),
                "Subject",
                MatchOp::Substring,
                &b"moon"[..]
            )
        );
    }

    #[test]
    fn escapes_and_quotes() {
        let q = Query::parse(r"Title=Fish \& Chips").unwrap();
        assert_eq!(&q.terms()[0].value[..], b"Fish & Chips");
        let q = Query::parse(r#"Title=" a & b " & Author=x"#).unwrap();
        assert_eq!(&q.terms()[0].value[..], b" a & b ");
        let q = Query::parse(r#"Title="say \"hi\"""#).unwrap();
        assert_eq!(&q.terms()[0].value[..], br#"say "hi""#);
        let q = Query::parse(r"Title=trailing\ ").unwrap();
        assert_eq!(&q.terms()[0].value[..], b"trailing ");
        let q = Query::parse("Author=Aldrin, Buzz").unwrap();
        assert_eq!(&q.terms()[0].value[..], b"Aldrin, Buzz");
    }

    #[test]
    fn errors_point_at_the_character() {
        let e = Query::parse("Author Garcia").unwrap_err();
        assert_eq!(
            e,
            QueryError::Unexpected {
                offset: 7,
                expected: "'=' or '~'",
                found: Some('G')
            }
        );
        assert_eq!(
            e.to_string(),
            "at character 7: expected '=' or '~', found 'G'"
        );
        let e = Query::parse("Author=").unwrap_err();
        assert_eq!(e.offset(), Some(7));
        let e = Query::parse("Author=x & ").unwrap_err();
        assert_eq!(e.offset(), Some(11));
        assert!(e.to_string().contains("end of query"));
        let e = Query::parse("DOC:=x").unwrap_err();
        assert_eq!(e.offset(), Some(4));
        let e = Query::parse(r#"Author="abc"x"#).unwrap_err();
        assert_eq!(e.offset(), Some(12));
        let e = Query::parse(r#"Author="abc"#).unwrap_err();
        assert_eq!(e.offset(), Some(11));
        let e = Query::parse(r"Author=abc\").unwrap_err();
        assert_eq!(e.offset(), Some(11));
        let e = Query::parse(r#"Author="""#).unwrap_err();
        assert_eq!(e.offset(), Some(8));
        // Offsets count characters, not bytes.
        let e = Query::parse("Autör=x").unwrap_err();
        assert_eq!(e.offset(), Some(3));
    }

    #[test]
    fn limits() {
        let many = vec!["a=b"; 20].join("&");
        assert!(matches!(
            Query::parse(&many),
            Err(QueryError::TooManyTerms { max: 16, .. })
        ));
        let long = format!("a={}", "x".repeat(5000));
        assert!(matches!(
            Query::parse(&long),
            Err(QueryError::TooLong { .. })
        ));
    }

    #[test]
    fn keys_fold_case_and_suffix() {
        let q = Query::parse("Document:Author-2=x").unwrap();
        assert_eq!(q.terms()[0].template_key().as_deref(), Some("document"));
        assert_eq!(q.terms()[0].attribute_key(), "author");
    }

    proptest! {
        #[test]
        fn display_round_trips(
            terms in prop::collection::vec(
                (
                    prop::option::of("[A-Za-z][A-Za-z0-9_.-]{0,8}"),
                    "[A-Za-z][A-Za-z0-9_.-]{0,8}",
                    any::<bool>(),
                    "[ -~]{1,12}|[ a&\\\\\"é]{1,6}",
                ),
                1..5,
            )
        ) {
            let terms: Vec<Term> = terms
                .into_iter()
                .map(|(template, attribute, sub, value)| Term {
                    template,
                    attribute,
                    op: if sub { MatchOp::Substring } else { MatchOp::Exact },
                    value: Bytes::from(value.into_bytes()),
                })
                .collect();
            prop_assume!(terms.iter().all(|t| !t.value.iter().all(u8::is_ascii_whitespace)));
            let q = Query::from_terms(terms).unwrap();
            let text = q.to_string();
            prop_assert_eq!(Query::parse(&text).unwrap(), q, "{}", text);
        }

        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = Query::parse(&s);
        }
    }
}
