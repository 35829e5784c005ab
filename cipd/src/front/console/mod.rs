//! The operators' web console: a read-only page on the HTTP listener and the JSON endpoints
//! it is drawn from (issue #17).
//!
//! The page (`console.path`, default `/`) is a static shell; `app.js` fills it from
//! `/v1/node`, `/v1/status`, `/v1/peers`, `/v1/mesh`, `/v1/table`, `/v1/explain`,
//! `/v1/referrals` and `/v1/counters`. The shell, the script and the stylesheet are compiled
//! into the binary (`include_str!`): no CDN, no build step. Assets sit under
//! `<path>/console/` and every route is a literal path, so the console shadows nothing.
//!
//! `/v1/node`, `/v1/peers`, `/v1/table` and `/v1/explain` are the admin socket's `status`,
//! `peers`, `table` and `explain`: each calls `NodeAdmin`, the backend the socket uses, so
//! both answer the same. `/v1/mesh` (the picture's data: roles, backoff, provenance) and
//! `/v1/counters` (cumulative counters the page turns into rates) are the console's own.
//!
//! Nothing here changes state. Every answer carries a strict Content-Security-Policy (no
//! inline script or style, no foreign origin), `X-Content-Type-Options: nosniff`,
//! `Referrer-Policy: no-referrer` and `Cache-Control: no-store`. With `console.token` set,
//! the page and the JSON endpoints want `Authorization: Bearer <token>`; the page also
//! takes `?token=<token>` so a browser can open it. The static assets hold no data and are
//! served without it.

mod auth;
mod handlers;
mod types;

use std::sync::Arc;

use axum::http::header;
use axum::middleware;
use axum::routing::get;
use axum::{Json, Router};

pub use self::auth::CONTENT_SECURITY_POLICY;
use self::auth::{Guard, require_token, security_headers};
pub use self::handlers::{ExplainArgs, MAX_TOP, TableArgs};
use self::handlers::{counters, explain, mesh, node_info, peers, table};
use self::types::sample_history;
pub use self::types::{
    Counters, HISTORY_EVERY, HISTORY_SAMPLES, History, MeshDataset, MeshInfo, MeshPeer,
    counters_now, mesh_info,
};
pub use crate::model::routes::CONSOLE_ENDPOINTS as ENDPOINTS;
use crate::node::Node;

/// The page's shell; `{{ASSETS}}` and `{{PATH}}` are filled in, escaped, when routes are
/// built.
const INDEX_HTML: &str = include_str!("assets/index.html");
/// The script that draws the page.
const APP_JS: &str = include_str!("assets/app.js");
/// The stylesheet.
const STYLE_CSS: &str = include_str!("assets/style.css");

/// The console's routes for a page at `path` (validated by the configuration: a literal
/// path that overlaps no other route).
pub fn routes(node: Arc<Node>, path: &str) -> Router {
    // The counters are sampled here from the start, so the page's activity lines have a
    // few minutes of history the moment it opens.
    let history = Arc::new(History::default());
    node.tracker
        .spawn(sample_history(node.clone(), history.clone()));
    let assets = format!("{}/console/", path.trim_end_matches('/'));
    let page: Arc<str> = render_page(path, &assets).into();
    let guard = Guard {
        node: node.clone(),
        page_path: path.into(),
    };
    let guarded = Router::new()
        .route(
            path,
            get(move || {
                let page = page.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                        page.to_string(),
                    )
                }
            }),
        )
        .route("/v1/node", get(node_info))
        .route("/v1/peers", get(peers))
        .route("/v1/table", get(table))
        .route("/v1/explain", get(explain))
        .route("/v1/mesh", get(mesh))
        .route("/v1/counters", get(counters))
        .route(
            "/v1/counters/history",
            get(move || {
                let history = history.clone();
                async move { Json(history.samples()) }
            }),
        )
        .route_layer(middleware::from_fn_with_state(guard, require_token))
        .with_state(node);
    let public = Router::new()
        .route(
            &format!("{assets}app.js"),
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    APP_JS,
                )
            }),
        )
        .route(
            &format!("{assets}style.css"),
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
                    STYLE_CSS,
                )
            }),
        );
    guarded
        .merge(public)
        .layer(middleware::from_fn(security_headers))
}

