//! Peer identity: a polled peer may deliver only its own DSI, the spool keeps that binding
//! across restarts, and counts that cannot be true are refused.

use bytes::Bytes;
use cip_proto::Dsi;
use cipd::store::spool::{Spool, SpoolEntry};

use crate::fake::{FakePeer, author_hint, object};
use crate::harness::{NodeSpec, TestNode, eventually, metric};

const HUB: &str = "1.3.6.1.4.1.99999.80";
const GOOD: &str = "1.3.6.1.4.1.99999.81";
const EVIL: &str = "1.3.6.1.4.1.99999.82";
const OPEN: &str = "1.3.6.1.4.1.99999.83";

fn garcia(total: u64, count: u64) -> hints::hint::CipHint {
    author_hint(total, &[("Garcia", count)])
}

/// The one referral for `Author=Garcia`: (dsi, count, base-uri).
async fn garcia_referrals(node: &TestNode) -> Vec<(String, u64, String)> {
    node.query("Author=Garcia")
        .await
        .referrals
        .iter()
        .map(|r| (r.dsi.clone(), r.count, r.base_uri.join(" ")))
        .collect()
}

/// The spooled hints (the honest peer is polled every 50 ms, so a write may be in flight:
/// its temporary file is not a spooled hint).
fn spool_files(node: &TestNode) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(node.dir.path().join("spool"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".spool") && !cipd::sys::durable::is_temp(n))
        .collect();
    names.sort();
    names
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_dsi_is_refused_from_configured_and_unconfigured_peers() {
    let good = FakePeer::start(object(GOOD, "http://good/", &garcia(10, 5))).await;
    // Both forgers claim good's DSI, with counts that would outrank it.
    let evil = FakePeer::start(object(GOOD, "http://evil/", &garcia(900, 900))).await;
    let open = FakePeer::start(object(GOOD, "http://open/", &garcia(900, 900))).await;
    let mut spec = NodeSpec::new(HUB, &["Hugo"])
        .peer_at("good", good.addr, &["poll"], Some(GOOD))
        .peer_at("zz-evil", evil.addr, &["poll"], Some(EVIL))
        .peer_at("zz-open", open.addr, &["poll"], None);
    spec.poll_interval = "50ms";
    let hub = TestNode::start(spec).await;
    let s = hub
        .wait_for("good imported and both forgers refused twice", |s| {
            s.peers_imported >= 1 && s.dsi_refusals >= 4
        })
        .await;
    assert_eq!(s.table_peers, 1);
    assert_eq!(
        garcia_referrals(&hub).await,
        vec![(GOOD.to_owned(), 5, "http://good/".to_owned())],
        "the honest peer's referrals stay exact"
    );
    // Neither forgery reached the spool; the unconfigured forger learned nothing.
    assert_eq!(
        spool_files(&hub),
        vec![format!("{}.{GOOD}.spool", hex("good"))]
    );
    let node = hub.daemon.node();
    assert_eq!(node.peer_dsi("zz-open"), None);
    let forged = metric(&node.render_metrics(), "cipd_index_objects_forged_total");
    assert!(forged >= 4.0, "{forged}");
    // The peers' view says why.
    let states = node.peer_states();
    let evil_state = states.iter().find(|p| p.name == "zz-evil").unwrap();
    let why = evil_state.last_error.as_deref().unwrap_or_default();
    assert!(why.contains(GOOD) && why.contains(EVIL), "{why}");

    // The unconfigured peer serves its own DSI: accepted and learned; then it may not
    // switch to good's (nor to any other).
    open.set(object(
        OPEN,
        "http://open/",
        &author_hint(3, &[("Ortega", 2)]),
    ));
    hub.wait_for("the open peer learned", |s| s.peers_imported >= 2)
        .await;
    assert_eq!(node.peer_dsi("zz-open").unwrap().as_str(), OPEN);
    let refusals = node.status_snapshot().dsi_refusals;
    open.set(object(GOOD, "http://open/", &garcia(900, 900)));
    hub.wait_for("the switch refused", |s| s.dsi_refusals >= refusals + 3)
        .await;
    assert_eq!(
        garcia_referrals(&hub).await,
        vec![(GOOD.to_owned(), 5, "http://good/".to_owned())]
    );
    assert_eq!(node.peer_dsi("zz-open").unwrap().as_str(), OPEN);
    hub.stop().await;
}

