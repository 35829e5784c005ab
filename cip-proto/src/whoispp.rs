//! Whois++ queries (RFC 1835 §3): the query line a client sends, parsed into conjunctions
//! (disjunctive normal form) and global constraints. No I/O and no matching: the daemon
//! evaluates the conjunctions against its records and routing table.
//!
//! ```text
//! line        = query [ ":" global *( ";" global ) ]          ; globals after the last ":"
//! query       = disjunct *( "or" disjunct )
//! disjunct    = unary *( [ "and" ] unary )                      ; juxtaposition is "and"
//! unary       = "not" term / "(" query ")" / term
//! term        = [ name "=" ] value *( ";" local )   ; local: search=...; format=, maxhits=,
//!                                                     ; maxfull= and hold count as globals
//! name        = "template" / "handle" / "value" / attribute
//! global      = "format=" ( "full" / "abridged" / "handle" / "summary" / "server-to-ask" )
//!             / "maxhits=" N / "maxfull=" N / "search=" ( "exact" / "substring" / "lstring" )
//!             / "hold" / "chase" / "case=" ( "ignore" ) / other (kept in `ignored`)
//! ```
//!
//! `not` applies to a single term; `not template=x` and `not handle=x` are kept as
//! excluded terms on the reserved attributes [`TEMPLATE_ATTRIBUTE`] and
//! [`HANDLE_ATTRIBUTE`].

/// The attribute an excluded `template=` term is kept under (no real name holds a NUL).
pub const TEMPLATE_ATTRIBUTE: &str = "\u{0}template";

/// The attribute an excluded `handle=` term is kept under.
pub const HANDLE_ATTRIBUTE: &str = "\u{0}handle";

/// Most conjunctions a query may expand to (`(a or b) and (c or d)` is four).
pub const MAX_DISJUNCTS: usize = 64;

/// How a value is compared with a term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    /// The value equals the term or holds it as a word (RFC 1835 `exact`, as Whois++
    /// servers index words).
    Exact,
    /// The term occurs anywhere in the value.
    Substring,
    /// A word of the value starts with the term.
    Prefix,
}

/// One `name=value` term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// The attribute, or `None` for any attribute.
    pub attribute: Option<String>,
    /// The value looked for.
    pub value: String,
    /// How it is compared.
    pub search: Search,
}

/// One conjunction of the query in disjunctive normal form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conjunction {
    /// `template=`: only records of this template.
    pub template: Option<String>,
    /// `handle=`: only the record with this handle.
    pub handle: Option<String>,
    /// Terms every record must match.
    pub terms: Vec<Term>,
    /// `not` terms no record may match.
    pub excluded: Vec<Term>,
}

/// The answer's form (`format=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Whole records.
    Full,
    /// A record's template, handle and title.
    Abridged,
    /// Only templates and handles.
    Handle,
    /// How many records, of which templates.
    Summary,
    /// Only referrals.
    ServerToAsk,
}

/// The global constraints of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Globals {
    /// `format=`.
    pub format: Format,
    /// `maxhits=`: most records returned.
    pub max_hits: usize,
    /// `maxfull=`: more records than this are answered as a summary.
    pub max_full: usize,
    /// `hold`: keep the connection open for another query.
    pub hold: bool,
    /// `chase` (this implementation's constraint): the server chases the referrals itself
    /// and answers with the records of the whole mesh, each under the handle of the server
    /// that holds it.
    pub chase: bool,
    /// Constraints not understood (answered with `% 112`, then ignored).
    pub ignored: Vec<String>,
}

/// A parsed query line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhoisQuery {
    /// The query as conjunctions, any of which may match.
    pub disjuncts: Vec<Conjunction>,
    /// Its global constraints.
    pub globals: Globals,
}

