//! `[[collection]]` and `[hinadi]`: where this node's own objects come from (SOIF files, the
//! bundled sample, Hina-Di files and URLs), and how Hina-Di is read, trusted and served.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use encoding_rs::Encoding;
use serde::Deserialize;

use super::validate::Validator;

/// `[[collection]]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCollection {
    /// Name used in logs and status.
    pub name: String,
    /// Source type: `soif` (a file or a directory of files), `hinadi` (a Hina-Di file,
    /// directory or URL) or `sample` (the bundled sample).
    #[serde(rename = "type")]
    pub kind: String,
    /// File or directory (types `soif`, `hinadi`).
    pub path: Option<PathBuf>,
    /// For directories: descend into subdirectories (default true).
    pub recursive: Option<bool>,
    /// For directories: file name extensions to read (default `["soif"]`, or `["di",
    /// "hina"]` for `hinadi`; `[]` = every file).
    pub extensions: Option<Vec<String>>,
    /// An `http://` URL to fetch (type `hinadi`, instead of `path`).
    pub url: Option<String>,
    /// How often the URL is fetched (default `"30m"`).
    pub interval: Option<String>,
    /// Charset of files that declare none (type `hinadi`; default `"EUC-JP"`, the spec's).
    pub charset: Option<String>,
    /// Blocks no trusted agent vouches for: `"index"` them (default) or `"skip"` them.
    pub untrusted: Option<String>,
    /// The CSID of the remote catalog pulled (type `rdm`; default: the server's default).
    pub catalog: Option<String>,
    /// Accept RD submissions from `[rdm] submitters` (type `rdm`; default false).
    pub writable: Option<bool>,
    /// An `@SCHEMA` file served for this catalog over RDM (default: generated).
    pub schema: Option<PathBuf>,
    /// A `@TAXONOMY`/`@CLASSIFICATION` file served for this catalog over RDM.
    pub taxonomy: Option<PathBuf>,
}

/// One local collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionConfig {
    /// Name.
    pub name: String,
    /// Where its objects come from.
    pub source: SourceConfig,
    /// How it is described as an RDM catalog.
    pub catalog: CatalogConfig,
}

/// A collection as an RDM catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatalogConfig {
    /// `@SCHEMA` file to serve instead of the generated schema.
    pub schema: Option<PathBuf>,
    /// `@TAXONOMY` file to serve.
    pub taxonomy: Option<PathBuf>,
}

/// Kinds of collection source.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceConfig {
    /// A SOIF file, or a directory of SOIF files.
    Soif {
        /// File or directory.
        path: PathBuf,
        /// Descend into subdirectories.
        recursive: bool,
        /// Extensions read from directories (empty: all files).
        extensions: Vec<String>,
    },
    /// Hina-Di: each entity block a `HINA` summary object.
    HinaDi {
        /// Where the file is.
        location: HinaLocation,
        /// Charset of files that declare none.
        charset: &'static Encoding,
        /// What becomes of blocks no trusted agent vouches for.
        untrusted: Untrusted,
    },
    /// RDs kept under `data_dir`, pulled from an RDM server and/or submitted to us.
    Rdm {
        /// The server's `/rdm/incoming` URL, when pulled.
        url: Option<String>,
        /// The remote catalog's CSID (default: the server's default catalog).
        catalog: Option<String>,
        /// Time between pulls.
        interval: Duration,
        /// Accept submissions (`rd-response`, `rd-response-deleted`) from submitters.
        writable: bool,
    },
    /// The sample collection bundled with cipd.
    Sample,
}

/// Where a Hina-Di collection is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HinaLocation {
    /// A file or a directory of files.
    Path {
        /// File or directory.
        path: PathBuf,
        /// Descend into subdirectories.
        recursive: bool,
        /// Extensions read from directories (empty: all files).
        extensions: Vec<String>,
    },
    /// A URL fetched now and then (with `If-Modified-Since`); the last copy is kept under
    /// the data directory, so a restart serves it before the first fetch.
    Url {
        /// `http://host[:port]/path`.
        url: String,
        /// Time between fetches.
        interval: Duration,
    },
}

