//! The simulated mesh's shape, its leaves' generated collections, and the brute-force
//! answer the root must give.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One node of the mesh.
#[derive(Debug, Clone)]
pub struct SimNode {
    /// Depth from the root (the root is 0).
    pub level: usize,
    /// The nodes it reports to: none for the root, one in a tree, more in a DAG (the first
    /// is its place in the tree).
    pub parents: Vec<usize>,
    /// The nodes reporting to it.
    pub children: Vec<usize>,
}

/// A tree of `fan_in` children per inner node, `depth` levels below the root, numbered
/// breadth-first (the root is 0); with more than one parent per node, a DAG; with links
/// among the level-1 hubs, a mesh with cycles.
#[derive(Debug, Clone)]
pub struct Tree {
    /// The nodes, breadth-first.
    pub nodes: Vec<SimNode>,
    /// Levels below the root.
    pub depth: usize,
    /// Per node, the nodes it polls besides its children (links among the hubs).
    pub links: Vec<Vec<usize>>,
}

impl Tree {
    /// Builds the tree, then, for `parents` above 1, has every node below level 1 also
    /// report to the `parents - 1` nodes that follow its parent on the parent's level
    /// (wrapping round), so that its data reaches the root by several ways.
    pub fn new(fan_in: usize, depth: usize, parents: usize) -> Self {
        let mut nodes = vec![SimNode {
            level: 0,
            parents: Vec::new(),
            children: Vec::new(),
        }];
        let mut level_start = 0;
        for level in 1..=depth {
            let level_end = nodes.len();
            for parent in level_start..level_end {
                for _ in 0..fan_in {
                    let id = nodes.len();
                    nodes.push(SimNode {
                        level,
                        parents: vec![parent],
                        children: Vec::new(),
                    });
                    nodes[parent].children.push(id);
                }
            }
            // Extra parents: the nodes after the first one on its level.
            let width = level_end - level_start;
            if level >= 2 {
                for id in level_end..nodes.len() {
                    let first = nodes[id].parents[0];
                    for k in 1..parents.min(width) {
                        let other = level_start + (first - level_start + k) % width;
                        nodes[id].parents.push(other);
                        nodes[other].children.push(id);
                    }
                }
            }
            level_start = level_end;
        }
        let links = vec![Vec::new(); nodes.len()];
        Self {
            nodes,
            depth,
            links,
        }
    }

    /// Links the level-1 hubs: each polls every other (`full`) or the next one, the last
    /// polling the first (a ring).
    pub fn link_hubs(&mut self, full: bool) {
        let level1: Vec<usize> = self.level(1).collect();
        let k = level1.len();
        for (i, &h) in level1.iter().enumerate() {
            self.links[h] = if full {
                level1.iter().copied().filter(|&o| o != h).collect()
            } else if k > 1 {
                vec![level1[(i + 1) % k]]
            } else {
                Vec::new()
            };
        }
    }

    /// Cross-links between subtrees: each level-1 hub also polls the first level-2 node of
    /// the next hub's subtree (the last hub the first's), which then reports to two hubs
    /// in different subtrees. No cycle: a diamond under the root, counted once per path.
    pub fn cross_link(&mut self) {
        let level1: Vec<usize> = self.level(1).collect();
        let k = level1.len();
        if k < 2 {
            return;
        }
        for (i, &h) in level1.iter().enumerate() {
            let next = level1[(i + 1) % k];
            if let Some(&m) = self.nodes[next].children.first()
                && !self.nodes[m].parents.contains(&h)
            {
                self.nodes[m].parents.push(h);
                self.nodes[h].children.push(m);
            }
        }
    }

    /// Whether links among the hubs make cycles.
    pub fn cyclic(&self) -> bool {
        self.links.iter().any(|l| !l.is_empty())
    }

