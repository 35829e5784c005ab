//! Referral answers as the HTTP API sends them: written straight from the routing table's
//! borrowed answer into JSON bytes, and kept in a small cache.
//!
//! * [`write_answer`] serializes an [`Answer`] without building owned referrals (no string
//!   copies of DSIs, base-uris or values); the bytes are exactly what serializing
//!   `crate::node::QueryAnswer` gives.
//! * [`AnswerCache`] keeps recent answers by query, limit and `possible`, each stamped with
//!   the state it was computed from (table and local generations, a configuration epoch).
//!   A stale stamp is a miss, so a cached answer is never older than the table; a query
//!   repeated between two changes (the popular values of a skewed workload) costs a hash
//!   lookup and a copy of shared bytes. It is bounded in bytes; a full shard forgets its
//!   oldest answers first.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};
use std::sync::Mutex;

use crate::sys::lock;
use bytes::Bytes;
use cip_proto::Dsi;
use hints::answer::{Answer, ReferralView};
use serde::Serialize;
use serde::ser::{SerializeSeq, Serializer};

/// Shards of the cache (less lock contention between connections).
const SHARDS: usize = 16;

/// The state an answer was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Routing table generation.
    pub table: u64,
    /// Local hint generation.
    pub local: u64,
    /// Configuration, thesaurus and identity epoch.
    pub epoch: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    query: Box<str>,
    possible: bool,
    limit: usize,
}

#[derive(Debug, Default)]
struct Shard {
    /// Answer by key, with the sequence number of its insertion.
    entries: HashMap<Key, (Stamp, (Bytes, u32), u64)>,
    /// Keys in insertion order with their sequence numbers; a key put again is in it
    /// twice, and only the entry whose number matches is evicted.
    order: VecDeque<(Key, u64)>,
    next: u64,
    bytes: usize,
}

/// Bytes charged for an answer: its bytes, the key twice (map and order) and bookkeeping.
fn charge(query: &str, answer: &Bytes) -> usize {
    answer.len() + 2 * query.len() + 96
}

/// Recent answers (see the module doc).
#[derive(Debug)]
pub struct AnswerCache {
    shards: Vec<Mutex<Shard>>,
    max_shard_bytes: usize,
    hasher: foldhash::fast::RandomState,
}

impl AnswerCache {
    /// A cache holding at most `max_bytes` of answers (0: no caching).
    pub fn new(max_bytes: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            max_shard_bytes: max_bytes / SHARDS,
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    fn shard(&self, key: &Key) -> &Mutex<Shard> {
        let h = self.hasher.hash_one(key) as usize;
        &self.shards[h % SHARDS]
    }

    /// The cached answer for the query (with its number of referrals), when it was
    /// computed from `stamp`.
    pub fn get(
        &self,
        query: &str,
        possible: bool,
        limit: usize,
        stamp: Stamp,
    ) -> Option<(Bytes, u32)> {
        if self.max_shard_bytes == 0 {
            return None;
        }
        let key = Key {
            query: query.into(),
            possible,
            limit,
        };
        let shard = lock(self.shard(&key));
        match shard.entries.get(&key) {
            Some((s, answer, _)) if *s == stamp => Some(answer.clone()),
            _ => None,
        }
    }

    /// Keeps `answer`, computed from `stamp`, unless it is too big for the cache.
    pub fn put(
        &self,
        query: &str,
        possible: bool,
        limit: usize,
        stamp: Stamp,
        answer: (Bytes, u32),
    ) {
        let size = charge(query, &answer.0);
        if size > self.max_shard_bytes / 4 {
            return;
        }
        let key = Key {
            query: query.into(),
            possible,
            limit,
        };
        let mut guard = lock(self.shard(&key));
        let shard = &mut *guard;
        if let Some((_, old, _)) = shard.entries.remove(&key) {
            shard.bytes = shard.bytes.saturating_sub(charge(query, &old.0));
        }
        // Oldest first out (after a table change those are stale anyway); an entry put
        // again since has a newer number and stays.
        while shard.bytes + size > self.max_shard_bytes {
            let Some((old_key, seq)) = shard.order.pop_front() else {
                break;
            };
            if shard.entries.get(&old_key).is_some_and(|e| e.2 == seq)
                && let Some((_, old, _)) = shard.entries.remove(&old_key)
            {
                shard.bytes = shard.bytes.saturating_sub(charge(&old_key.query, &old.0));
            }
        }
        // Keys of answers put again since: dropped once they are most of the queue.
        if shard.order.len() > 2 * shard.entries.len() + 16 {
            let entries = &shard.entries;
            shard
                .order
                .retain(|(k, seq)| entries.get(k).is_some_and(|e| e.2 == *seq));
        }
        let seq = shard.next;
        shard.next += 1;
        shard.order.push_back((key.clone(), seq));
        shard.entries.insert(key, (stamp, answer, seq));
        shard.bytes += size;
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| lock(s).bytes).sum()
    }
}

