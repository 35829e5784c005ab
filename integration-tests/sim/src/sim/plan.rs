//! A mesh run's plan: its shape, its leaves' data, each node's configuration, the
//! brute-force answer every table must hold, and which leaves change and which nodes a fault
//! hits. The simulation ([`super::run`]) and the run of real processes in network namespaces
//! ([`crate::real`]) both work from one, so that for the same spec they build the same mesh
//! and judge it by the same yardstick.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::Path;

use std::borrow::Cow;

use super::data::{self, Counts, Expected, Tree};
use super::spec::{Hubs, LevelFigures, SimSpec};

/// DSI of node `id`.
pub fn dsi_of(id: usize) -> String {
    format!("1.3.6.1.4.1.99999.88.{id}")
}

/// Host name of node `id` (its base URI's host).
pub fn name_of(id: usize) -> String {
    format!("n{id}")
}

/// The CIP port every node's peers connect to.
pub const PORT: u16 = 7000;

/// Where a node listens and how it reaches its peers.
#[derive(Debug, Clone)]
pub struct Addressing {
    /// The node's CIP listener.
    pub listen: String,
    /// Each node's address, by id (peers connect to it on [`PORT`]).
    pub peers: Vec<IpAddr>,
    /// Lines added to the `[listen]` section (an admin socket, say).
    pub extra: String,
    /// Whether the nodes keep their collection files open (`limits.keep_collection_files_open`):
    /// not when they share a process that may not hold one file per leaf.
    pub keep_files_open: bool,
}

/// What one node reports, for [`Plan::levels`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeFigures {
    /// Its out-bound hint's bytes.
    pub hint_bytes: usize,
    /// Distinct values in its routing table.
    pub table_values: usize,
    /// Its routing table's approximate heap bytes.
    pub table_bytes: usize,
    /// Live entries in its routing table.
    pub table_entries: usize,
}

/// A mesh run's shape, data and expected answers.
#[derive(Debug, Clone)]
pub struct Plan {
    /// What to run.
    pub spec: SimSpec,
    /// The shape.
    pub tree: Tree,
    /// Each leaf's collection.
    pub leaves: BTreeMap<usize, Counts>,
    /// Each inner node's out-bound hint, by brute force, over the leaves present (a
    /// leaf's is made when asked for: [`Plan::expected`]).
    pub expected: Vec<Expected>,
    /// Nodes down for good or not yet joined (churn): neither counted nor expected in
    /// their parents' tables.
    pub absent: std::collections::BTreeSet<usize>,
}

impl Plan {
    /// The plan of `spec`: the tree and every leaf's collection, drawn from its seed.
    pub fn new(spec: &SimSpec) -> Self {
        let mut tree = Tree::new(spec.fan_in, spec.depth, spec.parents);
        match spec.hubs {
            Hubs::None => {}
            Hubs::Cross => tree.cross_link(),
            Hubs::Ring | Hubs::Full => tree.link_hubs(spec.hubs == Hubs::Full),
        }
        let draws = data::Draws::new(&spec.data);
        let leaves: BTreeMap<usize, Counts> = (0..tree.nodes.len())
            .filter(|&id| tree.is_leaf(id))
            .map(|id| (id, data::leaf_counts(&spec.data, spec.seed, id, &draws)))
            .collect();
        let absent = std::collections::BTreeSet::new();
        let expected = data::expected_hints(&tree, &leaves, &absent, &spec.thresholds);
        Self {
            spec: spec.clone(),
            tree,
            leaves,
            expected,
            absent,
        }
    }

