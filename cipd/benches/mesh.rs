//! The mesh scenario: a three-level tree of `cipd` nodes in one process, timed from start to a
//! converged root, then a leaf's change timed to the root.
//!
//! Run with `cargo bench -p cipd --bench mesh` (about two seconds once built):
//!
//! ```sh
//! MESH_NODES=30 MESH_OBJECTS=200 MESH_CHANGES=10 cargo bench -p cipd --bench mesh
//! ```
//!
//! The tree: one root, `round(sqrt(MESH_NODES - 1))` mids and the other nodes leaves, dealt
//! round-robin over the mids. Every node is a [`cipd::daemon::Daemon`] started in this
//! process on loopback, with its own temporary directory, and every node starts once, with
//! its final configuration (no reloads of the configuration):
//!
//! * a leaf holds a generated collection of `MESH_OBJECTS` DOCUMENT objects (one by a
//!   `Marker-Leaf-NNN` author of its own, a fifth by twelve authors every leaf shares, the
//!   rest by authors of its own) and lists its mid with role `poller`;
//! * a mid lists its leaves with role `poll` and the root with role `poller`;
//! * the root lists the mids with role `poll`.
//!
//! Every poll interval is an hour, so after the start-up polls only `datachanged` moves a
//! change up the tree (as in the integration test `datachanged_propagates_up_the_hierarchy`).
//!
//! A parent needs its children's CIP addresses and a child its parent's. The nodes start
//! bottom-up, a level at a time (the nodes of a level concurrently): leaves, then mids, then
//! the root, so every start-up poll finds its peer listening and no poll fails into a
//! back-off. Leaves listen on port 0 (the mids are configured with the bound addresses);
//! the mids' and the root's CIP ports are picked before anything starts, as free ports
//! below the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), so no
//! connection's source port or `port 0` bind (of this process or another) can take one
//! before its node binds it. A leaf's start-up `datachanged` to its not yet started mid,
//! and a mid's to the root, are refused connections, harmlessly: the parent polls at start.
//!
//! Figures:
//!
//! 1. **start to converged root**: from the first node's start until the root's routing
//!    table holds every mid and a query for every leaf's marker at the root refers to that
//!    leaf's mid; and the same from the moment the root (the last node) started.
//! 2. **leaf change to root**: `MESH_CHANGES` times, on different leaves: the leaf's
//!    collection file is rewritten with one more object by a new author and the leaf
//!    reloaded ([`cipd::node::Node::reload`]; the leaves start without a configuration path,
//!    so a reload rescans their collections only); the time until the root refers to the
//!    leaf's mid for that author (leaf → `datachanged` → mid polls the leaf → mid's hint
//!    rebuilt → `datachanged` → root polls the mid). Min, median and max against the target
//!    (2 s), and for each change where the time went: the reload, the leaf's out-bound hint
//!    rebuilt, the mid referring to the leaf, the mid's out-bound hint rebuilt, the root
//!    referring to the mid (and the root table's index segments before and after: a
//!    replace that merges the table's segments shows as a slower last step).
//! 3. The process's `VmRSS` and `VmHWM` (every node, the runtime and the bench together),
//!    and the traffic the run took (polls, `datachanged`, hints, out-bound builds).
//!
//! Conditions are re-checked on every change of the root's status and at least every
//! millisecond; a condition not met within its timeout stops the run with the state seen.
//! `RUST_LOG` (e.g. `RUST_LOG=cipd=info`) prints the nodes' logs, interleaved.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `MESH_NODES` | 30 | nodes in the tree (at least 3) |
//! | `MESH_OBJECTS` | 200 | objects in each leaf's collection |
//! | `MESH_CHANGES` | 10 | leaf changes timed to the root |

mod common;
use common::env_or;

