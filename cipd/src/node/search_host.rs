//! Searches that chase referrals through the mesh ([`crate::pipeline::search`]): the node
//! as their host, who may ask for one (`search.allow`, `search.rate`), where sub-queries may
//! go (`may_contact`), and the nodes that poll this one, learnt from the `base-uri` their
//! polls name.

use std::hash::{Hash, Hasher};

use tokio::time::Instant;

use hints::query::Query;

use crate::model::answer::{ObjectJson, SearchAnswer};
use crate::model::config::{SearchConfig, TargetRule};
use crate::pipeline::search::{Direction, Hop, SearchHost, SearchRequest, Target};
use crate::store::clients::Upstream;

use super::*;

/// Why a search request is refused before it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchRefusal {
    /// `search.enabled = false`.
    Disabled,
    /// The client's address is not in `search.allow`.
    Denied,
    /// The client is over `search.rate`.
    RateLimited,
}

/// True for addresses never contacted unless `search.targets` names them: link-local
/// (cloud metadata services live there), unspecified, multicast, broadcast.
fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) if v4.is_link_local() => Some("a link-local address"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("the broadcast address"),
        IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => Some("a link-local address"),
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_link_local()) => {
            Some("a link-local address")
        }
        ip if ip.is_unspecified() => Some("the unspecified address"),
        ip if ip.is_multicast() => Some("a multicast address"),
        _ => None,
    }
}

impl Node {
    /// The nodes that poll this one, as learnt from their polls.
    pub fn upstreams(&self) -> Vec<Upstream> {
        self.upstreams.all()
    }

    /// Notes a poll from `remote` that named `base_uris` (the `base-uri` parameter, as ROADS
    /// and cipd pollers send it): when `remote` is a configured peer that polls us (or that
    /// we push to), searches widen to it.
    pub fn note_poller(&self, remote: IpAddr, poller: Option<&Dsi>, base_uris: &str) {
        let uris: Vec<String> = base_uris.split_whitespace().map(str::to_owned).collect();
        if uris.is_empty() {
            return;
        }
        let roles = [PeerRole::Poller, PeerRole::Push];
        let Some(name) = self.identify_peer(remote, poller, &roles) else {
            return;
        };
        let dsi = poller
            .map(|d| d.to_string())
            .or_else(|| self.peer_dsi(&name).map(|d| d.to_string()))
            .unwrap_or_else(|| uris[0].clone());
        let entry = Upstream {
            dsi,
            base_uris: uris,
            from: remote,
        };
        let (dsi, uris) = (entry.dsi.clone(), entry.base_uris.join(" "));
        if self.upstreams.note(&name, entry) {
            tracing::info!(peer = %name, %dsi, base_uri = %uris, "search: learnt a node that polls us");
        }
        let config = self.config();
        self.upstreams
            .retain(|n| config.peers.iter().any(|p| p.name == n));
    }

    /// Addresses of the configured peers (literal and resolved) and of the pollers learnt.
    fn known_addresses(&self) -> Vec<IpAddr> {
        let config = self.config();
        let mut out: Vec<IpAddr> = config
            .peers
            .iter()
            .filter_map(|p| p.host.parse::<IpAddr>().ok())
            .collect();
        out.extend(
            lock(&self.peers)
                .values()
                .flat_map(|s| s.resolved.iter().copied()),
        );
        out.extend(self.upstreams.addresses());
        out
    }

    /// Whether `client` may search now: `search.enabled`, `search.allow` (default: loopback
    /// and the peers' addresses), then `search.rate` (peers not limited: their sub-requests carry
    /// their searches' budgets).
    ///
    /// # Errors
    /// [`SearchRefusal`] says which rule refused it.
    pub fn search_admits(&self, client: IpAddr) -> Result<(), SearchRefusal> {
        let config = self.config();
        let s = &config.search;
        if !s.enabled {
            return Err(SearchRefusal::Disabled);
        }
        let client = match client {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(client, IpAddr::V4),
            v4 => v4,
        };
        let peer = self.known_addresses().contains(&client);
        let allowed = match &s.allow {
            Some(nets) => nets.iter().any(|n| n.contains(&client)),
            None => peer || client.is_loopback(),
        };
        if !allowed {
            Metrics::inc(&self.metrics.search.denied);
            return Err(SearchRefusal::Denied);
        }
        // Peers' sub-requests are bounded by the budget their searches carry.
        if peer {
            return Ok(());
        }
        if !self.search_clients.admit(client, s.rate) {
            Metrics::inc(&self.metrics.search.rate_limited);
            return Err(SearchRefusal::RateLimited);
        }
        Ok(())
    }

