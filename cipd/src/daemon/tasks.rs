//! The daemon's background loops: watching the collection files, expiring the table and
//! logging the cold start's import progress.

use std::sync::Arc;
use std::time::Duration;

use crate::node::Node;

pub(super) async fn watch_collections(node: Arc<Node>) {
    let token = node.token.child_token();
    loop {
        let Some(every) = node.config().limits.watch_interval else {
            // Watching is off; wait for shutdown (a reload may turn it on, but then this
            // task would need a restart: check again now and then).
            tokio::select! {
                () = token.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(60)) => continue,
            }
        };
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let changed = node.rebuild_local(false).await;
        if !changed.is_empty() {
            tracing::info!(collections = ?changed, "collection files changed; hint rebuilt");
        }
    }
}

pub(super) async fn expire_loop(node: Arc<Node>) {
    let token = node.token.child_token();
    loop {
        let ttl = node.config().spool_ttl;
        let every = (ttl / 10).clamp(Duration::from_millis(50), Duration::from_secs(60));
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        // Expiry writes the table (a merge can take a while): off the async workers.
        let n = node.clone();
        if let Err(e) = crate::sys::net::spawn_blocking(move || n.expire()).await {
            tracing::error!(error = %e, "expiry task failed");
        }
    }
}

/// Logs, every few seconds until the table holds every configured peer's hint for the
/// first time, how many it holds (cold start progress; `cipctl status` shows it too).
pub(super) async fn import_progress(node: Arc<Node>) {
    let token = node.token.child_token();
    let mut last = None;
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
        let (expected, imported) = node.import_progress();
        if imported >= expected {
            return;
        }
        // Some peers do not answer: stop waiting for them after a whole poll timeout.
        if node.uptime() > node.config().limits.poll_timeout + Duration::from_secs(5) {
            node.end_cold_start();
        }
        if last != Some(imported) {
            tracing::info!(imported, expected, "importing peers' hints");
            last = Some(imported);
        }
    }
}
