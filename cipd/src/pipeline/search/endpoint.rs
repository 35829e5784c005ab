//! Which base-URI of a referral the search asks, and how: the [`Endpoint`] chosen for a
//! target under the node's target rules, and its key in the infrastructure cache.

use super::SearchHost;
use super::plan::Target;

/// A target's chosen endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Endpoint {
    /// A cipd node: its base-URI.
    Http(String),
    /// A Whois++ server.
    Whois { host: String, port: u16 },
}

impl Endpoint {
    /// The infrastructure cache's key.
    pub(super) fn key(&self) -> String {
        match self {
            Self::Http(u) => origin(u).unwrap_or_else(|| u.clone()),
            Self::Whois { host, port } => format!("whoispp://{host}:{port}"),
        }
    }

    pub(super) fn uri(&self) -> String {
        match self {
            Self::Http(u) => u.clone(),
            Self::Whois { host, port } => format!("whoispp://{host}:{port}/"),
        }
    }
}

/// `scheme://host:port` of an http(s) URL.
pub(super) fn origin(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    Some(format!(
        "{}://{}:{}",
        u.scheme(),
        u.host_str()?,
        u.port_or_known_default()?
    ))
}

/// Picks the first base-URI of `uris` that the search speaks and may contact.
///
/// # Errors
/// Why none may be used (the first refusal's reason).
pub(super) fn choose_endpoint<H: SearchHost>(
    host: &H,
    uris: &[String],
) -> Result<Endpoint, String> {
    let mut first_err = None;
    for raw in uris {
        let parsed = match reqwest::Url::parse(raw) {
            Ok(u) => u,
            Err(e) => {
                first_err.get_or_insert_with(|| format!("{raw}: {e}"));
                continue;
            }
        };
        let scheme = parsed.scheme();
        let port = match (scheme, parsed.port()) {
            (_, Some(p)) => p,
            ("http", None) => 80,
            ("https", None) => 443,
            ("whoispp", None) => 63,
            _ => {
                first_err.get_or_insert_with(|| {
                    format!("{raw}: the search speaks http, https and whoispp only")
                });
                continue;
            }
        };
        let Some(h) = parsed.host_str() else {
            first_err.get_or_insert_with(|| format!("{raw}: no host"));
            continue;
        };
        let h = h.trim_start_matches('[').trim_end_matches(']').to_owned();
        if let Err(why) = host.may_contact(&h, port) {
            first_err.get_or_insert_with(|| format!("{raw}: {why}"));
            continue;
        }
        return Ok(match scheme {
            "whoispp" => Endpoint::Whois { host: h, port },
            _ => Endpoint::Http(raw.clone()),
        });
    }
    Err(first_err.unwrap_or_else(|| "no base-uri".to_owned()))
}

/// A target with the endpoint it is asked at.
#[derive(Debug, Clone)]
pub(super) struct Queued {
    pub(super) target: Target,
    pub(super) endpoint: Endpoint,
}
