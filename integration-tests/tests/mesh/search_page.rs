//! The `/search` page in a real browser: one box, the objects of the whole mesh.
//!
//! Three nodes (root polls mid polls leaf; each lists its poller, so each learns from the
//! polls where a search widens up). Each holds a `Garcia` document; the mid also holds one
//! by a `<script>` author whose URL is `javascript:`. Headless Chromium loads the leaf's
//! `/search?q=...` and the test reads the DOM it ends with: the objects grouped under
//! their three holders, the path the search took (mid, then root), no partial notice; with
//! `deadline=1` the partial notice naming the mid (reason deadline); with a small `limit`
//! the offer of a larger one; the hostile author as text and its URL not a link; the
//! messages of a syntax error and of an empty query. Screenshots land in
//! `target/tmp/search-page-screenshots/`.
//!
//! Chromium's `--virtual-time-budget` lets the page run its fetch before the DOM is dumped;
//! each run is bounded by a deadline and killed past it. Without `/usr/bin/chromium` (or
//! `$CIPD_TEST_CHROMIUM`) the test says so and passes.

use std::path::{Path, PathBuf};

use crate::browser::{Output, browse, chromium_path, screenshot};
use crate::harness::{NodeSpec, TestNode, eventually};

const LEAF: &str = "1.3.6.1.4.1.99999.181";
const MID: &str = "1.3.6.1.4.1.99999.182";
const ROOT: &str = "1.3.6.1.4.1.99999.183";
const HOSTILE: &str = "<script>alert(1)</script>";
const ESCAPED: &str = "&lt;script&gt;alert(1)&lt;/script&gt;";
/// `DOCUMENT:Author=Garcia`, as the page writes it into its URL.
const GARCIA: &str = "DOCUMENT%3AAuthor%3DGarcia";
/// The DOM of the search page at `url` ([`browse`] on the blocking pool: the nodes
/// answering the browser run on this runtime), once the search has answered.
async fn page(work: &Path, url: &str) -> String {
    let (work, url) = (work.to_owned(), url.to_owned());
    let dom = tokio::task::spawn_blocking(move || browse(&work, &url, Output::Dom))
        .await
        .unwrap();
    assert!(
        dom.contains("<form id=\"form\"") && dom.contains("id=\"results\""),
        "not the search page: {dom}"
    );
    assert_ne!(
        status(&dom),
        "Searching…",
        "the search never answered: {dom}"
    );
    dom
}

/// The element whose opening tag starts with `open`, up to the first `close` after it.
fn element<'a>(dom: &'a str, open: &str, close: &str) -> &'a str {
    let start = dom
        .find(open)
        .unwrap_or_else(|| panic!("no {open} in {dom}"));
    let len = dom[start..]
        .find(close)
        .unwrap_or_else(|| panic!("{open} never closes"));
    &dom[start..start + len]
}

/// The text of the status line.
fn status(dom: &str) -> &str {
    let s = element(dom, "<p id=\"status\"", "</p>");
    &s[s.find('>').unwrap() + 1..]
}

/// One SOIF object with `url` and `attributes`.
fn soif_object(url: &str, attributes: &[(&str, &str)]) -> String {
    let mut out = format!("@DOCUMENT {{ {url}\n");
    for (name, value) in attributes {
        out.push_str(&format!("{name}{{{}}}:\t{value}\n", value.len()));
    }
    out.push_str("}\n\n");
    out
}

