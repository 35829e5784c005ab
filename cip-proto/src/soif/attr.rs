//! Attribute naming and matching (RFC 2655 §3.3 and §4).
//!
//! A hyphen and a positive integer appended to an attribute name make a multi-value
//! identifier: `Author-1` and `Author-2` are values of `Author`. A query attribute matches an
//! identifier when it equals, case-insensitively, the identifier's part before any such suffix.

/// The identifier without a multi-value suffix: `Author-2` → `Author`, `Dublin-Core-1` →
/// `Dublin-Core`. `Author-0` and `Author-` keep their suffix (0 is not a positive integer).
pub fn base_name(identifier: &str) -> &str {
    match split_suffix(identifier) {
        Some((base, _)) => base,
        None => identifier,
    }
}

/// The multi-value index of an identifier (`Author-2` → `Some(2)`), if it has one.
pub fn multi_value_index(identifier: &str) -> Option<u64> {
    split_suffix(identifier).map(|(_, n)| n)
}

fn split_suffix(identifier: &str) -> Option<(&str, u64)> {
    let dash = identifier.rfind('-')?;
    let digits = &identifier[dash + 1..];
    if dash == 0 || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    (n > 0).then(|| (&identifier[..dash], n))
}

/// True when the query attribute `query` (itself stripped of any suffix) names `identifier`:
/// case-insensitive comparison of the parts before any multi-value suffix (RFC 2655 §4).
pub fn attribute_matches(query: &str, identifier: &str) -> bool {
    base_name(query).eq_ignore_ascii_case(base_name(identifier))
}

/// How a query value is compared with a stored value (RFC 2655 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ValueMatch {
    /// Octet-by-octet equality: the RFC's default for unregistered templates.
    #[default]
    Octets,
    /// Equality ignoring ASCII case.
    CaseInsensitive,
    /// The query value occurs in the stored value, ignoring ASCII case (`Garcia` matches
    /// `Jose Garcia y Montes`).
    Substring,
}

impl ValueMatch {
    /// True when `stored` matches `query` in this mode.
    pub fn matches(self, query: &[u8], stored: &[u8]) -> bool {
        match self {
            Self::Octets => query == stored,
            Self::CaseInsensitive => query.eq_ignore_ascii_case(stored),
            Self::Substring => contains_ignore_ascii_case(stored, query),
        }
    }
}

/// True when `needle` occurs in `haystack`, ignoring ASCII case. An empty needle matches.
pub fn contains_ignore_ascii_case(haystack: &[u8], needle: &[u8]) -> bool {
    if needle.is_empty() {
        return true;
    }
    if needle.len() > haystack.len() {
        return false;
    }
    let first_lower = needle[0].to_ascii_lowercase();
    let first_upper = needle[0].to_ascii_uppercase();
    let last_start = haystack.len() - needle.len();
    let mut i = 0;
    while i <= last_start {
        // Jump to the next possible start with memchr on either case of the first byte.
        let rest = &haystack[i..=last_start];
        let Some(j) = memchr::memchr2(first_lower, first_upper, rest) else {
            return false;
        };
        let at = i + j;
        if haystack[at..at + needle.len()].eq_ignore_ascii_case(needle) {
            return true;
        }
        i = at + 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes() {
        assert_eq!(base_name("Author-1"), "Author");
        assert_eq!(base_name("Author-12"), "Author");
        assert_eq!(base_name("Author"), "Author");
        assert_eq!(base_name("Author-0"), "Author-0");
        assert_eq!(base_name("Author-"), "Author-");
        assert_eq!(base_name("-1"), "-1");
        assert_eq!(
            base_name("Last-Modification-Time"),
            "Last-Modification-Time"
        );
        assert_eq!(multi_value_index("CONTRIBUTOR-10"), Some(10));
        assert_eq!(multi_value_index("Title"), None);
    }

    #[test]
    fn rfc_section_4_attribute_examples() {
        for id in ["author", "Author", "AUTHOR", "Author-1"] {
            assert!(attribute_matches("author", id), "{id}");
        }
        assert!(!attribute_matches("author", "Authors"));
        assert!(attribute_matches("Author-3", "author"));
    }

    #[test]
    fn rfc_section_4_value_examples() {
        for v in ["Garcia", "GARCIA", "Jose Garcia y Montes"] {
            assert!(
                ValueMatch::Substring.matches(b"Garcia", v.as_bytes()),
                "{v}"
            );
        }
        assert!(!ValueMatch::Substring.matches(b"Garcia", b"Garci"));
        assert!(ValueMatch::CaseInsensitive.matches(b"garcia", b"GARCIA"));
        assert!(!ValueMatch::CaseInsensitive.matches(b"garcia", b"Jose Garcia"));
        assert!(ValueMatch::Octets.matches(b"Garcia", b"Garcia"));
        assert!(!ValueMatch::Octets.matches(b"Garcia", b"garcia"));
    }

    #[test]
    fn substring_edges() {
        assert!(contains_ignore_ascii_case(b"abc", b""));
        assert!(contains_ignore_ascii_case(b"xxABC", b"abc"));
        assert!(contains_ignore_ascii_case(b"aab", b"ab"));
        assert!(!contains_ignore_ascii_case(b"ab", b"abc"));
        assert!(!contains_ignore_ascii_case(b"a\xffb", b"ab"));
    }
}
