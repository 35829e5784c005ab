//! Incremental updates applied to a stored total (RFC 2654 §4.4; digest A12, A15).
//!
//! The stored index is an inverted one: per value, the tags of the records holding it. A
//! record is the set of tokens whose lines name its tag (plus every `*` line), and "every
//! record" is the set of tags named explicitly somewhere ([`IndexInfo::explicit_tags`]). All
//! work is done on tag ranges; only the complete-record base, which must look records up by
//! their full token sets, walks single tags. Everything an update costs — scanning the index
//! once per block, copying ranges when a `*` line is made explicit, walking single tags — is
//! counted against [`ApplyOptions::max_work`], so that a hostile update cannot make the
//! consumer spend unbounded time or memory.

use std::collections::{BTreeMap, BTreeSet};

use super::info::{IndexInfo, key, shorten};
use super::tags::{Ranges, TagSet};
use super::{Block, Body, IncrementalMode, TaggedIndex};

/// What the out-of-band agreement (RFC 2654 §4.1) says about incremental updates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyOptions {
    /// The `consistencybase`, used when the header's `updatetype` is a bare `incremental`
    /// (as in all of the RFC's examples). Default: complete record, the one every server
    /// must support.
    pub consistency: IncrementalMode,
    /// The attribute holding each record's unique ID, for the unique-ID base. Default: `dn`
    /// (the RFC's example; matched ignoring ASCII case).
    pub unique_attribute: String,
    /// Most units of work one update may take; more is [`ApplyError::TooLarge`]. A unit is
    /// about one index entry or tag range scanned or copied, or one single tag walked: each
    /// block scans the stored index once, a `*` line made explicit copies the record set,
    /// and the complete-record base walks the single tags of the records it looks up.
    pub max_work: u64,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        Self {
            consistency: IncrementalMode::CompleteRecord,
            unique_attribute: "dn".to_owned(),
            max_work: 64_000_000,
        }
    }
}

/// Why an update cannot be applied. The stored index is left as it was; in every case the
/// remedy is to poll the supplier for a total update (RFC 2654 §4.4, digest A12).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// The stored object is itself an incremental update.
    #[error("the stored index is not a total update; poll for a total update")]
    NotTotal,
    /// `lastupdate` is not the stored `thisupdate`: an update was missed or replayed.
    #[error(
        "the update follows the one of {last_update}, but the stored index is of {stored}; \
         poll for a total update"
    )]
    LastUpdateMismatch {
        /// The stored `thisupdate`.
        stored: u64,
        /// The update's `lastupdate`.
        last_update: u64,
    },
    /// Complete-record base: no stored record has exactly the tokens listed for a record.
    #[error(
        "{kind} block {block}: no stored record has exactly the tokens of record {tag}; poll \
         for a total update"
    )]
    RecordNotFound {
        /// 1-based position of the block.
        block: usize,
        /// `Delete` or `Update`.
        kind: &'static str,
        /// The record's tag in the block.
        tag: u64,
    },
    /// Complete-record base: a New record with no Old record to say which one it replaces.
    #[error("Update block {block}: new record {tag} has no old version; poll for a total update")]
    UnmatchedNew {
        /// 1-based position of the block.
        block: usize,
        /// The record's tag in the block.
        tag: u64,
    },
    /// Unique-ID base: no stored record has this unique ID.
    #[error(
        "{kind} block {block}: no stored record has the unique ID {value:?}; poll for a total update"
    )]
    UniqueIdNotFound {
        /// 1-based position of the block.
        block: usize,
        /// `Delete` or `Update`.
        kind: &'static str,
        /// The ID (shortened).
        value: String,
    },
    /// Unique-ID base: a record of the block has no unique-ID line.
    #[error("{kind} block {block}: record {tag} has no {attribute} line; poll for a total update")]
    MissingUniqueId {
        /// 1-based position of the block.
        block: usize,
        /// `Delete` or `Update`.
        kind: &'static str,
        /// The record's tag in the block.
        tag: u64,
        /// The unique attribute.
        attribute: String,
    },
    /// Unique-ID base: a record of the block has two unique IDs in its Old (or New) lines.
    #[error("Update block {block}: record {tag} has two unique IDs; poll for a total update")]
    AmbiguousUniqueId {
        /// 1-based position of the block.
        block: usize,
        /// The record's tag in the block.
        tag: u64,
    },
    /// New records would need tags beyond 18446744073709551615.
    #[error("Add block {block}: no tags left for the new records; poll for a total update")]
    TagSpaceExhausted {
        /// 1-based position of the block.
        block: usize,
    },
    /// The update needs more work than [`ApplyOptions::max_work`].
    #[error(
        "{kind} block {block}: the update needs more than {max} units of work; poll for a total \
         update"
    )]
    TooLarge {
        /// 1-based position of the block.
        block: usize,
        /// The block's kind.
        kind: &'static str,
        /// The limit.
        max: u64,
    },
}

