//! Queries: referrals (as JSON for `/v1/referrals`, paged, and as [`QueryAnswer`]), explain,
//! the quick-path check and local objects.

use std::sync::atomic::Ordering;
use std::time::Instant;

use hints::rank::QueryOptions;

use crate::store::answers::Stamp;

use super::*;

impl Node {
    /// Referrals for `q` plus the count of local matches.
    ///
    /// # Errors
    /// When the query does not parse.
    pub fn referrals(
        &self,
        q: &str,
        possible: bool,
        limit: Option<usize>,
    ) -> Result<QueryAnswer, QueryError> {
        let started = Instant::now();
        let answer = self.referrals_inner(q, possible, limit);
        match &answer {
            Ok(a) => self.note_answered(
                u32::try_from(a.referrals.len()).unwrap_or(u32::MAX),
                started.elapsed(),
            ),
            Err(_) => Metrics::inc(&self.metrics.query_errors),
        }
        answer
    }

    /// Parses a query within the configured `limits.max_query_*` bounds.
    pub fn parse_query(&self, q: &str) -> Result<Query, QueryError> {
        Ok(Query::parse_with_limits(q, &self.config().limits.query)?)
    }

    /// The options every front-end queries the table with.
    pub(super) fn query_options(&self, possible: bool, limit: Option<usize>) -> QueryOptions {
        let config = self.config();
        QueryOptions {
            include_possible: possible,
            limit: limit
                .unwrap_or(config.limits.max_referrals)
                .min(config.limits.max_referrals),
            thesaurus: self.thesaurus.load_full(),
            now: Some(SystemTime::now()),
            ..QueryOptions::default()
        }
    }

    /// The referrals for `q` with how each rank was computed (admin `explain`).
    ///
    /// # Errors
    /// When the query does not parse.
    pub fn explain(
        &self,
        q: &str,
        possible: bool,
    ) -> Result<Vec<hints::rank::Explanation>, QueryError> {
        let query = self.parse_query(q)?;
        let own = self.identity.load().dsi.clone();
        let mut out = self
            .table
            .explain(&query, &self.query_options(possible, None));
        out.retain(|e| e.referral.dsi != own);
        for (i, e) in out.iter_mut().enumerate() {
            e.position = i + 1;
        }
        Ok(out)
    }

    /// True when `query` costs microseconds: each term indexed by every local collection
    /// (no object read from disk), and exact, or a substring whose per-peer sums the
    /// routing table keeps ([`RoutingTable::answers_quickly`]) with few local objects to
    /// search. Such queries may be answered on an async worker; others go to the blocking
    /// pool.
    /// `limit` is the page asked for, as [`Node::referrals_json`] takes it: the table's
    /// sums may hold a page of ten but not every referral.
    pub fn is_quick(&self, query: &Query, possible: bool, limit: Option<usize>) -> bool {
        let local = self.local.load();
        if !local.stores().all(|s| s.indexes_all(query)) {
            return false;
        }
        let exact = query.terms().iter().all(|t| t.op == MatchOp::Exact);
        exact
            || (local.len() <= QUICK_LOCAL_OBJECTS
                && self
                    .table
                    .answers_quickly(query, &page_options(&self.query_options(possible, limit))))
    }

