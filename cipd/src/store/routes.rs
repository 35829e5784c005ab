//! The exchange state of the mesh's routes: what each poller asked for and last received
//! from this node (BGP's adj-rib-out), and which peers offer a passed-on dataset by which
//! route and which of them the table holds (the adj-rib-in's choice).
//!
//! A poller names the datasets it wants kept apart (`separate` on its poll); this node
//! leaves them out of its aggregate and sends each as an object of its own with its
//! `Path`. What a node asks its own peers to keep apart is everything its pollers asked
//! for, the pollers themselves and its direct peers ([`Routes::wanted_apart`]): so a
//! dataset that can come back to a node by a cycle, or that a node also reaches directly,
//! never hides inside another peer's aggregate. Of the routes offered for one passed-on
//! dataset the shortest is kept, ties to the smallest peer name; a peer's own hint
//! (length 1) always wins over a passed-on one. PROTOCOL.md, "Routes in a mesh with
//! cycles", gives the reasoning.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use cip_proto::Dsi;

use crate::sys::lock;

/// What one poller asked for and last received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollerView {
    /// The datasets it asked for apart for its own pollers' sake: this node asks its
    /// peers for them too.
    pub separate: BTreeSet<Dsi>,
    /// The datasets it takes directly (the peers it polls): left out of its answer
    /// altogether; this hop only.
    pub apart: BTreeSet<Dsi>,
    /// The version (content digest) of the answer it last received, when known.
    pub sent: Option<u64>,
    /// A `datachanged` reached it after its last answer: it polls next, and that poll
    /// takes every change made until then (no further notice is needed).
    pub told: bool,
    /// Answers it received, counted (a notice's epoch: see [`Routes::note_told`]).
    pub answers: u64,
    /// The first object (our aggregate) of the answer it last received, whole, with its
    /// [`hints::delta::digest`]: what the journal's next changeset for it starts from
    /// ([`crate::transport::DELTA_PARAM`]). Shared with the stored hint when it is the
    /// shared payload.
    pub sent_first: Option<(bytes::Bytes, u64)>,
    /// The versions of its last answers with their first objects' digests, newest last
    /// ([`SENT_HISTORY`] at most): a poller that missed an answer names an older version,
    /// whose hint the journal can still bring up to date.
    pub sent_digests: std::collections::VecDeque<(u64, u64)>,
}

/// Answers remembered per poller ([`PollerView::sent_digests`]).
pub const SENT_HISTORY: usize = 4;

/// The answer to a passed-on dataset offered by a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// The route is the best: import it.
    Take,
    /// Another route is as good or better. `wake` names the peer whose route is now the
    /// best but whose data the table does not hold: poll it so that it is delivered.
    Keep {
        /// The peer to poll now, if any.
        wake: Option<String>,
    },
}

/// A passed-on dataset whose route was withdrawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withdrawn {
    /// The dataset.
    pub origin: Dsi,
    /// Whether the table held this route (and must drop it).
    pub was_chosen: bool,
    /// The peer with the best remaining route, to poll now.
    pub next: Option<String>,
}

/// RFC 2439's damping, applied to a peer whose answers change too often: each changed
/// answer adds 1 to its penalty, which halves every `half_life`; above `suppress` the peer
/// is damped (its `datachanged` no longer makes us poll it at once: its changes are held
/// and taken together, once the penalty has decayed to `reuse`), and the penalty never
/// rises past what decays to `reuse` within `max_hold`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DampingConfig {
    /// The penalty's half-life; zero turns damping off.
    pub half_life: Duration,
    /// The penalty above which a peer is damped.
    pub suppress: f64,
    /// The penalty below which a damped peer is released.
    pub reuse: f64,
    /// The longest a peer's changes are held.
    pub max_hold: Duration,
}

impl DampingConfig {
    fn ceiling(&self) -> f64 {
        let halvings = self.max_hold.as_secs_f64() / self.half_life.as_secs_f64().max(1e-9);
        self.reuse * 2f64.powf(halvings.min(60.0))
    }

    fn decayed(&self, value: f64, since: Duration) -> f64 {
        if self.half_life.is_zero() {
            return 0.0;
        }
        value * 0.5f64.powf(since.as_secs_f64() / self.half_life.as_secs_f64())
    }

