//! Reload: the configuration file and collections re-read, bindings and peers updated, and
//! what only a restart applies reported.

use crate::model::config::read_config;

use super::*;

impl Node {
    /// Re-reads the configuration file (when the node has one) and the collections. A bad
    /// configuration is refused and the old one stays.
    ///
    /// # Errors
    /// [`ReloadError`] when the new configuration is invalid.
    pub async fn reload(self: &Arc<Self>) -> Result<ReloadReport, ReloadError> {
        crate::sys::notify::reloading();
        let result = self.reload_inner().await;
        crate::sys::notify::ready(match &result {
            Ok(_) => "reloaded",
            Err(_) => "reload refused; running configuration kept",
        });
        result
    }

    pub(super) async fn reload_inner(self: &Arc<Self>) -> Result<ReloadReport, ReloadError> {
        let mut report = ReloadReport::default();
        if let Some(path) = &self.config_path {
            let new = match read_config(path) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(error = %e, "reload refused; keeping the running configuration");
                    self.update_status(|s| s.reload_failures += 1);
                    return Err(e.into());
                }
            };
            let old = self.config();
            // The key is read again (it may have been replaced in place) and must load
            // before anything else changes.
            let key = match crate::model::trust::Trust::load_key(new.signing.key.as_deref()) {
                Ok(k) => k,
                Err(e) => {
                    tracing::error!(error = %e, "reload refused; keeping the running configuration");
                    self.update_status(|s| s.reload_failures += 1);
                    return Err(ReloadError::Key(e));
                }
            };
            let http = if new.http_client == old.http_client {
                None
            } else {
                match new
                    .http_client
                    .client(None, None)
                    .and_then(|c| Ok((c, crate::pipeline::search::client(&new.http_client)?)))
                {
                    Ok(c) => Some(c),
                    Err(e) => {
                        tracing::error!(error = %e, "reload refused; keeping the running configuration");
                        self.update_status(|s| s.reload_failures += 1);
                        return Err(ReloadError::HttpClient(e));
                    }
                }
            };
            if let Some((client, search)) = http {
                self.http.store(Arc::new(client));
                self.searcher.set_client(search);
            }
            let public =
                |k: Option<&Arc<crate::model::trust::keys::NodeKey>>| k.map(|k| k.public().clone());
            if public(key.as_ref()) != public(self.trust.key().as_ref()) {
                self.trust.set_key(key);
                self.outbound.request();
            }
            self.trust
                .retain(|name| new.peers.iter().any(|p| p.name == name));
            report.needs_restart = restart_only_changes(&old, &new);
            for key in &report.needs_restart {
                tracing::warn!(key = %key, "changed setting takes effect only after a restart");
            }
            if new.node != old.node {
                let mut id = (**self.identity.load()).clone();
                id.dsi = new.node.dsi.clone();
                id.description = new.node.description.clone();
                if !new.node.base_uris.is_empty() {
                    id.base_uris = new.node.base_uris.clone();
                }
                self.identity.store(Arc::new(id));
                self.invalidate_answers();
                // The out-bound hint names this node (URL, provenance).
                self.outbound.request();
            }
            {
                let mut peers = lock(&self.peers);
                let mut next = BTreeMap::new();
                for p in &new.peers {
                    let mut s = peers
                        .remove(&p.name)
                        .unwrap_or_else(|| Box::new(initial_peer_state(p)));
                    let fresh = initial_peer_state(p);
                    s.address = fresh.address;
                    s.roles = fresh.roles;
                    if fresh.dsi.is_some() {
                        s.dsi = fresh.dsi;
                    }
                    next.insert(p.name.clone(), s);
                }
                *peers = next;
            }
            if let Some(h) = &self.log
                && new.log_level != old.log_level
                && std::env::var_os("RUST_LOG").is_none()
                && let Err(e) = h.set_level(&new.log_level)
            {
                tracing::warn!(error = %e, "cannot apply the new log level");
            }
            let ended = self.bindings.reconfigure(&new);
            self.config.store(Arc::new(new));
            self.invalidate_answers();
            for (peer, dsi) in ended {
                // The hint that binding vouched for is nobody's now. Checked under the
                // import thread's lock: a hint of that peer in flight has either landed (and
                // goes here) or will be vetoed by its vouch.
                let node = self.clone();
                let dropped = crate::sys::net::spawn_blocking(move || {
                    node.drop_dataset_if(&dsi, |p| p.via.as_deref() == Some(peer.as_str()))
                        .then_some((peer, dsi))
                })
                .await;
                if let Ok(Some((peer, dsi))) = dropped {
                    tracing::info!(%peer, %dsi, "peer's dsi binding ended by the reload; its hint dropped");
                }
            }
            for p in self.config().peers.iter() {
                let bound = self.bindings.get(&p.name).map(|b| b.dsi.to_string());
                self.update_peer(&p.name, |s| s.dsi = bound);
            }
            self.note_table_change();
            self.load_thesaurus();
            report.config_reloaded = true;
            self.resolve_peers().await;
            self.peers_changed();
        }
        report.collections_reloaded = self.rebuild_local(false).await;
        self.update_status(|s| s.reloads += 1);
        tracing::info!(collections = ?report.collections_reloaded, "reload done");
        Ok(report)
    }

    /// (Re)reads the thesaurus file, keeping the old one on error.
    pub(crate) fn load_thesaurus(&self) {
        self.invalidate_answers();
        let Some(path) = self.config().thesaurus.clone() else {
            self.thesaurus.store(None);
            return;
        };
        match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| Thesaurus::parse(&t).map_err(|e| e.to_string()))
        {
            Ok(t) => self.thesaurus.store(Some(Arc::new(t))),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot load the thesaurus; keeping the previous one")
            }
        }
    }
}

