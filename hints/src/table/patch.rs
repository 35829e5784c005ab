//! Deltas applied in place: [`RoutingTable::apply_delta`] changes a peer's entries without
//! rebuilding its segment (see the parent module's "Deltas in place").

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::hint::{AttrSpec, CipHint};
use crate::index::{Record, Segment, hash_lower};

use super::config::{entry_charge, provenance_charge};
use super::state::{PeerEntry, RoutingTable};
use super::{ImportError, PeerMeta, ReplaceOutcome, thresholds_of};

/// One weightlist entry a delta changes, as [`RoutingTable::apply_delta`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryChange {
    /// Its weightlist.
    pub attribute: AttrSpec,
    /// The value, as the hint spells it.
    pub value: Bytes,
    /// Its count in the hint the table holds; 0 when that hint does not list it.
    pub before: u64,
    /// Its count in the new hint; 0 when the new hint does not list it.
    pub after: u64,
}

/// What one folded value's changes do to the peer's postings.
#[derive(Default)]
struct ValueChange<'c> {
    /// `(attribute id, count after - count before)`, summed per attribute.
    diffs: Vec<(u32, i128)>,
    /// The spellings the new hint lists it by.
    spellings: Vec<&'c [u8]>,
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
        changes: &[EntryChange],
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
        for (index, c) in changes.iter().enumerate() {
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
                    attribute: format!("{}:{}", c.attribute.template, c.attribute.attribute),
                    index,
                    count: c.after,
                    total,
                });
            }
            if c.after > 0 && c.value.len() > limits.max_value_len {
                return Err(ImportError::ValueTooLong {
                    attribute: format!("{}:{}", c.attribute.template, c.attribute.attribute),
                    index,
                    len: c.value.len(),
                    max: limits.max_value_len,
                });
            }
            max_count = max_count.max(c.after);
        }
        if listed > limits.max_entries_per_hint {
            return Err(ImportError::TooManyEntries {
                count: listed,
                max: limits.max_entries_per_hint,
            });
        }
        let mut held = next.budget_held();
        let others = Self::check_budget(limits, &next, &peer.dsi, budget, &held)?;
        held = others + budget;
        let specs = changes
            .iter()
            .map(|c| &c.attribute)
            .chain(hint.thresholds.iter().map(|(s, _)| s));
        Self::intern_attrs(limits, &mut next, specs)?;

        // The changes by folded value (entries that fold alike share a posting).
        let mut by_value: BTreeMap<Vec<u8>, ValueChange<'_>> = BTreeMap::new();
        for c in changes {
            let Some(attr) = next.attrs.id(&c.attribute) else {
                continue;
            };
            let diff = i128::from(c.after) - i128::from(c.before);
            let v = by_value.entry(c.value.to_ascii_lowercase()).or_default();
            match v.diffs.iter_mut().find(|d| d.0 == attr) {
                Some(d) => d.1 += diff,
                None => v.diffs.push((attr, diff)),
            }
            if c.after > 0 {
                v.spellings.push(&c.value);
            }
        }

        let mut hide: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        let mut records: Vec<Record> = Vec::new();
        let (mut distinct, mut entries) = (old.distinct_values as i64, old.entries as i64);
        let mut spelling = Vec::new();
        for (folded, change) in &by_value {
            let hash = hash_lower(&self.hasher, folded);
            // The records holding the peer's postings of this value (one per segment at
            // most), copied whole: the segments they leave hide them.
            let mut postings: Vec<(u32, u32, u64)> = Vec::new();
            let mut best: Option<Vec<u8>> = None;
            for (si, seg) in next.segments.iter().enumerate() {
                let Some(id) = seg.find_exact(hash, folded) else {
                    continue;
                };
                if !seg.postings(id).any(|p| p.0 == slot) {
                    continue;
                }
                postings.extend(seg.postings(id).map(|(s, a, n)| (a, s, n)));
                spelling.clear();
                seg.write_value(id, &mut spelling);
                if best.as_ref().is_none_or(|b| spelling < *b) {
                    best = Some(spelling.clone());
                }
                hide.entry(si).or_default().push(id);
            }
            let had = postings.iter().filter(|p| p.1 == slot).count() as i64;
            for &(attr, diff) in &change.diffs {
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
            for s in &change.spellings {
                if best.as_ref().is_none_or(|b| *s < &b[..]) {
                    best = Some(s.to_vec());
                }
            }
            if let (Some(best), false) = (best, postings.is_empty()) {
                records.push((best, postings));
            }
        }
        let patch = if records.is_empty() {
            None
        } else {
            Some(Segment::from_records(records, &self.hasher).map_err(|_| ImportError::TooLarge)?)
        };
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
        debug_assert_eq!(next.budget_held(), held);
        next.compact(
            &self.hasher,
            false,
            self.bulk(),
            self.config.index_threads(),
        );
        next.rerank();
        self.summarize(&next);
        self.publish(next);
        Ok(outcome)
    }
}
