//! CIP over HTTP (RFC 2653 §2.3): the receiver as a route on the node's HTTP listener
//! ([`routes`]). The sender's POST client is [`crate::transport::cip_http_client`].
//!
//! RFC 2653 §2.3 says only that the sender POSTs an `application/index.cmd.*` entity and
//! that the reply body is an `application/index.response` or an index object. It leaves
//! open how CIP codes map to HTTP statuses, how versions are negotiated, and what a poll
//! result looks like (digest A22). We decided as follows. PROTOCOL.md ("CIP over HTTP")
//! has the full record.
//!
//! * The request's `Content-Type` (and `Content-Transfer-Encoding`, if a sender uses one)
//!   and its body form the CIP message. It is parsed as on the stream transport and
//!   answered by the same [`RequestHandler`]. The body is capped at the stream's message
//!   limit (`limits.max_frame_size`); a larger one gets `413`.
//! * CIP 200 with no comment → `204 No Content`. With a comment → `200` and an
//!   `application/index.response; code=200` body.
//! * CIP 201 → `200` with the `multipart/mixed` result exactly as the stream sends it
//!   (digest A4); the result's MIME headers become HTTP headers.
//! * CIP 400 (temporary) → `503` with `Retry-After` and the index.response.
//! * Every other CIP code → `200` with an `application/index.response; code=NNN` body. CIP
//!   codes stay apart from HTTP's, and HTTP statuses keep their HTTP meaning: 404 no such
//!   path, 405 not a POST, 413 body too large, 415 a content coding we do not undo.
//! * No version negotiation: the URL is a CIPv3 endpoint. A `CIP-Version` header (the
//!   mail transport's, RFC 2653 §2.2) that names another major version gets a 500.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use cip_proto::cip::mime::Entity;
use cip_proto::cip::stream::CIP_VERSION;
use cip_proto::cip::{IndexResponse, Limits, Request, ResponseCode};
use tracing::{debug, warn};

use crate::front::body::BodyError;
use crate::front::service::CipService;
use crate::node::Node;
use crate::transport::cip_http_client::entity_message;
use crate::transport::{PeerContext, Reply, RequestHandler, TransportConfig};

/// Seconds in the `Retry-After` of a `503` (CIP 400, "temporarily unable"). Pollers back off
/// on their own; this is a hint for other senders.
pub const RETRY_AFTER_SECS: u64 = 60;

/// `CIP-Version` (RFC 2653 §2.2, the mail transport's version header).
const CIP_VERSION_HEADER: HeaderName = HeaderName::from_static("cip-version");

/// The comment of a `201` answer (an HTTP `200` carrying the result), which carries the
/// answer's version for the poller's next `have` (PROTOCOL.md, "Routes in a mesh with
/// cycles").
pub const CIP_COMMENT_HEADER: &str = "cip-comment";

/// The remote address used when the server was not built with one (tests that call the
/// router directly). Such requests never match a configured peer.
const UNKNOWN_REMOTE: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// The `POST <path>` route of a node's CIP-over-HTTP endpoint, answered by the node's
/// [`CipService`] with the stream transport's size limits.
///
/// The peer's address comes from the `ConnectInfo<SocketAddr>` request extension that
/// [`crate::front::http_server::serve`] sets. Other methods on `path` get `405`.
pub fn routes(node: Arc<Node>, path: &str) -> Router {
    let transport = crate::transport::transport_config(&node.config());
    let budget = node.inflight().clone();
    let endpoint = Arc::new(Endpoint {
        handler: Arc::new(CipService::new(node)),
        limits: transport.limits,
        budget: Some(budget),
        read_within: transport.transfer_timeout,
    });
    Router::new()
        .route(path, post(receive::<CipService>))
        .with_state(endpoint)
}

/// As [`routes`], with any handler and limits (and no shared budget).
pub fn routes_with<H: RequestHandler>(handler: Arc<H>, limits: Limits, path: &str) -> Router {
    let endpoint = Arc::new(Endpoint {
        handler,
        limits,
        budget: None,
        read_within: TransportConfig::default().transfer_timeout,
    });
    Router::new()
        .route(path, post(receive::<H>))
        .with_state(endpoint)
}

