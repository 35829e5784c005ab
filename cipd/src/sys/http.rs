//! The one HTTP client: every request the daemon and `cipctl` make (Hina-Di feeds, RDM pulls
//! and submissions, CIP over HTTP, `cipctl query` and `rdm`) goes through [`HttpClient`].
//!
//! It is reqwest (hyper underneath) with rustls on the `ring` provider, configured once:
//! https trusting the system's roots plus a mesh CA (see [`crate::sys::tls::web_client_config`]),
//! gzip and deflate bodies decoded, proxies from the environment (`HTTP_PROXY`, `HTTPS_PROXY`,
//! `ALL_PROXY`, `NO_PROXY`) or set, connections kept alive and reused, and a connect timeout
//! that is split across a name's addresses (a dead first address cannot use up the fetch).
//! This module adds what a pull needs on top: a whole-request deadline, a body limit that
//! counts *decoded* bytes (a gzip bomb stops at the limit), a bounded number of redirects of
//! which none may lead from https to plain http, and errors that name the URL.

use std::error::Error as _;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::StatusCode;
/// The header types requests and answers carry.
pub use reqwest::header;
use reqwest::header::{HeaderMap, HeaderValue};

/// Most redirects followed by default.
pub const DEFAULT_MAX_REDIRECTS: usize = 5;
/// Default connect timeout (split across a host name's addresses).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where requests go through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ProxySetting {
    /// `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` and `NO_PROXY` (and their lower-case forms),
    /// as curl reads them.
    #[default]
    Environment,
    /// Straight to every server.
    Direct,
    /// Every request through this proxy (`http://host:port`), but for the hosts `NO_PROXY`
    /// names.
    Url(String),
}

/// How a client is built.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// The `User-Agent` header.
    pub user_agent: String,
    /// Connect timeout, split across a host name's addresses.
    pub connect_timeout: Duration,
    /// Most redirects one request follows.
    pub max_redirects: usize,
    /// Proxies.
    pub proxy: ProxySetting,
    /// TLS for `https://` URLs.
    pub tls: rustls::ClientConfig,
    /// Fixed addresses for host names, instead of asking the resolver (as curl's
    /// `--resolve`); a port of 0 keeps the URL's.
    pub resolve: Vec<(String, Vec<std::net::SocketAddr>)>,
    /// Longest wait for any one read of an answer (a stalled peer fails within it, however
    /// long the whole request may take); `None`: only the request's timeout. TCP keepalive
    /// is on for every connection (reqwest's: probes after 15 s idle).
    pub read_timeout: Option<Duration>,
}

/// Sees a body's bytes so far, from its first, each time more arrive; an error refuses it.
pub type BodyWatch = dyn FnMut(&[u8]) -> Result<(), String> + Send;

/// Bounds on one request.
#[derive(Debug, Clone, Copy)]
pub struct FetchLimits {
    /// The whole request: connecting, redirects and reading the body.
    pub timeout: Duration,
    /// Largest body accepted, counted after gzip or deflate decoding.
    pub max_bytes: u64,
}

/// What a conditional `GET` brought back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// `304 Not Modified`: the copy we have is current.
    NotModified,
    /// `200 OK`.
    Body {
        /// The body, decoded.
        bytes: Bytes,
        /// Its `Last-Modified`, for the next `If-Modified-Since`.
        last_modified: Option<String>,
        /// Its `Content-Type`.
        content_type: Option<String>,
    },
}