    /// How long a penalty of `value` takes to decay to `reuse`.
    fn until_reuse(&self, value: f64) -> Duration {
        if value <= self.reuse || self.half_life.is_zero() {
            return Duration::ZERO;
        }
        let secs = self.half_life.as_secs_f64() * (value / self.reuse).log2();
        Duration::from_secs_f64(secs.max(0.0)).min(self.max_hold)
    }
}

/// A peer's damping penalty.
#[derive(Debug, Clone, Copy)]
struct Penalty {
    value: f64,
    at: Instant,
    damped: bool,
    /// A `datachanged` is held: one poll is due at release.
    held: bool,
}

/// What noting a change did to a peer's damping.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Damping {
    /// The peer is not damped.
    Free,
    /// This change damped the peer, for this long at least.
    Started(Duration),
    /// The peer was damped already; its changes are held this long still.
    Held(Duration),
}

#[derive(Debug, Default)]
struct Inner {
    pollers: HashMap<Dsi, PollerView>,
    /// Per passed-on dataset, per peer offering it, the route's length.
    offers: BTreeMap<Dsi, BTreeMap<String, usize>>,
    /// Per passed-on dataset, the peer whose route the table holds.
    chosen: HashMap<Dsi, String>,
    /// Per polled peer, the version of the last answer it sent us.
    received: HashMap<String, u64>,
    /// Per polled peer, its damping penalty.
    penalties: HashMap<String, Penalty>,
    /// Per poller, the answers being made for it now.
    answering: HashMap<Dsi, usize>,
    /// The pollers a `datachanged` is on its way to.
    telling: BTreeSet<Dsi>,
}

/// The routes' exchange state; one per node, shared by the poll answers and the pollers.
#[derive(Debug, Default)]
pub struct Routes {
    inner: Mutex<Inner>,
    /// Woken whenever an answer is finished ([`Routes::settled`] waits on it).
    finished: Notify,
}

/// A `datachanged` on its way to a poller ([`Routes::telling`]); dropped when it ends.
#[derive(Debug)]
pub struct Telling<'a> {
    routes: &'a Routes,
    poller: Dsi,
}

impl Drop for Telling<'_> {
    fn drop(&mut self) {
        lock(&self.routes.inner).telling.remove(&self.poller);
    }
}

/// An answer to a poller in progress ([`Routes::answering`]); it ends when dropped.
#[derive(Debug)]
pub struct Answering<'a> {
    routes: &'a Routes,
    poller: Dsi,
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        {
            let mut g = lock(&self.routes.inner);
            if let Some(n) = g.answering.get_mut(&self.poller) {
                *n -= 1;
                if *n == 0 {
                    g.answering.remove(&self.poller);
                }
            }
        }
        self.routes.finished.notify_waiters();
    }
}

fn best(offers: &BTreeMap<String, usize>) -> Option<(&String, usize)> {
    // BTreeMap order: among equal lengths the smallest peer name comes first.
    offers
        .iter()
        .min_by_key(|(_, len)| **len)
        .map(|(v, l)| (v, *l))
}

impl Routes {
    /// Records what `poller` asked apart on its poll; true when what it asked for its
    /// pollers' sake changed (this node's own requests to its peers may then change: see
    /// [`Routes::wanted_apart`]).
    pub fn note_poll(&self, poller: &Dsi, separate: BTreeSet<Dsi>, apart: BTreeSet<Dsi>) -> bool {
        let mut g = lock(&self.inner);
        let view = g.pollers.entry(poller.clone()).or_default();
        view.apart = apart;
        if view.separate == separate {
            return false;
        }
        view.separate = separate;
        true
    }

    /// What `poller` asked apart on its last poll (empty when it never polled).
    pub fn view(&self, poller: &Dsi) -> PollerView {
        lock(&self.inner)
            .pollers
            .get(poller)
            .cloned()
            .unwrap_or_default()
    }

    /// Records the version of the answer `poller` received, and its first object whole with
    /// its digest.
    pub fn note_sent(&self, poller: &Dsi, version: u64, first: Option<(bytes::Bytes, u64)>) {
        let mut g = lock(&self.inner);
        let view = g.pollers.entry(poller.clone()).or_default();
        view.sent = Some(version);
        if let Some((_, digest)) = &first {
            view.sent_digests.retain(|(v, _)| *v != version);
            if view.sent_digests.len() == SENT_HISTORY {
                view.sent_digests.pop_front();
            }
            view.sent_digests.push_back((version, *digest));
        }
        view.sent_first = first;
        view.told = false;
        view.answers += 1;
    }

