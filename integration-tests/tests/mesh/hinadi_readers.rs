//! The real Hina-Di readers against cipd's `/hina.di`: WDB 2.10 (Perl) and TAMATEBAKO
//! (tama) 1.1.66 (Ruby). Both were run against a real cipd and against variants of one
//! entry, through their own HTTP clients and parsers (`../legacy/hinadi-readers/`). CI
//! replays what they sent, checks that cipd serves the bytes they held, and checks cipd's
//! file against a model of each reader's trust rule that reproduces every recorded decision.
//! With `HINA_WDB` and `HINA_TAMA` set (work trees of the two programs, prepared as the
//! legacy README says), the real programs are run against a test node as well.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cip_proto::hinadi::{self, Block, HinaLimits, KnownField, date};
use cipd::sys::http::Fetched;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{NodeSpec, TestNode};

const NODE: &str = "1.3.6.1.4.1.99999.90";
const CHARSETS: [&str; 4] = ["utf-8", "euc-jp", "shift_jis", "iso-2022-jp"];
const TITLE: &str = "太郎の日記\u{3000}第二部";
const AUTHOR: &str = "山田\u{3000}太郎";
const DIARY: &str = "http://diary.example.jp/taro/";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hinadi-readers")
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(name)).unwrap()
}

/// A node serving the recorded run's collection (the diary entry and a photo page).
async fn node() -> TestNode {
    let mut spec = NodeSpec::new(NODE, &[]);
    spec.soif = Some(String::from_utf8(fixture("own.soif")).unwrap());
    TestNode::start(spec).await
}

fn encoding(label: &str) -> &'static encoding_rs::Encoding {
    encoding_rs::Encoding::for_label(label.as_bytes()).unwrap()
}

/// What a driver printed for `field#hex` (the bytes the program held), in order of entries.
fn held_hex(report: &str, field: &str) -> Vec<Vec<u8>> {
    report
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{field}#hex\t")))
        .map(|h| {
            h.split(' ')
                .map(|b| u8::from_str_radix(b, 16).unwrap())
                .collect()
        })
        .collect()
}

/// A date as tama's `str2unixtime` reads it (`func.rb`:176-236): RFC 1123 needs a zone
/// after the time; GMT, UT, UTC (as 0) and the US zones are known. 0 when it does not read.
fn tama_time(v: Option<&str>) -> i64 {
    let Some(v) = v else { return 0 };
    let parts: Vec<&str> = v.split(' ').collect();
    let rfc1123 = parts.len() == 6 && parts[0].ends_with(',') && parts[4].len() == 8;
    if rfc1123 {
        date::parse(v).unwrap_or(0)
    } else {
        0
    }
}

/// tama's trust rule (`bin/tama.rb`:175-176, `lib/website.rb`:63-71): the remote entry is
/// used when its Last-Modified reads and its expiry (`Expires`, else `Expire`, else
/// Last-Modified-Detected plus 8 hours) is after tama's start.
fn tama_trusts(b: &Block, now: i64) -> bool {
    let modified = tama_time(b.get(KnownField::LastModified));
    let explicit = match b.get(KnownField::Expires) {
        Some(e) => tama_time(Some(e)),
        None => tama_time(b.get(KnownField::Expire)),
    };
    let detected = tama_time(b.get(KnownField::LastModifiedDetected));
    let expiry = if explicit != 0 {
        explicit
    } else if detected != 0 {
        detected + 28_800
    } else {
        0
    };
    modified != 0 && expiry > now
}

/// A date as WDB's `ExtractNormalDate` reads it (`wdblib.pl`:888-1625): RFC 1123 in GMT
/// reads right; a date in UTC (a zone it does not know) is taken as JST, 9 hours earlier.
fn wdb_time(v: Option<&str>) -> Option<i64> {
    let v = v?;
    let t = date::parse(v)?;
    Some(if v.ends_with(" UTC") { t - 9 * 3600 } else { t })
}

