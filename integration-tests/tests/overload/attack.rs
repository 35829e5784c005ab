//! The attack of issue 29, shared by the `overload` test (which asserts the good clients'
//! success) and the `overload` bench (which prints it over longer phases): a slow-drip
//! attacker on 200 loopback addresses (127.0.1.x) wanting more than every CIP and HTTP slot
//! of a node with the default limits, then a connect/close flood from the same addresses,
//! while good clients on 127.0.0.1 poll over CIP and query over HTTP.

#[allow(dead_code)]
#[path = "../mesh/harness.rs"]
mod harness;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use harness::{NodeSpec, TestNode};

const NODE: &str = "1.3.6.1.4.1.99999.78";
/// Attacking addresses: 127.0.1.1 to 127.0.1.200.
const ADDRESSES: u8 = 200;
/// Slow connections per attacking address (CIP, HTTP): 1,200 and 1,600 in all, against
/// the default 1,024 CIP and 1,024 HTTP slots.
const SLOW_CIP: usize = 6;
const SLOW_HTTP: usize = 8;
/// Good clients' patience per request.
const PATIENCE: Duration = Duration::from_secs(5);

/// Each phase's length: `OVERLOAD_SECONDS`, else `default` seconds.
pub fn phase(default: u64) -> Duration {
    let secs = std::env::var("OVERLOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    Duration::from_secs(secs)
}

fn attacker(i: u8) -> [u8; 4] {
    [127, 0, 1, i + 1]
}

async fn connect_from(from: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(to).await
}

/// One slow-drip connection after another from `from`: the CIP version line (or, every
/// other time, a request after a prompt negotiation), or HTTP headers, a byte every 2 s.
/// Reconnects as soon as the server closes, as an attacker would.
async fn drip(from: [u8; 4], to: SocketAddr, http: bool, n: usize, stop: CancellationToken) {
    let mut round = n;
    while !stop.is_cancelled() {
        round += 1;
        let Ok(mut s) = connect_from(from, to).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let (lead, drip): (&[u8], &[u8]) = match (http, round % 2) {
            (true, _) => (
                b"GET /v1/status HTTP/1.1\r\n",
                b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
            ),
            (false, 0) => (b"", b"# CIP-Version: 3\r\n"),
            (false, _) => (
                b"# CIP-Version: 3\r\n",
                b"Mime-Version: 1.0\r\nContent-Type: application/index.cmd.noop\r\n\r\n.\r\n",
            ),
        };
        if s.write_all(lead).await.is_err() {
            continue;
        }
        let mut buf = [0u8; 512];
        for byte in drip.iter().cycle() {
            // Drain what the server says (banner, version answer) without blocking.
            let _ = tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await;
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
            if s.write_all(&[*byte]).await.is_err() {
                break;
            }
        }
    }
}

/// Connections opened and closed at once from `from`, as fast as they go.
async fn churn(from: [u8; 4], to: SocketAddr, count: Arc<AtomicU64>, stop: CancellationToken) {
    while !stop.is_cancelled() {
        if let Ok(s) = connect_from(from, to).await {
            count.fetch_add(1, Ordering::Relaxed);
            drop(s);
        } else {
            tokio::task::yield_now().await;
        }
    }
}

async fn good_poll(cip: SocketAddr) -> Result<(), String> {
    harness::poll_own_hint(cip, NODE).await
}

async fn good_query(http: &str) -> Result<(), String> {
    let a: cipd::model::answer::QueryAnswer =
        cipd::ctl::query::get_json(http, "/v1/referrals?q=Author%3DAlice", PATIENCE)
            .await
            .map_err(|e| format!("query: {e:#}"))?;
    if a.local == 1 {
        Ok(())
    } else {
        Err(format!("query: unexpected answer {a:?}"))
    }
}

/// Good clients' tries and failures over one phase.
#[derive(Debug, Default)]
pub struct Good {
    /// Polls answered.
    pub polls: u64,
    /// Queries answered.
    pub queries: u64,
    /// What went wrong, one line each.
    pub failures: Vec<String>,
}

impl Good {
    /// Per cent of the polls answered.
    pub fn cip_rate(&self) -> f64 {
        let failed = self
            .failures
            .iter()
            .filter(|f| !f.starts_with("query"))
            .count() as u64;
        100.0 * self.polls as f64 / (self.polls + failed).max(1) as f64
    }

    /// Per cent of the queries answered.
    pub fn http_rate(&self) -> f64 {
        let failed = self
            .failures
            .iter()
            .filter(|f| f.starts_with("query"))
            .count() as u64;
        100.0 * self.queries as f64 / (self.queries + failed).max(1) as f64
    }
}

/// Polls and queries one after another until `stop`.
async fn good_clients(cip: SocketAddr, http: String, stop: CancellationToken) -> Good {
    let mut good = Good::default();
    while !stop.is_cancelled() {
        match tokio::time::timeout(PATIENCE, good_poll(cip)).await {
            Ok(Ok(())) => good.polls += 1,
            Ok(Err(e)) => good.failures.push(e),
            Err(_) => good.failures.push("poll: no answer in time".into()),
        }
        match tokio::time::timeout(PATIENCE, good_query(&http)).await {
            Ok(Ok(())) => good.queries += 1,
            Ok(Err(e)) => good.failures.push(e),
            Err(_) => good.failures.push("query: no answer in time".into()),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    good
}

fn counter(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// What one run of both attacks measured.
#[derive(Debug)]
pub struct Figures {
    /// The good clients through the slow drip.
    pub slow: Good,
    /// The good clients through the flood.
    pub flood: Good,
    /// Connections evicted at their first request during the drip: CIP, HTTP.
    pub evicted: (f64, f64),
    /// Connections the flood opened.
    pub opened: u64,
    /// The metrics page after the drip.
    pub page: String,
}

/// Runs both attacks against a node with the default limits, `phase` each, printing the
/// figures as it goes.
pub async fn run(phase: Duration) -> Figures {
    let mut spec = NodeSpec::new(NODE, &["Alice"]);
    // The default limits and deadlines, as the issue measured them.
    spec.poll_timeout = "30s";
    spec.connect_timeout = "10s";
    let node = TestNode::start(spec).await;
    let cip = node.cip_addr();
    let http_addr = node.daemon.http_addr().unwrap();
    let http = node.http_url();
    good_poll(cip).await.unwrap();
    good_query(&http).await.unwrap();

    // The attackers run on a runtime (a thread) of their own, as another host would: they
    // cannot starve the node's workers of turns, only share the machine's cores.
    let attackers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();

    // Phase 1: the slow drip, from every address, until the attack is in full swing.
    let attack = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    for a in 0..ADDRESSES {
        for n in 0..SLOW_CIP {
            tasks.spawn_on(
                drip(attacker(a), cip, false, n, attack.clone()),
                attackers.handle(),
            );
        }
        for n in 0..SLOW_HTTP {
            tasks.spawn_on(
                drip(attacker(a), http_addr, true, n, attack.clone()),
                attackers.handle(),
            );
        }
    }
    let metrics = node.daemon.node().metrics();
    let full = Instant::now() + Duration::from_secs(20);
    while Instant::now() < full {
        let page = metrics.render(&Default::default());
        if counter(&page, "cipd_connections_open{listener=\"cip\"}") >= 1000.0
            && counter(&page, "cipd_connections_open{listener=\"http\"}") >= 1000.0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stop = CancellationToken::new();
    let good = tokio::spawn(good_clients(cip, http.clone(), stop.clone()));
    tokio::time::sleep(phase).await;
    stop.cancel();
    let slow = good.await.unwrap();
    attack.cancel();
    while tasks.join_next().await.is_some() {}
    let page = metrics.render(&Default::default());
    for l in page.lines().filter(|l| l.starts_with("cipd_connections_")) {
        println!("overload: after the drip: {l}");
    }
    let evicted = |l: &str| {
        counter(
            &page,
            &format!("cipd_connections_evicted_total{{listener=\"{l}\",stage=\"fresh\"}}"),
        )
    };
    println!(
        "overload: slow drip from {ADDRESSES} addresses ({} CIP + {} HTTP connections): good \
         CIP {:.1} % of {} polls, good HTTP {:.1} % of {} queries; evicted {} CIP, {} HTTP",
        usize::from(ADDRESSES) * SLOW_CIP,
        usize::from(ADDRESSES) * SLOW_HTTP,
        slow.cip_rate(),
        slow.polls,
        slow.http_rate(),
        slow.queries,
        evicted("cip"),
        evicted("http"),
    );

    // Phase 2: connections opened and closed as fast as they go, from every address.
    let attack = CancellationToken::new();
    let opened = Arc::new(AtomicU64::new(0));
    for a in 0..ADDRESSES {
        tasks.spawn_on(
            churn(attacker(a), cip, opened.clone(), attack.clone()),
            attackers.handle(),
        );
        tasks.spawn_on(
            churn(attacker(a), http_addr, opened.clone(), attack.clone()),
            attackers.handle(),
        );
    }
    let stop = CancellationToken::new();
    let good = tokio::spawn(good_clients(cip, http.clone(), stop.clone()));
    tokio::time::sleep(phase).await;
    stop.cancel();
    let flood = good.await.unwrap();
    attack.cancel();
    for l in metrics
        .render(&Default::default())
        .lines()
        .filter(|l| l.starts_with("cipd_connections_"))
    {
        println!("overload: after the flood: {l}");
    }
    while tasks.join_next().await.is_some() {}
    println!(
        "overload: connect/close flood from {ADDRESSES} addresses ({} connections): good CIP \
         {:.1} % of {} polls, good HTTP {:.1} % of {} queries",
        opened.load(Ordering::Relaxed),
        flood.cip_rate(),
        flood.polls,
        flood.http_rate(),
        flood.queries,
    );

    for (what, g) in [("slow drip", &slow), ("flood", &flood)] {
        for f in g.failures.iter().take(8) {
            println!("overload: {what}: {f}");
        }
    }
    let evicted = (evicted("cip"), evicted("http"));
    node.stop().await;
    attackers.shutdown_background();
    Figures {
        slow,
        flood,
        evicted,
        opened: opened.load(Ordering::Relaxed),
        page,
    }
}
