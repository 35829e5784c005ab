//! Change journals of RDM catalogs: when each RD was last added or changed, and when it was
//! deleted, so that `Scope: since DATE` (and `rd-request-deleted`) answer truthfully across
//! reloads and restarts.
//!
//! A journal maps each URL ever seen in a catalog to the digest of its RD, the time it last
//! changed and, once it is gone, the time it went. [`Journals::sync`] compares a catalog's
//! store with its journal (a full scan, on the blocking pool) whenever the store is a new
//! one; a background task ([`journal_loop`]) does so after every local rebuild, and every
//! RDM answer that reads times does so first. Journals are kept in
//! `data_dir/rdm/<hex(name)>.journal`, one line per URL:
//! `changed<TAB>deleted-or-0<TAB>digest<TAB>template<TAB>url`, written atomically.

use std::collections::HashMap;
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::model::config::Config;
use crate::model::status::Status;
use crate::store::local::CollectionStore;
use crate::store::local_index::LocalIndex;

/// What the journal task needs of the node; the node implements it.
pub trait JournalHost: Send + Sync + 'static {
    /// The configuration in force.
    fn config(&self) -> Arc<Config>;
    /// The local collections as last loaded.
    fn local(&self) -> Arc<LocalIndex>;
    /// The journals to keep.
    fn journals(&self) -> &Journals;
    /// The node's status channel (its `local_generation` moves with every rebuild).
    fn status(&self) -> watch::Receiver<Status>;
    /// Cancelled when the node shuts down.
    fn shutdown_token(&self) -> CancellationToken;
}

/// One URL's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// CRC-32 and length of the RD's SOIF bytes.
    pub digest: u64,
    /// When it was last added or changed (Unix seconds).
    pub changed: i64,
    /// When it was deleted, if it is gone.
    pub deleted: Option<i64>,
    /// Its template (for deletion notices).
    pub template: String,
}

/// A catalog's journal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Journal {
    /// By URL.
    pub entries: HashMap<String, Entry>,
}

impl Journal {
    /// URLs added or changed at or after `t`, still present.
    pub fn changed_since(&self, t: i64) -> std::collections::HashSet<&str> {
        self.entries
            .iter()
            .filter(|(_, e)| e.deleted.is_none() && e.changed >= t)
            .map(|(u, _)| u.as_str())
            .collect()
    }

    /// `(template, url)` of RDs deleted at or after `t` (all deleted ones for `None`), in
    /// deletion order.
    pub fn deleted_since(&self, t: Option<i64>) -> Vec<(&str, &str)> {
        let mut out: Vec<(i64, &str, &str)> = self
            .entries
            .iter()
            .filter_map(|(u, e)| {
                let d = e.deleted?;
                t.is_none_or(|t| d >= t)
                    .then_some((d, e.template.as_str(), u.as_str()))
            })
            .collect();
        out.sort();
        out.into_iter().map(|(_, t, u)| (t, u)).collect()
    }

    fn read(path: &Path) -> io::Result<Self> {
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(e),
        };
        let mut j = Self::default();
        for (n, line) in io::BufReader::new(file).lines().enumerate() {
            let line = line?;
            let f: Vec<&str> = line.splitn(5, '\t').collect();
            let parsed = (|| {
                let [changed, deleted, digest, template, url] = f.as_slice() else {
                    return None;
                };
                let deleted: i64 = deleted.parse().ok()?;
                Some((
                    (*url).to_owned(),
                    Entry {
                        changed: changed.parse().ok()?,
                        deleted: (deleted != 0).then_some(deleted),
                        digest: u64::from_str_radix(digest, 16).ok()?,
                        template: (*template).to_owned(),
                    },
                ))
            })();
            match parsed {
                Some((u, e)) => {
                    j.entries.insert(u, e);
                }
                None => {
                    tracing::warn!(file = %path.display(), line = n + 1, "unreadable journal line skipped")
                }
            }
        }
        Ok(j)
    }

    fn write(&self, path: &Path) -> io::Result<()> {
        crate::sys::durable::write_with(path, |w| {
            for (url, e) in &self.entries {
                writeln!(
                    w,
                    "{}\t{}\t{:x}\t{}\t{url}",
                    e.changed,
                    e.deleted.unwrap_or(0),
                    e.digest,
                    e.template
                )?;
            }
            Ok(())
        })
    }
}

/// The digest of an RD: CRC-32 of its canonical SOIF and its length.
pub fn digest(bytes: &[u8]) -> u64 {
    (u64::from(crc32fast::hash(bytes)) << 32) | (bytes.len() as u64 & 0xffff_ffff)
}

