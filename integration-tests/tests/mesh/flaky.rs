//! Issue #44, the mesh on a flaky internet:
//!
//! * an exchange in which no byte moves fails within `limits.stall_timeout`, whatever the
//!   whole exchange may take (`limits.poll_timeout`), over the CIP stream and over
//!   CIP-over-HTTP; `cipctl poll` on a peer whose poll is under way says so; the retry after
//!   such a transient failure comes within a second;
//! * a peer that does not answer is marked unreachable in the referrals, leaves the table
//!   after `limits.peer_gone_after`, and is taken in again as soon as it answers; an answer
//!   that refuses clears the mark too.

use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::harness::{NodeSpec, TestNode, fake_server};

/// The server's side of a CIP connection's opening: its banner, the client's version line
/// read and accepted. Returns the connection's halves, the reading one buffered.
async fn greet(
    stream: tokio::net::TcpStream,
) -> (
    BufReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
) {
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r);
    let _ = w.write_all(b"% 220 test CIP server ready\r\n").await;
    let mut line = String::new();
    let _ = lines.read_line(&mut line).await;
    let _ = w.write_all(b"% 300 OK\r\n").await;
    (lines, w)
}

/// A CIP peer that answers the banner and the version line, then says nothing more and
/// keeps the connection open (a peer that hangs, or a middlebox that dropped the
/// connection's state without a reset).
async fn silent_peer() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    tokio_util::sync::CancellationToken,
) {
    fake_server(|stream| async move {
        let (mut lines, w) = greet(stream).await;
        // Read the request and never answer.
        let mut rest = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut lines, &mut rest).await;
        drop(w);
    })
    .await
}

fn stall_spec(dsi: &str) -> NodeSpec {
    let mut spec = NodeSpec::new(dsi, &["Garcia"]);
    spec.poll_timeout = "60s";
    spec.extra_limits = "stall_timeout = \"400ms\"".into();
    spec.extra = "[outbound]\nmax_wait = \"200ms\"\n".into();
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_stream_peer_fails_within_the_stall_timeout_and_is_retried_soon() {
    let (addr, connections, _token) = silent_peer().await;
    let spec = stall_spec("1.3.6.1.4.1.99999.441").peer_at("silent", addr, &["poll"], None);
    let node = TestNode::start(spec).await;
    let started = Instant::now();
    // While the poll waits, `cipctl poll` says it is under way, and where.
    let n = node.daemon.node();
    crate::harness::eventually("the poll waiting for its answer", || {
        n.peer_states().iter().any(|p| {
            p.exchange
                .as_ref()
                .is_some_and(|e| e.phase == "waiting for its answer")
        })
    })
    .await;
    let (name, under_way) = n.poll_now("silent").unwrap();
    assert_eq!(name, "silent");
    assert_eq!(
        under_way.map(|e| e.phase).as_deref(),
        Some("waiting for its answer")
    );
    let s = node
        .wait_for("the stalled poll failing", |s| s.polls_failed >= 1)
        .await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "{took:?}: not the 60 s poll timeout"
    );
    assert_eq!(s.polls_ok, 0);
    let peer = n
        .peer_states()
        .into_iter()
        .find(|p| p.name == "silent")
        .unwrap();
    let error = peer.last_error.unwrap_or_default();
    assert!(error.contains("stalled"), "{error}");
    // A transient failure: tried again within a second or so, not at the poll interval.
    node.wait_for("a second attempt", |s| s.polls_failed >= 2)
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert!(connections.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_http_peer_fails_within_the_stall_timeout() {
    // An HTTP server that reads the request and never answers.
    let (addr, _, _token) = fake_server(|stream| async move {
        let (r, w) = stream.into_split();
        let mut lines = BufReader::new(r);
        let mut rest = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut lines, &mut rest).await;
        drop(w);
    })
    .await;
    let mut spec = stall_spec("1.3.6.1.4.1.99999.442");
    spec.extra.push_str(&format!(
        "[[peer]]\nname = \"silent\"\ntransport = \"http\"\nurl = \"http://{addr}/cip\"\nrole = \"poll\"\npoll_interval = \"1h\"\n"
    ));
    let started = Instant::now();
    let node = TestNode::start(spec).await;
    node.wait_for("the stalled poll failing", |s| s.polls_failed >= 1)
        .await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "{took:?}");
    node.stop().await;
}

