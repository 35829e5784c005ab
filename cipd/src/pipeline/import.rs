//! The import queue: every in-bound hint reaches the routing table through one thread that
//! merges them in batches.
//!
//! [`Importer::import`] hands a parsed, checked hint to a bounded queue and waits for the
//! outcome. One thread (`hint-import`) takes whatever has queued up, up to
//! [`ImportConfig::max_batch_entries`], and imports it with one
//! [`RoutingTable::replace_all`]: hints that arrive together (a hub polling hundreds of
//! peers at start) become one index segment instead of hundreds of small ones merged one
//! after the other. So table writes never run on an async worker, never more than one at a
//! time, and the queue bounds how many parsed hints wait in memory (a full queue makes
//! pollers wait, which is the back-pressure).
//!
//! The thread also keeps the digests of what the table holds per dataset, under the same
//! lock as the table write: a hint re-served unchanged refreshes its expiry but requests no
//! out-bound rebuild. Readers of a digest (a search's cached answers, a delta's kept head)
//! do not take that lock, and never wait for a table write ([`DigestMap`]).
//!
//! A job may carry a `Vouch`: asked under that lock just before the write, it can veto
//! the job (the peer's DSI binding ended while the hint waited in the queue). Whoever ends
//! a binding and then drops its dataset under the same lock therefore never misses a hint
//! that lands in between, even when the caller that queued it has gone (a poller restarted
//! by a reload drops its future mid-import).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use cip_proto::Dsi;
use hints::hint::CipHint;
use hints::table::{ImportError, ListChanges, PeerMeta, RoutingTable};
use tokio::sync::{mpsc, oneshot};

use crate::model::config::ImportConfig;
use crate::pipeline::outbound::Pipeline;
use crate::sys::lock;

/// What an import did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    /// The hint was indexed anew (false: the table held the same payload, whose expiry
    /// was refreshed).
    pub changed: bool,
    /// It came with a delta that the table applied in place ([`InPlace`]).
    pub in_place: bool,
    /// The table generation that holds it.
    pub generation: u64,
}

/// Why an import did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The table refused the hint.
    #[error(transparent)]
    Refused(#[from] ImportError),
    /// The import thread is gone (shutting down).
    #[error("the import queue is closed")]
    Closed,
    /// The table write panicked; the table is unchanged.
    #[error("import failed: {0}")]
    Internal(String),
    /// The job's `Vouch` said no: nobody vouches for the dataset any more.
    #[error("the peer's dsi binding ended while its object was imported")]
    Unvouched,
}

/// A hint that a delta made of the one held, with the delta's entries: the table applies
/// them in place ([`RoutingTable::apply_delta`]) when it still holds the delta's base,
/// and imports the hint whole otherwise.
#[derive(Debug, Clone)]
pub struct InPlace {
    /// Every weightlist entry that differs from the hint held.
    pub changes: Vec<ListChanges>,
    /// The payload digest (as the jobs carry) of the hint the delta applies to.
    pub base: u64,
    /// The job's hint is the new header alone (the receiver kept no copy of the hint):
    /// when the table no longer holds the base, the job fails with
    /// [`ImportError::NeedsWhole`] instead of being imported whole.
    pub header_only: bool,
}

/// Asked by the import thread, under the digests lock, right before a job is written:
/// false drops the job with [`QueueError::Unvouched`].
pub(crate) type Vouch = Box<dyn Fn() -> bool + Send>;

struct Job {
    meta: PeerMeta,
    hint: CipHint,
    digest: u64,
    vouch: Option<Vouch>,
    in_place: Option<InPlace>,
    reply: oneshot::Sender<Result<Imported, QueueError>>,
}

/// Digests of the payloads the table holds, by dataset, shared by the import thread and
/// the node.
pub(crate) type Digests = Arc<DigestMap>;

/// The digests of the payloads the table holds, by dataset. Writers take
/// [`DigestMap::lock`] and hold it through their table write (the module doc says why);
/// readers ask [`DigestMap::get`], which never waits for that write: it sees the digests
/// as they were before it, or after.
#[derive(Debug, Default)]
pub(crate) struct DigestMap {
    /// Held by a writer through its table write.
    write: Mutex<()>,
    /// The digests, locked only for the moment of a read or of one change.
    held: RwLock<HashMap<Dsi, u64>>,
}

