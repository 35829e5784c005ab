//! The SOIF parser: one scanner shared by the incremental [`SoifDecoder`] and the borrowed
//! [`SoifReader`].
//!
//! The scanner works on a byte slice that may end mid-object. It remembers how far it got
//! (the last complete attribute) and, while waiting for a value's bytes, the length the buffer
//! must reach before there is anything new to look at, so a slow sender or a file read in
//! small chunks never makes parsing quadratic. Values are never scanned: the parser jumps over
//! them by their declared size.

use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::Decoder;

use super::error::{SoifError, SoifErrorKind};
use super::{Attribute, Identifier, SoifObject, is_identifier_byte};

/// Bounds on what the parser accepts; input past a bound is an error, checked before the
/// parser buffers or waits for the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest value, in bytes.
    pub max_value_size: usize,
    /// Most attribute-value pairs in one object.
    pub max_attributes: usize,
    /// Largest object, from `@` to the closing `}`, in bytes.
    pub max_object_size: usize,
    /// Longest template type, attribute identifier or URL, in bytes.
    pub max_token_len: usize,
}

impl Default for Limits {
    /// 16 MiB values, 65,536 attributes, 64 MiB objects, 8 KiB tokens.
    fn default() -> Self {
        Self {
            max_value_size: 16 << 20,
            max_attributes: 65_536,
            max_object_size: 64 << 20,
            max_token_len: 8 << 10,
        }
    }
}

impl Limits {
    /// No practical bounds, for trusted local files the operator asked to read whole.
    pub fn unlimited() -> Self {
        Self {
            max_value_size: usize::MAX,
            max_attributes: usize::MAX,
            max_object_size: usize::MAX,
            max_token_len: usize::MAX,
        }
    }
}

/// Where the scanner is inside the current object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between objects: skipping whitespace, looking for `@`.
    Seek,
    /// Just after `@`.
    Template,
    /// After the template type, before `{`.
    Brace,
    /// After `{`, before the URL.
    Url,
    /// Between pairs: an identifier or the closing `}`.
    Attributes,
}

/// Scanner state, all positions relative to the start of the slice being scanned.
#[derive(Debug, Clone)]
pub(super) struct ScanState {
    phase: Phase,
    /// Next byte to look at.
    cursor: usize,
    /// Offset of the current object's `@`.
    start: usize,
    template: Range<usize>,
    url: Range<usize>,
    attributes: Vec<(Range<usize>, Range<usize>)>,
    /// Nothing new can be learnt until the input is at least this long.
    need: usize,
}

impl ScanState {
    pub(super) fn new() -> Self {
        Self {
            phase: Phase::Seek,
            cursor: 0,
            start: 0,
            template: 0..0,
            url: 0..0,
            attributes: Vec::new(),
            need: 0,
        }
    }

    fn reset(&mut self) {
        self.phase = Phase::Seek;
        self.cursor = 0;
        self.start = 0;
        self.attributes.clear();
        self.need = 0;
    }
}

/// What one scan step found.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// A whole object ends just before this offset.
    Object(usize),
    /// The input ends between objects (only whitespace left); at end of input this is the end.
    Idle,
    /// The input ends inside an object; more bytes are needed.
    More,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c)
}

#[inline]
pub(super) fn skip_ws(buf: &[u8], mut i: usize) -> usize {
    while i < buf.len() && is_ws(buf[i]) {
        i += 1;
    }
    i
}