#[test]
fn keepalive_is_set_on_the_connections_we_open() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        cipd::transport::keepalive(&tcp, Duration::from_secs(9)).unwrap();
        let sock = socket2::SockRef::from(&tcp);
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(9));
        assert_eq!(
            sock.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(3)
        );
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), 3);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_goes_leaves_the_table_and_is_taken_in_again_when_it_answers() {
    let leaf_spec = NodeSpec::new("1.3.6.1.4.1.99999.451", &["Okafor"]);
    let leaf = TestNode::start(leaf_spec.clone()).await;
    let leaf_cip = leaf.cip_addr();
    let other = TestNode::start(NodeSpec::new("1.3.6.1.4.1.99999.452", &["Garcia"])).await;
    let mut spec = NodeSpec::new("1.3.6.1.4.1.99999.450", &[])
        .peer("leaf", &leaf, &["poll"])
        .peer("other", &other, &["poll"]);
    spec.extra_limits = "peer_gone_after = \"1s\"\nmax_transient_backoff = \"300ms\"".into();
    let mid = TestNode::start(spec).await;
    mid.wait_for("both hints", |s| s.table_peers >= 2).await;
    let referred = mid.query("Author=Okafor").await;
    assert!(!referred.referrals[0].unreachable);

    let dir = leaf.stop().await;
    let node = mid.daemon.node();
    node.poll_now("leaf").unwrap();
    // Unreachable: still referred to, and the referral says so.
    let a = mid
        .wait_query("Author=Okafor", |a| {
            a.referrals.first().is_some_and(|r| r.unreachable) || a.referrals.is_empty()
        })
        .await;
    if let Some(r) = a.referrals.first() {
        assert!(r.unreachable, "{a:?}");
    }
    // Gone after peer_gone_after: no longer referred to, out of the table, still spooled.
    mid.wait_query("Author=Okafor", |a| a.referrals.is_empty())
        .await;
    let state = node
        .peer_states()
        .into_iter()
        .find(|p| p.name == "leaf")
        .unwrap();
    assert!(state.gone && state.unreachable_since.is_some(), "{state:?}");
    assert_eq!(node.table().peers().len(), 1);
    assert!(
        node.received_hint("leaf").is_ok(),
        "its spooled hint is kept"
    );
    assert!(!mid.query("Author=Garcia").await.referrals[0].unreachable);

    // It comes back (on its old port): taken in at the next retry, within the cap.
    let port = leaf_cip.to_string();
    let back = TestNode::start_edited(leaf_spec, dir, move |text| {
        text.replacen("cip = [\"127.0.0.1:0\"]", &format!("cip = [\"{port}\"]"), 1)
    })
    .await;
    // The poll that brings it clears the unreachable mark as soon as its answer is in,
    // then imports its hint (a query in between sees the mark gone, no hint yet).
    let a = mid
        .wait_query("Author=Okafor", |a| {
            a.referrals.first().is_some_and(|r| !r.unreachable)
        })
        .await;
    assert!(!a.referrals[0].unreachable, "{a:?}");
    let state = node
        .peer_states()
        .into_iter()
        .find(|p| p.name == "leaf")
        .unwrap();
    assert!(
        !state.gone && state.unreachable_since.is_none(),
        "{state:?}"
    );
    mid.stop().await;
    back.stop().await;
    other.stop().await;
}

/// A node that is stopped tells the nodes that poll it (a last `datachanged`, once its
/// listeners are closed), so they find it gone at once rather than at their next poll;
/// `limits.farewell_timeout = "0s"` turns that off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_says_goodbye_to_its_pollers() {
    for (farewell, expected) in [("2s", 1), ("0s", 0)] {
        let hint = crate::fake::author_hint(1, &[("Nobody", 1)]);
        let upstream = crate::fake::FakePeer::start(crate::fake::object(
            "1.3.6.1.4.1.99999.469",
            "cip://up:1",
            &hint,
        ))
        .await;
        let mut spec = NodeSpec::new("1.3.6.1.4.1.99999.461", &["Okafor"]).peer_at(
            "up",
            upstream.addr,
            &["poller"],
            None,
        );
        spec.extra_limits = format!("farewell_timeout = \"{farewell}\"");
        let node = TestNode::start(spec).await;
        // The start's notice (our data may have changed while we were down).
        crate::harness::eventually("the start's datachanged", || upstream.datachanged() >= 1).await;
        let before = upstream.datachanged();
        node.stop().await;
        assert_eq!(
            upstream.datachanged() - before,
            expected,
            "farewell_timeout = {farewell}"
        );
    }
}

