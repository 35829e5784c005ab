//! The out-bound pipeline: the node's aggregate hint, rebuilt by one task.
//!
//! Every change the out-bound hint depends on (an import that changed the table, a removal,
//! an expiry, a rebuilt local hint, a new identity) calls [`Pipeline::request`] once the
//! change is visible. That bumps a *request sequence* and costs nothing else. One builder
//! task ([`run`]) turns requests into builds:
//!
//! * it reads the sequence **before** it reads the state, so a build covers every request
//!   up to the sequence it read; after the build it records that sequence as *covered*, and
//!   builds again while the sequence moved on. So after any change the stored hint
//!   eventually reflects it, and no build from older state can replace a newer one: builds
//!   are sequential, and [`Pipeline::install`] refuses one older than what it holds;
//! * bursts coalesce: before a build it waits until no request came for a settle time (at
//!   least as long as the last build took, so the builder takes at most about half a core
//!   during a burst of imports), and requests that arrive during a build are served by the
//!   next one, from the newest state;
//! * builds (aggregation, serialization, digest) run on the blocking pool, never on an
//!   async worker;
//! * when nothing consumes the hint eagerly (no `poller` or `push` peer), requests are only
//!   recorded and a build happens when someone asks ([`Pipeline::fresh`]: a poll, `cipctl
//!   export`).
//!
//! The stored hint is only its encoded payload, its digest and the provenance needed to
//! decide whether a poller gets the shared payload; per-poller payloads (a poller whose own
//! data is in the hint must not get it back, digest A21) are built on demand on the blocking
//! pool, one at a time, and cached with the hint they derive from.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use arc_swap::ArcSwap;
use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::soif::SoifObject;
use hints::aggregate::Filter;
use hints::aggregate::kept::Kept;
use hints::delta::HintDelta;
use hints::hint::CipHint;
use hints::table::RoutingTable;
use tokio::sync::{Notify, Semaphore, watch};
use tokio_util::sync::CancellationToken;

use crate::model::config::{Config, PeerRole};
use crate::sys::lock;

/// What the builder task reads and reports through; the node implements it. The task
/// knows nothing else of the node.
pub trait OutboundHost: Send + Sync + 'static {
    /// The configuration in force (followed across reloads).
    fn config(&self) -> Arc<Config>;
    /// The pipeline the task drives.
    fn pipeline(&self) -> &Arc<Pipeline>;
    /// The routing table a build aggregates.
    fn table(&self) -> Arc<RoutingTable>;
    /// What a build reads besides the table.
    fn build_input(&self) -> BuildInput;
    /// A build finished: `changed` is the new out-bound generation when the hint changed;
    /// `table_generation` the table it covered; `builds` the count of builds so far.
    fn built(&self, changed: Option<u64>, table_generation: u64, builds: u64);
    /// A build made the hint from the table's changes since the one before ([`Kept`]):
    /// `delta` (written, `bytes` long) makes the new hint of the one before. Pollers that
    /// hold the one before take it from the journal instead of a delta made by comparing.
    fn advanced(&self, delta: Arc<HintDelta>, bytes: usize);
}

/// Most per-poller payloads cached for one out-bound hint.
const MAX_CACHED_PAYLOADS: usize = 1024;

/// What a build reads: the local hint and the node's identity, besides the table.
#[derive(Debug, Clone)]
pub struct BuildInput {
    /// The local hint.
    pub local: Arc<CipHint>,
    /// Its rebuild counter.
    pub local_generation: u64,
    /// The node as out-bound hints name it.
    pub node: hints::aggregate::NodeIdentity,
    /// The node's key: when set, every built hint is dated at build time and signed.
    pub signer: Option<Arc<crate::model::trust::keys::NodeKey>>,
}

/// One built out-bound hint.
#[derive(Debug)]
pub struct Built {
    /// The encoded CIP-HINT.
    pub payload: Bytes,
    /// Digest of the content (the `Date` left out).
    pub digest: u64,
    /// [`hints::delta::digest`] of the hint: what deltas and the journal name it by.
    pub hint_digest: u64,
    /// The routing table generation it was built from.
    pub table_generation: u64,
    /// The local hint generation it was built from.
    pub local_generation: u64,
    /// The DSIs its provenance lists (sorted): every dataset whose data is in it.
    pub contributors: Vec<Dsi>,
    /// How long the build took.
    pub took: Duration,
}

