//! The search that chases referrals for its client (RFC 2651 §4: "Proxies may chase them
//! for simple clients"), so that any node answers with the objects of the whole mesh.
//!
//! **Chaining, not iteration** (PROTOCOL.md, "Search"). A node asked for a search answers
//! with its own objects and asks the nodes its routing table refers to, each of which does
//! the same below it and answers with everything it found: X.500's chaining (X.518), not
//! DNS's iteration from one resolver. Only the nodes that poll a node know the Base-URIs
//! its hint refers to and may contact them (the target rules below), so each node must
//! chase its own referrals; and a sub-answer is the merged answer of a whole subtree, which
//! the asking node caches as one.
//!
//! **Widening.** A search that enters at a node (or reaches it from below) also asks the
//! nodes that poll this one (RFC 1913's POLLED-BY; they learnt of each other from the
//! `base-uri` a poller names on its polls): a leaf's table is empty, but its parent's covers
//! its siblings and its parent's parent the rest. A request that came from above goes only
//! down: the asker covers the rest.
//!
//! **One budget nobody can reset.** A client request may cost at most
//! `search.max_subqueries` sub-requests in the whole mesh: each sub-request carries the
//! share of what is left that its node may spend ([`plan::split_budget`]), the hop limit
//! (decremented) and the DSIs already asked, so a chain of nodes cannot multiply the work,
//! no node is asked twice by one search, and a mesh with a cycle ends. A node caps what a
//! request brings at its own settings. Targets go in waves by rank ([`plan`]); the deadline
//! returns what arrived, marked partial.
//!
//! **Caches.** A sub-query's answer is kept (`search.cache_entries`, `search.cache_ttl`) and
//! dropped when the target's hint changes; empty answers too. When a target cannot answer
//! (down, failed, too slow), its last answer younger than `search.stale_ttl` is served
//! instead, marked stale (RFC 8767). Failures are kept in the
//! infrastructure cache ([`crate::store::health`]) so that a dead node costs at most one
//! timeout per `search.failure_ttl`; its round-trip times set how long a sub-request may
//! wait and which of equally ranked nodes goes first. Identical sub-queries in flight are
//! sent once ([`crate::store::search_cache::Flights`]).
//!
//! **Where sub-queries may go.** Only to a host the node already talks to (a configured
//! peer's, or one a poller came from) or that `search.targets` admits; never to this node's
//! own listeners, never to a link-local address unless `search.targets` names it. Any other
//! Base-URI in a referral is returned unchased, marked `refused`: a hostile peer's hint
//! cannot make the node fetch an arbitrary URL. The node's [`SearchHost::may_contact`]
//! decides.

pub mod plan;
pub mod remote;
pub mod trace;

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use hints::query::Query;
use tokio::time::Instant;

use crate::model::answer::{Asked, FoundObject, NotChased, ObjectJson, SearchAnswer, Unchased};
use crate::model::config::SearchConfig;
use crate::store::health::Health;
use crate::store::search_cache::{Flights, TtlCache};
use crate::sys::http::HttpClient;
use crate::sys::metrics::Metrics;

pub use plan::{Hop, Target};
pub use trace::TraceContext;

/// Least time worth giving a sub-request; with less left, targets are left for the deadline.
const MIN_SUBREQUEST: Duration = Duration::from_millis(5);

/// Most DSIs a request carries as visited (a longer list is cut: the DSI loop checks of
/// each node still end cycles).
pub const MAX_VISITED: usize = 256;

/// Which way a search reached this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From a client: this node is where the search entered the mesh.
    Entry,
    /// From a node whose table refers to this one: only this node's subtree is wanted.
    Down,
    /// From a node this one polls: its subtree and everything above are wanted.
    Up,
}

impl Direction {
    /// The spelling of the `CIP-Search-Direction` header.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Entry => "entry",
            Self::Down => "down",
            Self::Up => "up",
        }
    }

    /// Reads the header's value.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "entry" => Some(Self::Entry),
            "down" => Some(Self::Down),
            "up" => Some(Self::Up),
            _ => None,
        }
    }
}

