//! CIP over HTTP (RFC 2653 §2.3): polls, `datachanged` and pushes as POSTs to a node's
//! `[listen] cip_http` path, from peers configured with `transport = "http"`.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{NodeSpec, TestNode, WAIT};

const LEAF: &str = "1.3.6.1.4.1.99999.61";
const HUB: &str = "1.3.6.1.4.1.99999.62";
const FEEDER: &str = "1.3.6.1.4.1.99999.63";

/// `cip_http = "/cip"` in `[listen]`.
fn serving(mut spec: NodeSpec) -> NodeSpec {
    spec.listen_extra = "cip_http = \"/cip\"".into();
    spec
}

/// A `[[peer]]` table reached over HTTP at `node`'s `/cip`.
fn http_peer(name: &str, node: &TestNode, roles: &str) -> String {
    format!(
        "[[peer]]\nname = {name:?}\ntransport = \"http\"\nurl = \"{}/cip\"\nrole = {roles}\n\
         dsi = {:?}\npoll_interval = \"1h\"\n",
        node.http_url(),
        node.spec.dsi
    )
}

fn refers_to(answer: &cipd::model::answer::QueryAnswer, dsi: &str) -> Option<u64> {
    answer
        .referrals
        .iter()
        .find(|r| r.dsi == dsi)
        .map(|r| r.count)
}

/// Sends `request` on a fresh connection (which it closes) and returns the whole answer.
async fn raw(addr: SocketAddr, request: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut out))
        .await
        .expect("an answer")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