    /// Whether a sub-query may go to `host`:`port` (PROTOCOL.md, "Search": where
    /// sub-queries go).
    ///
    /// # Errors
    /// Why not.
    pub fn may_contact(&self, host: &str, port: u16) -> Result<(), String> {
        let config = self.config();
        let listeners = self.listeners();
        let own: Vec<SocketAddr> = listeners
            .http
            .iter()
            .chain(&listeners.https)
            .chain(&listeners.cip)
            .chain(&listeners.cip_tls)
            .chain(&listeners.whoispp)
            .copied()
            .collect();
        let is_own = |ip: IpAddr| {
            own.iter().any(|a| {
                a.port() == port && (a.ip() == ip || (a.ip().is_unspecified() && ip.is_loopback()))
            })
        };
        match host.parse::<IpAddr>() {
            Ok(ip) => {
                if is_own(ip) {
                    return Err("this node's own listener".to_owned());
                }
                let by_rule = config.search.targets.iter().any(|r| match r {
                    TargetRule::Net(n) => n.contains(&ip),
                    TargetRule::Name(_) => false,
                });
                if let Some(what) = special(ip)
                    && !by_rule
                {
                    return Err(format!("{ip} is {what}"));
                }
                if by_rule || self.known_addresses().contains(&ip) {
                    Ok(())
                } else {
                    Err(format!(
                        "{ip} is not a peer's address (search.targets admits others)"
                    ))
                }
            }
            Err(_) => {
                let name = host.to_ascii_lowercase();
                if name == "localhost" && is_own(IpAddr::from([127, 0, 0, 1])) {
                    return Err("this node's own listener".to_owned());
                }
                let by_rule = config
                    .search
                    .targets
                    .iter()
                    .any(|r| matches!(r, TargetRule::Name(n) if *n == name));
                let peer = config
                    .peers
                    .iter()
                    .any(|p| p.host.eq_ignore_ascii_case(&name));
                if by_rule || peer {
                    Ok(())
                } else {
                    Err(format!(
                        "{host} is not a peer's host (search.targets admits others)"
                    ))
                }
            }
        }
    }

    /// What this node's answers are computed from, as one number for the answer cache.
    fn search_stamp(&self) -> u64 {
        let s = self.answer_stamp();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (s.table, s.local, s.epoch).hash(&mut h);
        h.finish()
    }

    /// This node's kept answer for the request `key`, JSON with `trace_id` and `elapsed_ms`
    /// filled in for this request.
    pub fn cached_search(&self, key: &str, trace_id: &str, started: Instant) -> Option<Bytes> {
        let stamp = self.search_stamp();
        let hit = self.searcher.own.get(key, |c| c.stamp == stamp)?;
        Some(splice_answer(&hit.body, trace_id, started))
    }

    /// Runs a search at this node and keeps a complete answer for `key`; returns it as
    /// JSON.
    pub async fn search(
        self: &Arc<Self>,
        req: SearchRequest,
        key: String,
    ) -> (SearchAnswer, Bytes) {
        let started = Instant::now();
        let entry = req.direction == Direction::Entry;
        let stamp = self.search_stamp();
        let trace_id = req.trace.trace_id.clone();
        tracing::info!(
            trace_id = %trace_id,
            query = %req.query,
            direction = req.direction.as_str(),
            hop = req.hop,
            budget = req.budget,
            depth = req.depth,
            "search"
        );
        let host = Host(self.clone());
        let mut answer = self.searcher.search(&host, req).await;
        let m = &self.metrics.search;
        if entry {
            Metrics::inc(&m.searches);
            m.observe_subqueries(answer.subqueries);
            m.latency.observe(started.elapsed());
            if answer.partial {
                Metrics::inc(&m.partial);
            }
        } else {
            Metrics::inc(&m.served);
        }
        tracing::info!(
            trace_id = %trace_id,
            objects = answer.objects.len(),
            subqueries = answer.subqueries,
            partial = answer.partial,
            elapsed_ms = answer.elapsed_ms,
            "search answered"
        );
        answer.trace_id = String::new();
        answer.elapsed_ms = 0.0;
        let body = Bytes::from(serde_json::to_vec(&answer).unwrap_or_default());
        // Partial and stale answers are not kept: the next request tries again.
        if !answer.partial && !answer.stale {
            self.searcher.own.put(
                key,
                Arc::new(crate::pipeline::search::CachedOwn {
                    body: body.clone(),
                    stamp,
                }),
            );
        }
        let json = splice_answer(&body, &trace_id, started);
        answer.trace_id = trace_id;
        answer.elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
        (answer, json)
    }

    /// Counts a client search answered from this node's answer cache.
    pub fn note_search_cache_hit(&self, took: std::time::Duration) {
        let m = &self.metrics.search;
        Metrics::inc(&m.searches);
        Metrics::inc(&m.answer_cache_hits);
        m.observe_subqueries(0);
        m.latency.observe(took);
    }

    /// The search settings in force.
    pub fn search_settings(&self) -> Arc<SearchConfig> {
        Arc::new(self.config().search.clone())
    }
}