impl TaggedIndex {
    /// Applies `update` to this stored total with [`ApplyOptions::default`]; see
    /// [`Self::apply_with`].
    ///
    /// # Errors
    /// An [`ApplyError`]; `self` is unchanged.
    pub fn apply(&mut self, update: &TaggedIndex) -> Result<(), ApplyError> {
        self.apply_with(update, &ApplyOptions::default())
    }

    /// Applies `update` to this stored total.
    ///
    /// A total `update` replaces the stored one. An incremental one must follow it:
    /// its `lastupdate` must equal the stored `thisupdate` (digest A15: equality, never
    /// ordering — the RFC's own example has `lastupdate` later than `thisupdate`). Its blocks
    /// are applied in order (RFC 2654 §4.3), under the consistency base the header names or,
    /// for a bare `incremental`, `options.consistency`:
    ///
    /// * **complete record**: tags are local to a block (an Update Block's Old and New share
    ///   them). Add: the records get fresh tags after the largest stored one. Delete: each
    ///   listed record is the stored record whose token set is exactly the listed one (the
    ///   lowest tag among identical ones), and is removed. Update: each Old record is found
    ///   the same way, then replaced by the New record with the same local tag; a New record
    ///   without an Old one is an error.
    /// * **tag based**: tags are the stored ones. Add: the lines are added with their tags.
    ///   Delete: every listed tag's record is removed wholesale (the listed tokens are not
    ///   checked). Update: Old lines' tags are removed from those values, then New lines'
    ///   tags added; a missing old token is ignored.
    /// * **unique-ID based**: records are named by their `options.unique_attribute` value.
    ///   Add: as for complete record. Delete: each listed ID's stored record is removed (other
    ///   lines are ignored). Update: each local record is mapped to the stored one through the
    ///   ID on its Old line, or else its New line; Old tokens (but the ID) are removed and New
    ///   ones added; an ID on Old and another on New for the same record renames it.
    ///
    /// `*` on a block's line stands for every record the block (or Update Block) names; in a
    /// tag-based Update Block, for every record of the index. A `*` line of the stored index
    /// that an added or changed record does not hold becomes the explicit set of the other
    /// records. On success `thisupdate` becomes the update's, `lastupdate` is cleared (the
    /// result is a total as of `thisupdate`), `contextsize` is the update's when it has one,
    /// and the update's schema lines are added to (or replace those in) the stored schema.
    ///
    /// # Errors
    /// An [`ApplyError`]; `self` is unchanged. Each calls for polling a total update.
    pub fn apply_with(
        &mut self,
        update: &TaggedIndex,
        options: &ApplyOptions,
    ) -> Result<(), ApplyError> {
        let Body::Total { info, .. } = &self.body else {
            return Err(ApplyError::NotTotal);
        };
        let (mode, last_update, blocks) = match &update.body {
            Body::Total { .. } => {
                *self = update.clone();
                return Ok(());
            }
            Body::Incremental {
                mode,
                last_update,
                blocks,
            } => (mode.unwrap_or(options.consistency), *last_update, blocks),
        };
        if last_update != self.this_update {
            return Err(ApplyError::LastUpdateMismatch {
                stored: self.this_update,
                last_update,
            });
        }
        // Work on a copy so that a failure halfway leaves the stored index intact.
        let mut work = info.clone();
        let mut budget = Budget {
            left: options.max_work,
            max: options.max_work,
        };
        for (i, b) in blocks.iter().enumerate() {
            let cx = Cx {
                block: i + 1,
                kind: b.kind(),
                unique: key(&options.unique_attribute),
                unique_name: &options.unique_attribute,
            };
            // Every block scans the stored index (and its own lines) about once, and each of
            // its `*` lines may stand for a copy of the tags the block names.
            budget.spend(size(&work) + block_size(b) + star_copies(b), &cx)?;
            match mode {
                IncrementalMode::TagBased => tag_based(&mut work, b, &cx, &mut budget)?,
                IncrementalMode::CompleteRecord => complete(&mut work, b, &cx, &mut budget)?,
                IncrementalMode::UniqueIdBased => unique(&mut work, b, &cx, &mut budget)?,
            }
        }
        self.body = Body::Total {
            last_update: None,
            info: work,
        };
        self.this_update = update.this_update;
        if update.context_size.is_some() {
            self.context_size = update.context_size;
        }
        for (a, t) in update.schema.iter() {
            self.schema.insert_unchecked(a, t);
        }
        Ok(())
    }
}

