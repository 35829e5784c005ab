//! Hina-Di in the daemon: collections read from Hina-Di files and URLs ([`HinaDiSource`]),
//! the task that fetches URL collections ([`fetch_loop`], on the schedule of [`crate::pipeline::feeds`]), and this node's own Hina-Di file
//! on the HTTP listener (`serve`).

use std::fs;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cip_proto::hinadi::{self, HinaLimits, HinaReader, Severity, propagate};
use cip_proto::soif::SoifObject;
use serde::{Deserialize, Serialize};

use crate::model::config::{HinaLocation, SourceConfig, Untrusted};
use crate::pipeline::feeds::FeedHost;
use crate::store::collection::{
    CollectionError, CollectionSource, FileSet, Fingerprint, LoadReport, PROGRESS_EVERY, Progress,
    SourceContext,
};
use crate::sys::durable;
use crate::sys::http::{FetchLimits, Fetched, HttpClient, gunzip_file};

/// The directory under `data_dir` that holds fetched copies of URL collections.
pub const FETCHED_DIR: &str = "fetched";

pub use crate::model::config::user_agent;

/// The fetched copy of URL collection `name`, and its sidecar.
pub fn fetched_paths(data_dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    crate::store::collection::data_files(data_dir, FETCHED_DIR, name, ["di", "json"])
}

/// What is known of a URL collection's last fetch (the sidecar of its copy).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchState {
    /// The URL the copy came from.
    pub url: String,
    /// The server's `Last-Modified`, sent back as `If-Modified-Since`.
    pub last_modified: Option<String>,
}

#[derive(Debug, Clone)]
enum Input {
    Files(FileSet),
    Fetched { url: String, copy: PathBuf },
}

/// A Hina-Di collection: a file, a directory of files, or the fetched copy of a URL. Each
/// entity block becomes a `HINA` summary object ([`hinadi::soif::to_object`]).
#[derive(Debug, Clone)]
pub struct HinaDiSource {
    input: Input,
    limits: HinaLimits,
    untrusted: Untrusted,
    trusted: Vec<String>,
}

impl HinaDiSource {
    /// The source for collection `name`: `location`, read in `charset` when a file declares
    /// none, keeping or skipping untrusted blocks.
    pub fn new(
        name: &str,
        location: &HinaLocation,
        charset: &'static encoding_rs::Encoding,
        untrusted: Untrusted,
        ctx: &SourceContext,
    ) -> Self {
        let input = match location {
            HinaLocation::Path {
                path,
                recursive,
                extensions,
            } => Input::Files(FileSet {
                path: path.clone(),
                recursive: *recursive,
                extensions: extensions.clone(),
            }),
            HinaLocation::Url { url, .. } => Input::Fetched {
                url: url.clone(),
                copy: fetched_paths(&ctx.data_dir, name).0,
            },
        };
        Self {
            input,
            limits: ctx.hinadi.limits(charset),
            untrusted,
            trusted: ctx.hinadi.trusted.clone(),
        }
    }

    fn files(&self) -> Result<Vec<PathBuf>, CollectionError> {
        match &self.input {
            Input::Files(f) => Ok(f.files()?.into_iter().map(|(p, _)| p).collect()),
            Input::Fetched { copy, .. } => Ok(if copy.exists() {
                vec![copy.clone()]
            } else {
                Vec::new()
            }),
        }
    }
}

/// Reads one Hina-Di file into `sink`, reporting per-line problems as `path:line: message`
/// in `report`. Untrusted blocks are dropped when `skip_untrusted` is set.
fn load_file(
    path: &Path,
    source: &HinaDiSource,
    report: &mut LoadReport,
    sink: &mut dyn FnMut(SoifObject),
    progress: &mut dyn FnMut(Progress),
    next_progress: &mut u64,
) -> Result<(), CollectionError> {
    let io_err = |source: io::Error| CollectionError::Io {
        path: path.to_owned(),
        source,
    };
    let file = fs::File::open(path).map_err(io_err)?;
    let before = report.bytes;
    report.files += 1;
    let mut reader = match HinaReader::new(BufReader::with_capacity(64 << 10, file), source.limits)
    {
        Ok(r) => r,
        Err(hinadi::HinaError::Io { source, .. }) => return Err(io_err(source)),
        Err(e) => {
            report.problem(format!("{}:{e}", path.display()));
            return Ok(());
        }
    };
    let mut untrusted = 0u64;
    loop {
        let block = match reader.next_block() {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(hinadi::HinaError::Io { source, .. }) => return Err(io_err(source)),
            Err(e) => {
                report.problem(format!("{}:{e}", path.display()));
                break;
            }
        };
        for d in reader.take_diagnostics() {
            note(report, path, &d);
        }
        if source.untrusted == Untrusted::Skip && propagate::check(&block, &source.trusted).is_err()
        {
            untrusted += 1;
            continue;
        }
        match hinadi::soif::to_object(&block) {
            Ok(obj) => {
                report.objects += 1;
                sink(obj);
            }
            Err(e) => report.problem(format!(
                "{}:{}: the block's URL cannot be kept: {e}",
                path.display(),
                block.line
            )),
        }
        report.bytes = before + reader.bytes_read();
        if report.bytes >= *next_progress {
            *next_progress = report.bytes + PROGRESS_EVERY;
            progress(Progress {
                bytes: report.bytes,
                objects: report.objects,
            });
        }
    }
    for d in reader.take_diagnostics() {
        note(report, path, &d);
    }
    report.bytes = before + reader.bytes_read();
    if untrusted > 0 {
        tracing::info!(file = %path.display(), blocks = untrusted, "left out blocks no trusted agent vouches for");
    }
    Ok(())
}

