//! The node's shared state and the operations on it: [`Node`].
//!
//! Everything a front-end (CIP service, HTTP, admin socket) needs goes through `Node`: the
//! configuration (hot-swapped on reload), the local collections and their hint, the routing
//! table, the out-bound hint, per-peer state, the spool, and a `watch` channel of [`Status`]
//! counters that tests and the admin socket read. Background tasks (peer polling, collection
//! watching, expiry) live in [`crate::peer`] and [`crate::daemon`] and call back into it.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::{ArcSwap, ArcSwapOption};
use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::cip::{IndexObject, IndexType};
use cip_proto::soif::{SoifObject, attr, parse_all};
use hints::answer::ReferralView;
use hints::hint::CipHint;
use hints::query::{MatchOp, Query};
use hints::rank::QueryOptions;
use hints::table::{ImportError, PeerMeta, PeerSummary, RoutingTable, TableConfig};
use hints::thesaurus::Thesaurus;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::answers::{AnswerCache, Stamp};
use crate::binding::{Bindings, Claim};
use crate::collection::{self, CollectionSource, Fingerprint, LoadReport};
use crate::config::{Config, PeerRole, read_config};
use crate::import::{Digests, Importer, QueueError};
use crate::local::CollectionStore;
use crate::metrics::{Gauges, Metrics};
use crate::outbound::{BuildInput, Pipeline};
use crate::spool::{Spool, SpoolEntry};
use crate::telemetry::LogHandle;

/// Local objects a substring query may search on an async worker ([`Node::is_quick`]).
const QUICK_LOCAL_OBJECTS: u64 = 10_000;

/// Counters and flags published on the node's `watch` channel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// All listeners are bound and the spool is restored.
    pub ready: bool,
    /// Objects in local collections.
    pub local_objects: u64,
    /// Bumped each time the local hint is rebuilt.
    pub local_generation: u64,
    /// Bumped each time the out-bound hint changes.
    pub outbound_generation: u64,
    /// Datasets in the routing table.
    pub table_peers: u64,
    /// Successful polls.
    pub polls_ok: u64,
    /// Failed polls.
    pub polls_failed: u64,
    /// In-bound index objects accepted (polled, pushed or restored from the spool).
    pub hints_accepted: u64,
    /// In-bound index objects refused.
    pub hints_rejected: u64,
    /// Index objects restored from the spool at start.
    pub spool_restored: u64,
    /// Spool files found corrupt at start.
    pub spool_corrupt: u64,
    /// `datachanged` received from peers we poll.
    pub datachanged_received: u64,
    /// `datachanged` sent to our pollers.
    pub datachanged_sent: u64,
    /// Index objects pushed to push targets.
    pub pushes_sent: u64,
    /// CIP requests refused because the peer is not configured.
    pub unknown_peer_refusals: u64,
    /// Configuration reloads that took effect.
    pub reloads: u64,
    /// Configuration reloads refused (bad new configuration).
    pub reload_failures: u64,
    /// Hints dropped by TTL.
    pub expired: u64,
    /// The routing table's generation (bumped by every change to it).
    pub table_generation: u64,
    /// The table generation the out-bound hint was last built from.
    pub outbound_table_generation: u64,
    /// Out-bound builds done.
    pub outbound_builds: u64,
    /// Configured peers that deliver hints (role `poll` or `pusher`).
    pub peers_expected: u64,
    /// Of those, the ones whose hint the table holds.
    pub peers_imported: u64,
    /// In-bound index objects refused because their DSI is not their peer's.
    pub dsi_refusals: u64,
    /// In-bound index objects refused for counts that cannot be true.
    pub implausible_refusals: u64,
    /// Spool entries set aside at start (peer or DSI no longer matching).
    pub spool_set_aside: u64,
    /// In-bound hints refused for their signature (missing, invalid, replayed,
    /// uncheckable).
    pub signature_refusals: u64,
    /// In-bound hints refused because they would put the routing table over a memory
    /// budget.
    pub budget_refusals: u64,
}

/// What the node knows about one configured peer (shown by the admin socket).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerState {
    /// Configured name.
    pub name: String,
    /// `host:port` (port absent for receive-only peers).
    pub address: String,
    /// Roles.
    pub roles: Vec<String>,
    /// The peer's DSI: configured, else learned from its index objects.
    pub dsi: Option<String>,
    /// Last poll (or push) attempt.
    pub last_attempt: Option<SystemTime>,
    /// Last successful poll (or push).
    pub last_success: Option<SystemTime>,
    /// Last error, if the last attempt failed.
    pub last_error: Option<String>,
    /// Failures since the last success.
    pub consecutive_failures: u32,
    /// When the next poll is due.
    pub next_attempt: Option<SystemTime>,
    /// When its current hint arrived.
    pub hint_received: Option<SystemTime>,
    /// Total-Object-Count of its current hint.
    pub hint_objects: Option<u64>,
    /// Successful polls/pushes.
    pub successes: u64,
    /// Failed polls/pushes.
    pub failures: u64,
    /// Addresses the host resolved to (used to recognise its connections).
    #[serde(skip)]
    pub resolved: Vec<IpAddr>,
}

/// One local collection's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollectionStatus {
    /// Configured name.
    pub name: String,
    /// Source description.
    pub source: String,
    /// Objects loaded.
    pub objects: u64,
    /// Objects skipped as unparsable.
    pub skipped: u64,
    /// Files read.
    pub files: u64,
    /// Bytes read.
    pub bytes: u64,
    /// When it was last loaded.
    pub loaded: Option<SystemTime>,
    /// The last load error (the previous objects are kept).
    pub error: Option<String>,
}

struct LoadedCollection {
    status: CollectionStatus,
    fingerprint: Option<Fingerprint>,
    store: Arc<CollectionStore>,
}

/// The local collections and the hint built from them.
pub struct LocalIndex {
    collections: Vec<LoadedCollection>,
    /// The local hint.
    pub hint: Arc<CipHint>,
    /// Rebuild counter.
    pub generation: u64,
}

impl LocalIndex {
    /// The store of collection `name` (an RDM catalog), if loaded.
    pub fn catalog(&self, name: &str) -> Option<Arc<CollectionStore>> {
        self.collections
            .iter()
            .find(|c| c.status.name == name)
            .map(|c| c.store.clone())
    }

    /// Every collection's store, in configuration order.
    pub fn stores(&self) -> impl Iterator<Item = &CollectionStore> {
        self.collections.iter().map(|c| &*c.store)
    }

    /// The count of local objects matching `q` and the first `want` of them (see
    /// [`crate::local::query`]).
    ///
    /// # Errors
    /// [`QueryError::NotIndexed`], [`QueryError::Store`].
    pub fn query(
        &self,
        q: &Query,
        want: usize,
        scan_max: usize,
    ) -> Result<crate::local::LocalMatches, QueryError> {
        crate::local::query(self.stores(), q, want, scan_max)
    }

    /// Heap bytes of the stores' offsets and indexes (an estimate).
    pub fn memory_estimate(&self) -> usize {
        self.stores().map(CollectionStore::memory_estimate).sum()
    }

