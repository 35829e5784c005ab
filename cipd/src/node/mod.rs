//! The node's shared state and the operations on it: [`Node`].
//!
//! Everything a front-end (CIP service, HTTP, admin socket) needs goes through `Node`: the
//! configuration (hot-swapped on reload), the local collections and their hint, the routing
//! table, the out-bound hint, per-peer state, the spool, and a `watch` channel of [`Status`]
//! counters that tests and the admin socket read. Background tasks (peer polling, collection
//! watching, expiry) live in [`crate::daemon::peer`] and [`crate::daemon`] and call back into it.
//!
//! `Node`'s operations are split by what they serve: in-bound index objects (`accept`),
//! queries (`queries`) and reload (`reload`); this module keeps the state itself, the local
//! collections and the out-bound hint's hooks.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::{ArcSwap, ArcSwapOption};
use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::cip::{IndexObject, IndexType};
use cip_proto::soif::SoifObject;
use hints::hint::CipHint;
use hints::query::{MatchOp, Query};
use hints::table::{ImportError, PeerMeta, RoutingTable, TableConfig};
use hints::thesaurus::Thesaurus;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::model::config::{Config, PeerRole};
use crate::pipeline::import::{Digests, Importer};
use crate::pipeline::outbound::{BuildInput, Pipeline};
use crate::store::answers::AnswerCache;
use crate::store::binding::Bindings;
use crate::store::collection::{self, CollectionSource, LoadReport};
use crate::store::local_index::LoadedCollection;
use crate::store::local_index::LocalIndex;
use crate::store::spool::{Spool, SpoolEntry};
use crate::sys::lock;
use crate::sys::metrics::{Gauges, Metrics};
use crate::sys::net::Network;
use crate::sys::telemetry::LogHandle;

use crate::model::answer::{ObjectJson, ObjectsAnswer, QueryAnswer, ReferralJson};
use crate::model::config::soif_limits;
use crate::model::status::{CollectionStatus, Exchange, Identity, Listeners, Status};
// Kept while the simulator (`integration-tests/sim`) names it here; everything else
// imports it from `model::status`.
use crate::model::status::PeerState;
use crate::pipeline::index_types::Rejection;
use crate::store::local::QueryError;

mod accept;
mod deltas;
pub mod exchange;
mod hosts;
mod queries;
mod reachability;
mod reload;
pub mod search_host;

/// Local objects a substring query may search on an async worker ([`Node::is_quick`]).
const QUICK_LOCAL_OBJECTS: u64 = 10_000;

/// Why a node could not be built ([`crate::daemon::StartError`] carries it on).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The spool directory could not be opened.
    #[error("spool: {0}")]
    Spool(crate::store::spool::SpoolError),
    /// A worker thread (the import thread) could not be started.
    #[error("cannot start a worker thread: {0}")]
    Thread(std::io::Error),
    /// The signing key (`[signing] key`) could not be loaded.
    #[error("signing key: {0}")]
    Key(crate::model::trust::keys::KeyError),
    /// The HTTP client (`[http_client]`) could not be built.
    #[error("http_client: {0}")]
    HttpClient(String),
}

/// Why a reload failed (the old configuration stays).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The new configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::model::config::ConfigError),
    /// The new signing key cannot be loaded.
    #[error("signing key: {0}")]
    Key(crate::model::trust::keys::KeyError),
    /// The new `[http_client]` settings do not give a client.
    #[error("http_client: {0}")]
    HttpClient(String),
}

/// What a reload changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadReport {
    /// The configuration file was re-read.
    pub config_reloaded: bool,
    /// Collections reloaded because they changed.
    pub collections_reloaded: Vec<String>,
    /// Settings that need a restart to take effect (listeners, data directory).
    pub needs_restart: Vec<String>,
}

