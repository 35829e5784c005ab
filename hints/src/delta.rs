//! Hint deltas: the change from one CIP-HINT to another, so that a poller holding the first
//! takes only what changed (PROTOCOL.md, "Hint deltas").
//!
//! A delta is a SOIF object of template `CIP-HINT-DELTA` whose URL is the resulting hint's:
//!
//! * `Delta-Base` and `Delta-Result`: the [`digest`]s of the hint it applies to and of the
//!   hint it makes (16 hex digits each). A receiver applies it only to a hint whose digest
//!   is the base, and keeps the result only if its digest is the result: a missed, repeated
//!   or corrupt delta is refused, never half applied.
//! * `Weightlist-Delta-[T:A]`: per weightlist, the values added or whose count changed, with
//!   their new count, and the values removed, with count 0, in the weightlist syntax
//!   (`Garcia;3, Smith;0`). A weightlist the base does not hold is made.
//! * `Set-<Name>`: every header attribute (anything but a weightlist) whose values changed,
//!   with all of its new values (`Set-Total-Object-Count`, `Set-Provenance`...), and the
//!   result's `Date` always.
//! * `Removed-Attributes`: the names of the header attributes and weightlists
//!   (`Weightlist-[T:A]`) the result no longer has, separated by spaces.
//!
//! A weightlist's order carries no meaning here (RFC 2655 gives it none): the digest does not
//! see it, and a hint a delta made lists each weightlist as cipd's aggregation does (by
//! count, highest first, then by value folded to lowercase, then by value bytes). A sender
//! offers a delta only when applying it makes its hint byte for byte
//! ([`HintDelta::for_wire`]), so that a signature over the hint still holds.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use cip_proto::soif::{Attribute, SoifObject};

use crate::hint::{AttrSpec, CipHint, HintError, WeightEntry, Weightlist, bracketed};
use crate::table::{CountChange, ListChanges};

pub mod journal;

/// The template type of a delta object.
pub const DELTA_TEMPLATE: &str = "CIP-HINT-DELTA";
/// The base's digest.
pub const BASE_ATTRIBUTE: &str = "Delta-Base";
/// The result's digest.
pub const RESULT_ATTRIBUTE: &str = "Delta-Result";
/// Names removed from the header or weightlists dropped.
pub const REMOVED_ATTRIBUTE: &str = "Removed-Attributes";
/// Prefix of a header attribute's new values.
pub const SET_PREFIX: &str = "Set-";
/// Prefix of a weightlist's changes (`Weightlist-Delta-[T:A]`).
pub const LIST_DELTA_PREFIX: &str = "Weightlist-Delta-";

const LIST_PREFIX: &str = "Weightlist-";
const DATE: &str = "Date";

/// A delta that cannot be read or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeltaError {
    /// The object is not a `CIP-HINT-DELTA`.
    #[error("template {template:?} is not {DELTA_TEMPLATE}")]
    WrongTemplate {
        /// The template found.
        template: String,
    },
    /// `Delta-Base` or `Delta-Result` is missing.
    #[error("{attribute} is missing")]
    Missing {
        /// The attribute.
        attribute: &'static str,
    },
    /// A value cannot be read; `offset` is a byte offset within it.
    #[error("{attribute}: byte {offset}: {reason}")]
    BadValue {
        /// The attribute's name.
        attribute: String,
        /// Where in its value.
        offset: usize,
        /// What is wrong.
        reason: String,
    },
    /// The hint held is not the one the delta applies to (a delta missed or repeated).
    #[error("the delta applies to {expected:016x}, the hint held is {found:016x}")]
    WrongBase {
        /// The delta's base.
        expected: u64,
        /// The held hint's digest.
        found: u64,
    },
    /// Applied, it does not make the hint it says (corrupt or inconsistent).
    #[error("applied, the delta makes {found:016x}, not {expected:016x}")]
    WrongResult {
        /// The delta's result.
        expected: u64,
        /// What applying it made.
        found: u64,
    },
    /// The result is not a hint that can be read.
    #[error("the result is not a hint: {0}")]
    BadResult(#[from] HintError),
    /// Applied to a hint's head alone ([`HintDelta::apply_to_head`]), it needs the whole
    /// hint (it removes a weightlist): apply it with [`HintDelta::apply_changes`].
    #[error("the delta needs the whole hint held: {0}")]
    NeedsHint(String),
}

/// What a receiver keeps of a hint it holds so that a delta applies without the hint
/// itself ([`HintDelta::apply_to_head`]): the URL, the header (every attribute but the
/// weightlists) and the digest. Its size is the header's, whatever the weightlists hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintHead {
    /// The URL, as written.
    pub url: Bytes,
    /// Header attributes with their values, per name, in order of first appearance.
    pub header: Vec<(String, Vec<Bytes>)>,
    /// The hint's [`digest`].
    pub digest: u64,
}

impl HintHead {
    /// The head of `hint`, whose [`digest`] is `digest` (as a delta's result names it);
    /// `None` when the hint cannot be written.
    pub fn of(hint: &CipHint, digest: u64) -> Option<Self> {
        let (url, header) = split_header(hint)?;
        Some(Self {
            url,
            header,
            digest,
        })
    }