use std::cell::Cell;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cipd::daemon::{Daemon, RunningDaemon, StartOptions};
use cipd::model::config::Config;
use cipd::node::{Node, Status};
use tempfile::TempDir;
use tokio::sync::watch;
use tokio::task::JoinSet;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Prefix of every node's DSI (an example OID).
const DSI_PREFIX: &str = "1.3.6.1.4.1.99999.77";
/// Authors every leaf's collection shares.
const SHARED: [&str; 12] = [
    "Garcia",
    "Okafor",
    "Lindqvist",
    "Becker",
    "Tanaka",
    "Moreau",
    "Novak",
    "Haddad",
    "Silva",
    "Kowalski",
    "Ivanova",
    "Mensah",
];
/// Longest wait for the root to converge.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for one change to reach the root.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// The target of a leaf change's way to the root.
const TARGET: Duration = Duration::from_secs(2);
/// Re-check period of the waits (besides the root's status changes).
const RECHECK: Duration = Duration::from_millis(1);

fn main() {
    let settings = Settings::from_env();
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the runtime starts");
    runtime.block_on(run(settings));
}

// ---- settings --------------------------------------------------------------------------

struct Settings {
    nodes: usize,
    objects: usize,
    changes: usize,
    mids: usize,
    cpus: usize,
}

impl Settings {
    fn from_env() -> Self {
        let nodes: usize = env_or("MESH_NODES", 30);
        let objects: usize = env_or("MESH_OBJECTS", 200);
        let changes: usize = env_or("MESH_CHANGES", 10);
        assert!(
            nodes >= 3,
            "MESH_NODES must be at least 3 (root, mid, leaf)"
        );
        assert!(objects >= 1, "MESH_OBJECTS must be at least 1");
        assert!(changes >= 1, "MESH_CHANGES must be at least 1");
        // About sqrt(N - 1) mids, and at least one leaf per mid.
        let mids = ((((nodes - 1) as f64).sqrt().round()) as usize).clamp(1, (nodes - 1) / 2);
        Self {
            nodes,
            objects,
            changes,
            mids,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    fn leaves(&self) -> usize {
        self.nodes - 1 - self.mids
    }
}

// ---- the tree ---------------------------------------------------------------------------

fn root_dsi() -> String {
    format!("{DSI_PREFIX}.1.1")
}

fn mid_dsi(j: usize) -> String {
    format!("{DSI_PREFIX}.2.{}", j + 1)
}

fn leaf_dsi(i: usize) -> String {
    format!("{DSI_PREFIX}.3.{}", i + 1)
}

fn marker(i: usize) -> String {
    format!("Marker-Leaf-{i:03}")
}

/// The mid leaf `i` hangs under.
fn mid_of(i: usize, mids: usize) -> usize {
    i % mids
}

/// A `[[peer]]` of a generated configuration.
struct PeerEntry {
    name: String,
    addr: SocketAddr,
    role: &'static str,
    dsi: String,
}

/// The configuration of a node whose files live in `dir`, listening for CIP on `cip_port`
/// (0: any free port).
fn config_text(
    dsi: &str,
    description: &str,
    dir: &Path,
    cip_port: u16,
    collection: bool,
    peers: &[PeerEntry],
) -> String {
    let mut t = format!(
        r#"data_dir = {data:?}
[node]
dsi = "{dsi}"
description = "{description}"
[listen]
cip = ["127.0.0.1:{cip_port}"]
http = ["127.0.0.1:0"]
[export]
attributes = ["DOCUMENT:Author", "DOCUMENT:Title"]
[limits]
watch_interval = "0s"
connect_timeout = "2s"
poll_timeout = "5s"
shutdown_grace = "5s"
"#,
        data = dir.join("spool").display().to_string(),
    );
    if collection {
        let _ = write!(
            t,
            "[[collection]]\nname = \"docs\"\ntype = \"soif\"\npath = {:?}\n",
            dir.join("docs.soif").display().to_string()
        );
    }
    for p in peers {
        let _ = write!(
            t,
            "[[peer]]\nname = {:?}\nhost = \"{}\"\nport = {}\nrole = [{:?}]\ndsi = {:?}\n\
             poll_interval = \"1h\"\n",
            p.name,
            p.addr.ip(),
            p.addr.port(),
            p.role,
            p.dsi
        );
    }
    t
}

/// SOIF of one DOCUMENT per author.
fn collection_text(leaf: usize, authors: &[String]) -> String {
    let mut out = String::new();
    for (j, a) in authors.iter().enumerate() {
        let title = format!("Report {j} from leaf {leaf}");
        let _ = write!(
            out,
            "@DOCUMENT {{ http://leaf{leaf}.example/doc/{j}\nAuthor{{{}}}:\t{a}\n\
             Title{{{}}}:\t{title}\n}}\n\n",
            a.len(),
            title.len()
        );
    }
    out
}

/// The authors of leaf `i`'s generated collection.
fn leaf_authors(i: usize, objects: usize) -> Vec<String> {
    (0..objects)
        .map(|j| {
            if j == 0 {
                marker(i)
            } else if j % 5 == 0 {
                SHARED[(i + j / 5) % SHARED.len()].to_owned()
            } else {
                format!("Writer {i:03}-{j:04}")
            }
        })
        .collect()
}

/// `n` free loopback ports below the ephemeral range, held open together while they are
/// picked (so they differ) and released for the nodes to bind.
fn reserve_ports(n: usize) -> Vec<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let mut rng = fastrand::Rng::new();
    let mut held = Vec::new();
    let mut attempts = 0;
    while held.len() < n {
        attempts += 1;
        assert!(attempts < 10_000, "cannot find {n} free loopback ports");
        // An ephemeral range reaching down to 12000 or lower leaves no room below it: any
        // free port the kernel hands out then.
        let port = if low > 12_000 {
            rng.u16(10_000..low)
        } else {
            0
        };
        if let Ok(l) = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            held.push(l);
        }
    }
    held.iter()
        .map(|l| l.local_addr().expect("a bound address").port())
        .collect()
}

