//! Talking to peers: polling, pushing and `datachanged` notifications.
//!
//! One task per peer with role `poll` polls it at its interval (±10 % jitter so a mesh's
//! polls spread out), at once when the peer sends `datachanged` or an operator asks, and
//! with exponential backoff after failures; at most `limits.max_concurrent_polls` polls are
//! under way at once. One task per `push` peer sends `datachanged`
//! followed by our out-bound index object (RFC 2653 §2.1 example) whenever the out-bound
//! hint changes and at its interval. A notifier sends `datachanged` (RFC 2652 §2.3.3) to every
//! `poller` peer when the out-bound hint changes.
//!
//! Every received index object goes through [`Node::accept_index`] (validated, put in the
//! table, written to the spool). All tasks run under the node's peer token, which a reload
//! replaces ([`restart`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use cip_proto::Dsi;
use cip_proto::cip::{IndexType, Request, ResponseCode, TypeSpelling};
use tokio_util::sync::CancellationToken;

use crate::model::backoff::Backoff;
use crate::model::config::{Config, PeerConfig, PeerRole, PeerTransport};
use crate::model::index_kind::IndexKind;
use crate::model::status::Exchange;
use crate::node::{Node, hint_type};
use crate::pipeline::outbound::Touched;
use crate::sys::tls;
use crate::transport::cip_http_client::{CipHttpClient, HttpError};
use crate::transport::{
    APART_PARAM, BASE_URI_PARAM, CipClient, CipConnection, ClientReply, DELTA_PARAM, HAVE_PARAM,
    POLLER_DSI_PARAM, SEPARATE_PARAM, TransportError, UNCHANGED, transport_config,
};

/// Why a poll or push failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PeerError {
    /// The peer has no port (it only pushes to us).
    #[error("peer has no port configured")]
    NoPort,
    /// The peer has `transport = "http"` but no URL (it only pushes to us).
    #[error("peer has no url configured")]
    NoUrl,
    /// An exchange over HTTP failed (RFC 2653 §2.3).
    #[error(transparent)]
    Http(#[from] HttpError),
    /// TLS settings could not be loaded.
    #[error("tls: {0}")]
    Tls(#[from] tls::TlsError),
    /// The HTTP client (for an `https://` peer, its `[peer.tls]`) could not be built.
    #[error("http client: {0}")]
    HttpClient(String),
    /// The connection failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The peer answered with a code we cannot use.
    #[error("peer answered {} {comment}", code.code())]
    Refused {
        /// The code.
        code: ResponseCode,
        /// Its comment.
        comment: String,
    },
    /// Some objects of the answer were refused.
    #[error("{refused} of {total} index objects refused: {first}")]
    Rejected {
        /// How many were refused.
        refused: usize,
        /// How many came.
        total: usize,
        /// The first reason.
        first: String,
    },
    /// The whole exchange took longer than `limits.poll_timeout`.
    #[error("exchange timed out")]
    Timeout,
}

/// The peer supervisor: restarts the peer tasks each time `changes` (from
/// [`Node::peer_changes`], taken before the first [`restart`]) says a reload re-read the
/// configuration, until shutdown.
pub async fn supervise(node: Arc<Node>, mut changes: tokio::sync::watch::Receiver<u64>) {
    let token = node.token.child_token();
    loop {
        tokio::select! {
            () = token.cancelled() => return,
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                restart(&node);
            }
        }
    }
}

/// Starts the peer tasks for the current configuration under a fresh peer token, stopping
/// the previous ones.
pub fn restart(node: &Arc<Node>) {
    let token = {
        let mut slot = crate::sys::lock(&node.peer_token);
        slot.cancel();
        *slot = node.token.child_token();
        slot.clone()
    };
    let config = node.config();
    for p in &config.peers {
        if p.has_role(PeerRole::Poll) {
            let (n, p, t) = (node.clone(), p.clone(), token.clone());
            node.tracker.spawn(async move { poll_loop(n, p, t).await });
        }
        if p.has_role(PeerRole::Push) {
            let (n, p, t) = (node.clone(), p.clone(), token.clone());
            node.tracker.spawn(async move { push_loop(n, p, t).await });
        }
    }
    let (n, t) = (node.clone(), token);
    node.tracker.spawn(async move { notify_loop(n, t).await });
}

/// Delay before the next attempt: the interval (±10 % jitter) after a success; after
/// `failures` failures, `min(interval, 1 s) * 2^(failures-1)` capped at the larger of the
/// interval and `max_backoff`, also jittered by a tenth.
pub fn next_delay(interval: Duration, failures: u32, max_backoff: Duration) -> Duration {
    if failures == 0 {
        return Backoff {
            first: interval,
            cap: interval,
        }
        .tenth_jitter(1);
    }
    Backoff {
        first: interval.min(Duration::from_secs(1)),
        cap: max_backoff.max(interval),
    }
    .tenth_jitter(failures)
}