/// The node: shared state plus the operations front-ends and admin use.
pub struct Node {
    config: ArcSwap<Config>,
    config_path: Option<PathBuf>,
    identity: ArcSwap<Identity>,
    local: ArcSwap<LocalIndex>,
    /// Shared with the import thread ([`crate::pipeline::import`]) and the out-bound builds
    /// ([`crate::pipeline::outbound`]), which run off the async workers.
    table: Arc<RoutingTable>,
    /// The out-bound hint and its builder's request sequence.
    outbound: Arc<Pipeline>,
    /// Which DSI each peer may deliver.
    bindings: Arc<Bindings>,
    /// The queue to the import thread.
    importer: Importer,
    /// Refreshes of peers that answered `unchanged`, written to the table in batches.
    refreshes: Arc<crate::pipeline::coalesce::Coalescer<PeerMeta>>,
    /// Bounds the in-bound hints being parsed at once (on the blocking pool).
    parsing: tokio::sync::Semaphore,
    thesaurus: ArcSwapOption<Thesaurus>,
    /// Boxed: a map node holds eleven slots, and most nodes have a peer or two.
    peers: Mutex<BTreeMap<String, Box<PeerState>>>,
    poll_now: Mutex<HashMap<String, Arc<Notify>>>,
    spool: Arc<Spool>,
    status: watch::Sender<Status>,
    listeners: Mutex<Listeners>,
    rebuild: tokio::sync::Mutex<()>,
    pub(crate) token: CancellationToken,
    pub(crate) tracker: TaskTracker,
    pub(crate) peer_token: Mutex<CancellationToken>,
    /// Bumped by each reload that re-read the configuration; the peer supervisor
    /// ([`crate::daemon::peer::supervise`]) restarts the peer tasks on it.
    peers_changed: watch::Sender<u64>,
    log: Option<LogHandle>,
    /// The network CIP connections are opened over when not the host's TCP (a
    /// simulator's; [`crate::sys::net`]).
    network: std::sync::OnceLock<Arc<dyn Network>>,
    started: tokio::time::Instant,
    metrics: Metrics,
    /// Keyed hash of the payload whose hint the table holds, per dataset: an unchanged
    /// hint re-polled still refreshes its expiry, but the out-bound aggregate is not
    /// recomputed. Changed only together with the table, under this lock, so an entry
    /// always describes what the table holds for that DSI.
    imported: Digests,
    payload_hasher: std::hash::RandomState,
    /// The heads of peers' hints whose deltas apply without reading the hint
    /// ([`deltas`]).
    heads: crate::store::heads::Heads,
    /// Recent `/v1/referrals` answers.
    answers: AnswerCache,
    /// Bounds the queries that may scan, evaluated at once.
    scans: tokio::sync::Semaphore,
    /// Bounds the polls under way at once.
    polls: tokio::sync::Semaphore,
    /// Set from start until every configured peer's hint is in (summaries wait).
    cold_start: std::sync::atomic::AtomicBool,
    /// Set from start until the cold start's final merge is done.
    settling: Arc<std::sync::atomic::AtomicBool>,
    /// Bumped whenever something an answer depends on changes besides the table and the
    /// local hint (configuration, thesaurus, identity).
    epoch: AtomicU64,
    /// RDM catalogs' change journals ([`crate::store::journal`]).
    rdm: crate::store::journal::Journals,
    /// Per-type state: stored tagged totals, learned peer types ([`crate::pipeline::index_types`]).
    index_state: crate::pipeline::index_types::State,
    /// The signing key, and what peers' signatures showed ([`crate::model::trust`]).
    trust: crate::model::trust::Trust,
    /// Progress of a long start ([`crate::sys::startup`]).
    startup: Arc<crate::sys::startup::Startup>,
    /// The HTTP client of feeds and RDM pulls (`[http_client]`), rebuilt on reload.
    http: ArcSwap<crate::sys::http::HttpClient>,
    /// The byte budget request bodies share (`limits.max_inflight_bytes`).
    inflight: Arc<crate::sys::budget::ByteBudget>,
    /// The chasing search's caches and client ([`crate::pipeline::search`]).
    searcher: crate::pipeline::search::Searcher,
    /// The nodes that poll this one, as their polls named them.
    upstreams: crate::store::clients::Upstreams,
    /// What each poller asked apart and last received, and the passed-on routes offered.
    routes: crate::store::routes::Routes,
    /// The recent changesets of our out-bound hints, for pollers a few answers behind.
    journal: std::sync::Mutex<hints::delta::journal::Journal>,
    /// Per-client search rates (`search.rate`).
    search_clients: crate::store::clients::RateLimiter,
    /// The datasets of the polled peers that do not answer now (referrals say so).
    unreachable: ArcSwap<std::collections::HashSet<Dsi>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("dsi", &self.identity.load().dsi)
            .finish_non_exhaustive()
    }
}

/// The index type this daemon exchanges (RFC 2655).
pub fn hint_type() -> IndexType {
    IndexType::harvest_soif()
}

