//! One search's execution at this node: the targets admitted or refused, the waves of
//! sub-queries under the budget and the deadline, stale answers for the nodes that cannot
//! answer, and the findings merged into the answer.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::ask::{Got, SubContext, sub_key};
use super::endpoint::{Queued, choose_endpoint};
use super::plan::{self, Hop, Target};
use super::{Direction, MAX_VISITED, SearchHost, SearchRequest, Searcher};
use crate::model::answer::{Asked, FoundObject, NotChased, SearchAnswer, Unchased};

/// Least time worth giving a sub-request; with less left, targets are left for the deadline.
const MIN_SUBREQUEST: Duration = Duration::from_millis(5);

impl Searcher {
    /// Runs `req` at this node: [`Searcher::search`]'s work.
    pub(super) async fn run<H: SearchHost>(&self, host: &H, req: SearchRequest) -> SearchAnswer {
        let started = Instant::now();
        let (own_dsi, own_uri) = host.identity();
        let config = host.search_config();
        let mut run = Run {
            objects: Vec::new(),
            seen: HashSet::new(),
            unchased: Vec::new(),
            nodes: Vec::new(),
            skipped: BTreeSet::new(),
            partial: false,
            more: false,
            stale: false,
            subqueries: 0,
            own_dsi: own_dsi.clone(),
        };
        let mut visited = req.visited.clone();
        visited.insert(own_dsi.clone());

        let (local, down) = tokio::join!(
            host.local_objects(&req.parsed, req.limit),
            host.referrals(&req.parsed)
        );
        let mut local_more = false;
        match local {
            Ok((objects, total)) => {
                local_more = total > objects.len() as u64;
                for o in objects {
                    run.add(FoundObject {
                        holder: own_dsi.clone(),
                        holder_uri: own_uri.clone(),
                        template: o.template,
                        url: o.url,
                        attributes: o.attributes,
                    });
                }
            }
            Err(e) => {
                tracing::warn!(trace_id = %req.trace.trace_id, error = %e, "search: local objects failed");
                run.partial = true;
            }
        }
        let mut targets = match down {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(trace_id = %req.trace.trace_id, error = %e, "search: referrals failed");
                run.partial = true;
                Vec::new()
            }
        };
        if req.direction != Direction::Down {
            targets.extend(host.upstreams());
        }
        let look_visited = visited.clone();
        let look = Lookup {
            query: &req.query,
            limit: req.limit,
            visited: &look_visited,
            stale_ttl: config.stale_ttl,
        };
        let mut queue = self.prepare(host, &mut run, &mut visited, targets, &look, req.hop + 1);