/// Errors lose data and are reported; warnings are logged at debug level.
fn note(report: &mut LoadReport, path: &Path, d: &hinadi::Diagnostic) {
    match d.severity() {
        Severity::Error => report.problem(format!("{}:{}: {}", path.display(), d.line, d.kind)),
        Severity::Warning => {
            tracing::debug!(file = %path.display(), line = d.line, warning = %d.kind, "hina-di");
        }
    }
}

impl CollectionSource for HinaDiSource {
    fn describe(&self) -> String {
        match &self.input {
            Input::Files(f) => format!("hinadi:{}", f.path.display()),
            Input::Fetched { url, .. } => format!("hinadi:{url}"),
        }
    }

    fn fingerprint(&self) -> Result<Fingerprint, CollectionError> {
        match &self.input {
            Input::Files(f) => f.fingerprint(),
            Input::Fetched { copy, .. } => Ok(match fs::metadata(copy) {
                Ok(_) => FileSet {
                    path: copy.clone(),
                    recursive: false,
                    extensions: Vec::new(),
                }
                .fingerprint()?,
                // Not fetched yet.
                Err(_) => Fingerprint(0),
            }),
        }
    }

    fn load(
        &self,
        sink: &mut dyn FnMut(SoifObject),
        progress: &mut dyn FnMut(Progress),
    ) -> Result<LoadReport, CollectionError> {
        let mut report = LoadReport::default();
        let mut next_progress = PROGRESS_EVERY;
        for path in self.files()? {
            load_file(&path, self, &mut report, sink, progress, &mut next_progress)?;
        }
        Ok(report)
    }
}

/// Fetches every URL collection on its interval ([`crate::pipeline::feeds`]), keeping the copy under
/// `data_dir` and reloading the collections whose copy changed.
pub async fn fetch_loop<H: FeedHost>(node: Arc<H>) {
    crate::pipeline::feeds::run(
        node,
        "hina-di fetch",
        |c| match &c.source {
            SourceConfig::HinaDi {
                location: HinaLocation::Url { url, interval },
                ..
            } => Some(crate::pipeline::feeds::Feed {
                url: url.clone(),
                interval: *interval,
            }),
            _ => None,
        },
        |node, config, c| async move {
            let SourceConfig::HinaDi {
                location: HinaLocation::Url { url, .. },
                ..
            } = &c.source
            else {
                return Ok(false);
            };
            let client = node.http_client();
            let result = fetch_one(&client, &config.data_dir, &c.name, url, &config.hinadi).await;
            let counter = match &result {
                Ok(_) => &node.metrics().hinadi_fetches,
                Err(_) => &node.metrics().hinadi_fetch_errors,
            };
            crate::sys::metrics::Metrics::inc(counter);
            result
        },
    )
    .await;
}

