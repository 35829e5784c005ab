//! The node's shared state and the operations on it: [`Node`].
//!
//! Everything a front-end (CIP service, HTTP, admin socket) needs goes through `Node`: the
//! configuration (hot-swapped on reload), the local collections and their hint, the routing
//! table, the out-bound hint, per-peer state, the spool, and a `watch` channel of [`Status`]
//! counters that tests and the admin socket read. Background tasks (peer polling, collection
//! watching, expiry) live in [`crate::daemon::peer`] and [`crate::daemon`] and call back into it.
//!
//! `Node`'s operations are split by what they serve: in-bound index objects (`inbound`),
//! queries (`queries`) and reload (`reload`); this module keeps the state itself, the local
//! collections and the out-bound hint's hooks.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher as _;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
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
use hints::table::{ImportError, RoutingTable, TableConfig};
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
use crate::store::collection::{self, CollectionSource, Fingerprint, LoadReport};
use crate::store::local::CollectionStore;
use crate::store::spool::{Spool, SpoolEntry};
use crate::sys::metrics::{Gauges, Metrics};
use crate::sys::telemetry::LogHandle;

mod inbound;
mod queries;
mod reload;

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
    /// [`crate::store::local::query`]).
    ///
    /// # Errors
    /// [`QueryError::NotIndexed`], [`QueryError::Store`].
    pub fn query(
        &self,
        q: &Query,
        want: usize,
        scan_max: usize,
    ) -> Result<crate::store::local::LocalMatches, QueryError> {
        crate::store::local::query(self.stores(), q, want, scan_max)
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
    Store(#[from] crate::store::local::StoreError),
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
    /// Its DSI is not the sending peer's (see [`crate::store::binding`]).
    #[error("{0}")]
    Binding(#[from] crate::store::binding::BindingError),
    /// Its signature is missing, invalid, replayed or cannot be checked
    /// ([`crate::model::trust`]).
    #[error("signature: {0}")]
    Signature(#[from] crate::model::trust::signature::SignatureError),
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
    Config(#[from] crate::model::config::ConfigError),
    /// The new signing key cannot be loaded.
    #[error("signing key: {0}")]
    Key(crate::model::trust::keys::KeyError),
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
    /// RDM catalogs' change journals ([`crate::store::journal`]).
    rdm: crate::store::journal::Journals,
    /// Per-type state: stored tagged totals, learned peer types ([`crate::pipeline::index_types`]).
    index_state: crate::pipeline::index_types::State,
    /// The signing key, and what peers' signatures showed ([`crate::model::trust`]).
    trust: crate::model::trust::Trust,
    /// Progress of a long start ([`crate::sys::startup`]).
    startup: Arc<crate::sys::startup::Startup>,
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
        let trust = crate::model::trust::Trust::default();
        trust.set_key(
            crate::model::trust::Trust::load_key(config.signing.key.as_deref())
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
        let identity = self.identity();
        let dir = crate::store::local::cache_dir(&config.data_dir);
        let (statuses, jobs): (Vec<_>, Vec<_>) = jobs.into_iter().unzip();
        // During the start, the bytes read show in `cipctl status`.
        let starting = !self.status_snapshot().ready;
        let startup = self.startup.clone();
        if starting {
            startup.begin("loading collections", "bytes", 0);
        }
        let pass = tokio::task::spawn_blocking(move || {
            let rebuild =
                || crate::store::local::rebuild(jobs, &dir, export.attributes, export.thresholds);
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
                let r = match crate::pipeline::index_types::IndexKind::from_name(&e.index_type) {
                    // The spool keeps totals: a tagged entry converts on its own.
                    Some(kind) => {
                        crate::pipeline::index_types::convert(kind, &e.payload, None, limits)
                            .map(|c| c.hint)
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
    use super::reload::restart_only_changes;
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
