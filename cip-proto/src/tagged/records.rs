//! Conversions for the daemon: records to a total index, and an index to per-template value
//! counts.

use std::collections::{BTreeMap, BTreeSet};

use super::info::{
    EntryError, IndexInfo, Schema, TokenType, is_attribute_name, is_value, key, shorten,
};
use super::tags::{Ranges, TagSet, saturate};
use super::{Body, TEMPLATE_ATTRIBUTE, TaggedIndex};

/// One record of a local database, for [`TaggedIndex::from_records`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The record's handle in the index object.
    pub tag: u64,
    /// The record's template (`DOCUMENT`, `USER`).
    pub template: String,
    /// `(attribute, value)` pairs; a value is indexed whole (token type `FULL`).
    pub attributes: Vec<(String, String)>,
}

/// Why records cannot make an index object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// An attribute name or value the tagged index cannot carry.
    #[error("record {tag}: {error}")]
    Entry {
        /// The record's tag.
        tag: u64,
        /// What is wrong.
        #[source]
        error: EntryError,
    },
    /// A template name that cannot be a value (empty, or holding CR, LF or NUL).
    #[error("record {tag}: invalid template {template:?}")]
    InvalidTemplate {
        /// The record's tag.
        tag: u64,
        /// The template (shortened).
        template: String,
    },
    /// Two records with one tag but different templates.
    #[error("tag {tag} is given to a {first} record and a {second} record")]
    ConflictingTemplate {
        /// The tag.
        tag: u64,
        /// The first record's template.
        first: String,
        /// The other's.
        second: String,
    },
}

/// Per template and attribute, each value and how many distinct records hold it:
/// `(template, attribute, [(value, records)])`.
pub type ValueCounts = Vec<(String, String, Vec<(String, u64)>)>;

impl TaggedIndex {
    /// A total update built at `this_update` from `records`.
    ///
    /// Each record contributes a [`TEMPLATE_ATTRIBUTE`] line with its template and one index
    /// line per distinct `(attribute, value)`, tagged with its `tag`; the schema lists
    /// `Template-Type` and every attribute seen, all `FULL` (values are indexed whole, not
    /// tokenized). `contextsize` is the number of distinct tags. Records sharing a tag are
    /// one record (their templates must agree). Values are compared exactly (case-sensitive,
    /// byte for byte); attribute names ignoring ASCII case, keeping the first spelling. An
    /// attribute named `Template-Type` (any case) inside a record is skipped: the record's
    /// `template` is its template.
    ///
    /// # Errors
    /// [`RecordError`] for an attribute name outside `1*NAMECHAR`, an empty value or one
    /// holding CR, LF or NUL, a bad template, or one tag with two templates.
    pub fn from_records(
        records: impl IntoIterator<Item = Record>,
        this_update: u64,
    ) -> Result<Self, RecordError> {
        let template_key = key(TEMPLATE_ATTRIBUTE);
        let mut templates: BTreeMap<u64, String> = BTreeMap::new();
        let mut schema = Schema::new();
        schema.insert_unchecked(TEMPLATE_ATTRIBUTE, TokenType::Full);
        // (attribute key) -> (spelling, value -> tags); tags gathered first, normalized once.
        let mut lines: BTreeMap<String, Gathered> = BTreeMap::new();
        for r in records {
            if !is_value(&r.template) {
                return Err(RecordError::InvalidTemplate {
                    tag: r.tag,
                    template: shorten(&r.template),
                });
            }
            match templates.get(&r.tag) {
                Some(t) if *t != r.template => {
                    return Err(RecordError::ConflictingTemplate {
                        tag: r.tag,
                        first: t.clone(),
                        second: r.template,
                    });
                }
                Some(_) => {}
                None => {
                    templates.insert(r.tag, r.template.clone());
                }
            }
            for (a, v) in &r.attributes {
                let entry = |error| RecordError::Entry { tag: r.tag, error };
                if !is_attribute_name(a) {
                    return Err(entry(EntryError::InvalidAttributeName { name: shorten(a) }));
                }
                if !is_value(v) {
                    return Err(entry(EntryError::InvalidValue { value: shorten(v) }));
                }
                let k = key(a);
                if k == template_key {
                    continue;
                }
                if schema.get(a).is_none() {
                    schema.insert_unchecked(a, TokenType::Full);
                }
                lines
                    .entry(k)
                    .or_insert_with(|| (a.clone(), BTreeMap::new()))
                    .1
                    .entry(v.clone())
                    .or_default()
                    .push((r.tag, r.tag));
            }
        }
        let mut info = IndexInfo::new();
        let mut by_template: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
        for (tag, t) in &templates {
            by_template.entry(t).or_default().push((*tag, *tag));
        }
        for (t, tags) in by_template {
            info.union_unchecked(TEMPLATE_ATTRIBUTE, t, &Ranges::normalize(tags).into());
        }
        for (name, values) in lines.into_values() {
            for (v, tags) in values {
                info.union_unchecked(&name, &v, &Ranges::normalize(tags).into());
            }
        }
        Ok(Self {
            this_update,
            context_size: Some(templates.len() as u64),
            extra_headers: Vec::new(),
            schema,
            body: Body::Total {
                last_update: None,
                info,
            },
        })
    }