    /// Bytes it holds (names and values), for the memory it costs.
    pub fn bytes(&self) -> usize {
        self.url.len()
            + self
                .header
                .iter()
                .map(|(n, vs)| n.len() + vs.iter().map(Bytes::len).sum::<usize>())
                .sum::<usize>()
    }
}

/// Header attributes with their values, per name, in order of first appearance.
type Header = Vec<(String, Vec<Bytes>)>;

/// `hint`'s written URL and header attributes (weightlists left out), per name in order of
/// first appearance; `None` when the hint cannot be written.
fn split_header(hint: &CipHint) -> Option<(Bytes, Header)> {
    // A copy without the weightlists: cloning them only to drop them would cost the hint.
    let head = CipHint {
        url: hint.url.clone(),
        attributes: hint.attributes.clone(),
        sources: hint.sources.clone(),
        total_object_count: hint.total_object_count,
        weightlists: Vec::new(),
        thresholds: hint.thresholds.clone(),
        certification_type: hint.certification_type.clone(),
        certification: hint.certification.clone(),
        date: hint.date.clone(),
        extra: hint.extra.clone(),
    };
    let obj = head.try_to_soif().ok()?;
    let mut header: Vec<(String, Vec<Bytes>)> = Vec::new();
    // Names looked up, not searched: an aggregate's `Provenance-N` are as many names as it
    // has datasets below it (11,111 at a level-1 hub of 111,111 nodes), and a search per
    // name made each out-bound delta cost their square.
    let mut at: HashMap<&str, usize> = HashMap::new();
    for a in &obj.attributes {
        let name = a.name.as_str();
        if bracketed(name, LIST_PREFIX).is_some() {
            continue;
        }
        match at.get(name) {
            Some(&i) => header[i].1.push(a.value.clone()),
            None => {
                at.insert(name, header.len());
                header.push((name.to_owned(), vec![a.value.clone()]));
            }
        }
    }
    Some((obj.url().clone(), header))
}

/// [`header_hash`] of a header grouped per name.
fn grouped_header_hash(url: &[u8], header: &[(String, Vec<Bytes>)]) -> u64 {
    header_hash(
        url,
        header
            .iter()
            .flat_map(|(n, vs)| vs.iter().map(move |v| (n.as_str(), v))),
    )
}

/// One weightlist entry a change touched, as [`HintDelta::of_changes`] takes it: what the
/// old hint listed for the value and what the new one lists (`None`: not listed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryChange {
    /// The old hint's entry.
    pub old: Option<WeightEntry>,
    /// The new hint's entry.
    pub new: Option<WeightEntry>,
}

/// The change from one hint to another ([`HintDelta::between`], [`HintDelta::apply`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HintDelta {
    /// The [`digest`] of the hint it applies to.
    pub base: u64,
    /// The [`digest`] of the hint it makes.
    pub result: u64,
    /// The resulting hint's SOIF URL.
    pub url: Bytes,
    /// Header attributes with all their new values, per name, in order.
    pub set: Vec<(String, Vec<Bytes>)>,
    /// Names of header attributes and weightlists (`Weightlist-[T:A]`) removed.
    pub removed: Vec<String>,
    /// Per weightlist, values with their new count (0: removed).
    pub lists: Vec<(AttrSpec, Vec<WeightEntry>)>,
}

/// A hint as a delta sees it: its URL, its header attributes grouped by name (in order of
/// first appearance) and its weightlists as maps.
struct Parts {
    url: Bytes,
    header: Vec<(String, Vec<Bytes>)>,
    lists: Vec<(AttrSpec, BTreeMap<Bytes, u64>)>,
}

fn list_name(spec: &AttrSpec) -> String {
    format!("{LIST_PREFIX}[{spec}]")
}

/// Splits `hint` into [`Parts`]; `None` when a weightlist names a value twice or two
/// weightlists have one name (no delta can say which is meant).
fn parts(hint: &CipHint) -> Option<Parts> {
    let obj = hint.try_to_soif().ok()?;
    let mut header: Vec<(String, Vec<Bytes>)> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for a in &obj.attributes {
        let name = a.name.as_str();
        if bracketed(name, LIST_PREFIX).is_some() {
            continue;
        }
        match at.get(name) {
            Some(&i) => header[i].1.push(a.value.clone()),
            None => {
                at.insert(name.to_owned(), header.len());
                header.push((name.to_owned(), vec![a.value.clone()]));
            }
        }
    }
    let mut lists: Vec<(AttrSpec, BTreeMap<Bytes, u64>)> = Vec::new();
    for (spec, list) in &hint.weightlists {
        if lists.iter().any(|(s, _)| s == spec) {
            return None;
        }
        let mut map = BTreeMap::new();
        for e in list.entries() {
            if map.insert(e.value, e.count).is_some() {
                return None;
            }
        }
        lists.push((spec.clone(), map));
    }
    Some(Parts {
        url: obj.url().clone(),
        header,
        lists,
    })
}