/// Where in the update we are, for errors.
struct Cx<'a> {
    block: usize,
    kind: &'static str,
    unique: String,
    unique_name: &'a str,
}

struct Budget {
    left: u64,
    max: u64,
}

impl Budget {
    fn spend(&mut self, n: u64, cx: &Cx<'_>) -> Result<(), ApplyError> {
        match self.left.checked_sub(n) {
            Some(l) => {
                self.left = l;
                Ok(())
            }
            None => Err(ApplyError::TooLarge {
                block: cx.block,
                kind: cx.kind,
                max: self.max,
            }),
        }
    }
}

/// An index line in the stored tag space, ready to add or remove.
type Token = (String, String, TagSet);

/// Entries plus tag ranges: what a scan of `info` touches.
fn size(info: &IndexInfo) -> u64 {
    info.entries()
        .map(|(_, _, t)| 1 + t.ranges().len() as u64)
        .sum()
}

/// `*` lines times the ranges of the tags the block names.
fn star_copies(b: &Block) -> u64 {
    let stars = |i: &IndexInfo| i.entries().filter(|(_, _, t)| t.is_all()).count() as u64;
    let (n, local) = match b {
        Block::Add(i) | Block::Delete(i) => (stars(i), i.explicit_ranges()),
        Block::Update { old, new } => (
            stars(old) + stars(new),
            old.explicit_ranges().union(&new.explicit_ranges()),
        ),
    };
    n.saturating_mul(local.0.len() as u64)
}

fn block_size(b: &Block) -> u64 {
    match b {
        Block::Add(i) | Block::Delete(i) => size(i),
        Block::Update { old, new } => size(old) + size(new),
    }
}

fn tag_based(
    info: &mut IndexInfo,
    b: &Block,
    cx: &Cx<'_>,
    budget: &mut Budget,
) -> Result<(), ApplyError> {
    match b {
        Block::Add(lines) => {
            let local = lines.explicit_ranges();
            let add = tokens(lines, |t| Some(resolve(t, &local).into()));
            add_tokens(info, &add, cx, budget)?;
        }
        Block::Delete(lines) => remove_records(info, &lines.explicit_ranges()),
        Block::Update { old, new } => {
            remove_tokens(info, &tokens(old, |t| Some(t.clone())), cx, budget)?;
            add_tokens(info, &tokens(new, |t| Some(t.clone())), cx, budget)?;
        }
    }
    Ok(())
}

