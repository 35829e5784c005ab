//! Hina-Di through the mesh: a node reads an EUC-JP antenna file, serves its own Hina-Di
//! file with the trusted blocks re-published, a second node pulls that file over HTTP, and
//! the root of a two-level mesh above it refers Japanese keyword queries to it.

use std::time::Duration;

use cip_proto::hinadi::{self, HinaLimits, KnownField};
use cipd::sys::http::{FetchLimits, Fetched, HttpClient};

use crate::harness::{NodeSpec, TestNode};

const PUBLISHER: &str = "1.3.6.1.4.1.99999.51";
const PULLER: &str = "1.3.6.1.4.1.99999.52";
const ROOT: &str = "1.3.6.1.4.1.99999.53";
pub const AGENT: &str = "http://agent.example.jp/";

pub const ANTENNA: &str = "HINA/2.2beta\r\n\
User-Agent: WDB/2.10 (Antenna; HINA/2.2beta)\r\n\
Content-Type: text/plain; charset=EUC-JP\r\n\
Date: Sun, 6 Nov 1994 08:49:37 GMT\r\n\
\r\n\
URL:\t\thttp://diary.example.jp/yamada/\r\n\
Title:\t\t山田の日記\r\n\
Author-Name:\t\t山田太郎\r\n\
Last-Modified:\t\tSun, 6 Nov 1994 08:49:37 GMT\r\n\
Keyword:\t\t日記: 音楽\r\n\
Authorized:\t\tWDB/2.10\r\n\
Authorized-url:\t\thttp://agent.example.jp/\r\n\
Method:\t\tGET/200\r\n\
X-WDB-Title:\t\tやまだ\r\n\
\r\n\
URL: http://untrusted.example.jp/\r\n\
Title: 怪しい\r\n\
Keyword: 音楽\r\n\
Authorized: Other/1.0\r\n\
Authorized-url: http://other.example.jp/\r\n\
Method: GET/200\r\n\
\r\n\
URL: http://noauth.example.jp/\r\n\
Title: 無署名\r\n\
Keyword: 音楽\r\n\
Authorized: WDB/2.10\r\n\
Method: HEAD/200\r\n";

const OWN: &str = "@DOCUMENT { http://publisher.example.org/report.html\n\
Title{9}:\t報告書\n\
Author{4}:\tSato\n\
Last-Modification-Time{10}:\t1997-02-11\n\
}\n";

const LIMITS: FetchLimits = FetchLimits {
    timeout: Duration::from_secs(10),
    max_bytes: 1 << 20,
};

fn web() -> HttpClient {
    cipd::model::config::HttpClientConfig::default()
        .client(None, None)
        .unwrap()
}

async fn get(url: &str, ims: Option<&str>) -> Fetched {
    web().get(url, ims, LIMITS).await.unwrap()
}

