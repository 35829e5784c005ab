//! Signed hints: a three-level mesh whose hints are signed at every level, pushes refused
//! with the 530 series, replays refused, the previous good hint kept, and keys that others
//! can read refused.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cip_proto::cip::{Request, ResponseCode};
use cipd::model::trust::keys::NodeKey;
use cipd::model::trust::signature::{self, PeerTrust, Policy};
use cipd::transport::{CipClient, TransportConfig};

use crate::fake::{author_hint, object};
use crate::harness::{NodeSpec, TestNode, config_text, metric};

const LEAF: &str = "1.3.6.1.4.1.99999.91";
const MID: &str = "1.3.6.1.4.1.99999.92";
const ROOT: &str = "1.3.6.1.4.1.99999.93";
const HUB: &str = "1.3.6.1.4.1.99999.94";
const FEEDER: &str = "1.3.6.1.4.1.99999.95";

/// A fresh key written under `dir/name`; its private key path.
fn keygen(dir: &Path, name: &str) -> (NodeKey, PathBuf) {
    let key = NodeKey::generate().unwrap();
    let (private, _) = key.write(&dir.join(name)).unwrap();
    (key, private)
}

fn signing(key: &Path) -> String {
    format!("[signing]\nkey = {:?}\n", key.display().to_string())
}

/// A `[[peer]]` polled at `node`'s CIP address, with a key and policy.
fn signed_peer(name: &str, node: &TestNode, key: &NodeKey, policy: &str) -> String {
    format!(
        "[[peer]]\nname = {name:?}\nhost = \"127.0.0.1\"\nport = {}\nrole = \"poll\"\n\
         poll_interval = \"100ms\"\ndsi = {:?}\npublic_key = \"{}\"\nsignatures = {policy:?}\n",
        node.cip_addr().port(),
        node.spec.dsi,
        key.public()
    )
}

