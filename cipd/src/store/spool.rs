//! The spool: every accepted in-bound index object, kept on disk so a restarted node has its
//! routing table back before any peer answers.
//!
//! One file per (peer, DSI), replaced atomically: write a temporary file in the same
//! directory, fsync it, rename it over the old one, fsync the directory. A crash at any point
//! leaves either the old file or the new one, plus at worst a temporary file that the next
//! [`Spool::open`] removes. Each file carries its payload length and a CRC-32 over header and
//! payload, so a torn or bit-rotted file is detected, reported, moved aside (`*.corrupt`) and
//! skipped — never fatal.
//!
//! File format (text header, binary-safe payload):
//!
//! ```text
//! cipd-spool 1
//! peer: <peer name>
//! dsi: <dsi>
//! type: <index type>
//! base-uri: <uri> [<uri> ...]
//! dsi-description: <text>          (optional)
//! received: <unix seconds>
//! length: <payload bytes>
//! crc32: <8 hex digits over every byte above this line and the payload>
//!
//! <payload>
//! ```

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cip_proto::Dsi;

use crate::sys::durable;

const MAGIC: &str = "cipd-spool 1\n";
const SUFFIX: &str = ".spool";
/// Marks the temporary files of earlier versions (now [`durable`]'s), removed at open.
const TMP_MARK: &str = ".tmp.";
/// Suffix of entries set aside at start (their peer or DSI no longer match).
const SET_ASIDE: &str = ".set-aside";
/// Largest header we read before giving up on a file.
const MAX_HEADER: usize = 64 << 10;
/// Suffix of a spool file's delta journal (added to the file's name).
const JOURNAL: &str = ".deltas";
/// Starts each journal record: `cipd-delta 1 <length> <crc32>\n<delta>\n`.
const RECORD_MAGIC: &str = "cipd-delta 1 ";

/// One stored in-bound index object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolEntry {
    /// The configured peer it came from.
    pub peer: String,
    /// The object's DSI.
    pub dsi: Dsi,
    /// The index type (`HARVEST-SOIF-1`).
    pub index_type: String,
    /// The object's base URIs.
    pub base_uris: Vec<String>,
    /// Its DSI-description, if any.
    pub description: Option<String>,
    /// When it was accepted.
    pub received: SystemTime,
    /// The index object's payload, as received (transfer encoding removed).
    pub payload: Bytes,
}

/// A stored hint, journal applied ([`Spool::load_hint`]).
#[derive(Debug)]
pub struct StoredHint {
    /// The file as read (its payload the hint before the journal).
    pub entry: SpoolEntry,
    /// The hint: the file's with the journal's deltas applied.
    pub hint: hints::hint::CipHint,
    /// Why the journal was read or applied only in part, if it was.
    pub partial: Option<String>,
    /// Deltas applied.
    pub applied: usize,
}

/// Why a spool file could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpoolError {
    /// Reading or writing failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The file is not a well-formed spool file.
    #[error("{}: corrupt spool file: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The entry cannot be written as asked (a header value with a line break).
    #[error("cannot store {field}: it holds a line break")]
    BadField {
        /// The field.
        field: &'static str,
    },
}

/// What [`Spool::load_all`] found.
#[derive(Debug, Default)]
pub struct LoadOutcome {
    /// Entries that are intact and younger than the TTL.
    pub entries: Vec<SpoolEntry>,
    /// Files that could not be used (already moved aside).
    pub corrupt: Vec<SpoolError>,
    /// Entries older than the TTL (removed).
    pub expired: usize,
}

/// The spool directory.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
}

