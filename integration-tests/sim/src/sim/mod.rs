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
pub mod plan;
pub mod report;
pub mod spec;

use std::cell::RefCell;
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

use data::Counts;
use net::{SimNet, Traffic};
use plan::{Addressing, NodeFigures, PORT, Plan, dsi_of, name_of};
pub use spec::{
    Churn, ChurnOutcome, Fault, Hubs, LevelFigures, SimSpec, Sustained, SustainedOutcome,
};

/// How long a mesh must open no connection to count as settled after its cold start,
/// before its figures are taken and its changes timed.
pub const SETTLE: Duration = Duration::from_millis(500);

/// What happened to one fault.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultOutcome {
    /// The fault.
    pub fault: Fault,
    /// The node it hit.
    pub node: usize,
    /// Simulated time from the end of the fault until every table was exact again.
    pub recovered_after: Option<Duration>,
    /// For a blackhole: time from its start until the exchange caught in it had failed
    /// (none for other faults, or when no exchange was caught).
    pub detected_after: Option<Duration>,
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
    /// Per level, once converged and settled.
    pub levels: Vec<LevelFigures>,
    /// Simulated time of each leaf change to the root.
    pub changes: Vec<Option<Duration>>,
    /// Per level, poll bytes read and connections opened while the changes went up (the
    /// steady state's traffic, apart from the cold start's).
    pub change_traffic: Vec<(u64, u64)>,
    /// The sustained changes, when asked for.
    pub sustained: Option<SustainedOutcome>,
    /// The faults.
    pub faults: Vec<FaultOutcome>,
    /// Connections opened in a window once the last change had settled, and the window
    /// (none: not watched).
    pub quiet: Option<(Duration, u64)>,
    /// The churn, when asked for (simulation only).
    pub churn: Option<ChurnOutcome>,
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
    /// CPU time the nodes used, and the harness's own (simulating the network, checking
    /// tables, writing files): `(nodes, harness)`.
    pub cpu: (Duration, Duration),
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
        r.cpu = (Duration::ZERO, Duration::ZERO);
        if let Some(s) = &mut r.sustained {
            s.root_cpu = Duration::ZERO;
            s.level_cpu.clear();
        }
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
            "\n| level | nodes | hint bytes mean / max | hint values mean / max | table entries mean / max | table values mean / max | table bytes mean / max | poll bytes in | connections |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
        for l in &self.levels {
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} / {} | {:.0} / {} | {:.0} / {} | {:.0} / {} | {:.0} / {} | {} | {} |",
                l.level,
                l.nodes,
                l.hint_bytes.0,
                l.hint_bytes.1,
                l.hint_values.0,
                l.hint_values.1,
                l.table_entries.0,
                l.table_entries.1,
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
            let traffic: Vec<String> = self
                .change_traffic
                .iter()
                .enumerate()
                .map(|(l, (b, c))| format!("level {l} {b} bytes in {c} connections"))
                .collect();
            let _ = writeln!(s, "polls while they went up: {}", traffic.join(", "));
        }
        if let Some(o) = &self.sustained {
            let secs = o.period.as_secs_f64();
            let _ = writeln!(
                s,
                "\nsustained: {} changes in {:.0} s ({:.1} a second); every table exact {} after the last",
                o.changes,
                secs,
                o.changes as f64 / secs,
                fmt_opt(o.exact_after)
            );
            let per: Vec<String> = o
                .traffic
                .iter()
                .enumerate()
                .map(|(l, (b, c))| {
                    let n = o.changes.max(1) as f64;
                    format!(
                        "level {l} {:.0} bytes in and {:.2} connections",
                        *b as f64 / n,
                        *c as f64 / n
                    )
                })
                .collect();
            let _ = writeln!(s, "per change: {}", per.join(", "));
            let _ = writeln!(
                s,
                "root CPU: {:.2} ms a change ({} ms in all)",
                o.root_cpu.as_secs_f64() * 1000.0 / o.changes.max(1) as f64,
                o.root_cpu.as_millis()
            );
            let per: Vec<String> = o
                .level_cpu
                .iter()
                .enumerate()
                .map(|(l, cpu)| {
                    format!(
                        "level {l} {:.2} ms",
                        cpu.as_secs_f64() * 1000.0 / o.changes.max(1) as f64
                    )
                })
                .collect();
            let _ = writeln!(
                s,
                "CPU a change, each level's nodes together: {}",
                per.join(", ")
            );
            if let Some((root, _)) = o.traffic.first() {
                let _ = writeln!(
                    s,
                    "root intake: {:.0} bytes a second ({:.0} bytes a change; bound 1 KiB a change: {})",
                    *root as f64 / secs,
                    *root as f64 / o.changes.max(1) as f64,
                    if *root <= o.changes as u64 * 1024 {
                        "within"
                    } else {
                        "over"
                    }
                );
            }
        }
        for f in &self.faults {
            let found = f
                .detected_after
                .map(|d| format!(" (the exchange in it failed {} ms in)", d.as_millis()))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "fault {} at n{}: exact again {} after it ended{found}",
                f.fault,
                f.node,
                fmt_opt(f.recovered_after)
            );
        }
        if let Some((window, opened)) = self.quiet {
            let _ = writeln!(
                s,
                "quiet: {opened} connections opened in the {} s after the last change settled",
                window.as_secs()
            );
        }
        if let Some(c) = &self.churn {
            let _ = writeln!(
                s,
                "churn: {} restarts, {} leaves left, {} joined; every table exact for the nodes alive {} after the last",
                c.restarts,
                c.left,
                c.joined,
                fmt_opt(c.exact_after)
            );
        }
        let _ = writeln!(
            s,
            "\nwall {:.1} s (CPU: the nodes {:.1} s, the harness {:.1} s), peak RSS {} MiB",
            self.wall.as_secs_f64(),
            self.cpu.0.as_secs_f64(),
            self.cpu.1.as_secs_f64(),
            self.rss_kib / 1024
        );
        s
    }
}

