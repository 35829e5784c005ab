//! A deterministic simulation of a cipd mesh: every node is the real daemon
//! ([`cipd::daemon::Daemon`]: its polling, `datachanged`, import, out-bound builds and
//! table), all in one process on turmoil's simulated network, stepped from one seed.
//!
//! The daemon runs unchanged but for its seam ([`cipd::sys::net`]): its CIP listeners and
//! connections go over [`net::SimNet`], and its blocking work and import thread run as
//! tasks on the simulated host ([`cipd::sys::net::set_inline`]), so nothing runs while
//! simulated time stands still and a seed replays the same run. Simulated time is network
//! latency and the daemon's own timers; CPU time is not simulated (a build takes no
//! simulated time), so convergence figures are what the protocol and the timers cost.
//!
//! [`run`] builds a tree ([`data::Tree`]), gives each leaf a generated collection
//! ([`data::leaf_counts`]: Zipf-popular values over a shared vocabulary plus a long tail of
//! the leaf's own), starts every node at once and steps until the root's table holds, for
//! each of its children, exactly what the brute-force aggregation ([`data::expected_hints`])
//! says; then times changes from a leaf to the root, applies the faults asked for, and
//! checks after each that every node's table is exact again.

pub mod data;
pub mod net;
pub mod report;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cip_proto::Dsi;
use cipd::daemon::{Daemon, StartOptions};
use cipd::model::config::{Config, read_config};
use cipd::node::Node;
use hints::hint::AttrSpec;

use data::{Counts, DataSpec, Tree};
use net::{SimNet, Traffic};

/// The CIP port every simulated node listens on.
const PORT: u16 = 7000;

/// A fault applied to a converged mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A level-1 subtree is cut off from the root for `0` while one of its leaves changes,
    /// then healed.
    Partition(Duration),
    /// A level-1 node crashes, stays down for `0` while one of its leaves changes, and
    /// restarts from its spool.
    Crash(Duration),
    /// A level-1 node's link to the root goes down and up `0` times, every 200 ms, while
    /// one of its leaves changes.
    Flap(u32),
    /// A level-1 node's link to the root gets `0` of latency each way while one of its
    /// leaves changes (then back to normal).
    Slow(Duration),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Partition(d) => write!(f, "partition {}ms", d.as_millis()),
            Self::Crash(d) => write!(f, "crash {}ms", d.as_millis()),
            Self::Flap(n) => write!(f, "flap x{n}"),
            Self::Slow(d) => write!(f, "slow {}ms", d.as_millis()),
        }
    }
}

impl std::str::FromStr for Fault {
    type Err = String;

    /// `partition:MS`, `crash:MS`, `flap:N`, `slow:MS`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kind, arg) = s
            .split_once(':')
            .ok_or_else(|| format!("fault {s:?}: expected KIND:NUMBER"))?;
        let n: u64 = arg
            .parse()
            .map_err(|_| format!("fault {s:?}: {arg:?} is not a number"))?;
        let ms = Duration::from_millis(n);
        match kind {
            "partition" => Ok(Self::Partition(ms)),
            "crash" => Ok(Self::Crash(ms)),
            "flap" => Ok(Self::Flap(
                u32::try_from(n).map_err(|_| "flap count too big")?,
            )),
            "slow" => Ok(Self::Slow(ms)),
            _ => Err(format!(
                "fault {s:?}: kind must be partition, crash, flap or slow"
            )),
        }
    }
}

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimSpec {
    /// Children per inner node.
    pub fan_in: usize,
    /// Levels below the root.
    pub depth: usize,
    /// Parents of each node below level 1 (1: a tree; more: a DAG, see [`Tree::new`]).
    pub parents: usize,
    /// Seeds the data, the network and the daemons' jitter.
    pub seed: u64,
    /// The leaves' collections.
    pub data: DataSpec,
    /// Out-bound thresholds by level (root first; the last repeats).
    pub thresholds: Vec<u64>,
    /// One-way message latency, least and most.
    pub latency: (Duration, Duration),
    /// Per step, the chance that a healthy link breaks (turmoil's random partitions; 0:
    /// never), and that a broken one heals.
    pub fail_rate: f64,
    /// See `fail_rate`.
    pub repair_rate: f64,
    /// Simulation step.
    pub tick: Duration,
    /// How often the root is checked while waiting.
    pub check_every: Duration,
    /// Longest simulated wait for a convergence.
    pub timeout: Duration,
    /// Leaf changes timed to the root.
    pub changes: usize,
    /// Faults, in order, after the changes.
    pub faults: Vec<Fault>,
    /// Every peer's poll interval.
    pub poll_interval: Duration,
    /// How often leaves look at their collection files.
    pub watch_interval: Duration,
    /// Print the simulated time and steps to standard error every few seconds of real time.
    pub progress: bool,
}

