//! Issue #16 item 1: a deep mesh checked against brute force.
//!
//! Thirteen nodes in three levels: one root polling three mids, each polling three leaves
//! (nine leaves). The leaves' collections come from a seeded generator with a realistic
//! skew: a Zipf-shaped author list whose head ("Garcia", "Müller", "田中", "Øster", ...) is
//! shared by most leaves and whose long tail is not, per-leaf favourite names, several
//! authors and keywords per object (`Author-1`, `AUTHOR-2`, ...), ASCII case variants,
//! padded values, and titles that repeat. Three leaves hint with thresholds; one mid holds
//! objects of its own.
//!
//! The expected referrals are computed from the collections alone, following the
//! documented rules (README "Queries", PROTOCOL.md "Building a hint", "Ranking",
//! "Definite and possible referrals", "Out-bound hint"): a leaf's hint counts each trimmed,
//! byte-exact value once per object and leaves out values under its threshold; the table
//! merges values that ASCII-fold together; a mid's out-bound hint sums its inputs per folded
//! value (capped at its total), sums the totals and keeps the largest threshold; a term's
//! count is the sum over its matching values, a conjunction's the minimum over its terms;
//! definite referrals rank by count, then count/total, then DSI; possible ones by
//! threshold, then total, then DSI. Each answer of the root (referring to mids) and of
//! every mid (referring to leaves, and counting its own objects) must equal that.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use cipd::model::answer::QueryAnswer;

use crate::harness::{NodeSpec, TestNode};

pub(crate) const ROOT: &str = "1.3.6.1.4.1.99999.200";
pub(crate) const MIDS: usize = 3;
const LEAVES_PER_MID: usize = 3;
pub(crate) const LEAVES: usize = MIDS * LEAVES_PER_MID;
pub(crate) const SEED: u64 = 0x5eed_c1b0_2024_0016;

pub(crate) fn mid_dsi(m: usize) -> String {
    format!("1.3.6.1.4.1.99999.21{m}")
}

pub(crate) fn leaf_dsi(l: usize) -> String {
    format!("1.3.6.1.4.1.99999.22{l}")
}

// ---------------------------------------------------------------------------------------
// Data

/// SplitMix64: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// An index drawn from the cumulative weights `cdf`.
    fn pick(&mut self, cdf: &[f64]) -> usize {
        let u = self.unit() * cdf[cdf.len() - 1];
        cdf.partition_point(|&c| c <= u).min(cdf.len() - 1)
    }
}

/// Cumulative Zipf weights of ranks 1..=n with exponent `s`.
fn zipf(n: usize, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    (1..=n)
        .map(|k| {
            acc += 1.0 / (k as f64).powf(s);
            acc
        })
        .collect()
}

const HEAD_AUTHORS: &[&str] = &[
    "Garcia", "Müller", "田中", "Øster", "Smith", "Nguyen", "Kowalski", "O'Brien",
];
const FIRST: &[&str] = &[
    "Ber", "Sø", "Ma", "Ki", "Lü", "Ha", "Yo", "Ré", "Zh", "Ab", "Ol", "Ås",
];
const LAST: &[&str] = &[
    "gen", "ller", "mura", "ström", "ndez", "wicz", "ko", "lund", "ta", "né", "sen", "ova",
];
const CJK: &[&str] = &["山", "川", "佐", "藤", "鈴", "木", "高", "橋"];
const KEYWORDS: &[&str] = &[
    "mesh",
    "index",
    "CIP",
    "données",
    "検索",
    "søk",
    "routing",
    "hint",
    "Referral",
    "archive",
    "zürich",
    "metadata",
    "ÅRSBOK",
    "γλώσσα",
];
const PHRASES: &[&str] = &[
    "Annual report",
    "Über Indexe",
    "検索の研究",
    "Notes on CIP",
    "Études",
    "Mesh survey",
    "Report",
];
/// Objects per leaf: skewed sizes (leaves 7 and 8 alike, for ties broken by DSI).
const LEAF_SIZES: [usize; LEAVES] = [120, 15, 60, 200, 35, 80, 10, 150, 150];
/// Per leaf: `[export]` extra keys, and the thresholds they mean for Author, Keywords,
/// Title (1: none).
const LEAF_THRESHOLDS: [(&str, [u64; 3]); LEAVES] = [
    ("", [1, 1, 1]),
    ("default_threshold = 2", [2, 2, 2]),
    ("", [1, 1, 1]),
    ("", [1, 1, 1]),
    ("thresholds = { \"DOCUMENT:Keywords\" = 3 }", [1, 3, 1]),
    ("", [1, 1, 1]),
    ("", [1, 1, 1]),
    ("default_threshold = 2", [2, 2, 2]),
    ("", [1, 1, 1]),
];
/// The mid with objects of its own, and how many.
const MID_WITH_LOCAL: usize = 1;
const MID_LOCAL_OBJECTS: usize = 14;
/// The leaf whose collection changes in the datachanged test (under mid 2).
const CHANGING_LEAF: usize = 7;