/// A route's state.
struct Endpoint<H> {
    handler: Arc<H>,
    limits: Limits,
    /// The in-flight byte budget bodies grow into.
    budget: Option<Arc<crate::sys::budget::ByteBudget>>,
    /// How long a body may wait for the budget.
    read_within: std::time::Duration,
}

async fn receive<H: RequestHandler>(
    State(endpoint): State<Arc<Endpoint<H>>>,
    request: axum::extract::Request,
) -> Response {
    let remote = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(UNKNOWN_REMOTE, |c| c.0);
    let limits = endpoint.limits;
    let (parts, body) = request.into_parts();
    if let Some(coding) = parts
        .headers
        .get(header::CONTENT_ENCODING)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
        .filter(|c| !c.eq_ignore_ascii_case("identity"))
    {
        return plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content-encoding {coding:?} is not supported; send the entity as it is"),
        );
    }
    let max = limits.max_message;
    let deadline = tokio::time::Instant::now() + endpoint.read_within;
    let read = crate::front::body::read(
        body,
        declared_length(&parts.headers),
        max,
        endpoint.budget.as_ref(),
        deadline,
    )
    .await;
    let (body, _reservation) = match read {
        Ok(b) => b,
        Err(BodyError::TooLarge { .. }) => return too_large(max),
        Err(BodyError::Budget(e)) => {
            // CIP 400, "temporarily unable": the sender retries later.
            let reply = Reply::status(ResponseCode::TemporarilyUnable, e.to_string());
            return reply_response(reply, &limits);
        }
        Err(e) => {
            debug!(%remote, error = %e, "cannot read a cip request body");
            return plain(StatusCode::BAD_REQUEST, e.to_string());
        }
    };
    let reply = if let Some(refusal) = version_refusal(&parts.headers) {
        Reply::status(ResponseCode::BadMimeFormat, refusal)
    } else {
        let message = entity_message(&parts.headers, &body);
        match Request::from_mime(&message, &limits) {
            Err(e) => {
                debug!(%remote, error = %e, "refusing cip request over http");
                Reply::status(e.code(), e.to_string())
            }
            Ok(request) => {
                debug!(%remote, kind = request.kind(), "cip request over http");
                let peer = PeerContext {
                    remote,
                    tls_peer_certificates: None,
                };
                endpoint.handler.handle(request, &peer).await
            }
        }
    };
    reply_response(reply, &limits)
}

