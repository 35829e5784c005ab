//! The scale report: simulated meshes of growing depth, laws fitted to what they measure,
//! extrapolated to 10,000 and 100,000 nodes, and export policies compared on the same data
//! (`docs/scale.md` and its plots, written by `cipd-sim --report DIR`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use super::data::{self, Counts, DataSpec, Tree};
use super::{Report, SimError, SimSpec, run};

/// What the report measures.
#[derive(Debug, Clone)]
pub struct ReportSpec {
    /// Children per inner node.
    pub fan_in: usize,
    /// Deepest mesh run (1 up to it).
    pub max_depth: usize,
    /// Uniform thresholds compared.
    pub thresholds: Vec<u64>,
    /// Seed of every run.
    pub seed: u64,
    /// The leaves' collections.
    pub data: DataSpec,
    /// Take up the runs measured before ([`POINTS_FILE`] in the output directory).
    pub resume: bool,
    /// Print each run's progress (runs of 10,000 nodes or more print it anyway).
    pub progress: bool,
}

/// One measured run.
#[derive(Debug, Clone, PartialEq)]
struct Point {
    depth: usize,
    threshold: u64,
    row: Row,
}

/// The figures of a run the report reads, kept in [`POINTS_FILE`] as one line.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    nodes: usize,
    leaves: usize,
    root_matched: usize,
    root_expected: usize,
    root_extra: usize,
    all_exact: bool,
    /// The root's table bytes.
    root_bytes: f64,
    /// The level-1 nodes' hint bytes, mean.
    hint_bytes: f64,
    converged_ms: Option<f64>,
    /// Each change to the root, in order.
    changes_ms: Vec<Option<f64>>,
    wall_s: f64,
    /// CPU seconds of the nodes and of the harness.
    cpu_s: (f64, f64),
    rss_mib: u64,
}

/// The measured runs, one a line, written after each run: a report cut short keeps what
/// was measured, and `--resume` takes it up.
pub const POINTS_FILE: &str = "scale-points.tsv";

impl Row {
    fn of(r: &Report) -> Self {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        Self {
            nodes: r.nodes,
            leaves: r.leaves,
            root_matched: r.root_matched,
            root_expected: r.root_expected,
            root_extra: r.root_extra,
            all_exact: r.all_exact,
            root_bytes: r.levels.first().map_or(0.0, |l| l.table_bytes.0),
            hint_bytes: r.levels.get(1).map_or(0.0, |l| l.hint_bytes.0),
            converged_ms: r.converged_at.map(ms),
            changes_ms: r.changes.iter().map(|c| c.map(ms)).collect(),
            wall_s: r.wall.as_secs_f64(),
            cpu_s: (r.cpu.0.as_secs_f64(), r.cpu.1.as_secs_f64()),
            rss_mib: r.rss_kib / 1024,
        }
    }

    /// Whether the root held exactly what brute force says, and every table was exact.
    fn exact(&self) -> bool {
        self.all_exact && self.root_extra == 0 && self.root_matched == self.root_expected
    }
}

impl Point {
    /// The point as a line of [`POINTS_FILE`] (tab-separated; `-` for none).
    fn to_line(&self) -> String {
        let r = &self.row;
        let opt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v}"));
        let changes: Vec<String> = r.changes_ms.iter().map(|c| opt(*c)).collect();
        format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.depth,
            self.threshold,
            r.nodes,
            r.leaves,
            r.root_matched,
            r.root_expected,
            r.root_extra,
            r.all_exact,
            r.root_bytes,
            r.hint_bytes,
            opt(r.converged_ms),
            if changes.is_empty() {
                "-".to_owned()
            } else {
                changes.join(",")
            },
            r.wall_s,
            r.cpu_s.0,
            r.cpu_s.1,
            r.rss_mib
        )
    }

    /// A line of [`POINTS_FILE`]; the error names what is wrong with it.
    fn parse(line: &str) -> Result<Self, String> {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 16 {
            return Err(format!("{} fields, expected 16", f.len()));
        }
        fn num<T: std::str::FromStr>(s: &str, what: &str) -> Result<T, String> {
            s.parse()
                .map_err(|_| format!("{what} {s:?} is not a number"))
        }
        let opt = |s: &str, what: &str| -> Result<Option<f64>, String> {
            if s == "-" {
                Ok(None)
            } else {
                num(s, what).map(Some)
            }
        };
        let changes_ms = if f[11] == "-" {
            Vec::new()
        } else {
            f[11]
                .split(',')
                .map(|c| opt(c, "change"))
                .collect::<Result<_, _>>()?
        };
        Ok(Self {
            depth: num(f[0], "depth")?,
            threshold: num(f[1], "threshold")?,
            row: Row {
                nodes: num(f[2], "nodes")?,
                leaves: num(f[3], "leaves")?,
                root_matched: num(f[4], "matched")?,
                root_expected: num(f[5], "expected")?,
                root_extra: num(f[6], "extra")?,
                all_exact: f[7]
                    .parse()
                    .map_err(|_| format!("exact {:?} is not true or false", f[7]))?,
                root_bytes: num(f[8], "root bytes")?,
                hint_bytes: num(f[9], "hint bytes")?,
                converged_ms: opt(f[10], "converged")?,
                changes_ms,
                wall_s: num(f[12], "wall")?,
                cpu_s: (num(f[13], "nodes' CPU")?, num(f[14], "harness CPU")?),
                rss_mib: num(f[15], "RSS")?,
            },
        })
    }

    fn leaves(&self) -> f64 {
        self.row.leaves as f64
    }

    /// `(value, child)` entries the root holds.
    fn root_entries(&self) -> f64 {
        self.row.root_matched as f64
    }

    fn root_bytes(&self) -> f64 {
        self.row.root_bytes
    }

    fn converged_ms(&self) -> Option<f64> {
        self.row.converged_ms
    }

    fn change_ms(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.row.changes_ms.iter().flatten().copied().collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    }
}