const ATTRS: [&str; 3] = ["Author", "Keywords", "Title"];

/// One summary object: its values as written (maybe padded or in another ASCII case).
#[derive(Debug, Clone)]
struct Obj {
    authors: Vec<String>,
    keywords: Vec<String>,
    title: String,
}

impl Obj {
    fn values(&self, attr: usize) -> &[String] {
        match attr {
            0 => &self.authors,
            1 => &self.keywords,
            _ => std::slice::from_ref(&self.title),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Layout {
    leaves: Vec<Vec<Obj>>,
    mid_local: Vec<Vec<Obj>>,
}

fn all_authors() -> Vec<String> {
    let mut v: Vec<String> = HEAD_AUTHORS.iter().map(|s| (*s).to_owned()).collect();
    for f in FIRST {
        for l in LAST {
            v.push(format!("{f}{l}"));
        }
    }
    for (i, a) in CJK.iter().enumerate() {
        for (j, b) in CJK.iter().enumerate() {
            if i != j {
                v.push(format!("{a}{b}"));
            }
        }
    }
    v
}

/// ASCII whitespace as the hint builder trims it.
fn trim(s: &str) -> &str {
    s.trim_matches(|c| matches!(c, ' ' | '\t' | '\r' | '\n' | '\x0c'))
}

/// A value as the table compares it: trimmed, ASCII-lowercased.
fn fold(s: &str) -> Vec<u8> {
    trim(s).as_bytes().to_ascii_lowercase()
}

/// Objects for leaf `leaf` (`None`: a mid's own objects, never padded).
fn objects(rng: &mut Rng, n: usize, leaf: Option<usize>, authors: &[String]) -> Vec<Obj> {
    let author_cdf = zipf(authors.len(), 1.0);
    let keyword_cdf = zipf(KEYWORDS.len(), 1.2);
    // Each leaf's favourite tail names.
    let favourites = leaf.map(|l| {
        let start = HEAD_AUTHORS.len() + (l * 17) % (authors.len() - HEAD_AUTHORS.len() - 12);
        start..start + 12
    });
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let want = match rng.unit() {
            u if u < 0.5 => 1,
            u if u < 0.8 => 2,
            u if u < 0.95 => 3,
            _ => 4,
        };
        let mut seen = BTreeSet::new();
        let mut obj_authors = Vec::new();
        while obj_authors.len() < want {
            let i = match &favourites {
                Some(f) if rng.chance(0.3) => f.start + rng.below(f.len()),
                _ => rng.pick(&author_cdf),
            };
            let mut a = authors[i].clone();
            if !seen.insert(fold(&a)) {
                continue;
            }
            if a == "Garcia" && rng.chance(0.12) {
                a = "GARCIA".into();
            } else if a == "Smith" && rng.chance(0.12) {
                a = "smith".into();
            }
            if leaf.is_some() && rng.chance(0.05) {
                a = format!("  {a} ");
            }
            obj_authors.push(a);
        }
        let want = match rng.unit() {
            u if u < 0.2 => 0,
            u if u < 0.6 => 1,
            u if u < 0.9 => 2,
            _ => 3,
        };
        let mut seen = BTreeSet::new();
        let mut obj_keywords = Vec::new();
        while obj_keywords.len() < want {
            let mut k = KEYWORDS[rng.pick(&keyword_cdf)].to_owned();
            if !seen.insert(fold(&k)) {
                continue;
            }
            if k == "mesh" && rng.chance(0.1) {
                k = "Mesh".into();
            }
            obj_keywords.push(k);
        }
        let title = format!("{} {}", PHRASES[rng.below(PHRASES.len())], 1 + rng.below(6));
        out.push(Obj {
            authors: obj_authors,
            keywords: obj_keywords,
            title,
        });
    }
    out
}

pub(crate) fn generate(seed: u64) -> Layout {
    let mut rng = Rng(seed);
    let authors = all_authors();
    let leaves = (0..LEAVES)
        .map(|l| objects(&mut rng, LEAF_SIZES[l], Some(l), &authors))
        .collect();
    let mid_local = (0..MIDS)
        .map(|m| {
            if m == MID_WITH_LOCAL {
                objects(&mut rng, MID_LOCAL_OBJECTS, None, &authors)
            } else {
                Vec::new()
            }
        })
        .collect();
    Layout { leaves, mid_local }
}

fn soif_attr(out: &mut String, name: &str, value: &str) {
    out.push_str(&format!("{name}{{{}}}:\t{value}\n", value.len()));
}

/// The SOIF of `objs`: several values as `Author-1`, `AUTHOR-2`, ...; one as `Author`.
fn soif(objs: &[Obj], site: &str) -> String {
    let mut out = String::new();
    for (i, o) in objs.iter().enumerate() {
        out.push_str(&format!("@DOCUMENT {{ http://{site}.example/doc/{i}\n"));
        for (attr, values) in [("Author", &o.authors), ("Keywords", &o.keywords)] {
            if values.len() == 1 {
                soif_attr(&mut out, attr, &values[0]);
            } else {
                for (k, v) in values.iter().enumerate() {
                    let name = if (i + k) % 5 == 0 {
                        attr.to_ascii_uppercase()
                    } else {
                        attr.to_owned()
                    };
                    soif_attr(&mut out, &format!("{name}-{}", k + 1), v);
                }
            }
        }
        soif_attr(&mut out, "Title", &o.title);
        out.push_str("}\n\n");
    }
    out
}

// ---------------------------------------------------------------------------------------
// The brute-force model

/// What a hint says: per attribute, folded value -> count; thresholds (> 1) per attribute.
#[derive(Debug, Clone, Default, PartialEq)]
struct Model {
    total: u64,
    counts: [BTreeMap<Vec<u8>, u64>; 3],
    thresholds: [Option<u64>; 3],
}

/// A collection's hint, as the table holds it: each trimmed value counted once per object,
/// values under the threshold left out (per byte-exact spelling), then case-folded together.
fn hint_of(objs: &[Obj], thresholds: [u64; 3]) -> Model {
    let mut m = Model {
        total: objs.len() as u64,
        ..Model::default()
    };
    for (attr, &threshold) in thresholds.iter().enumerate() {
        let mut exact: BTreeMap<&str, u64> = BTreeMap::new();
        for o in objs {
            let once: BTreeSet<&str> = o
                .values(attr)
                .iter()
                .map(|v| trim(v))
                .filter(|v| !v.is_empty())
                .collect();
            for v in once {
                *exact.entry(v).or_default() += 1;
            }
        }
        for (v, c) in exact {
            if c >= threshold {
                *m.counts[attr].entry(fold(v)).or_default() += c;
            }
        }
        if threshold > 1 {
            m.thresholds[attr] = Some(threshold);
        }
    }
    m
}

/// A mid's out-bound hint: sums per folded value (capped at the summed total), summed
/// totals, the largest threshold.
fn aggregate(inputs: &[Model]) -> Model {
    let mut m = Model::default();
    for i in inputs {
        m.total += i.total;
        for attr in 0..3 {
            for (v, c) in &i.counts[attr] {
                *m.counts[attr].entry(v.clone()).or_default() += c;
            }
            m.thresholds[attr] = match (m.thresholds[attr], i.thresholds[attr]) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
    }
    let total = m.total;
    for counts in &mut m.counts {
        for c in counts.values_mut() {
            *c = (*c).min(total);
        }
    }
    m
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Exact,
    Substring,
}

#[derive(Debug, Clone)]
struct Term {
    attr: usize,
    op: Op,
    value: Vec<u8>,
}

/// An author (trimmed, as spelled) that exactly one object of `objs` holds, in no other
/// ASCII case either.
fn held_once(objs: &[Obj]) -> String {
    let folded = &hint_of(objs, [1, 1, 1]).counts[0];
    objs.iter()
        .flat_map(|o| &o.authors)
        .map(|a| trim(a))
        .find(|a| folded.get(&fold(a)) == Some(&1))
        .expect("a name held once")
        .to_owned()
}

/// The queries of these tests: `[DOCUMENT:]Attr(=|~)value` joined by `&`.
fn parse(q: &str) -> Vec<Term> {
    q.split('&')
        .map(|t| {
            let at = t.find(['=', '~']).expect("an operator");
            let name = t[..at].trim();
            let name = name.strip_prefix("DOCUMENT:").unwrap_or(name);
            let attr = ATTRS
                .iter()
                .position(|a| a.eq_ignore_ascii_case(name))
                .unwrap_or_else(|| panic!("attribute {name}"));
            let op = if t.as_bytes()[at] == b'=' {
                Op::Exact
            } else {
                Op::Substring
            };
            Term {
                attr,
                op,
                value: t[at + 1..].trim().as_bytes().to_ascii_lowercase(),
            }
        })
        .collect()
}

fn matches(op: Op, folded: &[u8], term: &[u8]) -> bool {
    match op {
        Op::Exact => folded == term,
        Op::Substring => folded.windows(term.len()).any(|w| w == term),
    }
}

/// One referral, as compared: values (folded, with counts) only for definite ones.
#[derive(Debug, Clone, PartialEq)]
struct Ref {
    dsi: String,
    count: u64,
    total: u64,
    definite: bool,
    values: Option<Vec<(Vec<u8>, u64)>>,
}

impl std::fmt::Display for Ref {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}/{}{}",
            self.dsi,
            self.count,
            self.total,
            if self.definite { "" } else { " possible" }
        )?;
        if let Some(v) = &self.values {
            let v: Vec<String> = v
                .iter()
                .map(|(s, c)| format!("{}:{c}", String::from_utf8_lossy(s)))
                .collect();
            write!(f, " [{}]", v.join(", "))?;
        }
        Ok(())
    }
}

