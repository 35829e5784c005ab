//! The answers a search keeps ([`TtlCache`]) and the sub-queries it has in flight
//! ([`Flights`]).
//!
//! A [`TtlCache`] holds at most `capacity` entries, each for at most its TTL; when full, the
//! oldest entry goes (first in, first out: an answer's worth is its freshness). What makes
//! an entry still valid besides its age (the hint it was computed from, the datasets it
//! skipped) is the caller's: it keeps that in the value and checks it on a hit.
//!
//! [`Flights`] joins identical requests: the first caller runs the work, later callers with
//! the same key wait for its result instead of asking again (DNS resolvers' "request
//! coalescing").

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::sys::lock;

struct Entry<V> {
    value: V,
    at: Instant,
    /// Tells this entry from a later one under the same key in the eviction queue.
    serial: u64,
}

struct Inner<V> {
    map: HashMap<String, Entry<V>>,
    order: VecDeque<(String, u64)>,
    serial: u64,
}

/// A bounded map of answers that expire (see the module doc).
pub struct TtlCache<V> {
    inner: Mutex<Inner<V>>,
    capacity: usize,
    ttl: Duration,
    /// Lookups that found a valid entry.
    pub hits: AtomicU64,
    /// Lookups that found none (or an expired one).
    pub misses: AtomicU64,
}

impl<V> std::fmt::Debug for TtlCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TtlCache")
            .field("capacity", &self.capacity)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl<V: Clone> TtlCache<V> {
    /// An empty cache of at most `capacity` entries kept at most `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Self {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                order: VecDeque::new(),
                serial: 0,
            }),
            capacity: capacity.max(1),
            ttl,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The entry under `key` when it is younger than the TTL and `valid` holds for it;
    /// counted as a hit or a miss. An entry found invalid is dropped; an expired one is
    /// kept (for [`TtlCache::get_stale`]) until newer entries push it out.
    pub fn get(&self, key: &str, valid: impl FnOnce(&V) -> bool) -> Option<V> {
        let mut inner = lock(&self.inner);
        let found = match inner.map.get(key) {
            Some(e) if e.at.elapsed() >= self.ttl => None,
            Some(e) if valid(&e.value) => Some(e.value.clone()),
            Some(_) => {
                inner.map.remove(key);
                None
            }
            None => None,
        };
        drop(inner);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// The entry under `key` when it is younger than `max_age` (expired or not) and `valid`
    /// holds for it: an answer to serve stale when its source cannot answer now.
    pub fn get_stale(
        &self,
        key: &str,
        max_age: Duration,
        valid: impl FnOnce(&V) -> bool,
    ) -> Option<V> {
        let inner = lock(&self.inner);
        let e = inner.map.get(key)?;
        (e.at.elapsed() < max_age && valid(&e.value)).then(|| e.value.clone())
    }

    /// Keeps `value` under `key`, replacing what was there; the oldest entries go while the
    /// cache is over its capacity.
    pub fn put(&self, key: String, value: V) {
        let mut inner = lock(&self.inner);
        inner.serial += 1;
        let serial = inner.serial;
        inner.order.push_back((key.clone(), serial));
        inner.map.insert(
            key,
            Entry {
                value,
                at: Instant::now(),
                serial,
            },
        );
        // The queue may hold keys replaced or dropped since: skip those.
        while inner.map.len() > self.capacity || inner.order.len() > self.capacity * 2 {
            let Some((old, serial)) = inner.order.pop_front() else {
                break;
            };
            if inner.map.get(&old).is_some_and(|e| e.serial == serial) {
                inner.map.remove(&old);
            }
        }
    }

    /// Drops every entry.
    pub fn clear(&self) {
        let mut inner = lock(&self.inner);
        inner.map.clear();
        inner.order.clear();
    }

    /// Entries held (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        lock(&self.inner).map.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Identical requests in flight, joined (see the module doc).
pub struct Flights<V> {
    map: Mutex<HashMap<String, Arc<OnceCell<V>>>>,
    /// Requests that joined one already in flight instead of going out.
    pub joined: AtomicU64,
}

impl<V> std::fmt::Debug for Flights<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flights").finish_non_exhaustive()
    }
}

