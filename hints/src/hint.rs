//! The CIP-HINT index object (RFC 2655 Appendix B): data model.
//!
//! A hint says, per `Template:Attribute`, which values a collection holds and in how many
//! objects (a weightlist), with an optional threshold under which rare values are left out.

use bytes::Bytes;
use cip_proto::soif::Attribute;

pub use crate::weightlist::{WeightEntry, Weightlist};

/// A `Template:Attribute` pair as a hint spells it (`DOCUMENT:Author`).
///
/// Equality and hashing are on the spelling; use [`AttrSpec::matches`] for the RFC 2655 §4
/// comparison (case-insensitive, multi-value suffix folded).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttrSpec {
    /// The template type, as spelled.
    pub template: String,
    /// The attribute name, as spelled.
    pub attribute: String,
}

/// A parsed CIP-HINT object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CipHint {
    /// The SOIF URL of the hint object (the broker the hint describes), `-` when none.
    pub url: String,
    /// `Attribute-Identifier-List`: the attributes queries are supported against.
    pub attributes: Vec<AttrSpec>,
    /// `Source` / `Source-N`: URIs of the services that created the indexed objects.
    pub sources: Vec<String>,
    /// `Total-Object-Count`: objects in the collection the hint covers.
    pub total_object_count: u64,
    /// `Weightlist-[T:A]`, in the order they appear.
    pub weightlists: Vec<(AttrSpec, Weightlist)>,
    /// `Threshold-[T:A]`: values held by fewer objects than this were left out.
    pub thresholds: Vec<(AttrSpec, u64)>,
    /// `Certification-Type`.
    pub certification_type: Option<String>,
    /// `Certification`.
    pub certification: Option<Bytes>,
    /// `Date` (RFC 1123), as written.
    pub date: Option<String>,
    /// Attributes this model does not know, kept so that a hint passes through unchanged.
    pub extra: Vec<Attribute>,
}

/// The template type of a hint object (RFC 2655 Appendix B), compared case-insensitively.
pub const TEMPLATE: &str = "CIP-HINT";

/// A `Template:Attribute` string that is not a valid [`AttrSpec`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("byte {offset}: {kind}")]
pub struct AttrSpecError {
    /// Byte offset within the text given to [`AttrSpec::parse`].
    pub offset: usize,
    /// What is wrong.
    pub kind: AttrSpecErrorKind,
}

/// The kinds of [`AttrSpecError`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttrSpecErrorKind {
    /// No `:` between template and attribute.
    #[error("expected Template:Attribute, found no ':'")]
    MissingColon,
    /// Nothing before the `:`.
    #[error("empty template type")]
    EmptyTemplate,
    /// Nothing after the `:`.
    #[error("empty attribute name")]
    EmptyAttribute,
    /// A byte outside `[A-Za-z0-9._-]`.
    #[error("{} is not allowed in a template type or attribute name", (*found as char).escape_debug())]
    InvalidByte {
        /// The byte found.
        found: u8,
    },
}

/// True for the bytes of an RFC 2655 §3.5 identifier (`[A-Za-z0-9_-]`), plus `.`.
///
/// `[`, `]` and `:` are left out: a spec sits inside `Weightlist-[T:A]`.
fn is_spec_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

impl AttrSpec {
    /// A spec from its two parts, validated.
    ///
    /// # Errors
    /// When either part is empty or holds a byte outside `[A-Za-z0-9._-]`; offsets count
    /// over `template:attribute`.
    pub fn new(template: &str, attribute: &str) -> Result<Self, AttrSpecError> {
        check_part(template, 0, AttrSpecErrorKind::EmptyTemplate)?;
        check_part(
            attribute,
            template.len() + 1,
            AttrSpecErrorKind::EmptyAttribute,
        )?;
        Ok(Self {
            template: template.to_owned(),
            attribute: attribute.to_owned(),
        })
    }

    /// Parses `Template:Attribute` (surrounding whitespace ignored), splitting at the first
    /// `:`. The spelling is kept as given.
    ///
    /// # Errors
    /// [`AttrSpecError`] with an offset into `text`.
    pub fn parse(text: &str) -> Result<Self, AttrSpecError> {
        let lead = text.len() - text.trim_start().len();
        let trimmed = text.trim();
        let Some(colon) = trimmed.find(':') else {
            return Err(AttrSpecError {
                offset: lead,
                kind: AttrSpecErrorKind::MissingColon,
            });
        };
        Self::new(&trimmed[..colon], &trimmed[colon + 1..]).map_err(|e| AttrSpecError {
            offset: e.offset + lead,
            kind: e.kind,
        })
    }

    /// True when a SOIF attribute `attribute` of an object of type `template` is this spec's
    /// attribute: template compared ignoring ASCII case, attribute as RFC 2655 §4 says
    /// (ignoring case, multi-value suffix folded on both sides: `Author-2` is `author`).
    pub fn matches(&self, template: &str, attribute: &str) -> bool {
        self.template.eq_ignore_ascii_case(template)
            && cip_proto::soif::attr::attribute_matches(&self.attribute, attribute)
    }

    /// True when `other` names the same attribute under [`AttrSpec::matches`] rules
    /// (`DOCUMENT:Author` and `document:AUTHOR-1`).
    pub fn same_attribute(&self, other: &AttrSpec) -> bool {
        self.matches(&other.template, &other.attribute)
    }
}

