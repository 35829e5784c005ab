//! The deterministic mesh simulation (`cipd_sim::sim`): real daemons on turmoil's
//! network converge to exactly what brute force says, replay from a seed, and come back
//! exact after each fault.

use std::time::Duration;

use cipd_sim::sim::{Churn, Fault, Hubs, SimSpec, Sustained, run};

fn small(seed: u64) -> SimSpec {
    let mut spec = SimSpec {
        fan_in: 3,
        depth: 2,
        seed,
        changes: 2,
        timeout: Duration::from_secs(60),
        ..SimSpec::default()
    };
    spec.data.objects = 60;
    spec.data.vocabulary = 200;
    spec
}

#[test]
fn a_mesh_converges_exact_and_a_seed_replays_it() {
    let spec = small(11);
    let first = run(&spec).expect("the simulation runs");
    assert!(first.converged_at.is_some(), "{}", first.render());
    assert!(first.all_exact, "{}", first.render());
    assert_eq!(first.root_matched, first.root_expected);
    assert_eq!(first.root_extra, 0);
    assert!(first.root_expected > 0);
    assert!(
        first.changes.iter().all(Option::is_some),
        "{}",
        first.render()
    );
    // Hints grow up the tree; leaves hold no table.
    assert!(first.levels[1].hint_bytes.0 > first.levels[2].hint_bytes.0);
    assert_eq!(first.levels[2].table_values.1, 0);
    let again = run(&spec).expect("the simulation runs");
    assert_eq!(first.reproducible(), again.reproducible());
}

/// Objects added, edited and removed at every leaf all through a run: every table exact
/// soon after the last change, each change costing the root a delta's bytes, and a seed
/// replaying the same figures.
#[test]
fn sustained_changes_end_exact_and_cost_the_root_a_delta_each() {
    let mut spec = small(7);
    spec.sustained = Some(Sustained {
        period: Duration::from_secs(5),
        per_leaf_minute: 30.0,
    });
    let r = run(&spec).expect("the simulation runs");
    let o = r.sustained.clone().expect("sustained changes ran");
    // 9 leaves, each changing every 2 s, for 5 s.
    assert!((20..=25).contains(&o.changes), "{}", r.render());
    let exact = o.exact_after.expect("exact after the changes");
    assert!(exact <= Duration::from_secs(2), "{}", r.render());
    let root_bytes = o.traffic[0].0;
    assert!(root_bytes > 0, "{}", r.render());
    assert!(
        root_bytes <= o.changes as u64 * 1024,
        "{} bytes into the root for {} changes: {}",
        root_bytes,
        o.changes,
        r.render()
    );
    assert_eq!(
        run(&spec).expect("the simulation runs").reproducible(),
        r.reproducible()
    );
}

/// Hubs in a ring and in a full mesh, with a root over them and leaves below: every table
/// holds every leaf it reaches once (brute force over the whole mesh), a change at a leaf
/// reaches every hub, and then nothing moves (the poll interval is an hour).
#[test]
fn rings_and_full_meshes_of_hubs_converge_exact_and_go_quiet() {
    for hubs in [Hubs::Ring, Hubs::Full] {
        let mut spec = small(5);
        spec.hubs = hubs;
        spec.poll_interval = Duration::from_secs(3600);
        spec.quiet_window = Duration::from_secs(10);
        let r = run(&spec).expect("the simulation runs");
        assert!(r.converged_at.is_some(), "{hubs}: {}", r.render());
        assert!(r.all_exact, "{hubs}: {}", r.render());
        assert!(
            r.changes.iter().all(Option::is_some),
            "{hubs}: {}",
            r.render()
        );
        assert_eq!(r.quiet.map(|q| q.1), Some(0), "{hubs}: {}", r.render());
    }
}

/// Cross-links between subtrees (a hub also polls a node of the next hub's subtree): a
/// diamond under the root, counted once per path as in a DAG; exact, and again after a
/// partition.
#[test]
fn cross_links_between_subtrees_converge_exact() {
    let mut spec = small(7);
    spec.hubs = Hubs::Cross;
    spec.faults = vec![Fault::Partition(Duration::from_millis(1500))];
    let r = run(&spec).expect("the simulation runs");
    assert!(r.all_exact, "{}", r.render());
    assert!(r.changes.iter().all(Option::is_some), "{}", r.render());
    assert!(
        r.faults.iter().all(|f| f.recovered_after.is_some()),
        "{}",
        r.render()
    );
}

#[test]
fn thresholds_keep_rare_values_from_the_root_and_the_rest_exact() {
    let mut spec = small(3);
    spec.thresholds = vec![4, 2];
    spec.changes = 1;
    let r = run(&spec).expect("the simulation runs");
    assert!(r.all_exact, "{}", r.render());
    assert!(r.truth_at_root < r.truth_values, "{}", r.render());
    assert!(r.changes.iter().all(Option::is_some), "{}", r.render());
}

