//! The simulation checked against reality: the same plan ([`crate::sim::plan::Plan`]: shape,
//! data, thresholds, configuration, changes and faults from one seed) run as real `cipd`
//! processes, each in its own network namespace with its own address ([`lab`]), every
//! connection to a node passing the fault-injecting proxy in front of it ([`proxy`]) for
//! latency, loss, partitions and a slow link.
//!
//! The run is judged and measured as the simulation is: every node's routing table is read
//! over its admin socket and compared with brute force; the figures per level (out-bound
//! hint bytes from `export`, table values and bytes from `status`, poll traffic from the
//! proxies) fill the same [`Report`], so [`compare`] can set the two side by side.
//!
//! All nodes start held at their proxies' gates; once every daemon serves, the gates open
//! at once, which is the simulation's instant zero: convergence is timed from there.

pub mod compare;
pub mod lab;
pub mod proxy;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write as _};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use cipd::front::admin::{self, AdminRequest};
use serde_json::Value;

use crate::sim::data::{self, Counts};
use crate::sim::plan::{Addressing, NodeFigures, PORT, Plan, dsi_of, name_of};
use crate::sim::{
    Fault, FaultOutcome, LevelFigures, MeshUnderTest, Report, SETTLE, SimSpec, peak_rss_kib_of,
};
use lab::{DAEMON_PORT, Lab};

/// What to run for real.
#[derive(Debug, Clone)]
pub struct RealSpec {
    /// The mesh, as the simulation takes it (its latency is the proxies' latency; its tick
    /// and link failure rates have no meaning here).
    pub sim: SimSpec,
    /// The `cipd` binary.
    pub cipd: PathBuf,
    /// The `cipd-sim-proxy` binary.
    pub proxy: PathBuf,
    /// Chance that a chunk is lost (delivered a retransmission timeout late).
    pub loss: f64,
    /// That retransmission timeout.
    pub rto: Duration,
    /// How long a daemon may take to start serving.
    pub start_timeout: Duration,
}

impl RealSpec {
    /// `sim` run with the binaries next to this program's (`cipd` and `cipd-sim-proxy` in
    /// the same target directory), no loss, Linux's least retransmission timeout.
    pub fn beside_this_program(sim: SimSpec) -> Self {
        let here = std::env::current_exe().unwrap_or_default();
        let mut dir = here.parent().map(Path::to_path_buf).unwrap_or_default();
        // Test binaries run from target/<profile>/deps.
        if dir.ends_with("deps") {
            dir.pop();
        }
        Self {
            sim,
            cipd: dir.join("cipd"),
            proxy: dir.join("cipd-sim-proxy"),
            loss: 0.0,
            rto: Duration::from_millis(200),
            start_timeout: Duration::from_secs(60),
        }
    }
}

/// Why a real run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum RealError {
    /// The namespaces could not be made.
    #[error(transparent)]
    Lab(#[from] lab::LabError),
    /// A file, a process or a daemon could not be set up.
    #[error("setup: {0}")]
    Setup(String),
}

fn setup<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> RealError + '_ {
    move |e| RealError::Setup(format!("{what}: {e}"))
}

