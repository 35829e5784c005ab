//! One out-bound CIP-HINT from the local hint and the in-bound ones (RFC 2651 §3.2.3).
//!
//! Rules:
//! * counts are summed per `(Template:Attribute, value)`, attributes matched as RFC 2655 §4
//!   matches them (case-insensitive, multi-value suffix folded) and values ASCII-case-folded
//!   (the byte-wise smallest spelling is written);
//! * `Total-Object-Count` is the sum; `Source` the union (first occurrence order: local hint,
//!   then peers by DSI); each `Threshold-[T:A]` the maximum over the inputs that declare one;
//!   `Attribute-Identifier-List` the union;
//! * the URL is this node's; DSI and base-uri travel in the index object's MIME parameters
//!   and come from [`NodeIdentity`]; `Date` and certification are left to the caller;
//! * `Provenance-N` lists this node's DSI, every included peer's DSI and the provenance they
//!   carried ([`crate::table::PROVENANCE_ATTRIBUTE`]), so a node that finds its own DSI
//!   there refuses the hint;
//! * a peer is left out when it is the `exclude` DSI or its provenance names it (never send
//!   a peer what came from it), and when its base-uri schemes differ from this node's (RFC
//!   2651 §3.2.3 allows aggregation only of objects covering the same protocols; such
//!   objects may still be passed on unchanged).

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::soif::Attribute;

use crate::hint::{AttrSpec, CipHint, WeightEntry, Weightlist};
use crate::table::{PROVENANCE_ATTRIBUTE, RoutingTable, attr_key, provenance};

/// This node, as its out-bound hints name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    /// This node's DSI.
    pub dsi: Dsi,
    /// This node's base-uri(s), one per access protocol it supports.
    pub base_uris: Vec<String>,
    /// The hint's SOIF URL (this node's broker URL), `-` when none.
    pub url: String,
}

/// Why a peer's hint was not aggregated.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// It is the excluded peer, or was aggregated from its data.
    Excluded,
    /// Its base-uri schemes differ from this node's.
    ProtocolMismatch {
        /// The peer's schemes, lowercase, sorted.
        peer: Vec<String>,
        /// This node's schemes, lowercase, sorted.
        node: Vec<String>,
    },
}

/// The out-bound hint and what went into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aggregate {
    /// The hint to send.
    pub hint: CipHint,
    /// Peers whose hints were summed in, by DSI.
    pub included: Vec<Dsi>,
    /// Peers left out, and why.
    pub skipped: Vec<(Dsi, SkipReason)>,
}

#[derive(Default)]
struct AttrAcc {
    spelling: Option<AttrSpec>,
    listed: bool,
    threshold: Option<u64>,
    /// Folded value -> (smallest spelling, summed count).
    values: HashMap<Vec<u8>, (Bytes, u64)>,
}

impl AttrAcc {
    fn add(&mut self, value: &[u8], count: u64) {
        if count == 0 {
            return;
        }
        let slot = self
            .values
            .entry(value.to_ascii_lowercase())
            .or_insert_with(|| (Bytes::copy_from_slice(value), 0));
        if value < &slot.0[..] {
            slot.0 = Bytes::copy_from_slice(value);
        }
        slot.1 = slot.1.saturating_add(count);
    }
}

#[derive(Default)]
struct Acc {
    attrs: HashMap<(String, String), AttrAcc>,
    sources: Vec<String>,
    total: u64,
    provenance: BTreeSet<Dsi>,
}

impl Acc {
    fn attr(&mut self, spec: &AttrSpec) -> &mut AttrAcc {
        let acc = self.attrs.entry(attr_key(spec)).or_default();
        if acc.spelling.is_none() {
            acc.spelling = Some(AttrSpec {
                template: spec.template.clone(),
                attribute: cip_proto::soif::attr::base_name(&spec.attribute).to_owned(),
            });
        }
        acc
    }

