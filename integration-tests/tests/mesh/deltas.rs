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

fn in_place(n: &TestNode) -> u64 {
    n.daemon.node().metrics().deltas_in_place.get()
}

fn by_head(n: &TestNode) -> u64 {
    n.daemon.node().metrics().deltas_by_head.get()
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
    assert!(in_place(&hub) >= 1, "the table applied it in place");
    assert!(sent(&leaf) >= 1);
    assert_eq!(refused(&hub), 0);
    assert_eq!(hub.query("Author=Author7").await.referrals.len(), 1);
    // The first delta took the long way (the spooled hint read); it left the head.
    assert_eq!(by_head(&hub), 0);

    // The hub loses its spooled copy. The next delta still applies by the head kept in
    // memory, but cannot be journalled: the head is dropped, so that the delta after
    // takes the long way, finds no base and is refused, and the whole hint comes at once
    // (and is spooled). Nothing is lost.
    assert!(forget_spooled(&hub, "leaf") >= 1);
    let two = authors(&["Newcomer", "Latecomer"]);
    leaf.set_authors(&refs(&two)).await;
    hub.wait_query("Author=Latecomer", |a| a.referrals.len() == 1)
        .await;
    assert_eq!(by_head(&hub), 1, "applied by the head");
    assert_eq!(refused(&hub), 0);
    let two = authors(&["Newcomer", "Latecomer", "Second"]);
    leaf.set_authors(&refs(&two)).await;
    hub.wait_query("Author=Second", |a| a.referrals.len() == 1)
        .await;
    assert_eq!(refused(&hub), 1, "the delta without its base");
    assert_eq!(by_head(&hub), 1);
    for q in ["Author=Author7", "Author=Newcomer", "Author=Author299"] {
        assert_eq!(hub.query(q).await.referrals.len(), 1, "{q}");
    }
    // And deltas flow again from the whole hint on: the long way once, then by the head.
    let before = applied(&hub);
    let three = authors(&["Newcomer", "Latecomer", "Third"]);
    leaf.set_authors(&refs(&three)).await;
    hub.wait_query("Author=Third", |a| a.referrals.len() == 1)
        .await;
    eventually("deltas again", || applied(&hub) > before).await;

    // A value removed, in place and by the head: gone from the answers, the rest kept.
    let before = in_place(&hub);
    let four = authors(&["Latecomer", "Third"]);
    leaf.set_authors(&refs(&four)).await;
    hub.wait_query("Author=Newcomer", |a| a.referrals.is_empty())
        .await;
    eventually("the removal applied in place", || in_place(&hub) > before).await;
    assert_eq!(by_head(&hub), 2, "the removal by the head");
    for q in ["Author=Author7", "Author=Latecomer", "Author=Third"] {
        assert_eq!(hub.query(q).await.referrals.len(), 1, "{q}");
    }
    assert_eq!(refused(&hub), 1);
    hub.stop().await;
    leaf.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_hub_holds_what_its_spool_journal_brought() {
    let leaf_spec = NodeSpec::new("1.3.6.1.4.1.99999.651", &refs(&authors(&[])));
    let mut leaf = TestNode::start(leaf_spec.clone()).await;
    let hub_spec = NodeSpec::new("1.3.6.1.4.1.99999.650", &["Hub"]).peer("leaf", &leaf, &["poll"]);
    let hub = TestNode::start(hub_spec.clone()).await;
    leaf.reconfigure(leaf_spec.peer("hub", &hub, &["poller"]))
        .await;
    hub.wait_query("Author=Author7", |a| a.referrals.len() == 1)
        .await;
    // The long way, then twice by the head: journalled beside the spool file.
    for (i, extra) in [&["First"][..], &["First", "Second"], &["Second", "Third"]]
        .into_iter()
        .enumerate()
    {
        leaf.set_authors(&refs(&authors(extra))).await;
        let last = extra.last().unwrap();
        hub.wait_query(&format!("Author={last}"), |a| a.referrals.len() == 1)
            .await;
        eventually("the delta counted", || applied(&hub) > i as u64).await;
    }
    assert_eq!(by_head(&hub), 2);
    assert_eq!(refused(&hub), 0);
    let journals = std::fs::read_dir(hub.dir.path().join("spool"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".deltas"))
        .count();
    assert_eq!(journals, 1, "one peer's journal");
    // Restarted with the leaf gone: the table is the spool file and its journal.
    leaf.stop().await;
    let dir = hub.stop().await;
    let hub = TestNode::start_in(hub_spec, dir).await;
    for (q, n) in [
        ("Author=Author7", 1),
        ("Author=Third", 1),
        ("Author=Second", 1),
        ("Author=First", 0),
    ] {
        assert_eq!(hub.query(q).await.referrals.len(), n, "{q}");
    }
    hub.stop().await;
}

/// A poller's poll as a cipd node makes it (its own answer, datasets apart named), holding
/// the answer of version `have` when given; returns the `201`'s version and first object.
async fn poll_as(node: &TestNode, poller: &str, have: Option<&str>) -> (String, bytes::Bytes) {
    use cip_proto::Dsi;
    use cip_proto::cip::{IndexType, Request, ResponseCode};
    use cipd::transport::{CipClient, TransportConfig};
    let mut params = vec![
        ("poller-dsi".to_owned(), poller.to_owned()),
        ("separate".to_owned(), String::new()),
        ("apart".to_owned(), String::new()),
    ];
    if let Some(v) = have {
        params.push(("have".to_owned(), v.to_owned()));
        params.push(("delta".to_owned(), "yes".to_owned()));
    }
    let mut conn = CipClient::connect(node.cip_addr(), None, &TransportConfig::default())
        .await
        .unwrap();
    let r = conn
        .request(&Request::Poll {
            index_type: IndexType::harvest_soif(),
            dsi: Dsi::new(&node.spec.dsi).unwrap(),
            params,
            body: bytes::Bytes::new(),
        })
        .await
        .unwrap();
    assert_eq!(r.code, ResponseCode::OkOutputFollows, "{r:?}");
    let version = r
        .comment
        .strip_prefix("version ")
        .unwrap()
        .trim()
        .to_owned();
    let first = r.result.unwrap().objects.remove(0).payload;
    (version, first)
}

fn hint_of(payload: &[u8]) -> hints::hint::CipHint {
    let objects = cip_proto::soif::parse_all(
        bytes::Bytes::copy_from_slice(payload),
        cip_proto::soif::Limits::default(),
    )
    .unwrap();
    hints::hint::CipHint::from_soif(&objects[0]).unwrap().0
}

fn delta_of(payload: &[u8]) -> hints::delta::HintDelta {
    assert!(payload.starts_with(b"@CIP-HINT-DELTA"), "not a delta");
    let objects = cip_proto::soif::parse_all(
        bytes::Bytes::copy_from_slice(payload),
        cip_proto::soif::Limits::default(),
    )
    .unwrap();
    hints::delta::HintDelta::from_soif(&objects[0]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_brings_a_poller_that_missed_answers_up_to_date() {
    const POLLER: &str = "1.3.6.1.4.1.99999.619";
    let mut leaf =
        TestNode::start(NodeSpec::new("1.3.6.1.4.1.99999.610", &refs(&authors(&[])))).await;
    let (v1, whole1) = poll_as(&leaf, POLLER, None).await;
    let held = hint_of(&whole1);

    // Two changes; the answer to the first never reaches the poller (lost on the way).
    leaf.set_authors(&refs(&authors(&["Second"]))).await;
    let (_, lost) = poll_as(&leaf, POLLER, Some(&v1)).await;
    delta_of(&lost);
    leaf.set_authors(&refs(&authors(&["Second", "Third"])))
        .await;

    // Still holding the first answer, it gets both changes as one delta, which makes the
    // hint a poll without a version brings, byte for byte but for the Date.
    let (v3, joined) = poll_as(&leaf, POLLER, Some(&v1)).await;
    let made = delta_of(&joined).apply(&held).unwrap();
    let (_, whole3) = poll_as(&leaf, "1.3.6.1.4.1.99999.618", None).await;
    let fresh = hint_of(&whole3);
    assert_eq!(hints::delta::digest(&made), hints::delta::digest(&fresh));
    assert!(
        made.weightlists
            .iter()
            .any(|(_, l)| l.entries().any(|e| e.value.as_ref() == b"Third"))
    );
    assert!(
        joined.len() * 10 < whole3.len(),
        "{} of {}",
        joined.len(),
        whole3.len()
    );

    // A version the node never sent, or no longer remembers: the whole hint.
    let (_, whole) = poll_as(&leaf, POLLER, Some("0123456789abcdef")).await;
    assert!(whole.starts_with(b"@CIP-HINT {"));
    let _ = v3;
    leaf.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_journal_a_poller_behind_gets_the_whole_hint() {
    const POLLER: &str = "1.3.6.1.4.1.99999.629";
    let mut spec = NodeSpec::new("1.3.6.1.4.1.99999.620", &refs(&authors(&[])));
    spec.extra = "[outbound]\njournal_changesets = 0\n".into();
    let mut leaf = TestNode::start(spec).await;
    let (v1, _) = poll_as(&leaf, POLLER, None).await;
    leaf.set_authors(&refs(&authors(&["Second"]))).await;
    let (v2, next) = poll_as(&leaf, POLLER, Some(&v1)).await;
    // The last answer's successor is still a delta: it is made from what was sent.
    delta_of(&next);
    leaf.set_authors(&refs(&authors(&["Second", "Third"])))
        .await;
    leaf.set_authors(&refs(&authors(&["Second", "Third", "Fourth"])))
        .await;
    let (_, v3_whole) = poll_as(&leaf, POLLER, Some(&v1)).await;
    assert!(
        v3_whole.starts_with(b"@CIP-HINT {"),
        "two answers behind, no journal"
    );
    let _ = v2;
    leaf.stop().await;
}

/// A peer that answers a poll naming its last version with a delta that does not make
/// what it says (once), and every other poll with its whole hint.
struct CorruptingPeer {
    dsi: cip_proto::Dsi,
    hint: bytes::Bytes,
    wholes: std::sync::atomic::AtomicUsize,
    corrupted: std::sync::atomic::AtomicUsize,
}

const CORRUPT_VERSION: &str = "00000000000000a1";

impl cipd::transport::RequestHandler for CorruptingPeer {
    async fn handle(
        &self,
        request: cip_proto::cip::Request,
        _peer: &cipd::transport::PeerContext,
    ) -> cipd::transport::Reply {
        use cip_proto::cip::{IndexObject, IndexType, PollResult, Request, ResponseCode};
        use std::sync::atomic::Ordering;
        let Request::Poll { params, .. } = request else {
            return cipd::transport::Reply::ok();
        };
        let has = params.iter().any(|(n, _)| n == "have");
        let payload = if has && self.corrupted.fetch_add(1, Ordering::SeqCst) == 0 {
            // The right base, a wrong result: applying it cannot make what it names.
            let base = hints::delta::digest(&hint_of(&self.hint));
            bytes::Bytes::from(format!(
                "@CIP-HINT-DELTA {{ cip://corrupt.example/\n\
                 Delta-Base{{16}}:\t{base:016x}\n\
                 Delta-Result{{16}}:\t00000000deadbeef\n\
                 Weightlist-Delta-[DOCUMENT:Author]{{9}}:\tMallory;1\n}}\n"
            ))
        } else if has {
            return cipd::transport::Reply::status(
                ResponseCode::Ok,
                format!("unchanged since version {CORRUPT_VERSION}"),
            );
        } else {
            self.wholes.fetch_add(1, Ordering::SeqCst);
            self.hint.clone()
        };
        cipd::transport::Reply {
            code: ResponseCode::OkOutputFollows,
            comment: Some(format!("version {CORRUPT_VERSION}")),
            result: Some(PollResult {
                objects: vec![IndexObject {
                    index_type: IndexType::harvest_soif(),
                    dsi: self.dsi.clone(),
                    base_uris: vec!["http://corrupt.example/".into()],
                    dsi_description: None,
                    payload,
                }],
            }),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_delta_is_refused_and_the_whole_hint_follows_at_once() {
    use std::sync::atomic::Ordering;
    const PEER: &str = "1.3.6.1.4.1.99999.631";
    let hint = bytes::Bytes::from_static(
        b"@CIP-HINT { cip://corrupt.example/\n\
          Total-Object-Count{1}:\t3\n\
          Attributes{15}:\tDOCUMENT:Author\n\
          Weightlist-[DOCUMENT:Author]{15}:\tGarcia;2, Lee;1\n}\n",
    );
    let handler = std::sync::Arc::new(CorruptingPeer {
        dsi: cip_proto::Dsi::new(PEER).unwrap(),
        hint,
        wholes: Default::default(),
        corrupted: Default::default(),
    });
    let h = handler.clone();
    let (addr, _, token) = crate::harness::fake_server(move |tcp| {
        let h = h.clone();
        async move {
            let peer = cipd::transport::PeerContext {
                remote: tcp.peer_addr().unwrap(),
                tls_peer_certificates: None,
            };
            let config = cipd::transport::TransportConfig::default();
            let _ = cipd::transport::serve_connection(
                tcp,
                peer,
                h.as_ref(),
                &config,
                tokio_util::sync::CancellationToken::new(),
            )
            .await;
        }
    })
    .await;
    let mut spec = NodeSpec::new("1.3.6.1.4.1.99999.630", &["Hub"]);
    spec.poll_interval = "300ms";
    let hub = TestNode::start(spec.peer_at("corrupt", addr, &["poll"], Some(PEER))).await;
    hub.wait_query("Author=Garcia", |a| a.referrals.len() == 1)
        .await;
    // The second poll names the version held and gets the corrupt delta: refused, counted,
    // and the next poll, at once, takes the whole hint; the table never loses Garcia.
    eventually("the corrupt delta refused", || refused(&hub) == 1).await;
    eventually("the whole hint again", || {
        handler.wholes.load(Ordering::SeqCst) >= 2
    })
    .await;
    assert_eq!(hub.query("Author=Garcia").await.referrals.len(), 1);
    assert_eq!(hub.query("Author=Mallory").await.referrals.len(), 0);
    assert_eq!(applied(&hub), 0);
    token.cancel();
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_poller_takes_the_whole_hint_once_then_deltas() {
    let leaf_spec = NodeSpec::new("1.3.6.1.4.1.99999.641", &refs(&authors(&[])));
    let mut leaf = TestNode::start(leaf_spec.clone()).await;
    let hub_spec = NodeSpec::new("1.3.6.1.4.1.99999.640", &["Hub"]);
    let hub = TestNode::start(hub_spec.clone().peer("leaf", &leaf, &["poll"])).await;
    leaf.reconfigure(leaf_spec.clone().peer("hub", &hub, &["poller"]))
        .await;
    hub.wait_query("Author=Author7", |a| a.referrals.len() == 1)
        .await;
    // The hub restarts from its spool: it holds the leaf's hint but no version of it, so
    // its first poll takes the whole hint (no delta refused, nothing lost)...
    let dir = hub.stop().await;
    let hub = TestNode::start_in(hub_spec.peer("leaf", &leaf, &["poll"]), dir).await;
    leaf.reconfigure(leaf_spec.peer("hub", &hub, &["poller"]))
        .await;
    leaf.set_authors(&refs(&authors(&["AfterRestart"]))).await;
    hub.wait_query("Author=AfterRestart", |a| a.referrals.len() == 1)
        .await;
    assert_eq!(refused(&hub), 0);
    assert_eq!(hub.query("Author=Author7").await.referrals.len(), 1);
    // ...and the next change comes as a delta again.
    let before = applied(&hub);
    leaf.set_authors(&refs(&authors(&["AfterRestart", "Next"])))
        .await;
    hub.wait_query("Author=Next", |a| a.referrals.len() == 1)
        .await;
    eventually("a delta after the restart", || applied(&hub) > before).await;
    assert_eq!(refused(&hub), 0);
    hub.stop().await;
    leaf.stop().await;
}

fn advanced(n: &TestNode) -> u64 {
    n.daemon.node().metrics().outbound_advanced.get()
}

/// The node's stored out-bound hint is what aggregating its whole table makes.
fn outbound_exact(n: &TestNode) -> bool {
    let node = n.daemon.node();
    let whole = cipd::pipeline::outbound::build(&node.outbound_input(), &node.table_handle(), None);
    node.outbound().current().hint_digest == whole.hint_digest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_middle_node_passes_a_change_up_as_a_delta_of_its_own_changes() {
    let start = authors(&[]);
    let mut leaf = TestNode::start(NodeSpec::new("1.3.6.1.4.1.99999.611", &refs(&start))).await;
    let mut mid = TestNode::start(NodeSpec::new("1.3.6.1.4.1.99999.612", &["Mid"])).await;
    let mut top = TestNode::start(NodeSpec::new("1.3.6.1.4.1.99999.613", &["Top"])).await;
    leaf.reconfigure(leaf.spec.clone().peer("mid", &mid, &["poller"]))
        .await;
    mid.reconfigure(
        mid.spec
            .clone()
            .peer("leaf", &leaf, &["poll"])
            .peer("top", &top, &["poller"]),
    )
    .await;
    top.reconfigure(top.spec.clone().peer("mid", &mid, &["poll"]))
        .await;
    top.wait_query("Author=Author7", |a| a.referrals.len() == 1)
        .await;

    // Changes at the leaf: the first delta takes the long way into the middle node's
    // table, still in place; from then on the middle node makes its out-bound hint from
    // the table's changes, and the top takes each as a delta.
    let mut names = vec!["Newcomer".to_owned()];
    for round in 0..4 {
        let before = (advanced(&mid), applied(&top));
        names.push(format!("Round{round}"));
        if round == 2 {
            // A removal too.
            names.remove(0);
        }
        let now = authors(&refs(&names));
        leaf.set_authors(&refs(&now)).await;
        let newest = format!("Author=Round{round}");
        top.wait_query(&newest, |a| a.referrals.len() == 1).await;
        eventually("the top applied a delta", || applied(&top) > before.1).await;
        if round > 0 {
            assert!(advanced(&mid) > before.0, "round {round}: advanced");
        }
        assert!(
            outbound_exact(&mid),
            "round {round}: the advanced hint is exact"
        );
    }
    assert_eq!(top.query("Author=Newcomer").await.referrals.len(), 0);
    for q in ["Author=Author7", "Author=Round0", "Author=Author299"] {
        assert_eq!(top.query(q).await.referrals.len(), 1, "{q}");
    }
    assert_eq!(refused(&top), 0);
    assert!(sent(&mid) >= 3);
    top.stop().await;
    mid.stop().await;
    leaf.stop().await;
}