    /// What a delta to `poller`, which holds the answer of version `have`, starts from: the
    /// digest of that answer's first object, and the first object we last sent it with its
    /// digest (from which a changeset to the new one can be made). `None` when we do not
    /// remember that answer.
    pub fn delta_base(
        &self,
        poller: &Dsi,
        have: u64,
    ) -> Option<(u64, Option<(bytes::Bytes, u64)>)> {
        let g = lock(&self.inner);
        let view = g.pollers.get(poller)?;
        let (_, base) = view.sent_digests.iter().rev().find(|(v, _)| *v == have)?;
        Some((*base, view.sent_first.clone()))
    }

    /// Records that a `datachanged` sent when `poller` had received `epoch` answers
    /// ([`PollerView::answers`]) reached it. When an answer was made meanwhile it may
    /// have been asked before the notice arrived, so nothing is recorded.
    pub fn note_told(&self, poller: &Dsi, epoch: u64) {
        let mut g = lock(&self.inner);
        let view = g.pollers.entry(poller.clone()).or_default();
        if view.answers == epoch {
            view.told = true;
        }
    }

    /// Marks a `datachanged` on its way to `poller` until the returned guard drops; `None`
    /// when one is already (a notice ahead of a build then adds nothing: the poll that
    /// follows the first takes every change made before it).
    pub fn telling(&self, poller: &Dsi) -> Option<Telling<'_>> {
        lock(&self.inner)
            .telling
            .insert(poller.clone())
            .then(|| Telling {
                routes: self,
                poller: poller.clone(),
            })
    }

    /// Marks an answer to `poller` in progress until the returned guard drops.
    pub fn answering(&self, poller: &Dsi) -> Answering<'_> {
        *lock(&self.inner)
            .answering
            .entry(poller.clone())
            .or_default() += 1;
        Answering {
            routes: self,
            poller: poller.clone(),
        }
    }

    /// Waits (at most `within`) until no answer to `poller` is in progress: what it was
    /// last sent is then what [`Routes::view`] says.
    pub async fn settled(&self, poller: &Dsi, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let finished = self.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            if !lock(&self.inner).answering.contains_key(poller) {
                return;
            }
            if tokio::time::timeout_at(deadline, finished).await.is_err() {
                return;
            }
        }
    }

    /// The datasets to ask every peer to keep apart for our pollers' sake (and so to be
    /// asked on by them): each poller and what each asked apart for its own pollers'
    /// sake, never `own`. A node also asks apart the peers it polls, for itself only
    /// (`apart` on its polls), which is not passed on: a dataset reached directly never
    /// hides inside another peer's aggregate, and a hub's leaves still travel inside the
    /// hub's.
    pub fn wanted_apart(&self, own: &Dsi) -> BTreeSet<Dsi> {
        let g = lock(&self.inner);
        let mut out = BTreeSet::new();
        for (poller, view) in &g.pollers {
            out.insert(poller.clone());
            out.extend(view.separate.iter().cloned());
        }
        out.remove(own);
        out
    }

    /// Records the version of the answer `peer` sent us last.
    pub fn note_received(&self, peer: &str, version: Option<u64>) {
        let mut g = lock(&self.inner);
        match version {
            Some(v) => g.received.insert(peer.to_owned(), v),
            None => g.received.remove(peer),
        };
    }

    /// The version of the last answer `peer` sent us, to ask whether it changed.
    pub fn received(&self, peer: &str) -> Option<u64> {
        lock(&self.inner).received.get(peer).copied()
    }

    /// Records that `via` offers `origin` by a route of `len` hops and says whether to
    /// import it. `direct` is true when the table holds `origin`'s own hint from a peer
    /// of ours, which always wins.
    pub fn offer(&self, origin: &Dsi, via: &str, len: usize, direct: bool) -> Offer {
        let mut g = lock(&self.inner);
        g.offers
            .entry(origin.clone())
            .or_default()
            .insert(via.to_owned(), len);
        if direct {
            g.chosen.remove(origin);
            return Offer::Keep { wake: None };
        }
        let Some((best_via, _)) = g.offers.get(origin).and_then(best) else {
            return Offer::Keep { wake: None };
        };
        let best_via = best_via.clone();
        if best_via == via {
            g.chosen.insert(origin.clone(), via.to_owned());
            return Offer::Take;
        }
        let holds_best = g.chosen.get(origin) == Some(&best_via);
        Offer::Keep {
            wake: (!holds_best).then_some(best_via),
        }
    }

    /// Withdraws every route `via` offered that is not in `still` (its newest answer);
    /// returns each dataset withdrawn, whether the table held that route, and the peer
    /// with the best remaining route.
    pub fn withdraw(&self, via: &str, still: &BTreeSet<Dsi>) -> Vec<Withdrawn> {
        let mut g = lock(&self.inner);
        let gone: Vec<Dsi> = g
            .offers
            .iter()
            .filter(|(o, by)| by.contains_key(via) && !still.contains(*o))
            .map(|(o, _)| o.clone())
            .collect();
        let mut out = Vec::new();
        for origin in gone {
            let Some(by) = g.offers.get_mut(&origin) else {
                continue;
            };
            by.remove(via);
            let next = best(by).map(|(v, _)| v.clone());
            if by.is_empty() {
                g.offers.remove(&origin);
            }
            let was_chosen = g.chosen.get(&origin).is_some_and(|v| v == via);
            if was_chosen {
                g.chosen.remove(&origin);
            }
            out.push(Withdrawn {
                origin,
                was_chosen,
                next,
            });
        }
        out
    }

    /// The datasets whose passed-on route through `via` the table holds.
    pub fn chosen_via(&self, via: &str) -> Vec<Dsi> {
        lock(&self.inner)
            .chosen
            .iter()
            .filter(|(_, v)| v.as_str() == via)
            .map(|(o, _)| o.clone())
            .collect()
    }

    /// The peer whose route to `origin` the table holds, if a passed-on one.
    pub fn chosen(&self, origin: &Dsi) -> Option<String> {
        lock(&self.inner).chosen.get(origin).cloned()
    }

    /// Notes that `peer`'s answer changed at `now`: its penalty grows by one (RFC 2439).
    pub fn note_change(&self, peer: &str, now: Instant, cfg: &DampingConfig) -> Damping {
        if cfg.half_life.is_zero() {
            return Damping::Free;
        }
        let mut g = lock(&self.inner);
        let p = g.penalties.entry(peer.to_owned()).or_insert(Penalty {
            value: 0.0,
            at: now,
            damped: false,
            held: false,
        });
        p.value =
            (cfg.decayed(p.value, now.saturating_duration_since(p.at)) + 1.0).min(cfg.ceiling());
        p.at = now;
        if p.damped {
            return Damping::Held(cfg.until_reuse(p.value));
        }
        if p.value > cfg.suppress {
            p.damped = true;
            return Damping::Started(cfg.until_reuse(p.value));
        }
        Damping::Free
    }

    /// Whether `peer` is damped at `now`, and if so for how long still; a peer whose
    /// penalty has decayed to `reuse` is released here.
    pub fn damped(&self, peer: &str, now: Instant, cfg: &DampingConfig) -> Option<Duration> {
        let mut g = lock(&self.inner);
        let p = g.penalties.get_mut(peer)?;
        if !p.damped {
            return None;
        }
        let value = cfg.decayed(p.value, now.saturating_duration_since(p.at));
        if value <= cfg.reuse || cfg.half_life.is_zero() {
            p.damped = false;
            return None;
        }
        Some(cfg.until_reuse(value))
    }

    /// Marks a `datachanged` from damped `peer` as held; true when none was held yet (the
    /// caller then schedules the one poll that takes the held changes).
    pub fn hold(&self, peer: &str) -> bool {
        let mut g = lock(&self.inner);
        g.penalties
            .get_mut(peer)
            .is_some_and(|p| !std::mem::replace(&mut p.held, true))
    }

    /// Clears `peer`'s held `datachanged` (its poll is being made).
    pub fn release_hold(&self, peer: &str) {
        if let Some(p) = lock(&self.inner).penalties.get_mut(peer) {
            p.held = false;
        }
    }

    /// Forgets a poller (a reload removed it).
    pub fn forget_poller(&self, poller: &Dsi) {
        lock(&self.inner).pollers.remove(poller);
    }
}