/// One running node of the tree.
struct MeshNode {
    name: String,
    dsi: String,
    dir: TempDir,
    daemon: RunningDaemon,
}

impl MeshNode {
    fn node(&self) -> &Arc<Node> {
        self.daemon.node()
    }

    fn status(&self) -> Status {
        self.node().status_snapshot()
    }

    /// True when a query for `author` here refers to `dsi`.
    fn refers(&self, author: &str, dsi: &str) -> bool {
        self.node()
            .referrals(&format!("DOCUMENT:Author={author}"), false, None)
            .is_ok_and(|a| a.referrals.iter().any(|r| r.dsi == dsi))
    }
}

/// Writes `config` into `dir` and starts a node from it (no configuration path: a reload
/// rescans the collections only).
async fn start_node(name: String, dsi: String, dir: TempDir, config: String) -> MeshNode {
    let parsed = Config::from_toml(&config)
        .unwrap_or_else(|e| panic!("{name}: generated configuration refused: {e}\n{config}"));
    let daemon = Daemon::start_with(parsed, StartOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{name} does not start: {e}"));
    MeshNode {
        name,
        dsi,
        dir,
        daemon,
    }
}

/// Starts the nodes of one level concurrently; returns them in order.
async fn start_level(specs: Vec<(String, String, TempDir, String)>) -> Vec<MeshNode> {
    let mut set = JoinSet::new();
    for (k, (name, dsi, dir, config)) in specs.into_iter().enumerate() {
        set.spawn(async move { (k, start_node(name, dsi, dir, config).await) });
    }
    let mut started: Vec<(usize, MeshNode)> = Vec::new();
    while let Some(r) = set.join_next().await {
        started.push(r.expect("a node start panicked"));
    }
    started.sort_by_key(|(k, _)| *k);
    started.into_iter().map(|(_, n)| n).collect()
}

/// Waits until `f` holds, re-checking on every change of `rx` and every [`RECHECK`];
/// panics with `what` and `state()` after `timeout`.
async fn wait_until(
    what: &str,
    timeout: Duration,
    rx: &mut watch::Receiver<Status>,
    mut f: impl FnMut() -> bool,
    state: impl Fn() -> String,
) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}; {}",
            state()
        );
        let _ = tokio::time::timeout(RECHECK, rx.changed()).await;
    }
}