fn complete(
    info: &mut IndexInfo,
    b: &Block,
    cx: &Cx<'_>,
    budget: &mut Budget,
) -> Result<(), ApplyError> {
    match b {
        Block::Add(lines) => add_fresh(info, lines, cx, budget),
        Block::Delete(lines) => {
            let local = lines.explicit_ranges();
            let records = forward(lines, &local, cx, budget)?;
            let matcher = Matcher::new(info);
            let mut taken = BTreeSet::new();
            for (tag, tokens) in &records {
                let s = matcher.find(info, tokens, &taken, cx, budget)?.ok_or(
                    ApplyError::RecordNotFound {
                        block: cx.block,
                        kind: cx.kind,
                        tag: *tag,
                    },
                )?;
                taken.insert(s);
            }
            remove_records(
                info,
                &Ranges::normalize(taken.iter().map(|&t| (t, t)).collect()),
            );
            Ok(())
        }
        Block::Update { old, new } => {
            let local = old.explicit_ranges().union(&new.explicit_ranges());
            let old_records = forward(old, &local, cx, budget)?;
            let new_records = forward(new, &local, cx, budget)?;
            let matcher = Matcher::new(info);
            let mut taken = BTreeSet::new();
            let mut map = BTreeMap::new();
            for (tag, tokens) in &old_records {
                let s = matcher.find(info, tokens, &taken, cx, budget)?.ok_or(
                    ApplyError::RecordNotFound {
                        block: cx.block,
                        kind: cx.kind,
                        tag: *tag,
                    },
                )?;
                taken.insert(s);
                map.insert(*tag, s);
            }
            if let Some(tag) = new_records.keys().find(|t| !map.contains_key(t)) {
                return Err(ApplyError::UnmatchedNew {
                    block: cx.block,
                    tag: *tag,
                });
            }
            remove_records(
                info,
                &Ranges::normalize(taken.iter().map(|&t| (t, t)).collect()),
            );
            let mut out = Vec::new();
            for (a, v, t) in new.entries() {
                let mut stored = Vec::new();
                for l in resolve(t, &local).iter() {
                    budget.spend(1, cx)?;
                    // Every local tag of the pair has an Old record (checked above for New's
                    // explicit tags; `*` resolves to tags Old or New names).
                    if let Some(s) = map.get(&l) {
                        stored.push((*s, *s));
                    }
                }
                out.push((a.to_owned(), v.to_owned(), Ranges::normalize(stored).into()));
            }
            add_tokens(info, &out, cx, budget)
        }
    }
}

fn unique(
    info: &mut IndexInfo,
    b: &Block,
    cx: &Cx<'_>,
    budget: &mut Budget,
) -> Result<(), ApplyError> {
    match b {
        Block::Add(lines) => add_fresh(info, lines, cx, budget),
        Block::Delete(lines) => {
            let local = lines.explicit_ranges();
            let ids = lines.attribute(cx.unique_name);
            let named = Ranges::normalize(
                ids.into_iter()
                    .flat_map(|a| a.values())
                    .flat_map(|(_, t)| resolve(t, &local).0)
                    .collect(),
            );
            if let Some(&(tag, _)) = local.difference(&named).0.first() {
                return Err(missing_id(cx, tag));
            }
            let universe = info.explicit_ranges();
            let mut gone = Vec::new();
            for (v, _) in ids.into_iter().flat_map(|a| a.values()) {
                gone.extend(stored_by_id(info, cx, budget, v, &universe)?.0);
            }
            remove_records(info, &Ranges::normalize(gone));
            Ok(())
        }
        Block::Update { old, new } => {
            let local = old.explicit_ranges().union(&new.explicit_ranges());
            let universe = info.explicit_ranges();
            let old_ids = segments(old, &local, cx)?;
            let new_ids = segments(new, &local, cx)?;
            // Old IDs name the records; New IDs name those Old does not.
            let old_cover = Ranges::normalize(old_ids.iter().map(|s| (s.first, s.last)).collect());
            let mut map = Vec::new();
            for s in &old_ids {
                map.push((
                    s.clone(),
                    stored_by_id(info, cx, budget, &s.value, &universe)?,
                ));
            }
            for s in &new_ids {
                let rest = Ranges(vec![(s.first, s.last)]).difference(&old_cover);
                if rest.is_empty() {
                    continue;
                }
                let stored = stored_by_id(info, cx, budget, &s.value, &universe)?;
                for &(first, last) in &rest.0 {
                    let seg = Segment {
                        first,
                        last,
                        value: s.value.clone(),
                    };
                    map.push((seg, stored.clone()));
                }
            }
            map.sort_by_key(|(s, _)| s.first);
            let mut remove = renames(&old_ids, &new_ids, &map, cx, budget)?;
            remove.extend(mapped(old, true, &map, &local, cx, budget)?);
            remove_tokens(info, &remove, cx, budget)?;
            let add = mapped(new, false, &map, &local, cx, budget)?;
            add_tokens(info, &add, cx, budget)
        }
    }
}

/// `lines` in the stored tag space, through the unique-ID `map`; without the unique-ID lines
/// when `skip_id`.
fn mapped(
    lines: &IndexInfo,
    skip_id: bool,
    map: &[(Segment, Ranges)],
    local: &Ranges,
    cx: &Cx<'_>,
    budget: &mut Budget,
) -> Result<Vec<Token>, ApplyError> {
    let mut out = Vec::new();
    for (a, v, t) in lines.entries() {
        if skip_id && key(a) == cx.unique {
            continue;
        }
        let stored = map_local(map, &resolve(t, local), cx, budget)?;
        out.push((a.to_owned(), v.to_owned(), stored.into()));
    }
    Ok(out)
}