    fn threshold(&mut self, spec: &AttrSpec, t: u64) {
        let acc = self.attr(spec);
        acc.threshold = Some(acc.threshold.map_or(t, |old| old.max(t)));
    }

    fn source(&mut self, s: &str) {
        if !self.sources.iter().any(|x| x == s) {
            self.sources.push(s.to_owned());
        }
    }
}

fn schemes(uris: &[String]) -> Vec<String> {
    let mut out: Vec<String> = uris
        .iter()
        .map(|u| {
            u.split_once(':')
                .map_or(u.as_str(), |(s, _)| s)
                .trim()
                .to_ascii_lowercase()
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Builds the out-bound hint for a poller (see the module doc). `exclude` is the poller's
/// DSI, when it is a peer of ours. With no base-uri configured for the node, schemes are
/// not compared.
pub fn aggregate(
    local: Option<&CipHint>,
    table: &RoutingTable,
    node: &NodeIdentity,
    exclude: Option<&Dsi>,
) -> Aggregate {
    let snap = table.snapshot();
    let mut acc = Acc::default();
    acc.provenance.insert(node.dsi.clone());
    if let Some(h) = local {
        for spec in &h.attributes {
            acc.attr(spec).listed = true;
        }
        for (spec, list) in &h.weightlists {
            let a = acc.attr(spec);
            for e in &list.entries {
                a.add(&e.value, e.count);
            }
        }
        for (spec, t) in &h.thresholds {
            acc.threshold(spec, *t);
        }
        for s in &h.sources {
            acc.source(s);
        }
        acc.total = acc.total.saturating_add(h.total_object_count);
        // A local hint normally has none; an unreadable one adds nothing.
        acc.provenance.extend(provenance(h).unwrap_or_default());
    }
    let node_schemes = schemes(&node.base_uris);
    let mut included_slots = vec![false; snap.slots.len()];
    let mut included = Vec::new();
    let mut skipped = Vec::new();
    for (dsi, &slot) in &snap.peers {
        let Some(entry) = snap.entry(slot) else {
            continue;
        };
        let excluded = exclude.is_some_and(|x| x == dsi || entry.provenance.contains(x));
        if excluded {
            skipped.push((dsi.clone(), SkipReason::Excluded));
            continue;
        }
        let peer_schemes = schemes(&entry.meta.base_uris);
        if !node_schemes.is_empty() && peer_schemes != node_schemes {
            skipped.push((
                dsi.clone(),
                SkipReason::ProtocolMismatch {
                    peer: peer_schemes,
                    node: node_schemes.clone(),
                },
            ));
            continue;
        }
        included_slots[slot as usize] = true;
        included.push(dsi.clone());
        for spec in &entry.attributes {
            acc.attr(spec).listed = true;
        }
        for &(attr, t) in &entry.thresholds {
            let spec = snap.attrs.infos[attr as usize].spelling.clone();
            acc.threshold(&spec, t);
        }
        for s in &entry.sources {
            acc.source(s);
        }
        acc.total = acc.total.saturating_add(entry.total);
        acc.provenance.insert(dsi.clone());
        acc.provenance.extend(entry.provenance.iter().cloned());
    }
    let specs: Vec<AttrSpec> = snap
        .attrs
        .infos
        .iter()
        .map(|i| i.spelling.clone())
        .collect();
    for seg in &snap.segments {
        for id in 0..seg.len() as u32 {
            let value = seg.value(id);
            for (slot, attr, count) in seg.postings(id) {
                if included_slots.get(slot as usize).copied().unwrap_or(false) {
                    acc.attr(&specs[attr as usize]).add(&value, count);
                }
            }
        }
    }
    Aggregate {
        hint: finish(acc, &node.url),
        included,
        skipped,
    }
}

fn finish(acc: Acc, url: &str) -> CipHint {
    let mut attrs: Vec<(AttrSpec, AttrAcc)> = acc
        .attrs
        .into_values()
        .filter_map(|mut a| Some((a.spelling.take()?, a)))
        .collect();
    attrs.sort_by_key(|a| attr_key(&a.0));
    let mut hint = CipHint {
        url: url.to_owned(),
        sources: acc.sources,
        total_object_count: acc.total,
        ..CipHint::default()
    };
    for (spec, a) in attrs {
        if a.listed || !a.values.is_empty() {
            hint.attributes.push(spec.clone());
        }
        if !a.values.is_empty() {
            let mut entries: Vec<WeightEntry> = a
                .values
                .into_values()
                .map(|(value, count)| WeightEntry { value, count })
                .collect();
            entries.sort_by(|x, y| {
                y.count.cmp(&x.count).then_with(|| {
                    x.value
                        .to_ascii_lowercase()
                        .cmp(&y.value.to_ascii_lowercase())
                })
            });
            hint.weightlists
                .push((spec.clone(), Weightlist { entries }));
        }
        if let Some(t) = a.threshold {
            hint.thresholds.push((spec, t));
        }
    }
    for (i, dsi) in acc.provenance.iter().enumerate() {
        let name = format!("{PROVENANCE_ATTRIBUTE}-{}", i + 1);
        match Attribute::new(&name, Bytes::from(dsi.as_str().to_owned())) {
            Ok(a) => hint.extra.push(a),
            // Invariant: `Provenance-N` is an identifier; this arm never runs.
            Err(e) => tracing::error!(%e, "provenance attribute rejected"),
        }
    }
    hint
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{ImportError, PeerMeta, TableConfig};
    use std::time::SystemTime;

    fn dsi(s: &str) -> Dsi {
        Dsi::new(s).unwrap()
    }

    fn meta(d: &str, uri: &str) -> PeerMeta {
        PeerMeta {
            dsi: dsi(d),
            base_uris: vec![uri.into()],
            dsi_description: None,
            received: SystemTime::UNIX_EPOCH,
            expires: None,
            via: None,
        }
    }

    fn hint(total: u64, source: &str, values: &[(&str, u64)], threshold: Option<u64>) -> CipHint {
        let spec = AttrSpec {
            template: "DOCUMENT".into(),
            attribute: "Author".into(),
        };
        CipHint {
            url: "-".into(),
            attributes: vec![spec.clone()],
            sources: vec![source.into()],
            total_object_count: total,
            weightlists: vec![(
                spec.clone(),
                Weightlist {
                    entries: values
                        .iter()
                        .map(|(v, c)| WeightEntry {
                            value: Bytes::copy_from_slice(v.as_bytes()),
                            count: *c,
                        })
                        .collect(),
                },
            )],
            thresholds: threshold.map(|t| (spec, t)).into_iter().collect(),
            ..CipHint::default()
        }
    }

    fn node(d: &str) -> NodeIdentity {
        NodeIdentity {
            dsi: dsi(d),
            base_uris: vec!["cip://node/".into()],
            url: "http://node/".into(),
        }
    }

    fn counts(h: &CipHint) -> Vec<(String, u64)> {
        h.weightlists[0]
            .1
            .entries
            .iter()
            .map(|e| (String::from_utf8_lossy(&e.value).into_owned(), e.count))
            .collect()
    }

    fn provenance_of(h: &CipHint) -> Vec<String> {
        h.extra
            .iter()
            .map(|a| String::from_utf8_lossy(&a.value).into_owned())
            .collect()
    }

    #[test]
    fn sums_counts_totals_sources_and_keeps_max_threshold() {
        let table = RoutingTable::default();
        table
            .replace(
                meta("1.1", "cip://a/"),
                &hint(100, "http://a/", &[("Garcia", 10), ("Smith", 2)], Some(5)),
            )
            .unwrap();
        table
            .replace(
                meta("1.2", "CIP://b/"),
                &hint(50, "http://b/", &[("GARCIA", 20)], Some(8)),
            )
            .unwrap();
        let local = hint(7, "http://a/", &[("garcia", 1), ("Local", 3)], None);
        let agg = aggregate(Some(&local), &table, &node("9.9"), None);
        let h = &agg.hint;
        assert_eq!(h.url, "http://node/");
        assert_eq!(h.total_object_count, 157);
        assert_eq!(h.sources, vec!["http://a/".to_string(), "http://b/".into()]);
        assert_eq!(
            counts(h),
            vec![
                ("GARCIA".into(), 31),
                ("Local".into(), 3),
                ("Smith".into(), 2)
            ]
        );
        assert_eq!(h.thresholds[0].1, 8);
        assert_eq!(provenance_of(h), vec!["1.1", "1.2", "9.9"]);
        assert_eq!(agg.included, vec![dsi("1.1"), dsi("1.2")]);
        assert_eq!(h.extra[0].name.as_str(), "Provenance-1");
    }

    #[test]
    fn excludes_the_poller_and_what_came_from_it() {
        let table = RoutingTable::default();
        table
            .replace(meta("1.1", "cip://a/"), &hint(10, "s", &[("x", 1)], None))
            .unwrap();
        let mut derived = hint(20, "s", &[("y", 2)], None);
        derived
            .extra
            .push(Attribute::new("Provenance-1", "1.1").unwrap());
        table.replace(meta("1.2", "cip://b/"), &derived).unwrap();
        table
            .replace(meta("1.3", "cip://c/"), &hint(30, "s", &[("z", 3)], None))
            .unwrap();
        let agg = aggregate(None, &table, &node("9.9"), Some(&dsi("1.1")));
        assert_eq!(counts(&agg.hint), vec![("z".into(), 3)]);
        assert_eq!(
            agg.skipped,
            vec![
                (dsi("1.1"), SkipReason::Excluded),
                (dsi("1.2"), SkipReason::Excluded)
            ]
        );
        assert!(!provenance_of(&agg.hint).contains(&"1.1".to_string()));
    }

    #[test]
    fn protocol_mismatch_is_skipped() {
        let table = RoutingTable::default();
        table
            .replace(meta("1.1", "ldap://a/"), &hint(10, "s", &[("x", 1)], None))
            .unwrap();
        let agg = aggregate(None, &table, &node("9.9"), None);
        assert!(agg.hint.weightlists.is_empty());
        assert!(matches!(
            agg.skipped[0].1,
            SkipReason::ProtocolMismatch { .. }
        ));
    }

    #[test]
    fn ping_pong_is_refused() {
        // A polls B and B polls A; both aggregate. B's out-bound hint names A once A's data is
        // in it, so A refuses it; and A's own hint never comes back.
        let a = RoutingTable::new(TableConfig {
            node: Some(dsi("1.1")),
            ..TableConfig::default()
        });
        let b = RoutingTable::new(TableConfig {
            node: Some(dsi("1.2")),
            ..TableConfig::default()
        });
        let a_local = hint(10, "http://a/", &[("x", 1)], None);
        let b_local = hint(20, "http://b/", &[("y", 2)], None);
        let from_a = aggregate(Some(&a_local), &a, &node("1.1"), None).hint;
        b.replace(meta("1.1", "cip://a/"), &from_a).unwrap();
        let from_b = aggregate(Some(&b_local), &b, &node("1.2"), None).hint;
        assert!(matches!(
            a.replace(meta("1.2", "cip://b/"), &from_b),
            Err(ImportError::Loop { .. })
        ));
        // Excluding the poller gives A only B's own data, which A accepts.
        let from_b = aggregate(Some(&b_local), &b, &node("1.2"), Some(&dsi("1.1"))).hint;
        a.replace(meta("1.2", "cip://b/"), &from_b).unwrap();
        assert_eq!(counts(&from_b), vec![("y".into(), 2)]);
    }
}
