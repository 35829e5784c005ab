//! Building a CIP-HINT from SOIF collections (RFC 2655 Appendix B).
//!
//! [`HintBuilder`] takes objects one at a time (borrowed [`ObjectRef`]s from a
//! [`cip_proto::soif::SoifReader`], or owned [`SoifObject`]s from a stream decoder) and counts,
//! for each indexed `Template:Attribute`, how many objects hold each value. Semantics:
//!
//! * **Matching.** An object attribute belongs to a spec when the object's template equals
//!   the spec's template ignoring ASCII case, and the attribute identifier equals the spec's
//!   attribute as RFC 2655 §4 compares them (ignoring ASCII case, multi-value suffix folded on
//!   both sides: `Author-1`, `AUTHOR` and `author-2` are all `Author`).
//! * **Values** have surrounding ASCII whitespace (SP, TAB, CR, LF, FF) removed and are
//!   otherwise kept byte-exact (case kept). A value that is empty after trimming is not
//!   counted.
//! * **Counting.** A value counts once per object that holds it, however often the object
//!   repeats it (`Author-1` and `Author-2` equal count once). `Total-Object-Count` is the
//!   number of objects added, whatever their template. Objects added from several
//!   collections add up; an object present in two collections counts twice.
//! * **Thresholds.** Each spec has a threshold (per attribute, else the default); values held
//!   by fewer objects are left out. A threshold above 1 is recorded as `Threshold-[T:A]`; 0
//!   and 1 leave nothing out and are not recorded.
//! * **Order.** Weightlist entries come by descending count, ties by ascending value bytes,
//!   so the output is deterministic. Weightlists and the attribute list follow the order of
//!   the specs given (duplicates, by the matching rule above, dropped).
//!
//! Memory is proportional to the distinct values: one map per spec keyed by the value's
//! bytes, each entry holding its count and the number of the last object that counted it
//! (which replaces a per-object set). Values already seen are looked up borrowed, without
//! allocating; nothing is allocated per object.

use std::collections::HashMap;
use std::hash::Hasher;

use bytes::Bytes;
use cip_proto::soif::attr::base_name;
use cip_proto::soif::{ObjectRef, SoifObject};

use crate::hint::{AttrSpec, CipHint, WeightEntry, Weightlist};

/// Thresholds per attribute, with a default for the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Thresholds {
    default: u64,
    per_attribute: Vec<(AttrSpec, u64)>,
}

impl Thresholds {
    /// `default` for every attribute (0 or 1: keep every value).
    pub fn new(default: u64) -> Self {
        Self {
            default,
            per_attribute: Vec::new(),
        }
    }

    /// Sets the threshold of `spec`'s attribute; a later call for the same attribute wins.
    pub fn set(&mut self, spec: AttrSpec, threshold: u64) {
        self.per_attribute.retain(|(s, _)| !s.same_attribute(&spec));
        self.per_attribute.push((spec, threshold));
    }

    /// Builder form of [`Thresholds::set`].
    #[must_use]
    pub fn with(mut self, spec: AttrSpec, threshold: u64) -> Self {
        self.set(spec, threshold);
        self
    }

    /// The default threshold.
    pub fn default_threshold(&self) -> u64 {
        self.default
    }

    /// The per-attribute thresholds, in the order they were set.
    pub fn per_attribute(&self) -> &[(AttrSpec, u64)] {
        &self.per_attribute
    }

    /// The threshold for `spec`: its own (matched by [`AttrSpec::same_attribute`]), else the
    /// default.
    pub fn for_spec(&self, spec: &AttrSpec) -> u64 {
        self.per_attribute
            .iter()
            .find(|(s, _)| s.same_attribute(spec))
            .map_or(self.default, |(_, n)| *n)
    }
}

/// Per value: objects holding it, and the number of the last object that was counted.
#[derive(Debug, Clone, Copy)]
struct Counter {
    count: u64,
    last_object: u64,
}

/// One indexed attribute and its counts.
#[derive(Debug)]
struct Slot {
    spec: AttrSpec,
    /// The spec's attribute with any multi-value suffix removed.
    attribute_base: String,
    threshold: u64,
    counts: HashMap<Key, Counter, ValueHashState>,
    /// Bytes of the values stored out of line, for the memory estimate.
    heap_bytes: usize,
}

