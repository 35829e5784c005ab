//! Who is on the other side of a search: the nodes that poll this one ([`Upstreams`], where
//! a search widens to) and the clients' request rates ([`RateLimiter`], `search.rate`).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;

use tokio::time::Instant;

use crate::sys::lock;

/// Most pollers remembered (polls from configured peers only are taken).
pub const MAX_UPSTREAMS: usize = 1024;
/// Most client addresses whose buckets are kept; past it, full buckets are dropped.
pub const MAX_CLIENT_BUCKETS: usize = 65_536;

/// A node that polls this one, as its polls named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// Its DSI (`poller-dsi`, else its configured DSI, else its base-URI).
    pub dsi: String,
    /// The base-URIs its polls named.
    pub base_uris: Vec<String>,
    /// The address its polls came from.
    pub from: IpAddr,
}

/// The nodes that poll this one, by peer name.
#[derive(Debug, Default)]
pub struct Upstreams {
    map: Mutex<BTreeMap<String, Upstream>>,
}

impl Upstreams {
    /// Keeps `entry` for `peer`; true when it is new or changed (false when the map is full).
    pub fn note(&self, peer: &str, entry: Upstream) -> bool {
        let mut map = lock(&self.map);
        if map.get(peer) == Some(&entry) || (!map.contains_key(peer) && map.len() >= MAX_UPSTREAMS)
        {
            return false;
        }
        map.insert(peer.to_owned(), entry);
        true
    }

    /// Every poller known.
    pub fn all(&self) -> Vec<Upstream> {
        lock(&self.map).values().cloned().collect()
    }

    /// The addresses their polls came from.
    pub fn addresses(&self) -> Vec<IpAddr> {
        lock(&self.map).values().map(|u| u.from).collect()
    }

    /// Forgets pollers that are no longer configured peers.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        lock(&self.map).retain(|name, _| keep(name));
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets per client address: `rate` requests a second, bursts of twice that.
#[derive(Debug, Default)]
pub struct RateLimiter {
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

impl RateLimiter {
    /// Takes a token for `client` at `rate` per second; false when it has none left.
    pub fn admit(&self, client: IpAddr, rate: u32) -> bool {
        let rate = f64::from(rate.max(1));
        let burst = rate * 2.0;
        let now = Instant::now();
        let mut buckets = lock(&self.buckets);
        if buckets.len() >= MAX_CLIENT_BUCKETS && !buckets.contains_key(&client) {
            buckets.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * rate < burst);
        }
        let b = buckets.entry(client).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * rate).min(burst);
        b.at = now;
        if b.tokens < 1.0 {
            return false;
        }
        b.tokens -= 1.0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn buckets_refill_at_the_rate() {
        let r = RateLimiter::default();
        let ip = IpAddr::from([192, 0, 2, 1]);
        assert!((0..4).all(|_| r.admit(ip, 2)), "a burst of twice the rate");
        assert!(!r.admit(ip, 2));
        assert!(r.admit(IpAddr::from([192, 0, 2, 2]), 2), "per address");
        tokio::time::advance(std::time::Duration::from_millis(500)).await;
        assert!(r.admit(ip, 2), "one token back after half a second");
        assert!(!r.admit(ip, 2));
    }

    #[test]
    fn upstreams_are_bounded_and_replaced() {
        let u = Upstreams::default();
        let entry = |n: u8| Upstream {
            dsi: format!("1.{n}"),
            base_uris: vec![format!("http://h{n}/")],
            from: IpAddr::from([127, 0, 0, n]),
        };
        assert!(u.note("a", entry(1)));
        assert!(!u.note("a", entry(1)), "unchanged");
        assert!(u.note("a", entry(2)), "changed");
        assert_eq!(u.all(), [entry(2)]);
        u.retain(|n| n != "a");
        assert!(u.all().is_empty());
    }
}
