//! The page's names: every series and type line of `/metrics` as it was when the metrics
//! moved onto the registry, and the series added since. Dashboards and alerts select these
//! by name and labels: a series that disappears, is renamed or changes type fails here.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;

/// A node's page with the three listener groups and one polled peer (`p`), all else zero.
fn page() -> String {
    let m = Metrics::default();
    m.listener("admin");
    m.listener("http");
    m.poll_done("p", true, Duration::from_millis(3));
    m.render(&Gauges::default())
}

/// The series of a page: each sample line without its value.
fn series(page: &str) -> BTreeSet<&str> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s))
        .collect()
}

#[test]
fn no_series_disappears_or_is_renamed() {
    let page = page();
    let on_page = series(&page);
    let listed: BTreeSet<&str> = BASELINE_SERIES
        .iter()
        .chain(ADDED_SERIES)
        .copied()
        .collect();
    let gone: Vec<_> = listed.difference(&on_page).collect();
    assert!(
        gone.is_empty(),
        "series gone or renamed (dashboards select them): {gone:#?}"
    );
    let unlisted: Vec<_> = on_page.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "new series: list them in ADDED_SERIES and tell the docs: {unlisted:#?}"
    );
    let types: BTreeSet<&str> = page.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let listed: BTreeSet<String> = BASELINE_TYPES
        .iter()
        .chain(ADDED_TYPES)
        .map(|(name, kind)| format!("# TYPE {name} {kind}"))
        .collect();
    let listed: BTreeSet<&str> = listed.iter().map(String::as_str).collect();
    assert_eq!(types, listed, "a metric's type line changed");
    assert_eq!(
        page.lines().filter(|l| l.starts_with("# HELP ")).count(),
        types.len(),
        "each metric has its help"
    );
}

#[test]
fn renders_counters_histograms_and_labels() {
    let m = Metrics::default();
    Metrics::inc(&m.queries);
    Metrics::inc(&m.queries);
    m.referrals.inc_by(5);
    m.poll_done("leaf \"a\"", true, Duration::from_millis(20));
    m.poll_done("leaf \"a\"", false, Duration::from_secs(2));
    m.poll_done("leaf \"a\"", true, Duration::from_millis(30));
    m.query_latency.observe(Duration::from_micros(300));
    m.query_latency.observe(Duration::from_secs(5));
    m.search.observe_subqueries(3);
    m.search.note_subquery(Duration::from_millis(7));
    m.search.note_unchased_label("depth");
    let text = m.render(&Gauges {
        table_entries: 7,
        table_summaries: 3,
        uptime_seconds: 1.5,
        ..Gauges::default()
    });
    for line in [
        "# HELP cipd_queries_total Referral queries answered.",
        "# TYPE cipd_queries_total counter",
        "cipd_queries_total 2",
        "cipd_referrals_returned_total 5",
        "cipd_polls_total{peer=\"leaf \\\"a\\\"\",result=\"ok\"} 2",
        "cipd_polls_total{peer=\"leaf \\\"a\\\"\",result=\"failed\"} 1",
        "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"0.025\"} 1",
        "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"0.05\"} 2",
        "cipd_poll_duration_seconds_count{result=\"failed\"} 1",
        "cipd_query_duration_seconds_bucket{le=\"0.00025\"} 0",
        "cipd_query_duration_seconds_bucket{le=\"0.0005\"} 1",
        "cipd_query_duration_seconds_bucket{le=\"1\"} 1",
        "cipd_query_duration_seconds_bucket{le=\"+Inf\"} 2",
        "cipd_query_duration_seconds_sum 5.0003",
        "cipd_query_duration_seconds_count 2",
        "cipd_search_subqueries_per_search_bucket{le=\"2\"} 0",
        "cipd_search_subqueries_per_search_bucket{le=\"4\"} 1",
        "cipd_search_subqueries_total 1",
        "cipd_search_subquery_duration_seconds_bucket{le=\"0.01\"} 1",
        "cipd_search_unchased_total{reason=\"depth\"} 1",
        "cipd_search_unchased_total{reason=\"budget\"} 0",
        "cipd_table_entries 7",
        "cipd_table_summaries 3",
        "cipd_table_summaries_pending 0",
        "cipd_uptime_seconds 1.5",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}\n{text}");
    }
    // Every sample line belongs to a declared metric.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap();
        let base = name
            .trim_end_matches("_bucket")
            .trim_end_matches("_sum")
            .trim_end_matches("_count");
        assert!(text.contains(&format!("# TYPE {base} ")), "{line}");
    }
    assert_eq!(m.polls()["leaf \"a\""], PollCounts { ok: 2, failed: 1 });
    assert_eq!(m.query_latency.count(), 2);
}

