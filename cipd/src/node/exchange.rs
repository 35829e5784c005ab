//! The node's side of the mesh's routes ([`crate::store::routes`]): the answer to a poll
//! that asks datasets apart, the passed-on objects a poll brings, and what this node asks
//! of its own peers.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::time::{Duration, SystemTime};

use hints::aggregate::Filter;
use hints::table::{ImportError, PeerMeta};

use crate::model::config::soif_limits;
use crate::pipeline::import::QueueError;
use crate::pipeline::inbound::parse_hint;
use hints::delta::HintDelta;

/// How a delta's payload begins (`CIP-HINT-DELTA`, PROTOCOL.md "Hint deltas").
const DELTA_MARK: &[u8] = b"@CIP-HINT-DELTA";
use crate::store::routes::{Damping, DampingConfig, Offer, Routes};

use super::*;

/// `chain` joined into one delta and written, when that is smaller than `size` (the whole
/// hint's) bytes.
fn joined_wire(chain: &[std::sync::Arc<HintDelta>], size: usize) -> Option<Bytes> {
    let wire = hints::delta::journal::join(chain)?.to_soif().to_bytes();
    (wire.len() < size).then(|| Bytes::from(wire))
}

/// A polled peer's answer, as the node takes it ([`Node::take_answer`]).
#[derive(Debug)]
pub struct Answer {
    /// A `201` with output (else a `200`).
    pub output: bool,
    /// The status line's comment: the answer's version, or `unchanged since version`.
    pub comment: String,
    /// The objects: the peer's own first, then the datasets asked apart.
    pub objects: Vec<IndexObject>,
}

/// Objects of an answer that were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// How many.
    pub refused: usize,
    /// Of how many.
    pub total: usize,
    /// The first one's reason.
    pub first: String,
}

impl Node {
    /// Takes a polled peer's answer: the first object as the peer's own hint, the rest as
    /// routes to the datasets we asked apart (withdrawing those it no longer sends), the
    /// answer's version for the next poll's `have`, a change towards damping; an
    /// `unchanged` answer refreshes what the peer brought. Returns the objects taken.
    ///
    /// # Errors
    /// [`Refused`] when an object was refused (the others are taken; the next poll asks for
    /// the whole answer again).
    pub async fn take_answer(
        self: &Arc<Self>,
        peer: &str,
        answer: Answer,
    ) -> Result<usize, Refused> {
        use crate::transport::{UNCHANGED, VERSION};
        if !answer.output {
            if answer.comment.starts_with(UNCHANGED) {
                self.refresh_peer(peer).await;
            }
            return Ok(0);
        }
        let version = answer
            .comment
            .strip_prefix(VERSION)
            .and_then(crate::store::routes::parse_version);
        if version.is_none() || version != self.routes.received(peer) {
            // A changed answer: too many too often and the peer is damped.
            self.note_peer_change(peer);
        }
        let total = answer.objects.len();
        let mut refused = Vec::new();
        let mut offered = BTreeSet::new();
        for (i, mut obj) in answer.objects.into_iter().enumerate() {
            let mut in_place = None;
            let mut head = None;
            if i == 0 && obj.payload.starts_with(DELTA_MARK) {
                // The short way first: by the hint's head, at the cost of the change.
                match self.take_delta_by_head(peer, &obj).await {
                    Ok(true) => {
                        Metrics::inc(&self.metrics.deltas_applied);
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        refused.push(e.to_string());
                        continue;
                    }
                }
                match self
                    .rebuild_from_delta(peer, &obj.dsi, obj.payload.clone())
                    .await
                {
                    Ok((whole, changes, made)) => {
                        Metrics::inc(&self.metrics.deltas_applied);
                        obj.payload = whole;
                        in_place = Some(changes);
                        head = Some(made);
                    }
                    Err(why) => {
                        // Nothing changed: the next poll (now) names no version and takes
                        // the whole hint.
                        tracing::warn!(%peer, dsi = %obj.dsi, error = %why, "delta not applied; asking for the whole hint");
                        Metrics::inc(&self.metrics.deltas_refused);
                        refused.push(format!("delta not applied: {why}"));
                        self.poll_soon(peer);
                        continue;
                    }
                }
            }
            let done = if i == 0 {
                let dsi = obj.dsi.clone();
                // A hint taken whole (or made whole of a delta) leaves no head until it is
                // in; one made of a delta leaves its own.
                self.forget_head(peer, &dsi);
                let done = self.accept_index_with(peer, obj, in_place).await;
                if let (Ok(()), Some(made)) = (&done, head) {
                    self.took_delta(peer, &dsi, made).await;
                }
                done
            } else {
                self.accept_transit(peer, obj).await.map(|dsi| {
                    offered.insert(dsi);
                })
            };
            if let Err(e) = done {
                refused.push(e.to_string());
            }
        }
        self.withdraw_routes(peer, offered).await;
        // Asked again with this version, the peer answers "unchanged"; after a refusal the
        // whole answer comes again.
        self.routes
            .note_received(peer, version.filter(|_| refused.is_empty()));
        match refused.first() {
            None => Ok(total),
            Some(first) => Err(Refused {
                refused: refused.len(),
                total,
                first: first.clone(),
            }),
        }
    }

