//! Issue #17: the operators' web console, in a real browser.
//!
//! Three nodes (root polls mid polls leaf; each lists its poller), one leaf author a script
//! tag. Headless Chromium loads each node's console with a query in the URL fragment, and
//! the test reads the DOM it ends with: peers, ranked referrals with links to the next
//! node's console (followed, root to mid to leaf), the SVG mesh, and the hostile value
//! shown as text with no element injected. Screenshots land in
//! `target/tmp/console-screenshots/`.
//!
//! Chromium's `--virtual-time-budget` lets the page run its fetches and timers before the
//! DOM is dumped; each run is bounded by a deadline and killed past it. Without
//! `/usr/bin/chromium` (or `$CIPD_TEST_CHROMIUM`) the test says so and passes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::browser::{Output, browse, chromium_path, screenshot};
use crate::harness::{NodeSpec, TestNode};

const LEAF: &str = "1.3.6.1.4.1.99999.171";
const MID: &str = "1.3.6.1.4.1.99999.172";
const ROOT: &str = "1.3.6.1.4.1.99999.173";
const HOSTILE: &str = "<script>alert(1)</script>";
const ESCAPED: &str = "&lt;script&gt;alert(1)&lt;/script&gt;";
const TOKEN: &str = "browser-test-token-0123456789";

/// The DOM of `url` ([`browse`] on the blocking pool: the nodes answering the browser run
/// on this runtime).
async fn load(work: &Path, url: &str) -> String {
    let (work, url) = (work.to_owned(), url.to_owned());
    tokio::task::spawn_blocking(move || browse(&work, &url, Output::Dom))
        .await
        .unwrap()
}

/// The DOM of the console at `url`.
async fn page(work: &Path, url: &str) -> String {
    let dom = load(work, url).await;
    assert!(
        dom.contains("<html") && dom.contains("id=\"mesh-svg\""),
        "not the console: {dom}"
    );
    dom
}

/// The value of attribute `attr` of the first element whose opening tag contains `marker`.
fn attribute(dom: &str, marker: &str, attr: &str) -> Option<String> {
    let at = dom.find(marker)?;
    let start = dom[..at].rfind('<')?;
    let tag = &dom[start..start + dom[start..].find('>')?];
    let key = format!(" {attr}=\"");
    let from = tag.find(&key)? + key.len();
    let value = &tag[from..from + tag[from..].find('"')?];
    Some(value.replace("&amp;", "&"))
}

