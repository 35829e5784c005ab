//! Entity blocks as SOIF summary objects (template `HINA`), and summary objects as blocks.
//!
//! The mapping, block to object:
//!
//! * the object's URL is the block's `URL` (or `Virtual` when it has no `URL`);
//! * every field with a non-empty value becomes an attribute of the same name, in file
//!   order; known fields take the spec's spelling (`Authorized-URL` → `Authorized-url`,
//!   `Vitural` → `Virtual`), `X-` and undefined fields keep theirs;
//! * `Keyword` is split on its separators ([`super::field::split_keywords`]) into
//!   `Keyword-1` .. `Keyword-n`, so that `HINA:Keyword` matches each keyword (RFC 2655 §3.3
//!   multi-values); the value as written is kept as `Keyword-Field`, so the block can be
//!   reproduced unmodified;
//! * values are UTF-8.
//!
//! [`to_block`] reverses it. [`from_summary`] turns any other summary object (`DOCUMENT`,
//! `FILE`) into a block when it has a URL and a date, for a node's own Hina-Di file.

use crate::soif::{SoifError, SoifObject};

use super::date;
use super::field::{Block, Field, KnownField, split_keywords};

/// The template of summary objects made from Hina-Di blocks.
pub const TEMPLATE: &str = "HINA";

/// The attribute that keeps a `Keyword` value as written.
pub const KEYWORD_FIELD: &str = "Keyword-Field";

