//! Process metrics: a `prometheus_client` registry of typed counters, gauges, families and
//! histograms, rendered for `/metrics` and `cipctl metrics` in the Prometheus text format,
//! version 0.0.4.
//!
//! Recording takes no lock: counters and gauges are atomics, so is [`Histogram`], and the
//! series of a family whose labels are known in advance (listener groups, reasons, poll
//! results) are resolved to handles once, so recording never looks a family up. Only a
//! peer's first poll does. Figures owned by other parts of the daemon ([`Gauges`]) are
//! passed in when rendering, so they are never stale.
//!
//! Names are written here as the page shows them: `register` strips the `_total` the
//! encoder adds back to a counter and the full stop the registry adds back to a help text.
//! The tests list every series of the page; one that disappears or is renamed fails them.

mod histogram;
mod scrape;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, prometheus_text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Metric, Registry};

pub use histogram::Histogram;
pub use scrape::Gauges;

use scrape::{CipTotals, Scraped, counter_family};

/// Upper bounds (seconds) of the query and search latency histograms' buckets: up to
/// past `search.deadline` (2 s by default), so that slow searches are told apart.
pub const LATENCY_BUCKETS: [f64; 15] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Upper bounds (seconds) of the buckets of exchanges with other nodes: polls, sub-queries.
pub const EXCHANGE_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Upper bounds of the sub-queries-per-search histogram's buckets.
pub const SUBQUERY_BUCKETS: [f64; 9] = [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];

/// Why a referral was not chased, as metric labels (the order of `SearchMetrics::unchased`).
pub const UNCHASED_REASONS: [&str; 6] = [
    "budget",
    "depth",
    "deadline",
    "refused",
    "unreachable",
    "limit",
];

/// Outcome counters of the polls of one peer.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PollCounts {
    /// Polls that returned a hint or "nothing new".
    pub ok: u64,
    /// Polls that failed.
    pub failed: u64,
}

