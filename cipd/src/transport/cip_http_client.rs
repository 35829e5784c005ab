//! CIP over HTTP (RFC 2653 §2.3), the sender's side: [`CipHttpClient`] POSTs a request to a
//! peer's CIP URL and reads the HTTP answer back as a CIP reply. The receiver is the route
//! in `front::cip_http`; how CIP codes map to HTTP statuses is written there and in
//! PROTOCOL.md ("CIP over HTTP").

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use bytes::{BufMut, Bytes, BytesMut};
use cip_proto::cip::mime::Entity;
use cip_proto::cip::{
    IndexResponse, Limits, MessageError, MimeError, PollResult, Request, ResponseCode,
};
use tracing::debug;

use super::{ClientReply, Phase, TransportConfig};
use crate::model::url::CipUrl;
use crate::sys::http::{FetchError, FetchLimits, HttpClient as WebClient};

/// The media type of CIP responses (RFC 2652 §2.2).
pub(crate) const RESPONSE_TYPE: &str = "application/index.response";

/// `Content-Transfer-Encoding`, which HTTP does not define but a CIP entity may carry.
pub(crate) const TRANSFER_ENCODING: HeaderName =
    HeaderName::from_static("content-transfer-encoding");

/// The CIP message an HTTP entity stands for: its `Content-Type` and
/// `Content-Transfer-Encoding` as MIME header fields, a blank line, then the body. HTTP
/// header values hold no CR or LF, so nothing can be smuggled into the header section.
pub(crate) fn entity_message(headers: &HeaderMap, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + 256);
    for name in [header::CONTENT_TYPE, TRANSFER_ENCODING] {
        if let Some(value) = headers.get(&name) {
            out.put_slice(name.as_str().as_bytes());
            out.put_slice(b": ");
            out.put_slice(value.as_bytes());
            out.put_slice(b"\r\n");
        }
    }
    out.put_slice(b"\r\n");
    out.put_slice(body);
    out.freeze()
}