/// The end of the identifier starting at `i`: the first byte that is not an identifier
/// byte. Attribute identifiers end at their `{`, found with one `memchr` and the bytes
/// before it checked in one tight loop; otherwise byte by byte.
#[inline]
fn scan_ident(buf: &[u8], i: usize) -> usize {
    if let Some(n) = memchr::memchr(b'{', &buf[i..]).filter(|&n| n <= 64)
        && buf[i..i + n].iter().all(|&b| is_identifier_byte(b))
    {
        return i + n;
    }
    let mut i = i;
    while i < buf.len() && is_identifier_byte(buf[i]) {
        i += 1;
    }
    i
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Advances the scanner over `buf`. `eof` says no more bytes will come.
///
/// Errors carry offsets relative to `buf`; callers shift them to absolute stream offsets.
fn scan(buf: &[u8], st: &mut ScanState, limits: &Limits, eof: bool) -> Result<Step, SoifError> {
    if buf.len() < st.need && !eof {
        return Ok(Step::More);
    }
    let err = |at: usize, kind| Err(SoifError::new(at as u64, kind));
    loop {
        match st.phase {
            Phase::Seek => {
                let i = skip_ws(buf, st.cursor);
                st.cursor = i;
                match buf.get(i) {
                    None => return Ok(Step::Idle),
                    Some(b'@') => {
                        st.start = i;
                        st.cursor = i + 1;
                        st.phase = Phase::Template;
                    }
                    Some(&b) => return err(i, SoifErrorKind::GarbageBeforeObject { found: b }),
                }
            }
            Phase::Template => {
                let i = scan_ident(buf, st.cursor);
                if i - st.cursor > limits.max_token_len {
                    let max = limits.max_token_len;
                    return err(
                        st.cursor,
                        SoifErrorKind::TokenTooLong {
                            what: "template type",
                            max,
                        },
                    );
                }
                if i == buf.len() {
                    return more(st, buf, limits, eof, "a template type and '{'");
                }
                if i == st.cursor {
                    return err(
                        i,
                        SoifErrorKind::MissingTemplate {
                            found: Some(buf[i]),
                        },
                    );
                }
                st.template = st.cursor..i;
                st.cursor = i;
                st.phase = Phase::Brace;
            }
            Phase::Brace => {
                let i = skip_ws(buf, st.cursor);
                match buf.get(i) {
                    None => return more(st, buf, limits, eof, "'{' after the template type"),
                    Some(b'{') => {
                        st.cursor = i + 1;
                        st.phase = Phase::Url;
                    }
                    Some(&b) => return err(i, SoifErrorKind::ExpectedOpenBrace { found: Some(b) }),
                }
            }
            Phase::Url => {
                let i = skip_ws(buf, st.cursor);
                let mut j = i;
                while j < buf.len() && !is_ws(buf[j]) && buf[j] != b'}' {
                    j += 1;
                }
                if j - i > limits.max_token_len {
                    return err(
                        i,
                        SoifErrorKind::TokenTooLong {
                            what: "URL",
                            max: limits.max_token_len,
                        },
                    );
                }
                if j == buf.len() {
                    st.cursor = i;
                    return more(st, buf, limits, eof, "a URL or '-'");
                }
                if j == i {
                    return err(
                        i,
                        SoifErrorKind::MissingUrl {
                            found: Some(buf[i]),
                        },
                    );
                }
                st.url = i..j;
                st.cursor = j;
                st.phase = Phase::Attributes;
            }
            Phase::Attributes => {
                // Hot loop: one iteration per pair.
                loop {
                    let i = skip_ws(buf, st.cursor);
                    let Some(&first) = buf.get(i) else {
                        st.cursor = i;
                        return more(st, buf, limits, eof, "an attribute or '}'");
                    };
                    if first == b'}' {
                        let end = i + 1;
                        check_object_size(st, end, limits)?;
                        return Ok(Step::Object(end));
                    }
                    st.cursor = i;
                    let name_end = scan_ident(buf, i);
                    if name_end - i > limits.max_token_len {
                        let max = limits.max_token_len;
                        return err(
                            i,
                            SoifErrorKind::TokenTooLong {
                                what: "attribute identifier",
                                max,
                            },
                        );
                    }
                    if name_end == i {
                        return err(i, SoifErrorKind::ExpectedAttribute { found: Some(first) });
                    }
                    let Some(&b) = buf.get(name_end) else {
                        return more(st, buf, limits, eof, "'{' and a value size");
                    };
                    if b != b'{' {
                        let name = lossy(&buf[i..name_end]);
                        return err(
                            name_end,
                            SoifErrorKind::ExpectedSize {
                                name,
                                found: Some(b),
                            },
                        );
                    }
                    let (size, after) = match parse_size(buf, name_end + 1, i..name_end)? {
                        Some(v) => v,
                        None => return more(st, buf, limits, eof, "a value size and '}'"),
                    };
                    match (buf.get(after), buf.get(after + 1)) {
                        (Some(b':'), Some(b'\t')) => {}
                        (Some(b':'), None) | (None, _) => {
                            return more(st, buf, limits, eof, "':<TAB>' after the value size");
                        }
                        (Some(b':'), Some(&b)) => {
                            let name = lossy(&buf[i..name_end]);
                            let kind = SoifErrorKind::MissingDelimiter {
                                name,
                                size,
                                found: Some(b),
                            };
                            return err(after + 1, kind);
                        }
                        (Some(&b), _) => {
                            let name = lossy(&buf[i..name_end]);
                            let kind = SoifErrorKind::MissingDelimiter {
                                name,
                                size,
                                found: Some(b),
                            };
                            return err(after, kind);
                        }
                    }
                    let value_start = after + 2;
                    if size > limits.max_value_size as u64 {
                        let name = lossy(&buf[i..name_end]);
                        let max = limits.max_value_size;
                        return err(name_end, SoifErrorKind::ValueTooLarge { name, size, max });
                    }
                    // Cannot overflow: size <= max_value_size <= usize::MAX, checked above,
                    // but the sum still may; saturate and let the object-size check refuse it.
                    let value_end = value_start.saturating_add(size as usize);
                    check_object_size(st, value_end, limits)?;
                    if value_end > buf.len() {
                        if eof {
                            let name = lossy(&buf[i..name_end]);
                            let available = (buf.len() - value_start) as u64;
                            let kind = SoifErrorKind::SizePastEnd {
                                name,
                                size,
                                available,
                            };
                            return err(name_end, kind);
                        }
                        st.need = value_end;
                        return Ok(Step::More);
                    }
                    if st.attributes.len() == limits.max_attributes {
                        let max = limits.max_attributes;
                        return err(i, SoifErrorKind::TooManyAttributes { max });
                    }
                    st.attributes.push((i..name_end, value_start..value_end));
                    st.cursor = value_end;
                }
            }
        }
    }
}

/// Scans the one object of `input` that starts at `at` (a byte that is not whitespace),
/// from a fresh state: `Ok(Some(end))` with the absolute offset just past its `}`; `Ok(None)`
/// when the input ends first and `eof` is false (more bytes will come). Errors carry
/// absolute offsets.
pub(super) fn scan_object_at(
    input: &[u8],
    at: usize,
    st: &mut ScanState,
    limits: &Limits,
    eof: bool,
) -> Result<Option<usize>, SoifError> {
    st.reset();
    match scan(&input[at..], st, limits, eof).map_err(|e| e.shifted(at as u64))? {
        Step::Object(end) => Ok(Some(at + end)),
        // At end of input `scan` reports an unfinished object as an error, and `at` is not
        // whitespace, so this is an object waiting for more bytes.
        Step::Idle | Step::More => Ok(None),
    }
}

/// Parses the digits of `{SIZE}` starting at `at`; `Ok(None)` when the input ends first.
/// Returns the size and the offset just past `}`.
fn parse_size(
    buf: &[u8],
    at: usize,
    name: Range<usize>,
) -> Result<Option<(u64, usize)>, SoifError> {
    let mut size: u64 = 0;
    let mut j = at;
    loop {
        match buf.get(j) {
            None => return Ok(None),
            Some(&d @ b'0'..=b'9') => {
                size = match size
                    .checked_mul(10)
                    .and_then(|s| s.checked_add(u64::from(d - b'0')))
                {
                    Some(s) => s,
                    None => {
                        let kind = SoifErrorKind::SizeOverflow {
                            name: lossy(&buf[name]),
                        };
                        return Err(SoifError::new(at as u64, kind));
                    }
                };
                j += 1;
            }
            Some(b'}') if j == at => {
                let kind = SoifErrorKind::EmptySize {
                    name: lossy(&buf[name]),
                };
                return Err(SoifError::new(j as u64, kind));
            }
            Some(b'}') => return Ok(Some((size, j + 1))),
            Some(&b) => {
                let kind = SoifErrorKind::NonNumericSize {
                    name: lossy(&buf[name]),
                    found: Some(b),
                };
                return Err(SoifError::new(j as u64, kind));
            }
        }
    }
}

fn check_object_size(st: &ScanState, end: usize, limits: &Limits) -> Result<(), SoifError> {
    if end - st.start > limits.max_object_size {
        let kind = SoifErrorKind::ObjectTooLarge {
            max: limits.max_object_size,
        };
        return Err(SoifError::new(st.start as u64, kind));
    }
    Ok(())
}

/// The input ended inside an object: wait for more, or fail at end of input.
fn more(
    st: &ScanState,
    buf: &[u8],
    limits: &Limits,
    eof: bool,
    expected: &'static str,
) -> Result<Step, SoifError> {
    if eof {
        let kind = SoifErrorKind::UnexpectedEof {
            object_start: st.start as u64,
            expected,
        };
        return Err(SoifError::new(buf.len() as u64, kind));
    }
    check_object_size(st, buf.len(), limits)?;
    Ok(Step::More)
}

/// An incremental SOIF parser over a growing buffer, usable as a `tokio_util` [`Decoder`].
///
/// Feed it bytes as they arrive; each complete object comes out as a [`SoifObject`] whose
/// values are zero-copy slices of the buffer. Errors report absolute stream offsets.
///
/// ```
/// use bytes::BytesMut;
/// use cip_proto::soif::SoifDecoder;
/// use tokio_util::codec::Decoder;
///
/// let mut dec = SoifDecoder::default();
/// let mut buf = BytesMut::from(&b"@FILE { - \nTitle{5}:\thello\n"[..]);
/// assert!(dec.decode(&mut buf).unwrap().is_none());
/// buf.extend_from_slice(b"}\n");
/// let obj = dec.decode(&mut buf).unwrap().unwrap();
/// assert_eq!(obj.first("title").unwrap(), "hello");
/// ```
#[derive(Debug, Clone)]
pub struct SoifDecoder {
    limits: Limits,
    state: ScanState,
    /// Absolute stream offset of the buffer's first byte.
    base: u64,
}

impl Default for SoifDecoder {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl SoifDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            state: ScanState::new(),
            base: 0,
        }
    }

    /// Absolute offset of the next unconsumed byte.
    pub fn position(&self) -> u64 {
        self.base
    }

    fn step(&mut self, buf: &mut BytesMut, eof: bool) -> Result<Option<SoifObject>, SoifError> {
        let step =
            scan(buf, &mut self.state, &self.limits, eof).map_err(|e| e.shifted(self.base))?;
        match step {
            Step::Object(end) => {
                let bytes = buf.split_to(end).freeze();
                self.base += end as u64;
                Ok(Some(take_object(&bytes, &mut self.state)))
            }
            Step::Idle => {
                // Drop the whitespace seen so far so the buffer does not grow between objects.
                let n = self.state.cursor;
                buf.advance(n);
                self.base += n as u64;
                self.state.reset();
                Ok(None)
            }
            Step::More => {
                if self.state.need > buf.len() {
                    // Reserve for the value being waited on (bounded by the limits checked), at
                    // most 8 MiB at a time so a lying size costs no more than the bytes sent.
                    buf.reserve((self.state.need - buf.len()).min(8 << 20));
                }
                Ok(None)
            }
        }
    }
}

