//! The `cipd-sim` and `cipd-sim-proxy` programs as a user runs them: a small mesh to its
//! report, and the errors of arguments that cannot work. (Being this package's integration
//! test also has `cargo test --workspace` build both programs, which `tests/real.rs` of the
//! integration-tests package runs.)

use std::process::{Command, Output};

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{bin} runs: {e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_small_mesh_runs_to_an_exact_root() {
    let out = run(
        env!("CARGO_BIN_EXE_cipd-sim"),
        &["-F", "2", "-D", "1", "--changes", "1", "--objects", "20"],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The report's verdict on every table, the root's entries against brute force, and
    // the change timed to the root.
    assert!(
        stdout.contains("every table exact: true"),
        "no table verdict, or not exact:\n{stdout}"
    );
    assert!(
        stdout.contains(", 0 extra;"),
        "extra root entries:\n{stdout}"
    );
    assert!(
        stdout.contains("leaf change to root: "),
        "no change timed:\n{stdout}"
    );
}

#[test]
fn a_ring_over_a_dag_is_refused_with_the_reason() {
    let out = run(
        env!("CARGO_BIN_EXE_cipd-sim"),
        &["--hubs", "ring", "--parents", "2"],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--hubs ring needs a tree below the hubs"),
        "{stderr}"
    );
}

#[test]
fn a_bad_fault_is_refused_with_the_reason() {
    let out = run(env!("CARGO_BIN_EXE_cipd-sim"), &["--faults", "meteor:5"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("meteor:5") && stderr.contains("kind must be"),
        "{stderr}"
    );
}

#[test]
fn the_proxy_names_what_it_misses() {
    let out = run(env!("CARGO_BIN_EXE_cipd-sim-proxy"), &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--listen") && stderr.contains("--target"),
        "{stderr}"
    );
}

#[test]
fn the_proxy_reports_an_address_it_cannot_take() {
    // Port 1 of an address this host does not have: the bind fails at once.
    let out = run(
        env!("CARGO_BIN_EXE_cipd-sim-proxy"),
        &["--listen", "192.0.2.1:1", "--target", "127.0.0.1:1"],
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("cipd-sim-proxy: 192.0.2.1:1:"),
        "{stderr}"
    );
}