fn check_part(part: &str, base: usize, empty: AttrSpecErrorKind) -> Result<(), AttrSpecError> {
    if part.is_empty() {
        return Err(AttrSpecError {
            offset: base,
            kind: empty,
        });
    }
    match part.bytes().position(|b| !is_spec_byte(b)) {
        Some(i) => Err(AttrSpecError {
            offset: base + i,
            kind: AttrSpecErrorKind::InvalidByte {
                found: part.as_bytes()[i],
            },
        }),
        None => Ok(()),
    }
}

impl std::fmt::Display for AttrSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.template, self.attribute)
    }
}

impl std::str::FromStr for AttrSpec {
    type Err = AttrSpecError;
    fn from_str(s: &str) -> Result<Self, AttrSpecError> {
        Self::parse(s)
    }
}

/// A hint that cannot be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HintError {
    /// The object's template type is not `CIP-HINT`.
    #[error("template type {template} is not {TEMPLATE}")]
    WrongTemplate {
        /// The template type found.
        template: String,
    },
    /// The object's URL is not UTF-8.
    #[error("URL: byte {offset}: not UTF-8")]
    UrlNotUtf8 {
        /// Offset of the first bad byte within the URL.
        offset: usize,
    },
    /// An attribute's value cannot be read.
    #[error("{attribute}: byte {offset}: {problem}")]
    Value {
        /// The attribute identifier as the hint spells it.
        attribute: String,
        /// Position of the attribute in the SOIF object (0-based).
        index: usize,
        /// Byte offset within the value where the problem is.
        offset: usize,
        /// What is wrong.
        problem: ValueProblem,
    },
    /// A `Weightlist-[..]` or `Threshold-[..]` identifier whose brackets do not hold a valid
    /// `Template:Attribute`.
    #[error("{attribute}: invalid Template:Attribute in the identifier: {error}")]
    BadName {
        /// The attribute identifier (as written, or as it would be written).
        attribute: String,
        /// Position of the attribute in the SOIF object, when reading one.
        index: Option<usize>,
        /// The problem, with its offset inside the brackets.
        error: AttrSpecError,
    },
}

impl HintError {
    /// The attribute identifier the error is about, if any.
    pub fn attribute(&self) -> Option<&str> {
        match self {
            Self::Value { attribute, .. } | Self::BadName { attribute, .. } => Some(attribute),
            Self::WrongTemplate { .. } | Self::UrlNotUtf8 { .. } => None,
        }
    }

    /// Position of the attribute in the SOIF object, if the error is about one.
    pub fn attribute_index(&self) -> Option<usize> {
        match self {
            Self::Value { index, .. } => Some(*index),
            Self::BadName { index, .. } => *index,
            Self::WrongTemplate { .. } | Self::UrlNotUtf8 { .. } => None,
        }
    }

    /// Byte offset within the attribute's value (or the URL) where the problem is, if known.
    pub fn value_offset(&self) -> Option<usize> {
        match self {
            Self::Value { offset, .. } | Self::UrlNotUtf8 { offset } => Some(*offset),
            Self::WrongTemplate { .. } | Self::BadName { .. } => None,
        }
    }
}

/// What is wrong with an attribute value of a hint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueProblem {
    /// A weightlist that does not follow the codec rules ([`crate::weightlist`]).
    #[error(transparent)]
    Weightlist(crate::weightlist::WeightlistErrorKind),
    /// `Total-Object-Count` or a threshold that is not a decimal `u64`.
    #[error("{found:?} is not a decimal number")]
    BadNumber {
        /// The text found (lossy UTF-8, trimmed).
        found: String,
    },
    /// An `Attribute-Identifier-List` entry that is not `Template:Attribute`.
    #[error("invalid Template:Attribute: {0}")]
    BadAttrSpec(AttrSpecErrorKind),
    /// A text field (`Source`, `Certification-Type`, `Date`, the attribute list) that is
    /// not UTF-8.
    #[error("not UTF-8")]
    NotUtf8,
}

/// Something odd in a hint that [`CipHint::from_soif`] read past. The hint is still usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HintWarning {
    /// A `Threshold-[T:A]` for an attribute the `Attribute-Identifier-List` does not name
    /// (Appendix B's own example has `Threshold-[DOCMENT:Author]`). It is kept.
    #[error("Threshold-[{spec}] names no attribute of the Attribute-Identifier-List")]
    ThresholdForUnlistedAttribute {
        /// The spec as spelled.
        spec: AttrSpec,
    },
    /// A `Weightlist-[T:A]` for an attribute the list does not name. It is kept.
    #[error("Weightlist-[{spec}] names no attribute of the Attribute-Identifier-List")]
    WeightlistForUnlistedAttribute {
        /// The spec as spelled.
        spec: AttrSpec,
    },
    /// `Date` is not an HTTP date (RFC 1123, RFC 850 or asctime). Kept as written.
    #[error("Date {value:?} is not an RFC 1123 date: {reason}")]
    BadDate {
        /// The value as written.
        value: String,
        /// Why it does not parse.
        reason: String,
    },
    /// No `Total-Object-Count`; 0 is assumed.
    #[error("no Total-Object-Count; 0 assumed")]
    MissingTotalObjectCount,
    /// No `Attribute-Identifier-List`.
    #[error("no Attribute-Identifier-List")]
    MissingAttributeList,
    /// A single-valued field appears again; the first is used, later ones are kept in
    /// [`CipHint::extra`] so they pass through.
    #[error("{name} appears more than once; the first is used")]
    DuplicateField {
        /// The identifier of the repeated field.
        name: String,
    },
    /// The `Attribute-Identifier-List` names the same attribute twice.
    #[error("{spec} is listed more than once")]
    DuplicateAttribute {
        /// The later spelling.
        spec: AttrSpec,
    },
    /// Two weightlists for the same attribute; lookups use the first, both are kept.
    #[error("more than one Weightlist-[{spec}]; the first is used")]
    DuplicateWeightlist {
        /// The later spelling.
        spec: AttrSpec,
    },
    /// Two thresholds for the same attribute; lookups use the first, both are kept.
    #[error("more than one Threshold-[{spec}]; the first is used")]
    DuplicateThreshold {
        /// The later spelling.
        spec: AttrSpec,
    },
    /// A value listed twice in one weightlist.
    #[error("Weightlist-[{spec}] lists {} more than once", .value.escape_ascii())]
    DuplicateValue {
        /// The weightlist's spec.
        spec: AttrSpec,
        /// The repeated value.
        value: Bytes,
    },
    /// A count larger than `Total-Object-Count` (reported once per weightlist).
    #[error("Weightlist-[{spec}] has a count of {count}, above Total-Object-Count {total}")]
    CountExceedsTotal {
        /// The weightlist's spec.
        spec: AttrSpec,
        /// The largest count in it.
        count: u64,
        /// The hint's total.
        total: u64,
    },
}