impl SoifDecoder {
    /// After an error at absolute offset `error_at`, drops input up to the next line that
    /// starts with `@` so parsing can go on with the following object. Returns `false` when
    /// the buffer holds no such line yet: read more and call again (with the same offset).
    ///
    /// Recovery is a heuristic: a value that itself holds a line starting with `@` may yield
    /// follow-on errors. It serves tools that list every broken object; the daemon stops at
    /// the first error instead.
    pub fn resync(&mut self, buf: &mut BytesMut, error_at: u64) -> bool {
        self.state = ScanState::new();
        let from = (error_at.saturating_sub(self.base) as usize).min(buf.len());
        match memchr::memmem::find(&buf[from..], b"\n@") {
            Some(i) => {
                let n = from + i + 1;
                buf.advance(n);
                self.base += n as u64;
                true
            }
            None => {
                // Keep the last byte: it may be the LF of a "\n@" split across reads.
                let n = buf
                    .len()
                    .saturating_sub(1)
                    .max(from.min(buf.len().saturating_sub(1)));
                buf.advance(n);
                self.base += n as u64;
                false
            }
        }
    }
}

impl Decoder for SoifDecoder {
    type Item = SoifObject;
    type Error = SoifError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<SoifObject>, SoifError> {
        self.step(buf, false)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<SoifObject>, SoifError> {
        let obj = self.step(buf, true)?;
        if obj.is_none() && !buf.is_empty() {
            // Only whitespace was left; it is consumed.
            buf.clear();
        }
        Ok(obj)
    }
}

/// Parses a whole in-memory SOIF stream into owned objects.
///
/// The objects' names and values are slices of `input`, which is never copied (a hint of
/// tens of megabytes is held once, not twice).
///
/// # Errors
/// The first [`SoifError`], with its absolute offset.
pub fn parse_all(input: impl Into<Bytes>, limits: Limits) -> Result<Vec<SoifObject>, SoifError> {
    let mut rest: Bytes = input.into();
    let mut state = ScanState::new();
    let mut base = 0u64;
    let mut out = Vec::new();
    loop {
        match scan(&rest, &mut state, &limits, true).map_err(|e| e.shifted(base))? {
            Step::Object(end) => {
                let bytes = rest.split_to(end);
                base += end as u64;
                out.push(take_object(&bytes, &mut state));
            }
            // At the end of the input only whitespace is left (or, for `More`, nothing a
            // scan at end of input could complete: it reports that as an error).
            Step::Idle | Step::More => return Ok(out),
        }
    }
}

/// The object `scan` found, its parts sliced out of `bytes` (the object's own bytes, from
/// the start of the scan); resets `st` for the next one.
fn take_object(bytes: &Bytes, st: &mut ScanState) -> SoifObject {
    let template = Identifier::from_checked(bytes.slice(st.template.clone()));
    let url = bytes.slice(st.url.clone());
    let attributes = st
        .attributes
        .drain(..)
        .map(|(n, v)| Attribute {
            name: Identifier::from_checked(bytes.slice(n)),
            value: bytes.slice(v),
        })
        .collect();
    st.reset();
    SoifObject::from_parts(template, url, attributes)
}

/// One attribute-value pair borrowed from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttrRef<'a> {
    /// The identifier as written (ASCII identifier bytes).
    pub name: &'a [u8],
    /// The value's bytes.
    pub value: &'a [u8],
}