/// The referrals a node holding `children`' hints gives for `terms`, in rank order.
fn expected(children: &[(String, Model)], terms: &[Term], possible: bool) -> Vec<Ref> {
    let mut definite = Vec::new();
    let mut maybe = Vec::new();
    for (dsi, m) in children {
        let mut counts = Vec::new();
        let mut values: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        for t in terms {
            let mut sum = 0;
            for (v, &c) in &m.counts[t.attr] {
                if c > 0 && matches(t.op, v, &t.value) {
                    sum += c;
                    let e = values.entry(v.clone()).or_default();
                    *e = (*e).max(c);
                }
            }
            counts.push(sum);
        }
        if counts.iter().all(|&c| c > 0) {
            let mut values: Vec<(Vec<u8>, u64)> = values.into_iter().collect();
            values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            values.truncate(5);
            definite.push(Ref {
                dsi: dsi.clone(),
                count: *counts.iter().min().unwrap(),
                total: m.total,
                definite: true,
                values: Some(values),
            });
        } else if possible {
            // Possible when every unmatched term is covered by a threshold above 1.
            let covering: Option<Vec<u64>> = terms
                .iter()
                .zip(&counts)
                .filter(|(_, c)| **c == 0)
                .map(|(t, _)| m.thresholds[t.attr])
                .collect();
            if let Some(th) = covering {
                maybe.push((
                    *th.iter().min().unwrap(),
                    Ref {
                        dsi: dsi.clone(),
                        count: 0,
                        total: m.total,
                        definite: false,
                        values: None,
                    },
                ));
            }
        }
    }
    definite.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| {
                (u128::from(b.count) * u128::from(a.total))
                    .cmp(&(u128::from(a.count) * u128::from(b.total)))
            })
            .then_with(|| a.dsi.cmp(&b.dsi))
    });
    maybe.sort_by(|(ta, a), (tb, b)| {
        tb.cmp(ta)
            .then_with(|| b.total.cmp(&a.total))
            .then_with(|| a.dsi.cmp(&b.dsi))
    });
    definite.extend(maybe.into_iter().map(|(_, r)| r));
    definite
}

