//! One sub-query: asked from the cache or over the network (joined with an identical one
//! in flight), what it is sent with, and what it brings back.

use std::sync::Arc;
use std::time::Duration;

use hints::query::Query;
use tokio::time::Instant;

use super::endpoint::{Endpoint, Queued};
use super::plan::Target;
use super::whois::from_whois;
use super::{CachedSub, Direction, Searcher, SubOutcome, remote};
use crate::model::answer::{NotChased, SearchAnswer};

/// The key a sub-answer is kept under: target, direction, limit and query.
pub(super) fn sub_key(
    endpoint: &Endpoint,
    direction: Direction,
    limit: usize,
    query: &str,
) -> String {
    format!(
        "{}\u{1f}{}\u{1f}{limit}\u{1f}{query}",
        endpoint.uri(),
        direction.as_str()
    )
}

/// What a sub-request is sent with.
pub(super) struct SubContext<'a> {
    pub(super) query: &'a str,
    pub(super) parsed: &'a Query,
    pub(super) limit: usize,
    pub(super) deadline: Instant,
    pub(super) depth: u32,
    pub(super) budget: u32,
    pub(super) visited: Arc<Vec<String>>,
    pub(super) hop: u32,
    pub(super) traceparent: String,
    pub(super) max_bytes: u64,
    pub(super) direction: Direction,
}

/// A sub-query's answer, as the wave merges it.
pub(super) struct Got {
    pub(super) answer: Arc<SearchAnswer>,
    pub(super) more: Vec<Target>,
    pub(super) cached: bool,
    /// Served stale (RFC 8767): the target failed, and this is its expired answer; why.
    pub(super) stale: Option<String>,
    pub(super) ms: f64,
}

/// A sub-query that brought nothing.
pub(super) struct Lost {
    pub(super) error: String,
    pub(super) reason: NotChased,
    pub(super) ms: f64,
}

/// One finished sub-query.
pub(super) struct Done {
    pub(super) queued: Queued,
    pub(super) share: u32,
    /// A request went out for it (not a cache hit, not joined to another's).
    pub(super) sent: bool,
    pub(super) outcome: Result<Got, Lost>,
}

impl Searcher {
    /// Asks one target: from the cache when a valid answer is kept, else over the network
    /// (joined with an identical request in flight), noting its round-trip or failure.
    pub(super) async fn ask(&self, queued: Queued, ctx: SubContext<'_>) -> Done {
        let key = queued.endpoint.key();
        let cache_key = sub_key(&queued.endpoint, ctx.direction, ctx.limit, ctx.query);
        let share = ctx.budget;
        let stamp = queued.target.stamp;
        let visited = ctx.visited.clone();
        let hit = self.subs.get(&cache_key, |c| {
            c.stamp == stamp && c.answer.skipped.iter().all(|d| visited.contains(d))
        });
        if let Some(c) = hit {
            return Done {
                queued,
                share,
                sent: false,
                outcome: Ok(Got {
                    answer: c.answer.clone(),
                    more: c.more.clone(),
                    cached: true,
                    stale: None,
                    ms: 0.0,
                }),
            };
        }
        let now = Instant::now();
        let remaining = ctx.deadline.saturating_duration_since(now);
        // The child must answer before our deadline with time left for its answer to
        // travel back: its smoothed round-trip time, within [1 ms, a quarter of the time].
        let margin = self
            .health
            .srtt(&key)
            .unwrap_or(Duration::from_millis(2))
            .clamp(
                Duration::from_millis(1),
                (remaining / 4).max(Duration::from_millis(1)),
            );
        let child_time = remaining.saturating_sub(margin);
        let flight_key = format!(
            "{cache_key}\u{1f}{}\u{1f}{}\u{1f}{}",
            ctx.budget,
            ctx.depth,
            ctx.visited.join(" ")
        );
        let mut first = false;
        let outcome = self
            .flights
            .run(&flight_key, || {
                first = true;
                self.fetch(&queued, &ctx, child_time, remaining)
            })
            .await;
        let ms = now.elapsed().as_secs_f64() * 1000.0;
        let outcome = match outcome {
            SubOutcome::Answered { answer, more, rtt } => {
                if first {
                    self.health.note_ok(&key, rtt);
                    if !answer.partial && !answer.stale {
                        self.subs.put(
                            cache_key,
                            Arc::new(CachedSub {
                                answer: answer.clone(),
                                more: more.clone(),
                                stamp,
                            }),
                        );
                    }
                }
                Ok(Got {
                    answer,
                    more,
                    cached: false,
                    stale: None,
                    ms,
                })
            }
            SubOutcome::Failed(e) => {
                let rto = self.health.rto(&key);
                let failure = e.is_failure(remaining, rto);
                if first && failure {
                    let ttl = self.health.note_failure(&key, &e.to_string());
                    tracing::info!(
                        trace_id = %ctx.traceparent.split('-').nth(1).unwrap_or(""),
                        dsi = %queued.target.dsi,
                        endpoint = %key,
                        error = %e,
                        retry_in = %humantime::format_duration(ttl),
                        "search: node failed; its failure is cached"
                    );
                }
                let reason = match e {
                    remote::SubError::Timeout(_) => NotChased::Deadline,
                    _ => NotChased::Unreachable,
                };
                Err(Lost {
                    error: e.to_string(),
                    reason,
                    ms,
                })
            }
        };
        Done {
            queued,
            share,
            sent: first,
            outcome,
        }
    }

    /// The request itself.
    async fn fetch(
        &self,
        queued: &Queued,
        ctx: &SubContext<'_>,
        child_time: Duration,
        timeout: Duration,
    ) -> SubOutcome {
        let started = Instant::now();
        match &queued.endpoint {
            Endpoint::Http(base) => {
                let req = remote::SubRequest {
                    query: ctx.query,
                    limit: ctx.limit,
                    deadline_ms: u64::try_from(child_time.as_millis())
                        .unwrap_or(u64::MAX)
                        .max(1),
                    depth: ctx.depth,
                    budget: ctx.budget,
                    visited: &ctx.visited,
                    direction: ctx.direction.as_str(),
                    hop: ctx.hop,
                    traceparent: ctx.traceparent.clone(),
                };
                let client = self.client.load_full();
                match remote::ask_http(&client, base, &req, timeout, ctx.max_bytes).await {
                    Ok(answer) => {
                        // The network's part of the time: the child's own work is not
                        // this link's round trip.
                        let total = started.elapsed();
                        let work = Duration::from_secs_f64(answer.elapsed_ms.max(0.0) / 1000.0);
                        SubOutcome::Answered {
                            answer: Arc::new(answer),
                            more: Vec::new(),
                            rtt: total.saturating_sub(work),
                        }
                    }
                    Err(e) => SubOutcome::Failed(e),
                }
            }
            Endpoint::Whois { host, port } => {
                match remote::ask_whois(host, *port, ctx.parsed, timeout, ctx.max_bytes).await {
                    Ok(w) => {
                        let (answer, more) =
                            from_whois(w, queued, ctx.query, ctx.parsed, ctx.limit);
                        SubOutcome::Answered {
                            answer: Arc::new(answer),
                            more,
                            rtt: started.elapsed(),
                        }
                    }
                    Err(e) => SubOutcome::Failed(e),
                }
            }
        }
    }
}
