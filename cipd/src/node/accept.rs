//! In-bound index objects: a peer's hint checked against its DSI binding, parsed, imported
//! through the import queue and spooled; dropping datasets; restoring the spool at start.

use std::sync::atomic::Ordering;
use std::time::Instant;

use hints::table::PeerMeta;

use crate::pipeline::import::{InPlace, QueueError};
use crate::store::binding::Claim;

use super::*;

impl Node {
    /// Validates an index object from configured peer `peer`, puts it in the table and the
    /// spool, and asks for an out-bound rebuild when it changed the table.
    ///
    /// # Errors
    /// [`Rejection`] saying why it was refused (the table and spool are then unchanged).
    pub async fn accept_index(&self, peer: &str, obj: IndexObject) -> Result<(), Rejection> {
        self.accept_index_with(peer, obj, None).await
    }

    /// [`Node::accept_index`] of a hint a delta made, with the delta's entries to apply in
    /// place when the table still holds its base.
    ///
    /// # Errors
    /// As [`Node::accept_index`].
    pub(crate) async fn accept_index_with(
        &self,
        peer: &str,
        obj: IndexObject,
        in_place: Option<InPlace>,
    ) -> Result<(), Rejection> {
        let dsi = obj.dsi.clone();
        let result = self.accept_index_inner(peer, obj, in_place).await;
        match &result {
            Ok(()) => {
                Metrics::inc(&self.metrics.index_objects_received);
                self.update_status(|s| s.hints_accepted += 1);
            }
            Err(e) => {
                match e {
                    Rejection::Binding(b) => {
                        let owner = match b {
                            crate::store::binding::BindingError::NotItsDsi { bound, .. } => {
                                Some(bound.to_string())
                            }
                            crate::store::binding::BindingError::Taken { owner, .. } => {
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

    /// Asked by the import thread right before the write: `peer` still delivers `dsi`.
    pub(super) fn vouch(&self, peer: &str, dsi: &Dsi) -> crate::pipeline::import::Vouch {
        let (bindings, peer, dsi) = (self.bindings.clone(), peer.to_owned(), dsi.clone());
        Box::new(move || bindings.get(&peer).is_some_and(|b| b.dsi == dsi))
    }

    /// What the signature check of `peer`'s hints needs: its trust settings, the date of
    /// the last signed hint it sent, and the clock skew allowed.
    pub(super) fn signature_policy(
        &self,
        config: &Config,
        peer: &str,
    ) -> (
        crate::model::trust::signature::PeerTrust,
        Option<SystemTime>,
        std::time::Duration,
    ) {
        let trust = config
            .peer(peer)
            .map(|p| p.trust.clone())
            .unwrap_or_default();
        (trust, self.trust.last(peer), config.signing.max_clock_skew)
    }

    /// A poll's answer from `peer` was refused while it arrived: a hint in it would be
    /// charged more than `limits.max_peer_table_bytes` (`why` says how much). Counted as
    /// a hint refused for the memory budget.
    pub fn refused_while_arriving(&self, peer: &str, why: &str) {
        tracing::warn!(%peer, error = %why, "index object refused while it arrived: memory budget");
        Metrics::inc(&self.metrics.index_objects_over_budget);
        Metrics::inc(&self.metrics.index_objects_rejected);
        self.update_status(|s| {
            s.budget_refusals += 1;
            s.hints_rejected += 1;
        });
    }

    pub(super) async fn accept_index_inner(
        &self,
        peer: &str,
        obj: IndexObject,
        in_place: Option<InPlace>,
    ) -> Result<(), Rejection> {
        let Some(kind) = crate::model::index_kind::IndexKind::of(&obj.index_type) else {
            return Err(Rejection::UnsupportedType(
                obj.index_type.as_str().to_owned(),
            ));
        };
        // Identity first: an object for somebody else's DSI costs no parsing, and never
        // reaches the table or the spool.
        let dsi = obj.dsi.clone();
        let claim = self.bindings.claim(peer, &dsi)?;
        let result = self.import_object(peer, kind, obj, in_place).await;
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

    /// Parses `obj` (on the blocking pool), imports it through the import queue (applying
    /// `in_place` when the table holds its base) and spools it.
    pub(super) async fn import_object(
        &self,
        peer: &str,
        kind: crate::model::index_kind::IndexKind,
        obj: IndexObject,
        in_place: Option<InPlace>,
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
            let (trust, last, skew) = self.signature_policy(&config, peer);
            // Only a tagged update applies to what is held; SOIF hints are always totals.
            let previous = (kind == crate::model::index_kind::IndexKind::Tagged)
                .then(|| self.index_state.stored(&obj.dsi))
                .flatten();
            crate::sys::net::spawn_blocking(move || {
                let converted = crate::pipeline::index_types::convert(
                    kind,
                    &payload,
                    previous.as_ref(),
                    limits,
                )?;
                // A hint that fails its peer's signature policy goes no further.
                let verdict = crate::model::trust::signature::check(
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
        let IndexObject {
            index_type,
            dsi,
            base_uris,
            dsi_description,
            payload,
        } = obj;
        // From here on the payload lives only in the hint, whose values are slices of it:
        // the import thread drops the hint once the table has read it, and with it the
        // payload, before the table's new segment is finished.
        drop(payload);
        let meta = PeerMeta {
            path: Vec::new(),
            ..received_meta(&config, peer, &dsi, &base_uris, &dsi_description, received)
        };
        let objects = hint.total_object_count;
        // The tagged total is remembered (updates apply to it); a SOIF hint is not.
        let total = (kind == crate::model::index_kind::IndexKind::Tagged).then(|| stored.clone());
        // Spooled first, staged beside its place and put there only once the table took
        // it: no copy of the payload waits for the import to end.
        let entry = SpoolEntry {
            peer: peer.to_owned(),
            dsi: dsi.clone(),
            index_type: index_type.as_str().to_owned(),
            base_uris,
            description: dsi_description,
            received,
            payload: stored,
        };
        let spool = self.spool.clone();
        let staged = spool_io(peer, move || spool.stage(&entry)).await;
        // An uncommitted entry is removed (a file system call: not on this worker).
        let discard = |staged: Option<crate::store::spool::StagedEntry>| {
            if let Some(s) = staged {
                drop(crate::sys::net::spawn_blocking(move || drop(s)));
            }
        };
        // The table refuses our own DSI, loops (provenance) and implausible counts; a
        // refused hint never reaches the spool.
        // A reload may end the peer's binding while the object waits in the import queue:
        // the import thread asks the binding right before the write (and the reload drops
        // the dataset under the same lock), so the outcome holds even if this future is
        // dropped mid-import (a poller restarted by that reload).
        let vouch = self.vouch(peer, &dsi);
        match self
            .importer
            .import(meta, hint, digest, Some(vouch), in_place)
            .await
        {
            Err(e) => {
                discard(staged);
                return Err(match e {
                    QueueError::Refused(r) => Rejection::Refused(r),
                    other => Rejection::Storage(other.to_string()),
                });
            }
            Ok(done) if done.in_place => Metrics::inc(&self.metrics.deltas_in_place),
            Ok(_) => {}
        }
        // Ended after the write: the reload drops the dataset; this keeps it out of the
        // spool.
        if self.bindings.get(peer).is_none_or(|b| b.dsi != dsi) {
            discard(staged);
            tracing::info!(%peer, %dsi, "binding ended during the import; its hint dropped");
            self.drop_dataset(&dsi);
            return Err(Rejection::Storage(QueueError::Unvouched.to_string()));
        }
        if let Some(total) = &total {
            self.index_state
                .note_stored(index_type.as_str(), &dsi, total);
        }
        if matches!(
            verdict,
            crate::model::trust::signature::Verdict::Valid { .. }
        ) {
            Metrics::inc(&self.metrics.hint_signatures_valid);
        }
        self.trust.accepted(peer, &verdict);
        if let Some(staged) = staged {
            spool_io(peer, move || staged.commit()).await;
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
            self.begin_bulk_start();
        }
    }

    /// Puts the table in bulk-load mode until [`Node::end_cold_start`].
    fn begin_bulk_start(&self) {
        self.cold_start.store(true, Ordering::Release);
        self.settling.store(true, Ordering::Release);
        self.table.set_bulk_load(true);
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
            Ok(_) => drop(crate::sys::net::spawn_blocking(work)),
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
    pub(super) fn note_table_change(&self) {
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
        let parsed = parse_spooled(
            admitted,
            &self.spool,
            limits,
            &self.payload_hasher,
            &self.startup,
        );
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
                            path: Vec::new(),
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
        if batch.len() > 1 {
            // A restart's cold start: the spooled hints load as a bulk load (indexed on
            // every core, their segments merged and indexed once they are all in), which
            // the polls that follow continue until every configured peer is in.
            self.begin_bulk_start();
        }
        let results = {
            let mut imported = self.imported.lock();
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
        let (expected, imported) = self.import_progress();
        if imported >= expected {
            // Nothing left to poll for: merge now (in the background).
            self.end_cold_start();
        }
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
    pub(super) fn check_spooled(
        &self,
        config: &Config,
        peer: &str,
        hint: &CipHint,
    ) -> Result<(), Rejection> {
        let trust = config
            .peer(peer)
            .map(|p| p.trust.clone())
            .unwrap_or_default();
        // Its date was checked against the clock when it arrived.
        let verdict = crate::model::trust::signature::check(
            hint,
            &trust,
            None,
            SystemTime::now(),
            Duration::MAX,
        )?;
        self.trust.accepted(peer, &verdict);
        Ok(())
    }

    /// Drops hints older than the TTL from the table and the spool.
    pub fn expire(&self) -> usize {
        let gone = {
            let mut imported = self.imported.lock();
            let gone = self.table.expire(SystemTime::now());
            imported.retain(|d| !gone.contains(d));
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
        self.outbound.request_for(&gone);
        n
    }

    /// Clears the hint facts (arrival, objects) of the peers whose hints for `gone` left the
    /// table, so listings do not show counts the table no longer holds.
    pub(super) fn forget_hints(&self, gone: &[Dsi]) {
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
    pub(super) fn drop_dataset_if(
        &self,
        dsi: &Dsi,
        keep_going: impl FnOnce(&PeerMeta) -> bool,
    ) -> bool {
        let removed = {
            // A later import of the same payload must rebuild the out-bound hint again.
            let mut imported = self.imported.lock();
            if self.table.peer_meta(dsi).is_some_and(|m| !keep_going(&m)) {
                return false;
            }
            imported.remove(dsi);
            self.table.remove(dsi)
        };
        self.forget_hints(std::slice::from_ref(dsi));
        self.forget_dataset_heads(dsi);
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
            self.outbound.request_for([dsi]);
        }
        removed
    }
}

/// Runs a spool write off the async workers; a failure is logged (the hint is then kept in
/// memory only, as the table has it) and gives `None`.
async fn spool_io<T: Send + 'static>(
    peer: &str,
    write: impl FnOnce() -> Result<T, crate::store::spool::SpoolError> + Send + 'static,
) -> Option<T> {
    let done = crate::sys::net::spawn_blocking(write)
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    match done {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!(%peer, error = %e, "cannot write the spool; the hint is kept in memory only");
            None
        }
    }
}

/// The table's record of `dsi`'s hint received from `peer` at `received`: it lives
/// `spool.ttl` from then (no path: set it for a passed-on object).
pub(super) fn received_meta(
    config: &Config,
    peer: &str,
    dsi: &Dsi,
    base_uris: &[String],
    description: &Option<String>,
    received: SystemTime,
) -> PeerMeta {
    PeerMeta {
        dsi: dsi.clone(),
        base_uris: base_uris.to_vec(),
        dsi_description: description.clone(),
        received,
        expires: Some(received + config.spool_ttl),
        via: Some(peer.to_owned()),
        path: Vec::new(),
    }
}