/// Builds a CIP-HINT incrementally from SOIF objects. See the module docs for the rules.
///
/// ```
/// use hints::builder::{HintBuilder, Thresholds};
/// use hints::hint::AttrSpec;
///
/// let specs = vec![AttrSpec::parse("DOCUMENT:Author").unwrap()];
/// let mut b = HintBuilder::new(specs, Thresholds::default());
/// for obj in cip_proto::soif::SoifReader::new(b"@DOCUMENT { - \nAuthor-1{3}:\tAnn\n}\n") {
///     b.add(&obj.unwrap());
/// }
/// let hint = b.finish("-", vec![]);
/// assert_eq!(hint.total_object_count, 1);
/// assert_eq!(hint.weightlists[0].1.entries().next().unwrap().count, 1);
/// ```
#[derive(Debug)]
pub struct HintBuilder {
    slots: Vec<Slot>,
    objects: u64,
    /// Slots whose template matches the current object; reused between objects.
    active: Vec<usize>,
}

impl HintBuilder {
    /// A builder for `specs` (duplicates dropped, first spelling kept), with `thresholds`.
    pub fn new(specs: Vec<AttrSpec>, thresholds: Thresholds) -> Self {
        let mut slots: Vec<Slot> = Vec::with_capacity(specs.len());
        let hash_state = ValueHashState::default();
        for spec in specs {
            if slots.iter().any(|s| s.spec.same_attribute(&spec)) {
                continue;
            }
            slots.push(Slot {
                attribute_base: base_name(&spec.attribute).to_owned(),
                threshold: thresholds.for_spec(&spec),
                spec,
                counts: HashMap::with_hasher(hash_state.clone()),
                heap_bytes: 0,
            });
        }
        let active = Vec::with_capacity(slots.len());
        Self {
            slots,
            objects: 0,
            active,
        }
    }

    /// Counts a borrowed object (the fast path, from [`cip_proto::soif::SoifReader`]).
    pub fn add(&mut self, obj: &ObjectRef<'_>) {
        self.add_parts(
            obj.template,
            obj.attributes.iter().map(|a| (a.name, a.value)),
        );
    }

    /// Counts an owned object (from [`cip_proto::soif::SoifDecoder`] and file readers).
    pub fn add_object(&mut self, obj: &SoifObject) {
        self.add_parts(
            obj.template().as_bytes(),
            obj.attributes
                .iter()
                .map(|a| (a.name.as_bytes(), &a.value[..])),
        );
    }

    /// The one counting core behind [`HintBuilder::add`] and [`HintBuilder::add_object`].
    fn add_parts<'v>(
        &mut self,
        template: &[u8],
        attributes: impl Iterator<Item = (&'v [u8], &'v [u8])>,
    ) {
        self.objects += 1;
        let object = self.objects;
        self.active.clear();
        for (i, slot) in self.slots.iter().enumerate() {
            if slot.spec.template.as_bytes().eq_ignore_ascii_case(template) {
                self.active.push(i);
            }
        }
        if self.active.is_empty() {
            return;
        }
        for (name, value) in attributes {
            for &i in &self.active {
                let slot = &mut self.slots[i];
                if !names_attribute(slot.attribute_base.as_bytes(), name) {
                    continue;
                }
                let value = value.trim_ascii();
                if value.is_empty() {
                    continue;
                }
                if let Some(c) = slot.counts.get_mut(value) {
                    if c.last_object != object {
                        c.last_object = object;
                        c.count += 1;
                    }
                } else {
                    let key = Key::new(value);
                    if let Key::Heap(b) = &key {
                        slot.heap_bytes += b.len();
                    }
                    let counter = Counter {
                        count: 1,
                        last_object: object,
                    };
                    slot.counts.insert(key, counter);
                }
            }
        }
    }

    /// Objects added so far.
    pub fn objects(&self) -> u64 {
        self.objects
    }

    /// Distinct values held so far, over all specs.
    pub fn distinct_values(&self) -> usize {
        self.slots.iter().map(|s| s.counts.len()).sum()
    }

    /// Approximate heap bytes held by the counting maps: table slots (inline value or
    /// pointer, counter, control byte) at their capacity, plus the values too long to be
    /// stored inline.
    pub fn memory_estimate(&self) -> usize {
        let entry = size_of::<(Key, Counter)>() + 1;
        self.slots
            .iter()
            .map(|s| s.counts.capacity() * entry + s.heap_bytes)
            .sum()
    }

    /// The hint: URL `url` (the broker the hint describes; `-` for none), `sources` as
    /// `Source` URIs. `Date`, `Certification-Type` and `Certification` are left empty for the
    /// caller to set.
    pub fn finish(self, url: impl Into<String>, sources: Vec<String>) -> CipHint {
        let mut hint = CipHint {
            url: url.into(),
            sources,
            total_object_count: self.objects,
            ..CipHint::default()
        };
        for slot in self.slots {
            let threshold = slot.threshold;
            let mut entries: Vec<WeightEntry> = slot
                .counts
                .into_iter()
                .filter(|(_, c)| c.count >= threshold)
                .map(|(value, c)| WeightEntry {
                    value: value.into_bytes(),
                    count: c.count,
                })
                .collect();
            entries
                .sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.value.cmp(&b.value)));
            hint.attributes.push(slot.spec.clone());
            if threshold > 1 {
                hint.thresholds.push((slot.spec.clone(), threshold));
            }
            // Packed: a node keeps its local hint for as long as its collections last.
            hint.weightlists
                .push((slot.spec, Weightlist::packed(entries)));
        }
        hint
    }
}

