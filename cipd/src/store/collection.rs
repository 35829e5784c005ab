//! Local collections: where this node's own objects come from.
//!
//! A [`CollectionSource`] yields SOIF objects and a cheap change [`Fingerprint`]. SOIF files and
//! directories ([`SoifSource`]) and the bundled sample ([`SampleSource`]) implement it here;
//! the pulled sources above (Hina-Di files and URLs, RDM catalogs) implement the same trait,
//! and `pipeline::sources` picks one per collection. Loading is blocking work (the daemon
//! runs it on the blocking pool); a broken object is reported and skipped, never fatal.

use std::hash::{Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use cip_proto::soif::{Limits, SoifErrorKind, SoifObject};

use crate::model::config::HinaDiConfig;
use crate::store::soif_io;

/// Most per-object problems kept in a [`LoadReport`]; the rest are only counted.
pub const MAX_REPORTED_PROBLEMS: usize = 20;

/// Bytes between two progress callbacks while loading.
pub const PROGRESS_EVERY: u64 = 64 << 20;

/// A summary of the files behind a collection; it changes when any of them changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub u64);

/// What one load found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Objects delivered.
    pub objects: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Files read.
    pub files: u64,
    /// Objects skipped because they could not be parsed.
    pub skipped: u64,
    /// The first [`MAX_REPORTED_PROBLEMS`] problems (file and byte offset included).
    pub problems: Vec<String>,
}

impl LoadReport {
    /// Counts a skipped object and keeps its message (the first few).
    pub fn problem(&mut self, msg: String) {
        self.skipped += 1;
        if self.problems.len() < MAX_REPORTED_PROBLEMS {
            self.problems.push(msg);
        }
    }
}

/// Progress of a load, for the "loading ..." log line of large collections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes read so far.
    pub bytes: u64,
    /// Objects delivered so far.
    pub objects: u64,
}

/// Why a collection could not be loaded at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectionError {
    /// A file or directory could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

/// A source of local objects.
pub trait CollectionSource: Send + Sync + std::fmt::Debug {
    /// A short description for logs (`soif:/srv/docs`).
    fn describe(&self) -> String;

    /// The current fingerprint; cheap (metadata only). A reload is due when it differs from
    /// the one taken at the last load.
    ///
    /// # Errors
    /// When the source cannot be examined.
    fn fingerprint(&self) -> Result<Fingerprint, CollectionError>;

    /// Reads every object, handing each to `sink` and calling `progress` now and then.
    /// Unparsable objects are skipped and counted in the report.
    ///
    /// # Errors
    /// When the source cannot be read at all.
    fn load(
        &self,
        sink: &mut dyn FnMut(SoifObject),
        progress: &mut dyn FnMut(Progress),
    ) -> Result<LoadReport, CollectionError>;
}