/// The content digest of a hint, which deltas name their base and result by: it sees every
/// header attribute but `Date` (names and values, in no order) and every weightlist entry
/// (in no order), so that two hints with the same content have the same digest whatever
/// order they list things in. 64 bits of XXH3, stable across builds and platforms.
pub fn digest(hint: &CipHint) -> u64 {
    match hint.try_to_soif() {
        Ok(obj) => digest_of(hint, &obj),
        // A hint that cannot be written has no delta either: any fixed value will do.
        Err(_) => 0,
    }
}

/// [`digest`] of a hint whose SOIF object is at hand (as a build has it), without writing
/// it again.
pub fn digest_of(hint: &CipHint, obj: &SoifObject) -> u64 {
    let header = obj
        .attributes
        .iter()
        .filter(|a| bracketed(a.name.as_str(), LIST_PREFIX).is_none())
        .map(|a| (a.name.as_str(), &a.value));
    let entries = hint
        .weightlists
        .iter()
        .map(|(spec, list)| (spec, list.entries()));
    mix(obj.url(), header, entries)
}

fn digest_parts(p: &Parts) -> u64 {
    let header = p
        .header
        .iter()
        .flat_map(|(n, vs)| vs.iter().map(move |v| (n.as_str(), v)));
    let entries = p.lists.iter().map(|(spec, map)| {
        (
            spec,
            map.iter().map(|(value, count)| WeightEntry {
                value: value.clone(),
                count: *count,
            }),
        )
    });
    mix(&p.url, header, entries)
}

/// The digest itself: the URL and the sorted header hashed in turn ([`header_hash`]), then
/// each weightlist entry's hash added ([`entry_hash`]; so that entries count in any order,
/// and one can be taken out or put in by subtracting or adding its hash).
fn mix<'a, E: Iterator<Item = WeightEntry>>(
    url: &[u8],
    header: impl Iterator<Item = (&'a str, &'a Bytes)>,
    lists: impl Iterator<Item = (&'a AttrSpec, E)>,
) -> u64 {
    let mut sum = header_hash(url, header);
    let mut buf = Vec::new();
    for (spec, entries) in lists {
        let name = spec.to_string().to_ascii_lowercase();
        for e in entries {
            sum = sum.wrapping_add(entry_hash(&name, &e.value, e.count, &mut buf));
        }
    }
    sum
}

/// The URL and the header attributes but `Date`, sorted, hashed in turn: the digest's part
/// that is not a sum.
fn header_hash<'a>(url: &[u8], header: impl Iterator<Item = (&'a str, &'a Bytes)>) -> u64 {
    use xxhash_rust::xxh3::Xxh3;
    let mut header: Vec<(&str, &Bytes)> = header
        .filter(|(n, _)| !n.eq_ignore_ascii_case(DATE))
        .collect();
    header.sort();
    let mut h = Xxh3::new();
    h.update(url);
    h.update(&[0]);
    for (n, v) in header {
        h.update(n.as_bytes());
        h.update(&[0]);
        h.update(&(v.len() as u64).to_le_bytes());
        h.update(v);
    }
    h.digest()
}