impl Spool {
    /// Opens (creating it if needed) the spool in `dir` and removes temporary files a crash
    /// may have left.
    ///
    /// # Errors
    /// When the directory cannot be created or listed.
    pub fn open(dir: &Path) -> Result<Self, SpoolError> {
        let io_err = |source| SpoolError::Io {
            path: dir.to_owned(),
            source,
        };
        fs::create_dir_all(dir).map_err(io_err)?;
        for entry in fs::read_dir(dir).map_err(io_err)? {
            let entry = entry.map_err(io_err)?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if durable::is_temp(&name) || name.contains(TMP_MARK) {
                tracing::info!(file = %entry.path().display(), "removing unfinished spool write");
                // Best effort: a leftover we cannot remove is harmless (never read).
                let _ = fs::remove_file(entry.path());
            }
        }
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds (peer, dsi).
    pub fn path_for(&self, peer: &str, dsi: &Dsi) -> PathBuf {
        self.dir.join(file_name(peer, dsi))
    }

    /// Stores `entry` atomically, replacing any earlier object for the same (peer, DSI).
    ///
    /// # Errors
    /// On I/O failure (the previous file, if any, is then still intact) or when a header
    /// field holds a line break.
    pub fn store(&self, entry: &SpoolEntry) -> Result<PathBuf, SpoolError> {
        self.stage(entry)?.commit()
    }

    /// Writes `entry` durably beside its place, without putting it there: [`StagedEntry::commit`]
    /// does (replacing any earlier object for the same peer and DSI), dropping the
    /// [`StagedEntry`] forgets it. The daemon stages a hint before importing it, so that
    /// nothing needs to hold its payload once the table has read it.
    ///
    /// # Errors
    /// On I/O failure (no temporary file is left) or when a header field holds a line break.
    pub fn stage(&self, entry: &SpoolEntry) -> Result<StagedEntry, SpoolError> {
        let head = encode_head(entry)?;
        let target = self.path_for(&entry.peer, &entry.dsi);
        // The payload goes out from where it is, never copied next to its header.
        let staged = durable::stage_with(&target, |w| {
            w.write_all(&head)?;
            w.write_all(&entry.payload)
        })
        .map_err(|source| SpoolError::Io {
            path: target.clone(),
            source,
        })?;
        Ok(StagedEntry { staged, target })
    }

    /// The journal of (peer, dsi): the deltas applied to its hint since the file was
    /// written ([`Spool::append_delta`]).
    pub fn journal_path(&self, peer: &str, dsi: &Dsi) -> PathBuf {
        journal_of(&self.path_for(peer, dsi))
    }

    /// Appends `delta` (a `CIP-HINT-DELTA` object's bytes) to the journal of (peer, dsi),
    /// durably: the stored hint is now the file's with the journal's deltas applied in
    /// turn ([`Spool::journal`]). So a change costs the spool its own size, not the
    /// hint's. Returns the journal's length and the file's, for the caller to decide when
    /// to write the hint whole again ([`Spool::store`] empties the journal).
    ///
    /// # Errors
    /// When no file is stored for (peer, dsi), or on I/O failure (a record torn by a crash
    /// is dropped when the journal is read).
    pub fn append_delta(
        &self,
        peer: &str,
        dsi: &Dsi,
        delta: &[u8],
    ) -> Result<(u64, u64), SpoolError> {
        let path = self.path_for(peer, dsi);
        let io_err = |path: &Path| {
            let path = path.to_owned();
            move |source| SpoolError::Io { path, source }
        };
        let file_len = fs::metadata(&path).map_err(io_err(&path))?.len();
        let journal = journal_of(&path);
        let mut record = format!(
            "{RECORD_MAGIC}{} {:08x}\n",
            delta.len(),
            crc32fast::hash(delta)
        )
        .into_bytes();
        record.extend_from_slice(delta);
        record.push(b'\n');
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&journal)
            .map_err(io_err(&journal))?;
        file.write_all(&record).map_err(io_err(&journal))?;
        file.sync_data().map_err(io_err(&journal))?;
        let len = file.metadata().map_err(io_err(&journal))?.len();
        Ok((len, file_len))
    }