impl Default for SimSpec {
    fn default() -> Self {
        Self {
            fan_in: 4,
            depth: 2,
            parents: 1,
            seed: 1,
            // The head calibrated on Debian bookworm main's `Maintainer` field (63,440
            // package records, 2,248 distinct values, Zipf exponent 1.12 over the top 100
            // ranks and 1.19 over the top 1,000); the tail (a leaf's own values) set well
            // above that field's 1 % of singletons, as for authors or titles.
            data: DataSpec {
                objects: 200,
                vocabulary: 2250,
                zipf: 1.15,
                tail: 0.3,
            },
            thresholds: vec![1],
            latency: (Duration::from_millis(1), Duration::from_millis(5)),
            fail_rate: 0.0,
            repair_rate: 1.0,
            tick: Duration::from_millis(5),
            check_every: Duration::from_millis(20),
            timeout: Duration::from_secs(120),
            changes: 3,
            faults: Vec::new(),
            poll_interval: Duration::from_secs(60),
            watch_interval: Duration::from_millis(100),
            progress: false,
        }
    }
}

/// Figures of one level of the tree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LevelFigures {
    /// Depth (root 0).
    pub level: usize,
    /// Nodes on it.
    pub nodes: usize,
    /// Out-bound hint bytes, mean and most.
    pub hint_bytes: (f64, usize),
    /// Distinct values in a node's routing table, mean and most.
    pub table_values: (f64, usize),
    /// A routing table's approximate heap bytes, mean and most.
    pub table_bytes: (f64, usize),
    /// Values in a node's out-bound hint, mean and most.
    pub hint_values: (f64, usize),
    /// Bytes its nodes read over their out-going connections (polls), in all.
    pub poll_bytes_in: u64,
    /// Out-going connections its nodes opened, in all.
    pub connections: u64,
}

/// What happened to one fault.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultOutcome {
    /// The fault.
    pub fault: Fault,
    /// The node it hit.
    pub node: usize,
    /// Simulated time from the end of the fault until every table was exact again.
    pub recovered_after: Option<Duration>,
}

/// A run's figures. Everything but `wall` and `rss_kib` is reproduced by the same spec.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Nodes in the mesh.
    pub nodes: usize,
    /// Leaves.
    pub leaves: usize,
    /// Simulated time from the start until the root was exact (none: not within the
    /// timeout).
    pub converged_at: Option<Duration>,
    /// Whether every node's table was exact then.
    pub all_exact: bool,
    /// Per level, once converged.
    pub levels: Vec<LevelFigures>,
    /// Simulated time of each leaf change to the root.
    pub changes: Vec<Option<Duration>>,
    /// The faults.
    pub faults: Vec<FaultOutcome>,
    /// Values the root's children report, in all (brute force), and how many of them the
    /// root's table held at convergence with the right count: recall at or above the
    /// thresholds.
    pub root_expected: usize,
    /// See `root_expected`.
    pub root_matched: usize,
    /// Values the root held that brute force does not (precision's complement).
    pub root_extra: usize,
    /// Distinct values over all leaves, and how many reach the root (what the thresholds
    /// cost in recall of the unthresholded truth).
    pub truth_values: usize,
    /// See `truth_values`.
    pub truth_at_root: usize,
    /// Real time the run took.
    pub wall: Duration,
    /// The process's peak resident memory (KiB), after the run.
    pub rss_kib: u64,
}

impl Report {
    /// The figures a seed reproduces, as text (for comparing two runs).
    pub fn reproducible(&self) -> String {
        let mut r = self.clone();
        r.wall = Duration::ZERO;
        r.rss_kib = 0;
        format!("{r:?}")
    }

