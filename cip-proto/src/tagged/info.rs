//! The pieces of an index object: validated attribute names and values, Index-Info entries,
//! the IO-Schema and unknown header fields.

use std::collections::BTreeMap;
use std::fmt;

use super::tags::{Ranges, TagSet};

/// Why a name or value cannot be part of an index object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntryError {
    /// An attribute name outside RFC 2654's `1*NAMECHAR` (letters, digits, `-`, `;`, `.`).
    #[error("invalid attribute name {name:?}: only letters, digits, '-', ';' and '.' are allowed")]
    InvalidAttributeName {
        /// The name (shortened).
        name: String,
    },
    /// A value that is empty or holds CR, LF or NUL (RFC 2654 `attr-value = 1*UTF8`).
    #[error("invalid value {value:?}: a value is non-empty and holds no CR, LF or NUL")]
    InvalidValue {
        /// The value (shortened).
        value: String,
    },
    /// A header field name that is empty, holds spaces, controls or `:`, or is one of the
    /// five defined header names (which have their own fields).
    #[error("invalid header field name {name:?}")]
    InvalidHeaderName {
        /// The name (shortened).
        name: String,
    },
    /// A header field value with CR, LF or NUL, or leading or trailing blanks.
    #[error("invalid header field value {value:?}")]
    InvalidHeaderValue {
        /// The value (shortened).
        value: String,
    },
}

pub(crate) fn shorten(s: &str) -> String {
    const MAX: usize = 60;
    if s.chars().count() <= MAX {
        s.to_owned()
    } else {
        s.chars().take(MAX).chain("...".chars()).collect()
    }
}

/// RFC 2654 §4.3 `NAMECHAR = DIGIT / UPPER / LOWER / "-" / ";" / "."`.
pub(crate) fn is_attribute_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b';' | b'.'))
}

/// RFC 2654 §4.3 `attr-value = 1*UTF8`, UTF8 excluding CR, LF and NUL.
pub(crate) fn is_value(value: &str) -> bool {
    !value.is_empty() && !value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0))
}

pub(crate) fn check_attribute_name(name: &str) -> Result<(), EntryError> {
    if is_attribute_name(name) {
        Ok(())
    } else {
        Err(EntryError::InvalidAttributeName {
            name: shorten(name),
        })
    }
}

pub(crate) fn check_value(value: &str) -> Result<(), EntryError> {
    if is_value(value) {
        Ok(())
    } else {
        Err(EntryError::InvalidValue {
            value: shorten(value),
        })
    }
}

/// The ASCII-lowercased attribute name: attribute names match ignoring case (they are LDAP
/// and Whois++ attribute names, RFC 2654 §4.3).
pub(crate) fn key(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// Index lines: for each attribute, each value with the tags of the records holding it.
///
/// Attribute names match ignoring ASCII case and keep the spelling first inserted; values
/// match exactly (case-sensitive, byte for byte). Attributes iterate in the order of their
/// lowercased names, values in byte order; this is also the order [`super::write`] uses.
/// A value with an empty tag set is not kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexInfo {
    attributes: BTreeMap<String, AttributeValues>,
}

/// One attribute's values and their tag sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributeValues {
    name: String,
    values: BTreeMap<String, TagSet>,
}

impl AttributeValues {
    /// The attribute name as first spelled.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Each value and its tags, in byte order of the values.
    pub fn values(&self) -> impl Iterator<Item = (&str, &TagSet)> {
        self.values.iter().map(|(v, t)| (v.as_str(), t))
    }