/// Connection counters of one listener group (`cip`, `http`, `admin`), kept by its
/// connection limiter: handles on the series with its `listener` label.
#[derive(Debug, Default, Clone)]
pub struct ListenerCounters {
    /// Connections accepted (given a slot).
    pub accepted: Counter,
    /// Connections open now.
    pub open: Gauge,
    /// Refused because every slot was taken by connections that may not be evicted.
    pub refused_total: Counter,
    /// Refused because their source address had all its slots.
    pub refused_address: Counter,
    /// Evicted for a new connection before completing a request (handshake, headers).
    pub evicted_fresh: Counter,
    /// Evicted for a new connection while idle between requests.
    pub evicted_idle: Counter,
    /// Closed by their peer before they were accepted (a connect/close flood): dropped
    /// without a slot.
    pub gone_at_accept: Counter,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabel {
    listener: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerReason {
    listener: &'static str,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerStage {
    listener: &'static str,
    stage: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PollLabels {
    peer: String,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

/// The per-listener families, whose series [`Metrics::listener`] hands out.
#[derive(Debug)]
struct ListenerFamilies {
    open: Family<ListenerLabel, Gauge>,
    accepted: Family<ListenerLabel, Counter>,
    refused: Family<ListenerReason, Counter>,
    evicted: Family<ListenerStage, Counter>,
    gone_at_accept: Family<ListenerLabel, Counter>,
}

impl ListenerFamilies {
    /// The series of listener group `name`, created if new.
    fn series(&self, name: &'static str) -> ListenerCounters {
        let one = ListenerLabel { listener: name };
        let refused = |reason| ListenerReason {
            listener: name,
            reason,
        };
        let evicted = |stage| ListenerStage {
            listener: name,
            stage,
        };
        ListenerCounters {
            accepted: self.accepted.get_or_create_owned(&one),
            open: self.open.get_or_create_owned(&one),
            refused_total: self.refused.get_or_create_owned(&refused("total")),
            refused_address: self.refused.get_or_create_owned(&refused("address")),
            evicted_fresh: self.evicted.get_or_create_owned(&evicted("fresh")),
            evicted_idle: self.evicted.get_or_create_owned(&evicted("idle")),
            gone_at_accept: self.gone_at_accept.get_or_create_owned(&one),
        }
    }
}

/// The daemon's metrics.
#[derive(Debug)]
pub struct Metrics {
    /// Referral queries answered (HTTP and admin `explain` excluded).
    pub queries: Counter,
    /// Queries refused for bad syntax.
    pub query_errors: Counter,
    /// Referrals returned over all queries.
    pub referrals: Counter,
    /// In-bound index objects accepted (polled or pushed).
    pub index_objects_received: Counter,
    /// In-bound index objects refused (invalid, loop, unknown peer).
    pub index_objects_rejected: Counter,
    /// In-bound index objects refused because their DSI is not their peer's (also counted
    /// in `index_objects_rejected`).
    pub index_objects_forged: Counter,
    /// Passed-on index objects refused for their `Path`: through this node, naming a DSI
    /// twice, not from the sender or not to the object's dataset (also counted in
    /// `index_objects_rejected`).
    pub index_objects_bad_path: Counter,
    /// Times a polled peer was damped for changing too often (RFC 2439).
    pub peer_dampings: Counter,
    /// `datachanged` notices not sent: the poller's answer had not changed.
    pub datachanged_skipped: Counter,
    /// Hints sent to a poller as a delta from the one it held (PROTOCOL.md "Hint deltas").
    pub deltas_sent: Counter,
    /// Deltas from polled peers applied to the hint held.
    pub deltas_applied: Counter,
    /// Of those, the ones the routing table applied in place (the others were imported
    /// whole).
    pub deltas_in_place: Counter,
    /// Of those, the ones taken by the hint's head alone: neither the hint nor its spool
    /// file read (PROTOCOL.md "Applied by the head").
    pub deltas_by_head: Counter,
    /// Out-bound hints made from the table's changes since the one before.
    pub outbound_advanced: Counter,
    /// Deltas from polled peers refused (base not held, inconsistent, corrupt): the whole
    /// hint is asked at once.
    pub deltas_refused: Counter,
    /// In-bound index objects refused for counts that cannot be true (also counted in
    /// `index_objects_rejected`).
    pub index_objects_implausible: Counter,
    /// In-bound hints refused for the routing table's memory budgets (also counted in
    /// `index_objects_rejected`).
    pub index_objects_over_budget: Counter,
    /// In-bound hints whose signature verified.
    pub hint_signatures_valid: Counter,
    /// In-bound hints refused for their signature: missing under `require`, invalid,
    /// replayed, undated, or uncheckable (also counted in `index_objects_rejected`).
    pub hint_signatures_refused: Counter,
    /// Whois++ queries answered on the Whois++ listeners.
    pub whoispp_queries: Counter,
    /// Hina-Di URL fetches that succeeded (200 or 304).
    pub hinadi_fetches: Counter,
    /// Hina-Di URL fetches that failed (the last copy is kept).
    pub hinadi_fetch_errors: Counter,
    /// Requests for this node's Hina-Di file answered (304s included).
    pub hinadi_served: Counter,
    /// RDM requests answered (errors included).
    pub rdm_requests: Counter,
    /// RDM pulls that succeeded.
    pub rdm_pulls: Counter,
    /// RDM pulls that failed (the last copy is kept).
    pub rdm_pull_errors: Counter,
    /// Query latency.
    pub query_latency: Histogram,
    /// The chasing search's metrics.
    pub search: SearchMetrics,
    listeners: ListenerFamilies,
    /// The CIP listener's series, on the page even before it is bound, and read for its
    /// older names.
    cip: ListenerCounters,
    polls: Family<PollLabels, Counter>,
    /// Each polled peer's series (ok, failed), resolved at its first poll.
    polled: Mutex<BTreeMap<String, [Counter; 2]>>,
    /// Poll durations: ok, failed.
    poll_duration: [Histogram; 2],
    registry: Registrations,
}

/// What the page shows, recorded once as a name, a help text and a handle on the metric,
/// and put in a `prometheus_client` registry at each scrape: a registry keeps every name
/// and help text as strings of its own, kilobytes a node for a page that may never be
/// asked for (a simulation runs thousands of nodes in one process).
#[derive(Default)]
struct Registrations(Vec<AddTo>);

/// Puts one metric in a registry.
type AddTo = Box<dyn Fn(&mut Registry) + Send + Sync>;

impl std::fmt::Debug for Registrations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registrations({})", self.0.len())
    }
}

/// The chasing search's metrics (`/v1/search`, `/search`, Whois++ `chase`).
#[derive(Debug)]
pub struct SearchMetrics {
    /// Searches clients asked of this node.
    pub searches: Counter,
    /// Sub-requests of other nodes' searches answered here.
    pub served: Counter,
    /// Sub-queries this node sent.
    pub subqueries: Counter,
    /// Client searches answered partial.
    pub partial: Counter,
    /// Searches refused: client address not in `search.allow`.
    pub denied: Counter,
    /// Searches refused: over `search.rate`.
    pub rate_limited: Counter,
    /// Client searches answered from this node's answer cache.
    pub answer_cache_hits: Counter,
    /// Referrals left unchased, by reason ([`UNCHASED_REASONS`]).
    pub unchased: [Counter; 6],
    /// Client search latency.
    pub latency: Histogram,
    /// Time each sub-query this node sent took to be answered or to fail.
    pub subquery_latency: Histogram,
    /// Sub-queries per client search.
    subqueries_per_search: Histogram,
}

impl SearchMetrics {
    fn register(r: &mut Registrations) -> Self {
        let searches = counter(
            r,
            "cipd_searches_total",
            "Searches clients asked of this node.",
        );
        let served = counter(
            r,
            "cipd_search_subrequests_served_total",
            "Sub-requests of other nodes' searches answered here.",
        );
        let subqueries = counter(
            r,
            "cipd_search_subqueries_total",
            "Sub-queries this node sent.",
        );
        let partial = counter(
            r,
            "cipd_search_partial_total",
            "Client searches answered partial.",
        );
        let denied = counter(
            r,
            "cipd_search_denied_total",
            "Searches refused: client address not in search.allow.",
        );
        let rate_limited = counter(
            r,
            "cipd_search_rate_limited_total",
            "Searches refused: over search.rate.",
        );
        let answer_cache_hits = counter(
            r,
            "cipd_search_answer_cache_hits_total",
            "Client searches answered from this node's answer cache.",
        );
        let unchased = register(
            r,
            "cipd_search_unchased_total",
            "Referrals left unchased, by reason.",
            Family::<ReasonLabel, Counter>::default(),
        );
        Self {
            searches,
            served,
            subqueries,
            partial,
            denied,
            rate_limited,
            answer_cache_hits,
            unchased: UNCHASED_REASONS
                .map(|reason| unchased.get_or_create_owned(&ReasonLabel { reason })),
            subqueries_per_search: register(
                r,
                "cipd_search_subqueries_per_search",
                "Sub-queries per client search.",
                Histogram::counts(&SUBQUERY_BUCKETS),
            ),
            latency: register(
                r,
                "cipd_search_duration_seconds",
                "Client search latency.",
                Histogram::seconds(&LATENCY_BUCKETS),
            ),
            subquery_latency: register(
                r,
                "cipd_search_subquery_duration_seconds",
                "Time each sub-query this node sent took to be answered or to fail.",
                Histogram::seconds(&EXCHANGE_BUCKETS),
            ),
        }
    }

    /// Counts a referral left unchased for `reason` (one of [`UNCHASED_REASONS`]).
    pub fn note_unchased_label(&self, reason: &str) {
        if let Some(i) = UNCHASED_REASONS.iter().position(|r| *r == reason) {
            self.unchased[i].inc();
        }
    }

    /// Records one client search that cost `subqueries` sub-queries.
    pub fn observe_subqueries(&self, subqueries: u32) {
        self.subqueries_per_search
            .observe_count(u64::from(subqueries));
    }

    /// Counts one sub-query this node sent, which was answered or failed after `took`.
    pub fn note_subquery(&self, took: Duration) {
        self.subqueries.inc();
        self.subquery_latency.observe(took);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registrations::default();
        let r = &mut registry;
        let search = SearchMetrics::register(r);
        let queries = counter(r, "cipd_queries_total", "Referral queries answered.");
        let query_errors = counter(
            r,
            "cipd_query_errors_total",
            "Queries refused for bad syntax.",
        );
        let referrals = counter(
            r,
            "cipd_referrals_returned_total",
            "Referrals returned over all queries.",
        );
        let index_objects_received = counter(
            r,
            "cipd_index_objects_received_total",
            "In-bound index objects accepted.",
        );
        let index_objects_rejected = counter(
            r,
            "cipd_index_objects_rejected_total",
            "In-bound index objects refused.",
        );
        let index_objects_forged = counter(
            r,
            "cipd_index_objects_forged_total",
            "In-bound index objects refused because their DSI is not their peer's.",
        );
        let index_objects_bad_path = counter(
            r,
            "cipd_index_objects_bad_path_total",
            "Passed-on index objects refused for their path (a loop, a repeat, wrong ends).",
        );
        let peer_dampings = counter(
            r,
            "cipd_peer_dampings_total",
            "Times a polled peer was damped for changing too often (RFC 2439).",
        );
        let datachanged_skipped = counter(
            r,
            "cipd_datachanged_skipped_total",
            "datachanged notices not sent: the poller's answer had not changed.",
        );
        let deltas_sent = counter(
            r,
            "cipd_deltas_sent_total",
            "Hints sent to a poller as a delta from the one it held.",
        );
        let deltas_applied = counter(
            r,
            "cipd_deltas_applied_total",
            "Deltas from polled peers applied to the hint held.",
        );
        let deltas_in_place = counter(
            r,
            "cipd_deltas_in_place_total",
            "Deltas from polled peers the routing table applied in place (not re-importing the whole hint).",
        );
        let outbound_advanced = counter(
            r,
            "cipd_outbound_advanced_total",
            "Out-bound hints made from the table's changes since the one before, not aggregated whole.",
        );
        let deltas_by_head = counter(
            r,
            "cipd_deltas_by_head_total",
            "Deltas from polled peers taken by the hint's head alone, neither the hint nor its spool file read.",
        );
        let deltas_refused = counter(
            r,
            "cipd_deltas_refused_total",
            "Deltas from polled peers refused (base not held, inconsistent, corrupt); the whole hint is asked at once.",
        );
        let index_objects_implausible = counter(
            r,
            "cipd_index_objects_implausible_total",
            "In-bound index objects refused for counts that cannot be true.",
        );
        let index_objects_over_budget = counter(
            r,
            "cipd_index_objects_over_budget_total",
            "In-bound index objects refused for the routing table's memory budgets.",
        );
        let hint_signatures_valid = counter(
            r,
            "cipd_hint_signatures_valid_total",
            "In-bound hints whose signature verified.",
        );
        let hint_signatures_refused = counter(
            r,
            "cipd_hint_signatures_refused_total",
            "In-bound hints refused for their signature (missing, invalid, replayed, uncheckable).",
        );
        let whoispp_queries = counter(
            r,
            "cipd_whoispp_queries_total",
            "Whois++ queries answered on the Whois++ listeners.",
        );
        let hinadi_fetches = counter(
            r,
            "cipd_hinadi_fetches_total",
            "Hina-Di URL fetches that succeeded (200 or 304).",
        );
        let hinadi_fetch_errors = counter(
            r,
            "cipd_hinadi_fetch_errors_total",
            "Hina-Di URL fetches that failed; the last copy is kept.",
        );
        let hinadi_served = counter(
            r,
            "cipd_hinadi_served_total",
            "Requests for this node's Hina-Di file answered.",
        );
        let rdm_requests = counter(
            r,
            "cipd_rdm_requests_total",
            "RDM requests answered, errors included.",
        );
        let rdm_pulls = counter(r, "cipd_rdm_pulls_total", "RDM pulls that succeeded.");
        let rdm_pull_errors = counter(
            r,
            "cipd_rdm_pull_errors_total",
            "RDM pulls that failed; the last copy is kept.",
        );
        let listeners = ListenerFamilies {
            open: register(
                r,
                "cipd_connections_open",
                "Connections open now, by listener group.",
                Family::default(),
            ),
            accepted: register(
                r,
                "cipd_connections_accepted_total",
                "Connections given a slot, by listener group.",
                Family::default(),
            ),
            refused: register(
                r,
                "cipd_connections_refused_total",
                "Connections refused, by listener group and reason (total: no slot could be \
                 freed; address: the source address had all its slots).",
                Family::default(),
            ),
            evicted: register(
                r,
                "cipd_connections_evicted_total",
                "Connections closed to give their slot to a new one, by listener group and \
                 what they were doing (fresh: no request completed yet; idle: between requests).",
                Family::default(),
            ),
            gone_at_accept: register(
                r,
                "cipd_connections_gone_at_accept_total",
                "Connections their peer had closed before they were accepted (dropped at once, \
                 without a slot), by listener group.",
                Family::default(),
            ),
        };
        let polls = register(
            r,
            "cipd_polls_total",
            "Polls of each peer by outcome.",
            Family::default(),
        );
        let poll_duration = register(
            r,
            "cipd_poll_duration_seconds",
            "Time each poll of a peer took, by outcome.",
            Family::<ResultLabel, Histogram>::new_with_constructor(
                (|| Histogram::seconds(&EXCHANGE_BUCKETS)) as fn() -> Histogram,
            ),
        );
        let query_latency = register(
            r,
            "cipd_query_duration_seconds",
            "Query latency.",
            Histogram::seconds(&LATENCY_BUCKETS),
        );
        Self {
            cip: listeners.series("cip"),
            queries,
            query_errors,
            referrals,
            index_objects_received,
            index_objects_rejected,
            index_objects_forged,
            index_objects_bad_path,
            peer_dampings,
            datachanged_skipped,
            deltas_sent,
            deltas_applied,
            deltas_in_place,
            deltas_by_head,
            outbound_advanced,
            deltas_refused,
            index_objects_implausible,
            index_objects_over_budget,
            hint_signatures_valid,
            hint_signatures_refused,
            whoispp_queries,
            hinadi_fetches,
            hinadi_fetch_errors,
            hinadi_served,
            rdm_requests,
            rdm_pulls,
            rdm_pull_errors,
            query_latency,
            search,
            listeners,
            polls,
            polled: Mutex::new(BTreeMap::new()),
            poll_duration: ["ok", "failed"]
                .map(|result| poll_duration.get_or_create_owned(&ResultLabel { result })),
            registry,
        }
    }
}

impl Metrics {
    /// Counts one poll of `peer`, which succeeded (`ok`) or failed after `took`.
    pub fn poll_done(&self, peer: &str, ok: bool, took: Duration) {
        let i = usize::from(!ok);
        {
            let mut polled = super::lock(&self.polled);
            if let Some(series) = polled.get(peer) {
                series[i].inc();
            } else {
                let series = ["ok", "failed"].map(|result| {
                    let peer = peer.to_owned();
                    self.polls.get_or_create_owned(&PollLabels { peer, result })
                });
                series[i].inc();
                polled.insert(peer.to_owned(), series);
            }
        }
        self.poll_duration[i].observe(took);
    }

    /// Poll counters per peer.
    pub fn polls(&self) -> BTreeMap<String, PollCounts> {
        super::lock(&self.polled)
            .iter()
            .map(|(peer, [ok, failed])| {
                let counts = PollCounts {
                    ok: ok.get(),
                    failed: failed.get(),
                };
                (peer.clone(), counts)
            })
            .collect()
    }

    /// The connection counters of listener group `name`, its series created on first use.
    pub fn listener(&self, name: &'static str) -> Arc<ListenerCounters> {
        Arc::new(self.listeners.series(name))
    }

    /// Adds 1 to a counter.
    pub fn inc(counter: &Counter) {
        counter.inc();
    }

    /// Renders every metric in the Prometheus text format (version 0.0.4), with `gauges`.
    pub fn render(&self, gauges: &Gauges) -> String {
        let c = &self.cip;
        let cip = CipTotals {
            accepted: c.accepted.get(),
            refused: c.refused_total.get() + c.refused_address.get(),
            open: u64::try_from(c.open.get()).unwrap_or(0),
        };
        let mut scraped = Registry::default();
        scraped.register_collector(Box::new(Scraped {
            gauges: *gauges,
            cip,
        }));
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String does not fail, nor does encoding these metrics.
        let mut registry = Registry::default();
        for add in &self.registry.0 {
            add(&mut registry);
        }
        let _ = prometheus_text::encode(&mut out, &registry)
            .and_then(|()| prometheus_text::encode(&mut out, &scraped));
        out
    }
}

/// Registers `metric` as `name` with `help`, both as the page shows them: a counter's name
/// ends with `_total` and every help text with a full stop, which the library adds back.
fn register<M: Metric + Clone>(
    r: &mut Registrations,
    name: &'static str,
    help: &'static str,
    metric: M,
) -> M {
    let name = match metric.metric_type() {
        MetricType::Counter => counter_family(name),
        _ => name,
    };
    debug_assert!(
        help.ends_with('.'),
        "the help of {name} ends with a full stop"
    );
    let help = help.strip_suffix('.').unwrap_or(help);
    let shown = metric.clone();
    r.0.push(Box::new(move |registry| {
        registry.register(name, help, shown.clone());
    }));
    metric
}

/// A counter registered as `name` with `help` (see [`register`]).
fn counter(r: &mut Registrations, name: &'static str, help: &'static str) -> Counter {
    register(r, name, help, Counter::default())
}