fn spooled(peer: &str, dsi: &str, base: &str, hint: &hints::hint::CipHint) -> SpoolEntry {
    SpoolEntry {
        peer: peer.into(),
        dsi: Dsi::new(dsi).unwrap(),
        index_type: "HARVEST-SOIF-1".into(),
        base_uris: vec![base.into()],
        description: None,
        received: std::time::SystemTime::now(),
        payload: Bytes::from(hint.to_soif().to_bytes()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_restores_only_entries_that_match_the_configuration() {
    // Peers that never answer: whatever the hub holds comes from its spool.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    drop(silent);
    for forger_dsi in [Some(EVIL), None] {
        let dir = tempfile::tempdir().unwrap();
        {
            let spool = Spool::open(&dir.path().join("spool")).unwrap();
            spool
                .store(&spooled("good", GOOD, "http://good/", &garcia(10, 5)))
                .unwrap();
            // The forger's copy of good's DSI; its name sorts after good's.
            spool
                .store(&spooled("zz-evil", GOOD, "http://evil/", &garcia(900, 900)))
                .unwrap();
            // An orphan: a peer no longer configured.
            spool
                .store(&spooled("gone", OPEN, "http://gone/", &garcia(7, 7)))
                .unwrap();
        }
        let spec = NodeSpec::new(HUB, &["Hugo"])
            .peer_at("good", addr, &["poll"], Some(GOOD))
            .peer_at("zz-evil", addr, &["poll"], forger_dsi);
        let hub = TestNode::start_in(spec, dir).await;
        let s = hub.daemon.node().status_snapshot();
        assert_eq!((s.spool_restored, s.spool_set_aside), (1, 2), "{s:?}");
        assert_eq!(
            garcia_referrals(&hub).await,
            vec![(GOOD.to_owned(), 5, "http://good/".to_owned())],
            "forger configured with {forger_dsi:?}"
        );
        // Set aside, kept for the operator, never loaded again.
        let files = spool_files(&hub);
        assert!(
            files.contains(&format!("{}.{GOOD}.spool.set-aside", hex("zz-evil"))),
            "{files:?}"
        );
        assert!(files.contains(&format!("{}.{GOOD}.spool", hex("good"))));
        assert_eq!(
            hub.daemon
                .node()
                .peer_dsi("zz-evil")
                .as_ref()
                .map(Dsi::as_str),
            forger_dsi
        );
        let dir = hub.stop().await;
        // And again: the set-aside file stays out.
        let spec = NodeSpec::new(HUB, &["Hugo"])
            .peer_at("good", addr, &["poll"], Some(GOOD))
            .peer_at("zz-evil", addr, &["poll"], forger_dsi);
        let hub = TestNode::start_in(spec, dir).await;
        let s = hub.daemon.node().status_snapshot();
        assert_eq!((s.spool_restored, s.spool_set_aside), (1, 0));
        hub.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_that_cannot_be_true_are_refused_and_the_good_hint_stays() {
    let peer = FakePeer::start(object(GOOD, "http://good/", &garcia(10, 5))).await;
    let mut spec = NodeSpec::new(HUB, &["Hugo"]).peer_at("good", peer.addr, &["poll"], Some(GOOD));
    spec.poll_interval = "50ms";
    spec.extra_limits = "max_total_objects = 1000000".into();
    let hub = TestNode::start(spec).await;
    hub.wait_for("the good hint", |s| s.peers_imported == 1)
        .await;
    let good = garcia_referrals(&hub).await;
    assert_eq!(good, vec![(GOOD.to_owned(), 5, "http://good/".to_owned())]);
    // A refused hint is staged in the spool before the import and forgotten after it: the
    // good hint's file stays as it was, and no staged file is left behind.
    let spool_file = hub
        .dir
        .path()
        .join("spool")
        .join(format!("{}.{GOOD}.spool", hex("good")));
    let kept = std::fs::read(&spool_file).unwrap();
    let staged_left = || {
        std::fs::read_dir(hub.dir.path().join("spool"))
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| cipd::sys::durable::is_temp(&e.file_name().to_string_lossy()))
    };
    for (what, hint) in [
        ("a count above the total", garcia(10, 11)),
        (
            "a total above the ceiling",
            garcia(1_000_000_000_000_000_000, 5),
        ),
        ("u64::MAX", garcia(u64::MAX, u64::MAX)),
    ] {
        let before = hub.daemon.node().status_snapshot().implausible_refusals;
        peer.set(object(GOOD, "http://good/", &hint));
        hub.wait_for(what, |s| s.implausible_refusals >= before + 2)
            .await;
        assert_eq!(garcia_referrals(&hub).await, good, "{what}");
        assert_eq!(std::fs::read(&spool_file).unwrap(), kept, "{what}");
        eventually("no staged spool file left", || !staged_left()).await;
        // Nor does it leak upstream through the node's own aggregate.
        let out = hub.daemon.node().current_outbound().await;
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("Total-Object-Count{2}:\t11"), "{text}");
    }
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_ends_a_learned_binding_drops_its_hint() {
    let open = FakePeer::start(object(
        OPEN,
        "http://open/",
        &author_hint(3, &[("Ortega", 2)]),
    ))
    .await;
    let mut spec = NodeSpec::new(HUB, &["Hugo"]).peer_at("zz-open", open.addr, &["poll"], None);
    spec.poll_interval = "1h";
    let mut hub = TestNode::start(spec.clone()).await;
    hub.wait_for("the open peer learned", |s| s.peers_imported == 1)
        .await;
    let node = hub.daemon.node().clone();
    let open_dsi = Dsi::new(OPEN).unwrap();
    assert_eq!(hub.query("Author=Ortega").await.referrals.len(), 1);
    // A reload that leaves the peer as it was keeps the binding and the hint.
    hub.reconfigure(spec.clone()).await;
    assert_eq!(node.peer_dsi("zz-open").as_ref(), Some(&open_dsi));
    assert!(node.table().contains(&open_dsi));
    // Now it is configured with another DSI: the learned one and its hint go.
    let mut changed =
        NodeSpec::new(HUB, &["Hugo"]).peer_at("zz-open", open.addr, &["poll"], Some(EVIL));
    changed.poll_interval = "1h";
    hub.reconfigure(changed).await;
    assert_eq!(node.peer_dsi("zz-open").unwrap().as_str(), EVIL);
    // A poll accepted before the reload may still land after it; the node then drops what
    // the ended binding brought (import path), so the end state is what counts.
    eventually("the unvouched hint dropped", || {
        !node.table().contains(&open_dsi)
    })
    .await;
    let mut answer = hub.query("Author=Ortega").await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !answer.referrals.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        answer = hub.query("Author=Ortega").await;
    }
    assert!(!node.table().contains(&open_dsi));
    assert!(hub.query("Author=Ortega").await.referrals.is_empty());
    let out = node.current_outbound().await;
    assert!(!String::from_utf8_lossy(&out).contains("Ortega"));
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_over_the_memory_budgets_are_refused_and_the_good_hint_stays() {
    let peer = FakePeer::start(object(GOOD, "http://good/", &garcia(10, 5))).await;
    let other = FakePeer::start(object(OPEN, "http://open/", &garcia(10, 2))).await;
    let mut spec = NodeSpec::new(HUB, &["Hugo"])
        .peer_at("good", peer.addr, &["poll"], Some(GOOD))
        .peer_at("open", other.addr, &["poll"], Some(OPEN));
    spec.poll_interval = "50ms";
    // A six-byte value is charged 6 + 73 bytes: each peer may hold 100 values' worth, the
    // table about 63.
    spec.extra_limits = "max_peer_table_bytes = 7900\nmax_table_bytes = 5000".into();
    let hub = TestNode::start(spec).await;
    hub.wait_for("both hints", |s| s.peers_imported == 2).await;
    let good = garcia_referrals(&hub).await;
    assert_eq!(good.len(), 2);
    let wide = |n: usize| {
        let names: Vec<String> = (0..n).map(|i| format!("Name{i:02}")).collect();
        let values: Vec<(&str, u64)> = names.iter().map(|n| (n.as_str(), 1)).collect();
        let mut values = values;
        values.push(("Garcia", 5));
        object(GOOD, "http://good/", &author_hint(10, &values))
    };
    // Over the per-peer budget (the hint alone), then over the table's (with the other
    // peer's hint): both refused, the good hint stays, and the metric counts them.
    for (what, n) in [("over the peer budget", 120), ("over the table budget", 80)] {
        let before = hub.daemon.node().status_snapshot().budget_refusals;
        peer.set(wide(n));
        hub.wait_for(what, |s| s.budget_refusals >= before + 2)
            .await;
        assert_eq!(garcia_referrals(&hub).await, good, "{what}");
        if n == 120 {
            // Over the peer budget, the answer is refused as it arrives, before it is all
            // read (PROTOCOL.md "Memory budgets").
            let error = hub
                .daemon
                .node()
                .peer_states()
                .into_iter()
                .find(|p| p.name == "good")
                .and_then(|p| p.last_error)
                .unwrap_or_default();
            assert!(
                error.contains("refused while it arrived")
                    && error.contains("limits.max_peer_table_bytes"),
                "{error}"
            );
        }
    }
    let m = hub.daemon.node().render_metrics();
    assert!(metric(&m, "cipd_index_objects_over_budget_total") >= 4.0);
    assert!(metric(&m, "cipd_table_budget_bytes") <= 5000.0);
    let state = hub
        .daemon
        .node()
        .peer_states()
        .into_iter()
        .find(|p| p.name == "good")
        .unwrap();
    assert!(
        state
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("limits.max_table_bytes")),
        "{state:?}"
    );
    // Within the budgets it is taken.
    peer.set(wide(40));
    hub.wait_query("Author=Name39", |a| !a.referrals.is_empty())
        .await;
    hub.stop().await;
}