    /// The tags of `value`, if present.
    pub fn get(&self, value: &str) -> Option<&TagSet> {
        self.values.get(value)
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when there is no value (never the case inside an [`IndexInfo`]).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl IndexInfo {
    /// No entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `tags` to those of `attribute`'s `value` (a union with any already there).
    /// Empty `tags` change nothing.
    ///
    /// # Errors
    /// [`EntryError::InvalidAttributeName`] or [`EntryError::InvalidValue`].
    pub fn insert(
        &mut self,
        attribute: &str,
        value: &str,
        tags: &TagSet,
    ) -> Result<(), EntryError> {
        check_attribute_name(attribute)?;
        check_value(value)?;
        self.union_unchecked(attribute, value, tags);
        Ok(())
    }

    /// [`Self::insert`] for a name and value already validated; returns the number of ranges
    /// the value's tag set now has.
    pub(crate) fn union_unchecked(&mut self, attribute: &str, value: &str, tags: &TagSet) -> usize {
        if tags.is_empty() {
            return self.get(attribute, value).map_or(0, TagSet::written_items);
        }
        let a = self
            .attributes
            .entry(key(attribute))
            .or_insert_with(|| AttributeValues {
                name: attribute.to_owned(),
                values: BTreeMap::new(),
            });
        let slot = a.values.entry(value.to_owned()).or_default();
        *slot = slot.union(tags);
        slot.written_items()
    }

    /// The tags of `attribute`'s `value` (attribute matched ignoring ASCII case).
    pub fn get(&self, attribute: &str, value: &str) -> Option<&TagSet> {
        self.attribute(attribute)?.values.get(value)
    }

    /// `attribute`'s values (matched ignoring ASCII case).
    pub fn attribute(&self, attribute: &str) -> Option<&AttributeValues> {
        self.attributes.get(&key(attribute))
    }

    /// Every attribute, in the order of their lowercased names.
    pub fn attributes(&self) -> impl Iterator<Item = &AttributeValues> {
        self.attributes.values()
    }

    /// Every `(attribute, value, tags)`.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str, &TagSet)> {
        self.attributes.values().flat_map(|a| {
            a.values
                .iter()
                .map(|(v, t)| (a.name.as_str(), v.as_str(), t))
        })
    }

    /// Number of `(attribute, value)` entries.
    pub fn len(&self) -> usize {
        self.attributes.values().map(|a| a.values.len()).sum()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.attributes.is_empty()
    }

    /// Every tag named explicitly (`*` lines contribute none).
    pub fn explicit_tags(&self) -> TagSet {
        TagSet::from_explicit(self.explicit_ranges())
    }

    /// True when some value is tagged `*`.
    pub fn has_all(&self) -> bool {
        self.entries().any(|(_, _, t)| t.is_all())
    }

    pub(crate) fn explicit_ranges(&self) -> Ranges {
        let v = self
            .entries()
            .filter_map(|(_, _, t)| t.explicit())
            .flat_map(|r| r.0.iter().copied())
            .collect();
        Ranges::normalize(v)
    }

    /// Mutable access to every value's tags, for the incremental updates; empty sets and
    /// attributes are dropped afterwards.
    pub(crate) fn retain_mut(&mut self, mut f: impl FnMut(&str, &str, &mut TagSet)) {
        self.attributes.retain(|_, a| {
            let name = a.name.as_str();
            a.values.retain(|v, t| {
                f(name, v, t);
                !t.is_empty()
            });
            !a.values.is_empty()
        });
    }

    /// Replaces the tags of an existing entry (dropping it when empty).
    pub(crate) fn set(&mut self, attribute: &str, value: &str, tags: TagSet) {
        let k = key(attribute);
        let Some(a) = self.attributes.get_mut(&k) else {
            return;
        };
        if tags.is_empty() {
            a.values.remove(value);
            if a.values.is_empty() {
                self.attributes.remove(&k);
            }
        } else if let Some(slot) = a.values.get_mut(value) {
            *slot = tags;
        }
    }
}

/// How a supplier split an attribute's values into tokens (RFC 2654 §4.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// No splitting: the whole value.
    Full,
    /// Split on white space and `@` (the Whois++ centroid rule, RFC 1913).
    Token,
    /// Split on white space, `.` and `@`.
    Rfc822,
    /// Split on white space and `!`.
    Uucp,
    /// Split on anything but letters, digits and `-`.
    Dns,
}

impl TokenType {
    /// Every token type.
    pub const ALL: [Self; 5] = [Self::Full, Self::Token, Self::Rfc822, Self::Uucp, Self::Dns];

    /// The wire name (`FULL`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Full => "FULL",
            Self::Token => "TOKEN",
            Self::Rfc822 => "RFC822",
            Self::Uucp => "UUCP",
            Self::Dns => "DNS",
        }
    }

    /// The type named `s`, ignoring ASCII case.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for TokenType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The IO-Schema: the indexed attributes and their token types (RFC 2654 §4.3
/// `schema-line = attribute-name ":" token-type`).
///
/// Attribute names match ignoring ASCII case and keep the first spelling; they iterate in the
/// order of their lowercased names. Index lines may name attributes the schema does not list
/// (the RFC's own examples do), so nothing ties the two together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schema {
    attributes: BTreeMap<String, (String, TokenType)>,
}

impl Schema {
    /// An empty schema.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `attribute`'s token type; returns the type it had, if any.
    ///
    /// # Errors
    /// [`EntryError::InvalidAttributeName`].
    pub fn insert(
        &mut self,
        attribute: &str,
        token_type: TokenType,
    ) -> Result<Option<TokenType>, EntryError> {
        check_attribute_name(attribute)?;
        Ok(self.insert_unchecked(attribute, token_type))
    }