/// A peer that did not answer and then answers with a refusal is reachable again (and
/// wrong): its referrals stop saying it does not answer (PROTOCOL.md, "Peers that come and
/// go").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_answers_with_a_refusal_is_reachable_again() {
    // Connections are dropped at once until the test has seen the peer unreachable, then
    // refused with a 502 (the retries after a transient failure may come within
    // milliseconds: the mark must not come and go unseen).
    let refuse = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let refusing = refuse.clone();
    let (addr, _, _token) = fake_server(move |stream| {
        let drop_it = !refusing.load(std::sync::atomic::Ordering::SeqCst);
        async move {
            if drop_it {
                return;
            }
            let (mut lines, mut w) = greet(stream).await;
            let mut line = String::new();
            // The request, up to its closing dot.
            loop {
                line.clear();
                match lines.read_line(&mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) if line == ".\r\n" => break,
                    Ok(_) => {}
                }
            }
            let _ = w
                .write_all(
                    b"% 502 Request is missing required CIP attributes\r\nMime-Version: 1.0\r\nContent-Type: application/index.response; code=502\r\n\r\nno dsi here\r\n.\r\n",
                )
                .await;
            let mut rest = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut lines, &mut rest).await;
        }
    })
    .await;
    let mut spec = NodeSpec::new("1.3.6.1.4.1.99999.461", &["Garcia"]).peer_at(
        "refuser",
        addr,
        &["poll"],
        None,
    );
    spec.extra_limits = "max_transient_backoff = \"300ms\"".into();
    let node = TestNode::start(spec).await;
    let n = node.daemon.node();
    let state = || {
        n.peer_states()
            .into_iter()
            .find(|p| p.name == "refuser")
            .unwrap()
    };
    // Dropped connections: transient failures, so unreachable.
    crate::harness::eventually("the peer marked unreachable", || {
        state().unreachable_since.is_some()
    })
    .await;
    refuse.store(true, std::sync::atomic::Ordering::SeqCst);
    // The refusal: a failed poll, but an answer.
    crate::harness::eventually("the refusal", || {
        state().last_error.is_some_and(|e| e.contains("502"))
    })
    .await;
    let s = state();
    assert!(s.unreachable_since.is_none(), "{s:?}");
    assert!(s.consecutive_failures >= 2, "{s:?}");
    node.stop().await;
}

/// Shutdown cancels exchanges in flight: a node whose polled peer went silent mid-poll,
/// and which a silent client holds mid-request, still stops within its grace period (the
/// harness's 5 s), not at the stall timeout (60 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cancels_a_poll_and_a_request_in_flight() {
    let (addr, _connections, _token) = silent_peer().await;
    let mut spec = NodeSpec::new("1.3.6.1.4.1.99999.445", &["Garcia"]);
    spec.poll_timeout = "120s";
    spec.extra_limits =
        "stall_timeout = \"60s\"\nidle_timeout = \"60s\"\nrequest_timeout = \"60s\"".into();
    let spec = spec.peer_at("silent", addr, &["poll"], None);
    let node = TestNode::start(spec).await;
    let n = node.daemon.node().clone();
    crate::harness::eventually("the poll waiting for its answer", || {
        n.peer_states().iter().any(|p| {
            p.exchange
                .as_ref()
                .is_some_and(|e| e.phase == "waiting for its answer")
        })
    })
    .await;
    // A client that opens a session, starts a poll and says nothing more.
    let mut client = tokio::net::TcpStream::connect(node.cip_addr())
        .await
        .unwrap();
    let mut banner = [0u8; 64];
    let _ = tokio::io::AsyncReadExt::read(&mut client, &mut banner).await;
    client
        .write_all(
            b"# CIP-Version: 3\r\nMime-Version: 1.0\r\nContent-Type: application/index.cmd.poll;",
        )
        .await
        .unwrap();
    let started = Instant::now();
    node.stop().await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
    drop(client);
}
