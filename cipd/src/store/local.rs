//! The local object store and its inverted index.
//!
//! Local objects are not kept in memory. Each collection's objects are written once, as
//! canonical SOIF, to a cache file `<data_dir>/local/<hex(name)>.soif` (written to a temporary
//! file, synced, renamed into place) and located by their byte offsets in it: object `i`
//! spans `offsets[i]..offsets[i + 1]`, 8 bytes per object, plus 2 for its template type.
//! `/v1/objects` reads the objects it returns with one positional read each.
//!
//! The exported attributes (`[export] attributes`, multi-value suffix folded, in every
//! template) are indexed: per attribute, the distinct values ASCII-lowercased and trimmed,
//! sorted, and for each the ascending list of the (`u32`) ids of the objects holding it.
//! `=` is a binary search, `~` a substring search over the distinct values, `&` an
//! intersection. Terms on other attributes are checked by reading the candidate objects
//! (all objects when no term is indexed), at most `limits.local_scan_max_objects` per query;
//! past that the query is refused as not indexed.
//!
//! A store holds its cache file open, so a rebuild can rename a new cache over it while
//! queries on the old store go on reading the old bytes (the old inode lives until the last
//! handle closes). A sidecar `<hex(name)>.meta` records the source fingerprint and the cache's
//! length and CRC-32, so a restart reuses an intact cache instead of reading the source again.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use cip_proto::soif::attr::{self, base_name};
use cip_proto::soif::{Limits, SoifObject, parse_all, write_object};
use hints::builder::{HintBuilder, Thresholds};
use hints::hint::AttrSpec;
use hints::query::{MatchOp, Query, Term};
use serde::{Deserialize, Serialize};

use crate::store::collection::{self, CollectionSource, Fingerprint, LoadReport};
use crate::store::soif_io::SoifFileReader;

/// Directory under `data_dir` holding the cache files.
pub const CACHE_DIR: &str = "local";

/// Version tag of the `.meta` sidecar.
const META_FORMAT: u32 = 1;

/// Most objects in one collection (object ids are `u32`).
pub const MAX_OBJECTS: u64 = u32::MAX as u64;

/// Most distinct template types in one collection (template ids are `u16`).
pub const MAX_TEMPLATES: usize = u16::MAX as usize;

/// Why a store could not be built or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A cache file could not be written or read.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done (`write`, `read`, ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The bytes at an object's offset are not that object.
    #[error("{}: object {id} at byte {offset} is damaged: {message}", path.display())]
    Corrupt {
        /// The cache file.
        path: PathBuf,
        /// The object's id.
        id: u32,
        /// Its byte offset.
        offset: u64,
        /// What is wrong.
        message: String,
    },
    /// The collection has more objects than ids can number.
    #[error("collection holds more than {max} objects")]
    TooManyObjects {
        /// The limit.
        max: u64,
    },
    /// The collection uses more template types than template ids can number.
    #[error("collection uses more than {max} template types")]
    TooManyTemplates {
        /// The limit.
        max: usize,
    },
    /// Loading the source failed.
    #[error(transparent)]
    Source(#[from] collection::CollectionError),
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> StoreError {
    let path = path.to_owned();
    move |source| StoreError::Io {
        action,
        path,
        source,
    }
}

/// The attributes the local index covers for export specs `specs`: their names without
/// multi-value suffix, ASCII-lowercased, sorted, without duplicates. Every template's
/// attributes of these names are indexed, so terms without a template are answered too.
pub fn indexed_attributes(specs: &[AttrSpec]) -> Vec<String> {
    let mut out: Vec<String> = specs
        .iter()
        .map(|s| base_name(&s.attribute).to_ascii_lowercase())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The cache directory under `data_dir`.
pub fn cache_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(CACHE_DIR)
}

/// The cache file and sidecar of collection `name` in `dir`.
fn cache_paths(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let stem = crate::store::collection::file_stem(name);
    (
        dir.join(format!("{stem}.soif")),
        dir.join(format!("{stem}.meta")),
    )
}

// ---- the store -----------------------------------------------------------------------------

/// One attribute's inverted index.
#[derive(Debug, Default)]
struct AttrIndex {
    /// Lowercased attribute name without multi-value suffix.
    name: String,
    /// The distinct folded values, sorted, back to back.
    arena: Vec<u8>,
    /// End of value `i` in `arena`.
    value_ends: Vec<u64>,
    /// End of value `i`'s ids in `postings`.
    posting_ends: Vec<u64>,
    /// Object ids, ascending per value.
    postings: Vec<u32>,
}

impl AttrIndex {
    fn values(&self) -> usize {
        self.value_ends.len()
    }

    fn value(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.value_ends[i - 1] };
        &self.arena[start as usize..self.value_ends[i] as usize]
    }

    fn ids(&self, i: usize) -> &[u32] {
        let start = if i == 0 { 0 } else { self.posting_ends[i - 1] };
        &self.postings[start as usize..self.posting_ends[i] as usize]
    }

    /// The value equal to `folded`, by binary search.
    fn lookup(&self, folded: &[u8]) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.values());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.value(mid).cmp(folded) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// The values holding `folded` (non-empty), by one substring search over the arena.
    fn containing(&self, folded: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        let finder = memchr::memmem::Finder::new(folded);
        let mut pos = 0usize;
        while let Some(hit) = finder.find(&self.arena[pos..]) {
            let at = (pos + hit) as u64;
            // The value the hit starts in; it counts when the needle ends inside it too.
            let i = self.value_ends.partition_point(|&end| end <= at);
            let end = self.value_ends[i];
            if at + folded.len() as u64 <= end {
                out.push(i);
                pos = end as usize;
            } else {
                pos += hit + 1;
            }
            if pos >= self.arena.len() {
                break;
            }
        }
        out
    }

    fn memory(&self) -> usize {
        self.arena.capacity()
            + 8 * (self.value_ends.capacity() + self.posting_ends.capacity())
            + 4 * self.postings.capacity()
    }
}

/// One collection's objects: a cache file, their offsets, and the index.
#[derive(Debug)]
pub struct CollectionStore {
    /// The cache file, held open (`None` for an empty store that has none, or one whose
    /// file is opened for each read: [`CollectionStore::release_file`]).
    file: Option<File>,
    /// With the file released: the file indexed, to find it again at each read.
    released: Option<FileId>,
    path: PathBuf,
    /// `offsets[i]..offsets[i + 1]` is object `i`.
    offsets: Vec<u64>,
    /// Template id per object.
    templates: Vec<u16>,
    /// Template types, ASCII-lowercased, by id.
    template_names: Vec<Box<str>>,
    /// One index per indexed attribute, in [`indexed_attributes`] order.
    attrs: Vec<AttrIndex>,
}

impl CollectionStore {
    /// A store with no objects and no file.
    pub fn empty(indexed: &[String]) -> Self {
        Self {
            file: None,
            released: None,
            path: PathBuf::new(),
            offsets: vec![0],
            templates: Vec::new(),
            template_names: Vec::new(),
            attrs: indexed
                .iter()
                .map(|n| AttrIndex {
                    name: n.clone(),
                    ..AttrIndex::default()
                })
                .collect(),
        }
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.templates.len()
    }