// ---- the run ---------------------------------------------------------------------------

async fn run(s: Settings) {
    let leaves_n = s.leaves();
    println!("cipd mesh benchmark");
    println!(
        "  MESH_NODES={} MESH_OBJECTS={} MESH_CHANGES={}: 1 root, {} mids, {} leaves ({}-{} per \
         mid), poll intervals 1 h (changes move by datachanged); {} CPUs, one process",
        s.nodes,
        s.objects,
        s.changes,
        s.mids,
        leaves_n,
        leaves_n / s.mids,
        leaves_n.div_ceil(s.mids),
        s.cpus
    );

    // The mids' and the root's ports, known before anything starts.
    let ports = reserve_ports(s.mids + 1);
    let (mid_ports, root_port) = (&ports[..s.mids], ports[s.mids]);
    let loopback = |port: u16| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut authors: Vec<Vec<String>> = (0..leaves_n).map(|i| leaf_authors(i, s.objects)).collect();
    let mut leaf_specs = Vec::new();
    for (i, a) in authors.iter().enumerate() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("docs.soif"), collection_text(i, a))
            .expect("write a collection");
        let j = mid_of(i, s.mids);
        let parent = PeerEntry {
            name: format!("mid{j}"),
            addr: loopback(mid_ports[j]),
            role: "poller",
            dsi: mid_dsi(j),
        };
        let config = config_text(
            &leaf_dsi(i),
            &format!("mesh bench leaf {i}"),
            dir.path(),
            0,
            true,
            &[parent],
        );
        leaf_specs.push((format!("leaf{i}"), leaf_dsi(i), dir, config));
    }

    // ---- 1. start to converged root -----------------------------------------------------
    let t0 = Instant::now();
    let leaves = start_level(leaf_specs).await;
    let leaves_up = t0.elapsed();
    let mut mid_specs = Vec::new();
    for (j, &port) in mid_ports.iter().enumerate() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut peers: Vec<PeerEntry> = leaves
            .iter()
            .enumerate()
            .filter(|(i, _)| mid_of(*i, s.mids) == j)
            .map(|(_, l)| PeerEntry {
                name: l.name.clone(),
                addr: l.daemon.cip_addr().expect("a CIP listener"),
                role: "poll",
                dsi: l.dsi.clone(),
            })
            .collect();
        peers.push(PeerEntry {
            name: "root".to_owned(),
            addr: loopback(root_port),
            role: "poller",
            dsi: root_dsi(),
        });
        let config = config_text(
            &mid_dsi(j),
            &format!("mesh bench mid {j}"),
            dir.path(),
            port,
            false,
            &peers,
        );
        mid_specs.push((format!("mid{j}"), mid_dsi(j), dir, config));
    }
    let mids = start_level(mid_specs).await;
    let mids_up = t0.elapsed();
    let root_dir = tempfile::tempdir().expect("a temporary directory");
    let root_peers: Vec<PeerEntry> = mids
        .iter()
        .enumerate()
        .map(|(j, m)| PeerEntry {
            name: m.name.clone(),
            addr: loopback(mid_ports[j]),
            role: "poll",
            dsi: m.dsi.clone(),
        })
        .collect();
    let root_config = config_text(
        &root_dsi(),
        "mesh bench root",
        root_dir.path(),
        root_port,
        false,
        &root_peers,
    );
    let root = start_node("root".to_owned(), root_dsi(), root_dir, root_config).await;
    let root_up = t0.elapsed();
    let last_started = Instant::now();

    let mut root_rx = root.daemon.status();
    // When every mid first held all its leaves' hints (watched from the root's start on:
    // a mid needs its leaves' polls and their hints rebuilt first, which takes longer).
    let mids_full = Cell::new(None);
    let note_mids = || {
        if mids_full.get().is_none()
            && mids.iter().all(|m| {
                let st = m.status();
                st.peers_imported >= st.peers_expected
            })
        {
            mids_full.set(Some(t0.elapsed()));
        }
    };
    let mids_in_table = {
        let n = s.mids as u64;
        wait_until(
            "every mid in the root's table",
            CONVERGE_TIMEOUT,
            &mut root_rx,
            || {
                note_mids();
                root.status().table_peers >= n
            },
            || format!("root status {:?}", root.status()),
        )
        .await;
        t0.elapsed()
    };
    let all_markers = |root: &MeshNode| {
        (0..leaves_n).all(|i| root.refers(&marker(i), &mid_dsi(mid_of(i, s.mids))))
    };
    wait_until(
        "every leaf's marker referred to its mid at the root",
        CONVERGE_TIMEOUT,
        &mut root_rx,
        || {
            note_mids();
            all_markers(&root)
        },
        || {
            let missing: Vec<String> = (0..leaves_n)
                .filter(|&i| !root.refers(&marker(i), &mid_dsi(mid_of(i, s.mids))))
                .map(marker)
                .collect();
            format!(
                "missing at the root: {missing:?}; root status {:?}",
                root.status()
            )
        },
    )
    .await;
    let converged = t0.elapsed();
    let from_last = last_started.elapsed();
    println!(
        "start: {leaves_n} leaves up after {}, {} mids after {}, the root after {}",
        ms(leaves_up),
        s.mids,
        ms(mids_up),
        ms(root_up)
    );
    let mids_full = match mids_full.get() {
        // Seen at the first check: it may have held earlier.
        Some(d) if d <= root_up + RECHECK => format!("by {}", ms(d)),
        Some(d) => format!("at {}", ms(d)),
        None => "not yet".to_owned(),
    };
    println!(
        "start to converged root: {} (every mid holding a hint of each of its leaves \
         {mids_full}, every mid in the root's table at {}, every leaf's marker referred at {})",
        ms(converged),
        ms(mids_in_table),
        ms(converged)
    );
    println!(
        "last node (the root) started to converged root: {}",
        ms(from_last)
    );
    let shared_at_root = root
        .node()
        .referrals(&format!("DOCUMENT:Author={}", SHARED[0]), false, None)
        .map_or(0, |a| a.referrals.len());
    println!(
        "check: DOCUMENT:Author={} at the root refers to {shared_at_root} of {} mids",
        SHARED[0], s.mids
    );

    // ---- 2. leaf change to root ---------------------------------------------------------
    let stride = (7..).find(|&k| gcd(k, leaves_n) == 1).unwrap_or(1);
    let mut totals = Vec::new();
    let mut rows = Vec::new();
    for round in 0..s.changes {
        let i = (round * stride) % leaves_n;
        let j = mid_of(i, s.mids);
        let (leaf, mid) = (&leaves[i], &mids[j]);
        let author = format!("Change-{round:02}-Leaf-{i:03}");
        assert!(
            !root.refers(&author, &mid.dsi),
            "{author} referred before the change"
        );
        let segments_before = root.node().table().stats().segments;
        let leaf_gen = leaf.status().outbound_generation;
        let mid_gen = mid.status().outbound_generation;
        authors[i].push(author.clone());

        let started = Instant::now();
        std::fs::write(
            leaf.dir.path().join("docs.soif"),
            collection_text(i, &authors[i]),
        )
        .expect("rewrite a collection");
        let report = leaf.node().reload().await.expect("the leaf reloads");
        assert!(
            !report.collections_reloaded.is_empty(),
            "the reload did not see the changed collection"
        );
        let reloaded = started.elapsed();
        // Cells: the condition sets them, the timeout's report reads them.
        let (leaf_built, at_mid, mid_built) = (Cell::new(None), Cell::new(None), Cell::new(None));
        wait_until(
            &format!("{author} referred to {} at the root", mid.name),
            CHANGE_TIMEOUT,
            &mut root_rx,
            || {
                let now = Some(started.elapsed());
                if leaf_built.get().is_none() && leaf.status().outbound_generation > leaf_gen {
                    leaf_built.set(now);
                }
                if at_mid.get().is_none() && mid.refers(&author, &leaf.dsi) {
                    at_mid.set(now);
                }
                if mid_built.get().is_none() && mid.status().outbound_generation > mid_gen {
                    mid_built.set(now);
                }
                root.refers(&author, &mid.dsi)
            },
            || {
                format!(
                    "leaf hint rebuilt {:?}, at the mid {:?}, mid hint rebuilt {:?}; leaf {:?}; \
                     mid {:?}; root {:?}",
                    leaf_built.get(),
                    at_mid.get(),
                    mid_built.get(),
                    leaf.status(),
                    mid.status(),
                    root.status()
                )
            },
        )
        .await;
        let total = started.elapsed();
        totals.push(total);
        let segments_after = root.node().table().stats().segments;
        let opt = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), ms);
        rows.push(format!(
            "  change {:>2}: {author} on leaf{i} under mid{j}: reload done {}, leaf hint \
             rebuilt {}, at the mid {}, mid hint rebuilt {}, at the root {} (root table \
             segments {segments_before} -> {segments_after})",
            round + 1,
            ms(reloaded),
            opt(leaf_built.get()),
            opt(at_mid.get()),
            opt(mid_built.get()),
            ms(total)
        ));
    }
    let mut sorted = totals.clone();
    sorted.sort_unstable();
    let median = if sorted.len() % 2 == 1 {
        sorted[sorted.len() / 2]
    } else {
        (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2
    };
    let max = sorted[sorted.len() - 1];
    println!(
        "leaf change to root ({} changes on {} leaves): min {}, median {}, max {} (target < {}: \
         {})",
        totals.len(),
        s.changes.min(leaves_n),
        ms(sorted[0]),
        ms(median),
        ms(max),
        ms(TARGET),
        if max < TARGET { "met" } else { "MISSED" }
    );
    for r in &rows {
        println!("{r}");
    }

    // ---- 3. memory and traffic ----------------------------------------------------------
    let all: Vec<&MeshNode> = leaves
        .iter()
        .chain(mids.iter())
        .chain(std::iter::once(&root))
        .collect();
    let sum = |f: fn(&Status) -> u64| all.iter().map(|n| f(&n.status())).sum::<u64>();
    println!(
        "traffic: {} polls ok, {} failed; datachanged {} sent, {} received; {} hints \
         accepted, {} refused; {} out-bound builds; {} refusals of unknown peers",
        sum(|s| s.polls_ok),
        sum(|s| s.polls_failed),
        sum(|s| s.datachanged_sent),
        sum(|s| s.datachanged_received),
        sum(|s| s.hints_accepted),
        sum(|s| s.hints_rejected),
        sum(|s| s.outbound_builds),
        sum(|s| s.unknown_peer_refusals),
    );
    let (rss, hwm) = memory_kib();
    println!(
        "process memory ({} nodes, runtime and bench): VmRSS {:.1} MiB, VmHWM {:.1} MiB \
         ({:.2} MiB per node)",
        s.nodes,
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0,
        rss as f64 / 1024.0 / s.nodes as f64
    );

    let stopping = Instant::now();
    let mut set = JoinSet::new();
    let nodes = leaves.into_iter().chain(mids).chain(std::iter::once(root));
    for n in nodes {
        set.spawn(async move {
            let MeshNode {
                name, dir, daemon, ..
            } = n;
            let clean = daemon.shutdown().await;
            drop(dir);
            (name, clean)
        });
    }
    let mut unclean = Vec::new();
    while let Some(r) = set.join_next().await {
        let (name, clean) = r.expect("a shutdown panicked");
        if !clean {
            unclean.push(name);
        }
    }
    println!(
        "stopped {} nodes in {}{}",
        s.nodes,
        ms(stopping.elapsed()),
        if unclean.is_empty() {
            String::new()
        } else {
            format!("; past the grace period: {unclean:?}")
        }
    );
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// `VmRSS` and `VmHWM` of this process, in KiB (0 when unknown).
fn memory_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}