/// One search at one node.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    /// The query as given.
    pub query: String,
    /// The query, parsed.
    pub parsed: Query,
    /// Most objects wanted.
    pub limit: usize,
    /// When the answer must be back.
    pub deadline: Instant,
    /// Hops the search may still go from here.
    pub depth: u32,
    /// Sub-requests this node and those it asks may still send.
    pub budget: u32,
    /// DSIs the search has asked already.
    pub visited: BTreeSet<String>,
    /// How it reached this node.
    pub direction: Direction,
    /// Hops from the node the client asked (0 there).
    pub hop: u32,
    /// Its trace.
    pub trace: TraceContext,
}

/// What a search needs of the node; the node implements it.
pub trait SearchHost: Send + Sync {
    /// This node's DSI and the base-URI its objects are reported under.
    fn identity(&self) -> (String, String);
    /// The search settings in force.
    fn search_config(&self) -> Arc<SearchConfig>;
    /// The node's metrics.
    fn metrics(&self) -> &Metrics;
    /// Local objects matching `query` (at most `limit`) and how many match in all, off the
    /// async workers.
    fn local_objects(
        &self,
        query: &Query,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<ObjectJson>, u64), String>> + Send;
    /// The routing table's referrals for `query` (definite and possible), best first,
    /// without this node's own dataset.
    fn referrals(&self, query: &Query) -> impl Future<Output = Result<Vec<Target>, String>> + Send;
    /// The nodes that poll this one (for widening upwards).
    fn upstreams(&self) -> Vec<Target>;
    /// Whether a sub-query may go to `host`:`port`; the refusal's reason otherwise.
    ///
    /// # Errors
    /// The reason the host is refused.
    fn may_contact(&self, host: &str, port: u16) -> Result<(), String>;
}

/// A target's chosen endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    /// A cipd node: its base-URI.
    Http(String),
    /// A Whois++ server.
    Whois { host: String, port: u16 },
}

impl Endpoint {
    /// The infrastructure cache's key.
    fn key(&self) -> String {
        match self {
            Self::Http(u) => origin(u).unwrap_or_else(|| u.clone()),
            Self::Whois { host, port } => format!("whoispp://{host}:{port}"),
        }
    }

    fn uri(&self) -> String {
        match self {
            Self::Http(u) => u.clone(),
            Self::Whois { host, port } => format!("whoispp://{host}:{port}/"),
        }
    }
}

/// `scheme://host:port` of an http(s) URL.
fn origin(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    Some(format!(
        "{}://{}:{}",
        u.scheme(),
        u.host_str()?,
        u.port_or_known_default()?
    ))
}

/// Picks the first base-URI of `uris` that the search speaks and may contact.
///
/// # Errors
/// Why none may be used (the first refusal's reason).
fn choose_endpoint<H: SearchHost>(host: &H, uris: &[String]) -> Result<Endpoint, String> {
    let mut first_err = None;
    for raw in uris {
        let parsed = match reqwest::Url::parse(raw) {
            Ok(u) => u,
            Err(e) => {
                first_err.get_or_insert_with(|| format!("{raw}: {e}"));
                continue;
            }
        };
        let scheme = parsed.scheme();
        let port = match (scheme, parsed.port()) {
            (_, Some(p)) => p,
            ("http", None) => 80,
            ("https", None) => 443,
            ("whoispp", None) => 63,
            _ => {
                first_err.get_or_insert_with(|| {
                    format!("{raw}: the search speaks http, https and whoispp only")
                });
                continue;
            }
        };
        let Some(h) = parsed.host_str() else {
            first_err.get_or_insert_with(|| format!("{raw}: no host"));
            continue;
        };
        let h = h.trim_start_matches('[').trim_end_matches(']').to_owned();
        if let Err(why) = host.may_contact(&h, port) {
            first_err.get_or_insert_with(|| format!("{raw}: {why}"));
            continue;
        }
        return Ok(match scheme {
            "whoispp" => Endpoint::Whois { host: h, port },
            _ => Endpoint::Http(raw.clone()),
        });
    }
    Err(first_err.unwrap_or_else(|| "no base-uri".to_owned()))
}