/// A simulated or measured time, or "never (timeout)".
pub(crate) fn fmt_opt(d: Option<Duration>) -> String {
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
    plan: Plan,
    spec: SimSpec,
    nodes: Registry,
    traffic: Vec<Arc<Traffic>>,
    dirs: Vec<PathBuf>,
    dsis: Vec<Dsi>,
    author: AttrSpec,
    steps: u64,
    last_progress: Instant,
    /// What the run is doing, for progress lines.
    phase: String,
    /// When the run began (real time).
    started: Instant,
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
    let started = Started::now();
    let wall = started.wall;
    cipd::sys::net::set_inline(true);
    // The daemons' jitter draws from this thread's generator: every host runs here.
    fastrand::seed(spec.seed);
    let plan = Plan::new(spec);
    // A run this big takes minutes: it says how far it is.
    let spec = &SimSpec {
        progress: spec.progress || plan.len() >= PROGRESS_FROM_NODES,
        ..spec.clone()
    };

    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(100 * 365 * 86_400))
        .tick_duration(spec.tick)
        .min_message_latency(spec.latency.0)
        .max_message_latency(spec.latency.1)
        .fail_rate(spec.fail_rate)
        .repair_rate(spec.repair_rate)
        .rng_seed(spec.seed)
        .build();
    // Each node's CPU: every host runs on this thread.
    sim.set_busy_clock(thread_cpu);
    let n = plan.len();
    let net = Addressing {
        listen: format!("0.0.0.0:{PORT}"),
        peers: (0..n).map(|id| sim.lookup(name_of(id))).collect(),
        extra: String::new(),
        keep_files_open: open_files_for(plan.leaves.len()),
    };
    if spec.progress && !net.keep_files_open {
        eprintln!(
            "cipd-sim: [setup] {} leaves are more than this process may hold files open: \
             the nodes open their collection files for each read",
            plan.leaves.len()
        );
    }
    let mut dirs = Vec::with_capacity(n);
    for id in 0..n {
        let dir = root.join(name_of(id));
        std::fs::create_dir_all(dir.join("spool")).map_err(|e| SimError::Setup(e.to_string()))?;
        if let Some(counts) = plan.leaves.get(&id) {
            std::fs::write(dir.join("docs.soif"), data::soif(id, counts))
                .map_err(|e| SimError::Setup(e.to_string()))?;
        }
        std::fs::write(dir.join("cipd.toml"), plan.config_text(id, &dir, &net))
            .map_err(|e| SimError::Setup(e.to_string()))?;
        dirs.push(dir);
        if spec.progress && (id + 1) % 10_000 == 0 {
            eprintln!(
                "cipd-sim: [setup] {} of {n} nodes' files written, wall {:.0} s",
                id + 1,
                wall.elapsed().as_secs_f64()
            );
        }
    }
    let mut mesh = Mesh {
        sim,
        plan,
        spec: spec.clone(),
        nodes: Rc::new(RefCell::new(vec![None; n])),
        traffic: (0..n).map(|_| Arc::new(Traffic::default())).collect(),
        dirs,
        dsis: (0..n)
            .map(|id| {
                Dsi::new(&dsi_of(id)).map_err(|e| SimError::Setup(format!("n{id}'s DSI: {e}")))
            })
            .collect::<Result<_, _>>()?,
        author: AttrSpec::parse("DOCUMENT:Author")
            .map_err(|e| SimError::Setup(format!("DOCUMENT:Author: {e}")))?,
        steps: 0,
        last_progress: Instant::now(),
        phase: "setup".to_owned(),
        started: wall,
    };
    for id in 0..n {
        let path = mesh.dirs[id].join("cipd.toml");
        let config = read_config(&path).map_err(|e| SimError::Setup(format!("n{id}: {e}")))?;
        mesh.register(id, config);
        if spec.progress && (id + 1) % 10_000 == 0 {
            eprintln!(
                "cipd-sim: [setup] {} of {n} nodes started, wall {:.0} s, RSS {}",
                id + 1,
                wall.elapsed().as_secs_f64(),
                fmt_mib(rss_now_kib())
            );
        }
    }
    let joiners = match &spec.churn {
        Some(c) => mesh.hold_back_joiners(c),
        None => Vec::new(),
    };
    let mut report = measure(&mut mesh, started)?;
    if let Some(c) = &spec.churn {
        report.churn = Some(mesh.churn(c, &joiners)?);
        report.wall = wall.elapsed();
    }
    Ok(report)
}

