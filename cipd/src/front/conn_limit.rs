//! Connection limits shared by the listeners: an overall cap and a cap per source address.
//!
//! Every accept loop asks a [`ConnLimiter`] for a [`ConnGuard`] right after `accept` and
//! holds it for the connection's life; dropping the guard gives the slot back. Counts per
//! address live in a [`DashMap`]; an address whose count drops to zero is removed, so the
//! map never holds more entries than there are open connections.
//!
//! When every slot is taken, a new connection does not simply lose (a slow-drip attacker
//! from many addresses would otherwise keep every slot): it takes the slot of a connection
//! that is worth least, as HAProxy and Envoy do under overload. Each slot knows what its
//! connection is doing: *fresh* (no request completed yet: in the TLS handshake, the CIP
//! negotiation or the first HTTP headers), *busy* (a request being answered) or *idle*
//! (between requests). A handful of slots is sampled at random, and the oldest fresh one
//! (at least [`MIN_EVICT_AGE`] old) is closed, else the longest idle one (idle at least
//! [`MIN_EVICT_IDLE`]); busy connections are never closed. Only when the sample holds
//! neither is the new connection refused. Listeners also shorten the deadline of the first
//! request as the slots fill ([`ConnLimiter::deadline`]).
//!
//! What happens over a limit (decided here, applied by each listener):
//!
//! * The accept loop never waits for a slot: it keeps taking connections from the kernel and
//!   refuses the ones over the limit at once, so a flood cannot fill the listen backlog and
//!   starve clients that are within their own address's share.
//! * CIP (plain): the RFC 2652 temporary failure `% 400 Temporarily unable to process
//!   request: too many connections` (the same line as before this module), then close. CIP
//!   over TLS: closed without an answer (answering would take a TLS handshake, which is what
//!   a flood wants us to spend).
//! * HTTP: `503 Service Unavailable` with `Retry-After` and `Connection: close`, then close.
//! * Admin socket (a Unix socket: no address): overall limit only; closed without an answer.
//!
//! Refused connections get their answer with a non-blocking write (a fresh socket's send
//! buffer always has room for one line); up to [`MAX_LINGERING`] of them at a time are then
//! half-closed and drained until the client closes (at most [`LINGER`]), so a client that
//! already sent its request still reads the answer instead of a reset. Past that they are
//! closed at once.
//!
//! IPv4 addresses (and IPv4-mapped IPv6 ones) are counted per address; IPv6 addresses per
//! /64 prefix, the smallest block a single site is normally given.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::sys::metrics::{ListenerCounters, Metrics};

/// Refused connections that may linger (answered, half-closed, drained) at once per limiter.
pub const MAX_LINGERING: usize = 128;
/// How long a refused connection may linger before it is closed.
pub const LINGER: Duration = Duration::from_secs(2);
/// Most bytes read (and dropped) from a lingering refused connection.
const LINGER_BYTES: usize = 64 * 1024;
/// Refusals are logged as a warning at most this often per limiter (each at debug level).
const WARN_EVERY: Duration = Duration::from_secs(10);
/// A connection that has not completed a request is not evicted younger than this (a good
/// client's request takes far less; a slow-drip attacker's connections are older).
pub const MIN_EVICT_AGE: Duration = Duration::from_millis(100);
/// An idle connection is not evicted before it has been idle this long.
pub const MIN_EVICT_IDLE: Duration = Duration::from_secs(1);
/// Slots looked at to choose whom to evict (all of them when there are at most
/// [`SCAN_ALL_BELOW`]).
const EVICTION_SAMPLE: usize = 16;
/// Below this many slots, eviction looks at every slot.
const SCAN_ALL_BELOW: usize = 64;
/// After one of its connections was evicted having sent no whole request in
/// [`COOLDOWN_AGE`], an address's new connections may not evict others for this long: an
/// attacker that reconnects at once cannot chase its own tail through every slot (and make
/// every slot too young to evict for a good client).
pub const EVICTION_COOLDOWN: Duration = Duration::from_secs(10);
/// A fresh connection evicted at least this old marks its address as cooling down (a good
/// client's request takes far less; an idle keep-alive connection never does).
pub const COOLDOWN_AGE: Duration = Duration::from_millis(400);
/// Most addresses remembered as recently evicted; past it, the oldest are forgotten.
const MAX_COOLING: usize = 65_536;
/// The shortest first-request deadline [`ConnLimiter::deadline`] gives under pressure.
pub const MIN_DEADLINE: Duration = Duration::from_secs(2);

