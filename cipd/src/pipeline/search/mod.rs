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

mod ask;
mod endpoint;
pub mod plan;
pub mod remote;
mod run;
pub mod trace;
mod whois;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use hints::query::Query;
use tokio::time::Instant;

use crate::model::answer::{ObjectJson, SearchAnswer};
use crate::model::config::SearchConfig;
use crate::store::health::Health;
use crate::store::search_cache::{Flights, TtlCache};
use crate::sys::http::HttpClient;
use crate::sys::metrics::Metrics;

pub use plan::{Hop, Target};
pub use trace::TraceContext;

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
        self.run(host, req).await
    }
}

#[cfg(test)]
mod tests;