    /// The deltas journalled for (peer, dsi), in order, and why reading stopped early,
    /// if it did (a record torn by a crash, or damaged): the records before it stand.
    pub fn journal(&self, peer: &str, dsi: &Dsi) -> (Vec<Bytes>, Option<String>) {
        let path = self.journal_path(peer, dsi);
        match fs::read(&path) {
            Ok(bytes) => read_journal(&bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => (Vec::new(), None),
            Err(e) => (Vec::new(), Some(format!("{}: {e}", path.display()))),
        }
    }

    /// The hint stored for (peer, dsi): the file's, with its journal's deltas applied in
    /// turn ([`replay`]).
    ///
    /// # Errors
    /// When no file is stored, or its payload is not one hint.
    pub fn load_hint(
        &self,
        peer: &str,
        dsi: &Dsi,
        limits: cip_proto::soif::Limits,
    ) -> Result<StoredHint, String> {
        let entry = self.load(peer, dsi).map_err(|e| e.to_string())?;
        let objects = cip_proto::soif::parse_all(entry.payload.clone(), limits)
            .map_err(|e| format!("spooled payload is not SOIF: {e}"))?;
        let [obj] = objects.as_slice() else {
            return Err(format!(
                "expected one spooled hint, found {}",
                objects.len()
            ));
        };
        let (hint, _) = hints::hint::CipHint::from_soif(obj).map_err(|e| e.to_string())?;
        let (deltas, torn) = self.journal(peer, dsi);
        let (hint, applied, stopped) = replay(hint, &deltas, limits);
        Ok(StoredHint {
            entry,
            hint,
            partial: torn.or(stopped),
            applied,
        })
    }

    /// Writes the hint stored for (peer, dsi) whole (emptying its journal) once the journal
    /// holds more than the file and `min` bytes: a change costs the spool its own size,
    /// and the file's size once per file's worth of deltas. True when it was written.
    ///
    /// # Errors
    /// When it cannot be read or written, or the journal is read only in part (the file
    /// and its journal are then left as they are).
    pub fn fold(
        &self,
        peer: &str,
        dsi: &Dsi,
        min: u64,
        limits: cip_proto::soif::Limits,
    ) -> Result<bool, String> {
        let len = |p: PathBuf| fs::metadata(p).map_or(0, |m| m.len());
        let (journal, file) = (
            len(self.journal_path(peer, dsi)),
            len(self.path_for(peer, dsi)),
        );
        if journal <= file.max(min) {
            return Ok(false);
        }
        let mut stored = self.load_hint(peer, dsi, limits)?;
        if let Some(why) = stored.partial {
            return Err(format!("not folded: {why}"));
        }
        stored.entry.payload = stored
            .hint
            .try_to_soif()
            .map(|o| Bytes::from(o.to_bytes()))
            .map_err(|e| e.to_string())?;
        self.store(&stored.entry).map_err(|e| e.to_string())?;
        Ok(true)
    }

    /// Removes the object stored for (peer, dsi); absent is fine.
    ///
    /// # Errors
    /// When the file exists and cannot be removed.
    pub fn remove(&self, peer: &str, dsi: &Dsi) -> Result<(), SpoolError> {
        let path = self.path_for(peer, dsi);
        // The journal first: a journal without its file is never read.
        let _ = fs::remove_file(journal_of(&path));
        match fs::remove_file(&path) {
            Ok(()) => {
                durable::sync_dir(&self.dir).map_err(|source| SpoolError::Io { path, source })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(SpoolError::Io { path, source }),
        }
    }

    /// Moves the object stored for (peer, dsi) aside (`*.set-aside`): it is kept for the
    /// operator to inspect but never loaded again. Returns the new path.
    ///
    /// # Errors
    /// When the file exists and cannot be renamed.
    pub fn set_aside(&self, peer: &str, dsi: &Dsi) -> Result<PathBuf, SpoolError> {
        let path = self.path_for(peer, dsi);
        let mut aside = path.clone().into_os_string();
        aside.push(SET_ASIDE);
        let aside = PathBuf::from(aside);
        let _ = fs::remove_file(journal_of(&path));
        match fs::rename(&path, &aside) {
            Ok(()) => {
                durable::sync_dir(&self.dir).map_err(|source| SpoolError::Io {
                    path: self.dir.clone(),
                    source,
                })?;
                Ok(aside)
            }
            Err(source) => Err(SpoolError::Io { path, source }),
        }
    }

    /// Removes every object stored for `peer`.
    ///
    /// # Errors
    /// When the directory cannot be listed or a file cannot be removed.
    pub fn remove_peer(&self, peer: &str) -> Result<usize, SpoolError> {
        let prefix = format!("{}.", hex(peer.as_bytes()));
        let mut n = 0;
        for path in self.files()? {
            let name = path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.starts_with(&prefix) {
                fs::remove_file(&path).map_err(|source| SpoolError::Io {
                    path: path.clone(),
                    source,
                })?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Reads the entry stored for `peer` and `dsi`.
    ///
    /// # Errors
    /// When there is none, or it cannot be read or decoded.
    pub fn load(&self, peer: &str, dsi: &Dsi) -> Result<SpoolEntry, SpoolError> {
        read_entry(&self.path_for(peer, dsi))
    }

    /// Reads every entry. Corrupt files are moved aside (`*.corrupt`) and reported; entries
    /// older than `ttl` at `now` are removed and counted.
    ///
    /// # Errors
    /// Only when the directory itself cannot be listed.
    pub fn load_all(&self, now: SystemTime, ttl: Duration) -> Result<LoadOutcome, SpoolError> {
        let mut out = LoadOutcome::default();
        for path in self.files()? {
            match read_entry(&path) {
                Ok(e) if expired(&e, now, ttl) => {
                    let _ = fs::remove_file(journal_of(&path));
                    let _ = fs::remove_file(&path);
                    out.expired += 1;
                }
                Ok(e) => out.entries.push(e),
                Err(err) => {
                    if matches!(err, SpoolError::Corrupt { .. }) {
                        let mut aside = path.clone().into_os_string();
                        aside.push(".corrupt");
                        let _ = fs::rename(&path, aside);
                        let _ = fs::remove_file(journal_of(&path));
                    }
                    out.corrupt.push(err);
                }
            }
        }
        Ok(out)
    }

    fn files(&self) -> Result<Vec<PathBuf>, SpoolError> {
        let io_err = |source| SpoolError::Io {
            path: self.dir.clone(),
            source,
        };
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io_err)? {
            let path = entry.map_err(io_err)?.path();
            let name = path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.ends_with(SUFFIX) && !name.contains(TMP_MARK) {
                out.push(path);
            }
        }
        out.sort();
        Ok(out)
    }
}

/// True when `entry` is older than `ttl` at `now`.
pub fn expired(entry: &SpoolEntry, now: SystemTime, ttl: Duration) -> bool {
    now.duration_since(entry.received)
        .is_ok_and(|age| age > ttl)
}

fn file_name(peer: &str, dsi: &Dsi) -> String {
    // Hex keeps any peer name file-system safe; a DSI is digits and dots already.
    format!("{}.{}{SUFFIX}", hex(peer.as_bytes()), dsi)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A spool entry written beside its place ([`Spool::stage`]).
#[derive(Debug)]
pub struct StagedEntry {
    staged: durable::Staged,
    target: PathBuf,
}

impl StagedEntry {
    /// Puts the entry in place; returns its path.
    ///
    /// # Errors
    /// When the rename or the directory sync fails.
    pub fn commit(self) -> Result<PathBuf, SpoolError> {
        let Self { staged, target } = self;
        staged.commit().map_err(|source| SpoolError::Io {
            path: target.clone(),
            source,
        })?;
        // The whole hint replaces what the journal led to. Should this fail or a crash
        // come first, the journal's first delta names a base the new file is not, and is
        // left unapplied.
        match fs::remove_file(journal_of(&target)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(file = %target.display(), error = %e, "cannot empty a spool journal")
            }
        }
        Ok(target)
    }
}

/// `hint` (a spool file's) with `deltas` (its journal's) applied in turn: the hint the
/// spool holds. Returns how many were applied and, when one could not be (unreadable, or
/// not for the hint before it: a journal left by a crash), why; the deltas before it stand
/// and the ones after are not applied.
pub fn replay(
    mut hint: hints::hint::CipHint,
    deltas: &[Bytes],
    limits: cip_proto::soif::Limits,
) -> (hints::hint::CipHint, usize, Option<String>) {
    for (i, d) in deltas.iter().enumerate() {
        let applied = cip_proto::soif::parse_all(d.clone(), limits)
            .map_err(|e| e.to_string())
            .and_then(|objs| match objs.as_slice() {
                [obj] => hints::delta::HintDelta::from_soif(obj).map_err(|e| e.to_string()),
                other => Err(format!("{} objects, expected one delta", other.len())),
            })
            .and_then(|delta| delta.apply(&hint).map_err(|e| e.to_string()));
        match applied {
            Ok(next) => hint = next,
            Err(why) => return (hint, i, Some(format!("journal delta {}: {why}", i + 1))),
        }
    }
    let n = deltas.len();
    (hint, n, None)
}

fn journal_of(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(JOURNAL);
    PathBuf::from(p)
}

/// The records of a journal's bytes, and why reading stopped before the end, if it did.
fn read_journal(bytes: &[u8]) -> (Vec<Bytes>, Option<String>) {
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let bad = |why: &str| Some(format!("journal byte {at}: {why}"));
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            return (out, bad("record header not terminated (torn write?)"));
        };
        let Some(head) = std::str::from_utf8(&rest[..nl])
            .ok()
            .and_then(|h| h.strip_prefix(RECORD_MAGIC))
        else {
            return (out, bad("not a cipd-delta record"));
        };
        let parsed = head.split_once(' ').and_then(|(len, crc)| {
            Some((
                len.parse::<usize>().ok()?,
                u32::from_str_radix(crc, 16).ok()?,
            ))
        });
        let Some((len, crc)) = parsed else {
            return (out, bad("bad record header"));
        };
        let body = nl + 1;
        let Some(delta) = rest.get(body..body.saturating_add(len)) else {
            return (out, bad("record truncated (torn write?)"));
        };
        if crc32fast::hash(delta) != crc || rest.get(body + len) != Some(&b'\n') {
            return (out, bad("record damaged (crc32)"));
        }
        out.push(Bytes::copy_from_slice(delta));
        at += body + len + 1;
    }
    (out, None)
}

/// The whole file of `e` (tests).
#[cfg(test)]
fn encode(e: &SpoolEntry) -> Result<Vec<u8>, SpoolError> {
    let mut out = encode_head(e)?;
    out.extend_from_slice(&e.payload);
    Ok(out)
}

/// The header of `e`'s file (the payload follows it), its checksum covering both.
fn encode_head(e: &SpoolEntry) -> Result<Vec<u8>, SpoolError> {
    let check = |field, v: &str| {
        if v.contains(['\n', '\r']) {
            Err(SpoolError::BadField { field })
        } else {
            Ok(())
        }
    };
    check("peer", &e.peer)?;
    check("type", &e.index_type)?;
    for u in &e.base_uris {
        check("base-uri", u)?;
        if u.contains([' ', '\t']) {
            return Err(SpoolError::BadField { field: "base-uri" });
        }
    }
    let mut head = String::from(MAGIC);
    head.push_str(&format!("peer: {}\n", e.peer));
    head.push_str(&format!("dsi: {}\n", e.dsi));
    head.push_str(&format!("type: {}\n", e.index_type));
    head.push_str(&format!("base-uri: {}\n", e.base_uris.join(" ")));
    if let Some(d) = &e.description {
        check("dsi-description", d)?;
        head.push_str(&format!("dsi-description: {d}\n"));
    }
    let secs = e
        .received
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    head.push_str(&format!("received: {secs}\n"));
    head.push_str(&format!("length: {}\n", e.payload.len()));
    let mut crc = crc32fast::Hasher::new();
    crc.update(head.as_bytes());
    crc.update(&e.payload);
    head.push_str(&format!("crc32: {:08x}\n\n", crc.finalize()));
    Ok(head.into_bytes())
}

fn read_entry(path: &Path) -> Result<SpoolEntry, SpoolError> {
    let bytes = fs::read(path).map_err(|source| SpoolError::Io {
        path: path.to_owned(),
        source,
    })?;
    decode(&bytes).map_err(|reason| SpoolError::Corrupt {
        path: path.to_owned(),
        reason,
    })
}

/// Parses a spool file's bytes.
fn decode(bytes: &[u8]) -> Result<SpoolEntry, String> {
    if !bytes.starts_with(MAGIC.as_bytes()) {
        return Err("missing \"cipd-spool 1\" header".into());
    }
    let Some(end) = memchr_blank(bytes) else {
        return Err("header not terminated (truncated file?)".into());
    };
    if end < MAGIC.len() {
        return Err("empty header".into());
    }
    let head = std::str::from_utf8(&bytes[..end]).map_err(|_| "header is not UTF-8".to_owned())?;
    let payload = &bytes[end + 2..];
    let mut fields = std::collections::HashMap::new();
    let mut crc_at = None;
    let mut pos = MAGIC.len();
    for raw in head[MAGIC.len()..].split_inclusive('\n') {
        let line_start = pos;
        pos += raw.len();
        let line = raw.trim_end_matches('\n');
        let Some((k, v)) = line.split_once(':') else {
            return Err(format!("bad header line {line:?}"));
        };
        if crc_at.is_some() {
            return Err("header line after crc32".into());
        }
        if k == "crc32" {
            crc_at = Some(line_start);
        }
        if fields.insert(k, v.strip_prefix(' ').unwrap_or(v)).is_some() {
            return Err(format!("header {k} given twice"));
        }
    }
    let field = |k: &str| fields.get(k).copied().ok_or_else(|| format!("missing {k}"));
    let crc_at = crc_at.ok_or("missing crc32")?;
    let want = u32::from_str_radix(field("crc32")?, 16).map_err(|_| "bad crc32".to_owned())?;
    let len: usize = field("length")?
        .parse()
        .map_err(|_| "bad length".to_owned())?;
    if payload.len() != len {
        return Err(format!(
            "payload is {} bytes, header says {len}",
            payload.len()
        ));
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&bytes[..crc_at]);
    crc.update(payload);
    let got = crc.finalize();
    if got != want {
        return Err(format!(
            "checksum mismatch (stored {want:08x}, computed {got:08x})"
        ));
    }
    let dsi = Dsi::new(field("dsi")?).map_err(|e| format!("bad dsi: {e}"))?;
    let received: u64 = field("received")?
        .parse()
        .map_err(|_| "bad received".to_owned())?;
    Ok(SpoolEntry {
        peer: field("peer")?.to_owned(),
        dsi,
        index_type: field("type")?.to_owned(),
        base_uris: field("base-uri")?
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
        description: fields.get("dsi-description").map(|s| (*s).to_owned()),
        received: UNIX_EPOCH + Duration::from_secs(received),
        payload: Bytes::copy_from_slice(payload),
    })
}

/// Offset of the `\n` that ends the header (the first empty line), within [`MAX_HEADER`].
fn memchr_blank(bytes: &[u8]) -> Option<usize> {
    let window = &bytes[..bytes.len().min(MAX_HEADER)];
    window.windows(2).position(|w| w == b"\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(peer: &str, dsi: &str, payload: &[u8]) -> SpoolEntry {
        SpoolEntry {
            peer: peer.into(),
            dsi: Dsi::new(dsi).unwrap(),
            index_type: "HARVEST-SOIF-1".into(),
            base_uris: vec!["http://a/".into(), "ldap://b/".into()],
            description: Some("Leaf one".into()),
            received: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            payload: Bytes::copy_from_slice(payload),
        }
    }

    #[test]
    fn store_and_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let a = entry("leaf/1", "1.2.3", b"@CIP-HINT { -\n}\n\n\n\nbinary\0\xff");
        spool.store(&a).unwrap();
        let mut b = entry("leaf 2", "1.2.4", b"x");
        b.description = None;
        spool.store(&b).unwrap();
        // Replacing keeps one file per (peer, dsi).
        let a2 = entry("leaf/1", "1.2.3", b"newer");
        spool.store(&a2).unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_100);
        let out = spool.load_all(now, Duration::from_secs(3600)).unwrap();
        assert!(out.corrupt.is_empty(), "{:?}", out.corrupt);
        let mut got = out.entries;
        got.sort_by(|x, y| x.dsi.cmp(&y.dsi));
        assert_eq!(got, vec![a2, b]);
    }