/// Whether a refusal with `code` is a transient failure: the peer says "not now" (`400`
/// temporarily unable, `520` aborting), as good as no answer.
fn transient_code(code: ResponseCode) -> bool {
    matches!(
        code,
        ResponseCode::TemporarilyUnable | ResponseCode::Aborting
    )
}

/// True when `e` is transient (PROTOCOL.md, "Retries"): the connection failed, stalled
/// or timed out, or the peer said "not now" (`400`, `520`). What the peer refused or sent
/// wrong (another code, a refused hint) and settings that do not work are not: they do not
/// heal in seconds.
pub fn transient(e: &PeerError) -> bool {
    match e {
        // Refused as it arrived (over the memory budget): it will be again.
        PeerError::Transport(TransportError::Refused(_))
        | PeerError::Http(HttpError::Refused(_)) => false,
        PeerError::Transport(_) | PeerError::Http(_) | PeerError::Timeout => true,
        PeerError::Refused { code, .. } => transient_code(*code),
        PeerError::Rejected { .. }
        | PeerError::NoPort
        | PeerError::NoUrl
        | PeerError::Tls(_)
        | PeerError::HttpClient(_) => false,
    }
}

/// How long to wait after failures.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// The peer's poll interval (or push interval).
    pub interval: Duration,
    /// `limits.max_backoff`: the widest wait after failures that persist.
    pub max_backoff: Duration,
    /// `limits.transient_backoff` and `limits.max_transient_backoff`.
    pub transient: Backoff,
}

impl RetryPolicy {
    /// The policy of `peer` under `config`'s limits.
    pub fn of(config: &Config, peer: &PeerConfig) -> Self {
        let l = &config.limits;
        Self {
            interval: peer.poll_interval,
            max_backoff: l.max_backoff,
            transient: Backoff {
                first: l.transient_backoff,
                cap: l.max_transient_backoff,
            },
        }
    }

    /// Delay before retrying after `failures` failures in a row, the last `transient`.
    /// Transient failures are retried fast, at a uniformly random moment of a window that
    /// starts at `transient_backoff` (250 ms) and doubles while they persist, up to
    /// `max_transient_backoff` (1 min): after a short outage the first retry comes within
    /// a fraction of a second, and nodes that failed together spread out. Other failures
    /// keep [`next_delay`]'s steady schedule (1 s doubling to `max_backoff`, ±10 %).
    /// Neither waits longer than the poll interval would after a success, nor than
    /// `max_backoff`.
    pub fn delay(&self, failures: u32, transient: bool) -> Duration {
        if transient && failures > 0 {
            self.transient
                .full_jitter(failures)
                .min(self.interval.mul_f64(1.1))
                .min(self.max_backoff.max(self.interval))
        } else {
            next_delay(self.interval, failures, self.max_backoff)
        }
    }
}

/// True when `e` says the peer is not a CIPv3 server at all: it refused the version line
/// with a 5xx, or answered it with Whois++ (or other) text. A `520` (aborting: the
/// server timed out waiting for the version line, or is shutting down) is a transient
/// failure, retried with the usual back-off (digest A26): the mesh simulation saw a lost
/// version line on a flaky link put a CIPv3 peer on the hourly legacy schedule.
pub fn not_cipv3(e: &PeerError) -> bool {
    match e {
        PeerError::Transport(TransportError::VersionRefused { status }) => {
            status.code != ResponseCode::Aborting
        }
        PeerError::Transport(TransportError::NotCipV3 { .. }) => true,
        _ => false,
    }
}

/// How long a peer found not to speak CIPv3 waits before the next try: an hour, or longer
/// when the poll interval or `limits.max_backoff` is (an operator's `cipctl poll` still
/// tries at once).
pub fn legacy_delay(interval: Duration, max_backoff: Duration) -> Duration {
    let d = interval.max(max_backoff).max(Duration::from_secs(3600));
    Backoff { first: d, cap: d }.tenth_jitter(1)
}

