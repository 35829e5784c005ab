//! Deltas from polled peers, taken at the cost of the change (PROTOCOL.md "Hint deltas",
//! "Applied by the head").
//!
//! A delta normally applies to the hint held: the spool file is read and parsed, the delta
//! applied, the result imported and spooled ([`Node::rebuild_from_delta`]); all of it costs
//! the hint's size. Once a peer's delta has been taken so, the node keeps the resulting
//! hint's head ([`HintHead`]: URL, header, digest; the weightlists stay in the table), and
//! the next delta takes the short way ([`Node::take_delta_by_head`]):
//!
//! * the old counts of the values it changes come from the routing table
//!   ([`RoutingTable::held_counts`](hints::table::RoutingTable::held_counts));
//! * the delta's result digest is checked from the head's digest, less the old entries'
//!   shares and plus the new ones' (the digest is a sum): an old count that was not the
//!   hint's own (the table sums values that fold alike) fails the check, and the delta
//!   then takes the long way;
//! * the table applies it in place, given the new header alone;
//! * the spool appends the delta to the peer's journal ([`Spool::append_delta`]), and
//!   writes the hint whole again only once the journal outgrows it.
//!
//! A delta whose result is signed (under a policy that checks signatures) takes the long
//! way: a signature covers the whole hint, so only the whole hint verifies it.

use std::sync::Arc;
use std::time::SystemTime;

use hints::delta::{HintDelta, HintHead};
use hints::table::{ImportError, ListChanges};

use crate::model::config::soif_limits;
use crate::model::trust::signature::Verdict;
use crate::pipeline::import::{InPlace, QueueError};
use crate::store::heads::HeldHead;

use super::*;

/// A journal is folded into its spool file once it holds more than the file, or this.
const JOURNAL_MIN_FOLD: u64 = 256 << 10;

/// What the short way made of a delta, before the import.
struct ByHead {
    head: HintHead,
    header: hints::hint::CipHint,
    changes: Vec<ListChanges>,
    verdict: Verdict,
    imported: u64,
}

impl Node {
    /// The head kept for `peer`'s `dsi`, if any.
    fn held_head(&self, peer: &str, dsi: &Dsi) -> Option<Arc<HeldHead>> {
        self.heads.get(peer, dsi)
    }

    /// Forgets the head kept for `peer`'s `dsi` (its hint came whole, or went).
    pub(super) fn forget_head(&self, peer: &str, dsi: &Dsi) {
        self.heads.forget(peer, dsi);
    }

    /// Forgets every head kept for `dsi` (the dataset left the table).
    pub(super) fn forget_dataset_heads(&self, dsi: &Dsi) {
        self.heads.forget_dataset(dsi);
    }

    /// Notes the head of the hint `peer`'s `dsi` now holds, after a delta was taken, with
    /// the digest the import queue holds it under (read without waiting for a table
    /// write under way).
    fn keep_head(&self, peer: &str, dsi: &Dsi, head: HintHead) {
        let Some(imported) = self.imported.get(dsi) else {
            return;
        };
        self.heads.keep(peer, dsi, HeldHead { head, imported });
    }

