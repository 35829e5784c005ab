//! The out-bound hint a node hands its pollers: one encoded payload per change shared by
//! every poll, a separate one only for pollers whose data it contains, and no rebuild when a
//! peer re-serves an unchanged hint.

use cip_proto::Dsi;

use crate::harness::{NodeSpec, TestNode, eventually, metric};

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
    // A poll may re-import the leaf at any time: the generation read first, then the leaf
    // found absent, means that generation lacks it.
    let after_drop = node.table().generation();
    let absent = !node.table().contains(&leaf_dsi);
    let out = node.outbound_object(None).await;
    if absent && node.outbound().current().table_generation == after_drop {
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

/// Holds the next out-bound build once armed, after it has read the state and before it
/// is installed, until released; `reached` gets the build's request sequence.
struct HeldBuild {
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    reached: std::sync::Arc<std::sync::Mutex<std::sync::mpsc::Receiver<u64>>>,
    release: std::sync::mpsc::Sender<()>,
}

impl HeldBuild {
    fn install(pipeline: &cipd::pipeline::outbound::Pipeline) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex, mpsc};
        let armed = Arc::new(AtomicBool::new(false));
        let (reached_tx, reached_rx) = mpsc::channel::<u64>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (reached_tx, release_rx) = (Mutex::new(reached_tx), Mutex::new(release_rx));
        let a = armed.clone();
        pipeline.set_hook(Some(Arc::new(move |seq| {
            if a.swap(false, Ordering::AcqRel) {
                let _ = reached_tx.lock().unwrap().send(seq);
                let _ = release_rx.lock().unwrap().recv();
            }
        })));
        Self {
            armed,
            reached: Arc::new(Mutex::new(reached_rx)),
            release: release_tx,
        }
    }

    fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::Release);
    }

    fn release(&self) {
        self.release.send(()).unwrap();
    }
}

/// A hub that builds eagerly (a poller, which need not exist), whose `leaves` push to it,
/// with its first build done and the next one to be held once [`HeldBuild::arm`]ed.
async fn held_hub(leaves: &[&str], extra: &str) -> (TestNode, HeldBuild) {
    let nowhere: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut spec =
        NodeSpec::new(HUB, &["Hugo"]).peer_at("up", nowhere, &["poller"], Some(STRANGER));
    for leaf in leaves {
        spec = spec.peer_at(leaf, nowhere, &["pusher"], Some(leaf_dsi(leaf)));
    }
    spec.extra = extra.to_owned();
    let hub = TestNode::start(spec).await;
    hub.wait_for("the first build", |s| s.outbound_generation >= 1)
        .await;
    let held = HeldBuild::install(hub.daemon.node().outbound());
    held.arm();
    (hub, held)
}

fn leaf_dsi(leaf: &str) -> &'static str {
    if leaf == "l1" { L1 } else { L2 }
}

/// Leaf `leaf` pushes a hint holding `author` (in as many objects as its name is long).
async fn push_leaf(node: &cipd::node::Node, leaf: &str, author: &str) {
    let n = author.len() as u64;
    let hint = crate::fake::author_hint(n, &[(author, n)]);
    let base = format!("http://{leaf}/");
    node.accept_index(leaf, crate::fake::object(leaf_dsi(leaf), &base, &hint))
        .await
        .unwrap();
}

const L1: &str = "1.3.6.1.4.1.99999.72";
const L2: &str = "1.3.6.1.4.1.99999.73";

/// Issue 11's interleaving, forced: the build started by the first import has read the
/// table (first leaf only) and is held until the second import has landed; it then
/// finishes last. The stored hint must still end up with both leaves, built from the
/// newest table generation, without any later change to repair it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_finishing_last_from_older_state_does_not_win() {
    let (hub, held) = held_hub(&["l1", "l2"], "").await;
    let node = hub.daemon.node().clone();
    push_leaf(&node, "l1", "Lena").await;
    // The first build has read the state (the first leaf only) and waits.
    let reached = held.reached.clone();
    let seq = tokio::task::spawn_blocking(move || reached.lock().unwrap().recv().unwrap())
        .await
        .unwrap();
    push_leaf(&node, "l2", "Lars").await;
    let newest = node.table().generation();
    held.release();

    // No further change: the builder alone must bring the hint up to date.
    let s = hub
        .wait_for("a hint built from the newest table", |s| {
            s.outbound_table_generation >= newest
        })
        .await;
    assert!(s.outbound_builds >= 2, "{s:?}");
    let out = node.outbound().current();
    assert_eq!(out.table_generation, newest);
    assert!(holds(&out.payload, "Lena") && holds(&out.payload, "Lars"));
    assert!(seq >= 1);
    assert!(node.outbound().is_fresh());
    node.outbound().set_hook(None);
    hub.stop().await;
}