    /// True when the store has no objects.
    pub fn is_empty(&self) -> bool {
        self.templates.is_empty()
    }

    /// The cache file (empty for a store without one).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the cache file.
    pub fn bytes(&self) -> u64 {
        self.offsets.last().copied().unwrap_or(0)
    }

    /// Copies the cache file — every object as SOIF, [`CollectionStore::bytes`] bytes — to
    /// `out` in chunks (RDM streams whole catalogs this way).
    ///
    /// # Errors
    /// A read error, or whatever `out` returns.
    pub fn copy_raw(&self, out: &mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
        let Some(file) = self.cache_file()? else {
            return Ok(());
        };
        let mut reader = PositionalReader {
            file: &file,
            pos: 0,
            end: self.bytes(),
        };
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            out(&buf[..n])?;
        }
    }

    /// The attributes indexed (see [`indexed_attributes`]).
    pub fn indexed(&self) -> Vec<String> {
        self.attrs.iter().map(|a| a.name.clone()).collect()
    }

    /// Heap bytes held by the offsets, template ids and index (an estimate from capacities).
    pub fn memory_estimate(&self) -> usize {
        8 * self.offsets.capacity()
            + 2 * self.templates.capacity()
            + self
                .template_names
                .iter()
                .map(|t| t.len() + 16)
                .sum::<usize>()
            + self.attrs.iter().map(AttrIndex::memory).sum::<usize>()
    }

    /// Distinct values and postings over all indexed attributes.
    pub fn index_sizes(&self) -> (usize, usize) {
        self.attrs
            .iter()
            .fold((0, 0), |(v, p), a| (v + a.values(), p + a.postings.len()))
    }

    /// Reads object `id` from the cache file.
    ///
    /// # Errors
    /// A read error, or [`StoreError::Corrupt`] when the bytes there are not one object.
    pub fn read(&self, id: u32) -> Result<SoifObject, StoreError> {
        let i = id as usize;
        let file = self.cache_file().map_err(io_error("open", &self.path))?;
        let (Some(&start), Some(&end), Some(file)) =
            (self.offsets.get(i), self.offsets.get(i + 1), file)
        else {
            return Err(self.corrupt(id, 0, "no such object".to_owned()));
        };
        let mut buf = vec![0u8; (end - start) as usize];
        read_exact_at(&file, &mut buf, start).map_err(io_error("read", &self.path))?;
        let objs = parse_all(Bytes::from(buf), Limits::unlimited())
            .map_err(|e| self.corrupt(id, start, e.to_string()))?;
        match <[SoifObject; 1]>::try_from(objs) {
            Ok([o]) => Ok(o),
            Err(v) => Err(self.corrupt(id, start, format!("{} objects there", v.len()))),
        }
    }

    /// Closes the cache file; each read then opens it again and checks it is still the
    /// file indexed. For nodes with more collections than the process may hold files open
    /// (`limits.keep_collection_files_open`). A reload puts a new file in its place: a read
    /// through a store it replaced then fails ("replaced") instead of reading the new
    /// file at the old offsets.
    ///
    /// # Errors
    /// When the file's identity cannot be read (it stays open then).
    pub fn release_file(&mut self) -> io::Result<()> {
        if let Some(file) = &self.file {
            self.released = Some(FileId::of(&file.metadata()?));
            self.file = None;
        }
        Ok(())
    }

    /// The cache file: the one held, or the one at its path when it is still the file
    /// indexed; `None` for a store without one.
    fn cache_file(&self) -> io::Result<Option<FileRef<'_>>> {
        if let Some(file) = &self.file {
            return Ok(Some(FileRef::Held(file)));
        }
        let Some(want) = self.released else {
            return Ok(None);
        };
        let file = File::open(&self.path)?;
        if FileId::of(&file.metadata()?) != want {
            return Err(io::Error::other(
                "replaced since it was indexed (the collection was reloaded); ask again",
            ));
        }
        Ok(Some(FileRef::Opened(file)))
    }

    fn corrupt(&self, id: u32, offset: u64, message: String) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            id,
            offset,
            message,
        }
    }

    /// Reads every object in order, front to back, handing each with its id to `f`.
    ///
    /// # Errors
    /// A read error, or [`StoreError::Corrupt`] when the file does not hold the objects
    /// recorded.
    pub fn scan(&self, f: &mut dyn FnMut(u32, SoifObject)) -> Result<(), StoreError> {
        let Some(file) = self.cache_file().map_err(io_error("open", &self.path))? else {
            return Ok(());
        };
        let mut reader = SoifFileReader::new(
            PositionalReader {
                file: &file,
                pos: 0,
                end: self.bytes(),
            },
            Limits::unlimited(),
        );
        for id in 0..self.len() as u32 {
            match reader.next_object() {
                Ok(Some(o)) => f(id, o),
                Ok(None) => {
                    let at = self.offsets[id as usize];
                    return Err(self.corrupt(id, at, "the file ends early".to_owned()));
                }
                Err(e) => {
                    let at = self.offsets[id as usize];
                    return Err(self.corrupt(id, at, e.to_string()));
                }
            }
        }
        Ok(())
    }

    /// The attribute index named by term `t`, if that attribute is indexed.
    /// True when every term of `q` is on an indexed attribute (no object is read from
    /// disk to answer it).
    pub fn indexes_all(&self, q: &Query) -> bool {
        q.terms().iter().all(|t| self.attr_index(t).is_some())
    }

    fn attr_index(&self, t: &Term) -> Option<&AttrIndex> {
        let key = t.attribute_key();
        self.attrs.iter().find(|a| a.name == key)
    }

    /// The sorted ids of the objects matching indexed term `t` (whose index is `index`).
    fn term_ids<'s>(&'s self, index: &'s AttrIndex, t: &Term) -> Cow<'s, [u32]> {
        let folded = t.value.to_ascii_lowercase();
        let mut ids = match t.op {
            MatchOp::Exact => {
                Cow::Borrowed(index.lookup(&folded).map_or(&[][..], |i| index.ids(i)))
            }
            MatchOp::Substring => Cow::Owned(union(
                index
                    .containing(&folded)
                    .into_iter()
                    .map(|i| index.ids(i))
                    .collect(),
                self.len(),
            )),
        };
        if let Some(tpl) = t.template_key() {
            match self.template_names.iter().position(|n| **n == *tpl) {
                // With one template type in the collection there is nothing to filter.
                Some(_) if self.template_names.len() == 1 => {}
                Some(tid) => ids
                    .to_mut()
                    .retain(|&id| self.templates[id as usize] as usize == tid),
                None => ids = Cow::Borrowed(&[]),
            }
        }
        ids
    }

    /// The sorted ids of the objects matching `q`. Terms on unindexed attributes read the
    /// candidates from disk, taking them from `budget`.
    fn matching(&self, q: &Query, budget: &mut Budget) -> Result<Cow<'_, [u32]>, QueryError> {
        let mut lists = Vec::new();
        let mut rest = Vec::new();
        for t in q.terms() {
            match self.attr_index(t) {
                Some(index) => lists.push(self.term_ids(index, t)),
                None => rest.push(t.clone()),
            }
        }
        lists.sort_by_key(|l| l.len());
        let mut lists = lists.into_iter();
        let candidates = lists
            .next()
            .map(|first| lists.fold(first, |acc, l| Cow::Owned(intersect(&acc, &l))));
        let Some(residual) = Query::from_terms(rest) else {
            // Every term was indexed (a query has at least one term).
            return Ok(candidates.unwrap_or(Cow::Borrowed(&[])));
        };
        let wanted = candidates.as_ref().map_or(self.len(), |c| c.len());
        budget.take(wanted, &residual.terms()[0].attribute, self)?;
        let mut out = Vec::new();
        match candidates {
            Some(ids) => {
                for &id in ids.iter() {
                    if object_matches(&residual, &self.read(id)?) {
                        out.push(id);
                    }
                }
            }
            None => self.scan(&mut |id, o| {
                if object_matches(&residual, &o) {
                    out.push(id);
                }
            })?,
        }
        Ok(Cow::Owned(out))
    }
}