/// A mesh under measurement, simulated ([`run`]) or real ([`crate::real::run`]); [`measure`]
/// takes both through the same protocol.
pub trait MeshUnderTest {
    /// Why a step could not be carried out.
    type Error;
    /// The plan it runs.
    fn plan(&self) -> &Plan;
    /// Waits from the start until the root's table is exact; the time that took (none: not
    /// within the timeout).
    fn converge(&mut self) -> Result<Option<Duration>, Self::Error>;
    /// Whether every node's table is exact.
    fn all_exact(&mut self) -> bool;
    /// Waits until no node has opened a connection for [`SETTLE`] (or a minute).
    fn settle(&mut self) -> Result<(), Self::Error>;
    /// The figures per level.
    fn levels(&mut self) -> Result<Vec<LevelFigures>, Self::Error>;
    /// What the root's table holds from child `child`.
    fn root_held(&mut self, child: usize) -> Counts;
    /// Adds the new value `value` to `leaf`'s collection ([`Plan::change`]) and times it to
    /// the root.
    fn change_and_wait(
        &mut self,
        leaf: usize,
        value: &str,
    ) -> Result<Option<Duration>, Self::Error>;
    /// Applies fault number `k` to the node [`Plan::fault_target`] names, then waits until
    /// every table is exact.
    fn apply(&mut self, fault: Fault, k: usize) -> Result<FaultOutcome, Self::Error>;
    /// Peak resident memory (KiB).
    fn rss_kib(&mut self) -> u64;
    /// Lets `d` pass, doing nothing.
    fn idle(&mut self, d: Duration) -> Result<(), Self::Error>;
    /// Makes sustained change number `k` at `leaf` ([`Plan::edit`]), without waiting.
    fn edit(&mut self, leaf: usize, k: u64) -> Result<(), Self::Error>;
    /// Brings the expected hints up to date ([`Plan::recount`]), then waits until every
    /// table is exact; the time that took (none: not within the timeout).
    fn wait_exact(&mut self) -> Result<Option<Duration>, Self::Error>;
    /// CPU time each level's nodes have used so far, summed per level (level 0 the root).
    fn level_cpu(&mut self) -> Vec<Duration>;
    /// Whether the nodes run in this process, so that their CPU time is part of its own.
    fn in_process(&self) -> bool;
    /// Names what the run does next, for progress lines (nothing by default).
    fn phase(&mut self, _phase: &str) {}
}

/// How often sustained changes are made: the changes due in each slice go out at its start.
const SUSTAINED_SLICE: Duration = Duration::from_millis(100);

/// Runs the sustained changes: spread evenly over the period, at leaves drawn from the
/// seed; then waits until every table is exact.
fn sustain<M: MeshUnderTest>(mesh: &mut M, s: &Sustained) -> Result<SustainedOutcome, M::Error> {
    let before = mesh.levels()?;
    let cpu_before = mesh.level_cpu();
    let leaves = mesh.plan().leaves.len() as f64;
    let per_slice = leaves * s.per_leaf_minute / 60.0 * SUSTAINED_SLICE.as_secs_f64();
    let (mut owed, mut k, mut elapsed) = (0.0, 0u64, Duration::ZERO);
    while elapsed < s.period {
        owed += per_slice;
        while owed >= 1.0 {
            owed -= 1.0;
            let leaf = mesh.plan().pick_leaf(None, 1_000_003 + k);
            mesh.edit(leaf, k)?;
            k += 1;
        }
        mesh.idle(SUSTAINED_SLICE)?;
        elapsed += SUSTAINED_SLICE;
    }
    let exact_after = mesh.wait_exact()?;
    let level_cpu: Vec<Duration> = mesh
        .level_cpu()
        .iter()
        .zip(cpu_before.iter().chain(std::iter::repeat(&Duration::ZERO)))
        .map(|(now, before)| now.saturating_sub(*before))
        .collect();
    Ok(SustainedOutcome {
        changes: usize::try_from(k).unwrap_or(usize::MAX),
        period: s.period,
        root_cpu: level_cpu.first().copied().unwrap_or_default(),
        level_cpu,
        traffic: traffic_between(&before, &mesh.levels()?),
        exact_after,
    })
}