/// The summary object for `block`.
///
/// # Errors
/// When the block's URL cannot be a SOIF URL (empty, or holds blanks or `}`).
pub fn to_object(block: &Block) -> Result<SoifObject, SoifError> {
    let url = block.url().unwrap_or("-").trim();
    let mut obj = SoifObject::new(TEMPLATE, url.as_bytes().to_vec())?;
    for f in &block.fields {
        if f.value.is_empty() {
            continue;
        }
        let known = f.known();
        if known == Some(KnownField::Keyword) {
            for (i, k) in split_keywords(&f.value).iter().enumerate() {
                obj.push(&format!("Keyword-{}", i + 1), k.as_bytes().to_vec())?;
            }
            obj.push(KEYWORD_FIELD, f.value.as_bytes().to_vec())?;
            continue;
        }
        let name: &str = match known {
            Some(k) => k.name(),
            None => &f.name,
        };
        obj.push(name, f.value.as_bytes().to_vec())?;
    }
    Ok(obj)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The block a `HINA` summary object stands for; `None` for other templates. A `Keyword`
/// comes from `Keyword-Field`, or else the `Keyword-n` values joined by `: `.
pub fn to_block(obj: &SoifObject) -> Option<Block> {
    if !obj.template().as_str().eq_ignore_ascii_case(TEMPLATE) {
        return None;
    }
    let mut fields = Vec::with_capacity(obj.attributes.len());
    let mut split = Vec::new();
    let mut whole = None;
    for a in &obj.attributes {
        let name = a.name.as_str();
        if name.eq_ignore_ascii_case(KEYWORD_FIELD) {
            whole = Some(text(&a.value));
        } else if a.name.base_name().eq_ignore_ascii_case("Keyword") {
            split.push(text(&a.value));
        } else {
            fields.push(Field::new(name, text(&a.value)));
        }
    }
    let keyword = whole.or_else(|| (!split.is_empty()).then(|| split.join(": ")));
    if let Some(k) = keyword {
        // Where the writer puts it: after the dates, before the agent fields.
        let at = fields
            .iter()
            .position(|f| {
                matches!(
                    f.known(),
                    Some(
                        KnownField::ContentType
                            | KnownField::Server
                            | KnownField::Authorized
                            | KnownField::AuthorizedUrl
                            | KnownField::Method
                    )
                )
            })
            .unwrap_or(fields.len());
        fields.insert(at, Field::new("Keyword", k));
    }
    if !fields
        .iter()
        .any(|f| matches!(f.known(), Some(KnownField::Url | KnownField::Virtual)))
    {
        fields.insert(0, Field::new("URL", text(obj.url())));
    }
    Some(Block { line: 0, fields })
}

/// Makes `value` a valid single-line field value: control characters and line ends become
/// spaces, runs of blanks one space, ends trimmed.
pub fn one_line(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for word in value
        // ASCII blanks and controls only: U+3000 (the ideographic space) and other
        // non-ASCII text stay byte for byte.
        .split(|c: char| c.is_ascii_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// A date attribute of a summary object as Unix seconds: a number of seconds (RFC 2655's
/// `Last-Modification-Time`), or any form [`date::parse`] reads.
fn summary_date(v: &str) -> Option<i64> {
    let v = v.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse().ok();
    }
    date::parse(v)
}

/// A block for a summary object of another template, for a node's own Hina-Di file: URL,
/// `Title`, `Author-Name` (from `Author`), `Last-Modified` (from `Last-Modification-Time`,
/// `Last-Modified` or `Date`), `Keyword` (from `Keywords`, split on `;` and `,`, joined by
/// `: `), `Content-Type` (from `Type` when it is a MIME type). `None` when the object has no
/// absolute URL or no readable date: a Hina-Di entry says when a page changed.
pub fn from_summary(obj: &SoifObject) -> Option<Block> {
    let url = obj.url_str()?;
    if !url.contains("://") {
        return None;
    }
    let first = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| obj.first(n).map(|v| one_line(&String::from_utf8_lossy(v))))
            .filter(|v| !v.is_empty())
    };
    let modified = ["Last-Modification-Time", "Last-Modified", "Date"]
        .iter()
        .find_map(|n| {
            obj.first(n)
                .and_then(|v| summary_date(&String::from_utf8_lossy(v)))
        })?;
    let mut fields = vec![Field::new("URL", url)];
    if let Some(t) = first(&["Title"]) {
        fields.push(Field::new("Title", t));
    }
    if let Some(a) = first(&["Author-Name", "Author", "Creator"]) {
        fields.push(Field::new("Author-Name", a));
    }
    fields.push(Field::new("Last-Modified", date::format(modified)));
    let keywords: Vec<String> = obj
        .values("Keywords")
        .chain(obj.values("Keyword"))
        .flat_map(|v| {
            String::from_utf8_lossy(v)
                .split([';', ','])
                .map(one_line)
                .filter(|k| !k.is_empty())
                .collect::<Vec<_>>()
        })
        .collect();
    if !keywords.is_empty() {
        fields.push(Field::new("Keyword", keywords.join(": ")));
    }
    if let Some(t) = first(&["Type"]).filter(|t| t.contains('/')) {
        fields.push(Field::new("Content-Type", t));
    }
    Some(Block { line: 0, fields })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_keeps_the_ideographic_space() {
        assert_eq!(
            one_line("太郎の日記\u{3000}第二部\r\n  続き\t"),
            "太郎の日記\u{3000}第二部 続き"
        );
    }

    fn block(fields: &[(&str, &str)]) -> Block {
        Block {
            line: 1,
            fields: fields.iter().map(|(n, v)| Field::new(*n, *v)).collect(),
        }
    }

    #[test]
    fn block_to_object_and_back() {
        let b = block(&[
            ("URL", "http://a.jp/diary/"),
            ("Title", "今日の日記"),
            ("Author-Name", "山田"),
            ("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ("Keyword", "日記: 音楽"),
            ("Authorized-URL", "http://agent.jp/"),
            ("Method", "GET/200"),
            ("X-WDB-Title", "なびろぐ"),
            ("Server", ""),
        ]);
        let o = to_object(&b).unwrap();
        assert_eq!(o.template().as_str(), "HINA");
        assert_eq!(o.url_str(), Some("http://a.jp/diary/"));
        let kws: Vec<&[u8]> = o.values("Keyword").map(|v| &v[..]).collect();
        assert_eq!(kws, vec!["日記".as_bytes(), "音楽".as_bytes()]);
        assert_eq!(&o.first("Authorized-url").unwrap()[..], b"http://agent.jp/");
        assert!(o.first("Server").is_none(), "empty values are left out");
        let back = to_block(&o).unwrap();
        let names: Vec<&str> = back.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "URL",
                "Title",
                "Author-Name",
                "Last-Modified",
                "Keyword",
                "Authorized-url",
                "Method",
                "X-WDB-Title"
            ]
        );
        assert_eq!(back.get(KnownField::Keyword), Some("日記: 音楽"));
        assert_eq!(back.get(KnownField::Title), Some("今日の日記"));
    }

    #[test]
    fn virtual_only_block_keys_on_virtual() {
        let o = to_object(&block(&[("Vitural", "http://a.jp/x.di")])).unwrap();
        assert_eq!(o.url_str(), Some("http://a.jp/x.di"));
        assert_eq!(&o.first("Virtual").unwrap()[..], b"http://a.jp/x.di");
        let back = to_block(&o).unwrap();
        assert_eq!(back.fields, vec![Field::new("Virtual", "http://a.jp/x.di")]);
    }

    #[test]
    fn summaries_with_url_and_date_become_blocks() {
        let mut o = SoifObject::new("DOCUMENT", "http://lib.example.org/tr-1.html").unwrap();
        o.push("Title", "Distributed\n  Indexing").unwrap();
        o.push("Author", "Maria Garcia").unwrap();
        o.push("Keywords", "indexing; bibliographic, systems")
            .unwrap();
        o.push("Type", "text/html").unwrap();
        o.push("Last-Modification-Time", "1997-02-11").unwrap();
        let b = from_summary(&o).unwrap();
        assert_eq!(b.get(KnownField::Title), Some("Distributed Indexing"));
        assert_eq!(b.get(KnownField::AuthorName), Some("Maria Garcia"));
        assert_eq!(
            b.get(KnownField::LastModified),
            Some("Tue, 11 Feb 1997 00:00:00 GMT")
        );
        assert_eq!(
            b.get(KnownField::Keyword),
            Some("indexing: bibliographic: systems")
        );
        assert_eq!(b.get(KnownField::ContentType), Some("text/html"));
        let mut epoch = SoifObject::new("FILE", "ftp://x.org/a").unwrap();
        epoch.push("Last-Modification-Time", "784111777").unwrap();
        assert_eq!(
            from_summary(&epoch).unwrap().get(KnownField::LastModified),
            Some("Sun, 06 Nov 1994 08:49:37 GMT")
        );
        let undated = SoifObject::new("DOCUMENT", "http://x.org/").unwrap();
        assert!(from_summary(&undated).is_none());
        let mut relative = SoifObject::new("DOCUMENT", "tr-1.html").unwrap();
        relative
            .push("Last-Modification-Time", "784111777")
            .unwrap();
        assert!(from_summary(&relative).is_none());
    }
}
