//! Fuzzes the routing query language (`Template:Attribute=value & Attribute~value`) and the
//! thesaurus text that widens its terms.
//!
//! The input, when UTF-8, is a query, optionally followed by a NUL and a thesaurus. Checks:
//! no panic; error offsets (in characters) and thesaurus lines and columns point inside the
//! text; a query that parses displays as text that parses to an equal query, and rebuilding
//! it from its terms gives it back; a thesaurus expands each term's pattern to a sorted,
//! duplicate-free list that holds the pattern itself.

#![no_main]

use hints::query::{Query, QueryLimits};
use hints::thesaurus::{AttrPattern, Thesaurus};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (query_text, thesaurus_text) = match text.split_once('\0') {
        Some((q, t)) => (q, Some(t)),
        None => (text, None),
    };
    let limits = QueryLimits {
        max_terms: 8,
        max_len: 1024,
    };
    let query = match Query::parse_with_limits(query_text, &limits) {
        Ok(q) => Some(q),
        Err(e) => {
            if let Some(offset) = e.offset() {
                let chars = query_text.chars().count();
                assert!(
                    offset <= chars,
                    "offset {offset} past {chars} characters: {e}"
                );
            }
            None
        }
    };
    if let Some(q) = &query {
        assert!(!q.terms().is_empty() && q.terms().len() <= limits.max_terms);
        let shown = q.to_string();
        // Escapes and quotes may make the canonical text longer than the input.
        let roomy = QueryLimits {
            max_len: usize::MAX,
            ..limits
        };
        let back = Query::parse_with_limits(&shown, &roomy)
            .unwrap_or_else(|e| panic!("displayed query {shown:?} does not parse: {e}"));
        assert_eq!(&back, q, "display -> parse of {shown:?}");
        assert_eq!(Query::from_terms(q.terms().to_vec()).as_ref(), Some(q));
    }

    let Some(thesaurus_text) = thesaurus_text else {
        return;
    };
    match Thesaurus::parse_with_limit(thesaurus_text, 64) {
        Ok(th) => {
            assert!(th.classes().iter().all(|c| !c.is_empty()));
            let Some(q) = query else { return };
            for t in q.terms() {
                let pattern = AttrPattern::new(t.template.as_deref(), &t.attribute);
                let expanded = th.expand(&pattern);
                assert!(
                    expanded.contains(&pattern),
                    "expansion lost the term itself"
                );
                assert!(
                    expanded.windows(2).all(|w| w[0] < w[1]),
                    "expansion not sorted and unique"
                );
            }
        }
        Err(e) => {
            let lines = thesaurus_text.lines().count();
            let line = match &e {
                hints::thesaurus::ThesaurusError::BadMember { line, column, .. } => {
                    assert!(*column >= 1);
                    *line
                }
                hints::thesaurus::ThesaurusError::SingleMember { line }
                | hints::thesaurus::ThesaurusError::TooManyMembers { line, .. } => *line,
                _ => return,
            };
            assert!(line >= 1 && line <= lines, "line {line} of {lines}: {e}");
        }
    }
});
