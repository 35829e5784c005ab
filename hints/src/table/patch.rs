//! Deltas applied in place: [`RoutingTable::apply_delta`] changes a peer's entries without
//! rebuilding its segment (see the parent module's "Deltas in place").

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use cip_proto::Dsi;

use crate::hint::{AttrSpec, CipHint};
use crate::index::{PatchBuilder, cmp_folded, hash_lower};

use crate::peer::PeerMeta;

use super::config::{ImportError, ReplaceOutcome, entry_charge, provenance_charge};
use super::state::{AttrTable, PeerEntry, RoutingTable};

/// The entries of one weightlist a delta changes, as [`RoutingTable::apply_delta`] takes
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListChanges {
    /// The weightlist.
    pub attribute: AttrSpec,
    /// Its entries that differ.
    pub entries: Vec<CountChange>,
}

/// One entry of a weightlist whose count a delta changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountChange {
    /// The value, as the hint spells it.
    pub value: Bytes,
    /// Its count in the hint the table holds; 0 when that hint does not list it.
    pub before: u64,
    /// Its count in the new hint; 0 when the new hint does not list it.
    pub after: u64,
}

impl RoutingTable {
    /// Applies a delta to the hint held for `peer.dsi` in place: `hint` is the new hint
    /// (its header is read: total, attributes, thresholds, provenance; its weightlists are
    /// not), `changes` every entry that differs between the hint held and the new one.
    ///
    /// The records of the values changed move to a new small segment, with the change
    /// applied; the segments they leave hide them (see `index::Segment`). So the work and
    /// the memory are those of the changed values' records, whatever the hint's size, and
    /// the table equals what [`RoutingTable::replace`] with the new hint makes (the same
    /// entries, counts and answers; a value's shown spelling is one of its spellings).
    /// Readers see the old hint or the new one, never a mix.
    ///
    /// # Errors
    /// [`ImportError::NeedsWhole`] when it cannot be applied in place (no hint held for the
    /// DSI, or a total lowered below a count the held hint may list): call
    /// [`RoutingTable::replace`] with the new hint. Otherwise the errors of `replace`, for
    /// the header and the changed entries. The table is unchanged on every error.
    pub fn apply_delta(
        &self,
        peer: PeerMeta,
        hint: &CipHint,
        changes: &[ListChanges],
    ) -> Result<ReplaceOutcome, ImportError> {
        let limits = &self.config.limits;
        let _writer = self.lock();
        let mut next = (*self.current.load_full()).clone();
        let Some(&slot) = next.peers.get(&peer.dsi) else {
            return Err(ImportError::NeedsWhole(format!(
                "no hint of {} is held",
                peer.dsi
            )));
        };
        let Some(old) = next.entry(slot).cloned() else {
            return Err(ImportError::NeedsWhole(format!(
                "no hint of {} is held",
                peer.dsi
            )));
        };
        let provenance = self.check_header(&next, &peer, hint)?;
        let total = hint.total_object_count;
        if total < old.max_count {
            return Err(ImportError::NeedsWhole(format!(
                "the total went down to {total}, below a count the hint held may list"
            )));
        }
        // The changed entries' checks and charge.
        let mut listed = old.listed;
        let mut budget = old.budget - provenance_charge(&old.provenance).min(old.budget)
            + provenance_charge(&provenance);
        let mut max_count = old.max_count;
        for list in changes {
            let name = || format!("{}:{}", list.attribute.template, list.attribute.attribute);
            for (index, c) in list.entries.iter().enumerate() {
                match (c.before > 0, c.after > 0) {
                    (false, true) => {
                        listed += 1;
                        budget += entry_charge(c.value.len());
                    }
                    (true, false) => {
                        listed = listed.saturating_sub(1);
                        budget = budget.saturating_sub(entry_charge(c.value.len()));
                    }
                    _ => {}
                }
                if c.after > total {
                    return Err(ImportError::CountAboveTotal {
                        attribute: name(),
                        index,
                        count: c.after,
                        total,
                    });
                }
                if c.after > 0 && c.value.len() > limits.max_value_len {
                    return Err(ImportError::ValueTooLong {
                        attribute: name(),
                        index,
                        len: c.value.len(),
                        max: limits.max_value_len,
                    });
                }
                max_count = max_count.max(c.after);
            }
        }
        if listed > limits.max_entries_per_hint {
            return Err(ImportError::TooManyEntries {
                count: listed,
                max: limits.max_entries_per_hint,
            });
        }
        let held = next.budget_held();
        let others = Self::check_budget(limits, &next, &peer.dsi, budget, &held)?;
        let specs = changes
            .iter()
            .map(|c| &c.attribute)
            .chain(hint.thresholds.iter().map(|(s, _)| s));
        Self::intern_attrs(limits, &mut next, specs)?;

        // Every changed entry with its attribute id, in folded value order: entries that
        // fold alike share a posting, and the patch is written in that order.
        let mut order: Vec<(u32, &CountChange)> = Vec::new();
        for list in changes {
            if let Some(attr) = next.attrs.id(&list.attribute) {
                order.extend(list.entries.iter().map(|c| (attr, c)));
            }
        }
        order.sort_unstable_by(|a, b| cmp_folded(&a.1.value, &b.1.value));

        let mut hide: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        let mut patch = PatchBuilder::new(order.len());
        let (mut distinct, mut entries) = (old.distinct_values as i64, old.entries as i64);
        // Reused per value: its folded bytes, postings, summed changes, spellings.
        let (mut lower, mut spelling, mut best) = (Vec::new(), Vec::new(), Vec::new());
        let mut touched: Vec<Bytes> = Vec::new();
        let mut postings: Vec<(u32, u32, u64)> = Vec::new();
        let mut diffs: Vec<(u32, i128)> = Vec::new();
        for group in order.chunk_by(|a, b| cmp_folded(&a.1.value, &b.1.value).is_eq()) {
            lower.clear();
            lower.extend_from_slice(&group[0].1.value);
            lower.make_ascii_lowercase();
            let hash = hash_lower(&self.hasher, &lower);
            touched.push(Bytes::copy_from_slice(&lower));
            // The records holding the peer's postings of this value (one per segment at
            // most), copied whole: the segments they leave hide them.
            postings.clear();
            best.clear();
            let mut found = false;
            for (si, seg) in next.segments.iter().enumerate() {
                let Some(id) = seg.find_exact(hash, &lower) else {
                    continue;
                };
                // Read once: kept only when the peer has a posting here.
                let before = postings.len();
                postings.extend(seg.postings(id).map(|(s, a, n)| (a, s, n)));
                if !postings[before..].iter().any(|p| p.1 == slot) {
                    postings.truncate(before);
                    continue;
                }
                spelling.clear();
                seg.write_value(id, &mut spelling);
                if !found || spelling < best {
                    best.clone_from(&spelling);
                }
                found = true;
                hide.entry(si).or_default().push(id);
            }
            diffs.clear();
            for &(attr, c) in group {
                let diff = i128::from(c.after) - i128::from(c.before);
                match diffs.iter_mut().find(|d| d.0 == attr) {
                    Some(d) => d.1 += diff,
                    None => diffs.push((attr, diff)),
                }
                if c.after > 0 && (!found || c.value[..] < best[..]) {
                    best.clear();
                    best.extend_from_slice(&c.value);
                    found = true;
                }
            }
            let had = postings.iter().filter(|p| p.1 == slot).count() as i64;
            for &(attr, diff) in &diffs {
                match postings.iter_mut().find(|p| p.0 == attr && p.1 == slot) {
                    Some(p) => {
                        let n = (i128::from(p.2) + diff).clamp(0, i128::from(u64::MAX));
                        p.2 = n as u64;
                    }
                    None if diff > 0 => {
                        postings.push((attr, slot, diff.min(i128::from(u64::MAX)) as u64));
                    }
                    None => {}
                }
            }
            postings.retain(|p| p.2 > 0);
            let has = postings.iter().filter(|p| p.1 == slot).count() as i64;
            entries += has - had;
            distinct += i64::from(has > 0) - i64::from(had > 0);
            if found {
                patch
                    .push(&best, &mut postings)
                    .map_err(|_| ImportError::TooLarge)?;
            }
        }
        // Indexing the patch is the peak of the change: what served the walk goes first.
        drop((order, postings, diffs, lower, spelling, best));
        let patch = patch.finish(&self.hasher);
        for (si, ids) in hide {
            next.segments[si] = Arc::new(next.segments[si].hiding(&ids));
        }
        if let Some(patch) = patch {
            next.segments.push(Arc::new(patch));
        }
        let thresholds = thresholds_of(&next.attrs, hint);
        let entry = PeerEntry {
            meta: Arc::new(peer),
            total,
            attributes: hint.attributes.clone(),
            sources: hint.sources.clone(),
            thresholds,
            provenance,
            distinct_values: distinct.max(0) as usize,
            entries: entries.max(0) as usize,
            budget,
            listed,
            max_count,
        };
        let outcome = ReplaceOutcome {
            replaced: true,
            distinct_values: entry.distinct_values,
            entries: entry.entries,
        };
        next.slots[slot as usize] = Some(Arc::new(entry));
        debug_assert_eq!(next.budget_held(), others + budget);
        // Logged before it is published (under the writer lock): a reader that sees the
        // generation finds its change.
        let generation = self.current.load().generation + 1;
        self.changes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(generation, touched);
        self.commit(next);
        Ok(outcome)
    }
}