    /// How many records a total update describes: the largest of `contextsize`, the number
    /// of distinct tags its lines name, and 1 if some line is tagged `*` (a value every record
    /// holds implies a record). This is what `*` counts as in [`Self::value_counts`]. For an
    /// incremental update, `contextsize` or 0.
    pub fn record_count(&self) -> u64 {
        match &self.body {
            Body::Total { info, .. } => {
                let explicit = saturate(info.explicit_ranges().count());
                let all = u64::from(info.has_all());
                self.context_size.unwrap_or(0).max(explicit).max(all)
            }
            Body::Incremental { .. } => self.context_size.unwrap_or(0),
        }
    }

    /// For a total update: per template and attribute, each value and the number of distinct
    /// records holding it.
    ///
    /// A record's template is the value of its [`TEMPLATE_ATTRIBUTE`] line (a record under
    /// several is counted under each); records with none count under the template `""`, and
    /// when no line names a template, every record does. `*` stands for every record: all
    /// [`Self::record_count`] records, or, within a template, the records of that template.
    /// The `Template-Type` attribute itself is not listed. Groups are sorted by template and
    /// lowercased attribute name, values in byte order (values are compared exactly,
    /// case-sensitive); zero counts are left out. An incremental update gives nothing: apply
    /// it to the stored total first.
    pub fn value_counts(&self) -> ValueCounts {
        let Body::Total { info, .. } = &self.body else {
            return Vec::new();
        };
        let total = self.record_count();
        let template_key = key(TEMPLATE_ATTRIBUTE);
        let templates: Vec<(&str, &TagSet)> = info
            .attribute(TEMPLATE_ATTRIBUTE)
            .map(|a| a.values().collect())
            .unwrap_or_default();
        let typed = templates
            .iter()
            .fold(TagSet::empty(), |acc, (_, t)| acc.union(t));
        let count = |t: &TagSet| t.len().unwrap_or(total);
        let mut out: ValueCounts = Vec::new();
        let mut groups: Groups<'_> = BTreeMap::new();
        for a in info.attributes() {
            if key(a.name()) == template_key {
                continue;
            }
            for (v, tags) in a.values() {
                for (template, ttags) in &templates {
                    let n = count(&tags.intersection(ttags));
                    if n > 0 {
                        push(&mut groups, template, a.name(), v, n);
                    }
                }
                let untyped = if templates.is_empty() {
                    count(tags)
                } else {
                    match (tags.explicit(), typed.explicit()) {
                        (_, None) => 0,
                        (Some(t), Some(typed)) => saturate(t.difference(typed).count()),
                        (None, Some(typed)) => total.saturating_sub(saturate(typed.count())),
                    }
                };
                if untyped > 0 {
                    push(&mut groups, "", a.name(), v, untyped);
                }
            }
        }
        for ((template, _), (attribute, values)) in groups {
            out.push((template.to_owned(), attribute, values));
        }
        out
    }

    /// The templates named by [`TEMPLATE_ATTRIBUTE`] lines of a total, in byte order.
    pub fn templates(&self) -> BTreeSet<&str> {
        self.info()
            .and_then(|i| i.attribute(TEMPLATE_ATTRIBUTE))
            .map(|a| a.values().map(|(v, _)| v).collect())
            .unwrap_or_default()
    }
}

/// An attribute's spelling and, per value, the tags holding it (unsorted).
type Gathered = (String, BTreeMap<String, Vec<(u64, u64)>>);

/// `(template, attribute key)` -> (attribute spelling, value counts).
type Groups<'a> = BTreeMap<(&'a str, String), (String, Vec<(String, u64)>)>;