fn blocks(bytes: &[u8]) -> hinadi::Parsed {
    hinadi::parse_bytes(bytes, HinaLimits::default()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn antenna_files_are_read_served_pulled_and_referred() {
    let dir = tempfile::tempdir().unwrap();
    let (euc, _, _) = encoding_rs::EUC_JP.encode(ANTENNA);
    std::fs::write(dir.path().join("antenna.di"), &euc).unwrap();
    std::fs::write(dir.path().join("own.soif"), OWN).unwrap();
    let mut spec = NodeSpec::new(PUBLISHER, &[]);
    spec.export = vec!["HINA:Keyword", "HINA:Title"];
    spec.extra = format!(
        "[[collection]]\nname = \"antenna\"\ntype = \"hinadi\"\npath = {:?}\n\
         [[collection]]\nname = \"own\"\ntype = \"soif\"\npath = {:?}\n\
         [hinadi]\ntrusted = [{AGENT:?}]\n",
        dir.path().join("antenna.di").display().to_string(),
        dir.path().join("own.soif").display().to_string(),
    );
    let publisher = TestNode::start_in(spec, dir).await;
    // Every block is indexed here, the untrusted ones too.
    let local = publisher
        .wait_for("the antenna file", |s| s.local_objects >= 4)
        .await;
    assert_eq!(local.local_objects, 4);

    // The served file: the trusted block re-published, this node's dated document, and
    // nothing no trusted agent vouches for.
    let url = format!("{}/hina.di", publisher.http_url());
    let Fetched::Body {
        bytes,
        last_modified,
        content_type,
    } = get(&url, None).await
    else {
        panic!("a first fetch has a body")
    };
    assert_eq!(content_type.as_deref(), Some("text/plain; charset=UTF-8"));
    let served = blocks(&bytes);
    // The re-published block keeps the antenna's own date as written (a one-digit day, not
    // the spec's form): the only thing a reader may say of the served file.
    assert!(
        served.diagnostics.iter().all(|d| matches!(
            &d.kind,
            cip_proto::hinadi::DiagnosticKind::NonStandardDate { value, .. }
                if value == "Sun, 6 Nov 1994 08:49:37 GMT"
        )),
        "{:?}",
        served.diagnostics
    );
    assert_eq!(
        served
            .header
            .get(KnownField::UserAgent)
            .map(|u| u.starts_with("cipd/")),
        Some(true)
    );
    let urls: Vec<&str> = served.blocks.iter().filter_map(|b| b.url()).collect();
    assert_eq!(
        urls,
        [
            "http://diary.example.jp/yamada/",
            "http://publisher.example.org/report.html"
        ]
    );
    let diary = &served.blocks[0];
    assert_eq!(diary.get(KnownField::Title), Some("山田の日記"));
    assert_eq!(diary.get(KnownField::Keyword), Some("日記: 音楽"));
    assert_eq!(diary.get(KnownField::Method), Some("REMOTE/GET/200"));
    assert_eq!(diary.get(KnownField::AuthorizedUrl), Some(AGENT));
    assert!(
        diary.fields.iter().all(|f| !f.is_experimental()),
        "experimental fields are not re-published"
    );
    let own = &served.blocks[1];
    assert_eq!(own.get(KnownField::Method), Some("FILE/200"));
    assert_eq!(
        own.get(KnownField::LastModified),
        Some("Tue, 11 Feb 1997 00:00:00 GMT")
    );
    let publisher_url = format!("{}/", publisher.http_url());
    assert_eq!(
        own.get(KnownField::AuthorizedUrl),
        Some(publisher_url.as_str())
    );
    // When this node read the entry, and how long a reader may trust it (a file collection:
    // a day by default).
    let read_at = hinadi::date::parse(own.get(KnownField::LastModifiedDetected).unwrap()).unwrap();
    let expires = hinadi::date::parse(own.get(KnownField::Expires).unwrap()).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (now - 600..=now + 1).contains(&read_at),
        "{read_at} vs {now}"
    );
    assert!(
        (now + 86_000..=now + 86_401).contains(&expires),
        "{expires} vs {now}"
    );
    // Re-published blocks keep what their agent said (this one said neither).
    assert_eq!(diary.get(KnownField::Expires), None);

    // The same file in EUC-JP, and revalidation.
    let Fetched::Body { bytes: euc, .. } = get(&format!("{url}?charset=euc-jp"), None).await else {
        panic!("body")
    };
    let again = blocks(&euc);
    assert_eq!(again.header.charset, encoding_rs::EUC_JP);
    assert_eq!(again.blocks, served.blocks);
    assert_eq!(
        get(&url, last_modified.as_deref()).await,
        Fetched::NotModified
    );
    let bad = web()
        .get(&format!("{url}?charset=klingon"), None, LIMITS)
        .await;
    assert!(bad.unwrap_err().to_string().contains("400"));

    // A second node pulls the file over HTTP and trusts both agents.
    let mut spec = NodeSpec::new(PULLER, &[]);
    spec.export = vec!["HINA:Keyword", "HINA:Title"];
    spec.extra = format!(
        "[[collection]]\nname = \"publisher\"\ntype = \"hinadi\"\nurl = {url:?}\ninterval = \"200ms\"\n\
         [hinadi]\ntrusted = [{AGENT:?}, {publisher_url:?}]\n"
    );
    let puller = TestNode::start(spec).await;
    puller
        .wait_for("the pulled file", |s| s.local_objects >= 2)
        .await;
    let Fetched::Body { bytes, .. } = get(&format!("{}/hina.di", puller.http_url()), None).await
    else {
        panic!("body")
    };
    let chain = blocks(&bytes);
    let methods: Vec<&str> = chain
        .blocks
        .iter()
        .filter_map(|b| b.get(KnownField::Method))
        .collect();
    assert_eq!(methods, ["REMOTE/REMOTE/GET/200", "REMOTE/FILE/200"]);

    // The root of a two-level mesh refers Japanese keyword and title queries to the puller.
    let root = TestNode::start(NodeSpec::new(ROOT, &[]).peer("puller", &puller, &["poll"])).await;
    root.wait_for("the puller's hint", |s| s.hints_accepted >= 1)
        .await;
    for q in [
        "HINA:Keyword=音楽",
        "HINA:Title=報告書",
        "HINA:Keyword=日記",
    ] {
        let a = root.query(q).await;
        let dsis: Vec<&str> = a.referrals.iter().map(|r| r.dsi.as_str()).collect();
        assert_eq!(dsis, [PULLER], "{q}: {a:?}");
        assert_eq!(a.referrals[0].count, 1, "{q}: {a:?}");
    }
    assert!(root.query("HINA:Title=怪しい").await.referrals.is_empty());

    // The publisher's antenna file changes; the puller's next fetch brings the new block.
    let more = format!(
        "{ANTENNA}\r\nURL: http://photo.example.jp/\r\nTitle: 写真館\r\nKeyword: 写真\r\n\
         Authorized: WDB/2.10\r\nAuthorized-url: {AGENT}\r\nMethod: GET/200\r\n"
    );
    let (euc, _, _) = encoding_rs::EUC_JP.encode(&more);
    std::fs::write(publisher.dir.path().join("antenna.di"), &euc).unwrap();
    publisher.daemon.node().reload().await.unwrap();
    puller
        .wait_for("the changed file", |s| s.local_objects >= 3)
        .await;
    let page = puller.daemon.node().render_metrics();
    assert!(crate::harness::metric(&page, "cipd_hinadi_fetches_total") >= 2.0);
    assert_eq!(
        crate::harness::metric(&page, "cipd_hinadi_fetch_errors_total"),
        0.0
    );
    for n in [root, puller, publisher] {
        n.stop().await;
    }
}

/// Feeds that cannot be reached are counted, keep what they had (nothing, here) and do not
/// stop the node: a Hina-Di URL and an RDM server on a port nobody listens on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_feeds_are_counted_and_retried() {
    // A port that is bound for the whole test and never answers: a port bound and let go
    // could be taken meanwhile by another test's listener, which may answer. Connections
    // wait in its backlog until the fetch and pull timeouts (2 s) fail them.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let mut spec = NodeSpec::new(PULLER, &["Garcia"]);
    spec.extra = format!(
        "[[collection]]\nname = \"antenna\"\ntype = \"hinadi\"\nurl = \"http://{silent_addr}/hina.di\"\n\
         [[collection]]\nname = \"partner\"\ntype = \"rdm\"\nurl = \"http://{silent_addr}/rdm/incoming\"\n\
         [hinadi]\nfetch_timeout = \"2s\"\n[rdm]\npull_timeout = \"2s\"\n"
    );
    let node = TestNode::start(spec).await;
    let n = node.daemon.node();
    crate::harness::eventually("both failures counted", || {
        let page = n.render_metrics();
        crate::harness::metric(&page, "cipd_hinadi_fetch_errors_total") >= 1.0
            && crate::harness::metric(&page, "cipd_rdm_pull_errors_total") >= 1.0
    })
    .await;
    let page = n.render_metrics();
    assert_eq!(
        crate::harness::metric(&page, "cipd_hinadi_fetches_total"),
        0.0
    );
    assert_eq!(crate::harness::metric(&page, "cipd_rdm_pulls_total"), 0.0);
    // The node answers from what it has.
    assert_eq!(node.query("Author=Garcia").await.local, 1);
    node.stop().await;
    drop(silent);
}