fn peer_signature(node: &TestNode, peer: &str) -> String {
    node.daemon.node().trust().describe(peer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_hints_cross_a_three_level_mesh() {
    let keys = tempfile::tempdir().unwrap();
    let (leaf_key, leaf_private) = keygen(keys.path(), "leaf");
    let (mid_key, mid_private) = keygen(keys.path(), "mid");
    let (stranger, _) = keygen(keys.path(), "stranger");

    let mut leaf_spec = NodeSpec::new(LEAF, &["Garcia", "Garcia", "Okafor"]);
    leaf_spec.extra = signing(&leaf_private);
    let leaf = TestNode::start(leaf_spec).await;
    let mut mid_spec = NodeSpec::new(MID, &["Garcia"]);
    mid_spec.extra = format!(
        "{}{}",
        signing(&mid_private),
        signed_peer("leaf", &leaf, &leaf_key, "require")
    );
    let mid = TestNode::start(mid_spec).await;
    let mut root_spec = NodeSpec::new(ROOT, &[]);
    root_spec.extra = signed_peer("mid", &mid, &mid_key, "require");
    let root = TestNode::start(root_spec).await;

    // The leaf's signed hint reaches the mid, the mid's signed aggregate the root.
    mid.wait_for("the leaf's signed hint", |s| s.peers_imported >= 1)
        .await;
    let at_root = root
        .wait_query("Author=Garcia", |a| {
            a.referrals.iter().any(|r| r.dsi == MID && r.count == 3)
        })
        .await;
    assert_eq!(at_root.referrals.len(), 1, "{at_root:?}");
    assert!(peer_signature(&mid, "leaf").starts_with("valid ed25519:"));
    assert!(peer_signature(&root, "mid").starts_with("valid ed25519:"));
    for n in [&mid, &root] {
        let m = n.daemon.node().render_metrics();
        assert!(metric(&m, "cipd_hint_signatures_valid_total") >= 1.0);
        assert_eq!(metric(&m, "cipd_hint_signatures_refused_total"), 0.0);
    }
    // The root's peers listing names the leaf as known through the mid's signed hint.
    assert_eq!(root.daemon.node().status_snapshot().signature_refusals, 0);

    // The mid keeps the leaf's hint as it arrived: its signature still checks against the
    // leaf's key, and against no other.
    let kept = mid.daemon.node().received_hint("leaf").unwrap();
    let hint = cipd::pipeline::index_types::parse_hint(&kept.payload, Default::default()).unwrap();
    let trust = |k: &NodeKey| PeerTrust {
        keys: vec![k.public().clone()],
        policy: Policy::Require,
    };
    let now = SystemTime::now();
    assert!(signature::check(&hint, &trust(&leaf_key), None, now, Duration::MAX).is_ok());
    assert!(signature::check(&hint, &trust(&stranger), None, now, Duration::MAX).is_err());

    // A mid that expects another key refuses the leaf's hints and never tables them.
    let mut wary_spec = NodeSpec::new("1.3.6.1.4.1.99999.96", &[]);
    wary_spec.extra = signed_peer("leaf", &leaf, &stranger, "require");
    let wary = TestNode::start(wary_spec).await;
    let s = wary
        .wait_for("two refused polls", |s| s.signature_refusals >= 2)
        .await;
    assert_eq!(s.table_peers, 0);
    assert!(wary.query("Author=Garcia").await.referrals.is_empty());
    assert_eq!(peer_signature(&wary, "leaf"), "refused: invalid");
    let m = wary.daemon.node().render_metrics();
    assert!(metric(&m, "cipd_hint_signatures_refused_total") >= 2.0);
    for n in [wary, root, mid, leaf] {
        n.stop().await;
    }
}

/// Signs `hint` with `key`, dated `date`.
fn signed(mut hint: hints::hint::CipHint, key: &NodeKey, date: SystemTime) -> hints::hint::CipHint {
    hint.date = Some(hints::hint::format_date(date));
    signature::sign(&mut hint, key, date);
    hint
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_hints_are_refused_with_the_530_series_and_the_good_one_stays() {
    let keys = tempfile::tempdir().unwrap();
    let (key, _) = keygen(keys.path(), "feeder");
    let (other, _) = keygen(keys.path(), "other");
    let mut spec = NodeSpec::new(HUB, &["Hugo"]);
    spec.extra = format!(
        "[[peer]]\nname = \"feeder\"\nhost = \"127.0.0.1\"\nrole = \"pusher\"\ndsi = {FEEDER:?}\n\
         public_key = \"{}\"\nsignatures = \"require\"\n",
        key.public()
    );
    let hub = TestNode::start(spec).await;
    let mut conn = CipClient::connect(hub.cip_addr(), None, &TransportConfig::default())
        .await
        .unwrap();
    let now = SystemTime::now();
    let push = |hint: &hints::hint::CipHint| {
        Request::IndexObject(object(FEEDER, "http://feeder.example/", hint))
    };
    let mut push_code =
        async |hint: &hints::hint::CipHint| conn.request(&push(hint)).await.unwrap().code;

    let good = author_hint(10, &[("Garcia", 5)]);
    // Unsigned, under `require`: 530.
    assert_eq!(push_code(&good).await, ResponseCode::SignatureRequired);
    // Signed by a key the hub does not hold for the feeder: 531.
    let forged = signed(good.clone(), &other, now);
    assert_eq!(push_code(&forged).await, ResponseCode::InvalidSignature);
    // A certification type the hub cannot check: 532.
    let mut pgp = signed(good.clone(), &key, now);
    pgp.certification_type = Some("PGP-Signature".into());
    assert_eq!(push_code(&pgp).await, ResponseCode::CannotCheckSignature);
    assert!(hub.query("Author=Garcia").await.referrals.is_empty());

    // The real thing is taken.
    let taken = signed(good.clone(), &key, now);
    assert_eq!(push_code(&taken).await, ResponseCode::Ok);
    let count = |a: &cipd::model::answer::QueryAnswer| a.referrals.first().map(|r| r.count);
    assert_eq!(count(&hub.query("Author=Garcia").await), Some(5));

    // An older signed hint (a replay of something the feeder once sent) is refused, as is
    // a signed one tampered with on the way and one dated an hour ahead: the good hint
    // stays in the table.
    let inflated = author_hint(1000, &[("Garcia", 900)]);
    let replay = signed(inflated.clone(), &key, now - Duration::from_secs(60));
    assert_eq!(push_code(&replay).await, ResponseCode::InvalidSignature);
    let mut tampered = signed(good.clone(), &key, now);
    tampered.weightlists[0].1.entries_mut()[0].count = 9;
    assert_eq!(push_code(&tampered).await, ResponseCode::InvalidSignature);
    let ahead = signed(inflated, &key, now + Duration::from_secs(3600));
    assert_eq!(push_code(&ahead).await, ResponseCode::InvalidSignature);
    assert_eq!(count(&hub.query("Author=Garcia").await), Some(5));

    let node = hub.daemon.node();
    assert_eq!(node.status_snapshot().signature_refusals, 6);
    let m = node.render_metrics();
    assert_eq!(metric(&m, "cipd_hint_signatures_refused_total"), 6.0);
    assert_eq!(metric(&m, "cipd_hint_signatures_valid_total"), 1.0);
    assert_eq!(node.trust().describe("feeder"), "refused: future");

    // After a restart the replay bound comes back from the spool.
    drop(conn);
    let spec = hub.spec.clone();
    let dir = hub.stop().await;
    let hub = TestNode::start_in(spec, dir).await;
    let mut conn = CipClient::connect(hub.cip_addr(), None, &TransportConfig::default())
        .await
        .unwrap();
    let replay = signed(good.clone(), &key, now - Duration::from_secs(1));
    let r = conn.request(&push(&replay)).await.unwrap();
    assert_eq!(r.code, ResponseCode::InvalidSignature, "{r:?}");
    assert!(format!("{r:?}").contains("replay"), "{r:?}");
    assert_eq!(count(&hub.query("Author=Garcia").await), Some(5));
    drop(conn);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_others_can_read_stops_the_start_and_the_reload() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let (_, private) = keygen(dir.path(), "keys");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut spec = NodeSpec::new(HUB, &["Hugo"]);
    spec.extra = signing(&private);
    std::fs::write(dir.path().join("docs.soif"), spec.collection_text()).unwrap();
    let path = dir.path().join("cipd.toml");
    std::fs::write(&path, config_text(&spec, dir.path())).unwrap();
    let config = cipd::model::config::read_config(&path).unwrap();
    let e = cipd::daemon::Daemon::start(config).await.unwrap_err();
    assert!(e.to_string().contains("readable by its group"), "{e}");

    // A running node keeps its configuration when a reload names such a key.
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut node = TestNode::start(spec.clone()).await;
    let signer = node.daemon.node().trust().key().unwrap().public().clone();
    let (_, second) = keygen(dir.path(), "second");
    std::fs::set_permissions(&second, std::fs::Permissions::from_mode(0o640)).unwrap();
    let mut next = spec.clone();
    next.extra = signing(&second);
    std::fs::write(
        node.dir.path().join("cipd.toml"),
        config_text(&next, node.dir.path()),
    )
    .unwrap();
    let e = node.daemon.node().reload().await.unwrap_err();
    assert!(e.to_string().contains("chmod 600"), "{e}");
    assert_eq!(node.daemon.node().trust().key().unwrap().public(), &signer);
    // Fixed, the reload takes the new key and the out-bound hint is signed with it.
    std::fs::set_permissions(&second, std::fs::Permissions::from_mode(0o600)).unwrap();
    node.reconfigure(next).await;
    let second_public = cipd::model::trust::keys::NodeKey::load(&second)
        .unwrap()
        .public()
        .clone();
    assert_eq!(
        node.daemon.node().trust().key().unwrap().public(),
        &second_public
    );
    let exported = node.daemon.node().current_outbound().await;
    let hint = cipd::pipeline::index_types::parse_hint(&exported, Default::default()).unwrap();
    let trust = PeerTrust {
        keys: vec![second_public],
        policy: Policy::Require,
    };
    assert!(
        signature::check(&hint, &trust, None, SystemTime::now(), Duration::MAX).is_ok(),
        "{hint:?}"
    );
    node.stop().await;
}