fn push<'a>(groups: &mut Groups<'a>, template: &'a str, attribute: &str, value: &str, n: u64) {
    groups
        .entry((template, key(attribute)))
        .or_insert_with(|| (attribute.to_owned(), Vec::new()))
        .1
        .push((value.to_owned(), n));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tag: u64, template: &str, attrs: &[(&str, &str)]) -> Record {
        Record {
            tag,
            template: template.into(),
            attributes: attrs
                .iter()
                .map(|(a, v)| ((*a).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn from_records_builds_a_total_with_template_lines() {
        let idx = TaggedIndex::from_records(
            [
                rec(1, "DOCUMENT", &[("Title", "Rust"), ("Author", "Ann")]),
                rec(2, "DOCUMENT", &[("Title", "rust"), ("author", "Ann")]),
                rec(3, "IMAGE", &[("Title", "Rust"), ("Template-Type", "X")]),
                rec(5, "DOCUMENT", &[("Title", "Rust"), ("Title", "Rust")]),
            ],
            946_684_800,
        )
        .unwrap();
        let text = String::from_utf8(super::super::write(&idx)).unwrap();
        assert_eq!(
            text,
            "version: x-tagged-index-1\r\nupdatetype: total\r\nthisupdate: 946684800\r\n\
             contextsize: 4\r\nBEGIN IO-Schema\r\nAuthor: FULL\r\nTemplate-Type: FULL\r\n\
             Title: FULL\r\nEND IO-Schema\r\nBEGIN Index-Info\r\nAuthor: 1,2/Ann\r\n\
             Template-Type: 1,2,5/DOCUMENT\r\n-3/IMAGE\r\nTitle: 1,3,5/Rust\r\n-2/rust\r\n\
             END Index-Info\r\n"
        );
        assert_eq!(idx.record_count(), 4);
        assert_eq!(
            idx.templates().into_iter().collect::<Vec<_>>(),
            ["DOCUMENT", "IMAGE"]
        );
        assert_eq!(
            idx.value_counts(),
            vec![
                ("DOCUMENT".into(), "Author".into(), vec![("Ann".into(), 2)]),
                (
                    "DOCUMENT".into(),
                    "Title".into(),
                    vec![("Rust".into(), 2), ("rust".into(), 1)]
                ),
                ("IMAGE".into(), "Title".into(), vec![("Rust".into(), 1)]),
            ]
        );
    }

    #[test]
    fn from_records_refuses_what_it_cannot_write() {
        let bad = [
            rec(1, "", &[]),
            rec(1, "A\nB", &[]),
            rec(1, "A", &[("Weightlist-[IMAGE:Subject]", "x")]),
            rec(1, "A", &[("Title", "")]),
            rec(1, "A", &[("Title", "a\r\nb")]),
        ];
        for r in bad {
            assert!(TaggedIndex::from_records([r.clone()], 1).is_err(), "{r:?}");
        }
        assert_eq!(
            TaggedIndex::from_records([rec(7, "A", &[]), rec(7, "B", &[])], 1),
            Err(RecordError::ConflictingTemplate {
                tag: 7,
                first: "A".into(),
                second: "B".into()
            })
        );
        let empty = TaggedIndex::from_records([], 1).unwrap();
        assert_eq!(empty.record_count(), 0);
        assert!(empty.value_counts().is_empty());
    }

    #[test]
    fn stars_count_as_every_record_of_the_template() {
        let mut info = IndexInfo::new();
        let t = |s: &str| s.parse::<TagSet>().unwrap();
        info.insert("Template-Type", "USER", &t("1-3")).unwrap();
        info.insert("Template-Type", "ORG", &t("4")).unwrap();
        info.insert("Name", "Jensen", &t("*")).unwrap();
        info.insert("Name", "Acme", &t("4,9")).unwrap();
        let mut idx = TaggedIndex::total(1);
        idx.body = Body::Total {
            last_update: None,
            info,
        };
        idx.context_size = Some(10);
        assert_eq!(idx.record_count(), 10);
        let c = idx.value_counts();
        assert_eq!(
            c,
            vec![
                (
                    "".into(),
                    "Name".into(),
                    vec![("Acme".into(), 1), ("Jensen".into(), 6)]
                ),
                (
                    "ORG".into(),
                    "Name".into(),
                    vec![("Acme".into(), 1), ("Jensen".into(), 1)]
                ),
                ("USER".into(), "Name".into(), vec![("Jensen".into(), 3)]),
            ]
        );
    }

    #[test]
    fn without_templates_everything_is_untyped() {
        let idx = super::super::parse(
            b"version: x-tagged-index-1\nupdatetype: total\nthisupdate: 1\n\
              BEGIN IO-Schema\nEND IO-Schema\nBEGIN Index-Info\n\
              cn: 1/Barbara\n-*/Jensen\n-2-3/Bo\nEND Index-Info\n",
        )
        .unwrap();
        assert_eq!(idx.record_count(), 3);
        assert_eq!(
            idx.value_counts(),
            vec![(
                "".into(),
                "cn".into(),
                vec![
                    ("Barbara".into(), 1),
                    ("Bo".into(), 2),
                    ("Jensen".into(), 3)
                ]
            )]
        );
        let star_only = super::super::parse(
            b"version: x-tagged-index-1\nupdatetype: total\nthisupdate: 1\n\
              BEGIN IO-Schema\nEND IO-Schema\nBEGIN Index-Info\nsn: */Jensen\nEND Index-Info\n",
        )
        .unwrap();
        assert_eq!(star_only.record_count(), 1, "a * line implies a record");
    }
}
