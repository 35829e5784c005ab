//! The node's shared out-bound aggregate, kept from one build to the next so that the next
//! is made from the table's changes since, not from the whole table (BGP's adj-rib-out,
//! updated by the routes that changed).
//!
//! The rule that makes it exact: an out-bound entry is a function of the table's entries
//! for its folded value, the local hint's, which peers are included and the total. So when
//! the local hint and the included peers are the same, and every table write since was made
//! in place ([`RoutingTable::touched_since`] lists the values each touched), only those
//! values' entries can differ, and only those are read again from the table, as the whole
//! aggregation reads them. A changed total can change the counts it caps; the entries at or
//! above the lower of the two totals are read again too (a weightlist is sorted by count,
//! so they are its first). Anything else (the local hint rebuilt, a peer imported whole or
//! gone, a peer left out for its protocols, a change no longer logged) is [`Stale`]: the
//! caller aggregates the whole table again and keeps that.
//!
//! Each advance also gives the [`HintDelta`] from the hint before to the hint after, made of
//! the entries it changed and the header, at the cost of the change: a poller holding the
//! hint before takes it instead of the whole hint.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use cip_proto::Dsi;

use super::{Aggregate, Filter, Group, NodeIdentity, assemble, gather};
use crate::delta::{EntryChange, HintDelta};
use crate::hint::{AttrSpec, CipHint, WeightEntry};
use crate::index::cmp_folded;
use crate::table::{RoutingTable, attr_key};

/// Why a kept aggregate cannot be brought up to date from the table's changes: build it
/// whole again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Stale {
    /// The local hint is not the one it was made with.
    #[error("the local hint changed")]
    Local,
    /// A table write since was not made in place, or is no longer logged.
    #[error("the table changed other than in place")]
    Table,
    /// A peer was included or left out since, or one is left out for its protocols.
    #[error("the peers summed in changed")]
    Peers,
    /// An attribute is now spelled otherwise, or the total is 0.
    #[error("the aggregate's layout changed")]
    Layout,
    /// The header cannot be written as a hint's.
    #[error("the header cannot be written")]
    Header,
}

/// The shared out-bound aggregate as last made ([`super::aggregate`] with nothing left
/// out), with what its next advance needs.
#[derive(Debug)]
pub struct Kept {
    hint: CipHint,
    /// [`crate::delta::digest`] of `hint`.
    digest: u64,
    /// The table generation it covers.
    generation: u64,
    /// The local hint it was made with.
    local: Option<Arc<CipHint>>,
    /// The peers summed in.
    included: Vec<Dsi>,
    /// Per weightlist of `hint`: its entries' positions in folded value order.
    folded: Vec<Vec<u32>>,
}

/// The order of a weightlist in an aggregate: by count, highest first, then folded value.
fn list_cmp(a: &WeightEntry, b: &WeightEntry) -> std::cmp::Ordering {
    b.count
        .cmp(&a.count)
        .then_with(|| cmp_folded(&a.value, &b.value))
}

/// The positions of `entries` in folded value order.
fn folded_order(entries: &[WeightEntry]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..entries.len() as u32).collect();
    order.sort_unstable_by(|&a, &b| {
        cmp_folded(&entries[a as usize].value, &entries[b as usize].value)
    });
    order
}

/// The position of folded value `key` in a weightlist, by its folded order.
fn find(entries: &[WeightEntry], folded: &[u32], key: &[u8]) -> Option<u32> {
    folded
        .binary_search_by(|&p| cmp_folded(&entries[p as usize].value, key))
        .ok()
        .map(|i| folded[i])
}

