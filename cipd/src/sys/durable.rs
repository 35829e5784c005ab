//! Durable, atomic file writes: the one way the daemon replaces a file.
//!
//! `write` and `write_with` write the new content to a temporary file in the target's
//! own directory (a unique name beginning with `.` and the target's name, ending in
//! [`TEMP_SUFFIX`]), flush and fsync it, rename it over the target, and fsync the
//! directory, so after a crash or power cut the target holds either the old content or the
//! new, never a mix and never nothing. On every error path the temporary file is removed
//! and the target is left as it was.

use std::fs::{self, File, Permissions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The suffix of temporary files; a directory scan can recognise (and remove) what a
/// crash between create and rename left behind.
pub const TEMP_SUFFIX: &str = ".tmp";

/// The mode of files written for others to read: `0666` less the umask, as `File::create`.
const SHARED_MODE: u32 = 0o666;

/// The write buffer: large files (collection caches) go out in few system calls.
const WRITE_BUFFER: usize = 256 << 10;

/// The mode of private files (keys, secrets): owner only.
const PRIVATE_MODE: u32 = 0o600;

/// Replaces `path` with `bytes` atomically and durably, creating its directory if needed.
///
/// # Errors
/// Any I/O error; the old content (or absence) of `path` is then kept, and no temporary
/// file is left.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_with(path, |w| w.write_all(bytes))
}

/// Like `write`, for a file only its owner may read (mode `0600` from creation on).
///
/// # Errors
/// As `write`.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace(path, PRIVATE_MODE, Existing::Replace, |w| {
        w.write_all(bytes)
    })
}

/// Writes a new file `path` with `mode` from its creation on (a key is never readable by
/// others, not even for a moment), durably; when `path` exists it is left alone and the
/// error is [`io::ErrorKind::AlreadyExists`].
///
/// # Errors
/// As `write`, and `AlreadyExists`.
pub fn create_new(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    replace(path, mode, Existing::Keep, |w| w.write_all(bytes))
}

/// What to do with a file already at the target path.
#[derive(Clone, Copy)]
enum Existing {
    Replace,
    Keep,
}

/// Like `write`, with the content written by `fill` into a buffered writer: large
/// content is streamed, not built in memory first.
///
/// # Errors
/// An error of `fill` or of the file system; the target is then left as it was, and no
/// temporary file is left.
pub fn write_with(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<&mut File>) -> io::Result<()>,
) -> io::Result<()> {
    replace(path, SHARED_MODE, Existing::Replace, fill)
}

/// Like [`write_with`], and hands back the file as written (open for reading and
/// writing), for a store that reads what it just wrote.
///
/// # Errors
/// As [`write_with`].
pub fn write_and_open(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<&mut File>) -> io::Result<()>,
) -> io::Result<File> {
    replace_open(path, SHARED_MODE, Existing::Replace, fill)
}

fn replace(
    path: &Path,
    mode: u32,
    existing: Existing,
    fill: impl FnOnce(&mut BufWriter<&mut File>) -> io::Result<()>,
) -> io::Result<()> {
    replace_open(path, mode, existing, fill).map(drop)
}

fn replace_open(
    path: &Path,
    mode: u32,
    existing: Existing,
    fill: impl FnOnce(&mut BufWriter<&mut File>) -> io::Result<()>,
) -> io::Result<File> {
    stage_with_mode(path, mode, fill)?.commit_as(existing)
}

/// A new content for a file, written and fsynced beside it under a temporary name, not yet
/// in place: [`Staged::commit`] renames it over the target; dropping it removes it.
///
/// Lets a caller write a large file before it knows whether it wants it, and hold no copy
/// of the content meanwhile (the spool writes an in-bound hint so before importing it).
#[derive(Debug)]
pub struct Staged {
    tmp: tempfile::NamedTempFile,
    path: std::path::PathBuf,
}

/// Like [`write_with`], but leaves the written file staged beside `path` until
/// [`Staged::commit`].
///
/// # Errors
/// As [`write_with`]; no temporary file is left then.
pub fn stage_with(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<&mut File>) -> io::Result<()>,
) -> io::Result<Staged> {
    stage_with_mode(path, SHARED_MODE, fill)
}