    /// Node `id`'s expected out-bound hint: an inner node's as computed, a leaf's made
    /// from its collection (empty while it is absent).
    pub fn expected(&self, id: usize) -> Cow<'_, Expected> {
        if !self.tree.is_leaf(id) {
            return Cow::Borrowed(&self.expected[id]);
        }
        match self.leaves.get(&id) {
            Some(c) if !self.absent.contains(&id) => Cow::Owned(Expected::of(
                c,
                data::threshold_of(&self.spec.thresholds, self.tree.nodes[id].level),
            )),
            _ => Cow::Owned(Expected::default()),
        }
    }

    /// How many values node `id`'s expected hint holds ([`Plan::expected`]'s length, a
    /// leaf's counted without making its list: the waits ask it of every leaf).
    pub fn expected_len(&self, id: usize) -> usize {
        if !self.tree.is_leaf(id) {
            return self.expected[id].len();
        }
        if self.absent.contains(&id) {
            return 0;
        }
        let t = data::threshold_of(&self.spec.thresholds, self.tree.nodes[id].level);
        self.leaves
            .get(&id)
            .map_or(0, |c| c.values().filter(|n| **n >= t).count())
    }

    /// Nodes in the mesh.
    pub fn len(&self) -> usize {
        self.tree.nodes.len()
    }

    /// Whether the mesh has no node (never: it has at least its root).
    pub fn is_empty(&self) -> bool {
        self.tree.nodes.is_empty()
    }

    /// Node `id`'s configuration file, its spool and collection under `dir`.
    pub fn config_text(&self, id: usize, dir: &Path, net: &Addressing) -> String {
        let node = &self.tree.nodes[id];
        let mut t = format!(
            "data_dir = {data:?}\n[node]\ndsi = \"{dsi}\"\ndescription = \"mesh node {id}\"\nbase_uri = \"cip://n{id}.sim:{PORT}\"\n\
             [listen]\ncip = [\"{listen}\"]\nhttp = []\n{extra}",
            data = dir.join("spool").display().to_string(),
            extra = net.extra,
            listen = net.listen,
            dsi = dsi_of(id),
        );
        if self.tree.is_leaf(id) {
            let _ = write!(
                t,
                "[[collection]]\nname = \"docs\"\ntype = \"soif\"\npath = {:?}\n",
                dir.join("docs.soif").display().to_string()
            );
        }
        let _ = write!(
            t,
            "[export]\nattributes = [\"DOCUMENT:Author\"]\ndefault_threshold = {}\n\
             [outbound]\nmax_wait = \"{}ms\"\n\
             [limits]\nwatch_interval = \"{}ms\"\nshutdown_grace = \"1s\"\nconnect_timeout = \"2s\"\nhandshake_timeout = \"5s\"\nrequest_timeout = \"10s\"\nstall_timeout = \"{}ms\"\npeer_gone_after = \"{}ms\"\nmax_transient_backoff = \"{}ms\"\n",
            data::threshold_of(&self.spec.thresholds, node.level),
            self.spec.stall_timeout.as_millis() / 2,
            self.spec.watch_interval.as_millis(),
            self.spec.stall_timeout.as_millis(),
            self.spec.stall_timeout.as_millis() * 5,
            self.spec.stall_timeout.as_millis() * 2,
        );
        if !net.keep_files_open {
            t.push_str("keep_collection_files_open = false\n");
        }
        // One entry per peer, with every role it has (two hubs of a full mesh poll each
        // other).
        let mut roles: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
        for p in self.tree.pollers(id) {
            roles.entry(p).or_default().push("poller");
        }
        for c in self.tree.polls(id) {
            roles.entry(c).or_default().push("poll");
        }
        for (other, roles) in roles {
            let roles: Vec<String> = roles.iter().map(|r| format!("{r:?}")).collect();
            let _ = write!(
                t,
                "[[peer]]\nname = \"{}\"\nhost = \"{}\"\nport = {PORT}\nrole = [{}]\n\
                 poll_interval = \"{}ms\"\ndsi = \"{}\"\n",
                name_of(other),
                net.peers[other],
                roles.join(", "),
                self.spec.poll_interval.as_millis(),
                dsi_of(other)
            );
        }
        t
    }

    /// A leaf (under level-1 node `under` when given), chosen from the seed and `k`.
    pub fn pick_leaf(&self, under: Option<usize>, k: u64) -> usize {
        let leaves: Vec<usize> = self
            .leaves
            .keys()
            .copied()
            .filter(|&l| under.is_none_or(|u| self.ancestor_at(l, 1) == u))
            .collect();
        let mut rng = fastrand::Rng::with_seed(self.spec.seed.wrapping_add(k * 7919));
        leaves[rng.usize(..leaves.len())]
    }

    /// `id`'s ancestor on `level` (itself when on it).
    #[allow(
        clippy::expect_used,
        reason = "a node above level 0 is below the root, so it has a parent"
    )]
    pub fn ancestor_at(&self, mut id: usize, level: usize) -> usize {
        while self.tree.nodes[id].level > level {
            id = self.tree.parent(id).expect("below the root");
        }
        id
    }

    /// The level-1 node fault number `k` hits.
    pub fn fault_target(&self, k: usize) -> usize {
        let top = &self.tree.nodes[0].children;
        top[fastrand::Rng::with_seed(self.spec.seed ^ k as u64).usize(..top.len())]
    }

    /// Adds to `leaf`'s collection enough objects with the new value `value` to pass every
    /// threshold and updates the expected hints; returns the leaf's new collection file.
    ///
    /// # Panics
    /// When `leaf` is not a leaf of the plan (the runs pass ones `pick_leaf` chose).
    #[allow(
        clippy::expect_used,
        reason = "callers pass a leaf the plan chose; another node is a bug in the run"
    )]
    pub fn change(&mut self, leaf: usize, value: &str) -> String {
        let copies = self
            .spec
            .thresholds
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
            .max(1);
        let counts = self.leaves.get_mut(&leaf).expect("a leaf");
        counts.insert(value.into(), copies);
        let text = data::soif(leaf, counts);
        self.recount();
        text
    }

    /// Sustained change number `k` at `leaf`: one object added (with a new value), removed,
    /// or edited (its value replaced by a new one), a third each, drawn from the seed and
    /// `k`; returns the leaf's new collection file. The expected hints are brought up to date
    /// by [`Plan::recount`], once the changes are over (a recount costs the whole mesh).
    ///
    /// # Panics
    /// When `leaf` is not a leaf of the plan.
    #[allow(
        clippy::expect_used,
        reason = "callers pass a leaf the plan chose; another node is a bug in the run"
    )]
    pub fn edit(&mut self, leaf: usize, k: u64) -> String {
        let mut rng = fastrand::Rng::with_seed(self.spec.seed ^ k.wrapping_mul(0x9e37_79b9));
        let counts = self.leaves.get_mut(&leaf).expect("a leaf");
        let op = rng.u8(..3);
        if op > 0 && !counts.is_empty() {
            // Removed, or edited: one object of a value the leaf holds goes.
            let i = rng.usize(..counts.len());
            let value = counts.keys().nth(i).cloned().expect("i < len");
            let n = counts.get_mut(&value).expect("present");
            *n -= 1;
            if *n == 0 {
                counts.remove(&value);
            }
        }
        if op != 1 {
            // Added, or edited: one object of a value no leaf held.
            *counts.entry(format!("s{leaf}k{k}").into()).or_insert(0) += 1;
        }
        data::soif(leaf, counts)
    }

    /// Brings the expected hints up to date with the leaves' collections.
    pub fn recount(&mut self) {
        self.expected = data::expected_hints(
            &self.tree,
            &self.leaves,
            &self.absent,
            &self.spec.thresholds,
        );
    }

    /// Marks `id` absent (left, or not yet joined) or present, and updates the expected
    /// hints.
    pub fn set_absent(&mut self, id: usize, absent: bool) {
        if absent {
            self.absent.insert(id);
        } else {
            self.absent.remove(&id);
        }
        self.recount();
    }

    /// Whether node `id` (with `peers` datasets in its table) holds exactly its children's
    /// expected hints; `held(child)` reads what it holds from one child.
    pub fn exact_at(
        &self,
        id: usize,
        peers: usize,
        mut held: impl FnMut(usize) -> Option<Counts>,
    ) -> bool {
        let children: Vec<usize> = self.tree.nodes[id]
            .children
            .iter()
            .copied()
            .filter(|c| !self.absent.contains(c))
            .collect();
        peers == children.len()
            && children
                .iter()
                .all(|&c| held(c).is_some_and(|h| self.expected(c).matches(&h)))
    }

    /// In a mesh with cycles: whether node `id`'s table, summed over every entry
    /// (`total`: value to count), holds every leaf it reaches once, with its true count;
    /// nothing twice, nothing missing, nothing of its own.
    pub fn exact_sum_at(&self, id: usize, total: Option<Counts>) -> bool {
        total.is_some_and(|t| t == self.reachable_sum(id))
    }

    /// Brute force over the whole mesh: per value, the objects of every present leaf node
    /// `id` reaches by polling.
    pub fn reachable_sum(&self, id: usize) -> Counts {
        let mut sum = Counts::new();
        for leaf in self.tree.reachable(id) {
            if self.absent.contains(&leaf) {
                continue;
            }
            for (v, n) in self.leaves.get(&leaf).into_iter().flatten() {
                *sum.entry(v.clone()).or_default() += n;
            }
        }
        sum
    }

    /// (expected entries, matched with the right count, extra) at the root, given what it
    /// holds from each child.
    pub fn root_agreement(&self, mut held: impl FnMut(usize) -> Counts) -> (usize, usize, usize) {
        let (mut expected, mut matched, mut extra) = (0, 0, 0);
        for &c in &self.tree.nodes[0].children {
            let held = held(c);
            let want = self.expected(c);
            expected += want.len();
            matched += want.iter().filter(|(v, n)| held.get(*v) == Some(n)).count();
            extra += held.keys().filter(|v| !want.contains_key(v)).count();
        }
        (expected, matched, extra)
    }

    /// Distinct values over all leaves, and how many reach the root.
    pub fn truth(&self) -> (usize, usize) {
        let truth: std::collections::BTreeSet<&super::data::Value> =
            self.leaves.values().flat_map(|c| c.keys()).collect();
        (truth.len(), self.expected(0).len())
    }

    /// Figures per level from each node's (`figures`, none while it is down) and its
    /// out-going traffic (`traffic`: bytes read, connections opened).
    pub fn levels(
        &self,
        mut figures: impl FnMut(usize) -> Option<NodeFigures>,
        mut traffic: impl FnMut(usize) -> (u64, u64),
    ) -> Vec<LevelFigures> {
        (0..=self.tree.depth)
            .map(|level| {
                let ids: Vec<usize> = self.tree.level(level).collect();
                let mut f = LevelFigures {
                    level,
                    nodes: ids.len(),
                    ..LevelFigures::default()
                };
                let mut sums = [0usize; 5];
                for &id in &ids {
                    let (bytes_in, connections) = traffic(id);
                    f.poll_bytes_in += bytes_in;
                    f.connections += connections;
                    let Some(node) = figures(id) else { continue };
                    let values = [
                        node.hint_bytes,
                        self.expected_len(id),
                        node.table_values,
                        node.table_bytes,
                        node.table_entries,
                    ];
                    let maxes = [
                        &mut f.hint_bytes.1,
                        &mut f.hint_values.1,
                        &mut f.table_values.1,
                        &mut f.table_bytes.1,
                        &mut f.table_entries.1,
                    ];
                    for ((sum, max), v) in sums.iter_mut().zip(maxes).zip(values) {
                        *sum += v;
                        *max = (*max).max(v);
                    }
                }
                let mean = |s: usize| s as f64 / ids.len().max(1) as f64;
                f.hint_bytes.0 = mean(sums[0]);
                f.hint_values.0 = mean(sums[1]);
                f.table_values.0 = mean(sums[2]);
                f.table_bytes.0 = mean(sums[3]);
                f.table_entries.0 = mean(sums[4]);
                f
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_lengths_are_the_lists_lengths() {
        let spec = SimSpec {
            fan_in: 3,
            depth: 2,
            thresholds: vec![1, 2],
            ..SimSpec::default()
        };
        let mut plan = Plan::new(&spec);
        for id in 0..plan.len() {
            assert_eq!(plan.expected_len(id), plan.expected(id).len(), "node {id}");
        }
        let leaf = *plan.leaves.keys().next().unwrap();
        assert!(plan.expected_len(leaf) > 0);
        plan.set_absent(leaf, true);
        assert_eq!(plan.expected_len(leaf), 0);
    }
}