/// A process killed (and reaped) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A node's proxy and its control lines.
struct ProxyProc {
    _proc: Proc,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl ProxyProc {
    fn send(&mut self, line: &str) -> Result<String, RealError> {
        writeln!(self.stdin, "{line}").map_err(setup("proxy"))?;
        self.stdin.flush().map_err(setup("proxy"))?;
        let mut answer = String::new();
        self.out.read_line(&mut answer).map_err(setup("proxy"))?;
        let answer = answer.trim().to_owned();
        if answer == "ok" || answer.starts_with("stats") {
            Ok(answer)
        } else {
            Err(RealError::Setup(format!("proxy: {line:?}: {answer:?}")))
        }
    }
}

/// The running mesh. Fields drop in order: processes before their namespaces.
struct RealMesh {
    daemons: Vec<Option<Proc>>,
    proxies: Vec<ProxyProc>,
    lab: Lab,
    plan: Plan,
    spec: RealSpec,
    dirs: Vec<PathBuf>,
    rt: tokio::runtime::Runtime,
}

/// Runs `spec` for real in a fresh temporary directory and fresh namespaces.
///
/// # Errors
/// [`RealError`] when the namespaces, files or processes cannot be set up.
pub fn run(spec: &RealSpec) -> Result<Report, RealError> {
    let started = crate::sim::Started::now();
    for (what, path) in [("cipd", &spec.cipd), ("cipd-sim-proxy", &spec.proxy)] {
        if !path.is_file() {
            return Err(RealError::Setup(format!(
                "no {what} binary at {} (build it first: cargo build --release -p {})",
                path.display(),
                if what == "cipd" { "cipd" } else { "cipd-sim" }
            )));
        }
    }
    let base = Path::new("/dev/shm");
    let tmp = if base.is_dir() {
        tempfile::tempdir_in(base)
    } else {
        tempfile::tempdir()
    }
    .map_err(setup("temporary directory"))?;
    let plan = Plan::new(&spec.sim);
    let n = plan.len();
    let lab = Lab::create(n)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(setup("runtime"))?;
    let mut mesh = RealMesh {
        daemons: Vec::new(),
        proxies: Vec::new(),
        lab,
        plan,
        spec: spec.clone(),
        dirs: Vec::new(),
        rt,
    };
    let peers: Vec<IpAddr> = (0..n).map(Lab::ip).collect();
    for id in 0..n {
        let dir = tmp.path().join(name_of(id));
        std::fs::create_dir_all(dir.join("spool")).map_err(setup("spool"))?;
        if let Some(counts) = mesh.plan.leaves.get(&id) {
            std::fs::write(dir.join("docs.soif"), data::soif(id, counts))
                .map_err(setup("collection"))?;
        }
        let net = Addressing {
            listen: format!("{}:{DAEMON_PORT}", Lab::ip(id)),
            peers: peers.clone(),
            extra: format!(
                "admin_socket = {:?}\n",
                dir.join("admin.sock").display().to_string()
            ),
            keep_files_open: true,
        };
        std::fs::write(dir.join("cipd.toml"), mesh.plan.config_text(id, &dir, &net))
            .map_err(setup("configuration"))?;
        mesh.dirs.push(dir);
    }
    for id in 0..n {
        let p = mesh.start_proxy(id)?;
        mesh.proxies.push(p);
    }
    for id in 0..n {
        let d = mesh.start_daemon(id)?;
        mesh.daemons.push(Some(d));
    }
    for id in 0..n {
        mesh.wait_serving(id)?;
    }

    crate::sim::measure(&mut mesh, started)
}

impl RealMesh {
    fn start_proxy(&self, id: usize) -> Result<ProxyProc, RealError> {
        let ip = Lab::ip(id);
        let (min, max) = self.spec.sim.latency;
        let log = std::fs::File::create(self.dirs[id].join("proxy.log")).map_err(setup("log"))?;
        let mut child = self
            .lab
            .command(id, &self.spec.proxy)
            .args([
                "--listen",
                &format!("{ip}:{PORT}"),
                "--target",
                &format!("{ip}:{DAEMON_PORT}"),
                "--min-latency-us",
                &min.as_micros().to_string(),
                "--max-latency-us",
                &max.as_micros().to_string(),
                "--loss",
                &self.spec.loss.to_string(),
                "--rto-ms",
                &self.spec.rto.as_millis().to_string(),
                "--seed",
                &(self.spec.sim.seed ^ id as u64).to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(setup("proxy"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            // Killed and reaped.
            drop(Proc(child));
            return Err(RealError::Setup(format!(
                "n{id}'s proxy: no pipe to its input or from its output"
            )));
        };
        let mut out = BufReader::new(stdout);
        let proc = Proc(child);
        let mut line = String::new();
        out.read_line(&mut line).map_err(setup("proxy"))?;
        if !line.starts_with("ready") {
            let log = std::fs::read_to_string(self.dirs[id].join("proxy.log")).unwrap_or_default();
            return Err(RealError::Setup(format!(
                "n{id}'s proxy did not start: {}",
                log.trim()
            )));
        }
        Ok(ProxyProc {
            _proc: proc,
            stdin,
            out,
        })
    }

    fn start_daemon(&self, id: usize) -> Result<Proc, RealError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dirs[id].join("cipd.log"))
            .map_err(setup("log"))?;
        let child = self
            .lab
            .command(id, &self.spec.cipd)
            .arg("--config")
            .arg(self.dirs[id].join("cipd.toml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(setup("cipd"))?;
        Ok(Proc(child))
    }

    fn admin(&self, id: usize, request: AdminRequest) -> Option<Value> {
        let path = self.dirs[id].join("admin.sock");
        let response = self
            .rt
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(10), admin::request(&path, &request)).await
            })
            .ok()?
            .ok()?;
        response.ok.then_some(response.result?)
    }

