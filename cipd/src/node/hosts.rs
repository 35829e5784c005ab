//! The node as the pipelines and stores below it see it: each takes a narrow trait defined
//! at its own level ([`OutboundHost`], [`FeedHost`], [`JournalHost`]), implemented here.

use std::sync::Arc;

use hints::table::RoutingTable;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Node;
use crate::model::config::Config;
use crate::model::status::Status;
use crate::pipeline::feeds::FeedHost;
use crate::pipeline::outbound::{BuildInput, OutboundHost, Pipeline};
use crate::store::journal::{JournalHost, Journals};
use crate::store::local_index::LocalIndex;
use crate::sys::lock;
use crate::sys::metrics::Metrics;

impl OutboundHost for Node {
    fn config(&self) -> Arc<Config> {
        Node::config(self)
    }

    fn pipeline(&self) -> &Arc<Pipeline> {
        self.outbound()
    }

    fn table(&self) -> Arc<RoutingTable> {
        self.table_handle()
    }

    fn build_input(&self) -> BuildInput {
        self.outbound_input()
    }

    fn built(&self, changed: Option<u64>, table_generation: u64, builds: u64) {
        self.update_status(|s| {
            if let Some(generation) = changed {
                s.outbound_generation = generation;
            }
            s.outbound_table_generation = table_generation;
            s.outbound_builds = builds;
        });
    }

    fn advanced(&self, delta: Arc<hints::delta::HintDelta>, bytes: usize) {
        Metrics::inc(&self.metrics.outbound_advanced);
        let mut journal = lock(&self.journal);
        journal.set_limits(self.config().outbound.journal);
        journal.record(delta, bytes);
    }
}

impl FeedHost for Node {
    fn config(&self) -> Arc<Config> {
        Node::config(self)
    }

    fn metrics(&self) -> &Metrics {
        Node::metrics(self)
    }

    fn shutdown_token(&self) -> CancellationToken {
        self.token.child_token()
    }

    fn http_client(&self) -> crate::sys::http::HttpClient {
        Node::http_client(self)
    }

    async fn reload_changed(&self) {
        self.rebuild_local(false).await;
    }
}

impl JournalHost for Node {
    fn config(&self) -> Arc<Config> {
        Node::config(self)
    }

    fn local(&self) -> Arc<LocalIndex> {
        Node::local(self)
    }

    fn journals(&self) -> &Journals {
        self.rdm_journals()
    }

    fn status(&self) -> watch::Receiver<Status> {
        self.subscribe()
    }

    fn shutdown_token(&self) -> CancellationToken {
        self.token.child_token()
    }
}