/// A collection name as a file-name stem: its bytes in hex, so any name is a safe, distinct
/// file name (the stores, fetched copies, journals and pull states under `data_dir`).
pub fn file_stem(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Two files of collection `name` under `data_dir/dir`: `<stem>.<first>` and
/// `<stem>.<second>` (a copy and its sidecar).
pub fn data_files(
    data_dir: &Path,
    dir: &str,
    name: &str,
    [first, second]: [&str; 2],
) -> (PathBuf, PathBuf) {
    let stem = file_stem(name);
    let dir = data_dir.join(dir);
    (
        dir.join(format!("{stem}.{first}")),
        dir.join(format!("{stem}.{second}")),
    )
}

/// What building a source needs besides its own configuration.
#[derive(Debug, Clone)]
pub struct SourceContext {
    /// SOIF parser limits.
    pub soif: Limits,
    /// The data directory (fetched copies of URL sources live under it).
    pub data_dir: PathBuf,
    /// Hina-Di reading and trust.
    pub hinadi: HinaDiConfig,
}

/// A file, or the files of a directory, read in a stable order.
#[derive(Debug, Clone)]
pub struct FileSet {
    /// File or directory.
    pub path: PathBuf,
    /// Descend into subdirectories.
    pub recursive: bool,
    /// Extensions to read from directories (empty: every file).
    pub extensions: Vec<String>,
}

impl FileSet {
    /// The files to read, sorted, so loads and fingerprints are deterministic.
    ///
    /// # Errors
    /// When the path or a directory under it cannot be read.
    pub fn files(&self) -> Result<Vec<(PathBuf, std::fs::Metadata)>, CollectionError> {
        let io_err = |path: &Path| {
            let path = path.to_owned();
            move |source| CollectionError::Io { path, source }
        };
        let meta = std::fs::metadata(&self.path).map_err(io_err(&self.path))?;
        if !meta.is_dir() {
            return Ok(vec![(self.path.clone(), meta)]);
        }
        let mut out = Vec::new();
        let mut dirs = vec![self.path.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
                let entry = entry.map_err(io_err(&dir))?;
                let path = entry.path();
                // Follow symlinks: operators link collections in from elsewhere.
                let meta = std::fs::metadata(&path).map_err(io_err(&path))?;
                if meta.is_dir() {
                    if self.recursive {
                        dirs.push(path);
                    }
                } else if meta.is_file() && self.wanted(&path) {
                    out.push((path, meta));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    fn wanted(&self, path: &Path) -> bool {
        if self.extensions.is_empty() {
            return true;
        }
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        self.extensions
            .iter()
            .any(|e| e.trim_start_matches('.').eq_ignore_ascii_case(ext))
    }

    /// A fingerprint of the files' names, sizes and modification times.
    ///
    /// # Errors
    /// As [`FileSet::files`].
    pub fn fingerprint(&self) -> Result<Fingerprint, CollectionError> {
        let mut h = std::hash::DefaultHasher::new();
        for (path, meta) in self.files()? {
            path.hash(&mut h);
            meta.len().hash(&mut h);
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok());
            mtime.unwrap_or(Duration::ZERO).hash(&mut h);
        }
        Ok(Fingerprint(h.finish()))
    }
}

/// A SOIF file, or a directory of SOIF files.
#[derive(Debug, Clone)]
pub struct SoifSource {
    /// The files.
    pub files: FileSet,
    /// Parser limits.
    pub limits: Limits,
}

impl CollectionSource for SoifSource {
    fn describe(&self) -> String {
        format!("soif:{}", self.files.path.display())
    }

    fn fingerprint(&self) -> Result<Fingerprint, CollectionError> {
        self.files.fingerprint()
    }

    fn load(
        &self,
        sink: &mut dyn FnMut(SoifObject),
        progress: &mut dyn FnMut(Progress),
    ) -> Result<LoadReport, CollectionError> {
        let mut report = LoadReport::default();
        let mut next_progress = PROGRESS_EVERY;
        for (path, _) in self.files.files()? {
            let mut reader =
                soif_io::open(&path, self.limits).map_err(|source| CollectionError::Io {
                    path: path.clone(),
                    source,
                })?;
            report.files += 1;
            let before = report.bytes;
            loop {
                match reader.next_object() {
                    Ok(Some(obj)) => {
                        report.objects += 1;
                        sink(obj);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        if let SoifErrorKind::Io(io) = e.kind() {
                            let source = io::Error::new(io.kind(), io.to_string());
                            return Err(CollectionError::Io { path, source });
                        }
                        report.problem(format!("{}: {e}", path.display()));
                    }
                }
                report.bytes = before + reader.bytes_read();
                if report.bytes >= next_progress {
                    next_progress = report.bytes + PROGRESS_EVERY;
                    progress(Progress {
                        bytes: report.bytes,
                        objects: report.objects,
                    });
                }
            }
            report.bytes = before + reader.bytes_read();
        }
        Ok(report)
    }
}

/// The sample collection bundled with cipd (see [`crate::store::sample`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct SampleSource;

impl CollectionSource for SampleSource {
    fn describe(&self) -> String {
        "sample (bundled)".to_owned()
    }

    fn fingerprint(&self) -> Result<Fingerprint, CollectionError> {
        Ok(Fingerprint(crate::store::sample::SAMPLE_SOIF.len() as u64))
    }

    fn load(
        &self,
        sink: &mut dyn FnMut(SoifObject),
        _progress: &mut dyn FnMut(Progress),
    ) -> Result<LoadReport, CollectionError> {
        let mut report = LoadReport {
            files: 1,
            ..LoadReport::default()
        };
        let reader =
            soif_io::SoifFileReader::new(crate::store::sample::SAMPLE_SOIF, Limits::default());
        for obj in reader {
            match obj {
                Ok(o) => {
                    report.objects += 1;
                    sink(o);
                }
                Err(e) => report.problem(format!("sample: {e}")),
            }
        }
        report.bytes = crate::store::sample::SAMPLE_SOIF.len() as u64;
        Ok(report)
    }
}

/// Loads `source` completely into memory, logging a progress line for large ones (tools
/// and tests; the daemon streams with [`load_with`]).
///
/// # Errors
/// As [`CollectionSource::load`].
pub fn load_all(
    name: &str,
    source: &dyn CollectionSource,
) -> Result<(Vec<SoifObject>, LoadReport, Option<Fingerprint>), CollectionError> {
    let mut objects = Vec::new();
    let (report, fingerprint) = load_with(name, source, &mut |o| objects.push(o))?;
    Ok((objects, report, fingerprint))
}

/// A receiver of a collection's load progress (its name, how far).
type ProgressHook = Box<dyn Fn(&str, Progress)>;

thread_local! {
    /// Where [`load_with`] on this thread reports progress besides the log (see
    /// [`with_progress`]).
    static PROGRESS: std::cell::RefCell<Option<ProgressHook>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with `hook` receiving the progress of every collection [`load_with`] reads on
/// this thread (every [`PROGRESS_EVERY`] bytes and at each collection's end): how a start
/// shows how far its collection loads are without threading a callback through the store.
pub fn with_progress<R>(hook: impl Fn(&str, Progress) + 'static, f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            PROGRESS.with(|p| p.borrow_mut().take());
        }
    }
    PROGRESS.with(|p| *p.borrow_mut() = Some(Box::new(hook)));
    let _reset = Reset;
    f()
}

fn report_progress(name: &str, p: Progress) {
    PROGRESS.with(|hook| {
        if let Some(h) = hook.borrow().as_ref() {
            h(name, p);
        }
    });
}

/// Reads `source`, handing each object to `sink`, logging a progress line for large
/// collections and a summary at the end. The fingerprint is taken before the read, so a
/// change during it shows up at the next check.
///
/// # Errors
/// As [`CollectionSource::load`].
pub fn load_with(
    name: &str,
    source: &dyn CollectionSource,
    sink: &mut dyn FnMut(SoifObject),
) -> Result<(LoadReport, Option<Fingerprint>), CollectionError> {
    let fingerprint = source.fingerprint().ok();
    let started = Instant::now();
    let report = source.load(sink, &mut |p| {
        tracing::info!(
            collection = name,
            bytes = p.bytes,
            objects = p.objects,
            "loading collection"
        );
        report_progress(name, p);
    })?;
    report_progress(
        name,
        Progress {
            bytes: report.bytes,
            objects: report.objects,
        },
    );
    tracing::info!(
        collection = name,
        source = %source.describe(),
        objects = report.objects,
        files = report.files,
        skipped = report.skipped,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "collection loaded"
    );
    for p in &report.problems {
        tracing::warn!(collection = name, problem = %p, "skipped an object");
    }
    Ok((report, fingerprint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(path: &Path) -> SoifSource {
        SoifSource {
            files: FileSet {
                path: path.to_owned(),
                recursive: true,
                extensions: vec!["soif".into()],
            },
            limits: Limits::default(),
        }
    }

    #[test]
    fn loads_a_directory_and_skips_broken_objects() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.soif"),
            "@FILE { u1\nTitle{1}:\tA\n}\n@FILE { u2\nT{x}:\t1\n}\n",
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(
            dir.path().join("sub/b.soif"),
            "@DOCUMENT { u3\nAuthor{2}:\tBo\n}\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not soif").unwrap();
        let (objs, report, fp) = load_all("t", &src(dir.path())).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(report.objects, 2);
        assert_eq!(report.files, 2);
        assert_eq!(report.skipped, 1);
        assert!(
            report.problems[0].contains("a.soif"),
            "{:?}",
            report.problems
        );
        assert!(fp.is_some());
    }

    #[test]
    fn progress_reaches_the_hook_on_this_thread_only_while_it_is_set() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.soif");
        std::fs::write(&f, "@FILE { u\nTitle{1}:\tA\n}\n@FILE { v\n}\n").unwrap();
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let log = seen.clone();
        let loaded = with_progress(
            move |name: &str, p: Progress| log.borrow_mut().push((name.to_owned(), p)),
            || load_all("docs", &src(&f)),
        );
        assert_eq!(loaded.unwrap().0.len(), 2);
        let bytes = std::fs::metadata(&f).unwrap().len();
        assert_eq!(
            *seen.borrow(),
            [("docs".to_owned(), Progress { bytes, objects: 2 })]
        );
        // Unset afterwards: a later load reports nothing.
        load_all("docs", &src(&f)).unwrap();
        assert_eq!(seen.borrow().len(), 1);
    }

    #[test]
    fn fingerprint_follows_changes() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.soif");
        std::fs::write(&f, "@FILE { u\n}\n").unwrap();
        let s = src(&f);
        let a = s.fingerprint().unwrap();
        assert_eq!(a, s.fingerprint().unwrap());
        std::fs::write(&f, "@FILE { u\n}\n@FILE { v\n}\n").unwrap();
        assert_ne!(a, s.fingerprint().unwrap());
    }

    #[test]
    fn missing_path_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = load_all("t", &src(&dir.path().join("gone"))).unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
    }

    #[test]
    fn extension_filter() {
        let mut s = src(Path::new("/x")).files;
        assert!(s.wanted(Path::new("/x/a.SOIF")));
        assert!(!s.wanted(Path::new("/x/a.txt")));
        s.extensions.clear();
        assert!(s.wanted(Path::new("/x/a.txt")));
    }

    #[test]
    fn sample_loads_cleanly() {
        let (objs, report, _) = load_all("sample", &SampleSource).unwrap();
        assert!(objs.len() >= 24, "{}", objs.len());
        assert_eq!(report.skipped, 0, "{:?}", report.problems);
    }
}