    /// Waits until node `id` answers `status` and has finished starting.
    fn wait_serving(&mut self, id: usize) -> Result<(), RealError> {
        let deadline = Instant::now() + self.spec.start_timeout;
        loop {
            if let Some(s) = self.admin(id, AdminRequest::Status)
                && s.get("starting").is_none_or(Value::is_null)
            {
                return Ok(());
            }
            if let Some(Some(d)) = self.daemons.get_mut(id)
                && let Ok(Some(status)) = d.0.try_wait()
            {
                let log =
                    std::fs::read_to_string(self.dirs[id].join("cipd.log")).unwrap_or_default();
                return Err(RealError::Setup(format!(
                    "n{id}'s cipd exited ({status}): {}",
                    log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
                )));
            }
            if Instant::now() > deadline {
                return Err(RealError::Setup(format!(
                    "n{id}'s cipd did not serve within {:?}",
                    self.spec.start_timeout
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What node `id`'s table holds from child `child`, none when it does not answer.
    fn held(&self, id: usize, child: usize) -> Option<Counts> {
        let dsi = dsi_of(child);
        let rows = self.admin(
            id,
            AdminRequest::Table {
                attr: Some("DOCUMENT:Author".into()),
                peer: Some(dsi.clone()),
                prefix: None,
                top: usize::MAX,
            },
        )?;
        let mut out = Counts::new();
        for r in rows.get("rows")?.as_array()? {
            let value = r.get("value")?.as_str()?.to_owned();
            // The child's own count (rows carry every peer's).
            let n = r
                .get("peers")?
                .as_array()?
                .iter()
                .find(|p| p.get(0).and_then(Value::as_str) == Some(dsi.as_str()))
                .and_then(|p| p.get(1)?.as_u64())?;
            out.insert(value.into(), n);
        }
        Some(out)
    }

    fn status(&self, id: usize) -> Option<Value> {
        self.admin(id, AdminRequest::Status)
    }

    /// Per value, the sum over every entry of node `id`'s table.
    fn table_total(&self, id: usize) -> Option<Counts> {
        let rows = self.admin(
            id,
            AdminRequest::Table {
                attr: Some("DOCUMENT:Author".into()),
                peer: None,
                prefix: None,
                top: usize::MAX,
            },
        )?;
        let mut out = Counts::new();
        for r in rows.get("rows")?.as_array()? {
            out.insert(r.get("value")?.as_str()?.into(), r.get("total")?.as_u64()?);
        }
        Some(out)
    }

    fn exact_at(&self, id: usize) -> bool {
        if self.plan.tree.cyclic() {
            return self.plan.exact_sum_at(id, self.table_total(id));
        }
        let Some(peers) = self
            .status(id)
            .and_then(|s| s.pointer("/table/peers")?.as_u64())
        else {
            return false;
        };
        self.plan.exact_at(id, peers as usize, |c| self.held(id, c))
    }

    fn tables_exact(&self) -> bool {
        (0..self.plan.len())
            .all(|id| self.plan.tree.polls(id).next().is_none() || self.exact_at(id))
    }

    /// Checks `done` every `check_every` until it holds or the timeout; the time from
    /// `start` when it held.
    fn wait_from(&self, start: Instant, done: impl Fn(&Self) -> bool) -> Option<Duration> {
        loop {
            let before = Instant::now();
            if done(self) {
                return Some(before - start);
            }
            if start.elapsed() > self.spec.sim.timeout {
                return None;
            }
            let next = before + self.spec.sim.check_every;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    }

    /// Per client address, what the proxies carried.
    fn traffic(&mut self) -> Result<BTreeMap<IpAddr, proxy::Traffic>, RealError> {
        let mut all: BTreeMap<IpAddr, proxy::Traffic> = BTreeMap::new();
        for p in &mut self.proxies {
            let line = p.send("stats")?;
            let stats = proxy::parse_stats(&line)
                .ok_or_else(|| RealError::Setup(format!("proxy stats: {line:?}")))?;
            for (ip, t) in stats {
                let e = all.entry(ip).or_default();
                e.connections += t.connections;
                e.down += t.down;
                e.up += t.up;
            }
        }
        Ok(all)
    }

    /// Waits until no node has opened a connection for [`SETTLE`], or a minute.
    fn settle_down(&mut self) -> Result<(), RealError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut before = self.connections()?;
        while Instant::now() < deadline {
            std::thread::sleep(SETTLE);
            let now = self.connections()?;
            if now == before {
                break;
            }
            before = now;
        }
        Ok(())
    }

    fn connections(&mut self) -> Result<u64, RealError> {
        Ok(self.traffic()?.values().map(|t| t.connections).sum())
    }

    fn figures(&mut self) -> Result<Vec<LevelFigures>, RealError> {
        let traffic = self.traffic()?;
        let figures: Vec<Option<NodeFigures>> = (0..self.plan.len())
            .map(|id| {
                let s = self.status(id)?;
                // A hint nobody asked for (the root's) is not built; `export` would build it.
                let built = s.pointer("/outbound/builds")?.as_u64()? > 0;
                let hint_bytes = if built {
                    let e = self.admin(id, AdminRequest::Export)?;
                    e.get("soif")?.as_str()?.len()
                } else {
                    0
                };
                Some(NodeFigures {
                    hint_bytes,
                    table_values: s.pointer("/table/values")?.as_u64()? as usize,
                    table_bytes: s.pointer("/table/bytes")?.as_u64()? as usize,
                    table_entries: s.pointer("/table/entries")?.as_u64()? as usize,
                })
            })
            .collect();
        Ok(self.plan.levels(
            |id| figures[id],
            |id| {
                traffic
                    .get(&Lab::ip(id))
                    .map_or((0, 0), |t| (t.down, t.connections))
            },
        ))
    }

    /// Adds a new value to `leaf`'s collection (see [`Plan::change`]); its file is replaced
    /// whole (written aside, then renamed), as an editor or a harvester would.
    fn change(&mut self, leaf: usize, value: &str) -> Result<(), RealError> {
        let text = self.plan.change(leaf, value);
        self.write_collection(leaf, &text)
    }

    /// Replaces `leaf`'s collection file at once (written aside, then renamed).
    fn write_collection(&self, leaf: usize, text: &str) -> Result<(), RealError> {
        let (tmp, path) = (
            self.dirs[leaf].join("docs.soif.new"),
            self.dirs[leaf].join("docs.soif"),
        );
        std::fs::write(&tmp, text).map_err(setup("collection"))?;
        std::fs::rename(&tmp, &path).map_err(setup("collection"))
    }

    fn change_then_wait(
        &mut self,
        leaf: usize,
        value: &str,
    ) -> Result<Option<Duration>, RealError> {
        self.change(leaf, value)?;
        let start = Instant::now();
        if self.plan.tree.cyclic() {
            return Ok(self.wait_from(start, |m| m.tables_exact()));
        }
        let child = self.plan.ancestor_at(leaf, 1);
        let want = self.plan.expected(child).get(value);
        Ok(self.wait_from(start, |m| {
            m.held(0, child)
                .is_some_and(|h| h.get(value).copied() == want)
        }))
    }

    /// Sends `line` with the other end's address to the proxies of both ends of the link
    /// between `a` and `b`.
    fn link(&mut self, a: usize, b: usize, verb: &str, arg: &str) -> Result<(), RealError> {
        for (at, other) in [(a, b), (b, a)] {
            let line = format!("{verb} {} {arg}", Lab::ip(other));
            self.proxies[at].send(line.trim())?;
        }
        Ok(())
    }

    /// Applies fault number `k` to the node and leaf the simulation would, then waits until
    /// every table is exact.
    fn apply_fault(&mut self, fault: Fault, k: usize) -> Result<FaultOutcome, RealError> {
        let target = self.plan.fault_target(k);
        let leaf = self.plan.pick_leaf(Some(target), 1000 + k as u64);
        let value = format!("fault{k}");
        match fault {
            Fault::Partition(d) => {
                self.link(target, 0, "cut", "")?;
                self.change(leaf, &value)?;
                std::thread::sleep(d);
                self.link(target, 0, "heal", "")?;
            }
            Fault::Crash(d) => {
                self.daemons[target] = None;
                self.change(leaf, &value)?;
                std::thread::sleep(d);
                let p = self.start_daemon(target)?;
                self.daemons[target] = Some(p);
            }
            Fault::Flap(times) => {
                self.change(leaf, &value)?;
                for _ in 0..times {
                    self.link(target, 0, "cut", "")?;
                    std::thread::sleep(Duration::from_millis(200));
                    self.link(target, 0, "heal", "")?;
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            Fault::Slow(d) => {
                self.link(target, 0, "slow", &d.as_millis().to_string())?;
                self.change(leaf, &value)?;
                let start = Instant::now();
                let done = self.wait_from(start, |m| m.tables_exact());
                self.link(target, 0, "fast", "")?;
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
                let start = Instant::now();
                let recovered_after = self.wait_from(start, |m| m.tables_exact());
                return Ok(FaultOutcome {
                    fault,
                    node: target,
                    recovered_after,
                    detected_after,
                });
            }
        }
        let start = Instant::now();
        let recovered_after = self.wait_from(start, |m| m.tables_exact());
        Ok(FaultOutcome {
            fault,
            node: target,
            recovered_after,
            detected_after: None,
        })
    }

    /// Blackholes the link between `target` and the root for `d` (the proxies drop what
    /// crosses it, closing nothing), with the root polling `target` into it at once; returns
    /// how long that poll took to fail (none: not within `d`).
    fn blackhole(&mut self, target: usize, d: Duration) -> Result<Option<Duration>, RealError> {
        let name = crate::sim::plan::name_of(target);
        let failures = |m: &Self| -> u64 {
            m.admin(0, AdminRequest::Peers)
                .and_then(|v| {
                    v["peers"]
                        .as_array()?
                        .iter()
                        .find(|p| p["name"] == name.as_str())?["failures"]
                        .as_u64()
                })
                .unwrap_or(0)
        };
        self.link(target, 0, "drop", "")?;
        let from = Instant::now();
        let _ = self.admin(0, AdminRequest::Poll { peer: name.clone() });
        let mut detected = None;
        while from.elapsed() < d {
            if detected.is_none() && failures(self) > 0 {
                detected = Some(from.elapsed());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.link(target, 0, "heal", "")?;
        Ok(detected)
    }
}

impl MeshUnderTest for RealMesh {
    type Error = RealError;

    fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Opens every proxy's gate at once (the simulation's instant zero) and waits.
    fn converge(&mut self) -> Result<Option<Duration>, RealError> {
        let start = Instant::now();
        for p in &mut self.proxies {
            p.send("go")?;
        }
        if self.plan.tree.cyclic() {
            return Ok(self.wait_from(start, |m| m.tables_exact()));
        }
        Ok(self.wait_from(start, |m| m.exact_at(0)))
    }

    fn all_exact(&mut self) -> bool {
        self.tables_exact()
    }

    fn settle(&mut self) -> Result<(), RealError> {
        self.settle_down()
    }

    fn levels(&mut self) -> Result<Vec<LevelFigures>, RealError> {
        self.figures()
    }

    fn root_held(&mut self, child: usize) -> Counts {
        self.held(0, child).unwrap_or_default()
    }

    fn change_and_wait(&mut self, leaf: usize, value: &str) -> Result<Option<Duration>, RealError> {
        self.change_then_wait(leaf, value)
    }

    fn apply(&mut self, fault: Fault, k: usize) -> Result<FaultOutcome, RealError> {
        self.apply_fault(fault, k)
    }

    /// The sum over the mesh's daemons.
    fn rss_kib(&mut self) -> u64 {
        self.daemons
            .iter()
            .flatten()
            .map(|p| peak_rss_kib_of(&p.0.id().to_string()))
            .sum()
    }

    fn idle(&mut self, d: Duration) -> Result<(), RealError> {
        std::thread::sleep(d);
        Ok(())
    }

    fn edit(&mut self, leaf: usize, k: u64) -> Result<(), RealError> {
        let text = self.plan.edit(leaf, k);
        self.write_collection(leaf, &text)
    }

    fn in_process(&self) -> bool {
        false
    }

    fn level_cpu(&mut self) -> Vec<Duration> {
        (0..=self.plan.tree.depth)
            .map(|l| {
                self.plan
                    .tree
                    .level(l)
                    .filter_map(|i| self.daemons.get(i).and_then(Option::as_ref))
                    .map(|p| crate::sim::cpu_of(&p.0.id().to_string()))
                    .sum()
            })
            .collect()
    }

    fn wait_exact(&mut self) -> Result<Option<Duration>, RealError> {
        self.plan.recount();
        Ok(self.wait_from(Instant::now(), |m| m.tables_exact()))
    }
}