impl Node {
    /// A node with empty collections and table; [`crate::daemon::Daemon::start`] fills it.
    ///
    /// # Errors
    /// When the spool directory cannot be opened.
    pub(crate) fn new(
        config: Config,
        config_path: Option<PathBuf>,
        log: Option<LogHandle>,
        token: CancellationToken,
    ) -> Result<Self, NodeError> {
        let spool = Arc::new(Spool::open(&config.data_dir).map_err(NodeError::Spool)?);
        let identity = Identity {
            dsi: config.node.dsi.clone(),
            base_uris: config.node.base_uris.clone(),
            description: config.node.description.clone(),
        };
        let table = Arc::new(RoutingTable::new(TableConfig {
            node: Some(config.node.dsi.clone()),
            limits: config.limits.table,
            summaries: config.index,
            index_threads: config.import.index_threads,
            background_start: {
                let nice = config.import.background_nice;
                (nice > 0).then(|| {
                    hints::table::ThreadStart(Arc::new(move || {
                        crate::sys::priority::lower_this_thread(nice);
                    }))
                })
            },
        }));
        let peers = config
            .peers
            .iter()
            .map(|p| (p.name.clone(), Box::new(initial_peer_state(p))))
            .collect();
        let empty = Arc::new(CipHint::default());
        let peer_token = token.child_token();
        let outbound = Arc::new(Pipeline::new());
        let imported = Digests::default();
        let importer = Importer::start(
            config.import,
            table.clone(),
            imported.clone(),
            outbound.clone(),
        )
        .map_err(NodeError::Thread)?;
        let refreshes = Arc::new(crate::pipeline::coalesce::Coalescer::new({
            let table = table.clone();
            move |metas: Vec<PeerMeta>| {
                table.refresh_all(metas);
            }
        }));
        let parsers = config.import.parsers;
        let answer_cache_bytes = config.limits.answer_cache_bytes;
        let scans = config.limits.max_concurrent_scans;
        let polls = config.limits.max_concurrent_polls;
        let trust = crate::model::trust::Trust::default();
        trust.set_key(
            crate::model::trust::Trust::load_key(config.signing.key.as_deref())
                .map_err(NodeError::Key)?,
        );
        let http = config
            .http_client
            .client(None, None)
            .map_err(NodeError::HttpClient)?;
        let inflight = crate::sys::budget::ByteBudget::new(config.limits.max_inflight_bytes);
        let searcher = crate::pipeline::search::Searcher::new(
            &config.search,
            crate::pipeline::search::client(&config.http_client).map_err(NodeError::HttpClient)?,
        );
        Ok(Self {
            searcher,
            upstreams: Default::default(),
            routes: Default::default(),
            journal: std::sync::Mutex::new(hints::delta::journal::Journal::new(
                config.outbound.journal,
            )),
            search_clients: Default::default(),
            unreachable: ArcSwap::from_pointee(std::collections::HashSet::new()),
            http: ArcSwap::from_pointee(http),
            inflight,
            bindings: Arc::new(Bindings::new(&config)),
            config: ArcSwap::from_pointee(config),
            config_path,
            identity: ArcSwap::from_pointee(identity),
            local: ArcSwap::from_pointee(LocalIndex {
                collections: Vec::new(),
                hint: empty,
                generation: 0,
            }),
            table,
            outbound,
            importer,
            refreshes,
            parsing: tokio::sync::Semaphore::new(parsers),
            thesaurus: ArcSwapOption::empty(),
            peers: Mutex::new(peers),
            poll_now: Mutex::new(HashMap::new()),
            spool,
            status: watch::Sender::new(Status::default()),
            listeners: Mutex::new(Listeners::default()),
            rebuild: tokio::sync::Mutex::new(()),
            token,
            tracker: TaskTracker::new(),
            peer_token: Mutex::new(peer_token),
            peers_changed: watch::channel(0).0,
            log,
            network: std::sync::OnceLock::new(),
            started: tokio::time::Instant::now(),
            metrics: Metrics::default(),
            imported,
            payload_hasher: std::hash::RandomState::new(),
            heads: crate::store::heads::Heads::default(),
            answers: AnswerCache::new(answer_cache_bytes),
            scans: tokio::sync::Semaphore::new(scans),
            polls: tokio::sync::Semaphore::new(polls),
            cold_start: std::sync::atomic::AtomicBool::new(false),
            settling: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            epoch: AtomicU64::new(0),
            rdm: crate::store::journal::Journals::default(),
            index_state: crate::pipeline::index_types::State::default(),
            trust,
            startup: Arc::default(),
        })
    }

    /// Progress of the start, while one runs.
    pub fn startup(&self) -> &crate::sys::startup::Startup {
        &self.startup
    }

    /// The signing key and what peers' signatures showed.
    pub fn trust(&self) -> &crate::model::trust::Trust {
        &self.trust
    }

    /// Per-type state: tagged totals held, index types learned from peers.
    pub fn index_state(&self) -> &crate::pipeline::index_types::State {
        &self.index_state
    }

    /// The RDM catalogs' change journals.
    pub fn rdm_journals(&self) -> &crate::store::journal::Journals {
        &self.rdm
    }

    /// The byte budget request bodies share across connections.
    pub fn inflight(&self) -> &Arc<crate::sys::budget::ByteBudget> {
        &self.inflight
    }

    /// The HTTP client feeds and RDM pulls fetch with (clones share its connections).
    pub fn http_client(&self) -> crate::sys::http::HttpClient {
        (**self.http.load()).clone()
    }