/// Objects a query may still read from disk.
struct Budget {
    left: usize,
    max: usize,
}

impl Budget {
    fn take(
        &mut self,
        n: usize,
        attribute: &str,
        store: &CollectionStore,
    ) -> Result<(), QueryError> {
        if n > self.left {
            return Err(QueryError::NotIndexed {
                attribute: attribute.to_owned(),
                max: self.max,
                indexed: store.indexed(),
            });
        }
        self.left -= n;
        Ok(())
    }
}

/// What a local query found.
#[derive(Debug, Default)]
pub struct LocalMatches {
    /// Matching objects over all collections.
    pub total: u64,
    /// The first matching objects, collection by collection, at most the number asked for.
    pub objects: Vec<SoifObject>,
}

/// Answers `q` over `stores`: the count of matches and the first `want` matching objects.
/// At most `scan_max` objects are read to check terms on unindexed attributes.
///
/// # Errors
/// [`QueryError::NotIndexed`] when that would read more, [`QueryError::Store`] when a cache
/// file cannot be read.
pub fn query<'a>(
    stores: impl IntoIterator<Item = &'a CollectionStore>,
    q: &Query,
    want: usize,
    scan_max: usize,
) -> Result<LocalMatches, QueryError> {
    let mut budget = Budget {
        left: scan_max,
        max: scan_max,
    };
    let mut out = LocalMatches::default();
    for store in stores {
        let ids = store.matching(q, &mut budget)?;
        out.total += ids.len() as u64;
        for &id in ids.iter().take(want - out.objects.len().min(want)) {
            out.objects.push(store.read(id)?);
        }
    }
    Ok(out)
}

/// Intersection of two ascending lists; gallops when one is much shorter.
fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let mut out = Vec::with_capacity(small.len());
    if small.len() * 16 < large.len() {
        let mut rest = large;
        for &x in small {
            let i = rest.partition_point(|&y| y < x);
            rest = &rest[i..];
            match rest.first() {
                Some(&y) if y == x => out.push(x),
                Some(_) => {}
                None => break,
            }
        }
    } else {
        let (mut i, mut j) = (0, 0);
        while i < small.len() && j < large.len() {
            match small[i].cmp(&large[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    out.push(small[i]);
                    i += 1;
                    j += 1;
                }
            }
        }
    }
    out
}

/// Union of ascending lists of ids below `n`: a bitmap when they are many, else sort.
fn union(lists: Vec<&[u32]>, n: usize) -> Vec<u32> {
    let total: usize = lists.iter().map(|l| l.len()).sum();
    match lists.len() {
        0 => return Vec::new(),
        1 => return lists[0].to_vec(),
        _ => {}
    }
    if total > n / 32 {
        let mut bits = vec![0u64; n.div_ceil(64)];
        for l in &lists {
            for &id in *l {
                bits[id as usize / 64] |= 1 << (id % 64);
            }
        }
        let mut out = Vec::with_capacity(total.min(n));
        for (w, &word) in bits.iter().enumerate() {
            let mut word = word;
            while word != 0 {
                out.push((w * 64) as u32 + word.trailing_zeros());
                word &= word - 1;
            }
        }
        out
    } else {
        let mut out: Vec<u32> = lists.concat();
        out.sort_unstable();
        out.dedup();
        out
    }
}

// ---- building ------------------------------------------------------------------------------

/// Collects one attribute's (value, object) pairs while objects are added.
#[derive(Debug)]
struct AttrIndexBuilder {
    name: String,
    ids: HashMap<Box<[u8]>, u32>,
    /// Per value id: the last object that held it (so an object counts once per value).
    last_object: Vec<u32>,
    /// (value id, object id), objects ascending.
    pairs: Vec<(u32, u32)>,
}

impl AttrIndexBuilder {
    fn add(&mut self, folded: &[u8], object: u32) {
        let vid = match self.ids.get(folded) {
            Some(&v) => v,
            None => {
                let v = self.last_object.len() as u32;
                self.ids.insert(folded.into(), v);
                self.last_object.push(u32::MAX);
                v
            }
        };
        let last = &mut self.last_object[vid as usize];
        if *last != object {
            *last = object;
            self.pairs.push((vid, object));
        }
    }