/// What a Hina-Di collection does with blocks no trusted agent vouches for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Untrusted {
    /// Index them (they answer queries here) but never re-publish them.
    #[default]
    Index,
    /// Leave them out.
    Skip,
}

/// Default pull interval of RDM collections.
pub const DEFAULT_RDM_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// Default fetch interval of Hina-Di URLs.
pub const DEFAULT_HINADI_INTERVAL: Duration = Duration::from_secs(30 * 60);

/// `[hinadi]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHinaDi {
    /// Where the HTTP listener serves this node's Hina-Di file (default `"/hina.di"`; `""`
    /// turns it off).
    pub path: Option<String>,
    /// `Authorized-url`s of the antenna agents whose blocks are re-published.
    pub trusted: Option<Vec<String>>,
    /// Re-publish trusted blocks (default true).
    pub propagate: Option<bool>,
    /// Serve this node's own objects that have a URL and a date (default true).
    pub local: Option<bool>,
    /// Longest line read (default 65536 bytes).
    pub max_line_bytes: Option<usize>,
    /// Most fields in a block (default 256).
    pub max_fields: Option<usize>,
    /// Largest Hina-Di file fetched from a URL (default 64 MiB).
    pub max_fetch_bytes: Option<u64>,
    /// Longest a fetch may take (default `"60s"`).
    pub fetch_timeout: Option<String>,
    /// Most entity blocks in the served file (default 100,000).
    pub max_blocks: Option<usize>,
    /// How long readers may trust this node's own entries (`Expires` = the file's build
    /// time plus this); default: the collection's fetch or pull interval, else `"1d"`.
    pub expires: Option<String>,
}

/// How Hina-Di is read, trusted and served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HinaDiConfig {
    /// Path of `GET` on the HTTP listener; `None` when off.
    pub serve_path: Option<String>,
    /// Trusted agents' `Authorized-url`s.
    pub trusted: Vec<String>,
    /// Re-publish trusted blocks.
    pub propagate: bool,
    /// Serve this node's own dated objects.
    pub local: bool,
    /// Longest line read.
    pub max_line_bytes: usize,
    /// Most fields in a block.
    pub max_fields: usize,
    /// Largest fetched file.
    pub max_fetch_bytes: u64,
    /// Longest fetch.
    pub fetch_timeout: Duration,
    /// Most entity blocks in the served file.
    pub max_blocks: usize,
    /// How long readers may trust this node's own entries (see [`HinaDiConfig::expiry`]).
    pub expires: Option<Duration>,
}

impl Default for HinaDiConfig {
    fn default() -> Self {
        Self {
            serve_path: Some("/hina.di".to_owned()),
            trusted: Vec::new(),
            propagate: true,
            local: true,
            max_line_bytes: 64 << 10,
            max_fields: 256,
            max_fetch_bytes: 64 << 20,
            fetch_timeout: Duration::from_secs(60),
            max_blocks: 100_000,
            expires: None,
        }
    }
}

/// How long own entries of a collection without a fetch or pull interval may be trusted.
pub const DEFAULT_HINADI_EXPIRES: Duration = Duration::from_secs(24 * 3600);

impl HinaDiConfig {
    /// How long readers may trust this node's own entries from `collection`: `[hinadi]
    /// expires` when set, else the collection's fetch or pull interval (its copy is no
    /// fresher than that), else [`DEFAULT_HINADI_EXPIRES`].
    pub fn expiry(&self, collection: &CollectionConfig) -> Duration {
        self.expires.unwrap_or(match &collection.source {
            SourceConfig::HinaDi {
                location: HinaLocation::Url { interval, .. },
                ..
            } => *interval,
            SourceConfig::Rdm {
                url: Some(_),
                interval,
                ..
            } => *interval,
            _ => DEFAULT_HINADI_EXPIRES,
        })
    }

    /// The reader's limits with `charset` for files that declare none.
    pub fn limits(&self, charset: &'static Encoding) -> cip_proto::hinadi::HinaLimits {
        cip_proto::hinadi::HinaLimits {
            max_line_bytes: self.max_line_bytes,
            max_fields: self.max_fields,
            default_charset: charset,
            ..cip_proto::hinadi::HinaLimits::default()
        }
    }
}

