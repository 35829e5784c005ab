//! Feeds over the real web. An https front with a private CA serves a Hina-Di antenna file
//! as a `.di.gz` behind a redirect, and passes RDM requests (behind a `307`) to an RDM server,
//! gzip-encoding its answers. A puller trusts the CA through `[http_client] ca`, pulls both,
//! and the root of the mesh above it refers to it. A CIP-over-HTTP peer is polled over
//! https with a client certificate.

use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cipd::sys::http::{FetchLimits, HttpClient, header};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{NodeSpec, TestNode, fake_server};
use crate::hinadi::{AGENT, ANTENNA};

const RDM_SERVER: &str = "1.3.6.1.4.1.99999.71";
const PULLER: &str = "1.3.6.1.4.1.99999.72";
const ROOT: &str = "1.3.6.1.4.1.99999.73";
const HTTPS_LEAF: &str = "1.3.6.1.4.1.99999.74";

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn p(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

/// A CA and certificates for `names` (each for 127.0.0.1), made by `cipctl tls`.
fn pki(dir: &Path, names: &[&str]) {
    use cipd::ctl::tls::{CaArgs, CertArgs, make_ca, make_cert};
    make_ca(&CaArgs {
        out: dir.join("ca"),
        name: "test web CA".into(),
        days: 30,
    })
    .unwrap();
    for name in names {
        make_cert(&CertArgs {
            ca: dir.join("ca"),
            out: dir.join("certs"),
            name: (*name).into(),
            dns: vec![],
            ips: vec!["127.0.0.1".parse().unwrap()],
            days: 30,
        })
        .unwrap();
    }
}

/// One request as the front read it.
struct Asked {
    method: String,
    path: String,
    accept_encoding: String,
    body: Vec<u8>,
}

async fn read_request<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<Asked> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await.ok()? == 0 || head.len() > 65536 {
            return None;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.lines();
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let header = |name: &str| {
        text.lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let length: usize = header("content-length").parse().unwrap_or(0);
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).await.ok()?;
    Some(Asked {
        method,
        path,
        accept_encoding: header("accept-encoding"),
        body,
    })
}

/// The https front: see the module doc. Every request line it answered is logged with
/// the `Accept-Encoding` it came with.
async fn front(
    dir: &Path,
    antenna_gz: Vec<u8>,
    rdm_upstream: String,
) -> (
    String,
    Arc<Mutex<Vec<String>>>,
    tokio_util::sync::CancellationToken,
) {
    let tls = cipd::sys::tls::server_config(
        Path::new(&p(&dir.join("certs"), "front.test.pem")),
        Path::new(&p(&dir.join("certs"), "front.test.key")),
        None,
    )
    .unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    let antenna = Bytes::from(antenna_gz);
    let (addr, _, token) = fake_server(move |tcp| {
        let (tls, log, antenna, upstream) = (
            tls.clone(),
            seen.clone(),
            antenna.clone(),
            rdm_upstream.clone(),
        );
        async move {
            let Ok(mut s) = tokio_rustls::TlsAcceptor::from(tls).accept(tcp).await else {
                return;
            };
            let Some(asked) = read_request(&mut s).await else {
                return;
            };
            log.lock().unwrap().push(format!(
                "{} {} [{}]",
                asked.method, asked.path, asked.accept_encoding
            ));
            let (status, mut headers, body): (&str, Vec<(String, String)>, Vec<u8>) =
                match (asked.method.as_str(), asked.path.as_str()) {
                    ("GET", "/antenna") => (
                        "302 Found",
                        vec![("Location".into(), "/files/antenna.di.gz".into())],
                        Vec::new(),
                    ),
                    ("GET", "/files/antenna.di.gz") => (
                        "200 OK",
                        vec![("Content-Type".into(), "application/gzip".into())],
                        antenna.to_vec(),
                    ),
                    ("POST", "/rdm") => (
                        "307 Temporary Redirect",
                        vec![("Location".into(), "/rdm/v2".into())],
                        Vec::new(),
                    ),
                    ("POST", "/rdm/v2") => {
                        let mut h = header::HeaderMap::new();
                        h.insert(
                            header::CONTENT_TYPE,
                            header::HeaderValue::from_static(cip_proto::rdm::CONTENT_TYPE),
                        );
                        let a = web(None)
                            .post(&upstream, h, Bytes::from(asked.body), LIMITS)
                            .await
                            .unwrap();
                        let mut out = vec![(
                            "Content-Type".to_owned(),
                            a.content_type.clone().unwrap_or_default(),
                        )];
                        if let Some(d) = &a.date {
                            out.push(("Date".into(), d.clone()));
                        }
                        let body = if asked.accept_encoding.contains("gzip") {
                            out.push(("Content-Encoding".into(), "gzip".into()));
                            gzip(&a.body)
                        } else {
                            a.body.to_vec()
                        };
                        ("200 OK", out, body)
                    }
                    _ => ("404 Not Found", Vec::new(), Vec::new()),
                };
            headers.push(("Content-Length".into(), body.len().to_string()));
            headers.push(("Connection".into(), "close".into()));
            let mut out = format!("HTTP/1.1 {status}\r\n");
            for (n, v) in headers {
                out.push_str(&format!("{n}: {v}\r\n"));
            }
            out.push_str("\r\n");
            let _ = s.write_all(out.as_bytes()).await;
            let _ = s.write_all(&body).await;
            let _ = s.shutdown().await;
        }
    })
    .await;
    (format!("https://127.0.0.1:{}", addr.port()), log, token)
}

const LIMITS: FetchLimits = FetchLimits {
    timeout: Duration::from_secs(10),
    max_bytes: 16 << 20,
};

fn web(ca: Option<&Path>) -> HttpClient {
    cipd::model::config::HttpClientConfig::default()
        .client(ca, None)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_antenna_file_and_an_rdm_server_behind_https_are_pulled_and_referred() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    pki(d, &["front.test"]);
    let ca = p(&d.join("ca"), "ca.pem");
    let rdm = TestNode::start(NodeSpec::new(RDM_SERVER, &["Garcia", "Okafor", "Becker"])).await;
    let (euc, _, _) = encoding_rs::EUC_JP.encode(ANTENNA);
    let (base, log, front_token) =
        front(d, gzip(&euc), format!("{}/rdm/incoming", rdm.http_url())).await;

    let mut spec = NodeSpec::new(PULLER, &[]);
    spec.export = vec!["HINA:Keyword", "HINA:Title"];
    spec.extra = format!(
        "[[collection]]\nname = \"antenna\"\ntype = \"hinadi\"\nurl = \"{base}/antenna\"\n\
         interval = \"200ms\"\n\
         [[collection]]\nname = \"partner\"\ntype = \"rdm\"\nurl = \"{base}/rdm\"\n\
         interval = \"200ms\"\n\
         [hinadi]\ntrusted = [{AGENT:?}]\n\
         [http_client]\nca = {ca:?}\nproxy = \"none\"\n"
    );
    let puller = TestNode::start(spec).await;
    // Three antenna blocks and three RDs, and a second round of each (revalidation, since).
    puller
        .wait_for("both feeds", |s| s.local_objects >= 6)
        .await;
    crate::harness::eventually("second pulls", || {
        let page = puller.daemon.node().render_metrics();
        crate::harness::metric(&page, "cipd_hinadi_fetches_total") >= 2.0
            && crate::harness::metric(&page, "cipd_rdm_pulls_total") >= 2.0
    })
    .await;
    let page = puller.daemon.node().render_metrics();
    assert_eq!(
        crate::harness::metric(&page, "cipd_hinadi_fetch_errors_total"),
        0.0
    );
    assert_eq!(
        crate::harness::metric(&page, "cipd_rdm_pull_errors_total"),
        0.0
    );
    let asked = log.lock().unwrap().clone();
    assert!(
        asked
            .iter()
            .any(|l| l.starts_with("GET /files/antenna.di.gz")),
        "{asked:?}"
    );
    assert!(
        asked
            .iter()
            .any(|l| l.starts_with("POST /rdm/v2") && l.contains("gzip")),
        "the RDM answers were asked for gzip: {asked:?}"
    );

    // The root above the puller refers both kinds of query to it; the untrusted block
    // stays out.
    let root = TestNode::start(NodeSpec::new(ROOT, &[]).peer("puller", &puller, &["poll"])).await;
    root.wait_for("the puller's hint", |s| s.hints_accepted >= 1)
        .await;
    for q in [
        "HINA:Keyword=音楽",
        "HINA:Title=山田の日記",
        "Author=Okafor",
    ] {
        let a = root.query(q).await;
        let dsis: Vec<&str> = a.referrals.iter().map(|r| r.dsi.as_str()).collect();
        assert_eq!(dsis, [PULLER], "{q}: {a:?}");
    }

    // Without the CA, the same feed is refused and counted, and says why.
    let err = web(None)
        .get(&format!("{base}/antenna"), None, LIMITS)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    for n in [root, puller, rdm] {
        n.stop().await;
    }
    front_token.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cip_over_http_peer_is_polled_over_https_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    pki(&d, &["leaf.test", "root.test"]);
    let ca = p(&d.join("ca"), "ca.pem");
    let certs = d.join("certs");
    // The leaf serves CIP over HTTP only on https, asking for client certificates.
    let mut leaf_spec = NodeSpec::new(HTTPS_LEAF, &["Garcia", "Okafor"]);
    leaf_spec.listen_extra = format!(
        "https = [{{ addr = \"127.0.0.1:0\", cert = {:?}, key = {:?}, client_ca = {ca:?} }}]\n\
         cip_http = \"/cip\"\n",
        p(&certs, "leaf.test.pem"),
        p(&certs, "leaf.test.key"),
    );
    let leaf = TestNode::start(leaf_spec).await;
    let https = leaf.daemon.https_addr().unwrap();
    let mut spec = NodeSpec::new(ROOT, &[]);
    spec.extra = format!(
        "[[peer]]\nname = \"leaf\"\ntransport = \"http\"\n\
         url = \"https://127.0.0.1:{}/cip\"\nrole = \"poll\"\npoll_interval = \"200ms\"\n\
         tls = {{ ca = {ca:?}, client_cert = {:?}, client_key = {:?} }}\n",
        https.port(),
        p(&certs, "root.test.pem"),
        p(&certs, "root.test.key"),
    );
    let root = TestNode::start(spec).await;
    root.wait_for("the leaf's hint over https", |s| s.hints_accepted >= 1)
        .await;
    let a = root.query("Author=Okafor").await;
    let dsis: Vec<&str> = a.referrals.iter().map(|r| r.dsi.as_str()).collect();
    assert_eq!(dsis, [HTTPS_LEAF], "{a:?}");
    for n in [root, leaf] {
        n.stop().await;
    }
}
