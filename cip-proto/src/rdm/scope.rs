//! The scopes of RDM's query languages: `gatherer`, `schema-basic`, `taxonomy-basic`.

use super::RdmError;
use crate::hinadi::date;

fn bad(scope: &str, reason: &str) -> RdmError {
    RdmError::BadScope {
        scope: scope.to_owned(),
        reason: reason.to_owned(),
    }
}

/// `gatherer`: every RD, or those changed since a date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GathererScope {
    /// `all`.
    All,
    /// `since DATE` (Unix seconds).
    Since(i64),
}

impl GathererScope {
    /// Parses `all` or `since <HTTP date>` (case ignored).
    ///
    /// # Errors
    /// [`RdmError::BadScope`] otherwise.
    pub fn parse(scope: &str) -> Result<Self, RdmError> {
        let s = scope.trim();
        if s.eq_ignore_ascii_case("all") {
            return Ok(Self::All);
        }
        let (word, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
        if word.eq_ignore_ascii_case("since") {
            // An HTTP date (asctime is GMT too); other forms as the Hina-Di reader reads them.
            let rest = rest.trim();
            return crate::http_date::parse(rest)
                .or_else(|| date::parse(rest))
                .map(Self::Since)
                .ok_or_else(|| bad(scope, "expected `since` and an HTTP date"));
        }
        Err(bad(scope, "expected `all` or `since DATE`"))
    }

    /// The scope as written (`since` with an RFC 1123 date).
    pub fn to_scope(self) -> String {
        match self {
            Self::All => "all".into(),
            Self::Since(t) => format!("since {}", date::format(t)),
        }
    }
}

/// `schema-basic`: the schema entries that define an attribute of the schema language.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaScope {
    /// The schema-language attribute (`SOIF-Attribute`, `Default-View-Attribute`).
    pub defined: String,
}

impl SchemaScope {
    /// Parses `defined ATTRIBUTE`.
    ///
    /// # Errors
    /// [`RdmError::BadScope`] otherwise.
    pub fn parse(scope: &str) -> Result<Self, RdmError> {
        let s = scope.trim();
        let (word, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
        if word.eq_ignore_ascii_case("defined") && !rest.trim().is_empty() {
            return Ok(Self {
                defined: rest.trim().to_owned(),
            });
        }
        Err(bad(scope, "expected `defined ATTRIBUTE`"))
    }

    /// True when `value` (the entry's value for the attribute) counts as defined: present
    /// and, for the integer and boolean flags, not `0`.
    pub fn holds(value: Option<&str>) -> bool {
        value.is_some_and(|v| {
            let v = v.trim();
            !v.is_empty() && v != "0"
        })
    }
}

/// `taxonomy-basic`: a classification and what lies below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaxonomyScope {
    /// The classification id (`ROOT` for the top).
    pub classification: String,
    /// How many levels below it (`None`: all).
    pub depth: Option<usize>,
}

impl TaxonomyScope {
    /// Parses `descendant C`, `descendant/N C`, `children C` or `anklebiter C` (the last two
    /// are `descendant/1`: the node and those directly below).
    ///
    /// # Errors
    /// [`RdmError::BadScope`] otherwise.
    pub fn parse(scope: &str) -> Result<Self, RdmError> {
        let s = scope.trim();
        let (word, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
        let classification = rest.trim();
        if classification.is_empty() {
            return Err(bad(scope, "no classification (ROOT or an Id)"));
        }
        let word = word.to_ascii_lowercase();
        let depth = match word.as_str() {
            "descendant" => None,
            "children" | "anklebiter" => Some(1),
            w => match w.strip_prefix("descendant/") {
                Some(n) => Some(
                    n.parse()
                        .map_err(|_| bad(scope, "descendant/N needs a number"))?,
                ),
                None => {
                    return Err(bad(
                        scope,
                        "expected descendant, descendant/N, children or anklebiter",
                    ));
                }
            },
        };
        Ok(Self {
            classification: classification.to_owned(),
            depth,
        })
    }
}