/// `[rdm]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRdm {
    /// Where the HTTP listener answers RDM (default `"/rdm/incoming"`; `""` turns it off).
    pub path: Option<String>,
    /// The catalog of requests that name none (default: the first collection).
    pub default_catalog: Option<String>,
    /// `Description` of the server description.
    pub description: Option<String>,
    /// `Maintainer` of the server description (an RFC 822 address).
    pub maintainer: Option<String>,
    /// How long answers may be cached (`Expires`; default `"1h"`).
    pub expires: Option<String>,
    /// Addresses allowed to submit RDs to writable catalogs.
    pub submitters: Option<Vec<String>>,
    /// Largest request body (default 16 MiB).
    pub max_request_bytes: Option<usize>,
    /// Most RDs an ordered view sorts (default 100,000).
    pub max_ordered: Option<usize>,
    /// Largest answer a pull accepts (default 256 MiB).
    pub max_pull_bytes: Option<u64>,
    /// Longest a pull may take (default `"5m"`).
    pub pull_timeout: Option<String>,
}

/// How this node speaks RDM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmConfig {
    /// Path of the RDM endpoint; `None` when off.
    pub path: Option<String>,
    /// Default catalog.
    pub default_catalog: Option<String>,
    /// Server description text.
    pub description: Option<String>,
    /// Maintainer address.
    pub maintainer: Option<String>,
    /// `Expires` offset of answers.
    pub expires: Duration,
    /// Who may submit RDs.
    pub submitters: Vec<std::net::IpAddr>,
    /// Largest request body.
    pub max_request_bytes: usize,
    /// Most RDs sorted for an ordered view.
    pub max_ordered: usize,
    /// Largest pulled answer.
    pub max_pull_bytes: u64,
    /// Longest pull.
    pub pull_timeout: Duration,
}

impl Default for RdmConfig {
    fn default() -> Self {
        Self {
            path: Some("/rdm/incoming".to_owned()),
            default_catalog: None,
            description: None,
            maintainer: None,
            expires: Duration::from_secs(3600),
            submitters: Vec::new(),
            max_request_bytes: 16 << 20,
            max_ordered: 100_000,
            max_pull_bytes: 256 << 20,
            pull_timeout: Duration::from_secs(300),
        }
    }
}

/// Checks an `http://` or `https://` URL with a host.
pub(super) fn check_http_url(u: &str) -> Result<(), String> {
    crate::sys::http::check_url(u)
        .map(drop)
        .map_err(|e| e.to_string())
}

