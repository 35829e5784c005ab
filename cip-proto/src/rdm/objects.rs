//! The description objects: `@RDMSERVER`, `@SCHEMA`, `@TAXONOMY` and `@CLASSIFICATION`.

use bytes::Bytes;

use super::{RdmError, object, push, text};
use crate::soif::SoifObject;

fn is(o: &SoifObject, template: &str) -> bool {
    o.template().as_str().eq_ignore_ascii_case(template)
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A server description (`@RDMSERVER`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerDescription {
    /// The object's URL: the server's CSID (or `-`).
    pub url: String,
    /// `Supported-RDM-Type`.
    pub supported_types: Vec<String>,
    /// `Supported-RDM-Query-Language`.
    pub supported_query_languages: Vec<String>,
    /// `SD-Last-Modified`.
    pub last_modified: Option<String>,
    /// `SD-Expires`.
    pub expires: Option<String>,
    /// `Description`.
    pub description: Option<String>,
    /// `Supported-Catalog-Service-ID`.
    pub catalogs: Vec<String>,
    /// `Maintainer`.
    pub maintainer: Option<String>,
    /// `RD-Sample-N` (also read as `Sample-RD-N`): sample RDs as SOIF text.
    pub samples: Vec<Bytes>,
}

impl ServerDescription {
    /// As a SOIF object.
    pub fn to_object(&self) -> SoifObject {
        let url = if self.url.is_empty() { "-" } else { &self.url };
        let mut o = SoifObject::new("RDMSERVER", url.as_bytes().to_vec())
            .unwrap_or_else(|_| object("RDMSERVER"));
        if let Some(d) = &self.description {
            push(&mut o, "Description", d);
        }
        push(
            &mut o,
            "Supported-RDM-Type",
            &self.supported_types.join(","),
        );
        if !self.catalogs.is_empty() {
            push(
                &mut o,
                "Supported-Catalog-Service-ID",
                &self.catalogs.join(","),
            );
        }
        push(
            &mut o,
            "Supported-RDM-Query-Language",
            &self.supported_query_languages.join(","),
        );
        if let Some(m) = &self.maintainer {
            push(&mut o, "Maintainer", m);
        }
        for (i, s) in self.samples.iter().enumerate() {
            #[allow(
                clippy::expect_used,
                reason = "a fixed name with a number suffix is an identifier"
            )]
            o.push(&format!("RD-Sample-{}", i + 1), s.clone())
                .expect("a valid name");
        }
        if let Some(d) = &self.last_modified {
            push(&mut o, "SD-Last-Modified", d);
        }
        if let Some(d) = &self.expires {
            push(&mut o, "SD-Expires", d);
        }
        o
    }

    /// Reads an `@RDMSERVER`.
    ///
    /// # Errors
    /// When it is another template or lacks a required attribute.
    pub fn from_object(o: &SoifObject) -> Result<Self, RdmError> {
        if !is(o, "RDMSERVER") {
            return Err(RdmError::Body("expected @RDMSERVER".into()));
        }
        let get = |n: &str| o.first(n).map(|v| text(v));
        let mut sd = Self {
            url: text(o.url()),
            supported_types: list(
                &get("Supported-RDM-Type").ok_or(RdmError::Missing("Supported-RDM-Type"))?,
            ),
            supported_query_languages: list(
                &get("Supported-RDM-Query-Language")
                    .ok_or(RdmError::Missing("Supported-RDM-Query-Language"))?,
            ),
            last_modified: get("SD-Last-Modified"),
            expires: get("SD-Expires"),
            description: get("Description"),
            catalogs: get("Supported-Catalog-Service-ID")
                .map(|v| list(&v))
                .unwrap_or_default(),
            maintainer: get("Maintainer"),
            samples: Vec::new(),
        };
        for a in &o.attributes {
            let base = a.name.base_name();
            if base.eq_ignore_ascii_case("RD-Sample") || base.eq_ignore_ascii_case("Sample-RD") {
                sd.samples.push(a.value.clone());
            }
        }
        Ok(sd)
    }
}

/// The per-entry attributes of the schema language, in the order they are written.
pub const ENTRY_ATTRIBUTES: [&str; 16] = [
    "SOIF-Attribute",
    "Description",
    "Data-Type",
    "Content-Type",
    "Enforce-Uniqueness",
    "Index-Attribute",
    "Is-Internal",
    "Default-View-Order",
    "Default-View-Attribute",
    "Table-Name",
    "Column-Name",
    "System-Table-Name",
    "System-Column-Name",
    "Foreign-Key-System-Table-Name",
    "Foreign-Key-System-Column-Name",
    "In-Root-Table",
];