    /// A human-readable report.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} nodes ({} leaves); converged at {}; every table exact: {}",
            self.nodes,
            self.leaves,
            fmt_opt(self.converged_at),
            self.all_exact
        );
        let _ = writeln!(
            s,
            "root: {}/{} expected (value, child) entries with the right count, {} extra; \
             {} of {} distinct leaf values reach the root",
            self.root_matched,
            self.root_expected,
            self.root_extra,
            self.truth_at_root,
            self.truth_values
        );
        let _ = writeln!(
            s,
            "\n| level | nodes | hint bytes mean / max | hint values mean / max | table values mean / max | table bytes mean / max | poll bytes in | connections |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        for l in &self.levels {
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} / {} | {:.0} / {} | {:.0} / {} | {:.0} / {} | {} | {} |",
                l.level,
                l.nodes,
                l.hint_bytes.0,
                l.hint_bytes.1,
                l.hint_values.0,
                l.hint_values.1,
                l.table_values.0,
                l.table_values.1,
                l.table_bytes.0,
                l.table_bytes.1,
                l.poll_bytes_in,
                l.connections
            );
        }
        if !self.changes.is_empty() {
            let times: Vec<String> = self.changes.iter().map(|c| fmt_opt(*c)).collect();
            let _ = writeln!(s, "\nleaf change to root: {}", times.join(", "));
        }
        for f in &self.faults {
            let _ = writeln!(
                s,
                "fault {} at n{}: exact again {} after it ended",
                f.fault,
                f.node,
                fmt_opt(f.recovered_after)
            );
        }
        let _ = writeln!(
            s,
            "\nwall {:.1} s, peak RSS {} MiB",
            self.wall.as_secs_f64(),
            self.rss_kib / 1024
        );
        s
    }
}

fn fmt_opt(d: Option<Duration>) -> String {
    d.map_or_else(
        || "never (timeout)".to_owned(),
        |d| format!("{} ms", d.as_millis()),
    )
}

/// Why a run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A file could not be written or a configuration read.
    #[error("setup: {0}")]
    Setup(String),
    /// The simulation failed (a host's software returned an error).
    #[error("simulation: {0}")]
    Sim(String),
}

type Registry = Rc<RefCell<Vec<Option<Arc<Node>>>>>;

/// The mesh under simulation.
struct Mesh<'a> {
    sim: turmoil::Sim<'a>,
    tree: Tree,
    spec: SimSpec,
    nodes: Registry,
    traffic: Vec<Arc<Traffic>>,
    leaves: BTreeMap<usize, Counts>,
    expected: Vec<Counts>,
    dirs: Vec<PathBuf>,
    dsis: Vec<Dsi>,
    author: AttrSpec,
    steps: u64,
    last_progress: Instant,
}

fn dsi_of(id: usize) -> String {
    format!("1.3.6.1.4.1.99999.88.{id}")
}

fn name_of(id: usize) -> String {
    format!("n{id}")
}

/// Runs the simulation `spec` in a fresh temporary directory.
///
/// # Errors
/// [`SimError`] when the files cannot be set up or the simulation fails.
pub fn run(spec: &SimSpec) -> Result<Report, SimError> {
    // /dev/shm when there is one: a thousand spools fsync on every import.
    let base = Path::new("/dev/shm");
    let dir = if base.is_dir() {
        tempfile::tempdir_in(base)
    } else {
        tempfile::tempdir()
    }
    .map_err(|e| SimError::Setup(e.to_string()))?;
    run_in(spec, dir.path())
}

