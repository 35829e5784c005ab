//! `cipd-sim`: runs a mesh of real cipd nodes on a simulated network from one seed and
//! prints its figures (see `cipd_sim::sim`).

// Outside tests, a failure is an error or a justified `expect`: never a bare unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::process::ExitCode;
use std::time::Duration;

use cipd_sim::sim::data::DataSpec;
use cipd_sim::sim::{Churn, Fault, Hubs, SimSpec, Sustained, run};
use clap::Parser;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Simulates a tree of cipd nodes deterministically and reports hint sizes, table memory,
/// poll traffic, convergence and change-to-root times and the root's exactness.
#[derive(Debug, Parser)]
#[command(name = "cipd-sim", version)]
struct Args {
    /// Children per inner node.
    #[arg(short = 'F', long, default_value_t = 4)]
    fan_in: usize,
    /// Levels below the root (nodes = 1 + F + F^2 + ... + F^D).
    #[arg(short = 'D', long, default_value_t = 2)]
    depth: usize,
    /// Parents of every node below level 1: 1 makes a tree, 2 or more a DAG (a node also
    /// reports to the nodes after its parent on the parent's level).
    #[arg(long, default_value_t = 1)]
    parents: usize,
    /// Links among the level-1 hubs beside the tree: none, ring (each polls the next), full
    /// (every hub polls every other) or cross (each hub also polls a node of the next hub's
    /// subtree). Ring and full need a tree below (--parents 1) and no thresholds (each table
    /// is checked against every leaf it reaches, summed); cross is checked per path, as a
    /// DAG.
    #[arg(long, default_value = "none")]
    hubs: Hubs,
    /// Once the last change has settled, watch the mesh this many seconds and report the
    /// connections opened (0: not watched).
    #[arg(long, default_value_t = 0)]
    quiet_s: u64,
    /// Seed of the data, the network and the daemons' jitter.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run this many seeds from --seed on (a sweep); each must be exact after every fault.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Objects per leaf.
    #[arg(long, default_value_t = 200)]
    objects: usize,
    /// Values every leaf draws from.
    #[arg(long, default_value_t = 2250)]
    vocabulary: usize,
    /// Zipf exponent of the shared values (1.15: Debian's `Maintainer` field).
    #[arg(long, default_value_t = 1.15)]
    zipf: f64,
    /// Share of objects with a value of the leaf's own.
    #[arg(long, default_value_t = 0.3)]
    tail: f64,
    /// Out-bound thresholds by level, root first, comma-separated (the last repeats).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    thresholds: Vec<u64>,
    /// One-way latency, least, in milliseconds.
    #[arg(long, default_value_t = 1)]
    min_latency_ms: u64,
    /// One-way latency, most, in milliseconds.
    #[arg(long, default_value_t = 5)]
    max_latency_ms: u64,
    /// Per step, the chance that a healthy link breaks (random partitions: lost messages
    /// and connections); 0 turns it off.
    #[arg(long, default_value_t = 0.0)]
    fail_rate: f64,
    /// Per step, the chance that a broken link heals.
    #[arg(long, default_value_t = 1.0)]
    repair_rate: f64,
    /// Simulation step in milliseconds.
    #[arg(long, default_value_t = 5)]
    tick_ms: u64,
    /// Longest simulated wait for any convergence, in seconds.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Leaf changes timed to the root.
    #[arg(long, default_value_t = 3)]
    changes: usize,
    /// Faults after the changes: partition:MS, crash:MS, flap:N, slow:MS, blackhole:MS
    /// (comma-separated).
    #[arg(long, value_delimiter = ',')]
    faults: Vec<Fault>,
    /// Instead of one run: run meshes of depth 1 to --report-depth for each of
    /// --thresholds, fit laws, compare export policies and write scale.md and its SVG
    /// plots into this directory.
    #[arg(long, value_name = "DIR")]
    report: Option<std::path::PathBuf>,
    /// Deepest mesh of --report.
    #[arg(long, default_value_t = 3)]
    report_depth: usize,
    /// With --report: take up the runs an earlier report of the same spec measured
    /// (scale-points.tsv in its directory, written after each run) and run only the others.
    #[arg(long)]
    resume: bool,
    /// Print progress (phase, real and simulated time, memory) to standard error every
    /// 10 s (meshes of 10,000 nodes or more print it anyway).
    #[arg(long)]
    progress: bool,
    /// Every peer's poll interval in seconds.
    #[arg(long, default_value_t = 60)]
    poll_interval_s: u64,
    /// Every node's `limits.stall_timeout` in milliseconds: an exchange in which no byte
    /// moves this long fails and is retried (the daemon's default, 20 s, is for the
    /// internet; the simulated links' delays are milliseconds).
    #[arg(long, default_value_t = 1000)]
    stall_ms: u64,
    /// Sustained changes after the timed ones, for this many simulated seconds (0: none):
    /// every leaf's objects are added, edited and removed at --change-rate; reports per
    /// level the bytes taken in and connections per change, the root's intake a second and
    /// the time until every table is exact after the last change.
    #[arg(long, default_value_t = 0)]
    change_s: u64,
    /// With --change-s: changes (one object added, edited or removed) per leaf per
    /// simulated minute (0.1: each leaf once in 10 minutes).
    #[arg(long, default_value_t = 0.1)]
    change_rate: f64,
    /// Node churn after the faults for this many simulated seconds (0: none): nodes crash
    /// and restart from their spool, leaves leave for good (stopped by their operator) and
    /// new leaves join, at --restarts, --departures and --joins per simulated minute.
    #[arg(long, default_value_t = 0)]
    churn_s: u64,
    /// With --churn-s: share of all nodes that restart per simulated minute.
    #[arg(long, default_value_t = 0.01)]
    restarts: f64,
    /// With --churn-s: share of the leaves that leave for good per simulated minute.
    #[arg(long, default_value_t = 0.01)]
    departures: f64,
    /// With --churn-s: share of the leaves that join per simulated minute (down from the
    /// start until then).
    #[arg(long, default_value_t = 0.01)]
    joins: f64,
    /// With --churn-s: how long a restarting node stays down, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    down_ms: u64,
    /// Also run the same mesh for real, each node a cipd process in its own network
    /// namespace behind a latency proxy (needs root), and compare the two figure by figure.
    #[arg(long)]
    real: bool,
    /// With --real: chance that a proxied chunk is lost and delivered --rto-ms late (the
    /// simulation has no such loss; its figures are then shown, not compared).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// With --real: the retransmission timeout a lost chunk costs, in milliseconds.
    #[arg(long, default_value_t = 200)]
    rto_ms: u64,
    /// With --real: the cipd binary (default: beside this program).
    #[arg(long, value_name = "PATH")]
    cipd: Option<std::path::PathBuf>,
    /// With --real: the cipd-sim-proxy binary (default: beside this program).
    #[arg(long, value_name = "PATH")]
    proxy: Option<std::path::PathBuf>,
}

