//! The admin socket (issue 7): every command against a node with two peers, the socket's
//! permissions, and the key sets of every JSON result (scripts rely on them).

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;

use cipd::front::admin::{self, AdminRequest, Response};
use serde_json::Value;

use crate::harness::{NodeSpec, TestNode};

const L1: &str = "1.3.6.1.4.1.99999.51";
const L2: &str = "1.3.6.1.4.1.99999.52";
const HUB: &str = "1.3.6.1.4.1.99999.50";

async fn ask(node: &TestNode, req: AdminRequest) -> Response {
    admin::request(&node.admin_socket(), &req)
        .await
        .expect("admin socket answers")
}

async fn ok(node: &TestNode, req: AdminRequest) -> Value {
    let r = ask(node, req.clone()).await;
    assert!(r.ok, "{req:?} failed: {:?}", r.error);
    r.result.expect("a result")
}

async fn refused(node: &TestNode, req: AdminRequest) -> String {
    let r = ask(node, req.clone()).await;
    assert!(!r.ok, "{req:?} should fail: {:?}", r.result);
    r.error.expect("an error").kind
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect()
}

fn set(k: &[&'static str]) -> BTreeSet<&'static str> {
    k.iter().copied().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_command_against_a_hub_with_two_peers() {
    let l1 = TestNode::start(NodeSpec::new(L1, &["Bob", "Bea", "Garcia"])).await;
    let l2 = TestNode::start(NodeSpec::new(L2, &["Carol", "Jose Garcia y Montes"])).await;
    let hub_spec = NodeSpec::new(HUB, &["Hal"])
        .peer("l1", &l1, &["poll"])
        .peer("l2", &l2, &["poll"]);
    let hub = TestNode::start(hub_spec).await;
    hub.wait_for("both peers polled", |s| {
        s.table_peers >= 2 && s.polls_ok >= 2
    })
    .await;

    let mode = std::fs::metadata(hub.admin_socket())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "admin socket is private to the daemon's user");

    // status
    let status = ok(&hub, AdminRequest::Status).await;
    assert_eq!(
        keys(&status),
        set(&[
            "version",
            "uptime_seconds",
            "dsi",
            "base_uris",
            "listeners",
            "local_objects",
            "peers",
            "table",
            "import",
            "outbound"
        ])
    );
    assert_eq!(
        keys(&status["table"]),
        set(&["peers", "values", "entries", "bytes"])
    );
    assert_eq!(status["import"]["expected"], 2);
    assert_eq!(status["import"]["imported"], 2);
    assert_eq!(
        keys(&status["outbound"]),
        set(&[
            "table_generation",
            "built_from",
            "generation",
            "builds",
            "last_build_seconds",
            "lag_seconds",
            "eager"
        ])
    );
    assert_eq!(keys(&status["listeners"][0]), set(&["kind", "address"]));
    assert_eq!(status["dsi"], HUB);
    assert_eq!(status["local_objects"], 1);
    assert_eq!(status["peers"], 2);
    assert_eq!(status["table"]["peers"], 2);
    let kinds: Vec<&str> = status["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["cip", "http", "admin"]);

    // peers
    let peers = ok(&hub, AdminRequest::Peers).await;
    let peers = peers["peers"].as_array().unwrap();
    assert_eq!(peers.len(), 2);
    for p in peers {
        assert_eq!(
            keys(p),
            set(&[
                "name",
                "address",
                "role",
                "dsi",
                "last_poll",
                "last_success",
                "last_error",
                "hint_age_seconds",
                "expires",
                "objects",
                "values",
                "signature",
                "failures",
                "next_poll",
                "index_type",
                "damped_until"
            ])
        );
        assert_eq!(p["failures"], 0, "{p}");
        assert!(p["last_success"].as_u64().is_some(), "{p}");
        assert!(p["last_error"].is_null(), "{p}");
        assert_eq!(p["role"], "poll");
        assert_eq!(p["signature"], "unsigned");
    }
    let p1 = peers.iter().find(|p| p["name"] == "l1").unwrap();
    assert_eq!(p1["dsi"], L1);
    assert_eq!(p1["objects"], 3);
    assert_eq!(p1["address"], l1.cip_addr().to_string());

    // table, with each filter
    let all = ok(
        &hub,
        AdminRequest::Table {
            attr: None,
            peer: None,
            prefix: None,
            top: 100,
        },
    )
    .await;
    let rows = all["rows"].as_array().unwrap();
    assert_eq!(keys(&rows[0]), set(&["attr", "value", "total", "peers"]));
    let author = |v: &str| {
        rows.iter()
            .any(|r| r["value"] == v && r["attr"] == "DOCUMENT:Author")
    };
    assert!(
        author("Bob") && author("Carol") && author("Garcia"),
        "{all}"
    );
    let only_l2 = ok(
        &hub,
        AdminRequest::Table {
            attr: Some("DOCUMENT:Author".into()),
            peer: Some(L2.into()),
            prefix: None,
            top: 100,
        },
    )
    .await;
    let values: BTreeSet<&str> = only_l2["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["value"].as_str().unwrap())
        .collect();
    assert_eq!(values, set(&["Carol", "Jose Garcia y Montes"]));
    let prefixed = ok(
        &hub,
        AdminRequest::Table {
            attr: None,
            peer: None,
            prefix: Some("b".into()),
            top: 1,
        },
    )
    .await;
    assert_eq!(
        prefixed["rows"].as_array().unwrap().len(),
        1,
        "top limits the rows"
    );
    assert_eq!(
        refused(
            &hub,
            AdminRequest::Table {
                attr: Some("Author".into()),
                peer: None,
                prefix: None,
                top: 5
            }
        )
        .await,
        "invalid-argument"
    );

    // explain
    let ex = ok(
        &hub,
        AdminRequest::Explain {
            query: "DOCUMENT:Author~garcia".into(),
            possible: false,
        },
    )
    .await;
    let refs = ex["referrals"].as_array().unwrap();
    assert_eq!(refs.len(), 2, "{ex}");
    assert_eq!(
        keys(&refs[0]),
        set(&[
            "rank",
            "dsi",
            "base_uris",
            "count",
            "total",
            "definite",
            "reason",
            "terms"
        ])
    );
    assert_eq!(
        keys(&refs[0]["terms"][0]),
        set(&["term", "matches", "count", "possible"])
    );
    assert_eq!(refs[0]["rank"], 1);
    assert!(
        refs.iter()
            .all(|r| r["definite"] == true && r["count"] == 1)
    );
    assert!(!refs[0]["reason"].as_str().unwrap().is_empty());
    assert_eq!(
        refused(
            &hub,
            AdminRequest::Explain {
                query: "Author=".into(),
                possible: false
            }
        )
        .await,
        "invalid-argument"
    );

    // poll now
    let before = hub.daemon.node().status_snapshot().polls_ok;
    let msg = ok(&hub, AdminRequest::Poll { peer: "l1".into() }).await;
    assert!(msg["message"].as_str().unwrap().contains("l1"));
    hub.wait_for("the extra poll", |s| s.polls_ok > before)
        .await;
    assert_eq!(
        refused(
            &hub,
            AdminRequest::Poll {
                peer: "nope".into()
            }
        )
        .await,
        "unknown-peer"
    );

    // export: the out-bound hint holds the hub's and both peers' values
    let export = ok(&hub, AdminRequest::Export).await;
    let soif = export["soif"].as_str().unwrap();
    assert!(soif.starts_with("@CIP-HINT"), "{soif}");
    for v in ["Hal", "Bob", "Carol"] {
        assert!(soif.contains(v), "{v} missing from {soif}");
    }

    // metrics
    let metrics = ok(&hub, AdminRequest::Metrics).await;
    let text = metrics["text"].as_str().unwrap();
    assert!(
        text.contains("cipd_polls_total{peer=\"l1\",result=\"ok\"}"),
        "{text}"
    );
    assert!(text.contains("cipd_table_peers 2"), "{text}");

    // drop-peer
    let dropped = ok(&hub, AdminRequest::DropPeer { dsi: L2.into() }).await;
    assert!(dropped["message"].as_str().unwrap().contains(L2));
    assert_eq!(
        refused(&hub, AdminRequest::DropPeer { dsi: L2.into() }).await,
        "unknown-peer"
    );
    assert_eq!(
        refused(&hub, AdminRequest::DropPeer { dsi: "1.02".into() }).await,
        "invalid-argument"
    );
    assert!(hub.query("Author=Carol").await.referrals.is_empty());

    // reload
    let reload = ok(&hub, AdminRequest::Reload).await;
    assert_eq!(
        keys(&reload),
        set(&[
            "message",
            "config_reloaded",
            "collections_reloaded",
            "needs_restart"
        ])
    );
    assert_eq!(reload["config_reloaded"], true);

    // log-level: test nodes do not install a subscriber, so the daemon says so
    assert_eq!(
        refused(
            &hub,
            AdminRequest::LogLevel {
                level: "debug".into()
            }
        )
        .await,
        "failed"
    );

    // shutdown
    let bye = ok(&hub, AdminRequest::Shutdown).await;
    assert_eq!(bye["message"], "shutting down");
    assert!(hub.daemon.node().is_shutting_down());
    let socket = hub.admin_socket();
    let dir = hub.stop().await;
    assert!(!socket.exists(), "socket removed at shutdown");
    drop(dir);
    l1.stop().await;
    l2.stop().await;
}

/// A restart with a spool of many hints: the admin socket answers while the spool is
/// restored, and `status` shows the phase and how far it is until the node serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_progress_of_a_long_start() {
    use cipd::store::spool::{Spool, SpoolEntry};
    let mut spec = NodeSpec::new(HUB, &["Hugo"]);
    let peers = 150;
    let dir = tempfile::tempdir().unwrap();
    let spool = Spool::open(&dir.path().join("spool")).unwrap();
    for i in 0..peers {
        let dsi = format!("1.3.6.1.4.1.99999.2{i:03}");
        let values: Vec<String> = (0..1000).map(|v| format!("Author {i} {v}")).collect();
        let pairs: Vec<(&str, u64)> = values.iter().map(|v| (v.as_str(), 1)).collect();
        let hint = crate::fake::author_hint(1000, &pairs);
        spool
            .store(&SpoolEntry {
                peer: format!("p{i}"),
                dsi: cip_proto::Dsi::new(&dsi).unwrap(),
                index_type: "HARVEST-SOIF-1".into(),
                base_uris: vec![format!("http://p{i}/")],
                description: None,
                received: std::time::SystemTime::now(),
                payload: hint.to_soif().to_bytes().into(),
            })
            .unwrap();
        spec = spec.peer_at(
            &format!("p{i}"),
            "127.0.0.1:9".parse().unwrap(),
            &["pusher"],
            Some(&dsi),
        );
    }
    // Start in the background and ask the admin socket as soon as it exists.
    let socket = dir.path().join("admin.sock");
    let start = tokio::spawn(TestNode::start_in(spec, dir));
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !start.is_finished() && std::time::Instant::now() < deadline {
        if let Ok(r) = cipd::front::admin::request(&socket, &AdminRequest::Status).await
            && let Some(result) = r.result
        {
            seen.push(result["starting"].clone());
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let node = start.await.unwrap();
    let during: Vec<&Value> = seen.iter().filter(|s| !s.is_null()).collect();
    assert!(
        !during.is_empty(),
        "the admin socket answered {} times during the start, never with progress",
        seen.len()
    );
    let phase = during[0]["phase"].as_str().unwrap();
    assert!(
        [
            "restoring the spool",
            "indexing the spooled hints",
            "loading collections"
        ]
        .contains(&phase),
        "{phase}"
    );
    let after = ok(&node, AdminRequest::Status).await;
    assert!(after.get("starting").is_none(), "{after}");
    assert_eq!(node.daemon.node().status_snapshot().spool_restored, peers);
    node.stop().await;
}
