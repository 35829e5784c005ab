//! The HTTP front-end: one listener, one axum router.
//!
//! Routes are grouped so other front-ends slot in beside the query API: [`router`] merges
//! [`query_routes`] (`/v1/referrals`, `/v1/objects`, `/v1/status`) with whatever the caller
//! adds (CIP over HTTP, RDM, metrics) through [`Router::merge`]. Every error is JSON:
//! `{"status": 400, "error": "bad-query", "message": "..."}`.
//!
//! Serving ([`serve`], [`serve_limited`]) caps open connections overall and per source
//! address ([`crate::front::conn_limit`]; over the limit: `503` with `Retry-After`, then close),
//! bounds the header section's size and time, each request with the configured HTTP timeout
//! and each stalled write, and drains in-flight requests when the daemon's token is cancelled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::extract::{Query as QueryParams, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use crate::front::api::{ApiError, ErrorBody};
use crate::front::conn_limit::{ConnLimiter, HTTP_BUSY};
pub use crate::model::routes::FIXED_ROUTES;
use crate::node::Node;

/// Most bytes of a request line and header section; a larger one gets `431` (or `414`) and
/// the connection is closed. Also hyper's read buffer size, so it bounds what one
/// connection buffers while its headers arrive.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Parameters of `/v1/referrals` and `/v1/objects`.
#[derive(Debug, Deserialize)]
pub struct QueryArgs {
    /// The query (`DOCUMENT:Author=Garcia & Title~mesh`).
    pub q: Option<String>,
    /// Include possible referrals (`true`/`false`).
    pub possible: Option<String>,
    /// Most results.
    pub limit: Option<String>,
}

impl QueryArgs {
    fn query(&self) -> Result<&str, ApiError> {
        match self.q.as_deref() {
            Some(q) if !q.trim().is_empty() => Ok(q),
            _ => Err(ApiError {
                status: StatusCode::BAD_REQUEST,
                kind: "missing-query",
                message: "the q parameter (the query) is required".into(),
            }),
        }
    }

    fn possible(&self) -> Result<bool, ApiError> {
        match self.possible.as_deref() {
            None | Some("false" | "0" | "no") => Ok(false),
            Some("true" | "1" | "yes" | "") => Ok(true),
            Some(other) => Err(bad_parameter("possible", other, "true or false")),
        }
    }

    fn limit(&self) -> Result<Option<usize>, ApiError> {
        match self.limit.as_deref() {
            None => Ok(None),
            Some(s) => match s.parse::<usize>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(bad_parameter("limit", s, "a positive integer")),
            },
        }
    }
}

fn bad_parameter(name: &str, value: &str, expected: &str) -> ApiError {
    ApiError {
        status: StatusCode::BAD_REQUEST,
        kind: "bad-parameter",
        message: format!("{name}={value:?}: expected {expected}"),
    }
}

/// The whole HTTP application of a node: the query API, `/metrics` and the Hina-Di file.
/// Later front-ends (RDM, CIP over HTTP) are merged in here as further route sets.
pub fn router(node: Arc<Node>) -> Router {
    let config = node.config();
    let timeout = config.limits.http_timeout;
    let mut app = query_routes(node.clone())
        .merge(metrics_routes(node.clone()))
        .merge(health_routes(node.clone()))
        .merge(crate::front::search_route::routes(node.clone()));
    if let Some(path) = &config.listen.cip_http {
        app = app.merge(crate::front::cip_http::routes(node.clone(), path));
    }
    if let Some(path) = &config.hinadi.serve_path {
        app = app.merge(crate::front::hinadi_server::routes(node.clone(), path));
    }
    if let Some(path) = &config.rdm.path {
        app = app.merge(crate::front::rdm_server::routes(node.clone(), path));
    }
    if let Some(path) = &config.console.path {
        app = app.merge(crate::front::console::routes(node.clone(), path));
    }
    app.fallback(not_found).layer(axum::middleware::from_fn(
        move |req: Request, next: Next| request_timeout(req, next, timeout),
    ))
}

/// The query API.
pub fn query_routes(node: Arc<Node>) -> Router {
    Router::new()
        .route("/v1/referrals", get(referrals))
        .route("/v1/objects", get(objects))
        .route("/v1/status", get(status))
        .with_state(node)
}

/// `GET /healthz` (the process answers: 200) and `GET /readyz` (200 once the node serves
/// with its start-up import done; 503 with the reason before), for load balancers and
/// orchestrators.
pub fn health_routes(node: Arc<Node>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(node)
}