/// Every series of the page before the registry (the baseline), by name and labels.
const BASELINE_SERIES: &[&str] = &[
    "cipd_searches_total",
    "cipd_search_subrequests_served_total",
    "cipd_search_subqueries_total",
    "cipd_search_partial_total",
    "cipd_search_denied_total",
    "cipd_search_rate_limited_total",
    "cipd_search_answer_cache_hits_total",
    "cipd_search_cache_hits_total",
    "cipd_search_cache_misses_total",
    "cipd_search_joined_total",
    "cipd_search_cache_entries",
    "cipd_search_infra_entries",
    "cipd_search_nodes_down",
    "cipd_search_unchased_total{reason=\"budget\"}",
    "cipd_search_unchased_total{reason=\"depth\"}",
    "cipd_search_unchased_total{reason=\"deadline\"}",
    "cipd_search_unchased_total{reason=\"refused\"}",
    "cipd_search_unchased_total{reason=\"unreachable\"}",
    "cipd_search_unchased_total{reason=\"limit\"}",
    "cipd_search_subqueries_per_search_bucket{le=\"0\"}",
    "cipd_search_subqueries_per_search_bucket{le=\"1\"}",
    "cipd_search_subqueries_per_search_bucket{le=\"2\"}",
    "cipd_search_subqueries_per_search_bucket{le=\"4\"}",
    "cipd_search_subqueries_per_search_bucket{le=\"8\"}",
    "cipd_search_subqueries_per_search_bucket{le=\"16\"}",
    "cipd_search_subqueries_per_search_bucket{le=\"32\"}",
    "cipd_search_subqueries_per_search_bucket{le=\"64\"}",
    "cipd_search_subqueries_per_search_bucket{le=\"128\"}",
    "cipd_search_subqueries_per_search_bucket{le=\"+Inf\"}",
    "cipd_search_subqueries_per_search_sum",
    "cipd_search_subqueries_per_search_count",
    "cipd_search_duration_seconds_bucket{le=\"0.0001\"}",
    "cipd_search_duration_seconds_bucket{le=\"0.00025\"}",
    "cipd_search_duration_seconds_bucket{le=\"0.0005\"}",
    "cipd_search_duration_seconds_bucket{le=\"0.001\"}",
    "cipd_search_duration_seconds_bucket{le=\"0.0025\"}",
    "cipd_search_duration_seconds_bucket{le=\"0.005\"}",
    "cipd_search_duration_seconds_bucket{le=\"0.01\"}",
    "cipd_search_duration_seconds_bucket{le=\"0.025\"}",
    "cipd_search_duration_seconds_bucket{le=\"0.05\"}",
    "cipd_search_duration_seconds_bucket{le=\"0.1\"}",
    "cipd_search_duration_seconds_bucket{le=\"0.25\"}",
    "cipd_search_duration_seconds_bucket{le=\"0.5\"}",
    "cipd_search_duration_seconds_bucket{le=\"1\"}",
    "cipd_search_duration_seconds_bucket{le=\"2.5\"}",
    "cipd_search_duration_seconds_bucket{le=\"5\"}",
    "cipd_search_duration_seconds_bucket{le=\"+Inf\"}",
    "cipd_search_duration_seconds_sum",
    "cipd_search_duration_seconds_count",
    "cipd_queries_total",
    "cipd_query_errors_total",
    "cipd_referrals_returned_total",
    "cipd_index_objects_received_total",
    "cipd_index_objects_rejected_total",
    "cipd_index_objects_forged_total",
    "cipd_index_objects_implausible_total",
    "cipd_index_objects_over_budget_total",
    "cipd_hint_signatures_valid_total",
    "cipd_hint_signatures_refused_total",
    "cipd_whoispp_queries_total",
    "cipd_hinadi_fetches_total",
    "cipd_hinadi_fetch_errors_total",
    "cipd_hinadi_served_total",
    "cipd_rdm_requests_total",
    "cipd_rdm_pulls_total",
    "cipd_rdm_pull_errors_total",
    "cipd_outbound_builds_total",
    "cipd_table_generation",
    "cipd_outbound_table_generation",
    "cipd_outbound_lag_seconds",
    "cipd_outbound_build_seconds",
    "cipd_peers_expected",
    "cipd_cold_start",
    "cipd_peers_imported",
    "cipd_inflight_bytes",
    "cipd_inflight_budget_bytes",
    "cipd_inflight_waits_total",
    "cipd_inflight_refused_total",
    "cipd_cip_connections_total",
    "cipd_cip_connections_refused_total",
    "cipd_cip_connections_open",
    "cipd_connections_open{listener=\"admin\"}",
    "cipd_connections_open{listener=\"cip\"}",
    "cipd_connections_open{listener=\"http\"}",
    "cipd_connections_accepted_total{listener=\"admin\"}",
    "cipd_connections_accepted_total{listener=\"cip\"}",
    "cipd_connections_accepted_total{listener=\"http\"}",
    "cipd_connections_refused_total{listener=\"admin\",reason=\"total\"}",
    "cipd_connections_refused_total{listener=\"cip\",reason=\"total\"}",
    "cipd_connections_refused_total{listener=\"http\",reason=\"total\"}",
    "cipd_connections_refused_total{listener=\"admin\",reason=\"address\"}",
    "cipd_connections_refused_total{listener=\"cip\",reason=\"address\"}",
    "cipd_connections_refused_total{listener=\"http\",reason=\"address\"}",
    "cipd_connections_evicted_total{listener=\"admin\",stage=\"fresh\"}",
    "cipd_connections_evicted_total{listener=\"cip\",stage=\"fresh\"}",
    "cipd_connections_evicted_total{listener=\"http\",stage=\"fresh\"}",
    "cipd_connections_evicted_total{listener=\"admin\",stage=\"idle\"}",
    "cipd_connections_evicted_total{listener=\"cip\",stage=\"idle\"}",
    "cipd_connections_evicted_total{listener=\"http\",stage=\"idle\"}",
    "cipd_connections_gone_at_accept_total{listener=\"admin\"}",
    "cipd_connections_gone_at_accept_total{listener=\"cip\"}",
    "cipd_connections_gone_at_accept_total{listener=\"http\"}",
    "cipd_query_duration_seconds_bucket{le=\"0.0001\"}",
    "cipd_query_duration_seconds_bucket{le=\"0.00025\"}",
    "cipd_query_duration_seconds_bucket{le=\"0.0005\"}",
    "cipd_query_duration_seconds_bucket{le=\"0.001\"}",
    "cipd_query_duration_seconds_bucket{le=\"0.0025\"}",
    "cipd_query_duration_seconds_bucket{le=\"0.005\"}",
    "cipd_query_duration_seconds_bucket{le=\"0.01\"}",
    "cipd_query_duration_seconds_bucket{le=\"0.025\"}",
    "cipd_query_duration_seconds_bucket{le=\"0.05\"}",
    "cipd_query_duration_seconds_bucket{le=\"0.1\"}",
    "cipd_query_duration_seconds_bucket{le=\"0.25\"}",
    "cipd_query_duration_seconds_bucket{le=\"0.5\"}",
    "cipd_query_duration_seconds_bucket{le=\"1\"}",
    "cipd_query_duration_seconds_bucket{le=\"2.5\"}",
    "cipd_query_duration_seconds_bucket{le=\"5\"}",
    "cipd_query_duration_seconds_bucket{le=\"+Inf\"}",
    "cipd_query_duration_seconds_sum",
    "cipd_query_duration_seconds_count",
    "cipd_table_peers",
    "cipd_table_values",
    "cipd_table_entries",
    "cipd_table_bytes",
    "cipd_table_summaries",
    "cipd_table_summaries_pending",
    "cipd_table_value_bytes",
    "cipd_table_summary_bytes",
    "cipd_table_budget_bytes",
    "cipd_table_substring_cache_needles",
    "cipd_table_substring_cache_bytes",
    "cipd_table_substring_cache_hits_total",
    "cipd_table_substring_cache_computed_total",
    "cipd_answer_cache_bytes",
    "cipd_local_objects",
    "cipd_uptime_seconds",
    "cipd_polls_total{peer=\"p\",result=\"ok\"}",
    "cipd_polls_total{peer=\"p\",result=\"failed\"}",
];

