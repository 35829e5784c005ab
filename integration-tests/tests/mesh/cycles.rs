//! Meshes with cycles longer than two: rings and full meshes of hubs. Every node that
//! polls refers every dataset it can reach once, by its shortest route, with that
//! dataset's true count (nothing counted twice, no referral to itself); then the mesh is
//! quiet: no poll and no `datachanged` beyond the (hour-long) poll interval.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::harness::{NodeSpec, TestNode, eventually};

/// A mesh under test: its nodes, who each polls (by index), and each node's count of
/// `Shared` objects.
struct Mesh {
    nodes: Vec<TestNode>,
    polls: Vec<Vec<usize>>,
    shared: Vec<u64>,
}

/// A node's collection: `shared` objects by the author `Shared`, and one by an author
/// only it has.
fn spec(i: usize, shared: u64) -> NodeSpec {
    let mut authors: Vec<String> = (0..shared).map(|_| "Shared".to_owned()).collect();
    authors.push(format!("Only{i}"));
    let refs: Vec<&str> = authors.iter().map(String::as_str).collect();
    NodeSpec::new(&format!("1.3.6.1.4.1.99999.5{i:02}"), &refs)
}

impl Mesh {
    /// Starts `n` nodes, then gives each its peers: it polls those `polls` names and is
    /// polled by those that name it.
    async fn start(n: usize, polls: Vec<Vec<usize>>) -> Self {
        let shared: Vec<u64> = (0..n as u64).map(|i| i + 1).collect();
        let mut nodes = Vec::new();
        for (i, s) in shared.iter().enumerate() {
            nodes.push(TestNode::start(spec(i, *s)).await);
        }
        for i in 0..n {
            let mut sp = nodes[i].spec.clone();
            for j in 0..n {
                let polled = polls[i].contains(&j);
                let poller = polls[j].contains(&i);
                let roles: Vec<&'static str> = match (polled, poller) {
                    (true, true) => vec!["poll", "poller"],
                    (true, false) => vec!["poll"],
                    (false, true) => vec!["poller"],
                    (false, false) => continue,
                };
                sp = sp.peer(&format!("n{j}"), &nodes[j], &roles);
            }
            nodes[i].reconfigure(sp).await;
        }
        Self {
            nodes,
            polls,
            shared,
        }
    }

    /// The nodes `i` reaches by polling, itself left out.
    fn reachable(&self, i: usize) -> BTreeSet<usize> {
        let mut seen = BTreeSet::from([i]);
        let mut todo = vec![i];
        while let Some(x) = todo.pop() {
            for &y in &self.polls[x] {
                if seen.insert(y) {
                    todo.push(y);
                }
            }
        }
        seen.remove(&i);
        seen
    }

    /// Whether every node refers exactly what it reaches: one referral per reachable
    /// dataset route, no referral to itself, counts adding up to the reachable objects
    /// exactly (nothing counted twice). Returns the first discrepancy.
    async fn check(&self) -> Result<(), String> {
        for (i, node) in self.nodes.iter().enumerate() {
            let reach = self.reachable(i);
            let want: u64 = reach.iter().map(|&j| self.shared[j]).sum();
            let a = node.query("Author=Shared").await;
            let own = &node.spec.dsi;
            if a.referrals.iter().any(|r| &r.dsi == own) {
                return Err(format!("n{i} refers to itself: {:?}", a.referrals));
            }
            let got: u64 = a.referrals.iter().map(|r| r.count).sum();
            if got != want {
                return Err(format!(
                    "n{i}: referrals count {got} Shared objects, {want} reachable: {:?}",
                    a.referrals
                        .iter()
                        .map(|r| (&r.dsi, r.count))
                        .collect::<Vec<_>>()
                ));
            }
            // Each reachable node's own value leads somewhere, counted once.
            for &j in &reach {
                let a = node.query(&format!("Author=Only{j}")).await;
                let counts: Vec<u64> = a.referrals.iter().map(|r| r.count).collect();
                if counts != [1] {
                    return Err(format!("n{i}: Only{j} referred as {counts:?}"));
                }
            }
        }
        Ok(())
    }

    /// Polls and notices sent so far, over the whole mesh.
    fn exchanges(&self) -> (u64, u64) {
        let mut polls = 0;
        let mut notices = 0;
        for n in &self.nodes {
            let s = n.daemon.node().status_snapshot();
            polls += s.polls_ok + s.polls_failed;
            notices += s.datachanged_sent;
        }
        (polls, notices)
    }

    /// Waits until every table is exact, then checks that the mesh stays quiet.
    async fn converges_and_goes_quiet(&self) {
        let deadline = tokio::time::Instant::now() + crate::harness::WAIT;
        let mut last = Err(String::new());
        while tokio::time::Instant::now() < deadline {
            last = self.check().await;
            if last.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if let Err(e) = last {
            panic!("not exact: {e}\n{}", self.tables());
        }
        // Quiet: once the exchanges stop changing for a while, none follows. (The
        // interval is an hour: any exchange now is one too many.)
        let mut seen = self.exchanges();
        let mut still = 0;
        eventually("the exchanges to stop", || {
            let now = self.exchanges();
            if now == seen {
                still += 1;
            } else {
                still = 0;
                seen = now;
            }
            still >= 25
        })
        .await;
        let before = self.exchanges();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(self.exchanges(), before, "the mesh is not quiet");
        // Converging is not flapping: no node damped a peer.
        for n in &self.nodes {
            assert!(
                n.daemon
                    .node()
                    .peer_states()
                    .iter()
                    .all(|p| p.dampings == 0),
                "a peer was damped while the mesh converged"
            );
        }
        if let Err(e) = self.check().await {
            panic!("no longer exact: {e}\n{}", self.tables());
        }
    }

    /// Every node's table, for a failure's message.
    fn tables(&self) -> String {
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for p in n.daemon.node().table().peers() {
                let path: Vec<&str> = p.path.iter().map(|d| d.as_str()).collect();
                let prov: Vec<&str> = p.provenance.iter().map(|d| d.as_str()).collect();
                out.push_str(&format!(
                    "n{i}: {} via {:?} path {path:?} provenance {prov:?} total {}\n",
                    p.dsi, p.via, p.total
                ));
            }
        }
        out
    }

    async fn stop(self) {
        for n in self.nodes {
            n.stop().await;
        }
    }
}