async fn readyz(State(node): State<Arc<Node>>) -> Response {
    let status = node.status_snapshot();
    let (expected, imported) = node.import_progress();
    if !status.ready {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: listeners not up yet\n",
        )
            .into_response();
    }
    if node.cold_starting() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("starting: {imported} of {expected} peers' hints imported\n"),
        )
            .into_response();
    }
    "ready\n".into_response()
}

/// `GET /metrics`: Prometheus text exposition format.
pub fn metrics_routes(node: Arc<Node>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(node)
}

async fn metrics(State(node): State<Arc<Node>>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        node.render_metrics(),
    )
        .into_response()
}

async fn request_timeout(req: Request, next: Next, limit: Duration) -> Response {
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(r) => r,
        Err(_) => ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "timeout",
            message: format!(
                "the request took longer than {}",
                humantime::format_duration(limit)
            ),
        }
        .into_response(),
    }
}

async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        kind: "not-found",
        message: "no such endpoint".into(),
    }
}

async fn referrals(
    State(node): State<Arc<Node>>,
    QueryParams(args): QueryParams<QueryArgs>,
) -> Result<Response, ApiError> {
    let q = args.query()?.to_owned();
    let possible = args.possible()?;
    // A page of the best few unless the client asks for more (capped by max_referrals).
    let limit = Some(
        args.limit()?
            .unwrap_or_else(|| node.config().limits.default_referrals),
    );
    let started = Instant::now();
    let query = node.parse_query(&q).inspect_err(|_| {
        crate::sys::metrics::Metrics::inc(&node.metrics().query_errors);
    })?;
    // An exact lookup on indexed attributes, or a substring whose sums the table keeps,
    // costs microseconds: answer it here. Anything that may scan (other substrings,
    // attributes the local store does not index, which read objects from disk) goes to
    // the blocking pool.
    let body = if node.is_quick(&query, possible, limit) {
        node.referrals_json(&q, &query, possible, limit)?
    } else if let Some(hit) = node.cached_referrals(&q, possible, limit) {
        hit
    } else {
        // At most `limits.max_concurrent_scans` at once: more would only share the cores.
        let _turn = node.scan_permit().await;
        let (n, raw) = (node.clone(), q.clone());
        blocking(move || n.referrals_json(&raw, &query, possible, limit)).await??
    };
    tracing::debug!(
        query = q,
        bytes = body.len(),
        elapsed_us = started.elapsed().as_micros() as u64,
        "query answered"
    );
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

async fn objects(
    State(node): State<Arc<Node>>,
    QueryParams(args): QueryParams<QueryArgs>,
) -> Result<Response, ApiError> {
    let q = args.query()?.to_owned();
    let limit = args.limit()?;
    let answer = blocking(move || node.local_objects(&q, limit)).await??;
    Ok(Json(answer).into_response())
}

/// Runs `f` on the blocking pool; a panic there becomes a 500 instead of a dropped
/// connection.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    crate::sys::net::spawn_blocking(f)
        .await
        .map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "internal",
            message: format!("query task failed: {e}"),
        })
}

async fn status(State(node): State<Arc<Node>>) -> Response {
    Json(node.status_snapshot()).into_response()
}

/// How the HTTP listener treats connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connections served at once; further clients get `503` with `Retry-After` and are
    /// closed.
    pub max_connections: usize,
    /// Time a connection may take to send a request's headers, and may sit idle between
    /// keep-alive requests, before it is closed; also how long a write to a client that
    /// reads nothing may stall.
    pub idle_timeout: Duration,
}

/// Serves `app` on `listener` until `token` is cancelled, then lets open requests finish;
/// at most `limits.max_connections` connections at once, whatever their address. See
/// [`serve_limited`].
///
/// # Errors
/// None today; the signature leaves room for listeners that can fail for good.
pub async fn serve(
    listener: TcpListener,
    limits: HttpLimits,
    app: Router,
    token: CancellationToken,
    tracker: TaskTracker,
) -> std::io::Result<()> {
    let limiter = ConnLimiter::total_only("http", limits.max_connections, Arc::default());
    serve_limited(listener, limits, limiter, None, app, token, tracker).await
}