/// The HTTP answer to a handler's [`Reply`] (see the module doc for the mapping).
///
/// A result that cannot be encoded, or whose encoding exceeds `limits.max_message` (the
/// peer's default limit would refuse it), becomes CIP 400 "cannot send result", as on the
/// stream.
pub fn reply_response(reply: Reply, limits: &Limits) -> Response {
    if reply.code == ResponseCode::OkOutputFollows {
        let result = reply.result.unwrap_or_default();
        let encoded = result.to_mime().map_err(|e| e.to_string()).and_then(|m| {
            if m.len() > limits.max_message {
                Err(format!(
                    "the result of {} bytes exceeds the message limit of {} bytes",
                    m.len(),
                    limits.max_message
                ))
            } else {
                Ok(m)
            }
        });
        return match encoded {
            Ok(message) => {
                let mut response = mime_response(StatusCode::OK, &message);
                if let Some(v) = reply
                    .comment
                    .as_deref()
                    .and_then(|c| HeaderValue::from_str(c).ok())
                {
                    response
                        .headers_mut()
                        .insert(HeaderName::from_static(CIP_COMMENT_HEADER), v);
                }
                response
            }
            Err(reason) => {
                warn!(%reason, "cannot send poll result");
                reply_response(
                    Reply::status(
                        ResponseCode::TemporarilyUnable,
                        format!("cannot send result: {reason}"),
                    ),
                    limits,
                )
            }
        };
    }
    if reply.result.is_some() {
        warn!(code = %reply.code, "handler returned a result without 201; not sent");
    }
    let comment = reply.comment.filter(|c| !c.is_empty());
    match (reply.code, comment) {
        (ResponseCode::Ok, None) => StatusCode::NO_CONTENT.into_response(),
        (ResponseCode::TemporarilyUnable, comment) => {
            let mut response = index_response(
                StatusCode::SERVICE_UNAVAILABLE,
                ResponseCode::TemporarilyUnable,
                comment.as_deref(),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
            response
        }
        (code, comment) => index_response(StatusCode::OK, code, comment.as_deref()),
    }
}

/// `status` with an `application/index.response; code=NNN` body. An absent comment is the
/// code's RFC text; CR and LF in a comment become spaces (the comment is one line).
fn index_response(status: StatusCode, code: ResponseCode, comment: Option<&str>) -> Response {
    let comment = comment.map_or_else(|| code.text().to_owned(), |c| c.replace(['\r', '\n'], " "));
    let response = IndexResponse {
        code,
        comment,
        payload: Bytes::new(),
    };
    match response.to_mime() {
        Ok(message) => mime_response(status, &message),
        // Unreachable: the comment holds no CR or LF. Still no panic on the network path.
        Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// A MIME message as an HTTP response: its headers become HTTP headers, its body the body.
fn mime_response(status: StatusCode, message: &Bytes) -> Response {
    let limits = Limits {
        max_header: message.len(),
        ..Limits::default()
    };
    let entity = match Entity::parse(message, &limits) {
        Ok(e) => e,
        Err(e) => return plain(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let mut response = Response::new(Body::from(entity.body));
    *response.status_mut() = status;
    for (name, value) in entity.headers.iter() {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            (Ok(n), Ok(v)) => {
                response.headers_mut().append(n, v);
            }
            _ => debug!(name, "header not representable in http; left out"),
        }
    }
    response
}

fn plain(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
        .into_response()
}

fn too_large(max: usize) -> Response {
    index_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        ResponseCode::BadMimeFormat,
        Some(&format!(
            "request body exceeds the limit of {max} bytes (limits.max_frame_size)"
        )),
    )
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Why a `CIP-Version` header is refused: another major version, or not a version.
fn version_refusal(headers: &HeaderMap) -> Option<String> {
    let raw = headers.get(CIP_VERSION_HEADER)?;
    let text = String::from_utf8_lossy(raw.as_bytes());
    let major = text
        .trim()
        .split('.')
        .next()
        .and_then(|m| m.trim().parse::<u32>().ok());
    match major {
        Some(CIP_VERSION) => None,
        Some(n) => Some(format!(
            "CIP version {n} not supported; this server speaks version {CIP_VERSION}"
        )),
        None => Some(format!("malformed CIP-Version header {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::url::CipUrl;
    use crate::transport::cip_http_client::{CipHttpClient, HttpError};
    use cip_proto::Dsi;
    use cip_proto::cip::PollResult;
    use cip_proto::cip::{IndexObject, IndexType};
    use std::sync::Mutex;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_util::sync::CancellationToken;
    use tokio_util::task::TaskTracker;

    fn object() -> IndexObject {
        IndexObject {
            index_type: IndexType::harvest_soif(),
            dsi: Dsi::new("1.3.6.1.4.1.99999.5").unwrap(),
            base_uris: vec!["http://leaf.example/".into()],
            dsi_description: Some("a leaf".into()),
            payload: Bytes::from_static(b"@CIP-HINT { -\nTotal-Object-Count{1}:\t2\n}\n"),
        }
    }

    /// Answers like a node would, and records who asked what.
    #[derive(Default)]
    struct Stub {
        seen: Mutex<Vec<(&'static str, SocketAddr)>>,
    }

    impl RequestHandler for Stub {
        async fn handle(&self, request: Request, peer: &PeerContext) -> Reply {
            self.seen
                .lock()
                .unwrap()
                .push((request.kind(), peer.remote));
            match request {
                Request::Noop => Reply::ok(),
                Request::Poll { .. } => Reply::result(PollResult {
                    objects: vec![object()],
                }),
                Request::DataChanged { .. } => Reply::status(
                    ResponseCode::SignatureRequired,
                    "datachanged accepted from configured peers only",
                ),
                Request::IndexObject(_) => {
                    Reply::status(ResponseCode::TemporarilyUnable, "table full")
                }
                Request::Vendor { .. } => Reply::status(ResponseCode::UnknownRequest, "no"),
            }
        }
    }

    const SMALL: Limits = Limits {
        max_line: 1024,
        max_message: 4096,
        max_header: 1024,
        max_parts: 16,
    };

    /// Serves the stub at `/cip` through [`crate::front::http_server::serve`] (which sets the remote
    /// address) on a free port.
    async fn server(limits: Limits) -> (SocketAddr, Arc<Stub>, CancellationToken, TaskTracker) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stub = Arc::new(Stub::default());
        let app = routes_with(stub.clone(), limits, "/cip");
        let (token, tracker) = (CancellationToken::new(), TaskTracker::new());
        let http_limits = crate::front::http_server::HttpLimits {
            max_connections: 8,
            idle_timeout: Duration::from_secs(10),
        };
        tracker.spawn(crate::front::http_server::serve(
            listener,
            http_limits,
            app,
            token.clone(),
            tracker.clone(),
        ));
        (addr, stub, token, tracker)
    }

    /// Sends raw bytes, returns the whole answer (the request says `Connection: close`).
    async fn raw(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
            .await
            .expect("answer within the bound")
            .unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    fn post(content_type: &str, body: &str) -> Vec<u8> {
        format!(
            "POST /cip HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {content_type}\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    async fn body_of(response: Response) -> Bytes {
        axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn replies_map_to_http_statuses() {
        let l = Limits::default();
        let ok = reply_response(Reply::ok(), &l);
        assert_eq!(ok.status(), StatusCode::NO_CONTENT);
        assert!(body_of(ok).await.is_empty());

        let commented = reply_response(Reply::status(ResponseCode::Ok, "no index of type X"), &l);
        assert_eq!(commented.status(), StatusCode::OK);
        assert_eq!(
            commented.headers()[header::CONTENT_TYPE],
            "application/index.response; code=\"200\""
        );
        assert_eq!(body_of(commented).await, "no index of type X\r\n");

        let result = PollResult {
            objects: vec![object()],
        };
        let wire = result.to_mime().unwrap();
        let polled = reply_response(Reply::result(result.clone()), &l);
        assert_eq!(polled.status(), StatusCode::OK);
        let ct = polled.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(ct.starts_with("multipart/mixed"), "{ct}");
        let body = body_of(polled).await;
        assert!(
            wire.ends_with(&body),
            "the body is the result's, byte for byte"
        );
        let rebuilt = entity_message(
            &HeaderMap::from_iter([(header::CONTENT_TYPE, HeaderValue::from_str(&ct).unwrap())]),
            &body,
        );
        assert_eq!(PollResult::from_mime(&rebuilt, &l).unwrap(), result);

        let busy = reply_response(Reply::status(ResponseCode::TemporarilyUnable, "full"), &l);
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.headers()[header::RETRY_AFTER], "60");
        assert_eq!(body_of(busy).await, "full\r\n");

        let refused = reply_response(
            Reply::status(ResponseCode::SignatureRequired, "who are you?\r\nreally"),
            &l,
        );
        assert_eq!(refused.status(), StatusCode::OK);
        assert_eq!(
            refused.headers()[header::CONTENT_TYPE],
            "application/index.response; code=\"530\""
        );
        assert_eq!(body_of(refused).await, "who are you?  really\r\n");

        // No comment: the RFC text.
        let aborted = reply_response(
            Reply {
                code: ResponseCode::Aborting,
                comment: None,
                result: None,
            },
            &l,
        );
        assert_eq!(
            body_of(aborted).await,
            format!("{}\r\n", ResponseCode::Aborting.text())
        );

        // A result over the message limit is not sent: 400, so 503.
        let tight = Limits {
            max_message: 100,
            ..l
        };
        let big = reply_response(Reply::result(result), &tight);
        assert_eq!(big.status(), StatusCode::SERVICE_UNAVAILABLE);
        let text = String::from_utf8(body_of(big).await.to_vec()).unwrap();
        assert!(text.starts_with("cannot send result"), "{text}");
    }

    #[tokio::test]
    async fn noop_is_204_and_other_methods_405() {
        let (addr, stub, token, tracker) = server(SMALL).await;
        let answer = raw(addr, &post("application/index.cmd.noop", "")).await;
        assert!(answer.starts_with("HTTP/1.1 204 "), "{answer}");
        let (kind, remote) = stub.seen.lock().unwrap()[0];
        assert_eq!(kind, "noop");
        assert_eq!(
            remote.ip(),
            std::net::IpAddr::V4(Ipv4Addr::LOCALHOST),
            "the remote address reaches the handler"
        );
        let get = raw(
            addr,
            b"GET /cip HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(get.starts_with("HTTP/1.1 405 "), "{get}");
        assert!(get.to_ascii_lowercase().contains("allow: post"), "{get}");
        token.cancel();
        tracker.close();
        tracker.wait().await;
    }

    #[tokio::test]
    async fn bad_bodies_get_the_stream_codes() {
        let (addr, stub, token, tracker) = server(SMALL).await;
        let not_cip = raw(addr, &post("text/plain", "hello")).await;
        assert!(not_cip.starts_with("HTTP/1.1 200 "), "{not_cip}");
        assert!(not_cip.contains("code=\"501\""), "{not_cip}");
        assert!(
            not_cip.contains("text/plain is not a cip request"),
            "{not_cip}"
        );
        let no_dsi = raw(
            addr,
            &post("application/index.cmd.poll; type=HARVEST-SOIF-1", ""),
        )
        .await;
        assert!(no_dsi.contains("code=\"502\""), "{no_dsi}");
        assert!(
            no_dsi.contains("required parameter dsi is missing"),
            "{no_dsi}"
        );
        let qp = raw(
            addr,
            b"POST /cip HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
              Content-Type: application/index.cmd.poll; type=HARVEST-SOIF-1; dsi=1.2\r\n\
              Content-Transfer-Encoding: quoted-printable\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert!(qp.contains("code=\"500\""), "{qp}");
        let v2 = raw(
            addr,
            b"POST /cip HTTP/1.1\r\nHost: x\r\nConnection: close\r\nCIP-Version: 2\r\n\
              Content-Type: application/index.cmd.noop\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert!(v2.contains("code=\"500\""), "{v2}");
        assert!(v2.contains("CIP version 2 not supported"), "{v2}");
        let gzip = raw(
            addr,
            b"POST /cip HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Encoding: gzip\r\n\
              Content-Type: application/index.cmd.noop\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert!(gzip.starts_with("HTTP/1.1 415 "), "{gzip}");
        assert!(
            stub.seen.lock().unwrap().is_empty(),
            "nothing malformed reaches the handler"
        );
        token.cancel();
        tracker.close();
        tracker.wait().await;
    }

    #[tokio::test]
    async fn too_large_bodies_are_413() {
        let (addr, stub, token, tracker) = server(SMALL).await;
        let big = "x".repeat(SMALL.max_message + 1);
        let declared = raw(addr, &post("application/index.cmd.noop", &big)).await;
        assert!(declared.starts_with("HTTP/1.1 413 "), "{declared}");
        assert!(
            declared.contains("exceeds the limit of 4096 bytes"),
            "{declared}"
        );
        // Chunked, so only counting while reading finds out.
        let chunked = format!(
            "POST /cip HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
             Content-Type: application/index.cmd.noop\r\nTransfer-Encoding: chunked\r\n\r\n\
             {:x}\r\n{big}\r\n0\r\n\r\n",
            big.len()
        );
        let chunked = raw(addr, chunked.as_bytes()).await;
        assert!(chunked.starts_with("HTTP/1.1 413 "), "{chunked}");
        // At the limit is fine.
        let fits = raw(
            addr,
            &post("application/index.cmd.noop", &"x".repeat(SMALL.max_message)),
        )
        .await;
        assert!(fits.starts_with("HTTP/1.1 204 "), "{fits}");
        assert_eq!(stub.seen.lock().unwrap().len(), 1);
        token.cancel();
        tracker.close();
        tracker.wait().await;
    }

    fn client_for(url: &str, config: &TransportConfig) -> CipHttpClient {
        let web = crate::model::config::HttpClientConfig::default()
            .client(None, None)
            .unwrap();
        CipHttpClient::new(url, web, config).unwrap()
    }

    #[tokio::test]
    async fn the_client_reads_every_kind_of_answer() {
        let (addr, _stub, token, tracker) = server(Limits::default()).await;
        let config = TransportConfig::default();
        let mut client = client_for(&format!("http://{addr}/cip"), &config);
        let noop = client.request(&Request::Noop).await.unwrap();
        assert_eq!((noop.code, noop.result), (ResponseCode::Ok, None));
        let dsi = Dsi::new("1.2.3").unwrap();
        let poll = Request::Poll {
            index_type: IndexType::harvest_soif(),
            dsi: dsi.clone(),
            params: vec![("poller-dsi".into(), "1.2.4".into())],
            body: Bytes::new(),
        };
        // Same connection, kept alive.
        let polled = client.request(&poll).await.unwrap();
        assert_eq!(polled.code, ResponseCode::OkOutputFollows);
        assert_eq!(polled.result.unwrap().objects, vec![object()]);
        let changed = client
            .request(&Request::DataChanged {
                index_type: IndexType::harvest_soif(),
                dsi,
                body: Bytes::new(),
            })
            .await
            .unwrap();
        assert_eq!(changed.code, ResponseCode::SignatureRequired);
        assert_eq!(
            changed.comment,
            "datachanged accepted from configured peers only"
        );
        let pushed = client
            .request(&Request::IndexObject(object()))
            .await
            .unwrap();
        assert_eq!(
            (pushed.code, pushed.comment.as_str()),
            (ResponseCode::TemporarilyUnable, "table full")
        );

        // A path with no CIP endpoint is an HTTP error, not a CIP code.
        let mut lost = client_for(&format!("http://{addr}/nope"), &config);
        let err = lost.request(&Request::Noop).await.unwrap_err();
        assert!(
            matches!(
                err,
                HttpError::Status {
                    status: StatusCode::NOT_FOUND,
                    ..
                }
            ),
            "{err}"
        );
        // A request over the limit is not sent.
        let small = TransportConfig {
            limits: SMALL,
            ..config
        };
        let mut client = client_for(&format!("http://{addr}/cip"), &small);
        let mut huge = object();
        huge.payload = Bytes::from(vec![b'a'; 8000]);
        let err = client
            .request(&Request::IndexObject(huge))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                HttpError::TooLarge {
                    what: "request",
                    ..
                }
            ),
            "{err}"
        );
        token.cancel();
        tracker.close();
        tracker.wait().await;
    }

    #[test]
    fn urls() {
        let u = CipUrl::parse("http://[::1]:7080/cip?x=1").unwrap();
        assert_eq!(
            (
                u.host.as_str(),
                u.port,
                u.authority.as_str(),
                u.path.as_str()
            ),
            ("::1", 7080, "[::1]:7080", "/cip?x=1")
        );
        let u = CipUrl::parse("http://hub.example").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/"));
        let u = CipUrl::parse("https://hub.example/cip").unwrap();
        assert_eq!((u.port, u.path.as_str()), (443, "/cip"));
        for bad in ["ftp://x/", "/cip", "http://u@h/", "nonsense"] {
            assert!(CipUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