/// `y = a * x^b`, fitted by least squares on logarithms.
#[derive(Debug, Clone, Copy)]
struct PowerLaw {
    a: f64,
    b: f64,
}

impl PowerLaw {
    fn fit(points: &[(f64, f64)]) -> Option<Self> {
        let logs: Vec<(f64, f64)> = points
            .iter()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .map(|(x, y)| (x.ln(), y.ln()))
            .collect();
        let (b, ln_a) = linear(&logs)?;
        Some(Self { a: ln_a.exp(), b })
    }

    fn at(&self, x: f64) -> f64 {
        self.a * x.powf(self.b)
    }
}

/// A fitted law of root size against leaves.
#[derive(Debug, Clone, Copy)]
enum Law {
    Power(PowerLaw),
    Linear(f64, f64),
}

impl Law {
    fn at(&self, x: f64) -> f64 {
        match self {
            Self::Power(p) => p.at(x),
            Self::Linear(m, c) => m * x + c,
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Power(p) => format!("{:.2} L^{:.3}", p.a, p.b),
            Self::Linear(m, c) => format!(
                "{m:.2} L {} {:.0}",
                if *c < 0.0 { '-' } else { '+' },
                c.abs()
            ),
        }
    }
}

/// Least squares `y = m * x + c`: `(m, c)`; none with fewer than two distinct x.
fn linear(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let m = sxy / sxx;
    Some((m, my - m * mx))
}

/// An export policy's cost and reach at the root.
#[derive(Debug, Clone)]
pub struct PolicyRow {
    /// Its name.
    pub name: String,
    /// Bytes the root holds of its children's exports (values plus 8 bytes a count, or
    /// filter bits).
    pub root_bytes: f64,
    /// Share of the true `(value, child)` pairs the root can refer to.
    pub recall: f64,
    /// The same, each pair weighted by its object count (queries shaped like the data).
    pub weighted_recall: f64,
    /// Share of the root's referrals that are right.
    pub precision: f64,
}

/// Runs the meshes, fits, compares the policies and writes `scale.md` and its plots into
/// `out`; returns the Markdown.
///
/// # Errors
/// [`SimError`] when a run fails or a file cannot be written.
pub fn write_report(spec: &ReportSpec, out: &Path) -> Result<String, SimError> {
    let io = |e: std::io::Error| SimError::Setup(e.to_string());
    std::fs::create_dir_all(out).map_err(io)?;
    let points_path = out.join(POINTS_FILE);
    let mut points = if spec.resume {
        load_points(spec, &points_path)?
    } else {
        Vec::new()
    };
    let runs: Vec<(usize, u64)> = (1..=spec.max_depth)
        .flat_map(|d| spec.thresholds.iter().map(move |&t| (d, t)))
        .collect();
    for (k, &(depth, threshold)) in runs.iter().enumerate() {
        if points
            .iter()
            .any(|p| p.depth == depth && p.threshold == threshold)
        {
            eprintln!(
                "cipd-sim: depth {depth}, threshold {threshold}: measured before, kept from {}",
                points_path.display()
            );
            continue;
        }
        eprintln!(
            "cipd-sim: run {} of {}: depth {depth}, threshold {threshold}",
            k + 1,
            runs.len()
        );
        let sim = SimSpec {
            fan_in: spec.fan_in,
            depth,
            seed: spec.seed,
            data: spec.data,
            thresholds: vec![threshold],
            changes: 3,
            timeout: Duration::from_secs(600),
            progress: spec.progress,
            ..SimSpec::default()
        };
        let report = run(&sim)?;
        eprintln!(
            "cipd-sim: depth {depth}, threshold {threshold}: {} nodes, wall {:.1} s, peak RSS {} MiB",
            report.nodes,
            report.wall.as_secs_f64(),
            report.rss_kib / 1024
        );
        points.push(Point {
            depth,
            threshold,
            row: Row::of(&report),
        });
        points.sort_by_key(|p| {
            (
                p.depth,
                spec.thresholds.iter().position(|&t| t == p.threshold),
            )
        });
        // What is measured so far, on disk at once: a report cut short keeps it.
        save_points(spec, &points_path, &points)?;
        let left: Vec<(usize, u64)> = runs[k + 1..].to_vec();
        if !left.is_empty() {
            write_files(spec, out, &points, None, &left)?;
        }
    }
    let depth = spec.max_depth.min(POLICY_DEPTH);
    let tree = Tree::new(spec.fan_in, depth, 1);
    let draws = data::Draws::new(&spec.data);
    let leaves: BTreeMap<usize, Counts> = (0..tree.nodes.len())
        .filter(|&id| tree.is_leaf(id))
        .map(|id| (id, data::leaf_counts(&spec.data, spec.seed, id, &draws)))
        .collect();
    let policies = compare_policies(&tree, &leaves);
    write_files(spec, out, &points, Some((depth, &policies)), &[])
}

