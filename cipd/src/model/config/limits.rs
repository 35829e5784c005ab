//! `[limits]`: sizes, counts and timeouts, each with a safe default.

use std::time::Duration;

use serde::Deserialize;

use super::validate::Validator;

/// Default `limits.stall_timeout`: an exchange in which no byte moves this long has
/// stalled (a peer that stopped answering, a middlebox that dropped the connection).
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(20);
/// Default `limits.tcp_keepalive`.
pub const DEFAULT_TCP_KEEPALIVE: Duration = Duration::from_secs(10);

/// `[limits]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// Most simultaneous CIP connections.
    pub max_connections: Option<usize>,
    /// Most simultaneous CIP connections from one source address.
    pub max_connections_per_address: Option<usize>,
    /// Most simultaneous HTTP connections.
    pub max_http_connections: Option<usize>,
    /// Most simultaneous HTTP connections from one source address.
    pub max_http_connections_per_address: Option<usize>,
    /// Connections the kernel queues per listener before the accept loop takes them.
    pub listen_backlog: Option<usize>,
    /// Largest CIP message (one dot-terminated frame), bytes.
    pub max_frame_size: Option<usize>,
    /// Bytes of request bodies all connections together may hold beyond a small free
    /// allowance each (CIP frames, CIP-over-HTTP and RDM bodies).
    pub max_inflight_bytes: Option<u64>,
    /// Largest single SOIF value, bytes.
    pub max_value_size: Option<usize>,
    /// Longest line on the CIP stream, bytes.
    pub max_line_length: Option<usize>,
    /// Wait for the version line after the banner.
    pub handshake_timeout: Option<String>,
    /// Idle time allowed between requests on one connection.
    pub idle_timeout: Option<String>,
    /// Time allowed to receive one whole request.
    pub request_timeout: Option<String>,
    /// Time allowed to open a connection to a peer.
    pub connect_timeout: Option<String>,
    /// Time allowed for one whole poll or push exchange.
    pub poll_timeout: Option<String>,
    /// Time no byte may move in either direction during an exchange with a peer before it
    /// fails (default `"20s"`).
    pub stall_timeout: Option<String>,
    /// Idle time before TCP keepalive probes on mesh connections (default `"10s"`; probes
    /// every third of it, three unanswered end the connection); `"0s"`: no keepalive.
    pub tcp_keepalive: Option<String>,
    /// How long a peer we poll may stay unreachable before its hint leaves the table
    /// (default `"10m"`); `"0s"`: never.
    pub peer_gone_after: Option<String>,
    /// How long a stopping node spends telling its pollers it goes (a last `datachanged`,
    /// retried), after its listeners close (default `"2s"`); `"0s"`: it does not tell them.
    pub farewell_timeout: Option<String>,
    /// Half-life of a polled peer's damping penalty (RFC 2439; default `"15s"`): each
    /// changed answer adds 1, halving every half-life; `"0s"`: no damping.
    pub damping_half_life: Option<String>,
    /// Penalty above which a peer is damped: its `datachanged` no longer makes us poll it
    /// at once, and its changes are taken together later (default 30: a peer whose answer
    /// changes more than about once every 1.5 s for a minute, not a burst while a mesh
    /// converges).
    pub damping_suppress: Option<u64>,
    /// Penalty below which a damped peer is released (default 10).
    pub damping_reuse: Option<u64>,
    /// Longest a damped peer's changes are held (default `"10m"`).
    pub damping_max_hold: Option<String>,
    /// While a peer is damped, its held changes are taken together at most this often
    /// (default `"1s"`; `"0s"`: only once its penalty has decayed, as RFC 2439 holds a
    /// route).
    pub damping_take_every: Option<String>,
    /// The window of the first retry after a transient failure (default `"250ms"`): the
    /// retry comes at a random moment within it, and the window doubles while failures
    /// persist, up to `max_transient_backoff`.
    pub transient_backoff: Option<String>,
    /// The longest wait between retries of a peer whose failures are transient (default
    /// `"1m"`): a peer that comes back is polled again within it.
    pub max_transient_backoff: Option<String>,
    /// Time allowed for one HTTP request.
    pub http_timeout: Option<String>,
    /// Time an HTTP connection may take to send a request's headers, and may sit idle
    /// between requests.
    pub http_idle_timeout: Option<String>,
    /// Grace period for in-flight work at shutdown.
    pub shutdown_grace: Option<String>,
    /// Longest wait between polls after repeated failures.
    pub max_backoff: Option<String>,
    /// Most referrals one query returns.
    pub max_referrals: Option<usize>,
    /// Referrals per `/v1/referrals` answer when the request names no `limit`.
    pub default_referrals: Option<usize>,
    /// Bytes of recent referral answers kept (0: none).
    pub answer_cache_bytes: Option<usize>,
    /// Queries that may scan (substrings, unindexed attributes) evaluated at once.
    pub max_concurrent_scans: Option<usize>,
    /// Polls under way at once.
    pub max_concurrent_polls: Option<usize>,
    /// Most objects `/v1/objects` returns.
    pub max_objects: Option<usize>,
    /// Most objects one query may read from disk to check terms on attributes that are not
    /// indexed.
    pub local_scan_max_objects: Option<usize>,
    /// Whether each collection's cache file stays open while it is loaded.
    pub keep_collection_files_open: Option<bool>,
    /// How often collection files are checked for changes (`"0s"` = never).
    pub watch_interval: Option<String>,
    /// Most datasets (peer DSIs) in the routing table.
    pub max_table_peers: Option<usize>,
    /// Most weightlist entries in one in-bound hint.
    pub max_hint_entries: Option<usize>,
    /// Longest weightlist value in an in-bound hint, bytes.
    pub max_hint_value_length: Option<usize>,
    /// Most provenance DSIs on one in-bound hint.
    pub max_provenance: Option<usize>,
    /// Most distinct `Template:Attribute` keys in the routing table.
    pub max_table_attributes: Option<usize>,
    /// Largest `Total-Object-Count` an in-bound hint may claim.
    pub max_total_objects: Option<u64>,
    /// Memory budget of one peer's hint in the routing table, bytes.
    pub max_peer_table_bytes: Option<u64>,
    /// Memory budget of all hints in the routing table, bytes.
    pub max_table_bytes: Option<u64>,
    /// Most `&`-joined terms in one query.
    pub max_query_terms: Option<usize>,
    /// Longest query, bytes.
    pub max_query_length: Option<usize>,
    /// Admin socket connections served at once.
    pub max_admin_connections: Option<usize>,
    /// Longest admin request line, bytes.
    pub max_admin_request: Option<usize>,
    /// Idle time after which an admin connection is closed.
    pub admin_idle_timeout: Option<String>,
}