/// `body` (an answer serialised with an empty `trace_id` and `elapsed_ms` 0) with this
/// request's trace id and time.
fn splice_answer(body: &[u8], trace_id: &str, started: Instant) -> Bytes {
    const TRACE: &[u8] = b",\"trace_id\":\"\"";
    const ELAPSED: &[u8] = b",\"elapsed_ms\":0.0}";
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    let mut out = Vec::with_capacity(body.len() + 64);
    let at = memchr::memmem::find(body, TRACE);
    let end = body.len().saturating_sub(ELAPSED.len());
    match at {
        Some(at) if body.ends_with(ELAPSED) && at < end => {
            out.extend_from_slice(&body[..at]);
            out.extend_from_slice(b",\"trace_id\":\"");
            out.extend_from_slice(trace_id.as_bytes());
            out.push(b'"');
            out.extend_from_slice(&body[at + TRACE.len()..end]);
            out.extend_from_slice(format!(",\"elapsed_ms\":{elapsed:.3}}}").as_bytes());
        }
        _ => out.extend_from_slice(body),
    }
    Bytes::from(out)
}

/// The node as the search's host (an `Arc`, so table scans can go to the blocking pool).
struct Host(Arc<Node>);

impl Host {
    /// True when `query` costs microseconds here ([`Node::is_quick`]).
    fn quick(&self, query: &Query) -> bool {
        self.0.is_quick(query, true, None)
    }
}

impl Node {
    /// Local objects matching `query`, at most `limit`, and how many match in all.
    fn local_matches(
        &self,
        query: &Query,
        limit: usize,
    ) -> Result<(Vec<ObjectJson>, u64), QueryError> {
        let config = self.config();
        let limit = limit.min(config.limits.max_objects);
        let found = self
            .local
            .load()
            .query(query, limit, config.limits.local_scan_max_objects)?;
        Ok((found.objects.iter().map(object_json).collect(), found.total))
    }

    /// The table's referrals for `query` (possible ones too) as the search's targets, best
    /// first, without this node's own dataset; each with how many datasets lie below it and
    /// the digest of its hint (a cached answer of it is valid while that holds).
    fn search_targets(&self, query: &Query) -> Vec<Target> {
        let opts = self.query_options(true, None);
        let own = self.identity().dsi.clone();
        let answer = self.page_answer(query, &opts);
        answer
            .iter()
            .filter(|r| *r.dsi() != own)
            .map(|r| Target {
                dsi: r.dsi().to_string(),
                base_uris: r.base_uris().to_vec(),
                count: r.count(),
                definite: r.definite(),
                hop: Hop::Down,
                // An aggregate's provenance names the node that built it and every dataset
                // below; the sub-query to the node itself is paid for apart.
                datasets: self.table.provenance_len(r.dsi()).map_or(0, |n| {
                    u32::try_from(n.saturating_sub(1)).unwrap_or(u32::MAX)
                }),
                stamp: self.imported.get(r.dsi()),
                srtt: None,
            })
            .collect()
    }
}

impl SearchHost for Host {
    fn identity(&self) -> (String, String) {
        let id = self.0.identity();
        (
            id.dsi.to_string(),
            id.base_uris.first().cloned().unwrap_or_default(),
        )
    }

    fn search_config(&self) -> Arc<SearchConfig> {
        self.0.search_settings()
    }

    fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    async fn local_objects(
        &self,
        query: &Query,
        limit: usize,
    ) -> Result<(Vec<ObjectJson>, u64), String> {
        // An exact lookup on indexed attributes costs microseconds: answered here, as
        // `/v1/referrals` answers it; anything that may scan goes to the blocking pool.
        if self.quick(query) {
            return self
                .0
                .local_matches(query, limit)
                .map_err(|e| e.to_string());
        }
        let (node, q) = (self.0.clone(), query.clone());
        crate::sys::net::spawn_blocking(move || node.local_matches(&q, limit))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }

    async fn referrals(&self, query: &Query) -> Result<Vec<Target>, String> {
        if self.quick(query) {
            return Ok(self.0.search_targets(query));
        }
        let (node, q) = (self.0.clone(), query.clone());
        crate::sys::net::spawn_blocking(move || node.search_targets(&q))
            .await
            .map_err(|e| e.to_string())
    }

    fn upstreams(&self) -> Vec<Target> {
        self.0
            .upstreams()
            .into_iter()
            .map(|u| Target {
                dsi: u.dsi,
                base_uris: u.base_uris,
                count: 0,
                definite: false,
                hop: Hop::Up,
                datasets: 0,
                stamp: None,
                srtt: None,
            })
            .collect()
    }

    fn may_contact(&self, host: &str, port: u16) -> Result<(), String> {
        self.0.may_contact(host, port)
    }
}