/// A delta a build advanced the hint by, with its written size in bytes.
pub type Advanced = (Arc<HintDelta>, usize);

/// The shared out-bound hint (nothing left out), made from the table's changes since
/// `kept` when it can ([`Kept::advance`]: unsigned hints only, the whole hint is signed),
/// else aggregated whole; returns the build, the delta from the hint before when it was
/// advanced (with its written size), and what to keep for the next build.
pub fn build_shared(
    input: &BuildInput,
    table: &RoutingTable,
    kept: Option<Kept>,
) -> (Built, Option<Advanced>, Option<Kept>) {
    let started = Instant::now();
    if input.signer.is_some() {
        return (build(input, table, None), None, None);
    }
    if let Some(mut kept) = kept {
        match kept.advance(Some(&input.local), table, &input.node) {
            Ok(delta) => {
                let built = encode(
                    kept.hint(),
                    input,
                    kept.generation(),
                    Some(delta.result),
                    started,
                );
                let bytes = delta.to_soif().to_bytes().len();
                return (built, Some((Arc::new(delta), bytes)), Some(kept));
            }
            Err(why) => tracing::debug!(%why, "out-bound hint aggregated whole"),
        }
    }
    let mut aggregate = hints::aggregate::aggregate_filtered(
        Some(&input.local),
        table,
        &input.node,
        &Filter::default(),
    );
    aggregate.hint.date = input.local.date.clone();
    let built = encode(&aggregate.hint, input, aggregate.generation, None, started);
    let kept = Kept::new(aggregate, Some(input.local.clone()), built.hint_digest);
    (built, None, kept)
}

/// An unsigned out-bound hint encoded; `digest`, when known, is its
/// [`hints::delta::digest`] (else it is computed).
fn encode(
    hint: &CipHint,
    input: &BuildInput,
    table_generation: u64,
    digest: Option<u64>,
    started: Instant,
) -> Built {
    let contributors = hints::table::provenance(hint).unwrap_or_default();
    let soif = hint.to_soif();
    let hint_digest = digest.unwrap_or_else(|| hints::delta::digest_of(hint, &soif));
    Built {
        digest: soif_digest(&soif),
        payload: Bytes::from(soif.to_bytes()),
        hint_digest,
        table_generation,
        local_generation: input.local_generation,
        contributors,
        took: started.elapsed(),
    }
}

/// Aggregates the local hint and the table (leaving out `exclude`'s data) and encodes it.
pub fn build(input: &BuildInput, table: &RoutingTable, exclude: Option<&Dsi>) -> Built {
    let filter = Filter {
        exclude: exclude.cloned(),
        ..Filter::default()
    };
    build_filtered(input, table, &filter).unwrap_or_else(|| {
        // Invariant: without `only` the aggregate always exists (perhaps empty).
        tracing::error!("out-bound aggregate missing");
        Built {
            payload: Bytes::new(),
            digest: 0,
            hint_digest: 0,
            table_generation: 0,
            local_generation: 0,
            contributors: Vec::new(),
            took: Duration::ZERO,
        }
    })
}