impl AttrRef<'_> {
    /// The identifier as text.
    #[allow(
        clippy::expect_used,
        reason = "the scanner accepts only ASCII identifier bytes in names"
    )]
    pub fn name_str(&self) -> &str {
        std::str::from_utf8(self.name).expect("identifier bytes are ASCII")
    }
}

/// A summary object borrowed from the input of a [`SoifReader`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef<'a> {
    /// Offset of the object's `@` in the input.
    pub offset: u64,
    /// The template type (ASCII identifier bytes).
    pub template: &'a [u8],
    /// The URL, `-` when none.
    pub url: &'a [u8],
    /// The pairs in input order.
    pub attributes: Vec<AttrRef<'a>>,
}

impl<'a> ObjectRef<'a> {
    /// The template type as text.
    #[allow(
        clippy::expect_used,
        reason = "the scanner accepts only ASCII identifier bytes in template types"
    )]
    pub fn template_str(&self) -> &'a str {
        std::str::from_utf8(self.template).expect("identifier bytes are ASCII")
    }

    /// Copies the object into an owned [`SoifObject`].
    pub fn to_owned_object(&self) -> SoifObject {
        let attributes = self
            .attributes
            .iter()
            .map(|a| Attribute {
                name: Identifier::from_checked(Bytes::copy_from_slice(a.name)),
                value: Bytes::copy_from_slice(a.value),
            })
            .collect();
        SoifObject::from_parts(
            Identifier::from_checked(Bytes::copy_from_slice(self.template)),
            Bytes::copy_from_slice(self.url),
            attributes,
        )
    }
}

