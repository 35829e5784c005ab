//! Trust in hints: the node's signing key, peers' keys and signature policies, and what the
//! node learnt checking them.
//!
//! * [`keys`]: key files (`cipctl keygen`) and public keys as configured.
//! * [`signature`]: the bytes signed, signing out-bound hints, checking in-bound ones.
//! * [`Trust`]: the daemon's state: its key (replaced on reload), per peer the date of the
//!   last signed hint it took (the replay bound, restored from the spool at start) and how
//!   the last hint checked (shown by `cipctl peers`).

pub mod keys;
pub mod signature;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwapOption;

use keys::{KeyError, NodeKey};
use signature::{SignatureError, Verdict};

/// The daemon's trust state.
#[derive(Debug, Default)]
pub struct Trust {
    key: ArcSwapOption<NodeKey>,
    peers: Mutex<HashMap<String, PeerRecord>>,
}

/// What is known about one peer's signatures.
#[derive(Debug, Clone, Default)]
struct PeerRecord {
    /// Date of the newest signed hint taken from it.
    last: Option<SystemTime>,
    /// How its last hint checked.
    state: String,
}

impl Trust {
    /// Loads the key named by the configuration (none when `path` is `None`).
    ///
    /// # Errors
    /// [`KeyError`] when the file is missing, readable by others or not a key.
    pub fn load_key(path: Option<&std::path::Path>) -> Result<Option<Arc<NodeKey>>, KeyError> {
        path.map(|p| NodeKey::load(p).map(Arc::new)).transpose()
    }

    /// Sets the node's signing key.
    pub fn set_key(&self, key: Option<Arc<NodeKey>>) {
        if let Some(k) = &key {
            tracing::info!(public_key = %k.public(), "out-bound hints are signed");
        }
        self.key.store(key);
    }

    /// The node's signing key.
    pub fn key(&self) -> Option<Arc<NodeKey>> {
        self.key.load_full()
    }

    /// The date of the newest signed hint taken from `peer`.
    pub fn last(&self, peer: &str) -> Option<SystemTime> {
        self.lock().get(peer).and_then(|r| r.last)
    }

    /// Records that `peer`'s hint was taken with `verdict`.
    pub fn accepted(&self, peer: &str, verdict: &Verdict) {
        let mut peers = self.lock();
        let r = peers.entry(peer.to_owned()).or_default();
        if let Verdict::Valid { date, .. } = verdict {
            r.last = Some(r.last.map_or(*date, |l| l.max(*date)));
        }
        r.state = verdict.describe();
    }

    /// Records that `peer`'s hint was refused for `error` (the last good hint stays).
    pub fn refused(&self, peer: &str, error: &SignatureError) {
        let mut peers = self.lock();
        let r = peers.entry(peer.to_owned()).or_default();
        r.state = format!("refused: {}", error.label());
    }

    /// How `peer`'s last hint checked, for `cipctl peers`.
    pub fn describe(&self, peer: &str) -> String {
        self.lock()
            .get(peer)
            .map(|r| r.state.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unsigned".to_owned())
    }

    /// Forgets peers no longer configured.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|name, _| keep(name));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PeerRecord>> {
        crate::sys::lock(&self.peers)
    }
}
