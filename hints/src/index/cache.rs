//! The substring cache (`memo` in the configuration's and the figures' names): per
//! segment, the per-peer sums of a needle that was expensive to answer, kept for the next
//! query of it.
//!
//! Broad summaries ([`crate::substring`]) cover the broadest n-grams of a big segment,
//! mined when it is built. Needles below their threshold (a few hundred to a few tens of
//! thousands of matching values) are still costly to scan in a table of millions of values,
//! and real workloads repeat them; and finding the candidates of even a narrow needle
//! intersects 4-gram lists over millions of values. So when a substring term under one
//! attribute matches at least [`SummaryConfig::memo_min_candidates`] candidates (by default
//! one) in a big segment, the segment's sums for it (the same [`Store`] a summary uses: per
//! attribute and slot, the summed count, the values matched and the slot's best values)
//! are computed in the pass that answers the query and kept in the segment.
//!
//! A segment never changes, so a memoized entry stays right for as long as the segment
//! lives: unlike an answer cache keyed by table generation, it survives imports elsewhere
//! in the table (a hub re-polling its peers changes the table every few seconds). Slots
//! whose hints were replaced or dropped since are skipped when the entries are read, as
//! they are for summaries. Entries go with their segment when a merge replaces it.
//!
//! Every segment's entries draw on one table-wide [`CacheBudget`] of bytes; a segment over
//! it forgets its oldest entries first, and an entry that does not fit is not kept.
//!
//! [`SummaryConfig::memo_min_candidates`]: crate::substring::SummaryConfig::memo_min_candidates

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::sums::Store;
use crate::hasher::RandomState;

/// Bytes of memoized sums the whole table may hold, and how the cache fares.
#[derive(Debug)]
pub(crate) struct CacheBudget {
    limit: usize,
    used: AtomicUsize,
    /// Substring terms answered from memoized sums.
    hits: AtomicU64,
    /// Sums computed to be memoized (kept or, over the budget, not).
    computed: AtomicU64,
}

impl CacheBudget {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicUsize::new(0),
            hits: AtomicU64::new(0),
            computed: AtomicU64::new(0),
        })
    }

    /// Whether memoizing is on.
    pub(crate) fn enabled(&self) -> bool {
        self.limit > 0
    }

    /// Bytes held now, over all segments.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Counts a term answered from memoized sums.
    pub(crate) fn hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts sums computed for the cache.
    pub(crate) fn computed(&self) {
        self.computed.fetch_add(1, Ordering::Relaxed);
    }

    /// `(hits, computed)` so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.computed.load(Ordering::Relaxed),
        )
    }

    /// Takes `bytes` of the budget if they fit.
    fn reserve(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&u| u <= self.limit)
            })
            .is_ok()
    }

    fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// One segment's memoized sums, by attribute and needle.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// By [`key_of`].
    map: HashMap<Box<[u8]>, Arc<Store>, RandomState>,
    /// Keys in the order they were kept, oldest first.
    order: VecDeque<Box<[u8]>>,
    /// Bytes charged to `budget` (set by the first entry kept).
    bytes: usize,
    budget: Option<Arc<CacheBudget>>,
}

thread_local! {
    /// The key of the last lookup, to spare an allocation per lookup.
    static KEY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The map key of `needle` under `attr`: the attribute's four bytes, then the needle.
fn key_of<'k>(buf: &'k mut Vec<u8>, needle: &[u8], attr: u32) -> &'k [u8] {
    buf.clear();
    buf.extend_from_slice(&attr.to_le_bytes());
    buf.extend_from_slice(needle);
    buf
}

/// What an entry is charged: its sums, the key twice (map and order) and the map's and
/// the allocation's overhead.
fn charge(key: &[u8], store: &Store) -> usize {
    store.heap_bytes() + 2 * key.len() + 96
}