/// Measures a started mesh: convergence from cold, exactness, figures per level once
/// settled, the root's agreement with brute force, the plan's changes and faults.
///
/// # Errors
/// The mesh's, when a step cannot be carried out.
pub fn measure<M: MeshUnderTest>(mesh: &mut M, started: Started) -> Result<Report, M::Error> {
    mesh.phase("converging");
    let converged_at = mesh.converge()?;
    mesh.phase("checking every table");
    let all_exact = converged_at.is_some() && mesh.all_exact();
    mesh.phase("settling");
    mesh.settle()?;
    mesh.phase("figures");
    let levels = mesh.levels()?;
    let mut held: std::collections::BTreeMap<usize, Counts> = mesh.plan().tree.nodes[0]
        .children
        .clone()
        .into_iter()
        .map(|c| (c, mesh.root_held(c)))
        .collect();
    let (root_expected, root_matched, root_extra) = mesh
        .plan()
        .root_agreement(|c| held.remove(&c).unwrap_or_default());
    let (truth_values, truth_at_root) = mesh.plan().truth();
    let spec = mesh.plan().spec.clone();

    mesh.phase("changes");
    let mut changes = Vec::new();
    for k in 0..spec.changes {
        let leaf = mesh.plan().pick_leaf(None, k as u64);
        changes.push(mesh.change_and_wait(leaf, &format!("chg{k}"))?);
    }
    let change_traffic = traffic_between(&levels, &mesh.levels()?);
    let sustained = match &spec.sustained {
        Some(s) => {
            mesh.phase("sustained changes");
            Some(sustain(mesh, s)?)
        }
        None => None,
    };
    let mut faults = Vec::new();
    for (k, fault) in spec.faults.iter().enumerate() {
        mesh.phase(&format!(
            "fault {} of {} ({fault})",
            k + 1,
            spec.faults.len()
        ));
        faults.push(mesh.apply(*fault, k)?);
    }
    // Quiet: once the last change has settled, every exchange in the window is one beyond
    // the peers' regular polls (none, with a poll interval longer than the window).
    let quiet = if spec.quiet_window.is_zero() {
        None
    } else {
        mesh.phase("quiet");
        mesh.settle()?;
        let before = mesh.levels()?;
        mesh.idle(spec.quiet_window)?;
        let after = mesh.levels()?;
        let opened: u64 = traffic_between(&before, &after).iter().map(|t| t.1).sum();
        Some((spec.quiet_window, opened))
    };
    Ok(Report {
        nodes: mesh.plan().len(),
        leaves: mesh.plan().leaves.len(),
        converged_at,
        all_exact,
        levels,
        changes,
        change_traffic,
        sustained,
        faults,
        quiet,
        churn: None,
        root_expected,
        root_matched,
        root_extra,
        truth_values,
        truth_at_root,
        cpu: cpu_split(mesh, started),
        wall: started.wall.elapsed(),
        rss_kib: mesh.rss_kib(),
    })
}

/// The nodes' CPU time and the harness's own (this process's, the nodes' left out when they
/// run in it).
fn cpu_split<M: MeshUnderTest>(mesh: &mut M, started: Started) -> (Duration, Duration) {
    let nodes: Duration = mesh.level_cpu().iter().sum();
    let own = process_cpu().saturating_sub(started.cpu);
    let harness = if mesh.in_process() {
        own.saturating_sub(nodes)
    } else {
        own
    };
    (nodes, harness)
}

/// Per level, the poll bytes read and connections opened between two measurements.
pub fn traffic_between(before: &[LevelFigures], after: &[LevelFigures]) -> Vec<(u64, u64)> {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| {
            (
                a.poll_bytes_in.saturating_sub(b.poll_bytes_in),
                a.connections.saturating_sub(b.connections),
            )
        })
        .collect()
}

