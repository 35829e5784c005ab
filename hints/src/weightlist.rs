//! The `Weightlist-[Template:Attribute]` value codec (RFC 2655 Appendix B), and the
//! [`Weightlist`] and [`WeightEntry`] it reads and writes (re-exported by [`crate::hint`]).
//!
//! A weightlist is a comma-separated run of `Value;Object-Count` entries. The RFC asks only
//! that commas inside values be escaped; it does not say how, nor how a backslash itself is
//! written. Our rules:
//!
//! * **Escapes.** A backslash makes the next byte literal: `\,` is a comma, `\\` a backslash,
//!   `\;` a semicolon, `\<SP>` a space. A backslash as the very last byte of the weightlist
//!   escapes nothing and is an error.
//! * **Entries** end at an unescaped `,`. Whitespace (SP, TAB, CR, LF) at the start of an
//!   entry is skipped, so `a;1, b;2` and the line-wrapped forms real hints use both parse.
//!   Entries that are empty or only whitespace are skipped, which makes a trailing comma
//!   harmless (the Appendix B example ends with one).
//! * **Count.** The count follows the *last* unescaped `;` of the entry, so a value may hold
//!   `;` unescaped (`a;b;3` is the value `a;b` held by 3 objects). Whitespace around the count
//!   is ignored; the count is a decimal `u64`. Zero is accepted on input (the RFC says
//!   positive) and kept as is.
//! * **Values** are kept byte-exact: no trimming after the first byte, no case folding, any
//!   octet allowed.
//!
//! The canonical writer escapes exactly what must be escaped: every `,` and `\`, and the
//! first byte of a value when it is whitespace (otherwise the reader would skip it). `;` is
//! never escaped (the last-`;` rule makes that unnecessary, and readers that know only the
//! RFC's comma escape still read such values right). Entries are joined by `", "`, as in the
//! RFC example, with no trailing comma.

use std::borrow::Cow;

use bytes::Bytes;

/// One `Value;Object-Count` entry of a weightlist.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WeightEntry {
    /// The value's bytes, unescaped.
    pub value: Bytes,
    /// Number of objects holding the value at least once.
    pub count: u64,
}

/// The weighted values of one attribute, in the order the hint lists them.
///
/// A parsed weightlist keeps the checked text it was read from and reads its entries from
/// there each time they are iterated: a hint of millions of values then costs its payload
/// and nothing more until it is indexed (a list of entries would cost 40 bytes per value on
/// top, twice the payload). A built or edited one holds its entries. The two compare equal
/// when their entries are equal.
#[derive(Clone, Default)]
pub struct Weightlist {
    repr: Repr,
}

#[derive(Clone)]
enum Repr {
    /// Entries held as such.
    Entries(Vec<WeightEntry>),
    /// The weightlist text, checked by [`parse`], and how many entries it holds.
    Text { text: Bytes, len: usize },
}

impl Default for Repr {
    fn default() -> Self {
        Self::Entries(Vec::new())
    }
}

impl Weightlist {
    /// A weightlist of `entries`, in that order.
    pub fn new(entries: Vec<WeightEntry>) -> Self {
        Self {
            repr: Repr::Entries(entries),
        }
    }