/// The deepest mesh export policies are compared on (by brute force over every node: at
/// depth 5 that is minutes and gigabytes, for the same reading).
const POLICY_DEPTH: usize = 4;

/// Writes `scale.md` and its plots; `left` names the runs still to come (a partial report).
fn write_files(
    spec: &ReportSpec,
    out: &Path,
    points: &[Point],
    policies: Option<(usize, &[PolicyRow])>,
    left: &[(usize, u64)],
) -> Result<String, SimError> {
    let md = render(spec, points, policies, left);
    plot_root(spec, points, &out.join("scale-root.svg"))?;
    plot_times(points, &out.join("scale-times.svg"))?;
    if let Some((_, policies)) = policies {
        plot_policies(policies, &out.join("scale-policies.svg"))?;
    }
    std::fs::write(out.join("scale.md"), &md).map_err(|e| SimError::Setup(e.to_string()))?;
    Ok(md)
}

/// The first line of [`POINTS_FILE`]: what the runs were (points of another spec are not
/// taken up).
fn points_header(spec: &ReportSpec) -> String {
    format!(
        "# cipd-sim scale points: fan-in {} seed {} objects {} vocabulary {} zipf {} tail {}",
        spec.fan_in,
        spec.seed,
        spec.data.objects,
        spec.data.vocabulary,
        spec.data.zipf,
        spec.data.tail
    )
}

fn save_points(spec: &ReportSpec, path: &Path, points: &[Point]) -> Result<(), SimError> {
    let mut text = points_header(spec);
    text.push('\n');
    for p in points {
        text.push_str(&p.to_line());
        text.push('\n');
    }
    // Written beside, then renamed: a run killed while writing leaves the last file whole.
    let tmp = path.with_extension("tsv.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| SimError::Setup(format!("{}: {e}", path.display())))
}

/// The points of an earlier report of the same spec (none when there is no file).
fn load_points(spec: &ReportSpec, path: &Path) -> Result<Vec<Point>, SimError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(SimError::Setup(format!("{}: {e}", path.display()))),
    };
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    if header != points_header(spec) {
        return Err(SimError::Setup(format!(
            "{}: measured for another spec ({header:?}); remove it or run without --resume",
            path.display()
        )));
    }
    lines
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            Point::parse(l)
                .map_err(|e| SimError::Setup(format!("{} line {}: {e}", path.display(), i + 2)))
        })
        .collect()
}