    /// The delta to send a poller instead of `whole` (our aggregate as it is about to receive
    /// it, of digest `to`), as SOIF bytes, when one is worth sending: `base` is the digest of
    /// the hint it holds from us, `last` the first object we last sent it (with its digest).
    ///
    /// The journal's changesets from `base` to `to` are joined into one delta
    /// (PROTOCOL.md, "The delta journal"); when it has none from `last` to `to`, that
    /// changeset is made (on the blocking pool, once for every poller that held `last`) and
    /// kept. `None` sends the whole hint: no way from `base` (the journal no longer or never
    /// held it), or a delta no smaller than the hint.
    pub async fn delta_for(
        &self,
        base: u64,
        last: Option<(Bytes, u64)>,
        whole: Bytes,
        to: u64,
    ) -> Option<Bytes> {
        let limits = self.config().outbound.journal;
        let soif = soif_limits(&self.config());
        let chain = {
            let mut journal = lock(&self.journal);
            journal.set_limits(limits);
            journal.chain(base, to)
        };
        // What the journal lacks: the changeset from what the poller last received to what
        // it gets now, made here (kept for every poller on the same step), unless kept or
        // of no use to this poller.
        let make = match (&chain, last) {
            (None, Some((last, from)))
                if from == base || (from != to && !lock(&self.journal).has(from, to)) =>
            {
                Some((last, from))
            }
            _ => None,
        };
        if chain.is_none() && make.is_none() {
            return None;
        }
        let size = whole.len();
        // Joining, making and writing deltas cost up to the hint's size: off the async
        // workers.
        let (made, wire) = crate::sys::net::spawn_blocking(move || {
            if let Some(chain) = chain {
                return (None, joined_wire(&chain, size));
            }
            let Some((last, from)) = make else {
                return (None, None);
            };
            let made = parse_hint(&last, soif)
                .ok()
                .zip(parse_hint(&whole, soif).ok())
                .and_then(|(a, b)| HintDelta::for_wire(&a, &b));
            match made {
                Some((delta, wire)) if from == base => {
                    (Some((delta, wire.len())), Some(Bytes::from(wire)))
                }
                Some((delta, wire)) => (Some((delta, wire.len())), None),
                None => (None, None),
            }
        })
        .await
        .ok()?;
        let wire = match made {
            Some((delta, len)) => {
                let delta = std::sync::Arc::new(delta);
                let chain = {
                    let mut journal = lock(&self.journal);
                    journal.record(delta, len);
                    journal.chain(base, to)
                };
                match (wire, chain) {
                    (Some(wire), _) => Some(wire),
                    // It holds an older hint: the new changeset may complete its way.
                    (None, Some(chain)) => {
                        crate::sys::net::spawn_blocking(move || joined_wire(&chain, size))
                            .await
                            .ok()
                            .flatten()
                    }
                    (None, None) => None,
                }
            }
            None => wire,
        };
        if wire.is_some() {
            Metrics::inc(&self.metrics.deltas_sent);
        }
        wire
    }