    /// A weightlist of `entries`, in that order, held as its canonical text ([`encode`]):
    /// about the bytes of the values and counts, where entries held as such cost a `Bytes`,
    /// a count and an allocation each (about 58 bytes an entry for short values). For a
    /// list kept long and read in order, such as a node's local hint; reading it scans the
    /// text, editing it ([`Weightlist::entries_mut`]) turns it back into entries.
    pub fn packed(entries: Vec<WeightEntry>) -> Self {
        let held = Self::new(entries);
        let len = held.len();
        let mut text = encode(&held);
        text.shrink_to_fit();
        Self {
            repr: Repr::Text {
                text: Bytes::from(text),
                len,
            },
        }
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Entries(e) => e.len(),
            Repr::Text { len, .. } => *len,
        }
    }

    /// True when it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// At least the bytes of its values together, known without reading them (a parsed
    /// weightlist's text is longer than its values), to size buffers up front.
    pub fn value_bytes_bound(&self) -> usize {
        match &self.repr {
            Repr::Entries(e) => e.iter().map(|e| e.value.len()).sum(),
            Repr::Text { text, .. } => text.len(),
        }
    }

    /// The entries, as `(value, count)`; a value is borrowed unless it had to be unescaped.
    /// Cheapest way to read a parsed weightlist: no reference count is touched.
    pub fn iter(&self) -> Iter<'_> {
        match &self.repr {
            Repr::Entries(e) => Iter {
                inner: IterInner::Entries(e.iter()),
            },
            Repr::Text { text, len } => Iter {
                inner: IterInner::Text {
                    text,
                    scan: Scanner::default(),
                    left: *len,
                },
            },
        }
    }

    /// The entries, owned, without copying value bytes: held entries are cloned (a
    /// reference count each), values of a parsed weightlist are slices of its text where no
    /// escape had to be undone.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = WeightEntry> + '_ {
        self.iter()
            .enumerate()
            .map(|(i, (value, count))| match (&self.repr, value) {
                (Repr::Entries(e), _) => e[i].clone(),
                (Repr::Text { text, .. }, Cow::Borrowed(v)) => WeightEntry {
                    value: text.slice_ref(v),
                    count,
                },
                (Repr::Text { .. }, Cow::Owned(v)) => WeightEntry {
                    value: Bytes::from(v),
                    count,
                },
            })
    }

    /// The entries as a list, to edit in place (a parsed weightlist is read into one first).
    pub fn entries_mut(&mut self) -> &mut Vec<WeightEntry> {
        if let Repr::Text { .. } = self.repr {
            self.repr = Repr::Entries(self.entries().collect());
        }
        match &mut self.repr {
            Repr::Entries(e) => e,
            Repr::Text { .. } => unreachable!("converted just above"),
        }
    }

    /// The entries as a list.
    pub fn into_entries(self) -> Vec<WeightEntry> {
        match self.repr {
            Repr::Entries(e) => e,
            Repr::Text { .. } => self.entries().collect(),
        }
    }
}

impl From<Vec<WeightEntry>> for Weightlist {
    fn from(entries: Vec<WeightEntry>) -> Self {
        Self::new(entries)
    }
}

impl FromIterator<WeightEntry> for Weightlist {
    fn from_iter<I: IntoIterator<Item = WeightEntry>>(iter: I) -> Self {
        Self::new(iter.into_iter().collect())
    }
}

impl PartialEq for Weightlist {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Weightlist {}

impl std::fmt::Debug for Weightlist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.iter()
                    .map(|(v, c)| (String::from_utf8_lossy(&v).into_owned(), c)),
            )
            .finish()
    }
}

/// The entries of a [`Weightlist`], as `(value, count)` ([`Weightlist::iter`]).
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    inner: IterInner<'a>,
}

#[derive(Debug, Clone)]
enum IterInner<'a> {
    Entries(std::slice::Iter<'a, WeightEntry>),
    Text {
        text: &'a Bytes,
        scan: Scanner,
        /// Entries not yet read.
        left: usize,
    },
}