/// Objects of `objs` matching every term.
fn local_count(objs: &[Obj], terms: &[Term]) -> u64 {
    objs.iter()
        .filter(|o| {
            terms.iter().all(|t| {
                o.values(t.attr)
                    .iter()
                    .any(|v| matches(t.op, &fold(v), &t.value))
            })
        })
        .count() as u64
}

fn leaf_model(layout: &Layout, l: usize) -> Model {
    hint_of(&layout.leaves[l], LEAF_THRESHOLDS[l].1)
}

pub(crate) fn mid_leaves(m: usize) -> std::ops::Range<usize> {
    m * LEAVES_PER_MID..(m + 1) * LEAVES_PER_MID
}

fn mid_children(layout: &Layout, m: usize) -> Vec<(String, Model)> {
    mid_leaves(m)
        .map(|l| (leaf_dsi(l), leaf_model(layout, l)))
        .collect()
}

fn mid_model(layout: &Layout, m: usize) -> Model {
    let mut inputs = vec![hint_of(&layout.mid_local[m], [1, 1, 1])];
    inputs.extend(mid_children(layout, m).into_iter().map(|(_, h)| h));
    aggregate(&inputs)
}

fn root_children(layout: &Layout) -> Vec<(String, Model)> {
    (0..MIDS)
        .map(|m| (mid_dsi(m), mid_model(layout, m)))
        .collect()
}

