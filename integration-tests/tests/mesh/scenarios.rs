//! The mesh scenarios of issue 6.

use std::time::Duration;

use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::cip::{IndexObject, IndexType, Request, ResponseCode};
use cipd::transport::{CipClient, TransportConfig};

use crate::harness::{NodeSpec, TestNode};

const A: &str = "1.3.6.1.4.1.99999.10";
const B: &str = "1.3.6.1.4.1.99999.11";
const LEAF1: &str = "1.3.6.1.4.1.99999.21";
const LEAF2: &str = "1.3.6.1.4.1.99999.22";
const MID: &str = "1.3.6.1.4.1.99999.30";
const ROOT: &str = "1.3.6.1.4.1.99999.40";

fn referral<'a>(
    a: &'a cipd::model::answer::QueryAnswer,
    dsi: &str,
) -> Option<&'a cipd::model::answer::ReferralJson> {
    a.referrals.iter().find(|r| r.dsi == dsi)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_poll_each_other() {
    let mut a = TestNode::start(NodeSpec::new(A, &["Alice", "Alma"])).await;
    let mut b_spec = NodeSpec::new(B, &["Bob"]).peer("a", &a, &["poll", "poller"]);
    b_spec.poll_interval = "100ms";
    let b = TestNode::start(b_spec).await;
    let mut a_spec = a.spec.clone().peer("b", &b, &["poll", "poller"]);
    a_spec.poll_interval = "100ms";
    a.reconfigure(a_spec).await;

    // Several rounds each way: a ping-pong would show as growing counts or refused hints.
    a.wait_for("polls of b", |s| s.polls_ok >= 4).await;
    b.wait_for("polls of a", |s| s.polls_ok >= 4).await;
    let at_a = a.query("Author=Bob").await;
    let r = referral(&at_a, B).expect("a refers to b for Bob");
    assert_eq!((r.count, r.total), (1, 1), "{at_a:?}");
    assert_eq!(at_a.local, 0);
    let at_b = b.query("Author~Al").await;
    let r = referral(&at_b, A).expect("b refers to a");
    assert_eq!((r.count, r.total), (2, 2), "counts must not grow: {at_b:?}");
    assert_eq!(
        r.dsi_description.as_deref(),
        Some(format!("test node {A}").as_str())
    );
    // Neither node ever refers to itself or imports its own data back.
    assert!(referral(&a.query("Author=Alice").await, A).is_none());
    assert_eq!(a.daemon.node().status_snapshot().hints_rejected, 0);
    assert_eq!(b.daemon.node().status_snapshot().hints_rejected, 0);
    a.stop().await;
    b.stop().await;
}

