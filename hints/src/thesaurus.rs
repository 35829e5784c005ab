//! Attribute equivalences applied at query time (RFC 2655 §4: "a CIP mesh may nonetheless
//! need to maintain a thesaurus matching ATTRIBUTEs from particular template-types to those
//! of other, especially unregistered, template-types").
//!
//! Text form, one class per line, `#` starts a comment:
//!
//! ```text
//! # authors, whatever the template calls them
//! DOCUMENT:Author = FILE:Author = Dublin-Core-1:CREATOR
//! ```
//!
//! Members are `Template:Attribute`, compared ASCII-case-insensitively, the attribute's
//! multi-value suffix folded. Classes sharing a member are merged. A query term naming a
//! member matches every member of its class; a term without a template (`Author=x`) matches
//! `Author` in any template plus every member of each class that holds some `*:Author`.

use std::collections::HashMap;

use cip_proto::soif::attr::base_name;

/// Default for [`Thesaurus::parse_with_limit`]: most members over all classes.
pub const DEFAULT_MAX_THESAURUS_MEMBERS: usize = 10_000;

/// A normalised attribute pattern: lowercase template (`None`: any) and lowercase attribute
/// with its multi-value suffix removed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttrPattern {
    /// Lowercase template, `None` for any template.
    pub template: Option<String>,
    /// Lowercase attribute base name.
    pub attribute: String,
}

impl AttrPattern {
    /// Normalises `template` / `attribute` as spelled.
    pub fn new(template: Option<&str>, attribute: &str) -> Self {
        Self {
            template: template.map(str::to_ascii_lowercase),
            attribute: base_name(attribute).to_ascii_lowercase(),
        }
    }
}

/// Equivalence classes of `Template:Attribute` pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Thesaurus {
    classes: Vec<Vec<(String, String)>>,
    member_class: HashMap<(String, String), usize>,
    by_attribute: HashMap<String, Vec<usize>>,
}

/// Why a thesaurus text did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ThesaurusError {
    /// A member is not `Template:Attribute`.
    #[error("line {line}, column {column}: expected Template:Attribute, found {found:?}")]
    BadMember {
        /// 1-based line.
        line: usize,
        /// 1-based column (in characters) where the member starts.
        column: usize,
        /// The member text.
        found: String,
    },
    /// A line with fewer than two members.
    #[error("line {line}: a class needs at least two members joined by '='")]
    SingleMember {
        /// 1-based line.
        line: usize,
    },
    /// More members than the limit.
    #[error("line {line}: more than {max} thesaurus members")]
    TooManyMembers {
        /// 1-based line.
        line: usize,
        /// The limit.
        max: usize,
    },
}

impl Thesaurus {
    /// Parses the text form with the default member limit.
    ///
    /// # Errors
    /// [`ThesaurusError`] naming the line and column.
    pub fn parse(text: &str) -> Result<Self, ThesaurusError> {
        Self::parse_with_limit(text, DEFAULT_MAX_THESAURUS_MEMBERS)
    }

