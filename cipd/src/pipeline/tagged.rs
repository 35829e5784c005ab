//! Tagged index objects (RFC 2654) in the daemon: an in-bound one becomes routing-table
//! entries (value counts from its tags), an incremental update is applied to the total held
//! for its dataset, and a tagged poll is answered with a total built from the local
//! collections.
//!
//! The mapping to `Template:Attribute` (PROTOCOL.md, legacy peers): a record's template is
//! its `Template-Type` value (the Whois++ convention), records with none are filed under
//! [`NO_TEMPLATE`]; the attribute name is kept as written; a value's count is the number of
//! distinct tags (records) holding it, `*` counting every record; the hint's
//! `Total-Object-Count` is the record count.

use std::sync::Arc;

use bytes::Bytes;
use cip_proto::cip::IndexObject;
use std::collections::BTreeMap;

use cip_proto::tagged::{self, Record, Schema, TaggedIndex, TokenType};
use hints::hint::{AttrSpec, CipHint, WeightEntry, Weightlist};

use crate::model::config::Config;
use crate::model::index_kind::IndexKind;
use crate::model::status::Identity;
use crate::pipeline::inbound::{Converted, Rejection};
use crate::store::local_index::LocalIndex;

/// The template of records whose tagged index names none.
pub const NO_TEMPLATE: &str = "RECORD";

/// Converts a tagged payload; an incremental update applies to `previous`, the stored total.
///
/// # Errors
/// [`Rejection::Invalid`] when it does not parse, or an update has no total to apply to or
/// does not follow it (its `lastupdate` is not the total's `thisupdate`: the peer must send
/// a total).
pub fn convert(payload: &Bytes, previous: Option<&Bytes>) -> Result<Converted, Rejection> {
    let obj =
        tagged::parse(payload).map_err(|e| Rejection::Invalid(format!("tagged index: {e}")))?;
    let total = if obj.is_total() {
        obj
    } else {
        let prev = previous.ok_or_else(|| {
            Rejection::Invalid(
                "an incremental tagged update, but no total is held for the dataset".into(),
            )
        })?;
        let mut base = tagged::parse(prev)
            .map_err(|e| Rejection::Invalid(format!("the stored tagged total: {e}")))?;
        base.apply(&obj)
            .map_err(|e| Rejection::Invalid(format!("tagged update does not apply: {e}")))?;
        base
    };
    Ok(Converted {
        hint: to_hint(&total),
        stored: Bytes::from(total.to_bytes()),
    })
}

/// The routing-table view of a total: one weightlist per template and attribute.
pub fn to_hint(total: &TaggedIndex) -> CipHint {
    let mut hint = CipHint {
        url: "-".into(),
        total_object_count: total.record_count(),
        ..CipHint::default()
    };
    for (template, attribute, values) in total.value_counts() {
        let template = if template.is_empty() {
            NO_TEMPLATE
        } else {
            &template
        };
        let Ok(spec) = AttrSpec::new(template, &attribute) else {
            tracing::debug!(
                template,
                attribute,
                "tagged attribute not a Template:Attribute; skipped"
            );
            continue;
        };
        let entries = values
            .into_iter()
            .map(|(v, count)| WeightEntry {
                value: Bytes::from(v),
                count,
            })
            .collect();
        hint.attributes.push(spec.clone());
        hint.weightlists.push((spec, Weightlist::new(entries)));
    }
    hint
}

/// A record's tag: stable across polls and restarts (a hash of its template and URL), so a
/// consumer's incremental bookkeeping holds.
pub fn stable_tag(template: &str, url: &[u8]) -> u64 {
    // FNV-1a: fixed, documented, independent of the Rust version.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in template
        .bytes()
        .map(|b| b.to_ascii_uppercase())
        .chain([0u8])
        .chain(url.iter().copied())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // Tags are written in decimal; keep them below 2^53 for consumers that read numbers as
    // doubles.
    h & ((1 << 53) - 1)
}