/// A whole answer, whatever its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// The URL that answered (after redirects).
    pub url: String,
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// The server's `Date`.
    pub date: Option<String>,
    /// Every header.
    pub headers: HeaderMap,
    /// The body, decoded.
    pub body: Bytes,
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// Not an `http://` or `https://` URL with a host.
    #[error("{url:?}: {reason}")]
    BadUrl {
        /// The URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The connection (TCP, TLS or the proxy's tunnel) could not be opened.
    #[error("{url}: cannot connect: {message}")]
    Connect {
        /// The URL.
        url: String,
        /// The cause, with its causes.
        message: String,
    },
    /// Talking to the server failed.
    #[error("{url}: {message}")]
    Transport {
        /// The URL.
        url: String,
        /// The cause, with its causes.
        message: String,
    },
    /// A status other than the ones the caller takes.
    #[error("{url}: the server answered {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: StatusCode,
    },
    /// The caller's watch refused the body while it arrived ([`HttpClient::post_watched`]).
    #[error("{url}: refused while it arrived: {reason}")]
    Refused {
        /// The URL.
        url: String,
        /// The watch's reason.
        reason: String,
    },
    /// The (decoded) body is larger than allowed.
    #[error("{url}: the body is larger than {limit} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The limit.
        limit: u64,
    },
    /// The request took longer than allowed.
    #[error("{url}: no complete answer within {}", humantime::format_duration(*.limit))]
    Timeout {
        /// The URL.
        url: String,
        /// The limit.
        limit: Duration,
    },
    /// More redirects than allowed.
    #[error("{url}: more than {limit} redirects")]
    Redirects {
        /// The URL.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// A redirect from `https://` to plain `http://`.
    #[error("{url}: refused a redirect from https to plain http ({to})")]
    InsecureRedirect {
        /// The URL.
        url: String,
        /// Where the redirect pointed.
        to: String,
    },
}

/// A client that cannot be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct BuildError(String);

/// Redirect refusals, told apart from other errors when a request fails.
#[derive(Debug, thiserror::Error)]
enum RedirectRefusal {
    #[error("more than {0} redirects")]
    TooMany(usize),
    #[error("redirect from https to plain http ({0})")]
    Downgrade(String),
}

/// The HTTP client. Cheap to clone: clones share one connection pool.
#[derive(Debug, Clone)]
pub struct HttpClient {
    inner: std::sync::Arc<Lazy>,
    max_redirects: usize,
}

/// The reqwest client, built at its first request: most nodes never make one, and a built
/// client costs kilobytes (pools, connectors, TLS) in every node of a process.
struct Lazy {
    settings: std::sync::Mutex<Option<ClientSettings>>,
    built: std::sync::OnceLock<Result<reqwest::Client, String>>,
}

impl std::fmt::Debug for Lazy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lazy")
            .field("built", &self.built.get().is_some())
            .finish_non_exhaustive()
    }
}

impl Lazy {
    /// The client, built now if it was not (a failure is kept, and told at each request).
    fn client(&self) -> Result<&reqwest::Client, &str> {
        self.built
            .get_or_init(|| match crate::sys::lock(&self.settings).take() {
                Some(settings) => build(settings).map_err(|e| e.0),
                None => Err("the HTTP client's settings were lost".to_owned()),
            })
            .as_ref()
            .map_err(String::as_str)
    }
}

/// The reqwest client `settings` describe.
fn build(settings: ClientSettings) -> Result<reqwest::Client, BuildError> {
    let max = settings.max_redirects;
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > max {
            return attempt.error(RedirectRefusal::TooMany(max));
        }
        let downgrade = attempt.url().scheme() == "http"
            && attempt
                .previous()
                .last()
                .is_some_and(|u| u.scheme() == "https");
        if downgrade {
            let to = attempt.url().to_string();
            return attempt.error(RedirectRefusal::Downgrade(to));
        }
        attempt.follow()
    });
    let mut tls = settings.tls;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut builder = reqwest::Client::builder()
        .user_agent(settings.user_agent)
        .connect_timeout(settings.connect_timeout)
        .redirect(policy)
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(60))
        .tls_backend_preconfigured(tls);
    if let Some(t) = settings.read_timeout {
        builder = builder.read_timeout(t);
    }
    for (name, addrs) in &settings.resolve {
        builder = builder.resolve_to_addrs(name, addrs);
    }
    builder = match settings.proxy {
        ProxySetting::Environment => builder,
        ProxySetting::Direct => builder.no_proxy(),
        ProxySetting::Url(u) => {
            let proxy = reqwest::Proxy::all(&u)
                .map_err(|e| BuildError(format!("proxy {u:?}: {e}")))?
                .no_proxy(reqwest::NoProxy::from_env());
            builder.proxy(proxy)
        }
    };
    builder.build().map_err(|e| BuildError(chain(&e)))
}