/// Sizes, counts and timeouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most simultaneous CIP connections, plain and TLS listeners together (default 1024).
    /// Takes effect at restart.
    pub max_connections: usize,
    /// Most simultaneous CIP connections from one source address (an IPv6 /64) (default
    /// 64). Takes effect at restart.
    pub max_connections_per_address: usize,
    /// Most simultaneous HTTP connections, all HTTP listeners together (default 1024).
    /// Takes effect at restart.
    pub max_http_connections: usize,
    /// Most simultaneous HTTP connections from one source address (an IPv6 /64) (default
    /// 256; raise it behind a reverse proxy). Takes effect at restart.
    pub max_http_connections_per_address: usize,
    /// Connections the kernel holds per TCP listener until the accept loop takes them
    /// (default 4096; the kernel caps it at `net.core.somaxconn`). A burst of connections
    /// past it is dropped by the kernel before the limits above can answer it. Takes
    /// effect at restart.
    pub listen_backlog: usize,
    /// Largest CIP frame (default 64 MiB).
    pub max_frame_size: usize,
    /// Bytes of request bodies all connections together may hold beyond 64 KiB each
    /// (default 256 MiB): a request that would pass it waits within its deadline, then is
    /// refused as temporary (CIP 400, HTTP 503). Takes effect at restart.
    pub max_inflight_bytes: u64,
    /// Largest SOIF value (default 16 MiB).
    pub max_value_size: usize,
    /// Longest CIP line (default 64 KiB).
    pub max_line_length: usize,
    /// Handshake timeout (default 60 s).
    pub handshake_timeout: Duration,
    /// Idle timeout (default 300 s).
    pub idle_timeout: Duration,
    /// Request timeout (default 300 s).
    pub request_timeout: Duration,
    /// Connect timeout (default 10 s).
    pub connect_timeout: Duration,
    /// Poll/push exchange timeout (default 120 s).
    pub poll_timeout: Duration,
    /// Time no byte may move during an exchange with a peer before it fails.
    pub stall_timeout: Duration,
    /// Idle time before TCP keepalive probes on mesh connections; zero: none.
    pub tcp_keepalive: Duration,
    /// How long a polled peer may stay unreachable before its hint leaves the table; zero:
    /// never.
    pub peer_gone_after: Duration,
    /// How long a stopping node spends on its farewell `datachanged`; zero: none.
    pub farewell_timeout: Duration,
    /// Half-life of a polled peer's damping penalty; zero: no damping.
    pub damping_half_life: Duration,
    /// Penalty above which a polled peer is damped.
    pub damping_suppress: u64,
    /// Penalty below which a damped peer is released.
    pub damping_reuse: u64,
    /// Longest a damped peer's changes are held.
    pub damping_max_hold: Duration,
    /// While a peer is damped, how often its held changes are taken together (zero: only
    /// once its penalty has decayed).
    pub damping_take_every: Duration,
    /// The window of the first retry after a transient failure (default 250 ms).
    pub transient_backoff: Duration,
    /// The longest wait between retries after transient failures.
    pub max_transient_backoff: Duration,
    /// HTTP request timeout (default 30 s).
    pub http_timeout: Duration,
    /// HTTP header-read and keep-alive idle timeout (default 60 s).
    pub http_idle_timeout: Duration,
    /// Shutdown grace (default 10 s).
    pub shutdown_grace: Duration,
    /// Backoff cap (default 1 h).
    pub max_backoff: Duration,
    /// Referrals per query (default 100).
    pub max_referrals: usize,
    /// Referrals per `/v1/referrals` answer when the request names no `limit` (default
    /// 10, at most `max_referrals`): the best few are what a client follows, and the
    /// answer says `"more": true` when others rank below them.
    pub default_referrals: usize,
    /// Bytes of recent referral answers kept, each valid until the table, the local hint
    /// or the configuration changes (default 32 MiB, oldest first out; 0 turns the cache
    /// off).
    pub answer_cache_bytes: usize,
    /// Queries that may scan (substrings, unindexed local attributes) evaluated at once on
    /// the blocking pool; more wait their turn without holding a thread (default: the CPU
    /// count). Exact lookups are not counted.
    pub max_concurrent_scans: usize,
    /// Polls under way at once, from connecting to the hint's import (default: 128, or
    /// three in eight of the polled peers up to 384: `super::pipeline::scale_to_peers`); more
    /// wait their turn. Bounds the answers held in memory while a hub polls hundreds of
    /// peers at start. Takes effect at restart.
    pub max_concurrent_polls: usize,
    /// Objects per `/v1/objects` answer (default 1000).
    pub max_objects: usize,
    /// Objects one local query may read from disk to check terms on unindexed attributes
    /// (default 100,000); past that the query is refused as not indexed.
    pub local_scan_max_objects: usize,
    /// Whether each collection's cache file stays open while the collection is loaded
    /// (default true: one open file a collection, and a reload's new file leaves reads of
    /// the old one whole). Off, a file is opened for each object read and checked to be the
    /// file indexed: for a process with more collections than it may hold files open (many
    /// nodes in one simulator, thousands of small collections). Takes effect at the next
    /// load of each collection.
    pub keep_collection_files_open: bool,
    /// Collection change check interval; `None` = never (default 30 s).
    pub watch_interval: Option<Duration>,
    /// Routing table bounds (defaults: 10,000 peers, 20,000,000 entries per hint, 4 KiB
    /// values, 65,536 provenance DSIs, 65,536 attributes). Take effect at restart.
    pub table: hints::table::TableLimits,
    /// Query bounds (default 16 terms, 4096 bytes).
    pub query: hints::query::QueryLimits,
    /// Admin socket bounds (default 16 connections, 64 KiB requests, 60 s idle). Take
    /// effect at restart.
    pub admin: AdminLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_connections_per_address: 64,
            max_http_connections: 1024,
            max_http_connections_per_address: 256,
            listen_backlog: 4096,
            max_frame_size: 64 << 20,
            max_inflight_bytes: 256 << 20,
            max_value_size: 16 << 20,
            max_line_length: 64 << 10,
            handshake_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(300),
            request_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            poll_timeout: Duration::from_secs(120),
            stall_timeout: DEFAULT_STALL_TIMEOUT,
            tcp_keepalive: DEFAULT_TCP_KEEPALIVE,
            peer_gone_after: Duration::from_secs(600),
            farewell_timeout: Duration::from_secs(2),
            damping_half_life: Duration::from_secs(15),
            damping_suppress: 30,
            damping_reuse: 10,
            damping_max_hold: Duration::from_secs(600),
            damping_take_every: Duration::from_secs(1),
            transient_backoff: Duration::from_millis(250),
            max_transient_backoff: Duration::from_secs(60),
            http_timeout: Duration::from_secs(30),
            http_idle_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(10),
            max_backoff: Duration::from_secs(3600),
            max_referrals: 100,
            default_referrals: 10,
            answer_cache_bytes: 32 << 20,
            max_concurrent_scans: std::thread::available_parallelism().map_or(2, usize::from),
            max_concurrent_polls: 128,
            max_objects: 1000,
            local_scan_max_objects: DEFAULT_SCAN_MAX_OBJECTS,
            keep_collection_files_open: true,
            watch_interval: Some(Duration::from_secs(30)),
            table: table_limits_for(crate::sys::memory::available()),
            query: hints::query::QueryLimits::default(),
            admin: AdminLimits::default(),
        }
    }
}

