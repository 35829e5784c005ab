//! The simulation checked against reality (`cipd_sim::real`): the same plan run
//! as real `cipd` processes, each in its own network namespace behind the latency proxy,
//! converges to the same exact tables with the same hint bytes and table entries as the
//! simulation, takes each change to the root with the same polls, and recovers from a
//! partition and a crash; the namespaces are gone afterwards.
//!
//! Needs root (network namespaces); without it the test says so and passes. Timing is
//! printed, not asserted (`cipd-sim --real` on a release build is where the margins are
//! judged).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use cipd_sim::real::{self, RealSpec, compare, lab};
use cipd_sim::sim::{self, Fault, SimSpec};

/// The `cipd` binary of this build: `cargo test --workspace` builds it; a test run of this
/// package alone builds it here.
fn cipd_binary() -> PathBuf {
    built("cipd", "cipd")
}

/// The `cipd-sim-proxy` binary of this build (of the `cipd-sim` package, so cargo does not
/// name it to this test): `cargo test --workspace` builds it; a test run of this package
/// alone builds it here.
fn proxy_binary() -> PathBuf {
    built("cipd-sim", "cipd-sim-proxy")
}

/// `bin` of `package` in this build's target directory (where test binaries' `deps/` is),
/// built with cargo when it is not there.
fn built(package: &str, bin: &str) -> PathBuf {
    let here = std::env::current_exe().expect("the test binary has a path");
    let mut dir = here
        .parent()
        .expect("the test binary is in a folder")
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(bin);
    if !path.is_file() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(["build", "-p", package, "--bin", bin]);
        if dir.file_name().is_some_and(|p| p == "release") {
            c.arg("--release");
        }
        let status = c.status().expect("cargo runs");
        assert!(status.success(), "building {bin} failed");
    }
    path
}

/// The tests that make namespaces run one at a time: a run removes dead runs' leftovers,
/// which one of them makes on purpose.
static NAMESPACES: Mutex<()> = Mutex::new(());

/// The namespace tests' turn, or none (and a line saying why) where namespaces cannot be
/// made.
fn namespaces_or_skip() -> Option<std::sync::MutexGuard<'static, ()>> {
    let turn = NAMESPACES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match lab::available() {
        Ok(()) => Some(turn),
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

fn namespaces_left(pid: u32) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(&format!("cipdsim-{pid}-")))
        .map(str::to_owned)
        .collect()
}

#[test]
fn thirty_one_real_processes_agree_with_the_simulation() {
    let Some(_turn) = namespaces_or_skip() else {
        return;
    };
    let mut spec = SimSpec {
        fan_in: 5,
        depth: 2,
        seed: 7,
        changes: 2,
        faults: vec![
            Fault::Partition(Duration::from_millis(1500)),
            Fault::Crash(Duration::from_millis(500)),
        ],
        timeout: Duration::from_secs(60),
        ..SimSpec::default()
    };
    spec.data.objects = 80;
    spec.data.vocabulary = 400;
    let mut real_spec = RealSpec::beside_this_program(spec.clone());
    real_spec.cipd = cipd_binary();
    real_spec.proxy = proxy_binary();

    let simulated = sim::run(&spec).expect("the simulation runs");
    let real = real::run(&real_spec).expect("the real run runs");
    let rows = compare::compare(&simulated, &real, &compare::Margins::default());
    let table = compare::render(&rows);
    eprintln!(
        "simulated:\n{}\nreal:\n{}\n{table}",
        simulated.render(),
        real.render()
    );

    assert_eq!(real.nodes, 31);
    assert!(real.converged_at.is_some() && real.all_exact, "{table}");
    assert_eq!(real.root_matched, real.root_expected, "{table}");
    assert_eq!(real.root_extra, 0);
    assert!(real.changes.iter().all(Option::is_some), "{table}");
    assert!(
        real.faults.iter().all(|f| f.recovered_after.is_some()),
        "{table}"
    );
    // Same data through the same code: the sizes are the same bytes and entries.
    for r in rows.iter().filter(|r| r.margin == "equal") {
        assert_eq!(r.within, Some(true), "{}: {table}", r.figure);
    }
    // The real run's proxies counted what every node's polls read.
    assert!(real.levels[1].poll_bytes_in > 0 && real.levels[0].connections > 0);
    assert!(
        namespaces_left(std::process::id()).is_empty(),
        "namespaces left behind"
    );
}

#[test]
fn a_missing_binary_is_a_clear_error_and_leaves_nothing_behind() {
    let mut real_spec = RealSpec::beside_this_program(SimSpec::default());
    real_spec.cipd = PathBuf::from("/nonexistent/cipd");
    let e = real::run(&real_spec).expect_err("no binary");
    assert!(e.to_string().contains("no cipd binary"), "{e}");
}

/// A run that died (killed, or interrupted past its handler) leaves namespaces and daemons
/// behind; the next run removes them, and the processes in them.
#[test]
fn a_dead_runs_namespaces_and_processes_are_removed() {
    let Some(_turn) = namespaces_or_skip() else {
        return;
    };
    // pid_max itself is never a process id: the run that "made" this one is dead.
    let dead: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("pid_max")
        .trim()
        .parse()
        .expect("a number");
    let name = format!("cipdsim-{dead}-0-n0");
    let made = Command::new("ip")
        .args(["netns", "add", &name])
        .status()
        .expect("ip runs");
    assert!(made.success());
    let mut sleeper = Command::new("ip")
        .args(["netns", "exec", &name, "sleep", "600"])
        .spawn()
        .expect("sleep starts");
    // Wait until the sleeper is inside the namespace.
    let inside = (0..500).any(|_| {
        let pids = Command::new("ip")
            .args(["netns", "pids", &name])
            .output()
            .expect("ip runs");
        let found = !pids.stdout.trim_ascii().is_empty();
        if !found {
            std::thread::sleep(Duration::from_millis(10));
        }
        found
    });
    assert!(inside, "the sleeper never entered {name}");

    assert!(lab::remove_leftovers(None) >= 1);
    let status = sleeper.wait().expect("the sleeper is reaped");
    assert!(!status.success(), "the sleeper was killed: {status}");
    assert!(namespaces_left(dead).is_empty());
}

/// A daemon or proxy that does not start is named in a clear error, and the run leaves no
/// namespace behind.
#[test]
fn a_node_that_does_not_start_is_a_clear_error() {
    let Some(_turn) = namespaces_or_skip() else {
        return;
    };
    let spec = SimSpec {
        fan_in: 2,
        depth: 1,
        changes: 0,
        ..SimSpec::default()
    };
    let fails = PathBuf::from("/bin/false");

    let mut bad_daemon = RealSpec::beside_this_program(spec.clone());
    bad_daemon.cipd = fails.clone();
    bad_daemon.proxy = proxy_binary();
    let e = real::run(&bad_daemon).expect_err("the daemon exits at once");
    assert!(e.to_string().contains("n0's cipd exited"), "not named: {e}");

    let mut bad_proxy = RealSpec::beside_this_program(spec);
    bad_proxy.cipd = cipd_binary();
    bad_proxy.proxy = fails;
    let e = real::run(&bad_proxy).expect_err("the proxy exits at once");
    assert!(
        e.to_string().contains("n0's proxy did not start"),
        "not named: {e}"
    );
    assert!(namespaces_left(std::process::id()).is_empty());
}
