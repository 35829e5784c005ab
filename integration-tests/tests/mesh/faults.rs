//! Issue #16 item 2: faults on the links between nodes, through the fault-injecting proxy
//! of [`crate::proxy`]. A parent polls a leaf through the proxy (every 100 ms); the tests
//! cut, stall, slow and reset that link and check what the mesh makes of it: hints expire
//! as `[spool] ttl` says and no stale referral survives, the table recovers on restore,
//! the backoff after transient failures grows (with full jitter) to
//! `limits.max_transient_backoff` and no further and shows in the peers listings, a stall fails a poll at `limits.poll_timeout`, a slow link within it does not.

use std::time::{Duration, Instant, SystemTime};

use cipd::front::admin::{self, AdminRequest};
use cipd::model::answer::{QueryAnswer, ReferralJson};
use cipd::model::status::PeerState;
use serde_json::Value;

use crate::harness::{NodeSpec, TestNode, eventually};
use crate::proxy::{Conn, Mode, Proxy};

const LEAF1: &str = "1.3.6.1.4.1.99999.161";
const LEAF2: &str = "1.3.6.1.4.1.99999.162";
const MID: &str = "1.3.6.1.4.1.99999.163";
const ROOT: &str = "1.3.6.1.4.1.99999.164";

fn referral<'a>(a: &'a QueryAnswer, dsi: &str) -> Option<&'a ReferralJson> {
    a.referrals.iter().find(|r| r.dsi == dsi)
}

fn peer(node: &TestNode, name: &str) -> PeerState {
    node.daemon
        .node()
        .peer_states()
        .into_iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("{}: no peer {name}", node.spec.dsi))
}

/// The `peers` listing of the admin socket (what `cipctl peers --json` prints), entry `name`.
async fn admin_peer(node: &TestNode, name: &str) -> Value {
    let r = admin::request(&node.admin_socket(), &AdminRequest::Peers)
        .await
        .expect("admin socket answers");
    assert!(r.ok, "{:?}", r.error);
    r.result.unwrap()["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no peer {name} in the admin listing"))
        .clone()
}

/// The console's `/v1/mesh` entry of configured peer `name`.
async fn mesh_peer(node: &TestNode, name: &str) -> Value {
    let mesh: Value =
        cipd::ctl::query::get_json(&node.http_url(), "/v1/mesh", Duration::from_secs(5))
            .await
            .unwrap();
    mesh["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no peer {name} in /v1/mesh: {mesh}"))
        .clone()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// The table's summary of dataset `dsi` at `node`: (received, expires).
fn held(node: &TestNode, dsi: &str) -> Option<(SystemTime, Option<SystemTime>)> {
    node.daemon
        .node()
        .table()
        .peers()
        .into_iter()
        .find(|s| s.dsi.as_str() == dsi)
        .map(|s| (s.received, s.expires))
}