/// A weightlist with the entries at `dead` (positions) taken out and `added` put in, in the
/// aggregate's order, with its folded order: one pass over each, as the kept entries keep
/// their order in both.
fn rebuild(
    old: Vec<WeightEntry>,
    old_folded: &[u32],
    dead: &[u32],
    mut added: Vec<WeightEntry>,
) -> (Vec<WeightEntry>, Vec<u32>) {
    let mut is_dead = vec![false; old.len()];
    for &p in dead {
        is_dead[p as usize] = true;
    }
    added.sort_by(list_cmp);
    let mut out = Vec::with_capacity(old.len() - dead.len() + added.len());
    let mut moved = vec![u32::MAX; old.len()];
    let mut added_at = Vec::with_capacity(added.len());
    let mut adds = added.into_iter().peekable();
    for (i, e) in old.into_iter().enumerate() {
        if is_dead[i] {
            continue;
        }
        while let Some(a) = adds.next_if(|a| list_cmp(a, &e).is_lt()) {
            added_at.push(out.len() as u32);
            out.push(a);
        }
        moved[i] = out.len() as u32;
        out.push(e);
    }
    for a in adds {
        added_at.push(out.len() as u32);
        out.push(a);
    }
    added_at.sort_unstable_by(|&a, &b| cmp_folded(&out[a as usize].value, &out[b as usize].value));
    let mut folded = Vec::with_capacity(out.len());
    let mut j = 0;
    for &p in old_folded {
        let q = moved[p as usize];
        if q == u32::MAX {
            continue;
        }
        while j < added_at.len()
            && cmp_folded(&out[added_at[j] as usize].value, &out[q as usize].value).is_lt()
        {
            folded.push(added_at[j]);
            j += 1;
        }
        folded.push(q);
    }
    folded.extend_from_slice(&added_at[j..]);
    (out, folded)
}

impl Kept {
    /// Keeps `aggregate`, the shared aggregate (nothing left out by a [`Filter`]) made
    /// from `local` and whose [`crate::delta::digest`] is `digest`. `None` when it left a
    /// peer out for its protocols (which peers those are may change without a table
    /// write), and when it includes no peer (a leaf's: every change it will see is its
    /// local hint's, so keeping it would only cost its size).
    pub fn new(aggregate: Aggregate, local: Option<Arc<CipHint>>, digest: u64) -> Option<Self> {
        if !aggregate.skipped.is_empty() || aggregate.included.is_empty() {
            return None;
        }
        let folded = aggregate
            .hint
            .weightlists
            .iter()
            .map(|(_, list)| folded_order(&list.entries().collect::<Vec<_>>()))
            .collect();
        Some(Self {
            hint: aggregate.hint,
            digest,
            generation: aggregate.generation,
            local,
            included: aggregate.included,
            folded,
        })
    }

    /// The aggregate as it stands.
    pub fn hint(&self) -> &CipHint {
        &self.hint
    }

