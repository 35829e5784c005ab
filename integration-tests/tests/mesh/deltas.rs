//! Hints that travel as deltas (PROTOCOL.md "Hint deltas"): a poller that holds a peer's
//! hint takes a change as a delta from it, and one whose base is gone takes the whole
//! hint at once and loses nothing.

use crate::harness::{NodeSpec, TestNode, eventually};

fn authors(extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = (0..300).map(|i| format!("Author{i}")).collect();
    a.extend(extra.iter().map(|s| (*s).to_owned()));
    a
}

fn refs(a: &[String]) -> Vec<&str> {
    a.iter().map(String::as_str).collect()
}

/// Removes the hub's spooled copies of what `peer` sent it: the base a delta applies to.
/// (A spool file is named by the peer's name in hex, then the DSI.)
fn forget_spooled(hub: &TestNode, peer: &str) -> usize {
    let name: String = peer.bytes().map(|b| format!("{b:02x}")).collect();
    let mut removed = 0;
    let mut dirs = vec![hub.dir.path().to_owned()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.components().any(|c| c.as_os_str() == "spool")
                && e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{name}."))
            {
                std::fs::remove_file(&p).unwrap();
                removed += 1;
            }
        }
    }
    removed
}

fn applied(n: &TestNode) -> u64 {
    n.daemon.node().metrics().deltas_applied.get()
}

fn refused(n: &TestNode) -> u64 {
    n.daemon.node().metrics().deltas_refused.get()
}

fn sent(n: &TestNode) -> u64 {
    n.daemon.node().metrics().deltas_sent.get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_travels_as_a_delta_and_a_lost_base_brings_the_whole_hint() {
    let start = authors(&[]);
    let mut leaf = TestNode::start(NodeSpec::new("1.3.6.1.4.1.99999.601", &refs(&start))).await;
    let mut hub = TestNode::start(NodeSpec::new("1.3.6.1.4.1.99999.600", &["Hub"])).await;
    leaf.reconfigure(leaf.spec.clone().peer("hub", &hub, &["poller"]))
        .await;
    hub.reconfigure(hub.spec.clone().peer("leaf", &leaf, &["poll"]))
        .await;
    hub.wait_query("Author=Author7", |a| a.referrals.len() == 1)
        .await;

    // One new author: a delta, applied; the hub refers it.
    let one = authors(&["Newcomer"]);
    leaf.set_authors(&refs(&one)).await;
    hub.wait_query("Author=Newcomer", |a| a.referrals.len() == 1)
        .await;
    eventually("the delta counted", || applied(&hub) >= 1).await;
    assert!(sent(&leaf) >= 1);
    assert_eq!(refused(&hub), 0);
    assert_eq!(hub.query("Author=Author7").await.referrals.len(), 1);

    // The hub loses the base (its spooled copy): the next delta is refused, nothing is
    // lost, and the whole hint comes at once.
    assert!(forget_spooled(&hub, "leaf") >= 1);
    let two = authors(&["Newcomer", "Latecomer"]);
    leaf.set_authors(&refs(&two)).await;
    hub.wait_query("Author=Latecomer", |a| a.referrals.len() == 1)
        .await;
    assert_eq!(refused(&hub), 1, "the delta without its base");
    for q in ["Author=Author7", "Author=Newcomer", "Author=Author299"] {
        assert_eq!(hub.query(q).await.referrals.len(), 1, "{q}");
    }
    // And deltas flow again from the whole hint on.
    let before = applied(&hub);
    let three = authors(&["Newcomer", "Latecomer", "Third"]);
    leaf.set_authors(&refs(&three)).await;
    hub.wait_query("Author=Third", |a| a.referrals.len() == 1)
        .await;
    eventually("deltas again", || applied(&hub) > before).await;
    hub.stop().await;
    leaf.stop().await;
}