/// A sub-query's answer as kept in the cache.
#[derive(Debug)]
pub struct CachedSub {
    answer: Arc<SearchAnswer>,
    /// More servers to ask that a Whois++ server named.
    more: Vec<Target>,
    stamp: Option<u64>,
}

/// A sub-query's outcome, shared by the requests a flight joined.
#[derive(Debug, Clone)]
enum SubOutcome {
    Answered {
        answer: Arc<SearchAnswer>,
        more: Vec<Target>,
        rtt: Duration,
    },
    Failed(remote::SubError),
}

/// This node's own answer as kept for the same request again.
#[derive(Debug)]
pub struct CachedOwn {
    /// The answer, serialised without `trace_id` and `elapsed_ms` (prefixed on the way out).
    pub body: bytes::Bytes,
    /// What it was computed from.
    pub stamp: u64,
}

/// The search's shared state: caches, the infrastructure cache and the client. One per node.
pub struct Searcher {
    /// Round-trip times and failures of the nodes asked.
    pub health: Health,
    /// Sub-query answers, by target and request.
    pub subs: TtlCache<Arc<CachedSub>>,
    /// This node's own answers, by request.
    pub own: TtlCache<Arc<CachedOwn>>,
    flights: Flights<SubOutcome>,
    client: ArcSwap<HttpClient>,
}

impl std::fmt::Debug for Searcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Searcher").finish_non_exhaustive()
    }
}

/// Builds the search's HTTP client from `[http_client]`: no redirects (a redirect would
/// escape the target rules), no proxy (mesh nodes are reached directly, as for polling).
///
/// # Errors
/// A message naming the file or setting at fault.
pub fn client(http: &crate::model::config::HttpClientConfig) -> Result<HttpClient, String> {
    crate::model::config::HttpClientConfig {
        max_redirects: 0,
        proxy: crate::sys::http::ProxySetting::Direct,
        ..http.clone()
    }
    .client(None, None)
}

impl Searcher {
    /// A searcher with `config`'s cache sizes, asking with `client`.
    pub fn new(config: &SearchConfig, client: HttpClient) -> Self {
        Self {
            health: Health::new(
                config.infra_entries,
                config.failure_ttl,
                config.max_failure_ttl,
            ),
            subs: TtlCache::new(config.cache_entries, config.cache_ttl),
            own: TtlCache::new(config.cache_entries, config.cache_ttl),
            flights: Flights::default(),
            client: ArcSwap::from_pointee(client),
        }
    }

    /// Uses `client` from now on (a reload changed `[http_client]`).
    pub fn set_client(&self, client: HttpClient) {
        self.client.store(Arc::new(client));
    }

    /// Sub-queries that joined an identical one in flight.
    pub fn joined(&self) -> u64 {
        self.flights.joined.load(Ordering::Relaxed)
    }