fn run_in(spec: &SimSpec, root: &Path) -> Result<Report, SimError> {
    let wall = Instant::now();
    cipd::sys::net::set_inline(true);
    // The daemons' jitter draws from this thread's generator: every host runs here.
    fastrand::seed(spec.seed);
    let tree = Tree::new(spec.fan_in, spec.depth, spec.parents);
    let cdf = data::zipf_cdf(spec.data.vocabulary, spec.data.zipf);
    let leaves: BTreeMap<usize, Counts> = (0..tree.nodes.len())
        .filter(|&id| tree.is_leaf(id))
        .map(|id| (id, data::leaf_counts(&spec.data, spec.seed, id, &cdf)))
        .collect();
    let expected = data::expected_hints(&tree, &leaves, &spec.thresholds);

    let sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(100 * 365 * 86_400))
        .tick_duration(spec.tick)
        .min_message_latency(spec.latency.0)
        .max_message_latency(spec.latency.1)
        .fail_rate(spec.fail_rate)
        .repair_rate(spec.repair_rate)
        .rng_seed(spec.seed)
        .build();
    let n = tree.nodes.len();
    let ips: Vec<_> = (0..n).map(|id| sim.lookup(name_of(id))).collect();
    let mut dirs = Vec::with_capacity(n);
    let mut configs = Vec::with_capacity(n);
    for id in 0..n {
        let dir = root.join(name_of(id));
        std::fs::create_dir_all(dir.join("spool")).map_err(|e| SimError::Setup(e.to_string()))?;
        if let Some(counts) = leaves.get(&id) {
            std::fs::write(dir.join("docs.soif"), data::soif(id, counts))
                .map_err(|e| SimError::Setup(e.to_string()))?;
        }
        let text = config_text(spec, &tree, id, &dir, &ips);
        let path = dir.join("cipd.toml");
        std::fs::write(&path, text).map_err(|e| SimError::Setup(e.to_string()))?;
        let config = read_config(&path).map_err(|e| SimError::Setup(format!("n{id}: {e}")))?;
        configs.push(Arc::new(config));
        dirs.push(dir);
    }
    let mut mesh = Mesh {
        sim,
        tree,
        spec: spec.clone(),
        nodes: Rc::new(RefCell::new(vec![None; n])),
        traffic: (0..n).map(|_| Arc::new(Traffic::default())).collect(),
        leaves,
        expected,
        dirs,
        dsis: (0..n)
            .map(|id| Dsi::new(&dsi_of(id)).expect("a valid dsi"))
            .collect(),
        author: AttrSpec::parse("DOCUMENT:Author").expect("a valid spec"),
        steps: 0,
        last_progress: Instant::now(),
    };
    for (id, config) in configs.into_iter().enumerate() {
        mesh.register(id, config);
    }

    let converged_at = mesh.wait(|m| m.root_exact())?;
    let all_exact = converged_at.is_some() && mesh.all_exact();
    let levels = mesh.levels();
    let (root_expected, root_matched, root_extra) = mesh.root_agreement();
    let truth: std::collections::BTreeSet<&String> =
        mesh.leaves.values().flat_map(|c| c.keys()).collect();
    let truth_values = truth.len();
    let truth_at_root = mesh.expected[0].len();

    let mut changes = Vec::new();
    for k in 0..spec.changes {
        let leaf = mesh.pick_leaf(None, k as u64);
        changes.push(mesh.change_and_wait(leaf, &format!("chg{k}"))?);
    }
    let mut faults = Vec::new();
    for (k, fault) in spec.faults.iter().enumerate() {
        faults.push(mesh.apply(*fault, k)?);
    }
    Ok(Report {
        nodes: n,
        leaves: mesh.leaves.len(),
        converged_at,
        all_exact,
        levels,
        changes,
        faults,
        root_expected,
        root_matched,
        root_extra,
        truth_values,
        truth_at_root,
        wall: wall.elapsed(),
        rss_kib: peak_rss_kib(),
    })
}

fn config_text(
    spec: &SimSpec,
    tree: &Tree,
    id: usize,
    dir: &Path,
    ips: &[std::net::IpAddr],
) -> String {
    let node = &tree.nodes[id];
    let mut t = format!(
        "data_dir = {data:?}\n[node]\ndsi = \"{dsi}\"\ndescription = \"simulated node {id}\"\nbase_uri = \"cip://n{id}.sim:7000\"\n\
         [listen]\ncip = [\"0.0.0.0:{PORT}\"]\nhttp = []\n",
        data = dir.join("spool").display().to_string(),
        dsi = dsi_of(id),
    );
    if tree.is_leaf(id) {
        let _ = write!(
            t,
            "[[collection]]\nname = \"docs\"\ntype = \"soif\"\npath = {:?}\n",
            dir.join("docs.soif").display().to_string()
        );
    }
    let _ = write!(
        t,
        "[export]\nattributes = [\"DOCUMENT:Author\"]\ndefault_threshold = {}\n\
         [limits]\nwatch_interval = \"{}ms\"\nshutdown_grace = \"1s\"\nconnect_timeout = \"2s\"\nhandshake_timeout = \"5s\"\nrequest_timeout = \"10s\"\n",
        data::threshold_of(&spec.thresholds, node.level),
        spec.watch_interval.as_millis()
    );
    let mut peer = |other: usize, role: &str| {
        let _ = write!(
            t,
            "[[peer]]\nname = \"{}\"\nhost = \"{}\"\nport = {PORT}\nrole = [\"{role}\"]\n\
             poll_interval = \"{}ms\"\ndsi = \"{}\"\n",
            name_of(other),
            ips[other],
            spec.poll_interval.as_millis(),
            dsi_of(other)
        );
    };
    for &p in &node.parents {
        peer(p, "poller");
    }
    for &c in &node.children {
        peer(c, "poll");
    }
    t
}

/// Peak resident memory of this process (KiB), from `/proc/self/status`.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