async fn poll_loop(node: Arc<Node>, peer: PeerConfig, token: CancellationToken) {
    let wake = node.poll_notifier(&peer.name);
    let policy = RetryPolicy::of(&node.config(), &peer);
    let max_backoff = policy.max_backoff;
    let mut failures = 0u32;
    let mut last_transient = false;
    loop {
        // At most `limits.max_concurrent_polls` exchanges (and the hints they bring) at
        // once: a hub polling hundreds of peers at start takes them in waves instead of
        // holding every answer in memory while the import queue drains.
        let turn = tokio::select! {
            t = node.poll_turn() => t,
            () = token.cancelled() => return,
        };
        let started = SystemTime::now();
        node.update_peer(&peer.name, |s| {
            s.last_attempt = Some(started);
            s.exchange = Some(Exchange {
                phase: "connecting".to_owned(),
                since: started,
            });
        });
        // Boxed: an exchange's future is kilobytes, and the loop spends its life waiting.
        let outcome = tokio::select! {
            r = Box::pin(poll_once(&node, &peer)) => r,
            () = token.cancelled() => {
                node.update_peer(&peer.name, |s| s.exchange = None);
                return;
            }
        };
        node.update_peer(&peer.name, |s| s.exchange = None);
        drop(turn);
        match outcome {
            Ok(n) => {
                // `poll_once` noted it reachable when its answer came in.
                failures = 0;
                tracing::debug!(peer = %peer.name, objects = n, "poll done");
                node.update_peer(&peer.name, |s| {
                    s.last_success = Some(SystemTime::now());
                    s.last_error = None;
                    s.consecutive_failures = 0;
                    s.successes += 1;
                });
                node.metrics()
                    .poll_done(&peer.name, true, started.elapsed().unwrap_or_default());
                node.update_status(|s| s.polls_ok += 1);
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                last_transient = transient(&e);
                if last_transient {
                    Box::pin(gone_check(&node, &peer.name)).await;
                }
                let legacy = not_cipv3(&e);
                let message = if legacy {
                    let wait = legacy_delay(peer.poll_interval, max_backoff);
                    tracing::warn!(peer = %peer.name, error = %e, retry_in = %humantime::format_duration(wait), "peer is not a CIPv3 server; polling it rarely");
                    format!(
                        "{e} (recorded as not CIPv3; next try in {})",
                        humantime::format_duration(wait)
                    )
                } else {
                    tracing::warn!(peer = %peer.name, error = %e, failures, "poll failed");
                    e.to_string()
                };
                node.update_peer(&peer.name, |s| {
                    s.last_error = Some(message);
                    s.consecutive_failures = failures;
                    s.failures += 1;
                });
                node.metrics()
                    .poll_done(&peer.name, false, started.elapsed().unwrap_or_default());
                node.update_status(|s| s.polls_failed += 1);
                if legacy {
                    failures = u32::MAX;
                }
            }
        }
        let delay = if failures == u32::MAX {
            failures = 1;
            legacy_delay(peer.poll_interval, max_backoff)
        } else {
            policy.delay(failures, last_transient)
        };
        node.update_peer(&peer.name, |s| {
            s.next_attempt = Some(SystemTime::now() + delay)
        });
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = wake.notified() => tracing::debug!(peer = %peer.name, "polling early"),
            () = token.cancelled() => return,
        }
    }
}

/// Polls `peer` once; returns the number of index objects accepted.
///
/// # Errors
/// [`PeerError`] when the exchange fails or an object is refused.
#[tracing::instrument(skip_all, fields(peer = %peer.name))]
pub async fn poll_once(node: &Arc<Node>, peer: &PeerConfig) -> Result<usize, PeerError> {
    let (reply, used) = ask(node, peer).await?;
    learn_type(node, peer, &reply, &used);
    if !transient_code(reply.code) {
        // It answered (a refusal too: reachable and wrong, PROTOCOL.md): its referrals stop
        // saying it does not as soon as the answer is in, not once its hint (perhaps
        // millions of values) is imported. A transient refusal is no answer (`transient`).
        node.note_reachable(&peer.name, true);
    }
    match reply.code {
        // 201: an answer; 200: "unchanged since version ..." or no index of that type (yet).
        ResponseCode::OkOutputFollows | ResponseCode::Ok => {
            let answer = crate::node::exchange::Answer {
                output: reply.code == ResponseCode::OkOutputFollows,
                comment: reply.comment,
                objects: reply.result.map(|r| r.objects).unwrap_or_default(),
            };
            note_phase(node, &peer.name, "importing its hint");
            node.take_answer(&peer.name, answer)
                .await
                .map_err(|r| PeerError::Rejected {
                    refused: r.refused,
                    total: r.total,
                    first: r.first,
                })
        }
        code => Err(PeerError::Refused {
            code,
            comment: reply.comment,
        }),
    }
}

/// Remembers the index type (and its spelling) a peer answered, for the next polls and the
/// listing.
fn learn_type(node: &Node, peer: &PeerConfig, reply: &ClientReply, used: &IndexType) {
    if let Some(kind) = reply
        .result
        .as_ref()
        .and_then(|r| r.objects.first())
        .and_then(|o| IndexKind::of(&o.index_type))
    {
        if peer.index_type.is_none() {
            node.index_state().learn(&peer.name, kind);
        }
        if IndexKind::of(used) == Some(IndexKind::Tagged) {
            node.index_state()
                .learn_spelling(&peer.name, used.spelling());
        }
        node.update_peer(&peer.name, |s| {
            s.index_type = Some(used.param_value());
        });
    }
}