    /// Takes a delta from `peer` the short way (see the module doc). `Ok(true)`: applied
    /// in place and journalled; `Ok(false)`: it must take the long way (no head kept,
    /// another base, old counts not the hint's, signed, or the table no longer holds the
    /// base), nothing changed.
    ///
    /// # Errors
    /// The table's refusal of the change (a count above the total, a limit), as the long
    /// way would refuse it.
    pub(super) async fn take_delta_by_head(
        &self,
        peer: &str,
        obj: &IndexObject,
    ) -> Result<bool, Rejection> {
        let dsi = obj.dsi.clone();
        let Some(held) = self.held_head(peer, &dsi) else {
            return Ok(false);
        };
        if self.bindings.get(peer).is_none_or(|b| b.dsi != dsi) {
            return Ok(false);
        }
        let config = self.config();
        let limits = soif_limits(&config);
        let (trust, last, skew) = self.signature_policy(&config, peer);
        let (table, hasher) = (self.table.clone(), self.payload_hasher.clone());
        let (payload, base_uris, description) = (
            obj.payload.clone(),
            obj.base_uris.clone(),
            obj.dsi_description.clone(),
        );
        let (d, uris, desc) = (dsi.clone(), base_uris.clone(), description.clone());
        let base = held.imported;
        let made = crate::sys::net::spawn_blocking(move || -> Option<ByHead> {
            let objects = cip_proto::soif::parse_all(payload, limits).ok()?;
            let [o] = objects.as_slice() else {
                return None;
            };
            let delta = HintDelta::from_soif(o).ok()?;
            if delta.base != held.head.digest {
                return None;
            }
            // Read in the order `apply_to_head` asks them: list by list, entry by entry.
            let wanted = delta
                .lists
                .iter()
                .flat_map(|(s, es)| es.iter().map(move |e| (s, &e.value[..])));
            let mut counts = table.held_counts(&d, wanted)?.into_iter();
            let (head, header, changes) = delta
                .apply_to_head(&held.head, |_, _| counts.next().unwrap_or(0))
                .ok()?;
            let verdict = crate::model::trust::signature::check(
                &header,
                &trust,
                last,
                SystemTime::now(),
                skew,
            )
            .ok()?;
            if !matches!(verdict, Verdict::Unsigned | Verdict::Ignored) {
                return None;
            }
            let imported = hasher.hash_one((head.digest, &uris, &desc, "delta"));
            Some(ByHead {
                head,
                header,
                changes,
                verdict,
                imported,
            })
        })
        .await
        .ok()
        .flatten();
        let Some(made) = made else {
            return Ok(false);
        };
        let received = SystemTime::now();
        let objects = made.header.total_object_count;
        let meta =
            super::accept::received_meta(&config, peer, &dsi, &base_uris, &description, received);
        let vouch = self.vouch(peer, &dsi);
        let in_place = InPlace {
            changes: made.changes,
            base,
            header_only: true,
        };
        match self
            .importer
            .import(
                meta,
                made.header,
                made.imported,
                Some(vouch),
                Some(in_place),
            )
            .await
        {
            Ok(_) => {}
            Err(QueueError::Refused(ImportError::NeedsWhole(_))) => return Ok(false),
            Err(QueueError::Refused(r)) => return Err(Rejection::Refused(r)),
            Err(other) => return Err(Rejection::Storage(other.to_string())),
        }
        if self.bindings.get(peer).is_none_or(|b| b.dsi != dsi) {
            tracing::info!(%peer, %dsi, "binding ended during the import; its hint dropped");
            self.drop_dataset(&dsi);
            return Err(Rejection::Storage(QueueError::Unvouched.to_string()));
        }
        Metrics::inc(&self.metrics.deltas_in_place);
        Metrics::inc(&self.metrics.deltas_by_head);
        self.trust.accepted(peer, &made.verdict);
        // The digest it was imported under is the one given: no lock to wait on.
        self.heads.keep(
            peer,
            &dsi,
            HeldHead {
                head: made.head,
                imported: made.imported,
            },
        );
        self.journal_delta(peer, &dsi, obj.payload.clone(), limits)
            .await;
        self.update_peer(peer, |s| {
            s.hint_received = Some(received);
            s.hint_objects = Some(objects);
        });
        self.note_table_change();
        Ok(true)
    }

