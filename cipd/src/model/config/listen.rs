//! `[listen]`: the CIP, Whois++, HTTP and HTTPS listeners, the admin socket, and the path
//! of CIP over HTTP.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::validate::Validator;

/// `[listen]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListen {
    /// Plain CIP stream listeners (`"127.0.0.1:7070"`; port 0 picks a free port).
    #[serde(default)]
    pub cip: Vec<String>,
    /// CIP stream listeners with implicit TLS (spec A20).
    #[serde(default)]
    pub cip_tls: Vec<RawTlsListener>,
    /// HTTP front-end listeners (queries).
    #[serde(default)]
    pub http: Vec<String>,
    /// HTTPS front-end listeners: the same routes over TLS, optionally requiring client
    /// certificates.
    #[serde(default)]
    pub https: Vec<RawTlsListener>,
    /// Path of the admin socket (Unix domain socket).
    pub admin_socket: Option<PathBuf>,
    /// Path of CIP over HTTP (RFC 2653 §2.3) on the HTTP listeners (`"/cip"`); off when
    /// absent.
    pub cip_http: Option<String>,
    /// Whois++ listeners (RFC 1835), which also speak CIP to a client whose first line is
    /// `# CIP-Version: 3`, as ROADS' `wppd` does.
    #[serde(default)]
    pub whoispp: Vec<String>,
}

/// `[[listen.cip_tls]]` and `[[listen.https]]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTlsListener {
    /// Address to bind.
    pub addr: String,
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM private key.
    pub key: PathBuf,
    /// PEM CA bundle: when set, clients must present a certificate it signed.
    pub client_ca: Option<PathBuf>,
}

/// Listeners.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListenConfig {
    /// Plain CIP stream listeners.
    pub cip: Vec<SocketAddr>,
    /// TLS CIP stream listeners.
    pub cip_tls: Vec<TlsListenerConfig>,
    /// HTTP listeners.
    pub http: Vec<SocketAddr>,
    /// HTTPS listeners (the HTTP routes over TLS).
    pub https: Vec<TlsListenerConfig>,
    /// Admin socket path.
    pub admin_socket: Option<PathBuf>,
    /// Path of CIP over HTTP on the HTTP listeners; `None` when off.
    pub cip_http: Option<String>,
    /// Whois++ listeners (also CIP for clients that ask for it first).
    pub whoispp: Vec<SocketAddr>,
}

/// One TLS listener (CIP or HTTPS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsListenerConfig {
    /// Address to bind.
    pub addr: SocketAddr,
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
    /// CA for client certificates, if required.
    pub client_ca: Option<PathBuf>,
}

/// A path axum can route as it is: `/`, then letters, digits and `-._~/`.
fn is_route_path(p: &str) -> bool {
    p.starts_with('/')
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~/".contains(&b))
}

impl Validator<'_> {
    pub(super) fn listen(&mut self, raw: RawListen) -> ListenConfig {
        let cip = raw
            .cip
            .iter()
            .enumerate()
            .filter_map(|(i, a)| self.addr(format!("listen.cip[{i}]"), a))
            .collect();
        let http = raw
            .http
            .iter()
            .enumerate()
            .filter_map(|(i, a)| self.addr(format!("listen.http[{i}]"), a))
            .collect();
        let whoispp = raw
            .whoispp
            .iter()
            .enumerate()
            .filter_map(|(i, a)| self.addr(format!("listen.whoispp[{i}]"), a))
            .collect();
        let cip_tls = self.tls_listeners("cip_tls", raw.cip_tls);
        let https = self.tls_listeners("https", raw.https);
        let admin_socket = raw.admin_socket.map(|p| self.path(p));
        let cip_http = match raw.cip_http {
            Some(p) if is_route_path(&p) => Some(p),
            Some(p) => {
                self.err(
                    "listen.cip_http",
                    format!(
                        "{p:?}: expected a path such as \"/cip\" (a '/', then letters, digits, \
                         '-', '.', '_', '~', '/')"
                    ),
                );
                None
            }
            None => None,
        };
        ListenConfig {
            cip,
            cip_tls,
            http,
            https,
            admin_socket,
            cip_http,
            whoispp,
        }
    }

    fn tls_listeners(&mut self, kind: &str, raw: Vec<RawTlsListener>) -> Vec<TlsListenerConfig> {
        raw.into_iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let addr = self.addr(format!("listen.{kind}[{i}].addr"), &l.addr)?;
                Some(TlsListenerConfig {
                    addr,
                    cert: self.path(l.cert),
                    key: self.path(l.key),
                    client_ca: l.client_ca.map(|p| self.path(p)),
                })
            })
            .collect()
    }

    /// CIP over HTTP needs an HTTP listener, and a path no other route uses.
    /// `others` are the optional routes' paths (Hina-Di, RDM).
    pub(super) fn cip_http_route(&mut self, listen: &ListenConfig, others: &[&Option<String>]) {
        let Some(path) = &listen.cip_http else { return };
        if listen.http.is_empty() && listen.https.is_empty() {
            self.err(
                "listen.cip_http",
                "needs an HTTP listener (listen.http or listen.https) to serve CIP over HTTP on",
            );
        }
        if crate::model::routes::FIXED_ROUTES.contains(&path.as_str())
            || others.iter().any(|o| o.as_ref() == Some(path))
        {
            self.err(
                "listen.cip_http",
                format!("{path:?} is already served by another route; pick another path"),
            );
        }
    }
}
