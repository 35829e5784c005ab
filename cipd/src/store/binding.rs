//! Peer identity: which dataset (DSI) each configured peer may deliver index objects for.
//!
//! A peer is bound to exactly one DSI:
//! * a peer configured with `dsi` is bound to it from the start;
//! * a peer without one is bound to the DSI of its first accepted index object, and stays
//!   bound (across restarts, through its spool entry) until an operator says otherwise:
//!   `cipctl drop-peer <dsi>` forgets the binding with the hint, and a reload that
//!   configures the peer's `dsi` replaces it.
//!
//! An index object is refused, before it touches the table or the spool, when it names
//! this node's own DSI, a DSI other than the one its peer is bound to, or a DSI another
//! peer is bound to. An aggregating peer's objects carry the aggregating node's own DSI
//! (the datasets it summarizes are listed in its `Provenance`), so one DSI per peer holds
//! for middle nodes too.
//!
//! The spool is checked against the same rules at start ([`Bindings::admit_spooled`]): an
//! entry whose peer is gone, or whose DSI no longer matches its peer's binding, or that two
//! peers claim, is set aside and never loaded.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use cip_proto::Dsi;

use crate::model::config::{Config, PeerRole};
use crate::store::spool::SpoolEntry;
use crate::sys::lock;

/// How a peer came to be bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `dsi` in its `[[peer]]` section.
    Configured,
    /// Its first accepted index object (or its spool entry at start).
    Learned,
}

/// A peer's binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The DSI it may deliver.
    pub dsi: Dsi,
    /// Where the binding comes from.
    pub source: Source,
}

/// Why an index object does not belong to the peer that sent it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BindingError {
    /// It names this node's DSI.
    #[error("peer {peer} sent an index object for this node's own dsi {dsi}")]
    OwnDsi {
        /// The peer.
        peer: String,
        /// The DSI.
        dsi: Dsi,
    },
    /// The peer is bound to another DSI.
    #[error(
        "peer {peer} sent an index object for dsi {sent}, but it is bound to {bound} \
         ({how}); drop-peer or a reload changes that"
    )]
    NotItsDsi {
        /// The peer.
        peer: String,
        /// The DSI it sent.
        sent: Dsi,
        /// The DSI it is bound to.
        bound: Dsi,
        /// "configured" or "learned".
        how: &'static str,
    },
    /// Another peer is bound to that DSI.
    #[error("peer {peer} sent an index object for dsi {dsi}, which belongs to peer {owner}")]
    Taken {
        /// The peer.
        peer: String,
        /// The DSI it sent.
        dsi: Dsi,
        /// The peer bound to it.
        owner: String,
    },
}

/// The outcome of a successful [`Bindings::claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Claim {
    /// The peer was bound to that DSI already.
    Existing,
    /// The peer has just been bound to it; [`Bindings::release`] undoes that if the object
    /// is refused after all.
    New,
}

/// The bindings of every configured peer.
#[derive(Debug)]
pub struct Bindings {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    own: Dsi,
    by_peer: BTreeMap<String, Binding>,
    /// Configured peers whose binding may be learned (no `dsi`).
    open: Vec<String>,
}

impl Inner {
    fn owner(&self, dsi: &Dsi) -> Option<&str> {
        self.by_peer
            .iter()
            .find(|(_, b)| b.dsi == *dsi)
            .map(|(p, _)| p.as_str())
    }
}

fn delivers(p: &crate::model::config::PeerConfig) -> bool {
    p.has_role(PeerRole::Poll) || p.has_role(PeerRole::Pusher)
}

impl Bindings {
    /// The configured bindings of `config`.
    pub fn new(config: &Config) -> Self {
        let s = Self {
            inner: Mutex::new(Inner {
                own: config.node.dsi.clone(),
                by_peer: BTreeMap::new(),
                open: Vec::new(),
            }),
        };
        s.reconfigure(config);
        s
    }