/// One attribute described by a schema.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchemaEntry {
    /// `SOIF-Attribute`: the attribute's name in RDs.
    pub soif_attribute: String,
    /// The entry's other properties (`Data-Type`, `Index-Attribute`, ...) by their names in
    /// [`ENTRY_ATTRIBUTES`] spelling, in order.
    pub properties: Vec<(String, String)>,
}

impl SchemaEntry {
    /// An entry for `attribute` with no properties.
    pub fn new(attribute: &str) -> Self {
        Self {
            soif_attribute: attribute.to_owned(),
            properties: Vec::new(),
        }
    }

    /// Sets property `name` (replacing an earlier value).
    pub fn set(&mut self, name: &str, value: impl Into<String>) -> &mut Self {
        let value = value.into();
        match self
            .properties
            .iter_mut()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            Some(p) => p.1 = value,
            None => self.properties.push((name.to_owned(), value)),
        }
        self
    }

    /// Property `name` (`SOIF-Attribute` included), ignoring case.
    pub fn get(&self, name: &str) -> Option<&str> {
        if name.eq_ignore_ascii_case("SOIF-Attribute") {
            return Some(&self.soif_attribute);
        }
        self.properties
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A schema description (`@SCHEMA`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schema {
    /// The object URL: where the schema can be fetched (`-` when nowhere).
    pub url: String,
    /// `Schema-Definition-Language-Version`.
    pub language_version: String,
    /// `Schema-Name`: the template type of the RDs it describes.
    pub name: Option<String>,
    /// `Last-Modified`.
    pub last_modified: Option<String>,
    /// `Maintainer`.
    pub maintainer: Option<String>,
    /// The entries, in order.
    pub entries: Vec<SchemaEntry>,
}

/// Splits `Name-N` into `("Name", Some(N))`.
fn suffixed(name: &str) -> (&str, Option<u64>) {
    match name.rsplit_once('-') {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
            (base, n.parse().ok())
        }
        _ => (name, None),
    }
}

impl Schema {
    /// As a SOIF object (`Number-of-Entries` counted).
    pub fn to_object(&self) -> SoifObject {
        let url = if self.url.is_empty() { "-" } else { &self.url };
        let mut o =
            SoifObject::new("SCHEMA", url.as_bytes().to_vec()).unwrap_or_else(|_| object("SCHEMA"));
        push(
            &mut o,
            "Schema-Definition-Language-Version",
            &self.language_version,
        );
        if let Some(n) = &self.name {
            push(&mut o, "Schema-Name", n);
        }
        if let Some(d) = &self.last_modified {
            push(&mut o, "Last-Modified", d);
        }
        push(&mut o, "Number-of-Entries", &self.entries.len().to_string());
        if let Some(m) = &self.maintainer {
            push(&mut o, "Maintainer", m);
        }
        for (i, e) in self.entries.iter().enumerate() {
            let n = i + 1;
            push(&mut o, &format!("SOIF-Attribute-{n}"), &e.soif_attribute);
            for (k, v) in &e.properties {
                if o.push(&format!("{k}-{n}"), v.as_bytes().to_vec()).is_err() {
                    continue;
                }
            }
        }
        o
    }

    /// Reads an `@SCHEMA`: schema-level attributes, and per-entry ones grouped by their
    /// `-N` suffix (an unsuffixed per-entry attribute belongs to entry 0, for one-entry
    /// schemas written without suffixes).
    ///
    /// # Errors
    /// When it is another template, or an entry has no `SOIF-Attribute`.
    pub fn from_object(o: &SoifObject) -> Result<Self, RdmError> {
        if !is(o, "SCHEMA") {
            return Err(RdmError::Body("expected @SCHEMA".into()));
        }
        let mut s = Self {
            url: text(o.url()),
            language_version: "1.0".into(),
            ..Self::default()
        };
        let mut entries: std::collections::BTreeMap<u64, SchemaEntry> = Default::default();
        for a in &o.attributes {
            let v = text(&a.value);
            let (base, n) = suffixed(a.name.as_str());
            let per_entry = ENTRY_ATTRIBUTES
                .iter()
                .find(|e| e.eq_ignore_ascii_case(base));
            match (per_entry, n) {
                (Some(k), n) => {
                    let e = entries.entry(n.unwrap_or(0)).or_default();
                    if k.eq_ignore_ascii_case("SOIF-Attribute") {
                        e.soif_attribute = v;
                    } else {
                        e.set(k, v);
                    }
                }
                (None, _) => match a.name.as_str().to_ascii_lowercase().as_str() {
                    "schema-definition-language-version" => s.language_version = v,
                    "schema-name" => s.name = Some(v),
                    "last-modified" => s.last_modified = Some(v),
                    "maintainer" => s.maintainer = Some(v),
                    _ => {}
                },
            }
        }
        for (n, e) in entries {
            if e.soif_attribute.is_empty() {
                return Err(RdmError::Body(format!(
                    "@SCHEMA entry {n} has no SOIF-Attribute"
                )));
            }
            s.entries.push(e);
        }
        Ok(s)
    }
}

/// One classification of a taxonomy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Classification {
    /// `Id`.
    pub id: String,
    /// `Parent-Id` (`ROOT` for top-level classifications).
    pub parent: String,
    /// `Description`.
    pub description: Option<String>,
}