    /// Runs `req` at this node (see the module doc).
    pub async fn search<H: SearchHost>(&self, host: &H, req: SearchRequest) -> SearchAnswer {
        let started = Instant::now();
        let (own_dsi, own_uri) = host.identity();
        let config = host.search_config();
        let mut run = Run {
            objects: Vec::new(),
            seen: HashSet::new(),
            unchased: Vec::new(),
            nodes: Vec::new(),
            skipped: BTreeSet::new(),
            partial: false,
            more: false,
            stale: false,
            subqueries: 0,
            own_dsi: own_dsi.clone(),
        };
        let mut visited = req.visited.clone();
        visited.insert(own_dsi.clone());

        let (local, down) = tokio::join!(
            host.local_objects(&req.parsed, req.limit),
            host.referrals(&req.parsed)
        );
        let mut local_more = false;
        match local {
            Ok((objects, total)) => {
                local_more = total > objects.len() as u64;
                for o in objects {
                    run.add(FoundObject {
                        holder: own_dsi.clone(),
                        holder_uri: own_uri.clone(),
                        template: o.template,
                        url: o.url,
                        attributes: o.attributes,
                    });
                }
            }
            Err(e) => {
                tracing::warn!(trace_id = %req.trace.trace_id, error = %e, "search: local objects failed");
                run.partial = true;
            }
        }
        let mut targets = match down {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(trace_id = %req.trace.trace_id, error = %e, "search: referrals failed");
                run.partial = true;
                Vec::new()
            }
        };
        if req.direction != Direction::Down {
            targets.extend(host.upstreams());
        }
        let look_visited = visited.clone();
        let look = Lookup {
            query: &req.query,
            limit: req.limit,
            visited: &look_visited,
            stale_ttl: config.stale_ttl,
        };
        let mut queue = self.prepare(host, &mut run, &mut visited, targets, &look, req.hop + 1);