    /// The routes' exchange state.
    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    /// The datasets to ask every polled peer to keep apart for our pollers' sake
    /// ([`Routes::wanted_apart`]): the pollers and what they asked apart so.
    pub fn wanted_apart(&self) -> BTreeSet<Dsi> {
        self.routes.wanted_apart(&self.identity().dsi)
    }

    /// The peers this node polls and reaches, by DSI where known: asked `apart` (left out
    /// of our peers' answers, which need not carry what we take directly). A peer gone
    /// (unreachable past `limits.peer_gone_after`) is not: its data may then come round
    /// through the others.
    pub fn direct_peers(&self) -> BTreeSet<Dsi> {
        let config = self.config();
        let gone: std::collections::HashSet<String> = lock(&self.peers)
            .iter()
            .filter(|(_, s)| s.gone)
            .map(|(n, _)| n.clone())
            .collect();
        let mut apart = BTreeSet::new();
        let mut learned = Vec::new();
        for p in config
            .peers
            .iter()
            .filter(|p| p.has_role(PeerRole::Poll) && !gone.contains(&p.name))
        {
            match &p.dsi {
                Some(dsi) => {
                    apart.insert(dsi.clone());
                }
                None => learned.push(p.name.as_str()),
            }
        }
        apart.extend(self.bindings.dsis_of(learned));
        apart
    }

    /// Polls `peer` now, as its `datachanged` does: the answer comes whole only if it
    /// changed (`cipctl poll` asks for it whole: [`Node::poll_now`]).
    pub fn poll_soon(&self, peer: &str) {
        self.poll_notifier(peer).notify_one();
    }

    /// Polls every peer now: what this node asks of them changed.
    pub fn wake_polls(&self) {
        for n in lock(&self.poll_now).values() {
            n.notify_one();
        }
    }

    /// Notes what `poller` asked apart; when that changes what this node asks of its own
    /// peers, polls them now so the request travels on.
    pub fn note_separate(&self, poller: &Dsi, separate: BTreeSet<Dsi>, apart: BTreeSet<Dsi>) {
        let before = self.wanted_apart();
        if self.routes.note_poll(poller, separate, apart) && self.wanted_apart() != before {
            tracing::debug!(%poller, "datasets asked apart changed; polling peers");
            self.wake_polls();
        }
    }

    /// The answer to a poll from `poller` that asked `separate` and `apart` apart: this
    /// node's aggregate without the poller's data and those datasets, then each dataset
    /// of `separate` the table holds as an object of its own (with its `Path`), except
    /// what came from or through the poller and what it takes directly (`apart`). Returns
    /// the objects, the answer's version (a digest of their contents, the `Date` left
    /// out) and the [`hints::delta::digest`] of the first object when it is our aggregate. With `fresh`, from a build covering every change made before the call (as a
    /// poll is answered); without, from the stored hint as it is (a notifier's look, which
    /// must not wait for the next build).
    pub async fn poll_answer(
        &self,
        poller: Option<&Dsi>,
        separate: &BTreeSet<Dsi>,
        apart: &BTreeSet<Dsi>,
        fresh: bool,
    ) -> (Vec<IndexObject>, u64, Option<u64>) {
        let out = if fresh {
            self.outbound.fresh(self.config().outbound.max_wait).await
        } else {
            self.outbound.current()
        };
        let own = self.identity().dsi.clone();
        let input = || (self.outbound_input(), self.table.clone());
        let mut hasher = std::hash::DefaultHasher::new();
        let mut objects = Vec::new();
        // Our own DSI names our local data, which is always ours to send (a poller's
        // `apart` lists us among the peers it polls): left out of the filter, so that a
        // poller asking nothing else apart gets the shared payload.
        let filter = Filter {
            exclude: poller.cloned(),
            separate: separate
                .union(apart)
                .filter(|d| **d != own)
                .cloned()
                .collect(),
            only: None,
        };
        let identity = self.identity.load_full();
        let mut first = None;
        if let Some(o) = self.outbound.object_for(&out, &filter, input).await {
            (&identity.dsi, o.digest).hash(&mut hasher);
            first = Some(o.hint_digest);
            objects.push(IndexObject {
                index_type: hint_type(),
                dsi: identity.dsi.clone(),
                base_uris: identity.base_uris.clone(),
                dsi_description: identity.description.clone(),
                payload: o.payload,
            });
        }
        for origin in separate {
            if *origin == own || Some(origin) == poller || apart.contains(origin) {
                continue;
            }
            let Some(meta) = self.table.peer_meta(origin) else {
                continue;
            };
            let only = Filter {
                exclude: poller.cloned(),
                separate: BTreeSet::new(),
                only: Some(origin.clone()),
            };
            if let Some(o) = self.outbound.object_for(&out, &only, input).await {
                (origin, o.digest).hash(&mut hasher);
                objects.push(IndexObject {
                    index_type: hint_type(),
                    dsi: origin.clone(),
                    base_uris: meta.base_uris.clone(),
                    dsi_description: meta.dsi_description.clone(),
                    payload: o.payload,
                });
            }
        }
        (objects, hasher.finish(), first)
    }

