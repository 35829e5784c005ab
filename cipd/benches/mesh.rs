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
//! 4. **search** (unless `MESH_SEARCH=0`): the mesh-wide search (`GET /v1/search`, the node
//!    chasing referrals itself, down its table and up to the nodes that poll it) against the
//!    client-side chase of `cipctl query --follow` ([`cipd::ctl::query::follow`]). First the
//!    wait until every leaf and mid has learnt the node that polls it (its one
//!    [`cipd::node::Node::upstreams`]), and the round-trip time `RTT`: the median of a
//!    `GET /healthz` to each node over a kept-alive connection. Then:
//!    * **cold, from the root**: queries never asked before (`Author=` each leaf's marker,
//!      held by that leaf; `Author=` each shared author, held by every leaf; three
//!      substrings, `Title~` and `Author~`, matching across leaves), each with `limit=1000`
//!      so every matching object of the mesh comes back. For each, `follow` and one search
//!      from the root are timed, which goes first alternating, and the objects each found
//!      (holder DSI, URL) compared with each other and with the generated collections.
//!      `follow` builds its HTTP client on every call, as `cipctl` does; that cost is shown
//!      apart. Min, median, p99 and max of each, the ratio of the medians (target at most
//!      0.5; and of the totals), the search's p99 against `2 x RTT + 50 ms` (depth 2: root,
//!      mid, leaf), the medians by kind of query, and where a marker's search spends its
//!      time, sub-query by sub-query (the answer's `nodes`), beside a leaf's own lookups
//!      called in-process;
//!    * **cold, from a leaf**: the same queries spelt `DOCUMENT:Author=...` (strings no node
//!      has seen, so every cache is cold), each searched from another leaf than the last
//!      (for a marker, a leaf under another mid): the search goes up, up, down, down, so its
//!      target is `4 x RTT + 50 ms`; `follow` from that leaf is timed too and finds only
//!      the leaf's own objects (a leaf's table is empty: no referrals);
//!    * **warm**: one query searched 2,000 times in a row from the root and from a leaf
//!      (p50 and p99 of the client's round trip, target p99 at most 5 ms); then a closed
//!      loop of 64 concurrent clients for 3 s against the root's `/v1/search` (warm, four
//!      queries) and the same loop against its `/v1/referrals` (same queries): searches
//!      and referral answers per second, their ratio (target at least 0.5);
//!    * **sub-queries**: over every cold search, the mean, p99 and max of the answer's
//!      `subqueries`, the partial answers (target 0) and the most nodes one search asked;
//!    * the process's memory after the phase.
//!
//!    A search whose objects differ from the expected ones, or that comes back partial, is
//!    listed with what differed and what it left unchased. The bench's client is on
//!    loopback, as the nodes' peers are, so `search.rate` does not limit it.
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
//! | `MESH_SEARCH` | 1 | 0: skip the search phase |

mod common;
use common::env_or;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cipd::ctl::query::{ClientTlsArgs, QueryArgs, Visit, follow, get_json_with, percent_encode};
use cipd::daemon::{Daemon, RunningDaemon, StartOptions};
use cipd::model::answer::SearchAnswer;
use cipd::model::config::Config;
use cipd::model::status::Status;
use cipd::node::Node;
use cipd::sys::http::header::HeaderMap;
use cipd::sys::http::{FetchLimits, HttpClient};
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
    search: bool,
    mids: usize,
    cpus: usize,
}

impl Settings {
    fn from_env() -> Self {
        let nodes: usize = env_or("MESH_NODES", 30);
        let objects: usize = env_or("MESH_OBJECTS", 200);
        let changes: usize = env_or("MESH_CHANGES", 10);
        let search = env_or::<u32>("MESH_SEARCH", 1) != 0;
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
            search,
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
        let title = title(leaf, j);
        let _ = write!(
            out,
            "@DOCUMENT {{ {}\nAuthor{{{}}}:\t{a}\n\
             Title{{{}}}:\t{title}\n}}\n\n",
            object_url(leaf, j),
            a.len(),
            title.len()
        );
    }
    out
}

/// The URL of object `j` of leaf `leaf`'s collection.
fn object_url(leaf: usize, j: usize) -> String {
    format!("http://leaf{leaf}.example/doc/{j}")
}

