//! The schedule of collections this node pulls from elsewhere (Hina-Di URLs, RDM servers):
//! each is fetched on its interval, a failure is retried after 2, 4, 8 ... seconds (never
//! later than the interval), and the local index is rebuilt when a copy changed. The
//! schedule follows configuration reloads (checked at least every few seconds).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::model::config::{CollectionConfig, Config};
use crate::sys::metrics::Metrics;

/// What the schedule needs of the node; the node implements it.
pub trait FeedHost: Send + Sync + 'static {
    /// The configuration in force (the schedule follows reloads).
    fn config(&self) -> Arc<Config>;
    /// The node's metrics, for the pull counters.
    fn metrics(&self) -> &Metrics;
    /// Cancelled when the node shuts down.
    fn shutdown_token(&self) -> CancellationToken;
    /// The HTTP client to fetch with.
    fn http_client(&self) -> crate::sys::http::HttpClient;
    /// Reloads the local collections whose copies changed.
    fn reload_changed(&self) -> impl Future<Output = ()> + Send;
}

/// A pulled collection: where from, and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feed {
    /// The URL; a new one restarts the schedule.
    pub url: String,
    /// Time between pulls.
    pub interval: Duration,
}

/// The delay before retrying after `failures` failures in a row: 2, 4, 8 ... seconds, at
/// most `interval`.
pub fn retry_delay(failures: u32, interval: Duration) -> Duration {
    Duration::from_secs(1 << failures.clamp(1, 16)).min(interval)
}

/// Runs `pull` for every collection `select` picks, on its schedule, until shutdown.
/// `pull` returns whether the collection's copy changed, or why it failed (logged with
/// `what`; the last copy stays).
pub async fn run<H, P, Fut>(
    node: Arc<H>,
    what: &'static str,
    select: fn(&CollectionConfig) -> Option<Feed>,
    pull: P,
) where
    H: FeedHost,
    P: Fn(Arc<H>, Arc<Config>, CollectionConfig) -> Fut,
    Fut: Future<Output = Result<bool, String>>,
{
    let token = node.shutdown_token();
    // name -> (url, next due, failures in a row)
    let mut due: HashMap<String, (String, Instant, u32)> = HashMap::new();
    loop {
        let config = node.config();
        let now = Instant::now();
        let mut next_check = now + Duration::from_secs(5);
        let mut changed = false;
        let mut live = Vec::new();
        for c in &config.collections {
            let Some(feed) = select(c) else { continue };
            live.push(c.name.clone());
            let (at, failures) = match due.get(&c.name) {
                Some((u, at, f)) if *u == feed.url => (*at, *f),
                _ => (now, 0),
            };
            if at > now {
                next_check = next_check.min(at);
                continue;
            }
            let (next, failures) = match pull(node.clone(), config.clone(), c.clone()).await {
                Ok(ch) => {
                    changed |= ch;
                    (feed.interval, 0)
                }
                Err(error) => {
                    let failures = failures.saturating_add(1);
                    let wait = retry_delay(failures, feed.interval);
                    tracing::warn!(collection = %c.name, url = %feed.url, %error, failures, retry_in = ?wait, "{what} failed; keeping the last copy");
                    (wait, failures)
                }
            };
            let at = Instant::now() + next;
            next_check = next_check.min(at);
            due.insert(c.name.clone(), (feed.url, at, failures));
        }
        due.retain(|name, _| live.contains(name));
        if changed {
            node.reload_changed().await;
        }
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep_until(next_check.into()) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_up_to_the_interval() {
        let hour = Duration::from_secs(3600);
        let d: Vec<u64> = (1..=4).map(|f| retry_delay(f, hour).as_secs()).collect();
        assert_eq!(d, [2, 4, 8, 16]);
        assert_eq!(retry_delay(30, hour), hour);
        assert_eq!(
            retry_delay(3, Duration::from_secs(5)),
            Duration::from_secs(5)
        );
    }
}