/// A taxonomy: one `@TAXONOMY` and its `@CLASSIFICATION`s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taxonomy {
    /// `Id`.
    pub id: String,
    /// `Description`.
    pub description: Option<String>,
    /// The classifications, in order.
    pub classifications: Vec<Classification>,
}

/// The parent id of top-level classifications.
pub const ROOT: &str = "ROOT";

impl Taxonomy {
    /// Reads a taxonomy from its objects (a `@TAXONOMY` first).
    ///
    /// # Errors
    /// When the first object is not a `@TAXONOMY`, another is not a `@CLASSIFICATION`, or
    /// a required attribute is missing.
    pub fn from_objects(objects: &[SoifObject]) -> Result<Self, RdmError> {
        let (first, rest) = objects
            .split_first()
            .ok_or_else(|| RdmError::Body("a taxonomy starts with @TAXONOMY".into()))?;
        if !is(first, "TAXONOMY") {
            return Err(RdmError::Body("a taxonomy starts with @TAXONOMY".into()));
        }
        let id = first
            .first("Id")
            .map(|v| text(v))
            .ok_or(RdmError::Missing("Id"))?;
        let mut t = Self {
            id,
            description: first.first("Description").map(|v| text(v)),
            classifications: Vec::new(),
        };
        for o in rest {
            if !is(o, "CLASSIFICATION") {
                return Err(RdmError::Body(format!(
                    "expected @CLASSIFICATION, found @{}",
                    o.template().as_str()
                )));
            }
            let get = |n: &'static str| o.first(n).map(|v| text(v)).ok_or(RdmError::Missing(n));
            t.classifications.push(Classification {
                id: get("Id")?,
                parent: get("Parent-Id")?,
                description: o.first("Description").map(|v| text(v)),
            });
        }
        Ok(t)
    }

    /// The `@TAXONOMY` object alone.
    pub fn header_object(&self) -> SoifObject {
        let mut o = object("TAXONOMY");
        push(&mut o, "Id", &self.id);
        if let Some(d) = &self.description {
            push(&mut o, "Description", d);
        }
        o
    }

    /// A classification as a `@CLASSIFICATION` object of this taxonomy.
    pub fn classification_object(&self, c: &Classification) -> SoifObject {
        let mut o = object("CLASSIFICATION");
        push(&mut o, "Id", &c.id);
        push(&mut o, "Parent-Id", &c.parent);
        push(&mut o, "Taxonomy-Id", &self.id);
        if let Some(d) = &c.description {
            push(&mut o, "Description", d);
        }
        o
    }

    /// The whole taxonomy as objects.
    pub fn to_objects(&self) -> Vec<SoifObject> {
        std::iter::once(self.header_object())
            .chain(
                self.classifications
                    .iter()
                    .map(|c| self.classification_object(c)),
            )
            .collect()
    }

    /// `id` and the classifications below it down to `depth` levels (`None`: all), in
    /// taxonomy order; `ROOT` stands for the top. `None` when `id` is unknown.
    pub fn subtree(&self, id: &str, depth: Option<usize>) -> Option<Vec<&Classification>> {
        let is_root = id.eq_ignore_ascii_case(ROOT);
        let mut out: Vec<&Classification> = Vec::new();
        let mut level: Vec<&str> = if is_root {
            vec![ROOT]
        } else {
            let c = self.classifications.iter().find(|c| c.id == id)?;
            out.push(c);
            vec![c.id.as_str()]
        };
        let mut d = 0;
        while !level.is_empty() && depth.is_none_or(|max| d < max) {
            let next: Vec<&Classification> = self
                .classifications
                .iter()
                .filter(|c| {
                    level.iter().any(|p| {
                        if *p == ROOT {
                            c.parent.eq_ignore_ascii_case(ROOT)
                        } else {
                            c.parent == *p
                        }
                    })
                })
                .filter(|c| !out.iter().any(|o| o.id == c.id))
                .collect();
            level = next.iter().map(|c| c.id.as_str()).collect();
            out.extend(next);
            d += 1;
        }
        // Taxonomy order.
        out.sort_by_key(|c| {
            self.classifications
                .iter()
                .position(|x| x.id == c.id)
                .unwrap_or(usize::MAX)
        });
        Some(out)
    }
}