        let mut budget = req.budget;
        while !queue.is_empty() {
            let found = run.objects.len();
            let reason = if found >= req.limit {
                Some(NotChased::Limit)
            } else if req.depth == 0 {
                Some(NotChased::Depth)
            } else if budget == 0 {
                Some(NotChased::Budget)
            } else if req.deadline.saturating_duration_since(Instant::now()) < MIN_SUBREQUEST {
                Some(NotChased::Deadline)
            } else {
                None
            };
            if let Some(reason) = reason {
                for q in queue.drain(..) {
                    run.unchase(&q.target, reason, None);
                }
                break;
            }
            let need = (req.limit - found) as u64;
            let size = plan::wave_size(queue.iter().map(|q| &q.target), need, budget);
            let wave: Vec<Queued> = queue.drain(..size).collect();
            budget -= wave.len() as u32;
            let plain: Vec<Target> = wave.iter().map(|q| q.target.clone()).collect();
            let shares = plan::split_budget(budget, &plain);
            // This wave's targets count as visited for each of them: no node is asked
            // twice by one search, whichever path reaches it.
            for q in &wave {
                visited.insert(q.target.dsi.clone());
            }
            let carried: Arc<Vec<String>> =
                Arc::new(visited.iter().take(MAX_VISITED).cloned().collect());
            let asks = wave.into_iter().zip(shares).map(|(q, share)| {
                let ctx = SubContext {
                    query: &req.query,
                    parsed: &req.parsed,
                    limit: req.limit,
                    deadline: req.deadline,
                    depth: req.depth - 1,
                    budget: share,
                    visited: carried.clone(),
                    hop: req.hop + 1,
                    traceparent: req.trace.child(),
                    max_bytes: config.max_answer_bytes,
                    direction: match q.target.hop {
                        Hop::Up => Direction::Up,
                        Hop::Down | Hop::ServerToAsk => Direction::Down,
                    },
                };
                self.ask(q, ctx)
            });
            for done in futures_util::future::join_all(asks).await {
                if done.sent {
                    run.subqueries = run.subqueries.saturating_add(1);
                    let ms = match &done.outcome {
                        Ok(got) => got.ms,
                        Err(lost) => lost.ms,
                    };
                    host.metrics().search.note_subquery(
                        Duration::try_from_secs_f64(ms / 1000.0).unwrap_or_default(),
                    );
                }
                match done.outcome {
                    Ok(got) => {
                        if !got.cached {
                            let spent = got.answer.subqueries.min(done.share);
                            budget = budget.saturating_sub(spent);
                            run.subqueries = run.subqueries.saturating_add(spent);
                        }
                        run.merge(&done.queued, &got, req.hop + 1);
                        for m in got.more {
                            if visited.contains(&m.dsi) || run.skipped.contains(&m.dsi) {
                                continue;
                            }
                            if let Some(q) = self.admit(host, &mut run, m, &look, req.hop + 1) {
                                visited.insert(q.target.dsi.clone());
                                queue.push_back(q);
                            }
                        }
                    }
                    Err(lost)
                        if matches!(lost.reason, NotChased::Unreachable | NotChased::Deadline)
                            && let Some(got) =
                                self.stale(&done.queued, &look, lost.error.clone()) =>
                    {
                        run.merge(&done.queued, &got, req.hop + 1);
                    }
                    Err(lost) => {
                        let q = &done.queued;
                        run.nodes.push(Asked {
                            dsi: q.target.dsi.clone(),
                            uri: q.endpoint.uri(),
                            via: run.own_dsi.clone(),
                            depth: req.hop + 1,
                            direction: q.target.hop.as_str().to_owned(),
                            ms: lost.ms,
                            outcome: if lost.reason == NotChased::Deadline {
                                "timeout".to_owned()
                            } else {
                                "failed".to_owned()
                            },
                            objects: 0,
                            error: Some(lost.error.clone()),
                        });
                        run.unchase(&q.target, lost.reason, Some(lost.error));
                    }
                }
            }
        }
        let metrics = host.metrics();
        let partial = run.partial || run.unchased.iter().any(|u| u.reason.makes_partial());
        let more = local_more
            || run.more
            || run.objects.len() > req.limit
            || run.unchased.iter().any(|u| u.reason == NotChased::Limit);
        let mut objects = run.objects;
        objects.truncate(req.limit);
        for u in &run.unchased {
            metrics.search.note_unchased_label(u.reason.as_str());
        }
        SearchAnswer {
            query: req.query,
            dsi: own_dsi,
            trace_id: req.trace.trace_id,
            objects,
            more,
            unchased: run.unchased,
            partial,
            stale: run.stale,
            nodes: run.nodes,
            skipped: run.skipped.into_iter().collect(),
            subqueries: run.subqueries,
            elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
        }
    }

    /// Drops visited targets (noted as skipped), picks each one's endpoint (refusing those
    /// the rules refuse and those whose failure is cached), and orders the rest.
    fn prepare<H: SearchHost>(
        &self,
        host: &H,
        run: &mut Run,
        visited: &mut BTreeSet<String>,
        targets: Vec<Target>,
        look: &Lookup<'_>,
        depth: u32,
    ) -> VecDeque<Queued> {
        let mut seen = HashSet::new();
        let mut admitted = Vec::new();
        for t in targets {
            if t.dsi == run.own_dsi || !seen.insert(t.dsi.clone()) {
                continue;
            }
            if visited.contains(&t.dsi) {
                run.skipped.insert(t.dsi);
                continue;
            }
            if let Some(q) = self.admit(host, run, t, look, depth) {
                admitted.push(q);
            }
        }
        admitted.sort_by(|a, b| plan::compare(&a.target, &b.target));
        admitted.into()
    }

    /// The expired answer `q` gave to this request, while younger than `stale_ttl` and
    /// still valid (the same hint, nothing skipped that this search has not asked): served
    /// when `q` cannot answer now (RFC 8767), with `why`.
    fn stale(&self, q: &Queued, look: &Lookup<'_>, why: String) -> Option<Got> {
        if look.stale_ttl.is_zero() {
            return None;
        }
        let key = sub_key(
            &q.endpoint,
            direction_of(q.target.hop),
            look.limit,
            look.query,
        );
        let c = self.subs.get_stale(&key, look.stale_ttl, |c| {
            c.stamp == q.target.stamp && c.answer.skipped.iter().all(|d| look.visited.contains(d))
        })?;
        Some(Got {
            answer: c.answer.clone(),
            more: c.more.clone(),
            cached: true,
            stale: Some(why),
            ms: 0.0,
        })
    }

    /// The target with its endpoint, or `None` when it is refused or known to be down
    /// (noted as unchased, or answered from its stale answer, which costs no budget).
    fn admit<H: SearchHost>(
        &self,
        host: &H,
        run: &mut Run,
        mut t: Target,
        look: &Lookup<'_>,
        depth: u32,
    ) -> Option<Queued> {
        let endpoint = match choose_endpoint(host, &t.base_uris) {
            Ok(e) => e,
            Err(why) => {
                tracing::debug!(dsi = %t.dsi, reason = %why, "search: target refused");
                run.unchase(&t, NotChased::Refused, Some(why));
                return None;
            }
        };
        let key = endpoint.key();
        if let Some(down) = self.health.down(&key) {
            let detail = format!(
                "failed {} time(s) ({}); not asked again for {}",
                down.failures,
                down.error,
                humantime::format_duration(Duration::from_secs(down.retry_in.as_secs().max(1)))
            );
            let q = Queued {
                target: t,
                endpoint,
            };
            match self.stale(&q, look, detail.clone()) {
                Some(got) => run.merge(&q, &got, depth),
                None => run.unchase(&q.target, NotChased::Unreachable, Some(detail)),
            }
            return None;
        }
        t.srtt = self.health.srtt(&key);
        Some(Queued {
            target: t,
            endpoint,
        })
    }
}