/// Writes the `/v1/referrals` answer for `query` (as given) at node `own`: the referrals of
/// `answer` except `own`'s, and the count of local matches. Returns the referrals written.
///
/// At most `limit` referrals are written; `more` says whether `answer` holds further ones
/// (rank `limit` + 2 so that one more remains after this node's own dataset is left out).
pub fn write_answer(
    out: &mut Vec<u8>,
    query: &str,
    own: &Dsi,
    answer: &Answer,
    limit: usize,
    local: u64,
    unreachable: &std::collections::HashSet<Dsi>,
) -> u32 {
    #[derive(Serialize)]
    struct Out<'a> {
        query: &'a str,
        dsi: &'a str,
        referrals: Referrals<'a>,
        more: bool,
        local: u64,
    }
    let others = answer.iter().filter(|r| r.dsi() != own).count();
    let body = Out {
        query,
        dsi: own.as_str(),
        referrals: Referrals {
            answer,
            own,
            limit,
            unreachable,
        },
        more: others > limit,
        local,
    };
    // Writing plain data into a Vec cannot fail.
    let _ = serde_json::to_writer(out, &body);
    others.min(limit) as u32
}

struct Referrals<'a> {
    answer: &'a Answer,
    own: &'a Dsi,
    limit: usize,
    unreachable: &'a std::collections::HashSet<Dsi>,
}

impl Serialize for Referrals<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        for r in self
            .answer
            .iter()
            .filter(|r| r.dsi() != self.own)
            .take(self.limit)
        {
            let down = !self.unreachable.is_empty() && self.unreachable.contains(r.dsi());
            seq.serialize_element(&Referral(r, down))?;
        }
        seq.end()
    }
}

/// A referral, and whether its dataset is unreachable now.
struct Referral<'a>(ReferralView<'a>, bool);

impl Serialize for Referral<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Fields<'a> {
            dsi: &'a str,
            base_uri: &'a [String],
            dsi_description: Option<&'a str>,
            count: u64,
            total: u64,
            definite: bool,
            values: Values<'a>,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            unreachable: bool,
        }
        let r = &self.0;
        Fields {
            dsi: r.dsi().as_str(),
            base_uri: r.base_uris(),
            dsi_description: r.dsi_description(),
            count: r.count(),
            total: r.total(),
            definite: r.definite(),
            values: Values(*r),
            unreachable: self.1,
        }
        .serialize(s)
    }
}

struct Values<'a>(ReferralView<'a>);

impl Serialize for Values<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let values = self.0.values();
        let mut seq = s.serialize_seq(Some(values.len()))?;
        for (v, c) in values {
            // Borrowed when the value is UTF-8, as nearly all are.
            seq.serialize_element(&(String::from_utf8_lossy(v), c))?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(table: u64) -> Stamp {
        Stamp {
            table,
            local: 1,
            epoch: 0,
        }
    }

    #[test]
    fn answers_are_kept_per_stamp_and_bounded() {
        let c = AnswerCache::new(16 * 4096);
        c.put("A=x", false, 10, stamp(1), (Bytes::from_static(b"one"), 1));
        assert_eq!(c.get("A=x", false, 10, stamp(1)).unwrap().0, "one");
        assert!(
            c.get("A=x", false, 10, stamp(2)).is_none(),
            "a newer table misses"
        );
        assert!(c.get("A=x", true, 10, stamp(1)).is_none());
        assert!(c.get("A=x", false, 5, stamp(1)).is_none());
        // Too big for a shard: not kept.
        c.put(
            "A=y",
            false,
            10,
            stamp(1),
            (Bytes::from(vec![b'x'; 4096]), 1),
        );
        assert!(c.get("A=y", false, 10, stamp(1)).is_none());
        for i in 0..10_000 {
            c.put(
                &format!("A={i}"),
                false,
                10,
                stamp(1),
                (Bytes::from_static(b"v"), 1),
            );
        }
        assert!(c.bytes() <= 16 * 4096);
        // The newest answers stay when older ones make room.
        assert!(c.get("A=9999", false, 10, stamp(1)).is_some());
        assert!(c.get("A=0", false, 10, stamp(1)).is_none());
        // A key put again counts once, and its newer answer outlives older keys.
        let c = AnswerCache::new(SHARDS * 1024);
        for round in 0..50 {
            for i in 0..20 {
                c.put(
                    &format!("cold {round} {i}"),
                    false,
                    10,
                    stamp(1),
                    (Bytes::from(vec![b'c'; 100]), 1),
                );
            }
            c.put(
                "hot",
                false,
                10,
                stamp(1),
                (Bytes::from(vec![b'h'; 100]), 1),
            );
            assert!(c.bytes() <= SHARDS * 1024);
            assert!(c.get("hot", false, 10, stamp(1)).is_some());
            assert!(
                c.get(&format!("cold {round} 19"), false, 10, stamp(1))
                    .is_some()
            );
        }
        for shard in &c.shards {
            let s = lock(shard);
            assert!(s.order.len() <= 2 * s.entries.len() + 17);
            let charged: usize = s
                .entries
                .iter()
                .map(|(k, (_, a, _))| charge(&k.query, &a.0))
                .sum();
            assert_eq!(charged, s.bytes);
        }
        let off = AnswerCache::new(0);
        off.put("A=x", false, 10, stamp(1), (Bytes::from_static(b"one"), 1));
        assert!(off.get("A=x", false, 10, stamp(1)).is_none());
    }
}