/// The type line of each metric of the baseline.
const BASELINE_TYPES: &[(&str, &str)] = &[
    ("cipd_searches_total", "counter"),
    ("cipd_search_subrequests_served_total", "counter"),
    ("cipd_search_subqueries_total", "counter"),
    ("cipd_search_partial_total", "counter"),
    ("cipd_search_denied_total", "counter"),
    ("cipd_search_rate_limited_total", "counter"),
    ("cipd_search_answer_cache_hits_total", "counter"),
    ("cipd_search_cache_hits_total", "counter"),
    ("cipd_search_cache_misses_total", "counter"),
    ("cipd_search_joined_total", "counter"),
    ("cipd_search_cache_entries", "gauge"),
    ("cipd_search_infra_entries", "gauge"),
    ("cipd_search_nodes_down", "gauge"),
    ("cipd_search_unchased_total", "counter"),
    ("cipd_search_subqueries_per_search", "histogram"),
    ("cipd_search_duration_seconds", "histogram"),
    ("cipd_queries_total", "counter"),
    ("cipd_query_errors_total", "counter"),
    ("cipd_referrals_returned_total", "counter"),
    ("cipd_index_objects_received_total", "counter"),
    ("cipd_index_objects_rejected_total", "counter"),
    ("cipd_index_objects_forged_total", "counter"),
    ("cipd_index_objects_implausible_total", "counter"),
    ("cipd_index_objects_over_budget_total", "counter"),
    ("cipd_hint_signatures_valid_total", "counter"),
    ("cipd_hint_signatures_refused_total", "counter"),
    ("cipd_whoispp_queries_total", "counter"),
    ("cipd_hinadi_fetches_total", "counter"),
    ("cipd_hinadi_fetch_errors_total", "counter"),
    ("cipd_hinadi_served_total", "counter"),
    ("cipd_rdm_requests_total", "counter"),
    ("cipd_rdm_pulls_total", "counter"),
    ("cipd_rdm_pull_errors_total", "counter"),
    ("cipd_outbound_builds_total", "counter"),
    ("cipd_table_generation", "gauge"),
    ("cipd_outbound_table_generation", "gauge"),
    ("cipd_outbound_lag_seconds", "gauge"),
    ("cipd_outbound_build_seconds", "gauge"),
    ("cipd_peers_expected", "gauge"),
    ("cipd_cold_start", "gauge"),
    ("cipd_peers_imported", "gauge"),
    ("cipd_inflight_bytes", "gauge"),
    ("cipd_inflight_budget_bytes", "gauge"),
    ("cipd_inflight_waits_total", "counter"),
    ("cipd_inflight_refused_total", "counter"),
    ("cipd_cip_connections_total", "counter"),
    ("cipd_cip_connections_refused_total", "counter"),
    ("cipd_cip_connections_open", "gauge"),
    ("cipd_connections_open", "gauge"),
    ("cipd_connections_accepted_total", "counter"),
    ("cipd_connections_refused_total", "counter"),
    ("cipd_connections_evicted_total", "counter"),
    ("cipd_connections_gone_at_accept_total", "counter"),
    ("cipd_polls_total", "counter"),
    ("cipd_query_duration_seconds", "histogram"),
    ("cipd_table_peers", "gauge"),
    ("cipd_table_values", "gauge"),
    ("cipd_table_entries", "gauge"),
    ("cipd_table_bytes", "gauge"),
    ("cipd_table_summaries", "gauge"),
    ("cipd_table_summaries_pending", "gauge"),
    ("cipd_table_value_bytes", "gauge"),
    ("cipd_table_summary_bytes", "gauge"),
    ("cipd_table_budget_bytes", "gauge"),
    ("cipd_table_substring_cache_needles", "gauge"),
    ("cipd_table_substring_cache_bytes", "gauge"),
    ("cipd_table_substring_cache_hits_total", "counter"),
    ("cipd_table_substring_cache_computed_total", "counter"),
    ("cipd_answer_cache_bytes", "gauge"),
    ("cipd_local_objects", "gauge"),
    ("cipd_uptime_seconds", "gauge"),
];