    /// Parses the text form, refusing more than `max_members` members in all.
    ///
    /// # Errors
    /// [`ThesaurusError`] naming the line and column.
    pub fn parse_with_limit(text: &str, max_members: usize) -> Result<Self, ThesaurusError> {
        let mut th = Self::default();
        let mut members = 0;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split('#').next().unwrap_or("");
            if content.trim().is_empty() {
                continue;
            }
            let mut class = Vec::new();
            let mut column = 1;
            for part in content.split('=') {
                let lead = part.chars().take_while(|c| c.is_whitespace()).count();
                let member = part.trim();
                let parsed = member.split_once(':').filter(|(t, a)| {
                    let ok = |s: &str| {
                        !s.is_empty()
                            && s.chars()
                                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                    };
                    ok(t) && ok(a)
                });
                let Some((t, a)) = parsed else {
                    return Err(ThesaurusError::BadMember {
                        line,
                        column: column + lead,
                        found: member.to_owned(),
                    });
                };
                class.push((t.to_owned(), a.to_owned()));
                column += part.chars().count() + 1;
            }
            if class.len() < 2 {
                return Err(ThesaurusError::SingleMember { line });
            }
            members += class.len();
            if members > max_members {
                return Err(ThesaurusError::TooManyMembers {
                    line,
                    max: max_members,
                });
            }
            let refs: Vec<(&str, &str)> = class
                .iter()
                .map(|(t, a)| (t.as_str(), a.as_str()))
                .collect();
            th.add_class(&refs);
        }
        Ok(th)
    }

    /// Adds a class of equivalent `(template, attribute)` pairs, merging it with any class
    /// that shares a member.
    pub fn add_class(&mut self, members: &[(&str, &str)]) {
        let keys: Vec<(String, String)> = members
            .iter()
            .map(|(t, a)| (t.to_ascii_lowercase(), base_name(a).to_ascii_lowercase()))
            .collect();
        let mut merged: Vec<(String, String)> = Vec::new();
        let mut absorbed: Vec<usize> = keys
            .iter()
            .filter_map(|k| self.member_class.get(k).copied())
            .collect();
        absorbed.sort_unstable();
        absorbed.dedup();
        for &c in &absorbed {
            merged.extend(std::mem::take(&mut self.classes[c]));
        }
        merged.extend(keys);
        merged.sort();
        merged.dedup();
        self.classes.push(merged);
        self.classes.retain(|c| !c.is_empty());
        self.reindex();
    }

    fn reindex(&mut self) {
        self.member_class.clear();
        self.by_attribute.clear();
        for (i, class) in self.classes.iter().enumerate() {
            for key in class {
                self.member_class.insert(key.clone(), i);
                let list = self.by_attribute.entry(key.1.clone()).or_default();
                if list.last() != Some(&i) {
                    list.push(i);
                }
            }
        }
    }

    /// The classes, each a sorted list of lowercase `(template, attribute)` pairs.
    pub fn classes(&self) -> &[Vec<(String, String)>] {
        &self.classes
    }

    /// Every pattern a term on `pattern` should match: the pattern itself plus the members
    /// of the classes it touches. Sorted and free of duplicates.
    pub fn expand(&self, pattern: &AttrPattern) -> Vec<AttrPattern> {
        let mut out = vec![pattern.clone()];
        let classes: Vec<usize> = match &pattern.template {
            Some(t) => self
                .member_class
                .get(&(t.clone(), pattern.attribute.clone()))
                .copied()
                .into_iter()
                .collect(),
            None => self
                .by_attribute
                .get(&pattern.attribute)
                .cloned()
                .unwrap_or_default(),
        };
        for c in classes {
            for (t, a) in &self.classes[c] {
                out.push(AttrPattern {
                    template: Some(t.clone()),
                    attribute: a.clone(),
                });
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(t: Option<&str>, a: &str) -> AttrPattern {
        AttrPattern::new(t, a)
    }

    #[test]
    fn parses_and_expands() {
        let th = Thesaurus::parse(
            "# authors\nDOCUMENT:Author = FILE:Author = Dublin-Core-1:CREATOR\n\n\
             IMAGE:Subject = DOCUMENT:Keywords # topics\n",
        )
        .unwrap();
        assert_eq!(th.classes().len(), 2);
        let e = th.expand(&p(Some("document"), "AUTHOR-1"));
        assert_eq!(
            e,
            vec![
                p(Some("document"), "author"),
                p(Some("dublin-core-1"), "creator"),
                p(Some("file"), "author")
            ]
        );
        // No template: the attribute anywhere plus the classes holding it.
        let e = th.expand(&p(None, "creator"));
        assert!(e.contains(&p(None, "creator")));
        assert!(e.contains(&p(Some("document"), "author")));
        assert_eq!(th.expand(&p(Some("x"), "y")), vec![p(Some("x"), "y")]);
    }

    #[test]
    fn merges_overlapping_classes() {
        let th = Thesaurus::parse("A:x = B:y\nC:z = b:Y\n").unwrap();
        assert_eq!(th.classes().len(), 1);
        assert_eq!(th.expand(&p(Some("a"), "x")).len(), 3);
    }

    #[test]
    fn errors_name_line_and_column() {
        assert_eq!(
            Thesaurus::parse("A:x = B:y\nA:x = nocolon\n"),
            Err(ThesaurusError::BadMember {
                line: 2,
                column: 7,
                found: "nocolon".into()
            })
        );
        assert_eq!(
            Thesaurus::parse("A:x\n"),
            Err(ThesaurusError::SingleMember { line: 1 })
        );
        assert!(matches!(
            Thesaurus::parse_with_limit("A:x = B:y = C:z", 2),
            Err(ThesaurusError::TooManyMembers { line: 1, max: 2 })
        ));
    }
}
