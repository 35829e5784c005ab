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
//! `peers`, `table` and `explain`: each calls [`NodeAdmin`], the backend the socket uses, so
//! both answer the same. `/v1/mesh` (the picture's data: roles, backoff, provenance) and
//! `/v1/counters` (cumulative counters the page turns into rates) are the console's own.
//!
//! Nothing here changes state. Every answer carries a strict Content-Security-Policy (no
//! inline script or style, no foreign origin), `X-Content-Type-Options: nosniff`,
//! `Referrer-Policy: no-referrer` and `Cache-Control: no-store`. With `console.token` set,
//! the page and the JSON endpoints want `Authorization: Bearer <token>`; the page also
//! takes `?token=<token>` so a browser can open it. The static assets hold no data and are
//! served without it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{Query as QueryParams, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::front::admin::backend::NodeAdmin;
use crate::front::admin::{AdminBackend, AdminError, AdminRequest};
use crate::front::api::ApiError;
pub use crate::model::routes::CONSOLE_ENDPOINTS as ENDPOINTS;
use crate::node::Node;

/// The page's shell; `{{ASSETS}}` and `{{PATH}}` are filled in, escaped, when routes are
/// built.
const INDEX_HTML: &str = include_str!("assets/index.html");
/// The script that draws the page.
const APP_JS: &str = include_str!("assets/app.js");
/// The stylesheet.
const STYLE_CSS: &str = include_str!("assets/style.css");

/// The Content-Security-Policy of every console answer: this origin's script, style and
/// fetches only, nothing inline, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
     base-uri 'none'; form-action 'self'";

/// Most rows `/v1/table` answers (`top`).
pub const MAX_TOP: usize = 1000;

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

/// `/v1/mesh`: what the mesh picture needs beyond `/v1/peers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeshInfo {
    /// This node's DSI.
    pub dsi: String,
    /// This node's base URIs.
    pub base_uris: Vec<String>,
    /// This node's DSI-description.
    pub description: Option<String>,
    /// Configured peers, with their roles and poll schedule.
    pub peers: Vec<MeshPeer>,
    /// Every dataset in the routing table, with the peer it came through and its provenance.
    pub datasets: Vec<MeshDataset>,
}

/// A configured peer in `/v1/mesh`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshPeer {
    /// Configured name.
    pub name: String,
    /// Roles (`poll`, `poller`, `push`, `pusher`).
    pub roles: Vec<String>,
    /// The peer's DSI, configured or learned.
    pub dsi: Option<String>,
    /// Failed attempts since the last success (the poll backoff grows with them).
    pub consecutive_failures: u32,
    /// Unix seconds when the next poll (or push) is due.
    pub next_poll: Option<u64>,
    /// Successful polls or pushes.
    pub successes: u64,
    /// Failed polls or pushes.
    pub failures: u64,
}

/// A dataset of the routing table in `/v1/mesh`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshDataset {
    /// Its DSI.
    pub dsi: String,
    /// Its base URIs.
    pub base_uris: Vec<String>,
    /// Its DSI-description.
    pub description: Option<String>,
    /// The configured peer its hint came through.
    pub via: Option<String>,
    /// DSIs its hint says it aggregates (Provenance-N).
    pub provenance: Vec<String>,
    /// Total-Object-Count of its hint.
    pub total: u64,
    /// Unix seconds when its hint expires.
    pub expires: Option<u64>,
}

/// `/v1/counters`: cumulative counters; the page turns two samples into rates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Unix milliseconds when sampled.
    pub unix_ms: u64,
    /// Seconds since the daemon started (the clock to take rates against).
    pub uptime_seconds: f64,
    /// Polls done, successful or not (`cipd_polls_total`).
    pub polls: u64,
    /// Of those, failed.
    pub polls_failed: u64,
    /// In-bound index objects accepted (`cipd_index_objects_received_total`).
    pub imports: u64,
    /// In-bound index objects refused (`cipd_index_objects_rejected_total`).
    pub rejected: u64,
    /// Referral queries answered (`cipd_queries_total`).
    pub queries: u64,
}

/// How often the counters are sampled for `/v1/counters/history`.
pub const HISTORY_EVERY: std::time::Duration = std::time::Duration::from_secs(2);
/// Samples kept: three minutes.
pub const HISTORY_SAMPLES: usize = 90;

/// The last [`HISTORY_SAMPLES`] counter samples, oldest first.
#[derive(Debug, Default)]
pub struct History(std::sync::Mutex<std::collections::VecDeque<Counters>>);