/// The answer a refused plain CIP connection gets (RFC 2652 code 400, temporary failure).
pub const CIP_BUSY: &[u8] =
    b"% 400 Temporarily unable to process request: too many connections\r\n";

/// The answer a refused HTTP connection gets.
pub const HTTP_BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Content-Type: application/json\r\n\
Retry-After: 5\r\n\
Connection: close\r\n\
Content-Length: 69\r\n\
\r\n\
{\"status\":503,\"error\":\"busy\",\"message\":\"too many connections; retry\"}";

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The listener (or listener group) has `max` connections open.
    #[error("{max} connections open, the limit")]
    Total {
        /// The overall limit.
        max: usize,
    },
    /// The source address has `max` connections open.
    #[error("{max} connections open from this address, the limit")]
    PerAddress {
        /// The per-address limit.
        max: usize,
    },
}

/// What a connection is doing, for choosing whom to evict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Stage {
    /// No request completed yet.
    Fresh = 0,
    /// A request is being answered: never evicted.
    Busy = 1,
    /// Between requests.
    Idle = 2,
    /// Evicted: the connection is being closed.
    Evicted = 3,
}

/// One connection's state, shared by its guard and the limiter's registry.
#[derive(Debug)]
struct Slot {
    accepted: Instant,
    /// The address it is counted under.
    key: Option<IpAddr>,
    stage: AtomicU8,
    /// Milliseconds after `accepted` when it last became idle.
    idle_since: AtomicU64,
    /// Cancelled when the connection is evicted.
    evict: CancellationToken,
    /// The slot was handed to a new connection: its guard gives no total slot back.
    handed_over: AtomicBool,
    /// Position in the registry, valid under its lock.
    index: AtomicUsize,
}

impl Slot {
    fn idle_for(&self, now: Instant) -> Duration {
        let since = Duration::from_millis(self.idle_since.load(Ordering::Acquire));
        now.saturating_duration_since(self.accepted + since)
    }
}

/// An overall and a per-source-address connection limit (see the module doc).
#[derive(Debug)]
pub struct ConnLimiter {
    name: &'static str,
    max_total: usize,
    max_per_address: usize,
    total: AtomicUsize,
    per_address: DashMap<IpAddr, usize>,
    /// Every open connection's slot, for eviction.
    registry: Mutex<Vec<Arc<Slot>>>,
    /// Addresses whose connection was evicted lately, and when (see [`EVICTION_COOLDOWN`]).
    cooling: DashMap<IpAddr, Instant>,
    lingering: AtomicUsize,
    refused: AtomicU64,
    counters: Arc<ListenerCounters>,
    /// [`MIN_EVICT_AGE`] and [`MIN_EVICT_IDLE`] (shorter in tests).
    evict_after: (Duration, Duration),
    warned: Mutex<Option<(Instant, u64)>>,
}

impl ConnLimiter {
    /// A limiter named `name` (for logs) allowing `max_total` connections in all and
    /// `max_per_address` from one source address (both at least 1), counting into
    /// `counters`.
    pub fn new(
        name: &'static str,
        max_total: usize,
        max_per_address: usize,
        counters: Arc<ListenerCounters>,
    ) -> Arc<Self> {
        Arc::new(Self {
            name,
            max_total: max_total.max(1),
            max_per_address: max_per_address.max(1),
            total: AtomicUsize::new(0),
            per_address: DashMap::new(),
            registry: Mutex::new(Vec::new()),
            cooling: DashMap::new(),
            lingering: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            counters,
            evict_after: (MIN_EVICT_AGE, MIN_EVICT_IDLE),
            warned: Mutex::new(None),
        })
    }

    /// The same limiter with other eviction ages (a fresh connection's, an idle one's).
    #[cfg(test)]
    fn evicting_after(self: Arc<Self>, fresh: Duration, idle: Duration) -> Arc<Self> {
        let mut l = Arc::into_inner(self).expect("not shared yet");
        l.evict_after = (fresh, idle);
        Arc::new(l)
    }

    /// A limiter with the overall limit only.
    pub fn total_only(
        name: &'static str,
        max_total: usize,
        counters: Arc<ListenerCounters>,
    ) -> Arc<Self> {
        Self::new(name, max_total, usize::MAX, counters)
    }