/// The exchange of a poll: the index types to ask for in turn (the configured one, else
/// the learned one first), a reconnection for servers that close after every answer,
/// ROADS' "we have DSI" retold; returns the answer and the type it answered.
async fn ask(node: &Node, peer: &PeerConfig) -> Result<(ClientReply, IndexType), PeerError> {
    let config = node.config();
    let own = node.identity().dsi.clone();
    // `dsi` names the dataset asked for: the peer's, when known. A pollee answers with its
    // out-bound index whatever the DSI, so our own stands in before the first answer.
    let asked = node.peer_dsi(&peer.name).unwrap_or_else(|| own.clone());
    // The types to ask for: the configured one; else the one learned, then the others
    // (a legacy peer that has no SOIF index answers 200 "no index of that type").
    let kinds: Vec<IndexKind> = match peer.index_type {
        Some(k) => vec![k],
        None => {
            let first = node
                .index_state()
                .learned(&peer.name)
                .unwrap_or(IndexKind::Soif);
            std::iter::once(first)
                .chain(IndexKind::ALL.into_iter().filter(|k| *k != first))
                .collect()
        }
    };
    // Each kind once; a tagged poll in both spellings of its type, the learned one first
    // (ROADS' wppd answers only `type="application/index.obj.tagged"`).
    let attempts: Vec<IndexType> = kinds
        .iter()
        .flat_map(|k| {
            let first = node.index_state().spelling(&peer.name).unwrap_or_default();
            let spellings: Vec<TypeSpelling> = match k {
                IndexKind::Soif => vec![TypeSpelling::Facet],
                IndexKind::Tagged => [first, TypeSpelling::Facet, TypeSpelling::MediaType]
                    .into_iter()
                    .fold(Vec::new(), |mut v, s| {
                        if !v.contains(&s) {
                            v.push(s);
                        }
                        v
                    }),
            };
            spellings.into_iter().map(|s| k.index_type().spelled(s))
        })
        .collect();
    let (reply, used) = tokio::time::timeout(config.limits.poll_timeout, async {
        let mut asked = asked;
        let mut conn: Option<Session> = None;
        let mut answered: Option<(ClientReply, IndexType)> = None;
        let mut asked_again = false;
        let mut reconnected = false;
        let mut at = 0;
        while let Some(index_type) = attempts.get(at) {
            let session = match &mut conn {
                Some(s) => s,
                None => conn.insert(connect(node, &config, peer).await?),
            };
            let request = Request::Poll {
                index_type: index_type.clone(),
                dsi: asked.clone(),
                params: poll_params(node, &own, &peer.name),
                body: Bytes::new(),
            };
            note_phase(node, &peer.name, "waiting for its answer");
            let budget = config.limits.table.max_peer_bytes;
            let r = match session.poll(&request, budget).await {
                Ok(r) => r,
                Err(
                    e @ (PeerError::Transport(TransportError::Refused(_))
                    | PeerError::Http(HttpError::Refused(_))),
                ) => {
                    node.refused_while_arriving(&peer.name, &e.to_string());
                    return Err(e);
                }
                // A server that closes after every answer (ROADS' wppd): ask again on a
                // new connection, once.
                Err(_) if answered.is_some() && !reconnected => {
                    conn = None;
                    reconnected = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            reconnected = false;
            // ROADS answers a poll for another DSI with 200 and "We have DSI: ...": ask for
            // that dataset instead, once.
            if r.code == ResponseCode::Ok
                && !asked_again
                && let Some(theirs) = explained_dsi(&r)
                && theirs != asked
            {
                tracing::debug!(%theirs, "the peer names its dataset; asking for it");
                asked = theirs;
                asked_again = true;
                answered = Some((r, index_type.clone()));
                continue;
            }
            // "Unchanged since version ..." answers the poll: what we hold is current (a
            // plain 200 says "no index of that type": the next type is asked).
            let done = r.code != ResponseCode::Ok || r.comment.starts_with(UNCHANGED);
            answered = Some((r, index_type.clone()));
            if done {
                break;
            }
            at += 1;
        }
        if let Some(c) = conn {
            let _ = c.close().await;
        }
        #[allow(
            clippy::expect_used,
            reason = "`attempts` is never empty, so one was answered or an error returned"
        )]
        let answered = answered.expect("at least one poll");
        Ok::<_, PeerError>(answered)
    })
    .await
    .map_err(|_| PeerError::Timeout)??;
    Ok((reply, used))
}

/// A connection to a peer over its configured transport: requests and replies are the same
/// on both, only the bytes on the wire differ.
enum Session {
    /// The TCP stream (RFC 2653 §2.1), negotiated.
    Stream(Box<CipConnection>),
    /// HTTP POSTs to the peer's URL (RFC 2653 §2.3).
    Http(CipHttpClient),
}

impl Session {
    /// A poll, whose answer is refused as it arrives once one of its hints would be charged
    /// more than `budget` bytes of table memory (`limits.max_peer_table_bytes`), before it
    /// is all in memory.
    async fn poll(&mut self, request: &Request, budget: u64) -> Result<ClientReply, PeerError> {
        // Scanned only once the answer is long enough to be charged more than the budget
        // (a byte adds at most `MAX_CHARGE_PER_BYTE`): ordinary answers cost nothing.
        let mut scanner: Option<hints::table::ChargeScanner> = None;
        let mut scanned = 0;
        let mut watch = move |so_far: &[u8]| {
            let most = (so_far.len() as u64).saturating_mul(hints::table::MAX_CHARGE_PER_BYTE);
            if scanner.is_none() && most <= budget {
                return Ok(());
            }
            let scanner = scanner.get_or_insert_with(hints::table::ChargeScanner::new);
            scanner.feed(so_far.get(scanned..).unwrap_or_default());
            scanned = so_far.len();
            let charge = scanner.largest();
            if charge > budget {
                Err(format!(
                    "a hint needs at least {charge} bytes of table memory, more than the per-peer budget of {budget} (limits.max_peer_table_bytes)"
                ))
            } else {
                Ok(())
            }
        };
        Ok(match self {
            Self::Stream(c) => c.request_watched(request, Some(&mut watch)).await?,
            Self::Http(c) => c.request_watched(request, Some(&mut watch)).await?,
        })
    }