    /// Takes a passed-on object from `peer` (one of a poll's objects after the first):
    /// parses it, checks its `Path` (it starts at `peer`, ends at the object's DSI, never
    /// passes this node and names no DSI twice) and imports it when its route is the best
    /// one offered ([`Routes::offer`]). Returns the dataset it describes.
    ///
    /// # Errors
    /// [`Rejection`] saying why it was refused; the table is then unchanged.
    pub async fn accept_transit(&self, peer: &str, obj: IndexObject) -> Result<Dsi, Rejection> {
        let origin = obj.dsi.clone();
        let result = self.accept_transit_inner(peer, obj).await;
        match &result {
            Ok(_) => Metrics::inc(&self.metrics.index_objects_received),
            Err(e) => {
                if matches!(e, Rejection::Refused(ImportError::BadPath { .. })) {
                    Metrics::inc(&self.metrics.index_objects_bad_path);
                }
                tracing::warn!(%peer, dsi = %origin, error = %e, "passed-on index object refused");
                Metrics::inc(&self.metrics.index_objects_rejected);
                self.update_status(|s| s.hints_rejected += 1);
            }
        }
        result
    }

    async fn accept_transit_inner(&self, peer: &str, obj: IndexObject) -> Result<Dsi, Rejection> {
        let Some(kind) = crate::model::index_kind::IndexKind::of(&obj.index_type) else {
            return Err(Rejection::UnsupportedType(
                obj.index_type.as_str().to_owned(),
            ));
        };
        let config = self.config();
        let own = self.identity().dsi.clone();
        let origin = obj.dsi.clone();
        let sender = self.peer_dsi(peer);
        let limits = soif_limits(&config);
        let trust = config
            .peer(peer)
            .map(|p| p.trust.clone())
            .unwrap_or_default();
        let skew = config.signing.max_clock_skew;
        let payload = obj.payload.clone();
        let hasher = self.payload_hasher.clone();
        let (base_uris, description) = (obj.base_uris.clone(), obj.dsi_description.clone());
        drop(obj);
        let (hint, path, digest) = {
            let _permit = self
                .parsing
                .acquire()
                .await
                .map_err(|_| Rejection::Storage("shutting down".into()))?;
            let (b, d) = (base_uris.clone(), description.clone());
            crate::sys::net::spawn_blocking(move || {
                let converted =
                    crate::pipeline::index_types::convert(kind, &payload, None, limits)?;
                // The forwarder signs what it passes on, as it signs its aggregate.
                crate::model::trust::signature::check(
                    &converted.hint,
                    &trust,
                    None,
                    SystemTime::now(),
                    skew,
                )?;
                let path = hints::table::path(&converted.hint)?;
                let digest = hasher.hash_one((&converted.stored[..], &b, &d, &path));
                Ok::<_, Rejection>((converted.hint, path, digest))
            })
            .await
            .map_err(|e| Rejection::Storage(format!("parse task failed: {e}")))??
        };
        let bad = |reason: String| {
            let text: Vec<&str> = path.iter().map(Dsi::as_str).collect();
            Rejection::Refused(ImportError::BadPath {
                value: text.join(" "),
                reason,
            })
        };
        if path.len() < 2 {
            return Err(bad(
                "a passed-on object's path names the sender and the dataset".into(),
            ));
        }
        if let Some(sender) = &sender
            && path.first() != Some(sender)
        {
            return Err(bad(format!("it does not start at the sender, {sender}")));
        }
        if path.last() != Some(&origin) {
            return Err(bad(format!(
                "it does not end at the object's dsi, {origin}"
            )));
        }
        let max = config.limits.table.max_provenance;
        if path.len() > max {
            return Err(bad(format!(
                "{} hops, more than limits.max_provenance ({max})",
                path.len()
            )));
        }
        if path.contains(&own) {
            return Err(bad(format!("it passes through this node, {own}")));
        }
        if origin == own {
            return Err(Rejection::Refused(ImportError::OwnDsi { dsi: origin }));
        }
        let direct = self
            .table
            .peer_meta(&origin)
            .is_some_and(|m| m.path.is_empty());
        match self.routes.offer(&origin, peer, path.len(), direct) {
            Offer::Take => {}
            Offer::Keep { wake } => {
                if let Some(w) = wake {
                    self.poll_notifier(&w).notify_one();
                }
                return Ok(origin);
            }
        }
        let received = SystemTime::now();
        let meta = PeerMeta {
            path,
            ..super::accept::received_meta(
                &config,
                peer,
                &origin,
                &base_uris,
                &description,
                received,
            )
        };
        self.importer
            .import(meta, hint, digest, None, None)
            .await
            .map_err(|e| match e {
                QueueError::Refused(r) => Rejection::Refused(r),
                other => Rejection::Storage(other.to_string()),
            })?;
        self.note_table_change();
        Ok(origin)
    }