    /// Appends `delta` to `peer`'s spool journal for `dsi`, and folds the journal into the
    /// spool file once it outgrows it. Off the async workers. On failure the head is
    /// dropped: the table holds the hint, and the next delta takes the long way.
    async fn journal_delta(
        &self,
        peer: &str,
        dsi: &Dsi,
        delta: Bytes,
        limits: cip_proto::soif::Limits,
    ) {
        let spool = self.spool.clone();
        let (p, d) = (peer.to_owned(), dsi.clone());
        let done = crate::sys::net::spawn_blocking(move || -> Result<(), String> {
            spool
                .append_delta(&p, &d, &delta)
                .map_err(|e| e.to_string())?;
            spool.fold(&p, &d, JOURNAL_MIN_FOLD, limits)?;
            Ok(())
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        if let Err(e) = done {
            // The next delta takes the long way: from a spool that works, or refused and
            // followed by the whole hint, which is spooled anew.
            tracing::warn!(%peer, %dsi, error = %e, "cannot journal a delta in the spool; the next change takes the long way");
            self.forget_head(peer, dsi);
        }
    }

    /// The whole hint a delta from `peer` for dataset `dsi` makes of the one spooled from
    /// it (the file and its journal), as SOIF bytes, with the entries it changes, the
    /// digest the import queue holds the base under (for the table to apply it in place),
    /// and the result's head.
    ///
    /// # Errors
    /// Why it cannot be applied: no hint held, the delta unreadable, or not for the hint
    /// held (a delta missed, or the hint held changed since), or not making what it says.
    pub(super) async fn rebuild_from_delta(
        &self,
        peer: &str,
        dsi: &Dsi,
        delta: Bytes,
    ) -> Result<(Bytes, InPlace, Option<HintHead>), String> {
        let limits = soif_limits(&self.config());
        let spool = self.spool.clone();
        let hasher = self.payload_hasher.clone();
        let kept = self.held_head(peer, dsi);
        let (peer, dsi) = (peer.to_owned(), dsi.clone());
        crate::sys::net::spawn_blocking(move || {
            let stored = spool
                .load_hint(&peer, &dsi, limits)
                .map_err(|e| format!("no hint of {dsi} held from {peer}: {e}"))?;
            if let Some(why) = &stored.partial {
                tracing::warn!(%peer, %dsi, error = %why, applied = stored.applied, "spool journal read in part");
            }
            let (held, base) = (&stored.entry, &stored.hint);
            let objects = cip_proto::soif::parse_all(delta, limits)
                .map_err(|e| format!("delta is not SOIF: {e}"))?;
            let [obj] = objects.as_slice() else {
                return Err(format!(
                    "expected one delta object, found {}",
                    objects.len()
                ));
            };
            let delta = HintDelta::from_soif(obj).map_err(|e| e.to_string())?;
            // As `import_object` digests what it imports; a hint taken by its head is held
            // under the digest noted with the head.
            let base_digest = match &kept {
                Some(k) if k.head.digest == delta.base && stored.partial.is_none() => k.imported,
                _ => hasher.hash_one((&held.payload[..], &held.base_uris, &held.description)),
            };
            let (made, changes) = delta.apply_changes(base).map_err(|e| e.to_string())?;
            let head = HintHead::of(&made, delta.result);
            let whole = made
                .try_to_soif()
                .map(|o| Bytes::from(o.to_bytes()))
                .map_err(|e| e.to_string())?;
            Ok((
                whole,
                InPlace {
                    changes,
                    base: base_digest,
                    header_only: false,
                },
                head,
            ))
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// After a delta taken the long way was imported: keeps the result's head, so that the
    /// next delta takes the short way.
    /// Off the async workers: the digest is read under the import thread's lock.
    pub(super) async fn took_delta(
        self: &Arc<Self>,
        peer: &str,
        dsi: &Dsi,
        head: Option<HintHead>,
    ) {
        let Some(head) = head else {
            self.forget_head(peer, dsi);
            return;
        };
        let (node, peer, dsi) = (self.clone(), peer.to_owned(), dsi.clone());
        let kept = crate::sys::net::spawn_blocking(move || node.keep_head(&peer, &dsi, head)).await;
        if let Err(e) = kept {
            tracing::warn!(error = %e, "cannot keep a hint's head; its next delta takes the long way");
        }
    }
}
