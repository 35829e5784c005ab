//! Daemon configuration: the TOML file ([`RawConfig`]) and its validated form ([`Config`]).
//!
//! Parsing is two steps, as in ripgrep's low-level/high-level arguments: serde fills
//! [`RawConfig`] (unknown keys refused everywhere, so a typo is an error and not a silently
//! ignored setting), then [`RawConfig::validate`] checks every value and turns durations,
//! addresses, DSIs and attribute names into typed values. Validation collects *every*
//! problem, each with its key path (`peers[1].port`), so `cipd check-config` can list them all
//! at once. Loading never binds ports or opens sockets; [`Config::check_environment`] adds
//! the file-system checks (`check-config` runs both).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hints::summary::SummaryConfig;
use serde::Deserialize;

mod collection;
mod console;
mod document;
mod export;
mod http_client;
mod index;
mod limits;
mod listen;
mod node;
mod peers;
mod pipeline;
mod search;
mod trust;
mod validate;

pub use crate::sys::telemetry::LogFormat;

pub use collection::{
    CatalogConfig, CollectionConfig, DEFAULT_HINADI_EXPIRES, HinaDiConfig, HinaLocation,
    RawCollection, RawHinaDi, RawRdm, RdmConfig, SourceConfig, Untrusted,
};
pub use console::{ConsoleConfig, RawConsole};
pub use export::{DEFAULT_EXPORT, ExportConfig, RawExport};
pub use http_client::{HttpClientConfig, RawHttpClient, user_agent};
pub use index::{MAX_SUMMARY_THREADS, RawIndex};
pub use limits::{AdminLimits, DEFAULT_SCAN_MAX_OBJECTS, Limits, MAX_REQUEST_LINE, RawLimits};
pub use listen::{ListenConfig, RawListen, RawTlsListener, TlsListenerConfig};
pub use node::{NodeConfig, RawNode};
pub use peers::{
    DEFAULT_POLL_INTERVAL, PeerConfig, PeerRole, PeerTlsConfig, PeerTransport, RawPeer, RawPeerTls,
};
pub use pipeline::{ImportConfig, OutboundConfig};
pub use pipeline::{RawImport, RawOutbound};
pub use search::{RawSearch, SearchConfig, TargetRule, parse_net};
pub use trust::{RawSigning, SigningConfig};
pub use validate::{OneOrMany, Problem};
use validate::{Validator, problem};

/// The configuration file as written: every table and key the file may hold.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// `[node]`: who this node is.
    pub node: RawNode,
    /// `[listen]`: where it listens.
    #[serde(default)]
    pub listen: RawListen,
    /// `data_dir`: where the spool (received hints) lives.
    pub data_dir: Option<PathBuf>,
    /// `[[collection]]`: local collections.
    #[serde(default, rename = "collection")]
    pub collections: Vec<RawCollection>,
    /// `[export]`: what the out-bound hint describes.
    #[serde(default)]
    pub export: RawExport,
    /// `[[peer]]`: mesh neighbours.
    #[serde(default, rename = "peer")]
    pub peers: Vec<RawPeer>,
    /// `[thesaurus]`: query term expansion.
    #[serde(default)]
    pub thesaurus: RawThesaurus,
    /// `[limits]`: sizes, counts and timeouts.
    #[serde(default)]
    pub limits: RawLimits,
    /// `[spool]`: persistence of in-bound hints.
    #[serde(default)]
    pub spool: RawSpool,
    /// `[index]`: how the routing table indexes in-bound hints.
    #[serde(default)]
    pub index: RawIndex,
    /// `[log]`: log format and level.
    #[serde(default)]
    pub log: RawLog,
    /// `[outbound]`: how the out-bound hint is rebuilt.
    #[serde(default)]
    pub outbound: RawOutbound,
    /// `[import]`: how in-bound hints reach the routing table.
    #[serde(default)]
    pub import: RawImport,
    /// `[hinadi]`: how Hina-Di is read, trusted and served.
    #[serde(default)]
    pub hinadi: RawHinaDi,
    /// `[rdm]`: how this node speaks RDM.
    #[serde(default)]
    pub rdm: RawRdm,
    /// `[console]`: the operators' web console on the HTTP listener.
    #[serde(default)]
    pub console: RawConsole,
    /// `[signing]`: the node's key for signing out-bound hints.
    #[serde(default)]
    pub signing: RawSigning,
    /// `[http_client]`: how the node fetches over HTTP and https.
    #[serde(default)]
    pub http_client: RawHttpClient,
    /// `[search]`: the search that chases referrals through the mesh.
    #[serde(default)]
    pub search: RawSearch,
}