    /// The nodes `id` polls: its children and its links.
    pub fn polls(&self, id: usize) -> impl Iterator<Item = usize> + '_ {
        self.nodes[id]
            .children
            .iter()
            .chain(&self.links[id])
            .copied()
    }

    /// The nodes that poll `id`: its parents and the hubs linked to it.
    pub fn pollers(&self, id: usize) -> Vec<usize> {
        let mut out = self.nodes[id].parents.clone();
        out.extend((0..self.nodes.len()).filter(|&x| self.links[x].contains(&id)));
        out
    }

    /// Every node `id` reaches by polling, itself left out.
    pub fn reachable(&self, id: usize) -> std::collections::BTreeSet<usize> {
        let mut seen = std::collections::BTreeSet::from([id]);
        let mut todo = vec![id];
        while let Some(x) = todo.pop() {
            for y in self.polls(x) {
                if seen.insert(y) {
                    todo.push(y);
                }
            }
        }
        seen.remove(&id);
        seen
    }

    /// The first parent (the tree's), none for the root.
    pub fn parent(&self, id: usize) -> Option<usize> {
        self.nodes[id].parents.first().copied()
    }

    /// Whether `id` holds a collection (a node without children).
    pub fn is_leaf(&self, id: usize) -> bool {
        self.nodes[id].children.is_empty()
    }

    /// The ids of level `level`.
    pub fn level(&self, level: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(move |&i| self.nodes[i].level == level)
    }
}

/// How the leaves' values are drawn.
#[derive(Debug, Clone, Copy)]
pub struct DataSpec {
    /// Objects per leaf.
    pub objects: usize,
    /// Values every leaf draws from (the popular head).
    pub vocabulary: usize,
    /// Zipf exponent of the head.
    pub zipf: f64,
    /// Share of objects whose value is the leaf's own (the long tail).
    pub tail: f64,
}

/// Per value, how many objects hold it.
pub type Counts = BTreeMap<Value, u64>;

/// A value as the simulator's counts hold it: shared, so that the expected hints of every
/// node up the tree (millions of entries at depth 5) hold one copy of each value's text.
pub type Value = std::sync::Arc<str>;

/// What leaves draw their shared values from: the Zipf law's cumulative distribution and
/// each rank's value, made once so that every leaf holding a shared value holds the same
/// copy of its text.
#[derive(Debug, Clone)]
pub struct Draws {
    cdf: Vec<f64>,
    values: Vec<Value>,
}

impl Draws {
    /// The draws of `spec`'s vocabulary and exponent.
    pub fn new(spec: &DataSpec) -> Self {
        Self {
            cdf: zipf_cdf(spec.vocabulary, spec.zipf),
            values: (0..spec.vocabulary)
                .map(|rank| Value::from(format!("a{rank}")))
                .collect(),
        }
    }
}

/// Draws leaf `leaf`'s collection: one `DOCUMENT:Author` value per object.
pub fn leaf_counts(spec: &DataSpec, seed: u64, leaf: usize, draws: &Draws) -> Counts {
    let mut rng =
        fastrand::Rng::with_seed(seed ^ (leaf as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut counts = Counts::new();
    for k in 0..spec.objects {
        let value = if rng.f64() < spec.tail || draws.cdf.is_empty() {
            Value::from(format!("t{leaf}-{k}"))
        } else {
            let u = rng.f64();
            let rank = draws
                .cdf
                .partition_point(|&c| c < u)
                .min(draws.cdf.len() - 1);
            draws.values[rank].clone()
        };
        *counts.entry(value).or_default() += 1;
    }
    counts
}

/// The cumulative distribution of a Zipf law over `n` ranks with exponent `s`.
pub fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let weights: Vec<f64> = (1..=n).map(|r| 1.0 / (r as f64).powf(s)).collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    weights
        .iter()
        .map(|w| {
            acc += w / total;
            acc
        })
        .collect()
}

/// A leaf's collection as SOIF, an object per value occurrence.
pub fn soif(leaf: usize, counts: &Counts) -> String {
    let mut out = String::new();
    let mut k = 0;
    for (value, n) in counts {
        for _ in 0..*n {
            let _ = write!(
                out,
                "@DOCUMENT {{ http://leaf{leaf}.sim/{k}\nAuthor{{{}}}:\t{value}\n}}\n",
                value.len()
            );
            k += 1;
        }
    }
    out
}

/// A node's expected out-bound hint. The hints of the root's children and of the leaves
/// (made when asked for) are held whole, for the figures that read single values; the
/// root's and deeper inner nodes' as their length and a 128-bit digest of their content,
/// enough to judge a table exact: below level 1 each level holds about all the mesh's values again, and at
/// depth 5 whole lists would cost gigabytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// The values with their counts, in order.
    Whole(Box<[(Value, u64)]>),
    /// Values held, and the digest of the values with their counts in order.
    Digest(usize, u128),
}