fn post(content_type: &str) -> String {
    format!(
        "POST /cip HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {content_type}\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_polls_a_leaf_over_http() {
    let leaf = TestNode::start(serving(NodeSpec::new(LEAF, &["Garcia", "Okafor"]))).await;
    let mut spec = NodeSpec::new(HUB, &["Hugo"]);
    spec.extra = http_peer("leaf", &leaf, "\"poll\"");
    let hub = TestNode::start(spec).await;
    hub.wait_for("the leaf's hint over http", |s| {
        s.hints_accepted >= 1 && s.polls_ok >= 1
    })
    .await;

    let at_hub = hub.query("Author=Garcia").await;
    assert_eq!(refers_to(&at_hub, LEAF), Some(1), "{at_hub:?}");
    assert_eq!(refers_to(&hub.query("Author=Okafor").await, LEAF), Some(1));
    assert!(hub.query("Author=Nobody").await.referrals.is_empty());
    let states = hub.daemon.node().peer_states();
    let peer = states.iter().find(|p| p.name == "leaf").unwrap();
    assert_eq!(peer.address, format!("{}/cip", leaf.http_url()));
    assert_eq!(peer.last_error, None);
    // The answer's version came over HTTP too (a `cip-comment` header): the next poll
    // names it and is answered "unchanged", nothing taken again.
    let node = hub.daemon.node().clone();
    assert!(node.routes().received("leaf").is_some());
    let taken = node.status_snapshot().hints_accepted;
    let polls = node.status_snapshot().polls_ok;
    node.poll_soon("leaf");
    hub.wait_for("another poll", |s| s.polls_ok > polls).await;
    assert_eq!(node.status_snapshot().hints_accepted, taken);
    hub.stop().await;
    leaf.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datachanged_and_pushes_travel_over_http() {
    // Poll intervals of an hour: only datachanged (and pushes) can bring news in time.
    let mut leaf = TestNode::start(serving(NodeSpec::new(LEAF, &["Ada"]))).await;
    let mut hub_spec = serving(NodeSpec::new(HUB, &[]));
    hub_spec.extra = format!(
        "{}[[peer]]\nname = \"feeder\"\nhost = \"127.0.0.1\"\nrole = \"pusher\"\n\
         dsi = \"{FEEDER}\"\n",
        http_peer("leaf", &leaf, "\"poll\"")
    );
    let hub = TestNode::start(hub_spec).await;
    hub.wait_for("first poll", |s| s.hints_accepted >= 1).await;

    // The leaf tells the hub of changes over HTTP.
    let mut leaf_spec = leaf.spec.clone();
    leaf_spec.extra = http_peer("hub", &hub, "\"poller\"");
    leaf.reconfigure(leaf_spec).await;
    leaf.set_authors(&["Ada", "Lindqvist"]).await;
    let answer = hub
        .wait_query("Author=Lindqvist", |a| refers_to(a, LEAF) == Some(1))
        .await;
    assert_eq!(refers_to(&answer, LEAF), Some(1));
    let status = hub.daemon.node().status_snapshot();
    assert!(status.datachanged_received >= 1, "{status:?}");
    assert_eq!(status.unknown_peer_refusals, 0, "{status:?}");

    // A third node pushes its hint to the hub over HTTP.
    let mut feeder_spec = NodeSpec::new(FEEDER, &["Becker"]);
    feeder_spec.poll_interval = "1h";
    feeder_spec.extra = http_peer("hub", &hub, "\"push\"");
    let feeder = TestNode::start(feeder_spec).await;
    feeder.wait_for("a push", |s| s.pushes_sent >= 1).await;
    let answer = hub
        .wait_query("Author=Becker", |a| refers_to(a, FEEDER) == Some(1))
        .await;
    assert_eq!(refers_to(&answer, FEEDER), Some(1));
    assert_eq!(hub.daemon.node().status_snapshot().hints_rejected, 0);
    feeder.stop().await;
    hub.stop().await;
    leaf.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_posts_get_http_answers() {
    let node = TestNode::start(serving(NodeSpec::new(HUB, &["Hugo"]))).await;
    let addr = node.daemon.http_addr().unwrap();

    // RFC 2653 §2.3's own example: a noop is answered 204 No Content.
    let noop = raw(addr, &post("application/index.cmd.noop")).await;
    assert!(noop.starts_with("HTTP/1.1 204 "), "{noop}");

    // An unknown peer's datachanged is refused in CIP terms (530), not HTTP's.
    let changed = raw(
        addr,
        &post("application/index.cmd.datachanged; type=HARVEST-SOIF-1; dsi=1.2.3"),
    )
    .await;
    assert!(changed.starts_with("HTTP/1.1 200 "), "{changed}");
    assert!(
        changed.contains("application/index.response; code=\"530\""),
        "{changed}"
    );
    assert!(
        changed.contains("accepted from configured peers only"),
        "{changed}"
    );

    // Anyone may poll: a multipart result holding the node's hint.
    let polled = raw(
        addr,
        &post("application/index.cmd.poll; type=HARVEST-SOIF-1; dsi=1.2.3"),
    )
    .await;
    assert!(polled.starts_with("HTTP/1.1 200 "), "{polled}");
    assert!(polled.contains("multipart/mixed"), "{polled}");
    assert!(
        polled
            .to_ascii_lowercase()
            .contains("content-type: application/index.obj.harvest-soif-1"),
        "{polled}"
    );
    assert!(polled.contains("Hugo"), "{polled}");

    // Not a POST.
    let get = raw(
        addr,
        "GET /cip HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(get.starts_with("HTTP/1.1 405 "), "{get}");
    let status = node.daemon.node().status_snapshot();
    assert_eq!(status.unknown_peer_refusals, 1, "{status:?}");
    tokio::time::timeout(Duration::from_secs(10), node.stop())
        .await
        .unwrap();
}

/// A change travels over CIP over HTTP as a delta too: the poll's `have` and `delta=yes`
/// go as parameters of the POSTed poll, the delta comes back as the index object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_travels_over_http_as_a_delta() {
    let authors: Vec<String> = (0..300).map(|i| format!("Author{i}")).collect();
    let names: Vec<&str> = authors.iter().map(String::as_str).collect();
    let mut leaf = TestNode::start(serving(NodeSpec::new(LEAF, &names))).await;
    let mut spec = NodeSpec::new(HUB, &["Hugo"]);
    spec.extra = http_peer("leaf", &leaf, "\"poll\"");
    let hub = TestNode::start(spec).await;
    hub.wait_query("Author=Author7", |a| refers_to(a, LEAF) == Some(1))
        .await;
    let mut more = names.clone();
    more.push("Newcomer");
    leaf.set_authors(&more).await;
    hub.daemon.node().poll_soon("leaf");
    hub.wait_query("Author=Newcomer", |a| refers_to(a, LEAF) == Some(1))
        .await;
    let (hub_m, leaf_m) = (hub.daemon.node().metrics(), leaf.daemon.node().metrics());
    assert_eq!(hub_m.deltas_applied.get(), 1, "taken as a delta");
    assert_eq!(leaf_m.deltas_sent.get(), 1);
    assert_eq!(hub_m.deltas_refused.get(), 0);
    assert_eq!(
        refers_to(&hub.query("Author=Author299").await, LEAF),
        Some(1)
    );
    hub.stop().await;
    leaf.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_over_the_peer_budget_is_refused_while_it_arrives_over_http() {
    let authors: Vec<String> = (0..300).map(|i| format!("Author{i}")).collect();
    let names: Vec<&str> = authors.iter().map(String::as_str).collect();
    let leaf = TestNode::start(serving(NodeSpec::new(LEAF, &names))).await;
    let mut spec = NodeSpec::new(HUB, &["Hugo"]);
    spec.extra = http_peer("leaf", &leaf, "\"poll\"");
    // 300 values of about 8 bytes are charged about 24 KB.
    spec.extra_limits = "max_peer_table_bytes = 5000".into();
    let hub = TestNode::start(spec).await;
    hub.wait_for("the refusal", |s| s.budget_refusals >= 1)
        .await;
    let node = hub.daemon.node().clone();
    let error = || {
        node.peer_states()
            .into_iter()
            .find(|p| p.name == "leaf")
            .and_then(|p| p.last_error)
            .unwrap_or_default()
    };
    // The refusal is counted first, the poll's failure noted right after.
    crate::harness::eventually("the poll's error", || !error().is_empty()).await;
    let error = error();
    assert!(
        error.contains("refused while it arrived") && error.contains("limits.max_peer_table_bytes"),
        "{error}"
    );
    assert!(hub.query("Author=Author7").await.referrals.is_empty());
    hub.stop().await;
    leaf.stop().await;
}