/// WDB's rule (`wdblib.pl` `ParseHinaDI` 1806-1920, `StartDance` 740-745): a block counts
/// only when a blank line follows it; one whose Last-Modified does not read (or is more than
/// an hour ahead) is dropped; `Expire` is `Expires`, or the `Expire` alias when `Expires` is
/// less than six hours ahead; the entry is used when `Authorized-url` is present and
/// `Expire` is still ahead.
fn wdb_trusts(b: &Block, terminated: bool, now: i64) -> bool {
    if !terminated {
        return false;
    }
    if wdb_time(b.get(KnownField::LastModified)).is_none_or(|t| t > now + 3600) {
        return false;
    }
    let mut expire = wdb_time(b.get(KnownField::Expires)).unwrap_or(0);
    if expire < now + 6 * 3600 {
        expire = wdb_time(b.get(KnownField::Expire)).unwrap_or(0);
    }
    b.get(KnownField::AuthorizedUrl).is_some() && expire > now
}

/// The decisions of both models on a served file, for the diary entry.
fn decide(bytes: &[u8], now: i64) -> (bool, bool) {
    let parsed = hinadi::parse_bytes(bytes, HinaLimits::default()).unwrap();
    let diary = parsed
        .blocks
        .iter()
        .position(|b| b.url() == Some(DIARY))
        .expect("the diary entry");
    let b = &parsed.blocks[diary];
    let last = diary + 1 == parsed.blocks.len();
    let terminated = !last || bytes.ends_with(b"\r\n\r\n") || bytes.ends_with(b"\n\n");
    (wdb_trusts(b, terminated, now), tama_trusts(b, now))
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The models reproduce what the real programs decided on every recorded variant (the
/// entry without Expires, without Last-Modified-Detected, with Expires three hours ahead,
/// without Authorized-url, with no blank line after it, in UTC, ...).
#[test]
fn the_models_reproduce_every_recorded_decision() {
    const RECORDED_NOW: i64 = 1_795_658_885;
    let table = String::from_utf8(fixture("variants/decisions.tsv")).unwrap();
    let mut rows = 0;
    for line in table.lines().filter(|l| !l.starts_with('#')) {
        let cols: Vec<&str> = line.split('\t').collect();
        let bytes = fixture(&format!("variants/{}.di", cols[0]));
        let parsed = hinadi::parse_bytes(&bytes, HinaLimits::default()).unwrap();
        let got = if parsed.blocks.iter().any(|b| b.url() == Some(DIARY)) {
            decide(&bytes, RECORDED_NOW)
        } else {
            // Without Last-Modified the reader keeps the block; WDB drops it.
            (false, false)
        };
        let word = |t: bool| if t { "TRUST" } else { "RECHECK" };
        assert_eq!(
            (word(got.0), word(got.1)),
            (cols[1], cols[2]),
            "variant {}",
            cols[0]
        );
        rows += 1;
    }
    assert_eq!(rows, 11);
}

/// The requests WDB and tama sent (HTTP/1.0, `Host` without a port, WDB's skewed
/// `If-Modified-Since`) get whole answers: a status line with a reason phrase (tama needs
/// one), a `Content-Length` that matches, and a file both readers take, in every charset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readers_recorded_requests_get_whole_answers() {
    let node = node().await;
    node.wait_for("the collection", |s| s.local_objects >= 2)
        .await;
    let addr = node.http_url().trim_start_matches("http://").to_owned();
    for recorded in [
        "wdb-request.http",
        "wdb-request-ims.http",
        "tama-request.http",
    ] {
        let request = String::from_utf8(fixture(recorded)).unwrap();
        for cs in CHARSETS {
            let request = request.replace("charset=euc-jp", &format!("charset={cs}"));
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            s.write_all(request.as_bytes()).await.unwrap();
            let mut all = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut all))
                .await
                .unwrap()
                .unwrap();
            let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            let head = String::from_utf8_lossy(&all[..split]).into_owned();
            let body = &all[split + 4..];
            assert!(
                head.starts_with("HTTP/1.0 200 OK\r\n"),
                "{recorded} {cs}: {head}"
            );
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(length, body.len(), "{recorded} {cs}");
            assert_eq!(decide(body, now()), (true, true), "{recorded} {cs}");
        }
    }
    node.stop().await;
}