/// Whether this process may hold every leaf's collection file open (each leaf keeps one
/// open by default: objects are read from it by offset), raising its soft limit, and its
/// hard one where allowed (as root), to what that needs. When it may not, the nodes are
/// configured to open their collection files for each read
/// (`limits.keep_collection_files_open`): past the limit a node could not open its
/// collection and would serve an empty one.
fn open_files_for(leaves: usize) -> bool {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    // Connections are simulated (no descriptor); spools and logs take a few at a time.
    let need = leaves as u64 + 4096;
    let now = getrlimit(Resource::Nofile);
    let (soft, hard) = (
        now.current.unwrap_or(u64::MAX),
        now.maximum.unwrap_or(u64::MAX),
    );
    let raised = |hard: u64| Rlimit {
        current: Some(need),
        maximum: Some(hard),
    };
    soft >= need
        || setrlimit(Resource::Nofile, raised(hard.max(need))).is_ok()
        || (hard >= need && setrlimit(Resource::Nofile, raised(hard)).is_ok())
}

/// Meshes of this many nodes or more print progress whether asked or not.
const PROGRESS_FROM_NODES: usize = 10_000;

/// How often a run with progress on prints a line, in real time.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Resident memory of this process now (KiB), from `/proc/self/status`.
pub fn rss_now_kib() -> u64 {
    status_kib("self", "VmRSS:")
}

/// KiB as MiB, or GiB from 10 GiB up.
fn fmt_mib(kib: u64) -> String {
    if kib >= 10 << 20 {
        format!("{:.1} GiB", kib as f64 / f64::from(1 << 20))
    } else {
        format!("{} MiB", kib / 1024)
    }
}

/// Peak resident memory of this process (KiB), from `/proc/self/status`.
pub fn peak_rss_kib() -> u64 {
    peak_rss_kib_of("self")
}

/// Peak resident memory of process `pid` (a number, or `self`), in KiB; 0 when unknown.
pub fn peak_rss_kib_of(pid: &str) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// A KiB figure of `/proc/<pid>/status` (its line starting `field`); 0 when unknown.
fn status_kib(pid: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// When a run began: real time, and the CPU time this process had used.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    /// Real time.
    pub wall: Instant,
    /// This process's CPU time then.
    pub cpu: Duration,
}

impl Started {
    /// Now.
    pub fn now() -> Self {
        Self {
            wall: Instant::now(),
            cpu: process_cpu(),
        }
    }
}

/// CPU time this process has used, all its threads.
fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// CPU time process `pid` has used (user and system), from `/proc/<pid>/stat`; zero when
/// unknown.
pub fn cpu_of(pid: &str) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // The fields after the command (which may hold spaces) in parentheses: utime and stime
    // are the 12th and 13th of them, in clock ticks (100 a second on Linux).
    let ticks: u64 = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|v| v.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

