//! Process metrics, rendered in the Prometheus text exposition format (version 0.0.4).
//!
//! Counters are atomics updated on hot paths without locks; per-peer poll counters sit in a
//! small mutex-guarded map touched once per poll. Gauges that belong to other parts of the
//! daemon (table size) are passed in when rendering, so they are never stale.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the query latency histogram buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// A fixed-bucket histogram of durations.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    /// Sum in nanoseconds.
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = LATENCY_BUCKETS.iter().position(|&b| secs <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// Outcome counters of the polls of one peer.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PollCounts {
    /// Polls that returned a hint or "nothing new".
    pub ok: u64,
    /// Polls that failed.
    pub failed: u64,
}

/// Connection counters of one listener group (`cip`, `http`, `admin`), kept by its
/// connection limiter and rendered with a `listener` label.
#[derive(Debug, Default)]
pub struct ListenerCounters {
    /// Connections accepted (given a slot).
    pub accepted: AtomicU64,
    /// Connections open now.
    pub open: AtomicU64,
    /// Refused because every slot was taken by connections that may not be evicted.
    pub refused_total: AtomicU64,
    /// Refused because their source address had all its slots.
    pub refused_address: AtomicU64,
    /// Evicted for a new connection before completing a request (handshake, headers).
    pub evicted_fresh: AtomicU64,
    /// Evicted for a new connection while idle between requests.
    pub evicted_idle: AtomicU64,
    /// Closed by their peer before they were accepted (a connect/close flood): dropped
    /// without a slot.
    pub gone_at_accept: AtomicU64,
}

/// The daemon's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Referral queries answered (HTTP and admin `explain` excluded).
    pub queries: AtomicU64,
    /// Queries refused for bad syntax.
    pub query_errors: AtomicU64,
    /// Referrals returned over all queries.
    pub referrals: AtomicU64,
    /// In-bound index objects accepted (polled or pushed).
    pub index_objects_received: AtomicU64,
    /// In-bound index objects refused (invalid, loop, unknown peer).
    pub index_objects_rejected: AtomicU64,
    /// In-bound index objects refused because their DSI is not their peer's (also counted
    /// in `index_objects_rejected`).
    pub index_objects_forged: AtomicU64,
    /// In-bound index objects refused for counts that cannot be true (also counted in
    /// `index_objects_rejected`).
    pub index_objects_implausible: AtomicU64,
    /// In-bound hints refused for the routing table's memory budgets (also counted in
    /// `index_objects_rejected`).
    pub index_objects_over_budget: AtomicU64,
    /// In-bound hints whose signature verified.
    pub hint_signatures_valid: AtomicU64,
    /// In-bound hints refused for their signature: missing under `require`, invalid,
    /// replayed, undated, or uncheckable (also counted in `index_objects_rejected`).
    pub hint_signatures_refused: AtomicU64,
    /// Connection counters per listener group.
    listeners: Mutex<BTreeMap<&'static str, std::sync::Arc<ListenerCounters>>>,
    /// Whois++ queries answered on the Whois++ listeners.
    pub whoispp_queries: AtomicU64,
    /// Hina-Di URL fetches that succeeded (200 or 304).
    pub hinadi_fetches: AtomicU64,
    /// Hina-Di URL fetches that failed (the last copy is kept).
    pub hinadi_fetch_errors: AtomicU64,
    /// Requests for this node's Hina-Di file answered (304s included).
    pub hinadi_served: AtomicU64,
    /// RDM requests answered (errors included).
    pub rdm_requests: AtomicU64,
    /// RDM pulls that succeeded.
    pub rdm_pulls: AtomicU64,
    /// RDM pulls that failed (the last copy is kept).
    pub rdm_pull_errors: AtomicU64,
    /// Query latency.
    pub query_latency: Histogram,
    polls: Mutex<BTreeMap<String, PollCounts>>,
    /// The chasing search's counters.
    pub search: SearchMetrics,
}

/// Upper bounds of the sub-queries-per-search histogram's buckets.
pub const SUBQUERY_BUCKETS: [u64; 9] = [0, 1, 2, 4, 8, 16, 32, 64, 128];