/// Every character of cipd's entries reaches the readers as written: tama holds the bytes
/// as served, WDB their EUC-JP form (it converts everything with nkf), U+3000 included; and
/// both trust the entries' expiry instead of re-checking the sites.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readers_hold_every_character_and_trust_the_expiry() {
    let node = node().await;
    node.wait_for("the collection", |s| s.local_objects >= 2)
        .await;
    let web = cipd::model::config::HttpClientConfig::default()
        .client(None, None)
        .unwrap();
    let limits = cipd::sys::http::FetchLimits {
        timeout: Duration::from_secs(10),
        max_bytes: 1 << 20,
    };
    let (euc_title, _, _) = encoding_rs::EUC_JP.encode(TITLE);
    let (euc_author, _, _) = encoding_rs::EUC_JP.encode(AUTHOR);
    for cs in CHARSETS {
        let url = format!("{}/hina.di?charset={cs}", node.http_url());
        let Fetched::Body { bytes, .. } = web.get(&url, None, limits).await.unwrap() else {
            panic!("a body")
        };
        assert_eq!(decide(&bytes, now()), (true, true), "{cs}");
        // The served title's bytes, as they stand in the file.
        let (title, _, _) = encoding(cs).encode(TITLE);
        assert!(
            bytes.windows(title.len()).any(|w| w == &title[..]) || cs == "iso-2022-jp",
            "{cs}"
        );
        let tama = String::from_utf8_lossy(&fixture(&format!("tama-{cs}.txt"))).into_owned();
        let held = held_hex(&tama, "w.title(@title)");
        assert_eq!(
            held[0],
            title.to_vec(),
            "tama held the title as served ({cs})"
        );
        let wdb = String::from_utf8_lossy(&fixture(&format!("wdb-{cs}.txt"))).into_owned();
        assert_eq!(held_hex(&wdb, "Title")[0], euc_title.to_vec(), "{cs}");
        assert_eq!(
            held_hex(&wdb, "Author-Name")[0],
            euc_author.to_vec(),
            "{cs}"
        );
        assert!(wdb.contains("\ndecision\tTRUST"), "WDB trusted ({cs})");
        assert!(
            !tama.contains("\ndecision\tRECHECK") && tama.contains("\ndecision\tTRUST"),
            "tama trusted ({cs})"
        );
    }
    if let (Ok(wdb), Ok(tama)) = (std::env::var("HINA_WDB"), std::env::var("HINA_TAMA")) {
        run_the_real_readers(&node, &wdb, &tama);
    }
    node.stop().await;
}

/// The real programs, when their work trees are given.
fn run_the_real_readers(node: &TestNode, wdb: &str, tama: &str) {
    let drivers = Path::new(env!("CARGO_MANIFEST_DIR")).join("legacy/hinadi-readers");
    for cs in CHARSETS {
        let url = format!("{}/hina.di?charset={cs}", node.http_url());
        let w = std::process::Command::new("perl")
            .arg(drivers.join("wdb-read.pl"))
            .args(["--wdb", wdb, "--page", DIARY, &url])
            .output()
            .unwrap();
        let w = String::from_utf8_lossy(&w.stdout).into_owned();
        assert!(w.contains("\ndecision\tTRUST"), "WDB ({cs}): {w}");
        let (euc, _, _) = encoding_rs::EUC_JP.encode(TITLE);
        assert_eq!(held_hex(&w, "Title")[0], euc.to_vec(), "WDB ({cs})");
        let t = std::process::Command::new("ruby")
            .arg("-W0")
            .arg(drivers.join("tama-read.rb"))
            .args(["--tama", tama, &url])
            .output()
            .unwrap();
        let t = String::from_utf8_lossy(&t.stdout).into_owned();
        assert!(!t.contains("\ndecision\tRECHECK"), "tama ({cs}): {t}");
        let (title, _, _) = encoding(cs).encode(TITLE);
        assert_eq!(
            held_hex(&t, "w.title(@title)")[0],
            title.to_vec(),
            "tama ({cs})"
        );
    }
}