    /// Its [`crate::delta::digest`].
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// The table generation it covers.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Brings the aggregate up to the table's current generation from the changes since
    /// (see the module doc), and returns the delta from the hint before to the hint now.
    /// `local` is the local hint, `node` this node.
    ///
    /// # Errors
    /// [`Stale`] when it cannot: the kept aggregate is then of no more use (drop it, and
    /// keep the next whole aggregate instead).
    pub fn advance(
        &mut self,
        local: Option<&Arc<CipHint>>,
        table: &RoutingTable,
        node: &NodeIdentity,
    ) -> Result<HintDelta, Stale> {
        match (&self.local, local) {
            (None, None) => {}
            (Some(a), Some(b)) if Arc::ptr_eq(a, b) => {}
            _ => return Err(Stale::Local),
        }
        let snap = table.snapshot();
        let touched = table
            .touched_since(self.generation, snap.generation)
            .ok_or(Stale::Table)?;
        let inputs = gather(local.map(|l| &**l), &snap, node, &Filter::default());
        if !inputs.skipped.is_empty() || inputs.included != self.included {
            return Err(Stale::Peers);
        }
        let (old_total, total) = (self.hint.total_object_count, inputs.acc.total);
        if total == 0 {
            return Err(Stale::Layout);
        }
        // Each kept weightlist's out-bound attribute, which must still be spelled alike.
        let mut attr_of = Vec::with_capacity(self.hint.weightlists.len());
        for (spec, _) in &self.hint.weightlists {
            let a = *inputs.acc.index.get(&attr_key(spec)).ok_or(Stale::Layout)?;
            if inputs.acc.attrs[a].spelling.as_ref() != Some(spec) {
                return Err(Stale::Layout);
            }
            attr_of.push(a);
        }
        // Moved out, not copied: from here on an error leaves the kept aggregate of no use
        // (the caller drops it on every error).
        let lists: Vec<Vec<WeightEntry>> = self
            .hint
            .weightlists
            .iter_mut()
            .map(|(_, l)| std::mem::take(l.entries_mut()))
            .collect();

        // The values to read again: those changed in place, and with a new total those
        // whose count the cap may have changed.
        let mut keys: Vec<Bytes> = touched;
        if total != old_total {
            let floor = total.min(old_total);
            for list in &lists {
                for e in list.iter().take_while(|e| e.count >= floor) {
                    keys.push(Bytes::from(e.value.to_ascii_lowercase()));
                }
            }
        }
        keys.sort_unstable();
        keys.dedup();

        // Per out-bound attribute: the entries that change.
        let mut changes: HashMap<usize, Vec<EntryChange>> = HashMap::new();
        // Per out-bound attribute, the positions in its kept weightlist of the entries that
        // change (found once, here).
        let mut dead_at: HashMap<usize, Vec<u32>> = HashMap::new();
        let mut group = Group::default();
        for key in &keys {
            let hash = table.hash_folded(key);
            for s in &snap.segments {
                if let Some(id) = s.find_exact(hash, key) {
                    group.add_segment(s, id, &inputs.included_slots, &inputs.table_attrs);
                }
            }
            let local = &inputs.local_entries;
            let from = local.partition_point(|e| cmp_folded(&e.0, key).is_lt());
            for (value, attr, count) in local[from..]
                .iter()
                .take_while(|e| cmp_folded(&e.0, key).is_eq())
            {
                group.add(*attr, *count, |out| out.extend_from_slice(value));
            }
            let spelling = Bytes::from(std::mem::take(&mut group.spelling));
            let mut sums = std::mem::take(&mut group.sums);
            for (li, list) in lists.iter().enumerate() {
                let Some(pos) = find(list, &self.folded[li], key) else {
                    continue;
                };
                let old = list[pos as usize].clone();
                let a = attr_of[li];
                let new = sums
                    .iter()
                    .position(|s| s.0 == a)
                    .map(|k| sums.swap_remove(k).1)
                    .map(|sum| WeightEntry {
                        value: spelling.clone(),
                        count: sum.min(total),
                    });
                if new.as_ref() != Some(&old) {
                    dead_at.entry(a).or_default().push(pos);
                    changes.entry(a).or_default().push(EntryChange {
                        old: Some(old),
                        new,
                    });
                }
            }
            // Attributes the kept hint does not list the value under.
            for (a, sum) in sums {
                changes.entry(a).or_default().push(EntryChange {
                    old: None,
                    new: Some(WeightEntry {
                        value: spelling.clone(),
                        count: sum.min(total),
                    }),
                });
            }
            group.scratch.clear();
        }

        // The header as it is now, then the weightlists: those unchanged moved over.
        let url = node.url.clone();
        let mut acc = inputs.acc;
        let mut by_attr: Vec<Vec<WeightEntry>> = vec![Vec::new(); acc.attrs.len()];
        let mut folded_by_attr: Vec<Vec<u32>> = vec![Vec::new(); acc.attrs.len()];
        let mut kept_lists = lists;
        let mut delta_lists: Vec<(usize, Vec<EntryChange>)> = Vec::new();
        let mut gone: Vec<(AttrSpec, Vec<WeightEntry>)> = Vec::new();
        for (li, list) in kept_lists.iter_mut().enumerate() {
            let a = attr_of[li];
            let old = std::mem::take(list);
            let old_folded = std::mem::take(&mut self.folded[li]);
            match changes.remove(&a) {
                None => {
                    by_attr[a] = old;
                    folded_by_attr[a] = old_folded;
                }
                Some(c) => {
                    let dead = dead_at.remove(&a).unwrap_or_default();
                    let added: Vec<WeightEntry> = c.iter().filter_map(|c| c.new.clone()).collect();
                    if dead.len() == old.len() && added.is_empty() {
                        gone.push((self.hint.weightlists[li].0.clone(), old));
                        continue;
                    }
                    let (entries, folded) = rebuild(old, &old_folded, &dead, added);
                    by_attr[a] = entries;
                    folded_by_attr[a] = folded;
                    delta_lists.push((a, c));
                }
            }
        }
        for (a, c) in changes {
            // A weightlist the kept hint did not have.
            let entries: Vec<WeightEntry> = c.iter().filter_map(|c| c.new.clone()).collect();
            let (entries, folded) = rebuild(Vec::new(), &[], &[], entries);
            by_attr[a] = entries;
            folded_by_attr[a] = folded;
            delta_lists.push((a, c));
        }
        let specs: Vec<Option<AttrSpec>> = acc.attrs.iter().map(|a| a.spelling.clone()).collect();
        acc.arena.clear();
        let (mut hint, order) = assemble(acc, &url, by_attr);
        hint.date = self.hint.date.clone();
        let lists: Vec<(AttrSpec, Vec<EntryChange>)> = delta_lists
            .into_iter()
            .filter_map(|(a, c)| Some((specs[a].clone()?, c)))
            .collect();
        let delta = HintDelta::of_changes(&self.hint, self.digest, &hint, &lists, &gone)
            .ok_or(Stale::Header)?;
        self.folded = order
            .iter()
            .map(|&a| std::mem::take(&mut folded_by_attr[a]))
            .collect();
        self.hint = hint;
        self.digest = delta.result;
        self.generation = snap.generation;
        Ok(delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::aggregate;
    use crate::delta::digest;
    use crate::hint::Weightlist;
    use crate::table::ImportError;
    use crate::table::tests::{dsi, meta};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const WORDS: &[&str] = &[
        "Garcia", "garcia", "GARCIA", "Smith", "Jones", "alpha", "Beta", "beta", "ray",
    ];
    const ATTRS: &[(&str, &str)] = &[("DOCUMENT", "Author"), ("DOCUMENT", "Title")];

    fn node() -> NodeIdentity {
        NodeIdentity {
            dsi: dsi("9.9"),
            base_uris: vec!["cip://node/".into()],
            url: "-".into(),
        }
    }

    /// A hint of `total` objects listing `picks` as `(attribute, word, count)` (counts
    /// kept within the total, a word listed once per weightlist).
    fn make(total: u64, picks: &[(usize, usize, u64)], source: usize) -> CipHint {
        let mut lists: BTreeMap<usize, BTreeMap<&str, u64>> = BTreeMap::new();
        for &(a, w, n) in picks {
            lists.entry(a).or_default().insert(WORDS[w], n.min(total));
        }
        CipHint {
            url: "-".into(),
            total_object_count: total,
            sources: vec![format!("http://s{source}/")],
            attributes: ATTRS
                .iter()
                .map(|(t, a)| AttrSpec::new(t, a).unwrap())
                .collect(),
            weightlists: lists
                .into_iter()
                .map(|(a, l)| {
                    let (t, n) = ATTRS[a];
                    let entries = l
                        .into_iter()
                        .map(|(v, count)| WeightEntry {
                            value: Bytes::from(v),
                            count,
                        })
                        .collect();
                    (AttrSpec::new(t, n).unwrap(), Weightlist::new(entries))
                })
                .collect(),
            ..CipHint::default()
        }
    }

    /// `(peer, total, picks, sent as a delta)`.
    type Step = (usize, u64, Vec<(usize, usize, u64)>, bool);

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        proptest::collection::vec(
            (
                0..3usize,
                1..12u64,
                proptest::collection::vec((0..2usize, 0..WORDS.len(), 1..8u64), 0..7),
                proptest::bool::weighted(0.85),
            ),
            1..24,
        )
    }

    /// Feeds `steps` to a table (in place where it can) and advances a kept aggregate after
    /// each; returns how many advances were made rather than whole aggregates.
    fn run(steps: Vec<Step>, local: Option<Arc<CipHint>>) -> Result<usize, TestCaseError> {
        let table = RoutingTable::default();
        let node = node();
        let mut held: Vec<Option<CipHint>> = vec![None, None, None];
        let mut kept: Option<Kept> = None;
        let mut advanced = 0;
        for (peer, total, picks, as_delta) in steps {
            let d = format!("1.{peer}");
            let next = make(total, &picks, peer);
            let in_place = held[peer]
                .as_ref()
                .filter(|_| as_delta)
                .and_then(|h| HintDelta::between(h, &next)?.apply_changes(h).ok());
            let done = match in_place {
                Some((made, changes)) => match table.apply_delta(meta(&d), &made, &changes) {
                    Err(ImportError::NeedsWhole(_)) => table.replace(meta(&d), &next),
                    other => other,
                },
                None => table.replace(meta(&d), &next),
            };
            if done.is_ok() {
                held[peer] = Some(next);
            }
            let full = aggregate(local.as_deref(), &table, &node, None);
            if let Some(k) = kept.as_mut() {
                let before = k.hint().clone();
                let before_digest = k.digest();
                match k.advance(local.as_ref(), &table, &node) {
                    Ok(delta) => {
                        advanced += 1;
                        prop_assert_eq!(k.hint(), &full.hint);
                        prop_assert_eq!(delta.base, before_digest);
                        prop_assert_eq!(delta.result, digest(&full.hint));
                        prop_assert_eq!(k.digest(), delta.result);
                        prop_assert_eq!(k.generation(), full.generation);
                        // A poller holding the hint before makes the hint now of it.
                        let made = delta.apply(&before);
                        prop_assert!(made.is_ok(), "{:?}", made);
                        let made = made.unwrap();
                        prop_assert_eq!(digest(&made), digest(&full.hint));
                        // The same weightlists (one new to the hint comes last in it).
                        let sorted = |h: &CipHint| {
                            let mut l = h.weightlists.clone();
                            l.sort_by_key(|(s, _)| attr_key(s));
                            l
                        };
                        prop_assert_eq!(sorted(&made), sorted(&full.hint));
                    }
                    Err(_) => kept = None,
                }
            }
            if kept.is_none() {
                let digest = digest(&full.hint);
                let peers = !full.included.is_empty();
                kept = Kept::new(full, local.clone(), digest);
                prop_assert_eq!(kept.is_some(), peers);
            }
        }
        Ok(advanced)
    }

    fn local_hint() -> Arc<CipHint> {
        Arc::new(make(6, &[(0, 1, 2), (0, 3, 6), (1, 6, 1)], 9))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Whatever the table's changes (in place or whole, spellings that fold alike,
        /// totals up and down), an advanced aggregate equals the whole aggregation of the
        /// table, and its delta makes it of the one before.
        #[test]
        fn advanced_equals_aggregated(steps in steps(), with_local in any::<bool>()) {
            run(steps, with_local.then(local_hint))?;
        }
    }

    #[test]
    fn changes_in_place_advance_and_others_start_over() {
        // One peer changing again and again: every step after the first is in place.
        let steps: Vec<Step> = (0..10u64)
            .map(|i| {
                let picks = (0..5)
                    .map(|k| (k % 2, (i as usize + k) % WORDS.len(), 1 + k as u64))
                    .collect();
                (0usize, 12u64 - i % 3, picks, true)
            })
            .collect();
        assert_eq!(run(steps.clone(), None).unwrap(), 9);
        assert_eq!(run(steps, Some(local_hint())).unwrap(), 9);

        // A second peer arriving is a whole import: the kept aggregate is stale.
        let table = RoutingTable::default();
        table
            .replace(meta("1.0"), &make(4, &[(0, 3, 2)], 0))
            .unwrap();
        let full = aggregate(None, &table, &node(), None);
        let d = digest(&full.hint);
        let mut k = Kept::new(full, None, d).unwrap();
        table
            .replace(meta("1.1"), &make(4, &[(0, 3, 2)], 1))
            .unwrap();
        assert_eq!(k.advance(None, &table, &node()).unwrap_err(), Stale::Table);
        // Another local hint than the one it was made with.
        let full = aggregate(None, &table, &node(), None);
        let d = digest(&full.hint);
        let mut k = Kept::new(full, None, d).unwrap();
        assert_eq!(
            k.advance(Some(&local_hint()), &table, &node()).unwrap_err(),
            Stale::Local
        );
        // Nothing changed: an empty delta, the same digest.
        let full = aggregate(None, &table, &node(), None);
        let d = digest(&full.hint);
        let mut k = Kept::new(full, None, d).unwrap();
        let delta = k.advance(None, &table, &node()).unwrap();
        assert!(delta.is_empty());
        assert_eq!(delta.result, d);
    }
}