impl DigestMap {
    /// The writers' lock: while it is held, no other writer changes a digest (or, by the
    /// writers' rule, the table).
    pub(crate) fn lock(&self) -> DigestsGuard<'_> {
        DigestsGuard {
            _write: lock(&self.write),
            map: self,
        }
    }

    /// The digest the table holds `dsi`'s payload under, without waiting for a write.
    pub(crate) fn get(&self, dsi: &Dsi) -> Option<u64> {
        self.read().get(dsi).copied()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Dsi, u64>> {
        self.held.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn change(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<Dsi, u64>> {
        self.held.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A writer's hold on the [`DigestMap`] ([`DigestMap::lock`]).
pub(crate) struct DigestsGuard<'a> {
    _write: MutexGuard<'a, ()>,
    map: &'a DigestMap,
}

impl DigestsGuard<'_> {
    /// The digest held for `dsi`.
    pub(crate) fn get(&self, dsi: &Dsi) -> Option<u64> {
        self.map.get(dsi)
    }

    /// Notes that the table holds `dsi`'s payload of `digest`.
    pub(crate) fn insert(&mut self, dsi: Dsi, digest: u64) {
        self.map.change().insert(dsi, digest);
    }

    /// Forgets `dsi`'s digest.
    pub(crate) fn remove(&mut self, dsi: &Dsi) {
        self.map.change().remove(dsi);
    }

    /// Keeps only the digests of the datasets `keep` accepts.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Dsi) -> bool) {
        self.map.change().retain(|d, _| keep(d));
    }
}

/// The sending side of the queue.
#[derive(Debug, Clone)]
pub struct Importer {
    /// Jobs boxed: the channel allocates its slots in blocks of 32, which for a job held
    /// inline cost every node 16 KB before its first import.
    tx: mpsc::Sender<Box<Job>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("dsi", &self.meta.dsi)
            .finish_non_exhaustive()
    }
}

impl Importer {
    /// Starts the import thread for `table`. It ends when the last `Importer` is dropped.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub(crate) fn start(
        config: ImportConfig,
        table: Arc<RoutingTable>,
        digests: Digests,
        outbound: Arc<Pipeline>,
    ) -> std::io::Result<Self> {
        let (tx, mut rx) = mpsc::channel(config.queue.max(1));
        if crate::sys::net::inline() {
            // Under a simulator: a task on the host's runtime does the thread's work.
            tokio::spawn(async move {
                let mut batch = Vec::new();
                while let Some(first) = rx.recv().await {
                    write_batch(
                        first, &mut rx, &config, &table, &digests, &outbound, &mut batch,
                    );
                }
            });
        } else {
            std::thread::Builder::new()
                .name("hint-import".into())
                .spawn(move || {
                    // Below the async workers: queries and polls first (merges and
                    // summary builds started from here inherit it).
                    crate::sys::priority::lower_this_thread(config.background_nice);
                    let mut batch = Vec::new();
                    while let Some(first) = rx.blocking_recv() {
                        write_batch(
                            first, &mut rx, &config, &table, &digests, &outbound, &mut batch,
                        );
                    }
                })?;
        }
        Ok(Self { tx })
    }

    /// Imports `hint` (payload digest `digest`) and waits for the outcome; `vouch`, when
    /// given, is asked right before the write (see `Vouch`); `in_place`, the delta that
    /// made `hint`, to apply instead when it can.
    ///
    /// # Errors
    /// [`QueueError::Refused`] with the table's reason; [`QueueError::Unvouched`] when
    /// `vouch` said no; [`QueueError::Closed`] during shutdown.
    pub async fn import(
        &self,
        meta: PeerMeta,
        hint: CipHint,
        digest: u64,
        vouch: Option<Vouch>,
        in_place: Option<InPlace>,
    ) -> Result<Imported, QueueError> {
        let (reply, outcome) = oneshot::channel();
        self.tx
            .send(Box::new(Job {
                meta,
                hint,
                digest,
                vouch,
                in_place,
                reply,
            }))
            .await
            .map_err(|_| QueueError::Closed)?;
        outcome.await.map_err(|_| QueueError::Closed)?
    }
}