/// Parses an RFC 1123 date (`Sun, 05 Jan 1997 08:33:33 GMT`); the RFC 850 and asctime forms
/// HTTP allows are accepted too.
///
/// # Errors
/// [`DateError`] when `text` (surrounding whitespace ignored) is none of these.
pub fn parse_date(text: &str) -> Result<std::time::SystemTime, DateError> {
    httpdate::parse_http_date(text.trim()).map_err(|e| DateError {
        reason: e.to_string(),
    })
}

/// Formats `time` as an RFC 1123 date in GMT, the form `Date` is written in.
pub fn format_date(time: std::time::SystemTime) -> String {
    httpdate::fmt_http_date(time)
}

/// A `Date` that is not an RFC 1123 date.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an RFC 1123 date: {reason}")]
pub struct DateError {
    /// Why it does not parse.
    pub reason: String,
}

/// The field names of Appendix B, canonical spelling.
mod field {
    pub const ATTRIBUTE_LIST: &str = "Attribute-Identifier-List";
    pub const SOURCE: &str = "Source";
    pub const TOTAL: &str = "Total-Object-Count";
    pub const WEIGHTLIST: &str = "Weightlist-";
    pub const THRESHOLD: &str = "Threshold-";
    pub const CERTIFICATION_TYPE: &str = "Certification-Type";
    pub const CERTIFICATION: &str = "Certification";
    pub const DATE: &str = "Date";
}

/// `Weightlist-[T:A]` → `T:A`, prefix compared ignoring case.
pub(crate) fn bracketed<'a>(name: &'a str, prefix: &str) -> Option<&'a str> {
    let n = prefix.len();
    let head = name.get(..n)?;
    if !head.eq_ignore_ascii_case(prefix) {
        return None;
    }
    name[n..].strip_prefix('[')?.strip_suffix(']')
}

impl CipHint {
    /// A hint of `total` objects with one weightlist, under `spec`, of `(value, count)`
    /// entries in the order given (tools, tests and benchmarks make such hints by hand).
    pub fn with_weightlist<'v>(
        spec: AttrSpec,
        total: u64,
        entries: impl IntoIterator<Item = (&'v str, u64)>,
    ) -> Self {
        let entries = entries
            .into_iter()
            .map(|(v, count)| WeightEntry {
                value: Bytes::copy_from_slice(v.as_bytes()),
                count,
            })
            .collect();
        Self {
            url: "-".into(),
            total_object_count: total,
            attributes: vec![spec.clone()],
            weightlists: vec![(spec, Weightlist::new(entries))],
            ..Self::default()
        }
    }