    /// The version of `peer`'s last answer, to ask whether it changed (`have`), only while
    /// the table still holds everything that answer brought: after an expiry, a removal
    /// or a withdrawn route, the next poll takes the whole answer again.
    pub fn have_for(&self, peer: &str) -> Option<u64> {
        let version = self.routes.received(peer)?;
        let own = self.peer_dsi(peer)?;
        let held = self.table.contains(&own)
            && self
                .routes
                .chosen_via(peer)
                .iter()
                .all(|o| self.table.contains(o));
        held.then_some(version)
    }

    /// `peer` answered that nothing changed: what it brought stays, and lives another
    /// `spool.ttl` from now, as when it re-serves an identical hint (its spool file keeps
    /// its arrival time: a restart polls it whole). Written to the table off the async
    /// workers, together with the other refreshes that come meanwhile (one write for all
    /// that came while the last one ran or waited for the table).
    pub async fn refresh_peer(self: &Arc<Self>, peer: &str) {
        let Some(own) = self.peer_dsi(peer) else {
            return;
        };
        let mut held = self.routes.chosen_via(peer);
        held.push(own);
        let now = SystemTime::now();
        let ttl = self.config().spool_ttl;
        let metas: Vec<PeerMeta> = held
            .iter()
            .filter_map(|d| self.table.peer_meta(d))
            .map(|m| PeerMeta {
                received: now,
                expires: Some(now + ttl),
                ..(*m).clone()
            })
            .collect();
        self.refreshes.submit(metas).await;
    }

    /// The damping settings in force (`limits.damping_*`).
    pub fn damping_config(&self) -> DampingConfig {
        let l = &self.config().limits;
        DampingConfig {
            half_life: l.damping_half_life,
            suppress: l.damping_suppress as f64,
            reuse: l.damping_reuse as f64,
            max_hold: l.damping_max_hold,
        }
    }