/// The DOM shows `HOSTILE` as text only: escaped, never as markup.
fn assert_inert(dom: &str, what: &str) {
    assert!(dom.contains(ESCAPED), "{what}: the value is shown, escaped");
    assert_eq!(
        dom.matches("<script").count(),
        1,
        "{what}: only the console's own script element exists"
    );
    assert!(
        dom.contains("<script src=\"/console/app.js\" defer=\"\"></script>"),
        "{what}: that one is the console's"
    );
    assert!(
        !dom.contains(HOSTILE),
        "{what}: no raw markup from the data"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_in_a_browser_follows_referrals_down_the_mesh() {
    if !chromium_path().exists() {
        println!(
            "skipped: chromium not installed (apt-get install chromium), looked for {}",
            chromium_path().display()
        );
        return;
    }
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let work = tempfile::tempdir().unwrap();

    let mut leaf = TestNode::start(NodeSpec::new(LEAF, &["Garcia", HOSTILE, "Okafor"])).await;
    let mut mid = TestNode::start(NodeSpec::new(MID, &[]).peer("leaf", &leaf, &["poll"])).await;
    let mut root_spec = NodeSpec::new(ROOT, &[]).peer("mid", &mid, &["poll"]);
    root_spec.extra = format!("[console]\ntoken = \"{TOKEN}\"\n");
    let root = TestNode::start(root_spec).await;
    // Each node lists its poller too, so the pictures show both directions.
    let spec = leaf.spec.clone().peer("mid", &mid, &["poller"]);
    leaf.reconfigure(spec).await;
    let spec = mid.spec.clone().peer("root", &root, &["poller"]);
    mid.reconfigure(spec).await;
    let refers =
        |a: &cipd::model::answer::QueryAnswer, dsi: &str| a.referrals.iter().any(|r| r.dsi == dsi);
    mid.wait_query("Author=Garcia", |a| refers(a, LEAF)).await;
    root.wait_query("Author=Garcia", |a| refers(a, MID)).await;
    root.wait_query("Author~script", |a| refers(a, MID)).await;

    // The root, opened with its token, a query in the fragment.
    let root_url = format!("{}/?token={TOKEN}#q=Author%3DGarcia", root.http_url());
    let dom = page(work.path(), &root_url).await;
    assert!(
        dom.contains("<span id=\"ready\" class=\"badge ok\">ready</span>"),
        "{dom}"
    );
    assert!(dom.contains(&format!("<span id=\"node-dsi\">{ROOT}</span>")));
    assert!(
        dom.contains("<tr class=\"peer\" data-name=\"mid\">"),
        "peers: {dom}"
    );
    assert!(dom.contains(&format!("<td class=\"dsi\">{MID}</td>")));
    assert!(
        dom.contains(&format!("<tr class=\"referral\" data-dsi=\"{MID}\">")),
        "referrals: {dom}"
    );
    assert!(
        dom.contains("1 referral for <code>Author=Garcia</code>"),
        "{dom}"
    );
    // The picture: this node, the peer it polls, and the leaf behind it (provenance).
    let svg = &dom[dom.find("<svg id=\"mesh-svg\"").unwrap()..];
    let svg = &svg[..svg.find("</svg>").unwrap()];
    for key in ["self", "peer:mid", &format!("dsi:{LEAF}")] {
        assert!(
            svg.contains(&format!("data-key=\"{key}\"")),
            "{key} in {svg}"
        );
    }
    assert!(svg.contains("class=\"edge provenance\""), "{svg}");
    for series in ["polls", "imports", "queries"] {
        assert!(
            dom.contains(&format!("data-series=\"{series}\"")),
            "{series}"
        );
    }
    // The routing table section lists the leaf's values, the hostile one as text.
    assert!(dom.contains("<tr class=\"table-row\">"), "table: {dom}");
    assert_inert(&dom, "root");
    let to_mid = attribute(&dom, "class=\"follow\"", "href").expect("a link to mid's console");
    assert_eq!(to_mid, format!("{}/#q=Author%3DGarcia", mid.http_url()));
    assert!(!to_mid.contains(TOKEN), "the token stays home");
    screenshot(work.path(), &root_url, shots.join("root.png"), 900).await;

    // The hostile value matched by a query: shown in the explanation as text.
    let hostile_url = format!("{}/?token={TOKEN}#q=Author~script", root.http_url());
    let dom = page(work.path(), &hostile_url).await;
    assert!(
        dom.contains(&format!("<span class=\"value\">{ESCAPED}</span>")),
        "explanation: {dom}"
    );
    assert_inert(&dom, "root, hostile query");
    screenshot(
        work.path(),
        &hostile_url,
        shots.join("root-hostile.png"),
        2000,
    )
    .await;

    // Without the token the root answers with nothing but the refusal.
    let locked = load(
        work.path(),
        &format!("{}/#q=Author%3DGarcia", root.http_url()),
    )
    .await;
    assert!(locked.contains("unauthorized"), "{locked}");
    assert!(
        !locked.contains(MID) && !locked.contains("mesh-svg"),
        "{locked}"
    );

    // Follow the referral: mid's console, same query, refers on to the leaf.
    let dom = page(work.path(), &to_mid).await;
    assert!(
        dom.contains(&format!("<span id=\"node-dsi\">{MID}</span>")),
        "{dom}"
    );
    assert!(
        dom.contains(&format!("<tr class=\"referral\" data-dsi=\"{LEAF}\">")),
        "{dom}"
    );
    assert!(dom.contains("<tr class=\"peer\" data-name=\"root\">"));
    assert!(dom.contains("<tr class=\"peer\" data-name=\"leaf\">"));
    for key in ["self", "peer:root", "peer:leaf"] {
        assert!(dom.contains(&format!("data-key=\"{key}\"")), "{key}");
    }
    assert_inert(&dom, "mid");
    screenshot(work.path(), &to_mid, shots.join("mid.png"), 900).await;
    let to_leaf = attribute(&dom, "class=\"follow\"", "href").expect("a link to the leaf");
    assert_eq!(to_leaf, format!("{}/#q=Author%3DGarcia", leaf.http_url()));

    // The leaf holds the object itself and refers nowhere.
    let dom = page(work.path(), &to_leaf).await;
    assert!(
        dom.contains(&format!("<span id=\"node-dsi\">{LEAF}</span>")),
        "{dom}"
    );
    assert!(
        dom.contains(
            "0 referrals for <code>Author=Garcia</code>; this node holds 1 matching object itself."
        ),
        "{dom}"
    );
    assert!(dom.contains("<tr class=\"peer\" data-name=\"mid\">"));
    assert!(dom.contains("data-key=\"peer:mid\""));
    assert!(!dom.contains("<script>"), "{dom}");
    screenshot(work.path(), &to_leaf, shots.join("leaf.png"), 900).await;

    for n in [root, mid, leaf] {
        n.stop().await;
    }
}

/// A hub whose routing table holds a leaf's 1,000 values (one of them 4 KB long, held by five
/// documents so it ranks first): the console shows the table a page of 25 rows at a time,
/// pages and searches through the URL fragment, cuts the long value to one line, keeps DSIs
/// whole, and draws the activity lines on the first load from the history the daemon keeps.
/// A screenshot at each step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_pages_a_thousand_value_table() {
    if !chromium_path().exists() {
        println!(
            "skipped: chromium not installed (apt-get install chromium), looked for {}",
            chromium_path().display()
        );
        return;
    }
    const HUB: &str = "1.3.6.1.4.1.99999.174";
    const BIG_LEAF: &str = "1.3.6.1.4.1.99999.175";
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-table-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let work = tempfile::tempdir().unwrap();

    // Just under the 4 KiB a weightlist value may be.
    let long = format!("Long{}", "x".repeat(4000));
    let mut authors: Vec<String> = (0..1000).map(|i| format!("Author{i:04}")).collect();
    authors.extend(std::iter::repeat_n(long.clone(), 5));
    let mut spec = NodeSpec::new(BIG_LEAF, &[]);
    spec.soif = Some(crate::harness::collection(&authors));
    let leaf = TestNode::start(spec).await;
    let hub = TestNode::start(NodeSpec::new(HUB, &[]).peer("leaf", &leaf, &["poll"])).await;
    hub.wait_query("Author=Author0999", |a| !a.referrals.is_empty())
        .await;
    // Three samples of history (the first activity rates) before the page opens.
    let deadline = Instant::now() + crate::harness::WAIT;
    loop {
        let history: Vec<serde_json::Value> = cipd::ctl::query::get_json(
            &hub.http_url(),
            "/v1/counters/history",
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        if history.len() >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "no history samples");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let base = format!("{}/", hub.http_url());
    let dom = page(work.path(), &base).await;
    let rows = dom.matches("<tr class=\"table-row\">").count();
    assert_eq!(rows, 25, "one page of rows");
    assert!(dom.contains("rows 1–25 of more"), "pager: {dom}");
    // The long value first, cut to one line (the whole of it on a click).
    assert!(dom.contains("<td class=\"value cut\""), "cut value: {dom}");
    assert!(!dom.contains(&long), "the 4 KB value is not shown whole");
    assert!(
        dom.contains(&format!("<code class=\"dsi\">{BIG_LEAF}</code>")),
        "DSIs: {dom}"
    );
    // The activity lines are drawn from the daemon's history on the first load.
    let spark = &dom[dom.find("data-series=\"polls\"").unwrap()..];
    let spark = &spark[..spark.find("</figure>").unwrap()];
    assert!(
        spark.contains("<polyline"),
        "sparkline drawn at once: {spark}"
    );
    screenshot(work.path(), &base, shots.join("1-first-screen.png"), 900).await;
    screenshot(work.path(), &base, shots.join("2-table-page-1.png"), 2200).await;

    // Page 2, and a search, by the fragment (as the pager and the form set it).
    let page2 = format!("{base}#tpage=2");
    let dom = page(work.path(), &page2).await;
    assert_eq!(dom.matches("<tr class=\"table-row\">").count(), 25);
    assert!(dom.contains("rows 26–50 of more"), "{dom}");
    screenshot(work.path(), &page2, shots.join("3-table-page-2.png"), 2200).await;
    let search = format!("{base}#tprefix=Author099&trows=50");
    let dom = page(work.path(), &search).await;
    assert_eq!(
        dom.matches("<tr class=\"table-row\">").count(),
        10,
        "Author0990-0999"
    );
    assert!(dom.contains("rows 1–10 of 10"), "{dom}");
    screenshot(work.path(), &search, shots.join("4-table-search.png"), 1400).await;

    for n in [hub, leaf] {
        n.stop().await;
    }
}