    /// Reads a CIP-HINT from a SOIF object, tolerantly.
    ///
    /// Field names are matched ignoring case, with multi-value suffixes folded (`Source-2`,
    /// `Attribute-Identifier-list`); text fields are trimmed; several
    /// `Attribute-Identifier-List` fields are concatenated; unknown attributes are kept in
    /// [`CipHint::extra`]. Oddities that leave the hint usable come back as warnings.
    ///
    /// # Errors
    /// [`HintError`] when the template is not `CIP-HINT`, or a value cannot be read (a bad
    /// weightlist, count, threshold or attribute spec, or non-UTF-8 text), with the
    /// attribute's name and the byte offset within its value.
    pub fn from_soif(
        obj: &cip_proto::soif::SoifObject,
    ) -> Result<(CipHint, Vec<HintWarning>), HintError> {
        use cip_proto::soif::attr::base_name;

        let template = obj.template().as_str();
        if !template.eq_ignore_ascii_case(TEMPLATE) {
            return Err(HintError::WrongTemplate {
                template: template.to_owned(),
            });
        }
        let url = std::str::from_utf8(obj.url())
            .map_err(|e| HintError::UrlNotUtf8 {
                offset: e.valid_up_to(),
            })?
            .to_owned();
        let mut hint = CipHint {
            url,
            ..CipHint::default()
        };
        let mut warnings = Vec::new();
        let (mut total_seen, mut list_seen) = (false, false);

        for (index, a) in obj.attributes.iter().enumerate() {
            let name = a.name.as_str();
            let base = base_name(name);
            let value_error = |offset, problem| HintError::Value {
                attribute: name.to_owned(),
                index,
                offset,
                problem,
            };
            let name_spec = |inner: &str| {
                AttrSpec::parse(inner).map_err(|error| HintError::BadName {
                    attribute: name.to_owned(),
                    index: Some(index),
                    error,
                })
            };
            let is = |field: &str| base.eq_ignore_ascii_case(field);
            let mut single = |seen: bool, hint: &mut CipHint| {
                if seen {
                    warnings.push(HintWarning::DuplicateField {
                        name: name.to_owned(),
                    });
                    hint.extra.push(a.clone());
                }
                !seen
            };
            if let Some(inner) = bracketed(base, field::WEIGHTLIST) {
                let spec = name_spec(inner)?;
                let list = crate::weightlist::parse(&a.value)
                    .map_err(|e| value_error(e.offset, ValueProblem::Weightlist(e.kind)))?;
                hint.weightlists.push((spec, list));
            } else if let Some(inner) = bracketed(base, field::THRESHOLD) {
                let spec = name_spec(inner)?;
                let n = parse_number(&a.value).map_err(|(o, p)| value_error(o, p))?;
                hint.thresholds.push((spec, n));
            } else if is(field::ATTRIBUTE_LIST) {
                list_seen = true;
                parse_attr_list(&a.value, &mut hint.attributes, &mut warnings)
                    .map_err(|(o, p)| value_error(o, p))?;
            } else if is(field::SOURCE) {
                let text = trimmed_text(&a.value).map_err(|(o, p)| value_error(o, p))?;
                hint.sources.push(text.to_owned());
            } else if is(field::TOTAL) {
                if single(total_seen, &mut hint) {
                    total_seen = true;
                    hint.total_object_count =
                        parse_number(&a.value).map_err(|(o, p)| value_error(o, p))?;
                }
            } else if is(field::CERTIFICATION_TYPE) {
                if single(hint.certification_type.is_some(), &mut hint) {
                    let text = trimmed_text(&a.value).map_err(|(o, p)| value_error(o, p))?;
                    hint.certification_type = Some(text.to_owned());
                }
            } else if is(field::CERTIFICATION) {
                if single(hint.certification.is_some(), &mut hint) {
                    hint.certification = Some(a.value.clone());
                }
            } else if is(field::DATE) {
                if single(hint.date.is_some(), &mut hint) {
                    let text = trimmed_text(&a.value).map_err(|(o, p)| value_error(o, p))?;
                    if let Err(e) = parse_date(text) {
                        warnings.push(HintWarning::BadDate {
                            value: text.to_owned(),
                            reason: e.reason,
                        });
                    }
                    hint.date = Some(text.to_owned());
                }
            } else {
                hint.extra.push(a.clone());
            }
        }
        if !list_seen {
            warnings.push(HintWarning::MissingAttributeList);
        }
        if !total_seen {
            warnings.push(HintWarning::MissingTotalObjectCount);
        }
        hint.check(&mut warnings);
        Ok((hint, warnings))
    }

    /// Cross-field checks: unlisted and duplicate weightlists and thresholds, repeated
    /// values, counts above the total.
    fn check(&self, warnings: &mut Vec<HintWarning>) {
        let listed = |spec: &AttrSpec| self.attributes.iter().any(|a| a.same_attribute(spec));
        for (i, (spec, list)) in self.weightlists.iter().enumerate() {
            if !listed(spec) {
                warnings.push(HintWarning::WeightlistForUnlistedAttribute { spec: spec.clone() });
            }
            if self.weightlists[..i]
                .iter()
                .any(|(s, _)| s.same_attribute(spec))
            {
                warnings.push(HintWarning::DuplicateWeightlist { spec: spec.clone() });
            }
            let (repeats, max) = repeated_values(list);
            for value in repeats {
                warnings.push(HintWarning::DuplicateValue {
                    spec: spec.clone(),
                    value,
                });
            }
            if let Some(max) = max
                && max > self.total_object_count
            {
                warnings.push(HintWarning::CountExceedsTotal {
                    spec: spec.clone(),
                    count: max,
                    total: self.total_object_count,
                });
            }
        }
        for (i, (spec, _)) in self.thresholds.iter().enumerate() {
            if !listed(spec) {
                warnings.push(HintWarning::ThresholdForUnlistedAttribute { spec: spec.clone() });
            }
            if self.thresholds[..i]
                .iter()
                .any(|(s, _)| s.same_attribute(spec))
            {
                warnings.push(HintWarning::DuplicateThreshold { spec: spec.clone() });
            }
        }
    }

    /// The hint as a canonical SOIF object.
    ///
    /// Order: `Attribute-Identifier-List` (entries joined by `", "`), `Source` (or
    /// `Source-1`..`Source-N` when there are several), `Total-Object-Count`, each
    /// `Weightlist-[T:A]` followed by the thresholds spelled the same, the remaining
    /// thresholds, `Certification-Type`, `Certification`, `Date`, then [`CipHint::extra`].
    /// An empty URL is written `-`; whitespace and `}` in the URL are percent-encoded.
    ///
    /// A spec whose fields hold bytes no identifier may (only possible when built by hand
    /// rather than through [`AttrSpec::new`] / [`AttrSpec::parse`]) cannot be written as
    /// `Weightlist-[..]`: its weightlist and thresholds are left out with a logged warning.
    /// Use [`CipHint::try_to_soif`] to get an error instead.
    pub fn to_soif(&self) -> cip_proto::soif::SoifObject {
        match self.write_soif(false) {
            Ok(obj) => obj,
            // Unreachable: with `strict == false` every bad name is skipped, not returned.
            Err(e) => unreachable_hint_error(e),
        }
    }