    async fn request(&mut self, request: &Request) -> Result<ClientReply, PeerError> {
        Ok(match self {
            Self::Stream(c) => c.request(request).await?,
            Self::Http(c) => c.request(request).await?,
        })
    }

    /// Ends the session: the stream's half-close and `222`; HTTP just drops its connection.
    async fn close(self) -> Result<(), PeerError> {
        match self {
            Self::Stream(c) => Ok((*c).close().await?),
            Self::Http(_) => Ok(()),
        }
    }
}

/// The DSI a `200` explanation names as the server's own (ROADS' wppd: "We have DSI: ...").
fn explained_dsi(reply: &ClientReply) -> Option<Dsi> {
    let text = String::from_utf8_lossy(reply.explanation.as_deref()?);
    text.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("we have dsi")
            .then(|| Dsi::new(value.trim()).ok())
            .flatten()
    })
}

async fn connect(node: &Node, config: &Config, peer: &PeerConfig) -> Result<Session, PeerError> {
    if peer.transport == PeerTransport::Http {
        let url = peer.url.as_deref().ok_or(PeerError::NoUrl)?;
        let transport = transport_config(config);
        // The CIP transport's connect timeout; trust from `[peer.tls]`, else `[http_client]`.
        let mut settings = config.http_client.clone();
        settings.connect_timeout = transport.connect_timeout;
        let tls = peer.tls.as_ref();
        let client = settings
            .client_reading(
                tls.map(|t| t.ca.as_path()),
                tls.and_then(|t| t.client_cert.as_deref().zip(t.client_key.as_deref())),
                Some(config.limits.stall_timeout),
            )
            .map_err(PeerError::HttpClient)?;
        return Ok(Session::Http(CipHttpClient::new(url, client, &transport)?));
    }
    let port = peer.port.ok_or(PeerError::NoPort)?;
    let tls = match &peer.tls {
        None => None,
        Some(t) => {
            let client = match (&t.client_cert, &t.client_key) {
                (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
                _ => None,
            };
            Some((
                tls::client_config(&t.ca, client)?,
                tls::server_name(&t.server_name)?,
            ))
        }
    };
    let transport = transport_config(config);
    let conn = match node.network() {
        None => CipClient::connect((peer.host.as_str(), port), tls, &transport).await?,
        Some(net) => {
            CipClient::connect_over(net.as_ref(), &peer.host, port, tls, &transport).await?
        }
    };
    Ok(Session::Stream(Box::new(conn)))
}

async fn push_loop(node: Arc<Node>, peer: PeerConfig, token: CancellationToken) {
    let mut changes = node.outbound_changes();
    changes.mark_changed();
    let policy = RetryPolicy::of(&node.config(), &peer);
    let mut failures = 0u32;
    let mut last_transient = false;
    loop {
        let delay = policy.delay(failures, last_transient);
        tokio::select! {
            r = changes.changed() => if r.is_err() { return },
            () = tokio::time::sleep(delay) => {}
            () = token.cancelled() => return,
        }
        node.update_peer(&peer.name, |s| s.last_attempt = Some(SystemTime::now()));
        // Boxed, as a poll is.
        let outcome = tokio::select! {
            r = Box::pin(push_once(&node, &peer)) => r,
            () = token.cancelled() => return,
        };
        match outcome {
            Ok(()) => {
                failures = 0;
                node.update_peer(&peer.name, |s| {
                    s.last_success = Some(SystemTime::now());
                    s.last_error = None;
                    s.consecutive_failures = 0;
                    s.successes += 1;
                });
                node.update_status(|s| s.pushes_sent += 1);
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                last_transient = transient(&e);
                tracing::warn!(peer = %peer.name, error = %e, failures, "push failed");
                node.update_peer(&peer.name, |s| {
                    s.last_error = Some(e.to_string());
                    s.consecutive_failures = failures;
                    s.failures += 1;
                });
            }
        }
    }
}

/// Pushes our out-bound index object to `peer`: `datachanged`, then the object.
///
/// # Errors
/// [`PeerError`] when the exchange fails or the peer refuses.
#[tracing::instrument(skip_all, fields(peer = %peer.name))]
pub async fn push_once(node: &Node, peer: &PeerConfig) -> Result<(), PeerError> {
    let config = node.config();
    let exclude: Option<Dsi> = node.peer_dsi(&peer.name);
    let object = node.outbound_object(exclude.as_ref()).await;
    let changed = Request::DataChanged {
        index_type: hint_type(),
        dsi: object.dsi.clone(),
        body: Bytes::new(),
    };
    tokio::time::timeout(config.limits.poll_timeout, async {
        let mut conn = connect(node, &config, peer).await?;
        succeeded(conn.request(&changed).await?)?;
        let r = conn.request(&Request::IndexObject(object)).await?;
        let _ = conn.close().await;
        succeeded(r)
    })
    .await
    .map_err(|_| PeerError::Timeout)?
}

async fn notify_loop(node: Arc<Node>, token: CancellationToken) {
    // Revisions, not changes of the shared hint: a poller's own answer may change alone
    // (a dataset's route or provenance moved); each poller is told only when its answer
    // did (`notify_if_changed`). Requests come before their build: a poller whose answer
    // carries the changed datasets is told at once (`notify_ahead`), and its poll waits
    // for the build instead of the notice waiting for it.
    let mut changes = node.outbound_revisions();
    let mut requests = node.outbound_requests();
    // Tell pollers at start too: our data may have changed while we were down.
    changes.mark_changed();
    loop {
        tokio::select! {
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
                let generation = *changes.borrow_and_update();
                for_each_poller(&node, &token, move |n, p| async move {
                    notify_if_changed(&n, &p, generation).await;
                });
            }
            r = requests.changed() => {
                if r.is_err() {
                    return;
                }
                requests.borrow_and_update();
                let touched = node.take_touched();
                if touched.is_empty() {
                    continue;
                }
                let generation = *changes.borrow();
                let touched = Arc::new(touched);
                for_each_poller(&node, &token, move |n, p| {
                    let touched = touched.clone();
                    async move { notify_ahead(&n, &p, &touched, generation).await }
                });
            }
            () = token.cancelled() => return,
        }
    }
}