    /// Takes a slot for a connection from `remote` (`None`: no address, e.g. a Unix socket;
    /// only the overall limit applies). When every slot is taken, the slot of a connection
    /// that is worth least is taken over (see the module doc).
    ///
    /// # Errors
    /// [`Refusal`] when the address's limit is reached, or every slot is taken and none
    /// may be evicted.
    pub fn try_acquire(self: &Arc<Self>, remote: Option<IpAddr>) -> Result<ConnGuard, Refusal> {
        let key = remote.map(address_key);
        if let Some(key) = key {
            // The entry holds its shard's lock: check and increment are one step.
            let mut count = self.per_address.entry(key).or_insert(0);
            if *count >= self.max_per_address {
                // Never zero here (max_per_address >= 1), so no empty entry stays behind.
                drop(count);
                Metrics::inc(&self.counters.refused_address);
                return Err(Refusal::PerAddress {
                    max: self.max_per_address,
                });
            }
            *count += 1;
        }
        let max = self.max_total;
        let fresh_slot = self
            .total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        let mut registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        if !fresh_slot && (self.cooling_down(key) || !self.evict_one(&mut registry)) {
            drop(registry);
            if let Some(key) = key {
                release_address(&self.per_address, key);
            }
            Metrics::inc(&self.counters.refused_total);
            return Err(Refusal::Total { max });
        }
        let slot = Arc::new(Slot {
            accepted: Instant::now(),
            key,
            stage: AtomicU8::new(Stage::Fresh as u8),
            idle_since: AtomicU64::new(0),
            evict: CancellationToken::new(),
            handed_over: AtomicBool::new(false),
            index: AtomicUsize::new(registry.len()),
        });
        registry.push(slot.clone());
        drop(registry);
        Metrics::inc(&self.counters.accepted);
        self.counters.open.inc();
        Ok(ConnGuard {
            limiter: self.clone(),
            key,
            slot,
        })
    }

    /// Closes the connection worth least among a sample of slots, handing its slot over;
    /// false when the sample holds no connection that may be evicted.
    fn evict_one(&self, registry: &mut Vec<Arc<Slot>>) -> bool {
        let now = Instant::now();
        let n = registry.len();
        let sample: Vec<usize> = if n <= SCAN_ALL_BELOW {
            (0..n).collect()
        } else {
            (0..EVICTION_SAMPLE).map(|_| fastrand::usize(..n)).collect()
        };
        // The oldest fresh connection, else the longest idle one.
        let mut best: Option<(usize, Stage, Duration)> = None;
        for i in sample {
            let slot = &registry[i];
            let (stage, score) = match slot.stage.load(Ordering::Acquire) {
                s if s == Stage::Fresh as u8 => {
                    let age = now.saturating_duration_since(slot.accepted);
                    if age < self.evict_after.0 {
                        continue;
                    }
                    (Stage::Fresh, age)
                }
                s if s == Stage::Idle as u8 => {
                    let idle = slot.idle_for(now);
                    if idle < self.evict_after.1 {
                        continue;
                    }
                    (Stage::Idle, idle)
                }
                _ => continue,
            };
            let better = match best {
                None => true,
                Some((_, Stage::Idle, _)) if stage == Stage::Fresh => true,
                Some((_, b, s)) => b == stage && score > s,
            };
            if better {
                best = Some((i, stage, score));
            }
        }
        let Some((i, stage, _)) = best else {
            return false;
        };
        let victim = registry[i].clone();
        let slow = stage == Stage::Fresh
            && now.saturating_duration_since(victim.accepted)
                >= COOLDOWN_AGE.min(self.evict_after.0 * 4);
        if let Some(key) = victim.key.filter(|_| slow) {
            if self.cooling.len() >= MAX_COOLING {
                let now = Instant::now();
                self.cooling
                    .retain(|_, at| now.saturating_duration_since(*at) < EVICTION_COOLDOWN);
            }
            if self.cooling.len() < MAX_COOLING {
                self.cooling.insert(key, Instant::now());
            }
        }
        // It may have started a request since it was looked at: then it stays.
        if victim
            .stage
            .compare_exchange(
                stage as u8,
                Stage::Evicted as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return false;
        }
        victim.handed_over.store(true, Ordering::Release);
        remove_slot(registry, &victim);
        victim.evict.cancel();
        Metrics::inc(match stage {
            Stage::Fresh => &self.counters.evicted_fresh,
            _ => &self.counters.evicted_idle,
        });
        tracing::debug!(
            listener = self.name,
            ?stage,
            "connection evicted for a new one"
        );
        true
    }

