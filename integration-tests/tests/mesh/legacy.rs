//! A legacy (pre-RFC) CIPv3 Whois++ index server, byte for byte: the forms it bends
//! (two-space `300`, a banner that names `# CIP-Version: 3` late, `Content-type` before
//! `Mime-Version`, a folded `boundary`, LF-only header lines, no blank line before the first
//! boundary, an `index.response` part first, a stray `.` before the close delimiter), and a
//! Whois++-only server that does not speak CIP at all. Plus tests of a mesh with such leaves.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

/// How the fake answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A CIPv3 server with the legacy bends.
    Cip,
    /// A Whois++ server that answers the version line with plain text.
    WhoisText,
    /// One that refuses version 3 with a 5xx.
    Refuses,
}

/// A running legacy server on 127.0.0.1.
pub struct LegacyPeer {
    pub addr: SocketAddr,
    /// Connections accepted.
    pub connections: Arc<AtomicUsize>,
    /// Polls answered.
    pub polls: Arc<AtomicUsize>,
    token: CancellationToken,
}

impl Drop for LegacyPeer {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

/// The poll answer after `% 201`, with `payload` as the tagged index object of `dsi`.
pub fn legacy_result(dsi: &str, base: &str, payload: &str) -> String {
    format!(
        "Content-type: multipart/mixed;\r\n\
         \tboundary=\"legacy-42\"\n\
         Mime-Version: 1.0\n\
         --legacy-42\r\n\
         Content-Type: application/index.response; code=201\r\n\
         \r\n\
         201 Here are the results\r\n\
         --legacy-42\r\n\
         Content-type: application/index.obj.tagged; dsi={dsi};\r\n \
         base-uri=\"{base}\"\r\n\
         \r\n\
         {payload}\r\n\
         .\r\n\
         --legacy-42--\r\n\
         .\r\n"
    )
}

impl LegacyPeer {
    /// Serves `payload` (a tagged index object's text) for `dsi` to every poll.
    pub async fn start(mode: Mode, dsi: &str, payload: String) -> Self {
        let polls = Arc::new(AtomicUsize::new(0));
        let answer = legacy_result(dsi, "whois://legacy.example:43/", &payload);
        let p = polls.clone();
        let (addr, connections, token) = crate::harness::fake_server(move |stream| {
            let (answer, p) = (answer.clone(), p.clone());
            async move {
                let _ = serve(stream, mode, &answer, &p).await;
            }
        })
        .await;
        Self {
            addr,
            connections,
            polls,
            token,
        }
    }
}

async fn serve(
    stream: tokio::net::TcpStream,
    mode: Mode,
    answer: &str,
    polls: &AtomicUsize,
) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    w.write_all(
        b"% 220-Whois++ index server (legacy 0.9) ready\r\n\
          % 220-Speaks Whois++ and the CIP draft\n\
          % 220 # CIP-Version: 3\r\n",
    )
    .await?;
    let Some(_version) = lines.next_line().await? else {
        return Ok(());
    };
    match mode {
        Mode::WhoisText => {
            w.write_all(b"Whois++ server: unrecognized command\r\n")
                .await?;
            return Ok(());
        }
        Mode::Refuses => {
            w.write_all(b"% 500 Version not supported\r\n").await?;
            return Ok(());
        }
        Mode::Cip => w.write_all(b"% 300  CIPv3 OK!\r\n").await?,
    }
    loop {
        let mut request = String::new();
        loop {
            match lines.next_line().await? {
                None => {
                    let _ = w.write_all(b"% 222 Connection closing\r\n").await;
                    return Ok(());
                }
                Some(l) if l.trim_end() == "." => break,
                Some(l) => {
                    request.push_str(&l);
                    request.push('\n');
                }
            }
        }
        if request.to_ascii_lowercase().contains("index.cmd.poll") {
            polls.fetch_add(1, Ordering::SeqCst);
            w.write_all(b"% 201 Poll results follow\r\n").await?;
            w.write_all(answer.as_bytes()).await?;
        } else {
            w.write_all(b"% 200 OK\r\n").await?;
        }
    }
}

// ---- tests ---------------------------------------------------------------------------

use std::time::{Duration, SystemTime};

use cip_proto::tagged::{Record, TaggedIndex};

use crate::harness::{NodeSpec, TestNode, eventually};

const LEGACY: &str = "1.3.6.1.4.1.99999.71";
const SOIF_LEAF: &str = "1.3.6.1.4.1.99999.72";
const MID: &str = "1.3.6.1.4.1.99999.73";
const ROOT: &str = "1.3.6.1.4.1.99999.74";