impl Mesh<'_> {
    /// Registers node `id`: it starts with `config`, and when it restarts (a crash, a join)
    /// it reads its configuration file again, as a daemon does, so that no copy is held
    /// for every node through the run.
    fn register(&mut self, id: usize, config: Config) {
        let nodes = self.nodes.clone();
        let traffic = self.traffic[id].clone();
        let path = self.dirs[id].join("cipd.toml");
        let first = RefCell::new(Some(config));
        self.sim.host(name_of(id), move || {
            let (nodes, traffic) = (nodes.clone(), traffic.clone());
            let config = first
                .borrow_mut()
                .take()
                .map_or_else(|| read_config(&path).map_err(|e| format!("n{id}: {e}")), Ok);
            async move {
                let options = StartOptions {
                    network: Some(Arc::new(SimNet { traffic })),
                    ..StartOptions::default()
                };
                // Boxed: the host's future lives as long as the node, and the start's state
                // (several KB) would be held in it all that time.
                let daemon = Box::pin(Daemon::start_with(config?, options))
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
        if self.spec.progress && self.last_progress.elapsed() >= PROGRESS_EVERY {
            self.progress();
        }
        self.sim.step().map_err(|e| SimError::Sim(e.to_string()))?;
        Ok(())
    }

    /// Prints a progress line: the phase, real and simulated time, memory now.
    fn progress(&mut self) {
        self.last_progress = Instant::now();
        // While converging, how far each level is (the tree's levels; with cycles the
        // tables are judged otherwise).
        let levels = if self.phase == "converging" && !self.plan.tree.cyclic() {
            let per: Vec<String> = self
                .agreeing_per_level()
                .iter()
                .enumerate()
                .map(|(l, (a, n))| format!("L{l} {a}/{n}"))
                .collect();
            format!("; inner nodes whose entry counts agree: {}", per.join(", "))
        } else {
            String::new()
        };
        eprintln!(
            "cipd-sim: [{}] wall {:.0} s, simulated {} ms ({} steps), RSS {}{levels}",
            self.phase,
            self.started.elapsed().as_secs_f64(),
            self.sim.elapsed().as_millis(),
            self.steps,
            fmt_mib(rss_now_kib())
        );
    }

    /// Steps until no node has opened a connection for [`SETTLE`] (the cold start's last
    /// notices and polls), or for at most a minute.
    fn settle_down(&mut self) -> Result<(), SimError> {
        let total = |m: &Self| -> u64 {
            m.traffic
                .iter()
                .map(|t| t.connections.load(Ordering::Relaxed))
                .sum()
        };
        for _ in 0..(60_000 / SETTLE.as_millis()) {
            let before = total(self);
            self.run_for(SETTLE)?;
            if total(self) == before {
                break;
            }
        }
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
            .map(|r| (String::from_utf8_lossy(&r.value).into(), r.total))
            .collect()
    }

    /// Whether node `id`'s table holds exactly its children's expected hints (with links
    /// among the hubs: every leaf it reaches, once, summed over its entries).
    fn exact_at(&self, id: usize) -> bool {
        let Some(node) = self.node(id) else {
            return false;
        };
        if self.plan.tree.cyclic() {
            let total: Counts = node
                .table()
                .entries(Some(&self.author), None, None, usize::MAX)
                .into_iter()
                .map(|r| (String::from_utf8_lossy(&r.value).into(), r.total))
                .collect();
            return self.plan.exact_sum_at(id, Some(total));
        }
        // Each child's entry count first: cheap, where reading a table whole is not (a
        // level-1 node of the depth-5 mesh holds 600,000 entries, and a wait checks every
        // 20 simulated ms).
        let peers = node.table().peers();
        self.counts_agree(&peers, id)
            && self
                .plan
                .exact_at(id, peers.len(), |c| Some(self.held(&node, c)))
    }

    /// Whether node `id`'s table holds, for each child present, as many entries as the
    /// child's expected hint has values (one attribute is exported, so an entry is a value).
    fn counts_agree(&self, peers: &[hints::table::PeerSummary], id: usize) -> bool {
        self.plan.tree.nodes[id]
            .children
            .iter()
            .filter(|c| !self.plan.absent.contains(c))
            .all(|&c| {
                peers
                    .iter()
                    .find(|p| p.dsi == self.dsis[c])
                    .is_some_and(|p| p.entries == self.plan.expected_len(c))
            })
    }

    /// Per level with inner nodes, root first: how many of its nodes hold as many entries
    /// per child as expected, of how many (a long run's progress: a level that lags shows).
    fn agreeing_per_level(&self) -> Vec<(usize, usize)> {
        let tree = &self.plan.tree;
        (0..tree.depth)
            .map(|level| {
                let ids: Vec<usize> = tree.level(level).collect();
                let agree = ids
                    .iter()
                    .filter(|&&id| {
                        self.node(id)
                            .is_some_and(|node| self.counts_agree(&node.table().peers(), id))
                    })
                    .count();
                (agree, ids.len())
            })
            .collect()
    }

    /// The root exact; in a mesh with cycles, every table (each hub must settle).
    fn root_exact(&self) -> bool {
        if self.plan.tree.cyclic() {
            return self.tables_exact();
        }
        self.exact_at(0)
    }

    fn tables_exact(&self) -> bool {
        (0..self.plan.len())
            .all(|id| self.plan.tree.polls(id).next().is_none() || self.exact_at(id))
    }

    fn figures(&self) -> Vec<LevelFigures> {
        self.plan.levels(
            |id| {
                let node = self.node(id)?;
                let stats = node.table().stats();
                Some(NodeFigures {
                    hint_bytes: node.outbound().current().payload.len(),
                    table_values: stats.distinct_values,
                    table_bytes: stats.approx_bytes,
                    table_entries: stats.entries,
                })
            },
            |id| {
                let t = &self.traffic[id];
                (
                    t.bytes_in.load(Ordering::Relaxed),
                    t.connections.load(Ordering::Relaxed),
                )
            },
        )
    }

    /// Adds a new value to `leaf`'s collection (see [`Plan::change`]) and rewrites its file.
    fn change(&mut self, leaf: usize, value: &str) -> Result<(), SimError> {
        let text = self.plan.change(leaf, value);
        std::fs::write(self.dirs[leaf].join("docs.soif"), text)
            .map_err(|e| SimError::Setup(e.to_string()))
    }

    /// Changes `leaf` and waits until the root holds the new value under the right child.
    fn change_then_wait(&mut self, leaf: usize, value: &str) -> Result<Option<Duration>, SimError> {
        self.change(leaf, value)?;
        if self.plan.tree.cyclic() {
            // Every hub must have it, exactly.
            return self.wait(|m| m.tables_exact());
        }
        let child = self.plan.ancestor_at(leaf, 1);
        let want = self.plan.expected(child).get(value);
        self.wait(|m| {
            m.node(0)
                .is_some_and(|root| m.held(&root, child).get(value).copied() == want)
        })
    }

    /// Applies fault number `k`, then waits until every table is exact.
    fn apply_fault(&mut self, fault: Fault, k: usize) -> Result<FaultOutcome, SimError> {
        let target = self.plan.fault_target(k);
        let (a, root) = (name_of(target), name_of(0));
        let leaf = self.plan.pick_leaf(Some(target), 1000 + k as u64);
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
                let done = self.wait(|m| m.tables_exact())?;
                self.sim
                    .set_link_latency(a.as_str(), root.as_str(), self.spec.latency.1);
                return Ok(FaultOutcome {
                    fault,
                    node: target,
                    recovered_after: done,
                    detected_after: None,
                });
            }
            Fault::Blackhole(d) => {
                self.change(leaf, &value)?;
                let detected_after = self.blackhole(target, d)?;
                let recovered_after = self.wait(|m| m.tables_exact())?;
                return Ok(FaultOutcome {
                    fault,
                    node: target,
                    recovered_after,
                    detected_after,
                });
            }
        }
        let recovered_after = self.wait(|m| m.tables_exact())?;
        Ok(FaultOutcome {
            fault,
            node: target,
            recovered_after,
            detected_after: None,
        })
    }
}