/// Why a query line cannot be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {message}")]
pub struct SyntaxError {
    /// 1-based column of the offending token.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// Parses a query line with `default_max_hits` as the `maxhits` default and cap.
///
/// # Errors
/// [`SyntaxError`] with the column of the first problem.
pub fn parse(line: &str, default_max_hits: usize) -> Result<WhoisQuery, SyntaxError> {
    let (query, globals_text, globals_at) = split_globals(line);
    let mut globals = Globals {
        format: Format::Full,
        max_hits: default_max_hits,
        max_full: default_max_hits,
        hold: false,
        chase: false,
        ignored: Vec::new(),
    };
    let mut search = Search::Exact;
    if let Some(text) = globals_text {
        let mut at = globals_at;
        for c in text.split(';') {
            apply_global(c.trim(), at, &mut globals, &mut search, default_max_hits)?;
            at += c.len() + 1;
        }
    }
    let tokens = tokenize(query);
    if tokens.is_empty() {
        return Err(SyntaxError {
            column: 1,
            message: "empty query".into(),
        });
    }
    let mut p = Parser {
        tokens,
        at: 0,
        search,
        globals: Vec::new(),
    };
    let expr = p.or_expr()?;
    if let Some(t) = p.tokens.get(p.at) {
        return Err(SyntaxError {
            column: t.column,
            message: format!("unexpected {:?}", t.text),
        });
    }
    for (c, column) in std::mem::take(&mut p.globals) {
        apply_global(&c, column, &mut globals, &mut search, default_max_hits)?;
    }
    let disjuncts = dnf(&expr)?.into_iter().filter_map(conjunction).collect();
    Ok(WhoisQuery { disjuncts, globals })
}

/// Splits `query:globals` at the last `:` whose right side reads as constraints (a value
/// may hold a `:` of its own, as URLs do).
fn split_globals(line: &str) -> (&str, Option<&str>, usize) {
    if let Some(i) = line.rfind(':') {
        let rest = &line[i + 1..];
        let looks = rest.split(';').all(|c| {
            let name = c.split('=').next().unwrap_or("").trim();
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
        if looks {
            return (&line[..i], Some(rest), i + 2);
        }
    }
    (line, None, 0)
}

fn apply_global(
    c: &str,
    column: usize,
    g: &mut Globals,
    search: &mut Search,
    cap: usize,
) -> Result<(), SyntaxError> {
    let (name, value) = match c.split_once('=') {
        Some((n, v)) => (n.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase()),
        None => (c.trim().to_ascii_lowercase(), String::new()),
    };
    let number = |v: &str| {
        v.parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| SyntaxError {
                column,
                message: format!("{name}={v:?}: expected a positive number"),
            })
    };
    match (name.as_str(), value.as_str()) {
        ("format", "full") => g.format = Format::Full,
        ("format", "abridged") => g.format = Format::Abridged,
        ("format", "handle") => g.format = Format::Handle,
        ("format", "summary") => g.format = Format::Summary,
        ("format", "server-to-ask") => g.format = Format::ServerToAsk,
        ("maxhits", v) => g.max_hits = number(v)?.min(cap),
        ("maxfull", v) => g.max_full = number(v)?,
        ("hold", "" | "on" | "true" | "y") => g.hold = true,
        ("chase", "" | "on" | "true" | "y") => g.chase = true,
        ("search", v) => {
            *search = search_named(v).ok_or_else(|| SyntaxError {
                column,
                message: format!("search={v:?}: this server does exact, substring and lstring"),
            })?
        }
        ("case", "ignore") => {}
        _ => g.ignored.push(c.to_owned()),
    }
    Ok(())
}

fn search_named(v: &str) -> Option<Search> {
    match v {
        "exact" => Some(Search::Exact),
        "substring" => Some(Search::Substring),
        "lstring" => Some(Search::Prefix),
        _ => None,
    }
}

struct Token {
    text: String,
    column: usize,
}

/// Words, `(` and `)`; a backslash takes the next character into the word, and a phrase in
/// double quotes is part of the word, spaces and parentheses included (`title="a b"`, as
/// ROADS reads phrases).
fn tokenize(query: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut start = 0;
    let mut quoted = false;
    let mut chars = query.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => {
                if word.is_empty() {
                    start = i;
                }
                quoted = !quoted;
            }
            c if quoted && c != '\\' => word.push(c),
            '\\' => {
                if word.is_empty() {
                    start = i;
                }
                if let Some((_, n)) = chars.next() {
                    word.push(n);
                }
            }
            '(' | ')' => {
                if !word.is_empty() {
                    out.push(Token {
                        text: std::mem::take(&mut word),
                        column: start + 1,
                    });
                }
                out.push(Token {
                    text: c.to_string(),
                    column: i + 1,
                });
            }
            c if c.is_whitespace() => {
                if !word.is_empty() {
                    out.push(Token {
                        text: std::mem::take(&mut word),
                        column: start + 1,
                    });
                }
            }
            c => {
                if word.is_empty() {
                    start = i;
                }
                word.push(c);
            }
        }
    }
    if !word.is_empty() {
        out.push(Token {
            text: word,
            column: start + 1,
        });
    }
    out
}

enum Expr {
    Or(Vec<Expr>),
    And(Vec<Expr>),
    Not(Item),
    Item(Item),
}

#[derive(Clone)]
enum Item {
    Template(String),
    Handle(String),
    Term(Term),
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    search: Search,
    /// Global constraints written after a term (`;format=full`), with their columns.
    globals: Vec<(String, usize)>,
}

/// The global constraints also taken when a client writes them after a term.
const GLOBAL_NAMES: [&str; 5] = ["format", "maxhits", "maxfull", "hold", "chase"];

impl Parser {
    fn peek_word(&self) -> Option<String> {
        self.tokens
            .get(self.at)
            .map(|t| t.text.to_ascii_lowercase())
    }