/// Runs `notify(node, peer)` as a task for each `poller` peer, until `token` is cancelled.
fn for_each_poller<F, Fut>(node: &Arc<Node>, token: &CancellationToken, notify: F)
where
    F: Fn(Arc<Node>, PeerConfig) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let config = node.config();
    for peer in config.peers.iter().filter(|p| p.has_role(PeerRole::Poller)) {
        let job = notify(node.clone(), peer.clone());
        let t = token.clone();
        node.tracker.spawn(async move {
            // Pinned in place and polled by reference: moved into `select!`, the job would
            // be held twice in the task.
            tokio::pin!(job);
            tokio::select! {
                () = &mut job => {}
                () = t.cancelled() => {}
            }
        });
    }
}

/// Tells `peer` that our data is changing, ahead of the build, when `touched` may change
/// its answer: some touched dataset is neither the poller nor one it takes directly
/// (`apart`). Its poll then waits for the build (`outbound.max_wait` at most), so the
/// change travels a hop in one exchange and not in a build plus an exchange. A poller we
/// cannot tell apart (no DSI known) or already told is left to [`notify_if_changed`].
async fn notify_ahead(node: &Node, peer: &PeerConfig, touched: &Touched, generation: u64) {
    let Some(dsi) = peer.dsi.clone().or_else(|| node.peer_dsi(&peer.name)) else {
        return;
    };
    let view = node.routes().view(&dsi);
    if view.told || !touched.reaches(|d| *d == dsi || view.apart.contains(d)) {
        return;
    }
    // One notice at a time: the poll that follows it takes this change too.
    let Some(_telling) = node.routes().telling(&dsi) else {
        return;
    };
    notify_until_delivered(node, peer, Some((&dsi, view.answers)), generation).await;
}

/// Tells `peer` that our data changed, unless what it would receive is what it last
/// received (BGP's adj-rib-out: a change elsewhere in our hint is no news to a poller whose
/// answer leaves it out) or it was told already and has not polled since. A poller whose
/// DSI or last answer we do not know is told.
async fn notify_if_changed(node: &Node, peer: &PeerConfig, generation: u64) {
    let dsi = peer.dsi.clone().or_else(|| node.peer_dsi(&peer.name));
    let mut epoch = None;
    if let Some(dsi) = &dsi {
        // An answer being made now may carry this build: wait for its version.
        let routes = node.routes();
        routes.settled(dsi, node.config().outbound.max_wait).await;
        let view = routes.view(dsi);
        if view.told {
            tracing::debug!(peer = %peer.name, "poller told already; its next poll takes this change");
            return;
        }
        if let Some(sent) = view.sent {
            let (_, version, _) = node
                .poll_answer(Some(dsi), &view.separate, &view.apart, false)
                .await;
            if version == sent {
                tracing::debug!(peer = %peer.name, "out-bound change leaves this poller's answer as it was");
                node.update_status(|s| s.datachanged_skipped += 1);
                crate::sys::metrics::Metrics::inc(&node.metrics().datachanged_skipped);
                return;
            }
        }
        epoch = Some(view.answers);
    }
    let told = dsi.as_ref().zip(epoch);
    // Marked on its way, so that no notice ahead of a build is sent beside it.
    let _telling = dsi.as_ref().and_then(|d| node.routes().telling(d));
    notify_until_delivered(node, peer, told, generation).await;
}