/// The mid's collection: a Garcia document with more attributes than Author and Title, and
/// a hostile one (markup for an author, a `javascript:` URL).
fn mid_collection() -> String {
    let title = format!("Notes by {HOSTILE}");
    soif_object(
        "http://mid.example/garcia",
        &[
            ("Author", "Garcia"),
            ("Title", "Field notes on referral meshes"),
            ("Keywords", "cip, mesh"),
            ("Description", "How the mid keeps its leaves' hints"),
        ],
    ) + &soif_object(
        "javascript:alert(1)",
        &[("Author", HOSTILE), ("Title", &title)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_page_shows_the_mesh_by_holder() {
    if !chromium_path().exists() {
        println!(
            "skipped: chromium not installed (apt-get install chromium), looked for {}",
            chromium_path().display()
        );
        return;
    }
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("search-page-screenshots");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let work = tempfile::tempdir().unwrap();

    let mut leaf = TestNode::start(NodeSpec::new(LEAF, &["Garcia", "Okafor"])).await;
    let mut mid_spec = NodeSpec::new(MID, &[]).peer("leaf", &leaf, &["poll"]);
    mid_spec.soif = Some(mid_collection());
    let mut mid = TestNode::start(mid_spec).await;
    let root =
        TestNode::start(NodeSpec::new(ROOT, &["Lindqvist", "Garcia"]).peer("mid", &mid, &["poll"]))
            .await;
    // Each node lists its poller, then is polled again: the poll names the poller's
    // base-URI, which a search from below widens to.
    let spec = leaf.spec.clone().peer("mid", &mid, &["poller"]);
    leaf.reconfigure(spec).await;
    let spec = mid.spec.clone().peer("root", &root, &["poller"]);
    mid.reconfigure(spec).await;
    mid.daemon.node().poll_now("leaf").unwrap();
    root.daemon.node().poll_now("mid").unwrap();
    let polled_by = |n: &TestNode, dsi: &str| {
        n.daemon
            .node()
            .upstreams()
            .iter()
            .any(|u| u.dsi == dsi && !u.base_uris.is_empty())
    };
    eventually("the leaf to learn that mid polls it", || {
        polled_by(&leaf, MID)
    })
    .await;
    eventually("mid to learn that root polls it", || polled_by(&mid, ROOT)).await;
    let refers =
        |a: &cipd::model::answer::QueryAnswer, dsi: &str| a.referrals.iter().any(|r| r.dsi == dsi);
    mid.wait_query("Author=Garcia", |a| refers(a, LEAF)).await;
    root.wait_query("Author=Garcia", |a| refers(a, MID)).await;
    let base = format!("{}/search", leaf.http_url());

    // 1 ms is too little for any sub-request: the leaf's own object, and the mid left for
    // the deadline. (Asked first: a complete answer for the same request would be kept and
    // served whatever the deadline.)
    let late = format!("{base}?q={GARCIA}&deadline=1");
    let dom = page(work.path(), &late).await;
    assert!(
        dom.contains("<section id=\"partial\" class=\"notice\">"),
        "partial notice shown: {dom}"
    );
    let notice = element(&dom, "<section id=\"partial\"", "</section>");
    assert!(
        notice.contains(&format!(
            "<li class=\"unchased\" data-reason=\"deadline\" data-dsi=\"{MID}\"><strong class=\"reason\">deadline</strong>"
        )),
        "the mid, unchased for the deadline: {notice}"
    );
    assert!(notice.contains("the deadline passed"), "{notice}");
    assert!(
        dom.contains(&format!(
            "<section class=\"holder card\" data-dsi=\"{LEAF}\">"
        )),
        "the leaf's own object: {dom}"
    );
    assert!(!dom.contains(&format!("data-dsi=\"{ROOT}\"")), "{dom}");
    assert!(status(&dom).contains("(partial)"), "{}", status(&dom));
    screenshot(work.path(), &late, shots.join("2-deadline.png"), 900).await;

    // The whole mesh: three holders, the path up through mid to root, nothing missing.
    let full = format!("{base}?q={GARCIA}");
    let dom = page(work.path(), &full).await;
    assert_eq!(status(&dom), "3 objects from 3 nodes.", "status: {dom}");
    let results = element(&dom, "<div id=\"results\">", "<p id=\"more\"");
    for (dsi, holder_uri) in [
        (LEAF, leaf.http_url()),
        (MID, mid.http_url()),
        (ROOT, root.http_url()),
    ] {
        let group = element(
            results,
            &format!("<section class=\"holder card\" data-dsi=\"{dsi}\">"),
            "</section>",
        );
        assert!(
            group.contains(&format!("<code class=\"dsi\">{dsi}</code>")),
            "{group}"
        );
        assert!(
            group.contains(&format!(
                "<a class=\"url mono\" href=\"{holder_uri}/\" rel=\"noopener noreferrer\">{holder_uri}/</a>"
            )),
            "the holder's base-URI as a link: {group}"
        );
        assert!(
            group.contains("<span class=\"count\">1 object</span>"),
            "{group}"
        );
        assert_eq!(group.matches("<li class=\"object\">").count(), 1, "{group}");
        assert!(
            group.contains("<div class=\"author\">by Garcia</div>"),
            "{group}"
        );
    }
    assert_eq!(results.matches("<section class=\"holder card\"").count(), 3);
    // The objects: template, URL as a link, title, author; other attributes folded away.
    assert!(
        results.contains("<span class=\"template\">DOCUMENT</span><a class=\"url mono\" href=\"http://mid.example/garcia\""),
        "{results}"
    );
    assert!(results.contains("<div class=\"title\">Field notes on referral meshes</div>"));
    assert!(results.contains("<div class=\"title\">Report 1 by Garcia</div>"));
    assert!(
        results.contains(
            "<summary>2 more attributes</summary><dl><dt>Keywords</dt><dd>cip, mesh</dd>"
        ),
        "{results}"
    );
    assert!(
        dom.contains("<section id=\"partial\" class=\"notice\" hidden=\"\">"),
        "no partial notice: {dom}"
    );
    assert!(dom.contains("<p id=\"more\" class=\"notice\" hidden=\"\">"));
    assert!(dom.contains("<p id=\"error\" class=\"error\" role=\"alert\" hidden=\"\">"));
    // The path: mid asked by the leaf (up), root by mid (up), each with one object.
    let path = element(&dom, "<table id=\"path\">", "</table>");
    assert_eq!(path.matches("<tr class=\"hop\"").count(), 2, "{path}");
    let mid_row = element(
        path,
        &format!("<tr class=\"hop\" data-dsi=\"{MID}\">"),
        "</tr>",
    );
    assert!(
        mid_row.contains(&format!(
            "<td class=\"mono\">{LEAF}</td><td class=\"num\">1</td><td>up</td>"
        )),
        "{mid_row}"
    );
    assert!(
        mid_row.contains("<td class=\"outcome\">ok</td><td class=\"num\">2</td>"),
        "mid and root's objects: {mid_row}"
    );
    let root_row = element(
        path,
        &format!("<tr class=\"hop\" data-dsi=\"{ROOT}\">"),
        "</tr>",
    );
    assert!(
        root_row.contains(&format!(
            "<td class=\"mono\">{MID}</td><td class=\"num\">2</td><td>up</td>"
        )),
        "{root_row}"
    );
    assert!(
        root_row.contains("<td class=\"outcome\">ok</td><td class=\"num\">1</td>"),
        "{root_row}"
    );
    let summary = element(&dom, "<p id=\"summary\"", "</p>");
    assert!(
        summary.contains(&format!("Answered by {LEAF} in ")),
        "{summary}"
    );
    assert!(
        summary.contains(" ms, 2 sub-requests; trace id "),
        "{summary}"
    );
    let trace_id = &summary[summary.find("trace id ").unwrap() + 9..];
    assert!(
        trace_id.len() > 32 && trace_id[..32].bytes().all(|b| b.is_ascii_hexdigit()),
        "a W3C trace id: {summary}"
    );
    screenshot(work.path(), &full, shots.join("1-three-holders.png"), 1500).await;

    // Fewer objects than the mesh holds: the page says so and offers twice the limit.
    let two = format!("{base}?q={GARCIA}&limit=2");
    let dom = page(work.path(), &two).await;
    assert_eq!(dom.matches("<li class=\"object\">").count(), 2, "{dom}");
    let more = element(&dom, "<p id=\"more\" class=\"notice\">", "</p>");
    assert!(
        more.contains("More objects match than the 2 objects shown.")
            && more.contains(&format!(
                "<a class=\"bigger\" href=\"/search?q={GARCIA}&amp;limit=4\">Show up to 4</a>"
            )),
        "{more}"
    );
    assert!(dom.contains("<section id=\"partial\" class=\"notice\" hidden=\"\">"));
    screenshot(work.path(), &two, shots.join("5-limit.png"), 900).await;

    // The hostile author, matched by a query: text only, and its javascript: URL no link.
    let hostile = format!("{base}?q=Author~script");
    let dom = page(work.path(), &hostile).await;
    let group = element(
        &dom,
        &format!("<section class=\"holder card\" data-dsi=\"{MID}\">"),
        "</section>",
    );
    assert!(
        group.contains(&format!("<div class=\"author\">by {ESCAPED}</div>")),
        "the author as text: {group}"
    );
    assert!(
        group.contains(&format!("<div class=\"title\">Notes by {ESCAPED}</div>")),
        "{group}"
    );
    assert!(
        group.contains("<span class=\"url mono\">javascript:alert(1)</span>"),
        "a javascript: URL is text: {group}"
    );
    assert!(!dom.contains("href=\"javascript:"), "{dom}");
    assert!(!dom.contains(HOSTILE), "no raw markup from the data: {dom}");
    assert_eq!(
        dom.matches("<script").count(),
        1,
        "only the page's own script element exists: {dom}"
    );
    assert_eq!(status(&dom), "1 object from 1 node.");
    screenshot(work.path(), &hostile, shots.join("3-hostile.png"), 900).await;

    // A syntax error: the node's message, nothing else.
    let broken = format!("{base}?q=Author%20Garcia");
    let dom = page(work.path(), &broken).await;
    let error = element(&dom, "<p id=\"error\"", "</p>");
    assert!(
        error
            .starts_with("<p id=\"error\" class=\"error\" role=\"alert\" data-kind=\"bad-query\">")
            && error.contains("at character 7: expected '=' or '~', found 'G'"),
        "{error}"
    );
    assert!(!dom.contains("<li class=\"object\">"), "{dom}");
    assert!(dom.contains("<section id=\"trace\" class=\"card\" hidden=\"\">"));
    screenshot(work.path(), &broken, shots.join("4-syntax-error.png"), 500).await;

    // An empty query is refused by the page itself.
    let empty = format!("{base}?q=");
    let dom = page(work.path(), &empty).await;
    let error = element(&dom, "<p id=\"error\"", "</p>");
    assert!(
        error.contains("data-kind=\"page\">The query is empty"),
        "{error}"
    );
    assert!(!dom.contains("<section class=\"holder"), "{dom}");
    screenshot(work.path(), &empty, shots.join("6-empty-query.png"), 400).await;

    for n in [root, mid, leaf] {
        n.stop().await;
    }
}