    /// The node's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Every metric in the Prometheus text format, table gauges read now.
    pub fn render_metrics(&self) -> String {
        let stats = self.table.stats();
        let outbound = self.outbound.stats();
        let (expected, imported) = self.import_progress();
        let journal = {
            let j = lock(&self.journal);
            (j.len() as u64, j.bytes() as u64)
        };
        self.metrics.render(&Gauges {
            table_peers: stats.peers as u64,
            table_values: stats.distinct_values as u64,
            table_entries: stats.entries as u64,
            table_bytes: stats.approx_bytes as u64,
            table_summaries: stats.summaries as u64,
            table_summaries_pending: stats.summaries_pending as u64,
            table_value_bytes: stats.value_bytes as u64,
            table_summary_bytes: stats.summary_bytes as u64,
            table_budget_bytes: stats.budget_bytes,
            table_substring_cache_needles: stats.memoized as u64,
            table_substring_cache_bytes: stats.memo_bytes as u64,
            table_substring_cache_hits: stats.memo_hits,
            table_substring_cache_computed: stats.memo_computed,
            answer_cache_bytes: self.answers.bytes() as u64,
            local_objects: self.local_objects_count(),
            uptime_seconds: self.uptime().as_secs_f64(),
            table_generation: self.table.generation(),
            outbound_table_generation: outbound.table_generation,
            outbound_builds: outbound.builds,
            outbound_lag_seconds: outbound.lag.as_secs_f64(),
            outbound_build_seconds: outbound.last_build.as_secs_f64(),
            peers_expected: expected,
            peers_damped: {
                let now = std::time::SystemTime::now();
                lock(&self.peers)
                    .values()
                    .filter(|p| p.damped_until.is_some_and(|u| u > now))
                    .count() as u64
            },
            delta_journal_changesets: journal.0,
            delta_journal_bytes: journal.1,
            peers_imported: imported,
            cold_start: self.cold_starting(),
            inflight_bytes: self.inflight.in_use(),
            inflight_budget_bytes: self.inflight.limit(),
            inflight_waited: self
                .inflight
                .waited
                .load(std::sync::atomic::Ordering::Relaxed),
            inflight_refused: self
                .inflight
                .refused
                .load(std::sync::atomic::Ordering::Relaxed),
            search_cache_hits: self
                .searcher
                .subs
                .hits
                .load(std::sync::atomic::Ordering::Relaxed)
                + self
                    .searcher
                    .own
                    .hits
                    .load(std::sync::atomic::Ordering::Relaxed),
            search_cache_misses: self
                .searcher
                .subs
                .misses
                .load(std::sync::atomic::Ordering::Relaxed)
                + self
                    .searcher
                    .own
                    .misses
                    .load(std::sync::atomic::Ordering::Relaxed),
            search_joined: self.searcher.joined(),
            search_cache_entries: (self.searcher.subs.len() + self.searcher.own.len()) as u64,
            search_infra_entries: self.searcher.health.len() as u64,
            search_nodes_down: self.searcher.health.down_count() as u64,
        })
    }

    /// Objects in the local collections.
    pub fn local_objects_count(&self) -> u64 {
        self.local.load().len()
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.config.load_full()
    }

    /// This node's identity.
    pub fn identity(&self) -> Arc<Identity> {
        self.identity.load_full()
    }

    /// The routing table.
    pub fn table(&self) -> &RoutingTable {
        &self.table
    }

    /// The routing table, shared (for work on the blocking pool).
    pub fn table_handle(&self) -> Arc<RoutingTable> {
        self.table.clone()
    }

    /// The out-bound pipeline.
    pub fn outbound(&self) -> &Arc<Pipeline> {
        &self.outbound
    }

    /// The peers' DSI bindings.
    pub fn bindings(&self) -> &Bindings {
        &self.bindings
    }

    /// The local collections and hint.
    pub fn local(&self) -> Arc<LocalIndex> {
        self.local.load_full()
    }

    /// The log filter handle, when the process installed one.
    pub fn log_handle(&self) -> Option<&LogHandle> {
        self.log.as_ref()
    }

    /// The network CIP connections go over instead of the host's TCP, if one was given
    /// at start ([`crate::daemon::StartOptions::network`]).
    pub fn network(&self) -> Option<&Arc<dyn Network>> {
        self.network.get()
    }

    /// Sets [`Node::network`]; only the first call counts (the daemon's start).
    pub(crate) fn set_network(&self, network: Arc<dyn Network>) {
        let _ = self.network.set(network);
    }

    /// Time since the node started.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Bound listener addresses.
    pub fn listeners(&self) -> Listeners {
        lock(&self.listeners).clone()
    }

    /// A receiver that changes with every reload that re-read the configuration (the peer
    /// supervisor waits on it).
    pub fn peer_changes(&self) -> watch::Receiver<u64> {
        self.peers_changed.subscribe()
    }

    /// Tells the peer supervisor that the peer configuration may have changed.
    pub(crate) fn peers_changed(&self) {
        self.peers_changed.send_modify(|g| *g += 1);
    }

    /// A receiver of status updates (tests wait on it).
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    /// The current status counters.
    pub fn status_snapshot(&self) -> Status {
        self.status.borrow().clone()
    }

    /// A receiver of out-bound hint generations (the peer notifier waits on it).
    pub(crate) fn outbound_changes(&self) -> watch::Receiver<u64> {
        self.outbound.changes()
    }

    /// Out-bound revisions: every build from a newer table or local hint, whether or not
    /// the shared hint changed ([`crate::pipeline::outbound::Pipeline::revisions`]).
    pub(crate) fn outbound_revisions(&self) -> watch::Receiver<u64> {
        self.outbound.revisions()
    }

    /// Out-bound requests (changes not built yet), for the notifier's look ahead.
    pub(crate) fn outbound_requests(&self) -> watch::Receiver<u64> {
        self.outbound.requests()
    }

    /// What changed since the notifier last looked ([`Pipeline::take_touched`]).
    pub(crate) fn take_touched(&self) -> crate::pipeline::outbound::Touched {
        self.outbound.take_touched()
    }

    /// Every configured peer's state.
    pub fn peer_states(&self) -> Vec<PeerState> {
        lock(&self.peers).values().map(|p| (**p).clone()).collect()
    }

    /// Asks the daemon to stop (drain, then exit).
    pub fn shutdown(&self) {
        self.token.cancel();
    }