/// One weightlist entry's share of the digest; `list` is the weightlist's `T:A` lowercased,
/// `buf` scratch space.
fn entry_hash(list: &str, value: &[u8], count: u64, buf: &mut Vec<u8>) -> u64 {
    buf.clear();
    buf.extend_from_slice(list.as_bytes());
    buf.push(0);
    buf.extend_from_slice(value);
    buf.push(0);
    buf.extend_from_slice(&count.to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(buf)
}

/// The order a delta-made hint lists each weightlist in, as cipd's aggregation does: by
/// count, highest first, then by value folded to lowercase, then by value bytes.
fn list_order(x: &WeightEntry, y: &WeightEntry) -> std::cmp::Ordering {
    y.count
        .cmp(&x.count)
        .then_with(|| crate::index::cmp_folded(&x.value, &y.value))
        .then_with(|| x.value.cmp(&y.value))
}

impl HintDelta {
    /// The delta that makes `to` from `from`; `None` when a hint names a value twice in one
    /// weightlist or one weightlist twice (send `to` whole then).
    pub fn between(from: &CipHint, to: &CipHint) -> Option<Self> {
        let (a, b) = (parts(from)?, parts(to)?);
        let mut set = Vec::new();
        let mut removed = Vec::new();
        let old: HashMap<&str, &Vec<Bytes>> =
            a.header.iter().map(|(n, v)| (n.as_str(), v)).collect();
        let new: HashMap<&str, &Vec<Bytes>> =
            b.header.iter().map(|(n, v)| (n.as_str(), v)).collect();
        for (name, values) in &b.header {
            if old.get(name.as_str()) != Some(&values) {
                set.push((name.clone(), values.clone()));
            }
        }
        // The result's `Date` is always stated: whether it changed depends on the second a
        // hint was built in, and a delta's size should not.
        if let Some((name, values)) = b.header.iter().find(|(n, _)| n.eq_ignore_ascii_case(DATE))
            && !set.iter().any(|(n, _)| n == name)
        {
            set.push((name.clone(), values.clone()));
        }
        for (name, _) in &a.header {
            if !new.contains_key(name.as_str()) {
                removed.push(name.clone());
            }
        }
        let mut lists = Vec::new();
        let empty = BTreeMap::new();
        for (spec, map) in &b.lists {
            let before = a
                .lists
                .iter()
                .find(|(s, _)| s == spec)
                .map_or(&empty, |(_, m)| m);
            let mut changes: Vec<WeightEntry> = map
                .iter()
                .filter(|(v, c)| before.get(*v) != Some(c))
                .map(|(v, c)| WeightEntry {
                    value: v.clone(),
                    count: *c,
                })
                .collect();
            changes.extend(
                before
                    .keys()
                    .filter(|v| !map.contains_key(*v))
                    .map(|v| WeightEntry {
                        value: v.clone(),
                        count: 0,
                    }),
            );
            let is_new = !a.lists.iter().any(|(s, _)| s == spec);
            if !changes.is_empty() || is_new {
                lists.push((spec.clone(), changes));
            }
        }
        for (spec, _) in &a.lists {
            if !b.lists.iter().any(|(s, _)| s == spec) {
                removed.push(list_name(spec));
            }
        }
        Some(Self {
            base: digest_parts(&a),
            result: digest_parts(&b),
            url: b.url,
            set,
            removed,
            lists,
        })
    }

    /// The delta from `from`, whose [`digest`] is `base`, to `to`, when they differ only in
    /// their headers and in the weightlist entries `lists` names: per weightlist, each
    /// changed value's entry before and after (`None` where not listed; a value respelled
    /// is one entry removed and one added). `gone` names the weightlists `to` no longer has,
    /// with every entry `from` listed in them. The weightlists themselves are not read, so
    /// this costs the change, not the hints ([`crate::aggregate::kept::Kept`] makes the out-bound
    /// delta so). `None` when a header cannot be written.
    pub fn of_changes(
        from: &CipHint,
        base: u64,
        to: &CipHint,
        lists: &[(AttrSpec, Vec<EntryChange>)],
        gone: &[(AttrSpec, Vec<WeightEntry>)],
    ) -> Option<Self> {
        let (old_url, old_header) = split_header(from)?;
        let (url, header) = split_header(to)?;
        let old: HashMap<&str, &Vec<Bytes>> =
            old_header.iter().map(|(n, v)| (n.as_str(), v)).collect();
        let new: HashMap<&str, &Vec<Bytes>> = header.iter().map(|(n, v)| (n.as_str(), v)).collect();
        let mut set = Vec::new();
        let mut removed = Vec::new();
        for (name, values) in &header {
            // The `Date` is always stated, as `between` states it.
            if old.get(name.as_str()) != Some(&values) || name.eq_ignore_ascii_case(DATE) {
                set.push((name.clone(), values.clone()));
            }
        }
        for (name, _) in &old_header {
            if !new.contains_key(name.as_str()) {
                removed.push(name.clone());
            }
        }
        let mut sum = base
            .wrapping_sub(grouped_header_hash(&old_url, &old_header))
            .wrapping_add(grouped_header_hash(&url, &header));
        let mut buf = Vec::new();
        let mut out_lists = Vec::new();
        for (spec, changes) in lists {
            let name = spec.to_string().to_ascii_lowercase();
            let mut entries = Vec::new();
            for c in changes {
                if let Some(o) = &c.old {
                    sum = sum.wrapping_sub(entry_hash(&name, &o.value, o.count, &mut buf));
                }
                if let Some(n) = &c.new {
                    sum = sum.wrapping_add(entry_hash(&name, &n.value, n.count, &mut buf));
                }
                match (&c.old, &c.new) {
                    (Some(o), Some(n)) if o.value == n.value => {
                        if o.count != n.count {
                            entries.push(n.clone());
                        }
                    }
                    (o, n) => {
                        if let Some(o) = o {
                            entries.push(WeightEntry {
                                value: o.value.clone(),
                                count: 0,
                            });
                        }
                        if let Some(n) = n {
                            entries.push(n.clone());
                        }
                    }
                }
            }
            let is_new = !from.weightlists.iter().any(|(s, _)| s == spec);
            if !entries.is_empty() || is_new {
                out_lists.push((spec.clone(), entries));
            }
        }
        for (spec, entries) in gone {
            let name = spec.to_string().to_ascii_lowercase();
            for o in entries {
                sum = sum.wrapping_sub(entry_hash(&name, &o.value, o.count, &mut buf));
            }
            removed.push(list_name(spec));
        }
        Some(Self {
            base,
            result: sum,
            url,
            set,
            removed,
            lists: out_lists,
        })
    }

    /// The delta to send instead of `to` to a receiver holding `from`: only when applying it
    /// makes `to` byte for byte (its weightlists in the order a delta makes, so that its
    /// signature, if any, holds) and its SOIF is smaller than `to`'s. Returns the delta and
    /// its SOIF bytes.
    pub fn for_wire(from: &CipHint, to: &CipHint) -> Option<(Self, Vec<u8>)> {
        let delta = Self::between(from, to)?;
        let whole = to.try_to_soif().ok()?.to_bytes();
        let wire = delta.to_soif().to_bytes();
        if wire.len() >= whole.len() {
            return None;
        }
        let made = delta.apply(from).ok()?;
        (made.try_to_soif().ok()?.to_bytes() == whole).then_some((delta, wire))
    }

    /// This delta followed by `next` as one delta (a journal's changesets joined, as IXFR
    /// joins a zone's): applied to this delta's base it makes what applying the two in turn
    /// makes, byte for byte. `None` when `next` does not start where this one ends.
    pub fn then(&self, next: &Self) -> Option<Self> {
        if next.base != self.result {
            return None;
        }
        let mut out = self.clone();
        out.result = next.result;
        out.url = next.url.clone();
        // What `next` removes goes, whatever this one set or changed before it; a name it
        // sets again after this one removed it stays removed too, so that applying the
        // joined delta drops it and appends it at the end, as applying the two does.
        // Names are looked up in sets and maps, not searched: a header change can name
        // every `Provenance-N` of a big aggregate.
        if !next.removed.is_empty() {
            let gone: HashSet<&str> = next.removed.iter().map(String::as_str).collect();
            out.set.retain(|(n, _)| !gone.contains(n.as_str()));
            out.lists
                .retain(|(s, _)| !gone.contains(list_name(s).as_str()));
            let mut listed: HashSet<String> = out.removed.iter().cloned().collect();
            for name in &next.removed {
                if listed.insert(name.clone()) {
                    out.removed.push(name.clone());
                }
            }
        }
        let mut at: HashMap<String, usize> = out
            .set
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i))
            .collect();
        for (name, values) in &next.set {
            match at.get(name) {
                Some(&i) => out.set[i].1.clone_from(values),
                None => {
                    at.insert(name.clone(), out.set.len());
                    out.set.push((name.clone(), values.clone()));
                }
            }
        }
        for (spec, changes) in &next.lists {
            match out.lists.iter_mut().find(|(s, _)| s == spec) {
                Some((_, have)) => {
                    let mut at: HashMap<Bytes, usize> = have
                        .iter()
                        .enumerate()
                        .map(|(i, e)| (e.value.clone(), i))
                        .collect();
                    for e in changes {
                        match at.get(&e.value) {
                            Some(&i) => have[i].count = e.count,
                            None => {
                                at.insert(e.value.clone(), have.len());
                                have.push(e.clone());
                            }
                        }
                    }
                }
                None => out.lists.push((spec.clone(), changes.clone())),
            }
        }
        Some(out)
    }

    /// True when it changes nothing but, at most, the `Date`.
    pub fn is_empty(&self) -> bool {
        self.base == self.result
            && self.removed.is_empty()
            && self.lists.iter().all(|(_, c)| c.is_empty())
            && self.set.iter().all(|(n, _)| n.eq_ignore_ascii_case(DATE))
    }

    /// Weightlist entries it adds, changes or removes.
    pub fn changed_entries(&self) -> usize {
        self.lists.iter().map(|(_, c)| c.len()).sum()
    }

    /// Applies it to `hint`, which must be its base.
    ///
    /// # Errors
    /// [`DeltaError::WrongBase`] when `hint` is not the base; [`DeltaError::WrongResult`] when
    /// the result is not the hint the delta names (nothing is changed either way);
    /// [`DeltaError::BadResult`] when the result cannot be read as a hint.
    pub fn apply(&self, hint: &CipHint) -> Result<CipHint, DeltaError> {
        self.apply_changes(hint).map(|(made, _)| made)
    }

    /// [`HintDelta::apply`], with every weightlist entry that differs between `hint` and
    /// the result, as [`RoutingTable::apply_delta`](crate::table::RoutingTable::apply_delta)
    /// takes them (a weightlist removed gives each of its entries, count 0 after).
    ///
    /// # Errors
    /// As [`HintDelta::apply`].
    pub fn apply_changes(&self, hint: &CipHint) -> Result<(CipHint, Vec<ListChanges>), DeltaError> {
        let wrong_base = |found| DeltaError::WrongBase {
            expected: self.base,
            found,
        };
        // The header as the digest sees it (the weightlists are read below, once, and not
        // written: a parsed weightlist is shared text, cloned by reference).
        let (url, mut header) = split_header(hint).ok_or_else(|| wrong_base(0))?;
        let base_head = grouped_header_hash(&url, &header);

        let removed = |name: &str| self.removed.iter().any(|r| r == name);
        // One pass over each held weightlist: its entries summed into the base's digest,
        // those the delta leaves alone kept in order, the changed ones' old counts noted.
        let mut sum = 0u64;
        let mut result_sum = 0u64;
        let mut buf = Vec::new();
        let mut entry_changes = Vec::new();
        let mut lists: Vec<(AttrSpec, Vec<WeightEntry>)> = Vec::new();
        let mut seen: Vec<&AttrSpec> = Vec::new();
        for (spec, list) in &hint.weightlists {
            if seen.contains(&spec) {
                // Two weightlists of one name: no delta can say which is meant.
                return Err(wrong_base(digest(hint)));
            }
            seen.push(spec);
            let name = spec.to_string().to_ascii_lowercase();
            let gone = removed(&list_name(spec));
            let changes = self
                .lists
                .iter()
                .find(|(s, _)| s == spec)
                .map(|(_, c)| c.as_slice())
                .unwrap_or_default();
            let changed: HashMap<&[u8], u64> =
                changes.iter().map(|e| (&e.value[..], e.count)).collect();
            let mut kept = Vec::with_capacity(list.len());
            let mut sorted = true;
            let mut removals = Vec::new();
            let mut olds = Vec::new();
            for e in list.entries() {
                let h = entry_hash(&name, &e.value, e.count, &mut buf);
                sum = sum.wrapping_add(h);
                if gone {
                    removals.push(CountChange {
                        value: e.value,
                        before: e.count,
                        after: 0,
                    });
                    continue;
                }
                if changed.contains_key(&e.value[..]) {
                    olds.push((e.value.clone(), e.count));
                    continue;
                }
                result_sum = result_sum.wrapping_add(h);
                if kept
                    .last()
                    .is_some_and(|l: &WeightEntry| list_order(l, &e).is_gt())
                {
                    sorted = false;
                }
                kept.push(e);
            }
            if gone {
                // Made anew below if the delta lists it, after the held ones.
                entry_changes.push(ListChanges {
                    attribute: spec.clone(),
                    entries: removals,
                });
                continue;
            }
            let before: HashMap<&[u8], u64> = olds.iter().map(|(v, c)| (&v[..], *c)).collect();
            let mut added: Vec<WeightEntry> = Vec::new();
            let mut entries = Vec::with_capacity(changes.len());
            for e in changes {
                let old = before.get(&e.value[..]).copied().unwrap_or(0);
                if e.count > 0 {
                    result_sum =
                        result_sum.wrapping_add(entry_hash(&name, &e.value, e.count, &mut buf));
                    added.push(e.clone());
                }
                if old != e.count {
                    entries.push(CountChange {
                        value: e.value.clone(),
                        before: old,
                        after: e.count,
                    });
                }
            }
            if !entries.is_empty() {
                entry_changes.push(ListChanges {
                    attribute: spec.clone(),
                    entries,
                });
            }
            lists.push((spec.clone(), merge_sorted(kept, added, sorted)));
        }
        // Weightlists the held hint does not have, or that the delta removes and makes
        // anew: after the others, in the delta's order.
        for (spec, changes) in &self.lists {
            if hint.weightlists.iter().any(|(s, _)| s == spec) && !removed(&list_name(spec)) {
                continue;
            }
            let name = spec.to_string().to_ascii_lowercase();
            let mut added = Vec::new();
            let mut entries = Vec::new();
            for e in changes.iter().filter(|e| e.count > 0) {
                result_sum =
                    result_sum.wrapping_add(entry_hash(&name, &e.value, e.count, &mut buf));
                added.push(e.clone());
                entries.push(CountChange {
                    value: e.value.clone(),
                    before: 0,
                    after: e.count,
                });
            }
            if !entries.is_empty() {
                entry_changes.push(ListChanges {
                    attribute: spec.clone(),
                    entries,
                });
            }
            lists.push((spec.clone(), merge_sorted(Vec::new(), added, true)));
        }
        let found = base_head.wrapping_add(sum);
        if found != self.base {
            return Err(wrong_base(found));
        }

        self.set_header(&mut header);
        let found = grouped_header_hash(&self.url, &header).wrapping_add(result_sum);
        if found != self.result {
            return Err(DeltaError::WrongResult {
                expected: self.result,
                found,
            });
        }
        let made = write_hint(self.url.clone(), header, lists)?;
        Ok((made, entry_changes))
    }

    /// Applies it to a hint held as its head alone, the weightlists being elsewhere (in a
    /// routing table): `before` gives the count the held hint lists for a value of a
    /// weightlist (0 when none). Returns the result's head, the result as a hint with its
    /// header only, and the entries that change (as [`HintDelta::apply_changes`]).
    ///
    /// The digest is a sum over the entries, so the result's is the base's, less the old
    /// entries' shares and plus the new ones'. So a wrong `before` (a count that was not
    /// the held hint's: the table sums values that fold alike) gives a wrong digest and
    /// is refused, never applied.
    ///
    /// # Errors
    /// [`DeltaError::WrongBase`] when `head` is not the base; [`DeltaError::NeedsHint`]
    /// when the delta removes a weightlist (its entries are not known here);
    /// [`DeltaError::WrongResult`] when the result is not the hint the delta names (or
    /// `before` was wrong); [`DeltaError::BadResult`] when the header is not a hint's.
    pub fn apply_to_head(
        &self,
        head: &HintHead,
        mut before: impl FnMut(&AttrSpec, &[u8]) -> u64,
    ) -> Result<(HintHead, CipHint, Vec<ListChanges>), DeltaError> {
        if head.digest != self.base {
            return Err(DeltaError::WrongBase {
                expected: self.base,
                found: head.digest,
            });
        }
        if let Some(list) = self
            .removed
            .iter()
            .find(|r| bracketed(r, LIST_PREFIX).is_some())
        {
            return Err(DeltaError::NeedsHint(format!("it removes {list}")));
        }
        let mut header = head.header.clone();
        self.set_header(&mut header);
        let mut sum = self
            .base
            .wrapping_sub(grouped_header_hash(&head.url, &head.header))
            .wrapping_add(grouped_header_hash(&self.url, &header));
        let mut buf = Vec::new();
        let mut changes = Vec::new();
        for (spec, entries) in &self.lists {
            let name = spec.to_string().to_ascii_lowercase();
            let mut out = Vec::new();
            for e in entries {
                let old = before(spec, &e.value);
                if old > 0 {
                    sum = sum.wrapping_sub(entry_hash(&name, &e.value, old, &mut buf));
                }
                if e.count > 0 {
                    sum = sum.wrapping_add(entry_hash(&name, &e.value, e.count, &mut buf));
                }
                if old != e.count {
                    out.push(CountChange {
                        value: e.value.clone(),
                        before: old,
                        after: e.count,
                    });
                }
            }
            if !out.is_empty() {
                changes.push(ListChanges {
                    attribute: spec.clone(),
                    entries: out,
                });
            }
        }
        if sum != self.result {
            return Err(DeltaError::WrongResult {
                expected: self.result,
                found: sum,
            });
        }
        let hint = write_hint(self.url.clone(), header.clone(), Vec::new())?;
        let url = if self.url.is_empty() {
            Bytes::from_static(cip_proto::soif::NO_URL)
        } else {
            self.url.clone()
        };
        let head = HintHead {
            url,
            header,
            digest: self.result,
        };
        Ok((head, hint, changes))
    }

    /// Applies its header changes to `header`: names removed, `Set-` values put in.
    fn set_header(&self, header: &mut Vec<(String, Vec<Bytes>)>) {
        // Looked up, not searched: see `split_header`.
        if !self.removed.is_empty() {
            let gone: HashSet<&str> = self.removed.iter().map(String::as_str).collect();
            header.retain(|(n, _)| !gone.contains(n.as_str()));
        }
        let mut at: HashMap<String, usize> = header
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i))
            .collect();
        for (name, values) in &self.set {
            match at.get(name) {
                Some(&i) => header[i].1.clone_from(values),
                None => {
                    at.insert(name.clone(), header.len());
                    header.push((name.clone(), values.clone()));
                }
            }
        }
    }

    /// The delta as a `CIP-HINT-DELTA` SOIF object.
    pub fn to_soif(&self) -> SoifObject {
        let url = if self.url.is_empty() {
            Bytes::from_static(cip_proto::soif::NO_URL)
        } else {
            self.url.clone()
        };
        let mut obj = SoifObject::new(DELTA_TEMPLATE, url.clone()).unwrap_or_else(|_| {
            // Invariant: the URL came from a written hint, which `SoifObject::new` took.
            SoifObject::new(DELTA_TEMPLATE, cip_proto::soif::NO_URL)
                .unwrap_or_else(|e| unreachable!("{DELTA_TEMPLATE} rejected: {e}"))
        });
        let mut push = |name: String, value: Bytes| match Attribute::new(&name, value) {
            Ok(a) => obj.attributes.push(a),
            // Invariant: every name is a fixed one, or a prefix before a name that was an
            // identifier already (a header attribute's, a written weightlist's).
            Err(e) => unreachable!("delta attribute name {name} rejected: {e}"),
        };
        push(BASE_ATTRIBUTE.into(), hex(self.base));
        push(RESULT_ATTRIBUTE.into(), hex(self.result));
        if !self.removed.is_empty() {
            push(
                REMOVED_ATTRIBUTE.into(),
                Bytes::from(self.removed.join(" ")),
            );
        }
        for (name, values) in &self.set {
            for v in values {
                push(format!("{SET_PREFIX}{name}"), v.clone());
            }
        }
        for (spec, changes) in &self.lists {
            push(
                format!("{LIST_DELTA_PREFIX}[{spec}]"),
                Bytes::from(crate::weightlist::encode(&Weightlist::new(changes.clone()))),
            );
        }
        obj
    }

    /// Reads a delta from its SOIF object.
    ///
    /// # Errors
    /// [`DeltaError`] naming the attribute and the byte offset within its value.
    pub fn from_soif(obj: &SoifObject) -> Result<Self, DeltaError> {
        let template = obj.template().as_str();
        if !template.eq_ignore_ascii_case(DELTA_TEMPLATE) {
            return Err(DeltaError::WrongTemplate {
                template: template.to_owned(),
            });
        }
        let mut base = None;
        let mut result = None;
        // Kept as written, `-` too: the digests hash the URL as the hint writes it.
        let mut delta = Self {
            url: obj.url().clone(),
            ..Self::default()
        };
        let bad = |a: &Attribute, offset: usize, reason: String| DeltaError::BadValue {
            attribute: a.name.as_str().to_owned(),
            offset,
            reason,
        };
        // Where each weightlist and header name already is: looked up, not searched, so
        // that a delta of many names (a received one too) costs their number, not its square.
        let mut list_at: HashMap<AttrSpec, usize> = HashMap::new();
        let mut set_at: HashMap<String, usize> = HashMap::new();
        for a in &obj.attributes {
            let name = a.name.as_str();
            if name.eq_ignore_ascii_case(BASE_ATTRIBUTE) {
                base = Some(read_hex(&a.value).map_err(|(o, r)| bad(a, o, r))?);
            } else if name.eq_ignore_ascii_case(RESULT_ATTRIBUTE) {
                result = Some(read_hex(&a.value).map_err(|(o, r)| bad(a, o, r))?);
            } else if name.eq_ignore_ascii_case(REMOVED_ATTRIBUTE) {
                let text = std::str::from_utf8(&a.value)
                    .map_err(|e| bad(a, e.valid_up_to(), "not UTF-8".into()))?;
                delta
                    .removed
                    .extend(text.split_ascii_whitespace().map(str::to_owned));
            } else if let Some(spec) = bracketed(name, LIST_DELTA_PREFIX) {
                let spec = AttrSpec::parse(spec)
                    .map_err(|e| bad(a, 0, format!("{spec:?} is not a Template:Attribute: {e}")))?;
                let list = crate::weightlist::parse(&a.value)
                    .map_err(|e| bad(a, e.offset, e.kind.to_string()))?;
                match list_at.get(&spec) {
                    Some(&i) => delta.lists[i].1.extend(list.entries()),
                    None => {
                        list_at.insert(spec.clone(), delta.lists.len());
                        delta.lists.push((spec, list.entries().collect()));
                    }
                }
            } else if let Some(header) = strip_prefix_ignore_case(name, SET_PREFIX) {
                match set_at.get(header) {
                    Some(&i) => delta.set[i].1.push(a.value.clone()),
                    None => {
                        set_at.insert(header.to_owned(), delta.set.len());
                        delta.set.push((header.to_owned(), vec![a.value.clone()]));
                    }
                }
            } else {
                return Err(bad(a, 0, "not an attribute of a delta".into()));
            }
        }
        delta.base = base.ok_or(DeltaError::Missing {
            attribute: BASE_ATTRIBUTE,
        })?;
        delta.result = result.ok_or(DeltaError::Missing {
            attribute: RESULT_ATTRIBUTE,
        })?;
        Ok(delta)
    }
}