/// The title and author of the round-trip entry: an ideographic space (U+3000) between
/// words, kana, kanji and a long-vowel mark.
const TITLE: &str = "太郎の日記\u{3000}第二部";
const AUTHOR: &str = "山田\u{3000}太郎ー";

fn charset_file(charset: &'static encoding_rs::Encoding, n: usize) -> Vec<u8> {
    let text = format!(
        "HINA/2.2beta\r\nUser-Agent: WDB/2.10 (Antenna; HINA/2.2beta)\r\n\
         Content-Type: text/plain; charset={}\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n\
         URL: http://diary.example.jp/{n}/\r\nTitle: {TITLE}\r\nAuthor-Name: {AUTHOR}\r\n\
         Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\nKeyword: 日記\r\n\
         Authorized: WDB/2.10\r\nAuthorized-url: {AGENT}\r\nMethod: GET/200\r\n",
        charset.name()
    );
    let (bytes, _, unmappable) = charset.encode(&text);
    assert!(!unmappable, "{}", charset.name());
    bytes.into_owned()
}

/// U+3000 and the other Japanese text of an antenna entry stay byte-exact from a file in
/// each charset, through the SOIF store, to the served file in each charset, and through a
/// second node that pulls and re-publishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn japanese_text_survives_every_charset_both_ways() {
    let charsets = [
        encoding_rs::UTF_8,
        encoding_rs::EUC_JP,
        encoding_rs::SHIFT_JIS,
        encoding_rs::ISO_2022_JP,
    ];
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("antennas");
    std::fs::create_dir(&files).unwrap();
    for (n, cs) in charsets.iter().enumerate() {
        std::fs::write(files.join(format!("{n}.di")), charset_file(cs, n)).unwrap();
    }
    let mut spec = NodeSpec::new(PUBLISHER, &[]);
    spec.export = vec!["HINA:Title", "HINA:Author-Name"];
    spec.extra = format!(
        "[[collection]]\nname = \"antennas\"\ntype = \"hinadi\"\npath = {:?}\n\
         [hinadi]\ntrusted = [{AGENT:?}]\nexpires = \"2h\"\n",
        files.display().to_string()
    );
    let publisher = TestNode::start_in(spec, dir).await;
    publisher
        .wait_for("four antenna files", |s| s.local_objects >= 4)
        .await;
    // In the store: the exact UTF-8 text, found by an exact query.
    let a = publisher.query(&format!("HINA:Title={TITLE}")).await;
    assert_eq!(a.local, 4, "{a:?}");
    let a = publisher.query(&format!("HINA:Author-Name={AUTHOR}")).await;
    assert_eq!(a.local, 4, "{a:?}");
    let url = format!("{}/hina.di", publisher.http_url());
    for cs in charsets {
        let Fetched::Body { bytes, .. } = get(&format!("{url}?charset={}", cs.name()), None).await
        else {
            panic!("body")
        };
        // The served bytes hold the title encoded in that charset, and read back exactly.
        let (title_bytes, _, _) = cs.encode(TITLE);
        if cs != encoding_rs::ISO_2022_JP {
            assert!(
                bytes
                    .windows(title_bytes.len())
                    .any(|w| w == &title_bytes[..]),
                "{}: the title's bytes",
                cs.name()
            );
        }
        let parsed = blocks(&bytes);
        assert_eq!(parsed.header.charset, cs);
        assert_eq!(parsed.blocks.len(), 4, "{}", cs.name());
        for b in &parsed.blocks {
            assert_eq!(b.get(KnownField::Title), Some(TITLE), "{}", cs.name());
            assert_eq!(b.get(KnownField::AuthorName), Some(AUTHOR), "{}", cs.name());
        }
    }

    // A second node pulls the EUC-JP file and re-publishes it: the text is still exact.
    let mut spec = NodeSpec::new(PULLER, &[]);
    spec.export = vec!["HINA:Title"];
    spec.extra = format!(
        "[[collection]]\nname = \"publisher\"\ntype = \"hinadi\"\n\
         url = \"{url}?charset=euc-jp\"\ninterval = \"1h\"\n\
         [hinadi]\ntrusted = [{AGENT:?}]\n"
    );
    let puller = TestNode::start(spec).await;
    puller
        .wait_for("the pulled file", |s| s.local_objects >= 4)
        .await;
    for cs in charsets {
        let Fetched::Body { bytes, .. } = get(
            &format!("{}/hina.di?charset={}", puller.http_url(), cs.name()),
            None,
        )
        .await
        else {
            panic!("body")
        };
        let parsed = blocks(&bytes);
        assert_eq!(parsed.blocks.len(), 4, "{}", cs.name());
        for b in &parsed.blocks {
            assert_eq!(b.get(KnownField::Title), Some(TITLE), "{}", cs.name());
            assert_eq!(b.get(KnownField::Method), Some("REMOTE/REMOTE/GET/200"));
        }
    }
    for n in [puller, publisher] {
        n.stop().await;
    }
}