    /// Like [`CipHint::to_soif`], but a spec that cannot be written is an error.
    ///
    /// # Errors
    /// [`HintError::BadName`] for the first such spec.
    pub fn try_to_soif(&self) -> Result<cip_proto::soif::SoifObject, HintError> {
        self.write_soif(true)
    }

    fn write_soif(&self, strict: bool) -> Result<cip_proto::soif::SoifObject, HintError> {
        use cip_proto::soif::{Attribute, SoifObject};

        let url = sanitize_url(&self.url);
        let mut obj = match SoifObject::new(TEMPLATE, url) {
            Ok(obj) => obj,
            // Invariant: TEMPLATE is an identifier and `sanitize_url` yields a non-empty URL
            // with no whitespace or `}`, which is all `SoifObject::new` checks.
            Err(e) => unreachable!("sanitized hint URL rejected: {e}"),
        };
        // A spec must survive being read back from `Weightlist-[T:A]` and from the list.
        let writable = |spec: &AttrSpec, attribute: String| -> Result<bool, HintError> {
            match AttrSpec::new(&spec.template, &spec.attribute) {
                Ok(_) => Ok(true),
                Err(error) if strict => Err(HintError::BadName {
                    attribute,
                    index: None,
                    error,
                }),
                Err(error) => {
                    tracing::warn!(%attribute, %error, "attribute left out of the hint");
                    Ok(false)
                }
            }
        };
        let mut push = |name: String, value: Bytes| match Attribute::new(&name, value) {
            Ok(a) => obj.attributes.push(a),
            // Invariant: names are fixed field names, `Source-N`, or brackets around a spec
            // that `writable` accepted, all identifiers.
            Err(e) => unreachable!("hint field name {name} rejected: {e}"),
        };
        let mut list = Vec::with_capacity(self.attributes.len());
        for spec in &self.attributes {
            if writable(spec, field::ATTRIBUTE_LIST.to_owned())? {
                list.push(spec.to_string());
            }
        }
        push(
            field::ATTRIBUTE_LIST.to_owned(),
            Bytes::from(list.join(", ")),
        );
        match self.sources.as_slice() {
            [one] => push(field::SOURCE.to_owned(), Bytes::from(one.clone())),
            many => {
                for (i, s) in many.iter().enumerate() {
                    push(
                        format!("{}-{}", field::SOURCE, i + 1),
                        Bytes::from(s.clone()),
                    );
                }
            }
        }
        push(
            field::TOTAL.to_owned(),
            Bytes::from(self.total_object_count.to_string()),
        );
        let threshold_name = |t: &AttrSpec| format!("{}[{t}]", field::THRESHOLD);
        let mut written = vec![false; self.thresholds.len()];
        for (spec, list) in &self.weightlists {
            let name = format!("{}[{spec}]", field::WEIGHTLIST);
            if writable(spec, name.clone())? {
                push(name, Bytes::from(crate::weightlist::encode(list)));
            }
            for (i, (t, n)) in self.thresholds.iter().enumerate() {
                if !written[i] && t == spec {
                    written[i] = true;
                    if writable(t, threshold_name(t))? {
                        push(threshold_name(t), Bytes::from(n.to_string()));
                    }
                }
            }
        }
        for (i, (t, n)) in self.thresholds.iter().enumerate() {
            if !written[i] && writable(t, threshold_name(t))? {
                push(threshold_name(t), Bytes::from(n.to_string()));
            }
        }
        if let Some(t) = &self.certification_type {
            push(field::CERTIFICATION_TYPE.to_owned(), Bytes::from(t.clone()));
        }
        if let Some(c) = &self.certification {
            push(field::CERTIFICATION.to_owned(), c.clone());
        }
        if let Some(d) = &self.date {
            push(field::DATE.to_owned(), Bytes::from(d.clone()));
        }
        obj.attributes.extend(self.extra.iter().cloned());
        Ok(obj)
    }

    /// The threshold for `spec`: the one spelled exactly so, else the first naming the same
    /// attribute ([`AttrSpec::same_attribute`]).
    pub fn threshold(&self, spec: &AttrSpec) -> Option<u64> {
        lookup(&self.thresholds, spec).copied()
    }

    /// The weightlist for `spec`, found as [`CipHint::threshold`] finds thresholds.
    pub fn weightlist(&self, spec: &AttrSpec) -> Option<&Weightlist> {
        lookup(&self.weightlists, spec)
    }

    /// True when the `Attribute-Identifier-List` names `spec`'s attribute.
    pub fn lists(&self, spec: &AttrSpec) -> bool {
        self.attributes.iter().any(|a| a.same_attribute(spec))
    }

    /// `Date` as a time, when present and valid.
    pub fn date_time(&self) -> Option<std::time::SystemTime> {
        self.date.as_deref().and_then(|d| parse_date(d).ok())
    }
}

fn lookup<'a, T>(items: &'a [(AttrSpec, T)], spec: &AttrSpec) -> Option<&'a T> {
    items
        .iter()
        .find(|(s, _)| s == spec)
        .or_else(|| items.iter().find(|(s, _)| s.same_attribute(spec)))
        .map(|(_, v)| v)
}

#[cold]
fn unreachable_hint_error(e: HintError) -> ! {
    unreachable!("non-strict hint writing returned an error: {e}")
}