/// Values up to this many bytes are stored inside the map's slot.
const INLINE: usize = 22;

/// A counted value's bytes: inline when short (no allocation, no pointer to chase on
/// lookup), else boxed. Hashes and compares as the `[u8]` it holds, so the map can be
/// searched with a borrowed `&[u8]`.
#[derive(Debug, Clone)]
enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Key {
    fn new(value: &[u8]) -> Self {
        if value.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..value.len()].copy_from_slice(value);
            // Cannot truncate: value.len() <= INLINE < 256.
            Self::Inline {
                len: value.len() as u8,
                bytes,
            }
        } else {
            Self::Heap(value.into())
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Heap(b) => b,
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Self::Inline { .. } => Bytes::copy_from_slice(self.as_bytes()),
            Self::Heap(b) => Bytes::from(b),
        }
    }
}

impl std::borrow::Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Must hash exactly as `[u8]` does, for borrowed lookups.
        self.as_bytes().hash(state);
    }
}

/// True when the attribute identifier `name` is the attribute `base` (itself free of a
/// multi-value suffix): equal ignoring ASCII case once `name`'s suffix is folded. The same
/// rule as [`cip_proto::soif::attr::attribute_matches`], on bytes, without UTF-8 checks.
#[inline]
fn names_attribute(base: &[u8], name: &[u8]) -> bool {
    name.len() >= base.len()
        && name[..base.len()].eq_ignore_ascii_case(base)
        && is_multi_value_suffix(&name[base.len()..])
}

/// True for an empty tail or `-N` with N a positive integer that fits in 64 bits (RFC 2655
/// §3.3), as [`cip_proto::soif::attr::base_name`] reads suffixes.
#[inline]
fn is_multi_value_suffix(tail: &[u8]) -> bool {
    let Some((&b'-', digits)) = tail.split_first() else {
        return tail.is_empty();
    };
    if digits.is_empty() {
        return false;
    }
    let mut n: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return false;
        }
        n = match n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
        {
            Some(n) => n,
            None => return false,
        };
    }
    n > 0
}

/// Hashing for value bytes: `foldhash`, several times faster than SipHash on short values.
/// The seed is random per builder, so a collection cannot be crafted offline to collide.
type ValueHashState = foldhash::fast::RandomState;

#[cfg(test)]
mod tests {
    use super::*;
    use cip_proto::soif::SoifReader;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn spec(s: &str) -> AttrSpec {
        AttrSpec::parse(s).unwrap()
    }

    fn build(input: &[u8], specs: &[&str], thresholds: Thresholds) -> CipHint {
        let mut b = HintBuilder::new(specs.iter().map(|s| spec(s)).collect(), thresholds);
        for obj in SoifReader::new(input) {
            b.add(&obj.unwrap());
        }
        b.finish("-", vec![])
    }

    fn counts(hint: &CipHint, s: &str) -> Vec<(String, u64)> {
        hint.weightlist(&spec(s))
            .unwrap()
            .entries()
            .map(|e| (String::from_utf8(e.value.to_vec()).unwrap(), e.count))
            .collect()
    }