fn render(
    spec: &ReportSpec,
    points: &[Point],
    policies: Option<(usize, &[PolicyRow])>,
    left: &[(usize, u64)],
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# The mesh at scale\n");
    if !left.is_empty() {
        let runs: Vec<String> = left
            .iter()
            .map(|(d, t)| format!("depth {d} threshold {t}"))
            .collect();
        let _ = writeln!(
            s,
            "**Partial report**: written after each run; still to run: {}.\n",
            runs.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "Written by `cargo run --release -p cipd-sim --bin cipd-sim -- --report docs \
         -F {} --report-depth {} --thresholds {} --seed {}` (the figures below come from \
         that seed; run it again for the same ones). Every node is the real daemon on a \
         simulated network (`integration-tests/sim/src/sim`); leaves hold {} objects each, one \
         `DOCUMENT:Author` value per object: with probability {:.2} a value of the leaf's own \
         (the long tail), else one of {} shared values drawn by a Zipf law of exponent {} \
         (the defaults' head is calibrated on Debian bookworm main's `Maintainer` field: \
         63,440 package records, 2,248 distinct values, exponent 1.12 over the top 100 ranks \
         and 1.19 over the top 1,000; the tail is set far above that field's 1 % of \
         singletons, as for authors or titles). Simulated time counts network latency \
         (1-5 ms each way) and the daemon's timers, not CPU time. Memory figures are the \
         routing table's own estimate of its heap bytes (`cipd_table_*` in `/metrics`). \
         The simulation is checked against the same meshes run as real processes, each in \
         its own network namespace: [scale-real.md](scale-real.md).\n",
        spec.fan_in,
        spec.max_depth,
        spec.thresholds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
        spec.seed,
        spec.data.objects,
        spec.data.tail,
        spec.data.vocabulary,
        spec.data.zipf
    );
    let _ = writeln!(s, "## Measured\n");
    let _ = writeln!(
        s,
        "| depth | nodes | threshold | root entries | root table bytes | level-1 hint bytes | \
         converged | change to root (median) | every table exact | wall | CPU: nodes / harness | peak RSS |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    for p in points {
        let r = &p.row;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} | {:.0} | {} | {} | {} | {:.1} s | {:.1} s / {:.1} s | {} MiB |",
            p.depth,
            r.nodes,
            p.threshold,
            r.root_matched,
            p.root_bytes(),
            r.hint_bytes,
            ms(p.converged_ms()),
            ms(p.change_ms()),
            if r.exact() { "yes" } else { "NO" },
            r.wall_s,
            r.cpu_s.0,
            r.cpu_s.1,
            r.rss_mib
        );
    }
    let _ = writeln!(
        s,
        "\nWall and CPU are real time on the machine the report was written on; the nodes' \
         CPU is the daemons' own work (each simulated host's busy time), the harness's is \
         the simulator's (the simulated network, checking every table against brute force, \
         writing the nodes' files). Peak RSS is the whole process's, simulator included."
    );
    let _ = writeln!(s, "\n![root size against leaves](scale-root.svg)\n");
    let _ = writeln!(s, "## Laws and extrapolation\n");
    // With three depths or more, the deepest run is held out of the fits and checks them.
    let measured = points.iter().map(|p| p.depth).max().unwrap_or(0);
    let held_out = (measured >= 3).then_some(measured);
    let fitted = |p: &&Point| Some(p.depth) != held_out;
    // Extrapolated to the two depths beyond the deepest run.
    let (far1, far2) = (measured + 1, measured + 2);
    let leaves_at =
        |depth: usize| (spec.fan_in as f64).powi(i32::try_from(depth).unwrap_or(i32::MAX));
    let label = |depth: usize| {
        if spec.fan_in == 10 {
            format!("10^{depth}")
        } else {
            format!("{:.0}", leaves_at(depth))
        }
    };
    let (x1, x2) = (leaves_at(far1), leaves_at(far2));
    let _ = writeln!(
        s,
        "What is measured and what is extrapolated: every row of the table above is a run to \
         its end (every node the real daemon, every table checked against brute force), up \
         to depth {measured} ({} leaves); nothing beyond it was run. Root entries and root \
         table bytes against the number of leaves `L` are fitted as `a * L^b` and as a \
         straight line per threshold; convergence and change-to-root time against depth \
         `D`, as `c + d * D`{}. The columns at {} and {} leaves (fan-in {} meshes of depth \
         {far1} and {far2}) are extrapolated from those laws:\n",
        label(measured),
        held_out.map_or(String::new(), |d| format!(
            ", on the runs of depth 1 to {} (the depth-{d} run checks them)",
            d - 1
        )),
        label(far1),
        label(far2),
        spec.fan_in
    );
    let _ = writeln!(
        s,
        "| threshold | law | entries | bytes | entries at {l1} | bytes at {l1} | entries at {l2} | bytes at {l2} | held-out run: entries predicted / measured, bytes predicted / measured |",
        l1 = label(far1),
        l2 = label(far2)
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for &t in &spec.thresholds {
        let of = |f: fn(&Point) -> f64| -> Vec<(f64, f64)> {
            points
                .iter()
                .filter(|p| p.threshold == t)
                .filter(fitted)
                .map(|p| (p.leaves(), f(p)))
                .collect()
        };
        let laws: [(&str, Option<Law>, Option<Law>); 2] = [
            (
                "power",
                PowerLaw::fit(&of(Point::root_entries)).map(Law::Power),
                PowerLaw::fit(&of(Point::root_bytes)).map(Law::Power),
            ),
            (
                "linear",
                linear(&of(Point::root_entries)).map(|(m, c)| Law::Linear(m, c)),
                linear(&of(Point::root_bytes)).map(|(m, c)| Law::Linear(m, c)),
            ),
        ];
        for (name, e, b) in laws {
            let (Some(e), Some(b)) = (e, b) else {
                continue;
            };
            let check = points
                .iter()
                .find(|p| p.threshold == t && Some(p.depth) == held_out)
                .map_or_else(
                    || "-".to_owned(),
                    |p| {
                        format!(
                            "{:.0} / {:.0}, {:.1} / {:.1} MB",
                            e.at(p.leaves()),
                            p.root_entries(),
                            b.at(p.leaves()) / 1e6,
                            p.root_bytes() / 1e6
                        )
                    },
                );
            let _ = writeln!(
                s,
                "| {t} | {name} | {} | {} | {:.0} | {:.1} MB | {:.0} | {:.1} MB | {check} |",
                e.describe(),
                b.describe(),
                e.at(x1),
                b.at(x1) / 1e6,
                e.at(x2),
                b.at(x2) / 1e6
            );
        }
    }
    let _ = writeln!(
        s,
        "\nThe tail (values of a leaf's own) grows with the leaves and the shared head does not: \
         at threshold 1 the root's size is close to linear in `L`, and the power law fitted \
         on small meshes bends too early (it under-estimates, the straight line over-estimates; \
         the held-out run lies between). A threshold above 1 cuts the tail away and leaves \
         the head, so the root grows slowly."
    );
    let conv: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.threshold == spec.thresholds[0])
        .filter(fitted)
        .filter_map(|p| p.converged_ms().map(|c| (p.depth as f64, c)))
        .collect();
    let change: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.threshold == spec.thresholds[0])
        .filter(fitted)
        .filter_map(|p| p.change_ms().map(|c| (p.depth as f64, c)))
        .collect();
    let deepest = points
        .iter()
        .find(|p| p.threshold == spec.thresholds[0] && Some(p.depth) == held_out);
    let measured: [Option<f64>; 2] = [
        deepest.and_then(Point::converged_ms),
        deepest.and_then(Point::change_ms),
    ];
    for ((what, pts), seen) in [
        ("convergence from cold", &conv),
        ("change to root", &change),
    ]
    .into_iter()
    .zip(measured)
    {
        if let Some((d, c)) = linear(pts) {
            let _ = write!(
                s,
                "\n{what}: {c:.0} ms + {d:.0} ms per level; at {} leaves (depth {far1}) {:.0} ms, \
                 at {} (depth {far2}) {:.0} ms.",
                label(far1),
                c + d * far1 as f64,
                label(far2),
                c + d * far2 as f64
            );
            if let (Some(depth), Some(seen)) = (held_out, seen) {
                let _ = write!(
                    s,
                    " The held-out depth-{depth} run: predicted {:.0} ms, measured {seen:.0} ms.",
                    c + d * depth as f64
                );
            }
            let _ = writeln!(s);
        }
    }
    let _ = writeln!(s, "\n![times against depth](scale-times.svg)\n");
    let Some((depth, policies)) = policies else {
        return s;
    };
    let _ = writeln!(s, "## Export policies\n");
    let _ = writeln!(
        s,
        "The same leaves (depth {depth}), each policy applied by every node to what it exports, \
         computed by brute force: what the root holds of its children's exports, and how \
         well it refers. Recall counts the true `(value, child)` pairs the root can refer \
         to; weighted recall weights each by its objects (queries shaped like the data); \
         precision is the share of the root's referrals that are right. Thresholds drop a \
         value held by fewer objects than `t`; top-K keeps a node's K most held values; \
         Bloom filters (as Gnutella's query routing tables) keep every value as bits of a \
         filter of the given bits per value (OR-ed up the tree), at the cost of false \
         referrals and of counts (no ranking, no substring queries).\n"
    );
    let _ = writeln!(
        s,
        "| policy | root bytes | recall | weighted recall | precision |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    for p in policies {
        let _ = writeln!(
            s,
            "| {} | {:.0} | {:.3} | {:.3} | {:.3} |",
            p.name, p.root_bytes, p.recall, p.weighted_recall, p.precision
        );
    }
    let find = |n: &str| policies.iter().find(|p| p.name == n);
    if let (Some(full), Some(t2), Some(top), Some(bloom)) = (
        find("threshold 1 at every level"),
        find("threshold 2 at every level"),
        find("top 1000 per node"),
        find("Bloom filter, 16 bits per value"),
    ) {
        let _ = writeln!(
            s,
            "\nReading: a threshold of 2 holds {:.0}x less at the root than the full lists but \
             keeps {:.0} % of the weighted recall and {:.1} % of the `(value, child)` pairs: \
             the tail is where the values are, and a threshold drops it. A 16-bit-per-value \
             Bloom filter is {:.1}x smaller than the full lists with every pair reachable and \
             {:.1} % of referrals right (top 1000 per node: {:.1} % of the pairs in {:.0} \
             bytes), but it carries no counts (no ranking by objects) and answers only exact \
             values (no substring or prefix queries), which cipd's referrals are built on; so \
             no policy wins outright, and the daemon keeps per-attribute thresholds \
             (`[export] thresholds`) as its one export policy.",
            full.root_bytes / t2.root_bytes.max(1.0),
            t2.weighted_recall * 100.0,
            t2.recall * 100.0,
            full.root_bytes / bloom.root_bytes.max(1.0),
            bloom.precision * 100.0,
            top.recall * 100.0,
            top.root_bytes
        );
    }
    let _ = writeln!(
        s,
        "\n![policies: root bytes against recall](scale-policies.svg)"
    );
    s
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "timeout".to_owned(), |v| format!("{v:.0} ms"))
}