/// Log lines stamped with simulated time (milliseconds since the simulation began), so
/// that a trace reads as the mesh saw it.
struct SimClock;

impl tracing_subscriber::fmt::time::FormatTime for SimClock {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        match turmoil::sim_elapsed() {
            Some(t) => write!(w, "{:>9.3}ms", t.as_secs_f64() * 1e3),
            None => write!(w, "{:>11}", "-"),
        }
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_timer(SimClock)
            .init();
    }
    if matches!(a.hubs, Hubs::Ring | Hubs::Full)
        && (a.parents > 1 || a.thresholds.iter().any(|&t| t > 1))
    {
        eprintln!(
            "cipd-sim: --hubs {} needs a tree below the hubs (--parents 1) and no thresholds \
             (--thresholds 1): each table is checked against every leaf it reaches, summed",
            a.hubs
        );
        return ExitCode::from(2);
    }
    let data = DataSpec {
        objects: a.objects,
        vocabulary: a.vocabulary,
        zipf: a.zipf,
        tail: a.tail,
    };
    if let Some(dir) = &a.report {
        let spec = cipd_sim::sim::report::ReportSpec {
            fan_in: a.fan_in,
            max_depth: a.report_depth.max(1),
            thresholds: a.thresholds.clone(),
            seed: a.seed,
            data,
            resume: a.resume,
            progress: a.progress,
        };
        return match cipd_sim::sim::report::write_report(&spec, dir) {
            Ok(md) => {
                println!("{md}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("cipd-sim: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if a.real {
        cipd_sim::real::lab::clean_up_on_interrupt();
    }
    let mut failed = false;
    let mut sweep = Sweep::default();
    for seed in a.seed..a.seed + a.seeds.max(1) {
        let spec = SimSpec {
            fan_in: a.fan_in,
            depth: a.depth,
            parents: a.parents.max(1),
            hubs: a.hubs,
            quiet_window: Duration::from_secs(a.quiet_s),
            seed,
            data,
            thresholds: a.thresholds.clone(),
            latency: (
                Duration::from_millis(a.min_latency_ms),
                Duration::from_millis(a.max_latency_ms.max(a.min_latency_ms)),
            ),
            fail_rate: a.fail_rate.clamp(0.0, 1.0),
            repair_rate: a.repair_rate.clamp(0.0, 1.0),
            tick: Duration::from_millis(a.tick_ms.max(1)),
            timeout: Duration::from_secs(a.timeout_s),
            changes: a.changes,
            faults: a.faults.clone(),
            poll_interval: Duration::from_secs(a.poll_interval_s.max(1)),
            stall_timeout: Duration::from_millis(a.stall_ms.max(2)),
            sustained: (a.change_s > 0).then(|| Sustained {
                period: Duration::from_secs(a.change_s),
                per_leaf_minute: a.change_rate.max(0.0),
            }),
            churn: (a.churn_s > 0).then(|| Churn {
                period: Duration::from_secs(a.churn_s),
                restarts: a.restarts.max(0.0),
                leaves: a.departures.max(0.0),
                joins: a.joins.max(0.0),
                down: Duration::from_millis(a.down_ms),
            }),
            progress: a.progress,
            ..SimSpec::default()
        };
        if a.real {
            failed |= !real_and_compare(&a, spec);
            continue;
        }
        match run(&spec) {
            Ok(r) => {
                let exact = r.all_exact
                    && r.changes.iter().all(Option::is_some)
                    && r.faults.iter().all(|f| f.recovered_after.is_some())
                    && r.churn.as_ref().is_none_or(|c| c.exact_after.is_some());
                if a.seeds > 1 {
                    let churn = r
                        .churn
                        .as_ref()
                        .map(|c| format!(", churn exact after {:?}", c.exact_after))
                        .unwrap_or_default();
                    println!(
                        "seed {seed}: {} (converged {:?}, faults {:?}{churn})",
                        if exact { "exact" } else { "NOT EXACT" },
                        r.converged_at,
                        r.faults
                            .iter()
                            .map(|f| f.recovered_after)
                            .collect::<Vec<_>>()
                    );
                    sweep.add(&r, exact);
                } else {
                    println!("seed {seed}\n{}", r.render());
                }
                failed |= !exact;
            }
            Err(e) => {
                eprintln!("cipd-sim: seed {seed}: {e}");
                failed = true;
            }
        }
    }
    if a.seeds > 1 && !a.real {
        println!("{}", sweep.render());
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs `spec` simulated and for real, prints both reports and their comparison; true when
/// both are exact and agree within the margins.
fn real_and_compare(a: &Args, spec: SimSpec) -> bool {
    use cipd_sim::real::{self, RealSpec, compare};
    let mut real_spec = RealSpec::beside_this_program(spec.clone());
    if let Some(p) = &a.cipd {
        real_spec.cipd.clone_from(p);
    }
    if let Some(p) = &a.proxy {
        real_spec.proxy.clone_from(p);
    }
    real_spec.loss = a.loss.clamp(0.0, 1.0);
    real_spec.rto = Duration::from_millis(a.rto_ms);
    let sim = match run(&spec) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cipd-sim: seed {}: {e}", spec.seed);
            return false;
        }
    };
    println!("seed {} simulated\n{}", spec.seed, sim.render());
    let real = match real::run(&real_spec) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cipd-sim: seed {} for real: {e}", spec.seed);
            return false;
        }
    };
    println!(
        "seed {} for real ({} cipd processes in network namespaces; peak RSS is their sum)\n{}",
        spec.seed,
        real.nodes,
        real.render()
    );
    let rows = compare::compare(&sim, &real, &compare::Margins::default());
    println!("{}", compare::render(&rows));
    let exact = real.all_exact
        && real.changes.iter().all(Option::is_some)
        && real.faults.iter().all(|f| f.recovered_after.is_some());
    if real_spec.loss > 0.0 {
        println!("with loss {}: figures shown, not judged", real_spec.loss);
        return exact;
    }
    let agree = compare::agree(&rows);
    println!(
        "simulation and real run {}",
        if agree { "agree" } else { "DISAGREE" }
    );
    exact && agree
}

/// A sweep's figures over its seeds: how many were exact, and the slowest and median times.
#[derive(Default)]
struct Sweep {
    seeds: usize,
    exact: usize,
    converged: Vec<Option<Duration>>,
    recovered: Vec<Option<Duration>>,
    churn: Vec<Option<Duration>>,
}

impl Sweep {
    fn add(&mut self, r: &cipd_sim::sim::Report, exact: bool) {
        self.seeds += 1;
        self.exact += usize::from(exact);
        self.converged.push(r.converged_at);
        self.recovered
            .extend(r.faults.iter().map(|f| f.recovered_after));
        if let Some(c) = &r.churn {
            self.churn.push(c.exact_after);
        }
    }

    fn render(&self) -> String {
        let line = |what: &str, times: &[Option<Duration>]| -> String {
            if times.is_empty() {
                return String::new();
            }
            let never = times.iter().filter(|t| t.is_none()).count();
            let mut ms: Vec<u128> = times.iter().flatten().map(Duration::as_millis).collect();
            ms.sort_unstable();
            let (median, max) = (
                ms.get(ms.len() / 2).copied().unwrap_or(0),
                ms.last().copied().unwrap_or(0),
            );
            format!("\n  {what}: median {median} ms, slowest {max} ms, never {never}")
        };
        format!(
            "sweep: {} seeds, {} exact{}{}{}",
            self.seeds,
            self.exact,
            line("converged", &self.converged),
            line("exact again after a fault", &self.recovered),
            line("exact after the churn's last change", &self.churn)
        )
    }
}