    /// Whether connections from `key` may not evict others now (one of its own was evicted
    /// less than [`EVICTION_COOLDOWN`] ago).
    fn cooling_down(&self, key: Option<IpAddr>) -> bool {
        let Some(key) = key else { return false };
        let Some(at) = self.cooling.get(&key).map(|a| *a) else {
            return false;
        };
        if at.elapsed() < EVICTION_COOLDOWN {
            return true;
        }
        self.cooling.remove_if(&key, |_, a| *a == at);
        false
    }

    /// The deadline for a new connection's first request: `base` while at most half the
    /// slots are taken, then shorter as they fill, down to [`MIN_DEADLINE`] (or `base`,
    /// when that is shorter) when all are.
    pub fn deadline(&self, base: Duration) -> Duration {
        let taken = self.total.load(Ordering::Acquire) as f64 / self.max_total as f64;
        if taken <= 0.5 {
            return base;
        }
        let floor = MIN_DEADLINE.min(base);
        base.mul_f64(((1.0 - taken) * 2.0).clamp(0.0, 1.0))
            .max(floor)
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// Connections open now from `ip` (its /64 for IPv6).
    pub fn open_from(&self, ip: IpAddr) -> usize {
        self.per_address
            .get(&address_key(ip))
            .map_or(0, |c| *c.value())
    }

    /// Source addresses with at least one open connection.
    pub fn addresses(&self) -> usize {
        self.per_address.len()
    }

    /// Connections refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Counts and logs a refusal: at debug level each time, as a warning at most every
    /// `WARN_EVERY` with the number refused since the last warning.
    pub fn note_refusal(&self, remote: Option<SocketAddr>, why: Refusal) {
        let total = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(listener = self.name, remote = ?remote, %why, "connection refused");
        let now = Instant::now();
        let mut warned = crate::sys::lock(&self.warned);
        let due = warned.is_none_or(|(at, _)| now.duration_since(at) >= WARN_EVERY);
        if due {
            let since = total - warned.map_or(0, |(_, n)| n);
            *warned = Some((now, total));
            drop(warned);
            tracing::warn!(
                listener = self.name,
                refused = since,
                last_remote = ?remote,
                reason = %why,
                "connection limit reached; refusing connections"
            );
        }
    }

    /// Refuses an accepted TCP connection: counts and logs it, writes `answer` (if any)
    /// without waiting, then closes the connection, lingering (see the module doc) on
    /// `tracker` when a lingering slot is free. Never blocks the caller.
    pub fn refuse(
        self: &Arc<Self>,
        stream: TcpStream,
        remote: SocketAddr,
        why: Refusal,
        answer: Option<&'static [u8]>,
        tracker: &TaskTracker,
        token: &CancellationToken,
    ) {
        self.note_refusal(Some(remote), why);
        let Some(answer) = answer else {
            return;
        };
        // A fresh socket's send buffer is empty: one short answer always fits.
        if !matches!(stream.try_write(answer), Ok(n) if n == answer.len()) {
            return;
        }
        let Some(slot) = self.linger_slot() else {
            return;
        };
        let token = token.clone();
        tracker.spawn(async move {
            let _slot = slot;
            tokio::select! {
                () = linger(stream) => {}
                () = token.cancelled() => {}
            }
        });
    }

    fn linger_slot(self: &Arc<Self>) -> Option<LingerSlot> {
        self.lingering
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_LINGERING).then_some(n + 1)
            })
            .ok()
            .map(|_| LingerSlot(self.clone()))
    }
}

/// Half-closes `stream` and reads until the client closes, within [`LINGER`] and
/// [`LINGER_BYTES`], so the answer already written is not lost to a reset.
async fn linger(mut stream: TcpStream) {
    let work = async {
        stream.shutdown().await?;
        let mut buf = [0u8; 4096];
        let mut read = 0;
        while read < LINGER_BYTES {
            match stream.read(&mut buf).await? {
                0 => break,
                n => read += n,
            }
        }
        std::io::Result::Ok(())
    };
    let _ = tokio::time::timeout(LINGER, work).await;
}

