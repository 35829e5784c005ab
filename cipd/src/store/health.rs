//! What this node has learnt of the nodes it asks: smoothed round-trip times and recent
//! failures, per endpoint (`scheme://host:port`). The search's "infrastructure cache", as
//! unbound keeps one per name server: it sets how long a sub-request may wait, prefers the
//! faster of equally good nodes, and keeps a node that failed from costing a timeout on
//! every search (RFC 9520: failures are cached, and a failed server is retried no sooner than
//! `failure_ttl`, doubling while it keeps failing up to `max_failure_ttl`).
//!
//! Round-trip times follow RFC 6298 (SRTT, RTTVAR, RTO = SRTT + 4·RTTVAR). Memory is bounded:
//! past `capacity` endpoints, the one touched longest ago is forgotten.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The timeout of an endpoint never heard from.
pub const INITIAL_RTO: Duration = Duration::from_secs(1);
/// The smallest timeout an endpoint is given, however fast it has been.
pub const MIN_RTO: Duration = Duration::from_millis(20);

/// What is known of one endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointHealth {
    /// Smoothed round-trip time, once one was measured.
    pub srtt: Option<Duration>,
    /// Round-trip time variation.
    pub rttvar: Duration,
    /// Failures since the last success.
    pub failures: u32,
    /// While failed: when it may be asked again.
    pub retry_at: Option<Instant>,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// Last time anything was noted.
    touched: Instant,
}

impl EndpointHealth {
    fn new(now: Instant) -> Self {
        Self {
            srtt: None,
            rttvar: Duration::ZERO,
            failures: 0,
            retry_at: None,
            last_error: None,
            touched: now,
        }
    }

    /// The retransmission timeout (RFC 6298): SRTT + 4·RTTVAR, at least [`MIN_RTO`];
    /// [`INITIAL_RTO`] before a first measurement.
    pub fn rto(&self) -> Duration {
        match self.srtt {
            None => INITIAL_RTO,
            Some(s) => (s + self.rttvar * 4).max(MIN_RTO),
        }
    }
}

/// An endpoint left alone after failing ([`Health::down`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Down {
    /// How long until it may be asked again.
    pub retry_in: Duration,
    /// Failures in a row.
    pub failures: u32,
    /// The last failure.
    pub error: String,
}

/// The infrastructure cache (see the module doc).
#[derive(Debug)]
pub struct Health {
    inner: Mutex<HashMap<String, EndpointHealth>>,
    capacity: usize,
    failure_ttl: Duration,
    max_failure_ttl: Duration,
}

impl Health {
    /// An empty cache of at most `capacity` endpoints.
    pub fn new(capacity: usize, failure_ttl: Duration, max_failure_ttl: Duration) -> Self {
        Self {
            inner: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
            failure_ttl,
            max_failure_ttl: max_failure_ttl.max(failure_ttl),
        }
    }

    fn with<T>(&self, key: &str, f: impl FnOnce(&mut EndpointHealth) -> T) -> T {
        let now = Instant::now();
        let mut map = crate::sys::lock(&self.inner);
        if !map.contains_key(key) && map.len() >= self.capacity {
            // Forget the endpoint touched longest ago (a scan; only when a new one comes in).
            if let Some(old) = map
                .iter()
                .min_by_key(|(_, h)| h.touched)
                .map(|(k, _)| k.clone())
            {
                map.remove(&old);
            }
        }
        let h = map
            .entry(key.to_owned())
            .or_insert_with(|| EndpointHealth::new(now));
        h.touched = now;
        f(h)
    }

    /// What is known of `key`, if anything.
    pub fn get(&self, key: &str) -> Option<EndpointHealth> {
        crate::sys::lock(&self.inner).get(key).cloned()
    }

    /// The smoothed round-trip time of `key`, if measured.
    pub fn srtt(&self, key: &str) -> Option<Duration> {
        crate::sys::lock(&self.inner).get(key).and_then(|h| h.srtt)
    }

    /// `key`'s retransmission timeout ([`EndpointHealth::rto`]).
    pub fn rto(&self, key: &str) -> Duration {
        crate::sys::lock(&self.inner)
            .get(key)
            .map_or(INITIAL_RTO, EndpointHealth::rto)
    }