impl History {
    /// Adds a sample, dropping the oldest past [`HISTORY_SAMPLES`].
    pub fn push(&self, c: Counters) {
        let mut h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        h.push_back(c);
        while h.len() > HISTORY_SAMPLES {
            h.pop_front();
        }
    }

    /// Every sample kept, oldest first.
    pub fn samples(&self) -> Vec<Counters> {
        let h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        h.iter().copied().collect()
    }
}

/// Samples the counters every [`HISTORY_EVERY`] until the node shuts down.
async fn sample_history(node: Arc<Node>, history: Arc<History>) {
    let token = node.token.child_token();
    let mut every = tokio::time::interval(HISTORY_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            _ = every.tick() => history.push(counters_now(&node)),
        }
    }
}

/// What the token check needs.
#[derive(Clone)]
struct Guard {
    node: Arc<Node>,
    page_path: Arc<str>,
}

/// Refuses requests without the configured token (read per request: a reload that sets or
/// changes it takes effect at once).
async fn require_token(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    let config = guard.node.config();
    let Some(token) = config.console.token.as_deref() else {
        return next.run(req).await;
    };
    let bearer = bearer(req.headers()).is_some_and(|t| same_secret(t, token));
    let query = req.uri().path() == &*guard.page_path
        && QueryParams::<HashMap<String, String>>::try_from_uri(req.uri())
            .ok()
            .and_then(|q| q.0.get("token").map(|t| same_secret(t, token)))
            .unwrap_or(false);
    if bearer || query {
        return next.run(req).await;
    }
    let mut response = ApiError {
        status: StatusCode::UNAUTHORIZED,
        kind: "unauthorized",
        message: "this console wants its token: send Authorization: Bearer <token> \
                  (or open the page with ?token=<token>)"
            .into(),
    }
    .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"cipd console\""),
    );
    response
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Compares without stopping at the first difference, so timing tells nothing of the
/// token's bytes (its length is no secret: it is at least 16).
fn same_secret(given: &str, secret: &str) -> bool {
    let (a, b) = (given.as_bytes(), secret.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Adds the security headers to every console answer, errors included.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// Parameters of `/v1/table`.
#[derive(Debug, Default, Deserialize)]
pub struct TableArgs {
    /// Only this `Template:Attribute`.
    pub attr: Option<String>,
    /// Only this peer's DSI.
    pub peer: Option<String>,
    /// Only values starting with this (ASCII case ignored).
    pub prefix: Option<String>,
    /// At most this many rows (default 50, at most [`MAX_TOP`]).
    pub top: Option<String>,
}

impl TableArgs {
    /// The admin request these parameters make.
    ///
    /// # Errors
    /// `bad-parameter` for a `top` that is not 1 to [`MAX_TOP`].
    pub fn request(self) -> Result<AdminRequest, ApiError> {
        let top = match self.top.as_deref().map(str::trim) {
            None | Some("") => 50,
            Some(s) => match s.parse::<usize>() {
                Ok(n) if (1..=MAX_TOP).contains(&n) => n,
                _ => {
                    return Err(bad_parameter(format!(
                        "top={s:?}: expected an integer from 1 to {MAX_TOP}"
                    )));
                }
            },
        };
        let given = |v: Option<String>| v.filter(|s| !s.is_empty());
        Ok(AdminRequest::Table {
            attr: given(self.attr),
            peer: given(self.peer),
            prefix: given(self.prefix),
            top,
        })
    }
}

/// Parameters of `/v1/explain`.
#[derive(Debug, Default, Deserialize)]
pub struct ExplainArgs {
    /// The query, as `/v1/referrals` takes it.
    pub q: Option<String>,
    /// Include possible referrals (`true`/`false`).
    pub possible: Option<String>,
}

impl ExplainArgs {
    /// The admin request these parameters make.
    ///
    /// # Errors
    /// `missing-query` without `q`, `bad-parameter` for a `possible` that is no boolean.
    pub fn request(self) -> Result<AdminRequest, ApiError> {
        let query = match self.q {
            Some(q) if !q.trim().is_empty() => q,
            _ => {
                return Err(ApiError {
                    status: StatusCode::BAD_REQUEST,
                    kind: "missing-query",
                    message: "the q parameter (the query) is required".into(),
                });
            }
        };
        let possible = match self.possible.as_deref() {
            None | Some("false" | "0" | "no") => false,
            Some("true" | "1" | "yes" | "") => true,
            Some(other) => {
                return Err(bad_parameter(format!(
                    "possible={other:?}: expected true or false"
                )));
            }
        };
        Ok(AdminRequest::Explain { query, possible })
    }
}

fn bad_parameter(message: String) -> ApiError {
    ApiError {
        status: StatusCode::BAD_REQUEST,
        kind: "bad-parameter",
        message,
    }
}

/// An admin refusal as an HTTP error; `invalid` is the kind an invalid argument gets.
fn admin_error(e: AdminError, invalid: &'static str) -> ApiError {
    let (status, kind) = match &e {
        AdminError::InvalidArgument(_) => (StatusCode::BAD_REQUEST, invalid),
        AdminError::UnknownPeer(_) => (StatusCode::NOT_FOUND, "not-found"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
    };
    ApiError {
        status,
        kind,
        message: e.to_string(),
    }
}

/// Answers `request` as the admin socket would.
async fn admin(node: Arc<Node>, request: AdminRequest) -> Result<Response, ApiError> {
    let value = NodeAdmin::new(node)
        .handle(request)
        .await
        .map_err(|e| admin_error(e, "bad-parameter"))?;
    Ok(Json(value).into_response())
}

/// As [`admin`], for commands that may scan the table (a substring query, a prefix): on the
/// blocking pool, at most `limits.max_concurrent_scans` at once, like `/v1/referrals`.
async fn admin_scan(
    node: Arc<Node>,
    request: AdminRequest,
    invalid: &'static str,
) -> Result<Response, ApiError> {
    let _turn = node.scan_permit().await;
    let runtime = tokio::runtime::Handle::current();
    let backend = NodeAdmin::new(node.clone());
    // `block_on` is allowed on a blocking-pool thread; `table` and `explain` never wait on
    // I/O, so this only moves their CPU work off the async workers.
    let answer = tokio::task::spawn_blocking(move || runtime.block_on(backend.handle(request)))
        .await
        .map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "internal",
            message: format!("console task failed: {e}"),
        })?;
    Ok(Json(answer.map_err(|e| admin_error(e, invalid))?).into_response())
}

async fn node_info(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    admin(node, AdminRequest::Status).await
}

async fn peers(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    admin(node, AdminRequest::Peers).await
}

async fn table(
    State(node): State<Arc<Node>>,
    QueryParams(args): QueryParams<TableArgs>,
) -> Result<Response, ApiError> {
    admin_scan(node, args.request()?, "bad-parameter").await
}

async fn explain(
    State(node): State<Arc<Node>>,
    QueryParams(args): QueryParams<ExplainArgs>,
) -> Result<Response, ApiError> {
    admin_scan(node, args.request()?, "bad-query").await
}

async fn mesh(State(node): State<Arc<Node>>) -> Json<MeshInfo> {
    Json(mesh_info(&node))
}

async fn counters(State(node): State<Arc<Node>>) -> Json<Counters> {
    Json(counters_now(&node))
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The data of the mesh picture.
pub fn mesh_info(node: &Node) -> MeshInfo {
    let identity = node.identity();
    let peers = node
        .peer_states()
        .into_iter()
        .map(|p| MeshPeer {
            name: p.name,
            roles: p.roles,
            dsi: p.dsi,
            consecutive_failures: p.consecutive_failures,
            next_poll: p.next_attempt.map(unix),
            successes: p.successes,
            failures: p.failures,
        })
        .collect();
    let datasets = node
        .table()
        .peers()
        .into_iter()
        .map(|s| MeshDataset {
            dsi: s.dsi.to_string(),
            base_uris: s.base_uris,
            description: s.dsi_description,
            via: s.via,
            provenance: s.provenance.iter().map(ToString::to_string).collect(),
            total: s.total,
            expires: s.expires.map(unix),
        })
        .collect();
    MeshInfo {
        dsi: identity.dsi.to_string(),
        base_uris: identity.base_uris.clone(),
        description: identity.description.clone(),
        peers,
        datasets,
    }
}

/// The counters now.
pub fn counters_now(node: &Node) -> Counters {
    let m = node.metrics();
    let (ok, failed) = m
        .polls()
        .values()
        .fold((0, 0), |(ok, failed), c| (ok + c.ok, failed + c.failed));
    Counters {
        unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        uptime_seconds: node.uptime().as_secs_f64(),
        polls: ok + failed,
        polls_failed: failed,
        imports: m.index_objects_received.get(),
        rejected: m.index_objects_rejected.get(),
        queries: m.queries.get(),
    }
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

    use super::*;
    use crate::daemon::{Daemon, RunningDaemon};
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