/// Parses a complete in-memory SOIF stream, yielding borrowed objects.
///
/// This is the fast path for bulk work: no allocation per attribute and no reference
/// counting. After an error the reader yields nothing more.
#[derive(Debug)]
pub struct SoifReader<'a> {
    input: &'a [u8],
    pos: usize,
    limits: Limits,
    state: ScanState,
    failed: bool,
}

impl<'a> SoifReader<'a> {
    /// A reader over `input` with the default [`Limits`].
    pub fn new(input: &'a [u8]) -> Self {
        Self::with_limits(input, Limits::default())
    }

    /// A reader over `input` enforcing `limits`.
    pub fn with_limits(input: &'a [u8], limits: Limits) -> Self {
        Self {
            input,
            pos: 0,
            limits,
            state: ScanState::new(),
            failed: false,
        }
    }

    /// The next object, `Ok(None)` at the end of input.
    ///
    /// # Errors
    /// A [`SoifError`] with its absolute offset.
    pub fn next_object(&mut self) -> Result<Option<ObjectRef<'a>>, SoifError> {
        if self.failed {
            return Ok(None);
        }
        let rest = &self.input[self.pos..];
        let step = scan(rest, &mut self.state, &self.limits, true);
        let base = self.pos as u64;
        match step {
            Err(e) => {
                self.failed = true;
                Err(e.shifted(base))
            }
            Ok(Step::Object(end)) => {
                let st = &mut self.state;
                let obj = ObjectRef {
                    offset: base + st.start as u64,
                    template: &rest[st.template.clone()],
                    url: &rest[st.url.clone()],
                    attributes: st
                        .attributes
                        .drain(..)
                        .map(|(n, v)| AttrRef {
                            name: &rest[n],
                            value: &rest[v],
                        })
                        .collect(),
                };
                st.reset();
                self.pos += end;
                Ok(Some(obj))
            }
            // At end of input `scan` reports an unfinished object as an error, so these mean
            // only whitespace remained.
            Ok(Step::Idle | Step::More) => {
                self.pos = self.input.len();
                Ok(None)
            }
        }
    }
}

impl<'a> Iterator for SoifReader<'a> {
    type Item = Result<ObjectRef<'a>, SoifError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_object().transpose()
    }
}