fn actual(a: &QueryAnswer) -> Vec<Ref> {
    a.referrals
        .iter()
        .map(|r| Ref {
            dsi: r.dsi.clone(),
            count: r.count,
            total: r.total,
            definite: r.definite,
            values: r
                .definite
                .then(|| r.values.iter().map(|(v, c)| (fold(v), *c)).collect()),
        })
        .collect()
}

/// The queries checked everywhere, with whether to ask for possible referrals.
pub(crate) fn queries(layout: &Layout) -> Vec<(String, bool)> {
    let mut q: Vec<(String, bool)> = [
        "Author=Garcia",
        "author=GARCIA",
        "DOCUMENT:Author=Müller",
        "Author=MÜLLER",
        "Author=田中",
        "Author=Øster",
        "Author=øster",
        "Author=smith",
        "Author=O'Brien",
        "Keywords=検索",
        "Keywords=cip",
        "Keywords=Mesh",
        "Title=Études 3",
        "Title=Über Indexe 1",
        "Author=Nobody Here",
        "Author~ll",
        "Author~田",
        "Author~ström",
        "Author~ø",
        "Author~ber",
        "Keywords~s",
        "Title~report",
        "Title~の",
        "Author~a",
        "Author=Garcia & Keywords=mesh",
        "Author~ll & Keywords~in",
        "Author=田中 & Author~ll",
        "Title~report & Author=Smith",
        "Author~ø & Keywords=検索 & Title~e",
        "Keywords=zürich & Author~ko",
    ]
    .iter()
    .map(|s| ((*s).to_owned(), false))
    .collect();
    for s in [
        "Author=Nobody Here",
        "Author=Garcia & Keywords=zürich",
        "Title=Études 3",
        "Keywords=γλώσσα & Author~ll",
        "Keywords=ÅRSBOK",
        "Keywords=Nichts",
    ] {
        q.push((s.to_owned(), true));
    }
    // From the data: the commonest tail name, and names held once by a leaf with a
    // threshold (hidden there) or without one.
    let mut tail: BTreeMap<String, u64> = BTreeMap::new();
    for objs in &layout.leaves {
        for o in objs {
            for a in &o.authors {
                if !HEAD_AUTHORS.iter().any(|h| h.eq_ignore_ascii_case(trim(a))) {
                    *tail.entry(trim(a).to_owned()).or_default() += 1;
                }
            }
        }
    }
    let top = tail.iter().max_by_key(|(_, c)| **c).unwrap().0.clone();
    q.push((format!("Author={top}"), false));
    for l in [1, 4] {
        let once = held_once(&layout.leaves[l]);
        q.push((format!("Author={once}"), false));
        q.push((format!("Author={once}"), true));
    }
    q
}

/// Compares every answer of `node` with the brute force; returns the mismatches.
async fn check(
    node: &TestNode,
    children: &[(String, Model)],
    local: &[Obj],
    queries: &[(String, bool)],
) -> Vec<String> {
    let mut bad = Vec::new();
    for (q, possible) in queries {
        let terms = parse(q);
        let want = expected(children, &terms, *possible);
        let a = node.query_with(q, *possible).await;
        let got = actual(&a);
        let show = |v: &[Ref]| v.iter().map(|r| format!("\n      {r}")).collect::<String>();
        if got != want {
            bad.push(format!(
                "{} {q:?}{}:\n    expected{}\n    got{}",
                node.spec.dsi,
                if *possible { " (possible)" } else { "" },
                show(&want),
                show(&got)
            ));
        }
        let want_local = local_count(local, &terms);
        if a.local != want_local {
            bad.push(format!(
                "{} {q:?}: local {} expected {want_local}",
                node.spec.dsi, a.local
            ));
        }
    }
    bad
}

/// True when `node`'s table holds a hint of each child with the model's total.
fn table_settled(node: &TestNode, children: &[(String, Model)]) -> bool {
    let peers = node.daemon.node().table().peers();
    peers.len() == children.len()
        && children.iter().all(|(dsi, m)| {
            peers
                .iter()
                .any(|p| p.dsi.as_str() == dsi && p.total == m.total)
        })
}

/// Waits until `node`'s table is settled, then checks each child's entries (one per
/// attribute and folded value) against the model.
async fn wait_table(node: &TestNode, children: &[(String, Model)], what: &str) {
    node.wait_for(what, |_| table_settled(node, children)).await;
    let peers = node.daemon.node().table().peers();
    for (dsi, m) in children {
        let p = peers.iter().find(|p| p.dsi.as_str() == dsi).unwrap();
        let want: usize = m.counts.iter().map(BTreeMap::len).sum();
        assert_eq!(
            p.entries, want,
            "{}: entries of {dsi}'s hint (total {})",
            node.spec.dsi, p.total
        );
    }
}

