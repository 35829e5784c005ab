//! `[export]`: the attributes and thresholds of the out-bound hint.

use std::collections::BTreeMap;

use hints::builder::Thresholds;
use hints::hint::AttrSpec;
use serde::Deserialize;

use super::validate::Validator;

/// `[export]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExport {
    /// `Template:Attribute` pairs the out-bound hint covers.
    pub attributes: Option<Vec<String>>,
    /// Values held by fewer objects than this are left out (default 1: keep all).
    pub default_threshold: Option<u64>,
    /// Per-attribute thresholds, `"DOCUMENT:Author" = 2`.
    #[serde(default)]
    pub thresholds: BTreeMap<String, u64>,
}

/// The out-bound hint's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// `Template:Attribute` pairs.
    pub attributes: Vec<AttrSpec>,
    /// Thresholds: a default and per-attribute overrides.
    pub thresholds: Thresholds,
}

/// Attributes exported when `[export] attributes` is not given.
pub const DEFAULT_EXPORT: &[&str] = &[
    "DOCUMENT:Author",
    "DOCUMENT:Title",
    "DOCUMENT:Keywords",
    "FILE:Author",
    "FILE:Title",
    "FILE:Keywords",
];

fn parse_attr_spec(s: &str) -> Result<AttrSpec, String> {
    AttrSpec::parse(s)
        .map_err(|e| format!("{s:?} is not Template:Attribute (e.g. \"DOCUMENT:Author\"): {e}"))
}

impl Validator<'_> {
    pub(super) fn export(&mut self, raw: RawExport) -> ExportConfig {
        let names: Vec<String> = match raw.attributes {
            Some(a) => a,
            None => DEFAULT_EXPORT.iter().map(|s| (*s).to_owned()).collect(),
        };
        if names.is_empty() {
            self.err(
                "export.attributes",
                "must name at least one Template:Attribute",
            );
        }
        let mut attributes = Vec::new();
        for (i, n) in names.iter().enumerate() {
            match parse_attr_spec(n) {
                Ok(spec) => {
                    if attributes
                        .iter()
                        .any(|a: &AttrSpec| a.same_attribute(&spec))
                    {
                        self.err(
                            format!("export.attributes[{i}]"),
                            format!("{n:?} is listed twice"),
                        );
                    } else {
                        attributes.push(spec);
                    }
                }
                Err(m) => self.err(format!("export.attributes[{i}]"), m),
            }
        }
        let default = match raw.default_threshold {
            Some(0) => {
                self.err("export.default_threshold", "must be at least 1");
                1
            }
            Some(n) => n,
            None => 1,
        };
        let mut thresholds = Thresholds::new(default);
        for (k, t) in raw.thresholds {
            let key = format!("export.thresholds.\"{k}\"");
            let Ok(spec) = parse_attr_spec(&k) else {
                self.err(key, "is not a Template:Attribute pair");
                continue;
            };
            if t == 0 {
                self.err(key.clone(), "must be at least 1");
            }
            if attributes.iter().any(|a| a.same_attribute(&spec)) {
                thresholds.set(spec, t.max(1));
            } else {
                self.err(
                    key,
                    "names an attribute that export.attributes does not list",
                );
            }
        }
        ExportConfig {
            attributes,
            thresholds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attr_specs() {
        let s = parse_attr_spec("DOCUMENT:Author").unwrap();
        assert_eq!(
            (s.template.as_str(), s.attribute.as_str()),
            ("DOCUMENT", "Author")
        );
        assert!(parse_attr_spec("DOCUMENT").is_err());
        assert!(parse_attr_spec(":A").is_err());
        assert!(parse_attr_spec("A B:C").is_err());
    }
}