/// The page's HTML: the shell with the asset directory and the console path filled in.
pub fn render_page(path: &str, assets: &str) -> String {
    INDEX_HTML
        .replace("{{ASSETS}}", &escape_html(assets))
        .replace("{{PATH}}", &escape_html(path))
}

/// `text` made safe for HTML text and quoted attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use bytes::Bytes;
    use cip_proto::Dsi;
    use cip_proto::cip::IndexObject;
    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use axum::http::{HeaderMap, HeaderValue};

    use super::auth::{bearer, same_secret};
    use super::*;
    use crate::daemon::{Daemon, RunningDaemon};
    use crate::front::admin::backend::NodeAdmin;
    use crate::front::admin::{AdminBackend, AdminRequest};
    use crate::model::config::Config;

    const HUB: &str = "1.3.6.1.4.1.99999.80";
    const LEAF: &str = "1.3.6.1.4.1.99999.81";
    const HOSTILE: &str = "<script>alert(1)</script>";
    const TOKEN: &str = "console-test-token-0123456789";

    /// A hub with one pushing peer, `leaf`, whose hint holds a hostile author.
    async fn hub(console: &str) -> (RunningDaemon, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "data_dir = {:?}\n[node]\ndsi = \"{HUB}\"\ndescription = \"console test hub\"\n\
             [listen]\nhttp = [\"127.0.0.1:0\"]\n\
             [[peer]]\nname = \"leaf\"\nhost = \"127.0.0.1\"\nrole = \"pusher\"\ndsi = \"{LEAF}\"\n\
             {console}",
            dir.path().join("spool").display().to_string()
        );
        let config = Config::from_toml(&text).unwrap();
        let daemon = Daemon::start(config).await.unwrap();
        let mut payload = String::from("@CIP-HINT { -\n");
        let list = "DOCUMENT:Author";
        let weights = format!("Garcia;2, {HOSTILE};1");
        for (name, value) in [
            ("Attribute-Identifier-List", list),
            ("Total-Object-Count", "3"),
            ("Weightlist-[DOCUMENT:Author]", weights.as_str()),
        ] {
            payload.push_str(&format!("{name}{{{}}}:\t{value}\n", value.len()));
        }
        payload.push_str("}\n");
        let object = IndexObject {
            index_type: crate::node::hint_type(),
            dsi: Dsi::new(LEAF).unwrap(),
            base_uris: vec!["http://leaf.example/".into()],
            dsi_description: Some(format!("leaf {HOSTILE}")),
            payload: Bytes::from(payload),
        };
        daemon
            .node()
            .accept_index("leaf", object)
            .await
            .expect("the leaf's hint is accepted");
        (daemon, dir)
    }

    /// An HTTP answer: status, headers (names in lower case) and body.
    struct Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Answer {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }

        fn json(&self) -> Value {
            serde_json::from_str(&self.body)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
        }
    }

    /// `GET path` with `headers` (each line ending in CRLF), on a connection of its own.
    async fn get(addr: SocketAddr, path: &str, headers: &str) -> Answer {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}\r\n");
        s.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut raw))
            .await
            .expect("an answer within the bound")
            .unwrap();
        let raw = String::from_utf8(raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").expect("a header block");
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap()[9..12].parse().unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        Answer {
            status,
            headers,
            body: body.to_owned(),
        }
    }

    async fn admin_answer(daemon: &RunningDaemon, request: AdminRequest) -> Value {
        NodeAdmin::new(daemon.node().clone())
            .handle(request)
            .await
            .unwrap()
    }

    /// Drops keys whose values move with the clock.
    fn without(mut v: Value, keys: &[&str]) -> Value {
        match &mut v {
            Value::Object(map) => {
                for k in keys {
                    map.remove(*k);
                }
                for (_, x) in map.iter_mut() {
                    *x = without(x.take(), keys);
                }
            }
            Value::Array(items) => {
                for x in items.iter_mut() {
                    *x = without(x.take(), keys);
                }
            }
            _ => {}
        }
        v
    }

    fn assert_secure(a: &Answer, what: &str) {
        assert_eq!(
            a.header("content-security-policy"),
            Some(CONTENT_SECURITY_POLICY),
            "{what}"
        );
        assert_eq!(
            a.header("x-content-type-options"),
            Some("nosniff"),
            "{what}"
        );
        assert_eq!(a.header("referrer-policy"), Some("no-referrer"), "{what}");
        assert_eq!(a.header("x-frame-options"), Some("DENY"), "{what}");
        assert_eq!(a.header("cache-control"), Some("no-store"), "{what}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn json_endpoints_answer_as_the_admin_socket() {
        let (daemon, _dir) = hub("").await;
        let addr = daemon.http_addr().unwrap();

        let peers = get(addr, "/v1/peers", "").await;
        assert_eq!(peers.status, 200, "{}", peers.body);
        assert_eq!(peers.header("content-type"), Some("application/json"));
        assert_secure(&peers, "/v1/peers");
        let expected = admin_answer(&daemon, AdminRequest::Peers).await;
        assert_eq!(
            without(peers.json(), &["hint_age_seconds"]),
            without(expected, &["hint_age_seconds"])
        );
        assert_eq!(peers.json()["peers"][0]["name"], "leaf");

        let node = get(addr, "/v1/node", "").await;
        let expected = admin_answer(&daemon, AdminRequest::Status).await;
        assert_eq!(
            without(
                node.json(),
                &["uptime_seconds", "last_build_seconds", "lag_seconds"]
            ),
            without(
                expected,
                &["uptime_seconds", "last_build_seconds", "lag_seconds"]
            )
        );
        assert_eq!(node.json()["dsi"], HUB);

        let table = get(
            addr,
            "/v1/table?attr=DOCUMENT:Author&prefix=%3Cscr&top=5",
            "",
        )
        .await;
        assert_eq!(table.status, 200, "{}", table.body);
        let expected = admin_answer(
            &daemon,
            AdminRequest::Table {
                attr: Some("DOCUMENT:Author".into()),
                peer: None,
                prefix: Some("<scr".into()),
                top: 5,
            },
        )
        .await;
        assert_eq!(table.json(), expected);
        assert_eq!(
            table.json()["rows"],
            json!([{"attr": "DOCUMENT:Author", "value": HOSTILE, "total": 1,
                    "peers": [[LEAF, 1]]}])
        );
        let all = get(addr, "/v1/table?peer=", "").await.json();
        assert_eq!(all["rows"].as_array().unwrap().len(), 2, "{all}");

        let explain = get(addr, "/v1/explain?q=Author~script&possible=false", "").await;
        assert_eq!(explain.status, 200, "{}", explain.body);
        let expected = admin_answer(
            &daemon,
            AdminRequest::Explain {
                query: "Author~script".into(),
                possible: false,
            },
        )
        .await;
        assert_eq!(explain.json(), expected);
        let referral = &explain.json()["referrals"][0];
        assert_eq!(referral["dsi"], LEAF);
        assert_eq!(referral["terms"][0]["matches"][0][1], HOSTILE);

        let mesh = get(addr, "/v1/mesh", "").await;
        assert_secure(&mesh, "/v1/mesh");
        let mesh: MeshInfo = serde_json::from_str(&mesh.body).unwrap();
        assert_eq!(mesh.dsi, HUB);
        assert_eq!(mesh.description.as_deref(), Some("console test hub"));
        assert_eq!(mesh.peers.len(), 1);
        assert_eq!(mesh.peers[0].roles, ["pusher"]);
        assert_eq!(mesh.datasets.len(), 1);
        let d = &mesh.datasets[0];
        assert_eq!(
            (d.dsi.as_str(), d.via.as_deref(), d.total),
            (LEAF, Some("leaf"), 3)
        );
        assert_eq!(d.description.as_deref(), Some(&*format!("leaf {HOSTILE}")));

        let counters: Counters =
            serde_json::from_str(&get(addr, "/v1/counters", "").await.body).unwrap();
        for path in ENDPOINTS {
            let a = get(addr, &format!("{path}?q=Author%3DGarcia"), "").await;
            assert_eq!(a.status, 200, "{path}: {}", a.body);
        }
        assert_eq!(counters.imports, 1);
        assert!(counters.uptime_seconds > 0.0 && counters.unix_ms > 0);
        assert!(daemon.shutdown().await);
    }

    #[test]
    fn history_keeps_the_last_samples_oldest_first() {
        let h = History::default();
        for i in 0..(HISTORY_SAMPLES as u64 + 10) {
            h.push(Counters {
                unix_ms: i,
                uptime_seconds: i as f64,
                polls: i,
                polls_failed: 0,
                imports: 0,
                rejected: 0,
                queries: 0,
            });
        }
        let s = h.samples();
        assert_eq!(s.len(), HISTORY_SAMPLES);
        assert_eq!(s[0].polls, 10);
        assert_eq!(s.last().unwrap().polls, HISTORY_SAMPLES as u64 + 9);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_parameters_are_json_errors() {
        let (daemon, _dir) = hub("").await;
        let addr = daemon.http_addr().unwrap();
        for (path, kind) in [
            ("/v1/explain", "missing-query"),
            ("/v1/explain?q=%20", "missing-query"),
            ("/v1/explain?q=Author", "bad-query"),
            ("/v1/explain?q=Author%3Dx&possible=maybe", "bad-parameter"),
            ("/v1/table?top=0", "bad-parameter"),
            ("/v1/table?top=5000", "bad-parameter"),
            ("/v1/table?attr=no%20such%20thing", "bad-parameter"),
            ("/v1/table?peer=not-a-dsi", "bad-parameter"),
        ] {
            let a = get(addr, path, "").await;
            assert_eq!(a.status, 400, "{path}: {}", a.body);
            assert_eq!(a.json()["error"], kind, "{path}: {}", a.body);
            assert_secure(&a, path);
        }
        assert!(daemon.shutdown().await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_page_and_assets_are_served_with_strict_headers() {
        let (daemon, _dir) = hub("").await;
        let addr = daemon.http_addr().unwrap();
        let page = get(addr, "/", "").await;
        assert_eq!(page.status, 200);
        assert_eq!(
            page.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        assert_secure(&page, "/");
        assert!(
            page.body
                .contains(r#"<script src="/console/app.js" defer></script>"#)
        );
        assert!(page.body.contains(r#"href="/console/style.css""#));
        assert!(page.body.contains(r#"data-console-path="/""#));
        assert!(!page.body.contains("{{"), "every placeholder filled");
        for (path, kind) in [
            ("/console/app.js", "text/javascript; charset=utf-8"),
            ("/console/style.css", "text/css; charset=utf-8"),
        ] {
            let a = get(addr, path, "").await;
            assert_eq!(
                (a.status, a.header("content-type")),
                (200, Some(kind)),
                "{path}"
            );
            assert_secure(&a, path);
        }
        // The other routes are still there, and nothing else answers under the console.
        assert_eq!(get(addr, "/v1/status", "").await.status, 200);
        assert_eq!(get(addr, "/metrics", "").await.status, 200);
        assert_eq!(get(addr, "/hina.di", "").await.status, 200);
        for path in ["/console/", "/console/nope.js", "/index.html", "/v1/nope"] {
            let a = get(addr, path, "").await;
            assert_eq!(a.status, 404, "{path}");
            assert_eq!(a.json()["error"], "not-found", "{path}");
        }
        assert!(daemon.shutdown().await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_console_moves_or_turns_off() {
        let (daemon, _dir) = hub("[console]\npath = \"/ops\"\n").await;
        let addr = daemon.http_addr().unwrap();
        let page = get(addr, "/ops", "").await;
        assert_eq!(page.status, 200);
        assert!(page.body.contains(r#"src="/ops/console/app.js""#));
        assert!(page.body.contains(r#"data-console-path="/ops""#));
        assert_eq!(get(addr, "/ops/console/app.js", "").await.status, 200);
        assert_eq!(get(addr, "/", "").await.status, 404);
        assert_eq!(get(addr, "/console/app.js", "").await.status, 404);
        assert_eq!(get(addr, "/v1/peers", "").await.status, 200);
        assert!(daemon.shutdown().await);

        let (daemon, _dir) = hub("[console]\npath = \"\"\n").await;
        let addr = daemon.http_addr().unwrap();
        for path in [
            "/",
            "/console/app.js",
            "/v1/peers",
            "/v1/mesh",
            "/v1/explain?q=a%3Db",
        ] {
            assert_eq!(get(addr, path, "").await.status, 404, "{path}");
        }
        assert_eq!(get(addr, "/v1/status", "").await.status, 200);
        assert!(daemon.shutdown().await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_token_guards_the_page_and_the_json() {
        let (daemon, _dir) = hub(&format!("[console]\ntoken = \"{TOKEN}\"\n")).await;
        let addr = daemon.http_addr().unwrap();
        let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
        for path in [
            "/",
            "/v1/peers",
            "/v1/node",
            "/v1/table",
            "/v1/mesh",
            "/v1/counters",
        ] {
            let a = get(addr, path, "").await;
            assert_eq!(a.status, 401, "{path}");
            assert_eq!(a.json()["error"], "unauthorized");
            assert_eq!(
                a.header("www-authenticate"),
                Some("Bearer realm=\"cipd console\"")
            );
            assert_secure(&a, path);
            let wrong = get(addr, path, "Authorization: Bearer nope-nope-nope-nope\r\n").await;
            assert_eq!(wrong.status, 401, "{path}");
            assert_eq!(get(addr, path, &bearer).await.status, 200, "{path}");
            let lower = format!("authorization: bearer {TOKEN}\r\n");
            assert_eq!(get(addr, path, &lower).await.status, 200, "{path}");
        }
        // The query-string token opens the page only; the script sends the header.
        assert_eq!(get(addr, &format!("/?token={TOKEN}"), "").await.status, 200);
        assert_eq!(
            get(addr, "/?token=nope-nope-nope-nope", "").await.status,
            401
        );
        let json = get(addr, &format!("/v1/peers?token={TOKEN}"), "").await;
        assert_eq!(json.status, 401);
        // Static assets hold no data.
        assert_eq!(get(addr, "/console/app.js", "").await.status, 200);
        // The query API keeps its own (open) access.
        assert_eq!(get(addr, "/v1/status", "").await.status, 200);
        assert!(daemon.shutdown().await);
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape_html(r#"<script>alert("x" & 'y')</script>"#),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
        let page = render_page("/a\"><script>", "/a\"><script>/console/");
        assert!(!page.contains("\"><script>"), "{page}");
        assert!(page.contains("data-console-path=\"/a&quot;&gt;&lt;script&gt;\""));
    }

    #[test]
    fn the_policy_is_strict() {
        let directives = [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "form-action 'self'",
        ];
        assert_eq!(CONTENT_SECURITY_POLICY, directives.join("; "));
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_secret(TOKEN, TOKEN));
        assert!(!same_secret("console-test-token-012345678X", TOKEN));
        assert!(!same_secret("console-test-token", TOKEN));
        assert!(!same_secret("", TOKEN));
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&h), None);
    }

    /// The script puts data in the page as text only; the shell has nothing inline for the
    /// CSP to refuse.
    #[test]
    fn assets_never_treat_data_as_html() {
        for banned in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "javascript:",
            "DOMParser",
            "createContextualFragment",
        ] {
            assert!(!APP_JS.contains(banned), "app.js uses {banned}");
        }
        let shell = INDEX_HTML.to_ascii_lowercase();
        assert_eq!(shell.matches("<script").count(), 1);
        assert!(shell.contains("<script src="));
        assert!(!shell.contains("<style"));
        assert!(!shell.contains(" style="));
        assert!(!shell.contains(" onclick=") && !shell.contains(" onload="));
        assert!(
            !shell.contains("http://") && !shell.contains("https://") || {
                // Only the SVG namespace, which fetches nothing.
                shell.matches("http").count() == shell.matches("http://www.w3.org/2000/svg").count()
            }
        );
        assert!(!STYLE_CSS.contains("@import") && !STYLE_CSS.contains("url("));
    }
}