    fn or_expr(&mut self) -> Result<Expr, SyntaxError> {
        let mut parts = vec![self.and_expr()?];
        while self.peek_word().as_deref() == Some("or") {
            self.at += 1;
            parts.push(self.and_expr()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Expr::Or(parts)
        })
    }

    fn and_expr(&mut self) -> Result<Expr, SyntaxError> {
        let mut parts = vec![self.unary()?];
        loop {
            match self.peek_word().as_deref() {
                None | Some("or" | ")") => break,
                Some("and") => self.at += 1,
                Some(_) => {}
            }
            parts.push(self.unary()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Expr::And(parts)
        })
    }

    fn unary(&mut self) -> Result<Expr, SyntaxError> {
        let Some(t) = self.tokens.get(self.at) else {
            let column = self.tokens.last().map_or(1, |t| t.column + t.text.len());
            return Err(SyntaxError {
                column,
                message: "the query ends where a term was expected".into(),
            });
        };
        let column = t.column;
        match t.text.to_ascii_lowercase().as_str() {
            "not" => {
                self.at += 1;
                match self.unary()? {
                    Expr::Item(item) => Ok(Expr::Not(item)),
                    _ => Err(SyntaxError {
                        column,
                        message: "not applies to a single term".into(),
                    }),
                }
            }
            "(" => {
                self.at += 1;
                let e = self.or_expr()?;
                match self.tokens.get(self.at) {
                    Some(t) if t.text == ")" => {
                        self.at += 1;
                        Ok(e)
                    }
                    _ => Err(SyntaxError {
                        column,
                        message: "this ( is not closed".into(),
                    }),
                }
            }
            ")" | "and" | "or" => Err(SyntaxError {
                column,
                message: format!("a term was expected, found {:?}", t.text),
            }),
            _ => {
                let text = t.text.clone();
                self.at += 1;
                self.item(&text, column).map(Expr::Item)
            }
        }
    }

    fn item(&mut self, text: &str, column: usize) -> Result<Item, SyntaxError> {
        let mut pieces = text.split(';');
        let head = pieces.next().unwrap_or("");
        let mut search = self.search;
        for local in pieces {
            let name = local.split('=').next().unwrap_or("").trim();
            if name.eq_ignore_ascii_case("search") {
                let v = local.split_once('=').map_or("", |(_, v)| v.trim());
                search = search_named(&v.to_ascii_lowercase()).ok_or_else(|| SyntaxError {
                    column,
                    message: format!("search={v:?}: this server does exact, substring and lstring"),
                })?;
            } else if GLOBAL_NAMES.iter().any(|g| g.eq_ignore_ascii_case(name)) {
                // `keywords=centroid;format=full`: a global written as a local constraint,
                // as clients do; ROADS drops it, we take it as meant.
                self.globals.push((local.trim().to_owned(), column));
            }
        }
        let (name, value) = match head.split_once('=') {
            Some((n, v)) => (Some(n.trim()), v.trim()),
            None => (None, head.trim()),
        };
        if value.is_empty() {
            return Err(SyntaxError {
                column,
                message: format!("{text:?} has no value"),
            });
        }
        let value = value.to_owned();
        Ok(match name.map(str::to_ascii_lowercase).as_deref() {
            Some("template") => Item::Template(value),
            Some("handle") => Item::Handle(value),
            Some("value") | None => Item::Term(Term {
                attribute: None,
                value,
                search,
            }),
            Some("") => {
                return Err(SyntaxError {
                    column,
                    message: format!("{text:?} has no attribute name before ="),
                });
            }
            Some(_) => Item::Term(Term {
                attribute: name.map(str::to_owned),
                value,
                search,
            }),
        })
    }
}

/// The expression as conjunctions of (item, negated).
fn dnf(e: &Expr) -> Result<Vec<Vec<(Item, bool)>>, SyntaxError> {
    let too_many = || SyntaxError {
        column: 1,
        message: format!("the query expands to more than {MAX_DISJUNCTS} alternatives"),
    };
    Ok(match e {
        Expr::Item(i) => vec![vec![(i.clone(), false)]],
        Expr::Not(i) => vec![vec![(i.clone(), true)]],
        Expr::Or(parts) => {
            let mut out = Vec::new();
            for p in parts {
                out.extend(dnf(p)?);
                if out.len() > MAX_DISJUNCTS {
                    return Err(too_many());
                }
            }
            out
        }
        Expr::And(parts) => {
            let mut out: Vec<Vec<(Item, bool)>> = vec![Vec::new()];
            for p in parts {
                let alternatives = dnf(p)?;
                let mut next = Vec::new();
                for left in &out {
                    for right in &alternatives {
                        next.push(left.iter().chain(right).cloned().collect());
                        if next.len() > MAX_DISJUNCTS {
                            return Err(too_many());
                        }
                    }
                }
                out = next;
            }
            out
        }
    })
}