/// Spool files of `node` that hold a hint of `dsi`.
fn spool_files(node: &TestNode, dsi: &str) -> Vec<String> {
    std::fs::read_dir(node.dir.path().join("spool"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(&format!(".{dsi}.spool")))
        .collect()
}

/// Waits until a connection after the first `skip` satisfies `f`; returns it.
async fn wait_conn(proxy: &Proxy, skip: usize, what: &str, f: impl Fn(&Conn) -> bool) -> Conn {
    let mut found = None;
    eventually(what, || {
        found = proxy.conns().into_iter().skip(skip).find(|c| f(c));
        found.is_some()
    })
    .await;
    found.unwrap()
}

/// leaf1 (through the proxy) and leaf2 (direct) under a mid; a root over the mid. Hints
/// live one second; polls every 100 ms; backoff capped at 400 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_link_expires_the_hint_everywhere_and_restore_recovers() {
    const TTL: Duration = Duration::from_secs(1);
    let leaf1 = TestNode::start(NodeSpec::new(LEAF1, &["Garcia", "Okafor", "Lindqvist"])).await;
    let leaf2 = TestNode::start(NodeSpec::new(LEAF2, &["Garcia", "Becker"])).await;
    let proxy = Proxy::start(leaf1.cip_addr()).await;
    let short = |mut s: NodeSpec| {
        s.poll_interval = "100ms";
        s.extra_limits = "max_backoff = \"400ms\"".into();
        s.extra = "[spool]\nttl = \"1s\"\n".into();
        s
    };
    let mid = TestNode::start(short(
        NodeSpec::new(MID, &[])
            .peer_at("leaf1", proxy.addr(), &["poll"], Some(LEAF1))
            .peer("leaf2", &leaf2, &["poll"]),
    ))
    .await;
    let root = TestNode::start(short(NodeSpec::new(ROOT, &[]).peer("mid", &mid, &["poll"]))).await;
    let full = root
        .wait_query("Author=Garcia", |a| {
            referral(a, MID).is_some_and(|r| r.count == 2)
        })
        .await;
    assert_eq!(referral(&full, MID).unwrap().total, 5, "{full:?}");

    // Hints are refreshed by every poll: well past the TTL nothing expires.
    let (received, expires) = held(&mid, LEAF1).expect("leaf1's hint");
    assert_eq!(
        expires.unwrap().duration_since(received).unwrap(),
        TTL,
        "a hint lives [spool] ttl from its arrival"
    );
    let start = peer(&mid, "leaf1").successes;
    mid.wait_for("polls over twice the TTL", |_| {
        peer(&mid, "leaf1").successes >= start + 25
    })
    .await;
    for n in [&mid, &root] {
        assert_eq!(
            n.daemon.node().status_snapshot().expired,
            0,
            "{}",
            n.spec.dsi
        );
    }
    assert_eq!(spool_files(&mid, LEAF1).len(), 1);
    let a = mid.query("Author=Okafor").await;
    assert_eq!(
        referral(&a, LEAF1).map(|r| (r.count, r.total)),
        Some((1, 3)),
        "{a:?}"
    );

    // Cut: polls fail at once, the hint stays until its expiry and not a moment longer.
    let cut = Instant::now();
    proxy.cut();
    let (_, expires) = held(&mid, LEAF1).expect("still held right after the cut");
    let expires = expires.unwrap();
    mid.wait_for("a failed poll of leaf1", |_| {
        peer(&mid, "leaf1").consecutive_failures >= 1
    })
    .await;
    let a = mid.query("Author=Okafor").await;
    if SystemTime::now() + Duration::from_millis(50) < expires {
        assert!(
            referral(&a, LEAF1).is_some(),
            "a failed poll must not drop a hint before its expiry: {a:?}"
        );
    }
    mid.wait_query("Author=Okafor", |a| referral(a, LEAF1).is_none())
        .await;
    let gone_at = SystemTime::now();
    let mid_gone = cut.elapsed();
    assert!(
        gone_at >= expires,
        "leaf1's hint left {:?} before its expiry",
        expires.duration_since(gone_at).unwrap_or_default()
    );
    let late = gone_at.duration_since(expires).unwrap();
    assert!(
        late <= Duration::from_millis(1000),
        "expired hint still referred to {late:?} after its expiry"
    );
    let root_gone = root
        .wait_query("Author=Okafor", |a| a.referrals.is_empty())
        .await;
    let root_gone_after = cut.elapsed();
    assert!(root_gone.referrals.is_empty());
    eprintln!(
        "cut: mid dropped leaf1 after {} ms ({} ms past expiry), root after {} ms",
        ms(mid_gone),
        ms(late),
        ms(root_gone_after)
    );
    // Nothing stale anywhere: the mid holds leaf2 only, in its table, spool and aggregate.
    let s = mid.daemon.node().status_snapshot();
    assert!(s.expired >= 1, "{s:?}");
    assert_eq!(s.table_peers, 1, "{s:?}");
    assert!(
        spool_files(&mid, LEAF1).is_empty(),
        "the spool file goes too"
    );
    let a = mid.query("Author=Garcia").await;
    let got: Vec<(&str, u64, u64)> = a
        .referrals
        .iter()
        .map(|r| (r.dsi.as_str(), r.count, r.total))
        .collect();
    assert_eq!(got, [(LEAF2, 1, 2)]);
    let a = root
        .wait_query("Author=Garcia", |a| {
            referral(a, MID).is_some_and(|r| r.total == 2)
        })
        .await;
    let r = referral(&a, MID).unwrap();
    assert_eq!((r.count, r.total), (1, 2), "{a:?}");
    assert!(root.query("Author=Lindqvist").await.referrals.is_empty());
    assert_eq!(
        root.daemon.node().status_snapshot().expired,
        0,
        "the mid's own hint kept being refreshed"
    );
    let listed = admin_peer(&mid, "leaf1").await;
    assert!(
        listed["expires"].is_null() && listed["values"].is_null(),
        "no expiry or values shown for a hint that is gone: {listed}"
    );
    assert!(listed["last_error"].is_string(), "{listed}");

    // Restore: the next poll (at most the capped backoff away) brings everything back.
    let restored = Instant::now();
    proxy.restore();
    let a = mid
        .wait_query("Author=Okafor", |a| referral(a, LEAF1).is_some())
        .await;
    let mid_back = restored.elapsed();
    assert_eq!(
        referral(&a, LEAF1).map(|r| (r.count, r.total)),
        Some((1, 3))
    );
    let a = root
        .wait_query("Author=Garcia", |a| {
            referral(a, MID).is_some_and(|r| r.count == 2)
        })
        .await;
    let root_back = restored.elapsed();
    assert_eq!(referral(&a, MID).unwrap().total, 5, "{a:?}");
    assert!(referral(&root.query("Author=Okafor").await, MID).is_some());
    assert!(
        mid_back <= Duration::from_millis(440 + 1000),
        "recovery took {mid_back:?}; the backoff is capped at 400 ms"
    );
    assert_eq!(peer(&mid, "leaf1").consecutive_failures, 0);
    eventually("leaf1's spool file back", || {
        spool_files(&mid, LEAF1).len() == 1
    })
    .await;
    eprintln!(
        "restore: mid has leaf1 again after {} ms, root after {} ms",
        ms(mid_back),
        ms(root_back)
    );
    for n in [root, mid, leaf1, leaf2] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_backoff_grows_with_full_jitter_and_shows_in_the_peer_listings() {
    // 1 s polls; a refused connection is transient: retried at a random moment of a window
    // of 100 ms, then 200 ms, then capped at 300 ms (PROTOCOL.md "Retries").
    const FIRST: Duration = Duration::from_millis(100);
    const CAP: Duration = Duration::from_millis(300);
    let leaf = TestNode::start(NodeSpec::new(LEAF1, &["Hopper"])).await;
    let proxy = Proxy::start(leaf.cip_addr()).await;
    let mut spec = NodeSpec::new(MID, &[]).peer_at("leaf", proxy.addr(), &["poll"], Some(LEAF1));
    spec.poll_interval = "1s";
    spec.extra_limits = "transient_backoff = \"100ms\"\nmax_transient_backoff = \"300ms\"".into();
    let mid = TestNode::start(spec).await;
    mid.wait_for("leaf's hint", |s| s.table_peers == 1).await;

    let before = proxy.accepted();
    proxy.cut();
    let refused = |conns: &[Conn]| -> Vec<Instant> {
        conns[before..]
            .iter()
            .filter(|c| c.killed == Some("refused"))
            .map(|c| c.accepted)
            .collect()
    };
    eventually("twelve refused attempts", || {
        refused(&proxy.conns()).len() >= 12
    })
    .await;
    // Attempts during the cut, as the proxy saw them.
    let attempts = refused(&proxy.conns());
    let gaps: Vec<Duration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    eprintln!(
        "backoff gaps between refused attempts (ms): {:?}",
        gaps.iter().map(|g| ms(*g)).collect::<Vec<_>>()
    );
    // Gap i follows failure i+1: a wait drawn within its window, plus the attempt itself.
    let window = |failures: u32| FIRST.saturating_mul(1 << (failures - 1).min(20)).min(CAP);
    for (i, gap) in gaps.iter().enumerate() {
        let high = window(i as u32 + 1);
        assert!(
            *gap <= high + Duration::from_millis(150),
            "gap {i} ({gap:?}) longer than its window ({high:?})"
        );
    }
    // Full jitter: the capped waits are spread over the window, not one steady period.
    let capped = &gaps[3..];
    let (lo, hi) = (capped.iter().min().unwrap(), capped.iter().max().unwrap());
    assert!(
        *hi - *lo >= Duration::from_millis(30),
        "capped gaps all alike ({lo:?}..{hi:?}): no jitter"
    );

    // Visible: the node's peer state, the console's /v1/mesh, the admin `peers` listing.
    let mut state = None;
    eventually("a settled backoff (next attempt after the last)", || {
        let p = peer(&mid, "leaf");
        let settled = matches!((p.last_attempt, p.next_attempt), (Some(a), Some(n)) if n > a)
            && p.consecutive_failures >= 8;
        state = Some(p);
        settled
    })
    .await;
    let p = state.unwrap();
    let wait = p
        .next_attempt
        .unwrap()
        .duration_since(p.last_attempt.unwrap())
        .unwrap();
    assert!(
        wait <= CAP + Duration::from_millis(300),
        "next attempt due {wait:?} after the last; the cap is {CAP:?}"
    );
    eprintln!("backoff: last error {:?}", p.last_error);
    assert!(p.last_error.is_some(), "{p:?}");
    let m = mesh_peer(&mid, "leaf").await;
    let failures = m["consecutive_failures"].as_u64().unwrap();
    assert!(failures >= 8, "/v1/mesh shows the failures in a row: {m}");
    let next = m["next_poll"]
        .as_u64()
        .expect("/v1/mesh shows when the next poll is due");
    let now = unix_now();
    assert!(
        next + 1 >= now && next <= now + 1,
        "next poll {next} at most the capped backoff from now {now}: {m}"
    );
    assert!(m["failures"].as_u64().unwrap() >= failures);
    let listed = admin_peer(&mid, "leaf").await;
    assert!(listed["last_error"].is_string(), "{listed}");
    assert!(listed["last_poll"].as_u64().unwrap() + 2 >= now, "{listed}");
    // What `cipctl peers` prints as "backing off: N failures in a row".
    assert!(listed["failures"].as_u64().unwrap() >= failures, "{listed}");
    let listed_next = listed["next_poll"].as_u64().unwrap();
    assert!(listed_next + 1 >= now && listed_next <= now + 1, "{listed}");
    // The hint outlives the failures (default TTL).
    assert!(referral(&mid.query("Author=Hopper").await, LEAF1).is_some());

    let restored = Instant::now();
    proxy.restore();
    mid.wait_for("a good poll after the restore", |_| {
        peer(&mid, "leaf").consecutive_failures == 0
    })
    .await;
    let back = restored.elapsed();
    eprintln!("backoff: first good poll {} ms after the restore", ms(back));
    assert!(
        back <= CAP + Duration::from_millis(700),
        "the next attempt is at most the capped backoff away: {back:?}"
    );
    let m = mesh_peer(&mid, "leaf").await;
    assert_eq!(m["consecutive_failures"], 0, "{m}");
    assert!(admin_peer(&mid, "leaf").await["last_error"].is_null());
    mid.stop().await;
    leaf.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_fails_the_poll_at_poll_timeout_and_a_reset_fails_it_at_once() {
    const TIMEOUT: Duration = Duration::from_millis(1500);
    let leaf = TestNode::start(NodeSpec::new(LEAF1, &["Hopper", "Lovelace"])).await;
    let proxy = Proxy::start(leaf.cip_addr()).await;
    let mut spec = NodeSpec::new(MID, &[]).peer_at("leaf", proxy.addr(), &["poll"], Some(LEAF1));
    spec.poll_interval = "100ms";
    spec.poll_timeout = "1500ms";
    spec.extra_limits = "max_backoff = \"300ms\"".into();
    let mid = TestNode::start(spec).await;
    mid.wait_for("leaf's hint", |s| s.table_peers == 1).await;

    // A stall shorter than the timeout: the held bytes go through on restore, the poll
    // succeeds.
    let (s0, f0) = {
        let p = peer(&mid, "leaf");
        (p.successes, p.failures)
    };
    let before = proxy.accepted();
    proxy.stall();
    let held_conn = wait_conn(&proxy, before, "a poll into the stall", |c| {
        c.mode == Mode::Stall
    })
    .await;
    proxy.restore();
    let n = proxy
        .conns()
        .iter()
        .position(|c| c.accepted == held_conn.accepted)
        .unwrap();
    let done = wait_conn(&proxy, n, "the held poll to finish", |c| {
        c.client_closed.is_some()
    })
    .await;
    assert!(done.down > 0 && done.killed.is_none(), "{done:?}");
    // Polls of one peer run one at a time: once the next one starts, the held one is
    // counted.
    wait_conn(&proxy, n + 1, "the poll after the held one", |_| true).await;
    assert!(peer(&mid, "leaf").successes > s0);
    assert_eq!(
        peer(&mid, "leaf").failures,
        f0,
        "a short stall fails nothing"
    );

    // A stall longer than the timeout: the poller gives up after poll_timeout.
    let before = proxy.accepted();
    proxy.stall();
    let stalled = wait_conn(&proxy, before, "a stalled poll to time out", |c| {
        c.mode == Mode::Stall && c.client_closed.is_some()
    })
    .await;
    let life = stalled.client_closed.unwrap() - stalled.accepted;
    eprintln!("stall: the poller gave up after {} ms", ms(life));
    assert!(
        life >= TIMEOUT - Duration::from_millis(200)
            && life <= TIMEOUT + Duration::from_millis(700),
        "a stalled poll must fail at poll_timeout ({TIMEOUT:?}), took {life:?}"
    );
    assert_eq!(
        (stalled.up, stalled.down),
        (0, 0),
        "nothing crossed the stall"
    );
    mid.wait_for("the timeout recorded", |_| {
        peer(&mid, "leaf").consecutive_failures >= 1
    })
    .await;
    let p = peer(&mid, "leaf");
    assert_eq!(p.last_error.as_deref(), Some("exchange timed out"), "{p:?}");
    let a = mid.query("Author=Lovelace").await;
    assert_eq!(
        referral(&a, LEAF1).map(|r| (r.count, r.total)),
        Some((1, 2)),
        "a failed poll keeps the hint: {a:?}"
    );

    // Reset during a stall: the poll fails as soon as the RST arrives, not at the timeout.
    let skip = proxy.accepted();
    let open = wait_conn(&proxy, skip, "a poll into the stall", |c| {
        c.mode == Mode::Stall && c.client_closed.is_none()
    })
    .await;
    let failures = peer(&mid, "leaf").failures;
    let reset = Instant::now();
    proxy.reset();
    mid.wait_for("the reset recorded", |_| {
        peer(&mid, "leaf").failures > failures
    })
    .await;
    let took = reset.elapsed();
    let p = peer(&mid, "leaf");
    eprintln!(
        "reset: poll failed {} ms after the RST: {:?}",
        ms(took),
        p.last_error
    );
    assert!(
        took < Duration::from_millis(700) && reset - open.accepted < TIMEOUT,
        "a reset poll fails at once, not at the timeout: {took:?}"
    );
    let err = p.last_error.unwrap_or_default();
    assert!(
        err != "exchange timed out" && err.to_ascii_lowercase().contains("reset"),
        "the error names the reset: {err}"
    );
    let killed: Vec<_> = proxy
        .conns()
        .into_iter()
        .filter(|c| c.accepted == open.accepted)
        .map(|c| c.killed)
        .collect();
    assert_eq!(killed, [Some("reset")]);

    proxy.restore();
    mid.wait_for("a good poll after the restore", |_| {
        peer(&mid, "leaf").consecutive_failures == 0
    })
    .await;
    assert!(referral(&mid.query("Author=Hopper").await, LEAF1).is_some());
    mid.stop().await;
    leaf.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_link_within_poll_timeout_succeeds_and_beyond_it_fails() {
    const TIMEOUT: Duration = Duration::from_secs(1);
    // Enough authors for a hint of a few KiB.
    let authors: Vec<String> = (0..120).map(|i| format!("Author Number {i:03}")).collect();
    let authors: Vec<&str> = authors.iter().map(String::as_str).collect();
    let mut leaf = TestNode::start(NodeSpec::new(LEAF1, &authors)).await;
    // A poll whose answer has not changed moves a few lines ("unchanged since version"):
    // the leaf's data is replaced by as many values of the same length before each slow
    // poll, so that the poll carries a whole hint again.
    let same_size = |tag: char| -> Vec<String> {
        (0..120)
            .map(|i| format!("Author Numbe{tag} {i:03}"))
            .collect()
    };
    let mut spec = NodeSpec::new(MID, &[]);
    let proxy = Proxy::start(leaf.cip_addr()).await;
    spec = spec.peer_at("leaf", proxy.addr(), &["poll"], Some(LEAF1));
    spec.poll_interval = "100ms";
    spec.poll_timeout = "1s";
    spec.extra_limits = "max_backoff = \"300ms\"".into();
    let mid = TestNode::start(spec).await;
    mid.wait_for("leaf's hint", |s| s.table_peers == 1).await;
    // What one poll moves towards the poller at full speed.
    let base = wait_conn(&proxy, 0, "a complete poll", |c| {
        c.mode == Mode::Pass && c.client_closed.is_some()
    })
    .await;
    let bytes = base.down;
    assert!(bytes > 2000, "{base:?}");

    // About 0.4 s per poll: slow, within the timeout.
    let rate = bytes * 5 / 2;
    let (s0, f0) = {
        let p = peer(&mid, "leaf");
        (p.successes, p.failures)
    };
    let before = proxy.accepted();
    proxy.slow(rate);
    let changed = same_size('s');
    leaf.set_authors(&changed.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    let slow = wait_conn(&proxy, before, "a complete slow poll", |c| {
        c.mode == Mode::Slow(rate) && c.client_closed.is_some() && c.down * 10 >= bytes * 9
    })
    .await;
    let life = slow.client_closed.unwrap() - slow.accepted;
    eprintln!(
        "slow: {} bytes at {rate} B/s took {} ms",
        slow.down,
        ms(life)
    );
    let floor = Duration::from_secs_f64(bytes as f64 / rate as f64 * 0.9);
    assert!(
        life >= floor && life < TIMEOUT,
        "{life:?}: at least {floor:?} (throttled), under the timeout"
    );
    // All of it but perhaps the closing `222` line, which the poller need not wait for.
    assert!(
        slow.down <= bytes && slow.down + 100 >= bytes,
        "{slow:?} vs {bytes}"
    );
    mid.wait_for("slow polls counted", |_| {
        peer(&mid, "leaf").successes >= s0 + 2
    })
    .await;
    let p = peer(&mid, "leaf");
    assert_eq!(
        (p.failures, p.consecutive_failures),
        (f0, 0),
        "slow within the timeout fails nothing: {p:?}"
    );

    // About 4 s per poll: the timeout ends it.
    let rate = bytes / 4;
    let before = proxy.accepted();
    proxy.slow(rate);
    let changed = same_size('t');
    leaf.set_authors(&changed.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    // The first poll cut short (an "unchanged" answer before the change may still pass).
    let cut_short = wait_conn(&proxy, before, "a poll too slow to finish", |c| {
        c.mode == Mode::Slow(rate)
            && c.client_closed
                .is_some_and(|t| t - c.accepted >= TIMEOUT - Duration::from_millis(200))
    })
    .await;
    let life = cut_short.client_closed.unwrap() - cut_short.accepted;
    eprintln!(
        "too slow: {} of {bytes} bytes at {rate} B/s when the poller gave up after {} ms",
        cut_short.down,
        ms(life)
    );
    assert!(
        life >= TIMEOUT - Duration::from_millis(200)
            && life <= TIMEOUT + Duration::from_millis(700),
        "{life:?}"
    );
    assert!(cut_short.down < bytes, "{cut_short:?}");
    mid.wait_for("the timeout recorded", |_| {
        peer(&mid, "leaf").consecutive_failures >= 1
    })
    .await;
    assert_eq!(
        peer(&mid, "leaf").last_error.as_deref(),
        Some("exchange timed out")
    );
    // The mid keeps the last hint it took whole (the slow poll's), not the one cut short.
    let a = mid.query("Author=Author Numbes 007").await;
    assert_eq!(
        referral(&a, LEAF1).map(|r| (r.count, r.total)),
        Some((1, 120))
    );

    proxy.restore();
    mid.wait_for("a good poll after the restore", |_| {
        peer(&mid, "leaf").consecutive_failures == 0
    })
    .await;
    mid.stop().await;
    leaf.stop().await;
}

/// Daemon bug (reported to the daemon's owners, not fixed here): once a hint expires, the
/// `peers` listing (admin socket, `cipctl peers`, the console's `/v1/peers`) leaves
/// `expires` and `values` empty but goes on showing the expired hint's `objects` and
/// `hint_age_seconds`: `Node::expire` drops the hint from the table and the spool but
/// leaves `PeerState::hint_objects` / `hint_received` set, and the listing falls back to
/// them (`admin::backend::peers`, `.or(p.hint_objects)`, `.or(p.hint_received)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_hint_leaves_no_counts_in_the_peers_listing() {
    let leaf = TestNode::start(NodeSpec::new(LEAF1, &["Garcia", "Okafor", "Lindqvist"])).await;
    let proxy = Proxy::start(leaf.cip_addr()).await;
    let mut spec = NodeSpec::new(MID, &[]).peer_at("leaf", proxy.addr(), &["poll"], Some(LEAF1));
    spec.poll_interval = "100ms";
    spec.extra_limits = "max_backoff = \"300ms\"".into();
    spec.extra = "[spool]\nttl = \"1s\"\n".into();
    let mid = TestNode::start(spec).await;
    mid.wait_for("leaf's hint", |s| s.table_peers == 1).await;
    let listed = admin_peer(&mid, "leaf").await;
    assert_eq!(listed["objects"], 3, "{listed}");
    proxy.cut();
    mid.wait_for("the hint's expiry", |s| {
        s.expired >= 1 && s.table_peers == 0
    })
    .await;
    let listed = admin_peer(&mid, "leaf").await;
    let console: Value =
        cipd::ctl::query::get_json(&mid.http_url(), "/v1/peers", Duration::from_secs(5))
            .await
            .unwrap();
    let console = console["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "leaf")
        .unwrap()
        .clone();
    mid.stop().await;
    leaf.stop().await;
    for (source, p) in [("admin peers", &listed), ("/v1/peers", &console)] {
        assert!(
            p["expires"].is_null() && p["values"].is_null(),
            "{source}: {p}"
        );
        assert!(
            p["objects"].is_null() && p["hint_age_seconds"].is_null(),
            "{source} still shows the expired hint's object count and age: {p}"
        );
    }
}