    fn finish(self) -> AttrIndex {
        let mut values: Vec<(Box<[u8]>, u32)> = self.ids.into_iter().collect();
        values.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut rank = vec![0u32; values.len()];
        let mut arena = Vec::with_capacity(values.iter().map(|v| v.0.len()).sum());
        let mut value_ends = Vec::with_capacity(values.len());
        for (r, (v, vid)) in values.iter().enumerate() {
            rank[*vid as usize] = r as u32;
            arena.extend_from_slice(v);
            value_ends.push(arena.len() as u64);
        }
        drop(values);
        // Counting sort of the pairs by value rank; stable, so ids stay ascending.
        let mut starts = vec![0u64; rank.len() + 1];
        for &(vid, _) in &self.pairs {
            starts[rank[vid as usize] as usize + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let posting_ends = starts[1..].to_vec();
        let mut postings = vec![0u32; self.pairs.len()];
        for &(vid, object) in &self.pairs {
            let slot = &mut starts[rank[vid as usize] as usize];
            postings[*slot as usize] = object;
            *slot += 1;
        }
        AttrIndex {
            name: self.name,
            arena,
            value_ends,
            posting_ends,
            postings,
        }
    }
}

/// Builds offsets, template ids and the index as objects are added in order.
#[derive(Debug)]
struct Indexer {
    offsets: Vec<u64>,
    templates: Vec<u16>,
    template_ids: HashMap<Box<str>, u16>,
    template_names: Vec<Box<str>>,
    attrs: Vec<AttrIndexBuilder>,
    fold: Vec<u8>,
}

impl Indexer {
    fn new(indexed: &[String]) -> Self {
        Self {
            offsets: vec![0],
            templates: Vec::new(),
            template_ids: HashMap::new(),
            template_names: Vec::new(),
            attrs: indexed
                .iter()
                .map(|n| AttrIndexBuilder {
                    name: n.clone(),
                    ids: HashMap::new(),
                    last_object: Vec::new(),
                    pairs: Vec::new(),
                })
                .collect(),
            fold: Vec::new(),
        }
    }

    /// Adds the next object, `len` bytes long in the cache file.
    fn add(&mut self, obj: &SoifObject, len: u64) -> Result<(), StoreError> {
        let id = self.templates.len() as u64;
        if id >= MAX_OBJECTS {
            return Err(StoreError::TooManyObjects { max: MAX_OBJECTS });
        }
        let id = id as u32;
        let template = obj.template().as_str();
        let tid = match self.template_ids.get(template) {
            Some(&t) => t,
            None => {
                let lower = template.to_ascii_lowercase();
                match self.template_ids.get(lower.as_str()) {
                    Some(&t) => {
                        self.template_ids.insert(template.into(), t);
                        t
                    }
                    None => {
                        if self.template_names.len() >= MAX_TEMPLATES {
                            return Err(StoreError::TooManyTemplates { max: MAX_TEMPLATES });
                        }
                        let t = self.template_names.len() as u16;
                        self.template_names.push(lower.clone().into());
                        self.template_ids.insert(lower.into(), t);
                        self.template_ids.insert(template.into(), t);
                        t
                    }
                }
            }
        };
        self.templates.push(tid);
        let end = self.offsets.last().copied().unwrap_or(0) + len;
        self.offsets.push(end);
        if self.attrs.is_empty() {
            return Ok(());
        }
        for a in &obj.attributes {
            let base = base_name(a.name.as_str());
            let Some(attr) = self
                .attrs
                .iter_mut()
                .find(|b| b.name.eq_ignore_ascii_case(base))
            else {
                continue;
            };
            let value = a.value.trim_ascii();
            if value.is_empty() {
                continue;
            }
            self.fold.clear();
            self.fold.extend(value.iter().map(u8::to_ascii_lowercase));
            attr.add(&self.fold, id);
        }
        Ok(())
    }

    fn finish(self, file: File, path: PathBuf) -> CollectionStore {
        let mut offsets = self.offsets;
        offsets.shrink_to_fit();
        let mut templates = self.templates;
        templates.shrink_to_fit();
        CollectionStore {
            file: Some(file),
            released: None,
            path,
            offsets,
            templates,
            template_names: self.template_names,
            attrs: self
                .attrs
                .into_iter()
                .map(AttrIndexBuilder::finish)
                .collect(),
        }
    }
}

/// The `.meta` sidecar of a cache file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct CacheMeta {
    format: u32,
    /// [`CollectionSource::describe`] of the source.
    source: String,
    /// The source's fingerprint when it was read.
    fingerprint: u64,
    objects: u64,
    /// Length of the cache file.
    bytes: u64,
    /// CRC-32 of the cache file.
    crc32: u32,
    /// The load report of the source read.
    source_bytes: u64,
    files: u64,
    skipped: u64,
}

/// A collection loaded into a store.
#[derive(Debug)]
pub struct Loaded {
    /// The store.
    pub store: CollectionStore,
    /// What the source read found (for a reused cache: what it found then).
    pub report: LoadReport,
    /// The source's fingerprint before the read.
    pub fingerprint: Option<Fingerprint>,
    /// True when an intact cache file was reused instead of reading the source.
    pub from_cache: bool,
}

/// Loads collection `name` from `source` into a store with its cache file in `dir`,
/// indexing `indexed` and counting every object into `hint`. An intact cache file written
/// from the same source state is reused; a damaged or missing one is rewritten.
///
/// When this fails, or returns after a damaged cache was partly read, `hint` may hold some
/// of the collection's objects: `hint_tainted` is then set.
///
/// # Errors
/// When the source cannot be read or the cache file cannot be written.
pub fn load(
    name: &str,
    source: &dyn CollectionSource,
    dir: &Path,
    indexed: &[String],
    hint: &mut HintBuilder,
    hint_tainted: &mut bool,
) -> Result<Loaded, StoreError> {
    fs::create_dir_all(dir).map_err(io_error("create", dir))?;
    let (path, meta_path) = cache_paths(dir, name);
    // Fingerprint first: a change during the load then shows up at the next check.
    let fingerprint = source.fingerprint().ok();
    if let Some(fp) = fingerprint
        && let Some(meta) = read_meta(&meta_path)
        && meta.format == META_FORMAT
        && meta.source == source.describe()
        && meta.fingerprint == fp.0
    {
        let started = Instant::now();
        match open_cache(&path, &meta, indexed, hint) {
            Ok(store) => {
                tracing::info!(
                    collection = name,
                    objects = store.len(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "collection loaded from its cache file"
                );
                let report = LoadReport {
                    objects: meta.objects,
                    bytes: meta.source_bytes,
                    files: meta.files,
                    skipped: meta.skipped,
                    problems: Vec::new(),
                };
                return Ok(Loaded {
                    store,
                    report,
                    fingerprint,
                    from_cache: true,
                });
            }
            Err((e, fed)) => {
                *hint_tainted |= fed;
                tracing::warn!(collection = name, error = %e, "cache file unusable; reading the source again");
            }
        }
    }
    // The old sidecar goes first: a crash before the new one is written must not leave a
    // sidecar that vouches for a different cache file.
    let _ = fs::remove_file(&meta_path);
    let result = write_cache(name, source, &path, indexed, hint);
    match result {
        Ok((store, report, crc)) => {
            if let Some(fp) = fingerprint {
                let meta = CacheMeta {
                    format: META_FORMAT,
                    source: source.describe(),
                    fingerprint: fp.0,
                    objects: store.len() as u64,
                    bytes: store.bytes(),
                    crc32: crc,
                    source_bytes: report.bytes,
                    files: report.files,
                    skipped: report.skipped,
                };
                if let Err(e) = write_meta(&meta_path, &meta) {
                    // Not fatal: the next start reads the source again.
                    tracing::warn!(collection = name, error = %e, "cannot write the cache sidecar");
                }
            } else {
                let _ = fs::remove_file(&meta_path);
            }
            Ok(Loaded {
                store,
                report,
                fingerprint,
                from_cache: false,
            })
        }
        Err(e) => {
            // Some of the objects may have been counted.
            *hint_tainted = true;
            Err(e)
        }
    }
}

/// Reads the source, writing the cache file and indexing; the file replaces the old one
/// only when it is whole ([`crate::sys::durable`]).
fn write_cache(
    name: &str,
    source: &dyn CollectionSource,
    path: &Path,
    indexed: &[String],
    hint: &mut HintBuilder,
) -> Result<(CollectionStore, LoadReport, u32), StoreError> {
    let mut indexer = Indexer::new(indexed);
    let mut crc = crc32fast::Hasher::new();
    let mut failed: Option<StoreError> = None;
    let mut loaded: Option<LoadReport> = None;
    let written = crate::sys::durable::write_and_open(path, |out| {
        let mut buf = Vec::new();
        let report = collection::load_with(name, source, &mut |obj| {
            if failed.is_some() {
                return;
            }
            buf.clear();
            write_object(&obj, &mut buf);
            if let Err(e) = out.write_all(&buf) {
                failed = Some(io_error("write", path)(e));
                return;
            }
            crc.update(&buf);
            if let Err(e) = indexer.add(&obj, buf.len() as u64) {
                failed = Some(e);
                return;
            }
            hint.add_object(&obj);
        });
        match report {
            Ok((report, _)) if failed.is_none() => {
                loaded = Some(report);
                Ok(())
            }
            Ok(_) => Err(io::Error::other("the cache file was not written whole")),
            Err(e) => {
                failed = Some(e.into());
                Err(io::Error::other("the source could not be read"))
            }
        }
    });
    let file = match written {
        Ok(file) => file,
        Err(e) => return Err(failed.unwrap_or_else(|| io_error("write", path)(e))),
    };
    let report = loaded.unwrap_or_default();
    Ok((
        indexer.finish(file, path.to_owned()),
        report,
        crc.finalize(),
    ))
}

/// Opens an existing cache file described by `meta`, indexing it and counting it into
/// `hint`. On error also says whether `hint` was fed.
fn open_cache(
    path: &Path,
    meta: &CacheMeta,
    indexed: &[String],
    hint: &mut HintBuilder,
) -> Result<CollectionStore, (StoreError, bool)> {
    let file = File::open(path).map_err(|e| (io_error("open", path)(e), false))?;
    let len = file
        .metadata()
        .map_err(|e| (io_error("examine", path)(e), false))?
        .len();
    let corrupt = |message: String| StoreError::Corrupt {
        path: path.to_owned(),
        id: 0,
        offset: 0,
        message,
    };
    if len != meta.bytes {
        let msg = format!("{len} bytes, {} recorded", meta.bytes);
        return Err((corrupt(msg), false));
    }
    // Check the whole file before feeding the hint, so a damaged cache leaves it untouched.
    let mut crc = crc32fast::Hasher::new();
    let mut reader = PositionalReader {
        file: &file,
        pos: 0,
        end: len,
    };
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = reader
            .read(&mut chunk)
            .map_err(|e| (io_error("read", path)(e), false))?;
        if n == 0 {
            break;
        }
        crc.update(&chunk[..n]);
    }
    if crc.finalize() != meta.crc32 {
        return Err((corrupt("checksum mismatch".to_owned()), false));
    }
    let mut indexer = Indexer::new(indexed);
    let mut reader = SoifFileReader::new(
        PositionalReader {
            file: &file,
            pos: 0,
            end: len,
        },
        Limits::unlimited(),
    );
    loop {
        match reader.next_object() {
            Ok(Some(o)) => {
                indexer
                    .add(&o, o.encoded_len() as u64)
                    .map_err(|e| (e, true))?;
                hint.add_object(&o);
            }
            Ok(None) => break,
            Err(e) => return Err((corrupt(e.to_string()), true)),
        }
    }
    let end = indexer.offsets.last().copied().unwrap_or(0);
    if end != len || indexer.templates.len() as u64 != meta.objects {
        let msg = format!("objects do not add up to the file ({end} of {len} bytes)");
        return Err((corrupt(msg), true));
    }
    Ok(indexer.finish(file, path.to_owned()))
}

fn read_meta(path: &Path) -> Option<CacheMeta> {
    let text = fs::read(path).ok()?;
    serde_json::from_slice(&text).ok()
}

fn write_meta(path: &Path, meta: &CacheMeta) -> Result<(), StoreError> {
    let mut text =
        serde_json::to_vec_pretty(meta).map_err(|e| io_error("encode", path)(e.into()))?;
    text.push(b'\n');
    crate::sys::durable::write(path, &text).map_err(io_error("write", path))
}

/// Removes cache files in `dir` that belong to none of `names` (collections dropped from
/// the configuration). Stores still holding them keep reading until they are dropped.
pub fn remove_stale(dir: &Path, names: &[&str]) {
    let keep: Vec<PathBuf> = names
        .iter()
        .flat_map(|n| {
            let (a, b) = cache_paths(dir, n);
            [a, b]
        })
        .collect();
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = path
            .extension()
            .is_some_and(|e| e == "soif" || e == "meta" || e == "tmp");
        if ours
            && !keep.contains(&path)
            && let Err(e) = fs::remove_file(&path)
        {
            tracing::warn!(file = %path.display(), error = %e, "cannot remove a stale cache file");
        }
    }
}