/// Why a referral was not chased, as metric labels (the order of `SearchMetrics::unchased`).
pub const UNCHASED_REASONS: [&str; 6] = [
    "budget",
    "depth",
    "deadline",
    "refused",
    "unreachable",
    "limit",
];

/// Counters of the chasing search (`/v1/search`, `/search`, Whois++ `chase`).
#[derive(Debug, Default)]
pub struct SearchMetrics {
    /// Searches clients asked of this node.
    pub searches: AtomicU64,
    /// Sub-requests of other nodes' searches answered here.
    pub served: AtomicU64,
    /// Sub-queries this node sent.
    pub subqueries: AtomicU64,
    /// Client searches answered partial.
    pub partial: AtomicU64,
    /// Searches refused: client address not in `search.allow`.
    pub denied: AtomicU64,
    /// Searches refused: over `search.rate`.
    pub rate_limited: AtomicU64,
    /// Client searches answered from this node's answer cache.
    pub answer_cache_hits: AtomicU64,
    /// Referrals left unchased, by reason ([`UNCHASED_REASONS`]).
    pub unchased: [AtomicU64; 6],
    /// Client search latency.
    pub latency: Histogram,
    /// Sub-queries per client search, by [`SUBQUERY_BUCKETS`].
    subqueries_per_search: [AtomicU64; SUBQUERY_BUCKETS.len()],
    subqueries_per_search_sum: AtomicU64,
    subqueries_per_search_count: AtomicU64,
}