    /// Notes that polled peer `peer`'s answer changed; damps it (RFC 2439) when it has
    /// changed too often, logging that once, not per change.
    pub fn note_peer_change(&self, peer: &str) {
        let now = tokio::time::Instant::now();
        match self.routes.note_change(peer, now, &self.damping_config()) {
            Damping::Free => {}
            Damping::Started(hold) => {
                tracing::warn!(
                    %peer,
                    hold = %humantime::format_duration(Duration::from_secs(hold.as_secs())),
                    "peer changes too often: damped; its changes are held and taken together"
                );
                Metrics::inc(&self.metrics.peer_dampings);
                self.update_peer(peer, |s| {
                    s.damped_until = Some(SystemTime::now() + hold);
                    s.dampings += 1;
                });
            }
            Damping::Held(hold) => {
                self.update_peer(peer, |s| s.damped_until = Some(SystemTime::now() + hold));
            }
        }
    }

    /// Whether `peer`'s `datachanged` is held because it is damped: then one poll is
    /// scheduled for its release, which takes every change held meanwhile. A peer whose
    /// damping ended is released here (logged once).
    pub fn hold_if_damped(self: &Arc<Self>, peer: &str) -> bool {
        let cfg = self.damping_config();
        let now = tokio::time::Instant::now();
        let Some(wait) = self.routes.damped(peer, now, &cfg) else {
            self.note_undamped(peer);
            return false;
        };
        // The held changes are taken every `damping_take_every` while the damping lasts:
        // a busy peer is polled at that pace, and its last change is never held for the
        // whole decay of its penalty.
        let take_every = self.config().limits.damping_take_every;
        let wait = if take_every.is_zero() {
            wait
        } else {
            wait.min(take_every)
        };
        if self.routes.hold(peer) {
            tracing::debug!(%peer, ?wait, "damped peer's datachanged held");
            let (node, p) = (self.clone(), peer.to_owned());
            let token = self.token.clone();
            self.tracker.spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = token.cancelled() => return,
                }
                node.routes.release_hold(&p);
                node.poll_notifier(&p).notify_one();
                // The damping mark stays until the penalty has decayed: cleared then, even
                // when no `datachanged` comes to look.
                loop {
                    let now = tokio::time::Instant::now();
                    let Some(left) = node.routes.damped(&p, now, &node.damping_config()) else {
                        break;
                    };
                    tokio::select! {
                        () = tokio::time::sleep(left.max(Duration::from_millis(10))) => {}
                        () = token.cancelled() => return,
                    }
                }
                node.note_undamped(&p);
            });
        }
        true
    }

    /// Clears `peer`'s damping mark once its damping has ended, logging it once.
    fn note_undamped(&self, peer: &str) {
        let mut was = false;
        self.update_peer(peer, |s| was = s.damped_until.take().is_some());
        if was {
            tracing::info!(%peer, "peer no longer damped");
        }
    }

    /// Withdraws the passed-on routes `peer` no longer offers (those not in `still`, the
    /// datasets of its newest answer): a dataset whose route the table held leaves it, and
    /// the peer with the next best route is polled at once. The table writes run off the
    /// async workers.
    pub async fn withdraw_routes(self: &Arc<Self>, peer: &str, still: BTreeSet<Dsi>) {
        let withdrawn = self.routes.withdraw(peer, &still);
        if withdrawn.is_empty() {
            return;
        }
        let (node, p) = (self.clone(), peer.to_owned());
        let gone = withdrawn.clone();
        let removed = crate::sys::net::spawn_blocking(move || {
            let mut removed = Vec::new();
            for w in gone.iter().filter(|w| w.was_chosen) {
                let held = node
                    .table
                    .peer_meta(&w.origin)
                    .is_some_and(|m| !m.path.is_empty() && m.via.as_deref() == Some(&p));
                if held {
                    node.imported.lock().remove(&w.origin);
                    if node.table.remove(&w.origin) {
                        removed.push(w.origin.clone());
                    }
                }
            }
            removed
        })
        .await
        .unwrap_or_default();
        if !removed.is_empty() {
            tracing::info!(%peer, datasets = removed.len(), "passed-on routes withdrawn");
            self.forget_hints(&removed);
            self.note_table_change();
            self.outbound.request_for(&removed);
        }
        for w in withdrawn {
            if let Some(next) = w.next {
                self.poll_notifier(&next).notify_one();
            }
        }
    }
}