// ---- a rebuild -------------------------------------------------------------------------------

/// What a rebuild does with one collection.
#[derive(Debug)]
pub enum Job {
    /// Unchanged: keep its store (its objects are read again for the hint).
    Keep(Arc<CollectionStore>),
    /// (Re)load it from its source.
    Load {
        /// The collection's name.
        name: String,
        /// Its source.
        source: Arc<dyn CollectionSource>,
        /// The store it had, kept when the load fails.
        previous: Option<Arc<CollectionStore>>,
    },
}

/// What a rebuild did with one collection.
#[derive(Debug)]
pub struct Outcome {
    /// The store to serve.
    pub store: Arc<CollectionStore>,
    /// For a load: its report and fingerprint, or why it failed.
    pub load: Option<Result<(LoadReport, Option<Fingerprint>), String>>,
}

/// Runs `jobs` in one pass that builds each loaded collection's store and index and counts
/// every object into a hint builder for `specs` and `thresholds`; without
/// `keep_files_open`, each store loaded closes its cache file
/// ([`CollectionStore::release_file`]).
pub fn rebuild(
    jobs: Vec<Job>,
    dir: &Path,
    specs: Vec<AttrSpec>,
    thresholds: Thresholds,
    keep_files_open: bool,
) -> (Vec<Outcome>, HintBuilder) {
    let indexed = indexed_attributes(&specs);
    let mut hint = HintBuilder::new(specs.clone(), thresholds.clone());
    let mut tainted = false;
    let mut out = Vec::with_capacity(jobs.len());
    for job in jobs {
        match job {
            Job::Keep(store) => {
                if let Err(e) = store.scan(&mut |_, o| hint.add_object(&o)) {
                    tracing::error!(error = %e, "cannot read a collection's cache file for the hint");
                    tainted = true;
                }
                out.push(Outcome { store, load: None });
            }
            Job::Load {
                name,
                source,
                previous,
            } => match load(
                &name,
                source.as_ref(),
                dir,
                &indexed,
                &mut hint,
                &mut tainted,
            ) {
                Ok(mut l) => {
                    if !keep_files_open && let Err(e) = l.store.release_file() {
                        tracing::warn!(collection = %name, error = %e, "cannot close the collection's cache file; it stays open");
                    }
                    out.push(Outcome {
                        store: Arc::new(l.store),
                        load: Some(Ok((l.report, l.fingerprint))),
                    });
                }
                Err(e) => {
                    tracing::warn!(collection = %name, error = %e, "cannot load collection; keeping its previous objects");
                    let store =
                        previous.unwrap_or_else(|| Arc::new(CollectionStore::empty(&indexed)));
                    out.push(Outcome {
                        store,
                        load: Some(Err(e.to_string())),
                    });
                }
            },
        }
    }
    if tainted {
        // A failed load left part of a collection in the counts: count everything again.
        hint = HintBuilder::new(specs, thresholds);
        for o in &out {
            if let Err(e) = o.store.scan(&mut |_, obj| hint.add_object(&obj)) {
                tracing::error!(error = %e, "cannot read a collection's cache file for the hint");
            }
        }
    }
    (out, hint)
}

