//! Hina-Di 2.2 (Asahina Antenna metadata): reader, writer and the mapping to SOIF.
//!
//! A Hina-Di file is a header block (`HINA/2.2beta`, `User-Agent`, `Content-Type`, `Date`)
//! followed by entity blocks, one per document, separated by blank lines; each line is an
//! RFC 822-like `Name: value` field. The pieces:
//!
//! * [`HinaParser`]: the grammar, fed one line at a time (no I/O), for files of any size.
//!   [`HinaReader`] drives it over any [`std::io::BufRead`]; [`parse_bytes`] over a slice.
//! * [`write_header`] / [`write_block`]: canonical output in any supported charset, which the
//!   reader reads back to the same blocks.
//! * [`soif`]: entity blocks as summary objects of template `HINA`, and back.
//! * [`date`]: the HTTP date forms real writers use, parsed leniently.
//! * [`propagate`]: the spec's propagation rule (trust, `Method: REMOTE/...`).
//!
//! Decisions where the spec is loose (field-name case, `Vitural`, keyword separators,
//! undecodable bytes) are recorded in the project's `PROTOCOL.md`.

pub mod date;
mod field;
mod read;
pub mod soif;
mod write;

pub use field::{Block, Field, KnownField};
pub use read::{
    Diagnostic, DiagnosticKind, Event, Header, HinaError, HinaLimits, HinaParser, HinaReader,
    Parsed, Severity, parse_bytes,
};
pub use write::{HeaderOut, WriteError, write_block, write_header};

use encoding_rs::Encoding;

/// The only Hina-Di version this reader knows; others are read with a warning.
pub const VERSION: &str = "HINA/2.2beta";

/// The charset of a file whose header declares none (the spec's default).
pub const DEFAULT_CHARSET: &Encoding = encoding_rs::EUC_JP;

/// Looks a charset label up (`EUC-JP`, `x-sjis`, `Shift_JIS`, `ISO-2022-JP`, `UTF-8`, ...),
/// by the WHATWG label table.
pub fn charset(label: &str) -> Option<&'static Encoding> {
    Encoding::for_label(label.trim().trim_matches('"').as_bytes())
}

/// The `charset` parameter of a `Content-Type` value, if any (`text/plain; charset=EUC-JP`).
pub fn charset_param(content_type: &str) -> Option<&str> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| v.trim().trim_matches('"'))
    })
}

/// The propagation rule: which blocks may be re-published, and how.
pub mod propagate {
    use super::{Block, Field, KnownField};