        let mut budget = req.budget;
        while !queue.is_empty() {
            let found = run.objects.len();
            let reason = if found >= req.limit {
                Some(NotChased::Limit)
            } else if req.depth == 0 {
                Some(NotChased::Depth)
            } else if budget == 0 {
                Some(NotChased::Budget)
            } else if req.deadline.saturating_duration_since(Instant::now()) < MIN_SUBREQUEST {
                Some(NotChased::Deadline)
            } else {
                None
            };
            if let Some(reason) = reason {
                for q in queue.drain(..) {
                    run.unchase(&q.target, reason, None);
                }
                break;
            }
            let need = (req.limit - found) as u64;
            let size = plan::wave_size(queue.iter().map(|q| &q.target), need, budget);
            let wave: Vec<Queued> = queue.drain(..size).collect();
            budget -= wave.len() as u32;
            let plain: Vec<Target> = wave.iter().map(|q| q.target.clone()).collect();
            let shares = plan::split_budget(budget, &plain);
            // This wave's targets count as visited for each of them: no node is asked
            // twice by one search, whichever path reaches it.
            for q in &wave {
                visited.insert(q.target.dsi.clone());
            }
            let carried: Arc<Vec<String>> =
                Arc::new(visited.iter().take(MAX_VISITED).cloned().collect());
            let asks = wave.into_iter().zip(shares).map(|(q, share)| {
                let ctx = SubContext {
                    query: &req.query,
                    parsed: &req.parsed,
                    limit: req.limit,
                    deadline: req.deadline,
                    depth: req.depth - 1,
                    budget: share,
                    visited: carried.clone(),
                    hop: req.hop + 1,
                    traceparent: req.trace.child(),
                    max_bytes: config.max_answer_bytes,
                    direction: match q.target.hop {
                        Hop::Up => Direction::Up,
                        Hop::Down | Hop::ServerToAsk => Direction::Down,
                    },
                };
                self.ask(q, ctx)
            });
            for done in futures_util::future::join_all(asks).await {
                if done.sent {
                    run.subqueries = run.subqueries.saturating_add(1);
                    let ms = match &done.outcome {
                        Ok(got) => got.ms,
                        Err(lost) => lost.ms,
                    };
                    host.metrics().search.note_subquery(
                        Duration::try_from_secs_f64(ms / 1000.0).unwrap_or_default(),
                    );
                }
                match done.outcome {
                    Ok(got) => {
                        if !got.cached {
                            let spent = got.answer.subqueries.min(done.share);
                            budget = budget.saturating_sub(spent);
                            run.subqueries = run.subqueries.saturating_add(spent);
                        }
                        run.merge(&done.queued, &got, req.hop + 1);
                        for m in got.more {
                            if visited.contains(&m.dsi) || run.skipped.contains(&m.dsi) {
                                continue;
                            }
                            if let Some(q) = self.admit(host, &mut run, m, &look, req.hop + 1) {
                                visited.insert(q.target.dsi.clone());
                                queue.push_back(q);
                            }
                        }
                    }
                    Err(lost)
                        if matches!(lost.reason, NotChased::Unreachable | NotChased::Deadline)
                            && let Some(got) =
                                self.stale(&done.queued, &look, lost.error.clone()) =>
                    {
                        run.merge(&done.queued, &got, req.hop + 1);
                    }
                    Err(lost) => {
                        let q = &done.queued;
                        run.nodes.push(Asked {
                            dsi: q.target.dsi.clone(),
                            uri: q.endpoint.uri(),
                            via: run.own_dsi.clone(),
                            depth: req.hop + 1,
                            direction: q.target.hop.as_str().to_owned(),
                            ms: lost.ms,
                            outcome: if lost.reason == NotChased::Deadline {
                                "timeout".to_owned()
                            } else {
                                "failed".to_owned()
                            },
                            objects: 0,
                            error: Some(lost.error.clone()),
                        });
                        run.unchase(&q.target, lost.reason, Some(lost.error));
                    }
                }
            }
        }
        let metrics = host.metrics();
        let partial = run.partial || run.unchased.iter().any(|u| u.reason.makes_partial());
        let more = local_more
            || run.more
            || run.objects.len() > req.limit
            || run.unchased.iter().any(|u| u.reason == NotChased::Limit);
        let mut objects = run.objects;
        objects.truncate(req.limit);
        for u in &run.unchased {
            metrics.search.note_unchased_label(u.reason.as_str());
        }
        SearchAnswer {
            query: req.query,
            dsi: own_dsi,
            trace_id: req.trace.trace_id,
            objects,
            more,
            unchased: run.unchased,
            partial,
            stale: run.stale,
            nodes: run.nodes,
            skipped: run.skipped.into_iter().collect(),
            subqueries: run.subqueries,
            elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
        }
    }

    /// Drops visited targets (noted as skipped), picks each one's endpoint (refusing those
    /// the rules refuse and those whose failure is cached), and orders the rest.
    fn prepare<H: SearchHost>(
        &self,
        host: &H,
        run: &mut Run,
        visited: &mut BTreeSet<String>,
        targets: Vec<Target>,
        look: &Lookup<'_>,
        depth: u32,
    ) -> VecDeque<Queued> {
        let mut seen = HashSet::new();
        let mut admitted = Vec::new();
        for t in targets {
            if t.dsi == run.own_dsi || !seen.insert(t.dsi.clone()) {
                continue;
            }
            if visited.contains(&t.dsi) {
                run.skipped.insert(t.dsi);
                continue;
            }
            if let Some(q) = self.admit(host, run, t, look, depth) {
                admitted.push(q);
            }
        }
        admitted.sort_by(|a, b| plan::compare(&a.target, &b.target));
        admitted.into()
    }

    /// The expired answer `q` gave to this request, while younger than `stale_ttl` and
    /// still valid (the same hint, nothing skipped that this search has not asked): served
    /// when `q` cannot answer now (RFC 8767), with `why`.
    fn stale(&self, q: &Queued, look: &Lookup<'_>, why: String) -> Option<Got> {
        if look.stale_ttl.is_zero() {
            return None;
        }
        let key = sub_key(
            &q.endpoint,
            direction_of(q.target.hop),
            look.limit,
            look.query,
        );
        let c = self.subs.get_stale(&key, look.stale_ttl, |c| {
            c.stamp == q.target.stamp && c.answer.skipped.iter().all(|d| look.visited.contains(d))
        })?;
        Some(Got {
            answer: c.answer.clone(),
            more: c.more.clone(),
            cached: true,
            stale: Some(why),
            ms: 0.0,
        })
    }

    /// The target with its endpoint, or `None` when it is refused or known to be down
    /// (noted as unchased, or answered from its stale answer, which costs no budget).
    fn admit<H: SearchHost>(
        &self,
        host: &H,
        run: &mut Run,
        mut t: Target,
        look: &Lookup<'_>,
        depth: u32,
    ) -> Option<Queued> {
        let endpoint = match choose_endpoint(host, &t.base_uris) {
            Ok(e) => e,
            Err(why) => {
                tracing::debug!(dsi = %t.dsi, reason = %why, "search: target refused");
                run.unchase(&t, NotChased::Refused, Some(why));
                return None;
            }
        };
        let key = endpoint.key();
        if let Some(down) = self.health.down(&key) {
            let detail = format!(
                "failed {} time(s) ({}); not asked again for {}",
                down.failures,
                down.error,
                humantime::format_duration(Duration::from_secs(down.retry_in.as_secs().max(1)))
            );
            let q = Queued {
                target: t,
                endpoint,
            };
            match self.stale(&q, look, detail.clone()) {
                Some(got) => run.merge(&q, &got, depth),
                None => run.unchase(&q.target, NotChased::Unreachable, Some(detail)),
            }
            return None;
        }
        t.srtt = self.health.srtt(&key);
        Some(Queued {
            target: t,
            endpoint,
        })
    }
}

