//! The out-bound hint a node hands its pollers: one encoded payload per change shared by
//! every poll, a separate one only for pollers whose data it contains, and no rebuild when a
//! peer re-serves an unchanged hint.

use cip_proto::Dsi;

use crate::harness::{NodeSpec, TestNode};

const LEAF: &str = "1.3.6.1.4.1.99999.71";
const HUB: &str = "1.3.6.1.4.1.99999.70";
const STRANGER: &str = "1.3.6.1.4.1.99999.79";

fn holds(payload: &[u8], value: &str) -> bool {
    payload.windows(value.len()).any(|w| w == value.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_payloads_are_shared_and_rebuilt_only_on_change() {
    let leaf = TestNode::start(NodeSpec::new(LEAF, &["Lena"])).await;
    let mut spec = NodeSpec::new(HUB, &["Hugo"]).peer("leaf", &leaf, &["poll"]);
    spec.poll_interval = "20ms";
    let hub = TestNode::start(spec).await;
    hub.wait_for("the leaf's hint", |s| s.table_peers >= 1)
        .await;
    let node = hub.daemon.node();

    // Nobody polls the hub or receives its pushes: it builds the hint when asked.
    let shared = node.outbound_object(None).await;
    assert!(holds(&shared.payload, "Lena") && holds(&shared.payload, "Hugo"));
    let again = node.outbound_object(None).await;
    assert_eq!(
        again.payload.as_ptr(),
        shared.payload.as_ptr(),
        "encoded once per change"
    );
    // A poller whose data is not in the hint gets the shared payload...
    let stranger = node
        .outbound_object(Some(&Dsi::new(STRANGER).unwrap()))
        .await;
    assert_eq!(stranger.payload.as_ptr(), shared.payload.as_ptr());
    // ...the leaf gets one without its own data.
    let leaf_dsi = Dsi::new(LEAF).unwrap();
    let for_leaf = node.outbound_object(Some(&leaf_dsi)).await;
    assert!(!holds(&for_leaf.payload, "Lena") && holds(&for_leaf.payload, "Hugo"));
    let for_leaf_again = node.outbound_object(Some(&leaf_dsi)).await;
    assert_eq!(for_leaf_again.payload.as_ptr(), for_leaf.payload.as_ptr());

    // The leaf re-serves the same hint every 20 ms: polls go on, the table's contents and
    // the out-bound hint stay.
    let generation = node_generation(&hub).await;
    let table_generation = node.table().generation();
    let builds = node.outbound().stats().builds;
    let polls = node.status_snapshot().polls_ok;
    hub.wait_for("more polls", |s| s.polls_ok >= polls + 3)
        .await;
    assert_eq!(
        node.table().generation(),
        table_generation,
        "nothing re-indexed"
    );
    assert_eq!(
        node_generation(&hub).await,
        generation,
        "unchanged hints change nothing"
    );
    assert_eq!(node.outbound().stats().builds, builds, "and build nothing");

    // The local collection rewritten with the same content: a rebuilt hint with a new
    // Date but the same values is no change either.
    let mut hub = hub;
    hub.set_authors(&["Hugo"]).await;
    assert_eq!(
        node_generation(&hub).await,
        generation,
        "a new Date alone changes nothing"
    );
    let node = hub.daemon.node();

    // Dropped, then polled again with the very same payload: it must come back.
    let accepted = node.status_snapshot().hints_accepted;
    assert!(node.drop_dataset(&leaf_dsi));
    let after_drop = node.table().generation();
    let out = node.outbound_object(None).await;
    // Unless a poll re-imported the leaf meanwhile, the hint built after the drop lacks it.
    if node.outbound().current().table_generation == after_drop {
        assert!(!holds(&out.payload, "Lena"));
    }
    hub.wait_for("the leaf's hint again", |s| {
        s.table_peers == 1 && s.hints_accepted > accepted
    })
    .await;
    let back = node.outbound_object(None).await;
    assert!(holds(&back.payload, "Lena"), "re-imported after a drop");

    hub.stop().await;
    leaf.stop().await;
}

/// The out-bound change counter once the hint covers every change made so far.
async fn node_generation(node: &TestNode) -> u64 {
    let n = node.daemon.node();
    n.outbound_object(None).await;
    n.outbound_generation()
}