impl Default for Expected {
    fn default() -> Self {
        Self::Whole(Box::default())
    }
}

impl Expected {
    /// The values of `counts` held by at least `threshold` objects.
    pub fn of(counts: &Counts, threshold: u64) -> Self {
        Self::Whole(
            counts
                .iter()
                .filter(|(_, n)| **n >= threshold)
                .map(|(v, n)| (v.clone(), *n))
                .collect(),
        )
    }

    /// The same hint held as a digest.
    pub fn digest(&self) -> Self {
        match self {
            Self::Whole(list) => {
                Self::Digest(list.len(), digest(list.iter().map(|(v, n)| (v, *n))))
            }
            Self::Digest(..) => self.clone(),
        }
    }

    /// The count of `value`, if the hint holds it.
    ///
    /// # Panics
    /// On a digest: only the root's children's and the leaves' hints are asked for values.
    #[allow(
        clippy::panic,
        reason = "asking a digest for a value is a bug in the simulator, not a figure"
    )]
    pub fn get(&self, value: &str) -> Option<u64> {
        match self {
            Self::Whole(list) => list
                .binary_search_by(|(v, _)| (**v).cmp(value))
                .ok()
                .map(|i| list[i].1),
            Self::Digest(..) => panic!("the expected hint of a node below level 1 is a digest"),
        }
    }

    /// Whether the hint holds `value` (see [`Expected::get`]).
    pub fn contains_key(&self, value: &str) -> bool {
        self.get(value).is_some()
    }

    /// Values held.
    pub fn len(&self) -> usize {
        match self {
            Self::Whole(list) => list.len(),
            Self::Digest(len, _) => *len,
        }
    }

    /// Whether it holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values and counts, in order (none from a digest).
    pub fn iter(&self) -> impl Iterator<Item = (&Value, u64)> {
        let list: &[(Value, u64)] = match self {
            Self::Whole(list) => list,
            Self::Digest(..) => &[],
        };
        list.iter().map(|(v, n)| (v, *n))
    }

    /// Whether `held` is exactly this hint.
    pub fn matches(&self, held: &Counts) -> bool {
        match self {
            Self::Whole(list) => {
                held.len() == list.len()
                    && held
                        .iter()
                        .zip(list.iter())
                        .all(|((hv, hn), (v, n))| hv == v && hn == n)
            }
            Self::Digest(len, d) => {
                held.len() == *len && digest(held.iter().map(|(v, n)| (v, *n))) == *d
            }
        }
    }
}

/// 128 bits over values and counts in order: two SipHash runs of different keys (the
/// standard library's, fixed for the process).
fn digest<'a>(entries: impl Iterator<Item = (&'a Value, u64)> + Clone) -> u128 {
    use std::hash::{Hash, Hasher};
    let half = |key: u8| {
        let mut h = std::hash::DefaultHasher::new();
        key.hash(&mut h);
        for (v, n) in entries.clone() {
            v.hash(&mut h);
            n.hash(&mut h);
        }
        h.finish()
    };
    (u128::from(half(1)) << 64) | u128::from(half(2))
}