fn missing_id(cx: &Cx<'_>, tag: u64) -> ApplyError {
    ApplyError::MissingUniqueId {
        block: cx.block,
        kind: cx.kind,
        tag,
        attribute: cx.unique_name.to_owned(),
    }
}

/// The stored records holding unique ID `value`.
fn stored_by_id(
    info: &IndexInfo,
    cx: &Cx<'_>,
    budget: &mut Budget,
    value: &str,
    universe: &Ranges,
) -> Result<Ranges, ApplyError> {
    let not_found = || ApplyError::UniqueIdNotFound {
        block: cx.block,
        kind: cx.kind,
        value: shorten(value),
    };
    let tags = info.get(cx.unique_name, value).ok_or_else(not_found)?;
    match tags.explicit() {
        Some(r) => {
            budget.spend(r.0.len() as u64, cx)?;
            Ok(r.clone())
        }
        None => {
            budget.spend(universe.0.len() as u64, cx)?;
            Ok(universe.clone())
        }
    }
}

/// Local tags `first..=last` carry unique ID `value`.
#[derive(Debug, Clone)]
struct Segment {
    first: u64,
    last: u64,
    value: String,
}

/// The unique-ID lines of `lines` as sorted, non-overlapping segments of local tags.
fn segments(lines: &IndexInfo, local: &Ranges, cx: &Cx<'_>) -> Result<Vec<Segment>, ApplyError> {
    let mut out = Vec::new();
    for (v, t) in lines
        .attribute(cx.unique_name)
        .into_iter()
        .flat_map(|a| a.values())
    {
        for &(first, last) in &resolve(t, local).0 {
            out.push(Segment {
                first,
                last,
                value: v.to_owned(),
            });
        }
    }
    out.sort_by_key(|s| s.first);
    for w in out.windows(2) {
        if w[1].first <= w[0].last {
            return Err(ApplyError::AmbiguousUniqueId {
                block: cx.block,
                tag: w[1].first,
            });
        }
    }
    Ok(out)
}

/// The stored records of local `tags`, through `map`: sorted, non-overlapping segments and
/// the stored records each names.
fn map_local(
    map: &[(Segment, Ranges)],
    tags: &Ranges,
    cx: &Cx<'_>,
    budget: &mut Budget,
) -> Result<Ranges, ApplyError> {
    let mut out = Vec::new();
    for &(x, y) in &tags.0 {
        let mut i = map.partition_point(|(s, _)| s.last < x);
        let mut pos = x;
        loop {
            let Some((s, stored)) = map.get(i).filter(|(s, _)| s.first <= pos) else {
                return Err(missing_id(cx, pos));
            };
            budget.spend(1 + stored.0.len() as u64, cx)?;
            out.extend_from_slice(&stored.0);
            if s.last >= y {
                break;
            }
            pos = s.last + 1;
            i += 1;
        }
    }
    Ok(Ranges::normalize(out))
}

/// Old unique IDs replaced by a different New one for the same local record: tokens to
/// remove.
fn renames(
    old: &[Segment],
    new: &[Segment],
    map: &[(Segment, Ranges)],
    cx: &Cx<'_>,
    budget: &mut Budget,
) -> Result<Vec<Token>, ApplyError> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while let (Some(o), Some(n)) = (old.get(i), new.get(j)) {
        let (a, b) = (o.first.max(n.first), o.last.min(n.last));
        if a <= b && o.value != n.value {
            let stored = map_local(map, &Ranges(vec![(a, b)]), cx, budget)?;
            out.push((cx.unique_name.to_owned(), o.value.clone(), stored.into()));
        }
        if o.last < n.last {
            i += 1;
        } else {
            j += 1;
        }
    }
    Ok(out)
}

