//! The console's token guard and the security headers of every console answer.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query as QueryParams, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::front::api::ApiError;
use crate::node::Node;

/// The Content-Security-Policy of every console answer: this origin's script, style and
/// fetches only, nothing inline, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
     base-uri 'none'; form-action 'self'";

/// What the token check needs.
#[derive(Clone)]
pub(super) struct Guard {
    pub(super) node: Arc<Node>,
    pub(super) page_path: Arc<str>,
}

/// Refuses requests without the configured token (read per request: a reload that sets or
/// changes it takes effect at once).
pub(super) async fn require_token(
    State(guard): State<Guard>,
    req: Request,
    next: Next,
) -> Response {
    let config = guard.node.config();
    let Some(token) = config.console.token.as_deref() else {
        return next.run(req).await;
    };
    let bearer = bearer(req.headers()).is_some_and(|t| same_secret(t, token));
    let query = req.uri().path() == &*guard.page_path
        && QueryParams::<HashMap<String, String>>::try_from_uri(req.uri())
            .ok()
            .and_then(|q| q.0.get("token").map(|t| same_secret(t, token)))
            .unwrap_or(false);
    if bearer || query {
        return next.run(req).await;
    }
    let mut response = ApiError {
        status: StatusCode::UNAUTHORIZED,
        kind: "unauthorized",
        message: "this console wants its token: send Authorization: Bearer <token> \
                  (or open the page with ?token=<token>)"
            .into(),
    }
    .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"cipd console\""),
    );
    response
}

pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Compares without stopping at the first difference, so timing tells nothing of the
/// token's bytes (its length is no secret: it is at least 16).
pub(super) fn same_secret(given: &str, secret: &str) -> bool {
    let (a, b) = (given.as_bytes(), secret.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Adds the security headers to every console answer, errors included.
pub(super) async fn security_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}
