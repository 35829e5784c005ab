//! RDM collections (`type = "rdm"`): RDs kept in `data_dir/rdm/<hex(name)>.soif`, filled by
//! pulls from an RDM server and by submissions to this node, and the pull task.
//!
//! A pull asks `rd-request` with `gatherer` `Scope: all` the first time and `Scope: since
//! <last pull>` after, plus `rd-request-deleted` since then, and applies both to the copy.
//! The time of a pull is the server's `Date` (a second earlier, to be safe against clock
//! edges); it is kept in `<hex(name)>.pull.json`, so a restart goes on incrementally. A
//! failed pull is retried with doubling delays up to the interval ([`crate::pipeline::feeds`]).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use cip_proto::rdm::{self, Body, Csid, GathererScope, Header, Message, Query, RdmType};
use cip_proto::soif::{Limits, SoifObject};
use serde::{Deserialize, Serialize};

use crate::model::config::Config;
use crate::model::config::SourceConfig;
use crate::pipeline::feeds::FeedHost;
use crate::store::collection::{
    CollectionError, CollectionSource, FileSet, Fingerprint, LoadReport, Progress, SoifSource,
};
use crate::sys::http::{Answer, FetchError, FetchLimits, HttpClient};

/// The copy and pull-state files of RDM collection `name`.
pub fn copy_paths(data_dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    crate::store::collection::data_files(data_dir, "rdm", name, ["soif", "pull.json"])
}

/// What is remembered of the last pull.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullState {
    /// The URL pulled.
    pub url: String,
    /// The catalog asked for.
    pub catalog: Option<String>,
    /// The server's time of the last complete pull (Unix seconds).
    pub last_pull: Option<i64>,
}

/// An RDM collection's RDs, read from its copy.
#[derive(Debug, Clone)]
pub struct RdmSource {
    copy: PathBuf,
    url: Option<String>,
    limits: Limits,
}

impl RdmSource {
    /// The source of collection `name`.
    pub fn new(name: &str, url: Option<&str>, data_dir: &Path, limits: Limits) -> Self {
        Self {
            copy: copy_paths(data_dir, name).0,
            url: url.map(str::to_owned),
            limits,
        }
    }

    fn soif(&self) -> SoifSource {
        SoifSource {
            files: FileSet {
                path: self.copy.clone(),
                recursive: false,
                extensions: Vec::new(),
            },
            limits: self.limits,
        }
    }
}

impl CollectionSource for RdmSource {
    fn describe(&self) -> String {
        match &self.url {
            Some(u) => format!("rdm:{u}"),
            None => "rdm:submissions".to_owned(),
        }
    }

    fn fingerprint(&self) -> Result<Fingerprint, CollectionError> {
        if self.copy.exists() {
            self.soif().fingerprint()
        } else {
            Ok(Fingerprint(0))
        }
    }

    fn load(
        &self,
        sink: &mut dyn FnMut(SoifObject),
        progress: &mut dyn FnMut(Progress),
    ) -> Result<LoadReport, CollectionError> {
        if !self.copy.exists() {
            return Ok(LoadReport::default());
        }
        self.soif().load(sink, progress)
    }
}

/// What applying RDs to a copy did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// RDs added.
    pub added: usize,
    /// RDs replaced by a different version.
    pub changed: usize,
    /// RDs removed.
    pub deleted: usize,
}

impl Applied {
    /// True when the copy changed.
    pub fn any(&self) -> bool {
        self.added + self.changed + self.deleted > 0
    }
}

/// Applies `upserts` (by URL) and `deletions` (URLs) to the copy at `path`, starting from
/// nothing when `replace` is set; writes it atomically when anything changed (blocking).
///
/// # Errors
/// When the copy cannot be read or written.
pub fn apply(
    path: &Path,
    upserts: Vec<SoifObject>,
    deletions: &[String],
    replace: bool,
    limits: Limits,
) -> io::Result<Applied> {
    // Pulls and submissions may write the same copy at once: one at a time.
    static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = crate::sys::lock(&WRITING);
    let mut objects: Vec<Option<SoifObject>> = Vec::new();
    if path.exists() && !replace {
        let bytes = std::fs::read(path)?;
        objects = cip_proto::soif::parse_all(bytes, limits)
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            })?
            .into_iter()
            .map(Some)
            .collect();
    }
    let before = objects.len();
    let mut at: HashMap<Bytes, usize> = objects
        .iter()
        .enumerate()
        .filter_map(|(i, o)| o.as_ref().map(|o| (o.url().clone(), i)))
        .collect();
    let mut applied = Applied::default();
    for o in upserts {
        match at.get(o.url()) {
            Some(&i) => {
                if objects[i].as_ref() != Some(&o) {
                    applied.changed += 1;
                    objects[i] = Some(o);
                }
            }
            None => {
                at.insert(o.url().clone(), objects.len());
                objects.push(Some(o));
                applied.added += 1;
            }
        }
    }
    for url in deletions {
        if let Some(i) = at.remove(url.as_bytes())
            && objects[i].take().is_some()
        {
            applied.deleted += 1;
        }
    }
    if applied.any() || (replace && (before > 0 || !path.exists())) {
        crate::sys::durable::write_with(path, |w| {
            use std::io::Write;
            for o in objects.iter().flatten() {
                w.write_all(&o.to_bytes())?;
                w.write_all(b"\n")?;
            }
            Ok(())
        })?;
    }
    Ok(applied)
}