#[derive(Debug, Default)]
struct Slot {
    /// The store the journal was last synced with.
    store: Weak<CollectionStore>,
    journal: Option<Arc<Journal>>,
}

/// Every catalog's journal, by collection name.
#[derive(Debug, Default)]
pub struct Journals {
    slots: Mutex<HashMap<String, Arc<Mutex<Slot>>>>,
}

/// The journal file of catalog `name`.
pub fn journal_path(data_dir: &Path, name: &str) -> PathBuf {
    let stem = crate::store::collection::file_stem(name);
    data_dir.join("rdm").join(format!("{stem}.journal"))
}

impl Journals {
    /// The journal of catalog `name`, brought up to date with `store` first (blocking: the
    /// first call reads the journal file, a new store is scanned).
    ///
    /// # Errors
    /// When the store or the journal file cannot be read, or the journal not written.
    pub fn sync(
        &self,
        data_dir: &Path,
        name: &str,
        store: &Arc<CollectionStore>,
        now: i64,
    ) -> Result<Arc<Journal>, String> {
        let slot = crate::sys::lock(&self.slots)
            .entry(name.to_owned())
            .or_default()
            .clone();
        let mut slot = crate::sys::lock(&slot);
        let path = journal_path(data_dir, name);
        if let Some(j) = &slot.journal
            && Weak::ptr_eq(&slot.store, &Arc::downgrade(store))
        {
            return Ok(j.clone());
        }
        let mut next = match &slot.journal {
            Some(j) => (**j).clone(),
            None => Journal::read(&path).map_err(|e| format!("{}: {e}", path.display()))?,
        };
        let mut seen = std::collections::HashSet::with_capacity(store.len());
        let mut changed = false;
        store
            .scan(&mut |_, obj| {
                let url = String::from_utf8_lossy(obj.url()).into_owned();
                let d = digest(&obj.to_bytes());
                match next.entries.get_mut(&url) {
                    Some(e) if e.digest == d && e.deleted.is_none() => {}
                    Some(e) => {
                        *e = Entry {
                            digest: d,
                            changed: now,
                            deleted: None,
                            template: obj.template().as_str().to_owned(),
                        };
                        changed = true;
                    }
                    None => {
                        next.entries.insert(
                            url.clone(),
                            Entry {
                                digest: d,
                                changed: now,
                                deleted: None,
                                template: obj.template().as_str().to_owned(),
                            },
                        );
                        changed = true;
                    }
                }
                seen.insert(url);
            })
            .map_err(|e| e.to_string())?;
        for (url, e) in &mut next.entries {
            if e.deleted.is_none() && !seen.contains(url) {
                e.deleted = Some(now);
                changed = true;
            }
        }
        if changed || !path.exists() {
            next.write(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let next = Arc::new(next);
        slot.store = Arc::downgrade(store);
        slot.journal = Some(next.clone());
        Ok(next)
    }
}

/// Unix seconds now.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Syncs every catalog's journal after each local rebuild, so deletions are dated when they
/// happen even if nobody asks for a while.
pub async fn journal_loop<H: JournalHost>(node: Arc<H>) {
    let token = node.shutdown_token();
    let mut status = node.status();
    let mut last = u64::MAX;
    loop {
        let generation = status.borrow_and_update().local_generation;
        if generation != last {
            last = generation;
            let n = node.clone();
            let synced = crate::sys::net::spawn_blocking(move || sync_all(&*n)).await;
            if let Err(e) = synced {
                tracing::error!(error = %e, "rdm journal task failed");
            }
        }
        tokio::select! {
            () = token.cancelled() => return,
            r = status.changed() => if r.is_err() { return },
        }
    }
}

fn sync_all<H: JournalHost>(node: &H) {
    let config = node.config();
    // Kept only for RDM clients, who come over HTTP: a node with no HTTP listener keeps
    // none (a journal first made later counts every object as changed then, as at a first
    // start, so `since` answers stay whole rather than miss a change).
    if config.rdm.path.is_none()
        || (config.listen.http.is_empty() && config.listen.https.is_empty())
    {
        return;
    }
    let local = node.local();
    for c in &config.collections {
        if let Some(store) = local.catalog(&c.name)
            && let Err(e) = node
                .journals()
                .sync(&config.data_dir, &c.name, &store, now())
        {
            tracing::warn!(catalog = %c.name, error = %e, "rdm journal not updated");
        }
    }
}
