//! `[http_client]`: the one HTTP client the node fetches with (Hina-Di feeds, RDM pulls,
//! CIP-over-HTTP peers): extra trust for https, a client certificate, proxies, timeouts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::validate::Validator;
use crate::sys::http::{
    ClientSettings, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_REDIRECTS, HttpClient, ProxySetting,
};

/// `[http_client]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHttpClient {
    /// CA bundle (PEM) trusted for https besides the system's roots (a mesh's own CA).
    pub ca: Option<PathBuf>,
    /// Client certificate chain (PEM), shown to https servers that ask for one.
    pub client_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    pub client_key: Option<PathBuf>,
    /// Connect timeout, split across a host name's addresses (default `"10s"`).
    pub connect_timeout: Option<String>,
    /// Most redirects one request follows (default 5; 0 follows none).
    pub max_redirects: Option<usize>,
    /// `"env"` (default: `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`), `"none"`,
    /// or a proxy URL (`"http://proxy.example:3128"`; `NO_PROXY` still applies).
    pub proxy: Option<String>,
}

/// How the node's HTTP client is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpClientConfig {
    /// Extra trusted CAs.
    pub ca: Option<PathBuf>,
    /// Client certificate and key.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Most redirects followed.
    pub max_redirects: usize,
    /// Proxies.
    pub proxy: ProxySetting,
}

/// The agent name this node gives in `User-Agent` (HTTP) and in the Hina-Di files it
/// serves: `cipd/VERSION (CIP mesh; Hina-Di/2.2)`.
pub fn user_agent() -> String {
    format!(
        "cipd/{} (CIP mesh; {})",
        env!("CARGO_PKG_VERSION"),
        cip_proto::hinadi::VERSION
    )
}

impl Default for HttpClientConfig {
    fn default() -> Self {
        Self {
            ca: None,
            client_cert: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_redirects: DEFAULT_MAX_REDIRECTS,
            proxy: ProxySetting::Environment,
        }
    }
}

impl HttpClientConfig {
    /// The client these settings describe; `ca` and `client_cert` stand in for the
    /// section's own when given (a CIP-over-HTTP peer's `[peer.tls]`).
    ///
    /// # Errors
    /// A message naming the file or setting at fault.
    pub fn client(
        &self,
        ca: Option<&Path>,
        client_cert: Option<(&Path, &Path)>,
    ) -> Result<HttpClient, String> {
        self.client_reading(ca, client_cert, None)
    }

    /// As [`HttpClientConfig::client`], each read of an answer bounded by `read_timeout`
    /// (mesh exchanges: `limits.stall_timeout`).
    ///
    /// # Errors
    /// As [`HttpClientConfig::client`].
    pub fn client_reading(
        &self,
        ca: Option<&Path>,
        client_cert: Option<(&Path, &Path)>,
        read_timeout: Option<Duration>,
    ) -> Result<HttpClient, String> {
        let ca = ca.or(self.ca.as_deref());
        let pair = client_cert.or(self
            .client_cert
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path())));
        let tls = crate::sys::tls::web_client_config(ca, pair).map_err(|e| e.to_string())?;
        HttpClient::new(ClientSettings {
            user_agent: user_agent(),
            connect_timeout: self.connect_timeout,
            max_redirects: self.max_redirects,
            proxy: self.proxy.clone(),
            tls,
            resolve: Vec::new(),
            read_timeout,
        })
        .map_err(|e| e.to_string())
    }
}

impl Validator<'_> {
    pub(super) fn http_client(&mut self, raw: RawHttpClient) -> HttpClientConfig {
        let d = HttpClientConfig::default();
        let client_cert = match (raw.client_cert, raw.client_key) {
            (Some(c), Some(k)) => Some((self.path(c), self.path(k))),
            (None, None) => None,
            _ => {
                self.err("http_client", "client_cert and client_key go together");
                None
            }
        };
        let proxy = match raw.proxy.as_deref().map(str::trim) {
            None | Some("env") => ProxySetting::Environment,
            Some("none") => ProxySetting::Direct,
            Some(u) => match crate::sys::http::check_url(u) {
                Ok(parsed) if parsed.scheme() == "http" => ProxySetting::Url(u.to_owned()),
                _ => {
                    self.err(
                        "http_client.proxy",
                        format!(
                            "{u:?} is not \"env\", \"none\" or an http:// proxy URL \
                             (e.g. \"http://proxy.example:3128\")"
                        ),
                    );
                    ProxySetting::Environment
                }
            },
        };
        HttpClientConfig {
            ca: raw.ca.map(|p| self.path(p)),
            client_cert,
            connect_timeout: self.duration(
                "http_client.connect_timeout",
                raw.connect_timeout,
                d.connect_timeout,
            ),
            max_redirects: raw.max_redirects.unwrap_or(d.max_redirects),
            proxy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<HttpClientConfig, Vec<String>> {
        let raw: RawHttpClient = toml::from_str(text).unwrap();
        let mut v = Validator {
            problems: Vec::new(),
            base: Path::new("/etc/cipd"),
        };
        let c = v.http_client(raw);
        if v.problems.is_empty() {
            Ok(c)
        } else {
            Err(v.problems.iter().map(|p| p.to_string()).collect())
        }
    }

    #[test]
    fn defaults_paths_and_proxies() {
        assert_eq!(check("").unwrap(), HttpClientConfig::default());
        let c = check(
            "ca = \"mesh-ca.pem\"\nclient_cert = \"c.pem\"\nclient_key = \"c.key\"\n\
             connect_timeout = \"3s\"\nmax_redirects = 0\nproxy = \"http://p.example:3128\"",
        )
        .unwrap();
        assert_eq!(c.ca.as_deref(), Some(Path::new("/etc/cipd/mesh-ca.pem")));
        assert_eq!(
            c.client_cert,
            Some(("/etc/cipd/c.pem".into(), "/etc/cipd/c.key".into()))
        );
        assert_eq!(c.connect_timeout, Duration::from_secs(3));
        assert_eq!(c.max_redirects, 0);
        assert_eq!(c.proxy, ProxySetting::Url("http://p.example:3128".into()));
        assert_eq!(
            check("proxy = \"none\"").unwrap().proxy,
            ProxySetting::Direct
        );
    }

    #[test]
    fn mistakes_are_named() {
        let e = check("client_cert = \"c.pem\"").unwrap_err();
        assert!(e[0].contains("go together"), "{e:?}");
        let e = check("proxy = \"socks5://x\"").unwrap_err();
        assert!(e[0].contains("http_client.proxy"), "{e:?}");
        let e = check("connect_timeout = \"soon\"").unwrap_err();
        assert!(e[0].contains("connect_timeout"), "{e:?}");
    }
}