/// A partition, a crash with restart from the spool and a flapping link, each while a leaf
/// below changes: every table is exact again afterwards, within seconds rather than a poll
/// interval (the partition case first recovered only at the root's next scheduled poll, 60 s
/// on: a poll caught by the partition waited the whole 60 s handshake timeout, and the
/// `datachanged` notices refused meanwhile were never sent again).
#[test]
fn every_table_is_exact_again_after_each_fault() {
    for seed in 1..=3 {
        let mut spec = small(seed);
        spec.changes = 0;
        spec.faults = vec![
            Fault::Partition(Duration::from_millis(1500)),
            Fault::Crash(Duration::from_millis(1000)),
            Fault::Flap(2),
        ];
        let r = run(&spec).expect("the simulation runs");
        assert!(r.all_exact, "seed {seed}: {}", r.render());
        for f in &r.faults {
            let after = f.recovered_after.unwrap_or_else(|| {
                panic!("seed {seed}: {} never recovered: {}", f.fault, r.render())
            });
            // Well within the 60 s poll interval: recovery came from the retried notice.
            assert!(
                after < Duration::from_secs(20),
                "seed {seed}: {}: {after:?}",
                f.fault
            );
        }
    }
}

/// A DAG (every node below level 1 reports to two parents): a leaf's values reach the root
/// by two ways, each child's aggregate still exactly what brute force says, before and
/// after a crash.
#[test]
fn a_dag_converges_exact_and_survives_a_crash() {
    let mut spec = small(21);
    spec.fan_in = 2;
    spec.depth = 3;
    spec.parents = 2;
    spec.changes = 1;
    spec.faults = vec![Fault::Crash(Duration::from_millis(800))];
    let r = run(&spec).expect("the simulation runs");
    assert!(r.all_exact, "{}", r.render());
    assert!(r.changes.iter().all(Option::is_some), "{}", r.render());
    assert!(
        r.faults.iter().all(|f| f.recovered_after.is_some()),
        "{}",
        r.render()
    );
}

/// A blackhole (a link that silently drops everything, no reset) caught under a poll: the
/// poll fails within the stall timeout, and every table is exact again within 2 s of the
/// link's return (the simulated nodes' `max_transient_backoff`: the retry after it, plus the
/// poll and the notices up).
#[test]
fn a_blackhole_is_found_within_the_stall_timeout() {
    for seed in 1..=4 {
        let mut spec = small(seed);
        spec.changes = 0;
        spec.faults = vec![Fault::Blackhole(Duration::from_millis(2500))];
        let r = run(&spec).expect("the simulation runs");
        let f = &r.faults[0];
        let found = f
            .detected_after
            .unwrap_or_else(|| panic!("seed {seed}: the poll was not failed: {}", r.render()));
        assert!(
            found <= spec.stall_timeout + spec.tick * 2,
            "seed {seed}: found after {found:?}: {}",
            r.render()
        );
        let back = f
            .recovered_after
            .unwrap_or_else(|| panic!("seed {seed}: never exact again: {}", r.render()));
        assert!(
            back <= spec.stall_timeout * 2 + Duration::from_millis(100),
            "seed {seed}: {back:?}"
        );
        assert!(r.all_exact, "seed {seed}: {}", r.render());
    }
}

/// Random link failures (about 1 % of the time, 100 ms outages) and node churn together
/// over a few hundred nodes and a few seeds: restarts from the spool, leaves that leave for
/// good and leaves that join late; every table is exact for the nodes alive soon after the
/// last change. (The full sweep is `cipd-sim --seeds 50`, docs/simulation.md.)
#[test]
fn a_churn_sweep_with_flaky_links_ends_exact() {
    for seed in 1..=2 {
        let mut spec = SimSpec {
            fan_in: 3,
            depth: 4,
            seed,
            changes: 0,
            fail_rate: 0.0005,
            repair_rate: 0.05,
            timeout: Duration::from_secs(60),
            churn: Some(Churn {
                period: Duration::from_secs(20),
                restarts: 0.05,
                leaves: 0.05,
                joins: 0.05,
                down: Duration::from_secs(1),
            }),
            ..SimSpec::default()
        };
        spec.data.objects = 60;
        spec.data.vocabulary = 200;
        let r = run(&spec).expect("the simulation runs");
        let c = r.churn.as_ref().expect("a churn outcome");
        assert!(c.restarts > 0 && c.left > 0 && c.joined > 0, "{c:?}");
        let after = c
            .exact_after
            .unwrap_or_else(|| panic!("seed {seed}: never exact: {}", r.render()));
        assert!(
            after <= Duration::from_secs(10),
            "seed {seed}: exact {after:?} after the last change: {}",
            r.render()
        );
    }
}
