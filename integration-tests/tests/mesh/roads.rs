//! Legacy Whois++ meshes with ROADS v2.3, both ways, from bytes the real programs sent and
//! expected (`tests/fixtures/roads/`, recorded on loopback; PROTOCOL.md, "Legacy peers"):
//!
//! * `RecordedWppd` answers polls as ROADS' `wppd.pl` does (`lib/ROADS/CIPv3.pm`), with its
//!   recorded answers: `% 500`-free version line, quoted `type`/`dsi` required, a `200`
//!   naming its DSI for any other, a `200` without output for the short type, the `201`
//!   multipart for `application/index.obj.tagged`, then it closes.
//! * `wig_centroid` reads a poll answer as ROADS' gatherer (`wig.pl`, `ReadCIPv3Response`)
//!   does, quirks included, and says which `template:attribute:term` it would store.
//! * `wppc` and `traverse` query and follow `# SERVER-TO-ASK` as ROADS' `WPPC.pm` and
//!   `MeshTraversal.pm` do.
//!
//! `real_roads_both_ways` runs the real programs when `ROADS_DIR` names an installed copy.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::harness::{NodeSpec, TestNode, WAIT, eventually};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/roads");

/// The DSI ROADS computed for the recorded server (`1.3.6.1.4.1.1828.10.<ip>.<port>`).
const ROADS_DSI: &str = "1.3.6.1.4.1.1828.10.127.0.0.1.18237";

pub(crate) fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

/// The bytes of a recorded answer after its first `skip` lines.
pub(crate) fn after_lines(bytes: &[u8], skip: usize) -> Vec<u8> {
    let mut rest = bytes;
    for _ in 0..skip {
        let nl = rest.iter().position(|b| *b == b'\n').unwrap();
        rest = &rest[nl + 1..];
    }
    rest.to_vec()
}

/// A stand-in for ROADS' `wppd.pl` built from its recorded answers.
struct RecordedWppd {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    token: CancellationToken,
}

impl Drop for RecordedWppd {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

impl RecordedWppd {
    async fn start() -> Self {
        let full = fixture("wppd-poll-full-type.s2c");
        let banner = full[..full.iter().position(|b| *b == b'\n').unwrap() + 1].to_vec();
        // After the banner and `% 300  CIPv3 OK!`: the answer itself.
        let answers = Arc::new([
            after_lines(&full, 2),
            after_lines(&fixture("wppd-poll-short-type.s2c"), 2),
            after_lines(&fixture("wppd-poll-wrong-dsi.s2c"), 2),
        ]);
        let (addr, connections, token) = crate::harness::fake_server(move |stream| {
            let (banner, answers) = (banner.clone(), answers.clone());
            async move {
                let _ = serve_like_wppd(stream, &banner, &answers).await;
            }
        })
        .await;
        Self {
            addr,
            connections,
            token,
        }
    }
}

/// `wppd.pl` and `CIPv3PollHandler`: banner, version, a request up to `.\r\n`, one answer,
/// close (no `% 203`).
pub(crate) async fn serve_like_wppd(
    stream: TcpStream,
    banner: &[u8],
    answers: &[Vec<u8>; 3],
) -> std::io::Result<()> {
    serve_wppd(stream, banner, answers, ROADS_DSI, None).await
}

/// What a [`serve_wppd`] answers a Whois++ query with (after the banner), and where it
/// keeps the query lines it was sent.
pub(crate) type WhoisReplay<'a> = (&'a [u8], &'a std::sync::Mutex<Vec<String>>);

/// As [`serve_like_wppd`] for a server whose DSI is `dsi`; with `query`, a first line
/// that is not CIP's version line is a Whois++ query, answered as `wppd` does on its one
/// port.
pub(crate) async fn serve_wppd(
    stream: TcpStream,
    banner: &[u8],
    answers: &[Vec<u8>; 3],
    dsi: &str,
    query: Option<WhoisReplay<'_>>,
) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r);
    w.write_all(banner).await?;
    let mut line = String::new();
    lines.read_line(&mut line).await?;
    if line.trim_end() != "# CIP-Version: 3" {
        if let Some((answer, sent)) = query {
            sent.lock().unwrap().push(line.trim_end().to_owned());
            w.write_all(answer).await?;
            return w.shutdown().await;
        }
        return w.write_all(b"% 500 CIP Version not supported\r\n").await;
    }
    w.write_all(b"% 300  CIPv3 OK!\r\n").await?;
    let mut params = String::new();
    let mut more = false;
    loop {
        line.clear();
        if lines.read_line(&mut line).await? == 0 || line == ".\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(rest) = lower.trim_start().strip_prefix("content-type:") {
            let rest = rest.trim_start();
            let rest = rest
                .split_once(';')
                .map_or("", |(_, p)| p.trim_start_matches(';'));
            params = rest.trim_end().to_owned();
            more = params.ends_with(';');
        } else if more {
            params.push_str(line.trim_end());
            more = params.ends_with(';');
        }
    }
    let quoted = |name: &str| {
        let at = params.find(&format!("{name}=\""))? + name.len() + 2;
        let end = params[at..].find('"')?;
        Some(params[at..at + end].to_owned())
    };
    let answer: &[u8] = match (quoted("type"), quoted("dsi")) {
        (Some(_), Some(asked)) if asked != dsi => &answers[2],
        (Some(t), Some(_)) if t == "application/index.obj.tagged" => &answers[0],
        (Some(_), Some(_)) => &answers[1],
        _ => b"% 502 Request is missing required CIP attributes\r\n",
    };
    w.write_all(answer).await?;
    w.shutdown().await
}

