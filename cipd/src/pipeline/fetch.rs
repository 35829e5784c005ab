//! A small HTTP/1.1 client for feeds this node pulls: `GET` for Hina-Di URLs, `POST` for RDM
//! requests.
//!
//! hyper does the protocol; this adds what a pull needs: a whole-fetch timeout, a body size
//! cap (checked while reading, so a huge reply never sits in memory), `If-Modified-Since`,
//! and a few redirects. Plain `http://` only.

use std::time::Duration;

use axum::http::{Request, StatusCode, Uri, header};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper_util::rt::TokioIo;

/// Most redirects followed.
pub const MAX_REDIRECTS: usize = 5;

/// Bounds on one fetch.
#[derive(Debug, Clone, Copy)]
pub struct FetchLimits {
    /// The whole fetch, redirects included.
    pub timeout: Duration,
    /// Largest body accepted.
    pub max_bytes: u64,
}

/// What a fetch brought back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// `304 Not Modified`: the copy we have is current.
    NotModified,
    /// `200 OK`.
    Body {
        /// The body.
        bytes: Bytes,
        /// Its `Last-Modified`, for the next `If-Modified-Since`.
        last_modified: Option<String>,
        /// Its `Content-Type`.
        content_type: Option<String>,
    },
}

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// Not an `http://` URL with a host.
    #[error("{url:?}: {reason}")]
    BadUrl {
        /// The URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Connecting or talking to the server failed.
    #[error("{url}: {message}")]
    Transport {
        /// The URL.
        url: String,
        /// The cause.
        message: String,
    },
    /// A status other than 200 or 304.
    #[error("{url}: the server answered {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: StatusCode,
    },
    /// The body is larger than allowed.
    #[error("{url}: the body is larger than {limit} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The limit.
        limit: u64,
    },
    /// The fetch took longer than allowed.
    #[error("{url}: no complete answer within {}", humantime::format_duration(*.limit))]
    Timeout {
        /// The URL.
        url: String,
        /// The limit.
        limit: Duration,
    },
    /// More redirects than [`MAX_REDIRECTS`].
    #[error("{url}: more than {MAX_REDIRECTS} redirects")]
    Redirects {
        /// The URL.
        url: String,
    },
}

/// `GET url`, with `If-Modified-Since` when given, following up to [`MAX_REDIRECTS`]
/// redirects, within `limits`.
///
/// # Errors
/// See [`FetchError`].
pub async fn get(
    url: &str,
    if_modified_since: Option<&str>,
    user_agent: &str,
    limits: FetchLimits,
) -> Result<Fetched, FetchError> {
    match tokio::time::timeout(
        limits.timeout,
        follow(url, if_modified_since, user_agent, limits),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(FetchError::Timeout {
            url: url.to_owned(),
            limit: limits.timeout,
        }),
    }
}

async fn follow(
    url: &str,
    if_modified_since: Option<&str>,
    user_agent: &str,
    limits: FetchLimits,
) -> Result<Fetched, FetchError> {
    let mut current = url.to_owned();
    for _ in 0..=MAX_REDIRECTS {
        match once(&current, if_modified_since, user_agent, limits).await? {
            Step::Done(f) => return Ok(f),
            Step::Redirect(next) => current = next,
        }
    }
    Err(FetchError::Redirects {
        url: url.to_owned(),
    })
}

enum Step {
    Done(Fetched),
    Redirect(String),
}

fn parse(url: &str) -> Result<(Uri, String, u16), FetchError> {
    let bad = |reason: &str| FetchError::BadUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad("only http:// URLs are fetched"));
    }
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad("no host"))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(80);
    Ok((uri, host, port))
}

/// One request on a fresh connection: the status, headers and whole body (at most
/// `max_bytes`).
async fn send(
    url: &str,
    request: axum::http::request::Builder,
    body: Bytes,
    max_bytes: u64,
) -> Result<(StatusCode, axum::http::HeaderMap, Bytes), FetchError> {
    let (uri, host, port) = parse(url)?;
    let transport = |e: &dyn std::fmt::Display| FetchError::Transport {
        url: url.to_owned(),
        message: e.to_string(),
    };
    let stream = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| transport(&format!("cannot connect: {e}")))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| transport(&e))?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = uri.authority().map_or(host.clone(), |a| a.to_string());
    let req = request
        .uri(path)
        .header(header::HOST, authority)
        .body(http_body_util::Full::new(body))
        .map_err(|e| transport(&e))?;
    let result = async {
        let resp = sender.send_request(req).await.map_err(|e| transport(&e))?;
        let (parts, body) = resp.into_parts();
        let body = read_body(url, body, max_bytes).await?;
        Ok((parts.status, parts.headers, body))
    }
    .await;
    driver.abort();
    result
}