/// What a served connection reads and writes: a TCP stream, or TLS over one.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// Serves `app` on `listener` until `token` is cancelled, then lets open requests finish.
///
/// Each connection is an HTTP/1.1 connection of its own task on `tracker`, holding a slot of
/// `limiter` (which may be shared by several listeners; `limits.max_connections` is not
/// used). The loop never waits for a slot: a connection over the limit is answered `503`
/// with `Retry-After` and closed at once. Hyper's header-read timeout closes connections that
/// are slow to send headers or idle between requests (slow-client protection), a header
/// section over [`MAX_HEADER_BYTES`] is refused before more is buffered, a write that makes
/// no progress for `limits.idle_timeout` ends the connection, and the router's own timeout
/// bounds each request.
///
/// With `tls` the listener speaks HTTPS: each connection's TLS handshake (and, when the
/// configuration asks for them, its client certificate check) happens in its own task
/// within `limits.idle_timeout`; a connection over the limit is closed without an answer
/// (a plain-text 503 would be garbage inside TLS).
///
/// # Errors
/// None today; the signature leaves room for listeners that can fail for good.
pub async fn serve_limited(
    listener: TcpListener,
    limits: HttpLimits,
    limiter: Arc<ConnLimiter>,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    token: CancellationToken,
    tracker: TaskTracker,
) -> std::io::Result<()> {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .max_buf_size(MAX_HEADER_BYTES)
        // A client may shut down its sending side once its request is out (HTTP/1.0
        // clients, `nc -q`): it still gets the whole answer. Without this the connection
        // closed when the end of its input was read, often in the middle of the answer.
        .half_close(true)
        .keep_alive(true);
    loop {
        let (stream, remote) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors and similar: back off instead of spinning.
                    tracing::warn!(error = %e, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = token.cancelled() => break,
        };
        // Closed by its peer already (a connect/close flood): not worth a slot or a task.
        if crate::front::conn_limit::peer_gone(&stream) {
            limiter.note_gone();
            continue;
        }
        let permit = match limiter.try_acquire(Some(remote.ip())) {
            Ok(p) => p,
            Err(why) => {
                let answer = tls.is_none().then_some(HTTP_BUSY);
                limiter.refuse(stream, remote, why, answer, &tracker, &token);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let stream = StallGuard::new(stream, limits.idle_timeout);
        // Handlers that recognise peers by address (CIP over HTTP) find it as axum's
        // `ConnectInfo` request extension. Each request is reported to the connection's slot:
        // busy from its headers to the end of its answer's body, idle in between.
        let service = TowerToHyperService::new(app.clone());
        let activity = permit.activity();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<_>| {
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(remote));
            let activity = activity.clone();
            let started = activity.begin();
            let call = hyper::service::Service::call(&service, req);
            async move {
                let response = call.await?;
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    if started {
                        axum::body::Body::new(Tracked {
                            inner: body,
                            activity: Some(activity),
                        })
                    } else {
                        body
                    }
                }))
            }
        });
        let token = token.clone();
        // Headers and the TLS handshake get less time as the slots fill (see conn_limit).
        let deadline = limiter.deadline(limits.idle_timeout);
        let mut builder = builder.clone();
        builder.header_read_timeout(deadline);
        let tls = tls.clone();
        tracker.spawn(async move {
            let evicted = permit.evicted();
            let serve = async {
                let io: Box<dyn Io> = match tls {
                    None => Box::new(stream),
                    Some(config) => {
                        let accept = tokio_rustls::TlsAcceptor::from(config).accept(stream);
                        match tokio::time::timeout(deadline, accept).await {
                            Ok(Ok(s)) => Box::new(s),
                            Ok(Err(error)) => {
                                tracing::debug!(%remote, %error, "https handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%remote, "https handshake timed out");
                                return;
                            }
                        }
                    }
                };
                let conn = builder.serve_connection(TokioIo::new(io), service);
                let mut conn = std::pin::pin!(conn);
                let result = tokio::select! {
                    r = conn.as_mut() => r,
                    () = token.cancelled() => {
                        conn.as_mut().graceful_shutdown();
                        conn.await
                    }
                };
                if let Err(error) = result {
                    tracing::debug!(%remote, %error, "http connection ended with an error");
                }
            };
            // Evicted for a new connection: dropped (closed) at once.
            tokio::select! {
                () = serve => {}
                () = evicted => tracing::debug!(%remote, "http connection evicted for a new one"),
            }
            drop(permit);
        });
    }
    Ok(())
}

/// A response body that reports the end of its request to the connection's slot when it
/// has been sent (or dropped).
struct Tracked {
    inner: axum::body::Body,
    activity: Option<crate::front::conn_limit::Activity>,
}

impl hyper::body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(a) = self.activity.take() {
            a.end();
        }
    }
}