impl<V> Default for Flights<V> {
    fn default() -> Self {
        Self {
            map: Mutex::new(HashMap::new()),
            joined: AtomicU64::new(0),
        }
    }
}

impl<V: Clone> Flights<V> {
    /// Runs `work` for `key`, or waits for the run already in flight under `key` and takes
    /// its result. The key is forgotten once the run ends, so a later call runs again.
    pub async fn run<F: Future<Output = V>>(&self, key: &str, work: impl FnOnce() -> F) -> V {
        let (cell, first) = {
            let mut map = lock(&self.map);
            match map.get(key) {
                Some(c) => (c.clone(), false),
                None => {
                    let c = Arc::new(OnceCell::new());
                    map.insert(key.to_owned(), c.clone());
                    (c, true)
                }
            }
        };
        if !first {
            self.joined.fetch_add(1, Ordering::Relaxed);
            // The first caller may be cancelled (its client went away): then the cell is
            // still empty and this caller does the work itself.
            return cell.get_or_init(work).await.clone();
        }
        let guard = Forget {
            map: &self.map,
            key,
        };
        let v = cell.get_or_init(work).await.clone();
        drop(guard);
        v
    }

    /// Requests in flight now.
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    /// True when none is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Removes a flight's key when its first caller finishes or is dropped.
struct Forget<'a, V> {
    map: &'a Mutex<HashMap<String, Arc<OnceCell<V>>>>,
    key: &'a str,
}

impl<V> Drop for Forget<'_, V> {
    fn drop(&mut self) {
        lock(self.map).remove(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn expires_and_validates() {
        let c = TtlCache::new(8, Duration::from_secs(10));
        c.put("a".into(), 1);
        assert_eq!(c.get("a", |_| true), Some(1));
        assert_eq!(c.get("a", |v| *v == 2), None, "invalid: dropped");
        assert_eq!(c.get("a", |_| true), None);
        c.put("b".into(), 2);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(c.get("b", |_| true), None, "expired");
        let day = Duration::from_secs(86_400);
        assert_eq!(
            c.get_stale("b", day, |_| true),
            Some(2),
            "kept, for serving stale"
        );
        assert_eq!(
            c.get_stale("b", Duration::from_secs(5), |_| true),
            None,
            "too old"
        );
        assert_eq!(c.hits.load(Ordering::Relaxed), 1);
        assert_eq!(c.misses.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn bounded_first_in_first_out() {
        let c = TtlCache::new(2, Duration::from_secs(10));
        c.put("a".into(), 1);
        c.put("b".into(), 2);
        c.put("a".into(), 3);
        c.put("c".into(), 4);
        assert_eq!(c.len(), 2);
        assert_eq!(c.get("b", |_| true), None);
        assert_eq!(c.get("a", |_| true), Some(3));
        for i in 0..100 {
            c.put(format!("k{i}"), i);
        }
        assert_eq!(c.len(), 2);
        assert!(lock(&c.inner).order.len() <= 4);
    }

    #[tokio::test]
    async fn identical_requests_are_joined() {
        let f: Arc<Flights<u32>> = Arc::default();
        let runs = Arc::new(AtomicU64::new(0));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let (f, runs) = (f.clone(), runs.clone());
            tokio::spawn(async move {
                f.run("k", || async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    rx.await.ok();
                    7
                })
                .await
            })
        };
        while f.is_empty() {
            tokio::task::yield_now().await;
        }
        let second = {
            let (f, runs) = (f.clone(), runs.clone());
            tokio::spawn(async move {
                f.run("k", || async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    8
                })
                .await
            })
        };
        while f.joined.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        tx.send(()).unwrap();
        assert_eq!(first.await.unwrap(), 7);
        assert_eq!(second.await.unwrap(), 7);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(f.is_empty(), "forgotten once done");
        assert_eq!(f.run("k", || async { 9 }).await, 9);
    }
}
