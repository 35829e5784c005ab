//! Connection limits shared by the listeners: an overall cap and a cap per source address.
//!
//! Every accept loop asks a [`ConnLimiter`] for a [`ConnGuard`] right after `accept` and
//! holds it for the connection's life; dropping the guard gives the slot back. Counts per
//! address live in a [`DashMap`]; an address whose count drops to zero is removed, so the
//! map never holds more entries than there are open connections.
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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Refused connections that may linger (answered, half-closed, drained) at once per limiter.
pub const MAX_LINGERING: usize = 128;
/// How long a refused connection may linger before it is closed.
pub const LINGER: Duration = Duration::from_secs(2);
/// Most bytes read (and dropped) from a lingering refused connection.
const LINGER_BYTES: usize = 64 * 1024;
/// Refusals are logged as a warning at most this often per limiter (each at debug level).
const WARN_EVERY: Duration = Duration::from_secs(10);

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

/// An overall and a per-source-address connection limit (see the module doc).
#[derive(Debug)]
pub struct ConnLimiter {
    name: &'static str,
    max_total: usize,
    max_per_address: usize,
    total: AtomicUsize,
    per_address: DashMap<IpAddr, usize>,
    lingering: AtomicUsize,
    refused: AtomicU64,
    warned: Mutex<Option<(Instant, u64)>>,
}

impl ConnLimiter {
    /// A limiter named `name` (for logs) allowing `max_total` connections in all and
    /// `max_per_address` from one source address (both at least 1).
    pub fn new(name: &'static str, max_total: usize, max_per_address: usize) -> Arc<Self> {
        Arc::new(Self {
            name,
            max_total: max_total.max(1),
            max_per_address: max_per_address.max(1),
            total: AtomicUsize::new(0),
            per_address: DashMap::new(),
            lingering: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            warned: Mutex::new(None),
        })
    }

    /// A limiter with the overall limit only.
    pub fn total_only(name: &'static str, max_total: usize) -> Arc<Self> {
        Self::new(name, max_total, usize::MAX)
    }

    /// Takes a slot for a connection from `remote` (`None`: no address, e.g. a Unix socket;
    /// only the overall limit applies).
    ///
    /// # Errors
    /// [`Refusal`] when the overall limit or the address's limit is reached.
    pub fn try_acquire(self: &Arc<Self>, remote: Option<IpAddr>) -> Result<ConnGuard, Refusal> {
        let max = self.max_total;
        if self
            .total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_err()
        {
            return Err(Refusal::Total { max });
        }
        let key = remote.map(address_key);
        if let Some(key) = key {
            // The entry holds its shard's lock: check and increment are one step.
            let mut count = self.per_address.entry(key).or_insert(0);
            if *count >= self.max_per_address {
                // Never zero here (max_per_address >= 1), so no empty entry stays behind.
                drop(count);
                self.total.fetch_sub(1, Ordering::AcqRel);
                return Err(Refusal::PerAddress {
                    max: self.max_per_address,
                });
            }
            *count += 1;
        }
        Ok(ConnGuard {
            limiter: self.clone(),
            key,
        })
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
    /// [`WARN_EVERY`] with the number refused since the last warning.
    pub fn note_refusal(&self, remote: Option<SocketAddr>, why: Refusal) {
        let total = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!(listener = self.name, remote = ?remote, %why, "connection refused");
        let now = Instant::now();
        let mut warned = self
            .warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
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
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        if let Some(key) = self.key
            && let Entry::Occupied(mut e) = self.limiter.per_address.entry(key)
        {
            if *e.get() <= 1 {
                e.remove();
            } else {
                *e.get_mut() -= 1;
            }
        }
        self.limiter.total.fetch_sub(1, Ordering::AcqRel);
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
        let l = ConnLimiter::new("test", 5, 2);
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

    #[test]
    fn limits_of_zero_mean_one() {
        let l = ConnLimiter::new("test", 0, 0);
        let g = l.try_acquire(Some(ip("127.0.0.1"))).unwrap();
        assert!(l.try_acquire(Some(ip("127.0.0.2"))).is_err());
        drop(g);
        assert_eq!(l.addresses(), 0);
    }

    #[test]
    fn total_only_ignores_addresses() {
        let l = ConnLimiter::total_only("test", 3);
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
        let l = ConnLimiter::new("test", 10, 1);
        let _g = l.try_acquire(Some(ip("2001:db8::1"))).unwrap();
        assert!(l.try_acquire(Some(ip("2001:db8::2"))).is_err());
        assert!(l.try_acquire(Some(ip("2001:db8:0:1::2"))).is_ok());
    }

    #[test]
    fn concurrent_acquire_and_release_keep_counts_exact() {
        let l = ConnLimiter::new("test", 64, 8);
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
        let l = ConnLimiter::new("test", 1, 1);
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