/// Adds a block's records under fresh tags after the largest stored one, keeping their order.
fn add_fresh(
    info: &mut IndexInfo,
    lines: &IndexInfo,
    cx: &Cx<'_>,
    budget: &mut Budget,
) -> Result<(), ApplyError> {
    let local = lines.explicit_ranges();
    if local.is_empty() {
        return Ok(());
    }
    let exhausted = ApplyError::TagSpaceExhausted { block: cx.block };
    let base = match info.explicit_ranges().last() {
        None => 1,
        Some(m) => m.checked_add(1).ok_or(exhausted.clone())?,
    };
    if u128::from(base) + local.count() - 1 > u128::from(u64::MAX) {
        return Err(exhausted);
    }
    // Where each local range starts among the fresh tags.
    let mut starts = Vec::with_capacity(local.0.len());
    let mut next = u128::from(base);
    for &(a, b) in &local.0 {
        starts.push(next);
        next += u128::from(b - a) + 1;
    }
    let rank = |t: &TagSet| -> TagSet {
        let mut v = Vec::new();
        for &(x, y) in &resolve(t, &local).0 {
            // Every range lies inside one range of `local`, which holds all of the block's tags.
            let i = local.0.partition_point(|r| r.1 < x);
            let (a, _) = local.0[i];
            let first = starts[i] + u128::from(x - a);
            let last = first + u128::from(y - x);
            // Both fit: checked against u64::MAX above.
            v.push((first as u64, last as u64));
        }
        Ranges::normalize(v).into()
    };
    add_tokens(info, &tokens(lines, |t| Some(rank(t))), cx, budget)
}

/// `*` as every tag in `local`; explicit sets as they are.
fn resolve(t: &TagSet, local: &Ranges) -> Ranges {
    t.explicit().cloned().unwrap_or_else(|| local.clone())
}

fn tokens(lines: &IndexInfo, mut f: impl FnMut(&TagSet) -> Option<TagSet>) -> Vec<Token> {
    lines
        .entries()
        .filter_map(|(a, v, t)| f(t).map(|t| (a.to_owned(), v.to_owned(), t)))
        .collect()
}

/// Removes the records `gone` from every explicit line (a `*` line stays true of the rest).
fn remove_records(info: &mut IndexInfo, gone: &Ranges) {
    if gone.is_empty() {
        return;
    }
    info.retain_mut(|_, _, t| {
        if let Some(r) = t.explicit()
            && r.intersects(gone)
        {
            *t = r.difference(gone).into();
        }
    });
}

/// Removes tokens from records; a `*` token removes the value from every record.
fn remove_tokens(
    info: &mut IndexInfo,
    tokens: &[Token],
    cx: &Cx<'_>,
    budget: &mut Budget,
) -> Result<(), ApplyError> {
    let universe = info.explicit_ranges();
    for (a, v, tags) in tokens {
        let Some(current) = info.get(a, v) else {
            continue;
        };
        let left = match (tags.explicit(), current.explicit()) {
            (None, _) => TagSet::empty(),
            (Some(gone), Some(r)) => r.difference(gone).into(),
            (Some(gone), None) => {
                // A `*` line made explicit: a copy of every record.
                budget.spend(universe.0.len() as u64, cx)?;
                universe.difference(gone).into()
            }
        };
        if &left != current {
            info.set(a, v, left);
        }
    }
    Ok(())
}

/// Adds tokens to records. Records not in the index yet do not hold the stored `*` values
/// they are not given, so those become the explicit set of the records there were.
fn add_tokens(
    info: &mut IndexInfo,
    tokens: &[Token],
    cx: &Cx<'_>,
    budget: &mut Budget,
) -> Result<(), ApplyError> {
    let universe = info.explicit_ranges();
    let added = Ranges::normalize(
        tokens
            .iter()
            .filter_map(|(_, _, t)| t.explicit())
            .flat_map(|r| r.0.iter().copied())
            .collect(),
    );
    let newcomers = added.difference(&universe);
    if !newcomers.is_empty() && info.has_all() {
        let mut given: BTreeMap<(String, &str), TagSet> = BTreeMap::new();
        for (a, v, t) in tokens {
            let slot = given.entry((key(a), v.as_str())).or_default();
            *slot = slot.union(t);
        }
        let held = |a: &str, v: &str| {
            given
                .get(&(key(a), v))
                .is_some_and(|g| g.explicit().is_none_or(|g| g.is_superset(&newcomers)))
        };
        let lapsed: Vec<(String, String)> = info
            .entries()
            .filter(|(a, v, t)| t.is_all() && !held(a, v))
            .map(|(a, v, _)| (a.to_owned(), v.to_owned()))
            .collect();
        // A copy of every record per `*` line made explicit: paid for before it is made.
        budget.spend(
            (lapsed.len() as u64).saturating_mul(universe.0.len() as u64),
            cx,
        )?;
        for (a, v) in lapsed {
            info.set(&a, &v, universe.clone().into());
        }
    }
    for (a, v, t) in tokens {
        info.union_unchecked(a, v, t);
    }
    Ok(())
}