impl<'a> Iterator for Iter<'a> {
    type Item = (Cow<'a, [u8]>, u64);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            IterInner::Entries(it) => it.next().map(|e| (Cow::Borrowed(&e.value[..]), e.count)),
            IterInner::Text { text, scan, left } => {
                // The text was checked when it was parsed: it reads without error.
                let e = scan.next_entry(text).and_then(Result::ok)?;
                *left = left.saturating_sub(1);
                let raw = &text[e.start..e.semi];
                Some((
                    if e.escaped {
                        Cow::Owned(unescape(raw))
                    } else {
                        Cow::Borrowed(raw)
                    },
                    e.count,
                ))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.inner {
            IterInner::Entries(it) => it.len(),
            IterInner::Text { left, .. } => *left,
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter<'_> {}

/// A weightlist value that cannot be read; `offset` is a byte offset within the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("byte {offset}: {kind}")]
pub struct WeightlistError {
    /// Byte offset within the weightlist value where the problem is.
    pub offset: usize,
    /// What is wrong.
    pub kind: WeightlistErrorKind,
}

/// The kinds of weightlist error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WeightlistErrorKind {
    /// An entry has no unescaped `;` before its count.
    #[error("entry has no ';' before an object count")]
    MissingCount,
    /// The text after the last `;` is not a decimal count.
    #[error("object count {found:?} is not a decimal number")]
    BadCount {
        /// The text found (lossy UTF-8, surrounding whitespace removed).
        found: String,
    },
    /// The count does not fit in 64 bits.
    #[error("object count {found} is too large")]
    CountOverflow {
        /// The digits found.
        found: String,
    },
    /// The value ends with a backslash that escapes nothing.
    #[error("backslash at the end of the weightlist escapes nothing")]
    DanglingEscape,
}

/// Parses a weightlist value: checks every entry and keeps `value` (a reference to it, not
/// a copy) to read them from. Values without escapes are zero-copy slices of `value`.
///
/// # Errors
/// [`WeightlistError`] with the offset of the first problem.
pub fn parse(value: &Bytes) -> Result<Weightlist, WeightlistError> {
    let mut scan = Scanner::default();
    let mut len = 0;
    while let Some(e) = scan.next_entry(value) {
        e?;
        len += 1;
    }
    Ok(Weightlist {
        repr: Repr::Text {
            text: value.clone(),
            len,
        },
    })
}

/// Where a reading of a weightlist text stands.
#[derive(Debug, Clone, Default)]
struct Scanner {
    pos: usize,
}

/// One entry found in a weightlist text.
struct RawEntry {
    /// Where its value starts.
    start: usize,
    /// Where the `;` before its count is (its value ends there).
    semi: usize,
    /// True when the value holds escapes.
    escaped: bool,
    count: u64,
}

impl Scanner {
    /// The next entry of `buf` (see the module rules), `None` at the end.
    fn next_entry(&mut self, buf: &[u8]) -> Option<Result<RawEntry, WeightlistError>> {
        let mut pos = self.pos;
        loop {
            // Skip whitespace before the entry.
            while pos < buf.len() && is_space(buf[pos]) {
                pos += 1;
            }
            if pos == buf.len() {
                self.pos = pos;
                return None;
            }
            if buf[pos] != b',' {
                break;
            }
            // Empty entry (`a;1,,b;2`, or whitespace then a comma).
            pos += 1;
        }
        let start = pos;
        let mut last_semicolon = None;
        let mut escaped = false;
        // Find the entry's end: the next unescaped comma.
        loop {
            let Some(j) = memchr::memchr3(b',', b';', b'\\', &buf[pos..]) else {
                pos = buf.len();
                break;
            };
            let at = pos + j;
            match buf[at] {
                b'\\' => {
                    if at + 1 == buf.len() {
                        self.pos = buf.len();
                        return Some(Err(WeightlistError {
                            offset: at,
                            kind: WeightlistErrorKind::DanglingEscape,
                        }));
                    }
                    escaped = true;
                    pos = at + 2;
                }
                b';' => {
                    last_semicolon = Some(at);
                    pos = at + 1;
                }
                _ => {
                    pos = at;
                    break;
                }
            }
        }
        let end = pos;
        // Step over the comma.
        self.pos = if pos < buf.len() { pos + 1 } else { pos };
        let Some(semi) = last_semicolon else {
            self.pos = buf.len();
            return Some(Err(WeightlistError {
                offset: start,
                kind: WeightlistErrorKind::MissingCount,
            }));
        };
        Some(
            parse_count(&buf[semi + 1..end], semi + 1)
                .map(|count| RawEntry {
                    start,
                    semi,
                    escaped,
                    count,
                })
                .inspect_err(|_| self.pos = buf.len()),
        )
    }
}

/// Lines of a written weightlist are broken after the entry that takes them past this many
/// bytes, so that a hint of short values stays under the 998-byte lines of RFC 5322 §2.1.1
/// and travels as text (`7bit`/`8bit`) rather than base64.
pub const WRAP_AT: usize = 900;

/// Appends the canonical encoding of `list` to `out`: entries separated by `", "`, or by
/// `",\n"` once the line passes [`WRAP_AT`] bytes (the parser skips the white space at the
/// start of an entry, line ends included).
pub fn write(list: &Weightlist, out: &mut Vec<u8>) {
    let mut digits = itoa::Buffer::new();
    let mut line_start = out.len();
    for (i, (value, count)) in list.iter().enumerate() {
        if i > 0 {
            if out.len() - line_start >= WRAP_AT {
                out.extend_from_slice(b",\n");
                line_start = out.len();
            } else {
                out.extend_from_slice(b", ");
            }
        }
        escape_value(&value, out);
        out.push(b';');
        out.extend_from_slice(digits.format(count).as_bytes());
    }
}

/// The canonical encoding of `list`.
pub fn encode(list: &Weightlist) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len_hint(list));
    write(list, &mut out);
    out
}

/// Appends `value` escaped for a weightlist entry (see the module rules) to `out`.
pub fn escape_value(value: &[u8], out: &mut Vec<u8>) {
    let mut rest = value;
    if let Some(&first) = rest.first()
        && is_space(first)
    {
        out.push(b'\\');
        out.push(first);
        rest = &rest[1..];
    }
    while let Some(j) = memchr::memchr2(b',', b'\\', rest) {
        out.extend_from_slice(&rest[..j]);
        out.push(b'\\');
        out.push(rest[j]);
        rest = &rest[j + 1..];
    }
    out.extend_from_slice(rest);
}

fn encoded_len_hint(list: &Weightlist) -> usize {
    match &list.repr {
        Repr::Entries(e) => e.iter().map(|e| e.value.len() + 24).sum(),
        Repr::Text { text, len } => text.len() + len,
    }
}

/// Whitespace skipped before an entry.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn unescape(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' && i + 1 < raw.len() {
            out.push(raw[i + 1]);
            i += 2;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    out
}