impl Validator<'_> {
    pub(super) fn limits(&mut self, mut raw: RawLimits) -> Limits {
        let d = Limits::default();
        let explicit_default_referrals = raw.default_referrals.is_some();
        let watch_interval = self.watch_interval(raw.watch_interval.as_deref(), d.watch_interval);
        let mut limits = Limits {
            max_connections: self.positive(
                "limits.max_connections",
                raw.max_connections,
                d.max_connections,
            ),
            max_connections_per_address: self.positive(
                "limits.max_connections_per_address",
                raw.max_connections_per_address,
                d.max_connections_per_address,
            ),
            max_http_connections: self.positive(
                "limits.max_http_connections",
                raw.max_http_connections,
                d.max_http_connections,
            ),
            max_http_connections_per_address: self.positive(
                "limits.max_http_connections_per_address",
                raw.max_http_connections_per_address,
                d.max_http_connections_per_address,
            ),
            listen_backlog: self.positive(
                "limits.listen_backlog",
                raw.listen_backlog,
                d.listen_backlog,
            ),
            max_frame_size: self.positive(
                "limits.max_frame_size",
                raw.max_frame_size,
                d.max_frame_size,
            ),
            max_inflight_bytes: self.positive_u64(
                "limits.max_inflight_bytes",
                raw.max_inflight_bytes,
                d.max_inflight_bytes,
            ),
            max_value_size: self.positive(
                "limits.max_value_size",
                raw.max_value_size,
                d.max_value_size,
            ),
            max_line_length: self.positive(
                "limits.max_line_length",
                raw.max_line_length,
                d.max_line_length,
            ),
            handshake_timeout: self.duration(
                "limits.handshake_timeout",
                raw.handshake_timeout.take(),
                d.handshake_timeout,
            ),
            idle_timeout: self.duration(
                "limits.idle_timeout",
                raw.idle_timeout.take(),
                d.idle_timeout,
            ),
            request_timeout: self.duration(
                "limits.request_timeout",
                raw.request_timeout.take(),
                d.request_timeout,
            ),
            connect_timeout: self.duration(
                "limits.connect_timeout",
                raw.connect_timeout.take(),
                d.connect_timeout,
            ),
            poll_timeout: self.duration(
                "limits.poll_timeout",
                raw.poll_timeout.take(),
                d.poll_timeout,
            ),
            stall_timeout: self.duration(
                "limits.stall_timeout",
                raw.stall_timeout.take(),
                d.stall_timeout,
            ),
            tcp_keepalive: match raw.tcp_keepalive.as_deref().map(str::trim) {
                Some("0" | "0s" | "off") => Duration::ZERO,
                _ => self.duration(
                    "limits.tcp_keepalive",
                    raw.tcp_keepalive.take(),
                    d.tcp_keepalive,
                ),
            },
            peer_gone_after: match raw.peer_gone_after.as_deref().map(str::trim) {
                Some("0" | "0s" | "off") => Duration::ZERO,
                _ => self.duration(
                    "limits.peer_gone_after",
                    raw.peer_gone_after.take(),
                    d.peer_gone_after,
                ),
            },
            farewell_timeout: match raw.farewell_timeout.as_deref().map(str::trim) {
                Some("0" | "0s" | "off") => Duration::ZERO,
                _ => self.duration(
                    "limits.farewell_timeout",
                    raw.farewell_timeout.take(),
                    d.farewell_timeout,
                ),
            },
            damping_half_life: match raw.damping_half_life.as_deref().map(str::trim) {
                Some("0" | "0s" | "off") => Duration::ZERO,
                _ => self.duration(
                    "limits.damping_half_life",
                    raw.damping_half_life.take(),
                    d.damping_half_life,
                ),
            },
            damping_suppress: self.positive_u64(
                "limits.damping_suppress",
                raw.damping_suppress,
                d.damping_suppress,
            ),
            damping_reuse: self.positive_u64(
                "limits.damping_reuse",
                raw.damping_reuse,
                d.damping_reuse,
            ),
            damping_max_hold: self.duration(
                "limits.damping_max_hold",
                raw.damping_max_hold.take(),
                d.damping_max_hold,
            ),
            damping_take_every: match raw.damping_take_every.as_deref().map(str::trim) {
                Some("0" | "0s" | "off") => Duration::ZERO,
                _ => self.duration(
                    "limits.damping_take_every",
                    raw.damping_take_every.take(),
                    d.damping_take_every,
                ),
            },
            transient_backoff: self.duration(
                "limits.transient_backoff",
                raw.transient_backoff.take(),
                d.transient_backoff,
            ),
            max_transient_backoff: self.duration(
                "limits.max_transient_backoff",
                raw.max_transient_backoff.take(),
                d.max_transient_backoff,
            ),
            http_timeout: self.duration(
                "limits.http_timeout",
                raw.http_timeout.take(),
                d.http_timeout,
            ),
            http_idle_timeout: self.duration(
                "limits.http_idle_timeout",
                raw.http_idle_timeout.take(),
                d.http_idle_timeout,
            ),
            shutdown_grace: self.duration(
                "limits.shutdown_grace",
                raw.shutdown_grace.take(),
                d.shutdown_grace,
            ),
            max_backoff: self.duration("limits.max_backoff", raw.max_backoff.take(), d.max_backoff),
            max_referrals: self.positive(
                "limits.max_referrals",
                raw.max_referrals,
                d.max_referrals,
            ),
            default_referrals: self.positive(
                "limits.default_referrals",
                raw.default_referrals,
                d.default_referrals,
            ),
            answer_cache_bytes: raw.answer_cache_bytes.unwrap_or(d.answer_cache_bytes),
            max_concurrent_scans: self.positive(
                "limits.max_concurrent_scans",
                raw.max_concurrent_scans,
                d.max_concurrent_scans,
            ),
            max_concurrent_polls: self.positive(
                "limits.max_concurrent_polls",
                raw.max_concurrent_polls,
                d.max_concurrent_polls,
            ),
            max_objects: self.positive("limits.max_objects", raw.max_objects, d.max_objects),
            local_scan_max_objects: self.positive(
                "limits.local_scan_max_objects",
                raw.local_scan_max_objects,
                d.local_scan_max_objects,
            ),
            keep_collection_files_open: raw
                .keep_collection_files_open
                .unwrap_or(d.keep_collection_files_open),
            watch_interval,
            table: self.table_limits(&raw, d.table),
            query: self.query_limits(&raw, d.query),
            admin: self.admin_limits(&mut raw, d.admin),
        };
        if limits.damping_reuse >= limits.damping_suppress {
            self.err(
                "limits.damping_reuse",
                format!(
                    "must be below limits.damping_suppress ({})",
                    limits.damping_suppress
                ),
            );
        }
        if limits.default_referrals > limits.max_referrals && !explicit_default_referrals {
            // Only max_referrals was lowered: the page is all of it.
            limits.default_referrals = limits.max_referrals;
        } else if limits.default_referrals > limits.max_referrals {
            self.err(
                "limits.default_referrals",
                format!(
                    "must not exceed limits.max_referrals ({})",
                    limits.max_referrals
                ),
            );
        }
        limits
    }

    /// `limits.watch_interval`: `0` turns watching off.
    fn watch_interval(&mut self, raw: Option<&str>, default: Option<Duration>) -> Option<Duration> {
        match raw {
            None => default,
            Some(s) => match humantime::parse_duration(s) {
                Ok(x) if x.is_zero() => None,
                Ok(x) => Some(x),
                Err(e) => {
                    self.err(
                        "limits.watch_interval",
                        format!("{s:?} is not a duration ({e})"),
                    );
                    default
                }
            },
        }
    }

    fn table_limits(
        &mut self,
        raw: &RawLimits,
        d: hints::table::TableLimits,
    ) -> hints::table::TableLimits {
        hints::table::TableLimits {
            max_peers: self.positive("limits.max_table_peers", raw.max_table_peers, d.max_peers),
            max_entries_per_hint: self.positive(
                "limits.max_hint_entries",
                raw.max_hint_entries,
                d.max_entries_per_hint,
            ),
            max_value_len: self.positive(
                "limits.max_hint_value_length",
                raw.max_hint_value_length,
                d.max_value_len,
            ),
            max_provenance: self.positive(
                "limits.max_provenance",
                raw.max_provenance,
                d.max_provenance,
            ),
            max_attributes: self.positive(
                "limits.max_table_attributes",
                raw.max_table_attributes,
                d.max_attributes,
            ),
            max_total_objects: match raw.max_total_objects {
                Some(0) => {
                    self.err("limits.max_total_objects", "must be at least 1");
                    d.max_total_objects
                }
                Some(n) => n,
                None => d.max_total_objects,
            },
            max_peer_bytes: self.positive_u64(
                "limits.max_peer_table_bytes",
                raw.max_peer_table_bytes,
                d.max_peer_bytes,
            ),
            max_table_bytes: self.positive_u64(
                "limits.max_table_bytes",
                raw.max_table_bytes,
                d.max_table_bytes,
            ),
        }
    }

    fn query_limits(
        &mut self,
        raw: &RawLimits,
        d: hints::query::QueryLimits,
    ) -> hints::query::QueryLimits {
        hints::query::QueryLimits {
            max_terms: self.positive("limits.max_query_terms", raw.max_query_terms, d.max_terms),
            max_len: self.positive("limits.max_query_length", raw.max_query_length, d.max_len),
        }
    }

    fn admin_limits(&mut self, raw: &mut RawLimits, d: AdminLimits) -> AdminLimits {
        AdminLimits {
            max_connections: self.positive(
                "limits.max_admin_connections",
                raw.max_admin_connections,
                d.max_connections,
            ),
            max_request: self.positive(
                "limits.max_admin_request",
                raw.max_admin_request,
                d.max_request,
            ),
            idle_timeout: self.duration(
                "limits.admin_idle_timeout",
                raw.admin_idle_timeout.take(),
                d.idle_timeout,
            ),
        }
    }
}