/// `[thesaurus]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawThesaurus {
    /// File of synonym lines used to widen queries.
    pub file: Option<PathBuf>,
}

/// `[spool]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpool {
    /// In-bound hints older than this are dropped (table and spool).
    pub ttl: Option<String>,
}

/// `[log]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    /// `text` or `json`.
    pub format: Option<LogFormat>,
    /// An `EnvFilter` directive (`info`, `cipd=debug,info`); `RUST_LOG` overrides it.
    pub level: Option<String>,
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// This node's identity.
    pub node: NodeConfig,
    /// Listeners.
    pub listen: ListenConfig,
    /// Spool directory.
    pub data_dir: PathBuf,
    /// Local collections.
    pub collections: Vec<CollectionConfig>,
    /// The out-bound hint's attributes and thresholds.
    pub export: ExportConfig,
    /// Mesh neighbours.
    pub peers: Vec<PeerConfig>,
    /// Thesaurus file.
    pub thesaurus: Option<PathBuf>,
    /// Limits and timeouts.
    pub limits: Limits,
    /// Time-to-live of in-bound hints.
    pub spool_ttl: Duration,
    /// How the routing table summarizes broad substrings.
    pub index: SummaryConfig,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter directive.
    pub log_level: String,
    /// The out-bound pipeline's timing.
    pub outbound: OutboundConfig,
    /// The import queue's bounds.
    pub import: ImportConfig,
    /// Hina-Di reading, trust and serving.
    pub hinadi: HinaDiConfig,
    /// RDM serving and pulling.
    pub rdm: RdmConfig,
    /// The operators' web console.
    pub console: ConsoleConfig,
    /// The node's signing key and the allowed clock skew of signed hints.
    pub signing: SigningConfig,
    /// The HTTP client's trust, proxies and timeouts.
    pub http_client: HttpClientConfig,
    /// The chasing search's budgets, caches and access rules.
    pub search: SearchConfig,
}

/// Default time-to-live of in-bound hints.
pub const DEFAULT_SPOOL_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Why a configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file was read but is not a valid configuration.
    #[error("{}", Problems(.problems))]
    Invalid {
        /// Every problem found, in file order where known.
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// The problems, for an invalid configuration.
    pub fn problems(&self) -> &[Problem] {
        match self {
            Self::Invalid { problems } => problems,
            Self::Read { .. } => &[],
        }
    }
}