/// Tells every `poller` peer, once, that our data changed as we stop, after our listeners
/// have closed: each polls at once, finds us gone and counts us unreachable, so a node that
/// leaves for good is dropped from its pollers' tables `limits.peer_gone_after` later
/// rather than only after their next scheduled poll; one that restarts says `datachanged`
/// again when it is back. Each notice is retried until delivered, all within
/// `limits.farewell_timeout` (2 s; zero: no farewell).
pub async fn farewell(node: &Arc<Node>) {
    let config = node.config();
    let deadline = config.limits.farewell_timeout;
    if deadline.is_zero() {
        return;
    }
    let mut notices = tokio::task::JoinSet::new();
    for peer in config.peers.iter().filter(|p| p.has_role(PeerRole::Poller)) {
        let (n, p) = (node.clone(), peer.clone());
        notices.spawn(async move {
            // Retried (fast, as after any transient failure) until the deadline.
            let policy = RetryPolicy::of(&n.config(), &p);
            let mut failures = 0u32;
            while let Err(e) = send_datachanged(&n, &p).await {
                failures = failures.saturating_add(1);
                tracing::debug!(peer = %p.name, error = %e, failures, "farewell datachanged not delivered");
                tokio::time::sleep(policy.delay(failures, transient(&e))).await;
            }
        });
    }
    let _ = tokio::time::timeout(deadline, notices.join_all()).await;
}

/// Sends `datachanged` for out-bound revision `generation` to `peer` until it is
/// delivered (then, with `told`, records that the poller of that DSI was told when it had
/// received that many answers: `Routes::note_told`), retrying with the poll back-off (a notice lost to a partition or a peer's
/// restart would otherwise leave the peer stale until its next scheduled poll), until a
/// newer change's notice takes over.
async fn notify_until_delivered(
    node: &Node,
    peer: &PeerConfig,
    told: Option<(&Dsi, u64)>,
    generation: u64,
) {
    let changes = node.outbound_revisions();
    let policy = RetryPolicy::of(&node.config(), peer);
    let mut failures = 0u32;
    loop {
        let last_transient = match send_datachanged(node, peer).await {
            Ok(()) => {
                node.update_status(|s| s.datachanged_sent += 1);
                if let Some((dsi, epoch)) = told {
                    node.routes().note_told(dsi, epoch);
                }
                return;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::info!(peer = %peer.name, error = %e, failures, "datachanged not delivered; will retry");
                transient(&e)
            }
        };
        tokio::time::sleep(
            policy
                .delay(failures, last_transient)
                .min(peer.poll_interval),
        )
        .await;
        if *changes.borrow() != generation {
            return;
        }
    }
}

/// Sends `datachanged` (RFC 2652 §2.3.3) to `peer`.
///
/// # Errors
/// [`PeerError`] when the exchange fails or the peer refuses.
pub async fn send_datachanged(node: &Node, peer: &PeerConfig) -> Result<(), PeerError> {
    let config = node.config();
    let request = Request::DataChanged {
        index_type: hint_type(),
        dsi: node.identity().dsi.clone(),
        body: Bytes::new(),
    };
    // A notice is a few short lines each way: an exchange stuck on a link that went down
    // is given up after twice the connect timeout (and retried), not a whole poll timeout.
    let deadline = (config.limits.connect_timeout * 2).min(config.limits.poll_timeout);
    tokio::time::timeout(deadline, async {
        let mut conn = connect(node, &config, peer).await?;
        let r = conn.request(&request).await?;
        let _ = conn.close().await;
        // Digest A9: 200 is the answer; a 201 is tolerated (its output is dropped).
        succeeded(r)
    })
    .await
    .map_err(|_| PeerError::Timeout)?
}

/// `Ok` for a 2xx reply, else the peer's refusal with its code and comment.
fn succeeded(reply: ClientReply) -> Result<(), PeerError> {
    if !transient_code(reply.code) {
        Ok(())
    } else {
        Err(PeerError::Refused {
            code: reply.code,
            comment: reply.comment,
        })
    }
}

/// Notes that `peer` did not answer; once it has not for `limits.peer_gone_after`, takes
/// its hint out of the table (off the async workers) until it answers again.
async fn gone_check(node: &Arc<Node>, peer: &str) {
    let (down_for, gone) = node.note_reachable(peer, false);
    let after = node.config().limits.peer_gone_after;
    if after.is_zero() || down_for < after || gone {
        return;
    }
    let (n, p) = (node.clone(), peer.to_owned());
    if let Err(e) = crate::sys::net::spawn_blocking(move || n.suspend_peer(&p)).await {
        tracing::warn!(peer, error = %e, "cannot take an unreachable peer's hint out");
    }
}

/// Notes where the poll of `peer` under way is (`cipctl poll` and `cipctl peers` show it).
fn note_phase(node: &Node, peer: &str, phase: &str) {
    node.update_peer(peer, |s| {
        if let Some(e) = &mut s.exchange {
            phase.clone_into(&mut e.phase);
        }
    });
}