    const COLLECTION: &[u8] = b"@DOCUMENT { http://a/\n\
        Author-1{6}:\t Ann  \nauthor-2{3}:\tAnn\nAUTHOR-3{3}:\tBob\nTitle{1}:\tT\n}\n\
        @document { http://b/\nAuthor{3}:\tbob\nKeywords{2}:\tk1\n}\n\
        @IMAGE { http://c/\nAuthor{3}:\tAnn\nSubject{4}:\tMoon\n}\n\
        @DOCUMENT { http://d/\nAuthor-1{3}:\tBob\nAuthor-2{0}:\t\nAuthor-3{2}:\t  \n}\n";

    #[test]
    fn counts_each_value_once_per_object() {
        let hint = build(
            COLLECTION,
            &["DOCUMENT:Author", "IMAGE:Subject"],
            Thresholds::default(),
        );
        assert_eq!(hint.total_object_count, 4);
        assert_eq!(
            hint.attributes,
            [spec("DOCUMENT:Author"), spec("IMAGE:Subject")]
        );
        // Ann: object a only (IMAGE's Author is another template); Bob: a and d; bob: b.
        assert_eq!(
            counts(&hint, "DOCUMENT:Author"),
            [("Bob".into(), 2), ("Ann".into(), 1), ("bob".into(), 1)]
        );
        assert_eq!(counts(&hint, "IMAGE:Subject"), [("Moon".into(), 1)]);
        assert!(hint.thresholds.is_empty());
    }

    #[test]
    fn inline_and_boxed_values() {
        let mut input = Vec::new();
        for len in [1, INLINE - 1, INLINE, INLINE + 1, 300] {
            let value = "v".repeat(len);
            for _ in 0..2 {
                let mut obj = SoifObject::new("D", "-").unwrap();
                obj.push("A-1", value.clone())
                    .unwrap()
                    .push("A-2", value.clone())
                    .unwrap();
                cip_proto::soif::write_object(&obj, &mut input);
            }
        }
        let hint = build(&input, &["D:A"], Thresholds::default());
        let got: Vec<(usize, u64)> = hint.weightlists[0]
            .1
            .entries()
            .map(|e| (e.value.len(), e.count))
            .collect();
        assert_eq!(
            got,
            [
                (1, 2),
                (INLINE - 1, 2),
                (INLINE, 2),
                (INLINE + 1, 2),
                (300, 2)
            ]
        );
    }

    #[test]
    fn specs_match_ignoring_case_and_suffix() {
        let hint = build(
            COLLECTION,
            &["document:AUTHOR-7", "Document:author"],
            Thresholds::default(),
        );
        assert_eq!(hint.attributes, [spec("document:AUTHOR-7")]);
        assert_eq!(counts(&hint, "DOCUMENT:Author").len(), 3);
    }

    #[test]
    fn thresholds_filter_and_are_recorded() {
        let t = Thresholds::new(2).with(spec("image:subject"), 1);
        let hint = build(COLLECTION, &["DOCUMENT:Author", "IMAGE:Subject"], t);
        assert_eq!(counts(&hint, "DOCUMENT:Author"), [("Bob".into(), 2)]);
        assert_eq!(counts(&hint, "IMAGE:Subject"), [("Moon".into(), 1)]);
        assert_eq!(hint.thresholds, [(spec("DOCUMENT:Author"), 2)]);
        assert_eq!(hint.threshold(&spec("document:author")), Some(2));
        let hint = build(COLLECTION, &["DOCUMENT:Author"], Thresholds::new(3));
        assert!(counts(&hint, "DOCUMENT:Author").is_empty());
    }

    #[test]
    fn owned_and_borrowed_objects_agree() {
        let specs = vec![spec("DOCUMENT:Author"), spec("DOCUMENT:Keywords")];
        let mut owned = HintBuilder::new(specs.clone(), Thresholds::default());
        for obj in
            cip_proto::soif::parse_all(COLLECTION, cip_proto::soif::Limits::default()).unwrap()
        {
            owned.add_object(&obj);
        }
        let mut borrowed = HintBuilder::new(specs, Thresholds::default());
        for obj in SoifReader::new(COLLECTION) {
            borrowed.add(&obj.unwrap());
        }
        assert_eq!(owned.distinct_values(), 4);
        assert!(owned.memory_estimate() > 0);
        assert_eq!(owned.finish("-", vec![]), borrowed.finish("-", vec![]));
    }