fn stage_with_mode(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut BufWriter<&mut File>) -> io::Result<()>,
) -> io::Result<Staged> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file path", path.display()),
        )
    })?;
    let dir = parent(path);
    fs::create_dir_all(dir)?;
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    // The temporary file is removed when `tmp` is dropped, on every return below and
    // whenever the `Staged` is dropped uncommitted.
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(TEMP_SUFFIX)
        .permissions(Permissions::from_mode(mode))
        .tempfile_in(dir)?;
    {
        let mut w = BufWriter::with_capacity(WRITE_BUFFER, tmp.as_file_mut());
        fill(&mut w)?;
        w.flush()?;
    }
    tmp.as_file().sync_all()?;
    Ok(Staged {
        tmp,
        path: path.to_owned(),
    })
}

/// The directory of `path` (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

impl Staged {
    /// Puts the staged content in place, replacing the target, and fsyncs the directory.
    ///
    /// # Errors
    /// When the rename or the directory sync fails; the target is then as it was (or, for
    /// a failed directory sync, already replaced but perhaps not durably).
    pub fn commit(self) -> io::Result<()> {
        self.commit_as(Existing::Replace).map(drop)
    }

    fn commit_as(self, existing: Existing) -> io::Result<File> {
        let Self { tmp, path } = self;
        let file = match existing {
            Existing::Replace => tmp.persist(&path),
            Existing::Keep => tmp.persist_noclobber(&path),
        }
        .map_err(|e| e.error)?;
        sync_dir(parent(&path))?;
        Ok(file)
    }
}

/// Fsyncs a directory, so that a rename or removal in it survives a crash.
///
/// # Errors
/// When the directory cannot be opened or synced.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    // Some file systems cannot sync a directory (`EINVAL`) or open one for it; there the
    // rename is as durable as the file system makes it.
    match File::open(dir).and_then(|d| d.sync_all()) {
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::InvalidInput | io::ErrorKind::PermissionDenied
            ) =>
        {
            Ok(())
        }
        r => r,
    }
}

/// True when `name` is a temporary file of this module (left by a crash mid-write).
pub fn is_temp(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(TEMP_SUFFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("copy.di");
        write(&path, b"one").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"one");
        write(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(names(&dir.path().join("sub")), ["copy.di"]);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o600, 0o600, "{mode:o}");
    }

    #[test]
    fn a_write_failing_midway_leaves_the_old_content_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        write(&path, b"old content\n").unwrap();
        let e = write_with(&path, |w| {
            w.write_all(b"half of the new ")?;
            Err(io::Error::other("disk gone"))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "disk gone");
        assert_eq!(fs::read(&path).unwrap(), b"old content\n");
        assert_eq!(names(dir.path()), ["journal"]);
    }

    #[test]
    fn a_failed_rename_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // A directory stands where the file should go: the rename fails.
        let path = dir.path().join("taken");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("inside"), b"x").unwrap();
        assert!(write(&path, b"new").is_err());
        assert_eq!(names(dir.path()), ["taken"]);
        assert_eq!(names(&path), ["inside"]);
    }

    #[test]
    fn private_files_are_the_owners_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.key");
        write_private(&path, b"secret").unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn create_new_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.pub");
        create_new(&path, b"first", 0o644).unwrap();
        let e = create_new(&path, b"second", 0o644).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).unwrap(), b"first");
        assert_eq!(names(dir.path()), ["node.pub"]);
    }

    #[test]
    fn temporary_names_are_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.soif");
        let seen = std::cell::RefCell::new(Vec::new());
        write_with(&path, |w| {
            seen.replace(names(dir.path()));
            w.write_all(b"x")
        })
        .unwrap();
        let during = seen.into_inner();
        assert_eq!(during.len(), 1, "{during:?}");
        assert!(is_temp(&during[0]), "{during:?}");
        assert!(during[0].starts_with(".x.soif."), "{during:?}");
        assert!(!is_temp("x.soif"));
    }
}