struct Problems<'a>(&'a [Problem]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "{n} problem{} in configuration",
            if n == 1 { "" } else { "s" }
        )?;
        for p in self.0 {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

/// Reads and validates the configuration file at `path`.
///
/// # Errors
/// [`ConfigError::Read`] when the file cannot be read, [`ConfigError::Invalid`] otherwise.
pub fn read_config(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    Config::from_toml_relative(&text, base)
}

impl Config {
    /// Parses and validates a configuration; relative paths stay relative to the current
    /// directory.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] listing every problem.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        Self::from_toml_relative(text, Path::new(""))
    }

    /// As [`Config::from_toml`], resolving relative paths against `base` (the directory of
    /// the configuration file).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] listing every problem.
    pub fn from_toml_relative(text: &str, base: &Path) -> Result<Self, ConfigError> {
        let read = document::read::<RawConfig>(text);
        let Some(raw) = read.raw else {
            return Err(ConfigError::Invalid {
                problems: read.problems,
            });
        };
        let mut problems = read.problems;
        match raw.validate(base) {
            Ok(config) if problems.is_empty() => return Ok(config),
            Ok(_) => {}
            Err(more) => {
                // A key taken out for its type falls back to its default: what the checks
                // then say of it (missing, say) is not news.
                let under = |key: &str, removed: &str| {
                    key == removed
                        || key
                            .strip_prefix(removed)
                            .is_some_and(|rest| rest.starts_with(['.', '[']))
                };
                problems.extend(
                    more.into_iter()
                        .filter(|p| !read.removed.iter().any(|r| under(&p.key, r))),
                );
            }
        }
        document::locate(text, &mut problems);
        Err(ConfigError::Invalid { problems })
    }

    /// Checks what the configuration refers to on this host: collection paths, TLS files,
    /// the thesaurus, and that the data directory exists or can be created. Returns the
    /// problems (empty when all is well); the daemon tolerates a missing collection (it is
    /// reported and retried on reload), so these are separate from validation.
    pub fn check_environment(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        let mut need = |key: String, path: &Path, what: &str| {
            if !path.exists() {
                out.push(problem(
                    key,
                    format!("{what} {} does not exist", path.display()),
                ));
            }
        };
        for (i, c) in self.collections.iter().enumerate() {
            match &c.source {
                SourceConfig::Soif { path, .. }
                | SourceConfig::HinaDi {
                    location: HinaLocation::Path { path, .. },
                    ..
                } => need(format!("collection[{i}].path"), path, "collection"),
                _ => {}
            }
            for (k, f) in [
                ("schema", &c.catalog.schema),
                ("taxonomy", &c.catalog.taxonomy),
            ] {
                if let Some(f) = f {
                    need(format!("collection[{i}].{k}"), f, "file");
                }
            }
        }
        for (kind, listeners) in [
            ("cip_tls", &self.listen.cip_tls),
            ("https", &self.listen.https),
        ] {
            for (i, l) in listeners.iter().enumerate() {
                need(format!("listen.{kind}[{i}].cert"), &l.cert, "certificate");
                need(format!("listen.{kind}[{i}].key"), &l.key, "key");
                if let Some(ca) = &l.client_ca {
                    need(format!("listen.{kind}[{i}].client_ca"), ca, "CA bundle");
                }
            }
        }
        for (i, p) in self.peers.iter().enumerate() {
            if let Some(tls) = &p.tls {
                need(format!("peer[{i}].tls.ca"), &tls.ca, "CA bundle");
                for (k, f) in [
                    ("client_cert", &tls.client_cert),
                    ("client_key", &tls.client_key),
                ] {
                    if let Some(f) = f {
                        need(format!("peer[{i}].tls.{k}"), f, "file");
                    }
                }
            }
        }
        if let Some(ca) = &self.http_client.ca {
            need("http_client.ca".into(), ca, "CA bundle");
        }
        if let Some((cert, key)) = &self.http_client.client_cert {
            need("http_client.client_cert".into(), cert, "file");
            need("http_client.client_key".into(), key, "file");
        }
        if let Some(t) = &self.thesaurus {
            need("thesaurus.file".into(), t, "thesaurus");
        }
        if !self.data_dir.exists() {
            let parent = self.data_dir.parent().filter(|p| !p.as_os_str().is_empty());
            if parent.is_some_and(|p| !p.exists()) {
                out.push(problem(
                    "data_dir".into(),
                    format!("neither {} nor its parent exists", self.data_dir.display()),
                ));
            }
        }
        out
    }

    /// The peer named `name`.
    pub fn peer(&self, name: &str) -> Option<&PeerConfig> {
        self.peers.iter().find(|p| p.name == name)
    }
}

impl RawConfig {
    /// Parses TOML into the raw structure; unknown keys and wrong types are errors that name
    /// their key path and position.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with every syntax error, or every key of a wrong type or
    /// unknown (each is taken out and the rest read again).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let read = document::read::<RawConfig>(text);
        match read.raw {
            Some(raw) if read.problems.is_empty() => Ok(raw),
            _ => Err(ConfigError::Invalid {
                problems: read.problems,
            }),
        }
    }

    /// Checks every value and builds a [`Config`], resolving relative paths against `base`.
    ///
    /// # Errors
    /// Every problem found.
    pub fn validate(self, base: &Path) -> Result<Config, Vec<Problem>> {
        let mut v = Validator {
            problems: Vec::new(),
            base,
        };
        let config = v.config(self);
        if v.problems.is_empty() {
            Ok(config)
        } else {
            Err(v.problems)
        }
    }
}

