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

use std::borrow::Cow;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::soif::Attribute;

use crate::hint::{AttrSpec, CipHint, WeightEntry, Weightlist};
use crate::index::{Segment, cmp_folded};
pub mod kept;

use crate::table::{PROVENANCE_ATTRIBUTE, RoutingTable, Snapshot, attr_key, provenance};

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
    /// The poller asked for it apart: it travels as an object of its own beside the
    /// aggregate ([`Filter::separate`]).
    Separated,
    /// Only another dataset was asked for ([`Filter::only`]).
    NotAsked,
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
    /// The routing table generation it was computed from
    /// ([`RoutingTable::generation`]).
    pub generation: u64,
}

/// What an out-bound hint leaves out, and whether it is one passed-on dataset rather than
/// the node's aggregate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// The poller: its data, and every hint whose provenance names it, are left out.
    pub exclude: Option<Dsi>,
    /// Datasets the poller asked for apart: left out of the aggregate, each sent as an
    /// object of its own (`only`).
    pub separate: std::collections::BTreeSet<Dsi>,
    /// Just this table entry, without the local hint: a passed-on object, whose `Path`
    /// is this node followed by the entry's own path.
    pub only: Option<Dsi>,
}

/// One out-bound attribute: its spelling, whether any input lists it, its threshold, and
/// its summed values as `(arena offset, length, count)` in folded value order.
#[derive(Default)]
struct AttrAcc {
    spelling: Option<AttrSpec>,
    listed: bool,
    threshold: Option<u64>,
    values: Vec<(usize, usize, u64)>,
}

#[derive(Default)]
struct Acc {
    /// Attribute index by [`attr_key`].
    index: HashMap<(String, String), usize>,
    attrs: Vec<AttrAcc>,
    sources: Vec<String>,
    total: u64,
    provenance: BTreeSet<Dsi>,
    /// Every out-bound value spelling, back to back; the weightlists slice it.
    arena: Vec<u8>,
}

impl Acc {
    /// The index of `spec`'s attribute, added on first sight.
    fn attr_index(&mut self, spec: &AttrSpec) -> usize {
        let key = attr_key(spec);
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.attrs.len();
        self.attrs.push(AttrAcc {
            spelling: Some(AttrSpec {
                template: spec.template.clone(),
                attribute: cip_proto::soif::attr::base_name(&spec.attribute).to_owned(),
            }),
            ..AttrAcc::default()
        });
        self.index.insert(key, i);
        i
    }

    fn attr(&mut self, spec: &AttrSpec) -> &mut AttrAcc {
        let i = self.attr_index(spec);
        &mut self.attrs[i]
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

/// Where one folded value comes from in the merge: a segment's value, or a local entry.
#[derive(Clone, Copy)]
enum From {
    Segment { seg: usize, id: u32 },
    Local { pos: usize },
}

/// A merge cursor: the next value of one input, by folded order.
struct Cursor<'a> {
    key: &'a [u8],
    order: usize,
    from: From,
}

impl PartialEq for Cursor<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Cursor<'_> {}
impl PartialOrd for Cursor<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Cursor<'_> {
    // Reversed: `BinaryHeap` is a max-heap and the smallest folded value comes first.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        cmp_folded(other.key, self.key).then(other.order.cmp(&self.order))
    }
}

/// The folded value being merged: its sums per out-bound attribute, and the smallest
/// spelling among the inputs that contributed (one spelling for all its attributes, as in
/// the table's segments).
#[derive(Default)]
struct Group {
    sums: Vec<(usize, u64)>,
    spelling: Vec<u8>,
    scratch: Vec<u8>,
}

