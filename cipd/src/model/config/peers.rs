//! `[[peer]]`: the mesh neighbours, their roles, transports, TLS and trust.

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use cip_proto::Dsi;
use serde::Deserialize;

use super::validate::{OneOrMany, Validator};

/// `[[peer]]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPeer {
    /// Name used in logs, status and admin commands.
    pub name: String,
    /// Host name or address (default for `transport = "http"`: the URL's host).
    #[serde(default)]
    pub host: String,
    /// CIP port (CIP has no default port, RFC 2653 §2.1).
    pub port: Option<u16>,
    /// `stream` (default, RFC 2653 §2.1) or `http` (RFC 2653 §2.3).
    pub transport: Option<String>,
    /// The peer's CIP URL, for `transport = "http"` (`"http://hub.example:7080/cip"`).
    pub url: Option<String>,
    /// The index type we poll it for: `HARVEST-SOIF-1` or `tagged` (default: learned from
    /// its answers, SOIF first).
    pub index_type: Option<String>,
    /// One role or a list: `poll`, `poller`, `push`, `pusher`.
    pub role: Option<OneOrMany>,
    /// The peer's DSI, when known in advance.
    pub dsi: Option<String>,
    /// How often to poll (role `poll`) or push (role `push`).
    pub poll_interval: Option<String>,
    /// TLS for connections we open to this peer.
    pub tls: Option<RawPeerTls>,
    /// The peer's Ed25519 public key(s), `ed25519:<Base64>`.
    pub public_key: Option<OneOrMany>,
    /// What to do with its signatures: `require`, `verify-if-present`, `ignore`.
    pub signatures: Option<String>,
}

/// `[peer.tls]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPeerTls {
    /// PEM CA bundle to verify the peer with.
    pub ca: Option<PathBuf>,
    /// Name expected in the peer's certificate (default: `host`).
    pub server_name: Option<String>,
    /// PEM client certificate chain, for peers that require one.
    pub client_cert: Option<PathBuf>,
    /// PEM client key.
    pub client_key: Option<PathBuf>,
}

/// What we do with a peer. A peer may have several roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PeerRole {
    /// We poll it for its index (it is below us).
    Poll,
    /// It polls us; we tell it with `datachanged` when our index changes.
    Poller,
    /// We push our index to it.
    Push,
    /// It pushes its index to us; we accept the objects.
    Pusher,
}

impl PeerRole {
    /// The spelling used in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Poll => "poll",
            Self::Poller => "poller",
            Self::Push => "push",
            Self::Pusher => "pusher",
        }
    }
}

impl fmt::Display for PeerRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One mesh neighbour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    /// Name.
    pub name: String,
    /// Host name or address.
    pub host: String,
    /// CIP port; `None` for peers we never connect to (role `pusher` alone) and for
    /// `transport = "http"`.
    pub port: Option<u16>,
    /// How we reach the peer.
    pub transport: PeerTransport,
    /// The peer's CIP URL (`transport = "http"`); `None` for the stream transport and for
    /// peers we never connect to.
    pub url: Option<String>,
    /// The index type we poll it for; `None`: learned from its answers.
    pub index_type: Option<crate::model::index_kind::IndexKind>,
    /// Roles, sorted, without duplicates.
    pub roles: Vec<PeerRole>,
    /// The peer's DSI, if configured.
    pub dsi: Option<Dsi>,
    /// Poll/push interval.
    pub poll_interval: Duration,
    /// TLS settings for connections we open.
    pub tls: Option<PeerTlsConfig>,
    /// Its public keys and signature policy.
    pub trust: crate::model::trust::signature::PeerTrust,
}

impl PeerConfig {
    /// True when the peer has role `role`.
    pub fn has_role(&self, role: PeerRole) -> bool {
        self.roles.contains(&role)
    }
}

/// The transport we use towards a peer (RFC 2653 §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeerTransport {
    /// CIP's TCP stream (§2.1) to `host`:`port`, optionally over TLS.
    #[default]
    Stream,
    /// HTTP POSTs to `url` (§2.3): one request per POST, plain `http://`.
    Http,
}

impl PeerTransport {
    /// The spelling used in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stream => "stream",
            Self::Http => "http",
        }
    }
}

/// TLS towards a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTlsConfig {
    /// CA bundle the peer's certificate must chain to.
    pub ca: PathBuf,
    /// Name to verify.
    pub server_name: String,
    /// Client certificate chain.
    pub client_cert: Option<PathBuf>,
    /// Client key.
    pub client_key: Option<PathBuf>,
}

/// Default poll interval (RFC 2654 suggests a week for tagged indexes; a referral mesh wants
/// fresher hints, and `datachanged` makes most polls immediate anyway).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(15 * 60);

