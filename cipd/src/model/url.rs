//! A peer's CIP-over-HTTP URL ([`CipUrl`]), checked when the configuration is read, and
//! [`percent_encode`] for the query strings the node and `cipctl` send.

use axum::http::Uri;

/// A peer's CIP URL, `http://host[:port]/path` or `https://...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CipUrl {
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port (default 80, or 443 for https).
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
    /// A message saying what is wrong: not a URL, not `http://` or `https://`, no host, or
    /// user information (credentials do not belong in a configuration's URLs).
    pub fn parse(url: &str) -> Result<Self, String> {
        let uri: Uri = url.parse().map_err(|_| format!("{url:?} is not a URL"))?;
        let default_port = match uri.scheme_str() {
            Some("http") => 80,
            Some("https") => 443,
            _ => return Err(format!("{url:?}: expected an http:// or https:// URL")),
        };
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
            port: authority.port_u16().unwrap_or(default_port),
            authority: authority.as_str().to_owned(),
            path: uri.path_and_query().map_or("/", |p| p.as_str()).to_owned(),
        })
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
