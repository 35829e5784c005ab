//! What the page shows besides the registry's metrics: figures owned by other parts of the
//! daemon ([`Gauges`], read by the node for each scrape, so they are never stale) and the
//! CIP listener's names of before the per-listener series. A collector encodes them at the
//! scrape, after the registry's metrics.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

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
    /// Polled peers damped now (RFC 2439).
    pub peers_damped: u64,
    /// Changesets of the out-bound hints kept in the delta journal.
    pub delta_journal_changesets: u64,
    /// Bytes of those changesets.
    pub delta_journal_bytes: u64,
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

/// The CIP listener's counters, for the names it had before the per-listener series.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct CipTotals {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections refused, both reasons.
    pub refused: u64,
    /// Connections open now.
    pub open: u64,
}

/// The figures of one scrape.
#[derive(Debug)]
pub(super) struct Scraped {
    /// The node's figures.
    pub gauges: Gauges,
    /// The CIP listener's.
    pub cip: CipTotals,
}

/// A figure's value and type.
enum Value {
    Counter(u64),
    Gauge(u64),
    Seconds(f64),
}

/// A figure: its name and help as the page shows them, and how to read it.
type Figure = (&'static str, &'static str, fn(&Scraped) -> Value);

const FIGURES: &[Figure] = &[
    (
        "cipd_search_cache_hits_total",
        "Search cache lookups (sub-query and own answers) that found a valid answer.",
        |s| Value::Counter(s.gauges.search_cache_hits),
    ),
    (
        "cipd_search_cache_misses_total",
        "Search cache lookups that found none.",
        |s| Value::Counter(s.gauges.search_cache_misses),
    ),
    (
        "cipd_search_joined_total",
        "Sub-queries that joined an identical one in flight.",
        |s| Value::Counter(s.gauges.search_joined),
    ),
    (
        "cipd_search_cache_entries",
        "Answers the search caches hold.",
        |s| Value::Gauge(s.gauges.search_cache_entries),
    ),
    (
        "cipd_search_infra_entries",
        "Nodes whose round-trip times and failures are remembered.",
        |s| Value::Gauge(s.gauges.search_infra_entries),
    ),
    (
        "cipd_search_nodes_down",
        "Nodes whose failure is cached now (not asked until it expires).",
        |s| Value::Gauge(s.gauges.search_nodes_down),
    ),
    (
        "cipd_outbound_builds_total",
        "Out-bound hint builds.",
        |s| Value::Counter(s.gauges.outbound_builds),
    ),
    (
        "cipd_table_generation",
        "The routing table's generation (bumped by every change).",
        |s| Value::Gauge(s.gauges.table_generation),
    ),
    (
        "cipd_outbound_table_generation",
        "The routing table generation the out-bound hint was built from.",
        |s| Value::Gauge(s.gauges.outbound_table_generation),
    ),
    (
        "cipd_outbound_lag_seconds",
        "How long the out-bound hint has lagged the changes requested (0 when current).",
        |s| Value::Seconds(s.gauges.outbound_lag_seconds),
    ),
    (
        "cipd_outbound_build_seconds",
        "How long the last out-bound build took.",
        |s| Value::Seconds(s.gauges.outbound_build_seconds),
    ),
    (
        "cipd_peers_expected",
        "Configured peers that deliver hints (role poll or pusher).",
        |s| Value::Gauge(s.gauges.peers_expected),
    ),
    (
        "cipd_peers_damped",
        "Polled peers damped now: they changed too often, their changes are held (RFC 2439).",
        |s| Value::Gauge(s.gauges.peers_damped),
    ),
    (
        "cipd_delta_journal_changesets",
        "Changesets of the out-bound hints kept for pollers a few answers behind (outbound.journal_changesets).",
        |s| Value::Gauge(s.gauges.delta_journal_changesets),
    ),
    (
        "cipd_delta_journal_bytes",
        "Bytes of the changesets kept in the delta journal (outbound.journal_bytes).",
        |s| Value::Gauge(s.gauges.delta_journal_bytes),
    ),
    (
        "cipd_cold_start",
        "1 while the start-up bulk load of peers' hints and its final merge run.",
        |s| Value::Gauge(u64::from(s.gauges.cold_start)),
    ),
    (
        "cipd_peers_imported",
        "Configured peers whose hint the routing table holds.",
        |s| Value::Gauge(s.gauges.peers_imported),
    ),
    (
        "cipd_inflight_bytes",
        "Bytes of request bodies reserved from the in-flight budget now.",
        |s| Value::Gauge(s.gauges.inflight_bytes),
    ),
    (
        "cipd_inflight_budget_bytes",
        "The in-flight budget request bodies share (limits.max_inflight_bytes).",
        |s| Value::Gauge(s.gauges.inflight_budget_bytes),
    ),
    (
        "cipd_inflight_waits_total",
        "Request bodies that waited for the in-flight budget.",
        |s| Value::Counter(s.gauges.inflight_waited),
    ),
    (
        "cipd_inflight_refused_total",
        "Requests refused because the in-flight budget stayed in use past their deadline.",
        |s| Value::Counter(s.gauges.inflight_refused),
    ),
    (
        "cipd_cip_connections_total",
        "CIP connections accepted (as cipd_connections_accepted_total{listener=\"cip\"}).",
        |s| Value::Counter(s.cip.accepted),
    ),
    (
        "cipd_cip_connections_refused_total",
        "CIP connections refused at the connection limits (both reasons of \
         cipd_connections_refused_total{listener=\"cip\"}).",
        |s| Value::Counter(s.cip.refused),
    ),
    (
        "cipd_cip_connections_open",
        "CIP connections open now (as cipd_connections_open{listener=\"cip\"}).",
        |s| Value::Gauge(s.cip.open),
    ),
    (
        "cipd_table_peers",
        "Peers with a hint in the routing table.",
        |s| Value::Gauge(s.gauges.table_peers),
    ),
    (
        "cipd_table_values",
        "Distinct values in the routing table.",
        |s| Value::Gauge(s.gauges.table_values),
    ),
    (
        "cipd_table_entries",
        "(value, peer) entries in the routing table.",
        |s| Value::Gauge(s.gauges.table_entries),
    ),
    (
        "cipd_table_bytes",
        "Approximate bytes held by the routing table.",
        |s| Value::Gauge(s.gauges.table_bytes),
    ),
    (
        "cipd_table_summaries",
        "Broad substrings with precomputed per-peer sums in the routing table.",
        |s| Value::Gauge(s.gauges.table_summaries),
    ),
    (
        "cipd_table_summaries_pending",
        "Routing-table summary builds still running in the background.",
        |s| Value::Gauge(s.gauges.table_summaries_pending),
    ),
    (
        "cipd_table_value_bytes",
        "Bytes of the distinct values in the routing table (for the README's sizing).",
        |s| Value::Gauge(s.gauges.table_value_bytes),
    ),
    (
        "cipd_table_summary_bytes",
        "Bytes of the routing table's substring summaries.",
        |s| Value::Gauge(s.gauges.table_summary_bytes),
    ),
    (
        "cipd_table_budget_bytes",
        "The routing table's hints charged against limits.max_table_bytes.",
        |s| Value::Gauge(s.gauges.table_budget_bytes),
    ),
    (
        "cipd_table_substring_cache_needles",
        "Substring needles whose per-peer sums the routing table keeps.",
        |s| Value::Gauge(s.gauges.table_substring_cache_needles),
    ),
    (
        "cipd_table_substring_cache_bytes",
        "Bytes of the kept substring sums (at most [index] substring_cache_bytes).",
        |s| Value::Gauge(s.gauges.table_substring_cache_bytes),
    ),
    (
        "cipd_table_substring_cache_hits_total",
        "Segment searches answered from kept substring sums.",
        |s| Value::Counter(s.gauges.table_substring_cache_hits),
    ),
    (
        "cipd_table_substring_cache_computed_total",
        "Substring sums computed for the cache (each a pass over the needle's matches).",
        |s| Value::Counter(s.gauges.table_substring_cache_computed),
    ),
    (
        "cipd_answer_cache_bytes",
        "Bytes of recent referral answers kept (at most limits.answer_cache_bytes).",
        |s| Value::Gauge(s.gauges.answer_cache_bytes),
    ),
    ("cipd_local_objects", "Objects in local collections.", |s| {
        Value::Gauge(s.gauges.local_objects)
    }),
    (
        "cipd_uptime_seconds",
        "Seconds since the daemon started.",
        |s| Value::Seconds(s.gauges.uptime_seconds),
    ),
];

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, read) in FIGURES {
            match read(self) {
                Value::Counter(v) => {
                    let m = ConstCounter::new(v);
                    let name = counter_family(name);
                    m.encode(encoder.encode_descriptor(name, help, None, m.metric_type())?)?;
                }
                Value::Gauge(v) => {
                    let m = ConstGauge::new(v);
                    m.encode(encoder.encode_descriptor(name, help, None, m.metric_type())?)?;
                }
                Value::Seconds(v) => {
                    let m = ConstGauge::new(v);
                    m.encode(encoder.encode_descriptor(name, help, None, m.metric_type())?)?;
                }
            }
        }
        Ok(())
    }
}

/// The family name of counter `name`: without the `_total` the encoder appends to its
/// samples (and, in the 0.0.4 format, to its `# HELP` and `# TYPE` lines).
pub(super) fn counter_family(name: &str) -> &str {
    debug_assert!(name.ends_with("_total"), "counter {name} ends with _total");
    name.strip_suffix("_total").unwrap_or(name)
}