    pub(crate) fn insert_unchecked(
        &mut self,
        attribute: &str,
        token_type: TokenType,
    ) -> Option<TokenType> {
        match self.attributes.entry(key(attribute)) {
            std::collections::btree_map::Entry::Occupied(mut e) => {
                Some(std::mem::replace(&mut e.get_mut().1, token_type))
            }
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert((attribute.to_owned(), token_type));
                None
            }
        }
    }

    /// `attribute`'s token type (matched ignoring ASCII case).
    pub fn get(&self, attribute: &str) -> Option<TokenType> {
        self.attributes.get(&key(attribute)).map(|(_, t)| *t)
    }

    /// Every `(attribute, token type)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, TokenType)> {
        self.attributes.values().map(|(n, t)| (n.as_str(), *t))
    }

    /// Number of attributes.
    pub fn len(&self) -> usize {
        self.attributes.len()
    }

    /// True when no attribute is listed.
    pub fn is_empty(&self) -> bool {
        self.attributes.is_empty()
    }
}

/// The header names RFC 2654 §4.3.1 defines; [`HeaderField`] holds the others.
pub const DEFINED_HEADERS: [&str; 5] = [
    "version",
    "updatetype",
    "thisupdate",
    "lastupdate",
    "contextsize",
];

/// A header line the RFC does not define (`name-space: ...`, `x-anything: ...`), kept as read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeaderField {
    name: String,
    value: String,
}

impl HeaderField {
    /// A field. The name is visible ASCII without `:` and is not one of
    /// [`DEFINED_HEADERS`] (ignoring case); the value holds no CR, LF or NUL and has no
    /// leading or trailing space or tab (it may be empty).
    ///
    /// # Errors
    /// [`EntryError::InvalidHeaderName`] or [`EntryError::InvalidHeaderValue`].
    pub fn new(name: &str, value: &str) -> Result<Self, EntryError> {
        let name_ok = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
            && !DEFINED_HEADERS.iter().any(|d| d.eq_ignore_ascii_case(name));
        if !name_ok {
            return Err(EntryError::InvalidHeaderName {
                name: shorten(name),
            });
        }
        let value_ok = !value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0))
            && value.trim_matches([' ', '\t']) == value;
        if !value_ok {
            return Err(EntryError::InvalidHeaderValue {
                value: shorten(value),
            });
        }
        Ok(Self {
            name: name.to_owned(),
            value: value.to_owned(),
        })
    }

    /// The name as written.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value, without surrounding blanks.
    pub fn value(&self) -> &str {
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_are_validated() {
        let mut i = IndexInfo::new();
        let t = TagSet::single(1);
        assert!(i.insert("cn;lang-sv", "x", &t).is_ok());
        assert!(i.insert("2.5.4.3", "x", &t).is_ok());
        for bad in ["", "c n", "cn:", "c_n", "cn/", "ü"] {
            assert!(
                matches!(
                    i.insert(bad, "x", &t),
                    Err(EntryError::InvalidAttributeName { .. })
                ),
                "{bad:?}"
            );
        }
        for bad in ["", "a\rb", "a\nb", "a\0b"] {
            assert!(
                matches!(
                    i.insert("cn", bad, &t),
                    Err(EntryError::InvalidValue { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(i.insert("cn", " spaced / with:colons ", &t).is_ok());
    }

    #[test]
    fn attribute_names_fold_case_values_do_not() {
        let mut i = IndexInfo::new();
        i.insert("Title", "Manager", &TagSet::single(1)).unwrap();
        i.insert("TITLE", "Manager", &TagSet::single(2)).unwrap();
        i.insert("title", "manager", &TagSet::single(3)).unwrap();
        assert_eq!(i.len(), 2);
        assert_eq!(i.attribute("tItLe").unwrap().name(), "Title");
        assert_eq!(i.get("title", "Manager").unwrap().to_string(), "1,2");
        assert_eq!(i.get("title", "manager").unwrap().to_string(), "3");
        i.insert("x", "y", &TagSet::empty()).unwrap();
        assert!(i.attribute("x").is_none(), "empty tag sets are not kept");
    }

    #[test]
    fn header_fields_are_validated() {
        assert!(HeaderField::new("name-space", "").is_ok());
        assert!(HeaderField::new("x-a", "b c").is_ok());
        for (n, v) in [
            ("", "x"),
            ("a b", "x"),
            ("a:b", "x"),
            ("Version", "x"),
            ("THISUPDATE", "1"),
        ] {
            assert!(HeaderField::new(n, v).is_err(), "{n:?}");
        }
        for v in [" x", "x ", "a\rb", "a\nb"] {
            assert!(HeaderField::new("x", v).is_err(), "{v:?}");
        }
    }

    #[test]
    fn schema_folds_case_and_reports_the_old_type() {
        let mut s = Schema::new();
        assert_eq!(s.insert("cn", TokenType::Token), Ok(None));
        assert_eq!(s.insert("CN", TokenType::Full), Ok(Some(TokenType::Token)));
        assert_eq!(s.iter().collect::<Vec<_>>(), [("cn", TokenType::Full)]);
        assert_eq!(TokenType::from_name("rfc822"), Some(TokenType::Rfc822));
        assert_eq!(TokenType::from_name("WORD"), None);
        assert!(s.insert("c n", TokenType::Dns).is_err());
    }
}