    /// Notes an answer from `key` after `rtt`: the failure state is cleared.
    pub fn note_ok(&self, key: &str, rtt: Duration) {
        self.with(key, |h| {
            match h.srtt {
                None => {
                    h.srtt = Some(rtt);
                    h.rttvar = rtt / 2;
                }
                Some(s) => {
                    let diff = s.abs_diff(rtt);
                    h.rttvar = (h.rttvar * 3 + diff) / 4;
                    h.srtt = Some((s * 7 + rtt) / 8);
                }
            }
            h.failures = 0;
            h.retry_at = None;
            h.last_error = None;
        });
    }

    /// Notes a failure of `key`; returns how long it is now left alone (`failure_ttl`,
    /// doubling with each failure in a row, at most `max_failure_ttl`).
    pub fn note_failure(&self, key: &str, error: &str) -> Duration {
        let schedule = crate::model::backoff::Backoff {
            first: self.failure_ttl,
            cap: self.max_failure_ttl,
        };
        self.with(key, |h| {
            h.failures = h.failures.saturating_add(1);
            let ttl = schedule.window(h.failures);
            h.retry_at = Some(Instant::now() + ttl);
            h.last_error = Some(error.to_owned());
            ttl
        })
    }

    /// When `key` failed and its failure is still cached: how long until it may be asked.
    pub fn down(&self, key: &str) -> Option<Down> {
        let map = crate::sys::lock(&self.inner);
        let h = map.get(key)?;
        let retry_in = h.retry_at?.checked_duration_since(Instant::now())?;
        (!retry_in.is_zero()).then(|| Down {
            retry_in,
            failures: h.failures,
            error: h.last_error.clone().unwrap_or_default(),
        })
    }

    /// Endpoints known.
    pub fn len(&self) -> usize {
        crate::sys::lock(&self.inner).len()
    }

    /// True when nothing is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Endpoints whose failure is cached now.
    pub fn down_count(&self) -> usize {
        let now = Instant::now();
        crate::sys::lock(&self.inner)
            .values()
            .filter(|h| h.retry_at.is_some_and(|t| t > now))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn rtt_smoothing_follows_rfc6298() {
        let h = Health::new(8, ms(30_000), ms(300_000));
        assert_eq!(h.rto("a"), INITIAL_RTO);
        h.note_ok("a", ms(100));
        let e = h.get("a").unwrap();
        assert_eq!(e.srtt, Some(ms(100)));
        assert_eq!(e.rttvar, ms(50));
        assert_eq!(e.rto(), ms(300));
        h.note_ok("a", ms(20));
        let e = h.get("a").unwrap();
        assert_eq!(e.srtt, Some(ms(90)));
        assert_eq!(e.rttvar, ms(57) + Duration::from_micros(500));
        // Fast endpoints still get MIN_RTO.
        h.note_ok("b", Duration::from_micros(100));
        assert_eq!(h.rto("b"), MIN_RTO);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_cached_and_back_off() {
        let h = Health::new(8, ms(30_000), ms(100_000));
        assert_eq!(h.note_failure("a", "refused"), ms(30_000));
        let d = h.down("a").unwrap();
        assert_eq!((d.failures, d.error.as_str()), (1, "refused"));
        assert_eq!(h.down_count(), 1);
        tokio::time::advance(ms(30_001)).await;
        assert!(h.down("a").is_none(), "retried after failure_ttl");
        assert_eq!(h.note_failure("a", "refused"), ms(60_000));
        assert_eq!(h.note_failure("a", "refused"), ms(100_000), "capped");
        h.note_ok("a", ms(5));
        assert!(h.down("a").is_none());
        assert_eq!(h.get("a").unwrap().failures, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn bounded() {
        let h = Health::new(2, ms(1000), ms(1000));
        h.note_ok("a", ms(1));
        tokio::time::advance(ms(1)).await;
        h.note_ok("b", ms(1));
        tokio::time::advance(ms(1)).await;
        h.note_ok("c", ms(1));
        assert_eq!(h.len(), 2);
        assert!(h.get("a").is_none(), "the oldest went");
    }
}