/// A tagged total of this node's local collections: a record per object, its exported
/// attributes (multi-value suffixes folded), each value as its words (the schema says
/// `TOKEN`), one io-part per template, in the form ROADS' gatherer reads
/// ([`tagged::write_for_gatherers`]; PROTOCOL.md, legacy peers). Legacy Whois++ servers
/// look words up, so a whole value ("Centroids and meshes") would never match a query.
///
/// # Errors
/// When a collection cannot be read or the records cannot be written as tagged lines.
pub async fn local_object(
    config: Arc<Config>,
    local: Arc<LocalIndex>,
    identity: &Identity,
) -> Result<IndexObject, String> {
    let payload = crate::sys::net::spawn_blocking(move || -> Result<Bytes, String> {
        let exported: Vec<(String, String)> = config
            .export
            .attributes
            .iter()
            .map(|a| (a.template.clone(), a.attribute.clone()))
            .collect();
        let mut records = Vec::new();
        for store in local.stores() {
            store
                .scan(&mut |_, o| {
                    let template = o.template().as_str();
                    let mut attributes = Vec::new();
                    for a in &o.attributes {
                        let base = a.name.base_name();
                        let wanted = exported.iter().any(|(t, at)| {
                            t.eq_ignore_ascii_case(template) && at.eq_ignore_ascii_case(base)
                        });
                        if !wanted {
                            continue;
                        }
                        let value = String::from_utf8_lossy(&a.value);
                        for word in words(&value) {
                            let pair = (base.to_owned(), word.to_owned());
                            if !attributes.contains(&pair) {
                                attributes.push(pair);
                            }
                        }
                    }
                    if !attributes.is_empty() {
                        records.push(Record {
                            tag: stable_tag(template, o.url()),
                            template: template.to_owned(),
                            attributes,
                        });
                    }
                })
                .map_err(|e| e.to_string())?;
        }
        let now = crate::store::journal::now().max(0) as u64;
        let mut by_template: BTreeMap<String, Vec<Record>> = BTreeMap::new();
        for r in records {
            by_template.entry(r.template.clone()).or_default().push(r);
        }
        let mut payload = Vec::new();
        for records in by_template.into_values() {
            let mut t = TaggedIndex::from_records(records, now).map_err(|e| e.to_string())?;
            let mut schema = Schema::new();
            for (a, kind) in t.schema.iter() {
                let kind = if a.eq_ignore_ascii_case(tagged::TEMPLATE_ATTRIBUTE) {
                    kind
                } else {
                    TokenType::Token
                };
                schema.insert(a, kind).map_err(|e| e.to_string())?;
            }
            t.schema = schema;
            payload.extend_from_slice(&tagged::write_for_gatherers(&t));
        }
        if payload.is_empty() {
            let t = TaggedIndex::from_records(Vec::new(), now).map_err(|e| e.to_string())?;
            payload = t.to_bytes();
        }
        Ok(Bytes::from(payload))
    })
    .await
    .map_err(|e| e.to_string())??;
    Ok(IndexObject {
        index_type: IndexKind::Tagged.index_type(),
        dsi: identity.dsi.clone(),
        base_uris: identity.base_uris.clone(),
        dsi_description: identity.description.clone(),
        payload,
    })
}

/// The words of a value as a Whois++ server indexes them: runs of characters between
/// blanks and list punctuation, trailing sentence punctuation trimmed. The tagged index a
/// legacy gatherer gets holds these, and the Whois++ front-end's `exact` and `lstring`
/// searches match them, so what a ROADS server is told we hold is what we answer for.
pub fn words(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(|c: char| c.is_whitespace() || ",;()[]{}<>\"".contains(c))
        .map(|w| w.trim_end_matches(['.', ':', '!', '?']))
        .filter(|w| !w.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cip_proto::tagged::{Block, Body, IncrementalMode, IndexInfo, TagSet};

    fn total() -> TaggedIndex {
        let records = [(1, "Garcia"), (2, "Garcia"), (3, "Okafor")].map(|(tag, a)| Record {
            tag,
            template: "DOCUMENT".into(),
            attributes: vec![("Author".into(), a.into())],
        });
        TaggedIndex::from_records(records, 100).unwrap()
    }

    fn counts(h: &CipHint) -> Vec<(String, Vec<(String, u64)>)> {
        h.weightlists
            .iter()
            .map(|(spec, w)| {
                (
                    format!("{}:{}", spec.template, spec.attribute),
                    w.entries()
                        .map(|e| (String::from_utf8_lossy(&e.value).into_owned(), e.count))
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn a_total_becomes_counts_by_tags() {
        let c = convert(&Bytes::from(total().to_bytes()), None).unwrap();
        assert_eq!(c.hint.total_object_count, 3);
        assert_eq!(
            counts(&c.hint),
            vec![(
                "DOCUMENT:Author".to_owned(),
                vec![("Garcia".to_owned(), 2), ("Okafor".to_owned(), 1)]
            )]
        );
        assert_eq!(c.stored, Bytes::from(total().to_bytes()));
    }

    #[test]
    fn an_incremental_update_applies_to_the_stored_total() {
        let stored = Bytes::from(total().to_bytes());
        let mut add = IndexInfo::new();
        add.insert("Template-Type", "DOCUMENT", &TagSet::single(4))
            .unwrap();
        add.insert("Author", "Garcia", &TagSet::single(4)).unwrap();
        let update = TaggedIndex {
            this_update: 200,
            body: Body::Incremental {
                mode: Some(IncrementalMode::TagBased),
                last_update: 100,
                blocks: vec![Block::Add(add)],
            },
            ..total()
        };
        let payload = Bytes::from(update.to_bytes());
        let c = convert(&payload, Some(&stored)).unwrap();
        assert_eq!(c.hint.total_object_count, 4);
        assert_eq!(counts(&c.hint)[0].1[0], ("Garcia".to_owned(), 3));
        // What is stored is the new total, which the next update follows.
        let next = tagged::parse(&c.stored).unwrap();
        assert!(next.is_total());
        assert_eq!(next.this_update, 200);
        // Without a total, or after a missed update, the peer must send a total.
        let e = convert(&payload, None).unwrap_err();
        assert!(e.to_string().contains("no total"), "{e}");
        let e = convert(&payload, Some(&c.stored)).unwrap_err();
        assert!(e.to_string().contains("does not apply"), "{e}");
    }

    #[test]
    fn tags_are_stable_and_template_case_blind() {
        assert_eq!(stable_tag("DOCUMENT", b"u"), stable_tag("document", b"u"));
        assert_ne!(stable_tag("DOCUMENT", b"u"), stable_tag("DOCUMENT", b"v"));
        assert!(stable_tag("DOCUMENT", b"u") < 1 << 53);
    }
}