/// Per level-1 child, every value below it with its objects.
fn truth(tree: &Tree, leaves: &BTreeMap<usize, Counts>) -> Vec<(usize, Counts)> {
    tree.nodes[0]
        .children
        .iter()
        .map(|&c| {
            let mut sum = Counts::new();
            let mut stack = vec![c];
            while let Some(id) = stack.pop() {
                if let Some(l) = leaves.get(&id) {
                    for (v, n) in l {
                        *sum.entry(v.clone()).or_default() += n;
                    }
                }
                stack.extend(&tree.nodes[id].children);
            }
            (c, sum)
        })
        .collect()
}

/// What each node exports under `keep` (applied to the sum of its collection and its
/// children's exports), computed bottom-up.
fn exports(
    tree: &Tree,
    leaves: &BTreeMap<usize, Counts>,
    keep: impl Fn(usize, Counts) -> Counts,
) -> Vec<Counts> {
    let mut out = vec![Counts::new(); tree.nodes.len()];
    for id in (0..tree.nodes.len()).rev() {
        let mut sum = leaves.get(&id).cloned().unwrap_or_default();
        for &c in &tree.nodes[id].children {
            for (v, n) in &out[c] {
                *sum.entry(v.clone()).or_default() += n;
            }
        }
        out[id] = keep(tree.nodes[id].level, sum);
    }
    out
}