/// Which way a sub-request to a target goes.
fn direction_of(hop: Hop) -> Direction {
    match hop {
        Hop::Up => Direction::Up,
        Hop::Down | Hop::ServerToAsk => Direction::Down,
    }
}

/// What a kept sub-answer is looked up by, besides its target.
struct Lookup<'a> {
    query: &'a str,
    limit: usize,
    visited: &'a BTreeSet<String>,
    stale_ttl: Duration,
}

/// One search's findings at this node, merged as answers come.
struct Run {
    objects: Vec<FoundObject>,
    seen: HashSet<(String, String)>,
    unchased: Vec<Unchased>,
    nodes: Vec<Asked>,
    skipped: BTreeSet<String>,
    partial: bool,
    more: bool,
    stale: bool,
    subqueries: u32,
    own_dsi: String,
}

impl Run {
    /// Adds `o` unless the same object of the same holder came already (a mesh that is not
    /// a tree reaches some nodes by two paths).
    fn add(&mut self, o: FoundObject) {
        if self.seen.insert((o.holder.clone(), o.url.clone())) {
            self.objects.push(o);
        }
    }

    fn unchase(&mut self, t: &Target, reason: NotChased, detail: Option<String>) {
        self.unchased.push(Unchased {
            dsi: t.dsi.clone(),
            base_uri: t.base_uris.clone(),
            count: t.count,
            reason,
            via: self.own_dsi.clone(),
            detail,
        });
    }

    /// Takes in a sub-query's answer: its objects, what it left unchased, the nodes it
    /// asked and skipped.
    fn merge(&mut self, q: &Queued, got: &Got, depth: u32) {
        let a = &got.answer;
        self.nodes.push(Asked {
            dsi: q.target.dsi.clone(),
            uri: q.endpoint.uri(),
            via: self.own_dsi.clone(),
            depth,
            direction: q.target.hop.as_str().to_owned(),
            ms: got.ms,
            outcome: match (&got.stale, got.cached) {
                (Some(_), _) => "stale",
                (None, true) => "cached",
                (None, false) => "ok",
            }
            .to_owned(),
            objects: a.objects.len() as u64,
            error: got.stale.clone(),
        });
        self.stale |= got.stale.is_some() || a.stale;
        for o in &a.objects {
            self.add(o.clone());
        }
        self.unchased.extend(a.unchased.iter().cloned());
        self.nodes.extend(a.nodes.iter().cloned());
        self.skipped.extend(a.skipped.iter().cloned());
        self.partial |= a.partial;
        self.more |= a.more;
    }
}