/// Builds what `filter` asks: the aggregate without the poller's data and the datasets it
/// wants apart, or (with [`Filter::only`]) one passed-on dataset with its `Path`, `None`
/// when the filter leaves that one out (or the table does not hold it).
pub fn build_filtered(input: &BuildInput, table: &RoutingTable, filter: &Filter) -> Option<Built> {
    let started = Instant::now();
    let aggregate =
        hints::aggregate::aggregate_filtered(Some(&input.local), table, &input.node, filter);
    if filter.only.is_some() && aggregate.included.is_empty() {
        return None;
    }
    let mut hint = aggregate.hint;
    hint.date = input.local.date.clone();
    if let Some(key) = &input.signer {
        // A signed hint carries the time it was built: receivers refuse older dates.
        let now = std::time::SystemTime::now();
        hint.date = Some(hints::hint::format_date(now));
        crate::model::trust::signature::sign(&mut hint, key, now);
    }
    // Every dataset whose data is in the hint, also those behind an included peer: a
    // poller among them must not get the shared payload (it would refuse it as a loop).
    // The aggregate writes valid provenance; an unreadable one only costs the sharing.
    let contributors = hints::table::provenance(&hint).unwrap_or_default();
    let soif = hint.to_soif();
    let hint_digest = hints::delta::digest_of(&hint, &soif);
    drop(hint);
    let mut digest = soif_digest(&soif);
    if let Some(key) = &input.signer {
        // A new key is a change even when the content is not: pollers get the new signature.
        let mut hasher = std::hash::DefaultHasher::new();
        (digest, key.public().verifying_key().as_bytes()).hash(&mut hasher);
        digest = hasher.finish();
    }
    Some(Built {
        payload: Bytes::from(soif.to_bytes()),
        digest,
        hint_digest,
        table_generation: aggregate.generation,
        local_generation: input.local_generation,
        contributors,
        took: started.elapsed(),
    })
}

fn soif_digest(hint: &SoifObject) -> u64 {
    // The date (and so a signature) changes on every rebuild; leave them out so only
    // content changes count.
    let mut hasher = std::hash::DefaultHasher::new();
    hint.url().hash(&mut hasher);
    for a in hint.attributes.iter().filter(|a| {
        let n = a.name.as_str();
        !["Date", "Certification", "Certification-Type"]
            .iter()
            .any(|x| n.eq_ignore_ascii_case(x))
    }) {
        a.name.as_bytes().hash(&mut hasher);
        a.value.hash(&mut hasher);
    }
    hasher.finish()
}

/// An out-bound object as a poll's answer takes it.
#[derive(Debug, Clone)]
pub struct OutObject {
    /// The encoded CIP-HINT.
    pub payload: Bytes,
    /// Digest of the content (the `Date` left out): what an answer's version sums.
    pub digest: u64,
    /// [`hints::delta::digest`] of the hint: what deltas start from and make.
    pub hint_digest: u64,
}

/// The stored out-bound hint.
#[derive(Debug)]
pub struct Outbound {
    /// Change counter: bumped each time the content changes (0 before the first build).
    pub generation: u64,
    /// Digest of the content.
    pub digest: u64,
    /// [`hints::delta::digest`] of the payload.
    pub hint_digest: u64,
    /// The routing table generation it was built from.
    pub table_generation: u64,
    /// The local hint generation it was built from.
    pub local_generation: u64,
    /// The encoded hint, shared by every poller whose data is not in it.
    pub payload: Bytes,
    /// The datasets whose data is in the hint, directly or behind an included peer
    /// (its provenance, sorted): excluding a poller not among them changes nothing, so it
    /// gets the shared payload.
    pub contributors: Vec<Dsi>,
    /// Payloads built for pollers among the contributors, by DSI.
    payloads: Mutex<HashMap<Dsi, Bytes>>,
    /// Objects built for pollers that ask datasets apart, by filter, with their content
    /// digests (`None`: the filter leaves the asked dataset out).
    filtered: Mutex<HashMap<Filter, Option<OutObject>>>,
}

impl Outbound {
    fn empty() -> Self {
        Self {
            generation: 0,
            digest: 0,
            hint_digest: 0,
            table_generation: 0,
            local_generation: 0,
            payload: Bytes::new(),
            contributors: Vec::new(),
            payloads: Mutex::new(HashMap::new()),
            filtered: Mutex::new(HashMap::new()),
        }
    }
}

/// Figures of the pipeline, for status and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PipelineStats {
    /// Builds done (shared payloads; per-poller ones not counted).
    pub builds: u64,
    /// Changes requested.
    pub requested: u64,
    /// Changes the stored hint covers.
    pub covered: u64,
    /// The stored hint's change counter.
    pub generation: u64,
    /// The routing table generation the stored hint was built from.
    pub table_generation: u64,
    /// How long the last build took.
    pub last_build: Duration,
    /// Seconds the stored hint has lagged the requests (0 when it covers them all).
    pub lag: Duration,
}