    fn hint(values: &[(&str, u64)]) -> hints::hint::CipHint {
        let spec = hints::hint::AttrSpec::new("DOCUMENT", "Author").unwrap();
        hints::hint::CipHint::with_weightlist(spec, 10, values.iter().copied())
    }

    #[test]
    fn a_journal_holds_the_deltas_since_the_file_and_a_whole_write_empties_it() {
        use hints::delta::HintDelta;
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let limits = cip_proto::soif::Limits::default();
        let (a, b, c) = (
            hint(&[("Garcia", 2), ("Smith", 1)]),
            hint(&[("Garcia", 3), ("Smith", 1)]),
            hint(&[("Garcia", 3), ("Jones", 1)]),
        );
        let e = entry("leaf", "1.2.3", &a.to_soif().to_bytes());
        // No file: nothing to append to.
        assert!(spool.append_delta("leaf", &e.dsi, b"x").is_err());
        spool.store(&e).unwrap();
        let ab = HintDelta::between(&a, &b).unwrap().to_soif().to_bytes();
        let bc = HintDelta::between(&b, &c).unwrap().to_soif().to_bytes();
        let (len, file) = spool.append_delta("leaf", &e.dsi, &ab).unwrap();
        assert!(len > ab.len() as u64 && file > 0);
        spool.append_delta("leaf", &e.dsi, &bc).unwrap();
        let (deltas, torn) = spool.journal("leaf", &e.dsi);
        assert_eq!(torn, None);
        assert_eq!(
            deltas,
            vec![Bytes::from(ab.clone()), Bytes::from(bc.clone())]
        );
        let (made, applied, stopped) = replay(a.clone(), &deltas, limits);
        assert_eq!((applied, stopped), (2, None));
        assert_eq!(hints::delta::digest(&made), hints::delta::digest(&c));
        // The journal is not a spool file of its own.
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_100);
        assert_eq!(
            spool
                .load_all(now, Duration::from_secs(3600))
                .unwrap()
                .entries,
            vec![e.clone()]
        );