impl HttpClient {
    /// Builds a client.
    ///
    /// # Errors
    /// [`BuildError`] when a proxy URL is not one.
    pub fn new(settings: ClientSettings) -> Result<Self, BuildError> {
        // What can be wrong with the settings is told now; the client is built at its
        // first request.
        if let ProxySetting::Url(u) = &settings.proxy {
            reqwest::Proxy::all(u).map_err(|e| BuildError(format!("proxy {u:?}: {e}")))?;
        }
        Ok(Self {
            max_redirects: settings.max_redirects,
            inner: std::sync::Arc::new(Lazy {
                settings: std::sync::Mutex::new(Some(settings)),
                built: std::sync::OnceLock::new(),
            }),
        })
    }

    /// `GET url`, with `If-Modified-Since` when given: `200` gives the body, `304`
    /// [`Fetched::NotModified`], anything else [`FetchError::Status`].
    ///
    /// # Errors
    /// See [`FetchError`].
    pub async fn get(
        &self,
        url: &str,
        if_modified_since: Option<&str>,
        limits: FetchLimits,
    ) -> Result<Fetched, FetchError> {
        let mut headers = HeaderMap::new();
        if let Some(ims) = if_modified_since
            && let Ok(v) = HeaderValue::from_str(ims)
        {
            headers.insert(header::IF_MODIFIED_SINCE, v);
        }
        let answer = self
            .send(reqwest::Method::GET, url, headers, None, limits, None)
            .await?;
        match answer.status {
            StatusCode::NOT_MODIFIED => Ok(Fetched::NotModified),
            StatusCode::OK => Ok(Fetched::Body {
                last_modified: text(&answer.headers, header::LAST_MODIFIED),
                content_type: answer.content_type,
                bytes: answer.body,
            }),
            status => Err(FetchError::Status {
                url: answer.url,
                status,
            }),
        }
    }

    /// `GET url` with `headers`; any status is returned.
    ///
    /// # Errors
    /// Transport failures, redirects refused, a body over the limit, the timeout.
    pub async fn get_any(
        &self,
        url: &str,
        headers: HeaderMap,
        limits: FetchLimits,
    ) -> Result<Answer, FetchError> {
        self.send(reqwest::Method::GET, url, headers, None, limits, None)
            .await
    }

    /// `POST url` with `body` and `headers` (the `Content-Type` among them); any status is
    /// returned (callers read error bodies too).
    ///
    /// # Errors
    /// Transport failures, redirects refused, a body over the limit, the timeout.
    pub async fn post(
        &self,
        url: &str,
        headers: HeaderMap,
        body: Bytes,
        limits: FetchLimits,
    ) -> Result<Answer, FetchError> {
        self.post_watched(url, headers, body, limits, None).await
    }

    /// [`HttpClient::post`], showing `watch` the body's bytes so far (from its first) each
    /// time more arrive; its error ends the read ([`FetchError::Refused`]).
    ///
    /// # Errors
    /// As [`HttpClient::post`], and [`FetchError::Refused`].
    pub async fn post_watched(
        &self,
        url: &str,
        headers: HeaderMap,
        body: Bytes,
        limits: FetchLimits,
        watch: Option<&mut BodyWatch>,
    ) -> Result<Answer, FetchError> {
        self.send(
            reqwest::Method::POST,
            url,
            headers,
            Some(body),
            limits,
            watch,
        )
        .await
    }