impl Validator<'_> {
    pub(super) fn peers(&mut self, raw: Vec<RawPeer>) -> Vec<PeerConfig> {
        let mut names = HashSet::new();
        let mut out = Vec::new();
        for (i, p) in raw.into_iter().enumerate() {
            let key = format!("peer[{i}]");
            if p.name.trim().is_empty() {
                self.err(format!("{key}.name"), "must not be empty");
            } else if !names.insert(p.name.clone()) {
                self.err(
                    format!("{key}.name"),
                    format!("{:?} is used by an earlier peer", p.name),
                );
            }
            let mut roles = Vec::new();
            match p.role {
                None => self.err(
                    format!("{key}.role"),
                    "is required: \"poll\", \"poller\", \"push\" or \"pusher\"",
                ),
                Some(r) => {
                    for r in r.into_vec() {
                        let role = match r.as_str() {
                            "poll" => PeerRole::Poll,
                            "poller" => PeerRole::Poller,
                            "push" => PeerRole::Push,
                            "pusher" => PeerRole::Pusher,
                            other => {
                                self.err(
                                    format!("{key}.role"),
                                    format!("unknown role {other:?}; expected \"poll\", \"poller\", \"push\" or \"pusher\""),
                                );
                                continue;
                            }
                        };
                        roles.push(role);
                    }
                }
            }
            roles.sort();
            roles.dedup();
            let connects = roles
                .iter()
                .any(|r| matches!(r, PeerRole::Poll | PeerRole::Poller | PeerRole::Push));
            let transport = match p.transport.as_deref() {
                None | Some("stream") => PeerTransport::Stream,
                Some("http") => PeerTransport::Http,
                Some(other) => {
                    self.err(
                        format!("{key}.transport"),
                        format!("unknown transport {other:?}; expected \"stream\" or \"http\""),
                    );
                    PeerTransport::Stream
                }
            };
            let mut host = p.host.clone();
            match transport {
                PeerTransport::Stream => {
                    match p.port {
                        Some(0) => self.err(format!("{key}.port"), "must be 1-65535"),
                        None if connects => self.err(
                            format!("{key}.port"),
                            "is required: CIP has no default port (RFC 2653 §2.1)",
                        ),
                        _ => {}
                    }
                    if p.url.is_some() {
                        self.err(
                            format!("{key}.url"),
                            "is only used with transport = \"http\"",
                        );
                    }
                }
                PeerTransport::Http => {
                    if p.port.is_some() {
                        self.err(
                            format!("{key}.port"),
                            "is not used with transport = \"http\": the url names the port",
                        );
                    }
                    if let Some(t) = &p.tls {
                        if p.url.as_deref().is_some_and(|u| !u.starts_with("https://")) {
                            self.err(
                                format!("{key}.tls"),
                                "applies to https:// URLs only; write the url as https://",
                            );
                        }
                        if t.server_name.is_some() {
                            self.err(
                                format!("{key}.tls.server_name"),
                                "is not used with transport = \"http\": the url's host is the \
                                 name checked against the certificate",
                            );
                        }
                    }
                    match p.url.as_deref().map(crate::model::url::CipUrl::parse) {
                        Some(Ok(u)) if host.trim().is_empty() => host = u.host,
                        Some(Ok(_)) => {}
                        Some(Err(m)) => self.err(format!("{key}.url"), m),
                        None if connects => self.err(
                            format!("{key}.url"),
                            "is required with transport = \"http\": the peer's CIP URL \
                             (e.g. \"http://hub.example:7080/cip\")",
                        ),
                        None => {}
                    }
                }
            }
            if host.trim().is_empty() {
                self.err(format!("{key}.host"), "must not be empty");
            }
            let dsi = match p.dsi.as_deref().map(Dsi::new) {
                Some(Ok(d)) => Some(d),
                Some(Err(e)) => {
                    self.err(format!("{key}.dsi"), e.to_string());
                    None
                }
                None => None,
            };
            let poll_interval = self.duration(
                &format!("{key}.poll_interval"),
                p.poll_interval,
                DEFAULT_POLL_INTERVAL,
            );
            let tls = p.tls.map(|t| {
                if t.client_cert.is_some() != t.client_key.is_some() {
                    self.err(
                        format!("{key}.tls"),
                        "client_cert and client_key go together",
                    );
                }
                if t.ca.is_none() {
                    self.err(
                        format!("{key}.tls.ca"),
                        "is required: the CA bundle that verifies the peer",
                    );
                }
                PeerTlsConfig {
                    ca: t.ca.map(|c| self.path(c)).unwrap_or_default(),
                    server_name: t.server_name.unwrap_or_else(|| host.clone()),
                    client_cert: t.client_cert.map(|c| self.path(c)),
                    client_key: t.client_key.map(|c| self.path(c)),
                }
            });
            let trust = self.peer_trust(&key, p.public_key, p.signatures);
            let index_type = match p.index_type.as_deref() {
                None => None,
                Some(t) => match crate::model::index_kind::IndexKind::from_name(t) {
                    Some(k) => Some(k),
                    None => {
                        self.err(
                            format!("{key}.index_type"),
                            format!("{t:?}: expected \"HARVEST-SOIF-1\" or \"tagged\""),
                        );
                        None
                    }
                },
            };
            out.push(PeerConfig {
                name: p.name,
                host,
                port: p.port,
                index_type,
                transport,
                url: p.url.filter(|_| transport == PeerTransport::Http),
                roles,
                dsi,
                poll_interval,
                tls,
                trust,
            });
        }
        out
    }
}