/// What each node exports under per-level thresholds (see [`data::threshold_of`]).
fn thresholded(tree: &Tree, leaves: &BTreeMap<usize, Counts>, thresholds: &[u64]) -> Vec<Counts> {
    exports(tree, leaves, |level, mut sum| {
        let t = data::threshold_of(thresholds, level);
        sum.retain(|_, n| *n >= t);
        sum
    })
}

fn value_row(name: String, truth: &[(usize, Counts)], held: &[Counts]) -> PolicyRow {
    let (mut pairs, mut hit, mut weight, mut hit_weight, mut bytes) = (0, 0, 0u64, 0u64, 0usize);
    for (c, t) in truth {
        let h = &held[*c];
        pairs += t.len();
        weight += t.values().sum::<u64>();
        for (v, n) in t {
            if h.contains_key(v) {
                hit += 1;
                hit_weight += n;
            }
        }
        bytes += h.keys().map(|v| v.len() + 8).sum::<usize>();
    }
    PolicyRow {
        name,
        root_bytes: bytes as f64,
        recall: hit as f64 / pairs.max(1) as f64,
        weighted_recall: hit_weight as f64 / weight.max(1) as f64,
        precision: 1.0,
    }
}

/// Thresholds, top-K and Bloom filters on the same leaves.
pub fn compare_policies(tree: &Tree, leaves: &BTreeMap<usize, Counts>) -> Vec<PolicyRow> {
    let truth = truth(tree, leaves);
    let mut rows = Vec::new();
    for t in [1u64, 2, 4, 8] {
        let held = thresholded(tree, leaves, &[t]);
        rows.push(value_row(
            format!("threshold {t} at every level"),
            &truth,
            &held,
        ));
    }
    let deepest = tree.depth;
    for t in [2u64, 4] {
        // Only the leaves drop rare values; the levels above keep what reaches them.
        let mut per_level = vec![1; deepest + 1];
        per_level[deepest] = t;
        let held = thresholded(tree, leaves, &per_level);
        rows.push(value_row(
            format!("threshold {t} at the leaves only"),
            &truth,
            &held,
        ));
        // Only the root's children drop: rare values travel up to level 1.
        let mut per_level = vec![1; deepest + 1];
        per_level[1] = t;
        let held = thresholded(tree, leaves, &per_level);
        rows.push(value_row(
            format!("threshold {t} at level 1 only"),
            &truth,
            &held,
        ));
    }
    for k in [100usize, 1000, 10_000] {
        let held = exports(tree, leaves, |_, sum| {
            let mut v: Vec<(super::data::Value, u64)> = sum.into_iter().collect();
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            v.truncate(k);
            v.into_iter().collect()
        });
        rows.push(value_row(format!("top {k} per node"), &truth, &held));
    }
    let all: BTreeSet<&super::data::Value> = truth.iter().flat_map(|(_, t)| t.keys()).collect();
    for bits in [4usize, 8, 16] {
        let (mut right, mut wrong, mut bytes) = (0u64, 0u64, 0usize);
        for (_, t) in &truth {
            let filter = Bloom::of(t.keys(), bits);
            bytes += filter.bytes();
            for v in &all {
                if filter.contains(v) {
                    if t.contains_key(*v) {
                        right += 1;
                    } else {
                        wrong += 1;
                    }
                }
            }
        }
        rows.push(PolicyRow {
            name: format!("Bloom filter, {bits} bits per value"),
            root_bytes: bytes as f64,
            recall: 1.0,
            weighted_recall: 1.0,
            precision: right as f64 / (right + wrong).max(1) as f64,
        });
    }
    rows
}

/// A Bloom filter sized for its values (what a node ORs up the tree is the filter of the
/// union, so one filter of all of a child's values is what the root would hold).
struct Bloom {
    bits: Vec<u64>,
    hashes: u32,
}