/// Why an RDM exchange failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// HTTP failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The answer is not an RDM message.
    #[error("{url}: the answer is not an RDM message: {error}")]
    NotRdm {
        /// The URL.
        url: String,
        /// Why.
        error: rdm::RdmError,
    },
    /// The server answered with an error.
    #[error("{url}: {status}: {message}")]
    Refused {
        /// The URL.
        url: String,
        /// HTTP status.
        status: axum::http::StatusCode,
        /// `RDM-Error-Message`.
        message: String,
    },
}

/// Sends `msg` to the RDM endpoint `url`; the answer must be an RDM message without an
/// `RDM-Error-Message` and a 2xx status.
///
/// # Errors
/// [`ClientError`].
pub async fn exchange(
    client: &HttpClient,
    url: &str,
    msg: &Message,
    limits: FetchLimits,
) -> Result<(Answer, Message), ClientError> {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::CONTENT_TYPE,
        reqwest::header::HeaderValue::from_static(rdm::CONTENT_TYPE),
    );
    let posted = client
        .post(url, headers, Bytes::from(msg.write()), limits)
        .await?;
    let parsed = Message::parse(posted.body.clone(), Limits::unlimited());
    match parsed {
        Ok(m) => {
            if let Some(e) = &m.header.error_message
                && (!posted.status.is_success() || m.header.rdm_type == RdmType::StatusResponse)
            {
                return Err(ClientError::Refused {
                    url: url.to_owned(),
                    status: posted.status,
                    message: e.clone(),
                });
            }
            if !posted.status.is_success() {
                return Err(ClientError::Refused {
                    url: url.to_owned(),
                    status: posted.status,
                    message: "no RDM-Error-Message".into(),
                });
            }
            Ok((posted, m))
        }
        Err(error) if posted.status.is_success() => Err(ClientError::NotRdm {
            url: url.to_owned(),
            error,
        }),
        Err(_) => Err(ClientError::Refused {
            url: url.to_owned(),
            status: posted.status,
            message: String::from_utf8_lossy(&posted.body[..posted.body.len().min(200)])
                .into_owned(),
        }),
    }
}

/// An `rd-request`/`rd-request-deleted` with the gatherer language.
pub fn rd_request(deleted: bool, scope: GathererScope, catalog: Option<&str>) -> Message {
    let ty = if deleted {
        RdmType::RdRequestDeleted
    } else {
        RdmType::RdRequest
    };
    Message::new(
        Header {
            query_language: Some("gatherer".into()),
            csid: catalog.and_then(|c| Csid::parse(c).ok()),
            ..Header::new(ty)
        },
        Body::Query(Query {
            scope: Some(scope.to_scope()),
            view: rdm::View::default(),
        }),
    )
}

fn objects(m: Message) -> Vec<SoifObject> {
    match m.body {
        Body::Objects(o) => o,
        _ => Vec::new(),
    }
}