/// What ROADS' gatherer stores of a poll answer: `template:attribute:term` lines (its
/// `centroids.idx`), read the way `ReadCIPv3Response` and `ProcessTaggedIndexObject`
/// read, including their quirks: a `% 201` first, the boundary as the rest of the
/// `boundary=` line, parts other than `application/index.obj.tagged` skipped, the template
/// only from a lower-case `template-type:` line, index lines only as `attr:1,2/value` and
/// `-1,2/value`, and each Index-Info's last attribute never stored.
fn wig_centroid(answer: &str) -> Result<BTreeSet<String>, String> {
    let mut lines = answer.split_inclusive('\n');
    let first = lines.next().ok_or("no answer")?;
    if !first.contains("% 201") {
        return Err(format!("wig.pl gives up: first line {first:?}"));
    }
    let mut boundary = String::new();
    for l in lines.by_ref() {
        if !boundary.is_empty() && l.trim_end() == format!("--{boundary}") {
            break;
        }
        let lower = l.to_ascii_lowercase();
        if let Some(at) = lower.find("content-type: multipart/mixed; boundary=") {
            boundary = l[at + "content-type: multipart/mixed; boundary=".len()..]
                .trim_end_matches(['\r', '\n'])
                .to_owned();
        }
    }
    if boundary.is_empty() {
        return Err("wig.pl never finds the boundary".into());
    }
    let mut stored = BTreeSet::new();
    let (mut content_type, mut more, mut in_schema, mut in_index, mut skip) =
        (String::new(), false, false, false, false);
    let mut block: Vec<String> = Vec::new();
    let mut template = "UNKNOWN".to_owned();
    let mut closed = false;
    for l in lines {
        let line = l.trim_end_matches(['\r', '\n']);
        if line.starts_with(&format!("--{boundary}")) {
            if line == format!("--{boundary}--") {
                closed = true;
                break;
            }
            (content_type, more, in_schema, in_index, skip) =
                (String::new(), false, false, false, false);
            continue;
        }
        if skip
            || line
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("mime-version")
        {
            continue;
        }
        if let Some(rest) = strip_prefix_ignore_case(line, "Content-type: ") {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '/'))
                .unwrap_or(rest.len());
            content_type = rest[..end].to_owned();
            more = rest.trim_end().ends_with(';');
            continue;
        }
        if more {
            more = line.trim_end().ends_with(';');
            continue;
        }
        if content_type != "application/index.obj.tagged" {
            skip = true;
            continue;
        }
        if !in_schema && !in_index {
            if let Some(v) = line.strip_prefix("version:") {
                if !v.starts_with(char::is_whitespace) || v.trim() != "x-tagged-index-1" {
                    skip = true;
                }
            } else if line.starts_with("BEGIN IO-Schema") {
                in_schema = true;
            }
        } else if in_schema {
            if line.starts_with("END IO-Schema") {
                (in_schema, in_index) = (false, true);
                template = "UNKNOWN".into();
                block.clear();
            }
        } else if line.starts_with("END Index-Info") {
            in_index = false;
            process_block(&block, &template, &mut stored);
        } else if !line.starts_with("BEGIN Index-Info") {
            if let Some(rest) = line.strip_prefix("template-type:")
                && let Some((tags, t)) = rest.split_once('/')
                && tags.chars().all(|c| c.is_ascii_digit() || c == ',')
            {
                template = t.chars().take_while(char::is_ascii_alphabetic).collect();
            }
            block.push(line.to_owned());
        }
    }
    if !closed {
        return Err("wig.pl never sees the close delimiter (it loops for ever)".into());
    }
    Ok(stored)
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    s.get(..prefix.len())
        .filter(|p| p.eq_ignore_ascii_case(prefix))
        .map(|_| &s[prefix.len()..])
}