fn text_header(headers: &axum::http::HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn once(
    url: &str,
    if_modified_since: Option<&str>,
    user_agent: &str,
    limits: FetchLimits,
) -> Result<Step, FetchError> {
    let mut req = Request::get("/")
        .header(header::USER_AGENT, user_agent)
        .header(header::ACCEPT_ENCODING, "identity");
    if let Some(ims) = if_modified_since {
        req = req.header(header::IF_MODIFIED_SINCE, ims);
    }
    let (status, headers, bytes) = send(url, req, Bytes::new(), limits.max_bytes).await?;
    if status == StatusCode::NOT_MODIFIED {
        return Ok(Step::Done(Fetched::NotModified));
    }
    if status.is_redirection()
        && let Some(location) = text_header(&headers, header::LOCATION)
    {
        // A relative Location resolves against this server.
        let next = if location.starts_with('/') {
            let (uri, _, _) = parse(url)?;
            format!(
                "http://{}{location}",
                uri.authority().map_or("", |a| a.as_str())
            )
        } else {
            location
        };
        return Ok(Step::Redirect(next));
    }
    if status != StatusCode::OK {
        return Err(FetchError::Status {
            url: url.to_owned(),
            status,
        });
    }
    Ok(Step::Done(Fetched::Body {
        bytes,
        last_modified: text_header(&headers, header::LAST_MODIFIED),
        content_type: text_header(&headers, header::CONTENT_TYPE),
    }))
}

/// A whole answer to a `POST`, whatever its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    /// The HTTP status.
    pub status: StatusCode,
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// The server's `Date`.
    pub date: Option<String>,
    /// Every header.
    pub headers: axum::http::HeaderMap,
    /// The body.
    pub body: Bytes,
}

/// `POST url` with `body` of `content_type`, within `limits`; any status is returned (the
/// caller reads error bodies too).
///
/// # Errors
/// Transport failures, a body over the limit, the timeout.
pub async fn post(
    url: &str,
    content_type: &str,
    body: Bytes,
    user_agent: &str,
    limits: FetchLimits,
) -> Result<Posted, FetchError> {
    let req = Request::post("/")
        .header(header::USER_AGENT, user_agent)
        .header(header::CONTENT_TYPE, content_type);
    match tokio::time::timeout(limits.timeout, send(url, req, body, limits.max_bytes)).await {
        Ok(Ok((status, headers, body))) => Ok(Posted {
            status,
            content_type: text_header(&headers, header::CONTENT_TYPE),
            date: text_header(&headers, header::DATE),
            headers,
            body,
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(FetchError::Timeout {
            url: url.to_owned(),
            limit: limits.timeout,
        }),
    }
}

/// Reads a whole body, refusing more than `max` bytes.
async fn read_body(url: &str, body: hyper::body::Incoming, max: u64) -> Result<Bytes, FetchError> {
    let cap = usize::try_from(max).unwrap_or(usize::MAX);
    Ok(Limited::new(body, cap)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                FetchError::TooLarge {
                    url: url.to_owned(),
                    limit: max,
                }
            } else {
                FetchError::Transport {
                    url: url.to_owned(),
                    message: e.to_string(),
                }
            }
        })?
        .to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::http::HeaderMap;
    use axum::response::IntoResponse;
    use axum::routing::get as route_get;

    async fn server() -> String {
        let app = Router::new()
            .route(
                "/feed",
                route_get(|headers: HeaderMap| async move {
                    if headers.get(header::IF_MODIFIED_SINCE).is_some() {
                        return StatusCode::NOT_MODIFIED.into_response();
                    }
                    (
                        [(header::LAST_MODIFIED, "Sun, 06 Nov 1994 08:49:37 GMT")],
                        "hello",
                    )
                        .into_response()
                }),
            )
            .route(
                "/moved",
                route_get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/feed")]) }),
            )
            .route(
                "/loop",
                route_get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/loop")]) }),
            )
            .route("/big", route_get(|| async { "x".repeat(10_000) }))
            .route("/gone", route_get(|| async { StatusCode::NOT_FOUND }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    const LIMITS: FetchLimits = FetchLimits {
        timeout: Duration::from_secs(10),
        max_bytes: 1000,
    };

    #[tokio::test]
    async fn fetches_revalidates_redirects_and_bounds() {
        let base = server().await;
        let got = get(&format!("{base}/feed"), None, "t", LIMITS)
            .await
            .unwrap();
        assert_eq!(
            got,
            Fetched::Body {
                bytes: Bytes::from_static(b"hello"),
                last_modified: Some("Sun, 06 Nov 1994 08:49:37 GMT".into()),
                content_type: Some("text/plain; charset=utf-8".into()),
            }
        );
        let again = get(
            &format!("{base}/feed"),
            Some("Sun, 06 Nov 1994 08:49:37 GMT"),
            "t",
            LIMITS,
        )
        .await
        .unwrap();
        assert_eq!(again, Fetched::NotModified);
        let moved = get(&format!("{base}/moved"), None, "t", LIMITS)
            .await
            .unwrap();
        assert!(matches!(moved, Fetched::Body { .. }));
        let looped = get(&format!("{base}/loop"), None, "t", LIMITS)
            .await
            .unwrap_err();
        assert!(matches!(looped, FetchError::Redirects { .. }), "{looped}");
        let big = get(&format!("{base}/big"), None, "t", LIMITS)
            .await
            .unwrap_err();
        assert!(
            matches!(big, FetchError::TooLarge { limit: 1000, .. }),
            "{big}"
        );
        let gone = get(&format!("{base}/gone"), None, "t", LIMITS)
            .await
            .unwrap_err();
        assert!(gone.to_string().contains("404"), "{gone}");
        let bad = get("https://x.example/", None, "t", LIMITS)
            .await
            .unwrap_err();
        assert!(matches!(bad, FetchError::BadUrl { .. }), "{bad}");
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _hold = tokio::spawn(async move {
            let (_s, _) = listener.accept().await.unwrap();
            std::future::pending::<()>().await;
        });
        let limits = FetchLimits {
            timeout: Duration::from_millis(200),
            ..LIMITS
        };
        let err = get(&format!("http://{addr}/"), None, "t", limits)
            .await
            .unwrap_err();
        assert!(matches!(err, FetchError::Timeout { .. }), "{err}");
    }
}