    /// A turn to evaluate a query that may scan ([`Node::is_quick`] false); waits without
    /// holding a thread while `limits.max_concurrent_scans` are running.
    pub async fn scan_permit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.scans.acquire().await.ok()
    }

    /// A turn to poll a peer; waits while `limits.max_concurrent_polls` polls are under
    /// way (a setting that takes effect at restart).
    pub async fn poll_turn(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.polls.acquire().await.ok()
    }

    /// The state answers are computed from.
    pub(super) fn answer_stamp(&self) -> Stamp {
        Stamp {
            table: self.table.generation(),
            local: self.local.load().generation,
            epoch: self.epoch.load(Ordering::Acquire),
        }
    }

    /// Marks answers computed so far as stale (configuration, thesaurus or identity changed).
    pub(super) fn invalidate_answers(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// The cached `/v1/referrals` answer for `raw`, when one is current (counted as a query
    /// answered); lets a repeated scanning query skip its turn.
    pub fn cached_referrals(
        &self,
        raw: &str,
        possible: bool,
        limit: Option<usize>,
    ) -> Option<Bytes> {
        let opts = self.query_options(possible, limit);
        let (bytes, n) = self
            .answers
            .get(raw, possible, opts.limit, self.answer_stamp())?;
        self.note_answered(n, Duration::ZERO);
        Some(bytes)
    }

    /// Counts one answered query with `referrals` referrals.
    pub(super) fn note_answered(&self, referrals: u32, took: Duration) {
        Metrics::inc(&self.metrics.queries);
        self.metrics.referrals.inc_by(u64::from(referrals));
        self.metrics.query_latency.observe(took);
    }

    /// The `/v1/referrals` answer for `raw` (parsed as `query`) as JSON bytes: the same
    /// document as [`Node::referrals`], written straight from the table's answer and
    /// served from the answer cache while nothing it depends on changed.
    ///
    /// # Errors
    /// When the local store cannot answer ([`QueryError`]).
    pub fn referrals_json(
        &self,
        raw: &str,
        query: &Query,
        possible: bool,
        limit: Option<usize>,
    ) -> Result<Bytes, QueryError> {
        let started = Instant::now();
        let opts = self.query_options(possible, limit);
        let stamp = self.answer_stamp();
        let result = match self.answers.get(raw, possible, opts.limit, stamp) {
            Some(hit) => Ok(hit),
            None => {
                let own = self.identity.load().dsi.clone();
                let answer = self.page_answer(query, &opts);
                let scan_max = self.config().limits.local_scan_max_objects;
                let local = self.local.load().query(query, 0, scan_max);
                local.map(|local| {
                    let mut out = Vec::with_capacity(256 + answer.len() * 160);
                    let n = crate::store::answers::write_answer(
                        &mut out,
                        raw,
                        &own,
                        &answer,
                        opts.limit,
                        local.total,
                        &self.unreachable.load(),
                    );
                    let out = (Bytes::from(out), n);
                    self.answers
                        .put(raw, possible, opts.limit, stamp, out.clone());
                    out
                })
            }
        };
        match &result {
            Ok((_, n)) => self.note_answered(*n, started.elapsed()),
            Err(_) => Metrics::inc(&self.metrics.query_errors),
        }
        result.map(|(bytes, _)| bytes)
    }

    /// The table's answer for a page of `opts.limit` referrals, ranked two further: one
    /// place may be this node's own dataset (left out), and one more says `more`.
    pub(super) fn page_answer(&self, query: &Query, opts: &QueryOptions) -> hints::answer::Answer {
        self.table.answer(query, &page_options(opts))
    }

    pub(super) fn referrals_inner(
        &self,
        q: &str,
        possible: bool,
        limit: Option<usize>,
    ) -> Result<QueryAnswer, QueryError> {
        let query = self.parse_query(q)?;
        let opts = self.query_options(possible, limit);
        let own = self.identity.load().dsi.clone();
        let unreachable = self.unreachable.load();
        let mut referrals: Vec<ReferralJson> = self
            .page_answer(&query, &opts)
            .iter()
            .filter(|r| *r.dsi() != own)
            .map(|r| ReferralJson {
                unreachable: unreachable.contains(r.dsi()),
                ..ReferralJson::from(r)
            })
            .collect();
        let more = referrals.len() > opts.limit;
        referrals.truncate(opts.limit);
        let scan_max = self.config().limits.local_scan_max_objects;
        let count = self.local.load().query(&query, 0, scan_max)?.total;
        Ok(QueryAnswer {
            query: q.to_owned(),
            dsi: own.to_string(),
            referrals,
            more,
            local: count,
        })
    }

    /// Local objects matching `q`.
    ///
    /// # Errors
    /// When the query does not parse.
    pub fn local_objects(
        &self,
        q: &str,
        limit: Option<usize>,
    ) -> Result<ObjectsAnswer, QueryError> {
        let query = self.parse_query(q)?;
        let config = self.config();
        let limit = limit
            .unwrap_or(config.limits.max_objects)
            .min(config.limits.max_objects);
        let found = self
            .local
            .load()
            .query(&query, limit, config.limits.local_scan_max_objects)?;
        Ok(ObjectsAnswer {
            query: q.to_owned(),
            dsi: self.identity.load().dsi.to_string(),
            objects: found.objects.iter().map(object_json).collect(),
            total: found.total,
        })
    }
}

/// The options a page of `opts.limit` referrals asks the table with: two places more, for
/// this node's own dataset (left out) and to tell whether there are more.
fn page_options(opts: &QueryOptions) -> QueryOptions {
    QueryOptions {
        limit: opts.limit.saturating_add(2),
        ..opts.clone()
    }
}