/// `ProcessTaggedIndexObject`: a field's terms are stored when the next field starts.
fn process_block(block: &[String], template: &str, stored: &mut BTreeSet<String>) {
    let (mut field, mut terms) = (String::new(), Vec::new());
    let tags_ok = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == ',');
    for line in block {
        if let Some(rest) = line.strip_prefix('-') {
            if let Some((tags, v)) = rest.split_once('/')
                && tags_ok(tags)
            {
                terms.push(v.to_owned());
            }
        } else if let Some((head, value)) = line.split_once('/')
            && let Some((name, tags)) = head.rsplit_once(':')
            && tags_ok(tags)
        {
            for t in terms.drain(..) {
                stored.insert(format!("{template}:{field}:{t}"));
            }
            field = name.to_owned();
            terms.push(value.to_owned());
        }
    }
}

/// A record or referral as ROADS' `WPPC.pm` files it.
#[derive(Debug, Clone)]
enum Hit {
    Record {
        server: String,
        template: String,
        text: String,
    },
    Referral {
        server: String,
        host: String,
        port: u16,
    },
}

/// `wppc($host, $port, $query)`: sends the query at once, reads to `% 203` or the end.
async fn wppc(addr: SocketAddr, query: &str) -> Vec<Hit> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("{query}\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    tokio::time::timeout(WAIT, stream.read_to_string(&mut text))
        .await
        .expect("the server ends its answer")
        .unwrap();
    let mut hits = Vec::new();
    let mut lines = text.lines().map(|l| l.trim_end_matches('\r'));
    while let Some(line) = lines.next() {
        if line.starts_with("% 203") {
            break;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["#", "FULL", template, server, _handle, ..] => {
                let mut body = String::new();
                for l in lines.by_ref() {
                    if l.starts_with("# END") {
                        break;
                    }
                    if let Some(rest) = l.strip_prefix('+') {
                        body.push_str(rest);
                    } else if let Some(rest) = l.strip_prefix('-') {
                        body.push(' ');
                        body.push_str(rest);
                    } else if !l.trim().is_empty() {
                        body.push('\n');
                        body.push_str(l);
                    }
                }
                hits.push(Hit::Record {
                    server: (*server).to_owned(),
                    template: (*template).to_owned(),
                    text: body,
                });
            }
            ["#", "SERVER-TO-ASK", server] => {
                // MeshTraversal: SERVER-HANDLE, HOST-NAME, HOST-PORT (default 63).
                let (mut host, mut port) = (String::new(), 63);
                for l in lines.by_ref() {
                    if l.starts_with("# END") {
                        break;
                    }
                    let t = l.trim_start();
                    if let Some(v) = strip_prefix_ignore_case(t, "Host-Name:") {
                        host = v.trim().to_owned();
                    } else if let Some(v) = strip_prefix_ignore_case(t, "Host-Port:") {
                        port = v.trim().parse().unwrap();
                    }
                }
                hits.push(Hit::Referral {
                    server: (*server).to_owned(),
                    host,
                    port,
                });
            }
            _ => {}
        }
    }
    hits
}