/// Limits of the admin listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminLimits {
    /// Connections served at once; more are closed at once (the accept loop never waits).
    pub max_connections: usize,
    /// Longest request line, in bytes; a longer one closes the connection.
    pub max_request: usize,
    /// A connection idle this long is closed; also the time a request line may take to
    /// arrive whole, and an answer to be written.
    pub idle_timeout: Duration,
}

impl Default for AdminLimits {
    fn default() -> Self {
        Self {
            max_connections: 16,
            max_request: MAX_REQUEST_LINE,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Default for `limits.local_scan_max_objects`.
pub const DEFAULT_SCAN_MAX_OBJECTS: usize = 100_000;

/// Default longest request line, in bytes (`limits.max_admin_request`).
pub const MAX_REQUEST_LINE: usize = 64 << 10;

/// Share of the memory the process may use that the routing table's hints may be charged
/// by default (`limits.max_table_bytes`): settled, the process holds about 1.1-1.3x the
/// charge, and importing one big hint briefly needs up to 2.3x that hint's (docs/sizing.md).
pub const TABLE_MEMORY_SHARE: f64 = 0.4;

/// The routing table's default budgets on a machine where the process may use `memory`
/// bytes ([`crate::sys::memory::available`], cgroup limits included): the table
/// [`TABLE_MEMORY_SHARE`] of it, at most 8 GiB; one peer a quarter of the table's, at most
/// 1 GiB. Unknown memory: the fixed defaults.
pub fn table_limits_for(memory: Option<u64>) -> hints::table::TableLimits {
    let d = hints::table::TableLimits::default();
    let Some(memory) = memory else { return d };
    let table = ((memory as f64 * TABLE_MEMORY_SHARE) as u64).clamp(64 << 20, d.max_table_bytes);
    hints::table::TableLimits {
        max_table_bytes: table,
        max_peer_bytes: (table / 4).clamp(16 << 20, d.max_peer_bytes),
        ..d
    }
}

#[cfg(test)]
mod sizing_tests {
    use super::*;

    #[test]
    fn budgets_follow_the_memory_the_process_may_use() {
        let big = table_limits_for(Some(64 << 30));
        assert_eq!(big.max_table_bytes, 8 << 30);
        assert_eq!(big.max_peer_bytes, 1 << 30);
        // A 2 GiB container: 40 % for the table, a quarter of that for one peer.
        let small = table_limits_for(Some(2 << 30));
        assert_eq!(small.max_table_bytes, (2u64 << 30) * 4 / 10);
        assert_eq!(small.max_peer_bytes, small.max_table_bytes / 4);
        let unknown = table_limits_for(None);
        assert_eq!(unknown.max_table_bytes, 8 << 30);
        // Never below a floor that still holds a useful table.
        assert_eq!(table_limits_for(Some(1 << 20)).max_table_bytes, 64 << 20);
    }
}

#[cfg(test)]
mod damping_tests {
    use crate::model::config::Config;
    use std::time::Duration;

    const NODE: &str = "data_dir = \"/var/lib/cipd\"\n[node]\ndsi = \"1.3.6.1.4.1.99999.1\"\n";

    fn with(limits: &str) -> Result<Config, crate::model::config::ConfigError> {
        Config::from_toml(&format!("{NODE}[limits]\n{limits}"))
    }

    #[test]
    fn damping_settings_read_and_off_is_zero() {
        let c = with("").unwrap();
        assert_eq!(c.limits.damping_take_every, Duration::from_secs(1));
        let c = with("damping_half_life = \"0s\"\ndamping_take_every = \"off\"\n").unwrap();
        assert!(c.limits.damping_half_life.is_zero());
        assert!(c.limits.damping_take_every.is_zero());
        let c = with("damping_take_every = \"250ms\"\n").unwrap();
        assert_eq!(c.limits.damping_take_every, Duration::from_millis(250));
        assert!(with("damping_take_every = \"soon\"\n").is_err());
    }
}