pub(super) fn restart_only_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    if old.listen != new.listen {
        out.push("listen".to_owned());
    }
    if old.data_dir != new.data_dir {
        out.push("data_dir".to_owned());
    }
    // The HTTP router is built once, at start.
    for (changed, key) in [
        (old.console.path != new.console.path, "console.path"),
        (
            old.hinadi.serve_path != new.hinadi.serve_path,
            "hinadi.path",
        ),
        (old.rdm.path != new.rdm.path, "rdm.path"),
    ] {
        if changed {
            out.push(key.to_owned());
        }
    }
    if old.log_format != new.log_format {
        out.push("log.format".to_owned());
    }
    // The search's caches are sized once, at start.
    let (o, n) = (&old.search, &new.search);
    if (
        o.cache_entries,
        o.cache_ttl,
        o.infra_entries,
        o.failure_ttl,
        o.max_failure_ttl,
    ) != (
        n.cache_entries,
        n.cache_ttl,
        n.infra_entries,
        n.failure_ttl,
        n.max_failure_ttl,
    ) {
        out.push("search (cache and infrastructure cache sizes and times)".to_owned());
    }
    if old.limits.max_concurrent_polls != new.limits.max_concurrent_polls
        || old.limits.max_concurrent_scans != new.limits.max_concurrent_scans
        || old.limits.answer_cache_bytes != new.limits.answer_cache_bytes
    {
        out.push("limits (concurrent polls and scans, answer cache)".to_owned());
    }
    let (o, n) = (&old.limits, &new.limits);
    if (
        o.max_connections,
        o.max_connections_per_address,
        o.max_http_connections,
        o.max_http_connections_per_address,
        o.listen_backlog,
    ) != (
        n.max_connections,
        n.max_connections_per_address,
        n.max_http_connections,
        n.max_http_connections_per_address,
        n.listen_backlog,
    ) {
        out.push("limits (connection limits, listen backlog)".to_owned());
    }
    if old.import != new.import {
        out.push("import".to_owned());
    }
    if old.limits.table != new.limits.table {
        out.push("limits (routing table bounds)".to_owned());
    }
    if old.index != new.index {
        out.push("index".to_owned());
    }
    if old.limits.admin != new.limits.admin {
        out.push("limits (admin socket bounds)".to_owned());
    }
    if old.node.dsi != new.node.dsi {
        out.push("node.dsi (the routing table keeps refusing hints for the old one)".to_owned());
    }
    out
}
