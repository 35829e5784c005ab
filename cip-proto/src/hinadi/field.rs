//! Fields and blocks of a Hina-Di file.

/// A field the spec defines, header or entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum KnownField {
    /// `User-Agent` (header only).
    UserAgent,
    /// `URL`: the document, and the block's key.
    Url,
    /// `HINA-Version`: the spec version the block is complete to.
    HinaVersion,
    /// `Virtual` (also read as the original spec's `Vitural`).
    Virtual,
    /// `Content-Type`.
    ContentType,
    /// `Date`.
    Date,
    /// `Title`.
    Title,
    /// `Author-Name`.
    AuthorName,
    /// `Expires`.
    Expires,
    /// `Expire` (older alias of `Expires`).
    Expire,
    /// `Last-Modified`.
    LastModified,
    /// `Last-Modified-Detected`.
    LastModifiedDetected,
    /// `Server`.
    Server,
    /// `Authorized`: the agent that fetched the metadata.
    Authorized,
    /// `Authorized-url`: a page describing that agent.
    AuthorizedUrl,
    /// `Method`: the propagation chain (`REMOTE/GET/200`).
    Method,
    /// `Keyword`.
    Keyword,
    /// `Image-Width`.
    ImageWidth,
    /// `Image-Height`.
    ImageHeight,
}

impl KnownField {
    /// Every known field, in the order the writer puts them (URL first).
    pub const ALL: [Self; 19] = [
        Self::Url,
        Self::Title,
        Self::AuthorName,
        Self::Date,
        Self::LastModified,
        Self::LastModifiedDetected,
        Self::Expires,
        Self::Expire,
        Self::Keyword,
        Self::ContentType,
        Self::Server,
        Self::Authorized,
        Self::AuthorizedUrl,
        Self::Method,
        Self::Virtual,
        Self::HinaVersion,
        Self::ImageWidth,
        Self::ImageHeight,
        Self::UserAgent,
    ];

    /// The spec's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::UserAgent => "User-Agent",
            Self::Url => "URL",
            Self::HinaVersion => "HINA-Version",
            Self::Virtual => "Virtual",
            Self::ContentType => "Content-Type",
            Self::Date => "Date",
            Self::Title => "Title",
            Self::AuthorName => "Author-Name",
            Self::Expires => "Expires",
            Self::Expire => "Expire",
            Self::LastModified => "Last-Modified",
            Self::LastModifiedDetected => "Last-Modified-Detected",
            Self::Server => "Server",
            Self::Authorized => "Authorized",
            Self::AuthorizedUrl => "Authorized-url",
            Self::Method => "Method",
            Self::Keyword => "Keyword",
            Self::ImageWidth => "Image-Width",
            Self::ImageHeight => "Image-Height",
        }
    }

    /// The field `name` names, compared without regard to ASCII case; `Vitural` (the
    /// original spec's spelling) is `Virtual`.
    pub fn from_name(name: &str) -> Option<Self> {
        if name.eq_ignore_ascii_case("Vitural") {
            return Some(Self::Virtual);
        }
        Self::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name))
    }

    /// True for fields holding an RFC 1123 date.
    pub fn is_date(self) -> bool {
        matches!(
            self,
            Self::Date
                | Self::Expires
                | Self::Expire
                | Self::LastModified
                | Self::LastModifiedDetected
        )
    }

    /// True for fields an entity block may carry (all but `User-Agent`).
    pub fn in_entity(self) -> bool {
        self != Self::UserAgent
    }
}

/// One `Name: value` line, value decoded to UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The name as written (`Authorized-URL`, `Vitural`, `X-WDB-Title`).
    pub name: String,
    /// The value, without the separator's leading blanks or the line end.
    pub value: String,
}

impl Field {
    /// A field.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: value.into(),
        }
    }

    /// The spec field this is, if any.
    pub fn known(&self) -> Option<KnownField> {
        KnownField::from_name(&self.name)
    }

    /// True for experimental fields (`X-` prefix).
    pub fn is_experimental(&self) -> bool {
        self.name.len() > 2 && self.name[..2].eq_ignore_ascii_case("X-")
    }

    /// The key duplicates are found by: the spec's spelling for known fields, the
    /// lower-cased name otherwise.
    pub fn key(&self) -> String {
        match self.known() {
            Some(k) => k.name().to_owned(),
            None => self.name.to_ascii_lowercase(),
        }
    }
}

/// An entity block: the metadata of one document.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Block {
    /// The line the block starts on (1-based; 0 for blocks not read from a file).
    pub line: u64,
    /// The fields in file order; names are unique (case-insensitively).
    pub fields: Vec<Field>,
}

impl Block {
    /// The value of field `k`, if present.
    pub fn get(&self, k: KnownField) -> Option<&str> {
        self.fields
            .iter()
            .find(|f| f.known() == Some(k))
            .map(|f| f.value.as_str())
    }

    /// The document's URL: `URL`, or else `Virtual` (the spec lets it stand for `URL`).
    pub fn url(&self) -> Option<&str> {
        [KnownField::Url, KnownField::Virtual]
            .into_iter()
            .find_map(|k| self.get(k).filter(|v| !v.trim().is_empty()))
    }

    /// The keywords: the `Keyword` value split on the spec's separator (`:` and blanks) and
    /// on commas, trimmed, empty pieces dropped.
    pub fn keywords(&self) -> Vec<&str> {
        self.get(KnownField::Keyword)
            .map(split_keywords)
            .unwrap_or_default()
    }
}

/// Splits a `Keyword` value: on `:` followed by a blank (the spec's SEPARATOR) and on `,`
/// (its DELIMITER, which writers use too). A `:` not followed by a blank stays (`C++:`
/// would not, `http://x` does).
pub fn split_keywords(value: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = value.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let sep = b == b',' || (b == b':' && matches!(bytes.get(i + 1), Some(b' ' | b'\t') | None));
        if sep {
            out.push(&value[start..i]);
            start = i + 1;
        }
        i += 1;
    }
    out.push(&value[start..]);
    out.into_iter()
        .map(|s| s.trim_matches([' ', '\t']))
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ignore_case_and_know_the_misspelling() {
        assert_eq!(
            KnownField::from_name("authorized-URL"),
            Some(KnownField::AuthorizedUrl)
        );
        assert_eq!(KnownField::from_name("Vitural"), Some(KnownField::Virtual));
        assert_eq!(KnownField::from_name("VIRTUAL"), Some(KnownField::Virtual));
        assert_eq!(KnownField::from_name("X-WDB-Title"), None);
        for k in KnownField::ALL {
            assert_eq!(KnownField::from_name(k.name()), Some(k));
        }
    }

    #[test]
    fn keywords_split_on_both_separators() {
        assert_eq!(
            split_keywords("日記: 音楽,\tRust ,, http://x.jp/"),
            vec!["日記", "音楽", "Rust", "http://x.jp/"]
        );
        assert_eq!(split_keywords("  "), Vec::<&str>::new());
        assert_eq!(split_keywords("a:"), vec!["a"]);
    }

    #[test]
    fn url_falls_back_to_virtual() {
        let b = Block {
            line: 1,
            fields: vec![Field::new("Vitural", "http://a.jp/x.di")],
        };
        assert_eq!(b.url(), Some("http://a.jp/x.di"));
        assert!(Field::new("x-foo", "1").is_experimental());
        assert!(!Field::new("X", "1").is_experimental());
    }
}