    /// Applies a new configuration: configured bindings are replaced; a learned binding
    /// stays while its peer is configured without `dsi` and nobody else claims its DSI.
    /// Returns the bindings that ended, as `(peer, dsi)`.
    pub fn reconfigure(&self, config: &Config) -> Vec<(String, Dsi)> {
        let mut inner = lock(&self.inner);
        let old = std::mem::take(&mut inner.by_peer);
        inner.own = config.node.dsi.clone();
        inner.open.clear();
        for p in &config.peers {
            match &p.dsi {
                Some(d) => {
                    inner.by_peer.insert(
                        p.name.clone(),
                        Binding {
                            dsi: d.clone(),
                            source: Source::Configured,
                        },
                    );
                }
                None => inner.open.push(p.name.clone()),
            }
        }
        let mut ended = Vec::new();
        for (peer, b) in old {
            let keep = b.source == Source::Learned
                && inner.open.contains(&peer)
                && inner.owner(&b.dsi).is_none()
                && b.dsi != inner.own;
            if keep {
                inner.by_peer.insert(peer, b);
            } else if inner.by_peer.get(&peer).is_none_or(|now| now.dsi != b.dsi) {
                ended.push((peer, b.dsi));
            }
        }
        ended
    }

    /// The DSIs bound to those of `peers` that have a binding, read under one lock (every
    /// poll names the peers its node polls: not a lock and a binding copied per peer).
    pub fn dsis_of<'a>(&self, peers: impl IntoIterator<Item = &'a str>) -> Vec<Dsi> {
        let inner = lock(&self.inner);
        peers
            .into_iter()
            .filter_map(|p| inner.by_peer.get(p).map(|b| b.dsi.clone()))
            .collect()
    }

    /// The peer's binding, if it has one.
    pub fn get(&self, peer: &str) -> Option<Binding> {
        lock(&self.inner).by_peer.get(peer).cloned()
    }

    /// The peer bound to `dsi`.
    pub fn owner(&self, dsi: &Dsi) -> Option<String> {
        lock(&self.inner).owner(dsi).map(str::to_owned)
    }

    /// Checks that `peer` may deliver `dsi`, binding it when it has no binding yet.
    ///
    /// # Errors
    /// [`BindingError`] naming both sides.
    pub fn claim(&self, peer: &str, dsi: &Dsi) -> Result<Claim, BindingError> {
        let mut inner = lock(&self.inner);
        if *dsi == inner.own {
            return Err(BindingError::OwnDsi {
                peer: peer.to_owned(),
                dsi: dsi.clone(),
            });
        }
        if let Some(b) = inner.by_peer.get(peer) {
            if b.dsi == *dsi {
                return Ok(Claim::Existing);
            }
            return Err(BindingError::NotItsDsi {
                peer: peer.to_owned(),
                sent: dsi.clone(),
                bound: b.dsi.clone(),
                how: match b.source {
                    Source::Configured => "configured",
                    Source::Learned => "learned",
                },
            });
        }
        if let Some(owner) = inner.owner(dsi) {
            return Err(BindingError::Taken {
                peer: peer.to_owned(),
                dsi: dsi.clone(),
                owner: owner.to_owned(),
            });
        }
        inner.by_peer.insert(
            peer.to_owned(),
            Binding {
                dsi: dsi.clone(),
                source: Source::Learned,
            },
        );
        Ok(Claim::New)
    }

    /// Undoes a [`Claim::New`] of `peer` for `dsi`.
    pub fn release(&self, peer: &str, dsi: &Dsi) {
        let mut inner = lock(&self.inner);
        if inner
            .by_peer
            .get(peer)
            .is_some_and(|b| b.source == Source::Learned && b.dsi == *dsi)
        {
            inner.by_peer.remove(peer);
        }
    }

    /// Forgets the learned binding to `dsi` (`drop-peer`); returns its peer. Configured
    /// bindings stay.
    pub fn forget_dsi(&self, dsi: &Dsi) -> Option<String> {
        let mut inner = lock(&self.inner);
        let peer = inner
            .by_peer
            .iter()
            .find(|(_, b)| b.dsi == *dsi && b.source == Source::Learned)
            .map(|(p, _)| p.clone())?;
        inner.by_peer.remove(&peer);
        Some(peer)
    }

    /// Splits spooled entries into those that may be loaded and those to set aside (with
    /// the reason), learning the bindings of peers without a configured DSI from theirs.
    pub fn admit_spooled(
        &self,
        config: &Config,
        entries: Vec<SpoolEntry>,
    ) -> (Vec<SpoolEntry>, Vec<(SpoolEntry, String)>) {
        let mut inner = lock(&self.inner);
        let mut keep = Vec::new();
        let mut aside = Vec::new();
        // Entries of peers that may learn: decided once all are seen.
        let mut open: Vec<SpoolEntry> = Vec::new();
        for e in entries {
            let Some(p) = config.peer(&e.peer).filter(|p| delivers(p)) else {
                let why = format!(
                    "peer {:?} is no longer configured with role poll or pusher",
                    e.peer
                );
                aside.push((e, why));
                continue;
            };
            if e.dsi == inner.own {
                aside.push((e, "it names this node's own dsi".to_owned()));
                continue;
            }
            match (&p.dsi, inner.owner(&e.dsi)) {
                (Some(d), _) if *d != e.dsi => {
                    let why = format!("peer {:?} is configured with dsi {d}", e.peer);
                    aside.push((e, why));
                }
                (Some(_), _) => keep.push(e),
                (None, Some(owner)) => {
                    let why = format!("dsi {} belongs to peer {owner:?}", e.dsi);
                    aside.push((e, why));
                }
                (None, None) => open.push(e),
            }
        }
        let mut per_peer: HashMap<&str, Vec<&Dsi>> = HashMap::new();
        let mut per_dsi: HashMap<&Dsi, Vec<&str>> = HashMap::new();
        for e in &open {
            per_peer.entry(&e.peer).or_default().push(&e.dsi);
            per_dsi.entry(&e.dsi).or_default().push(&e.peer);
        }
        let mut verdicts = Vec::with_capacity(open.len());
        for e in &open {
            let verdict = if per_peer[e.peer.as_str()].len() > 1 {
                Some(format!(
                    "peer {:?} has spooled objects for several dsis; none is trusted",
                    e.peer
                ))
            } else if per_dsi[&e.dsi].len() > 1 {
                Some(format!(
                    "dsi {} is spooled for several peers; none is trusted",
                    e.dsi
                ))
            } else {
                None
            };
            verdicts.push(verdict);
        }
        for (e, verdict) in open.into_iter().zip(verdicts) {
            match verdict {
                Some(why) => aside.push((e, why)),
                None => {
                    inner.by_peer.insert(
                        e.peer.clone(),
                        Binding {
                            dsi: e.dsi.clone(),
                            source: Source::Learned,
                        },
                    );
                    keep.push(e);
                }
            }
        }
        (keep, aside)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    const CONFIG: &str = r#"
data_dir = "/tmp/cipd-binding-test"
[node]
dsi = "1.9"
base_uri = "cip://node/"
[[peer]]
name = "good"
host = "127.0.0.1"
port = 1
role = "poll"
dsi = "1.1"
[[peer]]
name = "open"
host = "127.0.0.1"
port = 2
role = "poll"
[[peer]]
name = "other"
host = "127.0.0.1"
port = 3
role = "pusher"
"#;

    fn config(text: &str) -> Config {
        Config::from_toml(text).unwrap()
    }

    fn dsi(s: &str) -> Dsi {
        Dsi::new(s).unwrap()
    }

    fn entry(peer: &str, d: &str) -> SpoolEntry {
        SpoolEntry {
            peer: peer.into(),
            dsi: dsi(d),
            index_type: "HARVEST-SOIF-1".into(),
            base_uris: vec![],
            description: None,
            received: SystemTime::now(),
            payload: bytes::Bytes::new(),
        }
    }

    #[test]
    fn claims_follow_the_rules() {
        let b = Bindings::new(&config(CONFIG));
        assert_eq!(b.claim("good", &dsi("1.1")), Ok(Claim::Existing));
        // A configured peer sending another DSI.
        assert!(matches!(
            b.claim("good", &dsi("1.5")),
            Err(BindingError::NotItsDsi {
                how: "configured",
                ..
            })
        ));
        // An unconfigured one claiming a configured peer's DSI, or ours.
        assert!(matches!(
            b.claim("open", &dsi("1.1")),
            Err(BindingError::Taken { ref owner, .. }) if owner == "good"
        ));
        assert!(matches!(
            b.claim("open", &dsi("1.9")),
            Err(BindingError::OwnDsi { .. })
        ));
        // It learns its own, then keeps it; nobody else may take it.
        assert_eq!(b.claim("open", &dsi("1.2")), Ok(Claim::New));
        assert_eq!(b.claim("open", &dsi("1.2")), Ok(Claim::Existing));
        assert!(matches!(
            b.claim("open", &dsi("1.3")),
            Err(BindingError::NotItsDsi { how: "learned", .. })
        ));
        assert!(matches!(
            b.claim("other", &dsi("1.2")),
            Err(BindingError::Taken { .. })
        ));
        // drop-peer forgets a learned binding, never a configured one.
        assert_eq!(b.forget_dsi(&dsi("1.1")), None);
        assert_eq!(b.forget_dsi(&dsi("1.2")), Some("open".into()));
        assert_eq!(b.claim("open", &dsi("1.3")), Ok(Claim::New));
        b.release("open", &dsi("1.3"));
        assert_eq!(b.get("open"), None);
    }

    #[test]
    fn reload_keeps_learned_bindings_unless_told_otherwise() {
        let b = Bindings::new(&config(CONFIG));
        assert_eq!(b.claim("open", &dsi("1.2")), Ok(Claim::New));
        assert!(b.reconfigure(&config(CONFIG)).is_empty());
        assert_eq!(b.get("open").unwrap().dsi, dsi("1.2"));
        // Now configured with another DSI: the learned binding ends.
        let changed = CONFIG.replace(
            "port = 2\nrole = \"poll\"",
            "port = 2\nrole = \"poll\"\ndsi = \"1.4\"",
        );
        let ended = b.reconfigure(&config(&changed));
        assert_eq!(ended, vec![("open".to_owned(), dsi("1.2"))]);
        assert_eq!(
            b.get("open"),
            Some(Binding {
                dsi: dsi("1.4"),
                source: Source::Configured
            })
        );
    }

    #[test]
    fn spooled_entries_are_checked_against_the_configuration() {
        let b = Bindings::new(&config(CONFIG));
        let (keep, aside) = b.admit_spooled(
            &config(CONFIG),
            vec![
                entry("good", "1.1"),
                // The forger's copy of good's DSI, and a stale DSI of good.
                entry("open", "1.1"),
                entry("good", "1.7"),
                entry("gone", "1.8"),
                entry("other", "1.9"),
                entry("other", "1.3"),
            ],
        );
        let kept: Vec<_> = keep
            .iter()
            .map(|e| (e.peer.as_str(), e.dsi.as_str()))
            .collect();
        assert_eq!(kept, vec![("good", "1.1"), ("other", "1.3")]);
        assert_eq!(aside.len(), 4, "{aside:?}");
        assert_eq!(b.get("other").unwrap().dsi, dsi("1.3"));
        assert_eq!(b.get("open"), None);

        // Two open peers spooled the same DSI: neither is trusted.
        let b = Bindings::new(&config(CONFIG));
        let (keep, aside) = b.admit_spooled(
            &config(CONFIG),
            vec![entry("open", "1.5"), entry("other", "1.5")],
        );
        assert!(keep.is_empty());
        assert_eq!(aside.len(), 2);
    }

    #[test]
    fn dsis_of_reads_the_bound_peers_at_once() {
        let b = Bindings::new(&config(CONFIG));
        assert_eq!(b.dsis_of(["good", "open", "nobody"]), [dsi("1.1")]);
        assert_eq!(b.claim("open", &dsi("1.2")).unwrap(), Claim::New);
        assert_eq!(b.dsis_of(["open", "good"]), [dsi("1.2"), dsi("1.1")]);
        assert!(b.dsis_of([]).is_empty());
    }
}