/// A tagged total of DOCUMENT records, one per author.
fn tagged_authors(authors: &[&str]) -> String {
    let records = authors.iter().enumerate().map(|(i, a)| Record {
        tag: i as u64 + 1,
        template: "DOCUMENT".into(),
        attributes: vec![("Author".into(), (*a).to_owned())],
    });
    let t = TaggedIndex::from_records(records, 855_938_804).unwrap();
    String::from_utf8(t.to_bytes())
        .unwrap()
        .trim_end()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_tagged_leaf_is_referred_from_the_root_alongside_soif_leaves() {
    let legacy = LegacyPeer::start(
        Mode::Cip,
        LEGACY,
        tagged_authors(&["Garcia", "Garcia", "Okafor"]),
    )
    .await;
    let soif = TestNode::start(NodeSpec::new(SOIF_LEAF, &["Garcia", "Becker"])).await;
    let mid = TestNode::start(
        NodeSpec::new(MID, &[])
            .peer_at("legacy", legacy.addr, &["poll"], None)
            .peer("soif", &soif, &["poll"]),
    )
    .await;
    mid.wait_for("both leaves", |s| s.hints_accepted >= 2).await;
    assert!(legacy.polls.load(Ordering::SeqCst) >= 1);
    // The legacy leaf's records, counted by their tags.
    let at_mid = mid.query("Author=Garcia").await;
    let legacy_ref = at_mid
        .referrals
        .iter()
        .find(|r| r.dsi == LEGACY)
        .expect("mid refers to the legacy leaf");
    assert_eq!((legacy_ref.count, legacy_ref.total), (2, 3), "{at_mid:?}");
    assert_eq!(legacy_ref.base_uri, ["whois://legacy.example:43/"]);
    assert!(at_mid.referrals.iter().any(|r| r.dsi == SOIF_LEAF));
    assert_eq!(
        mid.daemon.node().index_state().learned("legacy"),
        Some(cipd::pipeline::index_types::IndexKind::Tagged)
    );
    // The mid's own aggregate leaves the legacy leaf out: its base-uri scheme (whois) is
    // not the mid's (http), RFC 2651 §3.2.3.
    // A root that polls the legacy leaf and the mid refers to both, each with its count.
    let root = TestNode::start(
        NodeSpec::new(ROOT, &[])
            .peer_at("legacy", legacy.addr, &["poll"], Some(LEGACY))
            .peer("mid", &mid, &["poll"]),
    )
    .await;
    root.wait_for("both", |s| s.hints_accepted >= 2).await;
    let at_root = root.query("Author=Garcia").await;
    let got: Vec<(&str, u64)> = at_root
        .referrals
        .iter()
        .map(|r| (r.dsi.as_str(), r.count))
        .collect();
    assert_eq!(got, [(LEGACY, 2), (MID, 1)], "{at_root:?}");
    let okafor = root.query("Author=Okafor").await;
    assert_eq!(okafor.referrals.len(), 1);
    assert_eq!(okafor.referrals[0].dsi, LEGACY);
    assert_eq!(root.query("Author=Becker").await.referrals[0].dsi, MID);
    for n in [root, mid, soif] {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whois_only_peers_are_recorded_and_not_polled_every_interval() {
    let text = LegacyPeer::start(Mode::WhoisText, LEGACY, String::new()).await;
    let refuses = LegacyPeer::start(Mode::Refuses, LEGACY, String::new()).await;
    let mut spec = NodeSpec::new(MID, &[])
        .peer_at("text", text.addr, &["poll"], None)
        .peer_at("refuses", refuses.addr, &["poll"], None);
    spec.poll_interval = "50ms";
    let hub = TestNode::start(spec).await;
    let node = hub.daemon.node();
    eventually("both recorded as not CIPv3", || {
        node.peer_states().iter().all(|p| {
            p.last_error
                .as_deref()
                .is_some_and(|e| e.contains("recorded as not CIPv3"))
        })
    })
    .await;
    for p in node.peer_states() {
        let next = p.next_attempt.expect("a next attempt");
        let wait = next.duration_since(SystemTime::now()).unwrap_or_default();
        assert!(
            wait > Duration::from_secs(1800),
            "{}: next try in {wait:?}",
            p.name
        );
    }
    assert_eq!(
        text.connections.load(Ordering::SeqCst),
        1,
        "polled once, not every 50 ms"
    );
    assert_eq!(refuses.connections.load(Ordering::SeqCst), 1);
    hub.stop().await;
}

/// A legacy gatherer polls us for a tagged index: our local collections, a record per
/// object, with tags that stay the same from poll to poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_gatherer_polls_us_for_a_tagged_index() {
    let node = TestNode::start(NodeSpec::new(SOIF_LEAF, &["Garcia", "Garcia", "Becker"])).await;
    let poll = |node_addr| async move {
        let stream = tokio::net::TcpStream::connect(node_addr).await.unwrap();
        let (r, mut w) = stream.into_split();
        let mut lines = BufReader::new(r).lines();
        let banner = lines.next_line().await.unwrap().unwrap();
        assert!(banner.contains("220"), "{banner}");
        w.write_all(b"# CIP-Version: 3\r\n").await.unwrap();
        let ok = lines.next_line().await.unwrap().unwrap();
        assert!(ok.contains("300"), "{ok}");
        w.write_all(
            b"Mime-Version: 1.0\r\nContent-Type: application/index.cmd.poll; \
              type=\"application/index.obj.tagged\"; dsi=1.2.3.4.5\r\n\r\n.\r\n",
        )
        .await
        .unwrap();
        let mut out = String::new();
        loop {
            let l = lines.next_line().await.unwrap().unwrap();
            if l == "." {
                break;
            }
            out.push_str(&l);
            out.push('\n');
        }
        out
    };
    let first = poll(node.cip_addr()).await;
    assert!(first.starts_with("% 201"), "{first}");
    let start = first.find("version:").expect("a tagged payload");
    let end = first[start..]
        .find("\n--")
        .map_or(first.len(), |i| start + i);
    let t = cip_proto::tagged::parse(&first.as_bytes()[start..end]).unwrap();
    assert_eq!(t.record_count(), 3);
    let counts = t.value_counts();
    let authors = counts
        .iter()
        .find(|(tpl, a, _)| tpl == "DOCUMENT" && a.eq_ignore_ascii_case("Author"))
        .expect("DOCUMENT Author");
    assert_eq!(
        authors.2,
        vec![("Becker".to_owned(), 1), ("Garcia".to_owned(), 2)]
    );
    let second = poll(node.cip_addr()).await;
    let info = |s: &str| {
        let a = s.find("BEGIN Index-Info").unwrap();
        let b = s.find("END Index-Info").unwrap();
        s[a..b].to_owned()
    };
    assert_eq!(info(&first), info(&second), "tags are stable across polls");
    node.stop().await;
}