impl Mesh<'_> {
    fn register(&mut self, id: usize, config: Arc<Config>) {
        let nodes = self.nodes.clone();
        let traffic = self.traffic[id].clone();
        self.sim.host(name_of(id), move || {
            let (config, nodes, traffic) = (config.clone(), nodes.clone(), traffic.clone());
            async move {
                let options = StartOptions {
                    network: Some(Arc::new(SimNet { traffic })),
                    ..StartOptions::default()
                };
                let daemon = Daemon::start_with((*config).clone(), options)
                    .await
                    .map_err(|e| format!("n{id}: {e}"))?;
                nodes.borrow_mut()[id] = Some(daemon.node().clone());
                daemon.run_until_stopped().await;
                Ok(())
            }
        });
    }

    fn node(&self, id: usize) -> Option<Arc<Node>> {
        self.nodes.borrow()[id].clone()
    }

    /// Steps until `done` holds (checked every `check_every`), or the timeout; returns the
    /// simulated time it took.
    fn wait(&mut self, done: impl Fn(&Self) -> bool) -> Result<Option<Duration>, SimError> {
        let start = self.sim.elapsed();
        let mut next = start;
        loop {
            let now = self.sim.elapsed();
            if now >= next {
                if done(self) {
                    return Ok(Some(now - start));
                }
                next = now + self.spec.check_every;
            }
            if now - start > self.spec.timeout {
                return Ok(None);
            }
            self.step()?;
        }
    }

    fn step(&mut self) -> Result<(), SimError> {
        self.steps += 1;
        if self.spec.progress && self.last_progress.elapsed() >= Duration::from_secs(5) {
            self.last_progress = Instant::now();
            eprintln!(
                "cipd-sim: simulated {} ms, {} steps",
                self.sim.elapsed().as_millis(),
                self.steps
            );
        }
        self.sim.step().map_err(|e| SimError::Sim(e.to_string()))?;
        Ok(())
    }

    /// Steps for `d` of simulated time.
    fn run_for(&mut self, d: Duration) -> Result<(), SimError> {
        let end = self.sim.elapsed() + d;
        while self.sim.elapsed() < end {
            self.step()?;
        }
        Ok(())
    }

    /// What node `at`'s table holds from child `child`: value to count.
    fn held(&self, at: &Node, child: usize) -> Counts {
        at.table()
            .entries(
                Some(&self.author),
                Some(&self.dsis[child]),
                None,
                usize::MAX,
            )
            .into_iter()
            .map(|r| (String::from_utf8_lossy(&r.value).into_owned(), r.total))
            .collect()
    }

    /// Whether node `id`'s table holds exactly its children's expected hints.
    fn exact_at(&self, id: usize) -> bool {
        let Some(node) = self.node(id) else {
            return false;
        };
        let children = &self.tree.nodes[id].children;
        node.table().peers().len() == children.len()
            && children
                .iter()
                .all(|&c| self.held(&node, c) == self.expected[c])
    }

    fn root_exact(&self) -> bool {
        self.exact_at(0)
    }

    fn all_exact(&self) -> bool {
        (0..self.tree.nodes.len()).all(|id| self.tree.is_leaf(id) || self.exact_at(id))
    }

    /// (expected entries, matched with the right count, extra) at the root.
    fn root_agreement(&self) -> (usize, usize, usize) {
        let Some(root) = self.node(0) else {
            return (0, 0, 0);
        };
        let (mut expected, mut matched, mut extra) = (0, 0, 0);
        for &c in &self.tree.nodes[0].children {
            let held = self.held(&root, c);
            expected += self.expected[c].len();
            matched += self.expected[c]
                .iter()
                .filter(|(v, n)| held.get(*v) == Some(n))
                .count();
            extra += held
                .keys()
                .filter(|v| !self.expected[c].contains_key(*v))
                .count();
        }
        (expected, matched, extra)
    }

    fn levels(&self) -> Vec<LevelFigures> {
        (0..=self.tree.depth)
            .map(|level| {
                let ids: Vec<usize> = self.tree.level(level).collect();
                let mut f = LevelFigures {
                    level,
                    nodes: ids.len(),
                    ..LevelFigures::default()
                };
                let mut sums = [0usize; 4];
                for &id in &ids {
                    let traffic = &self.traffic[id];
                    f.poll_bytes_in += traffic.bytes_in.load(Ordering::Relaxed);
                    f.connections += traffic.connections.load(Ordering::Relaxed);
                    let Some(node) = self.node(id) else { continue };
                    let stats = node.table().stats();
                    let figures = [
                        node.outbound().current().payload.len(),
                        self.expected[id].len(),
                        stats.distinct_values,
                        stats.approx_bytes,
                    ];
                    let maxes = [
                        &mut f.hint_bytes.1,
                        &mut f.hint_values.1,
                        &mut f.table_values.1,
                        &mut f.table_bytes.1,
                    ];
                    for ((sum, max), v) in sums.iter_mut().zip(maxes).zip(figures) {
                        *sum += v;
                        *max = (*max).max(v);
                    }
                }
                let mean = |s: usize| s as f64 / ids.len().max(1) as f64;
                f.hint_bytes.0 = mean(sums[0]);
                f.hint_values.0 = mean(sums[1]);
                f.table_values.0 = mean(sums[2]);
                f.table_bytes.0 = mean(sums[3]);
                f
            })
            .collect()
    }

    /// A leaf (under level-1 node `under` when given), chosen from the seed and `k`.
    fn pick_leaf(&self, under: Option<usize>, k: u64) -> usize {
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
    fn ancestor_at(&self, mut id: usize, level: usize) -> usize {
        while self.tree.nodes[id].level > level {
            id = self.tree.parent(id).expect("below the root");
        }
        id
    }

    /// Adds to `leaf`'s collection enough objects with the new value `value` to pass every
    /// threshold, rewrites its file and updates the expected hints.
    fn change(&mut self, leaf: usize, value: &str) -> Result<(), SimError> {
        let copies = self
            .spec
            .thresholds
            .iter()
            .copied()
            .max()
            .unwrap_or(1)
            .max(1);
        let counts = self.leaves.get_mut(&leaf).expect("a leaf");
        counts.insert(value.to_owned(), copies);
        std::fs::write(self.dirs[leaf].join("docs.soif"), data::soif(leaf, counts))
            .map_err(|e| SimError::Setup(e.to_string()))?;
        self.expected = data::expected_hints(&self.tree, &self.leaves, &self.spec.thresholds);
        Ok(())
    }

    /// Changes `leaf` and waits until the root holds the new value under the right child.
    fn change_and_wait(&mut self, leaf: usize, value: &str) -> Result<Option<Duration>, SimError> {
        self.change(leaf, value)?;
        let child = self.ancestor_at(leaf, 1);
        let want = self.expected[child].get(value).copied();
        self.wait(|m| {
            m.node(0)
                .is_some_and(|root| m.held(&root, child).get(value).copied() == want)
        })
    }

    /// Applies fault number `k`, then waits until every table is exact.
    fn apply(&mut self, fault: Fault, k: usize) -> Result<FaultOutcome, SimError> {
        let target =
            self.tree.nodes[0].children[fastrand::Rng::with_seed(self.spec.seed ^ k as u64)
                .usize(..self.tree.nodes[0].children.len())];
        let (a, root) = (name_of(target), name_of(0));
        let leaf = self.pick_leaf(Some(target), 1000 + k as u64);
        let value = format!("fault{k}");
        match fault {
            Fault::Partition(d) => {
                self.sim.partition(a.as_str(), root.as_str());
                self.change(leaf, &value)?;
                self.run_for(d)?;
                self.sim.repair(a.as_str(), root.as_str());
            }
            Fault::Crash(d) => {
                self.sim.crash(a.as_str());
                self.nodes.borrow_mut()[target] = None;
                self.change(leaf, &value)?;
                self.run_for(d)?;
                self.sim.bounce(a.as_str());
            }
            Fault::Flap(times) => {
                self.change(leaf, &value)?;
                for _ in 0..times {
                    self.sim.partition(a.as_str(), root.as_str());
                    self.run_for(Duration::from_millis(200))?;
                    self.sim.repair(a.as_str(), root.as_str());
                    self.run_for(Duration::from_millis(200))?;
                }
            }
            Fault::Slow(d) => {
                self.sim.set_link_latency(a.as_str(), root.as_str(), d);
                self.change(leaf, &value)?;
                let done = self.wait(|m| m.all_exact())?;
                self.sim
                    .set_link_latency(a.as_str(), root.as_str(), self.spec.latency.1);
                return Ok(FaultOutcome {
                    fault,
                    node: target,
                    recovered_after: done,
                });
            }
        }
        let recovered_after = self.wait(|m| m.all_exact())?;
        Ok(FaultOutcome {
            fault,
            node: target,
            recovered_after,
        })
    }
}