/// `traversemesh`: follows every referral once (by server handle), up to `max` servers.
async fn traverse(addr: SocketAddr, query: &str, max: usize) -> Vec<Hit> {
    let mut all = wppc(addr, query).await;
    let mut asked = BTreeSet::new();
    let mut at = 0;
    while at < all.len() && asked.len() < max {
        if let Hit::Referral { server, host, port } = all[at].clone()
            && asked.insert(server)
        {
            let to: SocketAddr = format!("{host}:{port}").parse().unwrap();
            all.extend(wppc(to, query).await);
        }
        at += 1;
    }
    all
}

fn whoispp_addr(node: &TestNode) -> SocketAddr {
    node.daemon.listeners().whoispp[0]
}

/// cipd polls a ROADS wppd: the first poll learns its DSI (from its 200), and the type
/// spelling it answers (the media type, after the short type got a 200 without output),
/// each on a new connection since wppd closes after every answer; the next poll needs one
/// connection. ROADS' values are then referred to ROADS' DSI and whoispp base-uri.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn we_poll_roads_and_refer_its_values() {
    let wppd = RecordedWppd::start().await;
    let hub = TestNode::start(NodeSpec::new("1.3.6.1.4.1.99999.30", &["Garcia"]).peer_at(
        "roads",
        wppd.addr,
        &["poll"],
        None,
    ))
    .await;
    hub.wait_for("roads' index", |s| s.table_peers >= 1).await;
    let answer = hub.query("DOCUMENT:Keywords=centroid").await;
    let r = &answer.referrals[0];
    assert_eq!(r.dsi, ROADS_DSI);
    assert_eq!(r.base_uri, ["whoispp://127.0.0.1:18237/"]);
    // ROADS writes attribute names in lower case and the template as a value.
    assert_eq!(
        hub.query("document:author-name=knight").await.referrals[0].dsi,
        ROADS_DSI
    );
    let node = hub.daemon.node();
    let peer = node
        .peer_states()
        .into_iter()
        .find(|p| p.name == "roads")
        .unwrap();
    assert_eq!(
        peer.index_type.as_deref(),
        Some("application/index.obj.tagged")
    );
    assert_eq!(peer.dsi.as_deref(), Some(ROADS_DSI));
    // The next poll asks the learned way at once: one connection.
    let before = wppd.connections.load(Ordering::SeqCst);
    let polled = hub.daemon.node().status_snapshot().polls_ok;
    node.poll_now("roads").unwrap();
    hub.wait_for("a second poll", |s| s.polls_ok > polled).await;
    assert_eq!(wppd.connections.load(Ordering::SeqCst), before + 1);
    hub.stop().await;
}

/// ROADS' gatherer polls us (its recorded request, byte for byte) on the Whois++ port and
/// would store every exported attribute of ours under the right template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roads_gatherer_reads_our_tagged_index() {
    let mut spec = NodeSpec::new("1.3.6.1.4.1.99999.31", &["Samuel Okafor", "Jon Knight"]);
    spec.listen_extra = "whoispp = [\"127.0.0.1:0\"]".into();
    let node = TestNode::start(spec).await;
    let request = fixture("wig-poll.c2s");
    let (version, poll) = request.split_at(request.iter().position(|b| *b == b'\n').unwrap() + 1);
    let mut stream = TcpStream::connect(whoispp_addr(&node)).await.unwrap();
    let (r, mut w) = stream.split();
    let mut r = BufReader::new(r);
    // wig.pl: read the banner, send the version, read one line, send the poll.
    let mut banner = String::new();
    r.read_line(&mut banner).await.unwrap();
    assert!(banner.starts_with("% 220"), "{banner}");
    w.write_all(version).await.unwrap();
    let mut ok = String::new();
    r.read_line(&mut ok).await.unwrap();
    assert!(!ok.starts_with("% 500"), "{ok}");
    w.write_all(poll).await.unwrap();
    let mut answer = String::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).await.unwrap() == 0 || l == ".\r\n" {
            break;
        }
        answer.push_str(&l);
    }
    let stored = wig_centroid(&answer).unwrap_or_else(|e| panic!("{e}\n{answer}"));
    for term in [
        "DOCUMENT:Author:Okafor",
        "DOCUMENT:Author:Samuel",
        "DOCUMENT:Author:Knight",
        "DOCUMENT:Title:Report",
        "DOCUMENT:Title:Okafor",
    ] {
        assert!(
            stored.contains(term),
            "{term} not stored: {stored:?}\n{answer}"
        );
    }
    assert!(
        stored.iter().all(|t| !t.starts_with("UNKNOWN:")),
        "{stored:?}"
    );
    node.stop().await;
}

