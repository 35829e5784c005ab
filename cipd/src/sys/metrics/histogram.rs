//! A histogram on atomics. Recording a value is two relaxed additions and takes no lock:
//! `prometheus_client`'s own histogram takes a mutex for every observation, too much for the
//! query path. It is encoded through `prometheus_client` like the library's own metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// A histogram of fixed buckets. Clones share their counts: the registry holds one, the
/// code that records holds another.
#[derive(Debug, Clone)]
pub struct Histogram(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// Upper bounds of the buckets, increasing.
    bounds: &'static [f64],
    /// Observations per bucket, not cumulative: one per bound, then one for the values past
    /// the last bound. Their total is the count, so the page's buckets never disagree with it.
    buckets: Box<[AtomicU64]>,
    /// The sum of the observations, in recorded units (nanoseconds for durations).
    sum: AtomicU64,
    /// Recorded units per unit on the page: 1e9 for durations, 1 for counts.
    per_unit: f64,
}

impl Histogram {
    /// A histogram of durations, shown in seconds, with upper bounds `bounds` (seconds).
    pub fn seconds(bounds: &'static [f64]) -> Self {
        Self::new(bounds, 1e9)
    }

    /// A histogram of counts with upper bounds `bounds`.
    pub fn counts(bounds: &'static [f64]) -> Self {
        Self::new(bounds, 1.0)
    }

    fn new(bounds: &'static [f64], per_unit: f64) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bounds increase");
        Self(Arc::new(Inner {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            per_unit,
        }))
    }

    /// Records one duration (a histogram made by [`Histogram::seconds`]).
    pub fn observe(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.record(d.as_secs_f64(), nanos);
    }

    /// Records one count (a histogram made by [`Histogram::counts`]).
    pub fn observe_count(&self, n: u64) {
        self.record(n as f64, n);
    }

    fn record(&self, value: f64, recorded: u64) {
        // The first bucket whose bound is at least the value, else the one past the last.
        let i = self.0.bounds.partition_point(|&b| b < value);
        self.0.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.0.sum.fetch_add(recorded, Ordering::Relaxed);
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.0
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }
}

impl TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = self
            .0
            .buckets
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let bound = self.0.bounds.get(i).copied().unwrap_or(f64::INFINITY);
                (bound, n.load(Ordering::Relaxed))
            })
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        let sum = self.0.sum.load(Ordering::Relaxed) as f64 / self.0.per_unit;
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