impl RoutingTable {
    /// The counts the hint held for `dsi` lists for `wanted` values, each `(weightlist,
    /// value)`: its entries that fold alike summed (the value ASCII-case-folded, the
    /// weightlist matched as the table matches attributes), 0 when it lists none; `None`
    /// when no hint of `dsi` is held. A receiver that keeps no copy of a peer's hint reads
    /// a delta's old counts here ([`crate::delta::HintDelta::apply_to_head`]); the delta's
    /// digest then tells whether they were the hint's own.
    pub fn held_counts<'a>(
        &self,
        dsi: &Dsi,
        wanted: impl IntoIterator<Item = (&'a AttrSpec, &'a [u8])>,
    ) -> Option<Vec<u64>> {
        let snap = self.current.load_full();
        let &slot = snap.peers.get(dsi)?;
        snap.entry(slot)?;
        let mut lower = Vec::new();
        let counts = wanted
            .into_iter()
            .map(|(spec, value)| {
                let Some(attr) = snap.attrs.id(spec) else {
                    return 0;
                };
                lower.clear();
                lower.extend_from_slice(value);
                lower.make_ascii_lowercase();
                let hash = hash_lower(&self.hasher, &lower);
                snap.segments
                    .iter()
                    .filter_map(|seg| {
                        let id = seg.find_exact(hash, &lower)?;
                        Some(
                            seg.postings(id)
                                .filter(|&(s, a, _)| s == slot && a == attr)
                                .fold(0u64, |n, p| n.saturating_add(p.2)),
                        )
                    })
                    .fold(0u64, u64::saturating_add)
            })
            .collect();
        Some(counts)
    }
}