/// What each node's out-bound hint must hold, computed without the daemon: a node's
/// collection plus its children's hints, summed per value, then its level's threshold
/// applied (values held by fewer objects are left out). The leaves `absent` count for
/// nothing. A leaf's own entry is left empty: it is its collection under its level's
/// threshold ([`Expected::of`]), made when asked for, since leaves are most of a mesh.
/// Below level 1 an inner node's is kept as a digest ([`Expected`]) once its parents have
/// summed it.
pub fn expected_hints(
    tree: &Tree,
    leaves: &BTreeMap<usize, Counts>,
    absent: &std::collections::BTreeSet<usize>,
    thresholds: &[u64],
) -> Vec<Expected> {
    let mut out = vec![Expected::default(); tree.nodes.len()];
    // Parents not yet summed, per node: a child's whole list goes once the last is.
    let mut waiting: Vec<usize> = tree.nodes.iter().map(|n| n.parents.len()).collect();
    for id in (0..tree.nodes.len()).rev() {
        if tree.is_leaf(id) {
            continue;
        }
        let mut sum = Counts::new();
        for &c in &tree.nodes[id].children {
            if absent.contains(&c) {
                continue;
            }
            if tree.is_leaf(c) {
                let t = threshold_of(thresholds, tree.nodes[c].level);
                for (v, n) in leaves.get(&c).into_iter().flatten() {
                    if *n >= t {
                        *sum.entry(v.clone()).or_default() += n;
                    }
                }
            } else {
                for (v, n) in out[c].iter() {
                    *sum.entry(v.clone()).or_default() += n;
                }
            }
        }
        out[id] = Expected::of(&sum, threshold_of(thresholds, tree.nodes[id].level));
        if id == 0 {
            // Nothing sums the root's, and only its length is read.
            out[0] = out[0].digest();
        }
        for &c in &tree.nodes[id].children {
            waiting[c] = waiting[c].saturating_sub(1);
            if waiting[c] == 0 && tree.nodes[c].level >= 2 {
                out[c] = out[c].digest();
            }
        }
    }
    out
}