impl Cache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every update leaves the map, order and charge consistent before it can panic.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The sums memoized for `needle` (ASCII-lowercased) under `attr`.
    pub(crate) fn get(&self, needle: &[u8], attr: u32) -> Option<Arc<Store>> {
        KEY.with_borrow_mut(|key| {
            let key = key_of(key, needle, attr);
            self.lock().map.get(key).cloned()
        })
    }

    /// Keeps `store` as the sums of `needle` under `attr` if `budget` has room,
    /// forgetting this segment's oldest entries to make it.
    pub(crate) fn put(
        &self,
        needle: &[u8],
        attr: u32,
        store: Arc<Store>,
        budget: &Arc<CacheBudget>,
    ) {
        let mut buf = Vec::new();
        let key = key_of(&mut buf, needle, attr);
        let size = charge(key, &store);
        if size > budget.limit {
            return;
        }
        let mut inner = self.lock();
        // Whatever eviction here could free would not be enough: keep what is held.
        let room = budget.limit.saturating_sub(budget.used()) + inner.bytes;
        if inner.map.contains_key(key) || room < size {
            return;
        }
        while !budget.reserve(size) {
            let Some(old) = inner.order.pop_front() else {
                return;
            };
            if let Some(s) = inner.map.remove(&old) {
                let freed = charge(&old, &s);
                inner.bytes -= freed;
                budget.release(freed);
            }
        }
        inner.budget.get_or_insert_with(|| budget.clone());
        inner.bytes += size;
        inner.map.insert(key.into(), store);
        inner.order.push_back(key.into());
    }

    /// Needles memoized and the bytes they are charged.
    pub(crate) fn stats(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.map.len(), inner.bytes)
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        let inner = self.lock();
        if let Some(budget) = &inner.budget {
            budget.release(inner.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Segment;

    fn store_of(seg: &Segment, needle: &[u8]) -> Arc<Store> {
        let finder = memchr::memmem::Finder::new(needle);
        let mut ids = Vec::new();
        let exact = seg.substring_candidates(&finder, &mut ids).unwrap();
        Arc::new(Store::of_needle(seg, &finder, &ids, exact, 0))
    }

    #[test]
    fn entries_are_bounded_by_the_budget_and_freed_with_their_segment() {
        let values: Vec<String> = (0..50).map(|i| format!("value {i:02}")).collect();
        let entries = values.iter().map(|v| (v.as_bytes(), 0, 2)).collect();
        let seg = Segment::from_entries(entries, 4, &RandomState::default()).unwrap();
        let a = store_of(&seg, b"value 1");
        let s = a.only(0);
        // value 1, 10..19.
        assert_eq!(
            (s.entries.len(), s.entries[0].matched, s.sum(0)),
            (1, 10, 20)
        );
        let one = charge(b"\0\0\0\0value 1", &a);
        let budget = CacheBudget::new(2 * one + 10);
        let cache = Cache::default();
        cache.put(b"value 1", 0, a.clone(), &budget);
        cache.put(b"value 2", 0, store_of(&seg, b"value 2"), &budget);
        assert_eq!(cache.stats().0, 2);
        assert_eq!(budget.used(), cache.stats().1);
        // A third forgets the oldest.
        cache.put(b"value 3", 0, store_of(&seg, b"value 3"), &budget);
        assert!(cache.get(b"value 1", 0).is_none());
        assert!(cache.get(b"value 2", 0).is_some() && cache.get(b"value 3", 0).is_some());
        assert!(budget.used() <= 2 * one + 10);
        // Another segment cannot take what this one holds, beyond its own entries.
        let other = Cache::default();
        other.put(b"value 4", 0, store_of(&seg, b"value 4"), &budget);
        assert!(other.get(b"value 4", 0).is_none());
        drop(cache);
        assert_eq!(budget.used(), 0);
        other.put(b"value 4", 0, store_of(&seg, b"value 4"), &budget);
        assert!(other.get(b"value 4", 0).is_some());
        // Off: nothing kept.
        let off = CacheBudget::new(0);
        let m = Cache::default();
        m.put(b"value 1", 0, a, &off);
        assert!(m.get(b"value 1", 0).is_none() && !off.enabled());
    }
}