    /// Why a block may not be re-published.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Refusal {
        /// No `Authorized` field (or an empty one).
        NoAuthorized,
        /// No `Authorized-url` field (or an empty one).
        NoAuthorizedUrl,
        /// The agent named by `Authorized-url` is not trusted here.
        Untrusted,
    }

    impl std::fmt::Display for Refusal {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(match self {
                Self::NoAuthorized => "no Authorized field",
                Self::NoAuthorizedUrl => "no Authorized-url field",
                Self::Untrusted => "the authorizing agent is not trusted",
            })
        }
    }

    /// True when `a` and `b` name the same agent page: URLs equal but for the case of the
    /// scheme and host (RFC 2396; the spec's URL rules) and a trailing slash.
    pub fn same_url(a: &str, b: &str) -> bool {
        fn split(u: &str) -> (String, &str) {
            let u = u.trim();
            let u = u.strip_suffix('/').unwrap_or(u);
            match u.find("://") {
                Some(i) => {
                    let rest = &u[i + 3..];
                    let host_end = rest.find('/').unwrap_or(rest.len());
                    (
                        u[..i + 3 + host_end].to_ascii_lowercase(),
                        &rest[host_end..],
                    )
                }
                None => (String::new(), u),
            }
        }
        split(a) == split(b)
    }

    /// Whether `block` may be re-published given the trusted agents' URLs: it must carry a
    /// non-empty `Authorized` and `Authorized-url`, and the latter must be trusted.
    ///
    /// # Errors
    /// The [`Refusal`] naming the first rule the block fails.
    pub fn check(block: &Block, trusted: &[String]) -> Result<(), Refusal> {
        let present = |k| block.get(k).is_some_and(|v| !v.trim().is_empty());
        if !present(KnownField::Authorized) {
            return Err(Refusal::NoAuthorized);
        }
        let Some(url) = block
            .get(KnownField::AuthorizedUrl)
            .filter(|v| !v.trim().is_empty())
        else {
            return Err(Refusal::NoAuthorizedUrl);
        };
        if trusted.iter().any(|t| same_url(t, url)) {
            Ok(())
        } else {
            Err(Refusal::Untrusted)
        }
    }

    /// The block as re-published: every field the spec defines with a non-empty value, as
    /// it was (experimental `X-` and undefined fields are dropped: the spec does not
    /// guarantee them and we do not vouch for them), and `Method` with `REMOTE/` in front
    /// (`REMOTE` alone when the block had none).
    pub fn republish(block: &Block) -> Block {
        let mut fields = Vec::with_capacity(block.fields.len() + 1);
        let mut method = false;
        for f in &block.fields {
            let Some(k) = f.known() else { continue };
            if f.value.is_empty() || !k.in_entity() {
                continue;
            }
            if k == KnownField::Method {
                method = true;
                fields.push(Field::new(f.name.clone(), format!("REMOTE/{}", f.value)));
            } else {
                fields.push(f.clone());
            }
        }
        if !method {
            fields.push(Field::new("Method", "REMOTE"));
        }
        Block {
            line: block.line,
            fields,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charset_labels() {
        assert_eq!(charset("EUC-JP"), Some(encoding_rs::EUC_JP));
        assert_eq!(charset("x-sjis"), Some(encoding_rs::SHIFT_JIS));
        assert_eq!(charset("\"iso-2022-jp\""), Some(encoding_rs::ISO_2022_JP));
        assert_eq!(charset("utf8"), Some(encoding_rs::UTF_8));
        assert_eq!(charset("klingon"), None);
        assert_eq!(
            charset_param("text/plain; charset=\"Shift_JIS\""),
            Some("Shift_JIS")
        );
        assert_eq!(charset_param("text/plain"), None);
        assert_eq!(
            charset_param("text/plain;format=x; CHARSET=utf-8"),
            Some("utf-8")
        );
    }

    #[test]
    fn same_url_ignores_scheme_and_host_case_and_trailing_slash() {
        assert!(propagate::same_url(
            "HTTP://Example.JP/agent/",
            "http://example.jp/agent"
        ));
        assert!(!propagate::same_url(
            "http://example.jp/Agent/",
            "http://example.jp/agent/"
        ));
        assert!(!propagate::same_url(
            "http://example.jp/",
            "http://example.org/"
        ));
    }

    fn block(fields: &[(&str, &str)]) -> Block {
        Block {
            line: 1,
            fields: fields.iter().map(|(n, v)| Field::new(*n, *v)).collect(),
        }
    }

    #[test]
    fn propagation_needs_both_fields_and_trust() {
        let trusted = vec!["http://agent.example.jp/".to_owned()];
        let ok = block(&[
            ("URL", "http://a.jp/"),
            ("Authorized", "WDB/2.10"),
            ("Authorized-url", "http://agent.example.jp/"),
        ]);
        assert_eq!(propagate::check(&ok, &trusted), Ok(()));
        let no_url = block(&[("URL", "http://a.jp/"), ("Authorized", "WDB/2.10")]);
        assert_eq!(
            propagate::check(&no_url, &trusted),
            Err(propagate::Refusal::NoAuthorizedUrl)
        );
        let no_auth = block(&[
            ("URL", "http://a.jp/"),
            ("Authorized-url", "http://agent.example.jp/"),
        ]);
        assert_eq!(
            propagate::check(&no_auth, &trusted),
            Err(propagate::Refusal::NoAuthorized)
        );
        assert_eq!(
            propagate::check(&ok, &["http://other.jp/".to_owned()]),
            Err(propagate::Refusal::Untrusted)
        );
    }

    #[test]
    fn republish_prefixes_method_and_drops_extras() {
        let b = block(&[
            ("URL", "http://a.jp/"),
            ("Title", "題名"),
            ("Author-Name", ""),
            ("Method", "GET/200"),
            ("X-Color", "red"),
            ("Mystery", "1"),
            ("Vitural", "http://a.jp/hina.di"),
        ]);
        let r = propagate::republish(&b);
        let got: Vec<(&str, &str)> = r
            .fields
            .iter()
            .map(|f| (f.name.as_str(), f.value.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("URL", "http://a.jp/"),
                ("Title", "題名"),
                ("Method", "REMOTE/GET/200"),
                ("Vitural", "http://a.jp/hina.di"),
            ]
        );
        let none = propagate::republish(&block(&[("URL", "http://a.jp/")]));
        assert_eq!(none.get(KnownField::Method), Some("REMOTE"));
    }
}