impl SearchMetrics {
    /// Counts a referral left unchased for `reason` (one of [`UNCHASED_REASONS`]).
    pub fn note_unchased_label(&self, reason: &str) {
        if let Some(i) = UNCHASED_REASONS.iter().position(|r| *r == reason) {
            self.unchased[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records one client search that cost `subqueries` sub-queries.
    pub fn observe_subqueries(&self, subqueries: u32) {
        let n = u64::from(subqueries);
        if let Some(i) = SUBQUERY_BUCKETS.iter().position(|&b| n <= b) {
            self.subqueries_per_search[i].fetch_add(1, Ordering::Relaxed);
        }
        self.subqueries_per_search_sum
            .fetch_add(n, Ordering::Relaxed);
        self.subqueries_per_search_count
            .fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, g: &Gauges) {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        counter(
            out,
            "cipd_searches_total",
            "Searches clients asked of this node.",
            load(&self.searches),
        );
        counter(
            out,
            "cipd_search_subrequests_served_total",
            "Sub-requests of other nodes' searches answered here.",
            load(&self.served),
        );
        counter(
            out,
            "cipd_search_subqueries_total",
            "Sub-queries this node sent.",
            load(&self.subqueries),
        );
        counter(
            out,
            "cipd_search_partial_total",
            "Client searches answered partial.",
            load(&self.partial),
        );
        counter(
            out,
            "cipd_search_denied_total",
            "Searches refused: client address not in search.allow.",
            load(&self.denied),
        );
        counter(
            out,
            "cipd_search_rate_limited_total",
            "Searches refused: over search.rate.",
            load(&self.rate_limited),
        );
        counter(
            out,
            "cipd_search_answer_cache_hits_total",
            "Client searches answered from this node's answer cache.",
            load(&self.answer_cache_hits),
        );
        counter(
            out,
            "cipd_search_cache_hits_total",
            "Search cache lookups (sub-query and own answers) that found a valid answer.",
            g.search_cache_hits,
        );
        counter(
            out,
            "cipd_search_cache_misses_total",
            "Search cache lookups that found none.",
            g.search_cache_misses,
        );
        counter(
            out,
            "cipd_search_joined_total",
            "Sub-queries that joined an identical one in flight.",
            g.search_joined,
        );
        gauge(
            out,
            "cipd_search_cache_entries",
            "Answers the search caches hold.",
            g.search_cache_entries as f64,
        );
        gauge(
            out,
            "cipd_search_infra_entries",
            "Nodes whose round-trip times and failures are remembered.",
            g.search_infra_entries as f64,
        );
        gauge(
            out,
            "cipd_search_nodes_down",
            "Nodes whose failure is cached now (not asked until it expires).",
            g.search_nodes_down as f64,
        );
        header(
            out,
            "cipd_search_unchased_total",
            "Referrals left unchased, by reason.",
            "counter",
        );
        for (i, reason) in UNCHASED_REASONS.iter().enumerate() {
            let _ = writeln!(
                out,
                "cipd_search_unchased_total{{reason=\"{reason}\"}} {}",
                load(&self.unchased[i])
            );
        }
        header(
            out,
            "cipd_search_subqueries_per_search",
            "Sub-queries per client search.",
            "histogram",
        );
        let mut cumulative = 0;
        for (i, bound) in SUBQUERY_BUCKETS.iter().enumerate() {
            cumulative += load(&self.subqueries_per_search[i]);
            let _ = writeln!(
                out,
                "cipd_search_subqueries_per_search_bucket{{le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = load(&self.subqueries_per_search_count);
        let _ = writeln!(
            out,
            "cipd_search_subqueries_per_search_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "cipd_search_subqueries_per_search_sum {}",
            load(&self.subqueries_per_search_sum)
        );
        let _ = writeln!(out, "cipd_search_subqueries_per_search_count {count}");
        histogram(
            out,
            "cipd_search_duration_seconds",
            "Client search latency.",
            &self.latency,
        );
    }
}

/// Writes `h` as a Prometheus histogram named `name`.
fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    header(out, name, help, "histogram");
    let mut cumulative = 0;
    for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
        cumulative += load(&h.buckets[i]);
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let count = load(&h.count);
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
    let sum = load(&h.sum_nanos) as f64 / 1e9;
    let _ = writeln!(out, "{name}_sum {sum}");
    let _ = writeln!(out, "{name}_count {count}");
}

/// Gauges owned elsewhere, read when rendering.
#[derive(Debug, Default, Clone, Copy)]
pub struct Gauges {
    /// Peers with a hint in the table.
    pub table_peers: u64,
    /// Distinct values in the table.
    pub table_values: u64,
    /// (value, peer) entries in the table.
    pub table_entries: u64,
    /// Approximate bytes held by the table.
    pub table_bytes: u64,
    /// Broad substrings summarized in the routing table's index.
    pub table_summaries: u64,
    /// Summary builds still running.
    pub table_summaries_pending: u64,
    /// Bytes of the distinct values the table holds.
    pub table_value_bytes: u64,
    /// Bytes of the table's substring summaries.
    pub table_summary_bytes: u64,
    /// The hints' charge against `limits.max_table_bytes`.
    pub table_budget_bytes: u64,
    /// Substring needles whose per-peer sums are memoized.
    pub table_substring_cache_needles: u64,
    /// Bytes of those sums (at most `[index] substring_cache_bytes`).
    pub table_substring_cache_bytes: u64,
    /// Segment searches answered from kept substring sums.
    pub table_substring_cache_hits: u64,
    /// Substring sums computed for the cache.
    pub table_substring_cache_computed: u64,
    /// Bytes of recent referral answers kept (at most `limits.answer_cache_bytes`).
    pub answer_cache_bytes: u64,
    /// Objects in local collections.
    pub local_objects: u64,
    /// Seconds since the daemon started.
    pub uptime_seconds: f64,
    /// The routing table's generation.
    pub table_generation: u64,
    /// The table generation the out-bound hint was built from.
    pub outbound_table_generation: u64,
    /// Out-bound builds done.
    pub outbound_builds: u64,
    /// Seconds the out-bound hint has lagged the changes requested (0 when current).
    pub outbound_lag_seconds: f64,
    /// Seconds the last out-bound build took.
    pub outbound_build_seconds: f64,
    /// Configured peers that deliver hints.
    pub peers_expected: u64,
    /// Of those, the ones whose hint the table holds.
    pub peers_imported: u64,
    /// A cold start (bulk load and its final merge) is under way.
    pub cold_start: bool,
    /// Bytes of request bodies reserved from the in-flight budget now.
    pub inflight_bytes: u64,
    /// The in-flight budget.
    pub inflight_budget_bytes: u64,
    /// Body reads that waited for the budget.
    pub inflight_waited: u64,
    /// Body reads refused because the budget stayed in use past their deadline.
    pub inflight_refused: u64,
    /// Search cache lookups that found a valid answer.
    pub search_cache_hits: u64,
    /// Search cache lookups that found none.
    pub search_cache_misses: u64,
    /// Sub-queries joined to an identical one in flight.
    pub search_joined: u64,
    /// Answers the search caches hold.
    pub search_cache_entries: u64,
    /// Nodes the infrastructure cache knows.
    pub search_infra_entries: u64,
    /// Nodes whose failure is cached now.
    pub search_nodes_down: u64,
}

impl Metrics {
    /// Counts one poll of `peer`.
    pub fn poll_done(&self, peer: &str, ok: bool) {
        // A poisoned lock only means a panic elsewhere mid-update of plain counters.
        let mut polls = self.polls.lock().unwrap_or_else(|e| e.into_inner());
        let c = polls.entry(peer.to_owned()).or_default();
        if ok {
            c.ok += 1;
        } else {
            c.failed += 1;
        }
    }

    /// Poll counters per peer.
    pub fn polls(&self) -> BTreeMap<String, PollCounts> {
        self.polls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The connection counters of listener group `name`, created on first use.
    pub fn listener(&self, name: &'static str) -> std::sync::Arc<ListenerCounters> {
        let mut l = self.listeners.lock().unwrap_or_else(|e| e.into_inner());
        l.entry(name).or_default().clone()
    }

    /// Adds 1 to a counter.
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Renders every metric in the Prometheus text format.
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::with_capacity(4096);
        self.search.render(&mut out, gauges);
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        counter(
            &mut out,
            "cipd_queries_total",
            "Referral queries answered.",
            load(&self.queries),
        );
        counter(
            &mut out,
            "cipd_query_errors_total",
            "Queries refused for bad syntax.",
            load(&self.query_errors),
        );
        counter(
            &mut out,
            "cipd_referrals_returned_total",
            "Referrals returned over all queries.",
            load(&self.referrals),
        );
        counter(
            &mut out,
            "cipd_index_objects_received_total",
            "In-bound index objects accepted.",
            load(&self.index_objects_received),
        );
        counter(
            &mut out,
            "cipd_index_objects_rejected_total",
            "In-bound index objects refused.",
            load(&self.index_objects_rejected),
        );
        counter(
            &mut out,
            "cipd_index_objects_forged_total",
            "In-bound index objects refused because their DSI is not their peer's.",
            load(&self.index_objects_forged),
        );
        counter(
            &mut out,
            "cipd_index_objects_implausible_total",
            "In-bound index objects refused for counts that cannot be true.",
            load(&self.index_objects_implausible),
        );
        counter(
            &mut out,
            "cipd_index_objects_over_budget_total",
            "In-bound index objects refused for the routing table's memory budgets.",
            load(&self.index_objects_over_budget),
        );
        counter(
            &mut out,
            "cipd_hint_signatures_valid_total",
            "In-bound hints whose signature verified.",
            load(&self.hint_signatures_valid),
        );
        counter(
            &mut out,
            "cipd_hint_signatures_refused_total",
            "In-bound hints refused for their signature (missing, invalid, replayed, uncheckable).",
            load(&self.hint_signatures_refused),
        );
        counter(
            &mut out,
            "cipd_whoispp_queries_total",
            "Whois++ queries answered on the Whois++ listeners.",
            load(&self.whoispp_queries),
        );
        counter(
            &mut out,
            "cipd_hinadi_fetches_total",
            "Hina-Di URL fetches that succeeded (200 or 304).",
            load(&self.hinadi_fetches),
        );
        counter(
            &mut out,
            "cipd_hinadi_fetch_errors_total",
            "Hina-Di URL fetches that failed; the last copy is kept.",
            load(&self.hinadi_fetch_errors),
        );
        counter(
            &mut out,
            "cipd_hinadi_served_total",
            "Requests for this node's Hina-Di file answered.",
            load(&self.hinadi_served),
        );
        counter(
            &mut out,
            "cipd_rdm_requests_total",
            "RDM requests answered, errors included.",
            load(&self.rdm_requests),
        );
        counter(
            &mut out,
            "cipd_rdm_pulls_total",
            "RDM pulls that succeeded.",
            load(&self.rdm_pulls),
        );
        counter(
            &mut out,
            "cipd_rdm_pull_errors_total",
            "RDM pulls that failed; the last copy is kept.",
            load(&self.rdm_pull_errors),
        );
        counter(
            &mut out,
            "cipd_outbound_builds_total",
            "Out-bound hint builds.",
            gauges.outbound_builds,
        );
        gauge(
            &mut out,
            "cipd_table_generation",
            "The routing table's generation (bumped by every change).",
            gauges.table_generation as f64,
        );
        gauge(
            &mut out,
            "cipd_outbound_table_generation",
            "The routing table generation the out-bound hint was built from.",
            gauges.outbound_table_generation as f64,
        );
        gauge(
            &mut out,
            "cipd_outbound_lag_seconds",
            "How long the out-bound hint has lagged the changes requested (0 when current).",
            gauges.outbound_lag_seconds,
        );
        gauge(
            &mut out,
            "cipd_outbound_build_seconds",
            "How long the last out-bound build took.",
            gauges.outbound_build_seconds,
        );
        gauge(
            &mut out,
            "cipd_peers_expected",
            "Configured peers that deliver hints (role poll or pusher).",
            gauges.peers_expected as f64,
        );
        gauge(
            &mut out,
            "cipd_cold_start",
            "1 while the start-up bulk load of peers' hints and its final merge run.",
            f64::from(u8::from(gauges.cold_start)),
        );
        gauge(
            &mut out,
            "cipd_peers_imported",
            "Configured peers whose hint the routing table holds.",
            gauges.peers_imported as f64,
        );
        gauge(
            &mut out,
            "cipd_inflight_bytes",
            "Bytes of request bodies reserved from the in-flight budget now.",
            gauges.inflight_bytes as f64,
        );
        gauge(
            &mut out,
            "cipd_inflight_budget_bytes",
            "The in-flight budget request bodies share (limits.max_inflight_bytes).",
            gauges.inflight_budget_bytes as f64,
        );
        counter(
            &mut out,
            "cipd_inflight_waits_total",
            "Request bodies that waited for the in-flight budget.",
            gauges.inflight_waited,
        );
        counter(
            &mut out,
            "cipd_inflight_refused_total",
            "Requests refused because the in-flight budget stayed in use past their deadline.",
            gauges.inflight_refused,
        );
        // The CIP names of before the per-listener series, read from the same counters.
        let cip = self.listener("cip");
        counter(
            &mut out,
            "cipd_cip_connections_total",
            "CIP connections accepted (as cipd_connections_accepted_total{listener=\"cip\"}).",
            load(&cip.accepted),
        );
        counter(
            &mut out,
            "cipd_cip_connections_refused_total",
            "CIP connections refused at the connection limits (both reasons of \
             cipd_connections_refused_total{listener=\"cip\"}).",
            load(&cip.refused_total) + load(&cip.refused_address),
        );
        gauge(
            &mut out,
            "cipd_cip_connections_open",
            "CIP connections open now (as cipd_connections_open{listener=\"cip\"}).",
            load(&cip.open) as f64,
        );

        let listeners: Vec<(&'static str, std::sync::Arc<ListenerCounters>)> = self
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        // Name, help (empty: same series as the line before), type, extra label, counter.
        type Pick = fn(&ListenerCounters) -> &AtomicU64;
        type Series<'a> = (&'a str, &'a str, &'a str, Option<(&'a str, &'a str)>, Pick);
        let series: [Series<'_>; 7] = [
            (
                "cipd_connections_open",
                "Connections open now, by listener group.",
                "gauge",
                None,
                |c| &c.open,
            ),
            (
                "cipd_connections_accepted_total",
                "Connections given a slot, by listener group.",
                "counter",
                None,
                |c| &c.accepted,
            ),
            (
                "cipd_connections_refused_total",
                "Connections refused, by listener group and reason (total: no slot could be \
                 freed; address: the source address had all its slots).",
                "counter",
                Some(("reason", "total")),
                |c| &c.refused_total,
            ),
            (
                "cipd_connections_refused_total",
                "",
                "counter",
                Some(("reason", "address")),
                |c| &c.refused_address,
            ),
            (
                "cipd_connections_evicted_total",
                "Connections closed to give their slot to a new one, by listener group and \
                 what they were doing (fresh: no request completed yet; idle: between requests).",
                "counter",
                Some(("stage", "fresh")),
                |c| &c.evicted_fresh,
            ),
            (
                "cipd_connections_evicted_total",
                "",
                "counter",
                Some(("stage", "idle")),
                |c| &c.evicted_idle,
            ),
            (
                "cipd_connections_gone_at_accept_total",
                "Connections their peer had closed before they were accepted (dropped at once, \
                 without a slot), by listener group.",
                "counter",
                None,
                |c| &c.gone_at_accept,
            ),
        ];
        for (name, help, kind, extra, pick) in series {
            if !help.is_empty() {
                header(&mut out, name, help, kind);
            }
            for (listener, c) in &listeners {
                let v = load(pick(c));
                match extra {
                    None => {
                        let _ = writeln!(out, "{name}{{listener=\"{listener}\"}} {v}");
                    }
                    Some((k, val)) => {
                        let _ =
                            writeln!(out, "{name}{{listener=\"{listener}\",{k}=\"{val}\"}} {v}");
                    }
                }
            }
        }

        let polls = self.polls();
        header(
            &mut out,
            "cipd_polls_total",
            "Polls of each peer by outcome.",
            "counter",
        );
        for (peer, c) in &polls {
            let peer = escape_label(peer);
            let _ = writeln!(
                out,
                "cipd_polls_total{{peer=\"{peer}\",result=\"ok\"}} {}",
                c.ok
            );
            let _ = writeln!(
                out,
                "cipd_polls_total{{peer=\"{peer}\",result=\"failed\"}} {}",
                c.failed
            );
        }

        let h = &self.query_latency;
        header(
            &mut out,
            "cipd_query_duration_seconds",
            "Query latency.",
            "histogram",
        );
        let mut cumulative = 0;
        for (i, bound) in LATENCY_BUCKETS.iter().enumerate() {
            cumulative += load(&h.buckets[i]);
            let _ = writeln!(
                out,
                "cipd_query_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = load(&h.count);
        let _ = writeln!(
            out,
            "cipd_query_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = load(&h.sum_nanos) as f64 / 1e9;
        let _ = writeln!(out, "cipd_query_duration_seconds_sum {sum}");
        let _ = writeln!(out, "cipd_query_duration_seconds_count {count}");

        gauge(
            &mut out,
            "cipd_table_peers",
            "Peers with a hint in the routing table.",
            gauges.table_peers as f64,
        );
        gauge(
            &mut out,
            "cipd_table_values",
            "Distinct values in the routing table.",
            gauges.table_values as f64,
        );
        gauge(
            &mut out,
            "cipd_table_entries",
            "(value, peer) entries in the routing table.",
            gauges.table_entries as f64,
        );
        gauge(
            &mut out,
            "cipd_table_bytes",
            "Approximate bytes held by the routing table.",
            gauges.table_bytes as f64,
        );
        gauge(
            &mut out,
            "cipd_table_summaries",
            "Broad substrings with precomputed per-peer sums in the routing table.",
            gauges.table_summaries as f64,
        );
        gauge(
            &mut out,
            "cipd_table_summaries_pending",
            "Routing-table summary builds still running in the background.",
            gauges.table_summaries_pending as f64,
        );
        gauge(
            &mut out,
            "cipd_table_value_bytes",
            "Bytes of the distinct values in the routing table (for the README's sizing).",
            gauges.table_value_bytes as f64,
        );
        gauge(
            &mut out,
            "cipd_table_summary_bytes",
            "Bytes of the routing table's substring summaries.",
            gauges.table_summary_bytes as f64,
        );
        gauge(
            &mut out,
            "cipd_table_budget_bytes",
            "The routing table's hints charged against limits.max_table_bytes.",
            gauges.table_budget_bytes as f64,
        );
        gauge(
            &mut out,
            "cipd_table_substring_cache_needles",
            "Substring needles whose per-peer sums the routing table keeps.",
            gauges.table_substring_cache_needles as f64,
        );
        gauge(
            &mut out,
            "cipd_table_substring_cache_bytes",
            "Bytes of the kept substring sums (at most [index] substring_cache_bytes).",
            gauges.table_substring_cache_bytes as f64,
        );
        counter(
            &mut out,
            "cipd_table_substring_cache_hits_total",
            "Segment searches answered from kept substring sums.",
            gauges.table_substring_cache_hits,
        );
        counter(
            &mut out,
            "cipd_table_substring_cache_computed_total",
            "Substring sums computed for the cache (each a pass over the needle's matches).",
            gauges.table_substring_cache_computed,
        );
        gauge(
            &mut out,
            "cipd_answer_cache_bytes",
            "Bytes of recent referral answers kept (at most limits.answer_cache_bytes).",
            gauges.answer_cache_bytes as f64,
        );
        gauge(
            &mut out,
            "cipd_local_objects",
            "Objects in local collections.",
            gauges.local_objects as f64,
        );
        gauge(
            &mut out,
            "cipd_uptime_seconds",
            "Seconds since the daemon started.",
            gauges.uptime_seconds,
        );
        out
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    header(out, name, help, "counter");
    let _ = writeln!(out, "{name} {v}");
}

fn gauge(out: &mut String, name: &str, help: &str, v: f64) {
    header(out, name, help, "gauge");
    let _ = writeln!(out, "{name} {v}");
}

/// Escapes a label value: backslash, double quote and newline (exposition format rules).
fn escape_label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histogram_and_labels() {
        let m = Metrics::default();
        Metrics::inc(&m.queries);
        Metrics::inc(&m.queries);
        m.referrals.fetch_add(5, Ordering::Relaxed);
        m.poll_done("leaf \"a\"", true);
        m.poll_done("leaf \"a\"", false);
        m.poll_done("leaf \"a\"", true);
        m.query_latency.observe(Duration::from_micros(300));
        m.query_latency.observe(Duration::from_secs(5));
        let text = m.render(&Gauges {
            table_entries: 7,
            table_summaries: 3,
            ..Gauges::default()
        });
        assert!(text.contains("cipd_queries_total 2\n"));
        assert!(text.contains("cipd_referrals_returned_total 5\n"));
        assert!(text.contains("cipd_polls_total{peer=\"leaf \\\"a\\\"\",result=\"ok\"} 2\n"));
        assert!(text.contains("cipd_polls_total{peer=\"leaf \\\"a\\\"\",result=\"failed\"} 1\n"));
        assert!(text.contains("cipd_query_duration_seconds_bucket{le=\"0.00025\"} 0\n"));
        assert!(text.contains("cipd_query_duration_seconds_bucket{le=\"0.0005\"} 1\n"));
        assert!(text.contains("cipd_query_duration_seconds_bucket{le=\"1\"} 1\n"));
        assert!(text.contains("cipd_query_duration_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("cipd_query_duration_seconds_count 2\n"));
        assert!(text.contains("cipd_table_entries 7\n"));
        assert!(text.contains("cipd_table_summaries 3\n"));
        assert!(text.contains("cipd_table_summaries_pending 0\n"));
        // Every sample line belongs to a declared metric.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let base = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(text.contains(&format!("# TYPE {base} ")), "{line}");
        }
    }
}