/// One fetch of `url` into collection `name`'s copy; true when the copy changed.
///
/// # Errors
/// Why the fetch, or keeping its copy, failed.
async fn fetch_one(
    client: &HttpClient,
    data_dir: &Path,
    name: &str,
    url: &str,
    cfg: &crate::model::config::HinaDiConfig,
) -> Result<bool, String> {
    let (copy, sidecar) = fetched_paths(data_dir, name);
    let state: FetchState = fs::read(&sidecar)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    // Revalidate only a copy of this very URL that is still there.
    let ims = (state.url == url && copy.exists())
        .then_some(state.last_modified.as_deref())
        .flatten();
    let limits = FetchLimits {
        timeout: cfg.fetch_timeout,
        max_bytes: cfg.max_fetch_bytes,
    };
    let fetched = client
        .get(url, ims, limits)
        .await
        .map_err(|e| e.to_string())?;
    let Fetched::Body {
        bytes,
        last_modified,
        ..
    } = fetched
    else {
        tracing::debug!(collection = name, url, "hina-di unchanged");
        return Ok(false);
    };
    let state = FetchState {
        url: url.to_owned(),
        last_modified,
    };
    let max = cfg.max_fetch_bytes;
    crate::sys::net::spawn_blocking(move || {
        // A `.di.gz` file (gzip as a file, not as a transfer encoding) is kept decoded.
        let text = gunzip_file(bytes, max)?;
        durable::write(&copy, &text)
            .and_then(|()| {
                durable::write(&sidecar, &serde_json::to_vec(&state).unwrap_or_default())
            })
            .map_err(|e| format!("cannot keep the fetched file: {e}"))
    })
    .await
    .map_err(|e| format!("write task failed: {e}"))??;
    tracing::info!(collection = name, url, "hina-di fetched");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::HinaDiConfig;
    use crate::store::collection::load_all;

    fn ctx(dir: &Path, trusted: &[&str]) -> SourceContext {
        SourceContext {
            soif: cip_proto::soif::Limits::default(),
            data_dir: dir.to_owned(),
            hinadi: HinaDiConfig {
                trusted: trusted.iter().map(|s| (*s).to_owned()).collect(),
                ..HinaDiConfig::default()
            },
        }
    }

    fn source(path: &Path, untrusted: Untrusted, ctx: &SourceContext) -> HinaDiSource {
        HinaDiSource::new(
            "t",
            &HinaLocation::Path {
                path: path.to_owned(),
                recursive: true,
                extensions: vec!["di".into()],
            },
            encoding_rs::EUC_JP,
            untrusted,
            ctx,
        )
    }

    const FILE: &str = "HINA/2.2beta\nUser-Agent: t\n\n\
        URL: http://a.jp/\nTitle: 日記\nKeyword: 音楽: 旅行\n\
        Authorized: WDB/2.10\nAuthorized-url: http://agent.jp/\n\n\
        URL: http://b.jp/\nTitle: untrusted\n\n\
        URL: http://c.jp/\nTitle: x\nTitle: y\n";

    #[test]
    fn loads_euc_jp_blocks_as_hina_objects() {
        let dir = tempfile::tempdir().unwrap();
        let (bytes, _, _) = encoding_rs::EUC_JP.encode(FILE);
        fs::write(dir.path().join("a.di"), &bytes).unwrap();
        fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let ctx = ctx(dir.path(), &["http://agent.jp"]);
        let s = source(dir.path(), Untrusted::Index, &ctx);
        let (objs, report, fp) = load_all("t", &s).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[0].template().as_str(), "HINA");
        assert_eq!(&objs[0].first("Title").unwrap()[..], "日記".as_bytes());
        let kws: Vec<_> = objs[0].values("Keyword").collect();
        assert_eq!(kws.len(), 2);
        assert_eq!(report.skipped, 1, "{:?}", report.problems);
        assert!(
            report.problems[0].contains("a.di:15: field Title repeats"),
            "{:?}",
            report.problems
        );
        assert!(fp.is_some());
        let strict = source(dir.path(), Untrusted::Skip, &ctx);
        let (objs, _, _) = load_all("t", &strict).unwrap();
        assert_eq!(objs.len(), 1, "only the trusted block is kept");
        assert_eq!(objs[0].url_str(), Some("http://a.jp/"));
    }

    #[test]
    fn a_file_that_is_not_hina_di_is_a_problem_not_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.di"), "<html>\n").unwrap();
        fs::write(dir.path().join("b.di"), &encoding_rs::EUC_JP.encode(FILE).0).unwrap();
        let ctx = ctx(dir.path(), &[]);
        let (objs, report, _) = load_all("t", &source(dir.path(), Untrusted::Index, &ctx)).unwrap();
        assert_eq!(objs.len(), 2);
        assert!(
            report.problems[0].contains("a.di:line 1: not a Hina-Di file"),
            "{:?}",
            report.problems
        );
    }

    #[test]
    fn an_unfetched_url_is_empty_until_its_copy_exists() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path(), &[]);
        let s = HinaDiSource::new(
            "remote",
            &HinaLocation::Url {
                url: "http://x.jp/hina.di".into(),
                interval: std::time::Duration::from_secs(60),
            },
            encoding_rs::UTF_8,
            Untrusted::Index,
            &ctx,
        );
        assert_eq!(s.describe(), "hinadi:http://x.jp/hina.di");
        let (objs, _, fp) = load_all("remote", &s).unwrap();
        assert!(objs.is_empty());
        assert_eq!(fp, Some(Fingerprint(0)));
        durable::write(&fetched_paths(dir.path(), "remote").0, FILE.as_bytes()).unwrap();
        assert_ne!(s.fingerprint().unwrap(), Fingerprint(0));
        assert_eq!(load_all("remote", &s).unwrap().0.len(), 2);
    }
}