impl Mesh<'_> {
    /// The root's state of its peer `target`, while the root is up.
    fn root_peer(&self, target: usize) -> Option<cipd::model::status::PeerState> {
        let name = name_of(target);
        self.node(0)?
            .peer_states()
            .into_iter()
            .find(|p| p.name == name)
    }

    /// Steps (each tick) until the root's poll of `target` is under way, then blackholes their link for
    /// `d` and heals it; returns how long the caught exchange took to fail (none when no
    /// exchange was caught, or it had not failed when the link came back).
    fn blackhole(&mut self, target: usize, d: Duration) -> Result<Option<Duration>, SimError> {
        let (a, root) = (name_of(target), name_of(0));
        let start = self.sim.elapsed();
        // Past connecting: the simulated network refuses a connection whose SYN it drops at
        // once, where a real blackhole leaves it to the connect timeout.
        let polling = |m: &Self| {
            m.root_peer(target)
                .and_then(|p| p.exchange)
                .is_some_and(|e| e.phase != "connecting")
        };
        while !polling(self) && self.sim.elapsed() - start < self.spec.timeout {
            self.step()?;
        }
        let caught = polling(self);
        let failures = self.root_peer(target).map_or(0, |p| p.failures);
        self.sim.partition(a.as_str(), root.as_str());
        let from = self.sim.elapsed();
        let mut detected = None;
        while self.sim.elapsed() - from < d {
            self.step()?;
            if caught
                && detected.is_none()
                && self
                    .root_peer(target)
                    .is_some_and(|p| p.failures > failures)
            {
                detected = Some(self.sim.elapsed() - from);
            }
        }
        self.sim.repair(a.as_str(), root.as_str());
        Ok(detected)
    }

    /// Before the start: takes the leaves that will join during `churn` down, absent from
    /// every expected table until they join.
    fn hold_back_joiners(&mut self, churn: &Churn) -> Vec<usize> {
        let leaves: Vec<usize> = self.plan.leaves.keys().copied().collect();
        let n = per_period(churn.joins, leaves.len(), churn.period);
        let mut rng = fastrand::Rng::with_seed(self.spec.seed ^ 0x6a6f_696e);
        let mut joiners = Vec::new();
        while joiners.len() < n.min(leaves.len() / 2) {
            let l = leaves[rng.usize(..leaves.len())];
            if !joiners.contains(&l) {
                joiners.push(l);
            }
        }
        for &l in &joiners {
            self.sim.crash(name_of(l));
            self.plan.set_absent(l, true);
        }
        joiners
    }

    /// Runs `churn`: restarts, departures and the `joiners`' arrivals at moments drawn
    /// from the seed, then waits until every table is exact for the nodes alive.
    fn churn(&mut self, churn: &Churn, joiners: &[usize]) -> Result<ChurnOutcome, SimError> {
        #[derive(Clone, Copy)]
        enum Event {
            Crash(usize),
            Restart(usize),
            Leave(usize),
            Join(usize),
        }
        let mut rng = fastrand::Rng::with_seed(self.spec.seed ^ 0x6368_7572);
        let period = churn.period.as_millis().max(1) as u64;
        let at = |rng: &mut fastrand::Rng| Duration::from_millis(rng.u64(..period));
        let mut taken: std::collections::BTreeSet<usize> = joiners.iter().copied().collect();
        let mut pick = |rng: &mut fastrand::Rng, from: &[usize]| -> Option<usize> {
            let free: Vec<usize> = from
                .iter()
                .copied()
                .filter(|i| !taken.contains(i))
                .collect();
            let i = *free.get(rng.usize(..free.len().max(1)))?;
            taken.insert(i);
            Some(i)
        };
        let all: Vec<usize> = (0..self.plan.len()).collect();
        let leaves: Vec<usize> = self.plan.leaves.keys().copied().collect();
        let mut events: Vec<(Duration, Event)> = Vec::new();
        for _ in 0..per_period(churn.restarts, all.len(), churn.period) {
            if let Some(id) = pick(&mut rng, &all) {
                let t = at(&mut rng);
                events.push((t, Event::Crash(id)));
                events.push((t + churn.down, Event::Restart(id)));
            }
        }
        for _ in 0..per_period(churn.leaves, leaves.len(), churn.period) {
            if let Some(id) = pick(&mut rng, &leaves) {
                events.push((at(&mut rng), Event::Leave(id)));
            }
        }
        for &id in joiners {
            events.push((at(&mut rng), Event::Join(id)));
        }
        events.sort_by_key(|(t, _)| *t);
        let mut out = ChurnOutcome::default();
        let start = self.sim.elapsed();
        for (t, event) in events {
            let due = start + t;
            while self.sim.elapsed() < due {
                self.step()?;
            }
            match event {
                Event::Crash(id) => {
                    self.sim.crash(name_of(id));
                    self.nodes.borrow_mut()[id] = None;
                }
                Event::Restart(id) => {
                    self.sim.bounce(name_of(id));
                    out.restarts += 1;
                }
                Event::Leave(id) => {
                    // Stopped by its operator: it says goodbye (a last `datachanged`) to
                    // the nodes that poll it, then is gone for good.
                    if let Some(node) = self.node(id) {
                        node.shutdown();
                    }
                    self.nodes.borrow_mut()[id] = None;
                    self.plan.set_absent(id, true);
                    out.left += 1;
                }
                Event::Join(id) => {
                    self.sim.bounce(name_of(id));
                    self.plan.set_absent(id, false);
                    out.joined += 1;
                }
            }
        }
        out.exact_after = self.wait(|m| m.tables_exact())?;
        Ok(out)
    }
}