/// Makes `url` writable as a SOIF URL: `-` for empty, whitespace and `}` percent-encoded.
fn sanitize_url(url: &str) -> String {
    if url.is_empty() {
        return "-".to_owned();
    }
    let mut out = String::with_capacity(url.len());
    for c in url.chars() {
        if c.is_ascii_whitespace() || c == '}' || c == '\u{0b}' {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// The value as trimmed text; `Err((offset, problem))` when not UTF-8.
fn trimmed_text(value: &[u8]) -> Result<&str, (usize, ValueProblem)> {
    std::str::from_utf8(value)
        .map(str::trim)
        .map_err(|e| (e.valid_up_to(), ValueProblem::NotUtf8))
}

/// A decimal `u64`, surrounding whitespace ignored.
fn parse_number(value: &[u8]) -> Result<u64, (usize, ValueProblem)> {
    let lead = value.iter().take_while(|b| b.is_ascii_whitespace()).count();
    let digits = value[lead..].trim_ascii_end();
    let bad = |at: usize| {
        let found = String::from_utf8_lossy(digits).into_owned();
        (lead + at, ValueProblem::BadNumber { found })
    };
    if digits.is_empty() {
        return Err(bad(0));
    }
    let mut n: u64 = 0;
    for (i, &d) in digits.iter().enumerate() {
        if !d.is_ascii_digit() {
            return Err(bad(i));
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or_else(|| bad(0))?;
    }
    Ok(n)
}

/// Appends the entries of an `Attribute-Identifier-List` value to `out`: comma-separated,
/// whitespace around entries ignored, empty entries (a trailing comma) skipped.
fn parse_attr_list(
    value: &[u8],
    out: &mut Vec<AttrSpec>,
    warnings: &mut Vec<HintWarning>,
) -> Result<(), (usize, ValueProblem)> {
    let text = std::str::from_utf8(value).map_err(|e| (e.valid_up_to(), ValueProblem::NotUtf8))?;
    let mut start = 0;
    for part in text.split(',') {
        if !part.trim().is_empty() {
            let spec = AttrSpec::parse(part)
                .map_err(|e| (start + e.offset, ValueProblem::BadAttrSpec(e.kind)))?;
            if out.iter().any(|s| s.same_attribute(&spec)) {
                warnings.push(HintWarning::DuplicateAttribute { spec: spec.clone() });
            }
            out.push(spec);
        }
        start += part.len() + 1;
    }
    Ok(())
}

/// The values `list` holds more than once, each repeat in list order (a value held three
/// times is reported twice), and its largest count (read in the same pass).
///
/// Exact, and light for a list of millions: the values' 64-bit hashes are sorted (8 bytes
/// per entry, not a set of the values), and only entries whose hashes collide are compared.
fn repeated_values(list: &Weightlist) -> (Vec<Bytes>, Option<u64>) {
    let state = foldhash::quality::FixedState::default();
    let mut max = None;
    let mut hashes: Vec<(u64, usize)> = list
        .iter()
        .enumerate()
        .map(|(i, (v, count))| {
            max = max.max(Some(count));
            (std::hash::BuildHasher::hash_one(&state, &v[..]), i)
        })
        .collect();
    hashes.sort_unstable();
    let mut candidates: Vec<usize> = Vec::new();
    for run in hashes.chunk_by(|a, b| a.0 == b.0).filter(|r| r.len() > 1) {
        candidates.extend(run.iter().map(|&(_, i)| i));
    }
    drop(hashes);
    if candidates.is_empty() {
        return (Vec::new(), max);
    }
    candidates.sort_unstable();
    let mut seen: std::collections::HashSet<Bytes> = std::collections::HashSet::new();
    let mut repeats = Vec::new();
    let mut next = candidates.iter().peekable();
    for (i, (v, _)) in list.iter().enumerate() {
        if next.peek().is_some_and(|&&c| c == i) {
            next.next();
            let v = Bytes::copy_from_slice(&v);
            if seen.contains(&v) {
                repeats.push(v);
            } else {
                seen.insert(v);
            }
        }
    }
    (repeats, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_values_are_exact_and_in_list_order() {
        let list = crate::weightlist::parse(&Bytes::from_static(
            br"a;1, b;2, a;3, c\,d;1, c\,d;1, a;1, e;1",
        ))
        .unwrap();
        assert_eq!(repeated_values(&list).1, Some(3));
        assert_eq!(
            repeated_values(&list).0,
            [
                Bytes::from_static(b"a"),
                Bytes::from_static(b"c,d"),
                Bytes::from_static(b"a")
            ]
        );
        let distinct: Weightlist = (0..10_000)
            .map(|i| WeightEntry {
                value: Bytes::from(format!("v{i}")),
                count: 1,
            })
            .collect();
        assert!(repeated_values(&distinct).0.is_empty());
        assert_eq!(repeated_values(&Weightlist::default()), (Vec::new(), None));
    }
    use cip_proto::soif::{Limits, SoifObject, parse_all};
    use proptest::prelude::*;

    fn spec(s: &str) -> AttrSpec {
        AttrSpec::parse(s).unwrap()
    }

    fn object(pairs: &[(&str, &[u8])]) -> SoifObject {
        let mut obj = SoifObject::new("CIP-HINT", "-").unwrap();
        for (n, v) in pairs {
            obj.push(n, Bytes::copy_from_slice(v)).unwrap();
        }
        obj
    }

    #[test]
    fn attr_specs() {
        let s = AttrSpec::parse("  DOCUMENT:Author-1 ").unwrap();
        assert_eq!(
            (s.template.as_str(), s.attribute.as_str()),
            ("DOCUMENT", "Author-1")
        );
        assert_eq!(s.to_string(), "DOCUMENT:Author-1");
        assert!(s.matches("document", "AUTHOR"));
        assert!(s.matches("Document", "author-3"));
        assert!(!s.matches("IMAGE", "Author"));
        assert!(!s.matches("DOCUMENT", "Authors"));
        assert!(s.same_attribute(&spec("document:author")));
        let e = AttrSpec::parse(" Author").unwrap_err();
        assert_eq!(
            e,
            AttrSpecError {
                offset: 1,
                kind: AttrSpecErrorKind::MissingColon
            }
        );
        let e = AttrSpec::parse(":A").unwrap_err();
        assert_eq!(e.kind, AttrSpecErrorKind::EmptyTemplate);
        let e = AttrSpec::parse("T:").unwrap_err();
        assert_eq!((e.offset, e.kind), (2, AttrSpecErrorKind::EmptyAttribute));
        let e = AttrSpec::parse("T:A b").unwrap_err();
        assert_eq!(
            (e.offset, e.kind),
            (3, AttrSpecErrorKind::InvalidByte { found: b' ' })
        );
        let e = AttrSpec::parse("T:A:B").unwrap_err();
        assert_eq!(e.offset, 3);
        assert_eq!(
            "IMAGE:Subject".parse::<AttrSpec>().unwrap(),
            spec("IMAGE:Subject")
        );
    }

    #[test]
    fn tolerant_field_names_and_values() {
        let obj = object(&[
            ("attribute-identifier-list", b"DOCUMENT:Author ,"),
            ("ATTRIBUTE-IDENTIFIER-LIST-2", b" ,IMAGE:Subject"),
            ("source", b"  http://s/  "),
            ("TOTAL-OBJECT-COUNT", b" 7\r\n"),
            ("weightlist-[document:author]", b"A;3,"),
            ("threshold-[IMAGE:Subject]", b"2"),
            ("X-Custom", b"kept"),
            ("date", b" Sun, 05 Jan 1997 08:33:33 GMT "),
        ]);
        let (hint, warnings) = CipHint::from_soif(&obj).unwrap();
        assert_eq!(
            hint.attributes,
            [spec("DOCUMENT:Author"), spec("IMAGE:Subject")]
        );
        assert_eq!(hint.sources, ["http://s/"]);
        assert_eq!(hint.total_object_count, 7);
        assert_eq!(hint.weightlist(&spec("DOCUMENT:AUTHOR")).unwrap().len(), 1);
        assert_eq!(hint.threshold(&spec("image:subject")), Some(2));
        assert_eq!(hint.extra.len(), 1);
        assert_eq!(hint.date.as_deref(), Some("Sun, 05 Jan 1997 08:33:33 GMT"));
        assert!(warnings.is_empty(), "{warnings:?}");
        // Canonical output spells the names the RFC's way and keeps the unknown attribute.
        let out = String::from_utf8(hint.to_soif().to_bytes()).unwrap();
        assert!(out.contains("Attribute-Identifier-List{30}:\tDOCUMENT:Author, IMAGE:Subject\n"));
        assert!(out.contains("\nSource{9}:\thttp://s/\n"));
        assert!(out.contains("\nWeightlist-[document:author]{3}:\tA;3\n"));
        assert!(out.contains("\nX-Custom{4}:\tkept\n"));
    }

    #[test]
    fn warnings() {
        let obj = object(&[
            ("Attribute-Identifier-List", b"D:A, d:a-1"),
            ("Total-Object-Count", b"2"),
            ("Total-Object-Count", b"3"),
            ("Weightlist-[D:A]", b"x;1, x;3"),
            ("Weightlist-[D:B]", b"y;1"),
            ("Weightlist-[D:a]", b""),
            ("Threshold-[D:A]", b"1"),
            ("Threshold-[d:A-2]", b"1"),
            ("Date", b"yesterday"),
        ]);
        let (hint, w) = CipHint::from_soif(&obj).unwrap();
        assert_eq!(hint.total_object_count, 2);
        assert_eq!(hint.extra.len(), 1);
        assert_eq!(hint.date.as_deref(), Some("yesterday"));
        assert!(hint.date_time().is_none());
        let has = |pred: &dyn Fn(&HintWarning) -> bool| w.iter().any(pred);
        assert!(has(&|x| matches!(
            x,
            HintWarning::DuplicateAttribute { .. }
        )));
        assert!(has(
            &|x| matches!(x, HintWarning::DuplicateField { name } if name == "Total-Object-Count")
        ));
        assert!(has(
            &|x| matches!(x, HintWarning::DuplicateValue { value, .. } if value == "x")
        ));
        assert!(has(&|x| matches!(
            x,
            HintWarning::CountExceedsTotal {
                count: 3,
                total: 2,
                ..
            }
        )));
        assert!(has(
            &|x| matches!(x, HintWarning::WeightlistForUnlistedAttribute { spec } if spec.attribute == "B")
        ));
        assert!(has(&|x| matches!(
            x,
            HintWarning::DuplicateWeightlist { .. }
        )));
        assert!(has(&|x| matches!(
            x,
            HintWarning::DuplicateThreshold { .. }
        )));
        assert!(has(&|x| matches!(x, HintWarning::BadDate { .. })));
        assert_eq!(w.len(), 8, "{w:?}");
        let (_, w) = CipHint::from_soif(&object(&[])).unwrap();
        assert_eq!(
            w,
            [
                HintWarning::MissingAttributeList,
                HintWarning::MissingTotalObjectCount
            ]
        );
    }

    #[test]
    fn errors_name_the_attribute_and_offset() {
        let err = |pairs: &[(&str, &[u8])]| CipHint::from_soif(&object(pairs)).unwrap_err();
        let e = err(&[("Weightlist-[D:A]", b"a;1, b;2x")]);
        assert_eq!(e.attribute(), Some("Weightlist-[D:A]"));
        assert_eq!(e.value_offset(), Some(7));
        assert_eq!(e.attribute_index(), Some(0));
        assert!(
            e.to_string().starts_with("Weightlist-[D:A]: byte 7: "),
            "{e}"
        );
        let e = err(&[("Source", b"ok"), ("Total-Object-Count", b" 1O")]);
        assert_eq!(
            (e.attribute(), e.value_offset(), e.attribute_index()),
            (Some("Total-Object-Count"), Some(2), Some(1))
        );
        let e = err(&[("Threshold-[D:A]", b"-1")]);
        assert_eq!(e.value_offset(), Some(0));
        let e = err(&[("Total-Object-Count", b"99999999999999999999")]);
        assert!(matches!(
            e,
            HintError::Value {
                problem: ValueProblem::BadNumber { .. },
                ..
            }
        ));
        let e = err(&[("Attribute-Identifier-List", b"D:A, Author, I:S")]);
        assert_eq!(e.value_offset(), Some(5));
        let e = err(&[("Attribute-Identifier-List", b"D:A, D:\xff")]);
        assert!(matches!(
            e,
            HintError::Value {
                offset: 7,
                problem: ValueProblem::NotUtf8,
                ..
            }
        ));
        let e = err(&[("Weightlist-[DA]", b"")]);
        assert!(
            matches!(e, HintError::BadName { index: Some(0), .. }),
            "{e}"
        );
        let e = CipHint::from_soif(&SoifObject::new("FILE", "-").unwrap()).unwrap_err();
        assert!(matches!(e, HintError::WrongTemplate { .. }));
        let e =
            CipHint::from_soif(&SoifObject::new("cip-hint", &b"x\xff"[..]).unwrap()).unwrap_err();
        assert_eq!(e, HintError::UrlNotUtf8 { offset: 1 });
    }

    #[test]
    fn writer_never_emits_bad_soif() {
        let mut hint = CipHint {
            url: "http://a b/}".into(),
            ..CipHint::default()
        };
        assert_eq!(hint.to_soif().url_str(), Some("http://a%20b/%7D"));
        hint.url.clear();
        assert_eq!(hint.to_soif().url_str(), Some("-"));
        let bad = AttrSpec {
            template: "D".into(),
            attribute: "A]".into(),
        };
        hint.weightlists.push((bad.clone(), Weightlist::default()));
        hint.thresholds.push((bad, 3));
        let e = hint.try_to_soif().unwrap_err();
        assert!(matches!(e, HintError::BadName { index: None, .. }), "{e}");
        let obj = hint.to_soif();
        assert!(
            obj.attributes
                .iter()
                .all(|a| !a.name.as_str().contains("A]"))
        );
        // What the writer emits always reads back.
        assert_eq!(parse_all(obj.to_bytes(), Limits::default()).unwrap(), [obj]);
    }

    #[test]
    fn dates() {
        let t = parse_date("Sun, 05 Jan 1997 08:33:33 GMT").unwrap();
        assert_eq!(format_date(t), "Sun, 05 Jan 1997 08:33:33 GMT");
        assert!(parse_date("Sunday, 05-Jan-97 08:33:33 GMT").is_ok());
        assert!(parse_date("Mon, 05 Jan 1997 08:33:33 GMT").is_err());
    }

    fn spec_strategy() -> impl Strategy<Value = AttrSpec> {
        ("[A-Za-z][A-Za-z0-9_.-]{0,6}", "[A-Za-z][A-Za-z0-9_.-]{0,6}")
            .prop_map(|(t, a)| AttrSpec::new(&t, &a).unwrap())
    }

    fn hint_strategy() -> impl Strategy<Value = CipHint> {
        let entry =
            (prop::collection::vec(any::<u8>(), 0..8), any::<u64>()).prop_map(|(v, count)| {
                WeightEntry {
                    value: Bytes::from(v),
                    count,
                }
            });
        let list = prop::collection::vec(entry, 0..5).prop_map(Weightlist::new);
        (
            "[a-z:/.]{1,12}",
            prop::collection::vec(spec_strategy(), 0..4),
            prop::collection::vec("[ -~]{0,10}", 0..3),
            any::<u64>(),
            prop::collection::vec((spec_strategy(), list), 0..3),
            prop::option::of("[A-Za-z-]{1,8}"),
            prop::option::of(prop::collection::vec(any::<u8>(), 0..8)),
        )
            .prop_map(|(url, attributes, sources, total, weightlists, ct, cert)| {
                // Thresholds in canonical order: one after each weightlist, spelled the same.
                let thresholds = weightlists.iter().map(|(s, _)| (s.clone(), 2)).collect();
                CipHint {
                    url,
                    attributes,
                    sources: sources.into_iter().map(|s| s.trim().to_owned()).collect(),
                    total_object_count: total,
                    weightlists,
                    thresholds,
                    certification_type: ct,
                    certification: cert.map(Bytes::from),
                    date: Some("Sun, 05 Jan 1997 08:33:33 GMT".into()),
                    extra: Vec::new(),
                }
            })
    }

    proptest! {
        #[test]
        fn canonical_round_trip(hint in hint_strategy()) {
            let bytes = hint.to_soif().to_bytes();
            let objects = parse_all(bytes, Limits::default()).unwrap();
            prop_assert_eq!(objects.len(), 1);
            let (back, _) = CipHint::from_soif(&objects[0]).unwrap();
            prop_assert_eq!(back, hint);
        }
    }
}