/// Takes `first` and whatever else has queued up (within
/// [`ImportConfig::max_batch_entries`]), writes them to the table in one go and answers
/// each job; `batch` is scratch space, left empty.
fn write_batch(
    first: Box<Job>,
    rx: &mut mpsc::Receiver<Box<Job>>,
    config: &ImportConfig,
    table: &RoutingTable,
    digests: &Digests,
    outbound: &Pipeline,
    batch: &mut Vec<Job>,
) {
    let mut entries = entries_of(&first.hint);
    batch.push(*first);
    while entries < config.max_batch_entries {
        match rx.try_recv() {
            Ok(job) => {
                entries += entries_of(&job.hint);
                batch.push(*job);
            }
            Err(_) => break,
        }
    }
    let write = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        import_batch(table, digests, batch)
    }));
    let (results, changed) = match write {
        Ok(done) => done,
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".to_owned());
            tracing::error!(error = %why, hints = batch.len(), "import batch failed");
            let failed = batch
                .iter()
                .map(|_| Err(QueueError::Internal(why.clone())))
                .collect();
            // Nothing is known of what the failed write left: every poller is told.
            outbound.request();
            (failed, Vec::new())
        }
    };
    if !changed.is_empty() {
        outbound.request_for(&changed);
    }
    tracing::debug!(hints = batch.len(), entries, "imported a batch");
    for (job, result) in batch.drain(..).zip(results) {
        // The caller may have gone (shutdown, timeout); the import stands.
        let _ = job.reply.send(result);
    }
}

/// Imports `batch` in one table write; returns each outcome and the datasets it changed.
/// A hint whose payload the table already holds only has its expiry refreshed.
fn import_batch(
    table: &RoutingTable,
    digests: &Digests,
    batch: &mut [Job],
) -> (Vec<Result<Imported, QueueError>>, Vec<Dsi>) {
    let mut held = digests.lock();
    // Asked under the lock: a binding ended before this point vetoes the job; one ended
    // after it finds the dataset in the table when it drops it.
    let vouched: Vec<bool> = batch
        .iter()
        .map(|j| j.vouch.as_ref().is_none_or(|v| v()))
        .collect();
    // Later jobs for the same dataset win, as they would in one replace_all.
    let mut last: HashMap<&Dsi, usize> = HashMap::new();
    for (i, j) in batch.iter().enumerate() {
        if vouched[i] {
            last.insert(&j.meta.dsi, i);
        }
    }
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Step {
        Index,
        InPlace,
        Refresh,
        Veto,
        /// A header-only delta whose base the table no longer holds.
        NotHeld,
    }
    let mut jobs_of: HashMap<&Dsi, usize> = HashMap::new();
    for j in batch.iter() {
        *jobs_of.entry(&j.meta.dsi).or_default() += 1;
    }
    let steps: Vec<Step> = batch
        .iter()
        .enumerate()
        .map(|(i, j)| {
            if !vouched[i] {
                Step::Veto
            } else if last[&j.meta.dsi] == i
                && held.get(&j.meta.dsi) == Some(j.digest)
                && table.contains(&j.meta.dsi)
            {
                Step::Refresh
            } else if jobs_of[&j.meta.dsi] == 1
                && j.in_place
                    .as_ref()
                    .is_some_and(|d| held.get(&j.meta.dsi) == Some(d.base))
                && table.contains(&j.meta.dsi)
            {
                // The table holds the delta's base, and nothing else in the batch
                // changes the dataset.
                Step::InPlace
            } else if j.in_place.as_ref().is_some_and(|d| d.header_only) {
                Step::NotHeld
            } else {
                Step::Index
            }
        })
        .collect();
    // Deltas first: one that cannot be applied in place is imported whole below.
    let mut steps = steps;
    let mut in_place: Vec<Option<Result<(), ImportError>>> = Vec::with_capacity(batch.len());
    for (j, step) in batch.iter().zip(steps.iter_mut()) {
        let mut done = None;
        if *step == Step::InPlace
            && let Some(d) = &j.in_place
        {
            match table.apply_delta(j.meta.clone(), &j.hint, &d.changes) {
                Err(ImportError::NeedsWhole(why)) if !d.header_only => {
                    tracing::debug!(dsi = %j.meta.dsi, %why, "delta imported whole");
                    *step = Step::Index;
                }
                other => done = Some(other.map(|_| ())),
            }
        }
        in_place.push(done);
    }
    // The hints to index are handed over, not lent: the table drops each one as soon as it
    // has taken its values, before the new segment is built, so a huge hint and the
    // segment built from it are not in memory at once.
    let to_index: Vec<(PeerMeta, CipHint)> = batch
        .iter_mut()
        .zip(&steps)
        .filter(|(_, s)| **s == Step::Index)
        .map(|(j, _)| (j.meta.clone(), std::mem::take(&mut j.hint)))
        .collect();
    let mut replaced = table.replace_all(to_index).into_iter();
    // Same payloads: new expiries, in one swap; nothing to index or rebuild.
    table.refresh_all(
        batch
            .iter()
            .zip(&steps)
            .filter(|(_, s)| **s == Step::Refresh)
            .map(|(j, _)| j.meta.clone()),
    );
    let generation = table.generation();
    let mut changed = Vec::new();
    let results = batch
        .iter()
        .zip(steps)
        .zip(in_place)
        .map(|((job, step), in_place)| {
            match step {
                Step::Veto => return Err(QueueError::Unvouched),
                Step::NotHeld => {
                    return Err(QueueError::Refused(ImportError::NeedsWhole(
                        "the table no longer holds the delta's base".into(),
                    )));
                }
                Step::Refresh => {
                    return Ok(Imported {
                        changed: false,
                        in_place: false,
                        generation,
                    });
                }
                Step::InPlace => {
                    in_place
                        .unwrap_or(Err(ImportError::TooLarge))
                        .map_err(QueueError::Refused)?;
                }
                Step::Index => {
                    replaced
                        .next()
                        .unwrap_or(Err(ImportError::TooLarge))
                        .map_err(QueueError::Refused)?;
                }
            }
            // Indexed anew: the table's contents changed.
            held.insert(job.meta.dsi.clone(), job.digest);
            changed.push(job.meta.dsi.clone());
            Ok(Imported {
                changed: true,
                in_place: step == Step::InPlace,
                generation,
            })
        })
        .collect();
    (results, changed)
}