/// Whois++ clients (ROADS' WPPC and MeshTraversal) query a hub: its own records come back
/// as `# FULL`, and a leaf's and ROADS' values as `# SERVER-TO-ASK` with their Whois++
/// address; following the leaf's referral reaches the leaf's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whois_clients_follow_referrals_across_the_mesh() {
    let wppd = RecordedWppd::start().await;
    let mut leaf = NodeSpec::new("1.3.6.1.4.1.99999.32", &["Samuel Okafor"]);
    leaf.listen_extra = "whoispp = [\"127.0.0.1:0\"]".into();
    let leaf = TestNode::start(leaf).await;
    let mut hub = NodeSpec::new("1.3.6.1.4.1.99999.33", &["Maria Lindqvist"])
        .peer("leaf", &leaf, &["poll"])
        .peer_at("roads", wppd.addr, &["poll"], None);
    hub.listen_extra = "whoispp = [\"127.0.0.1:0\"]".into();
    let hub = TestNode::start(hub).await;
    hub.wait_for("both peers", |s| s.table_peers >= 2).await;
    let at = whoispp_addr(&hub);

    let own = wppc(at, "author=lindqvist").await;
    let [
        Hit::Record {
            server,
            template,
            text,
        },
    ] = own.as_slice()
    else {
        panic!("{own:?}")
    };
    assert_eq!(server, "1.3.6.1.4.1.99999.33");
    assert_eq!(template, "DOCUMENT");
    assert!(text.contains("Author: Maria Lindqvist"), "{text}");

    let followed = traverse(at, "okafor", 5).await;
    let leaf_addr = whoispp_addr(&leaf);
    assert!(
        followed
            .iter()
            .any(|h| matches!(h, Hit::Referral { server, port, .. }
            if server == "1.3.6.1.4.1.99999.32" && *port == leaf_addr.port())),
        "{followed:?}"
    );
    assert!(
        followed
            .iter()
            .any(|h| matches!(h, Hit::Record { server, text, .. }
            if server == "1.3.6.1.4.1.99999.32" && text.contains("Samuel Okafor"))),
        "{followed:?}"
    );

    let roads = wppc(at, "keywords=centroid").await;
    assert!(
        roads
            .iter()
            .any(|h| matches!(h, Hit::Referral { server, host, port }
            if server == ROADS_DSI && host == "127.0.0.1" && *port == 18237)),
        "{roads:?}"
    );
    // `hold` keeps the connection for the next query; the end of input ends it.
    let s = TcpStream::connect(at).await.unwrap();
    let (r, mut w) = s.into_split();
    let mut r = BufReader::new(r);
    w.write_all(b"author=lindqvist:hold\r\n").await.unwrap();
    let mut held = String::new();
    loop {
        let mut l = String::new();
        assert!(
            r.read_line(&mut l).await.unwrap() > 0,
            "closed while held: {held}"
        );
        held.push_str(&l);
        if l.starts_with("% 226") {
            break;
        }
    }
    assert!(held.contains("Author: Maria Lindqvist"), "{held}");
    w.write_all(b"version\r\n").await.unwrap();
    w.shutdown().await.unwrap();
    let mut rest = String::new();
    r.read_to_string(&mut rest).await.unwrap();
    assert!(rest.contains("# FULL VERSION"), "{rest}");
    assert!(rest.ends_with("% 203 Bye\r\n"), "{rest}");

    // A malformed query says where.
    let mut s = TcpStream::connect(at).await.unwrap();
    s.write_all(b"title=x and\r\n").await.unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    assert!(text.contains("% 500 Syntax error: column"), "{text}");
    assert!(text.ends_with("% 203 Bye\r\n"), "{text}");
    hub.stop().await;
    leaf.stop().await;
}