impl Group {
    /// Adds `count` under `attr`; `spell` writes this input's spelling.
    fn add(&mut self, attr: usize, count: u64, spell: impl FnOnce(&mut Vec<u8>)) {
        if count == 0 {
            return;
        }
        let first = self.sums.is_empty();
        match self.sums.iter_mut().find(|p| p.0 == attr) {
            Some(p) => p.1 = p.1.saturating_add(count),
            None => self.sums.push((attr, count)),
        }
        self.scratch.clear();
        spell(&mut self.scratch);
        if first || self.scratch < self.spelling {
            std::mem::swap(&mut self.spelling, &mut self.scratch);
        }
    }

    /// Adds value `id` of segment `s`: per attribute, the counts of the slots included.
    fn add_segment(
        &mut self,
        s: &Segment,
        id: u32,
        included_slots: &[bool],
        table_attrs: &[usize],
    ) {
        for g in s.groups(id) {
            let mut sum = 0u64;
            for (slot, count) in s.group_postings(g) {
                if included_slots.get(slot as usize).copied().unwrap_or(false) {
                    sum = sum.saturating_add(count);
                }
            }
            let attr = table_attrs[g.attr as usize];
            self.add(attr, sum, |out| s.write_value(id, out));
        }
    }

    /// Moves the sums into their attributes' value lists and starts the next value.
    fn flush(&mut self, acc: &mut Acc) {
        if self.sums.is_empty() {
            return;
        }
        let at = acc.arena.len();
        acc.arena.extend_from_slice(&self.spelling);
        for (attr, count) in self.sums.drain(..) {
            acc.attrs[attr]
                .values
                .push((at, self.spelling.len(), count));
        }
        self.spelling.clear();
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
    let filter = Filter {
        exclude: exclude.cloned(),
        ..Filter::default()
    };
    aggregate_filtered(local, table, node, &filter)
}

/// Builds an out-bound hint as [`aggregate`] does, leaving out what `filter` says; with
/// [`Filter::only`], the one passed-on entry (the local hint is then ignored) with its
/// `Path` ([`crate::table::PATH_ATTRIBUTE`]).
pub fn aggregate_filtered(
    local: Option<&CipHint>,
    table: &RoutingTable,
    node: &NodeIdentity,
    filter: &Filter,
) -> Aggregate {
    let snap = table.snapshot();
    let mut inputs = gather(local, &snap, node, filter);
    merge(&mut inputs, &snap);
    let Inputs {
        acc,
        included,
        skipped,
        path,
        ..
    } = inputs;
    let mut hint = finish(acc, &node.url);
    if let Some(p) = path {
        let text: Vec<&str> = p.iter().map(Dsi::as_str).collect();
        match Attribute::new(crate::table::PATH_ATTRIBUTE, Bytes::from(text.join(" "))) {
            Ok(a) => hint.extra.push(a),
            // Invariant: `Path` is an identifier; this arm never runs.
            Err(e) => tracing::error!(%e, "path attribute rejected"),
        }
    }
    Aggregate {
        hint,
        included,
        skipped,
        generation: snap.generation,
    }
}

/// What an aggregate reads, gathered: the header summed ([`Acc`], its attributes interned
/// in a fixed order), which table slots it includes and the local entries.
struct Inputs<'a> {
    acc: Acc,
    /// Table attribute id -> out-bound attribute.
    table_attrs: Vec<usize>,
    /// By table slot: summed in.
    included_slots: Vec<bool>,
    included: Vec<Dsi>,
    skipped: Vec<(Dsi, SkipReason)>,
    /// The `Path` of a passed-on entry ([`Filter::only`]).
    path: Option<Vec<Dsi>>,
    /// The local entries with a count, in folded order like the segments' values:
    /// `(value, out-bound attribute, count)`.
    local_entries: Vec<(Cow<'a, [u8]>, usize, u64)>,
}

/// Reads the local hint's header and every table entry's, and decides which entries are
/// summed in (the first half of [`aggregate_filtered`]).
fn gather<'a>(
    local: Option<&'a CipHint>,
    snap: &Snapshot,
    node: &NodeIdentity,
    filter: &Filter,
) -> Inputs<'a> {
    let local = if filter.only.is_some() { None } else { local };
    let exclude = filter.exclude.as_ref();
    let mut path = None;
    let mut acc = Acc::default();
    acc.provenance.insert(node.dsi.clone());
    if let Some(h) = local {
        for spec in &h.attributes {
            acc.attr(spec).listed = true;
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
    for (dsi, &slot) in snap.peers.iter() {
        let Some(entry) = snap.entry(slot) else {
            continue;
        };
        let excluded = exclude.is_some_and(|x| {
            x == dsi || entry.provenance.contains(x) || entry.meta.path.contains(x)
        });
        if excluded {
            skipped.push((dsi.clone(), SkipReason::Excluded));
            continue;
        }
        match &filter.only {
            Some(only) if only != dsi => {
                skipped.push((dsi.clone(), SkipReason::NotAsked));
                continue;
            }
            Some(_) => {
                let mut p = vec![node.dsi.clone()];
                if entry.meta.path.is_empty() {
                    p.push(dsi.clone());
                } else {
                    p.extend(entry.meta.path.iter().cloned());
                }
                path = Some(p);
            }
            None if filter.separate.contains(dsi) => {
                skipped.push((dsi.clone(), SkipReason::Separated));
                continue;
            }
            None => {}
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
        acc.provenance.extend(entry.meta.path.iter().cloned());
    }
    let table_attrs: Vec<usize> = snap
        .attrs
        .infos
        .iter()
        .map(|i| acc.attr_index(&i.spelling))
        .collect();
    let mut local_entries: Vec<(Cow<'_, [u8]>, usize, u64)> = Vec::new();
    if let Some(h) = local {
        for (spec, list) in &h.weightlists {
            let attr = acc.attr_index(spec);
            local_entries.extend(
                list.iter()
                    .filter(|&(_, count)| count > 0)
                    .map(|(value, count)| (value, attr, count)),
            );
        }
        local_entries.sort_by(|x, y| cmp_folded(&x.0, &y.0));
    }
    Inputs {
        acc,
        table_attrs,
        included_slots,
        included,
        skipped,
        path,
        local_entries,
    }
}

/// Sums every folded value of the table's segments and of the local entries into
/// `inputs.acc` (the second half of [`aggregate_filtered`]): a merge in folded order.
fn merge(inputs: &mut Inputs<'_>, snap: &Snapshot) {
    let Inputs {
        acc,
        table_attrs,
        included_slots,
        local_entries,
        ..
    } = inputs;
    let segments = &snap.segments;
    let mut heap = BinaryHeap::with_capacity(segments.len() + 1);
    for (seg, s) in segments.iter().enumerate() {
        if s.len() > 0 {
            heap.push(Cursor {
                key: s.folded_value(0),
                order: seg,
                from: From::Segment { seg, id: 0 },
            });
        }
    }
    if let Some(first) = local_entries.first() {
        heap.push(Cursor {
            key: &first.0,
            order: segments.len(),
            from: From::Local { pos: 0 },
        });
    }
    let mut group = Group::default();
    let mut group_key: Vec<u8> = Vec::new();
    while let Some(top) = heap.pop() {
        if cmp_folded(top.key, &group_key).is_ne() {
            group.flush(acc);
            group_key.clear();
            group_key.extend_from_slice(top.key);
        }
        match top.from {
            From::Segment { seg, id } => {
                let s = &segments[seg];
                group.add_segment(s, id, included_slots, table_attrs);
                if id + 1 < s.len() as u32 {
                    heap.push(Cursor {
                        key: s.folded_value(id + 1),
                        order: seg,
                        from: From::Segment { seg, id: id + 1 },
                    });
                }
            }
            From::Local { pos } => {
                let (value, attr, count) = &local_entries[pos];
                group.add(*attr, *count, |out| out.extend_from_slice(value));
                if let Some(next) = local_entries.get(pos + 1) {
                    heap.push(Cursor {
                        key: &next.0,
                        order: top.order,
                        from: From::Local { pos: pos + 1 },
                    });
                }
            }
        }
    }
    group.flush(acc);
}

fn finish(mut acc: Acc, url: &str) -> CipHint {
    let arena = Bytes::from(std::mem::take(&mut acc.arena));
    let total = acc.total;
    let lists: Vec<Vec<WeightEntry>> = acc
        .attrs
        .iter_mut()
        .map(|a| {
            // No count can exceed the objects counted: values that fold together (one
            // peer's "Garcia" and "garcia" on the same objects) may sum past it.
            let mut entries: Vec<WeightEntry> = std::mem::take(&mut a.values)
                .into_iter()
                .map(|(at, len, count)| WeightEntry {
                    value: arena.slice(at..at + len),
                    count: count.min(total),
                })
                .collect();
            // Values arrive in folded order; a stable sort keeps it between equal counts.
            entries.sort_by_key(|e| std::cmp::Reverse(e.count));
            entries
        })
        .collect();
    assemble(acc, url, lists).0
}

/// The out-bound hint of the summed header `acc` and its weightlists (`lists`, by
/// out-bound attribute, each in the hint's order: by count, highest first, then folded
/// value): attributes in [`attr_key`] order, those listed or with values named. Also
/// returns, for each weightlist written, the out-bound attribute it is.
fn assemble(mut acc: Acc, url: &str, mut lists: Vec<Vec<WeightEntry>>) -> (CipHint, Vec<usize>) {
    let mut attrs: Vec<(AttrSpec, AttrAcc, usize)> = std::mem::take(&mut acc.attrs)
        .into_iter()
        .enumerate()
        .filter_map(|(i, mut a)| Some((a.spelling.take()?, a, i)))
        .collect();
    attrs.sort_by_key(|a| attr_key(&a.0));
    let mut hint = CipHint {
        url: url.to_owned(),
        sources: std::mem::take(&mut acc.sources),
        total_object_count: acc.total,
        ..CipHint::default()
    };
    let mut order = Vec::new();
    for (spec, a, i) in attrs {
        let entries = lists.get_mut(i).map(std::mem::take).unwrap_or_default();
        if a.listed || !entries.is_empty() {
            hint.attributes.push(spec.clone());
        }
        if !entries.is_empty() {
            order.push(i);
            hint.weightlists
                .push((spec.clone(), Weightlist::new(entries)));
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
    (hint, order)
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
            path: Vec::new(),
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
                Weightlist::new(
                    values
                        .iter()
                        .map(|(v, c)| WeightEntry {
                            value: Bytes::copy_from_slice(v.as_bytes()),
                            count: *c,
                        })
                        .collect(),
                ),
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
            .entries()
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

    /// The aggregate's weightlists computed the obvious way: a map per folded value, and
    /// the smallest spelling over every attribute and input.
    fn brute_force(local: &CipHint, peers: &[CipHint]) -> Vec<(String, Vec<(String, u64)>)> {
        let mut spelling: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for h in peers.iter().chain([local]) {
            for e in h.weightlists.iter().flat_map(|(_, l)| l.entries()) {
                let s = spelling
                    .entry(e.value.to_ascii_lowercase())
                    .or_insert_with(|| e.value.to_vec());
                if e.value[..] < s[..] {
                    *s = e.value.to_vec();
                }
            }
        }
        type Sums = HashMap<Vec<u8>, (Vec<u8>, u64)>;
        let mut by_attr: std::collections::BTreeMap<(String, String), Sums> = Default::default();
        let total: u64 = peers
            .iter()
            .chain([local])
            .map(|h| h.total_object_count)
            .sum();
        for h in peers.iter().chain([local]) {
            for (spec, list) in &h.weightlists {
                let m = by_attr.entry(attr_key(spec)).or_default();
                for e in list.entries() {
                    let slot = m
                        .entry(e.value.to_ascii_lowercase())
                        .or_insert_with(|| (e.value.to_vec(), 0));
                    if e.value[..] < slot.0[..] {
                        slot.0 = e.value.to_vec();
                    }
                    slot.1 += e.count;
                }
            }
        }
        by_attr
            .into_iter()
            .map(|((_, a), m)| {
                let mut v: Vec<(Vec<u8>, u64)> = m.into_values().collect();
                v.sort_by(|x, y| {
                    y.1.cmp(&x.1)
                        .then_with(|| x.0.to_ascii_lowercase().cmp(&y.0.to_ascii_lowercase()))
                });
                let v = v
                    .into_iter()
                    .map(|(k, c)| {
                        let k = spelling[&k.to_ascii_lowercase()].clone();
                        (String::from_utf8(k).unwrap(), c.min(total))
                    })
                    .collect();
                (a, v)
            })
            .collect()
    }

    #[test]
    fn merge_matches_brute_force() {
        // Deterministic pseudo-random hints over a small alphabet so that values collide
        // across peers, across segments and in case.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let words = [
            "garcia", "GARCIA", "Garcia", "smith", "Smith", "li", "LI", "o'brien", "zed", "a",
        ];
        let attrs = ["Author", "Title", "author-2"];
        let mut make = |n: usize| -> CipHint {
            let mut h = CipHint {
                url: "-".into(),
                total_object_count: 1000,
                ..CipHint::default()
            };
            for a in attrs {
                let spec = AttrSpec {
                    template: if next(2) == 0 { "DOCUMENT" } else { "document" }.into(),
                    attribute: a.into(),
                };
                let mut seen = std::collections::HashSet::new();
                let mut entries = Vec::new();
                for _ in 0..n {
                    let w = words[next(words.len() as u64) as usize];
                    let w = format!("{w}{}", next(3));
                    if seen.insert(w.clone()) {
                        entries.push(WeightEntry {
                            value: Bytes::from(w),
                            count: 1 + next(50),
                        });
                    }
                }
                h.attributes.push(spec.clone());
                h.weightlists.push((spec, Weightlist::new(entries)));
            }
            h
        };
        for round in 0..8 {
            let table = RoutingTable::default();
            let peers: Vec<CipHint> = (0..6).map(|_| make(12)).collect();
            // Some one by one (several segments), some in one batch.
            for (i, h) in peers.iter().enumerate().take(3) {
                table
                    .replace(meta(&format!("1.{i}"), "cip://p/"), h)
                    .unwrap();
            }
            let batch: Vec<_> = peers
                .iter()
                .enumerate()
                .skip(3)
                .map(|(i, h)| (meta(&format!("1.{i}"), "cip://p/"), h))
                .collect();
            assert!(table.replace_all(batch).iter().all(Result::is_ok));
            let local = make(8);
            let agg = aggregate(Some(&local), &table, &node("9.9"), None);
            let got: Vec<(String, Vec<(String, u64)>)> = agg
                .hint
                .weightlists
                .iter()
                .map(|(spec, w)| {
                    (
                        spec.attribute.to_ascii_lowercase(),
                        w.entries()
                            .map(|e| (String::from_utf8(e.value.to_vec()).unwrap(), e.count))
                            .collect(),
                    )
                })
                .collect();
            assert_eq!(got, brute_force(&local, &peers), "round {round}");
            assert_eq!(agg.generation, table.generation());
        }
    }

    #[test]
    fn folded_sums_never_exceed_the_total() {
        let table = RoutingTable::default();
        table
            .replace(
                meta("1.1", "cip://a/"),
                &hint(10, "s", &[("Garcia", 8), ("garcia", 7)], None),
            )
            .unwrap();
        let agg = aggregate(None, &table, &node("9.9"), None);
        assert_eq!(counts(&agg.hint), vec![("Garcia".into(), 10)]);
    }
}