fn ring(n: usize) -> Vec<Vec<usize>> {
    (0..n).map(|i| vec![(i + 1) % n]).collect()
}

/// `hubs` hubs polling each other, each polling `leaves` leaves of its own.
fn full_mesh(hubs: usize, leaves: usize) -> Vec<Vec<usize>> {
    let mut polls: Vec<Vec<usize>> = (0..hubs)
        .map(|h| (0..hubs).filter(|&o| o != h).collect())
        .collect();
    for h in 0..hubs {
        for _ in 0..leaves {
            let leaf = polls.len();
            polls.push(Vec::new());
            polls[h].push(leaf);
        }
    }
    polls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_of_three_converges_exactly_and_goes_quiet() {
    let mesh = Mesh::start(3, ring(3)).await;
    mesh.converges_and_goes_quiet().await;
    mesh.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ring_of_five_converges_exactly_and_goes_quiet() {
    let mesh = Mesh::start(5, ring(5)).await;
    mesh.converges_and_goes_quiet().await;
    mesh.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_mesh_of_three_hubs_with_leaves_converges_exactly_and_goes_quiet() {
    let mesh = Mesh::start(9, full_mesh(3, 2)).await;
    mesh.converges_and_goes_quiet().await;
    // A hub refers another hub's leaves through that hub, by the direct route.
    let a = mesh.nodes[0].query("Author=Only5").await;
    let dsis: Vec<&str> = a.referrals.iter().map(|r| r.dsi.as_str()).collect();
    assert_eq!(dsis, [mesh.nodes[1].spec.dsi.as_str()]);
    mesh.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_at_a_leaf_reaches_every_hub_then_the_mesh_is_quiet_again() {
    let mut mesh = Mesh::start(8, full_mesh(4, 1)).await;
    mesh.converges_and_goes_quiet().await;
    // The leaf under hub 3 gains two Shared objects.
    let leaf = 7;
    mesh.shared[leaf] += 2;
    let mut authors: Vec<String> = (0..mesh.shared[leaf])
        .map(|_| "Shared".to_owned())
        .collect();
    authors.push(format!("Only{leaf}"));
    let refs: Vec<&str> = authors.iter().map(String::as_str).collect();
    mesh.nodes[leaf].set_authors(&refs).await;
    // Every hub's referrals count the leaf's new objects once, by one route.
    mesh.converges_and_goes_quiet().await;
    mesh.stop().await;
}

/// A chain (a root, two hubs, a leaf): a change at the leaf costs one `datachanged` and
/// one poll per hop. Each node tells its poller as the change comes in, ahead of its
/// build, and the poll waits for the build; the notice after the build is not sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_travels_one_notice_and_one_poll_per_hop() {
    let mut mesh = Mesh::start(4, vec![vec![1], vec![2], vec![3], vec![]]).await;
    mesh.converges_and_goes_quiet().await;
    let (polls, notices) = mesh.exchanges();
    mesh.shared[3] += 1;
    let mut authors: Vec<String> = (0..mesh.shared[3]).map(|_| "Shared".to_owned()).collect();
    authors.push("Only3".to_owned());
    let refs: Vec<&str> = authors.iter().map(String::as_str).collect();
    mesh.nodes[3].set_authors(&refs).await;
    mesh.converges_and_goes_quiet().await;
    let (after_polls, after_notices) = mesh.exchanges();
    assert_eq!(
        (after_polls - polls, after_notices - notices),
        (3, 3),
        "polls and notices for one change through three hops"
    );
    mesh.stop().await;
}

/// A leaf and the hub that polls it, the hub with `damping` among its limits.
async fn damping_pair(damping: &str) -> (TestNode, TestNode) {
    let mut leaf = TestNode::start(spec(1, 1)).await;
    let mut hub = TestNode::start({
        let mut s = spec(0, 1);
        s.extra_limits = damping.into();
        s
    })
    .await;
    let sp = hub.spec.clone().peer("leaf", &leaf, &["poll"]);
    hub.reconfigure(sp).await;
    let sp = leaf.spec.clone().peer("hub", &hub, &["poller"]);
    leaf.reconfigure(sp).await;
    (leaf, hub)
}

/// Whether the hub shows its leaf damped.
fn leaf_damped(hub: &cipd::node::Node) -> bool {
    hub.peer_states()
        .iter()
        .any(|p| p.name == "leaf" && p.damped_until.is_some())
}

/// A leaf whose data changes again and again: its poller damps it (RFC 2439), holds its
/// changes instead of polling on each `datachanged`, says so in its peer state and
/// metrics, and takes the held changes together once the damping ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_peer_is_damped_and_its_changes_are_taken_together() {
    let (mut leaf, hub) = damping_pair(
        "damping_half_life = \"2s\"\ndamping_suppress = 3\n\
         damping_reuse = 1\ndamping_max_hold = \"4s\"\n",
    )
    .await;
    let node = hub.daemon.node().clone();
    let damped = || leaf_damped(&node);
    // Each change reaches the hub until the leaf is damped.
    let mut changes = 0;
    while !damped() {
        changes += 1;
        assert!(changes < 20, "never damped");
        let value = format!("Flap{changes}");
        leaf.set_authors(&[value.as_str()]).await;
        let deadline = tokio::time::Instant::now() + crate::harness::WAIT;
        while !damped()
            && hub
                .query(&format!("Author={value}"))
                .await
                .referrals
                .is_empty()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{value} never arrived"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let metrics = node.render_metrics();
    assert_eq!(crate::harness::metric(&metrics, "cipd_peers_damped"), 1.0);
    assert_eq!(
        crate::harness::metric(&metrics, "cipd_peer_dampings_total"),
        1.0
    );
    // While damped, further changes are held: the hub does not poll on each.
    let polls = node.status_snapshot().polls_ok;
    for i in 0..3 {
        leaf.set_authors(&[format!("Held{i}").as_str()]).await;
    }
    let held = node.status_snapshot().polls_ok;
    assert!(
        held <= polls + 1,
        "polled {} times while damped",
        held - polls
    );
    // Released, the hub takes the newest data in one poll, and no longer marks the leaf.
    let deadline = tokio::time::Instant::now() + crate::harness::WAIT;
    while hub.query("Author=Held2").await.referrals.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the held change never arrived"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eventually("the damping mark to clear", || !damped()).await;
    assert!(hub.query("Author=Held1").await.referrals.is_empty());
    hub.stop().await;
    leaf.stop().await;
}

/// A busy peer stays damped for a long while (its penalty decays slowly), yet each change
/// it makes arrives within `damping_take_every`: the held changes are taken at that pace,
/// not once the whole decay is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damped_peer_s_changes_are_taken_at_the_pace_set() {
    let (mut leaf, hub) = damping_pair(
        "damping_half_life = \"20s\"\ndamping_suppress = 2\n\
         damping_reuse = 1\ndamping_max_hold = \"60s\"\n\
         damping_take_every = \"300ms\"\n",
    )
    .await;
    let node = hub.daemon.node().clone();
    let damped = || leaf_damped(&node);
    let arrives = |value: String| {
        let hub = &hub;
        async move {
            let started = tokio::time::Instant::now();
            while hub
                .query(&format!("Author={value}"))
                .await
                .referrals
                .is_empty()
            {
                assert!(
                    started.elapsed() < crate::harness::WAIT,
                    "{value} never arrived"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            started.elapsed()
        }
    };
    let mut n = 0;
    while !damped() {
        n += 1;
        assert!(n < 20, "never damped");
        leaf.set_authors(&[format!("Busy{n}").as_str()]).await;
        arrives(format!("Busy{n}")).await;
    }
    // Damped for a long while (a penalty of 3 or more halving every 20 s down to 1)...
    for i in 0..4 {
        let value = format!("Paced{i}");
        leaf.set_authors(&[value.as_str()]).await;
        let took = arrives(value.clone()).await;
        // ...each change still arrives within the pace (300 ms) and a poll.
        assert!(took < Duration::from_secs(3), "{value} took {took:?}");
        assert!(damped(), "still damped");
    }
    hub.stop().await;
    leaf.stop().await;
}

/// A peer that passes on datasets by impossible routes: through us, naming a node twice,
/// not starting at itself, longer than allowed. Each is refused with its reason and
/// counted; the peer's own hint and its one good route are taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_through_us_repeating_a_node_or_too_long_are_refused() {
    use crate::fake::{FakePeer, author_hint, object};
    let peer_dsi = "1.3.6.1.4.1.99999.590";
    let fake = FakePeer::start(object(
        peer_dsi,
        "http://peer.example/",
        &author_hint(1, &[("Own", 1)]),
    ))
    .await;
    let mut node = TestNode::start({
        let mut s = spec(0, 1);
        s.extra_limits = "max_provenance = 6\n".into();
        s
    })
    .await;
    let own = node.spec.dsi.clone();
    let routed = |dsi: &str, path: &str, value: &str| {
        let mut hint = author_hint(1, &[(value, 1)]);
        hint.extra.push(
            cip_proto::soif::Attribute::new("Path", bytes::Bytes::from(path.to_owned())).unwrap(),
        );
        object(dsi, "http://routed.example/", &hint)
    };
    let long: Vec<String> = (0..8).map(|i| format!("1.3.6.1.4.1.99999.6{i}")).collect();
    fake.set_extra(vec![
        routed(
            "1.3.6.1.4.1.99999.591",
            &format!("{peer_dsi} {own} 1.3.6.1.4.1.99999.591"),
            "Through",
        ),
        routed(
            "1.3.6.1.4.1.99999.592",
            &format!(
                "{peer_dsi} 1.3.6.1.4.1.99999.593 1.3.6.1.4.1.99999.593 1.3.6.1.4.1.99999.592"
            ),
            "Twice",
        ),
        routed(
            "1.3.6.1.4.1.99999.594",
            "1.3.6.1.4.1.99999.599 1.3.6.1.4.1.99999.594",
            "Elsewhere",
        ),
        routed(
            "1.3.6.1.4.1.99999.67",
            &format!("{peer_dsi} {}", long.join(" ")),
            "Long",
        ),
        routed(
            "1.3.6.1.4.1.99999.595",
            &format!("{peer_dsi} 1.3.6.1.4.1.99999.595"),
            "Good",
        ),
    ]);
    let sp = node
        .spec
        .clone()
        .peer_at("fake", fake.addr, &["poll"], Some(peer_dsi));
    node.reconfigure(sp).await;
    let n = node.daemon.node().clone();
    eventually("the four bad routes to be counted", || {
        crate::harness::metric(&n.render_metrics(), "cipd_index_objects_bad_path_total") >= 4.0
    })
    .await;
    let good = node
        .wait_query("Author=Good", |a| !a.referrals.is_empty())
        .await;
    assert_eq!(good.referrals[0].dsi, "1.3.6.1.4.1.99999.595");
    assert_eq!(node.query("Author=Own").await.referrals[0].dsi, peer_dsi);
    for bad in ["Through", "Twice", "Elsewhere", "Long"] {
        let a = node.query(&format!("Author={bad}")).await;
        assert!(a.referrals.is_empty(), "{bad}: {a:?}");
    }
    let peers = n.peer_states();
    let err = peers[0].last_error.clone().unwrap_or_default();
    assert!(err.contains("path"), "{err}");
    node.stop().await;
}

/// Three hubs that poll each other; hub 0 reaches hub 2 through a link that is cut. Hub 2
/// gone (past `limits.peer_gone_after`), hub 0 no longer takes it directly and hub 1
/// passes it on: hub 0 refers hub 2's values again, by the path through hub 1, counted
/// once. The link back, the direct route wins again and the passed-on one is withdrawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_cut_off_from_another_reaches_it_round_the_gap() {
    use crate::proxy::Proxy;
    let mut nodes = Vec::new();
    for i in 0..3 {
        let mut s = spec(i, i as u64 + 1);
        s.poll_interval = "300ms";
        s.extra_limits = "peer_gone_after = \"1s\"\nmax_backoff = \"300ms\"\n".into();
        nodes.push(TestNode::start(s).await);
    }
    let proxy = Proxy::start(nodes[2].cip_addr()).await;
    let dsi2 = nodes[2].spec.dsi.clone();
    for i in 0..3 {
        let mut sp = nodes[i].spec.clone();
        for j in (0..3).filter(|&j| j != i) {
            sp = if (i, j) == (0, 2) {
                sp.peer_at("n2", proxy.addr(), &["poll", "poller"], Some(&dsi2))
            } else {
                sp.peer(&format!("n{j}"), &nodes[j], &["poll", "poller"])
            };
        }
        nodes[i].reconfigure(sp).await;
    }
    let hub0 = nodes[0].daemon.node().clone();
    let route = |want_path: usize| {
        let hub0 = hub0.clone();
        let dsi2 = dsi2.clone();
        move || {
            hub0.table()
                .peers()
                .iter()
                .any(|p| p.dsi.as_str() == dsi2 && p.path.len() == want_path)
        }
    };
    eventually("hub 2 directly", route(0)).await;
    proxy.cut();
    eventually("hub 2 by the path through hub 1", route(2)).await;
    let a = nodes[0].query("Author=Only2").await;
    assert_eq!(a.referrals.len(), 1, "{a:?}");
    assert_eq!(a.referrals[0].count, 1);
    let a = nodes[0].query("Author=Shared").await;
    let counts: u64 = a.referrals.iter().map(|r| r.count).sum();
    assert_eq!(counts, 2 + 3, "hubs 1 and 2, once each: {a:?}");
    proxy.restore();
    eventually("hub 2 directly again", route(0)).await;
    let a = nodes[0].query("Author=Shared").await;
    let counts: u64 = a.referrals.iter().map(|r| r.count).sum();
    assert_eq!(counts, 5, "{a:?}");
    for n in nodes {
        n.stop().await;
    }
}