/// A stream whose writes fail with `TimedOut` once they make no progress for `limit`, so a
/// client that stops reading cannot hold its connection (and its slot) forever.
struct StallGuard<S> {
    io: S,
    limit: Duration,
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<S> StallGuard<S> {
    fn new(io: S, limit: Duration) -> Self {
        Self {
            io,
            limit,
            stalled: None,
        }
    }

    /// Passes a write's result on; a pending write starts (or goes on with) the stall timer.
    fn check<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        result: std::task::Poll<std::io::Result<T>>,
    ) -> std::task::Poll<std::io::Result<T>> {
        use std::task::Poll;
        if result.is_ready() {
            self.stalled = None;
            return result;
        }
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if timer.as_mut().poll(cx).is_ready() {
            self.stalled = None;
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client reads nothing: write stalled",
            )));
        }
        Poll::Pending
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for StallGuard<S> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for StallGuard<S> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = std::pin::Pin::new(&mut this.io).poll_write(cx, buf);
        this.check(cx, r)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = std::pin::Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.check(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = std::pin::Pin::new(&mut this.io).poll_flush(cx);
        this.check(cx, r)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let r = std::pin::Pin::new(&mut this.io).poll_shutdown(cx);
        this.check(cx, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters() {
        let a = QueryArgs {
            q: Some("A=b".into()),
            possible: Some("true".into()),
            limit: Some("3".into()),
        };
        assert_eq!(a.query().unwrap(), "A=b");
        assert!(a.possible().unwrap());
        assert_eq!(a.limit().unwrap(), Some(3));
        let b = QueryArgs {
            q: Some("  ".into()),
            possible: Some("maybe".into()),
            limit: Some("0".into()),
        };
        assert_eq!(b.query().unwrap_err().kind, "missing-query");
        assert_eq!(b.possible().unwrap_err().status, StatusCode::BAD_REQUEST);
        assert_eq!(b.limit().unwrap_err().kind, "bad-parameter");
    }

    /// Serves a trivial router with `limits` on a free port.
    async fn server(limits: HttpLimits) -> (std::net::SocketAddr, CancellationToken, TaskTracker) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", get(|| async { "hi" }));
        let (token, tracker) = (CancellationToken::new(), TaskTracker::new());
        tracker.spawn(serve(listener, limits, app, token.clone(), tracker.clone()));
        (addr, token, tracker)
    }

    #[tokio::test]
    async fn slow_and_idle_clients_are_closed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let limits = HttpLimits {
            max_connections: 4,
            idle_timeout: Duration::from_millis(200),
        };
        let (addr, token, tracker) = server(limits).await;
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0u8; 1024];
        let n = c.read(&mut buf).await.unwrap();
        assert!(
            String::from_utf8_lossy(&buf[..n]).ends_with("hi"),
            "a request is answered"
        );
        // Now idle on a keep-alive connection: the server closes it. The outer timeout only
        // bounds a failure.
        let read = tokio::time::timeout(Duration::from_secs(10), c.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "idle connection closed: {read:?}"
        );
        // Half a request header, then nothing: closed as well.
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
        let read = tokio::time::timeout(Duration::from_secs(10), slow.read(&mut buf)).await;
        let closed = match read {
            Ok(Ok(n)) => n == 0 || String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"),
            Ok(Err(_)) => true,
            Err(_) => false,
        };
        assert!(closed, "slow header closed: {read:?}");
        token.cancel();
        tracker.close();
        tracker.wait().await;
    }

    /// Re-checks `f` every 10 ms until it holds; panics after 10 s.
    async fn wait_until(mut f: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "condition never held"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Sends `request` on a new connection and reads until the server closes (bounded).
    async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(request).await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut out))
            .await
            .expect("the server answers and closes");
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn connections_over_the_limit_get_503_and_close() {
        let limits = HttpLimits {
            max_connections: 1,
            idle_timeout: Duration::from_secs(30),
        };
        let (addr, token, tracker) = server(limits).await;
        let first = tokio::net::TcpStream::connect(addr).await.unwrap();
        let refused = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(refused.starts_with("HTTP/1.1 503 "), "{refused}");
        assert!(refused.contains("Retry-After: "), "{refused}");
        // The slot comes back when the first client leaves; the loop never stopped accepting.
        drop(first);
        let mut answer = String::new();
        for _ in 0..100 {
            answer = exchange(
                addr,
                b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
            .await;
            if !answer.starts_with("HTTP/1.1 503 ") {
                break;
            }
            // The server notices the first client's close asynchronously.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(answer.ends_with("hi"), "{answer}");
        token.cancel();
        tracker.close();
        tracker.wait().await;
    }

    #[tokio::test]
    async fn per_address_limit_spares_other_addresses() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", get(|| async { "hi" }));
        let (token, tracker) = (CancellationToken::new(), TaskTracker::new());
        let limits = HttpLimits {
            max_connections: 100,
            idle_timeout: Duration::from_secs(30),
        };
        let limiter = ConnLimiter::new("http", 100, 2, Arc::default());
        tracker.spawn(serve_limited(
            listener,
            limits,
            limiter.clone(),
            None,
            app,
            token.clone(),
            tracker.clone(),
        ));
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        wait_until(|| limiter.open() == 2).await;
        let refused = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(refused.starts_with("HTTP/1.1 503 "), "{refused}");
        // Another loopback address has its own share.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut other = socket.connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        other
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        other.read_to_end(&mut out).await.unwrap();
        assert!(String::from_utf8_lossy(&out).ends_with("hi"));
        assert_eq!(limiter.refused(), 1);
        token.cancel();
        tracker.close();
        tracker.wait().await;
    }

    #[tokio::test]
    async fn oversize_headers_and_garbage_are_refused_and_closed() {
        let limits = HttpLimits {
            max_connections: 4,
            idle_timeout: Duration::from_secs(30),
        };
        let (addr, token, tracker) = server(limits).await;
        let garbage = exchange(addr, b"\x16\x03\x01 not http at all\r\n\r\n").await;
        assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");
        // A header section past the limit: refused once the limit is reached, not buffered
        // to the end (the client keeps sending far more than the server reads).
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut r, mut w) = c.into_split();
        let writer = tokio::spawn(async move {
            w.write_all(b"GET / HTTP/1.1\r\nX-Big: ").await?;
            let chunk = vec![b'a'; 64 * 1024];
            let mut sent = 0usize;
            while sent < 64 << 20 {
                w.write_all(&chunk).await?;
                sent += chunk.len();
            }
            std::io::Result::Ok(sent)
        });
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), r.read_to_end(&mut out))
            .await
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out).starts_with("HTTP/1.1 431 "),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert!(
            writer.await.unwrap().is_err(),
            "the server closed before 64 MiB were sent"
        );
        token.cancel();
        tracker.close();
        tracker.wait().await;
    }

    #[tokio::test]
    async fn a_client_that_reads_nothing_is_closed() {
        use tokio::io::AsyncWriteExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // An answer far larger than the socket buffers.
        let big: Arc<str> = "x".repeat(32 << 20).into();
        let app = Router::new().route(
            "/",
            get(move || {
                let big = big.to_string();
                async move { big }
            }),
        );
        let (token, tracker) = (CancellationToken::new(), TaskTracker::new());
        let limits = HttpLimits {
            max_connections: 4,
            idle_timeout: Duration::from_millis(300),
        };
        let limiter = ConnLimiter::total_only("http", 4, Arc::default());
        tracker.spawn(serve_limited(
            listener,
            limits,
            limiter.clone(),
            None,
            app,
            token.clone(),
            tracker.clone(),
        ));
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        // Never read: the server's write stalls, and the connection gives its slot back.
        wait_until(|| limiter.open() == 1).await;
        wait_until(|| limiter.open() == 0).await;
        drop(c);
        token.cancel();
        tracker.close();
        tracker.wait().await;
    }

    /// A client that shuts down its sending side after its request gets the whole answer,
    /// also when the answer is not ready before the end of its input is read.
    #[tokio::test]
    async fn a_client_that_half_closes_gets_the_whole_answer() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let body: Arc<str> = "y".repeat(1 << 20).into();
        let app = Router::new().route(
            "/",
            get(move || {
                let body = body.to_string();
                async move {
                    // The answer comes after the server has read the client's end of input.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    body
                }
            }),
        );
        let (token, tracker) = (CancellationToken::new(), TaskTracker::new());
        let limits = HttpLimits {
            max_connections: 4,
            idle_timeout: Duration::from_secs(5),
        };
        tracker.spawn(serve(listener, limits, app, token.clone(), tracker.clone()));
        for _ in 0..3 {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
            c.shutdown().await.unwrap();
            let mut out = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut out))
                .await
                .expect("the server answers and closes")
                .unwrap();
            let text = String::from_utf8_lossy(&out);
            assert!(
                text.starts_with("HTTP/1.0 200"),
                "{}",
                &text[..text.len().min(200)]
            );
            assert!(text.ends_with(&"y".repeat(1000)), "{} bytes", out.len());
            let head = text.find("\r\n\r\n").expect("a head") + 4;
            assert_eq!(out.len() - head, 1 << 20);
        }
        token.cancel();
        tracker.close();
        tracker.wait().await;
    }
}