/// Series added since the baseline: the latency histograms of exchanges with other nodes.
const ADDED_SERIES: &[&str] = &[
    "cipd_index_objects_bad_path_total",
    "cipd_peer_dampings_total",
    "cipd_datachanged_skipped_total",
    "cipd_deltas_sent_total",
    "cipd_deltas_applied_total",
    "cipd_deltas_in_place_total",
    "cipd_deltas_by_head_total",
    "cipd_outbound_advanced_total",
    "cipd_deltas_refused_total",
    "cipd_peers_damped",
    "cipd_delta_journal_changesets",
    "cipd_delta_journal_bytes",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"0.001\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"0.0025\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"0.005\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"0.01\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"0.025\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"0.05\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"0.1\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"0.25\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"0.5\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"1\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"2.5\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"5\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"10\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"30\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"60\"}",
    "cipd_poll_duration_seconds_bucket{result=\"ok\",le=\"+Inf\"}",
    "cipd_poll_duration_seconds_sum{result=\"ok\"}",
    "cipd_poll_duration_seconds_count{result=\"ok\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"0.001\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"0.0025\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"0.005\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"0.01\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"0.025\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"0.05\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"0.1\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"0.25\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"0.5\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"1\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"2.5\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"5\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"10\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"30\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"60\"}",
    "cipd_poll_duration_seconds_bucket{result=\"failed\",le=\"+Inf\"}",
    "cipd_poll_duration_seconds_sum{result=\"failed\"}",
    "cipd_poll_duration_seconds_count{result=\"failed\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"0.001\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"0.0025\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"0.005\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"0.01\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"0.025\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"0.05\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"0.1\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"0.25\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"0.5\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"1\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"2.5\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"5\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"10\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"30\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"60\"}",
    "cipd_search_subquery_duration_seconds_bucket{le=\"+Inf\"}",
    "cipd_search_subquery_duration_seconds_sum",
    "cipd_search_subquery_duration_seconds_count",
];

/// Type lines added since the baseline.
const ADDED_TYPES: &[(&str, &str)] = &[
    ("cipd_index_objects_bad_path_total", "counter"),
    ("cipd_peer_dampings_total", "counter"),
    ("cipd_datachanged_skipped_total", "counter"),
    ("cipd_deltas_sent_total", "counter"),
    ("cipd_deltas_applied_total", "counter"),
    ("cipd_deltas_in_place_total", "counter"),
    ("cipd_deltas_by_head_total", "counter"),
    ("cipd_outbound_advanced_total", "counter"),
    ("cipd_deltas_refused_total", "counter"),
    ("cipd_peers_damped", "gauge"),
    ("cipd_delta_journal_changesets", "gauge"),
    ("cipd_delta_journal_bytes", "gauge"),
    ("cipd_poll_duration_seconds", "histogram"),
    ("cipd_search_subquery_duration_seconds", "histogram"),
];