/// The real ROADS v2.3, when `ROADS_DIR` names an installed copy (its `lib/ROADS.pm`
/// written, compile fixes applied; `integration-tests/legacy/README.md`): cipd polls its
/// wppd and refers a ROADS value; its wig.pl polls cipd (twice) and its wppd then refers
/// a cipd value to cipd's Whois++ port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_roads_both_ways() {
    let Some(dir) = std::env::var_os("ROADS_DIR").map(std::path::PathBuf::from) else {
        eprintln!("skipped: set ROADS_DIR to an installed ROADS v2.3 to run it");
        return;
    };
    let roads_pm = std::fs::read_to_string(dir.join("lib/ROADS.pm")).unwrap();
    let setting = |name: &str| {
        roads_pm
            .lines()
            .find_map(|l| {
                let l = l.trim();
                let rest = l.strip_prefix(&format!("${name}"))?.trim_start();
                let v = rest.strip_prefix('=')?.trim().trim_end_matches(';').trim();
                Some(v.trim_matches('"').trim_matches('\'').to_owned())
            })
            .unwrap_or_else(|| panic!("no ${name} in lib/ROADS.pm"))
    };
    let port: u16 = setting("WHOISPortNumber").parse().unwrap();
    let wppd: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let started = if TcpStream::connect(wppd).await.is_ok() {
        false
    } else {
        let status = std::process::Command::new("perl")
            .arg("bin/wppd.pl")
            .current_dir(&dir)
            .status()
            .unwrap();
        assert!(status.success(), "wppd.pl did not start");
        eventually("wppd listening", || {
            std::net::TcpStream::connect(wppd).is_ok()
        })
        .await;
        true
    };
    let roads_dsi = format!("1.3.6.1.4.1.1828.10.127.0.0.1.{port}");

    let mut spec = NodeSpec::new("1.3.6.1.4.1.99999.34", &["Samuel Okafor"]).peer_at(
        "roads",
        wppd,
        &["poll"],
        None,
    );
    spec.listen_extra = "whoispp = [\"127.0.0.1:0\"]".into();
    let node = TestNode::start(spec).await;
    node.wait_for("roads' index", |s| s.table_peers >= 1).await;
    let n = node.daemon.node();
    let dsi = cip_proto::Dsi::new(&roads_dsi).unwrap();
    let row = n
        .table()
        .entries(None, Some(&dsi), None, 1)
        .pop()
        .expect("a value of ROADS'");
    let q = format!(
        "{}:{}={}",
        row.attribute.template,
        row.attribute.attribute,
        String::from_utf8_lossy(&row.value)
    );
    assert_eq!(node.query(&q).await.referrals[0].dsi, roads_dsi, "{q}");
    let polled = n.status_snapshot().polls_ok;
    n.poll_now("roads").unwrap();
    node.wait_for("a second poll of roads", |s| s.polls_ok > polled)
        .await;

    let ours = "1.3.6.1.4.1.99999.34";
    let spec_file = dir.join("config/wig").join(ours);
    let whois = whoispp_addr(&node);
    std::fs::write(
        &spec_file,
        format!(
            "CIPv3: yes\nHost-Name: 127.0.0.1\nHost-Port: {}\nDSI: {ours}\n",
            whois.port()
        ),
    )
    .unwrap();
    for _ in 0..2 {
        let wig_dir = dir.clone();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("timeout")
                .args(["60", "perl", "bin/wig.pl", ours])
                .current_dir(wig_dir)
                .output()
        });
        let out = out.await.unwrap().unwrap();
        assert!(out.status.success(), "{out:?}");
        let idx =
            std::fs::read_to_string(dir.join("guts/wig").join(ours).join("centroids.idx")).unwrap();
        assert!(idx.contains("DOCUMENT:Author:Okafor"), "{idx}");
    }
    // wppd looks referral words up as lower case.
    let hits = wppc(wppd, "okafor").await;
    let _ = std::fs::remove_file(&spec_file);
    let _ = std::fs::remove_dir_all(dir.join("guts/wig").join(ours));
    if started && let Ok(pid) = std::fs::read_to_string(dir.join("guts/wppd.pid")) {
        let _ = std::process::Command::new("kill").arg(pid.trim()).status();
    }
    assert!(
        hits.iter()
            .any(|h| matches!(h, Hit::Referral { server, port, .. }
            if server == ours && *port == whois.port())),
        "{hits:?}"
    );
    node.stop().await;
}