/// Why an exchange over HTTP failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The URL is not one we can POST to.
    #[error("bad cip url: {0}")]
    BadUrl(String),
    /// The TCP connection could not be opened.
    #[error("cannot connect to {url}: {message}")]
    Connect {
        /// The URL.
        url: String,
        /// The cause.
        message: String,
    },
    /// The answer was refused while it arrived (by the caller's watch: a hint over its
    /// memory budget).
    #[error("result refused while it arrived: {0}")]
    Refused(String),
    /// HTTP itself failed (connection closed, malformed answer).
    #[error("{url}: http error: {message}")]
    Http {
        /// The URL.
        url: String,
        /// The cause.
        message: String,
    },
    /// A deadline passed.
    #[error("{url}: timed out during {phase}")]
    Timeout {
        /// The URL.
        url: String,
        /// Where.
        phase: Phase,
    },
    /// An HTTP status that carries no CIP answer (404, 405, 500, ...).
    #[error("{url}: the server answered HTTP {status}: {body}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: StatusCode,
        /// The start of the body, for the log.
        body: String,
    },
    /// A request or an answer over the message limit.
    #[error("the {what} exceeds the message limit of {limit} bytes")]
    TooLarge {
        /// `request` or `answer`.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// The request cannot be written as MIME.
    #[error("cannot encode request: {0}")]
    Encode(#[from] MimeError),
    /// The answer is not a CIP response or result.
    #[error("bad answer: {0}")]
    Answer(#[from] MessageError),
}

/// A sender-CIP's client for one peer's CIP URL (`http://` or `https://`). Requests go one
/// at a time over the shared [`WebClient`], which keeps the connection alive and reuses it.
#[derive(Debug)]
pub struct CipHttpClient {
    url: String,
    client: WebClient,
    config: TransportConfig,
}

impl CipHttpClient {
    /// A client for `url` over `client` (built with the peer's TLS settings); nothing is
    /// sent until the first request.
    ///
    /// # Errors
    /// [`HttpError::BadUrl`].
    pub fn new(url: &str, client: WebClient, config: &TransportConfig) -> Result<Self, HttpError> {
        CipUrl::parse(url).map_err(HttpError::BadUrl)?;
        Ok(Self {
            url: url.to_owned(),
            client,
            config: config.clone(),
        })
    }

    /// POSTs `request` and reads the answer, within `config.transfer_timeout`: `204` and
    /// index.response bodies give their code and comment; a `200` with a multipart (or a
    /// bare index object, digest A4) is a `201` with its result; a `503` without an
    /// index.response is CIP 400. Answers over `limits.max_message` bytes are refused.
    ///
    /// # Errors
    /// [`HttpError`]: I/O, timeout, a request over the limits, an HTTP status that carries
    /// no CIP answer, or a poll result that does not parse.
    pub async fn request(&mut self, request: &Request) -> Result<ClientReply, HttpError> {
        self.request_watched(request, None).await
    }

    /// [`Self::request`], showing `watch` the answer's body so far (from its first byte)
    /// each time more arrives: its error refuses the answer before the rest is read
    /// ([`HttpError::Refused`]). A poller refuses a hint over its memory budget so.
    ///
    /// # Errors
    /// As [`Self::request`], and [`HttpError::Refused`].
    pub async fn request_watched(
        &mut self,
        request: &Request,
        watch: Option<&mut crate::sys::http::BodyWatch>,
    ) -> Result<ClientReply, HttpError> {
        let limits = self.config.limits;
        let message = request.to_mime()?;
        let entity = Entity::parse(&message, &limits)?;
        if entity.body.len() > limits.max_message {
            return Err(HttpError::TooLarge {
                what: "request",
                limit: limits.max_message,
            });
        }
        let mut headers = HeaderMap::new();
        for (name, value) in entity.headers.iter() {
            if name.eq_ignore_ascii_case("mime-version") {
                continue;
            }
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_bytes(value.as_bytes()),
            ) else {
                return Err(HttpError::Http {
                    url: self.url.clone(),
                    message: format!("header {name:?} cannot be sent over HTTP"),
                });
            };
            headers.append(name, value);
        }
        let fetch = FetchLimits {
            timeout: self.config.transfer_timeout,
            max_bytes: limits.max_message as u64,
        };
        let answer = self
            .client
            .post_watched(&self.url, headers, entity.body, fetch, watch)
            .await
            .map_err(|e| self.fetch_error(e))?;
        interpret(
            &self.url,
            answer.status,
            &answer.headers,
            &answer.body,
            request,
            &limits,
        )
    }

    fn fetch_error(&self, e: FetchError) -> HttpError {
        let url = self.url.clone();
        match e {
            FetchError::Connect { message, .. } => HttpError::Connect { url, message },
            FetchError::Timeout { .. } => HttpError::Timeout {
                url,
                phase: Phase::Transfer,
            },
            FetchError::TooLarge { .. } => HttpError::TooLarge {
                what: "answer",
                limit: self.config.limits.max_message,
            },
            FetchError::BadUrl { reason, .. } => HttpError::BadUrl(reason),
            FetchError::Refused { reason, .. } => HttpError::Refused(reason),
            other => HttpError::Http {
                url,
                message: other.to_string(),
            },
        }
    }
}

/// The CIP reply an HTTP answer stands for (the inverse of `reply_response` in `front::cip_http`).
fn interpret(
    url: &str,
    status: StatusCode,
    headers: &HeaderMap,
    body: &Bytes,
    request: &Request,
    limits: &Limits,
) -> Result<ClientReply, HttpError> {
    let has_type = headers.contains_key(header::CONTENT_TYPE);
    if status == StatusCode::NO_CONTENT
        || (status == StatusCode::OK && body.is_empty() && !has_type)
    {
        return Ok(ClientReply {
            code: ResponseCode::Ok,
            comment: ResponseCode::Ok.text().to_owned(),
            result: None,
            explanation: None,
        });
    }
    let message = entity_message(headers, body);
    let entity = Entity::parse(&message, limits).map_err(MessageError::from)?;
    let media_type = entity
        .headers
        .content_type()
        .map_err(MessageError::from)?
        .map(|ct| ct.mime_type().to_owned());
    match media_type.as_deref() {
        Some(RESPONSE_TYPE) => {
            // Whatever the HTTP status (200, 413, 503): the index.response says what CIP
            // made of the request.
            let response = IndexResponse::from_entity(&entity)?;
            Ok(ClientReply {
                code: response.code,
                comment: response.comment,
                result: None,
                explanation: None,
            })
        }
        Some(t)
            if status == StatusCode::OK
                && (t.starts_with("multipart/") || t.starts_with("application/index.obj.")) =>
        {
            let result = match PollResult::from_mime(&message, limits) {
                Ok(r) => Some(r),
                Err(e) if matches!(request, Request::Poll { .. }) => return Err(e.into()),
                Err(e) => {
                    // Digest A9: output after a datachanged is tolerated, not required.
                    debug!(error = %e, kind = request.kind(), "dropping unparsable output");
                    None
                }
            };
            // The `201`'s comment travels in a header of its own (its version, for `have`).
            let comment = headers
                .get("cip-comment")
                .and_then(|v| v.to_str().ok())
                .map_or_else(
                    || ResponseCode::OkOutputFollows.text().to_owned(),
                    str::to_owned,
                );
            Ok(ClientReply {
                code: ResponseCode::OkOutputFollows,
                comment,
                result,
                explanation: None,
            })
        }
        _ if status == StatusCode::SERVICE_UNAVAILABLE => Ok(ClientReply {
            code: ResponseCode::TemporarilyUnable,
            comment: format!("HTTP 503: {}", snippet(body)),
            result: None,
            explanation: None,
        }),
        _ => Err(HttpError::Status {
            url: url.to_owned(),
            status,
            body: snippet(body),
        }),
    }
}

/// The start of a body as one line of text, for logs and errors.
fn snippet(body: &[u8]) -> String {
    let head = &body[..body.len().min(200)];
    String::from_utf8_lossy(head)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned()
}