/// The parameters of our polls: who we are (`poller-dsi`) and where we are queried
/// (`base-uri`, as ROADS sends it), so the polled node's searches can widen to us.
///
/// `separate` names the datasets to keep apart for our pollers' sake (they and what they
/// asked so), `apart` those for ours alone (the peers we poll), and `have` the version of
/// the peer's last answer we hold (with `delta`: a change since comes as a delta).
fn poll_params(node: &Node, own: &Dsi, peer: &str) -> Vec<(String, String)> {
    let mut params = vec![(POLLER_DSI_PARAM.to_owned(), own.to_string())];
    let listed = |set: std::collections::BTreeSet<Dsi>| {
        set.iter().map(Dsi::as_str).collect::<Vec<_>>().join(" ")
    };
    params.push((SEPARATE_PARAM.to_owned(), listed(node.wanted_apart())));
    params.push((APART_PARAM.to_owned(), listed(node.direct_peers())));
    if let Some(v) = node.have_for(peer) {
        params.push((HAVE_PARAM.to_owned(), crate::store::routes::version_text(v)));
        // What changed since, as a delta from the hint we hold (PROTOCOL.md "Hint deltas").
        params.push((DELTA_PARAM.to_owned(), "yes".to_owned()));
    }
    let uris = node.identity().base_uris.join(" ");
    if !uris.is_empty() {
        params.push((BASE_URI_PARAM.to_owned(), uris));
    }
    params
}

#[cfg(test)]
mod retry_tests {
    use super::*;

    #[test]
    fn transient_failures_are_retried_fast_then_within_the_transient_cap() {
        let minute = Duration::from_secs(60);
        let policy = RetryPolicy {
            interval: Duration::from_secs(900),
            max_backoff: Duration::from_secs(3600),
            transient: Backoff {
                first: Duration::from_millis(250),
                cap: minute,
            },
        };
        // The first retry comes within 250 ms, spread over the window (full jitter) ...
        let first: Vec<Duration> = (0..200).map(|_| policy.delay(1, true)).collect();
        assert!(first.iter().all(|d| *d <= Duration::from_millis(250)));
        assert!(first.iter().any(|d| *d < Duration::from_millis(125)));
        assert!(first.iter().any(|d| *d >= Duration::from_millis(125)));
        // ... the third within 1 s ...
        assert!((0..200).all(|_| policy.delay(3, true) <= Duration::from_secs(1)));
        // ... a peer that comes back is polled again within the transient cap ...
        assert!((0..200).all(|_| policy.delay(40, true) <= minute));
        // ... while other failures back off to max_backoff.
        assert!(policy.delay(40, false) > minute);
        assert!(policy.delay(0, true) > Duration::from_secs(800));
        // Never longer than the interval would be after a success.
        let short = RetryPolicy {
            interval: Duration::from_millis(100),
            ..policy
        };
        assert!((0..200).all(|_| short.delay(5, true) <= Duration::from_millis(110)));
    }

    #[test]
    fn what_is_transient() {
        let stalled = PeerError::Transport(TransportError::Stalled {
            phase: crate::transport::Phase::Transfer,
            after: Duration::from_secs(1),
        });
        assert!(transient(&stalled));
        assert!(transient(&PeerError::Timeout));
        let refused = |code| PeerError::Refused {
            code,
            comment: String::new(),
        };
        assert!(transient(&refused(ResponseCode::TemporarilyUnable)));
        assert!(!transient(&refused(ResponseCode::SignatureRequired)));
        assert!(!transient(&PeerError::NoPort));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lasting_refusal_of_the_version_marks_a_peer_legacy() {
        let refused = |code| {
            PeerError::Transport(TransportError::VersionRefused {
                status: cip_proto::cip::stream::Status {
                    code,
                    comment: "no".into(),
                    continuation: Vec::new(),
                },
            })
        };
        assert!(not_cipv3(&refused(ResponseCode::BadMimeFormat)));
        assert!(!not_cipv3(&refused(ResponseCode::Aborting)));
        assert!(not_cipv3(&PeerError::Transport(TransportError::NotCipV3 {
            answer: "% 200".into()
        })));
        assert!(!not_cipv3(&PeerError::Timeout));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let i = Duration::from_secs(600);
        let cap = Duration::from_secs(3600);
        for _ in 0..50 {
            let ok = next_delay(i, 0, cap);
            assert!(ok >= i.mul_f64(0.9) && ok <= i.mul_f64(1.1), "{ok:?}");
            let f1 = next_delay(i, 1, cap);
            assert!(f1 <= Duration::from_millis(1100), "{f1:?}");
            let f5 = next_delay(i, 5, cap);
            assert!(
                f5 >= Duration::from_millis(14_400) && f5 <= Duration::from_millis(17_600),
                "{f5:?}"
            );
            assert!(next_delay(i, 40, cap) <= cap.mul_f64(1.1));
        }
        // A short interval backs off from the interval itself.
        let short = Duration::from_millis(100);
        assert!(next_delay(short, 1, cap) <= Duration::from_millis(110));
    }
}