impl Validator<'_> {
    pub(super) fn collections(&mut self, raw: Vec<RawCollection>) -> Vec<CollectionConfig> {
        let mut names = HashSet::new();
        let mut out = Vec::new();
        for (i, c) in raw.into_iter().enumerate() {
            let key = format!("collection[{i}]");
            let name = c.name.clone();
            if c.name.trim().is_empty() {
                self.err(format!("{key}.name"), "must not be empty");
            } else if !names.insert(c.name.clone()) {
                self.err(
                    format!("{key}.name"),
                    format!("{:?} is used by an earlier collection", c.name),
                );
            }
            let kind = c.kind.clone();
            let (schema, taxonomy) = (c.schema.clone(), c.taxonomy.clone());
            // Keys that only some types read.
            let meaningless: Vec<&str> = [
                ("path", c.path.is_some(), ["soif", "hinadi"].as_slice()),
                ("recursive", c.recursive.is_some(), &["soif", "hinadi"]),
                ("extensions", c.extensions.is_some(), &["soif", "hinadi"]),
                ("url", c.url.is_some(), &["hinadi", "rdm"]),
                ("interval", c.interval.is_some(), &["hinadi", "rdm"]),
                ("catalog", c.catalog.is_some(), &["rdm"]),
                ("writable", c.writable.is_some(), &["rdm"]),
                ("charset", c.charset.is_some(), &["hinadi"]),
                ("untrusted", c.untrusted.is_some(), &["hinadi"]),
            ]
            .into_iter()
            .filter(|(_, set, types)| *set && !types.contains(&kind.as_str()))
            .map(|(k, _, _)| k)
            .collect();
            if ["soif", "hinadi", "rdm", "sample"].contains(&kind.as_str()) {
                for k in meaningless {
                    self.err(
                        format!("{key}.{k}"),
                        format!("has no meaning for type {kind:?}"),
                    );
                }
            }
            let source = match kind.as_str() {
                "soif" => match c.path {
                    Some(p) => SourceConfig::Soif {
                        path: self.path(p),
                        recursive: c.recursive.unwrap_or(true),
                        extensions: c.extensions.unwrap_or_else(|| vec!["soif".to_owned()]),
                    },
                    None => {
                        self.err(format!("{key}.path"), "is required for type \"soif\"");
                        continue;
                    }
                },
                "hinadi" => match self.hinadi_source(&key, c) {
                    Some(s) => s,
                    None => continue,
                },
                "rdm" => {
                    let url = c.url.clone();
                    if let Some(u) = &url
                        && let Err(e) = check_http_url(u)
                    {
                        self.err(format!("{key}.url"), e);
                    }
                    if let Some(csid) = &c.catalog
                        && let Err(e) = cip_proto::rdm::Csid::parse(csid)
                    {
                        self.err(format!("{key}.catalog"), e.to_string());
                    }
                    let writable = c.writable.unwrap_or(false);
                    if url.is_none() && !writable {
                        self.err(
                            format!("{key}.url"),
                            "type \"rdm\" needs a url to pull from, or writable = true",
                        );
                    }
                    SourceConfig::Rdm {
                        url,
                        catalog: c.catalog.clone(),
                        interval: self.duration(
                            &format!("{key}.interval"),
                            c.interval.clone(),
                            DEFAULT_RDM_INTERVAL,
                        ),
                        writable,
                    }
                }
                "sample" => SourceConfig::Sample,
                other => {
                    self.err(
                        format!("{key}.type"),
                        format!(
                            "unknown collection type {other:?}; expected \"soif\", \"hinadi\", \
                             \"rdm\" or \"sample\""
                        ),
                    );
                    continue;
                }
            };
            let catalog = CatalogConfig {
                schema: schema.map(|p| self.path(p)),
                taxonomy: taxonomy.map(|p| self.path(p)),
            };
            out.push(CollectionConfig {
                name,
                source,
                catalog,
            });
        }
        out
    }

    fn hinadi_source(&mut self, key: &str, c: RawCollection) -> Option<SourceConfig> {
        let charset = match c.charset.as_deref() {
            None => cip_proto::hinadi::DEFAULT_CHARSET,
            Some(label) => match cip_proto::hinadi::charset(label) {
                Some(e) => e,
                None => {
                    self.err(
                        format!("{key}.charset"),
                        format!("unknown charset {label:?} (try \"EUC-JP\", \"Shift_JIS\", \"ISO-2022-JP\", \"UTF-8\")"),
                    );
                    return None;
                }
            },
        };
        let untrusted = match c.untrusted.as_deref() {
            None | Some("index") => Untrusted::Index,
            Some("skip") => Untrusted::Skip,
            Some(other) => {
                self.err(
                    format!("{key}.untrusted"),
                    format!("{other:?}: expected \"index\" or \"skip\""),
                );
                return None;
            }
        };
        let location = match (c.path, c.url) {
            (Some(p), None) => {
                if c.interval.is_some() {
                    self.err(format!("{key}.interval"), "only applies to a url");
                }
                HinaLocation::Path {
                    path: self.path(p),
                    recursive: c.recursive.unwrap_or(true),
                    extensions: c
                        .extensions
                        .unwrap_or_else(|| vec!["di".to_owned(), "hina".to_owned()]),
                }
            }
            (None, Some(url)) => {
                for (set, k) in [
                    (c.recursive.is_some(), "recursive"),
                    (c.extensions.is_some(), "extensions"),
                ] {
                    if set {
                        self.err(format!("{key}.{k}"), "only applies to a path");
                    }
                }
                if let Err(e) = check_http_url(&url) {
                    self.err(format!("{key}.url"), e);
                    return None;
                }
                let interval = self.duration(
                    &format!("{key}.interval"),
                    c.interval,
                    DEFAULT_HINADI_INTERVAL,
                );
                HinaLocation::Url { url, interval }
            }
            (Some(_), Some(_)) => {
                self.err(key.to_owned(), "give either path or url, not both");
                return None;
            }
            (None, None) => {
                self.err(
                    format!("{key}.path"),
                    "type \"hinadi\" needs a path (file or directory) or a url",
                );
                return None;
            }
        };
        Some(SourceConfig::HinaDi {
            location,
            charset,
            untrusted,
        })
    }

    pub(super) fn rdm(&mut self, raw: RawRdm, collections: &[CollectionConfig]) -> RdmConfig {
        let d = RdmConfig::default();
        let path = match raw.path {
            None => d.path,
            Some(p) if p.is_empty() => None,
            Some(p) if p.starts_with('/') && !p.contains(['?', '#', ' ']) => Some(p),
            Some(p) => {
                self.err(
                    "rdm.path",
                    format!("{p:?}: expected a path such as \"/rdm/incoming\" (or \"\" for none)"),
                );
                None
            }
        };
        if let Some(c) = &raw.default_catalog
            && !collections.iter().any(|x| &x.name == c)
        {
            self.err(
                "rdm.default_catalog",
                format!("{c:?} is not the name of a collection"),
            );
        }
        let mut submitters = Vec::new();
        for (i, a) in raw.submitters.unwrap_or_default().iter().enumerate() {
            match a.trim().parse() {
                Ok(ip) => submitters.push(ip),
                Err(_) => self.err(
                    format!("rdm.submitters[{i}]"),
                    format!("{a:?} is not an IP address"),
                ),
            }
        }
        let max_pull_bytes = match raw.max_pull_bytes {
            Some(0) => {
                self.err("rdm.max_pull_bytes", "must be positive");
                d.max_pull_bytes
            }
            Some(n) => n,
            None => d.max_pull_bytes,
        };
        RdmConfig {
            path,
            default_catalog: raw.default_catalog,
            description: raw.description,
            maintainer: raw.maintainer,
            expires: self.duration("rdm.expires", raw.expires, d.expires),
            submitters,
            max_request_bytes: self.positive(
                "rdm.max_request_bytes",
                raw.max_request_bytes,
                d.max_request_bytes,
            ),
            max_ordered: self.positive("rdm.max_ordered", raw.max_ordered, d.max_ordered),
            max_pull_bytes,
            pull_timeout: self.duration("rdm.pull_timeout", raw.pull_timeout, d.pull_timeout),
        }
    }

    /// `hinadi.path` and `rdm.path` must not take a fixed route or each other's path (the
    /// router would refuse to start).
    pub(super) fn optional_routes(&mut self, hinadi: &HinaDiConfig, rdm: &RdmConfig) {
        for (key, path) in [("hinadi.path", &hinadi.serve_path), ("rdm.path", &rdm.path)] {
            if let Some(p) = path
                && crate::model::routes::FIXED_ROUTES.contains(&p.as_str())
            {
                self.err(key, format!("{p:?} is already served by another route"));
            }
        }
        if hinadi.serve_path.is_some() && hinadi.serve_path == rdm.path {
            self.err("rdm.path", "is the same as hinadi.path");
        }
    }

    pub(super) fn hinadi(&mut self, raw: RawHinaDi) -> HinaDiConfig {
        let d = HinaDiConfig::default();
        let serve_path = match raw.path {
            None => d.serve_path,
            Some(p) if p.is_empty() => None,
            Some(p) if p.starts_with('/') && !p.contains(['?', '#', ' ']) => Some(p),
            Some(p) => {
                self.err(
                    "hinadi.path",
                    format!("{p:?}: expected a path such as \"/hina.di\" (or \"\" for none)"),
                );
                None
            }
        };
        let trusted = raw.trusted.unwrap_or_default();
        for (i, t) in trusted.iter().enumerate() {
            if !t.contains("://") {
                self.err(
                    format!("hinadi.trusted[{i}]"),
                    format!("{t:?}: expected an agent's Authorized-url (http://...)"),
                );
            }
        }
        let max_fetch_bytes = match raw.max_fetch_bytes {
            Some(0) => {
                self.err("hinadi.max_fetch_bytes", "must be positive");
                d.max_fetch_bytes
            }
            Some(n) => n,
            None => d.max_fetch_bytes,
        };
        HinaDiConfig {
            serve_path,
            trusted,
            propagate: raw.propagate.unwrap_or(d.propagate),
            local: raw.local.unwrap_or(d.local),
            max_line_bytes: self.positive(
                "hinadi.max_line_bytes",
                raw.max_line_bytes,
                d.max_line_bytes,
            ),
            max_fields: self.positive("hinadi.max_fields", raw.max_fields, d.max_fields),
            max_fetch_bytes,
            fetch_timeout: self.duration(
                "hinadi.fetch_timeout",
                raw.fetch_timeout,
                d.fetch_timeout,
            ),
            max_blocks: self.positive("hinadi.max_blocks", raw.max_blocks, d.max_blocks),
            expires: raw
                .expires
                .map(|e| self.duration("hinadi.expires", Some(e), DEFAULT_HINADI_EXPIRES)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    const BASE: &str = "data_dir = \"/tmp/x\"\n[node]\ndsi = \"1.3.6.1.4.1.99999.1\"\n";

    #[test]
    fn hinadi_collections_and_section() {
        let c = Config::from_toml(&format!(
            "{BASE}\
             [[collection]]\nname = \"a\"\ntype = \"hinadi\"\npath = \"/srv/antenna\"\n\
             charset = \"Shift_JIS\"\nuntrusted = \"skip\"\n\
             [[collection]]\nname = \"b\"\ntype = \"hinadi\"\nurl = \"http://antenna.example.jp/hina.di\"\n\
             interval = \"5m\"\n\
             [hinadi]\ntrusted = [\"http://antenna.example.jp/\"]\npath = \"/antenna/hina.di\"\n\
             max_fetch_bytes = 1024\n"
        ))
        .unwrap();
        assert_eq!(
            c.collections[0].source,
            SourceConfig::HinaDi {
                location: HinaLocation::Path {
                    path: "/srv/antenna".into(),
                    recursive: true,
                    extensions: vec!["di".into(), "hina".into()],
                },
                charset: encoding_rs::SHIFT_JIS,
                untrusted: Untrusted::Skip,
            }
        );
        assert_eq!(
            c.collections[1].source,
            SourceConfig::HinaDi {
                location: HinaLocation::Url {
                    url: "http://antenna.example.jp/hina.di".into(),
                    interval: Duration::from_secs(300),
                },
                charset: encoding_rs::EUC_JP,
                untrusted: Untrusted::Index,
            }
        );
        assert_eq!(c.hinadi.serve_path.as_deref(), Some("/antenna/hina.di"));
        assert_eq!(c.hinadi.trusted, vec!["http://antenna.example.jp/"]);
        assert_eq!(c.hinadi.max_fetch_bytes, 1024);
        assert!(c.hinadi.propagate && c.hinadi.local);
        let d = Config::from_toml(BASE).unwrap();
        assert_eq!(d.hinadi, HinaDiConfig::default());
    }

    #[test]
    fn the_deploy_example_states_the_defaults() {
        let c = Config::from_toml(include_str!("../../../../deploy/cipd.toml")).unwrap();
        assert_eq!(c.hinadi, HinaDiConfig::default());
        assert_eq!(c.rdm, RdmConfig::default());
    }

    #[test]
    fn rdm_collections_and_section() {
        let c = Config::from_toml(&format!(
            "{BASE}\
             [[collection]]\nname = \"p\"\ntype = \"rdm\"\nurl = \"http://x.org/rdm/incoming\"\n\
             catalog = \"x-catalog://x.org:80/docs\"\ninterval = \"1m\"\ntaxonomy = \"t.soif\"\n\
             [[collection]]\nname = \"inbox\"\ntype = \"rdm\"\nwritable = true\n\
             [rdm]\ndefault_catalog = \"inbox\"\nsubmitters = [\"10.0.0.1\", \"::1\"]\nexpires = \"10m\"\n"
        ))
        .unwrap();
        assert_eq!(
            c.collections[0].source,
            SourceConfig::Rdm {
                url: Some("http://x.org/rdm/incoming".into()),
                catalog: Some("x-catalog://x.org:80/docs".into()),
                interval: Duration::from_secs(60),
                writable: false,
            }
        );
        assert_eq!(
            c.collections[0].catalog.taxonomy.as_deref(),
            Some(std::path::Path::new("t.soif"))
        );
        assert!(matches!(
            c.collections[1].source,
            SourceConfig::Rdm {
                url: None,
                writable: true,
                ..
            }
        ));
        assert_eq!(c.rdm.submitters.len(), 2);
        assert_eq!(c.rdm.expires, Duration::from_secs(600));
        let err = Config::from_toml(&format!(
            "{BASE}\
             [[collection]]\nname = \"a\"\ntype = \"rdm\"\n\
             [[collection]]\nname = \"b\"\ntype = \"rdm\"\nurl = \"http://x/\"\ncatalog = \"docs\"\n\
             [[collection]]\nname = \"c\"\ntype = \"soif\"\npath = \"x\"\nwritable = true\n\
             [rdm]\ndefault_catalog = \"zzz\"\nsubmitters = [\"somewhere\"]\npath = \"rdm\"\n"
        ))
        .unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "collection[0].url",
                "collection[1].catalog",
                "collection[2].writable",
                "rdm.path",
                "rdm.default_catalog",
                "rdm.submitters[0]"
            ],
            "{err}"
        );
    }

    #[test]
    fn own_hinadi_entries_expire_after_the_interval_or_the_setting() {
        let text = format!(
            "{BASE}\
             [[collection]]\nname = \"a\"\ntype = \"hinadi\"\nurl = \"https://x.jp/hina.di\"\n\
             interval = \"30m\"\n\
             [[collection]]\nname = \"b\"\ntype = \"rdm\"\nurl = \"http://x/\"\ninterval = \"15m\"\n\
             [[collection]]\nname = \"c\"\ntype = \"soif\"\npath = \"x\"\n"
        );
        let c = Config::from_toml(&text).unwrap();
        let expiry: Vec<u64> = c
            .collections
            .iter()
            .map(|k| c.hinadi.expiry(k).as_secs())
            .collect();
        assert_eq!(expiry, [1800, 900, 86_400]);
        let c = Config::from_toml(&format!("{text}[hinadi]\nexpires = \"2h\"\n")).unwrap();
        assert!(
            c.collections
                .iter()
                .all(|k| c.hinadi.expiry(k).as_secs() == 7200)
        );
        let err = Config::from_toml(&format!("{text}[hinadi]\nexpires = \"soon\"\n")).unwrap_err();
        assert!(err.to_string().contains("hinadi.expires"), "{err}");
    }

    #[test]
    fn hinadi_problems_are_named() {
        let err = Config::from_toml(&format!(
            "{BASE}\
             [[collection]]\nname = \"a\"\ntype = \"hinadi\"\n\
             [[collection]]\nname = \"b\"\ntype = \"hinadi\"\nurl = \"ftp://x.jp/hina.di\"\n\
             [[collection]]\nname = \"c\"\ntype = \"hinadi\"\npath = \"x\"\ncharset = \"klingon\"\n\
             [[collection]]\nname = \"d\"\ntype = \"soif\"\npath = \"x\"\nurl = \"http://x/\"\n\
             [[collection]]\nname = \"e\"\ntype = \"hinadi\"\npath = \"x\"\nurl = \"http://x/\"\n\
             [hinadi]\npath = \"hina.di\"\ntrusted = [\"agent\"]\n\
             [rdm]\npath = \"/healthz\"\n"
        ))
        .unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "collection[0].path",
                "collection[1].url",
                "collection[2].charset",
                "collection[3].url",
                "collection[4]",
                "hinadi.path",
                "hinadi.trusted[0]",
                "rdm.path"
            ],
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("only http:// and https:// URLs are fetched"),
            "{err}"
        );
    }
}