/// Which way a sub-request to a target goes.
fn direction_of(hop: Hop) -> Direction {
    match hop {
        Hop::Up => Direction::Up,
        Hop::Down | Hop::ServerToAsk => Direction::Down,
    }
}

/// The key a sub-answer is kept under: target, direction, limit and query.
fn sub_key(endpoint: &Endpoint, direction: Direction, limit: usize, query: &str) -> String {
    format!(
        "{}\u{1f}{}\u{1f}{limit}\u{1f}{query}",
        endpoint.uri(),
        direction.as_str()
    )
}

/// What a kept sub-answer is looked up by, besides its target.
struct Lookup<'a> {
    query: &'a str,
    limit: usize,
    visited: &'a BTreeSet<String>,
    stale_ttl: Duration,
}

/// A target with the endpoint it is asked at.
#[derive(Debug, Clone)]
struct Queued {
    target: Target,
    endpoint: Endpoint,
}

/// What a sub-request is sent with.
struct SubContext<'a> {
    query: &'a str,
    parsed: &'a Query,
    limit: usize,
    deadline: Instant,
    depth: u32,
    budget: u32,
    visited: Arc<Vec<String>>,
    hop: u32,
    traceparent: String,
    max_bytes: u64,
    direction: Direction,
}

/// A sub-query's answer, as the wave merges it.
struct Got {
    answer: Arc<SearchAnswer>,
    more: Vec<Target>,
    cached: bool,
    /// Served stale (RFC 8767): the target failed, and this is its expired answer; why.
    stale: Option<String>,
    ms: f64,
}

/// A sub-query that brought nothing.
struct Lost {
    error: String,
    reason: NotChased,
    ms: f64,
}

/// One finished sub-query.
struct Done {
    queued: Queued,
    share: u32,
    /// A request went out for it (not a cache hit, not joined to another's).
    sent: bool,
    outcome: Result<Got, Lost>,
}

