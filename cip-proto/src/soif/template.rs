//! The template types RFC 2655 names, recognised by name (case-insensitive).
//!
//! SOIF itself does not define templates (§3.1); these are the generic Harvest ones
//! (FILE, DOCUMENT, OBJECT), the CIP-HINT template of Appendix B and Dublin-Core of
//! Appendix C. Unknown templates are fine everywhere; this only adds knowledge.

/// A template type this implementation knows about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KnownTemplate {
    /// Harvest's generic `FILE` template (Appendix A).
    File,
    /// The generic `DOCUMENT` template (§3.1, §6).
    Document,
    /// The generic `OBJECT` template (§3.1).
    Object,
    /// `CIP-HINT`, the hint an index server advertises (Appendix B).
    CipHint,
    /// `Dublin-Core` (Appendix C; the example spells it `Dublin-Core-1`).
    DublinCore,
}

/// Every known template.
pub const ALL: [KnownTemplate; 5] = [
    KnownTemplate::File,
    KnownTemplate::Document,
    KnownTemplate::Object,
    KnownTemplate::CipHint,
    KnownTemplate::DublinCore,
];

impl KnownTemplate {
    /// Recognises a template type by name, ignoring case; `Dublin-Core-1` (a versioned
    /// spelling, as in the Appendix C example) is Dublin-Core.
    pub fn from_name(name: &str) -> Option<Self> {
        let base = super::attr::base_name(name);
        ALL.into_iter().find(|t| {
            t.name().eq_ignore_ascii_case(name) || {
                *t == Self::DublinCore && t.name().eq_ignore_ascii_case(base)
            }
        })
    }

    /// The canonical spelling of the template type.
    pub fn name(self) -> &'static str {
        match self {
            Self::File => "FILE",
            Self::Document => "DOCUMENT",
            Self::Object => "OBJECT",
            Self::CipHint => "CIP-HINT",
            Self::DublinCore => "Dublin-Core",
        }
    }

    /// Attributes the RFC lists for the template (empty for DOCUMENT and OBJECT, which it
    /// leaves open).
    pub fn attributes(self) -> &'static [&'static str] {
        match self {
            Self::File => &[
                "Abstract",
                "Author",
                "Description",
                "File-Size",
                "Full-Text",
                "Gatherer-Host",
                "Gatherer-Name",
                "Gatherer-Port",
                "Gatherer-Version",
                "Update-Time",
                "Keywords",
                "Last-Modification-Time",
                "MD5",
                "Refresh-Rate",
                "Time-to-Live",
                "Title",
                "Type",
                "URL-References",
            ],
            Self::Document | Self::Object => &[],
            Self::CipHint => &[
                "Attribute-Identifier-List",
                "Source",
                "Total-Object-Count",
                "Weightlist-[]",
                "Threshold-[]",
                "Certification-Type",
                "Certification",
                "Date",
            ],
            Self::DublinCore => &[
                "TITLE",
                "CREATOR",
                "SUBJECT",
                "DESCRIPTION",
                "PUBLISHER",
                "CONTRIBUTOR",
                "DATE",
                "TYPE",
                "FORMAT",
                "IDENTIFIER",
                "SOURCE",
                "LANGUAGE",
                "RELATION",
                "COVERAGE",
                "RIGHTS",
            ],
        }
    }

    /// True when the template's values are text by definition, so that RFC 2655 §3 lets the
    /// payload go without Base64. FILE (Full-Text, MD5), DOCUMENT and OBJECT (thumbnails) may
    /// carry binary data.
    pub fn is_text_only(self) -> bool {
        matches!(self, Self::CipHint | Self::DublinCore)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_names() {
        assert_eq!(KnownTemplate::from_name("file"), Some(KnownTemplate::File));
        assert_eq!(
            KnownTemplate::from_name("CIP-HINT"),
            Some(KnownTemplate::CipHint)
        );
        assert_eq!(
            KnownTemplate::from_name("Dublin-Core-1"),
            Some(KnownTemplate::DublinCore)
        );
        assert_eq!(
            KnownTemplate::from_name("dublin-core"),
            Some(KnownTemplate::DublinCore)
        );
        assert_eq!(KnownTemplate::from_name("IMAGE"), None);
        assert_eq!(KnownTemplate::from_name("FILE-1"), None);
        assert!(KnownTemplate::File.attributes().contains(&"MD5"));
    }
}
