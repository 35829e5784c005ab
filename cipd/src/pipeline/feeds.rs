//! The schedule of collections this node pulls from elsewhere (Hina-Di URLs, RDM servers):
//! each is fetched on its interval, a failure is retried after 2, 4, 8 ... seconds (never
//! later than the interval), and the local index is rebuilt when a copy changed. The
//! schedule follows configuration reloads (checked at least every few seconds).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
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
    // On the runtime's clock, which the timers follow (a simulation's clock runs apart from
    // the system's: a deadline on the system's clock would pass at once there, or never).
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
            // Boxed: a pull (an HTTP fetch and a parse) is a large future, and the loop
            // spends its life waiting (every node runs it, most with nothing to pull).
            let pulled = Box::pin(pull(node.clone(), config.clone(), c.clone())).await;
            let (next, failures) = match pulled {
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
            Box::pin(node.reload_changed()).await;
        }
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep_until(next_check) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A node with one pulled collection, counting its pulls.
    struct Host {
        config: Arc<Config>,
        metrics: Metrics,
        token: CancellationToken,
        pulls: AtomicUsize,
    }

    impl FeedHost for Host {
        fn config(&self) -> Arc<Config> {
            self.config.clone()
        }
        fn metrics(&self) -> &Metrics {
            &self.metrics
        }
        fn shutdown_token(&self) -> CancellationToken {
            self.token.clone()
        }
        fn http_client(&self) -> crate::sys::http::HttpClient {
            self.config
                .http_client
                .client(None, None)
                .unwrap_or_else(|e| panic!("client: {e}"))
        }
        async fn reload_changed(&self) {}
    }

    #[tokio::test(start_paused = true)]
    async fn the_schedule_keeps_the_runtimes_clock() {
        // A paused clock runs ahead of the system's as soon as it is advanced, as a
        // simulation's does: a schedule kept on the system's clock then found every
        // deadline passed and pulled without end.
        let dir = tempfile::tempdir().unwrap();
        let config = Config::from_toml_relative(
            "data_dir = \"d\"\n[node]\ndsi = \"1.3.6.1.4.1.99999.1\"\n\
             [[collection]]\nname = \"pulled\"\ntype = \"soif\"\npath = \"docs.soif\"\n",
            dir.path(),
        )
        .unwrap();
        let host = Arc::new(Host {
            config: Arc::new(config),
            metrics: Metrics::default(),
            token: CancellationToken::new(),
            pulls: AtomicUsize::new(0),
        });
        let every = Duration::from_secs(60);
        let select = |_: &CollectionConfig| {
            Some(Feed {
                url: "http://feed/".into(),
                interval: Duration::from_secs(60),
            })
        };
        let task = tokio::spawn(run(
            host.clone(),
            "test pull",
            select,
            |h: Arc<Host>, _, _| async move {
                h.pulls.fetch_add(1, Ordering::Relaxed);
                Ok(false)
            },
        ));
        tokio::time::sleep(every * 10 + Duration::from_secs(1)).await;
        // Once at the start, then once a minute.
        assert_eq!(host.pulls.load(Ordering::Relaxed), 11);
        host.token.cancel();
        task.await.unwrap();
    }

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