/// A hint's thresholds by attribute id, sorted, the highest kept for an attribute named
/// twice (every threshold attribute interned).
pub(super) fn thresholds_of(attrs: &AttrTable, hint: &CipHint) -> Vec<(u32, u64)> {
    let mut thresholds: Vec<(u32, u64)> = hint
        .thresholds
        .iter()
        .filter_map(|(s, t)| Some((attrs.id(s)?, *t)))
        .collect();
    thresholds.sort_unstable();
    thresholds.dedup_by(|b, a| {
        let same = a.0 == b.0;
        if same {
            a.1 = a.1.max(b.1);
        }
        same
    });
    thresholds
}

impl RoutingTable {
    /// The hash the segments' exact tables find a folded value by.
    pub(crate) fn hash_folded(&self, lower: &[u8]) -> u64 {
        crate::index::hash_lower(&self.hasher, lower)
    }

    /// The values (ASCII-lowercased, possibly repeated) whose entries changed between
    /// generation `from` and generation `to` (the current one or older), when every change
    /// between them was made in place ([`RoutingTable::apply_delta`]) and is still logged;
    /// `None` otherwise (a whole import, a removal or an expiry came between, or the
    /// changes were too many to keep). Whatever the table's entries make of a value not
    /// listed is the same at `to` as at `from`; the peers' headers and metadata may have
    /// changed all the same.
    pub fn touched_since(&self, from: u64, to: u64) -> Option<Vec<Bytes>> {
        self.changes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .since(from, to)
    }
}