        // A torn last record (a crash mid-append) is dropped; the ones before stand.
        let path = spool.journal_path("leaf", &e.dsi);
        let full = fs::read(&path).unwrap();
        fs::write(&path, &full[..full.len() - 5]).unwrap();
        let (deltas, torn) = spool.journal("leaf", &e.dsi);
        assert_eq!(deltas.len(), 1);
        assert!(torn.unwrap().contains("truncated"));
        // A damaged record: the same.
        let mut damaged = full.clone();
        let at = full.len() - 10;
        damaged[at] ^= 1;
        fs::write(&path, &damaged).unwrap();
        let (deltas, torn) = spool.journal("leaf", &e.dsi);
        assert_eq!(deltas.len(), 1);
        assert!(torn.unwrap().contains("crc32"), "damaged");
        // Out of order (a journal left beside a newer file): applied up to the gap.
        let (made, applied, stopped) =
            replay(a.clone(), &[Bytes::from(bc), Bytes::from(ab)], limits);
        assert_eq!(applied, 0);
        assert!(stopped.unwrap().contains("journal delta 1"));
        assert_eq!(hints::delta::digest(&made), hints::delta::digest(&a));

        // Written whole, the file stands alone.
        spool
            .store(&entry("leaf", "1.2.3", &c.to_soif().to_bytes()))
            .unwrap();
        assert!(!path.exists());
        assert_eq!(spool.journal("leaf", &e.dsi), (Vec::new(), None));
        spool.append_delta("leaf", &e.dsi, b"y").unwrap();
        spool.remove("leaf", &e.dsi).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn a_journal_larger_than_its_file_is_folded_into_it() {
        use hints::delta::HintDelta;
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let limits = cip_proto::soif::Limits::default();
        let a = hint(&[("Garcia", 2)]);
        let names: Vec<String> = (0..200).map(|i| format!("Author{i}")).collect();
        let many: Vec<(&str, u64)> = names.iter().map(|n| (n.as_str(), 1)).collect();
        let b = hint(&many);
        let e = entry("leaf", "1.2.3", &a.to_soif().to_bytes());
        spool.store(&e).unwrap();
        let ab = HintDelta::between(&a, &b).unwrap().to_soif().to_bytes();
        spool.append_delta("leaf", &e.dsi, &ab).unwrap();
        let path = spool.journal_path("leaf", &e.dsi);
        // Under the minimum: left as it is.
        assert!(!spool.fold("leaf", &e.dsi, 1 << 20, limits).unwrap());
        assert!(path.exists());
        // Past it and past the file: the file holds the result, the journal is gone.
        assert!(spool.fold("leaf", &e.dsi, 0, limits).unwrap());
        assert!(!path.exists());
        let folded = spool.load_hint("leaf", &e.dsi, limits).unwrap();
        assert!(folded.partial.is_none() && folded.applied == 0);
        assert_eq!(hints::delta::digest(&folded.hint), hints::delta::digest(&b));
        // A damaged journal is not folded: an error, and both files are left.
        fs::write(&path, vec![b'x'; 100_000]).unwrap();
        let refused = spool.fold("leaf", &e.dsi, 0, limits).unwrap_err();
        assert!(refused.contains("not folded"), "{refused}");
        assert!(path.exists());
        let read = spool.load_hint("leaf", &e.dsi, limits).unwrap();
        assert!(read.partial.is_some());
        assert_eq!(hints::delta::digest(&read.hint), hints::delta::digest(&b));
    }

