//! A hub importing hundreds of big hints keeps answering queries.

use std::time::{Duration, Instant};

use crate::fake::{FakePeer, author_hint, object};
use crate::harness::{NodeSpec, TestNode, metric};

const HUB: &str = "1.3.6.1.4.1.99999.60";
const PEERS: usize = 200;
const ENTRIES: usize = 2_000;
/// Generous: a query waiting this long means the listener starved.
const LIVENESS: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_are_answered_while_hundreds_of_hints_import() {
    let mut peers = Vec::with_capacity(PEERS);
    for p in 0..PEERS {
        // A shared popular value, then values of this peer's own.
        let values: Vec<(String, u64)> = std::iter::once(("Garcia".to_owned(), 50))
            .chain((1..ENTRIES).map(|i| (format!("author {p} {i}"), 1 + (i % 7) as u64)))
            .collect();
        let refs: Vec<(&str, u64)> = values.iter().map(|(v, c)| (v.as_str(), *c)).collect();
        let dsi = format!("1.3.6.1.4.1.99999.600.{p}");
        let hint = author_hint(100, &refs);
        peers.push((
            dsi.clone(),
            FakePeer::start(object(&dsi, &format!("http://p{p}/"), &hint)).await,
        ));
    }
    let nowhere: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut spec = NodeSpec::new(HUB, &["Hugo"]);
    for (i, (dsi, peer)) in peers.iter().enumerate() {
        spec = spec.peer_at(&format!("p{i}"), peer.addr, &["poll"], Some(dsi));
    }
    // A poller keeps the out-bound builder busy during the import too.
    spec = spec.peer_at("up", nowhere, &["poller"], Some("1.3.6.1.4.1.99999.69"));
    let hub = TestNode::start(spec).await;

    let mut answered = 0usize;
    let mut worst = Duration::ZERO;
    let started = Instant::now();
    loop {
        let done = hub.daemon.node().status_snapshot().peers_imported as usize == PEERS;
        let t = Instant::now();
        let a = tokio::time::timeout(LIVENESS, hub.query("Author=Garcia"))
            .await
            .unwrap_or_else(|_| {
                panic!("a query waited over {LIVENESS:?} after {answered} answers")
            });
        worst = worst.max(t.elapsed());
        answered += 1;
        if done {
            // Every peer refers for the shared value: a page of 10 by default, saying more.
            assert_eq!(a.referrals.len(), 10);
            assert!(a.more);
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "import never finished"
        );
    }
    // Larger pages on request, up to limits.max_referrals (100); the best come first in
    // every page.
    let page = |limit| hub.query_page("Author=Garcia", false, Some(limit));
    let (ten, hundred, capped) = (page(10).await, page(100).await, page(PEERS + 1).await);
    assert_eq!((hundred.referrals.len(), hundred.more), (100, true));
    assert_eq!(capped.referrals, hundred.referrals);
    assert_eq!(ten.referrals[..], hundred.referrals[..10]);
    let one = hub.query("Author=author 3 5").await;
    assert_eq!((one.referrals.len(), one.more), (1, false));
    // Those answers are kept: the gauge shows their bytes, within the default 32 MiB.
    let kept = metric(
        &hub.daemon.node().render_metrics(),
        "cipd_answer_cache_bytes",
    );
    assert!(kept > 0.0 && kept <= f64::from(32u32 << 20), "{kept}");
    let s = hub.daemon.node().status_snapshot();
    assert_eq!(s.table_peers as usize, PEERS);
    assert!(answered >= 2);
    eprintln!(
        "{PEERS} peers x {ENTRIES} entries imported in {:?}; {answered} queries answered, worst {worst:?}; {} out-bound builds",
        started.elapsed(),
        s.outbound_builds
    );
    hub.stop().await;
}
