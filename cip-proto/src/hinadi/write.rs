//! The canonical Hina-Di writer: CRLF line ends, `Name: value`, a blank line after every
//! block, text encoded in the chosen charset.

use encoding_rs::Encoding;

use super::field::{Block, Field};
use super::{VERSION, date};

/// Why a block or header cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// A field name outside `WORD *("-" WORD)`.
    #[error("{name:?} is not a Hina-Di field name")]
    BadName {
        /// The name.
        name: String,
    },
    /// A value with a control character or leading blank, which a reader would not read
    /// back as written.
    #[error("the value of {name} holds a control character or starts with a blank")]
    BadValue {
        /// The field.
        name: String,
    },
    /// A name given twice.
    #[error("field {name} appears twice")]
    Duplicate {
        /// The field.
        name: String,
    },
    /// An entity block with neither `URL` nor `Virtual`.
    #[error("an entity block needs a URL")]
    NoUrl,
    /// A character the charset cannot hold.
    #[error("the value of {name} has characters {charset} cannot hold")]
    Unmappable {
        /// The field.
        name: String,
        /// The charset.
        charset: &'static str,
    },
}

/// What goes into a header block.
#[derive(Debug, Clone)]
pub struct HeaderOut<'a> {
    /// `User-Agent` (`cipd/0.1.0`).
    pub user_agent: &'a str,
    /// The charset the file is written in (named in `Content-Type`).
    pub charset: &'static Encoding,
    /// `Date`, as Unix seconds.
    pub date: Option<i64>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn valid_value(value: &str) -> bool {
    !value.starts_with([' ', '\t'])
        && !value
            .chars()
            .any(|c| (c.is_control() && c != '\t') || c == '\u{2028}' || c == '\u{2029}')
}