fn entries_of(hint: &CipHint) -> usize {
    hint.weightlists.iter().map(|(_, w)| w.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hints::hint::AttrSpec;
    use std::time::SystemTime;

    fn meta(d: &str) -> PeerMeta {
        PeerMeta {
            dsi: Dsi::new(d).unwrap(),
            base_uris: vec!["cip://p/".into()],
            dsi_description: None,
            received: SystemTime::UNIX_EPOCH,
            expires: None,
            via: None,
            path: Vec::new(),
        }
    }

    fn hint(total: u64, value: &str) -> CipHint {
        let spec = AttrSpec::new("DOCUMENT", "Author").unwrap();
        CipHint::with_weightlist(spec, total, [(value, 1)])
    }

    #[tokio::test]
    async fn a_delta_is_applied_in_place_only_on_its_base() {
        use hints::delta::HintDelta;
        let table = Arc::new(RoutingTable::default());
        let importer = Importer::start(
            ImportConfig::default(),
            table.clone(),
            Digests::default(),
            Arc::new(Pipeline::new()),
        )
        .unwrap();
        let (a, b, c) = (hint(5, "v1"), hint(5, "v2"), hint(5, "v3"));
        let first = importer.import(meta("1.1"), a.clone(), 1, None, None).await;
        assert!(!first.unwrap().in_place);
        // On its base (digest 1): in place.
        let (made, changes) = HintDelta::between(&a, &b)
            .unwrap()
            .apply_changes(&a)
            .unwrap();
        let delta = InPlace {
            changes,
            base: 1,
            header_only: false,
        };
        let done = importer
            .import(meta("1.1"), made, 2, None, Some(delta))
            .await
            .unwrap();
        assert!(done.changed && done.in_place);
        let rows = table.entries(None, None, None, 10);
        assert_eq!(rows.len(), 1);
        assert_eq!(&rows[0].value[..], b"v2");
        // Named on a base the table no longer holds (digest 1 again): imported whole,
        // and the table holds exactly the new hint.
        let (made, changes) = HintDelta::between(&a, &c)
            .unwrap()
            .apply_changes(&a)
            .unwrap();
        let stale = InPlace {
            changes: changes.clone(),
            base: 1,
            header_only: false,
        };
        let done = importer
            .import(meta("1.1"), made.clone(), 3, None, Some(stale))
            .await
            .unwrap();
        assert!(done.changed && !done.in_place);
        let rows = table.entries(None, None, None, 10);
        assert_eq!(rows.len(), 1);
        assert_eq!(&rows[0].value[..], b"v3");
        // A header alone is never imported whole: off its base, it is refused and the
        // table keeps what it holds.
        let mut header = made;
        header.weightlists.clear();
        let alone = InPlace {
            changes,
            base: 1,
            header_only: true,
        };
        let refused = importer
            .import(meta("1.1"), header.clone(), 4, None, Some(alone))
            .await;
        assert!(
            matches!(
                refused,
                Err(QueueError::Refused(ImportError::NeedsWhole(_)))
            ),
            "{refused:?}"
        );
        assert_eq!(&table.entries(None, None, None, 10)[0].value[..], b"v3");
        // On its base (digest 3), the header and the changes make the next hint.
        let (_, changes) = HintDelta::between(&c, &a)
            .unwrap()
            .apply_changes(&c)
            .unwrap();
        let on_base = InPlace {
            changes,
            base: 3,
            header_only: true,
        };
        let done = importer
            .import(meta("1.1"), header, 5, None, Some(on_base))
            .await
            .unwrap();
        assert!(done.changed && done.in_place);
        assert_eq!(&table.entries(None, None, None, 10)[0].value[..], b"v1");
    }

    #[tokio::test]
    async fn concurrent_imports_batch_and_report_each_outcome() {
        let table = Arc::new(RoutingTable::default());
        let outbound = Arc::new(Pipeline::new());
        let importer = Importer::start(
            ImportConfig::default(),
            table.clone(),
            Digests::default(),
            outbound.clone(),
        )
        .unwrap();
        let mut tasks = Vec::new();
        for i in 0..200u32 {
            let importer = importer.clone();
            // Every tenth hint is implausible (a count above its total of 0).
            let total = if i % 10 == 0 { 0 } else { 5 };
            tasks.push(tokio::spawn(async move {
                importer
                    .import(
                        meta(&format!("1.{i}")),
                        hint(total, &format!("v{i}")),
                        1,
                        None,
                        None,
                    )
                    .await
            }));
        }
        let mut ok = 0;
        for (i, t) in tasks.into_iter().enumerate() {
            match t.await.unwrap() {
                Ok(imported) => {
                    assert!(imported.changed);
                    ok += 1;
                }
                Err(QueueError::Refused(ImportError::CountAboveTotal { .. })) => {
                    assert_eq!(i % 10, 0)
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(ok, 180);
        assert_eq!(table.peers().len(), 180);
        // Far fewer table generations than imports: they were batched.
        assert!(table.generation() <= 180);
        assert!(outbound.stats().requested >= 1);
        // The same payload again: imported, but no change.
        let again = importer
            .import(meta("1.1"), hint(5, "v1"), 1, None, None)
            .await
            .unwrap();
        assert!(!again.changed);
    }

    #[tokio::test]
    async fn a_vouch_that_says_no_keeps_the_hint_out_of_the_table() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let table = Arc::new(RoutingTable::default());
        let digests = Digests::default();
        let outbound = Arc::new(Pipeline::new());
        let importer = Importer::start(
            ImportConfig::default(),
            table.clone(),
            digests.clone(),
            outbound,
        )
        .unwrap();
        let bound = Arc::new(AtomicBool::new(true));
        let vouch = |b: &Arc<AtomicBool>| -> Option<Vouch> {
            let b = b.clone();
            Some(Box::new(move || b.load(Ordering::SeqCst)))
        };
        let first = importer
            .import(meta("1.1"), hint(5, "v1"), 1, vouch(&bound), None)
            .await
            .unwrap();
        assert!(first.changed);
        let generation = table.generation();
        // The binding ends: neither a refresh of the held payload (digest 1) nor a new one
        // (digest 2) is written; dropping what is held is the caller's part.
        bound.store(false, Ordering::SeqCst);
        for digest in [1, 2] {
            let refused = importer
                .import(meta("1.1"), hint(5, "v2"), digest, vouch(&bound), None)
                .await;
            assert!(matches!(refused, Err(QueueError::Unvouched)), "{refused:?}");
        }
        assert_eq!(digests.get(&Dsi::new("1.1").unwrap()), Some(1));
        let other = importer
            .import(meta("1.2"), hint(5, "v3"), 3, None, None)
            .await
            .unwrap();
        assert!(other.changed);
        assert_eq!(table.peers().len(), 2);
        assert!(table.generation() > generation);
        let q = hints::query::Query::parse("DOCUMENT:Author=v2").unwrap();
        assert!(table.query(&q, &Default::default()).is_empty());
    }

    #[test]
    fn digests_are_read_while_a_writer_holds_its_lock() {
        let digests = Digests::default();
        let dsi = Dsi::new("1.1").unwrap();
        digests.lock().insert(dsi.clone(), 7);
        // A writer in the middle of a long table write.
        let mut writer = digests.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| tx.send(digests.get(&dsi)).unwrap());
            // The reader answers while the writer still holds its lock.
            assert_eq!(
                rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap(),
                Some(7)
            );
        });
        writer.insert(dsi.clone(), 8);
        assert_eq!(writer.get(&dsi), Some(8));
        writer.retain(|d| *d != dsi);
        drop(writer);
        assert_eq!(digests.get(&dsi), None);
    }
}
