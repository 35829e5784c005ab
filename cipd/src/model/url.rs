//! A peer's CIP-over-HTTP URL ([`CipUrl`]), checked when the configuration is read.

use axum::http::Uri;

/// A peer's CIP URL, `http://host[:port]/path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CipUrl {
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port (default 80).
    pub port: u16,
    /// `host[:port]` as written, for the `Host` header.
    pub authority: String,
    /// Path and query, for the request line.
    pub path: String,
}

impl CipUrl {
    /// Checks and splits a URL.
    ///
    /// # Errors
    /// A message saying what is wrong: not a URL, not `http://` (TLS is the stream
    /// transport's), no host, or user information.
    pub fn parse(url: &str) -> Result<Self, String> {
        let uri: Uri = url.parse().map_err(|_| format!("{url:?} is not a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(format!(
                    "{url:?}: https is not supported; use http://, or the stream transport \
                     for TLS"
                ));
            }
            _ => return Err(format!("{url:?}: expected an http:// URL")),
        }
        let Some(authority) = uri.authority() else {
            return Err(format!("{url:?} has no host"));
        };
        if authority.as_str().contains('@') {
            return Err(format!("{url:?}: user information is not supported"));
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if host.is_empty() {
            return Err(format!("{url:?} has no host"));
        }
        Ok(Self {
            host,
            port: authority.port_u16().unwrap_or(80),
            authority: authority.as_str().to_owned(),
            path: uri.path_and_query().map_or("/", |p| p.as_str()).to_owned(),
        })
    }
}