impl Bloom {
    fn of<'a>(
        values: impl ExactSizeIterator<Item = &'a super::data::Value>,
        bits_per_value: usize,
    ) -> Self {
        let m = (values.len() * bits_per_value).max(64).next_power_of_two();
        let hashes = ((bits_per_value as f64) * std::f64::consts::LN_2)
            .round()
            .max(1.0) as u32;
        let mut b = Self {
            bits: vec![0; m / 64],
            hashes,
        };
        for v in values {
            let at: Vec<usize> = b.positions(v).collect();
            for i in at {
                b.bits[i / 64] |= 1 << (i % 64);
            }
        }
        b
    }

    fn positions(&self, v: &str) -> impl Iterator<Item = usize> + '_ {
        let mut h = DefaultHasher::new();
        v.hash(&mut h);
        let x = h.finish();
        let (h1, h2) = (x, (x >> 32) | 1);
        let m = self.bits.len() as u64 * 64;
        (0..u64::from(self.hashes)).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) % m) as usize)
    }

    fn contains(&self, v: &str) -> bool {
        self.positions(v)
            .all(|i| self.bits[i / 64] & (1 << (i % 64)) != 0)
    }

    fn bytes(&self) -> usize {
        self.bits.len() * 8
    }
}

fn plot_err(e: impl std::fmt::Display) -> SimError {
    SimError::Setup(format!("plot: {e}"))
}