/// Parses a count; `base` is the offset of `text` within the weightlist value.
fn parse_count(text: &[u8], base: usize) -> Result<u64, WeightlistError> {
    let lead = text.iter().take_while(|b| b.is_ascii_whitespace()).count();
    let trimmed = text[lead..].trim_ascii_end();
    let offset = base + lead;
    let bad = || WeightlistError {
        offset,
        kind: WeightlistErrorKind::BadCount {
            found: String::from_utf8_lossy(trimmed).into_owned(),
        },
    };
    if trimmed.is_empty() {
        return Err(bad());
    }
    let mut n: u64 = 0;
    for &d in trimmed {
        if !d.is_ascii_digit() {
            return Err(bad());
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or_else(|| WeightlistError {
                offset,
                kind: WeightlistErrorKind::CountOverflow {
                    found: String::from_utf8_lossy(trimmed).into_owned(),
                },
            })?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_list_reads_as_the_entries_it_was_made_of() {
        let entries = vec![
            WeightEntry {
                value: Bytes::from_static(b"Garcia"),
                count: 3,
            },
            WeightEntry {
                value: Bytes::from_static(b"a, b; \"c\""),
                count: 2,
            },
            WeightEntry {
                value: Bytes::from_static(b""),
                count: 1,
            },
        ];
        let held = Weightlist::new(entries.clone());
        let mut packed = Weightlist::packed(entries.clone());
        assert_eq!(packed, held);
        assert_eq!(packed.len(), 3);
        assert_eq!(encode(&packed), encode(&held));
        assert_eq!(packed.entries().collect::<Vec<_>>(), entries);
        assert!(packed.value_bytes_bound() >= held.value_bytes_bound());
        // Edited, it is entries again.
        packed.entries_mut().pop();
        assert_eq!(packed.len(), 2);
        assert!(Weightlist::packed(Vec::new()).is_empty());
    }
    use proptest::prelude::*;

    #[test]
    fn long_lists_are_written_in_short_lines_that_read_back() {
        let list: Weightlist = (0..5_000)
            .map(|i| WeightEntry {
                value: Bytes::from(format!("Author Number {i}, Jr")),
                count: i + 1,
            })
            .collect();
        let text = encode(&list);
        let longest = text
            .split(|&b| b == b'\n')
            .map(<[u8]>::len)
            .max()
            .unwrap_or(0);
        assert!(longest < 998, "a line of {longest} bytes");
        assert!(text.split(|&b| b == b'\n').count() > 100);
        let back = parse(&Bytes::from(text.clone())).unwrap();
        assert!(back.entries().eq(list.entries()));
        // A hint of such lists travels as text, not base64.
        let hint = crate::hint::CipHint {
            url: "-".into(),
            total_object_count: 10_000,
            weightlists: vec![(
                crate::hint::AttrSpec {
                    template: "DOCUMENT".into(),
                    attribute: "Author".into(),
                },
                list,
            )],
            ..crate::hint::CipHint::default()
        };
        let payload = hint.to_soif().to_bytes();
        assert_eq!(
            cip_proto::cip::mime::TransferEncoding::for_payload(&payload),
            cip_proto::cip::mime::TransferEncoding::SevenBit
        );
    }

    fn entries(list: &Weightlist) -> Vec<(Vec<u8>, u64)> {
        list.iter().map(|(v, c)| (v.into_owned(), c)).collect()
    }

    fn want(entries: &[(&[u8], u64)]) -> Vec<(Vec<u8>, u64)> {
        entries.iter().map(|&(v, c)| (v.to_vec(), c)).collect()
    }

    #[test]
    fn appendix_b_lists() {
        let l = parse(&Bytes::from_static(
            b"Shuttle;100, Planet;227, Moon;15, Sun;33",
        ))
        .unwrap();
        assert_eq!(
            entries(&l),
            want(&[
                (&b"Shuttle"[..], 100),
                (b"Planet", 227),
                (b"Moon", 15),
                (b"Sun", 33)
            ])
        );
        let l = parse(&Bytes::from_static(
            br"Grizzard;12, Aldrin\, Buzz;15, Aldrin\, James;45,",
        ))
        .unwrap();
        assert_eq!(
            entries(&l),
            want(&[
                (&b"Grizzard"[..], 12),
                (b"Aldrin, Buzz", 15),
                (b"Aldrin, James", 45)
            ])
        );
    }

    #[test]
    fn tolerated_forms() {
        let l = parse(&Bytes::from_static(b"\r\n a;1,\n\tb;2 ,, ,c ; 3 ,")).unwrap();
        assert_eq!(entries(&l), want(&[(&b"a"[..], 1), (b"b", 2), (b"c ", 3)]));
        assert!(parse(&Bytes::new()).unwrap().is_empty());
        assert!(parse(&Bytes::from_static(b" , ,")).unwrap().is_empty());
    }

    #[test]
    fn count_follows_last_semicolon() {
        let l = parse(&Bytes::from_static(br"a;b;3, x\;y;4, p;q\;5;6")).unwrap();
        assert_eq!(
            entries(&l),
            want(&[(&b"a;b"[..], 3), (b"x;y", 4), (b"p;q;5", 6)])
        );
        let l = parse(&Bytes::from_static(br"c:\\dir;1, \ lead;2")).unwrap();
        assert_eq!(entries(&l), want(&[(&br"c:\dir"[..], 1), (b" lead", 2)]));
    }

    #[test]
    fn errors_carry_offsets() {
        let e = parse(&Bytes::from_static(b"a;1, bee;x2")).unwrap_err();
        assert_eq!(e.offset, 9);
        assert!(matches!(e.kind, WeightlistErrorKind::BadCount { ref found } if found == "x2"));
        let e = parse(&Bytes::from_static(b"a;1, b")).unwrap_err();
        assert_eq!(
            e,
            WeightlistError {
                offset: 5,
                kind: WeightlistErrorKind::MissingCount
            }
        );
        let e = parse(&Bytes::from_static(br"a;1, b\;2")).unwrap_err();
        assert_eq!(e.offset, 5);
        let e = parse(&Bytes::from_static(b"a;")).unwrap_err();
        assert_eq!(e.offset, 2);
        let e = parse(&Bytes::from_static(b"a;99999999999999999999")).unwrap_err();
        assert!(matches!(e.kind, WeightlistErrorKind::CountOverflow { .. }));
        let e = parse(&Bytes::from_static(b"a;1\\")).unwrap_err();
        assert_eq!(
            e,
            WeightlistError {
                offset: 3,
                kind: WeightlistErrorKind::DanglingEscape
            }
        );
    }

    #[test]
    fn canonical_output() {
        let list = Weightlist::new(vec![
            WeightEntry {
                value: Bytes::from_static(b"Aldrin, Buzz"),
                count: 15,
            },
            WeightEntry {
                value: Bytes::from_static(br"a\b;c"),
                count: 1,
            },
            WeightEntry {
                value: Bytes::from_static(b" x "),
                count: 2,
            },
            WeightEntry {
                value: Bytes::new(),
                count: 3,
            },
        ]);
        assert_eq!(encode(&list), br"Aldrin\, Buzz;15, a\\b;c;1, \ x ;2, ;3");
        assert_eq!(parse(&Bytes::from(encode(&list))).unwrap(), list);
    }

    #[test]
    fn parsed_and_built_lists_behave_alike() {
        let text = Bytes::from_static(br"Aldrin\, Buzz;15, Moon;2,");
        let parsed = parse(&text).unwrap();
        let built = Weightlist::new(vec![
            WeightEntry {
                value: Bytes::from_static(b"Aldrin, Buzz"),
                count: 15,
            },
            WeightEntry {
                value: Bytes::from_static(b"Moon"),
                count: 2,
            },
        ]);
        assert_eq!(parsed, built);
        assert_eq!((parsed.len(), parsed.is_empty()), (2, false));
        assert!(parsed.value_bytes_bound() >= 16);
        assert_eq!(built.value_bytes_bound(), 16);
        assert_eq!(parsed.iter().len(), 2);
        assert_eq!(
            parsed.entries().collect::<Vec<_>>(),
            built.clone().into_entries()
        );
        assert_eq!(parsed.clone().into_entries(), built.clone().into_entries());
        assert_eq!(format!("{parsed:?}"), format!("{built:?}"));
        assert_eq!(encode(&parsed), encode(&built));
        // The escaped value is unescaped into its own bytes, the other one is borrowed.
        let mut it = parsed.iter();
        assert!(matches!(it.next(), Some((Cow::Owned(_), 15))));
        assert!(matches!(it.next(), Some((Cow::Borrowed(b"Moon"), 2))));
        assert_eq!(it.next(), None);
        // Editing a parsed list reads it into entries first.
        let mut edited = parsed.clone();
        edited.entries_mut()[1].count = 3;
        assert_ne!(edited, parsed);
        assert_eq!(edited.iter().nth(1).map(|(_, c)| c), Some(3));
        assert_ne!(parsed, Weightlist::default());
    }

    #[test]
    fn held_entries_are_shared_not_copied() {
        let value = Bytes::from_static(b"shared");
        let list = Weightlist::new(vec![WeightEntry {
            value: value.clone(),
            count: 2,
        }]);
        let got = list.entries().next().unwrap();
        assert_eq!(got.value.as_ptr(), value.as_ptr());
        assert_eq!(got.count, 2);
    }

    #[test]
    fn unescaped_values_are_slices() {
        let src = Bytes::from_static(b"abc;1");
        let l = parse(&src).unwrap();
        assert_eq!(l.entries().next().unwrap().value.as_ptr(), src.as_ptr());
        assert!(
            matches!(l.iter().next(), Some((Cow::Borrowed(v), 1)) if v.as_ptr() == src.as_ptr())
        );
    }

    fn value_strategy() -> impl Strategy<Value = Vec<u8>> {
        // Bias towards the bytes the escaping rules care about.
        let byte = prop_oneof![
            4 => prop::sample::select(vec![b',', b';', b'\\', b' ', b'\t', b'\n', b'\r', b'a']),
            1 => any::<u8>(),
        ];
        prop::collection::vec(byte, 0..12)
    }

    proptest! {
        #[test]
        fn round_trip(list in prop::collection::vec((value_strategy(), any::<u64>()), 0..8)) {
            // Read back both ways: lazily from the text, and as a list.
            let list = Weightlist::new(list
                    .into_iter()
                    .map(|(v, count)| WeightEntry { value: Bytes::from(v), count })
                    .collect());
            let encoded = Bytes::from(encode(&list));
            let parsed = parse(&encoded).unwrap();
            prop_assert_eq!(parsed.len(), list.len());
            prop_assert_eq!(parsed.clone().into_entries(), list.clone().into_entries());
            prop_assert_eq!(parsed, list);
        }

        #[test]
        fn whatever_parses_is_rewritten_stably(input in prop::collection::vec(value_strategy(), 0..6)) {
            // Arbitrary input: errors are fine, panics are not, and what parses reads back
            // equal after canonical rewriting.
            let input = Bytes::from(input.join(&b";"[..]));
            if let Ok(list) = parse(&input) {
                prop_assert_eq!(parse(&Bytes::from(encode(&list))).unwrap(), list);
            }
        }
    }
}