    /// True once shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.token.is_cancelled()
    }

    pub(crate) fn update_status(&self, f: impl FnOnce(&mut Status)) {
        self.status.send_modify(f);
    }

    pub(crate) fn set_listeners(&self, l: Listeners) {
        let first = l
            .http
            .first()
            .map(|a| ("http", a))
            .or_else(|| l.https.first().map(|a| ("https", a)));
        // Unconfigured, the base URIs are the first HTTP listener's and the first Whois++
        // listener's (where Whois++ clients following a referral to us must connect).
        if self.identity.load().base_uris.is_empty() {
            let derived: Vec<String> = first
                .map(|(scheme, addr)| format!("{scheme}://{}/", display_addr(*addr)))
                .into_iter()
                .chain(
                    l.whoispp
                        .first()
                        .map(|a| format!("whoispp://{}/", display_addr(*a))),
                )
                .collect();
            if !derived.is_empty() {
                let mut id = (**self.identity.load()).clone();
                id.base_uris = derived;
                self.identity.store(Arc::new(id));
                self.invalidate_answers();
            }
        }
        *lock(&self.listeners) = l;
    }

    pub(crate) fn update_peer(&self, name: &str, f: impl FnOnce(&mut PeerState)) {
        if let Some(p) = lock(&self.peers).get_mut(name) {
            f(p);
        }
    }

    /// The notifier that wakes `peer`'s poll task early.
    pub(crate) fn poll_notifier(&self, peer: &str) -> Arc<Notify> {
        lock(&self.poll_now)
            .entry(peer.to_owned())
            .or_default()
            .clone()
    }

    /// The configured peer named `peer`, or whose DSI (configured or learned) it is.
    fn find_peer<'c>(
        &self,
        config: &'c Config,
        peer: &str,
    ) -> Option<&'c crate::model::config::PeerConfig> {
        config
            .peers
            .iter()
            .find(|p| p.name == peer || self.peer_dsi(&p.name).is_some_and(|d| d.as_str() == peer))
    }

    /// Polls `peer` now instead of at its next interval.
    ///
    /// # Errors
    /// When no configured peer has that name (or DSI) and role `poll`.
    pub fn poll_now(&self, peer: &str) -> Result<(String, Option<Exchange>), String> {
        let config = self.config();
        let name = self
            .find_peer(&config, peer)
            .filter(|p| p.has_role(PeerRole::Poll))
            .map(|p| p.name.clone())
            .ok_or_else(|| format!("no peer {peer:?} with role poll"))?;
        // A poll under way still gets another after it: it may have started before what
        // the operator wants to see.
        let under_way = lock(&self.peers)
            .get(&name)
            .and_then(|s| s.exchange.clone());
        // Asked by an operator, the whole answer comes again (a route refresh, RFC 7313),
        // not "unchanged".
        self.routes.note_received(&name, None);
        self.poll_notifier(&name).notify_one();
        Ok((name, under_way))
    }

    /// The index object last taken from `peer` (its configured name or DSI), as it arrived:
    /// the spooled payload, signature included, so it can be checked again elsewhere.
    ///
    /// # Errors
    /// When no configured peer matches or none of its hints is held.
    pub fn received_hint(&self, peer: &str) -> Result<SpoolEntry, String> {
        let config = self.config();
        let p = self
            .find_peer(&config, peer)
            .ok_or_else(|| format!("no peer {peer:?}"))?;
        let dsi = self
            .peer_dsi(&p.name)
            .ok_or_else(|| format!("peer {} has sent no index object yet", p.name))?;
        self.spool
            .load(&p.name, &dsi)
            .map_err(|e| format!("no stored index object of {}: {e}", p.name))
    }

    /// The peer's DSI: configured, else learned.
    pub fn peer_dsi(&self, name: &str) -> Option<Dsi> {
        self.bindings.get(name).map(|b| b.dsi)
    }

    /// Finds the configured peer a connection from `remote` belongs to: one of `roles`, whose
    /// host resolved to `remote`'s address, and whose DSI (configured or learned) is `dsi`
    /// when the request names one. When several peers share an address, the DSI decides.
    pub fn identify_peer(
        &self,
        remote: IpAddr,
        dsi: Option<&Dsi>,
        roles: &[PeerRole],
    ) -> Option<String> {
        let config = self.config();
        let states = lock(&self.peers);
        let candidates: Vec<_> = config
            .peers
            .iter()
            .filter(|p| roles.iter().any(|r| p.has_role(*r)))
            .filter(|p| {
                let resolved = states
                    .get(&p.name)
                    .map(|s| s.resolved.as_slice())
                    .unwrap_or(&[]);
                resolved.contains(&remote) || p.host.parse::<IpAddr>().is_ok_and(|ip| ip == remote)
            })
            .collect();
        let known =
            |p: &crate::model::config::PeerConfig| self.bindings.get(&p.name).map(|b| b.dsi);
        if let Some(d) = dsi {
            if let Some(p) = candidates.iter().find(|p| known(p).as_ref() == Some(d)) {
                return Some(p.name.clone());
            }
            let open: Vec<_> = candidates.iter().filter(|p| p.dsi.is_none()).collect();
            return (open.len() == 1).then(|| open[0].name.clone());
        }
        (candidates.len() == 1).then(|| candidates[0].name.clone())
    }

    /// Re-resolves every peer's host (for [`Node::identify_peer`]).
    pub(crate) async fn resolve_peers(&self) {
        let config = self.config();
        for p in &config.peers {
            let port = p.port.unwrap_or(0);
            let resolved: Vec<IpAddr> = match tokio::net::lookup_host((p.host.as_str(), port)).await
            {
                Ok(addrs) => addrs.map(|a| a.ip()).collect(),
                Err(e) => {
                    tracing::warn!(peer = %p.name, host = %p.host, error = %e, "cannot resolve peer");
                    Vec::new()
                }
            };
            self.update_peer(&p.name, |s| s.resolved = resolved);
        }
    }

    // ---- local collections -------------------------------------------------------------

    /// Reloads the collections whose fingerprint changed (all when `force`), rebuilds the
    /// local hint if anything changed, and refreshes the out-bound hint. Returns the names
    /// of the collections reloaded.
    pub async fn rebuild_local(&self, force: bool) -> Vec<String> {
        let _guard = self.rebuild.lock().await;
        let config = self.config();
        let ctx = collection::SourceContext {
            soif: soif_limits(&config),
            data_dir: config.data_dir.clone(),
            hinadi: config.hinadi.clone(),
        };
        let indexed = crate::store::local::indexed_attributes(&config.export.attributes);
        let old = self.local.load_full();
        let mut jobs = Vec::with_capacity(config.collections.len());
        let mut sources = Vec::with_capacity(config.collections.len());
        let mut reloaded = Vec::new();
        for c in &config.collections {
            let source: Arc<dyn CollectionSource> =
                Arc::from(crate::pipeline::sources::source_for(c, &ctx));
            let previous = old
                .collections
                .iter()
                .find(|p| p.status.name == c.name && p.status.source == source.describe());
            sources.push(source.clone());
            if !force && let Some(prev) = previous {
                let fp = {
                    let s = source.clone();
                    crate::sys::net::spawn_blocking(move || s.fingerprint().ok())
                        .await
                        .ok()
                        .flatten()
                };
                if fp.is_some()
                    && fp == prev.fingerprint
                    && prev.status.error.is_none()
                    && prev.store.indexed() == indexed
                {
                    jobs.push((
                        Some((prev.status.clone(), prev.fingerprint)),
                        crate::store::local::Job::Keep(prev.store.clone()),
                    ));
                    continue;
                }
            }
            reloaded.push(c.name.clone());
            jobs.push((
                previous.map(|p| (p.status.clone(), p.fingerprint)),
                crate::store::local::Job::Load {
                    name: c.name.clone(),
                    source,
                    previous: previous.map(|p| p.store.clone()),
                },
            ));
        }
        let removed = old.collections.len() != jobs.len();
        if reloaded.is_empty() && !removed && !force {
            return reloaded;
        }
        let export = config.export.clone();
        let keep_open = config.limits.keep_collection_files_open;
        let identity = self.identity();
        let dir = crate::store::local::cache_dir(&config.data_dir);
        let (statuses, jobs): (Vec<_>, Vec<_>) = jobs.into_iter().unzip();
        // During the start, the bytes read show in `cipctl status`.
        let starting = !self.status_snapshot().ready;
        let startup = self.startup.clone();
        if starting {
            startup.begin("loading collections", "bytes", 0);
        }
        let pass = crate::sys::net::spawn_blocking(move || {
            let rebuild = || {
                crate::store::local::rebuild(
                    jobs,
                    &dir,
                    export.attributes,
                    export.thresholds,
                    keep_open,
                )
            };
            let (outcomes, b) = if starting {
                // Bytes of the collections finished before the one being read.
                let finished = std::cell::Cell::new((String::new(), 0u64, 0u64));
                let s = startup.clone();
                crate::store::collection::with_progress(
                    move |name: &str, p: crate::store::collection::Progress| {
                        let (last, base, current) = finished.take();
                        let base = if last == name { base } else { base + current };
                        s.set_done(base + p.bytes);
                        finished.set((name.to_owned(), base, p.bytes));
                    },
                    rebuild,
                )
            } else {
                rebuild()
            };
            let url = identity
                .base_uris
                .first()
                .cloned()
                .unwrap_or_else(|| "-".to_owned());
            let mut hint = b.finish(url, identity.base_uris.clone());
            hint.date = Some(hints::hint::format_date(SystemTime::now()));
            (outcomes, hint)
        })
        .await;
        if starting {
            self.startup.finish();
        }
        let (outcomes, hint) = match pass {
            Ok((o, h)) => (o, Arc::new(h)),
            Err(e) => {
                tracing::error!(error = %e, "local rebuild failed; keeping the previous local index");
                return Vec::new();
            }
        };
        let mut next = Vec::with_capacity(outcomes.len());
        for (((c, source), previous), outcome) in config
            .collections
            .iter()
            .zip(&sources)
            .zip(statuses)
            .zip(outcomes)
        {
            let (status, fingerprint) = match outcome.load {
                None => previous.unwrap_or_else(|| {
                    let empty = LoadReport::default();
                    (
                        collection_status(&c.name, source.as_ref(), &empty, None),
                        None,
                    )
                }),
                Some(Ok((report, fingerprint))) => (
                    collection_status(&c.name, source.as_ref(), &report, None),
                    fingerprint,
                ),
                Some(Err(error)) => {
                    let mut status = match previous {
                        Some((s, _)) => s,
                        None => collection_status(
                            &c.name,
                            source.as_ref(),
                            &LoadReport::default(),
                            None,
                        ),
                    };
                    status.error = Some(error);
                    (status, None)
                }
            };
            next.push(LoadedCollection {
                status,
                fingerprint,
                store: outcome.store,
            });
        }
        let generation = old.generation + 1;
        let local = LocalIndex {
            collections: next,
            hint,
            generation,
        };
        let objects = local.len();
        let memory = local.memory_estimate();
        self.local.store(Arc::new(local));
        drop(old);
        let names: Vec<&str> = config.collections.iter().map(|c| c.name.as_str()).collect();
        crate::store::local::remove_stale(
            &crate::store::local::cache_dir(&config.data_dir),
            &names,
        );
        self.update_status(|s| {
            s.local_objects = objects;
            s.local_generation = generation;
        });
        tracing::info!(objects, index_bytes = memory, generation, reloaded = ?reloaded, "local hint rebuilt");
        self.outbound.request();
        reloaded
    }

    // ---- out-bound hint ----------------------------------------------------------------

    /// What an out-bound build reads besides the table: the local hint and this node.
    pub fn outbound_input(&self) -> BuildInput {
        let local = self.local.load();
        let identity = self.identity.load();
        BuildInput {
            local: local.hint.clone(),
            local_generation: local.generation,
            node: hints::aggregate::NodeIdentity {
                dsi: identity.dsi.clone(),
                base_uris: identity.base_uris.clone(),
                url: identity
                    .base_uris
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "-".to_owned()),
            },
            signer: self.trust.key(),
        }
    }

    /// The out-bound index object for a poller (`exclude` = its DSI, when known), built
    /// from a state at least as new as the call (waiting at most `[outbound] max_wait`).
    pub async fn outbound_object(&self, exclude: Option<&Dsi>) -> IndexObject {
        let out = self.outbound.fresh(self.config().outbound.max_wait).await;
        let payload = self
            .outbound
            .payload_for(&out, exclude, || {
                (self.outbound_input(), self.table.clone())
            })
            .await;
        let identity = self.identity.load();
        IndexObject {
            index_type: hint_type(),
            dsi: identity.dsi.clone(),
            base_uris: identity.base_uris.clone(),
            dsi_description: identity.description.clone(),
            payload,
        }
    }

    /// The encoded out-bound hint (no peer excluded), up to date, for `export`.
    pub async fn current_outbound(&self) -> Bytes {
        self.outbound
            .fresh(self.config().outbound.max_wait)
            .await
            .payload
            .clone()
    }

    /// The current out-bound hint change counter.
    pub fn outbound_generation(&self) -> u64 {
        self.outbound.current().generation
    }
}