/// A block's records: local tag -> its tokens `(attribute, value)`.
type Records<'a> = BTreeMap<u64, Vec<(&'a str, &'a str)>>;

fn forward<'a>(
    lines: &'a IndexInfo,
    local: &Ranges,
    cx: &Cx<'_>,
    budget: &mut Budget,
) -> Result<Records<'a>, ApplyError> {
    let mut out: Records<'a> = BTreeMap::new();
    for (a, v, t) in lines.entries() {
        let tags = resolve(t, local);
        budget.spend(super::tags::saturate(tags.count()), cx)?;
        for tag in tags.iter() {
            out.entry(tag).or_default().push((a, v));
        }
    }
    Ok(out)
}

/// Finds stored records by their exact token sets.
struct Matcher {
    /// `(first tag, number of explicit lines naming it)`, from tag 0 on, piecewise constant.
    degree: Vec<(u64, u64)>,
    /// How many `*` lines there are.
    all: usize,
}

impl Matcher {
    fn new(info: &IndexInfo) -> Self {
        let mut events: BTreeMap<u64, i64> = BTreeMap::new();
        let mut all = 0;
        for (_, _, t) in info.entries() {
            match t.explicit() {
                None => all += 1,
                Some(r) => {
                    for &(first, last) in &r.0 {
                        *events.entry(first).or_default() += 1;
                        if let Some(after) = last.checked_add(1) {
                            *events.entry(after).or_default() -= 1;
                        }
                    }
                }
            }
        }
        let mut degree = vec![(0u64, 0u64)];
        let mut d = 0i64;
        for (pos, delta) in events {
            d += delta;
            // `d` counts open ranges, never negative.
            let dd = u64::try_from(d).unwrap_or(0);
            match degree.last_mut() {
                Some(last) if last.0 == pos => last.1 = dd,
                _ => degree.push((pos, dd)),
            }
        }
        Self { degree, all }
    }

    /// The lowest stored tag, not in `taken`, whose record has exactly `tokens` (distinct
    /// `(attribute, value)` pairs).
    fn find(
        &self,
        info: &IndexInfo,
        tokens: &[(&str, &str)],
        taken: &BTreeSet<u64>,
        cx: &Cx<'_>,
        budget: &mut Budget,
    ) -> Result<Option<u64>, ApplyError> {
        budget.spend(tokens.len() as u64, cx)?;
        let mut sets = Vec::new();
        let mut all_listed = 0;
        for (a, v) in tokens {
            match info.get(a, v).map(TagSet::explicit) {
                None => return Ok(None),
                Some(None) => all_listed += 1,
                Some(Some(r)) => sets.push(r),
            }
        }
        // Every record holds the `*` values: the record must list them all.
        if all_listed != self.all {
            return Ok(None);
        }
        sets.sort_by_key(|r| r.0.len());
        let Some((first, rest)) = sets.split_first() else {
            return Ok(None);
        };
        budget.spend(first.0.len() as u64, cx)?;
        let mut candidates = (*first).clone();
        for r in rest {
            budget.spend(candidates.0.len() as u64, cx)?;
            candidates = candidates.intersection(r);
            if candidates.is_empty() {
                return Ok(None);
            }
        }
        let target = sets.len() as u64;
        for &(a, b) in &candidates.0 {
            let mut i = self.degree.partition_point(|p| p.0 <= a) - 1;
            while let Some(&(start, d)) = self.degree.get(i) {
                if start > b {
                    break;
                }
                if d == target {
                    let end = self.degree.get(i + 1).map_or(u64::MAX, |n| n.0 - 1).min(b);
                    for c in start.max(a)..=end {
                        budget.spend(1, cx)?;
                        if !taken.contains(&c) {
                            return Ok(Some(c));
                        }
                    }
                }
                budget.spend(1, cx)?;
                i += 1;
            }
        }
        Ok(None)
    }
}