    async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        headers: HeaderMap,
        body: Option<Bytes>,
        limits: FetchLimits,
        watch: Option<&mut BodyWatch>,
    ) -> Result<Answer, FetchError> {
        let parsed = check_url(url)?;
        let client = self.inner.client().map_err(|message| FetchError::Connect {
            url: url.to_owned(),
            message: format!("no HTTP client: {message}"),
        })?;
        let mut request = client.request(method, parsed).headers(headers);
        if let Some(body) = body {
            request = request.body(body);
        }
        let exchange = async {
            let response = request.send().await.map_err(|e| self.error(url, &e))?;
            read(url, response, limits.max_bytes, self, watch).await
        };
        match tokio::time::timeout(limits.timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::Timeout {
                url: url.to_owned(),
                limit: limits.timeout,
            }),
        }
    }

    fn error(&self, url: &str, e: &reqwest::Error) -> FetchError {
        let mut source = e.source();
        while let Some(s) = source {
            if let Some(r) = s.downcast_ref::<RedirectRefusal>() {
                return match r {
                    RedirectRefusal::TooMany(_) => FetchError::Redirects {
                        url: url.to_owned(),
                        limit: self.max_redirects,
                    },
                    RedirectRefusal::Downgrade(to) => FetchError::InsecureRedirect {
                        url: url.to_owned(),
                        to: to.clone(),
                    },
                };
            }
            source = s.source();
        }
        // reqwest's own message repeats the URL; its causes say what happened.
        let message = match e.source() {
            Some(cause) if e.is_request() || e.is_connect() || e.is_body() => chain(cause),
            _ => chain(e),
        };
        if e.is_connect() {
            FetchError::Connect {
                url: url.to_owned(),
                message,
            }
        } else {
            FetchError::Transport {
                url: url.to_owned(),
                message,
            }
        }
    }
}

/// Checks that `url` is an `http://` or `https://` URL with a host.
///
/// # Errors
/// [`FetchError::BadUrl`] saying what is wrong.
pub fn check_url(url: &str) -> Result<reqwest::Url, FetchError> {
    let bad = |reason: String| FetchError::BadUrl {
        url: url.to_owned(),
        reason,
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(format!("not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("only http:// and https:// URLs are fetched".into()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host".into()));
    }
    Ok(parsed)
}

/// Reads the status, headers and whole decoded body, refusing more than `max` bytes.
async fn read(
    url: &str,
    mut response: reqwest::Response,
    max: u64,
    client: &HttpClient,
    mut watch: Option<&mut BodyWatch>,
) -> Result<Answer, FetchError> {
    let too_large = || FetchError::TooLarge {
        url: url.to_owned(),
        limit: max,
    };
    let encoded = response.headers().contains_key(header::CONTENT_ENCODING);
    if !encoded && response.content_length().is_some_and(|n| n > max) {
        return Err(too_large());
    }
    let status = response.status();
    let final_url = response.url().to_string();
    let headers = std::mem::take(response.headers_mut());
    let mut body = BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| client.error(url, &e))? {
        if (body.len() + chunk.len()) as u64 > max {
            return Err(too_large());
        }
        crate::sys::alloc::reserve(&mut body, chunk.len());
        body.extend_from_slice(&chunk);
        if let Some(w) = watch.as_deref_mut() {
            w(&body).map_err(|reason| FetchError::Refused {
                url: url.to_owned(),
                reason,
            })?;
        }
    }
    Ok(Answer {
        status,
        url: final_url,
        content_type: text(&headers, header::CONTENT_TYPE),
        date: text(&headers, header::DATE),
        headers,
        body: body.freeze(),
    })
}

fn text(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// An error and its causes on one line (reqwest's own message is only the outermost).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        source = s.source();
    }
    out
}

/// Decodes a gzip file (a `.di.gz` feed, say) whose decoded size may not exceed `max`
/// bytes; anything else is returned as it is. A body is gzip when it starts with the gzip
/// magic number, whatever its URL or type says.
///
/// # Errors
/// A message saying why: not valid gzip (with the byte offset reached), or larger than
/// `max` once decoded.
pub fn gunzip_file(bytes: Bytes, max: u64) -> Result<Bytes, String> {
    use std::io::Read as _;
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    let mut decoder = flate2::read::MultiGzDecoder::new(&bytes[..]);
    let mut out = Vec::new();
    let mut limited = (&mut decoder).take(max.saturating_add(1));
    if let Err(e) = limited.read_to_end(&mut out) {
        return Err(format!(
            "not valid gzip: {e} (after {} decoded bytes)",
            out.len()
        ));
    }
    if out.len() as u64 > max {
        return Err(format!("larger than {max} bytes once decoded"));
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests;