fn strip_prefix_ignore_case<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let head = name.get(..prefix.len())?;
    (head.eq_ignore_ascii_case(prefix) && name.len() > prefix.len()).then(|| &name[prefix.len()..])
}

fn hex(v: u64) -> Bytes {
    Bytes::from(format!("{v:016x}"))
}

fn read_hex(value: &[u8]) -> Result<u64, (usize, String)> {
    if value.len() != 16 {
        return Err((0, format!("{} bytes, expected 16 hex digits", value.len())));
    }
    if let Some(i) = value.iter().position(|b| !b.is_ascii_hexdigit()) {
        return Err((i, "not a hex digit".into()));
    }
    // Checked above: 16 ASCII hex digits.
    let text = std::str::from_utf8(value).map_err(|e| (e.valid_up_to(), "not UTF-8".into()))?;
    u64::from_str_radix(text, 16).map_err(|e| (0, e.to_string()))
}

/// The hint `p` describes, its weightlists by count (highest first), then value bytes.
/// Merges `kept` (in [`list_order`] when `sorted`) with `added` into that order.
fn merge_sorted(
    mut kept: Vec<WeightEntry>,
    mut added: Vec<WeightEntry>,
    sorted: bool,
) -> Vec<WeightEntry> {
    if !sorted {
        kept.append(&mut added);
        kept.sort_by(list_order);
        return kept;
    }
    added.sort_by(list_order);
    if added.is_empty() {
        return kept;
    }
    let mut out = Vec::with_capacity(kept.len() + added.len());
    let mut a = added.into_iter().peekable();
    for e in kept {
        while a.peek().is_some_and(|n| list_order(n, &e).is_lt()) {
            out.extend(a.next());
        }
        out.push(e);
    }
    out.extend(a);
    out
}