// ---- file access -----------------------------------------------------------------------------

/// A store's cache file for one read: the handle it holds, or one opened for the read.
enum FileRef<'a> {
    Held(&'a File),
    Opened(File),
}

impl std::ops::Deref for FileRef<'_> {
    type Target = File;

    fn deref(&self) -> &File {
        match self {
            Self::Held(f) => f,
            Self::Opened(f) => f,
        }
    }
}

/// Which file a path names: device and inode where there are, else length and modification
/// time (a file written again in place, or another renamed over it, differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId(u64, u64, u64, Option<std::time::SystemTime>);

impl FileId {
    #[cfg(unix)]
    fn of(m: &fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self(m.dev(), m.ino(), m.len(), m.modified().ok())
    }

    #[cfg(not(unix))]
    fn of(m: &fs::Metadata) -> Self {
        Self(0, 0, m.len(), m.modified().ok())
    }
}

/// A `Read` over `file[pos..end]` by positional reads, so several readers share one handle.
struct PositionalReader<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl Read for PositionalReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end.saturating_sub(self.pos);
        let n = (buf.len() as u64).min(left) as usize;
        if n == 0 {
            return Ok(0);
        }
        let got = read_at(self.file, &mut buf[..n], self.pos)?;
        self.pos += got as u64;
        Ok(got)
    }
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, offset)
}

#[cfg(windows)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, offset)
}

fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match read_at(file, buf, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A query that cannot be answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The query does not parse.
    #[error("bad query: {0}")]
    Syntax(#[from] hints::query::QueryError),
    /// A parameter is out of range.
    #[error("bad parameter {name}: {message}")]
    BadParameter {
        /// The parameter.
        name: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A term names an attribute the local index does not cover, and checking it would
    /// read more objects than `limits.local_scan_max_objects`.
    #[error(
        "attribute {attribute:?} is not indexed and checking it would read more than {max} \
         objects (limits.local_scan_max_objects); indexed attributes: {}",
        indexed.join(", ")
    )]
    NotIndexed {
        /// The first unindexed attribute of the query.
        attribute: String,
        /// The limit.
        max: usize,
        /// The indexed attributes (lowercase, without multi-value suffix).
        indexed: Vec<String>,
    },
    /// The local store could not be read.
    #[error("local store: {0}")]
    Store(#[from] crate::store::local::StoreError),
}

/// True when local object `o` matches every term of `q` (RFC 2655 §4 attribute matching;
/// `=` equality and `~` substring, both ignoring ASCII case, on trimmed values).
pub fn object_matches(q: &Query, o: &SoifObject) -> bool {
    q.terms().iter().all(|t| {
        if let Some(tpl) = &t.template
            && !tpl.eq_ignore_ascii_case(o.template().as_str())
        {
            return false;
        }
        o.values(&t.attribute).any(|v| {
            let v = v.trim_ascii();
            match t.op {
                MatchOp::Exact => v.eq_ignore_ascii_case(&t.value),
                MatchOp::Substring => attr::contains_ignore_ascii_case(v, &t.value),
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::collection::{Progress, SoifSource};
    use proptest::prelude::*;

    /// A source over objects in memory.
    #[derive(Debug)]
    struct VecSource(Vec<SoifObject>, u64);

    impl CollectionSource for VecSource {
        fn describe(&self) -> String {
            "test".to_owned()
        }
        fn fingerprint(&self) -> Result<Fingerprint, collection::CollectionError> {
            Ok(Fingerprint(self.1))
        }
        fn load(
            &self,
            sink: &mut dyn FnMut(SoifObject),
            _progress: &mut dyn FnMut(Progress),
        ) -> Result<LoadReport, collection::CollectionError> {
            for o in &self.0 {
                sink(o.clone());
            }
            Ok(LoadReport {
                objects: self.0.len() as u64,
                ..LoadReport::default()
            })
        }
    }

    fn specs() -> Vec<AttrSpec> {
        vec![
            AttrSpec::parse("DOCUMENT:Author").unwrap(),
            AttrSpec::parse("FILE:title-1").unwrap(),
        ]
    }

    /// A fresh fingerprint per call, so each build reads its source.
    fn fresh() -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1000);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    fn build(objs: Vec<SoifObject>, dir: &Path) -> CollectionStore {
        let specs = specs();
        let mut hint = HintBuilder::new(specs.clone(), Thresholds::default());
        let mut tainted = false;
        let l = load(
            "c",
            &VecSource(objs, fresh()),
            dir,
            &indexed_attributes(&specs),
            &mut hint,
            &mut tainted,
        )
        .unwrap();
        assert!(!tainted);
        l.store
    }

    fn obj(template: &str, url: &str, pairs: &[(&str, &str)]) -> SoifObject {
        let mut o = SoifObject::new(template, url.to_owned()).unwrap();
        for (k, v) in pairs {
            o.push(k, v.to_string()).unwrap();
        }
        o
    }

    fn oracle(objs: &[SoifObject], q: &Query) -> Vec<usize> {
        (0..objs.len())
            .filter(|&i| object_matches(q, &objs[i]))
            .collect()
    }

    fn arb_object() -> impl Strategy<Value = SoifObject> {
        let template = prop::sample::select(vec!["DOCUMENT", "FILE", "document", "Image"]);
        let name = prop::sample::select(vec![
            "Author", "Author-1", "author-2", "AUTHOR-0", "Title", "Title-3", "Keywords",
        ]);
        let value = prop::sample::select(vec![
            "Ann",
            " ann ",
            "ANN",
            "Bo Garcia",
            "garcia",
            "Gar",
            "",
            "  ",
            "x-y",
            "Anna",
        ]);
        (
            template,
            prop::collection::vec((name, value), 0..5),
            0u32..1000,
        )
            .prop_map(|(t, pairs, n)| {
                let mut o = SoifObject::new(t, format!("http://x/{n}")).unwrap();
                for (k, v) in pairs {
                    o.push(k, v.to_owned()).unwrap();
                }
                o
            })
    }

    fn arb_query() -> impl Strategy<Value = Query> {
        let template = prop::option::of(prop::sample::select(vec!["DOCUMENT", "file", "Image"]));
        let name = prop::sample::select(vec!["Author", "author-7", "Title", "Keywords", "Nope"]);
        let op = prop::sample::select(vec![MatchOp::Exact, MatchOp::Substring]);
        let value = prop::sample::select(vec!["ann", "Garcia", "GAR", "a", " ann", "x-y", "n"]);
        prop::collection::vec((template, name, op, value), 1..4).prop_map(|terms| {
            let terms = terms
                .into_iter()
                .map(|(t, a, op, v)| Term {
                    template: t.map(str::to_owned),
                    attribute: a.to_owned(),
                    op,
                    value: Bytes::copy_from_slice(v.as_bytes()),
                })
                .collect();
            Query::from_terms(terms).unwrap()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn index_equals_a_scan(
            objs in prop::collection::vec(arb_object(), 0..60),
            queries in prop::collection::vec(arb_query(), 1..8),
            want in 0usize..5,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let store = build(objs.clone(), dir.path());
            prop_assert_eq!(store.len(), objs.len());
            for q in &queries {
                let expect = oracle(&objs, q);
                let got = query([&store], q, want, usize::MAX).unwrap();
                prop_assert_eq!(got.total, expect.len() as u64, "{:?}", q);
                let first: Vec<SoifObject> =
                    expect.iter().take(want).map(|&i| objs[i].clone()).collect();
                prop_assert_eq!(&got.objects, &first);
                // The scan fallback alone (no index) agrees too.
                let plain = build_unindexed(&objs, dir.path());
                let scanned = query([&plain], q, want, usize::MAX).unwrap();
                prop_assert_eq!(scanned.total, expect.len() as u64);
            }
        }
    }

    fn build_unindexed(objs: &[SoifObject], dir: &Path) -> CollectionStore {
        let mut hint = HintBuilder::new(Vec::new(), Thresholds::default());
        let mut tainted = false;
        load(
            "plain",
            &VecSource(objs.to_vec(), fresh()),
            dir,
            &[],
            &mut hint,
            &mut tainted,
        )
        .unwrap()
        .store
    }

    #[test]
    fn several_collections_add_up_and_objects_come_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let a = build(
            vec![obj("DOCUMENT", "http://a/", &[("Author", "Ann")])],
            dir.path(),
        );
        let b_dir = dir.path().join("b");
        let b = build(
            vec![
                obj("DOCUMENT", "http://b/1", &[("Author-1", "ann")]),
                obj("FILE", "http://b/2", &[("Author", "Ann")]),
            ],
            &b_dir,
        );
        let q = Query::parse("DOCUMENT:Author=ANN").unwrap();
        let got = query([&a, &b], &q, 10, 0).unwrap();
        assert_eq!(got.total, 2);
        let urls: Vec<_> = got.objects.iter().map(|o| o.url_str().unwrap()).collect();
        assert_eq!(urls, ["http://a/", "http://b/1"]);
        let got = query([&a, &b], &Query::parse("Author~nn").unwrap(), 1, 0).unwrap();
        assert_eq!((got.total, got.objects.len()), (3, 1));
    }

    #[test]
    fn unindexed_terms_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let objs: Vec<_> = (0..10)
            .map(|i| {
                let author = if i % 2 == 0 { "Ann" } else { "Bo" };
                let kw = format!("k{i}");
                obj("DOCUMENT", "-", &[("Author", author), ("Keywords", &kw)])
            })
            .collect();
        let store = build(objs, dir.path());
        let kw = Query::parse("Keywords=k3").unwrap();
        assert_eq!(query([&store], &kw, 5, 10).unwrap().total, 1);
        match query([&store], &kw, 5, 9) {
            Err(QueryError::NotIndexed {
                attribute,
                max,
                indexed,
            }) => {
                assert_eq!(attribute, "Keywords");
                assert_eq!(max, 9);
                assert_eq!(indexed, ["author", "title"]);
            }
            other => panic!("{other:?}"),
        }
        // An indexed term narrows what must be read: 5 candidates fit a budget of 5.
        let both = Query::parse("Author=ann & Keywords~k").unwrap();
        assert_eq!(query([&store], &both, 5, 5).unwrap().total, 5);
        assert!(query([&store], &both, 5, 4).is_err());
    }

    #[test]
    fn a_rebuild_leaves_old_readers_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let old = build(
            vec![obj("DOCUMENT", "http://old/", &[("Author", "Ann")])],
            dir.path(),
        );
        let new = build(
            vec![
                obj("FILE", "http://new/1", &[("Title", "t")]),
                obj("FILE", "http://new/2", &[("Title", "u")]),
            ],
            dir.path(),
        );
        assert_eq!(old.path(), new.path(), "the new cache replaced the old one");
        assert_eq!(old.read(0).unwrap().url_str(), Some("http://old/"));
        let q = Query::parse("Author=ann").unwrap();
        let got = query([&old], &q, 5, 0).unwrap();
        assert_eq!(got.objects[0].url_str(), Some("http://old/"));
        assert_eq!(new.read(1).unwrap().url_str(), Some("http://new/2"));
        let mut seen = Vec::new();
        old.scan(&mut |id, o| seen.push((id, o.url_str().unwrap().to_owned())))
            .unwrap();
        assert_eq!(seen, [(0, "http://old/".to_owned())]);
    }

    fn load_counting(source: &dyn CollectionSource, dir: &Path) -> (Loaded, HintBuilder, bool) {
        let specs = specs();
        let mut hint = HintBuilder::new(specs.clone(), Thresholds::default());
        let mut tainted = false;
        let l = load(
            "c",
            source,
            dir,
            &indexed_attributes(&specs),
            &mut hint,
            &mut tainted,
        )
        .unwrap();
        (l, hint, tainted)
    }

    #[test]
    fn an_intact_cache_is_reused_and_a_damaged_one_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let objs = vec![
            obj("DOCUMENT", "http://a/", &[("Author", "Ann")]),
            obj("DOCUMENT", "http://b/", &[("Author", "Bo")]),
        ];
        let source = VecSource(objs.clone(), 7);
        let (first, _, _) = load_counting(&source, dir.path());
        assert!(!first.from_cache);
        let path = first.store.path().to_owned();
        drop(first);

        let (again, hint, tainted) = load_counting(&source, dir.path());
        assert!(again.from_cache);
        assert!(!tainted);
        assert_eq!(hint.objects(), 2);
        assert_eq!(again.store.read(1).unwrap(), objs[1]);
        drop(again);

        // Flip one byte: the checksum catches it, the source is read again.
        let mut bytes = fs::read(&path).unwrap();
        let i = bytes.iter().position(|&b| b == b'B').unwrap();
        bytes[i] = b'C';
        fs::write(&path, &bytes).unwrap();
        let (fixed, hint, tainted) = load_counting(&source, dir.path());
        assert!(!fixed.from_cache);
        assert!(
            !tainted,
            "a damaged cache is detected before the hint is fed"
        );
        assert_eq!(hint.objects(), 2);
        assert_eq!(fixed.store.read(1).unwrap(), objs[1]);
        drop(fixed);

        // Missing cache file: rewritten.
        fs::remove_file(&path).unwrap();
        let (fixed, _, _) = load_counting(&source, dir.path());
        assert!(!fixed.from_cache);
        assert_eq!(fixed.store.len(), 2);
        drop(fixed);

        // Garbage sidecar: ignored, rewritten.
        let (_, meta) = cache_paths(dir.path(), "c");
        fs::write(&meta, "not json").unwrap();
        let (fixed, _, _) = load_counting(&source, dir.path());
        assert!(!fixed.from_cache);
        assert!(read_meta(&meta).is_some());

        // A changed fingerprint reads the source.
        let changed = VecSource(objs[..1].to_vec(), 8);
        let (l, _, _) = load_counting(&changed, dir.path());
        assert!(!l.from_cache);
        assert_eq!(l.store.len(), 1);
    }

    #[test]
    fn a_changed_source_file_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.soif");
        fs::write(&file, "@DOCUMENT { u1\nAuthor{3}:\tAnn\n}\n").unwrap();
        let source = SoifSource {
            files: collection::FileSet {
                path: file.clone(),
                recursive: false,
                extensions: Vec::new(),
            },
            limits: Limits::default(),
        };
        let cache = dir.path().join("cache");
        let (first, _, _) = load_counting(&source, &cache);
        assert_eq!(first.store.len(), 1);
        let before = first.fingerprint;
        fs::write(
            &file,
            "@DOCUMENT { u1\nAuthor{3}:\tAnn\n}\n@DOCUMENT { u2\nAuthor{2}:\tBo\n}\n",
        )
        .unwrap();
        assert_ne!(source.fingerprint().ok(), before);
        let (second, _, _) = load_counting(&source, &cache);
        assert!(!second.from_cache);
        assert_eq!(second.store.len(), 2);
        let q = Query::parse("Author=bo").unwrap();
        assert_eq!(query([&second.store], &q, 1, 0).unwrap().total, 1);
        // The first store still answers from its own bytes.
        assert_eq!(query([&first.store], &q, 1, 0).unwrap().total, 0);
        assert_eq!(first.store.read(0).unwrap().url_str(), Some("u1"));
    }

    #[test]
    fn a_failed_load_recounts_the_hint() {
        #[derive(Debug)]
        struct Broken;
        impl CollectionSource for Broken {
            fn describe(&self) -> String {
                "broken".into()
            }
            fn fingerprint(&self) -> Result<Fingerprint, collection::CollectionError> {
                Ok(Fingerprint(1))
            }
            fn load(
                &self,
                sink: &mut dyn FnMut(SoifObject),
                _: &mut dyn FnMut(Progress),
            ) -> Result<LoadReport, collection::CollectionError> {
                sink(SoifObject::new("DOCUMENT", "-").unwrap());
                Err(collection::CollectionError::Io {
                    path: "x".into(),
                    source: io::Error::other("gone"),
                })
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let good: Arc<dyn CollectionSource> =
            Arc::new(VecSource(vec![obj("DOCUMENT", "-", &[("Author", "A")])], 1));
        let jobs = vec![
            Job::Load {
                name: "good".into(),
                source: good,
                previous: None,
            },
            Job::Load {
                name: "bad".into(),
                source: Arc::new(Broken),
                previous: None,
            },
        ];
        let (out, hint) = rebuild(jobs, dir.path(), specs(), Thresholds::default(), true);
        assert_eq!(
            hint.objects(),
            1,
            "the broken collection's object is not counted"
        );
        assert!(matches!(out[0].load, Some(Ok(_))));
        assert!(matches!(&out[1].load, Some(Err(e)) if e.contains("gone")));
        assert!(out[1].store.is_empty());
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
    }

    #[test]
    fn a_released_file_is_opened_for_each_read_and_a_replaced_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let objs = vec![
            obj("DOCUMENT", "u1", &[("Author", "Ann")]),
            obj("DOCUMENT", "u2", &[("Author", "Bo")]),
        ];
        let job = |objs: &[SoifObject]| {
            vec![Job::Load {
                name: "docs".into(),
                source: Arc::new(VecSource(objs.to_vec(), fresh())),
                previous: None,
            }]
        };
        let (held, _) = rebuild(job(&objs), dir.path(), specs(), Thresholds::default(), true);
        let held = held[0].store.clone();
        let (out, hint) = rebuild(
            job(&objs),
            dir.path(),
            specs(),
            Thresholds::default(),
            false,
        );
        let released = out[0].store.clone();
        assert_eq!(hint.objects(), 2);
        assert!(released.file.is_none() && released.released.is_some());
        // Every way of reading opens the file.
        assert_eq!(released.read(1).unwrap().url(), b"u2".as_slice());
        let mut seen = Vec::new();
        released
            .scan(&mut |id, o| seen.push((id, o.url().to_vec())))
            .unwrap();
        assert_eq!(seen, [(0, b"u1".to_vec()), (1, b"u2".to_vec())]);
        let mut raw = Vec::new();
        released
            .copy_raw(&mut |b| {
                raw.extend_from_slice(b);
                Ok(())
            })
            .unwrap();
        assert_eq!(raw.len() as u64, released.bytes());
        // A reload puts another file in its place: the released store refuses to read it at
        // its old offsets, the store holding its file still reads its own.
        let (_new, _) = rebuild(
            job(&objs[1..]),
            dir.path(),
            specs(),
            Thresholds::default(),
            true,
        );
        let err = released.read(0).unwrap_err().to_string();
        assert!(err.contains("replaced"), "{err}");
        assert!(released.scan(&mut |_, _| {}).is_err());
        assert_eq!(held.read(0).unwrap().url(), b"u1".as_slice());
    }

    #[test]
    fn list_operations() {
        assert_eq!(intersect(&[1, 3, 5, 7], &[3, 4, 5]), [3, 5]);
        let long: Vec<u32> = (0..1000).collect();
        assert_eq!(intersect(&[5, 999, 1000], &long), [5, 999]);
        assert_eq!(union(vec![&[1, 5], &[2, 5]], 10_000), [1, 2, 5]);
        assert_eq!(
            union(vec![&[1, 5], &[2, 5, 63, 64]], 64 * 3),
            [1, 2, 5, 63, 64]
        );
    }

    #[test]
    fn substring_does_not_span_values() {
        let dir = tempfile::tempdir().unwrap();
        let store = build(
            vec![
                obj("DOCUMENT", "-", &[("Author", "ab")]),
                obj("DOCUMENT", "-", &[("Author", "cd")]),
            ],
            dir.path(),
        );
        let q = |s: &str| {
            query([&store], &Query::parse(s).unwrap(), 0, 0)
                .unwrap()
                .total
        };
        assert_eq!(q("Author~bc"), 0);
        assert_eq!(q("Author~b"), 1);
        assert_eq!(q("Author~D"), 1);
    }
}