/// Called by a build after it read the state and before it is installed (tests force
/// interleavings with it).
pub type BuildHook = Arc<dyn Fn(u64) + Send + Sync>;

/// The out-bound hint, its request sequence and the notifications around them.
pub struct Pipeline {
    current: ArcSwap<Outbound>,
    requested: watch::Sender<u64>,
    covered: watch::Sender<u64>,
    /// The change counter, for the notifier and push tasks.
    changed: watch::Sender<u64>,
    /// Bumped by every build from a newer table or local hint, changed or not: a
    /// poller's own answer (without its data, with datasets apart) may change while the
    /// shared hint does not. The notifier asks each poller's answer then.
    revision: watch::Sender<u64>,
    demand: Notify,
    demanded: AtomicBool,
    builds: AtomicU64,
    last_build_nanos: AtomicU64,
    /// When the stored hint first lagged the requests (the watchdog's clock).
    lagging_since: Mutex<Option<Instant>>,
    /// One per-poller build at a time.
    exclusive: Semaphore,
    hook: Mutex<Option<BuildHook>>,
    /// The datasets changed since the notifier last looked ([`Pipeline::take_touched`]).
    touched: Mutex<Touched>,
    /// The shared aggregate as last built, for the builder to advance ([`Kept`]).
    kept: Mutex<Option<Kept>>,
}

/// What changed since the notifier last looked: some datasets of the routing table, or
/// something not tied to one dataset (the local collections, a restored spool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touched {
    /// These datasets' entries changed.
    Datasets(BTreeSet<Dsi>),
    /// Anything may have changed.
    All,
}

impl Default for Touched {
    fn default() -> Self {
        Self::Datasets(BTreeSet::new())
    }
}

impl Touched {
    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        matches!(self, Self::Datasets(d) if d.is_empty())
    }

    /// True when a change may reach a poller that takes `skip` directly (or is one of
    /// them): some touched dataset is not in it.
    pub fn reaches(&self, skip: impl Fn(&Dsi) -> bool) -> bool {
        match self {
            Self::All => true,
            Self::Datasets(d) => d.iter().any(|d| !skip(d)),
        }
    }
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Default for Pipeline {
    fn default() -> Self {
        Self::new()
    }
}

impl Pipeline {
    /// An empty pipeline: nothing built, nothing requested.
    pub fn new() -> Self {
        Self {
            current: ArcSwap::from_pointee(Outbound::empty()),
            requested: watch::Sender::new(0),
            covered: watch::Sender::new(0),
            changed: watch::Sender::new(0),
            revision: watch::Sender::new(0),
            demand: Notify::new(),
            demanded: AtomicBool::new(false),
            builds: AtomicU64::new(0),
            last_build_nanos: AtomicU64::new(0),
            lagging_since: Mutex::new(None),
            exclusive: Semaphore::new(1),
            hook: Mutex::new(None),
            touched: Mutex::new(Touched::default()),
            kept: Mutex::new(None),
        }
    }

    /// Records that something the hint depends on changed. Call after the change is
    /// visible to readers.
    pub fn request(&self) {
        *lock(&self.touched) = Touched::All;
        self.requested.send_modify(|n| *n += 1);
    }