/// The title of object `j` of leaf `leaf`'s collection.
fn title(leaf: usize, j: usize) -> String {
    format!("Report {j} from leaf {leaf}")
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

    /// The node's HTTP front-end, `http://127.0.0.1:PORT`.
    fn http_url(&self) -> String {
        let addr = self.daemon.http_addr().expect("an HTTP listener");
        format!("http://{addr}")
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

    // ---- 4. search ----------------------------------------------------------------------
    if s.search {
        search_phase(&s, &root, &mids, &leaves, &authors).await;
    }

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

// ---- the search phase ------------------------------------------------------------------

/// Objects a cold search asks for (`limit`): every matching object of the mesh.
const SEARCH_LIMIT: usize = 1000;
/// Longest the bench waits for one HTTP answer (or one `follow`'s request).
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// `GET /healthz` round trips to each node for the RTT.
const RTT_SAMPLES: usize = 20;
/// Searches in a row of each warm series.
const WARM_REPEATS: usize = 2000;
/// Concurrent clients of the throughput loops.
const LOAD_CLIENTS: usize = 64;
/// How long each throughput loop runs.
const LOAD_TIME: Duration = Duration::from_secs(3);
/// Queries of the throughput loops (shared authors, asked cold before: warm).
const LOAD_QUERIES: usize = 4;
/// Target of a cold search's median over `follow`'s.
const COLD_RATIO_TARGET: f64 = 0.5;
/// The cold target is `depth x RTT + COLD_SLACK`.
const COLD_SLACK: Duration = Duration::from_millis(50);
/// Target of a warm search's p99.
const WARM_P99_TARGET: Duration = Duration::from_millis(5);
/// Target of searches per second over referral answers per second.
const THROUGHPUT_RATIO_TARGET: f64 = 0.5;

/// How a probe's value is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Exact,
    Substring,
}

/// One query of the cold series.
struct Probe {
    /// `marker`, `shared` or `substring`.
    kind: &'static str,
    attr: &'static str,
    op: Op,
    value: String,
}

/// An object as both chases name it: its holder's DSI and its URL.
type ObjectKey = (String, String);

impl Probe {
    /// The query, with the template (`DOCUMENT:`) when `template`.
    fn text(&self, template: bool) -> String {
        format!(
            "{}{}{}{}",
            if template { "DOCUMENT:" } else { "" },
            self.attr,
            if self.op == Op::Exact { '=' } else { '~' },
            self.value
        )
    }

    /// The objects of the generated collections it matches.
    fn expected(&self, authors: &[Vec<String>]) -> BTreeSet<ObjectKey> {
        let needle = self.value.to_ascii_lowercase();
        let mut out = BTreeSet::new();
        for (i, list) in authors.iter().enumerate() {
            for (j, a) in list.iter().enumerate() {
                let value = if self.attr == "Title" {
                    title(i, j)
                } else {
                    a.clone()
                };
                let hit = match self.op {
                    Op::Exact => value.eq_ignore_ascii_case(&self.value),
                    Op::Substring => value.to_ascii_lowercase().contains(&needle),
                };
                if hit {
                    out.insert((leaf_dsi(i), object_url(i, j)));
                }
            }
        }
        out
    }
}

/// The cold series' queries: every leaf's marker, every shared author, three substrings
/// that match across leaves.
fn probes(leaves: usize) -> Vec<Probe> {
    let exact = |kind, value: String| Probe {
        kind,
        attr: "Author",
        op: Op::Exact,
        value,
    };
    let mut out: Vec<Probe> = (0..leaves).map(|i| exact("marker", marker(i))).collect();
    out.extend(SHARED.iter().map(|a| exact("shared", (*a).to_owned())));
    for (attr, value) in [
        ("Title", "Report 7 from"),
        ("Author", "-019"),
        ("Author", "Writer 02"),
    ] {
        out.push(Probe {
            kind: "substring",
            attr,
            op: Op::Substring,
            value: value.to_owned(),
        });
    }
    out
}

/// One cold search and the `follow` beside it.
struct ColdRun {
    probe: usize,
    /// The node asked.
    from: String,
    search: Duration,
    follow: Duration,
    answer: SearchAnswer,
    /// What `follow` found, and at how many nodes.
    followed: BTreeSet<ObjectKey>,
    visits: usize,
}

fn search_path(q: &str) -> String {
    format!("/v1/search?q={}&limit={SEARCH_LIMIT}", percent_encode(q))
}

/// One search of `q` at `server`, timed from the request to the parsed answer.
async fn timed_search(client: &HttpClient, server: &str, q: &str) -> (SearchAnswer, Duration) {
    let started = Instant::now();
    let answer: SearchAnswer = get_json_with(client, server, &search_path(q), HTTP_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("search {q:?} at {server}: {e:#}"));
    (answer, started.elapsed())
}

/// `cipctl query --follow --json` of `q` from `server`, timed.
async fn timed_follow(server: &str, q: &str) -> (Vec<Visit>, Duration) {
    let args = QueryArgs {
        server: server.to_owned(),
        query: q.to_owned(),
        json: true,
        possible: false,
        follow: true,
        limit: None,
        timeout: HTTP_TIMEOUT,
        tls: ClientTlsArgs::default(),
    };
    let started = Instant::now();
    let visits = follow(&args)
        .await
        .unwrap_or_else(|e| panic!("follow {q:?} from {server}: {e:#}"));
    (visits, started.elapsed())
}

/// Times a search of `q` and a `follow` of it from `server`, `search_first` or not.
async fn cold_pair(
    client: &HttpClient,
    server: &str,
    q: &str,
    search_first: bool,
) -> (SearchAnswer, Duration, Vec<Visit>, Duration) {
    if search_first {
        let (a, s) = timed_search(client, server, q).await;
        let (v, f) = timed_follow(server, q).await;
        (a, s, v, f)
    } else {
        let (v, f) = timed_follow(server, q).await;
        let (a, s) = timed_search(client, server, q).await;
        (a, s, v, f)
    }
}

fn search_found(a: &SearchAnswer) -> BTreeSet<ObjectKey> {
    a.objects
        .iter()
        .map(|o| (o.holder.clone(), o.url.clone()))
        .collect()
}

fn follow_found(visits: &[Visit]) -> BTreeSet<ObjectKey> {
    visits
        .iter()
        .filter_map(|v| v.objects.as_ref())
        .flat_map(|o| o.objects.iter().map(|x| (o.dsi.clone(), x.url.clone())))
        .collect()
}

/// How `got` differs from `want`: counts, by holder.
fn diff(got: &BTreeSet<ObjectKey>, want: &BTreeSet<ObjectKey>) -> String {
    let by_holder = |set: &[&ObjectKey]| {
        let mut m: BTreeMap<&str, usize> = BTreeMap::new();
        for (h, _) in set {
            *m.entry(h.strip_prefix(DSI_PREFIX).unwrap_or(h))
                .or_default() += 1;
        }
        m.iter()
            .map(|(h, n)| format!("{h} x{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let missing: Vec<&ObjectKey> = want.difference(got).collect();
    let extra: Vec<&ObjectKey> = got.difference(want).collect();
    format!(
        "{} of {} (missing {}{}, extra {}{})",
        got.len(),
        want.len(),
        missing.len(),
        if missing.is_empty() {
            String::new()
        } else {
            format!(" by holder {}", by_holder(&missing))
        },
        extra.len(),
        if extra.is_empty() {
            String::new()
        } else {
            format!(" by holder {}", by_holder(&extra))
        },
    )
}

/// What a search left unchased, counted by reason and the node that held the referral.
fn unchased_summary(a: &SearchAnswer) -> String {
    let mut m: BTreeMap<String, usize> = BTreeMap::new();
    for u in &a.unchased {
        let via = u.via.strip_prefix(DSI_PREFIX).unwrap_or(&u.via);
        *m.entry(format!("{} via {via}", u.reason.as_str()))
            .or_default() += 1;
    }
    if m.is_empty() {
        return "nothing unchased".to_owned();
    }
    m.iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `p`-quantile (nearest rank) of sorted `xs`.
fn quantile<T: Copy>(xs: &[T], p: f64) -> T {
    let rank = ((p * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    xs[rank - 1]
}

fn median(xs: &[Duration]) -> Duration {
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2
    }
}

/// `min .., median .., p99 .., max ..` of `xs`.
fn spread(xs: &[Duration]) -> String {
    let mut v = xs.to_vec();
    v.sort_unstable();
    format!(
        "min {}, median {}, p99 {}, max {}",
        ms(v[0]),
        ms(median(&v)),
        ms(quantile(&v, 0.99)),
        ms(v[v.len() - 1])
    )
}

fn sorted_median(xs: &[Duration]) -> Duration {
    let mut v = xs.to_vec();
    v.sort_unstable();
    median(&v)
}

fn sorted_p99(xs: &[Duration]) -> Duration {
    let mut v = xs.to_vec();
    v.sort_unstable();
    quantile(&v, 0.99)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}

/// `GET url`, the whole body read; panics unless the answer is `200`.
async fn get_ok(client: &HttpClient, url: &str) -> cipd::sys::http::Answer {
    let answer = client
        .get_any(url, HeaderMap::new(), fetch_limits())
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(
        answer.status.is_success(),
        "GET {url}: HTTP {}: {}",
        answer.status,
        String::from_utf8_lossy(&answer.body)
    );
    answer
}

fn fetch_limits() -> FetchLimits {
    FetchLimits {
        timeout: HTTP_TIMEOUT,
        max_bytes: 64 << 20,
    }
}

/// `n` searches in a row of `url`, each timed from the request to the last byte.
async fn repeat(client: &HttpClient, url: &str, n: usize) -> (Vec<Duration>, SearchAnswer) {
    // Once untimed: the answer is then this node's kept one.
    get_ok(client, url).await;
    let mut times = Vec::with_capacity(n);
    let mut last = None;
    for _ in 0..n {
        let started = Instant::now();
        let answer = get_ok(client, url).await;
        times.push(started.elapsed());
        last = Some(answer.body);
    }
    let body = last.expect("at least one search");
    let answer = serde_json::from_slice(&body).expect("a search answer");
    (times, answer)
}

/// A closed loop of [`LOAD_CLIENTS`] clients GETting `urls` in turn for [`LOAD_TIME`]:
/// answers `200`, other answers (and failures), and the time taken.
async fn closed_loop(client: &HttpClient, urls: Vec<String>) -> (u64, u64, Duration) {
    let urls = Arc::new(urls);
    for u in urls.iter() {
        get_ok(client, u).await;
    }
    let started = Instant::now();
    let end = started + LOAD_TIME;
    let mut set = JoinSet::new();
    for c in 0..LOAD_CLIENTS {
        let (client, urls) = (client.clone(), urls.clone());
        set.spawn(async move {
            let (mut ok, mut failed, mut k) = (0u64, 0u64, c);
            while Instant::now() < end {
                let url = &urls[k % urls.len()];
                k += 1;
                match client.get_any(url, HeaderMap::new(), fetch_limits()).await {
                    Ok(a) if a.status.is_success() => ok += 1,
                    _ => failed += 1,
                }
            }
            (ok, failed)
        });
    }
    let (mut ok, mut failed) = (0, 0);
    while let Some(r) = set.join_next().await {
        let (o, f) = r.expect("a load client panicked");
        ok += o;
        failed += f;
    }
    (ok, failed, started.elapsed())
}

/// Phase 4 (see the module doc).
async fn search_phase(
    s: &Settings,
    root: &MeshNode,
    mids: &[MeshNode],
    leaves: &[MeshNode],
    authors: &[Vec<String>],
) {
    let leaves_n = leaves.len();
    let mut problems: Vec<String> = Vec::new();

    // Every leaf and mid knows the node that polls it.
    let waited = Instant::now();
    loop {
        let missing: Vec<String> = leaves
            .iter()
            .chain(mids)
            .filter(|n| n.node().upstreams().len() != 1)
            .map(|n| format!("{} ({} known)", n.name, n.node().upstreams().len()))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            waited.elapsed() < CONVERGE_TIMEOUT,
            "timed out after {CONVERGE_TIMEOUT:?} waiting for every leaf and mid to learn its \
             poller; not yet: {missing:?}"
        );
        tokio::time::sleep(RECHECK).await;
    }
    let pollers_known = waited.elapsed();

    let client = ClientTlsArgs::default()
        .client()
        .expect("the bench's HTTP client");
    // The round-trip time: a trivial GET to every node, over kept-alive connections.
    let all: Vec<&MeshNode> = std::iter::once(root).chain(mids).chain(leaves).collect();
    let mut rtts = Vec::new();
    for n in &all {
        let url = format!("{}/healthz", n.http_url());
        get_ok(&client, &url).await;
        for _ in 0..RTT_SAMPLES {
            let started = Instant::now();
            get_ok(&client, &url).await;
            rtts.push(started.elapsed());
        }
    }
    let rtt = sorted_median(&rtts);
    // What `follow` spends building its client on every call.
    let mut builds = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let c = ClientTlsArgs::default().client().expect("a client");
        builds.push(started.elapsed());
        drop(c);
    }
    let build = sorted_median(&builds);
    println!(
        "search: every leaf and mid knew its poller {} after the phase began; RTT (median GET \
         /healthz, {} nodes x {RTT_SAMPLES}) {}; follow builds its HTTP client on every call \
         (median {:.0} us, in its times)",
        ms(pollers_known),
        all.len(),
        ms(rtt),
        build.as_secs_f64() * 1e6
    );
    // What a search's budget has to cover: the datasets each table's hints aggregate.
    let provenance = |n: &MeshNode| {
        let lens: BTreeSet<usize> = n
            .node()
            .table()
            .peers()
            .iter()
            .map(|p| p.provenance.len())
            .collect();
        lens.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("/")
    };
    println!(
        "  search settings: max_subqueries {}, max_depth {}, deadline {}; datasets per hint \
         (provenance) in the root's table {}, in mid0's {}",
        root.node().config().search.max_subqueries,
        root.node().config().search.max_depth,
        ms(root.node().config().search.deadline),
        provenance(root),
        provenance(&mids[0])
    );

    // The queries, and what each should find.
    let probes = probes(leaves_n);
    let expected: Vec<BTreeSet<ObjectKey>> = probes.iter().map(|p| p.expected(authors)).collect();
    let too_big: Vec<String> = probes
        .iter()
        .zip(&expected)
        .filter(|(_, e)| e.len() > SEARCH_LIMIT)
        .map(|(p, e)| format!("{} ({})", p.text(false), e.len()))
        .collect();
    let chosen: Vec<usize> = (0..probes.len())
        .filter(|&k| expected[k].len() <= SEARCH_LIMIT)
        .collect();
    let count = |kind: &str| chosen.iter().filter(|&&k| probes[k].kind == kind).count();
    let mix = format!(
        "{} markers, {} shared authors, {} substrings",
        count("marker"),
        count("shared"),
        count("substring")
    );
    if !too_big.is_empty() {
        println!(
            "  left out, more than {SEARCH_LIMIT} objects: {}",
            too_big.join(", ")
        );
    }

    // ---- cold, from the root ----
    let root_url = root.http_url();
    let mut from_root: Vec<ColdRun> = Vec::new();
    for (n, &k) in chosen.iter().enumerate() {
        let q = probes[k].text(false);
        let (answer, search, visits, follow) = cold_pair(&client, &root_url, &q, n % 2 == 1).await;
        from_root.push(ColdRun {
            probe: k,
            from: root.name.clone(),
            search,
            follow,
            followed: follow_found(&visits),
            visits: visits.len(),
            answer,
        });
    }
    // ---- cold, from a leaf: fresh strings, a different leaf each time ----
    let mut from_leaf: Vec<ColdRun> = Vec::new();
    let mut previous = usize::MAX;
    for (n, &k) in chosen.iter().enumerate() {
        let q = probes[k].text(true);
        // Not the leaf asked last; for a marker, not its own leaf, nor a leaf under its mid
        // when another mid has leaves.
        let holder = (probes[k].kind == "marker").then(|| {
            (0..leaves_n)
                .find(|&i| marker(i) == probes[k].value)
                .expect("a marker's leaf")
        });
        let far = |at: usize| {
            holder
                .is_none_or(|h| h != at && (s.mids == 1 || mid_of(h, s.mids) != mid_of(at, s.mids)))
        };
        let candidates = (0..leaves_n).map(|d| (n + 1 + d) % leaves_n);
        let at = candidates
            .clone()
            .find(|&at| at != previous && far(at))
            .or_else(|| candidates.clone().find(|&at| far(at)))
            .unwrap_or((n + 1) % leaves_n);
        previous = at;
        let leaf = &leaves[at];
        let (answer, search, visits, follow) =
            cold_pair(&client, &leaf.http_url(), &q, n % 2 == 1).await;
        from_leaf.push(ColdRun {
            probe: k,
            from: leaf.name.clone(),
            search,
            follow,
            followed: follow_found(&visits),
            visits: visits.len(),
            answer,
        });
    }

    // Objects: the root's search and follow against each other and the collections; the
    // leaves' searches against the collections.
    // Objects: the root's search and follow against each other and the collections; the
    // leaves' searches against the collections. One line per search that misbehaved.
    let mut agree = 0;
    let mut leaf_agree = 0;
    let mut total_objects = 0;
    for (r, at_root) in from_root
        .iter()
        .map(|r| (r, true))
        .chain(from_leaf.iter().map(|r| (r, false)))
    {
        let want = &expected[r.probe];
        let got = search_found(&r.answer);
        let distinct = r.answer.objects.len() == got.len();
        let follow_agrees = !at_root || got == r.followed;
        if at_root {
            total_objects += want.len();
        }
        if got == *want && distinct && follow_agrees {
            if at_root {
                agree += 1;
            } else {
                leaf_agree += 1;
            }
        }
        if got == *want && distinct && follow_agrees && !r.answer.partial {
            continue;
        }
        let mut line = format!(
            "{:?} from {}: search found {}",
            r.answer.query,
            r.from,
            diff(&got, want)
        );
        if !distinct {
            let _ = write!(line, ", {} returned", r.answer.objects.len());
        }
        if at_root && !follow_agrees {
            let _ = write!(
                line,
                "; follow found {} at {} nodes (search - follow {}, follow - search {})",
                diff(&r.followed, want),
                r.visits,
                got.difference(&r.followed).count(),
                r.followed.difference(&got).count()
            );
        }
        let _ = write!(
            line,
            "; partial {}, {} sub-queries, {} nodes asked; {}",
            r.answer.partial,
            r.answer.subqueries,
            r.answer.nodes.len(),
            unchased_summary(&r.answer)
        );
        problems.push(line);
    }

    // Where a marker's search spends its time: the chain of single sub-queries.
    let chain = |runs: &[ColdRun]| -> String {
        let of: Vec<&ColdRun> = runs
            .iter()
            .filter(|r| probes[r.probe].kind == "marker")
            .collect();
        if of.is_empty() {
            return "no marker queries".to_owned();
        }
        let med = |xs: Vec<Duration>| ms(sorted_median(&xs));
        let secs = |m: f64| Duration::from_secs_f64(m.max(0.0) / 1e3);
        let mut parts = vec![
            format!(
                "the client's round trip {}",
                med(of.iter().map(|r| r.search).collect())
            ),
            format!(
                "{}'s elapsed_ms {}",
                if of[0].from == root.name {
                    "the root"
                } else {
                    "the leaf"
                },
                med(of.iter().map(|r| secs(r.answer.elapsed_ms)).collect())
            ),
        ];
        let deepest = of
            .iter()
            .flat_map(|r| r.answer.nodes.iter().map(|n| n.depth))
            .max()
            .unwrap_or(0);
        for d in 1..=deepest {
            let asked: Vec<_> = of
                .iter()
                .filter_map(|r| r.answer.nodes.iter().find(|n| n.depth == d))
                .collect();
            if let Some(first) = asked.first() {
                parts.push(format!(
                    "its sub-query at depth {d} ({}) {}",
                    first.direction,
                    med(asked.iter().map(|n| secs(n.ms)).collect())
                ));
            }
        }
        parts.join(" > ")
    };

    let series = |runs: &[ColdRun], f: fn(&ColdRun) -> Duration| -> Vec<Duration> {
        runs.iter().map(f).collect()
    };
    let by_kind = |runs: &[ColdRun]| -> String {
        ["marker", "shared", "substring"]
            .iter()
            .filter_map(|kind| {
                let of: Vec<&ColdRun> = runs
                    .iter()
                    .filter(|r| probes[r.probe].kind == *kind)
                    .collect();
                if of.is_empty() {
                    return None;
                }
                let s: Vec<Duration> = of.iter().map(|r| r.search).collect();
                let f: Vec<Duration> = of.iter().map(|r| r.follow).collect();
                let at_node: Vec<Duration> = of
                    .iter()
                    .map(|r| Duration::from_secs_f64(r.answer.elapsed_ms / 1e3))
                    .collect();
                let subs = of.iter().map(|r| r.answer.subqueries).max().unwrap_or(0);
                let (s, f) = (sorted_median(&s), sorted_median(&f));
                Some(format!(
                    "{} {kind} queries {} / {} = {:.2} (the node's own elapsed_ms {}; {subs} \
                     sub-queries at most)",
                    of.len(),
                    ms(s),
                    ms(f),
                    s.as_secs_f64() / f.as_secs_f64(),
                    ms(sorted_median(&at_node))
                ))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };

    let root_target = rtt * 2 + COLD_SLACK;
    let rs = series(&from_root, |r| r.search);
    let rf = series(&from_root, |r| r.follow);
    let ratio = sorted_median(&rs).as_secs_f64() / sorted_median(&rf).as_secs_f64();
    let total_ratio =
        rs.iter().sum::<Duration>().as_secs_f64() / rf.iter().sum::<Duration>().as_secs_f64();
    println!(
        "search, cold, from the root ({} queries never asked: {mix}; limit {SEARCH_LIMIT}; \
         follow and search alternate first):",
        from_root.len()
    );
    println!("  follow: {}", spread(&rf));
    println!("  search: {}", spread(&rs));
    println!(
        "  search/follow: medians {ratio:.2} (target <= {COLD_RATIO_TARGET}: {}), totals \
         {total_ratio:.2} ({}); search p99 {} (target <= 2 x RTT + {} = {}: {})",
        verdict(ratio <= COLD_RATIO_TARGET),
        verdict(total_ratio <= COLD_RATIO_TARGET),
        ms(sorted_p99(&rs)),
        ms(COLD_SLACK),
        ms(root_target),
        verdict(sorted_p99(&rs) <= root_target)
    );
    println!("  by kind, median search / follow: {}", by_kind(&from_root));
    // A leaf's own work for its marker, called in-process (no HTTP, no blocking pool).
    let (mut local_work, mut table_work) = (Vec::new(), Vec::new());
    let own = format!("Author={}", marker(0));
    for _ in 0..200 {
        let started = Instant::now();
        let _ = leaves[0].node().local_objects(&own, Some(SEARCH_LIMIT));
        local_work.push(started.elapsed());
        let started = Instant::now();
        let _ = leaves[0].node().referrals(&own, true, None);
        table_work.push(started.elapsed());
    }
    println!(
        "  a marker's chain, medians: {}; follow's 4 requests (referrals at the root, the mid, \
         the leaf; the leaf's objects) {}; a leaf's own lookups in-process: objects {:.0} us, \
         referrals {:.0} us",
        chain(&from_root),
        ms(sorted_median(
            &from_root
                .iter()
                .filter(|r| probes[r.probe].kind == "marker")
                .map(|r| r.follow)
                .collect::<Vec<_>>()
        )),
        sorted_median(&local_work).as_secs_f64() * 1e6,
        sorted_median(&table_work).as_secs_f64() * 1e6
    );
    println!(
        "  objects: search = follow = the collections' for {agree} of {} queries ({total_objects} \
         objects in all; follow visited {} nodes at most)",
        from_root.len(),
        from_root.iter().map(|r| r.visits).max().unwrap_or(0)
    );

    let leaf_target = rtt * 4 + COLD_SLACK;
    let ls = series(&from_leaf, |r| r.search);
    let lf = series(&from_leaf, |r| r.follow);
    let leaf_names: BTreeSet<&str> = from_leaf.iter().map(|r| r.from.as_str()).collect();
    println!(
        "search, cold, from a leaf ({} queries never asked, spelt DOCUMENT:...; from {} \
         different leaves, a marker from a leaf under another mid):",
        from_leaf.len(),
        leaf_names.len()
    );
    println!("  search: {}", spread(&ls));
    println!(
        "  search p99 {} (target <= 4 x RTT + {} = {}: {}); search median / the root's follow \
         median {:.2}",
        ms(sorted_p99(&ls)),
        ms(COLD_SLACK),
        ms(leaf_target),
        verdict(sorted_p99(&ls) <= leaf_target),
        sorted_median(&ls).as_secs_f64() / sorted_median(&rf).as_secs_f64()
    );
    println!(
        "  by kind, median search / follow from the leaf (which finds the leaf's own objects \
         only): {}",
        by_kind(&from_leaf)
    );
    println!("  a marker's chain, medians: {}", chain(&from_leaf));
    let leaf_found: usize = from_leaf.iter().map(|r| r.followed.len()).sum();
    let leaf_want: usize = from_leaf.iter().map(|r| expected[r.probe].len()).sum();
    let own_only = from_leaf.iter().all(|r| {
        r.visits == 1
            && r.followed
                .iter()
                .all(|(h, _)| leaves.iter().any(|l| l.name == r.from && l.dsi == *h))
    });
    println!(
        "  follow from the leaf: {}; it found {leaf_found} of the {leaf_want} objects, visiting \
         {} node(s) at most ({}); the search found all of them for {leaf_agree} of {} queries",
        spread(&lf),
        from_leaf.iter().map(|r| r.visits).max().unwrap_or(0),
        if own_only {
            "the leaf's own objects only: a leaf's table is empty, no referrals"
        } else {
            "not only the leaf's own objects"
        },
        from_leaf.len()
    );

    // ---- warm ----
    let warm_probe = chosen
        .iter()
        .copied()
        .find(|&k| probes[k].kind == "shared")
        .unwrap_or(chosen[0]);
    let warm_q = probes[warm_probe].text(false);
    let (root_times, root_answer) = repeat(
        &client,
        &format!("{root_url}{}", search_path(&warm_q)),
        WARM_REPEATS,
    )
    .await;
    let leaf_run = from_leaf
        .iter()
        .find(|r| r.probe == warm_probe)
        .expect("the warm query's leaf run");
    let warm_leaf = leaves
        .iter()
        .find(|l| l.name == leaf_run.from)
        .expect("the warm query's leaf");
    let warm_leaf_q = probes[warm_probe].text(true);
    let (leaf_times, leaf_answer) = repeat(
        &client,
        &format!("{}{}", warm_leaf.http_url(), search_path(&warm_leaf_q)),
        WARM_REPEATS,
    )
    .await;
    for (a, at) in [(&root_answer, &root.name), (&leaf_answer, &warm_leaf.name)] {
        if a.partial || a.objects.len() != expected[warm_probe].len() {
            problems.push(format!(
                "warm {:?} at {at}: {} objects (want {}), partial {}",
                a.query,
                a.objects.len(),
                expected[warm_probe].len(),
                a.partial
            ));
        }
    }
    let warm_line = |times: &[Duration]| {
        let mut v = times.to_vec();
        v.sort_unstable();
        let p99 = quantile(&v, 0.99);
        format!(
            "p50 {}, p99 {}, max {} (target p99 <= {}: {})",
            ms(quantile(&v, 0.5)),
            ms(p99),
            ms(v[v.len() - 1]),
            ms(WARM_P99_TARGET),
            verdict(p99 <= WARM_P99_TARGET)
        )
    };
    println!(
        "search, warm, {WARM_REPEATS} in a row ({} objects each): from the root {warm_q:?} {}; \
         from {} {warm_leaf_q:?} {}",
        expected[warm_probe].len(),
        warm_line(&root_times),
        warm_leaf.name,
        warm_line(&leaf_times)
    );

    // ---- throughput ----
    let load: Vec<&Probe> = chosen
        .iter()
        .filter(|&&k| probes[k].kind == "shared")
        .take(LOAD_QUERIES)
        .map(|&k| &probes[k])
        .collect();
    let search_urls: Vec<String> = load
        .iter()
        .map(|p| format!("{root_url}{}", search_path(&p.text(false))))
        .collect();
    let referral_urls: Vec<String> = load
        .iter()
        .map(|p| {
            format!(
                "{root_url}/v1/referrals?q={}",
                percent_encode(&p.text(false))
            )
        })
        .collect();
    let (s_ok, s_failed, s_took) = closed_loop(&client, search_urls).await;
    let (r_ok, r_failed, r_took) = closed_loop(&client, referral_urls).await;
    let searches = s_ok as f64 / s_took.as_secs_f64();
    let referrals = r_ok as f64 / r_took.as_secs_f64();
    let ratio = searches / referrals;
    println!(
        "search throughput at the root, {LOAD_CLIENTS} clients in a closed loop for {} each, \
         {} warm queries: /v1/search {searches:.0}/s ({s_failed} failed), /v1/referrals \
         {referrals:.0}/s ({r_failed} failed); ratio {ratio:.2} (target >= \
         {THROUGHPUT_RATIO_TARGET}: {})",
        ms(LOAD_TIME),
        load.len(),
        verdict(ratio >= THROUGHPUT_RATIO_TARGET)
    );
    if s_failed + r_failed > 0 {
        problems.push(format!(
            "throughput: {s_failed} searches and {r_failed} referral requests failed"
        ));
    }

    // ---- sub-queries per search ----
    let cold: Vec<&ColdRun> = from_root.iter().chain(&from_leaf).collect();
    let mut subs: Vec<u32> = cold.iter().map(|r| r.answer.subqueries).collect();
    subs.sort_unstable();
    let mean = subs.iter().map(|&n| f64::from(n)).sum::<f64>() / subs.len() as f64;
    let partial = cold.iter().filter(|r| r.answer.partial).count();
    let most_nodes = cold.iter().map(|r| r.answer.nodes.len()).max().unwrap_or(0);
    let series_subs = |runs: &[ColdRun]| {
        let n: Vec<u32> = runs.iter().map(|r| r.answer.subqueries).collect();
        format!(
            "mean {:.1}, max {}",
            n.iter().map(|&x| f64::from(x)).sum::<f64>() / n.len().max(1) as f64,
            n.iter().max().unwrap_or(&0)
        )
    };
    println!(
        "search sub-queries per cold search ({} searches): mean {mean:.1}, p99 {}, max {} (from \
         the root {}; from a leaf {}); partial answers {partial} (target 0: {}); most nodes one \
         search asked {most_nodes} of {}",
        subs.len(),
        quantile(&subs, 0.99),
        subs[subs.len() - 1],
        series_subs(&from_root),
        series_subs(&from_leaf),
        verdict(partial == 0),
        s.nodes - 1
    );

    if problems.is_empty() {
        println!("search check: every answer complete and as expected");
    } else {
        println!("search check: {} problem(s):", problems.len());
        for p in &problems {
            println!("  {p}");
        }
    }
    let (rss, hwm) = memory_kib();
    println!(
        "process memory after the search phase: VmRSS {:.1} MiB, VmHWM {:.1} MiB",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
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