struct LingerSlot(Arc<ConnLimiter>);

impl Drop for LingerSlot {
    fn drop(&mut self) {
        self.0.lingering.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's slot; dropping it gives the slot back.
#[derive(Debug)]
pub struct ConnGuard {
    limiter: Arc<ConnLimiter>,
    key: Option<IpAddr>,
    slot: Arc<Slot>,
}

impl ConnGuard {
    /// Resolves when the connection is evicted for a new one: the connection task should
    /// then end at once.
    pub fn evicted(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.slot.evict.clone().cancelled_owned()
    }

    /// The handle a connection's request loop reports its stage through.
    pub fn activity(&self) -> Activity {
        Activity(self.slot.clone())
    }
}

/// A connection's stage, reported by its request loop ([`Activity::begin`] when a request
/// has been read, [`Activity::end`] when it has been answered).
#[derive(Debug, Clone)]
pub struct Activity(Arc<Slot>);

impl Activity {
    /// A request was read and is being answered: the connection may not be evicted until
    /// [`Activity::end`]. False when it was evicted already (the caller should stop).
    pub fn begin(&self) -> bool {
        let stage = &self.0.stage;
        let mut current = stage.load(Ordering::Acquire);
        loop {
            if current == Stage::Evicted as u8 {
                return false;
            }
            match stage.compare_exchange(
                current,
                Stage::Busy as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(now) => current = now,
            }
        }
    }

    /// The request was answered: the connection is idle until its next one.
    pub fn end(&self) {
        let since = self.0.accepted.elapsed().as_millis();
        self.0
            .idle_since
            .store(u64::try_from(since).unwrap_or(u64::MAX), Ordering::Release);
        let _ = self.0.stage.compare_exchange(
            Stage::Busy as u8,
            Stage::Idle as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// What the connection is doing.
    pub fn stage(&self) -> Stage {
        match self.0.stage.load(Ordering::Acquire) {
            0 => Stage::Fresh,
            1 => Stage::Busy,
            2 => Stage::Idle,
            _ => Stage::Evicted,
        }
    }
}

impl crate::transport::RequestActivity for Activity {
    fn begin(&self) -> bool {
        Activity::begin(self)
    }

    fn end(&self) {
        Activity::end(self);
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            release_address(&self.limiter.per_address, key);
        }
        self.limiter.counters.open.dec();
        // An evicted connection's total slot went to the connection that evicted it. Read
        // under the registry's lock, which eviction holds while it hands the slot over.
        let mut registry = self
            .limiter
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !self.slot.handed_over.load(Ordering::Acquire) {
            remove_slot(&mut registry, &self.slot);
            drop(registry);
            self.limiter.total.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Removes `slot` from the registry (swapping the last one into its place).
fn remove_slot(registry: &mut Vec<Arc<Slot>>, slot: &Arc<Slot>) {
    let i = slot.index.load(Ordering::Acquire);
    if registry.get(i).is_some_and(|s| Arc::ptr_eq(s, slot)) {
        registry.swap_remove(i);
        if let Some(moved) = registry.get(i) {
            moved.index.store(i, Ordering::Release);
        }
    }
}

/// Gives one per-address count back, removing the entry at zero.
fn release_address(map: &DashMap<IpAddr, usize>, key: IpAddr) {
    if let Entry::Occupied(mut e) = map.entry(key) {
        if *e.get() <= 1 {
            e.remove();
        } else {
            *e.get_mut() -= 1;
        }
    }
}

/// Whether the peer of a just-accepted connection has closed it already (it sent FIN or
/// RST before we took it off the backlog, as a connect/close flood does): such a
/// connection is dropped at once, without a slot, a task or an answer. One non-blocking
/// `recv(MSG_PEEK)`; data waiting (a client that speaks first) leaves it untouched.
pub fn peer_gone(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match rustix::net::recv(
        stream,
        &mut byte[..],
        rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
    ) {
        Ok((0, _)) => true,
        Ok(_) => false,
        Err(e) => e != rustix::io::Errno::AGAIN && e != rustix::io::Errno::INTR,
    }
}

impl ConnLimiter {
    /// Counts a connection dropped at accept because its peer had closed it.
    pub fn note_gone(&self) {
        Metrics::inc(&self.counters.gone_at_accept);
    }
}

/// The key an address is counted under: IPv4 as it is (IPv4-mapped IPv6 addresses too),
/// IPv6 by its /64 prefix.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !u128::from(u64::MAX);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn per_address_and_total_limits() {
        let l = ConnLimiter::new("test", 5, 2, Arc::default());
        let a1 = l.try_acquire(Some(ip("192.0.2.1"))).unwrap();
        let a2 = l.try_acquire(Some(ip("192.0.2.1"))).unwrap();
        assert_eq!(
            l.try_acquire(Some(ip("192.0.2.1"))).unwrap_err(),
            Refusal::PerAddress { max: 2 }
        );
        // A refusal by address gives its total slot back.
        assert_eq!(l.open(), 2);
        let b1 = l.try_acquire(Some(ip("192.0.2.2"))).unwrap();
        let b2 = l.try_acquire(Some(ip("192.0.2.2"))).unwrap();
        let none = l.try_acquire(None).unwrap();
        assert_eq!(l.open(), 5);
        assert_eq!(
            l.try_acquire(Some(ip("192.0.2.3"))).unwrap_err(),
            Refusal::Total { max: 5 }
        );
        assert_eq!(l.try_acquire(None).unwrap_err(), Refusal::Total { max: 5 });
        // A refused address leaves no entry behind.
        assert_eq!(l.addresses(), 2);
        drop(a1);
        assert_eq!(l.open_from(ip("192.0.2.1")), 1);
        let a3 = l.try_acquire(Some(ip("192.0.2.1"))).unwrap();
        drop((a2, a3, b1));
        assert_eq!(l.open_from(ip("192.0.2.1")), 0);
        assert_eq!(l.addresses(), 1, "zero entries are removed");
        drop((b2, none));
        assert_eq!(l.open(), 0);
        assert_eq!(l.addresses(), 0);
    }

    #[tokio::test]
    async fn a_full_limiter_evicts_the_oldest_fresh_then_the_longest_idle_never_a_busy_one() {
        let counters = Arc::new(ListenerCounters::default());
        let l = ConnLimiter::new("test", 3, 10, counters.clone())
            .evicting_after(Duration::ZERO, Duration::ZERO);
        let old_fresh = l.try_acquire(Some(ip("192.0.2.1"))).unwrap();
        let busy = l.try_acquire(Some(ip("192.0.2.2"))).unwrap();
        assert!(busy.activity().begin());
        let idle = l.try_acquire(Some(ip("192.0.2.3"))).unwrap();
        assert!(idle.activity().begin());
        idle.activity().end();
        assert_eq!(idle.activity().stage(), Stage::Idle);
        // Full: the fresh one goes first, though the idle one is younger.
        let a = l.try_acquire(Some(ip("192.0.2.4"))).unwrap();
        old_fresh.evicted().await;
        assert_eq!(old_fresh.activity().stage(), Stage::Evicted);
        assert!(!old_fresh.activity().begin(), "an evicted connection stops");
        assert_eq!(l.open(), 3);
        drop(old_fresh);
        assert_eq!(l.open(), 3, "its slot went to the new connection");
        // Then the new fresh one (now the only fresh one), then the idle one.
        let b = l.try_acquire(Some(ip("192.0.2.5"))).unwrap();
        a.evicted().await;
        drop(a);
        assert!(b.activity().begin());
        let c = l.try_acquire(Some(ip("192.0.2.6"))).unwrap();
        idle.evicted().await;
        drop(idle);
        // Busy ones stay: with every slot busy or too young, a new one is refused.
        assert!(c.activity().begin());
        assert_eq!(
            l.try_acquire(Some(ip("192.0.2.7"))).unwrap_err(),
            Refusal::Total { max: 3 }
        );
        assert_eq!(l.addresses(), 3, "the refused address left no entry");
        assert_eq!(counters.evicted_fresh.get(), 2);
        assert_eq!(counters.evicted_idle.get(), 1);
        assert_eq!(counters.refused_total.get(), 1);
        assert_eq!(counters.accepted.get(), 6);
        assert_eq!(counters.open.get(), 3);
        drop((busy, b, c));
        assert_eq!((l.open(), l.addresses(), counters.open.get()), (0, 0, 0));
        assert!(l.registry.lock().unwrap().is_empty());
    }

    #[test]
    fn young_connections_are_not_evicted_and_deadlines_shrink_as_slots_fill() {
        let l = ConnLimiter::new("test", 4, 10, Arc::default());
        let base = Duration::from_secs(60);
        assert_eq!(l.deadline(base), base);
        let g: Vec<_> = (0..3).map(|_| l.try_acquire(None).unwrap()).collect();
        assert_eq!(l.deadline(base), Duration::from_secs(30));
        let last = l.try_acquire(None).unwrap();
        assert_eq!(l.deadline(base), MIN_DEADLINE);
        assert_eq!(l.deadline(Duration::from_secs(1)), Duration::from_secs(1));
        // All younger than MIN_EVICT_AGE: refused, nobody evicted.
        assert_eq!(l.try_acquire(None).unwrap_err(), Refusal::Total { max: 4 });
        assert!(
            g.iter()
                .chain([&last])
                .all(|g| g.activity().stage() == Stage::Fresh)
        );
    }

    #[test]
    fn limits_of_zero_mean_one() {
        let l = ConnLimiter::new("test", 0, 0, Arc::default());
        let g = l.try_acquire(Some(ip("127.0.0.1"))).unwrap();
        assert!(l.try_acquire(Some(ip("127.0.0.2"))).is_err());
        drop(g);
        assert_eq!(l.addresses(), 0);
    }

    #[test]
    fn total_only_ignores_addresses() {
        let l = ConnLimiter::total_only("test", 3, Arc::default());
        let g: Vec<_> = (0..3)
            .map(|_| l.try_acquire(Some(ip("127.0.0.1"))).unwrap())
            .collect();
        assert_eq!(
            l.try_acquire(Some(ip("127.0.0.1"))).unwrap_err(),
            Refusal::Total { max: 3 }
        );
        drop(g);
        assert_eq!((l.open(), l.addresses()), (0, 0));
    }

    #[test]
    fn address_keys() {
        assert_eq!(address_key(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(address_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(
            address_key(ip("2001:db8:1:2:3:4:5:6")),
            ip("2001:db8:1:2::")
        );
        // One /64 shares one count.
        let l = ConnLimiter::new("test", 10, 1, Arc::default());
        let _g = l.try_acquire(Some(ip("2001:db8::1"))).unwrap();
        assert!(l.try_acquire(Some(ip("2001:db8::2"))).is_err());
        assert!(l.try_acquire(Some(ip("2001:db8:0:1::2"))).is_ok());
    }

    #[test]
    fn concurrent_acquire_and_release_keep_counts_exact() {
        let l = ConnLimiter::new("test", 64, 8, Arc::default());
        std::thread::scope(|s| {
            for t in 0..8u8 {
                let l = &l;
                s.spawn(move || {
                    for i in 0..2000u32 {
                        let a = IpAddr::from([10, 0, t % 3, (i % 5) as u8]);
                        let g = l.try_acquire(Some(a));
                        if let Ok(g) = g {
                            assert!(l.open() <= 64);
                            assert!(l.open_from(a) <= 8);
                            drop(g);
                        }
                    }
                });
            }
        });
        assert_eq!(l.open(), 0);
        assert_eq!(l.addresses(), 0, "every entry removed at zero");
    }

    #[test]
    fn http_busy_is_a_complete_response() {
        let text = std::str::from_utf8(HTTP_BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(len, body.len());
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["status"], 503);
    }

    #[tokio::test]
    async fn refused_clients_read_the_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let l = ConnLimiter::new("test", 1, 1, Arc::default());
        let (tracker, token) = (TaskTracker::new(), CancellationToken::new());
        let mut held = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (first, remote) = listener.accept().await.unwrap();
        let _guard = l.try_acquire(Some(remote.ip())).unwrap();
        // The second client sends a request before it is refused, as HTTP clients do.
        let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
        second
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let (stream, remote) = listener.accept().await.unwrap();
        let why = l.try_acquire(Some(remote.ip())).unwrap_err();
        l.refuse(stream, remote, why, Some(HTTP_BUSY), &tracker, &token);
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), second.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(out, HTTP_BUSY);
        assert_eq!(l.refused(), 1);
        tracker.close();
        tracker.wait().await;
        drop(first);
        let mut buf = [0u8; 1];
        assert_eq!(held.read(&mut buf).await.unwrap(), 0);
    }
}