impl Searcher {
    /// Asks one target: from the cache when a valid answer is kept, else over the network
    /// (joined with an identical request in flight), noting its round-trip or failure.
    async fn ask(&self, queued: Queued, ctx: SubContext<'_>) -> Done {
        let key = queued.endpoint.key();
        let cache_key = sub_key(&queued.endpoint, ctx.direction, ctx.limit, ctx.query);
        let share = ctx.budget;
        let stamp = queued.target.stamp;
        let visited = ctx.visited.clone();
        let hit = self.subs.get(&cache_key, |c| {
            c.stamp == stamp && c.answer.skipped.iter().all(|d| visited.contains(d))
        });
        if let Some(c) = hit {
            return Done {
                queued,
                share,
                sent: false,
                outcome: Ok(Got {
                    answer: c.answer.clone(),
                    more: c.more.clone(),
                    cached: true,
                    stale: None,
                    ms: 0.0,
                }),
            };
        }
        let now = Instant::now();
        let remaining = ctx.deadline.saturating_duration_since(now);
        // The child must answer before our deadline with time left for its answer to
        // travel back: its smoothed round-trip time, within [1 ms, a quarter of the time].
        let margin = self
            .health
            .srtt(&key)
            .unwrap_or(Duration::from_millis(2))
            .clamp(
                Duration::from_millis(1),
                (remaining / 4).max(Duration::from_millis(1)),
            );
        let child_time = remaining.saturating_sub(margin);
        let flight_key = format!(
            "{cache_key}\u{1f}{}\u{1f}{}\u{1f}{}",
            ctx.budget,
            ctx.depth,
            ctx.visited.join(" ")
        );
        let mut first = false;
        let outcome = self
            .flights
            .run(&flight_key, || {
                first = true;
                self.fetch(&queued, &ctx, child_time, remaining)
            })
            .await;
        let ms = now.elapsed().as_secs_f64() * 1000.0;
        let outcome = match outcome {
            SubOutcome::Answered { answer, more, rtt } => {
                if first {
                    self.health.note_ok(&key, rtt);
                    if !answer.partial && !answer.stale {
                        self.subs.put(
                            cache_key,
                            Arc::new(CachedSub {
                                answer: answer.clone(),
                                more: more.clone(),
                                stamp,
                            }),
                        );
                    }
                }
                Ok(Got {
                    answer,
                    more,
                    cached: false,
                    stale: None,
                    ms,
                })
            }
            SubOutcome::Failed(e) => {
                let rto = self.health.rto(&key);
                let failure = e.is_failure(remaining, rto);
                if first && failure {
                    let ttl = self.health.note_failure(&key, &e.to_string());
                    tracing::info!(
                        trace_id = %ctx.traceparent.split('-').nth(1).unwrap_or(""),
                        dsi = %queued.target.dsi,
                        endpoint = %key,
                        error = %e,
                        retry_in = %humantime::format_duration(ttl),
                        "search: node failed; its failure is cached"
                    );
                }
                let reason = match e {
                    remote::SubError::Timeout(_) => NotChased::Deadline,
                    _ => NotChased::Unreachable,
                };
                Err(Lost {
                    error: e.to_string(),
                    reason,
                    ms,
                })
            }
        };
        Done {
            queued,
            share,
            sent: first,
            outcome,
        }
    }

    /// The request itself.
    async fn fetch(
        &self,
        queued: &Queued,
        ctx: &SubContext<'_>,
        child_time: Duration,
        timeout: Duration,
    ) -> SubOutcome {
        let started = Instant::now();
        match &queued.endpoint {
            Endpoint::Http(base) => {
                let req = remote::SubRequest {
                    query: ctx.query,
                    limit: ctx.limit,
                    deadline_ms: u64::try_from(child_time.as_millis())
                        .unwrap_or(u64::MAX)
                        .max(1),
                    depth: ctx.depth,
                    budget: ctx.budget,
                    visited: &ctx.visited,
                    direction: ctx.direction.as_str(),
                    hop: ctx.hop,
                    traceparent: ctx.traceparent.clone(),
                };
                let client = self.client.load_full();
                match remote::ask_http(&client, base, &req, timeout, ctx.max_bytes).await {
                    Ok(answer) => {
                        // The network's part of the time: the child's own work is not
                        // this link's round trip.
                        let total = started.elapsed();
                        let work = Duration::from_secs_f64(answer.elapsed_ms.max(0.0) / 1000.0);
                        SubOutcome::Answered {
                            answer: Arc::new(answer),
                            more: Vec::new(),
                            rtt: total.saturating_sub(work),
                        }
                    }
                    Err(e) => SubOutcome::Failed(e),
                }
            }
            Endpoint::Whois { host, port } => {
                match remote::ask_whois(host, *port, ctx.parsed, timeout, ctx.max_bytes).await {
                    Ok(w) => {
                        let (answer, more) =
                            from_whois(w, queued, ctx.query, ctx.parsed, ctx.limit);
                        SubOutcome::Answered {
                            answer: Arc::new(answer),
                            more,
                            rtt: started.elapsed(),
                        }
                    }
                    Err(e) => SubOutcome::Failed(e),
                }
            }
        }
    }
}

