//! Network namespaces for a real run: one per node, each with its own address on a veth
//! pair to a bridge in a switch namespace of its own, so that nodes reach each other as
//! separate hosts would (nothing crosses the loopback interface but a node's traffic to its
//! own proxy). Made with iproute2 (`ip`), removed when the [`Lab`] is dropped.
//!
//! Inside each node's namespace a routing rule sends the TCP segments the daemon writes from
//! its port 7001 to the local table (`ip rule add ipproto tcp sport 7001 lookup 100`,
//! `ip route add local 0.0.0.0/0 dev lo table 100`): the proxy ([`super::proxy`]) connects to
//! the daemon from each client's own address, and the daemon's replies to that address must
//! come back to the proxy rather than leave by the bridge.

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// The daemon's port inside each namespace (the proxy listens on [`crate::sim::plan::PORT`]).
pub const DAEMON_PORT: u16 = 7001;

/// The namespaces of one run.
#[derive(Debug)]
pub struct Lab {
    prefix: String,
    nodes: usize,
}

/// Why the namespaces could not be made.
#[derive(Debug, thiserror::Error)]
#[error("network namespaces: {0}")]
pub struct LabError(pub String);

static RUNS: AtomicU32 = AtomicU32::new(0);

/// Whether this process may make network namespaces (root, iproute2, a kernel and a
/// sandbox that allow it), and why not.
pub fn available() -> Result<(), String> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_owned))
        })
        .unwrap_or_default();
    if uid != "0" {
        return Err(format!(
            "needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to make network namespaces; effective uid is {uid}"
        ));
    }
    // A namespace made and removed at once: root in a container may still be refused.
    let probe = format!("{PREFIX}{}-probe", std::process::id());
    batch(&[], &format!("netns add {probe}\nnetns del {probe}\n"))
        .map_err(|e| format!("cannot make a network namespace here: {}", e.0))
}

/// Runs `ip ARGS -batch -` with `lines` on its input.
fn batch(args: &[&str], lines: &str) -> Result<(), LabError> {
    let mut child = Command::new("ip")
        .args(args)
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| LabError(format!("cannot run ip: {e}")))?;
    child
        .stdin
        .take()
        .ok_or_else(|| LabError("ip: no pipe to its input".into()))?
        .write_all(lines.as_bytes())
        .map_err(|e| LabError(format!("ip: {e}")))?;
    let out = child
        .wait_with_output()
        .map_err(|e| LabError(format!("ip: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(LabError(format!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Prefix of every namespace a run makes: `cipdsim-PID-RUN-...`.
const PREFIX: &str = "cipdsim-";

/// Removes the namespaces of runs that ended without removing their own (a run killed, or
/// interrupted while the daemons ran), and the processes still in them: those of process
/// `pid` when given (an interrupted run cleaning up after itself), else those whose run is
/// no longer alive. Returns how many namespaces it removed.
pub fn remove_leftovers(pid: Option<u32>) -> usize {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return 0;
    };
    let listing = String::from_utf8_lossy(&out.stdout);
    let mut removed = 0;
    for name in listing.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(owner) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let doomed = match pid {
            Some(p) => owner == p,
            None => !alive(owner),
        };
        if doomed {
            kill_processes_in(name);
            let _ = batch(&["-force"], &format!("netns del {name}\n"));
            removed += 1;
        }
    }
    removed
}

/// Whether process `pid` runs (a zombie, killed but not yet reaped, does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("State:"))
            .is_some_and(|state| !state.trim_start().starts_with('Z'))
    })
}

/// Kills (SIGKILL) every process in namespace `name`.
fn kill_processes_in(name: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "pids", name]).output() else {
        return;
    };
    let pids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    if !pids.is_empty() {
        let _ = Command::new("kill").arg("-KILL").args(&pids).status();
    }
}

impl Lab {
    /// Makes `nodes` namespaces on one bridge, after removing those that dead runs left.
    ///
    /// # Errors
    /// When `ip` fails (not root, no namespaces in this kernel).
    pub fn create(nodes: usize) -> Result<Self, LabError> {
        available().map_err(LabError)?;
        let stale = remove_leftovers(None);
        if stale > 0 {
            eprintln!("cipd-sim: removed {stale} network namespaces that ended runs left behind");
        }
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let lab = Self {
            prefix: format!("{PREFIX}{}-{run}", std::process::id()),
            nodes,
        };
        // From here on, dropping `lab` removes whatever was made.
        let mut add = format!("netns add {}\n", lab.switch());
        for id in 0..nodes {
            add.push_str(&format!("netns add {}\n", lab.ns(id)));
        }
        batch(&[], &add)?;
        let mut sw = String::from("link add br0 type bridge\nlink set br0 up\nlink set lo up\n");
        for id in 0..nodes {
            sw.push_str(&format!(
                "link add v{id} type veth peer name eth0 netns {ns}\nlink set v{id} master br0 up\n",
                ns = lab.ns(id)
            ));
        }
        batch(&["-n", &lab.switch()], &sw)?;
        for id in 0..nodes {
            let lines = format!(
                "link set lo up\naddr add {ip}/16 dev eth0\nlink set eth0 up\n\
                 rule add ipproto tcp sport {DAEMON_PORT} lookup 100\n\
                 route add local 0.0.0.0/0 dev lo table 100\n",
                ip = Self::ip(id)
            );
            batch(&["-n", &lab.ns(id)], &lines)?;
        }
        Ok(lab)
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.prefix)
    }

    /// Node `id`'s namespace.
    pub fn ns(&self, id: usize) -> String {
        format!("{}-n{id}", self.prefix)
    }

    /// Node `id`'s address: 10.77.0.2 on (10.77.0.0/16).
    pub fn ip(id: usize) -> IpAddr {
        let k = id + 2;
        IpAddr::V4(Ipv4Addr::new(10, 77, (k >> 8) as u8, (k & 0xff) as u8))
    }

    /// `program` to run inside node `id`'s namespace.
    pub fn command(&self, id: usize, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(id)]).arg(program);
        c
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // Removing a namespace removes its end of the veth pair, and the pair with it; a
        // process still in it (none, when the run's own were reaped) would keep it alive.
        let mut del = String::new();
        for id in 0..self.nodes {
            kill_processes_in(&self.ns(id));
            del.push_str(&format!("netns del {}\n", self.ns(id)));
        }
        del.push_str(&format!("netns del {}\n", self.switch()));
        if let Err(e) = batch(&["-force"], &del) {
            eprintln!("cipd-sim: removing the namespaces: {e}");
        }
    }
}

/// Has an interrupt or termination signal remove this process's namespaces and the daemons
/// in them before it exits (status 130): dropping a [`Lab`] is not enough, as a signal ends
/// the process without running destructors.
pub fn clean_up_on_interrupt() {
    std::thread::spawn(|| {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return;
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            let n = remove_leftovers(Some(std::process::id()));
            eprintln!(
                "cipd-sim: interrupted; removed {n} network namespaces and the processes in them"
            );
            std::process::exit(130);
        });
    });
}