// ---------------------------------------------------------------------------------------
// The mesh

pub(crate) struct Mesh {
    pub(crate) layout: Layout,
    pub(crate) leaves: Vec<TestNode>,
    pub(crate) mids: Vec<TestNode>,
    pub(crate) root: TestNode,
}

fn with_keywords(mut spec: NodeSpec) -> NodeSpec {
    spec.export = vec!["DOCUMENT:Keywords"];
    spec
}

fn leaf_spec(layout: &Layout, l: usize) -> NodeSpec {
    let mut spec = with_keywords(NodeSpec::new(&leaf_dsi(l), &[]));
    spec.soif = Some(soif(&layout.leaves[l], &format!("leaf{l}")));
    spec.export_extra = LEAF_THRESHOLDS[l].0.to_owned();
    spec
}

fn mid_spec(layout: &Layout, m: usize, leaves: &[TestNode]) -> NodeSpec {
    let mut spec = with_keywords(NodeSpec::new(&mid_dsi(m), &[]));
    spec.soif = Some(soif(&layout.mid_local[m], &format!("mid{m}")));
    for l in mid_leaves(m) {
        spec = spec.peer(&format!("leaf{l}"), &leaves[l], &["poll"]);
    }
    spec
}

fn root_spec(mids: &[TestNode]) -> NodeSpec {
    let mut spec = with_keywords(NodeSpec::new(ROOT, &[]));
    for (m, mid) in mids.iter().enumerate() {
        spec = spec.peer(&format!("mid{m}"), mid, &["poll"]);
    }
    spec
}

impl Mesh {
    /// Starts the mesh (polls hourly: after the first round only `datachanged` or a
    /// restart moves hints) and waits until every table holds what the model says.
    pub(crate) async fn start(layout: Layout) -> Self {
        let started = Instant::now();
        let mut leaves = Vec::new();
        for l in 0..LEAVES {
            leaves.push(TestNode::start(leaf_spec(&layout, l)).await);
        }
        let mut mids = Vec::new();
        for m in 0..MIDS {
            let mid = TestNode::start(mid_spec(&layout, m, &leaves)).await;
            wait_table(&mid, &mid_children(&layout, m), "its leaves' hints").await;
            mids.push(mid);
        }
        let root = TestNode::start(root_spec(&mids)).await;
        wait_table(&root, &root_children(&layout), "the mids' aggregates").await;
        eprintln!(
            "depth: {} nodes up and settled in {} ms",
            1 + MIDS + LEAVES,
            started.elapsed().as_millis()
        );
        Self {
            layout,
            leaves,
            mids,
            root,
        }
    }

    /// Every answer of the root and of every mid against the brute force.
    async fn check_all(&self, queries: &[(String, bool)]) -> Vec<String> {
        let mut bad = check(&self.root, &root_children(&self.layout), &[], queries).await;
        for (m, mid) in self.mids.iter().enumerate() {
            bad.extend(
                check(
                    mid,
                    &mid_children(&self.layout, m),
                    &self.layout.mid_local[m],
                    queries,
                )
                .await,
            );
        }
        bad
    }

    pub(crate) async fn stop(self) {
        self.root.stop().await;
        for n in self.mids.into_iter().chain(self.leaves) {
            n.stop().await;
        }
    }
}