/// A Whois++ server's answer as a search answer of its dataset, and the servers it named.
fn from_whois(
    w: cip_proto::whoispp_answer::WhoisAnswer,
    queued: &Queued,
    query: &str,
    parsed: &Query,
    limit: usize,
) -> (SearchAnswer, Vec<Target>) {
    let uri = queued.endpoint.uri();
    let objects: Vec<FoundObject> = w
        .records
        .into_iter()
        .filter(|r| remote::record_matches(r, parsed))
        .take(limit)
        .map(|r| {
            let url = r
                .attributes
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("uri") || n.eq_ignore_ascii_case("url"))
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| format!("{uri}{}", r.handle));
            FoundObject {
                holder: queued.target.dsi.clone(),
                holder_uri: uri.clone(),
                template: r.template,
                url,
                attributes: r.attributes,
            }
        })
        .collect();
    let more = w
        .referrals
        .into_iter()
        .filter_map(|s| {
            let port = s.port?;
            Some(Target {
                dsi: s.handle,
                base_uris: vec![format!("whoispp://{}:{port}/", s.host)],
                count: 0,
                definite: false,
                hop: Hop::ServerToAsk,
                datasets: 0,
                stamp: None,
                srtt: None,
            })
        })
        .collect();
    let answer = SearchAnswer {
        query: query.to_owned(),
        dsi: queued.target.dsi.clone(),
        trace_id: String::new(),
        objects,
        more: false,
        unchased: Vec::new(),
        partial: false,
        stale: false,
        nodes: Vec::new(),
        skipped: Vec::new(),
        subqueries: 0,
        elapsed_ms: 0.0,
    };
    (answer, more)
}

/// One search's findings at this node, merged as answers come.
struct Run {
    objects: Vec<FoundObject>,
    seen: HashSet<(String, String)>,
    unchased: Vec<Unchased>,
    nodes: Vec<Asked>,
    skipped: BTreeSet<String>,
    partial: bool,
    more: bool,
    stale: bool,
    subqueries: u32,
    own_dsi: String,
}

impl Run {
    /// Adds `o` unless the same object of the same holder came already (a mesh that is not
    /// a tree reaches some nodes by two paths).
    fn add(&mut self, o: FoundObject) {
        if self.seen.insert((o.holder.clone(), o.url.clone())) {
            self.objects.push(o);
        }
    }

    fn unchase(&mut self, t: &Target, reason: NotChased, detail: Option<String>) {
        self.unchased.push(Unchased {
            dsi: t.dsi.clone(),
            base_uri: t.base_uris.clone(),
            count: t.count,
            reason,
            via: self.own_dsi.clone(),
            detail,
        });
    }

    /// Takes in a sub-query's answer: its objects, what it left unchased, the nodes it
    /// asked and skipped.
    fn merge(&mut self, q: &Queued, got: &Got, depth: u32) {
        let a = &got.answer;
        self.nodes.push(Asked {
            dsi: q.target.dsi.clone(),
            uri: q.endpoint.uri(),
            via: self.own_dsi.clone(),
            depth,
            direction: q.target.hop.as_str().to_owned(),
            ms: got.ms,
            outcome: match (&got.stale, got.cached) {
                (Some(_), _) => "stale",
                (None, true) => "cached",
                (None, false) => "ok",
            }
            .to_owned(),
            objects: a.objects.len() as u64,
            error: got.stale.clone(),
        });
        self.stale |= got.stale.is_some() || a.stale;
        for o in &a.objects {
            self.add(o.clone());
        }
        self.unchased.extend(a.unchased.iter().cloned());
        self.nodes.extend(a.nodes.iter().cloned());
        self.skipped.extend(a.skipped.iter().cloned());
        self.partial |= a.partial;
        self.more |= a.more;
    }
}

#[cfg(test)]
mod tests;
