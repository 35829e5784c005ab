//! The in-flight byte budget (issue 29): request bodies of every connection share
//! `limits.max_inflight_bytes`. A body that would pass it waits within its own deadline and
//! is then refused as temporary (CIP `% 400`, HTTP 503 with CIP 400), never buffered past it;
//! the budget comes back when the bodies are done with.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::harness::{NodeSpec, TestNode, eventually, metric};

const NODE: &str = "1.3.6.1.4.1.99999.79";

/// A CIP message of about `kib` KiB (a noop with a long body, lines of 1,000 bytes).
fn big_message(kib: usize) -> (Vec<u8>, Vec<u8>) {
    let mut head =
        b"Mime-Version: 1.0\r\nContent-Type: application/index.cmd.noop\r\n\r\n".to_vec();
    let line = format!("{}\r\n", "a".repeat(998));
    for _ in 0..kib {
        head.extend_from_slice(line.as_bytes());
    }
    (head, b".\r\n".to_vec())
}

/// Connects, reads the banner, negotiates.
async fn negotiated(addr: std::net::SocketAddr) -> BufReader<TcpStream> {
    let mut s = BufReader::new(TcpStream::connect(addr).await.unwrap());
    let mut line = String::new();
    s.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("% 220"), "{line}");
    s.get_mut()
        .write_all(b"# CIP-Version: 3\r\n")
        .await
        .unwrap();
    line.clear();
    s.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("% 300"), "{line}");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_share_one_budget_and_wait_or_are_refused() {
    let mut spec = NodeSpec::new(NODE, &["Alice"]);
    spec.extra_limits = "max_inflight_bytes = 1048576\nrequest_timeout = \"10s\"\n".to_owned();
    spec.listen_extra = "cip_http = \"/cip\"".to_owned();
    let node = TestNode::start(spec).await;
    let cip = node.cip_addr();
    let metrics = || node.daemon.node().render_metrics();

    // A holds 700 KiB of an unfinished request: most of the budget.
    let (body, end) = big_message(700);
    let mut a = negotiated(cip).await;
    a.get_mut().write_all(&body).await.unwrap();
    eventually("A's share reserved", || {
        metric(&metrics(), "cipd_inflight_bytes") > 600.0 * 1024.0
    })
    .await;

    // B sends a whole request as large: it waits for the budget instead of buffering past it.
    let (read_half, mut write_half) = negotiated(cip).await.into_inner().into_split();
    let mut b = BufReader::new(read_half);
    let sent = {
        let mut whole = body.clone();
        whole.extend_from_slice(&end);
        tokio::spawn(async move { write_half.write_all(&whole).await })
    };
    eventually("B waiting", || {
        metric(&metrics(), "cipd_inflight_waits_total") >= 1.0
    })
    .await;
    assert!(metric(&metrics(), "cipd_inflight_bytes") <= 1048576.0);

    // A finishes and is answered; then B gets the budget and is answered too.
    a.get_mut().write_all(&end).await.unwrap();
    let mut line = String::new();
    a.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("% 2"), "A: {line}");
    line.clear();
    tokio::time::timeout(Duration::from_secs(20), b.read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    assert!(line.starts_with("% 2"), "B: {line}");
    sent.await.unwrap().unwrap();

    // A request larger than the whole budget is refused as temporary at once, on CIP...
    let (huge, _) = big_message(1200);
    let mut c = negotiated(cip).await;
    let _ = c.get_mut().write_all(&huge).await;
    line.clear();
    tokio::time::timeout(Duration::from_secs(20), c.read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    assert!(
        line.starts_with("% 400") && line.contains("in-flight memory budget"),
        "{line}"
    );
    // ... and over HTTP: 503, carrying CIP 400.
    let http = node.daemon.http_addr().unwrap();
    let mut h = TcpStream::connect(http).await.unwrap();
    let mut post = format!(
        "POST /cip HTTP/1.1\r\nHost: x\r\nContent-Type: application/index.cmd.noop\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        huge.len() + end.len()
    )
    .into_bytes();
    post.extend_from_slice(&huge);
    post.extend_from_slice(&end);
    let _ = h.write_all(&post).await;
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), h.read_to_end(&mut reply)).await;
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(reply.contains("in-flight memory budget"), "{reply}");

    eventually("the budget given back", || {
        metric(&metrics(), "cipd_inflight_bytes") == 0.0
    })
    .await;
    let page = metrics();
    assert_eq!(metric(&page, "cipd_inflight_budget_bytes"), 1048576.0);
    assert!(
        metric(&page, "cipd_inflight_refused_total") >= 2.0,
        "{page}"
    );
    node.stop().await;
}