/// A conjunction of items; `None` when it cannot match (two templates or handles).
fn conjunction(items: Vec<(Item, bool)>) -> Option<Conjunction> {
    let mut c = Conjunction::default();
    for (item, negated) in items {
        match (item, negated) {
            (Item::Template(t), false) => match &c.template {
                Some(x) if !x.eq_ignore_ascii_case(&t) => return None,
                _ => c.template = Some(t),
            },
            (Item::Handle(h), false) => match &c.handle {
                Some(x) if *x != h => return None,
                _ => c.handle = Some(h),
            },
            (Item::Term(t), false) => c.terms.push(t),
            (Item::Term(t), true) => c.excluded.push(t),
            // `not template=x` and `not handle=x` filter records like a term on them.
            (Item::Template(t), true) => c.excluded.push(Term {
                attribute: Some(TEMPLATE_ATTRIBUTE.into()),
                value: t,
                search: Search::Exact,
            }),
            (Item::Handle(h), true) => c.excluded.push(Term {
                attribute: Some(HANDLE_ATTRIBUTE.into()),
                value: h,
                search: Search::Exact,
            }),
        }
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(line: &str) -> WhoisQuery {
        parse(line, 100).unwrap()
    }

    fn term(attribute: Option<&str>, value: &str) -> Term {
        Term {
            attribute: attribute.map(str::to_owned),
            value: value.to_owned(),
            search: Search::Exact,
        }
    }

    #[test]
    fn queries_parse_to_conjunctions() {
        let x = q("keywords=centroid");
        assert_eq!(x.disjuncts.len(), 1);
        assert_eq!(x.disjuncts[0].terms, [term(Some("keywords"), "centroid")]);
        let x = q("template=document and title=gateway");
        assert_eq!(x.disjuncts[0].template.as_deref(), Some("document"));
        assert_eq!(x.disjuncts[0].terms, [term(Some("title"), "gateway")]);
        let x = q("zebra or centroid");
        assert_eq!(x.disjuncts.len(), 2);
        assert_eq!(x.disjuncts[1].terms, [term(None, "centroid")]);
        let x = q("(a or b) c not d");
        assert_eq!(x.disjuncts.len(), 2);
        assert_eq!(x.disjuncts[0].terms, [term(None, "a"), term(None, "c")]);
        assert_eq!(x.disjuncts[0].excluded, [term(None, "d")]);
        let x = q("template=document and template=user");
        assert!(x.disjuncts.is_empty(), "two templates cannot both hold");
    }

    #[test]
    fn globals_follow_the_last_colon() {
        assert!(q("keywords=centroid:chase").globals.chase);
        let phrase = q("title=\"Common (Indexing)\" and author=knight");
        assert_eq!(phrase.disjuncts[0].terms[0].value, "Common (Indexing)");
        assert_eq!(phrase.disjuncts[0].terms[1].value, "knight");
        assert!(!q("keywords=centroid").globals.chase);
        let x = q("keywords=centroid:format=handle;maxhits=2;hold");
        assert_eq!(x.globals.format, Format::Handle);
        assert_eq!(x.globals.max_hits, 2);
        assert!(x.globals.hold);
        let x = q("uri=http://example.org/x");
        assert_eq!(x.disjuncts[0].terms[0].value, "http://example.org/x");
        assert_eq!(q("a:maxhits=500").globals.max_hits, 100, "capped");
        let x = q("a:language=en");
        assert_eq!(x.globals.ignored, ["language=en"]);
        let x = q("title=mesh;search=substring");
        assert_eq!(x.disjuncts[0].terms[0].search, Search::Substring);
        // Globals written after a term, as clients send them, are taken as globals.
        let x = q("keywords=centroid;format=handle;maxhits=2");
        assert_eq!(x.globals.format, Format::Handle);
        assert_eq!(x.globals.max_hits, 2);
        assert_eq!(x.disjuncts[0].terms[0].value, "centroid");
        let x = q("title=me:search=lstring");
        assert_eq!(x.disjuncts[0].terms[0].search, Search::Prefix);
    }

    #[test]
    fn bad_queries_say_where() {
        for (line, column) in [
            ("", 1),
            ("a and", 6),
            ("(a or b", 1),
            ("not (a or b)", 1),
            ("a ) b", 3),
            ("=x", 1),
            ("a:maxhits=zero", 3),
            ("a:search=regex", 3),
        ] {
            let e = parse(line, 100).unwrap_err();
            assert_eq!(e.column, column, "{line:?}: {e}");
        }
        let wide = "(a or b) (c or d) (e or f) (g or h) (i or j) (k or l) (m or n)";
        assert!(
            parse(wide, 100)
                .unwrap_err()
                .message
                .contains("alternatives")
        );
    }
}