/// The hint of `url`, `header` and weightlists whose entries are in [`list_order`].
fn write_hint(
    url: Bytes,
    header: Vec<(String, Vec<Bytes>)>,
    lists: Vec<(AttrSpec, Vec<WeightEntry>)>,
) -> Result<CipHint, DeltaError> {
    let url = if url.is_empty() {
        Bytes::from_static(cip_proto::soif::NO_URL)
    } else {
        url
    };
    let mut obj =
        SoifObject::new(crate::hint::TEMPLATE, url).map_err(|e| DeltaError::BadValue {
            attribute: "URL".into(),
            offset: 0,
            reason: e.to_string(),
        })?;
    let name_error = |name: &str, e: cip_proto::soif::SoifError| DeltaError::BadValue {
        attribute: name.to_owned(),
        offset: 0,
        reason: e.to_string(),
    };
    for (name, values) in header {
        for v in values {
            obj.attributes
                .push(Attribute::new(&name, v).map_err(|e| name_error(&name, e))?);
        }
    }
    for (spec, entries) in lists {
        let name = list_name(&spec);
        let text = crate::weightlist::encode(&Weightlist::new(entries));
        obj.attributes
            .push(Attribute::new(&name, text).map_err(|e| name_error(&name, e))?);
    }
    Ok(CipHint::from_soif(&obj)?.0)
}

#[cfg(test)]
mod tests;