/// Issue 11's mesh, stressed: a middle node polls 8 leaves every 50 ms while their
/// collections change; once the churn stops, its out-bound hint is the aggregate of its
/// table (and the root's view of it adds up), round after round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_middle_node_keeps_its_outbound_hint_current_under_churn() {
    const MID: &str = "1.3.6.1.4.1.99999.90";
    const ROOT: &str = "1.3.6.1.4.1.99999.91";
    let mut leaves = Vec::new();
    for i in 0..8 {
        let dsi = format!("1.3.6.1.4.1.99999.9{}", i + 2);
        leaves.push(TestNode::start(NodeSpec::new(&dsi, &[&format!("Author{i}")])).await);
    }
    let root_probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let root_addr = root_probe.local_addr().unwrap();
    drop(root_probe);
    let mut mid_spec = NodeSpec::new(MID, &["Mona"]);
    for (i, l) in leaves.iter().enumerate() {
        mid_spec = mid_spec.peer(&format!("leaf{i}"), l, &["poll"]);
    }
    // Eager builds: the middle node has a poller (the root, below).
    mid_spec = mid_spec.peer_at("root", root_addr, &["poller"], Some(ROOT));
    mid_spec.poll_interval = "50ms";
    let mid = TestNode::start(mid_spec).await;
    let mut root_spec = NodeSpec::new(ROOT, &["Rita"]).peer("mid", &mid, &["poll"]);
    root_spec.poll_interval = "50ms";
    let root = TestNode::start(root_spec).await;
    let node = mid.daemon.node().clone();
    mid.wait_for("every leaf", |s| s.peers_imported == 8).await;

    let mut seed = 7u64;
    for round in 0..6 {
        // Churn: change a few leaves' collections back to back.
        for k in 0..4 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (seed >> 33) as usize % leaves.len();
            let n = 1 + (seed >> 40) as usize % 5;
            let authors: Vec<String> = (0..n).map(|j| format!("R{round}K{k}A{j}")).collect();
            let refs: Vec<&str> = authors.iter().map(String::as_str).collect();
            leaves[i].set_authors(&refs).await;
        }
        // Quiet: wait until the middle node's table holds every leaf's current hint...
        let want: u64 = leaves.iter().map(|l| l.spec.authors.len() as u64).sum();
        let polls = node.status_snapshot().polls_ok;
        mid.wait_for("polls after the churn", |s| s.polls_ok >= polls + 16)
            .await;
        let total = |n: &TestNode| -> u64 {
            n.daemon
                .node()
                .table()
                .peers()
                .iter()
                .map(|p| p.total)
                .sum()
        };
        eventually("the middle node's table after the churn", || {
            total(&mid) == want
        })
        .await;
        // ...then, without asking, the stored hint catches up with it by itself.
        let generation = node.table().generation();
        mid.wait_for("the out-bound hint built from the table", |s| {
            s.outbound_table_generation >= generation
        })
        .await;
        let stored = node.outbound().current();
        let expected =
            cipd::pipeline::outbound::build(&node.outbound_input(), &node.table_handle(), None);
        assert_eq!(
            stored.table_generation, expected.table_generation,
            "round {round}"
        );
        assert_eq!(
            stored.digest, expected.digest,
            "round {round}: stale out-bound hint"
        );
        let text = String::from_utf8_lossy(&stored.payload);
        let total_line = format!(
            "Total-Object-Count{{{}}}:\t{}",
            (want + 1).to_string().len(),
            want + 1
        );
        assert!(text.contains(&total_line), "round {round}: {text}");
        for l in &leaves {
            assert!(
                text.contains(&l.spec.dsi),
                "round {round}: provenance lacks {}",
                l.spec.dsi
            );
        }
        // The root mirrors it.
        eventually("the root's view of the middle node", || {
            total(&root) == want + 1
        })
        .await;
    }
    root.stop().await;
    mid.stop().await;
    for l in leaves {
        l.stop().await;
    }
}

/// The self-check: a hint that lags the table shows the lag in the status and the metrics
/// (and the watchdog asks for a rebuild); once it is rebuilt the lag is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_outbound_hint_is_reported() {
    use std::time::Duration;

    let (hub, held) = held_hub(&["l1"], "[outbound]\nstale_after = \"1s\"\n").await;
    let node = hub.daemon.node().clone();
    push_leaf(&node, "l1", "Lena").await;
    // The build is held: the lag grows past stale_after and shows.
    eventually("a lag", || {
        node.outbound().stats().lag >= Duration::from_millis(1500)
    })
    .await;
    let lag = metric(&node.render_metrics(), "cipd_outbound_lag_seconds");
    assert!(lag >= 1.0, "{lag}");
    assert!(node.outbound().current().table_generation < node.table().generation());
    held.release();
    let generation = node.table().generation();
    hub.wait_for("the hint rebuilt", |s| {
        s.outbound_table_generation >= generation
    })
    .await;
    assert!(node.outbound().is_fresh());
    node.outbound().set_hook(None);
    // The watchdog clears the lag on its next look.
    eventually("the lag cleared", || {
        node.outbound().stats().lag == Duration::ZERO
    })
    .await;
    hub.stop().await;
}