fn initial_peer_state(p: &crate::model::config::PeerConfig) -> PeerState {
    PeerState {
        name: p.name.clone(),
        address: match (&p.url, p.port) {
            (Some(url), _) => url.clone(),
            (None, Some(port)) => format!("{}:{port}", p.host),
            (None, None) => p.host.clone(),
        },
        roles: p.roles.iter().map(|r| r.as_str().to_owned()).collect(),
        dsi: p.dsi.as_ref().map(ToString::to_string),
        ..PeerState::default()
    }
}

fn collection_status(
    name: &str,
    source: &dyn CollectionSource,
    report: &LoadReport,
    error: Option<String>,
) -> CollectionStatus {
    CollectionStatus {
        name: name.to_owned(),
        source: source.describe(),
        objects: report.objects,
        skipped: report.skipped,
        files: report.files,
        bytes: report.bytes,
        loaded: Some(SystemTime::now()),
        error,
    }
}

/// Parses spooled entries on up to every core; each entry with its hint and payload digest.
#[allow(clippy::type_complexity)]
fn parse_spooled(
    entries: Vec<SpoolEntry>,
    spool: &Spool,
    limits: cip_proto::soif::Limits,
    hasher: &std::hash::RandomState,
    progress: &crate::sys::startup::Startup,
) -> Vec<(SpoolEntry, Result<(CipHint, u64), Rejection>)> {
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, 8);
    let chunk = entries.len().div_ceil(threads).max(1);
    let mut entries = entries;
    let mut chunks = Vec::new();
    while entries.len() > chunk {
        let rest = entries.split_off(chunk);
        chunks.push(std::mem::replace(&mut entries, rest));
    }
    chunks.push(entries);
    let parse = |chunk: Vec<SpoolEntry>| -> Vec<_> {
        chunk
            .into_iter()
            .map(|e| {
                let r = match crate::model::index_kind::IndexKind::from_name(&e.index_type) {
                    // The spool keeps totals: a tagged entry converts on its own.
                    Some(kind) => {
                        crate::pipeline::index_types::convert(kind, &e.payload, None, limits)
                            .map(|c| c.hint)
                    }
                    None => Err(Rejection::UnsupportedType(e.index_type.clone())),
                }
                .map(|h| {
                    // The deltas journalled since the file was written.
                    let (deltas, torn) = spool.journal(&e.peer, &e.dsi);
                    let (h, applied, stopped) = if deltas.is_empty() {
                        (h, 0, None)
                    } else {
                        crate::store::spool::replay(h, &deltas, limits)
                    };
                    if let Some(why) = torn.or(stopped) {
                        tracing::warn!(peer = %e.peer, dsi = %e.dsi, error = %why, applied,
                            "spool journal read in part; the peer's next answer brings the rest");
                    }
                    // As `import_object` digests what it imports (a hint re-polled the same
                    // is then only refreshed); one the journal changed is another hint.
                    let mut digest =
                        hasher.hash_one((&e.payload[..], &e.base_uris, &e.description));
                    if applied > 0 {
                        digest = hasher.hash_one((digest, applied));
                    }
                    (h, digest)
                });
                progress.advance(1);
                (e, r)
            })
            .collect()
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|c| scope.spawn(move || parse(c)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

fn object_json(o: &SoifObject) -> ObjectJson {
    ObjectJson {
        template: o.template().as_str().to_owned(),
        url: String::from_utf8_lossy(o.url()).into_owned(),
        attributes: o
            .attributes
            .iter()
            .map(|a| {
                (
                    a.name.as_str().to_owned(),
                    String::from_utf8_lossy(&a.value).into_owned(),
                )
            })
            .collect(),
    }
}

/// `ip:port` with IPv6 in brackets.
pub fn display_addr(a: SocketAddr) -> String {
    a.to_string()
}

#[cfg(test)]
mod tests {
    use super::reload::restart_only_changes;
    use super::*;
    use crate::pipeline::index_types::parse_hint;
    use crate::store::local::object_matches;

    fn obj(template: &str, pairs: &[(&str, &str)]) -> SoifObject {
        let mut o = SoifObject::new(template, "http://x/").unwrap();
        for (k, v) in pairs {
            o.push(k, v.to_string()).unwrap();
        }
        o
    }

    #[tokio::test(start_paused = true)]
    async fn unreachable_time_runs_on_the_runtime_clock() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::from_toml(&format!(
            "data_dir = {:?}\n[node]\ndsi = \"1.3.6.1.4.1.99999.1\"\n\
             [[peer]]\nname = \"p\"\nhost = \"127.0.0.1\"\nport = 7000\nrole = [\"poll\"]\n",
            dir.path().display().to_string()
        ))
        .unwrap();
        let node = Node::new(config, None, None, CancellationToken::new()).unwrap();
        assert_eq!(node.note_reachable("p", false), (Duration::ZERO, false));
        // The runtime's clock moves 90 s, the wall clock hardly at all (as in a simulation):
        // `limits.peer_gone_after` is measured on the runtime's.
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(node.note_reachable("p", false).0, Duration::from_secs(90));
        assert!(node.peer_states()[0].unreachable_since.is_some());
        assert_eq!(node.note_reachable("p", true).0, Duration::ZERO);
        assert!(node.peer_states()[0].unreachable_at.is_none());
        assert_eq!(node.note_reachable("p", false).0, Duration::ZERO);
    }

    #[test]
    fn connection_limits_and_backlog_need_a_restart() {
        let old = Config::from_toml(
            "data_dir = \"/var/lib/cipd\"\n[node]\ndsi = \"1.3.6.1.4.1.99999.1\"\n",
        )
        .unwrap();
        let mut new = old.clone();
        assert!(restart_only_changes(&old, &new).is_empty());
        new.limits.listen_backlog = 8;
        assert_eq!(
            restart_only_changes(&old, &new),
            ["limits (connection limits, listen backlog)"]
        );
        let mut new = old.clone();
        new.limits.max_http_connections_per_address = 3;
        assert_eq!(restart_only_changes(&old, &new).len(), 1);
    }

    #[test]
    fn local_matching() {
        let o = obj(
            "DOCUMENT",
            &[("Author-1", "Jose Garcia y Montes"), ("Title", " Mesh ")],
        );
        let m = |q: &str| object_matches(&Query::parse(q).unwrap(), &o);
        assert!(m("Author~garcia"));
        assert!(m("DOCUMENT:author~GARCIA & Title=mesh"));
        assert!(!m("FILE:Author~Garcia"));
        assert!(!m("Author=Garcia"));
        assert!(!m("Author~Garcia & Title=net"));
        assert!(!m("Keywords~x"));
    }

    #[test]
    fn hint_payloads_are_checked() {
        let good = Bytes::from_static(b"@CIP-HINT { -\nTotal-Object-Count{1}:\t2\n}\n");
        assert_eq!(
            parse_hint(&good, Default::default())
                .unwrap()
                .total_object_count,
            2
        );
        let two = Bytes::from_static(b"@CIP-HINT { -\n}\n@CIP-HINT { -\n}\n");
        assert!(matches!(
            parse_hint(&two, Default::default()),
            Err(Rejection::Invalid(_))
        ));
        let wrong = Bytes::from_static(b"@FILE { -\n}\n");
        assert!(matches!(
            parse_hint(&wrong, Default::default()),
            Err(Rejection::Invalid(_))
        ));
        let junk = Bytes::from_static(b"nonsense");
        assert!(matches!(
            parse_hint(&junk, Default::default()),
            Err(Rejection::Invalid(_))
        ));
    }
}