/// How many of `population` a rate of `share` per simulated minute hits in `period`
/// (rounded, at least one when the rate is not zero).
fn per_period(share: f64, population: usize, period: Duration) -> usize {
    if share <= 0.0 || population == 0 {
        return 0;
    }
    let n = share * population as f64 * period.as_secs_f64() / 60.0;
    (n.round() as usize).max(1)
}

impl MeshUnderTest for Mesh<'_> {
    type Error = SimError;

    fn plan(&self) -> &Plan {
        &self.plan
    }

    fn converge(&mut self) -> Result<Option<Duration>, SimError> {
        self.wait(|m| m.root_exact())
    }

    fn all_exact(&mut self) -> bool {
        self.tables_exact()
    }

    fn settle(&mut self) -> Result<(), SimError> {
        self.settle_down()
    }

    fn levels(&mut self) -> Result<Vec<LevelFigures>, SimError> {
        Ok(self.figures())
    }

    fn root_held(&mut self, child: usize) -> Counts {
        self.node(0)
            .map(|root| self.held(&root, child))
            .unwrap_or_default()
    }

    fn change_and_wait(&mut self, leaf: usize, value: &str) -> Result<Option<Duration>, SimError> {
        self.change_then_wait(leaf, value)
    }

    fn apply(&mut self, fault: Fault, k: usize) -> Result<FaultOutcome, SimError> {
        self.apply_fault(fault, k)
    }

    fn rss_kib(&mut self) -> u64 {
        peak_rss_kib()
    }

    fn idle(&mut self, d: Duration) -> Result<(), SimError> {
        self.run_for(d)
    }

    fn edit(&mut self, leaf: usize, k: u64) -> Result<(), SimError> {
        let text = self.plan.edit(leaf, k);
        std::fs::write(self.dirs[leaf].join("docs.soif"), text)
            .map_err(|e| SimError::Setup(e.to_string()))
    }

    fn wait_exact(&mut self) -> Result<Option<Duration>, SimError> {
        self.plan.recount();
        self.wait(|m| m.tables_exact())
    }

    fn in_process(&self) -> bool {
        true
    }

    fn phase(&mut self, phase: &str) {
        phase.clone_into(&mut self.phase);
        if self.spec.progress {
            self.progress();
        }
    }

    fn level_cpu(&mut self) -> Vec<Duration> {
        (0..=self.plan.tree.depth)
            .map(|l| {
                let ids: Vec<usize> = self.plan.tree.level(l).collect();
                ids.into_iter()
                    .map(|i| self.sim.busy(name_of(i).as_str()))
                    .sum()
            })
            .collect()
    }
}