fn plot_root(spec: &ReportSpec, points: &[Point], path: &Path) -> Result<(), SimError> {
    let root = SVGBackend::new(path, (720, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let ymax = points.iter().map(Point::root_entries).fold(1.0, f64::max) * 200.0;
    // One depth beyond the deepest run.
    let beyond = points.iter().map(|p| p.depth).max().unwrap_or(1) + 1;
    let xmax = (spec.fan_in.max(2) as f64).powi(i32::try_from(beyond).unwrap_or(i32::MAX));
    let xmax_label = if spec.fan_in == 10 {
        format!("10^{beyond}")
    } else {
        format!("{xmax:.0}")
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Root entries against leaves (fit extended to {xmax_label})"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((5f64..xmax * 2.0).log_scale(), (10f64..ymax).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("leaves")
        .y_desc("(value, child) entries at the root")
        .draw()
        .map_err(plot_err)?;
    for (i, &t) in spec.thresholds.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.threshold == t)
            .map(|p| (p.leaves(), p.root_entries().max(1.0)))
            .collect();
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(plot_err)?
            .label(format!("threshold {t}"))
            .legend(move |(x, y)| Circle::new((x, y), 4, color.filled()));
        if let Some(law) = PowerLaw::fit(&pts) {
            let line: Vec<(f64, f64)> = (0..=40)
                .map(|k| 10f64.powf(0.7 + k as f64 * ((xmax * 2.0).log10() - 0.7) / 40.0))
                .map(|x| (x, law.at(x)))
                .collect();
            chart
                .draw_series(LineSeries::new(line, color.stroke_width(1)))
                .map_err(plot_err)?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)
}

/// A figure of a run, when it has one.
type Figure = fn(&Point) -> Option<f64>;

fn plot_times(points: &[Point], path: &Path) -> Result<(), SimError> {
    let root = SVGBackend::new(path, (720, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let t0 = points.first().map_or(1, |p| p.threshold);
    let mine: Vec<&Point> = points.iter().filter(|p| p.threshold == t0).collect();
    let dmax = mine.iter().map(|p| p.depth).max().unwrap_or(1) as f64 + 1.0;
    let ymax = mine
        .iter()
        .flat_map(|p| [p.converged_ms(), p.change_ms()])
        .flatten()
        .fold(10.0, f64::max)
        * 1.3;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Convergence and change-to-root against depth",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..dmax, 0f64..ymax)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("depth")
        .y_desc("simulated ms")
        .draw()
        .map_err(plot_err)?;
    let series: [(&str, Figure, RGBColor); 2] = [
        ("convergence from cold", Point::converged_ms, BLUE),
        ("change to root (median)", Point::change_ms, RED),
    ];
    for (name, f, color) in series {
        let pts: Vec<(f64, f64)> = mine
            .iter()
            .filter_map(|p| f(p).map(|v| (p.depth as f64, v)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(plot_err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(plot_err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)
}

fn plot_policies(rows: &[PolicyRow], path: &Path) -> Result<(), SimError> {
    let root = SVGBackend::new(path, (760, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let xmax = rows.iter().map(|r| r.root_bytes).fold(1.0, f64::max) * 3.0;
    let xmin = rows
        .iter()
        .map(|r| r.root_bytes)
        .fold(f64::MAX, f64::min)
        .max(1.0)
        / 3.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Export policies: root bytes against recall",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin..xmax).log_scale(), 0f64..1.05)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("bytes the root holds")
        .y_desc("recall (weighted by objects)")
        .draw()
        .map_err(plot_err)?;
    for (i, r) in rows.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        // A Bloom filter's price is its false referrals: drawn at its precision.
        let y = if r.name.starts_with("Bloom") {
            r.precision
        } else {
            r.weighted_recall
        };
        chart
            .draw_series(std::iter::once(Circle::new(
                (r.root_bytes, y),
                5,
                color.filled(),
            )))
            .map_err(plot_err)?
            .label(if r.name.starts_with("Bloom") {
                format!("{} (precision)", r.name)
            } else {
                r.name.clone()
            })
            .legend(move |(x, y)| Circle::new((x, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_reads_back_as_written() {
        let p = Point {
            depth: 3,
            threshold: 4,
            row: Row {
                nodes: 1111,
                leaves: 1000,
                root_matched: 245,
                root_expected: 245,
                root_extra: 0,
                all_exact: true,
                root_bytes: 8730.5,
                hint_bytes: 9180.25,
                converged_ms: Some(200.0),
                changes_ms: vec![Some(200.0), None, Some(300.0)],
                wall_s: 3.8,
                cpu_s: (2.5, 1.25),
                rss_mib: 211,
            },
        };
        assert_eq!(Point::parse(&p.to_line()), Ok(p.clone()));
        let none = Point {
            row: Row {
                converged_ms: None,
                changes_ms: Vec::new(),
                ..p.row.clone()
            },
            ..p.clone()
        };
        assert_eq!(Point::parse(&none.to_line()), Ok(none));
        // A damaged line says what is wrong.
        let line = p.to_line().replacen("1111", "many", 1);
        assert!(Point::parse(&line).unwrap_err().contains("nodes \"many\""));
        assert!(Point::parse("1\t2").unwrap_err().contains("2 fields"));
    }

    #[test]
    fn a_report_is_written_after_each_run_and_taken_up_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = ReportSpec {
            fan_in: 2,
            max_depth: 1,
            thresholds: vec![1],
            seed: 5,
            data: DataSpec {
                objects: 20,
                vocabulary: 30,
                zipf: 1.0,
                tail: 0.3,
            },
            resume: false,
            progress: false,
        };
        write_report(&spec, dir.path()).unwrap();
        let points = dir.path().join(POINTS_FILE);
        let first = std::fs::read_to_string(&points).unwrap();
        assert_eq!(first.lines().count(), 2, "{first}");
        assert!(dir.path().join("scale.md").is_file());
        // One level deeper, resumed: the depth-1 run is kept as it was, depth 2 is added.
        spec.max_depth = 2;
        spec.resume = true;
        let md = write_report(&spec, dir.path()).unwrap();
        let second = std::fs::read_to_string(&points).unwrap();
        assert!(second.starts_with(&first), "{second}");
        assert_eq!(second.lines().count(), 3);
        assert!(md.contains("| 2 | 7 | 1 |"), "{md}");
        assert!(!md.contains("Partial report"));
        // Points of another spec are not taken up.
        spec.seed = 6;
        let err = write_report(&spec, dir.path()).unwrap_err().to_string();
        assert!(err.contains("another spec"), "{err}");
    }

    #[test]
    fn power_law_and_line_fits() {
        let pts: Vec<(f64, f64)> = [10.0, 100.0, 1000.0]
            .iter()
            .map(|&x: &f64| (x, 3.0 * x.powf(0.8)))
            .collect();
        let law = PowerLaw::fit(&pts).unwrap();
        assert!((law.b - 0.8).abs() < 1e-9 && (law.a - 3.0).abs() < 1e-9);
        let (m, c) = linear(&[(1.0, 5.0), (2.0, 7.0), (3.0, 9.0)]).unwrap();
        assert!((m - 2.0).abs() < 1e-12 && (c - 3.0).abs() < 1e-12);
        assert!(linear(&[(1.0, 1.0)]).is_none());
    }

    #[test]
    fn policies_trade_bytes_for_recall() {
        let tree = Tree::new(3, 2, 1);
        let spec = DataSpec {
            objects: 200,
            vocabulary: 300,
            zipf: 1.0,
            tail: 0.3,
        };
        let draws = data::Draws::new(&spec);
        let leaves: BTreeMap<usize, Counts> = (4..13)
            .map(|id| (id, data::leaf_counts(&spec, 9, id, &draws)))
            .collect();
        let rows = compare_policies(&tree, &leaves);
        let get = |n: &str| rows.iter().find(|r| r.name == n).unwrap();
        let all = get("threshold 1 at every level");
        assert_eq!((all.recall, all.precision), (1.0, 1.0));
        let t4 = get("threshold 4 at every level");
        assert!(t4.root_bytes < all.root_bytes && t4.recall < 1.0);
        // Weighted recall forgives dropping rare values.
        assert!(t4.weighted_recall > t4.recall);
        let bloom = get("Bloom filter, 16 bits per value");
        assert_eq!(bloom.recall, 1.0);
        assert!(bloom.precision > 0.99 && bloom.precision <= 1.0);
        assert!(get("Bloom filter, 4 bits per value").precision < bloom.precision);
    }
}
