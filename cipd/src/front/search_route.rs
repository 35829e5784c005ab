//! `GET /v1/search` (the search that chases referrals through the mesh, JSON) and `GET
//! /search` (a page for people: one box, results by the node that holds them).
//!
//! A client asks with `q` (the query language of `/v1/referrals`) and optionally `limit`,
//! `deadline` (milliseconds) and `depth`; each is capped by the node's `[search]` settings.
//! Another node's sub-request brings, besides, what is left of the budget, the DSIs asked
//! already, its direction and hop count (headers `CIP-Search-*`), and a `traceparent`
//! (PROTOCOL.md, "Search"). Who may search is `search.allow` and `search.rate`'s: others get
//! `403` or `429`.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Query as QueryParams, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use tokio::time::Instant;

use crate::front::api::ApiError;
use crate::node::Node;
use crate::node::search_host::SearchRefusal;
use crate::pipeline::search::remote::{
    BUDGET_HEADER, DIRECTION_HEADER, HOP_HEADER, VISITED_HEADER,
};
use crate::pipeline::search::{Direction, MAX_VISITED, SearchRequest, TraceContext};

/// Longest DSI taken from a `CIP-Search-Visited` header.
const MAX_DSI_LEN: usize = 256;

/// The page of `/search`.
const PAGE: &str = include_str!("search_page.html");

/// Parameters of `/v1/search`.
#[derive(Debug, Default, Deserialize)]
pub struct SearchArgs {
    /// The query.
    pub q: Option<String>,
    /// Most objects.
    pub limit: Option<String>,
    /// Milliseconds the search may take.
    pub deadline: Option<String>,
    /// Most hops.
    pub depth: Option<String>,
}

fn bad(name: &str, value: &str, expected: &str) -> ApiError {
    ApiError {
        status: StatusCode::BAD_REQUEST,
        kind: "bad-parameter",
        message: format!("{name}={value:?}: expected {expected}"),
    }
}

fn number(name: &str, raw: Option<&str>, min: u64) -> Result<Option<u64>, ApiError> {
    match raw {
        None => Ok(None),
        Some(s) => match s.trim().parse::<u64>() {
            Ok(n) if n >= min => Ok(Some(n)),
            _ => Err(bad(
                name,
                s,
                if min == 0 {
                    "a whole number"
                } else {
                    "a positive whole number"
                },
            )),
        },
    }
}

/// The search routes.
pub fn routes(node: Arc<Node>) -> Router {
    Router::new()
        .route("/v1/search", get(search))
        .route("/search", get(page))
        .with_state(node)
}

async fn page(State(node): State<Arc<Node>>) -> Response {
    if !node.config().search.enabled {
        return disabled().into_response();
    }
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
            ),
        ],
        Html(PAGE),
    )
        .into_response()
}

fn disabled() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "search-off",
        message: "this node does not search the mesh (search.enabled = false)".into(),
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The request as this node runs it, from the client's parameters and a sub-request's
/// headers, capped by `[search]`; and the key its answer is kept under.
///
/// # Errors
/// A `400` naming the parameter at fault.
pub fn request_of(
    node: &Node,
    args: &SearchArgs,
    headers: &HeaderMap,
) -> Result<(SearchRequest, String), ApiError> {
    let config = node.config();
    let s = &config.search;
    let query = match args.q.as_deref() {
        Some(q) if !q.trim().is_empty() => q.to_owned(),
        _ => {
            return Err(ApiError {
                status: StatusCode::BAD_REQUEST,
                kind: "missing-query",
                message: "the q parameter (the query) is required".into(),
            });
        }
    };
    let parsed = node.parse_query(&query)?;
    let max_limit = config.limits.max_objects.max(1);
    let limit = number("limit", args.limit.as_deref(), 1)?
        .map_or(s.default_limit, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        })
        .min(max_limit);
    let deadline_ms = number("deadline", args.deadline.as_deref(), 1)?;
    let deadline = deadline_ms
        .map_or(s.deadline, Duration::from_millis)
        .min(s.deadline);
    let depth = number("depth", args.depth.as_deref(), 0)?
        .map_or(s.max_depth, |n| u32::try_from(n).unwrap_or(u32::MAX))
        .min(s.max_depth);
    let direction = match header_str(headers, DIRECTION_HEADER) {
        None => Direction::Entry,
        Some(d) => Direction::parse(d).ok_or_else(|| bad(DIRECTION_HEADER, d, "down or up"))?,
    };
    // A sub-request spends what its sender left it, never more than this node allows.
    let budget = match header_str(headers, BUDGET_HEADER) {
        None => s.max_subqueries,
        Some(b) => b
            .trim()
            .parse::<u32>()
            .map_err(|_| bad(BUDGET_HEADER, b, "a whole number"))?
            .min(s.max_subqueries),
    };
    let visited: BTreeSet<String> = header_str(headers, VISITED_HEADER)
        .unwrap_or("")
        .split_whitespace()
        .filter(|d| d.len() <= MAX_DSI_LEN)
        .take(MAX_VISITED)
        .map(str::to_owned)
        .collect();
    let hop = header_str(headers, HOP_HEADER)
        .and_then(|h| h.trim().parse::<u32>().ok())
        .unwrap_or(0)
        .min(64);
    let trace = header_str(headers, crate::pipeline::search::trace::HEADER)
        .and_then(TraceContext::parse)
        .unwrap_or_default();
    let key = format!(
        "{}\u{1f}{limit}\u{1f}{depth}\u{1f}{budget}\u{1f}{}\u{1f}{}",
        direction.as_str(),
        visited.iter().cloned().collect::<Vec<_>>().join(" "),
        query
    );
    Ok((
        SearchRequest {
            query,
            parsed,
            limit,
            deadline: Instant::now() + deadline,
            depth,
            budget,
            visited,
            direction,
            hop,
            trace,
        },
        key,
    ))
}

async fn search(
    State(node): State<Arc<Node>>,
    ConnectInfo(remote): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    QueryParams(args): QueryParams<SearchArgs>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    match node.search_admits(remote.ip()) {
        Ok(()) => {}
        Err(SearchRefusal::Disabled) => return Err(disabled()),
        Err(SearchRefusal::Denied) => {
            return Err(ApiError {
                status: StatusCode::FORBIDDEN,
                kind: "search-denied",
                message: format!(
                    "{} may not search through this node (search.allow)",
                    remote.ip()
                ),
            });
        }
        Err(SearchRefusal::RateLimited) => {
            let mut r = ApiError {
                status: StatusCode::TOO_MANY_REQUESTS,
                kind: "rate-limited",
                message: format!(
                    "more than {} searches per second from {} (search.rate)",
                    node.config().search.rate,
                    remote.ip()
                ),
            }
            .into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return Ok(r);
        }
    }
    let (req, key) = request_of(&node, &args, &headers)?;
    let json = if let Some(hit) = node.cached_search(&key, &req.trace.trace_id, started) {
        if req.direction == Direction::Entry {
            node.note_search_cache_hit(started.elapsed());
        }
        hit
    } else {
        node.search(req, key).await.1
    };
    Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response())
}