    /// Per-collection status.
    pub fn collections(&self) -> Vec<CollectionStatus> {
        self.collections.iter().map(|c| c.status.clone()).collect()
    }

    /// Number of local objects.
    pub fn len(&self) -> u64 {
        self.collections.iter().map(|c| c.store.len() as u64).sum()
    }

    /// True when there are no local objects.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// This node's identity as it appears on out-bound index objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// DSI.
    pub dsi: Dsi,
    /// Base URIs (configured, or derived from the first HTTP listener).
    pub base_uris: Vec<String>,
    /// DSI-description.
    pub description: Option<String>,
}

/// Addresses the daemon's listeners are bound to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listeners {
    /// Plain CIP.
    pub cip: Vec<SocketAddr>,
    /// CIP over TLS.
    pub cip_tls: Vec<SocketAddr>,
    /// HTTP.
    pub http: Vec<SocketAddr>,
    /// HTTPS.
    pub https: Vec<SocketAddr>,
    /// The admin socket's path.
    pub admin: Option<PathBuf>,
}

/// A query that cannot be answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The query does not parse.
    #[error("bad query: {0}")]
    Syntax(#[from] hints::query::QueryError),
    /// A parameter is out of range.
    #[error("bad parameter {name}: {message}")]
    BadParameter {
        /// The parameter.
        name: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A term names an attribute the local index does not cover, and checking it would
    /// read more objects than `limits.local_scan_max_objects`.
    #[error(
        "attribute {attribute:?} is not indexed and checking it would read more than {max} \
         objects (limits.local_scan_max_objects); indexed attributes: {}",
        indexed.join(", ")
    )]
    NotIndexed {
        /// The first unindexed attribute of the query.
        attribute: String,
        /// The limit.
        max: usize,
        /// The indexed attributes (lowercase, without multi-value suffix).
        indexed: Vec<String>,
    },
    /// The local store could not be read.
    #[error("local store: {0}")]
    Store(#[from] crate::local::StoreError),
}

/// One referral as the HTTP API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReferralJson {
    /// The dataset's DSI.
    pub dsi: String,
    /// Where to send the query next.
    pub base_uri: Vec<String>,
    /// The dataset's description, when known.
    pub dsi_description: Option<String>,
    /// Estimated matching objects (0 for possible referrals).
    pub count: u64,
    /// Objects in the dataset.
    pub total: u64,
    /// True when reported values matched every term.
    pub definite: bool,
    /// Matched values with their counts.
    pub values: Vec<(String, u64)>,
}

impl From<ReferralView<'_>> for ReferralJson {
    fn from(r: ReferralView<'_>) -> Self {
        Self {
            dsi: r.dsi().to_string(),
            base_uri: r.base_uris().to_vec(),
            dsi_description: r.dsi_description().map(str::to_owned),
            count: r.count(),
            total: r.total(),
            definite: r.definite(),
            values: r
                .values()
                .map(|(v, c)| (String::from_utf8_lossy(v).into_owned(), c))
                .collect(),
        }
    }
}

/// The answer to `/v1/referrals`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryAnswer {
    /// The query as given.
    pub query: String,
    /// The answering node's DSI (clients detect loops by it, RFC 2651 §4).
    pub dsi: String,
    /// Ranked referrals, at most the request's `limit`.
    pub referrals: Vec<ReferralJson>,
    /// More referrals rank below these: ask again with a larger `limit` (up to
    /// `limits.max_referrals`) for them.
    #[serde(default)]
    pub more: bool,
    /// Local objects matching the query (fetch them from `/v1/objects`).
    pub local: u64,
}

/// One object as `/v1/objects` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectJson {
    /// Template type.
    pub template: String,
    /// URL.
    pub url: String,
    /// Attribute-value pairs in order (values as UTF-8, lossy).
    pub attributes: Vec<(String, String)>,
}

/// The answer to `/v1/objects`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectsAnswer {
    /// The query as given.
    pub query: String,
    /// This node's DSI.
    pub dsi: String,
    /// Matching objects (at most the limit).
    pub objects: Vec<ObjectJson>,
    /// All matching objects.
    pub total: u64,
}