/// One pull of collection `name` from `url`; true when its copy changed.
///
/// # Errors
/// What failed, as text for the log and status.
pub async fn pull_once(
    client: &HttpClient,
    config: &Config,
    name: &str,
    url: &str,
    catalog: Option<&str>,
) -> Result<bool, String> {
    let (copy, state_path) = copy_paths(&config.data_dir, name);
    let state: PullState = std::fs::read(&state_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let same = state.url == url && state.catalog.as_deref() == catalog && copy.exists();
    let since = state.last_pull.filter(|_| same);
    let limits = FetchLimits {
        timeout: config.rdm.pull_timeout,
        max_bytes: config.rdm.max_pull_bytes,
    };
    let started = crate::store::journal::now();
    let scope = since.map_or(GathererScope::All, GathererScope::Since);
    let (posted, answer) = exchange(client, url, &rd_request(false, scope, catalog), limits)
        .await
        .map_err(|e| e.to_string())?;
    let mut deletions = Vec::new();
    if since.is_some() {
        let (_, gone) = exchange(client, url, &rd_request(true, scope, catalog), limits)
            .await
            .map_err(|e| e.to_string())?;
        deletions = objects(gone)
            .iter()
            .map(|o| String::from_utf8_lossy(o.url()).into_owned())
            .collect();
    }
    let rds = objects(answer);
    let received = rds.len();
    let soif = crate::model::config::soif_limits(config);
    let replace = since.is_none();
    let (copy2, dels) = (copy.clone(), deletions.clone());
    let applied = crate::sys::net::spawn_blocking(move || apply(&copy2, rds, &dels, replace, soif))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    // The server's clock decides what "since" means; a second of overlap costs only
    // re-sending RDs that are applied idempotently.
    let server_now = posted
        .date
        .as_deref()
        .and_then(cip_proto::http_date::parse)
        .unwrap_or(started);
    let next = PullState {
        url: url.to_owned(),
        catalog: catalog.map(str::to_owned),
        last_pull: Some(server_now - 1),
    };
    let body = serde_json::to_vec(&next).map_err(|e| e.to_string())?;
    crate::sys::net::spawn_blocking(move || crate::sys::durable::write(&state_path, &body))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    tracing::info!(
        collection = name,
        url,
        scope = %scope.to_scope(),
        received,
        deleted = deletions.len(),
        added = applied.added,
        changed = applied.changed,
        removed = applied.deleted,
        "rdm pull"
    );
    Ok(applied.any() || replace)
}

/// Pulls every RDM collection with a URL on its interval ([`crate::pipeline::feeds`]: backoff after
/// failures, reload when a copy changed).
pub async fn pull_loop<H: FeedHost>(node: Arc<H>) {
    crate::pipeline::feeds::run(
        node,
        "rdm pull",
        |c| match &c.source {
            SourceConfig::Rdm {
                url: Some(url),
                interval,
                ..
            } => Some(crate::pipeline::feeds::Feed {
                url: url.clone(),
                interval: *interval,
            }),
            _ => None,
        },
        |node, config, c| async move {
            let SourceConfig::Rdm {
                url: Some(url),
                catalog,
                ..
            } = &c.source
            else {
                return Ok(false);
            };
            let client = node.http_client();
            let result = pull_once(&client, &config, &c.name, url, catalog.as_deref()).await;
            let counter = match &result {
                Ok(_) => &node.metrics().rdm_pulls,
                Err(_) => &node.metrics().rdm_pull_errors,
            };
            crate::sys::metrics::Metrics::inc(counter);
            result
        },
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rd(url: &str, title: &str) -> SoifObject {
        let mut o = SoifObject::new("DOCUMENT", url.to_owned()).unwrap();
        o.push("Title", title.as_bytes().to_vec()).unwrap();
        o
    }

    #[test]
    fn apply_upserts_deletes_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rdm/c.soif");
        let l = Limits::default();
        let a = apply(&path, vec![rd("u1", "a"), rd("u2", "b")], &[], true, l).unwrap();
        assert_eq!((a.added, a.changed, a.deleted), (2, 0, 0));
        let b = apply(
            &path,
            vec![rd("u2", "B"), rd("u3", "c")],
            &["u1".into()],
            false,
            l,
        )
        .unwrap();
        assert_eq!((b.added, b.changed, b.deleted), (1, 1, 1));
        let same = apply(&path, vec![rd("u3", "c")], &["gone".into()], false, l).unwrap();
        assert!(!same.any());
        let objs = cip_proto::soif::parse_all(std::fs::read(&path).unwrap(), l).unwrap();
        let urls: Vec<&str> = objs.iter().map(|o| o.url_str().unwrap()).collect();
        assert_eq!(urls, ["u2", "u3"]);
        apply(&path, vec![rd("u9", "z")], &[], true, l).unwrap();
        let objs = cip_proto::soif::parse_all(std::fs::read(&path).unwrap(), l).unwrap();
        assert_eq!(objs.len(), 1);
    }

    #[test]
    fn a_source_without_a_copy_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let s = RdmSource::new(
            "c",
            Some("http://x/rdm/incoming"),
            dir.path(),
            Limits::default(),
        );
        assert_eq!(s.describe(), "rdm:http://x/rdm/incoming");
        assert_eq!(s.fingerprint().unwrap(), Fingerprint(0));
        assert_eq!(
            crate::store::collection::load_all("c", &s).unwrap().0.len(),
            0
        );
    }
}