fn put_line(out: &mut Vec<u8>, f: &Field, charset: &'static Encoding) -> Result<(), WriteError> {
    if !valid_name(&f.name) {
        return Err(WriteError::BadName {
            name: f.name.clone(),
        });
    }
    if !valid_value(&f.value) {
        return Err(WriteError::BadValue {
            name: f.name.clone(),
        });
    }
    let line = format!("{}: {}", f.name, f.value);
    let (bytes, _, unmappable) = charset.encode(&line);
    if unmappable {
        return Err(WriteError::Unmappable {
            name: f.name.clone(),
            charset: charset.name(),
        });
    }
    out.extend_from_slice(&bytes);
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// Appends the header block: `HINA/2.2beta`, `User-Agent`, `Content-Type` naming the
/// charset, `Date`, and the blank line.
///
/// # Errors
/// When the user agent is not a valid value.
pub fn write_header(out: &mut Vec<u8>, h: &HeaderOut<'_>) -> Result<(), WriteError> {
    let start = out.len();
    out.extend_from_slice(VERSION.as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut fields = vec![
        Field::new("User-Agent", h.user_agent),
        Field::new(
            "Content-Type",
            format!("text/plain; charset={}", h.charset.name()),
        ),
    ];
    if let Some(d) = h.date {
        fields.push(Field::new("Date", date::format(d)));
    }
    for f in &fields {
        if let Err(e) = put_line(out, f, h.charset) {
            out.truncate(start);
            return Err(e);
        }
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// Appends one entity block in `charset`, fields in the block's order. Nothing is written
/// when it fails.
///
/// # Errors
/// When a name or value cannot be written as it is (see [`WriteError`]); the block needs a
/// `URL` (or `Virtual`) and unique names.
pub fn write_block(
    out: &mut Vec<u8>,
    block: &Block,
    charset: &'static Encoding,
) -> Result<(), WriteError> {
    if block.url().is_none() {
        return Err(WriteError::NoUrl);
    }
    let start = out.len();
    let result = (|| {
        let mut keys: Vec<String> = Vec::with_capacity(block.fields.len());
        for f in &block.fields {
            let key = f.key();
            if keys.contains(&key) {
                return Err(WriteError::Duplicate {
                    name: f.name.clone(),
                });
            }
            keys.push(key);
            put_line(out, f, charset)?;
        }
        out.extend_from_slice(b"\r\n");
        Ok(())
    })();
    if result.is_err() {
        out.truncate(start);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::super::{HinaLimits, KnownField, parse_bytes};
    use super::*;
    use proptest::prelude::*;

    const CHARSETS: [&Encoding; 4] = [
        encoding_rs::UTF_8,
        encoding_rs::EUC_JP,
        encoding_rs::SHIFT_JIS,
        encoding_rs::ISO_2022_JP,
    ];

    fn header(charset: &'static Encoding) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(
            &mut out,
            &HeaderOut {
                user_agent: "cipd/test",
                charset,
                date: Some(784_111_777),
            },
        )
        .unwrap();
        out
    }

    #[test]
    fn writes_the_canonical_form() {
        let mut out = header(encoding_rs::UTF_8);
        let b = Block {
            line: 0,
            fields: vec![
                Field::new("URL", "http://a.jp/"),
                Field::new("Title", "日記"),
            ],
        };
        write_block(&mut out, &b, encoding_rs::UTF_8).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HINA/2.2beta\r\nUser-Agent: cipd/test\r\nContent-Type: text/plain; charset=UTF-8\r\n\
             Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\nURL: http://a.jp/\r\nTitle: 日記\r\n\r\n"
        );
    }

    #[test]
    fn refuses_what_would_not_read_back() {
        let mut out = Vec::new();
        let bad = |fields: Vec<Field>| Block { line: 0, fields };
        let cases = [
            (bad(vec![Field::new("Title", "x")]), WriteError::NoUrl),
            (
                bad(vec![Field::new("URL", "u"), Field::new("Ti tle", "x")]),
                WriteError::BadName {
                    name: "Ti tle".into(),
                },
            ),
            (
                bad(vec![Field::new("URL", "u"), Field::new("Title", "a\nb")]),
                WriteError::BadValue {
                    name: "Title".into(),
                },
            ),
            (
                bad(vec![Field::new("URL", "u"), Field::new("Title", " x")]),
                WriteError::BadValue {
                    name: "Title".into(),
                },
            ),
            (
                bad(vec![Field::new("URL", "u"), Field::new("url", "v")]),
                WriteError::Duplicate { name: "url".into() },
            ),
        ];
        for (b, want) in cases {
            assert_eq!(write_block(&mut out, &b, encoding_rs::UTF_8), Err(want));
            assert!(out.is_empty(), "nothing written on failure");
        }
        let emoji = bad(vec![Field::new("URL", "u"), Field::new("Title", "🦀")]);
        assert_eq!(
            write_block(&mut out, &emoji, encoding_rs::EUC_JP),
            Err(WriteError::Unmappable {
                name: "Title".into(),
                charset: "EUC-JP"
            })
        );
        assert!(out.is_empty());
    }

    fn arb_value() -> impl Strategy<Value = String> {
        // Characters every Japanese charset holds: ASCII, kana, common kanji, full-width.
        let pieces = prop::sample::select(vec![
            "a", "Z", "0", " ", "\t", ":", "/", ",", "-", "日", "本", "語", "の", "カ", "ナ", "漢",
            "字", "Ａ", "【", "】",
        ]);
        prop::collection::vec(pieces, 0..12).prop_map(|v| {
            let s: String = v.concat();
            s.trim_start_matches([' ', '\t']).to_owned()
        })
    }

    fn arb_block() -> impl Strategy<Value = Block> {
        let names = prop::sample::subsequence(
            vec![
                "Title",
                "Author-Name",
                "Keyword",
                "Last-Modified",
                "Method",
                "Server",
                "Authorized",
                "Authorized-url",
                "X-WDB-Title",
                "Vitural",
                "Content-Length",
            ],
            0..8,
        );
        (names, prop::collection::vec(arb_value(), 8), "[a-z]{1,8}").prop_map(
            |(names, values, host)| {
                let mut fields = vec![Field::new("URL", format!("http://{host}.jp/"))];
                for (n, v) in names.into_iter().zip(values) {
                    fields.push(Field::new(n, v));
                }
                Block { line: 0, fields }
            },
        )
    }

    proptest! {
        #[test]
        fn written_blocks_read_back_identically(
            blocks in prop::collection::vec(arb_block(), 1..6),
            which in 0usize..4,
        ) {
            let charset = CHARSETS[which];
            let mut out = header(charset);
            for b in &blocks {
                write_block(&mut out, b, charset).unwrap();
            }
            let parsed = parse_bytes(&out, HinaLimits::default()).unwrap();
            prop_assert_eq!(parsed.header.charset, charset);
            prop_assert_eq!(parsed.header.get(KnownField::UserAgent), Some("cipd/test"));
            let errors: Vec<_> = parsed
                .diagnostics
                .iter()
                .filter(|d| d.severity() == super::super::Severity::Error)
                .collect();
            prop_assert!(errors.is_empty(), "{:?}", errors);
            let got: Vec<Vec<Field>> = parsed.blocks.into_iter().map(|b| b.fields).collect();
            let want: Vec<Vec<Field>> = blocks.into_iter().map(|b| b.fields).collect();
            prop_assert_eq!(got, want);
        }
    }
}
