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

use bytes::Bytes;

/// One `Value;Object-Count` entry of a weightlist.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WeightEntry {
    /// The value's bytes, unescaped.
    pub value: Bytes,
    /// Number of objects holding the value at least once.
    pub count: u64,
}

/// The weighted values of one attribute.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Weightlist {
    /// Entries in the order the hint lists them.
    pub entries: Vec<WeightEntry>,
}

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

/// Parses a weightlist value. Values without escapes are zero-copy slices of `value`.
///
/// # Errors
/// [`WeightlistError`] with the offset of the first problem.
pub fn parse(value: &Bytes) -> Result<Weightlist, WeightlistError> {
    let buf: &[u8] = value;
    let mut entries = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        // Skip whitespace before the entry.
        while pos < buf.len() && is_space(buf[pos]) {
            pos += 1;
        }
        if pos == buf.len() {
            break;
        }
        if buf[pos] == b',' {
            // Empty entry (`a;1,,b;2`, or whitespace then a comma).
            pos += 1;
            continue;
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
                        return Err(WeightlistError {
                            offset: at,
                            kind: WeightlistErrorKind::DanglingEscape,
                        });
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
        let Some(semi) = last_semicolon else {
            return Err(WeightlistError {
                offset: start,
                kind: WeightlistErrorKind::MissingCount,
            });
        };
        let count = parse_count(&buf[semi + 1..end], semi + 1)?;
        let value = if escaped {
            Bytes::from(unescape(&buf[start..semi]))
        } else {
            value.slice(start..semi)
        };
        entries.push(WeightEntry { value, count });
        if pos < buf.len() {
            // Step over the comma.
            pos += 1;
        }
    }
    Ok(Weightlist { entries })
}

/// Appends the canonical encoding of `list` to `out`.
pub fn write(list: &Weightlist, out: &mut Vec<u8>) {
    let mut digits = itoa::Buffer::new();
    for (i, e) in list.entries.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        escape_value(&e.value, out);
        out.push(b';');
        out.extend_from_slice(digits.format(e.count).as_bytes());
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
    list.entries.iter().map(|e| e.value.len() + 24).sum()
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
    use proptest::prelude::*;

    fn entries(list: &Weightlist) -> Vec<(&[u8], u64)> {
        list.entries
            .iter()
            .map(|e| (&e.value[..], e.count))
            .collect()
    }

    #[test]
    fn appendix_b_lists() {
        let l = parse(&Bytes::from_static(
            b"Shuttle;100, Planet;227, Moon;15, Sun;33",
        ))
        .unwrap();
        assert_eq!(
            entries(&l),
            [
                (&b"Shuttle"[..], 100),
                (b"Planet", 227),
                (b"Moon", 15),
                (b"Sun", 33)
            ]
        );
        let l = parse(&Bytes::from_static(
            br"Grizzard;12, Aldrin\, Buzz;15, Aldrin\, James;45,",
        ))
        .unwrap();
        assert_eq!(
            entries(&l),
            [
                (&b"Grizzard"[..], 12),
                (b"Aldrin, Buzz", 15),
                (b"Aldrin, James", 45)
            ]
        );
    }

    #[test]
    fn tolerated_forms() {
        let l = parse(&Bytes::from_static(b"\r\n a;1,\n\tb;2 ,, ,c ; 3 ,")).unwrap();
        assert_eq!(entries(&l), [(&b"a"[..], 1), (b"b", 2), (b"c ", 3)]);
        assert!(parse(&Bytes::new()).unwrap().entries.is_empty());
        assert!(
            parse(&Bytes::from_static(b" , ,"))
                .unwrap()
                .entries
                .is_empty()
        );
    }

    #[test]
    fn count_follows_last_semicolon() {
        let l = parse(&Bytes::from_static(br"a;b;3, x\;y;4, p;q\;5;6")).unwrap();
        assert_eq!(entries(&l), [(&b"a;b"[..], 3), (b"x;y", 4), (b"p;q;5", 6)]);
        let l = parse(&Bytes::from_static(br"c:\\dir;1, \ lead;2")).unwrap();
        assert_eq!(entries(&l), [(&br"c:\dir"[..], 1), (b" lead", 2)]);
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
        let list = Weightlist {
            entries: vec![
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
            ],
        };
        assert_eq!(encode(&list), br"Aldrin\, Buzz;15, a\\b;c;1, \ x ;2, ;3");
        assert_eq!(parse(&Bytes::from(encode(&list))).unwrap(), list);
    }

    #[test]
    fn unescaped_values_are_slices() {
        let src = Bytes::from_static(b"abc;1");
        let l = parse(&src).unwrap();
        assert_eq!(l.entries[0].value.as_ptr(), src.as_ptr());
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
            let list = Weightlist {
                entries: list
                    .into_iter()
                    .map(|(v, count)| WeightEntry { value: Bytes::from(v), count })
                    .collect(),
            };
            let encoded = Bytes::from(encode(&list));
            prop_assert_eq!(parse(&encoded).unwrap(), list);
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