impl Validator<'_> {
    fn config(&mut self, raw: RawConfig) -> Config {
        let node = self.node(raw.node);
        let listen = self.listen(raw.listen);
        let data_dir = match raw.data_dir {
            Some(d) if !d.as_os_str().is_empty() => self.path(d),
            _ => {
                self.err(
                    "data_dir",
                    "is required: the directory where received hints are kept",
                );
                PathBuf::new()
            }
        };
        let collections = self.collections(raw.collections);
        let export = self.export(raw.export);
        let peers = self.peers(raw.peers);
        let exports = !listen.cip.is_empty()
            || !listen.cip_tls.is_empty()
            || !listen.whoispp.is_empty()
            || peers.iter().any(|p| p.has_role(PeerRole::Push));
        if exports
            && node.base_uris.is_empty()
            && listen.http.is_empty()
            && listen.https.is_empty()
            && listen.whoispp.is_empty()
        {
            // Referrals to this node carry the base-uri of the hint it hands out (RFC 2651
            // section 4); with no HTTP listener to derive one from, the operator must say
            // where clients query it.
            self.err(
                "node.base_uri",
                "is required when the node hands out its hint but has no HTTP listener: \
                 referrals to it need a URI clients can query \
                 (e.g. \"ldap://dir.example.org/o=Example\")",
            );
        }
        let thesaurus = raw.thesaurus.file.map(|f| self.path(f));
        let (polls_given, queue_given) = (
            raw.limits.max_concurrent_polls.is_some(),
            raw.import.queue.is_some(),
        );
        let mut limits = self.limits(raw.limits);
        let spool_ttl = self.duration("spool.ttl", raw.spool.ttl, DEFAULT_SPOOL_TTL);
        let index = self.index(raw.index, limits.default_referrals);
        let outbound = self.outbound(raw.outbound);
        if outbound.max_wait >= limits.stall_timeout {
            // A poller counts the wait for its answer as a stall past its stall_timeout.
            self.err(
                "outbound.max_wait",
                format!(
                    "must be shorter than limits.stall_timeout ({}): pollers give up on an \
                     answer that waits longer",
                    humantime::format_duration(limits.stall_timeout)
                ),
            );
        }
        let mut import = self.import(raw.import);
        pipeline::scale_to_peers(
            &mut limits.max_concurrent_polls,
            polls_given,
            &mut import.queue,
            queue_given,
            peers.iter().filter(|p| p.has_role(PeerRole::Poll)).count(),
        );
        let hinadi = self.hinadi(raw.hinadi);
        let rdm = self.rdm(raw.rdm, &collections);
        self.optional_routes(&hinadi, &rdm);
        self.cip_http_route(&listen, &[&hinadi.serve_path, &rdm.path]);
        let console = self.console(
            raw.console,
            &[
                ("listen.cip_http", &listen.cip_http),
                ("hinadi.path", &hinadi.serve_path),
                ("rdm.path", &rdm.path),
            ],
        );
        let signing = self.signing(raw.signing);
        let http_client = self.http_client(raw.http_client);
        let search = self.search(raw.search);
        let log_level = raw.log.level.unwrap_or_else(|| "info".to_owned());
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log_level) {
            self.err(
                "log.level",
                format!("{log_level:?} is not a log filter ({e})"),
            );
        }
        Config {
            node,
            listen,
            data_dir,
            collections,
            export,
            peers,
            thesaurus,
            limits,
            spool_ttl,
            index,
            log_format: raw.log.format.unwrap_or_default(),
            log_level,
            outbound,
            import,
            hinadi,
            rdm,
            console,
            signing,
            http_client,
            search,
        }
    }
}