/// The threshold of `level`: its entry, else the last one given, else 1.
pub fn threshold_of(thresholds: &[u64], level: usize) -> u64 {
    thresholds
        .get(level)
        .or(thresholds.last())
        .copied()
        .unwrap_or(1)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linked_hubs_reach_every_node_and_poll_in_cycles() {
        let mut t = Tree::new(3, 2, 1);
        t.link_hubs(false);
        assert_eq!(t.links[1], [2]);
        assert_eq!(t.links[3], [1]);
        assert!(t.cyclic());
        // A hub reaches every other hub and every leaf, not the root.
        assert_eq!(t.reachable(1).len(), 2 + 9);
        assert_eq!(t.pollers(1), [0, 3]);
        t.link_hubs(true);
        assert_eq!(t.links[2], [1, 3]);
        assert_eq!(t.reachable(0).len(), 12);
        // Cross-links: hub 1 also polls node 7, the first child of hub 2.
        let mut t = Tree::new(3, 2, 1);
        t.cross_link();
        assert_eq!(t.nodes[7].parents, [2, 1]);
        assert!(t.nodes[1].children.contains(&7));
        assert!(!t.cyclic());
    }

    #[test]
    fn tree_sizes() {
        let t = Tree::new(3, 2, 1);
        assert_eq!(t.nodes.len(), 13);
        assert_eq!(t.level(2).count(), 9);
        assert!(t.is_leaf(12) && !t.is_leaf(3));
        assert_eq!(t.parent(4), Some(1));
        assert_eq!(t.nodes[1].children, [4, 5, 6]);
    }

    #[test]
    fn a_dag_gives_nodes_below_level_one_more_parents() {
        let t = Tree::new(3, 2, 2);
        assert_eq!(t.nodes.len(), 13);
        // Node 4 (first child of 1) also reports to 2; node 12 (last child of 3) to 1.
        assert_eq!(t.nodes[4].parents, [1, 2]);
        assert_eq!(t.nodes[12].parents, [3, 1]);
        assert_eq!(t.nodes[1].children, [4, 5, 6, 10, 11, 12]);
        // Level 1 keeps the root alone.
        assert_eq!(t.nodes[2].parents, [0]);
    }

    #[test]
    fn thresholds_drop_rare_values_at_each_level() {
        let t = Tree::new(2, 1, 1);
        let mut leaves = BTreeMap::new();
        leaves.insert(1, Counts::from([("x".into(), 1), ("y".into(), 3)]));
        leaves.insert(2, Counts::from([("x".into(), 1)]));
        // Leaves keep everything (threshold 1); the root needs 2: x (1 + 1) and y stay.
        let none = std::collections::BTreeSet::new();
        let h = expected_hints(&t, &leaves, &none, &[2, 1]);
        assert!(h[0].matches(&Counts::from([("x".into(), 2), ("y".into(), 3)])));
        assert!(!h[0].matches(&Counts::from([("x".into(), 2), ("y".into(), 4)])));
        // A leaf's entry is left to be made from its collection.
        assert!(h[1].is_empty());
        // Leaves need 2: x is left out at each leaf and never reaches the root.
        let h = expected_hints(&t, &leaves, &none, &[1, 2]);
        assert!(h[0].matches(&Counts::from([("y".into(), 3)])));
        // An absent leaf counts for nothing.
        let h = expected_hints(&t, &leaves, &std::collections::BTreeSet::from([1]), &[2, 1]);
        assert!(h[0].is_empty());
        // Below level 1 a hint is kept as a digest, which judges the same.
        let deep = Tree::new(2, 3, 1);
        let deep_leaves: BTreeMap<usize, Counts> = (7..15)
            .map(|l| {
                (
                    l,
                    Counts::from([("x".into(), 1), (format!("own{l}").into(), 2)]),
                )
            })
            .collect();
        let h = expected_hints(&deep, &deep_leaves, &none, &[1]);
        assert!(matches!(h[1], Expected::Whole(_)) && matches!(h[0], Expected::Digest(..)));
        assert!(matches!(h[3], Expected::Digest(3, _)));
        let below_3 = Counts::from([("own7".into(), 2), ("own8".into(), 2), ("x".into(), 2)]);
        assert!(h[3].matches(&below_3) && !h[4].matches(&below_3));
        assert!(!h[3].matches(&Counts::from([("x".into(), 2)])));
        assert!(h[0].matches(&Counts::from([
            ("own10".into(), 2),
            ("own11".into(), 2),
            ("own12".into(), 2),
            ("own13".into(), 2),
            ("own14".into(), 2),
            ("own7".into(), 2),
            ("own8".into(), 2),
            ("own9".into(), 2),
            ("x".into(), 8),
        ])));
        assert_eq!(h[1].get("x"), Some(4));
        assert!(!h[1].contains_key("z"));
        assert_eq!(h[1].get("own7"), Some(2));
    }

    #[test]
    fn draws_are_reproducible_and_skewed() {
        let spec = DataSpec {
            objects: 2000,
            vocabulary: 500,
            zipf: 1.0,
            tail: 0.3,
        };
        let draws = Draws::new(&spec);
        let a = leaf_counts(&spec, 7, 3, &draws);
        assert_eq!(a, leaf_counts(&spec, 7, 3, &draws));
        assert_ne!(a, leaf_counts(&spec, 8, 3, &draws));
        // Two leaves share the text of a shared value.
        let b = leaf_counts(&spec, 7, 4, &draws);
        let (ka, _) = a.get_key_value("a0").unwrap();
        let (kb, _) = b.get_key_value("a0").unwrap();
        assert!(std::sync::Arc::ptr_eq(ka, kb));
        assert_eq!(a.values().sum::<u64>(), 2000);
        // The most popular value is far above the median one.
        assert!(a["a0"] > 20 * a.get("a250").copied().unwrap_or(1));
    }
}