    #[test]
    fn a_staged_entry_counts_only_once_committed() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_100);
        let ttl = Duration::from_secs(3600);
        let old = entry("leaf", "1.2.3", b"accepted before");
        spool.store(&old).unwrap();
        // Staged, then forgotten (the table refused the hint): the old entry stays.
        let refused = spool.stage(&entry("leaf", "1.2.3", b"refused")).unwrap();
        assert_eq!(spool.load_all(now, ttl).unwrap().entries, vec![old.clone()]);
        drop(refused);
        assert_eq!(spool.load_all(now, ttl).unwrap().entries, vec![old]);
        let files = || std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files(), 1, "no temporary file is left");
        // Staged and committed: it replaces the old one, byte for byte as `store` writes.
        let new = entry("leaf", "1.2.3", b"accepted now");
        let path = spool.stage(&new).unwrap().commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), encode(&new).unwrap());
        assert_eq!(spool.load_all(now, ttl).unwrap().entries, vec![new]);
        assert_eq!(files(), 1);
    }

    #[test]
    fn every_truncation_and_bit_flip_is_detected() {
        let e = entry("p", "1.2", b"@CIP-HINT { -\nTotal-Object-Count{1}:\t3\n}\n");
        let bytes = encode(&e).unwrap();
        assert_eq!(decode(&bytes).unwrap(), e);
        for cut in 0..bytes.len() {
            assert!(
                decode(&bytes[..cut]).is_err(),
                "truncated at {cut} accepted"
            );
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x04;
            assert!(decode(&b).is_err(), "flip at {i} accepted");
        }
    }

    #[test]
    fn corrupt_files_are_moved_aside_and_others_load() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        spool.store(&entry("good", "1.1", b"ok")).unwrap();
        let bad = spool.store(&entry("bad", "1.2", b"payload")).unwrap();
        let mut bytes = fs::read(&bad).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&bad, bytes).unwrap();
        fs::write(dir.path().join("junk.spool"), b"hello").unwrap();
        let out = spool.load_all(UNIX_EPOCH, Duration::from_secs(1)).unwrap();
        assert_eq!(out.entries.len(), 1);
        assert_eq!(out.corrupt.len(), 2);
        assert!(
            out.corrupt
                .iter()
                .all(|e| matches!(e, SpoolError::Corrupt { .. }))
        );
        assert!(!bad.exists());
        // Next start sees only the good one and reports nothing.
        let again = spool.load_all(UNIX_EPOCH, Duration::from_secs(1)).unwrap();
        assert_eq!((again.entries.len(), again.corrupt.len()), (1, 0));
    }

    #[test]
    fn leftover_temp_files_are_removed_and_ttl_applies() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(format!("x.spool{TMP_MARK}1.0")), b"partial").unwrap();
        fs::write(dir.path().join(".x.spool.a1b2c3.tmp"), b"partial").unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        spool.store(&entry("p", "1.5", b"x")).unwrap();
        let late = UNIX_EPOCH + Duration::from_secs(1_700_000_000 + 7200);
        let out = spool.load_all(late, Duration::from_secs(3600)).unwrap();
        assert_eq!((out.entries.len(), out.expired), (0, 1));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn set_aside_entries_are_not_loaded_again() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        spool.store(&entry("evil", "1.1", b"x")).unwrap();
        spool.store(&entry("good", "1.1", b"y")).unwrap();
        let aside = spool.set_aside("evil", &Dsi::new("1.1").unwrap()).unwrap();
        assert!(aside.exists());
        let out = spool.load_all(SystemTime::now(), Duration::MAX).unwrap();
        assert_eq!(out.entries.len(), 1);
        assert_eq!(out.entries[0].peer, "good");
        assert!(
            spool
                .set_aside("nobody", &Dsi::new("1.1").unwrap())
                .is_err()
        );
    }

    #[test]
    fn remove_and_remove_peer() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        spool.store(&entry("p", "1.1", b"x")).unwrap();
        spool.store(&entry("p", "1.2", b"x")).unwrap();
        spool.store(&entry("q", "1.1", b"x")).unwrap();
        spool.remove("q", &Dsi::new("1.1").unwrap()).unwrap();
        spool.remove("q", &Dsi::new("1.1").unwrap()).unwrap();
        assert_eq!(spool.remove_peer("p").unwrap(), 2);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn header_fields_with_line_breaks_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let mut e = entry("p", "1.1", b"x");
        e.description = Some("two\nlines".into());
        assert!(matches!(
            spool.store(&e),
            Err(SpoolError::BadField {
                field: "dsi-description"
            })
        ));
    }
}