/// SOIF parser limits from the configuration.
pub fn soif_limits(config: &Config) -> cip_proto::soif::Limits {
    cip_proto::soif::Limits {
        max_value_size: config.limits.max_value_size,
        max_object_size: config.limits.max_frame_size,
        ..cip_proto::soif::Limits::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hints::hint::AttrSpec;

    const MINIMAL: &str = r#"
data_dir = "/var/lib/cipd"
[node]
dsi = "1.3.6.1.4.1.99999.1"
"#;

    #[test]
    fn minimal_config_gets_defaults() {
        let c = Config::from_toml(MINIMAL).unwrap();
        assert_eq!(c.node.dsi.as_str(), "1.3.6.1.4.1.99999.1");
        assert_eq!(c.limits, Limits::default());
        assert_eq!(c.export.attributes.len(), DEFAULT_EXPORT.len());
        assert_eq!(c.spool_ttl, DEFAULT_SPOOL_TTL);
        assert_eq!(c.log_format, LogFormat::Text);
    }

    #[test]
    fn full_config() {
        let text = r#"
data_dir = "spool"
[node]
dsi = "1.2.3"
base_uri = ["http://a.example/", "ldap://b.example/o=x"]
description = "A test node"
[listen]
cip = ["127.0.0.1:0"]
http = ["[::1]:8080"]
admin_socket = "run/admin.sock"
[[listen.cip_tls]]
addr = "0.0.0.0:7443"
cert = "cert.pem"
key = "key.pem"
[[collection]]
name = "docs"
type = "soif"
path = "docs"
extensions = []
[export]
attributes = ["DOCUMENT:Author", "FILE:Title"]
default_threshold = 2
thresholds = { "FILE:Title" = 5 }
[[peer]]
name = "leaf"
host = "leaf.example"
port = 7070
role = ["poll", "poller"]
poll_interval = "250ms"
tls = { ca = "ca.pem" }
[[peer]]
name = "feeder"
host = "10.0.0.9"
role = "pusher"
[limits]
max_connections = 3
idle_timeout = "2m"
watch_interval = "0s"
[spool]
ttl = "1day"
[log]
format = "json"
level = "cipd=debug,info"
"#;
        let c = Config::from_toml_relative(text, Path::new("/etc/cipd")).unwrap();
        assert_eq!(c.data_dir, Path::new("/etc/cipd/spool"));
        assert_eq!(c.node.base_uris.len(), 2);
        assert_eq!(c.listen.cip_tls[0].cert, Path::new("/etc/cipd/cert.pem"));
        assert_eq!(c.export.thresholds.default_threshold(), 2);
        assert_eq!(
            c.export
                .thresholds
                .for_spec(&AttrSpec::parse("FILE:Title").unwrap()),
            5
        );
        assert_eq!(c.peers[0].roles, vec![PeerRole::Poll, PeerRole::Poller]);
        assert_eq!(c.peers[0].poll_interval, Duration::from_millis(250));
        assert_eq!(c.peers[0].tls.as_ref().unwrap().server_name, "leaf.example");
        assert_eq!(c.peers[1].port, None);
        assert_eq!(c.limits.max_connections, 3);
        assert_eq!(c.limits.idle_timeout, Duration::from_secs(120));
        assert_eq!(c.limits.watch_interval, None);
        assert_eq!(c.spool_ttl, Duration::from_secs(86400));
        assert_eq!(c.log_format, LogFormat::Json);
        assert!(
            matches!(&c.collections[0].source, SourceConfig::Soif { extensions, .. } if extensions.is_empty())
        );
    }

    #[test]
    fn unknown_key_names_its_path_and_line() {
        let text = "data_dir = \"x\"\n[node]\ndsi = \"1.2\"\n[[peer]]\nname = \"a\"\nhost = \"h\"\nprot = 1\n";
        let err = Config::from_toml(text).unwrap_err();
        let p = &err.problems()[0];
        assert!(p.message.contains("unknown field `prot`"), "{p}");
        assert!(p.key.starts_with("peer[0]"), "{p}");
        assert_eq!(p.position.map(|(l, _)| l), Some(7), "{p}");
    }

    #[test]
    fn five_mistakes_give_five_problems_with_their_lines() {
        let text = "data_dir = \"x\"\n\
[node]\n\
dsi = \"1.02.3\"\n\
[listen]\n\
cip = [\"127.0.0.1:0\"]\n\
http = [\"127.0.0.1:0\"]\n\
[limits]\n\
max_connections = -3\n\
[[peer]]\n\
name = \"a\"\n\
host = \"127.0.0.1\"\n\
port = 99999\n\
role = \"pol\"\n\
poll_interval = \"5 fortnights\"\n";
        let err = Config::from_toml(text).unwrap_err();
        let mut lines: Vec<(usize, String)> = err
            .problems()
            .iter()
            .map(|p| (p.position.map_or(0, |(l, _)| l), p.key.clone()))
            .collect();
        lines.sort();
        let keys: Vec<&str> = lines.iter().map(|(_, k)| k.as_str()).collect();
        assert_eq!(
            lines.iter().map(|(l, _)| *l).collect::<Vec<_>>(),
            [3, 8, 12, 13, 14],
            "{keys:?}\n{err}"
        );
        assert_eq!(
            keys,
            [
                "node.dsi",
                "limits.max_connections",
                "peer[0].port",
                "peer[0].role",
                "peer[0].poll_interval"
            ],
            "{err}"
        );
        // An unknown key names the nearest known one.
        let err =
            Config::from_toml("data_dir = \"x\"\n[node]\ndsi = \"1.2\"\ndescriptoin = \"d\"\n")
                .unwrap_err();
        assert!(
            err.problems()[0]
                .message
                .contains("did you mean `description`?"),
            "{err}"
        );
    }

    #[test]
    fn syntax_error_has_a_position() {
        let err = Config::from_toml("[node\ndsi = 1").unwrap_err();
        assert_eq!(err.problems().len(), 1);
        assert_eq!(err.problems()[0].position.map(|(l, _)| l), Some(1));
    }

    #[test]
    fn every_semantic_problem_is_listed() {
        let text = r#"
[node]
dsi = "1.02"
base_uri = "no scheme"
[listen]
cip = ["localhost"]
[[collection]]
name = "a"
type = "hina-di"
[[collection]]
name = "b"
type = "soif"
[export]
attributes = ["Author"]
thresholds = { "X:Y" = 3 }
[[peer]]
name = "p"
host = "h"
role = "poll"
poll_interval = "soon"
[[peer]]
name = "p"
host = ""
port = 0
role = "sideways"
[limits]
max_frame_size = 0
[log]
level = "=="
"#;
        let err = Config::from_toml(text).unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        for k in [
            "node.dsi",
            "node.base_uri[0]",
            "listen.cip[0]",
            "data_dir",
            "collection[0].type",
            "collection[1].path",
            "export.attributes[0]",
            "export.thresholds.\"X:Y\"",
            "peer[0].port",
            "peer[0].poll_interval",
            "peer[1].name",
            "peer[1].host",
            "peer[1].role",
            "peer[1].port",
            "limits.max_frame_size",
            "log.level",
        ] {
            assert!(keys.contains(&k), "missing {k} in {keys:?}");
        }
        let shown = err.to_string();
        assert!(
            shown.starts_with(&format!("{} problems in configuration", keys.len())),
            "{shown}"
        );
    }

    #[test]
    fn environment_check_finds_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "data_dir = {:?}\n[node]\ndsi = \"1\"\nbase_uri = \"http://x.example/\"\n[[collection]]\nname = \"c\"\ntype = \"soif\"\npath = \"nope.soif\"\n",
            dir.path().join("spool")
        );
        let c = Config::from_toml_relative(&text, dir.path()).unwrap();
        let p = c.check_environment();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].key, "collection[0].path");
    }

    #[test]
    fn table_query_and_admin_limits_come_from_the_config() {
        let text = format!(
            "{MINIMAL}[limits]\nmax_table_peers = 5\nmax_hint_entries = 6\n\
             max_hint_value_length = 7\nmax_provenance = 8\nmax_table_attributes = 9\n\
             max_query_terms = 2\nmax_query_length = 100\nmax_admin_connections = 3\n\
             max_admin_request = 512\nadmin_idle_timeout = \"5s\"\n"
        );
        let l = Config::from_toml(&text).unwrap().limits;
        assert_eq!(
            (
                l.table.max_peers,
                l.table.max_entries_per_hint,
                l.table.max_value_len
            ),
            (5, 6, 7)
        );
        assert_eq!((l.table.max_provenance, l.table.max_attributes), (8, 9));
        assert_eq!((l.query.max_terms, l.query.max_len), (2, 100));
        assert_eq!(
            (
                l.admin.max_connections,
                l.admin.max_request,
                l.admin.idle_timeout
            ),
            (3, 512, Duration::from_secs(5))
        );
        let zero = format!("{MINIMAL}[limits]\nmax_query_terms = 0\nmax_table_peers = 0\n");
        let err = Config::from_toml(&zero).unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            ["limits.max_table_peers", "limits.max_query_terms"],
            "{err}"
        );
    }

    #[test]
    fn default_referrals_is_a_page_within_max_referrals() {
        let d = Config::from_toml(MINIMAL).unwrap().limits;
        assert_eq!((d.default_referrals, d.max_referrals), (10, 100));
        let text = format!("{MINIMAL}[limits]\nmax_referrals = 5\n");
        assert_eq!(
            Config::from_toml(&text).unwrap().limits.default_referrals,
            5
        );
        let text = format!("{MINIMAL}[limits]\nmax_referrals = 5\ndefault_referrals = 6\n");
        let err = Config::from_toml(&text).unwrap_err();
        assert!(
            err.to_string().contains("limits.default_referrals")
                && err
                    .to_string()
                    .contains("must not exceed limits.max_referrals (5)"),
            "{err}"
        );
        let text = format!("{MINIMAL}[limits]\nmax_referrals = 50\ndefault_referrals = 20\n");
        assert_eq!(
            Config::from_toml(&text).unwrap().limits.default_referrals,
            20
        );
    }

    #[test]
    fn per_address_connection_limits() {
        let d = Config::from_toml(MINIMAL).unwrap().limits;
        assert_eq!(
            (
                d.max_connections_per_address,
                d.max_http_connections_per_address
            ),
            (64, 256)
        );
        assert_eq!(d.listen_backlog, 4096);
        let text = format!(
            "{MINIMAL}[limits]\nmax_connections_per_address = 3\n\
             max_http_connections_per_address = 4\nlisten_backlog = 5\n"
        );
        let l = Config::from_toml(&text).unwrap().limits;
        assert_eq!(
            (
                l.max_connections_per_address,
                l.max_http_connections_per_address,
                l.listen_backlog
            ),
            (3, 4, 5)
        );
        let zero = format!(
            "{MINIMAL}[limits]\nmax_connections_per_address = 0\n\
             max_http_connections_per_address = 0\nlisten_backlog = 0\n"
        );
        let err = Config::from_toml(&zero).unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "limits.max_connections_per_address",
                "limits.max_http_connections_per_address",
                "limits.listen_backlog"
            ],
            "{err}"
        );
    }

    #[test]
    fn index_section() {
        let c = Config::from_toml(MINIMAL).unwrap();
        assert_eq!(c.index, SummaryConfig::default());
        assert_eq!(c.index.narrow_slots, 16, "a page of 10, 2 more, 4 spare");
        let c = Config::from_toml(&format!(
            "{MINIMAL}[limits]\ndefault_referrals = 20\n[index]\nnarrow_summary_min_values = 32\n\
             narrow_summary_memory_divisor = 3\n"
        ))
        .unwrap();
        assert_eq!(
            (
                c.index.narrow_min_values,
                c.index.narrow_slots,
                c.index.narrow_budget_divisor
            ),
            (32, 26, 3)
        );
        let c = Config::from_toml(&format!(
            "{MINIMAL}[index]\nnarrow_summaries = false\nnarrow_summary_peers = 40\n"
        ))
        .unwrap();
        assert_eq!((c.index.narrow_min_values, c.index.narrow_slots), (0, 40));
        let c = Config::from_toml(&format!(
            "{MINIMAL}[index]\nsummaries = false\nsummary_threads = 3\n\
             summary_memory_divisor = 8\nsummary_max_ngrams = 100\nsummary_work_per_value = 9\n\
             substring_cache_bytes = 0\n"
        ))
        .unwrap();
        assert_eq!(c.index.min_values, usize::MAX);
        assert_eq!(c.index.memo_bytes, 0, "0 turns the substring cache off");
        assert_eq!(c.index.threads, 3);
        assert_eq!(
            (
                c.index.budget_divisor,
                c.index.max_ngrams,
                c.index.max_work_per_value
            ),
            (8, 100, 9)
        );
        for bad in [
            "summary_threads = 0",
            "summary_threads = 65",
            "summaries = 1",
            "summary_memory_divisor = 0",
            "summary_max_ngrams = 0",
            "summary_work_per_value = 0",
            "narrow_summary_min_values = 0",
            "narrow_summary_peers = 0",
            "narrow_summary_memory_divisor = 0",
            "narrow_summaries = \"yes\"",
        ] {
            let err = Config::from_toml(&format!("{MINIMAL}[index]\n{bad}\n")).unwrap_err();
            assert!(err.to_string().contains("index"), "{bad}: {err}");
        }
    }

    #[test]
    fn cip_over_http_listener_and_peers() {
        let c = Config::from_toml(MINIMAL).unwrap();
        assert_eq!(c.listen.cip_http, None, "off by default");
        let text = format!(
            "{MINIMAL}[listen]\nhttp = [\"127.0.0.1:0\"]\ncip_http = \"/cip\"\n\
             [[peer]]\nname = \"hub\"\ntransport = \"http\"\nurl = \"http://hub.example:7080/cip\"\n\
             role = [\"poll\", \"poller\", \"push\"]\n\
             [[peer]]\nname = \"leaf\"\nhost = \"leaf.example\"\nport = 7070\nrole = \"poll\"\n\
             [[peer]]\nname = \"feeder\"\nhost = \"10.0.0.9\"\ntransport = \"http\"\nrole = \"pusher\"\n"
        );
        let c = Config::from_toml(&text).unwrap();
        assert_eq!(c.listen.cip_http.as_deref(), Some("/cip"));
        let hub = &c.peers[0];
        assert_eq!(hub.transport, PeerTransport::Http);
        assert_eq!(hub.url.as_deref(), Some("http://hub.example:7080/cip"));
        assert_eq!(hub.host, "hub.example", "host defaults to the url's");
        assert_eq!(hub.port, None);
        assert_eq!(c.peers[1].transport, PeerTransport::Stream);
        assert_eq!(c.peers[2].url, None, "a pusher needs no url");

        let bad = format!(
            "{MINIMAL}[listen]\ncip_http = \"cip\"\n\
             [[peer]]\nname = \"a\"\ntransport = \"http\"\nrole = \"poll\"\nport = 7070\n\
             tls = {{ ca = \"ca.pem\" }}\n\
             [[peer]]\nname = \"b\"\nhost = \"b.example\"\nport = 1\nurl = \"http://b/\"\nrole = \"poll\"\n\
             [[peer]]\nname = \"c\"\ntransport = \"pigeon\"\nhost = \"c\"\nport = 1\nrole = \"poll\"\n\
             [[peer]]\nname = \"d\"\ntransport = \"http\"\nurl = \"ftp://d.example/cip\"\nrole = \"poll\"\n\
             [[peer]]\nname = \"e\"\ntransport = \"http\"\nurl = \"http://e.example/cip\"\nrole = \"poll\"\n\
             tls = {{ ca = \"ca.pem\" }}\n\
             [[peer]]\nname = \"f\"\ntransport = \"http\"\nurl = \"https://f.example/cip\"\nrole = \"poll\"\n\
             tls = {{ ca = \"ca.pem\", server_name = \"x\" }}\n"
        );
        let err = Config::from_toml(&bad).unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        for k in [
            "listen.cip_http",
            "peer[0].url",
            "peer[0].port",
            "peer[0].host",
            "peer[1].url",
            "peer[2].transport",
            "peer[3].url",
            "peer[4].tls",
            "peer[5].tls.server_name",
        ] {
            assert!(keys.contains(&k), "missing {k} in {keys:?}");
        }
        // No HTTP listener to serve it on, or a path another route has.
        for (listen, why) in [
            ("cip_http = \"/cip\"", "needs an HTTP listener"),
            (
                "http = [\"127.0.0.1:0\"]\ncip_http = \"/hina.di\"",
                "already served",
            ),
            (
                "http = [\"127.0.0.1:0\"]\ncip_http = \"/metrics\"",
                "already served",
            ),
            (
                "http = [\"127.0.0.1:0\"]\ncip_http = \"/x\"\n[rdm]\npath = \"/x\"",
                "already served",
            ),
        ] {
            let err = Config::from_toml(&format!("{MINIMAL}[listen]\n{listen}\n")).unwrap_err();
            assert_eq!(err.problems()[0].key, "listen.cip_http", "{err}");
            assert!(err.to_string().contains(why), "{listen}: {err}");
        }
    }

    #[test]
    fn a_poll_may_not_wait_past_the_pollers_stall_timeout() {
        let base = "data_dir = \"d\"\n[node]\ndsi = \"1.2\"\n[listen]\nhttp = [\"127.0.0.1:0\"]\n";
        let err =
            Config::from_toml(&format!("{base}[outbound]\nmax_wait = \"20s\"\n")).unwrap_err();
        assert_eq!(err.problems()[0].key, "outbound.max_wait", "{err}");
        assert!(err.to_string().contains("stall_timeout"), "{err}");
        let ok =
            format!("{base}[outbound]\nmax_wait = \"20s\"\n[limits]\nstall_timeout = \"30s\"\n");
        assert!(Config::from_toml(&ok).is_ok());
    }

    #[test]
    fn a_node_without_http_needs_a_base_uri() {
        let text = "data_dir = \"d\"\n[node]\ndsi = \"1.2\"\n[listen]\ncip = [\"127.0.0.1:0\"]\n";
        let err = Config::from_toml(text).unwrap_err();
        assert_eq!(err.problems()[0].key, "node.base_uri", "{err}");
        let with_uri = text.replace(
            "dsi = \"1.2\"",
            "dsi = \"1.2\"\nbase_uri = \"ldap://d.example/o=x\"",
        );
        assert!(Config::from_toml(&with_uri).is_ok());
        let with_http = format!("{text}http = [\"127.0.0.1:0\"]\n");
        assert!(Config::from_toml(&with_http).is_ok());
    }
}