    #[test]
    fn built_hint_round_trips_through_soif() {
        let mut b = HintBuilder::new(vec![spec("DOCUMENT:Author")], Thresholds::new(2));
        for obj in SoifReader::new(COLLECTION) {
            b.add(&obj.unwrap());
        }
        let hint = b.finish("http://broker/", vec!["http://src/".into()]);
        let (back, warnings) = CipHint::from_soif(&hint.to_soif()).unwrap();
        assert_eq!(back, hint);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    /// A generated object: template index and (attribute name, value) pairs.
    type GenObject = (usize, Vec<(usize, usize, usize)>);

    const TEMPLATES: [&str; 3] = ["DOCUMENT", "document", "IMAGE"];
    const NAMES: [&str; 6] = [
        "Author", "AUTHOR-1", "author-2", "Keywords", "Author-0", "Authors",
    ];
    const VALUES: [&str; 7] = ["a", "A", " a", "a\t", "b,c", "x\\;1", ""];

    fn render(objects: &[GenObject]) -> Vec<u8> {
        let mut out = Vec::new();
        for (t, attrs) in objects {
            let mut obj = SoifObject::new(TEMPLATES[*t], "-").unwrap();
            for &(n, v, suffix) in attrs {
                let value = format!("{}{}", VALUES[v], if suffix == 0 { "" } else { "z" });
                obj.push(NAMES[n], value).unwrap();
            }
            cip_proto::soif::write_object(&obj, &mut out);
        }
        out
    }

    /// Brute force: per object, the set of trimmed values of matching attributes.
    fn oracle(objects: &[GenObject], s: &AttrSpec, threshold: u64) -> BTreeMap<Vec<u8>, u64> {
        let mut counts = BTreeMap::new();
        for (t, attrs) in objects {
            let mut seen = BTreeSet::new();
            for &(n, v, suffix) in attrs {
                if !s.matches(TEMPLATES[*t], NAMES[n]) {
                    continue;
                }
                let value = format!("{}{}", VALUES[v], if suffix == 0 { "" } else { "z" });
                let value = value.trim_matches(|c: char| c.is_ascii_whitespace());
                if !value.is_empty() {
                    seen.insert(value.as_bytes().to_vec());
                }
            }
            for v in seen {
                *counts.entry(v).or_insert(0) += 1;
            }
        }
        counts.retain(|_, c| *c >= threshold);
        counts
    }

    proptest! {
        #[test]
        fn name_matching_agrees_with_cip_proto(
            base in "[A-Za-z]{1,3}(-[0-9]{0,2})?",
            name in "[A-Za-z]{1,3}(-[0-9]{0,2}){0,2}|[A-Za-z]-[0-9]{19,21}",
        ) {
            let base = cip_proto::soif::attr::base_name(&base);
            prop_assert_eq!(
                names_attribute(base.as_bytes(), name.as_bytes()),
                cip_proto::soif::attr::attribute_matches(base, &name)
            );
        }

        #[test]
        fn matches_brute_force_count(
            objects in prop::collection::vec(
                (0..3usize, prop::collection::vec((0..6usize, 0..7usize, 0..2usize), 0..6)),
                0..30,
            ),
            threshold in 0..4u64,
        ) {
            let input = render(&objects);
            let specs = [spec("DOCUMENT:author"), spec("IMAGE:Keywords")];
            let hint = build(&input, &["DOCUMENT:author", "IMAGE:Keywords"], Thresholds::new(threshold));
            prop_assert_eq!(hint.total_object_count, objects.len() as u64);
            for s in &specs {
                let expected = oracle(&objects, s, threshold);
                let list = hint.weightlist(s).unwrap();
                let got: BTreeMap<Vec<u8>, u64> =
                    list.entries().map(|e| (e.value.to_vec(), e.count)).collect();
                prop_assert_eq!(got.len(), list.len(), "values are distinct");
                prop_assert_eq!(&got, &expected);
                // Descending count, then ascending bytes.
                for w in list.clone().into_entries().windows(2) {
                    prop_assert!(w[0].count > w[1].count
                        || (w[0].count == w[1].count && w[0].value < w[1].value));
                }
            }
        }
    }
}