    /// [`Pipeline::request`] for a change of `datasets`' entries only: the notifier
    /// tells ahead of the build only the pollers whose answer may carry them.
    pub fn request_for<'a>(&self, datasets: impl IntoIterator<Item = &'a Dsi>) {
        {
            let mut t = lock(&self.touched);
            if let Touched::Datasets(set) = &mut *t {
                set.extend(datasets.into_iter().cloned());
            }
        }
        self.requested.send_modify(|n| *n += 1);
    }

    /// A receiver of the request counter: bumped by every change, before it is built.
    pub fn requests(&self) -> watch::Receiver<u64> {
        self.requested.subscribe()
    }

    /// What changed since the last call (the notifier's look ahead of the build).
    pub fn take_touched(&self) -> Touched {
        std::mem::take(&mut *lock(&self.touched))
    }

    /// The stored hint.
    pub fn current(&self) -> Arc<Outbound> {
        self.current.load_full()
    }

    /// A receiver of change counters (the notifier and push tasks wait on it).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// A receiver of revisions: every build from a newer table or local hint (the
    /// notifier asks each poller's own answer on it).
    pub fn revisions(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }

    /// True when the stored hint covers every change requested so far.
    pub fn is_fresh(&self) -> bool {
        *self.covered.borrow() >= *self.requested.borrow()
    }

    /// Installs a test hook run by every build between reading the state and installing.
    pub fn set_hook(&self, hook: Option<BuildHook>) {
        *lock(&self.hook) = hook;
    }

    /// Figures for status and metrics.
    pub fn stats(&self) -> PipelineStats {
        let cur = self.current.load();
        PipelineStats {
            builds: self.builds.load(Ordering::Relaxed),
            requested: *self.requested.borrow(),
            covered: *self.covered.borrow(),
            generation: cur.generation,
            table_generation: cur.table_generation,
            last_build: Duration::from_nanos(self.last_build_nanos.load(Ordering::Relaxed)),
            lag: lock(&self.lagging_since)
                .map(|t| t.elapsed())
                .unwrap_or_default(),
        }
    }

    /// Stores `built`, which covers requests up to `seq`. Returns the change counter when
    /// the content changed. A build older than the stored hint (by table or local
    /// generation) is refused: it never replaces a newer one.
    pub fn install(&self, seq: u64, built: Built) -> Option<u64> {
        self.builds.fetch_add(1, Ordering::Relaxed);
        self.last_build_nanos.store(
            u64::try_from(built.took.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let cur = self.current.load_full();
        let older = built.table_generation < cur.table_generation
            || built.local_generation < cur.local_generation;
        let newer = built.table_generation > cur.table_generation
            || built.local_generation > cur.local_generation;
        let mut changed = None;
        if older {
            tracing::debug!(
                built = built.table_generation,
                stored = cur.table_generation,
                "out-bound build older than the stored hint; dropped"
            );
        } else if cur.generation > 0 && cur.digest == built.digest {
            // Same content: keep the payload and its per-poller cache, note what it covers.
            let cache = lock(&cur.payloads).clone();
            self.current.store(Arc::new(Outbound {
                generation: cur.generation,
                digest: cur.digest,
                hint_digest: cur.hint_digest,
                table_generation: built.table_generation,
                local_generation: built.local_generation,
                payload: cur.payload.clone(),
                contributors: cur.contributors.clone(),
                payloads: Mutex::new(cache),
                // A route may have moved between entries with the same sum: built anew.
                filtered: Mutex::new(HashMap::new()),
            }));
        } else {
            let generation = cur.generation + 1;
            self.current.store(Arc::new(Outbound {
                generation,
                digest: built.digest,
                hint_digest: built.hint_digest,
                table_generation: built.table_generation,
                local_generation: built.local_generation,
                payload: built.payload,
                contributors: built.contributors,
                payloads: Mutex::new(HashMap::new()),
                filtered: Mutex::new(HashMap::new()),
            }));
            self.changed.send_replace(generation);
            changed = Some(generation);
        }
        if changed.is_some() || (newer && !older) {
            self.revision.send_modify(|r| *r += 1);
        }
        self.covered.send_modify(|c| *c = (*c).max(seq));
        if self.is_fresh() {
            *lock(&self.lagging_since) = None;
        }
        changed
    }

    /// Waits (at most `max_wait`) until the stored hint covers every change requested
    /// before the call, asking the builder for a build if it is lazy; returns the newest
    /// stored hint either way.
    pub async fn fresh(&self, max_wait: Duration) -> Arc<Outbound> {
        let want = *self.requested.borrow();
        let mut covered = self.covered.subscribe();
        if *covered.borrow_and_update() < want {
            self.demanded.store(true, Ordering::Release);
            self.demand.notify_one();
            let wait = covered.wait_for(|c| *c >= want);
            if tokio::time::timeout(max_wait, wait).await.is_err() {
                tracing::warn!(
                    waited = ?max_wait,
                    "out-bound hint not rebuilt in time; answering with the previous one"
                );
            }
        }
        self.current()
    }

    /// The payload for a poller: the shared one, or (when the poller's data is in the hint)
    /// one without its data, built on the blocking pool and cached with this hint.
    pub async fn payload_for(
        &self,
        out: &Arc<Outbound>,
        exclude: Option<&Dsi>,
        input: impl FnOnce() -> (BuildInput, Arc<RoutingTable>),
    ) -> Bytes {
        let Some(poller) = exclude.filter(|d| out.contributors.binary_search(d).is_ok()) else {
            return out.payload.clone();
        };
        if let Some(p) = lock(&out.payloads).get(poller) {
            return p.clone();
        }
        // One at a time: a crowd of pollers must not start a crowd of aggregations.
        let Ok(_permit) = self.exclusive.acquire().await else {
            return out.payload.clone();
        };
        if let Some(p) = lock(&out.payloads).get(poller) {
            return p.clone();
        }
        let (input, table) = input();
        let d = poller.clone();
        let built = crate::sys::net::spawn_blocking(move || build(&input, &table, Some(&d))).await;
        match built {
            Ok(b) => {
                let mut payloads = lock(&out.payloads);
                if payloads.len() < MAX_CACHED_PAYLOADS {
                    payloads.insert(poller.clone(), b.payload.clone());
                }
                b.payload
            }
            Err(e) => {
                // Never send a poller its own data: an empty answer rather than the shared one.
                tracing::error!(error = %e, "per-poller out-bound build failed");
                Bytes::new()
            }
        }
    }

    /// What `filter` asks of the stored hint `out`, with its content digest: the shared
    /// payload when the filter leaves nothing of it out, else built on the blocking pool
    /// (one at a time) and cached with `out`. `None` when a passed-on dataset is left out.
    pub async fn object_for(
        &self,
        out: &Arc<Outbound>,
        filter: &Filter,
        input: impl FnOnce() -> (BuildInput, Arc<RoutingTable>),
    ) -> Option<OutObject> {
        let touches = |d: &Dsi| out.contributors.binary_search(d).is_ok();
        if filter.only.is_none()
            && !filter.exclude.as_ref().is_some_and(touches)
            && !filter.separate.iter().any(touches)
        {
            return Some(OutObject {
                payload: out.payload.clone(),
                digest: out.digest,
                hint_digest: out.hint_digest,
            });
        }
        if let Some(hit) = lock(&out.filtered).get(filter) {
            return hit.clone();
        }
        let _permit = self.exclusive.acquire().await.ok()?;
        if let Some(hit) = lock(&out.filtered).get(filter) {
            return hit.clone();
        }
        let (input, table) = input();
        let f = filter.clone();
        let built =
            crate::sys::net::spawn_blocking(move || build_filtered(&input, &table, &f)).await;
        match built {
            Ok(b) => {
                let got = b.map(|b| OutObject {
                    payload: b.payload,
                    digest: b.digest,
                    hint_digest: b.hint_digest,
                });
                let mut cache = lock(&out.filtered);
                if cache.len() < MAX_CACHED_PAYLOADS {
                    cache.insert(filter.clone(), got.clone());
                }
                got
            }
            Err(e) => {
                tracing::error!(error = %e, "filtered out-bound build failed");
                None
            }
        }
    }

    fn hook(&self) -> Option<BuildHook> {
        lock(&self.hook).clone()
    }

    /// Marks the start of a lag the watchdog measures; returns how long it has lasted.
    fn lagging_for(&self) -> Option<Duration> {
        if self.is_fresh() {
            *lock(&self.lagging_since) = None;
            return None;
        }
        Some(
            lock(&self.lagging_since)
                .get_or_insert_with(Instant::now)
                .elapsed(),
        )
    }
}

/// True when some peer consumes the hint as soon as it changes (`poller` or `push`);
/// otherwise it is built only when asked for.
pub fn eager(config: &Config) -> bool {
    config
        .peers
        .iter()
        .any(|p| p.has_role(PeerRole::Poller) || p.has_role(PeerRole::Push))
}

/// The builder task (see the module doc). Runs until `token` is cancelled.
pub async fn run<H: OutboundHost>(node: Arc<H>, token: CancellationToken) {
    let pipeline = node.pipeline();
    let mut requested = pipeline.requested.subscribe();
    loop {
        // Wait for work: a request not yet covered, and someone who wants it.
        loop {
            let want = *requested.borrow_and_update();
            let covered = *pipeline.covered.borrow();
            if want > covered
                && (eager(&node.config()) || pipeline.demanded.swap(false, Ordering::AcqRel))
            {
                break;
            }
            tokio::select! {
                r = requested.changed() => if r.is_err() { return },
                () = pipeline.demand.notified() => {}
                () = token.cancelled() => return,
            }
        }
        // Coalesce a burst: wait until requests stop for the settle time (no shorter than
        // the last build), but never longer than a few settle times in all.
        let settle = node
            .config()
            .outbound
            .settle
            .max(pipeline.stats().last_build);
        let deadline = Instant::now() + settle * 4;
        loop {
            tokio::select! {
                () = tokio::time::sleep(settle) => break,
                r = requested.changed() => {
                    if r.is_err() { return }
                    if Instant::now() >= deadline { break }
                }
                () = token.cancelled() => return,
            }
        }
        // The sequence first, the state second: the build covers everything up to `seq`.
        let seq = *requested.borrow_and_update();
        let input = node.build_input();
        let table = node.table();
        let hook = pipeline.hook();
        let kept = lock(&pipeline.kept).take();
        let job = crate::sys::net::spawn_blocking(move || {
            let built = build_shared(&input, &table, kept);
            if let Some(h) = hook {
                h(seq);
            }
            built
        });
        let built = tokio::select! {
            r = job => r,
            () = token.cancelled() => return,
        };
        match built {
            Ok((built, delta, kept)) => {
                *lock(&pipeline.kept) = kept;
                let took = built.took;
                let table_generation = built.table_generation;
                let changed = pipeline.install(seq, built);
                if let (Some(_), Some((delta, bytes))) = (changed, delta) {
                    node.advanced(delta, bytes);
                }
                if let Some(generation) = changed {
                    tracing::debug!(
                        generation,
                        table_generation,
                        ?took,
                        "out-bound hint changed"
                    );
                }
                node.built(changed, table_generation, pipeline.stats().builds);
            }
            Err(e) => {
                tracing::error!(error = %e, "out-bound build failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = token.cancelled() => return,
                }
                pipeline.request();
            }
        }
    }
}

/// Checks once a second that the stored hint keeps up; a lag past `stale_after` (while
/// some peer consumes the hint eagerly) is logged and answered with a rebuild.
pub async fn watchdog<H: OutboundHost>(node: Arc<H>, token: CancellationToken) {
    let pipeline = node.pipeline();
    let mut warned = false;
    loop {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = token.cancelled() => return,
        }
        // A hint built only on demand is expected to lag: nothing to measure.
        if !eager(&node.config()) {
            *lock(&pipeline.lagging_since) = None;
            warned = false;
            continue;
        }
        let Some(lag) = pipeline.lagging_for() else {
            warned = false;
            continue;
        };
        let stale_after = node.config().outbound.stale_after;
        if lag > stale_after {
            if !warned {
                let s = pipeline.stats();
                tracing::warn!(
                    lag = ?lag,
                    table_generation = node.table().generation(),
                    outbound_table_generation = s.table_generation,
                    "out-bound hint lags the table; rebuilding"
                );
                warned = true;
            }
            pipeline.demanded.store(true, Ordering::Release);
            pipeline.demand.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(table_generation: u64, local_generation: u64, digest: u64, body: &str) -> Built {
        Built {
            payload: Bytes::from(body.to_owned()),
            digest,
            hint_digest: digest,
            table_generation,
            local_generation,
            contributors: Vec::new(),
            took: Duration::ZERO,
        }
    }

    #[test]
    fn requests_record_what_they_touched_until_taken() {
        let p = Pipeline::new();
        let requests = p.requests();
        assert!(p.take_touched().is_empty());
        let (a, b) = (Dsi::new("1.1").unwrap(), Dsi::new("1.2").unwrap());
        p.request_for([&a]);
        p.request_for([&b]);
        assert!(requests.has_changed().unwrap());
        let t = p.take_touched();
        assert_eq!(t, Touched::Datasets([a.clone(), b.clone()].into()));
        // A poller that takes `a` directly still sees `b`; one that takes both does not.
        assert!(t.reaches(|d| *d == a));
        assert!(!t.reaches(|d| *d == a || *d == b));
        assert!(p.take_touched().is_empty());
        // A change not tied to a dataset reaches everyone, and stays so until taken.
        p.request();
        p.request_for([&a]);
        let t = p.take_touched();
        assert_eq!(t, Touched::All);
        assert!(t.reaches(|_| true));
    }

    #[test]
    fn an_older_build_never_replaces_a_newer_one() {
        // Two builds finishing in the opposite order: the newer (table generation 2) is
        // installed first, then the older (generation 1) arrives.
        let p = Pipeline::new();
        p.request();
        p.request();
        assert_eq!(p.install(2, built(2, 1, 22, "new")), Some(1));
        assert_eq!(p.install(1, built(1, 1, 11, "old")), None);
        let cur = p.current();
        assert_eq!(&cur.payload[..], b"new");
        assert_eq!(cur.table_generation, 2);
        assert!(p.is_fresh());
        // A newer local hint with the same table is newer.
        assert_eq!(p.install(2, built(2, 2, 33, "local")), Some(2));
        assert_eq!(p.install(2, built(2, 1, 22, "new")), None);
        assert_eq!(&p.current().payload[..], b"local");
    }

    #[test]
    fn a_poller_behind_an_included_peer_counts_as_a_contributor() {
        use cip_proto::soif::Attribute;
        use hints::table::PeerMeta;
        let dsi = |s: &str| Dsi::new(s).unwrap();
        let table = RoutingTable::default();
        // A middle node's aggregate: its own DSI 1.2, with 1.7's data inside.
        let mut hint = CipHint {
            total_object_count: 1,
            ..CipHint::default()
        };
        hint.extra
            .push(Attribute::new("Provenance-1", "1.7").unwrap());
        table
            .replace(
                PeerMeta {
                    dsi: dsi("1.2"),
                    base_uris: vec!["cip://m/".into()],
                    dsi_description: None,
                    received: std::time::SystemTime::now(),
                    expires: None,
                    via: None,
                    path: Vec::new(),
                },
                &hint,
            )
            .unwrap();
        let input = BuildInput {
            local: Arc::new(CipHint::default()),
            local_generation: 1,
            node: hints::aggregate::NodeIdentity {
                dsi: dsi("1.1"),
                base_uris: vec!["cip://n/".into()],
                url: "-".into(),
            },
            signer: None,
        };
        let b = build(&input, &table, None);
        assert_eq!(b.contributors, vec![dsi("1.1"), dsi("1.2"), dsi("1.7")]);
        // Signed, the same build differs only in Date and Certification: its content
        // digest depends on the key, not on when it was built.
        let signed = |seed: u8| BuildInput {
            signer: Some(Arc::new(crate::model::trust::keys::NodeKey::from_seed(
                &[seed; 32],
            ))),
            ..input.clone()
        };
        let (a, b2) = (
            build(&signed(1), &table, None),
            build(&signed(1), &table, None),
        );
        assert_eq!(a.digest, b2.digest);
        assert_ne!(a.digest, build(&signed(2), &table, None).digest);
        assert!(String::from_utf8_lossy(&a.payload).contains("Certification-Type{7}:\tEd25519"));
    }

    #[test]
    fn same_content_keeps_the_generation_and_notes_coverage() {
        let p = Pipeline::new();
        p.request();
        assert_eq!(p.install(1, built(1, 1, 7, "a")), Some(1));
        p.request();
        assert!(!p.is_fresh());
        assert_eq!(p.install(2, built(5, 1, 7, "a")), None);
        assert_eq!(p.current().generation, 1);
        assert_eq!(p.current().table_generation, 5);
        assert!(p.is_fresh());
        assert_eq!(p.stats().builds, 2);
    }
}
