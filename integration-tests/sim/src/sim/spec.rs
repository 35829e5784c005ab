//! What a run is asked to do: the mesh's shape and data, its network, timers, faults and
//! churn ([`SimSpec`]), and the per-level figures every run reports ([`LevelFigures`]); at
//! the bottom of the simulator, so the plan, the run and the report all read from it.

use std::time::Duration;

use super::data::DataSpec;

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
    /// A level-1 node's link to the root silently drops everything (no reset, no refusal:
    /// a middlebox that lost the connection's state) for `0`, from the moment the root is
    /// polling that node after one of its leaves changed; then heals.
    Blackhole(Duration),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Partition(d) => write!(f, "partition {}ms", d.as_millis()),
            Self::Crash(d) => write!(f, "crash {}ms", d.as_millis()),
            Self::Flap(n) => write!(f, "flap x{n}"),
            Self::Slow(d) => write!(f, "slow {}ms", d.as_millis()),
            Self::Blackhole(d) => write!(f, "blackhole {}ms", d.as_millis()),
        }
    }
}

impl std::str::FromStr for Fault {
    type Err = String;

    /// `partition:MS`, `crash:MS`, `flap:N`, `slow:MS`, `blackhole:MS`.
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
            "blackhole" => Ok(Self::Blackhole(ms)),
            _ => Err(format!(
                "fault {s:?}: kind must be partition, crash, flap, slow or blackhole"
            )),
        }
    }
}

/// Links among the level-1 hubs, beside the tree: cycles for the mesh to settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hubs {
    /// None: a tree (or a DAG).
    #[default]
    None,
    /// Each level-1 hub also polls the next one (the last polls the first): a ring.
    Ring,
    /// Every level-1 hub polls every other: a full mesh.
    Full,
    /// Each level-1 hub also polls a node of the next hub's subtree: cross-links between
    /// subtrees (diamonds, no cycle).
    Cross,
}

impl std::fmt::Display for Hubs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Ring => "ring",
            Self::Full => "full",
            Self::Cross => "cross",
        })
    }
}

impl std::str::FromStr for Hubs {
    type Err = String;

    /// `none`, `ring`, `full` or `cross`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Self::None),
            "ring" => Ok(Self::Ring),
            "full" => Ok(Self::Full),
            "cross" => Ok(Self::Cross),
            _ => Err(format!("hubs {s:?}: expected none, ring, full or cross")),
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
    /// Links among the level-1 hubs (a ring, a full mesh), beside the tree.
    pub hubs: Hubs,
    /// How long the mesh is watched for exchanges once it has settled after the last
    /// change (zero: not watched).
    pub quiet_window: Duration,
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
    /// Every node's `limits.stall_timeout` (its `outbound.max_wait` is half of it, its
    /// `limits.max_transient_backoff` twice and its `limits.peer_gone_after` five times
    /// it): scaled to the simulated links' milliseconds
    /// as the daemon's 20 s default is to the internet's.
    pub stall_timeout: Duration,
    /// How often leaves look at their collection files.
    pub watch_interval: Duration,
    /// Objects changing at every leaf all through a period, after the timed changes (none:
    /// no sustained changes).
    pub sustained: Option<Sustained>,
    /// Nodes that come and go after the faults (none: no churn).
    pub churn: Option<Churn>,
    /// Print progress (phase, real and simulated time, memory) to standard error every few
    /// seconds of real time; meshes of 10,000 nodes or more print it anyway.
    pub progress: bool,
}

/// Sustained changes: through `period`, every leaf's objects are added, edited and removed
/// (a third each) at `per_leaf_minute` changes per simulated minute, at moments drawn from
/// the seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sustained {
    /// How long the changes go on (simulated).
    pub period: Duration,
    /// Changes per leaf per simulated minute (0.1: each leaf once in 10 minutes).
    pub per_leaf_minute: f64,
}

/// What the sustained changes cost and how the mesh kept up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SustainedOutcome {
    /// Changes made (objects added, edited or removed at a leaf, one each).
    pub changes: usize,
    /// How long they went on.
    pub period: Duration,
    /// Per level, poll bytes read and connections opened from the first change until every
    /// table was exact again.
    pub traffic: Vec<(u64, u64)>,
    /// Simulated time from the last change until every table was exact (none: not within
    /// the timeout).
    pub exact_after: Option<Duration>,
    /// CPU time the root used from the first change until every table was exact (in a
    /// simulation, on the simulation's thread).
    pub root_cpu: Duration,
    /// CPU time each level's nodes used together over the same span (level 0 is the root).
    pub level_cpu: Vec<Duration>,
}

/// Node churn: through `period`, nodes crash and restart from their spool, leaves leave for
/// good and new leaves join, at random moments drawn from the seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Churn {
    /// How long the churn lasts (simulated).
    pub period: Duration,
    /// Share of all nodes that restart per simulated minute (0.01: 1 %).
    pub restarts: f64,
    /// Share of the leaves that leave for good per simulated minute.
    pub leaves: f64,
    /// Share of the leaves that join per simulated minute (they are in their parents'
    /// configurations from the start, but down until they join).
    pub joins: f64,
    /// How long a restarting node stays down.
    pub down: Duration,
}

impl Default for Churn {
    fn default() -> Self {
        Self {
            period: Duration::from_secs(60),
            restarts: 0.01,
            leaves: 0.01,
            joins: 0.01,
            down: Duration::from_secs(1),
        }
    }
}

/// What the churn did and how the mesh took it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChurnOutcome {
    /// Restarts (crash, then restart from the spool after [`Churn::down`]).
    pub restarts: usize,
    /// Leaves that left for good.
    pub left: usize,
    /// Leaves that joined.
    pub joined: usize,
    /// Simulated time from the last change until every table was exact for the nodes then
    /// alive (none: not within the timeout).
    pub exact_after: Option<Duration>,
}

impl Default for SimSpec {
    fn default() -> Self {
        Self {
            fan_in: 4,
            depth: 2,
            parents: 1,
            hubs: Hubs::None,
            quiet_window: Duration::ZERO,
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
            stall_timeout: Duration::from_secs(1),
            sustained: None,
            churn: None,
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
    /// Live `(value, peer)` entries in a node's routing table, mean and most (unlike
    /// values and bytes, which count a value once per index segment until segments merge,
    /// independent of the order hints arrived in).
    pub table_entries: (f64, usize),
    /// Values in a node's out-bound hint, mean and most.
    pub hint_values: (f64, usize),
    /// Bytes its nodes read over their out-going connections (polls), in all.
    pub poll_bytes_in: u64,
    /// Out-going connections its nodes opened, in all.
    pub connections: u64,
}