/// The version of an answer, as a poll's `have` parameter and a `201`'s comment carry it.
pub fn version_text(v: u64) -> String {
    format!("{v:016x}")
}

/// Reads a version written by [`version_text`].
pub fn parse_version(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Dsi {
        Dsi::new(s).unwrap()
    }

    #[test]
    fn a_notice_counts_as_told_only_when_no_answer_was_made_meanwhile() {
        let r = Routes::default();
        let p = d("1.2");
        assert!(!r.view(&p).told);
        // Told while it had no answer: recorded.
        r.note_told(&p, 0);
        assert!(r.view(&p).told);
        // Its poll's answer clears it and counts.
        r.note_sent(&p, 7, None);
        let v = r.view(&p);
        assert!(!v.told);
        assert_eq!(v.answers, 1);
        // A notice sent at epoch 1, while an answer was made: that answer may have been
        // asked before the notice arrived, so nothing is recorded.
        r.note_sent(&p, 8, None);
        r.note_told(&p, 1);
        assert!(!r.view(&p).told);
    }

    #[test]
    fn a_poller_s_last_answers_name_the_hints_a_delta_starts_from() {
        let r = Routes::default();
        let p = d("1.2");
        assert_eq!(r.delta_base(&p, 1), None);
        let first = |n: u8| Some((bytes::Bytes::from(vec![n]), 100 + u64::from(n)));
        for v in 1..=6u8 {
            r.note_sent(&p, u64::from(v), first(v));
        }
        // The newest SENT_HISTORY answers are remembered, each with its first object's digest;
        // the last one sent is the start of the next changeset.
        assert_eq!(r.delta_base(&p, 6), Some((106, first(6))));
        assert_eq!(r.delta_base(&p, 3), Some((103, first(6))));
        assert_eq!(r.delta_base(&p, 2), None, "pushed out");
        // An answer without our aggregate is not remembered as a base.
        r.note_sent(&p, 7, None);
        assert_eq!(r.delta_base(&p, 7), None);
        assert_eq!(r.delta_base(&p, 6), Some((106, None)));
    }

    #[test]
    fn one_notice_at_a_time_per_poller() {
        let r = Routes::default();
        let (p, q) = (d("1.2"), d("1.3"));
        let first = r.telling(&p).expect("nothing on its way");
        assert!(r.telling(&p).is_none());
        assert!(r.telling(&q).is_some(), "another poller is apart");
        drop(first);
        assert!(r.telling(&p).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn settled_waits_for_answers_in_progress_and_no_longer_than_asked() {
        let r = std::sync::Arc::new(Routes::default());
        let p = d("1.2");
        // Nothing in progress: at once.
        let t0 = Instant::now();
        r.settled(&p, Duration::from_secs(5)).await;
        assert_eq!(t0.elapsed(), Duration::ZERO);
        // An answer finished after 2 s: waited for.
        let (r2, p2) = (r.clone(), p.clone());
        let answer = tokio::spawn(async move {
            let _g = r2.answering(&p2);
            tokio::time::sleep(Duration::from_secs(2)).await;
            r2.note_sent(&p2, 9, None);
        });
        tokio::task::yield_now().await;
        r.settled(&p, Duration::from_secs(5)).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
        assert_eq!(r.view(&p).sent, Some(9));
        answer.await.unwrap();
        // One that never ends: at most `within`.
        let g = r.answering(&p);
        r.settled(&p, Duration::from_secs(1)).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(3));
        drop(g);
    }

    #[test]
    fn the_shortest_route_wins_ties_to_the_smallest_peer() {
        let r = Routes::default();
        let o = d("1.9");
        assert_eq!(r.offer(&o, "b", 3, false), Offer::Take);
        // A shorter route from another peer: taken.
        assert_eq!(r.offer(&o, "c", 2, false), Offer::Take);
        assert_eq!(r.chosen(&o).as_deref(), Some("c"));
        // b's again, still longer: kept out, nobody to wake (c's is held).
        assert_eq!(r.offer(&o, "b", 3, false), Offer::Keep { wake: None });
        // An equal route from a smaller name: it wins the tie, and is taken.
        assert_eq!(r.offer(&o, "a", 2, false), Offer::Take);
        // c's update now is not the best: kept out.
        assert_eq!(r.offer(&o, "c", 2, false), Offer::Keep { wake: None });
        // The dataset's own hint, from a peer of ours, wins over every passed-on route.
        assert_eq!(r.offer(&o, "a", 2, true), Offer::Keep { wake: None });
        assert_eq!(r.chosen(&o), None);
    }

    #[test]
    fn a_withdrawn_best_route_names_the_next_and_a_better_unheld_one_is_woken() {
        let r = Routes::default();
        let o = d("1.9");
        assert_eq!(r.offer(&o, "b", 3, false), Offer::Take);
        assert_eq!(r.offer(&o, "c", 4, false), Offer::Keep { wake: None });
        let w = r.withdraw("b", &BTreeSet::new());
        assert_eq!(
            w,
            vec![Withdrawn {
                origin: o.clone(),
                was_chosen: true,
                next: Some("c".into())
            }]
        );
        // b comes back shorter while c is not held: b's is taken at once.
        assert_eq!(r.offer(&o, "b", 2, false), Offer::Take);
        // A route kept in the answer is not withdrawn.
        let still: BTreeSet<Dsi> = [o.clone()].into();
        assert!(r.withdraw("b", &still).is_empty());
        // c's route is now the best of those left after b goes, but the table does not
        // hold it: c is woken when it offers a route that is not the best.
        r.withdraw("b", &BTreeSet::new());
        assert_eq!(
            r.offer(&o, "d", 5, false),
            Offer::Keep {
                wake: Some("c".into())
            }
        );
    }

    fn damping() -> DampingConfig {
        DampingConfig {
            half_life: Duration::from_secs(60),
            suppress: 4.0,
            reuse: 2.0,
            max_hold: Duration::from_secs(600),
        }
    }

    #[test]
    fn a_peer_that_changes_too_often_is_damped_then_released() {
        let r = Routes::default();
        let cfg = damping();
        let t0 = Instant::now();
        for _ in 0..4 {
            assert_eq!(r.note_change("p", t0, &cfg), Damping::Free);
        }
        // The fifth change in a moment passes the threshold of 4.
        let Damping::Started(hold) = r.note_change("p", t0, &cfg) else {
            panic!("not damped");
        };
        // 5 decays to 2 in log2(2.5) half-lives: about 79 s.
        assert!((78..=80).contains(&hold.as_secs()), "{hold:?}");
        assert!(r.hold("p"));
        assert!(!r.hold("p"), "one held poll at a time");
        assert!(matches!(r.note_change("p", t0, &cfg), Damping::Held(_)));
        assert!(r.damped("p", t0 + Duration::from_secs(30), &cfg).is_some());
        // Long after, the penalty has decayed: released, and a change is free again.
        assert_eq!(r.damped("p", t0 + Duration::from_secs(200), &cfg), None);
        assert_eq!(
            r.note_change("p", t0 + Duration::from_secs(200), &cfg),
            Damping::Free
        );
        // Another peer is not touched; damping off damps nobody.
        assert_eq!(r.damped("q", t0, &cfg), None);
        let off = DampingConfig {
            half_life: Duration::ZERO,
            ..cfg
        };
        for _ in 0..100 {
            assert_eq!(r.note_change("q", t0, &off), Damping::Free);
        }
    }

    #[test]
    fn a_penalty_never_holds_changes_past_max_hold() {
        let r = Routes::default();
        let cfg = damping();
        let t0 = Instant::now();
        let mut last = Damping::Free;
        for _ in 0..100_000 {
            last = r.note_change("p", t0, &cfg);
        }
        let Damping::Held(hold) = last else {
            panic!("{last:?}");
        };
        assert!(hold <= cfg.max_hold, "{hold:?}");
        assert_eq!(
            r.damped("p", t0 + cfg.max_hold + Duration::from_secs(1), &cfg),
            None
        );
    }

    #[test]
    fn wanted_apart_is_pollers_their_asks_and_direct_peers_never_ourselves() {
        let r = Routes::default();
        assert!(r.note_poll(&d("1.2"), [d("1.3"), d("1.1")].into(), [d("1.5")].into()));
        // What it asks apart for itself alone changes nothing upstream.
        assert!(!r.note_poll(&d("1.2"), [d("1.3"), d("1.1")].into(), [d("1.6")].into()));
        assert_eq!(r.view(&d("1.2")).apart, [d("1.6")].into());
        let want = r.wanted_apart(&d("1.1"));
        assert_eq!(want, [d("1.2"), d("1.3")].into());
        r.note_sent(&d("1.2"), 7, None);
        assert_eq!(r.view(&d("1.2")).sent, Some(7));
        assert_eq!(parse_version(&version_text(0xabc)), Some(0xabc));
    }
}