/// Why an in-bound index object was refused; [`Rejection::code`] is the CIP answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// Not `HARVEST-SOIF-1`.
    #[error("index object type {0} not accepted; this mesh passes HARVEST-SOIF-1")]
    UnsupportedType(String),
    /// The payload is not one CIP-HINT object.
    #[error("invalid hint: {0}")]
    Invalid(String),
    /// The table refused it (own DSI, loop, limits).
    #[error("{0}")]
    Refused(#[from] ImportError),
    /// It could not be stored.
    #[error("cannot store the hint: {0}")]
    Storage(String),
    /// Its DSI is not the sending peer's (see [`crate::binding`]).
    #[error("{0}")]
    Binding(#[from] crate::binding::BindingError),
    /// Its signature is missing, invalid, replayed or cannot be checked
    /// ([`crate::trust`]).
    #[error("signature: {0}")]
    Signature(#[from] crate::trust::signature::SignatureError),
}

impl Rejection {
    /// The CIP response code for this refusal (digest A8: 501 for a refused type, 400 when
    /// the refusal is temporary).
    pub fn code(&self) -> cip_proto::cip::ResponseCode {
        use cip_proto::cip::ResponseCode as C;
        match self {
            Self::UnsupportedType(_) => C::UnknownRequest,
            Self::Invalid(_) => C::BadMimeFormat,
            Self::Refused(
                ImportError::TooManyPeers { .. }
                | ImportError::TooLarge
                | ImportError::OverTableBudget { .. },
            ) => C::TemporarilyUnable,
            Self::Refused(_) => C::UnknownRequest,
            Self::Storage(_) => C::TemporarilyUnable,
            // Refused on authentication grounds: RFC 2652 §4.2 wants the 530 series.
            Self::Binding(_) => C::SignatureRequired,
            Self::Signature(e) => e.code(),
        }
    }
}

/// Why a reload failed (the old configuration stays).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The new configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The new signing key cannot be loaded.
    #[error("signing key: {0}")]
    Key(crate::trust::keys::KeyError),
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
    /// Shared with the import thread ([`crate::import`]) and the out-bound builds
    /// ([`crate::outbound`]), which run off the async workers.
    table: Arc<RoutingTable>,
    /// The out-bound hint and its builder's request sequence.
    outbound: Arc<Pipeline>,
    /// Which DSI each peer may deliver.
    bindings: Arc<Bindings>,
    /// The queue to the import thread.
    importer: Importer,
    /// Bounds the in-bound hints being parsed at once (on the blocking pool).
    parsing: tokio::sync::Semaphore,
    thesaurus: ArcSwapOption<Thesaurus>,
    peers: Mutex<BTreeMap<String, PeerState>>,
    poll_now: Mutex<HashMap<String, Arc<Notify>>>,
    spool: Arc<Spool>,
    status: watch::Sender<Status>,
    listeners: Mutex<Listeners>,
    rebuild: tokio::sync::Mutex<()>,
    pub(crate) token: CancellationToken,
    pub(crate) tracker: TaskTracker,
    pub(crate) peer_token: Mutex<CancellationToken>,
    log: Option<LogHandle>,
    started: Instant,
    metrics: Metrics,
    /// Keyed hash of the payload whose hint the table holds, per dataset: an unchanged
    /// hint re-polled still refreshes its expiry, but the out-bound aggregate is not
    /// recomputed. Changed only together with the table, under this lock, so an entry
    /// always describes what the table holds for that DSI.
    imported: Digests,
    payload_hasher: std::hash::RandomState,
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
    /// RDM catalogs' change journals ([`crate::rdm::journal`]).
    rdm: crate::rdm::journal::Journals,
    /// Per-type state: stored tagged totals, learned peer types ([`crate::index_types`]).
    index_state: crate::index_types::State,
    /// The signing key, and what peers' signatures showed ([`crate::trust`]).
    trust: crate::trust::Trust,
    /// Progress of a long start ([`crate::startup`]).
    startup: Arc<crate::startup::Startup>,
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
    ) -> Result<Self, Box<crate::daemon::StartError>> {
        let spool = Arc::new(
            Spool::open(&config.data_dir)
                .map_err(|e| Box::new(crate::daemon::StartError::Spool(e)))?,
        );
        let identity = Identity {
            dsi: config.node.dsi.clone(),
            base_uris: config.node.base_uris.clone(),
            description: config.node.description.clone(),
        };
        let table = Arc::new(RoutingTable::new(TableConfig {
            node: Some(config.node.dsi.clone()),
            limits: config.limits.table,
            summaries: config.index,
        }));
        let peers = config
            .peers
            .iter()
            .map(|p| (p.name.clone(), initial_peer_state(p)))
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
        .map_err(|e| Box::new(crate::daemon::StartError::Thread(e)))?;
        let parsers = config.import.parsers;
        let answer_cache_bytes = config.limits.answer_cache_bytes;
        let scans = config.limits.max_concurrent_scans;
        let polls = config.limits.max_concurrent_polls;
        let trust = crate::trust::Trust::default();
        trust.set_key(
            crate::trust::Trust::load_key(config.signing.key.as_deref())
                .map_err(|e| Box::new(crate::daemon::StartError::Key(e)))?,
        );
        Ok(Self {
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
            log,
            started: Instant::now(),
            metrics: Metrics::default(),
            imported,
            payload_hasher: std::hash::RandomState::new(),
            answers: AnswerCache::new(answer_cache_bytes),
            scans: tokio::sync::Semaphore::new(scans),
            polls: tokio::sync::Semaphore::new(polls),
            cold_start: std::sync::atomic::AtomicBool::new(false),
            settling: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            epoch: AtomicU64::new(0),
            rdm: crate::rdm::journal::Journals::default(),
            index_state: crate::index_types::State::default(),
            trust,
            startup: Arc::default(),
        })
    }

    /// Progress of the start, while one runs.
    pub fn startup(&self) -> &crate::startup::Startup {
        &self.startup
    }

    /// The signing key and what peers' signatures showed.
    pub fn trust(&self) -> &crate::trust::Trust {
        &self.trust
    }

    /// Per-type state: tagged totals held, index types learned from peers.
    pub fn index_state(&self) -> &crate::index_types::State {
        &self.index_state
    }

    /// The RDM catalogs' change journals.
    pub fn rdm_journals(&self) -> &crate::rdm::journal::Journals {
        &self.rdm
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
            peers_imported: imported,
            cold_start: self.cold_starting(),
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

    /// Time since the node started.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Bound listener addresses.
    pub fn listeners(&self) -> Listeners {
        lock(&self.listeners).clone()
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

    /// Every configured peer's state.
    pub fn peer_states(&self) -> Vec<PeerState> {
        lock(&self.peers).values().cloned().collect()
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
        if self.identity.load().base_uris.is_empty()
            && let Some((scheme, addr)) = first
        {
            let mut id = (**self.identity.load()).clone();
            id.base_uris = vec![format!("{scheme}://{}/", display_addr(*addr))];
            self.identity.store(Arc::new(id));
            self.invalidate_answers();
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
    ) -> Option<&'c crate::config::PeerConfig> {
        config
            .peers
            .iter()
            .find(|p| p.name == peer || self.peer_dsi(&p.name).is_some_and(|d| d.as_str() == peer))
    }

    /// Polls `peer` now instead of at its next interval.
    ///
    /// # Errors
    /// When no configured peer has that name (or DSI) and role `poll`.
    pub fn poll_now(&self, peer: &str) -> Result<String, String> {
        let config = self.config();
        let name = self
            .find_peer(&config, peer)
            .filter(|p| p.has_role(PeerRole::Poll))
            .map(|p| p.name.clone())
            .ok_or_else(|| format!("no peer {peer:?} with role poll"))?;
        self.poll_notifier(&name).notify_one();
        Ok(name)
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
        let known = |p: &crate::config::PeerConfig| self.bindings.get(&p.name).map(|b| b.dsi);
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
        let indexed = crate::local::indexed_attributes(&config.export.attributes);
        let old = self.local.load_full();
        let mut jobs = Vec::with_capacity(config.collections.len());
        let mut sources = Vec::with_capacity(config.collections.len());
        let mut reloaded = Vec::new();
        for c in &config.collections {
            let source: Arc<dyn CollectionSource> = Arc::from(collection::source_for(c, &ctx));
            let previous = old
                .collections
                .iter()
                .find(|p| p.status.name == c.name && p.status.source == source.describe());
            sources.push(source.clone());
            if !force && let Some(prev) = previous {
                let fp = {
                    let s = source.clone();
                    tokio::task::spawn_blocking(move || s.fingerprint().ok())
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
                        crate::local::Job::Keep(prev.store.clone()),
                    ));
                    continue;
                }
            }
            reloaded.push(c.name.clone());
            jobs.push((
                previous.map(|p| (p.status.clone(), p.fingerprint)),
                crate::local::Job::Load {
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
        let identity = self.identity();
        let dir = crate::local::cache_dir(&config.data_dir);
        let (statuses, jobs): (Vec<_>, Vec<_>) = jobs.into_iter().unzip();
        // During the start, the bytes read show in `cipctl status`.
        let starting = !self.status_snapshot().ready;
        let startup = self.startup.clone();
        if starting {
            startup.begin("loading collections", "bytes", 0);
        }
        let pass = tokio::task::spawn_blocking(move || {
            let rebuild =
                || crate::local::rebuild(jobs, &dir, export.attributes, export.thresholds);
            let (outcomes, b) = if starting {
                // Bytes of the collections finished before the one being read.
                let finished = std::cell::Cell::new((String::new(), 0u64, 0u64));
                let s = startup.clone();
                crate::collection::with_progress(
                    move |name: &str, p: crate::collection::Progress| {
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
        crate::local::remove_stale(&crate::local::cache_dir(&config.data_dir), &names);
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

    // ---- in-bound index objects ---------------------------------------------------------

    /// Validates an index object from configured peer `peer`, puts it in the table and the
    /// spool, and asks for an out-bound rebuild when it changed the table.
    ///
    /// # Errors
    /// [`Rejection`] saying why it was refused (the table and spool are then unchanged).
    pub async fn accept_index(&self, peer: &str, obj: IndexObject) -> Result<(), Rejection> {
        let dsi = obj.dsi.clone();
        let result = self.accept_index_inner(peer, obj).await;
        match &result {
            Ok(()) => {
                Metrics::inc(&self.metrics.index_objects_received);
                self.update_status(|s| s.hints_accepted += 1);
            }
            Err(e) => {
                match e {
                    Rejection::Binding(b) => {
                        let owner = match b {
                            crate::binding::BindingError::NotItsDsi { bound, .. } => {
                                Some(bound.to_string())
                            }
                            crate::binding::BindingError::Taken { owner, .. } => {
                                Some(owner.clone())
                            }
                            _ => None,
                        };
                        tracing::warn!(
                            %peer,
                            %dsi,
                            bound = owner.as_deref().unwrap_or("-"),
                            error = %e,
                            "index object refused: not the peer's dsi"
                        );
                        Metrics::inc(&self.metrics.index_objects_forged);
                        self.update_status(|s| s.dsi_refusals += 1);
                    }
                    Rejection::Refused(
                        ImportError::ImplausibleTotal { .. } | ImportError::CountAboveTotal { .. },
                    ) => {
                        tracing::warn!(%peer, %dsi, error = %e, "index object refused: implausible counts");
                        Metrics::inc(&self.metrics.index_objects_implausible);
                        self.update_status(|s| s.implausible_refusals += 1);
                    }
                    Rejection::Refused(
                        ImportError::OverPeerBudget { .. } | ImportError::OverTableBudget { .. },
                    ) => {
                        tracing::warn!(%peer, %dsi, error = %e, "index object refused: memory budget");
                        Metrics::inc(&self.metrics.index_objects_over_budget);
                        self.update_status(|s| s.budget_refusals += 1);
                    }
                    Rejection::Signature(s) => {
                        tracing::warn!(%peer, %dsi, error = %e, code = s.code().code(), "index object refused: signature");
                        Metrics::inc(&self.metrics.hint_signatures_refused);
                        self.trust.refused(peer, s);
                        self.update_status(|s| s.signature_refusals += 1);
                    }
                    _ => tracing::warn!(%peer, %dsi, error = %e, "index object refused"),
                }
                Metrics::inc(&self.metrics.index_objects_rejected);
                self.update_status(|s| s.hints_rejected += 1);
            }
        }
        result
    }

    async fn accept_index_inner(&self, peer: &str, obj: IndexObject) -> Result<(), Rejection> {
        let Some(kind) = crate::index_types::IndexKind::of(&obj.index_type) else {
            return Err(Rejection::UnsupportedType(
                obj.index_type.as_str().to_owned(),
            ));
        };
        // Identity first: an object for somebody else's DSI costs no parsing, and never
        // reaches the table or the spool.
        let dsi = obj.dsi.clone();
        let claim = self.bindings.claim(peer, &dsi)?;
        let result = self.import_object(peer, kind, obj).await;
        if claim == Claim::New {
            match &result {
                Ok(()) => {
                    tracing::info!(%peer, %dsi, "peer bound to the dsi of its first index object");
                    self.update_peer(peer, |s| s.dsi = Some(dsi.to_string()));
                }
                Err(_) => self.bindings.release(peer, &dsi),
            }
        }
        result
    }

    /// Parses `obj` (on the blocking pool), imports it through the import queue and
    /// spools it.
    async fn import_object(
        &self,
        peer: &str,
        kind: crate::index_types::IndexKind,
        obj: IndexObject,
    ) -> Result<(), Rejection> {
        let config = self.config();
        let limits = soif_limits(&config);
        let (hint, digest) = {
            let _permit = self
                .parsing
                .acquire()
                .await
                .map_err(|_| Rejection::Storage("shutting down".into()))?;
            let (payload, base_uris, description) = (
                obj.payload.clone(),
                obj.base_uris.clone(),
                obj.dsi_description.clone(),
            );
            let hasher = self.payload_hasher.clone();
            let trust = config
                .peer(peer)
                .map(|p| p.trust.clone())
                .unwrap_or_default();
            let last = self.trust.last(peer);
            let skew = config.signing.max_clock_skew;
            // Only a tagged update applies to what is held; SOIF hints are always totals.
            let previous = (kind == crate::index_types::IndexKind::Tagged)
                .then(|| self.index_state.stored(&obj.dsi))
                .flatten();
            tokio::task::spawn_blocking(move || {
                let converted =
                    crate::index_types::convert(kind, &payload, previous.as_ref(), limits)?;
                // A hint that fails its peer's signature policy goes no further.
                let verdict = crate::trust::signature::check(
                    &converted.hint,
                    &trust,
                    last,
                    SystemTime::now(),
                    skew,
                )?;
                // Everything the out-bound aggregate reads from this object: the payload,
                // and the base-uris (their schemes decide whether it is aggregated) and
                // description.
                let digest = hasher.hash_one((&converted.stored[..], &base_uris, &description));
                Ok::<_, Rejection>(((converted.hint, converted.stored, verdict), digest))
            })
            .await
            .map_err(|e| Rejection::Storage(format!("parse task failed: {e}")))??
        };
        let (hint, stored, verdict) = hint;
        let received = SystemTime::now();
        let meta = PeerMeta {
            dsi: obj.dsi.clone(),
            base_uris: obj.base_uris.clone(),
            dsi_description: obj.dsi_description.clone(),
            received,
            expires: Some(received + config.spool_ttl),
            via: Some(peer.to_owned()),
        };
        let objects = hint.total_object_count;
        // The table refuses our own DSI, loops (provenance) and implausible counts; a
        // refused hint never reaches the spool.
        // A reload may end the peer's binding while the object waits in the import queue:
        // the import thread asks the binding right before the write (and the reload drops
        // the dataset under the same lock), so the outcome holds even if this future is
        // dropped mid-import (a poller restarted by that reload).
        let vouch: crate::import::Vouch = {
            let (bindings, peer, dsi) = (self.bindings.clone(), peer.to_owned(), obj.dsi.clone());
            Box::new(move || bindings.get(&peer).is_some_and(|b| b.dsi == dsi))
        };
        self.importer
            .import(meta, hint, digest, Some(vouch))
            .await
            .map_err(|e| match e {
                QueueError::Refused(r) => Rejection::Refused(r),
                other => Rejection::Storage(other.to_string()),
            })?;
        // Ended after the write: the reload drops the dataset; this keeps it out of the
        // spool.
        if self.bindings.get(peer).is_none_or(|b| b.dsi != obj.dsi) {
            tracing::info!(%peer, dsi = %obj.dsi, "binding ended during the import; its hint dropped");
            self.drop_dataset(&obj.dsi);
            return Err(Rejection::Storage(
                "the peer's dsi binding ended while its object was imported".into(),
            ));
        }
        self.index_state
            .note_stored(obj.index_type.as_str(), &obj.dsi, &stored);
        if matches!(verdict, crate::trust::signature::Verdict::Valid { .. }) {
            Metrics::inc(&self.metrics.hint_signatures_valid);
        }
        self.trust.accepted(peer, &verdict);
        let entry = SpoolEntry {
            peer: peer.to_owned(),
            dsi: obj.dsi,
            index_type: obj.index_type.as_str().to_owned(),
            base_uris: obj.base_uris,
            description: obj.dsi_description,
            received,
            payload: stored,
        };
        let spool = self.spool.clone();
        let stored = tokio::task::spawn_blocking(move || spool.store(&entry)).await;
        if let Err(e) = stored
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
        {
            tracing::error!(%peer, error = %e, "cannot write the spool; the hint is kept in memory only");
        }
        self.update_peer(peer, |s| {
            s.hint_received = Some(received);
            s.hint_objects = Some(objects);
        });
        self.note_table_change();
        Ok(())
    }

    /// Starts the cold start: until every configured peer's hint is in (or
    /// [`Node::end_cold_start`] is called otherwise), the table is in bulk-load mode
    /// ([`RoutingTable::set_bulk_load`]).
    pub(crate) fn begin_cold_start(&self) {
        let (expected, imported) = self.import_progress();
        if imported < expected {
            self.cold_start.store(true, Ordering::Release);
            self.settling.store(true, Ordering::Release);
            self.table.set_bulk_load(true);
        }
    }

    /// Ends the cold start (once): merges the segments it left, where the values peers
    /// share are stored once per segment, and summarizes the result; off the async workers.
    pub(crate) fn end_cold_start(&self) {
        if !self.cold_start.swap(false, Ordering::AcqRel) {
            return;
        }
        let (table, settling) = (self.table.clone(), self.settling.clone());
        let work = move || {
            let started = Instant::now();
            table.set_bulk_load(false);
            settling.store(false, Ordering::Release);
            tracing::info!(took = ?started.elapsed(), "routing table merged after the start");
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(work)),
            Err(_) => work(),
        }
    }

    /// True from a cold start until its final merge is done.
    pub fn cold_starting(&self) -> bool {
        self.settling.load(Ordering::Acquire)
    }

    /// Configured peers that deliver hints, and how many of them the table holds.
    pub fn import_progress(&self) -> (u64, u64) {
        let config = self.config();
        let mut expected = 0;
        let mut imported = 0;
        for p in config
            .peers
            .iter()
            .filter(|p| p.has_role(PeerRole::Poll) || p.has_role(PeerRole::Pusher))
        {
            expected += 1;
            if self
                .bindings
                .get(&p.name)
                .is_some_and(|b| self.table.contains(&b.dsi))
            {
                imported += 1;
            }
        }
        (expected, imported)
    }

    /// Publishes the table's figures after a change.
    fn note_table_change(&self) {
        let (expected, imported) = self.import_progress();
        let generation = self.table.generation();
        let peers = self.table.stats().peers as u64;
        let mut completed = false;
        self.update_status(|s| {
            completed = s.peers_imported < expected && imported == expected && expected > 0;
            s.table_peers = peers;
            s.table_generation = s.table_generation.max(generation);
            s.peers_expected = expected;
            s.peers_imported = imported;
        });
        if completed {
            tracing::info!(
                peers = expected,
                after = ?self.uptime(),
                "the routing table holds every configured peer's hint"
            );
            self.end_cold_start();
        }
    }

    /// Restores the table from the spool (at start, before any peer is contacted).
    pub(crate) fn restore_spool(&self) {
        let config = self.config();
        let now = SystemTime::now();
        let outcome = match self.spool.load_all(now, config.spool_ttl) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the spool; starting with an empty table");
                return;
            }
        };
        let mut corrupt = outcome.corrupt.len() as u64;
        for e in &outcome.corrupt {
            tracing::warn!(error = %e, "skipped a spool file");
        }
        // Only entries whose peer and DSI still match the configuration come back.
        let (admitted, aside) = self.bindings.admit_spooled(&config, outcome.entries);
        let set_aside = aside.len() as u64;
        for (e, why) in aside {
            match self.spool.set_aside(&e.peer, &e.dsi) {
                Ok(path) => tracing::warn!(
                    peer = %e.peer, dsi = %e.dsi, reason = %why, file = %path.display(),
                    "spool entry set aside, not loaded"
                ),
                Err(err) => tracing::warn!(
                    peer = %e.peer, dsi = %e.dsi, reason = %why, error = %err,
                    "spool entry not loaded and cannot be set aside"
                ),
            }
        }
        // Parse on every core: a hub restores hundreds of hints.
        let limits = soif_limits(&config);
        self.startup
            .begin("restoring the spool", "hints", admitted.len() as u64);
        let parsed = parse_spooled(admitted, limits, &self.payload_hasher, &self.startup);
        let mut batch = Vec::with_capacity(parsed.len());
        let mut restored_from = Vec::with_capacity(parsed.len());
        for (e, result) in parsed {
            let result = result.and_then(|(hint, digest)| {
                self.check_spooled(&config, &e.peer, &hint)?;
                Ok((hint, digest))
            });
            match result {
                Ok((hint, digest)) => {
                    batch.push((
                        PeerMeta {
                            dsi: e.dsi.clone(),
                            base_uris: e.base_uris.clone(),
                            dsi_description: e.description.clone(),
                            received: e.received,
                            expires: Some(e.received + config.spool_ttl),
                            via: Some(e.peer.clone()),
                        },
                        hint,
                    ));
                    self.index_state
                        .note_stored(&e.index_type, &e.dsi, &e.payload);
                    restored_from.push((e, digest));
                }
                Err(err) => {
                    corrupt += 1;
                    tracing::warn!(peer = %e.peer, dsi = %e.dsi, error = %err, "skipped a spooled hint");
                    self.bindings.release(&e.peer, &e.dsi);
                }
            }
        }
        let objects: Vec<u64> = batch.iter().map(|(_, h)| h.total_object_count).collect();
        self.startup
            .begin("indexing the spooled hints", "hints", batch.len() as u64);
        let results = {
            let mut imported = lock(&self.imported);
            let results = self.table.replace_all(batch);
            for (r, (e, digest)) in results.iter().zip(&restored_from) {
                if r.is_ok() {
                    imported.insert(e.dsi.clone(), *digest);
                }
            }
            results
        };
        let mut restored = 0u64;
        for ((r, (e, _)), objects) in results.iter().zip(&restored_from).zip(objects) {
            match r {
                Ok(_) => {
                    restored += 1;
                    self.update_peer(&e.peer, |s| {
                        s.dsi = Some(e.dsi.to_string());
                        s.hint_received = Some(e.received);
                        s.hint_objects = Some(objects);
                    });
                }
                Err(err) => {
                    tracing::warn!(peer = %e.peer, dsi = %e.dsi, error = %err, "spooled hint refused by the table; set aside");
                    self.bindings.release(&e.peer, &e.dsi);
                    if let Err(err) = self.spool.set_aside(&e.peer, &e.dsi) {
                        tracing::warn!(error = %err, "cannot set a spool entry aside");
                    }
                }
            }
        }
        self.startup.set_done(results.len() as u64);
        self.startup.finish();
        self.outbound.request();
        tracing::info!(
            restored,
            corrupt,
            set_aside,
            expired = outcome.expired,
            "routing table restored from the spool"
        );
        self.update_status(|s| {
            s.spool_restored = restored;
            s.spool_corrupt = corrupt;
            s.spool_set_aside = set_aside;
        });
        self.note_table_change();
    }

    /// Checks a spooled hint against its peer's current signature policy (a key or policy
    /// may have changed since it was stored) and notes its date as the peer's replay bound.
    fn check_spooled(&self, config: &Config, peer: &str, hint: &CipHint) -> Result<(), Rejection> {
        let trust = config
            .peer(peer)
            .map(|p| p.trust.clone())
            .unwrap_or_default();
        // Its date was checked against the clock when it arrived.
        let verdict =
            crate::trust::signature::check(hint, &trust, None, SystemTime::now(), Duration::MAX)?;
        self.trust.accepted(peer, &verdict);
        Ok(())
    }

    /// Drops hints older than the TTL from the table and the spool.
    pub fn expire(&self) -> usize {
        let gone = {
            let mut imported = lock(&self.imported);
            let gone = self.table.expire(SystemTime::now());
            imported.retain(|d, _| !gone.contains(d));
            gone
        };
        if gone.is_empty() {
            return 0;
        }
        self.forget_hints(&gone);
        let peers: Vec<String> = lock(&self.peers).keys().cloned().collect();
        for dsi in &gone {
            tracing::info!(%dsi, "hint expired");
            for p in &peers {
                if let Err(e) = self.spool.remove(p, dsi) {
                    tracing::warn!(error = %e, "cannot remove an expired spool file");
                }
            }
        }
        let n = gone.len();
        self.update_status(|s| s.expired += n as u64);
        self.note_table_change();
        self.outbound.request();
        n
    }

    /// Clears the hint facts (arrival, objects) of the peers whose hints for `gone` left the
    /// table, so listings do not show counts the table no longer holds.
    fn forget_hints(&self, gone: &[Dsi]) {
        let mut peers = lock(&self.peers);
        for s in peers.values_mut() {
            if s.dsi
                .as_deref()
                .is_some_and(|d| gone.iter().any(|g| g.as_str() == d))
            {
                s.hint_received = None;
                s.hint_objects = None;
            }
        }
    }

    /// Forgets the hint of dataset `dsi` (table and spool) until the next poll or push, and
    /// the learned binding of the peer that delivered it (its next answer binds it anew).
    /// Writes the table: call it off the async workers.
    pub fn drop_dataset(&self, dsi: &Dsi) -> bool {
        self.drop_dataset_if(dsi, |_| true)
    }

    /// [`Self::drop_dataset`] unless the table holds `dsi` with a summary `keep_going`
    /// refuses; decided under the import thread's lock (no import lands in between).
    fn drop_dataset_if(&self, dsi: &Dsi, keep_going: impl FnOnce(&PeerSummary) -> bool) -> bool {
        let removed = {
            // A later import of the same payload must rebuild the out-bound hint again.
            let mut imported = lock(&self.imported);
            let held = self.table.peers().into_iter().find(|p| p.dsi == *dsi);
            if held.as_ref().is_some_and(|p| !keep_going(p)) {
                return false;
            }
            imported.remove(dsi);
            self.table.remove(dsi)
        };
        self.forget_hints(std::slice::from_ref(dsi));
        if let Some(peer) = self.bindings.forget_dsi(dsi) {
            tracing::info!(%peer, %dsi, "peer's learned dsi forgotten");
            self.update_peer(&peer, |s| s.dsi = None);
        }
        let peers: Vec<String> = lock(&self.peers).keys().cloned().collect();
        for p in &peers {
            if let Err(e) = self.spool.remove(p, dsi) {
                tracing::warn!(error = %e, "cannot remove a spool file");
            }
        }
        if removed {
            self.note_table_change();
            self.outbound.request();
        }
        removed
    }

    // ---- queries -----------------------------------------------------------------------

    /// Referrals for `q` plus the count of local matches.
    ///
    /// # Errors
    /// When the query does not parse.
    pub fn referrals(
        &self,
        q: &str,
        possible: bool,
        limit: Option<usize>,
    ) -> Result<QueryAnswer, QueryError> {
        let started = Instant::now();
        let answer = self.referrals_inner(q, possible, limit);
        match &answer {
            Ok(a) => self.note_answered(
                u32::try_from(a.referrals.len()).unwrap_or(u32::MAX),
                started.elapsed(),
            ),
            Err(_) => Metrics::inc(&self.metrics.query_errors),
        }
        answer
    }

    /// Parses a query within the configured `limits.max_query_*` bounds.
    pub fn parse_query(&self, q: &str) -> Result<Query, QueryError> {
        Ok(Query::parse_with_limits(q, &self.config().limits.query)?)
    }

    /// The options every front-end queries the table with.
    fn query_options(&self, possible: bool, limit: Option<usize>) -> QueryOptions {
        let config = self.config();
        QueryOptions {
            include_possible: possible,
            limit: limit
                .unwrap_or(config.limits.max_referrals)
                .min(config.limits.max_referrals),
            thesaurus: self.thesaurus.load_full(),
            now: Some(SystemTime::now()),
            ..QueryOptions::default()
        }
    }

    /// The referrals for `q` with how each rank was computed (admin `explain`).
    ///
    /// # Errors
    /// When the query does not parse.
    pub fn explain(
        &self,
        q: &str,
        possible: bool,
    ) -> Result<Vec<hints::rank::Explanation>, QueryError> {
        let query = self.parse_query(q)?;
        let own = self.identity.load().dsi.clone();
        let mut out = self
            .table
            .explain(&query, &self.query_options(possible, None));
        out.retain(|e| e.referral.dsi != own);
        for (i, e) in out.iter_mut().enumerate() {
            e.position = i + 1;
        }
        Ok(out)
    }

    /// True when `query` costs microseconds: each term indexed by every local collection
    /// (no object read from disk), and exact, or a substring whose per-peer sums the
    /// routing table keeps ([`RoutingTable::answers_quickly`]) with few local objects to
    /// search. Such queries may be answered on an async worker; others go to the blocking
    /// pool.
    pub fn is_quick(&self, query: &Query, possible: bool) -> bool {
        let local = self.local.load();
        if !local.stores().all(|s| s.indexes_all(query)) {
            return false;
        }
        let exact = query.terms().iter().all(|t| t.op == MatchOp::Exact);
        exact
            || (local.len() <= QUICK_LOCAL_OBJECTS
                && self
                    .table
                    .answers_quickly(query, &self.query_options(possible, None)))
    }

    /// A turn to evaluate a query that may scan ([`Node::is_quick`] false); waits without
    /// holding a thread while `limits.max_concurrent_scans` are running.
    pub async fn scan_permit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.scans.acquire().await.ok()
    }

    /// A turn to poll a peer; waits while `limits.max_concurrent_polls` polls are under
    /// way (a setting that takes effect at restart).
    pub async fn poll_turn(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.polls.acquire().await.ok()
    }

    /// The state answers are computed from.
    fn answer_stamp(&self) -> Stamp {
        Stamp {
            table: self.table.generation(),
            local: self.local.load().generation,
            epoch: self.epoch.load(Ordering::Acquire),
        }
    }

    /// Marks answers computed so far as stale (configuration, thesaurus or identity changed).
    fn invalidate_answers(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// The cached `/v1/referrals` answer for `raw`, when one is current (counted as a query
    /// answered); lets a repeated scanning query skip its turn.
    pub fn cached_referrals(
        &self,
        raw: &str,
        possible: bool,
        limit: Option<usize>,
    ) -> Option<Bytes> {
        let opts = self.query_options(possible, limit);
        let (bytes, n) = self
            .answers
            .get(raw, possible, opts.limit, self.answer_stamp())?;
        self.note_answered(n, Duration::ZERO);
        Some(bytes)
    }

    /// Counts one answered query with `referrals` referrals.
    fn note_answered(&self, referrals: u32, took: Duration) {
        Metrics::inc(&self.metrics.queries);
        self.metrics
            .referrals
            .fetch_add(u64::from(referrals), Ordering::Relaxed);
        self.metrics.query_latency.observe(took);
    }

    /// The `/v1/referrals` answer for `raw` (parsed as `query`) as JSON bytes: the same
    /// document as [`Node::referrals`], written straight from the table's answer and
    /// served from the answer cache while nothing it depends on changed.
    ///
    /// # Errors
    /// When the local store cannot answer ([`QueryError`]).
    pub fn referrals_json(
        &self,
        raw: &str,
        query: &Query,
        possible: bool,
        limit: Option<usize>,
    ) -> Result<Bytes, QueryError> {
        let started = Instant::now();
        let opts = self.query_options(possible, limit);
        let stamp = self.answer_stamp();
        let result = match self.answers.get(raw, possible, opts.limit, stamp) {
            Some(hit) => Ok(hit),
            None => {
                let own = self.identity.load().dsi.clone();
                // Two more than asked: one may be this node's own, one tells `more`.
                let ranked = QueryOptions {
                    limit: opts.limit.saturating_add(2),
                    ..opts.clone()
                };
                let answer = self.table.answer(query, &ranked);
                let scan_max = self.config().limits.local_scan_max_objects;
                let local = self.local.load().query(query, 0, scan_max);
                local.map(|local| {
                    let mut out = Vec::with_capacity(256 + answer.len() * 160);
                    let n = crate::answers::write_answer(
                        &mut out,
                        raw,
                        &own,
                        &answer,
                        opts.limit,
                        local.total,
                    );
                    let out = (Bytes::from(out), n);
                    self.answers
                        .put(raw, possible, opts.limit, stamp, out.clone());
                    out
                })
            }
        };
        match &result {
            Ok((_, n)) => self.note_answered(*n, started.elapsed()),
            Err(_) => Metrics::inc(&self.metrics.query_errors),
        }
        result.map(|(bytes, _)| bytes)
    }

    fn referrals_inner(
        &self,
        q: &str,
        possible: bool,
        limit: Option<usize>,
    ) -> Result<QueryAnswer, QueryError> {
        let query = self.parse_query(q)?;
        let opts = self.query_options(possible, limit);
        let own = self.identity.load().dsi.clone();
        // As in `referrals_json`: two more than asked, for this node's own and `more`.
        let ranked = QueryOptions {
            limit: opts.limit.saturating_add(2),
            ..opts.clone()
        };
        let mut referrals: Vec<ReferralJson> = self
            .table
            .answer(&query, &ranked)
            .iter()
            .filter(|r| *r.dsi() != own)
            .map(ReferralJson::from)
            .collect();
        let more = referrals.len() > opts.limit;
        referrals.truncate(opts.limit);
        let scan_max = self.config().limits.local_scan_max_objects;
        let count = self.local.load().query(&query, 0, scan_max)?.total;
        Ok(QueryAnswer {
            query: q.to_owned(),
            dsi: own.to_string(),
            referrals,
            more,
            local: count,
        })
    }

    /// Local objects matching `q`.
    ///
    /// # Errors
    /// When the query does not parse.
    pub fn local_objects(
        &self,
        q: &str,
        limit: Option<usize>,
    ) -> Result<ObjectsAnswer, QueryError> {
        let query = self.parse_query(q)?;
        let config = self.config();
        let limit = limit
            .unwrap_or(config.limits.max_objects)
            .min(config.limits.max_objects);
        let found = self
            .local
            .load()
            .query(&query, limit, config.limits.local_scan_max_objects)?;
        Ok(ObjectsAnswer {
            query: q.to_owned(),
            dsi: self.identity.load().dsi.to_string(),
            objects: found.objects.iter().map(object_json).collect(),
            total: found.total,
        })
    }

    // ---- reload ------------------------------------------------------------------------

    /// Re-reads the configuration file (when the node has one) and the collections. A bad
    /// configuration is refused and the old one stays.
    ///
    /// # Errors
    /// [`ReloadError`] when the new configuration is invalid.
    pub async fn reload(self: &Arc<Self>) -> Result<ReloadReport, ReloadError> {
        crate::notify::reloading();
        let result = self.reload_inner().await;
        crate::notify::ready(match &result {
            Ok(_) => "reloaded",
            Err(_) => "reload refused; running configuration kept",
        });
        result
    }

    async fn reload_inner(self: &Arc<Self>) -> Result<ReloadReport, ReloadError> {
        let mut report = ReloadReport::default();
        if let Some(path) = &self.config_path {
            let new = match read_config(path) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, "reload refused; keeping the running configuration");
                    self.update_status(|s| s.reload_failures += 1);
                    return Err(e.into());
                }
            };
            let old = self.config();
            // The key is read again (it may have been replaced in place) and must load
            // before anything else changes.
            let key = match crate::trust::Trust::load_key(new.signing.key.as_deref()) {
                Ok(k) => k,
                Err(e) => {
                    tracing::error!(error = %e, "reload refused; keeping the running configuration");
                    self.update_status(|s| s.reload_failures += 1);
                    return Err(ReloadError::Key(e));
                }
            };
            let public =
                |k: Option<&Arc<crate::trust::keys::NodeKey>>| k.map(|k| k.public().clone());
            if public(key.as_ref()) != public(self.trust.key().as_ref()) {
                self.trust.set_key(key);
                self.outbound.request();
            }
            self.trust
                .retain(|name| new.peers.iter().any(|p| p.name == name));
            report.needs_restart = restart_only_changes(&old, &new);
            for key in &report.needs_restart {
                tracing::warn!(key = %key, "changed setting takes effect only after a restart");
            }
            if new.node != old.node {
                let mut id = (**self.identity.load()).clone();
                id.dsi = new.node.dsi.clone();
                id.description = new.node.description.clone();
                if !new.node.base_uris.is_empty() {
                    id.base_uris = new.node.base_uris.clone();
                }
                self.identity.store(Arc::new(id));
                self.invalidate_answers();
                // The out-bound hint names this node (URL, provenance).
                self.outbound.request();
            }
            {
                let mut peers = lock(&self.peers);
                let mut next = BTreeMap::new();
                for p in &new.peers {
                    let mut s = peers
                        .remove(&p.name)
                        .unwrap_or_else(|| initial_peer_state(p));
                    let fresh = initial_peer_state(p);
                    s.address = fresh.address;
                    s.roles = fresh.roles;
                    if fresh.dsi.is_some() {
                        s.dsi = fresh.dsi;
                    }
                    next.insert(p.name.clone(), s);
                }
                *peers = next;
            }
            if let Some(h) = &self.log
                && new.log_level != old.log_level
                && std::env::var_os("RUST_LOG").is_none()
                && let Err(e) = h.set_level(&new.log_level)
            {
                tracing::warn!(error = %e, "cannot apply the new log level");
            }
            let ended = self.bindings.reconfigure(&new);
            self.config.store(Arc::new(new));
            self.invalidate_answers();
            for (peer, dsi) in ended {
                // The hint that binding vouched for is nobody's now. Checked under the
                // import thread's lock: a hint of that peer in flight has either landed (and
                // goes here) or will be vetoed by its vouch.
                let node = self.clone();
                let dropped = tokio::task::spawn_blocking(move || {
                    node.drop_dataset_if(&dsi, |p| p.via.as_deref() == Some(peer.as_str()))
                        .then_some((peer, dsi))
                })
                .await;
                if let Ok(Some((peer, dsi))) = dropped {
                    tracing::info!(%peer, %dsi, "peer's dsi binding ended by the reload; its hint dropped");
                }
            }
            for p in self.config().peers.iter() {
                let bound = self.bindings.get(&p.name).map(|b| b.dsi.to_string());
                self.update_peer(&p.name, |s| s.dsi = bound);
            }
            self.note_table_change();
            self.load_thesaurus();
            report.config_reloaded = true;
            self.resolve_peers().await;
            crate::peer::restart(self);
        }
        report.collections_reloaded = self.rebuild_local(false).await;
        self.update_status(|s| s.reloads += 1);
        tracing::info!(collections = ?report.collections_reloaded, "reload done");
        Ok(report)
    }

    /// (Re)reads the thesaurus file, keeping the old one on error.
    pub(crate) fn load_thesaurus(&self) {
        self.invalidate_answers();
        let Some(path) = self.config().thesaurus.clone() else {
            self.thesaurus.store(None);
            return;
        };
        match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| Thesaurus::parse(&t).map_err(|e| e.to_string()))
        {
            Ok(t) => self.thesaurus.store(Some(Arc::new(t))),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot load the thesaurus; keeping the previous one")
            }
        }
    }
}

fn restart_only_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    if old.listen != new.listen {
        out.push("listen".to_owned());
    }
    if old.data_dir != new.data_dir {
        out.push("data_dir".to_owned());
    }
    // The HTTP router is built once, at start.
    for (changed, key) in [
        (old.console.path != new.console.path, "console.path"),
        (
            old.hinadi.serve_path != new.hinadi.serve_path,
            "hinadi.path",
        ),
        (old.rdm.path != new.rdm.path, "rdm.path"),
    ] {
        if changed {
            out.push(key.to_owned());
        }
    }
    if old.log_format != new.log_format {
        out.push("log.format".to_owned());
    }
    if old.limits.max_concurrent_polls != new.limits.max_concurrent_polls
        || old.limits.max_concurrent_scans != new.limits.max_concurrent_scans
        || old.limits.answer_cache_bytes != new.limits.answer_cache_bytes
    {
        out.push("limits (concurrent polls and scans, answer cache)".to_owned());
    }
    let (o, n) = (&old.limits, &new.limits);
    if (
        o.max_connections,
        o.max_connections_per_address,
        o.max_http_connections,
        o.max_http_connections_per_address,
        o.listen_backlog,
    ) != (
        n.max_connections,
        n.max_connections_per_address,
        n.max_http_connections,
        n.max_http_connections_per_address,
        n.listen_backlog,
    ) {
        out.push("limits (connection limits, listen backlog)".to_owned());
    }
    if old.import != new.import {
        out.push("import".to_owned());
    }
    if old.limits.table != new.limits.table {
        out.push("limits (routing table bounds)".to_owned());
    }
    if old.index != new.index {
        out.push("index".to_owned());
    }
    if old.limits.admin != new.limits.admin {
        out.push("limits (admin socket bounds)".to_owned());
    }
    if old.node.dsi != new.node.dsi {
        out.push("node.dsi (the routing table keeps refusing hints for the old one)".to_owned());
    }
    out
}

fn initial_peer_state(p: &crate::config::PeerConfig) -> PeerState {
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
    limits: cip_proto::soif::Limits,
    hasher: &std::hash::RandomState,
    progress: &crate::startup::Startup,
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
                let r = match crate::index_types::IndexKind::from_name(&e.index_type) {
                    // The spool keeps totals: a tagged entry converts on its own.
                    Some(kind) => {
                        crate::index_types::convert(kind, &e.payload, None, limits).map(|c| c.hint)
                    }
                    None => Err(Rejection::UnsupportedType(e.index_type.clone())),
                }
                .map(|h| {
                    let digest = hasher.hash_one((&e.payload[..], &e.base_uris, &e.description));
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

/// SOIF parser limits from the configuration.
pub fn soif_limits(config: &Config) -> cip_proto::soif::Limits {
    cip_proto::soif::Limits {
        max_value_size: config.limits.max_value_size,
        max_object_size: config.limits.max_frame_size,
        ..cip_proto::soif::Limits::default()
    }
}

/// Parses an index object's payload: exactly one CIP-HINT SOIF object.
///
/// # Errors
/// [`Rejection::Invalid`] saying what is wrong.
pub fn parse_hint(payload: &Bytes, limits: cip_proto::soif::Limits) -> Result<CipHint, Rejection> {
    let objs = parse_all(payload.clone(), limits)
        .map_err(|e| Rejection::Invalid(format!("payload is not SOIF: {e}")))?;
    let [obj] = objs.as_slice() else {
        return Err(Rejection::Invalid(format!(
            "expected one CIP-HINT object, found {}",
            objs.len()
        )));
    };
    let (hint, warnings) =
        CipHint::from_soif(obj).map_err(|e| Rejection::Invalid(e.to_string()))?;
    for w in warnings {
        tracing::debug!(warning = ?w, "hint accepted with a warning");
    }
    Ok(hint)
}

/// True when local object `o` matches every term of `q` (RFC 2655 §4 attribute matching;
/// `=` equality and `~` substring, both ignoring ASCII case, on trimmed values).
pub fn object_matches(q: &Query, o: &SoifObject) -> bool {
    q.terms().iter().all(|t| {
        if let Some(tpl) = &t.template
            && !tpl.eq_ignore_ascii_case(o.template().as_str())
        {
            return false;
        }
        o.values(&t.attribute).any(|v| {
            let v = v.trim_ascii();
            match t.op {
                MatchOp::Exact => v.eq_ignore_ascii_case(&t.value),
                MatchOp::Substring => attr::contains_ignore_ascii_case(v, &t.value),
            }
        })
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock means a panic elsewhere mid-update of plain data; the data is still
    // usable (every update is a few field writes).
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(template: &str, pairs: &[(&str, &str)]) -> SoifObject {
        let mut o = SoifObject::new(template, "http://x/").unwrap();
        for (k, v) in pairs {
            o.push(k, v.to_string()).unwrap();
        }
        o
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