fn assert_none(bad: &[String]) {
    assert!(
        bad.is_empty(),
        "{} answers differ from the brute force:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn the_generated_data_has_the_skew_the_tests_rely_on() {
    let layout = generate(SEED);
    let leaves_with = |name: &str| {
        layout
            .leaves
            .iter()
            .filter(|objs| {
                objs.iter()
                    .any(|o| o.authors.iter().any(|a| fold(a) == fold(name)))
            })
            .count()
    };
    // The head is shared by most leaves, the tail is not.
    assert!(leaves_with("Garcia") >= 7, "{}", leaves_with("Garcia"));
    assert!(leaves_with("田中") >= 6 && leaves_with("Øster") >= 5);
    let authors = all_authors();
    let narrow = authors[HEAD_AUTHORS.len()..]
        .iter()
        .filter(|a| (1..=2).contains(&leaves_with(a)))
        .count();
    assert!(
        narrow >= 40,
        "{narrow} tail names held by one or two leaves"
    );
    let objs: Vec<&Obj> = layout.leaves.iter().flatten().collect();
    let multi = objs.iter().filter(|o| o.authors.len() > 1).count();
    assert!(
        multi * 3 >= objs.len(),
        "{multi} of {} multi-author",
        objs.len()
    );
    assert!(objs.iter().any(|o| o.authors.iter().any(|a| a == "GARCIA")));
    assert!(objs.iter().any(|o| o.authors.iter().any(|a| a != trim(a))));
    // Thresholds hide values: leaf 1 holds Author values once that its hint leaves out.
    let hidden = hint_of(&layout.leaves[1], [1, 1, 1]).counts[0].len()
        - leaf_model(&layout, 1).counts[0].len();
    assert!(hidden >= 5, "{hidden}");
    // Some answers tie on count and total (leaves 7 and 8 are the same size): the DSI
    // decides.
    let ties = queries(&layout)
        .iter()
        .filter(|(q, possible)| {
            expected(&mid_children(&layout, 2), &parse(q), *possible)
                .windows(2)
                .any(|w| w[0].definite && (w[0].count, w[0].total) == (w[1].count, w[1].total))
        })
        .count();
    assert!(ties >= 2, "{ties} answers with ties");
    // The same seed, the same data.
    assert_eq!(
        soif(&generate(SEED).leaves[3], "x"),
        soif(&layout.leaves[3], "x")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirteen_node_mesh_answers_equal_the_brute_force() {
    let layout = generate(SEED);
    let queries = queries(&layout);
    let mesh = Mesh::start(layout).await;
    let started = Instant::now();
    let bad = mesh.check_all(&queries).await;
    eprintln!(
        "depth: {} queries at 4 nodes checked in {} ms",
        queries.len(),
        started.elapsed().as_millis()
    );
    assert_none(&bad);
    // The root refers to mids only, never past them to the leaves.
    let a = mesh.root.query("Author~a").await;
    let dsis: BTreeSet<String> = a.referrals.iter().map(|r| r.dsi.clone()).collect();
    assert_eq!(dsis, (0..MIDS).map(mid_dsi).collect());
    mesh.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_change_reaches_the_root_through_datachanged() {
    let mut layout = generate(SEED);
    let mut queries = queries(&layout);
    let mut mesh = Mesh::start(layout.clone()).await;
    // Each leaf lists its mid as poller, each mid the root: polls stay hourly, so only
    // datachanged can carry the change up.
    for m in 0..MIDS {
        for l in mid_leaves(m) {
            let spec = mesh.leaves[l]
                .spec
                .clone()
                .peer("mid", &mesh.mids[m], &["poller"]);
            mesh.leaves[l].reconfigure(spec).await;
        }
        let spec = mesh.mids[m]
            .spec
            .clone()
            .peer("root", &mesh.root, &["poller"]);
        mesh.mids[m].reconfigure(spec).await;
    }
    let mid = CHANGING_LEAF / LEAVES_PER_MID;
    // The mids re-polled their leaves on reload: wait for that to settle.
    for m in 0..MIDS {
        wait_table(
            &mesh.mids[m],
            &mid_children(&layout, m),
            "the leaves after the reload",
        )
        .await;
    }
    let root_polls = mesh.root.daemon.node().status_snapshot().polls_ok;

    // Two new objects: a new author in both, and with them a name the leaf held once,
    // below its threshold of 2, now held twice.
    let once = held_once(&layout.leaves[CHANGING_LEAF]);
    let newcomer = "Zoë Ångström";
    layout.leaves[CHANGING_LEAF].extend([
        Obj {
            authors: vec![newcomer.into(), once.clone()],
            keywords: vec!["hint".into()],
            title: "Report 9".into(),
        },
        Obj {
            authors: vec![newcomer.into()],
            keywords: vec![],
            title: "Über Indexe 9".into(),
        },
    ]);
    for q in [
        format!("Author={newcomer}"),
        format!("Author={once}"),
        "Author~ång".into(),
    ] {
        queries.push((q, false));
    }
    let before = mesh.root.query(&format!("Author={once}")).await;
    assert!(
        !before.referrals.iter().any(|r| r.dsi == mid_dsi(mid)),
        "{once} is below the leaf's threshold before the change: {before:?}"
    );

    let changed = Instant::now();
    let soif_text = soif(
        &layout.leaves[CHANGING_LEAF],
        &format!("leaf{CHANGING_LEAF}"),
    );
    mesh.leaves[CHANGING_LEAF].set_soif(soif_text).await;
    let at_root = mesh
        .root
        .wait_query(&format!("Author={newcomer}"), |a| {
            a.referrals.iter().any(|r| r.dsi == mid_dsi(mid))
        })
        .await;
    let latency = changed.elapsed();
    eprintln!(
        "depth: leaf change reached the root in {} ms",
        latency.as_millis()
    );
    assert_eq!(
        (at_root.referrals[0].count, at_root.referrals.len()),
        (2, 1),
        "{at_root:?}"
    );
    assert!(
        latency < Duration::from_secs(5),
        "datachanged took {latency:?} through two levels"
    );
    mesh.layout = layout;
    wait_table(
        &mesh.root,
        &root_children(&mesh.layout),
        "the whole new aggregate",
    )
    .await;
    assert_none(&mesh.check_all(&queries).await);
    let s = mesh.root.daemon.node().status_snapshot();
    assert!(s.datachanged_received >= 1, "{s:?}");
    assert!(
        s.polls_ok > root_polls,
        "the root polled on datachanged: {s:?}"
    );
    let s = mesh.mids[mid].daemon.node().status_snapshot();
    assert!(
        s.datachanged_received >= 1 && s.datachanged_sent >= 1,
        "{s:?}"
    );
    mesh.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mid_restarts_from_its_spool_and_answers_with_its_leaves_down() {
    let layout = generate(SEED);
    let queries = queries(&layout);
    let Mesh {
        layout,
        mut leaves,
        mut mids,
        mut root,
    } = Mesh::start(layout).await;
    const M: usize = 0;
    let children = mid_children(&layout, M);
    assert_none(&check(&mids[M], &children, &layout.mid_local[M], &queries).await);

    // Stop the mid's leaves, then the mid.
    let mut kept = Vec::new();
    for (l, leaf) in leaves.drain(..).enumerate() {
        if mid_leaves(M).contains(&l) {
            leaf.stop().await;
        } else {
            kept.push(leaf);
        }
    }
    let mid = mids.remove(M);
    let spec = mid.spec.clone();
    let dir = mid.stop().await;

    let restarted = Instant::now();
    let mid = TestNode::start_in(spec, dir).await;
    let s = mid.daemon.node().status_snapshot();
    assert_eq!(
        (s.spool_restored, s.spool_corrupt, s.table_peers),
        (LEAVES_PER_MID as u64, 0, LEAVES_PER_MID as u64),
        "{s:?}"
    );
    assert!(
        table_settled(&mid, &children),
        "the spool restores every leaf's hint"
    );
    wait_table(&mid, &children, "the restored hints").await;
    assert_none(&check(&mid, &children, &layout.mid_local[M], &queries).await);
    // The restore was a bulk load: with every configured peer's hint in, it ends with the
    // table merged into one segment.
    mid.wait_for("the restore's final merge", |_| {
        !mid.daemon.node().cold_starting() && mid.daemon.node().table().stats().segments == 1
    })
    .await;
    assert_none(&check(&mid, &children, &layout.mid_local[M], &queries).await);
    eprintln!(
        "depth: restarted mid answered {} queries from its spool {} ms after the start",
        queries.len(),
        restarted.elapsed().as_millis()
    );
    // Its leaves stay down: every poll fails, the answers stay.
    mid.wait_for("a failed poll of each leaf", |_| {
        mid.daemon
            .node()
            .peer_states()
            .iter()
            .all(|p| p.consecutive_failures >= 1 && p.last_error.is_some())
    })
    .await;
    assert_none(&check(&mid, &children, &layout.mid_local[M], &queries).await);

    // The root, pointed at the restarted mid, gets the same aggregate from it.
    mids.insert(M, mid);
    let reconfigured = std::time::SystemTime::now();
    root.reconfigure(root_spec(&mids)).await;
    root.wait_for("a poll of the restarted mid", |_| {
        root.daemon
            .node()
            .peer_states()
            .iter()
            .any(|p| p.name == format!("mid{M}") && p.last_success > Some(reconfigured))
    })
    .await;
    let root_children = root_children(&layout);
    wait_table(&root, &root_children, "the restarted mid's aggregate").await;
    assert_none(&check(&root, &root_children, &[], &queries).await);
    let a = root.query("Author=Garcia").await;
    let r = a.referrals.iter().find(|r| r.dsi == mid_dsi(M)).unwrap();
    assert_eq!(
        r.base_uri,
        [format!("{}/", mids[M].http_url())],
        "the root holds the restarted mid's new hint"
    );
    root.stop().await;
    for n in mids.into_iter().chain(kept) {
        n.stop().await;
    }
}