async fn follow(server: &str, q: &str) -> Vec<cipd::ctl::query::Visit> {
    let args = cipd::ctl::query::QueryArgs {
        server: server.to_owned(),
        query: q.to_owned(),
        json: true,
        possible: false,
        follow: true,
        limit: None,
        timeout: Duration::from_secs(5),
        tls: Default::default(),
    };
    cipd::ctl::query::follow(&args).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_level_hierarchy_answers_at_the_root() {
    let leaf1 = TestNode::start(NodeSpec::new(LEAF1, &["Garcia", "Lindqvist"])).await;
    let leaf2 = TestNode::start(NodeSpec::new(LEAF2, &["Garcia", "Okafor", "Becker"])).await;
    let mid = TestNode::start(
        NodeSpec::new(MID, &[])
            .peer("leaf1", &leaf1, &["poll"])
            .peer("leaf2", &leaf2, &["poll"]),
    )
    .await;
    mid.wait_for("both leaves", |s| s.hints_accepted >= 2).await;
    let root = TestNode::start(NodeSpec::new(ROOT, &[]).peer("mid", &mid, &["poll"])).await;
    root.wait_for("mid's aggregate", |s| s.hints_accepted >= 1)
        .await;

    let at_root = root.query("Author=Garcia").await;
    let r = referral(&at_root, MID).expect("root refers to mid");
    assert_eq!((r.count, r.total), (2, 5), "{at_root:?}");
    let at_mid = mid.query("Author=Garcia").await;
    assert!(
        referral(&at_mid, LEAF1).is_some() && referral(&at_mid, LEAF2).is_some(),
        "{at_mid:?}"
    );
    assert!(referral(&root.query("Author=Okafor").await, MID).is_some());
    assert!(root.query("Author=Nobody").await.referrals.is_empty());

    // A client chasing referrals from the root reaches both leaves and their objects.
    let visits = follow(&root.http_url(), "Author=Garcia").await;
    let dsis: Vec<&str> = visits.iter().map(|v| v.answer.dsi.as_str()).collect();
    assert_eq!(dsis, [ROOT, MID, LEAF1, LEAF2]);
    let found: u64 = visits
        .iter()
        .filter_map(|v| v.objects.as_ref())
        .map(|o| o.total)
        .sum();
    assert_eq!(found, 2);
    let only_leaf2 = follow(&root.http_url(), "Author=Becker").await;
    assert_eq!(only_leaf2.last().unwrap().answer.dsi, LEAF2);
    for n in [root, mid, leaf1, leaf2] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datachanged_propagates_up_the_hierarchy() {
    // Poll intervals of an hour: only datachanged can make the new value reach the root.
    let mut leaf = TestNode::start(NodeSpec::new(LEAF1, &["Ada"])).await;
    let mut mid = TestNode::start(NodeSpec::new(MID, &[]).peer("leaf", &leaf, &["poll"])).await;
    let root = TestNode::start(NodeSpec::new(ROOT, &[]).peer("mid", &mid, &["poll"])).await;
    root.wait_for("first poll", |s| s.hints_accepted >= 1).await;
    let leaf_spec = leaf.spec.clone().peer("mid", &mid, &["poller"]);
    leaf.reconfigure(leaf_spec).await;
    let mid_spec = mid.spec.clone().peer("root", &root, &["poller"]);
    let polled = mid.daemon.node().status_snapshot().polls_ok;
    mid.reconfigure(mid_spec).await;
    // The reload polls the leaf at once; done before the change, so that only the leaf's
    // datachanged can bring it (on a busy machine that poll could otherwise come after).
    mid.wait_for("the reload's poll", |s| s.polls_ok > polled)
        .await;
    assert!(root.query("Author=Zed").await.referrals.is_empty());

    leaf.set_authors(&["Ada", "Zed"]).await;
    let answer = root
        .wait_query("Author=Zed", |a| referral(a, MID).is_some())
        .await;
    assert_eq!(referral(&answer, MID).unwrap().total, 2);
    assert!(mid.daemon.node().status_snapshot().datachanged_received >= 1);
    assert!(root.daemon.node().status_snapshot().datachanged_received >= 1);
    for n in [root, mid, leaf] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_from_spool_with_peers_down() {
    let leaf = TestNode::start(NodeSpec::new(LEAF1, &["Hopper"])).await;
    let mut spec = NodeSpec::new(MID, &[]).peer("leaf", &leaf, &["poll"]);
    spec.poll_interval = "100ms";
    let mid = TestNode::start(spec.clone()).await;
    mid.wait_for("leaf's hint", |s| s.hints_accepted >= 1).await;
    leaf.stop().await;
    let dir = mid.stop().await;
    // A crash leftover and a corrupt file must not stop the restart.
    std::fs::write(
        dir.path().join("spool/.x.spool.Ab12Cd.tmp"),
        b"half written",
    )
    .unwrap();
    std::fs::write(dir.path().join("spool/bogus.spool"), b"not a spool file").unwrap();

    let mid = TestNode::start_in(spec, dir).await;
    let status = mid.daemon.node().status_snapshot();
    assert_eq!(
        (status.spool_restored, status.spool_corrupt),
        (1, 1),
        "{status:?}"
    );
    let a = mid.query("Author=Hopper").await;
    assert!(
        referral(&a, LEAF1).is_some(),
        "answered from the spool: {a:?}"
    );
    // The leaf is down: polls fail, the restored hint stays.
    mid.wait_for("a failed poll", |s| s.polls_failed >= 2).await;
    assert!(referral(&mid.query("Author=Hopper").await, LEAF1).is_some());
    let peer = mid
        .daemon
        .node()
        .peer_states()
        .into_iter()
        .find(|p| p.name == "leaf")
        .unwrap();
    assert!(
        peer.last_error.is_some() && peer.consecutive_failures >= 2,
        "{peer:?}"
    );
    mid.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_peers_are_refused_with_530() {
    let node = TestNode::start(NodeSpec::new(A, &["Alice"])).await;
    let mut conn = CipClient::connect(node.cip_addr(), None, &TransportConfig::default())
        .await
        .unwrap();
    assert_eq!(
        conn.request(&Request::Noop).await.unwrap().code,
        ResponseCode::Ok
    );
    let push = IndexObject {
        index_type: IndexType::harvest_soif(),
        dsi: Dsi::new(B).unwrap(),
        base_uris: vec!["http://intruder.example/".into()],
        dsi_description: None,
        payload: Bytes::from_static(b"@CIP-HINT { -\nTotal-Object-Count{1}:\t9\n}\n"),
    };
    let r = conn.request(&Request::IndexObject(push)).await.unwrap();
    assert_eq!(r.code, ResponseCode::SignatureRequired, "{r:?}");
    let changed = Request::DataChanged {
        index_type: IndexType::harvest_soif(),
        dsi: Dsi::new(B).unwrap(),
        body: Bytes::new(),
    };
    assert_eq!(
        conn.request(&changed).await.unwrap().code,
        ResponseCode::SignatureRequired
    );
    // Anyone may poll; the answer carries our hint with dsi and base-uri.
    let poll = Request::Poll {
        index_type: IndexType::harvest_soif(),
        dsi: Dsi::new(A).unwrap(),
        params: vec![],
        body: Bytes::new(),
    };
    let r = conn.request(&poll).await.unwrap();
    assert_eq!(r.code, ResponseCode::OkOutputFollows);
    let objs = r.result.unwrap().objects;
    assert_eq!(objs.len(), 1);
    assert_eq!(objs[0].dsi.as_str(), A);
    assert_eq!(objs[0].base_uris, vec![format!("{}/", node.http_url())]);
    let tagged = Request::Poll {
        index_type: IndexType::tagged(),
        dsi: Dsi::new(A).unwrap(),
        params: vec![],
        body: Bytes::new(),
    };
    // A tagged poll (legacy Whois++ gatherers) gets our local collections as a tagged index.
    let r = conn.request(&tagged).await.unwrap();
    assert_eq!(r.code, ResponseCode::OkOutputFollows);
    assert_eq!(r.result.unwrap().objects[0].index_type, IndexType::tagged());
    let centroid = Request::Poll {
        index_type: IndexType::new("centroid").unwrap(),
        dsi: Dsi::new(A).unwrap(),
        params: vec![],
        body: Bytes::new(),
    };
    assert_eq!(
        conn.request(&centroid).await.unwrap().code,
        ResponseCode::Ok
    );
    let _ = conn.close().await;
    assert!(node.query("Author=Alice").await.referrals.is_empty());
    assert_eq!(
        node.daemon.node().status_snapshot().unknown_peer_refusals,
        2
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reload_keeps_the_running_config() {
    let node = TestNode::start(NodeSpec::new(A, &["Alice"])).await;
    std::fs::write(
        node.dir.path().join("cipd.toml"),
        "[node]\ndsi = \"1.02\"\n",
    )
    .unwrap();
    let err = node.daemon.node().reload().await.unwrap_err();
    assert!(err.to_string().contains("node.dsi"), "{err}");
    assert_eq!(node.config().node.dsi.as_str(), A);
    assert_eq!(node.daemon.node().status_snapshot().reload_failures, 1);
    assert_eq!(node.query("Author=Alice").await.local, 1);
    // A busy port is a clear start error.
    let text = crate::harness::config_text(&node.spec, node.dir.path()).replace(
        "cip = [\"127.0.0.1:0\"]",
        &format!("cip = [\"{}\"]", node.cip_addr()),
    );
    let config = cipd::model::config::Config::from_toml(&text).unwrap();
    let e = cipd::daemon::Daemon::start(config).await.unwrap_err();
    assert!(matches!(e, cipd::daemon::StartError::Bind { .. }), "{e}");

    // An HTTP client that cannot be built (its CA file holds no certificate): a reload is
    // refused and the running client kept; a start fails, naming the setting and the file.
    let bad_ca = node.dir.path().join("not-a-ca.pem");
    std::fs::write(&bad_ca, "not PEM\n").unwrap();
    let with_ca = format!(
        "{}\n[http_client]\nca = {:?}\n",
        crate::harness::config_text(&node.spec, node.dir.path()),
        bad_ca.display().to_string()
    );
    std::fs::write(node.dir.path().join("cipd.toml"), &with_ca).unwrap();
    let err = node.daemon.node().reload().await.unwrap_err();
    assert!(
        matches!(err, cipd::node::ReloadError::HttpClient(_))
            && err.to_string().contains("not-a-ca.pem"),
        "{err}"
    );
    assert_eq!(node.daemon.node().status_snapshot().reload_failures, 2);
    assert_eq!(
        node.config().http_client.ca,
        None,
        "the running configuration stays"
    );
    let config =
        cipd::model::config::Config::from_toml(&with_ca.replace("admin.sock", "admin2.sock"))
            .unwrap();
    let e = cipd::daemon::Daemon::start(config).await.unwrap_err();
    assert!(
        matches!(e, cipd::daemon::StartError::HttpClient(_))
            && e.to_string().contains("not-a-ca.pem"),
        "{e}"
    );
    node.stop().await;
}

/// The HTTP API writes answers straight from the table and caches them; they must be the
/// documents the library's `referrals` builds, before and after the table changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_answers_are_the_documented_documents_and_follow_changes() {
    let a = TestNode::start(NodeSpec::new(A, &["Alice", "Alma", "Bob"])).await;
    let mut spec = NodeSpec::new(B, &["Bob", "Bea"]).peer("a", &a, &["poll"]);
    spec.poll_interval = "50ms";
    let mut b = TestNode::start(spec).await;
    b.wait_for("a's hint", |s| s.table_peers == 1).await;
    let node = b.daemon.node().clone();
    for q in [
        "Author=Bob",
        "DOCUMENT:Author=bob",
        "Author~al",
        "Author~b & Title~report",
        "Author=nobody",
    ] {
        for limit in [None, Some(1)] {
            let lib = node.referrals(q, false, limit).unwrap();
            for _ in 0..2 {
                let query = node.parse_query(q).unwrap();
                let bytes = node.referrals_json(q, &query, false, limit).unwrap();
                let http: cipd::model::answer::QueryAnswer =
                    serde_json::from_slice(&bytes).unwrap();
                assert_eq!(http, lib, "{q} limit {limit:?}");
                assert_eq!(bytes, serde_json::to_vec(&lib).unwrap(), "{q}: same bytes");
            }
        }
    }
    // The cached answer follows a change of the peer's hint and of the local collection.
    assert!(referral(&b.query("Author=Alice").await, A).is_some());
    let before = node.status_snapshot().hints_accepted;
    let mut a = a;
    a.set_authors(&["Carol"]).await;
    b.wait_query("Author=Alice", |ans| referral(ans, A).is_none())
        .await;
    // The table changes before the accept is counted: wait for the count.
    b.wait_for("the new hint counted", |s| s.hints_accepted > before)
        .await;
    assert_eq!(b.query("Author=Bea").await.local, 1);
    b.set_authors(&["Dora"]).await;
    assert_eq!(b.query("Author=Bea").await.local, 0);
    a.stop().await;
    b.stop().await;
}
